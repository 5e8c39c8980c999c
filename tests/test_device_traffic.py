"""What crosses between the host and the device per decoded token, and how often the host waits.

The hybrid split with the stream on the device costs a layer two transfers (the normed FFN input
out, the CPU's cold sum in) and one wait; with the stream on the host, two (the normed input in,
the hot sum out) and one wait. Layer offload keeps the stream on the device from the first layer
to the logits. Counted on the host stand-in, and on CUDA (the emulator in CI) where there is one.
"""
from __future__ import annotations

import pytest

from synthetic import write_llama_gguf, write_profiled_relu_gguf

from pypowerinfer import Llama
from pypowerinfer.model import cuda_device_count

N_LAYER = 3
DEVICES = ["host", pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(
    cuda_device_count() == 0, reason="no CUDA device")])]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("traffic")
    profiled = write_profiled_relu_gguf(folder, "Q8_0", n_layer=N_LAYER, n_ff=640)
    return {"profiled": profiled, "plain": str(folder / "plain-Q8_0.gguf")}


def per_token(path, n_decode=4, **kw):
    """Transfers and waits of each decoded token (after a prompt), and the placement."""
    with Llama(path, n_ctx=64, n_threads=2, verbose=False, **kw) as llm:
        llm.eval([5, 6, 7, 8])
        llm._ctx.reset_stats()
        for t in range(9, 9 + n_decode):
            llm.eval([t])
        traffic = llm._ctx.device_traffic()
        return {k: v / n_decode for k, v in traffic.items()}, llm.placement


@pytest.mark.parametrize("device", DEVICES)
def test_a_layer_of_the_split_costs_two_transfers_and_one_wait(files, device):
    traffic, placement = per_token(files["profiled"], vram_budget="100%", hybrid_device=device)
    assert placement.output_on_device and all(layer.fixed_on_device for layer in placement.layers)
    # the stream in once, per layer the normed input out and the cold sum in, the logits back
    assert traffic == {"copies": 2 * N_LAYER + 2, "syncs": N_LAYER + 1}


@pytest.mark.parametrize("budget", ["5%", "30%", "60%"])
def test_partial_budgets_stay_within_two_transfers_a_layer(files, budget):
    """Where some layers' attention stays home, the stream crosses once more each way."""
    traffic, _ = per_token(files["profiled"], vram_budget=budget, hybrid_device="host")
    assert 0 < traffic["copies"] <= 2 * N_LAYER + 4 and traffic["syncs"] <= N_LAYER + 2


@pytest.mark.parametrize("device", DEVICES)
def test_layer_offload_keeps_the_stream_on_the_device(files, device):
    traffic, _ = per_token(files["plain"], n_gpu_layers=-1, hybrid_device=device)
    assert traffic == {"copies": 2, "syncs": 1}


def test_the_cpu_alone_moves_nothing(files):
    traffic, _ = per_token(files["profiled"], vram_budget="50%", hybrid_device="none")
    assert traffic == {"copies": 0, "syncs": 0}
