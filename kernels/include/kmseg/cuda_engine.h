// SPDX-License-Identifier: MIT
#pragma once

// The CUDA side of kmseg, as plain C++: no CUDA header is needed to include this.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kmseg/engine.h"
#include "kmseg/experiments.h"
#include "kmseg/kmeans.h"
#include "kmseg/matrix.h"
#include "kmseg/mode.h"

namespace kmseg {

/// One CUDA device as the runtime reports it.
struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int computeMajor = 0;
  int computeMinor = 0;
  std::size_t totalMemory = 0;
  int multiprocessors = 0;
};

/// The devices the CUDA runtime sees. Empty when there is no driver or no device; `whyNot` then
/// says which, in the user's terms (cudaUnavailableReason).
std::vector<CudaDeviceInfo> cudaDevices(std::string* whyNot = nullptr);

/// Why cudaGetDeviceCount's `error` leaves no device, given the driver's CUDA version
/// (cudaDriverGetVersion: 0 where no driver is installed) and the runtime's this build carries
/// (both as 1000 major + 10 minor). The runtime says "CUDA driver version is insufficient" both
/// where there is no driver at all and where the driver is older than the runtime; only the
/// second needs the user to act (update the driver), so the two are told apart. Ends with the
/// runtime's own call, message and error number.
std::string cudaUnavailableReason(int error, int driverVersion, int runtimeVersion);

/// Registers the CUDA engine factory with core's makeEngine(). Safe to call more than once.
void registerCudaEngine();

/// Largest K and D the CUDA engine accepts.
inline constexpr int kCudaMaxClusters = 1024;
inline constexpr int kCudaMaxFeatures = 128;
/// The most samples (rows) a CUDA run takes: labels and row indices are 32-bit on the device.
inline constexpr std::size_t kCudaMaxRows = (std::size_t(1) << 31) - 1;

/// The CUDA engine on device 0. Throws BackendError when no device answers.
///
/// The Lloyd loop runs as one CUDA graph whose conditional WHILE/IF nodes keep it on the device.
/// Profilers and sanitizers (ncu, compute-sanitizer) cannot handle conditional nodes, so the
/// environment variable KMSEG_CUDA_HOST_LOOP=1, read when a run starts, makes the host launch
/// the same kernels in the same order each iteration and read the stop decision back instead.
/// Results (labels, centroids, trace) are bit-identical to the graph loop; it is slower (one
/// host round trip per iteration) and meant for profiling and sanitizers only. For small photos,
/// and for the packed fp16 / bf16 passes at any size, one persistent kernel inside the graph runs
/// the iterations (same results);
/// KMSEG_CUDA_PERSISTENT=0 keeps the chain of kernels instead, =1 takes the persistent kernel
/// wherever its blocks can all be resident (for comparisons); any other value leaves the choice
/// to the engine.
std::unique_ptr<KMeansEngine> makeCudaEngine();

/// Device timing of one mode's Lloyd loop (CUDA events around the whole device-resident loop,
/// median of `repeats` launches after one warm-up).
struct CudaTiming {
  double msFullRun = 0;                               ///< median device time of one run
  int iterations = 0;                                 ///< iterations of that run
  StopReason stopReason = StopReason::MaxIterations;  ///< why that run stopped
  int cyclePeriod = 0;                                ///< KMeansResult::cyclePeriod of that run
  double msPerIteration = 0;                          ///< msFullRun / iterations
  double bytesPerIteration = 0;  ///< bytes the assignment pass must move per iteration
  double flopsPerIteration = 0;  ///< flops of the expanded distances per iteration
  int passBlocks = 0;            ///< blocks of the assignment pass
  int passBlocksPerSm = 0;       ///< its resident blocks per SM (fast pass), else 0
  int passSlots = 0;             ///< the fast pass's accumulator slots per warp, else 0
  bool persistentLoop = false;   ///< one persistent kernel ran the iterations (not a graph chain)
  std::size_t deviceBytes = 0;   ///< device memory the run allocated
  std::size_t minimalBytes = 0;  ///< features in W + low-precision copy + labels
};

/// Times `params.mode` on `data` from `initialCentres` on device 0. Throws as KMeansEngine::run.
CudaTiming timeCudaRun(const Matrix& data, const Matrix& initialCentres, const KMeansParams& params,
                       int repeats);

/// Device-to-device copy bandwidth of device 0 in bytes per second, counting read + write
/// (median of several copies of `bytes`).
double measureCudaCopyBandwidth(std::size_t bytes = std::size_t(1) << 30);

/// What checkCudaSqrtUp found.
struct CudaSqrtUpCheck {
  long long checked = 0;  ///< positive finite floats evaluated (all of them are: 0x7f7fffff)
  long long below = 0;    ///< results below sqrt(v): a pruning margin too small (must be 0)
  long long loose = 0;    ///< normal v whose result exceeds sqrt(v) (1 + 2^-19) (must be 0)
};

/// Evaluates on device 0, for every positive finite float v, the upper bound of sqrt(v) that the
/// fast pass's pruning margins take (sqrtUp: rsqrtf-based, so its guarantee rests on the
/// device's rsqrtf error), and counts the results that break its contract. For tests. Throws
/// BackendError when no device answers or a CUDA step fails.
CudaSqrtUpCheck checkCudaSqrtUp();

/// The paper's distance kernel on device 0 (section 6.1): the squared distance of every pair
/// (row of P, row of C) as `mode` computes it, row-major |P| x |C| and widened to double, with
/// the fallback count in `*fallbacks` (when not null). The same values as core's pairDistances,
/// bit for bit: the same shared formulas, the rows rounded to `working` and then to the mode's
/// precisions. Any width D; at most kCudaMaxDistanceCentres rows of C (InvalidArgument beyond,
/// before any device call). Throws as pairDistances, and BackendError when no device answers or
/// a CUDA step fails (out of memory included).
std::vector<double> cudaPairDistances(Mode mode, double rho, Precision working, const Matrix& p,
                                      const Matrix& c, std::int64_t* fallbacks = nullptr);

/// Most rows of C the distance kernel takes (its grid's second dimension, 64 centres a block).
inline constexpr std::size_t kCudaMaxDistanceCentres = std::size_t(65535) * 64;

/// Pairs per chunk of P's rows on the device (2^24: 128 MiB of fp64 distances), more than the
/// CPU's chunks, so that the paper's 25 M pairs take two launches of several waves each.
inline constexpr std::size_t kCudaDistanceChunkPairs = std::size_t(1) << 24;

/// measureDistances on device 0: the pairs evaluated by the kernel of cudaPairDistances, chunk
/// by chunk of P's rows, and measured on the host (addDistanceErrors; `threads` as there).
/// `seconds` is the median device time of `repeats` evaluations after the measured one (the
/// norms and the distance kernels; not the rounding of the input, done once, nor the copies to
/// the host).
DistanceAccuracy cudaMeasureDistances(Mode mode, double rho, Precision working, const Matrix& p,
                                      const Matrix& c, double nearLimit, int threads, int repeats);

}  // namespace kmseg
