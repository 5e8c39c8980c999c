/* gguf.c - parse a GGUF (v2/v3) file from a read-only memory mapping, trusting nothing in it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"
#include "status.h"

/* A cursor over [p, end): each read checks that its bytes are inside the mapping. */
typedef struct {
    const uint8_t *base, *p, *end;
} cursor;

static int need(cursor *c, uint64_t n, const char *what) {
    if ((uint64_t)(c->end - c->p) < n)
        return pi_set_error(PI_ERR_FORMAT, "GGUF truncated: %s at byte %llu needs %llu bytes, file has %llu",
                            what, (unsigned long long)(c->p - c->base), (unsigned long long)n,
                            (unsigned long long)(c->end - c->base));
    return PI_OK;
}

static int read_u32(cursor *c, uint32_t *v, const char *what) {
    int rc = need(c, 4, what);
    if (rc) return rc;
    memcpy(v, c->p, 4);
    c->p += 4;
    return PI_OK;
}

static int read_u64(cursor *c, uint64_t *v, const char *what) {
    int rc = need(c, 8, what);
    if (rc) return rc;
    memcpy(v, c->p, 8);
    c->p += 8;
    return PI_OK;
}

static int read_str(cursor *c, gguf_str *s, const char *what) {
    uint64_t len;
    int rc = read_u64(c, &len, what);
    if (rc) return rc;
    if ((rc = need(c, len, what))) return rc;
    s->ptr = (const char *)c->p;
    s->len = len;
    c->p += len;
    return PI_OK;
}

/* Bytes of one scalar of metadata type t; 0 for strings and arrays. */
static uint64_t meta_scalar_size(uint32_t t) {
    switch (t) {
    case PI_META_UINT8: case PI_META_INT8: case PI_META_BOOL: return 1;
    case PI_META_UINT16: case PI_META_INT16: return 2;
    case PI_META_UINT32: case PI_META_INT32: case PI_META_FLOAT32: return 4;
    case PI_META_UINT64: case PI_META_INT64: case PI_META_FLOAT64: return 8;
    default: return 0;
    }
}

static int read_kv_value(cursor *c, gguf_kv *kv) {
    char what[96];
    snprintf(what, sizeof what, "value of key '%.*s'", (int)(kv->key.len > 48 ? 48 : kv->key.len), kv->key.ptr);
    int rc;
    if (kv->type == PI_META_STRING) {
        gguf_str s;
        if ((rc = read_str(c, &s, what))) return rc;
        kv->value = (const uint8_t *)s.ptr;
        kv->str_len = s.len;
        return PI_OK;
    }
    if (kv->type == PI_META_ARRAY) {
        if ((rc = read_u32(c, &kv->arr_type, what)) || (rc = read_u64(c, &kv->arr_len, what))) return rc;
        kv->value = c->p;
        if (kv->arr_type == PI_META_STRING) {
            /* each element needs at least its 8-byte length: bound the table before allocating it */
            if (kv->arr_len > (uint64_t)(c->end - c->p) / 8)
                return pi_set_error(PI_ERR_FORMAT, "GGUF: %s claims %llu strings, more than the file holds", what,
                                    (unsigned long long)kv->arr_len);
            kv->str_offsets = malloc((kv->arr_len ? kv->arr_len : 1) * sizeof(uint64_t));
            if (!kv->str_offsets) return pi_set_error(PI_ERR_NOMEM, "GGUF: no memory for %s", what);
            for (uint64_t j = 0; j < kv->arr_len; j++) {
                gguf_str s;
                kv->str_offsets[j] = (uint64_t)(c->p - c->base);
                if ((rc = read_str(c, &s, what))) return rc;
            }
            return PI_OK;
        }
        uint64_t elem = meta_scalar_size(kv->arr_type);
        if (elem == 0)
            return pi_set_error(kv->arr_type == PI_META_ARRAY ? PI_ERR_UNSUPPORTED : PI_ERR_FORMAT,
                                "GGUF: %s is an array of unsupported element type %u", what, kv->arr_type);
        if (kv->arr_len > (uint64_t)(c->end - c->p) / elem)
            return pi_set_error(PI_ERR_FORMAT, "GGUF truncated: %s claims %llu elements, more than the file holds",
                                what, (unsigned long long)kv->arr_len);
        c->p += kv->arr_len * elem;
        return PI_OK;
    }
    uint64_t size = meta_scalar_size(kv->type);
    if (size == 0) return pi_set_error(PI_ERR_FORMAT, "GGUF: %s has unknown metadata type %u", what, kv->type);
    if ((rc = need(c, size, what))) return rc;
    kv->value = c->p;
    c->p += size;
    return PI_OK;
}

