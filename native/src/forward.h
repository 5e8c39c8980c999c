/* forward.h - the transformer forward pass (forward.c): pi_forward, and the CPU's blocks that the
 * host stand-in device also runs on its own copy of the stream. */
#ifndef PI_FORWARD_H
#define PI_FORWARD_H
#include "context.h"

/* Run the transformer on tokens[0..n) (n <= n_batch), c->segs[0 .. c->n_segs) saying which
 * sequence and positions each is, appending their keys and values to the cache (each sequence
 * then holds its segment's end) and writing the logits that `out` asks for. */
int pi_forward(pi_context *ctx, const int32_t *tokens, int n, pi_outputs out);
/* tok_pos and tok_row0 of the step's n tokens from its segments */
void pi_step_positions(pi_context *c);
/* the step as one segment: n tokens of sequence 0 from position pos0 (pi_decode, the encoder) */
void pi_one_segment(pi_context *c, int n, int pos0);

/* The CPU's blocks on c->x as it stands: x += attention(x), x += FFN(x), and the logits. */
int pi_attention_block(pi_context *c, int il, int n);
int pi_ffn_block(pi_context *c, int il, int n);
int pi_logits_block(pi_context *c, int n, pi_outputs out);
/* x += post_ffn_norm(delta + ffn_down_b) for n rows: the FFN's result joins the stream */
void pi_ffn_residual(const pi_context *c, int il, float *x, float *delta, int n);
/* delta[0..n) = FFN(a) for n tokens, every neuron (a: the FFN's input, quantized) */
void pi_ffn_dense(pi_context *c, const pi_layer *L, int il, int n, pi_act a);
/* x[t] += position_embd[tok_pos[t] + offset]: learned positions (opt, bert) */
void pi_add_positions(pi_context *c, int n);

/* The encoder's pass (encoder.c): tokens[0..n) as one input, bidirectionally, from position 0;
 * the final hidden states become embedding rows 0..n */
int pi_encode(pi_context *c, const int32_t *tokens, int n);

#endif
