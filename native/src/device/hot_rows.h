/* hot_rows.h - what a device of the split holds: a copy of every layer's hot rows (the context's
 * hot_runs and layout), in one allocation laid out by position. */
#ifndef PI_HOT_ROWS_H
#define PI_HOT_ROWS_H
#include "ffn_sparse.h"

/* layers[il] views layer il's copy with rows NULL, its weights' n_out the hot count */
typedef struct {
    ffn_rows *layers;   /* [n_layer] */
    int32_t *n_hot;     /* [n_layer] */
    uint8_t *memory;
} pi_hot_copy;

int pi_hot_copy_new(const pi_context *c, pi_hot_copy *out);
void pi_hot_copy_free(pi_hot_copy *h);

#endif
