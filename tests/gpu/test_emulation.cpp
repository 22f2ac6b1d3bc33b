// The emulated GPU itself (kernels/cuda_emulation/), in a build with
// -Demulated_gpu=true: each thing it models, shown by code that would pass
// if it did not. Streams run at the same time; a wait is for the record
// current at the call; fresh memory is NaN; bad copies fail; what CUDA
// refuses during capture is refused; a graph's nodes run in an order that
// only their dependencies fix; an external event record is a graph node; threads and blocks run in a random order
// around barriers, with shared memory a block's own; a barrier that not
// every thread reaches fails the launch and sticks to its device; a warp
// meets at __syncwarp() without the rest of its block; the warp matrix
// operations (mma.h) compute A . B + C and refuse a misaligned matrix.
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cuda/launch.cuh"

namespace {

int checks = 0, failures = 0;
void report(bool ok, const std::string& what, const std::string& detail = "") {
    ++checks;
    if (!ok) ++failures;
    std::printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what.c_str(), detail.empty() ? "" : "  ", detail.c_str());
    std::fflush(stdout);
}

// A gate a host function waits at (at most 10 s, so that a wrong model
// fails instead of hanging).
struct Gate {
    std::atomic<bool> open{false};
    bool wait() const {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!open.load())
            if (std::chrono::steady_clock::now() > until) return false;
            else std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return true;
    }
};
struct Waiter {
    Gate* gate;
    std::atomic<bool>* timed_out;
};
void CUDART_CB wait_at(void* p) {
    auto* w = static_cast<Waiter*>(p);
    if (!w->gate->wait()) w->timed_out->store(true);
}
void CUDART_CB open_gate(void* p) { static_cast<Gate*>(p)->open = true; }

cudaStream_t new_stream() {
    cudaStream_t s = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    return s;
}

void streams_run_at_the_same_time() {
    cudaStream_t a = new_stream(), b = new_stream();
    Gate gate;
    std::atomic<bool> timed_out{false};
    Waiter waiter{&gate, &timed_out};
    // a waits for what b does after it was queued: only streams that really
    // run at once get there.
    cudaLaunchHostFunc(a, &wait_at, &waiter);
    cudaLaunchHostFunc(b, &open_gate, &gate);
    cudaStreamSynchronize(a);
    report(!timed_out, "two streams run at the same time (one waits for what the other does next)");
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
}

void a_wait_is_for_the_record_current_at_the_call() {
    cudaStream_t a = new_stream(), b = new_stream();
    cudaEvent_t e = nullptr;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    Gate first, second, b_done;
    std::atomic<bool> timed_out{false};
    Waiter w1{&first, &timed_out}, w2{&second, &timed_out};
    cudaLaunchHostFunc(a, &wait_at, &w1);
    cudaEventRecord(e, a);  // record 1
    cudaStreamWaitEvent(b, e, 0);
    cudaLaunchHostFunc(b, &open_gate, &b_done);
    cudaLaunchHostFunc(a, &wait_at, &w2);
    cudaEventRecord(e, a);  // record 2, after the wait was queued: it must not count
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    report(!b_done.open, "a stream waiting on an event waits while its record is pending");
    first.open = true;
    report(b_done.wait(), "the wait ends when the record current at the call completes, not a later one");
    second.open = true;
    cudaStreamSynchronize(a);
    cudaStreamSynchronize(b);
    report(!timed_out, "(no gate timed out)");
    cudaEventDestroy(e);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
}

void memory_is_poisoned_and_copies_are_checked() {
    float* d = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&d), 64 * sizeof(float));
    std::vector<float> host(64, 0.0f);
    cudaMemcpy(host.data(), d, 64 * sizeof(float), cudaMemcpyDeviceToHost);
    bool all_nan = true;
    for (float v : host) all_nan = all_nan && std::isnan(v);
    report(all_nan, "fresh cudaMalloc memory reads as NaN");
    report(cudaMemcpy(host.data(), d, 65 * sizeof(float), cudaMemcpyDeviceToHost) == cudaErrorInvalidValue,
           "a copy past the end of an allocation fails");
    cudaGetLastError();
    report(cudaMemcpy(d, host.data(), 4, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue,
           "a copy whose kind says the wrong way round fails");
    cudaGetLastError();
    report(cudaMemsetAsync(host.data(), 0, 4, nullptr) == cudaErrorInvalidValue, "a fill of host memory as GPU memory fails");
    cudaGetLastError();
    report(cudaFree(d + 1) == cudaErrorInvalidValue, "freeing an address inside an allocation fails");
    cudaGetLastError();
    report(cudaGetLastError() == cudaSuccess, "cudaGetLastError clears an error that is not sticky");
    cudaFree(d);
}

