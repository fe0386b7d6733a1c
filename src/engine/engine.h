// The single-process engine: a model, its paged KV cache, the shared scheduler, the kernel
// executor and the step loop, wired together. `loom bench offline`, `loom serve` and the tests
// drive it through EngineLoop (submit / cancel / step) or run a set of requests to completion.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine_loop.h"
#include "engine/executor.h"
#include "engine/metrics.h"
#include "engine/scheduler.h"
#include "engine/transformer.h"
#include "model/weights.h"

namespace loom {

struct EngineConfig {
  int threads = 0;                  // worker threads (0: default_thread_count())
  int max_num_seqs = 64;            // running sequences at most
  int max_tokens_per_step = 2048;   // token budget per step (chunked prefill)
  int block_size = kDefaultKvBlockSize;
  bool enable_chunked_prefill = true;
  int max_model_len = 0;            // 0: the model's context
  // KV cache size: explicit bytes, else this fraction of MemAvailable, capped at what
  // max_num_seqs sequences of max_model_len tokens can use.
  std::optional<int64_t> kv_cache_bytes;
  double kv_cache_fraction = 0.25;
  // Validates against the model; throws loom::Error naming the field and limit.
  void validate(const ModelConfig& model) const;
};

// What a live front end (the HTTP server) needs of an engine, single-rank or distributed: the
// scheduler, loop and clock of the replica it drives, and the sizes it reports.
class EngineHandle {
 public:
  virtual ~EngineHandle() = default;
  virtual const EngineConfig& config() const = 0;
  virtual int num_kv_blocks() const = 0;  // per rank
  virtual Scheduler& scheduler() = 0;
  virtual EngineLoop& loop() = 0;
  virtual Clock& clock() = 0;
  virtual Metrics& metrics() = 0;
};

class Engine : public EngineHandle {
 public:
  Engine(std::shared_ptr<const Model> model, const EngineConfig& config);

  const ModelConfig& model_config() const { return model_->config; }
  const EngineConfig& config() const override { return config_; }
  Scheduler& scheduler() override { return *scheduler_; }
  EngineLoop& loop() override { return *loop_; }
  Metrics& metrics() override { return metrics_; }
  Clock& clock() override { return clock_; }
  int num_kv_blocks() const override { return num_blocks_; }
  int64_t kv_cache_bytes() const { return kv_->bytes(); }

  // Runs `requests` (arrival_s relative to now) to completion; returns the finished sequences
  // in finishing order (rejected ones included, with FinishReason::kRejected).
  std::vector<Sequence> run(std::vector<Request> requests);

 private:
  std::shared_ptr<const Model> model_;
  EngineConfig config_;
  int num_blocks_ = 0;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Transformer> transformer_;
  std::unique_ptr<KvStorage> kv_;
  std::unique_ptr<KernelExecutor> executor_;
  std::unique_ptr<Scheduler> scheduler_;
  WallClock clock_;
  Metrics metrics_;
  std::unique_ptr<EngineLoop> loop_;
};

}  // namespace loom
