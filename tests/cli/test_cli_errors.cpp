// Foundation bad-input cases of `loom generate` and `loom info`: each must exit non-zero with
// one line on stderr naming the offending value (never a crash, never a stack of messages).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli_util.h"
#include "test_util.h"

namespace loom {
namespace {

using test::expect_one_line_error;
using test::run_loom;
using test::run_loom_stderr;

// A one-layer model with a 32-token context and a 512-token vocabulary.
constexpr const char* kSmallCtxDims = "--dims d=64,layers=1,heads=4,kv_heads=2,ffn=128,vocab=512,ctx=32";

TEST(CliErrors, GenerateMissingModelFile) {
  const std::string missing = test::temp_dir() + "/no-such-model.gguf";
  expect_one_line_error(run_loom_stderr("generate -m " + missing + " -n 4"), {missing});
}

TEST(CliErrors, GenerateTruncatedModelFile) {
  const std::string dir = test::temp_dir();
  const std::string full = test::synth_model(dir, "tiny.gguf", "--shape tiny");
  const std::string bytes = test::read_text(full);
  ASSERT_GT(bytes.size(), 1000u);
  const std::string cut = dir + "/cut.gguf";
  test::write_text(cut, bytes.substr(0, bytes.size() / 2));
  // The message names the first tensor whose data is missing and says the file is truncated.
  expect_one_line_error(run_loom_stderr("generate -m " + cut + " -n 4"), {"tensor '", "truncated"});
}

TEST(CliErrors, GeneratePromptLongerThanContext) {
  const std::string dir = test::temp_dir();
  const std::string model = test::synth_model(dir, "ctx32.gguf", kSmallCtxDims);
  std::string prompt;
  for (int i = 0; i < 40; ++i) prompt += "once upon a time ";
  expect_one_line_error(run_loom_stderr("generate -m " + model + " -n 1 -p '" + prompt + "'"), {"prompt", "32"});
}

TEST(CliErrors, GenerateTokensPastContext) {
  const std::string dir = test::temp_dir();
  const std::string model = test::synth_model(dir, "ctx32.gguf", kSmallCtxDims);
  expect_one_line_error(run_loom_stderr("generate -m " + model + " -n 40 -p 'once'"), {"-n 40", "32"});
  // Within the context the same command works (the limit is the context, not -n itself).
  const auto ok = run_loom("generate -m " + model + " -n 8 -p 'once'");
  EXPECT_EQ(ok.rc, 0) << ok.out;
}

TEST(CliErrors, GenerateTokenizerVocabularyDisagrees) {
  const std::string dir = test::temp_dir();
  const std::string model = test::synth_model(dir, "v512.gguf", kSmallCtxDims);
  const std::string other =
      test::synth_model(dir, "v1024.gguf", "--dims d=64,layers=1,heads=4,kv_heads=2,ffn=128,vocab=1024,ctx=32");
  expect_one_line_error(run_loom_stderr("generate -m " + model + " -t " + other + " -n 2 -p 'once'"),
                        {"1024", "512"});
}

TEST(CliErrors, InfoMissingFile) {
  const std::string missing = test::temp_dir() + "/nothing-here.gguf";
  expect_one_line_error(run_loom_stderr("info " + missing), {missing});
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// Plan sets and policies: one line each, before any weight loads (the model path does not even
// exist: the error is about the layout, not the file), on every command that takes a layout.
TEST(CliErrors, PlanSetAndPolicyRejectedBeforeTheModelLoads) {
  const std::string missing = test::temp_dir() + "/not-loaded.gguf";
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"--plan tp=2 --plan tp=4", {"tp=4", "4", "2", "same ranks"}},
      {"--plan tp=2 --policy sometimes", {"unknown --policy 'sometimes'"}},
      {"--plan tp=2 --plan dp=2 --policy cycle:0", {"cycle:0", ">= 1"}},
      {"--plan dp=2,tp=2,weights=owner", {"weights=owner", "SiDP"}},
      {"--plan dp=2,weights=owner,slots=1,lookahead=3", {"slots=1", "lookahead=3"}},
      {"--plan kvp=2,tpa=1,block=8", {"block of 8 tokens", "KV block of 16"}},
      {"--plan tp=2 --plan tp=2", {"tp=2", "twice"}},
      {"--plan tp=4 --policy shift", {"shift policy", "sp x tp", "tp=4"}},
  };
  for (const auto& [flags, words] : cases) {
    SCOPED_TRACE(flags);
    expect_one_line_error(run_loom_stderr("generate -m " + missing + " -n 4 " + flags), words);
    expect_one_line_error(run_loom_stderr("bench offline -m " + missing + " --synthetic batch -n 2 " + flags), words);
    expect_one_line_error(run_loom_stderr("serve -m " + missing + " --port 0 " + flags), words);
  }
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// Helix plans that cannot run on the model: one line naming the sizes (the tiny model: 4 query
// heads, 2 KV heads).
TEST(CliErrors, HelixLayoutsThatDoNotFit) {
  const std::string model = test::synth_model(test::temp_dir(), "tiny-helix.gguf", "--shape tiny");
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"--plan kvp=2,tpa=4", {"tpa=4", "num_key_value_heads=2"}},
      {"--plan kvp=3,tpa=1", {"kvp*tpa=3", "num_attention_heads=4"}},
      {"--plan kvp=2,tpa=1,block=0", {"block=0", ">= 1"}},
      {"--plan kvp=2,tpa=1,block=8", {"block of 8 tokens", "KV block of 16"}},
  };
  for (const auto& [flags, words] : cases) {
    SCOPED_TRACE(flags);
    expect_one_line_error(run_loom_stderr("generate -m " + model + " -n 4 " + flags), words);
  }
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// --device on generate, bench offline and serve: a bad name, and `cuda` where this machine cannot
// run it (no GPU visible, or a build without the CUDA backend; on a GPU machine the stage engine
// is not wired to the GPU yet and says so), are one line and a non-zero exit, before the model
// loads (a real model, so the device check is what fails).
TEST(CliErrors, DeviceFlagIsCheckedUpFront) {
  const std::string dir = test::temp_dir();
  const std::string model = test::synth_model(dir, "dev.gguf", kSmallCtxDims);
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"--device tpu", {"--device 'tpu'", "cpu or cuda"}},
      {"--device cuda", {"--device cuda: "}},
      {"--device cuda --plan tp=2", {"--device cuda: "}},
  };
  for (const auto& [flags, words] : cases) {
    SCOPED_TRACE(flags);
    expect_one_line_error(run_loom_stderr("generate -m " + model + " -n 2 -p once " + flags), words);
    expect_one_line_error(run_loom_stderr("bench offline -m " + model + " --synthetic batch -n 2 " + flags), words);
    expect_one_line_error(run_loom_stderr("serve -m " + model + " --port 0 " + flags), words);
  }
  // cpu is the default and runs.
  const auto ok = run_loom("generate -m " + model + " -n 2 -p once --device cpu");
  EXPECT_EQ(ok.rc, 0) << ok.out;
}

}  // namespace
}  // namespace loom
