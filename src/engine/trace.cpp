#include "engine/trace.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <limits>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_bounded.h"
#include "engine/metrics.h"

namespace loom {

namespace {

struct LineReader {
  explicit LineReader(const std::string& path) : path(path), in(path) {
    if (!in) fail("cannot open trace file '", path, "'");
  }
  // Trace lines are short records; a longer one is refused before it is buffered whole.
  static constexpr size_t kMaxLineBytes = kTraceLineJsonLimits.max_bytes;
  // Next line without its '\r\n'; false at end of file.
  bool next(std::string* line) {
    line->clear();
    std::streambuf* buf = in.rdbuf();
    bool any = false;
    for (int c; (c = buf->sbumpc()) != std::char_traits<char>::eof();) {
      any = true;
      if (c == '\n') break;
      if (line->size() >= kMaxLineBytes)
        fail(path, ":", line_no + 1, ": line longer than ", kMaxLineBytes, " bytes (not a trace?)");
      line->push_back(char(c));
    }
    if (!any) return false;
    ++line_no;
    if (!line->empty() && line->back() == '\r') line->pop_back();
    return true;
  }
  // `found` is quoted capped (text_excerpt): a bad field may be megabytes long.
  [[noreturn]] void error(std::string_view field, const std::string& what,
                          std::string_view found) const {
    fail(path, ":", line_no, ": field '", field, "': ", what, ", found '", text_excerpt(found, 80), "'");
  }
  std::string path;
  std::ifstream in;
  int64_t line_no = 0;
};

std::vector<std::string_view> split_csv(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    std::string_view f = line.substr(start, comma == std::string_view::npos ? line.npos : comma - start);
    while (!f.empty() && (f.front() == ' ' || f.front() == '\t')) f.remove_prefix(1);
    while (!f.empty() && (f.back() == ' ' || f.back() == '\t')) f.remove_suffix(1);
    out.push_back(f);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t'; });
}

double parse_time(const LineReader& r, std::string_view field, std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno != 0 || !std::isfinite(v) || v < 0)
    r.error(field, "expected a finite non-negative number", text);
  return v;
}

// Token counts: non-negative integers (a value like "374.0" is accepted when integral).
int parse_count(const LineReader& r, std::string_view field, std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno != 0 || !std::isfinite(v) || v < 0 ||
      v != std::floor(v) || v > double(std::numeric_limits<int>::max()))
    r.error(field, "expected a non-negative integer token count", text);
  return int(v);
}

std::string header_of(const std::string& path) {
  LineReader r(path);
  std::string line;
  r.next(&line);
  return line;
}

// Reads a CSV with a header; `want` names the columns to extract (by header name).
template <typename Row>
void read_csv(const std::string& path, const std::vector<std::string>& want, Row&& row) {
  LineReader r(path);
  std::string line;
  if (!r.next(&line)) fail(path, ": empty file, expected a CSV header");
  const auto header = split_csv(line);
  std::vector<size_t> col;
  for (const std::string& w : want) {
    auto it = std::find(header.begin(), header.end(), w);
    if (it == header.end()) fail(path, ":1: missing column '", w, "' in header '", line, "'");
    col.push_back(size_t(it - header.begin()));
  }
  std::vector<std::string_view> vals(want.size());
  while (r.next(&line)) {
    if (blank(line)) continue;
    const auto f = split_csv(line);
    if (f.size() != header.size())
      r.error(want[0], cat("expected ", header.size(), " comma-separated fields, got ", f.size()),
              line);
    for (size_t i = 0; i < want.size(); ++i) vals[i] = f[col[i]];
    row(r, vals);
  }
}

}  // namespace

bool clip_to_context(int* prompt_len, int* output_len, int max_context) {
  LOOM_CHECK(max_context >= 2, "clip_to_context needs a context of at least 2 tokens");
  if (int64_t(*prompt_len) + *output_len <= max_context) return false;
  *output_len = std::min(*output_len, max_context - 1);
  *prompt_len = std::min(*prompt_len, max_context - *output_len);
  return true;
}

