// SPDX-License-Identifier: MIT
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kmseg/lloyd_rules.h"
#include "kmseg/matrix.h"
#include "kmseg/mode.h"

namespace kmseg {

/// How the initial centres are chosen.
enum class Init {
  RandomPoints,   ///< K distinct data points drawn uniformly (the paper's choice)
  KMeansPlusPlus  ///< D^2 seeding (Arthur and Vassilvitskii)
};
std::string_view initName(Init init);
/// Parses "random" or "kmeans++". Throws InvalidArgument.
Init parseInit(std::string_view name);

/// Working precision W: precision of the data and of the centroid update.
enum class Working {
  Auto,  ///< fp64 for mode fp64, fp32 otherwise
  Fp32,
  Fp64
};
std::string_view workingName(Working w);
/// Parses "auto", "fp32" or "fp64". Throws InvalidArgument.
Working parseWorking(std::string_view name);
/// The working precision a run of `mode` uses when asked for `w`.
Precision resolveWorking(Mode mode, Working w);

std::string_view stopReasonName(StopReason r);
/// stopReasonName, with a cycle's period: "2-cycle", "4-cycle" (StopReason::Repeat).
std::string stopReasonText(StopReason r, int cyclePeriod);

/// Parameters of one k-means run. Defaults are the paper's.
struct KMeansParams {
  int k = 8;
  Mode mode = Mode::Fp32;
  double rho = 5.0;  ///< safety factor of the reliability test, > 2
  Working working = Working::Auto;
  int maxIterations = 300;   ///< t_max, from 1 to kMaxIterations
  double tolerance = 1e-8;   ///< tau >= 0 on ||dC||_F / ||C||_F
  bool detectCycles = true;  ///< stop on a 2-cycle of labels (off reproduces the paper)
  /// Also stop when the centres repeat those of 2 to kRepeatWindow iterations earlier (the repeat
  /// rule, lloyd_rules.h): off by default, the stop rules of DESIGN and the paper.
  bool detectRepeats = false;
  bool traceSse = true;  ///< compute the SSE of every iteration in the trace
  int threads = 0;       ///< CPU threads; 0 = all hardware threads, at most kMaxThreads
  /// Skip distance evaluations that provably cannot change a label. CPU engine, uniform fp64/fp32
  /// modes: Hamerly's bounds widened by the rounding error bound of the expanded formula; modes
  /// with fp16 or bf16 distances: each pair's emulated distance bounded in double, so that only
  /// the centres that may win, and only the pairs whose reliability test the bounds leave
  /// undecided, are emulated (a pair provably rejected is counted as a fallback). CUDA
  /// engine, D = 5, every mode: centres that are provably farther than another from every point
  /// of a warp's 128 points (a tile, see imageWidth), and in mixed modes provably accepted or
  /// provably rejected by the reliability test for all of them (rejected pairs are counted as
  /// fallbacks); a tile whose points provably all take one centre skips the distance scan. The
  /// labels (and fallback counts) are those of the full scan; only the work differs.
  bool useBounds = true;
  /// When > 0: the samples are the pixels of an image this many pixels wide, in row-major order
  /// (so the number of samples is a multiple of it). The CUDA engine then gives each warp a
  /// compact tile of pixels instead of a run of consecutive rows; tiles hold fewer distinct
  /// labels and prune more centres. Labels and fallback counts of an iteration do not depend on
  /// it; the order of the centroid sums does (deterministically). The CPU engine ignores it.
  std::int64_t imageWidth = 0;

