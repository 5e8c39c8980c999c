/* placement.c - the device budget plan (placement.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "placement.h"
#include "status.h"
#include "token_bytes.h"

/* what every token reads in a layer besides the FFN that the device can hold: attention and the
 * predictor; a parallel block's attention (falcon) stays on the CPU, its step holding the FFN
 * the split runs (device/place.c), so only its predictor takes budget */
static uint64_t layer_fixed_bytes(const pi_model *m, const pi_layer *L) {
    return (m->parallel ? 0 : pi_attention_bytes(L)) + pi_predictor_bytes(L);
}

/* a run of neurons that could go to the device */
typedef struct {
    double value_per_byte;
    double value;
    int32_t layer, run, n;
} candidate;

static int by_value_desc(const void *a, const void *b) {
    const candidate *x = a, *y = b;
    if (x->value_per_byte != y->value_per_byte) return x->value_per_byte > y->value_per_byte ? -1 : 1;
    if (x->layer != y->layer) return x->layer - y->layer;
    return x->run - y->run;
}

void pi_plan_placement(const pi_model *m, uint64_t budget, pi_layer_placement *plan, pi_placement_totals *totals) {
    const int n_ff = m->info.n_ff, n_layer = m->info.n_layer, runs = (n_ff + PI_FFN_RUN - 1) / PI_FFN_RUN;
    memset(plan, 0, (size_t)n_layer * sizeof *plan);
    memset(totals, 0, sizeof *totals);
    totals->budget = budget;
    uint64_t left = budget;
    const uint64_t output = pi_weight_bytes(&m->output);
    if (output <= left) {
        left -= output;
        totals->fixed_bytes += output;
        totals->output_on_device = 1;
    }
    for (int il = 0; il < n_layer; il++) {
        const pi_layer *L = &m->layers[il];
        const uint64_t fixed = layer_fixed_bytes(m, L);
        if (fixed > left) break;
        left -= fixed;
        totals->fixed_bytes += fixed;
        plan[il].fixed_on_device = 1;
    }

    candidate *cand = malloc((size_t)n_layer * (size_t)runs * sizeof *cand);
    if (!cand) return; /* no memory for the plan: nothing hot, still correct */
    int n_cand = 0;
    for (int il = 0; il < n_layer; il++) {
        const pi_layer *L = &m->layers[il];
        if (!L->ffn_freq || !L->fc1.data || !L->ffn_down_t.data) continue;
        const double bytes = (double)pi_neuron_bytes(L);
        for (int r = 0; r < runs; r++) {
            const int p0 = r * PI_FFN_RUN, n = n_ff - p0 < PI_FFN_RUN ? n_ff - p0 : PI_FFN_RUN;
            double value = 0.0;
            for (int p = p0; p < p0 + n; p++) value += L->ffn_freq[L->order[p]];
            cand[n_cand++] = (candidate){ value / (bytes * n), value, il, r, n };
        }
    }
    /* runs of a layer have non-increasing value, so the sort keeps each layer's runs in order
     * (ties broken by run index) and a layer's hot part grows as a prefix */
    qsort(cand, (size_t)n_cand, sizeof *cand, by_value_desc);
    for (int i = 0; i < n_cand; i++) {
        const candidate *c = &cand[i];
        pi_layer_placement *lp = &plan[c->layer];
        const uint64_t bytes = pi_neuron_bytes(&m->layers[c->layer]) * (uint64_t)c->n;
        if (bytes > left || lp->n_hot != c->run * PI_FFN_RUN) continue; /* does not fit, or not the next run */
        left -= bytes;
        lp->n_hot += c->n;
        lp->bytes += bytes;
        lp->coverage += c->value;
        totals->neuron_bytes += bytes;
    }
    free(cand);
    for (int il = 0; il < n_layer; il++) {
        const pi_layer *L = &m->layers[il];
        double total = 0.0;
        if (L->ffn_freq)
            for (int i = 0; i < n_ff; i++) total += L->ffn_freq[i];
        plan[il].coverage = total > 0.0 ? plan[il].coverage / total : 0.0;
    }
}

PI_API int pi_model_plan(const pi_model *m, uint64_t budget, pi_layer_placement *layers, pi_placement_totals *totals) {
    if (!m || !layers || !totals) return pi_set_error(PI_ERR_ARG, "pi_model_plan: NULL argument");
    if (m->vocab_only) return pi_set_error(PI_ERR_ARG, "model was loaded with vocab_only: it has no weights to place");
    pi_plan_placement(m, budget, layers, totals);
    return PI_OK;
}

PI_API uint64_t pi_model_device_bytes(const pi_model *m) {
    if (!m || m->vocab_only) return 0;
    uint64_t total = pi_weight_bytes(&m->output);
    for (int il = 0; il < m->info.n_layer; il++) {
        const pi_layer *L = &m->layers[il];
        total += layer_fixed_bytes(m, L);
        total += L->ffn_down_t.data ? pi_neuron_bytes(L) * (uint64_t)m->info.n_ff
                                    : pi_weight_bytes(&L->ffn_gate) + pi_weight_bytes(&L->ffn_up) + pi_weight_bytes(&L->ffn_down);
    }
    return total;
}
