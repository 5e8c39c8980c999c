// decode.cuh - what the CUDA kernels share: a weight in device memory in its GGUF format, its
// rows' dot products (decoded as they are read, by weights.h), and the uploads (ffn.cu, layers.cu).
#ifndef PI_CUDA_DECODE_CUH
#define PI_CUDA_DECODE_CUH
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "cuda/ffn_cuda.h"
#include "cuda/weights.h"
#include "powerinfer.h"
#include "quants.h"

struct dev_weight {
    uint32_t type;
    int64_t n_in, n_rows;
    size_t row_bytes;
    uint8_t *data;
};

static inline int cuda_fail(cudaError_t e, const char *what, char *err, size_t len) {
    snprintf(err, len, "CUDA: %s: %s", what, cudaGetErrorString(e));
    cudaGetLastError();
    return -1;
}

// kernel<<<grid, block, 0, stream>>>, spelled so that the CPU emulator's header
// (native/cuda_emulator) can run the kernels where no GPU is
#ifndef PI_LAUNCH
#define PI_LAUNCH(kernel, grid, block, stream) kernel<<<grid, block, 0, stream>>>
#endif

// a CUDA call in a function with err/err_len: on failure, the message and -1
#define TRY(call, what)                                                  \
    do {                                                                 \
        cudaError_t e_ = (call);                                         \
        if (e_ != cudaSuccess) return cuda_fail(e_, what, err, err_len); \
    } while (0)

// the FFN activation (PI_ACT_*) of a neuron's gate value g and up value u; the plain ones
// (ReLU, GELU: no gate) take up as g
static __device__ inline float activate(int act, float g, float u) {
    const float gelu = 0.5f * g * (1.0f + tanhf(0.7978845608f * g * (1.0f + 0.044715f * g * g)));
    switch (act) {
    case PI_ACT_RELU_GLU: return (g > 0.0f ? g : 0.0f) * u;
    case PI_ACT_RELU_RELU_GLU: return (g > 0.0f ? g : 0.0f) * (u > 0.0f ? u : 0.0f);
    case PI_ACT_GELU_GLU: return gelu * u;
    case PI_ACT_RELU: return g > 0.0f ? g : 0.0f;
    case PI_ACT_GELU: return gelu;
    default: return g / (1.0f + expf(-g)) * u; // PI_ACT_SILU_GLU
    }
}

enum { DOT_TILE = 8 }; // tokens whose dot products share one decoding of a row

// a loop over a constant count, unrolled on the device so that the arrays it indexes stay in
// registers (an index known only at run time would put them in local memory)
#ifdef __CUDACC__
#define PI_UNROLL _Pragma("unroll")
#else
#define PI_UNROLL
#endif

// acc[t] = dot(row r, x + t * stride) for t < nt <= DOT_TILE, over the warp: the lanes take
// units of 32 weights in turn, each decoded once for every token; every lane returns the sums
static __device__ void warp_dots(const dev_weight &w, int64_t r, const float *x, int64_t stride, int nt,
                                 float acc[DOT_TILE]) {
    const uint8_t *row = w.data + (size_t)r * w.row_bytes;
    const int lane = threadIdx.x % 32;
    const int64_t n = w.n_in, units = (n + 31) / 32;
    PI_UNROLL
    for (int t = 0; t < DOT_TILE; t++) acc[t] = 0.0f;
    for (int64_t u = lane; u < units; u += 32) {
        float wu[32];
        pi_dw_unit(w.type, row, u, n, wu);
        const int count = n - 32 * u < 32 ? (int)(n - 32 * u) : 32;
        PI_UNROLL
        for (int t = 0; t < DOT_TILE; t++) {
            if (t >= nt) break;
            const float *xu = x + t * stride + 32 * u;
            float s = 0.0f;
            // a float weight's x rounded to its type, as the CPU's kernels and llama.cpp's do
            for (int j = 0; j < count; j++) s += wu[j] * pi_act_as_weight_type((int)w.type, xu[j]);
            acc[t] += s;
        }
    }
    PI_UNROLL
    for (int t = 0; t < DOT_TILE; t++)
        if (t < nt) // the same on every lane: the whole warp shuffles
            for (int off = 16; off > 0; off /= 2) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], off);
}

// dot(row r, x) over the warp; every lane returns the sum
static __device__ float warp_dot(const dev_weight &w, int64_t r, const float *x) {
    float acc[DOT_TILE];
    warp_dots(w, r, x, 0, 1, acc);
    return acc[0];
}

// ---- uploads ----

static inline int upload(dev_weight *d, const pi_cuda_weight *w, char *err, size_t err_len) {
    d->type = w->type;
    d->n_in = w->n_in;
    d->n_rows = w->n_rows;
    d->row_bytes = w->row_bytes;
    d->data = nullptr;
    if (!w->host) return 0; // an absent weight (no gate)
    const size_t bytes = (size_t)w->n_rows * w->row_bytes;
    TRY(cudaMalloc(&d->data, bytes ? bytes : 1), "allocating weights");
    if (!w->grouped) {
        TRY(cudaMemcpy(d->data, w->host, bytes, cudaMemcpyHostToDevice), "uploading weights");
        return 0;
    }
    // the device kernels read rows: each group goes back to row order on its way up
    const size_t group_bytes = PI_GROUP_ROWS * w->row_bytes;
    uint8_t *rows = (uint8_t *)malloc(group_bytes);
    if (!rows) {
        snprintf(err, err_len, "no host memory to upload a weight's row groups");
        return -1;
    }
    cudaError_t rc = cudaSuccess;
    for (int64_t g = 0; g < w->n_rows / PI_GROUP_ROWS && rc == cudaSuccess; g++) {
        pi_group_unpack_rows(w->type, w->host + (size_t)g * group_bytes, w->row_bytes, rows);
        rc = cudaMemcpy(d->data + (size_t)g * group_bytes, rows, group_bytes, cudaMemcpyHostToDevice);
    }
    free(rows);
    TRY(rc, "uploading weights");
    return 0;
}

static inline int upload_floats(float **d, const float *host, int n, char *err, size_t err_len) {
    *d = nullptr;
    if (!host) return 0;
    TRY(cudaMalloc(d, (size_t)n * sizeof(float)), "allocating biases");
    TRY(cudaMemcpy(*d, host, (size_t)n * sizeof(float), cudaMemcpyHostToDevice), "uploading biases");
    return 0;
}

// a weight the kernels can read: a type weights.h decodes, with whole blocks per row
static inline int device_reads(const pi_cuda_weight *w) {
    const uint32_t t = w->type;
    if (!pi_dw_reads(t)) return 0;
    return pi_dw_is_float(t) || w->n_in % pi_type_block_size(t) == 0;
}

#endif
