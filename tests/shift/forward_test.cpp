// Shift Parallelism at the level of one replica's forward passes (engine/ulysses.h,
// engine/shift_executor.h), on the local backend: fixed steps (mixed prefill chunks and decode
// tokens over non-contiguous KV blocks, step sizes that need padding) run under interleavings of
// the base config SP(s) x TP(t) and its shift config TP(s*t), against the single-rank forward pass:
//   - rank 0's logits of every step: |got - ref| <= 1e-4 + 1e-4 * |ref| per element, and the
//     same argmax (TP and SP change only the order of float sums);
//   - the execution-level KV check (Shift 3.3.1): after the steps, every rank's KV cache holds,
//     for each of its KV heads and every written (block, position), what the single-rank cache
//     holds for that model head (same tolerance), and zeros everywhere else — so the base and
//     the shift config wrote the same placement and a switch needs to move nothing;
//   - both weight modes of Shift 3.3.2 (separate copies, slices of the base copy) give the same
//     logits bit for bit, and their memory is w/t + w/P and w/t per rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

#include "comm/local.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/weight_tiles.h"
#include "engine/shift_executor.h"
#include "model/loader.h"
#include "model/synth.h"
#include "parallel/sharding.h"
#include "single_rank.h"
#include "test_util.h"

namespace loom {
namespace {

constexpr int kBlock = 16;
constexpr int kBlocks = 12;

struct Seq {
  std::vector<int32_t> blocks;
  int len = 0;  // tokens already in the cache
};

struct Step {
  // (sequence, tokens) in batch order
  std::vector<std::pair<int, int>> work;
};

// The fixed workload: three sequences over scattered blocks; steps of 25, 25, 3, 3, 1, 9 tokens.
const std::vector<Step> kSteps = {
    {{{0, 20}, {1, 5}}},          // two prefills
    {{{1, 1}, {0, 17}, {2, 7}}},  // decode, prefill chunk, new prefill
    {{{0, 1}, {1, 1}, {2, 1}}},   // decodes
    {{{0, 1}, {1, 1}, {2, 1}}},
    {{{2, 1}}},                   // one token: padding to s on every rank but one
    {{{0, 1}, {2, 8}}},
};
std::vector<Seq> fresh_seqs() { return {{{3, 0, 5, 7}, 0}, {{1, 9}, 0}, {{2, 11, 4}, 0}}; }

// The forward batches of kSteps with token ids from Rng(seed); want_logits on every sequence.
std::vector<ForwardBatch> make_batches(std::vector<Seq>& seqs, int vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<ForwardBatch> out;
  for (const Step& st : kSteps) {
    ForwardBatch fb;
    for (auto [i, n] : st.work) {
      Seq& s = seqs[size_t(i)];
      for (int k = 0; k < n; ++k) fb.tokens.push_back(int32_t(rng.below(uint64_t(vocab))));
      fb.seqs.push_back(ForwardSeq{s.len, n, s.blocks.data(), int(s.blocks.size()), true});
      s.len += n;
    }
    out.push_back(fb);
  }
  return out;
}

KvLayout layout(const ModelConfig& c, int n_kv_heads) {
  KvLayout l;
  l.n_layers = c.n_layers;
  l.n_kv_heads = n_kv_heads;
  l.head_dim = c.head_dim;
  l.block_size = kBlock;
  l.num_blocks = kBlocks;
  return l;
}

struct Reference {
  std::vector<std::vector<float>> logits;  // per step
  std::unique_ptr<KvStorage> kv;
};

Reference single_rank(const std::shared_ptr<const Model>& m, const std::vector<ForwardBatch>& batches) {
  ThreadPool pool(1);
  Transformer tf(m, ShardSpec::full(m->config), &pool);
  Reference r;
  r.kv = std::make_unique<KvStorage>(layout(m->config, m->config.n_kv_heads));
  for (const ForwardBatch& fb : batches) {
    std::vector<float> l;
    tf.forward(fb, *r.kv, l);
    r.logits.push_back(l);
  }
  return r;
}

struct RankResult {
  int kv_begin = 0, n_kv = 0;
  std::vector<float> k, v;
  ShiftRankMemory mem;
};
struct DistResult {
  std::vector<std::vector<float>> logits;
  std::vector<RankResult> ranks;
};

DistResult run_replica(const std::shared_ptr<const Model>& m, const Plan& base, const std::vector<ForwardBatch>& batches,
                       const std::vector<std::string>& plans, ShiftRankOptions opt) {
  DistResult out;
  out.ranks.resize(size_t(base.size()));
  std::mutex mu;
  CommOptions co;
  co.timeout_s = 30;
  LocalWorld::run(
      base.size(),
      [&](Communicator& world) {
        ThreadPool pool(1);
        const UlyssesRank ur = UlyssesRank::of(base, ModelShape::from(m->config), world.rank());
        ShiftRank rank(m, base, world, &pool, layout(m->config, ur.attn_n_kv), opt);
        std::vector<std::vector<float>> logits;
        for (size_t i = 0; i < batches.size(); ++i) {
          std::vector<float> l;
          rank.forward(plans[i], batches[i], world.rank() == 0 ? &l : nullptr);
          logits.push_back(l);
        }
        RankResult rr;
        rr.kv_begin = ur.attn_kv_begin;
        rr.n_kv = ur.attn_n_kv;
        rr.k.assign(rank.kv().k.data(), rank.kv().k.data() + rank.kv().k.size());
        rr.v.assign(rank.kv().v.data(), rank.kv().v.data() + rank.kv().v.size());
        rr.mem = rank.memory();
        std::lock_guard<std::mutex> lock(mu);
        out.ranks[size_t(world.rank())] = std::move(rr);
        if (world.rank() == 0) out.logits = std::move(logits);
      },
      co);
  return out;
}

bool close(float got, float ref) { return std::fabs(got - ref) <= 1e-4f + 1e-4f * std::fabs(ref); }

// Compares logits and every rank's cache with the single-rank run; `label` names the case.
void expect_matches(const std::shared_ptr<const Model>& m, const Reference& ref, const DistResult& got,
                    const std::string& label) {
  const int V = m->config.vocab_size;
  ASSERT_EQ(got.logits.size(), ref.logits.size()) << label;
  for (size_t s = 0; s < ref.logits.size(); ++s) {
    ASSERT_EQ(got.logits[s].size(), ref.logits[s].size()) << label << " step " << s;
    float worst = 0;
    for (size_t i = 0; i < ref.logits[s].size(); ++i) {
      if (!close(got.logits[s][i], ref.logits[s][i]))
        worst = std::max(worst, std::fabs(got.logits[s][i] - ref.logits[s][i]));
    }
    EXPECT_EQ(worst, 0.0f) << label << " step " << s << ": logits beyond tolerance by up to " << worst;
    for (size_t row = 0; row * V < ref.logits[s].size(); ++row) {
      const float* a = got.logits[s].data() + row * V;
      const float* b = ref.logits[s].data() + row * V;
      EXPECT_EQ(std::max_element(a, a + V) - a, std::max_element(b, b + V) - b) << label << " step " << s;
    }
  }
  // Written cells: for every step's tokens, (sequence block, position).
  std::vector<Seq> seqs = fresh_seqs();
  std::vector<std::vector<bool>> written(kBlocks, std::vector<bool>(kBlock, false));
  for (const Step& st : kSteps)
    for (auto [i, n] : st.work)
      for (int k = 0; k < n; ++k, ++seqs[size_t(i)].len) {
        const int p = seqs[size_t(i)].len;
        written[size_t(seqs[size_t(i)].blocks[size_t(p / kBlock)])][size_t(p % kBlock)] = true;
      }
  const KvLayout rl = ref.kv->layout;
  for (size_t r = 0; r < got.ranks.size(); ++r) {
    const RankResult& rr = got.ranks[r];
    const KvLayout gl = layout(m->config, rr.n_kv);
    int64_t bad = 0, nonzero_unwritten = 0, checked = 0;
    for (int l = 0; l < m->config.n_layers; ++l)
      for (int b = 0; b < kBlocks; ++b)
        for (int h = 0; h < rr.n_kv; ++h)
          for (int p = 0; p < kBlock; ++p)
            for (int e = 0; e < m->config.head_dim; ++e) {
              const int64_t go = gl.offset(l, b, h, p) + e, ro = rl.offset(l, b, rr.kv_begin + h, p) + e;
              if (written[size_t(b)][size_t(p)]) {
                ++checked;
                bad += !close(rr.k[size_t(go)], ref.kv->k[size_t(ro)]) + !close(rr.v[size_t(go)], ref.kv->v[size_t(ro)]);
              } else {
                nonzero_unwritten += rr.k[size_t(go)] != 0.0f || rr.v[size_t(go)] != 0.0f;
              }
            }
    EXPECT_GT(checked, 0);
    EXPECT_EQ(bad, 0) << label << " rank " << r << " (KV heads " << rr.kv_begin << "+" << rr.n_kv
                      << "): cells differing from the single-rank cache";
    EXPECT_EQ(nonzero_unwritten, 0) << label << " rank " << r << ": cells written outside the steps' positions";
  }
}

// Interleavings: base only, shift only, alternating from either side, and a seeded random one.
std::vector<std::pair<std::string, std::vector<std::string>>> schedules(const Plan& base) {
  const std::string b = base.to_string(), s = base.shift_config().to_string();
  const size_t n = kSteps.size();
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  out.push_back({"base", std::vector<std::string>(n, b)});
  out.push_back({"shift", std::vector<std::string>(n, s)});
  std::vector<std::string> alt1, alt2, rnd;
  Rng rng(uint64_t(base.sp * 31 + base.tp));
  for (size_t i = 0; i < n; ++i) {
    alt1.push_back(i % 2 ? s : b);
    alt2.push_back(i % 2 ? b : s);
    rnd.push_back(rng.below(2) ? b : s);
  }
  out.push_back({"base,shift,...", alt1});
  out.push_back({"shift,base,...", alt2});
  out.push_back({"random", rnd});
  return out;
}

void check_model(const std::shared_ptr<const Model>& m, const std::vector<std::pair<int, int>>& degrees) {
  std::vector<Seq> seqs = fresh_seqs();
  const std::vector<ForwardBatch> batches = make_batches(seqs, m->config.vocab_size, 5);
  const Reference ref = single_rank(m, batches);
  for (auto [s, t] : degrees) {
    const Plan base = Plan::make_sp_tp(s, t);
    for (const auto& [name, plans] : schedules(base)) {
      const std::string label = cat(base.to_string(), " ", name);
      ShiftRankOptions opt;
      expect_matches(m, ref, run_replica(m, base, batches, plans, opt), label);
    }
  }
}

TEST(ShiftForward, Stories260KEverySpTp) {
  LOOM_REQUIRE_SHARED();
  std::shared_ptr<const Model> m = load_model(test::stories_dir() + "/stories260K.bin");
  ASSERT_EQ(m->config.n_heads, 8);
  ASSERT_EQ(m->config.n_kv_heads, 4);
  // Every (s, t) with s > 1 and s*t | 8; s*t = 8 exceeds the 4 KV heads (GQA replication).
  check_model(m, {{2, 1}, {2, 2}, {2, 4}, {4, 1}, {4, 2}, {8, 1}});
}

TEST(ShiftForward, SynthGqa24x6EveryValidSpTp) {
  std::shared_ptr<const Model> m = load_model(test::gqa_24x6_path());
  ASSERT_EQ(m->config.n_heads, 24);
  ASSERT_EQ(m->config.n_kv_heads, 6);
  // s*t in {2, 3, 6, 12, 24} (the products that also split or replicate the 6 KV heads evenly),
  // including the paper's SP=3, TP=2 (head order 0,2,4,1,3,5).
  check_model(m, {{2, 1}, {3, 1}, {2, 3}, {3, 2}, {6, 1}, {2, 6}, {4, 3}, {6, 2}, {12, 1}, {8, 3}, {2, 12}});
}

// Products that divide the 24 query heads but not the KV heads evenly, and TP degrees that
// neither split nor replicate them, are rejected before anything runs, naming the sizes.
TEST(ShiftForward, ImpossibleCombinationsRejectedUpFront) {
  std::shared_ptr<const Model> m = load_model(test::gqa_24x6_path());
  const ModelShape shape = ModelShape::from(m->config);
  auto error_of = [&](int s, int t) -> std::string {
    try {
      validate(Plan::make_sp_tp(s, t), shape);
    } catch (const Error& e) {
      return e.what();
    }
    return "(accepted)";
  };
  EXPECT_NE(error_of(2, 2).find("sp*tp (sp=2, tp=2)=4"), std::string::npos) << error_of(2, 2);
  EXPECT_NE(error_of(4, 1).find("num_key_value_heads=6"), std::string::npos) << error_of(4, 1);
  EXPECT_NE(error_of(8, 1).find("num_key_value_heads=6"), std::string::npos) << error_of(8, 1);
  EXPECT_NE(error_of(3, 4).find("tp=4"), std::string::npos) << error_of(3, 4);
  EXPECT_NE(error_of(5, 1).find("num_attention_heads=24"), std::string::npos) << error_of(5, 1);
  // And the rank-level constructor refuses them too (no rank of them is ever built).
  EXPECT_THROW(UlyssesRank::of(Plan::make_sp_tp(2, 2), shape, 0), Error);
}

// Shift 3.3.2: separate copies and slices of the base copy compute the same logits bit for bit;
// memory per rank is w/t + w/P (separate) and w/t (slice), as shift_weight_memory says.
TEST(ShiftForward, WeightModesSeparateAndSliceAgree) {
  std::shared_ptr<const Model> m = load_model(test::gqa_24x6_path());
  std::vector<Seq> seqs = fresh_seqs();
  const std::vector<ForwardBatch> batches = make_batches(seqs, m->config.vocab_size, 9);
  const Plan base = Plan::make_sp_tp(3, 2);
  const auto sched = schedules(base)[4].second;  // random interleaving
  ShiftRankOptions sep, sli;
  sep.weights = ShiftWeights::Separate;
  sli.weights = ShiftWeights::Slice;
  const DistResult a = run_replica(m, base, batches, sched, sep);
  const DistResult b = run_replica(m, base, batches, sched, sli);
  ASSERT_EQ(a.logits.size(), b.logits.size());
  for (size_t i = 0; i < a.logits.size(); ++i) EXPECT_EQ(a.logits[i], b.logits[i]) << "step " << i;
  const ModelShape shape = ModelShape::from(m->config);
  for (int r = 0; r < base.size(); ++r) {
    const ShiftWeightMemory w = shift_weight_memory(base, shape, r);
    const RankResult &x = a.ranks[size_t(r)], &y = b.ranks[size_t(r)];
    EXPECT_EQ(x.mem.base_shard_bytes, w.base_elems * 4) << r;
    EXPECT_EQ(x.mem.shift_shard_bytes, w.shift_elems * 4) << r;
    // Owned copies: at least the shards, at most 64 bytes of alignment per matrix more, and for
    // the separate copies (in the row-tile layout) at most kTileRows - 1 padding rows per matrix.
    const int64_t slack = 64 * 7 * m->config.n_layers;
    const int64_t tile_pad =
        int64_t(kTileRows - 1) * 4 * std::max<int64_t>(m->config.d_model, m->config.ffn_dim) * 7 * m->config.n_layers;
    EXPECT_GE(x.mem.owned_bytes, w.separate() * 4) << r;
    EXPECT_LE(x.mem.owned_bytes, w.separate() * 4 + 2 * (slack + tile_pad)) << r;
    EXPECT_GE(y.mem.owned_bytes, w.sliced() * 4) << r;
    EXPECT_LE(y.mem.owned_bytes, w.sliced() * 4 + slack) << r;
  }
  expect_matches(m, single_rank(m, batches), b, "slice sp=3,tp=2");
}

// The switch is free: KvMigration between the base and shift placements moves and drops nothing
// (for the paper's 3x2 and for s*t above the KV heads), while a different layout would move KV.
TEST(ShiftForward, SwitchMovesNoKv) {
  std::shared_ptr<const Model> m = load_model(test::gqa_24x6_path());
  const ModelShape shape = ModelShape::from(m->config);
  const std::vector<SeqExtent> seqs = {{0, 37}, {1, 6}, {7, 129}};
  for (auto [s, t] : std::vector<std::pair<int, int>>{{3, 2}, {2, 6}, {12, 1}}) {
    const Plan b = Plan::make_sp_tp(s, t);
    const KvMigration mig = check_free_switch(b.to_string(), b.shift_config().to_string(), shape, seqs, kBlock);
    EXPECT_EQ(mig.total_bytes, 0);
    EXPECT_TRUE(mig.moves.empty());
  }
  // Plain TP(6) in natural order differs from the 3x2 base's order: that switch would move KV.
  EXPECT_THROW(check_free_switch("sp=3,tp=2", "tp=6", shape, seqs, kBlock), Error);
}

}  // namespace
}  // namespace loom
