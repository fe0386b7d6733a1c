// KvPlacement and KvMigration. Expected holders come from a naive reading of PLANS.md (the tests'
// KV oracle, tests/kv/kv_oracle.h); expected migration bytes are worked out by hand from head
// counts and lengths.
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "kv/kv_oracle.h"
#include "parallel/kv_migration.h"
#include "parallel/kv_placement.h"
#include "parallel/plan.h"

namespace loom {

// gtest prints moves readably (found by ADL in namespace loom).
void PrintTo(const KvMove& m, std::ostream* os) {
  *os << m.src << "->" << m.dst << " layer " << m.layer << " head " << m.kv_head << " seq " << m.seq_id << " block "
      << m.block << " " << to_string(m.tokens);
}

namespace {

const ModelShape kStories{8, 4, 8, 96, 2, 64};  // stories260K heads, 2 layers for short sums
const ModelShape kSynth{24, 6, 4, 48 * 24, 6, 96};
// f16 KV, head_dim 8: K and V of one token, one head, one layer = 2 * 8 * 2 bytes.
constexpr int64_t kBpt = 2 * 8 * 2;

using test::naive_holders;  // the naive reading of PLANS.md (tests/kv/kv_oracle.h)

std::vector<SeqExtent> awkward_seqs() { return {{0, 1}, {1, 7}, {2, 17}, {3, 97}, {4, 40}}; }

TEST(KvPlacement, EqualityIsSetEquality) {
  TokenRule all;
  // The same cells given merged, split by layer, with heads in another order, or with an extra
  // empty rank, are equal; one head more is not.
  KvPlacement a(3, 4, {{KvEntry{{0, 3}, {0, 1}, all}}, {KvEntry{{0, 3}, {2, 3}, all}}});
  KvPlacement b(3, 4, {{KvEntry{{0, 1}, {1, 0}, all}, KvEntry{{1, 3}, {0, 1}, all}},
                       {KvEntry{{2, 3}, {3, 2}, all}, KvEntry{{0, 2}, {2, 3}, all}},
                       {}});
  KvPlacement c(3, 4, {{KvEntry{{0, 3}, {0, 1}, all}}, {KvEntry{{0, 3}, {1, 2, 3}, all}}});
  EXPECT_EQ(a, b);
  EXPECT_FALSE(a == c);
  // Rules normalise: a block rule over one KVP rank, or a sequence rule over one replica, is "all".
  TokenRule one_block{1, 0, 1, 0, 16, {}};
  KvPlacement d(3, 4, {{KvEntry{{0, 3}, {0, 1}, one_block}}, {KvEntry{{0, 3}, {2, 3}, all}}});
  EXPECT_EQ(a, d);
  // Different models never compare equal.
  EXPECT_FALSE(a == KvPlacement(3, 5, {{KvEntry{{0, 3}, {0, 1}, all}}, {KvEntry{{0, 3}, {2, 3}, all}}}));
  EXPECT_THROW(KvPlacement(3, 4, {{KvEntry{{0, 4}, {0}, all}}}), Error);
  EXPECT_THROW(KvPlacement(3, 4, {{KvEntry{{0, 3}, {4}, all}}}), Error);
  // a (rank, layer, head) under two rules is a programmer error
  TokenRule odd{1, 0, 2, 1, 4, {}};
  EXPECT_THROW(KvPlacement(3, 4, {{KvEntry{{0, 3}, {0}, all}, KvEntry{{1, 2}, {0}, odd}}}), InternalError);
}

TEST(KvPlacement, TokenRuleRanges) {
  TokenRule r{1, 0, 3, 1, 4, {}};  // blocks 1, 4, 7, ... of 4 tokens
  EXPECT_EQ(r.ranges(30), (std::vector<Range>{{4, 8}, {16, 20}, {28, 30}}));
  EXPECT_TRUE(r.ranges(4).empty());
  EXPECT_EQ(r.ranges(5), (std::vector<Range>{{4, 5}}));
  EXPECT_EQ(TokenRule{}.ranges(7), (std::vector<Range>{{0, 7}}));
  TokenRule replica{3, 2, 1, 0, 1, {}};
  EXPECT_TRUE(replica.has_seq(5));
  EXPECT_FALSE(replica.has_seq(6));
}

// Brute force: holders() agrees with the per-rank sets (stored_ranges) and with the naive
// PLANS.md reading, for random (layer, head, seq, pos) on small shapes.
TEST(KvPlacement, HoldersAgreeWithPerRankSetsAndNaiveMapping) {
  std::mt19937_64 rng(20240917);
  const ModelShape three_layers{8, 4, 8, 96, 3, 64};
  struct Case {
    const char* plan;
    ModelShape shape;
  };
  std::vector<Case> cases = {
      {"tp=1", three_layers},           {"tp=2", three_layers},          {"tp=8", three_layers},
      {"dp=3", three_layers},           {"dp=2,tp=4", three_layers},     {"sp=2,tp=4", three_layers},
      {"shift:sp=2,tp=4", three_layers}, {"sp=8", three_layers},         {"pp=3", three_layers},
      {"pp=2,layers=1+2,tp=2", three_layers}, {"kvp=2,tpa=2,block=4", three_layers},
      {"kvp=4,tpa=2,block=3", three_layers},  {"dp=2,kvp=2,tpa=4,block=5", three_layers},
      {"sp=3,tp=2", kSynth},            {"shift:sp=3,tp=2", kSynth},     {"sp=2,tp=12", kSynth},
      {"tp=24", kSynth},                {"kvp=4,tpa=6,block=2", kSynth}, {"dp=2,pp=3,sp=2,tp=3", kSynth}};
  for (const Case& c : cases) {
    const Plan p = Plan::parse(c.plan);
    const KvPlacement pl = kv_placement(p, c.shape);
    EXPECT_EQ(pl.n_ranks(), p.size());
    for (int i = 0; i < 400; ++i) {
      const int layer = int(rng() % c.shape.n_layers), head = int(rng() % c.shape.n_kv_heads);
      const SeqExtent seq{int64_t(rng() % 7), 1 + int64_t(rng() % 50)};
      const int64_t pos = int64_t(rng() % seq.n_tokens);
      std::vector<int> from_sets;
      for (int r = 0; r < pl.n_ranks(); ++r)
        for (const Range& t : pl.stored_ranges(r, layer, head, seq))
          if (t.contains(pos)) from_sets.push_back(r);
      const std::vector<int> h = pl.holders(layer, head, seq.id, pos);
      ASSERT_EQ(h, from_sets) << c.plan << " layer " << layer << " head " << head << " seq " << seq.id << " pos " << pos;
      ASSERT_EQ(h, naive_holders(p, c.shape, layer, head, seq.id, pos))
          << c.plan << " layer " << layer << " head " << head << " seq " << seq.id << " pos " << pos;
      ASSERT_FALSE(h.empty()) << c.plan << ": every cell is stored somewhere";
    }
    // stored_cells equals the count of cells stores() accepts
    const std::vector<SeqExtent> seqs = {{0, 9}, {1, 13}, {5, 2}};
    for (int r = 0; r < pl.n_ranks(); ++r) {
      int64_t n = 0;
      for (int l = 0; l < c.shape.n_layers; ++l)
        for (int h = 0; h < c.shape.n_kv_heads; ++h)
          for (const SeqExtent& s : seqs)
            for (int64_t pos = 0; pos < s.n_tokens; ++pos) n += pl.stores(r, l, h, s.id, pos);
      EXPECT_EQ(pl.stored_cells(r, seqs), n) << c.plan << " rank " << r;
    }
  }
}

// Shift 3.3.1: KvPlacement(SP(s) x TP(t)) == KvPlacement(Shift(s, t)) and switching moves nothing,
// for every (s, t) with s*t dividing H, including s*t > K (replication); layouts that cannot work
// are rejected up front. The natural-order TP(s*t) is a different placement when s, t > 1.
TEST(KvPlacement, ShiftSwitchMovesNothing) {
  struct Expect {
    ModelShape shape;
    // counted by hand: H=8/K=4 all 10 pairs; H=24/K=6 22 of 30 (s=1 is plain TP, valid for all
    // 8 divisors t of 24; s>1 is invalid where t or s*t neither divides nor is a multiple of 6)
    int valid, invalid;
  };
  for (const Expect& e : {Expect{kStories, 10, 0}, Expect{kSynth, 22, 8}}) {
    const int H = e.shape.n_heads;
    int valid = 0, invalid = 0, replicated = 0;
    for (int s = 1; s <= H; ++s)
      for (int t = 1; s * t <= H; ++t) {
        if (H % (s * t) != 0) continue;
        const Plan base = Plan::make_sp_tp(s, t), shift = Plan::make_shift(s, t);
        try {
          validate(base, e.shape);
        } catch (const Error&) {
          ++invalid;
          EXPECT_THROW(validate(shift, e.shape), Error);
          EXPECT_THROW(kv_placement(shift, e.shape), Error);
          continue;
        }
        ++valid;
        if (s * t > e.shape.n_kv_heads) ++replicated;
        const KvPlacement a = kv_placement(base, e.shape), b = kv_placement(shift, e.shape);
        EXPECT_EQ(a, b) << "s=" << s << " t=" << t << "\n" << a.to_string() << b.to_string();
        const KvMigration m = kv_migration(a, b, awkward_seqs(), 16, kBpt);
        EXPECT_EQ(m.total_bytes, 0) << "s=" << s << " t=" << t;
        EXPECT_EQ(m.dropped_bytes, 0);
        EXPECT_TRUE(m.moves.empty());
        if (s > 1 && t > 1) {
          const KvPlacement natural = kv_placement(Plan::make_tp(s * t), e.shape);
          EXPECT_FALSE(a == natural) << "s=" << s << " t=" << t;
          EXPECT_GT(kv_migration(a, natural, awkward_seqs(), 16, kBpt).total_bytes, 0);
        }
      }
    EXPECT_EQ(valid, e.valid);
    EXPECT_EQ(invalid, e.invalid);
    EXPECT_GT(replicated, 0);
  }
  // The paper's case, literally: SP=3, TP=2 on 24 heads (K=6), shift order 0,2,4,1,3,5.
  const Plan shift = Plan::parse("shift:sp=3,tp=2");
  EXPECT_EQ(shift.mesh().order(), (std::vector<int>{0, 2, 4, 1, 3, 5}));
  const KvPlacement base = kv_placement(Plan::parse("sp=3,tp=2"), kSynth);
  EXPECT_EQ(base, kv_placement(shift, kSynth));
  // rank (sp, tp) stores KV head of query heads tp*12 + sp*4 + [0,4): one KV head (G=4)
  const int kv_of_rank[6] = {0, 3, 1, 4, 2, 5};
  for (int g = 0; g < 6; ++g) {
    ASSERT_EQ(base.entries(g).size(), 1u);
    EXPECT_EQ(base.entries(g)[0].kv_heads, (std::vector<int>{kv_of_rank[g]}));
    EXPECT_EQ(base.entries(g)[0].layers, (Range{0, 6}));
  }
}

TEST(KvMigration, BytesPerToken) {
  EXPECT_EQ(kv_bytes_per_token(8, DType::F16), 32);
  EXPECT_EQ(kv_bytes_per_token(64, DType::F32), 2 * 64 * 4);
  EXPECT_EQ(kv_bytes_per_token(32, DType::Q8_0), 2 * 34);
  EXPECT_THROW(kv_bytes_per_token(8, DType::Q8_0), Error);
}

// TP(2) -> TP(4), stories260K heads (K=4), 2 layers, sequences of 5 and 17 tokens (22 tokens).
// TP(2): rank 0 holds KV heads {0,1}, rank 1 {2,3}. TP(4): rank r holds {r}.
//   rank 0 keeps head 0; rank 1 needs head 1 from rank 0; ranks 2, 3 need heads 2, 3 from rank 1.
//   each: 22 tokens * 1 head * 2 layers * 32 bytes = 1408.
TEST(KvMigration, TensorParallelTwoToFour) {
  const std::vector<SeqExtent> seqs = {{0, 5}, {1, 17}};
  const KvPlacement tp2 = kv_placement(Plan::make_tp(2), kStories), tp4 = kv_placement(Plan::make_tp(4), kStories);
  const KvMigration m = kv_migration(tp2, tp4, seqs, 16, kBpt);
  EXPECT_EQ(m.bytes(0, 1), 1408);
  EXPECT_EQ(m.bytes(1, 2), 1408);
  EXPECT_EQ(m.bytes(1, 3), 1408);
  EXPECT_EQ(m.bytes_by_pair.size(), 3u);
  EXPECT_EQ(m.total_bytes, 3 * 1408);
  // rank 0 frees head 1 (1408), rank 1 frees heads 2 and 3 (2816)
  EXPECT_EQ(m.dropped_bytes, 3 * 1408);
  // per pair and layer: block 0 of seq 0, blocks 0 and 1 of seq 1 -> 6 moves per pair
  EXPECT_EQ(m.moves.size(), 18u);
  EXPECT_EQ(m.moves[0], (KvMove{0, 1, 0, 1, 0, 0, Range{0, 5}}));
  // sorted by (src, dst, seq, layer, head, token): seq 0 layers 0, 1, then seq 1 blocks 0, 1
  EXPECT_EQ(m.moves[1], (KvMove{0, 1, 1, 1, 0, 0, Range{0, 5}}));
  EXPECT_EQ(m.moves[2], (KvMove{0, 1, 0, 1, 1, 0, Range{0, 16}}));
  EXPECT_EQ(m.moves[3], (KvMove{0, 1, 0, 1, 1, 1, Range{16, 17}}));
  int64_t sum = 0;
  for (const KvMove& mv : m.moves) {
    sum += m.move_bytes(mv);
    EXPECT_FALSE(tp2.stores(mv.dst, mv.layer, mv.kv_head, mv.seq_id, mv.tokens.begin));
    EXPECT_TRUE(tp2.stores(mv.src, mv.layer, mv.kv_head, mv.seq_id, mv.tokens.begin));
    EXPECT_TRUE(tp4.stores(mv.dst, mv.layer, mv.kv_head, mv.seq_id, mv.tokens.end - 1));
    EXPECT_EQ(mv.block, mv.tokens.begin / 16);
    EXPECT_EQ(mv.block, (mv.tokens.end - 1) / 16);
  }
  EXPECT_EQ(sum, m.total_bytes);
  // Back: rank 0 needs head 1 (from rank 1), rank 1 needs heads 2, 3 (from ranks 2, 3).
  const KvMigration back = kv_migration(tp4, tp2, seqs, 16, kBpt);
  EXPECT_EQ(back.bytes(1, 0), 1408);
  EXPECT_EQ(back.bytes(2, 1), 1408);
  EXPECT_EQ(back.bytes(3, 1), 1408);
  EXPECT_EQ(back.total_bytes, 3 * 1408);
  EXPECT_EQ(back.dropped_bytes, 3 * 1408);
}

// Several holders: TP(8) stores KV head h on ranks 2h and 2h+1; the lowest one sends.
// TP(8) -> TP(4): rank 0 keeps head 0; rank 1 (has head 0) gets head 1 from rank 2; rank 2 (has
// head 1) gets head 2 from rank 4; rank 3 (has head 1) gets head 3 from rank 6.
TEST(KvMigration, ReplicatedSourcesPickTheLowestRank) {
  const std::vector<SeqExtent> seqs = {{0, 5}, {1, 17}};
  const KvMigration m = kv_migration(kv_placement(Plan::make_tp(8), kStories), kv_placement(Plan::make_tp(4), kStories),
                                     seqs, 16, kBpt);
  EXPECT_EQ(m.bytes(2, 1), 1408);
  EXPECT_EQ(m.bytes(4, 2), 1408);
  EXPECT_EQ(m.bytes(6, 3), 1408);
  EXPECT_EQ(m.total_bytes, 3 * 1408);
  EXPECT_EQ(m.dropped_bytes, 7 * 1408);  // ranks 1, 2, 3 change head; ranks 4..7 free theirs
  // TP(4) -> TP(8): every odd rank copies its pair's head; even ranks 2h get head h from rank h.
  const KvMigration up = kv_migration(kv_placement(Plan::make_tp(4), kStories), kv_placement(Plan::make_tp(8), kStories),
                                      seqs, 16, kBpt);
  for (auto [src, dst] : std::vector<std::pair<int, int>>{{0, 1}, {1, 2}, {1, 3}, {2, 4}, {2, 5}, {3, 6}, {3, 7}})
    EXPECT_EQ(up.bytes(src, dst), 1408) << src << "->" << dst;
  EXPECT_EQ(up.total_bytes, 7 * 1408);
}

// TP(1) on rank 0 -> DP(2): sequences 0, 1, 2 of 3, 4, 10 tokens; replica 1 gets sequence 1
// (id % 2 == 1): 4 tokens * 4 heads * 2 layers * 32 = 1024 bytes from rank 0.
TEST(KvMigration, TensorToDataParallel) {
  const std::vector<SeqExtent> seqs = {{0, 3}, {1, 4}, {2, 10}};
  const KvPlacement tp1 = kv_placement(Plan::make_tp(1), kStories), dp2 = kv_placement(Plan::make_dp(2), kStories);
  const KvMigration m = kv_migration(tp1, dp2, seqs, 16, kBpt);
  EXPECT_EQ(m.bytes(0, 1), 1024);
  EXPECT_EQ(m.total_bytes, 1024);
  EXPECT_EQ(m.dropped_bytes, 1024);
  const KvMigration back = kv_migration(dp2, tp1, seqs, 16, kBpt);
  EXPECT_EQ(back.bytes(1, 0), 1024);
  EXPECT_EQ(back.total_bytes, 1024);
  // TP(2) -> DP(2) on the same two ranks: rank 0 needs heads {2,3} of sequences 0 and 2 (13
  // tokens) from rank 1: 13*2*2*32 = 1664; rank 1 needs heads {0,1} of sequence 1: 4*2*2*32 = 512.
  const KvMigration t2 = kv_migration(kv_placement(Plan::make_tp(2), kStories), dp2, seqs, 16, kBpt);
  EXPECT_EQ(t2.bytes(1, 0), 1664);
  EXPECT_EQ(t2.bytes(0, 1), 512);
  EXPECT_EQ(t2.total_bytes, 1664 + 512);
}

// Helix kvp=2 -> kvp=4 (tpa=2, 4-token blocks), one sequence of 30 tokens (blocks 0..7, the last
// of 2 tokens). New ranks 4..7 are KVP ranks 2, 3: KVP rank 2 needs blocks 2, 6 (8 tokens) from
// old KVP rank 0 of its tpa; KVP rank 3 needs blocks 3, 7 (4 + 2 tokens) from old KVP rank 1.
// bytes = tokens * 2 heads * 2 layers * 32.
TEST(KvMigration, HelixChangesKvpDegree) {
  const std::vector<SeqExtent> seqs = {{0, 30}};
  const KvPlacement k2 = kv_placement(Plan::parse("kvp=2,tpa=2,block=4"), kStories);
  const KvPlacement k4 = kv_placement(Plan::parse("kvp=4,tpa=2,block=4"), kStories);
  for (int64_t mig_block : {1, 4, 16}) {
    const KvMigration m = kv_migration(k2, k4, seqs, mig_block, kBpt);
    EXPECT_EQ(m.bytes(0, 4), 8 * 128) << mig_block;
    EXPECT_EQ(m.bytes(1, 5), 8 * 128);
    EXPECT_EQ(m.bytes(2, 6), 6 * 128);
    EXPECT_EQ(m.bytes(3, 7), 6 * 128);
    EXPECT_EQ(m.total_bytes, 28 * 128);
    EXPECT_EQ(m.dropped_bytes, 28 * 128);
    for (const KvMove& mv : m.moves) EXPECT_EQ(mv.block, (mv.tokens.end - 1) / mig_block);
  }
  // Helix kvp=2,tpa=2 -> TP(2) on ranks 0, 1: odd blocks (1,3,5,7: 14 tokens) of heads {0,1} from
  // rank 2 to rank 0 and of heads {2,3} from rank 3 to rank 1: 14*2*2*32 = 1792 each.
  const KvMigration h2t = kv_migration(k2, kv_placement(Plan::make_tp(2), kStories), seqs, 4, kBpt);
  EXPECT_EQ(h2t.bytes(2, 0), 1792);
  EXPECT_EQ(h2t.bytes(3, 1), 1792);
  EXPECT_EQ(h2t.total_bytes, 2 * 1792);
}

// total_bytes == 0 && dropped_bytes == 0 <=> equal placements on the sequences; and equal_on
// agrees with operator== when the sequences exercise every replica and block rule.
TEST(KvMigration, ZeroExactlyWhenPlacementsAreEqual) {
  const std::vector<std::string> plans = {"tp=1", "tp=2", "tp=4", "tp=8", "dp=2", "dp=2,tp=2", "sp=2,tp=2",
                                          "shift:sp=2,tp=2", "sp=2,tp=4", "shift:sp=4,tp=2", "sp=4,tp=2",
                                          "pp=2", "pp=2,tp=2", "kvp=2,tpa=2", "kvp=2,tpa=2,block=8",
                                          "kvp=4,tpa=2", "kvp=2,tpa=4", "dp=4", "sp=8"};
  const std::vector<SeqExtent> seqs = {{0, 33}, {1, 17}, {2, 5}, {3, 70}};
  int equal_pairs = 0;
  for (const std::string& a : plans)
    for (const std::string& b : plans) {
      const KvPlacement pa = kv_placement(Plan::parse(a), kStories), pb = kv_placement(Plan::parse(b), kStories);
      const KvMigration m = kv_migration(pa, pb, seqs, 16, kBpt);
      const bool eq = pa.equal_on(pb, seqs);
      EXPECT_EQ(m.total_bytes == 0 && m.dropped_bytes == 0, eq) << a << " -> " << b;
      EXPECT_EQ(pa == pb, eq) << a << " vs " << b;
      equal_pairs += eq;
    }
  // Equal pairs, by hand: each plan with itself (19); sp=2,tp=2 <-> its shift (2); sp=4,tp=2 <->
  // its shift (2); sp=8 <-> tp=8 (2: with tp=1 the shift order (j % 8)*1 + j / 8 is the identity,
  // rank r holds query head r either way). Not equal: sp=2,tp=2 vs tp=4 (rank 1 = (sp 0, tp 1)
  // holds heads 4..5, TP(4) rank 1 heads 2..3); sp=2,tp=4 vs shift:sp=4,tp=2 (other base).
  EXPECT_EQ(equal_pairs, 19 + 2 + 2 + 2);
  // Moving nothing is not the same as equal: with one KV head, TP(2) -> TP(1) needs no bytes
  // (rank 0 already holds head 0) but rank 1 frees its copy.
  const ModelShape mqa{8, 1, 8, 96, 2, 64};
  const KvMigration m = kv_migration(kv_placement(Plan::make_tp(2), mqa), kv_placement(Plan::make_tp(1), mqa),
                                     {{0, 10}}, 16, kBpt);
  EXPECT_EQ(m.total_bytes, 0);
  EXPECT_EQ(m.dropped_bytes, 10 * 2 * kBpt);
}

// A Nitsum pool's instances side by side (cluster/pool.h): two TP(1) instances on ranks 0 and 1
// holding their own sequences, then one TP(2) instance over both holding all of them. The
// migration moves, per sequence, exactly the heads its new holder lacks, from the one rank that
// has them (naive count below); sequences outside an instance's set are stored nowhere.
TEST(KvMigration, PoolInstancesSideBySide) {
  const ModelShape& m = kStories;  // 4 KV heads, 2 layers
  const KvPlacement tp1 = kv_placement(Plan::make_tp(1), m), tp2 = kv_placement(Plan::make_tp(2), m);
  const KvPlacement from = combine_placements({{&tp1, {0}, {2, 1}}, {&tp1, {1}, {3}}}, 2);
  const KvPlacement to = combine_placements({{&tp2, {0, 1}, {1, 2, 3}}}, 2);
  EXPECT_EQ(from.holders(0, 0, 1, 5), std::vector<int>{0});
  EXPECT_EQ(from.holders(1, 3, 3, 0), std::vector<int>{1});
  EXPECT_TRUE(from.holders(0, 0, 4, 0).empty());  // in no instance's set
  EXPECT_EQ(to.holders(0, 0, 3, 0), std::vector<int>{0});
  EXPECT_EQ(to.holders(0, 3, 1, 0), std::vector<int>{1});
  const std::vector<SeqExtent> seqs{{1, 20}, {2, 7}, {3, 33}};
  const int64_t bpt = 8;
  const KvMigration mig = kv_migration(from, to, seqs, 16, bpt);
  // Seqs 1 and 2: KV heads 2 and 3 leave rank 0 for rank 1; seq 3: heads 0 and 1 go 1 -> 0.
  EXPECT_EQ(mig.bytes(0, 1), (20 + 7) * int64_t(m.n_layers) * 2 * bpt);
  EXPECT_EQ(mig.bytes(1, 0), 33 * int64_t(m.n_layers) * 2 * bpt);
  EXPECT_EQ(mig.total_bytes, mig.bytes(0, 1) + mig.bytes(1, 0));
  EXPECT_EQ(mig.dropped_bytes, mig.total_bytes);  // what moved is no longer held by its source
  for (const KvMove& mv : mig.moves) EXPECT_EQ(mv.src, mv.seq_id == 3 ? 1 : 0) << "sequence " << mv.seq_id;
  // The reverse hand-off of one sequence between two instances, the others untouched.
  const KvPlacement a = combine_placements({{&tp1, {0}, {7}}}, 2), b = combine_placements({{&tp1, {1}, {7}}}, 2);
  const KvMigration one = kv_migration(a, b, {{7, 40}}, 16, bpt);
  EXPECT_EQ(one.total_bytes, 40 * int64_t(m.n_layers) * m.n_kv_heads * bpt);
  EXPECT_EQ(one.bytes(0, 1), one.total_bytes);
  EXPECT_THROW(combine_placements({{&tp2, {0, 0}, {1}}}, 2), Error);
  EXPECT_THROW(combine_placements({{&tp1, {2}, {1}}}, 2), Error);
}

TEST(KvMigration, RejectsMismatchedModels) {
  EXPECT_THROW(kv_migration(kv_placement(Plan::make_tp(2), kStories), kv_placement(Plan::make_tp(2), kSynth),
                            {{0, 4}}, 16, kBpt),
               Error);
  EXPECT_THROW(kv_migration(kv_placement(Plan::make_tp(2), kStories), kv_placement(Plan::make_tp(2), kStories),
                            {{0, 4}}, 0, kBpt),
               Error);
  // a source that does not store everything the destination needs
  KvPlacement partial(2, 4, {{KvEntry{{0, 1}, {0, 1, 2, 3}, TokenRule{}}}});
  EXPECT_THROW(kv_migration(partial, kv_placement(Plan::make_tp(1), kStories), {{0, 4}}, 16, kBpt), Error);
}

// kv_migration_bytes (the simulator's count) against kv_migration's moves: the same bytes per pair,
// total and dropped bytes for every ordered pair of plans (TP, DP, SP, Shift, PP, Helix with
// several KVP blocks, GQA replication) on two models, several block sizes and lengths that end
// inside and on block boundaries; Nitsum pool instances; and the same rejections.
TEST(KvMigration, BytesAloneEqualTheMovesBytes) {
  const std::vector<std::string> plans = {"tp=1", "tp=2", "tp=4", "tp=8", "dp=2", "dp=2,tp=2", "sp=2,tp=2",
                                          "shift:sp=2,tp=2", "sp=4,tp=2", "pp=2", "pp=2,tp=2", "pp=2,tp=4",
                                          "pp=4,tp=2", "kvp=2,tpa=2", "kvp=2,tpa=2,block=8", "kvp=4,tpa=2",
                                          "kvp=2,tpa=4", "dp=4", "sp=8", "dp=2,pp=2,tp=2"};
  const std::vector<SeqExtent> seqs = {{0, 33}, {1, 17}, {2, 5}, {3, 70}, {4, 0}, {5, 64}, {6, 1}};
  auto same = [](const KvMigration& m, const KvMigrationBytes& b) {
    return m.bytes_by_pair == b.bytes_by_pair && m.total_bytes == b.total_bytes && m.dropped_bytes == b.dropped_bytes;
  };
  int compared = 0, moving = 0;
  for (const ModelShape& shape : {kStories, ModelShape{8, 2, 8, 96, 4, 64}})
    for (const std::string& a : plans)
      for (const std::string& b : plans) {
        const Plan pa = Plan::parse(a), pb = Plan::parse(b);
        if (pa.size() != pb.size()) continue;
        KvPlacement fa, fb;
        try {
          fa = kv_placement(pa, shape), fb = kv_placement(pb, shape);
        } catch (const Error&) {
          continue;  // not valid on this model
        }
        for (int64_t block : {1, 4, 16}) {
          const KvMigration m = kv_migration(fa, fb, seqs, block, kBpt);
          const KvMigrationBytes q = kv_migration_bytes(fa, fb, seqs, block, kBpt);
          EXPECT_TRUE(same(m, q)) << a << " -> " << b << " block " << block << ": " << m.summary() << " vs total "
                                  << q.total_bytes << " dropped " << q.dropped_bytes;
          ++compared;
          moving += m.total_bytes > 0;
        }
      }
  EXPECT_GT(compared, 300);
  EXPECT_GT(moving, 150);
  // Pool instances with sequence sets (cluster/pool.h).
  const KvPlacement tp1 = kv_placement(Plan::make_tp(1), kStories), tp2 = kv_placement(Plan::make_tp(2), kStories);
  const KvPlacement from = combine_placements({{&tp1, {0}, {2, 1}}, {&tp1, {1}, {3}}}, 2);
  const KvPlacement to = combine_placements({{&tp2, {0, 1}, {1, 2, 3}}}, 2);
  const std::vector<SeqExtent> pool_seqs{{1, 20}, {2, 7}, {3, 33}};
  EXPECT_TRUE(same(kv_migration(from, to, pool_seqs, 16, 8), kv_migration_bytes(from, to, pool_seqs, 16, 8)));
  EXPECT_TRUE(same(kv_migration(to, from, pool_seqs, 16, 8), kv_migration_bytes(to, from, pool_seqs, 16, 8)));
  EXPECT_GT(kv_migration_bytes(from, to, pool_seqs, 16, 8).total_bytes, 0);
  // Rejections.
  EXPECT_THROW(kv_migration_bytes(kv_placement(Plan::make_tp(2), kStories), kv_placement(Plan::make_tp(2), kSynth),
                                  {{0, 4}}, 16, kBpt),
               Error);
  EXPECT_THROW(kv_migration_bytes(tp2, tp2, {{0, 4}}, 0, kBpt), Error);
  EXPECT_THROW(kv_migration_bytes(tp2, tp2, {{0, 4}}, 16, 0), Error);
  EXPECT_THROW(kv_migration_bytes(tp2, tp2, {{0, -1}}, 16, kBpt), Error);
  KvPlacement partial(2, 4, {{KvEntry{{0, 1}, {0, 1, 2, 3}, TokenRule{}}}});
  EXPECT_THROW(kv_migration_bytes(partial, kv_placement(Plan::make_tp(1), kStories), {{0, 4}}, 16, kBpt), Error);
}

}  // namespace
}  // namespace loom
