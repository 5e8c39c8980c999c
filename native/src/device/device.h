/* device.h - the one interface to a device: where the forward pass's steps run when they do not
 * run on the CPU (router.h decides, place.h sets it up).
 *
 * A device holds its own copy of the residual stream and the weights it was given: whole layers
 * (layer offload), the attention of some layers and the output matrix (what every token reads),
 * and every layer's hot FFN rows (the hot/cold split, ffn_sparse.h). Its work is queued in order,
 * as on one CUDA stream: a call returns once the work is queued, except where it says it waits. */
#ifndef PI_DEVICE_H
#define PI_DEVICE_H
#include "context.h"

typedef struct pi_device pi_device;
struct pi_split;

typedef struct {
    const char *name;
    /* The stream of n tokens in from the host's x, and out to it (which waits for the queued work). */
    int (*x_in)(pi_device *d, const float *x, int n);
    int (*x_out)(pi_device *d, float *x, int n);
    /* x += attention(x) of layer il for the n tokens at pos0.. (a parallel block's FFN inside) */
    int (*attention)(pi_device *d, int il, int n, int pos0);
    /* x += FFN(x) of layer il, every neuron (layer offload) */
    int (*ffn)(pi_device *d, int il, int n);
    /* logits of the step's tokens [out.first, n) into out.rows (waits) */
    int (*logits)(pi_device *d, int n, pi_outputs out);

    /* The split of one token's FFN (split_engine.h), of either kind: a layer's hot neuron runs, or
     * the routed experts' hot runs (a device without expert kernels, CUDA, refuses those; place.c
     * refuses first). With the stream on the device, split_norm writes token t's normed FFN input
     * to xn (waits for it only) and the hot units then start from the device's own copy; otherwise
     * the host normed it, and split_start takes s->x (and an expert split's routing: s->work's
     * expert and weight). split_end with the stream on the device (s->resident) takes the CPU's
     * cold sums (s->cold) and merges them with its hot ones (pi_split_merge into s->y), with the
     * FFN's bias and post-norm, into row s->t of its stream; otherwise it waits and leaves each
     * group's hot units folded in its first hot slot (pi_split_fold) for the host's merge. */
    int (*split_norm)(pi_device *d, int il, int t, float *xn);
    int (*split_start)(pi_device *d, struct pi_split *s);
    int (*split_end)(pi_device *d, struct pi_split *s);
    void (*free)(pi_device *d);
} pi_device_ops;

struct pi_device {
    const pi_device_ops *ops;
};

/* What a device is given: layers first_whole.. whole, the attention of each layer where
 * attention[il], the output matrix with output, and the hot rows of the context's split
 * (c->sparse.hot_runs, c->sparse.layout), or the hot expert runs (c->moe.split), when it has one. */
typedef struct {
    int first_whole;
    const uint8_t *attention; /* [n_layer], or NULL */
    int output;
} pi_device_share;

/* The stand-in: a host thread and host memory, computing with the CPU's own blocks and kernels on
 * its private copies, so that routing, the split and the merge are tested to the bit without a GPU. */
int pi_device_host_new(pi_context *c, const pi_device_share *share, pi_device **out);
/* CUDA device 0, over cuda/layers_cuda.h and cuda/ffn_cuda.h on one stream. PI_ERR_UNSUPPORTED
 * without a CUDA build or device, or for weights the device cannot run. */
int pi_device_cuda_new(pi_context *c, const pi_device_share *share, pi_device **out);

#endif
