#include "server/serving_engine.h"

#include <algorithm>
#include <cstdio>
#include <exception>

#include "core/error.h"
#include "core/log.h"

namespace loom::server {

// ---- RequestStream ----

bool RequestStream::next(Update* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!fresh_ && !finished_) cv_.wait_for(lock, timeout, [&] { return fresh_ || finished_; });
  if (!fresh_ && !finished_) return false;
  out->text.swap(pending_);
  pending_.clear();
  out->logprobs.swap(pending_lp_);
  pending_lp_.clear();
  out->num_output = num_output_;
  out->finished = finished_;
  out->reason = reason_;
  out->detail = detail_;
  fresh_ = false;
  return true;
}

void RequestStream::push(std::string text, int num_output, std::optional<TokenLogprobs> lp) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    pending_ += text;
    if (lp) pending_lp_.push_back(std::move(*lp));
    num_output_ = num_output;
    fresh_ = true;
  }
  cv_.notify_all();
}

void RequestStream::finish(std::string text, int num_output, FinishReason reason, std::string detail,
                           std::vector<TokenLogprobs> lps) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    pending_ += text;
    for (TokenLogprobs& l : lps) pending_lp_.push_back(std::move(l));
    num_output_ = num_output;
    finished_ = true;
    fresh_ = true;
    reason_ = reason;
    detail_ = std::move(detail);
  }
  cv_.notify_all();
}

// ---- ServingEngine ----

ServingEngine::ServingEngine(EngineHandle& engine, const Tokenizer& tok, std::vector<TokenId> eos_ids,
                             ServingOptions options)
    : engine_(engine), tok_(tok), eos_ids_(std::move(eos_ids)), options_(std::move(options)) {
  tier_finished_.assign(options_.tiers.size(), 0);
  tier_met_.assign(options_.tiers.size(), 0);
  start_s_ = engine_.clock().now();
  if (options_.max_queue < 1) fail("--max-queue must be >= 1, got ", options_.max_queue);
  if (!(options_.step_timeout_s > 0) || !(options_.heartbeat_timeout_s > 0) || !(options_.heartbeat_period_s > 0))
    fail("the engine's health timeouts must be > 0 seconds (step ", options_.step_timeout_s, ", heartbeat ",
         options_.heartbeat_timeout_s, ", period ", options_.heartbeat_period_s, ")");
  LiveLoop& loop = engine_.loop();
  loop.on_token = [this](const TokenEvent& ev) { on_token(ev); };
  loop.on_finish = [this](const Sequence& s) { on_finish(s); };
  // The server records the plan the engine's plan control chose (the loop's StepPlanner).
  loop.on_batch = [this](const StepBatch& b) { on_batch(b); };
  loop.set_stop_check([this](const Sequence& s) { return stop_check(s); });
  stats_.kv_blocks_total = engine_.num_kv_blocks();
  out_thread_ = std::thread([this] { output_loop(); });
  thread_ = std::thread([this] { run(); });
}

ServingEngine::~ServingEngine() { shutdown(); }

void ServingEngine::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
    LiveLoop& loop = engine_.loop();
    loop.on_token = nullptr;
    loop.on_finish = nullptr;
    loop.on_batch = nullptr;
    loop.set_stop_check(nullptr);
  }
  // The output thread finishes what the engine thread queued, then ends.
  {
    std::lock_guard<std::mutex> lock(out_mu_);
    out_quit_ = true;
  }
  out_cv_.notify_all();
  if (out_thread_.joinable()) out_thread_.join();
}

std::shared_ptr<RequestStream> ServingEngine::submit(Request r, int tier) {
  std::shared_ptr<RequestStream> st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!dead_.empty()) throw OverloadError{"the engine has failed and the server is shutting down: " + dead_, 503};
    if (stop_) throw OverloadError{"the server is shutting down", 503};
    const int waiting = std::max(0, num_live_ - stats_.num_running);
    if (waiting >= options_.max_queue) {
      overload_total_.fetch_add(1);
      throw OverloadError{cat("the server is overloaded: ", waiting, " requests are waiting (--max-queue ",
                              options_.max_queue, "); retry later")};
    }
    r.id = next_id_.fetch_add(1);
    r.arrival_s = engine_.clock().now();
    r.tier = tier;
    r.stop.eos_ids = eos_ids_;
    st = std::make_shared<RequestStream>(r.id, r.prompt_len());
    st->tier = tier;
    ++num_live_;
    inbox_.emplace_back(std::move(r), st);
  }
  cv_.notify_all();
  return st;
}

