// SPDX-License-Identifier: MIT
#include "kmseg/init.h"

#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "kmseg/error.h"

namespace kmseg {

namespace {

__extension__ typedef unsigned __int128 Uint128;  // GCC/Clang extension; exact 64x64 product

// SplitMix64: a tiny generator whose output is fully specified, so a seed gives the same
// centres on every platform (std:: distributions are implementation-defined).
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, n), n >= 1, without bias (Lemire's multiply-and-reject).
  std::uint64_t below(std::uint64_t n) {
    Uint128 m = (Uint128)next() * n;
    auto low = std::uint64_t(m);
    if (low < n) {
      const std::uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = (Uint128)next() * n;
        low = std::uint64_t(m);
      }
    }
    return std::uint64_t(m >> 64);
  }
  /// Uniform double in [0, 1) with 53 random bits.
  double unit() { return double(next() >> 11) * 0x1p-53; }

 private:
  std::uint64_t state_;
};

// Hash and equality of a row by the bit patterns of its values (+0 and -0 are folded).
struct RowKey {
  const Matrix* m;
  std::size_t operator()(std::int64_t i) const {
    std::uint64_t h = 1469598103934665603ull;
    const double* r = m->row(std::size_t(i));
    for (std::size_t j = 0; j < m->cols; ++j) {
      double v = r[j] == 0.0 ? 0.0 : r[j];
      std::uint64_t b;
      std::memcpy(&b, &v, sizeof b);
      h = (h ^ b) * 1099511628211ull;
      h ^= h >> 29;
    }
    return std::size_t(h);
  }
  bool operator()(std::int64_t a, std::int64_t b) const {
    const double* ra = m->row(std::size_t(a));
    const double* rb = m->row(std::size_t(b));
    for (std::size_t j = 0; j < m->cols; ++j)
      if (!(ra[j] == rb[j])) return false;
    return true;
  }
};

void checkK(const Matrix& data, int k) {
  if (data.rows == 0 || data.cols == 0) throw InvalidArgument("the feature matrix is empty");
  if (k < 1) throw InvalidArgument("K = " + std::to_string(k) + " is invalid: K must be >= 1");
  if (std::size_t(k) > data.rows)
    throw InvalidArgument("K = " + std::to_string(k) + " exceeds the number of samples (" +
                          std::to_string(data.rows) + ")");
}

[[noreturn]] void tooFewDistinct(int k, std::size_t distinct) {
  throw DataError("K = " + std::to_string(k) + " exceeds the number of distinct feature rows (" +
                  std::to_string(distinct) + "); choose K <= " + std::to_string(distinct));
}

std::vector<std::int64_t> randomDistinct(const Matrix& data, int k, SplitMix64& rng) {
  const auto n = std::int64_t(data.rows);
  RowKey key{&data};
  std::unordered_set<std::int64_t, RowKey, RowKey> chosenRows(std::size_t(k) * 2, key, key);
  std::unordered_map<std::int64_t, std::int64_t> swapped;  // sparse Fisher-Yates permutation
  std::vector<std::int64_t> chosen;
  chosen.reserve(std::size_t(k));
  for (std::int64_t step = 0; step < n && std::ssize(chosen) < k; ++step) {
    const std::int64_t j = step + std::int64_t(rng.below(std::uint64_t(n - step)));
    auto at = [&](std::int64_t p) {
      auto it = swapped.find(p);
      return it == swapped.end() ? p : it->second;
    };
    const std::int64_t pick = at(j);
    swapped[j] = at(step);
    if (chosenRows.insert(pick).second) chosen.push_back(pick);
  }
  if (std::ssize(chosen) < k) tooFewDistinct(k, chosen.size());
  return chosen;
}

double sqDist(const Matrix& data, std::size_t a, std::size_t b) {
  double s = 0.0;
  for (std::size_t j = 0; j < data.cols; ++j) {
    const double t = data(a, j) - data(b, j);
    s += t * t;
  }
  return s;
}

std::vector<std::int64_t> kmeansPlusPlus(const Matrix& data, int k, SplitMix64& rng) {
  const std::size_t n = data.rows;
  std::vector<std::int64_t> chosen{std::int64_t(rng.below(n))};
  std::vector<double> d2(n);
  for (std::size_t i = 0; i < n; ++i) d2[i] = sqDist(data, i, std::size_t(chosen[0]));
  while (std::ssize(chosen) < k) {
    double total = 0.0;  // sequential: a fixed order, so the draw is reproducible
    for (double v : d2) total += v;
    if (!(total > 0.0)) {
      RowKey key{&data};
      std::unordered_set<std::int64_t, RowKey, RowKey> distinct(1024, key, key);
      for (std::size_t i = 0; i < n; ++i) distinct.insert(std::int64_t(i));
      tooFewDistinct(k, distinct.size());
    }
    const double target = rng.unit() * total;
    double acc = 0.0;
    std::size_t pick = n;
    for (std::size_t i = 0; i < n; ++i) {
      if (d2[i] <= 0.0) continue;  // rows equal to a chosen centre are never drawn
      acc += d2[i];
      pick = i;
      if (acc > target) break;
    }
    chosen.push_back(std::int64_t(pick));
    for (std::size_t i = 0; i < n; ++i) d2[i] = std::min(d2[i], sqDist(data, i, pick));
  }
  return chosen;
}

}  // namespace

std::vector<std::int64_t> chooseInitialCentres(const Matrix& data, int k, Init init,
                                               std::uint64_t seed) {
  checkK(data, k);
  SplitMix64 rng(seed);
  return init == Init::KMeansPlusPlus ? kmeansPlusPlus(data, k, rng) : randomDistinct(data, k, rng);
}

Matrix gatherRows(const Matrix& data, const std::vector<std::int64_t>& indices) {
  Matrix out(indices.size(), data.cols);
  for (std::size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || std::size_t(indices[i]) >= data.rows)
      throw InvalidArgument("row index " + std::to_string(indices[i]) + " is outside [0, " +
                            std::to_string(data.rows) + ")");
    std::memcpy(out.row(i), data.row(std::size_t(indices[i])), data.cols * sizeof(double));
  }
  return out;
}

}  // namespace kmseg
