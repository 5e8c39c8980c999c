/* placement_chains.c - the knapsack over chains of device candidates (placement_chains.h).
 *
 * Greedy by value per byte is optimal when items are the same size; runs of different sizes (a
 * layer's last short run, experts in other quant types than the dense weights) make it a 0/1
 * knapsack, where greedy may miss. Because value per byte never increases along a chain, the LP
 * relaxation's optimum is the fractional greedy over the same ranking (it already takes chains
 * as prefixes), so greedy >= LP - (value of the first item that did not fit) >= OPT - that value.
 * The plan reports both, so its gap to the optimum is bounded, not guessed. */
#include <math.h>
#include <stdlib.h>

#include "placement_chains.h"
#include "status.h"

typedef struct {
    double per_byte;
    int32_t chain, pos;
} ranked;

static int by_rank(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->per_byte != y->per_byte) return x->per_byte > y->per_byte ? -1 : 1;
    if (x->chain != y->chain) return x->chain - y->chain;
    return x->pos - y->pos;
}

int pi_plan_chains(int n_chain, const int32_t *first, const pi_plan_item *items, uint64_t budget, int32_t *taken,
                   pi_placement_totals *totals) {
    const int32_t n = first[n_chain];
    for (int c = 0; c < n_chain; c++) taken[c] = 0;
    ranked *rank = malloc((size_t)(n > 0 ? n : 1) * sizeof *rank);
    if (!rank) return pi_set_error(PI_ERR_NOMEM, "no memory for the placement");
    int32_t at = 0;
    for (int c = 0; c < n_chain; c++)
        for (int32_t i = first[c]; i < first[c + 1]; i++) {
            double per_byte = items[i].value / (double)items[i].bytes;
            /* rounding could lift a later item a hair above an earlier one: keep the chain's order */
            if (i > first[c] && per_byte > rank[at - 1].per_byte) per_byte = rank[at - 1].per_byte;
            rank[at++] = (ranked){ per_byte, c, i - first[c] };
        }
    qsort(rank, (size_t)n, sizeof *rank, by_rank);
    uint64_t left = budget, lp_left = budget;
    int lp_open = 1; /* the LP relaxation has not yet met the item it takes a fraction of */
    for (int32_t k = 0; k < n; k++) {
        const ranked *r = &rank[k];
        const pi_plan_item *it = &items[first[r->chain] + r->pos];
        if (lp_open && it->bytes <= lp_left) {
            lp_left -= it->bytes;
            totals->upper_bound_value += it->value;
        } else if (lp_open) {
            totals->upper_bound_value += it->value * ((double)lp_left / (double)it->bytes);
            totals->max_loss = it->value;
            lp_open = 0;
        }
        if (it->bytes > left || taken[r->chain] != r->pos) continue; /* does not fit, or its chain stopped before it */
        left -= it->bytes;
        taken[r->chain]++;
        totals->value += it->value;
    }
    free(rank);
    return PI_OK;
}

PI_API int pi_plan_knapsack(int32_t n_chain, const int32_t *chain_len, const uint64_t *bytes, const double *value,
                            uint64_t budget, int32_t *taken, pi_placement_totals *totals) {
    if (n_chain < 0 || (n_chain > 0 && (!chain_len || !taken)) || !totals)
        return pi_set_error(PI_ERR_ARG, "pi_plan_knapsack: NULL argument or n_chain < 0");
    int32_t *first = malloc((size_t)(n_chain + 1) * sizeof *first);
    if (!first) return pi_set_error(PI_ERR_NOMEM, "no memory for the placement");
    first[0] = 0;
    int rc = PI_OK;
    for (int c = 0; c < n_chain && !rc; c++) {
        if (chain_len[c] < 0 || chain_len[c] > INT32_MAX - first[c])
            rc = pi_set_error(PI_ERR_ARG, "pi_plan_knapsack: chain %d has length %d", c, chain_len[c]);
        else
            first[c + 1] = first[c] + chain_len[c];
    }
    const int32_t n = rc ? 0 : first[n_chain];
    pi_plan_item *items = malloc((size_t)(n > 0 ? n : 1) * sizeof *items);
    if (!rc && !items) rc = pi_set_error(PI_ERR_NOMEM, "no memory for the placement");
    if (!rc && n > 0 && (!bytes || !value)) rc = pi_set_error(PI_ERR_ARG, "pi_plan_knapsack: NULL items");
    for (int c = 0; c < n_chain && !rc; c++)
        for (int32_t i = first[c]; i < first[c + 1] && !rc; i++) {
            items[i] = (pi_plan_item){ bytes[i], value[i] };
            if (bytes[i] == 0 || !isfinite(value[i]) || value[i] < 0.0)
                rc = pi_set_error(PI_ERR_ARG, "pi_plan_knapsack: item %d needs bytes > 0 and a finite value >= 0", i);
            else if (i > first[c] && value[i] / (double)bytes[i] >
                                         value[i - 1] / (double)bytes[i - 1] * (1.0 + 1e-12))
                rc = pi_set_error(PI_ERR_ARG, "pi_plan_knapsack: value per byte rises along chain %d at item %d", c, i);
        }
    if (!rc) {
        *totals = (pi_placement_totals){ .budget = budget };
        rc = pi_plan_chains(n_chain, first, items, budget, taken, totals);
    }
    free(items);
    free(first);
    return rc;
}
