// Issue 36: every numeric option of every `loom` subcommand has a stated range (cli/option_ranges.h),
// walked here from the binary itself (`loom option-ranges`), so an option added later is covered
// without editing this test. For each option:
//   - just past each end (and nan for reals, a fraction for integers): exit 1 with one line naming
//     the option, the value and the range, before anything runs (the model path does not exist:
//     a run that got past the parse would say so instead);
//   - at each end: accepted; where the value sizes threads, memory or a step (the engine commands,
//     the simulator's lengths), the command really runs at it and ends cleanly (exit 0, or one
//     clean error line that is not a range error; never a sanitizer report or a crash); where it
//     only sizes a workload (request counts, profile sweeps, a benchmark against a server) the
//     parse is checked (`loom --check-options`), not a run of that size.
// The environment variables with ranges (LOOM_THREADS, LOOM_COMM_TIMEOUT_S) the same way.
// Built sanitized in `make test` (ASan + UBSan), which is where the probe found the aborts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "cli_util.h"
#include "test_util.h"

namespace loom {
namespace {

using test::CliResult;
using test::lines_of;

struct Range {
  std::string command, option, lo, hi;
  bool integer = true, lo_open = false;
};

std::vector<Range> ranges_from_binary() {
  std::string text;
  EXPECT_EQ(test::run_command(test::loom_bin() + " option-ranges", &text), 0) << text;
  std::vector<Range> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f;
    std::istringstream ls(line);
    for (std::string x; std::getline(ls, x, '\t');) f.push_back(x);
    if (f.size() != 6) continue;
    out.push_back({f[0], f[1], f[2], f[3], f[4] == "int", f[5] == "1"});
  }
  return out;
}

std::string q(const std::string& s) { return "'" + s + "'"; }

// Values just past the ends of r; `kinds` adds the values of the wrong kind (a fraction for an
// integer option, nan and inf for a real one), checked once per command and kind (the check is
// the same code for every option; 400 sanitized process starts cost CI minutes).
std::vector<std::string> past_values(const Range& r, bool kinds) {
  std::vector<std::string> v;
  if (r.integer) {
    const long double lo = std::strtold(r.lo.c_str(), nullptr), hi = std::strtold(r.hi.c_str(), nullptr);
    char b[64];
    std::snprintf(b, sizeof b, "%.0Lf", lo - 1);
    v.push_back(b);
    if (r.hi == "18446744073709551615") {
      v.push_back("18446744073709551616");
    } else {
      std::snprintf(b, sizeof b, "%.0Lf", hi + 1);
      v.push_back(b);
    }
    if (kinds) v.push_back(r.lo + ".5");
  } else {
    const long double lo = std::strtold(r.lo.c_str(), nullptr), hi = std::strtold(r.hi.c_str(), nullptr);
    char b[64];
    if (r.lo_open) {
      v.push_back(r.lo);
    } else {
      std::snprintf(b, sizeof b, "%.12Lg", lo - std::max(1e-9L, std::fabs(lo) * 1e-9L));
      v.push_back(b);
    }
    std::snprintf(b, sizeof b, "%.12Lg", hi + std::max(1e-6L, std::fabs(hi) * 1e-9L));
    v.push_back(b);
    if (kinds) {
      v.push_back("nan");
      v.push_back("inf");
    }
  }
  return v;
}

// The ends themselves, as the command line writes them.
std::vector<std::string> end_values(const Range& r) {
  std::vector<std::string> v;
  auto fmt = [&](const std::string& s) {
    if (r.integer) return s;
    char b[64];
    std::snprintf(b, sizeof b, "%.17Lg", std::strtold(s.c_str(), nullptr));
    return std::string(b);
  };
  if (!r.lo_open) v.push_back(fmt(r.lo));
  v.push_back(fmt(r.hi));
  return v;
}

// A cheap valid command line per subcommand, as option -> value (the option under test replaces
// its own entry). Empty when the subcommand is checked by parse only.
std::map<std::string, std::string> base_args(const std::string& command, const std::string& stories,
                                             const std::string& tmp) {
  const std::string model = stories + "/stories260K.bin", tok = stories + "/tok512.bin";
  if (command == "generate")
    return {{"-m", model}, {"-t", tok}, {"-p", "Once"}, {"--max-tokens", "2"}, {"--threads", "1"}};
  if (command == "serve")
    return {{"-m", model}, {"-t", tok}, {"--port", "0"}, {"--threads", "1"}, {"--kv-cache-bytes", "4000000"}};
  if (command == "bench offline")
    return {{"-m", model},          {"-t", tok},           {"--synthetic", "batch"}, {"--num-requests", "2"},
            {"--prompt-len", "8"},  {"--output-len", "2"}, {"--threads", "1"},       {"--kv-cache-bytes", "4000000"},
            {"--quiet", ""}};
  if (command == "sim run")
    return {{"--synthetic", "batch"}, {"--num-requests", "4"}, {"--prompt-len", "64"}, {"--output-len", "4"}};
  if (command == "plan") return {{"--num-requests", "8"}, {"--input-tokens", "128"}, {"--output-tokens", "8"}};
  if (command == "synth") return {{"--shape", "tiny"}, {"--dtype", "f32"}, {"-o", tmp + "/synth.gguf"}, {"--threads", "1"}};
  return {};
}

// Options whose range end only sizes a workload: parse-checked at the end, not run.
bool workload_only(const Range& r) {
  static const std::set<std::string> opts = {"--num-requests", "--max-requests"};
  return r.command == "bench serve" || r.command == "sim validate-engine" || r.command == "profile" ||
         opts.count(r.option) > 0;
}

std::string command_line(const std::string& command, std::map<std::string, std::string> args,
                         const std::string& option, const std::string& value) {
  args.erase(option);
  std::string s = command;
  // Appended piece by piece: gcc 12 warns -Wrestrict (a false positive) on " " + string here.
  for (const auto& [k, v] : args) {
    s.append(1, ' ').append(k);
    if (!v.empty()) s.append(1, ' ').append(q(v));
  }
  s.append(1, ' ').append(option).append(1, ' ').append(q(value));
  return s;
}

bool clean(const std::string& out) {
  for (const char* bad : {"AddressSanitizer", "runtime error:", "LeakSanitizer", "internal error", "terminate called",
                          "Segmentation fault", "Aborted"})
    if (out.find(bad) != std::string::npos) return false;
  return true;
}

// Runs the commands two at a time (CI has 2 cores); results in order.
std::vector<CliResult> run_all(const std::vector<std::string>& shell_lines) {
  std::vector<CliResult> out(shell_lines.size());
  std::mutex mu;
  size_t next = 0;
  auto worker = [&] {
    for (;;) {
      size_t i;
      {
        std::lock_guard<std::mutex> l(mu);
        if (next >= shell_lines.size()) return;
        i = next++;
      }
      CliResult r;
      r.rc = test::run_command(shell_lines[i], &r.out);
      out[i] = std::move(r);
    }
  };
  auto a = std::async(std::launch::async, worker);
  worker();
  a.get();
  return out;
}

TEST(OptionRanges, EveryNumericOptionHasARangeAndTheParseEnforcesIt) {
  const std::vector<Range> ranges = ranges_from_binary();
  ASSERT_GT(ranges.size(), 60u) << "loom option-ranges listed too few options";
  const std::string tmp = test::temp_dir();
  const std::string missing_model = tmp + "/no-such-model.bin";
  std::vector<std::string> cmds, what;
  std::set<std::string> kinds_done;
  for (const Range& r : ranges) {
    std::map<std::string, std::string> args;
    // Required options, with values that would fail later (nothing may get that far).
    if (r.command == "generate" || r.command == "serve" || r.command == "bench offline" ||
        r.command == "sim validate-engine")
      args = {{"-m", missing_model}};
    if (r.command == "profile") args = {{"-o", tmp + "/no-profile"}};
    const bool kinds = kinds_done.insert(r.command + (r.integer ? " int" : " real")).second;
    for (const std::string& v : past_values(r, kinds)) {
      cmds.push_back("( " + test::loom_bin() + " " + command_line(r.command, args, r.option, v) +
                     " 2>&1 1>/dev/null )");
      what.push_back(r.command + " " + r.option + " " + v);
    }
  }
  const std::vector<CliResult> res = run_all(cmds);
  for (size_t i = 0; i < res.size(); ++i) {
    const CliResult& r = res[i];
    const auto ls = lines_of(r.out);
    EXPECT_EQ(r.rc, 1) << what[i] << ": " << r.out;
    ASSERT_EQ(ls.size(), 1u) << what[i] << ": " << r.out;
    const std::string option = what[i].substr(0, what[i].rfind(' '));
    const std::string opt_name = option.substr(option.rfind(' ') + 1);
    const std::string value = what[i].substr(what[i].rfind(' ') + 1);
    EXPECT_EQ(ls[0].rfind("error: " + opt_name + ": ", 0), 0u) << what[i] << ": " << ls[0];
    EXPECT_NE(ls[0].find(value), std::string::npos) << what[i] << ": " << ls[0];
    const bool ranged = ls[0].find("out of range [") != std::string::npos ||
                        ls[0].find("out of range (") != std::string::npos;
    const bool kind = ls[0].find("is not an integer") != std::string::npos ||
                      ls[0].find("is not a finite number") != std::string::npos;
    EXPECT_TRUE(ranged || kind) << what[i] << ": " << ls[0];
    EXPECT_EQ(ls[0].find(missing_model), std::string::npos) << "got past the parse: " << ls[0];
  }
}

TEST(OptionRanges, AtTheRangeEndsCommandsRunCleanly) {
  const std::string stories = test::stories_dir();
  if (stories.empty()) GTEST_SKIP() << "../shared is missing beside the checkout; the runs need stories260K";
  const std::vector<Range> ranges = ranges_from_binary();
  const std::string tmp = test::temp_dir();
  std::vector<std::string> cmds, what;
  int n = 0;
  for (const Range& r : ranges) {
    const auto base = base_args(r.command, stories, tmp);
    for (const std::string& v : end_values(r)) {
      const std::string out = tmp + "/end" + std::to_string(n++) + ".txt";
      if (workload_only(r) || base.empty()) {
        std::map<std::string, std::string> args = base;
        if (r.command == "generate" || r.command == "serve" || r.command == "bench offline" ||
            r.command == "sim validate-engine")
          args["-m"] = stories + "/stories260K.bin";
        if (r.command == "profile") args["-o"] = tmp + "/profile";
        cmds.push_back("( " + test::loom_bin() + " --check-options " + command_line(r.command, args, r.option, v) +
                       " 2>&1 )");
      } else if (r.command == "serve") {
        // Start, wait for it to listen (or to end with an error), stop it with SIGINT.
        cmds.push_back("( " + test::loom_bin() + " " + command_line(r.command, base, r.option, v) + " >" + out +
                       " 2>&1 & pid=$!; i=0; while [ $i -lt 1200 ]; do grep -q listening " + out +
                       " && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; i=$((i+1)); done; kill -INT $pid "
                       "2>/dev/null; wait $pid; rc=$?; cat " + out + "; exit $rc )");
      } else {
        cmds.push_back("( timeout 300 " + test::loom_bin() + " " + command_line(r.command, base, r.option, v) +
                       " 2>&1 >/dev/null )");
      }
      what.push_back(r.command + " " + r.option + " " + v);
    }
  }
  const std::vector<CliResult> res = run_all(cmds);
  for (size_t i = 0; i < res.size(); ++i) {
    const CliResult& r = res[i];
    const std::string option = what[i].substr(0, what[i].rfind(' '));
    const std::string opt_name = option.substr(option.rfind(' ') + 1);
    EXPECT_TRUE(r.rc == 0 || r.rc == 1) << what[i] << ": exit " << r.rc << ": " << r.out.substr(0, 2000);
    EXPECT_TRUE(clean(r.out)) << what[i] << ": " << r.out.substr(0, 2000);
    EXPECT_EQ(r.out.find(opt_name + ": "), std::string::npos) << what[i] << " is refused at its own range end: " << r.out;
    if (r.rc == 1) {
      // A clean refusal for another reason (the plan needs other ranks, the block is larger than
      // the context...): one "error:" line.
      bool has_error_line = false;
      for (const std::string& l : lines_of(r.out)) has_error_line = has_error_line || l.rfind("error: ", 0) == 0;
      EXPECT_TRUE(has_error_line) << what[i] << ": " << r.out.substr(0, 2000);
    }
  }
}

TEST(OptionRanges, EnvironmentVariablesAreChecked) {
  const std::string missing_model = test::temp_dir() + "/no-such-model.bin";
  struct Case {
    std::string env, says;
  };
  const std::vector<Case> bad = {
      {"LOOM_COMM_TIMEOUT_S=1e10", "LOOM_COMM_TIMEOUT_S: 1e10 is out of range (0, 604800]"},
      {"LOOM_COMM_TIMEOUT_S=0", "LOOM_COMM_TIMEOUT_S: 0 is out of range"},
      {"LOOM_COMM_TIMEOUT_S=nan", "LOOM_COMM_TIMEOUT_S: nan is not a finite number"},
      {"LOOM_COMM_TIMEOUT_S=-1", "LOOM_COMM_TIMEOUT_S: -1 is out of range"},
      {"LOOM_THREADS=100000", "LOOM_THREADS: 100000 is out of range [1, "},
      {"LOOM_THREADS=0", "LOOM_THREADS: 0 is out of range"},
      {"LOOM_THREADS=abc", "LOOM_THREADS: 'abc' is not an integer"},
  };
  for (const Case& c : bad) {
    CliResult e;
    e.rc = test::run_command("( env " + c.env + " " + test::loom_bin() + " generate -m " + missing_model +
                                 " -n 2 --ranks 2 --plan tp=2 2>&1 1>/dev/null )",
                             &e.out);
    test::expect_one_line_error(e, {c.says});
  }
  // At the ends: accepted (the run then fails on the missing model, a different error).
  for (const char* env : {"LOOM_COMM_TIMEOUT_S=604800", "LOOM_COMM_TIMEOUT_S=0.001", "LOOM_THREADS=1"}) {
    CliResult e;
    e.rc = test::run_command("( env " + std::string(env) + " " + test::loom_bin() + " generate -m " + missing_model +
                                 " -n 2 2>&1 1>/dev/null )",
                             &e.out);
    test::expect_one_line_error(e, {missing_model});
  }
}

}  // namespace
}  // namespace loom
