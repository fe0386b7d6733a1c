#include "sim/calibration.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "core/thread_pool.h"
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

Collective collective_of(const std::string& op);

const char* kMlpOps[] = {"emb",        "input_layernorm", "attn_pre_proj", "attn_rope",     "attn_post_proj",
                         "post_attention_layernorm",      "mlp_up_proj",   "mlp_act",       "mlp_down_proj",
                         "add"};

SampleOp mlp_op(const std::string& op) {
  if (op == "attn_pre_proj") return SampleOp::QkvProj;
  if (op == "attn_post_proj") return SampleOp::PostProj;
  if (op == "mlp_up_proj") return SampleOp::UpProj;
  if (op == "mlp_down_proj") return SampleOp::DownProj;
  if (op == "input_layernorm" || op == "post_attention_layernorm") return SampleOp::Norm;
  if (op == "add") return SampleOp::Add;
  if (op == "mlp_act") return SampleOp::Act;
  if (op == "attn_rope") return SampleOp::Rope;
  return SampleOp::Emb;
}

bool is_gemm(SampleOp op) {
  return op == SampleOp::QkvProj || op == SampleOp::PostProj || op == SampleOp::UpProj || op == SampleOp::DownProj;
}

Elementwise elementwise_kind(SampleOp op) {
  switch (op) {
    case SampleOp::Norm: return Elementwise::Norm;
    case SampleOp::Add: return Elementwise::Add;
    case SampleOp::Act: return Elementwise::Act;
    case SampleOp::Rope: return Elementwise::Rope;
    default: return Elementwise::Emb;
  }
}

// Output columns of a GEMM sample in all (QKV: query + 2 KV; gated gate+up: twice).
double gemm_columns(const OpSample& s) {
  if (s.kind == SampleOp::QkvProj) return s.n + 2 * s.n2;
  if (s.kind == SampleOp::UpProj) return s.n2 != 0 ? 2 * s.n : s.n;
  return s.n;
}

// Column lookup that names the file and the column when it is missing.
struct Columns {
  const Csv& csv;
  const std::string& path;
  int need(const char* name) const {
    const int c = csv.find(name);
    if (c < 0) fail("measurement file '", path, "': missing column '", name, "'");
    return c;
  }
};

MeasurementFile new_file(const std::string& path, MeasurementFile::Kind kind) {
  MeasurementFile f;
  f.path = path;
  f.name = std::filesystem::path(path).filename().string();
  f.kind = kind;
  return f;
}

// The optional engine columns of loom's profiles (first data row; constant in a file).
void read_engine_columns(const Csv& csv, MeasurementFile& f) {
  if (csv.rows.empty()) return;
  const auto& row = csv.rows.front();
  auto text = [&](const char* name) -> std::string {
    const int c = csv.find(name);
    return c >= 0 && c < int(row.size()) ? row[size_t(c)] : std::string();
  };
  auto num = [&](const char* name, double dflt) {
    const std::string t = text(name);
    if (t.empty()) return dflt;
    const double v = to_num(t, f.path, name);
    if (!(v > 0)) fail("measurement file '", f.path, "': ", name, " = ", v, " must be > 0");
    return v;
  };
  f.weight_bytes = num("weight_bytes", 2.0);
  f.concurrent_ranks = int(num("concurrent_ranks", 1.0));
  f.act_bytes = num("act_bytes", 2.0);
  f.kv_bytes = num("kv_bytes", f.act_bytes);
  if (const std::string w = text("weight_dtype"); !w.empty()) f.weight_dtype = w;
  const std::string k = text("kernels");
  if (k == "loom_cpu") f.kernels = StepKernels::LoomCpu;
  else if (k.empty() || k == "fused_gpu") f.kernels = StepKernels::FusedGpu;
  else fail("measurement file '", f.path, "': kernels '", k, "' is not fused_gpu or loom_cpu");
}

