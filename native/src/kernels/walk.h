/* walk.h - the SIMD tiers' matmul and axpy over rows, on the instructions of the tier that
 * includes it (isa_avx2.h or isa_avx512.h, chosen by the instruction set it is compiled for)
 * and the block decoding of simd.h: the activation blocks, the block tile, the walk over tiles
 * and the walk over the rows of the sparse FFN.
 *
 * walk_tiles() calls the tiles with constant shapes, so every shape compiles to its own
 * unrolled body. Private to native/src/kernels. */
#ifndef PI_KERNELS_WALK_H
#define PI_KERNELS_WALK_H
#include <math.h>

#include "simd.h"
#if defined(__AVX512VNNI__)
#include "isa_avx512.h"
#else
#include "isa_avx2.h"
#endif

/* ---- activation blocks ---- */

/* An activation block: its 32 bytes, d and s, and the integer start of each dword lane's dot,
 * -offset * sum(x over the lane). */
typedef struct {
    __m256i q, base;
    float d, s;
} xblock;

INLINE xblock load_xblock(int type, const block_q8x *x) {
    xblock a;
    a.q = _mm256_loadu_si256((const __m256i *)x->qs);
    a.d = x->d;
    a.s = x->s;
    a.base = _mm256_setzero_si256();
    if (weight_offset(type))
        a.base = _mm256_sub_epi32(a.base, lane_isum(a.base, _mm256_set1_epi8((char)weight_offset(type)), a.q));
    return a;
}

/* ---- the block tile ---- */

/* A weight block's integer dot with an activation block, per dword lane. Signed Q8_0 weights use
 * the sign trick, |w| * (x * sign(w)), exact because activations never hold -128. */
INLINE __m256i block_isum(int type, const wblock *w, const xblock *x) {
    if (type == PI_TYPE_Q8_0 && !weight_offset(type))
        return lane_isum(_mm256_setzero_si256(), _mm256_abs_epi8(w->q), _mm256_sign_epi8(x->q, w->q));
    return lane_isum(x->base, w->q, x->q);
}

/* The whole integer sums of 4 blocks' lanes, block r in lane r (integers: exact in any order). */
INLINE __m128i block_isums4(const __m256i s[MAX_TILE_ROWS]) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* dd[t][r] = d_w d_x of row r and token t in block b: the scale products of a tile of several
 * tokens, worked out a block ahead so that the block loop reads each as a broadcast memory
 * operand of its FMA: picked out of a register in the loop, each would cost a shuffle. */
INLINE void scale_products(int R, int T, const uint8_t *const *rows, size_t bb, const block_q8x *const *xs, int b,
                           float dd[MAX_TILE_TOKENS][MAX_TILE_ROWS]) {
    /* d is each block's first fp16: the rows' side by side in the low words, loaded straight into
     * vector registers */
    __m128i h[MAX_TILE_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < MAX_TILE_ROWS; r++) h[r] = _mm_cvtsi32_si128(r < R ? (int)load_u32(rows[r] + (size_t)b * bb) : 0);
    const __m128 dw = _mm_cvtph_ps(_mm_unpacklo_epi32(_mm_unpacklo_epi16(h[0], h[1]), _mm_unpacklo_epi16(h[2], h[3])));
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) _mm_store_ps(dd[t], _mm_mul_ps(dw, _mm_set1_ps(xs[t][b].d)));
}

/* One block b of tile_blocks(): the products of the tile's rows and tokens, added to acc and mins
 * (PI_DOT_LANES; dd holds the block's scale products when T > 1) or to sums (PI_DOT_BLOCKS). */
