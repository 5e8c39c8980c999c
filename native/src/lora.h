/* lora.h - a LoRA adapter (llama.cpp's GGUF adapter format) bound to the model it adapts.
 *
 * A pair adapts one of the model's weights W (n_out rows of n_in): the layer's output becomes
 * W x + scale * B (A x), with A rank rows of n_in and B n_out rows of rank, as llama.cpp's
 * build_lora_mm computes it at run time. The token embedding is adapted the other way round:
 * A holds one row of rank per token, and B (n_embd rows of rank) maps it into the stream. */
#ifndef PI_LORA_H
#define PI_LORA_H
#include "model.h"

typedef struct {
    const pi_weight *base;  /* the model's weight this pair adapts (&model->token_embd: the embedding) */
    pi_weight a, b;
} pi_lora_pair;

struct pi_adapter {
    gguf_file file;
    const pi_model *model;  /* borrowed: the adapter is checked against it and reads its weights' shapes */
    float alpha;            /* adapter.lora.alpha; 0: the scale is used as given */
    int32_t n_pairs, max_rank;
    int64_t max_out;        /* widest n_out over the adapted weights */
    pi_lora_pair *pairs;    /* sorted by base, for pi_lora_find */
    uint8_t *ffn_adapted;   /* [n_layer] the layer's gate, up or down is adapted: its FFN runs dense */
};

/* Drop the context's adapter and its scratch (pi_context_free). */
struct pi_lora_state;
void pi_lora_detach(struct pi_lora_state *l);
struct pi_context;
/* Apply ad (NULL: none) to the context's matmuls at this scale, its scratch sized once here:
 * pi_context_set_adapter's work, which then chooses the FFN paths again (ffn_path.h). */
int pi_lora_attach(struct pi_context *c, const pi_adapter *ad, float scale);
/* The pair adapting w, or NULL. */
const pi_lora_pair *pi_lora_find(const pi_adapter *a, const pi_weight *w);
/* The factor of B (A x): the adapter's scale, times alpha / rank where alpha is set (llama.cpp's rule). */
float pi_lora_pair_scale(const pi_adapter *a, const pi_lora_pair *p, float scale);

#endif
