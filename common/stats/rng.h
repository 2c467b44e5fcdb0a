// Seeded randomness for kiln's statistics and simulations. A small self-contained generator
// (xoshiro256** seeded through splitmix64) and hand-written distributions, because the
// std::*_distribution classes give different numbers on different standard libraries and one
// seed must reproduce a result everywhere.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

namespace kiln::stats {

// splitmix64 step: a good 64-bit mixer, used to seed xoshiro and to derive sub-seeds.
inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// One sub-seed per (seed, stream) pair, so subsystems and trials draw independent streams.
inline std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) {
  std::uint64_t state = seed ^ splitmix64(stream);
  return splitmix64(state);
}

// A seed from a name (a run id, say) that is the same on every platform and standard library,
// unlike std::hash: FNV-1a over the bytes, then splitmix64 to spread the bits.
inline std::uint64_t stable_hash(std::string_view bytes) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  return splitmix64(h);
}

// xoshiro256** (Blackman and Vigna), 2^256-1 period.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) {
    std::uint64_t state = seed;
    for (auto& word : s_) word = splitmix64(state);
  }

  std::uint64_t next_u64() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform01() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

  double uniform(double low, double high) { return low + (high - low) * uniform01(); }

  // Uniform integer in [0, bound). Lemire's multiply-shift; the bias (bound / 2^64) is far
  // below anything a statistic here can see, so no rejection step.
  std::uint64_t below(std::uint64_t bound) {
    __extension__ using u128 = unsigned __int128;
    return static_cast<std::uint64_t>((static_cast<u128>(next_u64()) * bound) >> 64);
  }

  bool bernoulli(double probability) { return uniform01() < probability; }

  // Exponential with `rate` events per unit, by inversion.
  double exponential(double rate) { return -std::log1p(-uniform01()) / rate; }

  double lognormal(double log_median, double sigma) { return std::exp(log_median + sigma * normal()); }

  // Standard normal by the Marsaglia polar method (only log and sqrt, no trigonometry).
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u = 0;
    double v = 0;
    double s = 0;
    do {
      u = 2.0 * uniform01() - 1.0;
      v = 2.0 * uniform01() - 1.0;
      s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    const double factor = std::sqrt(-2.0 * std::log(s) / s);
    spare_ = v * factor;
    has_spare_ = true;
    return u * factor;
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  std::uint64_t s_[4] = {};
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace kiln::stats
