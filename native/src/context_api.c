/* context_api.c - the context of powerinfer.h: make one (its buffers, threads and device), evaluate
 * tokens in n_batch chunks, hand out logits and embeddings, save and load the sequence's state. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "context.h"
#include "device/place.h"
#include "ffn_path.h"
#include "forward.h"
#include "lora.h"
#include "status.h"
#include "token_bytes.h"

PI_API pi_context_params pi_context_default_params(void) {
    pi_context_params p = { .n_ctx = 512, .n_batch = 512, .n_threads = 0, .n_threads_batch = 0,
                            .logits_all = 0, .kernel_impl = PI_IMPL_AUTO, .sparse = PI_SPARSE_DECODE,
                            .sparse_threshold_shift = 0.0f, .device = PI_DEVICE_NONE, .vram_budget = 0,
                            .embeddings = 0, .n_gpu_layers = 0, .type_k = PI_TYPE_F16, .type_v = PI_TYPE_F16 };
    return p;
}

static int cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}


PI_API int pi_context_new(pi_model *m, pi_context_params p, pi_context **out) {
    if (!m || !out) return pi_set_error(PI_ERR_ARG, "pi_context_new: NULL argument");
    *out = NULL;
    if (m->vocab_only) return pi_set_error(PI_ERR_ARG, "model was loaded with vocab_only: it cannot be evaluated");
    const pi_model_info *h = &m->info;
    const uint32_t n_ctx = p.n_ctx ? p.n_ctx : (uint32_t)h->n_ctx_train;
    uint32_t n_batch = p.n_batch ? p.n_batch : 512;
    if (n_batch > n_ctx) n_batch = n_ctx;
    if (n_ctx > (1u << 24)) return pi_set_error(PI_ERR_ARG, "n_ctx %u is too large", n_ctx);
    if (p.n_logits < 0 || p.n_logits > (int32_t)n_ctx)
        return pi_set_error(PI_ERR_ARG, "n_logits %d is outside [0, n_ctx %u]", p.n_logits, n_ctx);
    const int32_t n_seq = p.n_seq_max > 0 ? p.n_seq_max : 1;
    if (p.n_seq_max < 0 || n_seq > PI_MAX_SEQ || (uint32_t)n_seq > n_ctx)
        return pi_set_error(PI_ERR_ARG, "n_seq_max %d is outside [1, %d] or more than n_ctx %u", p.n_seq_max,
                            PI_MAX_SEQ, n_ctx);
    /* a device's cache, the logits by position and the embeddings by position hold one sequence */
    if (n_seq > 1 && (p.device != PI_DEVICE_NONE || p.vram_budget || p.n_gpu_layers || p.logits_all || p.embeddings))
        return pi_set_error(PI_ERR_UNSUPPORTED, "n_seq_max %d: several sequences run on the CPU only, without "
                            "vram_budget, n_gpu_layers, a device, logits_all or embeddings (not supported yet)", n_seq);
    /* an MoE FFN's experts go to a device through the split of vram_budget only (ffn_moe_split.h) */
    if (m->n_expert && p.n_gpu_layers)
        return pi_set_error(PI_ERR_UNSUPPORTED, "arch '%s' (mixture of experts): layer offload (n_gpu_layers) is not "
                            "supported for it; vram_budget puts its hot expert runs on the device", m->arch);
    /* an encoder's input is checked against its positions instead (pi_encode), as llama.cpp
     * takes any n_ctx for one */
    if (m->position_embd.data && h->causal && n_ctx > (uint32_t)h->n_ctx_train)
        return pi_set_error(PI_ERR_ARG, "n_ctx %u is more than the model's %d learned positions", n_ctx, h->n_ctx_train);
    pi_context *c = calloc(1, sizeof *c);
    if (!c) return pi_set_error(PI_ERR_NOMEM, "no memory for the context");
    c->model = m;
    c->params = p;
    c->n_ctx = n_ctx;
    c->n_batch = n_batch;
    c->kv.n_seq = n_seq;
    c->kv.seq_ctx = n_ctx / (uint32_t)n_seq;
    c->params.n_threads = p.n_threads > 0 ? p.n_threads : cpu_count();
    c->params.n_threads_batch = p.n_threads_batch > 0 ? p.n_threads_batch : c->params.n_threads;
    c->s.logits_rows = p.logits_all ? (int)n_ctx : p.n_logits > 0 ? p.n_logits : 1;

    int rc = pi_kernels_init(&c->kern, p.kernel_impl) == 0
                 ? PI_OK
                 : pi_set_error(PI_ERR_UNSUPPORTED, "kernel implementation %d is not available on this CPU", p.kernel_impl);
    pi_vec_ops_init(&c->vec, p.kernel_impl);
    const int pool_size = c->params.n_threads > c->params.n_threads_batch ? c->params.n_threads : c->params.n_threads_batch;
    if (!rc) rc = pi_context_alloc(c);
    if (!rc) rc = pi_threadpool_new(pool_size, &c->pool);
    if (!rc) rc = pi_place(c);
    if (!rc) rc = pi_ffn_paths_choose(c); /* after the placement, which it reads */
    if (rc) {
        pi_context_free(c);
        return rc;
    }
    *out = c;
    return PI_OK;
}

