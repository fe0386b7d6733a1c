// Dequantization at any address (issue 19, defect 6): mapped safetensors data may start at an
// odd byte, which the format allows. Exactness: pure data movement, so the values from an odd
// address must have the same bits as from an aligned copy of the same bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"

namespace loom {
namespace {

TEST(DtypeUnaligned, DequantizeFromOddAddressesGivesTheSameBits) {
  const int64_t n = 97;  // awkward length: no vector-width multiple
  Rng rng(5);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = rng.uniform() * 8.0f - 4.0f;
  for (DType t : {DType::F16, DType::BF16, DType::Q8_0, DType::F32}) {
    const int64_t m = t == DType::Q8_0 ? 96 : n;
    const size_t bytes = size_t(dtype_row_bytes(t, m));
    std::vector<uint8_t> aligned(bytes + 8), shifted(bytes + 8);
    quantize_row(t, x.data(), aligned.data(), m);
    for (size_t offset : {size_t(1), size_t(3)}) {
      std::memcpy(shifted.data() + offset, aligned.data(), bytes);
      std::vector<float> a(static_cast<size_t>(m)), b(static_cast<size_t>(m));
      dequantize_row(t, aligned.data(), a.data(), m);
      dequantize_row(t, shifted.data() + offset, b.data(), m);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), size_t(m) * 4), 0) << dtype_name(t) << " at +" << offset;
    }
  }
  // load_u16 / load_f32 read the element at any address.
  const uint8_t raw[7] = {0xAA, 0x34, 0x12, 0x00, 0x00, 0x80, 0x3F};
  EXPECT_EQ(load_u16(raw + 1, 0), 0x1234);
  EXPECT_EQ(load_f32(raw + 3, 0), 1.0f);
}

// The store side: quantize_row writes rows into buffers at any byte offset (packed tiles, file
// images with rows of odd byte length); a uint16_t store there is the same undefined behaviour,
// which the sanitized suite (LOOM_SANITIZE) reports. The bytes must equal an aligned write's.
TEST(DtypeUnaligned, QuantizeToOddAddressesWritesTheSameBytes) {
  const int64_t n = 96;
  Rng rng(6);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = rng.uniform() * 8.0f - 4.0f;
  for (DType t : {DType::F16, DType::BF16, DType::Q8_0, DType::F32}) {
    const size_t bytes = size_t(dtype_row_bytes(t, n));
    std::vector<uint8_t> aligned(bytes + 8), shifted(bytes + 8, 0xAB);
    quantize_row(t, x.data(), aligned.data(), n);
    for (size_t offset : {size_t(1), size_t(3)}) {
      quantize_row(t, x.data(), shifted.data() + offset, n);
      EXPECT_EQ(std::memcmp(aligned.data(), shifted.data() + offset, bytes), 0) << dtype_name(t) << " at +" << offset;
    }
  }
}

}  // namespace
}  // namespace loom
