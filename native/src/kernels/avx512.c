/* avx512.c - the AVX-512 (F/BW/VL/DQ/VNNI) tier: walk.h's matmul and axpy_rows on
 * isa_avx512.h's instructions, simd.h's dequant, kquants.h's K-quant kernels and this file's
 * activation quantizer, in a table. Compiled for that set alone and installed only when the CPU
 * has it. */
#include "walk.h"
#include "group_tiles.h"
#include "kquants.h"
#include "table.h"

/* ---- activations ---- */

/* x * id rounded to nearest even (the MXCSR default), clamped as the reference does. */
INLINE __m512i round_scaled(__m512 x, __m512 id) {
    const __m512 v = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(x, id), _mm512_set1_ps(-127.0f)),
                                   _mm512_set1_ps(127.0f));
    return _mm512_cvtps_epi32(v);
}

static void quantize_act(const float *x, block_q8x *y, int n) {
    const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (int b = 0; b < n / QK; b++, x += QK, y++) {
        const __m512 lo = _mm512_loadu_ps(x), hi = _mm512_loadu_ps(x + 16);
        /* max_ps returns its second operand when one is NaN, so NaNs drop out as in the reference. */
        const __m512 lane_max = _mm512_max_ps(_mm512_and_ps(hi, abs_mask),
                                              _mm512_max_ps(_mm512_and_ps(lo, abs_mask), _mm512_setzero_ps()));
        const float amax = _mm512_reduce_max_ps(lane_max);
        const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const __m512i qlo = round_scaled(lo, _mm512_set1_ps(id)), qhi = round_scaled(hi, _mm512_set1_ps(id));
        _mm_storeu_si128((__m128i *)y->qs, _mm512_cvtepi32_epi8(qlo));
        _mm_storeu_si128((__m128i *)(y->qs + 16), _mm512_cvtepi32_epi8(qhi));
        pi_act_block_scales(y, d, _mm512_reduce_add_epi32(_mm512_add_epi32(qlo, qhi)));
    }
}

/* ---- the table ---- */

PI_KERNEL_TABLE(fill_table, quantize_act, quantize_act_k, matmul, dequant, axpy_rows, kq_matmul, kq_dequant,
                kq_axpy_rows)
PI_GROUPED_TABLE(fill_grouped, matmul_grouped)

void pi_kernels_avx512(pi_kernels *k) {
    fill_table(k, "avx512");
    fill_grouped(k);
}
