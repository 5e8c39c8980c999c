/* simd.h - what avx2.c and avx512.c share, compiled into each under its own flags: the per-type
 * facts the kernels branch on (folded at compile time, the type being a constant wherever
 * these are inlined), the decoding of block pairs, the block tile and the tile walk.
 *
 * Block formats work on pairs of 32-weight blocks a, b held as two ymm, lo = [a 0-15, b 0-15]
 * and hi = [a 16-31, b 16-31]: the two halves' products summed per dword lane leave 4 lanes of
 * a and then 4 of b, so a pair's float work is one ymm and needs no shuffle of the sums. The
 * weights are unsigned bytes (an offset the formats already have: Q4_0 stores q + 8, Q5_0
 * q + 16; Q8_0 gets + 128 or stays signed, as the tier chooses), multiplied with the signed
 * activation bytes, and the offset comes back in integers by starting each lane at
 * -offset * sum(x over the lane). Each lane is scaled by
 * d_w * d_x of its block into a float accumulator; lanes are summed once per output.
 *
 * Each tier defines weight_offset(), pair_isum() (its integer dot instruction) and
 * tile_floats(); walk_tiles() calls the tiles with constant shapes, so every shape compiles to
 * its own unrolled body.
 *
 * The down projection of the sparse FFN, y += sum_j a_j * row_j (axpy_rows), is float work: a
 * block's 32 weights become floats, scaled by a d and summed into y with FMAs. The walk over
 * the rows, the prefetching and the scales are shared here; each tier defines the block loop,
 * axpy_blocks(). Dequant uses this file's block_q() in both tiers.
 * Private to native/src/kernels. */
#ifndef PI_KERNELS_SIMD_H
#define PI_KERNELS_SIMD_H
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "ref.h"

#define INLINE static inline __attribute__((always_inline))

enum { MAX_TILE_ROWS = 4, MAX_TILE_TOKENS = 4 };

INLINE size_t block_bytes(int type) { return pi_block_bytes(type); }

INLINE int is_float(int type) { return type == PI_TYPE_F32 || type == PI_TYPE_F16 || type == PI_TYPE_BF16; }

INLINE int float_bytes(int type) { return type == PI_TYPE_F32 ? 4 : 2; }

/* The formats with a per-block minimum m (w = d * q + m) add m * sum(d_x * x) = m * s_x. */
INLINE int has_min(int type) { return type == PI_TYPE_Q4_1 || type == PI_TYPE_Q5_1; }

INLINE uint32_t load_u16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

INLINE uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* 8 weights from i on, as floats. */
INLINE __m256 load_float8(int type, const void *row, int i) {
    switch (type) {
    case PI_TYPE_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const pi_fp16 *)row + i)));
    case PI_TYPE_BF16: { /* bf16 is the top half of an f32 */
        const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const pi_bf16 *)row + i)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
    }
    default: return _mm256_loadu_ps((const float *)row + i); /* PI_TYPE_F32 */
    }
}

INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* ---- defined by each tier ---- */

/* What a format adds to make its weights unsigned; 0 for Q8_0 means it stays signed. */
static inline int weight_offset(int type);
/* init + per dword lane, the sum of unsigned w times signed x over lo and then hi. */
static inline __m256i pair_isum(__m256i init, __m256i w_lo, __m256i w_hi, __m256i x_lo, __m256i x_hi);
/* The tile for F32, F16 and BF16 weights, as tile_blocks() below is for the block formats. */
static inline void tile_floats(int type, int R, int T, const uint8_t *const *rows, const uintptr_t *ahead,
                               pi_act x, int t0, float *Y, int y_stride);
/* y[32 b0 .. 32 (b0 + nb)) += a[r] * rows[r] over those blocks, for R rows of a block format
 * whose scales scales_of() has put in *sc (see axpy_scales below). */
typedef struct axpy_scales axpy_scales;
static inline void axpy_blocks(int type, int R, const uint8_t *const *rows, const uintptr_t *ahead,
                               const axpy_scales *sc, float *y, int b0, int nb);