__global__ void write_value(int* x, int v) { *x = v; }

void capture_follows_cudas_rules() {
    cudaStream_t a = new_stream(), b = new_stream();
    cudaGraph_t graph = nullptr;
    cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal);
    report(cudaStreamSynchronize(a) == cudaErrorStreamCaptureUnsupported, "synchronising a capturing stream is refused");
    report(cudaStreamEndCapture(a, &graph) == cudaErrorStreamCaptureInvalidated && graph == nullptr,
           "and the capture it was in ends invalidated");
    cudaGetLastError();

    cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal);
    void* p = nullptr;
    report(cudaMalloc(&p, 16) == cudaErrorStreamCaptureUnsupported, "cudaMalloc is refused while this thread captures");
    cudaStreamEndCapture(a, &graph);
    cudaGetLastError();

    int* x = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&x), sizeof(int));
    cudaEvent_t fork = nullptr;
    cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
    cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal);
    cudaEventRecord(fork, a);
    cudaStreamWaitEvent(b, fork, 0);  // b joins the capture ...
    dpt::cuda::launch::kernel("write_value", write_value, 1, 1, b, x, 2);  // ... and is never joined back
    report(cudaStreamEndCapture(a, &graph) == cudaErrorStreamCaptureUnjoined && graph == nullptr,
           "a capture with a fork not joined back fails to end");
    cudaStreamCaptureStatus status{};
    cudaStreamIsCapturing(b, &status);
    report(status == cudaStreamCaptureStatusNone, "and every stream of it stops capturing");
    cudaGetLastError();
    cudaEventDestroy(fork);
    cudaFree(x);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
}

// Two writes of one int, on two streams forked from one capture: without a
// dependency between them either may run last; with one, only one can.
void graph_order_is_only_what_dependencies_fix() {
    cudaStream_t a = new_stream(), b = new_stream();
    int* x = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&x), sizeof(int));
    cudaEvent_t fork = nullptr, join = nullptr, first = nullptr;
    for (cudaEvent_t* e : {&fork, &join, &first}) cudaEventCreateWithFlags(e, cudaEventDisableTiming);
    for (bool ordered : {false, true}) {
        cudaGraph_t graph = nullptr;
        cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal);
        cudaEventRecord(fork, a);
        cudaStreamWaitEvent(b, fork, 0);
        dpt::cuda::launch::kernel("write_value", write_value, 1, 1, a, x, 1);
        if (ordered) {
            cudaEventRecord(first, a);
            cudaStreamWaitEvent(b, first, 0);
        }
        dpt::cuda::launch::kernel("write_value", write_value, 1, 1, b, x, 2);
        cudaEventRecord(join, b);
        cudaStreamWaitEvent(a, join, 0);
        const cudaError_t ended = cudaStreamEndCapture(a, &graph);
        cudaGraphExec_t exec = nullptr;
        if (ended != cudaSuccess || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
            report(false, "the two-stream graph records", cudaGetErrorString(ended));
            return;
        }
        std::set<int> last;
        for (int i = 0; i < 40; ++i) {
            cudaGraphLaunch(exec, a);
            int v = 0;
            cudaStreamSynchronize(a);
            cudaMemcpy(&v, x, sizeof v, cudaMemcpyDeviceToHost);
            last.insert(v);
        }
        if (ordered) report(last == std::set<int>{2}, "a graph's nodes in dependency order always end the same way");
        else report(last == std::set<int>{1, 2}, "a graph's independent nodes run in either order from launch to launch",
                    std::to_string(last.size()) + " outcome(s) in 40 launches");
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
    }
    for (cudaEvent_t e : {fork, join, first}) cudaEventDestroy(e);
    cudaFree(x);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
}

void CUDART_CB sleep_30ms(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }

