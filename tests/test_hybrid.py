"""The hot/cold split without a GPU: the placement of device budgets, and the split and merge run
with the host stand-in device, which must give exactly the all-CPU result. The model is
synthetic.write_profiled_relu_gguf's, with n_ff = 5 runs of neurons.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from gguf import GGUFReader

from synthetic import rewrite_gguf, write_llama_gguf, write_profiled_relu_gguf

from pypowerinfer import Llama
from pypowerinfer.model import NativeContext, NativeModel, cuda_device_count
from pypowerinfer.placement import parse_budget

RUN = 128
N_FF = 5 * RUN
N_LAYER = 3
TOKENS = np.array([5, 17, 200, 3, 99, 42, 7, 128, 250, 1, 64, 33, 12, 77], dtype=np.int32)
DEVICE_NONE, DEVICE_HOST, DEVICE_CUDA = 0, 1, 2


@pytest.fixture(scope="module")
def profiled(tmp_path_factory) -> str:
    return write_profiled_relu_gguf(tmp_path_factory.mktemp("hybrid"), "Q8_0", n_layer=N_LAYER, n_ff=N_FF)


@pytest.fixture(scope="module")
def model(profiled):
    m = NativeModel(profiled)
    yield m
    m.close()


def run(model, *, device=DEVICE_NONE, budget=0, threads=2, sparse=2, shift=0.0):
    ctx = NativeContext(model, n_ctx=32, n_batch=32, n_threads=threads, n_threads_batch=threads, logits_all=True,
                        sparse=sparse, device=device, vram_budget=budget, sparse_threshold_shift=shift)
    try:
        ctx.decode(TOKENS, 0)
        return ctx.logits[: len(TOKENS)].copy(), ctx.stats()
    finally:
        ctx.close()


def freq(profiled, layer) -> np.ndarray:
    t = {t.name: t for t in GGUFReader(profiled).tensors}[f"blk.{layer}.ffn_freq"]
    return np.asarray(t.data, dtype=np.float32)


def test_budget_zero_places_nothing(model):
    plan = model.plan(0)
    assert plan.fixed_bytes == plan.neuron_bytes == plan.hot_neurons == 0
    assert not plan.output_on_device and not any(x.fixed_on_device for x in plan.layers)


def test_full_budget_places_everything(model):
    plan = model.plan(model.device_bytes())
    assert plan.output_on_device and all(x.fixed_on_device for x in plan.layers)
    assert [x.n_hot for x in plan.layers] == [N_FF] * N_LAYER
    assert all(x.coverage == pytest.approx(1.0) for x in plan.layers)
    assert plan.fixed_bytes + plan.neuron_bytes == model.device_bytes()


@pytest.mark.parametrize("share", [0.75, 0.85, 0.95])
def test_partial_budget_is_the_most_frequent_neurons_in_whole_runs(model, profiled, share):
    budget = int(share * model.device_bytes())
    plan = model.plan(budget)
    assert plan.fixed_bytes + plan.neuron_bytes <= budget
    assert plan.output_on_device and all(x.fixed_on_device for x in plan.layers)  # every-token weights first
    assert 0 < plan.hot_neurons < N_LAYER * N_FF
    per_neuron = {x.bytes // x.n_hot for x in plan.layers if x.n_hot}
    assert len(per_neuron) == 1
    # what is left cannot hold one more run of any layer
    assert budget - plan.fixed_bytes - plan.neuron_bytes < RUN * per_neuron.pop()
    for il, x in enumerate(plan.layers):
        assert x.n_hot % RUN == 0
        f = np.sort(freq(profiled, il))[::-1]
        assert x.coverage == pytest.approx(f[: x.n_hot].sum() / f.sum(), rel=1e-5)


def test_larger_budgets_cover_more(model):
    """Once what every token reads is on the device (below that, more budget first buys fixed weights)."""
    total = model.device_bytes()
    plans = [model.plan(int(s * total)) for s in (0.75, 0.8, 0.85, 0.9, 0.95, 1.0)]
    assert all(all(x.fixed_on_device for x in p.layers) for p in plans)
    covered = [sum(x.coverage for x in p.layers) for p in plans]
    assert covered == sorted(covered) and covered[-1] > covered[0]


@pytest.mark.parametrize("share", [0.02, 0.1, 0.3])
def test_small_budgets_stay_within_themselves(model, share):
    """Below what every token reads, the fixed weights go in order as far as they fit, and what
    is left still takes whole runs of neurons."""
    budget = int(share * model.device_bytes())
    plan = model.plan(budget)
    assert plan.fixed_bytes + plan.neuron_bytes <= budget
    assert not all(x.fixed_on_device for x in plan.layers)
    assert all(x.n_hot % RUN == 0 for x in plan.layers)


@pytest.mark.parametrize("share", [0.75, 0.9, 1.0])
@pytest.mark.parametrize("threads", [1, 2])
def test_host_device_split_equals_the_cpu_exactly(model, share, threads):
    budget = int(share * model.device_bytes())
    assert model.plan(budget).hot_neurons > 0
    cpu, cpu_stats = run(model, budget=budget, threads=threads)
    split, split_stats = run(model, device=DEVICE_HOST, budget=budget, threads=threads)
    np.testing.assert_array_equal(split, cpu)
    assert split_stats == cpu_stats


def test_cold_runs_taken_in_groups_agree_with_the_split_and_across_thread_counts(tmp_path):
    """13 runs: the CPU takes its cold runs two at a time (the group depends on the model alone).
    The split still equals the CPU bit for bit, so does one thread against two, and the exact
    oracle (a margin for the 8-bit activations) stays within float noise of dense."""
    m = NativeModel(write_profiled_relu_gguf(tmp_path, "Q8_0", n_layer=2, n_ff=13 * RUN))
    try:
        one, _ = run(m, threads=1)
        two, _ = run(m, threads=2)
        np.testing.assert_array_equal(one, two)
        budget = int(0.5 * m.device_bytes())
        cpu, cpu_stats = run(m, budget=budget)
        split, split_stats = run(m, device=DEVICE_HOST, budget=budget)
        np.testing.assert_array_equal(split, cpu)
        assert split_stats == cpu_stats
        dense, _ = run(m, sparse=0)
        wide, _ = run(m, shift=-0.05)
        np.testing.assert_allclose(wide, dense, rtol=1e-4, atol=1e-3)
    finally:
        m.close()


def test_host_split_of_an_ffn_without_a_gate_equals_the_cpu(tmp_path):
    """ReluFalcon in PowerInfer's layout, with profiled frequencies: the hot runs of up's rows."""
    from synthetic import write_profiled_ungated

    m = NativeModel(write_profiled_ungated(tmp_path, "Q8_0", n_ff=2 * RUN))
    try:
        budget = int(0.9 * m.device_bytes())
        assert m.plan(budget).hot_neurons > 0
        cpu, cpu_stats = run(m, budget=budget)
        split, split_stats = run(m, device=DEVICE_HOST, budget=budget)
    finally:
        m.close()
    np.testing.assert_array_equal(split, cpu)
    assert split_stats == cpu_stats and 0 < cpu_stats["ffn_rows_done"] < cpu_stats["ffn_rows_dense"]


def test_a_parallel_blocks_attention_takes_no_budget(tmp_path):
    """falcon's attention stays on the CPU (its step holds the FFN the split runs), so the plan's
    fixed part is the output matrix and the predictors alone, and the output does go to the
    device (the stand-in: still the CPU's result exactly)."""
    from synthetic import write_profiled_ungated

    path = write_profiled_ungated(tmp_path, "Q8_0", n_ff=2 * RUN)
    readable = tmp_path / "as-gguf.gguf"  # PowerInfer's PWRI magic, which gguf-py does not read
    readable.write_bytes(b"GGUF" + open(path, "rb").read()[4:])
    sizes = {t.name: int(t.n_bytes) for t in GGUFReader(str(readable)).tensors}
    output = sizes.get("output.weight", sizes["token_embd.weight"])
    predictors = sum(n for name, n in sizes.items() if name.endswith(("fc1.weight", "fc2.weight")))
    m = NativeModel(path)
    try:
        plan = m.plan(m.device_bytes())
        assert plan.output_on_device and all(x.fixed_on_device for x in plan.layers)
        assert plan.fixed_bytes == output + predictors
        cpu, _ = run(m, budget=m.device_bytes())
        split, _ = run(m, device=DEVICE_HOST, budget=m.device_bytes())
    finally:
        m.close()
    np.testing.assert_array_equal(split, cpu)


def test_layout_changes_only_the_order_of_the_sum(model):
    """Hot neurons first in the layout regroups the down sums: float rounding, nothing more."""
    base, base_stats = run(model)
    split, split_stats = run(model, device=DEVICE_HOST, budget=int(0.85 * model.device_bytes()))
    np.testing.assert_allclose(split, base, rtol=1e-4, atol=1e-4)
    assert split_stats["ffn_rows_done"] == base_stats["ffn_rows_done"]


def test_bad_frequencies_are_rejected(profiled, tmp_path):
    bad = {f"blk.{il}.ffn_freq": np.full(N_FF, np.nan, dtype=np.float32) for il in range(N_LAYER)}
    plain = write_llama_gguf(tmp_path / "p.gguf", n_layer=N_LAYER, n_ff=N_FF)
    path = rewrite_gguf(plain, tmp_path / "bad.gguf", bad)
    with pytest.raises(ValueError, match="ffn_freq"):
        NativeModel(path)


@pytest.mark.skipif(cuda_device_count() > 0, reason="a CUDA device is present")
def test_cuda_device_without_a_gpu_is_a_clear_error(model):
    with pytest.raises(NotImplementedError, match="CUDA"):
        run(model, device=DEVICE_CUDA, budget=model.device_bytes())


def test_llama_vram_budget(profiled):
    kw = dict(n_ctx=32, logits_all=True, verbose=False, sparse="all")
    with Llama(profiled, vram_budget="85%", hybrid_device="host", **kw) as a, \
            Llama(profiled, vram_budget="85%", hybrid_device="none", **kw) as b:
        a.eval(TOKENS.tolist())
        b.eval(TOKENS.tolist())
        np.testing.assert_array_equal(a.scores[: len(TOKENS)], b.scores[: len(TOKENS)])
    if cuda_device_count() == 0:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            Llama(profiled, vram_budget="auto", **kw).close()
        assert any("no CUDA device" in str(w.message) for w in caught)
    with pytest.raises(ValueError, match="hybrid_device"):
        Llama(profiled, vram_budget=1, hybrid_device="tpu", **kw)


@pytest.mark.parametrize("text,expected", [(0, 0), (1234, 1234), ("1234", 1234), ("2k", 2048), ("1.5M", 1572864),
                                           ("1G", 1 << 30), ("25%", 250), ("100%", 1000)])
def test_parse_budget(text, expected):
    assert parse_budget(text, 1000) == expected


@pytest.mark.parametrize("text", ["-1", "lots", "150%", "-5%", True])
def test_parse_budget_rejects(text):
    with pytest.raises(ValueError):
        parse_budget(text, 1000)


def test_gpu_check_script_is_ready(profiled, tmp_path):
    """bench/gpu_check.sh runs only where a GPU is lent; here its shell parses and its benchmark
    step runs with the host stand-in in place of CUDA."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    subprocess.run(["bash", "-n", str(root / "bench" / "gpu_check.sh")], check=True)
    out = tmp_path / "hybrid.md"
    subprocess.run([sys.executable, str(root / "bench" / "hybrid.py"), profiled, "--device", "host", "--budgets",
                    "80,100", "--decode", "4", "-t", "1", "--markdown", str(out)], check=True, capture_output=True)
    table = out.read_text()
    assert "| dense, CPU |" in table and "hybrid (host), 80% budget" in table and "hybrid (host), 100% budget" in table


def test_layer_offload_baseline_counts_what_it_uploads(profiled):
    """bench/hybrid.py's bytes per layer for layer offload: attention, the dense FFN and the norms,
    not the split's predictors, frequencies or transposed down matrix."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.hybrid import offload_layer_bytes

    sizes = {t.name: int(t.n_bytes) for t in GGUFReader(profiled).tensors}
    dense = ("attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
             "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_up.bias", "ffn_down.weight")
    assert all(f"blk.0.{t}" in sizes for t in dense) and "blk.0.ffn_down_t.weight" in sizes
    assert offload_layer_bytes(profiled, N_LAYER) == [sum(sizes[f"blk.{il}.{t}"] for t in dense)
                                                     for il in range(N_LAYER)]


def test_layer_offload_baseline_takes_the_last_layers_that_fit():
    """bench/hybrid.py's n_gpu_layers at a budget: whole layers from the last one back."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.hybrid import layers_within

    assert layers_within([10, 20, 30], 29) == 0
    assert layers_within([10, 20, 30], 30) == 1
    assert layers_within([10, 20, 30], 59) == 2
    assert layers_within([10, 20, 30], 60) == 3
    assert layers_within([], 100) == 0
