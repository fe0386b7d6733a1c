// The decode layout of weight matrices: row tiles.
//
// Decode (one token) streams every weight once, and a gemv reads kTileRows rows side by side to
// reuse each x vector. In plain row-major storage that is kTileRows interleaved streams, each as
// short as one row (2048 bf16 columns = 4 KiB): measured on this project's 2-core machine, 8
// interleaved 2176-byte streams read at 26 GB/s against 35 GB/s for one linear stream. Row tiles
// store the kTileRows rows of a tile as one linear run, so a gemv thread reads one stream.
//
// Tile t holds rows [t*kTileRows, (t+1)*kTileRows) (the last tile of a matrix whose rows are not
// a multiple of kTileRows is padded with zero rows). Its columns come in chunks of
// tile_chunk_cols(dtype) columns, chunk c at tile + c * tile_chunk_bytes(dtype):
//  - f32, f16, bf16: 64 bytes per row (16 or 32 columns), row lane l at chunk + 64*l. f32 and f16
//    keep the columns in order; bf16 stores 16 32-bit words of pairs: word j holds column j in its
//    low half and column j + 16 in its high half, so one 64-byte load becomes the 16 + 16 floats
//    with one shift and one and (a plain bf16 row needs a widening shuffle per 16 columns).
//  - q8_0: 4 blocks (128 columns): first the 4 x kTileRows f16 scales, scale of block b and lane
//    l at chunk + 2*(b*kTileRows + l) (64 bytes), then the 4 x kTileRows blocks of 32 int8, at
//    chunk + 64 + 32*(b*kTileRows + l) (1024 bytes).
//  - the other block types (q4_0, q4_1, q5_0, q4_k, q5_k, q6_k): one block of each of the 8 rows
//    per chunk, rearranged so that a 32-byte load holds 4 bytes of each row
//    (core/dtype_blocks_impl.h states each type's layout).
// Values are the plain encoding's bytes, moved: a tiled copy holds exactly the same weights.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "core/weight_view.h"

namespace loom {

inline constexpr int kTileRows = 8;
inline constexpr int kTileQ8Blocks = 4;  // q8_0 blocks per chunk

// Columns and bytes (of all kTileRows rows) per chunk.
constexpr int64_t tile_chunk_cols(DType t) {
  return t == DType::Q8_0 ? int64_t(kTileQ8Blocks) * kQ8BlockSize
         : dtype_is_quantized(t) ? dtype_block_elems(t) : 64 / dtype_block_bytes(t);
}
constexpr int64_t tile_chunk_bytes(DType t) { return kTileRows * dtype_row_bytes(t, tile_chunk_cols(t)); }

// Whether `w` can be tiled: plain rows, at least one row, cols a non-zero multiple of the chunk.
bool can_tile(const WeightView& w);
// Bytes a tiled copy of `w` takes (whole tiles, so at least rows * row bytes).
int64_t tiled_bytes(const WeightView& w);
// Writes the tiled copy of `w` (can_tile(w)) into dst (tiled_bytes(w) bytes) and returns its view.
// With a pool, its threads copy disjoint tiles (first touch of fresh memory dominates the cost:
// the kernel zeroes every page on its first write).
WeightView tile_weights(const WeightView& w, void* dst, ThreadPool* pool = nullptr);
// Whether engines tile their weights (default yes; LOOM_WEIGHT_TILES=0 keeps plain rows, for
// comparisons). Read once per process.
bool weight_tiles_enabled();

// Whether an engine should make a decode copy of `bytes` (instead of computing on the
// memory-mapped rows): weight_tiles_enabled() and the copy takes at most half of MemAvailable
// (a model close to the machine's memory keeps running from the page cache, as before).
bool decode_copy_affordable(int64_t bytes);

// Row r of a tiled or plain matrix in the plain encoding (w.row_bytes() bytes: the blocks that hold
// the row's columns, from col_offset).
void read_weight_row(const WeightView& w, int64_t r, void* dst);

}  // namespace loom
