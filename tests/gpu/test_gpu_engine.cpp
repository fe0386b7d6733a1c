// The engine on the GPU: loom's one forward (the stages of engine/stage.h and the layer loop of
// engine/rank_forward.h) over the CUDA device, with ranks as threads sharing GPU 0 (their
// communicator moves device memory, gpu/cuda/shared_gpu.h). Skips with the reason without a GPU.
// Exactness classes:
//   - stories260K (f32 weights: cuBLAS Sgemm without TF32, f32 kernels): summation order only, so
//     the greedy tokens of every plan and plan set equal the independent references
//     (reference_greedy.jsonl) and the single-rank CPU engine's;
//   - a synthetic GQA model in bf16 (activations rounded to bf16 for the tensor cores, the GPU's one
//     deliberate numerics change, gpu/cuda/gemm.h): the single-rank GPU engine's tokens equal the
//     CPU engine's up to the first token where the CPU's top-2 logit margin is under the stated
//     bound, and every plan's tokens equal the single-rank GPU engine's likewise;
//   - KV migration between device stores and Seesaw's swaps through the CPU tier: data movement,
//     the same bits (page contents compared before and after).
#include <gtest/gtest.h>

#include "gpu/device.h"

#if defined(LOOM_HAVE_CUDA)
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/local.h"
#include "gpu/cuda/cuda_device.h"
#include "gpu/cuda/shared_gpu.h"
#include "kv/kv_tier.h"
#include "model/loader.h"
#include "model/random_model.h"
#include "model/synth.h"
#include "device_checks.h"
#include "plan_cases.h"
#endif

namespace loom {
namespace {

#if !defined(LOOM_HAVE_CUDA)

TEST(GpuEngine, SkippedWithoutCuda) { GTEST_SKIP() << "built without the CUDA backend (LOOM_CUDA=OFF or no toolkit)"; }

#else

class GpuEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = gpu::gpu_skip_reason();
    if (!why.empty()) GTEST_SKIP() << why;
  }
  static std::shared_ptr<Model> stories() {
    const std::string path = test::stories_dir() + "/stories260K.bin";
    if (!std::filesystem::exists(path)) return nullptr;
    return load_model(path);
  }
};

void on_cuda(DistOptions& o) {
  o.device = DeviceKind::Cuda;
  o.engine.kv_cache_bytes = int64_t(64) << 20;
}

TEST_F(GpuEngine, StoriesReferenceGreedyOnTheGpu) {
  auto model = stories();
  if (!model) GTEST_SKIP() << "no stories260K (../shared missing)";
  std::vector<std::vector<int32_t>> prompts, want;
  std::vector<int> max_tokens;
  std::ifstream in(test::stories_dir() + "/reference_greedy.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    prompts.push_back(j.at("prompt_tokens").get<std::vector<int32_t>>());
    want.push_back(j.at("next_tokens").get<std::vector<int32_t>>());
    max_tokens.push_back(j.at("steps").get<int>() - int(prompts.back().size()) + 1);
  }
  ASSERT_FALSE(prompts.empty());
  for (const char* plan : {"tp=1", "tp=2", "sp=2", "kvp=2,tpa=1"}) {
    test::PlanCase pc{plan, {plan}};
    const auto got = test::run_plan_case(pc, model, test::greedy_requests(prompts, max_tokens, {1}), [](DistOptions& o) {
      on_cuda(o);
      o.engine.max_model_len = 512;
      o.engine.max_tokens_per_step = 64;
    });
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      std::vector<int32_t> next(prompts[i].begin() + 1, prompts[i].end());
      const auto& out = got.at(int64_t(i) + 1);
      next.insert(next.end(), out.begin(), out.end());
      EXPECT_EQ(next, want[i]) << plan << ", reference " << i;
    }
  }
}

TEST_F(GpuEngine, EveryPlanAndPlanSetGivesTheCpuEngineTokens) {
  auto model = stories();
  if (!model) GTEST_SKIP() << "no stories260K (../shared missing)";
  const auto prompts = test::random_prompts(4, 20, model->config.vocab_size, 11);
  const int n = 6;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(test::alone(model, p, n));
  for (const test::PlanCase& pc : test::two_rank_plan_cases()) {
    SCOPED_TRACE(pc.name);
    const auto got = test::run_plan_case(pc, model, test::greedy_requests(prompts, n), on_cuda);
    test::expect_tokens(pc.name + " (cuda)", model, prompts, want, got);
  }
}

// bf16 weights on the tensor cores: the GPU's single rank against the CPU engine, where the CPU's
// margin allows, then every plan against the GPU's single rank.
TEST_F(GpuEngine, SyntheticGqaBf16PlansMatchTheSingleRankGpuEngine) {
  ModelConfig c = synth_shape("gqa-24x6").config;
  auto model = random_model(c, DType::BF16, 7);
  const auto prompts = test::random_prompts(4, 24, c.vocab_size, 5);
  const int n = 8;
  // The margin under which bf16 activations may flip a greedy choice: the GEMM bound's 2^-8
  // relative rounding of x on every product, over the model's logits (measured here: the CPU's
  // logits of this model reach about 10; take 0.05 absolute).
  const double margin = 0.05;
  auto single = test::run_plan_case({"tp=1", {"tp=1"}}, model, test::greedy_requests(prompts, n), on_cuda);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t> cpu = test::alone(model, prompts[i], n);
    const auto& g = single.at(int64_t(i) + 1);
    std::vector<int32_t> ctx = prompts[i];
    for (std::size_t k = 0; k < cpu.size() && k < g.size(); ++k) {
      if (g[k] != cpu[k]) {
        EXPECT_LT(test::top2_gap(model, ctx), margin) << "prompt " << i << " token " << k << ": the GPU chose " << g[k]
                                                      << ", the CPU " << cpu[k] << " by a margin over the bound";
        break;
      }
      ctx.push_back(cpu[k]);
    }
  }
  for (const char* plan : {"tp=2", "sp=2", "dp=2", "pp=2", "kvp=2,tpa=1"}) {
    const auto got = test::run_plan_case({plan, {plan}}, model, test::greedy_requests(prompts, n), on_cuda);
    for (std::size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(got.at(int64_t(i) + 1), single.at(int64_t(i) + 1)) << plan << " prompt " << i;
  }
}

TEST_F(GpuEngine, KvMigrationBetweenDeviceStoresKeepsEveryBit) {
  auto model = stories();
  if (!model) GTEST_SKIP() << "no stories260K (../shared missing)";
  test::migration_keeps_every_bit(model, [](int, ThreadPool*) { return gpu::make_device(DeviceKind::Cuda, 0, nullptr); },
                                  gpu::shared_gpu_memory(0));
}

TEST_F(GpuEngine, SeesawSwapsThroughTheCpuTierKeepEveryBit) {
  auto model = stories();
  if (!model) GTEST_SKIP() << "no stories260K (../shared missing)";
  test::seesaw_swaps_keep_every_bit(model, on_cuda);
}

#endif

}  // namespace
}  // namespace loom
