// layers.cu - layers on a CUDA device, whole or their attention alone, and the output matrix
// (layers_cuda.h).
//
// The same block as forward.c's pi_forward, one kernel per step on one stream: RMSNorm or
// LayerNorm, the q/k/v, output and FFN matrices (a warp per row and token, decode.cuh), rope, the
// f16 KV cache, attention (a thread block per token and head), the activation and the residual
// adds; falcon's parallel block runs its FFN inside the attention step. Written for clarity first.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "cuda/decode.cuh"
#include "cuda/layers_cuda.h"

enum { WARPS = 8, THREADS = 256, MAX_HEAD_DIM = 1024 };

struct dev_block { // q.data NULL: the layer is not on the device; up.data NULL: its attention only
    dev_weight q, k, v, o, gate, up, down, down_t; // gate.data NULL: no gate; down.data NULL: down_t
    float *attn_norm, *ffn_norm, *attn_norm_b, *ffn_norm_b, *q_norm, *k_norm, *post_attn_norm, *post_ffn_norm;
    float *q_b, *k_b, *v_b, *o_b, *gate_b, *up_b, *down_b;
    __half *k_cache, *v_cache; // [n_ctx][kv_dim]
    PI_LAYER_TRAITS(PI_TRAIT_FIELD) // local, rope_local, no_rope (block_traits.h)
};

// The traits this block reads: attention() and ffn() below read every field of the two lists. A
// trait added to a list stops the build here until the block reads it too.
static_assert(0 PI_LAYER_TRAITS(PI_TRAIT_COUNT) == 3, "layers.cu reads local, rope_local and no_rope: read the new layer trait");
static_assert(0 PI_BLOCK_TRAITS(PI_TRAIT_COUNT) == 5,
              "layers.cu reads rope_neox, swa_window, layer_norm, parallel and attn_softcap: read the new block trait");

struct pi_cuda_layers {
    pi_cuda_shape s;
    int n_blocks;
    dev_block *blocks;
    cudaStream_t stream;
    float *x, *xn, *q, *k, *v, *att, *delta, *gate, *up; // [n_batch][...] activations
    float *scores;                                       // [n_batch * n_head][n_ctx]
    float *inv_freq;                                     // [2][n_rot / 2]
    float *host_x, *host_cold;                           // pinned [n_batch][n_embd], [n_embd]
    cudaEvent_t xn_ready;                                // the split's normed row is on the host
    dev_weight output;                                   // data NULL: the output is the host's
    float *output_norm, *output_norm_b, *output_b;       // [n_embd], [n_embd], [n_vocab]
    float *logits;                                       // [n_batch][n_vocab]
};

// ---- kernels ----

// a block-wide sum over blockDim.x (a multiple of 32) threads; every thread gets it
static __device__ float block_sum(float v, float *shared) {
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
    __syncthreads();
    float s = 0.0f;
    for (int w = 0; w < (int)blockDim.x / 32; w++) s += shared[w];
    __syncthreads();
    return s;
}

static __device__ float block_max(float v, float *shared) {
    for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = v;
    __syncthreads();
    float m = -INFINITY;
    for (int w = 0; w < (int)blockDim.x / 32; w++) m = fmaxf(m, shared[w]);
    __syncthreads();
    return m;
}

// out[r] = x[r] / rms(x[r]) * w (+ b), or with layer_norm (x[r] - mean) / std * w (+ b): one
// thread block per row of d
__global__ void k_norm(const float *x, const float *w, const float *b, float *out, int d, float eps, int layer_norm) {
    __shared__ float shared[32];
    const float *xr = x + (size_t)blockIdx.x * d;
    float *orow = out + (size_t)blockIdx.x * d;
    float mean = 0.0f;
    if (layer_norm) {
        float sum = 0.0f;
        for (int i = threadIdx.x; i < d; i += blockDim.x) sum += xr[i];
        mean = block_sum(sum, shared) / d;
    }
    float ss = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) ss += (xr[i] - mean) * (xr[i] - mean);
    const float inv = rsqrtf(block_sum(ss, shared) / d + eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) orow[i] = (xr[i] - mean) * inv * w[i] + (b ? b[i] : 0.0f);
}