static int read_tensor_info(cursor *c, gguf_tensor *t) {
    int rc;
    if ((rc = read_str(c, &t->name, "tensor name"))) return rc;
    if ((rc = read_u32(c, &t->n_dims, "tensor rank"))) return rc;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return pi_set_error(PI_ERR_FORMAT, "GGUF: tensor '%.*s' has %u dims (1..4 allowed)", (int)t->name.len,
                            t->name.ptr, t->n_dims);
    uint64_t count = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1;
        if (d < t->n_dims && (rc = read_u64(c, &ne, "tensor dims"))) return rc;
        /* 2^40 elements per dim and 2^50 in all are far beyond any file that can be mapped */
        if (ne == 0 || ne > (1ull << 40) || count > (1ull << 50) / ne)
            return pi_set_error(PI_ERR_FORMAT, "GGUF: tensor '%.*s' has absurd dim %u = %llu", (int)t->name.len,
                                t->name.ptr, d, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
        count *= ne;
    }
    if ((rc = read_u32(c, &t->type, "tensor type")) || (rc = read_u64(c, &t->offset, "tensor offset"))) return rc;
    const pi_type_info *ti = pi_type_get(t->type);
    if (!ti)
        return pi_set_error(PI_ERR_UNSUPPORTED, "tensor '%.*s' has type %s, which this runtime does not support",
                            (int)t->name.len, t->name.ptr, pi_type_name(t->type));
    if (t->ne[0] % ti->block_size)
        return pi_set_error(PI_ERR_FORMAT, "GGUF: tensor '%.*s' row of %lld is not a multiple of %s's block %d",
                            (int)t->name.len, t->name.ptr, (long long)t->ne[0], ti->name, ti->block_size);
    t->nbytes = count / ti->block_size * ti->type_size;
    return PI_OK;
}

static int cmp_offset(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Offsets must be aligned, inside the data section, and tensors must not overlap. */
static int check_tensor_layout(gguf_file *f) {
    uint64_t data_size = f->size - (uint64_t)(f->data - f->map);
    const gguf_tensor **order = malloc((f->n_tensors ? f->n_tensors : 1) * sizeof *order);
    if (!order) return pi_set_error(PI_ERR_NOMEM, "GGUF: no memory for tensor table");
    int rc = PI_OK;
    for (int64_t i = 0; i < f->n_tensors && !rc; i++) {
        gguf_tensor *t = &f->tensors[i];
        order[i] = t;
        if (t->offset % f->alignment)
            rc = pi_set_error(PI_ERR_FORMAT, "GGUF: tensor '%.*s' offset %llu is not aligned to %llu",
                              (int)t->name.len, t->name.ptr, (unsigned long long)t->offset,
                              (unsigned long long)f->alignment);
        else if (t->offset > data_size || t->nbytes > data_size - t->offset)
            rc = pi_set_error(PI_ERR_FORMAT,
                              "GGUF truncated: tensor '%.*s' (%llu bytes at data offset %llu) ends past the "
                              "file's %llu data bytes",
                              (int)t->name.len, t->name.ptr, (unsigned long long)t->nbytes,
                              (unsigned long long)t->offset, (unsigned long long)data_size);
        else
            t->data = f->data + t->offset;
    }
    if (!rc) {
        qsort(order, (size_t)f->n_tensors, sizeof *order, cmp_offset);
        for (int64_t i = 1; i < f->n_tensors && !rc; i++)
            if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset)
                rc = pi_set_error(PI_ERR_FORMAT, "GGUF: tensors '%.*s' and '%.*s' overlap", (int)order[i - 1]->name.len,
                                  order[i - 1]->name.ptr, (int)order[i]->name.len, order[i]->name.ptr);
    }
    free(order);
    return rc;
}

