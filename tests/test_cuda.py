"""The CUDA side against the CPU and the numpy reference, for every weight type: the hot/cold
split's device FFN, and layer offload (n_gpu_layers). Needs a CUDA device, or the build for the
CPU emulator (cmake -DPI_CUDA_EMULATOR=ON, native/cuda_emulator), which runs these kernels on the
CPU and is what CI runs them on.

The device computes from float activations, the CPU from 8-bit ones for block formats (Q8_K
for K-quants, which on these random models moves logits by several percent), so the split is
held to the CPU within quantization noise, and offload to the float reference: no further from
it than the CPU is, and for whole-model offload within float and f16 rounding of it.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from reference import ReferenceModel
from synthetic import WEIGHT_TYPES, write_llama_gguf, write_profiled_relu_gguf, write_profiled_ungated

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
@pytest.mark.parametrize("arch", ["llama", "falcon", "opt"])  # gated; ungated, parallel; ungated, LayerNorm
def test_cuda_split_matches_the_cpu(arch, weight_type, share, tmp_path):
    """The split: falcon's attention stays on the CPU (its parallel block holds the FFN), llama's
    and opt's go to the device where the plan places them."""
    model = NativeModel(write_profiled_ungated(tmp_path, weight_type, arch=arch) if arch != "llama"
                        else write_profiled_relu_gguf(tmp_path, weight_type))
    try:
        budget = int(share * model.device_bytes())
        assert model.plan(budget).hot_neurons > 0
        cpu, cpu_stats = logits(model, 0, budget)
        gpu, gpu_stats = logits(model, 2, budget)
    finally:
        model.close()
    # a neuron within rounding of the predictor's threshold can fire on one side only (as it can
    # between two CPU layouts): float weights are held to 1e-3, not to their rounding
    tol = max(TOLERANCE.get(weight_type, 5e-2), 1e-3)
    scale = float(np.abs(cpu).max())
    assert float(np.abs(gpu - cpu).max()) <= tol * scale, weight_type
    # the same neurons fire, up to those whose gate is within quantization noise of zero
    assert abs(gpu_stats["ffn_rows_done"] - cpu_stats["ffn_rows_done"]) <= 0.01 * cpu_stats["ffn_rows_done"]


# ---- layer offload (n_gpu_layers) ----

def offload_logits(path, n_gpu_layers, n_batch=32):
    """Teacher-forced logits of TOKENS, evaluated in chunks of n_batch: a prompt, then cached parts."""
    model = NativeModel(str(path))
    ctx = NativeContext(model, n_ctx=64, n_batch=n_batch, n_threads=2, n_threads_batch=2, logits_all=True,
                        sparse=0, n_gpu_layers=n_gpu_layers)
    try:
        for at in range(0, len(TOKENS), n_batch):
            ctx.decode(TOKENS[at:at + n_batch], at)
        return ctx.logits[: len(TOKENS)].copy()
    finally:
        ctx.close()
        model.close()


def assert_offload_near_the_reference(path, n_gpu_layers, n_batch, tol):
    ref = ReferenceModel(str(path)).logits(list(TOKENS))
    cpu, gpu = offload_logits(path, 0, n_batch), offload_logits(path, n_gpu_layers, n_batch)
    scale = float(np.abs(ref).max())
    # the layers left on the CPU bring its error; with everything offloaded only the device's own
    cpu_err = float(np.abs(cpu - ref).max()) if n_gpu_layers != -1 else 0.0
    gpu_err = float(np.abs(gpu - ref).max())
    assert gpu_err <= tol * scale + cpu_err, (gpu_err / scale, cpu_err / scale)


# of 3 layers: 1, all, and all with the output matrix (-1); in prompts of 32, 5 and 1 tokens
@pytest.mark.parametrize("n_gpu_layers, n_batch", [(1, 32), (3, 5), (-1, 32), (-1, 1)])
@pytest.mark.parametrize("weight_type", [*WEIGHT_TYPES, "Q4_K", "Q6_K"])
def test_layer_offload_matches_the_reference(weight_type, n_gpu_layers, n_batch, tmp_path):
    k_rows = dict(n_embd=256, n_ff=512) if weight_type.endswith("_K") else {}  # K-quant rows are 256 long
    path = write_llama_gguf(tmp_path / "m.gguf", weight_type=weight_type, n_layer=3, biases=True, **k_rows)
    # float and f16 rounding: the KV cache and attention probabilities are f16 on both sides
    assert_offload_near_the_reference(path, n_gpu_layers, n_batch, 1e-2)


@pytest.mark.parametrize("variant", [dict(arch="qwen2", biases=True),
                                     dict(extra_kv={"llama.attention.sliding_window": 5}),
                                     dict(arch="opt"),  # LayerNorm, biases, learned positions, ReLU without a gate
                                     dict(arch="falcon"),  # LayerNorm, the parallel block, GELU without a gate
                                     dict(arch="falcon", attn_norm_2=True)])  # falcon-40b's second norm
def test_layer_offload_variants_match_the_reference(variant, tmp_path):
    path = write_llama_gguf(tmp_path / "m.gguf", weight_type="F32", **variant)
    assert_offload_near_the_reference(path, -1, 32, 2e-3)


@pytest.mark.parametrize("weight_type", ["F32", "Q8_0"])
def test_layer_offload_of_a_powerinfer_file(weight_type, tmp_path):
    """PowerInfer's layout keeps only the transposed down matrix (ffn_down_t): the device reads it
    by rows, skipping the neurons ReLU zeroes, as the CPU's dense path does."""
    path = write_profiled_ungated(tmp_path, weight_type)
    cpu, gpu = offload_logits(path, 0), offload_logits(path, -1)
    tol = TOLERANCE.get(weight_type, 5e-2)
    assert float(np.abs(gpu - cpu).max()) <= tol * float(np.abs(cpu).max())


def test_layer_offload_refuses_to_save_state(tmp_path):
    model = NativeModel(str(write_llama_gguf(tmp_path / "m.gguf")))
    ctx = NativeContext(model, n_ctx=32, n_batch=8, n_threads=1, n_threads_batch=1, logits_all=False, n_gpu_layers=-1)
    try:
        ctx.decode(TOKENS[:4], 0)
        with pytest.raises(NotImplementedError, match="layer offload"):
            ctx.get_state()
    finally:
        ctx.close()
        model.close()


def test_layer_offload_of_the_default_model_follows_llama_cpp(smollm2_path, smollm2_ref):
    """SmolLM2 (Q4_1, grouped-query attention, 49152-token tied output) wholly on the device,
    teacher-forced: as close to llama.cpp as the CPU is (it computes from float activations,
    llama.cpp from 8-bit ones, so near-ties flip; KL is the bound)."""
    from pypowerinfer import Llama
    from reference import compare_logits
    from test_forward import real_text, teacher_forced

    tokens = smollm2_ref.tokenize(real_text().encode(), add_bos=False)[:40]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to the CPU
        llm = Llama(str(smollm2_path), n_ctx=64, n_batch=64, logits_all=True, verbose=False, n_gpu_layers=-1)
    with llm:
        stats = compare_logits(teacher_forced(smollm2_ref, tokens), teacher_forced(llm, tokens))
    assert stats["kl_mean"] < 0.01 and stats["top1"] >= 0.9, stats
