/* forward.c - the transformer forward pass for a batch of tokens, read top to bottom in pi_forward.
 *
 * Shapes: B tokens in this step, d = n_embd, hd = head_dim, q_dim = n_head*hd, kv_dim = n_head_kv*hd.
 * The operations are ops.h's; this file says in which order they run. */
#include <math.h>
#include <string.h>

#include "device/router.h"
#include "ffn_moe.h"
#include "ffn_moe_split.h"
#include "ffn_sparse.h"
#include "forward.h"
#include "lora.h"
#include "kv_cache.h"
#include "ops.h"
#include "status.h"
#include "token_bytes.h"

/* copy n rows of `row` bytes into layer `il` of a capture buffer of max rows per layer, at the
 * step's token offset */
static void capture(const pi_context *c, void *buf, const void *rows, int il, int n, size_t row, int max) {
    const int first = c->tok_pos[0] - c->capture_base; /* one sequence: pi_decode's */
    for (int t = 0; t < n && first + t < max; t++)
        memcpy((char *)buf + ((size_t)il * max + (size_t)(first + t)) * row, (const char *)rows + (size_t)t * row, row);
}

/* ---- FFN: dense, or over the neurons the predictor picks ---- */

void pi_ffn_dense(pi_context *c, const pi_layer *L, int il, int n, pi_act a) {
    const int d = c->model->info.n_embd, n_ff = c->model->info.n_ff;
    if (L->ffn_gate.data) {
        const pi_mm_target gate_up[2] = { { &L->ffn_gate, c->gate }, { &L->ffn_up, c->up } };
        pi_matmul(c, a, n, gate_up, 2);
        pi_add_bias(c->gate, L->ffn_gate_b, n, n_ff);
        pi_add_bias(c->up, L->ffn_up_b, n, n_ff);
    } else { /* no gate: up(xn) goes where the activation is taken */
        const pi_mm_target up = { &L->ffn_up, c->gate };
        pi_matmul(c, a, n, &up, 1);
        pi_add_bias(c->gate, L->ffn_up_b, n, n_ff);
    }
    pi_activate(c, c->gate, c->up, (size_t)n * n_ff);
    if (c->capture_act) capture(c, c->capture_act, c->gate, il, n, (size_t)n_ff * sizeof(float), c->capture_max);
    if (L->ffn_down.data) {
        const pi_mm_target down = { &L->ffn_down, c->delta };
        pi_matmul(c, pi_quantize(&c->kern, c->gate, c->xq, n, n_ff), n, &down, 1);
    } else { /* PowerInfer's files: only the transposed down matrix */
        for (int t = 0; t < n; t++)
            pi_down_by_rows(c, &L->ffn_down_t, c->gate + (size_t)t * n_ff, n_ff, c->delta + (size_t)t * d);
    }
    c->stats.ffn_rows_done += (int64_t)n * n_ff;
    c->step_bytes += (int64_t)n * (int64_t)pi_dense_ffn_bytes(L);
}

/* the predictors pick this step's neurons: sparse on, a layer with predictors, no capture */
static int use_sparse(const pi_context *c, int il, int n) {
    const pi_layer *L = &c->model->layers[il];
    if (!L->fc1.data || !L->ffn_down_t.data || c->capture_act) return 0;
    if (c->adapter && c->adapter->ffn_adapted[il]) return 0; /* the predictors know the base model only */
    return c->params.sparse == PI_SPARSE_ALL || (c->params.sparse == PI_SPARSE_DECODE && n == 1);
}

/* ---- a layer's two blocks ---- */

/* x += down(act(gate(xn), up(xn))) with xn the FFN's normed input, over the predicted neurons
 * when sparse (context.h), or over the routed experts of an MoE layer (ffn_moe.h; one token with
 * a budget: the expert split, ffn_moe_split.h) */
