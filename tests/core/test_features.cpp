// SPDX-License-Identifier: MIT
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kmseg/error.h"
#include "kmseg/features.h"
#include "kmseg/image_io.h"
#include "test_paths.h"

namespace {

using kmseg::ColorSpace;
using kmseg::DataError;
using kmseg::FeatureOptions;
using kmseg::Image;
using kmseg::InvalidArgument;
using kmseg::Matrix;
using kmseg::Normalization;

Image image8(int width, int height, std::vector<std::uint8_t> rgb) {
  Image image;
  image.width = width;
  image.height = height;
  image.rgb8 = std::move(rgb);
  return image;
}

// A 16-bit image of random samples in [lo, lo + span).
Image random16(int width, int height, std::uint32_t seed, unsigned lo, unsigned span) {
  Image image;
  image.width = width;
  image.height = height;
  image.bitDepth = 16;
  std::mt19937 random(seed);
  for (std::size_t i = 0; i < image.pixelCount() * 3; ++i)
    image.rgb16.push_back(std::uint16_t(lo + random() % span));
  return image;
}

// The raw (c0, c1, c2, x, y) rows of an RGB image, written out in the test.
Matrix rawRgb(const Image& image) {
  Matrix m(image.pixelCount(), 5);
  for (std::size_t i = 0; i < image.pixelCount(); ++i) {
    for (int c = 0; c < 3; ++c) m(i, c) = image.sample(i, c);
    m(i, 3) = double(i % image.width);
    m(i, 4) = double(i / image.width);
  }
  return m;
}

std::vector<double> column(const Matrix& m, std::size_t j) {
  std::vector<double> out;
  for (std::size_t i = 0; i < m.rows; ++i) out.push_back(m(i, j));
  return out;
}

template <typename E, typename F>
std::string messageOf(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "no exception";
  return {};
}

TEST(FeatureNames, RoundTripAndRejectUnknown) {
  for (ColorSpace c : {ColorSpace::Rgb, ColorSpace::Lab})
    EXPECT_EQ(kmseg::parseColorSpace(kmseg::colorSpaceName(c)), c);
  for (Normalization n : {Normalization::MinMax, Normalization::ZScore})
    EXPECT_EQ(kmseg::parseNormalization(kmseg::normalizationName(n)), n);
  EXPECT_EQ(kmseg::colorSpaceName(ColorSpace::Lab), "lab");
  EXPECT_EQ(kmseg::normalizationName(Normalization::ZScore), "zscore");

  std::string message = messageOf<InvalidArgument>([] { kmseg::parseColorSpace("hsv"); });
  EXPECT_NE(message.find("'hsv'"), std::string::npos) << message;
  EXPECT_NE(message.find("rgb, lab"), std::string::npos) << message;
  message = messageOf<InvalidArgument>([] { kmseg::parseNormalization("MinMax"); });
  EXPECT_NE(message.find("'MinMax'"), std::string::npos) << message;
  EXPECT_NE(message.find("minmax, zscore"), std::string::npos) << message;
}

// 3 x 2 pixels; R spans 10..210 (a range of 200, so every value is exact), G is constant.
Image smallImage() {
  return image8(3, 2,
                {10, 7, 0, 60, 7, 255, 110, 7, 51,  //
                 35, 7, 0, 85, 7, 0, 210, 7, 255});
}

TEST(Features, MinMaxRowsInPixelOrder) {
  const Matrix m = kmseg::makeFeatures(smallImage());
  ASSERT_EQ(m.rows, 6u);
  ASSERT_EQ(m.cols, 5u);
  EXPECT_EQ(column(m, 0), (std::vector<double>{0, 0.25, 0.5, 0.125, 0.375, 1}));
  EXPECT_EQ(column(m, 1), (std::vector<double>{0, 0, 0, 0, 0, 0}));  // constant column
  EXPECT_EQ(column(m, 2), (std::vector<double>{0, 1, 0.2, 0, 0, 1}));
  EXPECT_EQ(column(m, 3), (std::vector<double>{0, 0.5, 1, 0, 0.5, 1}));
  EXPECT_EQ(column(m, 4), (std::vector<double>{0, 0, 0, 1, 1, 1}));
}

TEST(Features, MinMaxIsTheDocumentedDivision) {
  // With max - min = 49, v * (1 / 49) != v / 49 for many v (5 and 49 among them): the values
  // must be those of the documented division, and max must map to exactly 1.
  EXPECT_NE(5.0 * (1.0 / 49.0), 5.0 / 49.0);
  EXPECT_NE(49.0 * (1.0 / 49.0), 1.0);
  std::vector<std::uint8_t> rgb;
  for (int v = 0; v < 50; ++v) rgb.insert(rgb.end(), {std::uint8_t(v), 0, 0});
  const Matrix m = kmseg::makeFeatures(image8(50, 1, rgb));
  for (int v = 0; v < 50; ++v) {
    EXPECT_EQ(m(v, 0), v / 49.0) << v;
    EXPECT_EQ(m(v, 3), v / 49.0) << v;
  }
  EXPECT_EQ(m(49, 0), 1.0);
  EXPECT_EQ(kmseg::minMaxValue(5.0, 0.0, 49.0), 5.0 / 49.0);
  EXPECT_EQ(kmseg::minMaxValue(5.0, 5.0, 5.0), 0.0);
}

TEST(Features, SpatialWeightScalesOnlyXAndY) {
  FeatureOptions options;
  options.spatialWeight = 0.5;
  const Matrix m = kmseg::makeFeatures(smallImage(), options);
  EXPECT_EQ(column(m, 0), (std::vector<double>{0, 0.25, 0.5, 0.125, 0.375, 1}));
  EXPECT_EQ(column(m, 3), (std::vector<double>{0, 0.25, 0.5, 0, 0.25, 0.5}));
  EXPECT_EQ(column(m, 4), (std::vector<double>{0, 0, 0, 0.5, 0.5, 0.5}));

  options.spatialWeight = 0.0;
  const Matrix zero = kmseg::makeFeatures(smallImage(), options);
  EXPECT_EQ(column(zero, 3), (std::vector<double>(6, 0.0)));
  EXPECT_EQ(column(zero, 4), (std::vector<double>(6, 0.0)));
}

// Options are equal when every field is (the GUI reuses features built with equal options).
TEST(Features, OptionsAreEqualFieldByField) {
  const FeatureOptions a;
  FeatureOptions b;
  EXPECT_TRUE(a == b);
  b.spatialWeight = 0.5;
  EXPECT_FALSE(a == b);
  b = a;
  b.colorSpace = ColorSpace::Lab;
  EXPECT_FALSE(a == b);
  b = a;
  b.normalization = Normalization::ZScore;
  EXPECT_TRUE(a != b);
}

TEST(Features, RejectsBadSpatialWeight) {
  for (double w : {-0.5, std::numeric_limits<double>::quiet_NaN(),
                   std::numeric_limits<double>::infinity(), 32.5, 1e100}) {
    FeatureOptions options;
    options.spatialWeight = w;
    const std::string message =
        messageOf<InvalidArgument>([&] { kmseg::makeFeatures(smallImage(), options); });
    EXPECT_NE(message.find("spatial weight"), std::string::npos) << message;
    EXPECT_NE(message.find("finite and >= 0, at most 32"), std::string::npos) << message;
  }
  // The largest weight is accepted, and its weighted coordinates stay within fp16's safe range.
  FeatureOptions options;
  options.spatialWeight = kmseg::kMaxSpatialWeight;
  options.normalization = kmseg::Normalization::ZScore;
  const Matrix m = kmseg::makeFeatures(smallImage(), options);
  for (std::size_t i = 0; i < m.rows; ++i)
    for (std::size_t j = 3; j < 5; ++j) EXPECT_LE(std::abs(m(i, j)), 64.0);
}

TEST(Features, RejectsEmptyOrInconsistentImages) {
  EXPECT_THROW(kmseg::makeFeatures(Image{}), InvalidArgument);
  Image wrongSize = smallImage();
  wrongSize.rgb8.pop_back();
  const std::string message = messageOf<InvalidArgument>([&] { kmseg::makeFeatures(wrongSize); });
  EXPECT_NE(message.find("holds 17 samples instead of 18"), std::string::npos) << message;
  Image wrongDepth = smallImage();
  wrongDepth.bitDepth = 16;  // the samples are in rgb8, rgb16 is empty
  EXPECT_THROW(kmseg::makeFeatures(wrongDepth), InvalidArgument);
}

TEST(Features, OnePixelGivesZerosNotNaN) {
  for (Normalization n : {Normalization::MinMax, Normalization::ZScore})
    for (ColorSpace c : {ColorSpace::Rgb, ColorSpace::Lab}) {
      const Matrix m = kmseg::makeFeatures(image8(1, 1, {200, 100, 50}), {c, n, 1.0});
      EXPECT_EQ(m.values, (std::vector<double>(5, 0.0)));
    }
}

TEST(Features, FastPathEqualsGenericPathBitForBit) {
  const Image coffee = kmseg::loadImage(kmseg::test::sourcePath("samples/coffee.png"));
  const Image deep = random16(37, 23, 20240531, 1000, 60000);
  for (const Image* image : std::array<const Image*, 2>{&coffee, &deep})
    for (double weight : {1.0, 0.7, 3.0}) {
      Matrix expected = rawRgb(*image);
      kmseg::normalizeColumns(expected, Normalization::MinMax);
      for (std::size_t i = 0; i < expected.rows; ++i) {
        expected(i, 3) *= weight;
        expected(i, 4) *= weight;
      }
      FeatureOptions options;
      options.spatialWeight = weight;
      const Matrix m = kmseg::makeFeatures(*image, options);
      ASSERT_EQ(m.rows, image->pixelCount());
      EXPECT_TRUE(m.values == expected.values)
          << image->width << " x " << image->height << " weight " << weight;
    }
}

// The lookup that engines rebuild rows from gives makeFeatures's matrix bit for bit, row by row,
// and exists only where the columns are tables (RGB, min-max).
TEST(Features, LookupGivesTheMatrixBitForBit) {
  const Image coffee = kmseg::loadImage(kmseg::test::sourcePath("samples/coffee.png"));
  const Image deep = random16(37, 23, 20261202, 500, 65000);
  const Image column1 = image8(1, 4, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0});
  for (const Image* image : std::array<const Image*, 3>{&coffee, &deep, &column1})
    for (double weight : {1.0, 0.7, 0.0}) {
      FeatureOptions options;
      options.spatialWeight = weight;
      const kmseg::ImageFeatures f = kmseg::makeImageFeatures(*image, options);
      ASSERT_TRUE(f.lookup);
      const kmseg::FeatureLookup& l = *f.lookup;
      EXPECT_EQ(l.pixelCount(), image->pixelCount());
      EXPECT_EQ(l.samples16 != nullptr, image->bitDepth == 16);
      EXPECT_TRUE(f.rows.values == kmseg::makeFeatures(*image, options).values);
      std::size_t differ = 0;
      for (std::size_t i = 0; i < f.rows.rows; ++i)
        for (std::size_t q = 0; q < 5; ++q) differ += l.value(i, q) != f.rows(i, q);
      EXPECT_EQ(differ, 0u) << image->width << " x " << image->height << " weight " << weight;
      const auto alone = kmseg::featureLookup(*image, options);
      ASSERT_TRUE(alone);
      for (int c = 0; c < 3; ++c) EXPECT_EQ(alone->colour[c], l.colour[c]);
      EXPECT_EQ(alone->xs, l.xs);
      EXPECT_EQ(alone->ys, l.ys);
    }
  for (auto [c, n] : {std::pair{ColorSpace::Lab, Normalization::MinMax},
                      std::pair{ColorSpace::Rgb, Normalization::ZScore},
                      std::pair{ColorSpace::Lab, Normalization::ZScore}}) {
    const kmseg::ImageFeatures f = kmseg::makeImageFeatures(coffee, {c, n, 1.0});
    EXPECT_FALSE(f.lookup);
    EXPECT_FALSE(kmseg::featureLookup(coffee, {c, n, 1.0}));
    EXPECT_TRUE(f.rows.values == kmseg::makeFeatures(coffee, {c, n, 1.0}).values);
  }
  EXPECT_THROW(kmseg::featureLookup(image8(0, 0, {})), InvalidArgument);
  EXPECT_THROW(kmseg::featureLookup(coffee, {ColorSpace::Rgb, Normalization::MinMax, 40.0}),
               InvalidArgument);
}

