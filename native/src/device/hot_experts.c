/* hot_experts.c - a copy of every hot expert run (hot_experts.h). */
#include <stdlib.h>
#include <string.h>

#include "device/hot_experts.h"
#include "status.h"

/* A run's columns of down as a matrix of their own: per row (per 16-row group when grouped) its
 * blocks, one piece of `piece` bytes every `stride` bytes of the model's. */
static size_t down_piece(const pi_weight *down, size_t *stride, size_t *n) {
    const size_t unit = down->grouped ? PI_GROUP_ROWS : 1;
    *stride = unit * down->row_bytes;
    *n = (size_t)down->n_out / unit;
    return unit * (size_t)(down->n_in / pi_type_block_size(down->type)) * pi_type_block_bytes(down->type);
}

/* dst = the run src's weights, laid out as hot_experts.h says; returns the bytes used (NULL dst: counts only) */
static size_t copy_run(pi_expert_run_rows *dst, const pi_expert_run_rows *src, uint8_t *at) {
    /* gate and up each in its own type and layout (smallthinker's up row-major, its live rows picked) */
    const size_t gate_rows = (size_t)src->gate.n_out * src->gate.row_bytes;
    const size_t up_rows = (size_t)src->up.n_out * src->up.row_bytes;
    size_t stride, n;
    const size_t piece = down_piece(&src->down, &stride, &n);
    if (at) {
        *dst = *src;
        dst->gate.data = memcpy(at, src->gate.data, gate_rows);
        dst->up.data = memcpy(at + gate_rows, src->up.data, up_rows);
        uint8_t *down = at + gate_rows + up_rows;
        for (size_t i = 0; i < n; i++) memcpy(down + i * piece, src->down.data + i * stride, piece);
        dst->down.data = down;
        dst->down.row_bytes = piece / (src->down.grouped ? PI_GROUP_ROWS : 1);
    }
    return gate_rows + up_rows + n * piece;
}

/* every hot run of the context's split, counted (out->memory NULL) or copied */
static uint64_t each_hot_run(const pi_context *c, pi_hot_experts *out) {
    const pi_model *m = c->model;
    const pi_expert_split *s = c->moe.split;
    uint64_t used = 0;
    for (int il = 0; il < m->info.n_layer; il++)
        for (int e = 0; e < m->n_expert; e++)
            for (int r = 0; r < s->runs; r++) {
                const size_t i = ((size_t)il * (size_t)m->n_expert + (size_t)e) * (size_t)s->runs + (size_t)r;
                if (!s->hot[i]) continue;
                const pi_expert_run_rows src = pi_expert_run_rows_of(m, &m->layers[il], e, r);
                used += copy_run(&out->runs[i], &src, out->memory ? out->memory + used : NULL);
            }
    return used;
}

int pi_hot_experts_new(const pi_context *c, pi_hot_experts *out) {
    const pi_model *m = c->model;
    const size_t n_runs = (size_t)m->info.n_layer * (size_t)m->n_expert * (size_t)c->moe.split->runs;
    memset(out, 0, sizeof *out);
    out->runs = calloc(n_runs, sizeof *out->runs);
    if (!out->runs) return pi_set_error(PI_ERR_NOMEM, "no memory for the hot expert runs' table");
    out->bytes = each_hot_run(c, out);
    out->memory = malloc(out->bytes ? out->bytes : 1);
    if (!out->memory) {
        const double mib = (double)out->bytes / 1048576.0;
        pi_hot_experts_free(out);
        return pi_set_error(PI_ERR_NOMEM, "no memory for a %.1f MiB copy of the hot expert runs", mib);
    }
    each_hot_run(c, out);
    return PI_OK;
}

void pi_hot_experts_free(pi_hot_experts *h) {
    free(h->runs);
    free(h->memory);
    memset(h, 0, sizeof *h);
}
