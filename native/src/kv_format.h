/* kv_format.h - the KV cache's row formats, as llama.cpp's type_k / type_v: f16 (the default),
 * q8_0 and q4_0. Each position holds one row of kv_dim values per layer for K and for V; the
 * block formats quantize it in blocks of 32 along kv_dim, so a head's slice is whole blocks.
 * What sizing a cache needs, and the context's cache itself, without a context (kv_cache.h stores
 * and reads the rows). */
#ifndef PI_KV_FORMAT_H
#define PI_KV_FORMAT_H
#include <stddef.h>
#include <stdint.h>

#include "quants.h"

/* Whether type is a KV cache type we run (PI_TYPE_F16, PI_TYPE_Q8_0, PI_TYPE_Q4_0). */
static inline int pi_kv_type_ok(int32_t type) {
    return type == PI_TYPE_F16 || type == PI_TYPE_Q8_0 || type == PI_TYPE_Q4_0;
}

/* Bytes of one position's row of kv_dim values in type (kv_dim a multiple of the block). */
static inline size_t pi_kv_row_bytes(int32_t type, size_t kv_dim) {
    return kv_dim / (size_t)pi_type_block_size((uint32_t)type) * pi_type_block_bytes((uint32_t)type);
}

/* A context's KV cache (pi_context.kv): n_seq sequences of seq_ctx positions each */
typedef struct pi_kv_cache {
    int32_t n_seq;              /* sequences the KV cache holds (params.n_seq_max) */
    uint32_t seq_ctx;           /* positions per sequence: sequence s owns rows [s * seq_ctx, (s + 1) * seq_ctx) */
    int32_t *seq_len;           /* [n_seq] positions each sequence holds */
    /* [n_layer][n_ctx] rows of kv_dim values each, in params.type_k / type_v (kv_cache.h):
     * f16 as llama.cpp's default, or its q8_0 / q4_0 blocks; k_row, v_row: bytes of one row */
    uint8_t *k_cache, *v_cache;
    size_t k_row, v_row;
} pi_kv_cache;

#endif
