/* weights.h - one weight of a row, in any type the CUDA kernels read, decoded on its own: plain
 * C that nvcc compiles for the device (decode.cuh) and the host compiles for the tests
 * (kernels/api.c's pi_kernel_device_dequant), so the device's decoding is checked against the
 * CPU's on machines without a GPU. Each weight is computed as the CPU's dequantization does,
 * the same float operations in the same order. */
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

/* weight j (0..31) of a 32-weight block: w = d * q + m, the offset folded into q */
static inline PI_HOST_DEVICE float pi_dw_block(uint32_t type, const uint8_t *b, int j) {
    const int lo = j < 16, k = j & 15;
    switch (type) {
    case PI_TYPE_Q4_0: return pi_dw_f16(b) * (float)((lo ? b[2 + k] & 15 : b[2 + k] >> 4) - 8);
    case PI_TYPE_Q4_1: return pi_dw_f16(b) * (float)(lo ? b[4 + k] & 15 : b[4 + k] >> 4) + pi_dw_f16(b + 2);
    case PI_TYPE_Q5_0: {
        const int q = (lo ? b[6 + k] & 15 : b[6 + k] >> 4) | (int)((pi_dw_u32(b + 2) >> j) & 1) << 4;
        return pi_dw_f16(b) * (float)(q - 16);
    }
    case PI_TYPE_Q5_1: {
        const int q = (lo ? b[8 + k] & 15 : b[8 + k] >> 4) | (int)((pi_dw_u32(b + 4) >> j) & 1) << 4;
        return pi_dw_f16(b) * (float)q + pi_dw_f16(b + 2);
    }
    default: return pi_dw_f16(b) * (float)(int8_t)b[2 + j]; /* PI_TYPE_Q8_0 */
    }
}

/* the 2-bit field of weight i in Q2_K / Q3_K's qs: bits 2s.. of byte 32h + j, i = 128h + 32s + j */
static inline PI_HOST_DEVICE int pi_dw_crumb(const uint8_t *qs, int i) { return (qs[(i / 128) * 32 + i % 32] >> (2 * (i % 128 / 32))) & 3; }

/* weight i (0..255) of a K-quant super-block, as kernels/kquants.h lays the formats out:
 * d * scale * (q - offset) - dmin * min */
static inline PI_HOST_DEVICE float pi_dw_kquant(uint32_t type, const uint8_t *b, int i) {
    const int g = i / 16, j = i % 32;
    switch (type) {
    case PI_TYPE_Q2_K:
        return pi_dw_f16(b + 80) * (float)(b[g] & 15) * (float)pi_dw_crumb(b + 16, i) - pi_dw_f16(b + 82) * (float)(b[g] >> 4);
    case PI_TYPE_Q3_K: {
        const uint8_t *sc = b + 96;
        const int scale = (((sc[g % 8] >> (4 * (g / 8))) & 15) | (((sc[8 + g % 4] >> (2 * (g / 4))) & 3) << 4)) - 32;
        const int q = pi_dw_crumb(b + 32, i) | ((b[j] >> (i / 32)) & 1) << 2;
        return pi_dw_f16(b + 108) * (float)scale * (float)(q - 4);
    }
    case PI_TYPE_Q4_K:
    case PI_TYPE_Q5_K: { /* sub-block l = i / 32: 6-bit scale and min in bytes 4..15 */
        const int l = i / 32, five = type == PI_TYPE_Q5_K;
        const uint8_t *s = b + 4, *qs = b + (five ? 48 : 16);
        const int sc = l < 4 ? s[l] & 63 : (s[l + 4] & 15) | ((s[l - 4] >> 2) & 0x30);
        const int m = l < 4 ? s[l + 4] & 63 : (s[l + 4] >> 4) | ((s[l] >> 2) & 0x30);
        const int q = ((qs[(l / 2) * 32 + j] >> (4 * (l % 2))) & 15) | (five ? ((b[16 + j] >> l) & 1) << 4 : 0);
        return pi_dw_f16(b) * (float)sc * (float)q - pi_dw_f16(b + 2) * (float)m;
    }
    default: { /* PI_TYPE_Q6_K: i = 128h + 32 part + j */
        const int h = i / 128, part = i % 128 / 32;
        const int low = (b[h * 64 + (part % 2) * 32 + j] >> (4 * (part / 2))) & 15;
        const int q = low | ((b[128 + h * 32 + j] >> (2 * part)) & 3) << 4;
        return pi_dw_f16(b + 208) * (float)(int8_t)b[192 + g] * (float)(q - 32);
    }
    }
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

static inline PI_HOST_DEVICE int pi_dw_is_kquant(uint32_t type) { return type >= PI_TYPE_Q2_K && type <= PI_TYPE_Q6_K; }

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
        if (pi_dw_is_kquant(type))
            return pi_dw_kquant(type, row + (size_t)(i / 256) * pi_dw_superblock_bytes(type), (int)(i % 256));
        return pi_dw_block(type, row + (size_t)(i / 32) * pi_block_bytes((int)type), (int)(i % 32));
    }
}

#endif
