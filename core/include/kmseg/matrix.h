// SPDX-License-Identifier: MIT
#pragma once

#include <cstddef>
#include <vector>

namespace kmseg {

/// A dense row-major matrix of doubles: `rows` samples of `cols` features each.
/// Feature matrices hold the original (fp64) feature values; engines round them to their
/// working precision themselves.
struct Matrix {
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::vector<double> values;  ///< rows * cols entries, row-major

  Matrix() = default;
  /// r x c zeros (a large matrix takes its pages on every core: resizeFresh).
  Matrix(std::size_t r, std::size_t c);

  /// Pointer to the first entry of row `i`.
  double* row(std::size_t i) { return values.data() + i * cols; }
  const double* row(std::size_t i) const { return values.data() + i * cols; }
  double& operator()(std::size_t i, std::size_t j) { return values[i * cols + j]; }
  double operator()(std::size_t i, std::size_t j) const { return values[i * cols + j]; }
  bool empty() const { return rows == 0 || cols == 0; }
};

/// Throws DataError naming `what`, the row and the column when `m` holds a NaN or an infinity
/// (the first one in row-major order). Scans with the machine's threads.
void checkFinite(const Matrix& m, const char* what);
/// checkFinite, returning the largest |value| of `m` (0 for an empty matrix) from the same pass.
double checkedMaxAbs(const Matrix& m, const char* what);

/// The largest |values[i]| over [0, n) (0 for n = 0; NaN when one is NaN), with the machine's
/// threads.
double maxAbsValue(const double* values, std::size_t n);

/// out[i] = values[i] (rounded to the nearest float for a float out), i in [0, n), with the
/// machine's threads.
void convertValues(const double* values, std::size_t n, float* out);
void convertValues(const double* values, std::size_t n, double* out);

}  // namespace kmseg
