#include "sim/hardware.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/json_bounded.h"
#include "core/parse_number.h"

namespace loom::sim {

namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

constexpr double kGB = 1e9;
constexpr double kTB = 1e12;
constexpr double kTF = 1e12;

std::vector<GpuSpec> make_catalog() {
  std::vector<GpuSpec> c;
  // NVIDIA A10 datasheet: 24 GB GDDR6, 600 GB/s, BF16 125 TFLOPS dense (250 with sparsity),
  // PCIe Gen4 x16 64 GB/s (32 GB/s each way), no NVLink, no FP8.
  c.push_back({"a10", "NVIDIA A10 (PCIe)", 24 * kGB, 600 * kGB, 125 * kTF, 0, 0, 32 * kGB, false, 4,
               "NVIDIA A10 Tensor Core GPU datasheet"});
  // NVIDIA L4 datasheet: 24 GB, 300 GB/s, BF16 242 TF / FP8 485 TF with sparsity -> 121 / 242.5
  // dense; PCIe Gen4 x16 64 GB/s.
  c.push_back({"l4", "NVIDIA L4 (PCIe)", 24 * kGB, 300 * kGB, 121 * kTF, 242.5 * kTF, 0, 32 * kGB, false,
               8, "NVIDIA L4 Tensor Core GPU datasheet"});
  // NVIDIA A100 datasheet (SXM): 40 GB HBM2 1,555 GB/s or 80 GB HBM2e 2,039 GB/s; BF16 312 TF
  // dense; NVLink 600 GB/s (300 each way). Note the measurements are on A100 80 GB SXM.
  c.push_back({"a100-40gb", "NVIDIA A100 40GB SXM", 40 * kGB, 1555 * kGB, 312 * kTF, 0, 0, 300 * kGB, true,
               8, "NVIDIA A100 Tensor Core GPU datasheet"});
  c.push_back({"a100-80gb", "NVIDIA A100 80GB SXM", 80 * kGB, 2039 * kGB, 312 * kTF, 0, 0, 300 * kGB, true,
               8, "NVIDIA A100 Tensor Core GPU datasheet"});
  // NVIDIA H100 datasheet (SXM): 80 GB HBM3 3.35 TB/s; BF16 1,979 / FP8 3,958 TF with sparsity ->
  // 989.5 / 1,979 dense; NVLink 900 GB/s (450 each way).
  c.push_back({"h100-sxm", "NVIDIA H100 SXM 80GB", 80 * kGB, 3.35 * kTB, 989.5 * kTF, 1979 * kTF, 0,
               450 * kGB, true, 8, "NVIDIA H100 Tensor Core GPU datasheet"});
  // NVIDIA H200 datasheet (SXM): 141 GB HBM3e 4.8 TB/s; same tensor cores as H100; NVLink 900
  // GB/s. The Shift paper (4.1.1) states the same: 141 GB, 4.8 TB/s, 1,979 FP8 TFLOPS, 900 GB/s.
  c.push_back({"h200", "NVIDIA H200 SXM 141GB", 141 * kGB, 4.8 * kTB, 989.5 * kTF, 1979 * kTF, 0, 450 * kGB,
               true, 8, "NVIDIA H200 Tensor Core GPU datasheet"});
  // NVIDIA H20 (HGX H20 product brief): 96 GB HBM3 4.0 TB/s; BF16 148 TF, FP8 296 TF dense;
  // NVLink 900 GB/s.
  c.push_back({"h20", "NVIDIA H20 96GB", 96 * kGB, 4.0 * kTB, 148 * kTF, 296 * kTF, 0, 450 * kGB, true, 8,
               "NVIDIA HGX H20 product brief"});
  // NVIDIA DGX B200 datasheet: 1,440 GB and 64 TB/s for 8 GPUs -> 180 GB, 8 TB/s each; B200
  // per GPU FP4 18 PF / FP8 9 PF / BF16 4.5 PF with sparsity -> 9 / 4.5 / 2.25 PF dense; NVLink 5
  // 1.8 TB/s (900 GB/s each way).
  c.push_back({"b200", "NVIDIA B200 180GB", 180 * kGB, 8 * kTB, 2250 * kTF, 4500 * kTF, 9000 * kTF,
               900 * kGB, true, 8, "NVIDIA DGX B200 datasheet"});
  // NVIDIA GB200 NVL72 datasheet: 72 Blackwell GPUs with 13.4 TB HBM3e and 576 TB/s -> 186 GB,
  // 8 TB/s each; FP4 1,440 PF / FP8 720 PF / BF16 360 PF with sparsity for 72 GPUs -> 10 / 5 /
  // 2.5 PF dense per GPU; NVLink 5 1.8 TB/s per GPU in one 72-GPU NVLink domain.
  c.push_back({"gb200", "NVIDIA GB200 (one Blackwell GPU of NVL72)", 186 * kGB, 8 * kTB, 2500 * kTF,
               5000 * kTF, 10000 * kTF, 900 * kGB, true, 72, "NVIDIA GB200 NVL72 datasheet"});
  // PCIe host links from the same datasheets: A10, L4, A100 "PCIe Gen4 64 GB/s" (32 each way);
  // H100 SXM, H200, H20 "PCIe Gen5 128 GB/s" (64 each way); B200 and GB200 PCIe Gen5.
  for (auto& g : c) {
    const bool gen5 = g.name == "h100-sxm" || g.name == "h200" || g.name == "h20" || g.name == "b200" || g.name == "gb200";
    g.pcie_bw = gen5 ? 64 * kGB : 32 * kGB;
  }
  // L2 cache sizes from NVIDIA's architecture whitepapers: GA102 (A10) 6 MB, AD104 (L4) 48 MB,
  // GA100 (A100) 40 MB, GH100 (H100, H200, H20) 50 MB. Blackwell's is not in the datasheets
  // used here: 0 (no cache term).
  for (auto& g : c) {
    if (g.name == "a10") g.cache_bytes = 6e6;
    else if (g.name == "l4") g.cache_bytes = 48e6;
    else if (g.name.rfind("a100", 0) == 0) g.cache_bytes = 40e6;
    else if (g.name == "h100-sxm" || g.name == "h200" || g.name == "h20") g.cache_bytes = 50e6;
  }
  return c;
}

}  // namespace

