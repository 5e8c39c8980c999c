/* ffn_path.c - each layer's FFN path (ffn_path.h). */
#include <stdlib.h>

#include "ffn_path.h"
#include "lora.h"
#include "status.h"

/* the predictors pick the step's neurons: sparse on for this kind of step, a layer with
 * predictors, no activation capture, and no adapter on its FFN (they know the base model only) */
static int sparse(const pi_context *c, int il, int batch) {
    const pi_layer *L = &c->model->layers[il];
    if (!L->fc1.data || !L->ffn_down_t.data || c->cap.act) return 0;
    if (c->lora.adapter && c->lora.adapter->ffn_adapted[il]) return 0;
    return c->params.sparse == PI_SPARSE_ALL || (c->params.sparse == PI_SPARSE_DECODE && !batch);
}

/* the CPU's block; a batch's MoE reads each routed expert once for all its tokens instead of splitting */
static pi_ffn_path block_path(const pi_context *c, int il, int batch) {
    if (sparse(c, il, batch)) return PI_FFN_SPARSE;
    if (c->model->layers[il].ffn_gate_inp.data) return !batch && c->moe.split ? PI_FFN_MOE_SPLIT : PI_FFN_MOE;
    return PI_FFN_DENSE;
}

/* where the step runs: a layer's attention placed on the device leaves the stream there for its FFN */
static pi_ffn_path step_path(const pi_context *c, int il, int batch, pi_ffn_path block) {
    if (c->model->parallel) return PI_FFN_IN_ATTENTION;
    if (c->dev.on_device && c->dev.on_device[il].ffn) return PI_FFN_DEVICE;
    const int resident = c->dev.on_device && c->dev.on_device[il].attention;
    if (resident && c->sparse.hot_runs && block == PI_FFN_SPARSE) return PI_FFN_SPARSE_RESIDENT;
    if (resident && c->moe.split && !batch && c->model->layers[il].ffn_gate_inp.data) return PI_FFN_MOE_SPLIT_RESIDENT;
    return block;
}

int pi_ffn_paths_choose(pi_context *c) {
    const int n_layer = c->model->info.n_layer;
    if (!c->ffn_choice) {
        c->ffn_choice = calloc((size_t)(n_layer > 0 ? n_layer : 1) * PI_STEP_KINDS, sizeof *c->ffn_choice);
        if (!c->ffn_choice) return pi_set_error(PI_ERR_NOMEM, "no memory for the FFN paths");
    }
    for (int il = 0; il < n_layer; il++)
        for (int kind = 0; kind < PI_STEP_KINDS; kind++) {
            const pi_ffn_path block = block_path(c, il, kind == PI_STEP_BATCH);
            c->ffn_choice[(size_t)il * PI_STEP_KINDS + kind] =
                (pi_ffn_choice){ (uint8_t)step_path(c, il, kind == PI_STEP_BATCH, block), (uint8_t)block };
        }
    return PI_OK;
}

void pi_ffn_paths_free(pi_context *c) {
    free(c->ffn_choice);
    c->ffn_choice = NULL;
}
