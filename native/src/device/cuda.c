/* cuda.c - the CUDA device (device.h): whole layers, placed attention and output over
 * cuda/layers_cuda.h, the split's hot rows over cuda/ffn_cuda.h, all on the one stream the layers
 * own. The copies and waits it makes are counted in the context's stats. */
#include <stdlib.h>

#include "device/device.h"
#include "status.h"

#ifdef PI_HAVE_CUDA
#include "cuda/layers_cuda.h"
#include "device/hot_rows.h"
#include "ffn_sparse.h"
#include "placement.h"
#include "split_engine.h"
#include "token_bytes.h"

typedef struct {
    pi_device base;
    pi_context *c;
    pi_cuda_layers *layers; /* the stream, and what every token reads that was placed */
    pi_cuda_ffn *ffn;       /* the split's hot rows, or NULL */
    char err[256];
} cuda_device;

static pi_cuda_weight view(const pi_weight *w) {
    return (pi_cuda_weight){ w->type, w->n_in, w->n_out, w->row_bytes, w->data, w->grouped };
}

static int status(cuda_device *dev, int failed) {
    return failed ? pi_set_error(PI_ERR_UNSUPPORTED, "%s", dev->err) : PI_OK;
}

static void count(cuda_device *dev, int copies, int syncs) {
    dev->c->stats.device_copies += copies;
    dev->c->stats.device_syncs += syncs;
}

/* after a wait: the hot neurons of the split steps whose counts have come back since (their bytes
 * at layer 0's neuron size, each with its down row: the device does not say which were zero) */
static void collect(cuda_device *dev) {
    if (!dev->ffn) return;
    const int64_t neurons = pi_cuda_ffn_collect(dev->ffn);
    dev->c->stats.ffn_rows_done += neurons;
    dev->c->stats.ffn_rows_hot += neurons;
    dev->c->step_bytes += neurons * (int64_t)pi_neuron_bytes(&dev->c->model->layers[0]);
}

static int cuda_x_in(pi_device *d, const float *x, int n) {
    cuda_device *dev = (cuda_device *)d;
    count(dev, 1, 0);
    return status(dev, pi_cuda_x_in(dev->layers, x, n, dev->err, sizeof dev->err));
}

static int cuda_x_out(pi_device *d, float *x, int n) {
    cuda_device *dev = (cuda_device *)d;
    count(dev, 1, 1);
    const int rc = status(dev, pi_cuda_x_out(dev->layers, x, n, dev->err, sizeof dev->err));
    collect(dev);
    return rc;
}

/* the FFN's rows and bytes, dense, as the CPU counts them */
static void count_ffn_rows(cuda_device *dev, int il, int n) {
    dev->c->stats.ffn_rows_done += (int64_t)n * dev->c->model->info.n_ff;
    dev->c->step_bytes += (int64_t)n * (int64_t)pi_dense_ffn_bytes(&dev->c->model->layers[il]);
}

static int cuda_attention(pi_device *d, int il, int n, int pos0) {
    cuda_device *dev = (cuda_device *)d;
    const int rc = status(dev, pi_cuda_layer_attention(dev->layers, il, n, pos0, dev->err, sizeof dev->err));
    if (!rc && dev->c->model->parallel) count_ffn_rows(dev, il, n); /* its FFN ran inside */
    return rc;
}

static int cuda_ffn(pi_device *d, int il, int n) {
    cuda_device *dev = (cuda_device *)d;
    const int rc = status(dev, pi_cuda_layer_ffn(dev->layers, il, n, dev->err, sizeof dev->err));
    if (!rc) count_ffn_rows(dev, il, n);
    return rc;
}

static int cuda_logits(pi_device *d, int n, pi_outputs out) {
    cuda_device *dev = (cuda_device *)d;
    count(dev, 1, 1);
    const int rc = status(dev, pi_cuda_logits(dev->layers, n, out.first, out.rows, dev->err, sizeof dev->err));
    collect(dev);
    return rc;
}

static int cuda_split_norm(pi_device *d, int il, int t, float *xn) {
    cuda_device *dev = (cuda_device *)d;
    count(dev, 1, 1);
    const int rc = status(dev, pi_cuda_split_norm(dev->layers, il, t, xn, dev->err, sizeof dev->err));
    collect(dev);
    return rc;
}

/* a neuron split's only: the device has no expert kernels (place.c refuses an MoE model's budget first) */
static int refuse_experts(const pi_split *s) {
    return s->kind == PI_SPLIT_NEURONS ? PI_OK
                                       : pi_set_error(PI_ERR_UNSUPPORTED, "the CUDA device has no expert kernels");
}

