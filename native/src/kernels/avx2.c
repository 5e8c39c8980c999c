/* avx2.c - AVX2 + FMA + F16C kernels, for x86 CPUs without AVX-512; compiled for that set
 * alone and installed only when the CPU has it.
 *
 * Block formats work one 32-weight block (one ymm) at a time. The weights are unsigned bytes
 * (Q4_0 stores q + 8, Q5_0 q + 16; the offset comes back in integers by starting each lane at
 * -offset * sum(x)), so vpmaddubsw can multiply them with the signed activation bytes; Q8_0
 * weights are signed and use the sign trick instead, |w| * (x * sign(w)). vpmaddwd with ones
 * widens the pair sums to dwords, which are scaled by d_w * d_x into a float accumulator.
 *
 * With 16 ymm registers a tile is 2 rows x 2 tokens for block formats and 4 x 2 for float
 * weights, which need 8 accumulators to keep both FMA pipes busy. */
#include "simd.h"

enum { MAX_R = 4, MAX_T = 2 }; /* the largest tile */

INLINE int tile_rows(int type) { return is_float(type) ? 4 : 2; }
INLINE int tile_tokens(int type) { return 2; }

/* What the format adds to make its weights unsigned (Q8_0 stays signed here). */
INLINE int weight_offset(int type) { return type == PI_TYPE_Q4_0 ? 8 : type == PI_TYPE_Q5_0 ? 16 : 0; }

/* ---- weight blocks ---- */

/* One weight block: 32 weights (unsigned, or signed for Q8_0) and [d, m, 0, 0] (m = 0 for the
 * formats without a minimum). */
typedef struct {
    __m256i q;
    __m128 dm;
} wblock;

/* 16 bytes of nibbles -> 32 bytes [lo, hi]: weights 0-15 sit in the low nibbles and 16-31 in
 * the high ones, which is the order of the activation bytes. */
INLINE __m256i unpack_nibbles(const uint8_t *qs) {
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0f));
}

/* The 5-bit formats: bit j of qh is bit 4 of weight j. Byte j picks byte j / 8 of the word,
 * keeps its bit j % 8, and becomes 16 where that bit is set. */
INLINE __m256i add_high_bits(__m256i q, const uint8_t *qh) {
    const __m256i pick = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i h = _mm256_shuffle_epi8(_mm256_set1_epi32((int)load_u32(qh)), pick);
    h = _mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit);
    return _mm256_or_si256(q, _mm256_and_si256(h, _mm256_set1_epi8(16)));
}

/* dm: the block's fp16 d in the low half and m (or 0) in the high half. */
INLINE __m128 scales(uint32_t dm) { return _mm_cvtph_ps(_mm_cvtsi32_si128((int)dm)); }

INLINE wblock load_wblock(int type, const uint8_t *b) {
    wblock w;
    switch (type) {
    case PI_TYPE_Q4_0:
        w.q = unpack_nibbles(b + offsetof(block_q4_0, qs));
        w.dm = scales(load_u16(b));
        break;
    case PI_TYPE_Q4_1:
        w.q = unpack_nibbles(b + offsetof(block_q4_1, qs));
        w.dm = scales(load_u32(b));
        break;
    case PI_TYPE_Q5_0:
        w.q = add_high_bits(unpack_nibbles(b + offsetof(block_q5_0, qs)), b + offsetof(block_q5_0, qh));
        w.dm = scales(load_u16(b));
        break;
    case PI_TYPE_Q5_1:
        w.q = add_high_bits(unpack_nibbles(b + offsetof(block_q5_1, qs)), b + offsetof(block_q5_1, qh));
        w.dm = scales(load_u32(b));
        break;
    default: /* PI_TYPE_Q8_0 */
        w.q = _mm256_loadu_si256((const __m256i *)(b + offsetof(block_q8_0, qs)));
        w.dm = scales(load_u16(b));
        break;
    }
    return w;
}

/* ---- activation blocks ---- */

