#include "kv/kv_tier.h"

#include <algorithm>
#include <cstring>

#include "core/buffer.h"
#include "core/error.h"

namespace loom {

std::shared_ptr<KvTierArena> KvTierArena::allocate(int64_t bytes) {
  if (bytes < 0) fail("--cpu-kv-bytes must be >= 0, got ", bytes);
  auto buf = std::make_shared<AlignedBuffer<float>>();
  buf->resize(size_t(bytes / int64_t(sizeof(float))));
  std::fill(buf->data(), buf->data() + buf->size(), 0.0f);
  auto a = std::make_shared<KvTierArena>();
  a->data = buf->data();
  a->bytes = int64_t(buf->size()) * int64_t(sizeof(float));
  a->owner = buf;
  return a;
}

std::shared_ptr<KvTierArena> KvTierArena::host_shared(Communicator& group, int64_t bytes) {
  if (bytes < 0) fail("--cpu-kv-bytes must be >= 0, got ", bytes);
  const int64_t usable = bytes / int64_t(sizeof(float)) * int64_t(sizeof(float));
  void* data = nullptr;
  auto a = std::make_shared<KvTierArena>();
  a->owner = group.allocate_host_shared(size_t(usable), &data);
  a->data = static_cast<float*>(data);
  a->bytes = usable;
  return a;
}

KvTier::KvTier(int n_layers, int n_kv_heads, int head_dim, std::shared_ptr<KvTierArena> arena)
    : n_layers_(n_layers), n_kv_heads_(n_kv_heads), head_dim_(head_dim), arena_(std::move(arena)) {
  LOOM_CHECK(arena_ != nullptr, "a KV tier needs an arena");
}

const KvTier::Region& KvTier::region(int64_t seq) const {
  auto it = seqs_.find(seq);
  LOOM_CHECK(it != seqs_.end(), "the KV tier holds no sequence ", seq);
  return it->second;
}

int64_t KvTier::tokens(int64_t seq) const { return region(seq).tokens; }

void KvTier::reserve(int64_t seq, int64_t n_tokens) {
  LOOM_CHECK(!holds(seq), "sequence ", seq, " is in the KV tier already");
  LOOM_CHECK(fits(n_tokens), "the KV tier (", capacity_bytes(), " bytes, ", top_, " used) has no room for ", n_tokens,
             " tokens of sequence ", seq, ": the scheduler admitted more than it holds");
  seqs_[seq] = Region{top_ / int64_t(sizeof(float)), n_tokens};
  top_ += n_tokens * bytes_per_token();
}

void KvTier::release(int64_t seq) {
  seqs_.erase(seq);
  if (seqs_.empty()) top_ = 0;
}

float* KvTier::k(int64_t seq, int layer, int kv_head) {
  const Region& r = region(seq);
  return arena_->data + r.offset + (int64_t(layer) * n_kv_heads_ + kv_head) * r.tokens * head_dim_;
}

float* KvTier::v(int64_t seq, int layer, int kv_head) {
  const Region& r = region(seq);
  return arena_->data + r.offset + (int64_t(n_layers_ + layer) * n_kv_heads_ + kv_head) * r.tokens * head_dim_;
}

TierSwapStats tier_swap_out(const SeqExtent& seq, const KvPlacement& from, int rank, KvStore& store, KvTier& tier) {
  TierSwapStats st;
  LOOM_CHECK(tier.tokens(seq.id) == seq.n_tokens, "tier region of sequence ", seq.id, " holds ",
             tier.tokens(seq.id), " tokens, the swap-out ", seq.n_tokens);
  const int64_t B = store.block_size(), dh = store.head_dim();
  for (int l = 0; l < store.n_layers(); ++l)
    for (int h = 0; h < store.n_kv_heads(); ++h) {
      const std::span<const int32_t> t = store.table(seq.id, l, h);
      for (size_t b = 0; b < t.size(); ++b) {
        if (t[b] == kNoPage) continue;
        const int64_t begin = int64_t(b) * B, end = std::min(begin + B, seq.n_tokens);
        if (begin >= end) continue;
        const std::vector<int> holders = from.holders(l, h, seq.id, begin);
        LOOM_CHECK(!holders.empty() && std::count(holders.begin(), holders.end(), rank) == 1, "rank ", rank,
                   " holds layer ", l, " kv head ", h, " of sequence ", seq.id, " block ", b,
                   ", which the placement does not give it");
        if (holders.front() != rank) continue;  // a lower rank writes the replicated cell
        const size_t bytes = size_t((end - begin) * dh) * sizeof(float);
        std::memcpy(tier.k(seq.id, l, h) + begin * dh, store.k(t[b]), bytes);
        std::memcpy(tier.v(seq.id, l, h) + begin * dh, store.v(t[b]), bytes);
        st.bytes += 2 * int64_t(bytes);
      }
    }
  const int64_t before = store.free_pages();
  store.release(seq.id);
  st.pages = store.free_pages() - before;
  return st;
}

TierSwapStats tier_swap_in(const SeqExtent& seq, const KvPlacement& to, int rank, KvStore& store, KvTier& tier) {
  TierSwapStats st;
  LOOM_CHECK(tier.tokens(seq.id) >= seq.n_tokens, "tier region of sequence ", seq.id, " holds ",
             tier.tokens(seq.id), " tokens, the swap-in wants ", seq.n_tokens);
  const int64_t before = store.free_pages();
  store.reserve(seq.id, seq.n_tokens, to.entries(rank));
  st.pages = before - store.free_pages();
  const int64_t B = store.block_size(), dh = store.head_dim();
  for (int l = 0; l < store.n_layers(); ++l)
    for (int h = 0; h < store.n_kv_heads(); ++h) {
      const std::span<const int32_t> t = store.table(seq.id, l, h);
      for (size_t b = 0; b < t.size(); ++b) {
        if (t[b] == kNoPage) continue;
        const int64_t begin = int64_t(b) * B, end = std::min(begin + B, seq.n_tokens);
        if (begin >= end) continue;
        const size_t bytes = size_t((end - begin) * dh) * sizeof(float);
        std::memcpy(store.k(t[b]), tier.k(seq.id, l, h) + begin * dh, bytes);
        std::memcpy(store.v(t[b]), tier.v(seq.id, l, h) + begin * dh, bytes);
        st.bytes += 2 * int64_t(bytes);
      }
    }
  const std::string bad = check_holdings(store, to, rank, {seq});
  LOOM_CHECK(bad.empty(), "after the swap-in from the KV tier: ", bad);
  return st;
}

}  // namespace loom