/* ---- weight pairs ---- */

/* A pair of weight blocks: 64 weights, the scales as [d0, m0, d1, m1] (m = 0 for the formats
 * without a minimum), d spread over the lanes [d0 x 4, d1 x 4], and [0, m0, 0, m1]. */
typedef struct {
    __m256i lo, hi;
    __m128 dm, m;
    __m256 d8;
} wpair;

/* [lane 0 x 4, lane 2 x 4] of a 4-float vector: one block's value over its 4 dword lanes. */
INLINE __m256 spread_pair(__m128 v) {
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2));
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

/* q + 16 in the bytes whose bit is set in `bits`. */
INLINE __m256i add_bit4(__m256i q, uint32_t bits) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
    return _mm256_mask_add_epi8(q, bits, q, _mm256_set1_epi8(16));
#else
    /* byte j picks byte j / 8 of the word and keeps its bit j % 8 */
    const __m256i pick = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i h = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), pick);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit);
    return _mm256_or_si256(q, _mm256_and_si256(set, _mm256_set1_epi8(16)));
#endif
}

/* The 5-bit formats: bit j of each block's qh word is bit 4 of its weight j; regrouped in the
 * pair's order the two words give the bits of lo and of hi. */
INLINE void add_high_bits(wpair *w, const uint8_t *qh0, const uint8_t *qh1) {
    const uint32_t ha = load_u32(qh0), hb = load_u32(qh1);
    w->lo = add_bit4(w->lo, (ha & 0xffff) | hb << 16);
    w->hi = add_bit4(w->hi, ha >> 16 | (hb & 0xffff0000u));
}

/* Q8_0: signed bytes, made unsigned by flipping the sign bit (+128) where the tier wants it. */
INLINE void byte_pair(wpair *w, const uint8_t *qs0, const uint8_t *qs1) {
    w->lo = load_halves(qs0, qs1);
    w->hi = load_halves(qs0 + 16, qs1 + 16);
    if (weight_offset(PI_TYPE_Q8_0)) {
        const __m256i flip = _mm256_set1_epi8((char)0x80);
        w->lo = _mm256_xor_si256(w->lo, flip);
        w->hi = _mm256_xor_si256(w->hi, flip);
    }
}

/* dm0/dm1: each block's fp16 d in the low half and m (or 0) in the high half. */
INLINE void set_scales(wpair *w, uint32_t dm0, uint32_t dm1) {
    w->dm = _mm_cvtph_ps(_mm_insert_epi32(_mm_cvtsi32_si128((int)dm0), (int)dm1, 1));
    w->d8 = spread_pair(w->dm);
    w->m = _mm_blend_ps(_mm_setzero_ps(), w->dm, 0x0a);
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
        byte_pair(&w, b0 + offsetof(block_q8_0, qs), b1 + offsetof(block_q8_0, qs));
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

INLINE xpair load_xpair(int type, const block_q8x *x) {
    xpair p;
    p.lo = load_halves((const uint8_t *)x[0].qs, (const uint8_t *)x[1].qs);
    p.hi = load_halves((const uint8_t *)x[0].qs + 16, (const uint8_t *)x[1].qs + 16);
    p.ds = _mm_loadh_pi(_mm_loadl_pi(_mm_setzero_ps(), (const __m64 *)&x[0].d), (const __m64 *)&x[1].d);
    p.d8 = spread_pair(p.ds);
    p.base = _mm256_setzero_si256();
    if (weight_offset(type)) {
        const __m256i off = _mm256_set1_epi8((char)weight_offset(type));
        p.base = _mm256_sub_epi32(p.base, pair_isum(p.base, off, off, p.lo, p.hi));
    }
    return p;
}

/* ---- the block tile ---- */

/* acc += m0 * s0 + m1 * s1, in lanes 1 and 3. */
INLINE __m256 add_min_term(const wpair *w, const xpair *x, __m256 acc) {
#if defined(__AVX512VL__)
    return _mm256_mask3_fmadd_ps(_mm256_castps128_ps256(w->dm), _mm256_castps128_ps256(x->ds), acc, 0x0a);
#else
    return _mm256_fmadd_ps(_mm256_zextps128_ps256(w->m), _mm256_zextps128_ps256(x->ds), acc);
#endif
}

/* acc += the pair's dot product over [a x 4, b x 4] lanes. Signed Q8_0 weights use the sign
 * trick, |w| * (x * sign(w)), exact because activations never hold -128. */
INLINE __m256 pair_dot(int type, const wpair *w, const xpair *x, __m256 acc) {
    __m256i dot;
    if (type == PI_TYPE_Q8_0 && !weight_offset(type))
        dot = pair_isum(_mm256_setzero_si256(), _mm256_abs_epi8(w->lo), _mm256_abs_epi8(w->hi),
                        _mm256_sign_epi8(x->lo, w->lo), _mm256_sign_epi8(x->hi, w->hi));
    else
        dot = pair_isum(x->base, w->lo, w->hi, x->lo, x->hi);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(w->d8, x->d8), acc);
    return has_min(type) ? add_min_term(w, x, acc) : acc;
}

