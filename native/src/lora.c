/* lora.c - read a LoRA adapter's GGUF and check each of its pairs against the model's weights. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "lora.h"
#include "status.h"

static int by_base(const void *x, const void *y) {
    const uintptr_t a = (uintptr_t)((const pi_lora_pair *)x)->base, b = (uintptr_t)((const pi_lora_pair *)y)->base;
    return a < b ? -1 : a > b;
}

const pi_lora_pair *pi_lora_find(const pi_adapter *a, const pi_weight *w) {
    const pi_lora_pair key = { .base = w };
    return bsearch(&key, a->pairs, (size_t)a->n_pairs, sizeof key, by_base);
}

float pi_lora_pair_scale(const pi_adapter *a, const pi_lora_pair *p, float scale) {
    return a->alpha != 0.0f ? scale * a->alpha / (float)p->b.n_in : scale;
}

static int has_suffix(gguf_str s, const char *suffix, uint64_t *stem) {
    const uint64_t n = strlen(suffix);
    *stem = s.len >= n ? s.len - n : 0;
    return s.len >= n && memcmp(s.ptr + *stem, suffix, n) == 0;
}

/* The model weight named `name` that a pair can adapt: not a view of a fused tensor (phi3's
 * attn_qkv, falcon's), which carries a ':' after its tensor's name. */
static const pi_weight *adaptable(const pi_model *m, const char *name) {
    if (strcmp(m->token_embd.name, name) == 0) return &m->token_embd;
    if (!m->info.tied_output && strcmp(m->output.name, name) == 0) return &m->output;
    for (int il = 0; il < m->info.n_layer; il++) {
        const pi_layer *L = &m->layers[il];
        const pi_weight *ws[] = { &L->attn_q, &L->attn_k, &L->attn_v, &L->attn_output,
                                  &L->ffn_gate, &L->ffn_up, &L->ffn_down };
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            if (ws[i]->data && strcmp(ws[i]->name, name) == 0) return ws[i];
    }
    return NULL;
}

static void view(pi_weight *w, const gguf_tensor *t) {
    snprintf(w->name, sizeof w->name, "%.*s", (int)t->name.len, t->name.ptr);
    w->type = t->type;
    w->n_in = t->ne[0];
    w->n_out = t->ne[1];
    w->row_bytes = (size_t)(t->nbytes / (uint64_t)t->ne[1]);
    w->data = t->data;
    w->grouped = 0; /* an adapter's factors stay as the file has them */
}

/* Shapes as llama.cpp checks them: A [n_in, rank] and B [rank, n_out]; for the embedding,
 * A [rank, n_vocab] and B [rank, n_embd]. 2-D, one rank, and a type the matmul takes. */
static int check_pair(const pi_model *m, const char *name, const gguf_tensor *a, const gguf_tensor *b) {
    const int embd = strcmp(name, "token_embd.weight") == 0;
    const pi_weight *w = adaptable(m, name);
    const int64_t want_a = embd ? m->info.n_vocab : w->n_in, want_b = embd ? m->info.n_embd : w->n_out;
    if (a->ne[2] != 1 || a->ne[3] != 1 || b->ne[2] != 1 || b->ne[3] != 1 || a->ne[embd ? 1 : 0] != want_a ||
        b->ne[1] != want_b || a->ne[embd ? 0 : 1] != b->ne[0])
        return pi_set_error(PI_ERR_FORMAT,
                            "LoRA tensors of '%s' have shapes [%lld, %lld] and [%lld, %lld], which do not fit its "
                            "[%lld, %lld] (a wrong base model?)",
                            name, (long long)a->ne[0], (long long)a->ne[1], (long long)b->ne[0], (long long)b->ne[1],
                            (long long)w->n_in, (long long)w->n_out);
    if (pi_type_is_kquant(a->type) || pi_type_is_kquant(b->type))
        return pi_set_error(PI_ERR_UNSUPPORTED, "LoRA tensors of '%s' are K-quants (%s, %s); f32, f16, bf16 and the "
                                                "32-blocks are supported", name, pi_type_name(a->type), pi_type_name(b->type));
    return PI_OK;
}