// y[t][r] = dot(row r, x[t]) (+ b[r]) for the n tokens: a warp per row and tile of DOT_TILE
// tokens (grid.y), which reads and decodes the row once for the tile
__global__ void k_matmul(dev_weight w, const float *x, int n, float *y, const float *b) {
    const int64_t r = (int64_t)blockIdx.x * WARPS + threadIdx.x / 32;
    if (r >= w.n_rows) return;
    const int t0 = blockIdx.y * DOT_TILE, nt = n - t0 < DOT_TILE ? n - t0 : DOT_TILE;
    float acc[DOT_TILE];
    warp_dots(w, r, x + (size_t)t0 * w.n_in, w.n_in, nt, acc);
    if (threadIdx.x % 32) return;
    for (int t = 0; t < nt; t++) y[(size_t)(t0 + t) * w.n_rows + r] = acc[t] + (b ? b[r] : 0.0f);
}

// y[t][j] = sum over i of a[t][i] * w[i][j] (+ b[j]), w PowerInfer's transposed down matrix
// [n_ff][n_embd]: a thread per j, skipping the rows of zero activations (ReLU's) unread. Only
// n_embd threads a token: slow at decode, but only PowerInfer's own files (no ffn_down) take it,
// and only in layer offload; our converter keeps ffn_down, the split reads by runs (ffn.cu)
__global__ void k_matmul_t(dev_weight w, const float *a, float *y, const float *b) {
    const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= w.n_in) return;
    const float *at = a + (size_t)blockIdx.y * w.n_rows;
    float s = b ? b[j] : 0.0f;
    for (int64_t i = 0; i < w.n_rows; i++) // at[i] is the same for the whole warp: no divergence
        if (at[i] != 0.0f) s += at[i] * pi_dw_row(w.type, w.data + (size_t)i * w.row_bytes, j);
    y[(size_t)blockIdx.y * w.n_in + j] = s;
}

// RoPE on the first n_rot dims of each head of n tokens: pairs (2i, 2i + 1), or (i, i + n_rot/2)
// for NeoX; one thread per pair, grid.x the token and head
__global__ void k_rope(float *x, int n_heads, int hd, int half, int pos0, const float *inv_freq, int neox) {
    const int i = threadIdx.x, t = blockIdx.x / n_heads;
    if (i >= half) return;
    float *v = x + (size_t)blockIdx.x * hd;
    float *a = neox ? v + i : v + 2 * i, *b = neox ? a + half : a + 1;
    const float theta = (float)(pos0 + t) * inv_freq[i];
    float s, c;
    sincosf(theta, &s, &c);
    const float x0 = *a, x1 = *b;
    *a = x0 * c - x1 * s;
    *b = x0 * s + x1 * c;
}

// the cache rows of n new positions, in f16
__global__ void k_store(const float *src, __half *dst, int count) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) dst[i] = __float2half(src[i]);
}

// softmax(q k^T / sqrt(hd)) v for one (token, head) per thread block, over positions first..pos
// (first > 0 on sliding-window layers), the scores in global scratch. q rounded to f16 and the
// probabilities too, as the CPU path and llama.cpp's f16 products do.
__global__ void k_attention(const float *q, const __half *kc, const __half *vc, float *out, float *scores, int pos0,
                            int n_head, int group, int hd, int kv_dim, int window, int n_ctx, float softcap) {
    __shared__ float shared[32], qh[MAX_HEAD_DIM]; // q rounded once, read by every position
    const int t = blockIdx.x / n_head, h = blockIdx.x % n_head, n_kv = pos0 + t + 1;
    const int first = window > 0 && n_kv > window ? n_kv - window : 0;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) qh[i] = __half2float(__float2half(q[(size_t)blockIdx.x * hd + i]));
    __syncthreads();
    const __half *k = kc + (size_t)(h / group) * hd, *v = vc + (size_t)(h / group) * hd;
    float *s = scores + (size_t)blockIdx.x * n_ctx;
    const float scale = rsqrtf((float)hd);
    float max = -INFINITY;
    for (int p = first + threadIdx.x; p < n_kv; p += blockDim.x) {
        float dot = 0.0f;
        for (int i = 0; i < hd; i++) dot += qh[i] * __half2float(k[(size_t)p * kv_dim + i]);
        s[p] = softcap > 0.0f ? softcap * tanhf(dot * scale / softcap) : dot * scale;
        max = fmaxf(max, s[p]);
    }
    max = block_max(max, shared);
    float sum = 0.0f;
    for (int p = first + threadIdx.x; p < n_kv; p += blockDim.x) {
        s[p] = expf(s[p] - max);
        sum += s[p];
    }
    const float inv = 1.0f / block_sum(sum, shared); // its barriers also publish s[] to the block
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float acc = 0.0f;
        for (int p = first; p < n_kv; p++)
            acc += __half2float(__float2half(s[p] * inv)) * __half2float(v[(size_t)p * kv_dim + i]);
        out[(size_t)blockIdx.x * hd + i] = acc;
    }
}

