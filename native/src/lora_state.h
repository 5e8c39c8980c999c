/* lora_state.h - the LoRA adapter a context applies (pi_context.lora) and its scratch; apart from
 * lora.h, whose lora.c includes context.h, so that context.h can hold it. */
#ifndef PI_LORA_STATE_H
#define PI_LORA_STATE_H
#include "kernels/kernels.h"

/* a LoRA adapter (lora.h) applied to every matmul of the weights it adapts, and its scratch:
 * [B][max_rank] of A x, [B][max_out] of B (A x), sized when it is set */
typedef struct pi_lora_state {
    const struct pi_adapter *adapter;
    float scale;
    float *mid, *out;
    pi_act_store midq;
} pi_lora_state;

#endif