PI_API void pi_context_free(pi_context *c) {
    if (!c) return;
    pi_place_free(c); /* the device first: its thread may read the pool's size */
    pi_lora_detach(&c->lora);
    pi_ffn_paths_free(c);
    pi_threadpool_free(c->pool);
    pi_context_release(c);
    free(c);
}

PI_API uint32_t pi_context_n_ctx(const pi_context *c) { return c ? c->n_ctx : 0; }

PI_API const char *pi_context_kernels(const pi_context *c) { return c ? c->kern.name : ""; }

/* The outputs of the chunk [done, done + n) of a call whose last n_logits tokens get logits:
 * rows by position with logits_all, else rows 0.. in token order */
static pi_outputs chunk_outputs(pi_context *c, int32_t n_tokens, int32_t n_logits, int32_t done, int n) {
    const size_t n_vocab = (size_t)c->model->info.n_vocab;
    if (c->params.logits_all) return (pi_outputs){ 0, c->s.logits + (size_t)c->kv.seq_len[0] * n_vocab, NULL, 0 };
    const int32_t tail = n_tokens - n_logits; /* the first token with logits */
    const int first = tail > done ? (tail - done < n ? tail - done : n) : 0;
    return (pi_outputs){ first, first < n ? c->s.logits + (size_t)(done + first - tail) * n_vocab : NULL, NULL, 0 };
}

PI_API uint64_t pi_context_kv_bytes(const pi_context *c) {
    return c ? (uint64_t)c->model->info.n_layer * c->n_ctx * (c->kv.k_row + c->kv.v_row) : 0;
}

int pi_check_tokens(const pi_context *c, const int32_t *tokens, int32_t n) {
    const int32_t n_vocab = c->model->info.n_vocab;
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return pi_set_error(PI_ERR_ARG, "token id %d at index %d is outside the vocabulary of %d", tokens[i], i,
                                n_vocab);
    return PI_OK;
}

PI_API int pi_decode(pi_context *c, const int32_t *tokens, int32_t n_tokens, int32_t pos) {
    return pi_decode_tail(c, tokens, n_tokens, pos, 1);
}

PI_API int pi_decode_tail(pi_context *c, const int32_t *tokens, int32_t n_tokens, int32_t pos, int32_t n_logits) {
    if (!c || (!tokens && n_tokens > 0)) return pi_set_error(PI_ERR_ARG, "pi_decode: NULL argument");
    if (!c->params.logits_all && n_tokens > 0 && (n_logits < 1 || n_logits > n_tokens || n_logits > c->s.logits_rows))
        return pi_set_error(PI_ERR_ARG, "pi_decode_tail: logits for the last %d of %d tokens, but the context keeps "
                                        "1 to %d rows (n_logits)", n_logits, n_tokens, c->s.logits_rows);
    if (n_tokens < 0 || pos < 0 || pos > c->kv.seq_len[0])
        return pi_set_error(PI_ERR_ARG, "pi_decode: position %d with %d tokens is invalid (%d cached)", pos, n_tokens,
                            c->kv.seq_len[0]);
    if ((int64_t)pos + n_tokens > (int64_t)c->kv.seq_ctx)
        return pi_set_error(PI_ERR_CONTEXT, "Requested tokens (%lld) exceed context window of %u",
                            (long long)pos + n_tokens, c->kv.seq_ctx);
    if (pi_check_tokens(c, tokens, n_tokens)) return PI_ERR_ARG;
    if (!c->model->info.causal) {
        if (pos != 0) return pi_set_error(PI_ERR_ARG, "pi_decode: an encoder takes its whole input from position 0");
        return pi_encode(c, tokens, n_tokens);
    }
    c->kv.seq_len[0] = pos;
    c->cap.base = pos;
    for (int32_t done = 0; done < n_tokens;) {
        int n = n_tokens - done < (int32_t)c->n_batch ? n_tokens - done : (int32_t)c->n_batch;
        pi_one_segment(c, n, pos + done);
        int rc = pi_forward(c, tokens + done, n, chunk_outputs(c, n_tokens, n_logits, done, n));
        if (rc) return rc;
        done += n;
    }
    return PI_OK;
}

