// KvTier: Seesaw's CPU KV cache storage (../shared/papers/004 §4.2 "tiered KV cache buffering",
// W6/W8, and §5.2's HND layout, W12): a host store of whole sequences' KV, with its own capacity
// (`--cpu-kv-bytes`), shared by the ranks of a host. It is the host endpoint of the one KV
// migration mechanism (kv_migration.h, kv_transfer.h): the tier is one more rank of the placement,
// `host` = the plan's rank count, holding every cell (tier_placement). A swap-out is the KvMigration
// from the plan that computed the sequence to the tier (every move src = the lowest holder of a cell,
// dst = host: one writer per cell under GQA replication), a swap-in the KvMigration from the tier to
// the plan that decodes it (every move src = host). A rank executes the moves it is an end of as
// copies between its pages and the tier (tier_copies), and checks what its store then holds with
// the same check_holdings.
//
// Layout: one region per sequence, HND: K then V, each [layer][kv head][token][head_dim] f32, so a
// rank's shard under TP (a range of KV heads of every layer) or PP (a range of layers, every head)
// is one contiguous run per (layer, head) and a run of consecutive heads is contiguous too.
//
// Memory: a KvTierArena is the bytes (threads: one allocation in the process, shared by every
// rank's engine; MPI: one MPI shared-memory window per host, Communicator::allocate_host_shared).
// A KvTier is one rank's index into it. Regions are handed out by a bump pointer that is reset when
// the tier is empty and no copy is in flight on any rank: Seesaw fills the tier during a prefill
// phase and drains it during a decode phase (§4.2 transition-minimizing scheduling: the phase
// changes only when the tier is full or empty), so regions never fragment. Every rank applies the
// same reserve/release/reset sequence (driven by the step descriptors and the step's gather), so
// every rank's index gives the same offsets, and the scheduler's accounting (tokens x
// bytes_per_token against capacity) predicts exactly whether a sequence fits.
//
// Asynchronous swaps (§5.2, W10/W11): TierSwaps runs the copies of one rank on two threads of its
// own, the swap-out thread and the prefetcher, each a FIFO of tasks (one task = one sequence's
// moves of this rank). The rank's main thread only decides the copies (pages and tier offsets) and
// allocates pages; the threads copy bytes while the main thread computes. See TierSwaps below.
//
// Ordering (the memory model): a swap-in reads what other ranks wrote at the swap-out; a new fill
// writes over regions other ranks read. Both pairs are ordered by the same chain: the copying thread
// finishes (its completion counter, release/acquire) -> the rank's main thread runs the arena's
// sync (MPI_Win_sync on the window; nothing for process memory) -> the step's all-gather, which
// carries the completion counters to every rank (a synchronising communication between every pair
// of ranks) -> on the other rank, a later step descriptor (broadcast) -> that rank's main thread
// runs sync again before it hands a copy that depends on it to a thread (mutex: release/acquire).
// That is the MPI-3 pattern for load/store in a shared-memory window in the unified model (store;
// MPI_Win_sync; communication; MPI_Win_sync; load; the window in one MPI_Win_lock_all epoch), with
// C++ release/acquire between a rank's threads on each side. The scheduler issues a swap-in only
// after the swap-out's completion came back from every rank, and resets the tier only after every
// swap-in's did, so no copy ever depends on one that is not complete on every rank.
//
// Thread-safety: KvTier and TierSwaps are one rank's, called from its main thread; the arena is
// written by several ranks (and their threads) at disjoint cells.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "comm/communicator.h"
#include "kv/kv_store.h"
#include "parallel/kv_migration.h"
#include "parallel/kv_placement.h"

namespace loom {

// The shared bytes of a tier. `data` stays valid while the arena lives.
struct KvTierArena {
  float* data = nullptr;
  int64_t bytes = 0;
  std::shared_ptr<void> owner;  // keeps the allocation (or the MPI window) alive
  // The memory fence of the protocol above (MPI: MPI_Win_sync; process memory: none needed, the
  // communicator's collectives order the ranks' threads).
  std::function<void()> sync;
  // A process-memory arena of `bytes` (zero-filled).
  static std::shared_ptr<KvTierArena> allocate(int64_t bytes);
  // Collective over `group` (one host): one arena shared by its ranks (allocate_host_shared).
  static std::shared_ptr<KvTierArena> host_shared(Communicator& group, int64_t bytes);
};

// Bytes one token of the whole model's KV takes in the tier (K and V, every layer and KV head).
inline int64_t tier_bytes_per_token(int n_layers, int n_kv_heads, int head_dim) {
  return 2 * int64_t(n_layers) * n_kv_heads * head_dim * int64_t(sizeof(float));
}

// The tier as a rank of a placement: ranks [0, host) store nothing, rank `host` every cell of every
// sequence (the host endpoint of swap migrations; see the top).
KvPlacement tier_placement(int n_layers, int n_kv_heads, int host);

class KvTier {
 public:
  KvTier(int n_layers, int n_kv_heads, int head_dim, std::shared_ptr<KvTierArena> arena);

