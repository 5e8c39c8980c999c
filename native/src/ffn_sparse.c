/* ffn_sparse.c - the predictor-driven FFN of one token (ffn_sparse.h).
 *
 * Per layer: logits = fc2 relu(fc1 x), one per neuron; a neuron runs when its logit reaches the
 * layer's threshold; gate and up only for those rows, the activation, and down as the sum of
 * their ffn_down_t rows weighted by the activations. */
#include <string.h>

#include "device/device.h"
#include "ffn_sparse.h"
#include "ops.h"
#include "placement.h"
#include "token_bytes.h"
#include "status.h"

/* the weight row of position p */
static int32_t row_of(const ffn_rows *w, int p) { return w->rows ? w->rows[p] : p; }

/* y[j] += b[neuron of position pos[j]] */
static void add_bias_rows(float *y, const float *b, const int32_t *layout, const int32_t *pos, int n) {
    if (!b) return;
    for (int j = 0; j < n; j++) y[j] += b[layout ? layout[pos[j]] : pos[j]];
}

/* Ask for a run's scattered rows all at once: the kernels prefetch a few rows ahead, which for
 * a dozen rows picked out of a run means waiting on memory for each in turn. */
static void prefetch_rows(const pi_weight *w, const int32_t *rows, int n) {
    if (!w->data) return; /* no gate */
    for (int j = 0; j < n; j++) {
        const char *row = (const char *)w->data + (size_t)rows[j] * w->row_bytes;
        for (size_t off = 0; off < w->row_bytes; off += 64) __builtin_prefetch(row + off, 0, 2);
    }
}

/* h = relu(fc1 x) with fc1's rows split between the threads: every thread's runs read one hidden
 * layer, computed once (each row's dot is the same whoever computes it) */
typedef struct {
    const pi_kernels *kern;
    pi_weight fc1;
    pi_act x;
    float *h;
} hidden_task;

static void hidden_worker(void *arg, int ith, int nth) {
    const hidden_task *t = arg;
    const int rank = (int)t->fc1.n_out, per = (rank / nth + QK - 1) / QK * QK, r0 = ith * per;
    const int n = rank - r0 < per ? rank - r0 : per;
    if (n > 0) t->kern->matmul[t->fc1.type](t->fc1.data, t->fc1.row_bytes, NULL, r0, n, t->x, 1, t->h + r0, rank);
}

pi_act pi_ffn_hidden(const ffn_job *job, const ffn_rows *w, int slot, int n_threads) {
    pi_context *c = job->c;
    const int rank = (int)w->fc1.n_out;
    float *h = c->sparse.pred_h + (size_t)slot * c->sparse.rank_stride;
    const pi_act_store hq = { c->sparse.pred_hq.q + (size_t)slot * (c->sparse.rank_stride / QK),
                              c->sparse.pred_hq.k ? c->sparse.pred_hq.k + (size_t)slot * (c->sparse.rank_stride / QK_K)
                                                  : NULL };
    hidden_task task = { &c->kern, w->fc1, job->x, h };
    if (n_threads > 1) pi_threadpool_run(c->pool, hidden_worker, &task, n_threads);
    else hidden_worker(&task, 0, 1);
    for (int i = 0; i < rank; i++) h[i] = h[i] > 0.0f ? h[i] : 0.0f;
    return pi_quantize(&c->kern, h, hq, 1, rank);
}

/* Keep the neurons j < n whose first factor f[j] is positive, in order, with their positions,
 * rows and f; returns how many. */
static int keep_positive(float *f, int32_t *pos, int32_t *rows, int n) {
    int m = 0;
    for (int j = 0; j < n; j++)
        if (f[j] > 0.0f) {
            f[m] = f[j];
            pos[m] = pos[j];
            rows[m++] = rows[j];
        }
    return m;
}

