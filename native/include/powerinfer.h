/* powerinfer.h - the whole boundary between Python (cffi reads this file) and the native core.
 *
 * Conventions:
 *  - Every fallible call returns an int status (PI_OK == 0). On failure, pi_last_error()
 *    gives a message for the calling thread, valid until its next failing call.
 *  - Objects are opaque handles. Whoever gets one from a _new or _load call owns it and frees it with
 *    the matching *_free, which accepts NULL. A context borrows its model: free contexts first.
 *  - Pointers returned by getters are borrowed and live as long as the object they came from.
 *  - Nothing here prints, exits or aborts; input from files is checked before it is used.
 *
 * cffi reads the text between the CDEF markers, so it holds plain C declarations only. */
#ifndef POWERINFER_H
#define POWERINFER_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
#if defined(_WIN32)
#define PI_API __declspec(dllexport)
#else
#define PI_API __attribute__((visibility("default")))
#endif

/* CDEF-BEGIN */
enum {
    PI_OK = 0,
    PI_ERR_IO = 1,          /* cannot open, map or read a file */
    PI_ERR_FORMAT = 2,      /* the file is not a valid GGUF, or is truncated or inconsistent */
    PI_ERR_UNSUPPORTED = 3, /* a valid file using a type or architecture we do not run */
    PI_ERR_NOMEM = 4,       /* an allocation failed */
    PI_ERR_ARG = 5,         /* a bad argument from the caller */
    PI_ERR_CONTEXT = 6      /* the tokens do not fit into the context */
};

PI_API const char *pi_status_str(int status);
PI_API const char *pi_last_error(void);

/* ---- model: a memory-mapped GGUF file, its metadata and its weights ---- */
typedef struct pi_model pi_model;

typedef struct {
    int vocab_only; /* parse metadata only; no weights are checked or bound */
    int ffn_act;    /* PI_ACT_* to override the architecture's FFN activation; -1 keeps it */
    int repack;     /* 1 (the default): the dense matmuls' Q4_0 and K-quant weights are
                     * rearranged at load into groups of 16 rows (kernels/row_groups.c), in place in the
                     * private mapping (the file is never written; a device's upload puts the rows back
                     * in order); 0 keeps the file's row-major layout */
    int moe_skip_rows; /* ReGLU experts (smallthinker): 1 skips a one-token expert's dead neurons' up
                        * rows and down blocks, 0 computes every row; -1 (the default) follows the
                        * file's BOOL powerinfer.moe_skip_rows (which the converter measured), 1
                        * where it is absent. Ignored by models without ReGLU experts */
} pi_model_params;

PI_API pi_model_params pi_model_default_params(void);
PI_API int pi_model_load(const char *path, pi_model_params params, pi_model **out);
PI_API void pi_model_free(pi_model *model);

typedef struct {
    int32_t n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, n_ff, n_rot;
    float norm_eps, rope_freq_base, rope_freq_scale;
    int32_t ffn_act;  /* PI_ACT_* */
    int32_t tied_output;
    int32_t causal;   /* 0: an encoder (bert, nomic-bert): embeddings only, no logits; pi_decode
                       * takes its whole input at once (n_tokens <= n_batch) from position 0 */
    int32_t n_expert, n_expert_used, n_ff_exp; /* an MoE FFN: experts per layer, routed per token, neurons
                                                * each; 0 in a dense model */
    int32_t moe_skip_rows; /* 1: ReGLU experts skip their dead neurons' rows (pi_model_params.moe_skip_rows) */
} pi_model_info;

/* *_GLU: act(gate) * up (or act(gate) * act(up)); RELU and GELU: act(up), FFNs without a gate */
enum { PI_ACT_SILU_GLU = 0, PI_ACT_RELU_GLU = 1, PI_ACT_RELU_RELU_GLU = 2, PI_ACT_GELU_GLU = 3,
       PI_ACT_RELU = 4, PI_ACT_GELU = 5 };

PI_API int pi_model_get_info(const pi_model *model, pi_model_info *out);
PI_API const char *pi_model_describe(const pi_model *model); /* multi-line text of every layer's tensors */

/* Metadata, in file order. Values of scalar keys are returned converted; arrays expose their
 * element type, length and (for numeric arrays) a pointer to their little-endian data. */
