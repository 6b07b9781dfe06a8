// SPDX-License-Identifier: MIT
#include "kmseg/image_io.h"

#include <libexif/exif-data.h>
#include <stb_image.h>

#include <cassert>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <opencv2/core.hpp>

#include "kmseg/error.h"

namespace kmseg {

namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<unsigned char>;

// stb_image takes the input length and returns the decoded size as int.
constexpr std::uint64_t kDecoderByteLimit = INT_MAX;

std::string quoted(const fs::path& path) {
  return "'" + path.string() + "'";
}

std::string stbReason() {
  const char* reason = stbi_failure_reason();
  // stb reports an unknown PNG chunk of type 0 (a cut-off chunk header) with an empty string.
  return reason && *reason ? reason : "corrupt data";
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// Reads the whole file, so that every failure is ours to report (and not a decoder's guess).
Bytes readFile(const fs::path& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (status.type() == fs::file_type::not_found)
    throw IoError("image file " + quoted(path) + " does not exist");
  if (ec) throw IoError("cannot access image file " + quoted(path) + ": " + ec.message());
  if (fs::is_directory(status)) throw IoError(quoted(path) + " is a directory, not an image file");
  if (!fs::is_regular_file(status))
    throw IoError(quoted(path) + " is not a regular file, so it cannot be read as an image");

  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) throw IoError("cannot open image file " + quoted(path) + ": " + std::strerror(errno));
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec) throw IoError("cannot read the size of image file " + quoted(path) + ": " + ec.message());
  if (size == 0) throw IoError("image file " + quoted(path) + " is empty");
  if (size > kDecoderByteLimit)
    throw IoError("image file " + quoted(path) + " is " + std::to_string(size) +
                  " bytes, more than the decoder's limit of " + std::to_string(kDecoderByteLimit) +
                  " bytes");

  Bytes bytes(size);
  if (std::fread(bytes.data(), 1, bytes.size(), file.get()) != bytes.size())
    throw IoError("cannot read image file " + quoted(path) + ": " +
                  (std::ferror(file.get()) ? std::strerror(errno) : "the file shrank while read"));
  return bytes;
}

bool startsWith(const Bytes& d, std::string_view magic) {
  return d.size() >= magic.size() && std::memcmp(d.data(), magic.data(), magic.size()) == 0;
}

// Names the format from its signature, in the order stb_image tries them; TGA has no signature
// and is stb's last guess.
std::string formatName(const Bytes& d) {
  if (startsWith(d, "\xFF\xD8")) return "jpeg";
  if (startsWith(d, "\x89PNG\r\n\x1A\n")) return "png";
  if (startsWith(d, "GIF8")) return "gif";
  if (startsWith(d, "BM")) return "bmp";
  if (startsWith(d, "8BPS")) return "psd";
  if (startsWith(d, "\x53\x80\xF6\x34")) return "pic";
  if (startsWith(d, "P5") || startsWith(d, "P6")) return "pnm";
  if (startsWith(d, "#?RADIANCE") || startsWith(d, "#?RGBE")) return "hdr";
  return "tga";
}

enum class Structure { Complete, Truncated, Unknown };

// Walks a JPEG's marker segments and entropy-coded data up to the end-of-image marker. Only
// "the data ended before EOI" is a verdict; anything malformed is left to the decoder.
Structure jpegStructure(const Bytes& d) {
  const std::size_t n = d.size();
  if (n < 2 || d[0] != 0xFF || d[1] != 0xD8) return Structure::Unknown;
  std::size_t pos = 2;
  for (;;) {
    if (pos >= n) return Structure::Truncated;
    if (d[pos] != 0xFF) return Structure::Unknown;
    while (pos < n && d[pos] == 0xFF) ++pos;  // fill bytes
    if (pos >= n) return Structure::Truncated;
    const unsigned marker = d[pos++];
    if (marker == 0xD9) return Structure::Complete;
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) continue;  // no length field
    if (marker == 0x00) return Structure::Unknown;
    if (pos + 2 > n) return Structure::Truncated;
    const std::size_t length = std::size_t(d[pos]) << 8 | d[pos + 1];
    if (length < 2) return Structure::Unknown;
    if (pos + length > n) return Structure::Truncated;
    pos += length;
    if (marker != 0xDA) continue;
    // Entropy-coded data after start-of-scan: 0xFF is stuffed as FF 00, restart markers
    // (FF D0..D7) belong to the scan; any other FF xx is the next marker.
    for (;;) {
      const void* ff = std::memchr(d.data() + pos, 0xFF, n - pos);
      if (!ff) return Structure::Truncated;
      pos = static_cast<const unsigned char*>(ff) - d.data();
      if (pos + 1 >= n) return Structure::Truncated;
      const unsigned next = d[pos + 1];
      if (next == 0x00 || (next >= 0xD0 && next <= 0xD7)) {
        pos += 2;
      } else if (next == 0xFF) {
        pos += 1;
      } else {
        break;
      }
    }
  }
}

