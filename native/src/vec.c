/* vec.c - float vector ops: scalar reference, then AVX2+FMA versions compiled with target
 * attributes and picked at run time. Each SIMD loop ends in the scalar tail. */
#include <math.h>

#include "kernels/kernels.h"
#include "vec.h"

static float dot_ref(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void axpy_ref(float a, const float *x, float *y, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

static float max_ref(const float *x, int n) {
    float m = -INFINITY;
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

static float exp_sub_sum_ref(float *x, float max, int n) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    return sum;
}

static void silu_mul_ref(const float *gate, const float *up, float *out, int n) {
    for (int i = 0; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

static float sum_squares_ref(const float *x, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += x[i] * x[i];
    return s;
}

static float dot_f16_ref(const float *a, const pi_fp16 *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * pi_fp16_to_f32(b[i]);
    return s;
}

static void scores_f16_ref(const float *q, const pi_fp16 *k, size_t stride, int n, int hd, float scale, float *out) {
    for (int p = 0; p < n; p++) out[p] = dot_f16_ref(q, k + (size_t)p * stride, hd) * scale;
}

static void probs_f16_ref(float *p, float a, int n) {
    for (int i = 0; i < n; i++) p[i] = pi_fp16_to_f32(pi_f32_to_fp16(a * p[i]));
}

static void mix_f16_ref(const float *p, const pi_fp16 *v, size_t stride, int n, int hd, float *out) {
    for (int i = 0; i < hd; i++) out[i] = 0.0f;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < hd; i++) out[i] += p[j] * pi_fp16_to_f32(v[(size_t)j * stride + i]);
}

static void scores_f16_tile_ref(const float *const *q, int nq, const pi_fp16 *k, size_t stride, int n, int hd,
                                float scale, float *out, size_t ostride) {
    for (int r = 0; r < nq; r++) scores_f16_ref(q[r], k, stride, n, hd, scale, out + (size_t)r * ostride);
}

static void mix_f16_tile_ref(const float *w, size_t wstride, const int *lo, const int *hi, int nq, const pi_fp16 *v,
                             size_t stride, int hd, float *const *out) {
    for (int r = 0; r < nq; r++)
        mix_f16_ref(w + (size_t)r * wstride + lo[r], v + (size_t)lo[r] * stride, stride, hi[r] - lo[r] + 1, hd, out[r]);
}

/* out = sum_p p[p] v_p for q8_0 rows, as llama.cpp's flash attention sums a quantized V: each value
 * decoded to f32 (d * q), then multiplied by its weight and added */
static void mix_q8_0_ref(const float *p, const uint8_t *v, size_t stride, int n, int hd, float *out) {
    for (int i = 0; i < hd; i++) out[i] = 0.0f;
    for (int j = 0; j < n; j++) {
        const block_q8_0 *b = (const block_q8_0 *)(v + (size_t)j * stride);
        for (int i = 0; i < hd; i++) out[i] += pi_fp16_to_f32(b[i / QK].d) * (float)b[i / QK].qs[i % QK] * p[j];
    }
}

static void to_f16_ref(const float *x, pi_fp16 *y, int n) {
    for (int i = 0; i < n; i++) y[i] = pi_f32_to_fp16(x[i]);
}

#if defined(__x86_64__)
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
#include "vec_expf.h"

AVX2 static float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* exp(x) to ~2 ulp: x = n*ln2 + r, e^r by a degree-6 polynomial, 2^n through the exponent bits. */
AVX2 static __m256 exp8(__m256 x) {
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f)), _mm256_set1_ps(-87.3365447505531f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

AVX2 static float dot_avx2(const float *a, const float *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    return hsum(_mm256_add_ps(s0, s1)) + dot_ref(a + i, b + i, n - i);
}

AVX2 static void axpy_avx2(float a, const float *x, float *y, int n) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    axpy_ref(a, x + i, y + i, n - i);
}

AVX2 static float max_avx2(const float *x, int n) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float tail = max_ref(x + i, n - i);
    return tail > _mm_cvtss_f32(h) ? tail : _mm_cvtss_f32(h);
}

AVX2 static float exp_sub_sum_avx2(float *x, float max, int n) {
    __m256 vmax = _mm256_set1_ps(max), sum = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
        _mm256_storeu_ps(x + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    return hsum(sum) + exp_sub_sum_ref(x + i, max, n - i);
}

/* silu(g) = g / (1 + exp(-g)) as ggml's swiglu: 8 lanes at a time, the tail in the reference */
AVX2 static void silu_mul_avx2(const float *gate, const float *up, float *out, int n) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, expf8(_mm256_sub_ps(zero, g))));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
    }
    silu_mul_ref(gate + i, up + i, out + i, n - i);
}