GpuSpec cpu_spec(double memcpy_bytes_per_s, double peak_flops, double memory_bytes, double elem_scale) {
  if (!(memcpy_bytes_per_s > 0) || !(peak_flops > 0) || !(elem_scale > 0))
    fail("cpu hardware: bandwidth ", memcpy_bytes_per_s, " B/s, peak ", peak_flops, " FLOP/s and scale ", elem_scale,
         " must be > 0");
  GpuSpec g;
  g.name = "cpu";
  g.description = "this machine's CPU, one core per rank (measured roofline)";
  g.hbm_bytes = memory_bytes;
  g.hbm_bw = memcpy_bytes_per_s / elem_scale;
  g.flops_bf16 = peak_flops;
  g.flops_fp8 = peak_flops;  // q8_0 weights: 1-byte weights, f32 FMA throughput
  g.link_bw = memcpy_bytes_per_s / elem_scale;
  g.nvlink = false;
  g.default_gpus_per_node = 1;
  g.source = "measured at run time (kernels/roofline.h)";
  return g;
}

NodeSpec cpu_node(const GpuSpec& cpu, int ranks) {
  NodeSpec n;
  n.gpu = cpu;
  n.gpus_per_node = ranks;
  n.topology = Topology::Pcie;
  n.net_bw = cpu.link_bw;
  return n;
}

const char* sim_dtype_name(SimDType t) {
  switch (t) {
    case SimDType::BF16: return "bf16";
    case SimDType::FP8: return "fp8";
    case SimDType::FP4: return "fp4";
  }
  return "?";
}

SimDType parse_sim_dtype(const std::string& s) {
  const std::string l = lower(s);
  if (l == "bf16" || l == "fp16" || l == "f16") return SimDType::BF16;
  if (l == "fp8" || l == "f8" || l == "e4m3") return SimDType::FP8;
  if (l == "fp4" || l == "nvfp4" || l == "f4") return SimDType::FP4;
  fail("unknown dtype '", s, "' (expected bf16, fp8 or fp4)");
}

double sim_dtype_bytes(SimDType t) {
  switch (t) {
    case SimDType::BF16: return 2.0;
    case SimDType::FP8: return 1.0;
    case SimDType::FP4: return 0.5;
  }
  return 2.0;
}

double GpuSpec::flops(SimDType t) const {
  const double f = t == SimDType::BF16 ? flops_bf16 : t == SimDType::FP8 ? flops_fp8 : flops_fp4;
  if (f <= 0) fail("GPU ", name, " has no ", sim_dtype_name(t), " tensor cores (datasheet lists none)");
  return f;
}

