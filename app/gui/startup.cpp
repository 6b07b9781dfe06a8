// SPDX-License-Identifier: MIT
#include "startup.h"

#include <QCommandLineParser>
#include <QFile>
#include <QRegularExpression>

#include <cstdio>
#include <exception>

#include "commands.h"
#include "kmseg/error.h"

namespace kmseg::gui {

namespace {

QCommandLineParser& describe(QCommandLineParser& parser) {
  parser.setApplicationDescription(
      QStringLiteral("kmseg-gui segments a photo with k-means at a floating-point precision you "
                     "choose and compares it with an fp64 reference.\nWithout a display it "
                     "runs 'kmseg compare IMAGE -k 8' instead."));
  parser.addPositionalArgument(QStringLiteral("IMAGE"), QStringLiteral("Image to open"));
  parser.addOption({QStringLiteral("screenshot"),
                    QStringLiteral("Run 'Compare all modes' on IMAGE, save the window to FILE "
                                   "and exit (works offscreen)."),
                    QStringLiteral("FILE")});
  parser.addOption({QStringLiteral("size"),
                    QStringLiteral("Window size for --screenshot (default 1280x800; from 800x500 "
                                   "to 7680x4320)."),
                    QStringLiteral("WxH")});
  parser.addOption(
      {{QStringLiteral("h"), QStringLiteral("help")}, QStringLiteral("Show this help and exit.")});
  parser.addOption({QStringLiteral("version"), QStringLiteral("Show the version and exit.")});
  return parser;
}

}  // namespace

LaunchOptions parseLaunchOptions(const QStringList& arguments) {
  LaunchOptions o;
  QCommandLineParser parser;
  describe(parser);
  if (!parser.parse(arguments)) {
    o.error = parser.errorText();
    return o;
  }
  o.help = parser.isSet(QStringLiteral("help"));
  o.version = parser.isSet(QStringLiteral("version"));
  o.screenshot = parser.value(QStringLiteral("screenshot"));
  const QStringList positional = parser.positionalArguments();
  if (positional.size() > 1) o.error = QStringLiteral("more than one image given");
  if (!positional.isEmpty()) o.image = positional.front();
  if (parser.isSet(QStringLiteral("size"))) {
    const auto m = QRegularExpression(QStringLiteral("^(\\d{2,5})x(\\d{2,5})$"))
                       .match(parser.value(QStringLiteral("size")));
    const QSize size(m.captured(1).toInt(), m.captured(2).toInt());  // (0, 0) without a match
    if (!m.hasMatch())
      o.error = QStringLiteral("--size must be WIDTHxHEIGHT, e.g. 1280x800");
    else if (size != size.expandedTo(kMinWindowSize).boundedTo(kMaxWindowSize))
      o.error = QStringLiteral("--size %1x%2 is outside %3x%4 ... %5x%6")
                    .arg(size.width())
                    .arg(size.height())
                    .arg(kMinWindowSize.width())
                    .arg(kMinWindowSize.height())
                    .arg(kMaxWindowSize.width())
                    .arg(kMaxWindowSize.height());
    else
      o.windowSize = size;
  }
  if (parser.isSet(QStringLiteral("screenshot")) && o.screenshot.isEmpty())
    o.error = QStringLiteral("--screenshot needs a file name");
  return o;
}

QString usageText() {
  QCommandLineParser parser;
  return describe(parser).helpText();
}

bool displayAvailable() {
  return !qEnvironmentVariableIsEmpty("DISPLAY") ||
         !qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY") ||
         !qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM");
}

int runHeadlessCompare(const QString& image) {
  const QString path = image.isEmpty() ? QString::fromLatin1(kDefaultSample) : image;
  if (image.isEmpty() && !QFile::exists(path)) {
    std::fprintf(stderr,
                 "kmseg-gui: no display, no IMAGE given, and the default sample '%s' is not under "
                 "the current directory (it is the repository's samples/ folder); pass an IMAGE\n",
                 kDefaultSample);
    return 1;
  }
  std::printf("kmseg-gui: no display; running 'kmseg compare' on %s instead\n",
              path.toLocal8Bit().constData());
  std::fflush(stdout);
  cli::Options o;
  o.image = QFile::encodeName(path).toStdString();
  o.outputDir = "kmseg-out";
  o.modes.assign(kAllModes.begin(), kAllModes.end());
  o.workflow.kmeans.k = 8;
  try {
    cli::runCommand("compare", o);
  } catch (const Cancelled&) {
    std::fflush(stdout);
    std::fprintf(stderr, "kmseg-gui: interrupted: no file was written\n");
    return 130;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "kmseg-gui: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace kmseg::gui
