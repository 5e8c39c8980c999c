/* kernels.h - the table of compute kernels, chosen once per context.
 *
 * Tiers (as ggml): ref.c is the scalar reference; avx2.c and avx512.c replace entries
 * with SIMD versions that end in a scalar tail. Kernels are single-threaded: callers split
 * rows across the thread pool. */
#ifndef PI_KERNELS_H
#define PI_KERNELS_H
#include "quants.h"

enum { PI_IMPL_AUTO = 0, PI_IMPL_REF = 1, PI_IMPL_AVX2 = 2, PI_IMPL_AVX512 = 3 };

/* The order a row's dot product over 32-weight blocks sums in: llama.cpp's, on x86, so that
 * our 8-bit activations round as its do (a last-bit difference moves a value across a rounding
 * boundary now and then, and in a mixture of experts can flip a near-tied routing).
 * - PI_DOT_LANES (ggml's vec_dot and its tinyBLAS): eight float lanes, lane l adding
 *   fma(d_w * d_x, the integer sum of products 4l .. 4l + 3, lane l) for each block, the lanes
 *   summed at the end as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)); the formats with a
 *   minimum sum their m * s_x terms apart, an fma per block, and add them last.
 * - PI_DOT_BLOCKS (Q4_0, which llama.cpp repacks 8 rows together on AVX2 and sums in its gemv):
 *   one float, fma(the block's integer sum, d_w * d_x, sum) for each block. */
enum { PI_DOT_LANES, PI_DOT_BLOCKS };
static inline int pi_dot_order(int type) { return type == PI_TYPE_Q4_0 ? PI_DOT_BLOCKS : PI_DOT_LANES; }

/* An activation batch of nt rows of n values, in every form: float (for F32/F16/BF16
 * weights) and quantized, in 32-value blocks for the block formats (present when n % 32 == 0)
 * and in 256-value blocks for the K-quants (present when n % 256 == 0). */
typedef struct {
    const float *f;      /* [nt][n] */
    const block_q8x *q;  /* [nt][n/32], or NULL */
    const block_q8k *k;  /* [nt][n/256], or NULL */
    int n;
} pi_act;

/* Rows t0.. of an activation batch. */
static inline pi_act pi_act_from(pi_act a, int t0) {
    pi_act r = { a.f + (size_t)t0 * a.n, a.q ? a.q + (size_t)t0 * (a.n / QK) : NULL,
                 a.k ? a.k + (size_t)t0 * (a.n / QK_K) : NULL, a.n };
    return r;
}

/* Room for the quantized forms of an activation batch. */
typedef struct {
    block_q8x *q;
    block_q8k *k;
} pi_act_store;

/* Y[t * y_stride + i] = dot(row(i), x_t) for i in [0, nr), t in [0, nt),
 * where row(i) is W + (idx ? idx[i] : r0 + i) * row_bytes. */
typedef void (*pi_matmul_fn)(const void *W, size_t row_bytes, const int32_t *idx, int r0, int nr,
                             pi_act x, int nt, float *Y, int y_stride);
/* y[0..n) = the n weights of one row. */
typedef void (*pi_dequant_fn)(const void *row, float *y, int n);
/* y[0..d) += a[j] * row(j) for j in [0, n) with a[j] != 0 (rows of zero a[j] are not read),
 * where row(j) is W + (rows ? rows[j] : j) * row_bytes, a row of d weights. The sparse FFN's
 * down projection, over ffn_down_t's neuron rows. d is a multiple of the block for block types. */
typedef void (*pi_axpy_rows_fn)(const void *W, size_t row_bytes, const int32_t *rows, const float *a, int n,
                                float *y, int d);

typedef struct {
    const char *name;                      /* "ref", "avx2", "avx512" */
    void (*quantize_act)(const float *x, block_q8x *y, int n);   /* n % 32 == 0 */
    void (*quantize_act_k)(const float *x, block_q8k *y, int n); /* n % 256 == 0 */
    pi_matmul_fn matmul[PI_TYPE_COUNT];
    /* the same over grouped weights (pi_groups_hold types): no row list, r0 and nr multiples of
     * the group; row_bytes is still one row's */
    pi_matmul_fn matmul_grouped[PI_TYPE_COUNT];
    pi_dequant_fn dequant[PI_TYPE_COUNT];
    pi_axpy_rows_fn axpy_rows[PI_TYPE_COUNT];
} pi_kernels;

/* Fill *k for impl (PI_IMPL_*); AUTO picks the best the CPU supports.
 * Returns 0, or -1 when the CPU lacks the requested instruction set. */
int pi_kernels_init(pi_kernels *k, int impl);

void pi_kernels_ref(pi_kernels *k);
void pi_kernels_avx2(pi_kernels *k);   /* overrides entries of a ref-filled table */
void pi_kernels_avx512(pi_kernels *k); /* overrides entries of an avx2-filled table */

#endif