MeasurementFile read_mlp(const std::string& path) {
  const Csv csv = read_csv(path);
  MeasurementFile f = new_file(path, MeasurementFile::Mlp);
  read_engine_columns(csv, f);
  const Columns cols{csv, path};
  const int c_h = cols.need("n_head"), c_kv = cols.need("n_kv_head"), c_d = cols.need("n_embd"),
            c_f = cols.need("n_expanded_embd"), c_g = cols.need("use_gated_mlp"), c_m = cols.need("num_tokens"),
            c_tp = cols.need("num_tensor_parallel_workers");
  const double ab = f.act_bytes;
  const int c_ws = csv.find("working_set_bytes"), c_wait = csv.find("time_stats.ulysses_wait.median");
  for (int r = 0; r < int(csv.rows.size()); ++r) {
    const auto& row = csv.rows[r];
    if (row.size() < csv.header.size()) continue;
    auto num = [&](int c) { return to_num(row[c], path, csv.header[c]); };
    const double h = num(c_h), kv = num(c_kv), d = num(c_d), F = num(c_f), m = num(c_m), tp = num(c_tp);
    const bool gated = num(c_g) != 0;
    if (c_wait >= 0 && !row[c_wait].empty()) {
      OpSample w;
      w.op = "ulysses_wait";
      w.measured_s = num(c_wait) * 1e-3;
      w.m = m, w.k = d, w.n = F / tp;
      w.row = r;
      f.ulysses_waits.push_back(w);
    }
    const double hd = d / h;
    const double kv_tp = std::max(1.0, kv / tp);
    for (const char* op : kMlpOps) {
      const int c = csv.find(cat("time_stats.", op, ".median"));
      if (c < 0 || row[c].empty()) continue;
      const double ms = num(c);
      if (!(ms > 0)) continue;
      OpSample s;
      s.op = op;
      s.kind = mlp_op(s.op);
      s.measured_s = ms * 1e-3;
      s.row = r;
      if (c_ws >= 0 && !row[c_ws].empty()) s.working_set = num(c_ws);
      const std::string o = op;
      if (o == "attn_pre_proj") s.m = m, s.k = d, s.n = h / tp * hd, s.n2 = kv_tp * hd;
      else if (o == "attn_post_proj") s.m = m, s.k = h / tp * hd, s.n = d;
      else if (o == "mlp_up_proj") s.m = m, s.k = d, s.n = F / tp, s.n2 = gated ? 1 : 0;
      else if (o == "mlp_down_proj") s.m = m, s.k = F / tp, s.n = d;
      // Element-wise bytes: read + write of each tensor, as CostModel::price() uses them.
      else if (o == "input_layernorm" || o == "post_attention_layernorm") s.k = m * d * ab * 2;
      else if (o == "add") s.k = m * d * ab * 3;
      else if (o == "mlp_act") s.k = m * (F / tp) * (gated ? 3 : 2) * ab;
      else if (o == "attn_rope") s.k = m * (h / tp + kv_tp) * hd * ab * 2;
      else if (o == "emb") s.k = m * d * ab * 2;
      f.samples.push_back(s);
    }
  }
  return f;
}

MeasurementFile read_attention(const std::string& path) {
  const Csv csv = read_csv(path);
  MeasurementFile f = new_file(path, MeasurementFile::Attention);
  read_engine_columns(csv, f);
  const Columns cols{csv, path};
  const int c_h = cols.need("n_q_head"), c_kv = cols.need("n_kv_head"), c_d = cols.need("n_embd"),
            c_tp = cols.need("num_tensor_parallel_workers"),
            c_b = cols.need("batch_size"), c_chunk = cols.need("prefill_chunk_size"),
            c_ctx = cols.need("kv_cache_size"), c_pf = cols.need("is_prefill");
  const int c_pf_t = csv.find("time_stats.attn_prefill.median"), c_dec_t = csv.find("time_stats.attn_decode.median");
  if (c_pf_t < 0 && c_dec_t < 0)
    fail("measurement file '", path, "': missing column 'time_stats.attn_prefill.median' or 'time_stats.attn_decode.median'");
  for (int r = 0; r < int(csv.rows.size()); ++r) {
    const auto& row = csv.rows[r];
    if (row.size() < csv.header.size()) continue;
    auto num = [&](int c) { return to_num(row[c], path, csv.header[c]); };
    const bool prefill = num(c_pf) != 0;
    const int tc = prefill ? c_pf_t : c_dec_t;
    if (tc < 0 || row[tc].empty()) continue;
    const double ms = num(tc);
    if (!(ms > 0)) continue;
    const double tp = num(c_tp);
    OpSample s;
    s.op = prefill ? "attn_prefill" : "attn_decode";
    s.kind = SampleOp::Attention;
    s.measured_s = ms * 1e-3;
    s.row = r;
    s.batch = int(num(c_b));
    s.new_tokens = prefill ? int(num(c_chunk)) : 1;
    s.context = int(num(c_ctx)) + s.new_tokens;
    s.q_heads = int(num(c_h) / tp);
    s.kv_heads = std::max(1, int(num(c_kv) / tp));
    s.head_dim = int(num(c_d) / num(c_h));
    if (s.batch < 1 || s.new_tokens < 1 || s.q_heads < 1)
      fail("measurement file '", path, "': row ", r + 1, " has batch_size ", s.batch, ", ", s.new_tokens,
           " new tokens and ", s.q_heads, " query heads per GPU (each must be >= 1)");
    f.samples.push_back(s);
  }
  return f;
}

MeasurementFile read_collective(const std::string& path) {
  const Csv csv = read_csv(path);
  MeasurementFile f = new_file(path, MeasurementFile::Collective);
  if (f.name.find("pairwise") != std::string::npos) f.topology = Topology::PairwiseNvlink;
  const Columns cols{csv, path};
  const int c_coll = cols.need("collective"), c_n = cols.need("num_workers"), c_dpn = cols.need("devices_per_node"),
            c_size = cols.need("size");
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
    s.kind = SampleOp::Collective;
    s.collective = collective_of(coll);
    s.measured_s = ms * 1e-3;
    s.k = to_num(row[c_size], path, "size");
    s.m = to_num(row[c_n], path, "num_workers");
    s.n = to_num(row[c_dpn], path, "devices_per_node");
    s.row = r;
    f.samples.push_back(s);
  }
  return f;
}

