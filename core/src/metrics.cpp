// SPDX-License-Identifier: MIT
#include "kmseg/metrics.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>

#include "kmseg/error.h"
#include "kmseg/parallel.h"

namespace kmseg {

namespace {

// Pair counts reach N^2 and their products N^4; __int128 keeps them exact for N < 2^31.
__extension__ typedef __int128 Int128;

// Largest K_a x K_b table contingency() builds (512 MiB of counts).
constexpr std::int64_t kMaxContingencyCells = std::int64_t(1) << 26;
static_assert(std::int64_t(kMaxComparedClusters) * kMaxComparedClusters <= kMaxContingencyCells,
              "compareLabelings must accept every K up to kMaxComparedClusters");
// Tables up to this many cells are counted in per-thread copies; larger ones in one pass.
constexpr std::int64_t kMaxThreadLocalCells = std::int64_t(1) << 16;
// A hypergeometric walk stops where a term falls below this fraction of the running sums.
constexpr long double kNegligible = 1e-20L;

// Checks the labels of one labeling against [0, k); names the first offender.
void checkLabels(const std::vector<std::int32_t>& labels, int k, const char* which) {
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= k) {
      throw InvalidArgument("label " + std::to_string(labels[i]) + " at sample " +
                            std::to_string(i) + " of " + which + " is outside [0, " +
                            std::to_string(k) + ")");
    }
  }
}

void checkTable(const Contingency& c) {
  if (c.rowsA < 0 || c.colsB < 0 ||
      c.counts.size() != std::size_t(c.rowsA) * std::size_t(c.colsB)) {
    throw InvalidArgument("contingency table of " + std::to_string(c.rowsA) + " x " +
                          std::to_string(c.colsB) + " cells holds " +
                          std::to_string(c.counts.size()) + " counts");
  }
  for (std::int64_t v : c.counts) {
    if (v < 0) throw InvalidArgument("contingency table holds a negative count");
  }
}

// Row sums, column sums and total of a validated table.
struct Marginals {
  std::vector<std::int64_t> a;  // per row (labeling a)
  std::vector<std::int64_t> b;  // per column (labeling b)
  std::int64_t n = 0;
  int nonEmptyA = 0;
  int nonEmptyB = 0;
};

Marginals marginals(const Contingency& c) {
  checkTable(c);
  Marginals m;
  m.a.assign(std::size_t(c.rowsA), 0);
  m.b.assign(std::size_t(c.colsB), 0);
  for (int i = 0; i < c.rowsA; ++i) {
    for (int j = 0; j < c.colsB; ++j) {
      const std::int64_t v = c(i, j);
      m.a[std::size_t(i)] += v;
      m.b[std::size_t(j)] += v;
      m.n += v;
    }
  }
  m.nonEmptyA = int(std::count_if(m.a.begin(), m.a.end(), [](std::int64_t v) { return v > 0; }));
  m.nonEmptyB = int(std::count_if(m.b.begin(), m.b.end(), [](std::int64_t v) { return v > 0; }));
  return m;
}

// Entropy (natural log) of cluster sizes `sizes` summing to n; empty clusters contribute 0.
long double entropy(const std::vector<std::int64_t>& sizes, std::int64_t n) {
  int nonEmpty = 0;
  for (std::int64_t s : sizes) nonEmpty += s > 0;
  if (nonEmpty <= 1) return 0.0L;
  const long double logN = std::log(static_cast<long double>(n));
  long double h = 0.0L;
  for (std::int64_t s : sizes) {
    if (s == 0) continue;
    const long double ls = static_cast<long double>(s);
    h -= (ls / n) * (std::log(ls) - logN);
  }
  return h;
}

// 1 / (k (k - 1)) for k = 2 ... 39, the coefficients of excessLog's series (0 below k = 2).
constexpr auto kExcessLogSeries = [] {
  std::array<long double, 40> c{};
  for (int k = 2; k < 40; ++k) c[std::size_t(k)] = 1.0L / (static_cast<long double>(k) * (k - 1));
  return c;
}();

