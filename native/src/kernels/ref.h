/* ref.h - what the SIMD tiers share and borrow from the scalar reference: row addressing,
 * the prefetch distance, and the dot products they hand their leftovers to. Private to
 * native/src/kernels. */
#ifndef PI_KERNELS_REF_H
#define PI_KERNELS_REF_H
#include "kernels.h"

/* Row i of a matmul call: the idx-th row when a row list is given, else row r0 + i. */
static inline const uint8_t *pi_matmul_row(const void *W, size_t row_bytes, const int32_t *idx, int r0,
                                           int i) {
    return (const uint8_t *)W + (size_t)(idx ? idx[i] : r0 + i) * row_bytes;
}

/* How many rows ahead of the rows being read a tile should prefetch: about 6 KiB, enough to
 * cover DRAM latency at full bandwidth, yet close enough that the lines are still in L1 when
 * they are used; never less than one tile of min_rows. */
static inline int pi_prefetch_rows(size_t row_bytes, int min_rows) {
    enum { PREFETCH_BYTES = 6144, MAX_ROWS = 32 };
    const size_t rows = PREFETCH_BYTES / row_bytes;
    return rows < (size_t)min_rows ? min_rows : rows > MAX_ROWS ? MAX_ROWS : (int)rows;
}

/* Sum over blocks b0 <= b < nb of dot(block b of a block-type row, x[b]). */
float pi_ref_dot_blocks(int type, const void *row, const block_q8x *x, int b0, int nb);
/* Sum over i0 <= i < n of row[i] * x[i] for an F32, F16 or BF16 row. */
float pi_ref_dot_floats(int type, const void *row, const float *x, int i0, int n);

#endif
