"""The placement of expert runs (native/src/placement.c, placement_chains.c): the knapsack core
against brute force, the plan of synthetic qwen3moe files with and without a routing profile, the
profile tensors' checks, the placement table, and convert/add_profile.py on an MoE model."""
from __future__ import annotations

import itertools
import sys
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader

from synthetic import write_llama_gguf

from pypowerinfer import placement
from pypowerinfer._ffi import check, ffi, lib
from pypowerinfer.model import NativeContext, NativeModel

sys.path.append(str(Path(__file__).resolve().parents[1]))
from convert import add_profile, experts, write  # noqa: E402

F32 = GGMLQuantizationType.F32
# n_ff_exp 320: runs of 128, 128 and 64 neurons
MOE = dict(arch="qwen3moe", weight_type="Q4_0", n_vocab=512, n_layer=3, n_ctx_train=512, n_embd=256, n_head=8,
           n_head_kv=4, head_dim=64, n_ff=256, n_expert=8, n_expert_used=2, n_ff_exp=320, output_type="Q8_0")
RUNS = 3


# --- the knapsack core on plain arrays -----------------------------------------------------

def knapsack(chains: list[list[tuple[int, float]]], budget: int):
    """pi_plan_knapsack: (taken prefix lengths, totals)."""
    items = [it for c in chains for it in c]
    lens = ffi.new("int32_t[]", [len(c) for c in chains] or [0])
    size = ffi.new("uint64_t[]", [b for b, _ in items] or [0])
    value = ffi.new("double[]", [v for _, v in items] or [0.0])
    taken = ffi.new("int32_t[]", max(len(chains), 1))
    totals = ffi.new("pi_placement_totals *")
    check(lib.pi_plan_knapsack(len(chains), lens, size, value, budget, taken, totals))
    return list(taken)[:len(chains)], totals


def brute_force(chains, budget: int) -> float:
    """The best value over every choice of prefixes that fits."""
    best = 0.0
    for lengths in itertools.product(*[range(len(c) + 1) for c in chains]):
        size = sum(b for c, n in zip(chains, lengths) for b, _ in c[:n])
        if size <= budget:
            best = max(best, sum(v for c, n in zip(chains, lengths) for _, v in c[:n]))
    return best


def random_chains(rng) -> list[list[tuple[int, float]]]:
    """2-4 chains of 1-3 items of unequal sizes whose value per byte does not rise along a chain."""
    chains = []
    for _ in range(rng.integers(2, 5)):
        density, chain = rng.uniform(0.2, 1.0), []
        for _ in range(rng.integers(1, 4)):
            size = int(rng.integers(1, 20))
            chain.append((size, size * density))
            density *= rng.uniform(0.3, 1.0)
        chains.append(chain)
    return chains


def test_greedy_against_brute_force_and_the_lp_bound():
    """greedy <= optimum <= LP bound, and optimum - greedy <= max_loss, the value of the first item
    by rank that did not fit (the bound docs/ARCHITECTURE.md states), on 500 tiny plans."""
    rng = np.random.default_rng(0)
    worst_gap, misses = 0.0, 0
    for _ in range(500):
        chains = random_chains(rng)
        budget = int(rng.integers(0, sum(b for c in chains for b, _ in c) + 2))
        taken, t = knapsack(chains, budget)
        used = sum(b for c, n in zip(chains, taken) for b, _ in c[:n])
        got = sum(v for c, n in zip(chains, taken) for _, v in c[:n])
        best = brute_force(chains, budget)
        assert used <= budget
        assert t.value == pytest.approx(got)
        assert got <= best + 1e-9 <= t.upper_bound_value + 2e-9
        assert best - got <= t.max_loss + 1e-9
        assert t.upper_bound_value - got <= t.max_loss + 1e-9
        worst_gap = max(worst_gap, best - got)
        misses += best - got > 1e-9
    assert misses > 0 and worst_gap > 0  # unequal sizes do make greedy miss: the bound is needed


