/* ffn_sparse.h - the predictor-driven FFN of one token, split between the CPU and a device.
 *
 * A layer's neurons are visited by position in the context's layout, in runs of PI_FFN_RUN
 * positions: the identity, or with a device budget the layer's hot neurons first, then the cold
 * ones, each part in ascending neuron order. The device (device/device.h) computes the hot runs
 * [0, hot_runs), the CPU threads the cold ones (in groups of a few runs); each run, or group,
 * leaves its sum of down rows in its first run's slot, and the split engine (split_engine.h) adds
 * them: the FFN's result is cold + hot, the cold slots added in run order, plus the hot ones folded
 * in run order, the same bits wherever each hot run was computed. */
#ifndef PI_FFN_SPARSE_H
#define PI_FFN_SPARSE_H
#include "context.h"
#include "split_engine.h"

/* The rows one side reads: position p is row rows[p] of these weights (the model's mapped
 * tensors, rows = the layout), or row p itself (rows NULL: the identity layout, or a copy of the
 * hot rows laid out by position, as a device holds them). */
typedef struct {
    pi_weight fc1, fc2, gate, up, down_t;
    const int32_t *rows;
} ffn_rows;

/* the factor of the activation a run computes first, the other only where the first is positive */
enum { PI_FFN_FIRST_BOTH = 0, PI_FFN_FIRST_GATE = 1, PI_FFN_FIRST_UP = 2 };

/* One token through one layer: the split engine's groups of one (split_engine.h), whose units are
 * the layer's runs. */
typedef struct ffn_job {
    pi_context *c;
    const pi_layer *L;
    pi_act x;               /* the normed FFN input */
    float threshold;
    const int32_t *layout;  /* [n_ff] the neuron at each position, or NULL: the identity */
    int hot_runs, n_runs;
    int group, n_groups, tail, singles; /* the CPU's units of work (ffn_sparse.c's cpu_unit) */
    int first;              /* PI_FFN_FIRST_*: which of gate and up is computed first */
    int probe;              /* compute both and count their positives (ffn_sparse.c's choose_first) */
    ffn_rows cpu;           /* the rows the CPU reads: the model's, by the layout */
    pi_act hidden;          /* the CPU's relu(fc1 x), quantized */
    pi_split split;         /* the token's split: slots run_acc, run_rows and run_bytes */
} ffn_job;

/* h = relu(fc1 x) in the context's predictor slot `slot`, fc1's rows split between n_threads of
 * the context's pool (1: the calling thread alone), with its quantized forms */
pi_act pi_ffn_hidden(const ffn_job *job, const ffn_rows *w, int slot, int n_threads);

/* Runs [r, r + runs) of the job as one: the neurons whose logit reaches the threshold, their gate and up (the second
 * factor only where the activation can be non-zero), activation, and the sum of their down rows
 * into slot r; their count and the rows' bytes in run_rows[r] and run_bytes[r], those of the
 * other runs 0. Returns the neurons predicted. */
int pi_ffn_run(const ffn_job *job, const ffn_rows *w, pi_act hq, int r, int runs);

/* delta[t] = FFN(xn[t]) through the predictors, the stream on the host: PI_OK, or the device's
 * error status */
int pi_ffn_sparse(pi_context *c, int layer, int t, pi_act x);
/* x += FFN(x) for n tokens with the stream on the device: per token the device norms it, the CPU
 * computes the cold runs from its copy, the device merges (device.h's split) */
int pi_ffn_sparse_resident(pi_context *c, int layer, int n);

#endif
