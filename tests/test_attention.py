"""Attention over an f16 KV cache in tiles (native/src/attention.c, vec.c's tile ops): the tile ops
give each query exactly the sums it gets alone, and so a prompt evaluated in one step gives the
logits its tokens get decoded one at a time, bit for bit: GQA groups of several sizes, head_dim
64, 128 and 256, sliding windows, soft-capping, several sequences in a step, and a long context
(fewer queries an item)."""
from __future__ import annotations

import numpy as np
import pytest

from pypowerinfer import Llama
from pypowerinfer._ffi import check, ffi, lib
from pypowerinfer.model import NativeContext, NativeModel
from synthetic import write_llama_gguf
from test_kernels import IMPLS, impl_available


def attention(impl, tiled, q, k, v, w, lo, hi, scale):
    nq, hd = q.shape
    n, stride = k.shape
    scores, out = np.zeros((nq, n), np.float32), np.zeros((nq, hd), np.float32)
    check(lib.pi_kernel_attention_f16(IMPLS[impl], tiled, ffi.from_buffer("float[]", q), nq,
                                      ffi.from_buffer("uint16_t[]", k), ffi.from_buffer("uint16_t[]", v), stride, n, hd,
                                      scale, ffi.from_buffer("float[]", scores), ffi.from_buffer("float[]", w),
                                      ffi.from_buffer("int32_t[]", lo), ffi.from_buffer("int32_t[]", hi),
                                      ffi.from_buffer("float[]", out)))
    return scores, out


@pytest.mark.parametrize("impl", ["ref", "avx2", "avx512"])
@pytest.mark.parametrize("hd", [8, 24, 40, 64, 72, 128, 256, 264, 1088])
@pytest.mark.parametrize("nq, n", [(1, 1), (3, 2), (7, 37), (32, 19), (30, 70), (5, 8), (9, 1100)])
def test_tile_ops_equal_each_query_alone(impl, hd, nq, n):
    """Query and key counts on and off the tiles' (AVX-512 scores: 2 queries x 4 keys), head sizes
    off 16 and 32 and past AVX-512's block of keys in float (1088), rows a wider stride
    apart (a head's slice of the cache), each query its own range of rows: the tile ops equal the
    one-query ops bit for bit, and the float64 sums to float rounding; the SIMD tiers near the scalar
    one (AVX-512's scores convert a block of keys to float first, its sums are AVX2's)."""
    if not impl_available(impl):
        pytest.skip(f"{impl} not available on this CPU")
    rng = np.random.default_rng(hd * 100 + n)
    stride = 3 * hd + 8
    q = rng.standard_normal((nq, hd)).astype(np.float32)
    k = rng.standard_normal((n, stride)).astype(np.float16)
    v = rng.standard_normal((n, stride)).astype(np.float16)
    w = rng.random((nq, n)).astype(np.float32)
    lo = rng.integers(0, n, nq).astype(np.int32)
    hi = np.array([rng.integers(a, n) for a in lo], np.int32)
    scale = 1.0 / np.sqrt(hd)
    scores, out = attention(impl, 1, q, k.view(np.uint16), v.view(np.uint16), w, lo, hi, scale)
    alone = attention(impl, 0, q, k.view(np.uint16), v.view(np.uint16), w, lo, hi, scale)
    np.testing.assert_array_equal(scores, alone[0])
    np.testing.assert_array_equal(out, alone[1])
    k64, v64 = k[:, :hd].astype(np.float64), v[:, :hd].astype(np.float64)
    np.testing.assert_allclose(scores, q.astype(np.float64) @ k64.T * scale, rtol=1e-5, atol=1e-5 * np.sqrt(hd))
    mask = (np.arange(n) >= lo[:, None]) & (np.arange(n) <= hi[:, None])
    np.testing.assert_allclose(out, (w * mask) @ v64, rtol=1e-5, atol=1e-5 * n)
    if impl != "ref":
        ref = attention("ref", 1, q, k.view(np.uint16), v.view(np.uint16), w, lo, hi, scale)
        np.testing.assert_allclose(scores, ref[0], rtol=1e-5, atol=1e-6 * np.sqrt(hd))
        np.testing.assert_allclose(out, ref[1], rtol=1e-5, atol=1e-6 * n)


