// --device parsing and the device probe: these run on every machine. Without a visible GPU (or
// without the CUDA backend) `cuda` must be refused up front with one line naming the reason.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "gpu/device.h"

namespace loom {
namespace {

TEST(GpuDevice, ParsesTheTwoDevicesAndNamesABadOne) {
  EXPECT_EQ(gpu::parse_device("cpu"), DeviceKind::Cpu);
  EXPECT_EQ(gpu::parse_device("cuda"), DeviceKind::Cuda);
  try {
    gpu::parse_device("gpu0");
    FAIL() << "gpu0 accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'gpu0'"), std::string::npos) << m;
    EXPECT_NE(m.find("cpu or cuda"), std::string::npos) << m;
  }
}

TEST(GpuDevice, ProbeAndRequireAgree) {
  const gpu::DeviceProbe p = gpu::probe_cuda_devices();
  EXPECT_GE(p.count, 0);
  EXPECT_NO_THROW(gpu::require_device(DeviceKind::Cpu));
  if (p.count > 0) {
    EXPECT_TRUE(p.why.empty());
    EXPECT_NO_THROW(gpu::require_device(DeviceKind::Cuda));
    EXPECT_EQ(gpu::gpu_skip_reason(), "");
    return;
  }
  EXPECT_FALSE(p.why.empty());
  if (!gpu::cuda_built()) {
    EXPECT_NE(p.why.find("without the CUDA backend"), std::string::npos) << p.why;
  }
  try {
    gpu::require_device(DeviceKind::Cuda);
    FAIL() << "--device cuda accepted with no device";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("--device cuda: ", 0), 0u) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_NE(m.find(p.why), std::string::npos) << m;
  }
  std::printf("[ no GPU here: %s ]\n", p.why.c_str());
}

}  // namespace
}  // namespace loom
