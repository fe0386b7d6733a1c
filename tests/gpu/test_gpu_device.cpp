// The devices op by op through the Device interface the stages call (device/device.h), against the
// CPU device (the CPU engine's own arithmetic) and the naive reference kernels, on the same inputs:
// every test runs for the CPU device (in CI: the references hold it to the same bounds) and for the
// CUDA device (gpu/cuda/cuda_device.h; skipped, naming the reason, without a GPU). Error metric at
// each comparison:
//   - copies (copy, copy_2d, copy_spans, transfer both ways, to_host / from_host, fill_zero) and
//     the embedding lookup: the same bits;
//   - rmsnorm, SwiGLU, add, add_bias, RoPE: one f32 rounding of a double computation, so
//     |gpu - cpu| <= 2 ulp(|cpu|) + 2^-40 (the CPU kernels are themselves within an ulp of the
//     double references, test_kernels);
//   - matmul: gpu/cuda/gemm.h's bound against the exact product, (u_x + (cols + 8) 2^-24)
//     sum_k |x_k w_k|, u_x = 0 for f32 and the block types (q8_0 and q4_0 / K-quants dequantized
//     exactly: the CPU's exact numerics, the GPU's f32 GEMM), 2^-8 for bf16 and 2^-11 for f16
//     (activations rounded for the tensor cores);
//   - paged attention over many jobs (GQA runs, scattered pages, split long contexts, LSE with a
//     row stride): the f32 online-softmax model, |lse - ref| <= 8 (head_dim + n_keys) 2^-24
//     (1 + max|score|) and 5x that for the output, against kernels::attention_ref in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"
#include "device/cpu_device.h"
#include "gpu/device.h"
#include "kernels/kernels.h"