# ggml_vec_dot_f16's lanes per tier: its scalar build sums everything in double; AVX2 and
# AVX-512 fill 4 accumulators of 8 / 16 lanes a step, added (0 + 2) + (1 + 3), then the lanes
LANES = {"ref": 0, "avx2": 8, "avx512": 16}


def ggml_dot_f16(x, y, epr, pad=False):
    """ggml_vec_dot_f16 of f16 values x, y (float32 arrays): its leftovers in double, or with pad
    (the weights of llama.cpp's cache, padded to 256 cells by zeros) zeros completing the last step"""
    f = np.float32
    step = 4 * epr
    if pad and epr:
        m = -len(x) % step
        x, y = np.concatenate([x, np.zeros(m, f)]), np.concatenate([y, np.zeros(m, f)])
    full = len(x) // step * step if epr else 0
    acc = np.zeros(max(step, 1), f)
    for i in range(0, full, max(step, 1)):  # fma: the products of f16 values are exact
        acc = (x[i:i + step].astype(np.float64) * y[i:i + step] + acc).astype(f)
    s = f(0)
    if epr:
        a = acc.reshape(4, epr)
        r = (a[0] + a[2]) + (a[1] + a[3])
        if epr == 16:  # GCC's _mm512_reduce_add_ps: halves, halves, then (0 + 2) + (1 + 3)
            r = r[:8] + r[8:]
            r = r[:4] + r[4:]
            r = r[:2] + r[2:]
            s = r[0] + r[1]
        else:  # GGML_F32x8_REDUCE: halves, then (0 + 1) + (2 + 3)
            r = r[:4] + r[4:]
            s = (r[0] + r[1]) + (r[2] + r[3])
    total = np.float64(s)
    for i in range(full, len(x)):
        total += np.float64(f(x[i] * y[i]))
    return f(total)


@pytest.mark.parametrize("impl", ["ref", "avx2", "avx512"])
@pytest.mark.parametrize("hd", [32, 64, 72, 128])
@pytest.mark.parametrize("n, nq", [(1, 1), (37, 1), (130, 1), (130, 6), (1100, 5)])
def test_f16_sums_are_ggml_vec_dot_f16s(impl, hd, n, nq):
    """Each tier's scores and mix are llama.cpp's (ggml's build for that instruction set) bit for
    bit: q . k as ggml_vec_dot_f16 over the head, and each output value as ggml_vec_dot_f16 of V's
    transposed row with the f16 weights over the (zero-padded) positions. Several queries are a
    causal block's (their rows start together, each ends at its own), taken as one tile; 1100
    positions are three of AVX-512's windows of V."""
    if not impl_available(impl):
        pytest.skip(f"{impl} not available on this CPU")
    rng = np.random.default_rng(hd * 1000 + n + nq)
    stride = 2 * hd
    q = rng.standard_normal((nq, hd)).astype(np.float16).astype(np.float32)
    k = rng.standard_normal((n, stride)).astype(np.float16)
    v = rng.standard_normal((n, stride)).astype(np.float16)
    w = (rng.random((nq, n)) / n).astype(np.float16).astype(np.float32)
    lo = np.zeros(nq, np.int32)
    hi = np.maximum(n - 1 - np.arange(nq) * 7, 0).astype(np.int32)
    scale = np.float32(0.125)
    scores, out = attention(impl, 1, q, k.view(np.uint16), v.view(np.uint16), w, lo, hi, scale)
    epr = LANES[impl]
    kf, vf = k[:, :hd].astype(np.float32), v[:, :hd].astype(np.float32)
    for r in range(nq):
        want_scores = np.array([ggml_dot_f16(kf[p], q[r], epr) * scale for p in range(n)], np.float32)
        rows = hi[r] + 1
        want_out = np.array([ggml_dot_f16(vf[:rows, i], w[r, :rows], epr, pad=True) for i in range(hd)], np.float32)
        np.testing.assert_array_equal(scores[r], want_scores)
        np.testing.assert_array_equal(out[r], want_out)


