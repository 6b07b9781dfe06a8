// SPDX-License-Identifier: MIT
#pragma once

// The distance formulas and the reliability test, written once for every engine
// (DESIGN.md section 3). Each function spells the exact sequence of rounded operations; the CPU
// engine calls them with emulated or native number types, the CUDA engine with device types.

#include <type_traits>

#include "kmseg/arith.h"
#include "kmseg/config.h"
#include "kmseg/precision.h"

namespace kmseg {

/// Converts between number types by way of double (exact widening, one rounding). The CUDA
/// engine specialises it for device types with single conversion instructions.
template <class ToT, class FromT>
KMSEG_HOST_DEVICE inline ToT convert(FromT x) {
  return Math<ToT>::from(Math<FromT>::toDouble(x));
}

/// Squared norm ||v||^2 in T: acc = 0; acc = fma(v_i, v_i, acc) for i = 0..d-1.
template <class T>
KMSEG_HOST_DEVICE inline T squaredNorm(const T* v, int d) {
  using M = Math<T>;
  T acc = M::from(0.0);
  for (int i = 0; i < d; ++i) acc = M::fma(v[i], v[i], acc);
  return acc;
}

/// Inner product x^T c in T, same sequence as squaredNorm.
template <class T>
KMSEG_HOST_DEVICE inline T dotProduct(const T* x, const T* c, int d) {
  using M = Math<T>;
  T acc = M::from(0.0);
  for (int i = 0; i < d; ++i) acc = M::fma(x[i], c[i], acc);
  return acc;
}

/// The pieces of the expanded formula of one (point, centre) pair, in precision T.
template <class T>
struct Expanded {
  T sumNorms;  ///< fl(||x||^2 + ||c||^2)
  T distance;  ///< fl(sumNorms - 2 fl(x^T c)): the expanded squared distance
};

/// Expanded squared distance ||x||^2 - 2 x^T c + ||c||^2 in T, from precomputed norms:
/// s = xx + cc; d = s - 2 dot (2 dot is exact, so this is also fma(-2, dot, s)).
template <class T>
KMSEG_HOST_DEVICE inline Expanded<T> expandedDistance(T xx, T cc, T dot) {
  using M = Math<T>;
  const T s = M::add(xx, cc);
  return {s, M::sub(s, M::mul(M::from(2.0), dot))};
}

/// Direct squared distance sum_i (x_i - c_i)^2 in H: acc = 0; t = x_i - c_i; acc = fma(t, t, acc).
/// `c` is already in H; `x` is in H too, or in another type XT (the working-precision row), each
/// value then converted to H first, as a row copied to H would hold it.
template <class H, class XT = H>
KMSEG_HOST_DEVICE inline H directDistance(const XT* x, const H* c, int d) {
  using M = Math<H>;
  H acc = M::from(0.0);
  for (int i = 0; i < d; ++i) {
    H xi;
    if constexpr (std::is_same_v<XT, H>)
      xi = x[i];
    else
      xi = convert<H>(x[i]);
    const H t = M::sub(xi, c[i]);
    acc = M::fma(t, t, acc);
  }
  return acc;
}

/// The factor of the reliability test: rho * 2 gamma_{d+2}(u_low). The bound of paper eq. 16 is
/// E = 2 gamma_{d+2} (||x~||^2 + ||c~||^2); the paper's Algorithm 4.1 omits the factor 2.
KMSEG_HOST_DEVICE inline double reliabilityFactor(double rho, int d, Precision low) {
  return rho * 2.0 * gammaN(d + 2, unitRoundoff(low));
}

/// The reliability test in precision H: the low-precision distance is trusted when
/// d^ > factor * s, with s = fl_low(||x~||^2 + ||c~||^2) (both widened exactly to H, the product
/// rounded in H). NaN or infinity in d^ or s fails the test, so such pairs fall back: an infinite
/// d^ with a finite s (2 x~^T c~ overflowed, or the subtraction did) is above every threshold
/// and must be caught on its own, or the pair would keep an infinite distance.
template <class H>
KMSEG_HOST_DEVICE inline bool reliable(H dHat, H sumNorms, H factor) {
  using M = Math<H>;
  return dHat > M::mul(factor, sumNorms) && dHat < M::from(INFINITY);
}

/// Whether the pair of `e` falls back (the reliability test in H fails): mixedDistance's test
/// alone, for a pair whose distance is not needed.
template <class LowT, class H>
KMSEG_HOST_DEVICE inline bool fallsBack(const Expanded<LowT>& e, H factor) {
  return !reliable<H>(convert<H>(e.distance), convert<H>(e.sumNorms), factor);
}

/// The distance a mixed mode takes for one pair (paper eq. 20): the low-precision expanded value
/// when it passes the reliability test, otherwise the direct formula in H from the
/// working-precision rows `xh` and `ch` (already converted to H). Sets `*fellBack`.
template <class LowT, class H>
KMSEG_HOST_DEVICE inline H mixedDistance(const Expanded<LowT>& e, const H* xh, const H* ch, int d,
                                         H factor, bool* fellBack) {
  const H dHat = convert<H>(e.distance);
  if (reliable<H>(dHat, convert<H>(e.sumNorms), factor)) {
    *fellBack = false;
    return dHat;
  }
  *fellBack = true;
  return directDistance<H>(xh, ch, d);
}

}  // namespace kmseg