// An event recorded in a capture with cudaEventRecordExternal is a node of
// the graph, recorded again by each launch where it runs; a plain record in
// a capture only marks a point to wait on, and no launch records it.
void external_records_are_graph_nodes() {
    cudaStream_t a = new_stream();
    cudaEvent_t origin = nullptr, before = nullptr, after = nullptr, plain = nullptr;
    for (cudaEvent_t* e : {&origin, &before, &after, &plain}) cudaEventCreate(e);
    cudaGraph_t graph = nullptr;
    cudaStreamBeginCapture(a, cudaStreamCaptureModeThreadLocal);
    cudaEventRecordWithFlags(before, a, cudaEventRecordExternal);
    cudaLaunchHostFunc(a, sleep_30ms, nullptr);
    cudaEventRecordWithFlags(after, a, cudaEventRecordExternal);
    cudaEventRecord(plain, a);
    cudaGraphExec_t exec = nullptr;
    if (cudaStreamEndCapture(a, &graph) != cudaSuccess || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
        report(false, "a graph with external event records records");
        return;
    }
    float ms = 0;
    report(cudaEventElapsedTime(&ms, before, after) != cudaSuccess, "capturing an external record records nothing yet");
    cudaGetLastError();
    cudaEventRecord(origin, a);
    float starts[2] = {0, 0}, gap = 0;
    for (float& start : starts) {
        cudaGraphLaunch(exec, a);
        cudaStreamSynchronize(a);
        cudaEventElapsedTime(&start, origin, before);
        cudaEventElapsedTime(&gap, before, after);
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
    report(gap >= 29.0f, "the external records of a launch time the graph's work between them",
           std::to_string(gap) + " ms around a host function of 30 ms");
    report(starts[1] - starts[0] >= 59.0f, "and each launch records them again",
           "the second launch's first record " + std::to_string(starts[1] - starts[0]) + " ms after the first's");
    report(cudaEventElapsedTime(&ms, origin, plain) != cudaSuccess, "a plain record in a capture is not recorded by a launch");
    cudaGetLastError();
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    for (cudaEvent_t e : {origin, before, after, plain}) cudaEventDestroy(e);
    cudaStreamDestroy(a);
}

// Each thread takes a ticket as it arrives: before and after a barrier.
__global__ void tickets(int* before, int* after, int* counter) {
    before[threadIdx.x] = atomicAdd(counter, 1);
    __syncthreads();
    after[threadIdx.x] = atomicAdd(counter, 1);
}

// Each block writes its index into shared memory, waits, and checks that
// every thread sees its own block's value; one barrier after another.
__global__ void shared_is_per_block(int* wrong) {
    __shared__ int mine[64];
    mine[threadIdx.x] = int(blockIdx.x);
    __syncthreads();
    int sum = 0;
    for (int i = 0; i < 64; ++i) sum += mine[i];
    if (sum != 64 * int(blockIdx.x)) atomicAdd(wrong, 1);
}

void threads_and_blocks() {
    int *before = nullptr, *after = nullptr, *counter = nullptr, *wrong = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&before), 128 * sizeof(int));
    cudaMalloc(reinterpret_cast<void**>(&after), 128 * sizeof(int));
    cudaMalloc(reinterpret_cast<void**>(&counter), sizeof(int));
    cudaMalloc(reinterpret_cast<void**>(&wrong), sizeof(int));
    cudaMemset(counter, 0, sizeof(int));
    cudaMemset(wrong, 0, sizeof(int));
    dpt::cuda::launch::kernel("tickets", tickets, 1, 128, nullptr, before, after, counter);
    std::vector<int> b(128), a(128);
    cudaMemcpy(b.data(), before, 128 * sizeof(int), cudaMemcpyDeviceToHost);
    cudaMemcpy(a.data(), after, 128 * sizeof(int), cudaMemcpyDeviceToHost);
    bool barrier_holds = true, in_order_before = true, same_order = true;
    for (int t = 0; t < 128; ++t) {
        barrier_holds = barrier_holds && b[size_t(t)] < 128 && a[size_t(t)] >= 128;
        in_order_before = in_order_before && b[size_t(t)] == t;
        same_order = same_order && a[size_t(t)] - 128 == b[size_t(t)];
    }
    report(barrier_holds, "every thread reaches __syncthreads before any goes past it");
    report(!in_order_before && !same_order, "threads run in a random order, drawn again after each barrier");
    dpt::cuda::launch::kernel("shared_is_per_block", shared_is_per_block, 32, 64, nullptr, wrong);
    int w = -1;
    cudaMemcpy(&w, wrong, sizeof w, cudaMemcpyDeviceToHost);
    report(w == 0, "__shared__ memory is each block's own", std::to_string(w) + " threads saw another block's");
    for (int* p : {before, after, counter, wrong}) cudaFree(p);
}

