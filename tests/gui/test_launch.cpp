// SPDX-License-Identifier: MIT
// The kmseg-gui executable: the headless fallback without a display, and --screenshot.

#include <QDir>
#include <QFileInfo>
#include <QImage>
#include <QProcess>
#include <QProcessEnvironment>

#include <gtest/gtest.h>

#include "gui_test_util.h"

namespace {

// The executable under test: $KMSEG_GUI, else the one built beside this test.
QString guiBinary() {
  const QString env = qEnvironmentVariable("KMSEG_GUI");
  return env.isEmpty() ? QStringLiteral(KMSEG_GUI_PATH) : env;
}

TEST(Launch, WithoutADisplayRunsTheHeadlessCompare) {
  ASSERT_TRUE(QFileInfo(guiBinary()).isExecutable()) << guiBinary().toStdString();
  const QString image = QFileInfo(kmseg::test::smallPhoto("gui-headless-in")).absoluteFilePath();
  const auto work = kmseg::test::freshTempDir("gui-headless");
  QProcess p;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  for (const char* name : {"DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"})
    env.remove(QString::fromLatin1(name));
  p.setProcessEnvironment(env);
  p.setWorkingDirectory(QString::fromStdString(work.string()));
  p.start(guiBinary(), {image});
  ASSERT_TRUE(p.waitForFinished(120000));
  const QString out = QString::fromLocal8Bit(p.readAllStandardOutput());
  EXPECT_EQ(p.exitCode(), 0) << p.readAllStandardError().toStdString();
  EXPECT_TRUE(out.startsWith(
      QStringLiteral("kmseg-gui: no display; running 'kmseg compare' on %1 instead\n").arg(image)))
      << out.toStdString();
  EXPECT_TRUE(out.contains(QStringLiteral("K = 8"))) << out.toStdString();
  const QDir outDir(QString::fromStdString((work / "kmseg-out").string()));
  EXPECT_TRUE(outDir.exists(QStringLiteral("small.compare.json")));
  EXPECT_TRUE(outDir.exists(QStringLiteral("small.fp16-fp32.labels.png")));

  // A bad image: one line on stderr, exit code 1, no window.
  p.start(guiBinary(), {QStringLiteral("no-such-image.png")});
  ASSERT_TRUE(p.waitForFinished(60000));
  EXPECT_EQ(p.exitCode(), 1);
  EXPECT_TRUE(p.readAllStandardError().contains("no-such-image.png"));

  // No image, run outside the repository (no samples/ folder here): the default sample is named.
  p.start(guiBinary(), {});
  ASSERT_TRUE(p.waitForFinished(60000));
  EXPECT_EQ(p.exitCode(), 1);
  const QByteArray err = p.readAllStandardError();
  EXPECT_TRUE(err.contains("samples/coffee.png") && err.contains("pass an IMAGE"))
      << err.toStdString();
}

TEST(Launch, ScreenshotRendersTheWindowAfterARun) {
  ASSERT_TRUE(QFileInfo(guiBinary()).isExecutable()) << guiBinary().toStdString();
  const QString image = kmseg::test::smallPhoto("gui-shot-in");
  const auto dir = kmseg::test::freshTempDir("gui-shot");
  const QString shot = QString::fromStdString((dir / "shot.png").string());
  QProcess p;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
  p.setProcessEnvironment(env);
  p.start(guiBinary(), {QStringLiteral("--screenshot"), shot, QStringLiteral("--size"),
                        QStringLiteral("900x640"), image});
  ASSERT_TRUE(p.waitForFinished(120000));
  EXPECT_EQ(p.exitCode(), 0) << p.readAllStandardError().toStdString();
  const QImage img(shot);
  ASSERT_FALSE(img.isNull());
  // 900 x 640 logical pixels; more device pixels on a scaled screen (QT_SCALE_FACTOR).
  EXPECT_GE(img.width(), 900);
  EXPECT_EQ(qint64(img.width()) * 640, qint64(img.height()) * 900);

  // Nothing to screenshot: a usage error.
  p.start(guiBinary(), {QStringLiteral("--screenshot"), shot});
  ASSERT_TRUE(p.waitForFinished(60000));
  EXPECT_EQ(p.exitCode(), 2);
}

}  // namespace
