/* ops.c - the forward pass's operations (ops.h): threaded matmul, norms, activation
 * quantization, activations and rope (attention is attention.c's). */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "lora.h"
#include "ops.h"

/* ---- parallel matmul ---- */

/* the rows a target computes */
static int target_rows(const pi_mm_target *t) { return t->rows ? t->n_rows : (int)t->w->n_out; }

typedef struct {
    const pi_kernels *kern;
    pi_act x;
    int nt;
    pi_mm_target targets[3];
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
        const pi_mm_target *tg = &t->targets[ti];
        const int rows = target_rows(tg), row_chunks = (rows + t->rows_per_chunk - 1) / t->rows_per_chunk;
        const int r0 = (c % row_chunks) * t->rows_per_chunk, t0 = (c / row_chunks) * t->toks_per_chunk;
        const int nr = rows - r0 < t->rows_per_chunk ? rows - r0 : t->rows_per_chunk;
        const int nt = t->nt - t0 < t->toks_per_chunk ? t->nt - t0 : t->toks_per_chunk;
        const pi_matmul_fn mm = pi_weight_matmul(t->kern, tg->w);
        mm(tg->w->data, tg->w->row_bytes, tg->rows ? tg->rows + r0 : NULL, r0, nr, pi_act_from(t->x, t0), nt,
           tg->Y + (size_t)t0 * rows + r0, rows);
    }
    (void)ith;
    (void)nth;
}

/* ROW_CHUNK_BYTES: a streamed chunk's weights; STREAMED_TOKENS: the most tokens that stream the
 * weights (bench/batch_decode.py measures the choice) */
enum { ROW_CHUNK_BYTES = 256 * 1024, STREAMED_TOKENS = 8 };

static int decode_chunk_rows(const pi_mm_target *targets, int n_targets, int nth) {
    int rows = 0;
    for (int i = 0; i < n_targets; i++) rows += target_rows(&targets[i]);
    const int by_bytes = (int)(ROW_CHUNK_BYTES / targets[0].w->row_bytes);
    const int balanced = rows / (4 * nth);
    int chunk = by_bytes < balanced ? by_bytes : balanced;
    return chunk < 32 ? 32 : chunk / PI_GROUP_ROWS * PI_GROUP_ROWS; /* whole groups */
}

/* Y_i[t] = W_i x[t] for each target; outputs are dense [nt][n_out]. */
static void matmul_weights(pi_context *c, pi_act x, int nt, const pi_mm_target *targets, int n_targets) {
    mm_task t = { .kern = &c->kern, .x = x, .nt = nt, .n_targets = n_targets };
    const int nth = nt > 1 ? c->params.n_threads_batch : c->params.n_threads;
    /* prefill: 64x64 tiles stay in L2. decode, and the few tokens of a batch of sequences, which
     * read the weights once as decode does: chunks of ~ROW_CHUNK_BYTES with every token, since
     * the kernels' prefetch restarts with every call, but at least 4 chunks per thread to
     * balance the cores */
    const int streamed = nt <= STREAMED_TOKENS;
    t.rows_per_chunk = streamed ? decode_chunk_rows(targets, n_targets, nth) : 64;
    t.toks_per_chunk = streamed ? nt : 64;
    for (int i = 0; i < n_targets; i++) {
        t.targets[i] = targets[i];
        int row_chunks = (target_rows(&targets[i]) + t.rows_per_chunk - 1) / t.rows_per_chunk;
        t.chunks[i] = row_chunks * ((nt + t.toks_per_chunk - 1) / t.toks_per_chunk);
        t.n_chunks += t.chunks[i];
    }
    atomic_init(&t.next, 0);
    pi_threadpool_run(c->pool, mm_worker, &t, nth);
}

/* Y[t] += s B mid[t] for the nt rows of rank in c->lora.mid: the second half of a pair's term */
static void lora_b_add(pi_context *c, const pi_lora_pair *p, int nt, float *Y) {
    const pi_mm_target out = { &p->b, c->lora.out };
    matmul_weights(c, pi_quantize(&c->kern, c->lora.mid, c->lora.midq, nt, (int)p->b.n_in), nt, &out, 1);
    c->vec.axpy(pi_lora_pair_scale(c->lora.adapter, p, c->lora.scale), c->lora.out, Y, nt * (int)p->b.n_out);
}

/* Y[t] += s B (A x[t]), in llama.cpp's order: A x, then B of it, scaled and added */
static void lora_add(pi_context *c, const pi_lora_pair *p, pi_act x, int nt, float *Y) {
    const pi_mm_target mid = { &p->a, c->lora.mid };
    matmul_weights(c, x, nt, &mid, 1);
    lora_b_add(c, p, nt, Y);
}

void pi_matmul(pi_context *c, pi_act x, int nt, const pi_mm_target *targets, int n_targets) {
    matmul_weights(c, x, nt, targets, n_targets);
    for (int i = 0; c->lora.adapter && i < n_targets; i++) {
        const pi_lora_pair *p = pi_lora_find(c->lora.adapter, targets[i].w);
        if (p) lora_add(c, p, x, nt, targets[i].Y);
    }
}

/* x[t] += s B (row tokens[t] of A): the embedding's pair holds a row of rank per token */
void pi_lora_embed(pi_context *c, const int32_t *tokens, int n) {
    const pi_lora_pair *p = pi_lora_find(c->lora.adapter, &c->model->token_embd);
    if (!p) return;
    const int rank = (int)p->a.n_in;
    for (int t = 0; t < n; t++)
        c->kern.dequant[p->a.type](p->a.data + (size_t)tokens[t] * p->a.row_bytes, c->lora.mid + (size_t)t * rank, rank);
    lora_b_add(c, p, n, c->s.x);
}