// g = act(g, u) over count values (the gated activations of ops.c's pi_activate)
__global__ void k_activate(float *g, const float *u, int count, int act) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) g[i] = activate(act, g[i], u[i]);
}

__global__ void k_add(float *x, const float *delta, int count) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) x[i] += delta[i];
}

// the split's merge: delta = cold + hot (hot NULL: no hot runs), then + b, in the host's order
__global__ void k_merge(float *delta, const float *hot, const float *b, int count) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    float v = delta[i];
    if (hot) v += hot[i];
    if (b) v += b[i];
    delta[i] = v;
}

// ---- one layer ----

static unsigned blocks_for(int64_t count) { return (unsigned)((count + THREADS - 1) / THREADS); }

static void matmul(const pi_cuda_layers *g, const dev_weight &w, const float *x, int n, float *y, const float *b) {
    const dim3 grid((unsigned)((w.n_rows + WARPS - 1) / WARPS), (unsigned)((n + DOT_TILE - 1) / DOT_TILE));
    PI_LAUNCH(k_matmul, grid, WARPS * 32, g->stream)(w, x, n, y, b);
}

// RMSNorm, or LayerNorm with layer_norm; then the bias b when there is one
static void norm(const pi_cuda_layers *g, const float *x, const float *w, const float *b, float *out, int rows, int d,
                 int layer_norm) {
    PI_LAUNCH(k_norm, (unsigned)rows, THREADS, g->stream)(x, w, b, out, d, g->s.norm_eps, layer_norm);
}

// the block's own norms (q/k per head, gemma3's post-norms): always RMSNorm, without a bias
static void rmsnorm(const pi_cuda_layers *g, const float *x, const float *w, float *out, int rows, int d) {
    norm(g, x, w, nullptr, out, rows, d, 0);
}

static void add(const pi_cuda_layers *g, float *x, const float *delta, int count) {
    PI_LAUNCH(k_add, blocks_for(count), THREADS, g->stream)(x, delta, count);
}

// x += FFN(x), as blocks.c's pi_ffn_dense: with a gate or not (the activation then takes up's
// values), through ffn_down or PowerInfer's transposed ffn_down_t
static void ffn(pi_cuda_layers *g, int il, int n) {
    const pi_cuda_shape *s = &g->s;
    const dev_block *L = &g->blocks[il];
    const int d = s->n_embd;
    norm(g, g->x, L->ffn_norm, L->ffn_norm_b, g->xn, n, d, s->layer_norm);
    float *up = L->gate.data ? g->up : g->gate; // without a gate, up goes where the activation is taken
    if (L->gate.data) matmul(g, L->gate, g->xn, n, g->gate, L->gate_b);
    matmul(g, L->up, g->xn, n, up, L->up_b);
    PI_LAUNCH(k_activate, blocks_for(n * s->n_ff), THREADS, g->stream)(g->gate, up, n * s->n_ff, s->act);
    if (L->down.data) {
        matmul(g, L->down, g->gate, n, g->delta, L->down_b);
    } else {
        const dim3 grid(blocks_for(d), (unsigned)n);
        PI_LAUNCH(k_matmul_t, grid, THREADS, g->stream)(L->down_t, g->gate, g->delta, L->down_b);
    }
    if (L->post_ffn_norm) rmsnorm(g, g->delta, L->post_ffn_norm, g->delta, n, d);
    add(g, g->x, g->delta, n * d);
}

