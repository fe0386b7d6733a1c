// The bridge between HTTP handler threads and the engine: one engine thread runs the
// EngineLoop (steps while work exists, sleeps on a condition variable when idle); handler
// threads submit requests and read their output from a per-request RequestStream.
//
// Text, off the engine thread (issue 36: 480k stop strings on the engine thread took 186 s and
// stalled every other request): the engine thread only queues each sampled token; an output
// thread detokenises it with the request's StreamDecoder (UTF-8 safe), applies its stop strings
// (StopFilter: the first stop string ends the request, is cut from the text, and text that may
// start a stop string is held back until it is known not to) and feeds the stream, so streams
// only ever see final text. When a stop string matches, the output thread finishes the stream at
// once (finish_reason stop, completion tokens counted through the token that completed it) and
// flags the request; the scheduler's stop check on the engine thread reads the flag and ends the
// sequence at its next token (so the engine may compute a token or two that nobody sees; vLLM's
// output processor does the same). The engine thread's cost per token is one queue entry,
// whatever the stop strings.
//
// Queue bound: a request is refused (OverloadError -> 429) when `max_queue` requests are already
// waiting (submitted and not running: the scheduler's waiting queue plus those not yet handed
// to it).
//
// Faults: the executor failing on a step finishes that step's requests with FinishReason::kError
// (EngineLoop does this); any other exception on the engine thread (a hook, the scheduler) fails
// every live request with kError, cancels them (their KV blocks are freed) and the loop goes on.
// The engine is dead when its step group broke (EngineHandle::fault(): a follower rank failed,
// died or froze past the communicator timeout; every later step would fail at once) or after
// max_consecutive_faults steps in a row threw: then every live and queued request fails, later
// submits get 503, dead_reason() says why (/health answers 503) and on_dead runs once, on the
// engine thread, so the server can shut down (as vLLM does on a dead engine).
// cancel(id) from any thread (a client went away) aborts the request and frees its blocks at
// the next step.
//
// Health (issue 36: /health said 200 through a 60 s SIGSTOP of a follower and a 186 s step):
// the engine thread marks when it enters a step or a heartbeat and when it leaves; health()
// reports the engine stalled while one step has lasted more than step_timeout_s, or one heartbeat
// more than heartbeat_timeout_s. While idle the engine thread runs a heartbeat every
// heartbeat_period_s (EngineHandle::heartbeat: a round trip with every follower rank), so:
//   - a stalled step loop (a step that does not end) turns /health 503 step_timeout_s after the
//     step began;
//   - a stalled rank while the engine idles: within heartbeat_period_s + heartbeat_timeout_s
//     (6 s by default); while it steps, the step stalls: step_timeout_s (or the communicator
//     timeout fails the engine first);
// and /health answers 200 again once the step or heartbeat completes. The heartbeats also keep
// an idle distributed engine's followers from timing out in their wait for the next step
// (before, an idle `serve --ranks 2` died after LOOM_COMM_TIMEOUT_S).
//
// Thread-safety: submit, cancel, stats, health, render_metrics and RequestStream are thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cluster/tiers.h"
#include "engine/engine.h"
#include "model/tokenizer.h"
#include "server/prometheus.h"
#include "server/stop_filter.h"

namespace loom::server {

// What a handler reads from its request. Text deltas accumulate until taken.
class RequestStream {
 public:
  struct Update {
    std::string text;        // new final text since the last update
    int num_output = 0;      // tokens generated so far
    bool finished = false;
    FinishReason reason = FinishReason::kNone;
    std::string detail;      // why it was rejected / failed (finish_detail)
    // The logprobs of the tokens sampled since the last update (requests with
    // sampling.logprobs >= 0; the eos token that ended the request has none).
    std::vector<TokenLogprobs> logprobs;
  };
  explicit RequestStream(RequestId id, int prompt_len) : id_(id), prompt_len_(prompt_len) {}
  RequestId id() const { return id_; }
  int prompt_len() const { return prompt_len_; }
  // SLO tier of the request (ServingOptions::tiers index), -1 when the server has none; set by
  // submit() before the stream is shared.
  int tier = -1;

  // Waits up to `timeout` for new text or the finish; returns false when nothing came. Once
  // finished, every call returns the final state (with empty text) at once.
  bool next(Update* out, std::chrono::milliseconds timeout);

  // Engine side. `lp`: a sampled token's logprobs (delivered with this update).
  void push(std::string text, int num_output, std::optional<TokenLogprobs> lp = std::nullopt);
  void finish(std::string text, int num_output, FinishReason reason, std::string detail,
              std::vector<TokenLogprobs> lps = {});

