// A CPU device's stream: one worker thread that runs queued tasks in order.
// A task is a small closure stored inline (CpuTask: no allocation per task),
// copied into a fixed ring; the host blocks only when the ring is full, or
// in synchronize().
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <new>
#include <thread>
#include <type_traits>
#include <vector>

namespace dpt {

// A closure of at most 48 bytes of trivially copyable captures (pointers,
// numbers), held in place: queuing one copies bytes and allocates nothing.
class CpuTask {
   public:
    CpuTask() = default;
    template <class F>
        requires(!std::is_same_v<std::decay_t<F>, CpuTask>)
    CpuTask(F f) : run_([](const void* closure) { (*static_cast<const F*>(closure))(); }) {
        static_assert(sizeof(F) <= capacity, "a CPU device task captures at most 48 bytes");
        static_assert(alignof(F) <= alignof(std::max_align_t) && std::is_trivially_copyable_v<F>,
                      "a CPU device task captures pointers and numbers only");
        new (storage_) F(f);
    }
    void operator()() const { run_(storage_); }

   private:
    static constexpr size_t capacity = 48;
    alignas(std::max_align_t) unsigned char storage_[capacity]{};
    void (*run_)(const void*) = nullptr;
};

template <class Task>
class CpuStream {
   public:
    using Executor = std::function<void(const Task&)>;

    CpuStream(Executor execute, size_t capacity = 4096)
        : execute_(std::move(execute)), ring_(capacity), worker_([this] { loop(); }) {}

    ~CpuStream() {
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        work_ready_.notify_one();
        worker_.join();
    }

    CpuStream(const CpuStream&) = delete;
    CpuStream& operator=(const CpuStream&) = delete;

    void enqueue(const Task& task) {
        {
            std::unique_lock lock(mutex_);
            // When full, let the worker drain half before queuing more, so the
            // host wakes once per half ring rather than once per task.
            if (queued_ - started_ == ring_.size())
                progress_.wait(lock, [&] { return queued_ - started_ <= ring_.size() / 2; });
            ring_[queued_ % ring_.size()] = task;
            ++queued_;
        }
        work_ready_.notify_one();
    }

    void synchronize() {
        std::unique_lock lock(mutex_);
        progress_.wait(lock, [&] { return finished_ == queued_; });
    }

   private:
    void loop() {
        for (;;) {
            Task task;
            {
                std::unique_lock lock(mutex_);
                work_ready_.wait(lock, [&] { return stopping_ || started_ < queued_; });
                if (started_ == queued_) return;  // stopping, nothing left
                task = ring_[started_ % ring_.size()];
                ++started_;
            }
            progress_.notify_all();
            execute_(task);
            {
                std::lock_guard lock(mutex_);
                ++finished_;
            }
            progress_.notify_all();
        }
    }

    Executor execute_;
    std::vector<Task> ring_;
    uint64_t queued_ = 0, started_ = 0, finished_ = 0;
    bool stopping_ = false;
    std::mutex mutex_;
    std::condition_variable work_ready_, progress_;
    std::thread worker_;  // last: starts after, and is joined before, the members above
};

}  // namespace dpt
