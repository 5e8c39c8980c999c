/* ffn_moe.c - the mixture-of-experts FFN (ffn_moe.h), as llama.cpp's build_moe_ffn runs
 * qwen3moe (softmax gating, SwiGLU experts) and smallthinker (softmax or sigmoid gating, ReGLU
 * experts): top-k, weights normalised over the chosen experts. */
#include <math.h>
#include <string.h>

#include "ffn_moe.h"
#include "ops.h"
#include "token_bytes.h"

pi_weight pi_expert_weight(const pi_weight *w, int e) {
    pi_weight one = *w;
    one.n_expert = 1;
    one.data = w->data + (size_t)e * (size_t)w->n_out * w->row_bytes;
    return one;
}

/* tokens per router call, as many as a prefill tile of the threaded matmul */
enum { ROUTER_TOKENS = 64 };

void pi_moe_logits(pi_context *c, const pi_layer *L, int n, pi_act a) {
    const int E = c->model->n_expert;
    /* the router's few rows on this thread: waking the pool would cost more than they do */
    const pi_weight *r = &L->ffn_gate_inp;
    const pi_matmul_fn router = pi_weight_matmul(&c->kern, r);
    for (int t0 = 0; t0 < n; t0 += ROUTER_TOKENS)
        router(r->data, r->row_bytes, NULL, 0, E, pi_act_from(a, t0), n - t0 < ROUTER_TOKENS ? n - t0 : ROUTER_TOKENS,
               c->moe.probs + (size_t)t0 * E, E);
}

/* p = softmax(p) over n values, the sum in double as ggml's soft_max */
static void softmax(float *p, int n) {
    float max = p[0];
    for (int i = 1; i < n; i++) max = p[i] > max ? p[i] : max;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += p[i] = expf(p[i] - max);
    const float scale = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) p[i] *= scale;
}

/* p = sigmoid(p), as ggml's */
static void sigmoid(float *p, int n) {
    for (int i = 0; i < n; i++) p[i] = 1.0f / (1.0f + expf(-p[i]));
}

void pi_moe_route(pi_context *c, const pi_layer *L, int n, pi_act a) {
    const pi_model *m = c->model;
    if (!m->router_on_input) pi_moe_logits(c, L, n, a);
    const int E = m->n_expert, k = m->n_expert_used;
    int32_t *first = c->moe.first;
    memset(first, 0, (size_t)(E + 1) * sizeof *first);
    for (int t = 0; t < n; t++) {
        float *p = c->moe.probs + (size_t)t * E;
        double sum = 0.0; /* in double, as ggml's sum_rows */
        int32_t *sel = c->moe.sel + (size_t)t * k;
        float *w = c->moe.sel_w + (size_t)t * k;
        if (m->moe_gating == PI_GATING_SIGMOID) sigmoid(p, E);
        else softmax(p, E);
        for (int j = 0; j < k; j++) {
            int best = 0;
            for (int e = 1; e < E; e++) best = p[e] > p[best] ? e : best;
            sel[j] = best;
            sum += w[j] = p[best];
            p[best] = -1.0f; /* taken: below every probability */
            first[best + 1]++;
        }
        /* llama.cpp clamps the sum to f16's smallest normal, for sigmoids that all round to 0 */
        const float total = (float)sum > 6.103515625e-5f ? (float)sum : 6.103515625e-5f;
        for (int j = 0; j < k; j++) w[j] /= total;
    }
    for (int e = 0; e < E; e++) first[e + 1] += first[e];
    /* a counting sort: first[e] walks through e's pairs, ending at e + 1's start, then shifts back */
    for (int t = 0; t < n; t++)
        for (int j = 0; j < k; j++) {
            const int32_t slot = first[c->moe.sel[(size_t)t * k + j]]++;
            c->moe.tok[slot] = t;
            c->moe.tok_pair[slot] = t * k + j;
        }
    memmove(first + 1, first, (size_t)E * sizeof *first);
    first[0] = 0;
}

