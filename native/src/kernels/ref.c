/* ref.c - the scalar reference for every kernel: plain C, one block at a time.
 * It defines the results the SIMD tiers must reproduce, and PI_IMPL_REF forces it. */
#include <math.h>
#include <string.h>

#include "common.h"
#include "kquants.h"
#include "ref.h"
#include "table.h"

/* Activation blocks: d = amax / 127, qs = round-to-nearest-even(x * (127 / amax)) as ggml rounds them, s = d * sum(qs), d and s in f16.
 * Multiplying by 127 / amax (not dividing by d) and rounding to even is what the SIMD tiers do too,
 * so all tiers produce bit-identical blocks. */
static void quantize_act(const float *x, block_q8x *y, int n) {
    for (int b = 0; b < n / QK; b++, x += QK, y++) {
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK; j++) {
            /* The clamp only changes NaN inputs (to -127), which keeps the conversion defined. */
            const float v = fminf(fmaxf(x[j] * id, -127.0f), 127.0f);
            y->qs[j] = (int8_t)nearbyintf(v);
            sum += y->qs[j];
        }
        pi_act_block_scales(y, d, sum);
    }
}

/* Every block format, decoded: the weights are w[j] = d * q[j] + m. */
typedef struct {
    int8_t q[QK];
    float d, m;
} decoded_block;

/* The 4-bit formats keep weight j in the low nibble of qs[j] and weight j + 16 in its high
 * nibble; the 5-bit ones add bit 4 of weight j as bit j of the little-endian word qh. */
