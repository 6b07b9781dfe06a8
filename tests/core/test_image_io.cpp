// SPDX-License-Identifier: MIT
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "kmseg/error.h"
#include "kmseg/export.h"
#include "kmseg/image_io.h"
#include "test_paths.h"

namespace {

namespace fs = std::filesystem;
using kmseg::Image;
using kmseg::ImageInfo;
using kmseg::InvalidArgument;
using kmseg::IoError;
using kmseg::LoadOptions;
using kmseg::test::freshTempDir;
using kmseg::test::sourcePath;

using Rgb = std::array<int, 3>;

Rgb pixel(const Image& image, int x, int y) {
  const std::size_t i = std::size_t(y) * image.width + x;
  return {int(image.sample(i, 0)), int(image.sample(i, 1)), int(image.sample(i, 2))};
}

// A test file's bytes; a file that cannot be read fails the test (the tests edit the bytes at
// fixed offsets, which an empty vector would not have).
std::vector<char> readBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read the test file " + path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

fs::path writeBytes(const fs::path& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  return path;
}

// The first `keep` bytes of a sample, as a new file in `dir`.
fs::path truncatedCopy(const fs::path& dir, const std::string& sample, std::size_t keep) {
  std::vector<char> bytes = readBytes(sourcePath(sample));
  EXPECT_LT(keep, bytes.size());
  bytes.resize(keep);
  return writeBytes(dir / fs::path(sample).filename(), bytes);
}

// A PNG signature and an IHDR chunk only: enough for the header, no pixels. `colourType` is
// the IHDR's (0 grey, 2 RGB, 6 RGBA).
fs::path pngHeaderOnly(const fs::path& path, std::uint32_t width, std::uint32_t height,
                       char colourType = 0) {
  std::vector<char> bytes = {'\x89', 'P', 'N', 'G', '\r', '\n', '\x1A', '\n',
                             0,      0,   0,   13,  'I',  'H',  'D',    'R'};
  for (std::uint32_t v : {width, height})
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(char((v >> shift) & 0xFF));
  for (char c : {char(8), colourType, char(0), char(0), char(0)}) bytes.push_back(c);  // 8-bit
  for (int k = 0; k < 4; ++k) bytes.push_back(0);  // CRC (stb_image does not check it)
  return writeBytes(path, bytes);
}

// Sample value of channel c at (x, y) in the images the tests below build: distinct enough that
// a wrong offset or a missing row shows.
std::uint8_t patternSample(int x, int y, int c) {
  return std::uint8_t((x * 37 + y * 11 + c * 71) & 0xFF);
}

void putLe(std::vector<char>& bytes, std::uint32_t value, int count) {
  for (int k = 0; k < count; ++k) bytes.push_back(char((value >> (8 * k)) & 0xFF));
}

// An uncompressed 24-bit BMP (BITMAPINFOHEADER, rows padded to 4 bytes), bottom-up as most
// are, or top-down (a negative height in the header).
std::vector<char> bmpBytes(int width, int height, bool topDown = false) {
  const std::uint32_t stride = (std::uint32_t(width) * 3 + 3) / 4 * 4;
  const std::uint32_t offset = 14 + 40;
  std::vector<char> bytes = {'B', 'M'};
  putLe(bytes, offset + stride * height, 4);
  putLe(bytes, 0, 4);
  putLe(bytes, offset, 4);
  putLe(bytes, 40, 4);
  putLe(bytes, width, 4);
  putLe(bytes, std::uint32_t(topDown ? -height : height), 4);
  putLe(bytes, 1, 2);                              // planes
  putLe(bytes, 24, 2);                             // bits per pixel
  for (int k = 0; k < 6; ++k) putLe(bytes, 0, 4);  // BI_RGB, sizes, resolution, palette
  for (int row = 0; row < height; ++row) {
    const int y = topDown ? row : height - 1 - row;
    for (int x = 0; x < width; ++x)
      for (int c = 2; c >= 0; --c) bytes.push_back(char(patternSample(x, y, c)));  // BGR
    for (std::uint32_t k = std::uint32_t(width) * 3; k < stride; ++k) bytes.push_back(0);
  }
  return bytes;
}

// A 24-bit true-colour TGA, top-left origin; with `rle`, each row is one repeated pixel (the
// row's first) followed by a raw packet of the rest, so the decoded image is still the pattern
// except for one column.
std::vector<char> tgaBytes(int width, int height, bool rle) {
  std::vector<char> bytes = {0, 0, char(rle ? 10 : 2)};
  putLe(bytes, 0, 4);  // no colour map
  putLe(bytes, 0, 1);
  putLe(bytes, 0, 4);  // origin
  putLe(bytes, width, 2);
  putLe(bytes, height, 2);
  bytes.push_back(24);
  bytes.push_back(0x20);  // top-left origin
  const auto pixel = [&](int x, int y) {
    for (int c = 2; c >= 0; --c) bytes.push_back(char(patternSample(x, y, c)));  // BGR
  };
  for (int y = 0; y < height; ++y) {
    if (!rle) {
      for (int x = 0; x < width; ++x) pixel(x, y);
      continue;
    }
    bytes.push_back(char(0x80 | 1));  // the row's first pixel, twice
    pixel(0, y);
    for (int x = 2; x < width; x += 128) {
      const int count = std::min(128, width - x);
      bytes.push_back(char(count - 1));
      for (int k = 0; k < count; ++k) pixel(x + k, y);
    }
  }
  return bytes;
}

// A binary PGM (`channels` 1) or PPM (3) with maxval 255 or 65535 (16-bit big-endian samples).
std::vector<char> pnmBytes(int width, int height, int channels, int maxval, int low = -1) {
  const std::string header = std::string(channels == 1 ? "P5" : "P6") + "\n# kmseg test\n" +
                             std::to_string(width) + " " + std::to_string(height) + "\n" +
                             std::to_string(maxval) + "\n";
  std::vector<char> bytes(header.begin(), header.end());
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < channels; ++c) {
        const int v = patternSample(x, y, c);
        // 16 bits big-endian: v * 257 (bytes v, v), or v * 256 + low.
        if (maxval > 255) bytes.push_back(char(v));
        bytes.push_back(char(maxval > 255 && low >= 0 ? low : v));
      }
  return bytes;
}

// An 8-bit RGB PSD of the pattern: the 26-byte header, three empty sections, then the channel
// planes raw or run-length (a table of 2 bytes per row and channel, then each row of each plane
// as literal packets of at most 128 bytes). Channels past the third (alpha and others) hold
// values from 0 to 255 that differ from pixel to pixel.
std::uint8_t extraSample(int x, int y, int c) {
  return std::uint8_t((x * 29 + y * 7 + c * 101) & 0xFF);
}
std::vector<char> psdBytes(int width, int height, bool rle, int channels = 3) {
  std::vector<char> bytes = {'8', 'B', 'P', 'S', 0, 1, 0, 0, 0, 0, 0, 0, 0, char(channels)};
  const auto sample = [](int x, int y, int c) {
    return char(c < 3 ? patternSample(x, y, c) : extraSample(x, y, c));
  };
  auto putBe = [&](std::uint32_t v, int count) {
    for (int k = count - 1; k >= 0; --k) bytes.push_back(char((v >> (8 * k)) & 0xFF));
  };
  putBe(std::uint32_t(height), 4);
  putBe(std::uint32_t(width), 4);
  putBe(8, 2);  // bits per channel
  putBe(3, 2);  // RGB
  for (int section = 0; section < 3; ++section) putBe(0, 4);
  putBe(rle ? 1 : 0, 2);
  if (!rle) {
    for (int c = 0; c < channels; ++c)
      for (int y = 0; y < height; ++y)
        for (int x = 0; x < width; ++x) bytes.push_back(sample(x, y, c));
    return bytes;
  }
  const int packets = (width + 127) / 128;
  for (int c = 0; c < channels; ++c)
    for (int y = 0; y < height; ++y) putBe(std::uint32_t(width + packets), 2);
  for (int c = 0; c < channels; ++c)
    for (int y = 0; y < height; ++y)
      for (int x = 0; x < width; x += 128) {
        const int count = std::min(128, width - x);
        bytes.push_back(char(count - 1));
        for (int k = 0; k < count; ++k) bytes.push_back(sample(x + k, y, c));
      }
  return bytes;
}

// A 16-bit RGB PSD, raw: sample c of pixel (x, y) is psd16Sample(x, y, c), big-endian. With
// `rle` only its compression field says run-length (the body is the raw one).
std::uint16_t psd16Sample(int x, int y, int c) {
  return std::uint16_t(4099 * (x + 1) + 257 * y + 31 * c + 1);
}
std::vector<char> psd16Bytes(int width, int height, bool rle) {
  std::vector<char> bytes = {'8', 'B', 'P', 'S', 0, 1, 0, 0, 0, 0, 0, 0, 0, 3};
  auto putBe = [&](std::uint32_t v, int count) {
    for (int k = count - 1; k >= 0; --k) bytes.push_back(char((v >> (8 * k)) & 0xFF));
  };
  putBe(std::uint32_t(height), 4);
  putBe(std::uint32_t(width), 4);
  putBe(16, 2);  // bits per channel
  putBe(3, 2);   // RGB
  for (int section = 0; section < 3; ++section) putBe(0, 4);
  putBe(rle ? 1 : 0, 2);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < height; ++y)
      for (int x = 0; x < width; ++x) putBe(psd16Sample(x, y, c), 2);
  return bytes;
}

