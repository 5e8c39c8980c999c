/* kv_cache.c - the KV cache's row formats (kv_format.h), rounded as llama.cpp's CPU backend
 * rounds them. As llama.cpp (llama-kv-cache.cpp, attn_rot_k / attn_rot_v), a quantized cache holds
 * its rows rotated by an orthonormal Walsh-Hadamard matrix H, which spreads a head's outlier
 * channels over its block so they cost less precision: keys and q are rotated alike (q.k is
 * unchanged, as H is orthonormal), values are rotated in, and the attention output back out
 * (H * H = I). Rows enter the cache through ggml's x86 quantize_row_q8_0 and the reference
 * quantize_row_q4_0, quantized keys are dotted with q in q8_0 (both types' vec-dot type), and
 * quantized values are decoded and summed in f32 with f32 weights (its flash attention, which
 * llama.cpp needs for a quantized V). The dots and sums are the weight kernels' (matmul and
 * axpy_rows, with their reference and SIMD tiers); what is new here is scalar, O(kv_dim) a token. */
#include <math.h>
#include <string.h>

#include "kv_cache.h"
#include "ops.h"

/* x (n a power of 2) times H / sqrt(n), as ggml's fast Walsh-Hadamard transform rounds it: scaled
 * first, then the butterflies from the narrowest */
static void fwht(float *x, int n) {
    const float scale = 1.0f / sqrtf((float)n);
    for (int j = 0; j < n; j++) x[j] *= scale;
    for (int len = 1; len < n; len <<= 1)
        for (int i = 0; i < n; i += 2 * len)
            for (int j = i; j < i + len; j++) {
                const float u = x[j], v = x[j + len];
                x[j] = u + v;
                x[j + len] = u - v;
            }
}

/* the rotation's width for a cache of type, 0 for none: llama.cpp rotates a quantized cache of
 * head_dim a multiple of 64, keys by the widest power of 2 dividing head_dim, values by 64 */
static int rotation(const pi_context *c, int32_t type, int keys) {
    const int hd = c->model->head_dim;
    if (type == PI_TYPE_F16 || hd % 64) return 0;
    int n = 64;
    while (keys && hd % (2 * n) == 0) n *= 2;
    return n;
}

static void rotate(float *x, size_t count, int n) {
    for (size_t i = 0; n && i < count; i += (size_t)n) fwht(x + i, n);
}

/* One q8_0 block as ggml's AVX2 quantize_row_q8_0: d = amax / 127 stored in f16, the values
 * times 127 / amax (not 1 / d) rounded to nearest even. Returns d in f16. */
static pi_fp16 q8_0_block(const float *x, int8_t *qs) {
    float amax = 0.0f;
    for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int j = 0; j < QK; j++) qs[j] = (int8_t)nearbyintf(fminf(fmaxf(x[j] * id, -127.0f), 127.0f)); /* NaN: -127 */
    return pi_f32_to_fp16(amax / 127.0f);
}

static void quantize_q8_0(const float *x, block_q8_0 *y, size_t nb) {
    for (size_t b = 0; b < nb; b++) y[b].d = q8_0_block(x + b * QK, y[b].qs);
}

/* ggml's quantize_row_q4_0_ref: d = (the value of largest magnitude, sign kept) / -8, values
 * times 1 / d plus 8.5, truncated, at most 15; value j in the low nibble of byte j, j + 16 high. */
