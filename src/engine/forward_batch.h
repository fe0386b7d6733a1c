// The rows of one forward step as every rank sees them (built from the step descriptor, or by the
// single-sequence generator): tokens sequence after sequence, and per sequence where its tokens
// sit. KV storage is found by sequence id in the rank's KvStore (kv/kv_store.h), so no block
// table travels with the batch.
#pragma once

#include <cstdint>
#include <vector>

namespace loom {

// One sequence's slice of a step.
struct ForwardSeq {
  int64_t seq_id = 0;
  int64_t start_pos = 0;     // absolute position of its first token in this step
  int n_tokens = 0;          // tokens of this sequence in the step (consecutive in the batch)
  bool want_logits = false;  // compute logits for its last token of the step
};

struct ForwardBatch {
  std::vector<int32_t> tokens;  // [T] token ids, sequence after sequence
  std::vector<ForwardSeq> seqs;
};

}  // namespace loom
