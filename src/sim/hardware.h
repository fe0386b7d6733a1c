// Hardware catalog of the simulator: GPUs (datasheet figures), nodes (GPUs per node and how
// they are connected) and the measured calibration of the cost model.
//
// Units: bytes, bytes/s, FLOP/s, seconds. Link bandwidths are per GPU and per direction (NVIDIA
// quotes NVLink as the bidirectional total: H100 "900 GB/s" = 450 GB/s each way). FLOP/s are
// dense (datasheets print the 2:4-sparse figure first; dense is half of it).
//
// The calibration (efficiency curves, collective latencies, per-step overhead) is fitted on A100
// measurements (../shared/data/gpu-measurements/a100, `loom sim calibrate`) and carried to other
// GPUs as efficiencies: a fraction of each GPU's own peak. That transfer is an assumption, stated
// in every report the simulator prints, and measured by `loom sim validate --calibrate-on`.
//
// Hardware entries outside the catalog: a JSON file (or a folder holding hardware.json, as
// `loom profile` writes for this machine) with the GpuSpec fields by name (hardware_entry_json);
// find_gpu and parse_node take such a path wherever they take a catalog name.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace loom::sim {

struct MeasuredOps;  // sim/measured_ops.h

// Weight / compute precision of a simulated deployment.
enum class SimDType { BF16, FP8, FP4 };
const char* sim_dtype_name(SimDType t);
// "bf16" | "fp16" (priced as bf16) | "fp8" | "fp4"; throws loom::Error naming the value.
SimDType parse_sim_dtype(const std::string& s);
double sim_dtype_bytes(SimDType t);  // 2, 1, 0.5

struct GpuSpec {
  std::string name;          // catalog key, lower case: "h200", "a100-80gb", ...
  std::string description;   // marketing name
  double hbm_bytes = 0;      // device memory
  double hbm_bw = 0;         // peak memory bandwidth, bytes/s
  double flops_bf16 = 0;     // dense tensor-core FLOP/s
  double flops_fp8 = 0;      // 0 when the GPU has no FP8 tensor cores
  double flops_fp4 = 0;      // 0 when the GPU has no FP4 tensor cores
  double link_bw = 0;        // GPU-to-GPU bandwidth per direction (NVLink, or PCIe when none)
  bool nvlink = false;       // false: peers talk over PCIe
  int default_gpus_per_node = 8;
  std::string source;        // datasheet the figures come from
  // Cache between the cores and memory that operands stay in from one use to the next (GPU: L2;
  // a CPU: its last-level cache, shared by the ranks on it); 0 when unknown (no cache term).
  double cache_bytes = 0;
  // The host link per direction (PCIe x16: Gen4 32 GB/s, Gen5 64 GB/s): what an NVLink GPU's
  // traffic crosses to a GPU it has no NVLink to (a pairwise node); 0: Gen4.
  double pcie_bw = 0;

  // Dense FLOP/s for `t`; throws loom::Error when the GPU lacks that precision.
  double flops(SimDType t) const;
};

enum class Topology {
  NvSwitch,        // every GPU reaches every other at full link bandwidth (DGX/HGX)
  PairwiseNvlink,  // NVLink between GPU pairs only, the rest over PCIe
  Pcie,            // no NVLink
};
const char* topology_name(Topology t);

struct NodeSpec {
  GpuSpec gpu;
  int gpus_per_node = 8;
  Topology topology = Topology::NvSwitch;
  double net_bw = 25e9;  // inter-node bandwidth per GPU per direction (one 200 Gb/s NIC each)
  std::string name() const;  // "h200x8"
};

// All GPUs of the catalog, in a fixed order.
const std::vector<GpuSpec>& gpu_catalog();
// Case-insensitive lookup with aliases ("a100" = "a100-80gb", "h100" = "h100-sxm", "gb200"...),
// or a hardware entry: a path to a JSON file, or to a folder holding hardware.json. Throws
// loom::Error listing the known names.
GpuSpec find_gpu(const std::string& name);
// True when `name` is a path to a hardware entry (file, or folder with hardware.json).
bool is_hardware_entry(const std::string& name);

