/* device_host.c - the hot rows' copy, and the stand-in device of device.h: a host thread
 * computing the hot runs from its own copy with the CPU's kernels. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "placement.h"
#include "status.h"

/* ---- the hot rows, laid out by position ---- */

/* positions [0, n) of a layer with `runs` hot runs */
static size_t hot_count(int32_t runs, int n_ff) {
    const int64_t n = (int64_t)runs * PI_FFN_RUN;
    return n <= 0 ? 0 : n < n_ff ? (size_t)n : (size_t)n_ff;
}

/* w = rows layout[0..n) of src, copied to dst one after another; returns the bytes used */
static size_t copy_rows(pi_weight *w, const pi_weight *src, const int32_t *layout, size_t n, uint8_t *dst) {
    *w = *src;
    if (!src->data) return 0; /* an FFN without a gate */
    w->data = dst;
    w->n_out = (int64_t)n;
    for (size_t p = 0; p < n; p++)
        memcpy(dst + p * src->row_bytes, src->data + (size_t)layout[p] * src->row_bytes, src->row_bytes);
    return n * src->row_bytes;
}

int pi_hot_copy_new(const pi_context *c, pi_hot_copy *out) {
    const pi_model *m = c->model;
    const uint32_t n_layer = (uint32_t)m->info.n_layer;
    const int n_ff = m->info.n_ff;
    memset(out, 0, sizeof *out);
    size_t bytes = 0;
    for (uint32_t il = 0; il < n_layer; il++) {
        const pi_layer *L = &m->layers[il];
        const size_t n = hot_count(c->hot_runs[il], n_ff);
        if (n) bytes += L->fc1.row_bytes * (size_t)L->fc1.n_out + n * (L->fc2.row_bytes + pi_neuron_bytes(L));
    }
    out->layers = calloc(n_layer, sizeof *out->layers);
    out->n_hot = calloc(n_layer, sizeof *out->n_hot);
    out->memory = malloc(bytes ? bytes : 1);
    if (!out->layers || !out->n_hot || !out->memory) {
        pi_hot_copy_free(out);
        return pi_set_error(PI_ERR_NOMEM, "no memory for a %.1f MiB copy of the hot rows", bytes / 1048576.0);
    }
    uint8_t *at = out->memory;
    for (uint32_t il = 0; il < n_layer; il++) {
        const pi_layer *L = &m->layers[il];
        const size_t n = hot_count(c->hot_runs[il], n_ff);
        if (!n) continue;
        const int32_t *layout = c->layout + (size_t)il * n_ff;
        ffn_rows *w = &out->layers[il];
        const size_t fc1_bytes = L->fc1.row_bytes * (size_t)L->fc1.n_out;
        w->fc1 = L->fc1;
        w->fc1.data = memcpy(at, L->fc1.data, fc1_bytes);
        at += fc1_bytes;
        at += copy_rows(&w->fc2, &L->fc2, layout, n, at);
        at += copy_rows(&w->gate, &L->ffn_gate, layout, n, at);
        at += copy_rows(&w->up, &L->ffn_up, layout, n, at);
        at += copy_rows(&w->down_t, &L->ffn_down_t, layout, n, at);
        w->rows = NULL;
        out->n_hot[il] = (int32_t)n;
    }
    return PI_OK;
}

void pi_hot_copy_free(pi_hot_copy *h) {
    free(h->layers);
    free(h->n_hot);
    free(h->memory);
    memset(h, 0, sizeof *h);
}

/* ---- the stand-in device ---- */

typedef struct {
    pi_device base;
    pi_hot_copy copy;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int layer, busy, quit, started;
    ffn_job *job;
} host_device;

static void *device_main(void *arg) {
    host_device *dev = arg;
    pthread_mutex_lock(&dev->lock);
    for (;;) {
        while (!dev->busy && !dev->quit) pthread_cond_wait(&dev->cond, &dev->lock);
        if (dev->quit) break;
        ffn_job *job = dev->job;
        const ffn_rows *w = &dev->copy.layers[dev->layer];
        pthread_mutex_unlock(&dev->lock);
        /* the device's own hidden layer slot: the one after the CPU threads' */
        pi_context *c = job->c;
        const int slot = pi_threadpool_size(c->pool);
        const pi_act hq = pi_ffn_hidden(job, w, slot);
        for (int r = 0; r < job->hot_runs; r++) pi_ffn_run(job, w, hq, r);
        pi_ffn_fold_hot(c, job->hot_runs); /* handed back as a GPU hands its one vector */
        pthread_mutex_lock(&dev->lock);
        dev->busy = 0;
        pthread_cond_broadcast(&dev->cond);
    }
    pthread_mutex_unlock(&dev->lock);
    return NULL;
}

static int host_start(pi_device *d, int layer, ffn_job *job) {
    host_device *dev = (host_device *)d;
    pthread_mutex_lock(&dev->lock);
    dev->layer = layer;
    dev->job = job;
    dev->busy = 1;
    pthread_cond_broadcast(&dev->cond);
    pthread_mutex_unlock(&dev->lock);
    return PI_OK;
}

static int host_wait(pi_device *d) {
    host_device *dev = (host_device *)d;
    pthread_mutex_lock(&dev->lock);
    while (dev->busy) pthread_cond_wait(&dev->cond, &dev->lock);
    pthread_mutex_unlock(&dev->lock);
    return PI_OK;
}

static void host_free(pi_device *d) {
    host_device *dev = (host_device *)d;
    if (dev->started) {
        pthread_mutex_lock(&dev->lock);
        dev->quit = 1;
        pthread_cond_broadcast(&dev->cond);
        pthread_mutex_unlock(&dev->lock);
        pthread_join(dev->thread, NULL);
    }
    pthread_mutex_destroy(&dev->lock);
    pthread_cond_destroy(&dev->cond);
    pi_hot_copy_free(&dev->copy);
    free(dev);
}

static const pi_device_ops host_ops = { "host", host_start, host_wait, host_free };

int pi_device_host_new(pi_context *c, pi_device **out) {
    host_device *dev = calloc(1, sizeof *dev);
    if (!dev) return pi_set_error(PI_ERR_NOMEM, "no memory for the host device");
    dev->base.ops = &host_ops;
    pthread_mutex_init(&dev->lock, NULL);
    pthread_cond_init(&dev->cond, NULL);
    int rc = pi_hot_copy_new(c, &dev->copy);
    if (!rc && pthread_create(&dev->thread, NULL, device_main, dev) != 0)
        rc = pi_set_error(PI_ERR_NOMEM, "cannot start the host device's thread");
    if (rc) {
        host_free(&dev->base);
        return rc;
    }
    dev->started = 1;
    *out = &dev->base;
    return PI_OK;
}
