/* kernels/repack.h - weights put into the grouped row layout at load (kernels/row_groups.c's
 * pi_group_rows: rows in groups of PI_GROUP_ROWS, read by the dense matmuls' grouped tiles), in
 * place, with one scratch for all of them. The loader (model.c) picks the weights. */
#ifndef PI_KERNELS_REPACK_H
#define PI_KERNELS_REPACK_H
#include <stddef.h>
#include <stdint.h>

/* n_rows rows of row_bytes each of one type, at rows (writable), in the file's row-major layout */
typedef struct {
    uint32_t type; /* PI_TYPE_* */
    uint8_t *rows;
    size_t row_bytes;
    int64_t n_rows;
} pi_repack_item;

/* Whether a matrix of n_out rows of this type has the grouped layout: the type has it, and its
 * rows fill whole groups (an expert tensor's experts each hold n_out rows). */
int pi_repack_fits(uint32_t type, int64_t n_out);

/* Group the rows of items[0..n), each of which pi_repack_fits. PI_ERR_NOMEM leaves every one as
 * it was. */
int pi_repack_group(const pi_repack_item *items, int n);

#endif
