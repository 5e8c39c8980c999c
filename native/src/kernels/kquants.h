/* kquants.h - ggml's K-quants (Q2_K .. Q6_K): 256-weight super-blocks with 16 or 8 sub-block
 * scales. Each super-block is decoded to floats and dotted with the activation rounded as
 * llama.cpp's Q8_K would. Plain C written for the compiler to vectorise: included at the end of
 * ref.c, avx2.c and avx512.c (like table.h), so each tier compiles it for its instruction set. */
#ifndef PI_KERNELS_KQUANTS_H
#define PI_KERNELS_KQUANTS_H
#include <math.h>
#include <string.h>

#include "ref.h"

enum { QK_K = 256 };

static float f16_at(const uint8_t *p) { return pi_fp16_to_f32((pi_fp16)(p[0] | p[1] << 8)); }

/* 2-bit fields, as Q2_K and Q3_K keep them: weight h*128 + s*32 + j is bits 2s..2s+1 of
 * byte h*32 + j of qs. */
static int crumb(const uint8_t *qs, int i) {
    const int h = i / 128, s = (i % 128) / 32, j = i % 32;
    return (qs[h * 32 + j] >> (2 * s)) & 3;
}

/* Q4_K / Q5_K sub-block scales and mins: 6 bits each, packed into 12 bytes. */
static void scale_min_k4(const uint8_t *s, int l, int *sc, int *m) {
    if (l < 4) {
        *sc = s[l] & 63;
        *m = s[l + 4] & 63;
    } else {
        *sc = (s[l + 4] & 15) | ((s[l - 4] >> 2) & 0x30);
        *m = (s[l + 4] >> 4) | ((s[l] >> 2) & 0x30);
    }
}

/* The 256 weights of one super-block. */
static void decode_superblock(int type, const uint8_t *b, float *w) {
    switch (type) {
    case PI_TYPE_Q2_K: { /* scales[16] (scale | min << 4), qs[64], d, dmin */
        const uint8_t *scales = b, *qs = b + 16;
        const float d = f16_at(b + 80), dmin = f16_at(b + 82);
        for (int i = 0; i < QK_K; i++) {
            const int l = i / 16;
            w[i] = d * (float)(scales[l] & 15) * (float)crumb(qs, i) - dmin * (float)(scales[l] >> 4);
        }
        break;
    }
    case PI_TYPE_Q3_K: { /* hmask[32], qs[64], scales[12] (6-bit, offset 32), d */
        const uint8_t *hmask = b, *qs = b + 32, *sc = b + 96;
        const float d = f16_at(b + 108);
        for (int i = 0; i < QK_K; i++) {
            const int k = i / 16;
            const int scale = (((sc[k % 8] >> (4 * (k / 8))) & 15) | (((sc[8 + k % 4] >> (2 * (k / 4))) & 3) << 4)) - 32;
            const int high = (hmask[i % 32] >> (i / 32)) & 1; /* a clear bit subtracts 4 */
            w[i] = d * (float)scale * (float)(crumb(qs, i) - (high ? 0 : 4));
        }
        break;
    }
    case PI_TYPE_Q4_K: /* d, dmin, scales[12], qs[128]: sub-blocks 2c and 2c+1 share bytes 32c.. */
    case PI_TYPE_Q5_K: { /* d, dmin, scales[12], qh[32], qs[128]: bit l of qh[j] is bit 4 of sub-block l */
        const float d = f16_at(b), dmin = f16_at(b + 2);
        const int five = type == PI_TYPE_Q5_K;
        const uint8_t *qh = b + 16, *qs = b + (five ? 48 : 16);
        for (int l = 0; l < 8; l++) {
            int sc, m;
            scale_min_k4(b + 4, l, &sc, &m);
            const float scale = d * (float)sc, min = dmin * (float)m;
            const uint8_t *q = qs + (l / 2) * 32;
            const int shift = 4 * (l % 2);
            float *out = w + l * 32;
            for (int j = 0; j < 32; j++) {
                const int high = five ? ((qh[j] >> l) & 1) << 4 : 0;
                out[j] = scale * (float)(((q[j] >> shift) & 15) | high) - min;
            }
        }
        break;
    }
    default: { /* PI_TYPE_Q6_K: ql[128], qh[64], scales[16] (int8), d; each half of 128 weights
                * takes 64 bytes of ql (low nibbles, then high) and 32 of qh (2 bits each) */
        const int8_t *scales = (const int8_t *)(b + 192);
        const float d = f16_at(b + 208);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b + h * 64, *qh = b + 128 + h * 32;
            for (int part = 0; part < 4; part++) { /* 32 weights: ql nibble part / 2, qh bits 2 * part */
                float *out = w + h * 128 + part * 32;
                const float s0 = d * (float)scales[h * 8 + part * 2], s1 = d * (float)scales[h * 8 + part * 2 + 1];
                for (int j = 0; j < 32; j++) {
                    const int low = (ql[(part % 2) * 32 + j] >> (4 * (part / 2))) & 15;
                    const int high = (qh[j] >> (2 * part)) & 3;
                    out[j] = (j < 16 ? s0 : s1) * (float)((low | high << 4) - 32);
                }
            }
        }
        break;
    }
    }
}

