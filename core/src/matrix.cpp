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

void checkFinite(const Matrix& m, const char* what) {
  const double* v = m.values.data();
  const std::size_t n = m.values.size();
  // Per range whether every value is finite (|x| <= DBL_MAX is false for NaN and infinity, and a
  // loop without an early exit vectorises), then the first value that is not, for the message.
  std::vector<unsigned char> finite((n + kRange - 1) / kRange, 1);
  parallelRanges(n, kRange, [&](std::size_t begin, std::size_t end) {
    unsigned char ok = 1;
    for (std::size_t i = begin; i < end; ++i) ok &= std::fabs(v[i]) <= DBL_MAX;
    finite[begin / kRange] = ok;
  });
  const auto bad = std::find(finite.begin(), finite.end(), 0);
  if (bad == finite.end()) return;
  for (std::size_t e = std::size_t(bad - finite.begin()) * kRange; e < n; ++e) {
    if (std::isfinite(v[e])) continue;
    throw DataError(std::string(what) + " holds a non-finite value (" + std::to_string(v[e]) +
                    ") at row " + std::to_string(e / m.cols) + ", column " +
                    std::to_string(e % m.cols) + "; NaN and infinity are not allowed");
  }
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
