// SPDX-License-Identifier: MIT
// The CPU engine's bounds for the emulated fp16 / bf16 modes (core/src/emulated_bounds.h): the
// margin holds the emulated expanded distance of every pair, the test's thresholds bracket the
// reliability test's, and runs that use them (useBounds) give the full scan's labels, fallback
// counts, centroids and traces bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "bounds_runs.h"
#include "emulated_bounds.h"
#include "kmseg/distance.h"
#include "kmseg/engine.h"
#include "kmseg/init.h"
#include "kmseg/kmeans.h"
#include "test_data.h"

namespace kmseg {
namespace {

// One pair of the formula, evaluated in T (Math<T>), and the quantities the engine's bounds take
// (emulated_bounds.h): what the bounds must hold.
struct Pair {
  double dHat, sumNorms, s, delta, w;
};

template <class T>
Pair evaluate(const std::vector<double>& xv, const std::vector<double>& cv) {
  using M = Math<T>;
  const int d = int(xv.size());
  std::vector<T> x(xv.size()), c(cv.size());
  for (int q = 0; q < d; ++q) x[q] = M::from(xv[q]), c[q] = M::from(cv[q]);
  const T xx = squaredNorm<T>(x.data(), d), cc = squaredNorm<T>(c.data(), d);
  const Expanded<T> e = expandedDistance<T>(xx, cc, dotProduct<T>(x.data(), c.data(), d));
  Pair p;
  p.dHat = M::toDouble(e.distance);
  p.sumNorms = M::toDouble(e.sumNorms);
  p.s = M::toDouble(xx) + M::toDouble(cc);
  double dot = 0;
  p.w = 0;
  for (int q = 0; q < d; ++q) {
    const double a = M::toDouble(x[q]), b = M::toDouble(c[q]);
    dot += a * b;
    p.w += double(d - q) * std::fabs(a) * std::fabs(b);
  }
  p.delta = p.s - 2.0 * dot;
  return p;
}

// Random pairs at several scales (photo-like features, signed ones, values whose products
// underflow the 16-bit formats, values near fp16's range) and dimensions; half the centres lie
// close to the point, where the expanded formula cancels. Checks every pair against the margin
// and the thresholds, and sets `worst` to the largest share of its margin a pair used.
template <class T>
void checkMargins(Precision low, double& worst) {
  std::mt19937 rng(42);
  worst = 0;
  for (int d : {1, 2, 5, 16})
    for (double scale : {1.0, -1.0, 1e-4, 30.0 / std::sqrt(double(d))}) {
      const double f = reliabilityFactor(5.0, d, low);
      const EmulatedBounds b = EmulatedBounds::make(low, d, double(float(f)), 0x1p-24);
      std::uniform_real_distribution<double> u(scale < 0 ? -1.0 : 0.0, 1.0);
      std::normal_distribution<double> near(0.0, 0.02);
      for (int t = 0; t < 4000; ++t) {
        std::vector<double> x(static_cast<std::size_t>(d)), c(static_cast<std::size_t>(d));
        for (int q = 0; q < d; ++q) {
          x[q] = std::fabs(scale) * u(rng);
          c[q] = t % 2 == 0 ? std::fabs(scale) * u(rng) : x[q] * (1.0 + near(rng));
        }
        const Pair p = evaluate<T>(x, c);
        ASSERT_LT(4.0 * p.s, b.rangeLimit);
        const double m = b.margin(p.s, p.w, p.delta);
        const double err = std::fabs(p.dHat - p.delta);
        ASSERT_LE(err, m) << "d = " << d << ", scale " << scale << ", pair " << t;
        worst = std::max(worst, err / m);
        // The reliability test's threshold fl_H(f fl(s)) in H = fp32.
        const double threshold = double(Math<float>::mul(float(f), float(p.sumNorms)));
        ASSERT_GE(threshold, b.testLo * p.s - b.testAbs);
        ASSERT_LE(threshold, b.testHi * p.s + b.testAbs);
      }
    }
}

TEST(EmulatedBounds, MarginHoldsTheEmulatedFp16Distance) {
  double worst = 0;
  checkMargins<EmuHalf>(Precision::Fp16, worst);
  // Some pair comes close to the margin: half of it would not hold (the bound is not loose).
  EXPECT_GT(worst, 0.5);
}

TEST(EmulatedBounds, MarginHoldsTheEmulatedBf16Distance) {
  double worst = 0;
  checkMargins<EmuBf16>(Precision::Bf16, worst);
  EXPECT_GT(worst, 0.5);
}

using test::blobs;
using test::boundsRunParams;
using test::expectBoundsChangeNothing;
using test::randomData;

constexpr Mode kEmulatedModes[] = {Mode::Fp16,     Mode::Bf16,     Mode::Fp16Fp32,
                                   Mode::Fp16Fp64, Mode::Bf16Fp32, Mode::Bf16Fp64};

Matrix initialCentres(const Matrix& data, int k, std::uint64_t seed) {
  return gatherRows(data, chooseInitialCentres(data, k, Init::RandomPoints, seed));
}

TEST(EmulatedBounds, RunsGiveTheFullScanOnPhotoLikeData) {
  // Runs of consecutive samples from one blob, like the pixels of a photo, in [0, 1]^5.
  const Matrix data = blobs(12000, 5, 12, 0.06, 3, 0.0, 1.0, 16);
  for (Mode mode : kEmulatedModes)
    for (int k : {1, 3, 8, 32})
      expectBoundsChangeNothing(data, initialCentres(data, k, 5), boundsRunParams(mode, k, 25),
                                "blobs");
}

// Many centres (up to 130), K on both sides of 64 and not always a multiple of the pruned pass's
// four vector lanes (its scalar tail).
TEST(EmulatedBounds, RunsGiveTheFullScanWithManyCentres) {
  const Matrix data = blobs(4000, 5, 40, 0.05, 11, 0.0, 1.0, 16);
  for (Mode mode : kEmulatedModes)
    for (int k : {63, 64, 65, 70, 130})
      expectBoundsChangeNothing(data, initialCentres(data, k, 7), boundsRunParams(mode, k, 12),
                                "many centres");
}

TEST(EmulatedBounds, RunsGiveTheFullScanOnUniformDataAndOtherDimensions) {
  for (std::size_t d : {1, 2, 16}) {
    const Matrix data = randomData(6000, d, 9);
    for (Mode mode : kEmulatedModes)
      expectBoundsChangeNothing(data, initialCentres(data, 6, 2), boundsRunParams(mode, 6, 20),
                                "uniform");
  }
}

// The paper's near-points setting (samples a tiny distance from far-away centres): the expanded
// formula cancels, most pairs fall back, and the low-precision distances tie.
TEST(EmulatedBounds, RunsGiveTheFullScanWhereTheFormulaCancels) {
  Matrix data = blobs(8000, 5, 6, 0.002, 4);
  for (double& v : data.values) v = 3.0 + v;
  for (Mode mode : kEmulatedModes)
    expectBoundsChangeNothing(data, initialCentres(data, 6, 1), boundsRunParams(mode, 6, 20),
                              "near");
}

// A coarse grid with exact duplicates and symmetric centres: distances tie exactly.
TEST(EmulatedBounds, RunsGiveTheFullScanWithExactTies) {
  Matrix data(6000, 2);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> cell(0, 4);
  for (double& v : data.values) v = 0.25 * cell(rng);
  Matrix init(4, 2);
  for (int j = 0; j < 4; ++j) {
    init(std::size_t(j), 0) = (j % 2 == 0) ? 0.25 : 0.75;
    init(std::size_t(j), 1) = 0.5 + 0.25 * (j / 2) * ((j / 2) % 2 == 0 ? 1 : -1);
  }
  for (Mode mode : kEmulatedModes)
    expectBoundsChangeNothing(data, init, boundsRunParams(mode, 4, 20), "grid");
}

// Signed data (z-scores), values so small that the 16-bit products underflow, and values so
// large that fp16's range ends the bounds' use (the engine then scans every pair).
TEST(EmulatedBounds, RunsGiveTheFullScanAtEveryScale) {
  for (double scale : {-1.0, 3e-4, 20.0, 110.0, 200.0}) {
    Matrix data = blobs(5000, 5, 8, 0.1, 6, scale < 0 ? -2.0 : 0.0, 1.0);
    for (double& v : data.values) v *= std::fabs(scale);
    for (Mode mode : kEmulatedModes)
      expectBoundsChangeNothing(data, initialCentres(data, 8, 3), boundsRunParams(mode, 8, 15),
                                "scale " + std::to_string(scale));
  }
}

TEST(EmulatedBounds, RunsGiveTheFullScanWhenClustersEmpty) {
  const Matrix data = blobs(4000, 2, 3, 0.01, 4);
  for (Mode mode : kEmulatedModes) {
    KMeansParams p = boundsRunParams(mode, 6, 20);
    expectBoundsChangeNothing(data, test::centresThatEmpty(), p, "reseed");
    p.useBounds = true;
    EXPECT_GT(makeCpuEngine(2)->run(data, test::centresThatEmpty(), p).emptyClusterEvents, 0);
  }
}

}  // namespace
}  // namespace kmseg
