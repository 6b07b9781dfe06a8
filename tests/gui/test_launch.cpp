// SPDX-License-Identifier: MIT
// The kmseg-gui executable: the headless fallback without a display, and --screenshot.

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QProcess>
#include <QProcessEnvironment>

#include <gtest/gtest.h>

#include <csignal>

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

// Ctrl+C in the headless fallback: the runs stop, nothing is written, one line says so, exit
// code 130 (as `kmseg compare`). The signal goes once the reference's row is out, while the nine
// modes after it still run on the CPU.
TEST(Launch, AnInterruptStopsTheHeadlessCompareAndWritesNothing) {
  ASSERT_TRUE(QFileInfo(guiBinary()).isExecutable()) << guiBinary().toStdString();
  const QString image =
      QFileInfo(QString::fromStdString(kmseg::test::sourcePath("samples/coffee.png").string()))
          .absoluteFilePath();
  const auto work = kmseg::test::freshTempDir("gui-headless-interrupt");
  QProcess p;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  for (const char* name : {"DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"})
    env.remove(QString::fromLatin1(name));
  // On the CPU even where a GPU answers, whose runs could end before the signal arrives.
  env.insert(QStringLiteral("CUDA_VISIBLE_DEVICES"), QString());
  p.setProcessEnvironment(env);
  p.setWorkingDirectory(QString::fromStdString(work.string()));
  p.start(guiBinary(), {image});
  ASSERT_TRUE(p.waitForStarted(60000));
  QByteArray out;
  bool signalled = false;
  while (!signalled && p.state() == QProcess::Running) {
    p.waitForReadyRead(1000);
    out += p.readAllStandardOutput();
    if (out.contains("\nreference ")) {
      ASSERT_EQ(::kill(pid_t(p.processId()), SIGINT), 0);
      signalled = true;
    }
  }
  ASSERT_TRUE(signalled) << out.toStdString();
  ASSERT_TRUE(p.waitForFinished(120000));
  out += p.readAllStandardOutput();
  EXPECT_EQ(p.exitStatus(), QProcess::NormalExit);
  EXPECT_EQ(p.exitCode(), 130);
  const QByteArray err = p.readAllStandardError();
  EXPECT_TRUE(err.contains("kmseg-gui: interrupted: no file was written")) << err.toStdString();
  EXPECT_FALSE(out.contains("\nwrote ")) << out.toStdString();
  // The output folder holds nothing, not even a temporary file.
  const QDir outDir(QString::fromStdString((work / "kmseg-out").string()));
  EXPECT_TRUE(outDir.isEmpty(QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden))
      << outDir.entryList(QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden)
             .join(u' ')
             .toStdString();
}

// Whether process `pid` catches `signal` (its SigCgt mask in /proc): the window's handlers are in
// place.
bool catches(qint64 pid, int signal) {
  QFile status(QStringLiteral("/proc/%1/status").arg(pid));
  if (!status.open(QIODevice::ReadOnly)) return false;
  for (const QByteArray& line : status.readAll().split('\n')) {
    if (!line.startsWith("SigCgt:")) continue;
    bool ok = false;
    const qulonglong mask = line.mid(7).trimmed().toULongLong(&ok, 16);
    return ok && (mask >> (signal - 1) & 1u);
  }
  return false;
}

// SIGTERM (a session ending) closes the window as its close button does: the settings are
// saved, one line says so, and the process then ends by the signal.
TEST(Launch, SigtermClosesTheWindowAndEndsByTheSignal) {
  ASSERT_TRUE(QFileInfo(guiBinary()).isExecutable()) << guiBinary().toStdString();
  const QString image = kmseg::test::smallPhoto("gui-sigterm-in");
  const auto config = kmseg::test::freshTempDir("gui-sigterm-config");
  QProcess p;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
  env.insert(QStringLiteral("XDG_CONFIG_HOME"), QString::fromStdString(config.string()));
  p.setProcessEnvironment(env);
  p.start(guiBinary(), {image});
  ASSERT_TRUE(p.waitForStarted(60000));
  ASSERT_TRUE(kmseg::test::waitFor([&] { return catches(p.processId(), SIGTERM); }))
      << "kmseg-gui did not catch SIGTERM";
  p.terminate();  // SIGTERM
  ASSERT_TRUE(p.waitForFinished(60000));
  const QByteArray err = p.readAllStandardError();
  EXPECT_EQ(p.exitStatus(), QProcess::CrashExit) << err.toStdString();
  EXPECT_EQ(p.exitCode(), SIGTERM);  // the signal that ended it
  EXPECT_TRUE(err.contains("kmseg-gui: SIGTERM: closing (send it again to stop at once)"))
      << err.toStdString();
  // The window's close saved its settings (a killed process saves none).
  QFile settings(QString::fromStdString((config / "kmseg" / "kmseg-gui.conf").string()));
  ASSERT_TRUE(settings.open(QIODevice::ReadOnly)) << settings.fileName().toStdString();
  EXPECT_TRUE(settings.readAll().contains("geometry"));
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

  // A file that cannot be written is named before the image is even opened (this image does not
  // exist: had the run started, its error would come first), and nothing is left behind.
  const QString missingDir = QString::fromStdString((dir / "no-such-dir" / "shot.png").string());
  p.start(guiBinary(), {QStringLiteral("--screenshot"), missingDir,
                        QString::fromStdString((dir / "no-such-photo.png").string())});
  ASSERT_TRUE(p.waitForFinished(60000));
  EXPECT_EQ(p.exitCode(), 1);
  const QString err = QString::fromLocal8Bit(p.readAllStandardError());
  EXPECT_TRUE(err.contains(QStringLiteral("cannot write ") + missingDir)) << err.toStdString();
  EXPECT_FALSE(err.contains(QStringLiteral("no-such-photo"))) << err.toStdString();
  const QString dirShot = QString::fromStdString(dir.string());  // a directory, not a file
  p.start(guiBinary(), {QStringLiteral("--screenshot"), dirShot, image});
  ASSERT_TRUE(p.waitForFinished(60000));
  EXPECT_EQ(p.exitCode(), 1);
  EXPECT_TRUE(QString::fromLocal8Bit(p.readAllStandardError()).contains(dirShot));
  EXPECT_EQ(QDir(dirShot).entryList(QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden),
            QStringList{QStringLiteral("shot.png")});
}

}  // namespace
