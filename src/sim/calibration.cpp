#include "sim/calibration.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "sim/model_catalog.h"

namespace loom::sim {

namespace {

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (char c : line) {
    if (c == '"') quoted = !quoted;
    else if (c == ',' && !quoted) out.push_back(cur), cur.clear();
    else if (c != '\r') cur += c;
  }
  out.push_back(cur);
  return out;
}

struct Csv {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::unordered_map<std::string, int> col;
  int find(const std::string& name) const {
    auto it = col.find(name);
    return it == col.end() ? -1 : it->second;
  }
};

Csv read_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot open measurement file '", path, "'");
  Csv csv;
  std::string line;
  if (!std::getline(in, line)) fail("measurement file '", path, "' is empty");
  csv.header = split_csv_line(line);
  for (int i = 0; i < int(csv.header.size()); ++i) csv.col[csv.header[i]] = i;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    csv.rows.push_back(split_csv_line(line));
  }
  return csv;
}

double to_num(const std::string& s, const std::string& path, const std::string& column) {
  if (s == "True" || s == "true") return 1;
  if (s == "False" || s == "false") return 0;
  try {
    size_t used = 0;
    const double v = std::stod(s, &used);
    return v;
  } catch (const std::exception&) {
    fail("measurement file '", path, "': column ", column, " holds '", s, "', not a number");
  }
}

const char* kMlpOps[] = {"emb",        "input_layernorm", "attn_pre_proj", "attn_rope",     "attn_post_proj",
                         "post_attention_layernorm",      "mlp_up_proj",   "mlp_act",       "mlp_down_proj",
                         "add"};

bool is_gemm(const std::string& op) {
  return op == "attn_pre_proj" || op == "attn_post_proj" || op == "mlp_up_proj" || op == "mlp_down_proj";
}

Elementwise elementwise_kind(const std::string& op) {
  if (op == "input_layernorm" || op == "post_attention_layernorm") return Elementwise::Norm;
  if (op == "add") return Elementwise::Add;
  if (op == "mlp_act") return Elementwise::Act;
  if (op == "attn_rope") return Elementwise::Rope;
  return Elementwise::Emb;
}

MeasurementFile read_mlp(const std::string& path) {
  const Csv csv = read_csv(path);
  MeasurementFile f;
  f.path = path;
  f.name = std::filesystem::path(path).filename().string();
  f.kind = MeasurementFile::Mlp;
  auto need = [&](const char* name) {
    const int c = csv.find(name);
    if (c < 0) fail("measurement file '", path, "': missing column '", name, "'");
    return c;
  };
  const int c_h = need("n_head"), c_kv = need("n_kv_head"), c_d = need("n_embd"), c_f = need("n_expanded_embd"),
            c_g = need("use_gated_mlp"), c_m = need("num_tokens"), c_tp = need("num_tensor_parallel_workers");
  for (int r = 0; r < int(csv.rows.size()); ++r) {
    const auto& row = csv.rows[r];
    if (row.size() < csv.header.size()) continue;
    auto num = [&](int c) { return to_num(row[c], path, csv.header[c]); };
    const double h = num(c_h), kv = num(c_kv), d = num(c_d), F = num(c_f), m = num(c_m), tp = num(c_tp);
    const bool gated = num(c_g) != 0;
    const double hd = d / h;
    const double kv_tp = std::max(1.0, kv / tp);
    for (const char* op : kMlpOps) {
      const int c = csv.find(cat("time_stats.", op, ".median"));
      if (c < 0 || row[c].empty()) continue;
      const double ms = num(c);
      if (!(ms > 0)) continue;
      OpSample s;
      s.op = op;
      s.measured_s = ms * 1e-3;
      s.row = r;
      const std::string o = op;
      if (o == "attn_pre_proj") s.m = m, s.k = d, s.n = (h / tp + 2 * kv_tp) * hd;
      else if (o == "attn_post_proj") s.m = m, s.k = h / tp * hd, s.n = d;
      else if (o == "mlp_up_proj") s.m = m, s.k = d, s.n = (gated ? 2 : 1) * F / tp;
      else if (o == "mlp_down_proj") s.m = m, s.k = F / tp, s.n = d;
      // Element-wise bytes (bf16): read + write of each tensor, as CostModel::price() uses them.
      else if (o == "input_layernorm" || o == "post_attention_layernorm") s.k = m * d * 2 * 2;
      else if (o == "add") s.k = m * d * 3 * 2;
      else if (o == "mlp_act") s.k = m * (F / tp) * (gated ? 3 : 2) * 2;
      else if (o == "attn_rope") s.k = m * (h / tp + kv_tp) * hd * 2 * 2;
      else if (o == "emb") s.k = m * d * 2 * 2;
      f.samples.push_back(s);
    }
  }
  return f;
}

