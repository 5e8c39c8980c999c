/* common.h - what every kernel tier and the K-quant kernels use: row addressing, the prefetch
 * distance, unaligned loads and, where AVX2 is on, the sum of a ymm's lanes. It calls nothing of
 * theirs, so the tiers (ref.c, avx2.c, avx512.c) and the headers they share all sit above it.
 * Private to native/src/kernels. */
#ifndef PI_KERNELS_COMMON_H
#define PI_KERNELS_COMMON_H
#include <string.h>

#include "kernels.h"
#if defined(__AVX2__)
#include <immintrin.h>
#endif

/* Row i of a matmul call: the idx-th row when a row list is given, else row r0 + i. */
static inline const uint8_t *pi_matmul_row(const void *W, size_t row_bytes, const int32_t *idx, int r0,
                                           int i) {
    return (const uint8_t *)W + (size_t)(idx ? idx[i] : r0 + i) * row_bytes;
}

/* The address to prefetch for row i, `ahead` rows on. Contiguous rows may run past this call's
 * rows, into the caller's next chunk; a prefetch past the weights is a harmless hint, and the
 * address is an integer so no pointer leaves its object. A row list is followed only as far
 * as it goes. */
static inline uintptr_t pi_prefetch_row(const void *W, size_t row_bytes, const int32_t *idx, int r0, int nr, int i,
                                        int ahead) {
    if (idx) return (uintptr_t)pi_matmul_row(W, row_bytes, idx, r0, i + ahead < nr ? i + ahead : nr - 1);
    return (uintptr_t)W + (size_t)(r0 + i + ahead) * row_bytes;
}

/* How many rows ahead of the rows being read a tile should prefetch: about 16 KiB, which
 * covers DRAM latency at full bandwidth; never less than one tile of min_rows. The tiers
 * prefetch into L2 (prefetcht1): on Zen 4 prefetching that far into L1 measured 3x slower
 * streaming, the L1 miss buffers filling with lines not needed yet. */
static inline int pi_prefetch_rows(size_t row_bytes, int min_rows) {
    enum { PREFETCH_BYTES = 16384, MAX_ROWS = 64 };
    const size_t rows = PREFETCH_BYTES / row_bytes;
    return rows < (size_t)min_rows ? min_rows : rows > MAX_ROWS ? MAX_ROWS : (int)rows;
}

#define INLINE static inline __attribute__((always_inline))

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

INLINE uint64_t load_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

#if defined(__AVX2__)
INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
#endif

#endif
