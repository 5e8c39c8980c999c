/* quants.h - the types we run and ggml's block layouts, shared by the C kernels and CUDA.
 * The sizes are the on-disk sizes of GGUF tensors; the static asserts keep them honest. */
#ifndef PI_QUANTS_H
#define PI_QUANTS_H
#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#define QK 32    /* weights per block for the 32-wide formats */
#define QK_K 256 /* weights per super-block for the K-quants */

/* The types we run: the one list that the type ids, types.c's facts, every kernel tier's table
 * and the CUDA side's decoding are generated from. X(T, id, name, block size, block bytes, ...)
 * with T the suffix of PI_TYPE_T and id its ggml_type number, as GGUF files store it; the
 * arguments after the list's own pass through to X, for generators that need their own names.
 * Adding a type: its line here and its block struct below; for a K-quant, its cases in
 * kernels/kquants.h (scalar and AVX2) and cuda/weights.h; for another format, its cases in
 * kernels/ref.c (the scalar reference), kernels/simd.h (the SIMD tiers) and cuda/weights.h. */
#define PI_TYPES(X, ...)                                            \
    X(F32, 0, "f32", 1, sizeof(float), __VA_ARGS__)                 \
    X(F16, 1, "f16", 1, sizeof(pi_fp16), __VA_ARGS__)               \
    X(BF16, 30, "bf16", 1, sizeof(pi_bf16), __VA_ARGS__)            \
    X(Q4_0, 2, "q4_0", QK, sizeof(block_q4_0), __VA_ARGS__)         \
    X(Q4_1, 3, "q4_1", QK, sizeof(block_q4_1), __VA_ARGS__)         \
    X(Q5_0, 6, "q5_0", QK, sizeof(block_q5_0), __VA_ARGS__)         \
    X(Q5_1, 7, "q5_1", QK, sizeof(block_q5_1), __VA_ARGS__)         \
    X(Q8_0, 8, "q8_0", QK, sizeof(block_q8_0), __VA_ARGS__)         \
    X(Q2_K, 10, "q2_K", QK_K, sizeof(block_q2_K), __VA_ARGS__)      \
    X(Q3_K, 11, "q3_K", QK_K, sizeof(block_q3_K), __VA_ARGS__)      \
    X(Q4_K, 12, "q4_K", QK_K, sizeof(block_q4_K), __VA_ARGS__)      \
    X(Q5_K, 13, "q5_K", QK_K, sizeof(block_q5_K), __VA_ARGS__)      \
    X(Q6_K, 14, "q6_K", QK_K, sizeof(block_q6_K), __VA_ARGS__)

#define PI_TYPE_ID_(T, id, ...) PI_TYPE_##T = id,
typedef enum {
    PI_TYPES(PI_TYPE_ID_, ~)
    PI_TYPE_COUNT = 40 /* size of per-type tables: ggml's ids; those above are unsupported */
} pi_type;

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

/* The K-quants' 256-weight super-blocks, as ggml lays them out; kernels/kquants.h says how the
 * fields combine. d scales the sub-block scales and dmin their minimums. */
typedef struct {
    uint8_t scales[QK_K / 16]; /* 16 groups of 16: scale | min << 4 */
    uint8_t qs[QK_K / 4];      /* 2-bit quants */
    pi_fp16 d, dmin;
} block_q2_K;
typedef struct {
    uint8_t hmask[QK_K / 8]; /* each quant's high bit */
    uint8_t qs[QK_K / 4];    /* its low 2 bits */
    uint8_t scales[12];      /* 16 scales of 6 bits, offset by 32 */
    pi_fp16 d;
} block_q3_K;
typedef struct {
    pi_fp16 d, dmin;
    uint8_t scales[12]; /* 8 sub-blocks of 32: 6-bit scales and mins */
    uint8_t qs[QK_K / 2];
} block_q4_K;
typedef struct {
    pi_fp16 d, dmin;
    uint8_t scales[12]; /* as Q4_K's */
    uint8_t qh[QK_K / 8]; /* bit 4 of each quant */
    uint8_t qs[QK_K / 2];
} block_q5_K;
typedef struct {
    uint8_t ql[QK_K / 2];     /* the low 4 bits */
    uint8_t qh[QK_K / 4];     /* the high 2 bits */
    int8_t scales[QK_K / 16]; /* 16 groups of 16 */
    pi_fp16 d;
} block_q6_K;

static_assert(sizeof(block_q2_K) == 84, "q2_K block");
static_assert(sizeof(block_q3_K) == 110, "q3_K block");
static_assert(sizeof(block_q4_K) == 144, "q4_K block");
static_assert(sizeof(block_q5_K) == 176, "q5_K block");
static_assert(sizeof(block_q6_K) == 210, "q6_K block");

/* Room for one block of any type we run. */
#define PI_BLOCK_ROOM_(T, id, name, bs, bb, ...) uint8_t T[bb];
typedef union { PI_TYPES(PI_BLOCK_ROOM_, ~) } pi_any_block;

/* Host and CUDA code share the per-type facts below. */
#ifdef __CUDACC__
#define PI_HOST_DEVICE __host__ __device__
#else
#define PI_HOST_DEVICE
#endif

/* What a switch over the types we run does with any other id: its callers refuse those first
 * (pi_type_get), so getting there is a bug, and it stops rather than read another format. */
#ifdef __CUDA_ARCH__
#define PI_BAD_TYPE() __trap()
#else
#define PI_BAD_TYPE() __builtin_trap()
#endif

