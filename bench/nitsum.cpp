// Nitsum TP switches on CPU ranks (Nitsum 3.2.2, paper file 002): the Fig. 6 chain of KV
// re-partitions by head over 4 ranks, DP(4) -> TP2 x DP2 -> TP4 -> DP(4), executed on real paged
// KvStores by the engine's migration (kv/kv_transfer.h) over the local communicator (ranks as
// threads), for growing live-KV loads:
//   - aggregated + double-buffered (Nitsum's mechanism, the engine's default) against one message
//     per block piece (the page-by-page baseline) for the same KvMigration: a ratio;
//   - the stop-and-migrate pause of each switch in ms (max over ranks), i.e. the time the step
//     loop stands still at a TP switch with that much KV live.
// Llama-3.1-8B KV shape (32 layers, 8 KV heads, head_dim 128, f32 in loom's cache), 16-token pages.
// Best of 3 per figure (a shared, loaded machine only adds time). Not the full engine: the
// step loop's own switch (descriptor, plan id flip) adds no data movement on top of this.
//
//
// --pool SECONDS: the whole pool instead (cluster/pool.h, `loom serve --policy nitsum` without the
// HTTP front): 4 pool ranks + the control plane (threads), the synthetic gqa-24x6 model (f32),
// forced layouts cycled every --window seconds (TP1 x4 -> TP2 x2 -> TP4 -> P/D TP2 + TP2), under a
// closed loop of --concurrency requests (64-token prompts, 96 output tokens); prints the switch
// time in ms (from the window boundary to the last affected rank done: the stop at a step boundary
// plus the migration), the migration alone, KV moved per switch, hand-offs, and the mean step time
// for scale.
//
// Usage: bench_nitsum [--ranks 4] [--loads 2x256,4x512,8x512]
//        bench_nitsum --pool 10 [--window 0.5] [--concurrency 16]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "cluster/pool.h"
#include "comm/world.h"
#include "core/clock.h"
#include "model/synth.h"
#include "core/error.h"
#include "kv/kv_store.h"
#include "kv/kv_transfer.h"
#include "parallel/kv_migration.h"
#include "core/rng.h"
#include "parallel/plan.h"

using namespace loom;

