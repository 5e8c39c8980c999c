/* api.c - the kernels as public entry points, for tests and micro-benchmarks. Each call
 * builds its own table and activation buffer: simple, and cheap next to the work. */
#include <stdlib.h>
#include <string.h>

#include "cuda/weights.h"
#include "kernels.h"
#include "status.h"
#include "vec.h"

/* The kernel table for impl, or an error naming why there is none. */
static int kernels_for(int32_t impl, pi_kernels *k) {
    if (impl < PI_IMPL_AUTO || impl > PI_IMPL_AVX512) return pi_set_error(PI_ERR_ARG, "unknown kernel impl %d", impl);
    if (pi_kernels_init(k, impl) != 0)
        return pi_set_error(PI_ERR_UNSUPPORTED, "kernel impl %d is not available on this CPU", impl);
    return PI_OK;
}

/* The facts of `type` for rows of n weights, or an error. */
static int row_type(int32_t type, int32_t n, const pi_type_info **info) {
    *info = pi_type_get((uint32_t)type);
    if (!*info) return pi_set_error(PI_ERR_UNSUPPORTED, "unsupported tensor type %s", pi_type_name((uint32_t)type));
    if (n <= 0 || n % (*info)->block_size != 0)
        return pi_set_error(PI_ERR_ARG, "row length %d is not a positive multiple of %s's block of %d", n,
                            (*info)->name, (*info)->block_size);
    return PI_OK;
}

PI_API uint64_t pi_type_row_bytes(int32_t type, int64_t n) {
    const pi_type_info *info = pi_type_get((uint32_t)type);
    if (!info || n < 0 || n % info->block_size != 0) return 0;
    return (uint64_t)(n / info->block_size) * (uint64_t)info->type_size;
}

PI_API int pi_kernel_dequant(int32_t type, int32_t impl, const void *row, int32_t n, float *out) {
    const pi_type_info *info;
    pi_kernels k;
    int rc = row_type(type, n, &info);
    if (rc == PI_OK) rc = kernels_for(impl, &k);
    if (rc != PI_OK) return rc;
    if (!row || !out) return pi_set_error(PI_ERR_ARG, "pi_kernel_dequant: NULL row or output");
    k.dequant[type](row, out, n);
    return PI_OK;
}

/* n_rows of `type` in the grouped layout: a type that has it, whole groups */
static int groups_of(int32_t type, const pi_type_info *info, int32_t n_rows) {
    if (!pi_groups_hold((uint32_t)type)) return pi_set_error(PI_ERR_UNSUPPORTED, "%s has no grouped layout", info->name);
    if (n_rows < 0 || n_rows % PI_GROUP_ROWS)
        return pi_set_error(PI_ERR_ARG, "grouped rows: %d is not a multiple of %d", n_rows, PI_GROUP_ROWS);
    return PI_OK;
}

PI_API int pi_kernel_group_rows(int32_t type, void *W, int32_t n_rows, int32_t n) {
    const pi_type_info *info;
    int rc = row_type(type, n, &info);
    if (rc == PI_OK) rc = groups_of(type, info, n_rows);
    if (rc != PI_OK) return rc;
    if (!W) return pi_set_error(PI_ERR_ARG, "pi_kernel_group_rows: NULL weights");
    const size_t row_bytes = pi_type_row_bytes(type, n);
    uint8_t *scratch = malloc(PI_GROUP_ROWS * row_bytes);
    if (!scratch) return pi_set_error(PI_ERR_NOMEM, "pi_kernel_group_rows: no memory for one group");
    pi_group_rows((uint32_t)type, W, row_bytes, n_rows, scratch);
    free(scratch);
    return PI_OK;
}

