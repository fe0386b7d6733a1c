#include "engine/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <string>

#include "core/error.h"

namespace loom {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
nlohmann::json num_or_null(double v) { return std::isnan(v) ? nlohmann::json() : nlohmann::json(v); }
}  // namespace

namespace {
// percentile() of values already in ascending order.
double percentile_sorted(const std::vector<double>& values, double p) {
  LOOM_CHECK(p >= 0 && p <= 100, "percentile p=", p);
  if (values.empty()) return kNaN;
  const double h = (double(values.size()) - 1) * p / 100.0;
  const size_t lo = size_t(std::floor(h));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (h - double(lo)) * (values[hi] - values[lo]);
}

// percentile() of `values` (non-empty) in any order: the order statistics it interpolates between,
// selected in place (reorders `values`).
double percentile_select(std::vector<double>& values, double p) {
  const double h = (double(values.size()) - 1) * p / 100.0;
  const size_t lo = size_t(std::floor(h));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  std::nth_element(values.begin(), values.begin() + std::ptrdiff_t(lo), values.end());
  const double a = values[lo];
  const double b = hi == lo ? a : *std::min_element(values.begin() + std::ptrdiff_t(lo) + 1, values.end());
  return a + (h - double(lo)) * (b - a);
}
}  // namespace

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return percentile_sorted(values, p);
}

Distribution summarize(const std::vector<double>& values) {
  Distribution d;
  d.count = int64_t(values.size());
  if (values.empty()) {
    d.mean = d.p50 = d.p90 = d.p99 = d.max = kNaN;
    return d;
  }
  double sum = 0;
  for (double v : values) sum += v;
  d.mean = sum / double(values.size());
  // The values percentile() gives, from order statistics selected in one copy (no full sort:
  // the summaries of a simulation's every inter-token latency).
  std::vector<double> work = values;
  d.p50 = percentile_select(work, 50);
  d.p90 = percentile_select(work, 90);
  d.p99 = percentile_select(work, 99);
  d.max = *std::max_element(values.begin(), values.end());
  return d;
}

nlohmann::json to_json(const Distribution& d) {
  return {{"count", d.count},          {"mean", num_or_null(d.mean)}, {"p50", num_or_null(d.p50)},
          {"p90", num_or_null(d.p90)}, {"p99", num_or_null(d.p99)},   {"max", num_or_null(d.max)}};
}

std::vector<double> RequestMetrics::itl_s() const {
  std::vector<double> out;
  for (size_t i = 1; i < token_s.size(); ++i) out.push_back(token_s[i] - token_s[i - 1]);
  return out;
}

std::optional<double> RequestMetrics::tpot_s() const {
  if (num_output() < 2 || finish_s < 0) return std::nullopt;
  return (e2e_s() - ttft_s()) / double(num_output() - 1);
}

std::optional<bool> RequestMetrics::slo_met() const {
  if (!slo) return std::nullopt;
  if (num_output() == 0) return false;
  bool ok = true;
  if (slo->ttft_ms > 0) ok = ok && ttft_s() * 1e3 <= slo->ttft_ms;
  if (slo->tpot_ms > 0) {
    auto t = tpot_s();
    if (t) ok = ok && *t * 1e3 <= slo->tpot_ms;
  }
  return ok;
}

RequestMetrics* Metrics::find_mut(RequestId id) {
  auto it = index_.find(id);
  return it == index_.end() ? nullptr : &requests_[it->second];
}

const RequestMetrics* Metrics::find(RequestId id) const {
  auto it = index_.find(id);
  return it == index_.end() ? nullptr : &requests_[it->second];
}

void Metrics::on_arrival(const Request& r, double t_s) {
  LOOM_CHECK(!index_.count(r.id), "request ", r.id, " arrived twice");
  RequestMetrics m;
  m.id = r.id;
  m.priority = r.priority;
  m.prompt_len = r.prompt_len();
  m.slo = r.slo;
  m.arrival_s = t_s;
  index_[r.id] = requests_.size();
  requests_.push_back(std::move(m));
}