// x += attention(x) for n tokens at pos0.., as blocks.c's pi_attention_block (with the FFN inside
// in a parallel block)
static void attention(pi_cuda_layers *g, int il, int n, int pos0) {
    const pi_cuda_shape *s = &g->s;
    const dev_block *L = &g->blocks[il];
    const int d = s->n_embd, hd = s->head_dim, kv_dim = s->n_head_kv * hd, half = s->n_rot / 2;

    norm(g, g->x, L->attn_norm, L->attn_norm_b, g->xn, n, d, s->layer_norm);
    matmul(g, L->q, g->xn, n, g->q, L->q_b);
    matmul(g, L->k, g->xn, n, g->k, L->k_b);
    matmul(g, L->v, g->xn, n, g->v, L->v_b);
    // parallel block: the FFN reads the layer's input too; attention needs only q, k, v from here
    if (s->parallel) ffn(g, il, n);
    if (L->q_norm) rmsnorm(g, g->q, L->q_norm, g->q, n * s->n_head, hd);
    if (L->k_norm) rmsnorm(g, g->k, L->k_norm, g->k, n * s->n_head_kv, hd);
    const float *freq = g->inv_freq + (L->rope_local ? half : 0);
    if (half > 0 && !L->no_rope) {
        const unsigned nq = (unsigned)(n * s->n_head), nk = (unsigned)(n * s->n_head_kv);
        PI_LAUNCH(k_rope, nq, (unsigned)half, g->stream)(g->q, s->n_head, hd, half, pos0, freq, s->rope_neox);
        PI_LAUNCH(k_rope, nk, (unsigned)half, g->stream)(g->k, s->n_head_kv, hd, half, pos0, freq, s->rope_neox);
    }
    const size_t cached = (size_t)pos0 * kv_dim;
    PI_LAUNCH(k_store, blocks_for(n * kv_dim), THREADS, g->stream)(g->k, L->k_cache + cached, n * kv_dim);
    PI_LAUNCH(k_store, blocks_for(n * kv_dim), THREADS, g->stream)(g->v, L->v_cache + cached, n * kv_dim);
    PI_LAUNCH(k_attention, (unsigned)(n * s->n_head), 128, g->stream)(
        g->q, L->k_cache, L->v_cache, g->att, g->scores, pos0, s->n_head, s->n_head / s->n_head_kv, hd, kv_dim,
        L->local ? s->swa_window : 0, s->n_ctx, s->attn_softcap);
    matmul(g, L->o, g->att, n, g->delta, L->o_b);
    if (L->post_attn_norm) rmsnorm(g, g->delta, L->post_attn_norm, g->delta, n, d);
    add(g, g->x, g->delta, n * d);
}

// ---- host side ----

static int upload_block(dev_block *L, const pi_cuda_block *b, const pi_cuda_shape *s, char *err, size_t err_len) {
    const pi_cuda_weight *ws[8] = { &b->attn_q, &b->attn_k, &b->attn_v, &b->attn_output,
                                    &b->ffn_gate, &b->ffn_up, &b->ffn_down, &b->ffn_down_t };
    dev_weight *ds[8] = { &L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down, &L->down_t };
    for (int i = 0; i < 8; i++) {
        if (ws[i]->host && !device_reads(ws[i]))
            return snprintf(err, err_len, "CUDA: weight type %u is not supported on the device", ws[i]->type), -1;
        if (upload(ds[i], ws[i], err, err_len)) return -1;
    }
    const int d = s->n_embd, hd = s->head_dim, q_dim = s->n_head * hd, kv_dim = s->n_head_kv * hd;
    const struct { float **dst; const float *src; int n; } vs[] = {
        { &L->attn_norm, b->attn_norm, d }, { &L->ffn_norm, b->ffn_norm, d }, { &L->attn_norm_b, b->attn_norm_b, d },
        { &L->ffn_norm_b, b->ffn_norm_b, d }, { &L->q_norm, b->attn_q_norm, hd },
        { &L->k_norm, b->attn_k_norm, hd }, { &L->post_attn_norm, b->post_attn_norm, d },
        { &L->post_ffn_norm, b->post_ffn_norm, d }, { &L->q_b, b->attn_q_b, q_dim }, { &L->k_b, b->attn_k_b, kv_dim },
        { &L->v_b, b->attn_v_b, kv_dim }, { &L->o_b, b->attn_output_b, d }, { &L->gate_b, b->ffn_gate_b, s->n_ff },
        { &L->up_b, b->ffn_up_b, s->n_ff }, { &L->down_b, b->ffn_down_b, d },
    };
    for (const auto &v : vs)
        if (upload_floats(v.dst, v.src, v.n, err, err_len)) return -1;
#define COPY(type, name) L->name = b->name;
    PI_LAYER_TRAITS(COPY)
#undef COPY
    if (!L->q.data) return 0; // the host's layer
    const size_t cache = (size_t)s->n_ctx * kv_dim * sizeof(__half);
    TRY(cudaMalloc(&L->k_cache, cache), "allocating the KV cache");
    TRY(cudaMalloc(&L->v_cache, cache), "allocating the KV cache");
    return 0;
}

