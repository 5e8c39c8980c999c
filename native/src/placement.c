/* placement.c - the device budget plan (placement.h): the candidates, dense neuron runs and
 * expert runs, as chains for pi_plan_chains, and its choice back as per-layer results. */
#include <stdlib.h>
#include <string.h>

#include "placement.h"
#include "placement_chains.h"
#include "status.h"
#include "token_bytes.h"

typedef struct {
    float freq;
    int32_t id;
} ranked;

static int by_freq_desc(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->freq != y->freq) return x->freq > y->freq ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* the loader checked that every frequency is finite (model.c) */
int pi_neuron_order(const pi_model *m, int il, int32_t *order) {
    const pi_layer *L = &m->layers[il];
    const int n_ff = m->info.n_ff;
    if (!L->ffn_freq) {
        for (int i = 0; i < n_ff; i++) order[i] = i;
        return PI_OK;
    }
    ranked *tmp = malloc((size_t)n_ff * sizeof *tmp);
    if (!tmp) return pi_set_error(PI_ERR_NOMEM, "no memory for the neuron order");
    for (int i = 0; i < n_ff; i++) tmp[i] = (ranked){ L->ffn_freq[i], i };
    qsort(tmp, (size_t)n_ff, sizeof *tmp, by_freq_desc);
    for (int i = 0; i < n_ff; i++) order[i] = tmp[i].id;
    free(tmp);
    return PI_OK;
}

/* what every token reads in a layer besides the FFN that the device can hold: attention, the
 * router and the predictor; a parallel block's attention (falcon) stays on the CPU, its step
 * holding the FFN the split runs (device/place.c), so only its predictor takes budget; so does a
 * model that routes from the layer's input (smallthinker), whose router logits the CPU computes
 * at the attention step, the stream kept on the host */
static uint64_t layer_fixed_bytes(const pi_model *m, const pi_layer *L) {
    return (m->parallel || m->router_on_input ? 0 : pi_attention_bytes(L)) + pi_weight_bytes(&L->ffn_gate_inp) + pi_predictor_bytes(L);
}

/* a dense layer's runs are placed by the split only where it has a predictor and ffn_down_t */
static int dense_candidate(const pi_layer *L) { return L->ffn_freq && L->fc1.data && L->ffn_down_t.data; }

/* bytes of expert neurons [p0, p1): their gate and up rows, and their share of the down rows'
 * bytes (a quantized block of down may straddle two runs: cut where p0 and p1 fall, the runs'
 * shares add up to the whole) */
typedef struct {
    uint64_t gate, up_down;
} run_bytes;

static run_bytes expert_run_bytes(const pi_model *m, const pi_layer *L, int p0, int p1) {
    const uint64_t down = pi_weight_bytes(&L->ffn_down_exps), n = (uint64_t)m->n_ff_exp;
    return (run_bytes){ (uint64_t)(p1 - p0) * L->ffn_gate_exps.row_bytes,
                        (uint64_t)(p1 - p0) * L->ffn_up_exps.row_bytes + down * (uint64_t)p1 / n - down * (uint64_t)p0 / n };
}

/* Expert e's runs: the gate rows are read whenever it is routed (exp_freq), the up and down rows
 * as often as the run's neurons are live (exp_run_freq); without a profile each expert is routed
 * n_expert_used / n_expert of the time and reads every row. */
static double expert_run_value(const pi_model *m, const pi_layer *L, int e, int r, run_bytes b) {
    const int runs = pi_model_expert_runs(m);
    const double routed = L->exp_freq ? L->exp_freq[e] : (double)m->n_expert_used / m->n_expert;
    const double read = L->exp_run_freq ? L->exp_run_freq[(size_t)e * runs + r] : routed;
    return routed * (double)b.gate + read * (double)b.up_down;
}

/* what a chain stands for: a dense layer (expert -1) or one expert; its items' runs */
typedef struct {
    int32_t layer, expert;
} chain_of;

typedef struct {
    int32_t run, n; /* dense: the run's position in the order; expert: the run's index */
} item_of;

typedef struct {
    double per_byte;
    int32_t run, n;
    pi_plan_item item;
} expert_run;

static int by_per_byte(const void *a, const void *b) {
    const expert_run *x = a, *y = b;
    if (x->per_byte != y->per_byte) return x->per_byte > y->per_byte ? -1 : 1;
    return x->run - y->run;
}

typedef struct {
    int32_t *first;
    pi_plan_item *items;
    item_of *of;
    chain_of *chains;
    expert_run *scratch;
    int32_t *order; /* [n_ff] a dense layer's neuron order */
    int n_chain;
} candidates;