MeasurementFile read_collective(const std::string& path) {
  const Csv csv = read_csv(path);
  MeasurementFile f;
  f.path = path;
  f.name = std::filesystem::path(path).filename().string();
  f.kind = MeasurementFile::Collective;
  auto need = [&](const char* name) {
    const int c = csv.find(name);
    if (c < 0) fail("measurement file '", path, "': missing column '", name, "'");
    return c;
  };
  const int c_coll = need("collective"), c_n = need("num_workers"), c_dpn = need("devices_per_node"),
            c_size = need("size");
  for (int r = 0; r < int(csv.rows.size()); ++r) {
    const auto& row = csv.rows[r];
    if (row.size() < csv.header.size()) continue;
    const std::string coll = row[c_coll];
    const int c = csv.find(cat("time_stats.", coll, ".median"));
    if (c < 0) fail("measurement file '", path, "': missing column 'time_stats.", coll, ".median'");
    const double ms = to_num(row[c], path, csv.header[c]);
    if (!(ms > 0)) continue;
    OpSample s;
    s.op = coll;
    s.measured_s = ms * 1e-3;
    s.k = to_num(row[c_size], path, "size");
    s.m = to_num(row[c_n], path, "num_workers");
    s.n = to_num(row[c_dpn], path, "devices_per_node");
    s.row = r;
    f.samples.push_back(s);
  }
  return f;
}

Collective collective_of(const std::string& op) {
  if (op == "all_reduce") return Collective::AllReduce;
  if (op == "send_recv") return Collective::SendRecv;
  if (op == "all_to_all") return Collective::AllToAll;
  if (op == "all_gather") return Collective::AllGather;
  fail("unknown collective '", op, "' in a measurement file");
}

// Median of a vector (reorders it).
double median_of(std::vector<double>& v) {
  if (v.empty()) return 0;
  auto mid = v.begin() + long(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

double quantile_of(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, size_t(q * double(v.size())));
  return v[i];
}

// A model object for priming primitives: shapes are irrelevant to them.
CostModel primitive_model(const GpuSpec& gpu, const Calibration& cal) {
  NodeSpec node;
  node.gpu = gpu;
  node.gpus_per_node = 8;
  node.topology = gpu.nvlink ? Topology::NvSwitch : Topology::Pcie;
  CostModelOptions opt;
  opt.custom_all_reduce = false;  // the measurements are plain NCCL
  return CostModel(model_catalog().front().config, node, opt, cal);
}

// Minimises f over each parameter in turn on a grid around the current value.
void coordinate_search(std::vector<double*> params, std::vector<std::pair<double, double>> bounds,
                       const std::function<double()>& f, int passes = 4, int steps = 24) {
  double best = f();
  for (int pass = 0; pass < passes; ++pass) {
    for (size_t i = 0; i < params.size(); ++i) {
      const auto [lo, hi] = bounds[i];
      double keep = *params[i];
      for (int k = 0; k <= steps; ++k) {
        *params[i] = lo + (hi - lo) * k / steps;
        const double v = f();
        if (v < best) best = v, keep = *params[i];
      }
      *params[i] = keep;
    }
  }
}

}  // namespace

std::vector<MeasurementFile> read_measurements(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("measurements folder '", dir, "' does not exist");
  std::vector<std::string> paths;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (e.path().extension() != ".csv") continue;
    if (n.rfind("mlp_", 0) == 0 || n.rfind("all_reduce_", 0) == 0 || n.rfind("send_recv_", 0) == 0)
      paths.push_back(e.path().string());
  }
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) fail("measurements folder '", dir, "' holds no mlp_*.csv, all_reduce_*.csv or send_recv_*.csv");
  std::vector<MeasurementFile> out;
  for (const auto& p : paths) {
    const std::string n = fs::path(p).filename().string();
    out.push_back(n.rfind("mlp_", 0) == 0 ? read_mlp(p) : read_collective(p));
  }
  return out;
}

