"""Weights in groups of 16 rows (native/src/kernels/row_groups.c), the layout the model loader gives
the dense matmuls' Q4_0 and K-quant (Q4_K, Q5_K, Q6_K) weights: the grouped kernels against the
row-major ones and against float64, and a model loaded either way.

The reference tier takes each block back out of its group and computes the row-major dot, so
there the two layouts agree to the bit. Q4_0 sums one float per row, an FMA per block, in every
tier and either layout (kernels.h's pi_dot_order): those agree to the bit too. The K-quant SIMD
tiles sum in another order than their reference and agree within the tiers' tolerance."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from pypowerinfer._ffi import UnsupportedError, check, ffi, lib
from pypowerinfer.model import NativeContext, NativeModel
from synthetic import write_llama_gguf
from test_kernels import (IMPLS, RTOL, RTOL_TIERS, assert_dot_close, block_matmul_cases, encode, kernel_matmul,
                          random_activations, random_weights, require)
from test_kquants import k_rows, q8k_round

GROUPED_TYPES = ["Q4_0"]
K_GROUPED_TYPES = ["Q4_K", "Q5_K", "Q6_K"]
NS = [32, 96, 576]
K_NS = [256, 768]  # one and three super-blocks
ROWS = [16, 48]
NTS = [1, 2, 3, 4, 5, 9]
K_NTS = NTS + [17]  # past the reference's 16-token tile


def grouped(qtype: str, w: np.ndarray, rows: int, n: int) -> np.ndarray:
    g = w.copy()
    check(lib.pi_kernel_group_rows(QT[qtype], ffi.from_buffer(g), rows, n))
    return g


def grouped_matmul(qtype: str, impl: str, w: np.ndarray, rows: int, n: int, x: np.ndarray) -> np.ndarray:
    """pi_kernel_matmul_grouped over a grouped copy of the row-major w"""
    w = grouped(qtype, w, rows, n)
    x = np.ascontiguousarray(x, np.float32)
    y = np.full((x.shape[0], rows), np.nan, np.float32)
    check(lib.pi_kernel_matmul_grouped(QT[qtype], IMPLS[impl], ffi.from_buffer(w), rows, n,
                                       ffi.from_buffer("float[]", x), x.shape[0], ffi.from_buffer("float[]", y)))
    return y


@pytest.mark.parametrize("qtype", GROUPED_TYPES)
def test_reference_grouped_is_row_major_to_the_bit(qtype):
    rng = np.random.default_rng(1)
    for n in NS:
        for rows in ROWS:
            w = encode(random_weights(rng, rows, n), qtype)
            for nt in NTS:
                x = random_activations(rng, nt, n)
                np.testing.assert_array_equal(grouped_matmul(qtype, "ref", w, rows, n, x),
                                              kernel_matmul(qtype, "ref", w, rows, n, x), err_msg=f"n={n} nt={nt}")


@pytest.mark.parametrize("qtype", K_GROUPED_TYPES)
def test_reference_k_grouped_is_row_major_to_the_bit(qtype):
    rng = np.random.default_rng(1)
    for n in K_NS:
        for rows in ROWS:
            w, _ = k_rows(qtype, rows, n, rows + n)
            for nt in K_NTS:
                x = random_activations(rng, nt, n)
                np.testing.assert_array_equal(grouped_matmul(qtype, "ref", w, rows, n, x),
                                              kernel_matmul(qtype, "ref", w, rows, n, x), err_msg=f"n={n} nt={nt}")


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("qtype", K_GROUPED_TYPES)
def test_k_grouped_matmul(qtype, impl):
    """The product of the dequantized weights and the Q8_K-rounded activations, in float64; and
    the row-major reference. The integer sums are exact, so only float rounding is left."""
    require(impl)
    rng = np.random.default_rng(2)
    for n in K_NS:
        for rows in ROWS:
            w, wd = k_rows(qtype, rows, n, 3 * rows + n)
            for nt in K_NTS:
                x = random_activations(rng, nt, n)
                xr = np.stack([q8k_round(row) for row in x]).astype(np.float64)
                y = grouped_matmul(qtype, impl, w, rows, n, x)
                bound = np.abs(xr) @ np.abs(wd).T
                what = f"{qtype} {impl} rows={rows} n={n} nt={nt}"
                assert_dot_close(y, xr @ wd.T, bound, RTOL, what)
                assert_dot_close(y, kernel_matmul(qtype, "ref", w, rows, n, x).astype(np.float64), bound, RTOL_TIERS,
                                 what + " vs ref")


@pytest.mark.parametrize("impl", ["avx2", "avx512"])
@pytest.mark.parametrize("qtype", K_GROUPED_TYPES)
def test_k_grouped_extremes(qtype, impl):
    """Every quant at its largest (15, 31, 63), every scale and min at its largest, against
    activations that all round to -127: the AVX2 tier's int16 pair sums at their limit before it
    widens them (8, 4 and 2 chunks), and Q6_K's offset at its largest."""
    require(impl)
    rows, n = 16, 512
    w, _ = k_rows(qtype, rows, n, 4)
    blocks = w.reshape(-1, w.shape[-1] // (n // 256))
    if qtype == "Q6_K":  # ql, qh all ones; scales -128 and 127 in turn; d last
        blocks[:, :192] = 0xFF
        blocks[:, 192:208] = np.where(np.arange(16) % 2 == 0, 0x80, 0x7F).astype(np.uint8)
    else:  # d, dmin, then 12 bytes of 6-bit scales and mins all 63, qh and qs all ones
        blocks[:, 4:] = 0xFF
    x = np.ones((3, n), np.float32)
    x[1] *= -1.0
    x[2, ::2] = -1.0
    np.testing.assert_allclose(grouped_matmul(qtype, impl, w, rows, n, x), kernel_matmul(qtype, "ref", w, rows, n, x),
                               rtol=1e-6)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("qtype", GROUPED_TYPES)
def test_grouped_matmul(qtype, impl):
    """within rounding of float64, and the row-major reference's bits"""
    require(impl)
    for n in NS:
        for rows, nt, w, x, exact, bound in block_matmul_cases(np.random.default_rng(2), qtype, n, ROWS, NTS):
            y = grouped_matmul(qtype, impl, w, rows, n, x)
            assert_dot_close(y, exact, bound, RTOL, f"{qtype} {impl} rows={rows} n={n} nt={nt}")
            np.testing.assert_array_equal(y, kernel_matmul(qtype, "ref", w, rows, n, x))


def test_grouping_moves_the_bytes():
    """A group holds exactly its rows' bytes, permuted, and differs from row order"""
    rng = np.random.default_rng(3)
    for qtype in GROUPED_TYPES + K_GROUPED_TYPES:
        n = 512 if qtype in K_GROUPED_TYPES else 64
        w = k_rows(qtype, 32, n, 3)[0] if qtype in K_GROUPED_TYPES else encode(random_weights(rng, 32, n), qtype)
        g = grouped(qtype, w, 32, n)
        assert g.nbytes == w.nbytes and not np.array_equal(g, w)
        np.testing.assert_array_equal(np.sort(g.reshape(2, -1), axis=1), np.sort(w.reshape(2, -1), axis=1))


def test_grouped_errors():
    w = np.zeros(4096, np.uint8)
    xp = yp = ffi.from_buffer("float[]", np.zeros(64, np.float32))  # every call fails before reading it
    with pytest.raises(UnsupportedError, match="q3_K has no grouped layout"):
        check(lib.pi_kernel_matmul_grouped(QT.Q3_K, 0, ffi.from_buffer(w), 16, 256, xp, 1, yp))
    with pytest.raises(UnsupportedError, match="q2_K has no grouped layout"):
        check(lib.pi_kernel_group_rows(QT.Q2_K, ffi.from_buffer(w), 16, 256))
    with pytest.raises(ValueError, match="not a multiple of 16"):
        check(lib.pi_kernel_matmul_grouped(QT.Q4_0, 0, ffi.from_buffer(w), 8, 32, xp, 1, yp))
    with pytest.raises(ValueError, match="not a multiple of 16"):
        check(lib.pi_kernel_group_rows(QT.Q4_0, ffi.from_buffer(w), 24, 32))
    with pytest.raises(UnsupportedError, match="q8_0 has no grouped layout"):
        check(lib.pi_kernel_group_rows(QT.Q8_0, ffi.from_buffer(w), 16, 32))
    with pytest.raises(ValueError, match="multiple of q4_0's block"):
        check(lib.pi_kernel_group_rows(QT.Q4_0, ffi.from_buffer(w), 16, 48))


def _logits(model: NativeModel, tokens: list[int], impl: int) -> np.ndarray:
    """The logits of a prompt of several tokens and of one token after it: both matmul shapes"""
    ctx = NativeContext(model, n_ctx=64, n_batch=64, n_threads=2, n_threads_batch=2, logits_all=False,
                        kernel_impl=impl, n_logits=len(tokens) - 1)
    ctx.decode(np.array(tokens[:-1], np.int32), 0, len(tokens) - 1)
    prompt = ctx.logits.copy()
    ctx.decode(np.array(tokens[-1:], np.int32), len(tokens) - 1)
    return np.vstack([prompt, ctx.logits[:1]])


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("weight_type", GROUPED_TYPES + K_GROUPED_TYPES)
def test_model_grouped_at_load(tmp_path, weight_type, tied):
    """A model loads its dense weights grouped (saying so; a tied output with the embedding,
    whose row lookup then reads the groups), computes what the row-major load computes, and
    leaves its file as it was."""
    k = weight_type in K_GROUPED_TYPES  # rows of 256: n_embd 256, n_ff 512
    path = write_llama_gguf(tmp_path / "m.gguf", n_embd=256 if k else 64, n_ff=512 if k else 96, n_vocab=288,
                            weight_type=weight_type, output_type=None if tied else weight_type)
    before = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    grouped, plain = NativeModel(path), NativeModel(path, repack=False)
    assert "rows in groups of 16" in grouped.describe()
    assert "rows in groups of 16" not in plain.describe()
    embd = next(line for line in grouped.describe().splitlines() if "token_embd" in line)
    assert ("rows in groups of 16" in embd) == tied
    tokens = [1, 5, 9, 33, 7, 2]
    np.testing.assert_array_equal(_logits(grouped, tokens, 1), _logits(plain, tokens, 1))  # the reference: exact
    auto_g, auto_p = _logits(grouped, tokens, 0), _logits(plain, tokens, 0)
    if k:
        np.testing.assert_allclose(auto_g, auto_p, rtol=1e-3, atol=1e-3 * np.abs(auto_p).max())
    else:  # one summation order either way
        np.testing.assert_array_equal(auto_g, auto_p)
    del grouped
    assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == before
