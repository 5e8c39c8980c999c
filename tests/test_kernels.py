"""The CPU kernels against gguf-py and numpy, for every weight type and every kernel tier.

- dequant: pi_kernel_dequant must reproduce gguf.quants.dequantize.
- matmul, block types: the result must be the dequantized weights times the activation
  quantized to q8x blocks, the activation quantizer rewritten here in numpy float32 so that it
  produces the very same blocks as the library.
- matmul, float types: plain float math on the exactly decoded weights.
- tiers: avx2 and avx512 must agree with the scalar reference to float rounding.
- axpy_rows: y + sum_j a[j] * row(rows[j]) in float64 on gguf's dequantized rows; the rows of a
  zero a[j], and the rows no one asks for, hold NaN weights, so reading one fails the test.

Row counts and token counts are odd on purpose (tiles are 4 rows by 4 or 2 tokens, leftover
rows go one at a time and leftover tokens in one narrower tile), n = 32 and 96 give one and three blocks (the SIMD kernels work on block
pairs and hand an odd block to the reference), and float rows of 1, 7, 33 and 577 weights end
in partial vectors.
"""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize, quantize

from pypowerinfer._ffi import UnsupportedError, check, ffi, lib

IMPLS = {"ref": 1, "avx2": 2, "avx512": 3}
BLOCK_TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]
FLOAT_TYPES = ["F32", "F16", "BF16"]
BLOCK_NS = [32, 96, 576, 1536]
FLOAT_NS = [1, 7, 33, 577]
ROWS = [1, 3, 37]
NTS = [1, 2, 3, 7, 8]

# Error bound for a dot product, as a share of sum(|w * x|): float32 rounding of per-block
# scales and of the sums, far below one step of the 8-bit activation (1/127 of a block).
RTOL = 2e-6
RTOL_TIERS = 1e-6


def impl_available(impl: str) -> bool:
    out = np.zeros(1, np.float32)
    rc = lib.pi_kernel_dequant(QT.F32, IMPLS[impl], ffi.from_buffer(out), 1, ffi.from_buffer("float[]", out))
    return rc == lib.PI_OK


def require(impl: str) -> None:
    if not impl_available(impl):
        pytest.skip(f"this CPU cannot run the {impl} kernels")


def random_weights(rng: np.random.Generator, rows: int, n: int) -> np.ndarray:
    # A per-row offset gives the blocks non-zero minimums (the Q4_1/Q5_1 "m" path).
    return (rng.standard_normal((rows, n)) + rng.standard_normal((rows, 1))).astype(np.float32)


def random_activations(rng: np.random.Generator, nt: int, n: int) -> np.ndarray:
    x = rng.standard_normal((nt, n)).astype(np.float32)
    x[0, : min(n, 32)] = 0.0  # an all-zero block: d = 0
    return x


def encode(data: np.ndarray, qtype: str) -> np.ndarray:
    """gguf's encoding of `data` as raw bytes, one row per row of data."""
    return np.ascontiguousarray(quantize(data, QT[qtype])).view(np.uint8)