// ImageFeatures::scales take every feature back to its raw value (the sample, the pixel's column
// and row), in every combination of normalisation, bit depth and spatial weight; a column
// weighted 0 has no raw value (NaN), and a constant column gives its one value.
TEST(Features, ScalesGiveTheRawValues) {
  const Image coffee = kmseg::loadImage(kmseg::test::sourcePath("samples/coffee.png"));
  const Image deep = random16(37, 23, 20240531, 1000, 60000);
  for (const Image* image : std::array<const Image*, 2>{&coffee, &deep})
    for (Normalization n : {Normalization::MinMax, Normalization::ZScore})
      for (double weight : {1.0, 0.7, 0.0}) {
        FeatureOptions options;
        options.normalization = n;
        options.spatialWeight = weight;
        const kmseg::ImageFeatures f = kmseg::makeImageFeatures(*image, options);
        ASSERT_EQ(f.scales.size(), 5u);
        const Matrix raw = rawRgb(*image);
        const Matrix back = kmseg::inRawUnits(f.rows, f.scales);
        for (std::size_t i = 0; i < raw.rows; i += 97)
          for (std::size_t q = 0; q < 5; ++q) {
            if (q >= 3 && weight == 0.0) {
              EXPECT_TRUE(std::isnan(back(i, q)));
              continue;
            }
            EXPECT_NEAR(back(i, q), raw(i, q), 1e-9 * std::max(1.0, std::fabs(raw(i, q))))
                << image->width << " x " << image->height << " pixel " << i << " column " << q
                << " weight " << weight;
          }
      }
  // A constant colour column: every pixel's raw value is the column's one value.
  const Image flat = image8(2, 1, {7, 1, 2, 7, 3, 4});
  const kmseg::ImageFeatures f = kmseg::makeImageFeatures(flat, {});
  EXPECT_EQ(f.scales[0], (kmseg::ColumnScale{7.0, 0.0, 1.0}));
  EXPECT_EQ(kmseg::inRawUnits(f.rows, f.scales)(1, 0), 7.0);
  EXPECT_THROW(kmseg::inRawUnits(f.rows, {}), kmseg::InvalidArgument);
}