// g(t) = (1 + t) log(1 + t) - t >= 0, accurate near t = 0 where the two terms cancel.
long double excessLog(long double t) {
  if (t <= -1.0L) return 1.0L;  // the limit at t = -1 (n_ij = 0)
  if (std::fabs(t) > 0.125L) return (1.0L + t) * std::log1p(t) - t;
  // Taylor series: sum over k >= 2 of (-1)^k t^k / (k (k - 1)); |t| <= 1/8 converges quickly.
  // power holds (-1)^k t^k; the coefficients are multiplied, not divided (AMI's time at 12 MP
  // is mostly this loop).
  long double power = t * t;
  long double sum = 0.0L;
  for (std::size_t k = 2; k < kExcessLogSeries.size(); ++k) {
    const long double term = power * kExcessLogSeries[k];
    sum += term;
    if (std::fabs(term) <= 1e-22L * std::fabs(sum)) break;
    power *= -t;
  }
  return sum;
}

// v as a long double: through int64 when it fits (one instruction; __int128's conversion is a
// library call).
long double toLongDouble(Int128 v) {
  constexpr Int128 kMax = std::numeric_limits<std::int64_t>::max();
  return v >= -kMax && v <= kMax ? static_cast<long double>(static_cast<std::int64_t>(v))
                                 : static_cast<long double>(v);
}

// Expected mutual information contributed by one (row, column) pair with sizes a and b out of
// n samples: E[(n_ij / n) log(n n_ij / (a b))] with n_ij hypergeometric. Because E[n_ij] = mu
// = a b / n exactly, this equals (mu / n) E[g(t)] with t = n_ij / mu - 1, a sum of
// non-negative terms (no cancellation). The pmf is evaluated relative to its mode through the
// exact ratio of consecutive terms and normalised by the sum of the walked terms, which is 1
// up to the negligible tails; no lgamma, so no loss from differences of huge log-factorials.
long double pairExpectedMi(std::int64_t a, std::int64_t b, std::int64_t n) {
  const std::int64_t lo = std::max<std::int64_t>(0, a + b - n);
  const std::int64_t hi = std::min(a, b);
  const Int128 ab = Int128(a) * b;
  const long double abL = toLongDouble(ab), inverseAb = 1.0L / abL;
  const auto tOf = [&](std::int64_t k) { return toLongDouble(Int128(k) * n - ab) * inverseAb; };
  // Ratio p(k + 1) / p(k) of the hypergeometric pmf.
  const auto ratioUp = [&](std::int64_t k) {
    const long double num = toLongDouble(Int128(a - k) * (b - k));
    const long double den = toLongDouble(Int128(k + 1) * (n - a - b + k + 1));
    return num / den;
  };
  std::int64_t mode = static_cast<std::int64_t>((Int128(a + 1) * (b + 1)) / (n + 2));
  mode = std::clamp(mode, lo, hi);

  long double weightSum = 1.0L;
  long double termSum = excessLog(tOf(mode));
  long double w = 1.0L;
  for (std::int64_t k = mode; k < hi; ++k) {
    w *= ratioUp(k);
    const long double term = w * excessLog(tOf(k + 1));
    weightSum += w;
    termSum += term;
    if (w <= kNegligible * weightSum && term <= kNegligible * termSum) break;
  }
  w = 1.0L;
  for (std::int64_t k = mode; k > lo; --k) {
    w /= ratioUp(k - 1);
    const long double term = w * excessLog(tOf(k - 1));
    weightSum += w;
    termSum += term;
    if (w <= kNegligible * weightSum && term <= kNegligible * termSum) break;
  }
  const long double mu = abL / static_cast<long double>(n);
  return mu / static_cast<long double>(n) * (termSum / weightSum);
}

}  // namespace