void ServingEngine::cancel(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_all();
}

double ServingEngine::health_now() const {
  if (options_.health_clock) return options_.health_clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void ServingEngine::set_busy(int kind) {
  if (kind < 0) {
    busy_since_.store(-1.0);
    return;
  }
  busy_kind_.store(kind);
  busy_since_.store(health_now());
}

Health ServingEngine::health() const {
  Health h;
  const std::string dead = dead_reason();
  if (!dead.empty()) return Health{false, dead};
  const double since = busy_since_.load();
  if (since < 0) return h;
  const bool beat = busy_kind_.load() == kBusyHeartbeat;
  const double limit = beat ? options_.heartbeat_timeout_s : options_.step_timeout_s;
  const double in = health_now() - since;
  if (in > limit) {
    h.ok = false;
    h.error = beat ? cat("the engine is stalled: a heartbeat to its ranks has not come back for ", in,
                         " s (limit ", limit, " s): a rank has stopped or is stuck")
                   : cat("the engine is stalled: one step has run for ", in, " s (limit ", limit,
                         " s, --stall-timeout)");
  }
  return h;
}

void ServingEngine::run() {
  LiveLoop& loop = engine_.loop();
  bool busy = false;
  int consecutive_faults = 0;
  const auto period = std::chrono::duration<double>(options_.heartbeat_period_s);
  for (;;) {
    std::vector<std::pair<Request, std::shared_ptr<RequestStream>>> in;
    std::vector<RequestId> cancels;
    bool beat = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!busy) {
        // Idle: a heartbeat every period while nothing comes (see Health).
        beat = !cv_.wait_for(lock, period, [&] { return stop_ || !inbox_.empty() || !cancels_.empty(); });
      }
      if (stop_) break;
      in.swap(inbox_);
      cancels.swap(cancels_);
    }
    bool faulted = false;
    if (beat) {
      set_busy(kBusyHeartbeat);
      try {
        engine_.heartbeat();
        heartbeats_.fetch_add(1);
      } catch (const std::exception& e) {
        faulted = true;
        log_warn("serve: heartbeat failed: ", describe_exception(e));
      }
      set_busy(-1);
    }
    for (auto& [r, st] : in) {
      Live l;
      l.stop_at = std::make_shared<std::atomic<int>>(-1);
      l.arrival_s = r.arrival_s;
      l.prompt_len = r.prompt_len();
      l.tier = st->tier;
      OutEvent ev;
      ev.kind = OutEvent::kStart;
      ev.id = r.id;
      ev.stream = st;
      ev.stops = r.stop.stop_strings;
      ev.ignore_eos = r.stop.ignore_eos;
      ev.stop_at = l.stop_at;
      post(std::move(ev));
      live_.emplace(r.id, std::move(l));
      loop.submit(std::move(r));
    }
    for (RequestId id : cancels) loop.cancel(id);
    bool ran = false;
    if (!beat || !in.empty() || !cancels.empty()) {
      set_busy(kBusyStep);
      try {
        ran = loop.step();
      } catch (const std::exception& e) {
        faulted = true;
        fail_all(describe_exception(e));
      } catch (...) {
        faulted = true;
        fail_all("an unknown failure");
      }
      set_busy(-1);
    }
    flush();
    publish();
    busy = !loop.idle();
    // Only a step that ran clean ends a series of faults (an empty step between two failing
    // requests proves nothing).
    if (faulted)
      ++consecutive_faults;
    else if (ran)
      consecutive_faults = 0;
    std::string dead = engine_.fault();
    if (dead.empty() && consecutive_faults >= options_.max_consecutive_faults)
      dead = cat(consecutive_faults, " engine steps in a row failed");
    if (!dead.empty()) {
      log_line(LogLevel::Error, cat("serve: the engine has failed, failing every request and shutting down: ", dead));
      fail_all(dead);
      flush();
      {
        std::lock_guard<std::mutex> lock(mu_);
        dead_ = dead;
        for (auto& [r, st] : inbox_) {
          st->finish("", 0, FinishReason::kError, "internal error in the engine: " + dead);
          --num_live_;
        }
        inbox_.clear();
      }
      publish();
      if (options_.on_dead) options_.on_dead(dead);
      break;
    }
    if (busy && (!ran || consecutive_faults > 0)) {
      // Nothing could run (or the loop keeps failing): do not spin on the core the engine's
      // workers need; new submissions and cancellations still wake us.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(consecutive_faults > 0 ? 10 : 1),
                   [&] { return stop_ || !inbox_.empty() || !cancels_.empty(); });
    }
  }
  // Shutting down: whatever is still live ends as aborted.
  for (auto it = live_.begin(); it != live_.end();) {
    auto next = std::next(it);
    finish_live(it, it->second.num_tokens, FinishReason::kAbort, "the server is shutting down");
    it = next;
  }
  flush();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [r, st] : inbox_) st->finish("", 0, FinishReason::kAbort, "the server is shutting down");
  inbox_.clear();
}

