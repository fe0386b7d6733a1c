// Issue 34 (deliverables 4 and 5): the defaults and messages a vLLM or llama.cpp user expects of
// the `loom` command: --version, "did you mean" for unknown flags and plan keys, --max-tokens,
// size suffixes on byte options, an uneven pipeline split, a default CPU tier for Seesaw, and
// `loom plan` failing (non-zero, with a reason) when it has no answer.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

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

// The suggested name, taken from "did you mean NAME?" in `line` ("" when none).
std::string suggestion(const std::string& line) {
  const std::string k = "did you mean ";
  const size_t a = line.find(k);
  if (a == std::string::npos) return {};
  const size_t b = line.find('?', a);
  return b == std::string::npos ? std::string() : line.substr(a + k.size(), b - a - k.size());
}

// True when `help` (a command's --help) lists the option `name` as a whole word.
bool help_lists(const std::string& help, const std::string& name) {
  for (size_t at = help.find(name); at != std::string::npos; at = help.find(name, at + 1)) {
    const char before = at == 0 ? ' ' : help[at - 1];
    const char after = at + name.size() < help.size() ? help[at + name.size()] : ' ';
    const bool word_before = before == ' ' || before == ',';
    const bool word_after = after == ' ' || after == ',' || after == '\n';
    if (word_before && word_after) return true;
  }
  return false;
}

// Help fits the terminal: at COLUMNS=80 every line of every command's help is at most 80
// characters unless it is one unbreakable token; --plan's help names the Helix and SiDP keys;
// no help text points into the source tree.
TEST(CliDefaults, HelpIsWrappedAndNamesEveryPlanKind) {
  for (const std::string cmd : {"", "generate", "serve", "bench offline", "bench serve", "sim run", "sim experiment",
                                "sim validate", "plan", "profile", "synth", "quantize", "info"}) {
    CliResult r;
    r.rc = test::run_command("COLUMNS=80 " + test::loom_bin() + " " + cmd + " --help", &r.out);
    EXPECT_EQ(r.rc, 0) << cmd;
    for (const std::string& line : lines_of(r.out)) {
      const size_t first = line.find_first_not_of(' ');
      const bool one_token = line.find(' ', first) == std::string::npos;
      if (!one_token) {
        EXPECT_LE(line.size(), 80u) << cmd << ": " << line;
      }
      EXPECT_FALSE(std::regex_search(line, std::regex(R"([a-z_]+/[a-z_]+\.(h|cpp)\b)"))) << cmd << ": " << line;
    }
  }
  const CliResult g = run_loom("generate --help");
  for (const char* key : {"kvp", "tpa", "weights=full|owner", "layers=", "sp (Ulysses"})
    EXPECT_NE(g.out.find(key), std::string::npos) << key;
}

TEST(CliDefaults, UnknownFlagsSuggestAFlagTheCommandHas) {
  const std::string missing = test::temp_dir() + "/no-such-model.bin";
  struct Case {
    std::string command, args, unknown, expected;
  };
  const std::vector<Case> cases = {
      {"generate", "-m " + missing + " --thread 2", "--thread", "--threads"},
      {"generate", "-m " + missing + " --temprature 0.5", "--temprature", "--temperature"},
      {"bench offline", "-m " + missing + " --synthetic batch --num-request 2", "--num-request", "--num-requests"},
      {"sim run", "--synthetic batch --promt-len 8", "--promt-len", "--prompt-len"},
      {"serve", "-m " + missing + " --prot 8000", "--prot", "--port"},
      // A misspelt required option is reported as unknown, not as "--model is required".
      {"plan", "--modle llama-70b", "--modle", "--model"},
  };
  for (const Case& c : cases) {
    const CliResult r = run_loom_stderr(c.command + " " + c.args);
    expect_one_line_error(r, {"loom " + c.command + " has no option " + c.unknown});
    const std::string s = suggestion(r.out);
    EXPECT_EQ(s, c.expected) << r.out;
    const CliResult help = run_loom(c.command + " --help");
    EXPECT_EQ(help.rc, 0) << help.out;
    EXPECT_TRUE(help_lists(help.out, s)) << "'" << s << "' is not an option of loom " << c.command << ":\n" << help.out;
  }
  // Nothing close: no suggestion, the way to the list instead.
  const CliResult far = run_loom_stderr("generate -m " + missing + " --zzzzzz 1");
  expect_one_line_error(far, {"loom generate has no option --zzzzzz", "loom generate --help"});
  EXPECT_EQ(suggestion(far.out), "") << far.out;
  // A misspelt subcommand.
  expect_one_line_error(run_loom_stderr("generat -m x"), {"loom has no command 'generat' (did you mean generate?)"});
  expect_one_line_error(run_loom_stderr("bench offlin"), {"loom bench has no command 'offlin' (did you mean offline?)"});
}