const char* topology_name(Topology t) {
  switch (t) {
    case Topology::NvSwitch: return "nvswitch";
    case Topology::PairwiseNvlink: return "pairwise-nvlink";
    case Topology::Pcie: return "pcie";
  }
  return "?";
}

std::string NodeSpec::name() const { return cat(gpu.name, "x", gpus_per_node); }

const std::vector<GpuSpec>& gpu_catalog() {
  static const std::vector<GpuSpec> c = make_catalog();
  return c;
}

namespace {

// The JSON file of a hardware entry path: the file itself, or hardware.json in a folder.
std::string entry_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const std::string f = (fs::path(path) / "hardware.json").string();
    return fs::is_regular_file(f, ec) ? f : std::string();
  }
  return fs::is_regular_file(path, ec) ? path : std::string();
}

}  // namespace

bool is_hardware_entry(const std::string& name) { return !name.empty() && !entry_file(name).empty(); }

nlohmann::json hardware_entry_json(const GpuSpec& g) {
  return {{"name", g.name},           {"description", g.description},
          {"hbm_bytes", g.hbm_bytes}, {"hbm_bw", g.hbm_bw},
          {"flops_bf16", g.flops_bf16}, {"flops_fp8", g.flops_fp8},
          {"flops_fp4", g.flops_fp4}, {"link_bw", g.link_bw},
          {"nvlink", g.nvlink},       {"default_gpus_per_node", g.default_gpus_per_node},
          {"cache_bytes", g.cache_bytes}, {"pcie_bw", g.pcie_bw}, {"source", g.source}};
}

GpuSpec gpu_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) fail("hardware entry ", where, ": not a JSON object");
  auto num = [&](const char* key, bool positive) {
    if (!j.contains(key) || !j[key].is_number()) fail("hardware entry ", where, ": missing number '", key, "'");
    const double v = j[key].get<double>();
    if (positive ? !(v > 0) : !(v >= 0))
      fail("hardware entry ", where, ": ", key, " = ", v, " must be ", positive ? "> 0" : ">= 0");
    return v;
  };
  GpuSpec g;
  g.name = j.value("name", std::string("custom"));
  g.description = j.value("description", g.name);
  g.hbm_bytes = num("hbm_bytes", true);
  g.hbm_bw = num("hbm_bw", true);
  g.flops_bf16 = num("flops_bf16", true);
  g.flops_fp8 = j.contains("flops_fp8") ? num("flops_fp8", false) : 0.0;
  g.flops_fp4 = j.contains("flops_fp4") ? num("flops_fp4", false) : 0.0;
  g.link_bw = num("link_bw", true);
  g.nvlink = j.value("nvlink", false);
  g.default_gpus_per_node = int(j.contains("default_gpus_per_node") ? num("default_gpus_per_node", true) : 1.0);
  g.cache_bytes = j.contains("cache_bytes") ? num("cache_bytes", false) : 0.0;
  g.pcie_bw = j.contains("pcie_bw") ? num("pcie_bw", false) : 0.0;
  g.source = j.value("source", where);
  return g;
}

GpuSpec read_hardware_entry(const std::string& path) {
  const std::string f = entry_file(path);
  if (f.empty()) fail("hardware entry '", path, "': no such file, and no folder with hardware.json");
  std::ifstream in(f);
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    fail("hardware entry ", f, ": not JSON (", e.what(), ")");
  }
  return gpu_from_json(j, f);
}

GpuSpec find_gpu(const std::string& name) {
  if (is_hardware_entry(name)) return read_hardware_entry(name);
  std::string n = lower(name);
  n.erase(std::remove(n.begin(), n.end(), ' '), n.end());
  static const std::pair<const char*, const char*> kAliases[] = {
      {"a100", "a100-80gb"}, {"a100-80", "a100-80gb"}, {"a100-40", "a100-40gb"}, {"a100_80gb", "a100-80gb"},
      {"a100_40gb", "a100-40gb"}, {"h100", "h100-sxm"}, {"h100sxm", "h100-sxm"}, {"h200-sxm", "h200"},
      {"b200-sxm", "b200"}, {"gb200-nvl72", "gb200"}};
  for (const auto& [alias, key] : kAliases)
    if (n == alias) n = key;
  for (const auto& g : gpu_catalog())
    if (g.name == n) return g;
  std::string known;
  for (const auto& g : gpu_catalog()) known += (known.empty() ? "" : ", ") + g.name;
  fail("unknown GPU '", name, "' (known: ", known, "; or a hardware entry: a JSON file or a loom profile folder)");
}

