// SPDX-License-Identifier: MIT
// The CPU engine: Lloyd on data with known answers, every mode, stop rules, empty clusters,
// determinism across thread counts and instruction sets, cancellation, bad input.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kmseg/engine.h"
#include "kmseg/error.h"
#include "kmseg/init.h"
#include "kmseg/kmeans.h"
#include "kmseg/pair_distance.h"
#include "kmseg/workflow.h"

#include "failing_gpu.h"
#include "repeat_oracle.h"
#include "test_data.h"

namespace kmseg {
namespace {

// Three well separated 2-D blobs; returns the data and the true blob of each row.
Matrix threeBlobs(std::size_t perBlob, std::uint32_t seed, std::vector<int>* truth) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.05);
  const double centre[3][2] = {{0.2, 0.2}, {0.8, 0.3}, {0.5, 0.9}};
  Matrix m(3 * perBlob, 2);
  truth->clear();
  for (std::size_t i = 0; i < m.rows; ++i) {
    const int b = int(i % 3);
    m(i, 0) = centre[b][0] + noise(rng);
    m(i, 1) = centre[b][1] + noise(rng);
    truth->push_back(b);
  }
  return m;
}

using test::randomData;

class EveryMode : public ::testing::TestWithParam<Mode> {};

TEST_P(EveryMode, RecoversThreeBlobs) {
  std::vector<int> truth;
  const Matrix data = threeBlobs(300, 11, &truth);
  KMeansParams p;
  p.k = 3;
  p.mode = GetParam();
  const auto init = chooseInitialCentres(data, 3, Init::KMeansPlusPlus, 5);
  auto engine = makeCpuEngine(2);
  const KMeansResult r = engine->run(data, gatherRows(data, init), p);
  ASSERT_EQ(r.labels.size(), data.rows);
  // Every true blob maps to exactly one cluster.
  int map[3] = {-1, -1, -1};
  for (std::size_t i = 0; i < data.rows; ++i) {
    int& m = map[truth[i]];
    if (m < 0) m = r.labels[i];
    EXPECT_EQ(m, r.labels[i]) << "row " << i;
  }
  EXPECT_NE(map[0], map[1]);
  EXPECT_NE(map[1], map[2]);
  EXPECT_NE(map[0], map[2]);
  EXPECT_LE(r.iterations, 20);
  EXPECT_EQ(r.stop, StopReason::Converged);
  EXPECT_EQ(r.evaluations, std::int64_t(r.iterations) * std::int64_t(data.rows) * 3);
  if (!hasFallback(GetParam())) EXPECT_EQ(r.fallbacks, 0);
  EXPECT_EQ(r.working, resolveWorking(GetParam(), Working::Auto));
  // The centres are the means of their clusters (up to working-precision rounding).
  for (int j = 0; j < 3; ++j) {
    double sx = 0, sy = 0;
    int cnt = 0;
    for (std::size_t i = 0; i < data.rows; ++i)
      if (r.labels[i] == j) sx += data(i, 0), sy += data(i, 1), ++cnt;
    ASSERT_GT(cnt, 0);
    EXPECT_NEAR(r.centroids(std::size_t(j), 0), sx / cnt, 1e-6);
    EXPECT_NEAR(r.centroids(std::size_t(j), 1), sy / cnt, 1e-6);
  }
  EXPECT_NEAR(r.sse, computeSse(data, r.labels, r.centroids), 1e-9 * r.sse);
}

INSTANTIATE_TEST_SUITE_P(Modes, EveryMode, ::testing::ValuesIn(kAllModes), [](const auto& info) {
  std::string s(modeName(info.param));
  for (char& c : s)
    if (c == '>') c = '_';
  return s;
});

