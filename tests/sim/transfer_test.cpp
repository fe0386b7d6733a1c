// Calibration transfer (issue 31, item 5; sim/hardware.h GemmCalibration::ridge and
// CollectiveCalibration::link_bw_fit, GpuSpec::pcie_bw, Calibration::pcie): the rules worked by hand
// on the A100 fit carried to other GPUs, and the held-out H100 measurements (Vidur's H100 profiles,
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

CostModel on(const std::string& node) {
  CostModelOptions o;
  o.custom_all_reduce = false;  // plain NCCL figures
  return CostModel(find_model("llama-3-8b"), parse_node(node), o);
}

// The A100 fit's collectives (hardware.cpp default_calibration: all-reduce 54 us + bytes / (0.63
// link), send/recv 13 us + bytes / (0.95 link), fitted on A100's NVLink, 300 GB/s each way) carried
// by the datasheet: latencies in link time, so x 300/450 on H100 and H200 (NVLink 4) and x 300/900
// on B200 (NVLink 5); a pairwise node's groups beyond a pair cross PCIe, Gen4 32 GB/s on A100 and
// Gen5 64 GB/s on H100, the PCIe class's 54 us taken in PCIe time (x 32/64 on Gen5).
TEST(SimTransfer, CollectiveLatenciesInLinkTimeAndPcieGenerations) {
  const double mb = 1 << 20;
  // 8 GPUs on NVSwitch: ring all-reduce 2 x 7/8 of the bytes on the busiest link.
  EXPECT_NEAR(on("a100x8").collective_s(Collective::AllReduce, mb, 8, 8), 54e-6 + 1.75 * mb / (300e9 * 0.63), 1e-12);
  EXPECT_NEAR(on("h100x8").collective_s(Collective::AllReduce, mb, 8, 8),
              54e-6 * 300 / 450 + 1.75 * mb / (450e9 * 0.63), 1e-12);
  EXPECT_NEAR(on("b200x8").collective_s(Collective::AllReduce, mb, 8, 8),
              54e-6 * 300 / 900 + 1.75 * mb / (900e9 * 0.63), 1e-12);
  EXPECT_NEAR(on("h100x8").collective_s(Collective::SendRecv, mb, 2, 2), 13e-6 * 300 / 450 + mb / (450e9 * 0.95), 1e-12);
  // Pairwise NVLink, 4 GPUs: the ring crosses PCIe (its class: 54 us in Gen4 time, 0.63).
  EXPECT_NEAR(on("a100x8:pairwise").collective_s(Collective::AllReduce, mb, 4, 4), 54e-6 + 1.5 * mb / (32e9 * 0.63), 1e-12);
  EXPECT_NEAR(on("h100x8:pairwise").collective_s(Collective::AllReduce, mb, 4, 4),
              54e-6 * 32 / 64 + 1.5 * mb / (64e9 * 0.63), 1e-12);
  // A pair keeps its NVLink.
  EXPECT_NEAR(on("h100x8:pairwise").collective_s(Collective::AllReduce, mb, 2, 2),
              54e-6 * 300 / 450 + 1.0 * mb / (450e9 * 0.63), 1e-12);
  // PCIe GPUs (no NVLink) keep the figures in seconds: their link is not NVLink.
  EXPECT_NEAR(on("l4x8").collective_s(Collective::AllReduce, mb, 4, 4), 54e-6 + 1.5 * mb / (32e9 * 0.63), 1e-12);
  EXPECT_DOUBLE_EQ(find_gpu("h100").pcie_bw, 64e9);
  EXPECT_DOUBLE_EQ(find_gpu("a100").pcie_bw, 32e9);
}

// The GEMM efficiency curve carried by the ridge point: m_half = 60.75 on A100 (312 TF over 2.039
// TB/s, 153.0 FLOP/B) is 60.75 x 37.0 / 153.0 = 14.69 on H20 (148 TF over 4.0 TB/s), so a batch-1
// GEMM there is bound by its weight read, not by a compute floor. By hand, Qwen3-32B's down
// projection [1, 25600] x [25600, 5120] in BF16 on H20: compute 2 x 25600 x 5120 x (1 + 14.69) /
// (148e12 x 0.7333) = 38.0 us; memory (262.1 MB + 61 KB) / (4.0e12 x 0.775) = 84.6 us; plus 6 us.
// Carried at a fixed m_half (60.75) the compute would be 145.8 us. The whole batch-1 step of
// Qwen3-32B (65.6 GB of weights at 0.775 x 4.0 TB/s = 21.2 ms) is then under 30 ms (it was 41 ms).
TEST(SimTransfer, GemmEfficiencyCarriedByTheRidge) {
  CostModelOptions o;
  const CostModel h20(find_model("qwen3-32b"), parse_node("h20x8"), o);
  const double k = 25600, n = 5120;
  const double mem = (k * n * 2 + k * 2 + n * 2) / (4.0e12 * 0.775);
  const double compute = 2 * k * n * (1 + 60.75 * (148.0 / 4.0) / (312.0 / 2.039)) / (148e12 * 0.7333);
  EXPECT_LT(compute, mem);
  EXPECT_NEAR(h20.gemm_s(1, k, n, SimDType::BF16, 2, 2), std::max(compute, mem) + 6e-6, 1e-12);
  const double b1 = h20.price(h20.prepare(Plan::make_tp(1)), {SeqWork{1, 4096, true}}).total_s;
  EXPECT_GT(b1, 65.6e9 / (4.0e12 * 0.775));
  EXPECT_LT(b1, 0.030);
  // On the GPU it was fitted on nothing moves: m_half as fitted.
  const CostModel a100(find_model("qwen3-32b"), parse_node("a100x8"), o);
  const double a_compute = 2 * k * n * (1 + 60.75) / (312e12 * 0.7333);
  const double a_mem = (k * n * 2 + k * 2 + n * 2) / (2.039e12 * 0.775);
  EXPECT_NEAR(a100.gemm_s(1, k, n, SimDType::BF16, 2, 2), std::max(a_compute, a_mem) + 6e-6, 1e-12);
}

