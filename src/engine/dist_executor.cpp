#include "engine/dist_executor.h"

#include <algorithm>
#include <cstring>
#include <exception>

#include "core/error.h"
#include "engine/step_codec.h"

namespace loom {

// Broadcast of one descriptor from group rank 0: the inline buffer carries [u64 size][payload
// prefix]; the rest, if any, follows in a second broadcast. Every rank calls it; on rank 0 `wire`
// is the payload, on the others it receives it.
void broadcast_descriptor(Communicator& group, std::vector<uint8_t>& wire, std::vector<uint8_t>& inl) {
  constexpr size_t kHead = sizeof(uint64_t), kRoom = DistExecutor::kInlineBytes - kHead;
  inl.resize(DistExecutor::kInlineBytes);
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

void StepLeader::send(const StepBatch& batch) {
  if (group_.size() == 1) return;
  encode_step(batch, wire_);
  broadcast_descriptor(group_, wire_, inline_);
}

void StepLeader::stop() {
  if (stopped_ || broken_) return;
  stopped_ = true;
  if (group_.size() == 1) return;
  wire_ = encode_stop();
  broadcast_descriptor(group_, wire_, inline_);
}

DistExecutor::DistExecutor(Communicator& group, Transformer& model, KvStorage& kv)
    : leader_(group), kernel_(model, kv) {
  LOOM_CHECK(group.rank() == 0, "the DistExecutor runs on rank 0 of its group, not ", group.rank());
}

StepResult DistExecutor::execute(const StepBatch& batch) {
  // The kernel executor runs this rank's shard (the Transformer all-reduces with the followers),
  // computes the sampled rows' logits and samples.
  return leader_.run(batch, [&] { return kernel_.execute(batch); });
}

int64_t follow_steps(Communicator& group, const KvStorage& kv, bool with_logits,
                     const std::function<void(const StepBatch&)>& before_step,
                     const std::function<void(const StepBatch&, const ForwardBatch&)>& forward) {
  LOOM_CHECK(group.rank() != 0, "rank 0 of a group leads; it does not follow");
  std::vector<uint8_t> wire, inl;
  ForwardBatch fb;
  int64_t steps = 0;
  while (true) {
    broadcast_descriptor(group, wire, inl);
    DecodedStep d = decode_step(wire.data(), wire.size());
    if (d.command == StepCommand::kStop) return steps;
    if (d.batch.block_size != kv.layout.block_size)
      fail("step ", d.batch.step_index, " uses KV blocks of ", d.batch.block_size, " tokens, this rank's cache ",
           kv.layout.block_size);
    if (before_step) before_step(d.batch);
    to_forward_batch(d.batch, int(kv.layout.num_blocks), with_logits, fb);
    forward(d.batch, fb);
    ++steps;
  }
}

int64_t run_follower(Communicator& group, Transformer& model, KvStorage& kv,
                     const std::function<void(const StepBatch&)>& before_step) {
  std::vector<float> logits;
  return follow_steps(group, kv, false, before_step,
                      [&](const StepBatch&, const ForwardBatch& fb) { model.forward(fb, kv, logits); });
}

}  // namespace loom
