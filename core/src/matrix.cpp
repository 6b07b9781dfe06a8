// SPDX-License-Identifier: MIT
#include "kmseg/matrix.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>

#include "kmseg/error.h"
#include "kmseg/parallel.h"

namespace kmseg {

namespace {

// Host-side passes over a whole feature matrix (a 12-megapixel photo's is 480 MB) go in ranges
// of this many values, one task each, on the machine's threads.
constexpr std::size_t kRange = std::size_t(1) << 18;

}  // namespace

Matrix::Matrix(std::size_t r, std::size_t c) : rows(r), cols(c) {
  resizeFresh(values, r * c);
}

double checkedMaxAbs(const Matrix& m, const char* what) {
  // maxAbsValue is NaN when a value is NaN and infinite when one is infinite; only then is the
  // matrix scanned again, serially, for the first such value and the message.
  const double largest = maxAbsValue(m.values.data(), m.values.size());
  if (largest <= DBL_MAX) return largest;
  for (std::size_t e = 0; e < m.values.size(); ++e) {
    const double v = m.values[e];
    if (std::isfinite(v)) continue;
    throw DataError(std::string(what) + " holds a non-finite value (" + std::to_string(v) +
                    ") at row " + std::to_string(e / m.cols) + ", column " +
                    std::to_string(e % m.cols) + "; NaN and infinity are not allowed");
  }
  return largest;  // not reached
}

void checkFinite(const Matrix& m, const char* what) {
  (void)checkedMaxAbs(m, what);
}

double maxAbsValue(const double* values, std::size_t n) {
  std::vector<double> part((n + kRange - 1) / kRange, 0.0);
  parallelRanges(n, kRange, [&](std::size_t begin, std::size_t end) {
    double m = 0.0;
    bool nan = false;
    for (std::size_t i = begin; i < end; ++i) {
      const double a = std::fabs(values[i]);
      m = a > m ? a : m;
      nan |= a != a;
    }
    part[begin / kRange] = nan ? NAN : m;
  });
  double m = 0.0;
  for (double p : part) {
    if (std::isnan(p)) return p;
    m = std::max(m, p);
  }
  return m;
}

void convertValues(const double* values, std::size_t n, float* out) {
  parallelRanges(n, kRange, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) out[i] = float(values[i]);
  });
}

void convertValues(const double* values, std::size_t n, double* out) {
  parallelRanges(n, kRange, [&](std::size_t begin, std::size_t end) {
    std::memcpy(out + begin, values + begin, (end - begin) * sizeof(double));
  });
}

}  // namespace kmseg
