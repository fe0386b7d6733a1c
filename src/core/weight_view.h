// A view of a matrix W[rows = out][cols = in] of any weight dtype. Kernels take these; they never
// own memory. Two layouts:
//  - plain rows (tile_rows == 0): row-major, rows `row_stride` bytes apart. A column block of a
//    row-major matrix (the TP shard of Wo and W_down) is a view with fewer cols and the original
//    stride.
//  - row tiles (tile_rows != 0): the kernels' decode layout (core/weight_tiles.h), tiles of
//    tile_rows rows `tile_stride` bytes apart, each one linear run of bytes. No row() and no
//    sub-views: a tiled matrix is always a whole, owned copy.
// A column block of a K-quant matrix may start inside a 256-weight super-block (TP shards are cut
// in 32-weight sub-blocks, core/dtype.h dtype_split_elems): `data` then points at the super-block
// holding the first column and `col_offset` says how many of its weights come before it.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace loom {

struct WeightView {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0;        // output features (1 for vectors)
  int64_t cols = 0;        // input features (elements per row)
  int64_t row_stride = 0;  // bytes between consecutive rows (plain rows)
  int tile_rows = 0;       // 0: plain rows; else rows per tile (core/weight_tiles.h)
  int64_t tile_stride = 0; // bytes between tiles
  int64_t col_offset = 0;  // weights of the first block before column 0 (K-quant column blocks)

  bool tiled() const { return tile_rows != 0; }

  bool present() const { return data != nullptr; }
  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + r * row_stride; }
  const float* f32() const { return static_cast<const float*>(data); }
  // Bytes of the blocks that hold one row's columns (dtype_row_bytes(dtype, cols) unless the
  // view starts or ends inside a block).
  int64_t row_bytes() const { return dtype_span_bytes(dtype, col_offset, cols); }
  int64_t bytes() const { return rows * row_bytes(); }
  // Plain rows only: rows [r0, r0 + n) as a view (TP column-parallel shard).
  WeightView row_block(int64_t r0, int64_t n) const;
  // Columns [c0, c0 + n) of every row as a view (TP row-parallel shard); c0 and n must be
  // multiples of dtype_split_elems (the block size, except for the K-quants: 32).
  WeightView col_block(int64_t c0, int64_t n) const;
};

}  // namespace loom
