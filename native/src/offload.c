/* offload.c - the forward pass's steps on a device (offload.h): the CUDA device over
 * cuda/layers_cuda.h, or the host stand-in, which runs the CPU's own blocks on a private copy of
 * the residual stream so that the routing of steps and the stream's comings and goings are
 * tested, to the bit, without a GPU (as device_host.c is for the split's FFN). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "offload.h"
#include "status.h"
#ifdef PI_HAVE_CUDA
#include "cuda/layers_cuda.h"
#include "cuda/weight_view.h"
#endif

/* A device's side of the steps. The stream comes in and goes out through x_in / x_out; the steps
 * work on the device's copy. Each returns PI_OK or a status with pi_last_error set. */
typedef struct {
    int (*x_in)(struct pi_offload *o, const float *x, int n);
    int (*x_out)(struct pi_offload *o, float *x, int n);
    int (*attention)(struct pi_offload *o, int il, int n, int pos0);
    int (*ffn)(struct pi_offload *o, int il, int n);
    int (*logits)(struct pi_offload *o, int n, int pos0, int logits_mode);
    void (*free)(struct pi_offload *o);
} offload_backend;

struct pi_offload {
    const offload_backend *be;
    pi_context *c;
    struct pi_cuda_layers *cuda; /* the CUDA device's layers (cuda/layers_cuda.h) */
    float *x;    /* [n_batch][n_embd] the stand-in's copy of the stream */
};

/* ---- the steps (pi_layer_ops) over a backend ---- */

/* the stream of the step's n tokens onto the device, if the host holds it */
static int x_to_device(pi_context *c, int n) {
    if (c->x_on_device) return PI_OK;
    const int rc = c->offload->be->x_in(c->offload, c->x, n);
    if (!rc) c->x_on_device = 1;
    return rc;
}

int pi_x_to_host(pi_context *c, int n) {
    if (!c->x_on_device) return PI_OK;
    const int rc = c->offload->be->x_out(c->offload, c->x, n);
    if (!rc) c->x_on_device = 0;
    return rc;
}

static int device_attention(pi_context *c, int il, int n, int pos0) {
    const int rc = x_to_device(c, n);
    return rc ? rc : c->offload->be->attention(c->offload, il, n, pos0);
}

static int device_ffn(pi_context *c, int il, int n) {
    const int rc = x_to_device(c, n);
    return rc ? rc : c->offload->be->ffn(c->offload, il, n);
}

static int device_logits(pi_context *c, int n, int pos0, int logits_mode) {
    const int rc = x_to_device(c, n);
    return rc ? rc : c->offload->be->logits(c->offload, n, pos0, logits_mode);
}

/* ---- the host stand-in: the CPU's blocks on its own copy of the stream ---- */

static int host_x_in(struct pi_offload *o, const float *x, int n) {
    memcpy(o->x, x, (size_t)n * o->c->model->info.n_embd * sizeof(float));
    return PI_OK;
}

static int host_x_out(struct pi_offload *o, float *x, int n) {
    memcpy(x, o->x, (size_t)n * o->c->model->info.n_embd * sizeof(float));
    return PI_OK;
}

/* a CPU block with the context's stream pointed at the stand-in's copy; the host's copy is
 * out of date meanwhile, and nothing reads it */
static int host_block(struct pi_offload *o, int step, int il, int n, int pos0, int logits_mode) {
    pi_context *c = o->c;
    float *host = c->x;
    c->x = o->x;
    const int rc = step == 0 ? pi_attention_block(c, il, n, pos0)
                 : step == 1 ? pi_ffn_block(c, il, n)
                             : pi_logits_block(c, n, pos0, logits_mode);
    c->x = host;
    return rc;
}

static int host_attention(struct pi_offload *o, int il, int n, int pos0) { return host_block(o, 0, il, n, pos0, 0); }
static int host_ffn(struct pi_offload *o, int il, int n) { return host_block(o, 1, il, n, 0, 0); }
static int host_logits(struct pi_offload *o, int n, int pos0, int logits_mode) {
    return host_block(o, 2, 0, n, pos0, logits_mode);
}
static void host_free(struct pi_offload *o) { free(o->x); }

static const offload_backend host_backend = { host_x_in, host_x_out, host_attention, host_ffn, host_logits, host_free };

static int host_new(struct pi_offload *o, int first_whole, const uint8_t *attn, int output) {
    (void)first_whole, (void)attn, (void)output; /* the stand-in reads the model's own weights */
    o->be = &host_backend;
    o->x = malloc((size_t)o->c->n_batch * o->c->model->info.n_embd * sizeof(float));
    return o->x ? PI_OK : pi_set_error(PI_ERR_NOMEM, "no memory for the stand-in device's stream");
}

