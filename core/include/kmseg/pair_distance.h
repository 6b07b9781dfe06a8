// SPDX-License-Identifier: MIT
#pragma once

#include <cstdint>
#include <string>

#include "kmseg/matrix.h"
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

/// Rows of `x` (original fp64 features) whose squared norm is not finite in `mode`'s
/// assignment precision, computed as the engines compute it: the row rounded to the working
/// precision `working`, then to the low precision, squaredNorm in the low precision. Every
/// expanded distance of such a row is infinite or NaN, so a uniform mode cannot rank its
/// centres and a mixed mode falls back for all of them. Within kmseg's feature limits only fp16
/// (largest finite value 65504) overflows: z-score columns of a colour that few pixels have
/// reach sqrt(N). Both engines report it as KMeansResult::normOverflows. `maxAbs`, when given
/// (>= 0), is the largest magnitude in `x`: when D maxAbs^2 is below half the largest finite
/// value no row can overflow and the rows are not read.
std::int64_t countNormOverflows(Mode mode, Precision working, const Matrix& x,
                                double maxAbs = -1.0);

/// What `rows` overflowing rows out of `n` mean for `mode`, in one sentence for a table's note
/// or a status line, e.g. "20 of 1000000 pixels have a squared norm beyond fp16's largest value
/// (65504): their fp16 distances are infinite, so this mode cannot rank their centres".
std::string normOverflowNote(Mode mode, std::int64_t rows, std::size_t n);

}  // namespace kmseg