  int64_t capacity_bytes() const { return arena_->bytes; }
  int64_t used_bytes() const { return top_; }  // bump pointer: bytes of the current fill
  int64_t bytes_per_token() const { return tier_bytes_per_token(n_layers_, n_kv_heads_, head_dim_); }
  bool empty() const { return seqs_.empty(); }
  int64_t num_sequences() const { return int64_t(seqs_.size()); }
  bool holds(int64_t seq) const { return seqs_.count(seq) != 0; }
  int64_t tokens(int64_t seq) const;
  // Whether a sequence of n_tokens fits after what the current fill holds.
  bool fits(int64_t n_tokens) const { return top_ + n_tokens * bytes_per_token() <= capacity_bytes(); }
  KvTierArena& arena() { return *arena_; }

  // A region for `seq` of n_tokens (LOOM_CHECK: not held yet and fits).
  void reserve(int64_t seq, int64_t n_tokens);
  // Forgets `seq` (no-op when absent). The region is not reused before reset().
  void release(int64_t seq);
  // A new fill: the bump pointer back to 0 (LOOM_CHECK: empty). The caller knows that no copy
  // into or out of the old regions is in flight on any rank.
  void reset();

  // [n_tokens][head_dim] K (V) rows of (seq, layer, kv head).
  float* k(int64_t seq, int layer, int kv_head);
  float* v(int64_t seq, int layer, int kv_head);

 private:
  struct Region {
    int64_t offset = 0;  // floats into the arena
    int64_t tokens = 0;
  };
  const Region& region(int64_t seq) const;
  int n_layers_, n_kv_heads_, head_dim_;
  std::shared_ptr<KvTierArena> arena_;
  int64_t top_ = 0;  // bytes
  std::unordered_map<int64_t, Region> seqs_;
};

// One copy of a move: K rows and V rows ([floats] each) between a page (memory of the store's
// device) and the tier (host memory), run by that device's transfer() (device/device.h).
struct TierCopy {
  Device* dev = nullptr;
  const float* src_k = nullptr;
  const float* src_v = nullptr;
  float* dst_k = nullptr;
  float* dst_v = nullptr;
  int64_t floats = 0;
};

// The copies rank `me` makes for the moves of `mig` it is an end of, with `host` the tier's rank:
// to the tier (src == me, dst == host; the tier region reserved) or from it (src == host, dst == me;
// the pages allocated). LOOM_CHECK when a page the move reads or writes is missing.
std::vector<TierCopy> tier_copies(const KvMigration& mig, int me, int host, KvStore& store, KvTier& tier);

// Runs copies (each K and V one transfer of its device); returns the bytes copied.
int64_t run_tier_copies(const std::vector<TierCopy>& copies);

// A FIFO of copy tasks on a thread of its own. Tasks complete in submission order, so what is done
// is a prefix, counted by done().
class TierWorker {
 public:
  TierWorker();
  ~TierWorker();  // finishes the queued tasks, then joins
  TierWorker(const TierWorker&) = delete;
  TierWorker& operator=(const TierWorker&) = delete;

