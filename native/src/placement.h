/* placement.h - which FFN neurons live on the device: the budget plan over each layer's order
 * (model.h's pi_layer.order, most frequent first). */
#ifndef PI_PLACEMENT_H
#define PI_PLACEMENT_H
#include "model.h"

/* Neurons are visited in runs of this many positions of a layer's order; a layer's hot part is a
 * whole number of runs, so the runs, and the order their partial sums are added in, are the
 * same however the layer is split between the device and the CPU. */
enum { PI_FFN_RUN = 128 };

/* The plan for a budget of device bytes (the structs are powerinfer.h's, as pi_model_plan returns
 * them): what every token reads first while it fits (the output matrix, then per layer attention,
 * but a parallel block's, and the predictor), then runs of neurons of every layer, most profiled
 * activations per byte first, so a layer's hot part is a prefix of its order; greedy, which is
 * optimal for neurons of equal size (docs/ARCHITECTURE.md). plan: [n_layer]. */
void pi_plan_placement(const pi_model *m, uint64_t budget, pi_layer_placement *plan, pi_placement_totals *totals);

#endif