MeasurementFile read_overhead(const std::string& path) {
  const Csv csv = read_csv(path);
  MeasurementFile f = new_file(path, MeasurementFile::Overhead);
  const Columns cols{csv, path};
  const int c_s = cols.need("num_seqs"), c_t = cols.need("num_tokens"),
            c_ms = cols.need("time_stats.step_overhead.median");
  for (int r = 0; r < int(csv.rows.size()); ++r) {
    const auto& row = csv.rows[r];
    if (row.size() < csv.header.size()) continue;
    const double ms = to_num(row[c_ms], path, csv.header[c_ms]);
    if (!(ms > 0)) continue;
    OpSample s;
    s.op = "step_overhead";
    s.kind = SampleOp::Overhead;
    s.measured_s = ms * 1e-3;
    s.m = to_num(row[c_s], path, "num_seqs");
    s.k = to_num(row[c_t], path, "num_tokens");
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
  if (op == "broadcast") return Collective::Broadcast;
  if (op == "get") return Collective::Get;
  fail("unknown collective '", op, "' in a measurement file");
}

CollectiveCalibration& calibration_of(Calibration& cal, Collective c) {
  switch (c) {
    case Collective::AllReduce: return cal.all_reduce;
    case Collective::AllToAll: return cal.all_to_all;
    case Collective::AllGather: return cal.all_gather;
    case Collective::SendRecv: return cal.send_recv;
    case Collective::Broadcast: return cal.broadcast;
    case Collective::Get: return cal.get;
  }
  return cal.all_reduce;
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

// Minimises f over each parameter in turn on a grid: the first pass over the whole bounds, each
// later pass over half the previous width around the best value so far (so small parameters,
// e.g. microsecond latencies of a CPU, are resolved as finely as large ones).
void coordinate_search(std::vector<double*> params, std::vector<std::pair<double, double>> bounds,
                       const std::function<double()>& f, int passes = 6, int steps = 24) {
  double best = f();
  std::vector<double> width(params.size());
  for (size_t i = 0; i < params.size(); ++i) width[i] = bounds[i].second - bounds[i].first;
  for (int pass = 0; pass < passes; ++pass) {
    for (size_t i = 0; i < params.size(); ++i) {
      const auto [lo_b, hi_b] = bounds[i];
      const double lo = std::max(lo_b, pass == 0 ? lo_b : *params[i] - width[i] / 2);
      const double hi = std::min(hi_b, pass == 0 ? hi_b : *params[i] + width[i] / 2);
      double keep = *params[i];
      for (int k = 0; k <= steps; ++k) {
        *params[i] = lo + (hi - lo) * k / steps;
        const double v = f();
        if (v < best) best = v, keep = *params[i];
      }
      *params[i] = keep;
      width[i] /= 2;
    }
  }
}

// A sample and the file it comes from (its element sizes and kernels matter to the prediction).
struct Sample {
  const MeasurementFile* file;
  const OpSample* s;
};

// Median relative error of `cal` over `samples`, each predicted with a model for its file.
double median_error(const std::vector<Sample>& samples, const GpuSpec& gpu, const Calibration& cal) {
  std::map<const MeasurementFile*, CostModel> models;
  std::vector<double> errs;
  errs.reserve(samples.size());
  for (const Sample& x : samples) {
    auto it = models.find(x.file);
    if (it == models.end()) it = models.emplace(x.file, measurement_model(gpu, cal, *x.file)).first;
    errs.push_back(std::abs(predict_sample(it->second, *x.file, *x.s) - x.s->measured_s) / x.s->measured_s);
  }
  return median_of(errs);
}

// Least squares on relative errors: theta minimising sum_i ((x_i . theta - y_i) / y_i)^2 with
// every coefficient >= 0 (a negative one is dropped, i.e. fixed at 0, and the rest refitted).
std::vector<double> relative_least_squares(const std::vector<std::vector<double>>& x, const std::vector<double>& y) {
  const size_t p = x.empty() ? 0 : x.front().size();
  std::vector<size_t> use(p);
  for (size_t i = 0; i < p; ++i) use[i] = i;
  std::vector<double> coef(p, 0.0);
  while (!use.empty()) {
    const size_t n = use.size();
    std::vector<std::vector<double>> a(n, std::vector<double>(n + 1, 0.0));
    for (size_t s = 0; s < x.size(); ++s) {
      const double w = 1.0 / (y[s] * y[s]);
      for (size_t i = 0; i < n; ++i) {
        for (size_t j = 0; j < n; ++j) a[i][j] += w * x[s][use[i]] * x[s][use[j]];
        a[i][n] += w * x[s][use[i]] * y[s];
      }
    }
    // Gauss-Jordan with partial pivoting.
    for (size_t c = 0; c < n; ++c) {
      size_t piv = c;
      for (size_t r = c + 1; r < n; ++r)
        if (std::abs(a[r][c]) > std::abs(a[piv][c])) piv = r;
      std::swap(a[c], a[piv]);
      if (std::abs(a[c][c]) < 1e-300) continue;
      for (size_t r = 0; r < n; ++r) {
        if (r == c) continue;
        const double f = a[r][c] / a[c][c];
        for (size_t k = c; k <= n; ++k) a[r][k] -= f * a[c][k];
      }
    }
    std::fill(coef.begin(), coef.end(), 0.0);
    std::vector<size_t> keep;
    for (size_t i = 0; i < n; ++i) {
      const double v = std::abs(a[i][i]) < 1e-300 ? 0.0 : a[i][n] / a[i][i];
      coef[use[i]] = v;
      if (v >= 0) keep.push_back(use[i]);
    }
    if (keep.size() == n) break;
    use = keep;
  }
  for (auto& c : coef) c = std::max(0.0, c);
  return coef;
}

// t = a + b * seqs + c * tokens (relative least squares).
void fit_overhead(const std::vector<Sample>& samples, Calibration& cal) {
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (const Sample& s : samples) x.push_back({1.0, s.s->m, s.s->k}), y.push_back(s.s->measured_s);
  const std::vector<double> c = relative_least_squares(x, y);
  cal.step_overhead_s = c[0];
  cal.step_overhead_per_seq_s = c[1];
  cal.step_overhead_per_token_s = c[2];
}

// Keeps the calibration with the lower median error over `samples` of two candidates.
void keep_better(Calibration& cal, const Calibration& other, const std::vector<Sample>& samples, const GpuSpec& gpu) {
  if (median_error(samples, gpu, other) < median_error(samples, gpu, cal)) cal = other;
}

}  // namespace

std::vector<MeasurementFile> read_measurements(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("measurements folder '", dir, "' does not exist");
  static const char* kPrefixes[] = {"mlp_",        "attention_", "all_reduce_", "all_gather_",
                                    "all_to_all_", "send_recv_", "broadcast_",  "get_", "step_overhead_"};
  std::vector<std::string> paths;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (e.path().extension() != ".csv") continue;
    for (const char* p : kPrefixes)
      if (n.rfind(p, 0) == 0) {
        paths.push_back(e.path().string());
        break;
      }
  }
  std::sort(paths.begin(), paths.end());
  if (paths.empty())
    fail("measurements folder '", dir,
         "' holds no mlp_*, attention_*, <collective>_* or step_overhead_* .csv file");
  std::vector<MeasurementFile> out;
  for (const auto& p : paths) {
    const std::string n = fs::path(p).filename().string();
    if (n.rfind("mlp_", 0) == 0) out.push_back(read_mlp(p));
    else if (n.rfind("attention_", 0) == 0) out.push_back(read_attention(p));
    else if (n.rfind("step_overhead_", 0) == 0) out.push_back(read_overhead(p));
    else out.push_back(read_collective(p));
  }
  return out;
}

