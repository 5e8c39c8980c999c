/* vec.c - float vector ops: scalar reference, then AVX2+FMA and AVX-512 versions compiled with
 * target attributes and picked at run time. Each SIMD loop ends in the scalar tail.
 *
 * Attention's ops reproduce llama.cpp's CPU backend bit for bit in its one-token decode (an f16
 * cache, no flash attention): each tier sums as ggml's build for that instruction set does - the
 * reference as its scalar build (every sum in double), AVX2 and AVX-512 as ggml_vec_dot_f16 and
 * ggml_vec_soft_max_f32 there (lanes of 4 accumulators per step, reduced in ggml's order, the
 * values past the last step in double). llama.cpp's scores and weights run over the whole cache,
 * padded to 256 cells, whose cells past the last position weigh exactly 0: a step is then never
 * cut short, so ours are completed with zeros rather than summed as leftovers. */
#include <math.h>

#include "kernels/kernels.h"
#include "vec.h"

static void axpy_ref(float a, const float *x, float *y, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

static float max_ref(const float *x, int n) {
    float m = -INFINITY;
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* ggml's scalar soft_max: libm's expf, summed in double */
static double exp_sub_sum_ref(float *x, float max, int n) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += (double)x[i];
    }
    return sum;
}

static void silu_mul_ref(const float *gate, const float *up, float *out, int n) {
    for (int i = 0; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

/* pairs (x[i * step], x[i * step + other]) rotated by (cos, sin) at cs[2i], cs[2i + 1], rounded
 * as ggml's rope (built with FMA): x0 cos - x1 sin and x0 sin + x1 cos, each an fma of x0's term
 * onto the other's product */
static void rotate_ref(float *x, const float *cs, int half, int step, int other) {
    for (int i = 0; i < half; i++) {
        float *a = x + i * step, *b = a + other;
        const float x0 = *a, x1 = *b, cos = cs[2 * i], sin = cs[2 * i + 1];
        *a = fmaf(x0, cos, -(x1 * sin));
        *b = fmaf(x0, sin, x1 * cos);
    }
}

/* ggml's scalar ggml_vec_dot_f16: the products (exact in float) summed in double */
static float dot_f16_ref(const float *a, const pi_fp16 *b, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)(a[i] * pi_fp16_to_f32(b[i]));
    return (float)s;
}

static void scores_f16_ref(const float *q, const pi_fp16 *k, size_t stride, int n, int hd, float scale, float *out) {
    for (int p = 0; p < n; p++) out[p] = dot_f16_ref(q, k + (size_t)p * stride, hd) * scale;
}

static void probs_f16_ref(float *p, float a, int n) {
    for (int i = 0; i < n; i++) p[i] = pi_fp16_to_f32(pi_f32_to_fp16(a * p[i]));
}

/* llama.cpp's V is transposed: each output value a dot over the positions, as dot_f16_ref */
static void mix_f16_ref(const float *p, const pi_fp16 *v, size_t stride, int n, int hd, float *out) {
    for (int i = 0; i < hd; i++) {
        double s = 0.0;
        for (int j = 0; j < n; j++) s += (double)(p[j] * pi_fp16_to_f32(v[(size_t)j * stride + i]));
        out[i] = (float)s;
    }
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

/* ggml's AVX2 soft_max sums a group of 8: halves, then lanes (0 + 2) + (1 + 3) */
AVX2 static float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ggml's AVX2 vector reduction (GGML_F32x8_REDUCE's last steps): halves, then lanes
 * (0 + 1) + (2 + 3) by two horizontal adds */
AVX2 static float hsum_hadd(__m256 v) {
    const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t1 = _mm_hadd_ps(t0, t0);
    return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
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

/* lanes of the last, partial group of n (1..7) */
AVX2 static __m256i lanes8(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* ggml_vec_soft_max_f32 of the AVX2 build: ggml's expf 8 lanes at a time, each group's sum
 * (hsum) added in double; a last partial group completed with zeros (exp(-inf) in the cache's
 * padding there) */
AVX2 static double exp_sub_sum_avx2(float *x, float max, int n) {
    const __m256 vmax = _mm256_set1_ps(max);
    double sum = 0.0;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = expf8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
        _mm256_storeu_ps(x + i, e);
        sum += (double)hsum(e);
    }
    if (i < n) {
        const __m256i m = lanes8(n - i);
        const __m256 e = _mm256_and_ps(expf8(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), vmax)), _mm256_castsi256_ps(m));
        _mm256_maskstore_ps(x + i, m, e);
        sum += (double)hsum(e);
    }
    return sum;
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

AVX2 static void rotate_avx2(float *x, const float *cs, int half, int step, int other) {
    rotate_ref(x, cs, half, step, other); /* fmaf is an instruction here */
}

AVX2 static __m256 load_f16(const pi_fp16 *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* ggml_vec_dot_f16 of the AVX2 build: 4 accumulators of 8 lanes over each 32 values, added
 * (0 + 2) + (1 + 3), reduced by hsum_hadd; the values past the last 32 added in double */
AVX2 static float dot_f16_avx2(const float *a, const pi_fp16 *b, int n) {
    __m256 s[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
    int i = 0;
    for (; i + 32 <= n; i += 32)
        for (int j = 0; j < 4; j++) s[j] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * j), load_f16(b + i + 8 * j), s[j]);
    double sum = (double)hsum_hadd(_mm256_add_ps(_mm256_add_ps(s[0], s[2]), _mm256_add_ps(s[1], s[3])));
    for (; i < n; i++) sum += (double)(a[i] * pi_fp16_to_f32(b[i]));
    return (float)sum;
}

AVX2 static void scores_f16_avx2(const float *q, const pi_fp16 *k, size_t stride, int n, int hd, float scale,
                                 float *out) {
    for (int p = 0; p < n; p++) out[p] = dot_f16_avx2(q, k + (size_t)p * stride, hd) * scale;
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

/* 8 values of lane l's sum (see mix_f16_avx2): the positions j * 8 + l of each 32 into
 * accumulator a[j], added (0 + 2) + (1 + 3) */
AVX2 static __m256 mix_lane8(const float *p, const pi_fp16 *v, size_t stride, int n, int l) {
    __m256 a[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
    int s = 0;
    for (; s + 32 <= n; s += 32)
        for (int j = 0; j < 4; j++) {
            const int at = s + 8 * j + l;
            a[j] = _mm256_fmadd_ps(load_f16(v + (size_t)at * stride), _mm256_set1_ps(p[at]), a[j]);
        }
    for (int j = 0; j < 4; j++) /* the last, partial step: its missing positions weigh 0 */
        if (s + 8 * j + l < n)
            a[j] = _mm256_fmadd_ps(load_f16(v + (size_t)(s + 8 * j + l) * stride), _mm256_set1_ps(p[s + 8 * j + l]), a[j]);
    return _mm256_add_ps(_mm256_add_ps(a[0], a[2]), _mm256_add_ps(a[1], a[3]));
}

/* out value i = ggml_vec_dot_f16 (AVX2) of V's transposed row i with the weights: position
 * j of each 32 in lane j % 8 of accumulator j / 8. 8 values at a time, their lanes' sums y[l]
 * side by side, then reduced as hsum_hadd reduces a register's lanes */
AVX2 static void mix_f16_avx2(const float *p, const pi_fp16 *v, size_t stride, int n, int hd, float *out) {
    if (hd % 8) {
        mix_f16_ref(p, v, stride, n, hd, out);
        return;
    }
    for (int i = 0; i < hd; i += 8) {
        __m256 y[8];
        for (int l = 0; l < 8; l++) y[l] = mix_lane8(p, v + i, stride, n, l);
        for (int l = 0; l < 4; l++) y[l] = _mm256_add_ps(y[l], y[l + 4]);
        _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_add_ps(y[0], y[1]), _mm256_add_ps(y[2], y[3])));
    }
}

/* each query as its own call: its sums are then exactly that call's */
AVX2 static void scores_f16_tile_avx2(const float *const *q, int nq, const pi_fp16 *k, size_t stride, int n, int hd,
                                      float scale, float *out, size_t ostride) {
    for (int r = 0; r < nq; r++) scores_f16_avx2(q[r], k, stride, n, hd, scale, out + (size_t)r * ostride);
}

AVX2 static void mix_f16_tile_avx2(const float *w, size_t wstride, const int *lo, const int *hi, int nq, const pi_fp16 *v,
                                   size_t stride, int hd, float *const *out) {
    for (int r = 0; r < nq; r++)
        mix_f16_avx2(w + (size_t)r * wstride + lo[r], v + (size_t)lo[r] * stride, stride, hi[r] - lo[r] + 1, hd, out[r]);
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
/* ---- AVX-512: ggml's AVX-512 build, 16 lanes and 4 accumulators (64 values) a step ---- */

AVX512 static __m512 load_f16x16(const pi_fp16 *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

/* GCC's _mm512_reduce_add_ps, which ggml's reductions call: halves, halves, then lanes (0 + 2) +
 * (1 + 3); spelled out so that another compiler's order does not change it */
AVX512 static float hsum16(__m512 v) {
    const __m256 t = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    const __m128 h = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    const __m128 u = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
}

/* ggml_vec_soft_max_f32 of the AVX-512 build: ggml's expf 16 lanes at a time, each group's sum
 * (hsum16) added in double; a last partial group completed with zeros as exp_sub_sum_avx2's */
AVX512 static double exp_sub_sum_avx512(float *x, float max, int n) {
    const __m512 vmax = _mm512_set1_ps(max);
    double sum = 0.0;
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 e = _mm512_maskz_mov_ps(m, expf16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmax)));
        _mm512_mask_storeu_ps(x + i, m, e);
        sum += (double)hsum16(e);
    }
    return sum;
}

