#include "kv/kv_store.h"

#include <algorithm>

#include "core/error.h"
#include "device/cpu_device.h"

namespace loom {

KvStore::KvStore(int n_layers, int n_kv_heads, int head_dim, int block_size, int64_t num_pages, Device* device)
    : n_layers_(n_layers),
      n_kv_heads_(n_kv_heads),
      head_dim_(head_dim),
      block_size_(block_size),
      num_pages_(num_pages),
      own_dev_(device ? nullptr : make_cpu_device(nullptr)),
      dev_(device ? device : own_dev_.get()) {
  if (n_layers < 1 || n_kv_heads < 1 || head_dim < 1 || block_size < 1)
    fail("KV store needs layers, kv heads, head_dim and block_size >= 1, got ", n_layers, ", ", n_kv_heads, ", ",
         head_dim, ", ", block_size);
  if (num_pages < 0 || num_pages > int64_t(INT32_MAX))
    fail("KV store: ", num_pages, " pages is outside [0, ", INT32_MAX, "]");
  k_.bind(*dev_);
  v_.bind(*dev_);
  k_.resize(size_t(num_pages * page_floats()));
  v_.resize(size_t(num_pages * page_floats()));
  free_.reserve(size_t(num_pages));
  for (int64_t p = num_pages - 1; p >= 0; --p) free_.push_back(int32_t(p));
}

KvStore::~KvStore() {
  k_.reset();  // before the device they live on
  v_.reset();
}

int32_t KvStore::alloc_page() {
  LOOM_CHECK(!free_.empty(), "KV store out of pages (", num_pages_,
             " pages): the scheduler admitted more than this rank holds");
  const int32_t p = free_.back();
  free_.pop_back();
  return p;
}

std::span<const int32_t> KvStore::table(int64_t seq, int layer, int kv_head) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return {};
  const std::vector<int32_t>& t = it->second[size_t(layer * n_kv_heads_ + kv_head)];
  return {t.data(), t.size()};
}

int32_t KvStore::page(int64_t seq, int layer, int kv_head, int64_t block) const {
  const std::span<const int32_t> t = table(seq, layer, kv_head);
  return block >= 0 && block < int64_t(t.size()) ? t[size_t(block)] : kNoPage;
}

std::vector<int32_t>& KvStore::table_mut(int64_t seq, int layer, int kv_head) {
  LOOM_CHECK(layer >= 0 && layer < n_layers_ && kv_head >= 0 && kv_head < n_kv_heads_, "layer ", layer,
             " kv head ", kv_head);
  Tables& t = seqs_[seq];
  if (t.empty()) t.resize(size_t(n_layers_) * size_t(n_kv_heads_));
  return t[size_t(layer * n_kv_heads_ + kv_head)];
}

int32_t KvStore::ensure_page(int64_t seq, int layer, int kv_head, int64_t block) {
  std::vector<int32_t>& t = table_mut(seq, layer, kv_head);
  if (int64_t(t.size()) <= block) t.resize(size_t(block + 1), kNoPage);
  if (t[size_t(block)] == kNoPage) t[size_t(block)] = alloc_page();
  return t[size_t(block)];
}

void KvStore::reserve(int64_t seq, int64_t n_tokens, const std::vector<KvEntry>& holds) {
  const int64_t n_blocks = (n_tokens + block_size_ - 1) / block_size_;
  for (const KvEntry& e : holds) {
    if (!e.tokens.has_seq(seq)) continue;
    LOOM_CHECK(e.tokens.block_mod == 1 || e.tokens.block_tokens % block_size_ == 0, "token rule ",
               e.tokens.to_string(), " cuts KV pages of ", block_size_, " tokens");
    for (int64_t l = e.layers.begin; l < e.layers.end; ++l)
      for (int h : e.kv_heads) {
        std::vector<int32_t>& t = table_mut(seq, int(l), h);
        if (int64_t(t.size()) >= n_blocks) continue;  // blocks are reserved in order
        const int64_t from = int64_t(t.size());
        t.resize(size_t(n_blocks), kNoPage);
        for (int64_t b = from; b < n_blocks; ++b)
          if (e.tokens.has_pos(b * block_size_)) t[size_t(b)] = alloc_page();
      }
  }
}