/* Y = W X for either layout of W: row-major, or grouped (pi_kernel_group_rows). */
static int kernel_matmul(int32_t type, int32_t impl, int grouped, const void *W, int32_t n_rows, int32_t n,
                         const float *X, int32_t nt, float *Y) {
    const pi_type_info *info;
    pi_kernels k;
    int rc = row_type(type, n, &info);
    if (rc == PI_OK) rc = kernels_for(impl, &k);
    if (rc != PI_OK) return rc;
    if (!W || !X || !Y) return pi_set_error(PI_ERR_ARG, "pi_kernel_matmul: NULL weights, input or output");
    if (n_rows < 0 || nt < 0) return pi_set_error(PI_ERR_ARG, "pi_kernel_matmul: negative n_rows %d or nt %d", n_rows, nt);
    if (grouped && (rc = groups_of(type, info, n_rows)) != PI_OK) return rc;
    const size_t row_bytes = pi_type_row_bytes(type, n);

    /* the activation in the form this weight type is dotted with */
    pi_act act = { X, NULL, NULL, n };
    void *blocks = NULL;
    if (info->block_size > 1 && nt > 0) {
        const int k_quant = info->block_size == QK_K;
        blocks = malloc((size_t)nt * (size_t)(n / info->block_size) * (k_quant ? sizeof(block_q8k) : sizeof(block_q8x)));
        if (!blocks) return pi_set_error(PI_ERR_NOMEM, "pi_kernel_matmul: no memory for %d activation rows", nt);
        for (int32_t t = 0; t < nt; t++) {
            if (k_quant) k.quantize_act_k(X + (size_t)t * n, (block_q8k *)blocks + (size_t)t * (n / QK_K), n);
            else k.quantize_act(X + (size_t)t * n, (block_q8x *)blocks + (size_t)t * (n / QK), n);
        }
        if (k_quant) act.k = blocks;
        else act.q = blocks;
    }
    (grouped ? k.matmul_grouped : k.matmul)[type](W, row_bytes, NULL, 0, n_rows, act, nt, Y, n_rows);
    free(blocks);
    return PI_OK;
}

PI_API int pi_kernel_matmul(int32_t type, int32_t impl, const void *W, int32_t n_rows, int32_t n,
                            const float *X, int32_t nt, float *Y) {
    return kernel_matmul(type, impl, 0, W, n_rows, n, X, nt, Y);
}

PI_API int pi_kernel_matmul_grouped(int32_t type, int32_t impl, const void *W, int32_t n_rows, int32_t n,
                                    const float *X, int32_t nt, float *Y) {
    return kernel_matmul(type, impl, 1, W, n_rows, n, X, nt, Y);
}

PI_API int pi_kernel_axpy_rows(int32_t type, int32_t impl, const void *W, int32_t n_rows, int32_t d,
                               const int32_t *rows, const float *a, int32_t n, float *y) {
    const pi_type_info *info;
    pi_kernels k;
    int rc = row_type(type, d, &info);
    if (rc == PI_OK) rc = kernels_for(impl, &k);
    if (rc != PI_OK) return rc;
    if (!W || !a || !y) return pi_set_error(PI_ERR_ARG, "pi_kernel_axpy_rows: NULL weights, coefficients or output");
    if (n_rows < 0 || n < 0) return pi_set_error(PI_ERR_ARG, "pi_kernel_axpy_rows: negative n_rows %d or n %d", n_rows, n);
    if (!rows && n > n_rows)
        return pi_set_error(PI_ERR_ARG, "pi_kernel_axpy_rows: %d coefficients for %d rows", n, n_rows);
    for (int32_t j = 0; rows && j < n; j++)
        if (rows[j] < 0 || rows[j] >= n_rows)
            return pi_set_error(PI_ERR_ARG, "pi_kernel_axpy_rows: rows[%d] = %d is outside [0, %d)", j, rows[j], n_rows);
    k.axpy_rows[type](W, pi_type_row_bytes(type, d), rows, a, n, y, d);
    return PI_OK;
}

