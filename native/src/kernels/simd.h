/* simd.h - what avx2.c and avx512.c share, compiled into each under its own flags: the per-type
 * facts the kernels branch on (folded at compile time, the type being a constant wherever
 * these are inlined), the decoding of weight blocks, the scales of the axpy over rows, and
 * dequant. It calls nothing of the tiers': their own instructions (isa_avx2.h, isa_avx512.h)
 * and the walks built on them (walk.h) sit above it.
 *
 * Block formats hold a 32-weight block as one ymm of bytes in weight order, so that dword lane l
 * sums products 4l .. 4l + 3, as ggml's vec_dot does (kernels.h's pi_dot_order: llama.cpp's
 * summation order, which the row-major tiles of walk.h reproduce bit for bit). The weights are
 * unsigned bytes (an offset the formats already have: Q4_0 stores q + 8, Q5_0 q + 16; Q8_0 gets
 * + 128 or stays signed, as the tier's dot needs), multiplied with the signed activation bytes,
 * and the offset comes back in integers by starting each lane at -offset * sum(x over the lane).
 *
 * The down projection of the sparse FFN, y += sum_j a_j * row_j (axpy_rows), is float work: a
 * block's 32 weights become floats, scaled by a d and summed into y with FMAs. The scales and
 * the float rows are done here; each tier has its own block loop, axpy_blocks(). Dequant uses
 * this file's block_q() in both tiers.
 *
 * Everything a SIMD tier knows of each type is here (the zmm forms under __AVX512F__): a new
 * type's SIMD cases go in this file, and the tier files stay free of per-type code.
 * Private to native/src/kernels. */
#ifndef PI_KERNELS_SIMD_H
#define PI_KERNELS_SIMD_H
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "common.h"
#include "ref.h"

enum { MAX_TILE_ROWS = 4, MAX_TILE_TOKENS = 4 };

INLINE size_t block_bytes(int type) { return pi_type_block_bytes((uint32_t)type); }

INLINE int is_float(int type) { return type == PI_TYPE_F32 || type == PI_TYPE_F16 || type == PI_TYPE_BF16; }

INLINE int float_bytes(int type) { return (int)pi_type_block_bytes((uint32_t)type); }

/* The formats with a per-block minimum m (w = d * q + m) add m * sum(d_x * x) = m * s_x. */
INLINE int has_min(int type) { return type == PI_TYPE_Q4_1 || type == PI_TYPE_Q5_1; }

/* What a block format adds to its weights to store them; it becomes part of the block's
 * constant: w = d * (q - offset) = d * q + m with m = -offset * d. */
INLINE int stored_offset(int type) { return type == PI_TYPE_Q4_0 ? 8 : type == PI_TYPE_Q5_0 ? 16 : 0; }

/* What a format adds to make its weights unsigned for the integer dot: the stored offset, and
 * for Q8_0 +128 (the sign bit flipped) where the dot takes unsigned weights only, vpdpbusd. The
 * AVX2 tier keeps Q8_0 signed: 255 * 127 pair sums would overflow vpmaddubsw's int16 lanes. */
#if defined(__AVX512VNNI__)
enum { Q8_0_OFFSET = 128 };
#else
enum { Q8_0_OFFSET = 0 };
#endif

INLINE int weight_offset(int type) { return type == PI_TYPE_Q8_0 ? Q8_0_OFFSET : stored_offset(type); }

/* 8 activation values as pi_act_as_weight_type rounds them for a float weight of `type` */
INLINE __m256 act_as_weight_type8(int type, __m256 x) {
    if (type == PI_TYPE_F16) return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (type != PI_TYPE_BF16) return x;
    const __m256i u = _mm256_castps_si256(x), top = _mm256_set1_epi32((int)0xffff0000u);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), top);
    const __m256i nan = _mm256_or_si256(_mm256_and_si256(u, top), _mm256_set1_epi32(0x400000));
    return _mm256_blendv_ps(_mm256_castsi256_ps(rounded), _mm256_castsi256_ps(nan), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* 8 weights from i on, as floats. */
INLINE __m256 load_float8(int type, const void *row, int i) {
    switch (type) {
    case PI_TYPE_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const pi_fp16 *)row + i)));
    case PI_TYPE_BF16: { /* bf16 is the top half of an f32 */
        const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const pi_bf16 *)row + i)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
    }
    case PI_TYPE_F32: return _mm256_loadu_ps((const float *)row + i);
    default: PI_BAD_TYPE();
    }
}