// A Radiance HDR whose pixels are RGBE (pattern, exponent 128): run-length scanlines (each
// component as literal packets of at most 128 bytes) when `width` is 8 to 32767, else flat.
std::vector<char> hdrBytes(int width, int height) {
  const std::string header = "#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y " + std::to_string(height) +
                             " +X " + std::to_string(width) + "\n";
  std::vector<char> bytes(header.begin(), header.end());
  auto component = [](int x, int y, int c) { return char(c < 3 ? patternSample(x, y, c) : 128); };
  const bool rle = width >= 8 && width < 32768;
  for (int y = 0; y < height; ++y) {
    if (!rle) {
      for (int x = 0; x < width; ++x)
        for (int c = 0; c < 4; ++c) bytes.push_back(component(x, y, c));
      continue;
    }
    for (int v : {2, 2, width >> 8, width & 0xFF}) bytes.push_back(char(v));
    for (int c = 0; c < 4; ++c)
      for (int x = 0; x < width; x += 128) {
        const int count = std::min(128, width - x);
        bytes.push_back(char(count));
        for (int k = 0; k < count; ++k) bytes.push_back(component(x + k, y, c));
      }
  }
  return bytes;
}

// A GIF89a with a 256-grey global palette, one image of the pattern's red channel, LZW-coded
// with one literal code per pixel and a clear code every 128 pixels (so codes stay 9 bits).
std::vector<char> gifBytes(int width, int height) {
  std::vector<char> bytes = {'G', 'I', 'F', '8', '9', 'a'};
  putLe(bytes, width, 2);
  putLe(bytes, height, 2);
  bytes.push_back(char(0xF7));  // global colour table of 256 entries
  bytes.push_back(0);
  bytes.push_back(0);
  for (int i = 0; i < 256; ++i)
    for (int c = 0; c < 3; ++c) bytes.push_back(char(i));
  bytes.push_back(',');
  putLe(bytes, 0, 4);  // position
  putLe(bytes, width, 2);
  putLe(bytes, height, 2);
  bytes.push_back(0);  // no local table, not interlaced
  bytes.push_back(8);  // LZW minimum code size
  std::vector<char> lzw;
  std::uint32_t bits = 0;
  int count = 0;
  const auto code = [&](std::uint32_t value) {
    bits |= value << count;
    for (count += 9; count >= 8; count -= 8, bits >>= 8) lzw.push_back(char(bits & 0xFF));
  };
  for (int i = 0; i < width * height; ++i) {
    if (i % 128 == 0) code(256);
    code(patternSample(i % width, i / width, 0));
  }
  code(257);
  if (count > 0) lzw.push_back(char(bits & 0xFF));
  for (std::size_t at = 0; at < lzw.size(); at += 255) {
    const std::size_t length = std::min<std::size_t>(255, lzw.size() - at);
    bytes.push_back(char(length));
    bytes.insert(bytes.end(), lzw.begin() + at, lzw.begin() + at + length);
  }
  bytes.push_back(0);  // end of the image data
  bytes.push_back(';');
  return bytes;
}

template <typename E>
std::string messageOf(const fs::path& path, const LoadOptions& options = {}) {
  try {
    kmseg::loadImage(path, options);
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type for " << path << ": " << e.what();
    return {};
  }
  ADD_FAILURE() << "loading " << path << " did not throw";
  return {};
}

// The message of the IoError that probing `path` throws; a failure when it throws none.
std::string probeMessageOf(const fs::path& path) {
  try {
    kmseg::probeImage(path);
  } catch (const IoError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type for " << path << ": " << e.what();
    return {};
  }
  ADD_FAILURE() << "probing " << path << " did not throw";
  return {};
}

TEST(ImageIo, LoadsCoffeePngWithKnownPixels) {
  const Image image = kmseg::loadImage(sourcePath("samples/coffee.png"));
  EXPECT_EQ(image.width, 600);
  EXPECT_EQ(image.height, 400);
  EXPECT_EQ(image.bitDepth, 8);
  EXPECT_EQ(image.rgb8.size(), 600u * 400u * 3u);
  EXPECT_TRUE(image.rgb16.empty());
  // Reference values from ImageMagick (PNG is lossless, so they are exact).
  EXPECT_EQ(pixel(image, 0, 0), (Rgb{21, 13, 8}));
  EXPECT_EQ(pixel(image, 123, 45), (Rgb{167, 64, 20}));
  EXPECT_EQ(pixel(image, 599, 399), (Rgb{143, 60, 29}));
}

TEST(ImageIo, ProbesHeaders) {
  const ImageInfo png = kmseg::probeImage(sourcePath("samples/coffee.png"));
  EXPECT_EQ(png.width, 600);
  EXPECT_EQ(png.height, 400);
  EXPECT_EQ(png.channels, 3);
  EXPECT_EQ(png.bitDepth, 8);
  EXPECT_EQ(png.orientation, 1);
  EXPECT_EQ(png.format, "png");

  const ImageInfo jpeg = kmseg::probeImage(sourcePath("samples/grace_hopper.jpg"));
  EXPECT_EQ(jpeg.width, 512);
  EXPECT_EQ(jpeg.height, 600);
  EXPECT_EQ(jpeg.channels, 3);
  EXPECT_EQ(jpeg.format, "jpeg");
  EXPECT_EQ(jpeg.orientation, 1);

  const ImageInfo rotated = kmseg::probeImage(sourcePath("tests/data/orientation_6.jpg"));
  EXPECT_EQ(rotated.width, 6);  // stored size
  EXPECT_EQ(rotated.height, 4);
  EXPECT_EQ(rotated.orientation, 6);
  EXPECT_EQ(rotated.uprightWidth(), 4);
  EXPECT_EQ(rotated.uprightHeight(), 6);
}

TEST(ImageIo, LoadsGraceHopperJpeg) {
  const Image image = kmseg::loadImage(sourcePath("samples/grace_hopper.jpg"));
  ASSERT_EQ(image.width, 512);
  ASSERT_EQ(image.height, 600);
  EXPECT_EQ(image.bitDepth, 8);
  // stb_image and libjpeg (ImageMagick's reference) differ in IDCT and chroma upsampling, so
  // compare channel means and a few pixels with a tolerance.
  double sum[3] = {0, 0, 0};
  for (std::size_t i = 0; i < image.pixelCount(); ++i)
    for (int c = 0; c < 3; ++c) sum[c] += image.sample(i, c);
  const double reference[3] = {82.4845, 72.4301, 86.4244};
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(sum[c] / image.pixelCount(), reference[c], 0.5);
  const auto near = [&](int x, int y, Rgb expected) {
    const Rgb got = pixel(image, x, y);
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(got[c], expected[c], 12) << x << "," << y;
  };
  near(0, 0, {21, 24, 77});
  near(256, 300, {216, 136, 103});
  near(511, 599, {14, 13, 19});
}

TEST(ImageIo, LoadsEverySampleAtItsProbedSize) {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(sourcePath("samples"))) {
    const std::string ext = entry.path().extension().string();
    if (ext != ".jpg" && ext != ".png") continue;
    const ImageInfo info = kmseg::probeImage(entry.path());
    const Image image = kmseg::loadImage(entry.path());
    EXPECT_EQ(image.width, info.uprightWidth()) << entry.path();
    EXPECT_EQ(image.height, info.uprightHeight()) << entry.path();
    EXPECT_EQ(image.rgb8.size(), image.pixelCount() * 3) << entry.path();
    ++count;
  }
  EXPECT_GE(count, 5);
}

// tests/data/{rgb16,grey8,grey16,rgba8}.png were made with ImageMagick from PPM/PGM/PAM text
// with the sample values the tests expect.
TEST(ImageIo, Keeps16BitSamples) {
  const fs::path path = sourcePath("tests/data/rgb16.png");
  const ImageInfo info = kmseg::probeImage(path);
  EXPECT_EQ(info.bitDepth, 16);
  EXPECT_EQ(info.channels, 3);
  const Image image = kmseg::loadImage(path);
  ASSERT_EQ(image.width, 2);
  ASSERT_EQ(image.height, 2);
  EXPECT_EQ(image.bitDepth, 16);
  EXPECT_TRUE(image.rgb8.empty());
  EXPECT_EQ(image.rgb16, (std::vector<std::uint16_t>{0, 1000, 65535, 40000, 257, 12345, 65535,
                                                     65535, 65535, 1, 2, 3}));
  EXPECT_EQ(image.maxValue(), 65535.0);
}

TEST(ImageIo, ExpandsGreyToRgb) {
  const fs::path path = sourcePath("tests/data/grey8.png");
  EXPECT_EQ(kmseg::probeImage(path).channels, 1);
  const Image image = kmseg::loadImage(path);
  ASSERT_EQ(image.width, 3);
  ASSERT_EQ(image.height, 2);
  EXPECT_EQ(image.bitDepth, 8);
  const int grey[6] = {0, 50, 100, 150, 200, 255};
  for (std::size_t i = 0; i < 6; ++i)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(image.sample(i, c), grey[i]) << i << "," << c;
}

TEST(ImageIo, ExpandsGrey16ToRgb16) {
  const Image image = kmseg::loadImage(sourcePath("tests/data/grey16.png"));
  ASSERT_EQ(image.width, 2);
  ASSERT_EQ(image.height, 1);
  EXPECT_EQ(image.bitDepth, 16);
  EXPECT_EQ(image.rgb16, (std::vector<std::uint16_t>{300, 300, 300, 65000, 65000, 65000}));
}

TEST(ImageIo, DropsAlpha) {
  const fs::path path = sourcePath("tests/data/rgba8.png");
  EXPECT_EQ(kmseg::probeImage(path).channels, 4);
  const Image image = kmseg::loadImage(path);
  ASSERT_EQ(image.width, 2);
  ASSERT_EQ(image.height, 1);
  // Colours are kept as stored, whatever the alpha (0 and 128 here): no premultiplication.
  EXPECT_EQ(image.rgb8, (std::vector<std::uint8_t>{10, 20, 30, 200, 100, 50}));
}

TEST(ImageIo, LoadsJpegWithBytesAfterTheEndMarker) {
  const fs::path dir = freshTempDir("image-io-trailing");
  std::vector<char> bytes = readBytes(sourcePath("samples/grace_hopper.jpg"));
  bytes.insert(bytes.end(), {'\xFF', '\xD8', 't', 'r', 'a', 'i', 'l', 'e', 'r'});
  const Image image = kmseg::loadImage(writeBytes(dir / "trailing.jpg", bytes));
  const Image original = kmseg::loadImage(sourcePath("samples/grace_hopper.jpg"));
  EXPECT_EQ(image.width, original.width);
  EXPECT_EQ(image.rgb8, original.rgb8);
}

