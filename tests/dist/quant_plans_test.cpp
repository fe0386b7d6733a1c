// Every plan on GGUF files quantized by llama.cpp's llama-quantize (../shared/models/tiny-quants:
// 4 query heads and 2 KV heads of 64, FFN 768) gives the single-rank greedy tokens, in fast and
// exact numerics. TP cuts Wo and W_down by columns in 32-weight units: at tp=2 each rank's Wo
// shard is 128 columns and its W_down shard 384, so the K-quant shards start and end inside
// 256-weight super-blocks (core/weight_view.h col_offset).
//
// Exactness classes:
//  - exact numerics: summation order (TP and the pipeline sum the same products, shard by shard):
//    greedy tokens equal (a difference explained by the single-rank top-2 logit gap).
//  - fast numerics: summation order, and through it the activation quantization: each 32-column
//    block is quantized as on one rank (shards are whole blocks), but a last-bit difference in an
//    activation can move one int8 rounding (by d = amax/127), so the plans' logits differ by up to
//    the fast mode's own quantization noise. Greedy tokens are equal up to the first position where
//    the single-rank top-2 gap is within twice that noise, measured there as the largest
//    |fast - exact| single-rank logit (both plans' fast logits lie that close to the exact ones);
//    a prompt's comparison stops at such a near tie, any other difference fails, and most tokens
//    must be compared.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "engine/dist_engine.h"
#include "model/loader.h"
#include "parallel/sharding.h"
#include "single_rank.h"
#include "test_util.h"