void ServingEngine::post(OutEvent ev) { out_pending_.push_back(std::move(ev)); }

void ServingEngine::flush() {
  if (out_pending_.empty()) return;
  {
    std::lock_guard<std::mutex> lock(out_mu_);
    for (OutEvent& ev : out_pending_) out_q_.push_back(std::move(ev));
  }
  out_pending_.clear();
  out_cv_.notify_one();
}

void ServingEngine::output_loop() {
  std::deque<OutEvent> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(out_mu_);
      out_cv_.wait(lock, [&] { return out_quit_ || !out_q_.empty(); });
      if (out_q_.empty() && out_quit_) break;
      batch.swap(out_q_);
    }
    for (OutEvent& ev : batch) {
      try {
        handle(ev);
      } catch (const std::exception& e) {
        log_warn("serve: streaming request ", ev.id, " failed: ", describe_exception(e));
      }
    }
    batch.clear();
  }
  // Streams still open (cannot happen after the engine thread's shutdown path): end them.
  for (auto& [id, o] : out_) o.stream->finish(o.filter.take_all(), o.num_tokens, FinishReason::kAbort,
                                              "the server is shutting down");
  out_.clear();
}

void ServingEngine::handle(OutEvent& ev) {
  if (options_.output_hook)
    options_.output_hook(ev.kind == OutEvent::kStart ? "start" : ev.kind == OutEvent::kToken ? "token" : "finish");
  if (ev.kind == OutEvent::kStart) {
    Out o;
    o.stream = std::move(ev.stream);
    o.decoder = std::make_unique<StreamDecoder>(tok_);
    o.filter = StopFilter(std::move(ev.stops));
    o.stop_at = std::move(ev.stop_at);
    o.ignore_eos = ev.ignore_eos;
    out_.emplace(ev.id, std::move(o));
    return;
  }
  auto it = out_.find(ev.id);
  if (it == out_.end()) return;
  Out& o = it->second;
  if (ev.kind == OutEvent::kFinish) {
    if (!o.done) {
      // The eos token that ended a request is never decoded (it is not text). The decoder's
      // held-back bytes of an incomplete UTF-8 sequence come out as U+FFFD.
      if (!o.filter.stopped()) o.filter.append(o.decoder->flush());
      o.stream->finish(o.filter.take_all(), ev.num_output, ev.reason, std::move(ev.detail), std::move(o.final_lp));
    }
    out_.erase(it);
    return;
  }
  // A token. After a stop string matched, the engine's extra tokens are nobody's.
  if (o.done) return;
  ++o.num_tokens;
  const bool eos = ev.finished && ev.reason == FinishReason::kStop && !o.ignore_eos &&
                   std::find(eos_ids_.begin(), eos_ids_.end(), ev.token) != eos_ids_.end();
  if (!eos) o.filter.append(o.decoder->push(ev.token));
  if (o.filter.stopped()) {
    // A stop string: the request ends here, through this token; the engine stops it at its next
    // stop check.
    o.stop_at->store(o.num_tokens);
    std::vector<TokenLogprobs> lps = std::move(o.final_lp);
    if (ev.logprobs) lps.push_back(std::move(*ev.logprobs));
    o.stream->finish(o.filter.take_all(), o.num_tokens, FinishReason::kStop, "stop string", std::move(lps));
    o.done = true;
    return;
  }
  if (ev.finished) {  // the kFinish that follows delivers the rest
    // The eos token that ended the request is not text: no logprobs entry for it.
    if (ev.logprobs && !eos) o.final_lp.push_back(std::move(*ev.logprobs));
    return;
  }
  std::string ready = o.filter.take_ready();
  // A token's logprobs go out with its text, or alone when its text is held back.
  if (!ready.empty() || ev.logprobs) o.stream->push(std::move(ready), o.num_tokens, std::move(ev.logprobs));
}

