/* weights.h - the weights of a row, in any type the CUDA kernels read: one on its own
 * (pi_dw_row, for kernels that read a column), or a unit of 32 at once with its scales decoded
 * once (pi_dw_unit, for the row dot products). Plain C that nvcc compiles for the device
 * (decode.cuh) and the host compiles for the tests (kernels/api.c's pi_kernel_device_dequant),
 * so the device's decoding is checked against the CPU's on machines without a GPU. Each weight
 * is computed as the CPU's dequantization does, the same float operations in the same order. */
#ifndef PI_CUDA_WEIGHTS_H
#define PI_CUDA_WEIGHTS_H
#include "quants.h"

#ifdef __CUDA_ARCH__
#include <cuda_fp16.h>
#endif

static inline PI_HOST_DEVICE float pi_dw_f16(const uint8_t *p) {
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half((unsigned short)(p[0] | p[1] << 8)));
#else
    return pi_fp16_to_f32((pi_fp16)(p[0] | p[1] << 8));
#endif
}

static inline PI_HOST_DEVICE float pi_dw_f32(const uint8_t *p) {
    union { uint32_t u; float f; } v = { (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24 };
    return v.f;
}

/* The bytes of field f of the block at b, a block_fmt; read a byte at a time (pi_dw_f16,
 * pi_dw_u32), since a block in a row need not be aligned for its fields. */
#define PI_DW_FIELD(b, fmt, f) ((b) + offsetof(block_##fmt, f))

static inline PI_HOST_DEVICE uint32_t pi_dw_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* the 4-bit field of weight j (0..31) in a block's 16 bytes qs: low nibbles first */
static inline PI_HOST_DEVICE int pi_dw_nibble(const uint8_t *qs, int j) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; }

/* weight j's 4 bits and its fifth from the block's 32-bit qh */
static inline PI_HOST_DEVICE int pi_dw_five(const uint8_t *qs, uint32_t qh, int j) {
    return pi_dw_nibble(qs, j) | (int)((qh >> j) & 1) << 4;
}

/* weight j (0..31) of a 32-weight block, from its scale d and offset m (the formats without
 * one: m unused): w = d * q + m, the offset folded into q */
static inline PI_HOST_DEVICE float pi_dw_block_weight(uint32_t type, const uint8_t *b, float d, float m, int j) {
    switch (type) {
    case PI_TYPE_Q4_0: return d * (float)(pi_dw_nibble(PI_DW_FIELD(b, q4_0, qs), j) - 8);
    case PI_TYPE_Q4_1: return d * (float)pi_dw_nibble(PI_DW_FIELD(b, q4_1, qs), j) + m;
    case PI_TYPE_Q5_0:
        return d * (float)(pi_dw_five(PI_DW_FIELD(b, q5_0, qs), pi_dw_u32(PI_DW_FIELD(b, q5_0, qh)), j) - 16);
    case PI_TYPE_Q5_1:
        return d * (float)pi_dw_five(PI_DW_FIELD(b, q5_1, qs), pi_dw_u32(PI_DW_FIELD(b, q5_1, qh)), j) + m;
    case PI_TYPE_Q8_0: return d * (float)(int8_t)PI_DW_FIELD(b, q8_0, qs)[j];
    default: PI_BAD_TYPE();
    }
}

/* the block's offset m, where its format has one */
static inline PI_HOST_DEVICE float pi_dw_block_offset(uint32_t type, const uint8_t *b) {
    switch (type) {
    case PI_TYPE_Q4_1: return pi_dw_f16(PI_DW_FIELD(b, q4_1, m));
    case PI_TYPE_Q5_1: return pi_dw_f16(PI_DW_FIELD(b, q5_1, m));
    case PI_TYPE_Q4_0:
    case PI_TYPE_Q5_0:
    case PI_TYPE_Q8_0: return 0.0f;
    default: PI_BAD_TYPE();
    }
}

static inline PI_HOST_DEVICE float pi_dw_block(uint32_t type, const uint8_t *b, int j) {
    return pi_dw_block_weight(type, b, pi_dw_f16(b), pi_dw_block_offset(type, b), j);
}

