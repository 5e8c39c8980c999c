/* kquants.h - ggml's K-quants (Q2_K .. Q6_K): 256-weight super-blocks with 16 or 8 sub-block
 * scales. Each super-block is unpacked to bytes and scales (kq_scales), then dotted in integers
 * with the activation in llama.cpp's Q8_K form; dequant and the sparse axpy use its floats.
 * Included by ref.c, avx2.c and avx512.c, so each tier compiles it for its instruction set: the
 * unpacking is plain C for the compiler to vectorise, and the byte dot has an AVX2 path beside
 * the scalar one that ref.c compiles. It uses only common.h; the tiers name its kq_* kernels
 * and quantize_act_k in their tables (table.h). */
#ifndef PI_KERNELS_KQUANTS_H
#define PI_KERNELS_KQUANTS_H
#include <math.h>
#include <string.h>

#include "common.h"

/* Every helper is inlined (INLINE) into the tiers' per-type entries, where the type is a constant. */

#if defined(__AVX2__)
INLINE float f16(pi_fp16 h) { return _cvtsh_ss(h); }
#else
INLINE float f16(pi_fp16 h) { return pi_fp16_to_f32(h); }
#endif

/* A super-block's bytes as its format's struct. */
#define KQ_BLOCK(fmt, b) ((const block_##fmt *)(b))

/* 2-bit fields, as Q2_K and Q3_K keep them: weight h*128 + s*32 + j is bits 2s..2s+1 of
 * byte h*32 + j of qs. */
INLINE int crumb(const uint8_t *qs, int i) {
    const int h = i / 128, s = (i % 128) / 32, j = i % 32;
    return (qs[h * 32 + j] >> (2 * s)) & 3;
}

/* Q4_K / Q5_K: the 8 sub-block scales and the 8 mins, 6 bits each in 12 bytes. Scales 0-3 are
 * the low 6 bits of bytes 0-3 and mins 0-3 those of bytes 4-7; scales 4-7 take the low nibbles
 * of bytes 8-11 and the top two bits of bytes 0-3, mins 4-7 the high nibbles and the top bits
 * of bytes 4-7. Done a 4-byte word at a time: a shift moves bits 6-7 of each byte to 4-5. */
INLINE void scales_mins_k4(const uint8_t *b, uint32_t out[4]) { /* bytes: 8 scales, then 8 mins */
    uint32_t w[3];
    memcpy(w, b, sizeof w);
    out[0] = w[0] & 0x3f3f3f3fu;
    out[1] = (w[2] & 0x0f0f0f0fu) | ((w[0] >> 2) & 0x30303030u);
    out[2] = w[1] & 0x3f3f3f3fu;
    out[3] = ((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 2) & 0x30303030u);
}

/* One super-block of any K-quant as the kernels see it: 256 unsigned values (kq_values, or
 * kq_chunk 32 at a time) and, for each group of 16 (kq_scales), a scale and a minimum; weight i
 * of group g = i / 16 is
 *     w[i] = d * scale[g] * (q[i] - offset) - dmin * min[g].
 * The dot product with a Q8_K block y is then integer work up to one multiply per super-block:
 *     y.d * (d * sum_g scale[g] * (sum_i q[i] y[i] - offset * bsum[g]) - dmin * sum_g min[g] * bsum[g]),
 * exactly llama.cpp's sums, and the float weights are the products gguf-py's dequantization forms. */
typedef struct {
    int16_t scale[QK_K / 16], min[QK_K / 16];
    int offset; /* 32 for Q6_K, 4 for Q3_K (whose high bit, when clear, subtracts 4), else 0 */
    float d, dmin;
} kq_scales;

/* The formats with per-group minimums (Q2_K, Q4_K, Q5_K); the others' min[] is all zero. */
INLINE int kq_has_min(int type) { return type == PI_TYPE_Q2_K || type == PI_TYPE_Q4_K || type == PI_TYPE_Q5_K; }

INLINE int kq_offset(int type) { return type == PI_TYPE_Q6_K ? 32 : type == PI_TYPE_Q3_K ? 4 : 0; }

INLINE float kq_d(int type, const uint8_t *b) {
    switch (type) {
    case PI_TYPE_Q2_K: return f16(KQ_BLOCK(q2_K, b)->d);
    case PI_TYPE_Q3_K: return f16(KQ_BLOCK(q3_K, b)->d);
    case PI_TYPE_Q4_K: return f16(KQ_BLOCK(q4_K, b)->d);
    case PI_TYPE_Q5_K: return f16(KQ_BLOCK(q5_K, b)->d);
    case PI_TYPE_Q6_K: return f16(KQ_BLOCK(q6_K, b)->d);
    default: PI_BAD_TYPE();
    }
}

