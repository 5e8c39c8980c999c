/* forward.h - the transformer forward pass (forward.c): pi_forward, each layer's steps where the
 * context placed them, over the CPU's blocks (blocks.h) and the device (device/router.h). */
#ifndef PI_FORWARD_H
#define PI_FORWARD_H
#include "context.h"

/* Run the transformer on tokens[0..n) (n <= n_batch), c->s.segs[0 .. c->s.n_segs) saying which
 * sequence and positions each is, appending their keys and values to the cache (each sequence
 * then holds its segment's end) and writing the logits that `out` asks for. */
int pi_forward(pi_context *ctx, const int32_t *tokens, int n, pi_outputs out);
/* tok_pos and tok_row0 of the step's n tokens from its segments */
void pi_step_positions(pi_context *c);
/* the step as one segment: n tokens of sequence 0 from position pos0 (pi_decode, the encoder) */
void pi_one_segment(pi_context *c, int n, int pos0);

/* The encoder's pass (encoder.c): tokens[0..n) as one input, bidirectionally, from position 0;
 * the final hidden states become embedding rows 0..n */
int pi_encode(pi_context *c, const int32_t *tokens, int n);

#endif
