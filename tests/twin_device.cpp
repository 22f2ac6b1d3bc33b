#include "twin_device.hpp"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "devices/kinds.hpp"

namespace dpt::testing {

namespace {

// A twin: the CPU device it holds does the work; the twin answers to its
// own kind and name, and goes through that device for everything else.
class TwinDevice final : public Device {
   public:
    TwinDevice(int index, std::unique_ptr<Device> inner) : index_(index), inner_(std::move(inner)) {}

    DeviceKind kind() const override { return twin_kind; }
    Capabilities capabilities() const override { return inner_->capabilities(); }
    std::string name() const override { return "twin:" + std::to_string(index_); }
    size_t param_floats() const override { return inner_->param_floats(); }

    void synchronize() override { inner_->synchronize(); }
    void write_params(std::span<const float> host) override { inner_->write_params(host); }
    void read_params(std::span<float> host) override { inner_->read_params(host); }
    void write_grads(std::span<const float> host) override { inner_->write_grads(host); }
    void read_grads(std::span<float> host) override { inner_->read_grads(host); }
    int read_input(std::span<float> images, std::span<int32_t> labels) override { return inner_->read_input(images, labels); }
    int read_outputs(std::span<float> logits) override { return inner_->read_outputs(logits); }
    double take_loss_sum() override { return inner_->take_loss_sum(); }
    int64_t take_correct() override { return inner_->take_correct(); }
    int32_t take_first_bad_step() override { return inner_->take_first_bad_step(); }
    void throttle(int steps) override { inner_->throttle(steps); }

    void set_order(const uint32_t* order, size_t count) override { inner_->set_order(order, count); }
    void load_train(size_t first, int count) override { inner_->load_train(first, count); }
    void forward_backward(int stage, int batch) override { inner_->forward_backward(stage, batch); }
    void sgd_update(float scale, int batch) override { inner_->sgd_update(scale, batch); }
    void check_gradients(int32_t step) override { inner_->check_gradients(step); }
    void evaluate_test(size_t first, int count) override { inner_->evaluate_test(first, count); }
    void begin_phase(Phase phase) override { inner_->begin_phase(phase); }
    PhaseTimes take_phase_times() override { return inner_->take_phase_times(); }
    void trace_phases(std::chrono::steady_clock::time_point origin) override { inner_->trace_phases(origin); }
    std::vector<PhaseSpan> take_phase_spans() override { return inner_->take_phase_spans(); }
    double take_core_share() override { return inner_->take_core_share(); }
    bool slow_down(int factor) override { return inner_->slow_down(factor); }

    void await_bucket() override { inner_->await_bucket(); }
    void await_allreduce() override { inner_->await_allreduce(); }
    void await_main() override { inner_->await_main(); }
    void mark() override { inner_->mark(); }
    // Its CPU device waits, copies and sums: a CPU peer it reaches as its
    // own kind, any other through host memory, as reach() says.
    void wait_for(Device& other) override { inner_->wait_for(other); }
    HostMarks host_marks() override { return inner_->host_marks(); }
    float* host_grads() override { return inner_->host_grads(); }
    std::string failure() override { return inner_->failure(); }
    void copy_from_peer(Device& peer, size_t first, size_t count, size_t staged) override {
        inner_->copy_from_peer(peer, first, count, staged);
    }
    void reduce_staged(size_t first, size_t count, size_t staged, int slots) override {
        inner_->reduce_staged(first, count, staged, slots);
    }
    void copy_to_peer(Device& peer, size_t first, size_t count) override { inner_->copy_to_peer(peer, first, count); }
    void sum_across(ProcessSum& sum, Range range) override { inner_->sum_across(sum, range); }

   private:
    int index_;
    std::unique_ptr<Device> inner_;
};

// Host memory as it is: what a run of twins and CPU devices shares.
class HeapMemory final : public SharedHostMemory {
   public:
    ~HeapMemory() override {
        for (void* block : blocks_) std::free(block);
    }
    void* allocate(size_t bytes) override {
        const size_t rounded = (bytes + 63) / 64 * 64;
        void* block = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
        if (!block) throw std::bad_alloc();
        std::memset(block, 0, rounded == 0 ? 64 : rounded);
        std::lock_guard lock(mutex_);
        blocks_.push_back(block);
        return block;
    }

   private:
    std::mutex mutex_;
    std::vector<void*> blocks_;
};

std::vector<std::unique_ptr<Device>> make_twins(const ReplicaSetup& setup, std::span<const size_t> staging,
                                                std::span<const int> ordinals, std::shared_ptr<SharedHostMemory> shared) {
    std::vector<std::unique_ptr<Device>> twins;
    std::vector<std::unique_ptr<Device>> inner = make_cpu_devices(setup, staging, std::move(shared));
    for (size_t i = 0; i < inner.size(); ++i) twins.push_back(std::make_unique<TwinDevice>(ordinals[i], std::move(inner[i])));
    return twins;
}

std::string twin_banner(int count, const std::string& note) {
    return "devices: " + std::to_string(count) + " twin device" + (count == 1 ? "" : "s") + note + "\n";
}

}  // namespace

void add_twin_kind() {
    static std::once_flag added;
    std::call_once(added, [] {
        add_device_kind({twin_kind, "twin", {"twin"}, "twins", "twin device", "twin devices", "", true,
                         [] { return Presence{-1, {}}; }, make_twins, nullptr,
                         [] { return std::shared_ptr<SharedHostMemory>(std::make_shared<HeapMemory>()); },
                         twin_banner});
    });
}

}  // namespace dpt::testing
