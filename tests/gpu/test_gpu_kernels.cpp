// The CUDA kernels against the CPU reference kernels (kernels/reference.cpp) on the same inputs.
// Every test skips with the reason when no GPU is visible (or the build has no CUDA); the error
// metric is stated at each comparison:
//   - elementwise kernels (rmsnorm, SwiGLU, RoPE) compute in double like the reference: they may
//     differ only in the final f32 rounding, |gpu - ref| <= 2^-23 |ref| (one f32 ulp) plus 2^-40
//     of the inputs' magnitude for RoPE's cancellation;
//   - attention (online softmax in f32): the f32 error model of n_keys + head_dim roundings,
//     |lse - lse_ref| <= 8 (head_dim + n_keys) 2^-24 (1 + max|score|), and the same bound times
//     max|v| for the output;
//   - the LSE merge mirrors merge_attention operation for operation: the same bits but for the
//     double exp/log of two libraries, |gpu - cpu| <= 2^-22 max|part|;
//   - argmax, embedding and KV store: exact;
//   - GEMM: gpu/cuda/gemm.h's bounds, (u_x + (cols + 8) 2^-24) sum_k |x_k w_k| with u_x = 0 for
//     f32 / q8_0 / F32Activations, 2^-11 for f16 and 2^-8 for bf16 activations rounded to the
//     weight dtype.
#include <gtest/gtest.h>

#include "gpu/device.h"

#if defined(LOOM_HAVE_CUDA)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <numeric>
#include <vector>

#include "comm/checks.h"
#include "comm/local.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "core/weight_view.h"
#include "gpu/cuda/cuda_util.h"
#include "gpu/cuda/gemm.h"
#include "gpu/cuda/ops.h"
#include "gpu/cuda/shared_gpu.h"
#include "kernels/kernels.h"
#if defined(LOOM_HAVE_NCCL)
#include "gpu/cuda/nccl_comm.h"
#endif
#include "gpu/cuda/cuda_device.h"
#endif

namespace loom {
namespace {

#if !defined(LOOM_HAVE_CUDA)

TEST(GpuKernels, SkippedWithoutCuda) { GTEST_SKIP() << "built without the CUDA backend (LOOM_CUDA=OFF or no toolkit)"; }

#else

constexpr double kU = 1.0 / 16777216.0;  // 2^-24

// FlashDecoding's split count (host arithmetic, no GPU needed): a long decode alone on a 132-SM
// GPU is cut into ranges of >= 256 keys until there are about 4 blocks per SM; short contexts and
// steps with enough (query, head) pairs are not split; never more than 64 ranges.
TEST(PagedAttentionSplits, EnoughBlocksForTheGpuAndLongEnoughRanges) {
  EXPECT_EQ(gpu::CudaDevice::attention_splits(32, 256, 132), 1);   // 256 keys: one range
  EXPECT_EQ(gpu::CudaDevice::attention_splits(32, 4096, 132), 16);  // ceil(528 / 32) = 17 > 4096 / 256
  EXPECT_EQ(gpu::CudaDevice::attention_splits(32, 100000, 132), 17);
  EXPECT_EQ(gpu::CudaDevice::attention_splits(1, 1000000, 132), 64);  // capped
  EXPECT_EQ(gpu::CudaDevice::attention_splits(64 * 32, 8192, 132), 1);  // batch 64: already 2048 blocks
}

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = gpu::gpu_skip_reason();
    if (!why.empty()) GTEST_SKIP() << why;
    LOOM_CUDA_CHECK(cudaSetDevice(0));
  }
};

template <class T>
gpu::DeviceBuffer up(const std::vector<T>& v) {
  gpu::DeviceBuffer b(std::max<std::size_t>(1, v.size()) * sizeof(T));
  b.upload(v.data(), v.size() * sizeof(T));
  return b;
}
template <class T>
std::vector<T> down(const gpu::DeviceBuffer& b, std::size_t n) {
  LOOM_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> v(n);
  b.download(v.data(), n * sizeof(T));
  return v;
}
std::vector<float> randv(Rng& rng, std::size_t n, double scale = 1.0) {
  std::vector<float> v(n);
  for (auto& x : v) x = float(rng.normal() * scale);
  return v;
}

