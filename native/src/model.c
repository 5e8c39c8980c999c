/* model.c - load a model: read its hyperparameters (the common ones here, its architecture's through
 * arch.h's descriptor), bind and shape-check every tensor, group the dense weights' rows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "kernels/kernels.h"
#include "kernels/repack.h"
#include "model.h"
#include "status.h"

static const char *const ACT_NAMES[] = { "silu_glu", "relu_glu", "relu_relu_glu", "gelu_glu", "relu", "gelu" };

/* The FFN activation: the architecture's, except that PowerInfer's own (PWRI) files of llama and
 * falcon are ReLU models (ReluLLaMA/ProSparse, ReluFalcon: pi_arch.powerinfer_act), and
 * powerinfer.activation, when present, says it outright. */
static int read_activation(pi_model *m) {
    if (m->file.is_powerinfer && m->desc->powerinfer_act >= 0) m->info.ffn_act = m->desc->powerinfer_act;
    gguf_str act = { NULL, 0 };
    int rc = gguf_get_str(&m->file, "powerinfer.activation", 0, &act);
    if (rc || !act.ptr) return rc;
    for (int i = 0; i < (int)(sizeof ACT_NAMES / sizeof ACT_NAMES[0]); i++)
        if (gguf_str_eq(act, ACT_NAMES[i])) {
            m->info.ffn_act = i;
            return PI_OK;
        }
    return pi_set_error(PI_ERR_UNSUPPORTED, "powerinfer.activation '%.*s' is not supported", (int)act.len, act.ptr);
}

PI_API pi_model_params pi_model_default_params(void) {
    pi_model_params p = { .vocab_only = 0, .ffn_act = -1, .repack = 1, .moe_skip_rows = -1 };
    return p;
}

static int arch_key_u32(const pi_model *m, const char *suffix, int required, uint32_t *out) {
    return pi_arch_key_u32(&m->file, m->arch, suffix, required, out);
}

static int arch_key_f32(const pi_model *m, const char *suffix, int required, float *out) {
    return pi_arch_key_f32(&m->file, m->arch, suffix, required, out);
}

static int read_arch(pi_model *m) {
    gguf_str arch;
    int rc = gguf_get_str(&m->file, "general.architecture", 1, &arch);
    if (rc) return rc;
    if (arch.len >= sizeof m->arch) arch.len = sizeof m->arch - 1;
    memcpy(m->arch, arch.ptr, arch.len);
    m->arch[arch.len] = '\0';
    char names[512] = "";
    for (int i = 0; i < PI_N_ARCHS; i++) {
        if (strcmp(PI_ARCHS[i].name, m->arch) == 0) {
            m->desc = &PI_ARCHS[i];
            m->info.ffn_act = m->desc->ffn_act;
            m->traits = m->desc->traits;
            return PI_OK;
        }
        const size_t len = strlen(names);
        snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "", PI_ARCHS[i].name);
    }
    return pi_set_error(PI_ERR_UNSUPPORTED, "architecture '%s' is not supported (supported: %s)", m->arch, names);
}

/* attn_logit_softcapping and final_logit_softcapping: optional, finite and >= 0 (0: none) */
static int read_softcaps(pi_model *m) {
    int rc = arch_key_f32(m, "attn_logit_softcapping", 0, &m->attn_softcap);
    if (!rc) rc = arch_key_f32(m, "final_logit_softcapping", 0, &m->final_softcap);
    if (rc) return rc;
    if (!(m->attn_softcap >= 0.0f) || !isfinite(m->attn_softcap) || !(m->final_softcap >= 0.0f) ||
        !isfinite(m->final_softcap))
        return pi_set_error(PI_ERR_FORMAT, "GGUF: implausible soft-capping %g / %g", m->attn_softcap, m->final_softcap);
    return PI_OK;
}

/* the block's forms from the architecture's traits, the keys any architecture may have, then the
 * architecture's own (pi_arch.read) */
static int read_traits(pi_model *m) {
    m->embd_scale = 1.0f;
    m->rope_neox = (m->traits & ARCH_ROPE_NEOX) != 0;
    m->layer_norm = (m->traits & ARCH_LAYER_NORM) != 0;
    m->parallel = (m->traits & ARCH_PARALLEL) != 0;
    m->encoder = (m->traits & ARCH_ENCODER) != 0;
    m->router_on_input = (m->traits & ARCH_ROUTER_ON_INPUT) != 0;
    m->info.causal = !m->encoder;
    if (m->traits & ARCH_NO_ROPE) m->info.n_rot = 0;
    int rc = read_softcaps(m);
    if (!rc && m->desc->read) rc = m->desc->read(m);
    return rc;
}

