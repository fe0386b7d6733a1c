// The single-rank engine against an independent implementation: stories260K greedy
// continuations from ../shared/models/stories260K/reference_greedy.jsonl, token for token.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "engine/generator.h"
#include "model/loader.h"
#include "model/tokenizer.h"
#include "test_util.h"

namespace loom {
namespace {

struct Reference {
  std::string prompt;
  int steps = 0;
  std::vector<int32_t> prompt_tokens, next_tokens;
  std::string text;
};

std::vector<Reference> read_references(const std::string& path) {
  std::vector<Reference> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    Reference r;
    r.prompt = j.at("prompt");
    r.steps = j.at("steps");
    r.prompt_tokens = j.at("prompt_tokens").get<std::vector<int32_t>>();
    r.next_tokens = j.at("next_tokens").get<std::vector<int32_t>>();
    r.text = j.at("text");
    out.push_back(r);
  }
  return out;
}

// Runs llama2.c's protocol: the reference's next_tokens are, for every position, the token that
// follows it: the forced prompt tokens first, then the greedy choices, ending early when BOS
// would be produced. Returns next_tokens in the same form.
std::vector<int32_t> run_reference_protocol(SingleRankModel& tf, const std::vector<int32_t>& prompt, int steps,
                                            int prefill_chunk) {
  GenerateOptions opts;
  opts.max_new_tokens = steps - int(prompt.size()) + 1;
  opts.prefill_chunk = prefill_chunk;
  opts.stop_ids = {1};
  GenerateResult r = generate(tf, prompt, opts);
  std::vector<int32_t> next(prompt.begin() + 1, prompt.end());
  next.insert(next.end(), r.tokens.begin(), r.tokens.end());
  return next;
}

class StoriesReference : public ::testing::Test {
 protected:
  void SetUp() override {
    LOOM_REQUIRE_SHARED();
    dir_ = test::stories_dir();
    model_ = load_model(dir_ + "/stories260K.bin");
    tok_ = Tokenizer::create(load_vocab(dir_ + "/stories260K.bin", dir_ + "/tok512.bin"));
    refs_ = read_references(dir_ + "/reference_greedy.jsonl");
    ASSERT_FALSE(refs_.empty());
  }
  std::string dir_;
  std::shared_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  std::vector<Reference> refs_;
};

TEST_F(StoriesReference, GreedyTokensMatchEveryReferenceSequence) {
  ThreadPool pool(2);
  SingleRankModel tf(model_, &pool, model_->config.max_seq_len + 1);
  for (const Reference& r : refs_) {
    SCOPED_TRACE(r.prompt);
    ASSERT_EQ(tok_->encode(r.prompt, true), r.prompt_tokens);
    // Whole-prompt prefill and one-token-at-a-time prefill must both match.
    for (int chunk : {512, 1}) {
      SCOPED_TRACE(chunk);
      EXPECT_EQ(run_reference_protocol(tf, r.prompt_tokens, r.steps, chunk), r.next_tokens);
    }
  }
}

TEST_F(StoriesReference, DecodedTextMatchesReference) {
  ThreadPool pool(1);
  SingleRankModel tf(model_, &pool, model_->config.max_seq_len + 1);
  for (const Reference& r : refs_) {
    SCOPED_TRACE(r.prompt);
    std::vector<int32_t> next = run_reference_protocol(tf, r.prompt_tokens, r.steps, 512);
    // The text is the decoding of every position's token after the first (BOS), without the
    // final stop token.
    std::vector<int32_t> ids = {r.prompt_tokens[0]};
    for (int32_t t : next)
      if (t != 1) ids.push_back(t);
    EXPECT_EQ(tok_->decode(ids), r.text);
  }
}

}  // namespace
}  // namespace loom