TEST(ImageIo, PixelLimitIsCheckedFromTheHeader) {
  const fs::path path = sourcePath("samples/coffee.png");
  LoadOptions options;
  options.maxPixels = 1000;
  const std::string message = messageOf<kmseg::PixelLimitError>(path, options);
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("600 x 400"), std::string::npos) << message;
  EXPECT_NE(message.find("240000 pixels"), std::string::npos) << message;
  EXPECT_NE(message.find("limit of 1000 pixels"), std::string::npos) << message;

  options.maxPixels = 600 * 400;  // exactly at the limit is allowed
  EXPECT_EQ(kmseg::loadImage(path, options).pixelCount(), 600u * 400u);
}

TEST(ImageIo, HugeHeaderIsRefusedBeforeDecoding) {
  // 30000 x 30000 pixels declared by a 45-byte file: decoding would need 2.7 GB.
  const fs::path dir = freshTempDir("image-io-huge");
  const fs::path path = pngHeaderOnly(dir / "huge.png", 30000, 30000);
  const ImageInfo info = kmseg::probeImage(path);
  EXPECT_EQ(info.width, 30000);
  EXPECT_EQ(info.height, 30000);

  std::string message = messageOf<kmseg::PixelLimitError>(path);
  EXPECT_NE(message.find("900000000 pixels"), std::string::npos) << message;
  EXPECT_NE(message.find("limit of 200000000 pixels"), std::string::npos) << message;

  // The decoder's own limit is no pixel limit: no PixelLimitError, which a larger limit lifts.
  LoadOptions noPixelLimit;
  noPixelLimit.maxPixels = std::numeric_limits<std::uint64_t>::max();
  EXPECT_THROW(
      try { kmseg::loadImage(path, noPixelLimit); } catch (const kmseg::PixelLimitError&) {
        ADD_FAILURE() << "the decoder's limit was reported as the pixel limit";
      },
      InvalidArgument);
  message = messageOf<InvalidArgument>(path, noPixelLimit);
  EXPECT_NE(message.find("2700000000 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("limit of 2147483647 bytes"), std::string::npos) << message;
}

class ImageOrientation : public testing::TestWithParam<int> {};

// tests/data/orientation_N.jpg all store the same 6 x 4 picture: red top-left quadrant, green
// top-right, blue bottom-left, white bottom-right; only their EXIF orientation tag differs. They
// were made once with ImageMagick (-quality 100 -sampling-factor 1x1, so the colours survive)
// plus an EXIF APP1 segment holding only the orientation tag, written with libexif;
// orientation_6.jpg has big-endian (Motorola) EXIF, the others little-endian.
TEST_P(ImageOrientation, JpegIsTurnedUpright) {
  const int orientation = GetParam();
  const fs::path path =
      sourcePath("tests/data/orientation_" + std::to_string(orientation) + ".jpg");
  EXPECT_EQ(kmseg::probeImage(path).orientation, orientation);

  const Image image = kmseg::loadImage(path);
  const bool swapped = orientation >= 5;
  ASSERT_EQ(image.width, swapped ? 4 : 6);
  ASSERT_EQ(image.height, swapped ? 6 : 4);

  const Rgb red{255, 0, 0}, green{0, 255, 0}, blue{0, 0, 255}, white{255, 255, 255};
  // Expected upright corners (top-left, top-right, bottom-left, bottom-right); these agree with
  // ImageMagick's -auto-orient on the same files.
  const std::array<std::array<Rgb, 4>, 9> corners = {{
      {},
      {red, green, blue, white},  // 1: as stored
      {green, red, white, blue},  // 2: mirrored left-right
      {white, blue, green, red},  // 3: rotated 180
      {blue, white, red, green},  // 4: mirrored top-bottom
      {red, blue, green, white},  // 5: transposed
      {blue, red, white, green},  // 6: rotated 90 clockwise
      {white, green, blue, red},  // 7: transposed across the anti-diagonal
      {green, white, red, blue},  // 8: rotated 90 counter-clockwise
  }};
  const int w = image.width - 1, h = image.height - 1;
  const Rgb got[4] = {pixel(image, 0, 0), pixel(image, w, 0), pixel(image, 0, h),
                      pixel(image, w, h)};
  for (int k = 0; k < 4; ++k)
    for (int c = 0; c < 3; ++c)
      EXPECT_NEAR(got[k][c], corners[orientation][k][c], 8) << "corner " << k << " channel " << c;

  LoadOptions asStored;
  asStored.applyExifOrientation = false;
  const Image stored = kmseg::loadImage(path, asStored);
  EXPECT_EQ(stored.width, 6);
  EXPECT_EQ(stored.height, 4);
  EXPECT_NEAR(pixel(stored, 0, 0)[0], 255, 8);
  EXPECT_NEAR(pixel(stored, 0, 0)[1], 0, 8);
}

INSTANTIATE_TEST_SUITE_P(ImageExifTags, ImageOrientation, testing::Range(1, 9));

// The Exif segment is found wherever it comes before the image data: after a comment (as
// ImageMagick writes a file it adds one to) or after the quantisation tables. libexif's own
// search of a whole file stops at the first segment that is no APPn, so such a photo was
// taken as stored (orientation 1), on its side.
TEST(ImageOrientationExif, FoundAfterACommentOrTheTables) {
  const fs::path dir = freshTempDir("image-io-exif-after");
  const std::vector<char> jpeg = readBytes(sourcePath("tests/data/orientation_6.jpg"));
  // A comment segment right after SOI.
  std::vector<char> comment = jpeg;
  const std::vector<char> com = {'\xFF', '\xFE', 0, 7, 'h', 'e', 'l', 'l', 'o'};
  comment.insert(comment.begin() + 2, com.begin(), com.end());
  // The first DQT segment moved in front of everything else.
  std::vector<char> tables = jpeg;
  std::size_t dqt = 2;
  while (dqt + 3 < tables.size() && tables[dqt + 1] != '\xDB')
    dqt += 2 + (std::size_t(std::uint8_t(tables[dqt + 2])) << 8 | std::uint8_t(tables[dqt + 3]));
  ASSERT_LT(dqt + 3, tables.size());
  const std::size_t dqtEnd =
      dqt + 2 + (std::size_t(std::uint8_t(tables[dqt + 2])) << 8 | std::uint8_t(tables[dqt + 3]));
  const std::vector<char> segment(tables.begin() + std::ptrdiff_t(dqt),
                                  tables.begin() + std::ptrdiff_t(dqtEnd));
  tables.erase(tables.begin() + std::ptrdiff_t(dqt), tables.begin() + std::ptrdiff_t(dqtEnd));
  tables.insert(tables.begin() + 2, segment.begin(), segment.end());
  for (const auto& [name, bytes] : {std::pair{"comment.jpg", comment}, {"tables.jpg", tables}}) {
    const fs::path path = writeBytes(dir / name, bytes);
    EXPECT_EQ(kmseg::probeImage(path).orientation, 6) << name;
    const Image image = kmseg::loadImage(path);
    EXPECT_EQ(image.width, 4) << name;
    EXPECT_EQ(image.height, 6) << name;
  }
}

// Source pixel (sx, sy) that upright pixel (x, y) shows, for a stored w x h image; written out
// from the EXIF definitions independently of the implementation.
std::array<int, 2> sourceOf(int orientation, int x, int y, int w, int h) {
  switch (orientation) {
    case 2:
      return {w - 1 - x, y};
    case 3:
      return {w - 1 - x, h - 1 - y};
    case 4:
      return {x, h - 1 - y};
    case 5:
      return {y, x};
    case 6:
      return {y, h - 1 - x};
    case 7:
      return {w - 1 - y, h - 1 - x};
    case 8:
      return {w - 1 - y, x};
    default:
      return {x, y};
  }
}

TEST(ImageOrientationApply, MatchesTheExifDefinitionFor8And16Bit) {
  const int w = 5, h = 3;
  for (int depth : {8, 16}) {
    for (int orientation = 1; orientation <= 8; ++orientation) {
      Image image;
      image.width = w;
      image.height = h;
      image.bitDepth = depth;
      for (int i = 0; i < w * h * 3; ++i) {
        if (depth == 8)
          image.rgb8.push_back(std::uint8_t(i));
        else
          image.rgb16.push_back(std::uint16_t(1000 * i + 7));
      }
      const Image stored = image;
      kmseg::applyOrientation(image, orientation);
      const bool swapped = orientation >= 5;
      ASSERT_EQ(image.width, swapped ? h : w);
      ASSERT_EQ(image.height, swapped ? w : h);
      for (int y = 0; y < image.height; ++y)
        for (int x = 0; x < image.width; ++x) {
          const auto [sx, sy] = sourceOf(orientation, x, y, w, h);
          EXPECT_EQ(pixel(image, x, y), pixel(stored, sx, sy))
              << "orientation " << orientation << " depth " << depth << " at " << x << "," << y;
        }
    }
  }
}

TEST(ImageOrientationApply, RejectsValuesOutside1To8) {
  Image image;
  image.width = 1;
  image.height = 1;
  image.rgb8 = {1, 2, 3};
  EXPECT_THROW(kmseg::applyOrientation(image, 0), InvalidArgument);
  EXPECT_THROW(kmseg::applyOrientation(image, 9), InvalidArgument);
  image.rgb8.pop_back();
  EXPECT_THROW(kmseg::applyOrientation(image, 6), InvalidArgument);
}

// stb_image's 16-bit test does not read a PSD's depth; its reader keeps 16 bits when asked.
TEST(ImageIo, SixteenBitPsdStaysSixteenBit) {
  const int w = 5, h = 3;
  const Image image = kmseg::loadImage(
      writeBytes(freshTempDir("image-io-psd16") / "a.psd", psd16Bytes(w, h, false)));
  ASSERT_EQ(image.bitDepth, 16);
  ASSERT_EQ(image.width, w);
  ASSERT_EQ(image.height, h);
  ASSERT_EQ(image.rgb16.size(), std::size_t(w * h * 3));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        EXPECT_EQ(image.rgb16[std::size_t((y * w + x) * 3 + c)], psd16Sample(x, y, c))
            << x << "," << y << "," << c;
}

// Its run-length reader takes one byte a sample whatever the depth: refused, not decoded to
// wrong colours.
TEST(ImageIoError, SixteenBitRunLengthPsd) {
  const fs::path path =
      writeBytes(freshTempDir("image-io-psd16-rle") / "rle.psd", psd16Bytes(5, 3, true));
  const std::string message = messageOf<InvalidArgument>(path);
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("16-bit PSD with run-length compression"), std::string::npos) << message;
}

// A header of no pixels, or of a negative width (stb_image passes a BMP's on), is corrupt: not
// an image of 0 pixels, nor one beyond the pixel limit.
TEST(ImageIoError, HeaderWithoutPixels) {
  const fs::path dir = freshTempDir("image-io-no-pixels");
  for (const std::int32_t width : {0, -5}) {
    std::vector<char> bytes = bmpBytes(5, 3);
    for (int k = 0; k < 4; ++k)
      bytes[std::size_t(18 + k)] = char((std::uint32_t(width) >> (8 * k)) & 0xFF);
    const fs::path path = writeBytes(dir / ("w" + std::to_string(width) + ".bmp"), bytes);
    const std::string message = messageOf<IoError>(path);
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
    EXPECT_NE(message.find("its BMP header declares " + std::to_string(width) + " x 3 pixels"),
              std::string::npos)
        << message;
  }
}

// A PNG header with values the PNG specification does not allow is named as corrupt, with the
// value, instead of stb_image's "unknown image type" (its last reader's failure). Probing says
// the same.
TEST(ImageIoError, InvalidPngHeaderIsNamed) {
  const fs::path dir = freshTempDir("image-io-png-header");
  struct Case {
    std::uint32_t width, height;
    char depth, colour;
    std::string expected;
  };
  const Case cases[] = {
      {0, 8, 8, 2, "its PNG header declares 0 x 8 pixels (the file is corrupt)"},
      {8, 0, 8, 2, "its PNG header declares 8 x 0 pixels (the file is corrupt)"},
      {0x80000000u, 1, 8, 2,
       "its PNG header declares 2147483648 x 1 pixels, more than PNG allows (2^31 - 1 a side)"},
      {4, 4, 8, 5, "its PNG header has colour type 5, which PNG does not define"},
      {4, 4, 3, 2, "its PNG header has bit depth 3 with colour type 2, which PNG does not allow"},
      {4, 4, 16, 3, "its PNG header has bit depth 16 with colour type 3"},
  };
  int n = 0;
  for (const Case& c : cases) {
    const fs::path path =
        pngHeaderOnly(dir / ("h" + std::to_string(n++) + ".png"), c.width, c.height, c.colour);
    // pngHeaderOnly writes bit depth 8: set the case's.
    std::vector<char> bytes;
    {
      std::ifstream in(path, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    bytes[24] = c.depth;
    writeBytes(path, bytes);
    const std::string message = messageOf<IoError>(path);
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
    EXPECT_NE(message.find(c.expected), std::string::npos) << message;
    const std::string probed = probeMessageOf(path);
    EXPECT_NE(probed.find(c.expected), std::string::npos) << probed;
  }
}

// A JPEG frame header the decoder does not read is named, with what it declares, instead of
// stb_image's "unknown image type" (its last reader's failure); probing says the same.
TEST(ImageIoError, UnreadableJpegFrameIsNamed) {
  const fs::path dir = freshTempDir("image-io-jpeg-frame");
  const std::vector<char> jpeg = readBytes(sourcePath("samples/grace_hopper.jpg"));
  std::size_t sof = 0;
  for (std::size_t i = 2; i + 1 < jpeg.size() && sof == 0; ++i)
    if (jpeg[i] == '\xFF' && (jpeg[i + 1] == '\xC0' || jpeg[i + 1] == '\xC2')) sof = i;
  ASSERT_GT(sof, 0u);
  const std::string at = " at byte " + std::to_string(sof) + ")";
  struct Case {
    std::size_t offset;  // from the marker's 0xFF
    char value;
    std::string expected;
  };
  const Case cases[] = {
      {1, '\xC3',
       "its frame is lossless Huffman-coded (frame header SOF3" + at +
           ", which the decoder does not read"},
      {1, '\xC9', "its frame is sequential arithmetic-coded (frame header SOF9" + at},
      {1, '\xCE', "its frame is hierarchical progressive arithmetic-coded (frame header SOF14"},
      {4, 12, "its frame has 12-bit samples (frame header SOF"},
      {6, 0, "its frame header declares height 0 (frame header SOF"},
      {8, 0, "its frame header declares width 0 (frame header SOF"},
      {9, 2, "its frame header declares 2 components (frame header SOF"},
  };
  int n = 0;
  for (const Case& c : cases) {
    std::vector<char> bytes = jpeg;
    bytes[sof + c.offset] = c.value;
    if (c.offset == 6 || c.offset == 8) bytes[sof + c.offset - 1] = 0;  // both bytes of a side
    const fs::path path = writeBytes(dir / ("f" + std::to_string(n++) + ".jpg"), bytes);
    const std::string message = messageOf<IoError>(path);
    EXPECT_NE(message.find("cannot decode image file '" + path.string() + "': " + c.expected),
              std::string::npos)
        << message;
    const std::string probed = probeMessageOf(path);
    EXPECT_NE(probed.find(c.expected), std::string::npos) << probed;
  }
}

// A palette PNG without its palette, and a TGA header of no pixels, are named as corrupt.
TEST(ImageIoError, MissingPaletteAndEmptyTgaAreNamed) {
  const fs::path dir = freshTempDir("image-io-palette-tga");
  const fs::path png = pngHeaderOnly(dir / "nopalette.png", 4, 4, 3);
  std::vector<char> bytes = readBytes(png);
  for (const char* chunk : {"IDAT", "IEND"}) {
    for (int k = 0; k < 4; ++k) bytes.push_back(0);  // length
    bytes.insert(bytes.end(), chunk, chunk + 4);
    for (int k = 0; k < 4; ++k) bytes.push_back(0);  // CRC
  }
  writeBytes(png, bytes);
  std::string message = messageOf<IoError>(png);
  EXPECT_NE(message.find("'" + png.string() +
                         "': its PNG header declares a palette image (colour type 3), but no "
                         "PLTE chunk comes before its image data (IDAT at byte 33) (the file is "
                         "corrupt)"),
            std::string::npos)
      << message;

  for (const auto [width, height] : {std::pair{0, 3}, std::pair{4, 0}}) {
    const std::string size = std::to_string(width) + " x " + std::to_string(height);
    const fs::path tga = writeBytes(dir / (size + ".tga"), tgaBytes(width, height, false));
    message = messageOf<IoError>(tga);
    EXPECT_NE(message.find("'" + tga.string() +
                           "': read as a TGA (the file has no other format's "
                           "signature), its header declares " +
                           size + " pixels (the file is corrupt)"),
              std::string::npos)
        << message;
  }
}

// A palette PNG as kmseg writes its label maps (labels.png): 5 x 3 pixels, index (x + y) % 3,
// a palette of three colours. Its bytes, and where its PLTE chunk starts.
std::pair<std::vector<char>, std::size_t> palettePng(const fs::path& dir) {
  std::vector<std::int32_t> labels;
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 5; ++x) labels.push_back((x + y) % 3);
  const std::vector<kmseg::Rgb8> colours = {{200, 10, 20}, {30, 140, 50}, {60, 70, 250}};
  kmseg::writeLabelPng(dir / "palette.png", labels, 5, 3, 3, colours);
  std::vector<char> bytes = readBytes(dir / "palette.png");
  const std::string text(bytes.begin(), bytes.end());
  const std::size_t plte = text.find("PLTE");
  EXPECT_NE(plte, std::string::npos);
  return {bytes, plte - 4};
}

// A palette PNG decodes through its palette; an index past the palette (which stb_image would
// expand through entries it never set) is refused with the pixel, as are a second PLTE chunk and
// a tRNS chunk longer than the palette.
TEST(ImageIoError, PalettePngIndicesAreCheckedAgainstThePalette) {
  const fs::path dir = freshTempDir("image-io-palette-index");
  const auto [bytes, plte] = palettePng(dir);
  const Image image = kmseg::loadImage(dir / "palette.png");
  ASSERT_EQ(image.width, 5);
  ASSERT_EQ(image.height, 3);
  const Rgb colours[] = {{200, 10, 20}, {30, 140, 50}, {60, 70, 250}};
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 5; ++x) EXPECT_EQ(pixel(image, x, y), colours[(x + y) % 3]) << x << y;

  // The palette cut to two entries: pixel (2, 0) has index 2.
  std::vector<char> cut = bytes;
  cut[plte + 3] = 6;
  cut.erase(cut.begin() + std::ptrdiff_t(plte + 8 + 6), cut.begin() + std::ptrdiff_t(plte + 8 + 9));
  const fs::path short2 = writeBytes(dir / "short.png", cut);
  std::string message = messageOf<IoError>(short2);
  EXPECT_NE(message.find("'" + short2.string() +
                         "': its pixel (2, 0) has palette index 2, past its palette of 2 entries "
                         "(the file is corrupt)"),
            std::string::npos)
      << message;

  // The PLTE chunk twice.
  std::vector<char> twice = bytes;
  twice.insert(twice.begin() + std::ptrdiff_t(plte), bytes.begin() + std::ptrdiff_t(plte),
               bytes.begin() + std::ptrdiff_t(plte + 12 + 9));
  const fs::path second = writeBytes(dir / "twice.png", twice);
  message = messageOf<IoError>(second);
  EXPECT_NE(message.find("it has a second PLTE chunk (at byte " + std::to_string(plte + 21) +
                         "), where PNG allows one (the file is corrupt)"),
            std::string::npos)
      << message;

  // A tRNS chunk of four entries after the palette of three.
  std::vector<char> trns = bytes;
  const std::vector<char> chunk = {0, 0, 0, 4, 't', 'R', 'N', 'S', 1, 2, 3, 4, 0, 0, 0, 0};
  trns.insert(trns.begin() + std::ptrdiff_t(plte + 21), chunk.begin(), chunk.end());
  const fs::path transparency = writeBytes(dir / "trns.png", trns);
  message = messageOf<IoError>(transparency);
  EXPECT_NE(message.find("its tRNS chunk (at byte " + std::to_string(plte + 21) +
                         ") has 4 entries, more than its palette's 3"),
            std::string::npos)
      << message;
}

// The decoder's limits beyond the pixel limit name themselves, before any pixel is decoded:
// 2^24 pixels a side in every format, and the bytes a reader decodes into (a GIF's 4 a pixel).
TEST(ImageIoError, BeyondTheDecodersLimits) {
  const fs::path dir = freshTempDir("image-io-decoder-limits");
  std::vector<char> bmp = bmpBytes(5, 1);
  const std::uint32_t wide = (1u << 24) + 1;
  for (int k = 0; k < 4; ++k) bmp[std::size_t(18 + k)] = char((wide >> (8 * k)) & 0xFF);
  const fs::path wideBmp = writeBytes(dir / "wide.bmp", bmp);
  std::string message = messageOf<InvalidArgument>(wideBmp);
  EXPECT_NE(message.find("16777217 x 1 pixels"), std::string::npos) << message;
  EXPECT_NE(message.find("at most 16777216 pixels a side"), std::string::npos) << message;

  // 30000 x 20000 (6e8 pixels, 1.8e9 bytes of RGB) passes the byte limit of RGB samples, but a
  // GIF decodes into 4 bytes a pixel. Only the logical screen is that large.
  std::vector<char> gif = gifBytes(2, 2);
  gif[6] = char(30000 & 0xFF), gif[7] = char(30000 >> 8);
  gif[8] = char(20000 & 0xFF), gif[9] = char(20000 >> 8);
  LoadOptions options;
  options.maxPixels = 1'000'000'000;
  const fs::path hugeGif = writeBytes(dir / "huge.gif", gif);
  message = messageOf<InvalidArgument>(hugeGif, options);
  EXPECT_NE(message.find(hugeGif.string() + "' is 30000 x 20000 pixels"), std::string::npos)
      << message;
  EXPECT_NE(message.find("for a GIF file"), std::string::npos) << message;
  EXPECT_NE(message.find("2147483647 bytes"), std::string::npos) << message;
}

TEST(ImageIoError, MissingFile) {
  const fs::path path = freshTempDir("image-io-missing") / "nothing.png";
  const std::string message = messageOf<IoError>(path);
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
  EXPECT_THROW(kmseg::probeImage(path), IoError);
}

TEST(ImageIoError, Directory) {
  const fs::path path = freshTempDir("image-io-directory");
  const std::string message = messageOf<IoError>(path);
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("is a directory"), std::string::npos) << message;
}

