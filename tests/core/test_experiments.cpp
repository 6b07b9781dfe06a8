// SPDX-License-Identifier: MIT
// The paper's experiments as library functions: measureDistances and pairDistances against the
// single-pair modeDistance and the paper's findings on near points, and makeBlobs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

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
    std::int64_t batchFallbacks = -1;
    const std::vector<double> values = pairDistances(mode, 5.0, w, p, c, &batchFallbacks, 2);
    ASSERT_EQ(values.size(), p.rows * c.rows);
    std::int64_t fallbacks = 0;
    double maxError = 0;
    for (std::size_t i = 0; i < p.rows; ++i)
      for (std::size_t j = 0; j < c.rows; ++j) {
        const PairDistance r = modeDistance(mode, 5.0, w, p.values.data() + i * p.cols,
                                            c.values.data() + j * c.cols, int(p.cols));
        fallbacks += r.fellBack ? 1 : 0;
        EXPECT_EQ(values[i * c.rows + j], r.value) << "pair " << i << ", " << j;
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
    EXPECT_EQ(batchFallbacks, fallbacks);
    EXPECT_EQ(a.maxRelError, maxError);
    EXPECT_GT(a.seconds, 0.0);
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

// A set of more pairs than one chunk holds is measured chunk by chunk with the same result as
// one pass over the whole matrix.
TEST(Experiments, MeasuresLargeSetsChunkByChunk) {
  const Matrix p = normalRows(1500000, 1, 6), c = normalRows(3, 1, 7);
  ASSERT_LT(distanceChunkRows(c.rows), p.rows);
  const DistanceAccuracy chunked =
      measureDistances(Mode::Fp32Fp64, 5.0, Precision::Fp32, p, c, 1e-3, 2);
  DistanceAccuracy whole;
  const std::vector<double> values =
      pairDistances(Mode::Fp32Fp64, 5.0, Precision::Fp32, p, c, &whole.fallbacks, 2);
  addDistanceErrors(whole, Precision::Fp32, p, c, 0, p.rows, values.data(), 1e-3, 2);
  EXPECT_EQ(chunked.pairs, 4500000);
  EXPECT_EQ(chunked.pairs, whole.pairs);
  EXPECT_EQ(chunked.nearPairs, whole.nearPairs);
  EXPECT_GT(chunked.nearPairs, 0);
  EXPECT_EQ(chunked.fallbacks, whole.fallbacks);
  EXPECT_GT(chunked.fallbacks, 0);  // D = 1: the near pairs cancel
  EXPECT_EQ(chunked.maxRelError, whole.maxRelError);
  EXPECT_EQ(chunked.maxRelErrorNear, whole.maxRelErrorNear);
  EXPECT_EQ(chunked.maxRelErrorFar, whole.maxRelErrorFar);
}

TEST(Experiments, MeasureDistancesRefusesBadInput) {
  const Matrix p = normalRows(3, 4, 1), c = normalRows(3, 5, 2);
  EXPECT_THROW(measureDistances(Mode::Fp32, 5.0, Precision::Fp32, p, c), InvalidArgument);
  EXPECT_THROW(measureDistances(Mode::Fp32, 2.0, Precision::Fp32, p, p), InvalidArgument);
  EXPECT_THROW(measureDistances(Mode::Fp32, 5.0, Precision::Fp32, Matrix(), p), InvalidArgument);
  EXPECT_THROW(pairDistances(Mode::Fp32, 5.0, Precision::Fp32, p, c), InvalidArgument);
  Matrix bad = p;
  bad(1, 2) = NAN;
  EXPECT_THROW(pairDistances(Mode::Fp32, 5.0, Precision::Fp32, bad, p), DataError);
  DistanceAccuracy a;
  const std::vector<double> values(9, 1.0);
  EXPECT_THROW(addDistanceErrors(a, Precision::Fp32, p, p, 2, 2, values.data(), 1e-3),
               InvalidArgument);
  EXPECT_THROW(addDistanceErrors(a, Precision::Fp32, p, c, 0, 1, values.data(), 1e-3),
               InvalidArgument);
  EXPECT_EQ(a.pairs, 0);
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
