/* groups.h - the SIMD tiers' matmul over grouped weights (groups.c's layout): a tile of one
 * group's 16 rows by up to 4 tokens, and the walk over groups and token tiles.
 *
 * In a tile each 64-byte load of quants holds 4 bytes of every row, and one integer dot against
 * 4 broadcast activation bytes advances all 16 rows: per block and token that is 8 dots (on
 * AVX2, 8 per ymm half of 8 rows, 2 instructions each) and, for all 16 rows at once, the offset
 * of the stored quants taken off in integers (offset * sum(qx), exact), one conversion and one
 * FMA, y += (d dx) isum, plus Q4_1's m sx with sx = dx sum(qx). The row-major tiles (walk.h) do
 * that float work once per row; here once per 16 rows. The K-quants' tile (kgroups.h) takes the
 * same walk.
 * Private to native/src/kernels. */
#ifndef PI_KERNELS_GROUPS_H
#define PI_KERNELS_GROUPS_H
#include "simd.h"

enum {
    GROUP_TOKENS = 4,         /* tokens per tile */
    GROUP_AHEAD = 16384       /* bytes ahead of a streaming tile to prefetch: DRAM latency at full bandwidth */
};

#include "kgroups.h"

/* Where a 32-weight format's group block keeps its quants, and the 5-bit formats' masks of bit 4:
 * inline, so that each type's tile folds them to constants. */
INLINE size_t group_qs(int type) {
    switch (type) {
    case PI_TYPE_Q4_0: return KG(q4_0, qs);
    case PI_TYPE_Q4_1: return KG(q4_1, qs);
    case PI_TYPE_Q5_0: return KG(q5_0, qs);
    case PI_TYPE_Q5_1: return KG(q5_1, qs);
    case PI_TYPE_Q8_0: return KG(q8_0, qs);
    default: PI_BAD_TYPE();
    }
}

INLINE size_t group_qh(int type) {
    switch (type) {
    case PI_TYPE_Q5_0: return KG(q5_0, qh);
    case PI_TYPE_Q5_1: return KG(q5_1, qh);
    default: PI_BAD_TYPE();
    }
}

#if defined(__AVX512VNNI__)

/* The 8 weight vectors of group block p: w[k] holds weights 4k .. 4k + 3 of each row, unsigned. */
INLINE void group_weights(int type, const uint8_t *p, __m512i w[8]) {
    const uint8_t *q = p + group_qs(type);
    if (type == PI_TYPE_Q8_0) {
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) w[k] = _mm512_xor_si512(_mm512_loadu_si512(q + 64 * k), _mm512_set1_epi8((char)0x80));
        return;
    }
    const __m512i m4 = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const __m512i v = _mm512_loadu_si512(q + 64 * k);
        w[k] = _mm512_and_si512(v, m4);
        w[k + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
    if (!is_q5(type)) return;
    const uint8_t *masks = p + group_qh(type); /* bit 4 of each weight, a mask per w[k] */
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) w[k] = _mm512_mask_add_epi8(w[k], load_u64(masks + 8 * k), w[k], _mm512_set1_epi8(16));
}

/* sum((q - offset) * qx) of each row over one block, in two chains of 4 dots so that their
 * latencies overlap */
INLINE __m512i group_isum(int type, const __m512i w[8], const block_q8x *x) {
    const uint8_t *xq = (const uint8_t *)x->qs;
    __m512i a = _mm512_set1_epi32(-weight_offset(type) * x->sum), c = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        a = _mm512_dpbusd_epi32(a, w[k], _mm512_set1_epi32((int)load_u32(xq + 4 * k)));
        c = _mm512_dpbusd_epi32(c, w[k + 4], _mm512_set1_epi32((int)load_u32(xq + 16 + 4 * k)));
    }
    return _mm512_add_epi32(a, c);
}

/* Y[t * y_stride + r] for the group's 16 rows and T tokens from t0; a non-zero `ahead` is the
 * address to prefetch, advancing with the blocks. */
INLINE void group_tile(int type, int T, const uint8_t *group, uintptr_t ahead, pi_act x, int t0, float *Y,
                       int y_stride) {
    const size_t gbb = PI_GROUP_ROWS * block_bytes(type);
    const int nb = x.n / QK;
    const block_q8x *xs[GROUP_TOKENS];
    __m512 acc[GROUP_TOKENS], mins[GROUP_TOKENS]; /* the m sx terms apart, as llama.cpp sums them */
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        xs[t] = x.q + (size_t)(t0 + t) * nb;
        acc[t] = mins[t] = _mm512_setzero_ps();
    }
    for (int b = 0; b < nb; b++) {
        const uint8_t *p = group + (size_t)b * gbb;
        if (ahead)
            for (size_t off = 0; off < gbb; off += 64) _mm_prefetch((const char *)(ahead + b * gbb + off), _MM_HINT_T1);
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        const __m512 m = has_min(type) ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 2 * PI_GROUP_ROWS)))
                                       : _mm512_setzero_ps();
        __m512i w[8];
        group_weights(type, p, w);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const block_q8x *xb = xs[t] + b;
            const __m512 f = _mm512_cvtepi32_ps(group_isum(type, w, xb));
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(xb->d)), f, acc[t]);
            if (has_min(type)) mins[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(xb->s), mins[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) _mm512_storeu_ps(Y + (size_t)t * y_stride, _mm512_add_ps(acc[t], mins[t]));
}

