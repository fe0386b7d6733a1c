#include "model/weights.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "core/buffer.h"
#include "core/error.h"
#include "core/weight_tiles.h"

namespace loom {

struct DecodeWeights {
  std::mutex mu;
  WeightView source;  // the `output` the copy was made from
  WeightView tiled;
  AlignedBuffer<uint8_t> bytes;
  bool declined = false;  // too big to copy: `output` is used as it is
};

std::shared_ptr<DecodeWeights> make_decode_weights() { return std::make_shared<DecodeWeights>(); }

const WeightView& Model::decode_output(ThreadPool* pool) const {
  if (!weight_tiles_enabled() || !can_tile(output)) return output;
  std::lock_guard<std::mutex> lock(decode_.p->mu);
  if (decode_.p->declined) return output;
  const WeightView& s = decode_.p->source;
  // Made again if `output` was pointed elsewhere since.
  if (!(s.data == output.data && s.dtype == output.dtype && s.rows == output.rows && s.cols == output.cols &&
        s.row_stride == output.row_stride && decode_.p->tiled.present())) {
    if (!decode_copy_affordable(tiled_bytes(output))) {  // near the machine's memory: no copy
      decode_.p->declined = true;
      return output;
    }
    decode_.p->bytes.resize(size_t(tiled_bytes(output)));
    decode_.p->tiled = tile_weights(output, decode_.p->bytes.data(), pool);
    decode_.p->source = output;
  }
  return decode_.p->tiled;
}

WeightView Model::own_f32(const float* values, int64_t n) {
  auto buf = std::shared_ptr<float[]>(new float[size_t(n)]);
  std::memcpy(buf.get(), values, size_t(n) * sizeof(float));
  storage.push_back(std::shared_ptr<const void>(buf, buf.get()));
  WeightView v;
  v.data = buf.get();
  v.dtype = DType::F32;
  v.rows = 1;
  v.cols = n;
  v.row_stride = n * 4;
  return v;
}

int weight_block_elems(const Model& m) {
  int b = 1;
  for (const LayerWeights& L : m.layers)
    for (const WeightView* w : L.matrices()) b = std::max(b, dtype_split_elems(w->dtype));
  return b;
}

std::vector<std::pair<std::string, WeightView>> Model::tensors() const {
  std::vector<std::pair<std::string, WeightView>> out;
  out.emplace_back("token_embd", tok_embd);
  for (size_t l = 0; l < layers.size(); ++l) {
    const auto& L = layers[l];
    const std::string p = cat("blk.", l, ".");
    const std::pair<const char*, const WeightView*> items[] = {
        {"attn_norm", &L.attn_norm}, {"attn_q", &L.wq},       {"attn_k", &L.wk},
        {"attn_v", &L.wv},           {"attn_output", &L.wo},  {"attn_q.bias", &L.bq},
        {"attn_k.bias", &L.bk},      {"attn_v.bias", &L.bv},  {"ffn_norm", &L.ffn_norm},
        {"ffn_gate", &L.w_gate},     {"ffn_up", &L.w_up},     {"ffn_down", &L.w_down}};
    for (auto& [n, w] : items)
      if (w->present()) out.emplace_back(p + n, *w);
  }
  out.emplace_back("output_norm", out_norm);
  if (output.present() && output.data != tok_embd.data) out.emplace_back("output", output);
  return out;
}

WeightView make_view(const std::string& name, const void* bytes, int64_t available_bytes, DType dtype,
                     int64_t rows, int64_t cols) {
  const int be = dtype_block_elems(dtype);
  if (cols % be != 0)
    fail("tensor '", name, "': ", cols, " columns is not a multiple of the ", dtype_name(dtype), " block size ",
         be);
  const int64_t row_bytes = dtype_row_bytes(dtype, cols);
  const int64_t need = rows * row_bytes;
  if (available_bytes != need)
    fail("tensor '", name, "': expected ", need, " bytes for [", rows, ", ", cols, "] ", dtype_name(dtype),
         ", found ", available_bytes);
  WeightView v;
  v.data = bytes;
  v.dtype = dtype;
  v.rows = rows;
  v.cols = cols;
  v.row_stride = row_bytes;
  return v;
}

}  // namespace loom