PI_API int pi_context_set_capture(pi_context *c, float *ffn_in, float *act, int32_t max_tokens) {
    if (!c) return pi_set_error(PI_ERR_ARG, "pi_context_set_capture: NULL context");
    const int moe = c->model->n_expert > 0;
    if (act && moe)
        return pi_set_error(PI_ERR_UNSUPPORTED, "pi_context_set_capture: an MoE FFN has no one activation to capture "
                            "(pass act NULL)");
    if ((act && !ffn_in) || (ffn_in && !act && !moe) || max_tokens < 0 || (ffn_in && max_tokens == 0))
        return pi_set_error(PI_ERR_ARG, "pi_context_set_capture: give %s and max_tokens > 0, or neither",
                            moe ? "ffn_in" : "both buffers");
    c->cap.ffn_in = ffn_in;
    c->cap.act = act;
    c->cap.max = ffn_in ? max_tokens : 0;
    return pi_ffn_paths_choose(c); /* an activation capture runs the FFN dense */
}

PI_API int pi_context_set_adapter(pi_context *c, const pi_adapter *ad, float scale) {
    if (!c) return pi_set_error(PI_ERR_ARG, "pi_context_set_adapter: NULL context");
    const int rc = pi_lora_attach(c, ad, scale);
    pi_ffn_paths_choose(c); /* an adapted FFN runs dense; allocated at pi_context_new, so it cannot fail here */
    return rc;
}

PI_API int pi_context_set_expert_capture(pi_context *c, int32_t *experts, int32_t max_tokens) {
    if (!c) return pi_set_error(PI_ERR_ARG, "pi_context_set_expert_capture: NULL context");
    if (experts && !c->model->n_expert)
        return pi_set_error(PI_ERR_UNSUPPORTED, "pi_context_set_expert_capture: a dense FFN has no experts to capture");
    if (max_tokens < 0 || (experts && max_tokens == 0))
        return pi_set_error(PI_ERR_ARG, "pi_context_set_expert_capture: give a buffer and max_tokens > 0, or neither");
    c->cap.experts = experts;
    c->cap.experts_max = experts ? max_tokens : 0;
    return PI_OK;
}

PI_API int pi_context_get_stats(const pi_context *c, pi_stats *out) {
    if (!c || !out) return pi_set_error(PI_ERR_ARG, "pi_context_get_stats: NULL argument");
    *out = c->stats;
    out->dense_token_bytes = (int64_t)pi_dense_token_bytes(c->model);
    return PI_OK;
}

PI_API void pi_context_reset_stats(pi_context *c) {
    if (c) memset(&c->stats, 0, sizeof c->stats);
}

PI_API float *pi_get_logits(pi_context *c, int32_t *rows) {
    if (rows) *rows = c ? c->s.logits_rows : 0;
    return c ? c->s.logits : NULL;
}

PI_API float *pi_get_embeddings(pi_context *c, int32_t *rows) {
    if (rows) *rows = c && c->s.embd ? (int32_t)c->n_ctx : 0;
    return c ? c->s.embd : NULL;
}

/* ---- state: a header, then per layer the keys and then the values of positions [0, n_past),
 * rows as the cache holds them in its types (version 2: the types are in the header) ---- */

enum { STATE_VERSION = 2 };

typedef struct {
    char magic[4];      /* "PIST" */
    uint32_t version;
    int32_t n_layer, kv_dim, n_embd, n_past;
    int32_t type_k, type_v;
} state_header;

static size_t state_bytes(const pi_context *c, int32_t n_past) {
    return sizeof(state_header) + (size_t)c->model->info.n_layer * (size_t)n_past * (c->kv.k_row + c->kv.v_row);
}