namespace loom {
namespace {

std::string quant_file(const std::string& name) {
  const std::string s = test::shared_dir();
  return s.empty() ? "" : s + "/models/tiny-quants/tiny-" + name + ".gguf";
}

std::map<int64_t, std::vector<int32_t>> run_plan(const std::string& plan, const std::shared_ptr<Model>& model,
                                                 std::vector<Request> requests) {
  DistOptions o;
  o.comm = "local";
  o.plan = plan;
  o.ranks = Plan::parse(plan).size();
  o.engine.max_tokens_per_step = 16;  // prompts prefilled in chunks beside decodes
  o.engine.max_num_seqs = 64;
  o.engine.kv_cache_bytes = int64_t(8) << 20;
  o.comm_options.timeout_s = 30;
  o.load_model = [model](int) { return model; };
  test::HoldingsCheck holdings;
  holdings.install(o, o.ranks);
  std::map<int64_t, std::vector<int32_t>> out;
  run_distributed(o, [&](DistEngine& e) {
    for (const Sequence& s : e.run(requests)) out[s.id()] = s.output;
  });
  holdings.expect_clean(plan);
  return out;
}

std::vector<float> single_rank_logits(const std::shared_ptr<Model>& m, const std::vector<int32_t>& ctx,
                                      kernels::Numerics num) {
  ThreadPool pool(1);
  SingleRankModel tf(m, &pool, int64_t(ctx.size()), 16, Plan::make_tp(1), num);
  ForwardBatch fb;
  fb.tokens = ctx;
  fb.seqs.push_back(ForwardSeq{0, 0, int(ctx.size()), true});
  std::vector<float> logits;
  tf.forward(fb, logits);
  return logits;
}

// The fast-mode comparison above; returns the tokens compared.
int64_t expect_tokens_fast(const std::string& label, const std::shared_ptr<Model>& m,
                           const std::vector<std::vector<int32_t>>& prompts, const std::vector<std::vector<int32_t>>& want,
                           const std::map<int64_t, std::vector<int32_t>>& got) {
  int64_t compared = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t>& g = got.at(int64_t(i) + 1);
    size_t k = 0;
    while (k < g.size() && k < want[i].size() && g[k] == want[i][k]) ++k;
    compared += int64_t(k);
    if (k == want[i].size() && g.size() == want[i].size()) continue;
    if (k >= g.size() || k >= want[i].size()) {
      ADD_FAILURE() << label << ", prompt " << i << ": lengths differ";
      continue;
    }
    std::vector<int32_t> ctx = prompts[i];
    ctx.insert(ctx.end(), want[i].begin(), want[i].begin() + long(k));
    const auto f = single_rank_logits(m, ctx, kernels::Numerics::fast);
    const auto e = single_rank_logits(m, ctx, kernels::Numerics::exact);
    double noise = 0.0;
    for (size_t v = 0; v < f.size(); ++v) noise = std::max(noise, std::fabs(double(f[v]) - double(e[v])));
    const double gap = double(f[size_t(want[i][k])]) - double(f[size_t(g[k])]);
    if (!(gap <= 2.0 * noise))
      ADD_FAILURE() << label << ", prompt " << i << " token " << k << ": " << g[k] << " vs single-rank " << want[i][k]
                    << ", single-rank gap " << gap << " exceeds twice the fast mode's noise " << noise;
  }
  return compared;
}

TEST(QuantPlans, TpShardsOfKQuantsStartInsideSuperBlocks) {
  const std::string path = quant_file("q4_k_m");
  if (path.empty() || !std::ifstream(path)) GTEST_SKIP() << "../shared/models/tiny-quants is missing";
  const auto m = load_model(path);
  const ModelShape shape = ModelShape::from(m->config, weight_block_elems(*m));
  EXPECT_EQ(shape.weight_block, 32);
  const WeightShards w = weight_shards(Plan::parse("tp=2"), shape, 1);
  EXPECT_EQ(w.wo_cols.begin, 128);
  EXPECT_EQ(w.down_cols.begin, 384);
  EXPECT_EQ(m->layers[0].wo.col_block(w.wo_cols.begin, w.wo_cols.size()).col_offset, 128);
}

// Every plan on the Q4_K_M file (Q4_K and Q6_K) and the Q4_0 file (32-weight blocks) in both modes;
// TP over the Q5_K_M and Q6_K files (their K-quant shards inside super-blocks) in fast mode.
TEST(QuantPlans, EveryPlanMatchesSingleRankInBothModes) {
  struct Case {
    const char* file;
    std::vector<kernels::Numerics> modes;
    std::vector<std::string> plans;
  };
  const std::vector<std::string> all = {"tp=2", "tp=4", "dp=2,tp=2", "sp=2,tp=2", "kvp=2,tpa=2", "pp=2",
                                        "tp=2,pp=2", "tp=2,weights=full"};
  const std::vector<Case> cases = {
      {"q4_k_m", {kernels::Numerics::fast, kernels::Numerics::exact}, all},
      {"q4_0", {kernels::Numerics::fast, kernels::Numerics::exact}, all},
      {"q5_k_m", {kernels::Numerics::fast}, {"tp=2", "tp=4"}},
      {"q6_k", {kernels::Numerics::fast}, {"tp=2", "tp=4"}},
  };
  for (const Case& c : cases) {
    const std::string path = quant_file(c.file);
    if (path.empty() || !std::ifstream(path)) GTEST_SKIP() << "../shared/models/tiny-quants is missing";
    const auto model = load_model(path);
    const auto prompts = test::random_prompts(6, 30, model->config.vocab_size, 41);
    for (kernels::Numerics num : c.modes) {
      const kernels::Numerics before = kernels::default_numerics();
      kernels::set_default_numerics(num);
      std::vector<std::vector<int32_t>> want;
      for (const auto& p : prompts) want.push_back(test::alone(model, p, 8));
      for (const std::string& plan : c.plans) {
        SCOPED_TRACE(cat(c.file, " ", kernels::numerics_name(num), " ", plan));
        const auto got = run_plan(plan, model, test::greedy_requests(prompts, std::vector<int>(prompts.size(), 8)));
        if (num == kernels::Numerics::exact) {
          test::expect_tokens(cat("plan ", plan), model, prompts, want, got);
        } else {
          const int64_t compared = expect_tokens_fast(cat("plan ", plan), model, prompts, want, got);
          EXPECT_GE(compared, int64_t(prompts.size()) * 8 * 3 / 4) << "most tokens compared before a near tie";
        }
      }
      kernels::set_default_numerics(before);
    }
  }
}

}  // namespace
}  // namespace loom