void apply_trace_options(std::vector<TraceRequest>* trace, const TraceOptions& o) {
  if (!(o.rate_scale > 0) || !std::isfinite(o.rate_scale))
    fail("trace rate scale must be > 0, found ", o.rate_scale);
  if (o.max_context < 0) fail("trace max_context must be >= 0, found ", o.max_context);
  if (o.clip && o.max_context == 1) fail("trace clipping needs max_context >= 2, found 1");
  if (o.max_requests >= 0 && int64_t(trace->size()) > o.max_requests)
    trace->resize(size_t(o.max_requests));
  if (trace->empty()) return;
  if (o.rate_scale != 1.0) {
    const double t0 = trace->front().arrival_s;
    for (TraceRequest& t : *trace) t.arrival_s = t0 + (t.arrival_s - t0) / o.rate_scale;
  }
  if (o.max_context > 0) {
    for (TraceRequest& t : *trace) {
      if (int64_t(t.prompt_len) + t.output_len <= o.max_context) continue;
      if (!o.clip) {
        t.too_long = true;
        continue;
      }
      clip_to_context(&t.prompt_len, &t.output_len, o.max_context);
      if (t.hash_block_tokens > 0) {
        const size_t keep = size_t((t.prompt_len + t.hash_block_tokens - 1) / t.hash_block_tokens);
        if (t.prefix_hashes.size() > keep) t.prefix_hashes.resize(keep);
      }
      t.clipped = true;
    }
  }
}

std::vector<TraceRequest> read_azure_csv(const std::string& path, const TraceOptions& options) {
  std::vector<TraceRequest> out;
  double prev = 0;
  read_csv(path, {"arrived_at", "num_prefill_tokens", "num_decode_tokens"},
           [&](const LineReader& r, const std::vector<std::string_view>& v) {
             TraceRequest t;
             t.arrival_s = parse_time(r, "arrived_at", v[0]);
             if (t.arrival_s < prev)
               r.error("arrived_at", cat("arrival times must not decrease (previous ", prev, ")"),
                       v[0]);
             prev = t.arrival_s;
             t.prompt_len = parse_count(r, "num_prefill_tokens", v[1]);
             t.output_len = parse_count(r, "num_decode_tokens", v[2]);
             out.push_back(std::move(t));
           });
  apply_trace_options(&out, options);
  return out;
}

std::vector<TraceRequest> read_lengths_csv(const std::string& path, const TraceOptions& options) {
  std::vector<TraceRequest> out;
  read_csv(path, {"num_prefill_tokens", "num_decode_tokens"},
           [&](const LineReader& r, const std::vector<std::string_view>& v) {
             TraceRequest t;
             t.prompt_len = parse_count(r, "num_prefill_tokens", v[0]);
             t.output_len = parse_count(r, "num_decode_tokens", v[1]);
             out.push_back(std::move(t));
           });
  apply_trace_options(&out, options);
  return out;
}

std::vector<TraceRequest> read_mooncake_jsonl(const std::string& path,
                                              const TraceOptions& options) {
  std::vector<TraceRequest> out;
  LineReader r(path);
  std::string line;
  double prev = 0;
  auto count_field = [&](const nlohmann::json& j, const char* name) {
    auto it = j.find(name);
    if (it == j.end()) r.error(name, "missing", "");
    if (!it->is_number_integer() || it->get<int64_t>() < 0 ||
        it->get<int64_t>() > std::numeric_limits<int>::max())
      r.error(name, "expected a non-negative integer", json_excerpt(*it));
    return it->get<int64_t>();
  };
  while (r.next(&line)) {
    if (blank(line)) continue;
    nlohmann::json j;
    try {
      j = parse_json_bounded(line, "invalid JSON", kTraceLineJsonLimits);  // depth-bounded
    } catch (const Error& e) {
      r.error("(line)", e.what(), line);
    }
    if (!j.is_object()) r.error("(line)", "expected a JSON object", line);
    TraceRequest t;
    auto ts = j.find("timestamp");
    if (ts == j.end()) r.error("timestamp", "missing", "");
    if (!ts->is_number() || ts->get<double>() < 0)
      r.error("timestamp", "expected a non-negative number of milliseconds", json_excerpt(*ts));
    t.arrival_s = ts->get<double>() / 1000.0;
    if (t.arrival_s < prev)
      r.error("timestamp", cat("timestamps must not decrease (previous ", prev * 1000, " ms)"),
              json_excerpt(*ts));
    prev = t.arrival_s;
    t.prompt_len = int(count_field(j, "input_length"));
    t.output_len = int(count_field(j, "output_length"));
    auto h = j.find("hash_ids");
    if (h != j.end()) {
      if (!h->is_array()) r.error("hash_ids", "expected an array of integers", json_excerpt(*h));
      for (const auto& x : *h) {
        if (!x.is_number_integer()) r.error("hash_ids", "expected integers", json_excerpt(x));
        t.prefix_hashes.push_back(x.get<int64_t>());
      }
      t.hash_block_tokens = kMooncakeHashBlockTokens;
    }
    out.push_back(std::move(t));
  }
  apply_trace_options(&out, options);
  return out;
}

