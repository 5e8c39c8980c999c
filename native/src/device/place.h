/* place.h - what runs where, decided once as a context starts: the hot/cold split of
 * params.vram_budget (its layout, and on a device what every token reads that fits: attention
 * and output), or layer offload of params.n_gpu_layers; then the device that takes those steps. */
#ifndef PI_PLACE_H
#define PI_PLACE_H
#include "context.h"

/* PI_OK with nothing placed when the params ask for neither. PI_ERR_UNSUPPORTED without the
 * device asked for, or for a model whose layers it cannot run. */
int pi_place(pi_context *c);
void pi_place_free(pi_context *c);

#endif
