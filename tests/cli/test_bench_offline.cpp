// `loom bench offline` end to end on the synthetic `tiny` model (context 256, vocabulary 512):
// report fields and counts for synthetic workloads, hand-written traces and the shared public
// traces, and one-line errors for bad inputs. Expected counts are computed here from the
// workload definitions / trace files, never from the report under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.h"
#include "test_util.h"

namespace loom {
namespace {

using nlohmann::json;
using test::expect_one_line_error;
using test::run_loom;
using test::run_loom_stderr;

constexpr int kTinyContext = 256;  // synth shape "tiny" (model/synth.cpp)

struct Fixture {
  std::string dir, model;
  Fixture() {
    dir = test::temp_dir();
    model = test::synth_model(dir, "tiny.gguf", "--shape tiny");
  }
  // Runs the benchmark with `args`, returns the JSON report (fails the test on a non-zero exit).
  json bench(const std::string& args, const std::string& name = "r.json") const {
    const std::string out = dir + "/" + name;
    const auto r = run_loom("bench offline -m " + model + " --threads 2 --quiet --output-json " + out + " " + args);
    EXPECT_EQ(r.rc, 0) << r.out;
    if (r.rc != 0) return json::object();
    return json::parse(test::read_text(out));
  }
};

void expect_ordered(const json& d, const std::string& what) {
  ASSERT_TRUE(d.is_object()) << what;
  EXPECT_LE(d["p50"].get<double>(), d["p90"].get<double>()) << what;
  EXPECT_LE(d["p90"].get<double>(), d["p99"].get<double>()) << what;
  EXPECT_LE(d["p99"].get<double>(), d["max"].get<double>()) << what;
  EXPECT_GE(d["p50"].get<double>(), 0.0) << what;
}

TEST(BenchOffline, SyntheticBatchCountsAndFields) {
  Fixture f;
  const int n = 13, prompt = 17, output = 7;
  const json j = f.bench("--synthetic batch -n 13 --prompt-len 17 --output-len 7 --output-csv " + f.dir + "/r.csv");
  ASSERT_TRUE(j.contains("summary")) << j.dump(2);
  const json& s = j["summary"];
  EXPECT_EQ(j["workload"]["num_requests"], n);
  EXPECT_EQ(s["num_requests"], n);
  EXPECT_EQ(s["num_completed"], n);
  EXPECT_EQ(s["num_rejected"], 0);
  EXPECT_EQ(s["num_prompt_tokens"], n * prompt);
  EXPECT_EQ(s["num_output_tokens"], n * output);
  EXPECT_EQ(s["ttft_ms"]["count"], n);
  EXPECT_EQ(s["tpot_ms"]["count"], n);
  EXPECT_EQ(s["e2e_ms"]["count"], n);
  EXPECT_EQ(s["itl_ms"]["count"], n * (output - 1));
  for (const char* k : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}) expect_ordered(s[k], k);
  const double dur = s["duration_s"].get<double>();
  ASSERT_GT(dur, 0.0);
  EXPECT_NEAR(s["total_tokens_per_s"].get<double>(), n * (prompt + output) / dur, 1e-6 * n * (prompt + output) / dur);
  EXPECT_NEAR(s["requests_per_s"].get<double>(), n / dur, 1e-9 * n / dur);
  EXPECT_EQ(j["engine"]["ranks"], 1);
  EXPECT_EQ(j["engine"]["max_model_len"], kTinyContext);
  // The CSV: a header and one row per request.
  const auto rows = test::lines_of(test::read_text(f.dir + "/r.csv"));
  ASSERT_EQ(rows.size(), size_t(n + 1));
  EXPECT_EQ(rows[0].rfind("id,", 0), 0u);
}

// A hand-written Azure trace: 2 of 6 requests exceed the 256-token context.
const char* kSmallAzure =
    "arrived_at,num_prefill_tokens,num_decode_tokens\n"
    "0.0,20,5\n"
    "0.01,250,10\n"   // 260 > 256
    "0.02,100,30\n"
    "0.03,300,3\n"    // 303 > 256
    "0.04,1,1\n"
    "0.05,200,56\n";  // exactly 256: fits

TEST(BenchOffline, TooLongRequestsRejectedAloneOrClipped) {
  Fixture f;
  const std::string trace = f.dir + "/small.csv";
  test::write_text(trace, kSmallAzure);
  const json j = f.bench("--trace " + trace, "noclip.json");
  ASSERT_TRUE(j.contains("summary"));
  EXPECT_EQ(j["summary"]["num_requests"], 6);
  EXPECT_EQ(j["summary"]["num_rejected"], 2);
  EXPECT_EQ(j["summary"]["num_completed"], 4);
  EXPECT_EQ(j["workload"]["num_too_long"], 2);
  EXPECT_EQ(j["summary"]["num_output_tokens"], 5 + 30 + 1 + 56);
  EXPECT_EQ(j["summary"]["num_prompt_tokens"], 20 + 100 + 1 + 200);
  ASSERT_EQ(j["rejected"].size(), 2u);
  std::vector<int64_t> ids;
  for (const auto& r : j["rejected"]) {
    ids.push_back(r["id"].get<int64_t>());
    EXPECT_EQ(r["reason"], "rejected");
    EXPECT_NE(r["detail"].get<std::string>().find("256"), std::string::npos) << r.dump();
  }
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<int64_t>{1, 3}));
  // The run says what it rejected and how to keep those requests.
  const auto said = run_loom_stderr("bench offline -m " + f.model + " --threads 2 --quiet --trace " + trace);
  EXPECT_EQ(said.rc, 0) << said.out;
  EXPECT_NE(said.out.find("2 of 6 requests are longer than the context (256 tokens)"), std::string::npos) << said.out;
  EXPECT_NE(said.out.find("--clip"), std::string::npos) << said.out;
  const auto said_short = run_loom_stderr("bench offline -m " + f.model + " --threads 2 --quiet --max-model-len 64 --trace " + trace);
  EXPECT_NE(said_short.out.find("--max-model-len (the model's context is 256 tokens)"), std::string::npos) << said_short.out;

  const json c = f.bench("--trace " + trace + " --clip", "clip.json");
  ASSERT_TRUE(c.contains("summary"));
  EXPECT_EQ(c["summary"]["num_rejected"], 0);
  EXPECT_EQ(c["summary"]["num_completed"], 6);
  EXPECT_EQ(c["workload"]["num_clipped"], 2);
  // Clipping keeps each output (10 and 3 tokens) and cuts the prompt to the rest of the context:
  // 250 -> 246, 300 -> 253.
  EXPECT_EQ(c["summary"]["num_prompt_tokens"], 20 + 246 + 100 + 253 + 1 + 200);
  EXPECT_EQ(c["summary"]["num_output_tokens"], 5 + 10 + 30 + 3 + 1 + 56);
}

