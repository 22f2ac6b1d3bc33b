// The threads of a block as fibers (block.hpp). A block's threads all run
// on the host thread that runs the block, each on a stack of its own; a
// fiber runs until it reaches __syncthreads() or ends, then hands back to
// the block's scheduler, which runs the next fiber. When every fiber waits
// at the barrier, the next phase begins, in a new random order: code that
// reads what another thread wrote in the same phase (a missing
// __syncthreads) then gets different values from one order to the next,
// which the comparisons with the CPU twins catch.
//
// __syncwarp() is the same barrier for the 32 threads of one warp (threads
// numbered x fastest, as on a GPU): a warp whose every running thread waits
// there goes on while the others stay where they are, so warp-collective
// operations (mma.h's) can exchange values through the warp's own memory.
// A kernel that breaks a rule of the GPU's (a misaligned tensor-core load)
// ends its block with a launch failure, as an illegal instruction would.
//
// A fiber switch saves and restores only what the calling convention asks
// a function to keep (x86-64: six registers), so it costs a few
// nanoseconds; elsewhere <ucontext.h> does it, more slowly. The
// floating-point control words the convention also keeps are left as they
// are: nothing here changes them (rounding to nearest, no flush to zero),
// and reading and loading them at every switch took a twentieth of the
// emulated GPU's time.
//
// Under ThreadSanitizer a block's fibers are one thread of TSan's, the
// stream's: what TSan is there for is what crosses streams (a missing
// cudaStreamWaitEvent), and it sees every access a kernel makes from the
// stream that ran it. Announcing each fiber (__tsan_create_fiber and a
// synchronising switch) made each switch cost a vector-clock merge over
// every fiber made so far: the stream test had not finished its first
// check after 18 minutes. Races between the threads of one block are the
// random thread order's to show, against the CPU twins. What TSan does need
// is that its record of calls stays balanced on the one stack it keeps for
// the host thread: the code that switches is not instrumented (no_switch),
// and a fiber's kernel returns before the fiber hands back for the last time.
#include "block.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "device_code.hpp"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* address);
#endif

