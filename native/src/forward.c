/* forward.c - the transformer forward pass for a batch of tokens, read top to bottom in pi_forward.
 *
 * Shapes: B tokens in this step, d = n_embd, hd = head_dim, q_dim = n_head*hd, kv_dim = n_head_kv*hd.
 * Matmuls and attention run on the thread pool; the O(d) steps between them run on the caller. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "context.h"
#include "ffn_sparse.h"
#include "offload.h"
#include "status.h"

/* ---- parallel matmul: one task covers up to three weights that read the same input ---- */

typedef struct {
    const pi_weight *w;
    float *Y;             /* [nt][w->n_out] */
} mm_target;

typedef struct {
    const pi_kernels *kern;
    pi_act x;
    int nt;
    mm_target targets[3];
    int n_targets;
    int rows_per_chunk, toks_per_chunk;
    int chunks[3];      /* chunks of each target */
    int n_chunks;
    atomic_int next;    /* chunks are claimed dynamically, so a slower core simply takes fewer */
} mm_task;

static void mm_worker(void *arg, int ith, int nth) {
    mm_task *t = arg;
    for (;;) {
        int c = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
        if (c >= t->n_chunks) return;
        int ti = 0;
        while (c >= t->chunks[ti]) c -= t->chunks[ti++];
        const mm_target *tg = &t->targets[ti];
        const int rows = (int)tg->w->n_out, row_chunks = (rows + t->rows_per_chunk - 1) / t->rows_per_chunk;
        const int r0 = (c % row_chunks) * t->rows_per_chunk, t0 = (c / row_chunks) * t->toks_per_chunk;
        const int nr = rows - r0 < t->rows_per_chunk ? rows - r0 : t->rows_per_chunk;
        const int nt = t->nt - t0 < t->toks_per_chunk ? t->nt - t0 : t->toks_per_chunk;
        t->kern->matmul[tg->w->type](tg->w->data, tg->w->row_bytes, NULL, r0, nr, pi_act_from(t->x, t0), nt,
                                     tg->Y + (size_t)t0 * rows + r0, rows);
    }
    (void)ith;
    (void)nth;
}

enum { ROW_CHUNK_BYTES = 256 * 1024 };

static int decode_chunk_rows(const mm_target *targets, int n_targets, int nth) {
    int rows = 0;
    for (int i = 0; i < n_targets; i++) rows += (int)targets[i].w->n_out;
    const int by_bytes = (int)(ROW_CHUNK_BYTES / targets[0].w->row_bytes);
    const int balanced = rows / (4 * nth);
    int chunk = by_bytes < balanced ? by_bytes : balanced;
    return chunk < 32 ? 32 : chunk / 4 * 4;
}

/* Y_i[t] = W_i x[t] for each target; outputs are dense [nt][n_out]. */
static void matmul(pi_context *c, pi_act x, int nt, const mm_target *targets, int n_targets) {
    mm_task t = { .kern = &c->kern, .x = x, .nt = nt, .n_targets = n_targets };
    const int nth = nt > 1 ? c->params.n_threads_batch : c->params.n_threads;
    /* prefill: 64x64 tiles stay in L2. decode: chunks of ~ROW_CHUNK_BYTES, since the kernels'
     * prefetch restarts with every call, but at least 4 chunks per thread to balance the cores */
    t.rows_per_chunk = nt > 1 ? 64 : decode_chunk_rows(targets, n_targets, nth);
    t.toks_per_chunk = 64;
    for (int i = 0; i < n_targets; i++) {
        t.targets[i] = targets[i];
        int row_chunks = ((int)targets[i].w->n_out + t.rows_per_chunk - 1) / t.rows_per_chunk;
        t.chunks[i] = row_chunks * ((nt + t.toks_per_chunk - 1) / t.toks_per_chunk);
        t.n_chunks += t.chunks[i];
    }
    atomic_init(&t.next, 0);
    pi_threadpool_run(c->pool, mm_worker, &t, nth);
}

/* ---- attention over the KV cache: one (token, head) pair per work item ---- */

typedef struct {
    pi_context *c;
    int layer, n, pos0, local;
    float *out; /* [n][q_dim] */
} attn_task;

