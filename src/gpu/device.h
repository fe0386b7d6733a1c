// Choosing where a rank computes (`--device cpu|cuda`) and what this build and machine offer.
//
// This header is host-only and always built: a loom without the CUDA backend (LOOM_CUDA=OFF, or
// no toolkit at configure time) still parses --device and answers `cuda` with one clear line.
// The CUDA backend itself lives in gpu/cuda/ (built only with LOOM_HAVE_CUDA).
#pragma once

#include <string>
#include <string_view>

namespace loom::gpu {

enum class Device { Cpu, Cuda };

// "cpu" -> Cpu, "cuda" -> Cuda; anything else is a loom::Error naming the value and the choices.
Device parse_device(std::string_view name);
const char* device_name(Device d);

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
void require_device(Device device);

// For tests that need a GPU: "" when one is visible, else the reason to print when skipping.
std::string gpu_skip_reason();

}  // namespace loom::gpu