static int read_hparams(pi_model *m) {
    pi_model_info *h = &m->info;
    uint32_t n_layer, n_embd, n_ff, n_head, n_head_kv = 0, n_ctx = 2048, key_len = 0, value_len = 0, n_rot = 0;
    float eps = m->desc->norm_eps > 0.0f ? m->desc->norm_eps : 1e-5f, base = 10000.0f, factor = 0.0f;
    int rc;
    if ((rc = arch_key_u32(m, "block_count", 1, &n_layer)) || (rc = arch_key_u32(m, "embedding_length", 1, &n_embd)) ||
        (rc = arch_key_u32(m, "feed_forward_length", 1, &n_ff)) ||
        (rc = arch_key_u32(m, "attention.head_count", 1, &n_head)) ||
        (rc = arch_key_u32(m, "attention.head_count_kv", 0, &n_head_kv)) ||
        (rc = arch_key_u32(m, "context_length", 0, &n_ctx)) ||
        (rc = arch_key_u32(m, "attention.key_length", 0, &key_len)) ||
        (rc = arch_key_u32(m, "attention.value_length", 0, &value_len)) ||
        (rc = arch_key_u32(m, "rope.dimension_count", 0, &n_rot)) ||
        (rc = arch_key_f32(m, (m->traits & ARCH_LAYER_NORM) ? "attention.layer_norm_epsilon"
                                                            : "attention.layer_norm_rms_epsilon",
                           m->desc->norm_eps == 0.0f, &eps)) ||
        (rc = arch_key_f32(m, "rope.freq_base", 0, &base)) || (rc = arch_key_f32(m, "rope.scaling.factor", 0, &factor)))
        return rc;
    if (n_head_kv == 0) n_head_kv = n_head;
    if (n_layer == 0 || n_layer > 1024 || n_embd == 0 || n_embd > (1u << 16) || n_ff == 0 || n_ff > (1u << 20) ||
        n_head == 0 || n_head > 1024 || n_head % n_head_kv || n_ctx == 0)
        return pi_set_error(PI_ERR_FORMAT, "GGUF: implausible hyperparameters (layers %u, embd %u, ff %u, heads %u/%u, ctx %u)",
                            n_layer, n_embd, n_ff, n_head, n_head_kv, n_ctx);
    uint32_t head_dim = key_len ? key_len : n_embd / n_head;
    if (head_dim == 0 || head_dim > (1u << 16) || (value_len && value_len != head_dim))
        return pi_set_error(PI_ERR_FORMAT, "GGUF: head size %u (key_length %u, value_length %u): one size of keys and "
                                           "values in 1..65536 is supported", head_dim, key_len, value_len);
    if (!key_len && n_embd % n_head)
        return pi_set_error(PI_ERR_FORMAT, "GGUF: embedding %u is not divisible by %u heads", n_embd, n_head);
    if (n_rot == 0) n_rot = head_dim;
    if (n_rot > head_dim || n_rot % 2)
        return pi_set_error(PI_ERR_FORMAT, "GGUF: rope dimension %u does not fit head size %u", n_rot, head_dim);
    if (!(eps > 0.0f && eps < 1.0f) || !(base > 0.0f) || !isfinite(base) || !isfinite(factor))
        return pi_set_error(PI_ERR_FORMAT, "GGUF: implausible norm epsilon %g or rope base %g", eps, base);

    gguf_str scaling = { "none", 4 };
    char key[96];
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch);
    if ((rc = gguf_get_str(&m->file, key, 0, &scaling))) return rc;
    float freq_scale = 1.0f;
    if (gguf_str_eq(scaling, "linear")) {
        if (factor > 0.0f) freq_scale = 1.0f / factor;
    } else if (!gguf_str_eq(scaling, "none")) {
        return pi_set_error(PI_ERR_UNSUPPORTED, "rope scaling '%.*s' is not supported (none and linear are)",
                            (int)scaling.len, scaling.ptr);
    }
    h->n_layer = (int32_t)n_layer;
    h->n_embd = (int32_t)n_embd;
    h->n_ff = (int32_t)n_ff;
    h->n_head = (int32_t)n_head;
    h->n_head_kv = (int32_t)n_head_kv;
    h->n_ctx_train = (int32_t)n_ctx;
    h->n_rot = (int32_t)n_rot;
    h->norm_eps = eps;
    h->rope_freq_base = base;
    h->rope_freq_scale = freq_scale;
    m->head_dim = (int32_t)head_dim;
    return read_traits(m);
}

/* Bind a weight named `name` of ne {n_in, n_out, n_expert} (n_expert 1: a 2-D matrix); absent
 * optional tensors leave w->data NULL. */
static int bind_tensor(pi_model *m, pi_weight *w, const char *name, int64_t n_in, int64_t n_out, int64_t n_expert,
                       int required) {
    snprintf(w->name, sizeof w->name, "%s", name);
    const gguf_tensor *t = gguf_find_tensor(&m->file, name);
    if (!t) return required ? pi_set_error(PI_ERR_FORMAT, "GGUF: required tensor '%s' is missing", name) : PI_OK;
    if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != n_expert || t->ne[3] != 1)
        return pi_set_error(PI_ERR_FORMAT, "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld]",
                            name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                            (long long)n_in, (long long)n_out, (long long)n_expert);
    w->type = t->type;
    if (pi_type_is_kquant(t->type)) m->kquant_weights = 1;
    w->n_in = n_in;
    w->n_out = n_out;
    w->n_expert = n_expert;
    w->row_bytes = (size_t)(t->nbytes / (uint64_t)(n_out * n_expert));
    w->data = t->data;
    w->grouped = 0; /* the file's row-major layout, until group_weights() */
    return PI_OK;
}