INLINE float kq_dmin(int type, const uint8_t *b) {
    switch (type) {
    case PI_TYPE_Q2_K: return f16(KQ_BLOCK(q2_K, b)->dmin);
    case PI_TYPE_Q4_K: return f16(KQ_BLOCK(q4_K, b)->dmin);
    case PI_TYPE_Q5_K: return f16(KQ_BLOCK(q5_K, b)->dmin);
    case PI_TYPE_Q3_K:
    case PI_TYPE_Q6_K: return 0.0f;
    default: PI_BAD_TYPE();
    }
}

INLINE void kq_scales_of(int type, const uint8_t *b, kq_scales *s) {
    memset(s->min, 0, sizeof s->min);
    s->offset = kq_offset(type);
    s->d = kq_d(type, b);
    s->dmin = kq_dmin(type, b);
    switch (type) {
    case PI_TYPE_Q2_K: { /* scale | min << 4 */
        const uint8_t *sc = KQ_BLOCK(q2_K, b)->scales;
        for (int g = 0; g < 16; g++) {
            s->scale[g] = sc[g] & 15;
            s->min[g] = sc[g] >> 4;
        }
        break;
    }
    case PI_TYPE_Q3_K: { /* 6-bit, offset 32: the low 4 bits in bytes 0-7, the high 2 in 8-11 */
        const uint8_t *sc = KQ_BLOCK(q3_K, b)->scales;
        for (int g = 0; g < 16; g++)
            s->scale[g] = (int16_t)((((sc[g % 8] >> (4 * (g / 8))) & 15) | (((sc[8 + g % 4] >> (2 * (g / 4))) & 3) << 4)) - 32);
        break;
    }
    case PI_TYPE_Q4_K: /* 8 sub-blocks of 32, each two groups */
    case PI_TYPE_Q5_K: {
        uint32_t w[4];
        scales_mins_k4(type == PI_TYPE_Q4_K ? KQ_BLOCK(q4_K, b)->scales : KQ_BLOCK(q5_K, b)->scales, w);
        for (int g = 0; g < 16; g++) { /* sub-block g / 2 */
            s->scale[g] = (int16_t)((w[g / 8] >> (8 * (g / 2 % 4))) & 0xff);
            s->min[g] = (int16_t)((w[2 + g / 8] >> (8 * (g / 2 % 4))) & 0xff);
        }
        break;
    }
    case PI_TYPE_Q6_K:
        for (int g = 0; g < 16; g++) s->scale[g] = KQ_BLOCK(q6_K, b)->scales[g];
        break;
    default: PI_BAD_TYPE();
    }
}

INLINE void kq_values(int type, const uint8_t *b, uint8_t q[QK_K]) {
    switch (type) {
    case PI_TYPE_Q2_K:
        for (int i = 0; i < QK_K; i++) q[i] = (uint8_t)crumb(KQ_BLOCK(q2_K, b)->qs, i);
        break;
    case PI_TYPE_Q3_K: { /* the crumb, and bit i / 32 of hmask[i % 32] as bit 2 */
        const block_q3_K *k = KQ_BLOCK(q3_K, b);
        for (int i = 0; i < QK_K; i++) q[i] = (uint8_t)(crumb(k->qs, i) | ((k->hmask[i % 32] >> (i / 32)) & 1) << 2);
        break;
    }
    case PI_TYPE_Q4_K: /* sub-blocks 2c and 2c+1 share bytes 32c.. of qs */
    case PI_TYPE_Q5_K: { /* and bit l of Q5_K's qh[j] is bit 4 of sub-block l */
        const int five = type == PI_TYPE_Q5_K;
        const uint8_t *qh = KQ_BLOCK(q5_K, b)->qh, *qs = five ? KQ_BLOCK(q5_K, b)->qs : KQ_BLOCK(q4_K, b)->qs;
        for (int l = 0; l < 8; l++)
            for (int j = 0; j < 32; j++)
                q[l * 32 + j] = (uint8_t)(((qs[(l / 2) * 32 + j] >> (4 * (l % 2))) & 15) | (five ? ((qh[j] >> l) & 1) << 4 : 0));
        break;
    }
    case PI_TYPE_Q6_K: { /* each half of 128 weights takes 64 bytes of ql (32 weights from the low
                          * nibbles, 32 from the high, twice) and 32 of qh (2 bits each) */
        const block_q6_K *k = KQ_BLOCK(q6_K, b);
        for (int h = 0; h < 2; h++)
            for (int part = 0; part < 4; part++)
                for (int j = 0; j < 32; j++)
                    q[h * 128 + part * 32 + j] =
                        (uint8_t)(((k->ql[h * 64 + (part % 2) * 32 + j] >> (4 * (part / 2))) & 15) |
                                  ((k->qh[h * 32 + j] >> (2 * part)) & 3) << 4);
        break;
    }
    default: PI_BAD_TYPE();
    }
}