static void attn_worker(void *arg, int ith, int nth) {
    const attn_task *a = arg;
    const pi_context *c = a->c;
    const pi_model *m = c->model;
    const int n_head = m->info.n_head, hd = m->head_dim, group = n_head / m->info.n_head_kv;
    const int q_dim = n_head * hd, kv_dim = m->info.n_head_kv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    const pi_fp16 *k_layer = c->k_cache + (size_t)a->layer * c->n_ctx * kv_dim;
    const pi_fp16 *v_layer = c->v_cache + (size_t)a->layer * c->n_ctx * kv_dim;
    float *att = c->att + (size_t)ith * c->n_ctx;
    for (int item = ith; item < a->n * n_head; item += nth) {
        const int t = item / n_head, h = item % n_head, n_kv = a->pos0 + t + 1; /* causal: keys 0..pos */
        /* a local layer sees only the last swa_window positions */
        const int first = a->local && n_kv > m->swa_window ? n_kv - m->swa_window : 0;
        const float *q = c->q + (size_t)t * q_dim + (size_t)h * hd;
        const pi_fp16 *k = k_layer + (size_t)(h / group) * hd, *v = v_layer + (size_t)(h / group) * hd;
        float max = -INFINITY;
        for (int p = first; p < n_kv; p++) {
            att[p] = c->vec.dot_f16(q, k + (size_t)p * kv_dim, hd) * scale;
            if (m->attn_softcap > 0.0f) att[p] = m->attn_softcap * tanhf(att[p] / m->attn_softcap);
            if (att[p] > max) max = att[p];
        }
        const float inv_sum = 1.0f / c->vec.exp_sub_sum(att + first, max, n_kv - first);
        float *out = a->out + (size_t)t * q_dim + (size_t)h * hd;
        memset(out, 0, (size_t)hd * sizeof(float));
        /* probabilities rounded to f16 as llama.cpp's f16 KQ·V product does */
        for (int p = first; p < n_kv; p++)
            c->vec.axpy_f16(pi_fp16_to_f32(pi_f32_to_fp16(att[p] * inv_sum)), v + (size_t)p * kv_dim, out, hd);
    }
}

/* ---- the O(d) steps ---- */

static void add_bias(float *y, const float *b, int n, int dim) {
    if (!b) return;
    for (int t = 0; t < n; t++)
        for (int i = 0; i < dim; i++) y[(size_t)t * dim + i] += b[i];
}

/* out[t] = x[t] / rms(x[t]) * w */
static void rmsnorm(const pi_context *c, const float *x, const float *w, float *out, int n, int d) {
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * d;
        float *ot = out + (size_t)t * d;
        const float inv = 1.0f / sqrtf(c->vec.sum_squares(xt, d) / d + c->model->info.norm_eps);
        for (int i = 0; i < d; i++) ot[i] = xt[i] * inv * w[i];
    }
}

/* out[t] = (x[t] - mean) / sqrt(variance + eps) * w, as ggml_norm (sums in double) */
static void layernorm(const pi_context *c, const float *x, const float *w, float *out, int n, int d) {
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * d;
        float *ot = out + (size_t)t * d;
        double sum = 0.0, sum2 = 0.0;
        for (int i = 0; i < d; i++) sum += xt[i];
        const float mean = (float)(sum / d);
        for (int i = 0; i < d; i++) sum2 += (double)(xt[i] - mean) * (xt[i] - mean);
        const float inv = 1.0f / sqrtf((float)(sum2 / d) + c->model->info.norm_eps);
        for (int i = 0; i < d; i++) ot[i] = (xt[i] - mean) * inv * w[i];
    }
}

/* a block's input norm: RMSNorm, or LayerNorm (opt, falcon), then its bias when it has one */
static void norm(const pi_context *c, const float *x, const float *w, const float *b, float *out, int n) {
    const int d = c->model->info.n_embd;
    if (c->model->layer_norm) layernorm(c, x, w, out, n, d);
    else rmsnorm(c, x, w, out, n, d);
    add_bias(out, b, n, d);
}

/* The activation in every form the kernels take: float, and the 8-bit blocks d allows (Q8_K only
 * where the store has room for it: the model has K-quant weights). */
pi_act pi_quantize(const pi_kernels *k, const float *x, pi_act_store store, int n, int d) {
    pi_act a = { x, NULL, NULL, d };
    if (d % QK == 0) {
        for (int t = 0; t < n; t++) k->quantize_act(x + (size_t)t * d, store.q + (size_t)t * (d / QK), d);
        a.q = store.q;
    }
    if (d % QK_K == 0 && store.k) {
        for (int t = 0; t < n; t++) k->quantize_act_k(x + (size_t)t * d, store.k + (size_t)t * (d / QK_K), d);
        a.k = store.k;
    }
    return a;
}

