/* router.h - where the residual stream lives. Each step of the forward pass runs where the
 * context placed it (its dev.on_device); these bring the stream of the step's n tokens to
 * that side first, so it crosses only when consecutive steps run on different sides. */
#ifndef PI_ROUTER_H
#define PI_ROUTER_H
#include "context.h"

int pi_x_to_host(pi_context *c, int n);
int pi_x_to_device(pi_context *c, int n);

/* The device's steps, the stream moved there first. */
int pi_device_attention(pi_context *c, int il, int n, int pos0);
int pi_device_ffn(pi_context *c, int il, int n);
int pi_device_logits(pi_context *c, int n, pi_outputs out);

#endif
