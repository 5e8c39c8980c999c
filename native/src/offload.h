/* offload.h - what of the forward pass runs on a CUDA device besides the hybrid split's FFN
 * (cuda/layers.cu):
 *  - layer offload (n_gpu_layers), as llama.cpp does it: the last layers whole, and with all of
 *    them and more asked the output matrix; the baseline the hybrid split is measured against;
 *  - the hybrid split's fixed part: the attention of the layers and the output matrix the
 *    placement put in VRAM (placement.h), computed there while the FFN splits as ffn_sparse.h says.
 * Without either, nothing is on the device: offload_first is n_layer, the rest NULL or 0. */
#ifndef PI_OFFLOAD_H
#define PI_OFFLOAD_H
#include "context.h"
#include "placement.h"

/* Layer offload of params.n_gpu_layers (all layers when negative or past n_layer). PI_ERR_UNSUPPORTED
 * without a CUDA build or device, or for a model whose layers the device cannot run. */
int pi_offload_new(pi_context *c);
/* The split's fixed part on the device: the attention of each layer plan[il].fixed_on_device,
 * and the output when totals->output_on_device. A model the device's block cannot run (LayerNorm,
 * a parallel block) keeps them on the CPU. */
int pi_offload_fixed(pi_context *c, const pi_layer_placement *plan, const pi_placement_totals *totals);

/* x of the n tokens at pos0 through layers offload_first..n_layer - 1. */
int pi_offload_layers(pi_context *c, int n, int pos0);
/* x += attention(x) of layer il, for a layer with c->attn_on_device[il]. */
int pi_offload_attention(pi_context *c, int il, int n, int pos0);
/* The logits of logits_mode (PI_LOGITS_LAST or ALL) from x, with c->offload_output. */
int pi_offload_logits(pi_context *c, int n, int pos0, int logits_mode);
void pi_offload_free(pi_context *c);

#endif