TEST(ImageIoError, NotARegularFile) {
  const std::string message = messageOf<IoError>("/dev/null");
  EXPECT_NE(message.find("'/dev/null' is not a regular file"), std::string::npos) << message;
}

TEST(ImageIoError, EmptyFile) {
  const fs::path path = writeBytes(freshTempDir("image-io-empty") / "empty.jpg", {});
  const std::string message = messageOf<IoError>(path);
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("is empty"), std::string::npos) << message;
  EXPECT_THROW(kmseg::probeImage(path), IoError);
}

TEST(ImageIoError, TextFileNamedPng) {
  const std::string text = "this is not an image\n";
  const fs::path path =
      writeBytes(freshTempDir("image-io-text") / "text.png", {text.begin(), text.end()});
  const std::string message = messageOf<IoError>(path);
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("not an image in a supported format"), std::string::npos) << message;
  EXPECT_NE(message.find("stb_image: unknown image type"), std::string::npos) << message;
  EXPECT_THROW(kmseg::probeImage(path), IoError);
}

TEST(ImageIoError, TruncatedJpeg) {
  const fs::path dir = freshTempDir("image-io-truncated-jpeg");
  const std::size_t size = fs::file_size(sourcePath("samples/grace_hopper.jpg"));
  for (std::size_t keep : {size / 2, size - 2, size - 1}) {
    const fs::path path = truncatedCopy(dir, "samples/grace_hopper.jpg", keep);
    // The header is intact, so the file probes fine; only decoding refuses it.
    EXPECT_EQ(kmseg::probeImage(path).width, 512);
    const std::string message = messageOf<IoError>(path);
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
    EXPECT_NE(message.find("is truncated"), std::string::npos) << keep << ": " << message;
  }
}