def logits(path, tokens, n_batch, impl=0, n_ctx=128):
    with Llama(str(path), n_ctx=n_ctx, n_batch=n_batch, logits_all=True, verbose=False, kernel_impl=impl,
               n_threads=2, n_threads_batch=2) as llm:
        llm.eval(tokens)
        return np.array(llm.scores[: len(tokens)])


# (n_embd, n_head, n_head_kv): head_dim 64 in groups of 1, 2, 3 and 4 heads; head_dim 128 and 256
SHAPES = [(256, 4, 4), (256, 4, 2), (384, 6, 2), (256, 4, 1), (256, 2, 1), (512, 2, 1)]
TOKENS = list(range(3, 280, 4))  # 70: several blocks of every group size


@pytest.mark.parametrize("impl", [1, 2, 3])
@pytest.mark.parametrize("extra", [{}, {"llama.attention.sliding_window": 7},
                                   {"llama.attn_logit_softcapping": 0.5}], ids=["causal", "window", "softcap"])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"d{e}h{h}kv{k}" for e, h, k in SHAPES])
def test_a_prompt_in_one_step_equals_its_tokens_one_at_a_time(shape, extra, impl, tmp_path):
    if impl > 1 and not impl_available({2: "avx2", 3: "avx512"}[impl]):
        pytest.skip("this tier is not available on this CPU")
    n_embd, n_head, n_head_kv = shape
    path = write_llama_gguf(tmp_path / "m.gguf", weight_type="F32", n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv,
                            extra_kv=extra)
    np.testing.assert_array_equal(logits(path, TOKENS, 128, impl), logits(path, TOKENS, 1, impl))


def test_a_long_context_takes_fewer_queries_an_item(tmp_path):
    """n_ctx 131072 leaves 2 queries a thread's scores: a group of 4 heads in two items a token."""
    path = write_llama_gguf(tmp_path / "m.gguf", weight_type="F32", n_embd=256, n_head=4, n_head_kv=1,
                            n_ctx_train=131072)
    tokens = TOKENS[:40]
    np.testing.assert_array_equal(logits(path, tokens, 64, n_ctx=131072), logits(path, tokens, 1, n_ctx=131072))


def test_smollm2_prompt_equals_its_tokens_one_at_a_time(smollm2_path):
    tokens = list(range(100, 190))
    np.testing.assert_array_equal(logits(smollm2_path, tokens, 128), logits(smollm2_path, tokens, 1))


def test_several_long_sequences_in_one_step_get_their_solo_logits(smollm2_path):
    """Prompts of 45, 12 and 70 tokens in one step, each sequence in blocks of its own: the last
    token's logits of each equal its one-token decode alone."""
    model = NativeModel(str(smollm2_path))
    rng = np.random.default_rng(5)
    prompts = [rng.integers(1, model.info.n_vocab, n).astype(np.int32) for n in (45, 12, 70)]
    ctx = NativeContext(model, n_ctx=512, n_batch=256, n_threads=2, n_threads_batch=2, logits_all=False,
                        n_logits=3, n_seq_max=3)
    rows = [(int(t[i]), i, s, int(i == len(t) - 1)) for s, t in enumerate(prompts) for i in range(len(t))]
    tok, pos, seq, flag = (np.array(x, dt) for x, dt in zip(zip(*rows), (np.int32, np.int32, np.int32, np.int8)))
    ctx.decode_batch(tok, pos, seq, flag)
    got = np.array([ctx.logits[s].copy() for s in range(3)])
    for s, t in enumerate(prompts):
        alone = NativeContext(model, n_ctx=512, n_batch=1, n_threads=2, n_threads_batch=2, logits_all=False,
                              n_logits=1, n_seq_max=1)
        for i in range(len(t)):
            alone.decode(t[i: i + 1], i)
        np.testing.assert_array_equal(got[s], alone.logits[0])