static size_t superblock_bytes(int type) { return (size_t)pi_type_get((uint32_t)type)->type_size; }

static void kq_dequant(int type, const void *row, float *y, int n) {
    for (int s = 0; s < n / QK_K; s++) decode_superblock(type, (const uint8_t *)row + s * superblock_bytes(type), y + s * QK_K);
}

/* The activation as llama.cpp's K-quant dot products see it: each 256 values quantized to 8
 * bits (Q8_K: the value of largest magnitude maps to -127, round to nearest even), here kept
 * as the floats d * q. */
static void q8k_round(const float *x, float *out) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK_K; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    if (amax == 0.0f) {
        memset(out, 0, QK_K * sizeof(float));
        return;
    }
    const float iscale = -127.0f / max, d = 1.0f / iscale;
    for (int j = 0; j < QK_K; j++) {
        const float q = nearbyintf(iscale * x[j]);
        out[j] = d * (q < 127.0f ? q : 127.0f);
    }
}

/* sum of a[j] * b[j] over a super-block, in 16 lanes: one AVX-512 register, two AVX2 ones */
static float dot_superblock(const float *a, const float *b) {
    float acc[16] = { 0 };
    for (int j = 0; j < QK_K; j += 16)
        for (int k = 0; k < 16; k++) acc[k] += a[j + k] * b[j + k];
    for (int width = 8; width > 0; width /= 2)
        for (int k = 0; k < width; k++) acc[k] += acc[k + width];
    return acc[0];
}

enum { K_TOKENS = 16 }; /* tokens whose rounded activations are held at once (16 KiB) */

static void kq_matmul(int type, const void *W, size_t row_bytes, const int32_t *idx, int r0, int nr, pi_act x, int nt,
                   float *Y, int y_stride) {
    float w[QK_K], xs[K_TOKENS][QK_K];
    for (int t = 0; t < nt; t++)
        for (int i = 0; i < nr; i++) Y[(size_t)t * y_stride + i] = 0.0f;
    for (int t0 = 0; t0 < nt; t0 += K_TOKENS) {
        const int tn = nt - t0 < K_TOKENS ? nt - t0 : K_TOKENS;
        for (int s = 0; s < x.n / QK_K; s++) {
            for (int t = 0; t < tn; t++) q8k_round(x.f + (size_t)(t0 + t) * x.n + s * QK_K, xs[t]);
            for (int i = 0; i < nr; i++) {
                decode_superblock(type, pi_matmul_row(W, row_bytes, idx, r0, i) + s * superblock_bytes(type), w);
                for (int t = 0; t < tn; t++) Y[(size_t)(t0 + t) * y_stride + i] += dot_superblock(w, xs[t]);
            }
        }
    }
}

