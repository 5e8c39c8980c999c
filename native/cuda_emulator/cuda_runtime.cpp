// cuda_runtime.cpp - the CUDA emulator's runtime (cuda_runtime.h): the device's memory, the device
// thread and its queue, and the threads of a block as fibers meeting at barriers and shuffles.
#include <sys/mman.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda_runtime.h"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif
#if defined(__SANITIZE_ADDRESS__) // told of every stack switch, AddressSanitizer checks the kernels too
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define PI_EMU_ASAN 1
#endif

dim3 threadIdx, blockIdx, blockDim, gridDim;

struct pi_emu_stream {
    uint64_t last = 0; // the ticket of its latest work
};
struct pi_emu_event {
    uint64_t ticket = 0; // done once the device has done this much
};

namespace {

// ---- memory ----

struct allocations {
    std::mutex lock;
    std::map<uintptr_t, size_t> device, pinned; // start -> bytes
};

allocations &memory() {
    static allocations *a = new allocations; // never destroyed: the device thread may outlive statics
    return *a;
}

// [p, p + bytes) lies in one allocation of map
bool inside(const std::map<uintptr_t, size_t> &map, const void *p, size_t bytes) {
    const uintptr_t a = (uintptr_t)p;
    auto it = map.upper_bound(a);
    if (it == map.begin()) return false;
    --it;
    return a + bytes <= it->first + it->second;
}

bool on_device(const void *p, size_t bytes) {
    std::lock_guard<std::mutex> g(memory().lock);
    return inside(memory().device, p, bytes);
}

// ---- errors: a call's own, and the device's, which every later call returns ----

thread_local cudaError_t last_error = cudaSuccess;
std::mutex failure_lock;
cudaError_t device_failure = cudaSuccess;
std::string failure_message;

cudaError_t fail(cudaError_t e, const std::string &why) {
    fprintf(stderr, "CUDA emulator: %s\n", why.c_str());
    last_error = e;
    return e;
}

void device_fails(const std::string &why) {
    fprintf(stderr, "CUDA emulator: %s\n", why.c_str());
    std::lock_guard<std::mutex> g(failure_lock);
    if (device_failure == cudaSuccess) {
        device_failure = cudaErrorLaunchFailure;
        failure_message = "unspecified launch failure (emulator: " + why + ")";
    }
}

cudaError_t device_state() {
    std::lock_guard<std::mutex> g(failure_lock);
    return device_failure;
}

// ---- the device thread: work runs in the order it was queued, as on one stream ----

struct work_queue {
    std::mutex lock;
    std::condition_variable more, finished;
    std::deque<std::function<void()>> items;
    uint64_t queued = 0, done = 0;

    work_queue() {
        std::thread([this] { serve(); }).detach();
    }

    void serve() {
        std::unique_lock<std::mutex> g(lock);
        for (;;) {
            more.wait(g, [this] { return !items.empty(); });
            std::function<void()> item = std::move(items.front());
            items.pop_front();
            g.unlock();
            if (device_state() == cudaSuccess) item(); // after a failure the device does nothing
            g.lock();
            done++;
            finished.notify_all();
        }
    }

    uint64_t submit(std::function<void()> item) {
        std::lock_guard<std::mutex> g(lock);
        items.push_back(std::move(item));
        more.notify_one();
        return ++queued;
    }

    void wait_for(uint64_t ticket) {
        std::unique_lock<std::mutex> g(lock);
        finished.wait(g, [&] { return done >= ticket; });
    }