CostModel measurement_model(const GpuSpec& gpu, const Calibration& cal, const MeasurementFile& file) {
  NodeSpec node;
  node.gpu = gpu;
  node.gpus_per_node = 8;
  node.topology = !gpu.nvlink ? Topology::Pcie : file.topology;
  if (!gpu.nvlink) node.net_bw = gpu.link_bw;
  CostModelOptions opt;
  opt.custom_all_reduce = false;  // the measurements are plain NCCL (or loom's communicators)
  opt.weight_bytes = file.weight_bytes;
  opt.act_bytes = file.act_bytes;
  opt.kv_bytes = file.kv_bytes;
  opt.kernels = file.kernels;
  opt.concurrent_ranks = file.concurrent_ranks;
  // Shapes are irrelevant to the primitives: any valid model.
  return CostModel(model_catalog().front().config, node, opt, cal);
}

double predict_sample(const CostModel& model, const MeasurementFile& file, const OpSample& s) {
  switch (file.kind) {
    case MeasurementFile::Collective: return model.collective_s(s.collective, s.k, int(s.m), int(s.n));
    case MeasurementFile::Attention: {
      const std::vector<SeqWork> seqs(size_t(s.batch), SeqWork{s.new_tokens, s.context, false});
      return model.attention_s(seqs, s.q_heads, s.kv_heads, s.head_dim);
    }
    case MeasurementFile::Overhead: {
      const Calibration& c = model.calibration();
      return c.step_overhead_s + c.step_overhead_per_seq_s * s.m + c.step_overhead_per_token_s * s.k;
    }
    case MeasurementFile::Mlp: break;
  }
  const double ws = s.working_set;
  if (s.kind == SampleOp::QkvProj) return model.qkv_proj_s(s.m, s.k, s.n, s.n2, ws);
  if (s.kind == SampleOp::UpProj)
    return s.n2 != 0 ? model.gate_up_s(s.m, s.k, s.n, ws)
                     : model.gemm_s(s.m, s.k, s.n, SimDType::BF16, model.weight_bytes(), model.options().act_bytes, ws);
  if (is_gemm(s.kind))
    return model.gemm_s(s.m, s.k, s.n, SimDType::BF16, model.weight_bytes(), model.options().act_bytes, ws);
  return model.elementwise_s(elementwise_kind(s.kind), s.k);
}

