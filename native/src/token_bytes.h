/* token_bytes.h - the weight bytes a token reads: what the device budget places (placement.c)
 * and what the sparse-ceiling accounting counts (pi_stats). Norms and biases are left out (a few
 * KiB), and so is the KV cache, which is no weight. */
#ifndef PI_TOKEN_BYTES_H
#define PI_TOKEN_BYTES_H
#include "model.h"

/* every row of w; 0 when absent */
uint64_t pi_weight_bytes(const pi_weight *w);
/* q, k, v and output of a layer's attention */
uint64_t pi_attention_bytes(const pi_layer *L);
/* fc1 and fc2: a sparse token reads all of both */
uint64_t pi_predictor_bytes(const pi_layer *L);
/* gate, up and down of the dense FFN (ffn_down_t where a PowerInfer file has no ffn_down) */
uint64_t pi_dense_ffn_bytes(const pi_layer *L);
/* one neuron's rows that the sparse FFN reads: gate, up and ffn_down_t */
uint64_t pi_neuron_bytes(const pi_layer *L);
/* one dense token: its embedding row, every layer's attention and dense FFN, the output matrix */
uint64_t pi_dense_token_bytes(const pi_model *m);

#endif
