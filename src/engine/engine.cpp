#include "engine/engine.h"

#include <algorithm>

#include "core/error.h"
#include "kv/block_allocator.h"

namespace loom {

void EngineConfig::validate(const ModelConfig& m) const {
  if (threads < 0) fail("threads must be >= 0, got ", threads);
  if (max_num_seqs < 1) fail("max_num_seqs must be >= 1, got ", max_num_seqs);
  if (max_tokens_per_step < 1) fail("max_tokens_per_step must be >= 1, got ", max_tokens_per_step);
  if (block_size < 1) fail("block_size must be >= 1, got ", block_size);
  if (max_model_len < 0 || max_model_len > m.max_seq_len)
    fail("max_model_len = ", max_model_len, " must be in [1, ", m.max_seq_len, "] (the model's context)");
  if (kv_cache_bytes && *kv_cache_bytes <= 0) fail("kv cache bytes must be > 0, got ", *kv_cache_bytes);
  if (!(kv_cache_fraction > 0 && kv_cache_fraction <= 1))
    fail("kv cache fraction must be in (0, 1], got ", kv_cache_fraction);
}

Engine::Engine(std::shared_ptr<const Model> model, const EngineConfig& config)
    : model_(std::move(model)), config_(config) {
  const ModelConfig& c = model_->config;
  config_.validate(c);
  if (config_.max_model_len == 0) config_.max_model_len = c.max_seq_len;

  // The weights first: their decode copy (shard_weights.h) comes out of the memory the KV
  // budget below is a fraction of.
  pool_ = std::make_unique<ThreadPool>(config_.threads > 0 ? config_.threads : default_thread_count());
  transformer_ = std::make_unique<Transformer>(model_, ShardSpec::full(c), pool_.get());

  KvLayout lay;
  lay.n_layers = c.n_layers;
  lay.n_kv_heads = c.n_kv_heads;
  lay.head_dim = c.head_dim;
  lay.block_size = config_.block_size;
  const int64_t per_block = kv_bytes_per_block(lay, DType::F32);
  int64_t blocks = kv_cache_num_blocks(per_block, config_.kv_cache_bytes, config_.kv_cache_fraction);
  if (!config_.kv_cache_bytes) {
    // No point holding more than every sequence slot at full context.
    const int64_t useful =
        int64_t(config_.max_num_seqs) * ((config_.max_model_len + lay.block_size - 1) / lay.block_size);
    blocks = std::min(blocks, useful);
  }
  if (blocks < 1)
    fail("the KV cache budget holds no block (one block is ", per_block, " bytes); raise --kv-cache-bytes");
  if (blocks > int64_t(INT32_MAX)) blocks = INT32_MAX;
  num_blocks_ = int(blocks);
  lay.num_blocks = num_blocks_;

  kv_ = std::make_unique<KvStorage>(lay);
  executor_ = std::make_unique<KernelExecutor>(*transformer_, *kv_);

  SchedulerConfig sc;
  sc.max_num_seqs = config_.max_num_seqs;
  sc.max_tokens_per_step = config_.max_tokens_per_step;
  sc.block_size = config_.block_size;
  sc.num_blocks = num_blocks_;
  sc.max_model_len = config_.max_model_len;
  sc.enable_chunked_prefill = config_.enable_chunked_prefill;
  scheduler_ = std::make_unique<Scheduler>(sc);
  loop_ = std::make_unique<EngineLoop>(*scheduler_, *executor_, clock_, metrics_);
}

std::vector<Sequence> Engine::run(std::vector<Request> requests) {
  std::vector<Sequence> done;
  auto prev = loop_->on_finish;
  loop_->on_finish = [&](const Sequence& s) {
    done.push_back(s);
    if (prev) prev(s);
  };
  const double t0 = clock_.now();
  for (Request& r : requests) {
    r.arrival_s += t0;
    loop_->add_arrival(std::move(r));
  }
  loop_->run_until_idle();
  loop_->on_finish = prev;
  return done;
}

}  // namespace loom
