/* host.c - the stand-in device (device.h): host memory and a host thread, computing with the
 * CPU's own blocks and kernels on private copies of the stream and the hot rows. It counts the
 * copies and waits at the points where a GPU would make them, so that their number is tested too. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "blocks.h"
#include "device/device.h"
#include "device/hot_experts.h"
#include "device/hot_rows.h"
#include "ops.h"
#include "split_engine.h"
#include "status.h"

typedef struct host_device_ {
    pi_device base;
    pi_context *c;
    float *x;           /* [n_batch][n_embd] the device's copy of the stream */
    pi_hot_copy copy;   /* the split's hot rows; none without a split */
    pi_hot_experts experts; /* the expert split's hot runs; none without one */
    pthread_t thread;   /* computes the hot runs of a task, while the CPU threads take the cold ones */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int busy, quit, started;
    pi_split *task;     /* the token's split whose hot units the thread computes */
} host_device;

static void count(pi_context *c, int copies, int syncs) {
    c->stats.device_copies += copies;
    c->stats.device_syncs += syncs;
}

/* ---- the stream and the whole steps: the CPU's blocks with the context's x pointed at the copy ---- */

static int host_x_in(pi_device *d, const float *x, int n) {
    host_device *dev = (host_device *)d;
    memcpy(dev->x, x, (size_t)n * dev->c->model->info.n_embd * sizeof(float));
    count(dev->c, 1, 0);
    return PI_OK;
}

static int host_x_out(pi_device *d, float *x, int n) {
    host_device *dev = (host_device *)d;
    memcpy(x, dev->x, (size_t)n * dev->c->model->info.n_embd * sizeof(float));
    count(dev->c, 1, 1);
    return PI_OK;
}

enum { STEP_ATTENTION, STEP_FFN, STEP_LOGITS };

/* the host's copy of the stream is out of date meanwhile, and nothing reads it */
static int on_copy(host_device *dev, int step, int il, int n, pi_outputs out) {
    pi_context *c = dev->c;
    float *host = c->s.x;
    c->s.x = dev->x;
    const int rc = step == STEP_ATTENTION ? pi_attention_block(c, il, n)
                 : step == STEP_FFN       ? pi_ffn_block(c, il, n, (pi_ffn_path)pi_ffn_choice_of(c, il, n).block)
                                          : pi_logits_block(c, n, out);
    c->s.x = host;
    return rc;
}

static const pi_outputs NO_OUTPUTS = { 0, NULL, NULL, 0 };

/* the CPU's block reads the step's positions from the context (tok_pos), pos0's first */
static int host_attention(pi_device *d, int il, int n, int pos0) {
    (void)pos0;
    return on_copy((host_device *)d, STEP_ATTENTION, il, n, NO_OUTPUTS);
}

static int host_ffn(pi_device *d, int il, int n) { return on_copy((host_device *)d, STEP_FFN, il, n, NO_OUTPUTS); }

static int host_logits(pi_device *d, int n, pi_outputs out) {
    host_device *dev = (host_device *)d;
    count(dev->c, 1, 1); /* the logits come back */
    return on_copy(dev, STEP_LOGITS, 0, n, out);
}

/* ---- the split ---- */

/* a neuron job's hot runs, from the copy */
static void hot_neurons(host_device *dev, pi_split *split) {
    const ffn_job *job = split->work;
    const ffn_rows *w = &dev->copy.layers[split->layer];
    /* the device's own hidden layer slot, computed by this thread alone (the pool is the CPU's) */
    const pi_act hq = pi_ffn_hidden(job, w, PI_HIDDEN_DEVICE, 1);
    for (int r = 0; r < job->hot_runs; r++) pi_ffn_run(job, w, hq, r, 1);
}

/* the routed experts' hot runs, from the copy */
static void hot_experts(host_device *dev, pi_split *split) {
    pi_expert_split *s = split->work;
    pi_context *c = dev->c;
    const size_t layer = (size_t)s->layer * (size_t)c->model->n_expert;
    for (int i = 0; i < split->n_dev; i++) {
        const int unit = s->dev_units[i], e = s->expert[unit / s->runs];
        pi_expert_run(c, s, &dev->experts.runs[(layer + (size_t)e) * (size_t)s->runs + (size_t)(unit % s->runs)], unit);
    }
}

