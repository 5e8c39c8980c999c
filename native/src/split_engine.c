/* split_engine.c - one token's hot/cold split (split_engine.h). */
#include <string.h>

#include "device/device.h"
#include "split_engine.h"
#include "status.h"

static int is_hot(const pi_split *s, int slot) { return s->hot ? s->hot[slot] : slot % s->runs < s->hot_runs; }

typedef struct {
    pi_context *c;
    pi_split *s;
} cpu_task;

/* the CPU threads claim units one at a time */
static void cpu_worker(void *arg, int ith, int nth) {
    const cpu_task *t = arg;
    pi_split *s = t->s;
    for (;;) {
        const int i = atomic_fetch_add_explicit(&s->next, 1, memory_order_relaxed);
        if (i >= s->n_cpu) break;
        s->cpu_unit(t->c, s, i);
    }
    (void)ith;
    (void)nth;
}

void pi_split_fold(pi_context *c, pi_split *s) {
    const size_t d = (size_t)c->model->info.n_embd;
    for (int g = 0; g < s->n_groups; g++) {
        int first = -1;
        for (int r = 0; r < s->runs; r++) {
            const int slot = g * s->runs + r;
            if (!is_hot(s, slot)) continue;
            if (first < 0) { /* the group's hot sum, zeros where its unit wrote nothing */
                first = slot;
                if (!s->bytes[slot]) memset(s->acc + (size_t)slot * d, 0, d * sizeof(float));
                continue;
            }
            if (!s->bytes[slot]) continue;
            c->vec.axpy(1.0f, s->acc + (size_t)slot * d, s->acc + (size_t)first * d, (int)d);
            s->rows[first] += s->rows[slot];
            s->bytes[first] += s->bytes[slot];
            s->rows[slot] = 0;
            s->bytes[slot] = 0;
        }
    }
}

/* each group's cold slots added in run order into its cold sum (zeros without any), and counted;
 * the device's units may be running still */
static void cold_sums(pi_context *c, pi_split *s) {
    const size_t d = (size_t)c->model->info.n_embd;
    for (int g = 0; g < s->n_groups; g++) {
        float *cold = s->cold + (size_t)g * d;
        memset(cold, 0, d * sizeof(float));
        for (int r = 0; r < s->runs; r++) {
            const int slot = g * s->runs + r;
            if (is_hot(s, slot) || !s->bytes[slot]) continue;
            c->vec.axpy(1.0f, s->acc + (size_t)slot * d, cold, (int)d);
            c->stats.ffn_rows_done += s->rows[slot];
            c->step_bytes += s->bytes[slot];
        }
    }
}

void pi_split_merge(pi_context *c, pi_split *s) {
    const size_t d = (size_t)c->model->info.n_embd;
    for (int g = 0; g < s->n_groups; g++) {
        int first = g * s->runs;
        while (first < (g + 1) * s->runs && !is_hot(s, first)) first++;
        if (first == (g + 1) * s->runs || !s->bytes[first]) continue; /* no hot run, or none with neurons */
        c->vec.axpy(1.0f, s->acc + (size_t)first * d, s->cold + (size_t)g * d, (int)d);
        c->stats.ffn_rows_hot += s->rows[first];
        c->stats.ffn_rows_done += s->rows[first];
        c->step_bytes += s->bytes[first];
    }
    if (!s->weight) return; /* one group: its cold sum is y */
    memset(s->y, 0, d * sizeof(float));
    for (int g = 0; g < s->n_groups; g++) c->vec.axpy(s->weight[g], s->cold + (size_t)g * d, s->y, (int)d);
}

int pi_split_run(pi_context *c, pi_split *s) {
    pi_device *dev = s->device;
    /* a device without units here still merges a resident token */
    const int start = dev && s->n_dev, end = dev && (s->n_dev || s->resident);
    int rc = start ? dev->ops->split_start(dev, s) : PI_OK;
    if (rc) return rc;
    if (s->n_cpu) { /* the device may hold every unit: nothing to wake */
        if (s->cpu_begin) s->cpu_begin(c, s);
        cpu_task task = { c, s };
        atomic_store_explicit(&s->next, 0, memory_order_relaxed);
        pi_threadpool_run(c->pool, cpu_worker, &task, c->params.n_threads);
    }
    if (!dev) pi_split_fold(c, s); /* the CPU computed the hot units too, and folds them as a device does */
    cold_sums(c, s);
    if (end && (rc = dev->ops->split_end(dev, s))) return rc;
    if (!s->resident) pi_split_merge(c, s);
    return PI_OK;
}