double predict_sample(const CostModel& model, const MeasurementFile& file, const OpSample& s) {
  if (file.kind == MeasurementFile::Collective)
    return model.collective_s(collective_of(s.op), s.k, int(s.m), int(s.n));
  if (is_gemm(s.op)) return model.gemm_s(s.m, s.k, s.n, SimDType::BF16, 2.0, 2.0);
  return model.elementwise_s(elementwise_kind(s.op), s.k);
}

Calibration fit_calibration(const std::vector<const MeasurementFile*>& files, const GpuSpec& gpu,
                            const Calibration& start) {
  Calibration cal = start;
  std::vector<const OpSample*> gemm;
  std::map<Elementwise, std::vector<const OpSample*>> elem;
  std::map<Collective, std::vector<const OpSample*>> intra;
  std::vector<const OpSample*> inter;
  for (const auto* f : files)
    for (const auto& s : f->samples) {
      if (f->kind == MeasurementFile::Mlp) {
        if (is_gemm(s.op)) gemm.push_back(&s);
        else elem[elementwise_kind(s.op)].push_back(&s);
      } else if (s.n >= s.m) {
        intra[collective_of(s.op)].push_back(&s);
      } else if (s.n == 1) {
        inter.push_back(&s);  // one GPU per node: the network alone
      }
    }
  std::vector<double> errs;
  auto median_error = [&](const std::vector<const OpSample*>& samples, const std::function<double(const OpSample&)>& f) {
    errs.clear();
    for (const auto* s : samples) errs.push_back(std::abs(f(*s) - s->measured_s) / s->measured_s);
    return median_of(errs);
  };
  if (!gemm.empty()) {
    auto& g = cal.gemm;
    double lat_us = g.latency_s * 1e6;
    coordinate_search({&g.eff_max, &g.m_half, &g.mem_eff, &lat_us}, {{0.3, 0.95}, {1, 240}, {0.4, 1.0}, {0, 24}}, [&] {
      g.latency_s = lat_us * 1e-6;
      const CostModel cm = primitive_model(gpu, cal);
      return median_error(gemm, [&](const OpSample& s) { return cm.gemm_s(s.m, s.k, s.n, SimDType::BF16, 2, 2); });
    });
    g.latency_s = lat_us * 1e-6;
  }
  for (auto& [kind, samples] : elem) {
    ElementwiseCalibration* c = kind == Elementwise::Norm  ? &cal.norm
                                : kind == Elementwise::Add ? &cal.add
                                : kind == Elementwise::Act ? &cal.act
                                : kind == Elementwise::Rope ? &cal.rope
                                                            : &cal.emb;
    double lat_us = c->latency_s * 1e6;
    coordinate_search({&c->bw_eff, &lat_us}, {{0.05, 1.0}, {0, 15}}, [&] {
      c->latency_s = lat_us * 1e-6;
      const CostModel cm = primitive_model(gpu, cal);
      return median_error(samples, [&](const OpSample& s) { return cm.elementwise_s(kind, s.k); });
    });
    c->latency_s = lat_us * 1e-6;
  }
  for (auto& [kind, samples] : intra) {
    CollectiveCalibration* c = kind == Collective::AllReduce ? &cal.all_reduce : &cal.send_recv;
    double lat_us = c->latency_s * 1e6;
    coordinate_search({&c->bw_eff, &lat_us}, {{0.02, 1.0}, {0, 100}}, [&] {
      c->latency_s = lat_us * 1e-6;
      const CostModel cm = primitive_model(gpu, cal);
      return median_error(samples, [&](const OpSample& s) { return cm.collective_s(kind, s.k, int(s.m), int(s.n)); });
    });
    c->latency_s = lat_us * 1e-6;
    if (kind == Collective::AllReduce) {
      // No all-to-all / all-gather measurements: they share NCCL's ring bandwidth and latency.
      cal.all_to_all = cal.all_gather = *c;
    }
  }
  if (!inter.empty()) {
    double lat_us = cal.net.latency_s * 1e6;
    coordinate_search({&cal.net.bw_eff, &lat_us}, {{0.02, 1.0}, {0, 200}}, [&] {
      cal.net.latency_s = lat_us * 1e-6;
      const CostModel cm = primitive_model(gpu, cal);
      return median_error(inter, [&](const OpSample& s) {
        return cm.collective_s(collective_of(s.op), s.k, int(s.m), int(s.n));
      });
    });
    cal.net.latency_s = lat_us * 1e-6;
  }
  cal.fitted_on = "fit_calibration over " + std::to_string(files.size()) + " measurement files";
  return cal;
}

