#include "server/bench_serve.h"

#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <ostream>
#include <thread>

#include "core/error.h"
#include "core/json_bounded.h"
#include "core/rng.h"

namespace loom::server {

using nlohmann::json;

namespace {

using SteadyClock = std::chrono::steady_clock;

// A server's answers are untrusted input too: parsed bounded (core/json_bounded.h), discarded
// when not JSON within the limits.
json parse_answer(std::string_view text) {
  try {
    return parse_json_bounded(text, "answer", kRequestJsonLimits);
  } catch (const Error&) {
    return json(json::value_t::discarded);
  }
}

double seconds_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

json dist_json(const Distribution& d) { return to_json(d); }

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

void progress_bar(int64_t done, int64_t total) {
  const int width = 30;
  const int filled = total > 0 ? int(double(done) / double(total) * width) : width;
  std::fprintf(stderr, "\r[%s%s] %lld/%lld requests", std::string(size_t(filled), '#').c_str(),
               std::string(size_t(width - filled), '.').c_str(), (long long)done, (long long)total);
  if (done >= total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

// Counting semaphore for max_concurrency (C++20's needs a compile-time bound).
class Slots {
 public:
  explicit Slots(int n) : n_(n) {}
  void acquire() {
    if (n_ <= 0) return;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return used_ < n_; });
    ++used_;
  }
  void release() {
    if (n_ <= 0) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --used_;
    }
    cv_.notify_one();
  }

 private:
  int n_;
  int used_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
};

void send_one(const std::string& url, const std::string& model, const std::vector<int32_t>& prompt,
              double timeout_s, SteadyClock::time_point t0, BenchRequestResult* r, const std::string& tier = "") {
  httplib::Client cli(url);
  cli.set_connection_timeout(10, 0);
  cli.set_read_timeout(time_t(timeout_s), 0);
  cli.set_write_timeout(30, 0);
  json body = {{"model", model},
               {"prompt", prompt},
               {"max_tokens", r->max_tokens},
               {"ignore_eos", true},
               {"temperature", 0.0},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (!tier.empty()) body["tier"] = tier;
  const std::string text = body.dump();

  SseParser parser;
  double last_chunk = -1;
  bool saw_done = false;
  int usage_tokens = -1;
  std::string error;
  std::string raw_error_body;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Accept", "text/event-stream"}};
  req.body = text;
  req.set_header("Content-Type", "application/json");
  int status = 0;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      raw_error_body.append(data, n);
      return true;
    }
    const double now = seconds_since(t0);
    parser.feed(data, n, [&](const std::string& payload) {
      if (payload == "[DONE]") {
        saw_done = true;
        return;
      }
      json j = parse_answer(payload);
      if (j.is_discarded()) {
        error = "unparsable chunk: " + text_excerpt(payload, 200);
        return;
      }
      if (j.contains("error")) {
        const json& e = j["error"];
        error = e.is_object() && e.contains("message") && e["message"].is_string()
                    ? text_excerpt(e["message"].get<std::string>(), 1000)
                    : json_excerpt(e, 200);
        return;
      }
      if (j.contains("usage") && j["usage"].is_object())
        usage_tokens = j["usage"].value("completion_tokens", -1);
      if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
        const json& c = j["choices"][0];
        std::string t;
        if (c.contains("text") && c["text"].is_string()) t = c["text"].get<std::string>();
        else if (c.contains("delta") && c["delta"].contains("content") && c["delta"]["content"].is_string())
          t = c["delta"]["content"].get<std::string>();
        if (!t.empty()) {
          if (r->ttft_s < 0) r->ttft_s = now - r->sent_s;
          else r->itl_s.push_back(now - last_chunk);
          last_chunk = now;
          ++r->num_chunks;
        }
      }
    });
    return true;
  };
  r->sent_s = seconds_since(t0);
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool ok = cli.send(req, res, err);
  r->latency_s = seconds_since(t0) - r->sent_s;
  r->http_status = status;
  if (!ok) {
    r->error = "HTTP request failed: " + httplib::to_string(err);
  } else if (status != 200) {
    const json j = parse_answer(raw_error_body);
    const bool has_message = j.is_object() && j.contains("error") && j["error"].is_object() &&
                             j["error"].contains("message") && j["error"]["message"].is_string();
    r->error = cat("HTTP ", status, ": ",
                   has_message ? text_excerpt(j["error"]["message"].get<std::string>(), 1000)
                               : text_excerpt(raw_error_body, 200));
  } else if (!error.empty()) {
    r->error = error;
  } else if (!saw_done) {
    r->error = "the stream ended without [DONE]";
  } else {
    r->success = true;
    r->output_tokens = usage_tokens >= 0 ? usage_tokens : r->num_chunks;
    if (r->ttft_s < 0) r->ttft_s = r->latency_s;  // no text at all: the first byte is the end
  }
}

}  // namespace