def q8x_blocks(x: np.ndarray):
    """The activation's q8x blocks as the kernels make them, the way ggml makes Q8_0 / Q8_1
    blocks: d = amax/127 and q = rint(x * (127/amax)) in float32, then d and s = d * sum(q)
    rounded to f16. Returns q, d and s (float64), per row and block."""
    nt, n = x.shape
    blocks = x.reshape(nt, n // 32, 32).astype(np.float32)
    amax = np.abs(blocks).max(axis=-1, keepdims=True)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.clip(np.rint(blocks * inv), -127, 127)
    s = (d[..., 0] * q.sum(axis=-1).astype(np.float32)).astype(np.float16)
    return q.astype(np.float64), d.astype(np.float16).astype(np.float64), s.astype(np.float64)


def q8x_dequantized(x: np.ndarray) -> np.ndarray:
    """The activation as the kernels see it: q8x blocks decoded back to float64."""
    q, d, _ = q8x_blocks(x)
    return (q * d).reshape(x.shape)


def q8x_offset_term(w: np.ndarray, x: np.ndarray, qtype: str) -> np.ndarray:
    """What a "+ m" format (Q4_1, Q5_1) adds beyond q8x_dequantized(x) @ w.T: m times the block's
    f16 s, not times d * sum(q); 0 for the other formats."""
    if qtype not in ("Q4_1", "Q5_1"):
        return 0.0
    q, d, s = q8x_blocks(x)
    n_blocks = q.shape[1]
    m = w.reshape(w.shape[0], n_blocks, -1)[:, :, 2:4].copy().view(np.float16)[..., 0].astype(np.float64)
    return (s - d[..., 0] * q.sum(axis=-1)) @ m.T


def act_as_weight_type(x: np.ndarray, qtype: str) -> np.ndarray:
    """x as llama.cpp dots it with float weights: rounded to the weight's own type (f16 for F16,
    bf16 to nearest even for BF16), in float64."""
    x = np.asarray(x, np.float32)
    if qtype == "F16":
        return x.astype(np.float16).astype(np.float64)
    if qtype == "BF16":
        u = x.view(np.uint32).astype(np.uint64)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16).astype(np.uint32)
        return u.view(np.float32).astype(np.float64)
    return x.astype(np.float64)


def kernel_matmul(qtype: str, impl: str, w: np.ndarray, rows: int, n: int, x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, np.float32)
    y = np.full((x.shape[0], rows), np.nan, np.float32)
    rc = lib.pi_kernel_matmul(QT[qtype], IMPLS[impl], ffi.from_buffer(w), rows, n,
                              ffi.from_buffer("float[]", x), x.shape[0], ffi.from_buffer("float[]", y))
    check(rc)
    return y


def kernel_dequant(qtype: str, impl: str, row: np.ndarray, n: int) -> np.ndarray:
    out = np.full(n, np.nan, np.float32)
    check(lib.pi_kernel_dequant(QT[qtype], IMPLS[impl], ffi.from_buffer(row), n, ffi.from_buffer("float[]", out)))
    return out


def assert_dot_close(y: np.ndarray, expected: np.ndarray, bound: np.ndarray, rtol: float, what: str) -> None:
    err = np.abs(y.astype(np.float64) - expected)
    worst = np.unravel_index(np.argmax(err - rtol * bound), err.shape)
    assert np.all(err <= rtol * bound + 1e-30), (
        f"{what}: |error| {err[worst]:.3g} > {rtol} * sum|w*x| = {rtol * bound[worst]:.3g} at {worst}")


def block_matmul_cases(rng: np.random.Generator, qtype: str, n: int, rows_list, nts):
    """(rows, nt, w, x, exact, bound) for each shape: random weights in qtype and activations,
    the product of their quantized forms in float64, and sum |w x| (the scale of its error)."""
    for rows in rows_list:
        w = encode(random_weights(rng, rows, n), qtype)
        wd = dequantize(w, QT[qtype]).astype(np.float64)
        for nt in nts:
            x = random_activations(rng, nt, n)
            xq = q8x_dequantized(x)
            yield rows, nt, w, x, xq @ wd.T + q8x_offset_term(w, x, qtype), np.abs(xq) @ np.abs(wd).T