AVX2 static float sum_squares_avx2(const float *x, int n) { return dot_avx2(x, x, n); }

AVX2 static __m256 load_f16(const pi_fp16 *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

AVX2 static float dot_f16_avx2(const float *a, const pi_fp16 *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load_f16(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), load_f16(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load_f16(b + i), s0);
    return hsum(_mm256_add_ps(s0, s1)) + dot_f16_ref(a + i, b + i, n - i);
}

/* q . k_p as dot_f16_avx2 sums it: lanes of two accumulators over 16 values at a time (an odd 8
 * to the first), added, then halves, then pairs (hsum). Four rows at once, their sums transposed
 * so the last steps run on all four together. */
AVX2 static void scores_f16_avx2(const float *q, const pi_fp16 *k, size_t stride, int n, int hd, float scale,
                                 float *out) {
    if (hd % 8) {
        scores_f16_ref(q, k, stride, n, hd, scale, out);
        return;
    }
    const __m128 vs = _mm_set1_ps(scale);
    int p = 0;
    for (; p + 4 <= n; p += 4) {
        const pi_fp16 *kr[4] = { k + (size_t)p * stride, k + (size_t)(p + 1) * stride, k + (size_t)(p + 2) * stride,
                                 k + (size_t)(p + 3) * stride };
        __m256 s0[4], s1[4];
        for (int r = 0; r < 4; r++) s0[r] = s1[r] = _mm256_setzero_ps();
        int i = 0;
        for (; i + 16 <= hd; i += 16) {
            const __m256 x0 = _mm256_loadu_ps(q + i), x1 = _mm256_loadu_ps(q + i + 8);
            for (int r = 0; r < 4; r++) {
                s0[r] = _mm256_fmadd_ps(x0, load_f16(kr[r] + i), s0[r]);
                s1[r] = _mm256_fmadd_ps(x1, load_f16(kr[r] + i + 8), s1[r]);
            }
        }
        if (i < hd)
            for (int r = 0; r < 4; r++) s0[r] = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load_f16(kr[r] + i), s0[r]);
        __m128 h[4];
        for (int r = 0; r < 4; r++) {
            const __m256 t = _mm256_add_ps(s0[r], s1[r]);
            h[r] = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
        }
        _MM_TRANSPOSE4_PS(h[0], h[1], h[2], h[3]); /* h[j] = lane j of each row */
        const __m128 sum = _mm_add_ps(_mm_add_ps(h[0], h[2]), _mm_add_ps(h[1], h[3]));
        _mm_storeu_ps(out + p, _mm_mul_ps(sum, vs));
    }
    for (; p < n; p++) out[p] = dot_f16_avx2(q, k + (size_t)p * stride, hd) * scale;
}

AVX2 static void probs_f16_avx2(float *p, float a, int n) {
    const __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_mul_ps(va, _mm256_loadu_ps(p + i)), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_ps(p + i, _mm256_cvtph_ps(h));
    }
    probs_f16_ref(p + i, a, n - i);
}

/* out in registers, 32 values at a time, over every row */
AVX2 static void mix_f16_avx2(const float *p, const pi_fp16 *v, size_t stride, int n, int hd, float *out) {
    if (hd % 8) {
        mix_f16_ref(p, v, stride, n, hd, out);
        return;
    }
    int i = 0;
    for (; i + 32 <= hd; i += 32) {
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        for (int j = 0; j < n; j++) {
            const __m256 w = _mm256_broadcast_ss(p + j);
            const pi_fp16 *vj = v + (size_t)j * stride + i;
            a0 = _mm256_fmadd_ps(w, load_f16(vj), a0);
            a1 = _mm256_fmadd_ps(w, load_f16(vj + 8), a1);
            a2 = _mm256_fmadd_ps(w, load_f16(vj + 16), a2);
            a3 = _mm256_fmadd_ps(w, load_f16(vj + 24), a3);
        }
        _mm256_storeu_ps(out + i, a0);
        _mm256_storeu_ps(out + i + 8, a1);
        _mm256_storeu_ps(out + i + 16, a2);
        _mm256_storeu_ps(out + i + 24, a3);
    }
    for (; i < hd; i += 8) {
        __m256 a = _mm256_setzero_ps();
        for (int j = 0; j < n; j++) a = _mm256_fmadd_ps(_mm256_broadcast_ss(p + j), load_f16(v + (size_t)j * stride + i), a);
        _mm256_storeu_ps(out + i, a);
    }
}