int pi_ffn_block(pi_context *c, int il, int n) {
    const pi_layer *L = &c->model->layers[il];
    const int d = c->model->info.n_embd;
    pi_norm(c, c->x, L->ffn_norm, L->ffn_norm_b, c->xn, n);
    if (c->capture_ffn_in) capture(c, c->capture_ffn_in, c->xn, il, n, (size_t)d * sizeof(float), c->capture_max);
    const pi_act a = pi_quantize(&c->kern, c->xn, c->xq, n, d);
    if (use_sparse(c, il, n)) {
        for (int t = 0; t < n; t++) {
            const int rc = pi_ffn_sparse(c, il, t, pi_act_from(a, t));
            if (rc) return rc;
        }
    } else if (L->ffn_gate_inp.data && n == 1 && c->xsplit) { /* a batch reads each expert once instead */
        const int rc = pi_ffn_moe_split(c, il, a);
        if (rc) return rc;
    } else if (L->ffn_gate_inp.data) {
        pi_ffn_moe(c, L, n, a);
        if (c->capture_experts) /* the routing the MoE FFN left in moe_sel */
            capture(c, c->capture_experts, c->moe_sel, il, n, (size_t)c->model->n_expert_used * sizeof(int32_t),
                    c->capture_experts_max);
    } else {
        pi_ffn_dense(c, L, il, n, a);
    }
    pi_ffn_residual(c, il, c->x, c->delta, n);
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
        const size_t row = (size_t)(c->tok_pos[t] + c->model->position_offset);
        c->kern.dequant[w->type](w->data + row * w->row_bytes, c->xn, d);
        c->vec.axpy(1.0f, c->xn, c->x + (size_t)t * d, d);
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

    /* smallthinker routes from the layer's input: its logits wait in moe_probs for the FFN */
    if (m->router_on_input) pi_moe_logits(c, L, n, pi_quantize(&c->kern, c->x, c->xq, n, d));
    pi_norm(c, c->x, L->attn_norm, L->attn_norm_b, c->xn, n);
    pi_act a = pi_quantize(&c->kern, c->xn, c->xq, n, d);
    const pi_mm_target qkv[3] = { { &L->attn_q, c->q }, { &L->attn_k, c->k }, { &L->attn_v, c->v } };
    pi_matmul(c, a, n, qkv, 3);
    pi_add_bias(c->q, L->attn_q_b, n, q_dim);
    pi_add_bias(c->k, L->attn_k_b, n, kv_dim);
    pi_add_bias(c->v, L->attn_v_b, n, kv_dim);
    /* parallel block: the FFN reads the layer's input as well and adds to x; attention needs
     * only q, k, v from here on */
    if (m->parallel && (rc = pi_ffn_block(c, il, n))) return rc;
    if (L->attn_q_norm) pi_rmsnorm(c, c->q, L->attn_q_norm, c->q, n * h->n_head, hd); /* per head */
    if (L->attn_k_norm) pi_rmsnorm(c, c->k, L->attn_k_norm, c->k, n * h->n_head_kv, hd);
    if (!L->no_rope) {
        pi_rope(c, c->q, h->n_head, n, L->rope_local);
        pi_rope(c, c->k, h->n_head_kv, n, L->rope_local);
    }
    pi_kv_store(c, il, n);
    pi_kv_prepare_q(c, n);

    pi_attention(c, il, n, c->xn);

    a = pi_quantize(&c->kern, c->xn, c->xq, n, q_dim);
    const pi_mm_target o = { &L->attn_output, c->delta };
    pi_matmul(c, a, n, &o, 1);
    pi_add_bias(c->delta, L->attn_output_b, n, d);
    if (L->post_attn_norm) pi_rmsnorm(c, c->delta, L->post_attn_norm, c->delta, n, d);
    c->vec.axpy(1.0f, c->delta, c->x, n * d); /* residual */
    return PI_OK;
}

/* logits of the step's tokens [out.first, n) */
int pi_logits_block(pi_context *c, int n, pi_outputs out) {
    const pi_model *m = c->model;
    const int d = m->info.n_embd, n_out = n - out.first;
    const float *normed = c->out_x;
    if (c->embd) normed = c->embd + (size_t)c->tok_pos[out.first] * d; /* the embeddings are these rows */
    else pi_norm(c, c->x + (size_t)out.first * d, m->output_norm, m->output_norm_b, c->out_x, n_out);
    pi_act a = pi_quantize(&c->kern, normed, c->out_q, n_out, d);
    const pi_mm_target target = { &m->output, out.rows };
    pi_matmul(c, a, n_out, &target, 1);
    pi_add_bias(out.rows, m->output_b, n_out, m->info.n_vocab);
    return PI_OK;
}

/* cap * tanh(logit / cap) over the rows the step wrote */
static void final_softcap(pi_context *c, int n, pi_outputs out) {
    const float cap = c->model->final_softcap;
    const size_t count = (size_t)(n - out.first) * (size_t)c->model->info.n_vocab;
    for (size_t i = 0; i < count; i++) out.rows[i] = cap * tanhf(out.rows[i] / cap);
}

/* ---- where each step runs (router.h moves the stream to it) ---- */

static int attention_step(pi_context *c, int il, int n) {
    c->step_bytes += (int64_t)n * (int64_t)pi_attention_bytes(&c->model->layers[il]);
    /* a device holds one sequence (pi_context_new): the step's positions are tok_pos[0].. */
    if (c->on_device && c->on_device[il].attention) return pi_device_attention(c, il, n, c->tok_pos[0]);
    const int rc = pi_x_to_host(c, n);
    return rc ? rc : pi_attention_block(c, il, n);
}

