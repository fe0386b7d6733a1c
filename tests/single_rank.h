// The single-rank reference every layout test compares against (header-only: included by the
// test areas that link the engine).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "engine/generator.h"
#include "engine/request.h"
#include "engine/rank_engine.h"
#include "kv/kv_oracle.h"
#include "model/synth.h"
#include "test_util.h"

namespace loom::test {

// Greedy tokens of one prompt through the single-sequence, single-rank path (generator.h).
inline std::vector<int32_t> alone(const std::shared_ptr<Model>& m, const std::vector<int32_t>& prompt, int n,
                                  std::vector<int32_t> stop_ids = {}) {
  ThreadPool pool(1);
  GenerateOptions o;
  o.max_new_tokens = n;
  o.stop_ids = std::move(stop_ids);
  return generate(m, &pool, prompt, o).tokens;
}

// Single-rank logits after `context`: top-1 minus top-2 (how close a greedy choice was).
inline double top2_gap(const std::shared_ptr<Model>& m, const std::vector<int32_t>& context) {
  ThreadPool pool(1);
  SingleRankModel tf(m, &pool, int64_t(context.size()));
  ForwardBatch fb;
  fb.tokens = context;
  fb.seqs.push_back(ForwardSeq{0, 0, int(context.size()), true});
  std::vector<float> logits;
  tf.forward(fb, logits);
  std::partial_sort(logits.begin(), logits.begin() + 2, logits.end(), std::greater<float>());
  return double(logits[0]) - double(logits[1]);
}

// Compares each prompt's output tokens (got: request id i + 1 -> tokens) with the single-rank ones;
// explains a difference with the single-rank top-2 logit gap at the first differing token.
inline void expect_tokens(const std::string& label, const std::shared_ptr<Model>& m,
                          const std::vector<std::vector<int32_t>>& prompts,
                          const std::vector<std::vector<int32_t>>& want,
                          const std::map<int64_t, std::vector<int32_t>>& got) {
  ASSERT_EQ(got.size(), prompts.size()) << label;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t>& g = got.at(int64_t(i) + 1);
    if (g == want[i]) continue;
    size_t k = 0;
    while (k < g.size() && k < want[i].size() && g[k] == want[i][k]) ++k;
    std::string why = "lengths differ";
    if (k < g.size() && k < want[i].size()) {
      std::vector<int32_t> ctx = prompts[i];
      ctx.insert(ctx.end(), want[i].begin(), want[i].begin() + long(k));
      why = cat("token ", k, ": ", g[k], " vs single-rank ", want[i][k], ", single-rank top-2 logit gap ",
                top2_gap(m, ctx));
    }
    ADD_FAILURE() << label << ", prompt " << i << " (" << prompts[i].size() << " tokens): " << why;
  }
}

// Greedy requests for `prompts`: ids 1, 2, ..., request i stops after max_tokens[i] tokens or at a
// token of `eos` (none given: EOS ignored); arrivals spacing_s apart from 0.
inline std::vector<Request> greedy_requests(const std::vector<std::vector<int32_t>>& prompts,
                                            const std::vector<int>& max_tokens,
                                            const std::vector<int32_t>& eos = {}, double spacing_s = 0.0) {
  std::vector<Request> rs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Request r;
    r.id = int64_t(i) + 1;
    r.prompt = prompts[i];
    r.max_tokens = max_tokens[i];
    r.sampling.temperature = 0;
    r.stop.eos_ids = eos;
    r.stop.ignore_eos = eos.empty();
    r.arrival_s = spacing_s * double(i);
    rs.push_back(r);
  }
  return rs;
}
// The same with n tokens for every prompt.
inline std::vector<Request> greedy_requests(const std::vector<std::vector<int32_t>>& prompts, int n,
                                            const std::vector<int32_t>& eos = {}, double spacing_s = 0.0) {
  return greedy_requests(prompts, std::vector<int>(prompts.size(), n), eos, spacing_s);
}

// Random prompts of awkward lengths (BOS first): the first seven lengths fixed, the rest drawn.
inline std::vector<std::vector<int32_t>> random_prompts(int n, int max_len, int vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<std::vector<int32_t>> ps;
  const int fixed[] = {1, 7, 17, 40, 3, 29, 12};
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p = {1};
    const int len = i < 7 ? std::min(fixed[i], max_len) : 1 + int(rng.below(uint64_t(max_len)));
    for (int j = 0; j < len; ++j) p.push_back(3 + int32_t(rng.below(uint64_t(vocab - 3))));
    ps.push_back(p);
  }
  return ps;
}