/* the rows of a for the m tokens listed, one after another: an expert's input */
static pi_act gather(pi_context *c, pi_act a, const int32_t *tokens, int m) {
    if (m == 1) return pi_act_from(a, tokens[0]);
    const int d = a.n;
    for (int i = 0; i < m; i++) {
        const pi_act row = pi_act_from(a, tokens[i]);
        memcpy(c->moe.x + (size_t)i * d, row.f, (size_t)d * sizeof(float));
        if (a.q) memcpy(c->moe.q.q + (size_t)i * (d / QK), row.q, (size_t)(d / QK) * sizeof *row.q);
        if (a.k) memcpy(c->moe.q.k + (size_t)i * (d / QK_K), row.k, (size_t)(d / QK_K) * sizeof *row.k);
    }
    return (pi_act){ c->moe.x, a.q ? c->moe.q.q : NULL, a.k ? c->moe.q.k : NULL, d };
}

/* moe.out[0..count) = expert e of layer L on its count tokens x, every neuron */
static void expert_dense(pi_context *c, const pi_layer *L, int e, pi_act x, int count) {
    const int n_ff = c->model->n_ff_exp;
    const pi_weight gate = pi_expert_weight(&L->ffn_gate_exps, e), up = pi_expert_weight(&L->ffn_up_exps, e),
                    down = pi_expert_weight(&L->ffn_down_exps, e);
    const pi_mm_target gate_up[2] = { { &gate, c->s.gate }, { &up, c->s.up } }, out = { &down, c->moe.out };
    pi_matmul(c, x, count, gate_up, 2);
    pi_activate(c, c->s.gate, c->s.up, (size_t)count * n_ff);
    pi_matmul(c, pi_quantize(&c->kern, c->s.gate, c->moe.q, count, n_ff), count, &out, 1);
    c->stats.ffn_rows_done += (int64_t)count * n_ff;
    c->step_bytes += (int64_t)count * (int64_t)(pi_weight_bytes(&gate) + pi_weight_bytes(&up) + pi_weight_bytes(&down));
}

/* live[0..) = the neurons i with g[i] > 0, ascending; returns how many */
static int live_neurons(const float *g, int n, int32_t *live) {
    int n_live = 0;
    for (int i = 0; i < n; i++)
        if (g[i] > 0.0f) live[n_live++] = i;
    return n_live;
}

/* g[i] = relu(g[i]) * up[j] where i = live[j] (up packed: the live rows' only), else 0 */
static void reglu_live(float *g, int n, const float *up, const int32_t *live, int n_live) {
    for (int i = 0; i < n; i++) g[i] = g[i] > 0.0f ? g[i] : 0.0f;
    for (int j = 0; j < n_live; j++) g[live[j]] *= up[j];
}

/* The bytes of down a token reads: the column blocks holding a live neuron (live ascending), in
 * blocks of the weight's type (at least the 32 of the 8-bit activations); the kernels skip the
 * others, whose activations are all zero. */
static int64_t live_block_bytes(const pi_weight *down, const int32_t *live, int n_live) {
    const int bs = pi_type_block_size(down->type), cols = bs > QK ? bs : QK;
    int64_t blocks = 0;
    for (int j = 0, last = -1; j < n_live; j++)
        if (live[j] / cols != last) last = live[j] / cols, blocks++;
    return blocks * (cols / bs) * (int64_t)pi_type_block_bytes(down->type) * down->n_out;
}

/* y = the n rows of w listed in rows (NULL: rows 0..n) times one token x, on the context's pool
 * (pooled) or on the calling thread alone */
static void token_matmul(pi_context *c, const pi_weight *w, const int32_t *rows, int n, pi_act x, float *y, int pooled) {
    if (pooled) {
        const pi_mm_target t = { w, y, rows, rows ? n : 0 };
        pi_matmul(c, x, 1, &t, 1);
    } else {
        pi_weight_matmul(&c->kern, w)(w->data, w->row_bytes, rows, 0, n, x, 1, y, n);
    }
}