TEST(BenchOffline, ArrivalsHonouredOnlyWhenAsked) {
  Fixture f;
  auto arrivals = [&](const std::string& extra, const std::string& name) {
    const std::string csv = f.dir + "/" + name;
    f.bench("--synthetic poisson:400 -n 8 --prompt-len 4 --output-len 3 --output-csv " + csv + " " + extra,
            name + ".json");
    std::vector<double> a;
    const auto rows = test::lines_of(test::read_text(csv));
    for (size_t i = 1; i < rows.size(); ++i) {
      std::stringstream ss(rows[i]);
      std::string field;
      for (int k = 0; k < 5; ++k) std::getline(ss, field, ',');  // id,priority,prompt_len,num_output,arrival_s
      a.push_back(std::stod(field));
    }
    return a;
  };
  const auto offline = arrivals("", "off.csv");
  ASSERT_EQ(offline.size(), 8u);
  for (double t : offline) EXPECT_EQ(t, offline[0]);
  const auto timed = arrivals("--use-arrivals", "on.csv");
  ASSERT_EQ(timed.size(), 8u);
  EXPECT_GT(*std::max_element(timed.begin(), timed.end()), *std::min_element(timed.begin(), timed.end()));
}

// First `n` rows of an Azure CSV: (prompt, output) pairs, read here independently of loom.
std::vector<std::pair<int, int>> azure_rows(const std::string& path, int n) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);  // header
  std::vector<std::pair<int, int>> out;
  while (int(out.size()) < n && std::getline(f, line)) {
    std::stringstream ss(line);
    std::string t, p, o;
    std::getline(ss, t, ',');
    std::getline(ss, p, ',');
    std::getline(ss, o, ',');
    out.emplace_back(std::stoi(p), std::stoi(o));
  }
  return out;
}

TEST(BenchOffline, SharedAzureTraceRejectsExactlyTheTooLong) {
  LOOM_REQUIRE_SHARED();
  const std::string trace = test::shared_dir() + "/data/traces/azure_llm_conv_2023.csv";
  if (!std::ifstream(trace)) GTEST_SKIP() << trace << " is missing";
  Fixture f;
  const int n = 20;
  const auto rows = azure_rows(trace, n);
  ASSERT_EQ(rows.size(), size_t(n));
  int too_long = 0;
  int64_t fit_prompt = 0, fit_output = 0;
  for (auto [p, o] : rows) {
    if (p + o > kTinyContext) {
      ++too_long;
    } else {
      fit_prompt += p;
      fit_output += o;
    }
  }
  ASSERT_GT(too_long, 0) << "the test needs some requests over the context";
  ASSERT_LT(too_long, n) << "the test needs some requests that fit";
  const json j = f.bench("--trace " + trace + " --trace-format azure -n 20", "noclip.json");
  ASSERT_TRUE(j.contains("summary"));
  EXPECT_EQ(j["summary"]["num_requests"], n);
  EXPECT_EQ(j["summary"]["num_rejected"], too_long);
  EXPECT_EQ(j["summary"]["num_completed"], n - too_long);
  EXPECT_EQ(j["summary"]["num_prompt_tokens"], fit_prompt);
  EXPECT_EQ(j["summary"]["num_output_tokens"], fit_output);

  const json c = f.bench("--trace " + trace + " -n 20 --clip", "clip.json");
  ASSERT_TRUE(c.contains("summary"));
  EXPECT_EQ(c["summary"]["num_rejected"], 0);
  EXPECT_EQ(c["summary"]["num_completed"], n);
  EXPECT_EQ(c["workload"]["num_clipped"], too_long);
  expect_ordered(c["summary"]["ttft_ms"], "ttft");
}