static int add_dense(const pi_model *m, int il, candidates *c) {
    const pi_layer *L = &m->layers[il];
    const int n_ff = m->info.n_ff;
    const uint64_t bytes = pi_neuron_bytes(L);
    if (pi_neuron_order(m, il, c->order)) return -1;
    int32_t at = c->first[c->n_chain];
    for (int p0 = 0; p0 < n_ff; p0 += PI_FFN_RUN) {
        const int n = n_ff - p0 < PI_FFN_RUN ? n_ff - p0 : PI_FFN_RUN;
        double freq = 0.0;
        for (int p = p0; p < p0 + n; p++) freq += L->ffn_freq[c->order[p]];
        c->items[at] = (pi_plan_item){ bytes * (uint64_t)n, freq * (double)bytes };
        c->of[at++] = (item_of){ p0 / PI_FFN_RUN, n };
    }
    c->chains[c->n_chain++] = (chain_of){ il, -1 };
    c->first[c->n_chain] = at;
    return 0;
}

/* an expert's runs, most read per byte first (for SwiGLU experts every run alike: file order) */
static void add_expert(const pi_model *m, int il, int e, candidates *c) {
    const pi_layer *L = &m->layers[il];
    const int runs = pi_model_expert_runs(m);
    for (int r = 0; r < runs; r++) {
        const int p0 = r * PI_FFN_RUN, p1 = p0 + PI_FFN_RUN < m->n_ff_exp ? p0 + PI_FFN_RUN : m->n_ff_exp;
        const run_bytes b = expert_run_bytes(m, L, p0, p1);
        const pi_plan_item item = { b.gate + b.up_down, expert_run_value(m, L, e, r, b) };
        c->scratch[r] = (expert_run){ item.value / (double)item.bytes, r, p1 - p0, item };
    }
    qsort(c->scratch, (size_t)runs, sizeof *c->scratch, by_per_byte);
    int32_t at = c->first[c->n_chain];
    for (int k = 0; k < runs; k++) {
        c->items[at] = c->scratch[k].item;
        c->of[at++] = (item_of){ c->scratch[k].run, c->scratch[k].n };
    }
    c->chains[c->n_chain++] = (chain_of){ il, e };
    c->first[c->n_chain] = at;
}

/* the output, then each layer's fixed part, while they fit; returns the bytes left */
static uint64_t place_fixed(const pi_model *m, uint64_t budget, pi_layer_placement *plan, pi_placement_totals *totals) {
    uint64_t left = budget;
    const uint64_t output = pi_weight_bytes(&m->output);
    if (output <= left) {
        left -= output;
        totals->fixed_bytes += output;
        totals->output_on_device = 1;
    }
    for (int il = 0; il < m->info.n_layer; il++) {
        const uint64_t fixed = layer_fixed_bytes(m, &m->layers[il]);
        if (fixed > left) break;
        left -= fixed;
        totals->fixed_bytes += fixed;
        plan[il].fixed_on_device = 1;
    }
    return left;
}

/* the chosen prefixes as per-layer results, coverage as shares of each layer's whole value */
static void apply(const pi_model *m, const candidates *c, const int32_t *taken, pi_layer_placement *plan,
                  pi_placement_totals *totals, uint8_t *exp_hot, double *dense_total, double *expert_total) {
    const int runs = pi_model_expert_runs(m);
    for (int k = 0; k < c->n_chain; k++) {
        const chain_of *ch = &c->chains[k];
        pi_layer_placement *lp = &plan[ch->layer];
        for (int32_t i = c->first[k]; i < c->first[k + 1]; i++) {
            const int hot = i - c->first[k] < taken[k];
            const double value = c->items[i].value;
            if (ch->expert < 0) {
                dense_total[ch->layer] += value;
                if (!hot) continue;
                lp->n_hot += c->of[i].n;
                lp->bytes += c->items[i].bytes;
                lp->coverage += value;
                totals->neuron_bytes += c->items[i].bytes;
            } else {
                expert_total[ch->layer] += value;
                if (!hot) continue;
                lp->n_hot_expert_runs++;
                lp->expert_bytes += c->items[i].bytes;
                lp->expert_coverage += value;
                totals->expert_bytes += c->items[i].bytes;
                if (exp_hot) exp_hot[((size_t)ch->layer * m->n_expert + ch->expert) * runs + c->of[i].run] = 1;
            }
        }
    }
    for (int il = 0; il < m->info.n_layer; il++) {
        plan[il].coverage = dense_total[il] > 0.0 ? plan[il].coverage / dense_total[il] : 0.0;
        plan[il].expert_coverage = expert_total[il] > 0.0 ? plan[il].expert_coverage / expert_total[il] : 0.0;
    }
}

