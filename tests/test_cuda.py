"""The CUDA side of the hot/cold split against the CPU, for every weight type (needs a GPU).

The device computes from float activations, the CPU from 8-bit ones for block formats, so the
two agree within quantization noise rather than exactly; with F32 and F16 weights the
difference is float rounding.
"""
from __future__ import annotations

import numpy as np
import pytest

from synthetic import WEIGHT_TYPES, write_profiled_relu_gguf

from pypowerinfer.model import NativeContext, NativeModel, cuda_device_count

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_device_count() == 0, reason="no CUDA device")]

TOKENS = np.array([5, 17, 200, 3, 99, 42, 7, 128, 250, 1, 64, 33, 12, 77], dtype=np.int32)
TOLERANCE = {"F32": 1e-4, "F16": 1e-3, "BF16": 1e-2}


def logits(model, device, budget):
    ctx = NativeContext(model, n_ctx=32, n_batch=32, n_threads=2, n_threads_batch=2, logits_all=True, sparse=2,
                        device=device, vram_budget=budget)
    try:
        ctx.decode(TOKENS, 0)
        return ctx.logits[: len(TOKENS)].copy(), ctx.stats()
    finally:
        ctx.close()


@pytest.mark.parametrize("share", [0.8, 1.0])
@pytest.mark.parametrize("weight_type", WEIGHT_TYPES)
def test_cuda_split_matches_the_cpu(weight_type, share, tmp_path):
    model = NativeModel(write_profiled_relu_gguf(tmp_path, weight_type))
    try:
        budget = int(share * model.device_bytes())
        assert model.plan(budget).hot_neurons > 0
        cpu, cpu_stats = logits(model, 0, budget)
        gpu, gpu_stats = logits(model, 2, budget)
    finally:
        model.close()
    tol = TOLERANCE.get(weight_type, 5e-2)
    scale = float(np.abs(cpu).max())
    assert float(np.abs(gpu - cpu).max()) <= tol * scale, weight_type
    # the same neurons fire, up to those whose gate is within quantization noise of zero
    assert abs(gpu_stats["ffn_rows_done"] - cpu_stats["ffn_rows_done"]) <= 0.01 * cpu_stats["ffn_rows_done"]
