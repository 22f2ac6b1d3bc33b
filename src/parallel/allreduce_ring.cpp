// The ring allreduce: the gradient buffer is cut into N chunks (sizes that
// differ by at most one float) and the devices, in a ring, pass chunks to
// their right-hand neighbour. First a reduce-scatter: in N-1 steps each
// device adds the chunk its left neighbour has summed so far to its own, so
// that at the end device i holds the whole sum of chunk i+1. Then an
// all-gather: in N-1 more steps each device passes on a finished chunk, so
// that every device ends with every sum. Each device sends and receives
// 2(N-1)/N of the buffer whatever N is, and every link works in each step:
// no device is a hot spot, which is why NCCL and Horovod use rings.
//
// Ordering. Every device marks the end of each of its steps, and before a
// step every device first waits for its left neighbour's previous mark: the
// waits of a step are all queued before any mark of it, so each binds to the
// previous step's. Nothing else is needed: a device's chunk is written only
// in the step that reads it from its neighbour, and following the waits
// leftwards round the ring shows every earlier read of that chunk done (the
// comment of run() walks through it).
#include <algorithm>
#include <cstdio>

#include "parallel/allreduce.hpp"

namespace dpt {
namespace {

struct Chunk {
    size_t first, count;
};

// Chunk k of `floats` floats cut into n: contiguous, the first floats % n one longer.
Chunk chunk(size_t floats, int n, int k) {
    const size_t base = floats / size_t(n), extra = floats % size_t(n);
    return {size_t(k) * base + std::min(size_t(k), extra), base + (size_t(k) < extra ? 1 : 0)};
}

// The part of chunk k that lies in `range` (count 0 where none does).
Chunk chunk_in(size_t floats, int n, int k, Range range) {
    const Chunk c = chunk(floats, n, k);
    const size_t first = std::max(c.first, range.first), end = std::min(c.first + c.count, range.end());
    return {first, end > first ? end - first : 0};
}

int mod(int a, int n) { return ((a % n) + n) % n; }

class Ring final : public Allreduce {
   public:
    const AllreduceInfo& info() const override {
        static constexpr AllreduceInfo info{
            "ring",
            "the buffer cut into N chunks passed round a ring of devices: N-1 steps adding, N-1 passing sums on",
            "a device waiting for its left neighbour's chunk",
            "waiting for peers (the slowest neighbour in the ring)",
        };
        return info;
    }

    // 2(n-1) steps, each moving 1/n of the buffer on every link at once.
    const CostModel* cost_model() const override {
        static constexpr CostModel model{
            "T = 2(n-1) (m alpha + S/(n beta))",
            "every link carries 1/n of it in each step",
            [](int n, double bytes, int messages, double alpha, double beta) {
                return n <= 1 ? 0.0 : 2.0 * (n - 1) * (messages * alpha + bytes / n / beta);
            },
        };
        return &model;
    }

    // One chunk at a time, the largest.
    size_t staging_floats(int, int devices, size_t floats) const override {
        return devices > 1 ? chunk(floats, devices, 0).count : 0;
    }

    // Reduce-scatter step s (0 .. N-2): device i pulls chunk i-1-s from its
    // left neighbour, which finished adding into it at step s-1 (the wait),
    // and adds it to its own. All-gather step s: device i pushes chunk
    // i+1-s, whose sum it completed (itself at s = 0, else received from its
    // left at s-1: the wait), into its right neighbour. A last wait makes
    // each device's buffer whole before the update reads it. Reads of a
    // chunk always precede its next write: following the waits leftwards
    // round the ring, a device's step t depends on device i-k's step t-k,
    // so a push into device i+1's chunk happens after device i+2 read it.
    //
    // A range (an --overlap bucket) takes the same steps over the parts of
    // the whole buffer's chunks that lie in it: each float then travels the
    // same way round the ring, and is summed in the same order, as when the
    // whole buffer goes at once.
    void run_range(std::span<Device* const> devices, size_t floats, Range range, bool timed) const override {
        const int n = int(devices.size());
        if (n == 1) return;
        const auto left = [&](int i) -> Device& { return *devices[size_t(mod(i - 1, n))]; };
        const auto wait_all = [&] {
            for (int i = 0; i < n; ++i) {
                mark_phase(*devices[size_t(i)], Phase::wait, timed);
                devices[size_t(i)]->wait_for(left(i));
            }
        };
        // N-1 steps: each device moves (part of) chunk chunk_at(i, s), then marks.
        const auto steps = [&](auto chunk_at, auto move) {
            for (int s = 0; s < n - 1; ++s) {
                wait_all();
                for (int i = 0; i < n; ++i) {
                    Device& d = *devices[size_t(i)];
                    const Chunk c = chunk_in(floats, n, chunk_at(i, s), range);
                    if (c.count > 0) move(d, i, c);
                    else mark_phase(d, Phase::allreduce, timed);  // (nothing of the range in this chunk)
                    d.mark();
                }
            }
        };
        for (Device* d : devices) d->mark();  // "my gradients are ready"
        steps([&](int i, int s) { return mod(i - 1 - s, n); },  // reduce-scatter: pull from the left, add
              [&](Device& d, int i, Chunk c) {
                  mark_phase(d, Phase::copy, timed);
                  d.copy_from_peer(left(i), c.first, c.count, 0);
                  mark_phase(d, Phase::allreduce, timed);
                  d.reduce_staged(c.first, c.count, 0, 1);
              });
        steps([&](int i, int s) { return mod(i + 1 - s, n); },  // all-gather: push the sum to the right
              [&](Device& d, int i, Chunk c) {
                  mark_phase(d, Phase::copy, timed);
                  d.copy_to_peer(*devices[size_t(mod(i + 1, n))], c.first, c.count);
              });
        wait_all();  // the last chunk, pushed by the left neighbour, has landed
    }

    std::string explain(std::span<Device* const> devices, size_t floats) const override {
        const int n = int(devices.size());
        char text[700];
        std::snprintf(text, sizeof text,
                      "the %zu floats were cut into %d chunks of %zu or %zu. In %d reduce-scatter step%s each device\n"
                      "added the chunk its left neighbour had summed so far to its own, so each then held the\n"
                      "whole sum of one chunk; in %d all-gather step%s each passed a finished chunk to its right.\n"
                      "Every device sent and received %d chunk%s (2(N-1)/N of the buffer), in parallel round the\n"
                      "ring: no device is a hot spot, and the volume per device does not grow with N.\n",
                      floats, n, floats / size_t(n), (floats + size_t(n) - 1) / size_t(n), n - 1, n == 2 ? "" : "s",
                      n - 1, n == 2 ? "" : "s", 2 * (n - 1), n == 2 ? "" : "s");
        return text;
    }
};

}  // namespace

const Allreduce& ring_allreduce() {
    static const Ring ring;
    return ring;
}

}  // namespace dpt
