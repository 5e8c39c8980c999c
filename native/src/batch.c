/* batch.c - many sequences in one context (powerinfer.h's pi_batch): a batch's checks, its steps of
 * up to n_batch tokens, and the per-sequence cache operations. */
#include <string.h>

#include "context.h"
#include "forward.h"
#include "status.h"

static int bad_seq(const pi_context *c, int32_t seq, const char *what) {
    return pi_set_error(PI_ERR_ARG, "%s: sequence %d is outside [0, %d)", what, seq, c->kv.n_seq);
}

/* Everything pi_decode_batch needs of its arguments, before anything changes. A run is a
 * sequence's tokens, next to each other in the batch at consecutive positions. */
static int check_batch(const pi_context *c, const pi_batch *b) {
    if (!b || b->n_tokens < 0 || (b->n_tokens > 0 && (!b->token || !b->pos || !b->seq || !b->logits)))
        return pi_set_error(PI_ERR_ARG, "pi_decode_batch: NULL argument or a negative n_tokens");
    if (!c->model->info.causal || c->params.logits_all || c->s.embd || c->cap.ffn_in || c->cap.experts)
        return pi_set_error(PI_ERR_UNSUPPORTED, "pi_decode_batch: an encoder, logits_all, embeddings or a profiling "
                            "capture hold one sequence by position: use pi_decode");
    if (pi_check_tokens(c, b->token, b->n_tokens)) return PI_ERR_ARG;
    uint8_t seen[PI_MAX_SEQ] = { 0 };
    int32_t n_logits = 0;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        const int32_t seq = b->seq[i], pos = b->pos[i];
        if (seq < 0 || seq >= c->kv.n_seq) return bad_seq(c, seq, "pi_decode_batch");
        const int starts = i == 0 || b->seq[i - 1] != seq;
        if (starts && seen[seq])
            return pi_set_error(PI_ERR_ARG, "pi_decode_batch: the tokens of sequence %d are not next to each other "
                                "(index %d)", seq, i);
        seen[seq] = 1;
        if (starts ? pos < 0 || pos > c->kv.seq_len[seq] : pos != b->pos[i - 1] + 1)
            return pi_set_error(PI_ERR_ARG, "pi_decode_batch: position %d of sequence %d at index %d does not follow "
                                "its %s (%d cached)", pos, seq, i, starts ? "cache" : "previous token", c->kv.seq_len[seq]);
        if ((uint32_t)pos >= c->kv.seq_ctx)
            return pi_set_error(PI_ERR_CONTEXT, "Requested tokens (%d) exceed context window of %u", pos + 1,
                                c->kv.seq_ctx);
        n_logits += b->logits[i] != 0;
    }
    if (n_logits > c->s.logits_rows)
        return pi_set_error(PI_ERR_ARG, "pi_decode_batch: %d tokens want logits, and the context keeps %d rows "
                            "(n_logits)", n_logits, c->s.logits_rows);
    return PI_OK;
}

/* the segments and picked tokens of the batch's tokens [done, done + n) */
static pi_outputs chunk_step(pi_context *c, const pi_batch *b, int32_t done, int n, float *rows) {
    c->s.n_segs = 0;
    int n_pick = 0;
    for (int t = 0; t < n; t++) {
        const int32_t i = done + t;
        if (t == 0 || b->seq[i] != b->seq[i - 1]) c->s.segs[c->s.n_segs++] = (pi_segment){ t, 0, b->seq[i], b->pos[i] };
        c->s.segs[c->s.n_segs - 1].n++;
        if (b->logits[i]) c->s.pick[n_pick++] = t;
    }
    return (pi_outputs){ n_pick ? 0 : n, n_pick ? rows : NULL, n_pick ? c->s.pick : NULL, n_pick };
}

PI_API int pi_decode_batch(pi_context *c, const pi_batch *b) {
    if (!c) return pi_set_error(PI_ERR_ARG, "pi_decode_batch: NULL context");
    int rc = check_batch(c, b);
    if (rc) return rc;
    for (int32_t i = 0; i < b->n_tokens; i++) /* each run's first position: the cache from there is dropped */
        if (i == 0 || b->seq[i] != b->seq[i - 1]) c->kv.seq_len[b->seq[i]] = b->pos[i];
    float *rows = c->s.logits;
    for (int32_t done = 0; done < b->n_tokens;) {
        const int n = b->n_tokens - done < (int32_t)c->n_batch ? b->n_tokens - done : (int32_t)c->n_batch;
        const pi_outputs out = chunk_step(c, b, done, n, rows);
        if ((rc = pi_forward(c, b->token + done, n, out))) return rc;
        rows += (size_t)out.n_pick * (size_t)c->model->info.n_vocab;
        done += n;
    }
    return PI_OK;
}

PI_API uint32_t pi_context_seq_ctx(const pi_context *c) { return c ? c->kv.seq_ctx : 0; }

PI_API int32_t pi_seq_len(const pi_context *c, int32_t seq) {
    return c && seq >= 0 && seq < c->kv.n_seq ? c->kv.seq_len[seq] : -1;
}

PI_API int pi_seq_clear(pi_context *c, int32_t seq) {
    if (!c) return pi_set_error(PI_ERR_ARG, "pi_seq_clear: NULL context");
    if (seq == -1) {
        memset(c->kv.seq_len, 0, (size_t)c->kv.n_seq * sizeof(int32_t));
        return PI_OK;
    }
    if (seq < 0 || seq >= c->kv.n_seq) return bad_seq(c, seq, "pi_seq_clear");
    c->kv.seq_len[seq] = 0;
    return PI_OK;
}

PI_API int pi_seq_truncate(pi_context *c, int32_t seq, int32_t pos) {
    if (!c) return pi_set_error(PI_ERR_ARG, "pi_seq_truncate: NULL context");
    if (seq < 0 || seq >= c->kv.n_seq) return bad_seq(c, seq, "pi_seq_truncate");
    if (pos < 0) return pi_set_error(PI_ERR_ARG, "pi_seq_truncate: position %d is negative", pos);
    if (pos < c->kv.seq_len[seq]) c->kv.seq_len[seq] = pos;
    return PI_OK;
}

PI_API int pi_seq_copy_prefix(pi_context *c, int32_t src, int32_t dst, int32_t n) {
    if (!c) return pi_set_error(PI_ERR_ARG, "pi_seq_copy_prefix: NULL context");
    if (src < 0 || src >= c->kv.n_seq) return bad_seq(c, src, "pi_seq_copy_prefix");
    if (dst < 0 || dst >= c->kv.n_seq) return bad_seq(c, dst, "pi_seq_copy_prefix");
    if (n < 0 || n > c->kv.seq_len[src])
        return pi_set_error(PI_ERR_ARG, "pi_seq_copy_prefix: %d positions of sequence %d, which holds %d", n, src,
                            c->kv.seq_len[src]);
    if (src != dst)
        for (int il = 0; il < c->model->info.n_layer; il++) {
            const size_t from = (size_t)il * c->n_ctx + (size_t)src * c->kv.seq_ctx;
            const size_t to = (size_t)il * c->n_ctx + (size_t)dst * c->kv.seq_ctx;
            memcpy(c->kv.k_cache + to * c->kv.k_row, c->kv.k_cache + from * c->kv.k_row, (size_t)n * c->kv.k_row);
            memcpy(c->kv.v_cache + to * c->kv.v_row, c->kv.v_cache + from * c->kv.v_row, (size_t)n * c->kv.v_row);
        }
    c->kv.seq_len[dst] = n;
    return PI_OK;
}