// Each thread takes a ticket before and after __syncwarp(); warp 1 then
// waits at __syncthreads() for warp 0, which meets at __syncwarp() twice.
__global__ void warp_tickets(int* before, int* after, int* counter) {
    const int t = int(threadIdx.x);
    before[t] = atomicAdd(counter, 1);
    __syncwarp();
    after[t] = atomicAdd(counter, 1);
    if (t < 32) {
        __syncwarp();
        __syncwarp();
    }
    __syncthreads();
}

// A warp's 16 x 16 product of A (16 x 8, row-major) and B (8 x 16,
// column-major) added to C (16 x 16, row-major), into D (row-major).
__global__ void warp_product(float* d, const float* a, const float* b, const float* c) {
    using namespace nvcuda;
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> fc;
    wmma::load_matrix_sync(fa, a, 8);
    wmma::load_matrix_sync(fb, b, 8);
    wmma::load_matrix_sync(fc, c, 16, wmma::mem_row_major);
    for (int t = 0; t < fa.num_elements; ++t) fa.x[t] = wmma::__float_to_tf32(fa.x[t]);
    for (int t = 0; t < fb.num_elements; ++t) fb.x[t] = wmma::__float_to_tf32(fb.x[t]);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(d, fc, 16, wmma::mem_row_major);
}

__global__ void misaligned_load(const float* a) {
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 8, nvcuda::wmma::precision::tf32, nvcuda::wmma::row_major> fa;
    nvcuda::wmma::load_matrix_sync(fa, a + 1, 8);
}

float tf32(float x) {  // the CPU's rounding to TF32, written apart from mma.h's
    uint32_t u;
    std::memcpy(&u, &x, 4);
    u = (u + 0x1000u) & 0xffffe000u;
    std::memcpy(&x, &u, 4);
    return x;
}

void warps() {
    int *before = nullptr, *after = nullptr, *counter = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&before), 64 * sizeof(int));
    cudaMalloc(reinterpret_cast<void**>(&after), 64 * sizeof(int));
    cudaMalloc(reinterpret_cast<void**>(&counter), sizeof(int));
    bool warp_meets = true, warps_apart = false;
    for (int run = 0; run < 4; ++run) {
        cudaMemset(counter, 0, sizeof(int));
        dpt::cuda::launch::kernel("warp_tickets", warp_tickets, 1, 64, nullptr, before, after, counter);
        std::vector<int> b(64), a(64);
        cudaMemcpy(b.data(), before, 64 * sizeof(int), cudaMemcpyDeviceToHost);
        cudaMemcpy(a.data(), after, 64 * sizeof(int), cudaMemcpyDeviceToHost);
        for (int w = 0; w < 2; ++w) {
            int last_before = -1, first_after = 1 << 30;
            for (int t = 32 * w; t < 32 * w + 32; ++t) {
                last_before = std::max(last_before, b[size_t(t)]);
                first_after = std::min(first_after, a[size_t(t)]);
            }
            warp_meets = warp_meets && last_before < first_after;
        }
        // Some thread of one warp went past __syncwarp() before a thread of the other arrived.
        int last_before = -1, first_after = 1 << 30;
        for (int t = 0; t < 64; ++t) {
            last_before = std::max(last_before, b[size_t(t)]);
            first_after = std::min(first_after, a[size_t(t)]);
        }
        warps_apart = warps_apart || first_after < last_before;
    }
    report(warp_meets, "every thread of a warp reaches __syncwarp() before any of the warp goes past it");
    report(warps_apart, "and the block's other warps do not wait for it");
    for (int* p : {before, after, counter}) cudaFree(p);

    std::vector<float> a(128), b(128), c(256), d(256);
    uint32_t state = 7;
    auto draw = [&] {
        state = state * 1664525u + 1013904223u;
        return float(int(state >> 9) - (1 << 22)) / float(1 << 22);
    };
    for (float& v : a) v = draw();
    for (float& v : b) v = draw();
    for (float& v : c) v = draw();
    float *da = nullptr, *db = nullptr, *dc = nullptr, *dd = nullptr;
    for (float** p : {&da, &db, &dc, &dd}) cudaMalloc(reinterpret_cast<void**>(p), 256 * sizeof(float));
    cudaMemcpy(da, a.data(), 128 * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(db, b.data(), 128 * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(dc, c.data(), 256 * sizeof(float), cudaMemcpyHostToDevice);
    dpt::cuda::launch::kernel("warp_product", warp_product, 1, 32, nullptr, dd, static_cast<const float*>(da),
                              static_cast<const float*>(db), static_cast<const float*>(dc));
    cudaMemcpy(d.data(), dd, 256 * sizeof(float), cudaMemcpyDeviceToHost);
    double worst = 0, worst_unrounded = 0;
    for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 16; ++j) {
            double want = c[size_t(i * 16 + j)], unrounded = want;
            for (int k = 0; k < 8; ++k) {
                want += double(tf32(a[size_t(i * 8 + k)])) * tf32(b[size_t(j * 8 + k)]);
                unrounded += double(a[size_t(i * 8 + k)]) * b[size_t(j * 8 + k)];
            }
            worst = std::max(worst, std::fabs(d[size_t(i * 16 + j)] - want));
            worst_unrounded = std::max(worst_unrounded, std::fabs(d[size_t(i * 16 + j)] - unrounded));
        }
    report(worst < 4e-6, "mma_sync: D = A . B + C of TF32-rounded A and B, to FP32's rounding",
           "largest difference " + std::to_string(worst));
    report(worst_unrounded > 1e-4, "(and the rounding to TF32 shows: the unrounded product differs)",
           "largest difference " + std::to_string(worst_unrounded));
    for (float* p : {da, db, dc, dd}) cudaFree(p);
}

