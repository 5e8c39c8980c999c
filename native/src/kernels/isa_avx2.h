/* isa_avx2.h - the AVX2 tier's (avx2.c) own part of the walks in walk.h: the tile shape, the
 * integer dot, the float tile and the axpy block loop, over simd.h's per-type decoding.
 *
 * Block formats use simd.h's weight blocks with vpmaddubsw + vpmaddwd as the integer dot;
 * Q8_0 weights stay signed and use the sign trick. A tile is 4 rows x 2 tokens (4 x 1 in
 * decode): 8 accumulators keep both FMA pipes busy and, with 16 ymm registers, the spills
 * stay cheap reloads. Float rows hand their last n % 8 weights to the reference.
 *
 * axpy_rows (the sparse FFN's down projection) sums 4 rows per pass over y, a block's 32 weights
 * as four ymm of floats (simd.h's block_q) times the precomputed a d. */
#ifndef PI_KERNELS_ISA_AVX2_H
#define PI_KERNELS_ISA_AVX2_H
#include "simd.h"

enum { TILE_R = 4, TILE_T = 2 }; /* rows and tokens per full tile */

/* Each dword lane of init plus the products of its 4 unsigned w and signed x bytes: vpmaddubsw
 * adds adjacent pairs into int16 (at most 2 * 128 * 127, which fits), vpmaddwd with ones widens
 * those to dwords. */
INLINE __m256i lane_isum(__m256i init, __m256i w, __m256i x) {
    return _mm256_add_epi32(init, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
}

/* ---- float matmul ---- */

/* The last n % 8 weights of each row go to the reference. */
INLINE void tile_floats(int type, int R, int T, const uint8_t *const *rows, const uintptr_t *ahead, pi_act x,
                        int t0, float *Y, int y_stride) {
    const float *xs[MAX_TILE_TOKENS];
    __m256 acc[MAX_TILE_ROWS][MAX_TILE_TOKENS];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) xs[t] = x.f + (size_t)(t0 + t) * x.n;
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    const int n8 = x.n & ~7;
    for (int i = 0; i < n8; i += 8) {
        __m256 xv[MAX_TILE_TOKENS];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) xv[t] = act_as_weight_type8(type, _mm256_loadu_ps(xs[t] + i));
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            _mm_prefetch((const char *)(ahead[r] + (size_t)i * float_bytes(type)), _MM_HINT_T1);
            const __m256 w = load_float8(type, rows[r], i);
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) acc[r][t] = _mm256_fmadd_ps(w, xv[t], acc[r][t]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            Y[(size_t)t * y_stride + r] = hsum8(acc[r][t]) + pi_ref_dot_floats(type, rows[r], xs[t], n8, x.n);
}

/* ---- axpy over rows ---- */

/* Four ymm of y per block, each row's weights from block_q(); the FMAs take broadcast loads of
 * the precomputed scales. */
INLINE void axpy_blocks(int type, int R, const uint8_t *const *rows, const uintptr_t *ahead, const axpy_scales *sc,
                        float *y, int b0, int nb) {
    const size_t bb = block_bytes(type);
    for (int i = 0; i < nb; i++) {
        const size_t b = (size_t)(b0 + i);
        float *yb = y + b * QK;
        __m256 acc[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) acc[k] = _mm256_loadu_ps(yb + 8 * k);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const uint8_t *block = rows[r] + b * bb;
            _mm_prefetch((const char *)(ahead[r] + b * bb), _MM_HINT_T1);
            __m256 q[4];
            block_q(type, block, q);
            const __m256 ad = _mm256_set1_ps(sc->s[r][2 * i]);
            const __m256 adh = high_scale(type) != 1.0f ? _mm256_set1_ps(sc->sh[r][2 * i]) : ad;
            acc[0] = _mm256_fmadd_ps(q[0], ad, acc[0]);
            acc[1] = _mm256_fmadd_ps(q[1], ad, acc[1]);
            acc[2] = _mm256_fmadd_ps(q[2], adh, acc[2]);
            acc[3] = _mm256_fmadd_ps(q[3], adh, acc[3]);
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) _mm256_storeu_ps(yb + 8 * k, acc[k]);
    }
}

#endif