/* One pair per adapted weight: `<weight>.lora_a` and `<weight>.lora_b`; norms are skipped, as
 * llama.cpp does. */
static int bind_pairs(pi_adapter *ad) {
    const pi_model *m = ad->model;
    const gguf_file *f = &ad->file;
    ad->pairs = calloc((size_t)f->n_tensors + 1, sizeof *ad->pairs);
    ad->ffn_adapted = calloc((size_t)m->info.n_layer, 1);
    if (!ad->pairs || !ad->ffn_adapted) return pi_set_error(PI_ERR_NOMEM, "no memory for the adapter");
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *ta = &f->tensors[i];
        uint64_t stem;
        if (has_suffix(ta->name, "_norm.weight", &stem) || has_suffix(ta->name, ".lora_b", &stem)) continue;
        if (!has_suffix(ta->name, ".lora_a", &stem))
            return pi_set_error(PI_ERR_FORMAT, "LoRA tensor '%.*s' has an unexpected suffix (.lora_a, .lora_b)",
                                (int)ta->name.len, ta->name.ptr);
        char name[64], b_name[80];
        if (stem >= sizeof name) return pi_set_error(PI_ERR_FORMAT, "LoRA tensor name of %llu bytes is too long", (unsigned long long)stem);
        memcpy(name, ta->name.ptr, stem);
        name[stem] = '\0';
        snprintf(b_name, sizeof b_name, "%s.lora_b", name);
        const gguf_tensor *tb = gguf_find_tensor(f, b_name);
        if (!tb) return pi_set_error(PI_ERR_FORMAT, "LoRA pair of '%s' has no lora_b", name);
        const pi_weight *w = adaptable(m, name);
        if (!w && gguf_find_tensor(&m->file, name))
            return pi_set_error(PI_ERR_UNSUPPORTED, "LoRA on '%s' is not supported (a fused or tied weight)", name);
        if (!w) return pi_set_error(PI_ERR_FORMAT, "LoRA tensor '%s' does not exist in the base model (a wrong base model?)", name);
        int rc = check_pair(m, name, ta, tb);
        if (rc) return rc;
        pi_lora_pair *p = &ad->pairs[ad->n_pairs++];
        p->base = w;
        view(&p->a, ta);
        view(&p->b, tb);
        if (p->b.n_in > ad->max_rank) ad->max_rank = (int32_t)p->b.n_in;
        if (p->b.n_out > ad->max_out) ad->max_out = p->b.n_out;
        for (int il = 0; il < m->info.n_layer; il++) {
            const pi_layer *L = &m->layers[il];
            if (w == &L->ffn_gate || w == &L->ffn_up || w == &L->ffn_down) ad->ffn_adapted[il] = 1;
        }
    }
    /* every lora_b needs its lora_a */
    for (int64_t i = 0; i < f->n_tensors; i++) {
        uint64_t stem;
        char a_name[80];
        if (!has_suffix(f->tensors[i].name, ".lora_b", &stem)) continue;
        snprintf(a_name, sizeof a_name, "%.*s.lora_a", (int)stem, f->tensors[i].name.ptr);
        if (!gguf_find_tensor(f, a_name)) return pi_set_error(PI_ERR_FORMAT, "LoRA pair of '%.*s' has no lora_a", (int)stem, f->tensors[i].name.ptr);
    }
    qsort(ad->pairs, (size_t)ad->n_pairs, sizeof *ad->pairs, by_base);
    return PI_OK;
}

