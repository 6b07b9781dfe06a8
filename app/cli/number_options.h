// SPDX-License-Identifier: MIT
#pragma once

#include <CLI/CLI.hpp>

#include <charconv>
#include <limits>
#include <string>
#include <type_traits>

namespace kmseg::cli {

/// A CLI11 transform for an integer option of type T: the value must be a decimal whole number in
/// [min, max] (a sign only where T is signed). It rewrites the text in plain decimal before
/// CLI11 converts it, since CLI11 reads "010" as octal, "0x10" as hexadecimal and wraps "-1"
/// around in an unsigned option: "010" is 10, "0x10" is refused.
/// Over the type's whole range the help names no range, nor for a signed type the message (the
/// option's own check names its limits).
template <class T>
CLI::Validator wholeNumberIn(T min, T max) {
  const bool whole = min == std::numeric_limits<T>::min() && max == std::numeric_limits<T>::max();
  const std::string range = whole && std::is_signed_v<T>
                                ? std::string()
                                : " in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        const char* begin = text.data();
        const char* end = begin + text.size();
        if (begin != end && *begin == '+') ++begin;
        T v{};
        const auto [stop, ec] = std::from_chars(begin, end, v);
        if (begin == end || ec != std::errc() || stop != end || v < min || v > max)
          return "'" + text + "' is not a whole number" + range;
        text = std::to_string(v);
        return {};
      },
      whole ? std::string() : "[" + std::to_string(min) + ", " + std::to_string(max) + "]",
      "whole number");
}

}  // namespace kmseg::cli