TEST_F(Gpu, RmsnormWithinOneUlpOfReference) {
  Rng rng(1);
  const int64_t n = 7, d = 1000;
  auto x = randv(rng, size_t(n * d), 3.0), w = randv(rng, size_t(d));
  std::vector<float> ref(x.size());
  kernels::rmsnorm_ref(ref.data(), x.data(), w.data(), n, d, 1e-5f);
  auto dx = up(x), dw = up(w);
  gpu::DeviceBuffer dout(x.size() * 4);
  gpu::rmsnorm(dout.as<float>(), dx.as<float>(), dw.as<float>(), n, d, 1e-5f, nullptr);
  const auto got = down<float>(dout, x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_LE(std::abs(got[i] - ref[i]), std::ldexp(std::abs(ref[i]), -23)) << i;
}

TEST_F(Gpu, SwigluWithinOneUlpOfReference) {
  Rng rng(2);
  const size_t n = 100003;
  auto g = randv(rng, n, 4.0), u = randv(rng, n);
  std::vector<float> ref(n);
  kernels::swiglu_ref(ref.data(), g.data(), u.data(), int64_t(n));
  auto dg = up(g), du = up(u);
  gpu::swiglu(dg.as<float>(), dg.as<float>(), du.as<float>(), int64_t(n), nullptr);  // out aliases gate
  const auto got = down<float>(dg, n);
  for (size_t i = 0; i < n; ++i) ASSERT_LE(std::abs(got[i] - ref[i]), std::ldexp(std::abs(ref[i]), -23) + 1e-37) << i;
}

TEST_F(Gpu, RopeBothConventionsAndLlama3Scaling) {
  for (bool interleaved : {true, false}) {
    for (bool llama3 : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "interleaved=" << interleaved << " llama3=" << llama3);
      kernels::RopeParams p;
      p.head_dim = 64;
      p.theta = llama3 ? 500000.0f : 10000.0f;
      p.interleaved = interleaved;
      p.llama3 = llama3;
      p.factor = 8.0f;
      Rng rng(3);
      const int64_t n = 9, ld = 5 * 64 + 3;
      const int heads = 5;
      auto x = randv(rng, size_t(n * ld));
      std::vector<int32_t> pos = {0, 1, 2, 17, 500, 4096, 9000, 70000, 131071};
      std::vector<float> ref = x;
      kernels::rope_ref(ref.data(), n, ld, heads, pos.data(), p);
      std::vector<float> inv(32);
      kernels::rope_inv_freq(p, inv.data());
      auto dx = up(x), dpos = up(pos), dinv = up(inv);
      gpu::rope(dx.as<float>(), n, ld, heads, 64, dpos.as<int32_t>(), dinv.as<float>(), interleaved, nullptr);
      const auto got = down<float>(dx, x.size());
      for (size_t i = 0; i < x.size(); ++i)
        ASSERT_LE(std::abs(got[i] - ref[i]), std::ldexp(std::abs(ref[i]), -23) + 1e-12) << i;
    }
  }
}

// A paged K/V of one sequence in host memory and the same pages on the device (shuffled table).
struct PagedSeq {
  int n_kv_heads, head_dim, block;
  int64_t n_ctx;
  std::vector<float> k, v;         // pages [n_blocks][n_kv_heads][block][head_dim]
  std::vector<int32_t> table;      // logical block -> page
  kernels::KvView host_view() const {
    kernels::KvView kv;
    kv.k = k.data();
    kv.v = v.data();
    kv.block_table = table.data();
    kv.block_size = block;
    kv.head_stride = int64_t(block) * head_dim;
    kv.block_stride = kv.head_stride * n_kv_heads;
    kv.pos_stride = head_dim;
    return kv;
  }
};

PagedSeq make_paged(Rng& rng, int n_kv_heads, int head_dim, int block, int64_t n_ctx) {
  PagedSeq s{n_kv_heads, head_dim, block, n_ctx, {}, {}, {}};
  const int64_t n_blocks = (n_ctx + block - 1) / block;
  s.k = randv(rng, size_t(n_blocks * n_kv_heads * block * head_dim));
  s.v = randv(rng, s.k.size());
  s.table.resize(static_cast<size_t>(n_blocks));
  std::iota(s.table.begin(), s.table.end(), 0);
  std::reverse(s.table.begin(), s.table.end());
  if (n_blocks > 2) std::swap(s.table[0], s.table[1]);
  return s;
}