std::optional<double> BenchRequestResult::tpot_s() const {
  if (!success || output_tokens < 2) return std::nullopt;
  return (latency_s - ttft_s) / double(output_tokens - 1);
}

size_t SseParser::next_event_end(size_t* after) const {
  // Events end at a blank line: "\n\n" or "\r\n\r\n" (or mixed).
  for (size_t i = 0; i < buf_.size(); ++i) {
    if (buf_[i] != '\n') continue;
    size_t j = i + 1;
    if (j < buf_.size() && buf_[j] == '\r') ++j;
    if (j < buf_.size() && buf_[j] == '\n') {
      *after = j + 1;
      return i;
    }
  }
  return std::string::npos;
}

bool SseParser::event_data(const std::string& ev, std::string* payload) {
  bool any = false;
  size_t start = 0;
  while (start <= ev.size()) {
    size_t end = ev.find('\n', start);
    if (end == std::string::npos) end = ev.size();
    std::string line = ev.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("data:", 0) == 0) {
      std::string v = line.substr(5);
      if (!v.empty() && v[0] == ' ') v.erase(0, 1);
      if (any) *payload += '\n';
      *payload += v;
      any = true;
    }
    start = end + 1;
  }
  return any;
}

BenchServeReport summarize_bench(std::vector<BenchRequestResult> results, double duration_s, double slo_ttft_ms,
                                 double slo_tpot_ms) {
  BenchServeReport rep;
  rep.duration_s = duration_s;
  rep.slo_ttft_ms = slo_ttft_ms;
  rep.slo_tpot_ms = slo_tpot_ms;
  std::vector<double> ttft, tpot, itl, e2e;
  int64_t good = 0;
  for (const auto& r : results) {
    if (r.clipped) ++rep.clipped;
    if (!r.success) {
      ++rep.failed;
      continue;
    }
    ++rep.completed;
    rep.total_input_tokens += r.prompt_len;
    rep.total_output_tokens += r.output_tokens;
    ttft.push_back(r.ttft_s * 1e3);
    e2e.push_back(r.latency_s * 1e3);
    const std::optional<double> t = r.tpot_s();
    if (t) tpot.push_back(*t * 1e3);
    for (double g : r.itl_s) itl.push_back(g * 1e3);
    const double tpot_ms = t ? *t * 1e3 : 0.0;  // vLLM: 0 for one-token outputs
    const bool ok = (slo_ttft_ms <= 0 || r.ttft_s * 1e3 <= slo_ttft_ms) && (slo_tpot_ms <= 0 || tpot_ms <= slo_tpot_ms);
    if (ok) ++good;
  }
  rep.requests = std::move(results);
  if (duration_s > 0) {
    rep.request_throughput = double(rep.completed) / duration_s;
    rep.output_throughput = double(rep.total_output_tokens) / duration_s;
    rep.total_token_throughput = double(rep.total_input_tokens + rep.total_output_tokens) / duration_s;
  }
  if (slo_ttft_ms > 0 || slo_tpot_ms > 0) {
    rep.good = good;
    rep.goodput = duration_s > 0 ? double(good) / duration_s : 0.0;
  }
  rep.ttft_ms = summarize(ttft);
  rep.tpot_ms = summarize(tpot);
  rep.itl_ms = summarize(itl);
  rep.e2e_ms = summarize(e2e);
  return rep;
}

