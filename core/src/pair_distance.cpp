// SPDX-License-Identifier: MIT
#include "kmseg/pair_distance.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "kmseg/distance.h"
#include "kmseg/error.h"
#include "kmseg/kmeans.h"
#include "precision_types.h"

namespace kmseg {

namespace {

template <class LowT, class HighT, class WT>
PairDistance evaluate(double rho, Mode mode, const double* x, const double* c, int d) {
  std::vector<LowT> xl(static_cast<std::size_t>(d)), cl(static_cast<std::size_t>(d));
  for (int i = 0; i < d; ++i) {
    xl[i] = Math<LowT>::from(double(WT(x[i])));
    cl[i] = Math<LowT>::from(double(WT(c[i])));
  }
  const Expanded<LowT> e =
      expandedDistance<LowT>(squaredNorm<LowT>(xl.data(), d), squaredNorm<LowT>(cl.data(), d),
                             dotProduct<LowT>(xl.data(), cl.data(), d));
  if constexpr (std::is_void_v<HighT>) {
    return {Math<LowT>::toDouble(e.distance), false};
  } else {
    std::vector<HighT> xh(static_cast<std::size_t>(d)), ch(static_cast<std::size_t>(d));
    for (int i = 0; i < d; ++i) {
      xh[i] = Math<HighT>::from(double(WT(x[i])));
      ch[i] = Math<HighT>::from(double(WT(c[i])));
    }
    const auto factor = Math<HighT>::from(reliabilityFactor(rho, d, lowPrecision(mode)));
    PairDistance r;
    r.value = double(mixedDistance<LowT, HighT>(e, xh.data(), ch.data(), d, factor, &r.fellBack));
    return r;
  }
}

template <class LowT, class WT>
std::int64_t normOverflows(const Matrix& x, Precision low, double maxAbs) {
  using M = Math<LowT>;
  // Rounding the row (relative 2^-11 at most per value in fp16) and the norm's own roundings
  // (gamma_D) move it by far less than a factor of 2: a row whose exact norm is below half the
  // largest finite value cannot overflow, and only the others are evaluated in LowT.
  const double safe = 0.5 * largestFinite(low);
  const std::size_t d = x.cols;
  if (maxAbs >= 0.0 && double(d) * maxAbs * maxAbs < safe) return 0;
  std::vector<LowT> row(d);
  std::int64_t count = 0;
  for (std::size_t i = 0; i < x.rows; ++i) {
    const double* v = x.values.data() + i * d;
    double exact = 0.0;
    for (std::size_t q = 0; q < d; ++q) exact += v[q] * v[q];
    if (exact < safe) continue;
    for (std::size_t q = 0; q < d; ++q) row[q] = M::from(double(WT(v[q])));
    if (!std::isfinite(M::toDouble(squaredNorm<LowT>(row.data(), int(d))))) ++count;
  }
  return count;
}

}  // namespace

std::int64_t countNormOverflows(Mode mode, Precision working, const Matrix& x, double maxAbs) {
  const bool w64 = working == Precision::Fp64;
  const Precision low = lowPrecision(mode);
  switch (mode) {
#define KMSEG_OVERFLOW_CASE(e, name, lowP, high)                           \
  case Mode::e:                                                            \
    return w64 ? normOverflows<TypeOf<lowP>::type, double>(x, low, maxAbs) \
               : normOverflows<TypeOf<lowP>::type, float>(x, low, maxAbs);
    KMSEG_FOR_EACH_MODE(KMSEG_OVERFLOW_CASE)
#undef KMSEG_OVERFLOW_CASE
  }
  throw InvalidArgument("countNormOverflows: unknown mode");
}

std::string normOverflowNote(Mode mode, std::int64_t rows, std::size_t n) {
  const std::string low(precisionName(lowPrecision(mode)));
  char largest[32];
  std::snprintf(largest, sizeof largest, "%.6g", largestFinite(lowPrecision(mode)));
  return std::to_string(rows) + " of " + std::to_string(n) +
         (rows == 1 ? " pixels has" : " pixels have") + " a squared norm beyond " + low +
         "'s largest value (" + largest + "): their " + low + " distances are not finite, " +
         (highPrecision(mode) == Precision::None
              ? "so this mode cannot rank their centres (try min-max normalisation)"
              : "so all of them fall back to " + std::string(precisionName(highPrecision(mode))));
}

PairDistance modeDistance(Mode mode, double rho, Precision working, const double* x,
                          const double* c, int d) {
  if (d < 1) throw InvalidArgument("modeDistance: dimension must be >= 1");
  if (!(rho > 2.0)) throw InvalidArgument("rho must be > 2");
  checkModeFeatures(mode, std::size_t(d));
  const bool w64 = working == Precision::Fp64;
  switch (mode) {
#define KMSEG_PAIR_CASE(e, name, low, high)                                                  \
  case Mode::e:                                                                              \
    return w64 ? evaluate<TypeOf<low>::type, TypeOf<high>::type, double>(rho, mode, x, c, d) \
               : evaluate<TypeOf<low>::type, TypeOf<high>::type, float>(rho, mode, x, c, d);
    KMSEG_FOR_EACH_MODE(KMSEG_PAIR_CASE)
#undef KMSEG_PAIR_CASE
  }
  throw InvalidArgument("modeDistance: unknown mode");
}

}  // namespace kmseg
