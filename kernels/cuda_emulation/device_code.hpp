// Device code on the emulated GPU: CUDA's keywords, built-in variables and
// intrinsics as plain C++, so that kernels/cuda/*.cu compile unchanged with
// a C++ compiler. Each thread of a block runs as a fiber on the thread of
// the stream the kernel was queued on (block.cpp): threadIdx is that
// fiber's, __shared__ memory is the block's, and __syncthreads() hands over
// to the block's other fibers until all of them have reached it.
#pragma once

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <tuple>
#include <typeinfo>
#include <type_traits>
#include <utility>

#include "cuda_runtime_api.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// The emulation's thread-local state (the variables below, __shared__
// memory, the block scheduler's) is read at every turn of device code. The
// local-exec model makes each read a constant offset from the thread
// pointer, where the default for position-independent code calls
// __tls_get_addr. It is given by attribute to these variables alone: as a
// compile flag it would also reach thread-locals that live in shared
// libraries (libstdc++'s, behind std::call_once), which local-exec cannot
// reach, and every source that includes these headers would fail to link.
// Everything that reads them links into executables, never into a shared
// library, which is what local-exec needs. (initial-exec, which reads the
// offset from the GOT and leaves the linker to turn it into a constant,
// failed to link with -march=native on an AVX-512 machine: gcc 12 loaded
// one such GOT entry straight into an xmm register, an instruction that ld
// 2.40 cannot rewrite, "TLS transition from R_X86_64_GOTTPOFF to
// R_X86_64_TPOFF32 ... failed".)
#define DPTRAIN_EMULATION_TLS __attribute__((tls_model("local-exec")))

// One copy per block: a block runs all its fibers on one host thread, and
// that thread runs one block at a time, so a thread-local static is exactly
// a block's shared memory (and, as on a GPU, holds whatever the previous
// block left there).
#define __shared__ static thread_local DPTRAIN_EMULATION_TLS

// The running fiber's position: set by the block's scheduler before it
// switches to a fiber. Real variables, not macros, so that a debugger can
// read them: `break conv_forward.cu:623 if threadIdx.x == 3 && blockIdx.x == 0`.
extern thread_local DPTRAIN_EMULATION_TLS dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace dpt::cuda_emulation {

// The block's other fibers run until each has reached this barrier too.
void barrier();
// The same for the 32 threads of the running thread's warp.
void warp_barrier();
// The running thread: its number in the block (x fastest), its warp, and
// its lane in the warp.
unsigned linear_thread();
unsigned warp();
unsigned lane();
// Ends the running thread's block with a launch failure that says `why`
// (a sticky error of the device, as an illegal instruction is on a GPU).
[[noreturn]] void fail(const char* why);

// An acquire of what another host thread released through the atomic at
// `address` (launch::acquire_from_host), told to ThreadSanitizer too.
void acquire(const volatile void* address);

// The bytes of static thread-local storage every thread of the process
// holds: mostly every kernel's __shared__ memory (above). glibc carves it out
// of each thread's stack, so the runtime makes the stacks of threads started
// after it loads that much larger than the default.
size_t static_tls_bytes();

// A kernel launch: `thread_body` is what each thread of each block runs;
// `signature`, the kernel's mangled type (for the launch log: it tells apart
// the instances of one template that share a name).
void launch(const char* name, dim3 grid, dim3 block, cudaStream_t stream, std::function<void()> thread_body,
            const char* signature = nullptr);

// Binds the arguments as CUDA does (each kernel parameter a copy, made at the
// launch) and launches.
template <class... Params, class... Args>
void launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args&&... args) {
    auto bound = std::make_shared<const std::tuple<std::decay_t<Params>...>>(std::forward<Args>(args)...);
    launch(name, grid, block, stream, [kernel, bound] { std::apply(kernel, *bound); }, typeid(kernel).name());
}

}  // namespace dpt::cuda_emulation

inline void __syncthreads() { dpt::cuda_emulation::barrier(); }
// Every thread of the warp takes part (the kernels here pass the full mask).
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    if (mask != 0xffffffffu) dpt::cuda_emulation::fail("__syncwarp with a partial mask, which the emulation does not model");
    dpt::cuda_emulation::warp_barrier();
}
[[noreturn]] inline void __trap() { dpt::cuda_emulation::fail("__trap()"); }

// Intrinsics the kernels use, with CUDA's results (CUDA's own expf and logf
// round differently from the C library's: kernels are compared with their
// CPU twins within a tolerance, never bit for bit).
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }
void __nanosleep(unsigned ns);
// Memory order between blocks: a block's fibers all run on its stream's host
// thread, and its blocks one after another, so a fence orders what that
// thread does (and a load that skips the L1 cache is a load).
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
template <class T>
T __ldcg(const T* address) {
    return *address;
}
template <class T>
T __ldg(const T* address) {  // (through the read-only cache: a load)
    return *address;
}
template <class T>
T atomicMin(T* address, T value) {
    std::atomic_ref<T> a(*address);
    T old = a.load();
    while (value < old && !a.compare_exchange_weak(old, value)) {
    }
    return old;
}
template <class T>
T atomicAdd(T* address, T value) {
    return std::atomic_ref<T>(*address).fetch_add(value);
}
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
