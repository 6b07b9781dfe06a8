// SPDX-License-Identifier: MIT
#include "image_convert.h"

#include <QFileInfo>
#include <QImageWriter>
#include <QSaveFile>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "kmseg/parallel.h"

namespace kmseg::gui {

namespace {

/// Memory for rendered maps, kept for the next ones. A 12-megapixel map is 48 MB, and memory
/// that fresh comes from the kernel a page at a time, zeroed: on the maps of a 12-megapixel
/// photo that took about three times as long as rendering them (perf of kmseg_gui_bench, 2-core
/// machine). The block of a map that is no longer used (its last QImage or QPixmap copy gone,
/// on any thread) is kept, up to kKept blocks, for the next map of the same byte size; a map of
/// another size frees the blocks kept.
class MapMemory {
 public:
  static constexpr std::size_t kKept = 4;

  /// A width x height image of 4-byte pixels in `format`, its memory recycled when possible and
  /// its contents undefined; null when the memory cannot be had.
  static QImage image(int width, int height, QImage::Format format) {
    const qsizetype rowBytes = qsizetype(width) * 4;
    const std::size_t bytes = std::size_t(rowBytes) * std::size_t(height);
    auto* block = new Block{bytes, instance().take(bytes)};
    if (!block->data) block->data = std::malloc(bytes);
    if (!block->data) {
      delete block;
      return {};
    }
    QImage out(static_cast<uchar*>(block->data), width, height, rowBytes, format,
               &MapMemory::release, block);
    if (out.isNull()) release(block);  // QImage refused the size: it will not call release
    return out;
  }

 private:
  struct Block {
    std::size_t bytes;
    void* data;
  };

  // Never destroyed: a map may outlive static destruction.
  static MapMemory& instance() {
    static MapMemory* const memory = new MapMemory;
    return *memory;
  }

  void* take(std::size_t bytes) {
    std::lock_guard lock(mutex_);
    for (std::size_t i = 0; i < kept_.size(); ++i) {
      if (kept_[i].bytes != bytes) continue;
      void* data = kept_[i].data;
      kept_.erase(kept_.begin() + std::ptrdiff_t(i));
      return data;
    }
    for (const Block& b : kept_) std::free(b.data);
    kept_.clear();
    return nullptr;
  }

  static void release(void* info) {
    auto* block = static_cast<Block*>(info);
    MapMemory& m = instance();
    {
      std::lock_guard lock(m.mutex_);
      if (m.kept_.size() < kKept) {
        m.kept_.push_back(*block);
        block->data = nullptr;
      }
    }
    std::free(block->data);
    delete block;
  }

