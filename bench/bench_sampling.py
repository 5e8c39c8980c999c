"""Per-token cost of Sampler.sample() at real vocabulary sizes.

    pytest bench/bench_sampling.py --benchmark-columns=min,median,mean

49152 is SmolLM2's vocabulary, 151936 Qwen2's. The logits are random normals (std 3), which spread
probability wider than a trained model does, so top-p and min-p keep more candidates than usual: a
conservative case. The module is loaded from its file, so the bench runs without the native library.
"""
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parent.parent / "pypowerinfer" / "sampling.py"
_spec = importlib.util.spec_from_file_location("pypowerinfer_sampling_bench", _PATH)
S = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = S
_spec.loader.exec_module(S)

CASES = {
    "defaults": S.SamplingParams(),
    "penalties": S.SamplingParams(repeat_penalty=1.1, frequency_penalty=0.1, presence_penalty=0.1),
    "greedy": S.SamplingParams(temperature=0.0),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("n_vocab", [49152, 151936])
def test_sample_per_token(benchmark, n_vocab, case):
    rng = np.random.default_rng(0)
    logits = (rng.normal(size=n_vocab) * 3).astype(np.float32)
    logits.flags.writeable = False  # as the native view arrives
    history = rng.integers(0, n_vocab, 64).astype(np.int32)
    sampler = S.Sampler(n_vocab, seed=1)
    token = benchmark(sampler.sample, logits, history, CASES[case])
    assert 0 <= token < n_vocab
