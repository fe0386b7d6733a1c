// Mesh, Plan (parse / print / validate) and per-rank layouts, against mappings written out from
// ../shared/docs/PLANS.md in this file (not from the code under test).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/mesh.h"
#include "parallel/plan.h"

namespace loom {
namespace {

// stories260K: 8 query heads, 4 KV heads (ffn 172 in the real model; 96 keeps every degree here
// dividing it), and a synthetic 24/6 GQA model.
const ModelShape kStories{8, 4, 8, 96, 5, 64};
const ModelShape kSynth{24, 6, 4, 48 * 24, 6, 96};

// Runs f, expects a loom::Error whose message contains `needle`.
template <typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no loom::Error, expected one containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

std::vector<int> range_list(int b, int e) {
  std::vector<int> v;
  for (int i = b; i < e; ++i) v.push_back(i);
  return v;
}

TEST(Mesh, CoordinatesAndGroupsTpInnermost) {
  Mesh m({{Axis::Dp, 2}, {Axis::Tp, 3}});
  EXPECT_EQ(m.size(), 6);
  EXPECT_EQ(m.coord(4), (std::vector<int>{1, 1}));
  EXPECT_EQ(m.coord(4, Axis::Dp), 1);
  EXPECT_EQ(m.coord(4, Axis::Tp), 1);
  EXPECT_EQ(m.coord(4, Axis::Sp), 0);
  EXPECT_EQ(m.group(4, Axis::Tp), (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(m.group(4, Axis::Dp), (std::vector<int>{1, 4}));
  EXPECT_EQ(m.group(4, Axis::Pp), (std::vector<int>{4}));
  EXPECT_EQ(m.groups(Axis::Dp), (std::vector<std::vector<int>>{{0, 3}, {1, 4}, {2, 5}}));
  EXPECT_EQ(m.to_string(), "dp=2,tp=3");
}

TEST(Mesh, ExplicitOrder) {
  // Shift 3.3.1: TP(6) over global ranks 0,2,4,1,3,5.
  Mesh m({{Axis::Tp, 6}}, {0, 2, 4, 1, 3, 5});
  EXPECT_EQ(m.group(3, Axis::Tp), (std::vector<int>{0, 2, 4, 1, 3, 5}));
  EXPECT_EQ(m.coord(3, Axis::Tp), 4);
  EXPECT_EQ(m.position(1), 3);
  EXPECT_EQ(m.to_string(), "tp=6[0,2,4,1,3,5]");
  expect_error([] { Mesh({{Axis::Tp, 3}}, {0, 0, 1}); }, "not a permutation");
  expect_error([] { Mesh({{Axis::Tp, 2}, {Axis::Tp, 2}}); }, "appears twice");
  expect_error([] { Mesh({{Axis::Tp, 0}}); }, "tp=0");
}

TEST(Plan, ParsePrintRoundTrip) {
  struct Case {
    const char* in;
    const char* canonical;
    int size;
  };
  for (const Case& c : std::vector<Case>{{"tp=4", "tp=4", 4},
                                         {"dp=2", "dp=2", 2},
                                         {"tp=2,dp=2", "dp=2,tp=2", 4},
                                         {"sp=3,tp=2", "sp=3,tp=2", 6},
                                         {"shift:sp=3,tp=2", "shift:sp=3,tp=2", 6},
                                         {"pp=2", "pp=2", 2},
                                         {"tp=2,pp=2", "pp=2,tp=2", 4},
                                         {"kvp=2,tpa=2", "kvp=2,tpa=2", 4},
                                         {"kvp=2, tpa=2, block=4", "kvp=2,tpa=2,block=4", 4},
                                         {"pp=2,layers=2+3", "pp=2,layers=2+3", 2},
                                         {"tp=2,weights=full", "tp=2,weights=full", 2},
                                         {"tp=1", "tp=1", 1},
                                         {"", "tp=1", 1},
                                         {"shift:tp=4", "tp=4", 4}}) {
    Plan p = Plan::parse(c.in);
    EXPECT_EQ(p.to_string(), c.canonical) << c.in;
    EXPECT_EQ(p.size(), c.size) << c.in;
    EXPECT_EQ(Plan::parse(p.to_string()), p) << c.in;
  }
  EXPECT_EQ(Plan::parse("tp=2,dp=2"), Plan::parse("dp=2,tp=2"));
  EXPECT_NE(Plan::parse("sp=3,tp=2"), Plan::parse("shift:sp=3,tp=2"));
  EXPECT_EQ(Plan::parse("shift:sp=3,tp=2"), Plan::make_shift(3, 2));
  EXPECT_EQ(Plan::parse("kvp=2,tpa=2"), Plan::make_helix(2, 2));
  EXPECT_EQ(Plan::parse("kvp=1,tpa=2"), Plan::make_tp(2));
  EXPECT_EQ(Plan::make_shift(3, 2).base(), Plan::make_sp_tp(3, 2));
}

TEST(Plan, ParseErrorsNameTheItem) {
  expect_error([] { Plan::parse("tp=x"); }, "tp=x is not an integer");
  expect_error([] { Plan::parse("tp=0"); }, "tp=0 must be >= 1");
  expect_error([] { Plan::parse("zp=2"); }, "unknown key 'zp'");
  expect_error([] { Plan::parse("tp=2,tp=2"); }, "sets tp twice");
  expect_error([] { Plan::parse("tp"); }, "not key=value");
  expect_error([] { Plan::parse("kvp=2,tp=2"); }, "tpa=");
  expect_error([] { Plan::parse("sp=2,kvp=2"); }, "cannot both be > 1");
  expect_error([] { Plan::parse("pp=2,layers=1+2+3"); }, "lists 3 stages, pp=2");
  expect_error([] { Plan::parse("weights=disk"); }, "weights=disk");
}

TEST(Plan, ValidateNamesTheSizes) {
  expect_error([] { validate(Plan::parse("tp=3"), kStories); }, "tp=3 does not divide num_attention_heads=8");
  // 24 heads split 4 or 8 ways; 6 KV heads neither split nor replicate evenly over them, which
  // plain TP accepts (a rank holds the KV heads of its query heads, some on two ranks).
  EXPECT_NO_THROW(validate(Plan::parse("tp=4"), kSynth));
  EXPECT_NO_THROW(validate(Plan::parse("tp=8"), kSynth));
  // ... but SP's all-to-all needs the even rule for its TP degree.
  expect_error([] { validate(Plan::parse("sp=2,tp=4"), kSynth); }, "tp=4 does not divide num_key_value_heads=6");
  expect_error([] { validate(Plan::parse("sp=3,tp=2"), kStories); },
               "sp*tp=6 (sp=3, tp=2) does not divide num_attention_heads=8");
  expect_error([] { validate(Plan::parse("sp=4,tp=2"), kSynth); }, "sp*tp (sp=4, tp=2)=8 is neither");
  expect_error([] { validate(Plan::parse("kvp=2,tpa=8"), kStories); },
               "tpa=8 exceeds num_key_value_heads=4");
  expect_error([] { validate(Plan::parse("kvp=3,tpa=2"), kStories); },
               "kvp*tpa=6 (kvp=3, tpa=2) does not divide num_attention_heads=8");
  expect_error([] { validate(Plan::parse("pp=2"), kStories); }, "pp=2 does not divide num_hidden_layers=5");
  expect_error([] { validate(Plan::parse("pp=6"), kStories); }, "pp=6 exceeds num_hidden_layers=5");
  expect_error([] { validate(Plan::parse("pp=2,layers=2+2"), kStories); },
               "layers= sums to 4 layers, num_hidden_layers=5");
  ModelShape odd_ffn = kStories;
  odd_ffn.ffn_dim = 172;  // the real stories260K FFN width
  // Uneven FFN shards are accepted down to one unit per rank (f32: one column).
  EXPECT_NO_THROW(validate(Plan::parse("tp=8"), odd_ffn));
  EXPECT_NO_THROW(validate(Plan::parse("tp=4"), odd_ffn));
  EXPECT_NO_THROW(validate(Plan::parse("shift:sp=2,tp=4"), odd_ffn));
  expect_error([] { validate(Plan::parse("tp=8"), ModelShape{8, 4, 8, 7, 5, 64}); },
               "tp=8 needs at least 8 FFN units of 1 column, intermediate_size=7 has 7");
  expect_error([] { validate(Plan::parse("kvp=2,tpa=4"), ModelShape{8, 4, 8, 7, 5, 64}); },
               "kvp*tpa=8 needs at least 8 FFN units");
  // q8_0 (blocks of 32 columns): F must be whole blocks, one block per rank at least, and the
  // Wo column shard (heads per rank * head_dim) whole blocks too.
  expect_error([] { validate(Plan::parse("tp=2"), ModelShape{8, 4, 32, 172, 5, 256, 32}); },
               "intermediate_size=172 is not a multiple of the weight block of 32 columns");
  expect_error([] { validate(Plan::parse("tp=8"), ModelShape{8, 4, 32, 160, 5, 256, 32}); },
               "tp=8 needs at least 8 FFN units of 32 columns, intermediate_size=160 has 5");
  expect_error([] { validate(Plan::parse("tp=8"), ModelShape{8, 4, 8, 320, 5, 64, 32}); },
               "tp=8 gives each rank 1 heads of head_dim=8 = 8 Wo columns, not a multiple of the weight block of 32");
  EXPECT_NO_THROW(validate(Plan::parse("tp=4"), ModelShape{8, 4, 16, 160, 5, 128, 32}));
  expect_error([] { rank_layout(Plan::parse("tp=2"), kStories, 2); }, "rank 2 is outside plan tp=2");
  for (const char* ok : {"tp=1", "tp=2", "tp=4", "tp=8", "dp=3", "dp=2,tp=2", "sp=2,tp=4", "shift:sp=8", "pp=5",
                         "pp=2,layers=2+3", "kvp=2,tpa=4", "kvp=8,tpa=1", "dp=2,pp=5,tp=2"})
    EXPECT_NO_THROW(validate(Plan::parse(ok), kStories)) << ok;
}

// PLANS.md TP(t): query heads [r*H/t, (r+1)*H/t); KV heads [r*K/t, (r+1)*K/t) for t <= K, the
// single head r*K/t for t > K; FFN [r*F/t, (r+1)*F/t). When neither t | K nor K | t, a rank holds
// the KV heads of its query heads: [first_q / G, last_q / G] (plan.h, ModelShape).
TEST(Plan, TensorParallelHeadRanges) {
  for (const ModelShape& m : {kStories, kSynth}) {
    const int H = m.n_heads, K = m.n_kv_heads, F = m.ffn_dim, G = H / K;
    for (int t : {1, 2, 3, 4, 6, 8, 12, 24}) {
      if (H % t != 0) {
        EXPECT_THROW(validate(Plan::make_tp(t), m), Error) << "H=" << H << " t=" << t;
        continue;
      }
      const bool even = (t <= K && K % t == 0) || (t > K && t % K == 0);
      std::vector<int> q_seen(H, 0), kv_seen(K, 0);
      for (int r = 0; r < t; ++r) {
        const RankLayout lay = rank_layout(Plan::make_tp(t), m, r);
        EXPECT_EQ(lay.q_heads, range_list(r * H / t, (r + 1) * H / t));
        EXPECT_EQ(lay.proj_q_heads, lay.q_heads);
        const std::vector<int> kv = !even    ? range_list(r * H / t / G, ((r + 1) * H / t - 1) / G + 1)
                                    : t <= K ? range_list(r * K / t, (r + 1) * K / t)
                                             : std::vector<int>{r * K / t};
        EXPECT_EQ(lay.kv_heads, kv) << "H=" << H << " t=" << t << " r=" << r;
        EXPECT_EQ(lay.ffn, (Range{int64_t(r) * F / t, int64_t(r + 1) * F / t}));
        EXPECT_EQ(lay.ffn_group, range_list(0, t));
        for (int q : lay.q_heads) {
          ++q_seen[q];
          // the KV head of every query head is on the same rank
          EXPECT_NE(std::find(lay.kv_heads.begin(), lay.kv_heads.end(), q / (H / K)), lay.kv_heads.end());
        }
        for (int h : lay.kv_heads) ++kv_seen[h];
      }
      for (int c : q_seen) {
        EXPECT_EQ(c, 1);
      }
      if (even) {
        for (int c : kv_seen) EXPECT_EQ(c, t > K ? t / K : 1) << "GQA replication factor t/K";
      }
      for (int c : kv_seen) EXPECT_GE(c, 1) << "every KV head is held somewhere";
    }
  }
  // Literal: stories260K at t=8 (t > K): KV head of rank r is r/2.
  const int kv_of_rank[8] = {0, 0, 1, 1, 2, 2, 3, 3};
  for (int r = 0; r < 8; ++r)
    EXPECT_EQ(rank_layout(Plan::make_tp(8), kStories, r).kv_heads, (std::vector<int>{kv_of_rank[r]}));
  // Literal: 24 heads / 6 KV heads (G = 4) at t=4: query heads 6r..6r+5; KV heads 1 and 4 are on
  // two ranks each.
  const std::vector<std::vector<int>> kv4 = {{0, 1}, {1, 2}, {3, 4}, {4, 5}};
  for (int r = 0; r < 4; ++r) EXPECT_EQ(rank_layout(Plan::make_tp(4), kSynth, r).kv_heads, kv4[r]);
  // t=8: query heads 3r..3r+2.
  const std::vector<std::vector<int>> kv8 = {{0}, {0, 1}, {1, 2}, {2}, {3}, {3, 4}, {4, 5}, {5}};
  for (int r = 0; r < 8; ++r) EXPECT_EQ(rank_layout(Plan::make_tp(8), kSynth, r).kv_heads, kv8[r]);
}

// Uneven FFN shards (plan.h): units of weight_block columns, shard i = [floor(i*U/n), floor((i+1)*U/n)).
TEST(Plan, UnevenFfnShards) {
  // stories260K's real F = 172 at t=8: 21.5 per rank -> 21, 22, 21, 22, ... (written out by hand).
  const ModelShape stories{8, 4, 8, 172, 5, 64};
  const int64_t b8[9] = {0, 21, 43, 64, 86, 107, 129, 150, 172};
  for (int r = 0; r < 8; ++r) EXPECT_EQ(rank_layout(Plan::make_tp(8), stories, r).ffn, (Range{b8[r], b8[r + 1]}));
  // q8_0: F = 320 = 10 blocks of 32 at t=4 -> 2, 3, 2, 3 blocks.
  const ModelShape q8{8, 4, 16, 320, 2, 128, 32};
  const int64_t b4[5] = {0, 64, 160, 224, 320};
  for (int r = 0; r < 4; ++r) EXPECT_EQ(rank_layout(Plan::make_tp(4), q8, r).ffn, (Range{b4[r], b4[r + 1]}));
  // Shards tile [0, F), contiguous, sizes within one unit, for awkward sizes.
  for (int F : {1, 7, 17, 97, 172}) {
    for (int t : {1, 2, 4, 8}) {
      const ModelShape m{8, 4, 8, F, 1, 64};
      if (F < t) {
        EXPECT_THROW(validate(Plan::make_tp(t), m), Error) << "F=" << F << " t=" << t;
        continue;
      }
      int64_t next = 0, lo = F, hi = 0;
      for (int r = 0; r < t; ++r) {
        const Range f = rank_layout(Plan::make_tp(t), m, r).ffn;
        EXPECT_EQ(f.begin, next);
        next = f.end;
        lo = std::min(lo, f.size()), hi = std::max(hi, f.size());
      }
      EXPECT_EQ(next, F);
      EXPECT_LE(hi - lo, 1) << "F=" << F << " t=" << t;
      EXPECT_GE(lo, 1);
    }
  }
}

TEST(Plan, DataAndPipelineParallel) {
  // dp outer, tp inner: rank = dp*t + tp.
  const Plan p = Plan::parse("tp=2,dp=2");
  const RankLayout l3 = rank_layout(p, kStories, 3);
  EXPECT_EQ(l3.dp, 1);
  EXPECT_EQ(l3.tp, 1);
  EXPECT_EQ(l3.tokens.dp_degree, 2);
  EXPECT_EQ(l3.tokens.dp_index, 1);
  EXPECT_EQ(l3.q_heads, range_list(4, 8));
  EXPECT_EQ(l3.ffn_group, (std::vector<int>{2, 3}));
  EXPECT_EQ(p.mesh().group(3, Axis::Dp), (std::vector<int>{1, 3}));
  // pp outer, tp inner; even split of 6 layers.
  const ModelShape six = kSynth;
  const Plan pp = Plan::parse("tp=2,pp=3");
  EXPECT_EQ(rank_layout(pp, six, 0).layers, (Range{0, 2}));
  EXPECT_EQ(rank_layout(pp, six, 3).layers, (Range{2, 4}));
  EXPECT_EQ(rank_layout(pp, six, 3).tp, 1);
  EXPECT_EQ(rank_layout(pp, six, 5).layers, (Range{4, 6}));
  EXPECT_EQ(rank_layout(pp, six, 5).tokens.micro_batches, 3);
  // uneven split
  const Plan uneven = Plan::parse("pp=2,layers=1+4");
  EXPECT_EQ(rank_layout(uneven, kStories, 0).layers, (Range{0, 1}));
  EXPECT_EQ(rank_layout(uneven, kStories, 1).layers, (Range{1, 5}));
  EXPECT_EQ(rank_layout(uneven, kStories, 1).kv_heads, range_list(0, 4));
}

TEST(Plan, SpTokenSlices) {
  // n=7, s=3: n'=9, slices of 3; the last holds one real token and two pads.
  EXPECT_EQ(sp_token_slice(7, 3, 0).padded, (Range{0, 3}));
  EXPECT_EQ(sp_token_slice(7, 3, 2).padded, (Range{6, 9}));
  EXPECT_EQ(sp_token_slice(7, 3, 2).real, (Range{6, 7}));
  // n=1, s=3: ranks 1 and 2 hold only padding.
  EXPECT_EQ(sp_token_slice(1, 3, 1).padded, (Range{1, 2}));
  EXPECT_TRUE(sp_token_slice(1, 3, 1).real.empty());
  for (int64_t n : {1, 7, 17, 97})
    for (int s : {1, 2, 3, 8}) {
      int64_t real = 0;
      for (int i = 0; i < s; ++i) {
        TokenSlice t = sp_token_slice(n, s, i);
        EXPECT_EQ(t.padded.size(), (n + s - 1) / s);
        if (i > 0) {
          EXPECT_EQ(t.padded.begin, sp_token_slice(n, s, i - 1).padded.end);
        }
        real += t.real.size();
      }
      EXPECT_EQ(real, n);
    }
}

// Ulysses (Shift Algorithm 1): after the all-to-all rank (sp, tp) holds query heads
// tp*H/t + sp*H/(t*s) + [0, H/(t*s)): every head once in the group, each SP group covering exactly
// its TP shard, each TP group (equal sp) one sub-chunk of every TP shard; KV heads of those query
// heads, replicated s / kv_per_tp_rank times when the TP shard has fewer KV heads than s.
TEST(Plan, UlyssesHeadsAfterAllToAll) {
  for (const ModelShape& m : {kStories, kSynth}) {
    const int H = m.n_heads, K = m.n_kv_heads, G = H / K;
    for (int s = 1; s <= H; ++s)
      for (int t = 1; s * t <= H; ++t) {
        const int P = s * t;
        if (H % P != 0) continue;
        const auto rule_ok = [&](int d) { return d <= K ? K % d == 0 : d % K == 0; };
        const Plan plan = Plan::make_sp_tp(s, t);
        // s == 1 is plain TP, which accepts any K (plan.h).
        if (s > 1 && (!rule_ok(t) || !rule_ok(P))) {
          EXPECT_THROW(validate(plan, m), Error) << "s=" << s << " t=" << t;
          continue;
        }
        const Mesh mesh = plan.mesh();
        std::vector<int> seen(H, 0);
        for (int r = 0; r < P; ++r) {
          const int sp = r / t, tp = r % t;  // rank = sp*t + tp
          const RankLayout lay = rank_layout(plan, m, r);
          EXPECT_EQ(lay.sp, sp);
          EXPECT_EQ(lay.tp, tp);
          EXPECT_EQ(lay.q_heads, range_list(tp * H / t + sp * H / P, tp * H / t + (sp + 1) * H / P));
          EXPECT_EQ(lay.proj_q_heads, range_list(tp * H / t, (tp + 1) * H / t));
          EXPECT_EQ(lay.out_heads, lay.proj_q_heads);
          EXPECT_EQ(lay.tokens.sp_degree, s);
          EXPECT_EQ(lay.tokens.sp_index, sp);
          for (int q : lay.q_heads) ++seen[q];
          // SP group: ranks with equal tp, ordered by sp; together exactly the TP shard.
          std::vector<int> sp_group = mesh.group(r, s > 1 ? Axis::Sp : Axis::Tp);
          if (s > 1) {
            std::vector<int> expect;
            for (int i = 0; i < s; ++i) expect.push_back(i * t + tp);
            EXPECT_EQ(sp_group, expect);
            std::multiset<int> heads;
            std::multiset<int> kv_count;
            for (int g : sp_group) {
              for (int q : rank_layout(plan, m, g).q_heads) heads.insert(q);
              for (int h : rank_layout(plan, m, g).kv_heads) kv_count.insert(h);
            }
            const auto shard = range_list(tp * H / t, (tp + 1) * H / t);
            EXPECT_EQ(heads, std::multiset<int>(shard.begin(), shard.end()));
            const int kv_per_tp = t <= K ? K / t : 1;
            for (int h : lay.proj_kv_heads)
              EXPECT_EQ(int(kv_count.count(h)), s > kv_per_tp ? s / kv_per_tp : 1)
                  << "s=" << s << " t=" << t << " kv head " << h;
          }
          // TP group (equal sp): one H/P chunk of each TP shard.
          if (t > 1) {
            std::vector<int> tp_group = mesh.group(r, Axis::Tp);
            EXPECT_EQ(tp_group, range_list(sp * t, sp * t + t));
          }
          for (int q : lay.q_heads)
            EXPECT_TRUE(std::binary_search(lay.kv_heads.begin(), lay.kv_heads.end(), q / G));
        }
        for (int c : seen) EXPECT_EQ(c, 1) << "s=" << s << " t=" << t;
      }
  }
}

TEST(Plan, ShiftOrderIsThePapers) {
  // Shift 3.3.1: base (SP=3, TP=2) gives the shift config TP(6) the group order 0,2,4,1,3,5.
  const Plan shift = Plan::parse("shift:sp=3,tp=2");
  EXPECT_EQ(shift.mesh().order(), (std::vector<int>{0, 2, 4, 1, 3, 5}));
  EXPECT_EQ(shift.mesh().group(0, Axis::Tp), (std::vector<int>{0, 2, 4, 1, 3, 5}));
  EXPECT_EQ(shift.ffn_mesh(), shift.mesh());
  // Figure 6 (six heads, one per rank): global ranks 2 and 3 get heads 1 and 4.
  const ModelShape six{6, 6, 4, 12, 1, 24};
  const std::vector<int> head_of_rank = {0, 3, 1, 4, 2, 5};
  for (int g = 0; g < 6; ++g) {
    EXPECT_EQ(rank_layout(shift, six, g).q_heads, (std::vector<int>{head_of_rank[g]}));
    EXPECT_EQ(rank_layout(shift.base(), six, g).q_heads, (std::vector<int>{head_of_rank[g]}));
    EXPECT_EQ(rank_layout(shift, six, g).proj_q_heads, (std::vector<int>{head_of_rank[g]}));
    EXPECT_EQ(rank_layout(shift, six, g).tokens.sp_degree, 1) << "shift config replicates tokens (TP)";
  }
  // Megatron's rule applied to the shift group's order gives those heads: the member at position
  // j of TP(P) owns query heads [j*H/P, (j+1)*H/P) and FFN shard j, for every valid (s, t).
  for (const ModelShape& m : {kStories, kSynth})
    for (auto [s, t] : std::vector<std::pair<int, int>>{{2, 1}, {2, 2}, {4, 2}, {2, 4}, {3, 2}, {2, 3}, {3, 4}, {2, 6}, {4, 6}}) {
      const Plan sh = Plan::make_shift(s, t);
      try {
        validate(sh, m);
      } catch (const Error&) {
        continue;
      }
      const int P = s * t, H = m.n_heads;
      const std::vector<int> group = sh.mesh().group(0, Axis::Tp);
      ASSERT_EQ(int(group.size()), P);
      for (int j = 0; j < P; ++j) {
        EXPECT_EQ(group[j], (j % s) * t + j / s);
        const RankLayout lay = rank_layout(sh, m, group[j]);
        EXPECT_EQ(lay.q_heads, range_list(j * H / P, (j + 1) * H / P)) << "s=" << s << " t=" << t << " j=" << j;
        EXPECT_EQ(lay.ffn_index, j);
        EXPECT_EQ(lay.ffn_group, group);
      }
    }
  // The same on the 24-head model: rank (sp=1, tp=0) = 2 holds heads 4..7, rank 3 heads 16..19.
  EXPECT_EQ(rank_layout(shift, kSynth, 2).q_heads, range_list(4, 8));
  EXPECT_EQ(rank_layout(shift, kSynth, 3).q_heads, range_list(16, 20));
  EXPECT_EQ(rank_layout(shift, kSynth, 3).ffn_index, 1 + 3 * 1);  // j = sp + s*tp
  EXPECT_EQ(rank_layout(shift, kSynth, 1).ffn_index, 3 * 1 + 0);  // j = sp + s*tp = 0 + 3
}

TEST(Plan, HelixLayout) {
  // kvp=2, tpa=2 on stories260K: rank = kvp*2 + tpa; attention heads by tpa; merged chunk of
  // TP(4) rank tpa*2 + kvp; KV blocks b % 2 == kvp.
  const Plan p = Plan::parse("kvp=2,tpa=2,block=4");
  for (int r = 0; r < 4; ++r) {
    const int kvp = r / 2, tpa = r % 2;
    const RankLayout lay = rank_layout(p, kStories, r);
    EXPECT_EQ(lay.q_heads, range_list(tpa * 4, tpa * 4 + 4));
    EXPECT_EQ(lay.kv_heads, range_list(tpa * 2, tpa * 2 + 2));
    EXPECT_EQ(lay.out_heads, range_list(tpa * 4 + kvp * 2, tpa * 4 + kvp * 2 + 2));
    EXPECT_EQ(lay.ffn_index, tpa * 2 + kvp);
    EXPECT_EQ(lay.ffn_degree, 4);
    EXPECT_EQ(lay.ffn_group, (std::vector<int>{0, 2, 1, 3}));
    EXPECT_EQ(lay.kv_shards, 2);
    EXPECT_EQ(lay.kv_shard, kvp);
    EXPECT_EQ(lay.kv_block, 4);
    EXPECT_TRUE(lay.tokens.replicated());
  }
  EXPECT_EQ(p.mesh().group(1, Axis::Kvp), (std::vector<int>{1, 3}));
  EXPECT_FALSE(describe(p, kStories).empty());
}

// The TP(N) rank order after the Helix merge is the Wo shard order (TRT-LLM #10350 broke it): for
// every (kvp, tpa) of a 24-head, 6-KV-head model, the heads a rank holds after the all-to-all
// (chunk kvp of its TPA heads) are exactly FFN/Wo shard ffn_index's H/N heads, the rank sits at
// position ffn_index of its FFN group, and that group lists every shard's owner in shard order.
TEST(Plan, HelixMergeOrderIsTheWoShardOrder) {
  const ModelShape m{24, 6, 8, 96, 2, 192};
  for (auto [k, a] : std::vector<std::pair<int, int>>{{2, 1}, {2, 3}, {3, 2}, {4, 1}, {2, 6}, {4, 3}, {3, 1}}) {
    const Plan p = Plan::make_helix(k, a);
    const int N = k * a, per = 24 / N;
    for (int r = 0; r < p.size(); ++r) {
      const RankLayout L = rank_layout(p, m, r);
      ASSERT_EQ(int(L.out_heads.size()), per) << p.to_string();
      EXPECT_EQ(L.out_heads, range_list(L.ffn_index * per, (L.ffn_index + 1) * per)) << p.to_string() << " rank " << r;
      EXPECT_EQ(L.ffn_index, L.tp * k + L.kvp) << p.to_string();
      EXPECT_EQ(L.ffn_group.at(size_t(L.ffn_index)), r) << p.to_string();
      // The merged chunk is chunk kvp of the rank's own TPA heads.
      EXPECT_EQ(L.out_heads.front(), L.q_heads.at(size_t(L.kvp * per))) << p.to_string();
    }
  }
  EXPECT_EQ(Plan::parse("kvp=2,tpa=2,hopb=off").to_string(), "kvp=2,tpa=2,hopb=off");
  EXPECT_FALSE(Plan::parse("kvp=2,tpa=2,hopb=off") == Plan::parse("kvp=2,tpa=2"));
  EXPECT_EQ(Plan::parse("tp=2,hopb=off"), Plan::parse("tp=2"));  // HOP-B is Helix's only
  EXPECT_THROW(Plan::parse("kvp=2,tpa=1,hopb=maybe"), Error);
}

}  // namespace
}  // namespace loom