  std::mutex mutex_;
  std::vector<Block> kept_;
};

/// Calls fn(y, row) for every row of the 4-byte-pixel map `out` (row: its pixels), in bands of
/// rows on every core.
template <class Fn>
void forEachRow(QImage& out, Fn&& fn) {
  uchar* bits = out.bits();  // detaches once, here, not on the workers
  const qsizetype rowBytes = out.bytesPerLine();
  const std::size_t band = std::size_t(std::max(1, (1 << 16) / std::max(out.width(), 1)));
  parallelRanges(std::size_t(out.height()), band, [&](std::size_t begin, std::size_t end) {
    for (std::size_t y = begin; y < end; ++y)
      fn(int(y), reinterpret_cast<QRgb*>(bits + qsizetype(y) * rowBytes));
  });
}

}  // namespace

QImage toQImage(const kmseg::Image& image) {
  if (image.width <= 0 || image.height <= 0) return {};
  const int w = image.width, h = image.height;
  if (image.bitDepth == 16) {
    QImage out(w, h, QImage::Format_RGBX64);
    if (out.isNull()) return out;
    for (int y = 0; y < h; ++y) {
      auto* row = reinterpret_cast<quint16*>(out.scanLine(y));
      const std::uint16_t* src = image.rgb16.data() + std::size_t(y) * w * 3;
      for (int x = 0; x < w; ++x) {
        row[4 * x + 0] = src[3 * x + 0];
        row[4 * x + 1] = src[3 * x + 1];
        row[4 * x + 2] = src[3 * x + 2];
        row[4 * x + 3] = 0xffff;
      }
    }
    return out;
  }
  QImage out(w, h, QImage::Format_RGB888);
  if (out.isNull()) return out;
  // QImage rows are 4-byte aligned; kmseg rows are packed.
  for (int y = 0; y < h; ++y)
    std::memcpy(out.scanLine(y), image.rgb8.data() + std::size_t(y) * w * 3, std::size_t(w) * 3);
  return out;
}

kmseg::Image toCoreImage(const QImage& image) {
  kmseg::Image out;
  if (image.isNull()) return out;
  out.width = image.width();
  out.height = image.height();
  const std::size_t n = out.pixelCount();
  const bool deep = image.depth() == 64;
  if (deep) {
    const QImage src = image.convertToFormat(QImage::Format_RGBX64);
    out.bitDepth = 16;
    out.rgb16.resize(n * 3);
    for (int y = 0; y < out.height; ++y) {
      const auto* row = reinterpret_cast<const quint16*>(src.constScanLine(y));
      std::uint16_t* dst = out.rgb16.data() + std::size_t(y) * out.width * 3;
      for (int x = 0; x < out.width; ++x)
        for (int c = 0; c < 3; ++c) dst[3 * x + c] = row[4 * x + c];
    }
    return out;
  }
  const QImage src = image.convertToFormat(QImage::Format_RGB888);
  out.bitDepth = 8;
  out.rgb8.resize(n * 3);
  for (int y = 0; y < out.height; ++y)
    std::memcpy(out.rgb8.data() + std::size_t(y) * out.width * 3, src.constScanLine(y),
                std::size_t(out.width) * 3);
  return out;
}

QImage renderLabels(const std::vector<std::int32_t>& labels, int width, int height,
                    const std::vector<Rgb8>& palette, const std::vector<int>& mapping) {
  if (width <= 0 || height <= 0 || labels.size() != std::size_t(width) * std::size_t(height))
    return {};
  std::vector<QRgb> lut(palette.size());
  for (std::size_t i = 0; i < palette.size(); ++i)
    lut[i] = qRgb(palette[i].r, palette[i].g, palette[i].b);
  QImage out = MapMemory::image(width, height, QImage::Format_RGB32);
  if (out.isNull()) return out;
  forEachRow(out, [&](int y, QRgb* row) {
    const std::int32_t* src = labels.data() + std::size_t(y) * width;
    for (int x = 0; x < width; ++x) {
      std::int64_t id = src[x];
      if (!mapping.empty()) id = id >= 0 && std::size_t(id) < mapping.size() ? mapping[id] : -1;
      row[x] = id >= 0 && std::size_t(id) < lut.size() ? lut[id] : qRgb(0, 0, 0);
    }
  });
  return out;
}

QImage renderBoundaries(const std::vector<std::int32_t>& labels, int width, int height,
                        QRgb colour) {
  if (width <= 0 || height <= 0 || labels.size() != std::size_t(width) * std::size_t(height))
    return {};
  QImage out = MapMemory::image(width, height, QImage::Format_ARGB32_Premultiplied);
  if (out.isNull()) return out;
  const QRgb on = qPremultiply(colour), off = 0;  // off: transparent
  forEachRow(out, [&](int y, QRgb* row) {
    const std::int32_t* cur = labels.data() + std::size_t(y) * width;
    for (int x = 0; x < width; ++x) {
      const std::int32_t l = cur[x];
      const bool edge = (x > 0 && cur[x - 1] != l) || (x + 1 < width && cur[x + 1] != l) ||
                        (y > 0 && cur[x - width] != l) || (y + 1 < height && cur[x + width] != l);
      row[x] = edge ? on : off;
    }
  });
  return out;
}

QImage renderMask(const std::vector<std::uint8_t>& mask, int width, int height) {
  if (width <= 0 || height <= 0 || mask.size() != std::size_t(width) * std::size_t(height))
    return {};
  QImage out = MapMemory::image(width, height, QImage::Format_RGB32);
  if (out.isNull()) return out;
  const QRgb on = qRgb(255, 255, 255), off = qRgb(40, 40, 40);
  forEachRow(out, [&](int y, QRgb* row) {
    const std::uint8_t* src = mask.data() + std::size_t(y) * width;
    for (int x = 0; x < width; ++x) row[x] = src[x] ? on : off;
  });
  return out;
}

bool saveImageAtomic(const QImage& image, const QString& path, QString* error) {
  auto fail = [&](const QString& why) {
    if (error) *error = QStringLiteral("cannot write %1: %2").arg(path, why);
    return false;
  };
  if (image.isNull()) return fail(QStringLiteral("there is no image to save"));
  QByteArray format = QFileInfo(path).suffix().toLower().toLatin1();
  if (format.isEmpty() || !QImageWriter::supportedImageFormats().contains(format)) format = "png";
  QSaveFile file(path);
  if (!file.open(QIODevice::WriteOnly)) return fail(file.errorString());
  QImageWriter writer(&file, format);
  // Screen grabs are small: spend the time on the smallest PNG (quality 0 = zlib level 9).
  if (format == "png") writer.setQuality(0);
  if (!writer.write(image)) {
    file.cancelWriting();
    return fail(writer.errorString());
  }
  if (!file.commit()) return fail(file.errorString());
  return true;
}

}  // namespace kmseg::gui