extern "C" int pi_cuda_layers_new(const pi_cuda_shape *shape, int n_blocks, const pi_cuda_block *blocks,
                                  pi_cuda_layers **out, char *err, size_t err_len) {
    *out = nullptr;
    pi_cuda_layers *g = (pi_cuda_layers *)calloc(1, sizeof *g);
    if (!g) return snprintf(err, err_len, "no memory for the CUDA layers"), -1;
    g->s = *shape;
    g->n_blocks = n_blocks;
    g->blocks = (dev_block *)calloc((size_t)(n_blocks > 0 ? n_blocks : 1), sizeof *g->blocks);
    *out = g; // from here pi_cuda_layers_free releases whatever was made
    if (!g->blocks) return snprintf(err, err_len, "no memory for the CUDA layers"), -1;
    const pi_cuda_shape *s = shape;
    if (s->n_rot / 2 > 1024) return snprintf(err, err_len, "CUDA: n_rot %d is too large for the rope kernel", s->n_rot), -1;
    if (s->head_dim > MAX_HEAD_DIM)
        return snprintf(err, err_len, "CUDA: head_dim %d is too large for the attention kernel", s->head_dim), -1;
    TRY(cudaSetDevice(0), "selecting device 0");
    TRY(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking), "creating a stream");
    for (int il = 0; il < n_blocks; il++)
        if (upload_block(&g->blocks[il], &blocks[il], s, err, err_len)) return -1;
    const size_t B = (size_t)s->n_batch, q_dim = (size_t)s->n_head * s->head_dim, kv_dim = (size_t)s->n_head_kv * s->head_dim;
    const size_t wide = q_dim > (size_t)s->n_embd ? q_dim : (size_t)s->n_embd;
    const struct { float **p; size_t n; } bufs[] = {
        { &g->x, B * s->n_embd }, { &g->xn, B * s->n_embd }, { &g->q, B * q_dim }, { &g->k, B * kv_dim },
        { &g->v, B * kv_dim }, { &g->att, B * wide }, { &g->delta, B * s->n_embd }, { &g->gate, B * s->n_ff },
        { &g->up, B * s->n_ff }, { &g->scores, B * s->n_head * (size_t)s->n_ctx }, { &g->inv_freq, (size_t)s->n_rot + 1 },
    };
    for (const auto &b : bufs) TRY(cudaMalloc(b.p, b.n * sizeof(float)), "allocating activations");
    TRY(cudaMemcpy(g->inv_freq, s->inv_freq, (size_t)s->n_rot * sizeof(float), cudaMemcpyHostToDevice), "uploading rope");
    TRY(cudaMallocHost(&g->host_x, B * s->n_embd * sizeof(float)), "pinning the residual stream");
    TRY(cudaMallocHost(&g->host_cold, (size_t)s->n_embd * sizeof(float)), "pinning the cold sum");
    TRY(cudaEventCreateWithFlags(&g->xn_ready, cudaEventDisableTiming), "creating an event");
    if (s->output.host) {
        if (!device_reads(&s->output))
            return snprintf(err, err_len, "CUDA: output type %u is not supported on the device", s->output.type), -1;
        if (upload(&g->output, &s->output, err, err_len) ||
            upload_floats(&g->output_norm, s->output_norm, s->n_embd, err, err_len) ||
            upload_floats(&g->output_norm_b, s->output_norm_b, s->n_embd, err, err_len) ||
            upload_floats(&g->output_b, s->output_b, (int)s->output.n_rows, err, err_len))
            return -1;
        TRY(cudaMalloc(&g->logits, B * (size_t)s->output.n_rows * sizeof(float)), "allocating logits");
    }
    return 0;
}

