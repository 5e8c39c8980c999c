/* context.c - create a run state, evaluate tokens in n_batch chunks, hand out logits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "context.h"
#include "device.h"
#include "offload.h"
#include "placement.h"
#include "status.h"

PI_API pi_context_params pi_context_default_params(void) {
    pi_context_params p = { .n_ctx = 512, .n_batch = 512, .n_threads = 0, .n_threads_batch = 0,
                            .logits_all = 0, .kernel_impl = PI_IMPL_AUTO, .sparse = PI_SPARSE_DECODE,
                            .sparse_threshold_shift = 0.0f, .device = PI_DEVICE_NONE, .vram_budget = 0,
                            .embeddings = 0, .n_gpu_layers = 0 };
    return p;
}

static int cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Sizes of every buffer, in floats (or blocks), computed once so the total can be checked first. */
typedef struct {
    size_t kv, x, xn, xq, xk, q, k, gate, rope, inv_freq, att, out_x, out_q, out_k, logits, rank, rank_k, per_thread,
        ff, runs, run_acc, embd;
} buffer_sizes;

static buffer_sizes plan(const pi_model *m, uint32_t n_ctx, uint32_t B, int n_threads, int logits_rows) {
    const pi_model_info *h = &m->info;
    size_t q_dim = (size_t)h->n_head * m->head_dim, kv_dim = (size_t)h->n_head_kv * m->head_dim;
    size_t max_dim = (size_t)h->n_embd;
    if (q_dim > max_dim) max_dim = q_dim;
    if ((size_t)h->n_ff > max_dim) max_dim = (size_t)h->n_ff;
    buffer_sizes s = {
        .kv = (size_t)h->n_layer * n_ctx * kv_dim,
        .x = (size_t)B * h->n_embd,
        .xn = (size_t)B * max_dim,
        .xq = (size_t)B * ((max_dim + QK - 1) / QK),
        .xk = m->kquant_weights ? (size_t)B * ((max_dim + QK_K - 1) / QK_K) : 0,
        .q = (size_t)B * q_dim,
        .k = (size_t)B * kv_dim,
        .gate = (size_t)B * h->n_ff,
        .rope = 2 * (size_t)B * (size_t)h->n_rot, /* global and local (sliding-window) layers */
        .inv_freq = (size_t)h->n_rot,
        .att = (size_t)n_threads * n_ctx,
        .out_x = (size_t)B * h->n_embd,
        .out_q = (size_t)B * ((size_t)(h->n_embd + QK - 1) / QK),
        .out_k = m->kquant_weights ? (size_t)B * ((size_t)(h->n_embd + QK_K - 1) / QK_K) : 0,
        .logits = (size_t)logits_rows * h->n_vocab,
        .rank = (size_t)(n_threads + 1) * (size_t)(m->max_rank + QK),
        .per_thread = (size_t)n_threads * h->n_embd,
        .ff = (size_t)h->n_ff,
        .runs = (size_t)(h->n_ff + PI_FFN_RUN - 1) / PI_FFN_RUN,
    };
    s.run_acc = s.runs * (size_t)h->n_embd;
    s.rank_k = m->kquant_weights ? s.rank / QK_K + 1 : 0; /* the Q8_K forms only for K-quant weights */
    s.embd = 0;
    return s;
}

static double total_bytes(const buffer_sizes *s) {
    double floats = s->kv /* two f16 caches */ + s->x + s->xn + s->q + 2.0 * s->k + 2.0 * s->gate + s->rope + s->inv_freq + s->att +
                    2.0 * s->out_x + s->logits + s->rank +
                    s->per_thread + 3.0 * s->ff + s->runs + s->run_acc + s->embd;
    const double k_blocks = (double)s->xk + s->out_k + s->rank_k;
    return floats * sizeof(float) + ((double)s->xq + s->out_q) * sizeof(block_q8x) + k_blocks * sizeof(block_q8k);
}

/* The hot/cold split of params.vram_budget: the plan's hot neurons, whole runs of them, first in
 * each layer's layout, and the device that computes them. With PI_DEVICE_NONE the layout still
 * applies and the CPU computes every run: the reference the split is tested against. Nothing to
 * do without predictors or a budget. */