// Engine thread, after each token: a stop string matched (the output thread said so).
bool ServingEngine::stop_check(const Sequence& s) {
  auto it = live_.find(s.id());
  return it != live_.end() && it->second.stop_at->load(std::memory_order_relaxed) >= 0;
}

void ServingEngine::on_batch(const StepBatch& b) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.last_plan = b.plan.empty() ? "default" : b.plan;
    stats_.num_running = engine_.loop().stats().num_running;
  }
  if (options_.fault_hook) options_.fault_hook(b);
}

void ServingEngine::on_token(const TokenEvent& ev) {
  auto it = live_.find(ev.seq_id);
  if (it == live_.end()) return;
  Live& l = it->second;
  ++l.num_tokens;
  const double now = engine_.clock().now();
  {
    std::lock_guard<std::mutex> lock(metrics_mu_);
    if (l.num_tokens == 1) {
      l.first_token_s = now;
      ttft_.observe(now - l.arrival_s);
      prompt_tokens_total_ += l.prompt_len;
    } else {
      itl_.observe(now - l.last_token_s);
    }
    ++generation_tokens_total_;
  }
  l.last_token_s = now;
  OutEvent out;
  out.kind = OutEvent::kToken;
  out.id = ev.seq_id;
  out.token = ev.token;
  out.finished = ev.finished;
  out.reason = ev.reason;
  out.logprobs = ev.logprobs;
  post(std::move(out));
}

void ServingEngine::on_finish(const Sequence& s) {
  auto it = live_.find(s.id());
  if (it == live_.end()) return;
  Live& l = it->second;
  {
    std::lock_guard<std::mutex> lock(metrics_mu_);
    switch (s.finish_reason) {
      case FinishReason::kStop: ++success_stop_; break;
      case FinishReason::kLength: ++success_length_; break;
      case FinishReason::kAbort: ++success_abort_; break;
      case FinishReason::kRejected: ++failed_rejected_; break;
      default: ++failed_error_; break;
    }
    if (s.finish_reason == FinishReason::kStop || s.finish_reason == FinishReason::kLength)
      e2e_.observe(engine_.clock().now() - l.arrival_s);
    // Per-tier goodput (Nitsum 1): a finished request counts when it met both targets.
    if (l.tier >= 0 && size_t(l.tier) < tier_finished_.size() &&
        (s.finish_reason == FinishReason::kStop || s.finish_reason == FinishReason::kLength)) {
      ++tier_finished_[size_t(l.tier)];
      const double ttft = l.first_token_s >= 0 ? l.first_token_s - l.arrival_s : 1e30;
      const double tpot = l.num_tokens > 1 ? (l.last_token_s - l.first_token_s) / (l.num_tokens - 1) : 0.0;
      if (options_.tiers[size_t(l.tier)].met(ttft, tpot)) ++tier_met_[size_t(l.tier)];
    }
  }
  finish_live(it, s.num_output(), s.finish_reason, s.finish_detail);
}

void ServingEngine::finish_live(std::unordered_map<RequestId, Live>::iterator it, int num_output,
                                FinishReason reason, std::string detail) {
  OutEvent ev;
  ev.kind = OutEvent::kFinish;
  ev.id = it->first;
  ev.num_output = num_output;
  ev.reason = reason;
  ev.detail = std::move(detail);
  post(std::move(ev));
  live_.erase(it);
  std::lock_guard<std::mutex> lock(mu_);
  --num_live_;
}

void ServingEngine::fail_all(const std::string& what) {
  if (!live_.empty()) log_warn("serve: engine step failed, failing ", live_.size(), " live requests: ", what);
  LiveLoop& loop = engine_.loop();
  for (auto it = live_.begin(); it != live_.end();) {
    auto next = std::next(it);
    const RequestId id = it->first;
    loop.cancel(id);  // frees its KV blocks at the next step
    {
      std::lock_guard<std::mutex> lock(metrics_mu_);
      ++failed_error_;
    }
    finish_live(it, it->second.num_tokens, FinishReason::kError, cat("internal error in the engine: ", what));
    it = next;
  }
}

