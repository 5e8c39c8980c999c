/* avx512.c - AVX-512 (F/BW/VL/DQ/VNNI) kernels; this file is compiled for that set alone and
 * installed only when the CPU has it.
 *
 * Block formats work on pairs of 32-weight blocks. The weights are made unsigned bytes (an
 * offset the format already has: Q4_0 stores q + 8, Q5_0 q + 16; Q8_0 gets + 128 by flipping
 * the sign bit), vpdpbusd multiplies them with the signed activation bytes into dword lanes,
 * and the offset is taken back in integers by starting each lane at -offset * sum(x). Each
 * lane is then scaled by d_w * d_x of its block into a float accumulator; lanes are summed
 * once per output. The integer work is on ymm: Zen 4 runs a zmm op as two ymm halves, so
 * zmm buys nothing there, while ymm lets a pair's sums land in the lanes the scales need.
 *
 * A matmul walks tiles of R rows x T tokens (4x4 for prefill, 4x1 for decode): each weight
 * pair is decoded once per tile and each activation pair loaded once per tile. Float weights
 * (F32, F16, BF16) take the same walk with zmm FMAs and masked loads for the row tail. */
#include "simd.h"

enum { TILE_R = 4, TILE_T = 4 }; /* rows and tokens per full tile */

/* What the format adds to make its weights unsigned. */
INLINE int weight_offset(int type) {
    switch (type) {
    case PI_TYPE_Q4_0: return 8;
    case PI_TYPE_Q5_0: return 16;
    case PI_TYPE_Q8_0: return 128;
    default: return 0;
    }
}

/* ---- weight pairs ---- */

/* A pair of blocks a, b travels as two ymm: lo = [a 0-15, b 0-15] and hi = [a 16-31, b 16-31].
 * vpdpbusd of lo and then hi leaves 4 dword lanes of a and then 4 of b, so a pair costs what
 * one zmm would (this core runs zmm as two ymm halves) without any shuffle of the sums. */

/* A pair of weight blocks: 64 unsigned weights, the scales as [d0, m0, d1, m1] (m = 0 for the
 * formats without a minimum) and d spread over the lanes, [d0 x 4, d1 x 4]. */
typedef struct {
    __m256i lo, hi;
    __m128 dm;
    __m256 d8;
} wpair;

/* [lane 0 x 4, lane 2 x 4] of a 4-float vector: one block's value over its 4 dword lanes. */
INLINE __m256 spread_pair(__m128 v) {
    return _mm256_permutexvar_ps(_mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2), _mm256_castps128_ps256(v));
}

/* 16 bytes at p0 and 16 at p1 as one ymm. */
INLINE __m256i load_halves(const uint8_t *p0, const uint8_t *p1) {
    return _mm256_loadu2_m128i((const __m128i *)p1, (const __m128i *)p0);
}

/* Each block keeps weights 0-15 in the low nibbles of its 16 bytes and 16-31 in the high ones. */
INLINE void unpack_nibble_pair(wpair *w, const uint8_t *qs0, const uint8_t *qs1) {
    const __m256i v = load_halves(qs0, qs1), mask = _mm256_set1_epi8(0x0f);
    w->lo = _mm256_and_si256(v, mask);
    w->hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
}

/* The 5-bit formats: bit j of each block's qh word is bit 4 of its weight j; regrouped in the
 * pair's order the two words are byte masks over lo and hi. */
INLINE void add_high_bits(wpair *w, const uint8_t *qh0, const uint8_t *qh1) {
    const uint32_t ha = load_u32(qh0), hb = load_u32(qh1);
    const __m256i sixteen = _mm256_set1_epi8(16);
    w->lo = _mm256_mask_add_epi8(w->lo, (ha & 0xffff) | hb << 16, w->lo, sixteen);
    w->hi = _mm256_mask_add_epi8(w->hi, ha >> 16 | (hb & 0xffff0000u), w->hi, sixteen);
}

/* Q8_0: signed bytes made unsigned by flipping the sign bit (+128). */
INLINE void unsigned_byte_pair(wpair *w, const uint8_t *qs0, const uint8_t *qs1) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    w->lo = _mm256_xor_si256(load_halves(qs0, qs1), flip);
    w->hi = _mm256_xor_si256(load_halves(qs0 + 16, qs1 + 16), flip);
}

/* dm0/dm1: each block's fp16 d in the low half and m (or 0) in the high half. */
INLINE void set_scales(wpair *w, uint32_t dm0, uint32_t dm1) {
    w->dm = _mm_cvtph_ps(_mm_insert_epi32(_mm_cvtsi32_si128((int)dm0), (int)dm1, 1));
    w->d8 = spread_pair(w->dm);
}