/* ggml_vec_dot_f16 of the AVX-512 build: 4 accumulators of 16 lanes over each 64 values, added
 * (0 + 2) + (1 + 3), reduced by hsum16; the values past the last 64 added in double */
AVX512 static float dot_f16_avx512(const float *a, const pi_fp16 *b, int n) {
    __m512 s[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps() };
    int i = 0;
    for (; i + 64 <= n; i += 64)
        for (int j = 0; j < 4; j++)
            s[j] = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16 * j), load_f16x16(b + i + 16 * j), s[j]);
    double sum = (double)hsum16(_mm512_add_ps(_mm512_add_ps(s[0], s[2]), _mm512_add_ps(s[1], s[3])));
    for (; i < n; i++) sum += (double)(a[i] * pi_fp16_to_f32(b[i]));
    return (float)sum;
}

/* hsum16's first two steps for the sums of 4 keys at once, two keys a register per step: key c's
 * h in 128-bit lane c */
AVX512 static __m512 hsum16_h4(const __m512 s[4]) {
    const __m512 t01 = _mm512_add_ps(_mm512_shuffle_f32x4(s[0], s[1], 0x44), _mm512_shuffle_f32x4(s[0], s[1], 0xee));
    const __m512 t23 = _mm512_add_ps(_mm512_shuffle_f32x4(s[2], s[3], 0x44), _mm512_shuffle_f32x4(s[2], s[3], 0xee));
    return _mm512_add_ps(_mm512_shuffle_f32x4(t01, t23, 0x88), _mm512_shuffle_f32x4(t01, t23, 0xdd));
}