/* cos/sin of every rotated pair for each token of the step, shared by all layers; a second
 * table for the local layers' base when the model has them */
static void rope_table(pi_context *c, int pos0, int n) {
    const int half = c->model->info.n_rot / 2, tables = c->model->rope_base_local > 0.0f ? 2 : 1;
    for (int k = 0; k < tables; k++)
        for (int t = 0; t < n; t++)
            for (int i = 0; i < half; i++) {
                const float theta = (float)(pos0 + t) * c->inv_freq[k * half + i];
                float *cs = c->rope_cs + (((size_t)k * c->n_batch + t) * half + i) * 2;
                cs[0] = cosf(theta);
                cs[1] = sinf(theta);
            }
}

/* RoPE on the first n_rot dims of each head: llama's "normal" form rotates adjacent pairs
 * (x[2i], x[2i+1]), the NeoX form (gemma) pairs (x[i], x[i + n_rot/2]) */
static void rope(const pi_context *c, float *x, int n_heads, int n, int local) {
    const int hd = c->model->head_dim, half = c->model->info.n_rot / 2;
    const int step = c->model->rope_neox ? 1 : 2, other = c->model->rope_neox ? half : 1;
    for (int t = 0; t < n; t++) {
        const float *cs = c->rope_cs + ((size_t)local * c->n_batch + t) * half * 2;
        for (int h = 0; h < n_heads; h++) {
            float *v = x + ((size_t)t * n_heads + h) * hd;
            for (int i = 0; i < half; i++) {
                float *a = v + i * step, *b = a + other;
                const float x0 = *a, x1 = *b, cos = cs[2 * i], sin = cs[2 * i + 1];
                *a = x0 * cos - x1 * sin;
                *b = x0 * sin + x1 * cos;
            }
        }
    }
}

static void round_to_f16(const pi_context *c, float *x, int n) {
    for (int i = 0; i < n; i++) x[i] = pi_fp16_to_f32(pi_f32_to_fp16(x[i]));
}

/* GELU in its tanh form, as ggml's CPU backend computes it: from a table over f16 inputs (the
 * input rounded to f16, the result stored in f16), saturated outside [-10, 10]. The table is
 * built once per process, on first use. */
static pi_fp16 gelu_table[1 << 16];
static pthread_once_t gelu_table_once = PTHREAD_ONCE_INIT;

static void build_gelu_table(void) {
    for (uint32_t i = 0; i < 1u << 16; i++) {
        const float h = pi_fp16_to_f32((pi_fp16)i);
        gelu_table[i] = pi_f32_to_fp16(0.5f * h * (1.0f + tanhf(0.7978845608f * h * (1.0f + 0.044715f * h * h))));
    }
}

static float gelu_as_ggml(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    return pi_fp16_to_f32(gelu_table[pi_f32_to_fp16(x)]);
}

/* g = act(g, u) over count values: SwiGLU, GELU GLU (gemma), or the ReLU forms of ReluLLaMA /
 * ProSparse and dReLU; g = act(g) for the FFNs without a gate (opt, falcon), u unused */
void pi_activate(const pi_context *c, float *g, const float *u, size_t count) {
    switch (c->model->info.ffn_act) {
    case PI_ACT_RELU:
        for (size_t i = 0; i < count; i++) g[i] = g[i] > 0.0f ? g[i] : 0.0f;
        break;
    case PI_ACT_GELU:
        pthread_once(&gelu_table_once, build_gelu_table);
        for (size_t i = 0; i < count; i++) g[i] = gelu_as_ggml(g[i]);
        break;
    case PI_ACT_RELU_GLU:
        for (size_t i = 0; i < count; i++) g[i] = (g[i] > 0.0f ? g[i] : 0.0f) * u[i];
        break;
    case PI_ACT_RELU_RELU_GLU:
        for (size_t i = 0; i < count; i++) g[i] = (g[i] > 0.0f ? g[i] : 0.0f) * (u[i] > 0.0f ? u[i] : 0.0f);
        break;
    case PI_ACT_GELU_GLU:
        pthread_once(&gelu_table_once, build_gelu_table);
        for (size_t i = 0; i < count; i++) g[i] = gelu_as_ggml(g[i]) * u[i];
        break;
    default:
        c->vec.silu_mul(g, u, g, (int)count);
    }
}

