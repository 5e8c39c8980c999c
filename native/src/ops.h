/* ops.h - the operations the forward pass is made of, on the context's scratch and threads:
 * matmul and attention split across the thread pool, and the O(d) steps between them. */
#ifndef PI_OPS_H
#define PI_OPS_H
#include "context.h"

/* One weight a matmul reads and where its outputs go: every row, or only the n_rows listed in
 * rows (a row-major weight's: the grouped kernels take no list). */
typedef struct {
    const pi_weight *w;
    float *Y;             /* [nt][w->n_out], or [nt][n_rows] with rows */
    const int32_t *rows;  /* NULL: every row */
    int n_rows;
} pi_mm_target;

/* The matmul kernel of a weight's type and layout (row-major, or in groups of rows). */
static inline pi_matmul_fn pi_weight_matmul(const pi_kernels *k, const pi_weight *w) {
    return w->grouped ? k->matmul_grouped[w->type] : k->matmul[w->type];
}

/* Y_i[t] = W_i x[t] for up to three weights that read the same input, on the thread pool, plus
 * the context's LoRA term where its adapter adapts W_i. */
void pi_matmul(pi_context *c, pi_act x, int nt, const pi_mm_target *targets, int n_targets);
/* c->s.x[t] = the token embedding's row tokens[t], for t < n (from its groups where it is grouped) */
void pi_token_rows(const pi_context *c, const int32_t *tokens, int n);
/* x[t] += the adapter's embedding term for tokens[t], where it adapts token_embd */
void pi_lora_embed(pi_context *c, const int32_t *tokens, int n);
/* out[t][head] = softmax(q k^T / sqrt(hd)) v over layer il's cached positions 0..tok_pos[t] of
 * each token's sequence (c->s.q, the caches), on the thread pool. */
void pi_attention(pi_context *c, int il, int n, float *out);
/* y = sum_j a[j] * row j of a weight stored one neuron per row (ffn_down_t), on the thread pool;
 * each thread a fixed share, so the sum is the same from run to run. */
void pi_down_by_rows(pi_context *c, const pi_weight *w, const float *a, int n, float *y);

/* y[t] += b for n rows of dim; nothing when b is NULL */
void pi_add_bias(float *y, const float *b, int n, int dim);
void pi_rmsnorm(const pi_context *c, const float *x, const float *w, float *out, int n, int d);
/* a block's input norm over n rows of n_embd: RMSNorm, or LayerNorm, then its bias */
void pi_norm(const pi_context *c, const float *x, const float *w, const float *b, float *out, int n);
/* x in every form the kernels take: float, and 8-bit blocks where d allows and store has room */
pi_act pi_quantize(const pi_kernels *k, const float *x, pi_act_store store, int n, int d);
/* g = act(g, u) over count values (g = act(g) for an FFN without a gate), the model's activation */
void pi_activate(const pi_context *c, float *g, const float *u, size_t count);
/* the step's cos/sin table (at tok_pos), then rotation of n tokens of n_heads heads (local: the
 * second base) */
void pi_rope_table(pi_context *c, int n);
void pi_rope(const pi_context *c, float *x, int n_heads, int n, int local);

#endif