#if defined(__AVX2__)
/* kq_values' bytes 32k .. 32k + 31, in a register. */
INLINE __m256i kq_chunk(int type, const uint8_t *b, int k) {
    const __m256i m2 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(15);
    switch (type) {
    case PI_TYPE_Q2_K: { /* crumbs 2s of qs[32h ..] for k = 4h + s */
        const __m256i v = _mm256_loadu_si256((const __m256i *)(KQ_BLOCK(q2_K, b)->qs + 32 * (k / 4)));
        return _mm256_and_si256(_mm256_srli_epi16(v, 2 * (k % 4)), m2);
    }
    case PI_TYPE_Q3_K: {
        const block_q3_K *q = KQ_BLOCK(q3_K, b);
        const __m256i v = _mm256_loadu_si256((const __m256i *)(q->qs + 32 * (k / 4)));
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(v, 2 * (k % 4)), m2);
        const __m256i bit = _mm256_set1_epi8((char)(1 << k)), h = _mm256_loadu_si256((const __m256i *)q->hmask);
        return _mm256_or_si256(low, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit), _mm256_set1_epi8(4)));
    }
    case PI_TYPE_Q4_K:
    case PI_TYPE_Q5_K: {
        const int five = type == PI_TYPE_Q5_K;
        const uint8_t *qs = five ? KQ_BLOCK(q5_K, b)->qs : KQ_BLOCK(q4_K, b)->qs;
        __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * (k / 2)));
        v = _mm256_and_si256(k % 2 ? _mm256_srli_epi16(v, 4) : v, m4);
        if (!five) return v;
        const __m256i bit = _mm256_set1_epi8((char)(1 << k));
        const __m256i h = _mm256_loadu_si256((const __m256i *)KQ_BLOCK(q5_K, b)->qh);
        return _mm256_or_si256(v, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit), _mm256_set1_epi8(16)));
    }
    case PI_TYPE_Q6_K: { /* k = 4h + part */
        const block_q6_K *q = KQ_BLOCK(q6_K, b);
        const int h = k / 4, part = k % 4;
        __m256i low = _mm256_loadu_si256((const __m256i *)(q->ql + h * 64 + (part % 2) * 32));
        low = _mm256_and_si256(part / 2 ? _mm256_srli_epi16(low, 4) : low, m4);
        const __m256i high = _mm256_loadu_si256((const __m256i *)(q->qh + h * 32));
        return _mm256_or_si256(low, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 2 * part), m2), 4));
    }
    default: PI_BAD_TYPE();
    }
}

/* kq_scales_of()'s scale[] and min[] as 16 int16 lanes each, built in registers: a struct
 * written 2 bytes at a time and read back 32 would stall on store forwarding. */
INLINE void kq_scale_vectors(int type, const uint8_t *b, __m256i *scale, __m256i *min) {
    const __m128i m4 = _mm_set1_epi8(15);
    *min = _mm256_setzero_si256();
    switch (type) {
    case PI_TYPE_Q2_K: {
        const __m128i v = _mm_loadu_si128((const __m128i *)KQ_BLOCK(q2_K, b)->scales);
        *scale = _mm256_cvtepu8_epi16(_mm_and_si128(v, m4));
        *min = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(v, 4), m4));
        break;
    }
    case PI_TYPE_Q3_K: { /* low nibbles of bytes 0-7 for groups 0-7, high nibbles for 8-15; two
                          * more bits from byte 8 + g % 4, at bit 2 * (g / 4) */
        const uint8_t *sc = KQ_BLOCK(q3_K, b)->scales;
        const __m128i lo = _mm_loadl_epi64((const __m128i *)sc);
        const __m128i low = _mm_unpacklo_epi64(_mm_and_si128(lo, m4), _mm_and_si128(_mm_srli_epi16(lo, 4), m4));
        const __m128i hw = _mm_srlv_epi32(_mm_set1_epi32((int)load_u32(sc + 8)), _mm_setr_epi32(0, 2, 4, 6));
        const __m128i high = _mm_slli_epi16(_mm_and_si128(hw, _mm_set1_epi8(3)), 4);
        *scale = _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_or_si128(low, high), _mm_set1_epi8(32)));
        break;
    }
    case PI_TYPE_Q4_K:
    case PI_TYPE_Q5_K: { /* each sub-block's scale and min over its two groups */
        uint32_t w[4];
        scales_mins_k4(type == PI_TYPE_Q4_K ? KQ_BLOCK(q4_K, b)->scales : KQ_BLOCK(q5_K, b)->scales, w);
        const __m128i v = _mm_setr_epi32((int)w[0], (int)w[1], (int)w[2], (int)w[3]);
        const __m128i s8 = _mm_cvtepu8_epi16(v), m8 = _mm_cvtepu8_epi16(_mm_srli_si128(v, 8));
        *scale = _mm256_set_m128i(_mm_unpackhi_epi16(s8, s8), _mm_unpacklo_epi16(s8, s8));
        *min = _mm256_set_m128i(_mm_unpackhi_epi16(m8, m8), _mm_unpacklo_epi16(m8, m8));
        break;
    }
    case PI_TYPE_Q6_K:
        *scale = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)KQ_BLOCK(q6_K, b)->scales));
        break;
    default: PI_BAD_TYPE();
    }
}

