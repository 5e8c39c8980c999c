/* forward.c - the transformer forward pass for a batch of tokens, read top to bottom in pi_forward.
 *
 * Shapes: B tokens in this step, d = n_embd, hd = head_dim, q_dim = n_head*hd, kv_dim = n_head_kv*hd.
 * The operations are ops.h's; this file says in which order they run. */
#include <math.h>
#include <string.h>

#include "blocks.h"
#include "device/router.h"
#include "ffn_moe_split.h"
#include "ffn_path.h"
#include "ffn_sparse.h"
#include "forward.h"
#include "ops.h"
#include "status.h"
#include "token_bytes.h"

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
    if (c->dev.on_device && c->dev.on_device[il].attention) return pi_device_attention(c, il, n, c->s.tok_pos[0]);
    const int rc = pi_x_to_host(c, n);
    return rc ? rc : pi_attention_block(c, il, n);
}

/* the layer's path, chosen once (ffn_path.h) */
static int ffn_step(pi_context *c, int il, int n) {
    const pi_ffn_path path = (pi_ffn_path)pi_ffn_choice_of(c, il, n).step;
    int rc;
    switch (path) {
    case PI_FFN_IN_ATTENTION: return PI_OK; /* it ran inside the attention step */
    case PI_FFN_DEVICE: return pi_device_ffn(c, il, n);
    case PI_FFN_SPARSE_RESIDENT: return pi_ffn_sparse_resident(c, il, n);
    case PI_FFN_MOE_SPLIT_RESIDENT: return pi_ffn_moe_split_resident(c, il);
    default: /* the CPU's block: dense, sparse, MoE or the MoE split */
        rc = pi_x_to_host(c, n);
        return rc ? rc : pi_ffn_block(c, il, n, path);
    }
}

static int logits_step(pi_context *c, int n, pi_outputs out) {
    c->step_bytes += (int64_t)(n - out.first) * (int64_t)pi_weight_bytes(&c->model->output);
    if (c->dev.logits_on_device) return pi_device_logits(c, n, out);
    const int rc = pi_x_to_host(c, n);
    return rc ? rc : pi_logits_block(c, n, out);
}

/* the rows of the picked tokens moved to the front of x, in order (pick is ascending, so no
 * row is overwritten before it is moved): the logits then read tokens [0, n_pick) */
static pi_outputs gather_picked(pi_context *c, pi_outputs out) {
    const size_t d = (size_t)c->model->info.n_embd;
    for (int i = 0; i < out.n_pick; i++)
        if (out.pick[i] != i) memcpy(c->s.x + i * d, c->s.x + (size_t)out.pick[i] * d, d * sizeof(float));
    return (pi_outputs){ 0, out.rows, NULL, 0 };
}

/* ---- the forward pass ---- */

void pi_step_positions(pi_context *c) {
    for (int i = 0; i < c->s.n_segs; i++) {
        const pi_segment *s = &c->s.segs[i];
        for (int t = 0; t < s->n; t++) {
            c->s.tok_pos[s->first + t] = s->pos0 + t;
            c->s.tok_row0[s->first + t] = (int32_t)((uint32_t)s->seq * c->kv.seq_ctx);
        }
    }
}

void pi_one_segment(pi_context *c, int n, int pos0) {
    c->s.segs[0] = (pi_segment){ 0, n, 0, pos0 };
    c->s.n_segs = 1;
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
    c->dev.x_on_device = 0;
    c->step_bytes = (int64_t)n * (int64_t)m->token_embd.row_bytes;
    const int64_t rows_before = c->stats.ffn_rows_done;
    if (c->lora.adapter) pi_lora_embed(c, tokens, n);
    if (m->embd_scale != 1.0f)
        for (size_t i = 0; i < (size_t)n * d; i++) c->s.x[i] *= m->embd_scale;
    pi_step_positions(c);
    if (m->position_embd.data) pi_add_positions(c, n);
    pi_rope_table(c, n);

    /* each layer's attention and FFN, where the context placed them */
    for (int il = 0; il < h->n_layer; il++)
        if ((rc = attention_step(c, il, n)) || (rc = ffn_step(c, il, n))) return rc;

    /* embeddings: every position's final normed hidden state (one sequence) */
    if (c->s.embd) {
        if ((rc = pi_x_to_host(c, n))) return rc;
        pi_norm(c, c->s.x, m->output_norm, m->output_norm_b, c->s.embd + (size_t)c->s.tok_pos[0] * d, n);
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
    for (int i = 0; i < c->s.n_segs; i++) c->kv.seq_len[c->s.segs[i].seq] = c->s.segs[i].pos0 + c->s.segs[i].n;
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