namespace {

// The measurement files' times are printed to 0.001 ms: a sample can read up to 1 us short.
constexpr double kTimerResolution_s = 1e-6;

// A collective file none of whose node-local samples could have been measured on `gpu`: the first
// sample that moves its bytes faster than the datasheet link at full efficiency, named; "" when none.
std::string beats_the_datasheet_link(const MeasurementFile& f, const GpuSpec& gpu) {
  if (f.kind != MeasurementFile::Collective || !gpu.nvlink) return "";
  Calibration unit = default_calibration();
  for (Collective k : {Collective::AllReduce, Collective::AllToAll, Collective::AllGather, Collective::SendRecv,
                       Collective::Broadcast, Collective::Get})
    calibration_of(unit, k) = CollectiveCalibration{0.0, 1.0, 0.0};
  unit.pcie = CollectiveCalibration{0.0, 1.0, 0.0};
  const CostModel wire = measurement_model(gpu, unit, f);
  for (const auto& s : f.samples) {
    if (s.n < s.m) continue;  // crosses nodes: the network, not in the GPU's datasheet
    const double t = wire.collective_s(s.collective, s.k, int(s.m), int(s.n));
    if (s.measured_s + kTimerResolution_s < t)
      return cat(f.name, " row ", s.row, ": ", s.op, " of ", s.k, " bytes on ", int(s.m), " GPUs in ", s.measured_s * 1e6,
                 " us, faster than ", gpu.name, "'s datasheet link allows (", t * 1e6, " us)");
  }
  return "";
}

}  // namespace

