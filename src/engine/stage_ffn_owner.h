// SiDP's owner FFN stages (../shared/papers/001 §4; PAPERS-NOTES.md S1-S11), chosen by the stage
// factory for plans dp=D,weights=owner (stage.h). The FFN of layer l is held only by DP rank
// l mod D (sidp::OwnerWeights, one copy per rank shared by the plans of its set); attention,
// norms, embedding and classifier stay replicated. Two modes, one stage each:
//
// WaS, weight-as-a-service (sidp=was, §4.2, S4-S7). The owner is oblivious: it registers its
//   FFN buffer once (Communicator::register_buffer: an MPI RMA window under MPI, the buffer's
//   address on the thread backend) and never takes part again. A non-owner keeps `slots` cache
//   slots of the largest FFN layer. Its prefetch thread (the paper's housekeeper) walks the rank's
//   fetch order (sidp::fetch_order: layer order, or peak shifting when the lookahead covers a
//   cycle) forever, step after step: it reserves a free slot while fewer than `lookahead` fetched
//   layers wait for compute, issues the one-sided get from the owner on its own communicator, and
//   marks the slot ready. Compute waits on that flag just before the layer's GEMMs and frees the
//   slot when they are done. The arithmetic is plain DP's (same bytes, same kernel, same rows):
//   WaS gives the same bits as dp=D.
//
// CaS, compute-as-a-service (sidp=cas, §4.3, S8-S10). Every rank knows from the step's batch how
//   many rows each replica has (the orchestrator's dummy flags: a replica without rows is a dummy).
//   Per layer a non-owner with rows sends them to the owner and receives its FFN output; a dummy
//   returns at once and sends nothing. The owner concatenates the rows of every replica (its own
//   included, in replica order) into one staging buffer, runs one GEMM chain and returns each
//   replica its rows; an owner without rows of its own still serves (FfnStage::idle). The owner's
//   GEMM has more rows than each replica's would: the kernel's blocking over rows may change the
//   summation order, so CaS is in the "same greedy tokens" exactness class, not "same bits".
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/stage.h"

namespace loom {

class OwnerFfnStage : public FfnStage {
 public:
  struct Stats {
    // WaS
    std::vector<int64_t> fetched;  // per layer: one-sided gets completed
    std::vector<int64_t> used;     // per layer: fetched copies compute used (and freed)
    std::vector<int> fetch_log;    // the first fetches, in the order the prefetch thread issued them
    int64_t fetch_bytes = 0;
    double wait_s = 0;             // compute waiting for a slot's flag
    // CaS
    int64_t bytes_sent = 0;        // activation bytes this rank passed to Communicator::send
    int64_t bytes_received = 0;
    int64_t messages_sent = 0;
    int64_t gemms_served = 0;      // fused owner GEMM chains that included other replicas' rows
    int64_t rows_served = 0;       // rows of other replicas computed here
  };
  virtual Stats stats() const = 0;
  virtual bool cas() const = 0;
  // Bytes this stage allocated for weights: cache slots (the owned FFN is sidp::OwnerWeights).
  virtual int64_t slot_bytes() const = 0;
};

std::unique_ptr<FfnStage> make_owner_ffn_stage(const StageContext& ctx);

}  // namespace loom
