// SPDX-License-Identifier: MIT
// One QApplication for the whole GUI suite, on the offscreen platform unless the environment
// names another, with settings kept in a private directory.

#include <QApplication>
#include <QDir>
#include <QSettings>

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "test_paths.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // CTest sets QT_QPA_PLATFORM; test discovery and manual runs get the same platform.
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  // One settings directory per process: CTest may run several of these at once.
  const auto settingsDir = kmseg::test::freshTempDir(
      "gui-settings-" + std::to_string(QCoreApplication::applicationPid()));
  QSettings::setDefaultFormat(QSettings::IniFormat);
  QSettings::setPath(QSettings::IniFormat, QSettings::UserScope,
                     QString::fromStdString(settingsDir.string()));
  QApplication app(argc, argv);
  QCoreApplication::setOrganizationName(QStringLiteral("kmseg-tests"));
  QCoreApplication::setApplicationName(QStringLiteral("kmseg-gui-tests"));
  const int status = RUN_ALL_TESTS();
  std::error_code ignored;
  std::filesystem::remove_all(settingsDir, ignored);
  return status;
}
