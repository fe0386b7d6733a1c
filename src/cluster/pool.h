// Nitsum's pool in the real engine (paper file 002 §3.2-3.3; PAPERS-NOTES N1-N15): `loom serve
// --ranks N --policy nitsum` serves one model with N ranks split into instances, each an aligned
// group of ranks at a TP degree with a role (prefill, decode, both) and an SLO tier
// (grouping.h), re-chosen every control window by the GlobalScheduler (global_scheduler.h).
//
// Processes and threads (N15: "a single-process ... service with an async HTTP frontend and
// push-based dispatch to GPU workers"): the world has N + 1 ranks. World rank 0 is the CONTROL
// PLANE; it computes nothing and holds every instance's Scheduler and EngineLoop (engine/), the
// GlobalScheduler and the HTTP front end. World rank 1 + p is POOL RANK p, a worker. Backends:
// local (N + 1 threads) and mpi (mpirun -np N+1).
//
// Built warm at start-up (N3, N4), so a reconfiguration builds nothing:
//   - every candidate group G (all_candidate_groups: the aligned groups of every allowed TP
//     degree) is split from the world twice: its ranks alone (the RankEngine's world, and the
//     group KV migrates over between instances nested in it) and C_G = {control} + its ranks (the
//     command channel); every pair of disjoint candidate groups once more (a P/D hand-off between
//     them migrates over it);
//   - on every pool rank: one ThreadPool, one KvStore, and for every candidate group it belongs to
//     a RankEngine of plan tp=|G|,weights=full over G sharing that store (views of the mapped
//     file: no weight is copied, N3);
//   - on the control rank: one driver thread per candidate group.
//
// Step loop, per instance and independent of the others (the point of P/D disaggregation: a long
// prefill on one instance never stalls another's decodes). The control thread (the caller of
// step(): the server's engine thread) runs EngineLoop::begin_step() of every instance that has no
// step in flight and hands the batch to the driver thread of the instance's group, which
// broadcasts the step descriptor over C_G (step_codec.h) and receives the sampled tokens from G's
// first rank; the control thread applies them with end_step() as they arrive. A pool rank serves
// one group at a time: it waits on that group's C_G for the next command and runs it.
//
// Commands on C_G, a FIFO per group, so every rank runs them in the order the control thread
// issued them (a command enqueued on several groups is reached by all of them after what each had
// queued; one issuing thread makes that order the same everywhere, hence no deadlock):
//   step descriptor (step_codec.h)  RankEngine::step on the group; its first rank returns the tokens;
//   stop (step_codec.h)             the worker returns;
//   pool command                    drop some sequences' K/V, run KV migrations between groups,
//                                   then serve a new group (each rank finds its own);
//   keep-alive                      nothing (N4: idle executors get "lightweight keep-alive
//                                   signals"); an idle driver sends one every window, so no rank
//                                   waits past the communicator's timeout.
//
// Moving a request from instance A to instance B (P/D hand-off, reconfiguration; N5-N7,
// stop-and-migrate): its Sequence leaves A's Scheduler (extract) and joins B's (adopt). For a
// waiting request that is all (its metadata and prompt live on the control plane). A running
// one's K/V moves by KV heads (N6) with the engine's one migration mechanism: kv_migration
// between the placements of tp=|A| and tp=|B| side by side in the group over A and B, each
// restricted to its sequences (combine_placements), executed aggregated and double-buffered
// (kv_transfer.h) by the ranks of A and B only. When B's pools cannot hold it, it is preempted
// (recomputed on B) and A's ranks drop its K/V.
//   - P/D hand-off (PAPERS-NOTES 2.4.6): after each step of a prefill instance, every request that
//     finished its prefill goes to GlobalScheduler::route_decode's decode instance (it stays when
//     there is none); the migration lists only the moving sequences (the two instances' others
//     are untouched).
//   - Reconfiguration, at a control window boundary (default 1 s): the next layout of the forced
//     cycle (PoolOptions::layouts; tests, demonstrations), or GlobalScheduler::next_window (the
//     planner over the profile table). A COMPONENT is a maximal aligned group covered by old and
//     new instances that overlap; one whose instances change is stopped: no new step starts on
//     its instances, the steps in flight finish (unchanged components keep stepping). Then every
//     request of its instances is re-homed: waiting ones re-routed (route()); ones holding K/V to
//     a new instance of the same component (decode-ready ones to a decode instance when there is
//     one, else to Both, else Prefill; prefilling ones to a prefill-capable one; fewest requests
//     first; PAPERS-NOTES 2.4.5/2.4.9: keep K/V local), so that the component's whole change is
//     ONE migration over its group listing every sequence it holds (rounds that do not fit a
//     store yet wait for its sends, kv_transfer.h). The new instances start on already-built
//     groups.
//
// Routing (N12) and local batches (N13): GlobalScheduler::route picks the instance and the queue
// kind; the queue kind dominates the request's scheduler priority (feasible, then best-effort,
// then background; the client's priority breaks ties inside one kind), so each instance's
// Scheduler admits feasible requests first; its max_num_seqs is the instance's batch cap (at most
// --max-num-seqs). A request without a tier belongs to the first.
//
// Limits (what differs from the paper or the simulator, src/sim/exp_nitsum.cpp):
//   - forced layouts carry no profile table, so their routing is SLO-agnostic (least-loaded over
//     the prefill-capable instances; hand-offs still prefer the request's tier);
//   - the CLI builds the planner's table once at start-up from a `loom profile` folder at assumed
//     mean lengths (--pool-lengths), not from each window's observed lengths (PAPERS-NOTES 2.4.2);
//   - batch composition is the Scheduler's priority order (feasible, best-effort, background)
//     rather than cluster::compose_batch over the running set: a running request is never
//     skipped for a more urgent one, only admitted after it;
//   - a regrouping keeps K/V inside its component: a running request of a stopped instance goes
//     to a new instance over the same ranks (a later hand-off may move it on).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cluster/global_scheduler.h"
#include "comm/communicator.h"
#include "device/device.h"
#include "engine/engine.h"
#include "engine/rank_engine.h"