/* Weights per block of a type we run, 0 for any other id. */
#define PI_TYPE_BLOCK_SIZE_(T, id, name, bs, bb, ...) case PI_TYPE_##T: return bs;
static inline PI_HOST_DEVICE int pi_type_block_size(uint32_t type) {
    switch (type) {
    PI_TYPES(PI_TYPE_BLOCK_SIZE_, ~)
    default: return 0;
    }
}

/* Bytes per block of a type we run, 0 for any other id. */
#define PI_TYPE_BLOCK_BYTES_(T, id, name, bs, bb, ...) case PI_TYPE_##T: return bb;
static inline PI_HOST_DEVICE size_t pi_type_block_bytes(uint32_t type) {
    switch (type) {
    PI_TYPES(PI_TYPE_BLOCK_BYTES_, ~)
    default: return 0;
    }
}

/* The K-quants' 256-weight super-block formats. */
static inline PI_HOST_DEVICE int pi_type_is_kquant(uint32_t type) { return pi_type_block_size(type) == QK_K; }

/* Activation block: every quantized weight type is dotted against this one format.
 * s = d * sum(qs) lets the "+ m" of Q4_1/Q5_1 cost one multiply a block; sum = sum(qs) lets the
 * grouped Q4_0 kernel take the stored offset ("- 8") off in integers, exactly, where a float
 * offset term would cancel against the dot and lose its low bits. */
typedef struct { float d; float s; int8_t qs[QK]; int32_t sum; } block_q8x;
static_assert(sizeof(block_q8x) == 44, "q8x block");

/* The K-quants' activation block, llama.cpp's Q8_K: 256 values with one scale (x = d * qs) and
 * the sum of each 16 qs, which the K-quants' per-group minimums and offsets are multiplied by. */
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8k;
static_assert(sizeof(block_q8k) == 292, "q8k block");

/* Per-type facts: weights per block and bytes per block; 0 means unsupported. */
typedef struct { const char *name; int block_size; int type_size; } pi_type_info;
const pi_type_info *pi_type_get(uint32_t type); /* NULL for ids we do not support */
const char *pi_type_name(uint32_t type);         /* "type 13" style text for unknown ids */

static inline PI_HOST_DEVICE float pi_fp16_to_f32(pi_fp16 h) {
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
static inline PI_HOST_DEVICE pi_fp16 pi_f32_to_fp16(float f) {
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

/* An activation block's scales as llama.cpp keeps them in its Q8_0 / Q8_1 blocks: d (the quants
 * were made with 1 / d unrounded) and s = d * sum, each rounded to f16. Keeping them in f32 moved
 * every logit off llama.cpp's by more than llama.cpp's own batched / one-token floor. */
static inline void pi_act_block_scales(block_q8x *y, float d, int32_t sum) {
    y->d = pi_fp16_to_f32(pi_f32_to_fp16(d));
    y->s = pi_fp16_to_f32(pi_f32_to_fp16(d * (float)sum));
    y->sum = sum;
}

static inline PI_HOST_DEVICE float pi_bf16_to_f32(pi_bf16 h) {
    union { uint32_t u; float f; } v = { (uint32_t)h << 16 };
    return v.f;
}

/* f to bf16, rounded to nearest even as ggml's GGML_FP32_TO_BF16 (NaN kept a quiet NaN) */
static inline PI_HOST_DEVICE pi_bf16 pi_f32_to_bf16(float f) {
    union { float f; uint32_t u; } v = { f };
    if ((v.u & 0x7fffffff) > 0x7f800000) return (pi_bf16)((v.u >> 16) | 64);
    return (pi_bf16)((v.u + (0x7fff + ((v.u >> 16) & 1))) >> 16);
}

/* An activation value as llama.cpp dots it with a float weight of `type`: a float weight's
 * vec_dot_type is the weight's own type, so x is rounded to f16 for F16 weights, to bf16 for BF16. */
static inline PI_HOST_DEVICE float pi_act_as_weight_type(int type, float x) {
    return type == PI_TYPE_F16 ? pi_fp16_to_f32(pi_f32_to_fp16(x)) : type == PI_TYPE_BF16 ? pi_bf16_to_f32(pi_f32_to_bf16(x)) : x;
}

/* Weights in groups of PI_GROUP_ROWS rows, block by block (kernels/row_groups.c has the layout): the
 * types that have it (the 32-weight block formats, Q4_K, Q5_K, Q6_K), a whole weight of n_rows (a multiple of the group) grouped in place with room for
 * one group in scratch, block b of one row as the file has it, and one group's rows put back in
 * row order (the devices' uploads). The file's bits, moved: a group of rows takes the bytes of
 * its rows. */
enum { PI_GROUP_ROWS = 16 };
/* The types with the grouped layout, X(T, ...) for each, as PI_TYPES passes its extra arguments. */
#define PI_GROUPED_TYPES(X, ...)                                                                                      \
    X(Q4_0, __VA_ARGS__) X(Q4_K, __VA_ARGS__) X(Q5_K, __VA_ARGS__) X(Q6_K, __VA_ARGS__)
#ifdef __cplusplus
extern "C" {
#endif
int pi_groups_hold(uint32_t type);
void pi_group_rows(uint32_t type, uint8_t *W, size_t row_bytes, int64_t n_rows, uint8_t *scratch);
void pi_group_row_block(uint32_t type, const uint8_t *W, size_t row_bytes, int64_t row, size_t b, uint8_t *block);
void pi_group_unpack_rows(uint32_t type, const uint8_t *group, size_t row_bytes, uint8_t *rows);
#ifdef __cplusplus
}
#endif

#endif
