// SPDX-License-Identifier: MIT
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace kmseg::test {

/// Path of a file of the source tree (samples/..., tests/data/...). Tests run with the
/// repository root as working directory (CTest sets it); KMSEG_SOURCE_DIR overrides that, so a
/// test binary carried to another machine needs no path of the build machine.
inline std::filesystem::path sourcePath(const std::string& relative) {
  const char* root = std::getenv("KMSEG_SOURCE_DIR");
  return std::filesystem::path(root && *root ? root : ".") / relative;
}

/// A fresh, empty temporary directory for one test.
inline std::filesystem::path freshTempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("kmseg-test-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace kmseg::test
