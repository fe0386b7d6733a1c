// Layout of the paged KV cache arena, shared by everyone who touches K/V floats.
//
// The forward pass owns the storage (two arenas, K and V, allocated by the executor); the
// scheduler only hands out physical block ids. This header is the one agreement on where a
// (layer, physical block, kv head, position in block) lives inside an arena:
//
//   K arena: [n_layers][num_blocks][n_kv_heads][block_size][head_dim]   (V arena: same shape)
//
// Head-major inside a block ([kv_head][block_size][head_dim]), so a TP shard's heads are a
// contiguous range of each block and a (block, head) slice is one contiguous run of
// block_size * head_dim elements (what decode attention reads, what KvMigration packs).
// `n_kv_heads` is the number of KV heads held on THIS rank (after TP/Helix sharding).
// Offsets are in elements (floats for an f32 cache), not bytes.
#pragma once

#include <cstdint>

#include "core/error.h"

namespace loom {

inline constexpr int kDefaultKvBlockSize = 16;  // tokens per KV block (vLLM's default)

struct KvLayout {
  int n_layers = 0;
  int n_kv_heads = 0;  // local to this rank
  int head_dim = 0;
  int block_size = kDefaultKvBlockSize;
  int64_t num_blocks = 0;  // physical blocks in the arena (for the layer stride)

  // Elements of one (layer, block) for K (or for V): [n_kv_heads][block_size][head_dim].
  int64_t floats_per_block() const { return int64_t(n_kv_heads) * block_size * head_dim; }
  // Elements of one (layer, block, head): [block_size][head_dim].
  int64_t floats_per_head_block() const { return int64_t(block_size) * head_dim; }
  // Elements of one layer of the K (or V) arena.
  int64_t floats_per_layer() const { return num_blocks * floats_per_block(); }
  // Elements of the whole K (or V) arena.
  int64_t floats_per_arena() const { return int64_t(n_layers) * floats_per_layer(); }

  // Offset of element [layer][block][head][pos_in_block][0] inside the K (or V) arena.
  int64_t offset(int layer, int64_t block, int head, int pos_in_block) const {
    return ((int64_t(layer) * num_blocks + block) * n_kv_heads + head) * floats_per_head_block() +
           int64_t(pos_in_block) * head_dim;
  }
  // Offset of [block][head][pos_in_block][0] inside one layer (for per-layer arenas).
  int64_t offset_in_layer(int64_t block, int head, int pos_in_block) const {
    return (block * n_kv_heads + head) * floats_per_head_block() + int64_t(pos_in_block) * head_dim;
  }

  // Throws loom::Error naming the field when a dimension is not positive.
  void validate() const {
    if (n_layers <= 0) fail("KvLayout: n_layers must be > 0, found ", n_layers);
    if (n_kv_heads <= 0) fail("KvLayout: n_kv_heads must be > 0, found ", n_kv_heads);
    if (head_dim <= 0) fail("KvLayout: head_dim must be > 0, found ", head_dim);
    if (block_size <= 0) fail("KvLayout: block_size must be > 0, found ", block_size);
    if (num_blocks < 0) fail("KvLayout: num_blocks must be >= 0, found ", num_blocks);
  }
};

}  // namespace loom