Calibration fit_calibration(const std::vector<const MeasurementFile*>& all_files, const GpuSpec& gpu,
                            const Calibration& start) {
  Calibration cal = start;
  std::vector<const MeasurementFile*> files;
  std::string rejected;
  for (const auto* f : all_files) {
    if (const std::string why = beats_the_datasheet_link(*f, gpu); !why.empty()) {
      rejected += cat(rejected.empty() ? "" : "; ", why);
      continue;
    }
    files.push_back(f);
  }
  // The GEMM curve is fitted on this GPU: m_half as fitted here (GemmCalibration::ridge); the
  // collective latencies in this GPU's link time (CollectiveCalibration::link_bw_fit).
  cal.gemm.ridge = gpu.flops_bf16 / gpu.hbm_bw;
  for (Collective k : {Collective::AllReduce, Collective::AllToAll, Collective::AllGather, Collective::SendRecv,
                       Collective::Broadcast, Collective::Get}) {
    calibration_of(cal, k).link_bw_fit = gpu.link_bw;
    calibration_of(cal, k).nvlink_fit = gpu.nvlink;
  }
  std::vector<Sample> gemm, attention, overhead, inter;
  std::map<Elementwise, std::vector<Sample>> elem;
  std::map<Collective, std::vector<Sample>> intra;
  std::vector<Sample> over_pcie;  // NVLink GPUs' groups that cross PCIe (Calibration::pcie)
  for (const auto* f : files)
    for (const auto& s : f->samples) {
      const Sample x{f, &s};
      switch (f->kind) {
        case MeasurementFile::Mlp: (is_gemm(s.kind) ? gemm : elem[elementwise_kind(s.kind)]).push_back(x); break;
        case MeasurementFile::Attention: attention.push_back(x); break;
        case MeasurementFile::Overhead: overhead.push_back(x); break;
        case MeasurementFile::Collective:
          if (s.n >= s.m && gpu.nvlink && f->topology == Topology::PairwiseNvlink && s.m > 2) over_pcie.push_back(x);
          else if (s.n >= s.m) intra[s.collective].push_back(x);
          else if (s.n == 1) inter.push_back(x);  // one GPU per node: the network alone
          break;
      }
    }
  if (!gemm.empty()) {
    auto search = [&](Calibration& c) {
      auto& g = c.gemm;
      double lat_us = g.latency_s * 1e6;
      std::vector<double*> params = {&g.eff_max, &g.m_half, &g.mem_eff, &lat_us};
      std::vector<std::pair<double, double>> bounds = {{0.05, 0.98}, {0.25, 240}, {0.05, 2.0}, {0, 40}};
      if (gpu.cache_bytes > 0) {
        params.push_back(&g.cache_gain), bounds.push_back({0, 30});
        params.push_back(&g.cache_fraction), bounds.push_back({0.01, 1.0});
      }
      coordinate_search(params, bounds, [&] {
        g.latency_s = lat_us * 1e-6;
        return median_error(gemm, gpu, c);
      });
      g.latency_s = lat_us * 1e-6;
    };
    // Start 2: the sum form t = latency + flops / rate + bytes / bandwidth by least squares
    // gives the scales of a machine far from the defaults (a CPU's sub-microsecond latencies).
    Calibration alt = cal;
    {
      std::vector<std::vector<double>> x;
      std::vector<double> y;
      for (const Sample& s : gemm) {
        const double cols = gemm_columns(*s.s);
        const double bytes = s.file->weight_bytes * s.s->k * cols + s.file->act_bytes * s.s->m * (s.s->k + cols);
        x.push_back({1.0, 2.0 * s.s->m * s.s->k * cols, bytes});
        y.push_back(s.s->measured_s);
      }
      const std::vector<double> c = relative_least_squares(x, y);
      alt.gemm.latency_s = std::min(c[0], 40e-6);
      if (c[1] > 0) alt.gemm.eff_max = std::clamp(1.0 / (c[1] * gpu.flops_bf16), 0.05, 0.98);
      if (c[2] > 0) alt.gemm.mem_eff = std::clamp(1.0 / (c[2] * gpu.hbm_bw), 0.05, 2.0);
      alt.gemm.m_half = 1.0;
    }
    search(cal);
    search(alt);
    keep_better(cal, alt, gemm, gpu);
  }
  for (auto& [kind, samples] : elem) {
    ElementwiseCalibration* c = kind == Elementwise::Norm  ? &cal.norm
                                : kind == Elementwise::Add ? &cal.add
                                : kind == Elementwise::Act ? &cal.act
                                : kind == Elementwise::Rope ? &cal.rope
                                                            : &cal.emb;
    // Start from t = latency + bytes / bandwidth by relative least squares.
    {
      std::vector<std::vector<double>> x;
      std::vector<double> y;
      for (const Sample& s : samples) x.push_back({1.0, s.s->k}), y.push_back(s.s->measured_s);
      const std::vector<double> ls = relative_least_squares(x, y);
      c->latency_s = std::min(ls[0], 20e-6);
      if (ls[1] > 0) c->bw_eff = std::clamp(1.0 / (ls[1] * gpu.hbm_bw), 0.01, 20.0);
    }
    double lat_us = c->latency_s * 1e6;
    // Above 1: activations served from cache (a CPU's small tensors).
    // Init-capture: clang 14 cannot capture a structured binding (`samples`) by name.
    coordinate_search({&c->bw_eff, &lat_us}, {{0.01, 20.0}, {0, 20}}, [&, &samples = samples] {
      c->latency_s = lat_us * 1e-6;
      return median_error(samples, gpu, cal);
    });
    c->latency_s = lat_us * 1e-6;
  }
  if (!attention.empty()) {
    // Start from the sum form t = calls * latency + flops / rate + bytes / bandwidth.
    Calibration alt = cal;
    {
      std::vector<std::vector<double>> x;
      std::vector<double> y;
      for (const Sample& s : attention) {
        const CostModel cm = measurement_model(gpu, cal, *s.file);
        const std::vector<SeqWork> seqs(size_t(s.s->batch), SeqWork{s.s->new_tokens, s.s->context, false});
        const CostModel::AttentionWork w = cm.attention_work(seqs, s.s->q_heads, s.s->kv_heads, s.s->head_dim);
        x.push_back({double(w.prefill) + double(w.decode), w.prefill_flops + w.decode_flops,
                     w.prefill_bytes + w.decode_bytes});
        y.push_back(s.s->measured_s);
      }
      const std::vector<double> ls = relative_least_squares(x, y);
      alt.attn_latency_s = std::min(ls[0], 100e-6);
      if (ls[1] > 0) alt.attn_compute_eff = std::clamp(1.0 / (ls[1] * gpu.flops_bf16), 0.01, 1.0);
      if (ls[2] > 0) alt.attn_mem_eff = std::clamp(1.0 / (ls[2] * gpu.hbm_bw), 0.01, 20.0);
      keep_better(cal, alt, attention, gpu);
    }
    double lat_us = cal.attn_latency_s * 1e6;
    coordinate_search({&cal.attn_compute_eff, &cal.attn_mem_eff, &lat_us}, {{0.01, 1.0}, {0.01, 20.0}, {0, 100}}, [&] {
      cal.attn_latency_s = lat_us * 1e-6;
      return median_error(attention, gpu, cal);
    });
    cal.attn_latency_s = lat_us * 1e-6;
  }
  if (!overhead.empty()) fit_overhead(overhead, cal);
  // Each collective kind's samples, then the PCIe-crossing ones (their own class, any kind).
  std::vector<std::pair<std::function<CollectiveCalibration&(Calibration&)>, const std::vector<Sample>*>> classes;
  for (auto& [kind, samples] : intra)
    classes.push_back({[kind = kind](Calibration& k) -> CollectiveCalibration& { return calibration_of(k, kind); }, &samples});
  if (!over_pcie.empty()) {
    cal.pcie.link_bw_fit = gpu.pcie_bw > 0 ? gpu.pcie_bw : 32e9;
    cal.pcie.nvlink_fit = false;
    classes.push_back({[](Calibration& k) -> CollectiveCalibration& { return k.pcie; }, &over_pcie});
  }
  for (auto& [class_of, samples_ptr] : classes) {
    const std::vector<Sample>& samples = *samples_ptr;
    CollectiveCalibration* c = &class_of(cal);
    const bool is_pcie_class = samples_ptr == &over_pcie;
    bool several_groups = false;
    for (const Sample& x : samples) several_groups = several_groups || x.s->m != samples.front().s->m;
    // A per-rank hop latency only where ranks are more than one hop apart: an NVLink GPU's node-local
    // class holds NVSwitch groups (and pairs), every GPU one switch hop from every other (a pairwise
    // node's larger groups are the PCIe class). A100's own messages up to 1 MB take 54, 42 and 40 us
    // (median) on 2, 4 and 8 GPUs of a DGX: nothing grows with the group, and a hop term fitted there
    // trades the bandwidth ramp of 1-16 MB messages for latency (7.55 us a rank: 96 us on 8 GPUs).
    const bool per_rank_hops = several_groups && !(gpu.nvlink && !is_pcie_class);
    {
      // Start from t = latency + hop * (n - 2) + wire / (link * bw_eff) by relative least squares;
      // the wire time at bw_eff 1 comes from the model itself (algorithm, topology, link).
      Calibration unit = cal;
      class_of(unit) = CollectiveCalibration{0.0, 1.0, 0.0, class_of(unit).link_bw_fit, class_of(unit).nvlink_fit};
      std::map<const MeasurementFile*, CostModel> models;
      std::vector<std::vector<double>> x;
      std::vector<double> y;
      for (const Sample& s : samples) {
        auto it = models.find(s.file);
        if (it == models.end()) it = models.emplace(s.file, measurement_model(gpu, unit, *s.file)).first;
        x.push_back({1.0, s.s->m - 2, it->second.collective_s(s.s->collective, s.s->k, int(s.s->m), int(s.s->n))});
        y.push_back(s.s->measured_s);
      }
      const std::vector<double> ls = relative_least_squares(x, y);
      Calibration alt = cal;
      CollectiveCalibration& a = class_of(alt);
      a.latency_s = std::min(ls[0], 200e-6);
      a.hop_latency_s = per_rank_hops ? std::min(ls[1], 50e-6) : 0.0;
      if (ls[2] > 0) a.bw_eff = std::clamp(1.0 / ls[2], 0.01, 2.0);
      keep_better(cal, alt, samples, gpu);
    }
    double lat_us = c->latency_s * 1e6, hop_us = c->hop_latency_s * 1e6;
    std::vector<double*> params = {&c->bw_eff, &lat_us};
    std::vector<std::pair<double, double>> bounds = {{0.01, 2.0}, {0, 200}};
    if (!per_rank_hops) hop_us = 0, c->hop_latency_s = 0;
    else params.push_back(&hop_us), bounds.push_back({0, 50});
    coordinate_search(params, bounds, [&, &samples = samples] {  // init-capture: clang 14
      c->latency_s = lat_us * 1e-6;
      c->hop_latency_s = hop_us * 1e-6;
      return median_error(samples, gpu, cal);
    });
    c->latency_s = lat_us * 1e-6;
    c->hop_latency_s = hop_us * 1e-6;
    // An NVLink GPU's link moves at most its datasheet bandwidth: a fit above it (a latency
    // intercept traded for speed where the measured curve steepens) is held at 1 and the fixed
    // parts refitted. (A CPU's shared-memory "link" and a PCIe GPU's figure are not so bound.)
    if (gpu.nvlink && c->bw_eff > 1.0) {
      c->bw_eff = 1.0;
      std::vector<double*> fixed(params.begin() + 1, params.end());
      std::vector<std::pair<double, double>> fixed_bounds(bounds.begin() + 1, bounds.end());
      coordinate_search(fixed, fixed_bounds, [&, &samples = samples] {
        c->latency_s = lat_us * 1e-6;
        c->hop_latency_s = hop_us * 1e-6;
        return median_error(samples, gpu, cal);
      });
      c->latency_s = lat_us * 1e-6;
      c->hop_latency_s = hop_us * 1e-6;
    }
  }
  // Collectives without measurements share the all-reduce's ring figures (NCCL's algorithms
  // are rings over the same links).
  if (intra.count(Collective::AllReduce))
    for (Collective k : {Collective::AllToAll, Collective::AllGather, Collective::Broadcast})
      if (!intra.count(k)) calibration_of(cal, k) = cal.all_reduce;
  // A one-sided read without measurements takes the send/recv figures (one message, one link).
  if (!intra.count(Collective::Get)) cal.get = cal.send_recv;
  if (!inter.empty()) {
    double lat_us = cal.net.latency_s * 1e6, hop_us = cal.net.hop_latency_s * 1e6;
    coordinate_search({&cal.net.bw_eff, &lat_us, &hop_us}, {{0.01, 1.0}, {0, 200}, {0, 50}}, [&] {
      cal.net.latency_s = lat_us * 1e-6;
      cal.net.hop_latency_s = hop_us * 1e-6;
      return median_error(inter, gpu, cal);
    });
    cal.net.latency_s = lat_us * 1e-6;
    cal.net.hop_latency_s = hop_us * 1e-6;
  }
  cal.fitted_on = cat("fit_calibration over ", files.size(), " measurement files on ", gpu.name);
  if (!rejected.empty()) cal.fitted_on += cat(" (left out, not measured on this GPU: ", rejected, ")");
  return cal;
}