PI_API int pi_kernel_device_dequant(int32_t type, int32_t units, const void *row, int32_t n, float *out) {
    const pi_type_info *info;
    int rc = row_type(type, n, &info);
    if (rc != PI_OK) return rc;
    if (!pi_dw_reads((uint32_t)type))
        return pi_set_error(PI_ERR_UNSUPPORTED, "the CUDA kernels do not read %s", pi_type_name((uint32_t)type));
    if (!row || !out) return pi_set_error(PI_ERR_ARG, "pi_kernel_device_dequant: NULL row or output");
    if (!units) {
        for (int32_t i = 0; i < n; i++) out[i] = pi_dw_row((uint32_t)type, row, i);
        return PI_OK;
    }
    for (int32_t u = 0; 32 * u < n; u++) {
        float w[32];
        pi_dw_unit((uint32_t)type, row, u, n, w);
        for (int j = 0; j < 32 && 32 * u + j < n; j++) out[32 * u + j] = w[j];
    }
    return PI_OK;
}

PI_API int pi_kernel_mix_q8_0(int32_t impl, const void *v, uint64_t stride, const float *p, int32_t n, int32_t hd,
                              float *out) {
    if (impl != PI_IMPL_REF && impl != PI_IMPL_AVX2) return pi_set_error(PI_ERR_ARG, "mix_q8_0: impl 1 or 2, not %d", impl);
    if (!v || !p || !out || n < 0 || hd <= 0 || hd % QK || stride < (uint64_t)(hd / QK) * sizeof(block_q8_0))
        return pi_set_error(PI_ERR_ARG, "mix_q8_0: bad arguments");
    pi_vec_ops ops;
    pi_vec_ops_init(&ops, impl);
    if (impl == PI_IMPL_AVX2 && ops.name[0] != 'a')
        return pi_set_error(PI_ERR_UNSUPPORTED, "the AVX2 vector ops are not available on this CPU");
    ops.mix_q8_0(p, v, (size_t)stride, n, hd, out);
    return PI_OK;
}

PI_API int pi_kernel_attention_f16(int32_t impl, int32_t tiled, const float *q, int32_t nq, const uint16_t *k,
                                   const uint16_t *v, uint64_t stride, int32_t n, int32_t hd, float scale, float *scores,
                                   const float *w, const int32_t *lo, const int32_t *hi, float *out) {
    if (impl != PI_IMPL_REF && impl != PI_IMPL_AVX2 && impl != PI_IMPL_AVX512)
        return pi_set_error(PI_ERR_ARG, "attention_f16: impl 1, 2 or 3, not %d", impl);
    if (!q || !k || !v || !scores || !w || !lo || !hi || !out || nq < 0 || nq > PI_ATT_ROWS || n < 1 || hd <= 0 ||
        stride < (uint64_t)hd)
        return pi_set_error(PI_ERR_ARG, "attention_f16: bad arguments");
    for (int32_t r = 0; r < nq; r++)
        if (lo[r] < 0 || lo[r] > hi[r] || hi[r] >= n) return pi_set_error(PI_ERR_ARG, "attention_f16: bad rows of query %d", r);
    pi_vec_ops ops;
    pi_vec_ops_init(&ops, impl);
    if ((impl == PI_IMPL_AVX2 && ops.name[0] != 'a') || (impl == PI_IMPL_AVX512 && strcmp(ops.name, "avx512")))
        return pi_set_error(PI_ERR_UNSUPPORTED, "the %s vector ops are not available on this CPU",
                            impl == PI_IMPL_AVX2 ? "AVX2" : "AVX-512");
    const float *qs[PI_ATT_ROWS];
    float *outs[PI_ATT_ROWS];
    for (int32_t r = 0; r < nq; r++) {
        qs[r] = q + (size_t)r * hd;
        outs[r] = out + (size_t)r * hd;
    }
    if (tiled) {
        ops.scores_f16_tile(qs, nq, k, (size_t)stride, n, hd, scale, scores, (size_t)n);
        ops.mix_f16_tile(w, (size_t)n, lo, hi, nq, v, (size_t)stride, hd, outs);
        return PI_OK;
    }
    for (int32_t r = 0; r < nq; r++) {
        ops.scores_f16(qs[r], k, (size_t)stride, n, hd, scale, scores + (size_t)r * n);
        ops.mix_f16(w + (size_t)r * n + lo[r], v + (size_t)lo[r] * stride, (size_t)stride, hi[r] - lo[r] + 1, hd, outs[r]);
    }
    return PI_OK;
}