static int bind_weight(pi_model *m, pi_weight *w, const char *name, int64_t n_in, int64_t n_out, int required) {
    return bind_tensor(m, w, name, n_in, n_out, 1, required);
}

/* Copy a tensor of n0 x n1 values (GGUF ne {n0, n1}) into *cursor (f32), pointing *dst at it;
 * NULL when optional and absent. */
static int bind_values(pi_model *m, float **dst, float **cursor, const char *name, int64_t n0, int64_t n1,
                       int required) {
    *dst = NULL;
    const gguf_tensor *t = gguf_find_tensor(&m->file, name);
    if (!t) return required ? pi_set_error(PI_ERR_FORMAT, "GGUF: required tensor '%s' is missing", name) : PI_OK;
    if (t->ne[0] != n0 || t->ne[1] != n1 || t->ne[2] != 1 || t->ne[3] != 1)
        return pi_set_error(PI_ERR_FORMAT, "tensor '%s' has %lld x %lld values, expected %lld x %lld", name,
                            (long long)t->ne[0], (long long)t->ne[1], (long long)n0, (long long)n1);
    if (t->type != PI_TYPE_F32 && t->type != PI_TYPE_F16 && t->type != PI_TYPE_BF16)
        return pi_set_error(PI_ERR_UNSUPPORTED, "vector tensor '%s' has type %s (F32, F16 or BF16 expected)", name,
                            pi_type_name(t->type));
    pi_kernels ref;
    pi_kernels_ref(&ref);
    ref.dequant[t->type](t->data, *cursor, (int)(n0 * n1));
    *dst = *cursor;
    *cursor += n0 * n1;
    return PI_OK;
}

/* a 1-D tensor of n values (bind_values) */
static int bind_vector(pi_model *m, float **dst, float **cursor, const char *name, int64_t n, int required) {
    return bind_values(m, dst, cursor, name, n, 1, required);
}

/* fc1 {n_embd, rank} and fc2 {rank, n_ff}: both or neither; the rank is the file's choice. */
static int bind_predictor(pi_model *m, pi_layer *L, int il) {
    char fc1[64], fc2[64];
    snprintf(fc1, sizeof fc1, "blk.%d.fc1.weight", il);
    snprintf(fc2, sizeof fc2, "blk.%d.fc2.weight", il);
    const gguf_tensor *t1 = gguf_find_tensor(&m->file, fc1), *t2 = gguf_find_tensor(&m->file, fc2);
    if (!t1 && !t2) return PI_OK;
    if (!t1 || !t2) return pi_set_error(PI_ERR_FORMAT, "layer %d has only one of fc1/fc2", il);
    const int64_t rank = t1->ne[1];
    if (rank < 1 || rank > 65536)
        return pi_set_error(PI_ERR_FORMAT, "tensor '%s' has rank %lld, outside 1..65536", fc1, (long long)rank);
    int rc = bind_weight(m, &L->fc1, fc1, m->info.n_embd, rank, 1);
    return rc ? rc : bind_weight(m, &L->fc2, fc2, rank, m->info.n_ff, 1);
}

/* powerinfer.layer_thresholds (one per layer), else PowerInfer's global powerinfer.sparse_threshold. */
static int read_thresholds(pi_model *m) {
    float global = 0.0f;
    int rc = gguf_get_f32(&m->file, "powerinfer.sparse_threshold", 0, &global);
    if (rc) return rc;
    const gguf_kv *kv = gguf_find_kv(&m->file, "powerinfer.layer_thresholds");
    if (kv && (kv->type != PI_META_ARRAY || kv->arr_type != PI_META_FLOAT32 || kv->arr_len != (uint64_t)m->info.n_layer))
        return pi_set_error(PI_ERR_FORMAT, "powerinfer.layer_thresholds must be %d float32 values", m->info.n_layer);
    for (int il = 0; il < m->info.n_layer; il++) {
        float t = global;
        if (kv) memcpy(&t, kv->value + (size_t)il * sizeof(float), sizeof t);
        if (!isfinite(t)) return pi_set_error(PI_ERR_FORMAT, "layer %d predictor threshold is not finite", il);
        m->layers[il].threshold = t;
    }
    return PI_OK;
}

/* Predictors on every layer, each with its ffn_down_t, or on none: a file with some layers'
 * predictors missing is damaged, and would otherwise run dense without a word. */
static int check_predictors(pi_model *m) {
    int first = -1;
    for (int il = 0; il < m->info.n_layer && first < 0; il++)
        if (m->layers[il].fc1.data) first = il;
    m->has_predictors = first >= 0;
    if (m->has_predictors && m->n_expert)
        return pi_set_error(PI_ERR_UNSUPPORTED, "tensor 'blk.%d.fc1.weight': predictors of an MoE FFN are not supported",
                            first);
    for (int il = 0; first >= 0 && il < m->info.n_layer; il++) {
        const pi_layer *L = &m->layers[il];
        if (!L->fc1.data)
            return pi_set_error(PI_ERR_FORMAT, "tensor 'blk.%d.fc1.weight' is missing: layer %d has a predictor, layer "
                                               "%d none", il, first, il);
        if (!L->ffn_down_t.data)
            return pi_set_error(PI_ERR_FORMAT, "tensor 'blk.%d.ffn_down_t.weight' is missing: the predictor of layer %d "
                                               "needs it", il, il);
        if (L->fc1.n_out > m->max_rank) m->max_rank = (int32_t)L->fc1.n_out;
    }
    return PI_OK;
}