std::vector<TraceRequest> read_trace(const std::string& path, const TraceOptions& options,
                                     TraceFormat format) {
  if (path.rfind("servegen:", 0) == 0) {
    // The rate scale multiplies every client's rate (read_servegen), not the gaps of the result.
    std::string dir;
    ServeGenOptions so = parse_servegen_spec(path, &dir);
    so.rate_scale = options.rate_scale;
    std::vector<TraceRequest> t = read_servegen(dir, so);
    TraceOptions rest = options;
    rest.rate_scale = 1.0;
    apply_trace_options(&t, rest);
    return t;
  }
  if (format == TraceFormat::kAuto) {
    const bool jsonl = path.size() >= 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0;
    if (jsonl) {
      format = TraceFormat::kMooncakeJsonl;
    } else {
      const std::string h = header_of(path);
      if (h.rfind("arrived_at", 0) == 0) {
        format = TraceFormat::kAzureCsv;
      } else if (h.rfind("num_prefill_tokens", 0) == 0) {
        format = TraceFormat::kLengthsCsv;
      } else {
        fail(path, ":1: unknown trace format (header '", h.substr(0, 80),
             "'); expected an Azure CSV (arrived_at,...), a lengths CSV "
             "(num_prefill_tokens,...) or Mooncake .jsonl");
      }
    }
  }
  switch (format) {
    case TraceFormat::kAzureCsv: return read_azure_csv(path, options);
    case TraceFormat::kMooncakeJsonl: return read_mooncake_jsonl(path, options);
    case TraceFormat::kLengthsCsv: return read_lengths_csv(path, options);
    case TraceFormat::kAuto: break;
  }
  LOOM_CHECK(false, "unreachable");
  return {};
}

// --- synthetic ---

LengthDist LengthDist::fixed(int v) {
  LengthDist d;
  d.kind = Kind::kFixed;
  d.value = v;
  d.validate();
  return d;
}
LengthDist LengthDist::uniform(int lo, int hi) {
  LengthDist d;
  d.kind = Kind::kUniform;
  d.min = lo;
  d.max = hi;
  d.validate();
  return d;
}
LengthDist LengthDist::normal_clipped(double mean, double stddev, int lo, int hi) {
  LengthDist d;
  d.kind = Kind::kNormalClipped;
  d.mean = mean;
  d.stddev = stddev;
  d.min = lo;
  d.max = hi;
  d.validate();
  return d;
}
LengthDist LengthDist::empirical(std::vector<int> samples) {
  LengthDist d;
  d.kind = Kind::kEmpirical;
  d.samples = std::move(samples);
  d.validate();
  return d;
}

void LengthDist::validate() const {
  switch (kind) {
    case Kind::kFixed:
      if (value < 0) fail("length distribution: fixed value must be >= 0, found ", value);
      break;
    case Kind::kUniform:
    case Kind::kNormalClipped:
      if (min < 0 || max < min)
        fail("length distribution: need 0 <= min <= max, found min ", min, " max ", max);
      if (kind == Kind::kNormalClipped && !(stddev >= 0))
        fail("length distribution: stddev must be >= 0, found ", stddev);
      break;
    case Kind::kEmpirical:
      if (samples.empty()) fail("length distribution: empirical needs at least one sample");
      break;
  }
}