def test_a_case_greedy_misses():
    """Budget 10: greedy takes the densest item (6 bytes) and then fits neither 5; the optimum
    takes both 5s. The loss, 3.4, is within max_loss (5) and the LP bound is 6.6 + 4/5 of 5."""
    chains = [[(6, 6.6)], [(5, 5.0)], [(5, 5.0)]]
    taken, t = knapsack(chains, 10)
    assert taken == [1, 0, 0]
    assert t.value == pytest.approx(6.6) and t.max_loss == pytest.approx(5.0)
    assert t.upper_bound_value == pytest.approx(10.6)
    assert brute_force(chains, 10) == pytest.approx(10.0)


@pytest.mark.parametrize("chains, words", [
    ([[(4, 1.0), (4, 2.0)]], "rises along chain 0"),
    ([[(0, 1.0)]], "bytes > 0"),
    ([[(4, float("nan"))]], "finite value"),
    ([[(4, -1.0)]], "finite value"),
])
def test_knapsack_refuses_bad_items(chains, words):
    with pytest.raises(ValueError, match=words):
        knapsack(chains, 10)


# --- plans of synthetic qwen3moe files ----------------------------------------------------

@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    return write_llama_gguf(tmp_path_factory.mktemp("moe") / "m.gguf", **MOE)


def with_tensors(src: Path, out: Path, tensors: dict[str, np.ndarray]) -> Path:
    """src with F32 tensors added (numpy order: ffn_exp_run_freq is [n_expert, runs])."""
    reader = GGUFReader(src)
    write.write_gguf(out, reader, [write.NewTensor(n, np.asarray(a, np.float32), F32) for n, a in tensors.items()], {})
    return out


def uniform_profile(share=0.25) -> dict[str, np.ndarray]:
    return {name: np.full(shape, share) for il in range(MOE["n_layer"]) for name, shape in (
        (f"blk.{il}.ffn_exp_freq", (MOE["n_expert"],)), (f"blk.{il}.ffn_exp_run_freq", (MOE["n_expert"], RUNS)))}


def test_plain_file_plans_experts_at_the_routing_odds(plain):
    """Without a profile each expert is routed n_expert_used / n_expert of the time and reads
    every row: all runs are worth the same per byte, and a whole-model budget holds them all."""
    with closing(NativeModel(plain)) as m:
        assert (m.info.n_expert, m.info.n_expert_used, m.info.n_ff_exp) == (8, 2, 320)
        full = m.plan(m.device_bytes())
        assert full.moe and full.neuron_bytes == 0
        for x in full.layers:
            assert x.n_hot_expert_runs == x.n_expert_runs == MOE["n_expert"] * RUNS
            assert x.expert_coverage == pytest.approx(1.0)
        assert full.fixed_bytes + full.expert_bytes == m.device_bytes()
        # every expert's bytes, each read 2/8 of the time
        assert full.value == pytest.approx(full.expert_bytes * 2 / 8)
        assert full.upper_bound_value == pytest.approx(full.value) and full.max_loss == 0
        assert m.plan_experts(m.device_bytes()).all() and not m.plan_experts(0).any()
        with pytest.raises(ValueError, match="exp_hot holds 5 runs"):
            check(lib.pi_model_plan_experts(m.handle, 0, ffi.new("uint8_t[]", 5), 5))
        none = m.plan(0)
        assert none.expert_bytes == 0 and none.value == 0 and all(x.expert_coverage == 0 for x in none.layers)


