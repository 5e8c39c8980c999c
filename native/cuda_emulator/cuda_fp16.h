// cuda_fp16.h - CUDA's __half on the CPU, for the emulator (cuda_runtime.h): IEEE binary16 in
// its bits, converted with round-to-nearest-even as __float2half does.
#ifndef PI_CUDA_EMULATOR_FP16_H
#define PI_CUDA_EMULATOR_FP16_H
#include <cstdint>
#include <cstring>

struct __half {
    uint16_t bits;
};

inline float __half2float(__half h) {
    const uint32_t sign = (uint32_t)(h.bits & 0x8000) << 16, exp = (h.bits >> 10) & 31, mant = h.bits & 0x3ff;
    uint32_t out;
    if (exp == 31) {
        out = sign | 0x7f800000 | mant << 13;
    } else if (exp) {
        out = sign | (exp + 112) << 23 | mant << 13;
    } else { // zero or subnormal: mant * 2^-24, exact in float
        float f = (float)mant * 5.9604644775390625e-8f;
        std::memcpy(&out, &f, 4);
        out |= sign;
    }
    float f;
    std::memcpy(&f, &out, 4);
    return f;
}

inline __half __float2half(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    const uint32_t abs = x & 0x7fffffff;
    if (abs > 0x7f800000) return __half{ (uint16_t)(sign | 0x7e00) };  // NaN
    if (abs >= 0x477ff000) return __half{ (uint16_t)(sign | 0x7c00) }; // inf, and what rounds past 65504
    if (abs < 0x38800000) { // below 2^-14: a subnormal, in units of 2^-24 (rint: nearest even)
        float a;
        std::memcpy(&a, &abs, 4);
        return __half{ (uint16_t)(sign | (uint16_t)__builtin_rintf(a * 16777216.0f)) };
    }
    const uint32_t odd = (abs >> 13) & 1; // round to nearest, ties to even, with the exponent's rebias
    return __half{ (uint16_t)(sign | ((abs - (112u << 23) + 0xfff + odd) >> 13)) };
}

inline __half __ushort_as_half(unsigned short bits) { return __half{ bits }; }

#endif