/* a token's running sum over a row: 8 lanes, added up at the row's end */
typedef __m256 kq_acc;
INLINE kq_acc kq_acc_zero(void) { return _mm256_setzero_ps(); }
INLINE float kq_acc_sum(kq_acc a) { return hsum8(a); }
#else
typedef float kq_acc;
INLINE kq_acc kq_acc_zero(void) { return 0.0f; }
INLINE float kq_acc_sum(kq_acc a) { return a; }
#endif

/* acc[t] += dot(super-block b, y[t * stride]) for tn tokens' Q8_K blocks. The scalar form
 * is the reference; the AVX2 one keeps the 8 value chunks in registers across the tokens,
 * multiplies the byte products, summed in pairs (at most 2 * 63 * 127, an int16), by each
 * group's scale into dword lanes, and leaves the lanes' float sums to the row's end. */
INLINE void dot_superblock(int type, const uint8_t *b, const block_q8k *y, int stride, int tn, kq_acc *acc) {
#if defined(__AVX2__)
    __m256i q[8], sc[8], scale16, min16;
    kq_scale_vectors(type, b, &scale16, &min16);
    const __m128i s_lo = _mm256_castsi256_si128(scale16), s_hi = _mm256_extracti128_si256(scale16, 1);
    for (int k = 0; k < 8; k++) {
        q[k] = kq_chunk(type, b, k);
        /* group 2k's scale over the low 128 bits, group 2k + 1's over the high */
        const int g = (2 * k) % 8;
        const __m256i pick = _mm256_set_m128i(_mm_set1_epi16((short)(0x0100 + 0x0202 * (g + 1))), _mm_set1_epi16((short)(0x0100 + 0x0202 * g)));
        sc[k] = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(k < 4 ? s_lo : s_hi), pick);
    }
    const __m256i off_scale = _mm256_mullo_epi16(scale16, _mm256_set1_epi16((short)kq_offset(type)));
    const float d = kq_d(type, b), dmin = kq_has_min(type) ? kq_dmin(type, b) : 0.0f;
    for (int t = 0; t < tn; t++) {
        const block_q8k *yt = y + (size_t)t * stride;
        const __m256i bsums = _mm256_loadu_si256((const __m256i *)yt->bsums);
        __m256i isum = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_madd_epi16(bsums, off_scale));
        for (int k = 0; k < 8; k++) {
            const __m256i p = _mm256_maddubs_epi16(q[k], _mm256_loadu_si256((const __m256i *)(yt->qs + 32 * k)));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, sc[k]));
        }
        __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(yt->d * d));
        if (kq_has_min(type))
            f = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(bsums, min16)), _mm256_set1_ps(yt->d * dmin), f);
        acc[t] = _mm256_add_ps(acc[t], f);
    }
#else
    kq_scales s;
    uint8_t q[QK_K];
    kq_scales_of(type, b, &s);
    kq_values(type, b, q);
    for (int t = 0; t < tn; t++) {
        const block_q8k *yt = y + (size_t)t * stride;
        int32_t is = 0, ms = 0;
        for (int g = 0; g < QK_K / 16; g++) {
            int32_t gsum = 0;
            for (int j = 0; j < 16; j++) gsum += q[16 * g + j] * yt->qs[16 * g + j];
            is += s.scale[g] * (gsum - s.offset * yt->bsums[g]);
            ms += s.min[g] * yt->bsums[g];
        }
        acc[t] += yt->d * (s.d * (float)is - s.dmin * (float)ms);
    }