  // Queues a task; returns its number (0, 1, 2, ...).
  int64_t submit(std::vector<TierCopy> copies);
  int64_t submitted() const { return submitted_; }
  int64_t done() const { return done_.load(std::memory_order_acquire); }
  // Blocks until done() >= n.
  void wait(int64_t n);
  double busy_seconds() const;  // time spent copying
  int64_t bytes() const;        // bytes copied
  // Test hook: runs on the thread before each task's copies (e.g. a delay that keeps it in flight).
  std::function<void()> before_task;

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::vector<TierCopy>> queue_;
  bool stop_ = false;
  int64_t submitted_ = 0;
  std::atomic<int64_t> done_{0};
  double busy_s_ = 0;  // under mu_
  int64_t bytes_ = 0;  // under mu_
  std::thread thread_;
};

// What TierSwaps did on this rank.
struct TierSwapCounters {
  int64_t swapped_out = 0, swapped_in = 0;  // tasks issued
  int64_t bytes_out = 0, bytes_in = 0;      // bytes this rank copied (done tasks)
  double copy_s = 0;   // the two threads' time copying
  double issue_s = 0;  // the main thread deciding copies, allocating pages, fencing
  double wait_s = 0;   // the main thread blocked on a copy (a step that needed it)
  int64_t waits = 0;   // times it blocked
};

// One rank's asynchronous swaps (§5.2): swap-out of the sequences a prefill computed, overlapping
// the steps after it (the KV is not needed until decode), and the prefetcher that swaps sequences in
// for decode. Every rank issues the same tasks in the same order (the descriptors' swap_out and
// swap_in lists), so task numbers agree across ranks. A task is done on this rank when its thread
// finished it (local), and done everywhere when the step's gather shows every rank's counter past
// it (advance(), called by every rank with the same minima): only then is a swapped-out sequence
// ready to be swapped in and a swapped-in one ready to decode. Pages of a swapped-out sequence stay
// held until its copy is done here (reap()); a step that needs them waits (make_room()).
class TierSwaps {
 public:
  // `host` = the plan set's rank count (the tier's rank in the swap migrations).
  TierSwaps(int n_layers, int n_kv_heads, int head_dim, int block_size, int host, std::shared_ptr<KvTierArena> arena);

  KvTier& tier() { return tier_; }
  const KvTier& tier() const { return tier_; }
  TierSwapCounters counters() const;
  void set_before_task(const std::function<void()>& hook);

  // Swap-out of `seq` under `from` (the placement that computed it): reserves its tier region and
  // queues this rank's copies to the tier. Its pages stay until the copy is done (reap()).
  void swap_out(const SeqExtent& seq, const KvPlacement& from, int me, KvStore& store);
  // Swap-in of `seq` under `to`: LOOM_CHECK that its swap-out is done on every rank; gives the cells
  // `to` assigns this rank pages (checked with check_holdings) and queues the copies from the tier.
  void swap_in(const SeqExtent& seq, const KvPlacement& to, int me, KvStore& store);

  // Frees the pages of swapped-out sequences whose copy is done here.
  void reap(KvStore& store);
  // Waits for swap-outs (oldest first, freeing their pages) until `pages` are free or none is left.
  void make_room(int64_t pages, KvStore& store);
  // Waits until `seq`'s tasks (either way) are done here (before its KV is dropped or read).
  void wait_for(int64_t seq, KvStore& store);
  // Waits for every task of this rank.
  void wait_all(KvStore& store);
  // A step with nothing else to do: waits for the oldest swap-in queued here, else the oldest
  // swap-out, so that the first sequences become ready (and run) while the later ones still copy.
  void wait_next(KvStore& store);
  // Whether the swap-in of `seq` is queued and not done here.
  bool swapping_in(int64_t seq) const;
  // Swap-outs / swap-ins queued and not done here (the copies the rank's forward overlaps).
  int64_t out_pending() const { return out_.submitted() - out_.done(); }
  int64_t in_pending() const { return in_.submitted() - in_.done(); }
  // Sequences whose pages this rank still holds for a swap-out (not reaped).
  std::vector<int64_t> parked() const;
  // The sequence is dropped: waits for its tasks here, forgets its region (reused after reset()).
  void release(int64_t seq, KvStore& store);

  // Tasks issued and not yet done on every rank: the same on every rank. While true, the step's
  // gather carries local_done() and every rank calls advance() with the minima.
  bool in_flight() const;
  // {swap-outs, swap-ins} done here, after the arena's sync (the writer's half of the ordering).
  std::array<int64_t, 2> local_done();
  // Every rank: the tasks done on every rank are now [0, out_all) and [0, in_all). Appends the
  // sequences that became ready (swap-out done everywhere: ready to swap in; swap-in done
  // everywhere: ready to decode); the latter's regions are released, and the tier reset when empty
  // and nothing is in flight.
  void advance(int64_t out_all, int64_t in_all, std::vector<int64_t>* out_ready, std::vector<int64_t>* in_ready);
  bool out_ready(int64_t seq) const;  // its swap-out done on every rank (region still held)
  // The fence before a new task (the reader's half of the ordering).
  void sync();

 private:
  int host_, block_size_;
  int64_t bytes_per_token_;
  KvTier tier_;
  KvPlacement tier_pl_;
  TierWorker out_, in_;
  std::vector<int64_t> out_seq_, in_seq_;  // task number -> sequence
  std::unordered_map<int64_t, int64_t> out_task_, in_task_;  // sequence -> its latest task
  int64_t reaped_ = 0;                     // swap-out tasks whose pages were freed (a prefix)
  int64_t out_all_ = 0, in_all_ = 0;       // done on every rank
  TierSwapCounters counters_;
};

}  // namespace loom
