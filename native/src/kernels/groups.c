/* groups.c - weights interleaved in groups of rows, the layout the grouped matmul streams.
 *
 * A weight of n_out rows (n_out a multiple of PI_GROUP_ROWS = 16) is stored group after group;
 * a group holds block 0 of its 16 rows, then block 1, and so on. One group block holds the 16
 * rows' fp16 scales d (and for Q4_1 and Q5_1 their minimums m), then the quants in chunks of 64 bytes:
 * chunk j holds, for row r at bytes 4r .. 4r + 3, the row's quant bytes 4j .. 4j + 3. So one
 * 64-byte load puts four consecutive quant bytes of each of the 16 rows in its own dword lane,
 * and one dot-product instruction against four broadcast activation bytes advances all 16 rows
 * at once: the activations are read once per group, not once per row, and the per-block float
 * work is done for 16 rows in one vector.
 *
 * For the 4-bit formats a quant byte holds weight k in its low nibble and weight k + 16 in its
 * high one (as in their blocks), so the low nibbles of chunk j are weights 4j .. 4j + 3 and the
 * high ones weights 16 + 4j ..; for Q8_0 chunk j is weights 4j .. 4j + 3. So in every format the
 * k-th 4-byte group of a row holds its weights 4k .. 4k + 3. The 5-bit formats' high bits are
 * regrouped the same way, into 8 masks of 64 bits before the quants: bit 4r + i of mask k is bit
 * 4 of row r's weight 4k + i, so that one masked byte add sets them for 16 rows at once. A group
 * block has exactly the bytes of its 16 blocks, moved. */
#include <string.h>

#include "kernels.h"

int pi_groups_hold(uint32_t type) {
    return type == PI_TYPE_Q4_0 || type == PI_TYPE_Q4_1 || type == PI_TYPE_Q5_0 || type == PI_TYPE_Q5_1 ||
           type == PI_TYPE_Q8_0;
}

static int has_min(uint32_t type) { return type == PI_TYPE_Q4_1 || type == PI_TYPE_Q5_1; }
static int has_high_bits(uint32_t type) { return type == PI_TYPE_Q5_0 || type == PI_TYPE_Q5_1; }

size_t pi_group_high_bits_offset(uint32_t type) { return (has_min(type) ? 4 : 2) * PI_GROUP_ROWS; }

size_t pi_group_quants_offset(uint32_t type) { return pi_group_high_bits_offset(type) + (has_high_bits(type) ? 64 : 0); }

/* A block's quant bytes, and where they and its high bits (qh) start in it. */
static size_t quant_bytes(uint32_t type) { return type == PI_TYPE_Q8_0 ? QK : QK / 2; }
static size_t block_high_bits(uint32_t type) { return has_min(type) ? 4 : 2; }
static size_t block_quants(uint32_t type) { return block_high_bits(type) + (has_high_bits(type) ? 4 : 0); }

/* Byte k of row r's quants, inside a group block's quants. */
static size_t quant_at(int r, size_t k) { return (k / 4) * 64 + (size_t)r * 4 + k % 4; }

/* One group block from the same block of 16 rows. */
static void pack_block(uint32_t type, const uint8_t *const *blocks, uint8_t *out) {
    uint8_t *q = out + pi_group_quants_offset(type), *masks = out + pi_group_high_bits_offset(type);
    if (has_high_bits(type)) memset(masks, 0, 64);
    for (int r = 0; r < PI_GROUP_ROWS; r++) {
        memcpy(out + 2 * r, blocks[r], 2); /* d */
        if (has_min(type)) memcpy(out + 2 * PI_GROUP_ROWS + 2 * r, blocks[r] + 2, 2); /* m */
        for (size_t k = 0; k < quant_bytes(type); k++) q[quant_at(r, k)] = blocks[r][block_quants(type) + k];
        for (int j = 0; has_high_bits(type) && j < QK; j++) { /* bit j of qh -> bit 4r + j % 4 of mask j / 4 */
            const int bit = (blocks[r][block_high_bits(type) + j / 8] >> (j % 8)) & 1;
            masks[8 * (j / 4) + (4 * r + j % 4) / 8] |= (uint8_t)(bit << ((4 * r + j % 4) % 8));
        }
    }
}

/* Row r's block out of a group block, as the file has it. */
static void unpack_block(uint32_t type, const uint8_t *group_block, int r, uint8_t *block) {
    const uint8_t *q = group_block + pi_group_quants_offset(type), *masks = group_block + pi_group_high_bits_offset(type);
    memcpy(block, group_block + 2 * r, 2);
    if (has_min(type)) memcpy(block + 2, group_block + 2 * PI_GROUP_ROWS + 2 * r, 2);
    for (size_t k = 0; k < quant_bytes(type); k++) block[block_quants(type) + k] = q[quant_at(r, k)];
    if (has_high_bits(type)) memset(block + block_high_bits(type), 0, 4);
    for (int j = 0; has_high_bits(type) && j < QK; j++) {
        const int bit = (masks[8 * (j / 4) + (4 * r + j % 4) / 8] >> ((4 * r + j % 4) % 8)) & 1;
        block[block_high_bits(type) + j / 8] |= (uint8_t)(bit << (j % 8));
    }
}

void pi_group_rows(uint32_t type, uint8_t *W, size_t row_bytes, int64_t n_rows, uint8_t *scratch) {
    const size_t bb = pi_type_block_bytes(type), nb = row_bytes / bb, group_bytes = PI_GROUP_ROWS * row_bytes;
    for (int64_t g = 0; g < n_rows / PI_GROUP_ROWS; g++) {
        uint8_t *group = W + (size_t)g * group_bytes;
        memcpy(scratch, group, group_bytes);
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blocks[PI_GROUP_ROWS];
            for (int r = 0; r < PI_GROUP_ROWS; r++) blocks[r] = scratch + (size_t)r * row_bytes + b * bb;
            pack_block(type, blocks, group + b * PI_GROUP_ROWS * bb);
        }
    }
}

void pi_group_row_block(uint32_t type, const uint8_t *W, size_t row_bytes, int64_t row, size_t b, uint8_t *block) {
    const uint8_t *group = W + (size_t)(row / PI_GROUP_ROWS) * PI_GROUP_ROWS * row_bytes;
    unpack_block(type, group + b * PI_GROUP_ROWS * pi_type_block_bytes(type), (int)(row % PI_GROUP_ROWS), block);
}

void pi_group_unpack_rows(uint32_t type, const uint8_t *group, size_t row_bytes, uint8_t *rows) {
    const size_t bb = pi_type_block_bytes(type), nb = row_bytes / bb;
    for (int r = 0; r < PI_GROUP_ROWS; r++)
        for (size_t b = 0; b < nb; b++) pi_group_row_block(type, group, row_bytes, r, b, rows + (size_t)r * row_bytes + b * bb);
}
