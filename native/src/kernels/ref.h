/* ref.h - what the SIMD tiers share and borrow from the scalar reference: row addressing,
 * the prefetch distance, and the dot products and axpys they hand their leftovers to. Private to
 * native/src/kernels. */
#ifndef PI_KERNELS_REF_H
#define PI_KERNELS_REF_H
#include "kernels.h"

/* Row i of a matmul call: the idx-th row when a row list is given, else row r0 + i. */
static inline const uint8_t *pi_matmul_row(const void *W, size_t row_bytes, const int32_t *idx, int r0,
                                           int i) {
    return (const uint8_t *)W + (size_t)(idx ? idx[i] : r0 + i) * row_bytes;
}

/* The address to prefetch for row i, `ahead` rows on. Contiguous rows may run past this call's
 * rows, into the caller's next chunk; a prefetch past the weights is a harmless hint, and the
 * address is an integer so no pointer leaves its object. A row list is followed only as far
 * as it goes. */
static inline uintptr_t pi_prefetch_row(const void *W, size_t row_bytes, const int32_t *idx, int r0, int nr, int i,
                                        int ahead) {
    if (idx) return (uintptr_t)pi_matmul_row(W, row_bytes, idx, r0, i + ahead < nr ? i + ahead : nr - 1);
    return (uintptr_t)W + (size_t)(r0 + i + ahead) * row_bytes;
}

/* How many rows ahead of the rows being read a tile should prefetch: about 16 KiB, which
 * covers DRAM latency at full bandwidth; never less than one tile of min_rows. The tiers
 * prefetch into L2 (prefetcht1): on Zen 4 prefetching that far into L1 measured 3x slower
 * streaming, the L1 miss buffers filling with lines not needed yet. */
static inline int pi_prefetch_rows(size_t row_bytes, int min_rows) {
    enum { PREFETCH_BYTES = 16384, MAX_ROWS = 64 };
    const size_t rows = PREFETCH_BYTES / row_bytes;
    return rows < (size_t)min_rows ? min_rows : rows > MAX_ROWS ? MAX_ROWS : (int)rows;
}

/* Sum over blocks b0 <= b < nb of dot(block b of a block-type row, x[b]). */
float pi_ref_dot_blocks(int type, const void *row, const block_q8x *x, int b0, int nb);
/* Sum over i0 <= i < n of row[i] * x[i] for an F32, F16 or BF16 row. */
float pi_ref_dot_floats(int type, const void *row, const float *x, int i0, int n);
/* y[i] += a * row[i] for i0 <= i < n, for an F32, F16 or BF16 row. */
/* The reference dequantization of one row (the SIMD tiers use it for float rows). */
void pi_ref_dequant(int type, const void *row, float *y, int n);
void pi_ref_axpy_floats(int type, const void *row, float a, float *y, int i0, int n);

#endif
