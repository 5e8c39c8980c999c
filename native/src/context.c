/* context.c - a context's buffers (context.h): sized once, checked against the machine's memory
 * before anything is allocated, allocated once; a decode step allocates nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "context.h"
#include "kv_format.h"
#include "placement.h"
#include "status.h"

/* Sizes of every buffer, in floats (or blocks; kv_rows in rows of the KV cache), computed once so
 * the total can be checked first. */
typedef struct {
    size_t kv_rows, x, xn, xq, xk, q, k, gate, rope, inv_freq, att, out_x, out_q, out_k, logits, rank, rank_k, per_thread,
        ff, runs, run_acc, embd, moe_probs, moe_pairs, moe_first, moe_q, moe_k, moe_live, moe_weighted;
} buffer_sizes;

/* queries an attention work item holds scores for: their rows of n_ctx fit ATT_BYTES (about an L2
 * cache, which they stream through), at most PI_ATT_ROWS */
enum { ATT_BYTES = 1 << 20 };

static int att_rows(uint32_t n_ctx) {
    const size_t rows = ATT_BYTES / ((size_t)n_ctx * sizeof(float));
    return rows < 1 ? 1 : rows > PI_ATT_ROWS ? PI_ATT_ROWS : (int)rows;
}

static buffer_sizes plan(const pi_model *m, uint32_t n_ctx, uint32_t B, int n_threads, int logits_rows) {
    const pi_model_info *h = &m->info;
    size_t q_dim = (size_t)h->n_head * m->head_dim, kv_dim = (size_t)h->n_head_kv * m->head_dim;
    size_t max_dim = (size_t)h->n_embd;
    if (q_dim > max_dim) max_dim = q_dim;
    if ((size_t)h->n_ff > max_dim) max_dim = (size_t)h->n_ff;
    const size_t ff = (size_t)(h->n_ff > m->n_ff_exp ? h->n_ff : m->n_ff_exp);
    const size_t moe_dim = m->n_expert ? (size_t)(h->n_embd > m->n_ff_exp ? h->n_embd : m->n_ff_exp) : 0;
    buffer_sizes s = {
        .kv_rows = (size_t)h->n_layer * n_ctx,
        .x = (size_t)B * h->n_embd,
        .xn = (size_t)B * max_dim,
        .xq = (size_t)B * ((max_dim + QK - 1) / QK),
        .xk = m->kquant_weights ? (size_t)B * ((max_dim + QK_K - 1) / QK_K) : 0,
        .q = (size_t)B * q_dim,
        .k = (size_t)B * kv_dim,
        .gate = (size_t)B * ff,
        .rope = 2 * (size_t)B * (size_t)h->n_rot, /* global and local (sliding-window) layers */
        .inv_freq = (size_t)h->n_rot,
        .att = (size_t)n_threads * (size_t)att_rows(n_ctx) * n_ctx,
        .out_x = (size_t)B * h->n_embd,
        .out_q = (size_t)B * ((size_t)(h->n_embd + QK - 1) / QK),
        .out_k = m->kquant_weights ? (size_t)B * ((size_t)(h->n_embd + QK_K - 1) / QK_K) : 0,
        .logits = (size_t)logits_rows * h->n_vocab,
        .rank = (size_t)PI_HIDDEN_SLOTS * (size_t)(m->max_rank + QK),
        .per_thread = (size_t)n_threads * h->n_embd,
        .ff = (size_t)h->n_ff,
        .runs = (size_t)(h->n_ff + PI_FFN_RUN - 1) / PI_FFN_RUN,
        .moe_probs = (size_t)B * m->n_expert,
        .moe_pairs = (size_t)B * m->n_expert_used,
        .moe_weighted = (size_t)B * m->n_expert_used * h->n_embd,
        .moe_first = (size_t)m->n_expert + 1,
        .moe_live = (size_t)m->n_ff_exp,
        .moe_q = (size_t)B * ((moe_dim + QK - 1) / QK),
        .moe_k = m->kquant_weights ? (size_t)B * ((moe_dim + QK_K - 1) / QK_K) : 0,
    };
    s.run_acc = s.runs * (size_t)h->n_embd;
    s.rank_k = m->kquant_weights ? s.rank / QK_K + 1 : 0; /* the Q8_K forms only for K-quant weights */
    s.embd = 0;
    return s;
}