TEST(BenchOffline, SharedMooncakeAndArxivTracesClipped) {
  LOOM_REQUIRE_SHARED();
  Fixture f;
  struct Case {
    const char* file;
    const char* format;
  };
  for (const Case& k : {Case{"mooncake_synthetic.jsonl", "mooncake"}, Case{"arxiv_summarization_lengths.csv", "arxiv"}}) {
    const std::string trace = test::shared_dir() + "/data/traces/" + k.file;
    if (!std::ifstream(trace)) {
      std::printf("skipping %s: missing\n", trace.c_str());
      continue;
    }
    const json j = f.bench("--trace " + trace + " --trace-format " + k.format + " -n 6 --clip", std::string(k.format) + ".json");
    ASSERT_TRUE(j.contains("summary")) << k.file;
    EXPECT_EQ(j["summary"]["num_requests"], 6) << k.file;
    EXPECT_EQ(j["summary"]["num_completed"], 6) << k.file;
    EXPECT_EQ(j["summary"]["num_rejected"], 0) << k.file;
  }
}

// ---- bad inputs: one line naming the value, non-zero exit ----

TEST(BenchOfflineErrors, MissingTraceFile) {
  Fixture f;
  const std::string missing = f.dir + "/no-such-trace.csv";
  expect_one_line_error(run_loom_stderr("bench offline -m " + f.model + " --trace " + missing), {missing});
}

TEST(BenchOfflineErrors, MalformedTrace) {
  Fixture f;
  const std::string bad = f.dir + "/bad.csv";
  test::write_text(bad, "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,12,3\n0.5,abc,4\n");
  // The reader names the file, the line and the field.
  expect_one_line_error(run_loom_stderr("bench offline -m " + f.model + " --trace " + bad),
                        {bad + ":3", "num_prefill_tokens", "abc"});
}

TEST(BenchOfflineErrors, UnknownTraceFormat) {
  Fixture f;
  const std::string trace = f.dir + "/small.csv";
  test::write_text(trace, kSmallAzure);
  expect_one_line_error(run_loom_stderr("bench offline -m " + f.model + " --trace " + trace + " --trace-format parquet"),
                        {"parquet"});
}

TEST(BenchOfflineErrors, UnknownSyntheticKind) {
  Fixture f;
  expect_one_line_error(run_loom_stderr("bench offline -m " + f.model + " --synthetic weibull:3"), {"weibull:3"});
}

TEST(BenchOfflineErrors, NoWorkload) {
  Fixture f;
  expect_one_line_error(run_loom_stderr("bench offline -m " + f.model), {"--trace", "--synthetic"});
}

TEST(BenchOffline, MultiRankRunsTheSameWorkload) {
  // tp=2 and dp=2 on the local backend complete the same requests with the same token counts
  // as one rank (token equality across plans is checked in tests/dist).
  Fixture f;
  const std::string w = "--synthetic batch -n 6 --prompt-len 9 --output-len 5 ";
  const json one = f.bench(w, "one.json");
  for (const char* plan : {"tp=2", "dp=2"}) {
    SCOPED_TRACE(plan);
    const json j = f.bench(w + "--ranks 2 --plan " + plan, std::string(plan) + ".json");
    ASSERT_TRUE(j.contains("summary")) << j.dump(2);
    EXPECT_EQ(j["engine"]["ranks"], 2);
    EXPECT_EQ(j["engine"]["plan"], plan);
    EXPECT_EQ(j["summary"]["num_completed"], one["summary"]["num_completed"]);
    EXPECT_EQ(j["summary"]["num_output_tokens"], one["summary"]["num_output_tokens"]);
    EXPECT_EQ(j["summary"]["num_prompt_tokens"], one["summary"]["num_prompt_tokens"]);
  }
}

TEST(BenchOfflineErrors, LayoutThatDoesNotDivideTheModel) {
  // tiny has 4 query heads: tp=3 cannot split them, and the error names both numbers.
  Fixture f;
  expect_one_line_error(run_loom_stderr("bench offline -m " + f.model + " --synthetic batch -n 2 --ranks 3 --plan tp=3"),
                        {"tp=3", "4"});
}

}  // namespace
}  // namespace loom