  friend bool operator==(const KMeansParams&, const KMeansParams&) = default;
};

/// Most CPU threads a run may ask for (KMeansParams::threads).
inline constexpr int kMaxThreads = 1024;
/// The largest iteration cap. A run keeps one trace entry per iteration it may take (the CUDA
/// engine allocates them, on the device and in pinned host memory, before its loop starts), and
/// Lloyd's algorithm on a photo settles or cycles within hundreds.
inline constexpr int kMaxIterations = 1'000'000;

/// Throws InvalidArgument naming the parameter and its limit when `p` is out of range for
/// `n` samples (K < 1, K > n, rho <= 2 or not finite, maxIterations < 1, negative or non-finite
/// tolerance, threads outside [0, kMaxThreads]).
void validate(const KMeansParams& p, std::size_t n);

/// The most features at which `mode`'s reliability test is defined: its factor
/// rho 2 gamma_{D+2}(u_low) needs (D + 2) u_low < 1, so D <= 1 / u_low - 3 (bf16 253, fp16 2045,
/// fp32 16 777 213). Uniform modes have no test: no limit (SIZE_MAX).
std::size_t maxReliableFeatures(Mode mode);

/// Throws InvalidArgument naming the mode, `d` and the limit when `d` is above
/// maxReliableFeatures(mode): beyond it gamma_{D+2} is infinite or negative, and the test would
/// send every pair to the fallback or none.
void checkModeFeatures(Mode mode, std::size_t d);

/// What happened in one Lloyd iteration (assignment followed by the centroid update).
struct IterationStats {
  int iteration = 0;               ///< 1-based
  std::int64_t changed = 0;        ///< labels that differ from the previous iteration
  std::int64_t fallbacks = 0;      ///< distance evaluations that fell back to high precision
  std::int64_t evaluations = 0;    ///< distance evaluations in this iteration
  std::int64_t emptyClusters = 0;  ///< clusters re-seeded in this iteration
  double centreShift = 0.0;        ///< ||C_new - C_old||_F / ||C_new||_F
  double sse = -1.0;               ///< fp64 SSE of this iteration's labels, -1 when not traced
};

/// Progress hook: called once per iteration from the thread that runs the engine.
using ProgressFn = std::function<void(const IterationStats&)>;

/// Progress reporting and cooperative cancellation for a run. `cancel` is polled once per
/// iteration; when it reads true the run throws Cancelled. `restarted`, when set, hears that the
/// engine gave up the run part-way and starts it again on another backend (Auto's CPU after a
/// GPU failure), with why, in words; the progress that follows starts again at iteration 1.
/// Called from the thread that calls run().
struct RunControl {
  ProgressFn progress;
  const std::atomic<bool>* cancel = nullptr;
  std::function<void(const std::string& note)> restarted;
  bool cancelled() const { return cancel && cancel->load(std::memory_order_relaxed); }
};

/// The outcome of a k-means run.
struct KMeansResult {
  Mode mode = Mode::Fp32;
  Precision working = Precision::Fp32;
  std::vector<std::int32_t> labels;  ///< one per sample, in [0, K)
  Matrix centroids;                  ///< K x D, working-precision values widened to double
  int iterations = 0;
  StopReason stop = StopReason::MaxIterations;
  int cyclePeriod = 0;  ///< 2 for StopReason::Cycle, the period for Repeat, else 0
  double sse = 0.0;     ///< fp64 SSE of the final labels against the final centres
  std::int64_t fallbacks = 0;
  std::int64_t evaluations = 0;
  std::int64_t emptyClusterEvents = 0;
  /// Rows whose squared norm overflows the mode's assignment precision (countNormOverflows in
  /// pair_distance.h): their expanded distances are not finite.
  std::int64_t normOverflows = 0;
  std::vector<IterationStats> trace;
  double seconds = 0.0;         ///< wall time of the Lloyd loop
  double deviceSeconds = -1.0;  ///< device time when the engine measures it, else -1
  std::string backend;          ///< "CPU (2 threads)" or the device name
  /// Why this run is not on the engine the workflow was given, e.g. "the GPU run failed (...);
  /// it ran on the CPU instead" (makeEngine's Auto); empty otherwise.
  std::string backendNote;

  /// Fallback ratio eta = fallbacks / evaluations (0 for uniform modes).
  double fallbackRatio() const {
    return evaluations > 0 ? double(fallbacks) / double(evaluations) : 0.0;
  }
};

/// Sum of squared distances, in fp64, between each row of `x` and the centre of its label.
double computeSse(const Matrix& x, const std::vector<std::int32_t>& labels, const Matrix& centres);

}  // namespace kmseg
