// Plan: one way of running a forward step over a group of ranks, as a value (ARCHITECTURE.md,
// "a plan is data"; exact mappings in ../shared/docs/PLANS.md). Everything here is a pure function
// of (Plan, ModelShape, rank): testable before any kernel or communicator exists.
//
// A plan composes five degrees, ranks numbered outer -> inner (TP innermost):
//   global rank = (((dp*PP + pp)*SP + sp)*KVP + kvp)*TP + tp        (sp and kvp never both > 1)
// - dp  DP replicas: disjoint sequences (sequence id % dp == replica, see KvPlacement).
// - pp  pipeline stages: contiguous layer ranges (even split, or explicit `layers=a+b+...`).
// - sp  Ulysses SP x TP (Shift Algorithm 1): tokens split by position, heads after the all-to-all.
// - kvp Helix KV parallelism: KV blocks round-robin over KVP ranks; tp is then TPA (<= K) and the
//       FFN / Wo run as TP(N = kvp*tpa) in the order tpa*kvp_degree + kvp (Helix 2.1).
// - tp  Megatron TP (query heads, KV heads, FFN columns).
// - shift: the shift config of the sp x tp base (Shift 3.3.1): TP(sp*tp) whose rank j is global
//       rank (j % sp)*tp + j / sp, so every global rank keeps its base heads and KV cache.
//
// String form (parse / to_string), comma-separated key=value, optional "shift:" prefix:
//   "tp=4", "dp=2", "tp=2,dp=2", "sp=3,tp=2", "shift:sp=3,tp=2", "pp=2", "tp=2,pp=2",
//   "pp=2,layers=3+5" (uneven stages), "kvp=2,tpa=2" (Helix; "block=16" sets the KVP block size
//   in tokens, "hopb=off" turns HOP-B off), "weights=resident|full|owner" (WeightSource).
//   SiDP (weights=owner, ../shared/papers/001 §4): "sidp=was|cas" the mode (weight-as-a-service,
//   the default, or compute-as-a-service), "slots=S" the FFN cache slots of a non-owner,
//   "lookahead=A" how many remote layers it may have fetched ahead of compute (S >= A; defaults
//   A = max(1, dp-1), S = A: the notes' "cache = D-1 remote layers", PAPERS-NOTES 1.4.3).
// to_string prints a canonical form (keys in the order shift, dp, pp, sp, kvp, tp/tpa, layers,
// block, hopb, weights, sidp, slots, lookahead; degree-1 keys and defaults omitted; a single rank
// prints "tp=1").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "parallel/mesh.h"

namespace loom {

struct ModelConfig;

// The sizes of a model that decide whether a layout divides it.
//
// What validate() accepts (the rule: reject only what cannot run at all):
// - Query heads must split evenly: H % (TP degree) == 0 (and H % (sp*tp), H % (kvp*tpa)).
// - Plain TP (sp == kvp == 1) accepts any KV head count: rank r holds exactly the KV heads its
//   query heads use (query head q uses KV head q / G), a contiguous range. When t divides K these
//   are disjoint ([r*K/t, (r+1)*K/t)); when K divides t each is the single head r*K/t replicated
//   on t/K ranks (PLANS.md); otherwise (e.g. K=6, t=4: ranks {0,1},{1,2},{3,4},{4,5}) a KV head
//   whose G query heads straddle two ranks is held, projected and cached by both. That costs a
//   little duplicated KV memory and Wk/Wv work but no communication, so it is allowed.
//   SP x TP and Helix keep the even rules (their all-to-alls replicate KV heads evenly).
// - The FFN (and any column split) is cut in units of `weight_block` columns (the weight dtype's
//   split unit: 1 for f32/f16/bf16, 32 for every block type, since a q8_0 row cannot be cut inside
//   a block; K-quant super-blocks of 256 are cut between their 32-weight sub-blocks).
//   With U = F / weight_block units and degree n, FFN shard i is the units
//   [floor(i*U/n), floor((i+1)*U/n)): contiguous, sizes differing by at most one unit, and for
//   F % n == 0 exactly PLANS.md's [i*F/n, (i+1)*F/n). Uneven shards are accepted because real
//   models do not divide (stories260K: F = 172 = 4*43 must run at tp=8, shards of 21 and 22);
//   the cost is a load imbalance of one unit. The floor form (rather than "the first U % n get
//   one more") keeps Shift 3.3.2 slicing valid: with n = s*t the shift shards sp + s*tp cover
//   exactly base shard tp, since floor(s*tp*U/(s*t)) = floor(tp*U/t). Rejected: F not a multiple
//   of the block, fewer units than shards (an empty shard), and Wo column shards (heads per rank
//   * head_dim) that are not whole blocks.
struct ModelShape {
  int n_heads = 0;     // query heads H
  int n_kv_heads = 0;  // KV heads K (H % K == 0)
  int head_dim = 0;    // dh
  int ffn_dim = 0;     // SwiGLU width F
  int n_layers = 0;    // L
  int d_model = 0;     // hidden size d
  int weight_block = 1;  // columns per weight split unit (dtype_split_elems): 1, or 32 for the quantized types

