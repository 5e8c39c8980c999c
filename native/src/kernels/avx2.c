/* avx2.c - the AVX2 + FMA + F16C tier, for x86 CPUs without AVX-512: walk.h's matmul and
 * axpy_rows on isa_avx2.h's instructions, simd.h's dequant, kquants.h's K-quant kernels and
 * this file's activation quantizer, in a table. Compiled for that set alone and installed only
 * when the CPU has it. */
#include "walk.h"
#include "group_tiles.h"
#include "kquants.h"
#include "table.h"

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
        const float amax_s = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m))), d = amax_s / 127.0f;
        const __m256 id = _mm256_set1_ps(amax_s != 0.0f ? 127.0f / amax_s : 0.0f);
        __m256i q[4];
        for (int k = 0; k < 4; k++) q[k] = round_scaled(v[k], id);
        /* The packs interleave 128-bit lanes; the permute puts the 8 dword groups back in order. */
        const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *)y->qs, _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
        const __m256i sum8 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum8), _mm256_extracti128_si256(sum8, 1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
        pi_act_block_scales(y, d, _mm_cvtsi128_si32(s));
    }
}

/* ---- the table ---- */

PI_KERNEL_TABLE(fill_table, quantize_act, quantize_act_k, matmul, dequant, axpy_rows, kq_matmul, kq_dequant,
                kq_axpy_rows)
PI_GROUPED_TABLE(fill_grouped, matmul_grouped)

void pi_kernels_avx2(pi_kernels *k) {
    fill_table(k, "avx2");
    fill_grouped(k);
}