 private:
  const RequestId id_;
  const int prompt_len_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string pending_;
  std::vector<TokenLogprobs> pending_lp_;
  int num_output_ = 0;
  bool finished_ = false;
  bool fresh_ = false;  // something not yet returned by next()
  FinishReason reason_ = FinishReason::kNone;
  std::string detail_;
};

// The request was not queued: 429 (the waiting queue is full) or 503 (shutting down).
struct OverloadError {
  std::string message;
  int status = 429;
};

struct ServingOptions {
  int max_queue = 256;  // waiting requests at most; more -> OverloadError
  std::string model_name = "loom";
  // Test hook: called on the engine thread for every batch before it runs; an exception thrown
  // from it takes the engine-thread fault path (see above).
  std::function<void(const StepBatch&)> fault_hook;
  // SLO tiers (Nitsum, cluster/tiers.h; `loom serve --tiers`): a request names its tier (the
  // first by default) and /metrics counts, per tier, the finished requests and those meeting
  // both the TTFT and the TPOT target (goodput). Empty: no tiers.
  cluster::SloTiers tiers;
  int max_consecutive_faults = 3;
  std::function<void(const std::string& why)> on_dead;
  // Health (see above): a step longer than step_timeout_s, or a heartbeat longer than
  // heartbeat_timeout_s, is a stall; heartbeats run every heartbeat_period_s while idle (keep it
  // well inside the communicator timeout: its followers wait that long for the next step).
  double step_timeout_s = 60;       // vLLM's VLLM_ENGINE_ITERATION_TIMEOUT_S default
  double heartbeat_timeout_s = 5;
  double heartbeat_period_s = 1;
  // Test hook: called on the output thread before it handles each event ("start", "token",
  // "finish"); a test stalls the output thread with it to show the engine does not wait for it.
  std::function<void(const std::string& kind)> output_hook;
  // The clock health() judges by (seconds, monotonic); default the steady clock. Tests set a
  // manual one, so a stall is a count of their steps, not a wall-clock window.
  std::function<double()> health_clock;
};

// What /health reports.
struct Health {
  bool ok = true;
  std::string error;  // why not ("" when ok)
};

// The periodic line `loom serve` prints (vLLM's "Avg prompt throughput ..." log line) from two
// snapshots `interval_s` apart: token rates over the interval, requests running and waiting and
// the KV cache's use now. "" when nothing ran in the interval and nothing is live (an idle
// server stays quiet).
struct EngineStats;
std::string stats_log_line(const EngineStats& before, const EngineStats& now, double interval_s);

// A snapshot for /metrics and /health.
struct EngineStats {
  int num_running = 0;
  int num_waiting = 0;  // scheduler waiting queue + submitted, not yet handed over
  int num_live = 0;     // submitted and not finished
  int kv_blocks_used = 0;
  int kv_blocks_total = 0;
  int64_t num_preemptions = 0;
  int64_t num_steps = 0;
  int64_t prompt_tokens_total = 0;      // vllm:prompt_tokens_total
  int64_t generation_tokens_total = 0;  // vllm:generation_tokens_total
  std::string last_plan = "default";
  std::vector<PlanStats> plans;  // per plan of the engine's set
};

class ServingEngine {
 public:
  // Starts the engine thread. `engine` and `tok` must outlive this object.
  ServingEngine(EngineHandle& engine, const Tokenizer& tok, std::vector<TokenId> eos_ids, ServingOptions options);
  ~ServingEngine();  // shutdown()

  // Stops the engine thread; live and queued requests finish with kAbort, later submits are
  // refused. Idempotent.
  void shutdown();
  ServingEngine(const ServingEngine&) = delete;
  ServingEngine& operator=(const ServingEngine&) = delete;

  // Queues r (its id, arrival time and eos ids are set here); returns its stream. Throws
  // OverloadError when the waiting queue is full.
  // `tier`: index into ServingOptions::tiers (-1: none).
  std::shared_ptr<RequestStream> submit(Request r, int tier = -1);
  void cancel(RequestId id);

  EngineStats stats() const;
  // "" while the engine serves; else why it stopped (see Faults above).
  std::string dead_reason() const;
  // Dead, or stalled in a step or a heartbeat (see Health above).
  Health health() const;
  // Heartbeats completed (tests count them; the engine thread's idle rounds are not).
  int64_t heartbeats() const { return heartbeats_.load(); }
  // Whether the engine thread is inside a heartbeat now (tests).
  bool in_heartbeat() const { return busy_kind_.load() == kBusyHeartbeat && busy_since_.load() >= 0; }
  std::string render_metrics() const;  // Prometheus text format 0.0.4
  // The engine's fixed configuration (read-only from any thread).
  const EngineConfig& engine_config() const { return engine_.config(); }
  int num_kv_blocks() const { return engine_.num_kv_blocks(); }
  int max_model_len() const { return engine_.config().max_model_len; }
  const ServingOptions& options() const { return options_; }

