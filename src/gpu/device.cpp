#include "gpu/device.h"

#include "core/error.h"
#include "device/cpu_device.h"

#if defined(LOOM_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include "gpu/cuda/cuda_device.h"
#include "gpu/cuda/shared_gpu.h"
#if defined(LOOM_HAVE_NCCL)
#include "gpu/cuda/nccl_comm.h"
#endif
#endif

namespace loom::gpu {

DeviceKind parse_device(std::string_view name) {
  if (name == "cpu") return DeviceKind::Cpu;
  if (name == "cuda") return DeviceKind::Cuda;
  fail("--device '", name.substr(0, 64), "' is not a device: choose cpu or cuda");
}

const char* device_name(DeviceKind d) { return d == DeviceKind::Cuda ? "cuda" : "cpu"; }

bool cuda_built() {
#if defined(LOOM_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

bool nccl_built() {
#if defined(LOOM_HAVE_NCCL)
  return true;
#else
  return false;
#endif
}

DeviceProbe probe_cuda_devices() {
  DeviceProbe p;
#if defined(LOOM_HAVE_CUDA)
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    p.why = cat("cudaGetDeviceCount failed: ", cudaGetErrorString(e));
    (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return p;
  }
  if (n <= 0) {
    p.why = "cudaGetDeviceCount reports 0 devices";
    return p;
  }
  p.count = n;
#else
  p.why = "this loom was built without the CUDA backend (configure with the CUDA toolkit, or -DLOOM_CUDA=ON)";
#endif
  return p;
}

void require_device(DeviceKind device) {
  if (device == DeviceKind::Cpu) return;
  const DeviceProbe p = probe_cuda_devices();
  if (p.count == 0) fail("--device cuda: no CUDA device is usable: ", p.why);
}

std::string gpu_skip_reason() {
  const DeviceProbe p = probe_cuda_devices();
  return p.count > 0 ? std::string() : cat("no GPU: ", p.why);
}

}  // namespace loom::gpu

namespace loom::gpu {

std::unique_ptr<Device> make_device(DeviceKind kind, int ordinal, ThreadPool* pool) {
  if (kind == DeviceKind::Cpu) return make_cpu_device(pool);
  require_device(kind);
#if defined(LOOM_HAVE_CUDA)
  CudaDeviceOptions o;
  o.ordinal = ordinal;
  return std::make_unique<CudaDevice>(o);
#else
  (void)ordinal;
  fail("--device cuda: this loom was built without the CUDA backend");
#endif
}

RankMemoryFactory rank_memory(DeviceKind kind, int ordinal) {
  if (kind == DeviceKind::Cpu) return nullptr;
#if defined(LOOM_HAVE_CUDA)
  return shared_gpu_memory(ordinal);
#else
  (void)ordinal;
  fail("--device cuda: this loom was built without the CUDA backend");
#endif
}

std::unique_ptr<Communicator> device_world(DeviceKind kind, Communicator& world, int ordinal) {
  if (kind == DeviceKind::Cpu) return nullptr;
#if defined(LOOM_HAVE_NCCL)
  // A non-owning handle: the caller keeps `world` alive longer than the result.
  std::shared_ptr<Communicator> host(&world, [](Communicator*) {});
  return NcclCommunicator::create(std::move(host), ordinal);
#else
  (void)ordinal;
  fail("--device cuda --comm mpi: this loom was built without NCCL (the GPUs of MPI ranks exchange through it)");
#endif
}

int cuda_device_count() { return probe_cuda_devices().count; }

int64_t cuda_free_bytes(int ordinal) {
#if defined(LOOM_HAVE_CUDA)
  std::size_t free_b = 0, total_b = 0;
  if (cudaSetDevice(ordinal) != cudaSuccess || cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return int64_t(free_b);
#else
  (void)ordinal;
  return 0;
#endif
}

}  // namespace loom::gpu
