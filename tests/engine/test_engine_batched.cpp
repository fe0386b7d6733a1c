// The batched engine (scheduler + paged KV + kernel executor) against one-at-a-time
// generation: continuous batching, chunked prefill and preemption must not change a token.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "model/loader.h"
#include "model/tokenizer.h"
#include "single_rank.h"
#include "test_util.h"

namespace loom {
namespace {

using test::alone;
using test::greedy_requests;

class BatchedStories : public ::testing::Test {
 protected:
  void SetUp() override {
    LOOM_REQUIRE_SHARED();
    const std::string dir = test::stories_dir();
    model_ = load_model(dir + "/stories260K.bin");
    tok_ = Tokenizer::create(load_vocab(dir + "/stories260K.bin", dir + "/tok512.bin"));
    // Different lengths so prefill chunks and decodes of different sequences share steps.
    const char* texts[] = {"Once upon a time", "Lily and Ben went to the park", "The little dog",
                           "One day, a girl named Sue found a big red ball in the garden. She",
                           "Tom", "The sun was hot and the cat was sleepy", "A bird sang",
                           "Mom said", "They played all day until it was dark and then they went home"};
    for (const char* t : texts) prompts_.push_back(tok_->encode(t, true));
    Rng rng(5);
    for (int i = 0; i < 7; ++i) {  // random token prompts of awkward lengths
      std::vector<int32_t> p = {1};
      const int len = 1 + int(rng.below(40));
      for (int j = 0; j < len; ++j) p.push_back(3 + int32_t(rng.below(500)));
      prompts_.push_back(p);
    }
  }
  std::shared_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  std::vector<std::vector<int32_t>> prompts_;
};

void expect_same_as_alone(const std::shared_ptr<Model>& m, const std::vector<std::vector<int32_t>>& prompts,
                          const std::vector<Sequence>& done, int n) {
  ASSERT_EQ(done.size(), prompts.size());
  std::map<int64_t, const Sequence*> by_id;
  for (const Sequence& s : done) by_id[s.id()] = &s;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(i);
    const Sequence* s = by_id.at(int64_t(i) + 1);
    EXPECT_EQ(s->finish_reason, FinishReason::kLength);
    EXPECT_EQ(s->output, alone(m, prompts[i], n));
  }
}

TEST_F(BatchedStories, ContinuousBatchingWithChunkedPrefillGivesTheTokensOfOneAtATime) {
  EngineConfig c;
  c.threads = 2;
  c.max_num_seqs = 8;
  c.max_tokens_per_step = 24;  // forces prompts to be split into chunks and mixed with decodes
  c.kv_cache_bytes = int64_t(64) << 20;
  Engine e(model_, c);
  const int n = 40;
  std::vector<Sequence> done = e.run(greedy_requests(prompts_, n));
  expect_same_as_alone(model_, prompts_, done, n);
  EXPECT_EQ(e.scheduler().num_used_blocks(), 0);
  // The run really batched: some step had several sequences and some step mixed prefill and decode.
  int max_seqs = 0;
  bool mixed = false;
  for (const StepMetrics& st : e.metrics().steps()) {
    max_seqs = std::max(max_seqs, st.num_seqs);
    mixed |= st.num_prefill_tokens > 0 && st.num_decode_tokens > 0;
  }
  EXPECT_GE(max_seqs, 8);
  EXPECT_TRUE(mixed);
}

TEST_F(BatchedStories, PreemptionUnderATinyCacheGivesTheSameTokens) {
  EngineConfig c;
  c.threads = 1;
  c.max_num_seqs = 16;
  c.max_tokens_per_step = 64;
  c.block_size = 4;
  // Room for about 3 sequences of ~60 tokens: the scheduler must preempt and recompute.
  // One block of 4 tokens costs a page (K and V of 4 x head_dim f32) per layer and KV head.
  const ModelConfig& mc = model_->config;
  c.kv_cache_bytes = int64_t(48) * mc.n_layers * mc.n_kv_heads * 2 * 4 * mc.head_dim * int64_t(sizeof(float));
  Engine e(model_, c);
  const int n = 48;
  std::vector<Sequence> done = e.run(greedy_requests(prompts_, n));
  expect_same_as_alone(model_, prompts_, done, n);
  EXPECT_GT(e.scheduler().num_preemptions(), 0);
  EXPECT_EQ(e.scheduler().num_used_blocks(), 0);
}

TEST_F(BatchedStories, ReferenceSequencesThroughTheEngine) {
  // The stories260K references, all at once through the batched engine, stopping on BOS as
  // llama2.c does: every next_tokens sequence of the independent implementation reproduced.
  std::ifstream in(test::stories_dir() + "/reference_greedy.jsonl");
  std::vector<nlohmann::json> refs;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) refs.push_back(nlohmann::json::parse(line));
  ASSERT_FALSE(refs.empty());
  std::vector<Request> rs;
  for (size_t i = 0; i < refs.size(); ++i) {
    Request r;
    r.id = int64_t(i) + 1;
    r.prompt = refs[i].at("prompt_tokens").get<std::vector<int32_t>>();
    r.max_tokens = refs[i].at("steps").get<int>() - r.prompt_len() + 1;
    r.sampling.temperature = 0;
    r.stop.eos_ids = {1};
    rs.push_back(r);
  }
  EngineConfig c;
  c.threads = 2;
  c.max_tokens_per_step = 7;  // awkward chunking of the prompts
  c.kv_cache_bytes = int64_t(32) << 20;
  Engine e(model_, c);
  std::vector<Sequence> done = e.run(rs);
  ASSERT_EQ(done.size(), refs.size());
  for (const Sequence& s : done) {
    const auto& ref = refs[size_t(s.id() - 1)];
    std::vector<int32_t> next(s.request.prompt.begin() + 1, s.request.prompt.end());
    next.insert(next.end(), s.output.begin(), s.output.end());
    EXPECT_EQ(next, ref.at("next_tokens").get<std::vector<int32_t>>()) << ref.at("prompt");
  }
}

}  // namespace
}  // namespace loom