#endif
}

/* The 256 weights of one super-block. */
INLINE void decode_superblock(int type, const uint8_t *b, float *w) {
    kq_scales s;
    uint8_t q[QK_K];
    kq_scales_of(type, b, &s);
    kq_values(type, b, q);
    for (int i = 0; i < QK_K; i++)
        w[i] = s.d * (float)s.scale[i / 16] * (float)(q[i] - s.offset) - s.dmin * (float)s.min[i / 16];
}

static void kq_dequant(int type, const void *row, float *y, int n) {
    const size_t sbb = pi_type_block_bytes((uint32_t)type);
    for (int s = 0; s < n / QK_K; s++) decode_superblock(type, (const uint8_t *)row + s * sbb, y + s * QK_K);
}

/* The activation as llama.cpp's K-quant dot products take it, Q8_K: each 256 values in 8 bits,
 * the value of largest magnitude mapping to -127, rounded to nearest even; and the sum of each 16.
 * The clamp only changes NaN inputs, which keeps the conversion defined; written as comparisons,
 * which compile inline where fminf and fmaxf become calls. */
static void quantize_act_k(const float *x, block_q8k *y, int n) {
    for (int b = 0; b < n / QK_K; b++, x += QK_K, y++) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK_K; j++)
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        const float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
        for (int j = 0; j < QK_K; j++) {
            const float v = iscale * x[j]; /* NaN fails the first test: 127 */
            y->qs[j] = (int8_t)nearbyintf(v <= 127.0f ? (v >= -127.0f ? v : -127.0f) : 127.0f);
        }
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += y->qs[16 * g + j];
            y->bsums[g] = (int16_t)sum;
        }
        y->d = amax != 0.0f ? 1.0f / iscale : 0.0f;
    }
}

enum { K_TOKENS = 16 }; /* tokens a decoded super-block is dotted with before the next is decoded */

/* Rows outer, then each row's super-blocks, each unpacked once for up to K_TOKENS tokens. A
 * grouped weight's super-blocks (row_groups.c) come out of their groups first: the reference tier's
 * grouped matmul, the row-major one to the bit. */
INLINE void kq_matmul_rows(int type, int grouped, const void *W, size_t row_bytes, const int32_t *idx, int r0, int nr,
                           pi_act x, int nt, float *Y, int y_stride) {
    const int nsb = x.n / QK_K;
    const size_t sbb = pi_type_block_bytes((uint32_t)type);
    for (int t0 = 0; t0 < nt; t0 += K_TOKENS) {
        const int tn = nt - t0 < K_TOKENS ? nt - t0 : K_TOKENS;
        for (int i = 0; i < nr; i++) {
            kq_acc acc[K_TOKENS];
            for (int t = 0; t < tn; t++) acc[t] = kq_acc_zero();
            for (int s = 0; s < nsb; s++) {
                pi_any_block room;
                const uint8_t *sb = (uint8_t *)&room;
                if (grouped) pi_group_row_block((uint32_t)type, W, row_bytes, r0 + i, (size_t)s, (uint8_t *)&room);
                else sb = pi_matmul_row(W, row_bytes, idx, r0, i) + s * sbb;
                dot_superblock(type, sb, x.k + (size_t)t0 * nsb + s, nsb, tn, acc);
            }
            for (int t = 0; t < tn; t++) Y[(size_t)(t0 + t) * y_stride + i] = kq_acc_sum(acc[t]);
        }
    }
}

static void kq_matmul(int type, const void *W, size_t row_bytes, const int32_t *idx, int r0, int nr, pi_act x, int nt,
                      float *Y, int y_stride) {
    kq_matmul_rows(type, 0, W, row_bytes, idx, r0, nr, x, nt, Y, y_stride);
}

static void kq_axpy_rows(int type, const void *W, size_t row_bytes, const int32_t *rows, const float *a, int n, float *y,
                      int d) {
    float w[QK_K];
    for (int j = 0; j < n; j++) {
        if (a[j] == 0.0f) continue; /* ReLU zeros: the row is not read */
        const uint8_t *row = pi_matmul_row(W, row_bytes, rows, 0, j);
        for (int s = 0; s < d / QK_K; s++) {
            decode_superblock(type, row + s * pi_type_block_bytes((uint32_t)type), w);
            for (int k = 0; k < QK_K; k++) y[s * QK_K + k] += a[j] * w[k];
        }
    }
}

#endif
