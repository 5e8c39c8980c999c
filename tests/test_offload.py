"""Layer offload (n_gpu_layers) and the split's attention and output on a device, without a GPU:
the host stand-in device (PI_DEVICE_HOST) runs the CPU's blocks on its own copy of the residual
stream, so the steps' routing and the stream's trips to and from the device must give exactly the
all-CPU result. Also the option's refusals and fallbacks where no CUDA device is. The CUDA side
is tested in test_cuda.py."""
from __future__ import annotations

import numpy as np
import pytest

from synthetic import write_llama_gguf, write_profiled_relu_gguf, write_profiled_ungated

from pypowerinfer import Llama
from pypowerinfer.model import NativeContext, NativeModel, cuda_device_count

TOKENS = np.array([5, 17, 200, 3, 99, 42, 7, 128, 250, 1, 64, 33], dtype=np.int32)
DEVICE_HOST = 1
no_cuda = pytest.mark.skipif(cuda_device_count() > 0, reason="a CUDA device is present: test_cuda.py covers it")


def logits(model, n_batch, **kw):
    """Teacher-forced logits of TOKENS in chunks of n_batch (a prompt, then cached parts), and stats."""
    ctx = NativeContext(model, n_ctx=32, n_batch=n_batch, n_threads=2, n_threads_batch=2, logits_all=True, sparse=0,
                        **kw)
    try:
        for at in range(0, len(TOKENS), n_batch):
            ctx.decode(TOKENS[at:at + n_batch], at)
        return ctx.logits[: len(TOKENS)].copy(), ctx.stats()
    finally:
        ctx.close()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = write_llama_gguf(tmp_path_factory.mktemp("offload") / "m.gguf", weight_type="Q8_0", n_layer=3, biases=True,
                            extra_kv={"llama.final_logit_softcapping": 30.0})
    m = NativeModel(str(path))
    yield m
    m.close()


# of 3 layers: the last, all, and all with the output matrix; in prompts of 12, 5 and 1 tokens
@pytest.mark.parametrize("n_gpu_layers", [1, 3, -1])
@pytest.mark.parametrize("n_batch", [12, 5, 1])
def test_stand_in_layer_offload_equals_the_cpu_exactly(model, n_gpu_layers, n_batch):
    cpu, cpu_stats = logits(model, n_batch)
    dev, dev_stats = logits(model, n_batch, device=DEVICE_HOST, n_gpu_layers=n_gpu_layers)
    np.testing.assert_array_equal(dev, cpu)
    assert dev_stats == cpu_stats


def test_stand_in_keeps_the_output_home_for_embeddings(model):
    cpu, _ = logits(model, 12, embeddings=True)
    dev, _ = logits(model, 12, embeddings=True, device=DEVICE_HOST, n_gpu_layers=-1)
    np.testing.assert_array_equal(dev, cpu)


# opt: LayerNorm's attention on the device (at 30% its plan places none)
@pytest.mark.parametrize("arch, share", [("llama", 0.3), ("llama", 0.8), ("llama", 1.0), ("opt", 0.8), ("opt", 1.0)])
def test_stand_in_split_with_placed_attention_equals_the_cpu(tmp_path, share, arch):
    """vram_budget with the stand-in: the attention of the layers the plan placed and the output
    run on the device side too, as with CUDA."""
    m = NativeModel(write_profiled_relu_gguf(tmp_path, "Q8_0", n_ff=256) if arch == "llama"
                    else write_profiled_ungated(tmp_path, "Q8_0", arch=arch))
    try:
        budget = int(share * m.device_bytes())
        plan = m.plan(budget)
        assert plan.output_on_device and any(x.fixed_on_device for x in plan.layers)
        cpu, _ = logits(m, 12, vram_budget=budget)
        dev, _ = logits(m, 12, vram_budget=budget, device=DEVICE_HOST)
    finally:
        m.close()
    np.testing.assert_array_equal(dev, cpu)


def test_llama_takes_the_stand_in_and_refuses_a_state(tmp_path):
    path = str(write_llama_gguf(tmp_path / "m.gguf"))
    with Llama(path, n_ctx=32, verbose=False) as llm:
        llm.eval(TOKENS.tolist())
        cpu = np.array(llm.scores[0])
    with Llama(path, n_ctx=32, verbose=False, n_gpu_layers=-1, hybrid_device="host") as llm:
        llm.eval(TOKENS.tolist())
        np.testing.assert_array_equal(np.array(llm.scores[0]), cpu)
        with pytest.raises(NotImplementedError, match="layer offload"):
            llm.save_state()


@pytest.mark.parametrize("arch", ["opt", "falcon"])  # LayerNorm and biases; falcon's parallel block
def test_stand_in_offload_of_layernorm_models_equals_the_cpu_exactly(arch, tmp_path):
    m = NativeModel(str(write_llama_gguf(tmp_path / "m.gguf", arch=arch, n_layer=3)))
    try:
        cpu, cpu_stats = logits(m, 5)
        for n_gpu_layers in (1, -1):
            dev, dev_stats = logits(m, 5, device=DEVICE_HOST, n_gpu_layers=n_gpu_layers)
            np.testing.assert_array_equal(dev, cpu)
            assert dev_stats == cpu_stats
    finally:
        m.close()


@no_cuda
def test_native_offload_without_a_device_says_why(model):
    with pytest.raises(NotImplementedError, match="n_gpu_layers: (no CUDA device|this build has no CUDA)"):
        logits(model, 12, n_gpu_layers=-1)
    with pytest.raises(ValueError, match="choose one"):
        logits(model, 12, n_gpu_layers=1, vram_budget=1 << 20)


@no_cuda
def test_llama_ignores_n_gpu_layers_without_a_device(tmp_path):
    path = str(write_llama_gguf(tmp_path / "m.gguf"))
    runs = []
    for n_gpu_layers in (0, -1, 99):
        with Llama(path, n_ctx=32, n_gpu_layers=n_gpu_layers, verbose=False) as llm:
            llm.eval(TOKENS.tolist())
            runs.append(np.array(llm.scores[0]))
    assert all(np.array_equal(runs[0], r) for r in runs[1:])