namespace loom::cluster {

struct PoolOptions {
  std::string comm = "local";  // local | mpi (comm/world.h)
  // Where the workers compute (--device): cuda runs the pool's ranks as threads sharing GPU 0.
  DeviceKind device = DeviceKind::Cpu;
  int ranks = 2;               // N, the pool; the world has N + 1 ranks (the control plane first)
  std::string model_path;
  // How world rank `w` gets its model; default load_model(model_path).
  std::function<std::shared_ptr<const Model>(int world_rank)> load_model;
  // Per instance: max_num_seqs (capped by the tier's batch limit), token budget, block size,
  // chunking, max_model_len. Per pool rank: kv_cache_bytes (default: kv_cache_fraction of
  // MemAvailable shared by the ranks of this process), threads (0: 1 on the local backend,
  // cores / ranks on this host under mpi).
  EngineConfig engine;
  CommOptions comm_options;
  SloTiers tiers;  // empty: one tier "default" that every request belongs to
  // Forced layouts (each placed on aligned groups covering the pool), the next one every window;
  // empty: the planner decides from `table`.
  std::vector<std::vector<InstanceSpec>> layouts;
  ProfileTable table;  // the planner's (needed without layouts)
  PlannerOptions planner;
  double window_s = 1.0;
  // > 0: a control window ends after this many engine steps of the pool's instances instead of
  // window_s seconds (tests: windows that count work, not the machine's speed).
  int64_t window_steps = 0;
  int min_tp = 1, max_tp = 0;  // candidate TP degrees, powers of two; max 0: the pool size
  int64_t migration_buffer_bytes = 0;  // per round of a KV migration (0: kv_transfer.h default)
  // Test hooks, on the pool rank's thread: after each step it ran (with the group's engine), and
  // when the worker returns (its KV store: every page back?).
  std::function<void(int pool_rank, RankEngine&, const StepBatch&)> after_step;
  std::function<void(int pool_rank, const KvStore&)> on_exit;
};

// What the pool did (control plane; thread-safe snapshot).
struct PoolStats {
  int64_t windows = 0;
  int64_t reconfigurations = 0;  // windows that changed the instances
  int64_t handoffs = 0;          // requests moved from a prefill to a decode instance
  int64_t moved = 0;             // requests re-homed by reconfigurations
  int64_t recomputed = 0;        // moved requests whose K/V did not fit: preempted instead
  int64_t regroup_bytes = 0, handoff_bytes = 0;  // K/V moved (KvMigration::total_bytes)
  // Reconfigurations: from the window boundary to the last affected rank done (the stop at a step
  // boundary and the migration), and the migration alone (the slowest rank's execute time).
  double switch_s_total = 0, switch_s_max = 0, migrate_s_total = 0;
  double handoff_s_total = 0;    // hand-off migrations (the slowest rank of each)
  std::string layout;            // the instances now, e.g. "t0:prefill:tp1@0 t0:decode:tp1@1"
};

class PoolEngine : public EngineHandle {
 public:
  virtual int num_ranks() const = 0;  // N
  // Start-up report lines (groups, degrees, KV per rank, the first layout).
  virtual const std::vector<std::string>& start_info() const = 0;
  virtual PoolStats pool_stats() const = 0;
};

// One forced layout: comma-separated instances ROLE:tpT[:TIER] (ROLE prefill|decode|both, T a
// power of two, TIER a tier name: default the first), e.g. "prefill:tp1,decode:tp1". Throws
// loom::Error naming the item.
std::vector<InstanceSpec> parse_pool_layout(const std::string& text, const SloTiers& tiers);

// Checks, in one line each, what needs no model: the pool size, the TP degrees (a pool size no
// grouping fits), the window, each forced layout against the pool (it must cover every rank on
// aligned groups). Call it before loading anything; run_pool calls it too.
void check_pool_options(const PoolOptions& o);

// Runs the pool on every rank this process hosts, calling `driver` on the control plane (world
// rank 0) with the PoolEngine; when it returns the workers are stopped and run_pool returns on
// every rank. Throws loom::Error on a user error (naming the value) or when a rank failed.
void run_pool(const PoolOptions& o, const std::function<void(PoolEngine&)>& driver);

}  // namespace loom::cluster