/* Y[t * y_stride + r] for R <= MAX_TILE_ROWS rows x T <= MAX_TILE_TOKENS tokens from token t0
 * on, touching the addresses `ahead` (one per row, advancing as the row does) so they come from
 * DRAM while the tile computes. An odd last block goes to the reference. */
INLINE void tile_blocks(int type, int R, int T, const uint8_t *const *rows, const uintptr_t *ahead, pi_act x,
                        int t0, float *Y, int y_stride) {
    const size_t bb = block_bytes(type);
    const int nb = x.n / QK;
    const block_q8x *xs[MAX_TILE_TOKENS];
    __m256 acc[MAX_TILE_ROWS][MAX_TILE_TOKENS];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) xs[t] = x.q + (size_t)(t0 + t) * nb;
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();

    for (int b = 0; b + 1 < nb; b += 2) {
        xpair xp[MAX_TILE_TOKENS];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) xp[t] = load_xpair(type, xs[t] + b);
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

/* ---- the tile walk ---- */

INLINE void tile(int type, int R, int T, const uint8_t *const *rows, const uintptr_t *ahead, pi_act x, int t0,
                 float *Y, int y_stride) {
    if (is_float(type)) tile_floats(type, R, T, rows, ahead, x, t0, Y, y_stride);
    else tile_blocks(type, R, T, rows, ahead, x, t0, Y, y_stride);
}

/* A matmul in tiles of TR rows x TT tokens, rows outer and tokens inner, so a tile's rows stay
 * in L1 while every token tile passes over them; leftover rows and tokens go one at a time.
 * The first token tile of each row group prefetches rows further on: with several rows read
 * side by side the hardware prefetchers fall behind, and rows picked by idx are not
 * sequential at all. */
INLINE void walk_tiles(int type, int TR, int TT, const void *W, size_t row_bytes, const int32_t *idx, int r0,
                       int nr, pi_act x, int nt, float *Y, int y_stride) {
    const int ahead_rows = pi_prefetch_rows(row_bytes, TR);
    for (int i = 0; i < nr;) {
        const int R = nr - i >= TR ? TR : 1;
        const uint8_t *rows[MAX_TILE_ROWS];
        uintptr_t ahead[MAX_TILE_ROWS], own[MAX_TILE_ROWS];
        for (int r = 0; r < R; r++) {
            rows[r] = pi_matmul_row(W, row_bytes, idx, r0, i + r);
            ahead[r] = pi_prefetch_row(W, row_bytes, idx, r0, nr, i + r, ahead_rows);
            own[r] = (uintptr_t)rows[r];
        }
        for (int t = 0; t < nt;) {
            const int T = nt - t >= TT ? TT : 1;
            const uintptr_t *pf = t == 0 ? ahead : own; /* later tiles touch their own rows: a no-op */
            float *y = Y + (size_t)t * y_stride + i;
            if (R == TR && T == TT) tile(type, TR, TT, rows, pf, x, t, y, y_stride);
            else if (R == TR) tile(type, TR, 1, rows, pf, x, t, y, y_stride);
            else if (T == TT) tile(type, 1, TT, rows, pf, x, t, y, y_stride);
            else tile(type, 1, 1, rows, pf, x, t, y, y_stride);
            t += T;
        }
        i += R;
    }
}