static int start_split(pi_context *c) {
    const pi_model *m = c->model;
    const int n_layer = m->info.n_layer, n_ff = m->info.n_ff;
    if (c->params.device < PI_DEVICE_NONE || c->params.device > PI_DEVICE_CUDA)
        return pi_set_error(PI_ERR_ARG, "unknown device %d", c->params.device);
    if (!m->has_predictors || c->params.vram_budget == 0) return PI_OK;
    pi_layer_placement *plan = malloc((size_t)n_layer * sizeof *plan);
    uint8_t *hot = malloc((size_t)n_ff);
    c->hot_runs = calloc((size_t)n_layer, sizeof(int32_t));
    c->layout = malloc((size_t)n_layer * (size_t)n_ff * sizeof(int32_t));
    if (!plan || !hot || !c->hot_runs || !c->layout) {
        free(plan);
        free(hot);
        return pi_set_error(PI_ERR_NOMEM, "no memory for the placement");
    }
    pi_placement_totals totals;
    pi_plan_placement(m, c->params.vram_budget, plan, &totals);
    /* what every token reads, as placed: attention and output on the device */
    int rc = c->params.device != PI_DEVICE_NONE ? pi_offload_fixed(c, plan, &totals) : PI_OK;
    int any = 0;
    for (int il = 0; il < n_layer; il++) {
        const pi_layer *L = &m->layers[il];
        int32_t *layout = c->layout + (size_t)il * n_ff;
        c->hot_runs[il] = (plan[il].n_hot + PI_FFN_RUN - 1) / PI_FFN_RUN;
        any |= c->hot_runs[il] > 0;
        memset(hot, 0, (size_t)n_ff);
        for (int p = 0; p < plan[il].n_hot; p++) hot[L->order[p]] = 1;
        int at = 0;
        for (int side = 1; side >= 0; side--)
            for (int i = 0; i < n_ff; i++)
                if (hot[i] == side) layout[at++] = i;
    }
    free(plan);
    free(hot);
    if (rc || !any || c->params.device == PI_DEVICE_NONE) return rc;
    return c->params.device == PI_DEVICE_HOST ? pi_device_host_new(c, &c->device) : pi_device_cuda_new(c, &c->device);
}

