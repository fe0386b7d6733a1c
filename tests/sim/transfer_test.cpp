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

MeasurementFile collective_file(const std::string& name, Collective kind, const std::vector<OpSample>& rows) {
  MeasurementFile f;
  f.name = f.path = name;
  f.kind = MeasurementFile::Collective;
  f.samples = rows;
  for (size_t i = 0; i < f.samples.size(); ++i) {
    f.samples[i].op = kind == Collective::AllReduce ? "all_reduce" : "send_recv";
    f.samples[i].kind = SampleOp::Collective;
    f.samples[i].collective = kind;
    f.samples[i].row = int(i);
  }
  return f;
}
OpSample row(double bytes, int group, double us) {
  OpSample s;
  s.k = bytes, s.m = group, s.n = group, s.measured_s = us * 1e-6;
  return s;
}

// fit_calibration's datasheet rules (calibration.cpp), by hand on A100 (NVLink 300 GB/s each way).
// 1. A collective file with a node-local sample faster than the link allows, beyond the files' 1 us
//    reading, is left out and named: 12e6 bytes need 12e6 / 300e9 = 40 us; 38 us (+1 < 40) cannot be
//    an A100's, 39.5 us (+1 > 40) can. Left out, the send/recv figures stay the start's (13 us, 0.95).
// 2. bw_eff <= 1 on an NVLink GPU: samples t = 20 us + bytes / (300e9 x 1.2) at 1..8 MB (never under
//    the bound: 8e6 bytes in 42.2 us against 26.7) fit 1.2 unbound; held at 1, the latency refitted
//    must lie between 20 - 8e6 (1/300e9 - 1/360e9) = 15.6 us and 20 - 1e6 (..) = 19.4 us (the model
//    matches the measurement at some size in between). An L4 (PCIe, no NVLink: no such bound) keeps
//    about 1.2 on the same curve over its 32 GB/s.
// 3. No per-rank hop latency on an NVLink GPU's node-local groups (NVSwitch: one hop between any two):
//    all-reduce t = 30 + 5 (n - 2) us + 2 (n-1)/n bytes / (link x 0.6) on 2, 4, 8 GPUs fits hop 0 on A100,
//    and about 5 us on L4 (a PCIe node's ring).
TEST(SimTransfer, DatasheetRulesOfTheFit) {
  const GpuSpec a100 = find_gpu("a100"), l4 = find_gpu("l4");
  const Calibration start = default_calibration();
  const MeasurementFile fast = collective_file("fast.csv", Collective::SendRecv, {row(12e6, 2, 38)});
  const Calibration left = fit_calibration({&fast}, a100, start);
  EXPECT_NE(left.fitted_on.find("left out"), std::string::npos) << left.fitted_on;
  EXPECT_NE(left.fitted_on.find("fast.csv"), std::string::npos) << left.fitted_on;
  EXPECT_DOUBLE_EQ(left.send_recv.latency_s, 13e-6);
  EXPECT_DOUBLE_EQ(left.send_recv.bw_eff, 0.95);
  const MeasurementFile near = collective_file("near.csv", Collective::SendRecv, {row(12e6, 2, 39.5)});
  EXPECT_EQ(fit_calibration({&near}, a100, start).fitted_on.find("left out"), std::string::npos);

  std::vector<OpSample> steep_a100, steep_l4;
  for (double mb = 1; mb <= 8; mb += 0.25) {
    steep_a100.push_back(row(mb * 1e6, 2, 20 + mb * 1e6 / (300e9 * 1.2) * 1e6));
    steep_l4.push_back(row(mb * 1e6, 2, 20 + mb * 1e6 / (32e9 * 1.2) * 1e6));
  }
  const MeasurementFile sa = collective_file("steep.csv", Collective::SendRecv, steep_a100);
  const Calibration ca = fit_calibration({&sa}, a100, start);
  EXPECT_EQ(ca.fitted_on.find("left out"), std::string::npos);
  EXPECT_DOUBLE_EQ(ca.send_recv.bw_eff, 1.0);
  EXPECT_GE(ca.send_recv.latency_s, 20e-6 - 8e6 * (1 / 300e9 - 1 / 360e9) - 1e-9);
  EXPECT_LE(ca.send_recv.latency_s, 20e-6 - 1e6 * (1 / 300e9 - 1 / 360e9) + 1e-9);
  const MeasurementFile sl = collective_file("steep.csv", Collective::SendRecv, steep_l4);
  EXPECT_NEAR(fit_calibration({&sl}, l4, start).send_recv.bw_eff, 1.2, 0.06);

  auto ring = [](double link) {
    std::vector<OpSample> r;
    for (int n : {2, 4, 8})
      for (double mb = 1; mb <= 32; mb *= 2) r.push_back(row(mb * 1e6, n, 30 + 5 * (n - 2) + 2.0 * (n - 1) / n * mb * 1e6 / (link * 0.6) * 1e6));
    return r;
  };
  const MeasurementFile ra = collective_file("ring.csv", Collective::AllReduce, ring(300e9));
  const MeasurementFile rl = collective_file("ring.csv", Collective::AllReduce, ring(32e9));
  EXPECT_DOUBLE_EQ(fit_calibration({&ra}, a100, start).all_reduce.hop_latency_s, 0.0);
  EXPECT_NEAR(fit_calibration({&rl}, l4, start).all_reduce.hop_latency_s, 5e-6, 1e-6);
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
  // Collectives meet their band (datasheet rules of the fit: the pairwise send/recv file left out of the
  // A100 fit, bw_eff <= 1, no per-rank hop on NVSwitch). Measured: all-reduce NVSwitch 22.8%, pairwise
  // 8.1%; send/recv 24.2% (DGX) and 22.6% (pairwise). Half of each send/recv file crosses nodes (one GPU
  // per node): the cluster's network, in no GPU datasheet (A100 DGX 7.8 GB/s, H100 DGX 32-34 GB/s, the
  // pairwise file 2.0-2.4 GB/s at 48 MiB), priced 2-5x off; the node-local half is within 19%.
  const std::map<std::string, paper::KnownMiss> misses = {};
  const char* elementwise =
      "element-wise kernels, half the samples of a file, are priced 12-30% slow at 4-32 MB (GEMMs carry within "
      "5-12%): H100 runs them 1.78-1.90x faster than A100 at 64-128 MB (emb 1.90, SwiGLU 1.88, add 1.82, rope 1.78, "
      "norm 1.61) where the datasheets' HBM is 1.64x; no per-GPU figure here carries it (SMs x boost clock, "
      "1.72x, with latencies in clock time: 9.6-10.2%, phi-2 13.8%)";
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
