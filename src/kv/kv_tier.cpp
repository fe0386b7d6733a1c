#include "kv/kv_tier.h"

#include <algorithm>
#include <cstring>

#include "core/buffer.h"
#include "core/clock.h"
#include "core/error.h"

namespace loom {

std::shared_ptr<KvTierArena> KvTierArena::allocate(int64_t bytes) {
  if (bytes < 0) fail("--cpu-kv-bytes must be >= 0, got ", bytes);
  auto buf = std::make_shared<AlignedBuffer<float>>();
  // AlignedBuffer hands out zeroed memory (fresh anonymous pages when large): pages the tier
  // never parks KV in stay untouched, so a large default tier costs only what is used.
  buf->resize(size_t(bytes / int64_t(sizeof(float))));
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
  a->owner = group.allocate_host_shared(size_t(usable), &data, &a->sync);
  a->data = static_cast<float*>(data);
  a->bytes = usable;
  return a;
}

KvPlacement tier_placement(int n_layers, int n_kv_heads, int host) {
  std::vector<std::vector<KvEntry>> ranks(size_t(host) + 1);
  KvEntry all;
  all.layers = Range{0, n_layers};
  for (int h = 0; h < n_kv_heads; ++h) all.kv_heads.push_back(h);
  ranks[size_t(host)].push_back(all);
  return KvPlacement(n_layers, n_kv_heads, ranks);
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

void KvTier::release(int64_t seq) { seqs_.erase(seq); }

void KvTier::reset() {
  LOOM_CHECK(seqs_.empty(), "the KV tier is reset while it holds ", seqs_.size(), " sequences");
  top_ = 0;
}

float* KvTier::k(int64_t seq, int layer, int kv_head) {
  const Region& r = region(seq);
  return arena_->data + r.offset + (int64_t(layer) * n_kv_heads_ + kv_head) * r.tokens * head_dim_;
}

float* KvTier::v(int64_t seq, int layer, int kv_head) {
  const Region& r = region(seq);
  return arena_->data + r.offset + (int64_t(n_layers_ + layer) * n_kv_heads_ + kv_head) * r.tokens * head_dim_;
}

std::vector<TierCopy> tier_copies(const KvMigration& mig, int me, int host, KvStore& store, KvTier& tier) {
  LOOM_CHECK(mig.block_tokens == store.block_size(), "swap migration cut at ", mig.block_tokens,
             "-token blocks, the KV store pages hold ", store.block_size());
  const int64_t B = store.block_size(), dh = store.head_dim();
  std::vector<TierCopy> out;
  for (const KvMove& m : mig.moves) {
    const bool to_tier = m.src == me && m.dst == host, from_tier = m.src == host && m.dst == me;
    if (!to_tier && !from_tier) continue;
    const int32_t page = store.page(m.seq_id, m.layer, m.kv_head, m.block);
    LOOM_CHECK(page != kNoPage, "rank ", me, " has no page for layer ", m.layer, " kv head ", m.kv_head, " of sequence ",
               m.seq_id, " block ", m.block, ", which its swap ", to_tier ? "out" : "in", " moves");
    const int64_t in_page = (m.tokens.begin - m.block * B) * dh, in_tier = m.tokens.begin * dh;
    TierCopy c;
    c.dev = &store.device();
    c.floats = m.tokens.size() * dh;
    if (to_tier) {
      c.src_k = store.k(page) + in_page;
      c.src_v = store.v(page) + in_page;
      c.dst_k = tier.k(m.seq_id, m.layer, m.kv_head) + in_tier;
      c.dst_v = tier.v(m.seq_id, m.layer, m.kv_head) + in_tier;
    } else {
      c.src_k = tier.k(m.seq_id, m.layer, m.kv_head) + in_tier;
      c.src_v = tier.v(m.seq_id, m.layer, m.kv_head) + in_tier;
      c.dst_k = store.k(page) + in_page;
      c.dst_v = store.v(page) + in_page;
    }
    out.push_back(c);
  }
  return out;
}

int64_t run_tier_copies(const std::vector<TierCopy>& copies) {
  int64_t bytes = 0;
  for (const TierCopy& c : copies) {
    const CopySpan whole{0, 0, c.floats};
    c.dev->transfer(c.dst_k, c.src_k, {&whole, 1});
    c.dev->transfer(c.dst_v, c.src_v, {&whole, 1});
    bytes += 2 * c.floats * int64_t(sizeof(float));
  }
  return bytes;
}

// ---- TierWorker ----

TierWorker::TierWorker() : thread_([this] { loop(); }) {}

TierWorker::~TierWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

int64_t TierWorker::submit(std::vector<TierCopy> copies) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(copies));
  }
  cv_.notify_one();
  return submitted_++;
}