extern "C" int pi_cuda_x_in(pi_cuda_layers *g, const float *x, int n, char *err, size_t err_len) {
    if (n <= 0 || n > g->s.n_batch)
        return snprintf(err, err_len, "CUDA layers: %d tokens do not fit the device buffers", n), -1;
    const size_t bytes = (size_t)n * g->s.n_embd * sizeof(float);
    TRY(cudaStreamSynchronize(g->stream), "waiting for the device"); // host_x may still be in flight
    memcpy(g->host_x, x, bytes);
    TRY(cudaMemcpyAsync(g->x, g->host_x, bytes, cudaMemcpyHostToDevice, g->stream), "copying the residual stream");
    return 0;
}

extern "C" int pi_cuda_x_out(pi_cuda_layers *g, float *x, int n, char *err, size_t err_len) {
    const size_t bytes = (size_t)n * g->s.n_embd * sizeof(float);
    TRY(cudaGetLastError(), "launching the layer kernels");
    TRY(cudaMemcpyAsync(g->host_x, g->x, bytes, cudaMemcpyDeviceToHost, g->stream), "copying the residual stream back");
    TRY(cudaStreamSynchronize(g->stream), "running the layers");
    memcpy(x, g->host_x, bytes);
    return 0;
}

// layer il holds what a step needs: its attention, and with ffn its FFN; the tokens fit
static int check_step(const pi_cuda_layers *g, int il, int n, int pos0, int ffn, char *err, size_t err_len) {
    if (il < 0 || il >= g->n_blocks || !g->blocks[il].q.data || (ffn && !g->blocks[il].up.data))
        return snprintf(err, err_len, "CUDA layers: the %s of layer %d is not on the device", ffn ? "FFN" : "attention", il), -1;
    if (n <= 0 || n > g->s.n_batch || pos0 < 0 || pos0 + n > g->s.n_ctx)
        return snprintf(err, err_len, "CUDA layers: %d tokens at %d do not fit the device buffers", n, pos0), -1;
    return 0;
}

extern "C" int pi_cuda_layer_attention(pi_cuda_layers *g, int il, int n, int pos0, char *err, size_t err_len) {
    if (check_step(g, il, n, pos0, 0, err, err_len)) return -1;
    attention(g, il, n, pos0);
    TRY(cudaGetLastError(), "launching the attention kernels");
    return 0;
}

extern "C" int pi_cuda_layer_ffn(pi_cuda_layers *g, int il, int n, char *err, size_t err_len) {
    if (check_step(g, il, n, 0, 1, err, err_len)) return -1;
    ffn(g, il, n);
    TRY(cudaGetLastError(), "launching the FFN kernels");
    return 0;
}

extern "C" int pi_cuda_logits(pi_cuda_layers *g, int n, int first, float *logits, char *err, size_t err_len) {
    if (!g->output.data || first < 0 || first >= n || n > g->s.n_batch)
        return snprintf(err, err_len, "CUDA layers: no output matrix on the device, or rows %d.. of %d", first, n), -1;
    const int d = g->s.n_embd, rows = n - first;
    norm(g, g->x + (size_t)first * d, g->output_norm, g->output_norm_b, g->xn, rows, d, g->s.layer_norm);
    matmul(g, g->output, g->xn, rows, g->logits, g->output_b);
    TRY(cudaGetLastError(), "launching the output kernels");
    TRY(cudaMemcpyAsync(logits, g->logits, (size_t)rows * g->output.n_rows * sizeof(float), cudaMemcpyDeviceToHost,
                        g->stream), "copying the logits back");
    TRY(cudaStreamSynchronize(g->stream), "running the output matrix");
    return 0;
}

