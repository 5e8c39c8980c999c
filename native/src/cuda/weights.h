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
    case PI_TYPE_Q4_0: return d * (float)(pi_dw_nibble(b + 2, j) - 8);
    case PI_TYPE_Q4_1: return d * (float)pi_dw_nibble(b + 4, j) + m;
    case PI_TYPE_Q5_0: return d * (float)(pi_dw_five(b + 6, pi_dw_u32(b + 2), j) - 16);
    case PI_TYPE_Q5_1: return d * (float)pi_dw_five(b + 8, pi_dw_u32(b + 4), j) + m;
    default: return d * (float)(int8_t)b[2 + j]; /* PI_TYPE_Q8_0 */
    }
}

/* the block's offset m, where its format has one */
static inline PI_HOST_DEVICE float pi_dw_block_offset(uint32_t type, const uint8_t *b) {
    return type == PI_TYPE_Q4_1 || type == PI_TYPE_Q5_1 ? pi_dw_f16(b + 2) : 0.0f;
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
    case PI_TYPE_Q2_K:
        r.ds = pi_dw_f16(b + 80) * (float)(b[g] & 15);
        r.dm = pi_dw_f16(b + 82) * (float)(b[g] >> 4);
        break;
    case PI_TYPE_Q3_K: {
        const uint8_t *sc = b + 96;
        const int scale = (((sc[g % 8] >> (4 * (g / 8))) & 15) | (((sc[8 + g % 4] >> (2 * (g / 4))) & 3) << 4)) - 32;
        r.ds = pi_dw_f16(b + 108) * (float)scale;
        break;
    }
    case PI_TYPE_Q4_K:
    case PI_TYPE_Q5_K: { /* sub-block l = i / 32: 6-bit scale and min in bytes 4..15 */
        const int l = i / 32;
        const uint8_t *s = b + 4;
        const int sc = l < 4 ? s[l] & 63 : (s[l + 4] & 15) | ((s[l - 4] >> 2) & 0x30);
        const int m = l < 4 ? s[l + 4] & 63 : (s[l + 4] >> 4) | ((s[l] >> 2) & 0x30);
        r.ds = pi_dw_f16(b) * (float)sc;
        r.dm = pi_dw_f16(b + 2) * (float)m;
        break;
    }
    default: r.ds = pi_dw_f16(b + 208) * (float)(int8_t)b[192 + g]; /* PI_TYPE_Q6_K */
    }
    return r;
}

/* weight i's quant, less the format's offset (Q3_K's 4, Q6_K's 32) */
static inline PI_HOST_DEVICE int pi_dw_kquant_q(uint32_t type, const uint8_t *b, int i) {
    const int j = i % 32, l = i / 32;
    switch (type) {
    case PI_TYPE_Q2_K: return pi_dw_crumb(b + 16, i);
    case PI_TYPE_Q3_K: return (pi_dw_crumb(b + 32, i) | ((b[j] >> l) & 1) << 2) - 4;
    case PI_TYPE_Q4_K: return (b[16 + (l / 2) * 32 + j] >> (4 * (l % 2))) & 15;
    case PI_TYPE_Q5_K: return ((b[48 + (l / 2) * 32 + j] >> (4 * (l % 2))) & 15) | ((b[16 + j] >> l) & 1) << 4;
    default: { /* PI_TYPE_Q6_K: i = 128h + 32 part + j */
        const int h = i / 128, part = i % 128 / 32;
        const int low = (b[h * 64 + (part % 2) * 32 + j] >> (4 * (part / 2))) & 15;
        return (low | ((b[128 + h * 32 + j] >> (2 * part)) & 3) << 4) - 32;
    }
    }
}

static inline PI_HOST_DEVICE float pi_dw_kquant(uint32_t type, const uint8_t *b, int i) {
    const pi_dw_scale s = pi_dw_kquant_scale(type, b, i);
    return s.ds * (float)pi_dw_kquant_q(type, b, i) - s.dm;
}

/* The types the device kernels decode. */
static inline PI_HOST_DEVICE int pi_dw_reads(uint32_t type) {
    switch (type) {
    case PI_TYPE_F32: case PI_TYPE_F16: case PI_TYPE_BF16: case PI_TYPE_Q4_0: case PI_TYPE_Q4_1: case PI_TYPE_Q5_0:
    case PI_TYPE_Q5_1: case PI_TYPE_Q8_0: case PI_TYPE_Q2_K: case PI_TYPE_Q3_K: case PI_TYPE_Q4_K: case PI_TYPE_Q5_K:
    case PI_TYPE_Q6_K: return 1;
    default: return 0;
    }
}

static inline PI_HOST_DEVICE int pi_dw_is_float(uint32_t type) {
    return type == PI_TYPE_F32 || type == PI_TYPE_F16 || type == PI_TYPE_BF16;
}

static inline PI_HOST_DEVICE size_t pi_dw_superblock_bytes(uint32_t type) {
    switch (type) {
    case PI_TYPE_Q2_K: return 84;
    case PI_TYPE_Q3_K: return 110;
    case PI_TYPE_Q4_K: return 144;
    case PI_TYPE_Q5_K: return 176;
    default: return 210; /* PI_TYPE_Q6_K */
    }
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
    default:
        if (pi_type_is_kquant(type))
            return pi_dw_kquant(type, row + (size_t)(i / 256) * pi_dw_superblock_bytes(type), (int)(i % 256));
        return pi_dw_block(type, row + (size_t)(i / 32) * pi_block_bytes((int)type), (int)(i % 32));
    }
}

/* weights [32u, 32u + 32) of a row of n into w, each as pi_dw_row computes it, the scales
 * decoded once per unit (a 32-weight block, or a sub-block of a K-quant super-block); past the
 * row's end (float rows need not be whole units) 0 */
static inline PI_HOST_DEVICE void pi_dw_unit(uint32_t type, const uint8_t *row, int64_t u, int64_t n, float w[32]) {
    if (pi_dw_is_float(type)) {
        for (int j = 0; j < 32; j++) w[j] = 32 * u + j < n ? pi_dw_row(type, row, 32 * u + j) : 0.0f;
    } else if (pi_type_is_kquant(type)) {
        const uint8_t *b = row + (size_t)(u / 8) * pi_dw_superblock_bytes(type);
        const int i0 = (int)(u % 8) * 32;
        pi_dw_scale s[2] = { pi_dw_kquant_scale(type, b, i0), pi_dw_kquant_scale(type, b, i0 + 16) };
        for (int j = 0; j < 32; j++) w[j] = s[j / 16].ds * (float)pi_dw_kquant_q(type, b, i0 + j) - s[j / 16].dm;
    } else {
        const uint8_t *b = row + (size_t)u * pi_block_bytes((int)type);
        const float d = pi_dw_f16(b), m = pi_dw_block_offset(type, b);
        for (int j = 0; j < 32; j++) w[j] = pi_dw_block_weight(type, b, d, m, j);
    }
}

#endif
