#include "core/weight_tiles.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/sysmem.h"

namespace loom {

bool can_tile(const WeightView& w) {
  return !w.tiled() && w.present() && w.rows > 0 && w.cols > 0 && w.col_offset == 0 &&
         w.cols % tile_chunk_cols(w.dtype) == 0;
}

int64_t tiled_bytes(const WeightView& w) {
  return (w.rows + kTileRows - 1) / kTileRows * kTileRows * dtype_row_bytes(w.dtype, w.cols);
}

namespace {

#include "core/dtype_blocks_impl.h"

// Byte offsets, inside a tile, of lane l's piece of chunk c: for q8_0 the scale of block b of the
// chunk and its 32 int8; otherwise the lane's 64 bytes.
int64_t chunk_at(DType t, int64_t c) { return c * tile_chunk_bytes(t); }
int64_t q8_scale_at(int64_t c, int b, int l) { return chunk_at(DType::Q8_0, c) + 2 * (b * kTileRows + l); }
int64_t q8_qs_at(int64_t c, int b, int l) { return chunk_at(DType::Q8_0, c) + 64 + 32 * (b * kTileRows + l); }

// Calls f(offset in the tile, offset in the plain row, bytes) for every piece of lane l: the
// pieces of one row in the two layouts.
template <class F>
void for_each_piece(DType t, int64_t cols, int l, F&& f) {
  const int64_t chunks = cols / tile_chunk_cols(t);
  for (int64_t c = 0; c < chunks; ++c) {
    if (dtype_is_quantized(t) && t != DType::Q8_0) {  // the other block types: dtype_blocks_impl.h
      const int64_t bb = dtype_block_bytes(t);
      qb_tile_pieces(t, l, [&](int at_chunk, int at_block, int n) { f(chunk_at(t, c) + at_chunk, c * bb + at_block, size_t(n)); });
    } else if (t == DType::Q8_0) {
      for (int b = 0; b < kTileQ8Blocks; ++b) {
        const int64_t blk = (c * kTileQ8Blocks + b) * int64_t(sizeof(BlockQ8_0));
        f(q8_scale_at(c, b, l), blk + int64_t(offsetof(BlockQ8_0, d)), sizeof(uint16_t));
        f(q8_qs_at(c, b, l), blk + int64_t(offsetof(BlockQ8_0, qs)), size_t(kQ8BlockSize));
      }
    } else if (t == DType::BF16) {  // word j: columns j (low half) and j + 16 (high half)
      for (int j = 0; j < 16; ++j) {
        f(chunk_at(t, c) + 64 * l + 4 * j, c * 64 + 2 * j, size_t(2));
        f(chunk_at(t, c) + 64 * l + 4 * j + 2, c * 64 + 2 * (j + 16), size_t(2));
      }
    } else {
      f(chunk_at(t, c) + 64 * l, c * 64, size_t(64));
    }
  }
}

}  // namespace

WeightView tile_weights(const WeightView& w, void* dst, ThreadPool* pool) {
  LOOM_CHECK(can_tile(w), "cannot tile a ", w.rows, "x", w.cols, " ", dtype_name(w.dtype), " matrix (",
             w.tiled() ? "already tiled" : "columns not a multiple of the chunk", ")");
  WeightView out = w;
  out.data = dst;
  out.row_stride = 0;
  out.tile_rows = kTileRows;
  out.tile_stride = kTileRows * dtype_row_bytes(w.dtype, w.cols);
  auto* d = static_cast<uint8_t*>(dst);
  const int64_t tiles = (w.rows + kTileRows - 1) / kTileRows;
  auto copy_tiles = [&](int64_t t0, int64_t t1) {
    // Padding rows of the last tile: zero weights (q8_0: zero scales too).
    if (t1 == tiles && w.rows % kTileRows != 0)
      std::memset(d + (tiles - 1) * out.tile_stride, 0, size_t(out.tile_stride));
    for (int64_t r = t0 * kTileRows; r < std::min(w.rows, t1 * kTileRows); ++r) {
      uint8_t* tile = d + r / kTileRows * out.tile_stride;
      const uint8_t* row = w.row(r);
      for_each_piece(w.dtype, w.cols, int(r % kTileRows),
                     [&](int64_t at_tile, int64_t at_row, size_t n) { std::memcpy(tile + at_tile, row + at_row, n); });
    }
  };
  if (pool && pool->size() > 1 && tiles > 1) {
    pool->run([&](int ith, int nth) {
      const auto [t0, t1] = ThreadPool::split(tiles, ith, nth);
      if (t0 < t1) copy_tiles(t0, t1);
    });
  } else {
    copy_tiles(0, tiles);
  }
  return out;
}

bool weight_tiles_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("LOOM_WEIGHT_TILES");
    return !(e && std::string(e) == "0");
  }();
  return on;
}

bool decode_copy_affordable(int64_t bytes) {
  if (!weight_tiles_enabled()) return false;
  const std::optional<int64_t> avail = mem_available();
  return avail && bytes <= *avail / 2;
}

void read_weight_row(const WeightView& w, int64_t r, void* dst) {
  LOOM_CHECK(r >= 0 && r < w.rows, "row ", r, " of ", w.rows);
  if (!w.tiled()) {
    std::memcpy(dst, w.row(r), size_t(w.row_bytes()));
    return;
  }
  LOOM_CHECK(w.tile_rows == kTileRows, "tile_rows=", w.tile_rows);
  const uint8_t* tile = static_cast<const uint8_t*>(w.data) + r / kTileRows * w.tile_stride;
  auto* row = static_cast<uint8_t*>(dst);
  for_each_piece(w.dtype, w.cols, int(r % kTileRows),
                 [&](int64_t at_tile, int64_t at_row, size_t n) { std::memcpy(row + at_row, tile + at_tile, n); });
}

}  // namespace loom
