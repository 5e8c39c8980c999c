/* kernels/repack.c - the grouped row layout applied to a model's weights at load (repack.h). */
#include <stdlib.h>

#include "kernels/repack.h"
#include "quants.h"
#include "status.h"

int pi_repack_fits(uint32_t type, int64_t n_out) { return pi_groups_hold(type) && n_out % PI_GROUP_ROWS == 0; }

int pi_repack_group(const pi_repack_item *items, int n) {
    size_t scratch_bytes = 0;
    for (int i = 0; i < n; i++)
        if (items[i].row_bytes * PI_GROUP_ROWS > scratch_bytes) scratch_bytes = items[i].row_bytes * PI_GROUP_ROWS;
    if (scratch_bytes == 0) return PI_OK;
    uint8_t *scratch = malloc(scratch_bytes);
    if (!scratch) return pi_set_error(PI_ERR_NOMEM, "no memory to group the weights' rows");
    for (int i = 0; i < n; i++) pi_group_rows(items[i].type, items[i].rows, items[i].row_bytes, items[i].n_rows, scratch);
    free(scratch);
    return PI_OK;
}
