/* ffn_path.h - how each layer's FFN step runs, chosen once for each kind of step (one token, or a
 * batch) when the context is made, and again where what decides it changes (a capture, a LoRA
 * adapter): forward.c's ffn_step and the CPU's FFN block then switch on the choice. */
#ifndef PI_FFN_PATH_H
#define PI_FFN_PATH_H
#include "context.h"

typedef enum {
    /* the CPU's block (blocks.h), the stream brought to the host first */
    PI_FFN_DENSE,             /* every neuron */
    PI_FFN_SPARSE,            /* the neurons the predictors pick, hot runs on the split's device (ffn_sparse.h) */
    PI_FFN_MOE,               /* the routed experts (ffn_moe.h) */
    PI_FFN_MOE_SPLIT,         /* the routed experts' runs, hot ones on the split's device (ffn_moe_split.h) */
    /* the split with the stream on the device (its attention ran there): it norms and merges there */
    PI_FFN_SPARSE_RESIDENT,
    PI_FFN_MOE_SPLIT_RESIDENT,
    PI_FFN_DEVICE,            /* the whole FFN on the device (layer offload) */
    PI_FFN_IN_ATTENTION,      /* a parallel block's (falcon): its attention step runs it */
} pi_ffn_path;

/* the kinds of step a path is chosen for */
enum { PI_STEP_TOKEN = 0, PI_STEP_BATCH = 1, PI_STEP_KINDS = 2 };

/* One layer's FFN for one kind of step: what its step runs, and how the CPU's block computes it
 * (the step's own path where that is the CPU's; else the block a device stand-in or a parallel
 * block's attention runs). */
typedef struct pi_ffn_choice {
    uint8_t step;   /* pi_ffn_path */
    uint8_t block;  /* PI_FFN_DENSE .. PI_FFN_MOE_SPLIT */
} pi_ffn_choice;

/* c->ffn_choice from the model, the placement, the capture and the adapter as they stand;
 * allocated on the first call (pi_context_new). */
int pi_ffn_paths_choose(pi_context *c);
void pi_ffn_paths_free(pi_context *c);

/* layer il's choice for a step of n tokens */
static inline pi_ffn_choice pi_ffn_choice_of(const pi_context *c, int il, int n) {
    return c->ffn_choice[(size_t)il * PI_STEP_KINDS + (n > 1 ? PI_STEP_BATCH : PI_STEP_TOKEN)];
}

#endif