json BenchServeReport::to_json(bool with_requests) const {
  json s = {{"model", model},
            {"num_requests", int64_t(requests.size())},
            {"completed", completed},
            {"failed", failed},
            {"clipped", clipped},
            {"duration_s", duration_s},
            {"total_input_tokens", total_input_tokens},
            {"total_output_tokens", total_output_tokens},
            {"request_throughput", request_throughput},
            {"output_throughput", output_throughput},
            {"total_token_throughput", total_token_throughput},
            {"slo_ttft_ms", slo_ttft_ms},
            {"slo_tpot_ms", slo_tpot_ms},
            {"good_requests", good ? json(*good) : json(nullptr)},
            {"request_goodput", goodput ? json(*goodput) : json(nullptr)},
            {"ttft_ms", dist_json(ttft_ms)},
            {"tpot_ms", dist_json(tpot_ms)},
            {"itl_ms", dist_json(itl_ms)},
            {"e2e_latency_ms", dist_json(e2e_ms)}};
  json out = {{"summary", s}};
  if (!tiers.empty()) {
    json tj = json::array();
    for (const auto& t : tiers)
      tj.push_back({{"tier", t.name}, {"requests", t.requests}, {"slo_met", t.met}, {"goodput_rps", t.goodput}});
    out["tiers"] = tj;
  }
  if (with_requests) {
    json rs = json::array();
    for (const auto& r : requests) {
      json x = {{"index", r.index},
                {"prompt_len", r.prompt_len},
                {"max_tokens", r.max_tokens},
                {"success", r.success},
                {"http_status", r.http_status},
                {"scheduled_s", r.scheduled_s},
                {"sent_s", r.sent_s},
                {"ttft_ms", r.success ? json(r.ttft_s * 1e3) : json(nullptr)},
                {"e2e_ms", r.success ? json(r.latency_s * 1e3) : json(nullptr)},
                {"output_tokens", r.output_tokens},
                {"num_chunks", r.num_chunks}};
      const auto t = r.tpot_s();
      x["tpot_ms"] = t ? json(*t * 1e3) : json(nullptr);
      if (!r.error.empty()) x["error"] = r.error;
      rs.push_back(x);
    }
    out["requests"] = rs;
  }
  return out;
}

void BenchServeReport::write_csv(std::ostream& os) const {
  os << "index,scheduled_s,sent_s,prompt_len,max_tokens,output_tokens,success,http_status,ttft_ms,tpot_ms,e2e_ms,"
        "num_chunks,error\n";
  for (const auto& r : requests) {
    const auto t = r.tpot_s();
    std::string err = r.error;
    std::replace(err.begin(), err.end(), '"', '\'');
    std::replace(err.begin(), err.end(), '\n', ' ');
    os << r.index << ',' << fmt("%.6f", r.scheduled_s) << ',' << fmt("%.6f", r.sent_s) << ',' << r.prompt_len << ','
       << r.max_tokens << ',' << r.output_tokens << ',' << (r.success ? 1 : 0) << ',' << r.http_status << ','
       << (r.success ? fmt("%.3f", r.ttft_s * 1e3) : "") << ',' << (t ? fmt("%.3f", *t * 1e3) : "") << ','
       << (r.success ? fmt("%.3f", r.latency_s * 1e3) : "") << ',' << r.num_chunks << ",\"" << err << "\"\n";
  }
}

