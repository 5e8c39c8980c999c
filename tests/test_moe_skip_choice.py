"""ReGLU experts (smallthinker) skipping a one-token expert's dead neurons' rows, or computing
every row: the same logits either way, the expert split following the same choice, the
converter measuring which decodes faster and writing it (powerinfer.moe_skip_rows and its
reason), the loader following it unless the caller overrides it, and the user told which ran
and why."""
from __future__ import annotations

import json
import sys
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType

from synthetic import rewrite_gguf, write_llama_gguf
from test_expert_split import ST_CASES, ST_DIMS, budgets, decode, host_equals_cpu, st_tokens
from test_smallthinker import CASES, DIMS

from pypowerinfer import Llama
from pypowerinfer import __main__ as cli
from pypowerinfer.model import SKIP_DECISION_KEY, SKIP_KEY, NativeContext, NativeModel, moe_skip_policy

sys.path.append(str(Path(__file__).resolve().parents[1]))
from convert import add_profile, decide  # noqa: E402

PROMPT = 8
STEPS = 24


def write(path, case: dict, **over) -> Path:
    return Path(write_llama_gguf(path, **{**DIMS, "arch": "smallthinker", **case, **over}))


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    """An unconverted smallthinker file (Q8_0, softmax, top-3, windowed)."""
    return write(tmp_path_factory.mktemp("skip") / "st.gguf", CASES["q8_0-softmax-top3-swa"])


def with_keys(src: Path, dst: Path, **kv) -> Path:
    return Path(rewrite_gguf(src, dst, add_kv={k: (v, t, None) for k, (v, t) in kv.items()}))


def run(path, skip: bool | None, seq: np.ndarray) -> tuple[np.ndarray, dict, bool]:
    """Logits of a prompt (one batch) then of one token at a time, the stats of those steps, and
    whether the model skipped."""
    with closing(NativeModel(path, moe_skip_rows=skip)) as m:
        ctx = NativeContext(m, n_ctx=64, n_batch=64, n_threads=2, n_threads_batch=2, logits_all=True)
        try:
            ctx.decode(seq[:PROMPT], 0)
            ctx.reset_stats()
            for i in range(PROMPT, len(seq)):
                ctx.decode(seq[i:i + 1], i)
            return ctx.logits[:len(seq)].copy(), ctx.stats(), m.info.moe_skip_rows
        finally:
            ctx.close()


@pytest.mark.parametrize("weight_type", ["case", "F32"])
@pytest.mark.parametrize("name", CASES)
def test_skipping_gives_the_dense_experts_logits_bit_for_bit(tmp_path, name, weight_type):
    """A dead neuron's relu(gate) is 0: its product is 0 and adds nothing to down's sums, which
    run in the same order over the same blocks (the skipped ones all zero), so skipping its up
    row and down block changes no bit; it only computes fewer rows (about half, random weights)."""
    case = CASES[name] if weight_type == "case" else {**CASES[name], "weight_type": weight_type}
    path = write(tmp_path / "m.gguf", case)
    seq = np.random.default_rng(3).integers(1, DIMS["n_vocab"], PROMPT + STEPS).astype(np.int32)
    skip, skip_stats, skipped = run(path, True, seq)
    dense, dense_stats, dense_skipped = run(path, False, seq)
    assert skipped and not dense_skipped
    np.testing.assert_array_equal(skip, dense)
    n_layer = case.get("n_layer", DIMS["n_layer"])
    assert dense_stats["ffn_rows_done"] == dense_stats["ffn_rows_dense"] == \
        STEPS * n_layer * case["n_expert_used"] * case["n_ff_exp"]
    assert skip_stats["ffn_rows_dense"] == dense_stats["ffn_rows_dense"]
    assert 0.3 < skip_stats["ffn_rows_done"] / dense_stats["ffn_rows_done"] < 0.7, (skip_stats, dense_stats)


@pytest.mark.parametrize("share", ["none", "some", "all"])
@pytest.mark.parametrize("name", ST_CASES)
def test_the_split_computes_dense_experts_when_not_skipping(tmp_path, name, share):
    """With skipping off the split's runs compute every row too: host device == the CPU alone,
    bit for bit, every expert row counted, and the logits those of skipping."""
    path = write_llama_gguf(tmp_path / "m.gguf", **ST_DIMS, **ST_CASES[name])
    with closing(NativeModel(path, moe_skip_rows=False)) as dense, closing(NativeModel(path)) as skip:
        _, stats, _ = host_equals_cpu(dense, share, st_tokens())
        case = ST_CASES[name]
        assert stats["ffn_rows_done"] == (len(st_tokens()) - PROMPT) * ST_DIMS["n_layer"] * \
            case["n_expert_used"] * case["n_ff_exp"]
        budget = budgets(dense)[share]
        np.testing.assert_array_equal(decode(dense, device=1, budget=budget, seq=st_tokens())[0],
                                      decode(skip, device=1, budget=budget, seq=st_tokens())[0])


def test_an_unconverted_file_skips(plain):
    with closing(NativeModel(plain)) as m:
        assert m.info.moe_skip_rows
        mode, reason = moe_skip_policy(None, m.metadata(), m.info)
    assert mode == "skip" and SKIP_KEY in reason