/* copy n rows of `dim` floats into layer `il` of a capture buffer, at the step's token offset */
static void capture(const pi_context *c, float *buf, const float *rows, int il, int n, int dim) {
    const int first = c->n_past - c->capture_base;
    for (int t = 0; t < n && first + t < c->capture_max; t++)
        memcpy(buf + ((size_t)il * c->capture_max + (size_t)(first + t)) * dim, rows + (size_t)t * dim,
               (size_t)dim * sizeof(float));
}

/* ---- FFN: dense, or over the neurons the predictor picks ---- */

/* y = sum_j a[j] * row(j) of a weight stored one neuron per row (ffn_down_t), for PowerInfer's
 * files that lack ffn_down. Thread ith takes runs ith, ith + nth, ... into its own accumulator:
 * a fixed share, so that the sums, and the logits, are the same from run to run. */
typedef struct {
    pi_context *c;
    const pi_weight *w;
    const float *a;
    int n;
} down_task;

enum { DOWN_RUN = 32 };

static void down_worker(void *arg, int ith, int nth) {
    down_task *t = arg;
    const pi_weight *w = t->w;
    const int d = (int)w->n_in;
    float *acc = t->c->down_acc + (size_t)ith * d;
    memset(acc, 0, (size_t)d * sizeof(float));
    for (int j0 = ith * DOWN_RUN; j0 < t->n; j0 += nth * DOWN_RUN) {
        const int j1 = j0 + DOWN_RUN < t->n ? j0 + DOWN_RUN : t->n;
        /* the kernel skips ReLU zeros without reading their rows */
        t->c->kern.axpy_rows[w->type](w->data + (size_t)j0 * w->row_bytes, w->row_bytes, NULL, t->a + j0, j1 - j0,
                                      acc, d);
    }
}

static void down_by_rows(pi_context *c, const pi_weight *w, const float *a, int n, float *y) {
    down_task t = { .c = c, .w = w, .a = a, .n = n };
    const int nth = c->params.n_threads;
    pi_threadpool_run(c->pool, down_worker, &t, nth);
    const int d = (int)w->n_in;
    memcpy(y, c->down_acc, (size_t)d * sizeof(float));
    for (int i = 1; i < nth; i++) c->vec.axpy(1.0f, c->down_acc + (size_t)i * d, y, d);
}

/* delta[0..n) = FFN(xn) for n tokens, every neuron */
static void ffn_dense(pi_context *c, const pi_layer *L, int il, int n, pi_act a) {
    const int d = c->model->info.n_embd, n_ff = c->model->info.n_ff;
    if (L->ffn_gate.data) {
        const mm_target gate_up[2] = { { &L->ffn_gate, c->gate }, { &L->ffn_up, c->up } };
        matmul(c, a, n, gate_up, 2);
        add_bias(c->gate, L->ffn_gate_b, n, n_ff);
        add_bias(c->up, L->ffn_up_b, n, n_ff);
    } else { /* no gate: up(xn) goes where the activation is taken */
        const mm_target up = { &L->ffn_up, c->gate };
        matmul(c, a, n, &up, 1);
        add_bias(c->gate, L->ffn_up_b, n, n_ff);
    }
    pi_activate(c, c->gate, c->up, (size_t)n * n_ff);
    if (c->capture_act) capture(c, c->capture_act, c->gate, il, n, n_ff);
    if (L->ffn_down.data) {
        const mm_target down = { &L->ffn_down, c->delta };
        matmul(c, pi_quantize(&c->kern, c->gate, c->xq, n, n_ff), n, &down, 1);
    } else { /* PowerInfer's files: only the transposed down matrix */
        for (int t = 0; t < n; t++)
            down_by_rows(c, &L->ffn_down_t, c->gate + (size_t)t * n_ff, n_ff, c->delta + (size_t)t * d);
    }
    c->stats.ffn_rows_done += (int64_t)n * n_ff;
}

static int use_sparse(const pi_context *c, const pi_layer *L, int n) {
    if (!L->fc1.data || !L->ffn_down_t.data || c->capture_act) return 0;
    return c->params.sparse == PI_SPARSE_ALL || (c->params.sparse == PI_SPARSE_DECODE && n == 1);
}

/* ---- a layer's two blocks ---- */

/* x += down(act(gate(xn), up(xn))) with xn the FFN's normed input, over the predicted neurons
 * when sparse (context.h) */
