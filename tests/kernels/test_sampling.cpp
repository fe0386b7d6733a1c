// argmax, sample vs sample_ref, and the sampled distribution.
#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "kernel_test_util.h"

namespace loom {
namespace {

using kernels::SamplingParams;

TEST(KernelsSampling, ArgmaxLowestIndexOnTies) {
  const float a[6] = {1, 3, 2, 3, -1, 3};
  EXPECT_EQ(kernels::argmax(a, 6), 1);
  EXPECT_EQ(kernels::argmax(a, 1), 0);
  const float b[3] = {-5, -5, -5};
  EXPECT_EQ(kernels::argmax(b, 3), 0);
}

TEST(KernelsSampling, GreedyAndTopK1AreArgmax) {
  Rng rng(1);
  for (int n : {1, 2, 7, 97, 32000}) {
    auto logits = test::random_vec(rng, size_t(n), 3.0);
    if (n > 7) logits[5] = logits[6] = *std::max_element(logits.begin(), logits.end()) + 1.0f;  // a tie
    const int am = kernels::argmax(logits.data(), n);
    if (n > 7) {
      EXPECT_EQ(am, 5);
    }
    for (float u : {0.0f, 0.5f, 0.999f}) {
      EXPECT_EQ(kernels::sample(logits.data(), n, SamplingParams{0.0f, 0, 1.0f}, u), am);
      EXPECT_EQ(kernels::sample(logits.data(), n, SamplingParams{0.0f, 40, 0.5f}, u), am);
      EXPECT_EQ(kernels::sample(logits.data(), n, SamplingParams{1.3f, 1, 1.0f}, u), am);
      EXPECT_EQ(kernels::sample_ref(logits.data(), n, SamplingParams{1.3f, 1, 1.0f}, u), am);
    }
  }
}

// The optimised sampler follows the same procedure with the same floating-point operations
// (kernels.h), so it must return exactly the reference's token for every input.
TEST(KernelsSampling, SameTokenAsReference) {
  Rng rng(2);
  const SamplingParams params[] = {{1.0f, 0, 1.0f},  {0.7f, 40, 1.0f}, {0.7f, 0, 0.9f},  {1.2f, 50, 0.95f},
                                   {0.5f, 3, 0.5f},  {2.0f, 0, 0.1f},  {1.0f, 100000, 0.99f}, {1.0f, 2, 1.0f}};
  int checked = 0;
  for (int n : {1, 2, 7, 97, 1000, 32000}) {
    for (int rep = 0; rep < 4; ++rep) {
      auto logits = test::random_vec(rng, size_t(n), rep == 3 ? 0.01 : 2.0);
      if (rep == 2)
        for (auto& l : logits) l = std::round(l);  // many ties
      for (const SamplingParams& p : params)
        for (int k = 0; k < 8; ++k) {
          const float u = k == 0 ? 0.0f : k == 1 ? 0.99999994f : rng.uniform();
          ASSERT_EQ(kernels::sample(logits.data(), n, p, u), kernels::sample_ref(logits.data(), n, p, u))
              << "n " << n << " T " << p.temperature << " k " << p.top_k << " p " << p.top_p << " u " << u;
          ++checked;
        }
    }
  }
  EXPECT_GT(checked, 1000);
}

// Expected probabilities of the procedure, computed independently: softmax(logits / T), sorted,
// first top_k, renormalised, then the shortest prefix with mass >= top_p, renormalised.
std::vector<double> expected_probs(const std::vector<float>& logits, const SamplingParams& p) {
  const int n = int(logits.size());
  std::vector<double> z(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) z[size_t(i)] = double(logits[size_t(i)]) / p.temperature;
  const double zmax = *std::max_element(z.begin(), z.end());
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return z[size_t(a)] > z[size_t(b)]; });
  const int k = p.top_k > 0 ? std::min(p.top_k, n) : n;
  double total = 0;
  for (int r = 0; r < k; ++r) total += std::exp(z[size_t(order[size_t(r)])] - zmax);
  int keep = k;
  if (p.top_p < 1.0f) {
    double cum = 0;
    for (keep = 0; keep < k;) {
      cum += std::exp(z[size_t(order[size_t(keep)])] - zmax) / total;
      ++keep;
      if (cum >= p.top_p) break;
    }
  }
  std::vector<double> prob(size_t(n), 0.0);
  double mass = 0;
  for (int r = 0; r < keep; ++r) mass += std::exp(z[size_t(order[size_t(r)])] - zmax);
  for (int r = 0; r < keep; ++r) prob[size_t(order[size_t(r)])] = std::exp(z[size_t(order[size_t(r)])] - zmax) / mass;
  return prob;
}

// Empirical frequencies over N = 40000 draws (u from a seeded Rng) against expected_probs:
// Pearson's chi-square over the kept tokens must stay below the 0.9999 quantile of chi2 with
// (kept - 1) degrees of freedom; tokens with probability 0 must never be drawn. The seed is
// fixed, so the test is deterministic; the quantile says how unlikely a correct sampler fails.
TEST(KernelsSampling, EmpiricalDistributionMatches) {
  const double chi2_9999[] = {0, 15.14, 18.42, 21.11, 23.51, 25.74, 27.86, 29.88, 31.83, 33.72};
  const std::vector<float> logits = {0.3f, 1.2f, -0.5f, 2.0f, 0.0f, 1.1f, -2.0f, 0.7f, 1.9f, -0.1f};
  const SamplingParams params[] = {{1.0f, 0, 1.0f}, {0.6f, 0, 1.0f}, {1.0f, 4, 1.0f}, {1.0f, 0, 0.8f}, {1.5f, 6, 0.9f}};
  for (const SamplingParams& p : params) {
    SCOPED_TRACE(cat("T ", p.temperature, " top_k ", p.top_k, " top_p ", p.top_p));
    const auto prob = expected_probs(logits, p);
    Rng rng(42);
    const int draws = 40000;
    std::vector<int> count(logits.size(), 0);
    for (int i = 0; i < draws; ++i) ++count[size_t(kernels::sample(logits.data(), int(logits.size()), p, rng.uniform()))];
    double chi2 = 0;
    int kept = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (prob[i] == 0.0) {
        EXPECT_EQ(count[i], 0) << "token " << i << " is outside top-k/top-p";
        continue;
      }
      ++kept;
      const double e = prob[i] * draws;
      chi2 += (count[i] - e) * (count[i] - e) / e;
    }
    ASSERT_GE(kept, 2);
    EXPECT_LT(chi2, chi2_9999[kept - 1]) << "kept " << kept;
  }
}

}  // namespace
}  // namespace loom