static void kq_axpy_rows(int type, const void *W, size_t row_bytes, const int32_t *rows, const float *a, int n, float *y,
                      int d) {
    float w[QK_K];
    for (int j = 0; j < n; j++) {
        if (a[j] == 0.0f) continue; /* ReLU zeros: the row is not read */
        const uint8_t *row = pi_matmul_row(W, row_bytes, rows, 0, j);
        for (int s = 0; s < d / QK_K; s++) {
            decode_superblock(type, row + s * superblock_bytes(type), w);
            for (int k = 0; k < QK_K; k++) y[s * QK_K + k] += a[j] * w[k];
        }
    }
}

/* one named entry per type, as table.h does for the 32-weight formats */
static void matmul_q2_k(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { kq_matmul(PI_TYPE_Q2_K, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_q3_k(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { kq_matmul(PI_TYPE_Q3_K, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_q4_k(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { kq_matmul(PI_TYPE_Q4_K, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_q5_k(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { kq_matmul(PI_TYPE_Q5_K, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_q6_k(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { kq_matmul(PI_TYPE_Q6_K, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void dequant_q2_k(const void *row, float *y, int n) { kq_dequant(PI_TYPE_Q2_K, row, y, n); }
static void dequant_q3_k(const void *row, float *y, int n) { kq_dequant(PI_TYPE_Q3_K, row, y, n); }
static void dequant_q4_k(const void *row, float *y, int n) { kq_dequant(PI_TYPE_Q4_K, row, y, n); }
static void dequant_q5_k(const void *row, float *y, int n) { kq_dequant(PI_TYPE_Q5_K, row, y, n); }
static void dequant_q6_k(const void *row, float *y, int n) { kq_dequant(PI_TYPE_Q6_K, row, y, n); }
static void axpy_rows_q2_k(const void *W, size_t rb, const int32_t *rows, const float *a, int n, float *y, int d) { kq_axpy_rows(PI_TYPE_Q2_K, W, rb, rows, a, n, y, d); }
static void axpy_rows_q3_k(const void *W, size_t rb, const int32_t *rows, const float *a, int n, float *y, int d) { kq_axpy_rows(PI_TYPE_Q3_K, W, rb, rows, a, n, y, d); }
static void axpy_rows_q4_k(const void *W, size_t rb, const int32_t *rows, const float *a, int n, float *y, int d) { kq_axpy_rows(PI_TYPE_Q4_K, W, rb, rows, a, n, y, d); }
static void axpy_rows_q5_k(const void *W, size_t rb, const int32_t *rows, const float *a, int n, float *y, int d) { kq_axpy_rows(PI_TYPE_Q5_K, W, rb, rows, a, n, y, d); }
static void axpy_rows_q6_k(const void *W, size_t rb, const int32_t *rows, const float *a, int n, float *y, int d) { kq_axpy_rows(PI_TYPE_Q6_K, W, rb, rows, a, n, y, d); }

static void fill_kquants(pi_kernels *k) {
    k->matmul[PI_TYPE_Q2_K] = matmul_q2_k;
    k->matmul[PI_TYPE_Q3_K] = matmul_q3_k;
    k->matmul[PI_TYPE_Q4_K] = matmul_q4_k;
    k->matmul[PI_TYPE_Q5_K] = matmul_q5_k;
    k->matmul[PI_TYPE_Q6_K] = matmul_q6_k;
    k->dequant[PI_TYPE_Q2_K] = dequant_q2_k;
    k->dequant[PI_TYPE_Q3_K] = dequant_q3_k;
    k->dequant[PI_TYPE_Q4_K] = dequant_q4_k;
    k->dequant[PI_TYPE_Q5_K] = dequant_q5_k;
    k->dequant[PI_TYPE_Q6_K] = dequant_q6_k;
    k->axpy_rows[PI_TYPE_Q2_K] = axpy_rows_q2_k;
    k->axpy_rows[PI_TYPE_Q3_K] = axpy_rows_q3_k;
    k->axpy_rows[PI_TYPE_Q4_K] = axpy_rows_q4_k;
    k->axpy_rows[PI_TYPE_Q5_K] = axpy_rows_q5_k;
    k->axpy_rows[PI_TYPE_Q6_K] = axpy_rows_q6_k;
}

#endif
