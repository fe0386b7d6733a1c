// KV migration throughput (kv/kv_transfer.h, Nitsum 3.2.2): a TP(4) -> DP(4) switch of a
// Llama-3.2-1B-shaped KV cache (16 layers, 8 KV heads, head_dim 64, 16-token pages), measured
//   - aggregated and double-buffered (the engine's mechanism) against memcpy of the same bytes
//     on this machine (the ceiling for ranks that share memory), and
//   - aggregated against one message per block piece (the per-page baseline Nitsum replaces),
// as ratios from one run. Backends: local (ranks as threads) always; MPI when started under
// mpirun with --comm mpi (e.g. `mpirun -np 4 build/bench/bench_migration --comm mpi`).
// Each figure is the best of 3 migrations (the machine is shared: other work only adds time).
//
// Usage: bench_migration [--comm local|mpi] [--seqs N] [--tokens T]   (defaults: local, 16, 512)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "comm/world.h"
#include "core/clock.h"
#include "core/error.h"
#include "kv/kv_store.h"
#include "kv/kv_transfer.h"
#include "parallel/kv_migration.h"
#include "parallel/plan.h"

using namespace loom;

namespace {

constexpr int kBlock = 16;

ModelShape llama_1b() {
  ModelShape s;
  s.n_heads = 32;
  s.n_kv_heads = 8;
  s.head_dim = 64;
  s.ffn_dim = 8192;
  s.n_layers = 16;
  s.d_model = 2048;
  return s;
}

// Round sizes (bytes per rank per round) swept for the aggregated transfer.
const std::vector<int64_t> kBuffers = {int64_t(64) << 10, int64_t(256) << 10, int64_t(1) << 20, int64_t(8) << 20};

struct Figures {
  std::vector<double> agg_s = std::vector<double>(kBuffers.size(), 1e30);
  std::vector<int> agg_rounds = std::vector<int>(kBuffers.size(), 0);
  double one_s = 1e30;
  int64_t bytes = 0;
  int one_rounds = 0;
};

// One migration from `from` to `to` on this rank, from a warm store (every page written once, as
// a serving cache's pages are) filled under `from`; returns its seconds (max over ranks).
double migrate_once(Communicator& world, KvStore& kv, const KvPlacement& from, const KvPlacement& to,
                    const KvMigration& mig, const std::vector<SeqExtent>& seqs, const KvTransferOptions& opt,
                    KvTransferScratch& scratch, int* rounds) {
  for (const SeqExtent& s : seqs) kv.release(s.id);
  for (const SeqExtent& s : seqs) {
    kv.reserve(s.id, s.n_tokens, from.entries(world.rank()));
    for (int l = 0; l < kv.n_layers(); ++l)
      for (int h = 0; h < kv.n_kv_heads(); ++h)
        for (int32_t page : kv.table(s.id, l, h))
          if (page != kNoPage) {
            std::fill(kv.k(page), kv.k(page) + kv.page_floats(), float(s.id + l));
            std::fill(kv.v(page), kv.v(page) + kv.page_floats(), float(h));
          }
  }
  world.barrier();
  const KvTransferStats st = execute_kv_migration(mig, to, seqs, kv, world, opt, &scratch);
  double t = st.seconds;
  std::vector<double> all(size_t(world.size()));
  world.all_gather_bytes(&t, all.data(), sizeof t);
  *rounds = st.rounds;
  return *std::max_element(all.begin(), all.end());
}

void run(Communicator& world, int n_seqs, int tokens, Figures& f, std::mutex& mu) {
  const ModelShape m = llama_1b();
  const Plan a = Plan::make_tp(world.size()), b = Plan::make_dp(world.size());
  const KvPlacement pa = kv_placement(a, m), pb = kv_placement(b, m);
  std::vector<SeqExtent> seqs;
  for (int i = 0; i < n_seqs; ++i) seqs.push_back({i, tokens - i});  // uneven, partial last blocks
  const KvMigration mig = kv_migration(pa, pb, seqs, kBlock, kv_bytes_per_token(m.head_dim, DType::F32));
  // Pages: all the rank can hold under either plan.
  const int64_t pages = int64_t(n_seqs) * ((tokens + kBlock - 1) / kBlock) * m.n_layers * m.n_kv_heads;
  KvStore kv(m.n_layers, m.n_kv_heads, m.head_dim, kBlock, pages);
  for (int64_t p = 0; p < pages; ++p) std::fill(kv.k(int32_t(p)), kv.k(int32_t(p)) + kv.page_floats(), 0.0f);
  for (int64_t p = 0; p < pages; ++p) std::fill(kv.v(int32_t(p)), kv.v(int32_t(p)) + kv.page_floats(), 0.0f);
  KvTransferOptions one;
  one.aggregate = false;
  KvTransferScratch scratch;
  Figures mine;
  for (int rep = 0; rep < 3; ++rep) {
    for (size_t b = 0; b < kBuffers.size(); ++b) {
      KvTransferOptions agg;
      agg.buffer_bytes = kBuffers[b];
      mine.agg_s[b] = std::min(mine.agg_s[b], migrate_once(world, kv, pa, pb, mig, seqs, agg, scratch, &mine.agg_rounds[b]));
    }
    mine.one_s = std::min(mine.one_s, migrate_once(world, kv, pa, pb, mig, seqs, one, scratch, &mine.one_rounds));
  }
  mine.bytes = mig.total_bytes;
  std::lock_guard<std::mutex> lock(mu);
  if (world.rank() == 0) f = mine;
}

// Seconds to memcpy `bytes` (best of 5), one thread.
double memcpy_s(int64_t bytes) {
  std::vector<uint8_t> a(size_t(bytes), 1), b(size_t(bytes), 0);
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const double t0 = now_seconds();
    std::memcpy(b.data(), a.data(), a.size());
    best = std::min(best, now_seconds() - t0);
  }
  return best + (b[size_t(bytes) / 2] == 7 ? 1e-9 : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  std::string comm = "local";
  int n_seqs = 16, tokens = 512, ranks = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--comm") comm = argv[i + 1];
    else if (k == "--seqs") n_seqs = std::atoi(argv[i + 1]);
    else if (k == "--tokens") tokens = std::atoi(argv[i + 1]);
    else if (k == "--ranks") ranks = std::atoi(argv[i + 1]);
  }
  try {
    auto world = make_world(comm, comm == "mpi" ? 0 : ranks);
    Figures f;
    std::mutex mu;
    bool root = false;
    world->run([&](Communicator& c) {
      run(c, n_seqs, tokens, f, mu);
      if (c.rank() == 0) root = true;
    });
    if (!root) return 0;
    const int n = int(world->size());
    // The ceiling: every rank copies its share of the bytes at once; one thread's memcpy of a
    // rank's share is the rate a rank can move (ranks here share the machine's memory).
    const double mc = memcpy_s(std::max<int64_t>(f.bytes / n, 1));
    std::printf("bench_migration: tp=%d -> dp=%d, %d sequences of ~%d tokens, llama-3.2-1b KV shape, %s backend\n", n, n,
                n_seqs, tokens, comm.c_str());
    // Per rank: the bytes a rank receives (its share) over the migration time, against one
    // thread's memcpy of the same bytes.
    const double share = double(f.bytes) / n;
    std::printf("  KV moved %.1f MB (%.1f MB per rank); memcpy of a rank's share %.2f ms (%.2f GB/s)\n", f.bytes / 1e6,
                share / 1e6, mc * 1e3, share / mc / 1e9);
    std::printf("  per-block (one message per block piece): %.2f ms, %d rounds\n", f.one_s * 1e3, f.one_rounds);
    for (size_t b = 0; b < kBuffers.size(); ++b)
      std::printf("  aggregated, %5lld KiB rounds: %8.2f ms, %5d rounds: x%.2f of memcpy, x%.2f of per-block time\n",
                  (long long)(kBuffers[b] >> 10), f.agg_s[b] * 1e3, f.agg_rounds[b], mc / f.agg_s[b],
                  f.agg_s[b] / f.one_s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_migration: %s\n", e.what());
    return 1;
  }
  return 0;
}
