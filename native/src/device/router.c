/* router.c - the residual stream between the host and the device (router.h). */
#include "device/router.h"
#include "device/device.h"
#include "status.h"

int pi_x_to_host(pi_context *c, int n) {
    if (!c->dev.x_on_device) return PI_OK;
    const int rc = c->dev.device->ops->x_out(c->dev.device, c->s.x, n);
    if (!rc) c->dev.x_on_device = 0;
    return rc;
}

int pi_x_to_device(pi_context *c, int n) {
    if (c->dev.x_on_device) return PI_OK;
    const int rc = c->dev.device->ops->x_in(c->dev.device, c->s.x, n);
    if (!rc) c->dev.x_on_device = 1;
    return rc;
}

int pi_device_attention(pi_context *c, int il, int n, int pos0) {
    const int rc = pi_x_to_device(c, n);
    return rc ? rc : c->dev.device->ops->attention(c->dev.device, il, n, pos0);
}

int pi_device_ffn(pi_context *c, int il, int n) {
    const int rc = pi_x_to_device(c, n);
    return rc ? rc : c->dev.device->ops->ffn(c->dev.device, il, n);
}

int pi_device_logits(pi_context *c, int n, pi_outputs out) {
    const int rc = pi_x_to_device(c, n);
    return rc ? rc : c->dev.device->ops->logits(c->dev.device, n, out);
}