std::string BenchServeReport::summary_text() const {
  std::string o;
  auto line = [&](const std::string& k, const std::string& v) {
    std::string key = k;
    if (key.size() < 42) key.resize(42, ' ');
    o += key + v + "\n";
  };
  auto dist = [&](const char* title, const char* name, const Distribution& d) {
    std::string t = std::string(" ") + title + " ";
    const size_t pad = t.size() < 50 ? 50 - t.size() : 0;
    o += std::string(pad / 2, '-') + t + std::string(pad - pad / 2, '-') + "\n";
    line(cat("Mean ", name, " (ms):"), fmt("%.2f", d.mean));
    line(cat("Median ", name, " (ms):"), fmt("%.2f", d.p50));
    line(cat("P90 ", name, " (ms):"), fmt("%.2f", d.p90));
    line(cat("P99 ", name, " (ms):"), fmt("%.2f", d.p99));
  };
  o += "============ Serving Benchmark Result ============\n";
  line("Successful requests:", std::to_string(completed));
  line("Failed requests:", std::to_string(failed));
  // What the benchmark did to the workload: requests over the server's max_model_len had their
  // prompts cut (outputs kept: clip_to_context).
  if (clipped > 0) line("Clipped requests (prompts cut):", std::to_string(clipped));
  line("Benchmark duration (s):", fmt("%.2f", duration_s));
  line("Total input tokens:", std::to_string(total_input_tokens));
  line("Total generated tokens:", std::to_string(total_output_tokens));
  line("Request throughput (req/s):", fmt("%.2f", request_throughput));
  line("Output token throughput (tok/s):", fmt("%.2f", output_throughput));
  line("Total token throughput (tok/s):", fmt("%.2f", total_token_throughput));
  if (goodput) {
    line("Request goodput (req/s):", fmt("%.2f", *goodput));
    line("Requests meeting the SLOs:", cat(*good, " (TTFT <= ", slo_ttft_ms, " ms, TPOT <= ", slo_tpot_ms, " ms)"));
  }
  for (const auto& t : tiers)
    line(cat("Tier ", t.name, " goodput (req/s):"), fmt("%.2f", t.goodput) + cat(" (", t.met, " of ", t.requests, ")"));
  dist("Time to First Token", "TTFT", ttft_ms);
  dist("Time per Output Token (excl. 1st token)", "TPOT", tpot_ms);
  dist("Inter-token Latency", "ITL", itl_ms);
  dist("End-to-end Latency", "E2EL", e2e_ms);
  o += "==================================================\n";
  return o;
}

