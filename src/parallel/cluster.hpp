// The processes of one training run. Launched by mpirun (or Slurm's srun), a
// run is P processes ("ranks"), each owning G devices of its own; together
// they train one model as P·G devices would in one process. The batch is
// split over all P·G devices, rank-major (rank r's devices are r·G ...
// r·G+G-1, with the parts one process would give them); each process loads
// only its devices' parts; gradients are summed within each process first
// (any --allreduce), then across the processes (--across); every replica
// applies the same update. Rank 0 alone prints, evaluates and writes files.
//
// This is what the trainer sees of the processes. A run in one process is
// a cluster of one (single_process()). cluster_mpi.cpp joins mpirun's job;
// in a build without MPI, cluster_none.cpp refuses a job of several.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "devices/device.hpp"
#include "base/errors.hpp"

namespace dpt {

class Allreduce;
class Cluster;

// How the processes sum gradients (--across).
enum class AcrossKind {
    automatic,  // nccl where it can (GPU replicas, NCCL found, a GPU per process), else mpi
    mpi,        // MPI_Allreduce: the MPI library's own algorithm, through host memory
    ring,       // dptrain's ring over MPI send and receive: reduce-scatter, then all-gather
    nccl,       // one NCCL communicator of every process's device 0: GPU to GPU, no host copies
};
AcrossKind parse_across(const std::string& text);  // an InputError naming --across
const char* to_string(AcrossKind kind);

// What --across `asked` becomes in a job whose processes have their device 0
// at `places` (gpu_place(); "" for a CPU device) and NCCL as `nccl_missing`
// says (per process: "" when it can be used, else why not). auto is nccl
// where every process can use NCCL and has a GPU of its own (NCCL refuses
// two ranks on one GPU), else mpi with the reason in `why_not_nccl`; nccl
// where it cannot be is an InputError naming --across and the reason. The
// same on every process, which all decide from the same lists.
struct AcrossDecision {
    AcrossKind kind = AcrossKind::mpi;
    std::string why_not_nccl;  // auto's reason for mpi on GPU replicas
};
AcrossDecision decide_across(AcrossKind asked, std::span<const std::string> places,
                             std::span<const std::string> nccl_missing);

// A multi-process run's allreduce: `within` this process, then across the
// processes as `across` (--across) says. auto and nccl are decided by every
// process from every process's facts (where its device 0 `root` is, whether
// it has NCCL), so all decide alike; `across` becomes what was decided, and
// `note` says why auto did not choose NCCL for GPU replicas.
std::unique_ptr<Allreduce> sum_across_processes(AcrossKind& across, Cluster& cluster, const Allreduce& within,
                                                Device& root, std::string& note);

// The default of --collective-timeout, in seconds.
inline constexpr double default_collective_timeout = 300;

// A stop request (SIGINT, SIGTERM) seen by one rank during an epoch is
// agreed on by every rank in the gradient sum of some step a; each then
// stops before step a + stop_lag of the run, a step no rank has queued yet:
// a host queues step s only after step s - 3 has finished on its CPU
// devices (Device::throttle(2)), so by step a + 3 every host has seen it.
inline constexpr uint64_t stop_lag = 3;

class Cluster : public ProcessSum {
   public:
    ~Cluster() override = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    bool leader() const { return rank() == 0; }
    // This process's place among those on its machine (0 ...): which of the
    // machine's GPUs its replicas take.
    virtual int local_rank() const = 0;
    virtual std::string host() const = 0;  // the machine's name
    // "rank 1 (node2)": how messages name this process.
    std::string who() const { return "rank " + std::to_string(rank()) + " (" + host() + ")"; }

    // --- Collectives: every rank calls them, in the same order. Each gives
    // up after the collective timeout: it says which rank waited for what,
    // and aborts the whole job. ---