/* ---- the CUDA device ---- */

#ifdef PI_HAVE_CUDA
static int cuda_status(int failed, const char *err) { return failed ? pi_set_error(PI_ERR_UNSUPPORTED, "%s", err) : PI_OK; }

static int cuda_x_in(struct pi_offload *o, const float *x, int n) {
    char err[256];
    return cuda_status(pi_cuda_x_in(o->cuda, x, n, err, sizeof err), err);
}

static int cuda_x_out(struct pi_offload *o, float *x, int n) {
    char err[256];
    return cuda_status(pi_cuda_x_out(o->cuda, x, n, err, sizeof err), err);
}

/* the FFN's rows, dense, as the CPU counts them */
static void count_ffn_rows(struct pi_offload *o, int n) { o->c->stats.ffn_rows_done += (int64_t)n * o->c->model->info.n_ff; }

static int cuda_attention(struct pi_offload *o, int il, int n, int pos0) {
    char err[256];
    const int rc = cuda_status(pi_cuda_layer_attention(o->cuda, il, n, pos0, err, sizeof err), err);
    if (!rc && o->c->model->parallel) count_ffn_rows(o, n); /* its FFN ran inside */
    return rc;
}

static int cuda_ffn(struct pi_offload *o, int il, int n) {
    char err[256];
    const int rc = cuda_status(pi_cuda_layer_ffn(o->cuda, il, n, err, sizeof err), err);
    if (!rc) count_ffn_rows(o, n);
    return rc;
}

static int cuda_logits(struct pi_offload *o, int n, int pos0, int logits_mode) {
    char err[256];
    const int first = logits_mode == PI_LOGITS_ALL ? 0 : n - 1;
    return cuda_status(pi_cuda_logits(o->cuda, n, first, pi_logits_rows(o->c, pos0, logits_mode), err, sizeof err), err);
}

static void cuda_free(struct pi_offload *o) { pi_cuda_layers_free(o->cuda); }

static const offload_backend cuda_backend = { cuda_x_in, cuda_x_out, cuda_attention, cuda_ffn, cuda_logits, cuda_free };

/* Layer il as the device takes it: its attention, and its FFN too when whole. */
static pi_cuda_block block_of(const pi_layer *L, int whole) {
    pi_cuda_block b = {
        .attn_q = pi_cuda_view(&L->attn_q), .attn_k = pi_cuda_view(&L->attn_k),
        .attn_v = pi_cuda_view(&L->attn_v), .attn_output = pi_cuda_view(&L->attn_output),
        .attn_norm = L->attn_norm, .attn_norm_b = L->attn_norm_b,
        .attn_q_norm = L->attn_q_norm, .attn_k_norm = L->attn_k_norm, .post_attn_norm = L->post_attn_norm,
        .attn_q_b = L->attn_q_b, .attn_k_b = L->attn_k_b, .attn_v_b = L->attn_v_b,
        .attn_output_b = L->attn_output_b, .local = L->local, .rope_local = L->rope_local,
    };
    if (whole) {
        b.ffn_gate = pi_cuda_view(&L->ffn_gate);
        b.ffn_up = pi_cuda_view(&L->ffn_up);
        b.ffn_down = pi_cuda_view(&L->ffn_down);
        b.ffn_down_t = pi_cuda_view(&L->ffn_down_t); /* read only without ffn_down */
        b.ffn_norm = L->ffn_norm;
        b.ffn_norm_b = L->ffn_norm_b;
        b.post_ffn_norm = L->post_ffn_norm;
        b.ffn_gate_b = L->ffn_gate_b;
        b.ffn_up_b = L->ffn_up_b;
        b.ffn_down_b = L->ffn_down_b;
    }
    return b;
}

/* Upload, per layer: whole from `first_whole` on, its attention where attn[il], else nothing;
 * and the output matrix with `output`. */