 private:
  // Engine thread: a live request's timing and its stop flag.
  struct Live {
    std::shared_ptr<std::atomic<int>> stop_at;  // set by the output thread (see Text above)
    int num_tokens = 0;    // tokens seen by on_token
    double arrival_s = 0;
    double last_token_s = -1;
    int prompt_len = 0;
    int tier = -1;
    double first_token_s = -1;
  };
  // Output thread: a live request's text.
  struct Out {
    std::shared_ptr<RequestStream> stream;
    std::unique_ptr<StreamDecoder> decoder;
    StopFilter filter;
    std::shared_ptr<std::atomic<int>> stop_at;
    int num_tokens = 0;
    bool ignore_eos = false;
    bool done = false;  // the stream finished (a stop string matched)
    std::vector<TokenLogprobs> final_lp;  // of the token that ended the request (for its finish)
  };
  // Engine thread -> output thread, in order.
  struct OutEvent {
    enum Kind { kStart, kToken, kFinish } kind = kToken;
    RequestId id = 0;
    // kStart
    std::shared_ptr<RequestStream> stream;
    std::vector<std::string> stops;
    bool ignore_eos = false;
    std::shared_ptr<std::atomic<int>> stop_at;
    // kToken
    TokenId token = 0;
    bool finished = false;
    FinishReason reason = FinishReason::kNone;
    std::optional<TokenLogprobs> logprobs;
    // kFinish
    int num_output = 0;
    std::string detail;
  };

  void run();
  void output_loop();
  void handle(OutEvent& ev);
  void post(OutEvent ev);   // engine thread: queued until flush()
  void flush();             // engine thread: hands the queued events to the output thread
  bool stop_check(const Sequence& s);
  void on_token(const TokenEvent& ev);
  void on_finish(const Sequence& s);
  void on_batch(const StepBatch& b);
  void fail_all(const std::string& what);
  void publish();
  void finish_live(std::unordered_map<RequestId, Live>::iterator it, int num_output, FinishReason reason,
                   std::string detail);
  double health_now() const;
  // The engine thread entering (kind) and leaving (-1) a step or a heartbeat.
  static constexpr int kBusyStep = 0, kBusyHeartbeat = 1;
  void set_busy(int kind);

  EngineHandle& engine_;
  const Tokenizer& tok_;
  std::vector<TokenId> eos_ids_;
  ServingOptions options_;
  std::atomic<RequestId> next_id_{1};

  // Handler -> engine thread.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<Request, std::shared_ptr<RequestStream>>> inbox_;
  std::vector<RequestId> cancels_;
  bool stop_ = false;
  std::string dead_;  // why the engine is dead ("" while it serves)
  int num_live_ = 0;  // submitted, not finished (under mu_)
  EngineStats stats_;  // last published (under mu_)

  // Engine thread only.
  std::unordered_map<RequestId, Live> live_;
  std::vector<OutEvent> out_pending_;

  // Output thread.
  std::mutex out_mu_;
  std::condition_variable out_cv_;
  std::deque<OutEvent> out_q_;
  bool out_quit_ = false;
  std::unordered_map<RequestId, Out> out_;
  std::thread out_thread_;

  // Health: when the engine thread entered its current step or heartbeat (health_clock seconds;
  // < 0: in neither), and which.
  std::atomic<double> busy_since_{-1.0};
  std::atomic<int> busy_kind_{kBusyStep};
  std::atomic<int64_t> heartbeats_{0};

  // Metrics (under metrics_mu_).
  mutable std::mutex metrics_mu_;
  Histogram ttft_{ttft_buckets()}, itl_{itl_buckets()}, e2e_{e2e_buckets()};
  int64_t prompt_tokens_total_ = 0, generation_tokens_total_ = 0;
  int64_t success_stop_ = 0, success_length_ = 0, success_abort_ = 0;
  std::vector<int64_t> tier_finished_, tier_met_;  // per SLO tier
  double start_s_ = 0;
  int64_t failed_error_ = 0, failed_rejected_ = 0;
  std::atomic<int64_t> overload_total_{0};

  std::thread thread_;
};

}  // namespace loom::server
