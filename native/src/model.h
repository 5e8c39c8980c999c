/* model.h - the model's weights as views into the mapped GGUF, named after the GGUF tensors. */
#ifndef PI_MODEL_H
#define PI_MODEL_H
#include "block_traits.h"
#include "gguf.h"
#include "powerinfer.h"

/* Neurons are visited in runs of this many positions of a layer's layout, the sparse FFN's unit
 * of work and the placement's (placement.h); a layer's hot part is a whole number of runs, so the
 * runs, and the order their partial sums are added in, are the same however the layer is split
 * between the device and the CPU. An expert's runs are this many contiguous neurons in the file's
 * order (run j: [128 j, min(128 (j + 1), n_ff_exp)), the last one maybe shorter), the shape of
 * its profile (blk.N.ffn_exp_run_freq); its rows are not re-laid out. */
enum { PI_FFN_RUN = 128 };

/* A matrix of n_out rows of n_in weights (GGUF ne = {n_in, n_out}), one output per row; or
 * n_expert such matrices one after another (ne = {n_in, n_out, n_expert}: an MoE layer's experts). */
typedef struct {
    char name[48];        /* the GGUF tensor name, for messages and describe() */
    uint32_t type;        /* PI_TYPE_* */
    int64_t n_in, n_out;
    int64_t n_expert;     /* 1 for a matrix; expert e's rows start at data + e * n_out * row_bytes */
    size_t row_bytes;
    const uint8_t *data;  /* into the mapping; NULL when the tensor is absent */
    int grouped;          /* rows in groups of PI_GROUP_ROWS (kernels/row_groups.c), not row-major */
} pi_weight;

typedef struct {
    /* [n_embd] the attention's and the FFN's input norms (bias: LayerNorm); in an encoder the
     * post-norms after each residual instead (bert's attn_output_norm, layer_output_norm) */
    float *attn_norm, *attn_norm_b;
    pi_weight attn_q, attn_k, attn_v, attn_output;      /* q: n_embd -> n_head*head_dim, k/v: -> n_head_kv*head_dim */
    float *attn_q_b, *attn_k_b, *attn_v_b;              /* optional biases, NULL when absent */
    float *ffn_norm, *ffn_norm_b;                       /* falcon: GGUF attn_norm */
    pi_weight ffn_gate, ffn_up;                         /* n_embd -> n_ff, one row per FFN neuron; no gate in opt, falcon */
    pi_weight ffn_down;                                 /* n_ff -> n_embd */
    float *attn_output_b, *ffn_gate_b, *ffn_up_b, *ffn_down_b; /* optional biases, NULL when absent */
    float *attn_q_norm, *attn_k_norm;   /* [head_dim] RMSNorm of each head of q and k (gemma3, qwen3), or NULL */
    /* an MoE FFN (qwen3moe) in place of gate/up/down: the router's logit per expert, and each
     * expert's SwiGLU FFN of n_ff_exp neurons; data NULL in a dense layer */
    pi_weight ffn_gate_inp;                             /* n_embd -> n_expert */
    pi_weight ffn_gate_exps, ffn_up_exps;               /* n_expert x (n_embd -> n_ff_exp) */
    pi_weight ffn_down_exps;                            /* n_expert x (n_ff_exp -> n_embd) */
    float *post_attn_norm, *post_ffn_norm; /* [n_embd] RMSNorm of the attention / FFN output before the residual */
    PI_LAYER_TRAITS(PI_TRAIT_FIELD) /* local, rope_local, no_rope (block_traits.h) */

    /* activation sparsity, from files written by convert/add_profile.py or PowerInfer */
    pi_weight fc1;          /* predictor, n_embd -> rank */
    pi_weight fc2;          /* predictor, rank -> n_ff: one logit per FFN neuron */
    pi_weight ffn_down_t;   /* n_ff rows of n_embd: neuron i's down weights as row i */
    float *ffn_freq;        /* [n_ff] profiled activation frequency, or NULL */
    float threshold;        /* a neuron runs when its predictor logit >= threshold */
    /* an MoE layer's profile, or NULL: the share of tokens routed to each expert [n_expert], and
     * the share of tokens reading each run's up and down rows [n_expert][expert runs] (routed,
     * times the run's live share for ReLU-gated experts) */
    float *exp_freq, *exp_run_freq;
} pi_layer;