/* gate and up of the run's n neurons into g and u. Where the activation rectifies a factor
 * (relu(gate) * up, relu(gate) * relu(up)), the first factor is computed for all n, and the
 * second only for the neurons whose first is positive: the others' activation is 0 whatever the
 * second is (so the result is the same), and their down rows are never read. Those neurons are
 * dropped from pos and rows. Returns the neurons kept; *bytes the gate and up rows' bytes read.
 * A probe (job->probe) computes both in full and counts each factor's positives. */
static int gate_and_up(const ffn_job *job, const ffn_rows *w, int32_t *pos, int32_t *rows, int n, float *g, float *u,
                       int64_t *bytes) {
    const pi_kernels *k = &job->c->kern;
    const int up_first = job->first == PI_FFN_FIRST_UP;
    const pi_weight *fw = up_first ? &w->up : &w->gate, *sw = up_first ? &w->gate : &w->up;
    const float *fb = up_first ? job->L->ffn_up_b : job->L->ffn_gate_b, *sb = up_first ? job->L->ffn_gate_b : job->L->ffn_up_b;
    float *f = up_first ? u : g, *sv = up_first ? g : u;
    const int both = job->first == PI_FFN_FIRST_BOTH || job->probe;
    prefetch_rows(fw, rows, n);
    if (both) {
        prefetch_rows(sw, rows, n);
        prefetch_rows(&w->down_t, rows, n);
    }
    k->matmul[fw->type](fw->data, fw->row_bytes, rows, 0, n, job->x, 1, f, n);
    add_bias_rows(f, fb, job->layout, pos, n);
    if (both) {
        k->matmul[sw->type](sw->data, sw->row_bytes, rows, 0, n, job->x, 1, sv, n);
        add_bias_rows(sv, sb, job->layout, pos, n);
        *bytes = (int64_t)n * (int64_t)(fw->row_bytes + sw->row_bytes);
        if (job->probe) {
            int pg = 0, pu = 0;
            for (int j = 0; j < n; j++) {
                pg += g[j] > 0.0f;
                pu += u[j] > 0.0f;
            }
            atomic_fetch_add_explicit(&job->c->sparse.probe_gate, pg, memory_order_relaxed);
            atomic_fetch_add_explicit(&job->c->sparse.probe_up, pu, memory_order_relaxed);
        }
        return n;
    }
    const int m = keep_positive(f, pos, rows, n);
    prefetch_rows(sw, rows, m);
    prefetch_rows(&w->down_t, rows, m); /* these activations are (nearly all) non-zero */
    if (m) {
        k->matmul[sw->type](sw->data, sw->row_bytes, rows, 0, m, job->x, 1, sv, m);
        add_bias_rows(sv, sb, job->layout, pos, m);
    }
    *bytes = (int64_t)n * (int64_t)fw->row_bytes + (int64_t)m * (int64_t)sw->row_bytes;
    return m;
}

