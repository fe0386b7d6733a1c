// The device seam (device/device.h) on the CPU: every plan and plan set runs with each rank on a
// strict CPU device (tests/strict_device.h), whose memory faults on any access from outside a
// device op or the communicator's copies. So no stage, no part of the layer loop, of the KV
// migration or of the CPU tier reads or writes a rank's activations, K/V pages or buffers
// directly: what runs here runs on a GPU through the same code. Exactness class: same
// arithmetic as the plain CPU device (the strict device is the CPU device), so the greedy tokens
// equal the single-rank engine's wherever the plain run's do (tests/dist, tests/shift, ...).
#include <gtest/gtest.h>

#include <filesystem>

#include "model/loader.h"
#include "device_checks.h"
#include "plan_cases.h"
#include "strict_device.h"

namespace loom {
namespace {

void on_strict(DistOptions& o);

TEST(DeviceSeam, EveryPlanOnAStrictCpuDeviceGivesTheSingleRankTokens) {
  const std::string path = test::stories_dir() + "/stories260K.bin";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path << " (../shared missing)";
  std::shared_ptr<Model> model = load_model(path);
  const auto prompts = test::random_prompts(4, 20, model->config.vocab_size, 11);
  const int n = 6;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(test::alone(model, p, n));
  const int64_t ops_before = test::StrictMemory::get().ops();
  for (const test::PlanCase& pc : test::two_rank_plan_cases()) {
    const auto got = test::run_plan_case(pc, model, test::greedy_requests(prompts, n), on_strict);
    test::expect_tokens(pc.name + " (strict CPU device)", model, prompts, want, got);
  }
  // The device did the work (a run on the plain CPU device would leave these at zero).
  EXPECT_GT(test::StrictMemory::get().ops() - ops_before, 1000);
  EXPECT_GT(test::StrictMemory::get().mappings(), 10);
}

void on_strict(DistOptions& o) {
  o.make_device = [](int, ThreadPool* pool) { return std::make_unique<test::StrictCpuDevice>(pool); };
  o.rank_memory = test::strict_rank_memory();
}

// Data movement through the seam keeps bits (tests/device_checks.h; the same checks run on CUDA).
TEST(DeviceSeam, KvMigrationOnStrictDevicesKeepsEveryBit) {
  const std::string path = test::stories_dir() + "/stories260K.bin";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path << " (../shared missing)";
  test::migration_keeps_every_bit(
      load_model(path), [](int, ThreadPool* pool) { return std::make_unique<test::StrictCpuDevice>(pool); },
      test::strict_rank_memory());
}

TEST(DeviceSeam, SeesawSwapsOnStrictDevicesKeepEveryBit) {
  const std::string path = test::stories_dir() + "/stories260K.bin";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path << " (../shared missing)";
  test::seesaw_swaps_keep_every_bit(load_model(path), on_strict);
}

}  // namespace
}  // namespace loom