    void drain() {
        uint64_t all;
        {
            std::lock_guard<std::mutex> g(lock);
            all = queued;
        }
        wait_for(all);
    }
};

work_queue &device() {
    static work_queue *q = new work_queue; // never destroyed: its thread waits on it until exit
    return *q;
}

cudaError_t enqueue(cudaStream_t s, std::function<void()> item) {
    if (!s) return fail(cudaErrorInvalidValue, "no stream");
    s->last = device().submit(std::move(item));
    return device_state();
}

// ---- fibers: the threads of one block, switching only at barriers ----

#if defined(__x86_64__)
// saves the callee-saved registers on the current stack, stores its pointer in *from, and
// resumes the stack at `to` (no signal mask to save, unlike swapcontext's system call)
extern "C" void pi_emu_switch(void **from, void *to);
asm(R"(
    .text
    .globl pi_emu_switch
    .hidden pi_emu_switch
    .type pi_emu_switch, @function
pi_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size pi_emu_switch, .-pi_emu_switch
)");
#endif

// a thread's registers, and for AddressSanitizer the stack it runs on (the scheduler's is learnt
// when a fiber first starts)
struct context {
#if defined(__x86_64__)
    void *sp = nullptr;
#else
    ucontext_t uc;
#endif
    const void *stack = nullptr;
    size_t stack_bytes = 0;
    void *fake_stack = nullptr;
};

// a context that enters f on the stack [base, base + size)
void context_init(context &c, char *base, size_t size, void (*f)()) {
#if defined(PI_EMU_ASAN)
    ASAN_UNPOISON_MEMORY_REGION(base, size); // a stack reused from a block that stopped midway
#endif
    c.stack = base;
    c.stack_bytes = size;
#if defined(__x86_64__)
    uint64_t *sp = (uint64_t *)((uintptr_t)(base + size) & ~(uintptr_t)15);
    *--sp = 0;               // f's return address: it never returns
    *--sp = (uint64_t)f;     // where pi_emu_switch's ret goes, the stack then as after a call
    for (int i = 0; i < 6; i++) *--sp = 0; // the registers it pops
    c.sp = sp;
#else
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = base;
    c.uc.uc_stack.ss_size = size;
    c.uc.uc_link = nullptr;
    makecontext(&c.uc, f, 0);
#endif
}

void context_switch(context &from, context &to) {
#if defined(PI_EMU_ASAN)
    __sanitizer_start_switch_fiber(&from.fake_stack, to.stack, to.stack_bytes);
#endif
#if defined(__x86_64__)
    pi_emu_switch(&from.sp, to.sp);
#else
    swapcontext(&from.uc, &to.uc);
#endif
#if defined(PI_EMU_ASAN)
    __sanitizer_finish_switch_fiber(from.fake_stack, nullptr, nullptr); // back in `from`
#endif
}

enum { MAX_THREADS = 1024, STACK_BYTES = 128 << 10, GUARD_BYTES = 4096 };
enum state { READY, AT_SHUFFLE, AT_SYNC, DONE };

struct fiber {
    context ctx;
    state st;
    unsigned gen; // the barrier generation it waits to see pass
};

struct warp {
    unsigned present, arrived, mask, gen; // lane bit sets
    float slot[2][32];                    // by generation parity: a lane may run ahead one shuffle
};

// the block being run (the device thread's alone)
struct block_run {
    std::vector<fiber> fibers;
    std::vector<char *> stacks; // with a guard page below each
    std::vector<warp> warps;
    unsigned n = 0, sync_arrived = 0, sync_gen = 0, current = 0;
    context scheduler;
    const std::function<void()> *body = nullptr;
    std::string error;
} run;

void yield() { context_switch(run.fibers[run.current].ctx, run.scheduler); }

// a kernel's thread breaks a rule: the block stops here
[[noreturn]] void kernel_error(const std::string &why) {
    if (run.error.empty()) run.error = why;
    run.fibers[run.current].st = DONE;
    yield();
    __builtin_unreachable();
}

void fiber_main() {
#if defined(PI_EMU_ASAN) // entered from the scheduler, whose stack this names
    __sanitizer_finish_switch_fiber(nullptr, &run.scheduler.stack, &run.scheduler.stack_bytes);
#endif
    (*run.body)();
    run.fibers[run.current].st = DONE;
    yield();
    __builtin_unreachable();
}

char *stack(unsigned i) {
    while (run.stacks.size() <= i) {
        void *p = mmap(nullptr, STACK_BYTES + GUARD_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return nullptr;
        mprotect(p, GUARD_BYTES, PROT_NONE); // an overflow faults rather than writing a neighbour
        run.stacks.push_back((char *)p + GUARD_BYTES);
    }
    return run.stacks[i];
}

bool ready(const fiber &f, unsigned i) {
    switch (f.st) {
    case READY: return true;
    case AT_SHUFFLE: return run.warps[i / 32].gen != f.gen;
    case AT_SYNC: return run.sync_gen != f.gen;
    default: return false;
    }
}

void set_thread_index(unsigned i) {
    threadIdx = dim3(i % blockDim.x, i / blockDim.x % blockDim.y, i / (blockDim.x * blockDim.y));
}

// every thread of the block at blockIdx, to the end or to a rule broken; "" or the error
std::string run_block(const std::function<void()> &body) {
    const unsigned n = blockDim.x * blockDim.y * blockDim.z;
    run.n = n;
    run.body = &body;
    run.error.clear();
    run.sync_arrived = run.sync_gen = 0;
    run.fibers.assign(n, fiber{});
    run.warps.assign((n + 31) / 32, warp{});
    for (unsigned i = 0; i < n; i++) {
        char *s = stack(i);
        if (!s) return "no memory for the block's stacks";
        context_init(run.fibers[i].ctx, s, STACK_BYTES, fiber_main);
        run.fibers[i].st = READY;
        run.warps[i / 32].present |= 1u << (i % 32);
    }
    for (unsigned left = n; left > 0 && run.error.empty();) {
        bool ran = false;
        for (unsigned i = 0; i < n && run.error.empty(); i++) {
            fiber &f = run.fibers[i];
            if (!ready(f, i)) continue;
            f.st = READY;
            run.current = i;
            set_thread_index(i);
            context_switch(run.scheduler, f.ctx);
            ran = true;
            if (f.st == DONE) left--;
        }
        if (!ran && run.error.empty()) {
            unsigned at_sync = 0;
            for (const fiber &f : run.fibers) at_sync += f.st == AT_SYNC;
            run.error = at_sync ? "__syncthreads that some threads of the block never reach"
                                : "__shfl_xor_sync whose mask names lanes that returned or never reach it";
        }
    }
    return run.error;
}

} // namespace

// ---- in kernels ----

void __syncthreads(void) {
    if (++run.sync_arrived == run.n) { // the last to arrive lets them all go on
        run.sync_arrived = 0;
        run.sync_gen++;
        return;
    }
    fiber &f = run.fibers[run.current];
    f.st = AT_SYNC;
    f.gen = run.sync_gen;
    yield();
}

float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
    const unsigned lane = run.current % 32, src = lane ^ (unsigned)lane_mask;
    warp &w = run.warps[run.current / 32];
    if ((mask & w.present) != mask || !(mask >> lane & 1) || src >= 32 || !(mask >> src & 1))
        kernel_error("__shfl_xor_sync: mask " + std::to_string(mask) + " and lane " + std::to_string(lane) + " xor " +
                     std::to_string(lane_mask) + " name a lane outside the warp or the mask");
    if (w.arrived && mask != w.mask) kernel_error("__shfl_xor_sync: lanes of one warp meet with different masks");
    const unsigned gen = w.gen;
    w.mask = mask;
    w.slot[gen & 1][lane] = v;
    w.arrived |= 1u << lane;
    if (w.arrived == mask) {
        w.arrived = 0;
        w.gen++;
    } else {
        fiber &f = run.fibers[run.current];
        f.st = AT_SHUFFLE;
        f.gen = gen;
        yield();
    }
    return w.slot[gen & 1][src];
}

