#include "sim/profile.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_bounded.h"
#include "core/parse_number.h"
#include "sim/measured_ops.h"

namespace loom::sim {

namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot open ", path);
  try {
    nlohmann::json j;
    in >> j;
    return j;
  } catch (const std::exception& e) {
    fail(path, ": not JSON (", e.what(), ")");
  }
}

// "all_reduce_cpu_local.csv" -> "local".
std::string backend_of(const MeasurementFile& f) {
  const std::string stem = std::filesystem::path(f.name).stem().string();
  const auto us = stem.rfind('_');
  return us == std::string::npos ? std::string() : stem.substr(us + 1);
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "none" : s;
}

}  // namespace

std::vector<std::string> MachineProfile::weight_dtypes() const {
  std::vector<std::string> out;
  for (const auto& f : files)
    if (f.kind == MeasurementFile::Mlp && std::find(out.begin(), out.end(), f.weight_dtype) == out.end())
      out.push_back(f.weight_dtype);
  return out;
}

std::vector<std::string> MachineProfile::backends() const {
  std::vector<std::string> out;
  for (const auto& f : files)
    if (f.kind == MeasurementFile::Collective) {
      const std::string b = backend_of(f);
      if (std::find(out.begin(), out.end(), b) == out.end()) out.push_back(b);
    }
  return out;
}

bool is_profile(const std::string& dir) {
  std::error_code ec;
  const std::string f = (std::filesystem::path(dir) / "hardware.json").string();
  if (!std::filesystem::is_regular_file(f, ec)) return false;
  try {
    return read_json(f).contains("profile");
  } catch (const Error&) {
    return false;
  }
}

MachineProfile read_profile(const std::string& dir) {
  const std::string hw = (std::filesystem::path(dir) / "hardware.json").string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(hw, ec))
    fail("profile folder '", dir, "' has no hardware.json (write one with `loom profile -o ", dir, "`)");
  const nlohmann::json j = read_json(hw);
  if (!j.contains("profile") || !j["profile"].is_object())
    fail(hw, ": no \"profile\" object: not written by `loom profile`");
  MachineProfile p;
  p.dir = dir;
  p.hardware = gpu_from_json(j, hw);
  p.threads_per_rank = j["profile"].value("threads_per_rank", 1);
  if (p.threads_per_rank < 1) fail(hw, ": threads_per_rank = ", p.threads_per_rank, " must be >= 1");
  p.kernel_path = j["profile"].value("kernel_path", std::string());
  p.files = read_measurements(dir);
  return p;
}

Calibration profile_calibration(const MachineProfile& profile, DType weight_dtype, const std::string& backend,
                                int ranks) {
  const std::string dt(dtype_name(weight_dtype));
  // The operator files measured with as many concurrent ranks as the plan runs (or the closest
  // below; the fewest when none is).
  int concurrency = 0, fewest = 1 << 30;
  for (const auto& f : profile.files)
    if (f.kind == MeasurementFile::Mlp || f.kind == MeasurementFile::Attention) {
      fewest = std::min(fewest, f.concurrent_ranks);
      if (f.concurrent_ranks <= ranks) concurrency = std::max(concurrency, f.concurrent_ranks);
    }
  if (concurrency == 0) concurrency = fewest;
  std::vector<const MeasurementFile*> use;
  bool have_mlp = false;
  for (const auto& f : profile.files) {
    switch (f.kind) {
      case MeasurementFile::Mlp:
        if (f.weight_dtype == dt && f.concurrent_ranks == concurrency) use.push_back(&f), have_mlp = true;
        break;
      case MeasurementFile::Attention:
        if (f.concurrent_ranks == concurrency) use.push_back(&f);
        break;
      case MeasurementFile::Collective:
        if (backend_of(f) == backend) use.push_back(&f);
        break;
      default: use.push_back(&f);
    }
  }
  if (!have_mlp)
    fail("profile ", profile.dir, " has no operator measurements for ", dt, " weights (it has: ",
         join(profile.weight_dtypes()), "); run `loom profile --dtypes ", dt, "`");
  Calibration start = default_calibration();
  // No measured step overhead: nothing beyond the priced operators (a GPU engine's 2 ms would
  // swamp a CPU step).
  start.step_overhead_s = 0;
  Calibration cal = fit_calibration(use, profile.hardware, start);
  auto measured = std::make_shared<MeasuredOps>(measured_ops(use));
  if (!measured->empty()) cal.measured = std::move(measured);
  cal.fitted_on = cat("loom profile ", profile.dir, " (", dt, " weights, ", concurrency, " concurrent rank(s), ",
                      backend, " collectives, ", profile.threads_per_rank, " thread(s) per rank)");
  return cal;
}

