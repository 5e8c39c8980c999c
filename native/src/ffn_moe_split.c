/* ffn_moe_split.c - the hot/cold split of an MoE FFN for one token (ffn_moe_split.h). */
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "ffn_moe.h"
#include "ffn_moe_split.h"
#include "ops.h"
#include "placement.h"
#include "status.h"
#include "token_bytes.h"

int pi_expert_split_new(pi_context *c, const uint8_t *exp_hot) {
    const pi_model *m = c->model;
    /* a run's columns of down must be whole blocks: 32-weight blocks or floats, not K-quants */
    for (int il = 0; il < m->info.n_layer; il++) {
        const pi_weight *down = &m->layers[il].ffn_down_exps;
        if (PI_FFN_RUN % pi_type_block_size(down->type))
            return pi_set_error(PI_ERR_UNSUPPORTED, "the expert split reads runs of %d columns of %s, which is %s (blocks "
                                "of %d): vram_budget needs expert down matrices in 32-weight blocks or floats",
                                PI_FFN_RUN, down->name, pi_type_name(down->type), pi_type_block_size(down->type));
    }
    pi_expert_split *s = calloc(1, sizeof *s);
    if (!s) return pi_set_error(PI_ERR_NOMEM, "no memory for the expert split");
    c->moe.split = s;
    const size_t d = (size_t)m->info.n_embd, ff = (size_t)m->n_ff_exp, k = (size_t)m->n_expert_used;
    s->runs = pi_model_expert_runs(m);
    s->k = (int32_t)k;
    const size_t runs = (size_t)s->runs, plan = (size_t)m->info.n_layer * (size_t)m->n_expert * runs;
    s->hot = malloc(plan);
    s->expert = malloc(k * sizeof *s->expert);
    s->weight = malloc(k * sizeof *s->weight);
    s->slot_hot = malloc(k * runs);
    s->cpu_units = malloc(k * runs * sizeof *s->cpu_units);
    s->dev_units = malloc(k * runs * sizeof *s->dev_units);
    s->g = malloc(k * ff * sizeof *s->g);
    s->u = malloc(k * ff * sizeof *s->u);
    s->q = malloc((k * ff / QK + 1) * sizeof *s->q);
    s->acc = malloc(k * runs * d * sizeof *s->acc);
    s->live = malloc(k * ff * sizeof *s->live);
    s->rows_done = malloc(k * runs * sizeof *s->rows_done);
    s->bytes_done = malloc(k * runs * sizeof *s->bytes_done);
    s->out = malloc(k * d * sizeof *s->out);
    if (!s->hot || !s->expert || !s->weight || !s->slot_hot || !s->cpu_units || !s->dev_units || !s->g || !s->u ||
        !s->q || !s->acc || !s->live || !s->rows_done || !s->bytes_done || !s->out) {
        pi_expert_split_free(c);
        return pi_set_error(PI_ERR_NOMEM, "no memory for the expert split");
    }
    memcpy(s->hot, exp_hot, plan);
    return PI_OK;
}

void pi_expert_split_free(pi_context *c) {
    pi_expert_split *s = c->moe.split;
    if (!s) return;
    free(s->hot); free(s->expert); free(s->weight); free(s->slot_hot); free(s->cpu_units); free(s->dev_units);
    free(s->g); free(s->u); free(s->q); free(s->acc); free(s->live);
    free(s->rows_done); free(s->bytes_done); free(s->out);
    free(s);
    c->moe.split = NULL;
}

/* the rows of a grouped weight are stored 16 at a time, a block of each after another */
static size_t layout_rows(const pi_weight *w) { return w->grouped ? PI_GROUP_ROWS : 1; }

pi_expert_run_rows pi_expert_run_rows_of(const pi_model *m, const pi_layer *L, int e, int r) {
    const int p0 = r * PI_FFN_RUN, n = m->n_ff_exp - p0 < PI_FFN_RUN ? m->n_ff_exp - p0 : PI_FFN_RUN;
    pi_expert_run_rows w = { pi_expert_weight(&L->ffn_gate_exps, e), pi_expert_weight(&L->ffn_up_exps, e),
                             pi_expert_weight(&L->ffn_down_exps, e) };
    /* rows p0.. of gate and up: whole 16-row groups when grouped (128 is 8 of them) */
    w.gate.data += (size_t)p0 * w.gate.row_bytes;
    w.up.data += (size_t)p0 * w.up.row_bytes;
    w.gate.n_out = w.up.n_out = n;
    /* columns p0.. of down: blocks p0 / bs.. of each row, which grouped lie at 16 times the
     * offset in each group; the kernels step rows (groups) by row_bytes, kept */
    const uint32_t t = w.down.type;
    w.down.data += (size_t)(p0 / pi_type_block_size(t)) * pi_type_block_bytes(t) * layout_rows(&w.down);
    w.down.n_in = n;
    return w;
}

uint64_t pi_expert_run_bytes(const pi_expert_run_rows *w) {
    const uint32_t t = w->down.type;
    const uint64_t down = (uint64_t)w->down.n_out * (uint64_t)(w->down.n_in / pi_type_block_size(t)) * pi_type_block_bytes(t);
    return (uint64_t)w->gate.n_out * (w->gate.row_bytes + w->up.row_bytes) + down;
}