void ServingEngine::publish() {
  const LoopStats ls = engine_.loop().stats();
  std::lock_guard<std::mutex> lock(mu_);
  stats_.num_running = ls.num_running;
  stats_.num_waiting = ls.num_waiting + int(inbox_.size());
  stats_.num_live = num_live_;
  stats_.kv_blocks_used = ls.kv_blocks_used;
  stats_.kv_blocks_total = engine_.num_kv_blocks();
  stats_.num_preemptions = ls.num_preemptions;
  stats_.num_steps = ls.num_steps;
  stats_.plans = engine_.plan_stats();
}

std::string ServingEngine::dead_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dead_;
}

EngineStats ServingEngine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineStats s = stats_;
  s.num_live = num_live_;
  // One consistent picture from one snapshot: every live request is running or waiting (those
  // not yet handed to the scheduler are waiting). Taking the scheduler's waiting count from an
  // older snapshot than its running count showed 40 running + 39 waiting with 40 live at the
  // start of a burst (issue 19, defect 11).
  s.num_running = std::min(s.num_running, s.num_live);
  s.num_waiting = s.num_live - s.num_running;
  {
    std::lock_guard<std::mutex> mlock(metrics_mu_);
    s.prompt_tokens_total = prompt_tokens_total_;
    s.generation_tokens_total = generation_tokens_total_;
  }
  return s;
}

std::string stats_log_line(const EngineStats& before, const EngineStats& now, double interval_s) {
  const int64_t prompt = now.prompt_tokens_total - before.prompt_tokens_total;
  const int64_t gen = now.generation_tokens_total - before.generation_tokens_total;
  if (prompt == 0 && gen == 0 && now.num_live == 0) return "";
  const double dt = interval_s > 0 ? interval_s : 1.0;
  const double usage = now.kv_blocks_total > 0 ? 100.0 * now.kv_blocks_used / now.kv_blocks_total : 0.0;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "avg prompt throughput: %.1f tokens/s, avg generation throughput: %.1f tokens/s, running: %d reqs, "
                "waiting: %d reqs, KV cache usage: %.1f%%, plan: %s",
                double(prompt) / dt, double(gen) / dt, now.num_running, now.num_waiting, usage,
                now.last_plan.c_str());
  return buf;
}

