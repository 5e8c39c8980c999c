/* ffn_sparse.h - the predictor-driven FFN of one token, split between the CPU and a device.
 *
 * A layer's neurons are visited by position in the context's layout, in runs of PI_FFN_RUN
 * positions: the identity, or with a device budget the layer's hot neurons first, then the
 * cold ones, each part in ascending neuron order (rows near each other stay near each other). The device side (device.h) computes runs [0, hot_runs), the CPU threads
 * the rest; each run leaves its partial sum of down rows in its own slot, and the slots are
 * added in run order, so the result is the same however the runs were divided. */
#ifndef PI_FFN_SPARSE_H
#define PI_FFN_SPARSE_H
#include <stdatomic.h>

#include "context.h"

/* The rows one side reads: position p is row rows[p] of these weights (the model's mapped
 * tensors, rows = the layout), or row p itself (rows NULL: the identity layout, or a copy of the
 * hot rows laid out by position, as a device holds them). */
typedef struct {
    pi_weight fc1, fc2, gate, up, down_t;
    const int32_t *rows;
} ffn_rows;

/* One token through one layer. */
typedef struct {
    pi_context *c;
    const pi_layer *L;
    pi_act x;               /* the normed FFN input */
    float threshold;
    const int32_t *layout;  /* [n_ff] the neuron at each position, or NULL: the identity */
    int hot_runs, n_runs;
    atomic_int next_cold;   /* the CPU threads' next run */
} ffn_job;

/* h = relu(fc1 x) in the context's predictor slot `slot` (a CPU thread's, or the device's
 * after them), with its quantized forms */
pi_act pi_ffn_hidden(const ffn_job *job, const ffn_rows *w, int slot);

/* Run r of the job: the neurons whose logit reaches the threshold, their gate, up and
 * activation, and the sum of their down rows into the run's slot. Returns the neurons computed. */
int pi_ffn_run(const ffn_job *job, const ffn_rows *w, pi_act hq, int r);

/* Runs [0, hot_runs) folded into slot 0 as the merge adds slots: their sum in run order (runs
 * without neurons skipped) and their neurons in run_rows[0], the other counts 0, so that adding
 * slot 0 and then the cold runs gives the bits of adding every run in turn. */
void pi_ffn_fold_hot(pi_context *c, int hot_runs);

/* delta[t] = FFN(xn[t]) through the predictors, on the CPU and the context's device: PI_OK, or
 * the device's error status */
int pi_ffn_sparse(pi_context *c, int layer, int t, pi_act x);

/* the forward pass's own steps, shared with this file */
pi_act pi_quantize(const pi_kernels *k, const float *x, pi_act_store store, int n, int d);
void pi_activate(const pi_context *c, float *g, const float *u, size_t count);

#endif
