// The single-rank GPU forward (gpu/cuda/forward.h) against the independent stories260K greedy
// references (../shared/models/stories260K/reference_greedy.jsonl), token for token. Exactness
// class: summation order only (f32 weights, cuBLAS Sgemm without TF32, f32 kernels), so the greedy
// tokens must equal the references (the CPU engine reproduces them too, test_engine). Skips
// without a GPU or without ../shared.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu/device.h"
#include "model/loader.h"
#include "test_util.h"

#if defined(LOOM_HAVE_CUDA)
#include "gpu/cuda/forward.h"
#endif

namespace loom {
namespace {

TEST(GpuForward, StoriesGreedyTokensMatchReferences) {
#if !defined(LOOM_HAVE_CUDA)
  GTEST_SKIP() << "built without the CUDA backend";
#else
  const std::string why = gpu::gpu_skip_reason();
  if (!why.empty()) GTEST_SKIP() << why;
  const std::string dir = test::stories_dir();
  if (!std::filesystem::exists(dir + "/reference_greedy.jsonl")) GTEST_SKIP() << "no " << dir;
  auto model = load_model(dir + "/stories260K.bin");
  const ModelConfig& c = model->config;
  kernels::RopeParams rope;
  rope.head_dim = c.head_dim;
  rope.theta = c.rope_theta;
  rope.interleaved = c.rope_style == RopeStyle::Interleaved;
  gpu::DeviceModel dm = gpu::DeviceModel::upload(*model);
  gpu::DeviceForward f(dm, rope, /*max_rows=*/512, /*block=*/16, /*kv_pages=*/64, /*f32_activations=*/true);
  std::ifstream in(dir + "/reference_greedy.jsonl");
  int checked = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    const auto prompt = j.at("prompt_tokens").get<std::vector<int32_t>>();
    const auto next = j.at("next_tokens").get<std::vector<int32_t>>();
    gpu::DeviceStepSeq s;
    s.seq = checked;
    s.tokens = prompt;
    int32_t tok = f.step({s}).at(0);
    int64_t pos = int64_t(prompt.size());
    for (std::size_t i = prompt.size() - 1; i < next.size(); ++i) {
      ASSERT_EQ(tok, next[i]) << j.at("prompt") << " step " << i;
      if (tok == 1) break;  // BOS ends a story (llama2.c)
      s.pos0 = pos++;
      s.tokens = {tok};
      tok = f.step({s}).at(0);
    }
    f.release(s.seq);
    ++checked;
  }
  EXPECT_GT(checked, 0);
#endif
}

}  // namespace
}  // namespace loom