enum {
    PI_META_UINT8 = 0, PI_META_INT8 = 1, PI_META_UINT16 = 2, PI_META_INT16 = 3,
    PI_META_UINT32 = 4, PI_META_INT32 = 5, PI_META_FLOAT32 = 6, PI_META_BOOL = 7,
    PI_META_STRING = 8, PI_META_ARRAY = 9, PI_META_UINT64 = 10, PI_META_INT64 = 11,
    PI_META_FLOAT64 = 12
};

typedef struct {
    const char *key;       /* not NUL-terminated: key_len bytes */
    uint64_t key_len;
    int32_t type;          /* PI_META_* */
    int64_t i;             /* integer and bool values */
    uint64_t u;            /* unsigned values (also set for non-negative signed ones) */
    double f;              /* float values */
    const char *str;       /* string value (str_len bytes, not NUL-terminated) */
    uint64_t str_len;
    int32_t arr_type;      /* element type of an array */
    uint64_t arr_len;
    const void *arr_data;  /* numeric arrays: arr_len packed elements; NULL for string arrays */
} pi_meta;

PI_API int64_t pi_model_meta_count(const pi_model *model);
PI_API int pi_model_meta_get(const pi_model *model, int64_t index, pi_meta *out);
/* Element j of a string array at metadata index `index`. */
PI_API int pi_model_meta_array_str(const pi_model *model, int64_t index, uint64_t j,
                                   const char **str, uint64_t *len);

/* ---- context: KV cache, scratch buffers, thread pool ---- */
typedef struct pi_context pi_context;

typedef struct {
    uint32_t n_ctx;          /* KV cache length in tokens; 0 = the model's trained length */
    uint32_t n_batch;        /* most tokens evaluated in one forward step */
    int32_t n_threads;       /* threads for single-token decode; <= 0 = all cores */
    int32_t n_threads_batch; /* threads for prefill batches; <= 0 = n_threads */
    int32_t logits_all;      /* keep logits of every position (n_ctx rows), not only the last */
    int32_t kernel_impl;     /* 0 auto, 1 scalar reference, 2 avx2, 3 avx512 */
    int32_t sparse;          /* PI_SPARSE_*: use the model's FFN predictors (when it has them) */
    float sparse_threshold_shift; /* added to every layer's predictor threshold: > 0 sparser */
    int32_t device;          /* PI_DEVICE_*: where the hot neurons of pi_model_plan(vram_budget) run */
    uint64_t vram_budget;    /* device bytes for the hybrid split; 0 = all on the CPU */
    int32_t embeddings;      /* keep every evaluated position's final normed hidden state (pi_get_embeddings) */
    int32_t n_gpu_layers;    /* layer offload: the last n layers on the CUDA device (< 0: all); 0 = none */
    int32_t n_logits;        /* without logits_all: rows of logits kept, the most pi_decode_tail asks for (0 = 1) */
    int32_t type_k, type_v;  /* the KV cache's types, ggml ids as llama.cpp's: 1 f16 (default), 8 q8_0, 2 q4_0;
                                a quantized cache runs attention on the CPU only */
    int32_t n_seq_max;       /* sequences the KV cache holds (0 = 1), each n_ctx / n_seq_max positions, as the
                                slots of llama.cpp's server; more than one runs on the CPU only, without
                                logits_all or embeddings */
} pi_context_params;

enum {
    PI_SPARSE_OFF = 0,       /* dense FFN everywhere (the exact result) */
    PI_SPARSE_DECODE = 1,    /* predicted neurons only for one-token steps; prompts run dense */
    PI_SPARSE_ALL = 2        /* predicted neurons for every token, prompts included */
};

enum {
    PI_DEVICE_NONE = 0,      /* everything on the CPU */
    PI_DEVICE_HOST = 1,      /* the device side of the split on a host thread with its own copy of the
                                hot rows: the split and merge without a GPU (tests, CI) */
    PI_DEVICE_CUDA = 2       /* the hot neurons on CUDA device 0 */
};

PI_API pi_context_params pi_context_default_params(void);
PI_API int pi_context_new(pi_model *model, pi_context_params params, pi_context **out);
PI_API void pi_context_free(pi_context *ctx);
PI_API uint32_t pi_context_n_ctx(const pi_context *ctx);
PI_API const char *pi_context_kernels(const pi_context *ctx); /* "ref", "avx2", "avx512" */
PI_API uint64_t pi_context_kv_bytes(const pi_context *ctx);  /* the host KV cache's bytes, K and V */

/* Evaluate n_tokens tokens at positions pos .. pos+n_tokens-1. KV entries at positions >= pos
 * are dropped first, so a caller rewinds by passing a smaller pos. Splits into n_batch chunks. */
