"""The hot/cold split of an MoE FFN (native/src/ffn_moe_split.c) without a GPU: the planner's hot
expert runs computed by the host stand-in device from its own copy, the cold ones by the CPU
threads, must give exactly what device NONE gives with the same budget (the CPU computing every
run with the same folds), and stay close to the plain MoE path and to llama.cpp. The models are
synthetic qwen3moe files whose experts have 2-3 runs of 128 neurons, the last one shorter.
"""
from __future__ import annotations

import numpy as np
import pytest

from synthetic import rewrite_gguf, write_llama_gguf

from pypowerinfer import Llama, UnsupportedError
from pypowerinfer.model import NativeContext, NativeModel, cuda_device_count

DEVICE_NONE, DEVICE_HOST, DEVICE_CUDA = 0, 1, 2
N_LAYER = 2
DIMS = dict(arch="qwen3moe", n_vocab=512, n_layer=N_LAYER, n_ctx_train=512, n_head=4, n_head_kv=2, head_dim=64, n_ff=256)
CASES = {
    # runs of 128, 128 and 64 neurons; rows in 16-row groups (the loader's default)
    "q8_0-top1": dict(weight_type="Q8_0", n_embd=128, n_expert=4, n_expert_used=1, n_ff_exp=320),
    # runs of 128, 128 and 96
    "q4_0-top2": dict(weight_type="Q4_0", n_embd=256, n_expert=6, n_expert_used=2, n_ff_exp=352, output_type="Q8_0"),
    # row-major experts (repack off): 128 and 32
    "q8_0-top3-rows": dict(weight_type="Q8_0", n_embd=128, n_expert=5, n_expert_used=3, n_ff_exp=160, repack=False),
    # float weights: a run's columns of down are plain element ranges
    "f16-top2": dict(weight_type="F16", n_embd=128, n_expert=4, n_expert_used=2, n_ff_exp=192),
}
PROMPT = 8     # a batch, which takes the plain MoE path
DECODED = 64   # then one token at a time, which takes the split


def tokens(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, DIMS["n_vocab"], n).astype(np.int32)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("esplit")
    out = {}
    for name, case in CASES.items():
        case = dict(case)
        repack = case.pop("repack", True)
        out[name] = NativeModel(write_llama_gguf(folder / f"{name}.gguf", **DIMS, **case), repack=repack)
    yield out
    for m in out.values():
        m.close()


def context(model, *, device=DEVICE_NONE, budget=0, threads=2) -> NativeContext:
    return NativeContext(model, n_ctx=128, n_batch=16, n_threads=threads, n_threads_batch=threads, logits_all=True,
                         device=device, vram_budget=budget)


def decode(model, *, device=DEVICE_NONE, budget=0, threads=2, seq=None):
    """Logits of a prompt (one batch) and of the tokens after it, one at a time; the stats and the
    device traffic of the one-token steps."""
    seq = tokens(PROMPT + DECODED) if seq is None else seq
    ctx = context(model, device=device, budget=budget, threads=threads)
    try:
        ctx.decode(seq[:PROMPT], 0)
        ctx.reset_stats()
        for i in range(PROMPT, len(seq)):
            ctx.decode(seq[i:i + 1], i)
        return ctx.logits[: len(seq)].copy(), ctx.stats(), ctx.device_traffic()  # logits_all: a row per position
    finally:
        ctx.close()


def budgets(model) -> dict[str, int]:
    """Budgets whose plans hold no expert run, some of them, and all of them."""
    total = model.device_bytes()
    fixed = model.plan(total).fixed_bytes
    some = fixed + (total - fixed) // 2
    return {"none": fixed, "some": some, "all": total}


def hot_runs(model, budget) -> tuple[int, int]:
    plan = model.plan(budget)
    return sum(x.n_hot_expert_runs for x in plan.layers), sum(x.n_expert_runs for x in plan.layers)


def per_token_traffic(model, budget, experts_on_device) -> dict[str, int]:
    """Copies and waits of a one-token step, following the stream: in for a layer's attention on
    the device, where it stays for the FFN: the device norms the token's input for the CPU (a
    wait), takes the routing when the token's experts have hot runs (experts_on_device: for every
    layer, or a list per layer), then the CPU's cold sums, and merges. Out for attention on the
    CPU; there the hot runs take the input and routing in and their sums back (a wait). Then the
    logits, back from the device where it holds the output matrix."""
    plan = model.plan(budget)
    on_device = experts_on_device if isinstance(experts_on_device, list) else [experts_on_device] * N_LAYER
    copies = syncs = 0
    stream_on_device = False
    for layer, experts in zip(plan.layers, on_device):
        if layer.fixed_on_device:
            copies += not stream_on_device
            stream_on_device = True
            copies += 2 + experts
            syncs += 1
        else:
            copies += stream_on_device
            syncs += stream_on_device
            stream_on_device = False
            copies += 2 * experts
            syncs += experts
    if plan.output_on_device:
        copies += 1 + (not stream_on_device)
    else:
        copies += stream_on_device
    syncs += plan.output_on_device or stream_on_device
    return {"copies": copies, "syncs": syncs}


