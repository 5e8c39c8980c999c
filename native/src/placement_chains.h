/* placement_chains.h - the knapsack the placement (placement.c) hands its candidates to. */
#ifndef PI_PLACEMENT_CHAINS_H
#define PI_PLACEMENT_CHAINS_H
#include <stdint.h>

#include "powerinfer.h"

/* One candidate for the device: its bytes and its value, the bytes a token is expected to read
 * from it (read probability x bytes). */
typedef struct {
    uint64_t bytes;
    double value;
} pi_plan_item;

/* The 0/1 knapsack over chains of items (chain c: items [first[c], first[c + 1])) where a chain
 * is taken as a prefix and value per byte does not increase along a chain: greedy by value per
 * byte, skipping what does not fit. taken[c]: the prefix length of chain c. totals: value,
 * upper_bound_value (the LP relaxation, >= the optimum), max_loss (the value of the first item by
 * rank that did not fit: value >= optimum - max_loss), added to what they hold. PI_ERR_NOMEM
 * leaves nothing taken. */
int pi_plan_chains(int n_chain, const int32_t *first, const pi_plan_item *items, uint64_t budget, int32_t *taken,
                   pi_placement_totals *totals);

#endif