    // What went wrong on each rank ("": nothing). Returns the first failing
    // rank's message (rank -1 and "" when none failed) and how many ranks
    // failed: the same on every rank.
    struct Failure {
        int rank = -1;
        std::string message;
        int ranks = 0;
    };
    virtual Failure agree(const std::string& error, std::string_view during) = 0;
    // Runs `step` on every rank; an InputError on any rank becomes the same
    // InputError on every rank (naming the rank when there are several), so
    // that bad input on one node exits 2 everywhere instead of a hang.
    template <class Step>
    void all_or_none(Step&& step, std::string_view during) {
        std::string error;
        try {
            step();
        } catch (const InputError& e) {
            error = e.what();
        }
        const Failure failure = agree(error, during);
        if (failure.rank < 0) return;
        // (Every rank failing is the same mistake everywhere: no rank to name.)
        if (failure.ranks == size()) throw InputError(failure.message);
        throw InputError("rank " + std::to_string(failure.rank) + ": " + failure.message);
    }
    // Rank 0's `text`, on every rank.
    virtual std::string leader_text(const std::string& text, std::string_view during) = 0;
    // Rank 0's `data` into every rank's.
    virtual void broadcast(std::span<float> data, std::string_view during) = 0;
    // Every rank's `mine` (as many on each), one after another in rank order,
    // on every rank.
    virtual std::vector<double> all_gather(std::span<const double> mine, std::string_view during) = 0;
    // The largest `value` of any rank.
    virtual int max(int value, std::string_view during) = 0;
    // Every rank's `mine`, in rank order, on every rank.
    virtual std::vector<std::string> all_gather_text(const std::string& mine, std::string_view during) = 0;

    // --- The gradient sums (ProcessSum, called from device 0's allreduce
    // stream; every rank makes the same calls, in the same order). ---
    // Set before training: the algorithm, the timeout, the most floats one
    // sum moves, how many sums make a step, and how the n-th sum of the run
    // is named in a timeout's message ("epoch 2, step 14").
    void configure(AcrossKind kind, double timeout_s, size_t floats, uint64_t sums_per_step,
                   std::function<std::string(uint64_t)> name_step) {
        kind_ = kind;
        timeout_s_ = timeout_s;
        sums_per_step_ = sums_per_step;
        name_step_ = std::move(name_step);
        reserve(floats);
    }
    AcrossKind kind() const { return kind_; }
    double timeout() const { return timeout_s_; }
    // The signal every rank agreed to stop on, when the run's step `step`
    // (counted from the first step this process queued) is where it stops;
    // else 0.
    int stop_before(uint64_t step) const {
        const uint64_t at = agreed_step_.load();
        return at != no_step && step >= at + stop_lag ? agreed_signal_.load() : 0;
    }

    // Exits the whole job at once with `status` (after an error on this rank
    // alone: the other ranks would wait for it forever).
    [[noreturn]] virtual void abort(int status) = 0;

   protected:
    virtual void reserve(size_t floats) = 0;
    // Called by sum() after the n-th sum agreed on `signal` (0: no stop).
    void note_stop(uint64_t sum, int signal) {
        if (signal != 0 && agreed_step_.load() == no_step) {
            agreed_signal_ = signal;
            agreed_step_ = sum / sums_per_step_;
        }
    }
    // "the gradient sum of epoch 2, step 14": what the n-th sum belongs to.
    std::string name_sum(uint64_t sum) const {
        return "the gradient sum of " + (name_step_ ? name_step_(sum / sums_per_step_) : "step " + std::to_string(sum));
    }
    uint64_t next_sum() { return sums_++; }

   private:
    static constexpr uint64_t no_step = ~uint64_t(0);
    AcrossKind kind_ = AcrossKind::mpi;
    double timeout_s_ = default_collective_timeout;
    uint64_t sums_per_step_ = 1;
    std::function<std::string(uint64_t)> name_step_;
    std::atomic<uint64_t> sums_{0}, agreed_step_{no_step};
    std::atomic<int> agreed_signal_{0};
};

// A run in one process: every collective is the identity.
std::unique_ptr<Cluster> single_process();

// The processes this one belongs to: under mpirun (or srun), MPI's world;
// else a cluster of one. A build without MPI launched as several processes
// throws an InputError saying how to get an MPI build. Called once, first.
std::unique_ptr<Cluster> join_cluster();

// How many processes the launcher's environment says the job has (Open
// MPI's OMPI_COMM_WORLD_SIZE, PMI's PMI_SIZE, Slurm's SLURM_STEP_NUM_TASKS
// under srun), and this one's rank; 1 and 0 outside a launcher.
struct LaunchedAs {
    int size = 1, rank = 0;
};
LaunchedAs launched_as();

}  // namespace dpt
