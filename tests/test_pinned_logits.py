"""Logits pinned to the bit: a guard for refactors that must not change what is computed.

Each case evaluates a fixed token sequence (a batched prompt, then single tokens, the path
generation takes) and compares the sha256 of every logit row with `pinned_logits.json`, per
kernel tier. A change that alters numerics on purpose re-pins with `PI_PIN_WRITE=1 pytest
tests/test_pinned_logits.py` and says why in its commit. A tier with no pins here is skipped.
The synthetic files are pinned too, so a change of their generator (or of gguf's quantizer) is
told apart from a change of the runtime.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from synthetic import powerinfer_layout, write_llama_gguf, write_profiled_relu_gguf

PINS = Path(__file__).with_name("pinned_logits.json")
WRITE = os.environ.get("PI_PIN_WRITE") == "1"
# auto: the best tier of this CPU, named by what it chose; avx2 forced too, so that an AVX-512
# machine keeps the AVX2 tier's pins checked (it skips where the CPU lacks AVX2)
TIERS = {1: "ref", 2: "avx2", 0: "auto"}


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def _file_digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def pins():
    table = json.loads(PINS.read_text()) if PINS.exists() else {}
    yield table
    if WRITE:
        PINS.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")


def _check(pins, key: str, value: str) -> None:
    if WRITE:
        pins[key] = value
    elif key not in pins:
        pytest.skip(f"no pin for {key}")
    else:
        assert value == pins[key], f"{key} changed: re-pin only if the change of numerics is meant"


def _run(path, kernel_impl: int, n_prompt: int, n_single: int, **kw):
    """Logits of every position: n_prompt tokens in one batch, then n_single one at a time."""
    from pypowerinfer import Llama, UnsupportedError

    try:
        llm = Llama(str(path), n_ctx=128, n_threads=2, n_threads_batch=2, logits_all=True, verbose=False,
                    kernel_impl=kernel_impl, **kw)
    except UnsupportedError as e:  # a forced tier this CPU lacks
        pytest.skip(str(e))
    with llm:
        rng = np.random.default_rng(11)
        tokens = rng.integers(2, llm.n_vocab(), n_prompt + n_single).tolist()
        llm.eval(tokens[:n_prompt])
        for t in tokens[n_prompt:]:
            llm.eval([t])
        return llm._ctx.kernels, _digest(llm.scores[: n_prompt + n_single])


def _pin(pins, case: str, path, kernel_impl: int, n_prompt: int = 24, n_single: int = 6, **kw) -> None:
    tier, digest = _run(path, kernel_impl, n_prompt, n_single, **kw)
    _check(pins, f"{case}/{tier}", digest)


@pytest.mark.parametrize("kernel_impl", list(TIERS), ids=list(TIERS.values()))
def test_smollm2(pins, smollm2_path, kernel_impl):
    _pin(pins, "smollm2", smollm2_path, kernel_impl)


@pytest.mark.parametrize("kernel_impl", list(TIERS), ids=list(TIERS.values()))
def test_gemma3(pins, gemma3_path, kernel_impl):
    _pin(pins, "gemma3", gemma3_path, kernel_impl, n_prompt=16, n_single=4)


@pytest.fixture(scope="module")
def relu_files(tmp_path_factory, pins):
    """A sparse ReLU file with its predictors, and PowerInfer's layout (PWRI, ffn_down_t only)."""
    folder = tmp_path_factory.mktemp("pinned")
    profiled = write_profiled_relu_gguf(folder, "Q4_0", n_layer=3, n_ff=640)
    plain = write_llama_gguf(folder / "falcon.gguf", arch="falcon", weight_type="Q8_0", n_ff=256, n_layer=2)
    pwri = powerinfer_layout(plain, folder / "falcon.pwri.gguf")
    for name, path in (("relu-q4_0", profiled), ("falcon-pwri", pwri)):
        _check(pins, f"file/{name}", _file_digest(path))
    return {"profiled": profiled, "plain": str(folder / "plain-Q4_0.gguf"), "pwri": pwri}


SPARSE_CASES = {
    "dense": dict(sparse=False),
    "sparse-all": dict(sparse="all"),
    "sparse-decode": dict(sparse=True),
    "split-host-50": dict(sparse="all", vram_budget="50%", hybrid_device="host"),
    "split-cpu-50": dict(sparse="all", vram_budget="50%", hybrid_device="none"),
}


@pytest.mark.parametrize("kernel_impl", list(TIERS), ids=list(TIERS.values()))
@pytest.mark.parametrize("case", list(SPARSE_CASES))
def test_sparse_relu(pins, relu_files, case, kernel_impl):
    _pin(pins, f"relu-{case}", relu_files["profiled"], kernel_impl, **SPARSE_CASES[case])


@pytest.mark.parametrize("kernel_impl", list(TIERS), ids=list(TIERS.values()))
def test_layer_offload_stand_in(pins, relu_files, kernel_impl):
    _pin(pins, "relu-offload-host", relu_files["plain"], kernel_impl, n_gpu_layers=-1, hybrid_device="host")


@pytest.mark.parametrize("kernel_impl", list(TIERS), ids=list(TIERS.values()))
@pytest.mark.parametrize("sparse", [False, "all"], ids=["dense", "sparse"])
def test_powerinfer_file(pins, relu_files, sparse, kernel_impl):
    _pin(pins, f"falcon-pwri-{'sparse' if sparse else 'dense'}", relu_files["pwri"], kernel_impl, sparse=sparse)