/* general.type "adapter", adapter.type "lora", the model's architecture, a finite alpha >= 0 */
static int check_header(pi_adapter *ad) {
    gguf_str type = { NULL, 0 }, kind = { NULL, 0 }, arch = { NULL, 0 };
    int rc;
    if ((rc = gguf_get_str(&ad->file, "general.type", 0, &type)) ||
        (rc = gguf_get_str(&ad->file, "adapter.type", 0, &kind)) ||
        (rc = gguf_get_str(&ad->file, "general.architecture", 0, &arch)) ||
        (rc = gguf_get_f32(&ad->file, "adapter.lora.alpha", 0, &ad->alpha)))
        return rc;
    if (!type.ptr || !gguf_str_eq(type, "adapter"))
        return pi_set_error(PI_ERR_FORMAT, "not an adapter: general.type is '%.*s', not 'adapter'", (int)type.len, type.ptr ? type.ptr : "");
    if (!kind.ptr || !gguf_str_eq(kind, "lora"))
        return pi_set_error(PI_ERR_FORMAT, "adapter.type is '%.*s', not 'lora'", (int)kind.len, kind.ptr ? kind.ptr : "");
    if (!arch.ptr || !gguf_str_eq(arch, ad->model->arch))
        return pi_set_error(PI_ERR_FORMAT, "the adapter is for architecture '%.*s', the model is '%s'", (int)arch.len,
                            arch.ptr ? arch.ptr : "", ad->model->arch);
    if (!(ad->alpha >= 0.0f) || ad->alpha > 1e6f)
        return pi_set_error(PI_ERR_FORMAT, "adapter.lora.alpha %g is implausible", ad->alpha);
    return PI_OK;
}

PI_API int pi_adapter_load(const pi_model *model, const char *path, pi_adapter **out) {
    if (!model || !path || !out) return pi_set_error(PI_ERR_ARG, "pi_adapter_load: NULL argument");
    *out = NULL;
    if (model->vocab_only) return pi_set_error(PI_ERR_ARG, "model was loaded with vocab_only: it has no weights to adapt");
    pi_adapter *ad = calloc(1, sizeof *ad);
    if (!ad) return pi_set_error(PI_ERR_NOMEM, "no memory for the adapter");
    ad->model = model;
    int rc = gguf_open(path, &ad->file);
    if (!rc) rc = check_header(ad);
    if (!rc) rc = bind_pairs(ad);
    if (!rc && ad->n_pairs == 0) rc = pi_set_error(PI_ERR_FORMAT, "the adapter has no LoRA tensors");
    if (rc) {
        pi_adapter_free(ad);
        return rc;
    }
    *out = ad;
    return PI_OK;
}

PI_API void pi_adapter_free(pi_adapter *ad) {
    if (!ad) return;
    gguf_close(&ad->file);
    free(ad->pairs);
    free(ad->ffn_adapted);
    free(ad);
}

PI_API int pi_adapter_n_pairs(const pi_adapter *ad) { return ad ? ad->n_pairs : 0; }

static void release_scratch(pi_lora_state *l) {
    free(l->mid);
    free(l->out);
    free(l->midq.q);
    l->mid = l->out = NULL;
    l->midq.q = NULL;
}

void pi_lora_detach(pi_lora_state *l) {
    release_scratch(l);
    l->adapter = NULL;
}

/* The scratch is sized for the adapter once here, so a step allocates nothing. */
int pi_lora_attach(pi_context *c, const pi_adapter *ad, float scale) {
    if (!ad) {
        pi_lora_detach(&c->lora);
        return PI_OK;
    }
    if (ad->model != c->model) return pi_set_error(PI_ERR_ARG, "the adapter was loaded for another model");
    if (!isfinite(scale)) return pi_set_error(PI_ERR_ARG, "LoRA scale %g is not finite", scale);
    if (c->dev.device)
        return pi_set_error(PI_ERR_UNSUPPORTED, "LoRA adapters run on the CPU only: this context places steps on a device "
                                                "(layer offload or the hybrid split)");
    release_scratch(&c->lora);
    const size_t rows = c->n_batch; /* a step's tokens, or its positions with logits */
    c->lora.mid = malloc(rows * (size_t)ad->max_rank * sizeof(float));
    c->lora.out = malloc(rows * (size_t)ad->max_out * sizeof(float));
    c->lora.midq.q = malloc(rows * ((size_t)ad->max_rank / QK + 1) * sizeof(block_q8x));
    if (!c->lora.mid || !c->lora.out || !c->lora.midq.q) {
        release_scratch(&c->lora);
        return pi_set_error(PI_ERR_NOMEM, "no memory for the LoRA scratch of %lld outputs", (long long)ad->max_out);
    }
    c->lora.adapter = ad;
    c->lora.scale = scale;
    return PI_OK;
}