/* One activation block: 32 signed bytes, [d, s, 0, 0], and the integer start of each dword
 * lane's dot product, -offset * sum(x over the lane). */
typedef struct {
    __m256i q, base;
    __m128 ds;
} xblock;

/* Pairs of int16 -> their dword sums. */
INLINE __m256i widen_pairs(__m256i v) { return _mm256_madd_epi16(v, _mm256_set1_epi16(1)); }

INLINE xblock load_xblock(const block_q8x *x, int offset) {
    xblock p;
    p.q = _mm256_loadu_si256((const __m256i *)x->qs);
    p.ds = _mm_loadl_pi(_mm_setzero_ps(), (const __m64 *)&x->d);
    p.base = _mm256_setzero_si256();
    if (offset)
        p.base = _mm256_sub_epi32(p.base, widen_pairs(_mm256_maddubs_epi16(_mm256_set1_epi8((char)offset), p.q)));
    return p;
}

/* ---- block matmul ---- */

/* acc += the block's dot product, spread over the 8 lanes; accm lane 1 takes m * s. The Q8_0
 * sign trick is exact because activations never hold -128. */
INLINE void block_dot(int type, const wblock *w, const xblock *x, __m256 *acc, __m128 *accm) {
    const __m256i pairs = type == PI_TYPE_Q8_0
                              ? _mm256_maddubs_epi16(_mm256_abs_epi8(w->q), _mm256_sign_epi8(x->q, w->q))
                              : _mm256_maddubs_epi16(w->q, x->q);
    const __m256i dot = _mm256_add_epi32(widen_pairs(pairs), x->base);
    const __m128 ps = _mm_mul_ps(w->dm, x->ds); /* [d * dx, m * s, 0, 0] */
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_broadcastss_ps(ps), *acc);
    if (has_min(type)) *accm = _mm_add_ps(*accm, ps);
}

/* Y[t * y_stride + r] for R rows x T tokens from token t0 on, touching the rows `ahead` so they
 * arrive from DRAM while this tile computes. */
INLINE void tile_blocks(int type, int R, int T, const uint8_t *const *rows, const uintptr_t *ahead, pi_act x,
                        int t0, float *Y, int y_stride) {
    const size_t bb = block_bytes(type);
    const int nb = x.n / QK;
    const block_q8x *xs[MAX_T];
    __m256 acc[MAX_R][MAX_T];
    __m128 accm[MAX_R][MAX_T];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) xs[t] = x.q + (size_t)(t0 + t) * nb;
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            acc[r][t] = _mm256_setzero_ps();
            accm[r][t] = _mm_setzero_ps();
        }

    for (int b = 0; b < nb; b++) {
        xblock xb[MAX_T];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) xb[t] = load_xblock(xs[t] + b, weight_offset(type));
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            _mm_prefetch((const char *)(ahead[r] + b * bb), _MM_HINT_T1);
            const wblock w = load_wblock(type, rows[r] + b * bb);
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) block_dot(type, &w, &xb[t], &acc[r][t], &accm[r][t]);
        }
    }

#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            float y = hsum8(acc[r][t]);
            if (has_min(type)) y += _mm_cvtss_f32(_mm_movehdup_ps(accm[r][t]));
            Y[(size_t)t * y_stride + r] = y;
        }
}

/* ---- float matmul ---- */

/* 8 weights from i on, as floats. */
INLINE __m256 load_float8(int type, const void *row, int i) {
    switch (type) {
    case PI_TYPE_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const pi_fp16 *)row + i)));
    case PI_TYPE_BF16: { /* bf16 is the top half of an f32 */
        const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const pi_bf16 *)row + i)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
    }
    default: return _mm256_loadu_ps((const float *)row + i); /* PI_TYPE_F32 */
    }
}

