// SPDX-License-Identifier: MIT
#pragma once

// The CUDA Lloyd run behind a plain C++ interface: one object per run, built for the mode's
// number types by the per-precision translation units (lloyd_fp64.cu, lloyd_fp32.cu, ...).

#include <cstddef>
#include <memory>

#include "kmseg/kmeans.h"
#include "kmseg/matrix.h"
#include "kmseg/precision.h"

namespace kmseg::cuda {

class Staging;

/// An image's features as lookups on the device (FeatureLookup: samples and tables): row i is
/// rebuilt from them (lookupRow) instead of read. width == 0: there is none.
struct DeviceLookup {
  const unsigned char* samples8 = nullptr;    ///< N x 3, or null
  const unsigned short* samples16 = nullptr;  ///< N x 3 for 16-bit images, or null
  const double* colour[3] = {nullptr, nullptr, nullptr};
  const double* xs = nullptr;
  const double* ys = nullptr;
  unsigned width = 0;
};

/// What one run needs. The references (and the staging buffers) must outlive the run object.
struct RunInputs {
  const Matrix& data;
  const Matrix& initialCentres;
  const KMeansParams& params;
  Precision working;
  double dataMaxAbs;  ///< the data's largest magnitude (checkedMaxAbs)
  /// Pinned buffers for the copies to and from the host, kept by the engine across its runs;
  /// null: the run allocates its own.
  Staging* staging = nullptr;
  /// The data's rows already on the device, kept by the engine across runs
  /// (KMeansEngine::keepData): as fp64, and rounded to fp32 (convertValues' rounding). Null: the
  /// run uploads the rows it needs itself.
  const double* deviceRows64 = nullptr;
  const float* deviceRows32 = nullptr;
  /// The data as lookups on the device, kept by the engine (KMeansEngine::keepData with a
  /// lookup): the SSE rebuilds the fp64 rows from it instead of reading them.
  DeviceLookup lookup;
};

/// Device time and sizes of one or more launches of a run's graph.
struct RunTiming {
  double msFullRun = 0;  ///< median device time of one whole run (graph launch)
  int iterations = 0;    ///< iterations of that run
  StopReason stopReason = StopReason::MaxIterations;  ///< why that run stopped
  int cyclePeriod = 0;                                ///< KMeansResult::cyclePeriod of that run
  double bytesPerIteration = 0;  ///< bytes the assignment pass must move per iteration
  double flopsPerIteration = 0;  ///< floating-point operations per iteration (distances)
  int passBlocks = 0;            ///< the assignment pass's grid
  int passBlocksPerSm = 0;       ///< its resident blocks per SM (fast pass), else 0
  int passSlots = 0;             ///< the fast pass's accumulator slots per warp, else 0
  bool persistentLoop = false;   ///< whether one persistent kernel ran the loop's iterations
  std::size_t deviceBytes = 0;   ///< bytes this run allocated on the device
  std::size_t minimalBytes = 0;  ///< features in W + low copy + labels
};

/// One prepared run: data on the device, graph built. Called from one thread.
class LloydRun {
 public:
  virtual ~LloydRun() = default;
  /// Runs the loop once, reporting progress and honouring cancellation; throws Cancelled.
  virtual KMeansResult run(const RunControl& control) = 0;
  /// Launches the whole graph `repeats` times after one warm-up, timing each launch.
  virtual RunTiming time(int repeats) = 0;
};

/// Builds the run for modes whose low precision is `Family`; defined per family.
template <Precision Family>
std::unique_ptr<LloydRun> makeLloydRun(const RunInputs& in);

}  // namespace kmseg::cuda
