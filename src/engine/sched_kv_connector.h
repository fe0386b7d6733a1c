// The scheduler's side of a KV connector (ARCHITECTURE.md "KvConnector"): whatever keeps or moves
// a sequence's KV outside the device pools between steps (the CPU tier of Seesaw, engine/seesaw_tier.h;
// prefix-cache blocks, issue 32) is accounted here, not in the Scheduler's own fields. The Scheduler
// asks its connector for capacity (admission) and calls it at fixed points of a step; the connector
// writes the step's KV operations (StepBatch::swap_out / swap_in / await_swaps), which the ranks'
// connectors execute (kv/kv_connector.h).
//
// The points, in the order of one step (Scheduler::schedule, then on_step_done):
//   begin_schedule   before the batch is built: the connector may change its state (Seesaw: phase),
//                    bring sequences back into the running set (onboarding, a swap-in op) and says
//                    which work the step may hold (decodes, prefills);
//   room_for / extra_blocks   admission of a waiting sequence: room outside the device pools (false
//                    stops admission, strictly in order) and device blocks charged on top of its own;
//   admitted         it was admitted (its blocks reserved);
//   end_schedule     the batch is built: the connector adds the KV operations it holds for it;
//   step_done        the step's result arrived (before its tokens are applied: copies completed);
//   computed         a sequence's step was applied and it is still live (e.g. its prefill completed);
//   released         a sequence's blocks went back to the pools (preempted, finished, extracted, parked);
//   forget           a sequence the connector holds (out of the Scheduler's sets) finishes;
//   step_failed      the step failed: returns the held sequences that fail with it.
// A prefix cache (issue 32) plugs in at the same points: room_for / admitted (blocks it holds and
// hands to an admitted sequence), released (blocks it keeps), end_schedule (its loads).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/step.h"
#include "kv/block_allocator.h"

namespace loom {

struct SchedulerConfig;

// What a connector may see of, and do to, the Scheduler's sets (the Scheduler implements it).
class KvConnectorHost {
 public:
  virtual const SchedulerConfig& config() const = 0;
  virtual const std::vector<Sequence*>& running() const = 0;  // by urgency
  virtual const std::deque<Sequence*>& waiting() const = 0;   // by urgency
  virtual KvBlockPools& block_pools() = 0;
  // Whether `need` blocks per pool leave the watermark free in every pool (waived while nothing runs).
  virtual bool fits(const std::vector<int>& need) const = 0;
  // Whether admission would admit the first waiting sequence now (sequence slots, blocks with the
  // connector's charge, the connector's room), budget aside.
  virtual bool head_admissible() const = 0;
  // Into the running set (status kRunning, by urgency); its blocks are the caller's to reserve.
  virtual void run(Sequence* s) = 0;
  // Out of the running set, its blocks released (released() is called): the connector holds it.
  virtual void park(Sequence* s) = 0;

 protected:
  ~KvConnectorHost() = default;
};

// Which work a step may hold.
struct StepKinds {
  bool decodes = true;
  bool prefills = true;
};

class SchedKvConnector {
 public:
  virtual ~SchedKvConnector() = default;

  // Capacity. "" when a request may run, else why it never can (add_request rejects it).
  virtual std::string reject_reason(const Request& /*r*/, int64_t /*total_tokens*/) const { return {}; }
  virtual bool room_for(int64_t /*tokens*/) const { return true; }
  virtual int extra_blocks(int64_t /*blocks*/) const { return 0; }
  // A plan switch moves no KV (the Scheduler's pools are the last shape's; rehome() is not used).
  virtual bool keeps_kv_resident() const { return false; }
  // Sequences it holds (they keep the Scheduler unfinished).
  virtual bool holds_any() const { return false; }

  // The points of a step (see the top).
  virtual StepKinds begin_schedule(StepBatch& /*b*/, KvConnectorHost& /*h*/) { return {}; }
  virtual void admitted(Sequence& /*s*/, int /*tokens*/, KvBlockPools& /*pools*/) {}
  virtual void end_schedule(StepBatch& /*b*/) {}
  virtual void step_done(const StepResult& /*r*/, KvConnectorHost& /*h*/) {}
  virtual void computed(Sequence& /*s*/, const ScheduledSeq& /*e*/, KvConnectorHost& /*h*/) {}
  virtual void released(Sequence& /*s*/, KvBlockPools& /*pools*/) {}
  virtual void forget(Sequence& /*s*/) {}
  virtual std::vector<Sequence*> step_failed() { return {}; }
};

}  // namespace loom