/* an MoE router's probabilities from its logits: llama.cpp's expert_gating_func values */
enum { PI_GATING_SOFTMAX = 1, PI_GATING_SIGMOID = 2 };

struct pi_model {
    gguf_file file;
    char arch[32];
    const struct pi_arch *desc; /* the architecture's descriptor (arch.h) */
    pi_model_info info;
    int32_t head_dim;
    int vocab_only;
    pi_weight token_embd;   /* n_vocab rows of n_embd */
    pi_weight position_embd; /* learned positions (opt): row pos + position_offset is added to the embedding */
    int32_t position_offset;
    int encoder;            /* bert, nomic-bert: bidirectional, embeddings only (encoder.c) */
    float *embd_norm, *embd_norm_b; /* [n_embd] an encoder's LayerNorm of its input embeddings */
    float *token_type_embd; /* [n_embd] token type 0's row, added to every input embedding, or NULL */
    float *output_norm, *output_norm_b; /* [n_embd] */
    pi_weight output;       /* n_embd -> n_vocab; token_embd when tied */
    float *output_b;        /* [n_vocab] optional bias of the logits */
    float *rope_freqs;      /* optional per-pair divisors of theta (llama 3.1 scaling), [n_rot/2] */
    /* what an architecture changes in the llama block */
    unsigned traits;        /* ARCH_* of arch.h */
    PI_BLOCK_TRAITS(PI_TRAIT_FIELD) /* rope_neox, swa_window, layer_norm, parallel, attn_softcap (block_traits.h) */
    float embd_scale;       /* token embeddings are multiplied by this (gemma: sqrt(n_embd)) */
    int32_t swa_period;     /* layers of one local/global cycle (0: every layer local), llama.cpp's swa pattern */
    int swa_dense_first;    /* the cycle's global layer is its first (il % period == 0), else its last */
    int32_t no_rope_step, no_rope_phase; /* layers il % no_rope_step == no_rope_phase skip the rope; step 0: none do */
    float rope_base_local;  /* rope base of the rope_local layers; 0 when none */
    int32_t n_expert, n_expert_used, n_ff_exp; /* MoE: experts per layer, routed per token, neurons each; 0 if dense */
    int moe_gating;         /* PI_GATING_*: the router's probabilities from its logits */
    int router_on_input;    /* the router reads the layer's input, before attention (smallthinker) */
    int moe_skip_rows;      /* ReGLU experts: a neuron whose gate is <= 0 adds exactly 0, so its up and down are skipped
                             * (where the file or the caller chose it, model.c: choose_moe_skip) */
    float final_softcap;    /* cap * tanh(z / cap) of the logits, where the metadata asks (Gemma 2's key); 0: none */
    pi_layer *layers;       /* [n_layer] */
    int has_predictors;     /* every layer has fc1, fc2 and ffn_down_t */
    int grouped_weights;    /* how many weights the loader grouped (pi_model_params.repack) */
    int kquant_weights;     /* some weight is a K-quant: activations are made in Q8_K too */
    int32_t max_rank;       /* largest predictor rank over the layers */
    float *vectors;         /* one allocation holding every norm and bias above, as f32 */
    char *description;      /* built on demand by pi_model_describe */
};

/* Runs per expert: ceil(n_ff_exp / PI_FFN_RUN); 0 without experts. */
static inline int pi_model_expert_runs(const pi_model *m) {
    return m->n_expert ? (m->n_ff_exp + PI_FFN_RUN - 1) / PI_FFN_RUN : 0;
}

#endif