  static ModelShape from(const ModelConfig& cfg, int weight_block = 1);
  int group_size() const { return n_heads / n_kv_heads; }  // G: query heads per KV head
  std::string to_string() const;
  bool operator==(const ModelShape&) const = default;
};

// Half-open integer interval [begin, end).
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  bool contains(int64_t x) const { return x >= begin && x < end; }
  bool contains(const Range& r) const { return r.empty() || (r.begin >= begin && r.end <= end); }
  bool operator==(const Range&) const = default;
};
std::string to_string(const Range& r);  // "[b,e)"

// Where a rank's weight shards come from (consumed by the weight loader and executors).
enum class WeightSource {
  Resident,        // the rank loads exactly its shards
  SliceOfFull,     // the rank keeps a full copy and computes with views of it (Nitsum)
  FetchFromOwner,  // an owner rank holds the weights; others fetch or ship activations (SiDP)
};
std::string_view weight_source_name(WeightSource w);  // "resident", "full", "owner"

struct Plan {
  int dp = 1;
  int pp = 1;
  int sp = 1;
  int kvp = 1;
  int tp = 1;          // TPA when kvp > 1
  bool shift = false;  // shift config of the sp x tp base (only with sp > 1, kvp == 1)
  std::vector<int> stage_layers;  // layers per stage (size pp), empty = even split
  int kv_block = 16;              // Helix: tokens per KVP block (block b on KVP rank b % kvp)
  bool hopb = true;               // Helix 2.1.3 HOP-B: overlap a chunk's all-to-all with the next's attention
  WeightSource weights = WeightSource::Resident;
  // SiDP (weights=owner only; normalized() clears them otherwise). 0 = the default above.
  bool sidp_cas = false;  // sidp=cas: compute-as-a-service (else weight-as-a-service)
  int slots = 0;
  int lookahead = 0;
  int sidp_lookahead() const;  // A: lookahead, else max(1, dp - 1), capped by slots= when given
  int sidp_slots() const;      // S: slots, else sidp_lookahead()

  // Parses the string form above; throws loom::Error naming the bad key or value.
  static Plan parse(std::string_view text);
  std::string to_string() const;
  // Canonical value: shift cleared when sp == 1; kv_block reset when kvp == 1; stage_layers
  // cleared when pp == 1. parse() and the factories return normalised plans.
  Plan normalized() const;
  bool operator==(const Plan& o) const;  // equality of normalized values

  static Plan make_tp(int t);
  static Plan make_dp(int d);
  static Plan make_sp_tp(int s, int t);
  static Plan make_shift(int s, int t);  // shift config of make_sp_tp(s, t)
  static Plan make_pp(int p);
  static Plan make_helix(int k, int a, int block = 16);

  int size() const { return dp * pp * sp * kvp * tp; }  // ranks in the group
  bool helix() const { return kvp > 1; }
  int ffn_degree() const;  // TP degree of Wo / FFN: tp, sp*tp (shift) or kvp*tp (Helix)
  Plan base() const;       // shift config -> its base; others -> itself
  Plan shift_config() const;  // the shift config of this sp x tp base