// A misaligned matrix fails the launch (and leaves its device failed).
void misaligned_matrix_fails(float* on_device, cudaStream_t s) {
    cudaError_t reported = cudaSuccess;
    try {
        dpt::cuda::launch::kernel("misaligned_load", misaligned_load, 1, 32, s, static_cast<const float*>(on_device));
        reported = cudaStreamSynchronize(s);
    } catch (const dpt::cuda::CudaError& e) {
        reported = e.code;
    }
    report(reported == cudaErrorLaunchFailure, "a warp matrix load from a misaligned pointer fails the launch");
}

__global__ void early_return(int* x) {
    if (threadIdx.x == 0) return;  // thread 0 never reaches the barrier
    __syncthreads();
    *x = 1;
}

// Last: it leaves device 1 failed, as on a GPU.
void divergent_barrier_is_a_sticky_error() {
    cudaSetDevice(1);
    int* x = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&x), sizeof(int));
    cudaStream_t s = new_stream();
    // The launch itself is fine; the failure comes when the kernel runs,
    // which may be before launch::kernel's own check returns (the stream's
    // thread does not wait for the host), as on a GPU: then that check
    // reports it.
    cudaError_t reported = cudaSuccess;
    try {
        dpt::cuda::launch::kernel("early_return", early_return, 1, 32, s, x);
        reported = cudaStreamSynchronize(s);
    } catch (const dpt::cuda::CudaError& e) {
        reported = e.code;
    }
    report(reported == cudaErrorLaunchFailure, "a barrier that not every thread reaches fails the launch");
    bool threw = false;
    report(cudaMemcpy(&threw, x, 1, cudaMemcpyDeviceToHost) == cudaErrorLaunchFailure,
           "and the error sticks: the device's next calls fail too");
    cudaSetDevice(0);
    int* y = nullptr;
    report(cudaMalloc(reinterpret_cast<void**>(&y), 4) == cudaSuccess, "other devices go on");
    cudaFree(y);
}

}  // namespace

int main() {
    setenv("DPTRAIN_EMULATED_GPUS", "3", 0);  // (unless set) a third device for the second sticky error
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2) {
        std::printf("SKIP: the emulation tests need 2 emulated GPUs (DPTRAIN_EMULATED_GPUS=%d)\n", devices);
        return 77;
    }
    try {
        streams_run_at_the_same_time();
        a_wait_is_for_the_record_current_at_the_call();
        memory_is_poisoned_and_copies_are_checked();
        capture_follows_cudas_rules();
        graph_order_is_only_what_dependencies_fix();
        external_records_are_graph_nodes();
        threads_and_blocks();
        warps();
        if (devices >= 3) {
            cudaSetDevice(2);
            float* p = nullptr;
            cudaMalloc(reinterpret_cast<void**>(&p), 64 * sizeof(float));
            misaligned_matrix_fails(p, new_stream());
            cudaSetDevice(0);
            cudaGetLastError();  // the failure stays this thread's last error until read, as in CUDA
        } else {
            std::printf("(the misaligned matrix check needs a third device; DPTRAIN_EMULATED_GPUS=%d)\n", devices);
        }
        divergent_barrier_is_a_sticky_error();
    } catch (const std::exception& e) {
        report(false, "no exception", e.what());
    }
    std::printf("%d of %d checks passed\n", checks - failures, checks);
    return failures == 0 ? 0 : 1;
}
