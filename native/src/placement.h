/* placement.h - which FFN neurons and expert runs live on the device: the budget plan over each
 * dense layer's neuron order (most frequent first) and each expert's runs. */
#ifndef PI_PLACEMENT_H
#define PI_PLACEMENT_H
#include "model.h"

/* Runs of PI_FFN_RUN positions (model.h) are the candidates: a dense layer's over its neuron
 * order, an expert's over its neurons in the file's order. */

/* Layer il's neuron order [n_ff]: the neuron at each position, most frequent first by its
 * profiled ffn_freq (ties: lower id first), the identity for a layer without a profile. */
int pi_neuron_order(const pi_model *m, int il, int32_t *order);

/* The plan for a budget of device bytes (the structs are powerinfer.h's, as pi_model_plan returns
 * them): what every token reads first while it fits (the output matrix, then per layer attention,
 * but a parallel block's, the router and the predictor), then runs of dense neurons and of
 * experts together, most expected bytes read per token per byte first (pi_plan_chains), so a
 * dense layer's hot part is a prefix of its order and an expert's a prefix of its runs by read
 * share. plan: [n_layer]; exp_hot: NULL, or [n_layer][n_expert][pi_model_expert_runs], set to 1
 * for each expert run placed on the device. */
void pi_plan_placement(const pi_model *m, uint64_t budget, pi_layer_placement *plan, pi_placement_totals *totals,
                       uint8_t *exp_hot);

#endif
