// SPDX-License-Identifier: MIT
#include "kmseg/precision.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace kmseg {

std::string_view precisionName(Precision p) {
  switch (p) {
    case Precision::Fp64:
      return "fp64";
    case Precision::Fp32:
      return "fp32";
    case Precision::Fp16:
      return "fp16";
    case Precision::Bf16:
      return "bf16";
    case Precision::None:
      break;
  }
  return "none";
}

namespace {

// Parameters of a binary format: precision p (significand bits including the hidden one),
// minimum normal exponent emin, maximum exponent emax (values are m * 2^e with 1 <= m < 2).
struct Format {
  int p;
  int emin;
  int emax;
  int fractionBits;
  int exponentBias;
};
constexpr Format kHalf{11, -14, 15, 10, 15};
constexpr Format kBf16{8, -126, 127, 7, 127};

// Rounds a double to the nearest value of `f` (ties to even), with gradual underflow and
// overflow to infinity. The arithmetic is exact: scaling by powers of two and nearbyint under the
// default rounding mode (to nearest, ties to even).
double roundToFormat(double x, const Format& f) {
  if (!std::isfinite(x) || x == 0.0) return x;
  int e = std::ilogb(x);                    // x = m * 2^e, 1 <= |m| < 2
  int q = std::max(e, f.emin) - (f.p - 1);  // quantum: spacing of the format around x
  double r = std::ldexp(std::nearbyint(std::ldexp(x, -q)), q);
  // The largest finite value is (2 - 2^(1-p)) * 2^emax; anything that rounds beyond it overflows.
  const double maxFinite = std::ldexp(2.0 - std::ldexp(1.0, 1 - f.p), f.emax);
  if (std::fabs(r) > maxFinite) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return r;
}

std::uint16_t encode(double x, const Format& f) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
  const std::uint16_t expMask =
      std::uint16_t(((1u << (15 - f.fractionBits)) - 1u) << f.fractionBits);
  if (std::isnan(x)) return std::uint16_t(sign | expMask | (1u << (f.fractionBits - 1)));
  double r = roundToFormat(x, f);
  if (std::isinf(r)) return std::uint16_t(sign | expMask);
  double a = std::fabs(r);
  if (a == 0.0) return sign;
  int e = std::ilogb(a);
  if (e < f.emin) {  // subnormal: fraction = a / 2^(emin - fractionBits)
    auto frac = std::uint16_t(std::ldexp(a, -(f.emin - f.fractionBits)));
    return std::uint16_t(sign | frac);
  }
  auto frac = std::uint16_t(std::ldexp(a, -e) * (1 << f.fractionBits) - (1 << f.fractionBits));
  auto biased = std::uint16_t(e + f.exponentBias);
  return std::uint16_t(sign | (biased << f.fractionBits) | frac);
}

double decode(std::uint16_t bits, const Format& f) {
  const bool negative = bits & 0x8000u;
  const int expField = (bits >> f.fractionBits) & ((1 << (15 - f.fractionBits)) - 1);
  const int frac = bits & ((1 << f.fractionBits) - 1);
  const int expAllOnes = (1 << (15 - f.fractionBits)) - 1;
  double v;
  if (expField == expAllOnes) {
    v = frac ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (expField == 0) {
    v = std::ldexp(double(frac), f.emin - f.fractionBits);
  } else {
    v = std::ldexp(double(frac + (1 << f.fractionBits)),
                   expField - f.exponentBias - f.fractionBits);
  }
  return negative ? -v : v;
}

}  // namespace

std::uint16_t toHalfBits(double x) {
  return encode(x, kHalf);
}
std::uint16_t toBf16Bits(double x) {
  return encode(x, kBf16);
}
double halfBitsToDouble(std::uint16_t bits) {
  return decode(bits, kHalf);
}
double bf16BitsToDouble(std::uint16_t bits) {
  return decode(bits, kBf16);
}

double roundTo(Precision p, double x) {
  switch (p) {
    case Precision::Fp32:
      return double(float(x));  // the conversion rounds to nearest even
    case Precision::Fp16:
      return roundToFormat(x, kHalf);
    case Precision::Bf16:
      return roundToFormat(x, kBf16);
    default:
      return x;
  }
}

}  // namespace kmseg