def host_equals_cpu(model, share, seq=None):
    """The host device's split against the CPU alone at the budget of that share (budgets), over
    seq: the same logits bit for bit, the same stats, the hot rows as the share says. Returns the
    budget, the stats and the host's traffic."""
    budget = budgets(model)[share]
    hot, total = hot_runs(model, budget)
    assert {"none": hot == 0, "some": 0 < hot < total, "all": hot == total}[share], (hot, total)
    cpu, cpu_stats, cpu_traffic = decode(model, budget=budget, seq=seq)
    split, split_stats, traffic = decode(model, device=DEVICE_HOST, budget=budget, seq=seq)
    np.testing.assert_array_equal(split, cpu)
    assert split_stats == cpu_stats and cpu_traffic == {"copies": 0, "syncs": 0}
    if share == "none":
        assert split_stats["ffn_rows_hot"] == 0
    elif share == "all":
        assert split_stats["ffn_rows_hot"] == split_stats["ffn_rows_done"]
    else:
        assert 0 <= split_stats["ffn_rows_hot"] < split_stats["ffn_rows_done"]
    return budget, split_stats, traffic


@pytest.mark.parametrize("share", ["none", "some", "all"])
@pytest.mark.parametrize("name", CASES)
def test_host_device_split_equals_the_cpu_exactly(models, name, share):
    model, case = models[name], CASES[name]
    budget, split_stats, traffic = host_equals_cpu(model, share)
    # every routed expert's every run computed once: no expert twice, none left out
    assert split_stats["ffn_rows_done"] == DECODED * N_LAYER * case["n_expert_used"] * case["n_ff_exp"]
    if share != "some":  # with some hot, whether a token's experts have any depends on its routing
        expected = per_token_traffic(model, budget, share == "all")
        assert traffic == {k: DECODED * v for k, v in expected.items()}, (traffic, expected)


@pytest.mark.parametrize("threads", [1, 3])
def test_the_split_does_not_depend_on_the_thread_count(models, threads):
    model = models["q4_0-top2"]
    budget = budgets(model)["some"]
    two, _, _ = decode(model, budget=budget, threads=2)
    other, _, _ = decode(model, device=DEVICE_HOST, budget=budget, threads=threads)
    np.testing.assert_array_equal(other, two)


@pytest.mark.parametrize("name", CASES)
def test_the_split_changes_only_the_order_of_the_sum(models, name):
    """Against the plain MoE path (no budget): each expert's down sum regrouped by runs, float
    rounding, nothing more (row-major kernels add the blocks in order: the same bits). With
    8-bit activations that rounding flips a step now and then, which moves a few positions a
    little, the typical one not at all; float weights move every position in its last bits. The
    prompt's batch is the plain path in both."""
    from reference import compare_logits

    model = models[name]
    plain, plain_stats, _ = decode(model)
    split, split_stats, _ = decode(model, device=DEVICE_HOST, budget=budgets(model)["some"])
    np.testing.assert_array_equal(split[:PROMPT], plain[:PROMPT])
    got = compare_logits(plain, split)
    median = 1e-6 if CASES[name]["weight_type"] == "F16" else 1e-10  # measured: 2e-8; 1e-13
    assert got["top1"] >= 0.97 and got["kl_median"] <= median and got["kl_max"] <= 1e-2, got
    assert split_stats["ffn_rows_done"] == plain_stats["ffn_rows_done"]


