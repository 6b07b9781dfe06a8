// SPDX-License-Identifier: MIT
#pragma once

// Number types and their arithmetic, one trait per type: Math<T>. The distance formulas
// (distance.h) are written once against these traits, so the CPU engine (with the emulated
// 16-bit types below) and the CUDA engine (with __half / __nv_bfloat16, specialised in kernels/)
// evaluate exactly the same sequence of correctly rounded operations.

#include <bit>
#include <cmath>
#include <cstdint>

#include "kmseg/config.h"

namespace kmseg {

/// Arithmetic of number type T: every operation is one IEEE operation of T's format, rounded to
/// nearest even. `fma` is a fused multiply-add (one rounding).
template <class T>
struct Math;

template <>
struct Math<double> {
  using Storage = double;
  KMSEG_HOST_DEVICE static double from(double x) { return x; }
  KMSEG_HOST_DEVICE static double toDouble(double x) { return x; }
  KMSEG_HOST_DEVICE static double add(double a, double b) { return a + b; }
  KMSEG_HOST_DEVICE static double sub(double a, double b) { return a - b; }
  KMSEG_HOST_DEVICE static double mul(double a, double b) { return a * b; }
  KMSEG_HOST_DEVICE static double fma(double a, double b, double c) { return ::fma(a, b, c); }
};

template <>
struct Math<float> {
  using Storage = float;
  KMSEG_HOST_DEVICE static float from(double x) { return float(x); }
  KMSEG_HOST_DEVICE static double toDouble(float x) { return x; }
  KMSEG_HOST_DEVICE static float add(float a, float b) { return a + b; }
  KMSEG_HOST_DEVICE static float sub(float a, float b) { return a - b; }
  KMSEG_HOST_DEVICE static float mul(float a, float b) { return a * b; }
  KMSEG_HOST_DEVICE static float fma(float a, float b, float c) { return ::fmaf(a, b, c); }
};

#if !defined(__CUDA_ARCH__)
namespace detail {

// Rounds a double to binary16 (ties to even, gradual underflow, overflow to infinity) with
// integer operations on its bit pattern; exact for every finite double.
inline double roundHalfFast(double x) {
  const auto bits = std::bit_cast<std::uint64_t>(x);
  const std::uint64_t sign = bits & 0x8000000000000000ull;
  const std::uint64_t mag = bits & 0x7fffffffffffffffull;
  if (mag >= 0x7ff0000000000000ull) return x;  // inf, NaN
  if (mag >= 0x3f10000000000000ull) {          // |x| >= 2^-14: normal in binary16
    std::uint64_t r = mag + 0x1ffffffffffull + ((mag >> 42) & 1u);  // drop 42 fraction bits
    r &= ~0x3ffffffffffull;
    if (r > 0x40effc0000000000ull) r = 0x7ff0000000000000ull;  // > 65504: overflow
    return std::bit_cast<double>(r | sign);
  }
  return std::nearbyint(x * 0x1p24) * 0x1p-24;  // subnormal quantum 2^-24
}

// Rounds a double to bfloat16 (ties to even, gradual underflow, overflow to infinity).
inline double roundBf16Fast(double x) {
  const auto bits = std::bit_cast<std::uint64_t>(x);
  const std::uint64_t sign = bits & 0x8000000000000000ull;
  const std::uint64_t mag = bits & 0x7fffffffffffffffull;
  if (mag >= 0x7ff0000000000000ull) return x;
  if (mag >= 0x3810000000000000ull) {  // |x| >= 2^-126: normal in bfloat16
    std::uint64_t r = mag + 0x0fffffffffffull + ((mag >> 45) & 1u);  // drop 45 fraction bits
    r &= ~0x1fffffffffffull;
    if (r > 0x47efe00000000000ull) r = 0x7ff0000000000000ull;  // > max bf16: overflow
    return std::bit_cast<double>(r | sign);
  }
  return std::nearbyint(x * 0x1p133) * 0x1p-133;  // subnormal quantum 2^-133
}

// a*b + c rounded once by `round`. The product of two values of at most 24 significant bits is
// exact in double; the sum is made exact with TwoSum and folded into the last bit (round to odd),
// which makes the final rounding to a format of at most 51 bits correct.
template <double (*Round)(double)>
inline double fmaEmulated(double a, double b, double c) {
  const double p = a * b;
  const double s = p + c;
  if (!std::isfinite(s)) return Round(s);
  const double bp = s - p;
  const double e = (p - (s - bp)) + (c - bp);
  double odd = s;
  auto bits = std::bit_cast<std::uint64_t>(s);
  if (e != 0.0 && (bits & 1u) == 0) {
    // Step one ulp towards the exact value: up in magnitude when e has the sign of s.
    const bool up = (e > 0) == (s > 0) || s == 0.0;
    bits = up ? bits + 1 : bits - 1;
    odd = std::bit_cast<double>(bits);
  }
  return Round(odd);
}

}  // namespace detail

/// A binary16 value emulated on the host: the value is held in a float, and every operation is
/// computed exactly (or with innocuous double rounding) in double and rounded to binary16.
struct EmuHalf {
  float v;
};
/// A bfloat16 value emulated on the host, as EmuHalf.
struct EmuBf16 {
  float v;
};

template <class E, double (*Round)(double)>
struct MathEmulated {
  using Storage = E;
  static E make(double x) { return E{float(Round(x))}; }
  static E from(double x) { return make(x); }
  static double toDouble(E x) { return x.v; }
  // double has 53 >= 2p + 2 bits for p = 11 and p = 8, so rounding the double result of one
  // operation on two p-bit values to p bits equals rounding the exact result (Figueroa).
  static E add(E a, E b) { return make(double(a.v) + double(b.v)); }
  static E sub(E a, E b) { return make(double(a.v) - double(b.v)); }
  static E mul(E a, E b) { return make(double(a.v) * double(b.v)); }
  static E fma(E a, E b, E c) { return E{float(detail::fmaEmulated<Round>(a.v, b.v, c.v))}; }
};

template <>
struct Math<EmuHalf> : MathEmulated<EmuHalf, detail::roundHalfFast> {};
template <>
struct Math<EmuBf16> : MathEmulated<EmuBf16, detail::roundBf16Fast> {};
#endif

}  // namespace kmseg