/* queries an AVX2 tile holds: 3 queries by 2 keys, or by 32 values, fill 12 accumulators */
enum { TILE_Q = 3 };

/* two keys' dots from their two accumulators each, summed as scores_f16_avx2 sums them (halves,
 * then lanes (0 + 2) + (1 + 3)); the two sums in the low lanes */
AVX2 static __m128 hsum_pair(__m256 s0a, __m256 s1a, __m256 s0b, __m256 s1b) {
    const __m256 ta = _mm256_add_ps(s0a, s1a), tb = _mm256_add_ps(s0b, s1b);
    const __m128 ha = _mm_add_ps(_mm256_castps256_ps128(ta), _mm256_extractf128_ps(ta, 1));
    const __m128 hb = _mm_add_ps(_mm256_castps256_ps128(tb), _mm256_extractf128_ps(tb, 1));
    const __m128 z = _mm_add_ps(_mm_unpacklo_ps(ha, hb), _mm_unpackhi_ps(ha, hb)); /* a0+a2, b0+b2, a1+a3, b1+b3 */
    return _mm_add_ps(z, _mm_movehl_ps(z, z));
}

/* TILE_Q queries against 2 keys at a time: each key converted once for all of them, each pair's
 * two accumulators filled as dot_f16_avx2 fills them */
AVX2 static void scores_f16_tile_avx2(const float *const *q, int nq, const pi_fp16 *k, size_t stride, int n, int hd,
                                      float scale, float *out, size_t ostride) {
    const __m128 vs = _mm_set1_ps(scale);
    int r = 0;
    for (; hd % 8 == 0 && r + TILE_Q <= nq; r += TILE_Q) {
        float *o = out + (size_t)r * ostride;
        int p = 0;
        for (; p + 2 <= n; p += 2) {
            const pi_fp16 *ka = k + (size_t)p * stride, *kb = ka + stride;
            __m256 s0[TILE_Q][2], s1[TILE_Q][2];
            for (int j = 0; j < TILE_Q; j++) s0[j][0] = s0[j][1] = s1[j][0] = s1[j][1] = _mm256_setzero_ps();
            int i = 0;
            for (; i + 16 <= hd; i += 16) {
                const __m256 a0 = load_f16(ka + i), b0 = load_f16(kb + i);
                for (int j = 0; j < TILE_Q; j++) {
                    const __m256 x = _mm256_loadu_ps(q[r + j] + i);
                    s0[j][0] = _mm256_fmadd_ps(x, a0, s0[j][0]);
                    s0[j][1] = _mm256_fmadd_ps(x, b0, s0[j][1]);
                }
                const __m256 a1 = load_f16(ka + i + 8), b1 = load_f16(kb + i + 8);
                for (int j = 0; j < TILE_Q; j++) {
                    const __m256 x = _mm256_loadu_ps(q[r + j] + i + 8);
                    s1[j][0] = _mm256_fmadd_ps(x, a1, s1[j][0]);
                    s1[j][1] = _mm256_fmadd_ps(x, b1, s1[j][1]);
                }
            }
            if (i < hd) {
                const __m256 a0 = load_f16(ka + i), b0 = load_f16(kb + i);
                for (int j = 0; j < TILE_Q; j++) {
                    const __m256 x = _mm256_loadu_ps(q[r + j] + i);
                    s0[j][0] = _mm256_fmadd_ps(x, a0, s0[j][0]);
                    s0[j][1] = _mm256_fmadd_ps(x, b0, s0[j][1]);
                }
            }
            for (int j = 0; j < TILE_Q; j++)
                _mm_storel_pi((__m64 *)(o + (size_t)j * ostride + p),
                              _mm_mul_ps(hsum_pair(s0[j][0], s1[j][0], s0[j][1], s1[j][1]), vs));
        }
        for (; p < n; p++)
            for (int j = 0; j < TILE_Q; j++) o[(size_t)j * ostride + p] = dot_f16_avx2(q[r + j], k + (size_t)p * stride, hd) * scale;
    }
    for (; r < nq; r++) scores_f16_avx2(q[r], k, stride, n, hd, scale, out + (size_t)r * ostride);
}