/* four keys' hsum16s at once: the same tree, two keys a register per step */
AVX512 static __m128 hsum16x4(const __m512 s[4]) {
    const __m512 h = hsum16_h4(s);
    const __m512 u = _mm512_add_ps(h, _mm512_permute_ps(h, 0x4e)); /* each key: h0 + h2, h1 + h3 */
    const __m512 w = _mm512_add_ps(u, _mm512_permute_ps(u, 0xb1));
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), w));
}

/* two queries' hsum16x4s at once: the last two steps of both in the same registers (a's h0 + h2,
 * h1 + h3, then b's, in each key's lane); a's four sums low, b's high */
AVX512 static __m256 hsum16x4x2(const __m512 a[4], const __m512 b[4]) {
    const __m512 ha = hsum16_h4(a), hb = hsum16_h4(b);
    const __m512 u = _mm512_add_ps(_mm512_shuffle_ps(ha, hb, 0x44), _mm512_shuffle_ps(ha, hb, 0xee));
    const __m512 w = _mm512_add_ps(u, _mm512_permute_ps(u, 0xb1));
    const __m512i at = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps256(_mm512_permutexvar_ps(at, w));
}

/* the scores of 4 keys (rows stride apart) from their sums as dot_f16_avx512 ends: the values
 * past the last 64 added in double, then times scale; with none, (float)(double)sum is sum */
