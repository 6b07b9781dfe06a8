// SPDX-License-Identifier: MIT
#pragma once

// Helpers shared by the GUI tests: a small test photo, and waiting on the event loop.

#include <QImage>
#include <QString>
#include <QTest>

#include <filesystem>
#include <functional>
#include <string>

#include "image_convert.h"
#include "kmseg/image_io.h"
#include "test_paths.h"

namespace kmseg::test {

/// samples/coffee.png scaled down to `width` x `height` and saved as PNG in a fresh temporary
/// directory `dirName`; small enough that all nine modes run in well under a second.
inline QString smallPhoto(const std::string& dirName, int width = 60, int height = 40) {
  const auto dir = freshTempDir(dirName);
  const kmseg::Image full = kmseg::loadImage(sourcePath("samples/coffee.png"));
  const QImage small = kmseg::gui::toQImage(full).scaled(width, height, Qt::IgnoreAspectRatio,
                                                         Qt::SmoothTransformation);
  const QString path = QString::fromStdString((dir / "small.png").string());
  if (!small.save(path)) return {};
  return path;
}

/// Processes events until `done()` is true or `ms` milliseconds have passed; returns done().
inline bool waitFor(const std::function<bool()>& done, int ms = 30000) {
  return QTest::qWaitFor(done, ms);
}

}  // namespace kmseg::test