INLINE void tile_block(int type, int R, int T, const uint8_t *const *rows, const uintptr_t *ahead,
                       const block_q8x *const *xs, int b, const float dd[MAX_TILE_TOKENS][MAX_TILE_ROWS],
                       __m256 acc[MAX_TILE_ROWS][MAX_TILE_TOKENS], float mins[MAX_TILE_ROWS][MAX_TILE_TOKENS],
                       __m128 sums[MAX_TILE_TOKENS]) {
    const size_t bb = block_bytes(type);
    /* a token's block of zeros (ReLU's, in a decoded token's sparse FFN) adds exactly nothing */
    if (T == 1 && xs[0][b].d == 0.0f) return;
    xblock xb[MAX_TILE_TOKENS];
    wblock w[MAX_TILE_ROWS];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) xb[t] = load_xblock(type, xs[t] + b);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        _mm_prefetch((const char *)(ahead[r] + b * bb), _MM_HINT_T1);
        w[r] = load_wblock(type, rows[r] + b * bb);
    }
    if (pi_dot_order(type) == PI_DOT_LANES) {
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                const __m256 f = _mm256_cvtepi32_ps(block_isum(type, &w[r], &xb[t]));
                /* a decoded token's product is its own scalar multiply */
                const __m256 d = _mm256_set1_ps(T > 1 ? dd[t][r] : w[r].d * xb[t].d);
                acc[r][t] = _mm256_fmadd_ps(d, f, acc[r][t]);
                if (has_min(type)) mins[r][t] = fmaf(w[r].m, xb[t].s, mins[r][t]);
            }
        return;
    }
    /* the tile's rows side by side: their scale products, one multiply per token */
    const __m128 dw = _mm_setr_ps(w[0].d, R > 1 ? w[1].d : 0.0f, R > 2 ? w[2].d : 0.0f, R > 3 ? w[3].d : 0.0f);
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        __m256i s[MAX_TILE_ROWS];
#pragma GCC unroll 4
        for (int r = 0; r < MAX_TILE_ROWS; r++) s[r] = r < R ? block_isum(type, &w[r], &xb[t]) : _mm256_setzero_si256();
        sums[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(block_isums4(s)), _mm_mul_ps(dw, _mm_set1_ps(xb[t].d)), sums[t]);
    }
}

/* Y[t * y_stride + r] for R <= MAX_TILE_ROWS rows x T <= MAX_TILE_TOKENS tokens from token t0
 * on, summed in pi_dot_order(type): PI_DOT_LANES in 8 float lanes per row and token (and the
 * minimums' terms apart), PI_DOT_BLOCKS in one float per row and token, the tile's rows side by
 * side in the lanes of one register. `ahead` holds an address per row, advancing as the row
 * does, to touch so that it comes from DRAM while the tile computes. */
INLINE void tile_blocks(int type, int R, int T, const uint8_t *const *rows, const uintptr_t *ahead, pi_act x,
                        int t0, float *Y, int y_stride) {
    const int nb = x.n / QK;
    const block_q8x *xs[MAX_TILE_TOKENS];
    __m256 acc[MAX_TILE_ROWS][MAX_TILE_TOKENS];
    float mins[MAX_TILE_ROWS][MAX_TILE_TOKENS];
    __m128 sums[MAX_TILE_TOKENS];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        xs[t] = x.q + (size_t)(t0 + t) * nb;
        sums[t] = _mm_setzero_ps();
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            acc[r][t] = _mm256_setzero_ps();
            mins[r][t] = 0.0f;
        }

    /* the lanes' scale products of blocks b and b + 1: the next one's stored while a block computes */
    _Alignas(16) float dd[2][MAX_TILE_TOKENS][MAX_TILE_ROWS];
    const int products = T > 1 && pi_dot_order(type) == PI_DOT_LANES;
    if (products) scale_products(R, T, rows, block_bytes(type), xs, 0, dd[0]);
    for (int b = 0; b < nb; b++) {
        if (products && b + 1 < nb) scale_products(R, T, rows, block_bytes(type), xs, b + 1, dd[(b + 1) % 2]);
        tile_block(type, R, T, rows, ahead, xs, b, dd[b % 2], acc, mins, sums);
    }

#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        float row_sums[MAX_TILE_ROWS];
        _mm_storeu_ps(row_sums, sums[t]);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            Y[(size_t)t * y_stride + r] = pi_dot_order(type) == PI_DOT_LANES ? hsum8(acc[r][t]) + mins[r][t] : row_sums[r];
    }
}

