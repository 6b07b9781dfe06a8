// SPDX-License-Identifier: MIT
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include <unistd.h>

namespace kmseg::test {

/// Path of a file of the source tree (samples/..., tests/data/...). Tests run with the
/// repository root as working directory (CTest sets it); KMSEG_SOURCE_DIR overrides that, so a
/// test binary carried to another machine needs no path of the build machine.
inline std::filesystem::path sourcePath(const std::string& relative) {
  const char* root = std::getenv("KMSEG_SOURCE_DIR");
  return std::filesystem::path(root && *root ? root : ".") / relative;
}

/// A fresh, empty temporary directory for one test. The process id keeps two test runs on one
/// machine (two checkouts, or ctest -j) out of each other's files.
inline std::filesystem::path freshTempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("kmseg-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace kmseg::test