/* ---- weight blocks ---- */

/* A weight block for the integer dot: its 32 quants as bytes in weight order, made unsigned by
 * weight_offset(), and its d and m (m = 0 for the formats without a minimum). In weight order
 * dword lane l holds weights 4l .. 4l + 3: the lanes ggml's vec_dot sums in (pi_dot_order). */
typedef struct {
    __m256i q;
    float d, m;
} wblock;

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

/* The 4- and 5-bit blocks keep weights 0-15 in the low nibbles of their 16 bytes and 16-31 in
 * the high ones; the 5-bit ones add bit 4 of weight j as bit j of the word qh. */
INLINE __m256i unpack_nibbles(const uint8_t *qs) {
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0f));
}

INLINE wblock load_wblock(int type, const uint8_t *block) {
    wblock w;
    w.d = _cvtsh_ss((unsigned short)load_u16(block));
    w.m = has_min(type) ? _cvtsh_ss((unsigned short)load_u16(block + 2)) : 0.0f;
    switch (type) {
    case PI_TYPE_Q4_0: w.q = unpack_nibbles(block + offsetof(block_q4_0, qs)); break;
    case PI_TYPE_Q4_1: w.q = unpack_nibbles(block + offsetof(block_q4_1, qs)); break;
    case PI_TYPE_Q5_0:
        w.q = add_bit4(unpack_nibbles(block + offsetof(block_q5_0, qs)), load_u32(block + offsetof(block_q5_0, qh)));
        break;
    case PI_TYPE_Q5_1:
        w.q = add_bit4(unpack_nibbles(block + offsetof(block_q5_1, qs)), load_u32(block + offsetof(block_q5_1, qh)));
        break;
    case PI_TYPE_Q8_0: /* signed bytes, made unsigned by flipping the sign bit (+128) where the tier wants it */
        w.q = _mm256_loadu_si256((const __m256i *)(block + offsetof(block_q8_0, qs)));
        if (weight_offset(PI_TYPE_Q8_0)) w.q = _mm256_xor_si256(w.q, _mm256_set1_epi8((char)0x80));
        break;
    default: PI_BAD_TYPE();
    }
    return w;
}

/* ---- axpy over rows, and dequant ---- */


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

/* Where a block format keeps its quants qs and, for Q5_0 and Q5_1, the high bits qh. */
INLINE size_t qs_offset(int type) {
    switch (type) {
    case PI_TYPE_Q4_0: return offsetof(block_q4_0, qs);
    case PI_TYPE_Q4_1: return offsetof(block_q4_1, qs);
    case PI_TYPE_Q5_0: return offsetof(block_q5_0, qs);
    case PI_TYPE_Q5_1: return offsetof(block_q5_1, qs);
    case PI_TYPE_Q8_0: return offsetof(block_q8_0, qs);
    default: PI_BAD_TYPE();
    }
}

INLINE size_t qh_offset(int type) {
    switch (type) {
    case PI_TYPE_Q5_0: return offsetof(block_q5_0, qh);
    case PI_TYPE_Q5_1: return offsetof(block_q5_1, qh);
    default: PI_BAD_TYPE();
    }
}

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
        nibble_dwords(block + qs_offset(type), v);
        q[0] = _mm256_cvtepi32_ps(_mm256_and_si256(v[0], lo));
        q[1] = _mm256_cvtepi32_ps(_mm256_and_si256(v[1], lo));
        q[2] = _mm256_cvtepi32_ps(_mm256_and_si256(v[0], hi));
        q[3] = _mm256_cvtepi32_ps(_mm256_and_si256(v[1], hi));
        break;
    }
    case PI_TYPE_Q5_0:
    case PI_TYPE_Q5_1: {
        const uint8_t *qs = block + qs_offset(type);
        const uint32_t h = load_u32(block + qh_offset(type));
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
    case PI_TYPE_Q8_0: {
        const uint8_t *qs = block + qs_offset(type);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            q[k] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(qs + 8 * k))));
        break;
    }
    default: PI_BAD_TYPE();
    }
}

