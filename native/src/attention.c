/* attention.c - attention over the KV cache (ops.h's pi_attention), on the thread pool.
 *
 * An f16 cache is read in tiles: a work item is a block of a sequence's consecutive tokens times
 * the heads that share one KV head, and each key and value row it reads is converted once for all
 * of its queries (vec.h's tile ops). Each query's arithmetic is the one-token path's (the same dot
 * per key, two-pass softmax, values mixed in key order from zero), so a prompt's logits are its
 * tokens' one-token logits bit for bit. A quantized cache keeps one (token, head) pair an item. */
#include <math.h>
#include <stdatomic.h>

#include "kv_cache.h"
#include "ops.h"

/* softcap, then exp(x - max) in place over a query's n scores; returns one over their sum, taken
 * in double and rounded as ggml's soft_max does */
static float softmax(const pi_context *c, float *att, int n) {
    const float cap = c->model->attn_softcap;
    for (int p = 0; cap > 0.0f && p < n; p++) att[p] = cap * tanhf(att[p] / cap);
    return (float)(1.0 / c->vec.exp_sub_sum(att, c->vec.max(att, n), n));
}

/* the first position token t sees: a local layer only the last swa_window */
static int first_key(const pi_context *c, int local, int t) {
    const int n_kv = c->s.tok_pos[t] + 1;
    return local && n_kv > c->model->swa_window ? n_kv - c->model->swa_window : 0;
}

typedef struct {
    pi_context *c;
    int layer, local;
    float *out; /* [n][q_dim] */
    int n;
    int heads;  /* heads an item takes of its KV head's group */
    int n_items;
    atomic_int next;
} attn_task;

/* ---- a quantized cache: one (token, head) pair per work item ---- */

static void pair_worker(void *arg, int ith, int nth) {
    const attn_task *a = arg;
    const pi_context *c = a->c;
    const pi_model *m = c->model;
    const int n_head = m->info.n_head, hd = m->head_dim, group = n_head / m->info.n_head_kv;
    const float scale = 1.0f / sqrtf((float)hd);
    const uint8_t *k_layer = c->kv.k_cache + (size_t)a->layer * c->n_ctx * c->kv.k_row;
    const uint8_t *v_layer = c->kv.v_cache + (size_t)a->layer * c->n_ctx * c->kv.v_row;
    /* a head's slice of a row: whole blocks (pi_context_alloc checks head_dim) */
    const size_t k_head = pi_kv_row_bytes(c->params.type_k, (size_t)hd), v_head = pi_kv_row_bytes(c->params.type_v, (size_t)hd);
    float *att = c->s.att + (size_t)ith * c->s.att_rows * c->n_ctx;
    for (int item = ith; item < a->n * n_head; item += nth) {
        const int t = item / n_head, h = item % n_head;
        const int first = c->s.tok_row0[t] + first_key(c, a->local, t);
        const int n = c->s.tok_row0[t] + c->s.tok_pos[t] + 1 - first;
        pi_kv_scores(c, t, h, k_layer + (size_t)(h / group) * k_head + (size_t)first * c->kv.k_row, n, scale, att);
        pi_kv_mix(c, att, softmax(c, att, n), v_layer + (size_t)(h / group) * v_head + (size_t)first * c->kv.v_row, n,
                  a->out + ((size_t)t * n_head + h) * hd);
    }
}

/* ---- an f16 cache: tiles of queries sharing a KV head ---- */

/* Tokens [t0, t0 + nt) of one segment, heads [h0, h0 + nh) of one KV head's group: all scores
 * against the keys any of them sees (one row of att per query), each query's softmax over its
 * own keys, then the values mixed into each query's output. */