void compare_attention(int64_t n_q, int64_t kv_begin, int64_t n_ctx, std::vector<int32_t> q_pos) {
  Rng rng(uint64_t(n_q * 1000 + kv_begin));
  const int n_heads = 8, n_kv = 2, hd = 64, block = 16;
  PagedSeq s = make_paged(rng, n_kv, hd, block, n_ctx);
  auto q = randv(rng, size_t(n_q * n_heads * hd));
  kernels::AttentionShape sh{n_heads, n_kv, hd, 1.0f / std::sqrt(float(hd))};
  std::vector<float> ref(q.size()), ref_lse(size_t(n_q * n_heads));
  kernels::attention_ref(q.data(), n_q, n_heads * hd, q_pos.data(), s.host_view(), kv_begin, n_ctx, sh, ref.data(),
                         n_heads * hd, ref_lse.data());
  auto dk = up(s.k), dv = up(s.v), dt = up(s.table), dq = up(q), dpos = up(q_pos);
  gpu::DeviceKvView kv;
  const kernels::KvView hv = s.host_view();
  kv.k = dk.as<float>();
  kv.v = dv.as<float>();
  kv.block_table = dt.as<int32_t>();
  kv.block_size = block;
  kv.block_stride = hv.block_stride;
  kv.head_stride = hv.head_stride;
  kv.pos_stride = hv.pos_stride;
  gpu::DeviceBuffer dout(q.size() * 4), dlse(ref_lse.size() * 4);
  gpu::attention(dq.as<float>(), n_q, n_heads * hd, dpos.as<int32_t>(), kv, kv_begin, n_ctx, n_heads, n_kv, hd,
                 sh.scale, dout.as<float>(), n_heads * hd, dlse.as<float>(), nullptr);
  const auto out = down<float>(dout, q.size());
  const auto lse = down<float>(dlse, ref_lse.size());
  float vmax = 0;
  for (float x : s.v) vmax = std::max(vmax, std::abs(x));
  for (int64_t t = 0; t < n_q; ++t) {
    const int64_t keys = std::max<int64_t>(0, std::min<int64_t>(q_pos[size_t(t)] + 1, n_ctx) - kv_begin);
    for (int h = 0; h < n_heads; ++h) {
      const size_t r = size_t(t * n_heads + h);
      if (keys == 0) {
        EXPECT_EQ(lse[r], -std::numeric_limits<float>::infinity());
        for (int d = 0; d < hd; ++d) EXPECT_EQ(out[r * hd + size_t(d)], 0.0f);
        continue;
      }
      // max |score| bounds by |q| |k| scale: use the reference LSE as its scale (LSE >= max score).
      const double bound = 8.0 * double(hd + keys) * kU * (1.0 + std::abs(ref_lse[r]) + 10.0);
      ASSERT_LE(std::abs(lse[r] - ref_lse[r]), bound) << "t=" << t << " h=" << h;
      for (int d = 0; d < hd; ++d)
        ASSERT_LE(std::abs(out[r * hd + size_t(d)] - ref[r * hd + size_t(d)]), bound * vmax) << t << "," << h << "," << d;
    }
  }
}

TEST_F(Gpu, PagedDecodeAttentionWithLse) {
  // One query at the end of 300 cached tokens (blocks of 16, table shuffled), GQA 8:2.
  compare_attention(1, 0, 300, {299});
  // A partial range (a Helix rank's keys): lse over [100, 300) only.
  compare_attention(1, 100, 300, {299});
}

TEST_F(Gpu, CausalPrefillAttention) {
  std::vector<int32_t> pos(37);
  std::iota(pos.begin(), pos.end(), 0);
  compare_attention(37, 0, 37, pos);
  // Keys from 20 on: queries before 20 see none (0 and -inf).
  compare_attention(37, 20, 37, pos);
}