TEST(Features, ZScoreOfTwoPixels) {
  // R: 0 and 10 -> mean 5, population stddev 5 -> -1, 1. x likewise; y is constant.
  const Matrix m = kmseg::makeFeatures(image8(2, 1, {0, 3, 9, 10, 3, 1}),
                                       {ColorSpace::Rgb, Normalization::ZScore, 2.0});
  EXPECT_EQ(column(m, 0), (std::vector<double>{-1, 1}));
  EXPECT_EQ(column(m, 1), (std::vector<double>{0, 0}));
  EXPECT_EQ(column(m, 2), (std::vector<double>{1, -1}));
  EXPECT_EQ(column(m, 3), (std::vector<double>{-2, 2}));  // weighted by 2
  EXPECT_EQ(column(m, 4), (std::vector<double>{0, 0}));
}

TEST(Features, ZScoreColumnsHaveZeroMeanAndUnitVariance) {
  const Image coffee = kmseg::loadImage(kmseg::test::sourcePath("samples/coffee.png"));
  const Matrix m = kmseg::makeFeatures(coffee, {ColorSpace::Rgb, Normalization::ZScore, 1.0});
  for (std::size_t j = 0; j < 5; ++j) {
    double sum = 0, squares = 0;
    for (std::size_t i = 0; i < m.rows; ++i) {
      sum += m(i, j);
      squares += m(i, j) * m(i, j);
    }
    EXPECT_NEAR(sum / m.rows, 0.0, 1e-12) << "column " << j;
    EXPECT_NEAR(squares / m.rows, 1.0, 1e-12) << "column " << j;
  }
  // Deterministic: a second run gives the same bits.
  EXPECT_TRUE(m.values ==
              kmseg::makeFeatures(coffee, {ColorSpace::Rgb, Normalization::ZScore, 1.0}).values);
}