INLINE wpair load_wpair(int type, const uint8_t *b0, const uint8_t *b1) {
    wpair w;
    switch (type) {
    case PI_TYPE_Q4_0:
        unpack_nibble_pair(&w, b0 + offsetof(block_q4_0, qs), b1 + offsetof(block_q4_0, qs));
        set_scales(&w, load_u16(b0), load_u16(b1));
        break;
    case PI_TYPE_Q4_1:
        unpack_nibble_pair(&w, b0 + offsetof(block_q4_1, qs), b1 + offsetof(block_q4_1, qs));
        set_scales(&w, load_u32(b0), load_u32(b1));
        break;
    case PI_TYPE_Q5_0:
        unpack_nibble_pair(&w, b0 + offsetof(block_q5_0, qs), b1 + offsetof(block_q5_0, qs));
        add_high_bits(&w, b0 + offsetof(block_q5_0, qh), b1 + offsetof(block_q5_0, qh));
        set_scales(&w, load_u16(b0), load_u16(b1));
        break;
    case PI_TYPE_Q5_1:
        unpack_nibble_pair(&w, b0 + offsetof(block_q5_1, qs), b1 + offsetof(block_q5_1, qs));
        add_high_bits(&w, b0 + offsetof(block_q5_1, qh), b1 + offsetof(block_q5_1, qh));
        set_scales(&w, load_u32(b0), load_u32(b1));
        break;
    default: /* PI_TYPE_Q8_0 */
        unsigned_byte_pair(&w, b0 + offsetof(block_q8_0, qs), b1 + offsetof(block_q8_0, qs));
        set_scales(&w, load_u16(b0), load_u16(b1));
        break;
    }
    return w;
}

/* ---- activation pairs ---- */

/* A pair of activation blocks in the same lo/hi order, [d0, s0, d1, s1], d spread over the
 * lanes, and the integer start of each lane's dot product, -offset * sum(x over the lane). */
typedef struct {
    __m256i lo, hi, base;
    __m128 ds;
    __m256 d8;
} xpair;

INLINE xpair load_xpair(const block_q8x *x, int offset) {
    xpair p;
    p.lo = load_halves((const uint8_t *)x[0].qs, (const uint8_t *)x[1].qs);
    p.hi = load_halves((const uint8_t *)x[0].qs + 16, (const uint8_t *)x[1].qs + 16);
    p.ds = _mm_loadh_pi(_mm_loadl_pi(_mm_setzero_ps(), (const __m64 *)&x[0].d), (const __m64 *)&x[1].d);
    p.d8 = spread_pair(p.ds);
    p.base = _mm256_setzero_si256();
    if (offset) {
        const __m256i off = _mm256_set1_epi8((char)offset);
        p.base = _mm256_sub_epi32(p.base, _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(p.base, off, p.lo), off, p.hi));
    }
    return p;
}

/* ---- block matmul ---- */

/* acc += the pair's dot product over [a x 4, b x 4] lanes; lanes 1 and 3 also take m * s. */
INLINE __m256 pair_dot(int type, const wpair *w, const xpair *x, __m256 acc) {
    const __m256i dot = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(x->base, w->lo, x->lo), w->hi, x->hi);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(w->d8, x->d8), acc);
    if (has_min(type))
        acc = _mm256_mask3_fmadd_ps(_mm256_castps128_ps256(w->dm), _mm256_castps128_ps256(x->ds), acc, 0x0a);
    return acc;
}

/* Y[t * y_stride + r] for R rows x T tokens from token t0 on, touching the rows `ahead` so they
 * arrive from DRAM while this tile computes. An odd last block goes to the reference. */
INLINE void tile_blocks(int type, int R, int T, const uint8_t *const *rows, const uintptr_t *ahead, pi_act x,
                        int t0, float *Y, int y_stride) {
    const size_t bb = block_bytes(type);
    const int nb = x.n / QK;
    const block_q8x *xs[TILE_T];
    __m256 acc[TILE_R][TILE_T];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) xs[t] = x.q + (size_t)(t0 + t) * nb;
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();

    for (int b = 0; b + 1 < nb; b += 2) {
        xpair xp[TILE_T];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) xp[t] = load_xpair(xs[t] + b, weight_offset(type));
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            for (size_t off = 0; off < 2 * bb; off += 64) _mm_prefetch((const char *)(ahead[r] + b * bb + off), _MM_HINT_T1);
            const wpair w = load_wpair(type, rows[r] + b * bb, rows[r] + (b + 1) * bb);
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) acc[r][t] = pair_dot(type, &w, &xp[t], acc[r][t]);
        }
    }

#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            float y = hsum8(acc[r][t]);
            if (nb & 1) y += pi_ref_dot_blocks(type, rows[r], xs[t], nb - 1, nb);
            Y[(size_t)t * y_stride + r] = y;
        }
}

/* ---- float matmul ---- */

