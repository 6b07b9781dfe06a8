// SPDX-License-Identifier: MIT
#pragma once

// What kmseg-gui does before it has a window: its command line, and the headless fallback when
// there is no display.

#include <QSize>
#include <QString>
#include <QStringList>

namespace kmseg::gui {

/// The window sizes --size accepts (the window's layout needs about 760 x 340 at least).
inline constexpr QSize kMinWindowSize{800, 500};
inline constexpr QSize kMaxWindowSize{7680, 4320};

/// kmseg-gui's command line.
struct LaunchOptions {
  QString image;                ///< image to open (may be empty)
  QString screenshot;           ///< --screenshot FILE: run, save the window to FILE, exit
  QSize windowSize{1280, 800};  ///< --size WxH, the window size for --screenshot
  bool help = false;
  bool version = false;
  QString error;  ///< a usage error; empty when the command line is fine
};

/// Parses `arguments` (argv, program name first).
LaunchOptions parseLaunchOptions(const QStringList& arguments);
/// The --help text.
QString usageText();

/// True when Qt can be expected to open a window: DISPLAY or WAYLAND_DISPLAY is set, or
/// QT_QPA_PLATFORM names a platform explicitly.
bool displayAvailable();

/// The image the headless fallback compares when none is given.
inline constexpr const char* kDefaultSample = "samples/coffee.png";

/// The fallback without a display: prints "kmseg-gui: no display; running 'kmseg compare' on
/// IMAGE instead" and runs `kmseg compare IMAGE -k 8` (outputs in kmseg-out/). Returns the exit
/// code: 0, 1 after one error line on stderr, or 130 when interrupted (Ctrl+C) before the files
/// were written.
int runHeadlessCompare(const QString& image);

}  // namespace kmseg::gui
