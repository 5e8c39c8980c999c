/* group_tiles.h - the SIMD tiers' matmul over grouped weights (row_groups.c's layout): a tile of one
 * group's 16 rows by up to 4 tokens, and the walk over groups and token tiles.
 *
 * Of the 32-weight formats only Q4_0 is grouped: llama.cpp sums it as one float per row, an FMA
 * per block (pi_dot_order's PI_DOT_BLOCKS), which a group does for 16 rows in one vector. The
 * others it sums in 8 lanes per row (PI_DOT_LANES), float work a group cannot share; they take
 * the row-major tiles (walk.h). In a tile each 64-byte load of quants holds 4 bytes of every
 * row, and one integer dot against 4 broadcast activation bytes advances all 16 rows: per block
 * and token that is 8 dots (on AVX2, 8 per ymm half of 8 rows, 2 instructions each), the stored
 * offset of 8 taken off in integers (8 * sum(qx), exact), one conversion and one FMA,
 * y += isum (d dx). The K-quants' tile (kgroups.h) takes the same walk.
 * Private to native/src/kernels. */
#ifndef PI_KERNELS_GROUP_TILES_H
#define PI_KERNELS_GROUP_TILES_H
#include "simd.h"

enum {
    GROUP_TOKENS = 4,         /* tokens per tile */
    GROUP_AHEAD = 16384       /* bytes ahead of a streaming tile to prefetch: DRAM latency at full bandwidth */
};

#include "kgroups.h"

/* Where a Q4_0 group block keeps its quants: after the 16 rows' d. */
enum { GROUP_QS = KG(q4_0, qs) };

#if defined(__AVX512VNNI__)

/* The 8 weight vectors of group block p: w[k] holds weights 4k .. 4k + 3 of each row, q + 8. */
INLINE void group_weights(const uint8_t *p, __m512i w[8]) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const __m512i v = _mm512_loadu_si512(p + GROUP_QS + 64 * k);
        w[k] = _mm512_and_si512(v, m4);
        w[k + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
}

/* sum((q - 8) * qx) of each row over one block, in two chains of 4 dots so that their latencies
 * overlap */
INLINE __m512i group_isum(const __m512i w[8], const block_q8x *x) {
    const uint8_t *xq = (const uint8_t *)x->qs;
    __m512i a = _mm512_set1_epi32(-8 * x->sum), c = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        a = _mm512_dpbusd_epi32(a, w[k], _mm512_set1_epi32((int)load_u32(xq + 4 * k)));
        c = _mm512_dpbusd_epi32(c, w[k + 4], _mm512_set1_epi32((int)load_u32(xq + 16 + 4 * k)));
    }
    return _mm512_add_epi32(a, c);
}

/* Y[t * y_stride + r] for the group's 16 rows and T tokens from t0; a non-zero `ahead` is the
 * address to prefetch, advancing with the blocks. */
INLINE void group_tile(int T, const uint8_t *group, uintptr_t ahead, pi_act x, int t0, float *Y, int y_stride) {
    const size_t gbb = PI_GROUP_ROWS * sizeof(block_q4_0);
    const int nb = x.n / QK;
    const block_q8x *xs[GROUP_TOKENS];
    __m512 acc[GROUP_TOKENS];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        xs[t] = x.q + (size_t)(t0 + t) * nb;
        acc[t] = _mm512_setzero_ps();
    }
    for (int b = 0; b < nb; b++) {
        const uint8_t *p = group + (size_t)b * gbb;
        if (ahead)
            for (size_t off = 0; off < gbb; off += 64) _mm_prefetch((const char *)(ahead + b * gbb + off), _MM_HINT_T1);
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        __m512i w[8];
        group_weights(p, w);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const block_q8x *xb = xs[t] + b;
            const __m512 f = _mm512_cvtepi32_ps(group_isum(w, xb));
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(xb->d)), f, acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) _mm512_storeu_ps(Y + (size_t)t * y_stride, acc[t]);
}

#else /* AVX2: the group as two halves of 8 rows, bytes 0-31 and 32-63 of each 64-byte chunk */

/* w[k]: weights 4k .. 4k + 3 of each row of half h of group block p, q + 8 */
INLINE void half_weights(const uint8_t *p, int h, __m256i w[8]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(p + GROUP_QS + 64 * k + 32 * h));
        w[k] = _mm256_and_si256(v, m4);
        w[k + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
}