int pi_ffn_block(pi_context *c, int il, int n) {
    const pi_layer *L = &c->model->layers[il];
    const int d = c->model->info.n_embd;
    norm(c, c->x, L->ffn_norm, L->ffn_norm_b, c->xn, n);
    if (c->capture_ffn_in) capture(c, c->capture_ffn_in, c->xn, il, n, d);
    const pi_act a = pi_quantize(&c->kern, c->xn, c->xq, n, d);
    if (use_sparse(c, L, n)) {
        for (int t = 0; t < n; t++) {
            const int rc = pi_ffn_sparse(c, il, t, pi_act_from(a, t));
            if (rc) return rc;
        }
    } else {
        ffn_dense(c, L, il, n, a);
    }
    add_bias(c->delta, L->ffn_down_b, n, d);
    if (L->post_ffn_norm) rmsnorm(c, c->delta, L->post_ffn_norm, c->delta, n, d);
    c->vec.axpy(1.0f, c->delta, c->x, n * d); /* residual */
    return PI_OK;
}

/* x[t] += position_embd[pos0 + t + offset]: learned positions (opt); pi_context_new keeps
 * every position of the context inside the table */
static void add_positions(pi_context *c, int pos0, int n) {
    const pi_weight *w = &c->model->position_embd;
    const int d = c->model->info.n_embd;
    for (int t = 0; t < n; t++) {
        const size_t row = (size_t)(pos0 + t + c->model->position_offset);
        c->kern.dequant[w->type](w->data + row * w->row_bytes, c->xn, d);
        c->vec.axpy(1.0f, c->xn, c->x + (size_t)t * d, d);
    }
}

/* x += attention_output(attention(norm(x))): q, k, v from the normed stream, rotated, k and v
 * appended to the cache; the parallel block's FFN (falcon) runs in the middle, while x is still
 * the layer's input */
int pi_attention_block(pi_context *c, int il, int n, int pos0) {
    const pi_model *m = c->model;
    const pi_layer *L = &m->layers[il];
    const pi_model_info *h = &m->info;
    const int d = h->n_embd, hd = m->head_dim, q_dim = h->n_head * hd, kv_dim = h->n_head_kv * hd;
    const int nth = n > 1 ? c->params.n_threads_batch : c->params.n_threads;
    int rc;

    norm(c, c->x, L->attn_norm, L->attn_norm_b, c->xn, n);
    pi_act a = pi_quantize(&c->kern, c->xn, c->xq, n, d);
    const mm_target qkv[3] = { { &L->attn_q, c->q }, { &L->attn_k, c->k }, { &L->attn_v, c->v } };
    matmul(c, a, n, qkv, 3);
    add_bias(c->q, L->attn_q_b, n, q_dim);
    add_bias(c->k, L->attn_k_b, n, kv_dim);
    add_bias(c->v, L->attn_v_b, n, kv_dim);
    /* parallel block: the FFN reads the layer's input as well and adds to x; attention needs
     * only q, k, v from here on */
    if (m->parallel && (rc = pi_ffn_block(c, il, n))) return rc;
    if (L->attn_q_norm) rmsnorm(c, c->q, L->attn_q_norm, c->q, n * h->n_head, hd); /* per head */
    if (L->attn_k_norm) rmsnorm(c, c->k, L->attn_k_norm, c->k, n * h->n_head_kv, hd);
    rope(c, c->q, h->n_head, n, L->rope_local);
    rope(c, c->k, h->n_head_kv, n, L->rope_local);
    const size_t cache_at = ((size_t)il * c->n_ctx + (size_t)pos0) * kv_dim;
    c->vec.to_f16(c->k, c->k_cache + cache_at, n * kv_dim);
    c->vec.to_f16(c->v, c->v_cache + cache_at, n * kv_dim);
    round_to_f16(c, c->q, n * q_dim); /* llama.cpp multiplies q with the f16 keys in f16 */

    /* softmax(q k^T / sqrt(hd)) v per head over positions 0..pos, into xn */
    attn_task at = { c, il, n, pos0, L->local, c->xn };
    pi_threadpool_run(c->pool, attn_worker, &at, nth);

    a = pi_quantize(&c->kern, c->xn, c->xq, n, q_dim);
    const mm_target o = { &L->attn_output, c->delta };
    matmul(c, a, n, &o, 1);
    add_bias(c->delta, L->attn_output_b, n, d);
    if (L->post_attn_norm) rmsnorm(c, c->delta, L->post_attn_norm, c->delta, n, d);
    c->vec.axpy(1.0f, c->delta, c->x, n * d); /* residual */
    return PI_OK;
}

/* ---- the CPU's steps (pi_layer_ops), each first bringing the stream to the host ---- */