void TierWorker::loop() {
  while (true) {
    std::vector<TierCopy> task;
    std::function<void()> hook;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
      hook = before_task;
    }
    if (hook) hook();
    const double t0 = now_seconds();
    const int64_t bytes = run_tier_copies(task);
    const double dt = now_seconds() - t0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_s_ += dt;
      bytes_ += bytes;
      done_.fetch_add(1, std::memory_order_release);
    }
    done_cv_.notify_all();
  }
}

void TierWorker::wait(int64_t n) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return done_.load(std::memory_order_acquire) >= n; });
}

double TierWorker::busy_seconds() const {
  std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mu_));
  return busy_s_;
}

int64_t TierWorker::bytes() const {
  std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mu_));
  return bytes_;
}

// ---- TierSwaps ----

TierSwaps::TierSwaps(int n_layers, int n_kv_heads, int head_dim, int block_size, int host,
                     std::shared_ptr<KvTierArena> arena)
    : host_(host),
      block_size_(block_size),
      bytes_per_token_(kv_bytes_per_token(head_dim, DType::F32)),
      tier_(n_layers, n_kv_heads, head_dim, std::move(arena)),
      tier_pl_(tier_placement(n_layers, n_kv_heads, host)) {}

TierSwapCounters TierSwaps::counters() const {
  TierSwapCounters c = counters_;
  c.copy_s = out_.busy_seconds() + in_.busy_seconds();
  c.bytes_out = out_.bytes();
  c.bytes_in = in_.bytes();
  return c;
}

std::vector<int64_t> TierSwaps::parked() const {
  std::vector<int64_t> out;
  for (int64_t t = reaped_; t < int64_t(out_seq_.size()); ++t)
    if (out_task_.at(out_seq_[size_t(t)]) == t) out.push_back(out_seq_[size_t(t)]);
  return out;
}

void TierSwaps::set_before_task(const std::function<void()>& hook) {
  LOOM_CHECK(out_.submitted() == 0 && in_.submitted() == 0, "the copy hook is set before the first swap");
  out_.before_task = hook;
  in_.before_task = hook;
}

void TierSwaps::sync() {
  if (tier_.arena().sync) tier_.arena().sync();
}

void TierSwaps::swap_out(const SeqExtent& seq, const KvPlacement& from, int me, KvStore& store) {
  const double t0 = now_seconds();
  LOOM_CHECK(from.n_ranks() == host_, "swap-out under a placement of ", from.n_ranks(), " ranks, the tier is rank ", host_);
  tier_.reserve(seq.id, seq.n_tokens);
  const KvMigration mig = kv_migration(from, tier_pl_, {seq}, block_size_, bytes_per_token_);
  out_task_[seq.id] = out_.submit(tier_copies(mig, me, host_, store, tier_));
  out_seq_.push_back(seq.id);
  ++counters_.swapped_out;
  counters_.issue_s += now_seconds() - t0;
}

void TierSwaps::swap_in(const SeqExtent& seq, const KvPlacement& to, int me, KvStore& store) {
  const double t0 = now_seconds();
  LOOM_CHECK(to.n_ranks() == host_, "swap-in under a placement of ", to.n_ranks(), " ranks, the tier is rank ", host_);
  LOOM_CHECK(out_ready(seq.id), "swap-in of sequence ", seq.id,
             " before its swap-out is done on every rank (the scheduler onboards ready sequences only)");
  LOOM_CHECK(tier_.tokens(seq.id) >= seq.n_tokens, "tier region of sequence ", seq.id, " holds ", tier_.tokens(seq.id),
             " tokens, the swap-in wants ", seq.n_tokens);
  reap(store);  // its swap-out is done here too: its old pages are gone before new ones come
  const std::vector<int64_t> held = store.sequences();
  LOOM_CHECK(!std::binary_search(held.begin(), held.end(), seq.id), "rank ", me, " still holds pages of sequence ",
             seq.id, " at its swap-in");
  store.reserve(seq.id, seq.n_tokens, to.entries(me));
  const std::string bad = check_holdings(store, to, me, {seq});
  LOOM_CHECK(bad.empty(), "at the swap-in from the KV tier: ", bad);
  const KvMigration mig = kv_migration(tier_pl_, to, {seq}, block_size_, bytes_per_token_);
  in_task_[seq.id] = in_.submit(tier_copies(mig, me, host_, store, tier_));
  in_seq_.push_back(seq.id);
  ++counters_.swapped_in;
  counters_.issue_s += now_seconds() - t0;
}

