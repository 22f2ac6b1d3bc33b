// What the CUDA side of dptrain shares between its files, and nothing
// outside them includes: gpu_device.cpp (the replicas), gpu_graph.cpp (CUDA
// graphs of their work), gpu_info.cpp (the inventory, peer access and copy
// speed of `dptrain devices`) and gpu_nccl.cpp (NCCL, loaded at run time).
#pragma once
#include <cuda_runtime_api.h>

#include "devices/device.hpp"

namespace dpt::gpu_internal {

// Whether GPU a can address GPU b's memory (cudaDeviceCanAccessPeer).
bool can_access_peer(int a, int b);
// Direct copies between every pair of GPUs 0..gpus-1, where the hardware allows.
void enable_peer_access(int gpus);
// Every pair of GPUs 0..gpus-1 copies directly (else some go through host memory).
bool all_peer_copies_direct(int gpus);

// A GPU replica's CUDA device, streams and gradient buffer (`d` must be a
// GPU replica). The allreduce stream is the stream itself without --overlap.
int gpu_of(Device& d);
cudaStream_t stream_of(Device& d);
cudaStream_t allreduce_stream_of(Device& d);
float* grads_of(Device& d);

// --breakdown and --trace inside a CUDA graph (gpu_graph.cpp): a replica's
// phase marks made while its streams were recorded are the graph's. Before
// a recording the previous graph's are dropped; after each replay they are
// the replica's marks until its phases are taken.
void forget_recorded_marks(Device& d);
void marks_replayed(Device& d);

}  // namespace dpt::gpu_internal
