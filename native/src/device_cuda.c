/* device_cuda.c - the CUDA device of device.h, over the plain-C entry points of cuda/ffn.cu. */
#include <stdlib.h>

#include "device.h"
#include "placement.h"
#include "status.h"

#ifdef PI_HAVE_CUDA
#include "cuda/ffn_cuda.h"
#include "cuda/weight_view.h"

typedef struct {
    pi_device base;
    pi_cuda_ffn *ffn;
    pi_context *c;
} cuda_device;

static int cuda_start(pi_device *d, int layer, ffn_job *job) {
    cuda_device *dev = (cuda_device *)d;
    char err[256];
    if (pi_cuda_ffn_start(dev->ffn, layer, job->x.f, job->threshold, err, sizeof err))
        return pi_set_error(PI_ERR_UNSUPPORTED, "%s", err);
    return PI_OK;
}

static int cuda_wait(pi_device *d) {
    cuda_device *dev = (cuda_device *)d;
    char err[256];
    if (pi_cuda_ffn_wait(dev->ffn, dev->c->run_acc, dev->c->run_rows, err, sizeof err))
        return pi_set_error(PI_ERR_UNSUPPORTED, "%s", err);
    return PI_OK;
}

static void cuda_free(pi_device *d) {
    cuda_device *dev = (cuda_device *)d;
    pi_cuda_ffn_free(dev->ffn);
    free(dev);
}

static const pi_device_ops cuda_ops = { "cuda", cuda_start, cuda_wait, cuda_free };

/* a layer's bias in layout order over its n hot positions, or NULL */
static float *hot_bias(const float *b, const int32_t *layout, int n) {
    if (!b) return NULL;
    float *out = malloc((size_t)n * sizeof(float));
    if (out)
        for (int p = 0; p < n; p++) out[p] = b[layout[p]];
    return out;
}

int pi_device_cuda_new(pi_context *c, pi_device **out) {
    const pi_model *m = c->model;
    const int n_layer = m->info.n_layer, n_ff = m->info.n_ff;
    if (pi_cuda_device_count() == 0)
        return pi_set_error(PI_ERR_UNSUPPORTED, "no CUDA device: the hybrid split needs one (or the host stand-in)");
    cuda_device *dev = calloc(1, sizeof *dev);
    pi_cuda_layer *layers = calloc((size_t)(n_layer > 0 ? n_layer : 1), sizeof *layers);
    pi_hot_copy copy = { 0 };
    int rc = !dev || !layers ? pi_set_error(PI_ERR_NOMEM, "no memory for the CUDA device") : pi_hot_copy_new(c, &copy);
    for (int il = 0; !rc && il < n_layer; il++) {
        const ffn_rows *w = &copy.layers[il];
        pi_cuda_layer *L = &layers[il];
        const int32_t *layout = c->layout + (size_t)il * n_ff;
        L->n_hot = copy.n_hot[il];
        if (!L->n_hot) continue;
        L->fc1 = pi_cuda_view(&w->fc1);
        L->fc2 = pi_cuda_view(&w->fc2);
        L->gate = pi_cuda_view(&w->gate);
        L->up = pi_cuda_view(&w->up);
        L->down_t = pi_cuda_view(&w->down_t);
        L->gate_b = hot_bias(m->layers[il].ffn_gate_b, layout, L->n_hot);
        L->up_b = hot_bias(m->layers[il].ffn_up_b, layout, L->n_hot);
        if ((m->layers[il].ffn_gate_b && !L->gate_b) || (m->layers[il].ffn_up_b && !L->up_b))
            rc = pi_set_error(PI_ERR_NOMEM, "no memory for the hot biases");
    }
    if (!rc) {
        char err[256];
        dev->base.ops = &cuda_ops;
        dev->c = c;
        if (pi_cuda_ffn_new(n_layer, m->info.n_embd, m->info.ffn_act, PI_FFN_RUN, layers, &dev->ffn, err, sizeof err))
            rc = pi_set_error(PI_ERR_UNSUPPORTED, "%s", err);
    }
    pi_hot_copy_free(&copy); /* the device has its own now */
    for (int il = 0; layers && il < n_layer; il++) {
        free((void *)layers[il].gate_b);
        free((void *)layers[il].up_b);
    }
    free(layers);
    if (rc) {
        if (dev) {
            pi_cuda_ffn_free(dev->ffn);
            free(dev);
        }
        return rc;
    }
    *out = &dev->base;
    return PI_OK;
}

#else

int pi_device_cuda_new(pi_context *c, pi_device **out) {
    (void)c;
    (void)out;
    return pi_set_error(PI_ERR_UNSUPPORTED, "this build has no CUDA (built without nvcc): %s", pi_build_info());
}

#endif
