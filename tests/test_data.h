// SPDX-License-Identifier: MIT
#pragma once

#include <cstdint>
#include <random>

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

}  // namespace kmseg::test