// CIE L*a*b* (D65) of an sRGB colour, from the textbook formulas with OpenCV's constants.
std::array<double, 3> referenceLab(double r, double g, double b) {
  const auto linear = [](double c) {
    c /= 255.0;
    return c <= 0.04045 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4);
  };
  r = linear(r);
  g = linear(g);
  b = linear(b);
  const double x = (0.412453 * r + 0.357580 * g + 0.180423 * b) / 0.950456;
  const double y = 0.212671 * r + 0.715160 * g + 0.072169 * b;
  const double z = (0.019334 * r + 0.119193 * g + 0.950227 * b) / 1.088754;
  const auto f = [](double t) { return t > 0.008856 ? std::cbrt(t) : 7.787 * t + 16.0 / 116.0; };
  const double l = y > 0.008856 ? 116.0 * std::cbrt(y) - 16.0 : 903.3 * y;
  return {l, 500.0 * (f(x) - f(y)), 200.0 * (f(y) - f(z))};
}

TEST(Features, LabColumnsFollowCieLab) {
  const Image image = image8(6, 1,
                             {0, 0, 0, 255, 255, 255, 255, 0, 0, 0, 255, 0, 0, 0, 255,  //
                              200, 120, 40});
  Matrix expected(6, 5);
  for (std::size_t i = 0; i < 6; ++i) {
    const auto lab = referenceLab(image.sample(i, 0), image.sample(i, 1), image.sample(i, 2));
    for (int c = 0; c < 3; ++c) expected(i, c) = lab[c];
    expected(i, 3) = double(i);
  }
  kmseg::normalizeColumns(expected, Normalization::MinMax);
  const Matrix m = kmseg::makeFeatures(image, {ColorSpace::Lab, Normalization::MinMax, 1.0});
  ASSERT_EQ(m.rows, 6u);
  for (std::size_t i = 0; i < 6; ++i)
    for (std::size_t j = 0; j < 5; ++j) EXPECT_NEAR(m(i, j), expected(i, j), 2e-3) << i << "," << j;
  // Sanity of the oracle itself: L of pure red is 53.24.
  EXPECT_NEAR(referenceLab(255, 0, 0)[0], 53.24, 0.01);
  // The Lab columns differ from the RGB ones (red's L is not its R).
  EXPECT_NEAR(m(2, 0), 0.5324, 2e-3);
}