Contingency contingency(const std::vector<std::int32_t>& a, int ka,
                        const std::vector<std::int32_t>& b, int kb) {
  if (ka < 1 || kb < 1) {
    throw InvalidArgument("contingency table needs at least one cluster per labeling, got " +
                          std::to_string(ka) + " and " + std::to_string(kb));
  }
  if (a.size() != b.size()) {
    throw InvalidArgument("labelings differ in size: " + std::to_string(a.size()) + " and " +
                          std::to_string(b.size()) + " samples");
  }
  const std::int64_t cells = std::int64_t(ka) * kb;
  if (cells > kMaxContingencyCells) {
    throw InvalidArgument("contingency table of " + std::to_string(ka) + " x " +
                          std::to_string(kb) + " clusters exceeds the limit of " +
                          std::to_string(kMaxContingencyCells) + " cells");
  }
  Contingency c;
  c.rowsA = ka;
  c.colsB = kb;
  c.counts.assign(std::size_t(cells), 0);

  const std::int64_t n = static_cast<std::int64_t>(a.size());
  const std::int32_t* pa = a.data();
  const std::int32_t* pb = b.data();
  const auto ua = static_cast<std::uint32_t>(ka);
  const auto ub = static_cast<std::uint32_t>(kb);
  std::int64_t bad = 0;
  if (cells <= kMaxThreadLocalCells) {
    // Integer counts: the merge order does not change the result.
#pragma omp parallel reduction(+ : bad)
    {
      std::vector<std::int64_t> local(std::size_t(cells), 0);
#pragma omp for schedule(static)
      for (std::int64_t i = 0; i < n; ++i) {
        const auto x = static_cast<std::uint32_t>(pa[i]);
        const auto y = static_cast<std::uint32_t>(pb[i]);
        if (x < ua && y < ub) {
          ++local[std::size_t(x) * ub + y];
        } else {
          ++bad;
        }
      }
#pragma omp critical(kmseg_contingency_merge)
      for (std::size_t k = 0; k < local.size(); ++k) c.counts[k] += local[k];
    }
  } else {
    for (std::int64_t i = 0; i < n; ++i) {
      const auto x = static_cast<std::uint32_t>(pa[i]);
      const auto y = static_cast<std::uint32_t>(pb[i]);
      if (x < ua && y < ub) {
        ++c.counts[std::size_t(x) * ub + y];
      } else {
        ++bad;
      }
    }
  }
  if (bad > 0) {
    checkLabels(a, ka, "the first labeling");
    checkLabels(b, kb, "the second labeling");
  }
  return c;
}