// A hardware entry as JSON: {"name", "description", "hbm_bytes", "hbm_bw", "flops_bf16",
// "flops_fp8", "flops_fp4", "link_bw", "nvlink", "default_gpus_per_node", "cache_bytes", "source"} (units as in
// GpuSpec). Reading checks every figure (> 0 where the cost model divides by it) and ignores
// other keys (loom profile adds a "profile" object).
nlohmann::json hardware_entry_json(const GpuSpec& g);
GpuSpec gpu_from_json(const nlohmann::json& j, const std::string& where);
GpuSpec read_hardware_entry(const std::string& path);

// Parses a node: "h200x8", "h200", "a100-80gb x4", "a100x4:pairwise", "l4x2", or a hardware
// entry path with an optional "xN" ("prof/x2"). The GPU count defaults to the GPU's
// default_gpus_per_node; the topology to NvSwitch for NVLink GPUs and Pcie otherwise. Throws
// loom::Error naming the value.
NodeSpec parse_node(const std::string& spec);

// This machine's CPU as a simulator device (one rank = one core), built from figures measured at
// run time by the caller (kernels/roofline.h: memcpy bandwidth and peak FLOP/s; the simulator
// itself runs no kernels). Ranks talk through shared memory, so the "link" is a memcpy too.
// `elem_scale` multiplies every byte count the cost model prices in 2-byte (bf16) units: 2 for an
// f32 engine (weights, activations and KV in 4 bytes) is priced exactly as bf16 at half the
// bandwidths. Not in gpu_catalog(): it describes the host it was measured on.
GpuSpec cpu_spec(double memcpy_bytes_per_s, double peak_flops, double memory_bytes, double elem_scale = 1.0);
// A node of `ranks` such devices, connected over PCIe-like shared memory (no custom all-reduce).
NodeSpec cpu_node(const GpuSpec& cpu, int ranks);

// ---- calibration ----

// GEMM time on one GPU (t = max(compute, memory) + latency):
//   compute = 2*m*k*n / (peak * eff_max * m / (m + m_half))   (efficiency rises with tokens m)
//   memory  = bytes / (hbm_bw * mem_eff * (1 + cache_gain / (1 + (W / (cache_fraction * C))^2)))
// where C = GpuSpec::cache_bytes and W the working set the operands come back from, over every
// rank sharing that cache: the bytes each rank re-reads every step (its weights) times the ranks
// computing at once in a simulated step; the operation's own bytes (or the weight copies it
// cycles through) times the concurrent ranks in a measurement. A working set far above the
// cache streams at mem_eff of the datasheet bandwidth; one well inside it is served up to
// (1 + cache_gain) times faster; cache_fraction is the part of the cache that behaves so (a
// last-level cache shared with other tenants, or holding other data).
// Carried to another GPU (issue 31): m_half scales with the GPU's ridge point (its BF16 FLOP/s
// over its memory bandwidth) against the ridge of the GPU it was fitted on. The m_half term,
// 2 k n m_half / (peak eff_max), is a time per weight element: on the fitting GPU it cannot be told
// from a cost of streaming the weights (every small-m GEMM is memory-bound there), and carried at
// a fixed m_half it gives a GPU of low ridge (H20: 148 TF over 4 TB/s, a quarter of A100's ridge)
// a compute floor above its weight read at batch 1. Scaled with the ridge, the term is the same
// per weight byte in units of the GPU's memory bandwidth. Validated on the held-out H100 files
// (`loom sim validate --calibrate-on`): see SimTransfer in tests/sim.
struct GemmCalibration {
  double eff_max = 0.72;
  double m_half = 24;
  double mem_eff = 0.80;
  double latency_s = 6e-6;
  double cache_gain = 0;
  double cache_fraction = 1;
  double ridge = 0;  // FLOP/byte of the GPU fitted on; 0: m_half as fitted on every GPU
};

