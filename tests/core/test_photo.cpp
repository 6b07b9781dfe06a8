// SPDX-License-Identifier: MIT
// Every precision mode on a real sample photo, through the same workflow the front ends use.
#include <gtest/gtest.h>

#include "kmseg/engine.h"
#include "kmseg/features.h"
#include "kmseg/image_io.h"
#include "kmseg/init.h"
#include "kmseg/workflow.h"
#include "test_paths.h"

namespace kmseg {
namespace {

TEST(Photo, EveryModeAgainstTheReferenceOnCoffee) {
  const Image image = loadImage(test::sourcePath("samples/coffee.png"));
  const Matrix features = makeFeatures(image);
  WorkflowParams params;
  params.kmeans.k = 8;
  params.kmeans.maxIterations = 150;  // bounds the time of the modes that never settle
  params.seed = 1;
  auto engine = makeCpuEngine(0);
  const std::vector<Mode> modes(kAllModes.begin(), kAllModes.end());
  const WorkflowResult w = runWorkflow(*engine, features, modes, params);
  ASSERT_EQ(w.modes.size(), modes.size());
  EXPECT_EQ(w.reference.working, Precision::Fp64);
  for (std::size_t i = 0; i < modes.size(); ++i) {
    const Mode m = modes[i];
    const Comparison& c = w.modes[i].comparison;
    const KMeansResult& r = w.modes[i].result;
    SCOPED_TRACE(std::string(modeName(m)));
    EXPECT_EQ(r.labels.size(), image.pixelCount());
    if (m == Mode::Fp64) EXPECT_EQ(c.differing, 0);
    if (m == Mode::Fp32 || m == Mode::Fp32Fp64) {
      EXPECT_LT(c.diffPercent, 0.1);  // the floor for these modes at K = 8
      EXPECT_GT(c.ari, 0.999);
    }
    // Every mode finds essentially the same segmentation on this photo; the uniform 16-bit modes
    // are the least faithful (bf16 about 8 % of the pixels here).
    EXPECT_LT(c.diffPercent, 15.0);
    EXPECT_GT(c.ami, 0.8);
    EXPECT_NEAR(c.sseRatio, 1.0, 0.02);
    if (hasFallback(m)) {
      EXPECT_GT(r.fallbacks, 0);
      EXPECT_LT(r.fallbackRatio(), 1.0);
    } else {
      EXPECT_EQ(r.fallbacks, 0);
    }
    // fp16>fp32 ends in a 2-cycle on this photo (a few pixels flip back and forth); the rule
    // stops it instead of running to the cap.
    if (m == Mode::Fp16Fp32) {
      EXPECT_EQ(r.stop, StopReason::Cycle);
      ASSERT_GE(r.trace.size(), 3u);
      EXPECT_GT(r.trace.back().changed, 0);
      EXPECT_EQ(r.trace.back().changed, r.trace[r.trace.size() - 2].changed);
    }
    // The mask marks exactly the differing pixels.
    std::int64_t marked = 0;
    for (auto v : c.mask) marked += v;
    EXPECT_EQ(marked, c.differing);
  }
}

// Bounds skip work in the uniform fp64/fp32 modes but never change a label: the bounded loop
// and the brute-force loop give identical traces and results on a real photo.
TEST(Photo, BoundsGiveTheBruteForceLabels) {
  const Image image = loadImage(test::sourcePath("samples/grace_hopper.jpg"));
  const Matrix features = makeFeatures(image);
  auto engine = makeCpuEngine(0);
  for (Mode mode : {Mode::Fp64, Mode::Fp32}) {
    for (int k : {1, 7, 8, 32}) {
      KMeansParams p;
      p.k = k;
      p.mode = mode;
      p.maxIterations = 60;
      const Matrix init =
          gatherRows(features, chooseInitialCentres(features, k, Init::RandomPoints, 3));
      p.useBounds = true;
      const KMeansResult fast = engine->run(features, init, p);
      p.useBounds = false;
      const KMeansResult brute = engine->run(features, init, p);
      SCOPED_TRACE(std::string(modeName(mode)) + " K = " + std::to_string(k));
      EXPECT_EQ(fast.labels, brute.labels);
      EXPECT_EQ(fast.centroids.values, brute.centroids.values);
      ASSERT_EQ(fast.trace.size(), brute.trace.size());
      for (std::size_t t = 0; t < fast.trace.size(); ++t)
        EXPECT_EQ(fast.trace[t].changed, brute.trace[t].changed) << "iteration " << t + 1;
    }
  }
}

}  // namespace
}  // namespace kmseg
