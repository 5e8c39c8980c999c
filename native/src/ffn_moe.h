/* ffn_moe.h - a mixture-of-experts FFN (qwen3moe, smallthinker): a router picks each token's
 * experts and weights them; each expert is a gated FFN of its own (SwiGLU, or ReGLU). */
#ifndef PI_FFN_MOE_H
#define PI_FFN_MOE_H
#include "context.h"

/* c->moe_probs[0..n) = layer L's router logits of a (quantized where the router is): the FFN's
 * normed input (qwen3moe, inside pi_moe_route), or the layer's input before attention
 * (smallthinker, model.router_on_input), kept there for the FFN step of the same layer. */
void pi_moe_logits(pi_context *c, const pi_layer *L, int n, pi_act a);

/* Each of n tokens' k experts (largest probability first, c->moe_sel) and their weights, then the
 * (token, expert) pairs grouped by expert: expert e's pairs are [moe_first[e], moe_first[e + 1])
 * of moe_tok, in token order. The router runs on the calling thread (on the 8-bit form of a for a
 * quantized router), unless the model routes from the layer's input (the logits are there). */
void pi_moe_route(pi_context *c, const pi_layer *L, int n, pi_act a);
/* expert e of an MoE tensor as a matrix of its own: a view, no copy */
pi_weight pi_expert_weight(const pi_weight *w, int e);

/* One token's ReGLU expert (relu(gate) * up) over n neurons, skipping the dead ones (gate <= 0,
 * which add exactly 0): the single-token path of pi_ffn_moe and the expert split's runs share these.
 * live[0..) = the neurons i with g[i] > 0, ascending; returns how many. */
int pi_live_neurons(const float *g, int n, int32_t *live);
/* g[i] = relu(g[i]) * up[j] where i = live[j] (up packed: the live rows' only), else 0 */
void pi_reglu_live(float *g, int n, const float *up, const int32_t *live, int n_live);
/* The next stretch of consecutive column blocks of down holding a live neuron (live ascending,
 * columns of down, from live[*j]; *j moves past it): *slice = those columns of down as a
 * matrix (a view), *c0 its first column. Returns 0 when no live neuron is left. */
int pi_live_stretch(const pi_weight *down, const int32_t *live, int n_live, int *j, pi_weight *slice, int *c0);
/* the weight bytes a stretch's slice reads */
uint64_t pi_live_stretch_bytes(const pi_weight *slice);
/* columns [c0, c0 + n) of one token's activation h (c0 a multiple of the 8-bit blocks) */
pi_act pi_act_columns(pi_act h, int c0, int n);

/* delta[0..n) = the MoE FFN of layer L on a, the FFN's normed input (quantized): per token the
 * router's softmax (or sigmoid), its top n_expert_used experts with their probabilities
 * renormalised to sum 1, and the weighted sum of those experts' outputs. Each expert runs once
 * per step over all the tokens routed to it, so its weights are read once; only routed experts
 * are read, and of a ReGLU expert only its live neurons' rows. */
void pi_ffn_moe(pi_context *c, const pi_layer *L, int n, pi_act a);

#endif