/* the task's hot units, then their folds: handed back as one vector a group, as a GPU hands them */
static void hot_units(host_device *dev, pi_split *s) {
    if (s->kind == PI_SPLIT_NEURONS) hot_neurons(dev, s);
    else hot_experts(dev, s);
    pi_split_fold(dev->c, s);
}

static void *hot_thread(void *arg) {
    host_device *dev = arg;
    pthread_mutex_lock(&dev->lock);
    for (;;) {
        while (!dev->busy && !dev->quit) pthread_cond_wait(&dev->cond, &dev->lock);
        if (dev->quit) break;
        pthread_mutex_unlock(&dev->lock);
        hot_units(dev, dev->task);
        pthread_mutex_lock(&dev->lock);
        dev->busy = 0;
        pthread_cond_broadcast(&dev->cond);
    }
    pthread_mutex_unlock(&dev->lock);
    return NULL;
}

static int host_split_norm(pi_device *d, int il, int t, float *xn) {
    host_device *dev = (host_device *)d;
    pi_context *c = dev->c;
    const pi_layer *L = &c->model->layers[il];
    pi_norm(c, dev->x + (size_t)t * c->model->info.n_embd, L->ffn_norm, L->ffn_norm_b, xn, 1);
    count(c, 1, 1);
    return PI_OK;
}

/* the device thread takes the task; wait_task waits until it is done */
static void start_task(host_device *dev, pi_split *task) {
    pthread_mutex_lock(&dev->lock);
    dev->task = task;
    dev->busy = 1;
    pthread_cond_broadcast(&dev->cond);
    pthread_mutex_unlock(&dev->lock);
}

static void wait_task(host_device *dev) {
    pthread_mutex_lock(&dev->lock);
    while (dev->busy) pthread_cond_wait(&dev->cond, &dev->lock);
    pthread_mutex_unlock(&dev->lock);
}

/* the normed input goes in unless the device made it; an expert split's routing goes in always */
static int host_split_start(pi_device *d, pi_split *s) {
    host_device *dev = (host_device *)d;
    if (!s->resident || s->kind == PI_SPLIT_EXPERTS) count(dev->c, 1, 0);
    start_task(dev, s);
    return PI_OK;
}

static int host_split_end(pi_device *d, pi_split *s) {
    host_device *dev = (host_device *)d;
    pi_context *c = dev->c;
    wait_task(dev);
    if (!s->resident) {
        count(c, 1, 1); /* the hot sums come back */
        return PI_OK;
    }
    count(c, 1, 0); /* the cold sums go in (with an expert split's weights); the merge is the device's */
    pi_split_merge(c, s);
    pi_ffn_residual(c, s->layer, dev->x + (size_t)s->t * c->model->info.n_embd, s->y, 1);
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
    pi_hot_experts_free(&dev->experts);
    free(dev->x);
    free(dev);
}

static const pi_device_ops host_ops = {
    "host", host_x_in, host_x_out, host_attention, host_ffn, host_logits,
    host_split_norm, host_split_start, host_split_end, host_free,
};

int pi_device_host_new(pi_context *c, const pi_device_share *share, pi_device **out) {
    (void)share; /* the stand-in reads the model's own weights, all of them */
    host_device *dev = calloc(1, sizeof *dev);
    if (!dev) return pi_set_error(PI_ERR_NOMEM, "no memory for the host device");
    dev->base.ops = &host_ops;
    dev->c = c;
    pthread_mutex_init(&dev->lock, NULL);
    pthread_cond_init(&dev->cond, NULL);
    dev->x = malloc((size_t)c->n_batch * c->model->info.n_embd * sizeof(float));
    int rc = dev->x ? PI_OK : pi_set_error(PI_ERR_NOMEM, "no memory for the host device's stream");
    if (!rc && (c->sparse.hot_runs || c->moe.split)) {
        rc = c->sparse.hot_runs ? pi_hot_copy_new(c, &dev->copy) : pi_hot_experts_new(c, &dev->experts);
        if (!rc && pthread_create(&dev->thread, NULL, hot_thread, dev) != 0)
            rc = pi_set_error(PI_ERR_NOMEM, "cannot start the host device's thread");
        dev->started = !rc;
    }
    if (rc) {
        host_free(&dev->base);
        return rc;
    }
    *out = &dev->base;
    return PI_OK;
}
