// SPDX-License-Identifier: MIT
// The CPU engine keeps the Kahan partials of a sum block (4096 samples) from one pass to the next
// when none of the block's labels changed. Whatever the pass kept or recomputed, the centres after
// iteration t must be the means of the labels of iteration t: checked against means accumulated
// here in long double, after every iteration of runs with many sum blocks, with and without the
// distance bounds, in a mixed mode and across re-seeding of empty clusters.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kmseg/engine.h"
#include "kmseg/init.h"
#include "kmseg/kmeans.h"
#include "test_data.h"

namespace kmseg {
namespace {

using test::blobs;

// Expects the centroids of `r` to be the means of its labels, to `relTol` of the data's scale.
void expectMeansOfLabels(const Matrix& data, const KMeansResult& r, int k, double relTol,
                         const std::string& what) {
  const std::size_t d = data.cols;
  std::vector<long double> sum(std::size_t(k) * d, 0.0L);
  std::vector<std::int64_t> count(std::size_t(k), 0);
  for (std::size_t i = 0; i < data.rows; ++i) {
    const auto j = std::size_t(r.labels[i]);
    ++count[j];
    for (std::size_t q = 0; q < d; ++q) sum[j * d + q] += data(i, q);
  }
  for (std::size_t j = 0; j < std::size_t(k); ++j) {
    ASSERT_GT(count[j], 0) << what << ": cluster " << j << " is empty";
    for (std::size_t q = 0; q < d; ++q) {
      const double mean = double(sum[j * d + q] / count[j]);
      EXPECT_NEAR(r.centroids(j, q), mean, relTol * std::max(1.0, std::fabs(mean)))
          << what << ": cluster " << j << ", feature " << q;
    }
  }
}

KMeansParams paramsFor(Mode mode, int k, int maxIterations, bool bounds) {
  KMeansParams p;
  p.k = k;
  p.mode = mode;
  p.maxIterations = maxIterations;
  p.tolerance = 0;
  p.detectCycles = false;
  p.useBounds = bounds;
  p.threads = 2;
  return p;
}

TEST(SumBlockPartials, CentresAreTheMeansOfTheLabelsAfterEveryIteration) {
  // 300000 samples: 74 sum blocks; few labels change in the late iterations, so most blocks
  // keep their partials there.
  const Matrix data = blobs(300000, 5, 8, 0.09, 17);
  const Matrix init = gatherRows(data, chooseInitialCentres(data, 8, Init::RandomPoints, 3));
  auto engine = makeCpuEngine(2);
  struct Case {
    Mode mode;
    bool bounds;
    double tol;  // Kahan sums in W: a few units of W's rounding
  };
  for (const Case& c : {Case{Mode::Fp64, true, 1e-12}, Case{Mode::Fp64, false, 1e-12},
                        Case{Mode::Fp32, true, 2e-6}, Case{Mode::Fp16Fp32, false, 2e-6}}) {
    int lastChanged = -1;
    for (int t : {1, 2, 3, 5, 8, 13, 21, 34, 55}) {
      const std::string what = std::string(modeName(c.mode)) + (c.bounds ? " bounded" : "") +
                               ", after " + std::to_string(t) + " iterations";
      const KMeansResult r = engine->run(data, init, paramsFor(c.mode, 8, t, c.bounds));
      expectMeansOfLabels(data, r, 8, c.tol, what);
      if (r.iterations == t) lastChanged = int(r.trace.back().changed);
    }
    // The runs reached the regime the partials are kept in: few labels change per iteration.
    EXPECT_GE(lastChanged, 0);
    EXPECT_LT(lastChanged, 3000) << modeName(c.mode);
  }
}

TEST(SumBlockPartials, CentresAreTheMeansAfterReseeding) {
  // Three blobs; six centres, three far from everything: they lose their samples and are
  // re-seeded, after which the pass recomputes every partial.
  const Matrix data = blobs(60000, 2, 3, 0.02, 5);
  const Matrix init = test::centresThatEmpty();
  auto engine = makeCpuEngine(2);
  for (int t : {1, 2, 3, 4, 6, 10, 30}) {
    const KMeansResult r = engine->run(data, init, paramsFor(Mode::Fp64, 6, t, true));
    if (t >= 2) EXPECT_GT(r.emptyClusterEvents, 0);
    expectMeansOfLabels(data, r, 6, 1e-12, "after " + std::to_string(t) + " iterations");
  }
}

}  // namespace
}  // namespace kmseg
