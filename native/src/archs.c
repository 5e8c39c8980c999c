/* archs.c - the architectures' descriptors (arch.h) and the readers of their own hyperparameters.
 *
 * An architecture is its row here: most are the llama block with traits, and their readers set
 * pi_model's fields (model.h) after model.c has read the keys every architecture has. */
#include <math.h>
#include <string.h>

#include "arch.h"
#include "model.h"
#include "status.h"

static int key_u32(const pi_model *m, const char *suffix, int required, uint32_t *out) {
    return pi_arch_key_u32(&m->file, m->arch, suffix, required, out);
}

static int key_f32(const pi_model *m, const char *suffix, int required, float *out) {
    return pi_arch_key_f32(&m->file, m->arch, suffix, required, out);
}

/* Mistral-style llama: every layer sees the last `window` positions, with the global rope; 0,
 * like an absent key, means no window (llama.cpp's n_swa) */
static int read_llama(pi_model *m) {
    uint32_t window = 0;
    const int rc = key_u32(m, "attention.sliding_window", 0, &window);
    if (window > INT32_MAX) window = INT32_MAX; /* wider than any context: no window in effect */
    m->swa_window = (int32_t)window;
    return rc;
}

/* Gemma 3 on the llama block: embeddings scaled by sqrt(n_embd), NeoX rope, per-head q/k norms
 * and post-norms (bound with the tensors), GELU GLU, and five local (sliding-window) layers to
 * one global, the local ones with their own rope base, as llama.cpp runs it. */
static int read_gemma3(pi_model *m) {
    uint32_t window = 512;
    float local_base = 10000.0f;
    int rc;
    if ((rc = key_u32(m, "attention.sliding_window", 0, &window)) || (rc = key_f32(m, "rope.freq_base_swa", 0, &local_base)))
        return rc;
    if (window == 0 || !(local_base > 0.0f) || !isfinite(local_base))
        return pi_set_error(PI_ERR_FORMAT, "GGUF: implausible sliding window %u or local rope base %g", window, local_base);
    m->embd_scale = sqrtf((float)m->info.n_embd);
    m->swa_window = (int32_t)window;
    m->swa_period = 6; /* every sixth layer global */
    m->rope_base_local = local_base;
    return PI_OK;
}

/* An MoE FFN's experts (qwen3moe): expert_count, expert_used_count routed per token, and
 * expert_feed_forward_length neurons each (absent: feed_forward_length / expert_used_count, as
 * llama.cpp reads it), gated by softmax. */
static int read_moe(pi_model *m) {
    uint32_t n_expert = 0, n_used = 0, n_ff_exp = 0;
    int rc;
    if ((rc = key_u32(m, "expert_count", 1, &n_expert)) || (rc = key_u32(m, "expert_used_count", 1, &n_used)) ||
        (rc = key_u32(m, "expert_feed_forward_length", 0, &n_ff_exp)))
        return rc;
    if (n_expert == 0 || n_expert > 1024)
        return pi_set_error(PI_ERR_FORMAT, "GGUF: %s.expert_count %u is outside 1..1024", m->arch, n_expert);
    if (n_used == 0 || n_used > n_expert)
        return pi_set_error(PI_ERR_FORMAT, "GGUF: %s.expert_used_count %u is outside 1..expert_count (%u)", m->arch,
                            n_used, n_expert);
    if (n_ff_exp == 0) n_ff_exp = (uint32_t)m->info.n_ff / n_used;
    if (n_ff_exp == 0 || n_ff_exp > (1u << 20))
        return pi_set_error(PI_ERR_FORMAT, "GGUF: %s.expert_feed_forward_length %u is outside 1..%u", m->arch, n_ff_exp,
                            1u << 20);
    /* pi_model's copies are what the runtime reads; info's what pi_model_get_info reports */
    m->info.n_expert = m->n_expert = (int32_t)n_expert;
    m->info.n_expert_used = m->n_expert_used = (int32_t)n_used;
    m->info.n_ff_exp = m->n_ff_exp = (int32_t)n_ff_exp;
    m->moe_gating = PI_GATING_SOFTMAX;
    return PI_OK;
}

/* SmallThinker, as llama.cpp reads it: its experts (read_moe), expert_gating_func (required: 1
 * softmax, 2 sigmoid), and with attention.sliding_window > 0 sliding-window layers
 * (il % sliding_window_pattern != 0, pattern 4 when absent) with their optional
 * rope.freq_base_swa, and the NoPE layers il % 4 == 0 (llama.cpp's n_no_rope_layer_step; a step
 * of n_layer rotates every layer). llama.cpp does not read expert_weights_scale for it
 * (measured: a file with 2.5 gives its logits to the bit), so neither do we. */
