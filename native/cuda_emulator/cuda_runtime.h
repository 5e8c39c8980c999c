// cuda_runtime.h - the part of the CUDA runtime that native/src/cuda/*.cu uses, run on the CPU.
//
// With -DPI_CUDA_EMULATOR=ON the .cu files are compiled as C++ against this folder instead of
// nvcc's headers, so the device kernels run, and are tested against the CPU, on machines with no
// GPU. It is a checker, not a backend: one device thread executes the queued work in order (so a
// host that reads a result before waiting for it races, as on a GPU), and each thread block runs
// its threads as fibers that switch at the barriers. What it refuses, with cudaErrorLaunchFailure
// and a message on stderr: a barrier or shuffle some thread of the block or warp never reaches,
// a shuffle naming an exited lane, copies outside an allocation or in the wrong direction, and a
// kernel handed a host pointer where it takes a pointer. What it cannot see: reads of host memory
// through pointers inside structs, data races between threads of a block, and timing.
#ifndef PI_CUDA_EMULATOR_RUNTIME_H
#define PI_CUDA_EMULATOR_RUNTIME_H
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __shared__ static // one block runs at a time: its shared memory is the function's statics
#define __forceinline__ inline

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

// the running thread's coordinates, set by the scheduler before it resumes a thread
extern dim3 threadIdx, blockIdx, blockDim, gridDim;

enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorLaunchFailure = 719,
};
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3 };
enum { cudaStreamNonBlocking = 1, cudaEventDisableTiming = 2 };

typedef struct pi_emu_stream *cudaStream_t;
typedef struct pi_emu_event *cudaEvent_t;

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);

// the typed forms nvcc's header has
template <class T> cudaError_t cudaMalloc(T **p, size_t bytes) { return cudaMalloc((void **)p, bytes); }
template <class T> cudaError_t cudaMallocHost(T **p, size_t bytes) { return cudaMallocHost((void **)p, bytes); }

// ---- in kernels ----

void __syncthreads(void);
float __shfl_xor_sync(unsigned mask, float v, int lane_mask);
inline int atomicAdd(int *p, int v) { // threads never run at once: a plain add is atomic
    const int old = *p;
    *p += v;
    return old;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

// ---- launches ----

namespace pi_emu {
bool is_device_pointer(const void *p);
void launch(dim3 grid, dim3 block, cudaStream_t s, const char *name, std::function<void()> body, bool args_ok);

template <class T> bool arg_ok(const T &) { return true; }
template <class T> bool arg_ok(T *p) { return p == nullptr || is_device_pointer(p); }

template <class... P> struct launcher {
    void (*kernel)(P...);
    dim3 grid, block;
    cudaStream_t stream;
    const char *name;
    // the arguments are copied at the launch, as CUDA copies them
    template <class... A> void operator()(A &&...a) const {
        std::tuple<std::decay_t<P>...> args(std::forward<A>(a)...);
        const bool ok = std::apply([](const auto &...v) { return (arg_ok(v) && ...); }, args);
        void (*k)(P...) = kernel;
        launch(grid, block, stream, name, [k, args]() { std::apply(k, args); }, ok);
    }
};

template <class... P>
launcher<P...> make_launcher(void (*k)(P...), dim3 grid, dim3 block, cudaStream_t s, const char *n) {
    return launcher<P...>{ k, grid, block, s, n };
}
} // namespace pi_emu

#define PI_LAUNCH(kernel, grid, block, stream) pi_emu::make_launcher(kernel, dim3(grid), dim3(block), stream, #kernel)

#endif
