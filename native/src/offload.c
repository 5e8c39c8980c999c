/* offload.c - layer offload (offload.h) over cuda/layers_cuda.h. */
#include "offload.h"
#include "status.h"

#ifdef PI_HAVE_CUDA
#include <stdlib.h>

#include "cuda/layers_cuda.h"

static pi_cuda_weight view(const pi_weight *w) { return (pi_cuda_weight){ w->type, w->n_in, w->n_out, w->row_bytes, w->data }; }

/* What the device's block does not run: a model whose layers need it stays on the CPU. */
static int refuse_unsupported(const pi_model *m, int first) {
    if (m->layer_norm || m->parallel)
        return pi_set_error(PI_ERR_UNSUPPORTED, "layer offload runs the llama block; '%s' uses %s", m->arch,
                            m->layer_norm ? "LayerNorm" : "a parallel block");
    for (int il = first; il < m->info.n_layer; il++) {
        const pi_layer *L = &m->layers[il];
        if (!L->ffn_gate.data || !L->ffn_down.data)
            return pi_set_error(PI_ERR_UNSUPPORTED, "layer offload needs a gated FFN with ffn_down (layer %d)", il);
    }
    return PI_OK;
}

/* layers first.. onto the device */
static int offload_from(pi_context *c, int first) {
    const pi_model *m = c->model;
    const pi_model_info *h = &m->info;
    const int n_layer = h->n_layer;
    if (pi_cuda_device_count() == 0) return pi_set_error(PI_ERR_UNSUPPORTED, "n_gpu_layers: no CUDA device");
    int rc = refuse_unsupported(m, first);
    if (rc) return rc;
    pi_cuda_block *blocks = calloc((size_t)(n_layer - first), sizeof *blocks);
    if (!blocks) return pi_set_error(PI_ERR_NOMEM, "no memory for the offloaded layers");
    for (int il = first; il < n_layer; il++) {
        const pi_layer *L = &m->layers[il];
        blocks[il - first] = (pi_cuda_block){
            .attn_q = view(&L->attn_q), .attn_k = view(&L->attn_k), .attn_v = view(&L->attn_v),
            .attn_output = view(&L->attn_output), .ffn_gate = view(&L->ffn_gate), .ffn_up = view(&L->ffn_up),
            .ffn_down = view(&L->ffn_down), .attn_norm = L->attn_norm, .ffn_norm = L->ffn_norm,
            .attn_q_norm = L->attn_q_norm, .attn_k_norm = L->attn_k_norm, .post_attn_norm = L->post_attn_norm,
            .post_ffn_norm = L->post_ffn_norm, .attn_q_b = L->attn_q_b, .attn_k_b = L->attn_k_b,
            .attn_v_b = L->attn_v_b, .attn_output_b = L->attn_output_b, .ffn_gate_b = L->ffn_gate_b,
            .ffn_up_b = L->ffn_up_b, .ffn_down_b = L->ffn_down_b, .local = L->local, .rope_local = L->rope_local,
        };
    }
    pi_cuda_shape shape = {
        .n_embd = h->n_embd, .n_head = h->n_head, .n_head_kv = h->n_head_kv, .head_dim = m->head_dim,
        .n_ff = h->n_ff, .n_rot = h->n_rot, .n_ctx = (int32_t)c->n_ctx, .n_batch = (int32_t)c->n_batch,
        .act = h->ffn_act, .rope_neox = m->rope_neox, .swa_window = m->swa_window, .norm_eps = h->norm_eps,
        .inv_freq = c->inv_freq,
    };
    /* the output too when every layer is offloaded and more asked (llama.cpp's n_layer + 1), unless
     * the host needs the final hidden states for embeddings */
    const int output = first == 0 && (c->params.n_gpu_layers < 0 || c->params.n_gpu_layers > n_layer) && !c->embd;
    if (output) {
        shape.output = view(&m->output);
        shape.output_norm = m->output_norm;
        shape.output_b = m->output_b;
    }
    char err[256];
    pi_cuda_layers *g = NULL;
    if (pi_cuda_layers_new(&shape, n_layer - first, blocks, &g, err, sizeof err)) {
        pi_cuda_layers_free(g);
        rc = pi_set_error(PI_ERR_UNSUPPORTED, "%s", err);
    } else {
        c->offload = g;
        c->offload_first = first;
        c->offload_output = output;
    }
    free(blocks);
    return rc;
}

int pi_offload_run(pi_context *c, int n, int pos0, int logits_mode) {
    char err[256];
    const int want = c->offload_output && logits_mode != PI_LOGITS_NONE, all = logits_mode == PI_LOGITS_ALL;
    float *logits = want ? c->logits + (all ? (size_t)pos0 * c->model->info.n_vocab : 0) : NULL;
    if (pi_cuda_layers_run(c->offload, c->x, n, pos0, logits, all ? 0 : n - 1, err, sizeof err))
        return pi_set_error(PI_ERR_UNSUPPORTED, "%s", err);
    c->stats.ffn_rows_done += (int64_t)n * c->model->info.n_ff * (c->model->info.n_layer - c->offload_first);
    return PI_OK;
}

void pi_offload_free(pi_context *c) {
    pi_cuda_layers_free(c->offload);
    c->offload = NULL;
}

#else

static int offload_from(pi_context *c, int first) {
    (void)c;
    (void)first;
    return pi_set_error(PI_ERR_UNSUPPORTED, "n_gpu_layers: this build has no CUDA (built without nvcc)");
}

int pi_offload_run(pi_context *c, int n, int pos0, int logits_mode) {
    (void)n;
    (void)pos0;
    (void)logits_mode;
    return pi_set_error(PI_ERR_UNSUPPORTED, "n_gpu_layers: this build has no CUDA");
}

void pi_offload_free(pi_context *c) { (void)c; }

#endif

int pi_offload_new(pi_context *c) {
    const int n_layer = c->model->info.n_layer, asked = c->params.n_gpu_layers;
    c->offload_first = n_layer;
    if (asked == 0) return PI_OK;
    if (c->params.vram_budget > 0)
        return pi_set_error(PI_ERR_ARG, "n_gpu_layers and vram_budget are two ways to use the device: choose one");
    return offload_from(c, asked < 0 || asked >= n_layer ? 0 : n_layer - asked);
}