#else /* AVX2: the group as two halves of 8 rows, bytes 0-31 and 32-63 of each 64-byte chunk */

/* w[k]: weights 4k .. 4k + 3 of each row of half h of group block p; Q8_0 stays signed
 * (weight_offset() says why) */
INLINE void half_weights(int type, const uint8_t *p, int h, __m256i w[8]) {
    const uint8_t *q = p + group_qs(type);
    if (type == PI_TYPE_Q8_0) {
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) w[k] = _mm256_loadu_si256((const __m256i *)(q + 64 * k + 32 * h));
        return;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(q + 64 * k + 32 * h));
        w[k] = _mm256_and_si256(v, m4);
        w[k + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
    if (!is_q5(type)) return;
    const uint8_t *masks = p + group_qh(type); /* a mask per w[k]; this half's 32 bits */
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) w[k] = add_bit4(w[k], (uint32_t)(load_u64(masks + 8 * k) >> (32 * h)));
}

/* sum((q - offset) * qx) of each row of a half over one block. The nibbles' 8 pair sums fit
 * int16 (8 x 2 x 15 x 127 < 32768) and widen once; the 5-bit quants' (2 x 31 x 127 each) widen
 * each, as Q8_0's, which take the sign trick. */
INLINE __m256i half_isum(int type, const __m256i w[8], const block_q8x *x) {
    const uint8_t *xq = (const uint8_t *)x->qs;
    const __m256i ones = _mm256_set1_epi16(1);
    if (type == PI_TYPE_Q8_0 || is_q5(type)) {
        __m256i s = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m256i xb = _mm256_set1_epi32((int)load_u32(xq + 4 * k));
            const __m256i p = type == PI_TYPE_Q8_0 ? _mm256_maddubs_epi16(_mm256_abs_epi8(w[k]), _mm256_sign_epi8(xb, w[k]))
                                                   : _mm256_maddubs_epi16(w[k], xb);
            s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
        }
        return _mm256_sub_epi32(s, _mm256_set1_epi32(weight_offset(type) * x->sum));
    }
    __m256i s16 = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(w[k], _mm256_set1_epi32((int)load_u32(xq + 4 * k))));
    return _mm256_sub_epi32(_mm256_madd_epi16(s16, ones), _mm256_set1_epi32(weight_offset(type) * x->sum));
}

INLINE void group_tile(int type, int T, const uint8_t *group, uintptr_t ahead, pi_act x, int t0, float *Y,
                       int y_stride) {
    const size_t gbb = PI_GROUP_ROWS * block_bytes(type);
    const int nb = x.n / QK;
    const block_q8x *xs[GROUP_TOKENS];
    __m256 acc[2][GROUP_TOKENS], mins[2][GROUP_TOKENS];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        xs[t] = x.q + (size_t)(t0 + t) * nb;
        acc[0][t] = acc[1][t] = mins[0][t] = mins[1][t] = _mm256_setzero_ps();
    }
    for (int b = 0; b < nb; b++) {
        const uint8_t *p = group + (size_t)b * gbb;
        if (ahead)
            for (size_t off = 0; off < gbb; off += 64) _mm_prefetch((const char *)(ahead + b * gbb + off), _MM_HINT_T1);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h)));
            const __m256 m = has_min(type) ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 2 * PI_GROUP_ROWS + 16 * h)))
                                           : _mm256_setzero_ps();
            __m256i w[8];
            half_weights(type, p, h, w);
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                const block_q8x *xb = xs[t] + b;
                const __m256 f = _mm256_cvtepi32_ps(half_isum(type, w, xb));
                acc[h][t] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(xb->d)), f, acc[h][t]);
                if (has_min(type)) mins[h][t] = _mm256_fmadd_ps(m, _mm256_set1_ps(xb->s), mins[h][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        _mm256_storeu_ps(Y + (size_t)t * y_stride, _mm256_add_ps(acc[0][t], mins[0][t]));
        _mm256_storeu_ps(Y + (size_t)t * y_stride + 8, _mm256_add_ps(acc[1][t], mins[1][t]));
    }
}

#endif

/* The tile of the type's family: 32-weight blocks or K-quant super-blocks (kgroups.h). */
INLINE void any_tile(int type, int T, const uint8_t *group, uintptr_t ahead, pi_act x, int t0, float *Y, int y_stride) {
    if (pi_type_is_kquant((uint32_t)type)) kgroup_tile(type, T, group, ahead, x, t0, Y, y_stride);
    else group_tile(type, T, group, ahead, x, t0, Y, y_stride);
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
