// Trace readers on the real files in ../shared/data/traces (statistics compared with the numbers
// stated in ../shared/data/README.md, to their printed precision), malformed lines, options, and
// synthetic arrivals against their theoretical moments.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/error.h"
#include "engine/trace.h"
#include "test_util.h"

namespace loom {
namespace {

std::string trace_path(const std::string& name) {
  return test::shared_dir() + "/data/traces/" + name;
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string p = test::temp_dir() + "/" + name;
  std::ofstream(p) << text;
  return p;
}

// README: "19,366 requests over 3,502 s"; "input mean 1155 / median 1020 / p99 4142,
// output mean 211 / median 129". Means are printed rounded to integers: tolerance 0.5.
TEST(TraceReal, AzureConversationMatchesReadme) {
  LOOM_REQUIRE_SHARED();
  const auto t = read_trace(trace_path("azure_llm_conv_2023.csv"));
  const TraceStats s = trace_stats(t);
  EXPECT_EQ(s.count, 19366);
  EXPECT_NEAR(s.duration_s, 3502, 0.5);
  EXPECT_NEAR(s.prompt_mean, 1155, 0.5);
  EXPECT_EQ(s.prompt_median, 1020);
  EXPECT_EQ(s.prompt_p99, 4142);
  EXPECT_NEAR(s.output_mean, 211, 0.5);
  EXPECT_EQ(s.output_median, 129);
  EXPECT_EQ(t.front().arrival_s, 0.0);
  EXPECT_EQ(t.front().prompt_len, 374);  // first data row of the file
  EXPECT_EQ(t.front().output_len, 44);
}

// README: "8,819 requests over 3,436 s"; "code input mean 2048 / median 1469, output mean 28 /
// median 13".
TEST(TraceReal, AzureCodeMatchesReadme) {
  LOOM_REQUIRE_SHARED();
  const TraceStats s = trace_stats(read_trace(trace_path("azure_llm_code_2023.csv")));
  EXPECT_EQ(s.count, 8819);
  EXPECT_NEAR(s.duration_s, 3436, 0.5);
  EXPECT_NEAR(s.prompt_mean, 2048, 0.5);
  EXPECT_EQ(s.prompt_median, 1469);
  EXPECT_NEAR(s.output_mean, 28, 0.5);
  EXPECT_EQ(s.output_median, 13);
}

TEST(TraceReal, MooncakeHashesCoverPrompt) {
  LOOM_REQUIRE_SHARED();
  const auto t = read_trace(trace_path("mooncake_synthetic.jsonl"));
  ASSERT_FALSE(t.empty());
  // One JSON object per line; the file's line count is the request count.
  std::ifstream in(trace_path("mooncake_synthetic.jsonl"));
  int64_t lines = 0;
  for (std::string l; std::getline(in, l);) lines += l.empty() ? 0 : 1;
  EXPECT_EQ(int64_t(t.size()), lines);
  EXPECT_EQ(t[0].prompt_len, 40160);  // first line
  EXPECT_EQ(t[0].output_len, 6);
  EXPECT_EQ(t[0].prefix_hashes.size(), 79u);
  EXPECT_EQ(t[2].arrival_s, 0.040);  // "timestamp": 40 ms
  for (const TraceRequest& r : t) {
    // README: one hash id per 512-token prefix block.
    EXPECT_EQ(int64_t(r.prefix_hashes.size()),
              (r.prompt_len + kMooncakeHashBlockTokens - 1) / kMooncakeHashBlockTokens);
    EXPECT_EQ(r.hash_block_tokens, kMooncakeHashBlockTokens);
  }
}

TEST(TraceReal, ArxivLengthsAllAtZeroAndSyntheticArrivals) {
  LOOM_REQUIRE_SHARED();
  auto t = read_trace(trace_path("arxiv_summarization_lengths.csv"));
  std::ifstream in(trace_path("arxiv_summarization_lengths.csv"));
  int64_t lines = -1;  // header
  for (std::string l; std::getline(in, l);) ++lines;
  EXPECT_EQ(int64_t(t.size()), lines);
  EXPECT_EQ(t[0].prompt_len, 3772);  // first data row
  EXPECT_EQ(t[0].output_len, 54);
  for (const TraceRequest& r : t) EXPECT_EQ(r.arrival_s, 0.0);
  assign_arrivals(&t, ArrivalSpec::poisson(4.0), 7);
  const double rate = double(t.size()) / t.back().arrival_s;
  EXPECT_NEAR(rate, 4.0, 4.0 * 4 / std::sqrt(double(t.size())));  // 4 sigma
}

TEST(TraceReal, OptionsRateLimitClip) {
  LOOM_REQUIRE_SHARED();
  const auto base = read_trace(trace_path("azure_llm_conv_2023.csv"));
  TraceOptions o;
  o.rate_scale = 2.5;
  o.max_requests = 97;
  const auto fast = read_trace(trace_path("azure_llm_conv_2023.csv"), o);
  ASSERT_EQ(fast.size(), 97u);
  for (size_t i = 1; i < fast.size(); ++i)
    EXPECT_NEAR(fast[i].arrival_s - fast[i - 1].arrival_s,
                (base[i].arrival_s - base[i - 1].arrival_s) / 2.5, 1e-9);

  TraceOptions mark;
  mark.max_context = 2048;
  const auto marked = read_trace(trace_path("azure_llm_conv_2023.csv"), mark);
  int64_t naive_too_long = 0;
  for (const TraceRequest& r : base) naive_too_long += r.prompt_len + r.output_len > 2048;
  EXPECT_GT(naive_too_long, 0);
  EXPECT_EQ(trace_stats(marked).num_too_long, naive_too_long);
  EXPECT_EQ(marked.size(), base.size());  // marked, not dropped

  TraceOptions clip = mark;
  clip.clip = true;
  const auto clipped = read_trace(trace_path("azure_llm_conv_2023.csv"), clip);
  EXPECT_EQ(trace_stats(clipped).num_clipped, naive_too_long);
  EXPECT_EQ(trace_stats(clipped).num_too_long, 0);
  for (const TraceRequest& r : clipped) {
    EXPECT_LE(r.prompt_len + r.output_len, 2048);
    EXPECT_GE(r.output_len, 1);
  }
}

// clip_to_context by hand: the output is kept, the prompt takes what is left; an output that
// alone fills the context keeps one prompt token; what fits is untouched.
TEST(TraceClip, OutputKeptPromptCut) {
  struct Case {
    int prompt, output, context, want_prompt, want_output;
    bool cut;
  };
  for (const Case& c : std::vector<Case>{{250, 10, 256, 246, 10, true},
                                         {300, 3, 256, 253, 3, true},
                                         {200, 56, 256, 200, 56, false},
                                         {10, 400, 256, 1, 255, true},
                                         {9000, 9000, 2, 1, 1, true}}) {
    int p = c.prompt, o = c.output;
    EXPECT_EQ(clip_to_context(&p, &o, c.context), c.cut) << c.prompt << "+" << c.output;
    EXPECT_EQ(p, c.want_prompt) << c.prompt << "+" << c.output;
    EXPECT_EQ(o, c.want_output) << c.prompt << "+" << c.output;
  }
}

TEST(TraceParse, SmallFilesAndAutoDetect) {
  const auto a = read_trace(write_file("a.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\r\n"
                                                 "0.5,7,1\r\n1.25,17,97\r\n\r\n"));
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[1].arrival_s, 1.25);
  EXPECT_EQ(a[1].prompt_len, 17);
  EXPECT_EQ(a[1].output_len, 97);
  const auto l = read_trace(write_file("l.csv", "num_prefill_tokens,num_decode_tokens,x\n3,4,z\n"));
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].prompt_len, 3);
  const auto m = read_trace(write_file(
      "m.jsonl", "{\"timestamp\": 1500, \"input_length\": 600, \"output_length\": 2, \"hash_ids\": [4, 9]}\n"));
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].arrival_s, 1.5);
  EXPECT_EQ(m[0].prefix_hashes, (std::vector<int64_t>{4, 9}));
}

