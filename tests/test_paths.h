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

namespace detail {

/// The directory that holds every temporary directory of this test process,
/// kmseg-test-<pid> under the system's temporary directory. It is removed with everything in
/// it when the process exits normally; a crashed test leaves its files behind for inspection,
/// and KMSEG_KEEP_TEST_FILES=1 keeps them always.
class ScratchRoot {
 public:
  ScratchRoot()
      : owner_(::getpid()),
        path_(std::filesystem::temp_directory_path() / ("kmseg-test-" + std::to_string(owner_))) {}
  ScratchRoot(const ScratchRoot&) = delete;
  ScratchRoot& operator=(const ScratchRoot&) = delete;
  ~ScratchRoot() {
    if (::getpid() != owner_) return;  // a forked child exiting leaves its parent's files alone
    const char* keep = std::getenv("KMSEG_KEEP_TEST_FILES");
    if (keep && *keep && std::string(keep) != "0") return;
    std::error_code ignored;  // best effort: a leftover file must not fail the run
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  pid_t owner_;
  std::filesystem::path path_;
};

inline const std::filesystem::path& scratchRoot() {
  static const ScratchRoot root;
  return root.path();
}

}  // namespace detail

/// A fresh, empty temporary directory `name` for one test, inside this process's scratch root
/// (see detail::ScratchRoot). The process id in the root's name keeps two test runs on one
/// machine (two checkouts, or ctest -j) out of each other's files.
inline std::filesystem::path freshTempDir(const std::string& name) {
  const auto dir = detail::scratchRoot() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace kmseg::test
