// SPDX-License-Identifier: MIT
#include "kmseg/features.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "kmseg/error.h"

namespace kmseg {

namespace {

constexpr std::size_t kColumns = kImageFeatureCount;
// Below this many rows (pixels) starting threads costs more than it saves.
constexpr std::size_t kParallelRows = 1 << 15;

std::string formatDouble(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

void requireImage(const Image& image) {
  if (image.width <= 0 || image.height <= 0)
    throw InvalidArgument("cannot build features of an empty image (" +
                          std::to_string(image.width) + " x " + std::to_string(image.height) +
                          " pixels)");
  if (image.bitDepth != 8 && image.bitDepth != 16)
    throw InvalidArgument("cannot build features of an image with " +
                          std::to_string(image.bitDepth) + "-bit samples; only 8 and 16 are valid");
  const std::size_t have = image.bitDepth == 16 ? image.rgb16.size() : image.rgb8.size();
  if (have != image.pixelCount() * 3)
    throw InvalidArgument("the pixel buffer of a " + std::to_string(image.width) + " x " +
                          std::to_string(image.height) + " image holds " + std::to_string(have) +
                          " samples instead of " + std::to_string(image.pixelCount() * 3));
}

// Sum of n values p[0], p[stride], ... added pairwise: a fixed tree, whatever the thread count.
double pairwiseSum(const double* p, std::size_t n, std::size_t stride) {
  if (n == 0) return 0.0;
  if (n == 1) return p[0];
  const std::size_t half = n / 2;
  return pairwiseSum(p, half, stride) + pairwiseSum(p + half * stride, n - half, stride);
}

// Column sums of f(value, column) over fixed blocks of kSumBlockRows rows (row order inside a
// block), the block sums then added pairwise: deterministic for any number of threads.
template <typename F>
std::vector<double> blockedColumnSums(const Matrix& m, F f) {
  const std::size_t cols = m.cols;
  const std::size_t blocks = (m.rows + kSumBlockRows - 1) / kSumBlockRows;
  std::vector<double> partial(blocks * cols, 0.0);
#pragma omp parallel for schedule(static) if (m.rows > kParallelRows)
  for (std::ptrdiff_t b = 0; b < std::ptrdiff_t(blocks); ++b) {
    double* sum = partial.data() + std::size_t(b) * cols;
    const std::size_t end = std::min(m.rows, (std::size_t(b) + 1) * kSumBlockRows);
    for (std::size_t i = std::size_t(b) * kSumBlockRows; i < end; ++i) {
      const double* r = m.row(i);
      for (std::size_t j = 0; j < cols; ++j) sum[j] += f(r[j], j);
    }
  }
  std::vector<double> sums(cols);
  for (std::size_t j = 0; j < cols; ++j) sums[j] = pairwiseSum(partial.data() + j, blocks, cols);
  return sums;
}

std::string columnName(std::size_t j) {
  return "column " + std::to_string(j);
}

// Smallest and largest sample of each channel of an interleaved RGB buffer. The buffer is read
// in runs of 16 pixels with one running extreme per position, which the compiler vectorises;
// position k holds channel k % 3.
template <typename T>
void channelExtremes(const std::vector<T>& s, T (&lo)[3], T (&hi)[3]) {
  constexpr std::size_t kLanes = 48;
  const std::size_t runs = s.size() / kLanes;
  for (int c = 0; c < 3; ++c) {
    lo[c] = std::numeric_limits<T>::max();
    hi[c] = 0;
  }
#pragma omp parallel if (s.size() > 3 * kParallelRows)
  {
    T runLo[kLanes], runHi[kLanes];
    std::fill(std::begin(runLo), std::end(runLo), std::numeric_limits<T>::max());
    std::fill(std::begin(runHi), std::end(runHi), T(0));
#pragma omp for schedule(static)
    for (std::ptrdiff_t run = 0; run < std::ptrdiff_t(runs); ++run) {
      const T* p = s.data() + std::size_t(run) * kLanes;
      for (std::size_t k = 0; k < kLanes; ++k) {
        runLo[k] = std::min(runLo[k], p[k]);
        runHi[k] = std::max(runHi[k], p[k]);
      }
    }
#pragma omp critical
    for (std::size_t k = 0; k < kLanes; ++k) {
      lo[k % 3] = std::min(lo[k % 3], runLo[k]);
      hi[k % 3] = std::max(hi[k % 3], runHi[k]);
    }
  }
  for (std::size_t i = runs * kLanes; i < s.size(); ++i) {
    lo[i % 3] = std::min(lo[i % 3], s[i]);
    hi[i % 3] = std::max(hi[i % 3], s[i]);
  }
}

// The tables of the common case (RGB, min-max): the column extremes are known before any row is
// written (channel extremes from the samples, 0 and width - 1 or height - 1 for x and y), so
// every value is one of a few minMaxValue results, each computed once.
template <typename T>
FeatureLookup minMaxRgbLookup(const Image& image, const std::vector<T>& s, double weight,
                              std::vector<ColumnScale>* scales = nullptr) {
  FeatureLookup l;
  l.width = std::size_t(image.width);
  l.height = std::size_t(image.height);
  if constexpr (sizeof(T) == 1)
    l.samples8 = s.data();
  else
    l.samples16 = s.data();
  T lo[3], hi[3];
  channelExtremes(s, lo, hi);
  for (int c = 0; c < 3; ++c) {
    l.colour[c].assign(std::size_t(hi[c]) + 1, 0.0);
    for (std::size_t v = lo[c]; v <= hi[c]; ++v)
      l.colour[c][v] = minMaxValue(double(v), double(lo[c]), double(hi[c]));
  }
  l.xs.resize(l.width);
  l.ys.resize(l.height);
  for (std::size_t x = 0; x < l.width; ++x)
    l.xs[x] = minMaxValue(double(x), 0.0, double(l.width - 1)) * weight;
  for (std::size_t y = 0; y < l.height; ++y)
    l.ys[y] = minMaxValue(double(y), 0.0, double(l.height - 1)) * weight;
  if (scales) {
    scales->clear();
    for (int c = 0; c < 3; ++c) scales->push_back({double(lo[c]), double(hi[c]) - double(lo[c])});
    scales->push_back({0.0, double(l.width - 1), weight});
    scales->push_back({0.0, double(l.height - 1), weight});
  }
  return l;
}

// The common case's matrix in one pass from its lookup. Bit-identical to the generic path.
template <typename T>
Matrix lookupFeatures(const FeatureLookup& l, const T* s) {
  const std::size_t width = l.width;
  Matrix m(l.pixelCount(), kColumns);
  const double* r0 = l.colour[0].data();
  const double* g0 = l.colour[1].data();
  const double* b0 = l.colour[2].data();
  const double* xs = l.xs.data();
#pragma omp parallel for schedule(static) if (m.rows > kParallelRows)
  for (std::ptrdiff_t y = 0; y < std::ptrdiff_t(l.height); ++y) {
    const T* p = s + std::size_t(y) * width * 3;
    double* r = m.row(std::size_t(y) * width);
    const double yv = l.ys[std::size_t(y)];
    for (std::size_t x = 0; x < width; ++x, p += 3, r += kColumns) {
      r[0] = r0[p[0]];
      r[1] = g0[p[1]];
      r[2] = b0[p[2]];
      r[3] = xs[x];
      r[4] = yv;
    }
  }
  return m;
}

void fillCoordinates(const Image& image, Matrix& m) {
  const std::size_t width = image.width;
#pragma omp parallel for schedule(static) if (m.rows > kParallelRows)
  for (std::ptrdiff_t y = 0; y < std::ptrdiff_t(image.height); ++y) {
    double* r = m.row(std::size_t(y) * width);
    for (std::size_t x = 0; x < width; ++x, r += kColumns) {
      r[3] = double(x);
      r[4] = double(y);
    }
  }
}

template <typename T>
void fillRgb(const Image& image, const std::vector<T>& s, Matrix& m) {
  const std::ptrdiff_t n = image.pixelCount();
#pragma omp parallel for schedule(static) if (m.rows > kParallelRows)
  for (std::ptrdiff_t i = 0; i < n; ++i) {
    double* r = m.row(i);
    const T* p = s.data() + std::size_t(i) * 3;
    r[0] = p[0];
    r[1] = p[1];
    r[2] = p[2];
  }
}

// OpenCV's Lab of float32 RGB in [0, 1], converted in bands of about a megapixel to bound the
// temporary memory; the conversion is per pixel, so the bands do not change any value.
template <typename T>
void fillLab(const Image& image, const std::vector<T>& s, Matrix& m) {
  std::vector<float> unit(std::size_t(image.maxValue()) + 1);
  for (std::size_t v = 0; v < unit.size(); ++v)
    unit[v] = static_cast<float>(double(v) / image.maxValue());
  const int width = image.width;
  const int bandRows = std::max(1, (1 << 20) / width);
  cv::Mat rgb(std::min(bandRows, image.height), width, CV_32FC3);
  cv::Mat lab;
  for (int y0 = 0; y0 < image.height; y0 += bandRows) {
    const int rows = std::min(bandRows, image.height - y0);
    const std::size_t first = std::size_t(y0) * width;
    const std::size_t count = std::size_t(rows) * width;
    cv::Mat band = rgb.rowRange(0, rows);
    float* f = band.ptr<float>();
    const T* p = s.data() + first * 3;
    for (std::size_t k = 0; k < count * 3; ++k) f[k] = unit[p[k]];
    cv::cvtColor(band, lab, cv::COLOR_RGB2Lab);
    const float* l = lab.ptr<float>();
    for (std::size_t i = 0; i < count; ++i) {
      double* r = m.row(first + i);
      r[0] = l[i * 3];
      r[1] = l[i * 3 + 1];
      r[2] = l[i * 3 + 2];
    }
  }
}

}  // namespace

std::string_view colorSpaceName(ColorSpace c) {
  return c == ColorSpace::Lab ? "lab" : "rgb";
}

ColorSpace parseColorSpace(std::string_view name) {
  if (name == "rgb") return ColorSpace::Rgb;
  if (name == "lab") return ColorSpace::Lab;
  throw InvalidArgument("unknown colour space '" + std::string(name) +
                        "'; valid colour spaces are: rgb, lab");
}

std::string_view normalizationName(Normalization n) {
  return n == Normalization::ZScore ? "zscore" : "minmax";
}

Normalization parseNormalization(std::string_view name) {
  if (name == "minmax") return Normalization::MinMax;
  if (name == "zscore") return Normalization::ZScore;
  throw InvalidArgument("unknown normalisation '" + std::string(name) +
                        "'; valid normalisations are: minmax, zscore");
}

std::vector<ColumnScale> normalizeColumns(Matrix& m, Normalization n) {
  if (m.empty()) return {};
  if (m.values.size() != m.rows * m.cols)
    throw InvalidArgument("a " + std::to_string(m.rows) + " x " + std::to_string(m.cols) +
                          " matrix holds " + std::to_string(m.values.size()) +
                          " values instead of " + std::to_string(m.rows * m.cols));
  const std::size_t rows = m.rows;
  const std::size_t cols = m.cols;

  // Extremes per block, merged afterwards (min and max do not depend on the order).
  const std::size_t blocks = (rows + kSumBlockRows - 1) / kSumBlockRows;
  std::vector<double> blockLo(blocks * cols, std::numeric_limits<double>::infinity());
  std::vector<double> blockHi(blocks * cols, -std::numeric_limits<double>::infinity());
  bool finite = true;
#pragma omp parallel for schedule(static) reduction(&& : finite) if (rows > kParallelRows)
  for (std::ptrdiff_t b = 0; b < std::ptrdiff_t(blocks); ++b) {
    double* lo = blockLo.data() + std::size_t(b) * cols;
    double* hi = blockHi.data() + std::size_t(b) * cols;
    const std::size_t end = std::min(rows, (std::size_t(b) + 1) * kSumBlockRows);
    for (std::size_t i = std::size_t(b) * kSumBlockRows; i < end; ++i) {
      const double* r = m.row(i);
      for (std::size_t j = 0; j < cols; ++j) {
        finite = finite && std::isfinite(r[j]);
        lo[j] = std::min(lo[j], r[j]);
        hi[j] = std::max(hi[j], r[j]);
      }
    }
  }
  if (!finite) checkFinite(m, "the matrix to normalise");  // throws, naming row and column

  std::vector<double> lo(cols, std::numeric_limits<double>::infinity());
  std::vector<double> hi(cols, -std::numeric_limits<double>::infinity());
  for (std::size_t b = 0; b < blocks; ++b)
    for (std::size_t j = 0; j < cols; ++j) {
      lo[j] = std::min(lo[j], blockLo[b * cols + j]);
      hi[j] = std::max(hi[j], blockHi[b * cols + j]);
    }

  if (n == Normalization::MinMax) {
    for (std::size_t j = 0; j < cols; ++j)
      if (!std::isfinite(hi[j] - lo[j]))
        throw DataError(columnName(j) + " spans [" + formatDouble(lo[j]) + ", " +
                        formatDouble(hi[j]) +
                        "], a range larger than the largest double; it cannot be min-max "
                        "normalised");
#pragma omp parallel for schedule(static) if (rows > kParallelRows)
    for (std::ptrdiff_t i = 0; i < std::ptrdiff_t(rows); ++i) {
      double* r = m.row(i);
      for (std::size_t j = 0; j < cols; ++j) r[j] = minMaxValue(r[j], lo[j], hi[j]);
    }
    std::vector<ColumnScale> scales(cols);
    for (std::size_t j = 0; j < cols; ++j) scales[j] = {lo[j], hi[j] - lo[j]};
    return scales;
  }

  std::vector<double> mean = blockedColumnSums(m, [](double v, std::size_t) { return v; });
  for (std::size_t j = 0; j < cols; ++j) {
    if (!std::isfinite(mean[j]))
      throw DataError(columnName(j) + " sums to more than the largest double; it cannot be " +
                      "z-score normalised");
    mean[j] /= double(rows);
  }
  std::vector<double> stddev = blockedColumnSums(m, [&mean](double v, std::size_t j) {
    const double d = v - mean[j];
    return d * d;
  });
  for (std::size_t j = 0; j < cols; ++j) {
    stddev[j] = std::sqrt(stddev[j] / double(rows));
    if (lo[j] != hi[j] && !(std::isfinite(stddev[j]) && stddev[j] > 0.0))
      throw DataError(columnName(j) + " spans [" + formatDouble(lo[j]) + ", " +
                      formatDouble(hi[j]) + "], whose variance " +
                      (stddev[j] > 0.0 ? "overflows" : "underflows") +
                      " a double; it cannot be z-score normalised");
  }
#pragma omp parallel for schedule(static) if (rows > kParallelRows)
  for (std::ptrdiff_t i = 0; i < std::ptrdiff_t(rows); ++i) {
    double* r = m.row(i);
    for (std::size_t j = 0; j < cols; ++j)
      r[j] = lo[j] == hi[j] ? 0.0 : (r[j] - mean[j]) / stddev[j];
  }
  std::vector<ColumnScale> scales(cols);
  for (std::size_t j = 0; j < cols; ++j)
    scales[j] = lo[j] == hi[j] ? ColumnScale{lo[j], 0.0} : ColumnScale{mean[j], stddev[j]};
  return scales;
}

Matrix inRawUnits(const Matrix& m, const std::vector<ColumnScale>& scales) {
  if (scales.size() != m.cols)
    throw InvalidArgument("inRawUnits: " + std::to_string(scales.size()) + " column scales for " +
                          std::to_string(m.cols) + " columns");
  Matrix r(m.rows, m.cols);
  for (std::size_t i = 0; i < m.rows; ++i)
    for (std::size_t j = 0; j < m.cols; ++j) r(i, j) = scales[j].raw(m(i, j));
  return r;
}

void checkSpatialWeight(double weight, std::string_view what) {
  if (!(weight >= 0.0 && weight <= kMaxSpatialWeight))  // false for NaN too
    throw InvalidArgument(
        std::string(what) + " " + formatDouble(weight) + " is outside [0, " +
        formatDouble(kMaxSpatialWeight) + "]: it must be finite and >= 0, at most " +
        formatDouble(kMaxSpatialWeight) + " (larger weights overflow fp16 distances)");
}

namespace {

// featureLookup for an image and weight that have passed their checks.
std::optional<FeatureLookup> checkedLookup(const Image& image, const FeatureOptions& options) {
  if (options.colorSpace != ColorSpace::Rgb || options.normalization != Normalization::MinMax)
    return std::nullopt;
  return image.bitDepth == 16 ? minMaxRgbLookup(image, image.rgb16, options.spatialWeight)
                              : minMaxRgbLookup(image, image.rgb8, options.spatialWeight);
}

}  // namespace

std::optional<FeatureLookup> featureLookup(const Image& image, const FeatureOptions& options) {
  requireImage(image);
  checkSpatialWeight(options.spatialWeight, "spatial weight");
  return checkedLookup(image, options);
}

Matrix makeFeatures(const Image& image, const FeatureOptions& options) {
  return makeImageFeatures(image, options).rows;
}

ImageFeatures makeImageFeatures(const Image& image, const FeatureOptions& options) {
  requireImage(image);
  const double weight = options.spatialWeight;
  checkSpatialWeight(weight, "spatial weight");
  const bool is16 = image.bitDepth == 16;

  if (options.colorSpace == ColorSpace::Rgb && options.normalization == Normalization::MinMax) {
    std::vector<ColumnScale> scales;
    FeatureLookup l = is16 ? minMaxRgbLookup(image, image.rgb16, weight, &scales)
                           : minMaxRgbLookup(image, image.rgb8, weight, &scales);
    Matrix rows = is16 ? lookupFeatures(l, l.samples16) : lookupFeatures(l, l.samples8);
    return {std::move(rows), std::move(l), std::move(scales)};
  }

  Matrix m(image.pixelCount(), kColumns);
  if (options.colorSpace == ColorSpace::Lab) {
    if (is16)
      fillLab(image, image.rgb16, m);
    else
      fillLab(image, image.rgb8, m);
  } else if (is16) {
    fillRgb(image, image.rgb16, m);
  } else {
    fillRgb(image, image.rgb8, m);
  }
  fillCoordinates(image, m);
  std::vector<ColumnScale> scales = normalizeColumns(m, options.normalization);
  scales[3].weight = scales[4].weight = weight;
  if (weight != 1.0) {
#pragma omp parallel for schedule(static) if (m.rows > kParallelRows)
    for (std::ptrdiff_t i = 0; i < std::ptrdiff_t(m.rows); ++i) {
      m.row(i)[3] *= weight;
      m.row(i)[4] *= weight;
    }
  }
  return {std::move(m), std::nullopt, std::move(scales)};
}

}  // namespace kmseg
