// Choosing where a rank computes (`--device cpu|cuda`) and what this build and machine offer.
//
// This header is host-only and always built: a loom without the CUDA backend (LOOM_CUDA=OFF, or
// no toolkit at configure time) still parses --device and answers `cuda` with one clear line.
// The CUDA backend itself lives in gpu/cuda/ (built only with LOOM_HAVE_CUDA).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "comm/communicator.h"
#include "comm/rank_memory.h"
#include "core/thread_pool.h"
#include "device/device.h"

namespace loom::gpu {

// "cpu" -> Cpu, "cuda" -> Cuda; anything else is a loom::Error naming the value and the choices.
DeviceKind parse_device(std::string_view name);
const char* device_name(DeviceKind d);

// True when this binary was built with the CUDA backend (LOOM_HAVE_CUDA).
bool cuda_built();
// True when it was built with the NCCL communicator (LOOM_HAVE_NCCL).
bool nccl_built();

// What cudaGetDeviceCount says. count 0 with `why` set when the build has no CUDA, the driver
// is missing, or no device is visible (CUDA_VISIBLE_DEVICES, no GPU). Never throws.
struct DeviceProbe {
  int count = 0;
  std::string why;  // empty when count > 0
};
DeviceProbe probe_cuda_devices();

// Checks up front that `device` can run here: nothing for cpu; for cuda a loom::Error with one
// line ("--device cuda: ...") when the build has no CUDA backend or no device is visible.
void require_device(DeviceKind device);

// The Device a rank computes on (device/device.h): the CPU device over `pool`, or the CUDA device of
// GPU `ordinal` (on a rank thread of a world made with rank_memory(Cuda), the rank's stream).
// Call it on the rank's thread. cuda without the backend or a GPU: loom::Error (require_device).
std::unique_ptr<Device> make_device(DeviceKind kind, int ordinal, ThreadPool* pool);

// The local communicator's memory for ranks of `kind` (comm/rank_memory.h): host memory for cpu
// (null: the backend's default), device memory shared through one GPU for cuda (ranks as threads
// on GPU `ordinal`, gpu/cuda/shared_gpu.h).
RankMemoryFactory rank_memory(DeviceKind kind, int ordinal = 0);

// For ranks with a GPU each (MPI processes, or local threads on a host with a GPU per rank): an
// NCCL communicator on GPU `ordinal` built over `world` (gpu/cuda/nccl_comm.h: device buffers
// through NCCL, host buffers through `world`), which must not outlive `world`; null for cpu.
// Collective over `world`. (Ranks sharing one GPU need none: the local backend's shared-GPU memory
// moves their device buffers, rank_memory.)
std::unique_ptr<Communicator> device_world(DeviceKind kind, Communicator& world, int ordinal);

// GPUs visible to this process (0 without the CUDA backend or a GPU).
int cuda_device_count();
// Bytes of GPU `ordinal` free now (cudaMemGetInfo; 0 without the backend).
int64_t cuda_free_bytes(int ordinal);

// For tests that need a GPU: "" when one is visible, else the reason to print when skipping.
std::string gpu_skip_reason();

}  // namespace loom::gpu
