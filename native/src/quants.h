/* quants.h - ggml's block layouts, shared by the C kernels and (later) CUDA.
 * The sizes are the on-disk sizes of GGUF tensors; the static asserts keep them honest. */
#ifndef PI_QUANTS_H
#define PI_QUANTS_H
#include <assert.h>
#include <stddef.h>
#include <stdint.h>

/* GGUF tensor type ids (ggml_type numbering, as stored in the file). */
typedef enum {
    PI_TYPE_F32  = 0,
    PI_TYPE_F16  = 1,
    PI_TYPE_Q4_0 = 2,
    PI_TYPE_Q4_1 = 3,
    PI_TYPE_Q5_0 = 6,
    PI_TYPE_Q5_1 = 7,
    PI_TYPE_Q8_0 = 8,
    PI_TYPE_Q2_K = 10, /* K-quants: 256-weight super-blocks (kernels/kquants.h) */
    PI_TYPE_Q3_K = 11,
    PI_TYPE_Q4_K = 12,
    PI_TYPE_Q5_K = 13,
    PI_TYPE_Q6_K = 14,
    PI_TYPE_BF16 = 30,
    PI_TYPE_COUNT = 40 /* size of per-type tables; ids above are unsupported */
} pi_type;

#define QK 32 /* weights per block for the 32-wide formats */

typedef uint16_t pi_fp16;
typedef uint16_t pi_bf16;

typedef struct { pi_fp16 d; uint8_t qs[QK / 2]; } block_q4_0;                 /* w = d * (q - 8) */
typedef struct { pi_fp16 d, m; uint8_t qs[QK / 2]; } block_q4_1;              /* w = d * q + m */
typedef struct { pi_fp16 d; uint8_t qh[4]; uint8_t qs[QK / 2]; } block_q5_0;  /* w = d * (q - 16) */
typedef struct { pi_fp16 d, m; uint8_t qh[4]; uint8_t qs[QK / 2]; } block_q5_1; /* w = d * q + m */
typedef struct { pi_fp16 d; int8_t qs[QK]; } block_q8_0;                      /* w = d * q */

static_assert(sizeof(block_q4_0) == 18, "q4_0 block");
static_assert(sizeof(block_q4_1) == 20, "q4_1 block");
static_assert(sizeof(block_q5_0) == 22, "q5_0 block");
static_assert(sizeof(block_q5_1) == 24, "q5_1 block");
static_assert(sizeof(block_q8_0) == 34, "q8_0 block");

/* Bytes of one 32-weight block of a block format (Q8_0 for the rest); host and CUDA code share it. */
#ifdef __CUDACC__
#define PI_HOST_DEVICE __host__ __device__
#else
#define PI_HOST_DEVICE
#endif
static inline PI_HOST_DEVICE size_t pi_block_bytes(int type) {
    switch (type) {
    case PI_TYPE_Q4_0: return sizeof(block_q4_0);
    case PI_TYPE_Q4_1: return sizeof(block_q4_1);
    case PI_TYPE_Q5_0: return sizeof(block_q5_0);
    case PI_TYPE_Q5_1: return sizeof(block_q5_1);
    default: return sizeof(block_q8_0);
    }
}

/* The K-quants' 256-weight super-block formats; host and CUDA code share it. */
static inline PI_HOST_DEVICE int pi_type_is_kquant(uint32_t type) {
    return type >= PI_TYPE_Q2_K && type <= PI_TYPE_Q6_K;
}

/* Activation block: every quantized weight type is dotted against this one format.
 * s = d * sum(qs) lets the "+ m" of Q4_1/Q5_1 and the "- 8"/"- 16" offsets cost one multiply a block. */
typedef struct { float d; float s; int8_t qs[QK]; } block_q8x;
static_assert(sizeof(block_q8x) == 40, "q8x block");

/* The K-quants' activation block, llama.cpp's Q8_K: 256 values with one scale (x = d * qs) and
 * the sum of each 16 qs, which the K-quants' per-group minimums and offsets are multiplied by. */
#define QK_K 256
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8k;
static_assert(sizeof(block_q8k) == 292, "q8k block");

/* Per-type facts: weights per block and bytes per block; 0 means unsupported. */
typedef struct { const char *name; int block_size; int type_size; } pi_type_info;
const pi_type_info *pi_type_get(uint32_t type); /* NULL for ids we do not support */
const char *pi_type_name(uint32_t type);         /* "type 13" style text for unknown ids */

static inline float pi_fp16_to_f32(pi_fp16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: renormalize */
            exp = 127 - 15 + 1;
            while (!(mant & 0x400)) { mant <<= 1; exp--; }
            bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000 | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    union { uint32_t u; float f; } v = { bits };
    return v.f;
}

/* Round to nearest even, as F16C's vcvtps2ph does; overflow goes to inf, NaN stays NaN. */
static inline pi_fp16 pi_f32_to_fp16(float f) {
    union { float f; uint32_t u; } v = { f };
    uint32_t x = v.u, sign = (x >> 16) & 0x8000, abs = x & 0x7fffffff;
    if (abs >= 0x7f800000) return (pi_fp16)(sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0));
    if (abs >= 0x477ff000) return (pi_fp16)(sign | 0x7c00); /* rounds past 65504 */
    if (abs < 0x38800000) { /* subnormal or zero in half precision */
        union { uint32_t u; float f; } a = { abs }, magic = { 0x3f000000u }; /* 0.5: aligns the LSB at 2^-24 */
        float r = a.f + magic.f;
        union { float f; uint32_t u; } rr = { r };
        return (pi_fp16)(sign | (rr.u - magic.u));
    }
    uint32_t mant_odd = (abs >> 13) & 1;
    abs += 0xc8000fff + mant_odd; /* rebias exponent (-112 << 23) and round to nearest even */
    return (pi_fp16)(sign | (abs >> 13));
}

static inline float pi_bf16_to_f32(pi_bf16 h) {
    union { uint32_t u; float f; } v = { (uint32_t)h << 16 };
    return v.f;
}

#endif