TEST_F(Gpu, LseMergeMatchesCpuMergeAndFullAttention) {
  Rng rng(9);
  const int n_parts = 3;
  const int64_t rows = 50;
  const int hd = 128;
  std::vector<std::vector<float>> parts, lses;
  for (int i = 0; i < n_parts; ++i) {
    parts.push_back(randv(rng, size_t(rows * hd)));
    lses.push_back(randv(rng, size_t(rows), 5.0));
  }
  for (int64_t r = 0; r < rows; r += 7) lses[1][size_t(r)] = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n_parts; ++i) lses[size_t(i)][3] = -std::numeric_limits<float>::infinity();  // row 3: no keys
  std::vector<const float*> hp, hl;
  for (int i = 0; i < n_parts; ++i) {
    hp.push_back(parts[size_t(i)].data());
    hl.push_back(lses[size_t(i)].data());
  }
  std::vector<float> ref(size_t(rows * hd)), ref_lse(static_cast<size_t>(rows));
  kernels::merge_attention(hp.data(), hl.data(), n_parts, rows, hd, ref.data(), ref_lse.data());
  std::vector<gpu::DeviceBuffer> dp, dl;
  std::vector<const float*> pp, pl;
  for (int i = 0; i < n_parts; ++i) {
    dp.push_back(up(parts[size_t(i)]));
    dl.push_back(up(lses[size_t(i)]));
    pp.push_back(dp.back().as<float>());
    pl.push_back(dl.back().as<float>());
  }
  gpu::DeviceBuffer dout(ref.size() * 4), dlse(ref_lse.size() * 4);
  gpu::merge_attention(pp.data(), pl.data(), n_parts, rows, hd, dout.as<float>(), dlse.as<float>(), nullptr);
  const auto out = down<float>(dout, ref.size());
  const auto lse = down<float>(dlse, ref_lse.size());
  for (size_t r = 0; r < size_t(rows); ++r) {
    if (std::isinf(ref_lse[r])) {
      EXPECT_TRUE(std::isinf(lse[r]) && lse[r] < 0) << r;
    } else {
      ASSERT_LE(std::abs(lse[r] - ref_lse[r]), std::ldexp(std::abs(ref_lse[r]) + 1.0f, -22)) << r;
    }
  }
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_LE(std::abs(out[i] - ref[i]), std::ldexp(4.0f, -22) * 5.0f) << i;
}

TEST_F(Gpu, ArgmaxLowestIndexOnTies) {
  Rng rng(4);
  const int n = 32000;
  const int64_t rows = 5;
  auto x = randv(rng, size_t(rows * n));
  x[size_t(1 * n + 7)] = 100.0f;  // a tie: the lower index wins
  x[size_t(1 * n + 31000)] = 100.0f;
  x[size_t(3 * n + n - 1)] = 50.0f;  // the last element
  auto dx = up(x);
  gpu::DeviceBuffer dout(size_t(rows) * 4);
  gpu::argmax_rows(dx.as<float>(), rows, n, n, dout.as<int32_t>(), nullptr);
  const auto got = down<int32_t>(dout, size_t(rows));
  for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(got[size_t(r)], kernels::argmax(x.data() + r * n, n)) << r;
  EXPECT_EQ(got[1], 7);
}

std::vector<uint8_t> quantize_matrix(DType dt, const std::vector<float>& w, int64_t rows, int64_t cols) {
  std::vector<uint8_t> out(size_t(rows * dtype_row_bytes(dt, cols)));
  for (int64_t r = 0; r < rows; ++r)
    quantize_row(dt, w.data() + r * cols, out.data() + r * dtype_row_bytes(dt, cols), cols);
  return out;
}

TEST_F(Gpu, EmbeddingRowsAreTheDequantizedRows) {
  Rng rng(5);
  const int64_t vocab = 50, cols = 96;
  auto w = randv(rng, size_t(vocab * cols));
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0}) {
    const auto raw = quantize_matrix(dt, w, vocab, cols);
    std::vector<int32_t> toks = {3, 0, 49, 3, 17};
    auto dtab = up(raw), dtok = up(toks);
    gpu::DeviceBuffer dout(toks.size() * size_t(cols) * 4);
    gpu::embed_rows(dtab.data(), dt, cols, dtok.as<int32_t>(), int64_t(toks.size()), dout.as<float>(), nullptr);
    const auto got = down<float>(dout, toks.size() * size_t(cols));
    std::vector<float> row(static_cast<size_t>(cols));
    for (size_t i = 0; i < toks.size(); ++i) {
      dequantize_row(dt, raw.data() + toks[i] * dtype_row_bytes(dt, cols), row.data(), cols);
      ASSERT_EQ(std::memcmp(row.data(), got.data() + i * size_t(cols), size_t(cols) * 4), 0) << dtype_name(dt);
    }
  }
}

