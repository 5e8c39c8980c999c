/* row_groups.c - weights interleaved in groups of rows, the layout the grouped matmul streams.
 *
 * A weight of n_out rows (n_out a multiple of PI_GROUP_ROWS = 16) is stored group after group;
 * a group holds block 0 of its 16 rows, then block 1, and so on. A group block is the block's
 * fields in their order, each field of L bytes taking the 16 L bytes of its 16 rows, at 16 times
 * its offset in the block: an fp16 (d, m, dmin) as the 16 rows' values side by side, so one load
 * converts them all; a byte array (quants, K-quant scales) in chunks of 64 bytes, chunk j holding,
 * for row r at bytes 4r .. 4r + 3, the row's bytes 4j .. 4j + 3. So one 64-byte load puts four
 * consecutive quant bytes of each of the 16 rows in its own dword lane, and one dot-product
 * instruction against four broadcast activation bytes advances all 16 rows at once: the
 * activations are read once per group, not once per row, and the per-block float work is done
 * for 16 rows in one vector.
 *
 * For Q4_0 a quant byte holds weight k in its low nibble and weight k + 16 in its high one (as in
 * its blocks), so the low nibbles of chunk j are weights 4j .. 4j + 3 and the high ones weights
 * 16 + 4j ... The K-quants' fields keep their bytes (kgroups.h reads them). A group block has
 * exactly the bytes of its 16 blocks, moved.
 *
 * Only the formats whose dot product llama.cpp sums one float per row are grouped (Q4_0, the
 * K-quants; kernels.h's pi_dot_order says why the others are not). */
#include <stddef.h>
#include <string.h>

#include "kernels.h"

#define HOLDS_(T, ...) case PI_TYPE_##T:
int pi_groups_hold(uint32_t type) {
    switch (type) {
    PI_GROUPED_TYPES(HOLDS_, ~) return 1;
    default: return 0;
    }
}

/* A block's fields, in order: fp16 values and byte arrays. */
enum { HALF, BYTES };
typedef struct {
    size_t offset, bytes;
    int kind;
} field;

#define FIELD(fmt, f, kind) { offsetof(block_##fmt, f), sizeof(((block_##fmt *)0)->f), kind }

/* The fields of a type with the grouped layout, and how many. */
static int fields_of(uint32_t type, field f[5]) {
    switch (type) {
    case PI_TYPE_Q4_0: return f[0] = (field)FIELD(q4_0, d, HALF), f[1] = (field)FIELD(q4_0, qs, BYTES), 2;
    case PI_TYPE_Q4_K:
        return f[0] = (field)FIELD(q4_K, d, HALF), f[1] = (field)FIELD(q4_K, dmin, HALF),
               f[2] = (field)FIELD(q4_K, scales, BYTES), f[3] = (field)FIELD(q4_K, qs, BYTES), 4;
    case PI_TYPE_Q5_K:
        return f[0] = (field)FIELD(q5_K, d, HALF), f[1] = (field)FIELD(q5_K, dmin, HALF),
               f[2] = (field)FIELD(q5_K, scales, BYTES), f[3] = (field)FIELD(q5_K, qh, BYTES),
               f[4] = (field)FIELD(q5_K, qs, BYTES), 5;
    case PI_TYPE_Q6_K:
        return f[0] = (field)FIELD(q6_K, ql, BYTES), f[1] = (field)FIELD(q6_K, qh, BYTES),
               f[2] = (field)FIELD(q6_K, scales, BYTES), f[3] = (field)FIELD(q6_K, d, HALF), 4;
    default: PI_BAD_TYPE();
    }
}

/* A field of whole bytes moves in pieces: an fp16 whole, a byte array 4 bytes at a time. Where
 * row r's piece k lies in the group block. */
static size_t piece_bytes(const field *f) { return f->kind == HALF ? 2 : 4; }

static size_t piece_at(const field *f, int r, size_t k) {
    return PI_GROUP_ROWS * f->offset + (f->kind == HALF ? 2 * (size_t)r : 64 * k + 4 * (size_t)r);
}

/* One group block from the same block of 16 rows (the row r part of it), and row r's block back out. */
static void pack_block(const field *f, int nf, const uint8_t *block, int r, uint8_t *group_block) {
    for (int i = 0; i < nf; i++) {
        const size_t n = f[i].bytes / piece_bytes(&f[i]);
        for (size_t k = 0; k < n; k++)
            memcpy(group_block + piece_at(&f[i], r, k), block + f[i].offset + k * piece_bytes(&f[i]), piece_bytes(&f[i]));
    }
}

static void unpack_block(const field *f, int nf, const uint8_t *group_block, int r, uint8_t *block) {
    for (int i = 0; i < nf; i++) {
        const size_t n = f[i].bytes / piece_bytes(&f[i]);
        for (size_t k = 0; k < n; k++)
            memcpy(block + f[i].offset + k * piece_bytes(&f[i]), group_block + piece_at(&f[i], r, k), piece_bytes(&f[i]));
    }
}

void pi_group_rows(uint32_t type, uint8_t *W, size_t row_bytes, int64_t n_rows, uint8_t *scratch) {
    field f[5];
    const int nf = fields_of(type, f);
    const size_t bb = pi_type_block_bytes(type), nb = row_bytes / bb, group_bytes = PI_GROUP_ROWS * row_bytes;
    for (int64_t g = 0; g < n_rows / PI_GROUP_ROWS; g++) {
        uint8_t *group = W + (size_t)g * group_bytes;
        memcpy(scratch, group, group_bytes);
        for (size_t b = 0; b < nb; b++)
            for (int r = 0; r < PI_GROUP_ROWS; r++)
                pack_block(f, nf, scratch + (size_t)r * row_bytes + b * bb, r, group + b * PI_GROUP_ROWS * bb);
    }
}

void pi_group_row_block(uint32_t type, const uint8_t *W, size_t row_bytes, int64_t row, size_t b, uint8_t *block) {
    field f[5];
    const int nf = fields_of(type, f);
    const size_t gbb = PI_GROUP_ROWS * pi_type_block_bytes(type);
    const uint8_t *group = W + (size_t)(row / PI_GROUP_ROWS) * PI_GROUP_ROWS * row_bytes;
    unpack_block(f, nf, group + b * gbb, (int)(row % PI_GROUP_ROWS), block);
}

void pi_group_unpack_rows(uint32_t type, const uint8_t *group, size_t row_bytes, uint8_t *rows) {
    const size_t bb = pi_type_block_bytes(type), nb = row_bytes / bb;
    for (int r = 0; r < PI_GROUP_ROWS; r++)
        for (size_t b = 0; b < nb; b++) pi_group_row_block(type, group, row_bytes, r, b, rows + (size_t)r * row_bytes + b * bb);
}