int pi_ffn_run(const ffn_job *job, const ffn_rows *w, pi_act hq, int r, int runs) {
    pi_context *c = job->c;
    const pi_kernels *k = &c->kern;
    const int d = c->model->info.n_embd, n_ff = c->model->info.n_ff;
    const int p0 = r * PI_FFN_RUN, nr = n_ff - p0 < runs * PI_FFN_RUN ? n_ff - p0 : runs * PI_FFN_RUN;
    for (int i = 1; i < runs; i++) { /* the unit's sum is in slot r */
        c->sparse.run_rows[r + i] = 0;
        c->sparse.run_bytes[r + i] = 0;
    }
    /* this run's slices of the scratch, by position */
    float *logit = c->sparse.pred_out + p0, *g = c->s.gate + p0, *u = c->s.up + p0;
    float *acc = c->sparse.run_acc + (size_t)r * d;
    int32_t *pos = c->sparse.active + p0, *rows = c->sparse.active_rows + p0;

    k->matmul[w->fc2.type](w->fc2.data, w->fc2.row_bytes, w->rows ? w->rows + p0 : NULL, p0, nr, hq, 1, logit, nr);
    int n = 0;
    for (int i = 0; i < nr; i++)
        if (logit[i] >= job->threshold) {
            pos[n] = p0 + i;
            rows[n++] = row_of(w, p0 + i);
        }
    c->sparse.run_rows[r] = n;
    c->sparse.run_bytes[r] = 0;
    if (n == 0) return 0;
    int kept = n;
    if (w->gate.data) {
        kept = gate_and_up(job, w, pos, rows, n, g, u, &c->sparse.run_bytes[r]);
    } else { /* no gate (opt, falcon): act(up x) */
        prefetch_rows(&w->up, rows, n);
        prefetch_rows(&w->down_t, rows, n);
        k->matmul[w->up.type](w->up.data, w->up.row_bytes, rows, 0, n, job->x, 1, g, n);
        add_bias_rows(g, job->L->ffn_up_b, job->layout, pos, n);
        c->sparse.run_bytes[r] = (int64_t)n * (int64_t)w->up.row_bytes;
    }
    memset(acc, 0, (size_t)d * sizeof(float));
    if (kept == 0) return n;
    pi_activate(c, g, u, (size_t)kept);
    /* the kernel skips ReLU zeros without reading their rows */
    k->axpy_rows[w->down_t.type](w->down_t.data, w->down_t.row_bytes, rows, g, kept, acc, d);
    int read = 0;
    for (int j = 0; j < kept; j++) read += g[j] != 0.0f;
    c->sparse.run_bytes[r] += (int64_t)read * (int64_t)w->down_t.row_bytes;
    return n;
}

/* The CPU's unit u, its threads claiming units one at a time, all reading the job's hidden layer.
 * A unit is one of the hot runs the CPU computes without a device (one at a time, as a device
 * does, so the sums agree), a group of up to job->group cold runs (fewer, longer kernel calls), or
 * one of the last job->tail cold runs, taken singly so the threads finish together. */
static void cpu_unit(pi_context *c, pi_split *s, int u) {
    const ffn_job *job = s->work;
    int r = u, runs = 1; /* a hot run, or one of the last cold ones */
    const int k = u - job->singles, grouped_end = job->n_runs - job->tail;
    if (k >= 0 && k < job->n_groups) {
        r = job->hot_runs + k * job->group;
        runs = grouped_end - r < job->group ? grouped_end - r : job->group;
    } else if (k >= 0) {
        r = grouped_end + (k - job->n_groups);
    }
    pi_ffn_run(job, &job->cpu, job->hidden, r, runs);
    (void)c;
}

/* the CPU's hidden layer, once for all its units */
static void cpu_begin(pi_context *c, pi_split *s) {
    ffn_job *job = s->work;
    job->hidden = pi_ffn_hidden(job, &job->cpu, PI_HIDDEN_CPU, c->params.n_threads);
}

/* the device of the split, when the context has one (a device may hold whole layers only) */
static pi_device *split_device(const pi_context *c) { return c->sparse.hot_runs ? c->dev.device : NULL; }

enum { PROBE_EVERY = 32 }; /* a relu(gate) * relu(up) layer re-measures its factors this often */

/* Which factor of a layer's neurons is computed first (gate_and_up): relu(gate) * up: gate;
 * relu(gate) * relu(up): the one positive less often among the predicted neurons, as measured
 * on probe tokens (a layer's first sparse token, then every PROBE_EVERY-th), which compute both;
 * other activations: both, always. The choice changes what is read, never the result. */
static void choose_first(pi_context *c, int layer, ffn_job *job) {
    switch (c->model->info.ffn_act) {
    case PI_ACT_RELU_GLU: job->first = PI_FFN_FIRST_GATE; break;
    case PI_ACT_RELU_RELU_GLU:
        job->first = c->sparse.ffn_first[layer];
        job->probe = c->sparse.ffn_tokens[layer]++ % PROBE_EVERY == 0;
        break;
    default: job->first = PI_FFN_FIRST_BOTH;
    }
    if (job->probe) {
        atomic_store(&c->sparse.probe_gate, 0);
        atomic_store(&c->sparse.probe_up, 0);
    }
}