/* rows [j, end) into 32 values of TILE_Q queries' sums, the queries in the bits of act; inlined
 * for act = all of them, the interior of a causal block, without a test per row */
__attribute__((always_inline)) AVX2 static inline void mix_rows(__m256 acc[TILE_Q][4], const float *w, size_t wstride,
                                                                unsigned act, const pi_fp16 *v, size_t stride, int j,
                                                                int end) {
    for (; j < end; j++) {
        const pi_fp16 *vj = v + (size_t)j * stride;
        __m256 wj[TILE_Q];
        for (int t = 0; t < TILE_Q; t++) wj[t] = _mm256_broadcast_ss(w + (size_t)t * wstride + j);
        for (int c = 0; c < 4; c++) {
            const __m256 x = load_f16(vj + 8 * c);
            for (int t = 0; t < TILE_Q; t++)
                if (act >> t & 1) acc[t][c] = _mm256_fmadd_ps(wj[t], x, acc[t][c]);
        }
    }
}

/* TILE_Q queries at a time, 32 values of each in registers over every row any of them mixes;
 * each query's sums are mix_f16_avx2's, row by row in order from zero */
AVX2 static void mix_f16_tile_avx2(const float *w, size_t wstride, const int *lo, const int *hi, int nq, const pi_fp16 *v,
                                   size_t stride, int hd, float *const *out) {
    const unsigned all = (1u << TILE_Q) - 1;
    int r = 0;
    for (; hd % 32 == 0 && r + TILE_Q <= nq; r += TILE_Q) {
        const float *wr = w + (size_t)r * wstride;
        int first = lo[r], last = hi[r];
        for (int t = 1; t < TILE_Q; t++) {
            first = lo[r + t] < first ? lo[r + t] : first;
            last = hi[r + t] > last ? hi[r + t] : last;
        }
        for (int i = 0; i < hd; i += 32) {
            __m256 acc[TILE_Q][4];
            for (int t = 0; t < TILE_Q; t++)
                for (int c = 0; c < 4; c++) acc[t][c] = _mm256_setzero_ps();
            for (int j = first; j <= last;) { /* runs of rows over which the same queries mix */
                unsigned act = 0;
                int end = last + 1;
                for (int t = 0; t < TILE_Q; t++) {
                    if (lo[r + t] <= j && j <= hi[r + t]) act |= 1u << t;
                    const int next = j < lo[r + t] ? lo[r + t] : j <= hi[r + t] ? hi[r + t] + 1 : end;
                    end = next < end ? next : end;
                }
                if (act == all) mix_rows(acc, wr, wstride, all, v + i, stride, j, end);
                else mix_rows(acc, wr, wstride, act, v + i, stride, j, end);
                j = end;
            }
            for (int t = 0; t < TILE_Q; t++)
                for (int c = 0; c < 4; c++) _mm256_storeu_ps(out[r + t] + i + 8 * c, acc[t][c]);
        }
    }
    for (; r < nq; r++)
        mix_f16_avx2(w + (size_t)r * wstride + lo[r], v + (size_t)lo[r] * stride, stride, hi[r] - lo[r] + 1, hd, out[r]);
}

/* AVX-512: a pair's two AVX2 accumulators are one zmm register's halves (lanes 0-7 the values
 * i..i+7 of every 16, 8-15 the values i+8..i+15), so its sums are the AVX2 tier's bit for bit. */

/* keys of an AVX-512 score tile, by up to 4 queries: 16 accumulators */
enum { TILE512 = 4 };