TEST(CliDefaults, UnknownPlanKeysSuggestAKey) {
  const std::string missing = test::temp_dir() + "/no-such-model.bin";
  // The plan is parsed before the model loads: the missing model is never reached.
  expect_one_line_error(run_loom_stderr("generate -m " + missing + " --ranks 2 --plan pp=2,layer=1+1 -n 2"),
                        {"unknown key 'layer' (did you mean layers?)"});
  expect_one_line_error(run_loom_stderr("generate -m " + missing + " --ranks 2 --plan dp=2,wieghts=owner -n 2"),
                        {"unknown key 'wieghts' (did you mean weights?)"});
  const CliResult far = run_loom_stderr("generate -m " + missing + " --ranks 2 --plan xyz=2 -n 2");
  expect_one_line_error(far, {"unknown key 'xyz'", "keys: tp, tpa, sp, kvp, dp, pp, layers"});
  EXPECT_EQ(suggestion(far.out), "") << far.out;
}

// The generated ids of a `--print-ids` run ("ids: PROMPT | GENERATED").
std::string generated_ids(const std::string& out) {
  for (const std::string& l : lines_of(out))
    if (l.rfind("ids:", 0) == 0 && l.find(" | ") != std::string::npos) return l.substr(l.find(" | ") + 3);
  return {};
}

size_t count_words(const std::string& s) {
  size_t n = 0;
  bool in = false;
  for (char c : s) {
    if (c != ' ' && !in) ++n;
    in = c != ' ';
  }
  return n;
}

TEST(CliDefaults, MaxTokensIsGeneratesOutputLength) {
  const std::string missing = test::temp_dir() + "/no-such-model.bin";
  expect_one_line_error(run_loom_stderr("generate -m " + missing + " --max-tokns 3"),
                        {"loom generate has no option --max-tokns (did you mean --max-tokens?)"});
  // Its range is -n's (one option under two names).
  expect_one_line_error(run_loom_stderr("generate -m " + missing + " --max-tokens -1"), {"--max-tokens: -1 is out of range"});
  // The other commands' names for the same lengths answer to the names vLLM's benchmarks use too.
  const CliResult off = run_loom("bench offline --help");
  EXPECT_TRUE(help_lists(off.out, "--input-len")) << off.out;
  const CliResult srv = run_loom("bench serve --help");
  EXPECT_TRUE(help_lists(srv.out, "--prompt-len")) << srv.out;
  const CliResult sim = run_loom("sim run --help");
  EXPECT_TRUE(help_lists(sim.out, "--shift-threshold")) << sim.out;
  EXPECT_TRUE(help_lists(sim.out, "--input-len")) << sim.out;

  const std::string stories = test::stories_dir();
  if (stories.empty()) GTEST_SKIP() << "../shared is missing beside the checkout; the runs need stories260K";
  const std::string base = "generate -m " + stories + "/stories260K.bin -t " + stories +
                           "/tok512.bin -p 'Once upon a time' --threads 1 --print-ids ";
  const CliResult a = run_loom(base + "--max-tokens 6");
  const CliResult b = run_loom(base + "-n 6");
  ASSERT_EQ(a.rc, 0) << a.out;
  ASSERT_EQ(b.rc, 0) << b.out;
  EXPECT_EQ(count_words(generated_ids(a.out)), 6u) << a.out;
  EXPECT_EQ(generated_ids(a.out), generated_ids(b.out));
}

