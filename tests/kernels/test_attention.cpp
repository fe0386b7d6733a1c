// attention vs attention_ref, paged == contiguous, and the Helix LSE-merge property.
//
// Metric (vs the double reference): |out - ref| <= 2 * (2*ds + (2*n_keys + 16) * u) * max|V|,
// |lse - ref| <= 2*ds + (n_keys + 16) * u * (1 + |lse|), where u = 2^-24 and
// ds = head_dim * u * scale * max_j sum_d |q_d k_jd| bounds the f32 error of any score. Why: a
// score error ds changes each softmax weight by a relative 2*ds at most (its exp and the
// normaliser), the vector exp adds a few u, and summing n_keys weighted V rows in f32 adds
// n_keys*u relative; the outer factor 2 covers second-order terms.
#include <algorithm>
#include <numeric>

#include "kernel_test_util.h"

namespace loom {
namespace {

using kernels::AttentionShape;
using kernels::KvView;

struct Case {
  int n_heads, n_kv_heads, head_dim;
  int64_t n_ctx;  // keys in the cache
  int64_t n_q;    // queries: positions n_ctx - n_q .. n_ctx - 1 (prefill tail / decode)
};

struct Data {
  std::vector<float> q, k, v;  // q [n_q, n_heads*hd]; k, v [n_ctx, n_kv_heads, hd] contiguous
  std::vector<int32_t> pos;
};

Data make_data(const Case& c, uint64_t seed) {
  Rng rng(seed);
  Data d;
  d.q = test::random_vec(rng, size_t(c.n_q * c.n_heads * c.head_dim));
  d.k = test::random_vec(rng, size_t(c.n_ctx * c.n_kv_heads * c.head_dim));
  d.v = test::random_vec(rng, size_t(c.n_ctx * c.n_kv_heads * c.head_dim));
  for (int64_t t = 0; t < c.n_q; ++t) d.pos.push_back(int32_t(c.n_ctx - c.n_q + t));
  return d;
}

// Tolerances of the header for query row t, head h.
struct Tol {
  double out, lse;
};
Tol tolerance(const Case& c, const Data& d, float scale, int64_t t, int h, int64_t n_keys) {
  const int kvh = h / (c.n_heads / c.n_kv_heads);
  double maxdot = 0.0, maxv = 0.0;
  for (int64_t j = 0; j < c.n_ctx; ++j) {
    double s = 0.0;
    for (int dd = 0; dd < c.head_dim; ++dd) {
      s += std::fabs(d.q[size_t((t * c.n_heads + h) * c.head_dim + dd)] *
                     d.k[size_t((j * c.n_kv_heads + kvh) * c.head_dim + dd)]);
      maxv = std::max(maxv, double(std::fabs(d.v[size_t((j * c.n_kv_heads + kvh) * c.head_dim + dd)])));
    }
    maxdot = std::max(maxdot, s);
  }
  const double u = test::kU32, ds = c.head_dim * u * scale * maxdot;
  return {2.0 * (2.0 * ds + (2.0 * double(n_keys) + 16.0) * u) * maxv, 2.0 * ds + (double(n_keys) + 16.0) * u};
}

void expect_close(const Case& c, const Data& d, float scale, const std::vector<float>& out,
                  const std::vector<float>& ref, const std::vector<float>* lse, const std::vector<float>* lse_ref,
                  int64_t kv_begin, int64_t kv_end) {
  const int64_t row = int64_t(c.n_heads) * c.head_dim;
  int bad = 0;
  for (int64_t t = 0; t < c.n_q; ++t)
    for (int h = 0; h < c.n_heads; ++h) {
      const int64_t n_keys = std::max<int64_t>(0, std::min<int64_t>(d.pos[size_t(t)] + 1, kv_end) - kv_begin);
      const Tol tol = tolerance(c, d, scale, t, h, n_keys);
      for (int dd = 0; dd < c.head_dim; ++dd) {
        const size_t i = size_t(t * row + h * c.head_dim + dd);
        if (!(std::fabs(out[i] - ref[i]) <= tol.out) && bad++ < 5)
          ADD_FAILURE() << "out[" << t << "," << h << "," << dd << "] " << out[i] << " ref " << ref[i]
                        << " tol " << tol.out;
      }
      if (lse) {
        const float a = (*lse)[size_t(t * c.n_heads + h)], b = (*lse_ref)[size_t(t * c.n_heads + h)];
        if (std::isinf(b)) {
          EXPECT_TRUE(std::isinf(a) && a < 0) << a;
        } else if (!(std::fabs(a - b) <= tol.lse * (1.0 + std::fabs(b))) && bad++ < 5) {
          ADD_FAILURE() << "lse[" << t << "," << h << "] " << a << " ref " << b;
        }
      }
    }
  EXPECT_EQ(bad, 0);
}

const Case kCases[] = {
    {4, 4, 64, 1, 1},     {4, 2, 64, 97, 1},    {8, 2, 128, 130, 17}, {6, 3, 96, 70, 70},
    {2, 1, 7, 33, 5},     {3, 3, 17, 65, 3},    {4, 1, 80, 200, 2},
};

TEST(KernelsAttention, MatchesReference) {
  ThreadPool pool(2);
  uint64_t seed = 1;
  for (const Case& c : kCases)
    for (bool with_lse : {false, true})
      for (int64_t kv_begin : {int64_t(0), c.n_ctx / 3}) {
        SCOPED_TRACE(cat("heads ", c.n_heads, "/", c.n_kv_heads, " hd ", c.head_dim, " ctx ", c.n_ctx, " nq ",
                         c.n_q, " lse ", with_lse, " kv_begin ", kv_begin));
        const Data d = make_data(c, seed++);
        const KvView kv = KvView::contiguous(d.k.data(), d.v.data(), c.n_kv_heads, c.head_dim, c.n_ctx);
        const AttentionShape s{c.n_heads, c.n_kv_heads, c.head_dim, 1.0f / std::sqrt(float(c.head_dim))};
        const int64_t row = int64_t(c.n_heads) * c.head_dim, kv_end = c.n_ctx;
        std::vector<float> ref(static_cast<size_t>(c.n_q * row)), lse_ref(static_cast<size_t>(c.n_q * c.n_heads));
        kernels::attention_ref(d.q.data(), c.n_q, row, d.pos.data(), kv, kv_begin, kv_end, s, ref.data(), row,
                               with_lse ? lse_ref.data() : nullptr);
        test::for_each_path([&](const std::string&) {
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::vector<float> out(size_t(c.n_q * row), 99.0f), lse(size_t(c.n_q * c.n_heads), 99.0f);
            kernels::attention(d.q.data(), c.n_q, row, d.pos.data(), kv, kv_begin, kv_end, s, out.data(), row,
                               with_lse ? lse.data() : nullptr, p);
            expect_close(c, d, s.scale, out, ref, with_lse ? &lse : nullptr, &lse_ref, kv_begin, kv_end);
          }
        });
      }
}

// The same cache stored in shuffled blocks of 16 positions, head-major inside a block, gives the
// same bits as the contiguous layout (same operations in the same order).
TEST(KernelsAttention, PagedEqualsContiguous) {
  ThreadPool pool(2);
  const Case c{8, 2, 64, 150, 9};
  const Data d = make_data(c, 77);
  const int bs = 16;
  const int64_t n_blocks = (c.n_ctx + bs - 1) / bs, block_floats = int64_t(bs) * c.n_kv_heads * c.head_dim;
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  std::iota(table.begin(), table.end(), 0);
  Rng rng(5);
  for (size_t i = table.size() - 1; i > 0; --i) std::swap(table[i], table[size_t(rng.below(i + 1))]);
  const int64_t pool_blocks = n_blocks + 3;  // a few unused blocks, filled with garbage
  std::vector<float> pk(size_t(pool_blocks * block_floats), 1e30f), pv(size_t(pool_blocks * block_floats), 1e30f);
  KvView kv;
  kv.k = pk.data();
  kv.v = pv.data();
  kv.block_table = table.data();
  kv.block_size = bs;
  kv.block_stride = block_floats;
  kv.head_stride = int64_t(bs) * c.head_dim;
  kv.pos_stride = c.head_dim;
  for (int64_t p = 0; p < c.n_ctx; ++p)
    for (int h = 0; h < c.n_kv_heads; ++h)
      for (int dd = 0; dd < c.head_dim; ++dd) {
        const size_t src = size_t((p * c.n_kv_heads + h) * c.head_dim + dd);
        pk[size_t(kv.offset(p, h) + dd)] = d.k[src];
        pv[size_t(kv.offset(p, h) + dd)] = d.v[src];
      }
  const KvView flat = KvView::contiguous(d.k.data(), d.v.data(), c.n_kv_heads, c.head_dim, c.n_ctx);
  const AttentionShape s{c.n_heads, c.n_kv_heads, c.head_dim, 0.125f};
  const int64_t row = int64_t(c.n_heads) * c.head_dim;
  test::for_each_path([&](const std::string&) {
    for (int64_t kv_begin : {0, 21}) {
      std::vector<float> a(static_cast<size_t>(c.n_q * row)), b(a.size()), la(static_cast<size_t>(c.n_q * c.n_heads)), lb(la.size());
      kernels::attention(d.q.data(), c.n_q, row, d.pos.data(), kv, kv_begin, c.n_ctx, s, a.data(), row, la.data(),
                         &pool);
      kernels::attention(d.q.data(), c.n_q, row, d.pos.data(), flat, kv_begin, c.n_ctx, s, b.data(), row,
                         lb.data(), &pool);
      EXPECT_EQ(a, b);
      EXPECT_EQ(la, lb);
      std::vector<float> r(a.size()), lr(la.size());
      kernels::attention_ref(d.q.data(), c.n_q, row, d.pos.data(), kv, kv_begin, c.n_ctx, s, r.data(), row, lr.data());
      expect_close(c, d, s.scale, a, r, &la, &lr, kv_begin, c.n_ctx);
    }
  });
}

// Helix 3: attention over keys split in 3 ranges, each with its LSE, merged by merge_attention,
// equals attention over all keys. Prefill queries at positions 0..n-1, so early queries see no
// key of the later ranges (their partial LSE is -inf). Metric: the bound of the header for the
// full key count, plus (n_parts + 4) * u * max|V| for the merge.
TEST(KernelsAttention, HelixSplitMergeEqualsFull) {
  const Case c{4, 2, 64, 61, 61};
  const Data d = make_data(c, 99);
  const KvView kv = KvView::contiguous(d.k.data(), d.v.data(), c.n_kv_heads, c.head_dim, c.n_ctx);
  const AttentionShape s{c.n_heads, c.n_kv_heads, c.head_dim, 0.125f};
  const int64_t row = int64_t(c.n_heads) * c.head_dim, rows = c.n_q * c.n_heads;
  const int64_t cuts[4] = {0, 20, 41, c.n_ctx};
  std::vector<float> full(static_cast<size_t>(c.n_q * row)), full_lse(static_cast<size_t>(rows));
  kernels::attention_ref(d.q.data(), c.n_q, row, d.pos.data(), kv, 0, c.n_ctx, s, full.data(), row, full_lse.data());
  test::for_each_path([&](const std::string&) {
    std::vector<std::vector<float>> parts(3, std::vector<float>(size_t(c.n_q * row))),
        lses(3, std::vector<float>(size_t(rows)));
    for (int i = 0; i < 3; ++i)
      kernels::attention(d.q.data(), c.n_q, row, d.pos.data(), kv, cuts[i], cuts[i + 1], s, parts[size_t(i)].data(),
                         row, lses[size_t(i)].data(), nullptr);
    EXPECT_TRUE(std::isinf(lses[2][0]));  // query 0 sees no key in [41, 61)
    const float* pp[3] = {parts[0].data(), parts[1].data(), parts[2].data()};
    const float* pl[3] = {lses[0].data(), lses[1].data(), lses[2].data()};
    std::vector<float> merged(full.size()), merged_lse(static_cast<size_t>(rows));
    // Rows of [n_q * n_heads, head_dim]: out rows are contiguous heads (ldo == n_heads*hd).
    kernels::merge_attention(pp, pl, 3, rows, c.head_dim, merged.data(), merged_lse.data());
    int bad = 0;
    for (int64_t t = 0; t < c.n_q; ++t)
      for (int h = 0; h < c.n_heads; ++h) {
        Tol tol = tolerance(c, d, s.scale, t, h, d.pos[size_t(t)] + 1);
        double maxv = 0.0;
        for (float v : d.v) maxv = std::max(maxv, double(std::fabs(v)));
        tol.out += 7.0 * test::kU32 * maxv;
        const int64_t r = t * c.n_heads + h;
        for (int dd = 0; dd < c.head_dim; ++dd) {
          const size_t i = size_t(r * c.head_dim + dd);
          if (!(std::fabs(merged[i] - full[i]) <= tol.out) && bad++ < 5)
            ADD_FAILURE() << "merged[" << t << "," << h << "," << dd << "] " << merged[i] << " full " << full[i];
        }
        EXPECT_NEAR(merged_lse[size_t(r)], full_lse[size_t(r)], (tol.lse + 8 * test::kU32) * (1 + std::fabs(full_lse[size_t(r)])));
      }
    EXPECT_EQ(bad, 0);
  });
}

// GQA heads are grouped per work item by thread count (1 thread: all 8 heads of the kv head
// walk the keys together; 3 threads: one head per item). Same operations per head, same bits.
TEST(KernelsAttention, HeadGroupingDoesNotChangeBits) {
  ThreadPool pool3(3);
  for (const Case& c : {Case{8, 1, 64, 300, 1}, Case{12, 2, 96, 77, 2}, Case{16, 2, 128, 150, 5}}) {
    const Data d = make_data(c, 11);
    const KvView kv = KvView::contiguous(d.k.data(), d.v.data(), c.n_kv_heads, c.head_dim, c.n_ctx);
    const AttentionShape s{c.n_heads, c.n_kv_heads, c.head_dim, 0.1f};
    const int64_t row = int64_t(c.n_heads) * c.head_dim;
    test::for_each_path([&](const std::string&) {
      std::vector<float> a(size_t(c.n_q * row)), b(a.size()), la(size_t(c.n_q * c.n_heads)), lb(la.size());
      kernels::attention(d.q.data(), c.n_q, row, d.pos.data(), kv, 0, c.n_ctx, s, a.data(), row, la.data(), nullptr);
      kernels::attention(d.q.data(), c.n_q, row, d.pos.data(), kv, 0, c.n_ctx, s, b.data(), row, lb.data(), &pool3);
      EXPECT_EQ(a, b);
      EXPECT_EQ(la, lb);
    });
  }
}

TEST(KernelsAttention, MergeAllEmptyAndSingle) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const float o1[2] = {1, 2}, o2[2] = {3, 4}, l1[1] = {ninf}, l2[1] = {ninf};
  const float* parts[2] = {o1, o2};
  const float* lses[2] = {l1, l2};
  float out[2] = {7, 7}, lse = 0;
  kernels::merge_attention(parts, lses, 2, 1, 2, out, &lse);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_TRUE(std::isinf(lse) && lse < 0);
  const float l3[1] = {0.5f};
  const float* lses2[2] = {l1, l3};
  kernels::merge_attention(parts, lses2, 2, 1, 2, out, &lse);
  EXPECT_EQ(out[0], 3.0f);
  EXPECT_EQ(out[1], 4.0f);
  EXPECT_EQ(lse, 0.5f);
  // Two equal LSEs: the mean, and LSE + log 2.
  const float l4[1] = {0.5f};
  const float* lses3[2] = {l4, l3};
  kernels::merge_attention(parts, lses3, 2, 1, 2, out, &lse);
  EXPECT_FLOAT_EQ(out[0], 2.0f);
  EXPECT_FLOAT_EQ(out[1], 3.0f);
  EXPECT_FLOAT_EQ(lse, 0.5f + std::log(2.0f));
}

