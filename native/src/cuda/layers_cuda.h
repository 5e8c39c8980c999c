/* layers_cuda.h - whole transformer layers on a CUDA device: llama.cpp's layer offload
 * (n_gpu_layers), the baseline the hybrid split is compared against. Plain C: offload.c calls it,
 * nvcc compiles layers.cu against it.
 *
 * The device holds the last layers' weights (in their GGUF formats), norms and biases, their KV
 * cache in f16, and optionally the output norm and matrix. A run copies the residual stream of n
 * tokens in, computes every offloaded layer on one stream, and copies back the stream, or the
 * logits when the output is on the device. */
#ifndef PI_LAYERS_CUDA_H
#define PI_LAYERS_CUDA_H
#include "cuda/ffn_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One layer of the llama block (with gemma3's extras), each vector [its row count] or NULL. */
typedef struct {
    pi_cuda_weight attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down;
    const float *attn_norm, *ffn_norm;                     /* required */
    const float *attn_q_norm, *attn_k_norm;                /* [head_dim], per head */
    const float *post_attn_norm, *post_ffn_norm;
    const float *attn_q_b, *attn_k_b, *attn_v_b, *attn_output_b, *ffn_gate_b, *ffn_up_b, *ffn_down_b;
    int32_t local;      /* sliding-window attention */
    int32_t rope_local; /* with the second rope table */
} pi_cuda_block;

typedef struct {
    int32_t n_embd, n_head, n_head_kv, head_dim, n_ff, n_rot, n_ctx, n_batch;
    int32_t act;        /* PI_ACT_*: the gated activations */
    int32_t rope_neox, swa_window;
    float norm_eps;
    const float *inv_freq; /* [2][n_rot / 2]: the global rope frequencies, then the local ones */
    pi_cuda_weight output; /* n_embd -> n_vocab on the device, or host NULL: the host's */
    const float *output_norm, *output_b; /* [n_embd], [n_vocab] or NULL */
} pi_cuda_shape;

typedef struct pi_cuda_layers pi_cuda_layers;

/* Upload n_blocks layers. err: a message on failure (an unsupported weight type included). */
int pi_cuda_layers_new(const pi_cuda_shape *shape, int n_blocks, const pi_cuda_block *blocks, pi_cuda_layers **out,
                       char *err, size_t err_len);
/* x [n][n_embd] on the host, in and out: the tokens at positions pos0.. through every layer.
 * With the output on the device and logits not NULL, the logits of rows first.. instead:
 * logits [n - first][n_vocab] (x is then left as it came). */
int pi_cuda_layers_run(pi_cuda_layers *g, float *x, int n, int pos0, float *logits, int first, char *err,
                       size_t err_len);
void pi_cuda_layers_free(pi_cuda_layers *g);

#ifdef __cplusplus
}
#endif
#endif
