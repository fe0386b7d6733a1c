// Seesaw's resident sequences, checked on one rank from its KV store (the thread tests and the MPI
// program share it): after each step, every sequence that decoded under c_d (plan 1) and is still
// live holds the same pages for the tokens it had (same page ids, same K and V bytes) and exactly
// c_d's cells of them (the naive oracle of c_d, kv/kv_oracle.h), through every prefill step under c_p
// (plan 0); no step lists a resident sequence to migrate or swap out, and no c_p step runs one.
// Not a counter of the code under test: a migration c_d -> c_p -> c_d shows as changed pages.
#pragma once

#include <algorithm>
#include <map>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "engine/rank_engine.h"
#include "kv/kv_oracle.h"
#include "kv/kv_store.h"

namespace loom::test {

struct Resident {
  int64_t len = 0;                                            // tokens computed when recorded
  std::map<std::pair<int, int>, std::vector<int32_t>> pages;  // (layer, head) -> pages of [0, len)
  std::vector<float> kv;                                      // K and V of [0, len), those cells in order
};

inline Resident snapshot(const KvStore& kv, int64_t seq, int64_t len) {
  Resident r;
  r.len = len;
  const int64_t blocks = (len + kv.block_size() - 1) / kv.block_size();
  for (int l = 0; l < kv.n_layers(); ++l)
    for (int h = 0; h < kv.n_kv_heads(); ++h) {
      const std::span<const int32_t> t = kv.table(seq, l, h);
      if (t.empty()) continue;
      std::vector<int32_t>& pg = r.pages[{l, h}];
      for (int64_t b = 0; b < blocks && b < int64_t(t.size()); ++b) {
        pg.push_back(t[size_t(b)]);
        if (t[size_t(b)] == kNoPage) continue;
        const int64_t n = std::min<int64_t>(kv.block_size(), len - b * kv.block_size()) * kv.head_dim();
        r.kv.insert(r.kv.end(), kv.k(t[size_t(b)]), kv.k(t[size_t(b)]) + n);
        r.kv.insert(r.kv.end(), kv.v(t[size_t(b)]), kv.v(t[size_t(b)]) + n);
      }
    }
  return r;
}

// One rank's follower (RankEngine::after_step).
struct ResidentCheck {
  std::map<int64_t, Resident> held;  // sequences that decoded under c_d, still live
  int64_t checks = 0;                // resident sequences checked during c_p steps
  int64_t turns = 0;                 // switches to c_p with resident sequences
  int64_t resumed = 0;               // resident sequences decoding again right after a c_p phase
  int prev_plan = 1;

  // Returns "" or the first violation.
  std::string after_step(RankEngine& e, const StepBatch& b, const std::vector<RequestId>& released) {
    for (RequestId id : released) held.erase(id);
    // A sequence recomputed under c_p after a preemption is not resident any more.
    for (const ScheduledSeq& s : b.seqs)
      if (s.is_prefill) held.erase(s.seq_id);
    const bool prefill_step = b.plan_id == 0;
    if (prefill_step && prev_plan == 1 && !held.empty()) ++turns;
    std::set<int64_t> stepped;
    for (const ScheduledSeq& s : b.seqs) stepped.insert(s.seq_id);
    std::string bad;
    for (const auto& [seq, was] : held) {
      const Resident now = snapshot(e.kv(), seq, was.len);
      if (now.pages != was.pages) bad = cat("sequence ", seq, ": its pages changed");
      else if (now.kv != was.kv) bad = cat("sequence ", seq, ": its K/V bytes changed");
      const std::string h =
          naive_holdings_diff(e.kv(), e.plans().plan(1), e.plans().shape(), e.world_rank(), {{seq, was.len}});
      if (bad.empty() && !h.empty()) bad = cat("sequence ", seq, " left c_d's placement: ", h);
      if (bad.empty() && prefill_step && stepped.count(seq)) bad = cat("resident sequence ", seq, " stepped under c_p");
      if (!bad.empty()) break;
      if (prefill_step) ++checks;
      if (!prefill_step && prev_plan == 0 && stepped.count(seq)) ++resumed;
    }
    for (const SeqExtent& x : b.swap_out)
      if (bad.empty() && held.count(x.id)) bad = cat("resident sequence ", x.id, " swapped out");
    for (const SeqExtent& x : b.kv_seqs)
      if (bad.empty() && held.count(x.id)) bad = cat("resident sequence ", x.id, " listed for migration");
    // Record (again) every sequence this decode step ran: its pages now hold its new token.
    if (!prefill_step)
      for (const ScheduledSeq& s : b.seqs)
        if (!s.is_prefill) held[s.seq_id] = snapshot(e.kv(), s.seq_id, s.start + s.num_tokens);
    prev_plan = b.plan_id;
    return bad.empty() ? "" : cat("rank ", e.world_rank(), " step ", b.step_index, ": ", bad);
  }
};

}  // namespace loom::test