static int cpu_attention(pi_context *c, int il, int n, int pos0) {
    const int rc = pi_x_to_host(c, n);
    return rc ? rc : pi_attention_block(c, il, n, pos0);
}

static int cpu_ffn(pi_context *c, int il, int n) {
    const int rc = pi_x_to_host(c, n);
    return rc ? rc : pi_ffn_block(c, il, n);
}

/* the parallel block's FFN ran inside its attention step */
static int ffn_in_attention(pi_context *c, int il, int n) {
    (void)c, (void)il, (void)n;
    return PI_OK;
}

/* logits of the last position, or of every position with logits_all */
int pi_logits_block(pi_context *c, int n, int pos0, int logits_mode) {
    const pi_model *m = c->model;
    const int d = m->info.n_embd, first = logits_mode == PI_LOGITS_ALL ? 0 : n - 1, n_out = n - first;
    const float *normed = c->out_x;
    if (c->embd) normed = c->embd + (size_t)(pos0 + first) * d; /* the embeddings are these rows */
    else norm(c, c->x + (size_t)first * d, m->output_norm, m->output_norm_b, c->out_x, n_out);
    pi_act a = pi_quantize(&c->kern, normed, c->out_q, n_out, d);
    const mm_target out = { &m->output, pi_logits_rows(c, pos0, logits_mode) };
    matmul(c, a, n_out, &out, 1);
    add_bias(out.Y, m->output_b, n_out, m->info.n_vocab);
    return PI_OK;
}

/* cap * tanh(logit / cap) over the rows logits_mode wrote */
static void final_softcap(pi_context *c, int n, int pos0, int logits_mode) {
    const float cap = c->model->final_softcap;
    const size_t n_vocab = (size_t)c->model->info.n_vocab;
    float *rows = pi_logits_rows(c, pos0, logits_mode);
    const size_t count = (logits_mode == PI_LOGITS_ALL ? (size_t)n : 1) * n_vocab;
    for (size_t i = 0; i < count; i++) rows[i] = cap * tanhf(rows[i] / cap);
}

static int cpu_logits(pi_context *c, int n, int pos0, int logits_mode) {
    const int rc = pi_x_to_host(c, n);
    return rc ? rc : pi_logits_block(c, n, pos0, logits_mode);
}

void pi_forward_cpu_ops(pi_context *c) {
    for (int il = 0; il < c->model->info.n_layer; il++)
        c->ops[il] = (pi_layer_ops){ cpu_attention, c->model->parallel ? ffn_in_attention : cpu_ffn };
    c->logits_op = cpu_logits;
}

/* ---- the forward pass ---- */

int pi_forward(pi_context *c, const int32_t *tokens, int n, int logits_mode) {
    const pi_model *m = c->model;
    const pi_model_info *h = &m->info;
    const int d = h->n_embd, n_ff = h->n_ff, pos0 = c->n_past;
    int rc;

    /* x[t] = token_embd[tokens[t]], on the host */
    for (int t = 0; t < n; t++)
        c->kern.dequant[m->token_embd.type](m->token_embd.data + (size_t)tokens[t] * m->token_embd.row_bytes,
                                            c->x + (size_t)t * d, d);
    c->x_on_device = 0;
    if (m->embd_scale != 1.0f)
        for (size_t i = 0; i < (size_t)n * d; i++) c->x[i] *= m->embd_scale;
    if (m->position_embd.data) add_positions(c, pos0, n);
    rope_table(c, pos0, n);

    /* each layer's attention and FFN, where the context placed them */
    for (int il = 0; il < h->n_layer; il++)
        if ((rc = c->ops[il].attention(c, il, n, pos0)) || (rc = c->ops[il].ffn(c, il, n))) return rc;

    /* embeddings: every position's final normed hidden state */
    if (c->embd) {
        if ((rc = pi_x_to_host(c, n))) return rc;
        norm(c, c->x, m->output_norm, m->output_norm_b, c->embd + (size_t)pos0 * d, n);
    }
    if (logits_mode != PI_LOGITS_NONE) {
        if ((rc = c->logits_op(c, n, pos0, logits_mode))) return rc;
        if (m->final_softcap > 0.0f) final_softcap(c, n, pos0, logits_mode);
    }
    c->n_past = pos0 + n;
    c->stats.tokens += n;
    c->stats.ffn_rows_dense += (int64_t)n * n_ff * h->n_layer;
    return PI_OK;
}