/* The last n % 8 weights of each row go to the reference. */
INLINE void tile_floats(int type, int R, int T, const uint8_t *const *rows, const uintptr_t *ahead, pi_act x,
                        int t0, float *Y, int y_stride) {
    const float *xs[MAX_T];
    __m256 acc[MAX_R][MAX_T];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) xs[t] = x.f + (size_t)(t0 + t) * x.n;
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    const int n8 = x.n & ~7;
    for (int i = 0; i < n8; i += 8) {
        __m256 xv[MAX_T];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) xv[t] = _mm256_loadu_ps(xs[t] + i);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            _mm_prefetch((const char *)(ahead[r] + (size_t)i * float_bytes(type)), _MM_HINT_T1);
            const __m256 w = load_float8(type, rows[r], i);
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) acc[r][t] = _mm256_fmadd_ps(w, xv[t], acc[r][t]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            Y[(size_t)t * y_stride + r] = hsum8(acc[r][t]) + pi_ref_dot_floats(type, rows[r], xs[t], n8, x.n);
}

/* ---- the tile walk ---- */

INLINE void tile(int type, int R, int T, const uint8_t *const *rows, const uintptr_t *ahead, pi_act x,
                 int t0, float *Y, int y_stride) {
    if (is_float(type)) tile_floats(type, R, T, rows, ahead, x, t0, Y, y_stride);
    else tile_blocks(type, R, T, rows, ahead, x, t0, Y, y_stride);
}

INLINE void matmul(int type, const void *W, size_t row_bytes, const int32_t *idx, int r0, int nr, pi_act x,
                   int nt, float *Y, int y_stride) {
    walk_tiles(type, tile_rows(type), tile_tokens(type), W, row_bytes, idx, r0, nr, x, nt, Y, y_stride);
}

/* ---- activations ---- */

/* x * id rounded to nearest even (the MXCSR default), clamped as the reference does. */
INLINE __m256i round_scaled(__m256 x, __m256 id) {
    const __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(x, id), _mm256_set1_ps(-127.0f)),
                                   _mm256_set1_ps(127.0f));
    return _mm256_cvtps_epi32(v);
}

static void quantize_act(const float *x, block_q8x *y, int n) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int b = 0; b < n / QK; b++, x += QK, y++) {
        __m256 v[4], amax = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + 8 * k);
            amax = _mm256_max_ps(_mm256_and_ps(v[k], abs_mask), amax);
        }
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        const float d = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m))) / 127.0f;
        const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
        __m256i q[4];
        for (int k = 0; k < 4; k++) q[k] = round_scaled(v[k], id);
        /* The packs interleave 128-bit lanes; the permute puts the 8 dword groups back in order. */
        const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *)y->qs, _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
        const __m256i sum8 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum8), _mm256_extracti128_si256(sum8, 1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
        y->d = d;
        y->s = d * (float)_mm_cvtsi128_si32(s);
    }
}

/* ---- the table ---- */

static void matmul_f32(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_F32, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_f16(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_F16, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_bf16(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_BF16, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_q4_0(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_Q4_0, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_q4_1(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_Q4_1, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_q5_0(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_Q5_0, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_q5_1(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_Q5_1, W, rb, idx, r0, nr, x, nt, Y, ys); }
static void matmul_q8_0(const void *W, size_t rb, const int32_t *idx, int r0, int nr, pi_act x, int nt, float *Y, int ys) { matmul(PI_TYPE_Q8_0, W, rb, idx, r0, nr, x, nt, Y, ys); }

void pi_kernels_avx2(pi_kernels *k) {
    k->name = "avx2";
    k->quantize_act = quantize_act;
    k->matmul[PI_TYPE_F32] = matmul_f32;
    k->matmul[PI_TYPE_F16] = matmul_f16;
    k->matmul[PI_TYPE_BF16] = matmul_bf16;
    k->matmul[PI_TYPE_Q4_0] = matmul_q4_0;
    k->matmul[PI_TYPE_Q4_1] = matmul_q4_1;
    k->matmul[PI_TYPE_Q5_0] = matmul_q5_0;
    k->matmul[PI_TYPE_Q5_1] = matmul_q5_1;
    k->matmul[PI_TYPE_Q8_0] = matmul_q8_0;
}