TEST(CliDefaults, ByteOptionsTakeSizeSuffixes) {
  const std::string missing = test::temp_dir() + "/no-such-model.bin";
  // Parsed (and range-checked) before anything loads: the missing model is never reached.
  for (const char* v : {"64M", "64MiB", "64mb", "65536k", "4GiB", "1.5G", "67108864"}) {
    const CliResult r = run_loom("--check-options serve -m " + missing + " --kv-cache-bytes " + v +
                                 " --max-inflight-bytes " + v + " --rank-memory-bytes 0 --cpu-kv-bytes 512K");
    EXPECT_EQ(r.rc, 0) << v << ": " << r.out;
  }
  // A bad suffix or a fraction of a byte: one line naming the option and the value.
  for (const char* v : {"64X", "64Mx", "M", "0.5", "1e6", "64 M"}) {
    expect_one_line_error(run_loom_stderr("--check-options serve -m " + missing + " --kv-cache-bytes '" + v + "'"),
                          {"--kv-cache-bytes: '" + std::string(v) + "' is not an integer number of bytes", "64M"});
  }
  // The range applies to the bytes: 0.5K is 512, below --max-body-bytes' 1024.
  expect_one_line_error(run_loom_stderr("--check-options serve -m " + missing + " --max-body-bytes 0.5K"),
                        {"--max-body-bytes: 0.5K (512 bytes) is out of range [1024, 268435456]"});
  EXPECT_EQ(run_loom("--check-options serve -m " + missing + " --max-body-bytes 1K").rc, 0);
  expect_one_line_error(run_loom_stderr("--check-options serve -m " + missing + " --kv-cache-bytes 999999T"),
                        {"--kv-cache-bytes: 999999T (1099510528264372224 bytes) is out of range [0, "});

  // What the engine gets: 4M is 4194304 bytes (bench offline's JSON reports its KV cache size; a
  // few MiB, below the cap of max_num_seqs x context).
  const std::string stories = test::stories_dir();
  if (stories.empty()) GTEST_SKIP() << "../shared is missing beside the checkout; the runs need stories260K";
  const std::string dir = test::temp_dir();
  for (const char* v : {"4M", "4MiB", "4096k", "4194304", "4000000"}) {
    const std::string json = dir + "/bench.json";
    const CliResult r = run_loom("bench offline -m " + stories + "/stories260K.bin -t " + stories +
                                 "/tok512.bin --synthetic batch --num-requests 2 --prompt-len 8 --output-len 2 "
                                 "--threads 1 --quiet --output-json " + json + " --kv-cache-bytes " + v);
    ASSERT_EQ(r.rc, 0) << v << ": " << r.out;
    const nlohmann::json j = nlohmann::json::parse(test::read_text(json));
    const int64_t got = j.at("engine").at("kv_cache_bytes").get<int64_t>();
    // 4000000 (decimal mega) is not 4M: the store rounds it down to whole blocks, below 4194304.
    if (std::string(v) == "4000000") {
      EXPECT_LT(got, 4194304) << v;
      EXPECT_GT(got, 3900000) << v;
    } else {
      EXPECT_EQ(got, 4194304) << v;
    }
  }
}

