"""K-quant kernels (Q2_K .. Q6_K) against gguf-py's dequantization, on every tier's table (the
scalar reference, and the AVX2 integer dot products that avx2 and avx512 compile): dequant
exactly, matmul as the dequantized weights times the activation rounded as llama.cpp's Q8_K,
the SIMD tiers against the reference; and a synthetic K-quant model against the numpy
reference forward."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize

from reference import ReferenceModel, compare_logits
from synthetic import K_TYPES, random_k_blocks, write_llama_gguf
from test_kernels import (BLOCK_TYPES, FLOAT_TYPES, IMPLS, encode, kernel_axpy_rows, kernel_dequant, kernel_matmul,
                          random_weights, require)

from pypowerinfer._ffi import check, ffi, lib

from pypowerinfer import Llama

NS = [256, 512, 1536]


def k_rows(qtype: str, rows: int, n: int, seed: int) -> np.ndarray:
    """Encoded [rows][bytes per row] and their dequantized floats."""
    from gguf.quants import quant_shape_to_byte_shape

    w = random_k_blocks(qtype, tuple(quant_shape_to_byte_shape((rows, n), QT[qtype])), np.random.default_rng(seed), 0.05)
    return w, dequantize(w, QT[qtype]).astype(np.float64)


@pytest.mark.parametrize("impl", list(IMPLS))
@pytest.mark.parametrize("qtype", K_TYPES)
def test_dequant_matches_gguf(qtype, impl):
    require(impl)
    for n in NS:
        w, ref = k_rows(qtype, 3, n, n)
        for r in range(3):
            np.testing.assert_allclose(kernel_dequant(qtype, impl, w[r], n), ref[r], rtol=1e-6, atol=1e-9)


def q8k_round(x: np.ndarray) -> np.ndarray:
    """llama.cpp's Q8_K activation rounding, per 256 values: the largest magnitude maps to -127."""
    x = x.astype(np.float32).reshape(-1, 256)
    at = np.argmax(np.abs(x), axis=1)
    mx = x[np.arange(len(x)), at]
    safe = np.where(mx == 0, np.float32(1), mx)
    iscale = (np.float32(-127.0) / safe).astype(np.float32)
    q = np.minimum(np.rint(iscale[:, None] * x), 127).astype(np.float32)
    out = (np.float32(1.0) / iscale)[:, None] * q
    return np.where(mx[:, None] == 0, 0, out).reshape(-1)


@pytest.mark.parametrize("impl", list(IMPLS))
@pytest.mark.parametrize("qtype", K_TYPES)
def test_matmul_matches_dequantized_weights(qtype, impl):
    require(impl)
    rng = np.random.default_rng(1)
    for n in NS:
        for rows, nt in ((1, 1), (5, 3), (3, 17)):  # 17: past the kernel's 16-token tile
            w, ref = k_rows(qtype, rows, n, rows * n)
            x = rng.standard_normal((nt, n)).astype(np.float32)
            y = kernel_matmul(qtype, impl, w, rows, n, x)
            xr = np.stack([q8k_round(row) for row in x]).astype(np.float64)
            expected = xr @ ref.T
            bound = np.abs(x).astype(np.float64) @ np.abs(ref).T
            assert np.all(np.abs(y - expected) <= 1e-5 * bound + 1e-12), qtype


@pytest.mark.parametrize("impl", [i for i in IMPLS if i != "ref"])
@pytest.mark.parametrize("qtype", K_TYPES)
def test_simd_matmul_equals_the_reference(qtype, impl):
    """The same integer sums; only the float products and their order differ."""
    require(impl)
    rng = np.random.default_rng(3)
    n, rows, nt = 1536, 7, 4
    w, _ = k_rows(qtype, rows, n, 11)
    x = rng.standard_normal((nt, n)).astype(np.float32)
    ours, ref = kernel_matmul(qtype, impl, w, rows, n, x), kernel_matmul(qtype, "ref", w, rows, n, x)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("qtype", K_TYPES)
def test_axpy_rows_matches_dequantized_rows(qtype):
    rng = np.random.default_rng(2)
    d, n = 512, 9
    w, ref = k_rows(qtype, n, d, 3)
    a = rng.standard_normal(n).astype(np.float32)
    a[[1, 4]] = 0.0
    y0 = rng.standard_normal(d).astype(np.float32)
    rows = rng.permutation(n)
    y = kernel_axpy_rows(qtype, "ref", w, d, rows, a, y0)
    expected = y0 + a.astype(np.float64) @ ref[rows]
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("qtype", K_TYPES)
def test_k_quant_model_matches_the_reference(qtype, tmp_path):
    """Every 2-D weight in the K type (rows of 256: n_embd 256, n_ff 512)."""
    path = write_llama_gguf(tmp_path / f"{qtype}.gguf", weight_type=qtype, n_embd=256, n_ff=512, n_head=4,
                            n_head_kv=2, n_vocab=288, output_type="Q8_0")
    tokens = [1, 17, 42, 99, 5, 250, 3]
    with Llama(path, n_ctx=32, logits_all=True, verbose=False) as llm:
        llm.eval(tokens)
        ours = np.array(llm.scores[: len(tokens)])
    stats = compare_logits(ReferenceModel(path).forward(tokens), ours)
    # the wiring, not the numerics (the kernel tests above check those exactly): 8-bit activations
    # (Q8_K for the K weights) against a float forward move a random model's sharp logits a little
    assert stats["kl_mean"] < 0.1 and stats["top1"] >= 0.85, (qtype, stats)


@pytest.mark.parametrize("units", [0, 1])  # weight by weight (column reads), 32 at a time (row dots)
@pytest.mark.parametrize("qtype", [*FLOAT_TYPES, *BLOCK_TYPES, *K_TYPES])
def test_device_decoding_equals_the_reference(qtype, units):
    """cuda/weights.h, the weight decoding the CUDA kernels run, compiled for the host here: every
    weight of every type the device reads equals the scalar reference's dequantization."""
    n = 1536 if qtype not in FLOAT_TYPES else 1525  # float rows need not be whole units
    if qtype in K_TYPES:
        w, _ = k_rows(qtype, 2, n, 5)
    else:
        w = encode(random_weights(np.random.default_rng(4), 2, n), qtype)
    for r in range(2):
        device = np.full(n, np.nan, np.float32)
        check(lib.pi_kernel_device_dequant(QT[qtype], units, ffi.from_buffer(w[r]), n,
                                           ffi.from_buffer("float[]", device)))
        np.testing.assert_array_equal(device, kernel_dequant(qtype, "ref", w[r], n), err_msg=qtype)
