/* hot_rows.c - a copy of every layer's hot rows, laid out by position (hot_rows.h). */
#include <stdlib.h>
#include <string.h>

#include "device/hot_rows.h"
#include "placement.h"
#include "token_bytes.h"
#include "status.h"

/* positions [0, n) of a layer with `runs` hot runs */
static size_t hot_count(int32_t runs, int n_ff) {
    const int64_t n = (int64_t)runs * PI_FFN_RUN;
    return n <= 0 ? 0 : n < n_ff ? (size_t)n : (size_t)n_ff;
}

/* w = rows layout[0..n) of src, copied to dst one after another; returns the bytes used */
static size_t copy_rows(pi_weight *w, const pi_weight *src, const int32_t *layout, size_t n, uint8_t *dst) {
    *w = *src;
    if (!src->data) return 0; /* an FFN without a gate */
    w->data = dst;
    w->n_out = (int64_t)n;
    for (size_t p = 0; p < n; p++)
        memcpy(dst + p * src->row_bytes, src->data + (size_t)layout[p] * src->row_bytes, src->row_bytes);
    return n * src->row_bytes;
}

int pi_hot_copy_new(const pi_context *c, pi_hot_copy *out) {
    const pi_model *m = c->model;
    const uint32_t n_layer = (uint32_t)m->info.n_layer;
    const int n_ff = m->info.n_ff;
    memset(out, 0, sizeof *out);
    size_t bytes = 0;
    for (uint32_t il = 0; il < n_layer; il++) {
        const pi_layer *L = &m->layers[il];
        const size_t n = hot_count(c->sparse.hot_runs[il], n_ff);
        if (n) bytes += L->fc1.row_bytes * (size_t)L->fc1.n_out + n * (L->fc2.row_bytes + pi_neuron_bytes(L));
    }
    out->layers = calloc(n_layer, sizeof *out->layers);
    out->n_hot = calloc(n_layer, sizeof *out->n_hot);
    out->memory = malloc(bytes ? bytes : 1);
    if (!out->layers || !out->n_hot || !out->memory) {
        pi_hot_copy_free(out);
        return pi_set_error(PI_ERR_NOMEM, "no memory for a %.1f MiB copy of the hot rows", bytes / 1048576.0);
    }
    uint8_t *at = out->memory;
    for (uint32_t il = 0; il < n_layer; il++) {
        const pi_layer *L = &m->layers[il];
        const size_t n = hot_count(c->sparse.hot_runs[il], n_ff);
        if (!n) continue;
        const int32_t *layout = c->sparse.layout + (size_t)il * n_ff;
        ffn_rows *w = &out->layers[il];
        const size_t fc1_bytes = L->fc1.row_bytes * (size_t)L->fc1.n_out;
        w->fc1 = L->fc1;
        w->fc1.data = memcpy(at, L->fc1.data, fc1_bytes);
        at += fc1_bytes;
        at += copy_rows(&w->fc2, &L->fc2, layout, n, at);
        at += copy_rows(&w->gate, &L->ffn_gate, layout, n, at);
        at += copy_rows(&w->up, &L->ffn_up, layout, n, at);
        at += copy_rows(&w->down_t, &L->ffn_down_t, layout, n, at);
        w->rows = NULL;
        out->n_hot[il] = (int32_t)n;
    }
    return PI_OK;
}

void pi_hot_copy_free(pi_hot_copy *h) {
    free(h->layers);
    free(h->n_hot);
    free(h->memory);
    memset(h, 0, sizeof *h);
}
