/* offload.c - the forward pass's parts on the device (offload.h), over cuda/layers_cuda.h. */
#include <stdio.h>
#include <stdlib.h>

#include "offload.h"
#include "status.h"

#ifdef PI_HAVE_CUDA
#include "cuda/layers_cuda.h"

static pi_cuda_weight view(const pi_weight *w) { return (pi_cuda_weight){ w->type, w->n_in, w->n_out, w->row_bytes, w->data }; }

/* The device runs the llama block: RMSNorm, a sequential residual. */
static int device_runs_the_block(const pi_model *m) { return !m->layer_norm && !m->parallel; }

/* Layer il as the device takes it: its attention, and its FFN too when whole. */
static pi_cuda_block block_of(const pi_layer *L, int whole) {
    pi_cuda_block b = {
        .attn_q = view(&L->attn_q), .attn_k = view(&L->attn_k), .attn_v = view(&L->attn_v),
        .attn_output = view(&L->attn_output), .attn_norm = L->attn_norm, .attn_q_norm = L->attn_q_norm,
        .attn_k_norm = L->attn_k_norm, .post_attn_norm = L->post_attn_norm, .attn_q_b = L->attn_q_b,
        .attn_k_b = L->attn_k_b, .attn_v_b = L->attn_v_b, .attn_output_b = L->attn_output_b, .local = L->local,
        .rope_local = L->rope_local,
    };
    if (whole) {
        b.ffn_gate = view(&L->ffn_gate);
        b.ffn_up = view(&L->ffn_up);
        b.ffn_down = view(&L->ffn_down);
        b.ffn_norm = L->ffn_norm;
        b.post_ffn_norm = L->post_ffn_norm;
        b.ffn_gate_b = L->ffn_gate_b;
        b.ffn_up_b = L->ffn_up_b;
        b.ffn_down_b = L->ffn_down_b;
    }
    return b;
}

/* ---- the device's steps (pi_layer_ops) ---- */

static int cuda_error(const char *err) { return pi_set_error(PI_ERR_UNSUPPORTED, "%s", err); }

/* the stream of the step's n tokens onto the device, if the host holds it */
static int x_to_device(pi_context *c, int n) {
    char err[256];
    if (c->x_on_device) return PI_OK;
    if (pi_cuda_x_in(c->offload, c->x, n, err, sizeof err)) return cuda_error(err);
    c->x_on_device = 1;
    return PI_OK;
}

int pi_x_to_host(pi_context *c, int n) {
    char err[256];
    if (!c->x_on_device) return PI_OK;
    if (pi_cuda_x_out(c->offload, c->x, n, err, sizeof err)) return cuda_error(err);
    c->x_on_device = 0;
    return PI_OK;
}

static int device_attention(pi_context *c, int il, int n, int pos0) {
    char err[256];
    int rc = x_to_device(c, n);
    if (!rc && pi_cuda_layer_attention(c->offload, il, n, pos0, err, sizeof err)) rc = cuda_error(err);
    return rc;
}

static int device_ffn(pi_context *c, int il, int n) {
    char err[256];
    int rc = x_to_device(c, n);
    if (!rc && pi_cuda_layer_ffn(c->offload, il, n, err, sizeof err)) rc = cuda_error(err);
    if (!rc) c->stats.ffn_rows_done += (int64_t)n * c->model->info.n_ff;
    return rc;
}

static int device_logits(pi_context *c, int n, int pos0, int logits_mode) {
    char err[256];
    const int all = logits_mode == PI_LOGITS_ALL;
    float *logits = c->logits + (all ? (size_t)pos0 * c->model->info.n_vocab : 0);
    int rc = x_to_device(c, n);
    if (!rc && pi_cuda_logits(c->offload, n, all ? 0 : n - 1, logits, err, sizeof err)) rc = cuda_error(err);
    return rc;
}

/* ---- what goes on the device ---- */

/* Upload, per layer: whole from `first_whole` on, its attention where attn[il], else nothing;
 * and the output matrix with `output`. Then point those steps at the device. */