CostModel profile_cost_model(const MachineProfile& profile, const ModelConfig& model, DType weight_dtype, int ranks,
                             const std::string& backend, int concurrent_ranks) {
  if (ranks < 1) fail("ranks = ", ranks, " must be >= 1");
  const auto backends = profile.backends();
  if (ranks > 1 && std::find(backends.begin(), backends.end(), backend) == backends.end())
    fail("profile ", profile.dir, " has no ", backend, " collective measurements (it has: ", join(backends),
         ")", backend == "mpi" ? "; run `mpirun -np N loom profile --comm mpi -o DIR`" : "");
  CostModelOptions o;
  o.weight_dtype = SimDType::BF16;  // the precision whose peak is the measured f32 FMA peak
  o.weight_bytes = double(dtype_row_bytes(weight_dtype, dtype_block_elems(weight_dtype))) /
                   double(dtype_block_elems(weight_dtype));
  o.weight_block = dtype_block_elems(weight_dtype);
  o.act_bytes = 4.0;
  o.kv_bytes = 4.0;
  o.custom_all_reduce = false;
  o.activation_reserve_bytes = 0;
  o.memory_utilization = 1.0;
  o.kernels = StepKernels::LoomCpu;
  o.concurrent_ranks = concurrent_ranks > 0 ? concurrent_ranks : ranks;
  NodeSpec node = cpu_node(profile.hardware, ranks);
  CostModel cm(model, node, o, profile_calibration(profile, weight_dtype, backend,
                                                                          concurrent_ranks > 0 ? concurrent_ranks : ranks));
  std::vector<const MeasurementFile*> coll;
  for (const auto& f : profile.files)
    if (f.kind == MeasurementFile::Collective && backend_of(f) == backend) coll.push_back(&f);
  cm.set_collective_curves(fit_collective_curves(coll, [](int) { return true; }));
  return cm;
}

namespace {

// "DIR" or "DIRxN" -> (DIR, N or 0).
std::pair<std::string, int> profile_dir_of(const std::string& hardware) {
  if (is_profile(hardware)) return {hardware, 0};
  const auto x = hardware.rfind('x');
  if (x != std::string::npos && x > 0 && x + 1 < hardware.size() &&
      std::all_of(hardware.begin() + long(x) + 1, hardware.end(), ::isdigit) && is_profile(hardware.substr(0, x)))
    return {hardware.substr(0, x), int(parse_int(hardware.substr(x + 1), cat("'", text_excerpt(hardware, 48), "': the rank count"), 1, 1024))};
  return {"", 0};
}

}  // namespace

bool is_profile_hardware(const std::string& hardware) { return !profile_dir_of(hardware).first.empty(); }

CostModel hardware_cost_model(const ModelConfig& model, const std::string& hardware, const std::string& dtype,
                              const Plan& plan, const std::string& backend) {
  const auto [dir, count] = profile_dir_of(hardware);
  if (dir.empty()) {
    CostModelOptions opt;
    opt.weight_dtype = parse_sim_dtype(dtype.empty() ? "fp8" : dtype);
    return CostModel(model, parse_node(hardware), opt);
  }
  DType dt;
  try {
    dt = parse_dtype(dtype.empty() ? "f32" : dtype);
  } catch (const Error&) {
    fail("--hardware ", hardware, " is a loom profile (loom's CPU engine): --dtype must be a weight dtype (f32, f16, ",
         "bf16, q8_0), not '", dtype, "'");
  }
  Plan replica = plan;
  replica.dp = 1;
  if (count > 0 && plan.size() > count)
    fail("plan ", plan.to_string(), " needs ", plan.size(), " ranks; --hardware ", hardware, " has ", count);
  return profile_cost_model(read_profile(dir), model, dt, replica.size(), backend, plan.size());
}

}  // namespace loom::sim
