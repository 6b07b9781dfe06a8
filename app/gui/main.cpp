// SPDX-License-Identifier: MIT
// kmseg-gui: the desktop application. Without a display it runs the headless `kmseg compare`;
// with --screenshot it renders its window after a run and exits (works offscreen).

#include <QApplication>
#include <QCoreApplication>
#include <QIcon>
#include <QSaveFile>
#include <QTimer>

#include <cstdio>

#include "close_on_signal.h"
#include "controller.h"
#include "image_convert.h"
#include "image_views.h"
#include "kmseg/config.h"
#include "main_window.h"
#include "startup.h"

namespace {

using kmseg::gui::CloseOnSignal;
using kmseg::gui::Controller;
using kmseg::gui::LaunchOptions;
using kmseg::gui::MainWindow;

// Opens the image, runs "Compare all modes", saves the window and quits. Exit code 0 on
// success, 1 with one line on stderr on any failure.
int runScreenshot(QApplication& app, const LaunchOptions& o) {
  // A file that cannot be written fails now, not after the comparison: the save's own temporary
  // file is made beside it and dropped (nothing is left behind).
  {
    QSaveFile probe(o.screenshot);
    if (!probe.open(QIODevice::WriteOnly)) {
      std::fprintf(stderr, "kmseg-gui: cannot write %s: %s\n",
                   o.screenshot.toLocal8Bit().constData(),
                   probe.errorString().toLocal8Bit().constData());
      return 1;
    }
    probe.cancelWriting();
  }
  MainWindow window(MainWindow::Options{false});
  window.resize(o.windowSize);
  window.show();
  auto fail = [&](const QString& message) {
    std::fprintf(stderr, "kmseg-gui: %s\n", message.toLocal8Bit().constData());
    app.exit(1);
  };
  // A window that cannot take the size asked for (its layout's minimum is larger, e.g. with
  // large fonts) would give a screenshot of another size.
  if (window.size() != o.windowSize) {
    std::fprintf(stderr, "kmseg-gui: --size %dx%d: the window cannot be smaller than %dx%d\n",
                 o.windowSize.width(), o.windowSize.height(), window.width(), window.height());
    return 1;
  }
  QObject::connect(window.controller(), &Controller::errorOccurred, &app,
                   [&](const QString& title, const QString& text, const QString&) {
                     fail(title + QStringLiteral(": ") + text);
                   });
  QObject::connect(window.controller(), &Controller::imageLoaded, &app,
                   [&] { window.compareAll(); });
  QObject::connect(window.controller(), &Controller::runFinished, &app, [&] {
    // Let the table, the charts and the views lay themselves out before grabbing.
    QTimer::singleShot(200, &app, [&] {
      window.views()->fitToWindow();
      QString error;
      if (!kmseg::gui::saveImageAtomic(window.grab().toImage(), o.screenshot, &error))
        fail(error);
      else
        app.exit(0);
    });
  });
  window.openFile(o.image);
  return app.exec();
}

}  // namespace

int main(int argc, char** argv) {
  QStringList arguments;
  for (int i = 0; i < argc; ++i) arguments << QString::fromLocal8Bit(argv[i]);
  const LaunchOptions options = kmseg::gui::parseLaunchOptions(arguments);

  if (options.help || options.version || !options.error.isEmpty()) {
    QCoreApplication app(argc, argv);
    QCoreApplication::setApplicationName(QStringLiteral("kmseg-gui"));
    if (!options.error.isEmpty()) {
      std::fprintf(stderr, "kmseg-gui: %s (see 'kmseg-gui --help')\n",
                   options.error.toLocal8Bit().constData());
      return 2;
    }
    if (options.help)
      std::printf("%s", kmseg::gui::usageText().toLocal8Bit().constData());
    else
      std::printf("kmseg-gui %s\n", kmseg::kVersion);
    return 0;
  }

  if (!kmseg::gui::displayAvailable()) {
    if (options.screenshot.isEmpty()) return kmseg::gui::runHeadlessCompare(options.image);
    qputenv("QT_QPA_PLATFORM", "offscreen");
  }

  QApplication app(argc, argv);
  QCoreApplication::setOrganizationName(QStringLiteral("kmseg"));
  QCoreApplication::setApplicationName(QStringLiteral("kmseg-gui"));
  QCoreApplication::setApplicationVersion(QString::fromLatin1(kmseg::kVersion));
  QGuiApplication::setApplicationDisplayName(QStringLiteral("kmseg"));
  QGuiApplication::setDesktopFileName(QStringLiteral("kmseg"));
  QIcon icon(QStringLiteral(":/icons/kmseg.svg"));
  icon.addFile(QStringLiteral(":/icons/kmseg.png"));
  QApplication::setWindowIcon(icon);

  if (!options.screenshot.isEmpty() && options.image.isEmpty()) {
    std::fprintf(stderr, "kmseg-gui: --screenshot needs an IMAGE (see 'kmseg-gui --help')\n");
    return 2;
  }

  // SIGTERM, SIGINT or SIGHUP closes the window as its close button does (the exports being
  // written finish); the process then ends by that signal.
  CloseOnSignal closer;
  int status = 0;
  if (!options.screenshot.isEmpty()) {
    QObject::connect(&closer, &CloseOnSignal::closeRequested, &app, [&](int signal) {
      std::fprintf(stderr, "kmseg-gui: %s: stopped; no screenshot was written\n",
                   kmseg::gui::closeSignalName(signal));
      app.exit(1);
    });
    status = runScreenshot(app, options);
  } else {
    MainWindow window;
    QObject::connect(&closer, &CloseOnSignal::closeRequested, &app, [](int signal) {
      std::fprintf(stderr, "kmseg-gui: %s: closing (send it again to stop at once)\n",
                   kmseg::gui::closeSignalName(signal));
      QApplication::closeAllWindows();
      QCoreApplication::quit();
    });
    window.show();
    if (!options.image.isEmpty()) window.openFile(options.image);
    status = app.exec();
  }
  closer.endByCaughtSignal();
  return status;
}