def test_budget_monotonicity(plain):
    """Past what every token reads (placed first, whole), more budget never holds less: bytes
    placed, value and the LP bound grow; every plan stays within its budget and within max_loss
    of its bound."""
    with closing(NativeModel(plain)) as m:
        total = m.device_bytes()
        fixed = m.plan(total).fixed_bytes
        last = None
        for budget in np.linspace(fixed, total, 41).astype(int):
            p = m.plan(int(budget))
            assert p.fixed_bytes == fixed
            assert p.fixed_bytes + p.neuron_bytes + p.expert_bytes <= p.budget
            assert p.value <= p.upper_bound_value + 1e-6
            assert p.upper_bound_value - p.value <= p.max_loss + 1e-6
            assert sum(x.expert_bytes for x in p.layers) == p.expert_bytes
            if last is not None:
                assert p.expert_bytes >= last.expert_bytes
                assert p.value >= last.value - 1e-6 and p.upper_bound_value >= last.upper_bound_value - 1e-6
            last = p


def test_a_profile_puts_the_hot_expert_first(plain, tmp_path):
    """Layer 1's expert 3 takes 90% of its tokens: a budget of one expert past the fixed part
    holds exactly that expert's runs, covering 0.9 / (0.9 + 7 x 0.05) of the layer's reads."""
    prof = uniform_profile()
    hot = np.full(8, 0.05)
    hot[3] = 0.9
    prof["blk.1.ffn_exp_freq"] = hot
    prof["blk.1.ffn_exp_run_freq"] = np.repeat(hot[:, None], RUNS, axis=1)
    path = with_tensors(plain, tmp_path / "hot.gguf", prof)
    with closing(NativeModel(path)) as m:
        full = m.plan(m.device_bytes())
        per_expert = full.layers[1].expert_bytes // 8
        p = m.plan(full.fixed_bytes + per_expert)
        assert [x.n_hot_expert_runs for x in p.layers] == [0, RUNS, 0]
        hot = m.plan_experts(full.fixed_bytes + per_expert)
        assert hot.shape == (3, 8, RUNS) and hot[1, 3].all() and hot.sum() == RUNS
        assert p.layers[1].expert_coverage == pytest.approx(0.9 / (0.9 + 7 * 0.05), rel=1e-5)
        assert p.value == pytest.approx(0.9 * per_expert, rel=1e-5)


def test_live_shares_order_an_experts_runs(plain, tmp_path):
    """ReLU-gated experts: run 2 (the short one) live for 80% of routed tokens, runs 0 and 1 for
    10%: it is read most per byte, so it alone is placed first, of expert 0 of layer 0."""
    prof = uniform_profile(0.02)
    prof["blk.0.ffn_exp_freq"][0] = 1.0
    prof["blk.0.ffn_exp_run_freq"][0] = [0.1, 0.1, 0.8]
    path = with_tensors(plain, tmp_path / "relu.gguf", prof)
    with closing(NativeModel(path)) as m:
        full = m.plan(m.device_bytes())
        gate_row = full.layers[0].expert_bytes / (8 * 320 * 3)  # Q4_0 rows: gate, up and down alike
        p = m.plan(full.fixed_bytes + int(64 * 3 * gate_row) + 8)
        assert [x.n_hot_expert_runs for x in p.layers] == [1, 0, 0]
        assert list(np.argwhere(m.plan_experts(p.budget))[0]) == [0, 0, 2] and m.plan_experts(p.budget).sum() == 1
        assert p.layers[0].expert_bytes == pytest.approx(64 * 3 * gate_row, rel=0.02)


BAD = [
    ("blk.1.ffn_exp_freq", np.full(8, np.nan), "blk.1.ffn_exp_freq"),
    ("blk.0.ffn_exp_freq", np.full(8, 1.5), "blk.0.ffn_exp_freq"),
    ("blk.2.ffn_exp_freq", np.full(8, -0.1), "blk.2.ffn_exp_freq"),
    ("blk.0.ffn_exp_freq", np.full(7, 0.2), "blk.0.ffn_exp_freq"),
    ("blk.0.ffn_exp_run_freq", np.full((8, 2), 0.2), "blk.0.ffn_exp_run_freq"),
    ("blk.1.ffn_exp_run_freq", np.full((8, RUNS), 0.5), "blk.1.ffn_exp_run_freq"),  # above the routing share
]