extern "C" void *pi_cuda_layers_stream(pi_cuda_layers *g) { return (void *)g->stream; }

extern "C" const float *pi_cuda_layers_xn(const pi_cuda_layers *g) { return g->xn; }

// the split needs layer il's attention here (the stream is on the device after it) and its FFN norm
static int check_split(const pi_cuda_layers *g, int il, int t, char *err, size_t err_len) {
    if (il < 0 || il >= g->n_blocks || !g->blocks[il].q.data || !g->blocks[il].ffn_norm || t < 0 || t >= g->s.n_batch)
        return snprintf(err, err_len, "CUDA layers: the split's norm of layer %d, token %d, is not on the device", il, t),
               -1;
    return 0;
}

extern "C" int pi_cuda_split_norm(pi_cuda_layers *g, int il, int t, float *xn, char *err, size_t err_len) {
    if (check_split(g, il, t, err, err_len)) return -1;
    const int d = g->s.n_embd;
    const dev_block *L = &g->blocks[il];
    norm(g, g->x + (size_t)t * d, L->ffn_norm, L->ffn_norm_b, g->xn, 1, d, g->s.layer_norm);
    TRY(cudaGetLastError(), "launching the FFN norm");
    TRY(cudaMemcpyAsync(g->host_x, g->xn, (size_t)d * sizeof(float), cudaMemcpyDeviceToHost, g->stream),
        "copying the normed input back");
    TRY(cudaEventRecord(g->xn_ready, g->stream), "recording the event");
    TRY(cudaEventSynchronize(g->xn_ready), "norming the FFN input");
    memcpy(xn, g->host_x, (size_t)d * sizeof(float));
    return 0;
}

extern "C" int pi_cuda_split_merge(pi_cuda_layers *g, int il, int t, const float *hot, const float *cold, char *err,
                                   size_t err_len) {
    if (check_split(g, il, t, err, err_len)) return -1;
    const int d = g->s.n_embd;
    const dev_block *L = &g->blocks[il];
    memcpy(g->host_cold, cold, (size_t)d * sizeof(float));
    TRY(cudaMemcpyAsync(g->delta, g->host_cold, (size_t)d * sizeof(float), cudaMemcpyHostToDevice, g->stream),
        "copying the cold sum");
    PI_LAUNCH(k_merge, blocks_for(d), THREADS, g->stream)(g->delta, hot, L->down_b, d);
    if (L->post_ffn_norm) rmsnorm(g, g->delta, L->post_ffn_norm, g->delta, 1, d);
    add(g, g->x + (size_t)t * d, g->delta, d);
    TRY(cudaGetLastError(), "launching the merge");
    return 0;
}

extern "C" void pi_cuda_layers_free(pi_cuda_layers *g) {
    if (!g) return;
    for (int il = 0; g->blocks && il < g->n_blocks; il++) {
        dev_block *L = &g->blocks[il];
        void *ps[] = { L->q.data, L->k.data, L->v.data, L->o.data, L->gate.data, L->up.data, L->down.data,
                       L->down_t.data, L->attn_norm, L->ffn_norm, L->attn_norm_b, L->ffn_norm_b, L->q_norm, L->k_norm,
                       L->post_attn_norm, L->post_ffn_norm,
                       L->q_b, L->k_b, L->v_b, L->o_b, L->gate_b, L->up_b, L->down_b, L->k_cache, L->v_cache };
        for (void *p : ps) cudaFree(p);
    }
    free(g->blocks);
    void *bufs[] = { g->x, g->xn, g->q, g->k, g->v, g->att, g->delta, g->gate, g->up, g->scores, g->inv_freq,
                     g->output.data, g->output_norm, g->output_norm_b, g->output_b, g->logits };
    for (void *p : bufs) cudaFree(p);
    cudaFreeHost(g->host_x);
    cudaFreeHost(g->host_cold);
    if (g->xn_ready) cudaEventDestroy(g->xn_ready);
    if (g->stream) cudaStreamDestroy(g->stream);
    cudaGetLastError();
    free(g);
}