int64_t KvStore::pages_to_reserve(int64_t seq, int64_t n_tokens, const std::vector<KvEntry>& holds) const {
  const int64_t n_blocks = (n_tokens + block_size_ - 1) / block_size_;
  int64_t pages = 0;
  for (const KvEntry& e : holds) {
    if (!e.tokens.has_seq(seq)) continue;
    for (int64_t l = e.layers.begin; l < e.layers.end; ++l)
      for (int h : e.kv_heads) {
        const int64_t have = int64_t(table(seq, int(l), h).size());  // blocks are reserved in order
        for (int64_t b = have; b < n_blocks; ++b) pages += e.tokens.has_pos(b * block_size_) ? 1 : 0;
      }
  }
  return pages;
}

void KvStore::drop(int64_t seq, int layer, int kv_head, int64_t block) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  std::vector<int32_t>& t = it->second[size_t(layer * n_kv_heads_ + kv_head)];
  if (block < 0 || block >= int64_t(t.size()) || t[size_t(block)] == kNoPage) return;
  free_.push_back(t[size_t(block)]);
  t[size_t(block)] = kNoPage;
  while (!t.empty() && t.back() == kNoPage) t.pop_back();
}

void KvStore::release(int64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  // Freed in reverse allocation order per table so that a re-run reuses the same pages.
  for (std::vector<int32_t>& t : it->second)
    for (auto p = t.rbegin(); p != t.rend(); ++p)
      if (*p != kNoPage) free_.push_back(*p);
  seqs_.erase(it);
}

std::vector<int64_t> KvStore::sequences() const {
  std::vector<int64_t> out;
  for (const auto& [seq, tables] : seqs_)
    for (const std::vector<int32_t>& t : tables)
      if (std::any_of(t.begin(), t.end(), [](int32_t p) { return p != kNoPage; })) {
        out.push_back(seq);
        break;
      }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<Range> KvStore::held_ranges(int64_t seq, int layer, int kv_head, int64_t n_tokens) const {
  std::vector<Range> out;
  const std::span<const int32_t> t = table(seq, layer, kv_head);
  for (size_t b = 0; b < t.size(); ++b) {
    if (t[b] == kNoPage) continue;
    const int64_t begin = int64_t(b) * block_size_, end = std::min(begin + block_size_, n_tokens);
    if (begin >= end) continue;
    if (!out.empty() && out.back().end == begin) {
      out.back().end = end;
    } else {
      out.push_back(Range{begin, end});
    }
  }
  return out;
}

std::string check_holdings(const KvStore& store, const KvPlacement& placement, int rank,
                           const std::vector<SeqExtent>& seqs) {
  std::string why;
  int reported = 0;
  for (const SeqExtent& s : seqs)
    for (int l = 0; l < store.n_layers(); ++l)
      for (int h = 0; h < store.n_kv_heads(); ++h) {
        // Placement ranges merged the same way as held_ranges (it cuts only at its own blocks).
        std::vector<Range> want;
        for (const Range& r : placement.stored_ranges(rank, l, h, s)) {
          if (!want.empty() && want.back().end == r.begin) {
            want.back().end = r.end;
          } else {
            want.push_back(r);
          }
        }
        const std::vector<Range> got = store.held_ranges(s.id, l, h, s.n_tokens);
        if (got == want) continue;
        if (reported++ < 4) {
          auto list = [](const std::vector<Range>& v) {
            std::string x;
            for (const Range& r : v) x += to_string(r);
            return x.empty() ? std::string("nothing") : x;
          };
          why += cat(why.empty() ? "" : "; ", "rank ", rank, " layer ", l, " kv head ", h, " sequence ", s.id,
                     ": holds ", list(got), ", the placement says ", list(want));
        }
      }
  if (reported > 4) why += cat("; and ", reported - 4, " more");
  return why;
}

}  // namespace loom
