// SPDX-License-Identifier: MIT
// The reliability test and the fallback on the paper's far- and near-points settings (§6.1.1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "kmseg/distance.h"
#include "kmseg/engine.h"
#include "kmseg/init.h"
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

// fallsBack is mixedDistance's test alone: the same verdict on every pair, and both verdicts
// occur (near pairs fall back, far ones do not).
TEST(Reliability, FallsBackIsTheTestOfMixedDistance) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<double> g(0.0, 1.0);
  constexpr int d = 5;
  const float factor = float(reliabilityFactor(5.0, d, Precision::Fp16));
  int fell = 0;
  const int pairs = 2000;
  for (int t = 0; t < pairs; ++t) {
    const bool near = t % 2 == 0;
    EmuHalf xl[d], cl[d];
    float xh[d], ch[d];
    for (int i = 0; i < d; ++i) {
      const double x = u(rng), c = near ? x + 0.01 * g(rng) : u(rng);
      xh[i] = float(x), ch[i] = float(c);
      xl[i] = convert<EmuHalf>(xh[i]), cl[i] = convert<EmuHalf>(ch[i]);
    }
    const Expanded<EmuHalf> e = expandedDistance<EmuHalf>(
        squaredNorm<EmuHalf>(xl, d), squaredNorm<EmuHalf>(cl, d), dotProduct<EmuHalf>(xl, cl, d));
    bool fellBack = false;
    mixedDistance<EmuHalf, float>(e, xh, ch, d, factor, &fellBack);
    const bool alone = fallsBack<EmuHalf, float>(e, factor);
    ASSERT_EQ(alone, fellBack) << "pair " << t;
    fell += fellBack;
  }
  EXPECT_GT(fell, 0);
  EXPECT_LT(fell, pairs);
}

// A pair whose fp16 expanded distance overflows while its sum of norms does not: x = -200,
// c = 150 gives s = 40000 + 22500 (finite) and d^ = s + 60000 = infinity. An infinite d^ is above
// every threshold, but it is no distance: the pair must fall back and take the direct value
// 350^2 = 122500, which fp32 and fp64 hold exactly.
TEST(Reliability, InfiniteLowPrecisionDistanceFallsBack) {
  const double x[] = {-200.0}, c[] = {150.0};
  for (Mode mode : {Mode::Fp16Fp32, Mode::Fp16Fp64}) {
    const PairDistance r = modeDistance(mode, 5.0, Precision::Fp64, x, c, 1);
    EXPECT_TRUE(r.fellBack) << modeName(mode);
    EXPECT_EQ(r.value, 122500.0) << modeName(mode);
  }
  // The test itself, in both high precisions: infinity fails whatever the sum of norms.
  EXPECT_FALSE(reliable<float>(INFINITY, 62500.f, 0.01f));
  EXPECT_FALSE(reliable<double>(INFINITY, 62500.0, 0.01));
  EXPECT_FALSE(reliable<double>(NAN, 62500.0, 0.01));
  EXPECT_FALSE(reliable<double>(1.0, INFINITY, 0.01));
  EXPECT_TRUE(reliable<double>(1.0, 62500.0, 1e-6));
  // Uniform fp16 keeps the overflowed value: that is the mode.
  EXPECT_TRUE(std::isinf(modeDistance(Mode::Fp16, 5.0, Precision::Fp64, x, c, 1).value));
}

TEST(Reliability, UniformFp32IsAccurateOnFarPoints) {
  EXPECT_LT(measure(Mode::Fp32, Precision::Fp32, false, 16, 1000, 3).maxRelError, 1e-5);
  EXPECT_LT(measure(Mode::Fp64, Precision::Fp64, false, 16, 1000, 3).maxRelError, 1e-13);
}

// countNormOverflows computes the norm as the engines do. (180.24, 181.70) has an exact squared
// norm of 65501.35, below fp16's largest value 65504; in fp16 the row is (180.25, 181.75) and
// fma(181.75, 181.75, fl(180.25^2) = 32496) = 65529.06 rounds to infinity.
TEST(NormOverflow, CountsRowsWhoseNormIsInfiniteInTheModesArithmetic) {
  Matrix x(5, 2);
  const double v[] = {180.24, 181.70, 255.0, 0.0, 300.0, 0.0, 0.5, 0.25, -400.0, 10.0};
  std::copy(v, v + 10, x.values.begin());
  // 255^2 = 65025 stays finite (65024 in fp16); 300^2 and 400^2 + 10^2 do not.
  EXPECT_EQ(countNormOverflows(Mode::Fp16, Precision::Fp32, x), 3);
  EXPECT_EQ(countNormOverflows(Mode::Fp16Fp32, Precision::Fp32, x), 3);
  EXPECT_EQ(countNormOverflows(Mode::Fp16Fp64, Precision::Fp64, x), 3);
  // With the largest magnitude given: read when it allows an overflow, not read when it cannot.
  EXPECT_EQ(countNormOverflows(Mode::Fp16, Precision::Fp32, x, 400.0), 3);
  EXPECT_EQ(countNormOverflows(Mode::Fp16, Precision::Fp32, x, 100.0), 0);  // 2 x 100^2 < 32752
  // The CPU engine counts from its own low-precision norms: the same rows.
  KMeansParams p;
  p.k = 1;
  p.maxIterations = 1;
  for (Mode m : {Mode::Fp16, Mode::Fp16Fp64, Mode::Bf16}) {
    p.mode = m;
    EXPECT_EQ(makeCpuEngine(1)->run(x, gatherRows(x, {0}), p).normOverflows,
              m == Mode::Bf16 ? 0 : 3)
        << modeName(m);
  }
  for (Mode m : {Mode::Fp64, Mode::Fp32, Mode::Bf16, Mode::Bf16Fp32, Mode::Fp32Fp64})
    EXPECT_EQ(countNormOverflows(m, Precision::Fp32, x), 0) << modeName(m);
  // Beyond bf16's and fp32's range (about 3.4e38) only in a squared norm of 2e19.
  Matrix big(1, 1);
  big(0, 0) = 2e19;
  EXPECT_EQ(countNormOverflows(Mode::Bf16, Precision::Fp64, big), 1);
  EXPECT_EQ(countNormOverflows(Mode::Fp32, Precision::Fp64, big), 1);
  EXPECT_EQ(countNormOverflows(Mode::Fp64, Precision::Fp64, big), 0);
}

TEST(NormOverflow, NoteSaysWhatTheModeDoesWithThem) {
  const std::string uniform = normOverflowNote(Mode::Fp16, 20, 1000000);
  EXPECT_NE(uniform.find("20 of 1000000 pixels"), std::string::npos) << uniform;
  EXPECT_NE(uniform.find("fp16's largest value (65504)"), std::string::npos) << uniform;
  EXPECT_NE(uniform.find("cannot rank their centres"), std::string::npos) << uniform;
  const std::string mixed = normOverflowNote(Mode::Fp16Fp64, 1, 10);
  EXPECT_NE(mixed.find("1 of 10 pixels has"), std::string::npos) << mixed;
  EXPECT_NE(mixed.find("fall back to fp64"), std::string::npos) << mixed;
}

}  // namespace
}  // namespace kmseg