NodeSpec parse_node(const std::string& spec) {
  // A hardware entry path, whole or with an "xN" suffix.
  if (is_hardware_entry(spec)) {
    NodeSpec node;
    node.gpu = read_hardware_entry(spec);
    node.gpus_per_node = node.gpu.default_gpus_per_node;
    node.topology = node.gpu.nvlink ? Topology::NvSwitch : Topology::Pcie;
    if (!node.gpu.nvlink) node.net_bw = node.gpu.link_bw;
    return node;
  }
  if (auto x = spec.rfind('x'); x != std::string::npos && x > 0 && x + 1 < spec.size() &&
                                std::all_of(spec.begin() + long(x) + 1, spec.end(), ::isdigit)) {
    const std::string path = spec.substr(0, x);
    if (is_hardware_entry(path)) {
      NodeSpec node = parse_node(path);
      node.gpus_per_node = int(parse_int(spec.substr(x + 1), cat("node '", text_excerpt(spec, 48), "': the count"), 1, 1024));
      return node;
    }
  }
  std::string s = lower(spec);
  s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
  std::string topo;
  if (auto colon = s.find(':'); colon != std::string::npos) {
    topo = s.substr(colon + 1);
    s = s.substr(0, colon);
  }
  std::string gpu_name = s;
  int count = 0;
  if (auto x = s.rfind('x'); x != std::string::npos && x + 1 < s.size() &&
                              std::all_of(s.begin() + long(x) + 1, s.end(), ::isdigit)) {
    gpu_name = s.substr(0, x);
    count = int(parse_int(s.substr(x + 1), cat("node '", text_excerpt(spec, 48), "': the GPU count"), 1, 1024));
  }
  NodeSpec node;
  node.gpu = find_gpu(gpu_name);
  node.gpus_per_node = count > 0 ? count : node.gpu.default_gpus_per_node;
  node.topology = node.gpu.nvlink ? Topology::NvSwitch : Topology::Pcie;
  if (!topo.empty()) {
    if (topo == "nvswitch") node.topology = Topology::NvSwitch;
    else if (topo == "pairwise" || topo == "pairwise-nvlink") node.topology = Topology::PairwiseNvlink;
    else if (topo == "pcie") node.topology = Topology::Pcie;
    else fail("node '", spec, "': unknown topology '", topo, "' (nvswitch, pairwise, pcie)");
    if (!node.gpu.nvlink && node.topology != Topology::Pcie)
      fail("node '", spec, "': ", node.gpu.name, " has no NVLink, only topology pcie applies");
  }
  return node;
}

const Calibration& default_calibration() {
  // Fitted by `loom sim calibrate --measurements ../shared/data/gpu-measurements/a100` (A100 80GB
  // SXM, fp16, Vidur's profiles); see cost_model.h for the fitting procedure. Collective figures
  // are relative to the datasheet link bandwidth.
  static const Calibration c = [] {
    Calibration k;
    k.fitted_on = "A100-80GB SXM measurements (gpu-measurements/a100, Vidur profiles)";
    // `loom sim calibrate --hardware a100 --measurements ../shared/data/gpu-measurements/a100`
    k.gemm = {0.7333, 60.75, 0.775, 6.0e-6};
    k.gemm.ridge = 312e12 / 2039e9;  // A100-80GB SXM's (the catalog's figures): m_half carried by ridge
    k.norm = {0.35, 2.5e-6};
    k.add = {0.875, 0.0};
    k.act = {0.50, 2.0e-6};
    k.rope = {0.45, 1.25e-6};
    k.emb = {0.15, 0.62e-6};
    // Latencies in units of the A100's NVLink (300 GB/s each way; CollectiveCalibration).
    k.all_reduce = {54e-6, 0.63, 0, 300e9, true};
    // Not measured: all-to-all and all-gather take NCCL's ring figures of all-reduce.
    k.all_to_all = k.all_reduce;
    k.all_gather = k.all_reduce;
    k.broadcast = k.all_reduce;
    k.send_recv = {13e-6, 0.95, 0, 300e9, true};
    k.get = k.send_recv;  // not measured: a one-sided read over the same link
    // Groups crossing PCIe (pairwise node beyond a pair): the all-reduce figures over the A100's
    // PCIe Gen4, as they were priced before the class existed.
    k.pcie = {54e-6, 0.63, 0, 32e9, false};
    k.net = {0.0, 0.265};
    return k;
  }();
  return c;
}

}  // namespace loom::sim