static int cuda_new(struct pi_offload *o, int first_whole, const uint8_t *attn, int output) {
    const pi_context *c = o->c;
    const pi_model *m = c->model;
    const pi_model_info *h = &m->info;
    const int n_layer = h->n_layer;
    o->be = &cuda_backend;
    if (pi_cuda_device_count() == 0) return pi_set_error(PI_ERR_UNSUPPORTED, "no CUDA device");
    pi_cuda_block *blocks = calloc((size_t)(n_layer > 0 ? n_layer : 1), sizeof *blocks);
    if (!blocks) return pi_set_error(PI_ERR_NOMEM, "no memory for the offloaded layers");
    for (int il = 0; il < n_layer; il++)
        if (il >= first_whole || (attn && attn[il])) blocks[il] = block_of(&m->layers[il], il >= first_whole);
    pi_cuda_shape shape = {
        .n_embd = h->n_embd, .n_head = h->n_head, .n_head_kv = h->n_head_kv, .head_dim = m->head_dim,
        .n_ff = h->n_ff, .n_rot = h->n_rot, .n_ctx = (int32_t)c->n_ctx, .n_batch = (int32_t)c->n_batch,
        .act = h->ffn_act, .rope_neox = m->rope_neox, .swa_window = m->swa_window, .layer_norm = m->layer_norm,
        .parallel = m->parallel, .norm_eps = h->norm_eps,
        .attn_softcap = m->attn_softcap, .inv_freq = c->inv_freq,
    };
    if (output) {
        shape.output = pi_cuda_view(&m->output);
        shape.output_norm = m->output_norm;
        shape.output_norm_b = m->output_norm_b;
        shape.output_b = m->output_b;
    }
    char err[256];
    pi_cuda_layers *g = NULL;
    const int failed = pi_cuda_layers_new(&shape, n_layer, blocks, &g, err, sizeof err);
    free(blocks);
    o->cuda = g; /* freed with the offload, made whole or not */
    return cuda_status(failed, err);
}
#else
static int cuda_new(struct pi_offload *o, int first_whole, const uint8_t *attn, int output) {
    (void)o, (void)first_whole, (void)attn, (void)output;
    return pi_set_error(PI_ERR_UNSUPPORTED, "this build has no CUDA (built without nvcc)");
}
#endif

/* ---- what goes on the device ---- */

/* The device the context asked for (params.device: the stand-in, or CUDA) with layers
 * first_whole.. whole, the attention of each layer attn[il], and the logits with `output`;
 * then those steps point at it. */
static int place(pi_context *c, int first_whole, const uint8_t *attn, int output) {
    struct pi_offload *o = calloc(1, sizeof *o);
    if (!o) return pi_set_error(PI_ERR_NOMEM, "no memory for the offload");
    o->c = c;
    c->offload = o; /* pi_offload_free releases it, made whole or not */
    const int rc = c->params.device == PI_DEVICE_HOST ? host_new(o, first_whole, attn, output)
                                                      : cuda_new(o, first_whole, attn, output);
    if (rc) return rc;
    for (int il = 0; il < c->model->info.n_layer; il++) {
        if (il >= first_whole || (attn && attn[il])) c->ops[il].attention = device_attention;
        /* a parallel block's FFN runs inside its attention step; its own step stays empty */
        if (il >= first_whole && !c->model->parallel) c->ops[il].ffn = device_ffn;
    }
    if (output) c->logits_op = device_logits;
    return PI_OK;
}

static int layer_offload(pi_context *c, int first) {
    const pi_model *m = c->model;
    const int n_layer = m->info.n_layer, asked = c->params.n_gpu_layers;
    for (int il = first; il < n_layer; il++)
        if (!m->layers[il].ffn_down.data && !m->layers[il].ffn_down_t.data)
            return pi_set_error(PI_ERR_UNSUPPORTED, "layer offload needs ffn_down or ffn_down_t (layer %d)", il);
    /* the output too when every layer is offloaded and more asked (llama.cpp's n_layer + 1),
     * unless the host needs the final hidden states for embeddings */
    return place(c, first, NULL, first == 0 && (asked < 0 || asked > n_layer) && !c->embd);
}

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

int pi_offload_fixed(pi_context *c, const pi_layer_placement *plan, const pi_placement_totals *totals) {
    const pi_model *m = c->model;
    const int n_layer = m->info.n_layer;
    uint8_t *attn = calloc((size_t)(n_layer > 0 ? n_layer : 1), 1);
    if (!attn) return pi_set_error(PI_ERR_NOMEM, "no memory for the placement");
    const int output = totals->output_on_device && !c->embd;
    int any = output;
    /* a parallel block's attention step holds its FFN, which the split runs: it stays here (the
     * plan spent no budget on it) */
    for (int il = 0; il < n_layer; il++) any |= attn[il] = plan[il].fixed_on_device && !m->parallel;
    const int rc = any ? place(c, n_layer, attn, output) : PI_OK;
    free(attn);
    return rc;
}

void pi_offload_free(pi_context *c) {
    struct pi_offload *o = c->offload;
    if (!o) return;
    if (o->be) o->be->free(o);
    free(o);
    c->offload = NULL;
}