AVX512 static inline void scores_x4(const float *q, const pi_fp16 *k, size_t stride, int full, int hd, float scale,
                                    __m128 sum, float *out) {
    if (full == hd) {
        _mm_storeu_ps(out, _mm_mul_ps(sum, _mm_set1_ps(scale)));
        return;
    }
    float f[4];
    _mm_storeu_ps(f, sum);
    for (int c = 0; c < 4; c++) {
        const pi_fp16 *kc = k + (size_t)c * stride;
        double d = (double)f[c];
        for (int i = full; i < hd; i++) d += (double)(q[i] * pi_fp16_to_f32(kc[i]));
        out[c] = (float)d * scale;
    }
}

/* dot_f16_avx512 of four keys at a time: their accumulators side by side, reduced together */
AVX512 static void scores_f16_avx512(const float *q, const pi_fp16 *k, size_t stride, int n, int hd, float scale,
                                     float *out) {
    const int full = hd / 64 * 64;
    int p = 0;
    for (; p + 4 <= n; p += 4) {
        __m512 r[4];
        for (int c = 0; c < 4; c++) {
            const pi_fp16 *kc = k + (size_t)(p + c) * stride;
            __m512 a[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps() };
            for (int i = 0; i < full; i += 64)
                for (int j = 0; j < 4; j++)
                    a[j] = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16 * j), load_f16x16(kc + i + 16 * j), a[j]);
            r[c] = _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]));
        }
        scores_x4(q, k + (size_t)p * stride, stride, full, hd, scale, hsum16x4(r), out + p);
    }
    for (; p < n; p++) out[p] = dot_f16_avx512(q, k + (size_t)p * stride, hd) * scale;
}

/* 16 values of a row, or its last 8 (the rest zeros) when only 8 are left */
AVX512 static __m512 load_f16x(const pi_fp16 *p, int eight) {
    return eight ? _mm512_cvtph_ps(_mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)p))) : load_f16x16(p);
}

/* the lanes' sums y reduced as hsum16 reduces a register's lanes, into 16 values (or 8) of out */
AVX512 static void mix_store(__m512 y[16], int eight, float *out) {
    for (int w = 8; w >= 2; w /= 2) /* halves, halves, then (0 + 2) and (1 + 3) */
        for (int l = 0; l < w; l++) y[l] = _mm512_add_ps(y[l], y[l + w]);
    _mm512_mask_storeu_ps(out, eight ? 0x00ff : 0xffff, _mm512_add_ps(y[0], y[1]));
}

/* rows of V a window holds: 16 values (floats) of each, 32 KiB, which L1/L2 keep close while
 * every query of a group sums over them */
enum { MIX_ROWS = 512, MIX_STEPS = MIX_ROWS / 16 };

/* the 16 values (or 8, then zeros) at column i of rows [w0, w1) into x lane by lane: row
 * w0 + 16 s + l at x[l][s], so that the rows one lane sums are consecutive (16 apart in the cache
 * they would share a few L1 sets) */
AVX512 static void mix_window(const pi_fp16 *v, size_t stride, int i, int eight, int w0, int w1, float *x) {
    for (int r = w0; r < w1; r++)
        _mm512_store_ps(x + (size_t)((r - w0) % 16 * MIX_STEPS + (r - w0) / 16) * 16, load_f16x(v + (size_t)r * stride + i, eight));
}

/* Lane l of a window for nq queries (a constant once inlined): row w0 + 16 s + l times query q's
 * weight fma'd into a[q][s % 4], as mix_f16_group_avx512 places it; each x row loaded once for all of
 * them, each query stopping at its own n[q] rows. */
