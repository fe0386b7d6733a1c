// The ServeGen workload reader (engine/trace.h read_servegen, `--trace servegen:DIR@START:DURATION`;
// ../shared/data/servegen/README.md) against a superposition of clients computed by hand: request
// counts per window exactly (rate x rate scale x overlap, fractions carried), times in range and
// sorted, lengths from each client's distribution at the right 6 h timestamp, borrowed lengths for
// a client without a dataset, and the bad inputs it names.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>

#include <unistd.h>

#include "core/error.h"
#include "engine/trace.h"
#include "test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) : path(fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& file, const std::string& text) const { std::ofstream(path / file) << text; }
  std::string str() const { return path.string(); }
};

// Three clients:
//   1: 0.5 rps Exponential in [0, 600), 1.0 rps Gamma (shape 0.25, cv 2) in [600, 1200), nothing in
//      [1200, 1800); lengths always 100 in, 10 out;
//   2: 0.25 rps Exponential, 0.25 Weibull (shape 0.5), 2.0 Exponential in the same windows; its
//      dataset has no data at t = 0 and {200, 300} in / 20 out at 21600 s (the nearest later);
//   3: 0.1 rps in [0, 600), no dataset: it borrows lengths.
void write_three_clients(const TempDir& d) {
  d.write("chunk-1-trace.csv", "0,0.5,1.0,Exponential,0,0\n600,1.0,2.0,Gamma,0.25,4.0\n1200,0,0,,0,0\n");
  d.write("chunk-1-dataset.json", R"({"0": {"input_tokens": "{100: 1.0}", "output_tokens": "{10: 1.0}"}})");
  d.write("chunk-2-trace.csv", "0,0.25,1.0,Exponential,0,0\n600,0.25,3.0,Weibull,0.5,1.0\n1200,2.0,1.0,Exponential,0,0\n");
  d.write("chunk-2-dataset.json", R"({"0": {"input_tokens": "{}", "output_tokens": "{}"},
            "21600": {"input_tokens": "{200: 0.5, 300: 0.5}", "output_tokens": "{20: 1.0}"}})");
  d.write("chunk-3-trace.csv", "0,0.1,1.0,Exponential,0,0\n");
  d.write("README.txt", "not a client file\n");
}

// By hand, window [300, 1500) at rate scale 2 (times relative to 300):
//   client 1: [0, 300) 0.5 x 2 x 300 = 300, [300, 900) 1.0 x 2 x 600 = 1200, [900, 1200) 0;
//   client 2: [0, 300) 0.25 x 2 x 300 = 150, [300, 900) 0.25 x 2 x 600 = 300, [900, 1200) 2 x 2 x 300 = 1200;
//   client 3: [0, 300) 0.1 x 2 x 300 = 60 (its one window lasts 600 s), lengths borrowed.
TEST(ServeGen, SuperpositionOfClientsByHand) {
  TempDir d("loom-servegen");
  write_three_clients(d);
  ServeGenOptions o;
  o.start_s = 300, o.duration_s = 1200, o.rate_scale = 2;
  o.borrow_lengths = false;
  ServeGenStats st;
  const std::vector<TraceRequest> t = read_servegen(d.str(), o, &st);
  EXPECT_EQ(st.clients, 3);
  EXPECT_EQ(st.active_clients, 3);
  EXPECT_EQ(st.dropped_requests, 60);
  ASSERT_EQ(t.size(), 300u + 1200u + 150u + 300u + 1200u);
  EXPECT_DOUBLE_EQ(st.mean_rate_rps, double(t.size()) / 1200);
  // Per client (its output length) and window: the counts above.
  std::map<std::pair<int, int>, int> count;  // (output length, window) -> requests
  int prompt200 = 0;
  double prev = 0;
  for (const TraceRequest& r : t) {
    ASSERT_GE(r.arrival_s, 0.0);
    ASSERT_LT(r.arrival_s, 1200.0);
    ASSERT_GE(r.arrival_s, prev);  // sorted
    prev = r.arrival_s;
    const int w = r.arrival_s < 300 ? 0 : r.arrival_s < 900 ? 1 : 2;
    ++count[std::make_pair(r.output_len, w)];
    if (r.output_len == 10) {
      EXPECT_EQ(r.prompt_len, 100);
    } else {
      ASSERT_EQ(r.output_len, 20);
      ASSERT_TRUE(r.prompt_len == 200 || r.prompt_len == 300) << r.prompt_len;
      prompt200 += r.prompt_len == 200 ? 1 : 0;
    }
  }
  EXPECT_EQ(count[std::make_pair(10, 0)], 300);
  EXPECT_EQ(count[std::make_pair(10, 1)], 1200);
  EXPECT_EQ(count[std::make_pair(10, 2)], 0);
  EXPECT_EQ(count[std::make_pair(20, 0)], 150);
  EXPECT_EQ(count[std::make_pair(20, 1)], 300);
  EXPECT_EQ(count[std::make_pair(20, 2)], 1200);
  // Client 2's prompts: 200 or 300 with probability 1/2 each, 1650 draws: within 5 sigma (20.3).
  EXPECT_NEAR(prompt200, 825, 5 * 20.3);
  // The total rate of the three at scale 1: (0.5 x 300 + 1 x 600) + (0.25 x 300 + 0.25 x 600 + 2 x 300)
  // + 0.1 x 300 = 1605 requests over 1200 s.
  EXPECT_DOUBLE_EQ(servegen_mean_rate(d.str(), 300, 1200), 1605.0 / 1200);

  // Borrowing: client 3's 60 requests take lengths of clients 1 or 2 (weighted 1500 : 1650).
  o.borrow_lengths = true;
  const std::vector<TraceRequest> b = read_servegen(d.str(), o, &st);
  EXPECT_EQ(b.size(), t.size() + 60);
  EXPECT_EQ(st.borrowing_clients, 1);
  EXPECT_EQ(st.borrowed_requests, 60);
  int in_first = 0;
  for (const TraceRequest& r : b) {
    EXPECT_TRUE((r.output_len == 10 && r.prompt_len == 100) || (r.output_len == 20 && (r.prompt_len == 200 || r.prompt_len == 300)));
    in_first += r.arrival_s < 300 ? 1 : 0;
  }
  EXPECT_EQ(in_first, 300 + 150 + 60);

  // `--trace servegen:DIR@300:1200 --rate-scale 2` is the same workload; max_requests keeps the first.
  TraceOptions topt;
  topt.rate_scale = 2;
  const std::vector<TraceRequest> via = read_trace("servegen:" + d.str() + "@300:1200", topt);
  ASSERT_EQ(via.size(), b.size());
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_DOUBLE_EQ(via[i].arrival_s, b[i].arrival_s) << i;
    EXPECT_EQ(via[i].prompt_len, b[i].prompt_len) << i;
  }
  topt.max_requests = 100;
  EXPECT_EQ(read_trace("servegen:" + d.str() + "@300:1200", topt).size(), 100u);
  // Rate scale 1: half of every count (client 3: 30).
  o.rate_scale = 1;
  EXPECT_EQ(read_servegen(d.str(), o).size(), (1500u + 1650u + 60u) / 2);
}