PI_API int pi_context_new(pi_model *m, pi_context_params p, pi_context **out) {
    if (!m || !out) return pi_set_error(PI_ERR_ARG, "pi_context_new: NULL argument");
    *out = NULL;
    if (m->vocab_only) return pi_set_error(PI_ERR_ARG, "model was loaded with vocab_only: it cannot be evaluated");
    const pi_model_info *h = &m->info;
    uint32_t n_ctx = p.n_ctx ? p.n_ctx : (uint32_t)h->n_ctx_train;
    uint32_t n_batch = p.n_batch ? p.n_batch : 512;
    if (n_batch > n_ctx) n_batch = n_ctx;
    if (n_ctx > (1u << 24)) return pi_set_error(PI_ERR_ARG, "n_ctx %u is too large", n_ctx);
    if (m->position_embd.data && n_ctx > (uint32_t)h->n_ctx_train)
        return pi_set_error(PI_ERR_ARG, "n_ctx %u is more than the model's %d learned positions", n_ctx, h->n_ctx_train);
    int n_threads = p.n_threads > 0 ? p.n_threads : cpu_count();
    int n_threads_batch = p.n_threads_batch > 0 ? p.n_threads_batch : n_threads;
    int pool_size = n_threads > n_threads_batch ? n_threads : n_threads_batch;
    int logits_rows = p.logits_all ? (int)n_ctx : 1;
    buffer_sizes s = plan(m, n_ctx, n_batch, pool_size, logits_rows);
    if (p.embeddings) s.embd = (size_t)n_ctx * h->n_embd;

    /* refuse before allocating: a KV cache larger than the machine's memory cannot work */
    double need = total_bytes(&s);
    double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (phys > 0 && need > phys)
        return pi_set_error(PI_ERR_NOMEM,
                            "a context of n_ctx=%u needs %.1f MiB (KV cache %.1f MiB), more than the %.1f MiB of RAM",
                            n_ctx, need / 1048576.0, 2.0 * s.kv * sizeof(pi_fp16) / 1048576.0, phys / 1048576.0);

    pi_context *c = calloc(1, sizeof *c);
    if (!c) return pi_set_error(PI_ERR_NOMEM, "no memory for the context");
    c->model = m;
    c->params = p;
    c->n_ctx = n_ctx;
    c->n_batch = n_batch;
    c->params.n_threads = n_threads;
    c->params.n_threads_batch = n_threads_batch;
    c->logits_rows = logits_rows;
    if (pi_kernels_init(&c->kern, p.kernel_impl) != 0) {
        free(c);
        return pi_set_error(PI_ERR_UNSUPPORTED, "kernel implementation %d is not available on this CPU", p.kernel_impl);
    }
    pi_vec_ops_init(&c->vec, p.kernel_impl != PI_IMPL_REF);
    c->k_cache = calloc(s.kv, sizeof(pi_fp16));
    c->v_cache = calloc(s.kv, sizeof(pi_fp16));
    c->x = malloc(s.x * sizeof(float));
    c->xn = malloc(s.xn * sizeof(float));
    c->xq.q = malloc(s.xq * sizeof(block_q8x));
    c->xq.k = s.xk ? malloc(s.xk * sizeof(block_q8k)) : NULL;
    c->q = malloc(s.q * sizeof(float));
    c->k = malloc(s.k * sizeof(float));
    c->v = malloc(s.k * sizeof(float));
    c->gate = malloc(s.gate * sizeof(float));
    c->up = malloc(s.gate * sizeof(float));
    c->rope_cs = malloc((s.rope + 1) * sizeof(float)); /* + 1: no rope (opt) has none */
    c->inv_freq = malloc((s.inv_freq + 1) * sizeof(float));
    c->att = malloc(s.att * sizeof(float));
    c->ops = malloc((size_t)(h->n_layer > 0 ? h->n_layer : 1) * sizeof *c->ops);
    c->out_x = malloc(s.out_x * sizeof(float));
    c->delta = malloc(s.out_x * sizeof(float));
    c->out_q.q = malloc(s.out_q * sizeof(block_q8x));
    c->out_q.k = s.out_k ? malloc(s.out_k * sizeof(block_q8k)) : NULL;
    c->logits = calloc(s.logits, sizeof(float));
    c->pred_h = malloc(s.rank * sizeof(float));
    c->pred_hq.q = malloc((s.rank / QK + 1) * sizeof(block_q8x));
    c->pred_hq.k = s.rank_k ? malloc(s.rank_k * sizeof(block_q8k)) : NULL;
    c->rank_stride = m->max_rank + QK;
    c->pred_out = malloc(s.ff * sizeof(float));
    c->active = malloc(s.ff * sizeof(int32_t));
    c->active_rows = malloc(s.ff * sizeof(int32_t));
    c->run_acc = malloc(s.run_acc * sizeof(float));
    c->run_rows = calloc(s.runs, sizeof(int32_t));
    c->embd = s.embd ? calloc(s.embd, sizeof(float)) : NULL;
    c->down_acc = malloc(s.per_thread * sizeof(float));
    if (!c->k_cache || !c->v_cache || !c->x || !c->xn || !c->xq.q || (s.xk && !c->xq.k) || !c->q || !c->k || !c->v ||
        !c->gate || !c->up || !c->rope_cs || !c->inv_freq || !c->att || !c->out_x || !c->delta || !c->out_q.q ||
        (s.out_k && !c->out_q.k) || !c->logits || !c->pred_h || !c->pred_hq.q || (s.rank_k && !c->pred_hq.k) ||
        !c->pred_out || !c->active || !c->active_rows || !c->run_acc || !c->run_rows || !c->down_acc || !c->ops ||
        (s.embd && !c->embd)) {
        pi_context_free(c);
        return pi_set_error(PI_ERR_NOMEM, "no memory for a context of n_ctx=%u (%.1f MiB)", n_ctx, need / 1048576.0);
    }
    /* theta_i = pos * base^(-2i/n_rot) * freq_scale, divided by rope_freqs when the model has them */
    /* the local layers' rope (gemma3) has its own base and no scaling */
    for (int i = 0; i < h->n_rot / 2; i++) {
        double f = pow((double)h->rope_freq_base, -2.0 * i / h->n_rot) * h->rope_freq_scale;
        if (m->rope_freqs) f /= m->rope_freqs[i];
        c->inv_freq[i] = (float)f;
        c->inv_freq[h->n_rot / 2 + i] = m->rope_base_local > 0.0f ? (float)pow((double)m->rope_base_local, -2.0 * i / h->n_rot) : (float)f;
    }
    pi_forward_cpu_ops(c); /* until the device takes some steps over */
    int rc = pi_threadpool_new(pool_size, &c->pool);
    if (!rc) rc = start_split(c);
    if (!rc) rc = pi_offload_new(c);
    if (rc) {
        pi_context_free(c);
        return rc;
    }
    *out = c;
    return PI_OK;
}