static int parse(gguf_file *f) {
    cursor c = { f->map, f->map, f->map + f->size };
    int rc;
    if (f->size < 4 || (memcmp(f->map, "GGUF", 4) != 0 && memcmp(f->map, "PWRI", 4) != 0))
        return pi_set_error(PI_ERR_FORMAT, "not a GGUF file (bad magic)");
    f->is_powerinfer = memcmp(f->map, "PWRI", 4) == 0;
    c.p += 4;
    if ((rc = read_u32(&c, &f->version, "version"))) return rc;
    if (f->version < 2 || f->version > 3)
        return pi_set_error(PI_ERR_UNSUPPORTED, "GGUF version %u is not supported (2 and 3 are)", f->version);
    uint64_t n_tensors, n_kv;
    if ((rc = read_u64(&c, &n_tensors, "tensor count")) || (rc = read_u64(&c, &n_kv, "metadata count"))) return rc;
    /* a key/value needs >= 12 bytes and a tensor info >= 24: bound counts before allocating */
    uint64_t left = (uint64_t)(c.end - c.p);
    if (n_kv > left / 12 || n_tensors > left / 24)
        return pi_set_error(PI_ERR_FORMAT, "GGUF: counts (%llu tensors, %llu keys) exceed what the file can hold",
                            (unsigned long long)n_tensors, (unsigned long long)n_kv);
    f->kv = calloc(n_kv ? n_kv : 1, sizeof *f->kv);
    f->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *f->tensors);
    if (!f->kv || !f->tensors) return pi_set_error(PI_ERR_NOMEM, "GGUF: no memory for the tables");
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        f->n_kv = (int64_t)i + 1; /* so gguf_close frees what was allocated so far */
        if ((rc = read_str(&c, &kv->key, "metadata key")) || (rc = read_u32(&c, &kv->type, "metadata type")) ||
            (rc = read_kv_value(&c, kv)))
            return rc;
    }
    f->alignment = 32;
    uint32_t alignment = 32;
    if ((rc = gguf_get_u32(f, "general.alignment", 0, &alignment))) return rc;
    if (alignment == 0 || (alignment & (alignment - 1)) || alignment > (1u << 20))
        return pi_set_error(PI_ERR_FORMAT, "GGUF: general.alignment %u is not a power of two", alignment);
    f->alignment = alignment;
    for (uint64_t i = 0; i < n_tensors; i++) {
        f->n_tensors = (int64_t)i + 1;
        if ((rc = read_tensor_info(&c, &f->tensors[i]))) return rc;
    }
    uint64_t header_end = (uint64_t)(c.p - c.base);
    uint64_t data_start = (header_end + f->alignment - 1) / f->alignment * f->alignment;
    if (data_start > f->size && n_tensors > 0)
        return pi_set_error(PI_ERR_FORMAT, "GGUF truncated: no tensor data after the header");
    f->data = f->map + (data_start > f->size ? f->size : data_start);
    return check_tensor_layout(f);
}

int gguf_open(const char *path, gguf_file *f) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return pi_set_error(PI_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return pi_set_error(PI_ERR_IO, "'%s' is not a regular file", path);
    }
    if (st.st_size < 24) {
        close(fd);
        return pi_set_error(PI_ERR_FORMAT, "'%s' is too small (%lld bytes) to be a GGUF file", path,
                            (long long)st.st_size);
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return pi_set_error(PI_ERR_IO, "cannot map '%s': %s", path, strerror(errno));
    f->map = map;
    f->size = (uint64_t)st.st_size;
    int rc = parse(f);
    if (rc) gguf_close(f);
    return rc;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    for (int64_t i = 0; i < f->n_kv; i++) free(f->kv[i].str_offsets);
    free(f->kv);
    free(f->tensors);
    if (f->map) munmap(f->map, (size_t)f->size);
    memset(f, 0, sizeof *f);
}