/* the ReGLU run: gate rows, then up and down over the live neurons only (ffn_moe.h) */
static void run_live(pi_context *c, pi_expert_split *s, const pi_expert_run_rows *w, int unit, size_t at) {
    const size_t d = (size_t)c->model->info.n_embd;
    const pi_reglu_scratch scratch = { s->g + at, s->u + at, s->live + at, { s->q + at / QK, NULL },
                                       s->acc + (size_t)unit * d };
    int64_t bytes;
    s->rows_done[unit] += pi_reglu_token(c, &w->gate, &w->up, &w->down, s->x, &scratch, 0, &bytes);
    s->bytes_done[unit] += bytes;
}

void pi_expert_run(pi_context *c, pi_expert_split *s, const pi_expert_run_rows *w, int unit) {
    const pi_kernels *k = &c->kern;
    const int d = c->model->info.n_embd, nr = (int)w->gate.n_out;
    const size_t at = (size_t)(unit / s->runs) * (size_t)c->model->n_ff_exp + (size_t)(unit % s->runs) * PI_FFN_RUN;
    if (c->model->moe_skip_rows) {
        run_live(c, s, w, unit, at);
        return;
    }
    float *g = s->g + at, *u = s->u + at, *acc = s->acc + (size_t)unit * d;
    pi_weight_matmul(k, &w->gate)(w->gate.data, w->gate.row_bytes, NULL, 0, nr, s->x, 1, g, nr);
    pi_weight_matmul(k, &w->up)(w->up.data, w->up.row_bytes, NULL, 0, nr, s->x, 1, u, nr);
    pi_activate(c, g, u, (size_t)nr);
    const pi_act h = pi_quantize(k, g, (pi_act_store){ s->q + at / QK, NULL }, 1, nr);
    pi_weight_matmul(k, &w->down)(w->down.data, w->down.row_bytes, NULL, 0, d, h, 1, acc, d);
    s->rows_done[unit] += nr;
    s->bytes_done[unit] += (int64_t)pi_expert_run_bytes(w);
}

/* whether run r of routed expert j lives on the device */
static int is_hot(const pi_expert_split *s, const pi_model *m, int j, int r) {
    return s->hot[((size_t)s->layer * (size_t)m->n_expert + (size_t)s->expert[j]) * (size_t)s->runs + (size_t)r];
}

/* The token's routed experts in ascending order (pi_moe_route's pairs of its one token), each
 * run a unit of the device's when it is hot there and a device takes it, else of the CPU's. */
static void plan_units(pi_context *c, pi_expert_split *s, int with_device) {
    const pi_model *m = c->model;
    int n_cpu = 0, n_dev = 0, j = 0;
    for (int e = 0; e < m->n_expert; e++) {
        const int32_t p = c->moe.first[e];
        if (c->moe.first[e + 1] == p) continue; /* not routed to */
        s->expert[j] = e;
        s->weight[j] = c->moe.sel_w[c->moe.tok_pair[p]];
        for (int r = 0; r < s->runs; r++) {
            const int unit = j * s->runs + r, hot = is_hot(s, m, j, r);
            s->slot_hot[unit] = (uint8_t)hot;
            s->rows_done[unit] = 0;
            s->bytes_done[unit] = 0;
            if (hot && with_device) s->dev_units[n_dev++] = unit;
            else s->cpu_units[n_cpu++] = unit;
        }
        j++;
    }
    s->split.n_cpu = n_cpu;
    s->split.n_dev = n_dev;
}

/* the CPU's i-th unit, read from the model */
static void cpu_unit(pi_context *c, pi_split *split, int i) {
    pi_expert_split *s = split->work;
    const int unit = s->cpu_units[i];
    const pi_layer *L = &c->model->layers[s->layer];
    const pi_expert_run_rows w = pi_expert_run_rows_of(c->model, L, s->expert[unit / s->runs], unit % s->runs);
    pi_expert_run(c, s, &w, unit);
}

/* One token through layer il's split from a, its normed input (quantized), with the stream on
 * the device (resident: the device merges) or on the host (delta[0] is the FFN's output). */
static int split_token(pi_context *c, int il, pi_act a, int resident) {
    const pi_layer *L = &c->model->layers[il];
    pi_expert_split *s = c->moe.split;
    pi_moe_route(c, L, 1, a);
    s->layer = il;
    s->x = a;
    s->split = (pi_split){ .kind = PI_SPLIT_EXPERTS, .work = s, .layer = il, .t = 0, .x = a, .resident = resident,
                           .device = c->dev.device, .n_groups = s->k, .runs = s->runs, .acc = s->acc,
                           .rows = s->rows_done, .bytes = s->bytes_done, .hot = s->slot_hot, .cold = s->out,
                           .weight = s->weight, .y = c->s.delta, .cpu_unit = cpu_unit };
    plan_units(c, s, c->dev.device != NULL);
    const int rc = pi_split_run(c, &s->split);
    if (rc) return rc;
    c->step_bytes += (int64_t)pi_weight_bytes(&L->ffn_gate_inp);
    return PI_OK;
}

int pi_ffn_moe_split(pi_context *c, int il, pi_act a) { return split_token(c, il, a, 0); }

int pi_ffn_moe_split_resident(pi_context *c, int il) {
    const int d = c->model->info.n_embd;
    pi_device *dev = c->dev.device;
    const int rc = dev->ops->split_norm(dev, il, 0, c->s.xn);
    return rc ? rc : split_token(c, il, pi_quantize(&c->kern, c->s.xn, c->s.xq, 1, d), 1);
}