@pytest.mark.parametrize("name, values, words", BAD, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(BAD)])
def test_bad_profile_tensors_are_refused_by_name(plain, tmp_path, name, values, words):
    prof = uniform_profile()
    prof[name] = values
    path = with_tensors(plain, tmp_path / "bad.gguf", prof)
    with pytest.raises(ValueError, match=words.replace(".", r"\.")):
        NativeModel(path)


def test_run_shares_need_the_expert_shares(plain, tmp_path):
    prof = {k: v for k, v in uniform_profile().items() if k != "blk.2.ffn_exp_freq"}
    with pytest.raises(ValueError, match=r"blk\.2\.ffn_exp_run_freq.*blk\.2\.ffn_exp_freq"):
        NativeModel(with_tensors(plain, tmp_path / "half.gguf", prof))


def test_placement_cli_shows_expert_coverage(plain, capsys):
    assert placement.main([str(plain), "25%", "50%"]) == 0
    out = capsys.readouterr().out
    assert out.count("device budget") == 2 and out.count("exp runs") == 2
    assert "below the LP bound" in out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["0"], ["1"], ["2"])]
    assert len(rows) == 6 and all(r[3] == str(8 * RUNS) and r[5].endswith("%") for r in rows)


# --- the routing capture and the converter --------------------------------------------------

def test_expert_capture_records_the_router_top_k(plain):
    """The captured experts are the top n_expert_used of the router (F32) on the captured FFN
    input, most probable first, wherever the choice is not a near tie."""
    with closing(NativeModel(plain)) as m:
        ctx = NativeContext(m, n_ctx=64, n_batch=16, n_threads=2, n_threads_batch=2, logits_all=False, sparse=0)
        n = 40
        x = np.zeros((3, n, 256), np.float32)
        routes = np.full((3, n, 2), -1, np.int32)
        with pytest.raises(ValueError, match="no act"):
            ctx.set_capture(x, np.zeros((3, n, 256), np.float32), routes)
        ctx.set_capture(x, None, routes)
        ctx.decode(np.arange(1, n + 1, dtype=np.int32), 0)  # three batches of 16
        ctx.set_capture(None, None)
        ctx.close()
    reader = GGUFReader(plain)
    checked = 0
    for il in range(3):
        router = np.asarray(write.tensor(reader, f"blk.{il}.ffn_gate_inp.weight").data, np.float32)
        logits = x[il] @ router.T
        order = np.argsort(-logits, axis=1)
        for t in range(n):
            gaps = -np.diff(np.sort(logits[t])[::-1][:3])
            if gaps.min() > 1e-3:
                assert list(routes[il, t]) == list(order[t, :2])
                checked += 1
    assert checked > 60


def test_a_dense_model_has_no_routing_to_capture(tmp_path):
    with closing(NativeModel(write_llama_gguf(tmp_path / "dense.gguf"))) as m:
        info = m.info
        ctx = NativeContext(m, n_ctx=16, n_batch=16, n_threads=1, n_threads_batch=1, logits_all=False, sparse=0)
        x = np.zeros((info.n_layer, 16, info.n_embd), np.float32)
        act = np.zeros((info.n_layer, 16, info.n_ff), np.float32)
        with pytest.raises(ValueError, match="no experts"):
            ctx.set_capture(x, act, np.zeros((info.n_layer, 16, 2), np.int32))
        ctx.close()


def test_live_run_share_counts_each_run():
    """Runs of 128 and a last short one: each run's mean share of positive gate outputs."""
    rng = np.random.default_rng(1)
    gate = rng.standard_normal((300, 16)).astype(np.float32)
    x = rng.standard_normal((5, 16)).astype(np.float32)
    live = x @ gate.T > 0
    want = [live[:, a:b].mean() for a, b in ((0, 128), (128, 256), (256, 300))]
    assert experts.live_run_share(gate, x, 300) == pytest.approx(want)