static inline __attribute__((always_inline)) AVX512 void mix_lane(const float *x, const float *const *p, const int *n,
                                                                   int nq, int w0, int l, __m512 a[4][4]) {
    int last[4], common = MIX_STEPS, most = 0; /* steps whose row each query has */
    for (int q = 0; q < nq; q++) {
        const int s = (n[q] - w0 - l + 15) / 16;
        last[q] = s < 0 ? 0 : s > MIX_STEPS ? MIX_STEPS : s;
        common = last[q] < common ? last[q] : common;
        most = last[q] > most ? last[q] : most;
    }
    int s = 0;
    for (; s + 4 <= common; s += 4)
        for (int j = 0; j < 4; j++) {
            const __m512 r = _mm512_load_ps(x + (size_t)(s + j) * 16);
            for (int q = 0; q < nq; q++) a[q][j] = _mm512_fmadd_ps(r, _mm512_set1_ps(p[q][w0 + 16 * (s + j) + l]), a[q][j]);
        }
    for (; s < most; s += 4) /* the queries' ends: a row past one's last weighs nothing there */
        for (int j = 0; j < 4; j++)
            for (int q = 0; q < nq; q++)
                if (s + j < last[q])
                    a[q][j] = _mm512_fmadd_ps(_mm512_load_ps(x + (size_t)(s + j) * 16),
                                              _mm512_set1_ps(p[q][w0 + 16 * (s + j) + l]), a[q][j]);
}

/* One window's lanes for nq queries (a constant once inlined): their accumulators carried across
 * windows in spill, and after the last window reduced into values i.. of out. */
static inline __attribute__((always_inline)) AVX512 void mix_window_queries(
    const float *x, const float *const *p, const int *n, int nq, int w0, int last, __m512 spill[][16][4], int i,
    int eight, float *const *out) {
    __m512 y[4][16];
    for (int l = 0; l < 16; l++) {
        __m512 a[4][4];
        for (int q = 0; q < nq; q++)
            for (int j = 0; j < 4; j++) a[q][j] = w0 ? spill[q][l][j] : _mm512_setzero_ps();
        mix_lane(x + (size_t)l * MIX_STEPS * 16, p, n, nq, w0, l, a);
        for (int q = 0; q < nq; q++)
            if (last)
                y[q][l] = _mm512_add_ps(_mm512_add_ps(a[q][0], a[q][2]), _mm512_add_ps(a[q][1], a[q][3]));
            else
                for (int j = 0; j < 4; j++) spill[q][l][j] = a[q][j];
    }
    for (int q = 0; last && q < nq; q++) mix_store(y[q], eight, out[q] + i);
}

/* out[q] value i = ggml_vec_dot_f16 (AVX-512) of V's transposed row i with query q's n[q]
 * weights p[q]: position j of each 64 in lane j % 16 of accumulator j / 16, the accumulators added
 * (0 + 2) + (1 + 3), the lanes' sums then reduced as hsum16 reduces a register's. The queries'
 * rows all start at v's first, so their lanes line up: 16 values at a time, each window of V is
 * converted once for all of them, and four queries sum a lane together. */
AVX512 static void mix_f16_group_avx512(const float *const *p, const int *n, int nq, const pi_fp16 *v, size_t stride,
                                        int hd, float *const *out) {
    int rows = 0;
    for (int q = 0; q < nq; q++) rows = n[q] > rows ? n[q] : rows;
    _Alignas(64) float x[MIX_ROWS * 16];
    __m512 spill[PI_ATT_ROWS][16][4]; /* past one window: each query's lanes' accumulators */
    for (int i = 0; i < hd; i += 16) {
        const int eight = hd - i == 8;
        for (int w0 = 0; w0 < rows; w0 += MIX_ROWS) {
            const int w1 = rows - w0 < MIX_ROWS ? rows : w0 + MIX_ROWS, last = w1 == rows;
            mix_window(v, stride, i, eight, w0, w1, x);
            for (int g = 0; g < nq; g += 4) {
                const float *const *pg = p + g;
                switch (nq - g) {
                case 1: mix_window_queries(x, pg, n + g, 1, w0, last, spill + g, i, eight, out + g); break;
                case 2: mix_window_queries(x, pg, n + g, 2, w0, last, spill + g, i, eight, out + g); break;
                case 3: mix_window_queries(x, pg, n + g, 3, w0, last, spill + g, i, eight, out + g); break;
                default: mix_window_queries(x, pg, n + g, 4, w0, last, spill + g, i, eight, out + g);
                }
            }
        }
    }
}

