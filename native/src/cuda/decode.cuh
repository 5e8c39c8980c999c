// decode.cuh - what the CUDA kernels share: a weight in device memory in its GGUF format, and
// the decoding of its rows as they are read (ffn.cu, layers.cu).
#ifndef PI_CUDA_DECODE_CUH
#define PI_CUDA_DECODE_CUH
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "cuda/ffn_cuda.h"
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

// a CUDA call in a function with err/err_len: on failure, the message and -1
#define TRY(call, what)                                                  \
    do {                                                                 \
        cudaError_t e_ = (call);                                         \
        if (e_ != cudaSuccess) return cuda_fail(e_, what, err, err_len); \
    } while (0)

static __device__ inline float f16(const uint8_t *p) { return __half2float(__ushort_as_half((uint16_t)(p[0] | p[1] << 8))); }

static __device__ inline uint32_t u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

// weight j (0..31) of a block: its integer and the block's scale and offset, w = d * q + m
static __device__ inline float block_weight(uint32_t type, const uint8_t *b, int j) {
    const int lo = j < 16, k = j & 15;
    switch (type) {
    case PI_TYPE_Q4_0: return f16(b) * (float)((lo ? b[2 + k] & 15 : b[2 + k] >> 4) - 8);
    case PI_TYPE_Q4_1: return f16(b) * (float)(lo ? b[4 + k] & 15 : b[4 + k] >> 4) + f16(b + 2);
    case PI_TYPE_Q5_0: {
        const int q = (lo ? b[6 + k] & 15 : b[6 + k] >> 4) | (int)((u32(b + 2) >> j) & 1) << 4;
        return f16(b) * (float)(q - 16);
    }
    case PI_TYPE_Q5_1: {
        const int q = (lo ? b[8 + k] & 15 : b[8 + k] >> 4) | (int)((u32(b + 4) >> j) & 1) << 4;
        return f16(b) * (float)q + f16(b + 2);
    }
    case PI_TYPE_Q8_0: return f16(b) * (float)(int8_t)b[2 + j];
    default: return 0.0f;
    }
}


static __device__ inline int is_float(uint32_t type) { return type == PI_TYPE_F32 || type == PI_TYPE_F16 || type == PI_TYPE_BF16; }

// element i of a row
static __device__ inline float row_weight(const dev_weight &w, const uint8_t *row, int i) {
    switch (w.type) {
    case PI_TYPE_F32: return reinterpret_cast<const float *>(row)[i];
    case PI_TYPE_F16: return f16(row + 2 * i);
    case PI_TYPE_BF16: return __uint_as_float((uint32_t)(row[2 * i] | row[2 * i + 1] << 8) << 16);
    default: return block_weight(w.type, row + (size_t)(i / 32) * pi_block_bytes((int)w.type), i % 32);
    }
}

// dot(row r, x) over the warp; every lane returns the sum
static __device__ float warp_dot(const dev_weight &w, int64_t r, const float *x) {
    const uint8_t *row = w.data + (size_t)r * w.row_bytes;
    const int lane = threadIdx.x % 32, n = (int)w.n_in;
    float s = 0.0f;
    if (is_float(w.type)) {
        for (int i = lane; i < n; i += 32) s += row_weight(w, row, i) * x[i];
    } else {
        const size_t bb = pi_block_bytes((int)w.type);
        for (int b = lane; b < n / 32; b += 32)
            for (int j = 0; j < 32; j++) s += block_weight(w.type, row + b * bb, j) * x[b * 32 + j];
    }
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    return s;
}

// ---- uploads ----

static inline int upload(dev_weight *d, const pi_cuda_weight *w, char *err, size_t err_len) {
    d->type = w->type;
    d->n_in = w->n_in;
    d->n_rows = w->n_rows;
    d->row_bytes = w->row_bytes;
    const size_t bytes = (size_t)w->n_rows * w->row_bytes;
    TRY(cudaMalloc(&d->data, bytes ? bytes : 1), "allocating weights");
    TRY(cudaMemcpy(d->data, w->host, bytes, cudaMemcpyHostToDevice), "uploading weights");
    return 0;
}

static inline int upload_floats(float **d, const float *host, int n, char *err, size_t err_len) {
    *d = nullptr;
    if (!host) return 0;
    TRY(cudaMalloc(d, (size_t)n * sizeof(float)), "allocating biases");
    TRY(cudaMemcpy(*d, host, (size_t)n * sizeof(float), cudaMemcpyHostToDevice), "uploading biases");
    return 0;
}

// a weight the kernels can read: a float type, or a 32-weight block type with whole blocks per row
static inline int device_reads(const pi_cuda_weight *w) {
    const uint32_t t = w->type;
    if (t == PI_TYPE_F32 || t == PI_TYPE_F16 || t == PI_TYPE_BF16) return 1;
    const int block = t == PI_TYPE_Q4_0 || t == PI_TYPE_Q4_1 || t == PI_TYPE_Q5_0 || t == PI_TYPE_Q5_1 || t == PI_TYPE_Q8_0;
    return block && w->n_in % 32 == 0;
}

#endif