static int cuda_split_start(pi_device *d, pi_split *s) {
    cuda_device *dev = (cuda_device *)d;
    if (refuse_experts(s)) return PI_ERR_UNSUPPORTED;
    const ffn_job *job = s->work;
    const int layer = s->layer;
    if (s->resident) /* from the device's own normed row */
        return status(dev, pi_cuda_ffn_start_on(dev->ffn, layer, pi_cuda_layers_xn(dev->layers), job->threshold,
                                                dev->err, sizeof dev->err));
    count(dev, 1, 0);
    return status(dev, pi_cuda_ffn_start(dev->ffn, layer, job->x.f, job->threshold, dev->err, sizeof dev->err));
}

static int cuda_split_end(pi_device *d, pi_split *s) {
    cuda_device *dev = (cuda_device *)d;
    if (refuse_experts(s)) return PI_ERR_UNSUPPORTED;
    if (!s->resident) { /* the hot runs' sum into slot 0, their neurons into its count */
        count(dev, 1, 1);
        const int rc = status(dev, pi_cuda_ffn_wait(dev->ffn, s->acc, s->rows, dev->err, sizeof dev->err));
        /* the device computes gate, up and down for each neuron, and does not say which were zero */
        const pi_layer *L = &dev->c->model->layers[s->layer];
        s->bytes[0] = (int64_t)s->rows[0] * (int64_t)(L->ffn_gate.row_bytes + L->ffn_up.row_bytes + L->ffn_down_t.row_bytes);
        return rc;
    }
    count(dev, 1, 0);
    const float *hot = s->n_dev > 0 ? pi_cuda_ffn_sum(dev->ffn) : NULL;
    return status(dev, pi_cuda_split_merge(dev->layers, s->layer, s->t, hot, s->cold, dev->err, sizeof dev->err));
}

static void cuda_free(pi_device *d) {
    cuda_device *dev = (cuda_device *)d;
    pi_cuda_ffn_free(dev->ffn);
    pi_cuda_layers_free(dev->layers);
    free(dev);
}

static const pi_device_ops cuda_ops = {
    "cuda", cuda_x_in, cuda_x_out, cuda_attention, cuda_ffn, cuda_logits,
    cuda_split_norm, cuda_split_start, cuda_split_end, cuda_free,
};

/* Layer il as the device takes it: its attention, with the FFN's norms and biases (the split's
 * merge on the device needs them), and its whole FFN when whole. */
static pi_cuda_block block_of(const pi_layer *L, int whole) {
    pi_cuda_block b = {
        .attn_q = view(&L->attn_q), .attn_k = view(&L->attn_k), .attn_v = view(&L->attn_v),
        .attn_output = view(&L->attn_output), .attn_norm = L->attn_norm, .attn_norm_b = L->attn_norm_b,
        .attn_q_norm = L->attn_q_norm, .attn_k_norm = L->attn_k_norm, .post_attn_norm = L->post_attn_norm,
        .attn_q_b = L->attn_q_b, .attn_k_b = L->attn_k_b, .attn_v_b = L->attn_v_b,
        .attn_output_b = L->attn_output_b,
        .ffn_norm = L->ffn_norm, .ffn_norm_b = L->ffn_norm_b, .post_ffn_norm = L->post_ffn_norm,
        .ffn_down_b = L->ffn_down_b,
    };
#define COPY(type, name) b.name = L->name;
    PI_LAYER_TRAITS(COPY)
#undef COPY
    if (whole) {
        b.ffn_gate = view(&L->ffn_gate);
        b.ffn_up = view(&L->ffn_up);
        b.ffn_down = view(&L->ffn_down);
        b.ffn_down_t = view(&L->ffn_down_t); /* read only without ffn_down */
        b.ffn_gate_b = L->ffn_gate_b;
        b.ffn_up_b = L->ffn_up_b;
    }
    return b;
}