// Walks a PNG's chunks up to a complete IEND chunk (length, type, data and CRC present).
Structure pngStructure(const Bytes& d) {
  const std::uint64_t n = d.size();
  if (!startsWith(d, "\x89PNG\r\n\x1A\n")) return Structure::Unknown;
  std::uint64_t pos = 8;
  for (;;) {
    if (pos + 8 > n) return Structure::Truncated;
    const std::uint64_t length = std::uint64_t(d[pos]) << 24 | std::uint64_t(d[pos + 1]) << 16 |
                                 std::uint64_t(d[pos + 2]) << 8 | d[pos + 3];
    if (length > 0x7FFFFFFF) return Structure::Unknown;  // the PNG limit on a chunk
    if (pos + 12 + length > n) return Structure::Truncated;
    if (std::memcmp(d.data() + pos + 4, "IEND", 4) == 0) return Structure::Complete;
    pos += 12 + length;
  }
}

int exifOrientation(const Bytes& d) {
  std::unique_ptr<ExifData, decltype(&exif_data_unref)> exif(exif_data_new(), &exif_data_unref);
  if (!exif) return 1;
  // Read what the file holds; do not let libexif add or "fix" entries.
  exif_data_unset_option(exif.get(), EXIF_DATA_OPTION_FOLLOW_SPECIFICATION);
  exif_data_load_data(exif.get(), d.data(), static_cast<unsigned int>(d.size()));
  ExifEntry* entry = exif_content_get_entry(exif->ifd[EXIF_IFD_0], EXIF_TAG_ORIENTATION);
  if (!entry || entry->format != EXIF_FORMAT_SHORT || entry->components < 1 || !entry->data ||
      entry->size < 2)
    return 1;
  const int value = exif_get_short(entry->data, exif_data_get_byte_order(exif.get()));
  return value >= 1 && value <= 8 ? value : 1;
}

ImageInfo readInfo(const Bytes& d, const fs::path& path) {
  const int length = static_cast<int>(d.size());
  ImageInfo info;
  if (!stbi_info_from_memory(d.data(), length, &info.width, &info.height, &info.channels)) {
    const std::string reason = stbReason();
    // stb refuses headers whose decoded size would not fit its int arithmetic.
    if (reason == "too large")
      throw InvalidArgument("image file " + quoted(path) +
                            " is too large for the decoder (stb_image: too large)");
    throw IoError("cannot decode image file " + quoted(path) +
                  ": not an image in a supported format (stb_image: " + reason +
                  "); supported are JPEG, PNG, BMP, GIF, TGA, PSD, HDR, PIC and PNM");
  }
  info.bitDepth = stbi_is_16_bit_from_memory(d.data(), length) ? 16 : 8;
  info.format = formatName(d);
  if (info.format == "jpeg") info.orientation = exifOrientation(d);
  return info;
}

struct StbFree {
  void operator()(void* p) const { stbi_image_free(p); }
};

template <typename T>
std::vector<T> decode(const Bytes& d, const ImageInfo& info, const fs::path& path) {
  const int length = static_cast<int>(d.size());
  int w = 0, h = 0, channels = 0;
  std::unique_ptr<T, StbFree> pixels;
  // The flip flag is process-wide in stb_image; pin it for this thread so that another user of
  // the library in the same process cannot turn our images upside down.
  stbi_set_flip_vertically_on_load_thread(0);
  if constexpr (sizeof(T) == 2)
    pixels.reset(stbi_load_16_from_memory(d.data(), length, &w, &h, &channels, 3));
  else
    pixels.reset(stbi_load_from_memory(d.data(), length, &w, &h, &channels, 3));
  if (!pixels)
    throw IoError("cannot decode image file " + quoted(path) + ": " + stbReason() +
                  " (the file is corrupt or truncated)");
  if (w != info.width || h != info.height)
    throw IoError("image file " + quoted(path) + " decoded to " + std::to_string(w) + " x " +
                  std::to_string(h) + " pixels, but its header says " + std::to_string(info.width) +
                  " x " + std::to_string(info.height));
  const std::size_t count = std::size_t(w) * std::size_t(h) * 3;
  return std::vector<T>(pixels.get(), pixels.get() + count);
}

}  // namespace

ImageInfo probeImage(const fs::path& path) {
  return readInfo(readFile(path), path);
}

