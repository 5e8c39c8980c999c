/* blocks.h - the CPU's blocks on c->s.x as it stands: x += attention(x), x += FFN(x), and the
 * logits. forward.c's steps run them, and so does the host stand-in device (device/host.c) on
 * its own copy of the stream; they call nothing above them. */
#ifndef PI_BLOCKS_H
#define PI_BLOCKS_H
#include "context.h"
#include "ffn_path.h"

int pi_attention_block(pi_context *c, int il, int n);
/* x += FFN(x) computed as `path` says (PI_FFN_DENSE .. PI_FFN_MOE_SPLIT; ffn_path.h) */
int pi_ffn_block(pi_context *c, int il, int n, pi_ffn_path path);
int pi_logits_block(pi_context *c, int n, pi_outputs out);
/* x += post_ffn_norm(delta + ffn_down_b) for n rows: the FFN's result joins the stream */
void pi_ffn_residual(const pi_context *c, int il, float *x, float *delta, int n);
/* delta[0..n) = FFN(a) for n tokens, every neuron (a: the FFN's input, quantized) */
void pi_ffn_dense(pi_context *c, const pi_layer *L, int il, int n, pi_act a);
/* x[t] += position_embd[tok_pos[t] + offset]: learned positions (opt, bert) */
void pi_add_positions(pi_context *c, int n);

#endif
