/* vec.h - float vector ops of the forward pass (attention, norms, activations).
 * A scalar reference and an AVX2 version; the table is chosen once per context. */
#ifndef PI_VEC_H
#define PI_VEC_H
#include <stddef.h>

#include "quants.h"

typedef struct {
    const char *name;
    void (*axpy)(float a, const float *x, float *y, int n);      /* y += a * x */
    float (*exp_sub_sum)(float *x, float max, int n);            /* x = exp(x - max); returns the sum */
    void (*silu_mul)(const float *gate, const float *up, float *out, int n); /* out = silu(gate) * up */
    float (*sum_squares)(const float *x, int n);
    /* attention over the KV cache, which is f16 as llama.cpp's default: rows p < n of hd values
     * at k + p * stride */
    void (*scores_f16)(const float *q, const pi_fp16 *k, size_t stride, int n, int hd, float scale,
                       float *out);                                  /* out[p] = scale * q . k_p */
    void (*probs_f16)(float *p, float a, int n);                     /* p = f16(a * p), as llama.cpp rounds them */
    void (*mix_f16)(const float *p, const pi_fp16 *v, size_t stride, int n, int hd,
                    float *out);                                     /* out = sum_p p[p] v_p */
    void (*mix_q8_0)(const float *p, const uint8_t *v, size_t stride, int n, int hd,
                     float *out);                                    /* the same over q8_0 rows, stride in bytes */
    void (*to_f16)(const float *x, pi_fp16 *y, int n);
} pi_vec_ops;

void pi_vec_ops_init(pi_vec_ops *v, int use_simd);

#endif
