/* device.h - the device side of the hot/cold split (ffn_sparse.h).
 *
 * A device holds its own copy of every layer's hot rows, laid out in the layer's order, and
 * computes a job's hot runs [0, hot_runs) while the CPU threads compute the cold ones. start
 * returns at once; wait returns with the hot runs folded into slot 0 (pi_ffn_fold_hot): one
 * vector to hand back, not one per run, and the same sum the merge would have made. */
#ifndef PI_DEVICE_H
#define PI_DEVICE_H
#include "ffn_sparse.h"

typedef struct pi_device pi_device;

typedef struct {
    const char *name;
    int (*start)(pi_device *dev, int layer, ffn_job *job); /* PI_OK, or a status with pi_last_error set */
    int (*wait)(pi_device *dev);
    void (*free)(pi_device *dev);
} pi_device_ops;

struct pi_device {
    const pi_device_ops *ops;
};

/* Every layer's hot rows (the context's hot_runs and layout) copied into one allocation, laid
 * out by position: layers[il] views them with rows NULL, its weights' n_out the hot count. */
typedef struct {
    ffn_rows *layers;   /* [n_layer] */
    int32_t *n_hot;     /* [n_layer] */
    uint8_t *memory;
} pi_hot_copy;
int pi_hot_copy_new(const pi_context *c, pi_hot_copy *out);
void pi_hot_copy_free(pi_hot_copy *h);

/* The stand-in device: one host thread with a copy of the hot rows in host memory, computing
 * with the CPU's kernels, so the split and merge run (and are tested) without a GPU. The hot
 * rows are those of the context's hot_runs and layout. */
int pi_device_host_new(pi_context *c, pi_device **out);

/* The CUDA device (device_cuda.c over cuda/ffn.cu): the hot rows in device memory, computed on a
 * stream while the CPU threads compute the cold runs. PI_ERR_UNSUPPORTED without a CUDA build or
 * device. */
int pi_device_cuda_new(pi_context *c, pi_device **out);

#endif