int LengthDist::sample(Rng& rng) const {
  switch (kind) {
    case Kind::kFixed: return value;
    case Kind::kUniform: return min + int(rng.below(uint64_t(max - min) + 1));
    case Kind::kNormalClipped: {
      const double v = std::round(mean + stddev * rng.normal());
      return int(std::clamp(v, double(min), double(max)));
    }
    case Kind::kEmpirical: return samples[size_t(rng.below(samples.size()))];
  }
  return 0;
}

ArrivalSpec ArrivalSpec::all_at_zero() {
  ArrivalSpec s;
  s.kind = Kind::kAllAtZero;
  return s;
}
ArrivalSpec ArrivalSpec::poisson(double rate) {
  ArrivalSpec s;
  s.kind = Kind::kPoisson;
  s.rate_per_s = rate;
  s.validate();
  return s;
}
ArrivalSpec ArrivalSpec::gamma(double rate, double cv) {
  ArrivalSpec s;
  s.kind = Kind::kGamma;
  s.rate_per_s = rate;
  s.cv = cv;
  s.validate();
  return s;
}
ArrivalSpec ArrivalSpec::bursty(double rate, double on_s, double off_s) {
  ArrivalSpec s;
  s.kind = Kind::kBursty;
  s.rate_per_s = rate;
  s.on_s = on_s;
  s.off_s = off_s;
  s.validate();
  return s;
}

void ArrivalSpec::validate() const {
  if (kind == Kind::kAllAtZero) return;
  if (!(rate_per_s > 0) || !std::isfinite(rate_per_s))
    fail("arrival rate must be > 0 requests/s, found ", rate_per_s);
  if (kind == Kind::kGamma && !(cv > 0 && std::isfinite(cv)))
    fail("gamma arrivals: cv must be > 0, found ", cv);
  if (kind == Kind::kBursty && !(on_s > 0 && off_s >= 0))
    fail("bursty arrivals: need on_s > 0 and off_s >= 0, found on_s ", on_s, " off_s ", off_s);
}

namespace {

double exponential(Rng& rng, double rate) {
  return -std::log1p(-rng.uniform_double()) / rate;  // uniform in [0,1): argument > 0
}

// Gamma(shape k, scale 1) by Marsaglia-Tsang (with the k < 1 boost).
double gamma_unit(Rng& rng, double k) {
  if (k < 1) {
    const double u = std::max(rng.uniform_double(), 1e-300);
    return gamma_unit(rng, k + 1) * std::pow(u, 1.0 / k);
  }
  const double d = k - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  while (true) {
    double x, v;
    do {
      x = rng.normal();
      v = 1.0 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = rng.uniform_double();
    if (u < 1 - 0.0331 * x * x * x * x) return d * v;
    if (std::log(std::max(u, 1e-300)) < 0.5 * x * x + d * (1 - v + std::log(v))) return d * v;
  }
}

}  // namespace

std::vector<double> synth_arrivals(const ArrivalSpec& spec, int64_t n, uint64_t seed) {
  spec.validate();
  if (n < 0) fail("number of synthetic requests must be >= 0, found ", n);
  std::vector<double> out;
  out.reserve(size_t(n));
  Rng rng(seed);
  double t = 0;
  switch (spec.kind) {
    case ArrivalSpec::Kind::kAllAtZero:
      out.assign(size_t(n), 0.0);
      break;
    case ArrivalSpec::Kind::kPoisson:
      for (int64_t i = 0; i < n; ++i) out.push_back(t += exponential(rng, spec.rate_per_s));
      break;
    case ArrivalSpec::Kind::kGamma: {
      // Inter-arrival ~ Gamma(shape 1/cv^2, scale cv^2/rate): mean 1/rate, CV cv.
      const double shape = 1.0 / (spec.cv * spec.cv), scale = spec.cv * spec.cv / spec.rate_per_s;
      for (int64_t i = 0; i < n; ++i) out.push_back(t += gamma_unit(rng, shape) * scale);
      break;
    }
    case ArrivalSpec::Kind::kBursty: {
      // Poisson on the "on" time axis, then mapped to wall time by inserting off periods.
      const double period = spec.on_s + spec.off_s;
      const double on_rate = spec.rate_per_s * period / spec.on_s;
      double on_time = 0;
      for (int64_t i = 0; i < n; ++i) {
        on_time += exponential(rng, on_rate);
        const double k = std::floor(on_time / spec.on_s);
        out.push_back(k * period + (on_time - k * spec.on_s));
      }
      break;
    }
  }
  return out;
}

std::vector<TraceRequest> synthesize_trace(int64_t n, const ArrivalSpec& arrivals,
                                           uint64_t arrival_seed, const LengthDist& prompt,
                                           uint64_t prompt_seed, const LengthDist& output,
                                           uint64_t output_seed) {
  prompt.validate();
  output.validate();
  const std::vector<double> times = synth_arrivals(arrivals, n, arrival_seed);
  Rng prng(prompt_seed), orng(output_seed);
  std::vector<TraceRequest> out(static_cast<size_t>(n));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].arrival_s = times[i];
    out[i].prompt_len = prompt.sample(prng);
    out[i].output_len = output.sample(orng);
  }
  return out;
}