@pytest.mark.parametrize("value", [False, True])
def test_the_file_key_chooses_and_the_caller_overrides_it(plain, tmp_path, value):
    path = with_keys(plain, tmp_path / "k.gguf", **{SKIP_KEY: (value, GGUFValueType.BOOL),
                                                    SKIP_DECISION_KEY: ("measured here", GGUFValueType.STRING)})
    with closing(NativeModel(path)) as m:
        assert m.info.moe_skip_rows == value
    with closing(NativeModel(path, moe_skip_rows=not value)) as m:
        assert m.info.moe_skip_rows == (not value)
    with Llama(str(path), n_ctx=32, verbose=False) as llm:
        assert (llm.expert_mode, llm.expert_reason) == ("skip" if value else "dense", "measured here")
    with Llama(str(path), n_ctx=32, verbose=False, moe_skip_rows=not value) as llm:
        assert llm.expert_mode == ("dense" if value else "skip") and "given" in llm.expert_reason


def test_a_model_without_relu_experts_ignores_the_key(tmp_path):
    """A dense model, and SwiGLU experts, have nothing to skip: the key changes nothing."""
    for name, over in {"dense": {}, "qwen3moe": dict(arch="qwen3moe", n_expert=4, n_expert_used=2, n_ff_exp=64,
                                                      head_dim=32)}.items():
        src = write_llama_gguf(tmp_path / f"{name}.gguf", **over)
        path = with_keys(Path(src), tmp_path / f"{name}-k.gguf", **{SKIP_KEY: (True, GGUFValueType.BOOL)})
        with closing(NativeModel(path, moe_skip_rows=True)) as m:
            assert not m.info.moe_skip_rows
        with Llama(str(path), n_ctx=32, verbose=False) as llm:
            assert llm.expert_mode is None


def test_bad_values_are_refused_naming_the_key(plain, tmp_path):
    bad = with_keys(plain, tmp_path / "bad.gguf", **{SKIP_KEY: (1, GGUFValueType.UINT32)})
    with pytest.raises(ValueError, match=SKIP_KEY):
        NativeModel(bad)
    with closing(NativeModel(bad, moe_skip_rows=False)) as m:  # the caller's choice: the key is not read
        assert not m.info.moe_skip_rows
    reason = with_keys(plain, tmp_path / "reason.gguf", **{SKIP_DECISION_KEY: (3, GGUFValueType.UINT32)})
    with pytest.raises(ValueError, match=SKIP_DECISION_KEY):
        Llama(str(reason), n_ctx=32, verbose=False)
    with pytest.raises(ValueError, match="moe_skip_rows"):
        NativeModel(plain, moe_skip_rows="yes")


def test_decide_expert_skip_picks_the_faster():
    m = decide.ExpertsMeasured(dense_ppl=10.0, skip_ppl=10.0, rows_share=0.5, dense_tok_s=100.1, skip_tok_s=94.9)
    on, reason = decide.decide_expert_skip(m)
    assert not on and reason == ("skipping dead expert rows (50% of expert rows computed): 94.9 tok/s vs dense "
                                 "experts 100.1 tok/s on this machine: dense chosen")
    on, reason = decide.decide_expert_skip(decide.ExpertsMeasured(10.0, 10.0, 0.2, 50.0, 80.0))
    assert on and reason.endswith("skipping chosen")


@pytest.mark.parametrize("speedup,skip", [(0.5, False), (2.0, True)])
def test_converter_writes_the_choice_and_the_runtime_follows_it(plain, tmp_path, capsysbinary, speedup, skip):
    """add_profile.py on a smallthinker file: the held-out decode measured both ways (the speeds
    assumed here, so the test does not time a busy machine), the same perplexity (the same
    logits), the choice and its reason in the file, which the loader, Llama and the CLI follow.
    Output captured as bytes: the CLI writes a random model's tokens, not always UTF-8."""
    out = tmp_path / "st.powerinfer.gguf"
    argv = [str(plain), "-o", str(out), "--tokens", "512", "-q", "--no-plot", "--threads", "2",
            "--assume-speedup", str(speedup)]
    assert add_profile.main(argv) == 0
    assert b"experts:" in capsysbinary.readouterr().out
    fields = GGUFReader(out).fields
    assert fields[SKIP_KEY].types == [GGUFValueType.BOOL] and fields[SKIP_KEY].contents() is skip
    reason = fields[SKIP_DECISION_KEY].contents()
    assert reason.endswith(("skipping" if skip else "dense") + " chosen") and "(assumed)" in reason
    rep = json.loads(out.with_name("st.profile.json").read_text())["expert_skip"]
    assert rep["skip_ppl"] == rep["dense_ppl"] and 0.3 < rep["rows_share"] < 0.7, rep
    with closing(NativeModel(out)) as m:
        assert m.info.moe_skip_rows == skip
    with Llama(str(out), n_ctx=32, verbose=False) as llm:
        assert llm.expert_mode == ("skip" if skip else "dense") and llm.expert_reason == reason
    assert cli.main(["-m", str(out), "-p", "Hi", "-n", "2", "-t", "2", "-c", "64"]) == 0
    err = capsysbinary.readouterr().err.decode(errors="replace")
    assert f"experts:     {'skip' if skip else 'dense'}: {reason}" in err
