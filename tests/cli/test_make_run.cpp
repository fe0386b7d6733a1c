// `make run` builds the loom binary and nothing else (issue 34: a cold 2-core machine reaches the
// demo in about the time the loom target takes) and installs only what building loom needs. Read
// from `make -n run` (what make would run, nothing executed).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <memory>
#include <string>

namespace {

std::string make_dry_run(const std::string& target) {
  const std::string cmd = std::string("make -n -C ") + LOOM_SOURCE_DIR + " " + target + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  if (!p) return "";
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), p.get())) out.append(buf.data(), n);
  return out;
}

TEST(MakeRun, BuildsTheLoomTargetOnlyWithRuntimePackages) {
  const std::string out = make_dry_run("run");
  ASSERT_NE(out.find("run-default.sh"), std::string::npos) << out;
  EXPECT_NE(out.find("--target loom"), std::string::npos) << "make run builds the loom target alone:\n" << out;
  EXPECT_NE(out.find("-DLOOM_TESTS=OFF"), std::string::npos) << out;
  EXPECT_NE(out.find("-DLOOM_BENCH=OFF"), std::string::npos) << out;
  EXPECT_NE(out.find("install-deps.sh --runtime"), std::string::npos) << out;
  // No build command without a target (that would build every test and benchmark).
  size_t at = 0;
  while ((at = out.find("cmake --build", at)) != std::string::npos) {
    const std::string line = out.substr(at, out.find('\n', at) - at);
    EXPECT_NE(line.find("--target"), std::string::npos) << "an untargeted build in make run: " << line;
    at += line.size();
  }
}

TEST(MakeRun, HelpNamesTheTwoCommands) {
  const std::string out = make_dry_run("help");
  EXPECT_NE(out.find("make run"), std::string::npos) << out;
  EXPECT_NE(out.find("make test"), std::string::npos) << out;
}

}  // namespace
