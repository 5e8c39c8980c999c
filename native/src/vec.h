/* vec.h - float vector ops of the forward pass (attention, norms, activations).
 * A scalar reference, AVX2 and AVX-512 versions; the table is chosen once per context. */
#ifndef PI_VEC_H
#define PI_VEC_H
#include <stddef.h>

#include "quants.h"

/* the most queries the tile ops below take in a call (attention.c's work items) */
enum { PI_ATT_ROWS = 32 };

typedef struct {
    const char *name;
    void (*axpy)(float a, const float *x, float *y, int n);      /* y += a * x */
    float (*max)(const float *x, int n);                         /* the largest of x (-inf for n = 0) */
    double (*exp_sub_sum)(float *x, float max, int n);           /* x = exp(x - max); returns the sum */
    void (*silu_mul)(const float *gate, const float *up, float *out, int n); /* out = silu(gate) * up */
    /* rope: pairs (x[i * step], x[i * step + other]), i < half, rotated by cs[2i] (cos), cs[2i + 1] (sin) */
    void (*rotate)(float *x, const float *cs, int half, int step, int other);
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
    /* scores_f16 and mix_f16 of nq queries at once, each key and value row loaded for all of them;
     * each query's sums are exactly its own call's. Scores of query r go to out + r * ostride;
     * query r mixes rows lo[r]..hi[r] with weights w + r * wstride (indexed by row) into out[r]. */
    void (*scores_f16_tile)(const float *const *q, int nq, const pi_fp16 *k, size_t stride, int n, int hd,
                            float scale, float *out, size_t ostride);
    void (*mix_f16_tile)(const float *w, size_t wstride, const int *lo, const int *hi, int nq, const pi_fp16 *v,
                         size_t stride, int hd, float *const *out);
} pi_vec_ops;

/* the ops of impl (PI_IMPL_*): the scalar reference, AVX2, or AVX2 with AVX-512 where it pays
 * (PI_IMPL_AVX512, or AUTO on a CPU that has it) */
void pi_vec_ops_init(pi_vec_ops *v, int impl);

#endif