static int upload_layers(cuda_device *dev, const pi_device_share *share) {
    const pi_context *c = dev->c;
    const pi_model *m = c->model;
    const pi_model_info *h = &m->info;
    const int n_layer = h->n_layer;
    pi_cuda_block *blocks = calloc((size_t)(n_layer > 0 ? n_layer : 1), sizeof *blocks);
    if (!blocks) return pi_set_error(PI_ERR_NOMEM, "no memory for the offloaded layers");
    for (int il = 0; il < n_layer; il++)
        if (il >= share->first_whole || (share->attention && share->attention[il]))
            blocks[il] = block_of(&m->layers[il], il >= share->first_whole);
    pi_cuda_shape shape = {
        .n_embd = h->n_embd, .n_head = h->n_head, .n_head_kv = h->n_head_kv, .head_dim = m->head_dim,
        .n_ff = h->n_ff, .n_rot = h->n_rot, .n_ctx = (int32_t)c->n_ctx, .n_batch = (int32_t)c->n_batch,
        .act = h->ffn_act, .norm_eps = h->norm_eps, .inv_freq = c->s.inv_freq,
    };
#define COPY(type, name) shape.name = m->name;
    PI_BLOCK_TRAITS(COPY)
#undef COPY
    if (share->output) {
        shape.output = view(&m->output);
        shape.output_norm = m->output_norm;
        shape.output_norm_b = m->output_norm_b;
        shape.output_b = m->output_b;
    }
    const int failed = pi_cuda_layers_new(&shape, n_layer, blocks, &dev->layers, dev->err, sizeof dev->err);
    free(blocks);
    return status(dev, failed);
}

/* a layer's bias in layout order over its n hot positions, or NULL */
static float *hot_bias(const float *b, const int32_t *layout, int n) {
    if (!b) return NULL;
    float *out = malloc((size_t)n * sizeof(float));
    if (out)
        for (int p = 0; p < n; p++) out[p] = b[layout[p]];
    return out;
}

static int upload_hot_rows(cuda_device *dev) {
    const pi_context *c = dev->c;
    const pi_model *m = c->model;
    const int n_layer = m->info.n_layer, n_ff = m->info.n_ff;
    pi_cuda_layer *layers = calloc((size_t)(n_layer > 0 ? n_layer : 1), sizeof *layers);
    pi_hot_copy copy = { 0 };
    int rc = !layers ? pi_set_error(PI_ERR_NOMEM, "no memory for the CUDA device") : pi_hot_copy_new(c, &copy);
    for (int il = 0; !rc && il < n_layer; il++) {
        const ffn_rows *w = &copy.layers[il];
        pi_cuda_layer *L = &layers[il];
        const int32_t *layout = c->sparse.layout + (size_t)il * n_ff;
        L->n_hot = copy.n_hot[il];
        if (!L->n_hot) continue;
        L->fc1 = view(&w->fc1);
        L->fc2 = view(&w->fc2);
        L->gate = view(&w->gate);
        L->up = view(&w->up);
        L->down_t = view(&w->down_t);
        L->gate_b = hot_bias(m->layers[il].ffn_gate_b, layout, L->n_hot);
        L->up_b = hot_bias(m->layers[il].ffn_up_b, layout, L->n_hot);
        if ((m->layers[il].ffn_gate_b && !L->gate_b) || (m->layers[il].ffn_up_b && !L->up_b))
            rc = pi_set_error(PI_ERR_NOMEM, "no memory for the hot biases");
    }
    if (!rc)
        rc = status(dev, pi_cuda_ffn_new(pi_cuda_layers_stream(dev->layers), n_layer, m->info.n_embd, m->info.ffn_act,
                                         PI_FFN_RUN, layers, &dev->ffn, dev->err, sizeof dev->err));
    pi_hot_copy_free(&copy); /* the device has its own now */
    for (int il = 0; layers && il < n_layer; il++) {
        free((void *)layers[il].gate_b);
        free((void *)layers[il].up_b);
    }
    free(layers);
    return rc;
}

int pi_device_cuda_new(pi_context *c, const pi_device_share *share, pi_device **out) {
    if (pi_cuda_device_count() == 0) return pi_set_error(PI_ERR_UNSUPPORTED, "no CUDA device");
    cuda_device *dev = calloc(1, sizeof *dev);
    if (!dev) return pi_set_error(PI_ERR_NOMEM, "no memory for the CUDA device");
    dev->base.ops = &cuda_ops;
    dev->c = c;
    int rc = upload_layers(dev, share);
    if (!rc && c->sparse.hot_runs) rc = upload_hot_rows(dev);
    if (rc) {
        cuda_free(&dev->base);
        return rc;
    }
    *out = &dev->base;
    return PI_OK;
}

#else

int pi_device_cuda_new(pi_context *c, const pi_device_share *share, pi_device **out) {
    (void)c, (void)share, (void)out;
    return pi_set_error(PI_ERR_UNSUPPORTED, "this build has no CUDA (built without nvcc): %s", pi_build_info());
}

#endif
