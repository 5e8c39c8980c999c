"""convert/add_profile.py: the extended GGUF, its safety (input untouched, no half-written
output), its errors, and the predictors' quality, on small synthetic models (plus one slow
run on SmolLM2).

Tests that need the native runtime's sparse path (sparse=2 computing fewer FFN rows) skip
with a clear reason while the runtime runs converted files densely: see `needs_sparse_path`.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType
from gguf.quants import dequantize

from synthetic import write_llama_gguf

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after site-packages: an installed pypowerinfer still wins

from convert import add_profile, corpus, predictor, write  # noqa: E402
from convert import profile as prof  # noqa: E402

TOKENS = "1024"  # 4 chunks of 256: 3 to train on, 1 to validate
FAST = ["--tokens", TOKENS, "-q", "--no-plot", "--threads", "2", "--assume-speedup", "1.0"]  # no timing
FIXED = [*FAST, "--sparsity-target", "0.5"]  # no perplexity search: one candidate
ADDED = ("ffn_freq", "fc1.weight", "fc2.weight", "ffn_down_t.weight")
KEYS = {
    "powerinfer.format_version": GGUFValueType.UINT32,
    "powerinfer.activation": GGUFValueType.STRING,
    "powerinfer.layer_thresholds": GGUFValueType.ARRAY,
    "powerinfer.sparse_threshold": GGUFValueType.FLOAT32,
    "powerinfer.sparsity_target": GGUFValueType.FLOAT32,
    "powerinfer.calibration_corpus": GGUFValueType.STRING,
    "powerinfer.calibration_tokens": GGUFValueType.UINT32,
    "powerinfer.sparse_default": GGUFValueType.BOOL,
    "powerinfer.sparse_decision": GGUFValueType.STRING,
}
DOWN_T_CHOICES = (GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q5_0, GGMLQuantizationType.Q8_0)


def run(*argv) -> int:
    return add_profile.main([str(a) for a in argv])


def fingerprint(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def field_bytes(field) -> list[bytes]:
    """A reader field's type and value parts as bytes (the key's own parts excluded)."""
    return [bytes(np.asarray(part).tobytes()) for part in field.parts[2:]]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return write_llama_gguf(tmp_path_factory.mktemp("model") / "m.gguf", n_ff=96)


@pytest.fixture(scope="module")
def converted(model):
    """(input, output, input fingerprint before, report) of one default conversion."""
    before = fingerprint(model)
    assert run(model, *FIXED) == 0
    out = model.with_name("m.powerinfer.gguf")
    return model, out, before, json.loads(model.with_name("m.profile.json").read_text())


# --- the file ---------------------------------------------------------------------------

def test_output_round_trips_with_every_original_byte(converted):
    src, out, _, _ = converted
    a, b = GGUFReader(src), GGUFReader(out)
    assert out.read_bytes()[:4] == b"GGUF"
    tb = {t.name: t for t in b.tensors}
    for t in a.tensors:
        u = tb[t.name]
        assert u.tensor_type == t.tensor_type and list(u.shape) == list(t.shape), t.name
        assert np.asarray(u.data).tobytes() == np.asarray(t.data).tobytes(), t.name
    for name, field in a.fields.items():
        if name.startswith("GGUF.") and name != "GGUF.version":
            continue
        assert name in b.fields, name
        assert b.fields[name].types == field.types, name
        assert field_bytes(b.fields[name]) == field_bytes(field), name
    assert len(b.tensors) == len(a.tensors) + 2 * len(ADDED)


def test_added_tensors_and_keys(converted):
    src, out, _, rep = converted
    r = GGUFReader(out)
    t = {x.name: x for x in r.tensors}
    n_embd, n_ff, n_layer = 64, 96, 2
    for layer in range(n_layer):
        freq = t[f"blk.{layer}.ffn_freq"]
        assert freq.tensor_type == GGMLQuantizationType.F32 and list(freq.shape) == [n_ff]
        assert 0.0 <= float(np.min(freq.data)) and float(np.max(freq.data)) <= 1.0
        fc1, fc2 = t[f"blk.{layer}.fc1.weight"], t[f"blk.{layer}.fc2.weight"]
        r_ = int(fc1.shape[1])
        assert list(fc1.shape) == [n_embd, r_] and list(fc2.shape) == [r_, n_ff]
        assert fc1.tensor_type == fc2.tensor_type
        assert fc1.tensor_type in (GGMLQuantizationType.F16, GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_0)
        assert rep["layers"][layer]["rank"] == r_
        down_t = t[f"blk.{layer}.ffn_down_t.weight"]
        assert list(down_t.shape) == [n_embd, n_ff]
        # auto: a 4-bit ffn_down's transpose is searched in Q8_0, then Q4_0/Q5_0 tried (test_decide.py)
        assert t[f"blk.{layer}.ffn_down.weight"].tensor_type == GGMLQuantizationType.Q4_0
        assert down_t.tensor_type in DOWN_T_CHOICES
        assert [down_t.tensor_type.name] == rep["ffn_down_t"]["types"]
    for key, vtype in KEYS.items():
        assert r.fields[key].types[0] == vtype, key
    th = r.fields["powerinfer.layer_thresholds"]
    assert th.types == [GGUFValueType.ARRAY, GGUFValueType.FLOAT32]
    assert len(th.contents()) == n_layer
    assert th.contents() == pytest.approx([x["threshold"] for x in rep["layers"]])
    assert r.fields["powerinfer.format_version"].contents() == 1
    assert r.fields["powerinfer.activation"].contents() == "silu_glu"
    assert r.fields["powerinfer.sparse_threshold"].contents() == 0.0
    assert r.fields["powerinfer.sparsity_target"].contents() == pytest.approx(0.5)
    assert r.fields["powerinfer.calibration_tokens"].contents() == rep["calibration"]["tokens"] > 0
    assert "pydoc_data.topics" in r.fields["powerinfer.calibration_corpus"].contents()


def test_input_is_untouched(converted):
    src, _, before, _ = converted
    assert fingerprint(src) == before


def test_down_t_rows_are_down_columns(converted):
    src, out, _, _ = converted
    _check_down_t(src, out)


def _check_down_t(src: Path, out: Path) -> None:
    a = {t.name: t for t in GGUFReader(src).tensors}
    b = {t.name: t for t in GGUFReader(out).tensors}
    for name, down in a.items():
        if not name.endswith("ffn_down.weight"):
            continue
        dt = b[name.replace("ffn_down", "ffn_down_t")]
        w = dequantize(down.data, down.tensor_type).reshape(int(down.shape[1]), int(down.shape[0]))
        wt = dequantize(dt.data, dt.tensor_type).reshape(int(dt.shape[1]), int(dt.shape[0]))
        assert wt.shape == w.T.shape
        # requantizing along the other axis: within one quantization step of the block's range
        step = {GGMLQuantizationType.F16: 1e-3}.get(dt.tensor_type, np.abs(w).max() / 7)
        assert np.abs(wt - w.T).max() <= step, name
        assert np.corrcoef(wt.ravel(), w.T.ravel())[0, 1] > 0.97


def test_down_t_in_the_same_type_on_request(tmp_path, model):
    out = tmp_path / "same.gguf"
    assert run(model, "-o", out, "--down-t-type", "same", *FIXED) == 0
    t = {x.name: x for x in GGUFReader(out).tensors}
    assert t["blk.1.ffn_down_t.weight"].tensor_type == GGMLQuantizationType.Q4_0
    _check_down_t(model, out)


def test_down_t_type_rule():
    Q = GGMLQuantizationType
    assert write.down_t_type(Q.Q4_1, 576) == Q.Q8_0
    assert write.down_t_type(Q.Q4_1, 576, "same") == Q.Q4_1
    assert write.down_t_type(Q.Q8_0, 576) == Q.Q8_0
    assert write.down_t_type(Q.F16, 576) == Q.F16
    assert write.down_t_type(Q.F32, 48) == Q.F32
    assert write.down_t_type(Q.Q6_K, 4096) == Q.Q8_0
    assert write.down_t_type(Q.Q4_K, 640, "same") == Q.F16  # gguf-py cannot quantize K-quants
    assert write.down_t_type(Q.Q4_0, 48, "same") == Q.F16  # 48 is no multiple of 32
    assert write.down_t_type(Q.Q4_0, 48) == Q.F16


def test_down_t_falls_back_to_f16_when_n_embd_is_not_a_block_multiple(tmp_path):
    # n_embd 48 cannot hold Q8_0 blocks of 32 along ffn_down_t's rows; ffn_down's rows (n_ff 96) can
    src = write_llama_gguf(tmp_path / "odd.gguf", n_embd=48, n_ff=96, weight_type="F16",
                           tensor_types={f"blk.{i}.ffn_down.weight": "Q8_0" for i in range(2)})
    assert run(src, *FIXED) == 0
    out = tmp_path / "odd.powerinfer.gguf"
    t = {x.name: x for x in GGUFReader(out).tensors}
    assert t["blk.0.ffn_down_t.weight"].tensor_type == GGMLQuantizationType.F16
    assert t["blk.0.fc1.weight"].tensor_type == GGMLQuantizationType.F16  # 48 % 32 != 0: no Q8_0
    _check_down_t(src, out)


def test_converted_file_runs_dense_exactly_like_the_original(converted):
    from pypowerinfer.model import NativeContext, NativeModel

    src, out, _, _ = converted
    tokens = np.arange(3, 40, dtype=np.int32)
    logits = []
    for path in (src, out):
        m = NativeModel(path)
        ctx = NativeContext(m, n_ctx=64, n_batch=64, n_threads=2, n_threads_batch=2, logits_all=False, sparse=0)
        ctx.decode(tokens, 0)
        logits.append(ctx.logits[0].copy())
        ctx.close()
        m.close()
    np.testing.assert_array_equal(logits[0], logits[1])


def test_report_json_has_the_measurements(converted):
    _, _, _, rep = converted
    assert rep["calibration"]["validation_tokens"] > 0
    assert len(rep["layers"]) == 2
    for row in rep["layers"]:
        for k in ("recall", "count_recall", "precision", "sparsity", "label_sparsity", "threshold", "rank"):
            assert k in row
    assert rep["chosen"]["eval"]["ppl"] > 0
    assert np.asarray(rep["neuron_freq"]).shape == (2, 96)


# --- the predictors ---------------------------------------------------------------------

def test_recall_on_held_out_text_meets_the_target(converted):
    """Thresholds were chosen on the calibration split's validation chunks; measure them on
    the held-out topics, which the converter never saw."""
    from pypowerinfer.model import NativeContext, NativeModel
    from pypowerinfer.tokenizer import Tokenizer

    _, out, _, rep = converted
    m = NativeModel(out)
    tok = Tokenizer(m.metadata())
    ids = corpus.token_stream(lambda b: tok.encode(b, add_bos=False, special=False), corpus.heldout_entries(), 768)
    chunks = corpus.chunk(ids, 256)
    info = m.info
    cap_in = np.zeros((info.n_layer, 256, info.n_embd), np.float32)
    cap_act = np.zeros((info.n_layer, 256, info.n_ff), np.float32)
    ctx = NativeContext(m, n_ctx=256, n_batch=256, n_threads=2, n_threads_batch=2, logits_all=False, sparse=0)
    ctx.set_capture(cap_in, cap_act)
    xs, acts = [], []
    for c in chunks:
        ctx.decode(c, 0)
        xs.append(cap_in.copy())
        acts.append(cap_act.copy())
    ctx.set_capture(None, None)
    ctx.close()
    x, act = np.concatenate(xs, 1), np.concatenate(acts, 1)
    r = GGUFReader(out)
    t = {x_.name: x_ for x_ in r.tensors}
    thresholds = r.fields["powerinfer.layer_thresholds"].contents()
    s = r.fields["powerinfer.sparsity_target"].contents()
    target = rep["chosen"]["target_recall"]
    k = prof.top_counts(info.n_ff, [s])[0]
    for layer in range(info.n_layer):
        fc1 = write.decode_weight(t[f"blk.{layer}.fc1.weight"].data, t[f"blk.{layer}.fc1.weight"].tensor_type)
        fc2 = write.decode_weight(t[f"blk.{layer}.fc2.weight"].data, t[f"blk.{layer}.fc2.weight"].tensor_type)
        pred = predictor.Predictor(fc1.reshape(-1, info.n_embd), fc2.reshape(info.n_ff, -1))
        mag = np.abs(act[layer])
        labels = mag >= prof.kth_largest(mag, [k])[0][:, None]
        weights = np.minimum(mag / mag.mean(-1, keepdims=True), prof.WEIGHT_CAP)
        q = predictor.evaluate(pred.logits(x[layer]), labels, weights, thresholds[layer])
        assert q.recall >= target - 0.05, (layer, q)
        assert rep["layers"][layer]["recall"] >= target - 1e-6


def test_predictor_learns_a_planted_rule():
    rng = np.random.default_rng(1)
    n, d, n_ff, r = 6000, 48, 128, 32
    x = rng.standard_normal((n, d)).astype(np.float32)
    truth = predictor.Predictor(rng.standard_normal((8, d)).astype(np.float32),
                                rng.standard_normal((n_ff, 8)).astype(np.float32))
    z = truth.logits(x)
    y = z > np.quantile(z, 0.7)  # 30% active
    w = np.ones_like(z)
    pred = predictor.train(x[:5000], lambda rows: (y[rows], w[rows]), n_ff, r, epochs=10)
    q = predictor.choose_threshold(pred.logits(x[5000:]), y[5000:], w[5000:], 0.95)
    assert q.recall >= 0.95 and q.sparsity > 0.5, q


def test_choose_threshold_is_the_weighted_quantile():
    rng = np.random.default_rng(2)
    z = rng.standard_normal((300, 200)).astype(np.float32)
    y = rng.random((300, 200)) < 0.4
    w = rng.random((300, 200)).astype(np.float32)
    for target in (0.5, 0.9, 0.99, 1.0):
        q = predictor.choose_threshold(z, y, w, target)
        assert q.recall >= target - 1e-9
        # brute force: the largest logit among the positives that still reaches the target
        pl, pw = z[y], w[y].astype(np.float64)
        order = np.argsort(-pl)
        cum = np.cumsum(pw[order])
        best = pl[order[np.searchsorted(cum, target * cum[-1] * (1 - 1e-9))]]
        assert q.threshold == pytest.approx(float(best))


def test_rank_ladder():
    assert predictor.rank_ladder(256) == [64, 128, 256]
    assert predictor.rank_ladder(64) == [64]
    assert predictor.rank_ladder(192) == [64, 128, 192]


def test_each_layer_climbs_the_rank_ladder_only_while_a_token_reads_less():
    """Free rows (row_bytes 0): a larger predictor only adds bytes, so every layer keeps the
    smallest rank; without row_bytes (--rank) every layer takes the rank given."""
    rng = np.random.default_rng(0)
    n_layer, n_tok, n_embd, n_ff = 2, 512, 64, 96
    act = np.where(rng.random((n_layer, n_tok, n_ff)) < 0.2, rng.random((n_layer, n_tok, n_ff)), 0.0)
    p = prof.Profile(activation="relu_glu", n_layer=n_layer, n_embd=n_embd, n_ff=n_ff, targets=[0.8],
                ffn_in=rng.standard_normal((n_layer, n_tok, n_embd)).astype(np.float16),
                act_abs=act.astype(np.float16), kth=np.zeros((1, n_layer, n_tok), np.float16),
                mean_abs_act=act.mean(axis=1).astype(np.float32),
                nonzero_share=(act > 0).mean(axis=1).astype(np.float32), n_train=384, val_chunks=[],
                dense_val_nll=1.0, tokens_per_s=1.0, seconds=1.0)
    chosen = add_profile.step_train(p, 0, [256] * n_layer, epochs=1, recall=0.95, row_bytes=[0.0] * n_layer)
    assert [f.rank for f in chosen] == [64, 64]
    given = add_profile.step_train(p, 0, [128] * n_layer, epochs=1, recall=0.95)
    assert [f.rank for f in given] == [128, 128]


def test_default_rank():
    assert predictor.default_rank(576, 1536) == 64
    assert predictor.default_rank(64, 96) == 64
    assert predictor.default_rank(4096, 11008) % 64 == 0


def test_relu_model_uses_its_natural_sparsity(tmp_path):
    """bamboo (dReLU: relu(gate) * relu(up)): active means act != 0, no top-k choice; the
    candidates differ by recall only."""
    src = write_llama_gguf(tmp_path / "bamboo.gguf", arch="bamboo", n_ff=96)
    seen = []

    def fake_eval(cand):
        seen.append(cand.recall)
        return {"ppl": 100.0 * (1 + (1 - cand.recall) * 0.4), "ffn_rows_share": 0.3, "nll": 0.0, "tokens": 1,
                "seconds": 0.0, "sparse": 2, "shift": 0.0}

    orig_init = add_profile.Chooser.__init__

    def init(self, *a, **k):
        orig_init(self, *a, **k)
        self.dense_ppl = 100.0

    out = tmp_path / "b.gguf"
    args = add_profile.parse_args([str(src), "-o", str(out), "--max-ppl-increase", "1", *FAST])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(add_profile.Chooser, "__init__", init)
        rep = add_profile.convert(args, evaluate=fake_eval)
    assert seen == [0.95, 0.97, 0.98]  # 0.95: +2%, 0.97: +1.2% fail; 0.98: +0.8% passes (walking denser)
    assert rep["chosen"]["target_recall"] == pytest.approx(0.98)
    r = GGUFReader(out)
    assert r.fields["powerinfer.activation"].contents() == "relu_relu_glu"
    natural = r.fields["powerinfer.sparsity_target"].contents()
    assert 0.5 < natural < 0.95  # relu(g) * relu(u) of random weights: ~3/4 zeros
    for row in rep["layers"]:
        assert row["label_sparsity"] == pytest.approx(natural, abs=0.1)
        assert row["recall"] >= 0.98 - 1e-6
    freq = {t.name: t for t in r.tensors}["blk.0.ffn_freq"].data
    assert float(np.mean(freq)) == pytest.approx(1 - natural, abs=0.1)


@pytest.mark.parametrize("arch", ["falcon", "opt"])
def test_an_ffn_without_a_gate_is_profiled_and_runs_sparse(tmp_path, arch):
    """opt and falcon: the activation profiled is act(up x), and the written file runs the sparse
    FFN over up's rows (falcon here is llama.cpp's GELU one, opt PowerInfer's ReLU)."""
    from pypowerinfer import Llama

    # 512 trained positions: opt's learned ones must cover the converter's 256-token chunks
    src = write_llama_gguf(tmp_path / f"{arch}.gguf", arch=arch, n_ff=256, n_head_kv=4, n_ctx_train=512)
    out = tmp_path / "p.gguf"
    add_profile.convert(add_profile.parse_args([str(src), "-o", str(out), *FAST]))
    with Llama(str(out), n_ctx=64, verbose=False, sparse="all") as llm:
        llm.eval(list(range(3, 40, 3)))
        stats = llm._ctx.stats()
    assert 0 < stats["ffn_rows_done"] < stats["ffn_rows_dense"]