void assign_arrivals(std::vector<TraceRequest>* trace, const ArrivalSpec& spec, uint64_t seed) {
  const std::vector<double> times = synth_arrivals(spec, int64_t(trace->size()), seed);
  for (size_t i = 0; i < trace->size(); ++i) (*trace)[i].arrival_s = times[i];
}

// --- ServeGen ---

namespace {

constexpr double kServeGenWindowS = 600;  // the traces' window (README: one line per 600 s)

struct ServeGenWindow {
  double t = 0, rate = 0;
  std::string pattern;
  double shape = 0;  // Gamma / Weibull shape (arg1)
};

// A length distribution: cumulative probabilities over lengths (the dict literal, normalised).
struct LengthCdf {
  std::vector<int> len;
  std::vector<double> cum;
  bool empty() const { return len.empty(); }
  int sample(Rng& rng) const {
    const double u = rng.uniform_double() * cum.back();
    const size_t i = size_t(std::upper_bound(cum.begin(), cum.end(), u) - cum.begin());
    return len[std::min(i, len.size() - 1)];
  }
};

// "{12: 0.24, 14: 0.0005}" (a Python dict literal of length -> probability); "{}" -> empty.
LengthCdf parse_length_dict(const std::string& text, const std::string& where) {
  LengthCdf d;
  std::string t;
  for (char c : text)
    if (c != ' ' && c != '\n' && c != '\t' && c != '\r') t.push_back(c);
  if (t.size() < 2 || t.front() != '{' || t.back() != '}')
    fail(where, ": expected a dict literal {length: probability, ...}, found '", text_excerpt(text, 60), "'");
  const std::string body = t.substr(1, t.size() - 2);
  size_t pos = 0;
  double total = 0;
  while (pos < body.size()) {
    size_t comma = body.find(',', pos);
    if (comma == std::string::npos) comma = body.size();
    const std::string item = body.substr(pos, comma - pos);
    const size_t colon = item.find(':');
    char* end = nullptr;
    const std::string ks = colon == std::string::npos ? item : item.substr(0, colon);
    const double k = std::strtod(ks.c_str(), &end);
    const bool key_ok = colon != std::string::npos && !ks.empty() && end == ks.c_str() + ks.size() && std::isfinite(k) &&
                        k >= 0 && k == std::floor(k) && k <= double(std::numeric_limits<int>::max());
    const std::string vs = colon == std::string::npos ? "" : item.substr(colon + 1);
    const double v = std::strtod(vs.c_str(), &end);
    const bool val_ok = !vs.empty() && end == vs.c_str() + vs.size() && std::isfinite(v) && v >= 0;
    if (!key_ok || !val_ok)
      fail(where, ": entry '", text_excerpt(item, 40), "' is not length: probability (a non-negative integer and a ",
           "non-negative number)");
    if (v > 0) {
      total += v;
      d.len.push_back(int(k));
      d.cum.push_back(total);
    }
    pos = comma + 1;
  }
  if (!d.len.empty() && !(total > 0)) fail(where, ": probabilities sum to ", total);
  return d;
}

struct ServeGenClient {
  int id = 0;
  std::string trace_path, dataset_path;  // dataset_path empty: no file
  std::vector<ServeGenWindow> windows;
  // Each 6 h timestamp's input and output length distributions (those with data), by timestamp.
  std::map<double, std::pair<LengthCdf, LengthCdf>> lengths;
  std::vector<double> arrivals;  // absolute seconds, in the range
};

std::vector<ServeGenWindow> read_servegen_trace(const std::string& path) {
  LineReader r(path);
  std::string line;
  std::vector<ServeGenWindow> out;
  while (r.next(&line)) {
    if (blank(line)) continue;
    const auto f = split_csv(line);
    if (f.size() != 6) r.error("timestamp_s", cat("expected 6 comma-separated fields, got ", f.size()), line);
    ServeGenWindow w;
    w.t = parse_time(r, "timestamp_s", f[0]);
    w.rate = parse_time(r, "rate_rps", f[1]);
    w.pattern = std::string(f[3]);
    if (w.rate > 0 && (w.pattern == "Gamma" || w.pattern == "Weibull")) {
      w.shape = parse_time(r, "arg1", f[4]);
      if (!(w.shape > 0)) r.error("arg1", cat("the ", w.pattern, " shape must be > 0"), f[4]);
    } else if (w.rate > 0 && !w.pattern.empty() && w.pattern != "Exponential") {
      r.error("pattern", "expected Gamma, Weibull, Exponential or empty", f[3]);
    }
    if (!out.empty() && w.t <= out.back().t) r.error("timestamp_s", "timestamps must increase", f[0]);
    out.push_back(w);
  }
  return out;
}

void read_servegen_dataset(ServeGenClient& c) {
  std::ifstream in(c.dataset_path, std::ios::binary);
  if (!in) fail("cannot open ServeGen dataset '", c.dataset_path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json j = parse_json_bounded(ss.str(), c.dataset_path, JsonLimits{size_t(256) << 20, 4});
  if (!j.is_object()) fail(c.dataset_path, ": expected a JSON object of timestamps");
  for (const auto& item : j.items()) {
    // Named copies, not a structured binding: lambdas capturing bindings need C++20's P1091,
    // which the sanitized build's clang lacks.
    const std::string& key = item.key();
    const nlohmann::json& v = item.value();
    char* end = nullptr;
    const double t = std::strtod(key.c_str(), &end);
    if (key.empty() || end != key.c_str() + key.size() || !std::isfinite(t) || t < 0)
      fail(c.dataset_path, ": key '", text_excerpt(key, 40), "' is not a timestamp in seconds");
    auto dict = [&](const char* field) {
      if (!v.is_object() || !v.contains(field) || !v[field].is_string())
        fail(c.dataset_path, ": timestamp ", key, ": missing string field '", field, "'");
      return parse_length_dict(v[field].get<std::string>(), cat(c.dataset_path, ": timestamp ", key, ": ", field));
    };
    LengthCdf in_len = dict("input_tokens"), out_len = dict("output_tokens");
    if (!in_len.empty() && !out_len.empty()) c.lengths[t] = {std::move(in_len), std::move(out_len)};
  }
}

// The distributions of `c` at time t: the nearest earlier timestamp with data, else the nearest later.
const std::pair<LengthCdf, LengthCdf>* lengths_at(const ServeGenClient& c, double t) {
  if (c.lengths.empty()) return nullptr;
  auto it = c.lengths.upper_bound(t);
  if (it == c.lengths.begin()) return &it->second;
  return &std::prev(it)->second;
}

std::vector<ServeGenClient> servegen_clients(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("ServeGen folder '", dir, "' not found");
  std::vector<ServeGenClient> out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const std::string pre = "chunk-", suf = "-trace.csv";
    if (name.size() <= pre.size() + suf.size() || name.rfind(pre, 0) != 0 ||
        name.compare(name.size() - suf.size(), suf.size(), suf) != 0)
      continue;
    const std::string num = name.substr(pre.size(), name.size() - pre.size() - suf.size());
    if (num.empty() || !std::all_of(num.begin(), num.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) || num.size() > 9)
      continue;
    ServeGenClient c;
    c.id = std::stoi(num);
    c.trace_path = e.path().string();
    const fs::path ds = fs::path(dir) / (pre + num + "-dataset.json");
    if (fs::is_regular_file(ds, ec)) c.dataset_path = ds.string();
    out.push_back(std::move(c));
  }
  if (out.empty()) fail("ServeGen folder '", dir, "' holds no chunk-N-trace.csv");
  std::sort(out.begin(), out.end(), [](const ServeGenClient& a, const ServeGenClient& b) { return a.id < b.id; });
  return out;
}

// Requests of `c` over [a, b) (its windows' overlaps), rounding by carrying the fraction.
void servegen_arrivals(ServeGenClient& c, double a, double b, double scale, uint64_t seed) {
  Rng rng(seed * 0x9e3779b97f4a7c15ull + uint64_t(c.id) * 2 + 1);
  double carried = 0;
  for (size_t i = 0; i < c.windows.size(); ++i) {
    const ServeGenWindow& w = c.windows[i];
    const double end = i + 1 < c.windows.size() ? c.windows[i + 1].t : w.t + kServeGenWindowS;
    const double lo = std::max(a, w.t), hi = std::min(b, end);
    if (hi <= lo || !(w.rate > 0)) continue;
    const double expected = w.rate * scale * (hi - lo);
    const int64_t n = int64_t(std::floor(carried + expected)) - int64_t(std::floor(carried));
    carried += expected;
    if (n <= 0) continue;
    std::vector<double> gaps(size_t(n + 1));
    double total = 0;
    for (double& g : gaps) {
      if (w.pattern == "Gamma") g = gamma_unit(rng, w.shape);
      else if (w.pattern == "Weibull") g = std::pow(-std::log1p(-rng.uniform_double()), 1.0 / w.shape);
      else g = exponential(rng, 1.0);
      total += g;
    }
    double acc = 0;
    for (int64_t k = 0; k < n; ++k) {
      acc += gaps[size_t(k)];
      // All gaps zero (a burst below double precision): every request at the overlap's start.
      const double f = total > 0 ? acc / total : 0.0;
      c.arrivals.push_back(std::min(lo + (hi - lo) * f, std::nextafter(hi, lo)));
    }
  }
}

}  // namespace

