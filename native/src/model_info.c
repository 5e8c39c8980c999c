/* model_info.c - what a loaded model tells its caller: its hyperparameters, its metadata keys
 * and values as the file holds them, and describe()'s text of the whole model. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "quants.h"
#include "status.h"

PI_API int pi_model_get_info(const pi_model *m, pi_model_info *out) {
    if (!m || !out) return pi_set_error(PI_ERR_ARG, "pi_model_get_info: NULL argument");
    if (m->vocab_only) return pi_set_error(PI_ERR_ARG, "model was loaded with vocab_only: it has no weights");
    *out = m->info;
    return PI_OK;
}

/* ---- metadata ---- */

PI_API int64_t pi_model_meta_count(const pi_model *m) { return m ? m->file.n_kv : 0; }

static void read_scalar(uint32_t type, const uint8_t *p, pi_meta *o) {
    switch (type) {
    case PI_META_UINT8: o->u = p[0]; o->i = p[0]; break;
    case PI_META_INT8: o->i = (int8_t)p[0]; break;
    case PI_META_BOOL: o->i = p[0] != 0; o->u = (uint64_t)o->i; break;
    case PI_META_UINT16: { uint16_t x; memcpy(&x, p, 2); o->u = x; o->i = x; break; }
    case PI_META_INT16: { int16_t x; memcpy(&x, p, 2); o->i = x; break; }
    case PI_META_UINT32: { uint32_t x; memcpy(&x, p, 4); o->u = x; o->i = x; break; }
    case PI_META_INT32: { int32_t x; memcpy(&x, p, 4); o->i = x; break; }
    case PI_META_UINT64: memcpy(&o->u, p, 8); o->i = (int64_t)o->u; break;
    case PI_META_INT64: memcpy(&o->i, p, 8); break;
    case PI_META_FLOAT32: { float x; memcpy(&x, p, 4); o->f = x; break; }
    case PI_META_FLOAT64: memcpy(&o->f, p, 8); break;
    default: break;
    }
    if (type != PI_META_UINT64 && o->i >= 0 && type != PI_META_FLOAT32 && type != PI_META_FLOAT64) o->u = (uint64_t)o->i;
}

PI_API int pi_model_meta_get(const pi_model *m, int64_t index, pi_meta *o) {
    if (!m || !o) return pi_set_error(PI_ERR_ARG, "pi_model_meta_get: NULL argument");
    if (index < 0 || index >= m->file.n_kv)
        return pi_set_error(PI_ERR_ARG, "metadata index %lld out of range (%lld keys)", (long long)index,
                            (long long)m->file.n_kv);
    const gguf_kv *kv = &m->file.kv[index];
    memset(o, 0, sizeof *o);
    o->key = kv->key.ptr;
    o->key_len = kv->key.len;
    o->type = (int32_t)kv->type;
    if (kv->type == PI_META_STRING) {
        o->str = (const char *)kv->value;
        o->str_len = kv->str_len;
    } else if (kv->type == PI_META_ARRAY) {
        o->arr_type = (int32_t)kv->arr_type;
        o->arr_len = kv->arr_len;
        o->arr_data = kv->arr_type == PI_META_STRING ? NULL : kv->value;
    } else {
        read_scalar(kv->type, kv->value, o);
    }
    return PI_OK;
}

PI_API int pi_model_meta_array_str(const pi_model *m, int64_t index, uint64_t j, const char **str, uint64_t *len) {
    if (!m || !str || !len) return pi_set_error(PI_ERR_ARG, "pi_model_meta_array_str: NULL argument");
    if (index < 0 || index >= m->file.n_kv) return pi_set_error(PI_ERR_ARG, "metadata index %lld out of range", (long long)index);
    const gguf_kv *kv = &m->file.kv[index];
    if (kv->type != PI_META_ARRAY || kv->arr_type != PI_META_STRING)
        return pi_set_error(PI_ERR_ARG, "metadata key %lld is not a string array", (long long)index);
    if (j >= kv->arr_len)
        return pi_set_error(PI_ERR_ARG, "element %llu past the array's %llu", (unsigned long long)j,
                            (unsigned long long)kv->arr_len);
    gguf_str s = gguf_array_str(&m->file, kv, j);
    *str = s.ptr;
    *len = s.len;
    return PI_OK;
}