def weight_blocks(w: np.ndarray, qtype: str, n: int):
    """A block format's rows as their integer quants q (w = d * q + m) [rows, blocks, 32], d and m
    (float32; m 0 where the format has none), read from the bytes."""
    layout = {"Q4_0": (18, 2, None, False), "Q4_1": (20, 4, None, True), "Q5_0": (22, 6, 2, False),
              "Q5_1": (24, 8, 4, True), "Q8_0": (34, 2, None, False)}
    size, qs_at, qh_at, has_m = layout[qtype]
    b = w.reshape(w.shape[0], n // 32, size)
    half = lambda at: b[:, :, at:at + 2].copy().view(np.float16)[..., 0].astype(np.float32)  # noqa: E731
    d, m = half(0), half(2) if has_m else np.zeros(b.shape[:2], np.float32)
    if qtype == "Q8_0":
        return b[:, :, 2:].view(np.int8).astype(np.int64), d, m
    qs = b[:, :, qs_at:qs_at + 16].astype(np.int64)
    q = np.concatenate([qs & 15, qs >> 4], axis=2)
    if qh_at is not None:
        qh = b[:, :, qh_at:qh_at + 4].copy().view(np.uint32)[..., 0].astype(np.int64)
        q |= ((qh[..., None] >> np.arange(32)) & 1) << 4
    offset = {"Q4_0": 8, "Q5_0": 16}.get(qtype, 0)
    return q - offset, d, m


def fma32(a, b, c):
    """float32 fma: the product exact in float64 (two float32, or a float32 and a small integer),
    the sum rounded once there and then to float32 (a second rounding that matters about once
    in 2^29)"""
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(np.float32)


def llama_order_matmul(w: np.ndarray, qtype: str, n: int, x: np.ndarray) -> np.ndarray:
    """What llama.cpp's x86 CPU backend computes, to the bit (kernels.h's pi_dot_order): Q4_0 one
    float per row, fma(isum, d_w d_x, sum) per block; the others 8 lanes, lane l adding fma(d_w d_x,
    isum of products 4l .. 4l + 3, lane) per block, summed ((l0 + l4) + (l2 + l6)) + ((l1 + l5) +
    (l3 + l7)), plus their m s_x terms summed apart."""
    q, dw, m = weight_blocks(w, qtype, n)
    xq, xd, xs = q8x_blocks(x)
    xq, xd, xs = xq.astype(np.int64), xd.astype(np.float32), xs.astype(np.float32)
    y = np.zeros((x.shape[0], w.shape[0]), np.float32)
    for t in range(x.shape[0]):
        prod = q * xq[t][None]
        lanes = np.zeros((w.shape[0], 8), np.float32)
        total, mins = np.zeros(w.shape[0], np.float32), np.zeros(w.shape[0], np.float32)
        for b in range(n // 32):
            d = (dw[:, b] * xd[t, b]).astype(np.float32)
            if qtype == "Q4_0":
                total = fma32(prod[:, b].sum(axis=1), d, total)
            else:
                lanes = fma32(d[:, None], prod[:, b].reshape(-1, 8, 4).sum(axis=2), lanes)
            mins = fma32(m[:, b], xs[t, b], mins)
        if qtype != "Q4_0":
            l = lanes  # noqa: E741
            total = ((l[:, 0] + l[:, 4]) + (l[:, 2] + l[:, 6])) + ((l[:, 1] + l[:, 5]) + (l[:, 3] + l[:, 7]))
        y[t] = total + mins
    return y


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("qtype", BLOCK_TYPES)
def test_block_matmul_sums_in_llama_order(qtype, impl):
    """Every tier's block matmul is llama.cpp's to the bit, for decode and prompt tile shapes."""
    require(impl)
    rng = np.random.default_rng(17)
    for n in BLOCK_NS:
        for rows in ROWS:
            w = encode(random_weights(rng, rows, n), qtype)
            for nt in range(1, 10):  # each tile width and the leftovers after whole tiles
                x = random_activations(rng, nt, n)
                np.testing.assert_array_equal(kernel_matmul(qtype, impl, w, rows, n, x),
                                              llama_order_matmul(w, qtype, n, x), err_msg=f"n={n} rows={rows} nt={nt}")


@pytest.mark.parametrize("impl", IMPLS)
def test_q8_0_extremes(impl):
    """Q8_0's +-127 quants against +-127 activations: the AVX-512 tier's unsigned offset and the
    AVX2 tier's sign trick (pair sums near int16's limit) at their limits"""
    require(impl)
    rows, n = 16, 64
    w = encode(np.where(np.arange(rows * n).reshape(rows, n) % 3 == 0, -1.0, 1.0).astype(np.float32), "Q8_0")
    x = np.tile(np.where(np.arange(n) % 2 == 0, 1.0, -1.0).astype(np.float32), (2, 1))
    np.testing.assert_array_equal(kernel_matmul("Q8_0", impl, w, rows, n, x), llama_order_matmul(w, "Q8_0", n, x))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("n", BLOCK_NS)
@pytest.mark.parametrize("qtype", BLOCK_TYPES)
def test_block_matmul(qtype, n, impl):
    require(impl)
    for rows, nt, w, x, exact, bound in block_matmul_cases(np.random.default_rng(n), qtype, n, ROWS, NTS):
        assert_dot_close(kernel_matmul(qtype, impl, w, rows, n, x), exact, bound, RTOL, f"{qtype} rows={rows} nt={nt}")


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("n", FLOAT_NS + BLOCK_NS[2:])
@pytest.mark.parametrize("qtype", FLOAT_TYPES)
def test_float_matmul(qtype, n, impl):
    require(impl)
    rng = np.random.default_rng(n)
    for rows in ROWS:
        w = encode(random_weights(rng, rows, n), qtype)
        wd = dequantize(w, QT[qtype]).astype(np.float64)
        for nt in NTS:
            x = random_activations(rng, nt, n)
            y = kernel_matmul(qtype, impl, w, rows, n, x)
            xd = act_as_weight_type(x, qtype)
            assert_dot_close(y, xd @ wd.T, np.abs(xd) @ np.abs(wd).T, RTOL, f"{qtype} rows={rows} nt={nt}")


@pytest.mark.parametrize("impl", ["avx2", "avx512"])
@pytest.mark.parametrize("qtype", BLOCK_TYPES + FLOAT_TYPES)
def test_simd_matches_reference(qtype, impl):
    """the block formats to the bit (one summation order), float rows within rounding"""
    require(impl)
    rng = np.random.default_rng(7)
    ns = BLOCK_NS if qtype in BLOCK_TYPES else FLOAT_NS + [1536]
    for n in ns:
        rows, nt = 37, 9
        w = encode(random_weights(rng, rows, n), qtype)
        x = random_activations(rng, nt, n)
        ref = kernel_matmul(qtype, "ref", w, rows, n, x).astype(np.float64)
        simd = kernel_matmul(qtype, impl, w, rows, n, x)
        if qtype in BLOCK_TYPES:
            np.testing.assert_array_equal(simd, ref, err_msg=f"{qtype} n={n} {impl} vs ref")
            continue
        wd = dequantize(w, QT[qtype]).astype(np.float64)
        bound = np.abs(x.astype(np.float64)) @ np.abs(wd).T
        assert_dot_close(simd, ref, bound, RTOL_TIERS, f"{qtype} n={n} {impl} vs ref")


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("qtype", BLOCK_TYPES + FLOAT_TYPES)
def test_dequant(qtype, impl):
    require(impl)
    rng = np.random.default_rng(3)
    ns = BLOCK_NS if qtype in BLOCK_TYPES else FLOAT_NS + BLOCK_NS
    for n in ns:
        w = encode(random_weights(rng, 3, n), qtype)
        expected = dequantize(w, QT[qtype])
        for r in range(3):
            got = kernel_dequant(qtype, impl, w[r], n)
            # d * q + m may be one fused multiply-add in C and two roundings in numpy.
            np.testing.assert_allclose(got, expected[r], rtol=1e-6, atol=1e-6 * np.abs(expected[r]).max(),
                                       err_msg=f"{qtype} n={n} row {r}")


AXPY_NS = [0, 1, 5, 37]
AXPY_WIDE = 4096 + 96  # past the 128 blocks of y that one walk over the rows covers


def kernel_axpy_rows(qtype: str, impl: str, w: np.ndarray, d: int, rows: np.ndarray | None, a: np.ndarray,
                     y: np.ndarray) -> np.ndarray:
    y = np.array(y, np.float32)
    a = np.ascontiguousarray(a, np.float32)
    rows_p = ffi.NULL if rows is None else ffi.from_buffer("int32_t[]", np.ascontiguousarray(rows, np.int32))
    check(lib.pi_kernel_axpy_rows(QT[qtype], IMPLS[impl], ffi.from_buffer(w), w.shape[0], d, rows_p,
                                  ffi.from_buffer("float[]", a), len(a), ffi.from_buffer("float[]", y)))
    return y


def poison(w: np.ndarray, qtype: str, bad: np.ndarray) -> np.ndarray:
    """A copy of the encoded rows whose rows `bad` decode to NaN: every byte 0xff for the float
    types (a NaN in F32, F16 and BF16), each block's fp16 d set to NaN for the block formats."""
    w = w.copy()
    if qtype in FLOAT_TYPES:
        w[bad] = 0xFF
    else:
        block = {"Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q5_1": 24, "Q8_0": 34}[qtype]
        view = w.reshape(w.shape[0], w.shape[1] // block, block)
        view[bad, :, 0:2] = 0xFF
    return w


def block_max(wd: np.ndarray, qtype: str) -> np.ndarray:
    """max |w| over the block of each weight (0 for float types): the size of the block's own
    constant (d * offset or m), which the kernels add apart from d * q."""
    if qtype in FLOAT_TYPES:
        return np.zeros_like(wd)
    blocks = np.abs(wd).reshape(wd.shape[0], wd.shape[1] // 32, 32).max(axis=-1, initial=0.0, keepdims=True)
    return np.broadcast_to(blocks, (*blocks.shape[:2], 32)).reshape(wd.shape)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("qtype,d", [(q, d) for q in BLOCK_TYPES for d in BLOCK_NS + [AXPY_WIDE]] +
                         [(q, d) for q in FLOAT_TYPES for d in FLOAT_NS + BLOCK_NS])
def test_axpy_rows(qtype, d, impl):
    require(impl)
    rng = np.random.default_rng(d)
    for n in AXPY_NS:
        for scattered in (False, True):
            n_rows = n + 11 if scattered else n
            w = encode(random_weights(rng, max(n_rows, 1), d), qtype)  # gguf decodes no empty arrays
            wd = dequantize(w, QT[qtype]).astype(np.float64)[:n_rows]
            w = w[:n_rows]
            rows = rng.permutation(n_rows)[:n] if scattered else None
            picked = rows if scattered else np.arange(n)
            a = rng.standard_normal(n).astype(np.float32)
            a[rng.random(n) < 0.4] = 0.0  # ReLU zeros, their rows never read
            if n:
                a[-1] = 0.0
            used = picked[a != 0]
            unused = np.setdiff1d(np.arange(n_rows), used)
            y0 = rng.standard_normal(d).astype(np.float32)
            y = kernel_axpy_rows(qtype, impl, poison(w, qtype, unused), d, rows, a, y0)
            coef = a.astype(np.float64)[a != 0]
            expected = y0.astype(np.float64) + coef @ wd[used]
            bound = np.abs(y0) + np.abs(coef) @ (np.abs(wd[used]) + block_max(wd[used], qtype))
            # float32 sums of n + 1 terms, each with a rounded a * d and a rounded product
            rtol = 2.0 ** -24 * (2 * n + 8)
            assert_dot_close(y, expected, bound, rtol, f"{qtype} d={d} n={n} scattered={scattered}")


def test_activation_blocks_are_exact():
    """One-hot Q8_0 rows with d = 1 read back single activation values: q * d_x exactly."""
    n, nt = 64, 2
    rng = np.random.default_rng(11)
    x = random_activations(rng, nt, n)
    one = np.array([1.0], np.float16).view(np.uint8)
    rows = np.zeros((n, n // 32, 34), np.uint8)
    for i in range(n):
        rows[i, :, 0:2] = one
        rows[i, i // 32, 2 + i % 32] = 1
    w = rows.reshape(n, -1)
    expected = q8x_dequantized(x)
    for impl in IMPLS:
        if impl_available(impl):
            np.testing.assert_array_equal(kernel_matmul("Q8_0", impl, w, n, n, x), expected.astype(np.float32),
                                          err_msg=impl)


def test_row_bytes():
    assert lib.pi_type_row_bytes(QT.Q4_0, 64) == 36
    assert lib.pi_type_row_bytes(QT.Q4_1, 576) == 18 * 20
    assert lib.pi_type_row_bytes(QT.Q5_0, 32) == 22
    assert lib.pi_type_row_bytes(QT.Q5_1, 32) == 24
    assert lib.pi_type_row_bytes(QT.Q8_0, 49152) == 1536 * 34
    assert lib.pi_type_row_bytes(QT.F32, 7) == 28
    assert lib.pi_type_row_bytes(QT.F16, 7) == 14
    assert lib.pi_type_row_bytes(QT.BF16, 7) == 14
    assert lib.pi_type_row_bytes(QT.Q8_0, 33) == 0  # not a whole number of blocks
    assert lib.pi_type_row_bytes(QT.IQ4_NL, 256) == 0  # unsupported
    assert lib.pi_type_row_bytes(QT.Q4_K, 512) == 288
    assert lib.pi_type_row_bytes(1000, 32) == 0


def test_errors():
    w = np.zeros(4096, np.uint8)
    x = np.zeros(64, np.float32)
    y = np.zeros(64, np.float32)
    xp, yp = ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", y)
    with pytest.raises(UnsupportedError, match="iq4_nl"):
        check(lib.pi_kernel_matmul(QT.IQ4_NL, 0, ffi.from_buffer(w), 1, 256, xp, 1, yp))
    with pytest.raises(UnsupportedError, match="type 77"):
        check(lib.pi_kernel_dequant(77, 0, ffi.from_buffer(w), 32, yp))
    with pytest.raises(ValueError, match="multiple"):
        check(lib.pi_kernel_matmul(QT.Q4_0, 0, ffi.from_buffer(w), 1, 48, xp, 1, yp))
    with pytest.raises(ValueError, match="multiple"):
        check(lib.pi_kernel_dequant(QT.F16, 0, ffi.from_buffer(w), 0, yp))
    with pytest.raises(ValueError, match="NULL"):
        check(lib.pi_kernel_matmul(QT.Q8_0, 0, ffi.NULL, 1, 32, xp, 1, yp))
    with pytest.raises(ValueError, match="NULL"):
        check(lib.pi_kernel_dequant(QT.Q8_0, 0, ffi.from_buffer(w), 32, ffi.NULL))
    with pytest.raises(ValueError, match="impl"):
        check(lib.pi_kernel_matmul(QT.F32, 9, ffi.from_buffer(w), 1, 1, xp, 1, yp))
    check(lib.pi_kernel_matmul(QT.Q8_0, 0, ffi.from_buffer(w), 0, 32, xp, 1, yp))  # no rows: nothing to do


def test_axpy_rows_errors():
    w = np.zeros(4096, np.uint8)
    a = np.ones(4, np.float32)
    y = np.zeros(64, np.float32)
    wp, ap, yp = ffi.from_buffer(w), ffi.from_buffer("float[]", a), ffi.from_buffer("float[]", y)
    rows = ffi.from_buffer("int32_t[]", np.array([0, 3, 1, 2], np.int32))
    check(lib.pi_kernel_axpy_rows(QT.Q8_0, 0, wp, 4, 64, rows, ap, 4, yp))
    with pytest.raises(ValueError, match="outside"):
        check(lib.pi_kernel_axpy_rows(QT.Q8_0, 0, wp, 3, 64, rows, ap, 4, yp))
    with pytest.raises(ValueError, match="outside"):
        bad = ffi.from_buffer("int32_t[]", np.array([0, -1, 1, 2], np.int32))
        check(lib.pi_kernel_axpy_rows(QT.Q8_0, 0, wp, 4, 64, bad, ap, 4, yp))
    with pytest.raises(ValueError, match="rows"):  # no row list: n rows must exist
        check(lib.pi_kernel_axpy_rows(QT.Q8_0, 0, wp, 3, 64, ffi.NULL, ap, 4, yp))
    with pytest.raises(UnsupportedError, match="iq4_nl"):
        check(lib.pi_kernel_axpy_rows(QT.IQ4_NL, 0, wp, 4, 256, rows, ap, 4, yp))
    with pytest.raises(UnsupportedError, match="type 77"):
        check(lib.pi_kernel_axpy_rows(77, 0, wp, 4, 64, rows, ap, 4, yp))
    with pytest.raises(ValueError, match="multiple"):
        check(lib.pi_kernel_axpy_rows(QT.Q4_1, 0, wp, 4, 48, rows, ap, 4, yp))
    with pytest.raises(ValueError, match="NULL"):
        check(lib.pi_kernel_axpy_rows(QT.F32, 0, wp, 4, 16, rows, ap, 4, ffi.NULL))
    with pytest.raises(ValueError, match="negative"):
        check(lib.pi_kernel_axpy_rows(QT.F32, 0, wp, 4, 16, rows, ap, -1, yp))
    with pytest.raises(ValueError, match="impl"):
        check(lib.pi_kernel_axpy_rows(QT.F32, 9, wp, 4, 16, rows, ap, 4, yp))
    assert not y.any()  # every call above failed or added rows of zero weights


@pytest.mark.parametrize("impl", ["ref", "avx2"])
@pytest.mark.parametrize("hd", [32, 64, 128])
def test_mix_q8_0_over_a_q8_0_v_cache(impl, hd):
    """The attention sum over q8_0 V rows (kv_cache.c): sum_j p_j * v_j on gguf's decoding of the
    rows, in float64, and the AVX2 version equal to the scalar reference to float rounding. Rows
    lie a wider stride apart, as one head's slice of the cache rows does."""
    if not impl_available(impl):
        pytest.skip(f"{impl} not available on this CPU")
    rng = np.random.default_rng(hd)
    n, stride_blocks = 37, 3 * hd // 32
    rows = quantize(rng.standard_normal((n, 3 * hd)).astype(np.float32), QT.Q8_0)
    p = rng.random(n).astype(np.float32)
    expected = p.astype(np.float64) @ dequantize(rows, QT.Q8_0)[:, :hd].astype(np.float64)
    out = np.empty(hd, dtype=np.float32)
    rows = np.ascontiguousarray(rows)
    assert rows.shape[1] == stride_blocks * 34
    check(lib.pi_kernel_mix_q8_0(IMPLS[impl], ffi.from_buffer(rows), rows.shape[1], ffi.from_buffer("float[]", p), n, hd,
                                 ffi.from_buffer("float[]", out)))
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=RTOL * np.abs(p @ np.abs(dequantize(rows, QT.Q8_0)[:, :hd])).max())
    if impl == "avx2":
        ref = np.empty(hd, dtype=np.float32)
        check(lib.pi_kernel_mix_q8_0(IMPLS["ref"], ffi.from_buffer(rows), rows.shape[1], ffi.from_buffer("float[]", p), n, hd,
                                     ffi.from_buffer("float[]", ref)))
        np.testing.assert_allclose(out, ref, rtol=RTOL_TIERS, atol=RTOL_TIERS * np.abs(ref).max())