/* ---- axpy over rows, and dequant ---- */

/* What a block format adds to its weights to store them; it becomes part of the block's
 * constant: w = d * (q - offset) = d * q + m with m = -offset * d. */
INLINE int stored_offset(int type) { return type == PI_TYPE_Q4_0 ? 8 : type == PI_TYPE_Q5_0 ? 16 : 0; }

/* Nibble formats keep weights 16-31 as the high nibbles in place, 16 q: masking them costs no
 * shift, and shifts share the two ports of Zen 4 that convert to float, the busiest ones here.
 * Their scale is d / 16 instead (exact: a power of two). The 5-bit formats do that only where
 * AVX-512 can set bit 4 of a dword from a mask register; without it they go through bytes. */
#if defined(__AVX512VL__)
enum { Q5_DWORDS = 1 };
#else
enum { Q5_DWORDS = 0 };
#endif

INLINE int is_q5(int type) { return type == PI_TYPE_Q5_0 || type == PI_TYPE_Q5_1; }

/* What q[2] and q[3] of block_q() are multiplied by, next to d. */
INLINE float high_scale(int type) {
    return type == PI_TYPE_Q8_0 || (is_q5(type) && !Q5_DWORDS) ? 1.0f : 1.0f / 16.0f;
}

/* The nibble formats' 16 bytes as dwords, bytes 0-7 and 8-15: the low nibbles are weights
 * 0-15 and the high ones weights 16-31. */
INLINE void nibble_dwords(const uint8_t *qs, __m256i v[2]) {
    v[0] = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)qs));
    v[1] = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qs + 8)));
}

/* A block's stored values as floats, q[k] for weights 8k .. 8k + 7: the nibble (with bit 4 for
 * Q5_0 and Q5_1; q[2] and q[3] times 1 / high_scale()) or, for Q8_0, the signed byte. */
INLINE void block_q(int type, const uint8_t *block, __m256 q[4]) {
    const __m256i lo = _mm256_set1_epi32(0x0f), hi = _mm256_set1_epi32(0xf0);
    switch (type) {
    case PI_TYPE_Q4_0:
    case PI_TYPE_Q4_1: {
        __m256i v[2];
        nibble_dwords(block + (type == PI_TYPE_Q4_0 ? offsetof(block_q4_0, qs) : offsetof(block_q4_1, qs)), v);
        q[0] = _mm256_cvtepi32_ps(_mm256_and_si256(v[0], lo));
        q[1] = _mm256_cvtepi32_ps(_mm256_and_si256(v[1], lo));
        q[2] = _mm256_cvtepi32_ps(_mm256_and_si256(v[0], hi));
        q[3] = _mm256_cvtepi32_ps(_mm256_and_si256(v[1], hi));
        break;
    }
    case PI_TYPE_Q5_0:
    case PI_TYPE_Q5_1: {
        const int q5_0 = type == PI_TYPE_Q5_0;
        const uint8_t *qs = block + (q5_0 ? offsetof(block_q5_0, qs) : offsetof(block_q5_1, qs));
        const uint32_t h = load_u32(block + (q5_0 ? offsetof(block_q5_0, qh) : offsetof(block_q5_1, qh)));
#if defined(__AVX512VL__)
        /* bit j of h is bit 4 of weight j: 16 in the low-nibble lanes, 16 * 16 in the high ones */
        __m256i v[2];
        nibble_dwords(qs, v);
        const __m256i b4 = _mm256_set1_epi32(16), b8 = _mm256_set1_epi32(256);
        const __m256i w0 = _mm256_and_si256(v[0], lo), w1 = _mm256_and_si256(v[1], lo);
        const __m256i w2 = _mm256_and_si256(v[0], hi), w3 = _mm256_and_si256(v[1], hi);
        q[0] = _mm256_cvtepi32_ps(_mm256_mask_or_epi32(w0, (__mmask8)h, w0, b4));
        q[1] = _mm256_cvtepi32_ps(_mm256_mask_or_epi32(w1, (__mmask8)(h >> 8), w1, b4));
        q[2] = _mm256_cvtepi32_ps(_mm256_mask_or_epi32(w2, (__mmask8)(h >> 16), w2, b8));
        q[3] = _mm256_cvtepi32_ps(_mm256_mask_or_epi32(w3, (__mmask8)(h >> 24), w3, b8));
#else
        /* the 32 weights as bytes in order, bit 4 added to all at once, then widened */
        const __m128i v = _mm_loadu_si128((const __m128i *)qs), mask = _mm_set1_epi8(0x0f);
        const __m256i w = add_bit4(_mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), mask), _mm_and_si128(v, mask)), h);
        const __m128i w_lo = _mm256_castsi256_si128(w), w_hi = _mm256_extracti128_si256(w, 1);
        q[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(w_lo));
        q[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(w_lo, 8)));
        q[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(w_hi));
        q[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(w_hi, 8)));
