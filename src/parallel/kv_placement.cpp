#include "parallel/kv_placement.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace loom {

// ---------------------------------------------------------------------------------------------
// TokenRule

TokenRule TokenRule::normalized() const {
  LOOM_CHECK(seq_mod >= 1 && seq_rem >= 0 && seq_rem < seq_mod, "seq rule ", seq_rem, " mod ", seq_mod);
  LOOM_CHECK(block_mod >= 1 && block_rem >= 0 && block_rem < block_mod && block_tokens >= 1,
             "block rule ", block_rem, " mod ", block_mod, " of ", block_tokens);
  TokenRule r = *this;
  if (r.seq_mod == 1) r.seq_rem = 0;
  std::sort(r.seq_ids.begin(), r.seq_ids.end());
  r.seq_ids.erase(std::unique(r.seq_ids.begin(), r.seq_ids.end()), r.seq_ids.end());
  if (r.block_mod == 1) r.block_rem = 0, r.block_tokens = 1;
  return r;
}

bool TokenRule::has_seq(int64_t id) const {
  int64_t m = id % seq_mod;
  if (m < 0) m += seq_mod;
  return m == seq_rem && (seq_ids.empty() || std::binary_search(seq_ids.begin(), seq_ids.end(), id));
}

bool TokenRule::has_pos(int64_t pos) const { return (pos / block_tokens) % block_mod == block_rem; }

std::vector<Range> TokenRule::ranges(int64_t n) const {
  std::vector<Range> out;
  if (n <= 0) return out;
  if (block_mod == 1) return {Range{0, n}};
  for (int64_t b = block_rem; b * block_tokens < n; b += block_mod)
    out.push_back(Range{b * block_tokens, std::min((b + 1) * block_tokens, n)});
  return out;
}

std::string TokenRule::to_string() const {
  std::string s;
  if (seq_mod > 1) s += cat("seq%", seq_mod, "==", seq_rem);
  if (block_mod > 1) s += cat(s.empty() ? "" : " ", "block(", block_tokens, ")%", block_mod, "==", block_rem);
  if (!seq_ids.empty()) {
    s += cat(s.empty() ? "" : " ", "seqs{");
    for (size_t i = 0; i < seq_ids.size() && i < 8; ++i) s += cat(i ? "," : "", seq_ids[i]);
    s += seq_ids.size() > 8 ? cat(",... ", seq_ids.size(), " in all}") : std::string("}");
  }
  return s.empty() ? "all tokens" : s;
}

std::string KvEntry::to_string() const {
  std::string h;
  for (size_t i = 0; i < kv_heads.size(); ++i) h += cat(i ? "," : "", kv_heads[i]);
  return cat("layers ", loom::to_string(layers), " kv{", h, "} ", tokens.to_string());
}

// ---------------------------------------------------------------------------------------------
// KvPlacement

KvPlacement::KvPlacement(int n_layers, int n_kv_heads, const std::vector<std::vector<KvEntry>>& per_rank)
    : n_layers_(n_layers), n_kv_heads_(n_kv_heads) {
  if (n_layers < 1 || n_kv_heads < 1) fail("KV placement needs layers >= 1 and kv heads >= 1, got ", n_layers, " and ", n_kv_heads);
  ranks_.resize(per_rank.size());
  for (size_t r = 0; r < per_rank.size(); ++r) {
    // Expand to layer -> sorted (rule, head) pairs, then group and compress: a canonical form of
    // the rank's cell set (each (layer, head) has one rule; normalised rules are unique per set).
    std::vector<std::vector<std::pair<TokenRule, int>>> by_layer(n_layers);
    for (const KvEntry& e : per_rank[r]) {
      if (e.layers.begin < 0 || e.layers.end > n_layers)
        fail("KV placement rank ", r, ": layers ", loom::to_string(e.layers), " outside [0,", n_layers, ")");
      TokenRule rule = e.tokens.normalized();
      for (int h : e.kv_heads) {
        if (h < 0 || h >= n_kv_heads) fail("KV placement rank ", r, ": kv head ", h, " outside [0,", n_kv_heads, ")");
        for (int64_t l = e.layers.begin; l < e.layers.end; ++l) by_layer[l].push_back({rule, h});
      }
    }
    for (auto& v : by_layer) {
      std::sort(v.begin(), v.end());
      for (size_t i = 0; i < v.size(); ++i)
        for (size_t j = i + 1; j < v.size(); ++j)
          LOOM_CHECK(v[i].second != v[j].second, "rank ", r, " stores kv head ", v[i].second,
                     " twice in layer ", &v - by_layer.data());
    }
    std::vector<KvEntry>& out = ranks_[r];
    int l = 0;
    while (l < n_layers) {
      int l_end = l + 1;
      while (l_end < n_layers && by_layer[l_end] == by_layer[l]) ++l_end;
      const auto& v = by_layer[l];
      for (size_t i = 0; i < v.size();) {
        KvEntry e{Range{l, l_end}, {}, v[i].first};
        size_t j = i;
        while (j < v.size() && v[j].first == v[i].first) e.kv_heads.push_back(v[j++].second);
        out.push_back(std::move(e));
        i = j;
      }
      l = l_end;
    }
  }
}

const std::vector<KvEntry>& KvPlacement::entries(int rank) const {
  LOOM_CHECK(rank >= 0 && rank < n_ranks(), "rank ", rank, " of ", n_ranks());
  return ranks_[rank];
}