AVX512 static __m512 load_f16x16(const pi_fp16 *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

/* four keys' dots from their accumulators, summed as scores_f16_avx2 sums them: halves (the two
 * AVX2 accumulators), halves again, then lanes (0 + 2) + (1 + 3); two keys a register per step */
AVX512 static __m128 hsum4(const __m512 s[TILE512]) {
    const __m512 t01 = _mm512_add_ps(_mm512_shuffle_f32x4(s[0], s[1], 0x44), _mm512_shuffle_f32x4(s[0], s[1], 0xee));
    const __m512 t23 = _mm512_add_ps(_mm512_shuffle_f32x4(s[2], s[3], 0x44), _mm512_shuffle_f32x4(s[2], s[3], 0xee));
    const __m512 h = _mm512_add_ps(_mm512_shuffle_f32x4(t01, t23, 0x88), _mm512_shuffle_f32x4(t01, t23, 0xdd));
    const __m512 u = _mm512_add_ps(h, _mm512_permute_ps(h, 0x4e)); /* each key: h0 + h2, h1 + h3 */
    const __m512 w = _mm512_add_ps(u, _mm512_permute_ps(u, 0xb1));
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), w));
}

/* NQ queries (a constant where inlined) against TILE512 keys at a time of n keys kf already in
 * float (conversion is exact), rows hd apart */
__attribute__((always_inline)) AVX512 static inline void scores_rows512(const float *const *q, const int NQ, const float *kf,
                                                                        int n, int hd, float scale, float *out,
                                                                        size_t ostride) {
    const __m128 vs = _mm_set1_ps(scale);
    for (int p = 0; p + TILE512 <= n; p += TILE512) {
        const float *kp = kf + (size_t)p * hd;
        __m512 s[TILE512][TILE512];
        for (int j = 0; j < NQ; j++)
            for (int c = 0; c < TILE512; c++) s[j][c] = _mm512_setzero_ps();
        int i = 0;
        for (; i + 16 <= hd; i += 16) {
            __m512 kc[TILE512];
            for (int c = 0; c < TILE512; c++) kc[c] = _mm512_loadu_ps(kp + (size_t)c * hd + i);
            for (int j = 0; j < NQ; j++) {
                const __m512 x = _mm512_loadu_ps(q[j] + i);
                for (int c = 0; c < TILE512; c++) s[j][c] = _mm512_fmadd_ps(x, kc[c], s[j][c]);
            }
        }
        if (i < hd) /* an odd 8 values: the first AVX2 accumulator's, the low half */
            for (int j = 0; j < NQ; j++) {
                const __m512 x = _mm512_maskz_loadu_ps(0x00ff, q[j] + i);
                for (int c = 0; c < TILE512; c++)
                    s[j][c] = _mm512_mask3_fmadd_ps(x, _mm512_maskz_loadu_ps(0x00ff, kp + (size_t)c * hd + i), s[j][c], 0x00ff);
            }
        for (int j = 0; j < NQ; j++) _mm_storeu_ps(out + (size_t)j * ostride + p, _mm_mul_ps(hsum4(s[j]), vs));
    }
}

/* keys a block converts to float once for all the queries, rows of at most 256 values: 32 KiB */
enum { KEY_BLOCK = 32 };

AVX512 static void scores_f16_tile_avx512(const float *const *q, int nq, const pi_fp16 *k, size_t stride, int n,
                                          int hd, float scale, float *out, size_t ostride) {
    if (hd % 8 || hd > 256 || nq < TILE512) { /* decode's one query: converting the keys first does not pay */
        scores_f16_tile_avx2(q, nq, k, stride, n, hd, scale, out, ostride);
        return;
    }
    float kf[KEY_BLOCK * 256];
    int p0 = 0;
    while (n - p0 >= TILE512) { /* whole tiles of keys, a block at a time */
        const int nk = (n - p0 < KEY_BLOCK ? n - p0 : KEY_BLOCK) / TILE512 * TILE512;
        for (int p = 0; p < nk; p++) {
            const pi_fp16 *kp = k + (size_t)(p0 + p) * stride;
            int i = 0;
            for (; i + 16 <= hd; i += 16) _mm512_storeu_ps(kf + (size_t)p * hd + i, load_f16x16(kp + i));
            if (i < hd) _mm256_storeu_ps(kf + (size_t)p * hd + i, load_f16(kp + i));
        }
        float *o = out + p0;
        int r = 0;
        for (; r + 4 <= nq; r += 4) scores_rows512(q + r, 4, kf, nk, hd, scale, o + (size_t)r * ostride, ostride);
        switch (nq - r) {
        case 3: scores_rows512(q + r, 3, kf, nk, hd, scale, o + (size_t)r * ostride, ostride); break;
        case 2: scores_rows512(q + r, 2, kf, nk, hd, scale, o + (size_t)r * ostride, ostride); break;
        case 1: scores_rows512(q + r, 1, kf, nk, hd, scale, o + (size_t)r * ostride, ostride); break;
        }
        p0 += nk;
    }
    for (int p = p0; p < n; p++) /* the last keys, fewer than a tile */
        for (int r = 0; r < nq; r++) out[(size_t)r * ostride + p] = dot_f16_avx2(q[r], k + (size_t)p * stride, hd) * scale;
}