/* the 2-bit field of weight i in Q2_K / Q3_K's qs: bits 2s.. of byte 32h + j, i = 128h + 32s + j */
static inline PI_HOST_DEVICE int pi_dw_crumb(const uint8_t *qs, int i) { return (qs[(i / 128) * 32 + i % 32] >> (2 * (i % 128 / 32))) & 3; }

/* A K-quant super-block's weight i (0..255) is ds * q - dm, as kernels/kquants.h lays the
 * formats out: ds = d * scale and dm = dmin * min of its group of 16 (Q2_K, Q3_K, Q6_K) or 32
 * (Q4_K, Q5_K) weights, q its offset quant. */
typedef struct {
    float ds, dm;
} pi_dw_scale;

/* the scale and min of the group holding weight i */
static inline PI_HOST_DEVICE pi_dw_scale pi_dw_kquant_scale(uint32_t type, const uint8_t *b, int i) {
    const int g = i / 16;
    pi_dw_scale r = { 0.0f, 0.0f };
    switch (type) {
    case PI_TYPE_Q2_K: {
        const uint8_t sc = PI_DW_FIELD(b, q2_K, scales)[g];
        r.ds = pi_dw_f16(PI_DW_FIELD(b, q2_K, d)) * (float)(sc & 15);
        r.dm = pi_dw_f16(PI_DW_FIELD(b, q2_K, dmin)) * (float)(sc >> 4);
        break;
    }
    case PI_TYPE_Q3_K: {
        const uint8_t *sc = PI_DW_FIELD(b, q3_K, scales);
        const int scale = (((sc[g % 8] >> (4 * (g / 8))) & 15) | (((sc[8 + g % 4] >> (2 * (g / 4))) & 3) << 4)) - 32;
        r.ds = pi_dw_f16(PI_DW_FIELD(b, q3_K, d)) * (float)scale;
        break;
    }
    case PI_TYPE_Q4_K:
    case PI_TYPE_Q5_K: { /* sub-block l = i / 32: 6-bit scale and min, laid out alike in both */
        static_assert(offsetof(block_q4_K, scales) == offsetof(block_q5_K, scales), "Q4_K and Q5_K scales");
        static_assert(offsetof(block_q4_K, dmin) == offsetof(block_q5_K, dmin), "Q4_K and Q5_K dmin");
        const int l = i / 32;
        const uint8_t *s = PI_DW_FIELD(b, q4_K, scales);
        const int sc = l < 4 ? s[l] & 63 : (s[l + 4] & 15) | ((s[l - 4] >> 2) & 0x30);
        const int m = l < 4 ? s[l + 4] & 63 : (s[l + 4] >> 4) | ((s[l] >> 2) & 0x30);
        r.ds = pi_dw_f16(PI_DW_FIELD(b, q4_K, d)) * (float)sc;
        r.dm = pi_dw_f16(PI_DW_FIELD(b, q4_K, dmin)) * (float)m;
        break;
    }
    case PI_TYPE_Q6_K:
        r.ds = pi_dw_f16(PI_DW_FIELD(b, q6_K, d)) * (float)(int8_t)PI_DW_FIELD(b, q6_K, scales)[g];
        break;
    default: PI_BAD_TYPE();
    }
    return r;
}