# --- choosing the sparsity ----------------------------------------------------------------

@pytest.mark.parametrize("budget, expected", [(2.5, (0.4, 0.95)), (10.0, (0.6, 0.95)), (3.5, (0.5, 0.95)),
                                              (0.7, (0.3, 0.98)), (0.1, (0.3, 0.99))])
def test_search_picks_the_sparsest_setting_within_the_budget(tmp_path, model, budget, expected):
    """The evaluation is injected (ppl rising with sparsity), so the walk is tested whatever
    the native sparse path can do today."""
    increase = {(0.3, 0.99): 0.2, (0.3, 0.98): 0.5, (0.3, 0.95): 1.0, (0.4, 0.95): 2.0, (0.5, 0.95): 3.0,
                (0.6, 0.95): 5.0}
    seen = []

    def fake_eval(cand):
        setting = (round(cand.sparsity_target, 2), round(cand.recall, 2))
        seen.append(setting)
        assert cand.path.is_file()
        return {"ppl": 100.0 * (1 + increase[setting] / 100), "ffn_rows_share": 0.6,
                "nll": 0.0, "tokens": 1, "seconds": 0.0, "sparse": 2, "shift": 0.0}

    out = tmp_path / "o.gguf"
    args = add_profile.parse_args([str(model), "-o", str(out), "--max-ppl-increase", str(budget), *FAST])
    orig_init = add_profile.Chooser.__init__

    def init(self, *a, **k):  # the fake's dense perplexity
        orig_init(self, *a, **k)
        self.dense_ppl = 100.0

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(add_profile.Chooser, "__init__", init)
        rep = add_profile.convert(args, evaluate=fake_eval)
    chosen = (rep["chosen"]["sparsity_target"], rep["chosen"]["target_recall"])
    assert chosen == pytest.approx(expected)
    assert seen[0] == (0.3, 0.95)  # the walk starts at the densest target
    r = GGUFReader(out)
    assert r.fields["powerinfer.sparsity_target"].contents() == pytest.approx(expected[0])
    assert r.fields["powerinfer.target_recall"].contents() == pytest.approx(expected[1])
    assert leftovers(tmp_path) == []
    assert len(rep["candidates"]) == len(seen)