void Metrics::on_token(RequestId id, double t_s) {
  RequestMetrics* m = find_mut(id);
  LOOM_CHECK(m != nullptr, "token for unknown request ", id);
  if (m->token_s.empty()) m->first_token_s = t_s;
  m->token_s.push_back(t_s);
}

void Metrics::on_finish(const Sequence& s, double t_s) {
  RequestMetrics* m = find_mut(s.id());
  if (!m) {
    on_arrival(s.request, t_s);
    m = find_mut(s.id());
  }
  m->finish_s = t_s;
  m->finish_reason = s.finish_reason;
  m->num_preemptions = s.num_preemptions;
}

MetricsSummary Metrics::summary() const {
  MetricsSummary s;
  s.num_requests = int64_t(requests_.size());
  s.num_steps = int64_t(steps_.size());
  std::vector<double> ttft, tpot, itl, e2e;
  double first = std::numeric_limits<double>::infinity(), last = -first;
  int64_t with_slo = 0, met = 0;
  for (const RequestMetrics& r : requests_) {
    first = std::min(first, r.arrival_s);
    if (r.finish_s >= 0) last = std::max(last, r.finish_s);
    s.num_preemptions += r.num_preemptions;
    s.num_output_tokens += r.num_output();
    switch (r.finish_reason) {
      case FinishReason::kRejected: ++s.num_rejected; continue;
      case FinishReason::kAbort: ++s.num_aborted; continue;
      case FinishReason::kError: ++s.num_errors; continue;
      case FinishReason::kNone: continue;
      case FinishReason::kStop:
      case FinishReason::kLength: break;
    }
    ++s.num_completed;
    s.num_prompt_tokens += r.prompt_len;
    if (r.num_output() > 0) ttft.push_back(r.ttft_s() * 1e3);
    if (auto t = r.tpot_s()) tpot.push_back(*t * 1e3);
    for (double v : r.itl_s()) itl.push_back(v * 1e3);
    e2e.push_back(r.e2e_s() * 1e3);
    if (auto ok = r.slo_met()) {
      ++with_slo;
      met += *ok ? 1 : 0;
    }
  }
  if (last > first) {
    s.duration_s = last - first;
    s.output_tokens_per_s = double(s.num_output_tokens) / s.duration_s;
    s.requests_per_s = double(s.num_completed) / s.duration_s;
  }
  s.ttft_ms = summarize(ttft);
  s.tpot_ms = summarize(tpot);
  s.itl_ms = summarize(itl);
  s.e2e_ms = summarize(e2e);
  if (with_slo > 0) s.slo_attainment = double(met) / double(with_slo);
  return s;
}

nlohmann::json to_json(const MetricsSummary& s) {
  nlohmann::json j = {{"num_requests", s.num_requests},
                      {"num_completed", s.num_completed},
                      {"num_rejected", s.num_rejected},
                      {"num_aborted", s.num_aborted},
                      {"num_errors", s.num_errors},
                      {"num_prompt_tokens", s.num_prompt_tokens},
                      {"num_output_tokens", s.num_output_tokens},
                      {"num_steps", s.num_steps},
                      {"num_preemptions", s.num_preemptions},
                      {"duration_s", s.duration_s},
                      {"output_tokens_per_s", s.output_tokens_per_s},
                      {"requests_per_s", s.requests_per_s},
                      {"ttft_ms", to_json(s.ttft_ms)},
                      {"tpot_ms", to_json(s.tpot_ms)},
                      {"itl_ms", to_json(s.itl_ms)},
                      {"e2e_ms", to_json(s.e2e_ms)}};
  j["slo_attainment"] = s.slo_attainment ? nlohmann::json(*s.slo_attainment) : nlohmann::json();
  return j;
}

