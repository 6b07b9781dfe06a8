// SPDX-License-Identifier: MIT
#pragma once

// The paper's experiments as library functions, for `kmseg bench distances` and
// `kmseg bench blobs`: the accuracy of each mode's pairwise distances (paper section 6.1) and
// Gaussian blob data sets for k-means (section 6.2.1).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kmseg/matrix.h"
#include "kmseg/mode.h"
#include "kmseg/precision.h"

namespace kmseg {

/// How far one mode's distances between every row of P and every row of C lie from the exact
/// ones, and how often the mode fell back.
struct DistanceAccuracy {
  std::int64_t pairs = 0;
  std::int64_t nearPairs = 0;  ///< pairs whose exact squared distance is below the near limit
  std::int64_t fallbacks = 0;
  double maxRelError = 0.0;      ///< max |d - d*| / d* over all pairs
  double maxRelErrorNear = 0.0;  ///< over the near pairs (0 when there are none)
  double maxRelErrorFar = 0.0;   ///< over the others
  /// Time of the evaluation alone (not of the error measurement): measureDistances gives the
  /// wall time of the CPU's emulated arithmetic, the CUDA engine's cudaMeasureDistances the
  /// device time of its kernels.
  double seconds = 0.0;

  double fallbackRatio() const { return pairs > 0 ? double(fallbacks) / double(pairs) : 0.0; }
};

/// Evaluates the squared distance of every pair (row of `p`, row of `c`) as `mode` computes it
/// inside the engines (rows rounded to `working`, then to the low precision; the shared
/// expanded formula, reliability test and direct-formula fallback; the same functions as
/// modeDistance) and compares it with the exact squared distance d* of the rows as the mode
/// holds them in its working precision (the direct formula in long double), so that the error
/// is the formulas', not the rounding of the input to W (paper section 4.3). A pair with d* = 0
/// counts as error 0 when the mode also gives 0 and as infinite otherwise; so does a value that
/// is not finite. Near pairs are those with d* < `nearLimit` (the paper's sensitivity
/// test uses 1e-3). Runs on `threads` threads (0 = all); the result does not depend on them.
/// Throws as checkDistanceInputs.
DistanceAccuracy measureDistances(Mode mode, double rho, Precision working, const Matrix& p,
                                  const Matrix& c, double nearLimit = 1e-3, int threads = 0);

/// The squared distance of every pair (row of `p`, row of `c`) as `mode` computes it, row-major
/// (|P| x |C|; entry i |C| + j is row i of P against row j of C), widened exactly to double, and
/// in `*fallbacks` (when not null) how many pairs fell back. The values measureDistances
/// measures; the CUDA engine's cudaPairDistances must give them bit for bit. Throws as
/// measureDistances.
std::vector<double> pairDistances(Mode mode, double rho, Precision working, const Matrix& p,
                                  const Matrix& c, std::int64_t* fallbacks = nullptr,
                                  int threads = 0);

/// Adds to `into` the pairs, near pairs and largest relative errors of `values`: the distances
/// of rows [first, first + rows) of `p` against every row of `c` (row-major, rows x |C|), measured
/// as measureDistances does against the exact distances of the rows rounded to `working`. The
/// fallbacks and seconds of `into` are left alone. For engines that evaluate the pairs
/// elsewhere (cudaMeasureDistances), chunk by chunk. Throws InvalidArgument when the rows are
/// not rows of `p`, or p and c differ in width.
void addDistanceErrors(DistanceAccuracy& into, Precision working, const Matrix& p, const Matrix& c,
                       std::size_t first, std::size_t rows, const double* values, double nearLimit,
                       int threads = 0);

/// Checks the inputs of the distance measurements (both matrices non-empty, finite and of one
/// width; rho > 2 and finite): throws InvalidArgument naming the first that is not, or
/// DataError for a value that is not finite.
void checkDistanceInputs(double rho, const Matrix& p, const Matrix& c);

/// Rows of P per chunk when the pairs are evaluated chunk by chunk (about `pairs` pairs, at least
/// one row): the memory a measurement needs stays bounded whatever the set sizes. The CPU's
/// chunks hold 2^22 pairs.
std::size_t distanceChunkRows(std::size_t cRows, std::size_t pairs = std::size_t(1) << 22);

/// Gaussian blobs as scikit-learn's make_blobs builds them (the paper's data, section 6.2.1):
/// `clusters` centres drawn uniformly from [-10, 10)^d, then `n` samples, sample i from centre
/// i mod clusters plus N(0, sigma^2) per feature; a std::mt19937_64 seeded with `seed` draws
/// everything, so a seed gives the same data everywhere. Throws InvalidArgument for n, d or
/// clusters < 1, or sigma not finite and >= 0.
Matrix makeBlobs(std::size_t n, std::size_t d, int clusters, double sigma, std::uint64_t seed);

}  // namespace kmseg
