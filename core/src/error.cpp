// SPDX-License-Identifier: MIT
#include "kmseg/error.h"

#include <charconv>
#include <cmath>

namespace kmseg {

std::string numberText(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buffer[32];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);
  return ec == std::errc() ? std::string(buffer, end) : std::to_string(v);
}

}  // namespace kmseg
