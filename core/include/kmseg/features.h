// SPDX-License-Identifier: MIT
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "kmseg/config.h"
#include "kmseg/image.h"
#include "kmseg/matrix.h"

namespace kmseg {

/// Colour space of the first three feature columns.
enum class ColorSpace { Rgb, Lab };
/// The name parseColorSpace accepts: "rgb" or "lab".
std::string_view colorSpaceName(ColorSpace c);
/// Parses "rgb" or "lab". Throws InvalidArgument.
ColorSpace parseColorSpace(std::string_view name);

/// Per-column normalisation. Both kinds are computed in IEEE double and do not depend on the
/// number of threads. A column is constant when its largest value equals its smallest; it maps
/// to 0 under both kinds, never to NaN.
enum class Normalization {
  /// minMaxValue(v, min, max) = (v - min) / (max - min): one correctly rounded subtraction and
  /// one correctly rounded division, so min maps to exactly 0, max to exactly 1 and every value
  /// into [0, 1]; a constant column maps to 0.
  MinMax,
  /// (v - mean) / stddev with the population standard deviation sqrt(sum((v - mean)^2) / N);
  /// both sums are taken in fixed blocks of kSumBlockRows rows (in row order within a block),
  /// the block sums added pairwise; mean = sum / N. A constant column maps to 0.
  ZScore
};
/// The name parseNormalization accepts: "minmax" or "zscore".
std::string_view normalizationName(Normalization n);
/// Parses "minmax" or "zscore". Throws InvalidArgument.
Normalization parseNormalization(std::string_view name);

/// Rows per block of the z-score sums (see Normalization::ZScore).
inline constexpr std::size_t kSumBlockRows = 4096;

/// The min-max normalised value of `v` in a column whose extremes are `min` and `max`; the one
/// definition that every engine uses when it rebuilds features instead of reading them.
KMSEG_HOST_DEVICE inline double minMaxValue(double v, double min, double max) {
  return max == min ? 0.0 : (v - min) / (max - min);
}

/// Largest spatial weight, so that every mode, fp16 included, can represent the terms of the
/// expanded distance: with |feature| <= 64 and D = 5, ||x||^2 and ||c||^2 <= 5 * 64^2 and
/// 2|x^T c| <= 10 * 64^2 = 40960 stay below fp16's largest value 65504 (the bound the CUDA
/// engine's fast passes assume). Weighted x and y reach the weight (min-max) or less than
/// sqrt(3) times it (z-score), so 32 keeps them within 64 under either normalisation.
inline constexpr double kMaxSpatialWeight = 32.0;

/// How feature column j relates to the raw quantity it was built from (a colour sample value or
/// Lab's L*, a*, b*; the pixel's column or row; a generic matrix's own values): feature =
/// (raw - offset) / range * weight, where range is max - min (min-max) or the standard deviation
/// (z-score). A constant column has range 0 and is 0 throughout.
struct ColumnScale {
  double offset = 0.0;
  double range = 1.0;   ///< 0: a constant column (raw == offset everywhere)
  double weight = 1.0;  ///< the spatial weight for x and y, else 1

  /// The raw value of a feature value: offset + feature / weight * range; offset for a constant
  /// column; NaN for a column weighted 0, which keeps nothing of its raw values.
  double raw(double feature) const {
    if (range == 0.0) return offset;
    if (weight == 0.0) return __builtin_nan("");
    return offset + feature / weight * range;
  }
  friend bool operator==(const ColumnScale&, const ColumnScale&) = default;
};

/// `m` (e.g. centroids in feature units) in the raw units of its columns: scales[j].raw(m(i, j)).
/// Throws InvalidArgument when scales does not hold one entry per column.
Matrix inRawUnits(const Matrix& m, const std::vector<ColumnScale>& scales);

/// How pixel features are built.
struct FeatureOptions {
  ColorSpace colorSpace = ColorSpace::Rgb;              ///< what c0, c1, c2 hold
  Normalization normalization = Normalization::MinMax;  ///< applied to every column
  /// Multiplies the normalised x and y columns; finite, in [0, kMaxSpatialWeight].
  double spatialWeight = 1.0;