static int read_smallthinker(pi_model *m) {
    uint32_t gating = 0, window = 0, period = 4;
    float base_swa = 0.0f;
    int rc;
    if ((rc = read_moe(m)) || (rc = key_u32(m, "expert_gating_func", 1, &gating)) ||
        (rc = key_u32(m, "attention.sliding_window", 0, &window)) ||
        (rc = key_u32(m, "attention.sliding_window_pattern", 0, &period)) ||
        (rc = key_f32(m, "rope.freq_base_swa", 0, &base_swa)))
        return rc;
    if (gating != PI_GATING_SOFTMAX && gating != PI_GATING_SIGMOID)
        return pi_set_error(PI_ERR_FORMAT, "GGUF: %s.expert_gating_func %u is not 1 (softmax) or 2 (sigmoid)", m->arch,
                            gating);
    if (window > 0 && base_swa != 0.0f && !(base_swa > 0.0f && isfinite(base_swa)))
        return pi_set_error(PI_ERR_FORMAT, "GGUF: implausible %s.rope.freq_base_swa %g", m->arch, base_swa);
    m->moe_gating = (int)gating;
    if (window == 0) return PI_OK; /* no window: every layer global and rotated */
    /* llama.cpp runs a 4096-position window whatever the file says (its SmallThinker loader) */
    m->swa_window = 4096;
    m->swa_period = (int32_t)(period > INT32_MAX ? INT32_MAX : period);
    m->swa_dense_first = 1;
    m->no_rope_step = m->info.n_layer == 4 ? 0 : 4;
    if (base_swa > 0.0f) m->rope_base_local = base_swa;
    return PI_OK;
}

/* SmolLM3: the llama block whose every fourth layer, il % 4 == 3, has no rope (llama.cpp's
 * n_no_rope_layer_step, fixed at 4 for it: no key says otherwise). */
static int read_smollm3(pi_model *m) {
    m->no_rope_step = 4;
    m->no_rope_phase = 3;
    return PI_OK;
}

const pi_arch PI_ARCHS[] = {
    { .name = "llama", .ffn_act = PI_ACT_SILU_GLU, .powerinfer_act = PI_ACT_RELU_GLU, .read = read_llama },
    /* PowerInfer's Bamboo / TurboSparse (dReLU) */
    { .name = "bamboo", .ffn_act = PI_ACT_RELU_RELU_GLU, .powerinfer_act = -1 },
    { .name = "gemma3", .ffn_act = PI_ACT_GELU_GLU, .powerinfer_act = -1,
      .traits = ARCH_ROPE_NEOX | ARCH_QK_NORM | ARCH_POST_NORMS, .read = read_gemma3 },
    /* llama's block with q/k/v biases */
    { .name = "qwen2", .ffn_act = PI_ACT_SILU_GLU, .powerinfer_act = -1, .traits = ARCH_ROPE_NEOX },
    { .name = "qwen3", .ffn_act = PI_ACT_SILU_GLU, .powerinfer_act = -1, .traits = ARCH_ROPE_NEOX | ARCH_QK_NORM },
    { .name = "qwen3moe", .ffn_act = PI_ACT_SILU_GLU, .powerinfer_act = -1,
      .traits = ARCH_ROPE_NEOX | ARCH_QK_NORM | ARCH_MOE, .read = read_moe },
    /* PowerInfer's SmallThinker: ReGLU experts, routed from the layer's input */
    { .name = "smallthinker", .ffn_act = PI_ACT_RELU_GLU, .powerinfer_act = -1,
      .traits = ARCH_ROPE_NEOX | ARCH_MOE | ARCH_ROUTER_ON_INPUT, .read = read_smallthinker },
    { .name = "smollm3", .ffn_act = PI_ACT_SILU_GLU, .powerinfer_act = -1, .read = read_smollm3 },
    { .name = "phi3", .ffn_act = PI_ACT_SILU_GLU, .powerinfer_act = -1,
      .traits = ARCH_ROPE_NEOX | ARCH_FUSED_QKV | ARCH_FUSED_GATE_UP },
    /* as PowerInfer's llama.cpp runs OPT (ReLU): PowerInfer adds 2 to every position, as HF's
     * OPTLearnedPositionalEmbedding, and its files omit the epsilon */
    { .name = "opt", .ffn_act = PI_ACT_RELU, .powerinfer_act = -1, .norm_eps = 1e-5f, .position_offset = 2,
      .traits = ARCH_UNGATED | ARCH_LAYER_NORM | ARCH_NO_ROPE | ARCH_LEARNED_POS },
    /* attn_norm feeds the FFN, and the attention too unless attn_norm_2 (falcon-40b's ln_attn)
     * is present, as llama.cpp's graph reads them */
    { .name = "falcon", .ffn_act = PI_ACT_GELU, .powerinfer_act = PI_ACT_RELU, .attn_norm = "attn_norm_2",
      .ffn_norm = "attn_norm", .traits = ARCH_ROPE_NEOX | ARCH_FUSED_QKV | ARCH_UNGATED | ARCH_LAYER_NORM | ARCH_PARALLEL },
    /* embedding models, their norms after each residual; q/k/v separate or fused, as llama.cpp's
     * create_tensor_qkv takes them */
    { .name = "bert", .ffn_act = PI_ACT_GELU, .powerinfer_act = -1, .attn_norm = "attn_output_norm",
      .ffn_norm = "layer_output_norm",
      .traits = ARCH_ENCODER | ARCH_LAYER_NORM | ARCH_UNGATED | ARCH_NO_ROPE | ARCH_LEARNED_POS | ARCH_FUSED_QKV },
    { .name = "nomic-bert", .ffn_act = PI_ACT_SILU_GLU, .powerinfer_act = -1, .attn_norm = "attn_output_norm",
      .ffn_norm = "layer_output_norm", .traits = ARCH_ENCODER | ARCH_LAYER_NORM | ARCH_ROPE_NEOX | ARCH_FUSED_QKV },
};

const int PI_N_ARCHS = (int)(sizeof PI_ARCHS / sizeof PI_ARCHS[0]);
