#include "engine/step_codec.h"

#include <cstring>
#include <type_traits>
#include <string>

#include "core/byte_io.h"
#include "core/error.h"

namespace loom {

namespace {

constexpr uint32_t kMagic = 0x5054534c;  // "LSTP"
constexpr uint32_t kVersion = 4;  // 3: Seesaw swap-out / swap-in extents; 4: kv_resident

void put_header(ByteWriter& w, StepCommand c) {
  w.put<uint32_t>(kMagic);
  w.put<uint32_t>(kVersion);
  w.put<uint32_t>(uint32_t(c));
}

}  // namespace

void encode_step(const StepBatch& b, const std::vector<RequestId>& released, std::vector<uint8_t>& out) {
  ByteWriter w(out);
  put_header(w, StepCommand::kStep);
  w.put<int64_t>(b.step_index);
  w.put<int32_t>(b.block_size);
  w.put<int32_t>(b.plan_id);
  w.put<uint32_t>(uint32_t(released.size()));
  w.put_bytes(released.data(), released.size() * sizeof(RequestId));
  w.put<uint8_t>(b.kv_resident ? 1 : 0);
  for (const std::vector<SeqExtent>* list : {&b.kv_seqs, &b.swap_out, &b.swap_in}) {
    w.put<uint32_t>(uint32_t(list->size()));
    for (const SeqExtent& e : *list) {
      w.put<int64_t>(e.id);
      w.put<int64_t>(e.n_tokens);
    }
  }
  w.put<uint32_t>(uint32_t(b.seqs.size()));
  for (const ScheduledSeq& s : b.seqs) {
    LOOM_CHECK(int(s.token_ids.size()) == s.num_tokens, "sequence ", s.seq_id, ": ", s.token_ids.size(),
               " token ids for ", s.num_tokens, " tokens");
    w.put<int64_t>(s.seq_id);
    w.put<int32_t>(s.start);
    w.put<int32_t>(s.num_tokens);
    const bool adjust = s.sampling.adjusts_logits();
    const bool logprobs = s.sampling.logprobs >= 0;
    w.put<uint8_t>(uint8_t((s.is_prefill ? 1 : 0) | (s.sample ? 2 : 0) | (adjust ? 4 : 0) | (logprobs ? 8 : 0)));
    w.put<float>(s.sampling.temperature);
    w.put<float>(s.sampling.top_p);
    w.put<int32_t>(s.sampling.top_k);
    w.put<uint64_t>(s.sampling.seed);
    w.put<int32_t>(s.priority);
    if (adjust) {  // flag 4: logit bias, penalties and the output counts they need
      w.put<uint32_t>(uint32_t(s.sampling.logit_bias.size()));
      for (const auto& [id, bias] : s.sampling.logit_bias) {
        w.put<int32_t>(id);
        w.put<float>(bias);
      }
      w.put<float>(s.sampling.presence_penalty);
      w.put<float>(s.sampling.frequency_penalty);
      w.put<uint32_t>(uint32_t(s.output_counts.size()));
      for (const auto& [id, count] : s.output_counts) {
        w.put<int32_t>(id);
        w.put<int32_t>(count);
      }
    }
    if (logprobs) w.put<int32_t>(s.sampling.logprobs);  // flag 8
    w.put_bytes(s.token_ids.data(), s.token_ids.size() * sizeof(TokenId));
  }
}

std::vector<uint8_t> encode_stop() {
  std::vector<uint8_t> out;
  ByteWriter w(out);
  put_header(w, StepCommand::kStop);
  return out;
}

std::vector<uint8_t> encode_heartbeat() {
  std::vector<uint8_t> out;
  ByteWriter w(out);
  put_header(w, StepCommand::kHeartbeat);
  return out;
}

DecodedStep decode_step(const uint8_t* data, size_t bytes) {
  static_assert(sizeof(TokenId) == 4 && sizeof(RequestId) == 8, "wire format uses 32-bit token ids, 64-bit sequence ids");
  ByteReader r(data, bytes, "step descriptor");
  const uint32_t magic = r.get<uint32_t>("magic");
  if (magic != kMagic) fail("step descriptor: bad magic ", magic, " (not a loom step descriptor)");
  const uint32_t version = r.get<uint32_t>("version");
  if (version != kVersion) fail("step descriptor version ", version, ", this build reads ", kVersion);
  const uint32_t cmd = r.get<uint32_t>("command");
  DecodedStep d;
  if (cmd == uint32_t(StepCommand::kStop) || cmd == uint32_t(StepCommand::kHeartbeat)) {
    d.command = StepCommand(cmd);
    return d;
  }
  if (cmd != uint32_t(StepCommand::kStep)) fail("step descriptor: unknown command ", cmd);
  d.command = StepCommand::kStep;
  StepBatch& b = d.batch;
  b.step_index = r.get<int64_t>("step_index");
  b.block_size = r.get<int32_t>("block_size");
  b.plan_id = r.get<int32_t>("plan id");
  if (b.plan_id < 0) fail("step descriptor: plan id ", b.plan_id);
  const uint32_t n_rel = r.get<uint32_t>("released count");
  if (uint64_t(n_rel) * 8 > r.left()) fail("step descriptor: ", n_rel, " released ids in ", r.left(), " bytes");
  d.released.resize(n_rel);
  r.get_bytes(d.released.data(), d.released.size() * 8, "released ids");
  const uint8_t resident = r.get<uint8_t>("kv_resident");
  if (resident > 1) fail("step descriptor: kv_resident flag ", int(resident));
  b.kv_resident = resident == 1;
  for (std::vector<SeqExtent>* list : {&b.kv_seqs, &b.swap_out, &b.swap_in}) {
    const uint32_t n_kv = r.get<uint32_t>("kv sequence count");
    if (uint64_t(n_kv) * 16 > r.left()) fail("step descriptor: ", n_kv, " KV extents in ", r.left(), " bytes");
    list->resize(n_kv);
    for (SeqExtent& e : *list) {
      e.id = r.get<int64_t>("kv sequence id");
      e.n_tokens = r.get<int64_t>("kv sequence length");
      if (e.n_tokens < 0) fail("step descriptor: KV extent of sequence ", e.id, " has ", e.n_tokens, " tokens");
    }
  }
  const uint32_t n_seqs = r.get<uint32_t>("sequence count");
  if (n_seqs > r.left()) fail("step descriptor: ", n_seqs, " sequences in ", r.left(), " bytes");
  b.seqs.resize(n_seqs);
  for (ScheduledSeq& s : b.seqs) {
    s.seq_id = r.get<int64_t>("seq_id");
    s.start = r.get<int32_t>("start");
    s.num_tokens = r.get<int32_t>("num_tokens");
    const uint8_t flags = r.get<uint8_t>("flags");
    if (flags & ~0xf) fail("step descriptor: sequence ", s.seq_id, " has unknown flags ", int(flags));
    s.is_prefill = flags & 1;
    s.sample = flags & 2;
    s.sampling.temperature = r.get<float>("temperature");
    s.sampling.top_p = r.get<float>("top_p");
    s.sampling.top_k = r.get<int32_t>("top_k");
    s.sampling.seed = r.get<uint64_t>("seed");
    s.priority = r.get<int32_t>("priority");
    if (flags & 4) {
      const uint32_t n_bias = r.get<uint32_t>("logit bias count");
      if (uint64_t(n_bias) * 8 > r.left())
        fail("step descriptor: sequence ", s.seq_id, " lists ", n_bias, " logit biases in ", r.left(), " bytes");
      s.sampling.logit_bias.resize(n_bias);
      for (auto& [id, bias] : s.sampling.logit_bias) {
        id = r.get<int32_t>("logit bias id");
        bias = r.get<float>("logit bias");
      }
      s.sampling.presence_penalty = r.get<float>("presence penalty");
      s.sampling.frequency_penalty = r.get<float>("frequency penalty");
      const uint32_t n_counts = r.get<uint32_t>("output count entries");
      if (uint64_t(n_counts) * 8 > r.left())
        fail("step descriptor: sequence ", s.seq_id, " lists ", n_counts, " output counts in ", r.left(), " bytes");
      s.output_counts.resize(n_counts);
      for (auto& [id, count] : s.output_counts) {
        id = r.get<int32_t>("output count id");
        count = r.get<int32_t>("output count");
      }
    }
    if (flags & 8) {
      s.sampling.logprobs = r.get<int32_t>("logprobs");
      if (s.sampling.logprobs < 0 || s.sampling.logprobs > SamplingParams::kMaxLogprobs)
        fail("step descriptor: sequence ", s.seq_id, " asks for ", s.sampling.logprobs, " logprobs (0..",
             SamplingParams::kMaxLogprobs, ")");
    }
    if (s.start < 0 || s.num_tokens < 1)
      fail("step descriptor: sequence ", s.seq_id, " has start ", s.start, " and ", s.num_tokens, " tokens");
    if (int64_t(s.start) + s.num_tokens > INT32_MAX)  // context_len() must not overflow
      fail("step descriptor: sequence ", s.seq_id, " ends at position ", int64_t(s.start) + s.num_tokens,
           ", past 2^31-1");
    if (uint64_t(s.num_tokens) * 4 > r.left())
      fail("step descriptor: sequence ", s.seq_id, " lists ", s.num_tokens, " tokens in ", r.left(), " bytes");
    s.token_ids.resize(size_t(s.num_tokens));
    r.get_bytes(s.token_ids.data(), s.token_ids.size() * 4, "token ids");
    b.num_tokens += s.num_tokens;
    (s.is_prefill ? b.num_prefill_tokens : b.num_decode_tokens) += s.num_tokens;
    b.num_sampled += s.sample;
  }
  if (r.left() != 0) fail("step descriptor: ", r.left(), " bytes after the last sequence");
  return d;
}

std::vector<uint8_t> encode_sampled(const StepResult& res) {
  static_assert(std::is_trivially_copyable_v<SampledToken>);
  std::vector<uint8_t> out;
  ByteWriter w(out);
  w.put<uint32_t>(uint32_t(res.sampled.size()));
  w.put_bytes(res.sampled.data(), res.sampled.size() * sizeof(SampledToken));
  w.put<uint32_t>(uint32_t(res.logprobs.size()));
  for (const TokenLogprobs& l : res.logprobs) {
    w.put<int64_t>(l.seq_id);
    w.put<int32_t>(l.token);
    w.put<float>(l.logprob);
    w.put<uint32_t>(uint32_t(l.top.size()));
    for (const auto& [id, lp] : l.top) {
      w.put<int32_t>(id);
      w.put<float>(lp);
    }
  }
  return out;
}

StepResult decode_sampled(const uint8_t* data, size_t bytes) {
  ByteReader r(data, bytes, "sampled tokens");
  StepResult res;
  const uint32_t n = r.get<uint32_t>("token count");
  if (uint64_t(n) * sizeof(SampledToken) > r.left()) fail("sampled tokens: ", n, " tokens in ", r.left(), " bytes");
  res.sampled.resize(n);
  r.get_bytes(res.sampled.data(), res.sampled.size() * sizeof(SampledToken), "tokens");
  const uint32_t m = r.get<uint32_t>("logprobs count");
  if (uint64_t(m) * 20 > r.left()) fail("sampled tokens: ", m, " logprobs entries in ", r.left(), " bytes");
  res.logprobs.resize(m);
  for (TokenLogprobs& l : res.logprobs) {
    l.seq_id = r.get<int64_t>("logprobs seq_id");
    l.token = r.get<int32_t>("logprobs token");
    l.logprob = r.get<float>("logprob");
    const uint32_t k = r.get<uint32_t>("top count");
    if (uint64_t(k) * 8 > r.left()) fail("sampled tokens: ", k, " top logprobs in ", r.left(), " bytes");
    l.top.resize(k);
    for (auto& [id, lp] : l.top) {
      id = r.get<int32_t>("top id");
      lp = r.get<float>("top logprob");
    }
  }
  if (r.left() != 0) fail("sampled tokens: ", r.left(), " bytes after the last entry");
  return res;
}

}  // namespace loom
