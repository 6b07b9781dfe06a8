// SPDX-License-Identifier: MIT
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>

namespace kmseg::cli {

/// A CLI11 transform for an integer option of type T: the value must be a decimal whole number in
/// [min, max] (a sign only where T is signed). It rewrites the text in plain decimal before
/// CLI11 converts it, since CLI11 reads "010" as octal, "0x10" as hexadecimal and wraps "-1"
/// around in an unsigned option: "010" is 10, "0x10" is refused.
/// Every refusal names the allowed values: `limits` where given (e.g. "K is from 1 to 8192", for
/// an option whose own check is narrower than [min, max]), else "[min, max]". A number outside
/// them (also beyond T, or negative for an unsigned T) is "out of range"; anything else is "not
/// a whole number". Over the type's whole range the help names no range.
template <class T>
CLI::Validator wholeNumberIn(T min, T max, std::string limits = {}) {
  static_assert(std::is_integral_v<T>);
  const bool whole = min == std::numeric_limits<T>::min() && max == std::numeric_limits<T>::max();
  const std::string bounds = "[" + std::to_string(min) + ", " + std::to_string(max) + "]";
  const std::string notWhole = limits.empty() ? " in " + bounds : ": " + limits;
  const std::string outside = limits.empty() ? " " + bounds : ": " + limits;
  return CLI::Validator(
      [min, max, notWhole, outside](std::string& text) -> std::string {
        const char* begin = text.data();
        const char* end = begin + text.size();
        if (begin != end && *begin == '+') ++begin;
        // Digits, after one sign at most ("+-1" is no number).
        const bool minus = begin == text.data() && begin != end && *begin == '-';
        const char* digits = minus ? begin + 1 : begin;
        const bool number =
            digits != end && std::all_of(digits, end, [](char c) { return c >= '0' && c <= '9'; });
        if (!number) return "'" + text + "' is not a whole number" + notWhole;
        // from_chars fails for digits beyond T, and for a minus sign where T is unsigned.
        T v{};
        const auto [stop, ec] = std::from_chars(begin, end, v);
        if (ec != std::errc() || stop != end || v < min || v > max)
          return "'" + text + "' is out of range" + outside;
        text = std::to_string(v);
        return {};
      },
      whole ? std::string() : bounds, "whole number");
}

/// A CLI11 transform for a floating-point option: the value must be a decimal number as typed
/// ("5", "-1", "1e-8", ".5"; "inf" and "nan" pass here and are refused by the option's own check,
/// which names its limits). Refused, where CLI11 alone would accept or misread them: an empty
/// value (CLI11 reads 0), hexadecimal ("0x10"), spaces around the number, and a number beyond
/// double's range ("1e400", "1e-400"), named as typed. The text is
/// rewritten in the shortest form that reads back as the same double.
inline CLI::Validator realNumber() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const char* begin = text.data();
        const char* end = begin + text.size();
        if (begin != end && *begin == '+') ++begin;
        const bool hex =
            end - begin >= 2 && begin[0] == '0' && (begin[1] == 'x' || begin[1] == 'X');
        double v = 0;
        const auto [stop, ec] = std::from_chars(begin, end, v, std::chars_format::general);
        if (begin == end || hex || stop != end ||
            (ec != std::errc() && ec != std::errc::result_out_of_range))
          return "'" + text + "' is not a decimal number";
        if (ec == std::errc::result_out_of_range) {
          // Beyond double's range: refused with the text as typed, since infinity or 0 in the
          // option's own message would name a value the user did not type. A value below the
          // normal range that still reads as a nonzero (subnormal) double is taken.
          v = std::strtod(std::string(begin, end).c_str(), nullptr);
          if (std::isinf(v))
            return "'" + text + "' is too large for a double (at most about 1.8e308)";
          if (v == 0)
            return "'" + text + "' is too small for a double (at least about 4.9e-324 in size; " +
                   "write 0 for zero)";
        }
        char buf[64];
        const auto r = std::to_chars(buf, buf + sizeof buf, v);
        text.assign(buf, r.ptr);
        return {};
      },
      std::string(), "number");
}

}  // namespace kmseg::cli
