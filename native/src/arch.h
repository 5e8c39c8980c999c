/* arch.h - the architectures the loader runs, one descriptor each (archs.c's PI_ARCHS): the FFN
 * activation, the ARCH_* traits the binding and the blocks read, the names of the tensors that
 * differ from the llama block's, and the reader of the architecture's own hyperparameters.
 *
 * model.c finds a file's descriptor in the table and calls its reader through it, so the
 * descriptors depend on the model (they fill a pi_model) and the model only on this header. */
#ifndef PI_ARCH_H
#define PI_ARCH_H
#include <stdio.h>

#include "gguf.h"
#include "powerinfer.h"

/* What an architecture changes in the llama block's tensors and hyperparameters (pi_arch.traits;
 * the block's own forms are pi_model's PI_BLOCK_TRAITS, which model.c sets from these). */
enum {
    ARCH_ROPE_NEOX = 1 << 0,     /* rotate pairs (i, i + n_rot/2) */
    ARCH_FUSED_QKV = 1 << 1,     /* blk.N.attn_qkv: q rows, then k, then v (separate tensors when absent) */
    ARCH_FUSED_GATE_UP = 1 << 2, /* blk.N.ffn_up holds 2 n_ff rows: gate, then up */
    ARCH_UNGATED = 1 << 3,       /* FFN down(act(up(x))), no gate */
    ARCH_LAYER_NORM = 1 << 4,    /* LayerNorm with bias, eps from attention.layer_norm_epsilon */
    ARCH_NO_ROPE = 1 << 5,
    ARCH_LEARNED_POS = 1 << 6,   /* position_embd.weight, read from row pos + position_offset */
    ARCH_PARALLEL = 1 << 7,      /* x += attn(norm2(x)) + ffn(norm(x)), norm2 = norm when absent */
    ARCH_ENCODER = 1 << 8,       /* bidirectional, post-norms, normed input embeddings, no output (encoder.c) */
    ARCH_QK_NORM = 1 << 9,       /* blk.N.attn_q_norm / attn_k_norm: RMSNorm of each head of q and k */
    ARCH_MOE = 1 << 10,          /* the FFN is a router over experts (archs.c's read_moe; ffn_moe.c) */
    ARCH_ROUTER_ON_INPUT = 1 << 11, /* the router reads the layer's input, not the FFN's normed input */
    ARCH_POST_NORMS = 1 << 12,   /* blk.N.post_attention_norm / post_ffw_norm required (gemma3) */
};

typedef struct pi_arch {
    const char *name;           /* general.architecture */
    int ffn_act;                /* PI_ACT_* of its FFN */
    int powerinfer_act;         /* PowerInfer's own (PWRI) files of it are ReLU models: this PI_ACT_*; -1: as ffn_act */
    unsigned traits;            /* ARCH_* */
    float norm_eps;             /* the norm epsilon when the file omits it (OPT: PowerInfer's files do); 0: required */
    const char *attn_norm;      /* the attention's input norm, blk.N.<attn_norm>; NULL: attn_norm */
    const char *ffn_norm;       /* the FFN's input norm; NULL: ffn_norm */
    int32_t position_offset;    /* ARCH_LEARNED_POS: row pos + position_offset holds position pos */
    /* its own hyperparameters, read after the common ones (model.c's read_hparams); NULL: none */
    int (*read)(pi_model *m);
} pi_arch;

extern const pi_arch PI_ARCHS[];
extern const int PI_N_ARCHS;

/* Key `arch`.`suffix` of the file, as gguf_get_u32 / gguf_get_f32 read it. */
static inline int pi_arch_key_u32(const gguf_file *f, const char *arch, const char *suffix, int required, uint32_t *out) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_u32(f, key, required, out);
}

static inline int pi_arch_key_f32(const gguf_file *f, const char *arch, const char *suffix, int required, float *out) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_f32(f, key, required, out);
}

#endif