ServeGenOptions parse_servegen_spec(const std::string& spec, std::string* dir) {
  const std::string pre = "servegen:";
  if (spec.rfind(pre, 0) != 0) fail("'", spec, "' is not a ServeGen spec (servegen:DIR[@START:DURATION])");
  ServeGenOptions o;
  std::string rest = spec.substr(pre.size());
  const size_t at = rest.rfind('@');
  if (at != std::string::npos) {
    const std::string win = rest.substr(at + 1);
    rest = rest.substr(0, at);
    const size_t colon = win.find(':');
    char* end = nullptr;
    const std::string a = colon == std::string::npos ? win : win.substr(0, colon);
    const std::string d = colon == std::string::npos ? "" : win.substr(colon + 1);
    o.start_s = std::strtod(a.c_str(), &end);
    const bool a_ok = !a.empty() && end == a.c_str() + a.size() && std::isfinite(o.start_s) && o.start_s >= 0;
    o.duration_s = std::strtod(d.c_str(), &end);
    const bool d_ok = !d.empty() && end == d.c_str() + d.size() && std::isfinite(o.duration_s) && o.duration_s > 0;
    if (!a_ok || !d_ok)
      fail("ServeGen spec '", spec, "': the window must be @START:DURATION in seconds (START >= 0, DURATION > 0), ",
           "found '@", win, "'");
  }
  if (rest.empty()) fail("ServeGen spec '", spec, "': no folder");
  if (dir) *dir = rest;
  return o;
}