std::vector<int> maxWeightAssignment(const std::vector<std::int64_t>& weights, int n,
                                     const std::atomic<bool>* cancel) {
  if (n < 0) throw InvalidArgument("assignment size " + std::to_string(n) + " is negative");
  if (weights.size() != std::size_t(n) * std::size_t(n)) {
    throw InvalidArgument("assignment of size " + std::to_string(n) + " needs " +
                          std::to_string(std::size_t(n) * std::size_t(n)) + " weights, got " +
                          std::to_string(weights.size()));
  }
  if (n == 0) return {};
  const auto [minIt, maxIt] = std::minmax_element(weights.begin(), weights.end());
  const std::int64_t maxW = *maxIt;
  // Potentials stay within about 2 n times the cost range; keep that inside int64.
  const Int128 range = Int128(maxW) - Int128(*minIt);
  const Int128 rangeLimit = Int128(std::numeric_limits<std::int64_t>::max() / 4) / (n + 1);
  if (range > rangeLimit) {
    throw InvalidArgument("assignment weights span more than " +
                          std::to_string(static_cast<std::int64_t>(rangeLimit)) + " for a " +
                          std::to_string(n) + " x " + std::to_string(n) + " matrix");
  }
  // Minimise cost = maxW - w >= 0: shortest augmenting paths with row/column potentials
  // (Jonker-Volgenant style Kuhn-Munkres), rows added one at a time; 1-based with a virtual
  // column 0. Ties go to the lowest column index, so the result is deterministic.
  const auto cost = [&](int i, int j) {
    return maxW - weights[std::size_t(i - 1) * std::size_t(n) + std::size_t(j - 1)];
  };
  constexpr std::int64_t kInf = std::numeric_limits<std::int64_t>::max();
  std::vector<std::int64_t> u(std::size_t(n) + 1, 0), v(std::size_t(n) + 1, 0);
  std::vector<int> rowOfCol(std::size_t(n) + 1, 0), way(std::size_t(n) + 1, 0);
  std::vector<std::int64_t> minSlack(std::size_t(n) + 1);
  std::vector<char> used(std::size_t(n) + 1);
  for (int i = 1; i <= n; ++i) {
    if (cancel && cancel->load(std::memory_order_relaxed)) throw Cancelled();
    rowOfCol[0] = i;
    int j0 = 0;
    std::fill(minSlack.begin(), minSlack.end(), kInf);
    std::fill(used.begin(), used.end(), 0);
    do {
      used[std::size_t(j0)] = 1;
      const int i0 = rowOfCol[std::size_t(j0)];
      std::int64_t delta = kInf;
      int j1 = 0;
      for (int j = 1; j <= n; ++j) {
        if (used[std::size_t(j)]) continue;
        const std::int64_t cur = cost(i0, j) - u[std::size_t(i0)] - v[std::size_t(j)];
        if (cur < minSlack[std::size_t(j)]) {
          minSlack[std::size_t(j)] = cur;
          way[std::size_t(j)] = j0;
        }
        if (minSlack[std::size_t(j)] < delta) {
          delta = minSlack[std::size_t(j)];
          j1 = j;
        }
      }
      assert(j1 > 0);
      for (int j = 0; j <= n; ++j) {
        if (used[std::size_t(j)]) {
          u[std::size_t(rowOfCol[std::size_t(j)])] += delta;
          v[std::size_t(j)] -= delta;
        } else {
          minSlack[std::size_t(j)] -= delta;
        }
      }
      j0 = j1;
    } while (rowOfCol[std::size_t(j0)] != 0);
    do {
      const int j1 = way[std::size_t(j0)];
      rowOfCol[std::size_t(j0)] = rowOfCol[std::size_t(j1)];
      j0 = j1;
    } while (j0 != 0);
  }
  std::vector<int> assignment(std::size_t(n), -1);
  for (int j = 1; j <= n; ++j) assignment[std::size_t(rowOfCol[std::size_t(j)] - 1)] = j - 1;
  return assignment;
}

double adjustedRandIndex(const Contingency& c) {
  const Marginals m = marginals(c);
  // Ordered pair counts as scikit-learn's pair_confusion_matrix, all exact integers.
  Int128 sumSquares = 0, sumA2 = 0, sumB2 = 0;
  for (std::int64_t v : c.counts) sumSquares += Int128(v) * v;
  for (std::int64_t v : m.a) sumA2 += Int128(v) * v;
  for (std::int64_t v : m.b) sumB2 += Int128(v) * v;
  const Int128 n = m.n;
  const Int128 tp = sumSquares - n;
  const Int128 fp = sumB2 - sumSquares;
  const Int128 fn = sumA2 - sumSquares;
  const Int128 tn = n * n - fp - fn - sumSquares;
  if (fn == 0 && fp == 0) return 1.0;  // full agreement, or fewer than two samples
  if (m.n < (std::int64_t(1) << 31)) {
    // Every factor is below 2^62, every product below 2^124: exact.
    const Int128 num = 2 * (tp * tn - fn * fp);
    const Int128 den = (tp + fn) * (fn + tn) + (tp + fp) * (fp + tn);
    return static_cast<double>(static_cast<long double>(num) / static_cast<long double>(den));
  }
  const auto ld = [](Int128 x) { return static_cast<long double>(x); };
  const long double num = 2.0L * (ld(tp) * ld(tn) - ld(fn) * ld(fp));
  const long double den =
      (ld(tp) + ld(fn)) * (ld(fn) + ld(tn)) + (ld(tp) + ld(fp)) * (ld(fp) + ld(tn));
  return static_cast<double>(num / den);
}