TEST(Features, Lab16BitMatchesLab8BitForScaledSamples) {
  const Image small = smallImage();
  Image deep;
  deep.width = small.width;
  deep.height = small.height;
  deep.bitDepth = 16;
  for (std::uint8_t v : small.rgb8) deep.rgb16.push_back(std::uint16_t(v * 257));
  const FeatureOptions lab{ColorSpace::Lab, Normalization::MinMax, 1.0};
  const Matrix a = kmseg::makeFeatures(small, lab);
  const Matrix b = kmseg::makeFeatures(deep, lab);
  // v * 257 / 65535 and v / 255 round to the same float, so OpenCV sees the same input.
  EXPECT_TRUE(a.values == b.values);
}

TEST(FeatureNormalize, MinMaxOfAGenericMatrix) {
  Matrix m(4, 3);
  m.values = {-2, 5, 4e300,   //
              0,  5, -4e300,  //
              6,  5, 0,       //
              2,  5, -4e300};
  kmseg::normalizeColumns(m, Normalization::MinMax);
  EXPECT_EQ(column(m, 0), (std::vector<double>{0, 0.25, 1, 0.5}));
  EXPECT_EQ(column(m, 1), (std::vector<double>{0, 0, 0, 0}));
  EXPECT_EQ(column(m, 2), (std::vector<double>{1, 0, 0.5, 0}));  // a range of 8e300 is finite
}