int pi_reglu_token(pi_context *c, const pi_weight *gate, const pi_weight *up, const pi_weight *down, pi_act x,
                   const pi_reglu_scratch *s, int pooled, int64_t *bytes) {
    const int n = (int)gate->n_out, d = (int)down->n_out;
    token_matmul(c, gate, NULL, n, x, s->g, pooled);
    const int n_live = live_neurons(s->g, n, s->live);
    if (n_live) token_matmul(c, up, s->live, n_live, x, s->u, pooled); /* packed: u[j] is neuron live[j]'s */
    reglu_live(s->g, n, s->u, s->live, n_live);
    const pi_act h = pi_quantize(&c->kern, s->g, s->q, 1, n);
    *bytes = (int64_t)pi_weight_bytes(gate) + (int64_t)n_live * (int64_t)up->row_bytes + live_block_bytes(down, s->live, n_live);
    /* one pass over down's rows, summed as llama.cpp sums them; the kernels skip the dead blocks */
    token_matmul(c, down, NULL, d, h, s->acc, pooled);
    return n_live;
}

/* expert_dense for one token of a ReGLU expert (pi_reglu_token): the same products and sums,
 * reading only the live neurons' rows. (Several tokens' live neurons interleave: expert_dense
 * reads every row for them.) */
static void expert_live(pi_context *c, const pi_layer *L, int e, pi_act x) {
    const pi_weight gate = pi_expert_weight(&L->ffn_gate_exps, e), up = pi_expert_weight(&L->ffn_up_exps, e),
                    down = pi_expert_weight(&L->ffn_down_exps, e);
    const pi_reglu_scratch s = { c->s.gate, c->s.up, c->moe.live, c->moe.q, c->moe.out };
    int64_t bytes;
    c->stats.ffn_rows_done += pi_reglu_token(c, &gate, &up, &down, x, &s, 1, &bytes);
    c->step_bytes += bytes;
}

/* y = w x, each product rounded (kept apart from the adds that follow, which must not fuse) */
static void weigh(const float *x, float w, float *y, int n) {
    for (int i = 0; i < n; i++) y[i] = w * x[i];
}

void pi_ffn_moe(pi_context *c, const pi_layer *L, int n, pi_act a) {
    const pi_model *m = c->model;
    const int d = m->info.n_embd;
    pi_moe_route(c, L, n, a);
    for (int e = 0; e < m->n_expert; e++) {
        const int32_t p0 = c->moe.first[e], count = c->moe.first[e + 1] - p0;
        if (count == 0) continue; /* not routed to: not read */
        const pi_act x = gather(c, a, c->moe.tok + p0, count);
        if (m->moe_skip_rows && count == 1) expert_live(c, L, e, x);
        else expert_dense(c, L, e, x, count);
        for (int i = 0; i < count; i++) {
            const int32_t pair = c->moe.tok_pair[p0 + i];
            weigh(c->moe.out + (size_t)i * d, c->moe.sel_w[pair], c->moe.weighted + (size_t)pair * d, d);
        }
    }
    /* each token's weighted experts added in rank order, the products rounded first: llama.cpp's
     * graph (a mul, then one add per expert after the first) */
    const int k = m->n_expert_used;
    for (int t = 0; t < n; t++) {
        float *y = c->s.delta + (size_t)t * d;
        const float *w = c->moe.weighted + (size_t)t * k * d;
        memcpy(y, w, (size_t)d * sizeof(float));
        for (int j = 1; j < k; j++)
            for (int i = 0; i < d; i++) y[i] += w[(size_t)j * d + i];
    }
    c->step_bytes += (int64_t)n * (int64_t)pi_weight_bytes(&L->ffn_gate_inp);
}