thread_local DPTRAIN_EMULATION_TLS dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace dpt::cuda_emulation {
namespace {

// Functions that switch fibers, left out of ThreadSanitizer's call records.
#if defined(__SANITIZE_THREAD__)
#define DPT_NO_SWITCH_RECORD __attribute__((no_sanitize_thread, noinline))
#else
#define DPT_NO_SWITCH_RECORD
#endif

#if defined(__x86_64__)
extern "C" void dpt_emulation_switch(void** save_sp, void* load_sp);
extern "C" void dpt_emulation_fiber_start();
// dpt_emulation_switch: push the callee-saved registers, store the stack
// pointer, load the other one, pop.
// dpt_emulation_fiber_start: where a new fiber's first switch returns to;
// it calls r12(rbx), both set up on the new stack by Fiber::start.
asm(R"(
    .pushsection .text
    .globl dpt_emulation_switch
    .type dpt_emulation_switch, @function
dpt_emulation_switch:
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
    .size dpt_emulation_switch, .-dpt_emulation_switch
    .globl dpt_emulation_fiber_start
    .type dpt_emulation_fiber_start, @function
dpt_emulation_fiber_start:
    movq %rbx, %rdi
    callq *%r12
    ud2
    .size dpt_emulation_fiber_start, .-dpt_emulation_fiber_start
    .popsection
)");
#endif

// Big enough for any kernel here, and for the frames sanitizers add.
constexpr size_t stack_bytes = 256 * 1024;

enum class State { ready, at_barrier, at_warp_barrier, done };

struct Fiber;
void fiber_main(Fiber* fiber);

struct Fiber {
    std::unique_ptr<char[]> stack;
    dim3 index;
    State state = State::ready;
#if defined(__x86_64__)
    void* sp = nullptr;
#else
    ucontext_t context;
#endif

    Fiber() : stack(new char[stack_bytes]) {}
    Fiber(const Fiber&) = delete;
    Fiber& operator=(const Fiber&) = delete;

    // A fresh start at fiber_main(this) on the next switch to it.
    void start(dim3 at) {
        index = at;
        state = State::ready;
#if defined(__x86_64__)
        auto top = reinterpret_cast<uintptr_t>(stack.get() + stack_bytes) & ~uintptr_t(15);
        // What dpt_emulation_switch pops, then returns to; after the return
        // the stack pointer is top, 16-byte aligned for the call it makes.
        auto* slot = reinterpret_cast<uint64_t*>(top - 56);
        slot[0] = slot[1] = slot[2] = 0;                     // r15, r14, r13
        slot[3] = reinterpret_cast<uint64_t>(&fiber_main);  // r12: called ...
        slot[4] = reinterpret_cast<uint64_t>(this);         // rbx: ... with this
        slot[5] = 0;                                         // rbp
        slot[6] = reinterpret_cast<uint64_t>(&dpt_emulation_fiber_start);
        sp = slot;
#else
        getcontext(&context);
        context.uc_stack.ss_sp = stack.get();
        context.uc_stack.ss_size = stack_bytes;
        context.uc_link = nullptr;
        makecontext(&context, reinterpret_cast<void (*)()>(&fiber_main_trampoline), 0);
#endif
    }
#if !defined(__x86_64__)
    static void fiber_main_trampoline();
#endif
};

// The block being run on this host thread.
struct Scheduler {
    std::vector<std::unique_ptr<Fiber>> fibers;  // grown to the largest block seen, reused
    Fiber* running = nullptr;
    const std::function<void()>* body = nullptr;
    std::string failure;  // what a thread of the block did wrong (fail()), or ""
#if defined(__x86_64__)
    void* sp = nullptr;
#else
    ucontext_t context;
#endif

    DPT_NO_SWITCH_RECORD void switch_to(Fiber& f) {
        running = &f;
        threadIdx = f.index;
#if defined(__x86_64__)
        dpt_emulation_switch(&sp, f.sp);
#else
        swapcontext(&context, &f.context);
#endif
        running = nullptr;
    }
    DPT_NO_SWITCH_RECORD void back(Fiber& f) {
#if defined(__x86_64__)
        dpt_emulation_switch(&f.sp, sp);
#else
        swapcontext(&f.context, &context);
#endif
    }
};

thread_local DPTRAIN_EMULATION_TLS Scheduler scheduler;

DPT_NO_SWITCH_RECORD void fiber_main(Fiber* fiber) {
    (*scheduler.body)();
    fiber->state = State::done;
    scheduler.back(*fiber);
    __builtin_trap();  // a finished fiber is never switched to again
}

#if !defined(__x86_64__)
void Fiber::fiber_main_trampoline() { fiber_main(scheduler.running); }
#endif

// A draw from [0, n), scaled by a multiply (the bias, under 2^-50 here, is
// nothing for an order of threads): cheaper than std::shuffle's divisions.
uint64_t below(uint64_t n, std::mt19937_64& rng) { return uint64_t((unsigned __int128)rng() * n >> 64); }

// Fisher-Yates, one draw an element.
template <class T>
void shuffle(T* first, T* last, std::mt19937_64& rng) {
    for (auto i = uint64_t(last - first); i > 1; --i) std::swap(first[i - 1], first[below(i, rng)]);
}

// Appends x to queue at a random place among queue[from...]: in an order
// drawn at random, the result is one drawn at random too (Fisher-Yates
// "inside out"), at one draw for x instead of a shuffle of the rest.
void insert_at_random(std::vector<unsigned>& queue, size_t from, unsigned x, std::mt19937_64& rng) {
    queue.push_back(x);
    std::swap(queue.back(), queue[from + below(queue.size() - from, rng)]);
}

std::string where(dim3 d) {
    char text[48];
    std::snprintf(text, sizeof text, "(%u, %u, %u)", d.x, d.y, d.z);
    return text;
}

// One block; "" or what went wrong.
std::string run_block(const KernelLaunch& k, std::mt19937_64& rng) {
    const unsigned threads = k.block.x * k.block.y * k.block.z;
    while (scheduler.fibers.size() < threads) scheduler.fibers.push_back(std::make_unique<Fiber>());
    scheduler.failure.clear();
    std::vector<unsigned> order(threads);
    std::iota(order.begin(), order.end(), 0u);
    for (unsigned t = 0; t < threads; ++t)
        scheduler.fibers[t]->start(dim3(t % k.block.x, t / k.block.x % k.block.y, t / (k.block.x * k.block.y)));
    const auto fiber = [&](unsigned t) -> Fiber& { return *scheduler.fibers[t]; };
    // Lets the warp of thread t go on when each of its threads that has not
    // ended waits at __syncwarp(): its threads join the rest of the pass.
    const auto release_warp = [&](unsigned t, std::vector<unsigned>& queue, size_t from) {
        const unsigned w0 = t / 32 * 32, w1 = std::min(threads, w0 + 32);
        for (unsigned u = w0; u < w1; ++u)
            if (fiber(u).state != State::at_warp_barrier && fiber(u).state != State::done) return;
        for (unsigned u = w0; u < w1; ++u)
            if (fiber(u).state == State::at_warp_barrier) {
                fiber(u).state = State::ready;
                insert_at_random(queue, from, u, rng);
            }
    };
    for (;;) {
        shuffle(order.data(), order.data() + order.size(), rng);
        for (size_t q = 0; q < order.size(); ++q) {
            const unsigned t = order[q];
            scheduler.switch_to(fiber(t));
            if (!scheduler.failure.empty())
                return std::string("kernel ") + k.name + ", block " + where(blockIdx) + ", thread " +
                       where(fiber(t).index) + ": " + scheduler.failure;
            if (fiber(t).state == State::at_warp_barrier || fiber(t).state == State::done)
                release_warp(t, order, q + 1);  // (an ending thread may be the one its warp waits for)
        }
        // Every fiber waits at __syncthreads(), or at a __syncwarp() that
        // not all of its warp reaches, or has ended.
        std::vector<unsigned> waiting;
        const Fiber* ended = nullptr;
        const Fiber* at_warp = nullptr;
        for (unsigned t = 0; t < threads; ++t) {
            Fiber& f = fiber(t);
            if (f.state == State::at_barrier) waiting.push_back(t);
            else if (f.state == State::at_warp_barrier) at_warp = at_warp ? at_warp : &f;
            else if (!ended) ended = &f;
        }
        if (at_warp)
            return std::string("kernel ") + k.name + ", block " + where(blockIdx) + ": thread " +
                   where(at_warp->index) +
                   " waits at __syncwarp() while a thread of its warp waits at __syncthreads() or has ended: "
                   "a warp barrier that not every thread of the warp reaches";
        if (waiting.empty()) return "";
        if (ended)
            return std::string("kernel ") + k.name + ", block " + where(blockIdx) + ": thread " + where(ended->index) +
                   " ended while thread " + where(fiber(waiting[0]).index) +
                   " waits at __syncthreads(): a barrier that not every thread of the block reaches";
        for (unsigned t : waiting) fiber(t).state = State::ready;
        order = std::move(waiting);
    }
}

}  // namespace

void acquire(const volatile void* address) {
#if defined(__SANITIZE_THREAD__)
    __tsan_acquire(const_cast<void*>(address));  // (TSan does not model fences)
#else
    (void)address;
    std::atomic_thread_fence(std::memory_order_acquire);
#endif
}

DPT_NO_SWITCH_RECORD void barrier() {
    Fiber* f = scheduler.running;
    f->state = State::at_barrier;
    scheduler.back(*f);
    threadIdx = f->index;
}

DPT_NO_SWITCH_RECORD void warp_barrier() {
    Fiber* f = scheduler.running;
    f->state = State::at_warp_barrier;
    scheduler.back(*f);
    threadIdx = f->index;
}

unsigned lane() { return linear_thread() % 32; }
unsigned warp() { return linear_thread() / 32; }
unsigned linear_thread() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }

DPT_NO_SWITCH_RECORD void fail(const char* why) {
    Fiber* f = scheduler.running;
    scheduler.failure = why;
    f->state = State::done;
    scheduler.back(*f);  // never switched to again: the launch has failed
    __builtin_trap();
}

std::string run_blocks(const KernelLaunch& k, std::mt19937_64& rng) {
    const size_t blocks = size_t(k.grid.x) * k.grid.y * k.grid.z;
    std::vector<size_t> order(blocks);
    std::iota(order.begin(), order.end(), size_t(0));
    shuffle(order.data(), order.data() + order.size(), rng);
    gridDim = k.grid;
    blockDim = k.block;
    scheduler.body = &k.thread_body;
    for (size_t b : order) {
        blockIdx = dim3(unsigned(b % k.grid.x), unsigned(b / k.grid.x % k.grid.y), unsigned(b / (size_t(k.grid.x) * k.grid.y)));
        std::string failure = run_block(k, rng);
        if (!failure.empty()) return failure;
    }
    return "";
}

}  // namespace dpt::cuda_emulation
