// SPDX-License-Identifier: MIT
#pragma once

// The fast pass's pruning margin for uniform fp16 / bf16 (plain C++ for the host and the device,
// so that a host test can check it against the CPU engine's emulated arithmetic).

#include <bit>
#include <cmath>
#include <cstdint>

#include "kmseg/config.h"

namespace kmseg::cuda {

/// Coefficients of shiftedMargin, rounded up to float.
struct ShiftMargin {
  float err;   ///< of n, the bound of ||x~||^2 + ||c~||^2
  float eta;   ///< of U, the bound of ||x~ - c~||^2
  float dot;   ///< of sum_k binade(grow P_k), P_k = sum over q < k of X_q |c~_q|
  float sum;   ///< of binade(grow n)
  float grow;  ///< (1 + gamma_D) with room for the float rounding of P_k and n
};

/// 2^floor(log2 v) for a positive normal float v (its exponent bits alone), 0 for 0 and for
/// subnormals: the least value of v's binade. A rounding to the nearest value of a format with
/// unit roundoff u moves any value of that binade by at most u 2^floor(log2 v) (half its spacing).
KMSEG_HOST_DEVICE inline float binade(float v) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(__float_as_uint(v) & 0x7f800000u);
#else
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) & 0x7f800000u);
#endif
}

/// The coefficients for D features and unit roundoff u of the low precision (host only).
///
/// The expanded value d^ = fl(s - 2 dot^) of a pair, with s = fl(fl(||x~||^2) + cc) and dot^ the
/// chain dot_1 = fl(x~_0 c~_0), dot_k = fl(x~_{k-1} c~_{k-1} + dot_{k-1}) (dotProduct), less the
/// roundings A of the point's norm and B of the centre's (computed exactly elsewhere), is within
/// M of ||x~ - c~||^2:
///   d^ - A - B - ||x~ - c~||^2 = e_s - 2 e_dot + e_d.
/// Step k of the chain rounds a value of magnitude at most (1 + gamma_D) P_k, P_k = sum over
/// q < k of |x~_q c~_q|, by at most half the spacing of that value's binade, so
/// |e_dot| <= u sum_k binade((1 + gamma_D) P_k): the early products are rounded with every later
/// step, and each step's rounding is bounded by the binade its partial sum lies in rather than
/// by the sum itself (never more than u (1 + gamma_D) P_k). Likewise
/// fl(||x~||^2) + cc <= (1 + gamma_D) n, so |e_s| <= u binade((1 + gamma_D) n), and
/// |e_d| <= u |s - 2 dot^| <= u (U + gamma_D n + |e_s| + 2 |e_dot|). So
///   M = (1 + u)(2 |e_dot| + |e_s|) + u U + u gamma_D n,
/// with a factor 1.05 for the float arithmetic of the bounds, 2^-18 n for the float rounding of
/// the norms and of the box, and (shiftedMargin) 2^-20 for fp16 underflow (at most 12 roundings
/// of 2^-25 each). `grow` rounds (1 + gamma_D) up with room (2^-16) for the float rounding of
/// P_k and n (a few units of 2^-24), so that a computed bound never falls below the binade of
/// the value it bounds.
inline ShiftMargin shiftMarginCoefficients(int d, double u) {
  const double g = d * u / (1.0 - d * u);
  auto up = [](double v) { return std::nextafter(float(v), HUGE_VALF); };
  return {up(1.05 * u * g + 0x1p-18), up(1.05 * u), up(1.05 * 2.0 * u * (1.0 + u)),
          up(1.05 * u * (1.0 + u)), up((1.0 + g) * (1.0 + 0x1p-16))};
}

/// sum_k binade(grow P_k) with P_k = sum over q < k of X_q |y_q|: the binades of a fma chain's
/// partial sums (a dot product's with y = c~, a norm's with y = X), each grown by `grow` above
/// the float rounding of P_k.
template <int D>
KMSEG_HOST_DEVICE inline float chainBinades(const float (&X)[D], const float (&y)[D], float grow) {
  float p = 0.f, w = 0.f;
  for (int q = 0; q < D; ++q) {
    p = fmaf(X[q], fabsf(y[q]), p);
    w += binade(grow * p);
  }
  return w;
}

/// M for a centre c~ (as floats) against every point of a box with |x~_q| <= X_q, where n bounds
/// ||x~||^2 + ||c~||^2 and U bounds ||x~ - c~||^2 from above.
template <int D>
KMSEG_HOST_DEVICE inline float shiftedMargin(const float (&X)[D], const float (&c)[D], float n,
                                             float U, const ShiftMargin& k) {
  const float w = chainBinades(X, c, k.grow);
  return fmaf(k.dot, w, fmaf(k.sum, binade(k.grow * n), fmaf(k.eta, U, fmaf(k.err, n, 0x1p-20f))));
}

/// A bound of |fl(||x~||^2) - ||x~||^2| over a box with |x~_q| <= X_q, the rounding of the
/// point's own norm (the chain acc_k = fl(x~_{k-1}^2 + acc_{k-1})), by the same reasoning as the
/// dot product's in shiftedMargin: sum * sum_k binade(grow Q_k), Q_k = sum over q < k of X_q^2.
/// The mixed fp16 / bf16 passes add it to shiftedMargin to bound d^ - B - ||x~ - c~||^2.
template <int D>
KMSEG_HOST_DEVICE inline float normMargin(const float (&X)[D], const ShiftMargin& k) {
  return k.sum * chainBinades(X, X, k.grow);
}

/// The pairwise test's gap (warpCandidates): a lower bound, up to float rounding, of
/// ||x - c||^2 - ||x - s||^2 over the box lo <= x <= hi. The difference is
/// sum_q (c_q - s_q)(c_q + s_q - 2 x_q), linear in x, so its least value takes x_q = hi_q where
/// c_q > s_q and lo_q elsewhere. The float arithmetic is within 2^-20 (A + ||c||^2 + A + ||s||^2)
/// of the exact value, A = sum_q max(|lo_q|, |hi_q|)^2 (a host test checks it), which the 2^-18 n
/// parts of the two centres' margins cover.
template <int D>
KMSEG_HOST_DEVICE inline float pairGap(const float (&lo)[D], const float (&hi)[D],
                                       const float (&c)[D], const float (&s)[D]) {
  float gap = 0.f;
  for (int q = 0; q < D; ++q) {
    const float d = c[q] - s[q];
    const float t = d > 0.f ? hi[q] : lo[q];
    gap = fmaf(d, fmaf(-2.f, t, c[q] + s[q]), gap);
  }
  return gap;
}

}  // namespace kmseg::cuda
