// A real `loom serve --policy nitsum` stack in the test process: run_pool (cluster/pool.h) on
// N + 1 local ranks (threads), its control plane serving ServingEngine + HttpServer on 127.0.0.1
// at a free port, and cpp-httplib clients (real HTTP over real sockets) to talk to it.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

#include "cluster/pool.h"
#include "server_fixture.h"

namespace loom::server::test {

struct PoolStackOptions {
  std::string model_path;  // "" -> tiny
  std::string tokenizer_path;
  int ranks = 2;
  std::vector<std::string> layouts;  // parse_pool_layout syntax, cycled every window
  cluster::ProfileTable table;       // the planner's, without layouts
  std::string tiers;                 // cluster::parse_tiers syntax; "" = none
  double window_s = 0.05;
  int64_t window_steps = 0;  // > 0: windows of this many pool steps (PoolOptions::window_steps)
  int max_num_seqs = 16;
  int max_queue = 256;
  int max_tokens_per_step = 256;
  int64_t kv_cache_bytes = 8 << 20;  // per pool rank
  std::function<void(int pool_rank, RankEngine&, const StepBatch&)> after_step;
};

class PoolStack {
 public:
  explicit PoolStack(PoolStackOptions o) : opt_(std::move(o)) {
    const std::string path = opt_.model_path.empty() ? tiny_model_path() : opt_.model_path;
    model_ = load_model(path);
    tok_ = Tokenizer::create(load_vocab(path, opt_.tokenizer_path));
    cluster::PoolOptions po;
    po.comm = "local";
    po.ranks = opt_.ranks;
    po.model_path = path;
    po.load_model = [m = model_](int) { return std::shared_ptr<const Model>(m); };
    po.engine.threads = 1;
    po.engine.max_num_seqs = opt_.max_num_seqs;
    po.engine.max_tokens_per_step = opt_.max_tokens_per_step;
    po.engine.kv_cache_bytes = opt_.kv_cache_bytes;
    if (!opt_.tiers.empty()) po.tiers = cluster::parse_tiers(opt_.tiers);
    for (const std::string& l : opt_.layouts) po.layouts.push_back(cluster::parse_pool_layout(l, po.tiers));
    po.window_s = opt_.window_s;
    po.window_steps = opt_.window_steps;
    po.table = opt_.table;
    po.after_step = opt_.after_step;
    exit_pages_.assign(size_t(opt_.ranks), -1);
    po.on_exit = [this](int r, const KvStore& kv) {
      std::lock_guard<std::mutex> lk(mu_);
      exit_pages_[size_t(r)] = kv.used_pages();
    };
    thread_ = std::thread([this, po] {
      try {
        cluster::run_pool(po, [this](cluster::PoolEngine& e) { serve(e); });
      } catch (const std::exception& ex) {
        std::lock_guard<std::mutex> lk(mu_);
        error_ = ex.what();
        ready_ = true;
        cv_.notify_all();
      }
    });
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return ready_; });
  }
  ~PoolStack() { stop(); }

  // Stops the server and the pool (every worker returns); idempotent.
  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  const std::string& error() const { return error_; }
  int port() const { return port_; }
  httplib::Client client(double read_timeout_s = 60) const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(time_t(read_timeout_s), 0);
    c.set_connection_timeout(5, 0);
    return c;
  }
  ServingEngine& serving() { return *serving_; }
  cluster::PoolEngine& pool() { return *pool_; }
  const Tokenizer& tok() const { return *tok_; }
  // KV pages each pool rank's store still held when its worker returned (-1: not returned yet).
  std::vector<int64_t> exit_pages() {
    std::lock_guard<std::mutex> lk(mu_);
    return exit_pages_;
  }
  bool wait_stats(const std::function<bool(const EngineStats&)>& pred, double timeout_s = 10) {
    return wait_for_stats(*serving_, pred, timeout_s);
  }

 private:
  void serve(cluster::PoolEngine& e) {
    ServingOptions so;
    so.max_queue = opt_.max_queue;
    so.model_name = "test-model";
    if (!opt_.tiers.empty()) so.tiers = cluster::parse_tiers(opt_.tiers);
    ServingEngine serving(e, *tok_, serving_eos_ids(*tok_, model_->format, model_->config.bos_id), so);
    HttpServerOptions ho;
    ho.host = "127.0.0.1";
    ho.port = 0;
    ho.model_name = "test-model";
    HttpServer http(serving, *tok_, ho);
    {
      std::lock_guard<std::mutex> lk(mu_);
      port_ = http.start();
      serving_ = &serving;
      pool_ = &e;
      ready_ = true;
    }
    cv_.notify_all();
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_; });
    }
    serving.shutdown();
    http.stop();
    std::lock_guard<std::mutex> lk(mu_);
    final_stats_ = e.pool_stats();
    final_plans_ = e.plan_stats();
    serving_ = nullptr;
  }

  PoolStackOptions opt_;
  std::shared_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool ready_ = false, stop_ = false;
  std::string error_;
  int port_ = 0;
  ServingEngine* serving_ = nullptr;
  cluster::PoolEngine* pool_ = nullptr;
  std::vector<int64_t> exit_pages_;
  cluster::PoolStats final_stats_;
  std::vector<PlanStats> final_plans_;

 public:
  // After stop(): what the pool did.
  cluster::PoolStats final_stats() {
    std::lock_guard<std::mutex> lk(mu_);
    return final_stats_;
  }
  std::vector<PlanStats> final_plans() {
    std::lock_guard<std::mutex> lk(mu_);
    return final_plans_;
  }
};

}  // namespace loom::server::test
