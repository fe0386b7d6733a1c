// Data-movement checks of the device seam, for any device: the KV migration between two ranks'
// stores and Seesaw's swaps through the CPU tier keep every bit. Run on the strict CPU device
// (tests/dist/device_seam_test.cpp) and on CUDA (tests/gpu/test_gpu_engine.cpp). Header-only.
#pragma once

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "comm/local.h"
#include "plan_cases.h"

namespace loom::test {

// Every held cell's K and V on every rank, read back to the host: (seq, layer, head, position) ->
// the head_dim floats of K then of V.
using Cells = std::map<std::tuple<int64_t, int, int, int64_t>, std::vector<float>>;
inline Cells read_cells(KvStore& kv, const std::vector<SeqExtent>& seqs) {
  Cells out;
  const int64_t B = kv.block_size(), dh = kv.head_dim();
  for (const SeqExtent& s : seqs)
    for (int l = 0; l < kv.n_layers(); ++l)
      for (int h = 0; h < kv.n_kv_heads(); ++h)
        for (const Range& r : kv.held_ranges(s.id, l, h, s.n_tokens))
          for (int64_t p = r.begin; p < r.end; ++p) {
            const int32_t pg = kv.page(s.id, l, h, p / B);
            std::vector<float> v(std::size_t(2 * dh));
            kv.device().to_host(v.data(), kv.k(pg) + (p % B) * dh, std::size_t(dh) * 4);
            kv.device().to_host(v.data() + dh, kv.v(pg) + (p % B) * dh, std::size_t(dh) * 4);
            out[{s.id, l, h, p}] = v;
          }
  return out;
}

// A switch tp=2 -> dp=2 -> tp=2 on two ranks (each on the device `make` gives it, the local
// backend moving `memory`): every cell's bits survive each migration, wherever it lands.
inline void migration_keeps_every_bit(const std::shared_ptr<Model>& model,
                                      const std::function<std::unique_ptr<Device>(int, ThreadPool*)>& make,
                                      RankMemoryFactory memory) {
  const ModelConfig& c = model->config;
  const PlanSet set = PlanSet::make({Plan::parse("tp=2"), Plan::parse("dp=2")}, ModelShape::from(c, weight_block_elems(*model)));
  const std::vector<SeqExtent> seqs = {{0, 37}, {1, 64}, {2, 5}, {3, 120}};
  std::mutex mu;
  std::vector<Cells> before(2), after(2), back(2);
  LocalWorld::run(
      2,
      [&](Communicator& world) {
        auto dev = make(world.rank(), nullptr);
        RankEngineOptions o;
        o.device = dev.get();
        o.kv_pages = 4096;
        RankEngine e(model, set, world, nullptr, o);
        ForwardBatch fb;
        std::vector<float> logits;
        for (const SeqExtent& s : seqs) {
          fb.tokens.assign(std::size_t(s.n_tokens), 9 + int32_t(s.id));
          fb.seqs = {ForwardSeq{s.id, 0, int(s.n_tokens), false}};
          e.forward(fb, &logits);
        }
        Cells b = read_cells(e.kv(), seqs);
        const SwitchResult sw = e.switch_to(1, seqs);
        EXPECT_TRUE(sw.moved);
        Cells a = read_cells(e.kv(), seqs);
        e.switch_to(0, seqs);
        Cells k = read_cells(e.kv(), seqs);
        std::lock_guard<std::mutex> lk(mu);
        before[std::size_t(world.rank())] = std::move(b);
        after[std::size_t(world.rank())] = std::move(a);
        back[std::size_t(world.rank())] = std::move(k);
      },
      CommOptions{}, memory);
  // The union over ranks: under tp=2 each cell once (its head's rank); under dp=2 each sequence's
  // cells on its replica. Same values either way.
  Cells all_before, all_after;
  for (int r = 0; r < 2; ++r) {
    all_before.insert(before[std::size_t(r)].begin(), before[std::size_t(r)].end());
    for (const auto& [key, v] : after[std::size_t(r)]) {
      ASSERT_TRUE(all_after.emplace(key, v).second) << "a cell held twice after the switch";
    }
  }
  ASSERT_FALSE(all_before.empty());
  EXPECT_EQ(all_after, all_before) << "tp=2 -> dp=2 changed K/V bits";
  for (int r = 0; r < 2; ++r) EXPECT_EQ(back[std::size_t(r)], before[std::size_t(r)]) << "dp=2 -> tp=2, rank " << r;
}

// Seesaw's swaps between the device pages and the CPU tier (host memory, transfer() on the copy
// threads) under the seesaw policy: the cells of every running sequence are read from the ranks'
// device pages after each step; once a swap-out is complete everywhere the tier holds those bytes,
// and after the swap-in (under the decode plan's placement) the device pages hold them again.
inline void seesaw_swaps_keep_every_bit(const std::shared_ptr<Model>& model,
                                        const std::function<void(DistOptions&)>& device) {
  const ModelConfig& c = model->config;
  const auto prompts = random_prompts(6, 30, c.vocab_size, 21);
  std::mutex mu;
  std::map<int64_t, Cells> live;             // every rank's cells of each sequence after its last step
  std::map<int64_t, int64_t> swapped_len;     // sequence -> tokens it had when swapped out
  std::set<int64_t> tier_checked, back_checked;
  std::string bad;
  PlanCase pc{"seesaw", {"pp=2,layers=3+2", "tp=2"}, "seesaw", -1, -1, 256};
  run_plan_case(pc, model, greedy_requests(prompts, 5), [&](DistOptions& o) {
    device(o);
    auto prev = o.after_step;
    o.after_step = [&, prev](int rank, RankEngine& e, const StepBatch& b, const std::vector<RequestId>& rel) {
      prev(rank, e, b, rel);
      std::lock_guard<std::mutex> lk(mu);
      for (const SeqExtent& x : b.swap_out) swapped_len[x.id] = x.n_tokens;
      if (rank == 0)
        for (const auto& [id, n] : swapped_len) {
          if (tier_checked.count(id) || !e.tier_ready(id)) continue;
          tier_checked.insert(id);
          for (const auto& [key, v] : live[id]) {
            const auto [seq, l, h, p] = key;
            if (p >= n) continue;
            const float* k = e.tier()->k(id, l, h) + p * c.head_dim;
            const float* vv = e.tier()->v(id, l, h) + p * c.head_dim;
            if (std::memcmp(k, v.data(), std::size_t(c.head_dim) * 4) != 0 ||
                std::memcmp(vv, v.data() + c.head_dim, std::size_t(c.head_dim) * 4) != 0)
              if (bad.empty()) bad = cat("tier copy of sequence ", id, " layer ", l, " head ", h, " position ", p);
          }
        }
      for (const ScheduledSeq& s : b.seqs) {
        // Back on the device: the first step that runs a swapped sequence again, before this
        // step's cells replace the ones it had when it left.
        auto it = swapped_len.find(s.seq_id);
        if (it != swapped_len.end() && !back_checked.count(s.seq_id * 2 + rank)) {
          back_checked.insert(s.seq_id * 2 + rank);
          for (const auto& [key, v] : read_cells(e.kv(), {{s.seq_id, it->second}})) {
            auto w = live[s.seq_id].find(key);
            if ((w == live[s.seq_id].end() || w->second != v) && bad.empty())
              bad = cat("sequence ", s.seq_id, " after its swap-in, rank ", rank, ": layer ", std::get<1>(key), " head ",
                        std::get<2>(key), " position ", std::get<3>(key),
                        w == live[s.seq_id].end() ? " was not held before" : " differs");
          }
        }
      }
      for (const ScheduledSeq& s : b.seqs)
        for (auto& [key, v] : read_cells(e.kv(), {{s.seq_id, s.start + s.num_tokens}})) live[s.seq_id][key] = v;
    };
  });
  EXPECT_EQ(bad, "");
  EXPECT_FALSE(tier_checked.empty()) << "no sequence went through the tier";
  EXPECT_FALSE(back_checked.empty()) << "no sequence came back from the tier";
}

}  // namespace loom::test
