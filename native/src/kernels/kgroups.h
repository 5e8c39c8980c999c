/* kgroups.h - the grouped matmul's tile for the K-quants Q4_K, Q5_K and Q6_K (row_groups.c's layout:
 * each field of a 256-weight super-block interleaved over the group's 16 rows, 4 bytes a row per
 * 64-byte chunk), against Q8_K activations. groups.h walks it as it walks the 32-weight tiles.
 *
 * A super-block is a series of runs, 32 weights of one Q4_K / Q5_K sub-block or 16 of a Q6_K
 * group, each with its own scale: a run's integer dots go into its own sum, which is then
 * multiplied by the 16 rows' scales (kept in the file's bytes, and picked out per super-block,
 * once for all the tile's tokens) and added to the super-block's integer total, the very integer
 * the row-major kernels form (kquants.h): sum_g scale[g] (sum q x - offset bsum[g]). Q6_K's offset
 * enters as the run's start; Q4_K's and Q5_K's mins as sum_j min[j] (bsum[2j] + bsum[2j + 1]) in
 * int16 pairs. The float work, y += dx (d isum - dmin msum), is done once per super-block for all
 * 16 rows, in one running sum: the mins term nearly cancels the other on real weights, and two
 * sums subtracted at the end would lose the difference's low bits. Two runs go side by side (the two nibbles of a Q4_K byte, or Q6_K's parts p and p + 2
 * of a ql byte), so that each token has two independent dot chains.
 *
 * The tiers differ only in the row vector and its integer dot: AVX-512 takes all 16 rows in a zmm
 * and sums a run with vpdpbusd, then multiplies by the scale; AVX2 takes 8 rows (half h of each
 * chunk) in a ymm, sums vpmaddubsw's int16 pairs for as many chunks as cannot overflow and folds
 * them into dwords with vpmaddwd by the scale as an int16 pair.
 * Private to native/src/kernels. */
#ifndef PI_KERNELS_KGROUPS_H
#define PI_KERNELS_KGROUPS_H
#include <stddef.h>

#include "kquants.h"
#include "simd.h"

/* Where field f of a block starts in its group block: 16 times its place in the block. */
#define KG(fmt, f) (PI_GROUP_ROWS * offsetof(block_##fmt, f))

/* Where each type keeps the fields the tile reads. */
INLINE size_t kg_d(int type) {
    switch (type) {
    case PI_TYPE_Q4_K: return KG(q4_K, d);
    case PI_TYPE_Q5_K: return KG(q5_K, d);
    case PI_TYPE_Q6_K: return KG(q6_K, d);
    default: PI_BAD_TYPE();
    }
}

INLINE size_t kg_dmin(int type) {
    switch (type) {
    case PI_TYPE_Q4_K: return KG(q4_K, dmin);
    case PI_TYPE_Q5_K: return KG(q5_K, dmin);
    default: PI_BAD_TYPE();
    }
}

INLINE size_t kg_scales(int type) {
    switch (type) {
    case PI_TYPE_Q4_K: return KG(q4_K, scales);
    case PI_TYPE_Q5_K: return KG(q5_K, scales);
    default: PI_BAD_TYPE();
    }
}

INLINE size_t kg_qs(int type) {
    switch (type) {
    case PI_TYPE_Q4_K: return KG(q4_K, qs);
    case PI_TYPE_Q5_K: return KG(q5_K, qs);
    default: PI_BAD_TYPE();
    }
}

/* The operations both tiers spell alike, but for the prefix P (_mm512, _mm256) and the integer
 * vector's suffix S (si512, si256). */