def test_no_search_when_the_runtime_runs_dense(tmp_path, model):
    """A runtime without the sparse path reports every FFN row computed under sparse=2: the
    perplexity says nothing then, so the first (densest) target is kept and flagged unmeasured."""
    seen = []

    def dense_eval(cand):
        seen.append(cand.sparsity_target)
        return {"ppl": 1.0, "ffn_rows_share": 1.0, "nll": 0.0, "tokens": 1, "seconds": 0.0, "sparse": 2,
                "shift": 0.0}

    out = tmp_path / "o.gguf"
    args = add_profile.parse_args([str(model), "-o", str(out), "--max-ppl-increase", "1", *FAST])
    rep = add_profile.convert(args, evaluate=dense_eval)
    assert seen == [0.3] and rep["chosen"]["sparsity_target"] == 0.3
    assert rep["ppl_measured_sparse"] is False


def test_search_with_the_native_runtime(tmp_path, model):
    out = tmp_path / "o.gguf"
    args = add_profile.parse_args([str(model), "-o", str(out), "--max-ppl-increase", "1000", *FAST])
    rep = add_profile.convert(args)
    if not rep["ppl_measured_sparse"]:
        pytest.skip("native sparse path (sparse=2) not available yet: it computed every FFN row")
    # a huge budget: the walk goes from the densest target up to the sparsest
    assert [c["sparsity_target"] for c in rep["candidates"]] == [0.3, 0.4, 0.5, 0.6]
    assert rep["chosen"]["sparsity_target"] == 0.6
    assert all(c["eval"]["ffn_rows_share"] < 1.0 for c in rep["candidates"])
    assert leftovers(tmp_path) == []


