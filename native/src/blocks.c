/* blocks.c - the CPU's blocks (blocks.h): attention, FFN and logits over the context's scratch.
 *
 * Shapes: B tokens in this step, d = n_embd, hd = head_dim, q_dim = n_head*hd, kv_dim = n_head_kv*hd. */
#include <string.h>

#include "blocks.h"
#include "ffn_moe.h"
#include "ffn_moe_split.h"
#include "ffn_sparse.h"
#include "kv_cache.h"
#include "ops.h"
#include "status.h"
#include "token_bytes.h"

/* copy n rows of `row` bytes into layer `il` of a capture buffer of max rows per layer, at the
 * step's token offset */
static void capture(const pi_context *c, void *buf, const void *rows, int il, int n, size_t row, int max) {
    const int first = c->s.tok_pos[0] - c->cap.base; /* one sequence: pi_decode's */
    for (int t = 0; t < n && first + t < max; t++)
        memcpy((char *)buf + ((size_t)il * max + (size_t)(first + t)) * row, (const char *)rows + (size_t)t * row, row);
}

/* ---- FFN: dense, or over the neurons the predictor picks ---- */

void pi_ffn_dense(pi_context *c, const pi_layer *L, int il, int n, pi_act a) {
    const int d = c->model->info.n_embd, n_ff = c->model->info.n_ff;
    if (L->ffn_gate.data) {
        const pi_mm_target gate_up[2] = { { &L->ffn_gate, c->s.gate }, { &L->ffn_up, c->s.up } };
        pi_matmul(c, a, n, gate_up, 2);
        pi_add_bias(c->s.gate, L->ffn_gate_b, n, n_ff);
        pi_add_bias(c->s.up, L->ffn_up_b, n, n_ff);
    } else { /* no gate: up(xn) goes where the activation is taken */
        const pi_mm_target up = { &L->ffn_up, c->s.gate };
        pi_matmul(c, a, n, &up, 1);
        pi_add_bias(c->s.gate, L->ffn_up_b, n, n_ff);
    }
    pi_activate(c, c->s.gate, c->s.up, (size_t)n * n_ff);
    if (c->cap.act) capture(c, c->cap.act, c->s.gate, il, n, (size_t)n_ff * sizeof(float), c->cap.max);
    if (L->ffn_down.data) {
        const pi_mm_target down = { &L->ffn_down, c->s.delta };
        pi_matmul(c, pi_quantize(&c->kern, c->s.gate, c->s.xq, n, n_ff), n, &down, 1);
    } else { /* PowerInfer's files: only the transposed down matrix */
        for (int t = 0; t < n; t++)
            pi_down_by_rows(c, &L->ffn_down_t, c->s.gate + (size_t)t * n_ff, n_ff, c->s.delta + (size_t)t * d);
    }
    c->stats.ffn_rows_done += (int64_t)n * n_ff;
    c->step_bytes += (int64_t)n * (int64_t)pi_dense_ffn_bytes(L);
}

/* ---- a layer's two blocks ---- */

/* x += down(act(gate(xn), up(xn))) with xn the FFN's normed input: every neuron, the predicted
 * ones (ffn_sparse.h), or the routed experts of an MoE layer (ffn_moe.h; one token with a budget:
 * the expert split, ffn_moe_split.h) */
int pi_ffn_block(pi_context *c, int il, int n, pi_ffn_path path) {
    const pi_layer *L = &c->model->layers[il];
    const int d = c->model->info.n_embd;
    int rc = PI_OK;
    pi_norm(c, c->s.x, L->ffn_norm, L->ffn_norm_b, c->s.xn, n);
    if (c->cap.ffn_in) capture(c, c->cap.ffn_in, c->s.xn, il, n, (size_t)d * sizeof(float), c->cap.max);
    const pi_act a = pi_quantize(&c->kern, c->s.xn, c->s.xq, n, d);
    switch (path) {
    case PI_FFN_SPARSE:
        for (int t = 0; t < n && !rc; t++) rc = pi_ffn_sparse(c, il, t, pi_act_from(a, t));
        break;
    case PI_FFN_MOE_SPLIT: rc = pi_ffn_moe_split(c, il, a); break;
    case PI_FFN_MOE:
        pi_ffn_moe(c, L, n, a);
        if (c->cap.experts) /* the routing the MoE FFN left in moe.sel */
            capture(c, c->cap.experts, c->moe.sel, il, n, (size_t)c->model->n_expert_used * sizeof(int32_t),
                    c->cap.experts_max);
        break;
    default: pi_ffn_dense(c, L, il, n, a);
    }
    if (rc) return rc;
    pi_ffn_residual(c, il, c->s.x, c->s.delta, n);
    return PI_OK;
}