nlohmann::json Metrics::to_json(bool with_requests, bool with_steps) const {
  nlohmann::json j;
  j["summary"] = loom::to_json(summary());
  if (with_requests) {
    nlohmann::json arr = nlohmann::json::array();
    for (const RequestMetrics& r : requests_) {
      nlohmann::json o = {{"id", r.id},
                          {"priority", r.priority},
                          {"prompt_len", r.prompt_len},
                          {"num_output", r.num_output()},
                          {"arrival_s", r.arrival_s},
                          {"finish_reason", std::string(finish_reason_name(r.finish_reason))},
                          {"num_preemptions", r.num_preemptions}};
      o["ttft_ms"] = r.num_output() > 0 ? nlohmann::json(r.ttft_s() * 1e3) : nlohmann::json();
      auto t = r.tpot_s();
      o["tpot_ms"] = t ? nlohmann::json(*t * 1e3) : nlohmann::json();
      o["e2e_ms"] = r.finish_s >= 0 ? nlohmann::json(r.e2e_s() * 1e3) : nlohmann::json();
      arr.push_back(std::move(o));
    }
    j["requests"] = std::move(arr);
  }
  if (with_steps) {
    nlohmann::json arr = nlohmann::json::array();
    for (const StepMetrics& m : steps_) {
      arr.push_back({{"index", m.index},
                     {"start_s", m.start_s},
                     {"end_s", m.end_s},
                     {"num_tokens", m.num_tokens},
                     {"num_seqs", m.num_seqs},
                     {"num_prefill_tokens", m.num_prefill_tokens},
                     {"num_decode_tokens", m.num_decode_tokens},
                     {"kv_blocks_used", m.kv_blocks_used},
                     {"num_preempted", m.num_preempted},
                     {"plan", m.plan}});
      if (m.replica >= 0) {
        arr.back()["replica"] = m.replica;
        arr.back()["lockstep"] = m.lockstep;
      }
    }
    j["steps"] = std::move(arr);
  }
  return j;
}

void Metrics::write_requests_csv(std::ostream& os) const {
  os << "id,priority,prompt_len,num_output,arrival_s,first_token_s,finish_s,ttft_ms,tpot_ms,"
        "e2e_ms,finish_reason,num_preemptions\n";
  for (const RequestMetrics& r : requests_) {
    os << r.id << ',' << r.priority << ',' << r.prompt_len << ',' << r.num_output() << ','
       << r.arrival_s << ',';
    if (r.num_output() > 0) os << r.first_token_s;
    os << ',';
    if (r.finish_s >= 0) os << r.finish_s;
    os << ',';
    if (r.num_output() > 0) os << r.ttft_s() * 1e3;
    os << ',';
    if (auto t = r.tpot_s()) os << *t * 1e3;
    os << ',';
    if (r.finish_s >= 0) os << r.e2e_s() * 1e3;
    os << ',' << finish_reason_name(r.finish_reason) << ',' << r.num_preemptions << '\n';
  }
}

namespace {
// A CSV field (RFC 4180): quoted, its quotes doubled, when it holds a comma, a quote or a line
// break (plan names do: "dp=2,weights=owner", "sp=2,tp=2").
std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\r\n") == std::string::npos) return v;
  std::string q = "\"";
  for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + '"';
}
}  // namespace

void Metrics::write_steps_csv(std::ostream& os) const {
  os << "index,start_s,end_s,num_tokens,num_seqs,num_prefill_tokens,num_decode_tokens,"
        "kv_blocks_used,num_preempted,replica,lockstep,plan\n";
  for (const StepMetrics& m : steps_)
    os << m.index << ',' << m.start_s << ',' << m.end_s << ',' << m.num_tokens << ','
       << m.num_seqs << ',' << m.num_prefill_tokens << ',' << m.num_decode_tokens << ','
       << m.kv_blocks_used << ',' << m.num_preempted << ',' << m.replica << ',' << int(m.lockstep) << ','
       << csv_field(m.plan) << '\n';
}

}  // namespace loom
