/* placement.h - the order of each layer's FFN neurons, and which of them live on the device. */
#ifndef PI_PLACEMENT_H
#define PI_PLACEMENT_H
#include "model.h"

/* Neurons are visited in runs of this many positions of a layer's order; a layer's hot part is a
 * whole number of runs, so the runs, and the order their partial sums are added in, are the
 * same however the layer is split between the device and the CPU. */
enum { PI_FFN_RUN = 128 };

/* Fill every layer's order: neurons by descending ffn_freq (ties: lower id first), the identity
 * for a layer without a profile. A non-finite frequency is a format error. */
int pi_order_neurons(pi_model *m);

/* Bytes of one neuron's rows that the sparse FFN reads: gate, up and ffn_down_t. */
uint64_t pi_neuron_bytes(const pi_layer *L);

/* The plan for a budget of device bytes. What every token reads goes first, as long as it
 * fits: the output matrix, then per layer attention (but a parallel block's, which stays on the
 * CPU) and the predictor. Then runs of neurons of
 * every layer, most profiled activations per byte first. Each run's neurons are a layer's next
 * most frequent ones, so within a layer runs are taken in order and the hot part stays a prefix
 * of its order. When every neuron costs the same bytes, this greedy choice maximises the
 * activations served by the device (an exchange argument: swapping a hot neuron for a colder
 * one of the same size never helps); only differing sizes would call for an integer program,
 * and there the run granularity already bounds what the greedy leaves unused.
 * The public structs are in powerinfer.h (pi_model_plan). */
/* plan: [n_layer]. Layers without a profile get no hot neurons. */
void pi_plan_placement(const pi_model *m, uint64_t budget, pi_layer_placement *plan, pi_placement_totals *totals);

#endif
