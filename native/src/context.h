/* context.h - the run state of one or more sequences: KV cache, scratch buffers, kernels, threads.
 * Everything is allocated once in pi_context_new; a decode step allocates nothing. */
#ifndef PI_CONTEXT_H
#define PI_CONTEXT_H
#include "device/device_state.h"
#include "ffn_moe_state.h"
#include "ffn_sparse_state.h"
#include "kernels/kernels.h"
#include "kv_format.h"
#include "lora_state.h"
#include "model.h"
#include "threadpool.h"
#include "vec.h"

/* the most sequences a context holds (n_seq_max) */
enum { PI_MAX_SEQ = 256 };

/* profiling capture (caller's buffers, see pi_context_set_capture), blocks.c writes them */
typedef struct pi_capture {
    float *ffn_in, *act;
    int32_t max, base;          /* base: first position of the current pi_decode */
    int32_t *experts, experts_max; /* pi_context_set_expert_capture */
} pi_capture;

/* scratch for a batch of up to n_batch tokens (B), and the step's logits and embeddings */
typedef struct pi_scratch {
    struct pi_segment *segs;    /* [B] the step's tokens by sequence, set before pi_forward */
    int n_segs;
    int32_t *tok_pos;   /* [B] each token's position in its sequence */
    int32_t *tok_row0;  /* [B] the cache row of its sequence's position 0 */
    int32_t *pick;      /* [B] a batch step's tokens with logits */
    float *x;           /* [B][n_embd]   residual stream */
    float *xn;          /* [B][max_dim]  normed input of attention / FFN, then attention output */
    pi_act_store xq;    /* [B][max_dim/32] and [B][max_dim/256] quantized activations for the block formats
                         * (the Q8_K ones NULL without K-quant weights, as in out_q and sparse.pred_hq) */
    float *q;           /* [B][q_dim] */
    float *k, *v;       /* [B][kv_dim]   new keys/values before they enter the cache */
    float *gate, *up;   /* [B][max(n_ff, n_ff_exp)] gate is overwritten with the activation product */
    float *rope_cs;     /* [2][B][n_rot/2][2] cos, sin per token: global layers, then local ones */
    float *inv_freq;    /* [2][n_rot/2] */
    float *att;         /* [n_threads][att_rows][n_ctx] attention scores, att_rows queries per thread */
    int32_t att_rows;   /* at most PI_ATT_ROWS, fewer where n_ctx is long (context.c) */
    int32_t *att_blocks; /* [B][2] first token and count of each block of an attention step */
    float *delta;       /* [B][n_embd]   output of attention or FFN before the residual add */
    float *out_x;       /* [B][n_embd]   normed final hidden states of the positions with logits */
    pi_act_store out_q; /* [B][n_embd/32], [B][n_embd/256] */
    float *logits;      /* [logits_rows][n_vocab] */
    float *embd;        /* [n_ctx][n_embd] final normed hidden states, with params.embeddings, else NULL */
    int32_t logits_rows;
} pi_scratch;

struct pi_context {
    pi_model *model;            /* borrowed */
    pi_context_params params;
    uint32_t n_ctx, n_batch;
    pi_kernels kern;
    pi_vec_ops vec;
    pi_threadpool *pool;

    pi_kv_cache kv;             /* its sequences and rows (kv_format.h) */

    pi_scratch s;               /* a step's scratch, logits and embeddings */

    pi_sparse_scratch sparse;   /* the sparse FFN's scratch and the hot/cold split (ffn_sparse_state.h) */
    pi_moe_scratch moe;         /* an MoE FFN's scratch and its expert split (ffn_moe_state.h) */

    pi_device_state dev;        /* the device and the steps it takes (device/device_state.h) */
    /* [n_layer][PI_STEP_KINDS] how each layer's FFN step runs (ffn_path.h), chosen once */
    struct pi_ffn_choice *ffn_choice;

    pi_lora_state lora;         /* a LoRA adapter and its scratch (lora_state.h) */

    pi_capture cap;             /* profiling capture, the caller's buffers */
    pi_stats stats;
    int64_t step_bytes;         /* weight bytes read by the current pi_forward step */
};

/* Tokens [first, first + n) of a step: positions pos0 .. pos0 + n - 1 of sequence seq. */
typedef struct pi_segment {
    int32_t first, n, seq, pos0;
} pi_segment;

/* Which of a step's n tokens get logits, and where: tokens [first, n) into rows[0 ..), one row
 * of n_vocab each; first == n (rows NULL) when none of them does. With pick, the n_pick tokens
 * it lists instead (ascending), as a batch's flags choose. */
typedef struct {
    int first;
    float *rows;
    const int32_t *pick;
    int n_pick;
} pi_outputs;

/* The scratch buffers of a context of n_ctx positions, n_batch tokens a step and n_threads
 * threads, sized and checked against the machine's memory first (context.c). */
int pi_context_alloc(pi_context *c);
void pi_context_release(pi_context *c);

/* PI_ERR_ARG naming the first of tokens[0..n) outside the model's vocabulary (pi_decode's and
 * pi_decode_batch's check), else PI_OK. */
int pi_check_tokens(const pi_context *c, const int32_t *tokens, int32_t n);

#endif
