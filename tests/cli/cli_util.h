// Helpers for tests that run the `loom` binary.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace loom::test {

struct CliResult {
  int rc = 0;
  std::string out;  // stdout + stderr, or stderr alone (run_loom_stderr)
};

// Runs `loom <args>` (args already shell-quoted where needed); output = stdout + stderr.
inline CliResult run_loom(const std::string& args) {
  CliResult r;
  r.rc = run_command(loom_bin() + " " + args, &r.out);
  return r;
}

// Runs `loom <args>` and keeps stderr only (stdout discarded).
inline CliResult run_loom_stderr(const std::string& args) {
  CliResult r;
  r.rc = run_command("( " + loom_bin() + " " + args + " 2>&1 1>/dev/null )", &r.out);
  return r;
}

// Non-empty lines of `s`.
inline std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string l; std::getline(is, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

// A user error: non-zero exit, exactly one line on stderr, starting "error:" and containing
// every string of `names` (the values the message must name).
inline void expect_one_line_error(const CliResult& r, const std::vector<std::string>& names) {
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_LT(r.rc, 2) << "internal error or crash: " << r.out;
  const auto ls = lines_of(r.out);
  ASSERT_EQ(ls.size(), 1u) << "expected one line, got:\n" << r.out;
  EXPECT_EQ(ls[0].rfind("error: ", 0), 0u) << ls[0];
  for (const std::string& n : names) EXPECT_NE(ls[0].find(n), std::string::npos) << "'" << n << "' not in: " << ls[0];
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  ASSERT_TRUE(f.good()) << path;
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// `loom synth` into dir/name (GGUF, f32 so it is exact and fast); returns the path.
inline std::string synth_model(const std::string& dir, const std::string& name, const std::string& shape_args) {
  const std::string path = dir + "/" + name;
  const CliResult r = run_loom("synth " + shape_args + " --dtype f32 -o " + path);
  EXPECT_EQ(r.rc, 0) << r.out;
  return path;
}

}  // namespace loom::test
