// `loom serve`: an OpenAI-compatible HTTP server (server/http_server.h) over the engine.
// Loopback by default; Ctrl-C / SIGTERM stop it cleanly.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <condition_variable>
#include <thread>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include "cluster/pool.h"
#include "cluster/tiers.h"
#include "cli/cli.h"
#include "cli/layout_cli.h"
#include "comm/communicator.h"
#include "gpu/device.h"
#include "core/error.h"
#include "engine/policy_registry.h"
#include "model/loader.h"
#include "model/tokenizer.h"
#include "server/engine_factory.h"
#include "server/http_server.h"
#include "server/serving_engine.h"
#include "sim/exp_nitsum.h"
#include "sim/profile.h"

namespace loom::cli {

namespace {

struct ServeArgs {
  std::string model, tokenizer;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string served_model_name;
  int max_num_seqs = 64;
  int max_tokens_per_step = 2048;
  int64_t kv_cache_bytes = 0;
  int64_t rank_memory_bytes = 0;
  double kv_cache_fraction = EngineConfig{}.kv_cache_fraction;
  int block_size = kDefaultKvBlockSize;
  int max_model_len = 0;
  int max_queue = 256;
  int threads = 0;
  int http_threads = 0;
  int max_connections = 0;
  double header_timeout_s = server::HttpServerOptions{}.header_timeout_s;
  int64_t max_body_bytes = int64_t(server::HttpServerOptions{}.max_body_bytes);
  double body_timeout_s = server::HttpServerOptions{}.body_timeout_s;
  int64_t max_inflight_bytes = 0;  // 0: server::default_inflight_bytes
  double stall_timeout_s = server::ServingOptions{}.step_timeout_s;
  double heartbeat_timeout_s = server::ServingOptions{}.heartbeat_timeout_s;
  bool ranks_given = false;
  std::string content_special_tokens = "parse";
  bool disable_log_requests = false;  // vLLM's flag names
  bool disable_log_stats = false;
  int ranks = 1;
  std::string comm = "local";
  std::string tiers;  // SLO tiers (Nitsum): NAME=TTFT_MS/TPOT_MS,... or a file
  LayoutArgs layout;
  // --policy nitsum (cluster/pool.h)
  double window_s = 1.0;
  std::vector<std::string> pool_layouts;
  int min_tp = 1, max_tp = 0;
  std::string pool_lengths = "256/64";
};

// --pool-lengths PROMPT/OUTPUT: the mean lengths the planner's profile table assumes per tier.
std::pair<double, double> parse_pool_lengths(const std::string& s) {
  const size_t slash = s.find('/');
  double p = 0, o = 0;
  try {
    if (slash == std::string::npos) throw std::invalid_argument(s);
    size_t a = 0, b = 0;
    p = std::stod(s.substr(0, slash), &a);
    o = std::stod(s.substr(slash + 1), &b);
    if (a != slash || b != s.size() - slash - 1) throw std::invalid_argument(s);
  } catch (const std::exception&) {
    fail("--pool-lengths '", s, "' is not PROMPT/OUTPUT (mean tokens, e.g. 256/64)");
  }
  if (!(p >= 1 && o >= 1)) fail("--pool-lengths '", s, "': both lengths must be >= 1 token");
  return {p, o};
}

// The Nitsum pool's options from the flags (cheap checks first: before the model loads).
cluster::PoolOptions pool_options(const ServeArgs& a, const cluster::SloTiers& tiers) {
  if (!a.layout.plans.empty())
    fail("--policy nitsum builds each instance's plan itself (tp=T,weights=full on every candidate group); drop --plan");
  cluster::PoolOptions po;
  po.comm = a.comm;
  po.device = gpu::parse_device(a.layout.device);
  po.ranks = a.ranks;
  po.tiers = tiers;
  po.window_s = a.window_s;
  po.min_tp = a.min_tp;
  po.max_tp = a.max_tp;
  for (const std::string& l : a.pool_layouts) po.layouts.push_back(cluster::parse_pool_layout(l, tiers));
  if (po.layouts.empty() && a.layout.profile.empty())
    fail("--policy nitsum needs --profile DIR (a `loom profile -o DIR` of this machine: the planner's profile table) "
         "or --pool-layout");
  if (!a.layout.profile.empty() && !sim::is_profile(a.layout.profile))
    fail("--profile ", a.layout.profile, " is not a loom profile folder (no hardware.json from `loom profile -o DIR`)");
  parse_pool_lengths(a.pool_lengths);
  cluster::PoolOptions check = po;
  if (check.layouts.empty()) check.table = cluster::ProfileTable(int(std::max<size_t>(tiers.size(), 1)), {1});
  cluster::check_pool_options(check);
  return po;
}

std::string base_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t s = p.find_last_of('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

void run_serve(const ServeArgs& a) {
  // Ranges: cli/option_ranges.cpp (checked while parsing). What depends on two options is here.
  if (a.ranks_given && a.ranks == 0 && a.comm != "mpi")
    fail("--ranks 0 means as many ranks as mpirun started: only with --comm mpi (give --ranks N >= 1)");
  if (a.port < 0 || a.port > 65535) fail("--port must be in [0, 65535], got ", a.port);
  if (a.max_queue < 1) fail("--max-queue must be >= 1, got ", a.max_queue);
  if (a.kv_cache_bytes < 0) fail("--kv-cache-bytes must be > 0, got ", a.kv_cache_bytes);
  if (a.rank_memory_bytes < 0) fail("--rank-memory-bytes must be > 0, got ", a.rank_memory_bytes);
  // Bad tiers fail here, in one line, before the model loads.
  const cluster::SloTiers tiers = a.tiers.empty() ? cluster::SloTiers() : cluster::parse_tiers(a.tiers);
  if (a.max_connections < 0) fail("--max-connections must be >= 0 (0: from the descriptor limit), got ", a.max_connections);
  if (!(a.header_timeout_s > 0) || a.header_timeout_s > 3600)
    fail("--header-timeout must be in (0, 3600] seconds, got ", a.header_timeout_s);


  // Stop signals are taken by sigwait below; block them before any thread starts so every
  // thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  server::EngineSpec spec;
  spec.model_path = a.model;
  spec.config.threads = a.threads;
  spec.config.max_num_seqs = a.max_num_seqs;
  spec.config.max_tokens_per_step = a.max_tokens_per_step;
  spec.config.max_model_len = a.max_model_len;
  if (a.kv_cache_bytes > 0) spec.config.kv_cache_bytes = a.kv_cache_bytes;
  if (a.rank_memory_bytes > 0) spec.config.rank_memory_bytes = a.rank_memory_bytes;
  spec.config.kv_cache_fraction = a.kv_cache_fraction;
  spec.config.block_size = a.block_size;
  spec.comm = a.comm;
  if (policy_runs_pool(a.layout.policy)) {  // Nitsum's pool of instances (policies/nitsum.cpp)
    const cluster::PoolOptions po = pool_options(a, tiers);
    spec.ranks = a.ranks;
    spec.configure_pool = [&a, po](cluster::PoolOptions& o, const Model& m) {
      const EngineConfig engine = o.engine;
      const std::string path = o.model_path;
      auto load = o.load_model;
      o = po;
      o.engine = engine;
      o.model_path = path;
      o.load_model = load;
      if (!o.layouts.empty()) return;
      // The planner's table (Nitsum 3.3.1 offline profile): the cost model of this machine's
      // profile for every TP degree, at the assumed mean lengths.
      const auto [prompt, output] = parse_pool_lengths(a.pool_lengths);
      const cluster::SloTiers tiers = o.tiers.size() ? o.tiers : cluster::SloTiers({{"default", 1e9, 1e9, false}});
      std::vector<int> tps;
      for (int t = std::max(1, o.min_tp); t <= (o.max_tp > 0 ? o.max_tp : o.ranks) && t <= o.ranks; t *= 2) tps.push_back(t);
      const std::string dtype(dtype_name(m.layers.at(0).w_up.dtype));
      const std::string backend = o.comm == "mpi" ? "mpi" : "local";
      const std::string profile = a.layout.profile;
      o.table = sim::nitsum_profile_table(
          [&](int tp) { return sim::hardware_cost_model(m.config, profile, dtype, Plan::make_tp(tp), backend); }, tiers,
          std::vector<std::pair<double, double>>(tiers.size(), {prompt, output}), tps);
    };
  } else {
    spec.ranks = layout_ranks(a.layout, a.ranks == 1 && !a.layout.plans.empty() ? 0 : a.ranks, a.block_size);
    if (spec.ranks == 0 && a.comm != "mpi") spec.ranks = 1;
    if (spec.ranks == 0 && a.layout.plans.empty()) fail("--comm mpi with --ranks 0 needs a --plan (e.g. --plan tp=4)");
    spec.layout_options = a.layout.given();
    spec.configure_dist = [&a, &spec](DistOptions& o) { apply_layout_options(a.layout, std::max(spec.ranks, 1), o); };
  }
  server::check_layout(spec);
  std::shared_ptr<Model> model = load_model(a.model);
  auto tok = Tokenizer::create(load_vocab(a.model, a.tokenizer));
  // The server lives inside with_engine: on one rank directly, or on world rank 0 of the
  // distributed engine while the other ranks follow its steps.
  server::with_engine(spec, model, [&](EngineHandle& engine) {
    if (const auto* pool = dynamic_cast<const cluster::PoolEngine*>(&engine))
      for (const std::string& line : pool->start_info()) std::fprintf(stderr, "[%s]\n", line.c_str());
    server::ServingOptions so;
    so.max_queue = a.max_queue;
    so.tiers = tiers;
    so.model_name = a.served_model_name.empty() ? base_name(a.model) : a.served_model_name;
    so.step_timeout_s = a.stall_timeout_s;
    so.heartbeat_timeout_s = a.heartbeat_timeout_s;
    // Heartbeats well inside the communicator timeout: idle followers wait that long for a step.
    so.heartbeat_period_s = std::clamp(CommOptions::default_timeout_s() / 4, 0.01, 1.0);
    // A dead engine (a follower rank failed, died or froze) stops the server: /health already
    // answers 503; the stop signal wakes the waiter below, and serve exits with the error.
    std::mutex dead_mu;
    std::string dead_reason;
    so.on_dead = [&](const std::string& why) {
      {
        std::lock_guard<std::mutex> lock(dead_mu);
        dead_reason = why;
      }
      ::kill(::getpid(), SIGTERM);
    };
    server::ServingEngine serving(engine, *tok, server::serving_eos_ids(*tok, model->format, model->config.bos_id),
                                  so);
    server::HttpServerOptions ho;
    ho.host = a.host;
    ho.port = a.port;
    ho.model_name = so.model_name;
    ho.http_threads = a.http_threads;
    ho.max_connections = a.max_connections;
    ho.header_timeout_s = a.header_timeout_s;
    ho.max_body_bytes = size_t(a.max_body_bytes);
    ho.body_timeout_s = a.body_timeout_s;
    ho.max_inflight_bytes = a.max_inflight_bytes;
    ho.parse_special_in_content = a.content_special_tokens == "parse";
    if (!a.disable_log_requests)
      ho.access_log = [](const std::string& line) { std::fprintf(stderr, "loom serve: %s\n", line.c_str()); };
    server::HttpServer http(serving, *tok, ho);
    const int port = http.bind();

    // Every 10 s (vLLM's default log interval) a line of token rates, requests and KV use, while
    // anything runs (stats_log_line: an idle server stays quiet).
    std::mutex stats_mu;
    std::condition_variable stats_cv;
    bool stats_stop = false;
    std::thread stats_logger;
    if (!a.disable_log_stats)
      stats_logger = std::thread([&] {
        constexpr double kInterval = 10;
        server::EngineStats before = serving.stats();
        std::unique_lock<std::mutex> lk(stats_mu);
        while (!stats_cv.wait_for(lk, std::chrono::duration<double>(kInterval), [&] { return stats_stop; })) {
          const server::EngineStats now = serving.stats();
          const std::string line = server::stats_log_line(before, now, kInterval);
          if (!line.empty()) std::fprintf(stderr, "loom serve: %s\n", line.c_str());
          before = now;
        }
      });
    auto stop_stats = [&] {
      if (!stats_logger.joinable()) return;
      {
        std::lock_guard<std::mutex> lk(stats_mu);
        stats_stop = true;
      }
      stats_cv.notify_all();
      stats_logger.join();
    };
    struct JoinAtExit {
      std::function<void()> f;
      ~JoinAtExit() { f(); }
    } join_stats{stop_stats};

    std::thread waiter([&] {
      int sig = 0;
      sigwait(&stop_signals, &sig);
      std::fprintf(stderr, "loom serve: signal %d, stopping\n", sig);
      serving.shutdown();  // in-flight requests end (aborted) so handler threads can finish
      http.stop();
    });
    std::printf("loom serve: listening on http://%s:%d (model %s, max_model_len %d, %d KV blocks of %d tokens)\n",
                a.host.c_str(), port, so.model_name.c_str(), engine.config().max_model_len, engine.num_kv_blocks(),
                engine.config().block_size);
    std::fflush(stdout);
    const bool ok = http.listen();
    // listen() returned: by a signal (the waiter stopped us) or because listening failed; in the
    // second case wake the waiter so it can finish.
    if (!ok) pthread_kill(waiter.native_handle(), SIGTERM);
    waiter.join();
    stop_stats();
    if (!ok) fail("listening on ", a.host, ":", port, " failed");
    std::lock_guard<std::mutex> lock(dead_mu);
    if (!dead_reason.empty()) fail("the engine failed; the server stopped: ", dead_reason);
  });
}

}  // namespace

void register_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server (completions, chat, SSE, /metrics)");
  sub->add_option("--model,-m", a->model, "Model: llama2.c .bin, GGUF file, or safetensors dir/file")->required();
  sub->add_option("--tokenizer,-t", a->tokenizer, "Tokenizer file if not with the model");
  sub->add_option("--host", a->host, "Address to listen on (loopback by default)")->capture_default_str();
  sub->add_option("--port", a->port, "Port (0: any free port, printed at start)")->capture_default_str();
  sub->add_option("--served-model-name", a->served_model_name, "Model name clients use (default: the file name)");
  sub->add_option("--max-num-seqs", a->max_num_seqs, "Running sequences at most")->capture_default_str();
  sub->add_option("--max-tokens-per-step", a->max_tokens_per_step, "Token budget per step (chunked prefill)")
      ->capture_default_str();
  sub->add_option("--kv-cache-bytes", a->kv_cache_bytes, "KV-cache size in bytes (default: a share of free memory)");
  sub->add_option("--rank-memory-bytes", a->rank_memory_bytes,
                  "Memory per rank for its weights and KV, as on a GPU: the KV cache is what the rank's weights under "
                  "the plan set leave (exclusive with --kv-cache-bytes)");
  sub->add_option("--kv-cache-fraction", a->kv_cache_fraction,
                  "Without --kv-cache-bytes: this fraction of available memory for the KV cache")
      ->capture_default_str();
  sub->add_option("--block-size", a->block_size, "Tokens per KV-cache block")->capture_default_str();
  sub->add_option("--max-model-len", a->max_model_len, "Prompt + output tokens at most (0: the model's context)")
      ->capture_default_str();
  sub->add_option("--tiers", a->tiers,
                  "SLO tiers (Nitsum): NAME=TTFT_MS/TPOT_MS,...[,NAME=background] or a file (JSON or that syntax); "
                  "requests name one in \"tier\" (default: the first); /metrics reports per-tier goodput");
  sub->add_option("--max-queue", a->max_queue, "Waiting requests at most; beyond it requests get 429")
      ->capture_default_str();
  sub->add_option("--threads", a->threads, "Compute threads (0: all cores, or LOOM_THREADS)")->capture_default_str();
  add_numerics_option(sub);
  sub->add_option("--http-threads", a->http_threads, "HTTP handler threads (0: max-num-seqs + max-queue + 16)")
      ->capture_default_str();
  sub->add_option("--max-connections", a->max_connections,
                  "Open connections at most; beyond it the one waiting longest for its request is dropped "
                  "(0: from the descriptor limit)")
      ->capture_default_str();
  sub->add_option("--header-timeout", a->header_timeout_s,
                  "Seconds a client has to send its request line and headers (then 408)")
      ->capture_default_str();
  sub->add_option("--max-body-bytes", a->max_body_bytes, "Request bodies above this get 413 unread")
      ->capture_default_str();
  sub->add_option("--body-timeout", a->body_timeout_s,
                  "Seconds a client has to send its request body after the headers, chunked or not (then 408)")
      ->capture_default_str();
  sub->add_option("--max-inflight-bytes", a->max_inflight_bytes,
                  "Memory for requests in flight (received bodies, their parse, parsed prompts); beyond it 503 with "
                  "Retry-After (0: min(2 GiB, a quarter of this machine's memory))")
      ->capture_default_str();
  sub->add_flag("--disable-log-requests", a->disable_log_requests,
               "No access-log line per request on stderr (vLLM's flag)");
  sub->add_flag("--disable-log-stats", a->disable_log_stats,
                "No periodic stats line (token rates, requests, KV use every 10 s) on stderr (vLLM's flag)");
  sub->add_option("--content-special-tokens", a->content_special_tokens,
                  "Special-token text inside chat message content: parse (control tokens, as HF, vLLM and llama.cpp "
                  "do) or text (tokenized as plain text, so a user cannot forge chat turns)")
      ->check(CLI::IsMember({"parse", "text"}))
      ->capture_default_str();
  sub->add_option("--stall-timeout", a->stall_timeout_s,
                  "Seconds one engine step may run before /health reports the engine stalled (503)")
      ->capture_default_str();
  sub->add_option("--heartbeat-timeout", a->heartbeat_timeout_s,
                  "Seconds a heartbeat to the engine's ranks (sent every second while idle) may take before /health "
                  "reports a stalled rank (503)")
      ->capture_default_str();
  auto* ranks = sub->add_option("--ranks", a->ranks, "Ranks of the engine (local: threads; mpi: 0 = mpirun's -np)")
                    ->capture_default_str();
  sub->add_option("--comm", a->comm, "Communicator for several ranks: local or mpi")->capture_default_str();
  add_layout_options(sub, a->layout);
  sub->add_option("--window", a->window_s,
                  "--policy nitsum (a pool of --ranks workers as several instances, re-planned every control "
                  "window): the window in seconds")
      ->capture_default_str();
  sub->add_option("--pool-layout", a->pool_layouts,
                  "--policy nitsum: a forced layout ROLE:tpT[:TIER],... (ROLE prefill|decode|both) instead of the "
                  "planner; repeat it to cycle through layouts, the next every window")
      ->allow_extra_args(false);
  sub->add_option("--min-tp", a->min_tp, "--policy nitsum: the smallest TP degree of an instance")->capture_default_str();
  sub->add_option("--max-tp", a->max_tp, "--policy nitsum: the largest TP degree (0: the pool size)")->capture_default_str();
  sub->add_option("--pool-lengths", a->pool_lengths,
                  "--policy nitsum: mean PROMPT/OUTPUT tokens the planner's profile table assumes for every tier")
      ->capture_default_str();
  set_action(sub, [a, ranks] {
    a->ranks_given = ranks->count() > 0;
    run_serve(*a);
  });
}

}  // namespace loom::cli
