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
// Usage: bench_nitsum [--ranks 4] [--loads 2x256,4x512,8x512]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "comm/world.h"
#include "core/error.h"
#include "kv/kv_store.h"
#include "kv/kv_transfer.h"
#include "parallel/kv_migration.h"
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

}  // namespace

int main(int argc, char** argv) {
  int ranks = 4;
  std::string loads = "2x256,4x512,8x512";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--ranks") ranks = std::atoi(argv[i + 1]);
    else if (k == "--loads") loads = argv[i + 1];
  }
  try {
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
      world->run([&](Communicator& c) {
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