#define KG_OPS(P, S)                                                                        \
    INLINE kv kv_and(kv a, kv b) { return P##_and_##S(a, b); }                              \
    INLINE kv kv_or(kv a, kv b) { return P##_or_##S(a, b); }                                \
    INLINE kv kv_add(kv a, kv b) { return P##_add_epi32(a, b); }                            \
    INLINE kv kv_srli16(kv a, int n) { return P##_srli_epi16(a, (unsigned)n); }             \
    INLINE kv kv_slli16(kv a, int n) { return P##_slli_epi16(a, (unsigned)n); }             \
    INLINE kv kv_srli32(kv a, int n) { return P##_srli_epi32(a, (unsigned)n); }             \
    INLINE kv kv_bytes(int v) { return P##_set1_epi8((char)v); }                            \
    INLINE kv kv_dwords(int v) { return P##_set1_epi32(v); }                                \
    INLINE kv kv_zero(void) { return P##_setzero_##S(); }                                   \
    INLINE kf kf_of(kv v) { return P##_cvtepi32_ps(v); }                                    \
    INLINE kf kf_set(float v) { return P##_set1_ps(v); }                                    \
    INLINE kf kf_zero(void) { return P##_setzero_ps(); }                                    \
    INLINE kf kf_fma(kf a, kf b, kf c) { return P##_fmadd_ps(a, b, c); }                    \
    INLINE kf kf_fnma(kf a, kf b, kf c) { return P##_fnmadd_ps(a, b, c); }                  \
    INLINE kf kf_mul(kf a, kf b) { return P##_mul_ps(a, b); }

#if defined(__AVX512VNNI__)

enum { KG_HALVES = 1 }; /* row vectors per group: one zmm of 16 rows */
typedef __m512i kv;
typedef __m512 kf;
typedef struct { kv a; } krun; /* a run's sum of q x */
KG_OPS(_mm512, si512)

INLINE kv kv_load(const uint8_t *chunk, int h) { (void)h; return _mm512_loadu_si512(chunk); }
/* (a & m) | b in one instruction */
INLINE kv kv_merge(kv a, kv b, kv m) { return _mm512_ternarylogic_epi32(a, b, m, 0xec); }
/* acc + a * b over int16 pairs into dwords */
INLINE kv kv_dot16(kv acc, kv a, kv b) { return _mm512_dpwssd_epi32(acc, a, b); }

/* Byte b of each dword as the scale a run's sum is multiplied by: an int32, zero- or
 * sign-extended (moved to the top byte, shifted down). */
INLINE kv kv_scale(kv v, int b, int is_signed) {
    const kv top = _mm512_shuffle_epi8(v, _mm512_set4_epi32((int)(0x0c808080u + ((unsigned)b << 24)), (int)(0x08808080u + ((unsigned)b << 24)),
                                                   (int)(0x04808080u + ((unsigned)b << 24)), (int)(0x00808080u + ((unsigned)b << 24))));
    return is_signed ? _mm512_srai_epi32(top, 24) : _mm512_srli_epi32(top, 24);
}

INLINE krun krun_begin(int init) { return (krun){ _mm512_set1_epi32(init) }; }
INLINE void krun_step(int type, krun *r, kv w, const int8_t *x4) {
    (void)type;
    r->a = _mm512_dpbusd_epi32(r->a, w, _mm512_set1_epi32((int)load_u32((const uint8_t *)x4)));
}
INLINE void krun_spill(int type, krun *r, kv sc, kv *itot) { (void)type, (void)r, (void)sc, (void)itot; }
INLINE kv krun_end(int type, krun r, int init, kv sc, kv itot) {
    (void)type, (void)init;
    return kv_add(itot, _mm512_mullo_epi32(r.a, sc));
}
/* chunks a run may sum before krun_spill: any */
INLINE int kg_spill_every(int type) { (void)type; return 8; }

INLINE kf kf_halves(const uint8_t *p, int h) { (void)h; return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
INLINE void kf_store(float *y, int h, kf a) { (void)h; _mm512_storeu_ps(y, a); }

#else /* AVX2: half h of the group, rows 8h .. 8h + 7, bytes 32h .. 32h + 31 of each chunk */

enum { KG_HALVES = 2 };
typedef __m256i kv;
typedef __m256 kf;
typedef struct { kv s16; } krun; /* vpmaddubsw's pair sums since the last spill */
KG_OPS(_mm256, si256)

INLINE kv kv_load(const uint8_t *chunk, int h) { return _mm256_loadu_si256((const __m256i *)(chunk + 32 * h)); }
INLINE kv kv_merge(kv a, kv b, kv m) { return _mm256_or_si256(_mm256_and_si256(a, m), b); }
INLINE kv kv_dot16(kv acc, kv a, kv b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }

/* Byte b of each dword as the scale vpmaddwd multiplies a run's int16 pair by: (s, s), zero- or
 * sign-extended (moved to the top of both words, shifted down). */
INLINE kv kv_scale(kv v, int b, int is_signed) {
    const int pick = (int)(0x00800080u + ((unsigned)b << 8) + ((unsigned)b << 24));
    const kv top = _mm256_shuffle_epi8(v, _mm256_setr_epi32(pick, pick + 0x04000400, pick + 0x08000800, pick + 0x0c000c00,
                                                            pick, pick + 0x04000400, pick + 0x08000800, pick + 0x0c000c00));
    return is_signed ? _mm256_srai_epi16(top, 8) : _mm256_srli_epi16(top, 8);
}

INLINE krun krun_begin(int init) { (void)init; return (krun){ _mm256_setzero_si256() }; }
INLINE void krun_step(int type, krun *r, kv w, const int8_t *x4) {
    (void)type;
    r->s16 = _mm256_add_epi16(r->s16, _mm256_maddubs_epi16(w, _mm256_set1_epi32((int)load_u32((const uint8_t *)x4))));
}
INLINE void krun_spill(int type, krun *r, kv sc, kv *itot) {
    (void)type;
    *itot = kv_dot16(*itot, r->s16, sc);
    r->s16 = _mm256_setzero_si256();
}
/* the run's start (Q6_K's -32 bsum, even) as the pair (init / 2, init / 2): |init / 2| < 32768 */
INLINE kv krun_end(int type, krun r, int init, kv sc, kv itot) {
    itot = kv_dot16(itot, r.s16, sc);
    if (type == PI_TYPE_Q6_K) itot = kv_dot16(itot, _mm256_set1_epi16((short)(init / 2)), sc);
    return itot;
}
/* chunks whose pair sums fit int16: 8 x 2 x 15 x 127, 4 x 2 x 31 x 127, 2 x 2 x 63 x 127 */
INLINE int kg_spill_every(int type) { return type == PI_TYPE_Q4_K ? 8 : type == PI_TYPE_Q5_K ? 4 : 2; }

INLINE kf kf_halves(const uint8_t *p, int h) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h))); }
INLINE void kf_store(float *y, int h, kf a) { _mm256_storeu_ps(y + 8 * h, a); }

#endif

/* Run pairs per super-block and chunks per run: Q4_K / Q5_K a pair of sub-blocks (the two
 * nibbles of 32 qs bytes) in 8 chunks; Q6_K parts p and p + 2 of one half and 16-weight column
 * (the two nibbles of a ql byte) in 4. */
INLINE int kg_pairs(int type) { return type == PI_TYPE_Q6_K ? 8 : 4; }
INLINE int kg_chunks(int type) { return type == PI_TYPE_Q6_K ? 4 : 8; }

/* Where run v (0, 1) of pair u starts among a super-block's 256 weights. */
INLINE int kg_first(int type, int u, int v) {
    if (type != PI_TYPE_Q6_K) return 64 * u + 32 * v;
    return 128 * (u / 4) + 32 * (u % 2 + 2 * v) + 16 * (u / 2 % 2); /* half, part, column */
}

/* The weight vectors of chunk k of pair u, run 0 and run 1, unsigned. */
INLINE void kg_weights(int type, const uint8_t *p, int h, int u, int k, kv *w0, kv *w1) {
    const kv m4 = kv_bytes(0x0f);
    if (type == PI_TYPE_Q6_K) { /* ql byte: parts pp and pp + 2; qh byte: crumb q of part q */
        const int half = u / 4, pp = u % 2, j = 16 * (u / 2 % 2) + 4 * k;
        const kv ql = kv_load(p + KG(q6_K, ql) + 16 * (64 * half + 32 * pp + j), h);
        const kv qh = kv_load(p + KG(q6_K, qh) + 16 * (32 * half + j), h), m30 = kv_bytes(0x30);
        *w0 = kv_merge(ql, kv_and(kv_slli16(qh, 4 - 2 * pp), m30), m4);
        *w1 = kv_merge(kv_srli16(ql, 4), kv_and(kv_srli16(qh, 2 * pp), m30), m4);
        return;
    }
    const kv v = kv_load(p + kg_qs(type) + 64 * (8 * u + k), h);
    *w0 = kv_and(v, m4);
    *w1 = kv_and(kv_srli16(v, 4), m4);
    if (type != PI_TYPE_Q5_K) return;
    /* bit l of qh byte j is bit 4 of sub-block l's weight j: for sub-blocks 2u and 2u + 1 */
    const kv qh = kv_load(p + KG(q5_K, qh) + 64 * k, h), b4 = kv_bytes(0x10);
    const int l = 2 * u;
    *w0 = kv_or(*w0, kv_and(l < 4 ? kv_slli16(qh, 4 - l) : kv_srli16(qh, l - 4), b4));
    *w1 = kv_or(*w1, kv_and(l + 1 < 4 ? kv_slli16(qh, 3 - l) : kv_srli16(qh, l - 3), b4));
}

/* Q4_K / Q5_K: the 16 rows' scales (sc[0] sub-blocks 0-3, sc[1] 4-7, a byte each of a dword)
 * and mins (mn[0], mn[1]), from the 3 words of each row's 12 bytes (kquants.h's scales_mins_k4). */
INLINE void kg_scales_mins(const uint8_t *scales, int h, kv sc[2], kv mn[2]) {
    const kv w0 = kv_load(scales, h), w1 = kv_load(scales + 64, h), w2 = kv_load(scales + 128, h);
    const kv m6 = kv_bytes(0x3f), m4 = kv_bytes(0x0f), top = kv_bytes(0x30);
    sc[0] = kv_and(w0, m6);
    sc[1] = kv_or(kv_and(w2, m4), kv_and(kv_srli32(w0, 2), top));
    mn[0] = kv_and(w1, m6);
    mn[1] = kv_or(kv_and(kv_srli32(w2, 4), m4), kv_and(kv_srli32(w1, 2), top));
}

/* The scale of run v of pair u, as the tier multiplies by it. */
INLINE kv kg_run_scale(int type, const uint8_t *p, int h, const kv sc[2], int u, int v) {
    if (type != PI_TYPE_Q6_K) return kv_scale(sc[u / 2], (2 * u + v) % 4, 0);
    const int g = kg_first(type, u, v) / 16;
    return kv_scale(kv_load(p + KG(q6_K, scales) + 64 * (g / 4), h), g % 4, 1);
}

/* bsum pairs (a, b) as the int16 pair each dword of kv_dot16's other operand holds */
INLINE kv kg_pair16(int a, int b) { return kv_dwords((int)((uint32_t)(uint16_t)a | (uint32_t)(uint16_t)b << 16)); }

/* The super-block at p (half h of its rows) against T tokens' blocks xb: itot[t], the integer
 * sum of scale x (q x - offset bsum), and for Q4_K / Q5_K msum[t] = sum_j min[j] bsum of sub-block j. */
INLINE void kg_superblock(int type, int T, const uint8_t *p, int h, const block_q8k *const *xb, kv *itot, kv *msum) {
    kv sc[2] = { kv_zero(), kv_zero() }, mn[2];
    if (type != PI_TYPE_Q6_K) kg_scales_mins(p + kg_scales(type), h, sc, mn);
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) itot[t] = kv_zero();
#pragma GCC unroll 8
    for (int u = 0; u < kg_pairs(type); u++) {
        const kv s0 = kg_run_scale(type, p, h, sc, u, 0), s1 = kg_run_scale(type, p, h, sc, u, 1);
        const int f0 = kg_first(type, u, 0), f1 = kg_first(type, u, 1);
        krun r0[GROUP_TOKENS], r1[GROUP_TOKENS];
        int init0[GROUP_TOKENS], init1[GROUP_TOKENS]; /* Q6_K's offset: -32 bsum of the run */
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            init0[t] = type == PI_TYPE_Q6_K ? -32 * xb[t]->bsums[f0 / 16] : 0;
            init1[t] = type == PI_TYPE_Q6_K ? -32 * xb[t]->bsums[f1 / 16] : 0;
            r0[t] = krun_begin(init0[t]);
            r1[t] = krun_begin(init1[t]);
        }
#pragma GCC unroll 8
        for (int k = 0; k < kg_chunks(type); k++) {
            kv w0, w1;
            kg_weights(type, p, h, u, k, &w0, &w1);
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                krun_step(type, &r0[t], w0, xb[t]->qs + f0 + 4 * k);
                krun_step(type, &r1[t], w1, xb[t]->qs + f1 + 4 * k);
                if ((k + 1) % kg_spill_every(type) == 0 && k + 1 < kg_chunks(type)) {
                    krun_spill(type, &r0[t], s0, &itot[t]);
                    krun_spill(type, &r1[t], s1, &itot[t]);
                }
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) itot[t] = krun_end(type, r1[t], init1[t], s1, krun_end(type, r0[t], init0[t], s0, itot[t]));
    }
    if (type == PI_TYPE_Q6_K) return;
    /* mins j and j + 2 of each word as int16 pairs, even and odd bytes */
    const kv even = kv_dwords(0x00ff00ff);
    const kv me[2] = { kv_and(mn[0], even), kv_and(mn[1], even) }, mo[2] = { kv_srli16(mn[0], 8), kv_srli16(mn[1], 8) };
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        const int16_t *bs = xb[t]->bsums;
        int b[8];
        for (int j = 0; j < 8; j++) b[j] = bs[2 * j] + bs[2 * j + 1];
        kv m = kv_zero();
        for (int i = 0; i < 2; i++) {
            m = kv_dot16(m, me[i], kg_pair16(b[4 * i], b[4 * i + 2]));
            m = kv_dot16(m, mo[i], kg_pair16(b[4 * i + 1], b[4 * i + 3]));
        }
        msum[t] = m;
    }
}

/* Y[t * y_stride + r] for the group's 16 rows and T tokens from t0, as groups.h's group_tile. */
INLINE void kgroup_tile(int type, int T, const uint8_t *group, uintptr_t ahead, pi_act x, int t0, float *Y,
                        int y_stride) {
    const size_t gsb = PI_GROUP_ROWS * block_bytes(type);
    const int nsb = x.n / QK_K;
    const block_q8k *xs[GROUP_TOKENS];
    kf acc[KG_HALVES][GROUP_TOKENS];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        xs[t] = x.k + (size_t)(t0 + t) * nsb;
        for (int h = 0; h < KG_HALVES; h++) acc[h][t] = kf_zero();
    }
    for (int s = 0; s < nsb; s++) {
        const uint8_t *p = group + (size_t)s * gsb;
        if (ahead)
            for (size_t off = 0; off < gsb; off += 64) _mm_prefetch((const char *)(ahead + s * gsb + off), _MM_HINT_T1);
        const block_q8k *xb[GROUP_TOKENS];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) xb[t] = xs[t] + s;
#pragma GCC unroll 2
        for (int h = 0; h < KG_HALVES; h++) {
            kv itot[GROUP_TOKENS], msum[GROUP_TOKENS];
            kg_superblock(type, T, p, h, xb, itot, msum);
            const kf d = kf_halves(p + kg_d(type), h), dmin = kq_has_min(type) ? kf_halves(p + kg_dmin(type), h) : kf_zero();
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                const kf dx = kf_set(xb[t]->d);
                acc[h][t] = kf_fma(kf_mul(d, dx), kf_of(itot[t]), acc[h][t]);
                if (kq_has_min(type)) acc[h][t] = kf_fnma(kf_mul(dmin, dx), kf_of(msum[t]), acc[h][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        for (int h = 0; h < KG_HALVES; h++) kf_store(Y + (size_t)t * y_stride, h, acc[h][t]);
}

#endif