def test_live_shares_of_a_files_experts(plain):
    """ReLU-gated experts' live shares from the file's gate rows: shares in [0, 1], each run's
    mean over the tokens routed to its expert, 1 for an expert no token reached."""
    with closing(NativeModel(plain)) as m:
        info = m.info
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 12, 256)).astype(np.float16)
    routes = rng.integers(0, 7, (3, 12, 2)).astype(np.int32)  # expert 7 never routed
    live = experts.live_shares(GGUFReader(plain), info, routes, x)
    assert live.shape == (3, 8, RUNS) and (live >= 0).all() and (live <= 1).all()
    assert (live[:, 7] == 1).all() and (live[:, :7] < 1).all()


FAST = ["--tokens", "512", "-q", "--no-plot", "--threads", "2"]


def test_converter_profiles_the_routing(plain, tmp_path, capsys):
    """add_profile.py on an MoE model: no predictors; per layer the experts' routing shares
    (summing to n_expert_used) and, SwiGLU experts, every run read as often as its expert; dense
    MoE the decision; the file plans with them; re-profiling needs --force and replaces them."""
    out = tmp_path / "m.powerinfer.gguf"
    assert add_profile.main([str(plain), "-o", str(out), *FAST]) == 0
    assert "exp" in capsys.readouterr().out
    reader = GGUFReader(out)
    names = {t.name: t for t in reader.tensors}
    assert not any(n.endswith(("fc1.weight", "ffn_down_t.weight", ".ffn_freq")) for n in names)
    for il in range(3):
        freq = np.asarray(names[f"blk.{il}.ffn_exp_freq"].data)
        runs = np.asarray(names[f"blk.{il}.ffn_exp_run_freq"].data).reshape(8, RUNS)
        assert freq.sum() == pytest.approx(2.0, abs=1e-5)
        assert np.array_equal(runs, np.repeat(freq[:, None], RUNS, axis=1))
    assert len(reader.tensors) == len(GGUFReader(plain).tensors) + 6
    decision = reader.fields["powerinfer.sparse_decision"].contents()
    assert "MoE" in decision and "routing" in decision
    assert reader.fields["powerinfer.sparse_default"].contents() is False
    with closing(NativeModel(out)) as m:
        p = m.plan(m.device_bytes() // 2)
        assert p.expert_bytes > 0 and not m.has_predictors
    assert add_profile.main([str(out), "-o", str(tmp_path / "again.gguf"), *FAST]) == 2
    assert add_profile.main([str(out), "-o", str(tmp_path / "again.gguf"), *FAST, "--force"]) == 0
    assert len(GGUFReader(tmp_path / "again.gguf").tensors) == len(reader.tensors)


def test_converter_measures_live_shares_of_relu_experts(plain, tmp_path, monkeypatch):
    """The same file run with ReLU-gated experts (the activation overridden at load): each run's
    read share is its expert's routing share times a live share, about half on random weights."""
    from pypowerinfer.tokenizer import Tokenizer

    def relu_model(path):
        model = NativeModel(path, ffn_act="relu_glu")
        return model, Tokenizer(model.metadata())
    monkeypatch.setattr(add_profile, "_load_native", relu_model)
    out = tmp_path / "relu.powerinfer.gguf"
    assert add_profile.main([str(plain), "-o", str(out), *FAST]) == 0
    names = {t.name: np.asarray(t.data) for t in GGUFReader(out).tensors}
    for il in range(3):
        freq, runs = names[f"blk.{il}.ffn_exp_freq"], names[f"blk.{il}.ffn_exp_run_freq"].reshape(8, RUNS)
        routed = freq > 0
        live = runs[routed] / freq[routed, None]
        assert (runs <= freq[:, None] + 1e-7).all() and 0.3 < live.mean() < 0.7
    assert "live share" in GGUFReader(out).fields["powerinfer.sparse_decision"].contents()
