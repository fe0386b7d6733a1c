#include "engine/plan_executor.h"

#include <algorithm>
#include <cstring>
#include <exception>

#include "core/error.h"
#include "core/op_timing.h"
#include "engine/step_codec.h"

namespace loom {

void broadcast_descriptor(Communicator& group, std::vector<uint8_t>& wire, std::vector<uint8_t>& inl) {
  optime::Scope timed(optime::Op::Descriptor);
  constexpr size_t kHead = sizeof(uint64_t), kRoom = StepLeader::kInlineBytes - kHead;
  inl.resize(StepLeader::kInlineBytes);
  const bool root = group.rank() == 0;
  if (root) {
    const uint64_t n = wire.size();
    std::memcpy(inl.data(), &n, kHead);
    std::memcpy(inl.data() + kHead, wire.data(), std::min<size_t>(n, kRoom));
  }
  group.broadcast(inl.data(), inl.size(), 0);
  uint64_t n = 0;
  std::memcpy(&n, inl.data(), kHead);
  if (!root) {
    wire.resize(size_t(n));
    std::memcpy(wire.data(), inl.data() + kHead, std::min<size_t>(size_t(n), kRoom));
  }
  if (n > kRoom) group.broadcast(wire.data() + kRoom, size_t(n) - kRoom, 0);
}

void StepLeader::check_usable() const {
  if (broken_) fail(error_);
}

void StepLeader::send(const StepBatch& batch, const std::vector<RequestId>& released) {
  if (group_.size() == 1) return;
  encode_step(batch, released, wire_);
  broadcast_descriptor(group_, wire_, inline_);
}

void StepLeader::stop() {
  if (stopped_ || broken_) return;
  stopped_ = true;
  if (group_.size() == 1) return;
  wire_ = encode_stop();
  broadcast_descriptor(group_, wire_, inline_);
}

void StepLeader::heartbeat() {
  check_usable();
  if (group_.size() == 1) return;
  try {
    wire_ = encode_heartbeat();
    broadcast_descriptor(group_, wire_, inline_);
    group_.barrier();
  } catch (const std::exception& e) {
    broken_ = true;
    error_ = cat("heartbeat: ", e.what());
    throw;
  }
}

PlanExecutor::PlanExecutor(Communicator& world, RankEngine& rank) : leader_(world), rank_(rank) {
  LOOM_CHECK(world.rank() == 0, "the PlanExecutor runs on world rank 0, not ", world.rank());
  for (int id = 0; id < rank.plans().size(); ++id) stats_.push_back(PlanStats{rank.plans().name(id)});
}

StepResult PlanExecutor::execute(const StepBatch& batch) {
  leader_.check_usable();
  if (batch.plan_id < 0 || batch.plan_id >= rank_.plans().size())
    fail("step ", batch.step_index, ": plan id ", batch.plan_id, " outside the set ", rank_.plans().to_string());
  std::vector<RequestId> released;
  released.swap(pending_release_);
  SwitchResult sw;
  optime::Scope timed(optime::Op::Step);
  const int before = rank_.current();
  StepResult r = leader_.run(batch, released, [&] { return rank_.step(batch, released, &sw); });
  PlanStats& st = stats_[size_t(batch.plan_id)];
  if (batch.plan_id != before) {
    ++st.switches;
    st.kv_bytes_moved += sw.total_bytes;
    st.switch_s += sw.transfer.seconds;
    st.weight_bytes_built += sw.weight_bytes_built;
    st.reshard_s += sw.reshard_s;
  }
  if (!batch.seqs.empty()) {
    ++st.steps;
    st.tokens += batch.num_tokens;
    ++num_steps_;
  }
  return r;
}

int64_t follow_steps(Communicator& world, RankEngine& rank, const std::function<void(const StepBatch&)>& before_step,
                     const std::function<void()>& on_heartbeat) {
  LOOM_CHECK(world.rank() != 0, "world rank 0 leads; it does not follow");
  std::vector<uint8_t> wire, inl;
  int64_t steps = 0;
  while (true) {
    broadcast_descriptor(world, wire, inl);
    DecodedStep d = decode_step(wire.data(), wire.size());
    if (d.command == StepCommand::kStop) return steps;
    if (d.command == StepCommand::kHeartbeat) {
      if (on_heartbeat) on_heartbeat();
      world.barrier();
      continue;
    }
    if (d.batch.plan_id >= rank.plans().size())
      fail("step ", d.batch.step_index, ": plan id ", d.batch.plan_id, " outside the set of ", rank.plans().size());
    if (before_step) before_step(d.batch);
    rank.step(d.batch, d.released);
    ++steps;
  }
}

}  // namespace loom

namespace loom {

PlanControl::PlanControl(const PlanSet& plans, std::vector<KvPoolShape> pools, std::unique_ptr<LayoutPolicy> policy,
                         Scheduler& scheduler)
    : plans_(plans), pools_(std::move(pools)), policy_(std::move(policy)), sched_(scheduler) {
  LOOM_CHECK(int(pools_.size()) == plans_.size(), "pools for ", pools_.size(), " of ", plans_.size(), " plans");
  // Seesaw phases: the decode plan's pools (the resident sequences' home, scheduler.h).
  LOOM_CHECK(sched_.pools().shape() == (sched_.keeps_kv_resident() ? pools_.back() : pools_[0]),
             "the scheduler starts with the first plan's pools");
}

void PlanControl::choose_plan(StepBatch& batch) {
  const int id = policy_->choose(batch);
  LOOM_CHECK(id >= 0 && id < plans_.size(), "policy ", policy_->describe(), " chose plan ", id);
  if (id != current_ && sched_.keeps_kv_resident()) {
    // Seesaw phases: no step of the new plan reads a sequence computed under the old one (prefill
    // steps do not step the decoding sequences, which stay in c_d's placement; decode starts with
    // no prefill left, the prefilled sequences in the tier): nothing migrates (seesaw_tier.h).
    batch.kv_resident = true;
    current_ = id;
  } else if (id != current_) {
    if (!(pools_[size_t(id)] == pools_[size_t(current_)])) sched_.rehome(pools_[size_t(id)], batch);
    if (!plans_.same_placement(current_, id)) {
      batch.kv_seqs = sched_.kv_extents();
      // Sequences coming back from the CPU tier this step are not in any rank's store yet: they
      // arrive under the new plan (RankEngine::step swaps them in after the switch).
      std::erase_if(batch.kv_seqs, [&](const SeqExtent& e) {
        return std::any_of(batch.swap_in.begin(), batch.swap_in.end(), [&](const SeqExtent& s) { return s.id == e.id; });
      });
    }
    current_ = id;
  }
  batch.plan_id = id;
  batch.plan = plans_.name(id);
}

}  // namespace loom