def test_exact_router_ties_route_every_token_once(models, tmp_path):
    """Every router row the same: all experts tie exactly for every token, and the lowest ones
    win. The CPU routes once and the device is handed that choice, so each chosen expert is
    computed once, with the same result as the CPU alone, and the device computes exactly the
    hot runs of experts 0 .. k-1 (pi_model_plan_experts)."""
    name = "q4_0-top2"
    case = CASES[name]
    src = models[name].path
    rows = np.random.default_rng(3).standard_normal(case["n_embd"]).astype(np.float32) * 0.05
    router = np.tile(rows, (case["n_expert"], 1))
    names = {f"blk.{il}.ffn_gate_inp.weight" for il in range(N_LAYER)}
    path = rewrite_gguf(src, tmp_path / "tied.gguf", {n: router for n in names}, drop=names)
    m = NativeModel(path)
    try:
        total = m.device_bytes()
        fixed = m.plan(total).fixed_bytes
        for share in (0.1, 0.5, 1.0):  # 0.1: tied experts 0 and 1 of layer 0 are one hot, one cold
            budget = fixed + int(share * (total - fixed))
            cpu, cpu_stats, _ = decode(m, budget=budget)
            split, stats, traffic = decode(m, device=DEVICE_HOST, budget=budget)
            np.testing.assert_array_equal(split, cpu)
            assert stats == cpu_stats
            assert stats["ffn_rows_done"] == DECODED * N_LAYER * case["n_expert_used"] * case["n_ff_exp"]
            chosen = m.plan_experts(budget)[:, : case["n_expert_used"]]  # [layer, expert, run]
            run_rows = np.minimum(128, case["n_ff_exp"] - 128 * np.arange(chosen.shape[2]))
            assert stats["ffn_rows_hot"] == DECODED * int((chosen * run_rows).sum())
            per_layer = [bool(layer.any()) for layer in chosen]
            assert traffic == {k: DECODED * v for k, v in per_token_traffic(m, budget, per_layer).items()}
    finally:
        m.close()


def test_the_split_stays_close_to_llama_cpp(models):
    """llama.cpp one token at a time against ours through the split (host device), within the
    bounds test_qwen3.py holds the plain MoE path to, taking our plain path's own distance as
    the floor."""
    import llama_cpp

    from reference import compare_logits
    from test_forward import teacher_forced

    model = models["q8_0-top1"]
    seq = tokens(128, seed=7).tolist()
    opts = dict(n_ctx=256, n_batch=1, logits_all=True, n_threads=2, verbose=False)
    ref = llama_cpp.Llama(model.path, n_ubatch=1, **opts)
    want = teacher_forced(ref, seq)
    ref.close()
    with Llama(model.path, **opts) as plain:
        floor = compare_logits(want, teacher_forced(plain, seq))
    with Llama(model.path, vram_budget=budgets(model)["some"], hybrid_device="host", **opts) as llm:
        assert llm.placement is not None and any(x.n_hot_expert_runs for x in llm.placement.layers)
        got = compare_logits(want, teacher_forced(llm, seq))
    assert got["kl_median"] <= 2.0 * floor["kl_median"] + 1e-4, (got, floor)
    assert got["kl_mean"] <= 0.05, got
    assert got["top1"] >= floor["top1"] - 0.02, (got, floor)


def test_cuda_refuses_an_moe_budget_clearly(models):
    """CUDA has no expert kernels: an MoE model's budget there is refused, whether or not a GPU exists."""
    model = models["q8_0-top1"]
    with pytest.raises(UnsupportedError, match="expert kernels"):
        context(model, device=DEVICE_CUDA, budget=model.device_bytes())


@pytest.mark.skipif(cuda_device_count() == 0, reason="no CUDA device (auto picks none)")
def test_auto_falls_back_to_the_cpu_where_cuda_cannot_take_the_experts(models):
    model = models["q8_0-top1"]
    with pytest.warns(UserWarning, match="expert kernels"):
        llm = Llama(model.path, n_ctx=32, vram_budget="50%", hybrid_device="auto", verbose=False)
    with llm:
        assert llm.placement is None
        llm.eval([1, 2, 3])


def test_a_k_quant_down_matrix_is_refused(tmp_path):
    """A run's 128 columns are half a 256-weight K-quant block: not exact block arithmetic."""
    case = dict(CASES["q8_0-top1"], n_ff_exp=256)
    types = {f"blk.{il}.ffn_down_exps.weight": "Q4_K" for il in range(N_LAYER)}
    m = NativeModel(write_llama_gguf(tmp_path / "k.gguf", **DIMS, **case, tensor_types=types))
    try:
        with pytest.raises(UnsupportedError, match=r"blk\.0\.ffn_down_exps\.weight, which is q4_K"):
            context(m, device=DEVICE_HOST, budget=m.device_bytes())
    finally:
        m.close()


# ---- smallthinker: routed from the layer's input, ReGLU experts whose dead neurons are skipped ----

