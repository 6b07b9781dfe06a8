// SPDX-License-Identifier: MIT
#pragma once

// The only place where QImage meets kmseg::Image, and where label maps become pictures. Nothing
// here computes a result: labels, palettes and masks come from the core library. The maps are
// drawn on every core, into the memory of maps no longer used where one of their size was.

#include <QImage>
#include <QString>

#include <cstdint>
#include <vector>

#include "kmseg/export.h"
#include "kmseg/image.h"

namespace kmseg::gui {

/// The image for display: 8-bit images as Format_RGB888, 16-bit images as Format_RGBX64 (no
/// precision lost). Returns a null QImage for an empty image.
QImage toQImage(const kmseg::Image& image);

/// The RGB samples of `image` (alpha dropped): 8 bits per sample, or 16 bits when the QImage
/// holds more than 8 bits per channel (RGBX64/RGBA64 formats).
kmseg::Image toCoreImage(const QImage& image);

/// Label map in colour: pixel i gets palette[mapping[labels[i]]], or palette[labels[i]] when
/// `mapping` is empty (mapping a candidate's ids to the reference's gives matched clusters the
/// same colour). Labels outside the palette are drawn black. Format_RGB32.
QImage renderLabels(const std::vector<std::int32_t>& labels, int width, int height,
                    const std::vector<Rgb8>& palette, const std::vector<int>& mapping = {});

/// Cluster boundaries: `colour` where the label of a 4-neighbour differs, transparent elsewhere.
/// Format_ARGB32_Premultiplied.
QImage renderBoundaries(const std::vector<std::int32_t>& labels, int width, int height,
                        QRgb colour);

/// Disagreement mask: white where mask != 0, dark grey elsewhere. Format_RGB32.
QImage renderMask(const std::vector<std::uint8_t>& mask, int width, int height);

/// Saves `image` to `path` atomically (QSaveFile: a temporary file renamed over `path` on
/// success); the format follows the suffix (PNG when there is none or it is unknown). Returns
/// false and sets `error` naming the path and the reason on failure.
bool saveImageAtomic(const QImage& image, const QString& path, QString* error);

}  // namespace kmseg::gui