/* ---- describe: the whole model as text, one line per tensor ---- */

static int append(char **buf, size_t *len, size_t *cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int append(char **buf, size_t *len, size_t *cap, const char *fmt, ...) {
    for (;;) {
        va_list args;
        va_start(args, fmt);
        int n = vsnprintf(*buf + *len, *cap - *len, fmt, args);
        va_end(args);
        if (n < 0) return -1;
        if ((size_t)n < *cap - *len) {
            *len += (size_t)n;
            return 0;
        }
        char *grown = realloc(*buf, *cap * 2 + (size_t)n);
        if (!grown) return -1;
        *buf = grown;
        *cap = *cap * 2 + (size_t)n;
    }
}

static int describe_weight(char **b, size_t *len, size_t *cap, const pi_weight *w) {
    if (!w->data) return 0;
    char experts[32] = "";
    if (w->n_expert > 1) snprintf(experts, sizeof experts, " x %lld experts", (long long)w->n_expert);
    return append(b, len, cap, "  %-28s %-5s [%lld x %lld%s]  %.2f MB%s\n", w->name, pi_type_name(w->type),
                  (long long)w->n_in, (long long)w->n_out, experts,
                  (double)w->row_bytes * (double)w->n_out * (double)w->n_expert / 1e6,
                  w->grouped ? "  rows in groups of 16" : "");
}

PI_API const char *pi_model_describe(const pi_model *cm) {
    pi_model *m = (pi_model *)cm;
    if (!m || m->vocab_only) return "";
    if (m->description) return m->description;
    size_t len = 0, cap = 4096;
    char *b = malloc(cap);
    if (!b) return "";
    b[0] = '\0';
    const pi_model_info *h = &m->info;
    int bad = append(&b, &len, &cap,
                     "arch %s: %d layers, n_embd %d, n_ff %d, heads %d/%d (dim %d), vocab %d, ctx %d, rope base %g\n",
                     m->arch, h->n_layer, h->n_embd, h->n_ff, h->n_head, h->n_head_kv, m->head_dim, h->n_vocab,
                     h->n_ctx_train, h->rope_freq_base);
    if (m->n_expert)
        bad |= append(&b, &len, &cap, "  experts: %d per layer of %d neurons, %d routed per token\n", m->n_expert,
                      m->n_ff_exp, m->n_expert_used);
    bad |= describe_weight(&b, &len, &cap, &m->token_embd);
    bad |= describe_weight(&b, &len, &cap, &m->position_embd);
    for (int il = 0; il < h->n_layer && !bad; il++) {
        const pi_layer *L = &m->layers[il];
        if (L->fc1.data) bad |= append(&b, &len, &cap, "  blk.%d: predictor rank %lld, threshold %g\n", il,
                                       (long long)L->fc1.n_out, L->threshold);
        const pi_weight *ws[] = { &L->attn_q, &L->attn_k, &L->attn_v, &L->attn_output, &L->ffn_gate, &L->ffn_up,
                                  &L->ffn_down, &L->ffn_gate_inp, &L->ffn_gate_exps, &L->ffn_up_exps,
                                  &L->ffn_down_exps, &L->ffn_down_t, &L->fc1, &L->fc2 };
        for (size_t i = 0; i < sizeof ws / sizeof ws[0] && !bad; i++) bad |= describe_weight(&b, &len, &cap, ws[i]);
    }
    if (!h->tied_output) bad |= describe_weight(&b, &len, &cap, &m->output);
    else bad |= append(&b, &len, &cap, "  output tied to token_embd.weight\n");
    if (bad) {
        free(b);
        return "";
    }
    m->description = b;
    return b;
}