def needs_sparse_path(path: Path) -> dict:
    """Validation-style perplexity of a converted file with sparse=2, or skip while the
    native runtime still computes every FFN row for it."""
    chunks = [np.arange(3, 200, dtype=np.int32) % 280 + 3]
    res = prof.perplexity(path, chunks, sparse=2)
    if res["ffn_rows_share"] >= 1.0:
        pytest.skip("native sparse path (sparse=2) not available yet: it computed every FFN row")
    return res


def test_sparse_runtime_skips_rows_as_predicted(converted):
    _, out, _, rep = converted
    res = needs_sparse_path(out)
    predicted = np.mean([row["sparsity"] for row in rep["layers"]])
    assert np.isfinite(res["ppl"])
    assert 1.0 - res["ffn_rows_share"] == pytest.approx(predicted, abs=0.15)
    # a large shift makes it sparser
    sparser = prof.perplexity(out, [np.arange(3, 200, dtype=np.int32) % 280 + 3], sparse=2, shift=5.0)
    assert sparser["ffn_rows_share"] < res["ffn_rows_share"]


# --- safety -----------------------------------------------------------------------------

def _half_then(exc):
    def broken(path, reader, *a, **k):
        Path(path).write_bytes(b"GGUF" + b"\0" * 1000)  # a partial file in the temp path
        raise exc
    return broken


