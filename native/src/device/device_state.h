/* device_state.h - what a context knows of its device (pi_context.dev): the device, the steps it
 * takes and which side holds the residual stream. The interface itself is device.h; place.h sets
 * these up and router.h moves the stream. */
#ifndef PI_DEVICE_STATE_H
#define PI_DEVICE_STATE_H
#include <stdint.h>

/* Which of a layer's two steps run on the device: x += attention(x), x += FFN(x) (every neuron) */
typedef struct {
    uint8_t attention, ffn;
} pi_layer_steps;

/* The device (device.h) and the steps it takes; the others run on the CPU. The residual stream's
 * current copy is the device's while x_on_device (router.h moves it). */
typedef struct pi_device_state {
    struct pi_device *device;   /* NULL: everything on the CPU */
    pi_layer_steps *on_device;  /* [n_layer], or NULL */
    int32_t logits_on_device;
    int32_t x_on_device;
} pi_device_state;

#endif
