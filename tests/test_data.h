// SPDX-License-Identifier: MIT
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kmseg/matrix.h"

namespace kmseg::test {

/// An n x d matrix of uniform values in [0, 1) from a seeded generator (shared by the CPU and
/// GPU suites, so both test the same synthetic data for a seed).
inline Matrix randomData(std::size_t n, std::size_t d, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Matrix m(n, d);
  for (double& v : m.values) v = u(rng);
  return m;
}

/// Gaussian blobs: `count` means drawn uniformly from [lo, hi)^d, then sample i is mean
/// (i / run) mod count plus N(0, sigma^2) noise per feature (shared by the CPU and GPU suites).
/// run > 1 gives runs of consecutive samples from one blob, like the pixels of a photo.
inline Matrix blobs(std::size_t n, std::size_t d, int count, double sigma, std::uint32_t seed,
                    double lo = 0.0, double hi = 1.0, std::size_t run = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::normal_distribution<double> noise(0.0, sigma);
  std::vector<double> means(std::size_t(count) * d);
  for (double& m : means) m = u(rng);
  Matrix x(n, d);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t b = (i / run) % std::size_t(count);
    for (std::size_t q = 0; q < d; ++q) x(i, q) = means[b * d + q] + noise(rng);
  }
  return x;
}

/// Six 2-D centres for runs that must re-seed: three near the origin (one blob of such data
/// lies nearby) and three far from everything, which lose all their samples.
inline Matrix centresThatEmpty() {
  const double c[6][2] = {{0.0, 0.0}, {0.001, 0.0}, {0.0, 0.001}, {5, 5}, {-5, 5}, {5, -5}};
  Matrix init(6, 2);
  for (std::size_t j = 0; j < 6; ++j)
    for (std::size_t q = 0; q < 2; ++q) init(j, q) = c[j][q];
  return init;
}

}  // namespace kmseg::test
