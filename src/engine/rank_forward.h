// RankForward: the one layer loop of loom. Every plan, the single-rank engine included, runs a
// step on a rank through this loop over the stages the factory (stage.h) chose for the rank's
// layout (ARCHITECTURE.md; PP is a layer range, as in vLLM's model forward):
//
//   rows  = the rank's token share of the batch (its DP replica's sequences; its SP slice)
//   KV    = pages reserved for the rows' positions, exactly the cells the plan's placement gives
//           the rank (kv/kv_store.h)
//   x     = embedding of its rows (first pipeline stage) | received from pipeline stage pp - 1
//   for l in the stage's layers: x += attn(rmsnorm(x)); x += ffn(rmsnorm(x))
//   last stage: the sampling rows reach the replica's sampler rank (an all-gather over "sp" under
//   SP), which computes rmsnorm + classifier for them; other stages send x to stage pp + 1.
// Under PP the loop above runs once per micro-batch (pipeline_micro_batches: the replica's
// sequences cut into up to PP parts), so the stages work on different micro-batches at once.
// The sampler of a replica is its rank with sp = kvp = tp = 0 on the last stage (sampler()).
//
// Thread-safety: one rank's thread; every rank of the plan calls forward() with the same batch.
#pragma once

#include <memory>
#include <vector>

#include "engine/stage.h"

namespace loom {

class RankForward {
 public:
  // `holds`: this rank's entries of the plan's KV placement (what it stores).
  RankForward(const StageContext& ctx, std::vector<KvEntry> holds);

  // One step. Returns the number of logit rows written to *logits ([rows, vocab], the replica's
  // sampling sequences in batch order) on the sampler rank, 0 elsewhere.
  int forward(const ForwardBatch& batch, std::vector<float>* logits);

  bool sampler() const { return sampler_; }
  const RankLayout& layout() const { return ctx_.layout; }
  const std::vector<KvEntry>& holds() const { return holds_; }
  const AttentionStage& attention() const { return *attn_; }
  const FfnStage& ffn() const { return *ffn_; }
  const StepRows& last_rows() const { return rows_; }

 private:
  // The loop above over one micro-batch; appends its logit rows to *logits.
  int forward_micro(const ForwardBatch& batch, std::vector<float>* logits);

  StageContext ctx_;
  std::vector<KvEntry> holds_;
  std::unique_ptr<AttentionStage> attn_;
  std::unique_ptr<FfnStage> ffn_;
  bool first_stage_ = true, last_stage_ = true, sampler_ = false;
  // On the rank's device: the embedding (first stage), the final norm and the classifier (the
  // sampler; on the CPU the row tiles Model::decode_output() gives).
  DeviceMatrix embed_, out_norm_, output_;
  StepRows rows_;
  DeviceArray<float> x_, xn_, proj_, gathered_, logits_;
  std::vector<CopySpan> spans_;
  std::vector<ForwardSeq> mb_seqs_;  // the replica's sequences of a pipelined step
  ForwardBatch mb_;                  // one micro-batch of them
};

// Micro-batches of a pipelined step (Seesaw 5.1): sequences [0, n) with these token counts, in
// order, cut into min(p, n) contiguous non-empty ranges of about equal tokens.
std::vector<Range> pipeline_micro_batches(const std::vector<int64_t>& tokens, int p);

// Whether `layout` is its replica's sampler (see above).
bool is_sampler(const RankLayout& layout, const Plan& plan);

}  // namespace loom