/* every buffer but the KV cache */
static double scratch_bytes(const buffer_sizes *s) {
    double floats = s->x + s->xn + s->q + 2.0 * s->k + 2.0 * s->gate + s->rope + s->inv_freq + s->att +
                    2.0 * s->out_x + s->logits + s->rank +
                    s->per_thread + 3.0 * s->ff + 2.0 * s->runs + s->run_acc + s->embd +
                    s->moe_probs + 4.0 * s->moe_pairs + s->moe_first + s->moe_live + (s->moe_probs ? 2.0 * s->x : 0.0) +
                    s->moe_weighted;
    const double k_blocks = (double)s->xk + s->out_k + s->rank_k + s->moe_k;
    return floats * sizeof(float) + ((double)s->xq + s->out_q + s->moe_q) * sizeof(block_q8x) + k_blocks * sizeof(block_q8k);
}

/* The KV cache's bytes with K and V rows of k_row and v_row bytes. */
static double kv_bytes(const buffer_sizes *s, size_t k_row, size_t v_row) { return (double)s->kv_rows * (double)(k_row + v_row); }

/* The types and the bytes of their rows; a quantized head's slice must be whole blocks. */
static int kv_types(pi_context *c) {
    const pi_model *m = c->model;
    const int32_t types[2] = { c->params.type_k, c->params.type_v };
    for (int i = 0; i < 2; i++) {
        if (!pi_kv_type_ok(types[i]))
            return pi_set_error(PI_ERR_ARG, "%s %d is not a KV cache type: f16 (%d), q8_0 (%d) or q4_0 (%d)",
                                i ? "type_v" : "type_k", types[i], PI_TYPE_F16, PI_TYPE_Q8_0, PI_TYPE_Q4_0);
        if (types[i] != PI_TYPE_F16 && m->head_dim % QK)
            return pi_set_error(PI_ERR_UNSUPPORTED, "a %s KV cache stores blocks of %d along each head, and this model's "
                                "head_dim is %d: use f16", pi_type_name((uint32_t)types[i]), QK, m->head_dim);
    }
    const size_t kv_dim = (size_t)m->info.n_head_kv * m->head_dim;
    c->kv.k_row = pi_kv_row_bytes(types[0], kv_dim);
    c->kv.v_row = pi_kv_row_bytes(types[1], kv_dim);
    return PI_OK;
}

/* The refusal of a context larger than the machine's memory, with what its KV cache needs in
 * f16, q8_0 and q4_0 (both caches in one type) and which of the smaller two would fit. */
static int refuse_memory(const pi_context *c, const buffer_sizes *s, double need, double phys) {
    const size_t kv_dim = (size_t)c->model->info.n_head_kv * c->model->head_dim;
    const int32_t smaller[2] = { PI_TYPE_Q8_0, PI_TYPE_Q4_0 };
    double in[2];
    char fits[64] = "";
    for (int i = 0; i < 2; i++) {
        in[i] = kv_bytes(s, pi_kv_row_bytes(smaller[i], kv_dim), pi_kv_row_bytes(smaller[i], kv_dim));
        if (scratch_bytes(s) + in[i] <= phys)
            snprintf(fits + strlen(fits), sizeof fits - strlen(fits), "%s%s", *fits ? " or " : "", pi_type_name((uint32_t)smaller[i]));
    }
    const double f16 = kv_bytes(s, pi_kv_row_bytes(PI_TYPE_F16, kv_dim), pi_kv_row_bytes(PI_TYPE_F16, kv_dim));
    return pi_set_error(PI_ERR_NOMEM,
                        "a context of n_ctx=%u needs %.1f MiB (KV cache %.1f MiB, K %s, V %s), more than the %.1f MiB of "
                        "RAM; its KV cache needs %.1f MiB in f16, %.1f MiB in q8_0, %.1f MiB in q4_0 (type_k = type_v): %s would fit",
                        c->n_ctx, need / 1048576.0, kv_bytes(s, c->kv.k_row, c->kv.v_row) / 1048576.0,
                        pi_type_name((uint32_t)c->params.type_k), pi_type_name((uint32_t)c->params.type_v),
                        phys / 1048576.0, f16 / 1048576.0, in[0] / 1048576.0, in[1] / 1048576.0,
                        *fits ? fits : "none of them");
}

