// device.cu - CUDA device discovery, compiled and linked by every nvcc build (CI's too, where no
// GPU is present).
#include <cuda_runtime.h>

#include "powerinfer.h"

extern "C" PI_API int pi_cuda_device_count(void) {
    int n = 0;
    // no driver or no device is an ordinary answer here, not an error
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky error state
        return 0;
    }
    return n;
}