TEST(ImageIoError, TruncatedProgressiveJpeg) {
  const fs::path dir = freshTempDir("image-io-truncated-progressive");
  const std::size_t size = fs::file_size(sourcePath("samples/citrus-fruits.jpg"));
  const fs::path path = truncatedCopy(dir, "samples/citrus-fruits.jpg", size / 2);
  const std::string message = messageOf<IoError>(path);
  EXPECT_NE(message.find("is truncated"), std::string::npos) << message;
}

TEST(ImageIoError, TruncatedPng) {
  const fs::path dir = freshTempDir("image-io-truncated-png");
  const std::size_t size = fs::file_size(sourcePath("samples/coffee.png"));
  // Half the file; and a cut inside the final IEND chunk, which stb_image alone would accept.
  for (std::size_t keep : {size / 2, size - 2}) {
    const fs::path path = truncatedCopy(dir, "samples/coffee.png", keep);
    const std::string message = messageOf<IoError>(path);
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
    EXPECT_NE(message.find("is truncated"), std::string::npos) << keep << ": " << message;
  }
}

// An unknown critical PNG chunk whose type bytes are not text: stb_image copies them into its
// message; they are written as \xHH, so that no raw byte of the file reaches a terminal.
TEST(ImageIoError, UnknownPngChunkIsNamedInPrintableText) {
  std::ifstream in(sourcePath("samples/coffee.png"), std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string png(bytes.begin(), bytes.end());
  const std::size_t at = png.find("IDAT");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 3] = char(0xAB);
  const fs::path path = writeBytes(freshTempDir("image-io-chunk") / "chunk.png", bytes);
  const std::string message = messageOf<IoError>(path);
  EXPECT_NE(message.find("IDA\\xAB PNG chunk not known"), std::string::npos) << message;
  for (const char c : message) EXPECT_TRUE(static_cast<unsigned char>(c) < 0x80) << message;
}

// Every pixel of `image` against the pattern the builders above write; `grey` compares each
// channel with the pattern's red channel, `skip` names a column not to compare.
void expectPattern(const Image& image, int width, int height, bool grey = false, int skip = -1) {
  ASSERT_EQ(image.width, width);
  ASSERT_EQ(image.height, height);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      if (x == skip) continue;
      const Rgb expected = {patternSample(x, y, 0), patternSample(x, y, grey ? 0 : 1),
                            patternSample(x, y, grey ? 0 : 2)};
      ASSERT_EQ(pixel(image, x, y), expected) << x << "," << y;
    }
}

// Variants of the formats the decoder reads that it does not read are named, with what they
// declare, instead of stb_image's "unknown image type" (which read as if the format itself were
// not supported).
TEST(ImageIoError, UnreadVariantsOfReadFormatsAreNamed) {
  const fs::path dir = freshTempDir("image-io-variants");
  struct Case {
    std::string name;
    std::vector<char> bytes;
    std::string expected;
  };
  std::vector<Case> cases;
  for (const auto& [code, name] : {std::pair{1, "RLE8"}, {2, "RLE4"}, {4, "JPEG"}, {9, "type 9"}}) {
    std::vector<char> bmp = bmpBytes(4, 3);
    bmp[30] = char(code);
    cases.push_back({"c" + std::to_string(code) + ".bmp", bmp,
                     std::string("its BMP data is compressed as ") + name +
                         ", which the decoder does not read (it reads uncompressed and bit-field "
                         "BMP)"});
  }
  std::vector<char> psd = psdBytes(4, 3, false);
  psd[25] = 1;
  cases.push_back({"grey.psd", psd,
                   "its PSD colour mode is greyscale (1), which the decoder does not read (it "
                   "reads RGB PSD)"});
  psd[25] = 4;
  cases.push_back({"cmyk.psd", psd, "its PSD colour mode is CMYK (4)"});
  psd[25] = 3;
  psd[23] = 32;
  cases.push_back({"float.psd", psd, "its PSD header declares 32-bit channels"});
  psd[23] = 8;
  psd[5] = 2;
  cases.push_back({"big.psb", psd, "it is a large-document PSB file"});
  const std::string plain = "P3\n2 1\n255\n1 2 3 4 5 6\n";
  cases.push_back({"plain.ppm",
                   {plain.begin(), plain.end()},
                   "it is a PNM file of type P3 (plain-text PPM), which the decoder does not read "
                   "(it reads binary PGM, P5, and PPM, P6)"});
  const std::string pam = "P7\nWIDTH 1\nHEIGHT 1\nDEPTH 3\nMAXVAL 255\nENDHDR\nabc";
  cases.push_back({"a.pam", {pam.begin(), pam.end()}, "it is a PNM file of type P7 (PAM)"});
  for (const Case& c : cases) {
    const fs::path path = writeBytes(dir / c.name, c.bytes);
    const std::string message = messageOf<IoError>(path);
    EXPECT_NE(message.find("cannot decode image file '" + path.string() + "': " + c.expected),
              std::string::npos)
        << message;
    EXPECT_THROW(kmseg::probeImage(path), IoError) << c.name;
  }
}

