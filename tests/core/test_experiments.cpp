// SPDX-License-Identifier: MIT
// The paper's experiments as library functions: measureDistances against the single-pair
// modeDistance and the paper's findings on near points, and makeBlobs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kmseg/error.h"
#include "kmseg/experiments.h"
#include "kmseg/kmeans.h"
#include "kmseg/pair_distance.h"

namespace kmseg {
namespace {

Matrix normalRows(std::size_t n, std::size_t d, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Matrix m(n, d);
  for (double& v : m.values) v = normal(rng);
  return m;
}

Matrix nearRows(const Matrix& p, double noise, std::uint32_t seed) {
  Matrix c = normalRows(p.rows, p.cols, seed);
  for (std::size_t e = 0; e < c.values.size(); ++e) c.values[e] = p.values[e] + noise * c.values[e];
  return c;
}

// Every pair's value and fallback as modeDistance gives them: the batched evaluation must count
// the same fallbacks and find the same largest error.
TEST(Experiments, MeasureDistancesAgreesWithModeDistancePairByPair) {
  const Matrix p = normalRows(12, 9, 1);
  const Matrix c = nearRows(p, 1e-3, 2);
  for (Mode mode : kAllModes) {
    const Precision w = resolveWorking(mode, Working::Auto);
    const DistanceAccuracy a = measureDistances(mode, 5.0, w, p, c, 1e-3, 1);
    std::int64_t fallbacks = 0;
    double maxError = 0;
    for (std::size_t i = 0; i < p.rows; ++i)
      for (std::size_t j = 0; j < c.rows; ++j) {
        const PairDistance r = modeDistance(mode, 5.0, w, p.values.data() + i * p.cols,
                                            c.values.data() + j * c.cols, int(p.cols));
        fallbacks += r.fellBack ? 1 : 0;
        long double exact = 0;
        for (std::size_t q = 0; q < p.cols; ++q) {
          const long double t = (long double)roundTo(w, p(i, q)) - (long double)roundTo(w, c(j, q));
          exact += t * t;
        }
        maxError = std::max(maxError, double(std::fabs((long double)r.value - exact) / exact));
      }
    SCOPED_TRACE(std::string(modeName(mode)));
    EXPECT_EQ(a.pairs, 144);
    EXPECT_EQ(a.nearPairs, 12);  // the diagonal: 9 x (1e-3)^2 on average
    EXPECT_EQ(a.fallbacks, fallbacks);
    EXPECT_EQ(a.maxRelError, maxError);
    EXPECT_EQ(a.maxRelError, std::max(a.maxRelErrorNear, a.maxRelErrorFar));
  }
}

// The paper's section 6.1.1 at D = 128: on near points the uniform low-precision modes lose
// every digit while the fp16 mixed modes keep the near pairs to fp32's level; on random points
// fp16's error is at its unit roundoff's level. Threads do not change the result.
TEST(Experiments, MixedModesRestoreTheNearPairsThatUniformModesLose) {
  const Matrix p = normalRows(40, 128, 3);
  const Matrix near = nearRows(p, 1e-6, 4);
  const Matrix random = normalRows(40, 128, 5);
  const DistanceAccuracy fp16 = measureDistances(Mode::Fp16, 5.0, Precision::Fp32, p, near);
  const DistanceAccuracy mixed = measureDistances(Mode::Fp16Fp32, 5.0, Precision::Fp32, p, near);
  const DistanceAccuracy fp32 = measureDistances(Mode::Fp32, 5.0, Precision::Fp32, p, near);
  EXPECT_GE(fp16.maxRelErrorNear, 0.5);
  EXPECT_GT(fp32.maxRelErrorNear, 1.0);
  EXPECT_LT(mixed.maxRelErrorNear, 1e-5);
  EXPECT_GE(mixed.fallbacks, 40);  // at least the near pairs fell back
  EXPECT_LT(measureDistances(Mode::Fp16, 5.0, Precision::Fp32, p, random).maxRelError, 0.05);
  const DistanceAccuracy two =
      measureDistances(Mode::Fp16Fp32, 5.0, Precision::Fp32, p, near, 1e-3, 2);
  EXPECT_EQ(two.fallbacks, mixed.fallbacks);
  EXPECT_EQ(two.maxRelError, mixed.maxRelError);
}

TEST(Experiments, MeasureDistancesRefusesBadInput) {
  const Matrix p = normalRows(3, 4, 1), c = normalRows(3, 5, 2);
  EXPECT_THROW(measureDistances(Mode::Fp32, 5.0, Precision::Fp32, p, c), InvalidArgument);
  EXPECT_THROW(measureDistances(Mode::Fp32, 2.0, Precision::Fp32, p, p), InvalidArgument);
  EXPECT_THROW(measureDistances(Mode::Fp32, 5.0, Precision::Fp32, Matrix(), p), InvalidArgument);
  // Identical rows: d* = 0, and a mode that gives 0 has error 0.
  const DistanceAccuracy same = measureDistances(Mode::Fp64, 5.0, Precision::Fp64, p, p);
  EXPECT_EQ(same.nearPairs, 3);
  EXPECT_EQ(same.maxRelErrorNear, 0.0);
}

TEST(Experiments, BlobsAreSeededAndRoundRobinOverTheirCentres) {
  const Matrix a = makeBlobs(50, 3, 4, 1.0, 9), b = makeBlobs(50, 3, 4, 1.0, 9);
  EXPECT_EQ(a.values, b.values);
  EXPECT_NE(makeBlobs(50, 3, 4, 1.0, 10).values, a.values);
  const Matrix exact = makeBlobs(12, 3, 4, 0.0, 9);  // sigma 0: the centres themselves
  for (std::size_t i = 0; i + 4 < exact.rows; ++i)
    for (std::size_t q = 0; q < 3; ++q) {
      EXPECT_EQ(exact(i, q), exact(i + 4, q));
      EXPECT_GE(exact(i, q), -10.0);
      EXPECT_LT(exact(i, q), 10.0);
    }
  EXPECT_NE(exact(0, 0), exact(1, 0));
  EXPECT_THROW(makeBlobs(0, 3, 4, 1.0, 1), InvalidArgument);
  EXPECT_THROW(makeBlobs(5, 3, 4, -1.0, 1), InvalidArgument);
}

}  // namespace
}  // namespace kmseg