static void quantize_q4_0(const float *x, block_q4_0 *y, size_t nb) {
    for (size_t b = 0; b < nb; b++, x += QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK; j++)
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        const float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = pi_f32_to_fp16(d);
        for (int j = 0; j < QK / 2; j++) {
            const uint8_t lo = (uint8_t)fminf(15.0f, fmaxf(x[j] * id + 8.5f, 0.0f)); /* fmaxf: NaN to 0 */
            const uint8_t hi = (uint8_t)fminf(15.0f, fmaxf(x[j + QK / 2] * id + 8.5f, 0.0f));
            y[b].qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

/* n values (whole rows) into rows of type at dst */
static void store_rows(const pi_context *c, int32_t type, const float *x, uint8_t *dst, size_t n) {
    switch (type) {
    case PI_TYPE_F16: c->vec.to_f16(x, (pi_fp16 *)dst, (int)n); return;
    case PI_TYPE_Q8_0: quantize_q8_0(x, (block_q8_0 *)dst, n / QK); return;
    case PI_TYPE_Q4_0: quantize_q4_0(x, (block_q4_0 *)dst, n / QK); return;
    default: PI_BAD_TYPE(); /* pi_context_alloc accepts only the three */
    }
}

void pi_kv_store(pi_context *c, int il, int n) {
    const size_t kv_dim = (size_t)c->model->info.n_head_kv * c->model->head_dim;
    rotate(c->s.k, (size_t)n * kv_dim, rotation(c, c->params.type_k, 1)); /* c->s.k and c->s.v are not read again */
    rotate(c->s.v, (size_t)n * kv_dim, rotation(c, c->params.type_v, 0));
    for (int i = 0; i < c->s.n_segs; i++) { /* a segment's rows are contiguous */
        const pi_segment *s = &c->s.segs[i];
        const size_t row = (size_t)il * c->n_ctx + (size_t)s->seq * c->kv.seq_ctx + (size_t)s->pos0;
        const size_t at = (size_t)s->first * kv_dim, count = (size_t)s->n * kv_dim;
        store_rows(c, c->params.type_k, c->s.k + at, c->kv.k_cache + row * c->kv.k_row, count);
        store_rows(c, c->params.type_v, c->s.v + at, c->kv.v_cache + row * c->kv.v_row, count);
    }
}

void pi_kv_prepare_q(pi_context *c, int n) {
    const size_t q_dim = (size_t)c->model->info.n_head * c->model->head_dim;
    if (c->params.type_k == PI_TYPE_F16) {
        /* llama.cpp multiplies q with f16 keys in f16: rounded (times one, exact) as the vector ops round */
        c->vec.probs_f16(c->s.q, 1.0f, (int)((size_t)n * q_dim));
        return;
    }
    rotate(c->s.q, (size_t)n * q_dim, rotation(c, c->params.type_k, 1)); /* as the keys */
    /* q8_0 blocks in the activation block layout, so the weight kernels take them: d exactly the
     * f16 scale, and s = d * sum(qs) for q4_0's offset of 8 */
    for (size_t b = 0; b < (size_t)n * q_dim / QK; b++) {
        block_q8x *y = &c->s.xq.q[b];
        y->d = pi_fp16_to_f32(q8_0_block(c->s.q + b * QK, y->qs));
        int sum = 0;
        for (int j = 0; j < QK; j++) sum += y->qs[j];
        y->s = y->d * (float)sum;
    }
}

void pi_kv_scores(const pi_context *c, int t, int h, const uint8_t *k, int n, float scale, float *out) {
    const int hd = c->model->head_dim;
    const size_t at = (size_t)t * c->model->info.n_head + (size_t)h; /* the head's q among the step's */
    if (c->params.type_k == PI_TYPE_F16) {
        c->vec.scores_f16(c->s.q + at * hd, (const pi_fp16 *)k, c->kv.k_row / sizeof(pi_fp16), n, hd, scale, out);
        return;
    }
    const pi_act q = { c->s.q + at * hd, c->s.xq.q + at * (size_t)(hd / QK), NULL, hd };
    c->kern.matmul[c->params.type_k](k, c->kv.k_row, NULL, 0, n, q, 1, out, n);
    for (int p = 0; p < n; p++) out[p] *= scale;
}

void pi_kv_mix(const pi_context *c, float *e, float inv_sum, const uint8_t *v, int n, float *out) {
    const int hd = c->model->head_dim;
    if (c->params.type_v == PI_TYPE_F16) {
        /* probabilities rounded to f16 as llama.cpp's f16 KQ·V product does */
        c->vec.probs_f16(e, inv_sum, n);
        c->vec.mix_f16(e, (const pi_fp16 *)v, c->kv.v_row / sizeof(pi_fp16), n, hd, out);
        return;
    }
    /* flash attention's order: the exponentials' weighted sum, scaled by 1 / sum at the end */
    if (c->params.type_v == PI_TYPE_Q8_0) {
        c->vec.mix_q8_0(e, v, c->kv.v_row, n, hd, out);
    } else {
        memset(out, 0, (size_t)hd * sizeof(float));
        c->kern.axpy_rows[c->params.type_v](v, c->kv.v_row, NULL, e, n, out, hd);
    }
    for (int i = 0; i < hd; i++) out[i] *= inv_sum;
    rotate(out, (size_t)hd, rotation(c, c->params.type_v, 0)); /* back from the values' rotation */
}