// Memory-bound element-wise kernel: t = latency + bytes / (hbm_bw * bw_eff).
struct ElementwiseCalibration {
  double bw_eff = 0.5;
  double latency_s = 2e-6;
};

// Collective on one group of n ranks: t = latency_s + hop_latency_s * (n - 2) + algorithm_bytes /
// (link_bw * bw_eff), where algorithm_bytes is what one GPU sends on its busiest link (ring
// all-reduce: 2(n-1)/n * size) and hop_latency_s the latency each further rank adds (ring steps).
// Carried to another GPU (issue 31): the latencies are taken in units of the link's time, i.e.
// scaled by link_bw_fit / the link's bandwidth, when the path is of the link kind the figures were
// fitted on (NVLink to NVLink, PCIe to PCIe; a newer NVLink generation moves a collective's
// fixed steps as much faster as its bytes). 0: seconds as fitted on every GPU.
struct CollectiveCalibration {
  double latency_s = 20e-6;
  double bw_eff = 0.6;
  double hop_latency_s = 0;
  double link_bw_fit = 0;    // bytes/s per direction of the link fitted on
  bool nvlink_fit = true;    // that link was NVLink (else PCIe or shared memory)
};

struct Calibration {
  std::string fitted_on;  // where the numbers come from
  GemmCalibration gemm;
  ElementwiseCalibration norm, add, act, rope, emb;
  // Attention kernels (FlashAttention-class): prefill as compute with this efficiency of peak,
  // decode as KV reads with this efficiency of hbm_bw; plus a launch latency per layer.
  double attn_compute_eff = 0.55;
  double attn_mem_eff = 0.75;
  double attn_latency_s = 8e-6;
  // Intra-node (NVLink/NVSwitch or PCIe) and inter-node collectives.
  CollectiveCalibration all_reduce, all_to_all, all_gather, send_recv, broadcast;
  CollectiveCalibration get;  // one-sided read (Communicator::get); not measured: send_recv's
  CollectiveCalibration net;  // any collective that crosses nodes (bandwidth = net_bw)
  // Any collective of NVLink GPUs whose group crosses PCIe inside a node (a pairwise-NVLink node's
  // groups beyond a pair, or NVLink GPUs on a PCIe node): PCIe's own latencies and efficiency.
  CollectiveCalibration pcie;
  // vLLM's custom all-reduce (one kernel over NVLink peer memory, used inside an NVSwitch node
  // for messages up to 8 MiB, CUDA-graph captured) replaces NCCL's launch-bound latency for
  // decode-sized messages. ASSUMPTION, not in the A100 NCCL measurements: 10 us.
  double custom_all_reduce_latency_s = 10e-6;
  double custom_all_reduce_max_bytes = 8.0 * 1024 * 1024;
  // Per-step time outside the forward pass: scheduling, input preparation, sampling, detokenise
  // (a vLLM-class engine with CUDA graphs).
  double step_overhead_s = 2.0e-3;
  // Per sequence and per token of the step on top of it (0 for the GPU engines; measured for
  // loom's CPU engine by `loom profile`: scheduling, step descriptor, sampling).
  double step_overhead_per_seq_s = 0;
  double step_overhead_per_token_s = 0;
  // FP8/FP4 GEMMs reach a lower fraction of their (doubled) peak than BF16 ones; multiplies
  // eff_max for those precisions.
  double low_precision_gemm_factor = 0.85;
  // The profiled machine's operator times as measured (sim/measured_ops.h; set by
  // profile_calibration): where a step runs a measured shape, the cost model of loom's CPU
  // engine (StepKernels::LoomCpu) prices it from these instead of the efficiencies above.
  std::shared_ptr<const MeasuredOps> measured;
};

// The calibration the cost model uses for `gpu` (the A100 fit, carried as efficiencies).
const Calibration& default_calibration();

}  // namespace loom::sim
