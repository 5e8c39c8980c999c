/* dispatch.c - fill the kernel table once: the reference first, then the SIMD tiers the CPU
 * (and the OS, which __builtin_cpu_supports also checks) can run. */
#include "kernels.h"

#if defined(PI_HAVE_X86)
static int cpu_has_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

static int cpu_has_avx512(void) {
    return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
}
#else
static int cpu_has_avx2(void) { return 0; }
static int cpu_has_avx512(void) { return 0; }
#endif

int pi_kernels_init(pi_kernels *k, int impl) {
    pi_kernels_ref(k);
    if (impl == PI_IMPL_AUTO) impl = cpu_has_avx512() ? PI_IMPL_AVX512 : cpu_has_avx2() ? PI_IMPL_AVX2 : PI_IMPL_REF;
    switch (impl) {
    case PI_IMPL_REF: return 0;
#if defined(PI_HAVE_X86)
    case PI_IMPL_AVX2:
        if (!cpu_has_avx2()) return -1;
        pi_kernels_avx2(k);
        return 0;
    case PI_IMPL_AVX512:
        if (!cpu_has_avx512()) return -1;
        pi_kernels_avx2(k);
        pi_kernels_avx512(k);
        return 0;
#endif
    default: return -1;
    }
}