AVX512 static void mix_f16_avx512(const float *p, const pi_fp16 *v, size_t stride, int n, int hd, float *out) {
    if (hd % 8)
        mix_f16_ref(p, v, stride, n, hd, out);
    else
        mix_f16_group_avx512(&p, &n, 1, v, stride, hd, &out);
}

/* accumulators h and h + 2 of dot_f16_avx512 of nq (1 or 2) queries against 4 keys already in
 * float (kf, rows of full floats, full a multiple of 64), added */
AVX512 static inline void sums_h_x4_avx512(const float *const q[2], int nq, const float *kf, int full, int h,
                                           __m512 s[2][4]) {
    __m512 a[2][4], b[2][4];
    for (int t = 0; t < nq; t++)
        for (int c = 0; c < 4; c++) a[t][c] = b[t][c] = _mm512_setzero_ps();
    for (int i = 0; i < full; i += 64) {
        __m512 x[2], y[2], u[4], v[4];
        for (int t = 0; t < nq; t++) {
            x[t] = _mm512_loadu_ps(q[t] + i + 16 * h);
            y[t] = _mm512_loadu_ps(q[t] + i + 16 * h + 32);
        }
        for (int c = 0; c < 4; c++) {
            u[c] = _mm512_load_ps(kf + c * full + i + 16 * h);
            v[c] = _mm512_load_ps(kf + c * full + i + 16 * h + 32);
            /* in registers: GCC would fold each load into both queries' fmas, 20 loads for 16 fmas,
             * more than the one zmm load a cycle (it puts h = 0's sums on the stack instead) */
            __asm__("" : "+v"(u[c]), "+v"(v[c]));
        }
        for (int t = 0; t < nq; t++)
            for (int c = 0; c < 4; c++) {
                a[t][c] = _mm512_fmadd_ps(x[t], u[c], a[t][c]);
                b[t][c] = _mm512_fmadd_ps(y[t], v[c], b[t][c]);
            }
    }
    for (int t = 0; t < nq; t++)
        for (int c = 0; c < 4; c++) s[t][c] = _mm512_add_ps(a[t][c], b[t][c]);
}

/* the sums r = (a0 + a2) + (a1 + a3) of dot_f16_avx512 of nq queries against 4 keys in float:
 * accumulators 0 and 2 first, then 1 and 3, so that 2 x 4 pairs' chains fit the 32 registers */
AVX512 static inline void sums_x4_avx512(const float *const q[2], int nq, const float *kf, int full, __m512 r[2][4]) {
    __m512 e[2][4], o[2][4];
    sums_h_x4_avx512(q, nq, kf, full, 0, e);
    sums_h_x4_avx512(q, nq, kf, full, 1, o);
    for (int t = 0; t < nq; t++)
        for (int c = 0; c < 4; c++) r[t][c] = _mm512_add_ps(e[t][c], o[t][c]);
}

/* floats of a block of 4 keys converted on the stack (16 KiB): heads up to 1024; longer ones are
 * scored a query at a time */
enum { SCORES_KF = 4 * 1024 };

/* keys 4 at a time, each block converted to float once and scored against every query (two at a
 * time, the last one alone) while it stays in L1: the keys are read from memory once a tile, not
 * once a query pair, and converted once. Each sum dot_f16_avx512's (4 keys' reduced by hsum16x4's
 * tree, see scores_x4); the last n % 4 keys' alone */
