/* place.c - the steps and neurons a device takes (place.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "device/place.h"
#include "ffn_moe_split.h"
#include "placement.h"
#include "status.h"

/* The device the context asked for with the share, and the steps that then run on it. */
static int start_device(pi_context *c, const pi_device_share *share) {
    const int n_layer = c->model->info.n_layer;
    c->dev.on_device = calloc((size_t)(n_layer > 0 ? n_layer : 1), sizeof *c->dev.on_device);
    if (!c->dev.on_device) return pi_set_error(PI_ERR_NOMEM, "no memory for the placement");
    int device_attention = 0;
    for (int il = 0; il < n_layer; il++) {
        c->dev.on_device[il].attention = il >= share->first_whole || (share->attention && share->attention[il]);
        device_attention |= c->dev.on_device[il].attention;
        /* a parallel block's FFN runs inside its attention step */
        c->dev.on_device[il].ffn = il >= share->first_whole && !c->model->parallel;
    }
    /* the device's KV cache is f16: its attention would not be the one the quantized types ask for */
    if (device_attention && (c->params.type_k != PI_TYPE_F16 || c->params.type_v != PI_TYPE_F16))
        return pi_set_error(PI_ERR_UNSUPPORTED, "a KV cache of K %s, V %s runs attention on the CPU only, and the "
                            "device would take the attention of some layers: use f16, or no device",
                            pi_type_name((uint32_t)c->params.type_k), pi_type_name((uint32_t)c->params.type_v));
    const int rc = c->params.device == PI_DEVICE_HOST ? pi_device_host_new(c, share, &c->dev.device)
                                                      : pi_device_cuda_new(c, share, &c->dev.device);
    if (rc) return rc;
    c->dev.logits_on_device = share->output;
    return PI_OK;
}

/* ---- layer offload ---- */

static int layer_offload(pi_context *c) {
    const pi_model *m = c->model;
    const int n_layer = m->info.n_layer, asked = c->params.n_gpu_layers;
    const int first = asked < 0 || asked >= n_layer ? 0 : n_layer - asked;
    for (int il = first; il < n_layer; il++)
        if (!m->layers[il].ffn_down.data && !m->layers[il].ffn_down_t.data)
            return pi_set_error(PI_ERR_UNSUPPORTED, "layer offload needs ffn_down or ffn_down_t (layer %d)", il);
    /* the output too when every layer is offloaded and more asked (llama.cpp's n_layer + 1),
     * unless the host needs the final hidden states for embeddings */
    const pi_device_share share = { first, NULL, first == 0 && (asked < 0 || asked > n_layer) && !c->s.embd };
    return start_device(c, &share);
}

static int offload(pi_context *c) {
    if (c->params.vram_budget > 0)
        return pi_set_error(PI_ERR_ARG, "n_gpu_layers and vram_budget are two ways to use the device: choose one");
    const int rc = layer_offload(c);
    if (rc != PI_ERR_UNSUPPORTED) return rc;
    char why[256]; /* the message names the option; pi_set_error must not read its own buffer */
    snprintf(why, sizeof why, "%s", pi_last_error());
    return pi_set_error(PI_ERR_UNSUPPORTED, "n_gpu_layers: %s", why);
}

/* ---- the hot/cold split ---- */

/* Each layer's layout: the plan's hot neurons (the first n_hot of its neuron order) first, whole
 * runs of them, then the cold ones, each part in ascending neuron order. *any: whether any layer
 * has hot runs. */
static int lay_out(pi_context *c, const pi_layer_placement *plan, uint8_t *hot, int *any) {
    const pi_model *m = c->model;
    const int n_ff = m->info.n_ff;
    for (int il = 0; il < m->info.n_layer; il++) {
        int32_t *layout = c->sparse.layout + (size_t)il * n_ff;
        c->sparse.hot_runs[il] = (plan[il].n_hot + PI_FFN_RUN - 1) / PI_FFN_RUN;
        *any |= c->sparse.hot_runs[il] > 0;
        const int rc = pi_neuron_order(m, il, layout); /* the order first, in the layout's place */
        if (rc) return rc;
        memset(hot, 0, (size_t)n_ff);
        for (int p = 0; p < plan[il].n_hot; p++) hot[layout[p]] = 1;
        int at = 0;
        for (int side = 1; side >= 0; side--)
            for (int i = 0; i < n_ff; i++)
                if (hot[i] == side) layout[at++] = i;
    }
    return PI_OK;
}

