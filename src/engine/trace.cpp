#include "engine/trace.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
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
      t.prompt_len = std::min(t.prompt_len, o.max_context - 1);
      t.output_len = std::min(t.output_len, o.max_context - t.prompt_len);
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
