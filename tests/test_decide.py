"""The converter's honest default (convert/decide.py): the decision keys it writes, `Llama`
following them (and overriding them), --reuse-profile, and the choice of ffn_down_t's type.

Speed is never measured here: --assume-speedup stands in for the timing, so the decisions do
not depend on this machine."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType

from synthetic import rewrite_gguf, write_llama_gguf, write_profiled_relu_gguf

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

from convert import add_profile, decide  # noqa: E402
from convert import profile as prof  # noqa: E402
from pypowerinfer import Llama  # noqa: E402

FAST = ["--tokens", "1024", "-q", "--no-plot", "--threads", "2"]
DEFAULT_KEY, DECISION_KEY = "powerinfer.sparse_default", "powerinfer.sparse_decision"


def convert(src: Path, out: Path, *extra) -> dict:
    assert add_profile.main([str(src), "-o", str(out), *FAST, *map(str, extra)]) == 0
    return json.loads(out.with_name(out.name.replace(".powerinfer.gguf", ".profile.json")).read_text())


def keys(path: Path) -> tuple:
    f = GGUFReader(path).fields
    assert f[DEFAULT_KEY].types == [GGUFValueType.BOOL] and f[DECISION_KEY].types == [GGUFValueType.STRING]
    return f[DEFAULT_KEY].contents(), f[DECISION_KEY].contents()


@pytest.fixture(scope="module")
def relu_wins(tmp_path_factory):
    """A ReLU (dReLU) synthetic model, sparse assumed 2x dense: the file defaults to sparse."""
    folder = tmp_path_factory.mktemp("relu")
    src = write_llama_gguf(folder / "bamboo.gguf", arch="bamboo", n_ff=256)
    out = folder / "bamboo.powerinfer.gguf"
    rep = convert(src, out, "--recall", "0.98", "--max-ppl-increase", "25", "--assume-speedup", "2.0")
    return src, out, rep


@pytest.fixture(scope="module")
def swiglu_loses(tmp_path_factory):
    """A SwiGLU synthetic model, sparse assumed slower than dense: the file defaults to dense."""
    folder = tmp_path_factory.mktemp("swiglu")
    src = write_llama_gguf(folder / "m.gguf", n_ff=96)
    out = folder / "m.powerinfer.gguf"
    rep = convert(src, out, "--sparsity-target", "0.5", "--assume-speedup", "0.8", "--save-profile")
    return src, out, rep


def test_sparse_wins_on_the_relu_model(relu_wins):
    _, out, rep = relu_wins
    on, reason = keys(out)
    d = rep["decision"]
    assert on is True and d["sparse_default"] is True
    assert reason == d["reason"] and reason.startswith("sparse: 2.00x dense decode (assumed)")
    assert d["tokens"] >= 1024  # token by token over the held-out text
    assert d["rows_share"] < 1.0 and d["ppl_increase_pct"] <= 25
    assert d["dense_ppl"] > 0 and d["sparse_ppl"] > 0


def test_dense_wins_on_the_swiglu_model(swiglu_loses):
    _, out, rep = swiglu_loses
    on, reason = keys(out)
    assert on is False and rep["decision"]["sparse_default"] is False
    assert "dense chosen" in reason and "0.80x dense decode (assumed)" in reason and "under 1.1x" in reason


def test_a_winner_over_budget_held_out_falls_back_to_denser_settings(tmp_path, monkeypatch):
    """The search's winner (recall 0.90 here: every candidate passes a 25% validation budget)
    costs too much held out, in this stand-in for decide.measure, below recall 0.97: the
    converter measures the next denser settings and writes the first that passes, sparse."""
    real = decide.measure
    seen = []

    def measure(path, chunks, *, n_threads, tick=None, dense=None):
        recall = float(GGUFReader(path).fields["powerinfer.target_recall"].contents())
        seen.append((round(recall, 2), dense is not None))
        m = dense or real(path, chunks, n_threads=n_threads, tick=tick)
        return decide.Measured(dense_ppl=m.dense_ppl, sparse_ppl=m.dense_ppl * (1.01 if recall >= 0.97 else 1.3),
                               rows_share=0.5, dense_tok_s=100.0, sparse_tok_s=200.0)

    monkeypatch.setattr(decide, "measure", measure)
    src = write_llama_gguf(tmp_path / "bamboo.gguf", arch="bamboo", n_ff=256)
    out = tmp_path / "bamboo.powerinfer.gguf"
    rep = convert(src, out, "--max-ppl-increase", "25")
    assert seen == [(0.9, False), (0.95, True), (0.97, True)]  # dense measured once
    on, reason = keys(out)
    assert on is True and reason.startswith("sparse: 2.00x dense decode at +1.0% held-out ppl")
    assert float(GGUFReader(out).fields["powerinfer.target_recall"].contents()) == pytest.approx(0.97)
    assert rep["decision"]["sparse_default"] is True


def test_decide_rule():
    m = decide.Measured(dense_ppl=10.0, sparse_ppl=10.2, rows_share=0.3, dense_tok_s=100.0, sparse_tok_s=190.0)
    assert decide.decide(m, max_ppl_increase=3.0) == (True, "sparse: 1.90x dense decode at +2.0% held-out ppl, "
                                                            "30% of FFN rows computed")
    on, why = decide.decide(m, max_ppl_increase=1.0)
    assert not on and "ppl over +1%" in why and why.startswith("sparse would compute 30% of rows at +2.0%")
    slow = decide.Measured(dense_ppl=10.0, sparse_ppl=10.8, rows_share=0.92, dense_tok_s=100.0, sparse_tok_s=74.0)
    on, why = decide.decide(slow, max_ppl_increase=3.0)
    assert not on and why == ("sparse would compute 92% of rows at +8.0% held-out ppl (0.74x dense decode): dense "
                              "chosen (decode under 1.1x, ppl over +3%)")
    assert decide.decide(m, max_ppl_increase=3.0, min_speedup=2.0)[0] is False


def test_heldout_chunks_are_not_calibration_text():
    from convert import corpus

    encode = lambda b: list(b)  # noqa: E731  one token per byte
    chunks = decide.heldout_chunks(encode, bos=1)
    assert len(chunks) == decide.HELDOUT_CHUNKS and all(len(c) == decide.HELDOUT_PREDICTIONS + 1 for c in chunks)
    assert all(c[0] == 1 for c in chunks)
    text = corpus.calibration_text().encode()
    for c in chunks:
        assert bytes(c[1:65].astype(np.uint8)) not in text


# --- Llama follows the file ---------------------------------------------------------------

def _rows(llm) -> float:
    llm.reset()
    llm._ctx.reset_stats()
    for i, t in enumerate(range(3, 20)):
        llm.eval([t])
    s = llm._ctx.stats()
    return s["ffn_rows_done"] / s["ffn_rows_dense"]


def test_llama_follows_the_file_and_the_override(relu_wins, swiglu_loses):
    with Llama(str(relu_wins[1]), n_ctx=64, verbose=False) as llm:
        assert llm.sparse_mode == "decode" and llm.sparse_reason == keys(relu_wins[1])[1]
        assert _rows(llm) < 1.0
    with Llama(str(swiglu_loses[1]), n_ctx=64, verbose=False) as llm:
        assert llm.sparse_mode == "dense" and "dense chosen" in llm.sparse_reason
        assert _rows(llm) == 1.0
    with Llama(str(swiglu_loses[1]), n_ctx=64, verbose=False, sparse=True) as llm:
        assert llm.sparse_mode == "decode" and llm.sparse_reason == "sparse=True given"
        assert _rows(llm) < 1.0
    with Llama(str(relu_wins[1]), n_ctx=64, verbose=False, sparse=False) as llm:
        assert llm.sparse_mode == "dense" and llm.sparse_reason == "sparse=False given"
        assert _rows(llm) == 1.0
    with Llama(str(relu_wins[1]), n_ctx=64, verbose=False, sparse="all") as llm:
        assert llm.sparse_mode == "all"


def test_files_without_the_keys(tmp_path, relu_wins):
    older = write_profiled_relu_gguf(tmp_path, "F32", n_layer=2, n_ff=128)  # predictors, no decision keys
    with Llama(older, n_ctx=64, verbose=False) as llm:
        assert llm.sparse_mode == "decode" and DEFAULT_KEY in llm.sparse_reason
    with Llama(str(relu_wins[0]), n_ctx=64, verbose=False) as llm:  # the plain model
        assert llm.sparse_mode == "dense" and llm.sparse_reason == "the model has no predictors"
    with Llama(str(relu_wins[0]), n_ctx=64, verbose=False, sparse=True) as llm:
        assert llm.sparse_mode == "dense" and llm.sparse_reason == "the model has no predictors"


@pytest.mark.parametrize("key, value", [(DEFAULT_KEY, ("yes", GGUFValueType.STRING, None)),
                                        (DEFAULT_KEY, (1, GGUFValueType.UINT8, None)),
                                        (DECISION_KEY, (3, GGUFValueType.INT32, None))])
def test_a_decision_key_of_the_wrong_type_is_refused(tmp_path, key, value):
    base = write_profiled_relu_gguf(tmp_path, "F32", n_layer=2, n_ff=128)
    other = {DEFAULT_KEY: (True, GGUFValueType.BOOL, None), DECISION_KEY: ("x", GGUFValueType.STRING, None)}
    bad = rewrite_gguf(base, tmp_path / "bad.gguf", add_kv={**other, key: value})
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        Llama(bad, n_ctx=64, verbose=False)


def test_main_job_says_which_mode_ran_and_why(swiglu_loses):
    import subprocess

    cmd = [sys.executable, "-m", "pypowerinfer", "-m", str(swiglu_loses[1]), "-n", "4", "-t", "2", "-c", "64",
           "-p", "abc"]

    def run(*extra):  # from the model's folder, not the source tree: the installed package runs
        return subprocess.run([*cmd, *extra], capture_output=True, cwd=swiglu_loses[1].parent, timeout=60)

    res = run()
    assert res.returncode == 0, res.stderr
    assert b"FFN mode:    dense: sparse would compute" in res.stderr
    res = run("--sparse")
    assert res.returncode == 0 and b"FFN mode:    decode: sparse=True given" in res.stderr


# --- --reuse-profile ----------------------------------------------------------------------

def test_reuse_profile_decides_the_same_without_profiling(tmp_path, swiglu_loses, monkeypatch):
    src, out, rep = swiglu_loses
    again = tmp_path / "m.powerinfer.gguf"
    shutil.copy(out.with_name("m.profile.npz"), tmp_path / "m.profile.npz")  # beside the output, same stem
    monkeypatch.setattr(prof, "run_profile", lambda *a, **k: pytest.fail("profiled again"))
    rep2 = convert(src, again, "--sparsity-target", "0.5", "--assume-speedup", "0.8", "--reuse-profile")
    assert rep2["decision"] == rep["decision"]
    a, b = GGUFReader(out), GGUFReader(again)
    for x, y in zip(a.tensors, b.tensors):
        assert x.name == y.name and np.asarray(x.data).tobytes() == np.asarray(y.data).tobytes(), x.name


def test_reuse_profile_refuses_another_models_profile(tmp_path, swiglu_loses, caplog):
    src, out, _ = swiglu_loses
    other = write_llama_gguf(tmp_path / "m.gguf", n_ff=96, seed=5)
    shutil.copy(out.with_name("m.profile.npz"), tmp_path / "m.profile.npz")
    assert add_profile.main([str(other), *FAST, "--sparsity-target", "0.5", "--reuse-profile"]) == 2
    assert "another model" in caplog.text and not (tmp_path / "m.powerinfer.gguf").exists()
    caplog.clear()
    assert add_profile.main([str(other), "-o", str(tmp_path / "x.gguf"), *FAST, "--reuse-profile"]) == 2
    assert "no saved profile" in caplog.text


# --- the type of ffn_down_t ---------------------------------------------------------------

def test_down_t_takes_the_smallest_type_that_fits(tmp_path, monkeypatch):
    """Validation costs by ffn_down_t type are injected: Q4_0 +4%, Q5_0 +1%, on top of the
    winner's +1.5% (the search type, Q8_0, costing nothing): with a 3% budget Q5_0 fits, Q4_0 not."""
    src = write_llama_gguf(tmp_path / "m.gguf", n_ff=96)
    cost = {"Q8_0": 0.0, "Q5_0": 1.0, "Q4_0": 4.0}

    def fake(self, cand, stage="candidate"):
        kinds = {t.qtype.name for t in cand.tensors if t.name.endswith("ffn_down_t.weight")}
        assert len(kinds) == 1
        ppl = 100.0 * 1.015 * (1 + cost[kinds.pop()] / 100)
        return {"ppl": ppl, "ffn_rows_share": 0.5, "nll": 0.0, "tokens": 1, "seconds": 0.0, "sparse": 2, "shift": 0}

    orig = add_profile.Chooser.__init__

    def init(self, *a, **k):
        orig(self, *a, **k)
        self.dense_ppl = 100.0

    monkeypatch.setattr(add_profile.Chooser, "_native_eval", fake)
    monkeypatch.setattr(add_profile.Chooser, "__init__", init)
    rep = convert(src, tmp_path / "m.powerinfer.gguf", "--sparsity-target", "0.5", "--assume-speedup", "1.0")
    costs = rep["ffn_down_t"]["costs"]
    assert list(costs) == ["Q8_0", "Q5_0", "Q4_0"]  # the search type, then smaller while they fit
    assert costs["Q4_0"]["cost_pct"] == pytest.approx(4.0) and not costs["Q4_0"]["fits"]
    assert costs["Q5_0"]["chosen"] and not costs["Q8_0"]["chosen"]
    assert rep["ffn_down_t"]["types"] == ["Q5_0"]
    t = {x.name: x for x in GGUFReader(tmp_path / "m.powerinfer.gguf").tensors}
    assert t["blk.0.ffn_down_t.weight"].tensor_type == GGMLQuantizationType.Q5_0