/* Rows [row0, row0 + n) of a bound weight as a weight of its own: a view, no copy. */
static void view_rows(pi_weight *part, const pi_weight *whole, const char *what, int64_t row0, int64_t n) {
    *part = *whole;
    const size_t len = strlen(part->name); /* < sizeof name: snprintf wrote it */
    snprintf(part->name + len, sizeof part->name - len, ":%s", what);
    part->n_out = n;
    part->data = whole->data + (size_t)row0 * whole->row_bytes;
}

/* q, k and v from their own tensors, or as views of a fused attn_qkv (q rows, then k, then v) */
static int bind_qkv(pi_model *m, pi_layer *L, int il, int64_t d, int64_t q_dim, int64_t kv_dim) {
    char name[64];
    snprintf(name, sizeof name, "blk.%d.attn_q.weight", il);
    const int has_q = gguf_find_tensor(&m->file, name) != NULL;
    snprintf(name, sizeof name, "blk.%d.attn_qkv.weight", il);
    if ((m->traits & ARCH_FUSED_QKV) && (gguf_find_tensor(&m->file, name) || !has_q)) {
        pi_weight qkv;
        int rc = bind_weight(m, &qkv, name, d, q_dim + 2 * kv_dim, 1);
        if (rc) return rc;
        view_rows(&L->attn_q, &qkv, "q", 0, q_dim);
        view_rows(&L->attn_k, &qkv, "k", q_dim, kv_dim);
        view_rows(&L->attn_v, &qkv, "v", q_dim + kv_dim, kv_dim);
        return PI_OK;
    }
    int rc;
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.%s", il, s), name)
    if ((rc = bind_weight(m, &L->attn_q, NAME("attn_q.weight"), d, q_dim, 1)) ||
        (rc = bind_weight(m, &L->attn_k, NAME("attn_k.weight"), d, kv_dim, 1)) ||
        (rc = bind_weight(m, &L->attn_v, NAME("attn_v.weight"), d, kv_dim, 1)))
        return rc;
#undef NAME
    return PI_OK;
}

/* A fused attn_qkv's bias, as q's, k's and v's: llama.cpp adds it when present, and a file with
 * it and any of the separate biases too has tensors llama.cpp does not load */
static int bind_qkv_bias(pi_model *m, pi_layer *L, int il, float **cursor, int64_t q_dim, int64_t kv_dim) {
    char name[64];
    snprintf(name, sizeof name, "blk.%d.attn_qkv.weight", il);
    const int fused = (m->traits & ARCH_FUSED_QKV) && gguf_find_tensor(&m->file, name); /* as bind_qkv */
    snprintf(name, sizeof name, "blk.%d.attn_qkv.bias", il);
    if (!fused || !gguf_find_tensor(&m->file, name)) return PI_OK;
    if (L->attn_q_b || L->attn_k_b || L->attn_v_b)
        return pi_set_error(PI_ERR_FORMAT, "layer %d has both '%s' and separate q/k/v biases", il, name);
    float *qkv_b;
    int rc = bind_vector(m, &qkv_b, cursor, name, q_dim + 2 * kv_dim, 1);
    if (rc) return rc;
    L->attn_q_b = qkv_b;
    L->attn_k_b = qkv_b + q_dim;
    L->attn_v_b = qkv_b + q_dim + kv_dim;
    return PI_OK;
}

/* gate and up from their own tensors, or as the two halves of phi3's ffn_up (gate rows first,
 * as llama.cpp's SwiGLU split takes them) */
static int bind_gate_up(pi_model *m, pi_layer *L, int il, int64_t d, int64_t n_ff) {
    char name[64];
    int rc;
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.%s", il, s), name)
    if (m->traits & ARCH_UNGATED) return bind_weight(m, &L->ffn_up, NAME("ffn_up.weight"), d, n_ff, 1);
    if (m->traits & ARCH_FUSED_GATE_UP) {
        pi_weight gate_up;
        if ((rc = bind_weight(m, &gate_up, NAME("ffn_up.weight"), d, 2 * n_ff, 1))) return rc;
        view_rows(&L->ffn_gate, &gate_up, "gate", 0, n_ff);
        view_rows(&L->ffn_up, &gate_up, "up", n_ff, n_ff);
        return PI_OK;
    }
    if ((rc = bind_weight(m, &L->ffn_gate, NAME("ffn_gate.weight"), d, n_ff, 1)) ||
        (rc = bind_weight(m, &L->ffn_up, NAME("ffn_up.weight"), d, n_ff, 1)))
        return rc;
#undef NAME
    return PI_OK;
}