// tests/data/ycck.jpg: 8 x 6 pixels, the left half red and the right half blue, made with
// ImageMagick (-colorspace CMYK -quality 100 -sampling-factor 1x1): four components, named
// YCCK by its Adobe APP14 marker (the first segment, 16 bytes). Without that marker, or with a
// transform the decoder does not read, it is refused rather than decoded as YCbCr.
TEST(ImageIo, FourComponentJpegNeedsItsAdobeMarker) {
  const fs::path dir = freshTempDir("image-io-ycck");
  const fs::path path = sourcePath("tests/data/ycck.jpg");
  const Image image = kmseg::loadImage(path);
  ASSERT_EQ(image.width, 8);
  ASSERT_EQ(image.height, 6);
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(pixel(image, 0, 0)[c], (Rgb{255, 0, 0})[c], 4);
    EXPECT_NEAR(pixel(image, 7, 5)[c], (Rgb{0, 0, 255})[c], 4);
  }
  const std::vector<char> bytes = readBytes(path);
  ASSERT_EQ(bytes[3], '\xEE');
  std::vector<char> bare = bytes;
  bare.erase(bare.begin() + 2, bare.begin() + 18);
  const fs::path withoutMarker = writeBytes(dir / "bare.jpg", bare);
  std::string message = messageOf<IoError>(withoutMarker);
  EXPECT_NE(message.find("'" + withoutMarker.string() +
                         "': its 4 colour components carry no Adobe marker that names them CMYK "
                         "or YCCK, and the decoder would read them as YCbCr (wrong colours)"),
            std::string::npos)
      << message;
  std::vector<char> one = bytes;
  one[2 + 4 + 11] = 1;
  const fs::path transform1 = writeBytes(dir / "t1.jpg", one);
  message = messageOf<IoError>(transform1);
  EXPECT_NE(message.find("its Adobe marker gives colour transform 1 for 4 components"),
            std::string::npos)
      << message;
  EXPECT_THROW(kmseg::probeImage(transform1), IoError);
}

// A TGA stored right to left (descriptor bit 4, which stb_image ignores), from the top row or
// from the bottom one, comes out as the picture; so does the same picture stored left to right.
TEST(ImageIo, TgaStoredRightToLeftIsTurnedBack) {
  const fs::path dir = freshTempDir("image-io-tga-right-to-left");
  const int w = 9, h = 4;
  for (const bool fromTop : {true, false}) {
    std::vector<char> bytes = tgaBytes(w, h, false);
    std::vector<char> flipped(bytes.begin(), bytes.begin() + 18);
    flipped[17] = char(fromTop ? 0x30 : 0x10);
    for (int row = 0; row < h; ++row) {
      const int y = fromTop ? row : h - 1 - row;
      for (int x = w - 1; x >= 0; --x) {
        const auto at = bytes.begin() + std::ptrdiff_t(18 + 3 * (y * w + x));
        flipped.insert(flipped.end(), at, at + 3);
      }
    }
    expectPattern(kmseg::loadImage(writeBytes(dir / "rtl.tga", flipped)), w, h);
  }
}

// A colour-mapped TGA whose map starts at an entry other than 0 is refused: stb_image would take
// every colour from the wrong entry.
TEST(ImageIoError, TgaColourMapNotStartingAtEntry0IsRefused) {
  const fs::path dir = freshTempDir("image-io-tga-map-start");
  std::vector<char> bytes = {0, 1, 1, 5, 0, 3, 0, 24, 0, 0, 0, 0, 2, 0, 1, 0, 8, 0x20};
  for (int entry = 0; entry < 3; ++entry)
    for (int c = 0; c < 3; ++c) bytes.push_back(char(40 * entry + c));
  bytes.push_back(5);  // the first entry
  bytes.push_back(7);  // the third
  const fs::path path = writeBytes(dir / "map5.tga", bytes);
  const std::string message = messageOf<IoError>(path);
  EXPECT_NE(message.find("'" + path.string() +
                         "': its TGA colour map starts at entry 5, which the decoder does not "
                         "read (it reads colour maps that start at entry 0)"),
            std::string::npos)
      << message;
  EXPECT_THROW(kmseg::probeImage(path), IoError);
  bytes[3] = 0;  // the same map from entry 0 (indices 0 and 2) loads
  bytes[bytes.size() - 2] = 0, bytes[bytes.size() - 1] = 2;
  const Image image = kmseg::loadImage(writeBytes(dir / "map0.tga", bytes));
  EXPECT_EQ(pixel(image, 0, 0), (Rgb{2, 1, 0}));  // entries are BGR
  EXPECT_EQ(pixel(image, 1, 0), (Rgb{82, 81, 80}));
}

TEST(ImageIo, LoadsBmpTgaPnmAndGifWithKnownPixels) {
  const fs::path dir = freshTempDir("image-io-formats");
  // 131 pixels a row: BMP rows of 393 bytes need padding, RLE TGA rows two raw packets.
  const int w = 131, h = 7;
  expectPattern(kmseg::loadImage(writeBytes(dir / "a.bmp", bmpBytes(w, h))), w, h);
  expectPattern(kmseg::loadImage(writeBytes(dir / "a.tga", tgaBytes(w, h, false))), w, h);
  expectPattern(kmseg::loadImage(writeBytes(dir / "rle.tga", tgaBytes(w, h, true))), w, h, false,
                1);
  expectPattern(kmseg::loadImage(writeBytes(dir / "a.ppm", pnmBytes(w, h, 3, 255))), w, h);
  expectPattern(kmseg::loadImage(writeBytes(dir / "a.pgm", pnmBytes(w, h, 1, 255))), w, h, true);
  expectPattern(kmseg::loadImage(writeBytes(dir / "a.gif", gifBytes(w, h))), w, h, true);
  expectPattern(kmseg::loadImage(writeBytes(dir / "a.psd", psdBytes(w, h, false))), w, h);
  expectPattern(kmseg::loadImage(writeBytes(dir / "rle.psd", psdBytes(w, h, true))), w, h);
  // With an alpha channel (and a fifth one), raw and run-length: the colours as stored, without
  // the alpha, as in every format. (stb_image alone "un-mattes" them from white by the alpha,
  // and casts what falls below 0 to a byte.)
  for (const int channels : {4, 5}) {
    expectPattern(kmseg::loadImage(writeBytes(dir / "alpha.psd", psdBytes(w, h, false, channels))),
                  w, h);
    expectPattern(
        kmseg::loadImage(writeBytes(dir / "alpha-rle.psd", psdBytes(w, h, true, channels))), w, h);
  }
  for (const int width : {w, 5}) {  // run-length and flat scanlines
    const Image hdr = kmseg::loadImage(writeBytes(dir / "a.hdr", hdrBytes(width, h)));
    EXPECT_EQ(hdr.width, width);
    EXPECT_EQ(hdr.height, h);
  }

  // 16-bit PNM, grey and RGB: every sample, whose two bytes differ (a grey PGM's samples were
  // once read from a buffer of half their size).
  for (const int channels : {1, 3}) {
    const Image pnm16 = kmseg::loadImage(writeBytes(dir / (channels == 1 ? "a16.pgm" : "a16.ppm"),
                                                    pnmBytes(w, h, channels, 65535, 0x5a)));
    ASSERT_EQ(pnm16.bitDepth, 16);
    ASSERT_EQ(pnm16.width, w);
    ASSERT_EQ(pnm16.height, h);
    ASSERT_EQ(pnm16.rgb16.size(), std::size_t(w) * h * 3);
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        for (int c = 0; c < 3; ++c)
          ASSERT_EQ(pnm16.sample(std::size_t(y) * w + x, c),
                    double(patternSample(x, y, channels == 1 ? 0 : c) * 256 + 0x5a))
              << channels << " channels, " << x << "," << y << "," << c;
  }

  // Bytes after the image data are allowed, as for JPEG.
  std::vector<char> bytes = pnmBytes(w, h, 3, 255);
  bytes.insert(bytes.end(), {'t', 'r', 'a', 'i', 'l', 'e', 'r'});
  expectPattern(kmseg::loadImage(writeBytes(dir / "trailing.ppm", bytes)), w, h);
}

TEST(ImageIo, LoadsTopDownBmp) {
  // A negative height in the header: rows stored top to bottom.
  const fs::path path =
      writeBytes(freshTempDir("image-io-top-down") / "top-down.bmp", bmpBytes(5, 3, true));
  EXPECT_EQ(kmseg::probeImage(path).height, 3);
  expectPattern(kmseg::loadImage(path), 5, 3);
}

// Writes the first `keep` bytes of `bytes` to `path` and returns the message of the IoError
// that loading it gives, after checking that it names the file and says "is truncated".
std::string truncationMessage(const fs::path& path, std::vector<char> bytes, std::size_t keep) {
  EXPECT_LT(keep, bytes.size());
  bytes.resize(keep);
  const std::string message = messageOf<IoError>(writeBytes(path, bytes));
  EXPECT_NE(message.find("image file '" + path.string() + "' is truncated"), std::string::npos)
      << keep << ": " << message;
  EXPECT_NE(message.find("the file has " + std::to_string(keep) + " bytes"), std::string::npos)
      << keep << ": " << message;
  return message;
}

TEST(ImageIoError, TruncatedBmp) {
  const fs::path dir = freshTempDir("image-io-truncated-bmp");
  const std::vector<char> bytes = bmpBytes(60, 40);  // rows of 180 bytes, no padding
  ASSERT_EQ(bytes.size(), 54u + 180u * 40u);
  for (std::size_t keep : {bytes.size() / 2, bytes.size() - 1, std::size_t(60)}) {
    const std::string message = truncationMessage(dir / "cut.bmp", bytes, keep);
    EXPECT_NE(message.find("60 x 40 pixels"), std::string::npos) << message;
    EXPECT_NE(message.find("7254 bytes"), std::string::npos) << message;
  }
}

