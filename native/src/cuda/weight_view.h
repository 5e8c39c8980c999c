/* weight_view.h - a model's weight as the CUDA side's plain-C view of it (ffn_cuda.h), for the
 * host files that hand weights to the device (device_cuda.c, offload.c). */
#ifndef PI_CUDA_WEIGHT_VIEW_H
#define PI_CUDA_WEIGHT_VIEW_H
#include "cuda/ffn_cuda.h"
#include "model.h"

static inline pi_cuda_weight pi_cuda_view(const pi_weight *w) {
    return (pi_cuda_weight){ w->type, w->n_in, w->n_out, w->row_bytes, w->data };
}

#endif