std::string ServingEngine::render_metrics() const {
  const EngineStats st = stats();
  const std::string model = "model_name=\"" + prom_escape(options_.model_name) + "\"";
  std::string o;
  auto gauge = [&](const std::string& name, const std::string& help, double v) {
    o += "# HELP " + name + " " + help + "\n# TYPE " + name + " gauge\n";
    o += name + "{" + model + "} " + prom_number(v) + "\n";
  };
  auto counter = [&](const std::string& name, const std::string& help,
                     const std::vector<std::pair<std::string, int64_t>>& series) {
    o += "# HELP " + name + " " + help + "\n# TYPE " + name + " counter\n";
    for (const auto& [labels, v] : series)
      o += name + "{" + model + (labels.empty() ? "" : "," + labels) + "} " + std::to_string(v) + "\n";
  };
  const double usage = st.kv_blocks_total > 0 ? double(st.kv_blocks_used) / double(st.kv_blocks_total) : 0.0;
  gauge("vllm:num_requests_running", "Number of requests running (holding KV blocks).", st.num_running);
  gauge("vllm:num_requests_waiting", "Number of requests waiting to be scheduled.", st.num_waiting);
  gauge("vllm:kv_cache_usage_perc", "KV-cache usage: fraction of blocks in use (1 = full).", usage);
  gauge("vllm:gpu_cache_usage_perc", "KV-cache usage (older vLLM name of vllm:kv_cache_usage_perc).", usage);
  {
    std::lock_guard<std::mutex> lock(metrics_mu_);
    counter("vllm:prompt_tokens_total", "Prefill tokens processed.", {{"", prompt_tokens_total_}});
    counter("vllm:generation_tokens_total", "Generation tokens produced.", {{"", generation_tokens_total_}});
    counter("vllm:request_success_total", "Finished requests by finish reason.",
            {{"finished_reason=\"stop\"", success_stop_},
             {"finished_reason=\"length\"", success_length_},
             {"finished_reason=\"abort\"", success_abort_}});
    counter("vllm:num_preemptions_total", "Preemptions (recomputation) by the scheduler.", {{"", st.num_preemptions}});
    ttft_.render(&o, "vllm:time_to_first_token_seconds", "Time to first token in seconds.", model);
    itl_.render(&o, "vllm:inter_token_latency_seconds", "Time between consecutive output tokens in seconds.", model);
    itl_.render(&o, "vllm:time_per_output_token_seconds",
                "Time per output token in seconds (older vLLM name of the inter-token latency).", model);
    e2e_.render(&o, "vllm:e2e_request_latency_seconds", "End-to-end latency of finished requests in seconds.",
                model);
    o += "# HELP loom:requests_failed_total Requests that ended in an engine error or were rejected by the "
         "scheduler.\n# TYPE loom:requests_failed_total counter\n";
    o += "loom:requests_failed_total{" + model + ",reason=\"error\"} " + std::to_string(failed_error_) + "\n";
    o += "loom:requests_failed_total{" + model + ",reason=\"rejected\"} " + std::to_string(failed_rejected_) + "\n";
  }
  if (!options_.tiers.tiers().empty()) {
    std::vector<std::pair<std::string, int64_t>> fin, met;
    std::string goodput;
    const double up = std::max(1e-9, engine_.clock().now() - start_s_);
    {
      std::lock_guard<std::mutex> lock(metrics_mu_);
      for (size_t i = 0; i < options_.tiers.size(); ++i) {
        const std::string l = "tier=\"" + prom_escape(options_.tiers[i].name) + "\"";
        fin.push_back({l, tier_finished_[i]});
        met.push_back({l, tier_met_[i]});
        goodput += "loom:tier_goodput_requests_per_second{" + model + "," + l + "} " +
                   prom_number(double(tier_met_[i]) / up) + "\n";
      }
    }
    counter("loom:tier_requests_finished_total", "Finished requests per SLO tier.", fin);
    counter("loom:tier_requests_slo_met_total", "Finished requests per SLO tier meeting both its TTFT and TPOT targets.",
            met);
    o += "# HELP loom:tier_goodput_requests_per_second Requests meeting both targets per second since start, per "
         "SLO tier.\n# TYPE loom:tier_goodput_requests_per_second gauge\n" + goodput;
  }
  counter("loom:requests_rejected_overload_total", "Requests answered 429 because the waiting queue was full.",
          {{"", overload_total_.load()}});
  gauge("loom:kv_blocks_used", "KV-cache blocks in use.", st.kv_blocks_used);
  gauge("loom:kv_blocks_total", "KV-cache blocks in the cache.", st.kv_blocks_total);
  counter("loom:engine_steps_total", "Engine steps executed.", {{"", st.num_steps}});
  o += "# HELP loom:step_plan_info Layout plan of the last engine step.\n# TYPE loom:step_plan_info gauge\n";
  o += "loom:step_plan_info{" + model + ",plan=\"" + prom_escape(st.last_plan) + "\"} 1\n";
  // Per plan of the set: what ran under it and what switching into it cost.
  std::vector<std::pair<std::string, int64_t>> steps, tokens, switches, moved;
  for (const PlanStats& p : st.plans) {
    const std::string l = "plan=\"" + prom_escape(p.name) + "\"";
    steps.push_back({l, p.steps});
    tokens.push_back({l, p.tokens});
    switches.push_back({l, p.switches});
    moved.push_back({l, p.kv_bytes_moved});
  }
  counter("loom:plan_steps_total", "Engine steps run under each plan.", steps);
  counter("loom:plan_tokens_total", "Tokens computed under each plan.", tokens);
  counter("loom:plan_switches_total", "Switches into each plan.", switches);
  counter("loom:plan_kv_bytes_moved_total", "KV-cache bytes the switches into each plan migrated.", moved);
  o += "# HELP loom:plan_switch_seconds_total Time spent switching into each plan.\n"
       "# TYPE loom:plan_switch_seconds_total counter\n";
  for (const PlanStats& p : st.plans)
    o += "loom:plan_switch_seconds_total{" + model + ",plan=\"" + prom_escape(p.name) + "\"} " +
         prom_number(p.switch_s) + "\n";
  return o;
}

}  // namespace loom::server