static int upload_parts(pi_context *c, int first_whole, const uint8_t *attn, int output) {
    const pi_model *m = c->model;
    const pi_model_info *h = &m->info;
    const int n_layer = h->n_layer;
    if (pi_cuda_device_count() == 0) return pi_set_error(PI_ERR_UNSUPPORTED, "no CUDA device");
    pi_cuda_block *blocks = calloc((size_t)(n_layer > 0 ? n_layer : 1), sizeof *blocks);
    if (!blocks) return pi_set_error(PI_ERR_NOMEM, "no memory for the offloaded layers");
    for (int il = 0; il < n_layer; il++)
        if (il >= first_whole || (attn && attn[il])) blocks[il] = block_of(&m->layers[il], il >= first_whole);
    pi_cuda_shape shape = {
        .n_embd = h->n_embd, .n_head = h->n_head, .n_head_kv = h->n_head_kv, .head_dim = m->head_dim,
        .n_ff = h->n_ff, .n_rot = h->n_rot, .n_ctx = (int32_t)c->n_ctx, .n_batch = (int32_t)c->n_batch,
        .act = h->ffn_act, .rope_neox = m->rope_neox, .swa_window = m->swa_window, .norm_eps = h->norm_eps,
        .attn_softcap = m->attn_softcap, .inv_freq = c->inv_freq,
    };
    if (output) {
        shape.output = view(&m->output);
        shape.output_norm = m->output_norm;
        shape.output_b = m->output_b;
    }
    char err[256];
    pi_cuda_layers *g = NULL;
    const int failed = pi_cuda_layers_new(&shape, n_layer, blocks, &g, err, sizeof err);
    free(blocks);
    if (failed) {
        pi_cuda_layers_free(g);
        return cuda_error(err);
    }
    c->offload = g;
    for (int il = 0; il < n_layer; il++) {
        if (il >= first_whole || (attn && attn[il])) c->ops[il].attention = device_attention;
        if (il >= first_whole) c->ops[il].ffn = device_ffn;
    }
    if (output) c->logits_op = device_logits;
    return PI_OK;
}

static int layer_offload(pi_context *c, int first) {
    const pi_model *m = c->model;
    const int n_layer = m->info.n_layer;
    if (!device_runs_the_block(m))
        return pi_set_error(PI_ERR_UNSUPPORTED, "layer offload runs the llama block; '%s' uses %s", m->arch,
                            m->layer_norm ? "LayerNorm" : "a parallel block");
    for (int il = first; il < n_layer; il++)
        if (!m->layers[il].ffn_gate.data || !m->layers[il].ffn_down.data)
            return pi_set_error(PI_ERR_UNSUPPORTED, "layer offload needs a gated FFN with ffn_down (layer %d)", il);
    /* the output too when every layer is offloaded and more asked (llama.cpp's n_layer + 1),
     * unless the host needs the final hidden states for embeddings */
    const int asked = c->params.n_gpu_layers;
    return upload_parts(c, first, NULL, first == 0 && (asked < 0 || asked > n_layer) && !c->embd);
}

int pi_offload_fixed(pi_context *c, const pi_layer_placement *plan, const pi_placement_totals *totals) {
    const pi_model *m = c->model;
    const int n_layer = m->info.n_layer;
    if (!device_runs_the_block(m)) return PI_OK;
    uint8_t *attn = calloc((size_t)(n_layer > 0 ? n_layer : 1), 1);
    if (!attn) return pi_set_error(PI_ERR_NOMEM, "no memory for the placement");
    const int output = totals->output_on_device && !c->embd;
    int any = output;
    for (int il = 0; il < n_layer; il++) any |= attn[il] = plan[il].fixed_on_device != 0;
    const int rc = any ? upload_parts(c, n_layer, attn, output) : PI_OK;
    free(attn);
    return rc;
}

void pi_offload_free(pi_context *c) {
    pi_cuda_layers_free(c->offload);
    c->offload = NULL;
}

#else

static int layer_offload(pi_context *c, int first) {
    (void)c;
    (void)first;
    return pi_set_error(PI_ERR_UNSUPPORTED, "this build has no CUDA (built without nvcc)");
}

/* nothing to place without CUDA: the split's fixed part stays on the CPU */
int pi_offload_fixed(pi_context *c, const pi_layer_placement *plan, const pi_placement_totals *totals) {
    (void)c;
    (void)plan;
    (void)totals;
    return PI_OK;
}

/* without CUDA the stream never leaves the host */
int pi_x_to_host(pi_context *c, int n) {
    (void)c;
    (void)n;
    return PI_OK;
}

void pi_offload_free(pi_context *c) { (void)c; }

#endif

int pi_offload_new(pi_context *c) {
    const int n_layer = c->model->info.n_layer, asked = c->params.n_gpu_layers;
    if (asked == 0) return PI_OK;
    if (c->params.vram_budget > 0)
        return pi_set_error(PI_ERR_ARG, "n_gpu_layers and vram_budget are two ways to use the device: choose one");
    const int rc = layer_offload(c, asked < 0 || asked >= n_layer ? 0 : n_layer - asked);
    if (rc != PI_ERR_UNSUPPORTED) return rc;
    char why[256]; /* the message names the option; pi_set_error must not read its own buffer */
    snprintf(why, sizeof why, "%s", pi_last_error());
    return pi_set_error(PI_ERR_UNSUPPORTED, "n_gpu_layers: %s", why);
}