/* ---- the tile walk ---- */

INLINE void tile(int type, int R, int T, const uint8_t *const *rows, const uintptr_t *ahead, pi_act x, int t0,
                 float *Y, int y_stride) {
    if (is_float(type)) tile_floats(type, R, T, rows, ahead, x, t0, Y, y_stride);
    else tile_blocks(type, R, T, rows, ahead, x, t0, Y, y_stride);
}

/* tile() with the token count T (1 <= T <= TT) a constant in each call, so each shape compiles
 * to its own loops: a batch's last tokens take one narrower tile rather than one tile each */
INLINE void tile_tokens(int type, int R, int TT, int T, const uint8_t *const *rows, const uintptr_t *ahead, pi_act x,
                        int t0, float *Y, int y_stride) {
    if (T == 4 && TT >= 4) tile(type, R, 4, rows, ahead, x, t0, Y, y_stride);
    else if (T == 3 && TT >= 3) tile(type, R, 3, rows, ahead, x, t0, Y, y_stride);
    else if (T == 2 && TT >= 2) tile(type, R, 2, rows, ahead, x, t0, Y, y_stride);
    else tile(type, R, 1, rows, ahead, x, t0, Y, y_stride);
}

/* Every cache line of the bytes [lo, hi) into L2, at once: the rows a walk's look-ahead does not
 * reach at its start. */
INLINE void prefetch_span(uintptr_t lo, uintptr_t hi) {
    for (uintptr_t line = lo & ~(uintptr_t)63; line < hi; line += 64) _mm_prefetch((const char *)line, _MM_HINT_T1);
}

/* A matmul in tiles of TR rows x TT tokens, rows outer and tokens inner, so a tile's rows stay
 * in L1 while every token tile passes over them; leftover rows go one at a time, leftover tokens
 * in one narrower tile.
 * The first token tile of each row group prefetches rows further on: with several rows read
 * side by side the hardware prefetchers fall behind, and rows picked by idx are not
 * sequential at all. */
INLINE void walk_tiles(int type, int TR, int TT, const void *W, size_t row_bytes, const int32_t *idx, int r0,
                       int nr, pi_act x, int nt, float *Y, int y_stride) {
    const int ahead_rows = pi_prefetch_rows(row_bytes, TR);
    if (idx) /* the rows the tiles' look-ahead skips at the start, whole at once (as axpy_walk) */
        for (int i = TR; i < nr && i < ahead_rows; i++) {
            const uintptr_t row = (uintptr_t)pi_matmul_row(W, row_bytes, idx, r0, i);
            prefetch_span(row, row + row_bytes);
        }
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
            const int T = nt - t >= TT ? TT : nt - t;
            const uintptr_t *pf = t == 0 ? ahead : own; /* later tiles touch their own rows: a no-op */
            float *y = Y + (size_t)t * y_stride + i;
            if (R == TR) tile_tokens(type, TR, TT, T, rows, pf, x, t, y, y_stride);
            else tile_tokens(type, 1, TT, T, rows, pf, x, t, y, y_stride);
            t += T;
        }
        i += R;
    }
}

/* One group of R rows: all of d for float rows, blocks [b0, b0 + nb) for the block formats. */
INLINE void axpy_group(int type, int R, const uint8_t *const *rows, const uintptr_t *ahead, const float *a,
                       float *y, int d, int b0, int nb, axpy_scales *sc) {
    if (is_float(type)) {
        axpy_floats(type, R, rows, ahead, a, y, d);
    } else {
        scales_of(type, R, rows, a, b0, nb, sc);
        axpy_blocks(type, R, rows, ahead, sc, y, b0, nb);
    }
}

/* One walk over the rows with a[j] != 0, AXPY_ROWS of them per pass over y (over its blocks
 * [b0, b0 + nb) for the block formats, whose rows' bytes [lo, hi) it reads). A second cursor
 * runs as many non-zero rows ahead as pi_prefetch_rows() asks and hands each row of a group
 * the row to prefetch as it is read: rows of a zero a[j] are never touched, and the cursor
 * stops at the last row (then a row prefetches itself, a no-op). The rows the cursor skips at
 * the start are prefetched whole at once: the sparse FFN calls this on runs of 32 scattered
 * rows, often fewer than the prefetch distance, and would otherwise wait on each in turn. */
