/* isa_avx512.h - the AVX-512 tier's (avx512.c) own part of the walks in walk.h: the tile shape,
 * the integer dot, the float tile and the axpy block loop, over simd.h's per-type decoding.
 *
 * Block formats use simd.h's weight blocks with vpdpbusd as the integer dot. That work is on
 * ymm, not zmm: a block is one ymm, and Zen 4 runs a zmm op as two ymm halves anyway.
 *
 * A matmul walks tiles of 4 rows x 4 tokens (4 x 1 in decode): each weight block is decoded
 * once per tile and each activation block loaded once per tile. Float weights (F32, F16, BF16)
 * take the same walk with zmm FMAs and masked loads for the row tail.
 *
 * axpy_rows (the sparse FFN's down projection) is float work, on zmm for the block formats:
 * see axpy_blocks below. */
#ifndef PI_KERNELS_ISA_AVX512_H
#define PI_KERNELS_ISA_AVX512_H
#include "simd.h"

enum { TILE_R = 4, TILE_T = 4 }; /* rows and tokens per full tile */

/* Each dword lane of init plus the products of its 4 unsigned w and signed x bytes, in one
 * instruction. */
INLINE __m256i lane_isum(__m256i init, __m256i w, __m256i x) { return _mm256_dpbusd_epi32(init, w, x); }

/* ---- float matmul ---- */

/* One 16-wide step of an R x T float tile; the last step of a row passes a partial mask. */
INLINE void float_step(int type, int R, int T, const uint8_t *const *rows, const uintptr_t *ahead,
                       const float *const *xs, int i, __mmask16 keep, __m512 acc[MAX_TILE_ROWS][MAX_TILE_TOKENS]) {
    __m512 x[MAX_TILE_TOKENS];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) x[t] = act_as_weight_type16(type, _mm512_maskz_loadu_ps(keep, xs[t] + i));
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        _mm_prefetch((const char *)(ahead[r] + (size_t)i * float_bytes(type)), _MM_HINT_T1);
        const __m512 w = load_float16(type, rows[r], i, keep);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) acc[r][t] = _mm512_fmadd_ps(w, x[t], acc[r][t]);
    }
}

/* dot(an F32 or F16 row, x) as ggml's AVX-512 vec_dot_f32 / vec_dot_f16 sum it, the order of
 * llama.cpp's one-token path: 4 accumulators over steps of 64 values, added (0 + 2) + (1 + 3),
 * then across lanes; the values past the last whole step added one at a time, in float (F32, an
 * FMA each, as GCC contracts ggml's loop) or in double (F16). */
INLINE float ggml_float_dot(int type, const uint8_t *row, const float *x, int n) {
    __m512 s[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps() };
    const int np = n & ~63;
    for (int i = 0; i < np; i += 64)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            s[j] = _mm512_fmadd_ps(load_float16(type, row, i + 16 * j, 0xffff),
                                   act_as_weight_type16(type, _mm512_loadu_ps(x + i + 16 * j)), s[j]);
    const float head = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s[0], s[2]), _mm512_add_ps(s[1], s[3])));
    if (type == PI_TYPE_F32) {
        float sum = head;
        for (int i = np; i < n; i++) sum = fmaf(((const float *)row)[i], x[i], sum);
        return sum;
    }
    double sum = head;
    for (int i = np; i < n; i++)
        sum += (double)(pi_fp16_to_f32(((const pi_fp16 *)row)[i]) * pi_act_as_weight_type(type, x[i]));
    return (float)sum;
}

INLINE void tile_floats(int type, int R, int T, const uint8_t *const *rows, const uintptr_t *ahead, pi_act x,
                        int t0, float *Y, int y_stride) {
    if (type != PI_TYPE_BF16) { /* ggml's AVX-512 BF16 dot (vdpbf16ps) is not followed: BF16 sums as below */
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int t = 0; t < T; t++)
                Y[(size_t)t * y_stride + r] = ggml_float_dot(type, rows[r], x.f + (size_t)(t0 + t) * x.n, x.n);
        return;
    }
    const float *xs[MAX_TILE_TOKENS];
    __m512 acc[MAX_TILE_ROWS][MAX_TILE_TOKENS];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) xs[t] = x.f + (size_t)(t0 + t) * x.n;
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= x.n; i += 16) float_step(type, R, T, rows, ahead, xs, i, 0xffff, acc);
    if (i < x.n) float_step(type, R, T, rows, ahead, xs, i, (__mmask16)((1u << (x.n - i)) - 1), acc);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) Y[(size_t)t * y_stride + r] = _mm512_reduce_add_ps(acc[r][t]);
}

/* ---- axpy over rows ---- */

/* Here the block loop is on zmm, two per block of y (simd.h's block_q16 says why); the scales
 * come as broadcast operands of the FMAs. */
INLINE void axpy_blocks(int type, int R, const uint8_t *const *rows, const uintptr_t *ahead, const axpy_scales *sc,
                        float *y, int b0, int nb) {
    const size_t bb = block_bytes(type);
    for (int i = 0; i < nb; i++) {
        const size_t b = (size_t)(b0 + i);
        float *yb = y + b * QK;
        __m512 acc0 = _mm512_loadu_ps(yb), acc1 = _mm512_loadu_ps(yb + 16);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const uint8_t *block = rows[r] + b * bb;
            _mm_prefetch((const char *)(ahead[r] + b * bb), _MM_HINT_T1);
            const float *sh = high_scale(type) != 1.0f ? sc->sh[r] : sc->s[r];
            __m512 q0, q1;
            block_q16(type, block, &q0, &q1);
            acc0 = _mm512_fmadd_ps(q0, _mm512_set1_ps(sc->s[r][2 * i]), acc0);
            acc1 = _mm512_fmadd_ps(q1, _mm512_set1_ps(sh[2 * i]), acc1);
        }
        _mm512_storeu_ps(yb, acc0);
        _mm512_storeu_ps(yb + 16, acc1);
    }
}

#endif