void pi_plan_placement(const pi_model *m, uint64_t budget, pi_layer_placement *plan, pi_placement_totals *totals,
                       uint8_t *exp_hot) {
    const int n_layer = m->info.n_layer, runs = pi_model_expert_runs(m);
    memset(plan, 0, (size_t)n_layer * sizeof *plan);
    memset(totals, 0, sizeof *totals);
    if (exp_hot) memset(exp_hot, 0, (size_t)n_layer * (size_t)m->n_expert * (size_t)runs);
    totals->budget = budget;
    const uint64_t left = place_fixed(m, budget, plan, totals);

    size_t n_chain = 0, n_item = 0;
    for (int il = 0; il < n_layer; il++) {
        const pi_layer *L = &m->layers[il];
        if (dense_candidate(L)) n_chain++, n_item += (size_t)(m->info.n_ff + PI_FFN_RUN - 1) / PI_FFN_RUN;
        if (L->ffn_gate_exps.data) n_chain += (size_t)m->n_expert, n_item += (size_t)m->n_expert * (size_t)runs;
    }
    /* more candidates than an int32 counts, or no memory for the plan: nothing hot, still correct */
    if (n_item >= INT32_MAX) return;
    candidates c = { malloc((n_chain + 1) * sizeof *c.first), malloc((n_item + 1) * sizeof *c.items),
                     malloc((n_item + 1) * sizeof *c.of), malloc((n_chain + 1) * sizeof *c.chains),
                     malloc((size_t)(runs + 1) * sizeof *c.scratch),
                     malloc((size_t)(m->info.n_ff > 0 ? m->info.n_ff : 1) * sizeof *c.order), 0 };
    int32_t *taken = malloc((n_chain + 1) * sizeof *taken);
    double *totals_by_layer = calloc(2 * (size_t)(n_layer > 0 ? n_layer : 1), sizeof(double));
    int failed = !(c.first && c.items && c.of && c.chains && c.scratch && c.order && taken && totals_by_layer);
    if (!failed) {
        c.first[0] = 0;
        for (int il = 0; il < n_layer && !failed; il++) {
            const pi_layer *L = &m->layers[il];
            if (dense_candidate(L)) failed = add_dense(m, il, &c);
            plan[il].n_expert_runs = L->ffn_gate_exps.data ? m->n_expert * runs : 0;
            for (int e = 0; L->ffn_gate_exps.data && e < m->n_expert; e++) add_expert(m, il, e, &c);
        }
        if (!failed && !pi_plan_chains(c.n_chain, c.first, c.items, left, taken, totals))
            apply(m, &c, taken, plan, totals, exp_hot, totals_by_layer, totals_by_layer + n_layer);
    }
    free(c.first);
    free(c.items);
    free(c.of);
    free(c.chains);
    free(c.scratch);
    free(c.order);
    free(taken);
    free(totals_by_layer);
}

PI_API int pi_model_plan(const pi_model *m, uint64_t budget, pi_layer_placement *layers, pi_placement_totals *totals) {
    if (!m || !layers || !totals) return pi_set_error(PI_ERR_ARG, "pi_model_plan: NULL argument");
    if (m->vocab_only) return pi_set_error(PI_ERR_ARG, "model was loaded with vocab_only: it has no weights to place");
    pi_plan_placement(m, budget, layers, totals, NULL);
    return PI_OK;
}

PI_API int pi_model_plan_experts(const pi_model *m, uint64_t budget, uint8_t *exp_hot, uint64_t n) {
    if (!m || !exp_hot) return pi_set_error(PI_ERR_ARG, "pi_model_plan_experts: NULL argument");
    if (m->vocab_only) return pi_set_error(PI_ERR_ARG, "model was loaded with vocab_only: it has no weights to place");
    const uint64_t want = (uint64_t)m->info.n_layer * (uint64_t)m->n_expert * (uint64_t)pi_model_expert_runs(m);
    if (n != want)
        return pi_set_error(PI_ERR_ARG, "pi_model_plan_experts: exp_hot holds %llu runs, the model %llu",
                            (unsigned long long)n, (unsigned long long)want);
    pi_layer_placement *plan = malloc((size_t)(m->info.n_layer > 0 ? m->info.n_layer : 1) * sizeof *plan);
    if (!plan) return pi_set_error(PI_ERR_NOMEM, "no memory for the placement");
    pi_placement_totals totals;
    pi_plan_placement(m, budget, plan, &totals, exp_hot);
    free(plan);
    return PI_OK;
}

/* every weight of an FFN: a dense one's, or an MoE layer's router and all its experts */
static uint64_t ffn_device_bytes(const pi_model *m, const pi_layer *L) {
    if (L->ffn_gate_exps.data)
        return (uint64_t)m->n_expert * (pi_weight_bytes(&L->ffn_gate_exps) + pi_weight_bytes(&L->ffn_up_exps) +
                                        pi_weight_bytes(&L->ffn_down_exps));
    return L->ffn_down_t.data ? pi_neuron_bytes(L) * (uint64_t)m->info.n_ff : pi_dense_ffn_bytes(L);
}

PI_API uint64_t pi_model_device_bytes(const pi_model *m) {
    if (!m || m->vocab_only) return 0;
    uint64_t total = pi_weight_bytes(&m->output);
    for (int il = 0; il < m->info.n_layer; il++)
        total += layer_fixed_bytes(m, &m->layers[il]) + ffn_device_bytes(m, &m->layers[il]);
    return total;
}
