// SPDX-License-Identifier: MIT
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "kmseg/config.h"

namespace kmseg {

/// The floating-point formats kmseg computes in.
enum class Precision { None, Fp64, Fp32, Fp16, Bf16 };

/// "fp64", "fp32", "fp16", "bf16" or "none".
std::string_view precisionName(Precision p);

/// Unit roundoff u of a format (round to nearest): fp64 2^-53, fp32 2^-24, fp16 2^-11,
/// bf16 2^-8.
KMSEG_HOST_DEVICE constexpr double unitRoundoff(Precision p) {
  switch (p) {
    case Precision::Fp64:
      return 0x1p-53;
    case Precision::Fp32:
      return 0x1p-24;
    case Precision::Fp16:
      return 0x1p-11;
    case Precision::Bf16:
      return 0x1p-8;
    default:
      return 0.0;
  }
}

/// Largest finite value of a format: fp64 (2 - 2^-52) 2^1023, fp32 (2 - 2^-23) 2^127,
/// fp16 65504, bf16 (2 - 2^-7) 2^127.
KMSEG_HOST_DEVICE constexpr double largestFinite(Precision p) {
  switch (p) {
    case Precision::Fp64:
      return 0x1.fffffffffffffp1023;
    case Precision::Fp32:
      return 0x1.fffffep127;
    case Precision::Fp16:
      return 65504.0;
    case Precision::Bf16:
      return 0x1.fep127;
    default:
      return 0.0;
  }
}

/// Whether gamma_n(u) exists: n u < 1 (beyond, the formula below is infinite or negative).
KMSEG_HOST_DEVICE constexpr bool gammaDefined(int n, double u) {
  return double(n) * u < 1.0;
}

/// gamma_n = n u / (1 - n u) (Higham's constant). Requires n u < 1 (gammaDefined).
KMSEG_HOST_DEVICE constexpr double gammaN(int n, double u) {
  return n * u / (1.0 - n * u);
}

// ---- Exact rounding to the 16-bit formats (round to nearest, ties to even) -------------------

/// IEEE binary16 bit pattern nearest to `x` (ties to even): subnormals kept, overflow to +-inf,
/// NaN stays NaN (quiet).
std::uint16_t toHalfBits(double x);
/// bfloat16 bit pattern nearest to `x` (ties to even), same rules.
std::uint16_t toBf16Bits(double x);
/// The value of a binary16 bit pattern.
double halfBitsToDouble(std::uint16_t bits);
/// The value of a bfloat16 bit pattern.
double bf16BitsToDouble(std::uint16_t bits);

/// `x` rounded to `p` (ties to even) and returned as a double. For Fp64 this is `x`.
double roundTo(Precision p, double x);

/// The number type of precision P, given the engine's 16-bit types (the CPU engine's emulated
/// ones or the device's): double, float, Half, Bf16, or void for Precision::None.
template <Precision P, class Half, class Bf16>
using NumberType = std::conditional_t<
    P == Precision::Fp64, double,
    std::conditional_t<P == Precision::Fp32, float,
                       std::conditional_t<P == Precision::Fp16, Half,
                                          std::conditional_t<P == Precision::Bf16, Bf16, void>>>>;

}  // namespace kmseg
