// SPDX-License-Identifier: MIT
#include "image_convert.h"

#include <QFileInfo>
#include <QImageWriter>
#include <QSaveFile>

#include <cstring>

namespace kmseg::gui {

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
  QImage out(width, height, QImage::Format_RGB32);
  if (out.isNull()) return out;
  for (int y = 0; y < height; ++y) {
    auto* row = reinterpret_cast<QRgb*>(out.scanLine(y));
    const std::int32_t* src = labels.data() + std::size_t(y) * width;
    for (int x = 0; x < width; ++x) {
      std::int64_t id = src[x];
      if (!mapping.empty()) id = id >= 0 && std::size_t(id) < mapping.size() ? mapping[id] : -1;
      row[x] = id >= 0 && std::size_t(id) < lut.size() ? lut[id] : qRgb(0, 0, 0);
    }
  }
  return out;
}

QImage renderBoundaries(const std::vector<std::int32_t>& labels, int width, int height,
                        QRgb colour) {
  if (width <= 0 || height <= 0 || labels.size() != std::size_t(width) * std::size_t(height))
    return {};
  QImage out(width, height, QImage::Format_ARGB32_Premultiplied);
  if (out.isNull()) return out;
  out.fill(Qt::transparent);
  const QRgb on = qPremultiply(colour);
  for (int y = 0; y < height; ++y) {
    auto* row = reinterpret_cast<QRgb*>(out.scanLine(y));
    const std::int32_t* cur = labels.data() + std::size_t(y) * width;
    for (int x = 0; x < width; ++x) {
      const std::int32_t l = cur[x];
      const bool edge = (x > 0 && cur[x - 1] != l) || (x + 1 < width && cur[x + 1] != l) ||
                        (y > 0 && cur[x - width] != l) || (y + 1 < height && cur[x + width] != l);
      if (edge) row[x] = on;
    }
  }
  return out;
}

QImage renderMask(const std::vector<std::uint8_t>& mask, int width, int height) {
  if (width <= 0 || height <= 0 || mask.size() != std::size_t(width) * std::size_t(height))
    return {};
  QImage out(width, height, QImage::Format_RGB32);
  if (out.isNull()) return out;
  const QRgb on = qRgb(255, 255, 255), off = qRgb(40, 40, 40);
  for (int y = 0; y < height; ++y) {
    auto* row = reinterpret_cast<QRgb*>(out.scanLine(y));
    const std::uint8_t* src = mask.data() + std::size_t(y) * width;
    for (int x = 0; x < width; ++x) row[x] = src[x] ? on : off;
  }
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