#endif
        break;
    }
    default: { /* PI_TYPE_Q8_0 */
        const uint8_t *qs = block + offsetof(block_q8_0, qs);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            q[k] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(qs + 8 * k))));
        break;
    }
    }
}

enum {
    AXPY_ROWS = 4,    /* rows summed per pass over y */
    AXPY_BLOCKS = 128 /* blocks of y per walk over the rows: 4096 floats, scales in 9 KiB of stack */
};

/* The scales of a group of rows over the blocks [b0, b0 + nb) of a walk, converted before the
 * block loop so that there they are broadcast loads and leave the vector ports to the weights:
 * s[r][2i] = a d and s[r][2i + 1] = a m of row r's block b0 + i, sh[r][2i] = a d high_scale().
 * m[2i + 1] sums a m over every row of the walk; it is added to y once, after the last group. */
struct axpy_scales {
    _Alignas(32) float s[AXPY_ROWS][2 * AXPY_BLOCKS];
    _Alignas(32) float sh[AXPY_ROWS][2 * AXPY_BLOCKS];
    _Alignas(32) float m[2 * AXPY_BLOCKS];
};

/* The fp16 pair [d, m] of a block as a dword; the formats without a minimum give [d, d], their
 * m being -offset * d (the factor comes in scales_of()). */
INLINE uint32_t block_dm(int type, const uint8_t *block) {
    return has_min(type) ? load_u32(block) : load_u16(block) * 0x10001u;
}

/* The fp16 pairs of 4 blocks from `block` on; those past the first `count` read as 0, for the
 * row may end there. */
INLINE __m128i load_dm4(int type, const uint8_t *block, size_t bb, int count) {
    if (count >= 4)
        return _mm_setr_epi32((int)block_dm(type, block), (int)block_dm(type, block + bb),
                              (int)block_dm(type, block + 2 * bb), (int)block_dm(type, block + 3 * bb));
    return _mm_setr_epi32((int)block_dm(type, block), count > 1 ? (int)block_dm(type, block + bb) : 0,
                          count > 2 ? (int)block_dm(type, block + 2 * bb) : 0, 0);
}

