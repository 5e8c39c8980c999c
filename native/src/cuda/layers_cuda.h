/* layers_cuda.h - transformer layers on a CUDA device, whole or their attention alone, and the
 * output matrix: llama.cpp's layer offload (n_gpu_layers), and the part of the hybrid split that
 * every token reads (attention and output, as the placement puts them in VRAM), with the split's
 * norm and merge where the stream stays on the device. Plain C: device/cuda.c calls it, nvcc
 * compiles layers.cu against it. The layers own the device's one stream.
 *
 * The device holds, per layer it was given, that layer's attention weights and KV cache (f16) and
 * its FFN weights when they came, in their GGUF formats; and the output norm and matrix when they
 * came. The residual stream of a step's n tokens is copied in once, stays on the device across
 * the steps queued on its stream, and is copied out when the host needs it. */
#ifndef PI_LAYERS_CUDA_H
#define PI_LAYERS_CUDA_H
#include "block_traits.h"
#include "cuda/ffn_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One layer, each vector [its row count] or NULL: the llama block with gemma3's extras, and the
 * LayerNorm, bias and parallel-block forms of opt and falcon. A weight whose host is NULL stays
 * off the device: no attn_q, the layer is the host's; no ffn_up, only its attention is the
 * device's. The FFN has a gate or not (the activation then takes up), and ffn_down or only
 * PowerInfer's transposed ffn_down_t [n_ff][n_embd]. */
typedef struct {
    pi_cuda_weight attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down, ffn_down_t;
    const float *attn_norm, *ffn_norm;                     /* required (ffn_norm: for the split's norm too) */
    const float *attn_norm_b, *ffn_norm_b;                 /* LayerNorm's biases */
    const float *attn_q_norm, *attn_k_norm;                /* [head_dim], per head */
    const float *post_attn_norm, *post_ffn_norm;
    const float *attn_q_b, *attn_k_b, *attn_v_b, *attn_output_b, *ffn_gate_b, *ffn_up_b, *ffn_down_b;
    PI_LAYER_TRAITS(PI_TRAIT_FIELD) /* local, rope_local, no_rope: pi_layer's (block_traits.h) */
} pi_cuda_block;

typedef struct {
    int32_t n_embd, n_head, n_head_kv, head_dim, n_ff, n_rot, n_ctx, n_batch;
    int32_t act;        /* PI_ACT_* */
    PI_BLOCK_TRAITS(PI_TRAIT_FIELD) /* rope_neox, swa_window, layer_norm, parallel, attn_softcap: pi_model's */
    float norm_eps;
    const float *inv_freq; /* [2][n_rot / 2]: the global rope frequencies, then the local ones */
    pi_cuda_weight output; /* n_embd -> n_vocab on the device, or host NULL: the host's */
    const float *output_norm, *output_norm_b, *output_b; /* [n_embd], [n_embd], [n_vocab] or NULL */
} pi_cuda_shape;

typedef struct pi_cuda_layers pi_cuda_layers;

/* Upload blocks[0..n_blocks), one per layer. err: a message on failure (an unsupported weight
 * type included). */
int pi_cuda_layers_new(const pi_cuda_shape *shape, int n_blocks, const pi_cuda_block *blocks, pi_cuda_layers **out,
                       char *err, size_t err_len);
/* The stream x [n][n_embd] onto the device, and back (which waits for the queued work). */
int pi_cuda_x_in(pi_cuda_layers *g, const float *x, int n, char *err, size_t err_len);
int pi_cuda_x_out(pi_cuda_layers *g, float *x, int n, char *err, size_t err_len);
/* Queue x += attention(x) of layer il for the n tokens at pos0.. (and its FFN too in a parallel
 * block, whose FFN step is then nothing), or x += FFN(x). */
int pi_cuda_layer_attention(pi_cuda_layers *g, int il, int n, int pos0, char *err, size_t err_len);
int pi_cuda_layer_ffn(pi_cuda_layers *g, int il, int n, char *err, size_t err_len);
/* logits [n - first][n_vocab] = output(norm(x[first..n))), on the host when it returns. */
int pi_cuda_logits(pi_cuda_layers *g, int n, int first, float *logits, char *err, size_t err_len);
/* The stream (a cudaStream_t) every piece of the device queues its work on. */
void *pi_cuda_layers_stream(pi_cuda_layers *g);

/* The split with the stream on the device, for token t of layer il (whose attention it holds).
 * split_norm: row t normed with the FFN's norm into the device's xn (at pi_cuda_layers_xn, for
 * the hot runs), and copied to the host's xn [n_embd], which it waits for (and only for that).
 * split_merge: x[t] += post_ffn_norm(cold + hot + ffn_down_b), cold the host's [n_embd], hot the
 * device's hot sum or NULL when the layer has no hot runs. */
int pi_cuda_split_norm(pi_cuda_layers *g, int il, int t, float *xn, char *err, size_t err_len);
const float *pi_cuda_layers_xn(const pi_cuda_layers *g);
int pi_cuda_split_merge(pi_cuda_layers *g, int il, int t, const float *hot, const float *cold, char *err,
                        size_t err_len);
void pi_cuda_layers_free(pi_cuda_layers *g);

#ifdef __cplusplus
}
#endif
#endif
