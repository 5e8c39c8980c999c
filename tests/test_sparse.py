"""The sparse FFN against the dense one, on synthetic models whose predictor is an oracle.

For relu(gate)*up the true active set is {i : gate_i(x) > 0}. A predictor with fc1 = [I; -I]
and fc2 = [W_gate, -W_gate] outputs relu(x)·W_gate - relu(-x)·W_gate = W_gate x exactly, so a
threshold of 0 selects exactly the neurons that fire: the sparse FFN must equal the dense one.
"""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType

from reference import ReferenceModel, compare_logits, dequantize_tensor
from synthetic import WEIGHT_TYPES, rewrite_gguf, write_llama_gguf

from pypowerinfer import Llama

TOKENS = [5, 17, 200, 3, 99, 42, 7, 128, 250, 1, 64, 33, 12, 77]


def oracle_model(tmp_path, weight_type: str, drop_down: bool = False, magic: bytes | None = None) -> str:
    """A ReLU-GLU synthetic model with an exact predictor, F32 down matrices and ffn_down_t."""
    n_layer = 2
    k_rows = dict(n_embd=256, n_ff=512) if weight_type.endswith("_K") else {}  # K-quant rows are 256 long
    plain = write_llama_gguf(tmp_path / "plain.gguf", weight_type=weight_type, n_layer=n_layer,
                             tensor_types={f"blk.{i}.ffn_down.weight": "F32" for i in range(n_layer)}, **k_rows)
    reader = GGUFReader(plain)
    tensors = {t.name: t for t in reader.tensors}
    extra = {}
    for il in range(n_layer):
        gate = dequantize_tensor(tensors[f"blk.{il}.ffn_gate.weight"])  # (n_ff, n_embd)
        n_ff, n_embd = gate.shape
        eye = np.eye(n_embd, dtype=np.float32)
        extra[f"blk.{il}.fc1.weight"] = np.concatenate([eye, -eye])              # (2 n_embd, n_embd)
        extra[f"blk.{il}.fc2.weight"] = np.concatenate([gate, -gate], axis=1)    # (n_ff, 2 n_embd)
        extra[f"blk.{il}.ffn_down_t.weight"] = dequantize_tensor(tensors[f"blk.{il}.ffn_down.weight"]).T.copy()
    kv = {"powerinfer.layer_thresholds": ([0.0] * n_layer, GGUFValueType.ARRAY, GGUFValueType.FLOAT32)}
    # PowerInfer's layout: ffn_down_t replaces ffn_down
    drop = frozenset(f"blk.{i}.ffn_down.weight" for i in range(n_layer)) if drop_down else frozenset()
    out = rewrite_gguf(plain, tmp_path / "oracle.gguf", extra, kv, drop)
    if magic:
        with open(out, "r+b") as f:
            f.write(magic)
    return out


def logits(path, ffn_act="relu_glu", **kwargs) -> np.ndarray:
    with Llama(path, n_ctx=64, logits_all=True, verbose=False, ffn_act=ffn_act, **kwargs) as llm:
        llm.eval(TOKENS)
        return np.array(llm.scores[: len(TOKENS)]), llm._ctx.stats()


# The oracle sees float activations; block formats compute gate from 8-bit activations, so a
# neuron whose gate is within quantization noise of 0 can flip. A small margin keeps those in.
# Q8_K's one scale per 256 activations is coarser: on the Q6_K model (gates of std ~0.19) it
# moves gates by up to ~0.1.
MARGIN = {"F32": 0.0, "F16": 0.0, "BF16": 0.0, "Q6_K": 0.2}


# Q6_K: the row-indexed K-quant dots (its random blocks are zero-mean; those of the formats with
# minimums are not, and make every random gate fire)
@pytest.mark.parametrize("weight_type", [*WEIGHT_TYPES, "Q6_K"])
def test_sparse_with_true_active_set_equals_dense(weight_type, tmp_path):
    path = oracle_model(tmp_path, weight_type)
    dense, dense_stats = logits(path, sparse=False)
    sparse, sparse_stats = logits(path, sparse="all", sparse_threshold_shift=-MARGIN.get(weight_type, 0.05))
    # Dense and sparse add the down rows in other orders (a dot per output, an axpy per neuron);
    # their ~1e-7 difference can flip a rounding to f16 (q, the KV cache, the attention
    # probabilities) downstream, a step of 2^-11 relative: seen on F16 with the AVX2 kernels.
    np.testing.assert_allclose(sparse, dense, rtol=1e-4, atol=1e-3)
    assert dense_stats["ffn_rows_done"] == dense_stats["ffn_rows_dense"]
    # random ReLU gates fire about half the time: the sparse path really skipped rows
    assert 0.3 < sparse_stats["ffn_rows_done"] / sparse_stats["ffn_rows_dense"] < 0.7


@pytest.mark.parametrize("weight_type", ["F32", "Q4_0"])
def test_relu_relu_skips_the_second_factor_and_still_equals_dense(weight_type, tmp_path):
    """relu(gate) * relu(up): the oracle picks the neurons whose gate fires; after each layer's
    first token (which computes both factors and counts their positives) the factor positive
    less often is computed first, the other only where it is positive. Same result as dense."""
    path = oracle_model(tmp_path, weight_type)
    dense, _ = logits(path, ffn_act="relu_relu_glu", sparse=False)
    sparse, stats = logits(path, ffn_act="relu_relu_glu", sparse="all", sparse_threshold_shift=-MARGIN.get(weight_type, 0.05))
    np.testing.assert_allclose(sparse, dense, rtol=1e-4, atol=1e-3)
    assert 0.3 < stats["ffn_rows_done"] / stats["ffn_rows_dense"] < 0.7


