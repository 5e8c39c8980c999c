/* ffn_moe_split.h - the hot/cold split of an MoE FFN (ffn_moe.h) for one token.
 *
 * An expert's n_ff_exp neurons are visited in runs of PI_FFN_RUN consecutive neurons, in their
 * natural order: run r is rows [128 r, 128 (r + 1)) of the expert's gate and up, and the same
 * columns of its down (32-weight blocks, or float, so a partial dot over them is exact block
 * arithmetic). The planner marks each (layer, expert, run) hot or cold; the hot runs live on the
 * device (device/hot_experts.h), the cold ones are read from the model by the CPU threads.
 *
 * The token is routed once, on the CPU (ffn_moe.h's pi_moe_route), and the device is handed that
 * selection: the same experts and weights on both sides, so no near tie can leave an expert
 * computed twice or not at all. The split engine (split_engine.h) takes each routed expert as a
 * group of its runs: each run leaves its partial down sum in its own slot; an expert's output is
 * its cold slots added in run order, plus its hot slots folded in run order (the device's part:
 * one vector per expert), the same bits wherever each run was computed. Experts are then added,
 * weighted, in ascending expert order. Without a device (PI_DEVICE_NONE) the CPU computes every run with the same
 * folds: the reference the split is tested against. With the stream on the device (its
 * attention placed there) the device norms the token's input for the CPU and merges there.
 *
 * smallthinker routes from the layer's input, before attention: blocks.c keeps those logits in
 * moe.probs and pi_moe_route takes them. Its attention is never placed on the device (device/
 * place.c; the planner spends no budget on it), so that the CPU has the layer's input: its
 * stream stays on the host and the split is never resident. Its ReGLU runs skip dead neurons
 * (pi_expert_run) on both sides alike.
 *
 * Only one-token steps take the split (as PI_SPARSE_DECODE does for the neuron split); a batch
 * runs the plain MoE path on the CPU, which reads each routed expert once for all its tokens. */
#ifndef PI_FFN_MOE_SPLIT_H
#define PI_FFN_MOE_SPLIT_H
#include "context.h"
#include "split_engine.h"

/* One run's weights: gate and up views of its rows (n_out = the run's neurons), down a view of its
 * columns (n_in = the run's neurons, n_out = n_embd, data at its first column, row_bytes the
 * stride between rows, or between 16-row groups / 16 when grouped). */
typedef struct {
    pi_weight gate, up, down;
} pi_expert_run_rows;

/* The split's plan and one token's scratch, allocated once per context. A unit is j * runs + r:
 * run r of the token's j-th routed expert, in ascending expert order. */
typedef struct pi_expert_split {
    uint8_t *hot;          /* [n_layer][n_expert][runs] 1: the run lives on the device (the planner's exp_hot) */
    int32_t runs;          /* runs per expert, pi_model_expert_runs */
    int32_t k;             /* experts routed per token */
    /* the token */
    int32_t layer;
    pi_act x;              /* its normed FFN input */
    int32_t *expert;       /* [k] routed experts, ascending */
    float *weight;         /* [k] and their routing weights */
    uint8_t *slot_hot;     /* [k * runs] whether each unit's run lives on the device */
    int32_t *cpu_units, *dev_units; /* [k * runs] the units each side computes */
    /* each unit's slices, so that any thread (or the device) may compute any unit */
    float *g, *u;          /* [k][n_ff_exp] gate, then the activation; up */
    block_q8x *q;          /* [k][n_ff_exp / 32] the activation quantized */
    float *acc;            /* [k][runs][n_embd] each unit's partial down sum */
    int32_t *live;         /* [k][n_ff_exp] a ReGLU run's live neurons (gate > 0), run-relative */
    int32_t *rows_done;    /* [k][runs] neurons each unit computed: counts the work actually done */
    int64_t *bytes_done;   /* [k][runs] and the weight bytes it read */
    float *out;            /* [k][n_embd] each expert's cold slots in run order, then its output */
    pi_split split;        /* the token's split over those slots, a group per routed expert */
} pi_expert_split;

/* The split of the plan exp_hot ([n_layer][n_expert][runs], copied) with its scratch, in
 * c->moe.split. PI_ERR_UNSUPPORTED where the runs' columns of down are not whole blocks. */
int pi_expert_split_new(pi_context *c, const uint8_t *exp_hot);
void pi_expert_split_free(pi_context *c);

/* run r of expert e of layer L, read from the model (either row layout) */
pi_expert_run_rows pi_expert_run_rows_of(const pi_model *m, const pi_layer *L, int e, int r);
/* the weight bytes a run reads */
uint64_t pi_expert_run_bytes(const pi_expert_run_rows *w);

/* Unit u of the token from the rows w: gate and up of its neurons, the model's activation, and
 * its partial down sum into its slot. A skipping ReGLU expert (model.moe_skip_rows, smallthinker) reads its
 * gate rows, then only the live neurons' up rows and down's column blocks holding a live neuron
 * (ffn_moe.h's pi_reglu_token, as pi_ffn_moe's one-token
 * experts do); rows_done and bytes_done count what was read. Single-threaded: the CPU threads
 * and the device call it on different units at once. */
void pi_expert_run(pi_context *c, pi_expert_split *s, const pi_expert_run_rows *w, int unit);
/* delta[0] = the MoE FFN of layer il on a (one token, quantized) through the split: PI_OK, or the
 * device's error status */
int pi_ffn_moe_split(pi_context *c, int il, pi_act a);
/* x += FFN(x) for one token with the stream on the device: the device norms it, the CPU routes
 * and computes the cold runs, the device merges (device.h's split_end) */
int pi_ffn_moe_split_resident(pi_context *c, int il);

#endif
