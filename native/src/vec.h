/* vec.h - float vector ops of the forward pass (attention, norms, activations).
 * A scalar reference and an AVX2 version; the table is chosen once per context. */
#ifndef PI_VEC_H
#define PI_VEC_H
#include "quants.h"

typedef struct {
    const char *name;
    void (*axpy)(float a, const float *x, float *y, int n);      /* y += a * x */
    float (*exp_sub_sum)(float *x, float max, int n);            /* x = exp(x - max); returns the sum */
    void (*silu_mul)(const float *gate, const float *up, float *out, int n); /* out = silu(gate) * up */
    float (*sum_squares)(const float *x, int n);
    /* the KV cache is f16, as llama.cpp's default */
    float (*dot_f16)(const float *a, const pi_fp16 *b, int n);
    void (*axpy_f16)(float a, const pi_fp16 *x, float *y, int n);  /* y += a * x */
    void (*to_f16)(const float *x, pi_fp16 *y, int n);
} pi_vec_ops;

void pi_vec_ops_init(pi_vec_ops *v, int use_simd);

#endif