TEST(ImageIoError, TruncatedTga) {
  const fs::path dir = freshTempDir("image-io-truncated-tga");
  const std::vector<char> bytes = tgaBytes(60, 40, false);
  ASSERT_EQ(bytes.size(), 18u + 60u * 40u * 3u);
  for (std::size_t keep : {bytes.size() / 2, bytes.size() - 1, std::size_t(18)}) {
    const std::string message = truncationMessage(dir / "cut.tga", bytes, keep);
    EXPECT_NE(message.find("60 x 40 pixels"), std::string::npos) << message;
    EXPECT_NE(message.find("7218 bytes"), std::string::npos) << message;
  }
}

TEST(ImageIoError, TruncatedRunLengthTga) {
  const fs::path dir = freshTempDir("image-io-truncated-tga-rle");
  const std::vector<char> bytes = tgaBytes(60, 40, true);
  for (std::size_t keep : {bytes.size() / 2, bytes.size() - 1, std::size_t(19)}) {
    const std::string message = truncationMessage(dir / "cut.tga", bytes, keep);
    EXPECT_NE(message.find("run-length data"), std::string::npos) << message;
    EXPECT_NE(message.find("of 60 x 40 pixels"), std::string::npos) << message;
  }
}

TEST(ImageIoError, TruncatedPnm) {
  const fs::path dir = freshTempDir("image-io-truncated-pnm");
  for (const auto& [name, channels, maxval] :
       {std::tuple{"cut.ppm", 3, 255}, {"cut.pgm", 1, 255}, {"cut16.pgm", 1, 65535}}) {
    const std::vector<char> bytes = pnmBytes(60, 40, channels, maxval);
    const std::string expected = std::to_string(bytes.size()) + " bytes";
    for (std::size_t keep : {bytes.size() / 2, bytes.size() - 1, std::size_t(8)}) {
      const std::string message = truncationMessage(dir / name, bytes, keep);
      if (keep < 30) continue;  // cut inside the header
      EXPECT_NE(message.find("60 x 40 pixels"), std::string::npos) << message;
      EXPECT_NE(message.find(expected), std::string::npos) << message;
    }
  }
}

