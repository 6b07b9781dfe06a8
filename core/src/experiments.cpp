// SPDX-License-Identifier: MIT
#include "kmseg/experiments.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <type_traits>
#include <vector>

#include "kmseg/distance.h"
#include "kmseg/engine.h"
#include "kmseg/error.h"
#include "kmseg/kmeans.h"
#include "kmseg/parallel.h"
#include "precision_types.h"

namespace kmseg {

namespace {

// The rows of `x` as one mode holds them: rounded to the working precision, then to T.
template <class T, class WT>
std::vector<T> rounded(const Matrix& x) {
  std::vector<T> out(x.values.size());
  for (std::size_t e = 0; e < out.size(); ++e) out[e] = Math<T>::from(double(WT(x.values[e])));
  return out;
}

// One mode's distances of chosen rows of P against every row of C.
class RowEvaluator {
 public:
  virtual ~RowEvaluator() = default;
  // Writes rows [first, first + rows) x |C| to `out` (row-major) and returns their fallbacks.
  virtual std::int64_t evaluate(std::size_t first, std::size_t rows, double* out,
                                int threads) const = 0;
};

// The rows as the mode holds them (low copies and their norms; for a mixed mode the rows in H)
// are prepared once; each pair is then evaluated with the shared formulas, as modeDistance.
template <class LowT, class HighT, class WT>
class Evaluator final : public RowEvaluator {
  static constexpr bool kFallback = !std::is_void_v<HighT>;
  using H = std::conditional_t<kFallback, HighT, double>;

 public:
  Evaluator(Mode mode, double rho, const Matrix& p, const Matrix& c)
      : d_(p.cols), cRows_(c.rows), pl_(rounded<LowT, WT>(p)), cl_(rounded<LowT, WT>(c)) {
    const int di = int(d_);
    pn_.resize(p.rows);
    cn_.resize(c.rows);
    for (std::size_t i = 0; i < p.rows; ++i) pn_[i] = squaredNorm<LowT>(pl_.data() + i * d_, di);
    for (std::size_t j = 0; j < c.rows; ++j) cn_[j] = squaredNorm<LowT>(cl_.data() + j * d_, di);
    if constexpr (kFallback) {
      ph_ = rounded<H, WT>(p);
      ch_ = rounded<H, WT>(c);
      factor_ = Math<H>::from(reliabilityFactor(rho, di, lowPrecision(mode)));
    }
  }

  std::int64_t evaluate(std::size_t first, std::size_t rows, double* out,
                        int threads) const override {
    const int di = int(d_);
    std::vector<std::int64_t> fell(rows, 0);
    parallelFor(std::int64_t(rows), threads, [&](std::int64_t task) {
      const std::size_t r = std::size_t(task), i = first + r;
      double* row = out + r * cRows_;
      for (std::size_t j = 0; j < cRows_; ++j) {
        const Expanded<LowT> e = expandedDistance<LowT>(
            pn_[i], cn_[j], dotProduct<LowT>(pl_.data() + i * d_, cl_.data() + j * d_, di));
        if constexpr (kFallback) {
          bool f = false;
          row[j] = double(Math<H>::toDouble(mixedDistance<LowT, H>(
              e, ph_.data() + i * d_, ch_.data() + j * d_, di, factor_, &f)));
          fell[r] += f ? 1 : 0;
        } else {
          row[j] = Math<LowT>::toDouble(e.distance);
        }
      }
    });
    std::int64_t total = 0;
    for (std::int64_t f : fell) total += f;
    return total;
  }

