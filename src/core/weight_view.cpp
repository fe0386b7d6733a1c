#include "core/weight_view.h"

#include "core/error.h"

namespace loom {

WeightView WeightView::row_block(int64_t r0, int64_t n) const {
  LOOM_CHECK(!tiled(), "row_block of a row-tiled matrix");
  LOOM_CHECK(r0 >= 0 && n >= 0 && r0 + n <= rows, "rows ", r0, "+", n, " of ", rows);
  WeightView v = *this;
  v.data = row(r0);
  v.rows = n;
  return v;
}

WeightView WeightView::col_block(int64_t c0, int64_t n) const {
  LOOM_CHECK(!tiled(), "col_block of a row-tiled matrix");
  const int se = dtype_split_elems(dtype);
  LOOM_CHECK(c0 >= 0 && n >= 0 && c0 + n <= cols && c0 % se == 0 && n % se == 0, "cols ", c0, "+", n, " of ",
             cols, " (", dtype_name(dtype), " splits in ", se, ")");
  const int64_t be = dtype_block_elems(dtype), at = col_offset + c0;
  WeightView v = *this;
  v.data = static_cast<const uint8_t*>(data) + dtype_row_bytes(dtype, at / be * be);
  v.col_offset = at % be;
  v.cols = n;
  return v;
}

}  // namespace loom