/* sum((q - 8) * qx) of each row of a half over one block. The nibbles' 8 pair sums fit int16
 * (8 x 2 x 15 x 127 < 32768) and widen once. */
INLINE __m256i half_isum(const __m256i w[8], const block_q8x *x) {
    const uint8_t *xq = (const uint8_t *)x->qs;
    __m256i s16 = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(w[k], _mm256_set1_epi32((int)load_u32(xq + 4 * k))));
    return _mm256_sub_epi32(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)), _mm256_set1_epi32(8 * x->sum));
}

INLINE void group_tile(int T, const uint8_t *group, uintptr_t ahead, pi_act x, int t0, float *Y, int y_stride) {
    const size_t gbb = PI_GROUP_ROWS * sizeof(block_q4_0);
    const int nb = x.n / QK;
    const block_q8x *xs[GROUP_TOKENS];
    __m256 acc[2][GROUP_TOKENS];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        xs[t] = x.q + (size_t)(t0 + t) * nb;
        acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    }
    for (int b = 0; b < nb; b++) {
        const uint8_t *p = group + (size_t)b * gbb;
        if (ahead)
            for (size_t off = 0; off < gbb; off += 64) _mm_prefetch((const char *)(ahead + b * gbb + off), _MM_HINT_T1);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h)));
            __m256i w[8];
            half_weights(p, h, w);
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                const block_q8x *xb = xs[t] + b;
                const __m256 f = _mm256_cvtepi32_ps(half_isum(w, xb));
                acc[h][t] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(xb->d)), f, acc[h][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        _mm256_storeu_ps(Y + (size_t)t * y_stride, acc[0][t]);
        _mm256_storeu_ps(Y + (size_t)t * y_stride + 8, acc[1][t]);
    }
}

#endif

/* The tile of the type's family: Q4_0's or the K-quants' super-blocks (kgroups.h). */
INLINE void any_tile(int type, int T, const uint8_t *group, uintptr_t ahead, pi_act x, int t0, float *Y, int y_stride) {
    if (pi_type_is_kquant((uint32_t)type)) kgroup_tile(type, T, group, ahead, x, t0, Y, y_stride);
    else group_tile(T, group, ahead, x, t0, Y, y_stride);
}

/* any_tile() with T (1 <= T <= GROUP_TOKENS) a constant in each call */
INLINE void group_tokens(int type, int T, const uint8_t *group, uintptr_t ahead, pi_act x, int t0, float *Y,
                         int y_stride) {
    if (T == 4) any_tile(type, 4, group, ahead, x, t0, Y, y_stride);
    else if (T == 3) any_tile(type, 3, group, ahead, x, t0, Y, y_stride);
    else if (T == 2) any_tile(type, 2, group, ahead, x, t0, Y, y_stride);
    else any_tile(type, 1, group, ahead, x, t0, Y, y_stride);
}

/* Groups outer, token tiles inner, so that a group stays in L1 while every token tile passes
 * over it. The groups of a call are one contiguous run of bytes, which the first token tile
 * streams, prefetching GROUP_AHEAD bytes on; the later tiles find the group in cache. */
INLINE void matmul_grouped(int type, const void *W, size_t row_bytes, const int32_t *idx, int r0, int nr, pi_act x,
                           int nt, float *Y, int y_stride) {
    const size_t group_bytes = PI_GROUP_ROWS * row_bytes;
    const uint8_t *first = (const uint8_t *)W + (size_t)r0 * row_bytes;
    (void)idx;
    for (int g = 0; g < nr / PI_GROUP_ROWS; g++) {
        const uint8_t *group = first + (size_t)g * group_bytes;
        for (int t = 0; t < nt;) {
            const int T = nt - t < GROUP_TOKENS ? nt - t : GROUP_TOKENS;
            const uintptr_t ahead = t == 0 ? (uintptr_t)group + GROUP_AHEAD : 0;
            group_tokens(type, T, group, ahead, x, t, Y + (size_t)t * y_stride + (size_t)g * PI_GROUP_ROWS, y_stride);
            t += T;
        }
    }
}

#endif
