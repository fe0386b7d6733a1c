// Ranks that share one GPU: threads of one process (comm/local.h), each with its own CUDA stream,
// exchanging through device memory. The local backend's algorithms (publish pointers, barrier,
// copy from peers, rank-order sum) run unchanged; this RankMemory makes its copies
// cudaMemcpyAsync on the rank's stream (device to device when both sides are device memory,
// cudaMemcpyDefault otherwise) and its sums the rank-order kernel (gpu/cuda/ops.h), so the sums
// are the same bits as the CPU backends' (communicator.h). With it every plan's exactness test
// can run on one lent GPU: `LocalWorld::run(n, fn, options, shared_gpu_memory(0))`.
//
// Streams: each rank thread gets its own non-blocking stream, created on its thread when the
// world starts; rank_stream() returns it on that thread. A rank must enqueue its compute on that
// stream (or synchronise its other streams before a collective): the backend's fence is
// cudaStreamSynchronize(rank_stream()).
//
// Host buffers (the engine's step descriptors, check_agreement's hashes) also work: copies use
// cudaMemcpyDefault, and a sum with any host input runs on the host after a fence.
#pragma once

#include <cuda_runtime_api.h>

#include "comm/rank_memory.h"

namespace loom::gpu {

// Memory for ranks sharing CUDA device `device`.
RankMemoryFactory shared_gpu_memory(int device = 0);

// The stream of the calling rank thread (nullptr on a thread that is not such a rank).
cudaStream_t rank_stream();

// True when p is device (or managed) memory the GPU can read directly.
bool is_device_pointer(const void* p);

}  // namespace loom::gpu