TEST(ImageIoError, PnmHeaderDeclaringMoreThanTheFileHoldsIsRefusedBeforeDecoding) {
  // 100 bytes that declare 10000 x 10000 RGB pixels: under the pixel limit, but decoding would
  // allocate 300 MB and segmenting them many GB.
  std::string text = "P6 10000 10000 255\n";
  text.resize(100, '\x7F');
  const fs::path path =
      writeBytes(freshTempDir("image-io-pnm-header") / "big.ppm", {text.begin(), text.end()});
  EXPECT_EQ(kmseg::probeImage(path).width, 10000);
  const std::string message = messageOf<IoError>(path);
  EXPECT_NE(message.find("image file '" + path.string() + "' is truncated"), std::string::npos)
      << message;
  EXPECT_NE(message.find("10000 x 10000 pixels"), std::string::npos) << message;
  EXPECT_NE(message.find("300000019 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("the file has 100 bytes"), std::string::npos) << message;
}

// A maximum value of 0 (PNM allows 1 to 65535) is named as corrupt, in PPM and PGM.
TEST(ImageIoError, PnmMaximumValueZeroIsNamed) {
  const fs::path dir = freshTempDir("image-io-pnm-max0");
  for (const int channels : {3, 1}) {
    const fs::path path =
        writeBytes(dir / (channels == 3 ? "z.ppm" : "z.pgm"), pnmBytes(4, 3, channels, 0));
    const std::string message = messageOf<IoError>(path);
    EXPECT_NE(message.find(std::string("its ") + (channels == 3 ? "PPM" : "PGM") +
                           " header's maximum value is 0, where PNM allows 1 to 65535"),
              std::string::npos)
        << message;
  }
}

TEST(ImageIoError, TruncatedGif) {
  const fs::path dir = freshTempDir("image-io-truncated-gif");
  const std::vector<char> bytes = gifBytes(60, 40);
  // Half the file; the image data without its end block; the header and palette only.
  for (std::size_t keep : {bytes.size() / 2, bytes.size() - 2, std::size_t(13 + 768)}) {
    const std::string message = truncationMessage(dir / "cut.gif", bytes, keep);
    EXPECT_NE(message.find("GIF data ends"), std::string::npos) << message;
  }
  // Without the trailer the first image is complete, which is all the decoder reads.
  std::vector<char> noTrailer = bytes;
  noTrailer.pop_back();
  expectPattern(kmseg::loadImage(writeBytes(dir / "no-trailer.gif", noTrailer)), 60, 40, true);
}

// Complete blocks whose LZW data ends (at its end code) before the image's last pixel: the
// decoder would leave the rest black without an error.
TEST(ImageIoError, GifDataShortOfItsPixels) {
  const fs::path dir = freshTempDir("image-io-short-gif");
  std::vector<char> bytes = gifBytes(60, 40);  // its data gives 2400 pixels
  const std::size_t descriptor = 13 + 768 + 1;
  for (const std::size_t at : {std::size_t(8), descriptor + 6}) bytes[at] = char(43);  // heights
  const fs::path path = writeBytes(dir / "short.gif", bytes);
  const std::string message = messageOf<IoError>(path);
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("its first image's compressed data ends after 2400 of its 60 x 43 = "
                         "2580 pixels (the file is corrupt)"),
            std::string::npos)
      << message;
  // The same data for the 60 x 40 it holds decodes.
  expectPattern(kmseg::loadImage(writeBytes(dir / "full.gif", gifBytes(60, 40))), 60, 40, true);
}

TEST(ImageIoError, TruncatedPsd) {
  const fs::path dir = freshTempDir("image-io-truncated-psd");
  const std::vector<char> raw = psdBytes(60, 40, false);
  ASSERT_EQ(raw.size(), 40u + 3u * 60u * 40u);
  for (std::size_t keep : {raw.size() / 2, raw.size() - 1, std::size_t(40)}) {
    const std::string message = truncationMessage(dir / "cut.psd", raw, keep);
    EXPECT_NE(message.find("60 x 40 pixels in 3 raw channels"), std::string::npos) << message;
    EXPECT_NE(message.find("7240 bytes"), std::string::npos) << message;
  }
  const std::vector<char> rle = psdBytes(60, 40, true);
  for (std::size_t keep : {rle.size() / 2, rle.size() - 1}) {
    const std::string message = truncationMessage(dir / "cut-rle.psd", rle, keep);
    EXPECT_NE(message.find("run-length data ends in channel"), std::string::npos) << message;
  }
  EXPECT_NE(truncationMessage(dir / "header.psd", raw, 30).find("sections end"), std::string::npos);
}

// A cut run-length HDR made the decoder loop forever (it reads zeros past the end, and a
// zero-length packet does not advance); now it is refused first.
TEST(ImageIoError, TruncatedHdr) {
  const fs::path dir = freshTempDir("image-io-truncated-hdr");
  const std::vector<char> rle = hdrBytes(60, 40);
  for (std::size_t keep : {rle.size() / 2, rle.size() - 1, std::size_t(50)}) {
    const std::string message = truncationMessage(dir / "cut.hdr", rle, keep);
    EXPECT_NE(message.find("HDR run-length data ends in scanline"), std::string::npos) << message;
    EXPECT_NE(message.find(" of 40"), std::string::npos) << message;
  }
  const std::vector<char> flat = hdrBytes(5, 40);
  const std::string message = truncationMessage(dir / "flat.hdr", flat, flat.size() - 1);
  EXPECT_NE(message.find("5 x 40 pixels of 4 bytes"), std::string::npos) << message;
}

TEST(ImageIoError, HugePngGetsThePixelLimitMessage) {
  // stb_image's PNG reader refuses these headers (over 2^30 bytes of samples); its info call
  // then reports the last reader's "unknown image type".
  const fs::path dir = freshTempDir("image-io-huge-png");
  const fs::path rgb = pngHeaderOnly(dir / "big20k.png", 20000, 20000, 2);
  const ImageInfo info = kmseg::probeImage(rgb);
  EXPECT_EQ(info.width, 20000);
  EXPECT_EQ(info.height, 20000);
  EXPECT_EQ(info.channels, 3);
  EXPECT_EQ(info.format, "png");
  std::string message = messageOf<InvalidArgument>(rgb);
  EXPECT_NE(message.find("image file '" + rgb.string() + "' is 20000 x 20000 = 400000000 pixels"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("limit of 200000000 pixels"), std::string::npos) << message;

  const fs::path grey = pngHeaderOnly(dir / "big100k.png", 100000, 100000);
  message = messageOf<InvalidArgument>(grey);
  EXPECT_NE(message.find("100000 x 100000 = 10000000000 pixels"), std::string::npos) << message;
  EXPECT_NE(message.find("limit of 200000000 pixels"), std::string::npos) << message;
}

TEST(ImageIoError, PngOverTheDecodersLimitsNamesThem) {
  const fs::path dir = freshTempDir("image-io-png-decoder-limit");
  // 2^24 + 1 pixels a side is over stb_image's limit, though the image has few pixels.
  const fs::path wide = pngHeaderOnly(dir / "wide.png", 16777217, 1);
  EXPECT_EQ(kmseg::probeImage(wide).width, 16777217);
  std::string message = messageOf<InvalidArgument>(wide);
  EXPECT_NE(message.find("image file '" + wide.string() + "' is 16777217 x 1 pixels"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("16777216 pixels a side"), std::string::npos) << message;

  // 17000 x 17000 RGBA: under the pixel limit it is given and under 2^31 bytes of RGB, but more
  // than the 2^30 bytes of stored samples stb_image takes.
  const fs::path rgba = pngHeaderOnly(dir / "rgba.png", 17000, 17000, 6);
  EXPECT_EQ(kmseg::probeImage(rgba).channels, 4);
  LoadOptions options;
  options.maxPixels = 300'000'000;
  message = messageOf<InvalidArgument>(rgba, options);
  EXPECT_NE(message.find("17000 x 17000 pixels"), std::string::npos) << message;
  EXPECT_NE(message.find("1073741824 bytes"), std::string::npos) << message;
}

TEST(ImageIoError, CorruptPngData) {
  std::vector<char> bytes = readBytes(sourcePath("tests/data/grey8.png"));
  const std::string idat = "IDAT";
  const auto at = std::search(bytes.begin(), bytes.end(), idat.begin(), idat.end());
  ASSERT_NE(at, bytes.end());
  at[4] = '\x78';  // a zlib header whose check bits are wrong
  at[5] = '\x00';
  const fs::path path = writeBytes(freshTempDir("image-io-corrupt") / "corrupt.png", bytes);
  const std::string message = messageOf<IoError>(path);
  EXPECT_NE(message.find("cannot decode image file '" + path.string() + "'"), std::string::npos)
      << message;
  EXPECT_NE(message.find("zlib"), std::string::npos) << message;
}

// PNM samples run from 0 to the header's maximum value; kmseg stretches them to the full 8 or 16
// bits (rounded to nearest), as a viewer shows them. Samples over the maximum count as it.
TEST(ImageIo, PnmSamplesAreStretchedFromTheirMaximumValue) {
  const fs::path dir = freshTempDir("image-io-pnm-maxval");
  // A 4-bit PGM (maximum 15) of the 17 values 0..16, one row.
  std::string pgm = "P5\n17 1\n15\n";
  for (int v = 0; v <= 16; ++v) pgm.push_back(char(v));
  const Image grey = kmseg::loadImage(writeBytes(dir / "a.pgm", {pgm.begin(), pgm.end()}));
  ASSERT_EQ(grey.bitDepth, 8);
  for (int v = 0; v <= 16; ++v)
    for (int c = 0; c < 3; ++c)
      EXPECT_EQ(grey.sample(std::size_t(v), c), std::min(v, 15) * 17) << v;
  // A 10-bit PPM (maximum 1023): 0, 1, 512, 1023 and 1100 in each channel, big-endian.
  std::string ppm = "P6\n5 1\n1023\n";
  const int values[] = {0, 1, 512, 1023, 1100};
  for (const int v : values)
    for (int c = 0; c < 3; ++c) ppm += {char(v >> 8), char(v & 0xFF)};
  const Image rgb = kmseg::loadImage(writeBytes(dir / "a.ppm", {ppm.begin(), ppm.end()}));
  ASSERT_EQ(rgb.bitDepth, 16);
  const double want[] = {0, 64, 32800, 65535, 65535};  // round(v 65535 / 1023)
  for (int i = 0; i < 5; ++i)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(rgb.sample(std::size_t(i), c), want[i]) << i;
}

// A Huffman table whose 16 code counts total more than 256: stb_image (Debian 12's) would write
// past its tables, in the header reader (probe) and in the decoder. Both refuse it first.
TEST(ImageIoError, JpegHuffmanTableWithTooManyCodes) {
  const fs::path dir = freshTempDir("image-io-jpeg-dht");
  std::vector<char> bytes = readBytes(sourcePath("samples/grace_hopper.jpg"));
  const std::string dht = "\xFF\xC4";
  const auto at = std::search(bytes.begin(), bytes.end(), dht.begin(), dht.end());
  ASSERT_NE(at, bytes.end());
  const std::size_t offset = std::size_t(at - bytes.begin());
  // The segment's first table: its class / id byte, then the counts (byte 5 on).
  for (int i = 5; i < 21; ++i) at[i] = '\x20';  // 16 x 32 = 512 codes
  const fs::path path = writeBytes(dir / "dht.jpg", bytes);
  for (const bool probe : {true, false}) {
    std::string message;
    try {
      if (probe)
        kmseg::probeImage(path);
      else
        kmseg::loadImage(path);
    } catch (const IoError& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("cannot decode image file '" + path.string() + "': corrupt JPEG"),
              std::string::npos)
        << message;
    EXPECT_NE(
        message.find("DHT segment at byte " + std::to_string(offset) + ") declares 512 codes"),
        std::string::npos)
        << message;
  }

  // The decoder reads a DHT segment's tables while any of its declared bytes remain: here the
  // segment declares one byte more than its one table, so the decoder reads a second table from
  // the bytes after it, whose counts total 16 x 255.
  std::vector<char> tail = {'\xFF', '\xD8', '\xFF', '\xC4', 0, 2 + 17 + 1 + 1, 0};
  for (int i = 0; i < 16; ++i) tail.push_back(i == 0 ? 1 : 0);  // one code of length 1
  tail.push_back(0);                                            // its value
  tail.push_back(0x01);  // the segment's last byte: a second table, class 0, id 1
  for (int i = 0; i < 16; ++i) tail.push_back('\xFF');
  tail.insert(tail.end(), {'\xFF', '\xD9'});
  const fs::path straddle = writeBytes(dir / "straddle.jpg", tail);
  const std::string message = messageOf<IoError>(straddle);
  EXPECT_NE(message.find("corrupt JPEG: a Huffman table (DHT segment at byte 2) declares 4080"),
            std::string::npos)
      << message;

  // Every sample JPEG still loads: their tables are well formed.
  for (const char* sample :
       {"samples/grace_hopper.jpg", "samples/citrus-fruits.jpg", "samples/european-honey-bee.jpg",
        "samples/Picture_1A_by_freespace.jpg"})
    EXPECT_NO_THROW(kmseg::probeImage(sourcePath(sample))) << sample;
}

// stb_image reads a PNM header's numbers into an int without a bound (signed overflow past
// 2^31); a width, height or maximum value beyond the decoder's limits is refused first.
TEST(ImageIoError, PnmHeaderNumbersBeyondTheDecodersLimits) {
  const fs::path dir = freshTempDir("image-io-pnm-numbers");
  struct Case {
    std::string header, want;
  };
  for (const Case& c : {Case{"P6\n24 99999999999999\n255\n", "PPM header's height is over 2^30"},
                        Case{"P5\n16777217 2\n255\n", "PGM header's width is 16777217"},
                        Case{"P6\n4 4\n70000\n", "PPM header's maximum value is 70000"}}) {
    std::string text = c.header;
    text.resize(text.size() + 4 * 4 * 3 * 2, '\x10');
    const fs::path path = writeBytes(dir / "big.pnm", {text.begin(), text.end()});
    const std::string message = messageOf<IoError>(path);
    EXPECT_NE(message.find("cannot decode image file '" + path.string() + "': its " + c.want),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("more than the decoder's limit of"), std::string::npos) << message;
    EXPECT_THROW(kmseg::probeImage(path), IoError);
  }
}

// Mutated files of every format: each decodes to an image of the size its header gives, or is
// refused with kmseg's error; none crashes. Small images of each format (a palette PNG too), 20 000
// mutations from a fixed seed: bits flipped, bytes set, runs inserted or removed, the file cut.
// Under the sanitizer build (README), with stb_image compiled in, this also checks every read and
// write the decoders make.
TEST(ImageIoFuzz, MutatedFilesDecodeOrAreRefused) {
  const int w = 13, h = 5;
  std::vector<std::vector<char>> seeds = {
      bmpBytes(w, h),         tgaBytes(w, h, false),       tgaBytes(w, h, true),
      pnmBytes(w, h, 3, 255), pnmBytes(w, h, 1, 65535, 7), pnmBytes(w, h, 3, 65535, 7),
      gifBytes(w, h),         psdBytes(w, h, false),       psdBytes(w, h, true),
      hdrBytes(w, h)};
  for (const char* file : {"tests/data/grey8.png", "tests/data/grey16.png", "tests/data/rgb16.png",
                           "tests/data/rgba8.png", "tests/data/orientation_6.jpg"})
    seeds.push_back(readBytes(sourcePath(file)));
  seeds.push_back(palettePng(freshTempDir("image-io-fuzz-palette")).first);
  const fs::path path = freshTempDir("image-io-fuzz") / "mutated";
  std::mt19937_64 rng(20261202);
  LoadOptions options;
  options.maxPixels = 1 << 20;
  int decoded = 0, refused = 0;
  for (int it = 0; it < 20000; ++it) {
    std::vector<char> d = seeds[rng() % seeds.size()];
    const int mutations = 1 + int(rng() % 8);
    for (int m = 0; m < mutations && !d.empty(); ++m) {
      const std::size_t p = rng() % d.size();
      switch (rng() % 5) {
        case 0:
          d[p] = char(d[p] ^ (1 << (rng() % 8)));
          break;
        case 1:
          d[p] = std::array<char, 4>{0, '\xFF', '\x7F', '\x80'}[rng() % 4];
          break;
        case 2:
          d.resize(p);
          break;
        case 3:
          d.insert(d.begin() + std::ptrdiff_t(p), 1 + rng() % 16, char(rng()));
          break;
        default:
          d.erase(d.begin() + std::ptrdiff_t(p),
                  d.begin() + std::ptrdiff_t(std::min(d.size(), p + 1 + rng() % 16)));
      }
    }
    writeBytes(path, d);
    try {
      const Image image = kmseg::loadImage(path, options);
      const std::size_t samples = std::size_t(image.width) * std::size_t(image.height) * 3;
      ASSERT_EQ(image.bitDepth == 16 ? image.rgb16.size() : image.rgb8.size(), samples) << it;
      ++decoded;
    } catch (const kmseg::Error&) {
      ++refused;
    }
  }
  // Both outcomes occur (the mutations leave many files whole enough to decode).
  EXPECT_GT(decoded, 1000);
  EXPECT_GT(refused, 1000);
}

TEST(ImageIoError, UnreadableFile) {
  const fs::path dir = freshTempDir("image-io-unreadable");
  const fs::path path = dir / "coffee.png";
  fs::copy_file(sourcePath("samples/coffee.png"), path);
  fs::permissions(path, fs::perms::none);
  if (std::ifstream(path).good()) GTEST_SKIP() << "running with rights that ignore permissions";
  const std::string message = messageOf<IoError>(path);
  EXPECT_NE(message.find("cannot open image file '" + path.string() + "'"), std::string::npos)
      << message;
  EXPECT_NE(message.find("Permission denied"), std::string::npos) << message;
}

}  // namespace