void pi_ffn_residual(const pi_context *c, int il, float *x, float *delta, int n) {
    const pi_layer *L = &c->model->layers[il];
    const int d = c->model->info.n_embd;
    pi_add_bias(delta, L->ffn_down_b, n, d);
    if (L->post_ffn_norm) pi_rmsnorm(c, delta, L->post_ffn_norm, delta, n, d);
    c->vec.axpy(1.0f, delta, x, n * d);
}

/* pi_context_new keeps every position of the context inside the table */
void pi_add_positions(pi_context *c, int n) {
    const pi_weight *w = &c->model->position_embd;
    const int d = c->model->info.n_embd;
    for (int t = 0; t < n; t++) {
        const size_t row = (size_t)(c->s.tok_pos[t] + c->model->position_offset);
        c->kern.dequant[w->type](w->data + row * w->row_bytes, c->s.xn, d);
        c->vec.axpy(1.0f, c->s.xn, c->s.x + (size_t)t * d, d);
    }
}

/* x += attention_output(attention(norm(x))): q, k, v from the normed stream, rotated, k and v
 * appended to the cache; the parallel block's FFN (falcon) runs in the middle, while x is still
 * the layer's input */
int pi_attention_block(pi_context *c, int il, int n) {
    const pi_model *m = c->model;
    const pi_layer *L = &m->layers[il];
    const pi_model_info *h = &m->info;
    const int d = h->n_embd, hd = m->head_dim, q_dim = h->n_head * hd, kv_dim = h->n_head_kv * hd;
    int rc;

    /* smallthinker routes from the layer's input: its logits wait in moe.probs for the FFN */
    if (m->router_on_input) pi_moe_logits(c, L, n, pi_quantize(&c->kern, c->s.x, c->s.xq, n, d));
    pi_norm(c, c->s.x, L->attn_norm, L->attn_norm_b, c->s.xn, n);
    pi_act a = pi_quantize(&c->kern, c->s.xn, c->s.xq, n, d);
    const pi_mm_target qkv[3] = { { &L->attn_q, c->s.q }, { &L->attn_k, c->s.k }, { &L->attn_v, c->s.v } };
    pi_matmul(c, a, n, qkv, 3);
    pi_add_bias(c->s.q, L->attn_q_b, n, q_dim);
    pi_add_bias(c->s.k, L->attn_k_b, n, kv_dim);
    pi_add_bias(c->s.v, L->attn_v_b, n, kv_dim);
    /* parallel block: the FFN reads the layer's input as well and adds to x; attention needs
     * only q, k, v from here on */
    if (m->parallel && (rc = pi_ffn_block(c, il, n, (pi_ffn_path)pi_ffn_choice_of(c, il, n).block))) return rc;
    if (L->attn_q_norm) pi_rmsnorm(c, c->s.q, L->attn_q_norm, c->s.q, n * h->n_head, hd); /* per head */
    if (L->attn_k_norm) pi_rmsnorm(c, c->s.k, L->attn_k_norm, c->s.k, n * h->n_head_kv, hd);
    if (!L->no_rope) {
        pi_rope(c, c->s.q, h->n_head, n, L->rope_local);
        pi_rope(c, c->s.k, h->n_head_kv, n, L->rope_local);
    }
    pi_kv_store(c, il, n);
    pi_kv_prepare_q(c, n);

    pi_attention(c, il, n, c->s.xn);

    a = pi_quantize(&c->kern, c->s.xn, c->s.xq, n, q_dim);
    const pi_mm_target o = { &L->attn_output, c->s.delta };
    pi_matmul(c, a, n, &o, 1);
    pi_add_bias(c->s.delta, L->attn_output_b, n, d);
    if (L->post_attn_norm) pi_rmsnorm(c, c->s.delta, L->post_attn_norm, c->s.delta, n, d);
    c->vec.axpy(1.0f, c->s.delta, c->s.x, n * d); /* residual */
    return PI_OK;
}

/* logits of the step's tokens [out.first, n) */
int pi_logits_block(pi_context *c, int n, pi_outputs out) {
    const pi_model *m = c->model;
    const int d = m->info.n_embd, n_out = n - out.first;
    const float *normed = c->s.out_x;
    if (c->s.embd) normed = c->s.embd + (size_t)c->s.tok_pos[out.first] * d; /* the embeddings are these rows */
    else pi_norm(c, c->s.x + (size_t)out.first * d, m->output_norm, m->output_norm_b, c->s.out_x, n_out);
    pi_act a = pi_quantize(&c->kern, normed, c->s.out_q, n_out, d);
    const pi_mm_target target = { &m->output, out.rows };
    pi_matmul(c, a, n_out, &target, 1);
    pi_add_bias(out.rows, m->output_b, n_out, m->info.n_vocab);
    return PI_OK;
}