def test_down_t_type_forced_and_lossless_input(tmp_path):
    """--down-t-type forces a type (no trials); an F32 model tries every smaller type natively,
    and with a huge budget keeps the smallest, Q4_0."""
    src = write_llama_gguf(tmp_path / "f.gguf", n_ff=96, weight_type="F32")
    rep = convert(src, tmp_path / "f.powerinfer.gguf", "--sparsity-target", "0.5", "--max-ppl-increase", "1000",
                  "--assume-speedup", "1.0")
    assert list(rep["ffn_down_t"]["costs"]) == ["F32", "Q8_0", "Q5_0", "Q4_0"]
    assert rep["ffn_down_t"]["types"] == ["Q4_0"] and rep["ffn_down_t"]["costs"]["Q4_0"]["chosen"]
    rep = convert(src, tmp_path / "g.powerinfer.gguf", "--sparsity-target", "0.5", "--down-t-type", "q5_0",
                  "--assume-speedup", "1.0")
    assert rep["ffn_down_t"]["types"] == ["Q5_0"] and list(rep["ffn_down_t"]["costs"]) == ["Q5_0"]


def test_one_progress_bar_for_the_whole_job(tmp_path, monkeypatch):
    import tqdm

    shown = []
    real = tqdm.tqdm

    class Counting(real):
        def __init__(self, *a, **k):
            if not k.get("disable"):
                shown.append(k.get("desc"))
            super().__init__(*a, **k)

    monkeypatch.setattr(tqdm, "tqdm", Counting)
    src = write_llama_gguf(tmp_path / "m.gguf", n_ff=96)
    args = [str(src), "--tokens", "1024", "--no-plot", "--threads", "2", "--sparsity-target", "0.5",
            "--assume-speedup", "1.0"]
    assert add_profile.main(args) == 0
    assert shown == ["convert"]