// ---- launches ----

bool pi_emu::is_device_pointer(const void *p) { return on_device(p, 0); }

void pi_emu::launch(dim3 grid, dim3 block, cudaStream_t s, const char *name, std::function<void()> body, bool args_ok) {
    const unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (!grid.x || !grid.y || !grid.z || grid.y > 65535 || grid.z > 65535 || !threads || threads > MAX_THREADS) {
        fail(cudaErrorInvalidConfiguration, std::string("kernel ") + name + ": grid (" + std::to_string(grid.x) + ", " +
                                                std::to_string(grid.y) + ", " + std::to_string(grid.z) + ") of " +
                                                std::to_string(threads) + " threads");
        return;
    }
    if (!args_ok) {
        fail(cudaErrorInvalidValue, std::string("kernel ") + name + ": a pointer argument is not device memory");
        return;
    }
    const std::string kernel = name;
    enqueue(s, [grid, block, kernel, body = std::move(body)] {
        gridDim = grid;
        blockDim = block;
        for (unsigned z = 0; z < grid.z; z++)
            for (unsigned y = 0; y < grid.y; y++)
                for (unsigned x = 0; x < grid.x; x++) {
                    blockIdx = dim3(x, y, z);
                    const std::string error = run_block(body);
                    if (!error.empty()) {
                        device_fails("kernel " + kernel + ", block (" + std::to_string(x) + ", " + std::to_string(y) +
                                     ", " + std::to_string(z) + "): " + error);
                        return;
                    }
                }
    });
}

