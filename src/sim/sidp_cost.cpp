#include "sim/sidp_cost.h"

#include <algorithm>

#include "core/error.h"
#include "engine/sidp.h"
#include "parallel/sharding.h"
#include "sim/profile.h"
#include "sim/shift_threshold.h"

namespace loom::sim {

const char* sidp_variant_name(SidpVariant v) {
  switch (v) {
    case SidpVariant::AsPlanned: return "plan";
    case SidpVariant::Was: return "was";
    case SidpVariant::Fsdp: return "fsdp";
    case SidpVariant::CasV1: return "cas-v1";
    case SidpVariant::CasV2: return "cas-v2";
    case SidpVariant::CasV3: return "cas-v3";
  }
  return "?";
}

namespace {

// Whether `full` is priced fetching in peak-shifting order (CostModelOptions::sidp_peak_shifting).
bool peak_order(const CostModel& cm, const Plan& full) {
  return cm.options().sidp_peak_shifting && sidp::peak_shifting(full);
}

struct FfnCost {
  double gemm = 0, elem = 0;
  double total() const { return gemm + elem; }
};

// One layer's FFN over m rows on one GPU, exactly as CostModel::price prices the dense FFN of a
// TP=1 replica (so that rest = price - L x ffn is the rest of that step).
FfnCost ffn_cost(const CostModel& cm, const PricedPlan& pl, double m) {
  FfnCost f;
  if (m <= 0) return f;
  const double d = cm.model().d_model, F = double(pl.ffn), ws = pl.weight_bytes, ab = cm.options().act_bytes;
  f.gemm = cm.gate_up_s(m, d, F, ws) + cm.gemm_s(m, F, d, cm.options().weight_dtype, cm.weight_bytes(), ab, ws);
  f.elem = cm.elementwise_s(Elementwise::Act, m * F * ab * 3);
  return f;
}

// One message of `rows` hidden states between two GPUs of the node.
double rows_msg_s(const CostModel& cm, double rows) {
  return cm.collective_s(Collective::SendRecv, rows * cm.model().d_model * cm.options().act_bytes, 2,
                         std::min(2, cm.node().gpus_per_node));
}

int tokens_of(const std::vector<SeqWork>& seqs) {
  int n = 0;
  for (const SeqWork& w : seqs) n += w.new_tokens;
  return n;
}

// Replica `rank`'s WaS step in steady state (see the header): `a` seconds of non-FFN work per
// layer, `f` of FFN, fetches of `fetch_s` each in the rank's fetch order, at most `lookahead`
// fetched layers ahead of compute; the third of three identical steps back to back.
double was_step_s(double a, double f, int L, int dp, int rank, bool peak, int lookahead, double fetch_s) {
  const std::vector<int> order = sidp::fetch_order(rank, dp, L, peak);
  const int K = int(order.size());
  if (K == 0) return L * (a + f);
  std::vector<int> pos(size_t(L), -1);
  for (int k = 0; k < K; ++k) pos[size_t(order[size_t(k)])] = k;
  constexpr int kIters = 3;
  std::vector<double> done(size_t(kIters * K), 0.0), consumed(size_t(kIters * K), -1.0);
  double t = 0, fetcher = 0, last = 0;
  int next = 0;
  for (int it = 0; it < kIters; ++it) {
    const double start = t;
    for (int l = 0; l < L; ++l) {
      t += a;
      if (pos[size_t(l)] < 0) {  // owned: local weights
        t += f;
        continue;
      }
      const int k = it * K + pos[size_t(l)];
      while (next <= k) {  // the prefetcher's reads up to this one, each as early as it could start
        double s = fetcher;
        if (next >= lookahead) {
          const double freed = consumed[size_t(next - lookahead)];
          LOOM_CHECK(freed >= 0, "SiDP fetch ", next, " waits on item ", next - lookahead, " not yet computed");
          s = std::max(s, freed);
        }
        done[size_t(next)] = s + fetch_s;
        fetcher = done[size_t(next)];
        ++next;
      }
      t = std::max(t, done[size_t(k)]) + f;  // S6 d: compute waits on the slot's flag
      consumed[size_t(k)] = t;               // S6 e: the slot is free again
    }
    last = t - start;
  }
  return last;
}

}  // namespace

double sidp_ffn_layer_bytes(const CostModel& cm) {
  return 3.0 * double(cm.model().d_model) * double(cm.model().ffn_dim) * cm.weight_bytes();
}

double sidp_layer_fetch_s(const CostModel& cm, const Plan& full) {
  const int dp = full.dp;
  if (dp < 2) return 0.0;
  // Without peak shifting every non-owner reads the same owner at once: its egress is shared. With
  // a lookahead of k < D - 1 slots, §4.2's rule organises the layers in cycles of k: the D - 1
  // readers of a cycle start at their own offsets, so about (D - 1) / k of them read one owner at a
  // time (priced so; loom's engine fetches in layer order below a full cycle, engine/sidp.h).
  const int k = full.sidp_lookahead();
  int readers = dp - 1;
  if (peak_order(cm, full)) readers = 1;
  else if (cm.options().sidp_peak_shifting && dp > 2 && k >= 2) readers = (dp - 1 + k - 1) / k;
  // The engine reads the owner's layer with a one-sided get (stage_ffn_owner.cpp, Communicator::get).
  return cm.collective_s(Collective::Get, sidp_ffn_layer_bytes(cm) * readers, 2,
                         std::min(2, cm.node().gpus_per_node));
}

void sidp_step_work(const std::vector<const StepBatch*>& parts, std::vector<std::vector<SeqWork>>& work) {
  work.resize(parts.size());
  for (size_t j = 0; j < parts.size(); ++j) {
    work[j].clear();
    if (parts[j])
      for (const ScheduledSeq& s : parts[j]->seqs) work[j].push_back(SeqWork{s.num_tokens, s.context_len(), s.sample});
  }
}

StepCost price_sidp(const CostModel& cm, const PricedPlan& pl, const std::vector<std::vector<SeqWork>>& replica_seqs,
                    SidpVariant v) {
  const Plan& full = pl.full;
  if (full.weights != WeightSource::FetchFromOwner) fail("plan ", pl.name, " is not a SiDP plan (weights=owner)");
  if (!cm.arch().plain()) fail("plan ", pl.name, ": SiDP is priced for dense FFN models only");
  if (v == SidpVariant::AsPlanned) v = full.sidp_cas ? SidpVariant::CasV3 : SidpVariant::Was;
  const int D = full.dp, L = pl.max_layers;
  if (int(replica_seqs.size()) > D) fail("plan ", pl.name, ": ", replica_seqs.size(), " replicas' work for dp=", D);
  // The replica's compute with its weights resident: plain DP (price() ignores where weights lie).
  PricedPlan plain = pl;
  plain.full.weights = plain.plan.weights = WeightSource::Resident;

  // Dummies: FSDP, V1 and V2 run vLLM's dummy batch of one token on an idle replica and take
  // part in the communication with it; WaS and V3 (dummy skipping, S10) do nothing for it.
  const bool dummies_work = v == SidpVariant::Fsdp || v == SidpVariant::CasV1 || v == SidpVariant::CasV2;
  const std::vector<SeqWork> dummy = {SeqWork{1, 1, false}};
  std::vector<double> rows(size_t(D), 0.0), rest(size_t(D), 0.0);
  std::vector<char> part(size_t(D), 0);
  StepCost base;  // the slowest participant's plain step
  double worst_rest = -1;
  int slowest = -1;
  for (int r = 0; r < D; ++r) {
    const bool real = r < int(replica_seqs.size()) && !replica_seqs[size_t(r)].empty();
    if (!real && !dummies_work) continue;
    const std::vector<SeqWork>& w = real ? replica_seqs[size_t(r)] : dummy;
    const StepCost c = cm.price(plain, w);
    rows[size_t(r)] = tokens_of(w);
    rest[size_t(r)] = c.total_s - L * ffn_cost(cm, plain, rows[size_t(r)]).total();
    part[size_t(r)] = 1;
    if (v == SidpVariant::Was) {
      // Independent of the others (an own step: the only replica with work, sim/simulator.cpp);
      // a lockstep group step under WaS ends with the slowest replica.
      const double a = rest[size_t(r)] / L, f = ffn_cost(cm, plain, rows[size_t(r)]).total();
      const double t = was_step_s(a, f, L, D, r, peak_order(cm, full), full.sidp_lookahead(),
                                  sidp_layer_fetch_s(cm, full));
      if (t > worst_rest) {
        worst_rest = t;
        base = c;
        base.comm_s += t - c.total_s;  // waiting for weights
        base.total_s = t;
      }
      continue;
    }
    if (rest[size_t(r)] > worst_rest) worst_rest = rest[size_t(r)], base = c, slowest = r;
  }
  if (worst_rest < 0) {  // nobody computes
    StepCost c = cm.price(plain, {});
    c.plan = pl.name;
    return c;
  }
  base.plan = pl.name;
  if (v == SidpVariant::Was) return base;

  // Lockstep per layer: the slowest participant's non-FFN part, then the layer's FFN.
  double ffn_gemm = 0, ffn_elem = 0, comm = 0;
  if (v == SidpVariant::Fsdp) {
    // S13: each layer's FFN all-gathered on every rank, then every rank its own rows.
    const double ag = cm.collective_s(Collective::AllGather, sidp_ffn_layer_bytes(cm), D,
                                      std::min(D, cm.node().gpus_per_node));
    FfnCost worst;
    for (int r = 0; r < D; ++r)
      if (part[size_t(r)]) {
        const FfnCost f = ffn_cost(cm, plain, rows[size_t(r)]);
        if (f.total() > worst.total()) worst = f;
      }
    ffn_gemm = L * worst.gemm;
    ffn_elem = L * worst.elem;
    comm = L * ag;
  } else {
    for (int l = 0; l < L; ++l) {
      const int o = sidp::owner_of(l, D);
      double total_rows = 0, sent_rows = 0;
      bool any_sender = false;
      for (int r = 0; r < D; ++r) {
        if (!part[size_t(r)]) continue;
        total_rows += rows[size_t(r)];
        if (r != o) sent_rows += rows[size_t(r)], any_sender = true;
        if (v == SidpVariant::CasV1) {  // one GEMM chain per sender (and the owner's own rows)
          const FfnCost f = ffn_cost(cm, plain, rows[size_t(r)]);
          ffn_gemm += f.gemm;
          ffn_elem += f.elem;
        }
      }
      if (v != SidpVariant::CasV1) {  // S9: one fused GEMM chain over every sender's rows
        const FfnCost f = ffn_cost(cm, plain, total_rows);
        ffn_gemm += f.gemm;
        ffn_elem += f.elem;
      }
      // Rows there and FFN output back. §4.3 (S9): "P2P transfers are issued by non-owners", each
      // on its own stream (§4.4, S15): the senders' copies run at once, sharing the owner's
      // ingress (the returns its egress): one latency each way, not one per sender.
      if (any_sender) comm += 2 * rows_msg_s(cm, sent_rows);
    }
  }
  // The slowest participant's step with its own FFN replaced by the layer-by-layer FFN above.
  StepCost c = base;
  const FfnCost slow = ffn_cost(cm, plain, rows[size_t(slowest)]);
  c.gemm_s += ffn_gemm - L * slow.gemm;
  c.elementwise_s += ffn_elem - L * slow.elem;
  c.comm_s += comm;
  c.total_s = worst_rest + ffn_gemm + ffn_elem + comm;
  return c;
}

double sidp_rank_weight_elems(const CostModel& cm, const std::vector<PricedPlan>& resident, int rank) {
  LOOM_CHECK(!resident.empty(), "SiDP weights of no plan");
  const ModelConfig& c = cm.model();
  const int dp = resident.front().full.dp;
  const WeightShards all = weight_shards(Plan::make_tp(1), cm.shape(), 0);
  const double ffn_layer = 3.0 * double(c.d_model) * double(c.ffn_dim);
  const double attn_layer = double(all.elems_per_layer) - ffn_layer;
  const double other = double(c.param_count()) - double(all.elems());
  int owned = 0;
  for (int l = 0; l < c.n_layers; ++l) owned += sidp::owner_of(l, dp) == rank ? 1 : 0;
  int slots = 0;  // the WaS stage's cache slots (one set per rank, the largest of the set's WaS plans)
  for (const PricedPlan& p : resident) {
    if (p.full.weights != WeightSource::FetchFromOwner || p.full.dp != dp)
      fail("plans of one set mix SiDP with other weight sources or DP degrees: ", p.name);
    if (!p.full.sidp_cas && dp > 1) slots = std::max(slots, p.full.sidp_slots());
  }
  return c.n_layers * attn_layer + other + (owned + slots) * ffn_layer;
}

SidpThreshold derive_sidp_threshold(const CostModel& cm, const Plan& plan, int context, int64_t max_b) {
  const Plan full = plan.normalized();
  if (full.weights != WeightSource::FetchFromOwner)
    fail("B_th is for SiDP plans (dp=D,weights=owner); got ", full.to_string());
  if (context < 1 || max_b < 1) fail("B_th needs a context >= 1 and max_b >= 1 (got ", context, ", ", max_b, ")");
  PricedPlan plain = cm.prepare(full);
  plain.full.weights = plain.plan.weights = WeightSource::Resident;
  const int L = cm.model().n_layers, D = full.dp;
  const int remote = L - L / D;  // the non-owned layers of the rank that owns the fewest
  SidpThreshold r;
  r.context = context;
  r.fetch_s = D > 1 ? remote * sidp_layer_fetch_s(cm, full) : 0.0;
  auto t_iter = [&](int64_t b) {
    return cm.price(plain, std::vector<SeqWork>(size_t(b), SeqWork{1, context, true})).total_s;
  };
  if (D < 2) {
    r.crossed = true;  // nothing to fetch: WaS is plain DP at any batch
    r.explain = cat("dp=", D, ": no FFN layer to fetch, WaS at any batch");
    return r;
  }
  r.threshold = sidp::threshold_batch(t_iter, r.fetch_s, max_b);
  r.crossed = r.threshold <= max_b;
  r.fwd_s = t_iter(std::min<int64_t>(r.threshold, max_b));
  const std::string how = peak_order(cm, full) ? "peak shifting: one reader per owner"
                           : D == 2                  ? "one reader per owner"
                                                     : cat("peak shifting over ", full.sidp_lookahead(), "-layer cycles or layer order: each owner's link shared by up to ", D - 1, " readers");
  r.explain = r.crossed ? cat("cost model on ", cm.node().name(), ": a step of ", r.threshold, " sequences at context ",
                              context, " takes ", r.fwd_s * 1e3, " ms >= fetching the ", remote, " non-owned FFN layers (",
                              remote * sidp_ffn_layer_bytes(cm) / 1e9, " GB, ", how, ") in ", r.fetch_s * 1e3, " ms")
                        : cat("cost model on ", cm.node().name(), ": no step of up to ", max_b,
                              " sequences hides fetching the non-owned FFN layers (", r.fetch_s * 1e3, " ms vs ",
                              r.fwd_s * 1e3, " ms): never WaS");
  return r;
}

SidpThreshold derive_sidp_crossover(const CostModel& cm, const Plan& plan, int context, int64_t max_b) {
  Plan was = plan.normalized();
  if (was.weights != WeightSource::FetchFromOwner)
    fail("the SiDP crossover is for SiDP plans (dp=D,weights=owner); got ", was.to_string());
  if (context < 1 || max_b < 1) fail("the SiDP crossover needs a context >= 1 and max_b >= 1 (got ", context, ", ", max_b, ")");
  was.sidp_cas = false;
  Plan cas = was;
  cas.sidp_cas = true;
  const PricedPlan pw = cm.prepare(was), pc = cm.prepare(cas);
  const int D = was.dp;
  auto times = [&](int64_t b) {
    const std::vector<std::vector<SeqWork>> work(size_t(D), std::vector<SeqWork>(size_t(b), SeqWork{1, context, true}));
    return std::make_pair(price_sidp(cm, pw, work).total_s, price_sidp(cm, pc, work).total_s);
  };
  auto was_wins = [&](int64_t b) {
    const auto [w, c] = times(b);
    return w <= c;
  };
  SidpThreshold r;
  r.context = context;
  // Doubling, then bisection (the difference WaS - CaS falls with b).
  int64_t hi = 1;
  while (hi <= max_b && !was_wins(hi)) hi *= 2;
  if (hi > max_b && !was_wins(max_b)) {
    r.threshold = max_b + 1;
    r.crossed = false;
  } else {
    hi = std::min(hi, max_b);
    int64_t lo = hi / 2 + 1;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (was_wins(mid)) hi = mid; else lo = mid + 1;
    }
    r.threshold = hi;
    r.crossed = true;
  }
  const auto [w, c] = times(std::min(r.threshold, max_b));
  r.fwd_s = w;
  r.fetch_s = c;
  r.explain = r.crossed ? cat("cost model on ", cm.node().name(), ": below ", r.threshold, " sequences a replica at context ",
                              context, " a CaS step of the group is faster than WaS (at ", r.threshold, ": WaS ", w * 1e3,
                              " ms, CaS ", c * 1e3, " ms)")
                        : cat("cost model on ", cm.node().name(), ": CaS is faster than WaS at every batch up to ", max_b);
  return r;
}

SidpThreshold default_sidp_threshold(const ModelConfig& model, DType weight_dtype, const Plan& plan,
                                     const std::string& profile_dir, const std::string& backend,
                                     double memcpy_bytes_per_s, double peak_flops, int context) {
  if (!profile_dir.empty()) {
    // One rank per replica; the world's ranks compute at once (their caches shared).
    const CostModel cm = profile_cost_model(read_profile(profile_dir), model, weight_dtype, 1, backend, plan.size());
    SidpThreshold t = derive_sidp_crossover(cm, plan, context);
    t.explain += cat(" [calibrated by the profile ", profile_dir, "]");
    return t;
  }
  const double wb = double(dtype_row_bytes(weight_dtype, dtype_block_elems(weight_dtype))) / dtype_block_elems(weight_dtype);
  return derive_sidp_crossover(cpu_cost_model(model, wb, memcpy_bytes_per_s, peak_flops, 0, plan.size()), plan, context);
}

}  // namespace loom::sim