PI_API int pi_decode(pi_context *ctx, const int32_t *tokens, int32_t n_tokens, int32_t pos);

/* As pi_decode, with the logits of the last n_logits tokens (1 <= n_logits <= params.n_logits)
 * in rows 0 .. n_logits-1, in token order: a draft verified in one step. With logits_all the
 * rows are by position, as pi_decode's, whatever n_logits. */
PI_API int pi_decode_tail(pi_context *ctx, const int32_t *tokens, int32_t n_tokens, int32_t pos, int32_t n_logits);

/* Many sequences in one step, the shape of llama.cpp's llama_batch: token i goes to sequence
 * seq[i] (0 <= seq < n_seq_max) at position pos[i], and gets a row of logits where logits[i] is
 * not 0, rows 0.. in token order (at most params.n_logits of them). A sequence's tokens lie next
 * to each other, at consecutive positions from one at most its length: its positions from there
 * on are dropped first, as pi_decode's. All tokens of a step go through the weights together (a
 * step of several tokens runs the FFN dense); attention is per sequence. Nothing is kept from a
 * call that fails on its arguments. pi_decode and the state calls act on sequence 0. */
typedef struct {
    int32_t n_tokens;
    const int32_t *token, *pos, *seq;
    const int8_t *logits;
} pi_batch;
PI_API int pi_decode_batch(pi_context *ctx, const pi_batch *batch);

/* Per-sequence cache operations: its length (positions held); clear (seq -1: every sequence);
 * keep positions [0, pos) only (a rejected draft's rollback); copy positions [0, n) of src into
 * dst, which then holds exactly those (a shared prefix, copied cell by cell). */
PI_API int32_t pi_seq_len(const pi_context *ctx, int32_t seq);
PI_API int pi_seq_clear(pi_context *ctx, int32_t seq);
PI_API int pi_seq_truncate(pi_context *ctx, int32_t seq, int32_t pos);
PI_API int pi_seq_copy_prefix(pi_context *ctx, int32_t src, int32_t dst, int32_t n);
PI_API uint32_t pi_context_seq_ctx(const pi_context *ctx); /* positions per sequence */

/* The logits buffer, owned by the context: [n_ctx][n_vocab] with logits_all (row = position),
 * else [n_logits][n_vocab], row 0 holding pi_decode's last evaluated position. *rows receives
 * the row count. */
PI_API float *pi_get_logits(pi_context *ctx, int32_t *rows);

/* With params.embeddings: [n_ctx][n_embd], row = position, the hidden state after the final norm
 * (llama.cpp's per-token embeddings). NULL without it. *rows receives n_ctx. */
PI_API float *pi_get_embeddings(pi_context *ctx, int32_t *rows);

/* The sequence's state: positions [0, n_past) of the KV cache and n_past, as bytes that
 * pi_context_set_state takes back on a context of the same model whose n_ctx holds them.
 * get writes pi_context_state_size(ctx) bytes; set checks the header and the size first and
 * leaves the context unchanged when they do not fit. */
PI_API uint64_t pi_context_state_size(const pi_context *ctx);
PI_API int pi_context_get_state(const pi_context *ctx, uint8_t *dst, uint64_t size);
PI_API int pi_context_set_state(pi_context *ctx, const uint8_t *src, uint64_t size);

/* ---- LoRA adapters (llama.cpp's GGUF: general.type "adapter", adapter.type "lora") ---- */
typedef struct pi_adapter pi_adapter;
/* Read an adapter for `model` and check it against it: PI_ERR_FORMAT when it is not a LoRA
 * adapter or does not fit the model (another architecture, a tensor the model lacks, a shape),
 * PI_ERR_UNSUPPORTED for a weight we cannot adapt (a fused one) or K-quant factors. The adapter
 * borrows the model: free it first. */
PI_API int pi_adapter_load(const pi_model *model, const char *path, pi_adapter **out);
PI_API void pi_adapter_free(pi_adapter *adapter);
PI_API int pi_adapter_n_pairs(const pi_adapter *adapter); /* weights it adapts */
/* From the next pi_decode on, every adapted weight's output gains scale * B (A x) (times
 * adapter.lora.alpha / rank where alpha is set, llama.cpp's rule); NULL removes it. The context
 * borrows the adapter. A layer whose FFN is adapted runs it dense. PI_ERR_UNSUPPORTED on a
 * context with steps on a device: adapters run on the CPU. */