static void unpack_nibbles(const uint8_t *qs, const uint8_t *qh, int offset, int8_t *q) {
    const uint32_t h = qh ? (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24 : 0;
    for (int j = 0; j < QK / 2; j++) {
        q[j] = (int8_t)(((qs[j] & 0x0f) | ((h >> j) & 1) << 4) - offset);
        q[j + QK / 2] = (int8_t)(((qs[j] >> 4) | ((h >> (j + QK / 2)) & 1) << 4) - offset);
    }
}

static void decode_block(int type, const uint8_t *block, decoded_block *w) {
    w->m = 0.0f;
    switch (type) {
    case PI_TYPE_Q4_0: {
        const block_q4_0 *b = (const block_q4_0 *)block;
        w->d = pi_fp16_to_f32(b->d);
        unpack_nibbles(b->qs, NULL, 8, w->q);
        break;
    }
    case PI_TYPE_Q4_1: {
        const block_q4_1 *b = (const block_q4_1 *)block;
        w->d = pi_fp16_to_f32(b->d);
        w->m = pi_fp16_to_f32(b->m);
        unpack_nibbles(b->qs, NULL, 0, w->q);
        break;
    }
    case PI_TYPE_Q5_0: {
        const block_q5_0 *b = (const block_q5_0 *)block;
        w->d = pi_fp16_to_f32(b->d);
        unpack_nibbles(b->qs, b->qh, 16, w->q);
        break;
    }
    case PI_TYPE_Q5_1: {
        const block_q5_1 *b = (const block_q5_1 *)block;
        w->d = pi_fp16_to_f32(b->d);
        w->m = pi_fp16_to_f32(b->m);
        unpack_nibbles(b->qs, b->qh, 0, w->q);
        break;
    }
    case PI_TYPE_Q8_0: {
        const block_q8_0 *b = (const block_q8_0 *)block;
        w->d = pi_fp16_to_f32(b->d);
        memcpy(w->q, b->qs, QK);
        break;
    }
    default: PI_BAD_TYPE();
    }
}

/* A row's dot product part way through its blocks, summed in pi_dot_order(type). */
typedef struct {
    float lane[8]; /* PI_DOT_LANES: lane l, products 4l .. 4l + 3 of each block */
    float sum;     /* PI_DOT_BLOCKS */
    float mins;    /* m * s_x, for the formats with a minimum */
} dot_sum;

/* add dot(w, x) = d * dx * sum(q * qx) + m * sum(dx * qx) of one block; the second sum is x->s */
static void dot_add_block(int type, const uint8_t *block, const block_q8x *x, dot_sum *acc) {
    decoded_block w;
    decode_block(type, block, &w);
    const float d = w.d * x->d;
    int32_t isum[8] = { 0 };
    for (int j = 0; j < QK; j++) isum[j / 4] += w.q[j] * x->qs[j];
    if (pi_dot_order(type) == PI_DOT_BLOCKS) {
        acc->sum = fmaf((float)(isum[0] + isum[1] + isum[2] + isum[3] + isum[4] + isum[5] + isum[6] + isum[7]), d,
                        acc->sum);
    } else {
        for (int l = 0; l < 8; l++) acc->lane[l] = fmaf(d, (float)isum[l], acc->lane[l]);
    }
    acc->mins = fmaf(w.m, x->s, acc->mins); /* m = 0 adds nothing */
}

static float dot_total(int type, const dot_sum *acc) {
    const float *l = acc->lane;
    const float total = pi_dot_order(type) == PI_DOT_BLOCKS
                            ? acc->sum
                            : ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
    return total + acc->mins;
}

/* dot(a block-type row, x) over its nb blocks */
static float dot_blocks(int type, const void *row, const block_q8x *x, int nb) {
    const size_t block_bytes = pi_type_block_bytes((uint32_t)type);
    dot_sum acc = { { 0 }, 0, 0 };
    for (int b = 0; b < nb; b++) dot_add_block(type, (const uint8_t *)row + (size_t)b * block_bytes, x + b, &acc);
    return dot_total(type, &acc);
}

static float load_float(int type, const void *row, int i) {
    switch (type) {
    case PI_TYPE_F16: return pi_fp16_to_f32(((const pi_fp16 *)row)[i]);
    case PI_TYPE_BF16: return pi_bf16_to_f32(((const pi_bf16 *)row)[i]);
    case PI_TYPE_F32: return ((const float *)row)[i];
    default: PI_BAD_TYPE();
    }
}

float pi_ref_dot_floats(int type, const void *row, const float *x, int i0, int n) {
    float sum = 0.0f;
    for (int i = i0; i < n; i++) sum += load_float(type, row, i) * pi_act_as_weight_type(type, x[i]);
    return sum;
}

static void matmul(int type, const void *W, size_t row_bytes, const int32_t *idx, int r0, int nr,
                   pi_act x, int nt, float *Y, int y_stride) {
    const int nb = x.n / QK, blocks = pi_type_block_size((uint32_t)type) == QK;
    for (int i = 0; i < nr; i++) {
        const uint8_t *row = pi_matmul_row(W, row_bytes, idx, r0, i);
        for (int t = 0; t < nt; t++) {
            Y[(size_t)t * y_stride + i] = blocks ? dot_blocks(type, row, x.q + (size_t)t * nb, nb)
                                                 : pi_ref_dot_floats(type, row, x.f + (size_t)t * x.n, 0, x.n);
        }
    }
}

/* Over grouped weights: each block of a row taken back out of its group, then the same dot in
 * the same order, so that the result is the row-major one to the bit. */
static void matmul_grouped(int type, const void *W, size_t row_bytes, const int32_t *idx, int r0, int nr,
                           pi_act x, int nt, float *Y, int y_stride) {
    const int nb = x.n / QK;
    if (pi_type_is_kquant((uint32_t)type)) {
        kq_matmul_rows(type, 1, W, row_bytes, idx, r0, nr, x, nt, Y, y_stride);
        return;
    }
    for (int i = 0; i < nr; i++)
        for (int t = 0; t < nt; t++) {
            dot_sum acc = { { 0 }, 0, 0 };
            for (int b = 0; b < nb; b++) {
                uint8_t block[sizeof(block_q8_0)];
                pi_group_row_block((uint32_t)type, W, row_bytes, r0 + i, (size_t)b, block);
                dot_add_block(type, block, x.q + (size_t)t * nb + b, &acc);
            }
            Y[(size_t)t * y_stride + i] = dot_total(type, &acc);
        }
}

/* The 32 weights of one block as floats, w = d * q + m: what dequant stores and axpy_rows adds. */
static void block_floats(int type, const uint8_t *block, float *w) {
    decoded_block b;
    decode_block(type, block, &b);
    for (int j = 0; j < QK; j++) w[j] = b.d * b.q[j] + b.m;
}

void pi_ref_dequant(int type, const void *row, float *y, int n) {
    if (pi_type_block_size((uint32_t)type) == 1) {
        for (int i = 0; i < n; i++) y[i] = load_float(type, row, i);
        return;
    }
    const int block_bytes = (int)pi_type_block_bytes((uint32_t)type);
    for (int b = 0; b < n / QK; b++) block_floats(type, (const uint8_t *)row + (size_t)b * block_bytes, y + b * QK);
}

void pi_ref_axpy_floats(int type, const void *row, float a, float *y, int i0, int n) {
    for (int i = i0; i < n; i++) y[i] += a * load_float(type, row, i);
}

static void axpy_rows(int type, const void *W, size_t row_bytes, const int32_t *rows, const float *a, int n,
                      float *y, int d) {
    const int blocks = pi_type_block_size((uint32_t)type) == QK;
    const int block_bytes = (int)pi_type_block_bytes((uint32_t)type);
    for (int j = 0; j < n; j++) {
        if (a[j] == 0.0f) continue; /* ReLU zeros: the row is not even read */
        const uint8_t *row = pi_matmul_row(W, row_bytes, rows, 0, j);
        if (!blocks) {
            pi_ref_axpy_floats(type, row, a[j], y, 0, d);
            continue;
        }
        for (int b = 0; b < d / QK; b++) {
            float w[QK];
            block_floats(type, row + (size_t)b * block_bytes, w);
            for (int k = 0; k < QK; k++) y[b * QK + k] += a[j] * w[k];
        }
    }
}

static void dequant(int type, const void *row, float *y, int n) { pi_ref_dequant(type, row, y, n); }

PI_KERNEL_TABLE(fill_table, quantize_act, quantize_act_k, matmul, dequant, axpy_rows, kq_matmul, kq_dequant,
                kq_axpy_rows)
PI_GROUPED_TABLE(fill_grouped, matmul_grouped)

void pi_kernels_ref(pi_kernels *k) {
    memset(k, 0, sizeof *k);
    fill_table(k, "ref");
    fill_grouped(k);
}
