// SPDX-License-Identifier: MIT
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kmseg/error.h"
#include "kmseg/median.h"
#include "kmseg/metrics.h"

namespace {

using kmseg::Contingency;
using Labels = std::vector<std::int32_t>;

int labelCount(const Labels& labels) {
  return labels.empty() ? 1 : *std::max_element(labels.begin(), labels.end()) + 1;
}

// Brute force over all n! permutations: the largest total weight.
std::int64_t bruteForceBest(const std::vector<std::int64_t>& w, int n) {
  std::vector<int> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  std::int64_t best = std::numeric_limits<std::int64_t>::min();
  do {
    std::int64_t total = 0;
    for (int i = 0; i < n; ++i) total += w[std::size_t(i * n + perm[std::size_t(i)])];
    best = std::max(best, total);
  } while (std::next_permutation(perm.begin(), perm.end()));
  return best;
}

bool isPermutation(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  for (std::size_t i = 0; i < v.size(); ++i)
    if (v[i] != int(i)) return false;
  return true;
}

// The benchmarks' median: the middle value of an odd count, the upper middle one of an even
// count, whatever the order of the values.
TEST(Median, MiddleOrUpperMiddleValue) {
  EXPECT_EQ(kmseg::medianOf(std::vector<double>{3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(kmseg::medianOf(std::vector<double>{4.0, 1.0, 3.0, 2.0}), 3.0);
  EXPECT_EQ(kmseg::medianOf(std::vector<float>{5.0f}), 5.0f);
  const std::vector<double> kept{9.0, 7.0, 8.0};
  EXPECT_EQ(kmseg::medianOf(kept), 8.0);
  EXPECT_EQ(kept, (std::vector<double>{9.0, 7.0, 8.0}));  // the caller's vector is not sorted
}

TEST(Hungarian, MatchesBruteForceOnRandomMatrices) {
  constexpr int kSeeds = 60;
  for (int n = 1; n <= 7; ++n) {
    std::cout << "[ seeds    ] n = " << n << ": seeds 1.." << kSeeds << " (mt19937_64)\n";
    for (int seed = 1; seed <= kSeeds; ++seed) {
      SCOPED_TRACE("n = " + std::to_string(n) + ", seed = " + std::to_string(seed));
      std::mt19937_64 rng(std::uint64_t(seed) * 1000 + std::uint64_t(n));
      // Alternate narrow ranges (many ties), wide ranges and negative weights.
      const std::int64_t lo = seed % 3 == 2 ? -1000000 : 0;
      const std::int64_t hi = seed % 3 == 0 ? 3 : 1000000;
      std::uniform_int_distribution<std::int64_t> dist(lo, hi);
      std::vector<std::int64_t> w(std::size_t(n * n));
      for (auto& x : w) x = dist(rng);
      const std::vector<int> assignment = kmseg::maxWeightAssignment(w, n);
      ASSERT_EQ(assignment.size(), std::size_t(n));
      ASSERT_TRUE(isPermutation(assignment));
      std::int64_t total = 0;
      for (int i = 0; i < n; ++i) total += w[std::size_t(i * n + assignment[std::size_t(i)])];
      EXPECT_EQ(total, bruteForceBest(w, n));
      EXPECT_EQ(kmseg::maxWeightAssignment(w, n), assignment);  // deterministic
    }
  }
}

TEST(Hungarian, KnownMatrixAndEdgeSizes) {
  EXPECT_TRUE(kmseg::maxWeightAssignment({}, 0).empty());
  EXPECT_EQ(kmseg::maxWeightAssignment({42}, 1), std::vector<int>{0});
  // Greedy would take the 9 first and lose: the optimum is 8 + 8 + 7.
  const std::vector<std::int64_t> w = {9, 8, 0,  //
                                       8, 0, 0,  //
                                       0, 0, 7};
  EXPECT_EQ(kmseg::maxWeightAssignment(w, 3), (std::vector<int>{1, 0, 2}));
  // All ties: the identity, deterministically.
  EXPECT_EQ(kmseg::maxWeightAssignment(std::vector<std::int64_t>(16, 5), 4),
            (std::vector<int>{0, 1, 2, 3}));
}

TEST(Hungarian, LargerMatrixBeatsEveryPermutationTried) {
  // n = 64 is beyond brute force: the result must be at least as good as the identity and
  // 20000 random permutations.
  const int n = 64;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<std::int64_t> dist(0, 200000000);
  std::vector<std::int64_t> w(std::size_t(n * n));
  for (auto& x : w) x = dist(rng);
  const std::vector<int> assignment = kmseg::maxWeightAssignment(w, n);
  ASSERT_TRUE(isPermutation(assignment));
  const auto total = [&](const std::vector<int>& p) {
    std::int64_t t = 0;
    for (int i = 0; i < n; ++i) t += w[std::size_t(i * n + p[std::size_t(i)])];
    return t;
  };
  const std::int64_t best = total(assignment);
  std::vector<int> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  for (int trial = 0; trial < 20000; ++trial) {
    EXPECT_LE(total(perm), best);
    std::shuffle(perm.begin(), perm.end(), rng);
  }
}

TEST(Hungarian, RejectsBadInput) {
  EXPECT_THROW(kmseg::maxWeightAssignment({1, 2, 3}, 2), kmseg::InvalidArgument);
  EXPECT_THROW(kmseg::maxWeightAssignment({}, -1), kmseg::InvalidArgument);
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  EXPECT_THROW(kmseg::maxWeightAssignment({big, -big, 0, 0}, 2), kmseg::InvalidArgument);
}

TEST(MetricsContingency, CountsPairsOfLabels) {
  const Labels a = {0, 0, 1, 1, 2, 2, 2};
  const Labels b = {1, 1, 0, 1, 3, 3, 0};
  const Contingency c = kmseg::contingency(a, 3, b, 4);
  ASSERT_EQ(c.rowsA, 3);
  ASSERT_EQ(c.colsB, 4);
  const std::vector<std::int64_t> expected = {0, 2, 0, 0,  //
                                              1, 1, 0, 0,  //
                                              1, 0, 0, 2};
  EXPECT_EQ(c.counts, expected);
  EXPECT_EQ(c(2, 3), 2);
}

TEST(MetricsContingency, LargeInputsMatchASerialCount) {
  // Both code paths: per-thread tables (32 x 32) and the single pass (300 x 300 > 2^16 cells).
  for (const int k : {32, 300}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    const std::size_t n = 1000003;
    Labels a(n), b(n);
    std::vector<std::int64_t> expected(std::size_t(k) * std::size_t(k), 0);
    std::uint64_t state = 12345;
    for (std::size_t i = 0; i < n; ++i) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      a[i] = std::int32_t((state >> 33) % std::uint64_t(k));
      b[i] = std::int32_t((state >> 13) % std::uint64_t(k));
      ++expected[std::size_t(a[i]) * std::size_t(k) + std::size_t(b[i])];
    }
    EXPECT_EQ(kmseg::contingency(a, k, b, k).counts, expected);
  }
}

TEST(MetricsContingency, RejectsBadInput) {
  EXPECT_THROW(kmseg::contingency({0, 1}, 2, {0}, 2), kmseg::InvalidArgument);
  EXPECT_THROW(kmseg::contingency({0, 2}, 2, {0, 1}, 2), kmseg::InvalidArgument);
  EXPECT_THROW(kmseg::contingency({0, 1}, 2, {0, -1}, 2), kmseg::InvalidArgument);
  EXPECT_THROW(kmseg::contingency({0}, 0, {0}, 1), kmseg::InvalidArgument);
  EXPECT_THROW(kmseg::contingency({0}, 100000, {0}, 100000), kmseg::InvalidArgument);
  try {
    kmseg::contingency({0, 1, 0}, 2, {0, 1, 5}, 3);
    FAIL() << "no exception";
  } catch (const kmseg::InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("label 5 at sample 2"), std::string::npos) << what;
    EXPECT_NE(what.find("[0, 3)"), std::string::npos) << what;
  }
}

// One case of tests/data/metrics_reference.py and the values scikit-learn 1.2.1 gave for it.
struct SklearnCase {
  const char* name;
  double ari;
  double mi;
  double emi;
  double ami;
};

// Output of `/usr/bin/python3 tests/data/metrics_reference.py` (scikit-learn 1.2.1, numpy
// 1.24.2, scipy 1.10.1, Debian 12 python3-sklearn): adjusted_rand_score, mutual_info_score,
// _expected_mutual_info_fast.expected_mutual_information and adjusted_mutual_info_score.
const SklearnCase kSklearnCases[] = {
    // clang-format off
    {"halfSplit", 0.5714285714285714, 0.69314718055994518, 0.46209812037329662, 0.57142857142857151},
    {"crossed", -0.5, 0, 0.23104906018664825, -0.49999999999999944},
    {"oneVsAllDifferent", 0, 0, 0, 0},
    {"identical", 1, 1.0821955300387671, 0.3804956400948587, 1},
    {"permuted", 1, 1.3517839942896459, 0.84253300449050217, 1},
    {"bothOneCluster", 1, 0, 0, 1},
    {"oneVsThree", 0, 0, 0, 0},
    {"unusedLabels", -0.022727272727272728, 0.46209812037329673, 0.47030933924111207, -0.015175191045711741},
    {"small", -0.022727272727272728, 0.29110316603236885, 0.2932612839470502, -0.002712434598786154},
    {"modular1000", -0.0032456561242495104, 0.00025432779122905314, 0.0060311028594031719, -0.0038854375671209911},
    {"quadratic97", -0.0019433337066290736, 0.10866407064118094, 0.084868771876244767, 0.016069692396268442},
    {"noisyCopy50000", 0.77599067909801367, 1.3570117880983432, 0.00025004085578346822, 0.75733081355229526},
    {"skewed300007", 0.58927372046751036, 1.0192848535290144, 7.0003012658247132e-05, 0.5559438809416426},
    // clang-format on
};

std::uint64_t hash32(std::uint64_t i) {
  return (i * 2654435761ULL) % 4294967296ULL;
}

// The label vectors of metrics_reference.py, rebuilt exactly.
std::pair<Labels, Labels> makeCase(const std::string& name) {
  static const std::map<std::string, std::pair<Labels, Labels>> kExplicit = {
      {"halfSplit", {{0, 0, 1, 1}, {0, 0, 1, 2}}},
      {"crossed", {{0, 0, 1, 1}, {0, 1, 0, 1}}},
      {"oneVsAllDifferent", {{0, 0, 0, 0}, {0, 1, 2, 3}}},
      {"identical", {{0, 1, 2, 0, 1, 2, 2, 1}, {0, 1, 2, 0, 1, 2, 2, 1}}},
      {"permuted", {{0, 0, 1, 1, 2, 2, 3}, {2, 2, 0, 0, 3, 3, 1}}},
      {"bothOneCluster", {{0, 0, 0}, {1, 1, 1}}},
      {"oneVsThree", {{0, 0, 0, 0, 0, 0}, {0, 0, 1, 1, 2, 2}}},
      {"unusedLabels", {{0, 2, 2, 4, 4, 4}, {1, 1, 3, 3, 3, 0}}},
      {"small", {{0, 0, 0, 1, 1, 1, 2, 2, 2, 2}, {0, 0, 1, 1, 1, 2, 2, 2, 0, 1}}},
  };
  if (auto it = kExplicit.find(name); it != kExplicit.end()) return it->second;
  Labels a, b;
  const auto generate = [&](std::int64_t n, auto&& f) {
    for (std::int64_t i = 0; i < n; ++i) f(i);
  };
  if (name == "modular1000") {
    generate(1000, [&](std::int64_t i) {
      a.push_back(std::int32_t((i * 7 + 3) % 5));
      b.push_back(std::int32_t((i * 11 + i / 7) % 4));
    });
  } else if (name == "quadratic97") {
    generate(97, [&](std::int64_t i) {
      a.push_back(std::int32_t((i * i + 3 * i) % 7));
      b.push_back(std::int32_t((i / 13 + i % 3) % 6));
    });
  } else if (name == "noisyCopy50000") {
    generate(50000, [&](std::int64_t i) {
      const auto ai = std::int32_t((i / 97 + i * i % 11) % 6);
      const std::uint64_t h = hash32(std::uint64_t(i));
      a.push_back(ai);
      b.push_back(h < 429496730ULL ? std::int32_t((ai + 1 + std::int64_t(h % 3)) % 6) : ai);
    });
  } else if (name == "skewed300007") {
    generate(300007, [&](std::int64_t i) {
      const std::uint64_t h = hash32(std::uint64_t(i)) >> 16;
      const auto ai = std::int32_t((h * h * 8) >> 32);
      a.push_back(ai);
      b.push_back(std::int32_t((ai * 3 + (i % 5 == 0 ? i % 7 : 0)) % 7));
    });
  } else {
    ADD_FAILURE() << "unknown case " << name;
  }
  return {a, b};
}

// scikit-learn agreement: 1e-10 relative (or `relative`), 1e-14 absolute for values near 0.
void expectClose(double actual, double expected, const char* what, double relative = 1e-10) {
  const double tol = std::max(relative * std::fabs(expected), 1e-14);
  EXPECT_NEAR(actual, expected, tol) << what;
}

TEST(MetricsSklearn, AriMiEmiAmiMatchScikitLearn) {
  for (const SklearnCase& ref : kSklearnCases) {
    SCOPED_TRACE(ref.name);
    const auto [a, b] = makeCase(ref.name);
    // Two empty clusters beyond the used labels on each side: scikit-learn never sees them,
    // and they must not change anything.
    for (const int extra : {0, 2}) {
      SCOPED_TRACE("empty clusters per side: " + std::to_string(extra));
      const Contingency c = kmseg::contingency(a, labelCount(a) + extra, b, labelCount(b) + extra);
      expectClose(kmseg::adjustedRandIndex(c), ref.ari, "ARI");
      expectClose(kmseg::mutualInformation(c), ref.mi, "MI");
      // scikit-learn's EMI sums exp() of differences of double lgamma values of size N log N:
      // relative errors of 1.5e-10 at N = 5e4 and 1.4e-9 at N = 3e5 (MetricsEmi.MatchesMpmath
      // checks those two against 40-digit sums). AMI still agrees to 1e-10.
      const double emiTolerance = a.size() > 10000 ? 1e-8 : 1e-10;
      expectClose(kmseg::expectedMutualInformation(c), ref.emi, "EMI", emiTolerance);
      expectClose(kmseg::adjustedMutualInformation(c), ref.ami, "AMI");
    }
  }
}

TEST(MetricsSklearn, DegenerateCasesAreExact) {
  const auto both = [](const Labels& a, const Labels& b) {
    const Contingency c = kmseg::contingency(a, labelCount(a), b, labelCount(b));
    return std::pair{kmseg::adjustedRandIndex(c), kmseg::adjustedMutualInformation(c)};
  };
  // Identical and permuted labelings, a single cluster each: exactly 1.
  EXPECT_EQ(both({0, 1, 2, 0, 1, 2, 2, 1}, {0, 1, 2, 0, 1, 2, 2, 1}), std::pair(1.0, 1.0));
  EXPECT_EQ(both({0, 0, 0}, {1, 1, 1}), std::pair(1.0, 1.0));
  // One cluster against several: exactly 0.
  EXPECT_EQ(both({0, 0, 0, 0}, {0, 1, 2, 3}), std::pair(0.0, 0.0));
  EXPECT_EQ(both({0, 0, 0, 0, 0, 0}, {0, 0, 1, 1, 2, 2}), std::pair(0.0, 0.0));
  // No samples: scikit-learn calls that a perfect match.
  EXPECT_EQ(both({}, {}), std::pair(1.0, 1.0));
  // A single sample.
  EXPECT_EQ(both({0}, {0}), std::pair(1.0, 1.0));
  // Identical labelings of singletons (K = N): every relabeling shares all the information, so
  // EMI = MI = H and AMI is 0 / 0 in exact arithmetic; scikit-learn (1.7, its
  // test_perfect_matches) and kmseg give 1 at every N, where 0 / eps came out 0 at N = 2 and 4.
  for (int n : {2, 3, 4, 5, 8, 16, 64, 300}) {
    Labels a(static_cast<std::size_t>(n)), b(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) a[std::size_t(i)] = i, b[std::size_t(i)] = n - 1 - i;
    EXPECT_EQ(both(a, b), std::pair(1.0, 1.0)) << "N = K = " << n;
  }
}

TEST(MetricsSklearn, PermutedLabelsScoreOne) {
  const auto [a, b0] = makeCase("skewed300007");
  const std::int32_t perm[] = {5, 2, 7, 0, 3, 6, 1, 4};
  Labels b(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) b[i] = perm[a[i]];
  const Contingency c = kmseg::contingency(a, 8, b, 8);
  EXPECT_DOUBLE_EQ(kmseg::adjustedRandIndex(c), 1.0);
  EXPECT_NEAR(kmseg::adjustedMutualInformation(c), 1.0, 1e-14);
}

// EMI as the plain sum over every n_ij of the support, each term from lgamma in long double;
// far slower than the library, but free of its mode walk and truncation.
long double naiveEmi(const std::vector<std::int64_t>& as, const std::vector<std::int64_t>& bs) {
  const std::int64_t n = std::accumulate(as.begin(), as.end(), std::int64_t(0));
  const long double nl = static_cast<long double>(n);
  const auto lf = [](std::int64_t x) { return std::lgamma(static_cast<long double>(x) + 1.0L); };
  long double emi = 0.0L;
  for (const std::int64_t a : as) {
    for (const std::int64_t b : bs) {
      const long double fixed = lf(a) + lf(b) + lf(n - a) + lf(n - b) - lf(n);
      for (std::int64_t k = std::max<std::int64_t>(1, a + b - n); k <= std::min(a, b); ++k) {
        const long double logP = fixed - lf(k) - lf(a - k) - lf(b - k) - lf(n - a - b + k);
        const long double kl = static_cast<long double>(k);
        emi += kl / nl * std::log(nl * kl / (static_cast<long double>(a) * b)) * std::exp(logP);
      }
    }
  }
  return emi;
}

// A contingency table with the given marginals (its cells do not matter to the EMI).
Contingency tableWithMarginals(std::vector<std::int64_t> as, std::vector<std::int64_t> bs) {
  Contingency c;
  c.rowsA = int(as.size());
  c.colsB = int(bs.size());
  c.counts.assign(as.size() * bs.size(), 0);
  // North-west corner rule.
  std::size_t i = 0, j = 0;
  while (i < as.size() && j < bs.size()) {
    const std::int64_t m = std::min(as[i], bs[j]);
    c.counts[i * bs.size() + j] += m;
    as[i] -= m;
    bs[j] -= m;
    if (as[i] == 0) ++i;
    if (i < as.size() && bs[j] == 0) ++j;
  }
  return c;
}

TEST(MetricsEmi, MatchesTheFullSumInLongDouble) {
  const std::vector<std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>> marginals = {
      {{1, 1}, {1, 1}},
      {{1, 99999}, {50000, 50000}},  // a + b > N for some pairs, tiny mean for others
      {{3, 3, 3, 1}, {5, 5}},
      {{80000, 60000, 40000, 19800, 200}, {140000, 50000, 10000}},  // means up to 56000
      {{1000, 12000, 27000, 60000, 100000}, {199990, 10}},
  };
  for (const auto& [as, bs] : marginals) {
    const Contingency c = tableWithMarginals(as, bs);
    const double fast = kmseg::expectedMutualInformation(c);
    const long double naive = naiveEmi(as, bs);
    SCOPED_TRACE("first row sum " + std::to_string(as[0]));
    EXPECT_NEAR(fast, double(naive), 1e-11 * double(naive) + 1e-18);
  }
}

TEST(MetricsEmi, MatchesMpmath) {
  // `/usr/bin/python3 tests/data/metrics_reference.py --mpmath`: the full hypergeometric sum in
  // 40-digit arithmetic (mpmath 1.2.1), on the label vectors of the scikit-learn cases.
  const std::pair<const char*, double> kExact[] = {
      {"noisyCopy50000", 0.00025004085574665240307},
      {"skewed300007", 0.000070003012759108910985},
  };
  for (const auto& [name, emi] : kExact) {
    SCOPED_TRACE(name);
    const auto [a, b] = makeCase(name);
    const Contingency c = kmseg::contingency(a, labelCount(a), b, labelCount(b));
    EXPECT_NEAR(kmseg::expectedMutualInformation(c), emi, 1e-14 * emi);
  }
}

// A labeling pair at 20 MP with K = 32, cluster sizes from about 0.1 % to 9 % of the pixels:
// the reference in horizontal bands, the candidate a copy with about 2 % of the pixels moved
// to a neighbouring cluster. Prints the time; benchmarks, not tests, judge speed.
TEST(MetricsBenchmark, Ami20MegapixelsK32) {
  const std::int64_t n = 20'000'000;
  const int k = 32;
  std::vector<double> share(k);
  for (int i = 0; i < k; ++i) share[std::size_t(i)] = 0.001 + 0.099 * (i / 31.0) * (i / 31.0);
  const double total = std::accumulate(share.begin(), share.end(), 0.0);
  Labels reference(static_cast<std::size_t>(n)), candidate;
  std::int64_t start = 0;
  for (int i = 0; i < k; ++i) {
    const std::int64_t end =
        i == k - 1 ? n : start + std::int64_t(double(n) * share[std::size_t(i)] / total);
    std::fill(reference.begin() + start, reference.begin() + end, i);
    start = end;
  }
  candidate = reference;
  std::uint64_t state = 99;
  for (auto& label : candidate) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    if ((state >> 40) % 50 == 0) label = (label + 1) % k;
  }
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const Contingency c = kmseg::contingency(reference, k, candidate, k);
  const auto t1 = Clock::now();
  const double ami = kmseg::adjustedMutualInformation(c);
  const auto t2 = Clock::now();
  const double emi = kmseg::expectedMutualInformation(c);
  const double ari = kmseg::adjustedRandIndex(c);
  const auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  std::cout << "[ timing   ] N = " << n << ", K = " << k << ": contingency " << ms(t1 - t0)
            << " ms, AMI " << ms(t2 - t1) << " ms (AMI " << ami << ", EMI " << emi << ", ARI "
            << ari << ")\n";
  EXPECT_GT(ami, 0.9);
  EXPECT_LT(ami, 1.0);
  EXPECT_GT(emi, 0.0);
  EXPECT_LT(emi, 1e-3);
}

TEST(CompareLabelings, PermutedCopyHasNoDifference) {
  const int k = 5;
  Labels reference(1013);
  for (std::size_t i = 0; i < reference.size(); ++i)
    reference[i] = std::int32_t((i * 3 + i / 7) % k);
  const std::int32_t perm[] = {3, 0, 4, 1, 2};
  Labels candidate(reference.size());
  for (std::size_t i = 0; i < reference.size(); ++i) candidate[i] = perm[reference[i]];
  const kmseg::Comparison r = kmseg::compareLabelings(reference, candidate, k, 2.0, 2.0);
  for (int ref = 0; ref < k; ++ref) EXPECT_EQ(r.mapping[std::size_t(perm[ref])], ref);
  EXPECT_EQ(r.differing, 0);
  EXPECT_EQ(r.diffPercent, 0.0);
  EXPECT_EQ(r.mask, std::vector<std::uint8_t>(reference.size(), 0));
  EXPECT_EQ(r.clusterDiffPercent, std::vector<double>(k, 0.0));
  EXPECT_DOUBLE_EQ(r.ari, 1.0);
  EXPECT_NEAR(r.ami, 1.0, 1e-14);
  EXPECT_EQ(r.sseRatio, 1.0);
}

// A comparison stops when asked: the matching and the AMI grow with K (seconds at K = 8192), so
// both check the flag; set, they throw Cancelled, and clear, the result is the plain one.
TEST(CompareLabelings, StopsWhenCancelled) {
  const int k = 6;
  Labels reference(600), candidate(600);
  for (std::size_t i = 0; i < reference.size(); ++i) {
    reference[i] = std::int32_t(i % k);
    candidate[i] = std::int32_t((i / 7) % k);
  }
  std::atomic<bool> cancel{true};
  EXPECT_THROW(kmseg::compareLabelings(reference, candidate, k, 1.0, 1.0, &cancel),
               kmseg::Cancelled);
  const kmseg::Contingency table = kmseg::contingency(reference, k, candidate, k);
  EXPECT_THROW(kmseg::adjustedMutualInformation(table, &cancel), kmseg::Cancelled);
  EXPECT_THROW(kmseg::expectedMutualInformation(table, &cancel), kmseg::Cancelled);
  EXPECT_THROW(kmseg::maxWeightAssignment(table.counts, k, &cancel), kmseg::Cancelled);
  cancel = false;
  const kmseg::Comparison r = kmseg::compareLabelings(reference, candidate, k, 1.0, 1.0, &cancel);
  const kmseg::Comparison plain = kmseg::compareLabelings(reference, candidate, k, 1.0, 1.0);
  EXPECT_EQ(r.mapping, plain.mapping);
  EXPECT_EQ(r.ami, plain.ami);
  EXPECT_GT(r.differing, 0);
}

TEST(CompareLabelings, FlippedPixelsGiveExactPercentages) {
  // 1000 pixels, reference label i % 4 (250 per cluster), candidate relabelled 0->2, 1->3,
  // 2->1, 3->0, then 5 pixels of reference cluster 1 and 2 of cluster 3 moved elsewhere.
  const int k = 4;
  const std::int32_t perm[] = {2, 3, 1, 0};
  Labels reference(1000), candidate(1000);
  for (std::size_t i = 0; i < reference.size(); ++i) {
    reference[i] = std::int32_t(i % 4);
    candidate[i] = perm[reference[i]];
  }
  const std::vector<std::size_t> flipped = {1, 5, 9, 401, 997, 3, 503};
  for (std::size_t i : flipped) candidate[i] = perm[(reference[i] + 1) % 4];
  const kmseg::Comparison r = kmseg::compareLabelings(reference, candidate, k, 10.0, 12.5);
  EXPECT_EQ(r.mapping, (std::vector<int>{3, 2, 0, 1}));
  EXPECT_EQ(r.differing, 7);
  EXPECT_DOUBLE_EQ(r.diffPercent, 0.7);
  EXPECT_EQ(r.clusterSize, (std::vector<std::int64_t>{250, 250, 250, 250}));
  ASSERT_EQ(r.clusterDiffPercent.size(), 4u);
  EXPECT_EQ(r.clusterDiffPercent[0], 0.0);
  EXPECT_DOUBLE_EQ(r.clusterDiffPercent[1], 2.0);
  EXPECT_EQ(r.clusterDiffPercent[2], 0.0);
  EXPECT_DOUBLE_EQ(r.clusterDiffPercent[3], 0.8);
  std::vector<std::uint8_t> mask(1000, 0);
  for (std::size_t i : flipped) mask[i] = 1;
  EXPECT_EQ(r.mask, mask);
  EXPECT_DOUBLE_EQ(r.sseRatio, 1.25);
  EXPECT_LT(r.ari, 1.0);
  EXPECT_LT(r.ami, 1.0);
  const Contingency c = kmseg::contingency(reference, k, candidate, k);
  EXPECT_EQ(r.ari, kmseg::adjustedRandIndex(c));
  EXPECT_EQ(r.ami, kmseg::adjustedMutualInformation(c));
}

TEST(CompareLabelings, EmptyClustersAndSseEdgeCases) {
  // K = 6 with clusters 4 and 5 empty on both sides.
  const Labels reference = {0, 1, 2, 3, 0, 1};
  const Labels candidate = {1, 0, 3, 2, 1, 0};
  const kmseg::Comparison r = kmseg::compareLabelings(reference, candidate, 6, 0.0, 0.0);
  EXPECT_EQ(r.differing, 0);
  EXPECT_EQ(r.clusterSize, (std::vector<std::int64_t>{2, 2, 1, 1, 0, 0}));
  EXPECT_EQ(r.clusterDiffPercent, std::vector<double>(6, 0.0));
  EXPECT_EQ(r.sseRatio, 1.0);
  std::vector<int> sorted = r.mapping;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(kmseg::compareLabelings(reference, candidate, 6, 0.0, 1.0).sseRatio,
            std::numeric_limits<double>::infinity());
  EXPECT_EQ(kmseg::compareLabelings(reference, candidate, 6, 4.0, 0.0).sseRatio, 0.0);
  // K = 1 and a single pixel.
  const kmseg::Comparison one = kmseg::compareLabelings({0}, {0}, 1, 1.0, 1.0);
  EXPECT_EQ(one.diffPercent, 0.0);
  EXPECT_EQ(one.mask, std::vector<std::uint8_t>{0});
  EXPECT_EQ(one.ari, 1.0);
  EXPECT_EQ(one.ami, 1.0);
}

TEST(CompareLabelings, RejectsBadInput) {
  EXPECT_THROW(kmseg::compareLabelings({0, 1}, {0}, 2, 1.0, 1.0), kmseg::InvalidArgument);
  EXPECT_THROW(kmseg::compareLabelings({0, 2}, {0, 1}, 2, 1.0, 1.0), kmseg::InvalidArgument);
  EXPECT_THROW(kmseg::compareLabelings({0, 1}, {0, -1}, 2, 1.0, 1.0), kmseg::InvalidArgument);
  EXPECT_THROW(kmseg::compareLabelings({0}, {0}, 0, 1.0, 1.0), kmseg::InvalidArgument);
  EXPECT_THROW(kmseg::compareLabelings({0}, {0}, 1, -1.0, 1.0), kmseg::InvalidArgument);
  EXPECT_THROW(kmseg::compareLabelings({0}, {0}, 1, 1.0, std::nan("")), kmseg::InvalidArgument);
  try {
    kmseg::compareLabelings({0, 1, 2}, {0, 1}, 3, 1.0, 1.0);
    FAIL() << "no exception";
  } catch (const kmseg::InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("2 samples"), std::string::npos) << what;
    EXPECT_NE(what.find("3"), std::string::npos) << what;
  }
}

}  // namespace
