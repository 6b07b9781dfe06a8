// SPDX-License-Identifier: MIT
// The reliability test and the fallback on the paper's far- and near-points settings (§6.1.1).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kmseg/distance.h"
#include "kmseg/pair_distance.h"

namespace kmseg {
namespace {

long double exactSquaredDistance(const std::vector<double>& x, const std::vector<double>& c) {
  long double s = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const long double t = (long double)x[i] - (long double)c[i];
    s += t * t;
  }
  return s;
}

struct Stats {
  double maxRelError = 0;
  double fallbackRatio = 0;
};

// Pairs (p, c): far = independent uniform points; near = c = p + eps * N(0, 1).
Stats measure(Mode mode, Precision working, bool near, int d, int pairs, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<double> g(0.0, 1.0);
  Stats s;
  int fell = 0;
  for (int t = 0; t < pairs; ++t) {
    std::vector<double> x(static_cast<std::size_t>(d)), c(static_cast<std::size_t>(d));
    for (int i = 0; i < d; ++i) x[i] = u(rng);
    for (int i = 0; i < d; ++i) c[i] = near ? x[i] + 1e-4 * g(rng) : u(rng);
    // Measure against the points as the working precision holds them: the quantisation of the
    // data to W is not what the reliability test is about.
    std::vector<double> xw(x), cw(c);
    if (working == Precision::Fp32)
      for (int i = 0; i < d; ++i) xw[i] = float(x[i]), cw[i] = float(c[i]);
    const long double exact = exactSquaredDistance(xw, cw);
    const PairDistance r = modeDistance(mode, 5.0, working, x.data(), c.data(), d);
    fell += r.fellBack;
    s.maxRelError = std::max(s.maxRelError, double(std::fabs(r.value - exact) / exact));
  }
  s.fallbackRatio = double(fell) / pairs;
  return s;
}

TEST(Reliability, FactorIncludesTheFactorTwoOfEquation16) {
  const double u = unitRoundoff(Precision::Fp16);
  EXPECT_DOUBLE_EQ(reliabilityFactor(5.0, 5, Precision::Fp16), 5.0 * 2.0 * 7 * u / (1 - 7 * u));
}

TEST(Reliability, FarPointsStayInLowPrecision) {
  for (Mode mode : {Mode::Fp16Fp32, Mode::Fp16Fp64, Mode::Fp32Fp64}) {
    const Stats s = measure(mode, Precision::Fp64, false, 16, 2000, 1);
    // Only pairs that happen to lie close fall back: a few in a thousand for fp16 at d = 16.
    EXPECT_LT(s.fallbackRatio, mode == Mode::Fp32Fp64 ? 1e-9 : 0.02) << modeName(mode);
    EXPECT_LT(s.maxRelError, 2.0 / (5.0 - 2.0)) << modeName(mode);  // the bound of eq. 19
    EXPECT_LT(s.maxRelError, 2e-2) << modeName(mode);
  }
}

TEST(Reliability, NearPointsFallBackAndRestoreAccuracy) {
  // Uniform fp16/bf16: the expanded formula cancels catastrophically.
  EXPECT_GT(measure(Mode::Fp16, Precision::Fp64, true, 16, 500, 2).maxRelError, 1.0);
  EXPECT_GT(measure(Mode::Bf16, Precision::Fp64, true, 16, 500, 2).maxRelError, 1.0);
  // Mixed modes detect every such pair and recompute it directly in high precision.
  for (Mode mode : {Mode::Fp16Fp64, Mode::Bf16Fp64, Mode::Fp32Fp64}) {
    const Stats s = measure(mode, Precision::Fp64, true, 16, 500, 2);
    EXPECT_EQ(s.fallbackRatio, 1.0) << modeName(mode);
    EXPECT_LT(s.maxRelError, 1e-12) << modeName(mode);
  }
  for (Mode mode : {Mode::Fp16Fp32, Mode::Bf16Fp32}) {
    const Stats s = measure(mode, Precision::Fp32, true, 16, 500, 2);
    EXPECT_EQ(s.fallbackRatio, 1.0) << modeName(mode);
    EXPECT_LT(s.maxRelError, 1e-5) << modeName(mode);
  }
}

TEST(Reliability, UniformFp32IsAccurateOnFarPoints) {
  EXPECT_LT(measure(Mode::Fp32, Precision::Fp32, false, 16, 1000, 3).maxRelError, 1e-5);
  EXPECT_LT(measure(Mode::Fp64, Precision::Fp64, false, 16, 1000, 3).maxRelError, 1e-13);
}

}  // namespace
}  // namespace kmseg