std::map<CollectiveKey, CollectiveCurve> fit_collective_curves(const std::vector<const MeasurementFile*>& files,
                                                               const std::function<bool(int row)>& keep) {
  constexpr int kKnots = 12;
  std::map<CollectiveKey, std::vector<std::pair<double, double>>> pts;
  for (const auto* f : files) {
    if (f->kind != MeasurementFile::Collective) continue;
    for (const auto& s : f->samples)
      if (keep(s.row)) pts[{collective_of(s.op), int(s.m), int(s.n)}].push_back({s.k, s.measured_s});
  }
  std::map<CollectiveKey, CollectiveCurve> out;
  for (auto& [key, v] : pts) {
    std::sort(v.begin(), v.end());
    const int n = int(v.size());
    const int bins = std::min(kKnots, n);
    CollectiveCurve c;
    for (int b = 0; b < bins; ++b) {
      const int lo = b * n / bins, hi = (b + 1) * n / bins;
      std::vector<double> xs, ts;
      for (int i = lo; i < hi; ++i) xs.push_back(std::log(std::max(1.0, v[i].first))), ts.push_back(std::log(v[i].second));
      const double x = median_of(xs), t = median_of(ts);
      if (!c.log_bytes.empty() && x <= c.log_bytes.back()) continue;  // equal sizes: keep the first
      c.log_bytes.push_back(x);
      c.log_seconds.push_back(t);
    }
    out[key] = std::move(c);
  }
  return out;
}

std::vector<FileValidation> validate_measurements(const std::string& hardware, const std::string& dir) {
  const GpuSpec& gpu = find_gpu(hardware);
  const auto files = read_measurements(dir);
  std::vector<const MeasurementFile*> mlp, coll;
  for (const auto& f : files) (f.kind == MeasurementFile::Mlp ? mlp : coll).push_back(&f);
  // Analytical collective parameters from every collective file (used for the analytic column
  // and as the fallback when no curve matches).
  const Calibration base = fit_calibration(coll, gpu, default_calibration());
  std::vector<FileValidation> out;
  for (const auto& f : files) {
    FileValidation v;
    v.file = f.name;
    std::vector<double> errs;
    if (f.kind == MeasurementFile::Mlp) {
      std::vector<const MeasurementFile*> train;
      for (const auto* o : mlp)
        if (o != &f) train.push_back(o);
      if (train.empty()) {
        // One file: two folds by row parity.
        for (int fold = 0; fold < 2; ++fold) {
          MeasurementFile half = f, other = f;
          half.samples.clear();
          other.samples.clear();
          for (const auto& s : f.samples) (s.row % 2 == fold ? other : half).samples.push_back(s);
          const CostModel cm = primitive_model(gpu, fit_calibration({&half}, gpu, base));
          for (const auto& s : other.samples)
            errs.push_back(std::abs(predict_sample(cm, f, s) - s.measured_s) / s.measured_s);
        }
      } else {
        const CostModel cm = primitive_model(gpu, fit_calibration(train, gpu, base));
        for (const auto& s : f.samples) errs.push_back(std::abs(predict_sample(cm, f, s) - s.measured_s) / s.measured_s);
      }
    } else {
      std::vector<double> analytic;
      const CostModel plain = primitive_model(gpu, base);
      for (int fold = 0; fold < 2; ++fold) {
        CostModel cm = primitive_model(gpu, base);
        cm.set_collective_curves(fit_collective_curves({&f}, [fold](int row) { return row % 2 != fold; }));
        for (const auto& s : f.samples) {
          if (s.row % 2 != fold) continue;
          errs.push_back(std::abs(predict_sample(cm, f, s) - s.measured_s) / s.measured_s);
          analytic.push_back(std::abs(predict_sample(plain, f, s) - s.measured_s) / s.measured_s);
        }
      }
      v.analytic_median = median_of(analytic);
    }
    v.samples = int(errs.size());
    v.p90 = quantile_of(errs, 0.9);
    v.median = median_of(errs);
    out.push_back(v);
  }
  return out;
}

}  // namespace loom::sim