def test_threshold_shift_trades_rows_for_accuracy(tmp_path):
    path = oracle_model(tmp_path, "F32")
    dense, _ = logits(path, sparse=False)
    everything, all_stats = logits(path, sparse="all", sparse_threshold_shift=-1e30)
    fewer, few_stats = logits(path, sparse="all", sparse_threshold_shift=0.5)
    np.testing.assert_allclose(everything, dense, rtol=1e-4, atol=1e-4)
    assert all_stats["ffn_rows_done"] == all_stats["ffn_rows_dense"]
    assert few_stats["ffn_rows_done"] < all_stats["ffn_rows_done"] // 2
    assert np.abs(fewer - dense).max() > 1e-3  # skipping firing neurons changes the result


def test_sparse_decode_mode_keeps_prompts_dense(tmp_path):
    path = oracle_model(tmp_path, "Q4_0")
    with Llama(path, n_ctx=64, verbose=False, ffn_act="relu_glu", sparse=True) as llm:
        llm.eval(TOKENS)
        prompt = llm._ctx.stats()
        assert prompt["ffn_rows_done"] == prompt["ffn_rows_dense"]
        llm.eval([9])
        step = llm._ctx.stats()
        assert step["ffn_rows_done"] - prompt["ffn_rows_done"] < (step["ffn_rows_dense"] - prompt["ffn_rows_dense"])


def test_powerinfer_layout_pwri_magic_without_ffn_down(tmp_path):
    """PowerInfer's own files: magic PWRI, ffn_down_t in place of ffn_down."""
    reference = ReferenceModel(write_llama_gguf(tmp_path / "ref.gguf", weight_type="Q8_0", n_layer=2,
                                                tensor_types={f"blk.{i}.ffn_down.weight": "F32" for i in range(2)}),
                               act="relu_glu").logits(TOKENS)
    path = oracle_model(tmp_path, "Q8_0", drop_down=True, magic=b"PWRI")
    assert open(path, "rb").read(4) == b"PWRI"
    dense, _ = logits(path, sparse=False)
    sparse, _ = logits(path, sparse="all", sparse_threshold_shift=-MARGIN.get("Q8_0", 0.05))
    np.testing.assert_allclose(sparse, dense, rtol=1e-4, atol=1e-4)
    stats = compare_logits(reference, dense)
    assert stats["kl_mean"] < 5e-3 and stats["top1"] >= 0.9, stats


def test_one_sided_predictor_is_refused(tmp_path):
    plain = write_llama_gguf(tmp_path / "plain.gguf", weight_type="F32")
    path = rewrite_gguf(plain, tmp_path / "half.gguf", {"blk.0.fc1.weight": np.zeros((8, 64), np.float32)})
    with pytest.raises(ValueError, match="fc1/fc2"):
        Llama(path, verbose=False)


def test_bamboo_architecture_uses_relu_relu(tmp_path):
    path = write_llama_gguf(tmp_path / "bamboo.gguf", weight_type="F32", arch="bamboo")
    twin = write_llama_gguf(tmp_path / "twin.gguf", weight_type="F32")  # same weights, llama keys
    reference = ReferenceModel(twin, act="relu_relu_glu").logits(TOKENS)
    with Llama(str(path), n_ctx=64, logits_all=True, verbose=False) as llm:
        llm.eval(TOKENS)
        stats = compare_logits(reference, np.array(llm.scores[: len(TOKENS)]))
    assert stats["kl_mean"] < 1e-4 and stats["top1"] == 1.0, stats


def test_pwri_llama_defaults_to_relu_and_the_activation_key_overrides(tmp_path):
    plain = write_llama_gguf(tmp_path / "plain.gguf", weight_type="F32")
    pwri = rewrite_gguf(plain, tmp_path / "pwri.gguf")
    with open(pwri, "r+b") as f:
        f.write(b"PWRI")
    keyed = rewrite_gguf(plain, tmp_path / "keyed.gguf",
                         add_kv={"powerinfer.activation": ("relu_relu_glu", GGUFValueType.STRING, None)})
    for path, act in ((pwri, "relu_glu"), (keyed, "relu_relu_glu"), (plain, "silu_glu")):
        from pypowerinfer.model import NativeModel
        assert NativeModel(path).info.ffn_act == act, path


def test_dense_ffn_over_ffn_down_t_is_the_same_every_run(tmp_path):
    """PowerInfer's files have only the transposed down matrix: the dense FFN sums its rows on
    every thread, in shares fixed by the thread count (claimed dynamically, the rounding changed
    from run to run)."""
    from synthetic import write_profiled_ungated

    from pypowerinfer.model import NativeContext, NativeModel

    model = NativeModel(write_profiled_ungated(tmp_path, "Q8_0", arch="opt"))
    tokens = np.array([5, 17, 200, 3, 99, 42, 7, 128], dtype=np.int32)
    runs = []
    try:
        for _ in range(5):
            ctx = NativeContext(model, n_ctx=32, n_batch=8, n_threads=2, n_threads_batch=2, logits_all=True, sparse=0)
            try:
                ctx.decode(tokens, 0)
                runs.append(ctx.logits[: len(tokens)].copy())
            finally:
                ctx.close()
    finally:
        model.close()
    assert all(np.array_equal(runs[0], r) for r in runs[1:])