bool KvPlacement::stores(int rank, int layer, int kv_head, int64_t seq_id, int64_t pos) const {
  if (rank < 0 || rank >= n_ranks()) return false;
  for (const KvEntry& e : ranks_[rank]) {
    if (!e.layers.contains(layer) || !e.tokens.has_seq(seq_id) || !e.tokens.has_pos(pos)) continue;
    if (std::binary_search(e.kv_heads.begin(), e.kv_heads.end(), kv_head)) return true;
  }
  return false;
}

std::vector<int> KvPlacement::holders(int layer, int kv_head, int64_t seq_id, int64_t pos) const {
  std::vector<int> out;
  for (int r = 0; r < n_ranks(); ++r)
    if (stores(r, layer, kv_head, seq_id, pos)) out.push_back(r);
  return out;
}

std::vector<Range> KvPlacement::stored_ranges(int rank, int layer, int kv_head, const SeqExtent& seq) const {
  if (rank < 0 || rank >= n_ranks()) return {};
  for (const KvEntry& e : ranks_[rank]) {
    if (!e.layers.contains(layer) || !e.tokens.has_seq(seq.id)) continue;
    if (std::binary_search(e.kv_heads.begin(), e.kv_heads.end(), kv_head)) return e.tokens.ranges(seq.n_tokens);
  }
  return {};
}

int64_t KvPlacement::stored_cells(int rank, const std::vector<SeqExtent>& seqs) const {
  int64_t cells = 0;
  if (rank < 0 || rank >= n_ranks()) return 0;
  for (const KvEntry& e : ranks_[rank])
    for (const SeqExtent& s : seqs) {
      if (!e.tokens.has_seq(s.id)) continue;
      int64_t tokens = 0;
      for (const Range& t : e.tokens.ranges(s.n_tokens)) tokens += t.size();
      cells += e.layers.size() * int64_t(e.kv_heads.size()) * tokens;
    }
  return cells;
}

bool KvPlacement::operator==(const KvPlacement& o) const {
  if (n_layers_ != o.n_layers_ || n_kv_heads_ != o.n_kv_heads_) return false;
  static const std::vector<KvEntry> kNone;
  for (int r = 0; r < std::max(n_ranks(), o.n_ranks()); ++r) {
    const auto& a = r < n_ranks() ? ranks_[r] : kNone;
    const auto& b = r < o.n_ranks() ? o.ranks_[r] : kNone;
    if (a != b) return false;
  }
  return true;
}

bool KvPlacement::equal_on(const KvPlacement& o, const std::vector<SeqExtent>& seqs) const {
  if (n_layers_ != o.n_layers_ || n_kv_heads_ != o.n_kv_heads_) return false;
  for (int r = 0; r < std::max(n_ranks(), o.n_ranks()); ++r)
    for (int l = 0; l < n_layers_; ++l)
      for (int h = 0; h < n_kv_heads_; ++h)
        for (const SeqExtent& s : seqs)
          if (stored_ranges(r, l, h, s) != o.stored_ranges(r, l, h, s)) return false;
  return true;
}

std::string KvPlacement::to_string() const {
  std::string s = cat("kv placement: ", n_ranks(), " ranks, ", n_layers_, " layers, ", n_kv_heads_, " kv heads\n");
  for (int r = 0; r < n_ranks(); ++r) {
    s += cat("  rank ", r, ":");
    if (ranks_[r].empty()) s += " nothing";
    for (size_t i = 0; i < ranks_[r].size(); ++i) s += cat(i ? ";" : "", " ", ranks_[r][i].to_string());
    s += "\n";
  }
  return s;
}

KvPlacement kv_placement(const Plan& plan, const ModelShape& shape) {
  validate(plan, shape);
  std::vector<std::vector<KvEntry>> per_rank(plan.size());
  for (int r = 0; r < plan.size(); ++r) {
    const RankLayout lay = rank_layout(plan, shape, r);
    TokenRule rule;
    rule.seq_mod = lay.tokens.dp_degree, rule.seq_rem = lay.tokens.dp_index;
    rule.block_mod = lay.kv_shards, rule.block_rem = lay.kv_shard, rule.block_tokens = lay.kv_block;
    per_rank[r].push_back(KvEntry{lay.layers, lay.kv_heads, rule});
  }
  return KvPlacement(shape.n_layers, shape.n_kv_heads, per_rank);
}

KvPlacement combine_placements(const std::vector<PlacementPart>& parts, int n_ranks) {
  if (parts.empty()) fail("combine_placements: no parts");
  const KvPlacement& first = *parts[0].placement;
  std::vector<std::vector<KvEntry>> per_rank(size_t(std::max(n_ranks, 0)));
  for (const PlacementPart& part : parts) {
    const KvPlacement& p = *part.placement;
    if (p.n_layers() != first.n_layers() || p.n_kv_heads() != first.n_kv_heads())
      fail("combine_placements: parts of different models (", p.n_layers(), "x", p.n_kv_heads(), " vs ",
           first.n_layers(), "x", first.n_kv_heads(), ")");
    if (int(part.where.size()) != p.n_ranks())
      fail("combine_placements: ", part.where.size(), " positions for a placement of ", p.n_ranks(), " ranks");
    std::vector<char> used(per_rank.size(), 0);
    for (int i = 0; i < p.n_ranks(); ++i) {
      const int w = part.where[size_t(i)];
      if (w < 0 || w >= n_ranks || used[size_t(w)])
        fail("combine_placements: rank ", i, " placed at ", w, " (a group of ", n_ranks, " ranks, each once)");
      used[size_t(w)] = 1;
      if (part.seqs.empty()) continue;
      for (KvEntry e : p.entries(i)) {
        e.tokens.seq_ids = part.seqs;
        per_rank[size_t(w)].push_back(std::move(e));
      }
    }
  }
  return KvPlacement(first.n_layers(), first.n_kv_heads(), per_rank);
}

}  // namespace loom