AVX512 static void scores_f16_tile_avx512(const float *const *q, int nq, const pi_fp16 *k, size_t stride, int n,
                                          int hd, float scale, float *out, size_t ostride) {
    const int full = hd / 64 * 64;
    if (4 * full > SCORES_KF) {
        for (int r = 0; r < nq; r++) scores_f16_avx512(q[r], k, stride, n, hd, scale, out + (size_t)r * ostride);
        return;
    }
    _Alignas(64) float kf[SCORES_KF];
    int p = 0;
    for (; p + 4 <= n; p += 4) {
        const pi_fp16 *kp = k + (size_t)p * stride;
        for (int c = 0; c < 4; c++)
            for (int i = 0; i < full; i += 16)
                _mm512_store_ps(kf + c * full + i, load_f16x16(kp + (size_t)c * stride + i));
        __m512 s[2][4];
        int r = 0;
        for (; r + 2 <= nq; r += 2) {
            sums_x4_avx512(q + r, 2, kf, full, s);
            const __m256 sum = hsum16x4x2(s[0], s[1]);
            scores_x4(q[r], kp, stride, full, hd, scale, _mm256_castps256_ps128(sum), out + (size_t)r * ostride + p);
            scores_x4(q[r + 1], kp, stride, full, hd, scale, _mm256_extractf128_ps(sum, 1),
                      out + (size_t)(r + 1) * ostride + p);
        }
        if (r < nq) {
            sums_x4_avx512(q + r, 1, kf, full, s);
            scores_x4(q[r], kp, stride, full, hd, scale, hsum16x4(s[0]), out + (size_t)r * ostride + p);
        }
    }
    for (; p < n; p++)
        for (int r = 0; r < nq; r++)
            out[(size_t)r * ostride + p] = dot_f16_avx512(q[r], k + (size_t)p * stride, hd) * scale;
}

/* each run of queries whose rows start together (a causal block's) as one group */
AVX512 static void mix_f16_tile_avx512(const float *w, size_t wstride, const int *lo, const int *hi, int nq,
                                       const pi_fp16 *v, size_t stride, int hd, float *const *out) {
    const float *p[PI_ATT_ROWS];
    int n[PI_ATT_ROWS];
    for (int r = 0, run; r < nq; r += run) {
        for (run = 0; r + run < nq && lo[r + run] == lo[r]; run++) {
            p[run] = w + (size_t)(r + run) * wstride + lo[r];
            n[run] = hi[r + run] - lo[r] + 1;
        }
        if (hd % 8)
            for (int q = 0; q < run; q++) mix_f16_ref(p[q], v + (size_t)lo[r] * stride, stride, n[q], hd, out[r + q]);
        else
            mix_f16_group_avx512(p, n, run, v + (size_t)lo[r] * stride, stride, hd, out + r);
    }
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
    *v = (pi_vec_ops){ "ref", axpy_ref, max_ref, exp_sub_sum_ref, silu_mul_ref, rotate_ref,
                       scores_f16_ref, probs_f16_ref, mix_f16_ref, mix_q8_0_ref, to_f16_ref,
                       scores_f16_tile_ref, mix_f16_tile_ref };
#if defined(__x86_64__)
    if (impl == PI_IMPL_REF || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        !__builtin_cpu_supports("f16c"))
        return;
    *v = (pi_vec_ops){ "avx2", axpy_avx2, max_avx2, exp_sub_sum_avx2, silu_mul_avx2, rotate_avx2,
                       scores_f16_avx2, probs_f16_avx2, mix_f16_avx2, mix_q8_0_avx2, to_f16_avx2,
                       scores_f16_tile_avx2, mix_f16_tile_avx2 };
    if (impl != PI_IMPL_AVX2 && __builtin_cpu_supports("avx512f")) {
        v->name = "avx512";
        v->exp_sub_sum = exp_sub_sum_avx512;
        v->silu_mul = silu_mul_avx512;
        v->scores_f16 = scores_f16_avx512;
        v->mix_f16 = mix_f16_avx512;
        v->scores_f16_tile = scores_f16_tile_avx512;
        v->mix_f16_tile = mix_f16_tile_avx512;
    }
#else
    (void)impl;
#endif
}