double mutualInformation(const Contingency& c) {
  const Marginals m = marginals(c);
  if (m.nonEmptyA <= 1 || m.nonEmptyB <= 1) return 0.0;
  // Sum over non-zero cells of (n_ij / N) log(N n_ij / (a_i b_j)); the logarithm as log1p of an
  // exact integer difference. Like scikit-learn, terms below DBL_EPSILON count as 0 and the
  // sum is clipped at 0.
  long double mi = 0.0L;
  const long double nL = static_cast<long double>(m.n);
  for (int i = 0; i < c.rowsA; ++i) {
    for (int j = 0; j < c.colsB; ++j) {
      const std::int64_t nij = c(i, j);
      if (nij == 0) continue;
      const Int128 ab = Int128(m.a[std::size_t(i)]) * m.b[std::size_t(j)];
      const long double t =
          static_cast<long double>(Int128(nij) * m.n - ab) / static_cast<long double>(ab);
      const long double term = static_cast<long double>(nij) / nL * std::log1p(t);
      if (std::fabs(term) >= DBL_EPSILON) mi += term;
    }
  }
  return static_cast<double>(std::max(mi, 0.0L));
}

double expectedMutualInformation(const Contingency& c, const std::atomic<bool>* cancel) {
  const Marginals m = marginals(c);
  if (m.nonEmptyA <= 1 || m.nonEmptyB <= 1) return 0.0;
  // One value per (row, column) pair, summed afterwards in a fixed order: the result does not
  // depend on the number of threads.
  const std::int64_t pairs = std::int64_t(c.rowsA) * c.colsB;
  std::vector<long double> perPair(std::size_t(pairs), 0.0L);
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t p = 0; p < pairs; ++p) {
    // No exception may leave the parallel loop: a cancelled loop skips its pairs, then throws.
    if (cancel && cancel->load(std::memory_order_relaxed)) continue;
    const std::int64_t a = m.a[std::size_t(p / c.colsB)];
    const std::int64_t b = m.b[std::size_t(p % c.colsB)];
    if (a > 0 && b > 0) perPair[std::size_t(p)] = pairExpectedMi(a, b, m.n);
  }
  if (cancel && cancel->load(std::memory_order_relaxed)) throw Cancelled();
  long double emi = 0.0L;
  for (long double v : perPair) emi += v;
  return static_cast<double>(emi);
}

double adjustedMutualInformation(const Contingency& c, const std::atomic<bool>* cancel) {
  const Marginals m = marginals(c);
  // Neither labeling splits the data (or there is no data): a perfect match, as scikit-learn.
  if ((m.nonEmptyA == 1 && m.nonEmptyB == 1) || (m.nonEmptyA == 0 && m.nonEmptyB == 0)) {
    return 1.0;
  }
  // Only one of them splits it: no information shared, exactly (as scikit-learn since 1.7).
  if (m.nonEmptyA == 1 || m.nonEmptyB == 1) return 0.0;
  const double mi = mutualInformation(c);
  const double emi = expectedMutualInformation(c, cancel);
  const double hA = static_cast<double>(entropy(m.a, m.n));
  const double hB = static_cast<double>(entropy(m.b, m.n));
  const double normalizer = 0.5 * (hA + hB);
  double denominator = normalizer - emi;
  // As scikit-learn: keep the sign and stay away from 0 when EMI reaches the normaliser.
  if (denominator < 0) {
    denominator = std::min(denominator, -DBL_EPSILON);
  } else {
    denominator = std::max(denominator, DBL_EPSILON);
  }
  // The numerator likewise (scikit-learn since 1.7): where MI equals its expectation and the
  // normaliser, as for two identical labelings of singletons (every relabeling shares all the
  // information, so EMI = MI = H), the quotient is 1, not 0 / eps = 0.
  double numerator = mi - emi;
  if (numerator < 0) {
    numerator = std::min(numerator, -DBL_EPSILON);
  } else {
    numerator = std::max(numerator, DBL_EPSILON);
  }
  return numerator / denominator;
}