TEST(Lloyd, KnownAnswerOneDimension) {
  // 1-D points; from centres {0, 10} Lloyd converges to {1, 11} (means of {0,1,2}, {10,11,12}).
  Matrix data(6, 1);
  const double v[] = {0, 1, 2, 10, 11, 12};
  std::copy(v, v + 6, data.values.begin());
  Matrix init(2, 1);
  init(0, 0) = 0;
  init(1, 0) = 10;
  KMeansParams p;
  p.k = 2;
  p.mode = Mode::Fp64;
  const auto r = makeCpuEngine(1)->run(data, init, p);
  EXPECT_EQ(r.labels, (std::vector<std::int32_t>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(r.centroids(0, 0), 1.0);
  EXPECT_EQ(r.centroids(1, 0), 11.0);
  EXPECT_EQ(r.iterations, 2);  // the second assignment changes nothing
  EXPECT_EQ(r.stop, StopReason::Converged);
  EXPECT_EQ(r.trace[0].changed, 6);
  EXPECT_EQ(r.trace[1].changed, 0);
  EXPECT_DOUBLE_EQ(r.sse, 4.0);
}

// A row beyond fp16's range: the run completes, reports the row, and the mixed mode's fallback
// (every distance of that row falls back) still gives it the nearest centre.
TEST(Lloyd, ReportsRowsWhoseNormOverflowsTheLowPrecision) {
  Matrix data(6, 1);
  const double v[] = {0, 1, 2, 300, 301, 302};
  std::copy(v, v + 6, data.values.begin());
  Matrix init(2, 1);
  init(0, 0) = 0;
  init(1, 0) = 300;
  KMeansParams p;
  p.k = 2;
  for (Mode mode : {Mode::Fp16, Mode::Fp16Fp32, Mode::Fp32}) {
    p.mode = mode;
    const auto r = makeCpuEngine(1)->run(data, init, p);
    EXPECT_EQ(r.normOverflows, mode == Mode::Fp32 ? 0 : 3) << modeName(mode);
    if (mode != Mode::Fp16)
      EXPECT_EQ(r.labels, (std::vector<std::int32_t>{0, 0, 0, 1, 1, 1})) << modeName(mode);
  }
}

// A point whose fp16 distance to the nearer centre overflows to infinity while its sum of norms
// stays finite (-200 against 150: d^ = 62500 + 60000), and whose sum of norms with the farther
// centre overflows too (-200 against 170). Both pairs must fall back; had the infinite d^
// passed the test, the point would go to the farther centre (370^2 < infinity).
TEST(Lloyd, InfiniteLowPrecisionDistancesFallBackInMixedModes) {
  Matrix data(3, 1);
  const double v[] = {-200, 170, 150};
  std::copy(v, v + 3, data.values.begin());
  Matrix init(2, 1);
  init(0, 0) = 170;
  init(1, 0) = 150;
  KMeansParams p;
  p.k = 2;
  p.maxIterations = 1;
  for (Mode mode : {Mode::Fp16Fp32, Mode::Fp16Fp64}) {
    p.mode = mode;
    const auto r = makeCpuEngine(1)->run(data, init, p);
    EXPECT_EQ(r.labels, (std::vector<std::int32_t>{1, 0, 1})) << modeName(mode);
    EXPECT_GE(r.trace[0].fallbacks, 2) << modeName(mode);
  }
}

TEST(Lloyd, TiesGoToTheLowestIndex) {
  Matrix data(1, 1);
  data(0, 0) = 1.0;
  Matrix init(2, 1);  // both centres at distance 1 from the only point... K <= N needs N >= 2
  Matrix data2(2, 1);
  data2(0, 0) = 1.0;
  data2(1, 0) = 1.0;
  init(0, 0) = 0.0;
  init(1, 0) = 2.0;
  KMeansParams p;
  p.k = 2;
  p.mode = Mode::Fp64;
  p.maxIterations = 1;
  const auto r = makeCpuEngine(1)->run(data2, init, p);
  // Both points tie; they go to centre 0, centre 1 is empty and is re-seeded with the farthest
  // point, ties broken to the lowest index (point 0).
  EXPECT_EQ(r.labels, (std::vector<std::int32_t>{1, 0}));
  EXPECT_EQ(r.emptyClusterEvents, 1);
}

// Exact ties among many centres (small integer coordinates, repeated centres; every mode's
// distances are exact there): the first iteration's labels are the rule's in every mode, with
// and without bounds, for K that fill the engine's vector lanes, leave a tail, or exceed 32.
TEST(Lloyd, TiesAmongManyCentresGoToTheLowestIndex) {
  Matrix data(600, 2);
  for (std::size_t i = 0; i < data.rows; ++i) {
    data(i, 0) = double((i * 7 + i / 11) % 6);
    data(i, 1) = double((i * 5 + i / 7) % 6);
  }
  for (int k : {16, 37, 43, 64}) {
    Matrix init(std::size_t(k), 2);
    for (std::size_t j = 0; j < init.rows; ++j) {
      init(j, 0) = double((j * 5 + 3) % 6);
      init(j, 1) = double((j * 3 + j / 6) % 6);
    }
    const test::FirstReseed want = test::firstReseedByTheRule(data, init);
    for (Mode mode : kAllModes)
      for (bool bounds : {true, false}) {
        KMeansParams p;
        p.k = k;
        p.mode = mode;
        p.maxIterations = 1;
        p.useBounds = bounds;
        const auto r = makeCpuEngine(2)->run(data, init, p);
        EXPECT_EQ(r.labels, want.labels)
            << "K = " << k << ", " << modeName(mode) << (bounds ? ", bounds" : ", full scan");
      }
  }
}

TEST(Lloyd, EmptyClusterIsReseededWithTheFarthestPoint) {
  Matrix data(4, 1);
  const double v[] = {0.0, 0.1, 0.2, 5.0};
  std::copy(v, v + 4, data.values.begin());
  Matrix init(2, 1);
  init(0, 0) = 0.0;
  init(1, 0) = 100.0;  // attracts nobody
  KMeansParams p;
  p.k = 2;
  p.mode = Mode::Fp64;
  const auto r = makeCpuEngine(2)->run(data, init, p);
  EXPECT_EQ(r.emptyClusterEvents, 1);
  EXPECT_EQ(r.trace[0].emptyClusters, 1);
  EXPECT_EQ(r.labels, (std::vector<std::int32_t>{0, 0, 0, 1}));
  EXPECT_NEAR(r.centroids(0, 0), 0.1, 1e-15);
  EXPECT_EQ(r.centroids(1, 0), 5.0);
  EXPECT_EQ(r.stop, StopReason::Converged);
}

// Many clusters empty at once are re-seeded as the rule says (test::firstReseedByTheRule):
// pairs of samples at one distance from their centre (ties go to the lowest index, and each
// pick leaves its pair's other sample alone in its cluster, so it is passed over), with more
// picks and skips than the engine's per-task lists hold, so that it finishes by scanning every
// sample; random data with small clusters; and enough samples for many tasks.
TEST(Lloyd, ManyEmptyClustersAreReseededAsTheRuleSays) {
  const std::size_t pairs = 200, far = 150;
  Matrix pairData(2 * pairs, 2), pairInit(pairs + far, 2);
  for (std::size_t m = 0; m < pairs; ++m) {
    const double cx = 10.0 * double(m % 20), cy = 10.0 * double(m / 20);
    pairInit(m, 0) = cx, pairInit(m, 1) = cy;
    pairData(2 * m, 0) = cx - 0.5, pairData(2 * m, 1) = cy;
    pairData(2 * m + 1, 0) = cx + 0.5, pairData(2 * m + 1, 1) = cy;
  }
  for (std::size_t e = 0; e < far; ++e)  // centres that attract nobody
    pairInit(pairs + e, 0) = 1e4 + double(e), pairInit(pairs + e, 1) = 1e4;
  // The rule, by hand: the far clusters take the first sample of pairs 0 .. 149.
  std::vector<std::int32_t> expected(2 * pairs);
  for (std::size_t m = 0; m < pairs; ++m) {
    expected[2 * m] = std::int32_t(m < far ? pairs + m : m);
    expected[2 * m + 1] = std::int32_t(m);
  }
  const test::FirstReseed rule = test::firstReseedByTheRule(pairData, pairInit);
  ASSERT_EQ(rule.labels, expected);
  EXPECT_EQ(rule.skips, std::int64_t(far) - 1);

  const Matrix random = randomData(400, 5, 41), many = randomData(30000, 5, 42);
  auto repeated = [](const Matrix& centres, std::size_t k) {
    Matrix init(k, centres.cols);
    for (std::size_t j = 0; j < k; ++j)
      for (std::size_t q = 0; q < centres.cols; ++q) init(j, q) = centres(j % centres.rows, q);
    return init;
  };
  struct Case {
    const char* what;
    const Matrix& data;
    Matrix init;
  };
  const Case cases[] = {{"pairs", pairData, pairInit},
                        {"random, small clusters", random, repeated(randomData(200, 5, 1041), 350)},
                        {"30000 samples", many, repeated(randomData(500, 5, 1042), 1000)}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const test::FirstReseed want = test::firstReseedByTheRule(c.data, c.init);
    EXPECT_GT(want.events, 100);
    // fp64 (the rule above computes in double); fp32 too where every value is exact in it.
    for (Mode mode : {Mode::Fp64, Mode::Fp32}) {
      if (mode == Mode::Fp32 && &c.data != &pairData) continue;
      KMeansParams p;
      p.k = int(c.init.rows);
      p.mode = mode;
      p.maxIterations = 1;
      const auto r = makeCpuEngine(2)->run(c.data, c.init, p);
      EXPECT_EQ(r.emptyClusterEvents, want.events) << modeName(mode);
      EXPECT_EQ(r.labels, want.labels) << modeName(mode);
    }
  }
}

TEST(Lloyd, StopRules) {
  const Matrix data = randomData(2000, 3, 1);
  const Matrix init = gatherRows(data, chooseInitialCentres(data, 6, Init::RandomPoints, 9));
  KMeansParams p;
  p.k = 6;
  p.maxIterations = 1;
  auto engine = makeCpuEngine(2);
  auto r = engine->run(data, init, p);
  EXPECT_EQ(r.iterations, 1);
  EXPECT_EQ(r.stop, StopReason::MaxIterations);
  p.maxIterations = 300;
  p.tolerance = 1e9;  // any shift is below it
  r = engine->run(data, init, p);
  EXPECT_EQ(r.iterations, 1);
  EXPECT_EQ(r.stop, StopReason::CentreShift);
  p.tolerance = 0;  // only convergence (or a cycle) stops it
  r = engine->run(data, init, p);
  EXPECT_TRUE(r.stop == StopReason::Converged || r.stop == StopReason::Cycle);
  EXPECT_EQ(r.trace.back().changed == 0, r.stop == StopReason::Converged);
}

TEST(Lloyd, StopTestOrder) {
  StopReason why{};
  StopInputs s{5, 300, 0, 0, false, true, 0.0, 1e-8};
  ASSERT_TRUE(shouldStop(s, &why));
  EXPECT_EQ(why, StopReason::Converged);
  s.changed = 6;
  s.sameAsTwoAgo = true;
  s.centreShift = 1.0;
  ASSERT_TRUE(shouldStop(s, &why));
  EXPECT_EQ(why, StopReason::Cycle);
  s.detectCycles = false;  // the paper's rules: the cycle runs on
  EXPECT_FALSE(shouldStop(s, &why));
  s.iteration = 300;
  ASSERT_TRUE(shouldStop(s, &why));
  EXPECT_EQ(why, StopReason::MaxIterations);
  s.emptyClusters = 1;
  s.changed = 0;
  s.iteration = 5;
  EXPECT_FALSE(shouldStop(s, &why));  // a re-seeded cluster is not convergence
  // The repeat rule: after the centre shift, before the cap.
  s.changed = 6;
  s.repeatPeriod = 4;
  ASSERT_TRUE(shouldStop(s, &why));
  EXPECT_EQ(why, StopReason::Repeat);
  s.iteration = 300;
  ASSERT_TRUE(shouldStop(s, &why));
  EXPECT_EQ(why, StopReason::Repeat);
  s.centreShift = 0.0;
  ASSERT_TRUE(shouldStop(s, &why));
  EXPECT_EQ(why, StopReason::CentreShift);
  EXPECT_EQ(stopReasonText(StopReason::Repeat, 4), "4-cycle");
  EXPECT_EQ(stopReasonText(StopReason::Cycle, 2), "2-cycle");
}

// The repeat rule (KMeansParams::detectRepeats) stops a run that cycles where plain runs show its
// centres recurring, with their period, and gives the plain rules' run capped at that
// iteration; without it the run goes on to the cap. Uniform fp16 on blobs, K = 8: a 3-cycle.
// The chained one-iteration runs (repeatBySteps, the GPU test's oracle) give the same answer as
// the capped runs, and the capped run's centres.
TEST(Lloyd, RepeatRuleStopsWhereTheCentresRecur) {
  const Matrix x = test::blobs(3000, 5, 6, 0.15, 2);
  const Matrix init = gatherRows(x, chooseInitialCentres(x, 8, Init::RandomPoints, 2));
  auto engine = makeCpuEngine(2);
  KMeansParams p;
  p.k = 8;
  p.mode = Mode::Fp16;
  p.tolerance = 0;
  p.detectRepeats = true;
  const KMeansResult r = engine->run(x, init, p);
  const test::RepeatOracle o = test::repeatByPlainRuns(*engine, x, init, p, r.iterations);
  ASSERT_GT(o.stop, 0) << "no centres recur in " << r.iterations << " iterations";
  EXPECT_GE(o.period, 3);  // a shorter cycle would converge or meet the 2-cycle rule first
  EXPECT_EQ(r.stop, StopReason::Repeat);
  EXPECT_EQ(r.iterations, o.stop);
  EXPECT_EQ(r.cyclePeriod, o.period);
  p.detectRepeats = false;
  p.maxIterations = r.iterations;
  const KMeansResult capped = engine->run(x, init, p);
  EXPECT_EQ(capped.labels, r.labels);
  EXPECT_EQ(capped.centroids.values, r.centroids.values);
  EXPECT_EQ(capped.fallbacks, r.fallbacks);
  EXPECT_EQ(capped.cyclePeriod, 0);
  const test::StepOracle steps = test::repeatBySteps(*engine, x, init, p, r.iterations);
  EXPECT_EQ(steps.stop, o.stop);
  EXPECT_EQ(steps.period, o.period);
  EXPECT_EQ(steps.atStop.values, capped.centroids.values);
  p.maxIterations = 300;
  const KMeansResult plain = engine->run(x, init, p);
  EXPECT_EQ(plain.stop, StopReason::MaxIterations);
  EXPECT_EQ(plain.iterations, 300);
}

// Runs that do not cycle are the same with the repeat rule on, in every mode.
TEST(Lloyd, RepeatRuleLeavesOtherRunsAlone) {
  const Matrix x = test::blobs(2000, 5, 6, 0.15, 3);
  const Matrix init = gatherRows(x, chooseInitialCentres(x, 6, Init::RandomPoints, 3));
  auto engine = makeCpuEngine(2);
  int ended = 0;
  for (Mode mode : kAllModes) {
    SCOPED_TRACE(std::string(modeName(mode)));
    KMeansParams p;
    p.k = 6;
    p.mode = mode;
    const KMeansResult plain = engine->run(x, init, p);
    if (plain.stop == StopReason::MaxIterations) continue;
    ++ended;
    p.detectRepeats = true;
    const KMeansResult r = engine->run(x, init, p);
    EXPECT_EQ(r.stop, plain.stop);
    EXPECT_EQ(r.iterations, plain.iterations);
    EXPECT_EQ(r.labels, plain.labels);
    EXPECT_EQ(r.cyclePeriod, plain.stop == StopReason::Cycle ? 2 : 0);
  }
  EXPECT_GE(ended, 7);  // every mode but uniform fp16 and bf16 ends by a rule here
}

// The relative centre shift: a known answer, its edge cases, and the definition's bits (lanes,
// then a pairwise sum of the lanes) from both the function and the terms form the CUDA update
// adds in parallel (centreShiftTerms, centreShiftOfSums).
TEST(Lloyd, RelativeCentreShift) {
  const float oldC[4] = {0.0f, 1.0f, 2.0f, 3.0f};
  const float newC[4] = {0.0f, 1.0f, 2.0f, 4.0f};
  // ||(0, 0, 0, 1)|| / ||(0, 1, 2, 4)|| = 1 / sqrt(21).
  EXPECT_DOUBLE_EQ(relativeCentreShift(oldC, newC, 4), 1.0 / std::sqrt(21.0));
  EXPECT_EQ(relativeCentreShift(oldC, oldC, 4), 0.0);
  const float zero[4] = {};
  EXPECT_TRUE(std::isinf(relativeCentreShift(oldC, zero, 4)));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  // 1000 entries: several per lane, and a last round of lanes that is not full.
  std::vector<float> a(1000), b(1000);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = u(rng), b[i] = a[i] + 1e-3f * u(rng);
  // The definition written out (sums in double: lane by lane in index order, then the lanes
  // pairwise); the function and the terms form must give its bits.
  const int lanes = kShiftLanes;
  std::vector<double> num(lanes, 0.0), den(lanes, 0.0);
  for (int l = 0; l < lanes; ++l)
    for (std::size_t i = std::size_t(l); i < a.size(); i += std::size_t(lanes)) {
      const double x = b[i], y = a[i];
      num[l] += (x - y) * (x - y);
      den[l] += x * x;
    }
  for (int width = lanes; width > 1; width /= 2)
    for (int l = 0; l < width / 2; ++l) {
      num[l] += num[l + width / 2];
      den[l] += den[l + width / 2];
    }
  const double expected = std::sqrt(num[0] / den[0]);
  EXPECT_EQ(relativeCentreShift(a.data(), b.data(), int(a.size())), expected);
  std::vector<ShiftTerms> t(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) t[i] = centreShiftTerms(a[i], b[i]);
  std::vector<double> moved(lanes, 0.0), size(lanes, 0.0);
  for (std::size_t i = 0; i < a.size(); ++i) {
    moved[i % lanes] += t[i].moved;
    size[i % lanes] += t[i].size;
  }
  for (int h = lanes / 2; h > 0; h /= 2)
    for (int l = 0; l < h; ++l) moved[l] += moved[l + h], size[l] += size[l + h];
  EXPECT_EQ(centreShiftOfSums(moved[0], size[0]), expected);
  EXPECT_GT(expected, 1e-4);
  EXPECT_LT(expected, 1e-2);
}

// The update rule both engines call: the sum over the count, rounded once in W; an empty cluster
// keeps its centre.
TEST(Lloyd, UpdatedCentre) {
  EXPECT_EQ(updatedCentre(1.0f, 3, 7.0f), 1.0f / 3.0f);
  EXPECT_EQ(updatedCentre(1.0, 3, 7.0), 1.0 / 3.0);
  static_assert(std::is_same_v<decltype(updatedCentre(1.0f, 3, 7.0f)), float>);  // stays in W
  EXPECT_EQ(updatedCentre(0.0f, 0, 7.0f), 7.0f);
  EXPECT_EQ(updatedCentre(-2.5, 1, 0.25), -2.5);
  // A count past 2^24 is not rounded to fp32: 2^24 / (2^24 + 1) is 1 - 2^-24 + 2^-48 - ...,
  // nearest to the float 1 - 2^-24, where dividing by float(2^24 + 1) = 2^24 would give 1.
  const long long big = (1ll << 24) + 1;
  EXPECT_EQ(updatedCentre(float(1 << 24), big, 0.0f), 1.0f - 0x1p-24f);
  // 2^24 / (2^24 + 3) lies just above 1 - 3 2^-24, the nearest float (fp32's 2^24 / 2^24 + 4
  // would be 1 - 4 2^-24 rounded up to 1 - 2^-22).
  EXPECT_EQ(updatedCentre(float(1 << 24), (1ll << 24) + 3, 0.0f), 1.0f - 3 * 0x1p-24f);
  // Up to 2^24 the division is fp32's own, bit for bit, and in fp64 double's.
  std::mt19937 rng(12);
  std::uniform_int_distribution<long long> count(1, 1ll << 24);
  std::uniform_real_distribution<float> value(-1e6f, 1e6f);
  for (int t = 0; t < 200000; ++t) {
    const long long c = count(rng);
    const float s = value(rng);
    ASSERT_EQ(updatedCentre(s, c, 0.0f), s / float(c)) << s << " / " << c;
    ASSERT_EQ(updatedCentre(double(s), c, 0.0), double(s) / double(c)) << s << " / " << c;
  }
}

// Results do not depend on the number of threads: sums use a partition fixed by N, K and D.
TEST(Lloyd, SameResultForAnyThreadCount) {
  const Matrix data = randomData(100000, 5, 3);  // several blocks of the sum partition
  const Matrix init = gatherRows(data, chooseInitialCentres(data, 8, Init::RandomPoints, 4));
  for (Mode mode : {Mode::Fp32, Mode::Fp16Fp32, Mode::Fp64}) {
    KMeansParams p;
    p.k = 8;
    p.mode = mode;
    p.maxIterations = 15;
    p.threads = 1;
    const auto one = makeCpuEngine(1)->run(data, init, p);
    for (int t : {2, 3}) {
      p.threads = t;
      const auto many = makeCpuEngine(t)->run(data, init, p);
      EXPECT_EQ(many.labels, one.labels) << modeName(mode) << " threads " << t;
      EXPECT_EQ(many.centroids.values, one.centroids.values) << modeName(mode);
      EXPECT_EQ(many.iterations, one.iterations);
      EXPECT_EQ(many.fallbacks, one.fallbacks);
      EXPECT_EQ(many.sse, one.sse);
    }
  }
}

// The instruction-set variants (generic x86-64 and x86-64-v3 with FMA) give identical results.
TEST(Lloyd, SameResultForEveryInstructionSet) {
  const Matrix data = randomData(30000, 5, 8);
  const Matrix init = gatherRows(data, chooseInitialCentres(data, 8, Init::RandomPoints, 2));
  for (Mode mode : kAllModes) {
    KMeansParams p;
    p.k = 8;
    p.mode = mode;
    p.maxIterations = 8;
    ::unsetenv("KMSEG_CPU_ISA");
    const auto fast = makeCpuEngine(2)->run(data, init, p);
    ::setenv("KMSEG_CPU_ISA", "generic", 1);
    const auto generic = makeCpuEngine(2)->run(data, init, p);
    ::unsetenv("KMSEG_CPU_ISA");
    EXPECT_EQ(fast.labels, generic.labels) << modeName(mode);
    EXPECT_EQ(fast.centroids.values, generic.centroids.values) << modeName(mode);
    EXPECT_EQ(fast.fallbacks, generic.fallbacks) << modeName(mode);
  }
}

TEST(Lloyd, CancelStopsWithinOneIteration) {
  const Matrix data = randomData(20000, 5, 6);
  const Matrix init = gatherRows(data, chooseInitialCentres(data, 16, Init::RandomPoints, 1));
  std::atomic<bool> cancel{false};
  int calls = 0;
  RunControl control;
  control.cancel = &cancel;
  control.progress = [&](const IterationStats& s) {
    ++calls;
    if (s.iteration == 2) cancel = true;
  };
  KMeansParams p;
  p.k = 16;
  p.tolerance = 0;
  EXPECT_THROW(makeCpuEngine(2)->run(data, init, p, control), Cancelled);
  EXPECT_EQ(calls, 2);
}

TEST(Lloyd, ProgressReportsEveryIteration) {
  const Matrix data = randomData(5000, 5, 2);
  const Matrix init = gatherRows(data, chooseInitialCentres(data, 4, Init::RandomPoints, 3));
  std::vector<IterationStats> seen;
  RunControl control;
  control.progress = [&](const IterationStats& s) { seen.push_back(s); };
  KMeansParams p;
  p.k = 4;
  p.mode = Mode::Fp16Fp32;
  const auto r = makeCpuEngine(2)->run(data, init, p, control);
  ASSERT_EQ(seen.size(), std::size_t(r.iterations));
  std::int64_t fallbacks = 0;
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].iteration, int(i) + 1);
    fallbacks += seen[i].fallbacks;
    EXPECT_GE(seen[i].sse, 0.0);
  }
  EXPECT_EQ(fallbacks, r.fallbacks);
  EXPECT_GT(r.fallbacks, 0);  // with rho = 5 the winning pairs near a centre fall back
  EXPECT_LT(r.fallbackRatio(), 1.0);
  // SSE never increases much (Lloyd descends; low precision may wobble slightly).
  EXPECT_LE(seen.back().sse, seen.front().sse);
}

