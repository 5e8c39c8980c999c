/* types.c - per-type facts: names for every ggml type id, sizes for the ones we run. */
#include <stdio.h>

#include "quants.h"

/* block_size == 0 marks a type we can name in an error message but do not run. */
static const pi_type_info type_table[PI_TYPE_COUNT] = {
    [PI_TYPE_F32] = {"f32", 1, 4},
    [PI_TYPE_F16] = {"f16", 1, 2},
    [PI_TYPE_Q4_0] = {"q4_0", QK, sizeof(block_q4_0)},
    [PI_TYPE_Q4_1] = {"q4_1", QK, sizeof(block_q4_1)},
    [PI_TYPE_Q5_0] = {"q5_0", QK, sizeof(block_q5_0)},
    [PI_TYPE_Q5_1] = {"q5_1", QK, sizeof(block_q5_1)},
    [PI_TYPE_Q8_0] = {"q8_0", QK, sizeof(block_q8_0)},
    [9] = {"q8_1", 0, 0},
    [PI_TYPE_Q2_K] = {"q2_K", 256, 84},
    [PI_TYPE_Q3_K] = {"q3_K", 256, 110},
    [PI_TYPE_Q4_K] = {"q4_K", 256, 144},
    [PI_TYPE_Q5_K] = {"q5_K", 256, 176},
    [PI_TYPE_Q6_K] = {"q6_K", 256, 210},
    [15] = {"q8_K", 0, 0},
    [16] = {"iq2_xxs", 0, 0},
    [17] = {"iq2_xs", 0, 0},
    [18] = {"iq3_xxs", 0, 0},
    [19] = {"iq1_s", 0, 0},
    [20] = {"iq4_nl", 0, 0},
    [21] = {"iq3_s", 0, 0},
    [22] = {"iq2_s", 0, 0},
    [23] = {"iq4_xs", 0, 0},
    [24] = {"i8", 0, 0},
    [25] = {"i16", 0, 0},
    [26] = {"i32", 0, 0},
    [27] = {"i64", 0, 0},
    [28] = {"f64", 0, 0},
    [29] = {"iq1_m", 0, 0},
    [PI_TYPE_BF16] = {"bf16", 1, 2},
    [34] = {"tq1_0", 0, 0},
    [35] = {"tq2_0", 0, 0},
    [39] = {"mxfp4", 0, 0},
};

const pi_type_info *pi_type_get(uint32_t type) {
    if (type >= PI_TYPE_COUNT || type_table[type].block_size == 0) return NULL;
    return &type_table[type];
}

const char *pi_type_name(uint32_t type) {
    /* Unnamed ids get their number, in a per-thread buffer so concurrent errors do not mix. */
    static _Thread_local char unknown[24];
    if (type < PI_TYPE_COUNT && type_table[type].name) return type_table[type].name;
    snprintf(unknown, sizeof unknown, "type %u", (unsigned)type);
    return unknown;
}