PI_API void pi_context_free(pi_context *c) {
    if (!c) return;
    pi_threadpool_free(c->pool);
    free(c->k_cache); free(c->v_cache); free(c->x); free(c->xn); free(c->xq.q); free(c->xq.k);
    free(c->q); free(c->k); free(c->v); free(c->gate); free(c->up); free(c->rope_cs); free(c->inv_freq); free(c->att);
    free(c->out_x); free(c->delta); free(c->out_q.q); free(c->out_q.k); free(c->logits);
    free(c->pred_h); free(c->pred_hq.q); free(c->pred_hq.k);
    free(c->pred_out); free(c->active); free(c->active_rows); free(c->run_acc);
    free(c->run_rows); free(c->down_acc); free(c->embd); free(c->ops);
    if (c->device) c->device->ops->free(c->device);
    pi_offload_free(c);
    free(c->hot_runs);
    free(c->layout);
    free(c);
}

PI_API uint32_t pi_context_n_ctx(const pi_context *c) { return c ? c->n_ctx : 0; }

PI_API const char *pi_context_kernels(const pi_context *c) { return c ? c->kern.name : ""; }

PI_API int pi_decode(pi_context *c, const int32_t *tokens, int32_t n_tokens, int32_t pos) {
    if (!c || (!tokens && n_tokens > 0)) return pi_set_error(PI_ERR_ARG, "pi_decode: NULL argument");
    if (n_tokens < 0 || pos < 0 || pos > c->n_past)
        return pi_set_error(PI_ERR_ARG, "pi_decode: position %d with %d tokens is invalid (%d cached)", pos, n_tokens,
                            c->n_past);
    if ((int64_t)pos + n_tokens > (int64_t)c->n_ctx)
        return pi_set_error(PI_ERR_CONTEXT, "Requested tokens (%lld) exceed context window of %u",
                            (long long)pos + n_tokens, c->n_ctx);
    const int32_t n_vocab = c->model->info.n_vocab;
    for (int32_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return pi_set_error(PI_ERR_ARG, "token id %d at index %d is outside the vocabulary of %d", tokens[i], i,
                                n_vocab);
    c->n_past = pos;
    c->capture_base = pos;
    for (int32_t done = 0; done < n_tokens;) {
        int n = n_tokens - done < (int32_t)c->n_batch ? n_tokens - done : (int32_t)c->n_batch;
        int last_chunk = done + n == n_tokens;
        int rc = pi_forward(c, tokens + done, n, c->params.logits_all ? PI_LOGITS_ALL : last_chunk ? PI_LOGITS_LAST : PI_LOGITS_NONE);
        if (rc) return rc;
        done += n;
    }
    return PI_OK;
}

PI_API int pi_context_set_capture(pi_context *c, float *ffn_in, float *act, int32_t max_tokens) {
    if (!c) return pi_set_error(PI_ERR_ARG, "pi_context_set_capture: NULL context");
    if ((ffn_in == NULL) != (act == NULL) || max_tokens < 0 || (ffn_in && max_tokens == 0))
        return pi_set_error(PI_ERR_ARG, "pi_context_set_capture: give both buffers and max_tokens > 0, or neither");
    c->capture_ffn_in = ffn_in;
    c->capture_act = act;
    c->capture_max = ffn_in ? max_tokens : 0;
    return PI_OK;
}

PI_API int pi_context_get_stats(const pi_context *c, pi_stats *out) {
    if (!c || !out) return pi_set_error(PI_ERR_ARG, "pi_context_get_stats: NULL argument");
    *out = c->stats;
    return PI_OK;
}

PI_API void pi_context_reset_stats(pi_context *c) {
    if (c) memset(&c->stats, 0, sizeof c->stats);
}

PI_API float *pi_get_logits(pi_context *c, int32_t *rows) {
    if (rows) *rows = c ? c->logits_rows : 0;
    return c ? c->logits : NULL;
}

PI_API float *pi_get_embeddings(pi_context *c, int32_t *rows) {
    if (rows) *rows = c && c->embd ? (int32_t)c->n_ctx : 0;
    return c ? c->embd : NULL;
}

/* ---- state: a header, then per layer the keys and then the values of positions [0, n_past) ---- */

typedef struct {
    char magic[4];      /* "PIST" */
    uint32_t version;
    int32_t n_layer, kv_dim, n_embd, n_past;
} state_header;

static size_t state_bytes(const pi_context *c, int32_t n_past) {
    const pi_model *m = c->model;
    const size_t kv_dim = (size_t)m->info.n_head_kv * m->head_dim;
    return sizeof(state_header) + 2 * (size_t)m->info.n_layer * (size_t)n_past * kv_dim * sizeof(pi_fp16);
}

/* the caches' positions [0, n_past) to the blob after its header (save) or back (load) */
static void copy_cache(pi_context *c, uint8_t *blob, int32_t n_past, int save) {
    const size_t kv_dim = (size_t)c->model->info.n_head_kv * c->model->head_dim;
    const size_t bytes = (size_t)n_past * kv_dim * sizeof(pi_fp16);
    uint8_t *at = blob + sizeof(state_header);
    for (int il = 0; il < c->model->info.n_layer; il++) {
        pi_fp16 *caches[2] = { c->k_cache + (size_t)il * c->n_ctx * kv_dim, c->v_cache + (size_t)il * c->n_ctx * kv_dim };
        for (int i = 0; i < 2; i++, at += bytes) {
            if (save) memcpy(at, caches[i], bytes);
            else memcpy(caches[i], at, bytes);
        }
    }
}

PI_API uint64_t pi_context_state_size(const pi_context *c) { return c ? state_bytes(c, c->n_past) : 0; }

/* the offloaded layers' cache is in device memory, which the blob does not cover */
static int refuse_offloaded_state(const pi_context *c) {
    return c->offload ? pi_set_error(PI_ERR_UNSUPPORTED, "saving or loading the state of a context with layer offload "
                                                         "(n_gpu_layers) is not supported")
                      : PI_OK;
}

PI_API int pi_context_get_state(const pi_context *c, uint8_t *dst, uint64_t size) {
    if (!c || !dst) return pi_set_error(PI_ERR_ARG, "pi_context_get_state: NULL argument");
    if (refuse_offloaded_state(c)) return PI_ERR_UNSUPPORTED;
    if (size < state_bytes(c, c->n_past))
        return pi_set_error(PI_ERR_ARG, "state buffer of %llu bytes is smaller than the %zu needed",
                            (unsigned long long)size, state_bytes(c, c->n_past));
    const pi_model *m = c->model;
    const size_t kv_dim = (size_t)m->info.n_head_kv * m->head_dim;
    state_header h = { { 'P', 'I', 'S', 'T' }, 1, m->info.n_layer, (int32_t)kv_dim, m->info.n_embd, c->n_past };
    memcpy(dst, &h, sizeof h);
    copy_cache((pi_context *)c, dst, c->n_past, 1); /* reads the caches only */
    return PI_OK;
}

PI_API int pi_context_set_state(pi_context *c, const uint8_t *src, uint64_t size) {
    if (!c || !src) return pi_set_error(PI_ERR_ARG, "pi_context_set_state: NULL argument");
    if (refuse_offloaded_state(c)) return PI_ERR_UNSUPPORTED;
    const pi_model *m = c->model;
    const size_t kv_dim = (size_t)m->info.n_head_kv * m->head_dim;
    state_header h;
    if (size < sizeof h) return pi_set_error(PI_ERR_FORMAT, "state of %llu bytes is too short", (unsigned long long)size);
    memcpy(&h, src, sizeof h);
    if (memcmp(h.magic, "PIST", 4) || h.version != 1)
        return pi_set_error(PI_ERR_FORMAT, "not a pypowerinfer state (or another version)");
    if (h.n_layer != m->info.n_layer || h.kv_dim != (int32_t)kv_dim || h.n_embd != m->info.n_embd)
        return pi_set_error(PI_ERR_FORMAT, "the state is of another model (%d layers, kv %d, n_embd %d)", h.n_layer,
                            h.kv_dim, h.n_embd);
    if (h.n_past < 0 || (uint32_t)h.n_past > c->n_ctx)
        return pi_set_error(PI_ERR_CONTEXT, "the state holds %d positions, more than n_ctx %u", h.n_past, c->n_ctx);
    if (size != state_bytes(c, h.n_past))
        return pi_set_error(PI_ERR_FORMAT, "state of %llu bytes, expected %zu for %d positions",
                            (unsigned long long)size, state_bytes(c, h.n_past), h.n_past);
    copy_cache(c, (uint8_t *)src, h.n_past, 0); /* reads the blob only */
    c->n_past = h.n_past;
    return PI_OK;
}