namespace loom {
namespace {

constexpr double kU = 1.0 / 16777216.0;  // 2^-24

class DeviceOps : public ::testing::TestWithParam<DeviceKind> {
 protected:
  void SetUp() override {
    if (GetParam() == DeviceKind::Cuda) {
      const std::string why = gpu::gpu_skip_reason();
      if (!why.empty()) GTEST_SKIP() << why;
    }
    dev_ = gpu::make_device(GetParam(), 0, nullptr);
  }
  // Host values to a fresh device array, and back.
  template <class T>
  DeviceArray<T> up(const std::vector<T>& v) {
    DeviceArray<T> a(*dev_, std::max<std::size_t>(v.size(), 1));
    dev_->from_host(a.data(), v.data(), v.size() * sizeof(T));
    return a;
  }
  template <class T>
  std::vector<T> down(const DeviceArray<T>& a, std::size_t n) {
    std::vector<T> v(n);
    dev_->to_host(v.data(), a.data(), n * sizeof(T));
    return v;
  }
  static std::vector<float> randv(Rng& rng, std::size_t n, double scale = 1.0) {
    std::vector<float> v(n);
    for (auto& x : v) x = float(rng.normal() * scale);
    return v;
  }
  static void expect_ulps(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double tol = 2.0 * std::ldexp(std::abs(double(want[i])), -23) + std::ldexp(1.0, -40);
      ASSERT_LE(std::abs(double(got[i]) - double(want[i])), tol) << what << " at " << i;
    }
  }
  std::unique_ptr<Device> dev_;
  CpuDevice cpu_{nullptr};
};

INSTANTIATE_TEST_SUITE_P(Devices, DeviceOps, ::testing::Values(DeviceKind::Cpu, DeviceKind::Cuda),
                         [](const ::testing::TestParamInfo<DeviceKind>& i) { return std::string(gpu::device_name(i.param)); });

TEST_P(DeviceOps, CopiesAreExact) {
  Rng rng(1);
  const auto x = randv(rng, 4096);
  auto a = up(x);
  DeviceArray<float> b(*dev_, 4096);
  dev_->copy(b.data(), a.data(), 4096 * 4);
  ASSERT_EQ(down(b, 4096), x);
  // copy_2d: 7 rows of 13 floats from a 40-float pitch to a 16-float pitch.
  dev_->fill_zero(b.data(), 4096 * 4);
  dev_->copy_2d(b.data() + 3, 16, a.data() + 5, 40, 7, 13);
  std::vector<float> want(4096, 0.0f);
  for (int r = 0; r < 7; ++r)
    for (int c = 0; c < 13; ++c) want[std::size_t(3 + r * 16 + c)] = x[std::size_t(5 + r * 40 + c)];
  ASSERT_EQ(down(b, 4096), want);
  // copy_spans: scattered spans of several lengths, as the KV writes and migration packs issue.
  std::vector<CopySpan> spans;
  std::vector<float> want2(4096, 0.0f);
  int64_t at = 0;
  for (int i = 0; i < 300; ++i) {
    const int64_t n = 1 + int64_t(rng.below(9)), src = int64_t(rng.below(4000));
    spans.push_back({at, src, n});
    for (int64_t k = 0; k < n; ++k) want2[std::size_t(at + k)] = x[std::size_t(src + k)];
    at += n + int64_t(rng.below(3));
  }
  dev_->fill_zero(b.data(), 4096 * 4);
  dev_->copy_spans(b.data(), a.data(), spans);
  ASSERT_EQ(down(b, 4096), want2);
  // transfer: device -> host and host -> device through the same spans, from another thread.
  std::vector<float> host(4096, 0.0f);
  std::thread t([&] { dev_->transfer(host.data(), a.data(), spans); });
  t.join();
  ASSERT_EQ(host, want2);
  dev_->fill_zero(b.data(), 4096 * 4);
  dev_->transfer(b.data(), x.data(), spans);
  ASSERT_EQ(down(b, 4096), want2);
}

TEST_P(DeviceOps, ElementwiseOpsWithinTwoUlpsOfTheCpuDevice) {
  Rng rng(2);
  const int64_t n = 37, d = 288;
  const auto x = randv(rng, std::size_t(n * d)), w = randv(rng, std::size_t(d)), g = randv(rng, std::size_t(n * d)),
             u = randv(rng, std::size_t(n * d));
  {  // rmsnorm
    std::vector<float> want(x.size());
    cpu_.rmsnorm(want.data(), x.data(), w.data(), n, d, 1e-5f);
    auto dx = up(x), dw = up(w);
    DeviceArray<float> out(*dev_, x.size());
    dev_->rmsnorm(out.data(), dx.data(), dw.data(), n, d, 1e-5f);
    expect_ulps(down(out, x.size()), want, "rmsnorm");
  }
  {  // swiglu, add, add_bias
    std::vector<float> want(g.size());
    cpu_.swiglu(want.data(), g.data(), u.data(), int64_t(g.size()));
    auto dg = up(g), du = up(u);
    dev_->swiglu(dg.data(), dg.data(), du.data(), int64_t(g.size()));
    expect_ulps(down(dg, g.size()), want, "swiglu");
    std::vector<float> y = x;
    cpu_.add(y.data(), u.data(), int64_t(y.size()));
    auto dy = up(x);
    dev_->add(dy.data(), du.data(), int64_t(x.size()));
    ASSERT_EQ(down(dy, x.size()), y) << "add is one f32 addition";
    std::vector<float> yb = x;
    cpu_.add_bias(yb.data(), n, d, w.data(), d);
    auto db = up(x), dw = up(w);
    dev_->add_bias(db.data(), n, d, dw.data(), d);
    ASSERT_EQ(down(db, x.size()), yb) << "add_bias is one f32 addition";
  }
  {  // RoPE, both conventions, Llama-3 scaling, positions from the host
    for (bool interleaved : {true, false}) {
      kernels::RopeParams p;
      p.head_dim = 48;
      p.theta = 500000.0f;
      p.interleaved = interleaved;
      p.llama3 = !interleaved;
      p.factor = 8.0f;
      p.low_freq_factor = 1.0f;
      p.high_freq_factor = 4.0f;
      p.original_max_position = 8192;
      const int heads = 6;
      const int64_t ld = heads * 48 + 16;
      std::vector<int32_t> pos(static_cast<std::size_t>(n));
      for (auto& q : pos) q = int32_t(rng.below(100000));
      auto v = randv(rng, std::size_t(n * ld));
      std::vector<float> want = v;
      cpu_.rope(want.data(), n, ld, heads, pos.data(), p);
      auto dv = up(v);
      dev_->rope(dv.data(), n, ld, heads, pos.data(), p);
      pos.assign(pos.size(), -1);  // the device copied the positions before the call returned
      expect_ulps(down(dv, v.size()), want, interleaved ? "rope interleaved" : "rope llama3");
    }
  }
}

TEST_P(DeviceOps, EmbeddingIsExactForEveryDtype) {
  Rng rng(3);
  const int64_t vocab = 300, d = 256;  // one K-quant super-block per row
  const auto table = randv(rng, std::size_t(vocab * d));
  std::vector<int32_t> tokens = {0, 299, 7, 7, 150};
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
    const int64_t rb = dtype_row_bytes(dt, d);
    std::vector<uint8_t> raw(std::size_t(vocab * rb));
    for (int64_t r = 0; r < vocab; ++r) quantize_row(dt, table.data() + r * d, raw.data() + r * rb, d);
    const WeightView w{raw.data(), dt, vocab, d, rb};
    std::vector<float> want(tokens.size() * std::size_t(d));
    cpu_.embed(cpu_.upload(w), tokens.data(), int64_t(tokens.size()), want.data(), d);
    DeviceArray<float> out(*dev_, want.size());
    dev_->embed(dev_->upload(w), tokens.data(), int64_t(tokens.size()), out.data(), d);
    ASSERT_EQ(down(out, want.size()), want) << dtype_name(dt);
  }
}

