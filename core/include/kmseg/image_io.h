// SPDX-License-Identifier: MIT
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "kmseg/image.h"

namespace kmseg {

/// Default pixel limit: 200 megapixels.
inline constexpr std::uint64_t kDefaultMaxPixels = 200'000'000;

/// What an image file's header says, read without decoding the pixels.
/// `width` and `height` are the stored size, before the EXIF orientation is applied; for
/// orientations 5..8 the upright image (what loadImage returns) has them swapped.
struct ImageInfo {
  int width = 0;
  int height = 0;
  int channels = 0;     ///< channels stored in the file (1 grey, 2 grey+alpha, 3 RGB, 4 RGBA)
  int bitDepth = 8;     ///< 8 or 16
  int orientation = 1;  ///< EXIF orientation 1..8 (1 when absent or not a JPEG)
  std::string format;   ///< "jpeg", "png", "bmp", ... as far as the decoder can tell

  /// Width of the image once `orientation` is applied.
  int uprightWidth() const { return orientation >= 5 ? height : width; }
  /// Height of the image once `orientation` is applied.
  int uprightHeight() const { return orientation >= 5 ? width : height; }
};

/// Options for loading an image.
struct LoadOptions {
  std::uint64_t maxPixels = kDefaultMaxPixels;  ///< refuse images with more pixels, from the header
  bool applyExifOrientation = true;             ///< rotate/flip JPEGs as their EXIF tag says
};

/// Reads an image's header (and, for a JPEG, its EXIF orientation). Throws IoError naming the
/// path when the file is missing, a directory, empty, or not an image the decoder understands.
/// The pixel data is not checked: a truncated file may probe fine and fail in loadImage. A PNG
/// whose size the decoder refuses probes fine too (its IHDR is read directly).
ImageInfo probeImage(const std::filesystem::path& path);

/// Decodes an image to RGB (grey is expanded, alpha dropped; 16-bit files stay 16-bit).
/// The pixel count is checked against `options.maxPixels` from the header before any pixel
/// memory is allocated. Throws IoError (unreadable, truncated, not an image) or InvalidArgument
/// (over the pixel limit, the decoder's 2^31 - 1 byte limit on the decoded pixels, or, for a
/// PNG, stb_image's limits of 2^24 pixels a side and 2^30 bytes of stored samples), each naming
/// the path and the limit. The file's size is checked against its header before decoding: a
/// JPEG without its end-of-image marker, a PNG without its complete IEND chunk, a GIF whose first
/// image's data blocks are cut, an uncompressed BMP, TGA or binary PGM/PPM shorter than its header
/// declares, or a run-length TGA whose packets do not cover every pixel counts as truncated.
/// Supported formats are those of stb_image: JPEG
/// (baseline and progressive, 8-bit), PNG, BMP, GIF (first frame), TGA, PSD, HDR, PIC, PNM.
Image loadImage(const std::filesystem::path& path, const LoadOptions& options = {});

/// Turns an image stored with EXIF orientation `orientation` (1..8) upright, in place:
/// 2 mirrors left-right, 3 rotates by 180 degrees, 4 mirrors top-bottom, 5 transposes,
/// 6 rotates 90 degrees clockwise, 7 transposes across the anti-diagonal, 8 rotates 90 degrees
/// counter-clockwise; 5..8 swap width and height. Throws InvalidArgument for any other value or
/// when the pixel buffer does not hold width * height * 3 samples.
void applyOrientation(Image& image, int orientation);

}  // namespace kmseg
