/* ffn_moe.c - the mixture-of-experts FFN (ffn_moe.h), as llama.cpp's build_moe_ffn runs
 * qwen3moe: softmax gating, top-k, weights normalised over the chosen experts, SwiGLU experts. */
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

/* p = softmax(p) over n values, the sum in double as ggml's soft_max */
static void softmax(float *p, int n) {
    float max = p[0];
    for (int i = 1; i < n; i++) max = p[i] > max ? p[i] : max;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += p[i] = expf(p[i] - max);
    const float scale = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) p[i] *= scale;
}

void pi_moe_route(pi_context *c, const pi_layer *L, int n, pi_act a) {
    const int E = c->model->n_expert, k = c->model->n_expert_used;
    /* the router's few rows on this thread: waking the pool would cost more than they do */
    const pi_weight *r = &L->ffn_gate_inp;
    const pi_matmul_fn router = pi_weight_matmul(&c->kern, r);
    for (int t0 = 0; t0 < n; t0 += ROUTER_TOKENS)
        router(r->data, r->row_bytes, NULL, 0, E, pi_act_from(a, t0), n - t0 < ROUTER_TOKENS ? n - t0 : ROUTER_TOKENS,
               c->moe_probs + (size_t)t0 * E, E);
    int32_t *first = c->moe_first;
    memset(first, 0, (size_t)(E + 1) * sizeof *first);
    for (int t = 0; t < n; t++) {
        float *p = c->moe_probs + (size_t)t * E, sum = 0.0f;
        int32_t *sel = c->moe_sel + (size_t)t * k;
        float *w = c->moe_sel_w + (size_t)t * k;
        softmax(p, E);
        for (int j = 0; j < k; j++) {
            int best = 0;
            for (int e = 1; e < E; e++) best = p[e] > p[best] ? e : best;
            sel[j] = best;
            sum += w[j] = p[best];
            p[best] = -1.0f; /* taken: below every probability */
            first[best + 1]++;
        }
        for (int j = 0; j < k; j++) w[j] /= sum;
    }
    for (int e = 0; e < E; e++) first[e + 1] += first[e];
    /* a counting sort: first[e] walks through e's pairs, ending at e + 1's start, then shifts back */
    for (int t = 0; t < n; t++)
        for (int j = 0; j < k; j++) {
            const int32_t slot = first[c->moe_sel[(size_t)t * k + j]]++;
            c->moe_tok[slot] = t;
            c->moe_tok_w[slot] = c->moe_sel_w[(size_t)t * k + j];
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
        memcpy(c->moe_x + (size_t)i * d, row.f, (size_t)d * sizeof(float));
        if (a.q) memcpy(c->moe_q.q + (size_t)i * (d / QK), row.q, (size_t)(d / QK) * sizeof *row.q);
        if (a.k) memcpy(c->moe_q.k + (size_t)i * (d / QK_K), row.k, (size_t)(d / QK_K) * sizeof *row.k);
    }
    return (pi_act){ c->moe_x, a.q ? c->moe_q.q : NULL, a.k ? c->moe_q.k : NULL, d };
}

void pi_ffn_moe(pi_context *c, const pi_layer *L, int n, pi_act a) {
    const pi_model *m = c->model;
    const int d = m->info.n_embd, n_ff = m->n_ff_exp;
    pi_moe_route(c, L, n, a);
    memset(c->delta, 0, (size_t)n * d * sizeof(float));
    for (int e = 0; e < m->n_expert; e++) {
        const int32_t p0 = c->moe_first[e], count = c->moe_first[e + 1] - p0;
        if (count == 0) continue; /* not routed to: not read */
        const pi_weight gate = pi_expert_weight(&L->ffn_gate_exps, e), up = pi_expert_weight(&L->ffn_up_exps, e),
                        down = pi_expert_weight(&L->ffn_down_exps, e);
        const pi_mm_target gate_up[2] = { { &gate, c->gate }, { &up, c->up } }, out = { &down, c->moe_out };
        pi_matmul(c, gather(c, a, c->moe_tok + p0, count), count, gate_up, 2);
        pi_activate(c, c->gate, c->up, (size_t)count * n_ff);
        pi_matmul(c, pi_quantize(&c->kern, c->gate, c->moe_q, count, n_ff), count, &out, 1);
        for (int i = 0; i < count; i++)
            c->vec.axpy(c->moe_tok_w[p0 + i], c->moe_out + (size_t)i * d, c->delta + (size_t)c->moe_tok[p0 + i] * d, d);
        c->stats.ffn_rows_done += (int64_t)count * n_ff;
        c->step_bytes += (int64_t)count * (int64_t)(pi_weight_bytes(&gate) + pi_weight_bytes(&up) + pi_weight_bytes(&down));
    }
    c->step_bytes += (int64_t)n * (int64_t)pi_weight_bytes(&L->ffn_gate_inp);
}