def test_exception_while_writing_leaves_nothing(tmp_path, model, monkeypatch):
    before = fingerprint(model)
    out = tmp_path / "o.gguf"
    monkeypatch.setattr(write, "write_gguf", _half_then(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"):
        run(model, "-o", out, *FIXED)
    assert not out.exists() and leftovers(tmp_path) == []
    assert fingerprint(model) == before


def test_ctrl_c_while_writing_leaves_nothing(tmp_path, model, monkeypatch, caplog):
    out = tmp_path / "o.gguf"
    monkeypatch.setattr(write, "write_gguf", _half_then(KeyboardInterrupt()))
    assert run(model, "-o", out, *FIXED) == 130
    assert not out.exists() and leftovers(tmp_path) == []


def test_full_disk_is_a_clear_error(tmp_path, model, monkeypatch, caplog):
    import errno

    out = tmp_path / "o.gguf"
    monkeypatch.setattr(write, "write_gguf", _half_then(OSError(errno.ENOSPC, "No space left on device")))
    assert run(model, "-o", out, *FIXED) == 2
    assert "no space left" in caplog.text.lower()
    assert not out.exists() and leftovers(tmp_path) == []


def test_unwritable_folder_is_a_clear_error_before_profiling(tmp_path, model, monkeypatch, caplog):
    import errno

    def denied(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(prof, "run_profile", lambda *a, **k: pytest.fail("profiled before checking the output"))
    monkeypatch.setattr(write.tempfile, "mkstemp", denied)  # as root, chmod alone would not stop us
    assert run(model, "-o", tmp_path / "o.gguf", *FIXED) == 2
    assert "cannot write to folder" in caplog.text
    caplog.clear()
    assert run(model, "-o", tmp_path / "missing" / "o.gguf", *FIXED) == 2
    assert "does not exist" in caplog.text


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root ignores folder permissions")
def test_read_only_folder(tmp_path, model, caplog):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        assert run(model, "-o", ro / "o.gguf", *FIXED) == 2
        assert "cannot write to folder" in caplog.text
    finally:
        ro.chmod(0o700)


_SLOW_WRITER = """
import sys, time
sys.path.append({root!r})
from convert import add_profile, write
real = write.write_gguf
def slow(path, *a, **k):
    real(path, *a, **k)
    print("WRITTEN", flush=True)
    time.sleep(60)
write.write_gguf = slow
sys.exit(add_profile.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_while_writing_leaves_no_output(tmp_path, model, sig):
    before = fingerprint(model)
    out = tmp_path / "o.gguf"
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_WRITER.format(root=str(ROOT)), str(model), "-o", str(out),
                             *FIXED], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)  # not the repo root: its source pypowerinfer has no native library
    try:
        line = proc.stdout.readline()
        assert line.strip() == "WRITTEN", proc.stderr.read()
        assert leftovers(tmp_path)  # the complete file sits in its temp name
        proc.send_signal(sig)
        rc = proc.wait(timeout=30)
    finally:
        proc.kill()
    assert not out.exists()
    assert fingerprint(model) == before
    if sig == signal.SIGTERM:
        assert rc == 128 + signal.SIGTERM and leftovers(tmp_path) == []
    else:
        assert all(name.startswith("o.gguf.pid") for name in leftovers(tmp_path))
        # the next run removes what the killed one left
        assert run(model, "-o", out, *FIXED) == 0
        assert out.exists() and leftovers(tmp_path) == []


# --- bad input --------------------------------------------------------------------------

def test_already_profiled_input_needs_force(converted, tmp_path, caplog):
    src, out, _, _ = converted
    again = tmp_path / "again.gguf"
    assert run(out, "-o", again, *FIXED) == 2
    assert "already profiled" in caplog.text and "--force" in caplog.text
    assert not again.exists()
    assert run(out, "-o", again, "--force", *FIXED) == 0
    a, b = GGUFReader(src), GGUFReader(again)
    names = [t.name for t in b.tensors]
    assert len(names) == len(set(names)) == len(a.tensors) + 2 * len(ADDED)
    tb = {t.name: t for t in b.tensors}
    for t in a.tensors:
        assert np.asarray(tb[t.name].data).tobytes() == np.asarray(t.data).tobytes()


def test_non_gguf_input_is_a_clear_error(tmp_path, caplog):
    text = tmp_path / "notes.gguf"
    text.write_text("hello, not a model\n" * 10)
    assert run(text, *FIXED) == 2
    assert "not a GGUF file" in caplog.text
    pwri = tmp_path / "p.gguf"
    pwri.write_bytes(b"PWRI" + b"\0" * 64)
    assert run(pwri, *FIXED) == 2
    assert "PowerInfer" in caplog.text
    assert run(tmp_path / "absent.gguf", *FIXED) == 2
    assert "no such file" in caplog.text
    assert leftovers(tmp_path) == []


def test_unsupported_model_is_a_clear_error(tmp_path, caplog):
    src = write_llama_gguf(tmp_path / "mamba.gguf", arch="mamba")
    assert run(src, *FIXED) == 2
    assert "unsupported model" in caplog.text and "mamba" in caplog.text
    assert not (tmp_path / "mamba.powerinfer.gguf").exists() and leftovers(tmp_path) == []


def test_corpus_file(tmp_path, model, caplog):
    text = tmp_path / "notes.txt"
    text.write_text("\n\n".join(corpus.heldout_text().split("\n\n")[:60]))
    out = tmp_path / "c.gguf"
    assert run(model, "-o", out, "--corpus", text, *FIXED) == 0
    assert GGUFReader(out).fields["powerinfer.calibration_corpus"].contents() == "notes.txt"
    short = tmp_path / "short.txt"
    short.write_text("a few words\n")
    assert run(model, "-o", tmp_path / "s.gguf", "--corpus", short, *FIXED) == 2
    assert "calibration text gives" in caplog.text and not (tmp_path / "s.gguf").exists()


def test_output_may_not_be_the_input(model, caplog):
    assert run(model, "-o", model, *FIXED) == 2
    assert "input" in caplog.text


# --- the corpus -------------------------------------------------------------------------

def test_calibration_and_held_out_split():
    cal, held = corpus.calibration_keys(), corpus.heldout_keys()
    assert cal and held and not set(cal) & set(held)
    assert cal + held == sorted(cal + held)
    assert len(cal) == int(len(cal + held) * corpus.CALIBRATION_SHARE)
    text = corpus.calibration_text()
    for _, entry in corpus.heldout_entries():
        assert entry not in text


def test_token_stream_spans_many_entries():
    entries = [(f"k{i}", "x" * 5000) for i in range(10)]
    encode = lambda b: list(range(len(b)))  # noqa: E731  one token per byte, ids = offsets
    ids = corpus.token_stream(encode, entries, 2048, piece_tokens=100)
    assert len(ids) == 2048
    # round-robin: the first pieces of all 10 entries come before any second piece
    assert list(ids[:100]) == list(range(100)) and list(ids[100:200]) == list(range(100))
    chunks = corpus.chunk(ids, 256, bos=7)
    assert all(len(c) == 256 and c[0] == 7 for c in chunks)


# --- the real model -----------------------------------------------------------------------

@pytest.mark.slow
def test_smollm2_conversion(smollm2_path, tmp_path):
    out = tmp_path / "smol.powerinfer.gguf"
    assert run(smollm2_path, "-o", out, "--tokens", "2048", "--epochs", "2", "--sparsity-target", "0.5", "-q",
               "--no-plot") == 0
    rep = json.loads((tmp_path / "smol.profile.json").read_text())
    assert len(rep["layers"]) == 30 and all(row["rank"] == 64 for row in rep["layers"])
    assert all(row["recall"] >= 0.95 - 1e-6 for row in rep["layers"])
    assert np.mean([row["sparsity"] for row in rep["layers"]]) > 0.0
    r = GGUFReader(out)
    assert r.fields["powerinfer.activation"].contents() == "silu_glu"
    assert {t.name for t in r.tensors} >= {f"blk.29.{n}" for n in ADDED}
    down = {t.name: t for t in r.tensors}["blk.0.ffn_down_t.weight"]
    assert down.tensor_type in DOWN_T_CHOICES
    assert isinstance(r.fields["powerinfer.sparse_default"].contents(), bool)


def test_the_plot_draws_a_chosen_setting_without_a_batched_measurement():
    """The decision can fall back to a denser setting that the batched search never measured
    (its eval is empty): the PNG is drawn without its star rather than failing the conversion."""
    pytest.importorskip("matplotlib")
    from convert import report

    layer = {"layer": 0, "recall": 0.95, "count_recall": 0.9, "precision": 0.7, "sparsity": 0.1, "label_sparsity": 0.2}
    rep = {"neuron_freq": [[0.9, 0.5, 0.1]], "layers": [layer], "dense_validation_ppl": 20.0,
           "candidates": [{"predicted_sparsity": 0.15, "eval": {"ppl": 21.0}}],
           "chosen": {"predicted_sparsity": 0.07, "eval": {}}, "ppl_measured_sparse": True}
    png = report.plot_png(rep)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