/* the caches' positions [0, n_past) to the blob after its header (save) or back (load) */
static void copy_cache(pi_context *c, uint8_t *blob, int32_t n_past, int save) {
    uint8_t *at = blob + sizeof(state_header);
    for (int il = 0; il < c->model->info.n_layer; il++) {
        uint8_t *caches[2] = { c->kv.k_cache + (size_t)il * c->n_ctx * c->kv.k_row, c->kv.v_cache + (size_t)il * c->n_ctx * c->kv.v_row };
        const size_t bytes[2] = { (size_t)n_past * c->kv.k_row, (size_t)n_past * c->kv.v_row };
        for (int i = 0; i < 2; at += bytes[i], i++) {
            if (save) memcpy(at, caches[i], bytes[i]);
            else memcpy(caches[i], at, bytes[i]);
        }
    }
}

PI_API uint64_t pi_context_state_size(const pi_context *c) { return c ? state_bytes(c, c->kv.seq_len[0]) : 0; }

/* the cache of a layer whose attention runs on the device is in device memory, which the blob
 * does not cover */
static int refuse_offloaded_state(const pi_context *c) {
    for (int il = 0; c->dev.on_device && il < c->model->info.n_layer; il++)
        if (c->dev.on_device[il].attention)
            return pi_set_error(PI_ERR_UNSUPPORTED, "saving or loading the state of a context whose attention runs on "
                                                    "the device (layer offload, or the split's placed layers) is not "
                                                    "supported");
    return PI_OK;
}

PI_API int pi_context_get_state(const pi_context *c, uint8_t *dst, uint64_t size) {
    if (!c || !dst) return pi_set_error(PI_ERR_ARG, "pi_context_get_state: NULL argument");
    if (refuse_offloaded_state(c)) return PI_ERR_UNSUPPORTED;
    const int32_t n_past = c->kv.seq_len[0];
    if (size < state_bytes(c, n_past))
        return pi_set_error(PI_ERR_ARG, "state buffer of %llu bytes is smaller than the %zu needed",
                            (unsigned long long)size, state_bytes(c, n_past));
    const pi_model *m = c->model;
    const size_t kv_dim = (size_t)m->info.n_head_kv * m->head_dim;
    state_header h = { { 'P', 'I', 'S', 'T' }, STATE_VERSION, m->info.n_layer, (int32_t)kv_dim, m->info.n_embd, n_past,
                       c->params.type_k, c->params.type_v };
    memcpy(dst, &h, sizeof h);
    copy_cache((pi_context *)c, dst, n_past, 1); /* reads the caches only */
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
    if (memcmp(h.magic, "PIST", 4) || h.version != STATE_VERSION)
        return pi_set_error(PI_ERR_FORMAT, "not a pypowerinfer state (or another version)");
    if (h.type_k != c->params.type_k || h.type_v != c->params.type_v)
        return pi_set_error(PI_ERR_FORMAT, "the state's KV cache is K %s, V %s, and this context's K %s, V %s: make the "
                            "context with the state's type_k and type_v", pi_type_name((uint32_t)h.type_k),
                            pi_type_name((uint32_t)h.type_v), pi_type_name((uint32_t)c->params.type_k),
                            pi_type_name((uint32_t)c->params.type_v));
    if (h.n_layer != m->info.n_layer || h.kv_dim != (int32_t)kv_dim || h.n_embd != m->info.n_embd)
        return pi_set_error(PI_ERR_FORMAT, "the state is of another model (%d layers, kv %d, n_embd %d)", h.n_layer,
                            h.kv_dim, h.n_embd);
    if (h.n_past < 0 || (uint32_t)h.n_past > c->kv.seq_ctx)
        return pi_set_error(PI_ERR_CONTEXT, "the state holds %d positions, more than the %u of a sequence (n_ctx / "
                            "n_seq_max)", h.n_past, c->kv.seq_ctx);
    if (size != state_bytes(c, h.n_past))
        return pi_set_error(PI_ERR_FORMAT, "state of %llu bytes, expected %zu for %d positions",
                            (unsigned long long)size, state_bytes(c, h.n_past), h.n_past);
    copy_cache(c, (uint8_t *)src, h.n_past, 0); /* reads the blob only */
    c->kv.seq_len[0] = h.n_past;
    return PI_OK;
}
