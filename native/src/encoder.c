/* encoder.c - the forward pass of encoder-only embedding models (bert, nomic-bert), as
 * llama.cpp's build_bert graph runs them: every token of the input attends to every other, so
 * the whole input is one step and nothing is cached; each block is post-norm, and the final
 * hidden states are the embeddings.
 *
 * Shapes as in forward.c: n tokens, d = n_embd, hd = head_dim. Scratch is the context's. */
#include <math.h>
#include <string.h>

#include "blocks.h"
#include "forward.h"
#include "ops.h"
#include "status.h"

/* ---- attention over the step's own keys, every pair of tokens ---- */

/* With no KV cache llama.cpp keeps q, k and v in f32 (without flash attention, llama-cpp-python's
 * default), so here they stay f32 too, unlike the decoder's f16 cache. */
typedef struct {
    pi_context *c;
    int n;
} attn_task;

/* q . k in eight running sums, which the compiler keeps in vector registers (one sum would
 * chain every add on the last) */
static float dot(const float *q, const float *k, int n) {
    float acc[8] = { 0 };
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += q[i + j] * k[i + j];
    float sum = 0.0f;
    for (int j = 0; j < 8; j++) sum += acc[j];
    for (; i < n; i++) sum += q[i] * k[i];
    return sum;
}

static void attn_worker(void *arg, int ith, int nth) {
    const attn_task *task = arg;
    const pi_context *c = task->c;
    const pi_model *m = c->model;
    const int n = task->n, n_head = m->info.n_head, hd = m->head_dim, group = n_head / m->info.n_head_kv;
    const int q_dim = n_head * hd, kv_dim = m->info.n_head_kv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float *att = c->s.att + (size_t)ith * c->n_ctx;
    for (int item = ith; item < n * n_head; item += nth) {
        const int t = item / n_head, h = item % n_head;
        const float *q = c->s.q + (size_t)t * q_dim + (size_t)h * hd;
        const float *k = c->s.k + (size_t)(h / group) * hd, *v = c->s.v + (size_t)(h / group) * hd;
        float max = -INFINITY;
        for (int p = 0; p < n; p++) {
            att[p] = dot(q, k + (size_t)p * kv_dim, hd) * scale;
            if (att[p] > max) max = att[p];
        }
        const float inv_sum = (float)(1.0 / c->vec.exp_sub_sum(att, max, n));
        float *out = c->s.xn + (size_t)t * q_dim + (size_t)h * hd;
        memset(out, 0, (size_t)hd * sizeof(float));
        for (int p = 0; p < n; p++) c->vec.axpy(att[p] * inv_sum, v + (size_t)p * kv_dim, out, hd);
    }
}

/* x = norm(x + attention_output(attention(x))) */
static void attention_block(pi_context *c, const pi_layer *L, int n) {
    const pi_model_info *h = &c->model->info;
    const int d = h->n_embd, q_dim = h->n_head * c->model->head_dim, kv_dim = h->n_head_kv * c->model->head_dim;
    pi_act a = pi_quantize(&c->kern, c->s.x, c->s.xq, n, d);
    const pi_mm_target qkv[3] = { { &L->attn_q, c->s.q }, { &L->attn_k, c->s.k }, { &L->attn_v, c->s.v } };
    pi_matmul(c, a, n, qkv, 3);
    pi_add_bias(c->s.q, L->attn_q_b, n, q_dim);
    pi_add_bias(c->s.k, L->attn_k_b, n, kv_dim);
    pi_add_bias(c->s.v, L->attn_v_b, n, kv_dim);
    if (h->n_rot) { /* nomic-bert */
        pi_rope(c, c->s.q, h->n_head, n, 0);
        pi_rope(c, c->s.k, h->n_head_kv, n, 0);
    }
    attn_task task = { c, n };
    pi_threadpool_run(c->pool, attn_worker, &task, c->params.n_threads_batch);
    a = pi_quantize(&c->kern, c->s.xn, c->s.xq, n, q_dim);
    const pi_mm_target o = { &L->attn_output, c->s.delta };
    pi_matmul(c, a, n, &o, 1);
    pi_add_bias(c->s.delta, L->attn_output_b, n, d);
    c->vec.axpy(1.0f, c->s.delta, c->s.x, n * d);
    pi_norm(c, c->s.x, L->attn_norm, L->attn_norm_b, c->s.x, n);
}

int pi_encode(pi_context *c, const int32_t *tokens, int n) {
    const pi_model *m = c->model;
    const int d = m->info.n_embd;
    if (!c->s.embd)
        return pi_set_error(PI_ERR_ARG, "an encoder (%s) gives embeddings only: create its context with embeddings on",
                            m->arch);
    if (n > (int)c->n_batch)
        return pi_set_error(PI_ERR_CONTEXT, "an encoder takes its whole input in one step: %d tokens exceed n_batch %u",
                            n, c->n_batch);
    if (m->position_embd.data && n > m->info.n_ctx_train)
        return pi_set_error(PI_ERR_CONTEXT, "an input of %d tokens is longer than the model's %d learned positions", n,
                            m->info.n_ctx_train);
    if (c->dev.device || c->cap.ffn_in || c->cap.experts)
        return pi_set_error(PI_ERR_UNSUPPORTED, "an encoder (%s) runs on the CPU only, without offload, hybrid split "
                            "or profiling capture", m->arch);

    /* x[t] = LayerNorm(token_embd[tokens[t]] + token type 0 + position t) */
    pi_token_rows(c, tokens, n);
    for (int t = 0; m->token_type_embd && t < n; t++) c->vec.axpy(1.0f, m->token_type_embd, c->s.x + (size_t)t * d, d);
    pi_one_segment(c, n, 0);
    pi_step_positions(c);
    if (m->position_embd.data) pi_add_positions(c, n);
    pi_norm(c, c->s.x, m->embd_norm, m->embd_norm_b, c->s.x, n);
    pi_rope_table(c, n);

    for (int il = 0; il < m->info.n_layer; il++) {
        const pi_layer *L = &m->layers[il];
        attention_block(c, L, n);
        /* x = norm(x + FFN(x)) */
        pi_ffn_dense(c, L, il, n, pi_quantize(&c->kern, c->s.x, c->s.xq, n, d));
        pi_ffn_residual(c, il, c->s.x, c->s.delta, n);
        pi_norm(c, c->s.x, L->ffn_norm, L->ffn_norm_b, c->s.x, n);
    }
    memcpy(c->s.embd, c->s.x, (size_t)n * d * sizeof(float));
    c->kv.seq_len[0] = n;
    c->stats.tokens += n;
    return PI_OK;
}
