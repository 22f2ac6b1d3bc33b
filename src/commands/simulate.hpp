// `dptrain simulate`: what 1, 2, ..., N devices would make of an epoch, from
// the compute time of one device and an alpha-beta model of the link between
// devices (each transfer costs alpha, the latency, plus its bytes over beta,
// the bandwidth). The model is here, apart from the command (simulate.cpp),
// so that the tests can check its formulas against cases worked by hand.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace dpt {

struct Link {
    std::string name;           // pcie, nvlink, custom, measured
    double bandwidth_gbps = 0;  // beta, in GB/s (1e9 bytes a second) for one transfer
    double latency_us = 0;      // alpha: the fixed cost of one transfer
};

// The presets of --link (pcie, nvlink), or an InputError naming --link.
Link link_preset(const std::string& name);

// Seconds one allreduce of `bytes` over n devices takes with `algorithm`,
// sent as `messages` allreduces (--overlap's buckets) that add up to
// `bytes`, by the algorithm's own cost model (allreduce.hpp: CostModel;
// naive: T = 2(n-1) (m alpha + S / beta), ring: T = 2(n-1) (m alpha + S /
// (n beta))). 0 for one device. The sums' arithmetic is left out: it runs
// at memory speed. An InputError for an algorithm without a model.
double modeled_allreduce_s(std::string_view algorithm, int n, double bytes, int messages, const Link& link);
// The algorithms with a cost model, in the table's order: what simulate predicts.
std::vector<std::string> simulated_allreduces();

// With --overlap, the allreduce runs beside backward, which is taken to be
// this share of forward+backward (its two matrix products per layer against
// forward's one).
inline constexpr double backward_share = 2.0 / 3.0;

struct SimulationInput {
    int batch = 256;
    size_t samples = 60000;  // an epoch's
    int max_devices = 8;
    // compute_s[n-1]: load + forward + backward of one part of ceil(batch / n)
    // samples on one device (the largest part of the even split: the step's
    // critical path).
    std::vector<double> compute_s;
    double update_s = 0;        // one SGD update
    double gradient_bytes = 0;  // the buffer the allreduce sums
    int buckets = 1;            // --overlap's, each one allreduce
    // CPU devices share this many cores, so n > cores devices compute n/cores
    // times slower; 0: every device has its own (GPUs).
    int cores = 0;
    // Samples of the part whose backward the allreduce can hide behind
    // (CPU devices hand buckets over during their last chunk); 0: the whole part.
    int pass_samples = 0;
    Link link;
};

// One row of the prediction.
struct SimulatedRun {
    int devices = 1;
    std::string algorithm;  // "-" for one device
    bool overlap = false;
    double compute_s = 0, allreduce_s = 0, exposed_s = 0, step_s = 0, epoch_s = 0, speedup = 1, efficiency = 1;
};

// One device, then for each n in 2..max_devices naive and ring, without and
// with overlap:
//   compute(n) = compute_s[n-1] * max(1, n / cores)
//   exposed    = T,                  without overlap
//              = max(0, T - W),      with: W = backward_share * compute(n) * pass / part
//   step       = compute(n) + update + exposed
//   epoch      = ceil(samples / batch) steps; speedup = epoch(1) / epoch(n); efficiency = speedup / n
std::vector<SimulatedRun> simulate(const SimulationInput& in);

}  // namespace dpt
