// SPDX-License-Identifier: MIT
#pragma once

#include "kmseg/mode.h"
#include "kmseg/precision.h"

namespace kmseg {

/// One squared distance as a mode computes it, and whether it fell back.
struct PairDistance {
  double value = 0.0;
  bool fellBack = false;
};

/// Squared distance between `x` and `c` (d values each, original fp64 data) exactly as `mode`
/// computes it inside the engines: both rounded to the working precision `working`, then to the
/// low precision; expanded formula; for mixed modes the reliability test with `rho` and the
/// direct-formula fallback in the high precision. For the distance experiments and tests.
PairDistance modeDistance(Mode mode, double rho, Precision working, const double* x,
                          const double* c, int d);

}  // namespace kmseg