 private:
  std::size_t d_, cRows_;
  std::vector<LowT> pl_, cl_, pn_, cn_;
  std::vector<H> ph_, ch_;
  H factor_{};
};

std::unique_ptr<RowEvaluator> makeEvaluator(Mode mode, double rho, Precision working,
                                            const Matrix& p, const Matrix& c) {
  checkDistanceInputs(rho, p, c);
  checkModeFeatures(mode, p.cols);
  const bool w64 = working == Precision::Fp64;
  switch (mode) {
#define KMSEG_EVALUATOR_CASE(e, name, low, high)                                                   \
  case Mode::e:                                                                                    \
    if (w64)                                                                                       \
      return std::make_unique<Evaluator<TypeOf<low>::type, TypeOf<high>::type, double>>(mode, rho, \
                                                                                        p, c);     \
    return std::make_unique<Evaluator<TypeOf<low>::type, TypeOf<high>::type, float>>(mode, rho, p, \
                                                                                     c);
    KMSEG_FOR_EACH_MODE(KMSEG_EVALUATOR_CASE)
#undef KMSEG_EVALUATOR_CASE
  }
  throw InvalidArgument("measureDistances: unknown mode");
}

// The relative error of `value` against the exact squared distance: 0 for an exact 0, infinite
// for a value that is not finite (NaN from an overflowed expanded formula included) or for a
// non-zero value where the exact distance is 0.
double relativeError(double value, long double exact) {
  if (std::isnan(value)) return INFINITY;
  return exact > 0 ? double(std::fabs((long double)value - exact) / exact)
                   : (value == 0.0 ? 0.0 : INFINITY);
}

template <class WT>
void addErrors(DistanceAccuracy& into, const Matrix& p, const Matrix& c, std::size_t first,
               std::size_t rows, const double* values, double nearLimit, int threads) {
  const std::size_t d = p.cols;
  // The rows as W holds them, widened exactly to long double.
  std::vector<long double> cw(c.values.size());
  for (std::size_t e = 0; e < cw.size(); ++e) cw[e] = (long double)WT(c.values[e]);
  std::vector<DistanceAccuracy> parts(rows);
  parallelFor(std::int64_t(rows), threads, [&](std::int64_t task) {
    const std::size_t r = std::size_t(task);
    std::vector<long double> pw(d);
    for (std::size_t q = 0; q < d; ++q) pw[q] = (long double)WT(p.values[(first + r) * d + q]);
    DistanceAccuracy& a = parts[r];
    for (std::size_t j = 0; j < c.rows; ++j) {
      long double exact = 0;
      for (std::size_t q = 0; q < d; ++q) {
        const long double t = pw[q] - cw[j * d + q];
        exact += t * t;
      }
      const double error = relativeError(values[r * c.rows + j], exact);
      const bool near = exact < (long double)nearLimit;
      ++a.pairs;
      a.nearPairs += near ? 1 : 0;
      a.maxRelError = std::max(a.maxRelError, error);
      double& part = near ? a.maxRelErrorNear : a.maxRelErrorFar;
      part = std::max(part, error);
    }
  });
  for (const DistanceAccuracy& a : parts) {
    into.pairs += a.pairs;
    into.nearPairs += a.nearPairs;
    into.maxRelError = std::max(into.maxRelError, a.maxRelError);
    into.maxRelErrorNear = std::max(into.maxRelErrorNear, a.maxRelErrorNear);
    into.maxRelErrorFar = std::max(into.maxRelErrorFar, a.maxRelErrorFar);
  }
}

}  // namespace

void checkDistanceInputs(double rho, const Matrix& p, const Matrix& c) {
  if (p.empty() || c.empty()) throw InvalidArgument("measureDistances: P and C must not be empty");
  if (p.cols != c.cols)
    throw InvalidArgument("measureDistances: P has " + std::to_string(p.cols) + " columns and C " +
                          std::to_string(c.cols) + "; they must be equal");
  if (!(rho > 2.0) || !std::isfinite(rho))
    throw InvalidArgument("rho = " + numberText(rho) + ": rho must be > 2 and finite");
  checkFinite(p, "P");
  checkFinite(c, "C");
}

std::size_t distanceChunkRows(std::size_t cRows, std::size_t pairs) {
  return std::max<std::size_t>(1, pairs / std::max<std::size_t>(cRows, 1));
}

void addDistanceErrors(DistanceAccuracy& into, Precision working, const Matrix& p, const Matrix& c,
                       std::size_t first, std::size_t rows, const double* values, double nearLimit,
                       int threads) {
  if (p.cols != c.cols)
    throw InvalidArgument("addDistanceErrors: P has " + std::to_string(p.cols) + " columns and C " +
                          std::to_string(c.cols));
  if (first > p.rows || rows > p.rows - first)
    throw InvalidArgument("addDistanceErrors: rows " + std::to_string(first) + " to " +
                          std::to_string(first + rows) + " are not rows of P (" +
                          std::to_string(p.rows) + ")");
  const int t = resolveThreadCount(threads);
  if (working == Precision::Fp64)
    addErrors<double>(into, p, c, first, rows, values, nearLimit, t);
  else
    addErrors<float>(into, p, c, first, rows, values, nearLimit, t);
}

std::vector<double> pairDistances(Mode mode, double rho, Precision working, const Matrix& p,
                                  const Matrix& c, std::int64_t* fallbacks, int threads) {
  const std::unique_ptr<RowEvaluator> ev = makeEvaluator(mode, rho, working, p, c);
  std::vector<double> values(p.rows * c.rows);
  const std::int64_t fell = ev->evaluate(0, p.rows, values.data(), resolveThreadCount(threads));
  if (fallbacks) *fallbacks = fell;
  return values;
}

DistanceAccuracy measureDistances(Mode mode, double rho, Precision working, const Matrix& p,
                                  const Matrix& c, double nearLimit, int threads) {
  const std::unique_ptr<RowEvaluator> ev = makeEvaluator(mode, rho, working, p, c);
  const int t = resolveThreadCount(threads);
  const std::size_t chunk = std::min(p.rows, distanceChunkRows(c.rows));
  std::vector<double> values(chunk * c.rows);
  DistanceAccuracy total;
  for (std::size_t first = 0; first < p.rows; first += chunk) {
    const std::size_t rows = std::min(chunk, p.rows - first);
    const auto start = std::chrono::steady_clock::now();
    total.fallbacks += ev->evaluate(first, rows, values.data(), t);
    total.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    addDistanceErrors(total, working, p, c, first, rows, values.data(), nearLimit, t);
  }
  return total;
}

Matrix makeBlobs(std::size_t n, std::size_t d, int clusters, double sigma, std::uint64_t seed) {
  if (n < 1 || d < 1 || clusters < 1)
    throw InvalidArgument("makeBlobs: samples, features and clusters must be >= 1 (got " +
                          std::to_string(n) + ", " + std::to_string(d) + ", " +
                          std::to_string(clusters) + ")");
  if (!(sigma >= 0.0) || !std::isfinite(sigma))
    throw InvalidArgument("makeBlobs: sigma must be finite and >= 0");
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> box(-10.0, 10.0);
  std::normal_distribution<double> noise(0.0, 1.0);
  std::vector<double> centres(std::size_t(clusters) * d);
  for (double& v : centres) v = box(rng);
  Matrix x(n, d);
  for (std::size_t i = 0; i < n; ++i) {
    const double* centre = centres.data() + (i % std::size_t(clusters)) * d;
    for (std::size_t q = 0; q < d; ++q) x(i, q) = centre[q] + sigma * noise(rng);
  }
  return x;
}

}  // namespace kmseg
