/* device_host.c - the stand-in device of device.h: a host thread and a private copy of the hot rows. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "placement.h"
#include "status.h"

typedef struct {
    pi_device base;
    pi_context *c;
    ffn_rows *layers;     /* [n_layer]: the copies, rows NULL (row p = position p) */
    uint8_t *memory;      /* every copy, one allocation */
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
        const ffn_rows *w = &dev->layers[dev->layer];
        pthread_mutex_unlock(&dev->lock);
        /* the device's own hidden layer slot: the one after the CPU threads' */
        const int slot = pi_threadpool_size(job->c->pool);
        const pi_act hq = pi_ffn_hidden(job, w, job->c->pred_h + (size_t)slot * job->c->rank_stride,
                                        job->c->pred_hq + (size_t)slot * (job->c->rank_stride / QK));
        for (int r = 0; r < job->hot_runs; r++) pi_ffn_run(job, w, hq, r);
        pthread_mutex_lock(&dev->lock);
        dev->busy = 0;
        pthread_cond_broadcast(&dev->cond);
    }
    pthread_mutex_unlock(&dev->lock);
    return NULL;
}

static void host_start(pi_device *d, int layer, ffn_job *job) {
    host_device *dev = (host_device *)d;
    pthread_mutex_lock(&dev->lock);
    dev->layer = layer;
    dev->job = job;
    dev->busy = 1;
    pthread_cond_broadcast(&dev->cond);
    pthread_mutex_unlock(&dev->lock);
}

static void host_wait(pi_device *d) {
    host_device *dev = (host_device *)d;
    pthread_mutex_lock(&dev->lock);
    while (dev->busy) pthread_cond_wait(&dev->cond, &dev->lock);
    pthread_mutex_unlock(&dev->lock);
}

static void host_free(pi_device *d) {
    host_device *dev = (host_device *)d;
    if (!dev) return;
    if (dev->started) {
        pthread_mutex_lock(&dev->lock);
        dev->quit = 1;
        pthread_cond_broadcast(&dev->cond);
        pthread_mutex_unlock(&dev->lock);
        pthread_join(dev->thread, NULL);
    }
    pthread_mutex_destroy(&dev->lock);
    pthread_cond_destroy(&dev->cond);
    free(dev->layers);
    free(dev->memory);
    free(dev);
}

static const pi_device_ops host_ops = { "host", host_start, host_wait, host_free };

/* w with rows layout[0..n) of src copied to dst, one after another; returns the bytes used */
static size_t copy_rows(pi_weight *w, const pi_weight *src, const int32_t *layout, int n, uint8_t *dst) {
    *w = *src;
    w->data = dst;
    w->n_out = n;
    for (int p = 0; p < n; p++) memcpy(dst + (size_t)p * src->row_bytes, src->data + (size_t)layout[p] * src->row_bytes,
                                       src->row_bytes);
    return (size_t)n * src->row_bytes;
}

/* positions [0, n) of a layer with `runs` hot runs */
static size_t hot_count(int32_t runs, int n_ff) {
    const int64_t n = (int64_t)runs * PI_FFN_RUN;
    return n <= 0 ? 0 : n < n_ff ? (size_t)n : (size_t)n_ff;
}

int pi_device_host_new(pi_context *c, pi_device **out) {
    const int32_t *hot_runs = c->hot_runs;
    const pi_model *m = c->model;
    const uint32_t n_layer = (uint32_t)m->info.n_layer;
    const int n_ff = m->info.n_ff;
    host_device *dev = calloc(1, sizeof *dev);
    if (!dev) return pi_set_error(PI_ERR_NOMEM, "no memory for the host device");
    dev->base.ops = &host_ops;
    dev->c = c;
    pthread_mutex_init(&dev->lock, NULL);
    pthread_cond_init(&dev->cond, NULL);
    size_t bytes = 0;
    for (uint32_t il = 0; il < n_layer; il++) {
        const pi_layer *L = &m->layers[il];
        const size_t n = hot_count(hot_runs[il], n_ff);
        if (n) bytes += L->fc1.row_bytes * (size_t)L->fc1.n_out + n * (L->fc2.row_bytes + pi_neuron_bytes(L));
    }
    dev->layers = calloc(n_layer, sizeof *dev->layers);
    dev->memory = malloc(bytes ? bytes : 1);
    if (!dev->layers || !dev->memory) {
        host_free(&dev->base);
        return pi_set_error(PI_ERR_NOMEM, "no memory for the host device's %.1f MiB of hot rows", bytes / 1048576.0);
    }
    uint8_t *at = dev->memory;
    for (uint32_t il = 0; il < n_layer; il++) {
        const pi_layer *L = &m->layers[il];
        const int n = (int)hot_count(hot_runs[il], n_ff);
        if (!n) continue;
        ffn_rows *w = &dev->layers[il];
        const int32_t *layout = c->layout + (size_t)il * n_ff;
        const size_t fc1_bytes = L->fc1.row_bytes * (size_t)L->fc1.n_out;
        w->fc1 = L->fc1;
        w->fc1.data = memcpy(at, L->fc1.data, fc1_bytes);
        at += fc1_bytes;
        at += copy_rows(&w->fc2, &L->fc2, layout, n, at);
        at += copy_rows(&w->gate, &L->ffn_gate, layout, n, at);
        at += copy_rows(&w->up, &L->ffn_up, layout, n, at);
        at += copy_rows(&w->down_t, &L->ffn_down_t, layout, n, at);
        w->rows = NULL;
    }
    if (pthread_create(&dev->thread, NULL, device_main, dev) != 0) {
        host_free(&dev->base);
        return pi_set_error(PI_ERR_NOMEM, "cannot start the host device's thread");
    }
    dev->started = 1;
    *out = &dev->base;
    return PI_OK;
}
