/* gguf.h - a checked, memory-mapped view of a GGUF file.
 *
 * Every count, length, offset and size read from the file is bounds-checked against the
 * mapping before it is used, so a corrupt file yields PI_ERR_FORMAT, never a bad read. */
#ifndef PI_GGUF_H
#define PI_GGUF_H
#include <stdint.h>

#include "quants.h"

#define GGUF_MAX_DIMS 4

typedef struct { const char *ptr; uint64_t len; } gguf_str;

typedef struct {
    gguf_str key;
    uint32_t type;          /* PI_META_* */
    const uint8_t *value;   /* scalar: its bytes; string: its bytes; array: first element */
    uint64_t str_len;       /* string length */
    uint32_t arr_type;      /* array element type */
    uint64_t arr_len;
    uint64_t *str_offsets;  /* string arrays: byte offset of each element's length prefix */
} gguf_kv;

typedef struct {
    gguf_str name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* innermost first; unused dims are 1 */
    uint32_t type;             /* PI_TYPE_* */
    uint64_t offset;           /* relative to the data section */
    uint64_t nbytes;
    const uint8_t *data;
} gguf_tensor;

typedef struct {
    uint8_t *map;
    uint64_t size;
    uint32_t version;
    int is_powerinfer;      /* magic was "PWRI" (PowerInfer's own files) */
    uint64_t alignment;
    int64_t n_kv;
    gguf_kv *kv;
    int64_t n_tensors;
    gguf_tensor *tensors;
    const uint8_t *data;    /* start of the tensor data section */
} gguf_file;

/* Map and parse `path`. On failure *f is left empty (safe to gguf_close). */
int gguf_open(const char *path, gguf_file *f);
void gguf_close(gguf_file *f);
/* Make the private mapping writable: writes then go to the process's own copies of the pages,
 * never to the file. 0, or -1 (errno set). */
int gguf_make_writable(gguf_file *f);

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);
int gguf_str_eq(gguf_str s, const char *c);

/* Typed getters: PI_OK, or PI_ERR_FORMAT when the key exists with an unusable type/value,
 * or (only when `required`) when it is missing. A missing optional key leaves *out as is. */
int gguf_get_u32(const gguf_file *f, const char *key, int required, uint32_t *out);
int gguf_get_f32(const gguf_file *f, const char *key, int required, float *out);
int gguf_get_str(const gguf_file *f, const char *key, int required, gguf_str *out);

/* Element j of a string array. */
gguf_str gguf_array_str(const gguf_file *f, const gguf_kv *kv, uint64_t j);

#endif