namespace {

constexpr int kBlock = 16;

ModelShape llama_8b() {
  ModelShape s;
  s.n_heads = 32;
  s.n_kv_heads = 8;
  s.head_dim = 128;
  s.ffn_dim = 14336;
  s.n_layers = 32;
  s.d_model = 4096;
  return s;
}

void fill(KvStore& kv, const std::vector<SeqExtent>& seqs, const KvPlacement& from, int rank) {
  for (const SeqExtent& s : seqs) kv.release(s.id);
  for (const SeqExtent& s : seqs) {
    kv.reserve(s.id, s.n_tokens, from.entries(rank));
    for (int l = 0; l < kv.n_layers(); ++l)
      for (int h = 0; h < kv.n_kv_heads(); ++h)
        for (int32_t page : kv.table(s.id, l, h))
          if (page != kNoPage) {
            std::fill(kv.k(page), kv.k(page) + kv.page_floats(), float(s.id + l));
            std::fill(kv.v(page), kv.v(page) + kv.page_floats(), float(h));
          }
  }
}

struct Row {
  std::string from, to;
  int64_t bytes = 0;
  double agg_s = 1e30, block_s = 1e30;
  int agg_rounds = 0, block_rounds = 0;
};

double migrate(Communicator& world, KvStore& kv, const KvPlacement& from, const KvPlacement& to,
               const KvMigration& mig, const std::vector<SeqExtent>& seqs, const KvTransferOptions& opt,
               KvTransferScratch& scratch, int* rounds) {
  fill(kv, seqs, from, world.rank());
  world.barrier();
  const KvTransferStats st = execute_kv_migration(mig, to, seqs, kv, world, opt, &scratch);
  double t = st.seconds;
  std::vector<double> all(size_t(world.size()));
  world.all_gather_bytes(&t, all.data(), sizeof t);
  *rounds = st.rounds;
  return *std::max_element(all.begin(), all.end());
}

int run_pool_bench(double seconds, double window_s, int concurrency) {
  const std::string model = "/tmp/bench_nitsum_gqa_24x6.gguf";
  SynthOptions so;
  so.shape = synth_shape("gqa-24x6");
  so.dtype = DType::F32;
  so.seed = 7;
  write_synth_model(so, model);
  cluster::PoolOptions o;
  o.ranks = 4;
  o.model_path = model;
  o.engine.threads = 1;
  o.engine.max_num_seqs = 64;
  o.engine.kv_cache_bytes = int64_t(64) << 20;
  o.window_s = window_s;
  for (const char* l : {"both:tp1,both:tp1,both:tp1,both:tp1", "both:tp2,both:tp2", "both:tp4", "prefill:tp2,decode:tp2"})
    o.layouts.push_back(cluster::parse_pool_layout(l, {}));
  cluster::PoolStats st;
  int64_t finished = 0, steps = 0, tokens = 0;
  double step_s = 0, wall = 0;
  cluster::run_pool(o, [&](cluster::PoolEngine& e) {
    LiveLoop& loop = e.loop();
    int live = 0;
    loop.on_finish = [&](const Sequence&) {
      --live;
      ++finished;
    };
    loop.on_token = [&](const TokenEvent&) { ++tokens; };
    Rng rng(3);
    RequestId next = 1;
    const double t0 = now_seconds();
    while (now_seconds() - t0 < seconds) {
      while (live < concurrency) {
        Request r;
        r.id = next++;
        for (int i = 0; i < 64; ++i) r.prompt.push_back(3 + int(rng.below(500)));
        r.max_tokens = 96;
        r.stop.ignore_eos = true;
        r.sampling.temperature = 0;
        r.arrival_s = e.clock().now();
        loop.submit(std::move(r));
        ++live;
      }
      loop.step();
    }
    while (!loop.idle()) loop.step();
    wall = now_seconds() - t0;
    st = e.pool_stats();
    for (const PlanStats& p : e.plan_stats()) steps += p.steps;
    step_s = steps ? wall / double(steps) * 4 : 0;  // 4 ranks: steps of the instances overlap
    loop.on_finish = nullptr;
    loop.on_token = nullptr;
  });
  std::printf("bench_nitsum --pool: 4 pool ranks (threads) + control plane, gqa-24x6 f32, window %.2f s, %d requests in "
              "flight, %.1f s\n",
              window_s, concurrency, wall);
  std::printf("  %lld requests finished, %lld tokens (%.0f tokens/s); %lld windows, %lld reconfigurations moving %lld "
              "requests (%lld recomputed), %lld P/D hand-offs\n",
              (long long)finished, (long long)tokens, double(tokens) / wall, (long long)st.windows,
              (long long)st.reconfigurations, (long long)st.moved, (long long)st.recomputed, (long long)st.handoffs);
  if (st.reconfigurations > 0)
    std::printf("  switch: mean %.2f ms, max %.2f ms (window boundary -> last rank migrated); migration alone mean %.2f ms; "
                "KV moved per switch %.2f MB\n",
                st.switch_s_total / double(st.reconfigurations) * 1e3, st.switch_s_max * 1e3,
                st.migrate_s_total / double(st.reconfigurations) * 1e3,
                double(st.regroup_bytes) / double(st.reconfigurations) / 1e6);
  if (st.handoffs > 0)
    std::printf("  P/D hand-off: %.3f ms and %.1f KB of KV per request\n", st.handoff_s_total / double(st.handoffs) * 1e3,
                double(st.handoff_bytes) / double(st.handoffs) / 1e3);
  std::printf("  for scale: %.2f ms per instance step on average (wall x 4 ranks / steps)\n", step_s * 1e3);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 4;
  std::string loads = "2x256,4x512,8x512";
  double pool_s = 0, window_s = 0.5;
  int concurrency = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--ranks") ranks = std::atoi(argv[i + 1]);
    else if (k == "--loads") loads = argv[i + 1];
    else if (k == "--pool") pool_s = std::atof(argv[i + 1]);
    else if (k == "--window") window_s = std::atof(argv[i + 1]);
    else if (k == "--concurrency") concurrency = std::atoi(argv[i + 1]);
  }
  try {
    if (pool_s > 0) return run_pool_bench(pool_s, window_s, std::max(1, concurrency));
    if (ranks != 4) fail("--ranks ", ranks, ": the Fig. 6 chain needs 4 ranks");
    std::vector<std::pair<int, int>> load_list;
    std::stringstream ss(loads);
    for (std::string item; std::getline(ss, item, ',');) {
      const auto x = item.find('x');
      if (x == std::string::npos) fail("--loads item '", item, "' is not SEQSxTOKENS");
      load_list.push_back({std::atoi(item.substr(0, x).c_str()), std::atoi(item.substr(x + 1).c_str())});
      if (load_list.back().first < 1 || load_list.back().second < 1) fail("--loads item '", item, "' must be positive");
    }
    const ModelShape m = llama_8b();
    const std::vector<Plan> chain = {Plan::make_dp(4), Plan::parse("tp=2,dp=2"), Plan::make_tp(4), Plan::make_dp(4)};
    std::printf("bench_nitsum: Fig. 6 chain dp=4 -> tp=2,dp=2 -> tp=4 -> dp=4 on 4 local ranks, llama-3.1-8b KV shape "
                "(f32, %d-token pages)\n", kBlock);
    for (const auto& [n_seqs, tokens] : load_list) {
      std::vector<SeqExtent> seqs;
      for (int i = 0; i < n_seqs; ++i) seqs.push_back({i, tokens - (i % kBlock)});  // partial last pages
      std::vector<Row> rows(chain.size() - 1);
      std::mutex mu;
      auto world = make_world("local", ranks);
      world->run([&, n_seqs = n_seqs, tokens = tokens](Communicator& c) {  // init-captures: clang 14
        // A rank holds a quarter of the cells under every plan of the chain; half leaves room for
        // rounds in transit.
        const int64_t pages = int64_t(n_seqs) * ((tokens + kBlock - 1) / kBlock) * m.n_layers * m.n_kv_heads / 2 + 64;
        KvStore kv(m.n_layers, m.n_kv_heads, m.head_dim, kBlock, pages);
        KvTransferScratch scratch;
        for (size_t s = 0; s + 1 < chain.size(); ++s) {
          const KvPlacement pa = kv_placement(chain[s], m), pb = kv_placement(chain[s + 1], m);
          const KvMigration mig = kv_migration(pa, pb, seqs, kBlock, kv_bytes_per_token(m.head_dim, DType::F32));
          Row r;
          r.from = chain[s].to_string(), r.to = chain[s + 1].to_string(), r.bytes = mig.total_bytes;
          KvTransferOptions agg, one;
          one.aggregate = false;
          for (int rep = 0; rep < 3; ++rep) {
            r.agg_s = std::min(r.agg_s, migrate(c, kv, pa, pb, mig, seqs, agg, scratch, &r.agg_rounds));
            r.block_s = std::min(r.block_s, migrate(c, kv, pa, pb, mig, seqs, one, scratch, &r.block_rounds));
          }
          std::lock_guard<std::mutex> lock(mu);
          if (c.rank() == 0) rows[s] = r;
        }
      });
      std::printf("load: %d running sequences of ~%d tokens\n", n_seqs, tokens);
      for (const Row& r : rows)
        std::printf("  %-10s -> %-10s KV moved %8.1f MB: switch (aggregated) %8.2f ms in %4d rounds; per-block %8.2f ms "
                    "in %6d rounds: per-block / aggregated x%.1f\n",
                    r.from.c_str(), r.to.c_str(), r.bytes / 1e6, r.agg_s * 1e3, r.agg_rounds, r.block_s * 1e3,
                    r.block_rounds, r.block_s / r.agg_s);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_nitsum: %s\n", e.what());
    return 1;
  }
  return 0;
}