TEST(KernelsAttention, NoKeysGivesZeroAndMinusInf) {
  const Case c{2, 1, 16, 10, 2};
  const Data d = make_data(c, 3);
  const KvView kv = KvView::contiguous(d.k.data(), d.v.data(), 1, 16, 10);
  const AttentionShape s{2, 1, 16, 0.25f};
  test::for_each_path([&](const std::string&) {
    std::vector<float> out(64, 5.0f), lse(4, 5.0f);
    // Queries at positions 8, 9 but keys restricted to [9, 10): query 8 sees none.
    kernels::attention(d.q.data(), 2, 32, d.pos.data(), kv, 9, 10, s, out.data(), 32, lse.data(), nullptr);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(out[size_t(i)], 0.0f);
    EXPECT_TRUE(std::isinf(lse[0]) && lse[0] < 0);
    EXPECT_TRUE(std::isinf(lse[1]) && lse[1] < 0);
    // Query 9 sees exactly key 9: its output is V[9], its lse the scaled score.
    for (int h = 0; h < 2; ++h) {
      for (int dd = 0; dd < 16; ++dd) EXPECT_FLOAT_EQ(out[size_t(32 + h * 16 + dd)], d.v[size_t(9 * 16 + dd)]);
      double sc = 0;
      for (int dd = 0; dd < 16; ++dd) sc += double(d.q[size_t(32 + h * 16 + dd)]) * d.k[size_t(9 * 16 + dd)];
      EXPECT_NEAR(lse[size_t(2 + h)], sc * 0.25, 1e-5);
    }
  });
}

}  // namespace
}  // namespace loom