TEST(FeatureNormalize, MinMaxMapsExtremesExactlyAndStaysInRange) {
  std::mt19937_64 random(7);
  std::uniform_real_distribution<double> value(-3.7, 1234.5);
  Matrix m(10000, 2);
  for (double& v : m.values) v = value(random);
  kmseg::normalizeColumns(m, Normalization::MinMax);
  for (std::size_t j = 0; j < 2; ++j) {
    const std::vector<double> c = column(m, j);
    EXPECT_EQ(*std::min_element(c.begin(), c.end()), 0.0);
    EXPECT_EQ(*std::max_element(c.begin(), c.end()), 1.0);
  }
}

TEST(FeatureNormalize, ZScoreAcrossManyBlocks) {
  // Several sum blocks and a partial one; values alternate 1e8, 1e8 + 1, starting with 1e8.
  const std::size_t rows = 3 * kmseg::kSumBlockRows + 17;
  Matrix m(rows, 1);
  for (std::size_t i = 0; i < rows; ++i) m(i, 0) = 1e8 + double(i % 2);
  Matrix copy = m;
  kmseg::normalizeColumns(m, Normalization::ZScore);
  const double ones = double(rows / 2), n = double(rows);
  const double mean = ones / n, stddev = std::sqrt(mean * (1 - mean));
  EXPECT_NEAR(m(0, 0), -mean / stddev, 1e-7);  // 1e8 carries about 1e-8 of rounding
  EXPECT_NEAR(m(1, 0), (1 - mean) / stddev, 1e-7);
  EXPECT_NEAR(m(rows - 1, 0), -mean / stddev, 1e-7);
  kmseg::normalizeColumns(copy, Normalization::ZScore);
  EXPECT_TRUE(m.values == copy.values);
}

TEST(FeatureNormalize, RejectsNaNAndInfinityNamingTheCell) {
  for (double bad :
       {std::numeric_limits<double>::quiet_NaN(), -std::numeric_limits<double>::infinity()}) {
    for (Normalization n : {Normalization::MinMax, Normalization::ZScore}) {
      Matrix m(3, 2);
      m(2, 1) = bad;
      const std::string message = messageOf<DataError>([&] { kmseg::normalizeColumns(m, n); });
      EXPECT_NE(message.find("row 2, column 1"), std::string::npos) << message;
    }
  }
}

TEST(FeatureNormalize, RejectsRangesThatOverflow) {
  Matrix m(2, 2);
  m.values = {0, -1e308, 1, 1e308};
  const std::string message =
      messageOf<DataError>([&] { kmseg::normalizeColumns(m, Normalization::MinMax); });
  EXPECT_NE(message.find("column 1"), std::string::npos) << message;
  Matrix z(2, 1);
  z.values = {-1e200, 1e200};
  EXPECT_THROW(kmseg::normalizeColumns(z, Normalization::ZScore), DataError);
}

TEST(FeatureNormalize, EmptyMatrixIsLeftAlone) {
  Matrix m(0, 5);
  EXPECT_NO_THROW(kmseg::normalizeColumns(m, Normalization::ZScore));
  EXPECT_EQ(m.rows, 0u);
}

}  // namespace