std::map<CollectiveKey, CollectiveCurve> fit_collective_curves(const std::vector<const MeasurementFile*>& files,
                                                               const std::function<bool(int row)>& keep) {
  constexpr int kKnots = 12;
  std::map<CollectiveKey, std::vector<std::pair<double, double>>> pts;
  for (const auto* f : files) {
    if (f->kind != MeasurementFile::Collective) continue;
    for (const auto& s : f->samples)
      if (keep(s.row)) pts[{s.collective, int(s.m), int(s.n)}].push_back({s.k, s.measured_s});
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

namespace {

// Relative errors of `samples`, in order; op_errs (optional) collects them per operation.
std::vector<double> errors(const CostModel& cm, const MeasurementFile& f, const std::vector<OpSample>& samples,
                           std::map<std::string, std::vector<double>>* op_errs = nullptr) {
  std::vector<double> e;
  for (const auto& s : samples) {
    e.push_back(std::abs(predict_sample(cm, f, s) - s.measured_s) / s.measured_s);
    if (op_errs) (*op_errs)[s.op].push_back(e.back());
  }
  return e;
}

FileValidation summarize_errors(const std::string& file, std::vector<double> errs,
                                std::map<std::string, std::vector<double>> op_errs = {}) {
  FileValidation v;
  for (auto& [op, e] : op_errs) v.by_op[op] = {int(e.size()), median_of(e)};
  v.file = file;
  v.samples = int(errs.size());
  v.p90 = quantile_of(errs, 0.9);
  v.median = median_of(errs);
  return v;
}

}  // namespace

std::vector<FileValidation> validate_measurements(const std::string& hardware, const std::string& dir,
                                                  ProgressCount* progress) {
  const GpuSpec gpu = find_gpu(hardware);
  const auto files = read_measurements(dir);
  if (progress) progress->total = int64_t(files.size());
  std::vector<const MeasurementFile*> coll;
  for (const auto& f : files)
    if (f.kind == MeasurementFile::Collective) coll.push_back(&f);
  // Analytical collective parameters from every collective file (used for the analytic column
  // and as the fallback when no curve matches).
  const Calibration base = fit_calibration(coll, gpu, default_calibration());
  // Each file's validation is independent of the others' (its own leave-one-out fit): they run on
  // the machine's cores, each writing its own row, so the table is the same as one after another.
  auto validate = [&](const MeasurementFile& f) -> FileValidation {
    std::vector<double> errs;
    std::map<std::string, std::vector<double>> op_errs;
    if (f.kind != MeasurementFile::Collective) {
      // Leave one file out among the files of its kind.
      std::vector<const MeasurementFile*> train;
      for (const auto& o : files)
        if (&o != &f && o.kind == f.kind) train.push_back(&o);
      if (train.empty()) {
        // One file: two folds by row parity.
        for (int fold = 0; fold < 2; ++fold) {
          MeasurementFile half = f, other = f;
          half.samples.clear();
          other.samples.clear();
          for (const auto& s : f.samples) (s.row % 2 == fold ? other : half).samples.push_back(s);
          const CostModel cm = measurement_model(gpu, fit_calibration({&half}, gpu, base), f);
          for (double e : errors(cm, f, other.samples, &op_errs)) errs.push_back(e);
        }
      } else {
        errs = errors(measurement_model(gpu, fit_calibration(train, gpu, base), f), f, f.samples, &op_errs);
      }
      return summarize_errors(f.name, std::move(errs), std::move(op_errs));
    }
    std::vector<double> analytic;
    const CostModel plain = measurement_model(gpu, base, f);
    for (int fold = 0; fold < 2; ++fold) {
      CostModel cm = measurement_model(gpu, base, f);
      cm.set_collective_curves(fit_collective_curves({&f}, [fold](int row) { return row % 2 != fold; }));
      for (const auto& s : f.samples) {
        if (s.row % 2 != fold) continue;
        errs.push_back(std::abs(predict_sample(cm, f, s) - s.measured_s) / s.measured_s);
        analytic.push_back(std::abs(predict_sample(plain, f, s) - s.measured_s) / s.measured_s);
      }
    }
    FileValidation v = summarize_errors(f.name, std::move(errs));
    v.analytic_median = median_of(analytic);
    return v;
  };
  std::vector<FileValidation> out(files.size());
  parallel_for_each_index(files.size(), [&](size_t i) {
    out[i] = validate(files[i]);
    if (progress) ++progress->done;
  });
  return out;
}

std::vector<FileValidation> validate_transfer(const std::string& calibrate_hardware, const std::string& calibrate_dir,
                                              const std::string& hardware, const std::string& dir,
                                              ProgressCount* progress) {
  const GpuSpec from = find_gpu(calibrate_hardware), to = find_gpu(hardware);
  const auto train_files = read_measurements(calibrate_dir);
  std::vector<const MeasurementFile*> train;
  for (const auto& f : train_files) train.push_back(&f);
  // Efficiencies fitted on the calibration machine; the target is priced from its datasheet.
  const Calibration cal = fit_calibration(train, from, default_calibration());
  std::vector<FileValidation> out;
  const auto files = read_measurements(dir);
  if (progress) progress->total = int64_t(files.size());
  for (const auto& f : files) {
    std::map<std::string, std::vector<double>> op_errs;
    std::vector<double> errs = errors(measurement_model(to, cal, f), f, f.samples, &op_errs);
    FileValidation v = summarize_errors(f.name, std::move(errs), std::move(op_errs));
    if (f.kind == MeasurementFile::Collective) v.analytic_median = v.median;
    out.push_back(v);
    if (progress) ++progress->done;
  }
  return out;
}

std::string measurement_hardware(const std::string& dir) {
  if (is_hardware_entry(dir)) return dir;  // a loom profile folder: its hardware.json
  std::string name = std::filesystem::path(dir).lexically_normal().filename().string();
  if (name.empty()) name = std::filesystem::path(dir).lexically_normal().parent_path().filename().string();
  try {
    find_gpu(name);
    return name;
  } catch (const Error&) {
  }
  fail("measurements folder '", dir, "' has no hardware.json and its name '", name,
       "' is no catalog GPU: name the hardware it was measured on (--calibrate-hardware)");
}

}  // namespace loom::sim
