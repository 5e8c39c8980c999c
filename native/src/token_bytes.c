/* token_bytes.c - the weight bytes a token reads (token_bytes.h). */
#include "token_bytes.h"

uint64_t pi_weight_bytes(const pi_weight *w) { return w->data ? (uint64_t)w->row_bytes * (uint64_t)w->n_out : 0; }

uint64_t pi_attention_bytes(const pi_layer *L) {
    return pi_weight_bytes(&L->attn_q) + pi_weight_bytes(&L->attn_k) + pi_weight_bytes(&L->attn_v) +
           pi_weight_bytes(&L->attn_output);
}

uint64_t pi_predictor_bytes(const pi_layer *L) { return pi_weight_bytes(&L->fc1) + pi_weight_bytes(&L->fc2); }

uint64_t pi_dense_ffn_bytes(const pi_layer *L) {
    const uint64_t down = L->ffn_down.data ? pi_weight_bytes(&L->ffn_down) : pi_weight_bytes(&L->ffn_down_t);
    return pi_weight_bytes(&L->ffn_gate) + pi_weight_bytes(&L->ffn_up) + down;
}

uint64_t pi_neuron_bytes(const pi_layer *L) {
    return (uint64_t)(L->ffn_gate.data ? L->ffn_gate.row_bytes : 0) + L->ffn_up.row_bytes + L->ffn_down_t.row_bytes;
}

uint64_t pi_dense_token_bytes(const pi_model *m) {
    uint64_t total = m->token_embd.row_bytes + pi_weight_bytes(&m->output);
    for (int il = 0; il < m->info.n_layer; il++)
        total += pi_attention_bytes(&m->layers[il]) + pi_dense_ffn_bytes(&m->layers[il]);
    return total;
}
