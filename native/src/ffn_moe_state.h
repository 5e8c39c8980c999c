/* ffn_moe_state.h - a context's scratch for an MoE FFN (pi_context.moe, ffn_moe.h) and its expert
 * split (ffn_moe_split.h); apart from ffn_moe.h, which includes context.h, so that context.h can
 * hold it. */
#ifndef PI_FFN_MOE_STATE_H
#define PI_FFN_MOE_STATE_H
#include <stdint.h>

#include "kernels/kernels.h"

/* an MoE FFN (ffn_moe.c): k = n_expert_used pairs (token, expert) per token */
typedef struct pi_moe_scratch {
    float *probs;       /* [B][n_expert] router probabilities */
    int32_t *sel;       /* [B][k]        each token's experts, most probable first */
    float *sel_w;       /* [B][k]        and their weights */
    int32_t *first;     /* [n_expert+1]  expert e's pairs are [first[e], first[e + 1]) of tok */
    int32_t *tok;       /* [B*k]         the pairs' tokens, grouped by expert */
    int32_t *tok_pair;  /* [B*k]         and their pairs' index t * k + rank in sel */
    float *x;           /* [B][n_embd]   one expert's tokens' inputs */
    pi_act_store q;     /* [B][max(n_embd, n_ff_exp)/32] (/256) those inputs quantized, then its activation product */
    float *out;         /* [B][n_embd]   its output per token */
    float *weighted;    /* [B][k][n_embd] each pair's output times its weight, added in rank order */
    int32_t *live;      /* [n_ff_exp]    a ReGLU expert's neurons with a gate > 0 (ffn_moe.c) */
    /* an MoE model's split: which runs of each expert are hot, and one token's scratch
     * (ffn_moe_split.h); NULL without a budget */
    struct pi_expert_split *split;
} pi_moe_scratch;

#endif