TEST(CliDefaults, UnevenPipelineSplitsItselfAndMatchesOneRank) {
  const std::string stories = test::stories_dir();
  if (stories.empty()) GTEST_SKIP() << "../shared is missing beside the checkout; the runs need stories260K";
  const std::string base = "generate -m " + stories + "/stories260K.bin -t " + stories +
                           "/tok512.bin -p 'Once upon a time' --max-tokens 12 --threads 1 --print-ids ";
  const CliResult one = run_loom(base);
  ASSERT_EQ(one.rc, 0) << one.out;
  ASSERT_EQ(count_words(generated_ids(one.out)), 12u) << one.out;
  // stories260K has 5 layers: pp=3 is 2+2+1 and pp=2 is 3+2 (the first stages one more), printed.
  const struct {
    int pp;
    std::string split;
  } cases[] = {{3, "2+2+1"}, {2, "3+2"}};
  for (const auto& c : cases) {
    const CliResult r = run_loom(base + "--ranks " + std::to_string(c.pp) + " --plan pp=" + std::to_string(c.pp));
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find("pp=" + std::to_string(c.pp) + " does not divide the model's 5 layers: stages of " + c.split),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("plans: pp=" + std::to_string(c.pp) + ",layers=" + c.split), std::string::npos) << r.out;
    EXPECT_EQ(generated_ids(r.out), generated_ids(one.out)) << "pp=" << c.pp << " greedy tokens differ from one rank";
  }
  // Sizes at start also for people: "KV store N bytes (X MiB)", X being N in units of 1024.
  {
    const CliResult r = run_loom(base + "--ranks 3 --plan pp=3");
    const std::regex kv("KV store ([0-9]+) bytes \\(([0-9.]+) (KiB|MiB|GiB)\\)");
    int seen = 0;
    for (std::sregex_iterator it(r.out.begin(), r.out.end(), kv), end; it != end; ++it, ++seen) {
      const double n = std::stod((*it)[1]), x = std::stod((*it)[2]);
      const double unit = (*it)[3] == "KiB" ? 1024.0 : (*it)[3] == "MiB" ? 1048576.0 : 1073741824.0;
      EXPECT_NEAR(n / unit, x, 0.05 + 1e-9) << (*it)[0];
    }
    EXPECT_EQ(seen, 3) << r.out;
  }
  // A split given in the plan is kept (and not reported as chosen).
  const CliResult given = run_loom(base + "--ranks 2 --plan pp=2,layers=1+4");
  ASSERT_EQ(given.rc, 0) << given.out;
  EXPECT_EQ(given.out.find("does not divide"), std::string::npos) << given.out;
  EXPECT_NE(given.out.find("plans: pp=2,layers=1+4"), std::string::npos) << given.out;
  EXPECT_EQ(generated_ids(given.out), generated_ids(one.out));
  // More stages than layers is still refused, naming both.
  const CliResult many = run_loom_stderr(base + "--ranks 6 --plan pp=6");
  EXPECT_EQ(many.rc, 1) << many.out;
  EXPECT_NE(many.out.find("pp=6 exceeds num_hidden_layers=5"), std::string::npos) << many.out;
}