// The synthetic GQA model the layout tests share (gqa-24x6: 24 query heads, 6 KV heads, f32,
// seed 7), written once per test process.
inline const std::string& gqa_24x6_path() {
  static const std::string path = [] {
    SynthOptions o;
    o.shape = synth_shape("gqa-24x6");
    o.dtype = DType::F32;
    o.seed = 7;
    o.threads = 1;
    const std::string p = temp_dir() + "/gqa-24x6.gguf";
    write_synth_model(o, p);
    return p;
  }();
  return path;
}

}  // namespace loom::test

namespace loom::test {

// Follows the steps one rank runs (RankEngine::after_step) and checks, after each, that the rank's
// KV store holds exactly the cells each live sequence's home plan gives it: what the rank actually
// holds (KvStore::held_ranges, not a counter) against the tests' naive oracle (kv/kv_oracle.h,
// PLANS.md's rules read from the plan's degrees; not check_holdings or KvPlacement, which
// production runs). A sequence's home, from the step
// descriptors alone: the plan of the last step that ran it or swapped it in; a switch that is not
// kv_resident moves every sequence to the new plan, a kv_resident one (Seesaw) only those it lists.
// One per rank.
class HoldingsChecker {
 public:
  // Returns "" or the first difference.
  std::string after_step(RankEngine& e, const StepBatch& b, const std::vector<RequestId>& released) {
    for (RequestId id : released) len_.erase(id), home_.erase(id);
    for (const SeqExtent& x : b.swap_out) len_.erase(x.id), home_.erase(x.id);  // in the CPU tier, not the store
    const int plan = e.current();
    if (plan != last_plan_ && !b.kv_resident)
      for (auto& [id, h] : home_) h = plan;
    last_plan_ = plan;
    for (const SeqExtent& x : b.kv_seqs) home_[x.id] = plan;
    for (const SeqExtent& x : b.swap_in) len_[x.id] = x.n_tokens, home_[x.id] = plan;
    for (const ScheduledSeq& s : b.seqs) len_[s.seq_id] = s.start + s.num_tokens, home_[s.seq_id] = plan;
    std::map<int, std::vector<SeqExtent>> by_home;
    for (const auto& [id, n] : len_) by_home[home_.at(id)].push_back({id, n});
    ++checks;
    for (const auto& [h, seqs] : by_home)
      if (std::string bad = naive_holdings_diff(e.kv(), e.plans().plan(h), e.plans().shape(), e.world_rank(), seqs);
          !bad.empty())
        return cat("sequences of plan ", h, ": ", bad);
    return "";
  }
  // The plan whose placement holds `seq` (-1: not followed).
  int home(int64_t seq) const {
    auto it = home_.find(seq);
    return it == home_.end() ? -1 : it->second;
  }
  int64_t checks = 0;

 private:
  std::map<int64_t, int64_t> len_;
  std::map<int64_t, int> home_;
  int last_plan_ = 0;
};

}  // namespace loom::test

#include <mutex>

#include "engine/dist_engine.h"

namespace loom::test {

// HoldingsChecker on every rank of a local run: install() before run_distributed, then
// expect_clean() after it.
struct HoldingsCheck {
  std::vector<HoldingsChecker> ranks;
  std::mutex mu;
  std::string error;
  void install(DistOptions& o, int n_ranks) {
    ranks.assign(size_t(n_ranks), HoldingsChecker{});
    o.after_step = [this](int r, RankEngine& e, const StepBatch& b, const std::vector<RequestId>& rel) {
      const std::string bad = ranks[size_t(r)].after_step(e, b, rel);
      if (bad.empty()) return;
      std::lock_guard<std::mutex> lock(mu);
      if (error.empty()) error = cat("step ", b.step_index, " (plan ", b.plan_id, "): ", bad);
    };
  }
  void expect_clean(const std::string& label) {
    int64_t n = 0;
    for (const HoldingsChecker& c : ranks) n += c.checks;
    EXPECT_GT(n, 0) << label;
    EXPECT_EQ(error, "") << label;
  }
};

}  // namespace loom::test
