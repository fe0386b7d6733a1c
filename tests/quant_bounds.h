// The per-element error bounds core/dtype.h states for quantize_row of the block types, computed
// from the input alone (with the stated worst cases of the stored f16 scales). Shared by the
// quantizer tests (tests/kernels/test_dtype.cpp) and loom quantize's round trip (tests/model).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtype.h"

namespace loom::test {

inline double f16_up_bound(double v) { return v * (1 + 0x1p-10) + 0x1p-24; }

// Bound on |x_i - dequantize(quantize(x))_i| for each i of a row x[n] (n a multiple of the block).
inline std::vector<double> quant_error_bounds(DType t, const float* x, int64_t n) {
  std::vector<double> out(static_cast<size_t>(n), 0.0);
  auto span_max = [&](int64_t b, int len) {
    double a = 0;
    for (int i = 0; i < len; ++i) a = std::max(a, std::fabs(double(x[b + i])));
    return a;
  };
  if (t == DType::Q8_0) {
    for (int64_t b = 0; b < n; b += 32) {
      const double d = span_max(b, 32) / 127.0, dh = f16_to_f32(f32_to_f16(float(d)));
      for (int i = 0; i < 32; ++i) out[size_t(b + i)] = d / 2 * (1 + 1e-6) + 127 * std::fabs(d - dh);
    }
  } else if (t == DType::Q4_0 || t == DType::Q5_0) {
    const double levels = t == DType::Q4_0 ? 8 : 16;
    for (int64_t b = 0; b < n; b += 32) {
      const double A = span_max(b, 32);
      for (int i = 0; i < 32; ++i) out[size_t(b + i)] = A / levels * (1 + 0x1p-7) + 0x1p-20;
    }
  } else if (t == DType::Q4_1) {
    for (int64_t b = 0; b < n; b += 32) {
      double lo = x[b], hi = x[b];
      for (int i = 0; i < 32; ++i) {
        lo = std::min(lo, double(x[b + i]));
        hi = std::max(hi, double(x[b + i]));
      }
      const double R = hi - lo;
      for (int i = 0; i < 32; ++i) out[size_t(b + i)] = R / 30 + 0x1p-10 * (R + std::fabs(lo)) + 0x1p-20;
    }
  } else if (t == DType::Q4_K || t == DType::Q5_K) {
    const double L = t == DType::Q4_K ? 15 : 31;
    for (int64_t sb = 0; sb < n; sb += 256) {
      double M[8], R[8], maxM = 0;
      for (int j = 0; j < 8; ++j) {
        double lo = x[sb + 32 * j], hi = lo;
        for (int l = 0; l < 32; ++l) {
          lo = std::min(lo, double(x[sb + 32 * j + l]));
          hi = std::max(hi, double(x[sb + 32 * j + l]));
        }
        M[j] = std::max(0.0, -lo);
        R[j] = hi + M[j];
        maxM = std::max(maxM, M[j]);
      }
      const double dmin = f16_up_bound(maxM / 63);
      double maxspan = 0;
      for (int j = 0; j < 8; ++j) maxspan = std::max(maxspan, R[j] + dmin);
      const double d = f16_up_bound(maxspan / (63 * L));
      for (int j = 0; j < 8; ++j)
        for (int l = 0; l < 32; ++l) {
          const int64_t i = sb + 32 * j + l;
          out[size_t(i)] = (R[j] + dmin) / (2 * L) + d / 2 + 0x1p-20 * (std::fabs(x[i]) + R[j] + dmin);
        }
    }
  } else if (t == DType::Q6_K) {
    for (int64_t sb = 0; sb < n; sb += 256) {
      double A[16], maxA = 0;
      for (int k = 0; k < 16; ++k) maxA = std::max(maxA, A[k] = span_max(sb + 16 * k, 16));
      const double d = f16_up_bound(maxA / (31 * 127));
      for (int k = 0; k < 16; ++k)
        for (int l = 0; l < 16; ++l) out[size_t(sb + 16 * k + l)] = A[k] / 62 + d / 2 + 0x1p-20 * A[k];
    }
  } else if (t == DType::F16) {
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = std::fabs(double(x[i])) * 0x1p-11 + 0x1p-25;
  } else if (t == DType::BF16) {
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = std::fabs(double(x[i])) * 0x1p-8;
  }
  return out;
}

}  // namespace loom::test
