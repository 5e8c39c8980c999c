/* split_engine.h - the hot/cold split of one token's FFN, one engine for both splits: a layer's
 * neurons (ffn_sparse.h) and an MoE layer's routed experts (ffn_moe_split.h).
 *
 * The FFN is groups of runs: one group of the layer's runs, or one group per routed expert. Run r
 * of group g is unit g * runs + r, which leaves its partial down sum in slot g * runs + r with the
 * neurons it computed and the weight bytes it read; a slot whose unit read no bytes (a run without
 * neurons) was not written. The device computes the hot units and folds each group's hot slots,
 * in run order, into the group's first hot slot (the group's hot sum); the CPU threads compute the
 * others, and each group's cold slots are added in run order into its cold sum. The merge adds a
 * group's hot sum to its cold sum and, for experts, the groups weighted in order: the same bits
 * wherever each run was computed. Without a device the CPU computes the hot units too and folds
 * them as a device does. */
#ifndef PI_SPLIT_ENGINE_H
#define PI_SPLIT_ENGINE_H
#include <stdatomic.h>

#include "context.h"

/* what a device's hot units are */
typedef enum { PI_SPLIT_NEURONS, PI_SPLIT_EXPERTS } pi_split_kind;

typedef struct pi_split pi_split;
struct pi_split {
    pi_split_kind kind;
    void *work;             /* what the units are computed from: the ffn_job, or the pi_expert_split */
    int layer, t;           /* the layer, and the token's row of the step (in the device's stream too) */
    pi_act x;               /* the normed FFN input */
    int resident;           /* the stream is on the device: the device normed x and merges */
    struct pi_device *device; /* takes the hot units; NULL: the CPU computes them */
    /* the slots */
    int n_groups, runs;
    float *acc;             /* [n_groups * runs][n_embd] each slot's partial down sum */
    int32_t *rows;          /* [n_groups * runs] neurons its unit computed */
    int64_t *bytes;         /* [n_groups * runs] weight bytes it read; 0: the slot was not written */
    const uint8_t *hot;     /* [n_groups * runs] whether each slot is hot, or NULL: slots [0, hot_runs) */
    int hot_runs;
    float *cold;            /* [n_groups][n_embd] each group's cold sum */
    const float *weight;    /* [n_groups] the groups' weights, or NULL: one group, whose cold sum is y */
    float *y;               /* [n_embd] the FFN's result */
    /* the units each side computes; the CPU threads claim theirs, 0 .. n_cpu, one at a time */
    int n_cpu, n_dev;
    void (*cpu_begin)(pi_context *c, pi_split *s); /* before the CPU's units, where it has any; or NULL */
    void (*cpu_unit)(pi_context *c, pi_split *s, int i);
    atomic_int next;
};

/* One token through the split: the device's start (where it has units), the CPU's units on the
 * context's pool, the CPU's own fold without a device, the cold sums, the device's end (its wait,
 * or its merge when resident), and the host's merge otherwise. PI_OK, or the device's status. */
int pi_split_run(pi_context *c, pi_split *s);
/* Each group's hot slots, in run order, into its first hot slot, their neurons and bytes with
 * them (the others' counts 0): what a device hands back. */
void pi_split_fold(pi_context *c, pi_split *s);
/* s->y = the merge of the cold sums and the folded hot ones, whose neurons and bytes are counted
 * here: the host's, or a resident device's */
void pi_split_merge(pi_context *c, pi_split *s);

#endif
