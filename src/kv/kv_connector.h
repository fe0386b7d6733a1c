// KV connectors, one rank's side (ARCHITECTURE.md "KvConnector"): whatever moves KV between steps
// is one list of operations on the step, run in order by the connectors of the rank:
//   SwapOut  sequences' KV leaves the store for the CPU tier, under the placement that computed it
//            (the current plan's);                                 TierConnector (tier_connector.h)
//   Migrate  the KV of sequences moves rank to rank, from the current plan's placement to the
//            step's plan's (a plan switch between placements);     MigrationConnector (below)
//   SwapIn   sequences' KV comes back from the CPU tier under the step's plan's placement;
//                                                                  TierConnector
//   Await    the step's sequences (with their context lengths) need their KV here and pages for
//            what the step writes: each connector waits for the copies it has in flight that the
//            step needs (none listed: the step exists to complete copies). Every connector that
//            runs it does; a rank without such a connector has nothing to wait for.
// The scheduler's side writes the operations (engine/sched_kv_connector.h; the step descriptor
// carries them: swap_out, kv_seqs + kv_resident, swap_in), every rank runs the same list.
//
// Connectors share the store: a migration leaves alone the pages another connector holds for a
// sequence outside every placement (a swap-out still copying) and asks them for room first
// (KvConnectors::prepare_migration).
//
// The seam for prefix-cache blocks (issue 32): a connector that keeps blocks of finished prefixes
// and loads them into an admitted sequence's pages is one more KvConnector with its own operation
// kinds, added to the rank's KvConnectors; nothing here implements it.
//
// Thread-safety: one rank's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "kv/kv_store.h"
#include "kv/kv_transfer.h"
#include "parallel/kv_placement.h"

namespace loom {

enum class KvOpKind : uint8_t { SwapOut, Migrate, SwapIn, Await };
const char* kv_op_name(KvOpKind k);

struct KvOp {
  KvOpKind kind = KvOpKind::Await;
  std::vector<SeqExtent> seqs;
  // Migrate: true: `seqs` move, the sequences not listed stay where they are (Seesaw's resident
  // sequences); false: `seqs` are every sequence the stores hold (checked after the move).
  bool resident = false;
};

// What happened on this rank (the migration's part; default when none ran).
struct KvOpsResult {
  bool moved = false;        // a migration ran
  int64_t total_bytes = 0;   // KvMigration::total_bytes (all ranks)
  KvTransferStats transfer;  // this rank's part
};

class KvConnectors;

// What one step's operations run against on this rank.
struct KvOpContext {
  int me = 0;
  const KvPlacement* from = nullptr;  // the placement the stores hold now (the current plan's)
  const KvPlacement* to = nullptr;    // the step's plan's
  KvStore* store = nullptr;
  Communicator* world = nullptr;  // the group whose ranks are the placements' ranks
  KvConnectors* all = nullptr;    // the rank's connectors (a migration asks the others for room)
  KvOpsResult* result = nullptr;
};

class KvConnector {
 public:
  virtual ~KvConnector() = default;
  virtual bool runs(KvOpKind kind) const = 0;
  // Before a step's operations (e.g. freeing the pages of completed copies); `ops` are the step's.
  virtual void begin(const std::vector<KvOp>& /*ops*/, KvOpContext& /*ctx*/) {}
  virtual void run(const KvOp& op, KvOpContext& ctx) = 0;
  // A migration is about to run, needing `pages` free pages on this rank: make room, and return the
  // sequences whose pages this connector holds outside every placement (the migration leaves them).
  virtual std::vector<int64_t> prepare_migration(int64_t /*pages*/, KvStore& /*store*/) { return {}; }
  // `seq` is dropped: finish what it has in flight for it (the store then frees its pages).
  virtual void release(int64_t /*seq*/, KvStore& /*store*/) {}
};

// The rank's connectors, in the order they were added.
class KvConnectors {
 public:
  void add(std::unique_ptr<KvConnector> c);
  // LOOM_CHECK that every operation but Await that lists sequences has a connector that runs its kind.
  void check(const std::vector<KvOp>& ops, int64_t step) const;
  // begin() on every connector, then the operations in order, each by every connector that runs its kind.
  void run(const std::vector<KvOp>& ops, KvOpContext& ctx);
  // One operation, without begin() (a plan switch outside a step).
  void run_one(const KvOp& op, KvOpContext& ctx);
  std::vector<int64_t> prepare_migration(int64_t pages, KvStore& store);
  void release(int64_t seq, KvStore& store);
  // The connector of type T, or null.
  template <class T>
  T* find() const {
    for (const auto& c : list_)
      if (T* t = dynamic_cast<T*>(c.get())) return t;
    return nullptr;
  }

 private:
  std::vector<std::unique_ptr<KvConnector>> list_;
};

// Rank-to-rank migration (kv_transfer.h execute_kv_migration, the one mechanism of every switch
// between placements): runs Migrate from ctx.from to ctx.to over ctx.world.
class MigrationConnector final : public KvConnector {
 public:
  MigrationConnector(int block_size, int head_dim, const KvTransferOptions& options)
      : block_size_(block_size), head_dim_(head_dim), options_(options) {}
  bool runs(KvOpKind kind) const override { return kind == KvOpKind::Migrate; }
  void run(const KvOp& op, KvOpContext& ctx) override;

 private:
  int block_size_, head_dim_;
  KvTransferOptions options_;
  KvTransferScratch scratch_;  // migration buffers, kept warm between switches
};

}  // namespace loom
