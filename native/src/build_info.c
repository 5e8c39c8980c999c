/* build_info.c - build facts, and what a build without nvcc answers for the CUDA entry points. */
#include "powerinfer.h"

#ifndef PI_HAVE_CUDA
PI_API int pi_cuda_device_count(void) { return 0; }
#endif

PI_API const char *pi_build_info(void) {
    return "cpu"
#ifdef PI_HAVE_X86
           " x86"
#endif
#ifdef PI_CUDA_EMULATOR
           " cuda-emulator"
#elif defined(PI_HAVE_CUDA)
           " cuda"
#endif
#ifdef PI_SANITIZE
           " sanitize"
#endif
        ;
}
