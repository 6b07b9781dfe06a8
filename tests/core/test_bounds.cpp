// SPDX-License-Identifier: MIT
// The distance bounds of the uniform fp64/fp32 modes (Hamerly's bounds with the half-distance
// test) skip work but never change a result: the bounded loop and the brute-force loop
// (useBounds = false) give identical labels, centroids, traces and stop reasons on synthetic
// data chosen to stress the bounds: centres that travel far, exact duplicates and ties, data far
// from the origin (large rounding error of the expanded formula), re-seeded empty clusters.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>

#include "bounds_runs.h"
#include "kmseg/engine.h"
#include "kmseg/error.h"
#include "kmseg/init.h"
#include "kmseg/kmeans.h"
#include "test_data.h"

namespace kmseg {
namespace {

using test::blobs;
using test::randomData;

using test::boundsRunParams;
using test::expectBoundsChangeNothing;

TEST(Bounds, UniformDataAtSeveralK) {
  const Matrix data = randomData(60000, 5, 11);
  for (Mode mode : {Mode::Fp64, Mode::Fp32})
    for (int k : {2, 3, 8, 16, 32}) {
      const Matrix init =
          gatherRows(data, chooseInitialCentres(data, k, Init::RandomPoints, std::uint32_t(k)));
      expectBoundsChangeNothing(data, init, boundsRunParams(mode, k, 80), "uniform");
    }
}

// All initial centres in one corner of well separated blobs: the centres travel across the
// whole data set in the first iterations, the case where the bounds are weakest and where a
// wrong drift would show.
TEST(Bounds, CentresThatTravelFar) {
  const Matrix data = blobs(40000, 3, 8, 0.03, 5);
  for (Mode mode : {Mode::Fp64, Mode::Fp32})
    for (int k : {4, 8, 12}) {
      Matrix init(std::size_t(k), 3);
      for (int j = 0; j < k; ++j)
        for (std::size_t q = 0; q < 3; ++q) init(std::size_t(j), q) = -0.5 + 0.01 * j + 0.001 * q;
      const KMeansResult r =
          expectBoundsChangeNothing(data, init, boundsRunParams(mode, k, 100), "travel");
      EXPECT_GT(r.iterations, 3);
    }
}

// A coarse grid with many exact duplicate points and initial centres placed symmetrically, so
// that computed distances tie exactly (ties go to the lowest index in both loops).
TEST(Bounds, DuplicatesAndExactTies) {
  Matrix data(12000, 2);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> cell(0, 4);
  for (std::size_t i = 0; i < data.rows; ++i) {
    data(i, 0) = 0.25 * cell(rng);
    data(i, 1) = 0.25 * cell(rng);
  }
  for (Mode mode : {Mode::Fp64, Mode::Fp32}) {
    for (int k : {2, 4, 8}) {
      // Centres on the grid's mid-lines and at mirrored positions: grid points at the same
      // distance from two centres exist from the first iteration on.
      Matrix init(std::size_t(k), 2);
      for (int j = 0; j < k; ++j) {
        init(std::size_t(j), 0) = (j % 2 == 0) ? 0.25 : 0.75;
        init(std::size_t(j), 1) = 0.5 + 0.25 * (j / 2) * ((j / 2) % 2 == 0 ? 1 : -1);
      }
      expectBoundsChangeNothing(data, init, boundsRunParams(mode, k, 60), "grid");
    }
  }
}

// Data far from the origin relative to its spread: the expanded formula loses most of its
// digits (in fp32 the computed distances are mostly rounding error), so only the error margin
// of the bounds keeps the skipped samples' labels those of the brute-force loop.
TEST(Bounds, LargeRoundingErrorFarFromTheOrigin) {
  Matrix data = blobs(30000, 4, 6, 0.05, 9);
  for (double& v : data.values) v = 40.0 + v;
  for (Mode mode : {Mode::Fp64, Mode::Fp32})
    for (int k : {3, 8}) {
      const Matrix init = gatherRows(data, chooseInitialCentres(data, k, Init::RandomPoints, 2));
      expectBoundsChangeNothing(data, init, boundsRunParams(mode, k, 60), "offset");
    }
}

// Data so small that the expanded formula's values are subnormal (in fp32, features of about
// 1e-21 give squares of about 1e-42, a few hundred units of the least subnormal 1.4e-45; in fp64
// 1e-160 gives 1e-320): each rounding then errs by up to half that unit whatever the value, an
// absolute error that no relative margin covers.
TEST(Bounds, SubnormalDistances) {
  const Matrix base = blobs(30000, 5, 6, 0.05, 9);
  const std::pair<Mode, double> cases[] = {
      {Mode::Fp32, 3e-21}, {Mode::Fp32, 3e-22}, {Mode::Fp64, 1e-160}};
  for (const auto& [mode, scale] : cases) {
    Matrix data = base;
    for (double& v : data.values) v *= scale;
    for (int k : {3, 8}) {
      const Matrix init = gatherRows(data, chooseInitialCentres(data, k, Init::RandomPoints, 2));
      expectBoundsChangeNothing(data, init, boundsRunParams(mode, k, 40),
                                "subnormal, scale " + numberText(scale));
    }
  }
}

// More centres than distinct points nearby: clusters empty out and are re-seeded, which resets
// the re-seeded sample's bounds.
TEST(Bounds, ReseededEmptyClusters) {
  Matrix data = blobs(5000, 2, 3, 0.01, 4);
  // Three centres near one blob, three far away from everything: some lose all their points.
  const Matrix init = test::centresThatEmpty();
  for (Mode mode : {Mode::Fp64, Mode::Fp32}) {
    const KMeansResult r =
        expectBoundsChangeNothing(data, init, boundsRunParams(mode, 6, 60), "reseed");
    EXPECT_GT(r.emptyClusterEvents, 0);
  }
}

// The bounded loop gives the same results for any thread count (fixed partition of the sums,
// bounds per sample).
TEST(Bounds, SameResultForAnyThreadCount) {
  const Matrix data = blobs(120000, 5, 10, 0.08, 3);
  for (Mode mode : {Mode::Fp64, Mode::Fp32})
    for (int k : {3, 8, 24}) {
      const Matrix init = gatherRows(data, chooseInitialCentres(data, k, Init::RandomPoints, 6));
      KMeansParams p = boundsRunParams(mode, k, 40);
      p.threads = 1;
      const KMeansResult one = makeCpuEngine(1)->run(data, init, p);
      for (int t : {2, 3, 5}) {
        p.threads = t;
        const KMeansResult many = makeCpuEngine(t)->run(data, init, p);
        SCOPED_TRACE(std::string(modeName(mode)) + " K = " + std::to_string(k) + " threads " +
                     std::to_string(t));
        EXPECT_EQ(many.labels, one.labels);
        EXPECT_EQ(many.centroids.values, one.centroids.values);
        EXPECT_EQ(many.iterations, one.iterations);
      }
    }
}

}  // namespace
}  // namespace kmseg
