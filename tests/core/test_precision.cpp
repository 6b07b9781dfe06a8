// SPDX-License-Identifier: MIT
// Rounding to fp16/bf16 against known bit patterns, the emulated arithmetic, and gamma_n.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "kmseg/arith.h"
#include "kmseg/error.h"
#include "kmseg/mode.h"
#include "kmseg/precision.h"

namespace kmseg {
namespace {

TEST(Precision, HalfKnownBitPatterns) {
  EXPECT_EQ(toHalfBits(0.0), 0x0000);
  EXPECT_EQ(toHalfBits(-0.0), 0x8000);
  EXPECT_EQ(toHalfBits(1.0), 0x3c00);
  EXPECT_EQ(toHalfBits(-2.0), 0xc000);
  EXPECT_EQ(toHalfBits(65504.0), 0x7bff);             // largest finite
  EXPECT_EQ(toHalfBits(0x1p-14), 0x0400);             // smallest normal
  EXPECT_EQ(toHalfBits(0x1p-24), 0x0001);             // smallest subnormal
  EXPECT_EQ(toHalfBits(0x1p-25), 0x0000);             // half of it: tie to even (0)
  EXPECT_EQ(toHalfBits(0x1.8p-24), 0x0002);           // 1.5 quanta: tie to even (2)
  EXPECT_EQ(toHalfBits(0x1.0000000001p-25), 0x0001);  // just above the tie rounds up
  EXPECT_EQ(toHalfBits(0.333333333333), 0x3555);
  EXPECT_EQ(toHalfBits(1.0 + 0x1p-11), 0x3c00);      // tie between 1 and 1+2^-10: even (1)
  EXPECT_EQ(toHalfBits(1.0 + 3 * 0x1p-11), 0x3c02);  // tie between 1+2^-10 and 1+2^-9: even
  EXPECT_EQ(toHalfBits(65519.0), 0x7bff);            // below the overflow threshold
  EXPECT_EQ(toHalfBits(65520.0), 0x7c00);            // tie with 2^16: rounds to even -> +inf
  EXPECT_EQ(toHalfBits(1e10), 0x7c00);
  EXPECT_EQ(toHalfBits(-1e10), 0xfc00);
  EXPECT_EQ(toHalfBits(std::numeric_limits<double>::infinity()), 0x7c00);
  const std::uint16_t nan = toHalfBits(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
}

TEST(Precision, Bf16KnownBitPatterns) {
  EXPECT_EQ(toBf16Bits(1.0), 0x3f80);
  EXPECT_EQ(toBf16Bits(-1.0), 0xbf80);
  EXPECT_EQ(toBf16Bits(1.0 + 0x1p-8), 0x3f80);      // tie: even
  EXPECT_EQ(toBf16Bits(1.0 + 3 * 0x1p-8), 0x3f82);  // tie: even (up)
  EXPECT_EQ(toBf16Bits(3.140625), 0x4049);
  EXPECT_EQ(toBf16Bits(0x1p-126), 0x0080);    // smallest normal
  EXPECT_EQ(toBf16Bits(0x1p-133), 0x0001);    // smallest subnormal
  EXPECT_EQ(toBf16Bits(0x1p-134), 0x0000);    // tie to even
  EXPECT_EQ(toBf16Bits(0x1.fep127), 0x7f7f);  // largest finite
  EXPECT_EQ(toBf16Bits(0x1.ffp127), 0x7f80);  // tie -> even -> overflow to inf
  EXPECT_EQ(toBf16Bits(1e39), 0x7f80);
  const std::uint16_t nan = toBf16Bits(std::nan(""));
  EXPECT_EQ(nan & 0x7f80, 0x7f80);
  EXPECT_NE(nan & 0x007f, 0);
}

TEST(Precision, DecodeRoundTripsEveryPattern) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const double h = halfBitsToDouble(std::uint16_t(b));
    const double f = bf16BitsToDouble(std::uint16_t(b));
    if (!std::isnan(h)) EXPECT_EQ(toHalfBits(h), b) << std::hex << b;
    if (!std::isnan(f)) EXPECT_EQ(toBf16Bits(f), b) << std::hex << b;
  }
}

// The fast rounding used in the emulated arithmetic equals the reference encoder on random
// doubles of every magnitude, including ties.
TEST(Precision, FastRoundingMatchesReference) {
  std::mt19937_64 rng(12345);
  for (int t = 0; t < 200000; ++t) {
    std::uint64_t bits = rng();
    if (t % 3 == 0) bits &= ~((std::uint64_t(1) << 41) - 1);  // produce fp16 ties and exacts
    if (t % 3 == 1) bits &= ~((std::uint64_t(1) << 44) - 1);  // produce bf16 ties and exacts
    double x;
    std::memcpy(&x, &bits, sizeof x);
    if (std::isnan(x)) continue;
    int exponent = 0;
    x = std::ldexp(std::frexp(x, &exponent), int(rng() % 80) - 60);
    EXPECT_EQ(detail::roundHalfFast(x), roundTo(Precision::Fp16, x)) << std::hexfloat << x;
    EXPECT_EQ(detail::roundBf16Fast(x), roundTo(Precision::Bf16, x)) << std::hexfloat << x;
  }
}

// fma of the emulated formats is correctly rounded: compare against the exact value computed
// with integer arithmetic on small operands, including cases where double rounding would fail.
TEST(Precision, EmulatedFmaIsCorrectlyRounded) {
  using MB = Math<EmuBf16>;
  // a = b = 1.0625 (136/128): a*b = 18496/16384 = 1.12890625, exactly the bf16 tie between
  // 1.125 (even) and 1.1328125 (odd). A tiny c decides the rounding although a double sum would
  // drop it; without c the tie goes to even.
  const EmuBf16 a = MB::from(1.0625);
  const EmuBf16 tiny = MB::from(0x1p-60);
  const EmuBf16 minusTiny = MB::from(-0x1p-60);
  ASSERT_EQ(double(a.v) * double(a.v), 1.12890625);
  EXPECT_EQ(double(MB::fma(a, a, MB::from(0.0)).v), 1.125);
  EXPECT_EQ(double(MB::fma(a, a, tiny).v), 1.1328125);
  EXPECT_EQ(double(MB::fma(a, a, minusTiny).v), 1.125);
  EXPECT_EQ(double(MB::mul(a, a).v), 1.125);  // a separately rounded product ties to even
  // The same for binary16: a = 1040/1024, b = 1056/1024, a*b = 1072.5/1024, a tie.
  using MH0 = Math<EmuHalf>;
  const EmuHalf ha = MH0::from(1040.0 / 1024.0), hb = MH0::from(1056.0 / 1024.0);
  ASSERT_EQ(double(ha.v) * double(hb.v), 1072.5 / 1024.0);
  EXPECT_EQ(double(MH0::fma(ha, hb, MH0::from(0x1p-24)).v), 1073.0 / 1024.0);
  EXPECT_EQ(double(MH0::fma(ha, hb, MH0::from(-0x1p-24)).v), 1072.0 / 1024.0);
  EXPECT_EQ(double(MH0::fma(ha, hb, MH0::from(0.0)).v), 1072.0 / 1024.0);

  using MH = Math<EmuHalf>;
  std::mt19937 rng(7);
  for (int t = 0; t < 100000; ++t) {
    // Random fp16 values: the exact a*b + c is a rational with denominator 2^48, exact in
    // long double? Use integers: scale everything to integers of the subnormal quantum.
    const std::uint16_t ab = std::uint16_t(rng() & 0x7bff), bb = std::uint16_t(rng() & 0x7bff),
                        cb = std::uint16_t(rng() & 0xfbff);
    const double av = halfBitsToDouble(ab), bv = halfBitsToDouble(bb), cv = halfBitsToDouble(cb);
    const EmuHalf r = MH::fma(MH::from(av), MH::from(bv), MH::from(cv));
    // Reference: fp16 products and sums are exact in long double (64-bit significand) when the
    // product does not overflow fp16 range, see arith.h; round the exact value once.
    const long double exact = (long double)av * (long double)bv + (long double)cv;
    const double ref = roundTo(Precision::Fp16, double(exact));
    if (std::fabs(double(exact)) < 60000.0 && (long double)double(exact) == exact)
      EXPECT_EQ(double(r.v), ref) << av << " " << bv << " " << cv;
  }
}

TEST(Precision, UnitRoundoffAndGamma) {
  EXPECT_EQ(unitRoundoff(Precision::Fp64), std::ldexp(1.0, -53));
  EXPECT_EQ(unitRoundoff(Precision::Fp32), std::ldexp(1.0, -24));
  EXPECT_EQ(unitRoundoff(Precision::Fp16), std::ldexp(1.0, -11));
  EXPECT_EQ(unitRoundoff(Precision::Bf16), std::ldexp(1.0, -8));
  const double u = unitRoundoff(Precision::Fp16);
  EXPECT_DOUBLE_EQ(gammaN(7, u), 7 * u / (1 - 7 * u));
}

TEST(Mode, ParseAndPrintEveryName) {
  const char* names[] = {"fp64",      "fp32",      "fp16",      "bf16",     "fp16>fp32",
                         "fp16>fp64", "bf16>fp32", "bf16>fp64", "fp32>fp64"};
  ASSERT_EQ(std::size(names), kAllModes.size());
  for (std::size_t i = 0; i < kAllModes.size(); ++i) {
    EXPECT_EQ(modeName(kAllModes[i]), names[i]);
    EXPECT_EQ(parseMode(names[i]), kAllModes[i]);
  }
  EXPECT_FALSE(hasFallback(Mode::Fp16));
  EXPECT_TRUE(hasFallback(Mode::Bf16Fp64));
  EXPECT_EQ(lowPrecision(Mode::Bf16Fp32), Precision::Bf16);
  EXPECT_EQ(highPrecision(Mode::Bf16Fp32), Precision::Fp32);
  try {
    parseMode("fp8");
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("fp8"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("fp16>fp32"), std::string::npos);
  }
}

}  // namespace
}  // namespace kmseg