PI_API int pi_context_set_adapter(pi_context *ctx, const pi_adapter *adapter, float scale);

/* ---- profiling, for convert/add_profile.py ---- */
/* While set, every pi_decode writes, for its i-th token (i < max_tokens), layer l's normed FFN
 * input to ffn_in[(l * max_tokens + i) * n_embd ...] and its activation product (the input of
 * ffn_down, dense) to act[(l * max_tokens + i) * n_ff ...]; an MoE model has no one activation:
 * act NULL. The buffers stay the caller's and must outlive the capture;
 * pi_context_set_capture(ctx, NULL, NULL, 0) stops it. */
PI_API int pi_context_set_capture(pi_context *ctx, float *ffn_in, float *act, int32_t max_tokens);
/* The same for an MoE model's routing: layer l's n_expert_used experts of the i-th token, most
 * probable first, to experts[(l * max_tokens + i) * n_expert_used ...]; the caller's buffer;
 * NULL stops it. */
PI_API int pi_context_set_expert_capture(pi_context *ctx, int32_t *experts, int32_t max_tokens);

typedef struct {
    int64_t tokens;          /* tokens evaluated since the context was made or the stats reset */
    int64_t ffn_rows_dense;  /* FFN neurons a dense FFN would have computed for them */
    int64_t ffn_rows_done;   /* FFN neurons actually computed */
    int64_t device_copies;   /* transfers between the host and the device (the stream, a normed input, a sum) */
    int64_t device_syncs;    /* times the host waited for the device */
    int64_t ffn_rows_hot;    /* of ffn_rows_done, the neurons of the split's hot runs: the device's part (the CPU's without one) */
    /* The one-token steps among them (generation; prompts excluded), and the weight bytes they
     * read: embedding rows, attention, output, predictors and the FFN rows computed (a down row
     * only where its activation is not zero: the kernels skip those). Norms, biases and the KV
     * cache are left out. dense_token_bytes: what one dense token reads, a constant of the model. */
    int64_t decode_steps;
    int64_t decode_ffn_rows_dense, decode_ffn_rows_done;
    int64_t decode_weight_bytes;
    int64_t dense_token_bytes;
} pi_stats;
PI_API int pi_context_get_stats(const pi_context *ctx, pi_stats *out);
PI_API void pi_context_reset_stats(pi_context *ctx);

/* ---- kernels, exposed for tests and micro-benchmarks ---- */
/* Y[t][r] = dot(row r of W, X[t]) for t < nt, r < n_rows; W holds n_rows rows of n weights in
 * `type`; X is float [nt][n], quantized inside as the forward pass does. */
PI_API int pi_kernel_matmul(int32_t type, int32_t impl, const void *W, int32_t n_rows, int32_t n,
                            const float *X, int32_t nt, float *Y);
/* W's n_rows rows of n weights (Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0; n_rows a multiple of 16) rearranged in place
 * into the groups of 16 rows the model loader gives the dense matmuls' weights
 * (native/src/kernels/row_groups.c), and pi_kernel_matmul over weights so grouped. */
PI_API int pi_kernel_group_rows(int32_t type, void *W, int32_t n_rows, int32_t n);
PI_API int pi_kernel_matmul_grouped(int32_t type, int32_t impl, const void *W, int32_t n_rows, int32_t n,
                                    const float *X, int32_t nt, float *Y);
/* y[0..d) += a[j] * row rows[j] of W (row j when rows is NULL) for j < n, skipping a[j] == 0
 * (those rows are not read): the sparse FFN's down projection. W holds n_rows rows of d weights
 * in `type`; every rows[j] must lie in [0, n_rows). */
PI_API int pi_kernel_axpy_rows(int32_t type, int32_t impl, const void *W, int32_t n_rows, int32_t d,
                               const int32_t *rows, const float *a, int32_t n, float *y);
/* out[0..hd) = sum_j p[j] * v_j over n q8_0 rows of hd values, stride bytes apart: the attention
 * sum over a q8_0 V cache, impl 1 (scalar reference) or 2 (AVX2). */
PI_API int pi_kernel_mix_q8_0(int32_t impl, const void *v, uint64_t stride, const float *p, int32_t n, int32_t hd,
                              float *out);
/* Attention over f16 rows k and v (n rows of hd values, stride values apart) for nq <= 32 queries q
 * ([nq][hd]): scores[r][p] = scale * q_r . k_p, then out[r] = sum_p w[r][p] v_p over rows lo[r]..hi[r]
 * (w: [nq][n]), in key order; impl 1 (scalar reference) or 2 (AVX2). tiled 1 runs the tile ops that
 * serve all queries from each row, 0 each query alone: the two must agree bit for bit. */
