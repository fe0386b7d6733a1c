// The single-rank reference every layout test compares against (header-only: included by the
// test areas that link the engine).
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "engine/generator.h"
#include "engine/transformer.h"

namespace loom::test {

// Greedy tokens of one prompt through the single-sequence, single-rank path (generator.h).
inline std::vector<int32_t> alone(const std::shared_ptr<Model>& m, const std::vector<int32_t>& prompt, int n,
                                  std::vector<int32_t> stop_ids = {}) {
  ThreadPool pool(1);
  Transformer tf(m, ShardSpec::full(m->config), &pool);
  GenerateOptions o;
  o.max_new_tokens = n;
  o.stop_ids = std::move(stop_ids);
  return generate(tf, prompt, o).tokens;
}

// Single-rank logits after `context`: top-1 minus top-2 (how close a greedy choice was).
inline double top2_gap(const std::shared_ptr<Model>& m, const std::vector<int32_t>& context) {
  ThreadPool pool(1);
  Transformer tf(m, ShardSpec::full(m->config), &pool);
  KvLayout lay;
  lay.n_layers = m->config.n_layers;
  lay.n_kv_heads = m->config.n_kv_heads;
  lay.head_dim = m->config.head_dim;
  lay.block_size = 16;
  lay.num_blocks = int((context.size() + 15) / 16);
  KvStorage kv(lay);
  std::vector<int32_t> blocks(size_t(lay.num_blocks));
  for (int i = 0; i < lay.num_blocks; ++i) blocks[size_t(i)] = i;
  ForwardBatch fb;
  fb.tokens = context;
  fb.seqs.push_back(ForwardSeq{0, int(context.size()), blocks.data(), int(lay.num_blocks), true});
  std::vector<float> logits;
  tf.forward(fb, kv, logits);
  std::partial_sort(logits.begin(), logits.begin() + 2, logits.end(), std::greater<float>());
  return double(logits[0]) - double(logits[1]);
}

}  // namespace loom::test
