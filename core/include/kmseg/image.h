// SPDX-License-Identifier: MIT
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kmseg {

/// A decoded RGB image, interleaved, row-major, top row first, orientation already applied.
/// 8-bit images fill `rgb8`, 16-bit images fill `rgb16`; the other vector stays empty.
struct Image {
  int width = 0;
  int height = 0;
  int bitDepth = 8;                  ///< 8 or 16 bits per sample
  std::vector<std::uint8_t> rgb8;    ///< width * height * 3 samples when bitDepth == 8
  std::vector<std::uint16_t> rgb16;  ///< width * height * 3 samples when bitDepth == 16

  std::size_t pixelCount() const { return std::size_t(width) * std::size_t(height); }
  /// Largest sample value: 255 or 65535.
  double maxValue() const { return bitDepth == 16 ? 65535.0 : 255.0; }
  /// Sample `c` (0 = R, 1 = G, 2 = B) of pixel `i` (row-major index).
  double sample(std::size_t i, int c) const {
    return bitDepth == 16 ? rgb16[i * 3 + c] : rgb8[i * 3 + c];
  }
};

}  // namespace kmseg