TEST(Lloyd, BadInput) {
  Matrix data = randomData(10, 2, 1);
  auto engine = makeCpuEngine(1);
  KMeansParams p;
  p.k = 2;
  const Matrix init = gatherRows(data, {0, 1});
  auto expectThrow = [&](const KMeansParams& q, const Matrix& x, const Matrix& c,
                         const std::string& needle) {
    try {
      engine->run(x, c, q);
      ADD_FAILURE() << "no exception for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  KMeansParams q = p;
  q.k = 0;
  expectThrow(q, data, init, "K = 0");
  q = p;
  q.k = 11;
  expectThrow(q, data, gatherRows(data, {0, 1}), "exceeds the number of samples (10)");
  q = p;
  q.rho = 2.0;
  expectThrow(q, data, init, "rho = 2 is invalid: rho must be > 2");
  q.rho = 1.0 / 3.0;  // the value as typed back reads as the same double
  expectThrow(q, data, init, "rho = 0.3333333333333333 is invalid");
  q.rho = INFINITY;
  expectThrow(q, data, init, "rho = inf is invalid: rho must be > 2 and finite");
  q = p;
  q.threads = kMaxThreads + 1;
  expectThrow(q, data, init, "threads = 1025 is invalid: use 0 (all cores) up to 1024");
  q = p;
  q.maxIterations = 0;
  expectThrow(q, data, init, "max iterations");
  q.maxIterations = kMaxIterations + 1;
  expectThrow(q, data, init, "from 1 to 1000000");
  q = p;
  q.tolerance = -1;
  expectThrow(q, data, init, "tolerance = -1 is invalid");
  q.tolerance = -1e-300;
  expectThrow(q, data, init, "tolerance = -1e-300 is invalid");
  q.tolerance = std::nan("");
  expectThrow(q, data, init, "tolerance = nan is invalid");
  q = p;
  q.imageWidth = 3;
  expectThrow(q, data, init,
              "image width = 3 is invalid: it must be 0 (no image) or divide the "
              "number of samples (10)");
  q.imageWidth = -5;
  expectThrow(q, data, init, "image width = -5");
  q.imageWidth = 5;  // 5 x 2 pixels: accepted, and the CPU engine's result does not depend on it
  EXPECT_EQ(engine->run(data, init, q).labels, engine->run(data, init, p).labels);
  expectThrow(p, data, gatherRows(data, {0, 1, 2}), "expected K x D = 2 x 2");
  Matrix bad = data;
  bad(3, 1) = std::nan("");
  expectThrow(p, bad, init, "row 3, column 1");
  bad(3, 1) = INFINITY;
  expectThrow(p, bad, init, "non-finite");
}

TEST(Workflow, ParamsForAnImageCarryItsWidth) {
  Image image;
  image.width = 7;
  image.height = 3;
  WorkflowParams p;
  p.kmeans.k = 4;
  const WorkflowParams q = workflowFor(p, image);
  EXPECT_EQ(q.kmeans.imageWidth, 7);
  EXPECT_EQ(q.kmeans.k, 4);
  EXPECT_EQ(p.kmeans.imageWidth, 0);
  // K up to the pixel count is accepted; one more names the image's size.
  p.kmeans.k = 21;
  EXPECT_EQ(workflowFor(p, image).kmeans.k, 21);
  p.kmeans.k = 22;
  try {
    (void)workflowFor(p, image);
    ADD_FAILURE() << "K = 22 accepted for 21 pixels";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "K = 22 exceeds the number of pixels of the image (7 x 3 = 21)");
  }
}

TEST(Workflow, KAboveTheComparableMaximumFailsBeforeAnyRun) {
  const int k = kMaxComparedClusters + 1;
  Matrix data(std::size_t(k) + 10, 1);
  for (std::size_t i = 0; i < data.rows; ++i) data(i, 0) = double(i);
  WorkflowParams p;
  p.kmeans.k = k;
  p.kmeans.maxIterations = 1;
  int iterations = 0;
  try {
    runWorkflow(*makeCpuEngine(1), data, {Mode::Fp32}, p,
                [&](int, int, Mode, const IterationStats&) { ++iterations; });
    ADD_FAILURE() << "no exception for K = " << k;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("K = 8193 exceeds the maximum of 8192"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(iterations, 0) << "the limit must be checked before the engine runs";
  EXPECT_THROW(validateWorkflow(p, std::size_t(-1)), InvalidArgument);
  p.kmeans.k = kMaxComparedClusters;
  EXPECT_NO_THROW(validateWorkflow(p, std::size_t(-1)));
}

// An engine that records what it is told around the CPU engine's runs. (The CUDA engine, which
// acts on keepData, cannot run here; its GPU test checks that kept data gives every run its plain
// result.)
class KeepRecorder final : public KMeansEngine {
 public:
  std::string description() const override { return cpu_->description(); }
  KMeansResult run(const Matrix& data, const Matrix& init, const KMeansParams& params,
                   const RunControl& control) override {
    events.push_back(&data == kept_ ? "run kept" : "run other");
    return cpu_->run(data, init, params, control);
  }
  void keepData(const KeptFeatures& k) override {
    kept_ = k.data;
    events.push_back(k.data ? (k.lookup ? "keep with lookup" : "keep") : "release");
    if (k.lookup) lookup_ = k.lookup;
    if (k.data) maxAbs_ = k.maxAbs;
  }
  const FeatureLookup* lookup_ = nullptr;
  double maxAbs_ = 0.0;
  std::vector<std::string> events;

 private:
  std::unique_ptr<KMeansEngine> cpu_ = makeCpuEngine(1);
  const Matrix* kept_ = nullptr;
};

// A reference given to the workflow is taken instead of running it again: the engine runs the
// modes alone, and every result is that of a workflow that runs its own reference.
TEST(Workflow, TakesAGivenReferenceInsteadOfRunningIt) {
  const Matrix data = test::blobs(400, 3, 3, 0.05, 5, 0.1, 0.9, 1);
  WorkflowParams p;
  p.kmeans.k = 3;
  auto cpu = makeCpuEngine(1);
  const WorkflowResult first = runWorkflow(*cpu, data, {Mode::Fp16}, p);
  EXPECT_FALSE(first.referenceGiven);

  WorkflowParams q = p;  // parameters of the modes alone: the same reference
  q.kmeans.rho = 7.0;
  q.kmeans.working = Working::Fp64;
  ASSERT_TRUE(sameReference(p, q));
  KeepRecorder engine;
  const WorkflowResult given =
      runWorkflow(engine, data, {Mode::Fp16Fp32}, q, {}, nullptr, nullptr, &first.reference);
  const std::vector<std::string> oneRun = {"keep", "run kept", "release"};
  EXPECT_EQ(engine.events, oneRun);
  EXPECT_TRUE(given.referenceGiven);
  const WorkflowResult fresh = runWorkflow(*cpu, data, {Mode::Fp16Fp32}, q);
  EXPECT_EQ(given.reference.labels, fresh.reference.labels);
  EXPECT_EQ(given.reference.centroids.values, fresh.reference.centroids.values);
  EXPECT_EQ(given.modes.at(0).result.labels, fresh.modes.at(0).result.labels);
  EXPECT_EQ(given.modes.at(0).result.fallbacks, fresh.modes.at(0).result.fallbacks);
  EXPECT_EQ(given.modes.at(0).comparison.diffPercent, fresh.modes.at(0).comparison.diffPercent);
  EXPECT_EQ(given.modes.at(0).comparison.ami, fresh.modes.at(0).comparison.ami);

  // A reference that does not fit is refused before any run.
  engine.events.clear();
  KMeansResult wrong = first.reference;
  wrong.labels.pop_back();
  EXPECT_THROW(runWorkflow(engine, data, {Mode::Fp32}, q, {}, nullptr, nullptr, &wrong),
               InvalidArgument);
  wrong = first.reference;
  wrong.mode = Mode::Fp32;
  EXPECT_THROW(runWorkflow(engine, data, {Mode::Fp32}, q, {}, nullptr, nullptr, &wrong),
               InvalidArgument);
  WorkflowParams otherK = q;
  otherK.kmeans.k = 4;
  EXPECT_THROW(
      runWorkflow(engine, data, {Mode::Fp32}, otherK, {}, nullptr, nullptr, &first.reference),
      InvalidArgument);
  EXPECT_TRUE(engine.events.empty());
}

// Every parameter that changes the reference's result makes another reference; the modes' own
// parameters and the thread count do not.
TEST(Workflow, SameReferenceIgnoresOnlyTheModesOwnParameters) {
  const WorkflowParams p;
  const std::vector<std::function<void(WorkflowParams&)>> same = {
      [](WorkflowParams& w) { w.kmeans.mode = Mode::Bf16; },
      [](WorkflowParams& w) { w.kmeans.rho = 9.0; },
      [](WorkflowParams& w) { w.kmeans.working = Working::Fp64; },
      [](WorkflowParams& w) { w.kmeans.threads = 3; },
  };
  for (std::size_t i = 0; i < same.size(); ++i) {
    WorkflowParams q = p;
    same[i](q);
    EXPECT_TRUE(sameReference(p, q)) << i;
  }
  const std::vector<std::function<void(WorkflowParams&)>> other = {
      [](WorkflowParams& w) { w.kmeans.k = 9; },
      [](WorkflowParams& w) { w.kmeans.maxIterations = 10; },
      [](WorkflowParams& w) { w.kmeans.tolerance = 1e-4; },
      [](WorkflowParams& w) { w.kmeans.detectCycles = false; },
      [](WorkflowParams& w) { w.kmeans.traceSse = false; },
      [](WorkflowParams& w) { w.kmeans.useBounds = false; },
      [](WorkflowParams& w) { w.kmeans.imageWidth = 640; },
      [](WorkflowParams& w) { w.init = Init::KMeansPlusPlus; },
      [](WorkflowParams& w) { w.seed = 2; },
  };
  for (std::size_t i = 0; i < other.size(); ++i) {
    WorkflowParams q = p;
    other[i](q);
    EXPECT_FALSE(sameReference(p, q)) << i;
    EXPECT_FALSE(sameReference(q, p)) << i;
  }
}

TEST(Workflow, KeepsTheFeaturesWithTheEngineForItsRuns) {
  const Matrix data = test::blobs(400, 3, 3, 0.05, 5, 0.1, 0.9, 1);
  WorkflowParams p;
  p.kmeans.k = 3;
  KeepRecorder engine;
  const WorkflowResult w = runWorkflow(engine, data, {Mode::Fp32, Mode::Fp16Fp32}, p);
  const std::vector<std::string> expected = {"keep", "run kept", "run kept", "run kept", "release"};
  EXPECT_EQ(engine.events, expected);
  // The workflow checked the features and says so, with their largest magnitude.
  EXPECT_EQ(engine.maxAbs_, checkedMaxAbs(data, "data"));
  EXPECT_GT(engine.maxAbs_, 0.0);
  EXPECT_EQ(w.modes.size(), 2u);

  // A run that throws (here: cancelled) still ends the keep.
  engine.events.clear();
  const std::atomic<bool> cancel{true};
  EXPECT_THROW(runWorkflow(engine, data, {Mode::Fp32}, p, {}, &cancel), Cancelled);
  const std::vector<std::string> cancelled = {"keep", "run kept", "release"};
  EXPECT_EQ(engine.events, cancelled);

  // The default keeps nothing and changes nothing.
  auto cpu = makeCpuEngine(1);
  const KMeansResult a = cpu->run(data, gatherRows(data, w.initialIndices), p.kmeans);
  KMeansResult b;
  {
    const KeptData kept(*cpu, data);
    b = cpu->run(data, gatherRows(data, w.initialIndices), p.kmeans);
  }
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.centroids.values, b.centroids.values);

  // An image's lookup goes with its features to the engine, for exactly the same runs.
  Image image;
  image.width = 20;
  image.height = 15;
  image.rgb8.resize(image.pixelCount() * 3);
  for (std::size_t i = 0; i < image.rgb8.size(); ++i) image.rgb8[i] = std::uint8_t(i * 37 % 251);
  const ImageFeatures f = makeImageFeatures(image);
  ASSERT_TRUE(f.lookup);
  engine.events.clear();
  runWorkflow(engine, f.rows, {Mode::Fp16}, p, {}, nullptr, &*f.lookup);
  const std::vector<std::string> withLookup = {"keep with lookup", "run kept", "run kept",
                                               "release"};
  EXPECT_EQ(engine.events, withLookup);
  EXPECT_EQ(engine.lookup_, &*f.lookup);
}

// A cancel that comes after a run's last iteration, before its comparison: the comparison
// finishes and the run is reported, unless the caller asks a cancel to stop the comparisons too
// (WorkflowRunsDone::cancelStopsComparisons, as the CLI does).
TEST(Workflow, ACancelStopsTheComparisonsInProgressOnlyWhenAsked) {
  auto cpu = makeCpuEngine(2);
  const Matrix data = test::randomData(300, 3, 5);
  WorkflowParams p;
  p.kmeans.k = 4;
  p.kmeans.maxIterations = 1;  // the first iteration is the last
  for (const bool stops : {false, true}) {
    SCOPED_TRACE(stops);
    std::atomic<bool> cancel{false};
    const WorkflowProgress progress = [&](int run, int, Mode, const IterationStats&) {
      if (run == 1) cancel = true;
    };
    std::vector<int> order;
    WorkflowRunsDone record;
    record.reference = [&](const KMeansResult&) { order.push_back(-1); };
    record.mode = [&](std::size_t m, ModeOutcome&) { order.push_back(int(m)); };
    record.cancelStopsComparisons = stops;
    if (stops) {
      EXPECT_THROW(
          runWorkflow(*cpu, data, {Mode::Fp32}, p, progress, &cancel, nullptr, nullptr, record),
          Cancelled);
      EXPECT_EQ(order, (std::vector<int>{-1}));
    } else {
      const WorkflowResult w =
          runWorkflow(*cpu, data, {Mode::Fp32}, p, progress, &cancel, nullptr, nullptr, record);
      EXPECT_EQ(order, (std::vector<int>{-1, 0}));
      EXPECT_EQ(w.modes[0].result.iterations, 1);
    }
  }
}

TEST(Workflow, ReportsEachRunInOrderAsItCompletes) {
  const Matrix data = test::blobs(600, 3, 4, 0.05, 5, 0.1, 0.9, 3);
  WorkflowParams p;
  p.kmeans.k = 4;
  const std::vector<Mode> modes = {Mode::Fp16, Mode::Fp64, Mode::Fp32, Mode::Bf16Fp32};
  auto cpu = makeCpuEngine(2);
  const WorkflowResult want = runWorkflow(*cpu, data, modes, p);

  // The order of the calls: -1 for the reference, then each mode's index.
  std::vector<int> order;
  std::atomic<bool> inside{false};
  bool overlapped = false;
  KMeansResult reference;
  std::vector<ModeOutcome> taken;
  // Each run counts its iterations here; a run is reported after its last one.
  std::vector<int> iterationsSeen(1 + modes.size(), 0), iterationsAtReport;
  std::mutex seenMutex;
  WorkflowProgress progress = [&](int run, int, Mode, const IterationStats&) {
    const std::lock_guard lock(seenMutex);
    ++iterationsSeen[std::size_t(run)];
  };
  auto enter = [&](int run) {
    if (inside.exchange(true)) overlapped = true;
    order.push_back(run - 1);
    const std::lock_guard lock(seenMutex);
    iterationsAtReport.push_back(iterationsSeen[std::size_t(run)]);
  };
  WorkflowRunsDone done;
  done.reference = [&](const KMeansResult& r) {
    enter(0);
    reference = r;
    inside = false;
  };
  done.mode = [&](std::size_t m, ModeOutcome& o) {
    enter(int(m) + 1);
    taken.push_back(std::move(o));  // as the app does: the workflow does not read it again
    inside = false;
  };
  const WorkflowResult w =
      runWorkflow(*cpu, data, modes, p, progress, nullptr, nullptr, nullptr, done);
  EXPECT_FALSE(overlapped);
  EXPECT_EQ(order, (std::vector<int>{-1, 0, 1, 2, 3}));
  EXPECT_EQ(reference.labels, want.reference.labels);
  EXPECT_EQ(w.reference.labels, want.reference.labels);
  EXPECT_EQ(iterationsAtReport[0], want.reference.iterations);
  ASSERT_EQ(taken.size(), modes.size());
  for (std::size_t m = 0; m < modes.size(); ++m) {
    SCOPED_TRACE(m);
    EXPECT_EQ(taken[m].result.mode, modes[m]);
    EXPECT_EQ(taken[m].result.labels, want.modes[m].result.labels);
    EXPECT_EQ(taken[m].result.sse, want.modes[m].result.sse);
    EXPECT_EQ(taken[m].comparison.diffPercent, want.modes[m].comparison.diffPercent);
    EXPECT_EQ(taken[m].comparison.mask, want.modes[m].comparison.mask);
    // Reported whole: after every iteration of its run (the fp64 mode reuses the reference's
    // run and has none of its own).
    EXPECT_EQ(iterationsAtReport[m + 1],
              modes[m] == Mode::Fp64 ? 0 : want.modes[m].result.iterations);
    // What the callee took is gone from the result returned.
    EXPECT_TRUE(w.modes[m].result.labels.empty());
  }
  // The modes differ, so the reports were not one result given several times.
  EXPECT_NE(taken[0].result.labels, taken[3].result.labels);

  // Cancelled in the third mode's run: the reference and the modes completed before it are
  // reported (their comparisons finish before runWorkflow returns), nothing after them.
  std::atomic<bool> cancel{false};
  order.clear();
  WorkflowProgress cancelling = [&](int run, int, Mode, const IterationStats&) {
    if (run == 3) cancel = true;
  };
  WorkflowRunsDone record;
  record.reference = [&](const KMeansResult&) { order.push_back(-1); };
  record.mode = [&](std::size_t m, ModeOutcome&) { order.push_back(int(m)); };
  EXPECT_THROW(runWorkflow(*cpu, data, modes, p, cancelling, &cancel, nullptr, nullptr, record),
               Cancelled);
  EXPECT_EQ(order, (std::vector<int>{-1, 0, 1}));

  // A report that throws ends the workflow with its exception, and no later run is reported.
  order.clear();
  WorkflowRunsDone throwing = record;
  throwing.mode = [&](std::size_t m, ModeOutcome&) {
    order.push_back(int(m));
    if (m == 1) throw std::runtime_error("the viewer is gone");
  };
  EXPECT_THROW(runWorkflow(*cpu, data, modes, p, {}, nullptr, nullptr, nullptr, throwing),
               std::runtime_error);
  EXPECT_EQ(order, (std::vector<int>{-1, 0, 1}));
}

TEST(Init, RandomPointsAreDistinctRowsAndReproducible) {
  Matrix data(100, 1);
  for (std::size_t i = 0; i < 100; ++i) data(i, 0) = double(i % 10);  // 10 distinct rows
  const auto a = chooseInitialCentres(data, 10, Init::RandomPoints, 42);
  const auto b = chooseInitialCentres(data, 10, Init::RandomPoints, 42);
  EXPECT_EQ(a, b);
  std::vector<double> values;
  for (auto i : a) values.push_back(data(std::size_t(i), 0));
  std::sort(values.begin(), values.end());
  EXPECT_EQ(std::unique(values.begin(), values.end()), values.end());
  EXPECT_NE(chooseInitialCentres(data, 10, Init::RandomPoints, 43), a);
  const auto pp = chooseInitialCentres(data, 10, Init::KMeansPlusPlus, 42);
  values.clear();
  for (auto i : pp) values.push_back(data(std::size_t(i), 0));
  std::sort(values.begin(), values.end());
  EXPECT_EQ(std::unique(values.begin(), values.end()), values.end());
}

TEST(Init, TooFewDistinctRowsIsAClearError) {
  Matrix data(1000, 2);  // 3 distinct rows
  for (std::size_t i = 0; i < 1000; ++i) data(i, 0) = double(i % 3);
  for (Init init : {Init::RandomPoints, Init::KMeansPlusPlus}) {
    try {
      chooseInitialCentres(data, 4, init, 1);
      ADD_FAILURE() << "no exception";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find("distinct feature rows (3)"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(chooseInitialCentres(data, 3, Init::RandomPoints, 1).size(), 3u);
  EXPECT_THROW(chooseInitialCentres(data, 0, Init::RandomPoints, 1), InvalidArgument);
  EXPECT_THROW(chooseInitialCentres(data, 1001, Init::RandomPoints, 1), InvalidArgument);
}

// A GPU engine that takes at most K = 4 and D = 3. Stand-in: the CPU engine, since the test must
// run where no GPU exists; only makeEngine's choice is under test.
std::unique_ptr<KMeansEngine> standInGpu(std::string&) {
  return makeCpuEngine(1);
}

// Auto gives the GPU engine only a run it can take; an explicit cuda backend is left to the
// engine's own error (before any kernel).
// A mixed mode's reliability factor rho 2 gamma_{D+2}(u_low) exists only while (D + 2) u_low < 1:
// beyond that gamma is infinite or negative, and the test would send every pair to the fallback,
// or none. Such a run is refused, naming the mode, D and the limit; at the limit it runs, and
// every pair falls back (gamma_{255} = 255 for bf16, so the threshold is far above any d^).
TEST(Engine, AMixedModeRefusesMoreFeaturesThanItsReliabilityTestAllows) {
  EXPECT_EQ(maxReliableFeatures(Mode::Bf16Fp32), 253u);
  EXPECT_EQ(maxReliableFeatures(Mode::Bf16Fp64), 253u);
  EXPECT_EQ(maxReliableFeatures(Mode::Fp16Fp32), 2045u);
  EXPECT_EQ(maxReliableFeatures(Mode::Fp32Fp64), 16777213u);
  EXPECT_EQ(maxReliableFeatures(Mode::Bf16), SIZE_MAX);
  // The limit is the last D at which gamma_{D+2} exists.
  for (Mode m : {Mode::Bf16Fp32, Mode::Fp16Fp64, Mode::Fp32Fp64}) {
    const int limit = int(maxReliableFeatures(m));
    const double u = unitRoundoff(lowPrecision(m));
    EXPECT_TRUE(gammaDefined(limit + 2, u)) << modeName(m);
    EXPECT_FALSE(gammaDefined(limit + 3, u)) << modeName(m);
  }
  auto engine = makeCpuEngine(2);
  KMeansParams p;
  p.k = 2;
  p.mode = Mode::Bf16Fp32;
  p.maxIterations = 3;
  const Matrix over = test::randomData(6, 254, 21);
  try {
    engine->run(over, gatherRows(over, {0, 1}), p);
    ADD_FAILURE() << "D = 254 ran in bf16>fp32";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "bf16>fp32 with D = 254 features: its reliability test needs (D + 2) u < 1 for "
                 "bf16, so D <= 253 (use fp32>fp64 or a uniform mode)");
  }
  const std::vector<double> x(254, 0.5), c(254, 0.25);
  EXPECT_THROW(modeDistance(Mode::Bf16Fp64, 5.0, Precision::Fp32, x.data(), c.data(), 254),
               InvalidArgument);
  const Matrix at = test::randomData(6, 253, 21);
  const KMeansResult r = engine->run(at, gatherRows(at, {0, 1}), p);
  ASSERT_GT(r.iterations, 0);
  for (const IterationStats& it : r.trace) {
    EXPECT_EQ(it.fallbacks, it.evaluations) << "iteration " << it.iteration;
    EXPECT_EQ(it.evaluations, 12);
  }
}

// Uniform bf16 at D = 300, where the pruning bounds' gamma_D(u) does not exist (D u > 1): the
// engine scans every centre, so the run equals the one without bounds.
TEST(Engine, UniformBf16BeyondItsBoundsGivesTheFullScan) {
  auto engine = makeCpuEngine(2);
  const Matrix data = test::blobs(400, 300, 4, 0.05, 23);
  const Matrix init = gatherRows(data, chooseInitialCentres(data, 4, Init::RandomPoints, 3));
  KMeansParams p;
  p.k = 4;
  p.mode = Mode::Bf16;
  p.maxIterations = 20;
  const KMeansResult pruned = engine->run(data, init, p);
  p.useBounds = false;
  const KMeansResult full = engine->run(data, init, p);
  EXPECT_EQ(pruned.labels, full.labels);
  EXPECT_EQ(pruned.iterations, full.iterations);
  EXPECT_EQ(pruned.centroids.values, full.centroids.values);
}

TEST(Engine, AutoChoosesTheCpuForKOrDBeyondTheGpuEnginesLimits) {
  registerGpuEngineFactory(&standInGpu, 4, 3);
  const EngineChoice fits = makeEngine(Backend::Auto, 1, {4, 3});
  const EngineChoice manyK = makeEngine(Backend::Auto, 1, {5, 3});
  const EngineChoice manyD = makeEngine(Backend::Auto, 1, {4, 4});
  const EngineChoice unknown = makeEngine(Backend::Auto, 1);
  const EngineChoice explicitCuda = makeEngine(Backend::Cuda, 1, {5, 3});
  registerGpuEngineFactory(nullptr, 0, 0);
  EXPECT_EQ(fits.backend, Backend::Cuda);
  EXPECT_TRUE(fits.note.empty()) << fits.note;
  EXPECT_EQ(manyK.backend, Backend::Cpu);
  EXPECT_EQ(manyK.note, "using the CPU: K = 5 is above the CUDA engine's maximum of 4");
  EXPECT_EQ(manyD.backend, Backend::Cpu);
  EXPECT_EQ(manyD.note, "using the CPU: D = 4 features is above the CUDA engine's maximum of 3");
  EXPECT_EQ(unknown.backend, Backend::Cuda);
  EXPECT_EQ(explicitCuda.backend, Backend::Cuda);
  EXPECT_EQ(makeEngine(Backend::Auto, 1, {5, 3}).note,
            "using the CPU: this build has no CUDA engine");
}

// The GPU engine that fails: kmseg::test::FailingGpu (failing_gpu.h).
using kmseg::test::FailingGpuRegistration;
using kmseg::test::failingGpuState;

// Auto's GPU engine hands a run that fails on the device to the CPU, says so in the result, and
// keeps to the CPU from then on; the result is the CPU engine's own.
TEST(Engine, AutoRunsAFailedGpuRunAgainOnTheCpu) {
  const FailingGpuRegistration reg(
      [] { throw BackendError("CUDA: cannot allocate 4096 bytes for the labels"); });
  const EngineChoice choice = makeEngine(Backend::Auto, 1, {3, 5, 500});
  ASSERT_EQ(choice.backend, Backend::Cuda);
  EXPECT_TRUE(choice.note.empty()) << choice.note;
  EXPECT_EQ(choice.engine->description(), "stand-in GPU");

  const Matrix data = randomData(500, 5, 11);
  const Matrix init = gatherRows(data, {1, 2, 3});
  KMeansParams p;
  p.k = 3;
  p.mode = Mode::Fp16Fp32;
  // The GPU fails after two iterations: the run says so as it starts again on the CPU, whose
  // progress starts again at iteration 1.
  failingGpuState().iterationsBeforeFailure = 2;
  std::vector<std::string> heard;
  RunControl control;
  control.progress = [&](const IterationStats& s) {
    heard.push_back("iteration " + std::to_string(s.iteration));
  };
  control.restarted = [&](const std::string& note) { heard.push_back(note); };
  KMeansResult first;
  {
    const KeptData kept(*choice.engine, data);
    first = choice.engine->run(data, init, p, control);
  }
  ASSERT_GE(heard.size(), 4u);
  EXPECT_EQ(
      std::vector<std::string>(heard.begin(), heard.begin() + 4),
      (std::vector<std::string>{"iteration 1", "iteration 2",
                                "the GPU run failed (CUDA: cannot allocate 4096 bytes for the "
                                "labels); it runs again on the CPU, from iteration 1",
                                "iteration 1"}));
  EXPECT_EQ(heard.size(), std::size_t(3 + first.iterations));
  EXPECT_EQ(failingGpuState().runs, 1);
  // Told to keep the data; at the failure it was destroyed (with the device memory it held).
  EXPECT_EQ(failingGpuState().kept, (std::vector<const Matrix*>{&data}));
  EXPECT_EQ(failingGpuState().destroyed, 1);
  EXPECT_EQ(first.backendNote,
            "the GPU run failed (CUDA: cannot allocate 4096 bytes for the labels); it ran on the "
            "CPU instead");
  EXPECT_EQ(first.backend, "CPU (1 thread)");
  EXPECT_EQ(choice.engine->description(), "CPU (1 thread)");
  const KMeansResult cpu = makeCpuEngine(1)->run(data, init, p);
  EXPECT_EQ(first.labels, cpu.labels);
  EXPECT_EQ(first.centroids.values, cpu.centroids.values);
  EXPECT_EQ(first.fallbacks, cpu.fallbacks);
  EXPECT_EQ(first.iterations, cpu.iterations);

  // The next run does not try the failed GPU engine again, so it does not start again either.
  p.mode = Mode::Fp32;
  heard.clear();
  const KMeansResult second = choice.engine->run(data, init, p, control);
  EXPECT_EQ(failingGpuState().runs, 1);
  EXPECT_EQ(heard.size(), std::size_t(second.iterations));
  EXPECT_EQ(second.backendNote,
            "on the CPU: an earlier GPU run failed (CUDA: cannot allocate 4096 bytes for the "
            "labels)");
  EXPECT_EQ(second.labels, makeCpuEngine(1)->run(data, init, p).labels);
}

// A whole comparison on Auto's GPU engine that fails at its first run: every row is the CPU's,
// and the reference's note names the failure.
TEST(Engine, AutoWorkflowFinishesOnTheCpuAfterAGpuFailure) {
  const FailingGpuRegistration reg([] { throw BackendError("CUDA error in the assignment"); });
  const Matrix data = randomData(300, 5, 12);
  WorkflowParams p;
  p.kmeans.k = 4;
  const std::vector<Mode> modes = {Mode::Fp32, Mode::Bf16Fp64};
  std::vector<std::string> restarts;
  WorkflowRunsDone runsDone;
  runsDone.restarted = [&](int run, Mode mode, const std::string& note) {
    restarts.push_back(std::to_string(run) + " " + std::string(modeName(mode)) + ": " + note);
  };
  const WorkflowResult gpu = runWorkflow(*makeEngine(Backend::Auto, 1).engine, data, modes, p, {},
                                         nullptr, nullptr, nullptr, runsDone);
  // Only the run the GPU failed in starts again; the others go to the CPU from the start.
  EXPECT_EQ(restarts, (std::vector<std::string>{"0 fp64: the GPU run failed (CUDA error in the "
                                                "assignment); it runs again on the CPU, from "
                                                "iteration 1"}));
  const WorkflowResult cpu = runWorkflow(*makeCpuEngine(1), data, modes, p);
  EXPECT_EQ(failingGpuState().runs, 1);
  EXPECT_EQ(gpu.engine, "stand-in GPU");  // the engine the workflow was given
  EXPECT_NE(gpu.reference.backendNote.find("the GPU run failed (CUDA error in the assignment)"),
            std::string::npos)
      << gpu.reference.backendNote;
  EXPECT_EQ(gpu.reference.labels, cpu.reference.labels);
  ASSERT_EQ(gpu.modes.size(), 2u);
  for (std::size_t m = 0; m < 2; ++m) {
    EXPECT_EQ(gpu.modes[m].result.backend, "CPU (1 thread)");
    EXPECT_NE(gpu.modes[m].result.backendNote.find("an earlier GPU run failed"), std::string::npos);
    EXPECT_EQ(gpu.modes[m].result.labels, cpu.modes[m].result.labels);
    EXPECT_EQ(gpu.modes[m].comparison.diffPercent, cpu.modes[m].comparison.diffPercent);
  }
  EXPECT_TRUE(cpu.reference.backendNote.empty());
}

// Only the backend's own failures move a run to the CPU: bad input and a cancel reach the caller
// as they are, the GPU engine stays, and an explicit cuda backend does not fall back at all.
TEST(Engine, AutoLeavesOtherErrorsAndTheCudaBackendAlone) {
  std::function<void()> fail = [] { throw InvalidArgument("K = 2000 exceeds the limit"); };
  const FailingGpuRegistration reg([&] { fail(); });
  const Matrix data = randomData(50, 2, 13);
  const Matrix init = gatherRows(data, {0, 1});
  KMeansParams p;
  p.k = 2;
  const EngineChoice autoChoice = makeEngine(Backend::Auto, 1);
  EXPECT_THROW(autoChoice.engine->run(data, init, p), InvalidArgument);
  fail = [] { throw Cancelled(); };
  EXPECT_THROW(autoChoice.engine->run(data, init, p), Cancelled);
  EXPECT_EQ(failingGpuState().runs, 2);
  EXPECT_EQ(failingGpuState().destroyed, 0);
  EXPECT_EQ(autoChoice.engine->description(), "stand-in GPU");

  fail = [] { throw BackendError("device lost"); };
  const EngineChoice cuda = makeEngine(Backend::Cuda, 1);
  EXPECT_EQ(cuda.engine->description(), "stand-in GPU");
  EXPECT_THROW(cuda.engine->run(data, init, p), BackendError);
  EXPECT_EQ(cuda.engine->description(), "stand-in GPU");
}

// N beyond the GPU engine's limit: Auto chooses the CPU when it is told N, and its GPU engine
// sends such a run to the CPU when it was not (without trying the GPU, and without giving it up).
TEST(Engine, AutoTakesRowsBeyondTheGpuLimitOnTheCpu) {
  const FailingGpuRegistration reg([] { throw BackendError("not expected"); }, 40);
  const EngineChoice many = makeEngine(Backend::Auto, 1, {2, 2, 41});
  EXPECT_EQ(many.backend, Backend::Cpu);
  EXPECT_EQ(many.note, "using the CPU: N = 41 samples is above the CUDA engine's maximum of 40");
  EXPECT_EQ(makeEngine(Backend::Auto, 1, {2, 2, 40}).backend, Backend::Cuda);

  const EngineChoice unknown = makeEngine(Backend::Auto, 1, {2, 2});
  ASSERT_EQ(unknown.backend, Backend::Cuda);
  const Matrix data = randomData(41, 2, 14);
  const Matrix init = gatherRows(data, {0, 1});
  KMeansParams p;
  p.k = 2;
  const KMeansResult r = unknown.engine->run(data, init, p);
  EXPECT_EQ(failingGpuState().runs, 0);
  EXPECT_EQ(r.backendNote, "on the CPU: N = 41 samples is above the CUDA engine's maximum of 40");
  EXPECT_EQ(r.labels, makeCpuEngine(1)->run(data, init, p).labels);
  EXPECT_EQ(unknown.engine->description(), "stand-in GPU");
  // A run within the limit still goes to the GPU engine (which fails here, so the CPU takes it).
  const Matrix fewer = randomData(40, 2, 15);
  const KMeansResult within = unknown.engine->run(fewer, gatherRows(fewer, {0, 1}), p);
  EXPECT_EQ(failingGpuState().runs, 1);
  EXPECT_EQ(within.backendNote, "the GPU run failed (not expected); it ran on the CPU instead");
}

TEST(Engine, FactoryFallsBackToTheCpuWithAReason) {
  auto choice = makeEngine(Backend::Auto, 2);
  ASSERT_NE(choice.engine, nullptr);
  if (choice.backend == Backend::Cpu) EXPECT_FALSE(choice.note.empty());
  EXPECT_EQ(makeEngine(Backend::Cpu, 3).engine->description(), "CPU (3 threads)");
  EXPECT_EQ(parseBackend("cuda"), Backend::Cuda);
  EXPECT_THROW(parseBackend("gpu"), InvalidArgument);
}

}  // namespace
}  // namespace kmseg
