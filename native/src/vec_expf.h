/* vec_expf.h - exp on 8 and 16 float lanes, computed as llama.cpp's CPU backend computes it
 * (ggml's AVX2 and AVX-512 ggml_v_expf, both Arm optimized-routines' expf): the activations of a
 * SwiGLU FFN and the softmax weights then carry llama.cpp's bits, so our 8-bit activations round
 * as its do. x = n ln2 + b with n = round(x / ln2) (by the 1.5 * 2^23 shift) and ln2 in two
 * parts; exp(b) by a degree-5 polynomial in b; 2^n applied last. Lanes with |n| > 192 overflow to
 * +inf or flush to 0, as there. The two widths differ in how 2^n is applied, so in their last bit.
 * Included by vec.c inside its x86 section, under its AVX2 and AVX512 target macros. */
#ifndef PI_VEC_EXPF_H
#define PI_VEC_EXPF_H

#define EXPF_SHIFT 0x1.8p23f
#define EXPF_INV_LN2 0x1.715476p+0f
#define EXPF_LN2_HI 0x1.62e4p-1f
#define EXPF_LN2_LO 0x1.7f7d1cp-20f
#define EXPF_C1 0x1.ffffecp-1f
#define EXPF_C2 0x1.fffdb6p-2f
#define EXPF_C3 0x1.555e66p-3f
#define EXPF_C4 0x1.573e2ep-5f
#define EXPF_C5 0x1.0e4020p-7f

/* AVX2: exp(b) - 1 as the polynomial, then k (1 + p) with k = 2^n built in the exponent bits;
 * for 126 < |n| <= 192 the scale goes in two factors so that neither overflows */
AVX2 static __m256 expf8(__m256 x) {
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(EXPF_INV_LN2), _mm256_set1_ps(EXPF_SHIFT));
    const __m256 n = _mm256_sub_ps(z, _mm256_set1_ps(EXPF_SHIFT));
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXPF_LN2_LO), _mm256_fnmadd_ps(n, _mm256_set1_ps(EXPF_LN2_HI), x));
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
    const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0f))));
    const __m256 abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    const __m256 big = _mm256_cmp_ps(abs_n, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 p = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(EXPF_C5), b, _mm256_set1_ps(EXPF_C4)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(EXPF_C3), b, _mm256_set1_ps(EXPF_C2))),
        u, _mm256_mul_ps(_mm256_set1_ps(EXPF_C1), b));
    if (!_mm256_movemask_ps(big)) return _mm256_fmadd_ps(p, k, k);
    const __m256i g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                       _mm256_set1_epi32((int)0x82000000u));
    const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    const __m256 huge = _mm256_cmp_ps(abs_n, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    const __m256 in_range = _mm256_blendv_ps(_mm256_fmadd_ps(k, p, k), _mm256_mul_ps(_mm256_fmadd_ps(s2, p, s2), s1), big);
    return _mm256_blendv_ps(in_range, _mm256_mul_ps(s1, s1), huge);
}

/* AVX-512: 1 + the polynomial, then scaled by 2^n with vscalefps */
AVX512 static __m512 expf16(__m512 x) {
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(EXPF_INV_LN2), _mm512_set1_ps(EXPF_SHIFT));
    const __m512 n = _mm512_sub_ps(z, _mm512_set1_ps(EXPF_SHIFT));
    const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXPF_LN2_LO), _mm512_fnmadd_ps(n, _mm512_set1_ps(EXPF_LN2_HI), x));
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 p = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(EXPF_C5), b, _mm512_set1_ps(EXPF_C4)), u,
                        _mm512_fmadd_ps(_mm512_set1_ps(EXPF_C3), b, _mm512_set1_ps(EXPF_C2))),
        u, _mm512_fmadd_ps(_mm512_set1_ps(EXPF_C1), b, _mm512_set1_ps(1.0f)));
    const __m512 scaled = _mm512_scalef_ps(p, n);
    const __mmask16 huge = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192.0f), _CMP_GT_OQ);
    if (!huge) return scaled;
    const __mmask16 low = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ);
    return _mm512_mask_blend_ps(huge, scaled, _mm512_mask_blend_ps(low, _mm512_set1_ps(INFINITY), _mm512_setzero_ps()));
}

#endif
