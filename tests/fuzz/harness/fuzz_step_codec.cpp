// The step descriptor codec (engine/step_codec.h): decoding any bytes either fails with
// loom::Error or yields a batch that re-encodes to a descriptor decoding to the same batch.
#include <cstring>

#include "engine/step_codec.h"
#include "fuzz_util.h"

namespace {

bool same(const loom::DecodedStep& a, const loom::DecodedStep& b) {
  if (a.command != b.command || a.released != b.released) return false;
  const loom::StepBatch &x = a.batch, &y = b.batch;
  if (x.step_index != y.step_index || x.block_size != y.block_size || x.plan_id != y.plan_id ||
      x.seqs.size() != y.seqs.size() || x.kv_seqs.size() != y.kv_seqs.size() || x.num_tokens != y.num_tokens ||
      x.num_prefill_tokens != y.num_prefill_tokens || x.num_decode_tokens != y.num_decode_tokens ||
      x.num_sampled != y.num_sampled)
    return false;
  for (size_t i = 0; i < x.kv_seqs.size(); ++i)
    if (x.kv_seqs[i].id != y.kv_seqs[i].id || x.kv_seqs[i].n_tokens != y.kv_seqs[i].n_tokens) return false;
  for (size_t i = 0; i < x.seqs.size(); ++i) {
    const auto &s = x.seqs[i], &t = y.seqs[i];
    if (s.seq_id != t.seq_id || s.start != t.start || s.num_tokens != t.num_tokens || s.is_prefill != t.is_prefill ||
        s.sample != t.sample || s.token_ids != t.token_ids || s.priority != t.priority ||
        std::memcmp(&s.sampling.temperature, &t.sampling.temperature, 4) != 0 ||
        std::memcmp(&s.sampling.top_p, &t.sampling.top_p, 4) != 0 || s.sampling.top_k != t.sampling.top_k ||
        s.sampling.seed != t.sampling.seed || s.sampling.logprobs != t.sampling.logprobs)
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::expect_clean([&] {
    const loom::DecodedStep d = loom::decode_step(data, size);
    if (d.command != loom::StepCommand::kStep) return;
    std::vector<uint8_t> again;
    loom::encode_step(d.batch, d.released, again);
    const loom::DecodedStep d2 = loom::decode_step(again.data(), again.size());
    if (!same(d, d2)) {
      std::fprintf(stderr, "fuzz: step descriptor does not round-trip\n");
      std::abort();
    }
  });
  return 0;
}
