"""Layer offload (n_gpu_layers) where no GPU is: the option is refused natively with the reason,
ignored by Llama as llama-cpp-python's CPU build ignores it, and never combined with the hybrid
split. The device side is tested in test_cuda.py."""
from __future__ import annotations

import numpy as np
import pytest

from synthetic import write_llama_gguf

from pypowerinfer import Llama
from pypowerinfer.model import NativeContext, NativeModel, cuda_device_count

pytestmark = pytest.mark.skipif(cuda_device_count() > 0, reason="a CUDA device is present: test_cuda.py covers it")

TOKENS = [5, 17, 200, 3, 99, 42, 7]


def native_context(model, **kw):
    return NativeContext(model, n_ctx=32, n_batch=8, n_threads=1, n_threads_batch=1, logits_all=False, **kw)


def test_native_offload_without_a_device_says_why(tmp_path):
    model = NativeModel(str(write_llama_gguf(tmp_path / "m.gguf")))
    try:
        with pytest.raises(NotImplementedError, match="n_gpu_layers: (no CUDA device|this build has no CUDA)"):
            native_context(model, n_gpu_layers=-1)
        with pytest.raises(ValueError, match="choose one"):
            native_context(model, n_gpu_layers=1, vram_budget=1 << 20)
    finally:
        model.close()


def test_llama_ignores_n_gpu_layers_without_a_device(tmp_path):
    path = str(write_llama_gguf(tmp_path / "m.gguf"))
    runs = []
    for n_gpu_layers in (0, -1, 99):
        with Llama(path, n_ctx=32, n_gpu_layers=n_gpu_layers, verbose=False) as llm:
            llm.eval(TOKENS)
            runs.append(np.array(llm.scores[0]))
    assert all(np.array_equal(runs[0], r) for r in runs[1:])