/* after a probe token: the factor positive less often goes first */
static void probed(pi_context *c, int layer, const ffn_job *job) {
    if (job->probe)
        c->sparse.ffn_first[layer] =
            atomic_load(&c->sparse.probe_up) < atomic_load(&c->sparse.probe_gate) ? PI_FFN_FIRST_UP : PI_FFN_FIRST_GATE;
}

/* one token's job for layer `layer`, its result into y: the split's device takes runs
 * [0, hot_runs), the CPU threads the rest; without one the CPU takes them all */
static void job_for(pi_context *c, int layer, int t, pi_act x, float *y, int resident, ffn_job *job) {
    const pi_layer *L = &c->model->layers[layer];
    const int n_ff = c->model->info.n_ff;
    *job = (ffn_job){ .c = c, .L = L, .x = x, .threshold = L->threshold + c->params.sparse_threshold_shift,
                      .layout = c->sparse.layout ? c->sparse.layout + (size_t)layer * n_ff : NULL,
                      .hot_runs = c->sparse.hot_runs ? c->sparse.hot_runs[layer] : 0, .n_runs = (n_ff + PI_FFN_RUN - 1) / PI_FFN_RUN };
    job->cpu = (ffn_rows){ L->fc1, L->fc2, L->ffn_gate, L->ffn_up, L->ffn_down_t, job->layout };
    /* groups of cold runs: at most 4, and at least 6 units (for balance), then the last group's
     * worth singly; from the model and the split alone, so the sums do not depend on the thread
     * count */
    pi_device *dev = split_device(c);
    const int cold = job->n_runs - job->hot_runs;
    job->group = job->n_runs / 6 < 1 ? 1 : job->n_runs / 6 > 4 ? 4 : job->n_runs / 6;
    job->tail = job->group > 1 && cold > job->group ? job->group : 0;
    job->n_groups = (cold - job->tail + job->group - 1) / job->group;
    job->singles = dev ? 0 : job->hot_runs;
    choose_first(c, layer, job);
    pi_split *s = &job->split;
    *s = (pi_split){ .kind = PI_SPLIT_NEURONS, .work = job, .layer = layer, .t = t, .x = x, .resident = resident,
                     .device = dev, .n_groups = 1, .runs = job->n_runs, .acc = c->sparse.run_acc,
                     .rows = c->sparse.run_rows, .bytes = c->sparse.run_bytes, .hot = NULL, .hot_runs = job->hot_runs,
                     .cold = y, .weight = NULL, .y = y,
                     .n_cpu = job->singles + job->n_groups + job->tail, .n_dev = dev ? job->hot_runs : 0,
                     .cpu_begin = cpu_begin, .cpu_unit = cpu_unit };
    atomic_init(&s->next, 0);
}

int pi_ffn_sparse(pi_context *c, int layer, int t, pi_act x) {
    ffn_job job;
    job_for(c, layer, t, x, c->s.delta + (size_t)t * c->model->info.n_embd, 0, &job);
    c->step_bytes += (int64_t)pi_predictor_bytes(job.L);
    const int rc = pi_split_run(c, &job.split);
    if (rc) return rc;
    probed(c, layer, &job);
    return PI_OK;
}

int pi_ffn_sparse_resident(pi_context *c, int layer, int n) {
    const int d = c->model->info.n_embd;
    pi_device *dev = c->dev.device;
    for (int t = 0; t < n; t++) {
        float *xn = c->s.xn + (size_t)t * d;
        int rc = dev->ops->split_norm(dev, layer, t, xn);
        if (rc) return rc;
        ffn_job job;
        job_for(c, layer, t, pi_quantize(&c->kern, xn, c->s.xq, 1, d), c->s.delta + (size_t)t * d, 1, &job);
        c->step_bytes += (int64_t)pi_predictor_bytes(job.L);
        if ((rc = pi_split_run(c, &job.split))) return rc;
        probed(c, layer, &job);
    }
    return PI_OK;
}
