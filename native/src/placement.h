/* placement.h - which FFN neurons and expert runs live on the device: the budget plan over each
 * dense layer's order (model.h's pi_layer.order, most frequent first) and each expert's runs. */
#ifndef PI_PLACEMENT_H
#define PI_PLACEMENT_H
#include "model.h"

/* Neurons are visited in runs of this many positions of a layer's order; a layer's hot part is a
 * whole number of runs, so the runs, and the order their partial sums are added in, are the
 * same however the layer is split between the device and the CPU. An expert's runs are this many
 * contiguous neurons in the file's order (run j: [128 j, min(128 (j + 1), n_ff_exp)), the last
 * one maybe shorter); its rows are not re-laid out. */
enum { PI_FFN_RUN = 128 };

/* Runs per expert: ceil(n_ff_exp / PI_FFN_RUN); 0 without experts. */
int pi_model_expert_runs(const pi_model *m);

/* The plan for a budget of device bytes (the structs are powerinfer.h's, as pi_model_plan returns
 * them): what every token reads first while it fits (the output matrix, then per layer attention,
 * but a parallel block's, the router and the predictor), then runs of dense neurons and of
 * experts together, most expected bytes read per token per byte first (pi_plan_chains), so a
 * dense layer's hot part is a prefix of its order and an expert's a prefix of its runs by read
 * share. plan: [n_layer]; exp_hot: NULL, or [n_layer][n_expert][pi_model_expert_runs], set to 1
 * for each expert run placed on the device. */
void pi_plan_placement(const pi_model *m, uint64_t budget, pi_layer_placement *plan, pi_placement_totals *totals,
                       uint8_t *exp_hot);

/* One candidate for the device: its bytes and its value, the bytes a token is expected to read
 * from it (read probability x bytes). */
typedef struct {
    uint64_t bytes;
    double value;
} pi_plan_item;

/* The 0/1 knapsack over chains of items (chain c: items [first[c], first[c + 1])) where a chain
 * is taken as a prefix and value per byte does not increase along a chain (placement_chains.c):
 * greedy by value per byte, skipping what does not fit. taken[c]: the prefix length of chain c.
 * totals: value, upper_bound_value (the LP relaxation, >= the optimum), max_loss (the value of
 * the first item by rank that did not fit: value >= optimum - max_loss), added to what they
 * hold. PI_ERR_NOMEM leaves nothing taken. */
int pi_plan_chains(int n_chain, const int32_t *first, const pi_plan_item *items, uint64_t budget, int32_t *taken,
                   pi_placement_totals *totals);

#endif