TEST_F(Gpu, GemmEveryDtypeWithinItsBound) {
  Rng rng(6);
  const int64_t rows = 96, cols = 256;
  auto w = randv(rng, size_t(rows * cols), 0.1);
  gpu::Stream stream;
  gpu::Gemm gemm(stream.get());
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0}) {
    for (auto prec : {gpu::GemmPrecision::Native, gpu::GemmPrecision::F32Activations}) {
      for (int64_t n : {int64_t(1), int64_t(37)}) {
        for (bool acc : {false, true}) {
          SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " n=" << n << " accumulate=" << acc
                                            << " f32act=" << (prec == gpu::GemmPrecision::F32Activations));
          const auto raw = quantize_matrix(dt, w, rows, cols);
          WeightView wv;
          wv.data = raw.data();
          wv.dtype = dt;
          wv.rows = rows;
          wv.cols = cols;
          wv.row_stride = dtype_row_bytes(dt, cols);
          gpu::DeviceWeight dw(wv);
          const int64_t ldx = cols + 5, ldy = rows + 3;
          auto x = randv(rng, size_t(n * ldx));
          auto y0 = randv(rng, size_t(n * ldy));
          std::vector<float> ref = y0;
          kernels::matmul_ref(x.data(), n, ldx, wv, ref.data(), ldy, acc);
          auto dx = up(x), dy = up(y0);
          gemm.matmul(dx.as<float>(), n, ldx, dw, dy.as<float>(), ldy, acc, prec);
          stream.sync();
          const auto got = down<float>(dy, y0.size());
          const bool half = (dt == DType::F16 || dt == DType::BF16) && prec == gpu::GemmPrecision::Native;
          const double ux = !half ? 0.0 : dt == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
          std::vector<float> wrow(static_cast<size_t>(cols));
          for (int64_t r = 0; r < rows; ++r) {
            dequantize_row(dt, raw.data() + r * wv.row_stride, wrow.data(), cols);
            for (int64_t i = 0; i < n; ++i) {
              double mag = acc ? std::abs(double(y0[size_t(i * ldy + r)])) : 0.0;
              for (int64_t k = 0; k < cols; ++k) mag += std::abs(double(x[size_t(i * ldx + k)]) * wrow[size_t(k)]);
              const double bound = (ux + double(cols + 8) * kU) * mag + 1e-30;
              ASSERT_LE(std::abs(double(got[size_t(i * ldy + r)]) - ref[size_t(i * ldy + r)]), bound)
                  << "row " << r << " token " << i;
            }
          }
        }
      }
    }
  }
}

// ---- communicators ----

// Ranks sharing GPU 0: the local backend's checks (host buffers through cudaMemcpyDefault) and a
// device-buffer all-reduce that must be the rank-order sum bit for bit.
TEST_F(Gpu, RanksSharingOneGpuPassTheCommChecks) {
  for (int n : {2, 3}) {
    std::mutex mu;
    std::string errors;
    LocalWorld::run(
        n,
        [&](Communicator& c) {
          EXPECT_EQ(c.backend(), "local+cuda");
          std::string e = test::check_everything(c);
          // Device buffers.
          const size_t count = 100001;
          std::vector<float> mine(count), expect(count);
          for (size_t i = 0; i < count; ++i) mine[i] = test::comm_value(c.rank(), i);
          for (size_t i = 0; i < count; ++i) {
            float a = test::comm_value(0, i);
            for (int q = 1; q < c.size(); ++q) a += test::comm_value(q, i);
            expect[i] = a;
          }
          gpu::DeviceBuffer d(count * 4);
          LOOM_CUDA_CHECK(cudaMemcpyAsync(d.data(), mine.data(), count * 4, cudaMemcpyHostToDevice, gpu::rank_stream()));
          c.all_reduce_sum(d.as<float>(), count);
          std::vector<float> got(count);
          LOOM_CUDA_CHECK(cudaMemcpy(got.data(), d.data(), count * 4, cudaMemcpyDeviceToHost));
          if (std::memcmp(got.data(), expect.data(), count * 4) != 0) e += "device all_reduce_sum differs\n";
          if (!e.empty()) {
            std::lock_guard<std::mutex> lk(mu);
            errors += cat("rank ", c.rank(), ": ", e);
          }
        },
        CommOptions{60}, gpu::shared_gpu_memory(0));
    EXPECT_EQ(errors, "") << n << " ranks";
  }
}