TEST(CliDefaults, SeesawRunsWithADefaultCpuTier) {
  const std::string stories = test::stories_dir();
  if (stories.empty()) GTEST_SKIP() << "../shared is missing beside the checkout; the runs need stories260K";
  const std::string base = "generate -m " + stories + "/stories260K.bin -t " + stories +
                           "/tok512.bin -p 'Once upon a time' --max-tokens 12 --threads 1 --print-ids ";
  const CliResult one = run_loom(base);
  ASSERT_EQ(one.rc, 0) << one.out;
  // No --cpu-kv-bytes: the tier vLLM users expect (4 GiB, at most a quarter of what is available), said at start.
  const CliResult r = run_loom(base + "--ranks 2 --plan pp=2 --plan tp=2 --policy seesaw");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("[--policy seesaw: CPU KV tier of "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("by default"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("phase transitions"), std::string::npos) << "Seesaw's report is missing: " << r.out;
  EXPECT_EQ(generated_ids(r.out), generated_ids(one.out)) << "Seesaw's greedy tokens differ from one rank";
  // Given, it is what was given (with a size suffix) and no default is announced.
  const CliResult given = run_loom(base + "--ranks 2 --plan pp=2 --plan tp=2 --policy seesaw --cpu-kv-bytes 1M");
  ASSERT_EQ(given.rc, 0) << given.out;
  EXPECT_EQ(given.out.find("by default"), std::string::npos) << given.out;
  EXPECT_EQ(generated_ids(given.out), generated_ids(one.out));
}

TEST(CliDefaults, PlanFailsWithAReasonAndEndsWithFlagsToRun) {
  // An unknown model: non-zero, one line naming it and what is known.
  expect_one_line_error(run_loom_stderr("plan --model nosuch"), {"unknown model 'nosuch'", "llama-3-70b"});
  expect_one_line_error(run_loom_stderr("plan --model nosuch --seesaw"), {"unknown model 'nosuch'"});
  // Nothing fits: a 405B model on one H200.
  expect_one_line_error(run_loom_stderr("plan --model llama-3-405b --hardware h200x1 --num-requests 8"),
                        {"no plan of llama-3-405b fits h200x1", "do not fit"});
  // Nothing meets the SLO: non-zero, with what is on offer.
  const std::string small = "plan --num-requests 8 --input-tokens 128 --output-tokens 8";
  expect_one_line_error(run_loom_stderr(small + " --slo-ttft-ms 0.001"),
                        {"no plan meets the SLO (TTFT <= 0.001 ms", "the lowest TTFT is"});
  expect_one_line_error(run_loom_stderr(small + " --slo-ttft-ms 0.001 --json"), {"no plan meets the SLO"});
  // An answer: exit 0, the last line the flags to paste, naming the best plan printed above it.
  const CliResult ok = run_loom(small + " 2>/dev/null");
  ASSERT_EQ(ok.rc, 0) << ok.out;
  const auto ls = lines_of(ok.out);
  ASSERT_GE(ls.size(), 2u) << ok.out;
  const std::string& last = ls.back();
  EXPECT_EQ(last.rfind("  --plan ", 0), 0u) << ok.out;
  EXPECT_NE(last.find(" --policy fixed"), std::string::npos) << ok.out;  // the default SLO-free best is a fixed plan
  const std::string plan = last.substr(9, last.find(' ', 9) - 9);
  bool named = false;
  for (const std::string& l : ls) named = named || (l.rfind("best for SLO", 0) == 0 && l.size() >= plan.size() &&
                                                    l.compare(l.size() - plan.size(), plan.size(), plan) == 0);
  EXPECT_TRUE(named) << "'" << plan << "' is not the best plan printed:\n" << ok.out;
  // The flags run: pasted into `loom sim run` on the same model and node (plan's defaults), they
  // pass the engine's plan and policy rules and run.
  const CliResult check = run_loom("sim run --model llama-3-70b --hardware h200x8 --dtype fp8 " + last +
                                   " --synthetic batch --num-requests 4 --prompt-len 64 --output-len 4");
  EXPECT_EQ(check.rc, 0) << check.out;
  // --context and --seesaw end the same way.
  const CliResult ctx = run_loom("plan --model llama-3-8b --context 100000 2>/dev/null");
  ASSERT_EQ(ctx.rc, 0) << ctx.out;
  EXPECT_EQ(lines_of(ctx.out).back().rfind("  --plan ", 0), 0u) << ctx.out;
  const CliResult ss = run_loom("plan --model llama-3-8b --seesaw " + small.substr(5) + " 2>/dev/null");
  ASSERT_EQ(ss.rc, 0) << ss.out;
  EXPECT_NE(lines_of(ss.out).back().find("--policy seesaw"), std::string::npos) << ss.out;
}

}  // namespace
}  // namespace loom