int gguf_make_writable(gguf_file *f) { return mprotect(f->map, (size_t)f->size, PROT_READ | PROT_WRITE); }

int gguf_str_eq(gguf_str s, const char *c) { return strlen(c) == s.len && memcmp(s.ptr, c, s.len) == 0; }

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    for (int64_t i = 0; i < f->n_kv; i++)
        if (gguf_str_eq(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    for (int64_t i = 0; i < f->n_tensors; i++)
        if (gguf_str_eq(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

static int missing(const char *key, int required) {
    return required ? pi_set_error(PI_ERR_FORMAT, "GGUF: required key '%s' is missing", key) : PI_OK;
}

int gguf_get_u32(const gguf_file *f, const char *key, int required, uint32_t *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return missing(key, required);
    uint64_t v;
    switch (kv->type) {
    case PI_META_UINT8: v = kv->value[0]; break;
    case PI_META_UINT16: { uint16_t x; memcpy(&x, kv->value, 2); v = x; break; }
    case PI_META_UINT32: { uint32_t x; memcpy(&x, kv->value, 4); v = x; break; }
    case PI_META_UINT64: memcpy(&v, kv->value, 8); break;
    case PI_META_INT8: case PI_META_INT16: case PI_META_INT32: case PI_META_INT64: {
        int64_t x = 0;
        if (kv->type == PI_META_INT8) x = (int8_t)kv->value[0];
        else if (kv->type == PI_META_INT16) { int16_t y; memcpy(&y, kv->value, 2); x = y; }
        else if (kv->type == PI_META_INT32) { int32_t y; memcpy(&y, kv->value, 4); x = y; }
        else memcpy(&x, kv->value, 8);
        if (x < 0) return pi_set_error(PI_ERR_FORMAT, "GGUF: key '%s' is negative (%lld)", key, (long long)x);
        v = (uint64_t)x;
        break;
    }
    default: return pi_set_error(PI_ERR_FORMAT, "GGUF: key '%s' is not an integer", key);
    }
    if (v > UINT32_MAX) return pi_set_error(PI_ERR_FORMAT, "GGUF: key '%s' = %llu is out of range", key, (unsigned long long)v);
    *out = (uint32_t)v;
    return PI_OK;
}

int gguf_get_f32(const gguf_file *f, const char *key, int required, float *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return missing(key, required);
    if (kv->type == PI_META_FLOAT32) {
        memcpy(out, kv->value, 4);
    } else if (kv->type == PI_META_FLOAT64) {
        double d;
        memcpy(&d, kv->value, 8);
        *out = (float)d;
    } else {
        uint32_t u;
        int rc = gguf_get_u32(f, key, 1, &u);
        if (rc) return pi_set_error(PI_ERR_FORMAT, "GGUF: key '%s' is not a number", key);
        *out = (float)u;
    }
    return PI_OK;
}

int gguf_get_str(const gguf_file *f, const char *key, int required, gguf_str *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return missing(key, required);
    if (kv->type != PI_META_STRING) return pi_set_error(PI_ERR_FORMAT, "GGUF: key '%s' is not a string", key);
    out->ptr = (const char *)kv->value;
    out->len = kv->str_len;
    return PI_OK;
}

gguf_str gguf_array_str(const gguf_file *f, const gguf_kv *kv, uint64_t j) {
    const uint8_t *p = f->map + kv->str_offsets[j];
    gguf_str s;
    memcpy(&s.len, p, 8);
    s.ptr = (const char *)p + 8;
    return s;
}