int pi_context_alloc(pi_context *c) {
    const pi_model *m = c->model;
    const pi_model_info *h = &m->info;
    const int pool_size = c->params.n_threads > c->params.n_threads_batch ? c->params.n_threads : c->params.n_threads_batch;
    buffer_sizes s = plan(m, c->n_ctx, c->n_batch, pool_size, c->s.logits_rows);
    if (c->params.embeddings) s.embd = (size_t)c->n_ctx * h->n_embd;

    int rc = kv_types(c);
    if (rc) return rc;

    /* refuse before allocating: a KV cache larger than the machine's memory cannot work */
    const double need = scratch_bytes(&s) + kv_bytes(&s, c->kv.k_row, c->kv.v_row);
    const double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (phys > 0 && need > phys) return refuse_memory(c, &s, need, phys);
    c->kv.k_cache = calloc(s.kv_rows, c->kv.k_row);
    c->kv.v_cache = calloc(s.kv_rows, c->kv.v_row);
    c->s.x = malloc(s.x * sizeof(float));
    c->s.xn = malloc(s.xn * sizeof(float));
    c->s.xq.q = malloc(s.xq * sizeof(block_q8x));
    c->s.xq.k = s.xk ? malloc(s.xk * sizeof(block_q8k)) : NULL;
    c->s.q = malloc(s.q * sizeof(float));
    c->s.k = malloc(s.k * sizeof(float));
    c->s.v = malloc(s.k * sizeof(float));
    c->s.gate = malloc(s.gate * sizeof(float));
    c->s.up = malloc(s.gate * sizeof(float));
    c->s.rope_cs = malloc((s.rope + 1) * sizeof(float)); /* + 1: no rope (opt) has none */
    c->s.inv_freq = malloc((s.inv_freq + 1) * sizeof(float));
    c->s.att = malloc(s.att * sizeof(float));
    c->s.out_x = malloc(s.out_x * sizeof(float));
    c->s.delta = malloc(s.out_x * sizeof(float));
    c->s.out_q.q = malloc(s.out_q * sizeof(block_q8x));
    c->s.out_q.k = s.out_k ? malloc(s.out_k * sizeof(block_q8k)) : NULL;
    c->s.logits = calloc(s.logits, sizeof(float));
    c->sparse.pred_h = malloc(s.rank * sizeof(float));
    c->sparse.pred_hq.q = malloc((s.rank / QK + 1) * sizeof(block_q8x));
    c->sparse.pred_hq.k = s.rank_k ? malloc(s.rank_k * sizeof(block_q8k)) : NULL;
    c->sparse.rank_stride = m->max_rank + QK;
    c->sparse.pred_out = malloc(s.ff * sizeof(float));
    c->sparse.active = malloc(s.ff * sizeof(int32_t));
    c->sparse.active_rows = malloc(s.ff * sizeof(int32_t));
    c->sparse.run_acc = malloc(s.run_acc * sizeof(float));
    c->sparse.run_rows = calloc(s.runs, sizeof(int32_t));
    c->sparse.run_bytes = calloc(s.runs, sizeof(int64_t));
    c->sparse.ffn_first = calloc((size_t)h->n_layer, 1);
    c->sparse.ffn_tokens = calloc((size_t)h->n_layer, sizeof(int32_t));
    c->s.embd = s.embd ? calloc(s.embd, sizeof(float)) : NULL;
    c->sparse.down_acc = malloc(s.per_thread * sizeof(float));
    const size_t moe_x = s.moe_probs ? s.x : 0; /* + 1 below: a dense model's are empty */
    c->moe.probs = malloc((s.moe_probs + 1) * sizeof(float));
    c->moe.sel = malloc((s.moe_pairs + 1) * sizeof(int32_t));
    c->moe.sel_w = malloc((s.moe_pairs + 1) * sizeof(float));
    c->moe.first = malloc(s.moe_first * sizeof(int32_t));
    c->moe.tok = malloc((s.moe_pairs + 1) * sizeof(int32_t));
    c->moe.tok_pair = malloc((s.moe_pairs + 1) * sizeof(int32_t));
    c->moe.x = malloc((moe_x + 1) * sizeof(float));
    c->moe.out = malloc((moe_x + 1) * sizeof(float));
    c->moe.weighted = malloc((s.moe_weighted + 1) * sizeof(float));
    c->moe.live = malloc((s.moe_live + 1) * sizeof(int32_t));
    c->moe.q.q = malloc((s.moe_q + 1) * sizeof(block_q8x));
    c->moe.q.k = s.moe_k ? malloc(s.moe_k * sizeof(block_q8k)) : NULL;
    /* small: not in the memory check */
    c->kv.seq_len = calloc((size_t)c->kv.n_seq, sizeof(int32_t));
    c->s.segs = malloc(c->n_batch * sizeof(pi_segment));
    c->s.tok_pos = malloc(c->n_batch * sizeof(int32_t));
    c->s.tok_row0 = malloc(c->n_batch * sizeof(int32_t));
    c->s.pick = malloc(c->n_batch * sizeof(int32_t));
    c->s.att_blocks = malloc(2 * c->n_batch * sizeof(int32_t));
    c->s.att_rows = att_rows(c->n_ctx);
    if (!c->kv.seq_len || !c->kv.k_cache || !c->kv.v_cache ||
        !c->s.segs || !c->s.tok_pos || !c->s.tok_row0 || !c->s.pick || !c->s.att_blocks || !c->s.x || !c->s.xn ||
        !c->s.xq.q || (s.xk && !c->s.xq.k) || !c->s.q || !c->s.k || !c->s.v || !c->s.gate || !c->s.up ||
        !c->s.rope_cs || !c->s.inv_freq || !c->s.att || !c->s.out_x || !c->s.delta || !c->s.out_q.q ||
        (s.out_k && !c->s.out_q.k) || !c->s.logits || (s.embd && !c->s.embd) ||
        !c->sparse.pred_h || !c->sparse.pred_hq.q || (s.rank_k && !c->sparse.pred_hq.k) || !c->sparse.pred_out ||
        !c->sparse.active || !c->sparse.active_rows || !c->sparse.run_acc || !c->sparse.run_rows ||
        !c->sparse.run_bytes || !c->sparse.ffn_first || !c->sparse.ffn_tokens || !c->sparse.down_acc ||
        !c->moe.probs || !c->moe.sel || !c->moe.sel_w || !c->moe.first || !c->moe.tok || !c->moe.tok_pair ||
        !c->moe.weighted || !c->moe.x || !c->moe.out || !c->moe.live || !c->moe.q.q || (s.moe_k && !c->moe.q.k)) {
        return pi_set_error(PI_ERR_NOMEM, "no memory for a context of n_ctx=%u (%.1f MiB)", c->n_ctx, need / 1048576.0);
    }
    /* theta_i = pos * base^(-2i/n_rot) * freq_scale, divided by rope_freqs when the model has them */
    /* the local layers' rope (gemma3) has its own base and no scaling */
    for (int i = 0; i < h->n_rot / 2; i++) {
        double f = pow((double)h->rope_freq_base, -2.0 * i / h->n_rot) * h->rope_freq_scale;
        if (m->rope_freqs) f /= m->rope_freqs[i];
        c->s.inv_freq[i] = (float)f;
        c->s.inv_freq[h->n_rot / 2 + i] = m->rope_base_local > 0.0f ? (float)pow((double)m->rope_base_local, -2.0 * i / h->n_rot) : (float)f;
    }
    return PI_OK;
}

