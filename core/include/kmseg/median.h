// SPDX-License-Identifier: MIT
#pragma once

// The median the benchmarks report (host only; the CUDA timings use it too).

#include <algorithm>
#include <vector>

namespace kmseg {

/// The median of `values`, the upper one of an even count; `values` must not be empty.
template <class T>
T medianOf(std::vector<T> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace kmseg