/* ---- the token embedding ---- */

void pi_token_rows(const pi_context *c, const int32_t *tokens, int n) {
    const pi_weight *w = &c->model->token_embd;
    const int d = (int)w->n_in;
    const pi_dequant_fn dequant = c->kern.dequant[w->type];
    for (int t = 0; t < n; t++) {
        float *x = c->s.x + (size_t)t * d;
        if (!w->grouped) {
            dequant(w->data + (size_t)tokens[t] * w->row_bytes, x, d);
            continue;
        }
        const int bs = pi_type_block_size(w->type);
        for (int b = 0; b < d / bs; b++) { /* a grouped row: its blocks one by one out of their groups */
            pi_any_block block;
            pi_group_row_block(w->type, w->data, w->row_bytes, tokens[t], (size_t)b, (uint8_t *)&block);
            dequant(&block, x + (size_t)b * bs, bs);
        }
    }
}

/* ---- the O(d) steps ---- */

void pi_add_bias(float *y, const float *b, int n, int dim) {
    if (!b) return;
    for (int t = 0; t < n; t++)
        for (int i = 0; i < dim; i++) y[(size_t)t * dim + i] += b[i];
}

/* out[t] = x[t] / rms(x[t]) * w, as ggml's rms_norm: the squares (each rounded to float) summed
 * in order in double, their mean rounded to float before eps is added */
void pi_rmsnorm(const pi_context *c, const float *x, const float *w, float *out, int n, int d) {
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * d;
        float *ot = out + (size_t)t * d;
        double sum = 0.0;
        for (int i = 0; i < d; i++) sum += (double)(xt[i] * xt[i]);
        const float mean = (float)(sum / d);
        const float inv = 1.0f / sqrtf(mean + c->model->info.norm_eps);
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
void pi_norm(const pi_context *c, const float *x, const float *w, const float *b, float *out, int n) {
    const int d = c->model->info.n_embd;
    if (c->model->layer_norm) layernorm(c, x, w, out, n, d);
    else pi_rmsnorm(c, x, w, out, n, d);
    pi_add_bias(out, b, n, d);
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
 * table for the local layers' base (no scaling) when the model has them. Angles as ggml's rope
 * cache: theta = pos, times base^(-2/n_rot) (powf) once per pair, all in float; divided by the
 * pair's rope_freqs divisor, then times freq_scale. */
void pi_rope_table(pi_context *c, int n) {
    const pi_model *m = c->model;
    const int half = m->info.n_rot / 2, tables = m->rope_base_local > 0.0f ? 2 : 1;
    for (int k = 0; k < tables; k++) {
        const float base = k ? m->rope_base_local : m->info.rope_freq_base;
        const float step = powf(base, -2.0f / (float)m->info.n_rot), scale = k ? 1.0f : m->info.rope_freq_scale;
        const float *freqs = k ? NULL : m->rope_freqs;
        for (int t = 0; t < n; t++) {
            float theta = (float)c->s.tok_pos[t];
            float *cs = c->s.rope_cs + ((size_t)k * c->n_batch + t) * half * 2;
            for (int i = 0; i < half; i++, theta *= step) {
                const float angle = scale * (freqs ? theta / freqs[i] : theta);
                cs[2 * i] = cosf(angle);
                cs[2 * i + 1] = sinf(angle);
            }
        }
    }
}

/* RoPE on the first n_rot dims of each head: llama's "normal" form rotates adjacent pairs
 * (x[2i], x[2i+1]), the NeoX form (gemma) pairs (x[i], x[i + n_rot/2]) */
void pi_rope(const pi_context *c, float *x, int n_heads, int n, int local) {
    const int hd = c->model->head_dim, half = c->model->info.n_rot / 2;
    const int step = c->model->rope_neox ? 1 : 2, other = c->model->rope_neox ? half : 1;
    for (int t = 0; t < n; t++) {
        const float *cs = c->s.rope_cs + ((size_t)local * c->n_batch + t) * half * 2;
        for (int h = 0; h < n_heads; h++) c->vec.rotate(x + ((size_t)t * n_heads + h) * hd, cs, half, step, other);
    }
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
    float *acc = t->c->sparse.down_acc + (size_t)ith * d;
    memset(acc, 0, (size_t)d * sizeof(float));
    for (int j0 = ith * DOWN_RUN; j0 < t->n; j0 += nth * DOWN_RUN) {
        const int j1 = j0 + DOWN_RUN < t->n ? j0 + DOWN_RUN : t->n;
        /* the kernel skips ReLU zeros without reading their rows */
        t->c->kern.axpy_rows[w->type](w->data + (size_t)j0 * w->row_bytes, w->row_bytes, NULL, t->a + j0, j1 - j0,
                                      acc, d);
    }
}

void pi_down_by_rows(pi_context *c, const pi_weight *w, const float *a, int n, float *y) {
    down_task t = { .c = c, .w = w, .a = a, .n = n };
    const int nth = c->params.n_threads;
    pi_threadpool_run(c->pool, down_worker, &t, nth);
    const int d = (int)w->n_in;
    memcpy(y, c->sparse.down_acc, (size_t)d * sizeof(float));
    for (int i = 1; i < nth; i++) c->vec.axpy(1.0f, c->sparse.down_acc + (size_t)i * d, y, d);
}