BenchServeReport run_bench_serve(const BenchServeOptions& o) {
  if (o.trace.empty()) fail("the trace has no requests");
  // What the server serves, and its context limit (vLLM's and loom's model cards say).
  std::string model = o.model;
  int max_model_len = 0;
  int vocab_size = 0;
  {
    httplib::Client cli(o.url);
    if (!cli.is_valid()) fail("--url ", o.url, " is not a valid http:// URL");
    cli.set_connection_timeout(10, 0);
    cli.set_read_timeout(30, 0);
    auto res = cli.Get("/v1/models");
    if (!res) fail("cannot reach ", o.url, "/v1/models: ", httplib::to_string(res.error()));
    if (res->status != 200) fail(o.url, "/v1/models answered HTTP ", res->status);
    json j = parse_answer(res->body);
    if (j.is_discarded() || !j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty())
      fail(o.url, "/v1/models did not list a model");
    const json* card = &j["data"][0];
    for (const json& c : j["data"])
      if (!model.empty() && c.value("id", "") == model) card = &c;
    if (model.empty()) model = card->value("id", "");
    if (card->contains("max_model_len") && (*card)["max_model_len"].is_number_integer())
      max_model_len = (*card)["max_model_len"].get<int>();
    if (card->contains("vocab_size") && (*card)["vocab_size"].is_number_integer())
      vocab_size = (*card)["vocab_size"].get<int>();
  }
  // Token ids of synthetic prompts: the upper half of the vocabulary (past byte and control
  // tokens in the usual layouts); 1000 ids when the server does not say its vocabulary size.
  const int hi = vocab_size > 0 ? vocab_size : 1000;
  const int lo = std::min(hi - 1, std::max(hi / 2, 3));

  const int64_t n = int64_t(o.trace.size());
  std::vector<BenchRequestResult> results(static_cast<size_t>(n));
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(n));
  Rng rng(o.seed);
  const std::vector<int> tier_of = cluster::assign_tiers(size_t(n), o.tier_weights);
  const double t_first = o.trace.front().arrival_s;
  for (int64_t i = 0; i < n; ++i) {
    const TraceRequest& t = o.trace[size_t(i)];
    BenchRequestResult& r = results[size_t(i)];
    r.index = int(i);
    r.tier = o.tiers.size() > 0 ? tier_of[size_t(i)] : -1;
    r.scheduled_s = std::max(0.0, t.arrival_s - t_first);
    int p = std::max(1, t.prompt_len), out = std::max(1, t.output_len);
    if (max_model_len >= 2 && clip_to_context(&p, &out, max_model_len)) r.clipped = true;
    r.prompt_len = p;
    r.max_tokens = out;
    prompts[size_t(i)].resize(size_t(p));
    for (auto& id : prompts[size_t(i)]) id = lo + int32_t(rng.next_u64() % uint64_t(hi - lo));
  }

  const bool bar = o.progress && ::isatty(2);
  std::atomic<int64_t> done{0};
  Slots slots(o.max_concurrency);
  std::vector<std::thread> threads;
  threads.reserve(size_t(n));
  const auto t0 = SteadyClock::now();
  int64_t shown = -1;
  for (int64_t i = 0; i < n; ++i) {
    BenchRequestResult* r = &results[size_t(i)];
    const auto due = t0 + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(r->scheduled_s));
    // Sleep until due, redrawing the bar meanwhile.
    while (SteadyClock::now() < due) {
      std::this_thread::sleep_until(std::min(due, SteadyClock::now() + std::chrono::milliseconds(200)));
      if (bar && done.load() != shown) progress_bar(shown = done.load(), n);
    }
    slots.acquire();
    threads.emplace_back([&, r, i] {
      try {
        send_one(o.url, model, prompts[size_t(i)], o.request_timeout_s, t0, r,
                 r->tier >= 0 ? o.tiers[size_t(r->tier)].name : std::string());
      } catch (const std::exception& e) {
        r->error = describe_exception(e);
      }
      slots.release();
      done.fetch_add(1);
    });
  }
  while (bar && done.load() < n) {
    if (done.load() != shown) progress_bar(shown = done.load(), n);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  for (auto& t : threads) t.join();
  if (bar) progress_bar(n, n);
  double end = 0;
  for (const auto& r : results) end = std::max(end, r.sent_s + std::max(0.0, r.latency_s));
  BenchServeReport rep = summarize_bench(std::move(results), end, o.slo_ttft_ms, o.slo_tpot_ms);
  rep.model = model;
  // Per-tier goodput (Nitsum 1): completed requests meeting both their tier's targets.
  for (size_t t = 0; t < o.tiers.size(); ++t) {
    BenchTierResult tr;
    tr.name = o.tiers[t].name;
    for (const auto& r : rep.requests) {
      if (r.tier != int(t)) continue;
      ++tr.requests;
      if (r.success && r.ttft_s >= 0 && o.tiers[t].met(r.ttft_s, r.tpot_s().value_or(0.0))) ++tr.met;
    }
    tr.goodput = rep.duration_s > 0 ? double(tr.met) / rep.duration_s : 0.0;
    rep.tiers.push_back(tr);
  }
  return rep;
}

}  // namespace loom::server