// ---- the runtime API ----

cudaError_t cudaGetDeviceCount(int *count) {
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice, "only device 0"); }

cudaError_t cudaGetLastError(void) {
    const cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e != cudaSuccess ? e : device_state();
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorLaunchFailure: {
        std::lock_guard<std::mutex> g(failure_lock);
        return failure_message.empty() ? "unspecified launch failure" : failure_message.c_str();
    }
    default: return "unknown error";
    }
}

static cudaError_t allocate(std::map<uintptr_t, size_t> &map, void **p, size_t bytes) {
    *p = malloc(bytes ? bytes : 1);
    if (!*p) return fail(cudaErrorMemoryAllocation, "out of memory");
    std::lock_guard<std::mutex> g(memory().lock);
    map[(uintptr_t)*p] = bytes;
    return cudaSuccess;
}

static cudaError_t release(std::map<uintptr_t, size_t> &map, void *p, const char *what) {
    if (!p) return cudaSuccess;
    device().drain(); // as cudaFree, it waits for the work that may still read the memory
    std::lock_guard<std::mutex> g(memory().lock);
    if (!map.erase((uintptr_t)p))
        return fail(cudaErrorInvalidValue, std::string(what) + " of memory it did not allocate");
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes) { return allocate(memory().device, p, bytes); }
cudaError_t cudaMallocHost(void **p, size_t bytes) { return allocate(memory().pinned, p, bytes); }
cudaError_t cudaFree(void *p) { return release(memory().device, p, "cudaFree"); }
cudaError_t cudaFreeHost(void *p) { return release(memory().pinned, p, "cudaFreeHost"); }

// the copy's ends on the sides its kind names
static cudaError_t check_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    const bool dst_dev = on_device(dst, bytes), src_dev = on_device(src, bytes);
    const bool ok = kind == cudaMemcpyHostToDevice   ? dst_dev && !on_device(src, 0)
                    : kind == cudaMemcpyDeviceToHost ? src_dev && !on_device(dst, 0)
                                                     : dst_dev && src_dev;
    if (!ok)
        return fail(cudaErrorInvalidValue, "a copy of " + std::to_string(bytes) + " bytes (kind " +
                                               std::to_string(kind) + ") outside the allocations or the wrong way");
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
    if (check_copy(dst, src, bytes, kind)) return last_error;
    return enqueue(s, [dst, src, bytes] { memcpy(dst, src, bytes); });
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    if (check_copy(dst, src, bytes, kind)) return last_error;
    device().wait_for(device().submit([dst, src, bytes] { memcpy(dst, src, bytes); }));
    return device_state();
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t s) {
    if (!on_device(dst, bytes)) return fail(cudaErrorInvalidValue, "cudaMemsetAsync outside the device allocations");
    return enqueue(s, [dst, value, bytes] { memset(dst, value, bytes); });
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
    *s = new pi_emu_stream;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (s) device().wait_for(s->last);
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (!s) return fail(cudaErrorInvalidValue, "no stream");
    device().wait_for(s->last);
    return device_state();
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) {
    *e = new pi_emu_event;
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (!e || !s) return fail(cudaErrorInvalidValue, "no event or stream");
    e->ticket = s->last; // one queue: the stream's work so far is all the work before it
    return device_state();
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (!e) return fail(cudaErrorInvalidValue, "no event");
    device().wait_for(e->ticket);
    return device_state();
}