/* Fill sc->s and sc->sh for R rows and add their a m to sc->m, 4 blocks at a time. */
INLINE void scales_of(int type, int R, const uint8_t *const *rows, const float *a, int b0, int nb, axpy_scales *sc) {
    const size_t bb = block_bytes(type);
    const float mf = has_min(type) ? 1.0f : -(float)stored_offset(type);
    const __m256 hs = _mm256_set1_ps(high_scale(type));
    __m256 f[AXPY_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        f[r] = _mm256_setr_ps(a[r], a[r] * mf, a[r], a[r] * mf, a[r], a[r] * mf, a[r], a[r] * mf);
    for (int i = 0; i < nb; i += 4) {
        __m256 m = _mm256_load_ps(sc->m + 2 * i);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m128i dm = load_dm4(type, rows[r] + (size_t)(b0 + i) * bb, bb, nb - i);
            const __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(dm), f[r]);
            _mm256_store_ps(sc->s[r] + 2 * i, v);
            if (high_scale(type) != 1.0f) _mm256_store_ps(sc->sh[r] + 2 * i, _mm256_mul_ps(v, hs));
            m = _mm256_add_ps(m, v);
        }
        _mm256_store_ps(sc->m + 2 * i, m);
    }
}

/* The same for F32, F16 and BF16 rows, 8 weights at a time; the last d % 8 go to the reference. */
INLINE void axpy_floats(int type, int R, const uint8_t *const *rows, const uintptr_t *ahead, const float *a,
                        float *y, int d) {
    const int d8 = d & ~7;
    __m256 av[AXPY_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) av[r] = _mm256_set1_ps(a[r]);
    for (int i = 0; i < d8; i += 8) {
        __m256 acc = _mm256_loadu_ps(y + i);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            _mm_prefetch((const char *)(ahead[r] + (size_t)i * float_bytes(type)), _MM_HINT_T1);
            acc = _mm256_fmadd_ps(load_float8(type, rows[r], i), av[r], acc);
        }
        _mm256_storeu_ps(y + i, acc);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) pi_ref_axpy_floats(type, rows[r], a[r], y, d8, d);
}

/* One group of R rows: all of d for float rows, blocks [b0, b0 + nb) for the block formats. */
INLINE void axpy_group(int type, int R, const uint8_t *const *rows, const uintptr_t *ahead, const float *a,
                       float *y, int d, int b0, int nb, axpy_scales *sc) {
    if (is_float(type)) {
        axpy_floats(type, R, rows, ahead, a, y, d);
    } else {
        scales_of(type, R, rows, a, b0, nb, sc);
        axpy_blocks(type, R, rows, ahead, sc, y, b0, nb);
    }
}

/* One walk over the rows with a[j] != 0, AXPY_ROWS of them per pass over y (over its blocks
 * [b0, b0 + nb) for the block formats, whose rows' bytes [lo, hi) it reads). A second cursor
 * runs as many non-zero rows ahead as pi_prefetch_rows() asks and hands each row of a group
 * the row to prefetch as it is read: rows of a zero a[j] are never touched, and the cursor
 * stops at the last row (then a row prefetches itself, a no-op). The rows the cursor skips at
 * the start are prefetched whole at once: the sparse FFN calls this on runs of 32 scattered
 * rows, often fewer than the prefetch distance, and would otherwise wait on each in turn. */