/* An MoE model's split of its expert runs (ffn_moe_split.h): the plan's exp_hot, and its
 * scratch; *any: whether a run is hot. */
static int split_experts(pi_context *c, const uint8_t *exp_hot, int *any) {
    const pi_model *m = c->model;
    const size_t n = (size_t)m->info.n_layer * (size_t)m->n_expert * (size_t)pi_model_expert_runs(m);
    for (size_t i = 0; i < n; i++) *any |= exp_hot[i];
    return pi_expert_split_new(c, exp_hot);
}

/* With PI_DEVICE_NONE the layout still applies and the CPU computes every run: the reference
 * the split is tested against. A parallel block's attention (falcon) stays on the CPU: that
 * step holds the FFN, which the split runs (the plan spent no budget on it). So does a model
 * that routes from the layer's input (smallthinker): its router logits are computed from the
 * stream before attention (blocks.c), so its attention stays on the CPU and the stream on the
 * host, and the split takes the logits from there (pi_moe_route). A dense layer's
 * hot neurons come first in its layout; an MoE layer's hot runs are marked in exp_hot. */
static int split(pi_context *c) {
    const pi_model *m = c->model;
    const int n_layer = m->info.n_layer, n_ff = m->info.n_ff, moe = m->n_expert > 0;
    if (moe && c->params.device == PI_DEVICE_CUDA)
        return pi_set_error(PI_ERR_UNSUPPORTED, "vram_budget on arch '%s' (mixture of experts): the CUDA device has no "
                            "expert kernels yet; the expert split runs on the host stand-in device or the CPU alone", m->arch);
    const size_t exp_runs = moe ? (size_t)n_layer * (size_t)m->n_expert * (size_t)pi_model_expert_runs(m) : 0;
    pi_layer_placement *plan = malloc((size_t)n_layer * sizeof *plan);
    uint8_t *hot = moe ? calloc(exp_runs, 1) : malloc((size_t)n_ff), *attention = calloc((size_t)n_layer, 1);
    if (!moe) {
        c->sparse.hot_runs = calloc((size_t)n_layer, sizeof(int32_t));
        c->sparse.layout = malloc((size_t)n_layer * (size_t)n_ff * sizeof(int32_t));
    }
    int rc = !plan || !hot || !attention || (!moe && (!c->sparse.hot_runs || !c->sparse.layout))
                 ? pi_set_error(PI_ERR_NOMEM, "no memory for the placement") : PI_OK;
    if (!rc) {
        pi_placement_totals totals;
        pi_plan_placement(m, c->params.vram_budget, plan, &totals, moe ? hot : NULL);
        int any = 0;
        if (moe) rc = split_experts(c, hot, &any);
        else rc = lay_out(c, plan, hot, &any);
        pi_device_share share = { n_layer, attention, totals.output_on_device && !c->s.embd };
        any |= share.output;
        for (int il = 0; il < n_layer; il++) any |= attention[il] = plan[il].fixed_on_device && !m->parallel && !m->router_on_input;
        if (!rc && any && c->params.device != PI_DEVICE_NONE) rc = start_device(c, &share);
    }
    free(plan);
    free(hot);
    free(attention);
    return rc;
}

int pi_place(pi_context *c) {
    if (c->params.device < PI_DEVICE_NONE || c->params.device > PI_DEVICE_CUDA)
        return pi_set_error(PI_ERR_ARG, "unknown device %d", c->params.device);
    if (c->params.n_gpu_layers != 0) return offload(c);
    if ((c->model->has_predictors || c->model->n_expert) && c->params.vram_budget > 0) return split(c);
    return PI_OK;
}

void pi_place_free(pi_context *c) {
    if (c->dev.device) c->dev.device->ops->free(c->dev.device);
    c->dev.device = NULL;
    free(c->dev.on_device);
    free(c->sparse.hot_runs);
    free(c->sparse.layout);
    pi_expert_split_free(c);
    c->dev.on_device = NULL;
    c->sparse.hot_runs = c->sparse.layout = NULL;
}
