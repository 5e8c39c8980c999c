"""Byte accounting of the sparse FFN (Llama.sparse_stats): what a generated token reads, against
what a dense token reads, counted from the file's own tensor sizes; and the refusal of a file
whose predictors are missing on some layers."""
from __future__ import annotations

import pytest
from gguf import GGUFReader

from synthetic import rewrite_gguf, write_profiled_relu_gguf

from pypowerinfer import Llama

N_LAYER = 3


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    return write_profiled_relu_gguf(tmp_path_factory.mktemp("stats"), "Q8_0", n_layer=N_LAYER, n_ff=640)


def tensor_bytes(path) -> dict[str, int]:
    return {t.name: int(t.n_bytes) for t in GGUFReader(path).tensors}


def generated(path, n=5, **kw):
    with Llama(path, n_ctx=64, n_threads=2, verbose=False, **kw) as llm:
        llm.eval([5, 6, 7, 8, 9, 10])  # a prompt: not counted
        assert llm.sparse_stats()["tokens"] == 0
        for t in range(11, 11 + n):
            llm.eval([t])
        stats = llm.sparse_stats()
        llm.reset()
        assert llm.sparse_stats()["tokens"] == 0
        return stats


def test_a_dense_token_reads_every_weight_once(profiled):
    b = tensor_bytes(profiled)
    embd = next(t for t in GGUFReader(profiled).tensors if t.name == "token_embd.weight")
    per_layer = sum(b[f"blk.{il}.{name}.weight"] for il in range(N_LAYER)
                    for name in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"))
    output = b.get("output.weight", b["token_embd.weight"])
    expected = int(embd.n_bytes) // int(embd.shape[1]) + per_layer + output
    stats = generated(profiled, sparse=False)
    assert stats["tokens"] == 5
    assert stats["bytes_per_token_dense"] == expected
    assert stats["bytes_per_token"] == expected and stats["ceiling"] == 1.0
    assert stats["ffn_rows_done"] == stats["ffn_rows_dense"] == N_LAYER * 640


def test_a_sparse_token_reads_the_predictors_and_the_rows_it_computes(profiled):
    b = tensor_bytes(profiled)
    dense = generated(profiled, sparse=False)
    stats = generated(profiled, sparse=True)
    assert 0 < stats["ffn_rows_done"] < stats["ffn_rows_dense"]
    ffn = sum(b[f"blk.{il}.{name}.weight"] for il in range(N_LAYER) for name in ("ffn_gate", "ffn_up", "ffn_down"))
    predictors = sum(b[f"blk.{il}.{name}.weight"] for il in range(N_LAYER) for name in ("fc1", "fc2"))
    fixed = dense["bytes_per_token_dense"] - ffn + predictors
    # every layer's rows have the same size here: gate and up rows of n_embd, a down_t row of n_embd
    gate_up_row = 2 * b["blk.0.ffn_gate.weight"] // 640
    down_row = b["blk.0.ffn_down_t.weight"] // 640
    rows = stats["ffn_rows_done"]
    # a computed neuron reads its first factor's row (gate or up), the other's only where the
    # first is positive, and its down row only where its activation is not 0
    assert fixed + rows * gate_up_row // 2 <= stats["bytes_per_token"] <= fixed + rows * (gate_up_row + down_row)
    assert stats["bytes_per_token_dense"] == dense["bytes_per_token_dense"]
    assert stats["ceiling"] == pytest.approx(stats["bytes_per_token_dense"] / stats["bytes_per_token"])


def test_a_neuron_whose_gate_does_not_fire_reads_no_up_row(profiled):
    """relu(gate) * up: with every neuron predicted (a threshold far below every logit), gate is
    read for all of them, up and down only for those whose gate fires (about half here)."""
    b = tensor_bytes(profiled)
    dense = generated(profiled, sparse=False)
    stats = generated(profiled, sparse=True, sparse_threshold_shift=-1e6)
    assert stats["ffn_rows_done"] == stats["ffn_rows_dense"]
    ffn = sum(b[f"blk.{il}.{name}.weight"] for il in range(N_LAYER) for name in ("ffn_gate", "ffn_up", "ffn_down"))
    predictors = sum(b[f"blk.{il}.{name}.weight"] for il in range(N_LAYER) for name in ("fc1", "fc2"))
    fixed = dense["bytes_per_token_dense"] - ffn + predictors
    gate_row = b["blk.0.ffn_gate.weight"] // 640
    rest = stats["bytes_per_token"] - fixed - stats["ffn_rows_done"] * gate_row  # up and down rows read
    up_down_row = b["blk.0.ffn_up.weight"] // 640 + b["blk.0.ffn_down_t.weight"] // 640
    assert 0.2 * stats["ffn_rows_done"] * up_down_row < rest < 0.8 * stats["ffn_rows_done"] * up_down_row


def test_predictors_missing_on_a_layer_are_refused(profiled, tmp_path):
    broken = rewrite_gguf(profiled, tmp_path / "broken.gguf",
                          drop=frozenset({"blk.1.fc1.weight", "blk.1.fc2.weight"}))
    with pytest.raises(ValueError, match="blk.1.fc1.weight"):
        Llama(broken, n_ctx=32, verbose=False)


def test_a_predictor_without_its_transposed_down_is_refused(profiled, tmp_path):
    broken = rewrite_gguf(profiled, tmp_path / "broken.gguf", drop=frozenset({"blk.2.ffn_down_t.weight"}))
    with pytest.raises(ValueError, match="blk.2.ffn_down_t.weight"):
        Llama(broken, n_ctx=32, verbose=False)
