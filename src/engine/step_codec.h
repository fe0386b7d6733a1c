// The step descriptor on the wire: a StepBatch serialised by a replica's rank 0 and broadcast to
// the other ranks of its TP group every step (ARCHITECTURE.md "Ranks and the step loop"), plus
// the stop command that ends a follower's loop.
//
// Contents: command, step index, block size, plan id (PlanSet index), the sequences whose KV the
// ranks drop before the step (finished, cancelled, preempted since the last step), the KV extents
// to migrate when the step switches to a plan of another placement (kv_transfer.h: the handshake
// of Nitsum 3.2.2), and per sequence: id, start, token count, prefill/sample flags, sampling
// parameters, priority, token ids. Not carried: KV block ids (each rank finds its pages by
// sequence id in its KvStore), preempted ids and the step counters (recomputed on decode).
//
// Format (version 3), fixed-width little-endian fields in this order; every rank of a job runs
// the same binary on the same architecture, so host byte order is used and the magic/version
// words catch a mismatch:
//   u32 magic 'LSTP', u32 version, u32 command, i64 step_index, i32 block_size, i32 plan_id,
//   u32 n_released, i64 released[n_released], u32 n_kv, (i64 id, i64 n_tokens)[n_kv],
//   the same for swap_out and for swap_in (Seesaw's CPU KV tier),
//   u32 n_seqs, then per sequence:
//     i64 seq_id, i32 start, i32 num_tokens, u8 flags (1 = prefill, 2 = sample, 4 = logit
//     adjustments, 8 = logprobs; other bits are an error),
//     f32 temperature, f32 top_p, i32 top_k, u64 seed, i32 priority,
//     flag 4: u32 n, (i32 id, f32 bias)[n], f32 presence, f32 frequency, u32 m, (i32 id, i32 count)[m],
//     flag 8: i32 logprobs (0..SamplingParams::kMaxLogprobs),
//     i32 token_ids[num_tokens]
// (Flags 4 and 8 were added within version 3: every rank of a job runs the same binary.)
// A decode of malformed bytes throws loom::Error naming the field (never reads past the end).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/step.h"

namespace loom {

// kHeartbeat: no work; every rank answers it in a barrier (a leader with nothing to run checks that
// its followers still follow, server/serving_engine.h "Health").
enum class StepCommand : uint32_t { kStep = 1, kStop = 2, kHeartbeat = 3 };

// Serialises `batch` (and the sequences to release first) as a kStep descriptor into `out`
// (replacing its contents).
void encode_step(const StepBatch& batch, const std::vector<RequestId>& released, std::vector<uint8_t>& out);
// A kStop descriptor.
std::vector<uint8_t> encode_stop();
// A kHeartbeat descriptor.
std::vector<uint8_t> encode_heartbeat();

struct DecodedStep {
  StepCommand command = StepCommand::kStop;
  StepBatch batch;  // filled for kStep (counters recomputed from the sequences)
  std::vector<RequestId> released;
};
DecodedStep decode_step(const uint8_t* data, std::size_t bytes);

// A step's sampled tokens and logprobs as bytes (a Nitsum pool's workers send them to the control
// plane, cluster/pool.h): u32 n, SampledToken[n], u32 m, then per logprobs entry
// i64 seq_id, i32 token, f32 logprob, u32 k, (i32 id, f32 logprob)[k]. Decoding malformed bytes throws
// loom::Error. The swap completions are not carried.
std::vector<uint8_t> encode_sampled(const StepResult& r);
StepResult decode_sampled(const uint8_t* data, std::size_t bytes);

}  // namespace loom