// The message must name file:line and the field.
void expect_error(const std::string& path, const std::string& needle1, const std::string& needle2) {
  try {
    read_trace(path);
    ADD_FAILURE() << "no error for " << path;
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(needle1), std::string::npos) << m;
    EXPECT_NE(m.find(needle2), std::string::npos) << m;
  }
}

TEST(TraceParse, MalformedLinesNameFileLineField) {
  const std::string h = "arrived_at,num_prefill_tokens,num_decode_tokens\n";
  std::string p = write_file("bad1.csv", h + "0,1,2\n0.1,abc,2\n");
  expect_error(p, p + ":3:", "num_prefill_tokens");
  p = write_file("bad2.csv", h + "0,1,-2\n");
  expect_error(p, p + ":2:", "num_decode_tokens");
  p = write_file("bad3.csv", h + "0,1\n");
  expect_error(p, p + ":2:", "fields");
  p = write_file("bad4.csv", h + "5,1,1\n4,1,1\n");
  expect_error(p, p + ":3:", "arrived_at");
  p = write_file("bad5.csv", h + "1e999,1,1\n");
  expect_error(p, p + ":2:", "arrived_at");
  p = write_file("bad6.csv", "arrived_at,num_prefill_tokens\n1,2\n");
  expect_error(p, p + ":1:", "num_decode_tokens");
  p = write_file("bad7.csv", "foo,bar\n1,2\n");
  expect_error(p, p + ":1:", "unknown trace format");
  const std::string ok = "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 2}\n";
  p = write_file("bad8.jsonl", ok + "{\"timestamp\": 1, \"input_length\": 5.5, \"output_length\": 2}\n");
  expect_error(p, p + ":2:", "input_length");
  p = write_file("bad9.jsonl", ok + ok + "{\"timestamp\": 1, \"input_length\": 5\n");
  expect_error(p, p + ":3:", "invalid JSON");
  p = write_file("bad10.jsonl", ok + "{\"timestamp\": 1, \"input_length\": 5}\n");
  expect_error(p, p + ":2:", "output_length");
  p = write_file("bad11.jsonl", ok + "{\"timestamp\": 2, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1, \"x\"]}\n");
  expect_error(p, p + ":2:", "hash_ids");
  expect_error(test::temp_dir() + "/missing.csv", "missing.csv", "cannot open");
}

