// Executing a KvMigration (parallel/kv_migration.h) between the ranks' KvStores: the one
// mechanism every switch between plans with different KV placements runs (Nitsum TP change,
// Seesaw phase change, Helix <-> TP, P/D hand-off; ARCHITECTURE.md "One migration mechanism").
//
// Nitsum 3.2.2 stop-and-migrate, at a step boundary, collective over the group whose rank numbers
// are the placements' rank numbers:
//   1. handshake: every rank derives the same KvMigration from the two placements and the
//      sequences' extents (sequence, length), which the step descriptor carried to all of them;
//   2. each rank frees at once the cells it loses and sends to nobody (GQA duplicates, cells
//      another holder sends);
//   3. aggregated, double-buffered transfer: the moves are cut into rounds (per sending rank, moves
//      in migration order until the round holds buffer_bytes); a rank packs the fragmented pages
//      of round k into one contiguous buffer while round k-1 is on the wire (a non-blocking
//      all-to-all, Communicator::start_all_to_all_v_bytes), then frees the pages it sent in round
//      k-1 and unpacks what it received into freshly allocated pages (a round that would not fit
//      the store beside cells the rank has yet to send waits in its buffer until they are sent);
//   4. every rank checks that its store now holds exactly what the new placement gives it
//      (check_holdings), failing loudly otherwise.
// Cells a rank holds under both placements stay in their pages: nothing copies them.
//
// Wire format of one move: its K rows then its V rows ([tokens][head_dim] f32 each). The bytes a
// rank sends sum, over all ranks, to KvMigration::total_bytes. Packing and unpacking are copies of
// the store's device (device/device.h copy_spans), and the buffers are that device's memory: on a
// GPU the pages move device to device (through the communicator of `group`, which must take the
// device's memory: the local backend over a shared GPU, or NCCL).
//
// `aggregate = false` sends one move (one block's piece) per round instead: the per-block
// baseline the migration benchmark compares against (bench/migration.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "kv/kv_store.h"
#include "parallel/kv_migration.h"

namespace loom {

struct KvTransferOptions {
  // Bytes one rank packs per round (each of two buffers). Measured (bench/migration.cpp, local and
  // MPI backends on one host): rounds that stay in the cache (64-256 KiB) beat 1-8 MiB rounds by
  // up to 2x, because pack, transfer and unpack then pass over memory once instead of three times;
  // the per-round cost on these backends is a barrier, not a transfer set-up.
  int64_t buffer_bytes = int64_t(256) << 10;
  bool aggregate = true;                    // false: one move per round (per-block baseline)
  // true: `seqs` lists every sequence the group's stores hold (a plan switch), and a rank holding
  // one it does not list fails the check of step 4. false: `seqs` are the sequences that move (a
  // Nitsum pool hands some of an instance's requests to another, cluster/pool.h); the others the
  // ranks hold stay where they are, untouched and unchecked.
  bool all_sequences = true;
};

// Buffers a rank reuses from one migration to the next (two send and two receive buffers of up to
// a round each, in the memory of the store's device), so a switch does not fault fresh memory in;
// optional.
struct KvTransferScratch {
  DeviceArray<float> send[2], recv[2];
};

struct KvTransferStats {
  int64_t bytes_sent = 0, bytes_received = 0;  // by this rank (K and V)
  int64_t moves_sent = 0, moves_received = 0;
  int64_t pages_freed = 0;  // pages of cells this rank no longer holds
  int rounds = 0;           // all-to-all rounds (equal on every rank)
  int deferred_rounds = 0;  // received rounds held back until the rank's sends freed room
  double seconds = 0;
};

// Runs `mig` (from the placement the stores hold now to `to`) over `group`, on every rank of it.
// `seqs` are the extents the migration was computed for: every sequence the stores hold (or, with
// options.all_sequences = false, the ones that move), but the `parked` ones of this rank (optional:
// sequences leaving for the CPU tier, kv_tier.h, whose pages stay untouched until their copy is
// done). The store must have a free page for every cell the migration brings this rank
// (migration_new_pages).
KvTransferStats execute_kv_migration(const KvMigration& mig, const KvPlacement& to,
                                     const std::vector<SeqExtent>& seqs, KvStore& store, Communicator& group,
                                     const KvTransferOptions& options = {}, KvTransferScratch* scratch = nullptr,
                                     const std::vector<int64_t>& parked = {});

// Pages rank `me` allocates in `mig`: the distinct cells it receives and holds no page for.
int64_t migration_new_pages(const KvMigration& mig, int me, const KvStore& store);

}  // namespace loom