  // Named groups of the attention/projection layout: dims dp, pp, sp, kvp, tp (degree-1 axes
  // omitted); for a shift config dims dp, pp, tp=sp*tp with the Shift 3.3.1 order.
  Mesh mesh() const;
  // Groups of the Wo / FFN tensor parallelism: group(rank, Axis::Tp) lists the rank's FFN TP group
  // by FFN shard index (plain TP: its tp group; Shift order for shift configs; tpa*kvp + kvp for
  // Helix, whose TP(N) group is the whole (dp, pp) cell). Dims dp, pp, [sp,] tp=ffn_degree().
  Mesh ffn_mesh() const;
  // Layers of pipeline stage `stage`.
  Range stage_layers_range(int stage, int n_layers) const;
  // This plan with an explicit layers= split when pp does not divide n_layers (and pp <= n_layers):
  // as vLLM, the first n_layers % pp stages get one layer more (pp=3 over 5 layers: 2+2+1). The
  // plan itself when it has layers=, pp divides n_layers, or pp > n_layers (validate says why).
  Plan with_layer_split(int n_layers) const;
};

// Throws loom::Error, before any weight loads, when the plan does not divide the model, naming
// the sizes (e.g. "tp=3 does not divide num_attention_heads=8").
void validate(const Plan& plan, const ModelShape& shape);

// The DP replica that runs sequence (request) `seq_id` under `dp` replicas: id mod dp, for
// negative ids too. The one routing rule: each DP stage's rows (TokenShare), SiDP's replicas
// stepping on their own (engine/sidp_replicas.h), the KV pools of a DP plan, the simulator.
inline int replica_of(int64_t seq_id, int dp) { return int(((seq_id % dp) + dp) % dp); }

// How the step's tokens reach a rank.
struct TokenShare {
  int dp_degree = 1, dp_index = 0;  // by request: sequences with replica_of(id, dp_degree) == dp_index
  int sp_degree = 1, sp_index = 0;  // by position: see sp_token_slice
  int micro_batches = 1;            // pipeline micro-batches in flight (pp)
  bool replicated() const { return dp_degree == 1 && sp_degree == 1; }
};

// SP token split (PLANS.md, Ulysses): n padded to n' = ceil(n/s)*s; SP rank i takes the padded
// slice [i*n'/s, (i+1)*n'/s); `real` is its part below n (padded tokens write no KV, no output).
struct TokenSlice {
  Range padded;
  Range real;
};
TokenSlice sp_token_slice(int64_t n_tokens, int s, int sp_index);

// Everything a plan says about one rank. Head lists are ascending and give the head order of the
// rank's data (a rank's shard of a [.., heads*dh] tensor is these heads in this order).
struct RankLayout {
  int rank = 0;
  // base coordinates (global rank = (((dp*PP + pp)*SP + sp)*KVP + kvp)*TP + tp)
  int dp = 0, pp = 0, sp = 0, kvp = 0, tp = 0;
  TokenShare tokens;
  Range layers;  // this stage's layers
  // attention
  std::vector<int> proj_q_heads;   // Wq rows: heads it projects on its tokens (TP / TPA shard)
  std::vector<int> proj_kv_heads;  // Wk/Wv rows: KV heads of proj_q_heads
  std::vector<int> q_heads;        // heads it runs attention for (after the SP all-to-all)
  std::vector<int> kv_heads;       // KV heads of q_heads: what it stores and attends with
  int kv_shards = 1, kv_shard = 0; // Helix: stores blocks b with b % kv_shards == kv_shard
  int kv_block = 1;                // tokens per such block (1 when kv_shards == 1)
  std::vector<int> out_heads;      // heads whose Wo input columns it holds
  // FFN (and Wo) tensor parallelism
  int ffn_degree = 1, ffn_index = 0;
  Range ffn;                       // weight_block * [i*U/deg, (i+1)*U/deg), U = F/weight_block
  std::vector<int> ffn_group;      // global ranks of its FFN TP group, by shard index
  WeightSource weights = WeightSource::Resident;

  std::string to_string() const;
};

// The layout of `rank` (0 <= rank < plan.size()); validates the plan first.
RankLayout rank_layout(const Plan& plan, const ModelShape& shape, int rank);

// One line per rank of rank_layout: the plan printed as data.
std::string describe(const Plan& plan, const ModelShape& shape);

}  // namespace loom