// Empirical mean rate of n arrivals within 4 standard errors of the requested rate. The
// standard error of the mean inter-arrival is cv/(rate*sqrt(n)) for renewal processes.
TEST(TraceSynth, ArrivalRatesWithinStatisticalBounds) {
  const int64_t n = 20000;
  struct C {
    ArrivalSpec spec;
    double cv;
  };
  for (const C& c : {C{ArrivalSpec::poisson(3.0), 1.0}, C{ArrivalSpec::gamma(7.0, 0.5), 0.5},
                     C{ArrivalSpec::gamma(2.0, 3.0), 3.0}}) {
    const auto t = synth_arrivals(c.spec, n, 42);
    ASSERT_EQ(int64_t(t.size()), n);
    for (size_t i = 1; i < t.size(); ++i) ASSERT_GE(t[i], t[i - 1]);
    const double mean_gap = t.back() / double(n);
    EXPECT_NEAR(mean_gap, 1.0 / c.spec.rate_per_s, 4 * c.cv / (c.spec.rate_per_s * std::sqrt(double(n))))
        << "rate " << c.spec.rate_per_s;
    // Empirical CV of the gaps within 10% of the target.
    double s1 = 0, s2 = 0, prev = 0;
    for (double x : t) {
      const double g = x - prev;
      prev = x;
      s1 += g;
      s2 += g * g;
    }
    const double m = s1 / double(n), var = s2 / double(n) - m * m;
    EXPECT_NEAR(std::sqrt(var) / m, c.cv, 0.1 * c.cv);
  }
  // Bursty: 1 s on, 3 s off at a long-run 5/s: no arrival in an off period; mean rate over whole
  // periods within 4 sigma (Poisson count over the on time).
  const auto b = synth_arrivals(ArrivalSpec::bursty(5.0, 1.0, 3.0), n, 9);
  for (double x : b) ASSERT_LT(std::fmod(x, 4.0), 1.0) << x;
  const double periods = std::ceil(b.back() / 4.0);
  EXPECT_NEAR(double(n) / (periods * 4.0), 5.0, 4 * std::sqrt(double(n)) / (periods * 4.0));
  // Same seed, same stream; other seed, other stream.
  EXPECT_EQ(synth_arrivals(ArrivalSpec::poisson(3.0), 5, 1), synth_arrivals(ArrivalSpec::poisson(3.0), 5, 1));
  EXPECT_NE(synth_arrivals(ArrivalSpec::poisson(3.0), 5, 1), synth_arrivals(ArrivalSpec::poisson(3.0), 5, 2));
  EXPECT_THROW(ArrivalSpec::poisson(0), Error);
  EXPECT_THROW(ArrivalSpec::gamma(1, -1), Error);
}

TEST(TraceSynth, LengthDistributions) {
  Rng rng(3);
  const auto u = LengthDist::uniform(7, 17);
  double sum = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const int v = u.sample(rng);
    ASSERT_GE(v, 7);
    ASSERT_LE(v, 17);
    sum += v;
  }
  // Mean 12, sd of one draw sqrt((11^2-1)/12) ~ 3.16.
  EXPECT_NEAR(sum / n, 12.0, 4 * 3.17 / std::sqrt(double(n)));
  const auto g = LengthDist::normal_clipped(100, 30, 1, 120);
  for (int i = 0; i < 1000; ++i) {
    const int v = g.sample(rng);
    ASSERT_GE(v, 1);
    ASSERT_LE(v, 120);
  }
  const auto e = LengthDist::empirical({5, 9});
  for (int i = 0; i < 100; ++i) {
    const int v = e.sample(rng);
    ASSERT_TRUE(v == 5 || v == 9);
  }
  EXPECT_EQ(LengthDist::fixed(33).sample(rng), 33);
  EXPECT_THROW(LengthDist::uniform(5, 4), Error);
  EXPECT_THROW(LengthDist::empirical({}), Error);
  // Separate seeds: changing the output seed leaves arrivals and prompts unchanged.
  const auto t1 = synthesize_trace(50, ArrivalSpec::poisson(1), 1, u, 2, u, 3);
  const auto t2 = synthesize_trace(50, ArrivalSpec::poisson(1), 1, u, 2, u, 4);
  bool outputs_differ = false;
  for (size_t i = 0; i < t1.size(); ++i) {
    EXPECT_EQ(t1[i].arrival_s, t2[i].arrival_s);
    EXPECT_EQ(t1[i].prompt_len, t2[i].prompt_len);
    outputs_differ |= t1[i].output_len != t2[i].output_len;
  }
  EXPECT_TRUE(outputs_differ);
}

}  // namespace
}  // namespace loom