/* An MoE FFN: the router and the experts' gate, up and down, all required */
static int bind_moe(pi_model *m, pi_layer *L, int il, int64_t d) {
    const int64_t n_expert = m->n_expert, n_ff_exp = m->n_ff_exp;
    char name[64];
    int rc;
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.%s", il, s), name)
    if ((rc = bind_weight(m, &L->ffn_gate_inp, NAME("ffn_gate_inp.weight"), d, n_expert, 1)) ||
        (rc = bind_tensor(m, &L->ffn_gate_exps, NAME("ffn_gate_exps.weight"), d, n_ff_exp, n_expert, 1)) ||
        (rc = bind_tensor(m, &L->ffn_up_exps, NAME("ffn_up_exps.weight"), d, n_ff_exp, n_expert, 1)) ||
        (rc = bind_tensor(m, &L->ffn_down_exps, NAME("ffn_down_exps.weight"), n_ff_exp, d, n_expert, 1)))
        return rc;
#undef NAME
    return PI_OK;
}

/* the n values of `name` are shares of tokens: finite and in [0, 1] */
static int check_shares(const float *v, int64_t n, const char *name) {
    for (int64_t i = 0; v && i < n; i++)
        if (!(v[i] >= 0.0f && v[i] <= 1.0f))
            return pi_set_error(PI_ERR_FORMAT, "tensor '%s' value %lld is %g: a share of tokens in [0, 1] expected", name,
                                (long long)i, (double)v[i]);
    return PI_OK;
}

/* An MoE layer's routing profile (convert/add_profile.py), optional: ffn_exp_freq [n_expert] and
 * ffn_exp_run_freq [n_expert][expert runs], the latter only with the former and at most its
 * expert's routing share (a run is read only when its expert is routed). */
static int bind_expert_profile(pi_model *m, pi_layer *L, int il, float **cursor) {
    const int64_t n_expert = m->n_expert, runs = pi_model_expert_runs(m);
    char freq[64], run_freq[64];
    snprintf(freq, sizeof freq, "blk.%d.ffn_exp_freq", il);
    snprintf(run_freq, sizeof run_freq, "blk.%d.ffn_exp_run_freq", il);
    int rc;
    if ((rc = bind_values(m, &L->exp_freq, cursor, freq, n_expert, 1, 0)) ||
        (rc = bind_values(m, &L->exp_run_freq, cursor, run_freq, runs, n_expert, 0)) ||
        (rc = check_shares(L->exp_freq, n_expert, freq)) || (rc = check_shares(L->exp_run_freq, n_expert * runs, run_freq)))
        return rc;
    if (L->exp_run_freq && !L->exp_freq)
        return pi_set_error(PI_ERR_FORMAT, "tensor '%s' needs '%s' beside it", run_freq, freq);
    for (int64_t e = 0; L->exp_run_freq && e < n_expert; e++)
        for (int64_t r = 0; r < runs; r++)
            if (L->exp_run_freq[e * runs + r] > L->exp_freq[e] * (1.0f + 1e-5f) + 1e-6f)
                return pi_set_error(PI_ERR_FORMAT, "tensor '%s': expert %lld run %lld is read more often (%g) than the "
                                    "expert is routed (%g, %s)", run_freq, (long long)e, (long long)r,
                                    (double)L->exp_run_freq[e * runs + r], (double)L->exp_freq[e], freq);
    return PI_OK;
}

/* `base`.weight and, for LayerNorm, `base`.bias (required with the weight) */
static int bind_norm(pi_model *m, float **w, float **b, float **cursor, const char *base, int64_t n, int required) {
    char name[64];
    snprintf(name, sizeof name, "%s.weight", base);
    int rc = bind_vector(m, w, cursor, name, n, required);
    *b = NULL;
    if (rc || !*w) return rc;
    snprintf(name, sizeof name, "%s.bias", base);
    return bind_vector(m, b, cursor, name, n, m->layer_norm);
}

/* The attention's and the FFN's input norms, named as the descriptor says (pi_arch.attn_norm,
 * ffn_norm). A parallel block's attention norm is optional: absent, the FFN's feeds both. */
static int bind_block_norms(pi_model *m, pi_layer *L, int il, float **cursor) {
    const int64_t d = m->info.n_embd;
    char attn[48], ffn[48];
    snprintf(attn, sizeof attn, "blk.%d.%s", il, m->desc->attn_norm ? m->desc->attn_norm : "attn_norm");
    snprintf(ffn, sizeof ffn, "blk.%d.%s", il, m->desc->ffn_norm ? m->desc->ffn_norm : "ffn_norm");
    int rc;
    if ((rc = bind_norm(m, &L->attn_norm, &L->attn_norm_b, cursor, attn, d, !m->parallel)) ||
        (rc = bind_norm(m, &L->ffn_norm, &L->ffn_norm_b, cursor, ffn, d, 1)))
        return rc;
    if (!L->attn_norm) {
        L->attn_norm = L->ffn_norm;
        L->attn_norm_b = L->ffn_norm_b;
    }
    return PI_OK;
}

/* Learned positions: one row per position, from row pi_arch.position_offset on; the rows bound
 * the context. */
