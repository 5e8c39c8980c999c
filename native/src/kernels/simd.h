/* simd.h - what avx2.c and avx512.c share: the per-type facts their kernels branch on (all
 * folded at compile time, the type being a constant wherever these are inlined), small loads,
 * and the tile walk. Each tier defines tile(); walk_tiles() calls it with constant shapes, so
 * every tile shape is compiled as its own unrolled body. Private to native/src/kernels. */
#ifndef PI_KERNELS_SIMD_H
#define PI_KERNELS_SIMD_H
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "ref.h"

#define INLINE static inline __attribute__((always_inline))

enum { MAX_TILE_ROWS = 4 };

INLINE size_t block_bytes(int type) {
    switch (type) {
    case PI_TYPE_Q4_0: return sizeof(block_q4_0);
    case PI_TYPE_Q4_1: return sizeof(block_q4_1);
    case PI_TYPE_Q5_0: return sizeof(block_q5_0);
    case PI_TYPE_Q5_1: return sizeof(block_q5_1);
    default: return sizeof(block_q8_0);
    }
}

INLINE int is_float(int type) { return type == PI_TYPE_F32 || type == PI_TYPE_F16 || type == PI_TYPE_BF16; }

INLINE int float_bytes(int type) { return type == PI_TYPE_F32 ? 4 : 2; }

/* The formats with a per-block minimum m (w = d * q + m) add m * sum(d_x * x) = m * s_x. */
INLINE int has_min(int type) { return type == PI_TYPE_Q4_1 || type == PI_TYPE_Q5_1; }

INLINE uint32_t load_u16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

INLINE uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* Defined by each tier: Y[t * y_stride + r] for R rows x T tokens from token t0 on, touching
 * the addresses `ahead` (one per row, advancing as the row does) so they come from DRAM while
 * the tile computes. */
static inline void tile(int type, int R, int T, const uint8_t *const *rows, const uintptr_t *ahead, pi_act x,
                        int t0, float *Y, int y_stride);

/* A matmul in tiles of TR rows x TT tokens, rows outer and tokens inner, so a tile's rows stay
 * in L1 while every token tile passes over them; leftover rows and tokens go one at a time.
 * The first token tile of each row group prefetches rows further on: with several rows read
 * side by side the hardware prefetchers fall behind, and rows picked by idx are not
 * sequential at all. */
INLINE void walk_tiles(int type, int TR, int TT, const void *W, size_t row_bytes, const int32_t *idx, int r0,
                       int nr, pi_act x, int nt, float *Y, int y_stride) {
    const int ahead_rows = pi_prefetch_rows(row_bytes, TR);
    for (int i = 0; i < nr;) {
        const int R = nr - i >= TR ? TR : 1;
        const uint8_t *rows[MAX_TILE_ROWS];
        uintptr_t ahead[MAX_TILE_ROWS], own[MAX_TILE_ROWS];
        for (int r = 0; r < R; r++) {
            rows[r] = pi_matmul_row(W, row_bytes, idx, r0, i + r);
            ahead[r] = pi_prefetch_row(W, row_bytes, idx, r0, nr, i + r, ahead_rows);
            own[r] = (uintptr_t)rows[r];
        }
        for (int t = 0; t < nt;) {
            const int T = nt - t >= TT ? TT : 1;
            const uintptr_t *pf = t == 0 ? ahead : own; /* later tiles touch their own rows: a no-op */
            float *y = Y + (size_t)t * y_stride + i;
            if (R == TR && T == TT) tile(type, TR, TT, rows, pf, x, t, y, y_stride);
            else if (R == TR) tile(type, TR, 1, rows, pf, x, t, y, y_stride);
            else if (T == TT) tile(type, 1, TT, rows, pf, x, t, y, y_stride);
            else tile(type, 1, 1, rows, pf, x, t, y, y_stride);
            t += T;
        }
        i += R;
    }
}

#endif
