// Deterministic random numbers: every random source has its own seed (weights of synthetic
// models, sampling, simulator arrivals), so runs repeat exactly on any machine.
#pragma once

#include <cmath>
#include <cstdint>

namespace loom {

// xoshiro256** seeded through splitmix64. Same seed -> same stream on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed) {
    for (auto& w : s_) {
      seed += 0x9e3779b97f4a7c15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      w = z ^ (z >> 31);
    }
  }
  uint64_t next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1) with 24 bits (exactly representable as float).
  float uniform() { return float(next_u64() >> 40) * (1.0f / 16777216.0f); }
  // Uniform in [0, 1) with 53 bits.
  double uniform_double() { return double(next_u64() >> 11) * (1.0 / 9007199254740992.0); }
  // Standard normal by Box-Muller.
  double normal() {
    double u1 = uniform_double();
    if (u1 < 1e-300) u1 = 1e-300;
    const double u2 = uniform_double();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return n ? next_u64() % n : 0; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace loom