double servegen_mean_rate(const std::string& dir, double start_s, double duration_s) {
  if (!(duration_s > 0)) fail("ServeGen window of ", duration_s, " s: must be > 0");
  double requests = 0;
  for (ServeGenClient& c : servegen_clients(dir)) {
    c.windows = read_servegen_trace(c.trace_path);
    for (size_t i = 0; i < c.windows.size(); ++i) {
      const double end = i + 1 < c.windows.size() ? c.windows[i + 1].t : c.windows[i].t + kServeGenWindowS;
      const double lo = std::max(start_s, c.windows[i].t), hi = std::min(start_s + duration_s, end);
      if (hi > lo) requests += c.windows[i].rate * (hi - lo);
    }
  }
  return requests / duration_s;
}

std::vector<TraceRequest> read_servegen(const std::string& dir, const ServeGenOptions& o, ServeGenStats* stats) {
  if (!(o.duration_s > 0) || !std::isfinite(o.duration_s) || !(o.start_s >= 0))
    fail("ServeGen window ", o.start_s, " + ", o.duration_s, " s: start must be >= 0 and duration > 0");
  if (!(o.rate_scale > 0) || !std::isfinite(o.rate_scale)) fail("ServeGen rate scale must be > 0, found ", o.rate_scale);
  std::vector<ServeGenClient> clients = servegen_clients(dir);
  ServeGenStats st;
  st.clients = int(clients.size());
  const double a = o.start_s, b = o.start_s + o.duration_s;
  std::vector<size_t> donors;  // active clients with lengths, for those without
  std::vector<double> donor_weight;
  for (size_t i = 0; i < clients.size(); ++i) {
    ServeGenClient& c = clients[i];
    c.windows = read_servegen_trace(c.trace_path);
    servegen_arrivals(c, a, b, o.rate_scale, o.seed);
    if (c.arrivals.empty()) continue;
    ++st.active_clients;
    if (!c.dataset_path.empty()) read_servegen_dataset(c);
    if (!c.lengths.empty()) donors.push_back(i), donor_weight.push_back(double(c.arrivals.size()));
  }
  std::vector<double> donor_cum(donor_weight.size());
  double sum = 0;
  for (size_t k = 0; k < donor_weight.size(); ++k) donor_cum[k] = sum += donor_weight[k];
  struct Out {
    double t;
    int client;
    TraceRequest r;
  };
  std::vector<Out> all;
  for (const ServeGenClient& c : clients) {
    if (c.arrivals.empty()) continue;
    const bool own = !c.lengths.empty();
    if (!own && (!o.borrow_lengths || donors.empty())) {
      st.dropped_requests += int64_t(c.arrivals.size());
      continue;
    }
    if (!own) ++st.borrowing_clients;
    Rng rng(o.seed * 0xbf58476d1ce4e5b9ull + uint64_t(c.id) * 2 + 2);
    for (double t : c.arrivals) {
      const ServeGenClient* src = &c;
      if (!own) {
        const double u = rng.uniform_double() * sum;
        const size_t k = size_t(std::upper_bound(donor_cum.begin(), donor_cum.end(), u) - donor_cum.begin());
        src = &clients[donors[std::min(k, donors.size() - 1)]];
        ++st.borrowed_requests;
      }
      const auto* d = lengths_at(*src, t);
      TraceRequest r;
      r.arrival_s = t - a;
      r.prompt_len = std::max(1, d->first.sample(rng));
      r.output_len = std::max(1, d->second.sample(rng));
      all.push_back({t, c.id, r});
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const Out& x, const Out& y) { return x.t < y.t; });
  std::vector<TraceRequest> out;
  out.reserve(all.size());
  for (auto& x : all) out.push_back(std::move(x.r));
  st.requests = int64_t(out.size());
  st.mean_rate_rps = double(out.size()) / o.duration_s;
  if (stats) *stats = st;
  return out;
}

TraceStats trace_stats(const std::vector<TraceRequest>& trace) {
  TraceStats s;
  s.count = int64_t(trace.size());
  if (trace.empty()) return s;
  std::vector<double> p, o;
  double first = trace.front().arrival_s, last = first;
  for (const TraceRequest& t : trace) {
    p.push_back(t.prompt_len);
    o.push_back(t.output_len);
    first = std::min(first, t.arrival_s);
    last = std::max(last, t.arrival_s);
    s.num_too_long += t.too_long ? 1 : 0;
    s.num_clipped += t.clipped ? 1 : 0;
  }
  s.duration_s = last - first;
  const Distribution dp = summarize(p), dout = summarize(o);
  s.prompt_mean = dp.mean;
  s.prompt_median = dp.p50;
  s.prompt_p99 = dp.p99;
  s.output_mean = dout.mean;
  s.output_median = dout.p50;
  s.output_p99 = dout.p99;
  return s;
}

}  // namespace loom
