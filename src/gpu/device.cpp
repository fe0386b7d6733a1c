#include "gpu/device.h"

#include "core/error.h"

#if defined(LOOM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace loom::gpu {

Device parse_device(std::string_view name) {
  if (name == "cpu") return Device::Cpu;
  if (name == "cuda") return Device::Cuda;
  fail("--device '", name, "' is not a device: choose cpu or cuda");
}

const char* device_name(Device d) { return d == Device::Cuda ? "cuda" : "cpu"; }

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

void require_device(Device device) {
  if (device == Device::Cpu) return;
  const DeviceProbe p = probe_cuda_devices();
  if (p.count == 0) fail("--device cuda: no CUDA device is usable: ", p.why);
}

std::string gpu_skip_reason() {
  const DeviceProbe p = probe_cuda_devices();
  return p.count > 0 ? std::string() : cat("no GPU: ", p.why);
}

}  // namespace loom::gpu
