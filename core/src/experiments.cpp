// SPDX-License-Identifier: MIT
#include "kmseg/experiments.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <type_traits>
#include <vector>

#include "kmseg/distance.h"
#include "kmseg/engine.h"
#include "kmseg/error.h"
#include "parallel.h"
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

template <class LowT, class HighT, class WT>
DistanceAccuracy measure(Mode mode, double rho, const Matrix& p, const Matrix& c, double nearLimit,
                         int threads) {
  using ML = Math<LowT>;
  constexpr bool kFallback = !std::is_void_v<HighT>;
  using H = std::conditional_t<kFallback, HighT, double>;
  const std::size_t d = p.cols;
  const int di = int(d);
  const std::vector<WT> pw = rounded<WT, WT>(p), cw = rounded<WT, WT>(c);
  const std::vector<LowT> pl = rounded<LowT, WT>(p), cl = rounded<LowT, WT>(c);
  std::vector<LowT> pn(p.rows), cn(c.rows);
  for (std::size_t i = 0; i < p.rows; ++i) pn[i] = squaredNorm<LowT>(pl.data() + i * d, di);
  for (std::size_t j = 0; j < c.rows; ++j) cn[j] = squaredNorm<LowT>(cl.data() + j * d, di);
  std::vector<H> ph, ch;
  H factor{};
  if constexpr (kFallback) {
    ph = rounded<H, WT>(p);
    ch = rounded<H, WT>(c);
    factor = Math<H>::from(reliabilityFactor(rho, di, lowPrecision(mode)));
  }

  std::vector<DistanceAccuracy> rows(p.rows);
  parallelFor(std::int64_t(p.rows), resolveThreadCount(threads), [&](std::int64_t task) {
    const std::size_t i = std::size_t(task);
    DistanceAccuracy& a = rows[i];
    for (std::size_t j = 0; j < c.rows; ++j) {
      long double exact = 0;
      for (std::size_t q = 0; q < d; ++q) {
        const long double t = (long double)pw[i * d + q] - (long double)cw[j * d + q];
        exact += t * t;
      }
      const Expanded<LowT> e = expandedDistance<LowT>(
          pn[i], cn[j], dotProduct<LowT>(pl.data() + i * d, cl.data() + j * d, di));
      double value;
      if constexpr (kFallback) {
        bool fell = false;
        value = double(Math<H>::toDouble(
            mixedDistance<LowT, H>(e, ph.data() + i * d, ch.data() + j * d, di, factor, &fell)));
        a.fallbacks += fell ? 1 : 0;
      } else {
        value = ML::toDouble(e.distance);
      }
      const double error = exact > 0 ? double(std::fabs((long double)value - exact) / exact)
                                     : (value == 0.0 ? 0.0 : INFINITY);
      const bool near = exact < (long double)nearLimit;
      ++a.pairs;
      a.nearPairs += near ? 1 : 0;
      // NaN (an overflowed expanded formula) counts as the worst error.
      const double e2 = std::isnan(error) ? INFINITY : error;
      a.maxRelError = std::max(a.maxRelError, e2);
      double& part = near ? a.maxRelErrorNear : a.maxRelErrorFar;
      part = std::max(part, e2);
    }
  });
  DistanceAccuracy total;
  for (const DistanceAccuracy& a : rows) {
    total.pairs += a.pairs;
    total.nearPairs += a.nearPairs;
    total.fallbacks += a.fallbacks;
    total.maxRelError = std::max(total.maxRelError, a.maxRelError);
    total.maxRelErrorNear = std::max(total.maxRelErrorNear, a.maxRelErrorNear);
    total.maxRelErrorFar = std::max(total.maxRelErrorFar, a.maxRelErrorFar);
  }
  return total;
}

}  // namespace

DistanceAccuracy measureDistances(Mode mode, double rho, Precision working, const Matrix& p,
                                  const Matrix& c, double nearLimit, int threads) {
  if (p.empty() || c.empty()) throw InvalidArgument("measureDistances: P and C must not be empty");
  if (p.cols != c.cols)
    throw InvalidArgument("measureDistances: P has " + std::to_string(p.cols) + " columns and C " +
                          std::to_string(c.cols) + "; they must be equal");
  if (!(rho > 2.0) || !std::isfinite(rho))
    throw InvalidArgument("rho = " + std::to_string(rho) + ": rho must be > 2 and finite");
  checkFinite(p, "P");
  checkFinite(c, "C");
  const bool w64 = working == Precision::Fp64;
  switch (mode) {
#define KMSEG_MEASURE_CASE(e, name, low, high)                                                     \
  case Mode::e:                                                                                    \
    return w64 ? measure<TypeOf<low>::type, TypeOf<high>::type, double>(mode, rho, p, c,           \
                                                                        nearLimit, threads)        \
               : measure<TypeOf<low>::type, TypeOf<high>::type, float>(mode, rho, p, c, nearLimit, \
                                                                       threads);
    KMSEG_FOR_EACH_MODE(KMSEG_MEASURE_CASE)
#undef KMSEG_MEASURE_CASE
  }
  throw InvalidArgument("measureDistances: unknown mode");
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
