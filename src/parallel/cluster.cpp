// The parts of cluster.hpp that do not need MPI: a run in one process, the
// launcher's environment, and --across's names.
#include "parallel/cluster.hpp"

#include <unistd.h>

#include <cstdlib>

#include "base/errors.hpp"

namespace dpt {

AcrossKind parse_across(const std::string& text) {
    if (text == "auto") return AcrossKind::automatic;
    if (text == "mpi") return AcrossKind::mpi;
    if (text == "ring") return AcrossKind::ring;
    if (text == "nccl") return AcrossKind::nccl;
    throw InputError("--across must be auto, mpi (MPI_Allreduce), ring (dptrain's ring over MPI send and receive) "
                     "or nccl (NCCL between the processes' GPUs), got '" + text + "'");
}

const char* to_string(AcrossKind kind) {
    switch (kind) {
        case AcrossKind::automatic: return "auto";
        case AcrossKind::mpi: return "mpi";
        case AcrossKind::ring: return "ring";
        case AcrossKind::nccl: return "nccl";
    }
    return "?";
}

AcrossDecision decide_across(AcrossKind asked, std::span<const std::string> places,
                             std::span<const std::string> nccl_missing) {
    if (asked != AcrossKind::automatic && asked != AcrossKind::nccl) return {asked, ""};
    std::string why;
    for (size_t r = 0; r < places.size() && why.empty(); ++r)
        if (places[r].empty()) why = "rank " + std::to_string(r) + "'s device 0 is a CPU device";
    for (size_t r = 0; r < nccl_missing.size() && why.empty(); ++r)
        if (!nccl_missing[r].empty()) why = "rank " + std::to_string(r) + ": " + nccl_missing[r];
    for (size_t a = 0; a < places.size() && why.empty(); ++a)
        for (size_t b = a + 1; b < places.size() && why.empty(); ++b)
            if (places[a] == places[b])
                why = "ranks " + std::to_string(a) + " and " + std::to_string(b) + " both have their device 0 on " +
                      places[a] + ", and NCCL refuses two ranks on one GPU";
    if (why.empty()) return {AcrossKind::nccl, ""};
    if (asked == AcrossKind::nccl)
        throw InputError("--across nccl: " + why +
                         "; give each process a GPU of its own (at most as many processes per machine as GPUs), "
                         "or --across mpi, which sums through host memory");
    return {AcrossKind::mpi, why};
}

namespace {

class SingleProcess final : public Cluster {
   public:
    int rank() const override { return 0; }
    int size() const override { return 1; }
    int local_rank() const override { return 0; }
    std::string host() const override {
        char name[256] = "localhost";
        gethostname(name, sizeof name - 1);
        return name;
    }
    Failure agree(const std::string& error, std::string_view) override {
        return error.empty() ? Failure{} : Failure{0, error, 1};
    }
    std::string leader_text(const std::string& text, std::string_view) override { return text; }
    void broadcast(std::span<float>, std::string_view) override {}
    std::vector<double> all_gather(std::span<const double> mine, std::string_view) override {
        return {mine.begin(), mine.end()};
    }
    int max(int value, std::string_view) override { return value; }
    std::vector<std::string> all_gather_text(const std::string& mine, std::string_view) override { return {mine}; }
    void sum(float*, size_t) override { next_sum(); }
    [[noreturn]] void abort(int status) override { std::exit(status); }

   protected:
    void reserve(size_t) override {}
};

// A whole number from the environment variable `name`, or -1.
int from_environment(const char* name) {
    const char* text = std::getenv(name);
    if (!text || !*text) return -1;
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    return *end == '\0' && value >= 0 && value < (1L << 30) ? int(value) : -1;
}

}  // namespace

std::unique_ptr<Cluster> single_process() { return std::make_unique<SingleProcess>(); }

LaunchedAs launched_as() {
    // Open MPI's mpirun, then MPICH's and Intel MPI's (PMI), then srun.
    const std::pair<const char*, const char*> launchers[] = {
        {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
        {"PMI_SIZE", "PMI_RANK"},
        {"SLURM_STEP_NUM_TASKS", "SLURM_PROCID"},
    };
    for (const auto& [size, rank] : launchers) {
        const int n = from_environment(size);
        if (n >= 1) return {n, std::max(0, from_environment(rank))};
    }
    return {};
}

}  // namespace dpt
