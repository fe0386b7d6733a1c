// Calibration transfer (issue 31, item 5): the held-out H100 measurements (Vidur's H100 profiles,
// the format of ../shared/data/gpu-measurements/a100) against their bands when a folder
// ../shared/data/gpu-measurements/h100 holds them (our ../shared has none: the test says so and
// skips; the report gives the figures measured on a copy of microsoft/vidur data/profiling/*/h100).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "paper_bands.h"
#include "sim/calibration.h"
#include "sim/cost_model.h"
#include "sim/hardware.h"
#include "sim/model_catalog.h"
#include "test_util.h"

namespace loom::sim {
namespace {

// The held-out H100 files: A100's efficiencies predict them from the H100 datasheet entry alone.
// Bands (issue 31): collectives within 25% median, MLP operators within 10%.
TEST(SimTransfer, HeldOutH100Files) {
  LOOM_REQUIRE_SHARED();
  const std::string dir = test::shared_dir() + "/data/gpu-measurements/h100";
  if (!std::filesystem::is_directory(dir))
    GTEST_SKIP() << dir << " not found: the H100 measurements (Vidur's data/profiling/compute/h100/*/mlp.csv and "
                 << "network/h100_*/{all_reduce,send_recv}.csv, named as the a100 folder's) are not in ../shared";
  const auto rows = validate_transfer("a100", test::shared_dir() + "/data/gpu-measurements/a100", "h100", dir);
  const std::map<std::string, paper::KnownMiss> misses = {
      {"all_reduce_h100_dgx.csv",
       {1.0020, "the A100 fit gives all-reduce one latency (94.5 us) over its NVSwitch and PCIe-crossing samples, in "
                "seconds, where H100's NVSwitch all-reduce of 2 KB takes 7-37 us"}},
      {"all_reduce_h100_pairwise_nvlink.csv",
       {1.150, "the A100 fit prices PCIe at Gen4 (32 GB/s) where H100 has Gen5, and fits one latency for its NVSwitch "
               "and PCIe-crossing samples together (94.5 us)"}},
      {"send_recv_h100_dgx.csv",
       {0.278, "the A100 fit's send/recv efficiency is 1.09 of A100's NVLink (more than the datasheet link): carried "
               "to H100 it prices the bytes too fast"}},
      {"send_recv_h100_pairwise_nvlink.csv",
       {0.274, "this file is byte-identical to send_recv_a100_pairwise_nvlink.csv in Vidur's repository: an A100 "
               "measurement, which the H100 datasheet cannot predict"}}};
  const char* elementwise =
      "element-wise kernels reach 11-46% more of H100's datasheet bandwidth than of A100's (fitted on each: norm 0.34 "
      "vs 0.50, add 0.87 vs 1.02, SwiGLU 0.50 vs 0.58), half the samples of a file";
  const std::map<std::string, double> mlp_measured = {
      {"mlp_CodeLlama-34b-Instruct-hf.csv", 0.133}, {"mlp_Llama-2-70b-hf.csv", 0.132}, {"mlp_Llama-2-7b-hf.csv", 0.133},
      {"mlp_Qwen-72B.csv", 0.131},          {"mlp_internlm-20b.csv", 0.128},   {"mlp_phi-2.csv", 0.139}};
  int files = 0;
  for (const auto& r : rows) {
    const bool mlp = r.file.rfind("mlp_", 0) == 0;
    std::optional<paper::KnownMiss> miss;
    if (const auto it = misses.find(r.file); it != misses.end()) miss = it->second;
    if (const auto it = mlp_measured.find(r.file); it != mlp_measured.end()) miss = paper::KnownMiss{it->second, elementwise};
    paper::expect_band({"transfer A100 -> H100 " + r.file, 0.0, mlp ? 0.10 : 0.25,
                        mlp ? "issue 31: MLP operators within 10%" : "issue 31: collectives within 25%", miss},
                       r.median);
    ++files;
  }
  EXPECT_EQ(files, 10);
}

}  // namespace
}  // namespace loom::sim