Image loadImage(const fs::path& path, const LoadOptions& options) {
  const Bytes bytes = readFile(path);
  const ImageInfo info = readInfo(bytes, path);

  const std::uint64_t pixels = std::uint64_t(info.width) * std::uint64_t(info.height);
  const std::string size = std::to_string(info.width) + " x " + std::to_string(info.height);
  if (pixels > options.maxPixels)
    throw InvalidArgument("image file " + quoted(path) + " is " + size + " = " +
                          std::to_string(pixels) + " pixels, more than the limit of " +
                          std::to_string(options.maxPixels) + " pixels");
  const std::uint64_t decodedBytes = pixels * 3 * (info.bitDepth == 16 ? 2 : 1);
  if (decodedBytes > kDecoderByteLimit)
    throw InvalidArgument("image file " + quoted(path) + " is " + size + " pixels at " +
                          std::to_string(info.bitDepth) + " bits, " + std::to_string(decodedBytes) +
                          " bytes of RGB samples, more than the decoder's limit of " +
                          std::to_string(kDecoderByteLimit) + " bytes");

  // stb_image already refuses the truncations tried so far (a JPEG without EOI fails with
  // "expected marker"), except a PNG cut inside its final IEND chunk; checking the structure
  // here gives every case the same clear message and does not depend on the stb version.
  const Structure structure = info.format == "jpeg"  ? jpegStructure(bytes)
                              : info.format == "png" ? pngStructure(bytes)
                                                     : Structure::Unknown;
  if (structure == Structure::Truncated)
    throw IoError("image file " + quoted(path) + " is truncated: the " +
                  (info.format == "jpeg"
                       ? std::string("JPEG data ends before its end-of-image marker")
                       : std::string("PNG data ends before its IEND chunk")));

  Image image;
  image.width = info.width;
  image.height = info.height;
  image.bitDepth = info.bitDepth;
  if (info.bitDepth == 16)
    image.rgb16 = decode<std::uint16_t>(bytes, info, path);
  else
    image.rgb8 = decode<std::uint8_t>(bytes, info, path);
  if (options.applyExifOrientation) applyOrientation(image, info.orientation);
  return image;
}

void applyOrientation(Image& image, int orientation) {
  if (orientation < 1 || orientation > 8)
    throw InvalidArgument("EXIF orientation " + std::to_string(orientation) +
                          " is not one of 1..8");
  const bool is16 = image.bitDepth == 16;
  const std::size_t samples = image.pixelCount() * 3;
  if (image.width < 0 || image.height < 0 ||
      (is16 ? image.rgb16.size() : image.rgb8.size()) != samples)
    throw InvalidArgument("cannot orient a " + std::to_string(image.width) + " x " +
                          std::to_string(image.height) + " image whose pixel buffer holds " +
                          std::to_string(is16 ? image.rgb16.size() : image.rgb8.size()) +
                          " samples instead of " + std::to_string(samples));
  if (orientation == 1 || samples == 0) return;

  const int type = is16 ? CV_16UC3 : CV_8UC3;
  void* srcData = is16 ? static_cast<void*>(image.rgb16.data()) : image.rgb8.data();
  const cv::Mat src(image.height, image.width, type, srcData);
  const bool swap = orientation >= 5;
  const int outWidth = swap ? image.height : image.width;
  const int outHeight = swap ? image.width : image.height;
  std::vector<std::uint8_t> out8;
  std::vector<std::uint16_t> out16;
  if (is16)
    out16.resize(samples);
  else
    out8.resize(samples);
  void* dstData = is16 ? static_cast<void*>(out16.data()) : out8.data();
  cv::Mat dst(outHeight, outWidth, type, dstData);
  cv::Mat tmp;
  switch (orientation) {
    case 2:
      cv::flip(src, dst, 1);
      break;
    case 3:
      cv::rotate(src, dst, cv::ROTATE_180);
      break;
    case 4:
      cv::flip(src, dst, 0);
      break;
    case 5:
      cv::transpose(src, dst);
      break;
    case 6:
      cv::rotate(src, dst, cv::ROTATE_90_CLOCKWISE);
      break;
    case 7:
      cv::rotate(src, tmp, cv::ROTATE_90_COUNTERCLOCKWISE);
      cv::flip(tmp, dst, 1);
      break;
    case 8:
      cv::rotate(src, dst, cv::ROTATE_90_COUNTERCLOCKWISE);
      break;
  }
  // OpenCV writes into an output of the right size and type without reallocating it.
  assert(dst.data == dstData);
  image.width = outWidth;
  image.height = outHeight;
  if (is16)
    image.rgb16 = std::move(out16);
  else
    image.rgb8 = std::move(out8);
}

}  // namespace kmseg