// A client's fractional requests carry from window to window: 0.001 rps over three 600 s windows
// is 0.6 a window: floor(0.6) = 0, floor(1.2) - 0 = 1, floor(1.8) - 1 = 0: one request, in the
// second window.
TEST(ServeGen, FractionsCarryAcrossWindows) {
  TempDir d("loom-servegen-carry");
  d.write("chunk-7-trace.csv", "0,0.001,1,Exponential,0,0\n600,0.001,1,Exponential,0,0\n1200,0.001,1,Exponential,0,0\n");
  d.write("chunk-7-dataset.json", R"({"0": {"input_tokens": "{5: 1}", "output_tokens": "{6: 1}"}})");
  ServeGenOptions o;
  o.start_s = 0, o.duration_s = 1800;
  const std::vector<TraceRequest> t = read_servegen(d.str(), o);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_GE(t[0].arrival_s, 600.0);
  EXPECT_LT(t[0].arrival_s, 1200.0);
  EXPECT_EQ(t[0].prompt_len, 5);
  EXPECT_EQ(t[0].output_len, 6);
}

TEST(ServeGen, BadInputIsNamed) {
  TempDir d("loom-servegen-bad");
  write_three_clients(d);
  EXPECT_NE(test::error_of<Error>([&] { read_trace("servegen:" + d.str() + "@abc:10"); }).find("@START:DURATION"),
            std::string::npos);
  EXPECT_NE(test::error_of<Error>([&] { read_trace("servegen:" + d.str() + "@10:0"); }).find("DURATION > 0"),
            std::string::npos);
  EXPECT_NE(test::error_of<Error>([&] { read_trace("servegen:/no/such/folder"); }).find("not found"), std::string::npos);
  d.write("chunk-1-dataset.json", R"({"0": {"input_tokens": "{100 1.0}", "output_tokens": "{10: 1.0}"}})");
  const std::string e = test::error_of<Error>([&] { read_trace("servegen:" + d.str() + "@0:600"); });
  EXPECT_NE(e.find("chunk-1-dataset.json"), std::string::npos) << e;
  EXPECT_NE(e.find("input_tokens"), std::string::npos) << e;
  write_three_clients(d);
  d.write("chunk-2-trace.csv", "0,0.25,1.0,Pareto,1,1\n");
  const std::string p = test::error_of<Error>([&] { read_trace("servegen:" + d.str() + "@0:600"); });
  EXPECT_NE(p.find("chunk-2-trace.csv:1"), std::string::npos) << p;
  EXPECT_NE(p.find("Pareto"), std::string::npos) << p;
  TempDir empty("loom-servegen-empty");
  EXPECT_NE(test::error_of<Error>([&] { read_trace("servegen:" + empty.str()); }).find("no chunk-N-trace.csv"),
            std::string::npos);
}

// The public m-mid folder: a 10-minute window at noon of day 1, scaled to about 70 req/s (Release
// only, with the NitsumPaper figures that read it: it parses about 70 clients' datasets).
TEST(NitsumPaper, ServeGenMidModelWindowAtSeventyRps) {
  LOOM_REQUIRE_SHARED();
  const std::string dir = test::shared_dir() + "/data/servegen/m-mid";
  const double rate = servegen_mean_rate(dir, 129600, 600);
  ASSERT_GT(rate, 100);  // ~1400 req/s across the clients
  ServeGenOptions o;
  o.start_s = 129600, o.duration_s = 600, o.rate_scale = 70 / rate;
  ServeGenStats st;
  const std::vector<TraceRequest> t = read_servegen(dir, o, &st);
  EXPECT_NEAR(double(t.size()), 70 * 600, 70 * 600 * 0.02);  // fractions carried per client: within a few
  EXPECT_GT(st.borrowed_requests, 0);  // the busiest clients' datasets are not in the snapshot
  EXPECT_EQ(st.dropped_requests, 0);
  for (const TraceRequest& r : t) {
    ASSERT_GE(r.prompt_len, 1);
    ASSERT_GE(r.output_len, 1);
  }
}

}  // namespace
}  // namespace loom
