// A run of several processes under mpirun (or srun): MPI's side of
// cluster.hpp. Every wait on another rank is a nonblocking MPI call polled
// against --collective-timeout, so that a rank that died or hangs ends the
// job with a message instead of leaving the others waiting forever. (A rank
// that dies is usually noticed first by mpirun, which then ends the job.)
// The C API only: MPI's C++ bindings are deprecated and warn.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <thread>
#include <utility>

#include "parallel/cluster.hpp"
#include "base/signals.hpp"

namespace dpt {
namespace {

class MpiCluster final : public Cluster {
   public:
    MpiCluster() {
        // Gradient sums run on a device's stream (another thread than the
        // trainer's), never two MPI calls at once: MPI_THREAD_SERIALIZED.
        int provided = 0;
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
        MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
        MPI_Comm_rank(comm_, &rank_);
        MPI_Comm_size(comm_, &size_);
        MPI_Comm machine = MPI_COMM_NULL;  // the processes that share this one's memory
        MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &machine);
        MPI_Comm_rank(machine, &local_rank_);
        MPI_Comm_free(&machine);
        char name[MPI_MAX_PROCESSOR_NAME] = {};
        int length = 0;
        MPI_Get_processor_name(name, &length);
        host_.assign(name, size_t(std::max(0, length)));
        if (provided < MPI_THREAD_SERIALIZED)
            throw std::runtime_error("this MPI library offers no MPI_THREAD_SERIALIZED, which dptrain needs (its "
                                     "devices' streams make the MPI calls of the gradient sums)");
    }
    ~MpiCluster() override {
        MPI_Comm_free(&comm_);
        MPI_Finalize();
    }

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    int local_rank() const override { return local_rank_; }
    std::string host() const override { return host_; }

    Failure agree(const std::string& error, std::string_view during) override {
        int mine = error.empty() ? size_ : rank_, first = size_, failed = error.empty() ? 0 : 1, failures = 0;
        MPI_Request requests[2];
        MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm_, &requests[0]);
        MPI_Iallreduce(&failed, &failures, 1, MPI_INT, MPI_SUM, comm_, &requests[1]);
        wait(requests, 2, during);
        if (first == size_) return {};
        return {first, text_of(first, error, during), failures};
    }

    std::string leader_text(const std::string& text, std::string_view during) override {
        return text_of(0, text, during);
    }

    void broadcast(std::span<float> data, std::string_view during) override {
        MPI_Request request;
        MPI_Ibcast(data.data(), int(data.size()), MPI_FLOAT, 0, comm_, &request);
        wait(&request, 1, during);
    }

    std::vector<double> all_gather(std::span<const double> mine, std::string_view during) override {
        std::vector<double> all(mine.size() * size_t(size_));
        MPI_Request request;
        MPI_Iallgather(mine.data(), int(mine.size()), MPI_DOUBLE, all.data(), int(mine.size()), MPI_DOUBLE, comm_,
                       &request);
        wait(&request, 1, during);
        return all;
    }

    int max(int value, std::string_view during) override {
        int largest = value;
        MPI_Request request;
        MPI_Iallreduce(&value, &largest, 1, MPI_INT, MPI_MAX, comm_, &request);
        wait(&request, 1, during);
        return largest;
    }