static int bind_positions(pi_model *m) {
    const gguf_tensor *t = gguf_find_tensor(&m->file, "position_embd.weight");
    if (!t) return pi_set_error(PI_ERR_FORMAT, "GGUF: required tensor 'position_embd.weight' is missing");
    m->position_offset = m->desc->position_offset;
    if (t->ne[1] <= m->position_offset || t->ne[1] > (1 << 24))
        return pi_set_error(PI_ERR_FORMAT, "tensor 'position_embd.weight' has %lld positions", (long long)t->ne[1]);
    int rc = bind_weight(m, &m->position_embd, "position_embd.weight", m->info.n_embd, t->ne[1], 1);
    const int32_t n_pos = (int32_t)t->ne[1] - m->position_offset;
    if (m->info.n_ctx_train > n_pos) m->info.n_ctx_train = n_pos;
    return rc;
}

/* An encoder's input: the LayerNorm of its embeddings, and row 0 of the optional token_types,
 * which every token gets (llama.cpp runs every input as sentence A) */
static int bind_encoder_input(pi_model *m, float **cursor) {
    const int64_t d = m->info.n_embd;
    int rc = bind_norm(m, &m->embd_norm, &m->embd_norm_b, cursor, "token_embd_norm", d, 1);
    const gguf_tensor *t = gguf_find_tensor(&m->file, "token_types.weight");
    if (rc || !t) return rc;
    pi_weight types;
    if ((rc = bind_weight(m, &types, "token_types.weight", d, t->ne[1] > 0 ? t->ne[1] : 1, 1))) return rc;
    if (t->type != PI_TYPE_F32 && t->type != PI_TYPE_F16 && t->type != PI_TYPE_BF16)
        return pi_set_error(PI_ERR_UNSUPPORTED, "tensor 'token_types.weight' has type %s (F32, F16 or BF16 expected)",
                            pi_type_name(t->type));
    pi_kernels ref;
    pi_kernels_ref(&ref);
    ref.dequant[t->type](types.data, *cursor, (int)d);
    m->token_type_embd = *cursor;
    *cursor += d;
    return PI_OK;
}

/* the down bias; PowerInfer's converter renames it with the transposed matrix */
static int bind_down_bias(pi_model *m, pi_layer *L, int il, float **cursor) {
    char name[64];
    snprintf(name, sizeof name, "blk.%d.ffn_down.bias", il);
    int rc = bind_vector(m, &L->ffn_down_b, cursor, name, m->info.n_embd, 0);
    if (rc || L->ffn_down_b) return rc;
    snprintf(name, sizeof name, "blk.%d.ffn_down_t.bias", il);
    return bind_vector(m, &L->ffn_down_b, cursor, name, m->info.n_embd, 0);
}

