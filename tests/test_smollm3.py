"""SmolLM3 (the llama block whose layers il % 4 == 3 have no rope) on small random-weight files,
against llama-cpp-python as the oracle; its descriptor is archs.c's smollm3 row."""
from __future__ import annotations

import numpy as np
import pytest

from synthetic import write_llama_gguf
from test_qwen3 import agreements, assert_agreement, assert_exact

from pypowerinfer.model import NativeContext, NativeModel, cuda_device_count

DIMS = dict(arch="smollm3", n_vocab=512, n_ctx_train=512)

# 4 layers (the last one NoPE) and 8 (layers 3 and 7); tied and separate outputs; GQA 2:1 and 4:1
CASES = {
    "q8_0-tied-4": dict(weight_type="Q8_0", n_layer=4, n_embd=128, n_head=4, n_head_kv=2, n_ff=256),
    "q4_0-output-8": dict(weight_type="Q4_0", n_layer=8, n_embd=256, n_head=4, n_head_kv=1, n_ff=512,
                          output_type="Q8_0"),
}


def write(path, case: dict, **over) -> str:
    return write_llama_gguf(path, **{**DIMS, **case, **over})


@pytest.fixture(scope="module")
def agreement(tmp_path_factory):
    return agreements(tmp_path_factory.mktemp("smollm3"), CASES, write)


@pytest.mark.parametrize("name", CASES)
def test_teacher_forced_logits_match_llama_cpp(agreement, name):
    """KL within 1.5x llama.cpp's own batched / one-token KL + 1e-4, top-1 within a point of its
    own, over 512 tokens (test_qwen3.assert_agreement)."""
    assert_agreement(name, agreement[name])


@pytest.mark.parametrize("name", CASES)
def test_batched_equals_one_token(agreement, name):
    r = agreement[name]["ours"]
    assert r["top1"] == 1.0 and r["kl_mean"] < 1e-6, r


def test_f32_matches_llama_cpp_exactly(tmp_path):
    assert_exact(write(tmp_path / "m.gguf", dict(CASES["q8_0-tied-4"], weight_type="F32")))


TOKENS = np.array([5, 17, 200, 3, 99, 42, 7, 128, 250, 1, 64, 33, 12, 77], dtype=np.int32)


def logits_of(path, **params) -> np.ndarray:
    model = NativeModel(str(path))
    ctx = NativeContext(model, n_ctx=32, n_batch=32, n_threads=2, n_threads_batch=2, logits_all=True, sparse=0,
                        **params)
    try:
        ctx.decode(TOKENS, 0)
        return ctx.logits[: len(TOKENS)].copy()
    finally:
        ctx.close()
        model.close()


def with_llama_twin(folder, case: dict) -> tuple[str, str]:
    """A smollm3 file, and the same weights labelled llama, whose every layer is rotated."""
    from gguf import GGUFReader

    smol, llama = write(folder / "smollm3.gguf", case), write(folder / "llama.gguf", case, arch="llama")
    a, b = GGUFReader(smol).tensors, GGUFReader(llama).tensors
    assert [t.name for t in a] == [t.name for t in b] and all(np.array_equal(x.data, y.data) for x, y in zip(a, b))
    return smol, llama


def test_the_nope_layers_are_not_rotated(tmp_path):
    """The file as smollm3 and as llama differ only in layer 3's rope: their logits differ."""
    smol, llama = map(logits_of, with_llama_twin(tmp_path, dict(CASES["q8_0-tied-4"], weight_type="F32")))
    assert float(np.abs(smol - llama).max()) > 1e-2 * float(np.abs(smol).max())


@pytest.mark.cuda
@pytest.mark.skipif(cuda_device_count() == 0, reason="no CUDA device")
def test_layer_offload_skips_the_rope_where_the_cpu_does(tmp_path):
    """Every layer on the device (the NoPE one too) gives the CPU's logits within float and f16
    rounding, and not the logits of the same weights rotated everywhere."""
    path, llama = with_llama_twin(tmp_path, dict(CASES["q8_0-tied-4"], weight_type="F32"))
    cpu, gpu, rotated = logits_of(path), logits_of(path, n_gpu_layers=-1), logits_of(llama)
    scale = float(np.abs(cpu).max())
    assert float(np.abs(gpu - cpu).max()) <= 2e-3 * scale
    assert float(np.abs(rotated - cpu).max()) > 1e-2 * scale
