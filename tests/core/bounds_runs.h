// SPDX-License-Identifier: MIT
#pragma once

// The check every bounds test makes: KMeansParams::useBounds skips work but never changes a
// result.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "kmseg/engine.h"
#include "kmseg/kmeans.h"

namespace kmseg::test {

/// A run of `mode` with K = `k` that goes on until the labels settle (tolerance 0) or the cap.
inline KMeansParams boundsRunParams(Mode mode, int k, int maxIterations) {
  KMeansParams p;
  p.k = k;
  p.mode = mode;
  p.maxIterations = maxIterations;
  p.tolerance = 0;
  return p;
}

/// Runs `p` on the CPU engine with and without the bounds from the same centres and expects
/// every result and every iteration's statistics to be identical. Returns the bounded run.
inline KMeansResult expectBoundsChangeNothing(const Matrix& data, const Matrix& init,
                                              KMeansParams p, const std::string& what) {
  SCOPED_TRACE(what + ", " + std::string(modeName(p.mode)) + ", K = " + std::to_string(p.k) +
               ", D = " + std::to_string(data.cols));
  p.useBounds = true;
  const KMeansResult fast = makeCpuEngine(2)->run(data, init, p);
  p.useBounds = false;
  const KMeansResult full = makeCpuEngine(2)->run(data, init, p);
  EXPECT_EQ(fast.labels, full.labels);
  EXPECT_EQ(fast.centroids.values, full.centroids.values);
  EXPECT_EQ(fast.iterations, full.iterations);
  EXPECT_EQ(fast.stop, full.stop);
  EXPECT_EQ(fast.emptyClusterEvents, full.emptyClusterEvents);
  EXPECT_EQ(fast.fallbacks, full.fallbacks);
  EXPECT_EQ(fast.sse, full.sse);
  EXPECT_EQ(fast.trace.size(), full.trace.size());
  for (std::size_t t = 0; t < std::min(fast.trace.size(), full.trace.size()); ++t) {
    EXPECT_EQ(fast.trace[t].changed, full.trace[t].changed) << "iteration " << t + 1;
    EXPECT_EQ(fast.trace[t].fallbacks, full.trace[t].fallbacks) << "iteration " << t + 1;
    EXPECT_EQ(fast.trace[t].emptyClusters, full.trace[t].emptyClusters) << "iteration " << t + 1;
  }
  return fast;
}

}  // namespace kmseg::test