/* 16 weights from i on, as floats; lanes outside `keep` read nothing and are 0. */
INLINE __m512 load_float16(int type, const void *row, int i, __mmask16 keep) {
    switch (type) {
    case PI_TYPE_F16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(keep, (const pi_fp16 *)row + i));
    case PI_TYPE_BF16: { /* bf16 is the top half of an f32 */
        const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(keep, (const pi_bf16 *)row + i));
        return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
    }
    default: return _mm512_maskz_loadu_ps(keep, (const float *)row + i); /* PI_TYPE_F32 */
    }
}

/* One 16-wide step of an R x T float tile; the last step of a row passes a partial mask. */
INLINE void float_step(int type, int R, int T, const uint8_t *const *rows, const uintptr_t *ahead,
                       const float *const *xs, int i, __mmask16 keep, __m512 acc[TILE_R][TILE_T]) {
    __m512 x[TILE_T];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) x[t] = _mm512_maskz_loadu_ps(keep, xs[t] + i);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        _mm_prefetch((const char *)(ahead[r] + (size_t)i * float_bytes(type)), _MM_HINT_T1);
        const __m512 w = load_float16(type, rows[r], i, keep);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) acc[r][t] = _mm512_fmadd_ps(w, x[t], acc[r][t]);
    }
}

INLINE void tile_floats(int type, int R, int T, const uint8_t *const *rows, const uintptr_t *ahead, pi_act x,
                        int t0, float *Y, int y_stride) {
    const float *xs[TILE_T];
    __m512 acc[TILE_R][TILE_T];
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

/* ---- the tile walk ---- */

INLINE void tile(int type, int R, int T, const uint8_t *const *rows, const uintptr_t *ahead, pi_act x,
                 int t0, float *Y, int y_stride) {
    if (is_float(type)) tile_floats(type, R, T, rows, ahead, x, t0, Y, y_stride);
    else tile_blocks(type, R, T, rows, ahead, x, t0, Y, y_stride);
}

INLINE void matmul(int type, const void *W, size_t row_bytes, const int32_t *idx, int r0, int nr, pi_act x,
                   int nt, float *Y, int y_stride) {
    walk_tiles(type, TILE_R, TILE_T, W, row_bytes, idx, r0, nr, x, nt, Y, y_stride);
}

/* ---- activations ---- */

/* x * id rounded to nearest even (the MXCSR default), clamped as the reference does. */
INLINE __m512i round_scaled(__m512 x, __m512 id) {
    const __m512 v = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(x, id), _mm512_set1_ps(-127.0f)),
                                   _mm512_set1_ps(127.0f));
    return _mm512_cvtps_epi32(v);
}

static void quantize_act(const float *x, block_q8x *y, int n) {
    const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (int b = 0; b < n / QK; b++, x += QK, y++) {
        const __m512 lo = _mm512_loadu_ps(x), hi = _mm512_loadu_ps(x + 16);
        /* max_ps returns its second operand when one is NaN, so NaNs drop out as in the reference. */
        const __m512 lane_max = _mm512_max_ps(_mm512_and_ps(hi, abs_mask),
                                              _mm512_max_ps(_mm512_and_ps(lo, abs_mask), _mm512_setzero_ps()));
        const float amax = _mm512_reduce_max_ps(lane_max);
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        const __m512i qlo = round_scaled(lo, _mm512_set1_ps(id)), qhi = round_scaled(hi, _mm512_set1_ps(id));
        _mm_storeu_si128((__m128i *)y->qs, _mm512_cvtepi32_epi8(qlo));
        _mm_storeu_si128((__m128i *)(y->qs + 16), _mm512_cvtepi32_epi8(qhi));
        y->d = d;
        y->s = d * (float)_mm512_reduce_add_epi32(_mm512_add_epi32(qlo, qhi));
    }
}

/* ---- the table ---- */

static void matmul_f32(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_F32, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_f16(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_F16, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_bf16(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_BF16, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_q4_0(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_Q4_0, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_q4_1(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_Q4_1, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_q5_0(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_Q5_0, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_q5_1(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_Q5_1, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_q8_0(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_Q8_0, W, rb, idx, r0, nr, x, nt, Y, ys); }

void pi_kernels_avx512(pi_kernels *k) {
    k->name = "avx512";
    k->quantize_act = quantize_act;
    k->matmul[PI_TYPE_F32] = matmul_f32;
    k->matmul[PI_TYPE_F16] = matmul_f16;
    k->matmul[PI_TYPE_BF16] = matmul_bf16;
    k->matmul[PI_TYPE_Q4_0] = matmul_q4_0;
    k->matmul[PI_TYPE_Q4_1] = matmul_q4_1;
    k->matmul[PI_TYPE_Q5_0] = matmul_q5_0;
    k->matmul[PI_TYPE_Q5_1] = matmul_q5_1;
    k->matmul[PI_TYPE_Q8_0] = matmul_q8_0;
}
