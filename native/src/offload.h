/* offload.h - layer offload (n_gpu_layers), as llama.cpp does it: the last layers, whole, on a
 * CUDA device (cuda/layers.cu), the first ones on the CPU. The baseline the hybrid split is
 * measured against at the same device bytes. */
#ifndef PI_OFFLOAD_H
#define PI_OFFLOAD_H
#include "context.h"

/* Offload the last params.n_gpu_layers layers (all of them when negative or past n_layer):
 * sets c->offload_first (n_layer without offload). PI_ERR_UNSUPPORTED without a CUDA build or
 * device, or for a model whose layers the device cannot run. */
int pi_offload_new(pi_context *c);
/* x of the n tokens at pos0 through layers offload_first..n_layer - 1 on the device, and with
 * c->offload_output the logits of logits_mode (PI_LOGITS_*) as well. */
int pi_offload_run(pi_context *c, int n, int pos0, int logits_mode);
void pi_offload_free(pi_context *c);

#endif
