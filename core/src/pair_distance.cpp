// SPDX-License-Identifier: MIT
#include "kmseg/pair_distance.h"

#include <type_traits>
#include <vector>

#include "kmseg/distance.h"
#include "kmseg/error.h"
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

}  // namespace

PairDistance modeDistance(Mode mode, double rho, Precision working, const double* x,
                          const double* c, int d) {
  if (d < 1) throw InvalidArgument("modeDistance: dimension must be >= 1");
  if (!(rho > 2.0)) throw InvalidArgument("rho must be > 2");
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
