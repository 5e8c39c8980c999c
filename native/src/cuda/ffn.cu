// ffn.cu - the hot neurons' FFN on a CUDA device (ffn_cuda.h).
//
// Weights stay in their GGUF block formats in device memory and are decoded as they are read;
// the FFN input stays float. One warp computes one row's dot product, its lanes taking whole
// 32-weight blocks; the down sums give one thread per output dimension and run.
#include <cstdlib>
#include <cstring>

#include "cuda/decode.cuh"
#include "cuda/ffn_cuda.h"

enum { WARPS_PER_BLOCK = 8, DOWN_THREADS = 256 };

struct dev_layer {
    int32_t n_hot, rank, hot_runs;
    dev_weight fc1, fc2, gate, up, down_t;
    float *gate_b, *up_b;
};

struct pi_cuda_ffn {
    int n_layer, n_embd, act, run, max_rank, max_hot, max_runs, pending_runs, waiting; // waiting: pending's layer
    dev_layer *layers;
    cudaStream_t stream; // the layers' (borrowed)
    cudaEvent_t done;
    float *x, *h, *a, *partial, *sum; // device: input, hidden, activations [max_hot], run sums
                                      // [max_runs][n_embd], their sum [n_embd]
    int32_t *rows;                    // device: neurons computed per run
    float *host_x, *host_sum;         // pinned
    int32_t *host_rows;               // pinned [n_layer][max_runs]: each layer's counts on their way back
    int32_t *arriving;                // [n_layer] runs of counts on their way back, to collect
};

// ---- kernels ----