INLINE void axpy_walk(int type, const void *W, size_t row_bytes, const int32_t *idx, const float *a, int n,
                      float *y, int d, int b0, int nb, axpy_scales *sc) {
    const size_t lo = is_float(type) ? 0 : (size_t)b0 * block_bytes(type);
    const size_t hi = is_float(type) ? row_bytes : (size_t)(b0 + nb) * block_bytes(type);
    const int ahead_rows = pi_prefetch_rows(hi - lo, AXPY_ROWS);
    int p = 0;
    for (int seen = 0; p < n && seen < ahead_rows; p++) {
        if (a[p] == 0.0f) continue;
        const uintptr_t row = (uintptr_t)pi_matmul_row(W, row_bytes, idx, 0, p);
        if (seen++ >= AXPY_ROWS) /* the first group reads its rows at once */
            for (uintptr_t line = (row + lo) & ~(uintptr_t)63; line < row + hi; line += 64)
                _mm_prefetch((const char *)line, _MM_HINT_T1);
    }
    for (int j = 0;;) {
        const uint8_t *rows[AXPY_ROWS];
        uintptr_t ahead[AXPY_ROWS];
        float ar[AXPY_ROWS];
        int R = 0;
        for (; j < n && R < AXPY_ROWS; j++) {
            if (a[j] == 0.0f) continue; /* ReLU zeros cost nothing */
            rows[R] = pi_matmul_row(W, row_bytes, idx, 0, j);
            ar[R] = a[j];
            while (p < n && a[p] == 0.0f) p++;
            ahead[R] = p < n ? (uintptr_t)pi_matmul_row(W, row_bytes, idx, 0, p++) : (uintptr_t)rows[R];
            R++;
        }
        switch (R) {
        case AXPY_ROWS: axpy_group(type, AXPY_ROWS, rows, ahead, ar, y, d, b0, nb, sc); break;
        case 3: axpy_group(type, 3, rows, ahead, ar, y, d, b0, nb, sc); return;
        case 2: axpy_group(type, 2, rows, ahead, ar, y, d, b0, nb, sc); return;
        case 1: axpy_group(type, 1, rows, ahead, ar, y, d, b0, nb, sc); return;
        default: return;
        }
    }
}

/* y += sum_j a[j] row(j): float rows in one walk, block rows in walks over AXPY_BLOCKS blocks
 * of y at a time, each ending with the blocks' constants. */
INLINE void axpy_rows(int type, const void *W, size_t row_bytes, const int32_t *idx, const float *a, int n,
                      float *y, int d) {
    if (is_float(type)) {
        axpy_walk(type, W, row_bytes, idx, a, n, y, d, 0, 0, NULL);
        return;
    }
    axpy_scales sc;
    for (int b0 = 0; b0 < d / QK; b0 += AXPY_BLOCKS) {
        const int nb = d / QK - b0 < AXPY_BLOCKS ? d / QK - b0 : AXPY_BLOCKS;
        memset(sc.m, 0, sizeof sc.m);
        axpy_walk(type, W, row_bytes, idx, a, n, y, d, b0, nb, &sc);
        if (type == PI_TYPE_Q8_0) continue; /* no constants */
        for (int i = 0; i < nb; i++) {
            const __m256 m = _mm256_set1_ps(sc.m[2 * i + 1]);
            float *yb = y + (size_t)(b0 + i) * QK;
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) _mm256_storeu_ps(yb + 8 * k, _mm256_add_ps(_mm256_loadu_ps(yb + 8 * k), m));
        }
    }
}

/* y[0..n) = d * q + m, one fused multiply-add a weight: the same single rounding as the
 * reference's d * (q - offset) for the formats without a minimum. */
INLINE void dequant_blocks(int type, const void *row, float *y, int n) {
    const size_t bb = block_bytes(type);
    const float mf = has_min(type) ? 1.0f : -(float)stored_offset(type);
    for (int b = 0; b < n / QK; b++) {
        const uint8_t *block = (const uint8_t *)row + (size_t)b * bb;
        __m256 q[4];
        block_q(type, block, q);
        const __m256 dm = _mm256_cvtph_ps(_mm_set1_epi32((int)block_dm(type, block)));
        const __m256 d = _mm256_permute_ps(dm, 0x00), m = _mm256_mul_ps(_mm256_permute_ps(dm, 0x55), _mm256_set1_ps(mf));
        const __m256 dh = _mm256_mul_ps(d, _mm256_set1_ps(high_scale(type)));
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            _mm256_storeu_ps(y + (size_t)b * QK + 8 * k, _mm256_fmadd_ps(q[k], k < 2 ? d : dh, m));
    }
}

/* Block formats through the SIMD block expansion; float rows are a plain conversion. */
INLINE void dequant(int type, const void *row, float *y, int n) {
    if (is_float(type)) pi_ref_dequant(type, row, y, n);
    else dequant_blocks(type, row, y, n);
}

#endif