// A fact of the calibration set, worked by hand from the datasheet (no cost model): A100's NVLink
// moves 300 GB/s each way (12 NVLink-3 links of 25 GB/s), so `bytes` cannot arrive in less than
// bytes / 300e9 s; the files print times to 0.001 ms, so a sample can read up to 1 us short. The
// node-local (2 GPUs, 2 per node) send/recv samples of send_recv_a100_pairwise_nvlink.csv beat that
// bound by more than 1 us in 380 of 994 rows (48 MiB in 147 us: 342 GB/s, 1.14x the link), which no
// A100 can: the file is byte-identical to Vidur's h100_pairwise_nvlink/send_recv.csv, and its
// node-local rows match send_recv_h100_dgx.csv within 1% at 8-48 MiB (an H100 measurement). The DGX
// file's samples stay under the bound (at most 0.94 of it), as do the all-reduce files' (ring: 2(n-1)/n
// of the bytes on the busiest link).
TEST(SimTransfer, PairwiseSendRecvFileBeatsTheA100Link) {
  LOOM_REQUIRE_SHARED();
  const auto files = read_measurements(test::shared_dir() + "/data/gpu-measurements/a100");
  std::map<std::string, int> beats, local;
  for (const auto& f : files) {
    if (f.kind != MeasurementFile::Collective) continue;
    for (const auto& s : f.samples) {
      if (s.n < s.m || (f.topology == Topology::PairwiseNvlink && s.m > 2)) continue;  // network / PCIe
      const double wire = s.collective == Collective::AllReduce ? 2.0 * (s.m - 1) / s.m * s.k : s.k;
      ++local[f.name];
      if (s.measured_s + 1e-6 < wire / 300e9) ++beats[f.name];
    }
  }
  EXPECT_EQ(local["send_recv_a100_pairwise_nvlink.csv"], 994);
  EXPECT_EQ(beats["send_recv_a100_pairwise_nvlink.csv"], 380);
  EXPECT_EQ(beats["send_recv_a100_dgx.csv"], 0);
  EXPECT_EQ(beats["all_reduce_a100_dgx.csv"], 0);
  EXPECT_EQ(beats["all_reduce_a100_pairwise_nvlink.csv"], 0);
}

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
       {0.34398, "H100's NCCL all-reduce reaches 1.8-2.1x A100's bandwidth at 8-64 MB where the datasheets' NVLink is "
               "1.5x (busbw 0.81 of 450 GB/s against 0.58 of 300 at 64 MB, 8 GPUs): no datasheet figure carries the "
               "rest"}},
      {"send_recv_h100_dgx.csv",
       {0.35594, "the A100 fit's send/recv efficiency is 1.09 of A100's NVLink (more than the datasheet link), which "
                 "carried to H100 prices 490 GB/s where H100 measures about 350 GB/s at 64 MB: 26-29% too fast at every "
                 "size"}},
      {"send_recv_h100_pairwise_nvlink.csv",
       {0.33103, "this file is byte-identical to send_recv_a100_pairwise_nvlink.csv in Vidur's repository: an A100 "
               "measurement, which the H100 datasheet cannot predict"}}};
  const char* elementwise =
      "element-wise kernels reach 11-46% more of H100's datasheet bandwidth than of A100's (fitted on each: norm 0.34 "
      "vs 0.50, add 0.87 vs 1.02, SwiGLU 0.50 vs 0.58), half the samples of a file; its GEMMs carry within 5-12%";
  const std::map<std::string, double> mlp_measured = {
      {"mlp_CodeLlama-34b-Instruct-hf.csv", 0.12965}, {"mlp_Llama-2-70b-hf.csv", 0.12916}, {"mlp_Llama-2-7b-hf.csv", 0.12792},
      {"mlp_Qwen-72B.csv", 0.12684},          {"mlp_internlm-20b.csv", 0.12756},   {"mlp_phi-2.csv", 0.12969}};
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
