/* hot_experts.h - what a device of the expert split holds: a private copy of every hot run of
 * every expert (ffn_moe_split.h), in one allocation. */
#ifndef PI_HOT_EXPERTS_H
#define PI_HOT_EXPERTS_H
#include "ffn_moe_split.h"

/* runs[(il * n_expert + e) * runs + r]: the copy of that run, its weights' data NULL where it is
 * cold. A run's gate and up rows are copied whole (whole 16-row groups when grouped); its columns
 * of down become a matrix of their own, row_bytes the run's blocks of one row, in the model's
 * row layout. */
typedef struct {
    pi_expert_run_rows *runs;
    uint8_t *memory;
    uint64_t bytes;
} pi_hot_experts;

int pi_hot_experts_new(const pi_context *c, pi_hot_experts *out);
void pi_hot_experts_free(pi_hot_experts *h);

#endif
