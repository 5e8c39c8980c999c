/* block_traits.h - what an architecture changes in the llama block that the block's code reads,
 * as lists that every side holds the same fields of: model.h's pi_layer and pi_model expand them
 * into their fields, cuda/layers_cuda.h's pi_cuda_block and pi_cuda_shape into theirs, and
 * device/cuda.c copies each list field by field. A trait added to a list therefore reaches the
 * device, and cuda/layers.cu's static assert on the lists' lengths stops the build until the
 * device's block reads it too. Plain C, no includes beyond <stdint.h>: nvcc compiles it. */
#ifndef PI_BLOCK_TRAITS_H
#define PI_BLOCK_TRAITS_H
#include <stdint.h>

/* Per layer, X(type, name): resolved at load from the model's hyperparameters (model.c). */
#define PI_LAYER_TRAITS(X)                                                                            \
    X(int32_t, local)      /* sliding-window attention: sees only the last swa_window positions */  \
    X(int32_t, rope_local) /* rotates with the local rope base (gemma3's local layers) */            \
    X(int32_t, no_rope)    /* q and k are not rotated (smallthinker's and smollm3's NoPE layers) */

/* Per model, X(type, name): the block's forms every layer shares. */
#define PI_BLOCK_TRAITS(X)                                                                            \
    X(int32_t, rope_neox)  /* rotate pairs (i, i + n_rot/2) instead of (2i, 2i + 1) */               \
    X(int32_t, swa_window) /* local layers attend to the last swa_window positions */                \
    X(int32_t, layer_norm) /* LayerNorm (mean and variance, weight and bias) instead of RMSNorm */   \
    X(int32_t, parallel)   /* attention and FFN both read the layer's input and add to it (falcon) */ \
    X(float, attn_softcap) /* cap * tanh(score / cap) of the attention scores; 0: none */

#define PI_TRAIT_FIELD(type, name) type name;
#define PI_TRAIT_COUNT(type, name) +1

#endif
