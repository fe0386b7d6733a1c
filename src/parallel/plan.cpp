#include "parallel/plan.h"

#include <charconv>

#include "core/error.h"
#include "core/suggest.h"
#include "model/config.h"

namespace loom {

ModelShape ModelShape::from(const ModelConfig& cfg, int weight_block) {
  return ModelShape{cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.ffn_dim, cfg.n_layers, cfg.d_model, weight_block};
}

std::string ModelShape::to_string() const {
  std::string s = cat("heads=", n_heads, " kv_heads=", n_kv_heads, " head_dim=", head_dim, " ffn=", ffn_dim,
                      " layers=", n_layers, " d_model=", d_model);
  if (weight_block != 1) s += cat(" weight_block=", weight_block);
  return s;
}

std::string to_string(const Range& r) { return cat("[", r.begin, ",", r.end, ")"); }

std::string_view weight_source_name(WeightSource w) {
  switch (w) {
    case WeightSource::Resident: return "resident";
    case WeightSource::SliceOfFull: return "full";
    case WeightSource::FetchFromOwner: return "owner";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// Plan value

namespace {

int parse_int(std::string_view key, std::string_view v) {
  int x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size() || v.empty())
    fail("plan key ", key, "=", v, " is not an integer");
  if (x < 1) fail("plan key ", key, "=", x, " must be >= 1");
  return x;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

Plan Plan::parse(std::string_view text) {
  std::string_view s = trim(text);
  Plan p;
  if (s.substr(0, 6) == "shift:") {
    p.shift = true;
    s.remove_prefix(6);
  }
  bool seen_tp = false, seen_tpa = false, seen[12] = {};
  auto once = [&](int slot, std::string_view key) {
    if (seen[slot]) fail("plan '", text, "' sets ", key, " twice");
    seen[slot] = true;
  };
  while (!s.empty()) {
    size_t comma = s.find(',');
    std::string_view item = trim(s.substr(0, comma));
    s = comma == std::string_view::npos ? std::string_view{} : s.substr(comma + 1);
    size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      fail("plan '", text, "': item '", item, "' is not key=value (keys: tp, tpa, sp, kvp, dp, pp, layers, block, hopb, weights, sidp, slots, lookahead)");
    std::string_view key = trim(item.substr(0, eq)), val = trim(item.substr(eq + 1));
    if (key == "tp") {
      once(0, key), seen_tp = true, p.tp = parse_int(key, val);
    } else if (key == "tpa") {
      once(0, key), seen_tpa = true, p.tp = parse_int(key, val);
    } else if (key == "sp") {
      once(1, key), p.sp = parse_int(key, val);
    } else if (key == "kvp") {
      once(2, key), p.kvp = parse_int(key, val);
    } else if (key == "dp") {
      once(3, key), p.dp = parse_int(key, val);
    } else if (key == "pp") {
      once(4, key), p.pp = parse_int(key, val);
    } else if (key == "layers") {
      once(5, key);
      std::string_view rest = val;
      while (true) {
        size_t plus = rest.find('+');
        p.stage_layers.push_back(parse_int("layers", trim(rest.substr(0, plus))));
        if (plus == std::string_view::npos) break;
        rest = rest.substr(plus + 1);
      }
    } else if (key == "block") {
      once(6, key), p.kv_block = parse_int(key, val);
    } else if (key == "hopb") {
      once(8, key);
      if (val == "on" || val == "1") p.hopb = true;
      else if (val == "off" || val == "0") p.hopb = false;
      else fail("plan key hopb=", val, " is not on or off (Helix HOP-B overlap)");
    } else if (key == "weights") {
      once(7, key);
      if (val == "resident") p.weights = WeightSource::Resident;
      else if (val == "full") p.weights = WeightSource::SliceOfFull;
      else if (val == "owner") p.weights = WeightSource::FetchFromOwner;
      else fail("plan key weights=", val, " is not one of resident, full, owner");
    } else if (key == "sidp") {
      once(9, key);
      if (val == "was") p.sidp_cas = false;
      else if (val == "cas") p.sidp_cas = true;
      else fail("plan key sidp=", val, " is not was or cas (SiDP weight- or compute-as-a-service)");
    } else if (key == "slots") {
      once(10, key), p.slots = parse_int(key, val);
    } else if (key == "lookahead") {
      once(11, key), p.lookahead = parse_int(key, val);
    } else {
      static const std::vector<std::string> keys = {"tp",      "tpa",  "sp",   "kvp",  "dp",    "pp",       "layers",
                                                     "block",   "hopb", "weights", "sidp", "slots", "lookahead"};
      const std::string hint = did_you_mean(std::string(key), keys);
      fail("plan '", text, "': unknown key '", key, "'", hint,
           hint.empty() ? " (keys: tp, tpa, sp, kvp, dp, pp, layers, block, hopb, weights, sidp, slots, lookahead)" : "");
    }
  }
  if (p.kvp > 1 && seen_tp)
    fail("plan '", text, "': a Helix plan (kvp=", p.kvp, ") names its attention TP degree tpa=, not tp=");
  if (seen_tpa && p.sp > 1) fail("plan '", text, "': tpa= is Helix attention TP and does not combine with sp=", p.sp);
  if (p.sp > 1 && p.kvp > 1) fail("plan '", text, "': sp=", p.sp, " and kvp=", p.kvp, " cannot both be > 1");
  if (p.shift && p.kvp > 1) fail("plan '", text, "': shift: applies to an sp x tp base, not to kvp=", p.kvp);
  if (!p.stage_layers.empty() && int(p.stage_layers.size()) != p.pp)
    fail("plan '", text, "': layers= lists ", p.stage_layers.size(), " stages, pp=", p.pp);
  if ((seen[9] || seen[10] || seen[11]) && p.weights != WeightSource::FetchFromOwner)
    fail("plan '", text, "': sidp=, slots= and lookahead= are SiDP keys and need weights=owner");
  if (p.slots > 0 && p.lookahead > 0 && p.slots < p.lookahead)
    fail("plan '", text, "': slots=", p.slots, " is fewer than lookahead=", p.lookahead,
         " (every layer fetched ahead needs its own cache slot)");
  return p.normalized();
}

Plan Plan::normalized() const {
  Plan p = *this;
  if (p.sp == 1) p.shift = false;
  if (p.kvp == 1) p.kv_block = 16, p.hopb = true;
  if (p.pp == 1) p.stage_layers.clear();
  if (p.weights != WeightSource::FetchFromOwner) p.sidp_cas = false, p.slots = 0, p.lookahead = 0;
  return p;
}

int Plan::sidp_lookahead() const {
  if (lookahead > 0) return lookahead;
  const int a = dp > 1 ? dp - 1 : 1;
  return slots > 0 && slots < a ? slots : a;
}

int Plan::sidp_slots() const { return slots > 0 ? slots : sidp_lookahead(); }

bool Plan::operator==(const Plan& o) const {
  Plan a = normalized(), b = o.normalized();
  return a.dp == b.dp && a.pp == b.pp && a.sp == b.sp && a.kvp == b.kvp && a.tp == b.tp &&
         a.shift == b.shift && a.stage_layers == b.stage_layers && a.kv_block == b.kv_block && a.hopb == b.hopb &&
         a.weights == b.weights && a.sidp_cas == b.sidp_cas && a.slots == b.slots && a.lookahead == b.lookahead;
}

std::string Plan::to_string() const {
  Plan p = normalized();
  std::string s;
  auto add = [&](std::string_view key, int v) {
    if (v != 1) s += cat(s.empty() ? "" : ",", key, "=", v);
  };
  add("dp", p.dp);
  add("pp", p.pp);
  add("sp", p.sp);
  add("kvp", p.kvp);
  add(p.kvp > 1 ? "tpa" : "tp", p.tp);
  if (s.empty()) s = "tp=1";
  if (!p.stage_layers.empty()) {
    s += ",layers=";
    for (size_t i = 0; i < p.stage_layers.size(); ++i) s += cat(i ? "+" : "", p.stage_layers[i]);
  }
  if (p.kvp > 1 && p.kv_block != 16) s += cat(",block=", p.kv_block);
  if (p.kvp > 1 && !p.hopb) s += ",hopb=off";
  if (p.weights != WeightSource::Resident) s += cat(",weights=", weight_source_name(p.weights));
  if (p.sidp_cas) s += ",sidp=cas";
  if (p.slots > 0) s += cat(",slots=", p.slots);
  if (p.lookahead > 0) s += cat(",lookahead=", p.lookahead);
  return p.shift ? "shift:" + s : s;
}

Plan Plan::make_tp(int t) { Plan p; p.tp = t; return p; }
Plan Plan::make_dp(int d) { Plan p; p.dp = d; return p; }
Plan Plan::make_sp_tp(int s, int t) { Plan p; p.sp = s; p.tp = t; return p; }
Plan Plan::make_shift(int s, int t) { return make_sp_tp(s, t).shift_config(); }
Plan Plan::make_pp(int pp) { Plan p; p.pp = pp; return p; }
Plan Plan::make_helix(int k, int a, int block) {
  Plan p;
  p.kvp = k;
  p.tp = a;
  p.kv_block = block;
  return p.normalized();
}

int Plan::ffn_degree() const {
  if (kvp > 1) return kvp * tp;
  if (shift) return sp * tp;
  return tp;
}

Plan Plan::base() const {
  Plan p = *this;
  p.shift = false;
  return p;
}

Plan Plan::shift_config() const {
  if (kvp > 1) fail("plan ", to_string(), " has no shift config: shift applies to an sp x tp base");
  Plan p = *this;
  p.shift = true;
  return p.normalized();
}

Mesh Plan::mesh() const {
  Plan p = normalized();
  std::vector<MeshDim> dims;
  auto add = [&](Axis a, int n) {
    if (n > 1) dims.push_back({a, n});
  };
  add(Axis::Dp, p.dp);
  add(Axis::Pp, p.pp);
  if (!p.shift) {
    add(Axis::Sp, p.sp);
    add(Axis::Kvp, p.kvp);
    add(Axis::Tp, p.tp);
    return Mesh(dims);
  }
  return ffn_mesh();
}

Mesh Plan::ffn_mesh() const {
  Plan p = normalized();
  std::vector<MeshDim> dims;
  if (p.dp > 1) dims.push_back({Axis::Dp, p.dp});
  if (p.pp > 1) dims.push_back({Axis::Pp, p.pp});
  const int deg = p.ffn_degree();
  if (deg > 1) dims.push_back({Axis::Tp, deg});
  // Inside one (dp, pp) cell the base ranks are c*t + i (c = sp or kvp index, i = tp index,
  // t = tp). Plain TP groups are the runs of t ranks. Shift 3.3.1 and Helix number the TP(c*t)
  // group with the cell index innermost: shard j is base rank (j % C)*t + j / C.
  const int outer = p.dp * p.pp, c_deg = p.sp * p.kvp, t = p.tp, cell = c_deg * t;
  std::vector<int> order(size());
  for (int o = 0; o < outer; ++o) {
    for (int pos = 0; pos < cell; ++pos) {
      int base_rank;
      if (deg == t) {
        base_rank = pos;  // groups of t consecutive ranks, then the next sp / kvp index
      } else {
        base_rank = (pos % c_deg) * t + pos / c_deg;
      }
      order[o * cell + pos] = o * cell + base_rank;
    }
  }
  if (deg == t && c_deg > 1) {
    // plain TP inside an sp / kvp grid: the sp / kvp index is not an FFN axis but still a group
    // dimension; keep it so that group(rank, Tp) is the rank's own TP group.
    dims.insert(dims.end() - (t > 1 ? 1 : 0), MeshDim{p.sp > 1 ? Axis::Sp : Axis::Kvp, c_deg});
  }
  return Mesh(dims, order);
}

Range Plan::stage_layers_range(int stage, int n_layers) const {
  LOOM_CHECK(stage >= 0 && stage < pp, "stage ", stage, " of pp=", pp);
  if (!stage_layers.empty()) {
    int64_t b = 0;
    for (int i = 0; i < stage; ++i) b += stage_layers[i];
    return Range{b, b + stage_layers[stage]};
  }
  int64_t per = n_layers / pp;
  return Range{stage * per, (stage + 1) * per};
}

Plan Plan::with_layer_split(int n_layers) const {
  Plan p = *this;
  if (p.pp <= 1 || !p.stage_layers.empty() || n_layers < p.pp || n_layers % p.pp == 0) return p;
  const int per = n_layers / p.pp, extra = n_layers % p.pp;
  for (int s = 0; s < p.pp; ++s) p.stage_layers.push_back(per + (s < extra ? 1 : 0));
  return p;
}

// ---------------------------------------------------------------------------------------------
// validate

namespace {

// PLANS.md TP rule for KV heads: deg <= K needs K % deg == 0; deg > K needs deg % K == 0.
void check_kv_rule(std::string_view what, int deg, int K) {
  if (deg <= K) {
    if (K % deg != 0) fail(what, "=", deg, " does not divide num_key_value_heads=", K);
  } else if (deg % K != 0) {
    fail(what, "=", deg, " is neither a divisor nor a multiple of num_key_value_heads=", K,
         " (KV heads can be neither split nor replicated evenly)");
  }
}

}  // namespace

void validate(const Plan& plan_in, const ModelShape& m) {
  const Plan p = plan_in.normalized();
  if (m.n_heads < 1) fail("num_attention_heads=", m.n_heads, " must be >= 1");
  if (m.n_kv_heads < 1 || m.n_heads % m.n_kv_heads != 0)
    fail("num_key_value_heads=", m.n_kv_heads, " must divide num_attention_heads=", m.n_heads);
  if (m.ffn_dim < 1) fail("intermediate_size=", m.ffn_dim, " must be >= 1");
  if (m.n_layers < 1) fail("num_hidden_layers=", m.n_layers, " must be >= 1");
  for (auto [key, v] : {std::pair{"dp", p.dp}, {"pp", p.pp}, {"sp", p.sp}, {"kvp", p.kvp}, {"tp", p.tp}})
    if (v < 1) fail("plan ", key, "=", v, " must be >= 1");
  if (p.sp > 1 && p.kvp > 1) fail("plan sp=", p.sp, " and kvp=", p.kvp, " cannot both be > 1");
  if (p.shift && p.kvp > 1) fail("plan shift: applies to an sp x tp base, not to kvp=", p.kvp);
  if (p.weights == WeightSource::FetchFromOwner && p.dp > m.n_layers)
    fail("plan ", p.to_string(), ": dp=", p.dp, " exceeds num_hidden_layers=", m.n_layers,
         " (SiDP gives every rank at least one FFN layer to own: owner(l) = l mod dp)");
  if (p.weights == WeightSource::FetchFromOwner && p.sidp_slots() < p.sidp_lookahead())
    fail("plan ", p.to_string(), ": slots=", p.sidp_slots(), " is fewer than lookahead=", p.sidp_lookahead());
  const int H = m.n_heads, K = m.n_kv_heads, F = m.ffn_dim, L = m.n_layers;

  if (m.weight_block < 1) fail("weight block=", m.weight_block, " must be >= 1");
  const int wb = m.weight_block;
  if (p.kvp == 1) {
    if (H % p.tp != 0) fail("tp=", p.tp, " does not divide num_attention_heads=", H);
    // Plain TP holds the KV heads of its query heads, whatever K is (see ModelShape); SP's
    // all-to-all needs the even rule.
    if (p.sp > 1) check_kv_rule("tp", p.tp, K);
    if (p.sp > 1) {
      const int P = p.sp * p.tp;
      if (H % P != 0)
        fail("sp*tp=", P, " (sp=", p.sp, ", tp=", p.tp, ") does not divide num_attention_heads=", H);
      // Shift 3.2.1: after the all-to-all each rank needs the KV heads of its H/P query heads;
      // they split or replicate evenly only under the same rule as TP(P).
      check_kv_rule(cat("sp*tp (sp=", p.sp, ", tp=", p.tp, ")"), P, K);
    }
  } else {
    const int a = p.tp, k = p.kvp, N = a * k;
    if (a > K) fail("tpa=", a, " exceeds num_key_value_heads=", K, " (Helix needs tpa <= K: no KV duplication)");
    if (K % a != 0) fail("tpa=", a, " does not divide num_key_value_heads=", K);
    if (H % N != 0)
      fail("kvp*tpa=", N, " (kvp=", k, ", tpa=", a, ") does not divide num_attention_heads=", H,
           " (Helix merges attention into kvp*tpa head chunks)");
    if (p.kv_block < 1) fail("plan block=", p.kv_block, " must be >= 1");
  }
  const int fd = p.ffn_degree();
  const std::string fd_name = p.kvp > 1 ? cat("kvp*tpa=", fd) : p.shift ? cat("sp*tp=", fd, " (shift config)")
                                                                       : cat("tp=", fd);
  if (F % wb != 0)
    fail("intermediate_size=", F, " is not a multiple of the weight block of ", wb, " columns");
  if (F / wb < fd)
    fail(fd_name, " needs at least ", fd, " FFN units of ", wb, " column", wb > 1 ? "s" : "",
         ", intermediate_size=", F, " has ", F / wb);
  // Wo is split by input columns along head boundaries: every shard must be whole blocks.
  const int out_heads = p.kvp > 1 ? H / (p.kvp * p.tp) : p.shift ? H / (p.sp * p.tp) : H / p.tp;
  if (int64_t(out_heads) * m.head_dim % wb != 0)
    fail(fd_name, " gives each rank ", out_heads, " heads of head_dim=", m.head_dim, " = ",
         int64_t(out_heads) * m.head_dim, " Wo columns, not a multiple of the weight block of ", wb);
  if (p.stage_layers.empty()) {
    if (p.pp > L) fail("pp=", p.pp, " exceeds num_hidden_layers=", L);
    if (L % p.pp != 0)
      fail("pp=", p.pp, " does not divide num_hidden_layers=", L, " (give the split, e.g. layers=",
           L / p.pp + 1, "+...)");
  } else {
    if (int(p.stage_layers.size()) != p.pp)
      fail("plan layers= lists ", p.stage_layers.size(), " stages, pp=", p.pp);
    int64_t sum = 0;
    for (int n : p.stage_layers) {
      if (n < 1) fail("plan layers= has a stage of ", n, " layers (each stage needs >= 1)");
      sum += n;
    }
    if (sum != L) fail("plan layers= sums to ", sum, " layers, num_hidden_layers=", L);
  }
}

// ---------------------------------------------------------------------------------------------
// Per-rank layout

TokenSlice sp_token_slice(int64_t n, int s, int sp_index) {
  LOOM_CHECK(s >= 1 && sp_index >= 0 && sp_index < s && n >= 0);
  const int64_t per = (n + s - 1) / s;  // n' / s
  TokenSlice t;
  t.padded = Range{sp_index * per, (sp_index + 1) * per};
  t.real = Range{std::min(t.padded.begin, n), std::min(t.padded.end, n)};
  return t;
}

namespace {

std::vector<int> iota_heads(int64_t begin, int64_t count) {
  std::vector<int> v(count);
  for (int64_t i = 0; i < count; ++i) v[i] = int(begin + i);
  return v;
}

// The KV heads used by `q_heads` (query head q uses KV head q / G), ascending, unique.
std::vector<int> kv_of(const std::vector<int>& q_heads, int G) {
  std::vector<int> kv;
  for (int q : q_heads)
    if (kv.empty() || kv.back() != q / G) kv.push_back(q / G);
  return kv;
}

std::string list(const std::vector<int>& v) {
  if (v.empty()) return "{}";
  // ranges print compactly: contiguous lists as a..b
  bool contiguous = true;
  for (size_t i = 1; i < v.size(); ++i) contiguous = contiguous && v[i] == v[i - 1] + 1;
  if (contiguous && v.size() > 2) return cat("{", v.front(), "..", v.back(), "}");
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += cat(i ? "," : "", v[i]);
  return s + "}";
}

}  // namespace

RankLayout rank_layout(const Plan& plan_in, const ModelShape& m, int rank) {
  validate(plan_in, m);
  const Plan p = plan_in.normalized();
  if (rank < 0 || rank >= p.size()) fail("rank ", rank, " is outside plan ", p.to_string(), " of ", p.size(), " ranks");
  const int H = m.n_heads, G = m.group_size(), F = m.ffn_dim;
  RankLayout r;
  r.rank = rank;
  int x = rank;
  r.tp = x % p.tp, x /= p.tp;
  r.kvp = x % p.kvp, x /= p.kvp;
  r.sp = x % p.sp, x /= p.sp;
  r.pp = x % p.pp, x /= p.pp;
  r.dp = x;
  r.tokens.dp_degree = p.dp, r.tokens.dp_index = r.dp;
  r.tokens.micro_batches = p.pp;
  if (!p.shift) r.tokens.sp_degree = p.sp, r.tokens.sp_index = r.sp;  // shift config: TP, tokens replicated
  r.layers = p.stage_layers_range(r.pp, m.n_layers);

  if (p.kvp > 1) {
    // Helix 2.1.1: TPA shard projects and attends all tokens for heads [tpa*H/a, (tpa+1)*H/a)
    // over its KV blocks; the LSE all-to-all leaves chunk kvp of them (TP(N) shard tpa*k + kvp).
    const int a = p.tp, k = p.kvp;
    r.proj_q_heads = iota_heads(int64_t(r.tp) * H / a, H / a);
    r.q_heads = r.proj_q_heads;
    r.out_heads = iota_heads(int64_t(r.tp) * H / a + int64_t(r.kvp) * H / (a * k), H / (a * k));
    r.kv_shards = k, r.kv_shard = r.kvp, r.kv_block = p.kv_block;
  } else {
    const int t = p.tp, P = p.sp * p.tp;
    // Shift Algorithm 1 / PLANS.md: TP shard heads, then after the SP all-to-all the sub-chunk
    // sp of them: tp*H/t + sp*H/(t*s) + [0, H/(t*s)). The shift config (Shift 3.3.1) owns the
    // same heads on the same global rank, as TP(P) shard j = sp + s*tp.
    const std::vector<int> tp_shard = iota_heads(int64_t(r.tp) * H / t, H / t);
    r.q_heads = iota_heads(int64_t(r.tp) * H / t + int64_t(r.sp) * H / P, H / P);
    r.proj_q_heads = p.shift ? r.q_heads : tp_shard;
    r.out_heads = r.proj_q_heads;
  }
  r.proj_kv_heads = kv_of(r.proj_q_heads, G);
  r.kv_heads = kv_of(r.q_heads, G);

  const Mesh fm = p.ffn_mesh();
  r.ffn_degree = p.ffn_degree();
  r.ffn_group = fm.group(rank, Axis::Tp);
  r.ffn_index = fm.coord(rank, Axis::Tp);
  // Floor split of U = F / weight_block units (see ModelShape): uneven by at most one unit.
  const int64_t wb = m.weight_block, units = F / wb;
  r.ffn = Range{wb * (int64_t(r.ffn_index) * units / r.ffn_degree),
                wb * (int64_t(r.ffn_index + 1) * units / r.ffn_degree)};
  r.weights = p.weights;
  return r;
}

std::string RankLayout::to_string() const {
  std::string s = cat("rank ", rank, " (dp ", dp, ", pp ", pp, ", sp ", sp, ", kvp ", kvp, ", tp ", tp,
                      "): layers ", loom::to_string(layers));
  if (tokens.dp_degree > 1) s += cat(", seqs id%", tokens.dp_degree, "==", tokens.dp_index);
  if (tokens.sp_degree > 1) s += cat(", tokens slice ", tokens.sp_index, "/", tokens.sp_degree);
  if (tokens.micro_batches > 1) s += cat(", ", tokens.micro_batches, " micro-batches");
  s += cat(", proj q", list(proj_q_heads), " kv", list(proj_kv_heads), ", attn q", list(q_heads),
           " kv", list(kv_heads));
  if (kv_shards > 1) s += cat(" blocks%", kv_shards, "==", kv_shard, " (", kv_block, " tok)");
  s += cat(", wo", list(out_heads), ", ffn ", loom::to_string(ffn), " (", ffn_index, "/", ffn_degree,
           " group ", list(ffn_group), "), weights ", weight_source_name(weights));
  return s;
}

std::string describe(const Plan& plan, const ModelShape& shape) {
  std::string s = cat("plan ", plan.to_string(), " on ", plan.size(), " ranks, ", shape.to_string(), "\n");
  for (int r = 0; r < plan.size(); ++r) s += "  " + rank_layout(plan, shape, r).to_string() + "\n";
  return s;
}

}  // namespace loom