/* weight i's quant, less the format's offset (Q3_K's 4, Q6_K's 32) */
static inline PI_HOST_DEVICE int pi_dw_kquant_q(uint32_t type, const uint8_t *b, int i) {
    const int j = i % 32, l = i / 32;
    switch (type) {
    case PI_TYPE_Q2_K: return pi_dw_crumb(PI_DW_FIELD(b, q2_K, qs), i);
    case PI_TYPE_Q3_K:
        return (pi_dw_crumb(PI_DW_FIELD(b, q3_K, qs), i) | ((PI_DW_FIELD(b, q3_K, hmask)[j] >> l) & 1) << 2) - 4;
    case PI_TYPE_Q4_K: return (PI_DW_FIELD(b, q4_K, qs)[(l / 2) * 32 + j] >> (4 * (l % 2))) & 15;
    case PI_TYPE_Q5_K:
        return ((PI_DW_FIELD(b, q5_K, qs)[(l / 2) * 32 + j] >> (4 * (l % 2))) & 15) |
               ((PI_DW_FIELD(b, q5_K, qh)[j] >> l) & 1) << 4;
    case PI_TYPE_Q6_K: { /* i = 128h + 32 part + j */
        const int h = i / 128, part = i % 128 / 32;
        const int low = (PI_DW_FIELD(b, q6_K, ql)[h * 64 + (part % 2) * 32 + j] >> (4 * (part / 2))) & 15;
        return (low | ((PI_DW_FIELD(b, q6_K, qh)[h * 32 + j] >> (2 * part)) & 3) << 4) - 32;
    }
    default: PI_BAD_TYPE();
    }
}

static inline PI_HOST_DEVICE float pi_dw_kquant(uint32_t type, const uint8_t *b, int i) {
    const pi_dw_scale s = pi_dw_kquant_scale(type, b, i);
    return s.ds * (float)pi_dw_kquant_q(type, b, i) - s.dm;
}

/* The types the device kernels decode: every type we run (quants.h's list). */
#define PI_DW_CASE_(T, ...) case PI_TYPE_##T:
static inline PI_HOST_DEVICE int pi_dw_reads(uint32_t type) {
    switch (type) {
    PI_TYPES(PI_DW_CASE_, ~) return 1;
    default: return 0;
    }
}

static inline PI_HOST_DEVICE int pi_dw_is_float(uint32_t type) {
    return type == PI_TYPE_F32 || type == PI_TYPE_F16 || type == PI_TYPE_BF16;
}

/* weight i of a row */
static inline PI_HOST_DEVICE float pi_dw_row(uint32_t type, const uint8_t *row, int64_t i) {
    switch (type) {
    case PI_TYPE_F32: return pi_dw_f32(row + 4 * i);
    case PI_TYPE_F16: return pi_dw_f16(row + 2 * i);
    case PI_TYPE_BF16: { /* the top half of an f32 */
        union { uint32_t u; float f; } v = { (uint32_t)(row[2 * i] | row[2 * i + 1] << 8) << 16 };
        return v.f;
    }
    default: /* a block format, which the decoders check */
        if (pi_type_is_kquant(type))
            return pi_dw_kquant(type, row + (size_t)(i / 256) * pi_type_block_bytes(type), (int)(i % 256));
        return pi_dw_block(type, row + (size_t)(i / 32) * pi_type_block_bytes(type), (int)(i % 32));
    }
}

/* weights [32u, 32u + 32) of a row of n into w, each as pi_dw_row computes it, the scales
 * decoded once per unit (a 32-weight block, or a sub-block of a K-quant super-block); past the
 * row's end (float rows need not be whole units) 0 */
static inline PI_HOST_DEVICE void pi_dw_unit(uint32_t type, const uint8_t *row, int64_t u, int64_t n, float w[32]) {
    if (pi_dw_is_float(type)) {
        for (int j = 0; j < 32; j++) w[j] = 32 * u + j < n ? pi_dw_row(type, row, 32 * u + j) : 0.0f;
    } else if (pi_type_is_kquant(type)) {
        const uint8_t *b = row + (size_t)(u / 8) * pi_type_block_bytes(type);
        const int i0 = (int)(u % 8) * 32;
        pi_dw_scale s[2] = { pi_dw_kquant_scale(type, b, i0), pi_dw_kquant_scale(type, b, i0 + 16) };
        for (int j = 0; j < 32; j++) w[j] = s[j / 16].ds * (float)pi_dw_kquant_q(type, b, i0 + j) - s[j / 16].dm;
    } else {
        const uint8_t *b = row + (size_t)u * pi_type_block_bytes(type);
        const float d = pi_dw_f16(b), m = pi_dw_block_offset(type, b);
        for (int j = 0; j < 32; j++) w[j] = pi_dw_block_weight(type, b, d, m, j);
    }
}

#endif