INLINE void axpy_walk(int type, const void *W, size_t row_bytes, const int32_t *idx, const float *a, int n,
                      float *y, int d, int b0, int nb, axpy_scales *sc) {
    const size_t lo = is_float(type) ? 0 : (size_t)b0 * block_bytes(type);
    const size_t hi = is_float(type) ? row_bytes : (size_t)(b0 + nb) * block_bytes(type);
    const int ahead_rows = pi_prefetch_rows(hi - lo, AXPY_ROWS);
    int p = 0;
    for (int seen = 0; p < n && seen < ahead_rows; p++) {
        if (a[p] == 0.0f) continue;
        const uintptr_t row = (uintptr_t)pi_matmul_row(W, row_bytes, idx, 0, p);
        if (seen++ >= AXPY_ROWS) prefetch_span(row + lo, row + hi); /* the first group reads its rows at once */
    }
    for (int j = 0;;) {
        const uint8_t *rows[AXPY_ROWS];
        uintptr_t ahead[AXPY_ROWS];
        float ar[AXPY_ROWS];
        int R = 0;
        for (; j < n && R < AXPY_ROWS; j++) {
            if (a[j] == 0.0f) continue; /* ReLU zeros cost nothing */
            rows[R] = pi_matmul_row(W, row_bytes, idx, 0, j);
            ar[R] = a[j];
            while (p < n && a[p] == 0.0f) p++;
            ahead[R] = p < n ? (uintptr_t)pi_matmul_row(W, row_bytes, idx, 0, p++) : (uintptr_t)rows[R];
            R++;
        }
        switch (R) {
        case AXPY_ROWS: axpy_group(type, AXPY_ROWS, rows, ahead, ar, y, d, b0, nb, sc); break;
        case 3: axpy_group(type, 3, rows, ahead, ar, y, d, b0, nb, sc); return;
        case 2: axpy_group(type, 2, rows, ahead, ar, y, d, b0, nb, sc); return;
        case 1: axpy_group(type, 1, rows, ahead, ar, y, d, b0, nb, sc); return;
        default: return;
        }
    }
}

/* y += sum_j a[j] row(j): float rows in one walk, block rows in walks over AXPY_BLOCKS blocks
 * of y at a time, each ending with the blocks' constants. */
INLINE void axpy_rows(int type, const void *W, size_t row_bytes, const int32_t *idx, const float *a, int n,
                      float *y, int d) {
    if (is_float(type)) {
        axpy_walk(type, W, row_bytes, idx, a, n, y, d, 0, 0, NULL);
        return;
    }
    axpy_scales sc;
    for (int b0 = 0; b0 < d / QK; b0 += AXPY_BLOCKS) {
        const int nb = d / QK - b0 < AXPY_BLOCKS ? d / QK - b0 : AXPY_BLOCKS;
        memset(sc.m, 0, sizeof sc.m);
        axpy_walk(type, W, row_bytes, idx, a, n, y, d, b0, nb, &sc);
        if (type == PI_TYPE_Q8_0) continue; /* no constants */
        for (int i = 0; i < nb; i++) {
            const __m256 m = _mm256_set1_ps(sc.m[2 * i + 1]);
            float *yb = y + (size_t)(b0 + i) * QK;
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) _mm256_storeu_ps(yb + 8 * k, _mm256_add_ps(_mm256_loadu_ps(yb + 8 * k), m));
        }
    }
}

/* A matmul in the tier's tiles. */
INLINE void matmul(int type, const void *W, size_t row_bytes, const int32_t *idx, int r0, int nr, pi_act x,
                   int nt, float *Y, int y_stride) {
    walk_tiles(type, TILE_R, TILE_T, W, row_bytes, idx, r0, nr, x, nt, Y, y_stride);
}

#endif
