// Issue 34 (deliverables 4 and 5): the defaults and messages a vLLM or llama.cpp user expects of
// the `loom` command: --version, "did you mean" for unknown flags and plan keys, --max-tokens,
// size suffixes on byte options, an uneven pipeline split, a default CPU tier for Seesaw, and
// `loom plan` failing (non-zero, with a reason) when it has no answer.
#include <gtest/gtest.h>

#include <string>

#include "cli_util.h"
#include "test_util.h"

namespace loom {
namespace {

using test::CliResult;
using test::expect_one_line_error;
using test::lines_of;
using test::run_loom;
using test::run_loom_stderr;

TEST(CliDefaults, VersionPrintsTheProjectVersionAndExitsZero) {
  const CliResult r = run_loom("--version");
  EXPECT_EQ(r.rc, 0) << r.out;
  const auto ls = lines_of(r.out);
  ASSERT_EQ(ls.size(), 1u) << r.out;
  // "loom X.Y": the project() version of CMakeLists.txt (a digit after the name, a dot in it).
  ASSERT_EQ(ls[0].rfind("loom ", 0), 0u) << ls[0];
  ASSERT_GT(ls[0].size(), 5u) << ls[0];
  EXPECT_TRUE(ls[0][5] >= '0' && ls[0][5] <= '9') << ls[0];
  EXPECT_NE(ls[0].find('.'), std::string::npos) << ls[0];
}

}  // namespace
}  // namespace loom