// h = relu(fc1 x)
__global__ void k_hidden(dev_weight fc1, const float *x, float *h) {
    const int64_t r = (int64_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    if (r >= fc1.n_rows) return;
    const float v = warp_dot(fc1, r, x);
    if (threadIdx.x % 32 == 0) h[r] = v > 0.0f ? v : 0.0f;
}

// per hot position: the logit; over the threshold, gate (when the FFN has one), up and the
// activation into a, else 0
__global__ void k_select(dev_layer L, const float *x, const float *h, float threshold, int act, int run, float *a,
                         int32_t *rows) {
    const int p = blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    if (p >= L.n_hot) return;
    const int lane0 = threadIdx.x % 32 == 0;
    if (warp_dot(L.fc2, p, h) < threshold) { // the same value on every lane: a warp-uniform branch
        if (lane0) a[p] = 0.0f;
        return;
    }
    const float u = warp_dot(L.up, p, x) + (L.up_b ? L.up_b[p] : 0.0f);
    // without a gate (opt, falcon) the activation takes up
    const float g = L.gate.data ? warp_dot(L.gate, p, x) + (L.gate_b ? L.gate_b[p] : 0.0f) : u;
    if (!lane0) return;
    a[p] = activate(act, g, u);
    atomicAdd(&rows[p / run], 1);
}

// partial[r][j] = sum over run r's positions p of a[p] * down_t[p][j]
__global__ void k_down(dev_weight down_t, const float *a, int n_hot, int run, int n_embd, float *partial) {
    const int r = blockIdx.x, j = blockIdx.y * DOWN_THREADS + threadIdx.x;
    if (j >= n_embd) return;
    const int p0 = r * run, p1 = p0 + run < n_hot ? p0 + run : n_hot;
    float s = 0.0f;
    for (int p = p0; p < p1; p++) {
        const float ap = a[p];
        if (ap != 0.0f) s += ap * pi_dw_row(down_t.type, down_t.data + (size_t)p * down_t.row_bytes, j);
    }
    partial[(size_t)r * n_embd + j] = s;
}

// sum[j] = the runs' partial[r][j] added in run order, skipping runs without neurons: the sum
// pi_split_fold makes of them on the host (split_engine.h), handed back as one vector
__global__ void k_fold(const float *partial, const int32_t *rows, int runs, int n_embd, float *sum) {
    const int j = blockIdx.x * DOWN_THREADS + threadIdx.x;
    if (j >= n_embd) return;
    float s = 0.0f;
    for (int r = 0; r < runs; r++)
        if (rows[r]) s += partial[(size_t)r * n_embd + j];
    sum[j] = s;
}

// ---- host side ----

extern "C" int pi_cuda_ffn_new(void *stream, int n_layer, int n_embd, int act, int run, const pi_cuda_layer *layers,
                               pi_cuda_ffn **out, char *err, size_t err_len) {
    *out = nullptr;
    pi_cuda_ffn *f = (pi_cuda_ffn *)calloc(1, sizeof *f);
    if (!f) return snprintf(err, err_len, "no memory for the CUDA FFN"), -1;
    f->n_layer = n_layer;
    f->n_embd = n_embd;
    f->act = act;
    f->run = run;
    f->stream = (cudaStream_t)stream;
    f->layers = (dev_layer *)calloc((size_t)n_layer, sizeof *f->layers);
    f->arriving = (int32_t *)calloc((size_t)n_layer + 1, sizeof *f->arriving);
    *out = f; // from here pi_cuda_ffn_free releases whatever was made
    if (!f->layers || !f->arriving) return snprintf(err, err_len, "no memory for the CUDA FFN"), -1;
    TRY(cudaEventCreateWithFlags(&f->done, cudaEventDisableTiming), "creating an event");
    for (int il = 0; il < n_layer; il++) {
        const pi_cuda_layer *src = &layers[il];
        dev_layer *L = &f->layers[il];
        L->n_hot = src->n_hot;
        if (!L->n_hot) continue;
        const pi_cuda_weight *ws[5] = { &src->fc1, &src->fc2, &src->gate, &src->up, &src->down_t };
        for (const pi_cuda_weight *w : ws)
            if (w->host && !device_reads(w))
                return snprintf(err, err_len, "CUDA: layer %d: weight type %u is not supported on the device", il,
                                w->type), -1;
        L->rank = (int32_t)src->fc1.n_rows;
        L->hot_runs = (L->n_hot + run - 1) / run;
        if (upload(&L->fc1, &src->fc1, err, err_len) || upload(&L->fc2, &src->fc2, err, err_len) ||
            upload(&L->gate, &src->gate, err, err_len) || upload(&L->up, &src->up, err, err_len) ||
            upload(&L->down_t, &src->down_t, err, err_len) || upload_floats(&L->gate_b, src->gate_b, L->n_hot, err, err_len) ||
            upload_floats(&L->up_b, src->up_b, L->n_hot, err, err_len))
            return -1;
        if (L->rank > f->max_rank) f->max_rank = L->rank;
        if (L->n_hot > f->max_hot) f->max_hot = L->n_hot;
    }
    const int max_runs = (f->max_hot + run - 1) / run;
    f->max_runs = max_runs;
    TRY(cudaMalloc(&f->x, (size_t)n_embd * sizeof(float)), "allocating the input");
    TRY(cudaMalloc(&f->h, (size_t)(f->max_rank + 1) * sizeof(float)), "allocating the hidden layer");
    TRY(cudaMalloc(&f->a, (size_t)(f->max_hot + 1) * sizeof(float)), "allocating activations");
    TRY(cudaMalloc(&f->partial, ((size_t)max_runs * n_embd + 1) * sizeof(float)), "allocating run sums");
    TRY(cudaMalloc(&f->sum, (size_t)n_embd * sizeof(float)), "allocating the runs' sum");
    TRY(cudaMalloc(&f->rows, ((size_t)max_runs + 1) * sizeof(int32_t)), "allocating run counts");
    TRY(cudaMallocHost(&f->host_x, (size_t)n_embd * sizeof(float)), "pinning the input");
    TRY(cudaMallocHost(&f->host_sum, (size_t)n_embd * sizeof(float)), "pinning the runs' sum");
    TRY(cudaMallocHost(&f->host_rows, ((size_t)n_layer * max_runs + 1) * sizeof(int32_t)), "pinning run counts");
    return 0;
}

// queue layer's job on the device's x: counts, hidden layer, selection, down sums, their fold into
// sum; then the counts on their way to the layer's slot of host_rows
static int enqueue(pi_cuda_ffn *f, int layer, const float *x, float threshold, char *err, size_t err_len) {
    const dev_layer *L = &f->layers[layer];
    const int threads = WARPS_PER_BLOCK * 32;
    TRY(cudaMemsetAsync(f->rows, 0, (size_t)L->hot_runs * sizeof(int32_t), f->stream), "clearing run counts");
    PI_LAUNCH(k_hidden, (L->rank + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK, threads, f->stream)(L->fc1, x, f->h);
    PI_LAUNCH(k_select, (L->n_hot + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK, threads, f->stream)(
        *L, x, f->h, threshold, f->act, f->run, f->a, f->rows);
    const dim3 grid((unsigned)L->hot_runs, (unsigned)((f->n_embd + DOWN_THREADS - 1) / DOWN_THREADS));
    PI_LAUNCH(k_down, grid, DOWN_THREADS, f->stream)(L->down_t, f->a, L->n_hot, f->run, f->n_embd, f->partial);
    PI_LAUNCH(k_fold, grid.y, DOWN_THREADS, f->stream)(f->partial, f->rows, L->hot_runs, f->n_embd, f->sum);
    TRY(cudaGetLastError(), "launching the FFN kernels");
    TRY(cudaMemcpyAsync(f->host_rows + (size_t)layer * f->max_runs, f->rows, (size_t)L->hot_runs * sizeof(int32_t),
                        cudaMemcpyDeviceToHost, f->stream), "copying run counts back");
    return 0;
}

static int check_layer(const pi_cuda_ffn *f, int layer, char *err, size_t err_len) {
    if (layer < 0 || layer >= f->n_layer) return snprintf(err, err_len, "CUDA FFN: no layer %d", layer), -1;
    return 0;
}

extern "C" int pi_cuda_ffn_start(pi_cuda_ffn *f, int layer, const float *x, float threshold, char *err,
                                 size_t err_len) {
    if (check_layer(f, layer, err, err_len)) return -1;
    const dev_layer *L = &f->layers[layer];
    f->pending_runs = L->hot_runs;
    f->waiting = layer;
    if (!L->hot_runs) return 0;
    memcpy(f->host_x, x, (size_t)f->n_embd * sizeof(float));
    TRY(cudaMemcpyAsync(f->x, f->host_x, (size_t)f->n_embd * sizeof(float), cudaMemcpyHostToDevice, f->stream),
        "copying the input");
    if (enqueue(f, layer, f->x, threshold, err, err_len)) return -1;
    TRY(cudaMemcpyAsync(f->host_sum, f->sum, (size_t)f->n_embd * sizeof(float), cudaMemcpyDeviceToHost, f->stream),
        "copying the runs' sum back");
    TRY(cudaEventRecord(f->done, f->stream), "recording the event");
    return 0;
}

extern "C" int pi_cuda_ffn_wait(pi_cuda_ffn *f, float *run_acc, int32_t *run_rows, char *err, size_t err_len) {
    if (!f->pending_runs) return 0;
    TRY(cudaEventSynchronize(f->done), "running the FFN kernels");
    memcpy(run_acc, f->host_sum, (size_t)f->n_embd * sizeof(float));
    int32_t neurons = 0;
    const int32_t *counts = f->host_rows + (size_t)f->waiting * f->max_runs;
    for (int r = 0; r < f->pending_runs; r++) neurons += counts[r];
    run_rows[0] = neurons;
    for (int r = 1; r < f->pending_runs; r++) run_rows[r] = 0;
    f->pending_runs = 0;
    return 0;
}

extern "C" int pi_cuda_ffn_start_on(pi_cuda_ffn *f, int layer, const float *x, float threshold, char *err,
                                    size_t err_len) {
    if (check_layer(f, layer, err, err_len)) return -1;
    const dev_layer *L = &f->layers[layer];
    if (!L->hot_runs) return 0;
    if (enqueue(f, layer, x, threshold, err, err_len)) return -1;
    f->arriving[layer] = L->hot_runs;
    return 0;
}

extern "C" const float *pi_cuda_ffn_sum(const pi_cuda_ffn *f) { return f->sum; }

extern "C" int64_t pi_cuda_ffn_collect(pi_cuda_ffn *f) {
    int64_t neurons = 0;
    for (int il = 0; il < f->n_layer; il++) {
        const int32_t *counts = f->host_rows + (size_t)il * f->max_runs;
        for (int r = 0; r < f->arriving[il]; r++) neurons += counts[r];
        f->arriving[il] = 0;
    }
    return neurons;
}

extern "C" void pi_cuda_ffn_free(pi_cuda_ffn *f) {
    if (!f) return;
    for (int il = 0; f->layers && il < f->n_layer; il++) {
        dev_layer *L = &f->layers[il];
        uint8_t *blocks[5] = { L->fc1.data, L->fc2.data, L->gate.data, L->up.data, L->down_t.data };
        for (uint8_t *p : blocks) cudaFree(p);
        cudaFree(L->gate_b);
        cudaFree(L->up_b);
    }
    free(f->layers);
    cudaFree(f->x);
    cudaFree(f->h);
    cudaFree(f->a);
    cudaFree(f->partial);
    cudaFree(f->sum);
    cudaFree(f->rows);
    cudaFreeHost(f->host_x);
    cudaFreeHost(f->host_sum);
    cudaFreeHost(f->host_rows);
    if (f->done) cudaEventDestroy(f->done);
    cudaGetLastError();
    free(f->arriving);
    free(f);
}
