/* ffn_cuda.h - the CUDA side of the hot/cold split, in plain C (device/cuda.c calls it; nvcc
 * compiles ffn.cu against it without seeing the C11 context).
 *
 * The device holds, per layer, fc1 and the hot positions' rows of fc2, gate, up and ffn_down_t
 * (laid out by position) and their gate/up biases. A job computes relu(fc1 x), every hot
 * position's logit, gate, up and activation where the logit reaches the threshold, each hot
 * run's sum of down rows, and the runs' sum in run order (pi_split_fold's); all queued on the
 * stream it was given (the layers', layers_cuda.h), so a start returns at once. */
#ifndef PI_FFN_CUDA_H
#define PI_FFN_CUDA_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint32_t type;          /* PI_TYPE_* */
    int64_t n_in, n_rows;
    size_t row_bytes;
    const uint8_t *host;    /* rows to upload, n_rows * row_bytes bytes */
    int grouped;            /* host rows in groups (quants.h's PI_GROUP_ROWS): the upload puts them in row order */
} pi_cuda_weight;

typedef struct {
    int32_t n_hot;          /* hot positions; 0: the layer stays on the CPU */
    pi_cuda_weight fc1, fc2, gate, up, down_t; /* fc2/gate/up/down_t: n_hot rows */
    const float *gate_b, *up_b; /* [n_hot] by position, or NULL */
} pi_cuda_layer;

typedef struct pi_cuda_ffn pi_cuda_ffn;

/* Upload every layer, for work on `stream` (a cudaStream_t). act: PI_ACT_*. run: positions per
 * run. err: a message on failure. */
int pi_cuda_ffn_new(void *stream, int n_layer, int n_embd, int act, int run, const pi_cuda_layer *layers,
                    pi_cuda_ffn **out, char *err, size_t err_len);
/* Start layer's job on the host's x [n_embd] (copied in) with this threshold; wait for it, then
 * run_acc [n_embd] and run_rows [hot_runs] hold the hot runs folded: their sum, and their neurons
 * in run_rows[0], the other counts 0. */
int pi_cuda_ffn_start(pi_cuda_ffn *f, int layer, const float *x, float threshold, char *err, size_t err_len);
int pi_cuda_ffn_wait(pi_cuda_ffn *f, float *run_acc, int32_t *run_rows, char *err, size_t err_len);
/* Start layer's job on x [n_embd] already in device memory; its sum stays there, at
 * pi_cuda_ffn_sum, for the work queued after it. Its neuron counts come back to the host on the
 * way: pi_cuda_ffn_collect, after any wait for the stream, returns those that have arrived. */
int pi_cuda_ffn_start_on(pi_cuda_ffn *f, int layer, const float *x, float threshold, char *err, size_t err_len);
const float *pi_cuda_ffn_sum(const pi_cuda_ffn *f);
int64_t pi_cuda_ffn_collect(pi_cuda_ffn *f);
void pi_cuda_ffn_free(pi_cuda_ffn *f);

#ifdef __cplusplus
}
#endif
#endif