#if defined(LOOM_HAVE_NCCL)
TEST_F(Gpu, NcclCollectivesOnDeviceBuffers) {
  int devices = 0;
  LOOM_CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (devices < 2) GTEST_SKIP() << "NCCL needs one GPU per rank: " << devices << " visible (ranks sharing one GPU use local+cuda)";
  const int n = std::min(devices, 4);
  std::mutex mu;
  std::string errors;
  LocalWorld::run(n, [&](Communicator& host_world) {
    // The host communicator outlives the NCCL one (the local world's object lives for the rank).
    std::shared_ptr<Communicator> host(&host_world, [](Communicator*) {});
    auto c = gpu::NcclCommunicator::create(host, host_world.rank());
    std::string e;
    const int r = c->rank();
    // all-reduce: rank-order bits
    const size_t count = 12345;
    std::vector<float> mine(count), expect(count);
    for (size_t i = 0; i < count; ++i) {
      mine[i] = test::comm_value(r, i);
      float a = test::comm_value(0, i);
      for (int q = 1; q < n; ++q) a += test::comm_value(q, i);
      expect[i] = a;
    }
    gpu::DeviceBuffer d(count * 4);
    d.upload(mine.data(), count * 4);
    c->all_reduce_sum(d.as<float>(), count);
    std::vector<float> got(count);
    d.download(got.data(), count * 4);
    if (std::memcmp(got.data(), expect.data(), count * 4) != 0) e += "all_reduce_sum is not the rank-order sum; ";
    // all-gather
    std::vector<float> all(count * size_t(n));
    gpu::DeviceBuffer ds(count * 4), dr(all.size() * 4);
    ds.upload(mine.data(), count * 4);
    c->all_gather(ds.as<float>(), dr.as<float>(), count);
    dr.download(all.data(), all.size() * 4);
    for (int q = 0; q < n && e.empty(); ++q)
      for (size_t i = 0; i < count; ++i)
        if (all[size_t(q) * count + i] != test::comm_value(q, i)) {
          e += cat("all_gather chunk ", q, " wrong; ");
          break;
        }
    // uneven all-to-all: rank r sends (r + 1) * (j + 1) bytes to j
    std::vector<size_t> sb(static_cast<size_t>(n)), sd(static_cast<size_t>(n)), rb(static_cast<size_t>(n)), rd(static_cast<size_t>(n));
    size_t so = 0, ro = 0;
    for (int j = 0; j < n; ++j) {
      sb[size_t(j)] = size_t((r + 1) * (j + 1));
      sd[size_t(j)] = so;
      so += sb[size_t(j)];
      rb[size_t(j)] = size_t((j + 1) * (r + 1));
      rd[size_t(j)] = ro;
      ro += rb[size_t(j)];
    }
    std::vector<uint8_t> sbuf(so), rbuf(ro);
    for (size_t i = 0; i < so; ++i) sbuf[i] = uint8_t(r * 31 + i);
    gpu::DeviceBuffer dsb(std::max<size_t>(so, 1)), drb(std::max<size_t>(ro, 1));
    dsb.upload(sbuf.data(), so);
    c->all_to_all_v_bytes(dsb.data(), sb, sd, drb.data(), rb, rd);
    drb.download(rbuf.data(), ro);
    for (int j = 0; j < n; ++j)
      for (size_t b = 0; b < rb[size_t(j)]; ++b) {
        // rank j's chunk for r starts at its send displacement sum_{i<r} (j+1)(i+1)
        size_t jd = 0;
        for (int i = 0; i < r; ++i) jd += size_t((j + 1) * (i + 1));
        if (rbuf[rd[size_t(j)] + b] != uint8_t(j * 31 + jd + b)) {
          e += cat("all_to_all_v from rank ", j, " wrong; ");
          j = n;
          break;
        }
      }
    // broadcast from the last rank, send/recv ring, split into halves
    std::vector<float> bc(1000, float(r));
    gpu::DeviceBuffer db(4000);
    db.upload(bc.data(), 4000);
    c->broadcast(db.data(), 4000, n - 1);
    db.download(bc.data(), 4000);
    if (bc[999] != float(n - 1)) e += "broadcast wrong; ";
    auto sub = c->split(r % 2, r);
    if (sub->size() != (n + 1 - r % 2) / 2) e += "split size wrong; ";
    // host buffers still work (they go through the host communicator)
    c->check_agreement("nccl test", 42);
    if (!e.empty()) {
      std::lock_guard<std::mutex> lk(mu);
      errors += cat("rank ", r, ": ", e, "\n");
    }
  });
  EXPECT_EQ(errors, "");
}
#endif

#endif  // LOOM_HAVE_CUDA

}  // namespace
}  // namespace loom
