/* ffn_sparse_state.h - a context's scratch and bookkeeping for the sparse FFN (pi_context.sparse,
 * ffn_sparse.h), and the hot/cold split of its neurons; apart from ffn_sparse.h, which includes
 * context.h, so that context.h can hold it. */
#ifndef PI_FFN_SPARSE_STATE_H
#define PI_FFN_SPARSE_STATE_H
#include <stdatomic.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* the predictor's hidden-layer slots: the CPU threads share one, a device has its own */
enum { PI_HIDDEN_CPU = 0, PI_HIDDEN_DEVICE = 1, PI_HIDDEN_SLOTS = 2 };

/* sparse FFN, one token at a time (ffn_sparse.h); a run fills its own slices, by position */
typedef struct pi_sparse_scratch {
    float *pred_h;      /* [2][rank_stride] predictor hidden layer of the CPU threads and of the device */
    pi_act_store pred_hq; /* [2][rank_stride/32], [2][rank_stride/256] */
    int32_t rank_stride;
    float *pred_out;    /* [n_ff]          predictor logits */
    int32_t *active;    /* [n_ff]          positions predicted to fire: a run's from its first slot on */
    int32_t *active_rows; /* [n_ff]        their weight rows on the side that computes the run */
    float *run_acc;     /* [n_runs][n_embd] each run's sum of down rows */
    int32_t *run_rows;  /* [n_runs]        neurons each run computed */
    int64_t *run_bytes; /* [n_runs]        bytes of the gate, up and down rows each run read */
    uint8_t *ffn_first; /* [n_layer]       PI_FFN_FIRST_* of each layer (ffn_sparse.c's choose_first) */
    int32_t *ffn_tokens; /* [n_layer]      sparse tokens each layer has computed, for its probes */
    atomic_int probe_gate, probe_up; /* a probe token's positive gate and up values */
    float *down_acc;    /* [n_threads][n_embd] per-thread partial sums of a transposed dense down */

    /* the hot/cold split of vram_budget: runs [0, hot_runs[layer]) of each layer are its hot
     * neurons (placement.h), computed by the device, or by the CPU without one */
    int32_t *hot_runs;          /* [n_layer], or NULL without a budget */
    int32_t *layout;            /* [n_layer][n_ff] the neuron at each position (ffn_sparse.h), or NULL */
} pi_sparse_scratch;

#endif
