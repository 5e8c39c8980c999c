"""Each layer's FFN path is chosen when the context is made and again where what decides it
changes (ffn_path.h): an activation capture and a LoRA adapter on the FFN run it dense, and
dropping them brings the sparse FFN back, in the same context."""
from __future__ import annotations

import numpy as np

from synthetic import write_profiled_relu_gguf
from synthetic_lora import FFN, write_lora_gguf

from pypowerinfer.model import NativeAdapter, NativeContext, NativeModel

TOKENS = np.array([5, 17, 200, 3, 99, 42, 7, 128], dtype=np.int32)


def share_done(ctx: NativeContext, pos: int) -> float:
    """The share of the FFN's rows one-token steps compute, over TOKENS from pos"""
    before = ctx.stats()
    for i, t in enumerate(TOKENS):
        ctx.decode(np.array([t], dtype=np.int32), pos + i)
    after = ctx.stats()
    return (after["ffn_rows_done"] - before["ffn_rows_done"]) / (after["ffn_rows_dense"] - before["ffn_rows_dense"])


def test_capture_and_adapter_choose_the_path_again(tmp_path):
    path = write_profiled_relu_gguf(tmp_path, "Q8_0")
    model = NativeModel(path)
    info = model.info
    ctx = NativeContext(model, n_ctx=64, n_batch=8, n_threads=2, n_threads_batch=2, logits_all=False, sparse=1)
    try:
        sparse = share_done(ctx, 0)
        assert sparse < 0.9
        cap_in = np.zeros((info.n_layer, 64, info.n_embd), np.float32)
        cap_act = np.zeros((info.n_layer, 64, info.n_ff), np.float32)
        ctx.set_capture(cap_in, cap_act)
        assert share_done(ctx, len(TOKENS)) == 1.0  # the capture records every neuron's activation
        ctx.set_capture(None, None)
        assert share_done(ctx, 2 * len(TOKENS)) < 0.9
        adapter = NativeAdapter(model, write_lora_gguf(tmp_path / "ffn.gguf", path, targets=FFN))
        ctx.set_adapter(adapter)
        assert share_done(ctx, 3 * len(TOKENS)) == 1.0  # the predictors know the base FFN only
        ctx.set_adapter(None)
        assert share_done(ctx, 4 * len(TOKENS)) < 0.9
    finally:
        ctx.close()
        model.close()
