/* context.h - the run state of one sequence: KV cache, scratch buffers, kernels, threads.
 * Everything is allocated once in pi_context_new; a decode step allocates nothing. */
#ifndef PI_CONTEXT_H
#define PI_CONTEXT_H
#include "kernels/kernels.h"
#include "model.h"
#include "threadpool.h"
#include "vec.h"

/* One layer's two steps for n tokens at pos0..: x += attention(x), x += FFN(x). */
typedef struct {
    int (*attention)(pi_context *c, int il, int n, int pos0);
    int (*ffn)(pi_context *c, int il, int n);
} pi_layer_ops;

struct pi_context {
    pi_model *model;            /* borrowed */
    pi_context_params params;
    uint32_t n_ctx, n_batch;
    int32_t n_past;             /* positions held in the KV cache */
    pi_kernels kern;
    pi_vec_ops vec;
    pi_threadpool *pool;

    /* KV cache in f16 (llama.cpp's default, and half the bytes), [n_layer][n_ctx][kv_dim] each */
    pi_fp16 *k_cache, *v_cache;

    /* scratch for a batch of up to n_batch tokens (B) */
    float *x;           /* [B][n_embd]   residual stream */
    float *xn;          /* [B][max_dim]  normed input of attention / FFN, then attention output */
    pi_act_store xq;    /* [B][max_dim/32] and [B][max_dim/256] quantized activations for the block formats
                         * (the Q8_K ones NULL without K-quant weights, as in out_q and pred_hq) */
    float *q;           /* [B][q_dim] */
    float *k, *v;       /* [B][kv_dim]   new keys/values before they enter the cache */
    float *gate, *up;   /* [B][n_ff]     gate is overwritten with the activation product */
    float *rope_cs;     /* [2][B][n_rot/2][2] cos, sin per token: global layers, then local ones */
    float *inv_freq;    /* [2][n_rot/2] */
    float *att;         /* [n_threads][n_ctx] attention scores, one row per thread */
    float *delta;       /* [B][n_embd]   output of attention or FFN before the residual add */
    float *out_x;       /* [B][n_embd]   normed final hidden states of the positions with logits */
    pi_act_store out_q; /* [B][n_embd/32], [B][n_embd/256] */
    float *logits;      /* [logits_rows][n_vocab] */
    float *embd;        /* [n_ctx][n_embd] final normed hidden states, with params.embeddings, else NULL */
    int32_t logits_rows;

    /* sparse FFN, one token at a time (ffn_sparse.h); a run fills its own slices, by position */
    float *pred_h;      /* [n_threads + 1][rank_stride] predictor hidden layer of each thread and the device */
    pi_act_store pred_hq; /* [n_threads + 1][rank_stride/32], [n_threads + 1][rank_stride/256] */
    int32_t rank_stride;
    float *pred_out;    /* [n_ff]          predictor logits */
    int32_t *active;    /* [n_ff]          positions predicted to fire: a run's from its first slot on */
    int32_t *active_rows; /* [n_ff]        their weight rows on the side that computes the run */
    float *run_acc;     /* [n_runs][n_embd] each run's sum of down rows */
    int32_t *run_rows;  /* [n_runs]        neurons each run computed */
    float *down_acc;    /* [n_threads][n_embd] per-thread partial sums of a transposed dense down */

    /* the hot/cold split of vram_budget: runs [0, hot_runs[layer]) of each layer are its hot
     * neurons (placement.h), computed by the device, or by the CPU without one */
    struct pi_device *device;   /* NULL: all on the CPU */
    int32_t *hot_runs;          /* [n_layer], or NULL without a budget */
    int32_t *layout;            /* [n_layer][n_ff] the neuron at each position (ffn_sparse.h), or NULL */

    /* Where each layer's attention and FFN run, and the logits: the CPU's steps (forward.c) unless
     * offload.h put them on the device (layer offload, or the split's placed attention and
     * output), which holds them in `offload`. The residual stream's current copy is the device's
     * while x_on_device; each step brings it where it runs. */
    pi_layer_ops *ops;          /* [n_layer] */
    int (*logits_op)(pi_context *c, int n, int pos0, int logits_mode);
    struct pi_offload *offload;
    int32_t x_on_device;

    /* profiling capture (caller's buffers, see pi_context_set_capture) */
    float *capture_ffn_in, *capture_act;
    int32_t capture_max, capture_base; /* capture_base: first position of the current pi_decode */
    pi_stats stats;
};

enum { PI_LOGITS_NONE = 0, PI_LOGITS_LAST = 1, PI_LOGITS_ALL = 2 };

/* Run the transformer on tokens[0..n) at positions ctx->n_past.. (n <= n_batch), appending
 * their keys and values to the cache and writing the logits that logits_mode asks for. */
int pi_forward(pi_context *ctx, const int32_t *tokens, int n, int logits_mode);
/* Where a step's logits go: from row pos0 on with PI_LOGITS_ALL, else row 0 (the last position's). */
static inline float *pi_logits_rows(const pi_context *c, int pos0, int logits_mode) {
    return c->logits + (logits_mode == PI_LOGITS_ALL ? (size_t)pos0 * c->model->info.n_vocab : 0);
}

/* Every layer's steps and the logits on the CPU: ops[] and logits_op as a context starts. */
void pi_forward_cpu_ops(pi_context *c);
/* The CPU's blocks on c->x as it stands (the CPU steps bring the stream home first; the host
 * stand-in device runs them on its own copy): x += attention(x), x += FFN(x), and the logits. */
int pi_attention_block(pi_context *c, int il, int n, int pos0);
int pi_ffn_block(pi_context *c, int il, int n);
int pi_logits_block(pi_context *c, int n, int pos0, int logits_mode);

#endif