void pi_context_release(pi_context *c) {
    free(c->kv.k_cache); free(c->kv.v_cache); free(c->kv.seq_len);
    free(c->s.x); free(c->s.xn); free(c->s.xq.q); free(c->s.xq.k); free(c->s.q); free(c->s.k); free(c->s.v);
    free(c->s.gate); free(c->s.up); free(c->s.rope_cs); free(c->s.inv_freq); free(c->s.att); free(c->s.out_x);
    free(c->s.delta); free(c->s.out_q.q); free(c->s.out_q.k); free(c->s.logits); free(c->s.embd); free(c->s.segs);
    free(c->s.tok_pos); free(c->s.tok_row0); free(c->s.pick); free(c->s.att_blocks);
    free(c->sparse.pred_h); free(c->sparse.pred_hq.q); free(c->sparse.pred_hq.k); free(c->sparse.pred_out);
    free(c->sparse.active); free(c->sparse.active_rows); free(c->sparse.run_acc); free(c->sparse.run_rows);
    free(c->sparse.run_bytes); free(c->sparse.ffn_first); free(c->sparse.ffn_tokens); free(c->sparse.down_acc);
    free(c->moe.probs); free(c->moe.sel); free(c->moe.sel_w); free(c->moe.first); free(c->moe.tok);
    free(c->moe.tok_pair); free(c->moe.weighted); free(c->moe.x); free(c->moe.out); free(c->moe.live);
    free(c->moe.q.q); free(c->moe.q.k);
}