TEST_P(DeviceOps, MatmulWithinTheGemmBound) {
  Rng rng(4);
  // Q4_0 and the K-quants: dequantized exactly (a GPU widens them to f32 once, at upload).
  for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
    for (int64_t n : {1, 5, 64}) {
      const int64_t rows = 96, cols = 256, ldx = cols + 32, ldy = rows + 8;
      const auto wf = randv(rng, std::size_t(rows * cols), 0.1);
      const int64_t rb = dtype_row_bytes(dt, cols);
      std::vector<uint8_t> raw(std::size_t(rows * rb));
      for (int64_t r = 0; r < rows; ++r) quantize_row(dt, wf.data() + r * cols, raw.data() + r * rb, cols);
      const WeightView w{raw.data(), dt, rows, cols, rb};
      const auto x = randv(rng, std::size_t(n * ldx));
      std::vector<float> ref(std::size_t(n * ldy), 0.0f);
      kernels::matmul_ref(x.data(), n, ldx, w, ref.data(), ldy);
      auto dx = up(x);
      DeviceArray<float> dy(*dev_, ref.size());
      const DeviceMatrix dm = dev_->upload(w);
      dev_->matmul(dx.data(), n, ldx, dm, dy.data(), ldy, false, kernels::Numerics::exact);
      const auto got = down(dy, ref.size());
      const double ux = dt == DType::BF16 ? std::ldexp(1.0, -8) : dt == DType::F16 ? std::ldexp(1.0, -11) : 0.0;
      std::vector<float> wrow(static_cast<std::size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(dt, raw.data() + r * rb, wrow.data(), cols);
        for (int64_t i = 0; i < n; ++i) {
          double mag = 0;
          for (int64_t k = 0; k < cols; ++k) mag += std::abs(double(x[std::size_t(i * ldx + k)]) * wrow[std::size_t(k)]);
          const double bound = (ux + double(cols + 8) * kU) * mag + 1e-30;
          ASSERT_LE(std::abs(double(got[std::size_t(i * ldy + r)]) - ref[std::size_t(i * ldy + r)]), bound)
              << dtype_name(dt) << " n=" << n << " row " << r << " token " << i;
        }
      }
    }
  }
}