    std::vector<std::string> all_gather_text(const std::string& mine, std::string_view during) override {
        const int length = int(mine.size());
        std::vector<int> lengths(static_cast<size_t>(size_)), offsets(lengths);
        MPI_Request request;
        MPI_Iallgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_, &request);
        wait(&request, 1, during);
        int total = 0;
        for (int r = 0; r < size_; ++r) offsets[size_t(r)] = std::exchange(total, total + lengths[size_t(r)]);
        std::string all(size_t(total), ' ');
        MPI_Iallgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, comm_,
                        &request);
        wait(&request, 1, during);
        std::vector<std::string> texts;
        for (int r = 0; r < size_; ++r) texts.push_back(all.substr(size_t(offsets[size_t(r)]), size_t(lengths[size_t(r)])));
        return texts;
    }

    // data <- its sum over the ranks. A stop request travels with every
    // sum: the largest signal number any rank has seen (cluster.hpp).
    void sum(float* data, size_t count) override {
        const uint64_t n = next_sum();
        int stop_mine = stop_signal(), stop_any = 0;
        MPI_Request requests[2];
        int k = 0;
        MPI_Iallreduce(&stop_mine, &stop_any, 1, MPI_INT, MPI_MAX, comm_, &requests[k++]);
        if (kind() != AcrossKind::ring && count > 0)
            MPI_Iallreduce(MPI_IN_PLACE, data, int(count), MPI_FLOAT, MPI_SUM, comm_, &requests[k++]);
        wait(requests, k, n);
        if (kind() == AcrossKind::ring) ring_sum(data, count, n);
        note_stop(n, stop_any);
    }

    [[noreturn]] void abort(int status) override {
        std::fflush(stdout);
        MPI_Abort(comm_, status);
        std::_Exit(status);
    }

   protected:
    void reserve(size_t floats) override { received_.assign(floats / size_t(size_) + 1, 0.0f); }

   private:
    // Rank `from`'s `text`, on every rank.
    std::string text_of(int from, const std::string& text, std::string_view during) {
        int length = rank_ == from ? int(text.size()) : 0;
        MPI_Request request;
        MPI_Ibcast(&length, 1, MPI_INT, from, comm_, &request);
        wait(&request, 1, during);
        std::string out = rank_ == from ? text : std::string(size_t(length), ' ');
        MPI_Ibcast(out.data(), length, MPI_CHAR, from, comm_, &request);
        wait(&request, 1, during);
        return out;
    }

    // The ring (--across ring), as allreduce_ring.cpp does it between the
    // devices of one process: the buffer is cut into P chunks. Reduce-scatter:
    // in P-1 rounds each rank sends a chunk to its right neighbour and adds
    // the one from its left, so that rank r ends with the whole sum of chunk
    // r+1. All-gather: in P-1 more rounds the sums go round the ring. Each
    // chunk is summed once, by one rank, so every rank gets the same bits.
    void ring_sum(float* data, size_t count, uint64_t n) {
        const int p = size_, right = (rank_ + 1) % p, left = (rank_ + p - 1) % p;
        const auto chunk = [&](int c) {
            c = ((c % p) + p) % p;
            const size_t first = count * size_t(c) / size_t(p), end = count * size_t(c + 1) / size_t(p);
            return std::pair{data + first, int(end - first)};
        };
        MPI_Request requests[2];
        for (int round = 0; round < p - 1; ++round) {  // reduce-scatter
            const auto [out, out_count] = chunk(rank_ - round);
            const auto [in, in_count] = chunk(rank_ - round - 1);
            MPI_Irecv(received_.data(), in_count, MPI_FLOAT, left, round, comm_, &requests[0]);
            MPI_Isend(out, out_count, MPI_FLOAT, right, round, comm_, &requests[1]);
            wait(requests, 2, n);
            for (int i = 0; i < in_count; ++i) in[i] += received_[size_t(i)];
        }
        for (int round = 0; round < p - 1; ++round) {  // all-gather
            const auto [out, out_count] = chunk(rank_ + 1 - round);
            const auto [in, in_count] = chunk(rank_ - round);
            MPI_Irecv(in, in_count, MPI_FLOAT, left, p + round, comm_, &requests[0]);
            MPI_Isend(out, out_count, MPI_FLOAT, right, p + round, comm_, &requests[1]);
            wait(requests, 2, n);
        }
    }

    // Polls `requests` until they complete, or the timeout passes: then it
    // says which rank waited for what (`during`, or the n-th gradient sum's
    // step) and aborts the job. Polling first yields, then naps, so that a
    // waiting rank leaves the cores to the computing ones.
    template <class What>
    void wait(MPI_Request* requests, int count, const What& what) {
        int done = 0;
        const auto start = std::chrono::steady_clock::now();
        for (int polls = 0;; ++polls) {
            MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE);
            if (done) return;
            if (polls % 256 == 255 &&
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout())
                timed_out(what);
            if (polls < 1000) std::this_thread::yield();
            else std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
    }
    [[noreturn]] void timed_out(std::string_view during) {
        std::fprintf(stderr,
                     "dptrain: %s: no answer from the other ranks within %g s during %.*s "
                     "(--collective-timeout): one of them died, hangs or is far behind; ending the job\n",
                     who().c_str(), timeout(), int(during.size()), during.data());
        abort(1);
    }
    [[noreturn]] void timed_out(uint64_t n) { timed_out(name_sum(n)); }

    MPI_Comm comm_ = MPI_COMM_NULL;
    int rank_ = 0, size_ = 1, local_rank_ = 0;
    std::string host_;
    std::vector<float> received_;  // the ring's incoming chunk
};

}  // namespace

std::unique_ptr<Cluster> join_cluster() {
    if (launched_as().size <= 1) return single_process();
    return std::make_unique<MpiCluster>();
}

}  // namespace dpt
