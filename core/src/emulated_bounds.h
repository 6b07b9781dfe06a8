// SPDX-License-Identifier: MIT
#pragma once

// Bounds on what the emulated 16-bit formulas give, computed in double: they let the CPU engine
// decide most pairs of the fp16 / bf16 modes (uniform and mixed) without emulating them, and
// leave the emulation to the pairs whose outcome they cannot decide (KMeansParams::useBounds).
//
// For a point x~ and a centre c~ (both exact in double), with xx = fl(||x~||^2) and
// cc = fl(||c~||^2) the norms the formula takes (already computed, in the low precision), the
// formula gives d^ = fl(fl(xx + cc) - 2 fl(x~^T c~)), each fl a rounding to the low precision
// (the dot product a chain of fused multiply-adds). Let s = xx + cc, p = x~^T c~ and
// delta = s - 2 p, all exact. Then
//   d^ - delta = (fl(xx + cc) - s) - 2 (fl(p) - p) + (rounding of the subtraction).
// Step k of the dot product rounds a partial sum of the first k products, so product q is rounded
// D - q times: |fl(p) - p| <= u (1 + gamma_D) w + D q/2 with w = sum_q (D - q) |x~_q c~_q| and
// q the quantum of the format's subnormals (an underflowing rounding errs by up to q/2, not u
// times the value). The sum errs by at most u s + q/2, the subtraction by u |fl(s) - 2 fl(p)|
// + q/2. So |d^ - delta| <= (1 + u)(u s + 2 u (1 + gamma_D) w + (D + 1) q) + u |delta| + q, which
// `margin` widens by 1e-9 relative and by 1e-12 (s + w + |delta|) for the double arithmetic of
// delta and w (relative errors of a few 2^-53 on sums of at most D terms).
//
// The norms' own rounding needs no bound: xx and cc are the formula's inputs, known exactly.
// This is tighter than the reliability test's E = 2 gamma_{D+2} (||x~||^2 + ||c~||^2), which also
// covers the rounding of the norms: at D = 5 in fp16 about 0.2 % of s near a centre against
// 0.7 %.
//
// The reliability test compares d^ with T = fl_H(f fl(s)), f the test's factor in H. With s as
// above, fl(s) lies in [s (1 - u) - q/2, s (1 + u) + q/2] and T in [(1 - u_H) f fl(s) - qH,
// (1 + u_H) f fl(s) + qH] (qH: H's subnormal quantum, at most 2^-149).
//
// Every bound holds while no value overflows: the caller checks that 4 (xx + cc) stays below
// `rangeLimit` (then |fl(p)| <= (xx + cc), |d^| <= 2 (xx + cc) and H's direct distance stays
// finite too).

#include <cmath>

#include "kmseg/precision.h"

namespace kmseg {

struct EmulatedBounds {
  double a1 = 0, a2 = 0, a3 = 0, a0 = 0;       ///< margin = a1 w + a2 s + a3 |delta| + a0
  double testLo = 0, testHi = 0, testAbs = 0;  ///< T in [testLo s - testAbs, testHi s + testAbs]
  double rangeLimit = 0;                       ///< bounds hold while 4 (xx + cc) < rangeLimit

  /// Whether make(low, d, ...) gives valid bounds: gamma_d(u) needs d u < 1.
  static bool applies(Precision low, int d) { return gammaDefined(d, unitRoundoff(low)); }

  /// The bounds of the low-precision format `low` (Fp16 or Bf16) at dimension `d`. `factor` is
  /// the reliability test's factor in H and `uHigh` H's unit roundoff (0 for uniform modes).
  static EmulatedBounds make(Precision low, int d, double factor, double uHigh) {
    const double u = unitRoundoff(low);
    const double quantum = low == Precision::Fp16 ? 0x1p-24 : 0x1p-133;
    const double g = gammaN(d, u);
    const double widen = 1.0 + 1e-9;
    EmulatedBounds b;
    b.a1 = 2.0 * u * (1.0 + g) * (1.0 + u) * widen + 1e-12;
    b.a2 = u * (1.0 + u) * widen + 1e-12;
    b.a3 = u * widen + 1e-12;
    b.a0 = ((1.0 + u) * (d + 1) * quantum + quantum) * widen;
    b.testLo = factor * (1.0 - u) * (1.0 - uHigh) * (1.0 - 1e-12);
    b.testHi = factor * (1.0 + u) * (1.0 + uHigh) * (1.0 + 1e-12);
    b.testAbs = factor * quantum + 0x1p-140;
    // fp16 overflows above 65504; bf16 and fp32 (the highest H over bf16 data) near 3.4e38.
    b.rangeLimit = low == Precision::Fp16 ? 60000.0 : 1e37;
    return b;
  }

  /// The margin of d^ around delta = s - 2 p, with s and w as above.
  double margin(double s, double w, double delta) const {
    return a1 * w + a2 * s + a3 * std::fabs(delta) + a0;
  }
};

}  // namespace kmseg