  friend bool operator==(const FeatureOptions&, const FeatureOptions&) = default;
};

/// Throws InvalidArgument naming `what` (e.g. "spatial weight", or the option that set it) and
/// the range when `weight` is not a finite number in [0, kMaxSpatialWeight].
void checkSpatialWeight(double weight, std::string_view what);

/// Builds one row (c0, c1, c2, x, y) per pixel, row-major pixel order (index = y * width + x),
/// then normalises each column and weights x and y. Before normalisation, c0..c2 are the R, G, B
/// sample values (0..255 or 0..65535) or, for Lab, OpenCV's COLOR_RGB2Lab of the float32 sample
/// float(v / maxValue) (L in [0, 100]); x and y are the column and row of the pixel in the
/// upright image. After normalisation x and y are multiplied by the spatial weight (one
/// rounding). The result equals building those raw columns, calling normalizeColumns and then
/// weighting, bit for bit. Throws InvalidArgument for an empty image, a pixel buffer that does
/// not hold width * height * 3 samples, or a spatial weight that checkSpatialWeight refuses.
Matrix makeFeatures(const Image& image, const FeatureOptions& options = {});
/// The columns of makeFeatures's matrix: (c0, c1, c2, x, y).
inline constexpr std::size_t kImageFeatureCount = 5;

/// An image's RGB, min-max feature matrix as lookups: row i = (c[0][s0], c[1][s1], c[2][s2],
/// xs[i % width], ys[i / width]) for the samples s0, s1, s2 of pixel i. makeFeatures builds its
/// matrix from these very tables, so an engine may rebuild the rows from the pixels (3 or 6 bytes
/// each) instead of reading them (40 bytes each). It points into the image's sample buffer: the
/// image must outlive it and stay unchanged.
struct FeatureLookup {
  std::size_t width = 0;
  std::size_t height = 0;
  const std::uint8_t* samples8 = nullptr;    ///< width * height * 3 samples, or null
  const std::uint16_t* samples16 = nullptr;  ///< the same for 16-bit images, or null
  std::vector<double> colour[3];             ///< feature of a sample value, 0 ... largest sample
  std::vector<double> xs, ys;                ///< feature of a column and of a row

  std::size_t pixelCount() const { return width * height; }
  /// Sample c (0 = R, 1 = G, 2 = B) of pixel i.
  std::size_t sample(std::size_t i, int c) const {
    return samples16 ? samples16[i * 3 + c] : samples8[i * 3 + c];
  }
  /// Feature q of pixel i: the value of makeFeatures's matrix, bit for bit.
  double value(std::size_t i, std::size_t q) const {
    return q < 3 ? colour[q][sample(i, int(q))] : q == 3 ? xs[i % width] : ys[i / width];
  }
};

/// The lookup of makeFeatures(image, options) when its columns are tables (RGB colour, min-max
/// normalisation), else nothing. Throws what makeFeatures throws for a bad image or weight.
std::optional<FeatureLookup> featureLookup(const Image& image, const FeatureOptions& options = {});

/// makeFeatures's matrix with its featureLookup, both from one pass over the samples.
struct ImageFeatures {
  Matrix rows;
  std::optional<FeatureLookup> lookup;  ///< points into the image's samples
  /// Per column (c0, c1, c2, x, y): how the features relate to the raw values (ColumnScale);
  /// x and y are in pixels (column and row of the upright image).
  std::vector<ColumnScale> scales;
};
/// makeFeatures(image, options) and featureLookup(image, options) at once.
ImageFeatures makeImageFeatures(const Image& image, const FeatureOptions& options = {});

/// Normalises every column of a generic N x D matrix in place (see Normalization). Constant
/// columns become 0, never NaN; an empty matrix is left as it is. Throws DataError when the
/// matrix holds NaN or infinity, or when a column's range (min-max) or variance (z-score)
/// overflows a double. Returns each column's ColumnScale (weight 1; none for an empty matrix).
std::vector<ColumnScale> normalizeColumns(Matrix& m, Normalization n);

}  // namespace kmseg