static void tile(const attn_task *a, int t0, int nt, int h0, int nh, float *att) {
    const pi_context *c = a->c;
    const pi_model *m = c->model;
    const int n_head = m->info.n_head, hd = m->head_dim, group = n_head / m->info.n_head_kv;
    const size_t stride = c->kv.k_row / sizeof(pi_fp16), head = (size_t)(h0 / group) * hd;
    /* the block's keys: from its first token's first key to its last token's position */
    const int first = first_key(c, a->local, t0), n = c->s.tok_pos[t0 + nt - 1] + 1 - first;
    const size_t row = (size_t)a->layer * c->n_ctx + (size_t)c->s.tok_row0[t0] + (size_t)first;
    const pi_fp16 *k = (const pi_fp16 *)(c->kv.k_cache + row * c->kv.k_row) + head;
    const pi_fp16 *v = (const pi_fp16 *)(c->kv.v_cache + row * c->kv.v_row) + head;
    const float *q[PI_ATT_ROWS];
    float *out[PI_ATT_ROWS];
    int lo[PI_ATT_ROWS], hi[PI_ATT_ROWS];
    for (int i = 0; i < nt; i++)
        for (int j = 0; j < nh; j++) {
            const int r = i * nh + j, t = t0 + i;
            const size_t at = ((size_t)t * n_head + (size_t)(h0 + j)) * hd;
            q[r] = c->s.q + at;
            out[r] = a->out + at;
            lo[r] = first_key(c, a->local, t) - first;
            hi[r] = c->s.tok_pos[t] - first;
        }
    const int nq = nt * nh;
    c->vec.scores_f16_tile(q, nq, k, stride, n, hd, 1.0f / sqrtf((float)hd), att, c->n_ctx);
    for (int r = 0; r < nq; r++) {
        float *e = att + (size_t)r * c->n_ctx + lo[r];
        const int ne = hi[r] - lo[r] + 1;
        c->vec.probs_f16(e, softmax(c, e, ne), ne); /* rounded to f16 as pi_kv_mix rounds them */
    }
    c->vec.mix_f16_tile(att, c->n_ctx, lo, hi, nq, v, stride, hd, out);
}

/* Items are claimed in att_blocks' order, the costliest (latest) blocks first, so the triangle's
 * short rows fill in the end of each thread's share. */
static void tile_worker(void *arg, int ith, int nth) {
    attn_task *a = arg;
    const pi_context *c = a->c;
    const int group = c->model->info.n_head / c->model->info.n_head_kv, splits = (group + a->heads - 1) / a->heads;
    const int per_block = c->model->info.n_head_kv * splits; /* items of one block */
    float *att = c->s.att + (size_t)ith * c->s.att_rows * c->n_ctx;
    for (;;) {
        const int item = atomic_fetch_add_explicit(&a->next, 1, memory_order_relaxed);
        if (item >= a->n_items) return;
        const int b = item / per_block, kv = item % per_block / splits, g0 = item % per_block % splits * a->heads;
        const int nh = group - g0 < a->heads ? group - g0 : a->heads;
        tile(a, c->s.att_blocks[2 * b], c->s.att_blocks[2 * b + 1], kv * group + g0, nh, att);
    }
    (void)nth;
}

/* the step's blocks of up to rows tokens into att_blocks: each segment's from its end, so the
 * longest come first; returns how many */
static int plan_blocks(pi_context *c, int rows) {
    int nb = 0;
    for (int i = 0; i < c->s.n_segs; i++)
        for (int end = c->s.segs[i].first + c->s.segs[i].n; end > c->s.segs[i].first; end -= rows, nb++) {
            const int t0 = end - rows > c->s.segs[i].first ? end - rows : c->s.segs[i].first;
            c->s.att_blocks[2 * nb] = t0;
            c->s.att_blocks[2 * nb + 1] = end - t0;
        }
    return nb;
}

void pi_attention(pi_context *c, int il, int n, float *out) {
    const pi_model_info *h = &c->model->info;
    const int nth = n > 1 ? c->params.n_threads_batch : c->params.n_threads, group = h->n_head / h->n_head_kv;
    attn_task a = { .c = c, .layer = il, .local = c->model->layers[il].local, .out = out, .n = n };
    if (c->params.type_k != PI_TYPE_F16 || c->params.type_v != PI_TYPE_F16) {
        pi_threadpool_run(c->pool, pair_worker, &a, nth);
        return;
    }
    /* a KV head's whole group an item, so its rows are read once for all its heads (decode at a
     * long context is bound by reading them), unless that leaves a thread without an item */
    a.heads = group < c->s.att_rows ? group : c->s.att_rows;
    int nb = plan_blocks(c, c->s.att_rows / a.heads);
    if (nb * h->n_head_kv < nth) {
        a.heads = 1;
        nb = plan_blocks(c, c->s.att_rows);
    }
    a.n_items = nb * h->n_head_kv * ((group + a.heads - 1) / a.heads);
    atomic_init(&a.next, 0);
    pi_threadpool_run(c->pool, tile_worker, &a, nth);
}