Comparison compareLabelings(const std::vector<std::int32_t>& reference,
                            const std::vector<std::int32_t>& candidate, int k, double referenceSse,
                            double candidateSse, const std::atomic<bool>* cancel) {
  if (k < 1) throw InvalidArgument("K = " + std::to_string(k) + " is below the minimum of 1");
  if (reference.size() != candidate.size()) {
    throw InvalidArgument("candidate labeling has " + std::to_string(candidate.size()) +
                          " samples, the reference " + std::to_string(reference.size()));
  }
  if (!(referenceSse >= 0.0) || !(candidateSse >= 0.0)) {
    throw InvalidArgument("SSE must be >= 0, got reference " + std::to_string(referenceSse) +
                          " and candidate " + std::to_string(candidateSse));
  }
  Comparison r;
  // Rows: reference labels; columns: candidate labels.
  const Contingency table = contingency(reference, k, candidate, k);

  std::vector<std::int64_t> weights(std::size_t(k) * std::size_t(k));
  for (int cand = 0; cand < k; ++cand) {
    for (int ref = 0; ref < k; ++ref) {
      weights[std::size_t(cand) * std::size_t(k) + std::size_t(ref)] = table(ref, cand);
    }
  }
  r.mapping = maxWeightAssignment(weights, k, cancel);

  const std::int64_t n = static_cast<std::int64_t>(reference.size());
  r.clusterSize.assign(std::size_t(k), 0);
  for (int ref = 0; ref < k; ++ref) {
    for (int cand = 0; cand < k; ++cand) r.clusterSize[std::size_t(ref)] += table(ref, cand);
  }
  std::int64_t agreeing = 0;
  r.clusterDiffPercent.assign(std::size_t(k), 0.0);
  for (int cand = 0; cand < k; ++cand) {
    const int ref = r.mapping[std::size_t(cand)];
    const std::int64_t agree = table(ref, cand);
    agreeing += agree;
    const std::int64_t size = r.clusterSize[std::size_t(ref)];
    if (size > 0) {
      r.clusterDiffPercent[std::size_t(ref)] = 100.0 * double(size - agree) / double(size);
    }
  }
  r.differing = n - agreeing;
  r.diffPercent = n > 0 ? 100.0 * double(r.differing) / double(n) : 0.0;

  resizeFresh(r.mask, reference.size());
  const std::int32_t* pr = reference.data();
  const std::int32_t* pc = candidate.data();
  const int* map = r.mapping.data();
  std::uint8_t* mask = r.mask.data();
  std::int64_t masked = 0;
#pragma omp parallel for schedule(static) reduction(+ : masked)
  for (std::int64_t i = 0; i < n; ++i) {
    const bool differs = map[pc[i]] != pr[i];
    mask[i] = differs ? 1 : 0;
    masked += differs;
  }
  assert(masked == r.differing);
  (void)masked;

  r.ari = adjustedRandIndex(table);
  r.ami = adjustedMutualInformation(table, cancel);
  if (referenceSse > 0.0) {
    r.sseRatio = candidateSse / referenceSse;
  } else {
    r.sseRatio = candidateSse > 0.0 ? std::numeric_limits<double>::infinity() : 1.0;
  }
  return r;
}

}  // namespace kmseg
