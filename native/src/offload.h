/* offload.h - the steps of the forward pass a CUDA device takes over (cuda/layers.cu), by setting
 * their entries in the context's ops (context.h):
 *  - layer offload (n_gpu_layers), as llama.cpp does it: the last layers' attention and FFN, and
 *    with all of them and more asked the logits; the baseline the hybrid split is measured against;
 *  - the hybrid split's fixed part: the attention of the layers, and the logits, that the
 *    placement put in VRAM (placement.h), while the FFN splits as ffn_sparse.h says.
 * Consecutive device steps keep the residual stream on the device; a CPU step brings it back.
 * The device is params.device's: CUDA, or the host stand-in (PI_DEVICE_HOST), which runs the
 * CPU's blocks on its own copy of the stream and so must give exactly the all-CPU result. */
#ifndef PI_OFFLOAD_H
#define PI_OFFLOAD_H
#include "context.h"
#include "placement.h"

/* Layer offload of params.n_gpu_layers (all layers when negative or past n_layer); nothing when
 * 0. PI_ERR_UNSUPPORTED without a CUDA build or device (unless the stand-in is asked for), or
 * for a model whose layers the device cannot run. */
int pi_offload_new(pi_context *c);
/* The split's fixed part: the attention of each layer plan[il].fixed_on_device, and the logits
 * when totals->output_on_device. A parallel block (falcon) keeps its attention on the CPU: that
 * step holds the FFN, which the split runs. */
int pi_offload_fixed(pi_context *c, const pi_layer_placement *plan, const pi_placement_totals *totals);
/* The stream of the step's n tokens back in c->x, if the device holds it. */
int pi_x_to_host(pi_context *c, int n);
void pi_offload_free(pi_context *c);

#endif
