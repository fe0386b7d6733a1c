// A real `loom serve` stack in the test process: a model (the tiny synthetic one, written to a
// temporary directory, or stories260K), Engine, ServingEngine and HttpServer on 127.0.0.1 at a
// free port, and cpp-httplib clients (a real HTTP client over real sockets) to talk to it.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "cluster/tiers.h"
#include "engine/engine.h"
#include "model/loader.h"
#include "model/synth.h"
#include "model/tokenizer.h"
#include "server/http_server.h"
#include "server/serving_engine.h"
#include "test_util.h"

namespace loom::server::test {

// Path of the tiny synthetic model (written once per process).
inline std::string tiny_model_path() {
  static std::string path = [] {
    SynthOptions o;
    o.shape = synth_shape("tiny");
    o.dtype = DType::F32;
    o.threads = 1;
    const std::string p = loom::test::temp_dir() + "/tiny.gguf";
    write_synth_model(o, p);
    return p;
  }();
  return path;
}

// Waits until pred(s.stats()) holds or timeout; returns whether it held.
inline bool wait_for_stats(ServingEngine& s, const std::function<bool(const EngineStats&)>& pred, double timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    if (pred(s.stats())) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred(s.stats());
}

struct StackOptions {
  std::string model_path;  // "" -> tiny
  std::string tokenizer_path;
  int max_num_seqs = 16;
  int max_queue = 64;
  int max_tokens_per_step = 256;
  int64_t kv_cache_bytes = 8 << 20;
  double step_delay_ms = 0;
  int max_connections = 0;        // HttpServerOptions (0: from the descriptor limit)
  double header_timeout_s = 10;
  size_t max_body_bytes = HttpServerOptions{}.max_body_bytes;  // slows every step down (via the fault hook) to widen timing windows
  std::function<void(Engine&, const StepBatch&)> hook;
  std::string tiers;  // SLO tiers (cluster::parse_tiers syntax); "" = none
  int http_threads = 0;           // HttpServerOptions (0: the default pool)
  double body_timeout_s = 60;
  int64_t max_inflight_bytes = 0;  // HttpServerOptions (0: the default budget)
  // ServingOptions' health settings (serving_engine.h "Health").
  std::function<double()> health_clock;
  double step_timeout_s = ServingOptions{}.step_timeout_s;
  double heartbeat_period_s = ServingOptions{}.heartbeat_period_s;
  std::function<void(const std::string&)> output_hook;  // ServingOptions::output_hook
  std::function<void(const std::string&)> access_log;   // HttpServerOptions::access_log
};

class Stack {
 public:
  explicit Stack(StackOptions o = {}) : opt_(std::move(o)) {
    const std::string path = opt_.model_path.empty() ? tiny_model_path() : opt_.model_path;
    model_ = load_model(path);
    tok_ = Tokenizer::create(load_vocab(path, opt_.tokenizer_path));
    EngineConfig c;
    c.threads = 1;
    c.max_num_seqs = opt_.max_num_seqs;
    c.max_tokens_per_step = opt_.max_tokens_per_step;
    c.kv_cache_bytes = opt_.kv_cache_bytes;
    engine_ = std::make_unique<Engine>(model_, c);
    ServingOptions so;
    so.max_queue = opt_.max_queue;
    so.model_name = "test-model";
    if (!opt_.tiers.empty()) so.tiers = cluster::parse_tiers(opt_.tiers);
    so.health_clock = opt_.health_clock;
    so.step_timeout_s = opt_.step_timeout_s;
    so.heartbeat_period_s = opt_.heartbeat_period_s;
    so.output_hook = opt_.output_hook;
    so.fault_hook = [this](const StepBatch& b) {
      if (opt_.step_delay_ms > 0)
        std::this_thread::sleep_for(std::chrono::microseconds(int64_t(opt_.step_delay_ms * 1000)));
      if (opt_.hook) opt_.hook(*engine_, b);
    };
    serving_ = std::make_unique<ServingEngine>(*engine_, *tok_, serving_eos_ids(*tok_, model_->format, model_->config.bos_id),
                                               so);
    HttpServerOptions ho;
    ho.host = "127.0.0.1";
    ho.port = 0;
    ho.model_name = "test-model";
    ho.max_connections = opt_.max_connections;
    ho.header_timeout_s = opt_.header_timeout_s;
    ho.max_body_bytes = opt_.max_body_bytes;
    ho.http_threads = opt_.http_threads;
    ho.body_timeout_s = opt_.body_timeout_s;
    ho.max_inflight_bytes = opt_.max_inflight_bytes;
    ho.access_log = opt_.access_log;
    http_ = std::make_unique<HttpServer>(*serving_, *tok_, ho);
    port_ = http_->start();
  }
  ~Stack() {
    serving_->shutdown();
    http_->stop();
    serving_.reset();
  }

  int port() const { return port_; }
  httplib::Client client(double read_timeout_s = 30) const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(time_t(read_timeout_s), suseconds_t((read_timeout_s - double(time_t(read_timeout_s))) * 1e6));
    c.set_connection_timeout(5, 0);
    return c;
  }
  ServingEngine& serving() { return *serving_; }
  HttpServer& http() { return *http_; }
  Engine& engine() { return *engine_; }
  const Tokenizer& tok() const { return *tok_; }
  const Model& model() const { return *model_; }

  // Waits until pred(stats) holds or timeout; returns whether it held.
  bool wait_stats(const std::function<bool(const EngineStats&)>& pred, double timeout_s = 10) {
    return wait_for_stats(*serving_, pred, timeout_s);
  }

 private:
  StackOptions opt_;
  std::shared_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<ServingEngine> serving_;
  std::unique_ptr<HttpServer> http_;
  int port_ = 0;
};

inline nlohmann::json post_json(httplib::Client& c, const std::string& path, const nlohmann::json& body, int* status) {
  auto res = c.Post(path, body.dump(), "application/json");
  if (!res) {
    *status = -1;
    return nlohmann::json{{"transport_error", httplib::to_string(res.error())}};
  }
  *status = res->status;
  return nlohmann::json::parse(res->body, nullptr, false);
}

// Value of one Prometheus sample line `name{labels} value` (first whose text starts with
// `prefix`), or NaN.
inline double metric_value(const std::string& text, const std::string& prefix) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    if (line.rfind(prefix, 0) == 0) {
      const size_t sp = line.rfind(' ');
      return std::stod(line.substr(sp + 1));
    }
    pos = end + 1;
  }
  return std::nan("");
}

}  // namespace loom::server::test
