/* ffn_moe.h - a mixture-of-experts FFN (qwen3moe, smallthinker): a router picks each token's
 * experts and weights them; each expert is a gated FFN of its own (SwiGLU, or ReGLU). */
#ifndef PI_FFN_MOE_H
#define PI_FFN_MOE_H
#include "context.h"

/* c->moe.probs[0..n) = layer L's router logits of a (quantized where the router is): the FFN's
 * normed input (qwen3moe, inside pi_moe_route), or the layer's input before attention
 * (smallthinker, model.router_on_input), kept there for the FFN step of the same layer. */
void pi_moe_logits(pi_context *c, const pi_layer *L, int n, pi_act a);

/* Each of n tokens' k experts (largest probability first, c->moe.sel) and their weights, then the
 * (token, expert) pairs grouped by expert: expert e's pairs are [moe.first[e], moe.first[e + 1])
 * of moe.tok, in token order. The router runs on the calling thread (on the 8-bit form of a for a
 * quantized router), unless the model routes from the layer's input (the logits are there). */
void pi_moe_route(pi_context *c, const pi_layer *L, int n, pi_act a);
/* expert e of an MoE tensor as a matrix of its own: a view, no copy */
pi_weight pi_expert_weight(const pi_weight *w, int e);

/* Where one token's ReGLU expert, or run of one, keeps its work: g, u, live and q over its
 * neurons, acc over n_embd. */
typedef struct {
    float *g, *u;
    int32_t *live;
    pi_act_store q;
    float *acc;
} pi_reglu_scratch;

/* acc = down(relu(gate x) * up x) for one token x of a ReGLU expert, or a run of one (rows of
 * gate and up, the same columns of down): the gate rows, then, since a neuron whose gate is <= 0
 * adds exactly 0, only the live neurons' up rows and the column blocks of down holding a live
 * neuron (one pass over down's rows, in llama.cpp's order, the all-zero blocks skipped).
 * On the context's pool (pooled) or on the calling thread alone. Returns the live neurons;
 * *bytes = the weight bytes read. pi_ffn_moe's one-token experts and the expert split's runs. */
int pi_reglu_token(pi_context *c, const pi_weight *gate, const pi_weight *up, const pi_weight *down, pi_act x,
                   const pi_reglu_scratch *s, int pooled, int64_t *bytes);

/* delta[0..n) = the MoE FFN of layer L on a, the FFN's normed input (quantized): per token the
 * router's softmax (or sigmoid), its top n_expert_used experts with their probabilities
 * renormalised to sum 1, and the weighted sum of those experts' outputs. Each expert runs once
 * per step over all the tokens routed to it, so its weights are read once; only routed experts
 * are read, and of a ReGLU expert only its live neurons' rows. */
void pi_ffn_moe(pi_context *c, const pi_layer *L, int n, pi_act a);

#endif
