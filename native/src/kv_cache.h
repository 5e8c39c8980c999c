/* kv_cache.h - the KV cache's rows (kv_format.h) stored from a step's keys and values, and
 * dotted with its queries and mixed as llama.cpp rounds them. */
#ifndef PI_KV_CACHE_H
#define PI_KV_CACHE_H
#include "context.h"
#include "kv_format.h"

/* The step's n keys and values (c->s.k, c->s.v: float, [n][kv_dim]) into layer il's rows of their
 * sequences' positions (c->s.segs). */
void pi_kv_store(pi_context *c, int il, int n);

/* q of n tokens ([n][q_dim] in c->s.q) in the form the keys are dotted with: rounded to f16 for f16
 * keys, else q8_0 blocks in c->s.xq.q, which is free between the q/k/v and the output matmuls. */
void pi_kv_prepare_q(pi_context *c, int n);

/* out[p] = scale * q . k_p over n keys from k (a head's slice of the first row, rows
 * c->kv.k_row bytes apart), for head h of token t of the step. */
void pi_kv_scores(const pi_context *c, int t, int h, const uint8_t *k, int n, float scale, float *out);

/* out = inv_sum * sum_p e[p] v_p over n values from v (as k above), e the exponentials of the
 * scores (overwritten) and inv_sum one over their sum. */
void pi_kv_mix(const pi_context *c, float *e, float inv_sum, const uint8_t *v, int n, float *out);

#endif
