/* types.c - per-type facts: sizes for the types we run, from quants.h's list, and names for
 * every ggml type id. */
#include <stdio.h>

#include "quants.h"

#define TYPE_INFO_(T, id, name, bs, bb, ...) [PI_TYPE_##T] = {name, bs, (int)(bb)},
static const pi_type_info type_table[PI_TYPE_COUNT] = {PI_TYPES(TYPE_INFO_, ~)};

/* ggml's other ids: named in error messages, not run. */
static const char *const other_names[PI_TYPE_COUNT] = {
    [9] = "q8_1",     [15] = "q8_K",    [16] = "iq2_xxs", [17] = "iq2_xs", [18] = "iq3_xxs",
    [19] = "iq1_s",   [20] = "iq4_nl",  [21] = "iq3_s",   [22] = "iq2_s",  [23] = "iq4_xs",
    [24] = "i8",      [25] = "i16",     [26] = "i32",     [27] = "i64",    [28] = "f64",
    [29] = "iq1_m",   [34] = "tq1_0",   [35] = "tq2_0",   [39] = "mxfp4",
};

const pi_type_info *pi_type_get(uint32_t type) {
    if (type >= PI_TYPE_COUNT || type_table[type].block_size == 0) return NULL;
    return &type_table[type];
}

const char *pi_type_name(uint32_t type) {
    /* Unnamed ids get their number, in a per-thread buffer so concurrent errors do not mix. */
    static _Thread_local char unknown[24];
    if (type < PI_TYPE_COUNT && type_table[type].name) return type_table[type].name;
    if (type < PI_TYPE_COUNT && other_names[type]) return other_names[type];
    snprintf(unknown, sizeof unknown, "type %u", (unsigned)type);
    return unknown;
}
