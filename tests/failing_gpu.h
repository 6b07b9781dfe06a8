// SPDX-License-Identifier: MIT
#pragma once

// A GPU engine whose runs fail as a device can (out of memory, a fault): a stand-in, since no
// GPU exists where these tests must run. What it throws, and what it was told, are recorded.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kmseg/engine.h"
#include "kmseg/kmeans.h"

namespace kmseg::test {

struct FailingGpuState {
  int runs = 0;
  int destroyed = 0;
  std::vector<const Matrix*> kept;  // each keepData's matrix, null for a release
  std::function<void()> fail;       // throws what the run throws
  int iterationsBeforeFailure = 0;  // progress reported before the run fails (a fault part-way)
};

inline FailingGpuState& failingGpuState() {
  static FailingGpuState state;
  return state;
}

class FailingGpu final : public KMeansEngine {
 public:
  ~FailingGpu() override { ++failingGpuState().destroyed; }
  std::string description() const override { return "stand-in GPU"; }
  KMeansResult run(const Matrix&, const Matrix&, const KMeansParams&,
                   const RunControl& control) override {
    ++failingGpuState().runs;
    for (int i = 1; i <= failingGpuState().iterationsBeforeFailure && control.progress; ++i) {
      IterationStats s;
      s.iteration = i;
      s.changed = 1000 / i;
      control.progress(s);
    }
    failingGpuState().fail();
    return {};
  }
  void keepData(const KeptFeatures& kept) override { failingGpuState().kept.push_back(kept.data); }
};

inline std::unique_ptr<KMeansEngine> failingGpu(std::string&) {
  return std::make_unique<FailingGpu>();
}

/// Registers failingGpu for one test, with a failure and at most `maxRows` rows; on destruction
/// calls `restore` (default: no GPU engine registered), e.g. to register the real engine again.
class FailingGpuRegistration {
 public:
  explicit FailingGpuRegistration(std::function<void()> fail, std::size_t maxRows = std::size_t(-1),
                                  std::function<void()> restore = {})
      : restore_(std::move(restore)) {
    failingGpuState() = {};
    failingGpuState().fail = std::move(fail);
    registerGpuEngineFactory(&failingGpu, 1024, 128, maxRows);
  }
  ~FailingGpuRegistration() {
    if (restore_)
      restore_();
    else
      registerGpuEngineFactory(nullptr, 0, 0);
  }
  FailingGpuRegistration(const FailingGpuRegistration&) = delete;
  FailingGpuRegistration& operator=(const FailingGpuRegistration&) = delete;

 private:
  std::function<void()> restore_;
};

}  // namespace kmseg::test
