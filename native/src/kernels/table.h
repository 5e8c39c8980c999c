/* table.h - a tier's kernel table, generated from the type list (quants.h's PI_TYPES): one named
 * function per type and kernel, so that the compiler specialises the tier's generic loops for
 * each type, and the function that fills the table with them. The tier passes in the names of
 * its generic kernels, each taking the type first: for the block and float formats and for the
 * K-quants. Private to native/src/kernels. */
#ifndef PI_KERNELS_TABLE_H
#define PI_KERNELS_TABLE_H
#include "kernels.h"

/* The three entries of type T, each handing its arguments to the generic kernel of its family. The
 * block size is a constant expression, so the other family's call is gone before any inlining. */
#define PI_TABLE_ENTRIES_(T, id, name, bs, bb, MATMUL, DEQUANT, AXPY, KQ_MATMUL, KQ_DEQUANT, KQ_AXPY)                 \
    static void matmul_##T(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y,  \
                           int ys) {                                                                                  \
        if ((bs) == QK_K) KQ_MATMUL(PI_TYPE_##T, W, rb, idx, r0, nr, x, nt, Y, ys);                                   \
        else MATMUL(PI_TYPE_##T, W, rb, idx, r0, nr, x, nt, Y, ys);                                                   \
    }                                                                                                                 \
    static void dequant_##T(const void *row, float *y, int n) {                                                       \
        if ((bs) == QK_K) KQ_DEQUANT(PI_TYPE_##T, row, y, n);                                                         \
        else DEQUANT(PI_TYPE_##T, row, y, n);                                                                         \
    }                                                                                                                 \
    static void axpy_rows_##T(const void *W, size_t rb, const int32_t *rows, const float *a, int n, float *y,         \
                              int d) {                                                                                \
        if ((bs) == QK_K) KQ_AXPY(PI_TYPE_##T, W, rb, rows, a, n, y, d);                                              \
        else AXPY(PI_TYPE_##T, W, rb, rows, a, n, y, d);                                                              \
    }

#define PI_TABLE_FILL_(T, ...)                                                                                        \
    k->matmul[PI_TYPE_##T] = matmul_##T;                                                                              \
    k->dequant[PI_TYPE_##T] = dequant_##T;                                                                            \
    k->axpy_rows[PI_TYPE_##T] = axpy_rows_##T;

/* The entries of every type we run, and `static void fill(pi_kernels *k, const char *name)`,
 * which sets them, the two activation quantizers and the tier's name. */
#define PI_KERNEL_TABLE(fill, QUANTIZE, QUANTIZE_K, MATMUL, DEQUANT, AXPY, KQ_MATMUL, KQ_DEQUANT, KQ_AXPY)            \
    PI_TYPES(PI_TABLE_ENTRIES_, MATMUL, DEQUANT, AXPY, KQ_MATMUL, KQ_DEQUANT, KQ_AXPY)                                \
    static void fill(pi_kernels *k, const char *name) {                                                               \
        k->name = name;                                                                                               \
        k->quantize_act = QUANTIZE;                                                                                   \
        k->quantize_act_k = QUANTIZE_K;                                                                               \
        PI_TYPES(PI_TABLE_FILL_, ~)                                                                                   \
    }

/* The grouped matmul of each type that has the layout (quants.h's PI_GROUPED_TYPES), from the tier's generic
 * GROUPED, and `static void fill_grouped(pi_kernels *k)`, which sets them. */
#define PI_GROUPED_ENTRY_(T, GROUPED)                                                                                 \
    static void grouped_##T(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, \
                            int ys) {                                                                                 \
        GROUPED(PI_TYPE_##T, W, rb, idx, r0, nr, x, nt, Y, ys);                                                       \
    }
#define PI_GROUPED_FILL_(T, ...) k->matmul_grouped[PI_TYPE_##T] = grouped_##T;
#define PI_GROUPED_TABLE(fill_grouped, GROUPED)                                                                       \
    PI_GROUPED_TYPES(PI_GROUPED_ENTRY_, GROUPED)                                                                     \
    static void fill_grouped(pi_kernels *k) { PI_GROUPED_TYPES(PI_GROUPED_FILL_, ~) }

#endif