void TierSwaps::reap(KvStore& store) {
  const int64_t done = out_.done();
  for (; reaped_ < done; ++reaped_) {
    const int64_t seq = out_seq_[size_t(reaped_)];
    if (out_task_[seq] == reaped_) store.release(seq);
  }
}

void TierSwaps::make_room(int64_t pages, KvStore& store) {
  reap(store);
  while (store.free_pages() < pages && reaped_ < out_.submitted()) {
    const double t0 = now_seconds();
    out_.wait(reaped_ + 1);
    counters_.wait_s += now_seconds() - t0;
    ++counters_.waits;
    reap(store);
  }
}

void TierSwaps::wait_for(int64_t seq, KvStore& store) {
  const double t0 = now_seconds();
  bool waited = false;
  if (auto it = out_task_.find(seq); it != out_task_.end() && it->second >= out_.done()) {
    out_.wait(it->second + 1);
    waited = true;
  }
  if (auto it = in_task_.find(seq); it != in_task_.end() && it->second >= in_.done()) {
    in_.wait(it->second + 1);
    waited = true;
  }
  if (waited) {
    counters_.wait_s += now_seconds() - t0;
    ++counters_.waits;
  }
  reap(store);
}

void TierSwaps::wait_all(KvStore& store) {
  if (out_.done() < out_.submitted() || in_.done() < in_.submitted()) {
    const double t0 = now_seconds();
    out_.wait(out_.submitted());
    in_.wait(in_.submitted());
    counters_.wait_s += now_seconds() - t0;
    ++counters_.waits;
  }
  reap(store);
}

void TierSwaps::wait_next(KvStore& store) {
  TierWorker& w = in_.done() < in_.submitted() ? in_ : out_;
  if (w.done() < w.submitted()) {
    const double t0 = now_seconds();
    w.wait(w.done() + 1);
    counters_.wait_s += now_seconds() - t0;
    ++counters_.waits;
  }
  reap(store);
}

bool TierSwaps::swapping_in(int64_t seq) const {
  auto it = in_task_.find(seq);
  return it != in_task_.end() && it->second >= in_.done();
}

void TierSwaps::release(int64_t seq, KvStore& store) {
  wait_for(seq, store);
  tier_.release(seq);
  if (tier_.empty() && !in_flight()) tier_.reset();
}

bool TierSwaps::in_flight() const {
  return out_all_ < int64_t(out_seq_.size()) || in_all_ < int64_t(in_seq_.size());
}

std::array<int64_t, 2> TierSwaps::local_done() {
  const std::array<int64_t, 2> d = {out_.done(), in_.done()};  // acquire: the copies are visible here
  sync();                                                       // and now to the window's other processes
  return d;
}

void TierSwaps::advance(int64_t out_all, int64_t in_all, std::vector<int64_t>* out_ready,
                        std::vector<int64_t>* in_ready) {
  LOOM_CHECK(out_all >= out_all_ && out_all <= int64_t(out_seq_.size()) && in_all >= in_all_ &&
                 in_all <= int64_t(in_seq_.size()),
             "tier tasks done on every rank go from (", out_all_, ", ", in_all_, ") to (", out_all, ", ", in_all,
             ") of (", out_seq_.size(), ", ", in_seq_.size(), ") issued");
  for (; out_all_ < out_all; ++out_all_) out_ready->push_back(out_seq_[size_t(out_all_)]);
  for (; in_all_ < in_all; ++in_all_) {
    const int64_t seq = in_seq_[size_t(in_all_)];
    in_ready->push_back(seq);
    tier_.release(seq);  // read by every rank: the region is free (reused after the reset)
  }
  if (tier_.empty() && !in_flight()) tier_.reset();
}

bool TierSwaps::out_ready(int64_t seq) const {
  auto it = out_task_.find(seq);
  return it != out_task_.end() && it->second < out_all_ && tier_.holds(seq);
}

}  // namespace loom
