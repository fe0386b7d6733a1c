// The step descriptor on the wire: a StepBatch serialised by a replica's rank 0 and broadcast to
// the other ranks of its TP group every step (ARCHITECTURE.md "Ranks and the step loop"), plus
// the stop command that ends a follower's loop.
//
// Contents: command, step index, block size, plan name, and per sequence: id, start, token count,
// prefill/sample flags, sampling parameters, priority, token ids, KV block ids. Not carried
// (followers do not need them): preempted ids and the step counters (recomputed on decode).
//
// Format (version 1), fixed-width little-endian fields in this order; every rank of a job runs
// the same binary on the same architecture, so host byte order is used and the magic/version
// words catch a mismatch:
//   u32 magic 'LSTP', u32 version, u32 command, i64 step_index, i32 block_size, u32 plan_len,
//   plan bytes, u32 n_seqs, then per sequence:
//     i64 seq_id, i32 start, i32 num_tokens, u8 flags (1 = prefill, 2 = sample),
//     f32 temperature, f32 top_p, i32 top_k, u64 seed, i32 priority, u32 n_blocks,
//     i32 token_ids[num_tokens], i32 block_ids[n_blocks]
// A decode of malformed bytes throws loom::Error naming the field (never reads past the end).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/step.h"

namespace loom {

enum class StepCommand : uint32_t { kStep = 1, kStop = 2 };

// Serialises `batch` as a kStep descriptor into `out` (replacing its contents).
void encode_step(const StepBatch& batch, std::vector<uint8_t>& out);
// A kStop descriptor.
std::vector<uint8_t> encode_stop();

struct DecodedStep {
  StepCommand command = StepCommand::kStop;
  StepBatch batch;  // filled for kStep (counters recomputed from the sequences)
};
DecodedStep decode_step(const uint8_t* data, std::size_t bytes);

}  // namespace loom