#if defined(__AVX512F__)
/* ---- the AVX-512 tier's zmm decoding ---- */

/* 16 activation values as pi_act_as_weight_type rounds them for a float weight of `type` */
INLINE __m512 act_as_weight_type16(int type, __m512 x) {
    if (type == PI_TYPE_F16) return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (type != PI_TYPE_BF16) return x;
    const __m512i u = _mm512_castps_si512(x), top = _mm512_set1_epi32((int)0xffff0000u);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), top);
    const __m512i nan = _mm512_or_si512(_mm512_and_si512(u, top), _mm512_set1_epi32(0x400000));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_castsi512_ps(rounded), _mm512_castsi512_ps(nan));
}

/* 16 weights from i on, as floats; lanes outside `keep` read nothing and are 0. */
INLINE __m512 load_float16(int type, const void *row, int i, __mmask16 keep) {
    switch (type) {
    case PI_TYPE_F16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(keep, (const pi_fp16 *)row + i));
    case PI_TYPE_BF16: { /* bf16 is the top half of an f32 */
        const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(keep, (const pi_bf16 *)row + i));
        return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
    }
    case PI_TYPE_F32: return _mm512_maskz_loadu_ps(keep, (const float *)row + i);
    default: PI_BAD_TYPE();
    }
}

/* A block's 32 weights as two zmm of floats, for the AVX-512 tier's axpy block loop; zmm there,
 * against that tier's ymm rule, because its float work (a conversion and an FMA per 16 weights)
 * takes the vector pipes as long either way, but zmm needs half the instructions, and the loop
 * is bound by both. The low nibbles of the 4-bit formats are looked up in a table of 0..15 by vpermps,
 * which reads only the low 4 bits of each index: no mask and no conversion. */
INLINE void block_q16(int type, const uint8_t *block, __m512 *q0, __m512 *q1) {
    switch (type) {
    case PI_TYPE_Q8_0: {
        const uint8_t *qs = block + qs_offset(type);
        *q0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)qs)));
        *q1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(qs + 16))));
        return;
    }
    case PI_TYPE_Q4_0:
    case PI_TYPE_Q4_1:
    case PI_TYPE_Q5_0:
    case PI_TYPE_Q5_1: {
        const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(block + qs_offset(type))));
        const __m512i w1 = _mm512_and_si512(v, _mm512_set1_epi32(0xf0)); /* 16 q of weights 16-31 */
        if (is_q5(type)) { /* bit j of qh is bit 4 of weight j */
            const uint32_t h = load_u32(block + qh_offset(type));
            const __m512i w0 = _mm512_and_si512(v, _mm512_set1_epi32(0x0f));
            *q0 = _mm512_cvtepi32_ps(_mm512_mask_or_epi32(w0, (__mmask16)h, w0, _mm512_set1_epi32(16)));
            *q1 = _mm512_cvtepi32_ps(_mm512_mask_or_epi32(w1, (__mmask16)(h >> 16), w1, _mm512_set1_epi32(256)));
            return;
        }
        *q0 = _mm512_permutexvar_ps(v, _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
        *q1 = _mm512_cvtepi32_ps(w1);
        return;
    }
    default: PI_BAD_TYPE();
    }
}
#endif

enum {
    AXPY_ROWS = 4,    /* rows summed per pass over y */
    AXPY_BLOCKS = 128 /* blocks of y per walk over the rows: 4096 floats, scales in 9 KiB of stack */
};

/* The scales of a group of rows over the blocks [b0, b0 + nb) of a walk, converted before the
 * block loop so that there they are broadcast loads and leave the vector ports to the weights:
 * s[r][2i] = a d and s[r][2i + 1] = a m of row r's block b0 + i, sh[r][2i] = a d high_scale().
 * m[2i + 1] sums a m over every row of the walk; it is added to y once, after the last group. */
typedef struct {
    _Alignas(32) float s[AXPY_ROWS][2 * AXPY_BLOCKS];
    _Alignas(32) float sh[AXPY_ROWS][2 * AXPY_BLOCKS];
    _Alignas(32) float m[2 * AXPY_BLOCKS];
} axpy_scales;

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
