#include "model/info.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/error.h"

namespace loom {

ModelSummary summarize_model(const std::string& path) {
  ModelSummary s;
  s.path = path;
  auto model = load_model(path);
  s.config = model->config;
  s.format = model->format;
  s.file = inspect_model_file(path);
  std::map<std::string, ModelSummary::DTypeShare> by;
  for (auto& t : s.file.tensors) {
    auto& d = by[t.dtype];
    d.dtype = t.dtype;
    d.tensors += 1;
    d.params += t.elements();
    d.bytes += t.bytes;
    s.n_params += t.elements();
    s.weight_bytes += t.bytes;
  }
  s.n_tensors = int64_t(s.file.tensors.size());
  for (auto& [k, v] : by) s.dtypes.push_back(v);
  std::stable_sort(s.dtypes.begin(), s.dtypes.end(), [](auto& a, auto& b) { return a.bytes > b.bytes; });
  return s;
}

namespace {
std::string human_bytes(int64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = double(b);
  int u = 0;
  while (x >= 1024 && u < 4) {
    x /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", x, units[u]);
  return buf;
}
}  // namespace

std::string format_model_summary(const ModelSummary& s, bool list_tensors) {
  const ModelConfig& c = s.config;
  std::string out;
  out += cat("path:        ", s.path, "\n");
  out += cat("format:      ", s.format, " (", s.file.files.size(), s.file.files.size() == 1 ? " file" : " files", ")\n");
  out += cat("config:      ", c.summary(), "\n");
  out += cat("norm eps:    ", c.rms_eps, "; bos ", c.bos_id, ", eos ", c.eos_id, "\n");
  if (c.rope_scaling.llama3)
    out += cat("rope scale:  llama3 factor ", c.rope_scaling.factor, ", low ", c.rope_scaling.low_freq_factor,
               ", high ", c.rope_scaling.high_freq_factor, ", original context ", c.rope_scaling.original_max_position,
               "\n");
  if (!c.rope_scaling.freq_factors.empty())
    out += cat("rope scale:  per-frequency factors (", c.rope_scaling.freq_factors.size(), ", from rope_freqs)\n");
  out += cat("tensors:     ", s.n_tensors, "\n");
  out += cat("parameters:  ", s.n_params, " (config implies ", c.param_count(), ")\n");
  out += cat("weights:     ", s.weight_bytes, " bytes (", human_bytes(s.weight_bytes), ")\n");
  out += "dtypes:\n";
  for (auto& d : s.dtypes)
    out += cat("  ", d.dtype, ": ", d.tensors, " tensors, ", d.params, " params, ", d.bytes, " bytes (",
               human_bytes(d.bytes), ")\n");
  if (list_tensors) {
    out += "metadata:\n";
    for (auto& [k, v] : s.file.metadata) out += cat("  ", k, " = ", v, "\n");
    out += "tensor list:\n";
    for (auto& t : s.file.tensors) out += cat("  ", t.name, " ", t.dtype, " ", shape_text(t.shape), " ", t.bytes, " bytes\n");
  }
  return out;
}

}  // namespace loom