/* phi3's LongRoPE factors rescale the rope by context length: not run here, so refused */
static int refuse_long_rope(const pi_model *m) {
    const char *names[] = { "rope_factors_long.weight", "rope_factors_short.weight" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (gguf_find_tensor(&m->file, names[i]))
            return pi_set_error(PI_ERR_UNSUPPORTED, "LongRoPE ('%s') is not supported", names[i]);
    return PI_OK;
}

/* Every profiled frequency is finite (placement.c orders the neurons by them). */
static int check_freqs(const pi_model *m) {
    for (int il = 0; il < m->info.n_layer; il++) {
        const float *f = m->layers[il].ffn_freq;
        for (int i = 0; f && i < m->info.n_ff; i++)
            if (!isfinite(f[i])) return pi_set_error(PI_ERR_FORMAT, "blk.%d.ffn_freq[%d] is not finite", il, i);
    }
    return PI_OK;
}

/* whether layer il is a sliding-window layer of the cycle (llama.cpp's set_swa_pattern) */
static int is_local(const pi_model *m, int il) {
    const int p = m->swa_period;
    if (p == 0) return 1;
    return m->swa_dense_first ? il % p != 0 : il % p < p - 1;
}

static int bind_tensors(pi_model *m) {
    const pi_model_info *h = &m->info;
    const int64_t d = h->n_embd, q_dim = (int64_t)h->n_head * m->head_dim, kv_dim = (int64_t)h->n_head_kv * m->head_dim;
    int rc;
    const gguf_tensor *emb = gguf_find_tensor(&m->file, "token_embd.weight");
    if (!emb) return pi_set_error(PI_ERR_FORMAT, "GGUF: required tensor 'token_embd.weight' is missing");
    m->info.n_vocab = (int32_t)emb->ne[1];
    if ((rc = bind_weight(m, &m->token_embd, "token_embd.weight", d, emb->ne[1], 1))) return rc;
    if ((rc = bind_weight(m, &m->output, "output.weight", d, h->n_vocab, 0))) return rc;
    if ((rc = refuse_long_rope(m))) return rc;
    if (!m->output.data) {
        m->output = m->token_embd;
        m->info.tied_output = 1;
    }
    if ((m->traits & ARCH_LEARNED_POS) && (rc = bind_positions(m))) return rc;
    /* 5 d: the output norm, or an encoder's input norm, and its token type row */
    size_t n_floats = 5 * (size_t)d + (size_t)h->n_rot / 2 + (size_t)h->n_vocab +
                      (size_t)h->n_layer * (size_t)(8 * d + q_dim + 2 * kv_dim + 3 * h->n_ff + 2 * m->head_dim) +
                      (size_t)h->n_layer * (size_t)m->n_expert * (size_t)(1 + pi_model_expert_runs(m));
    m->vectors = malloc(n_floats * sizeof(float));
    m->layers = calloc((size_t)h->n_layer, sizeof *m->layers);
    if (!m->vectors || !m->layers) return pi_set_error(PI_ERR_NOMEM, "no memory for %d layers", h->n_layer);
    float *cur = m->vectors;
    const int post_norms = (m->traits & ARCH_POST_NORMS) != 0, qk_norm = (m->traits & ARCH_QK_NORM) != 0;
    if ((rc = bind_norm(m, &m->output_norm, &m->output_norm_b, &cur, "output_norm", d, !m->encoder)) ||
        (m->encoder && (rc = bind_encoder_input(m, &cur))) ||
        (rc = bind_vector(m, &m->output_b, &cur, "output.bias", h->n_vocab, 0)) ||
        (rc = bind_vector(m, &m->rope_freqs, &cur, "rope_freqs.weight", h->n_rot / 2, 0)))
        return rc;
    for (int il = 0; il < h->n_layer; il++) {
        pi_layer *L = &m->layers[il];
        char name[64];
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.%s", il, s), name)
        if ((rc = bind_block_norms(m, L, il, &cur)) ||
            (rc = bind_qkv(m, L, il, d, q_dim, kv_dim)) ||
            (rc = bind_vector(m, &L->attn_q_b, &cur, NAME("attn_q.bias"), q_dim, 0)) ||
            (rc = bind_vector(m, &L->attn_k_b, &cur, NAME("attn_k.bias"), kv_dim, 0)) ||
            (rc = bind_vector(m, &L->attn_v_b, &cur, NAME("attn_v.bias"), kv_dim, 0)) ||
            (rc = bind_qkv_bias(m, L, il, &cur, q_dim, kv_dim)) ||
            (rc = bind_weight(m, &L->attn_output, NAME("attn_output.weight"), q_dim, d, 1)) ||
            (rc = bind_vector(m, &L->attn_output_b, &cur, NAME("attn_output.bias"), d, 0)) ||
            (rc = m->n_expert ? bind_moe(m, L, il, d) : bind_gate_up(m, L, il, d, h->n_ff)) ||
            (m->n_expert && (rc = bind_expert_profile(m, L, il, &cur))) ||
            (rc = bind_weight(m, &L->ffn_down_t, NAME("ffn_down_t.weight"), d, h->n_ff, 0)) ||
            /* PowerInfer's files carry only the transposed down matrix */
            (rc = bind_weight(m, &L->ffn_down, NAME("ffn_down.weight"), h->n_ff, d, !L->ffn_down_t.data && !m->n_expert)) ||
            (rc = bind_vector(m, &L->ffn_freq, &cur, NAME("ffn_freq"), h->n_ff, 0)) ||
            (rc = bind_predictor(m, L, il)) ||
            (rc = bind_vector(m, &L->ffn_gate_b, &cur, NAME("ffn_gate.bias"), h->n_ff, 0)) ||
            (rc = bind_vector(m, &L->ffn_up_b, &cur, NAME("ffn_up.bias"), h->n_ff, 0)) ||
            (rc = bind_down_bias(m, L, il, &cur)) ||
            (rc = bind_vector(m, &L->attn_q_norm, &cur, NAME("attn_q_norm.weight"), m->head_dim, qk_norm)) ||
            (rc = bind_vector(m, &L->attn_k_norm, &cur, NAME("attn_k_norm.weight"), m->head_dim, qk_norm)) ||
            (rc = bind_vector(m, &L->post_attn_norm, &cur, NAME("post_attention_norm.weight"), d, post_norms)) ||
            (rc = bind_vector(m, &L->post_ffn_norm, &cur, NAME("post_ffw_norm.weight"), d, post_norms)))
            return rc;
        L->local = m->swa_window > 0 && is_local(m, il);
        L->rope_local = L->local && m->rope_base_local > 0.0f;
        L->no_rope = m->no_rope_step > 0 && il % m->no_rope_step == m->no_rope_phase;
#undef NAME
    }
    if ((rc = check_predictors(m))) return rc;
    if ((rc = read_thresholds(m))) return rc;
    return check_freqs(m);
}

/* GLU activations multiply by up, so they need a gate; the plain ones need its absence */
static int check_activation(const pi_model *m) {
    const int glu = m->info.ffn_act <= PI_ACT_GELU_GLU, gated = !(m->traits & ARCH_UNGATED);
    if (glu == gated) return PI_OK;
    return pi_set_error(PI_ERR_UNSUPPORTED, "FFN activation '%s' does not fit arch '%s', whose FFN has %s gate",
                        ACT_NAMES[m->info.ffn_act], m->arch, gated ? "a" : "no");
}

enum { LAYER_DENSE = 10 };

/* Weight i of those the dense matmuls read: 10 per layer (an MoE layer's experts, each in its
 * own whole groups, or the dense FFN), then the output (tied: the token embedding, whose row
 * lookup learns the groups, pi_token_rows); NULL where that one is read otherwise. Left out: the
 * predictors, ffn_down_t, a predicted layer's gate and up, whose rows the sparse FFN picks
 * one by one, and skipping ReGLU experts' up, whose live rows ffn_moe.c picks (a group block holds a
 * block of all 16 rows, so down's live column blocks can be picked in groups too). */
static pi_weight *dense_only(pi_model *m, int i) {
    if (i == m->info.n_layer * LAYER_DENSE) return m->info.tied_output ? &m->token_embd : &m->output;
    pi_layer *L = &m->layers[i / LAYER_DENSE];
    pi_weight *ws[LAYER_DENSE] = { &L->attn_q, &L->attn_k, &L->attn_v, &L->attn_output, &L->ffn_down,
                                   L->fc1.data ? NULL : &L->ffn_gate, L->fc1.data ? NULL : &L->ffn_up,
                                   &L->ffn_gate_exps, m->moe_skip_rows ? NULL : &L->ffn_up_exps, &L->ffn_down_exps };
    return ws[i % LAYER_DENSE];
}

/* Those weights, where their type has the grouped layout (kernels/repack.h), go into row groups,
 * in place: the mapping is private, so a written page becomes the process's own copy and the
 * file is untouched, and resident memory stays one copy of each weight. */
static int group_weights(pi_model *m) {
    const int n = m->info.n_layer * LAYER_DENSE + 1;
    pi_weight **ws = malloc((size_t)n * sizeof *ws);
    pi_repack_item *items = malloc((size_t)n * sizeof *items);
    int rc = !ws || !items ? pi_set_error(PI_ERR_NOMEM, "no memory to group the weights' rows") : PI_OK, n_items = 0;
    for (int i = 0; !rc && i < n; i++) {
        pi_weight *w = dense_only(m, i);
        if (!w || !w->data || !pi_repack_fits(w->type, w->n_out)) continue;
        ws[n_items] = w;
        items[n_items++] = (pi_repack_item){ w->type, (uint8_t *)w->data, w->row_bytes, w->n_out * w->n_expert };
    }
    if (!rc && n_items && gguf_make_writable(&m->file) != 0)
        rc = pi_set_error(PI_ERR_IO, "cannot make the model's private mapping writable to group its rows");
    if (!rc && n_items) rc = pi_repack_group(items, n_items);
    for (int i = 0; !rc && i < n_items; i++) ws[i]->grouped = 1;
    if (!rc) m->grouped_weights += n_items;
    free(ws);
    free(items);
    if (m->info.tied_output) m->output.grouped = m->token_embd.grouped;
    return rc;
}

/* Whether ReGLU experts skip their dead neurons' rows: the caller's choice (0 or 1), else the
 * file's powerinfer.moe_skip_rows, which the converter measured, else skipping (trained
 * SmallThinker experts are sparse). Decided at load because it sets up_exps' layout: row-major
 * for picking live rows, grouped for the dense matmul. */
static int choose_moe_skip(pi_model *m, int choice) {
    static const char key[] = "powerinfer.moe_skip_rows";
    if (choice < -1 || choice > 1)
        return pi_set_error(PI_ERR_ARG, "pi_model_params.moe_skip_rows must be -1, 0 or 1, not %d", choice);
    const int reglu_experts = m->n_expert && m->info.ffn_act == PI_ACT_RELU_GLU;
    const gguf_kv *kv = gguf_find_kv(&m->file, key);
    if (reglu_experts && choice < 0 && kv) {
        if (kv->type != PI_META_BOOL) return pi_set_error(PI_ERR_FORMAT, "metadata key %s must be a BOOL", key);
        choice = kv->value[0] != 0;
    }
    m->info.moe_skip_rows = m->moe_skip_rows = reglu_experts && choice != 0;
    return PI_OK;
}

PI_API int pi_model_load(const char *path, pi_model_params params, pi_model **out) {
    if (!path || !out) return pi_set_error(PI_ERR_ARG, "pi_model_load: NULL argument");
    *out = NULL;
    pi_model *m = calloc(1, sizeof *m);
    if (!m) return pi_set_error(PI_ERR_NOMEM, "no memory for the model");
    int rc = gguf_open(path, &m->file);
    m->vocab_only = params.vocab_only;
    if (!rc && !params.vocab_only) {
        rc = read_arch(m);
        if (!rc) rc = read_activation(m);
        if (!rc) rc = read_hparams(m);
        if (!rc) rc = bind_tensors(m);
        if (!rc && params.ffn_act >= 0) {
            if (params.ffn_act > PI_ACT_GELU)
                rc = pi_set_error(PI_ERR_UNSUPPORTED, "FFN activation %d is not supported", params.ffn_act);
            m->info.ffn_act = params.ffn_act;
        }
        if (!rc) rc = check_activation(m);
        if (!rc) rc = choose_moe_skip(m, params.moe_skip_rows);
        if (!rc && params.repack) rc = group_weights(m);
    }
    if (rc) {
        pi_model_free(m);
        return rc;
    }
    *out = m;
    return PI_OK;
}

PI_API void pi_model_free(pi_model *m) {
    if (!m) return;
    gguf_close(&m->file);
    free(m->layers);
    free(m->vectors);
    free(m->description);
    free(m);
}