ST_SIGMOID = {"smallthinker.expert_gating_func": 2}
ST_SWA = {"smallthinker.attention.sliding_window": 4096}  # layer 0 NoPE, layer 1 windowed
ST_DIMS = dict(arch="smallthinker", n_vocab=512, n_layer=N_LAYER, n_ctx_train=512, n_ff=256)
ST_CASES = {
    # runs of 128, 128 and 64
    "st-q8_0-softmax-top1": dict(weight_type="Q8_0", n_embd=128, n_head=4, n_head_kv=2, n_expert=4,
                                 n_expert_used=1, n_ff_exp=320),
    # runs of 128, 128 and 96; sigmoid gating and a window (a NoPE layer)
    "st-q4_0-sigmoid-top2-swa": dict(weight_type="Q4_0", n_embd=256, n_head=8, n_head_kv=4, n_expert=6,
                                     n_expert_used=2, n_ff_exp=352, output_type="Q8_0",
                                     extra_kv={**ST_SIGMOID, **ST_SWA}),
    # runs of 128 and 32; softmax, a window, top-3
    "st-q8_0-softmax-top3-swa": dict(weight_type="Q8_0", n_embd=128, n_head=2, n_head_kv=2, n_expert=5,
                                     n_expert_used=3, n_ff_exp=160, extra_kv=ST_SWA),
}
ST_DECODED = 32


def st_tokens() -> np.ndarray:
    return tokens(PROMPT + ST_DECODED, seed=5)


@pytest.fixture(scope="module")
def st_models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("st-esplit")
    out = {name: NativeModel(write_llama_gguf(folder / f"{name}.gguf", **ST_DIMS, **case))
           for name, case in ST_CASES.items()}
    yield out
    for m in out.values():
        m.close()


@pytest.mark.parametrize("share", ["none", "some", "all"])
@pytest.mark.parametrize("name", ST_CASES)
def test_smallthinker_host_split_equals_the_cpu_exactly(st_models, name, share):
    """The split routes from the logits of the layer's input (the CPU's: smallthinker's attention
    stays there) and runs ReGLU's live neurons only, the same on both sides."""
    model, case = st_models[name], ST_CASES[name]
    _, split_stats, _ = host_equals_cpu(model, share, st_tokens())
    # random weights: about half the neurons are dead, and their up rows are not read
    dense = ST_DECODED * N_LAYER * case["n_expert_used"] * case["n_ff_exp"]
    assert 0 < split_stats["ffn_rows_done"] < 0.8 * dense, split_stats


@pytest.mark.parametrize("name", ST_CASES)
def test_smallthinker_split_stays_close_to_the_plain_path(st_models, name):
    """Against the plain smallthinker path (no budget), to the bound the qwen3moe split is held
    to: each expert's down sum regrouped by runs, float rounding only; the same live neurons
    (the gate rows' dots are the same bits), so the same rows and weight bytes counted."""
    from reference import compare_logits

    model = st_models[name]
    plain, plain_stats, _ = decode(model, seq=st_tokens())
    split, split_stats, _ = decode(model, device=DEVICE_HOST, budget=budgets(model)["some"], seq=st_tokens())
    np.testing.assert_array_equal(split[:PROMPT], plain[:PROMPT])
    got = compare_logits(plain, split)
    assert got["top1"] >= 0.97 and got["kl_median"] <= 1e-10 and got["kl_max"] <= 1e-2, got
    assert split_stats["ffn_rows_done"] == plain_stats["ffn_rows_done"]
    assert st_bytes_per_token(model, budgets(model)["some"]) == st_bytes_per_token(model, 0)


def st_bytes_per_token(model, budget) -> float:
    """The weight bytes a decoded token read (the split's are counted on the CPU's side too)."""
    seq = st_tokens()
    ctx = context(model, device=DEVICE_HOST if budget else DEVICE_NONE, budget=budget)
    try:
        ctx.decode(seq[:PROMPT], 0)
        ctx.reset_stats()
        for i in range(PROMPT, len(seq)):
            ctx.decode(seq[i:i + 1], i)
        return ctx.sparse_stats()["bytes_per_token"]
    finally:
        ctx.close()


def test_smallthinker_exact_router_ties(st_models, tmp_path):
    """Every router row the same: all experts tie for every token; the CPU routes once from the
    layer's input and the device is handed that choice, so host and CPU alone agree exactly."""
    name = "st-q4_0-sigmoid-top2-swa"
    case = ST_CASES[name]
    rows = np.random.default_rng(3).standard_normal(case["n_embd"]).astype(np.float32) * 0.05
    router = np.tile(rows, (case["n_expert"], 1))
    names = {f"blk.{il}.ffn_gate_inp.weight" for il in range(N_LAYER)}
    path = rewrite_gguf(st_models[name].path, tmp_path / "tied.gguf", {n: router for n in names}, drop=names)
    m = NativeModel(path)
    try:
        budget = budgets(m)["some"]
        cpu, cpu_stats, _ = decode(m, budget=budget, seq=st_tokens())
        split, stats, _ = decode(m, device=DEVICE_HOST, budget=budget, seq=st_tokens())
        np.testing.assert_array_equal(split, cpu)
        assert stats == cpu_stats
    finally:
        m.close()