PI_API int pi_kernel_attention_f16(int32_t impl, int32_t tiled, const float *q, int32_t nq, const uint16_t *k,
                                   const uint16_t *v, uint64_t stride, int32_t n, int32_t hd, float scale, float *scores,
                                   const float *w, const int32_t *lo, const int32_t *hi, float *out);
/* out[0..n) = dequantized weights of one row of n weights. */
PI_API int pi_kernel_dequant(int32_t type, int32_t impl, const void *row, int32_t n, float *out);
/* The same row as the CUDA kernels decode it (cuda/weights.h), run on the host: weight by weight
 * as the kernels reading columns do (units 0), or 32 at a time as the row dot products do (1). */
PI_API int pi_kernel_device_dequant(int32_t type, int32_t units, const void *row, int32_t n, float *out);
/* Bytes of one row of n weights of `type`; 0 when unsupported or n is not a block multiple. */
PI_API uint64_t pi_type_row_bytes(int32_t type, int64_t n);

/* ---- devices and the hot/cold split ---- */
/* Which neurons and expert runs a device budget holds, from the profiled frequencies (see
 * placement.h): per layer, positions [0, n_hot) of the layer's frequency order, their bytes and
 * the share of the layer's activations they serve; fixed_on_device: the layer's attention (not a
 * parallel block's, which stays on the CPU), router and predictor fit first. An MoE layer's
 * experts: the runs of PI_FFN_RUN neurons placed over all its experts (of n_expert_runs, n_expert
 * x ceil(n_ff_exp / PI_FFN_RUN); 0 in a dense layer), their bytes, and the share
 * of the bytes a token is expected to read from the layer's experts that they hold (from
 * blk.N.ffn_exp_freq / ffn_exp_run_freq; without them each expert is routed with probability
 * n_expert_used / n_expert and reads every row). */
typedef struct {
    int32_t n_hot;
    int32_t fixed_on_device;
    uint64_t bytes;
    double coverage;
    int32_t n_hot_expert_runs, n_expert_runs;
    uint64_t expert_bytes;
    double expert_coverage;
} pi_layer_placement;
/* value: the FFN bytes (dense neurons and experts) a token is expected to read from the device;
 * the greedy plan's value is at least the optimum's less max_loss, and the optimum's at most
 * upper_bound_value (the LP relaxation), so upper_bound_value - value bounds its gap. */
typedef struct {
    uint64_t budget;
    uint64_t fixed_bytes;    /* output matrix, attention, routers and predictors placed ahead of neurons */
    uint64_t neuron_bytes;   /* dense FFN neurons placed */
    int32_t output_on_device;
    uint64_t expert_bytes;   /* expert runs placed */
    double value, upper_bound_value, max_loss;
} pi_placement_totals;
/* layers: [n_layer], filled. */
PI_API int pi_model_plan(const pi_model *model, uint64_t budget, pi_layer_placement *layers,
                         pi_placement_totals *totals);
/* The same plan's expert runs: exp_hot[(l * n_expert + e) * runs + r] = 1 where run r of expert e
 * of layer l is placed, runs = ceil(n_ff_exp / 128); n must be n_layer * n_expert * runs. */
PI_API int pi_model_plan_experts(const pi_model *model, uint64_t budget, uint8_t *exp_hot, uint64_t n);
/* The planner's knapsack on plain arrays, for tests: chain c holds chain_len[c] items (bytes,
 * value: the bytes a token reads from it; value per byte must not rise along a chain) and is
 * taken as a prefix, taken[c] long; totals gets budget, value, upper_bound_value and max_loss. */
PI_API int pi_plan_knapsack(int32_t n_chain, const int32_t *chain_len, const uint64_t *bytes, const double *value,
                            uint64_t budget, int32_t *taken, pi_placement_totals *totals);
/* The bytes pi_model_plan can place: every weight a token reads (what a full offload needs). */
PI_API uint64_t pi_model_device_bytes(const pi_model *model);

/* CUDA devices usable by this build: 0 without a GPU, a driver, or a CUDA build. */
PI_API int pi_cuda_device_count(void);
/* What this build contains, e.g. "cpu x86 cuda": the backends compiled in. */
PI_API const char *pi_build_info(void);
/* CDEF-END */

#ifdef __cplusplus
}
#endif
#endif