/* 8 values of a q8_0 block, decoded: d * q */
AVX2 static __m256 load_q8(const int8_t *q, __m256 d) {
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)q))));
}

/* as mix_f16_avx2: out in registers, one block (32 values) at a time, over every row */
AVX2 static void mix_q8_0_avx2(const float *p, const uint8_t *v, size_t stride, int n, int hd, float *out) {
    if (hd % QK) {
        mix_q8_0_ref(p, v, stride, n, hd, out);
        return;
    }
    for (int b = 0; b < hd / QK; b++) {
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        for (int j = 0; j < n; j++) {
            const block_q8_0 *blk = (const block_q8_0 *)(v + (size_t)j * stride) + b;
            const __m256 w = _mm256_broadcast_ss(p + j), d = _mm256_set1_ps(pi_fp16_to_f32(blk->d));
            a0 = _mm256_fmadd_ps(load_q8(blk->qs, d), w, a0);
            a1 = _mm256_fmadd_ps(load_q8(blk->qs + 8, d), w, a1);
            a2 = _mm256_fmadd_ps(load_q8(blk->qs + 16, d), w, a2);
            a3 = _mm256_fmadd_ps(load_q8(blk->qs + 24, d), w, a3);
        }
        _mm256_storeu_ps(out + b * QK, a0);
        _mm256_storeu_ps(out + b * QK + 8, a1);
        _mm256_storeu_ps(out + b * QK + 16, a2);
        _mm256_storeu_ps(out + b * QK + 24, a3);
    }
}

AVX2 static void to_f16_avx2(const float *x, pi_fp16 *y, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    to_f16_ref(x + i, y + i, n - i);
}
/* silu_mul_avx2 16 lanes at a time, as ggml's swiglu on AVX-512 */
AVX512 static void silu_mul_avx512(const float *gate, const float *up, float *out, int n) {
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 g = _mm512_loadu_ps(gate + i);
        __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, expf16(_mm512_sub_ps(zero, g))));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(s, _mm512_loadu_ps(up + i)));
    }
    silu_mul_ref(gate + i, up + i, out + i, n - i);
}
#endif

void pi_vec_ops_init(pi_vec_ops *v, int impl) {
    *v = (pi_vec_ops){ "ref", axpy_ref, max_ref, exp_sub_sum_ref, silu_mul_ref, sum_squares_ref,
                       scores_f16_ref, probs_f16_ref, mix_f16_ref, mix_q8_0_ref, to_f16_ref,
                       scores_f16_tile_ref, mix_f16_tile_ref };
#if defined(__x86_64__)
    if (impl == PI_IMPL_REF || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        !__builtin_cpu_supports("f16c"))
        return;
    *v = (pi_vec_ops){ "avx2", axpy_avx2, max_avx2, exp_sub_sum_avx2, silu_mul_avx2, sum_squares_avx2,
                       scores_f16_avx2, probs_f16_avx2, mix_f16_avx2, mix_q8_0_avx2, to_f16_avx2,
                       scores_f16_tile_avx2, mix_f16_tile_avx2 };
    if (impl != PI_IMPL_AVX2 && __builtin_cpu_supports("avx512f")) {
        v->name = "avx512";
        v->scores_f16_tile = scores_f16_tile_avx512;
        v->silu_mul = silu_mul_avx512;
    }
#else
    (void)impl;
#endif
}