// Paged attention as the stages call it: several sequences, runs of GQA heads, pages scattered in
// a pool, prefill and decode rows, long contexts that the device splits, LSE rows with a stride.
TEST_P(DeviceOps, PagedAttentionOverManyJobsMatchesTheReference) {
  Rng rng(5);
  const int hd = 64, block = 16, group = 4;
  const int64_t n_pages = 700, pf = int64_t(block) * hd;
  const auto k = randv(rng, std::size_t(n_pages * pf)), v = randv(rng, std::size_t(n_pages * pf));
  auto dk = up(k), dv = up(v);
  PagedKv cpu_kv{k.data(), v.data(), block, hd, pf}, gpu_kv{dk.data(), dv.data(), block, hd, pf};
  // Jobs: (queries, context): decode of 1 at 3000 keys (split), prefill of 40 from 0, decode at 17.
  struct Spec {
    int n_q;
    int64_t ctx;
  };
  const std::vector<Spec> specs = {{1, 3000}, {40, 40}, {1, 17}, {3, 600}};
  std::vector<int32_t> perm(static_cast<std::size_t>(n_pages));
  std::iota(perm.begin(), perm.end(), 0);
  for (std::size_t i = perm.size() - 1; i > 0; --i) std::swap(perm[i], perm[std::size_t(rng.below(i + 1))]);
  std::vector<std::vector<int32_t>> pages, pos;
  int64_t next_page = 0, rows = 0;
  for (const Spec& s : specs) {
    const int64_t nb = (s.ctx + block - 1) / block;
    pages.emplace_back(perm.begin() + next_page, perm.begin() + next_page + nb);
    next_page += nb;
    std::vector<int32_t> p(static_cast<std::size_t>(s.n_q));
    for (int t = 0; t < s.n_q; ++t) p[std::size_t(t)] = int32_t(s.ctx - s.n_q + t);
    pos.push_back(p);
    rows += s.n_q;
  }
  const int64_t ldq = group * hd + 32, ld_lse = group + 3;
  const auto q = randv(rng, std::size_t(rows * ldq));
  auto dq = up(q);
  DeviceArray<float> dout(*dev_, std::size_t(rows * ldq)), dlse(*dev_, std::size_t(rows * ld_lse));
  std::vector<float> out(std::size_t(rows * ldq), 0.0f), lse(std::size_t(rows * ld_lse), 0.0f);
  std::vector<AttentionJob> cpu_jobs, gpu_jobs;
  int64_t r0 = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    AttentionJob j;
    j.ldq = ldq;
    j.n_q = specs[i].n_q;
    j.q_pos = pos[i].data();
    j.pages = pages[i].data();
    j.n_pages = int64_t(pages[i].size());
    j.kv_end = specs[i].ctx;
    j.n_heads = group;
    j.ldo = ldq;
    j.ld_lse = ld_lse;
    j.q = q.data() + r0 * ldq;
    j.out = out.data() + r0 * ldq;
    j.lse = lse.data() + r0 * ld_lse;
    cpu_jobs.push_back(j);
    j.q = dq.data() + r0 * ldq;
    j.out = dout.data() + r0 * ldq;
    j.lse = dlse.data() + r0 * ld_lse;
    gpu_jobs.push_back(j);
    r0 += specs[i].n_q;
  }
  const float scale = 1.0f / 8.0f;
  dev_->attention(gpu_kv, gpu_jobs, scale);
  cpu_.attention(cpu_kv, cpu_jobs, scale);  // the seam's other side, held to the same bound
  const auto got = down(dout, out.size()), got_lse = down(dlse, lse.size());
  r0 = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    // The reference in double over the same pages.
    kernels::KvView view{k.data(), v.data(), pages[i].data(), block, pf, 0, hd};
    const kernels::AttentionShape sh{group, 1, hd, scale};
    std::vector<float> ref(static_cast<std::size_t>(specs[i].n_q * group * hd)), ref_lse(std::size_t(specs[i].n_q * group));
    kernels::attention_ref(q.data() + r0 * ldq, specs[i].n_q, ldq, pos[i].data(), view, 0, specs[i].ctx, sh, ref.data(),
                           group * hd, ref_lse.data());
    for (int t = 0; t < specs[i].n_q; ++t)
      for (int h = 0; h < group; ++h) {
        const double l = ref_lse[std::size_t(t * group + h)];
        const double bound = 8.0 * double(hd + specs[i].ctx) * kU * (11.0 + std::abs(l));
        ASSERT_LE(std::abs(got_lse[std::size_t((r0 + t) * ld_lse + h)] - l), bound) << "job " << i << " q " << t;
        ASSERT_LE(std::abs(lse[std::size_t((r0 + t) * ld_lse + h)] - l), bound) << "cpu: job " << i << " q " << t;
        for (int d = 0; d < hd; ++d) {
          const double want = ref[std::size_t((t * group + h) * hd + d)];
          ASSERT_LE(std::abs(got[std::size_t((r0 + t) * ldq + h * hd + d)] - want), 5.0 * bound)
              << "job " << i << " q " << t << " head " << h << " dim " << d;
          ASSERT_LE(std::abs(out[std::size_t((r0 + t) * ldq + h * hd + d)] - want), 5.0 * bound)
              << "cpu: job " << i << " q " << t << " head " << h << " dim " << d;
        }
      }
    r0 += specs[i].n_q;
  }
}

}  // namespace
}  // namespace loom