static int ffn_step(pi_context *c, int il, int n) {
    if (c->model->parallel) return PI_OK; /* it ran inside the attention step */
    if (c->on_device && c->on_device[il].ffn) return pi_device_ffn(c, il, n);
    /* the split with the stream on the device: it norms and merges there, the CPU takes the cold runs */
    if (c->x_on_device && c->hot_runs && use_sparse(c, il, n)) return pi_ffn_sparse_resident(c, il, n);
    if (c->x_on_device && c->xsplit && n == 1 && c->model->layers[il].ffn_gate_inp.data)
        return pi_ffn_moe_split_resident(c, il);
    const int rc = pi_x_to_host(c, n);
    return rc ? rc : pi_ffn_block(c, il, n);
}

static int logits_step(pi_context *c, int n, pi_outputs out) {
    c->step_bytes += (int64_t)(n - out.first) * (int64_t)pi_weight_bytes(&c->model->output);
    if (c->logits_on_device) return pi_device_logits(c, n, out);
    const int rc = pi_x_to_host(c, n);
    return rc ? rc : pi_logits_block(c, n, out);
}

/* the rows of the picked tokens moved to the front of x, in order (pick is ascending, so no
 * row is overwritten before it is moved): the logits then read tokens [0, n_pick) */
static pi_outputs gather_picked(pi_context *c, pi_outputs out) {
    const size_t d = (size_t)c->model->info.n_embd;
    for (int i = 0; i < out.n_pick; i++)
        if (out.pick[i] != i) memcpy(c->x + i * d, c->x + (size_t)out.pick[i] * d, d * sizeof(float));
    return (pi_outputs){ 0, out.rows, NULL, 0 };
}

/* ---- the forward pass ---- */

void pi_step_positions(pi_context *c) {
    for (int i = 0; i < c->n_segs; i++) {
        const pi_segment *s = &c->segs[i];
        for (int t = 0; t < s->n; t++) {
            c->tok_pos[s->first + t] = s->pos0 + t;
            c->tok_row0[s->first + t] = (int32_t)((uint32_t)s->seq * c->seq_ctx);
        }
    }
}

void pi_one_segment(pi_context *c, int n, int pos0) {
    c->segs[0] = (pi_segment){ 0, n, 0, pos0 };
    c->n_segs = 1;
}

/* The FFN rows a dense step computes for a token: each layer's n_ff, or an MoE layer's routed
 * experts' rows (what ffn_rows_done counts there) */
static int64_t dense_ffn_rows(const pi_model *m) {
    int64_t rows = 0;
    for (int il = 0; il < m->info.n_layer; il++)
        rows += m->layers[il].ffn_gate_inp.data ? (int64_t)m->n_expert_used * m->n_ff_exp : m->info.n_ff;
    return rows;
}

int pi_forward(pi_context *c, const int32_t *tokens, int n, pi_outputs out) {
    const pi_model *m = c->model;
    const pi_model_info *h = &m->info;
    const int d = h->n_embd;
    int rc;

    /* x[t] = token_embd[tokens[t]], on the host */
    pi_token_rows(c, tokens, n);
    c->x_on_device = 0;
    c->step_bytes = (int64_t)n * (int64_t)m->token_embd.row_bytes;
    const int64_t rows_before = c->stats.ffn_rows_done;
    if (c->adapter) pi_lora_embed(c, tokens, n);
    if (m->embd_scale != 1.0f)
        for (size_t i = 0; i < (size_t)n * d; i++) c->x[i] *= m->embd_scale;
    pi_step_positions(c);
    if (m->position_embd.data) pi_add_positions(c, n);
    pi_rope_table(c, n);

    /* each layer's attention and FFN, where the context placed them */
    for (int il = 0; il < h->n_layer; il++)
        if ((rc = attention_step(c, il, n)) || (rc = ffn_step(c, il, n))) return rc;

    /* embeddings: every position's final normed hidden state (one sequence) */
    if (c->embd) {
        if ((rc = pi_x_to_host(c, n))) return rc;
        pi_norm(c, c->x, m->output_norm, m->output_norm_b, c->embd + (size_t)c->tok_pos[0] * d, n);
    }
    int n_out = n; /* the tokens the logits step sees */
    if (out.pick) {
        if ((rc = pi_x_to_host(c, n))) return rc;
        n_out = out.n_pick;
        out = gather_picked(c, out);
    }
    if (out.first < n_out) {
        if ((rc = logits_step(c, n_out, out))) return rc;
        if (m->final_softcap > 0.0f) final_softcap(c, n_out, out);
    }
    for (int i = 0; i < c->n_segs; i++) c->seq_len[c->segs[i].seq] = c->segs[i].pos0 + c->segs[i].n;
    c->stats.tokens += n;
    const int64_t rows_dense = dense_ffn_rows(m);
    c->stats.ffn_rows_dense += (int64_t)n * rows_dense;
    if (n == 1) { /* a generated token: what the sparse ceiling is measured on */
        c->stats.decode_steps++;
        c->stats.decode_ffn_rows_dense += rows_dense;
        c->stats.decode_ffn_rows_done += c->stats.ffn_rows_done - rows_before;
        c->stats.decode_weight_bytes += c->step_bytes;
    }
    return PI_OK;
}
