// SPDX-License-Identifier: MIT
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "kmseg/features.h"
#include "kmseg/kmeans.h"
#include "kmseg/matrix.h"

namespace kmseg {

/// The data an engine is told its next runs take (KMeansEngine::keepData).
struct KeptFeatures {
  const Matrix* data = nullptr;           ///< null: nothing is kept
  const FeatureLookup* lookup = nullptr;  ///< describes *data exactly, or null
  /// checkedMaxAbs(*data) when the caller has checked the data (finite, with this largest
  /// magnitude); negative when it has not.
  double maxAbs = -1.0;
};

/// A k-means engine: runs Lloyd's loop in one precision mode from given initial centres.
/// Implementations: the CPU engine (core, the executable specification) and the CUDA engine
/// (kernels/). An engine object may be used for several runs, one at a time; run() is called
/// from one thread (any thread) and calls the progress hook from that same thread.
class KMeansEngine {
 public:
  virtual ~KMeansEngine() = default;
  /// "CPU (2 threads)", or the device name for a GPU engine.
  virtual std::string description() const = 0;
  /// Runs Lloyd's loop on `data` (N x D, original fp64 features) from `initialCentres`
  /// (K x D, rows of `data`), with `params.mode`, `params.rho`, working precision and stop rules.
  /// Throws InvalidArgument/DataError for bad input, Cancelled when `control.cancel` is set,
  /// BackendError for failures of the backend.
  virtual KMeansResult run(const Matrix& data, const Matrix& initialCentres,
                           const KMeansParams& params, const RunControl& control = {}) = 0;
  /// Tells the engine that the runs that follow take `kept.data` (this object, unchanged) until
  /// the next call; a null `kept.data` ends that. The engine may then keep what it derives from
  /// the data between those runs: the CUDA engine checks the data once (not at all when
  /// `kept.maxAbs` says it was checked) and keeps its rows on the device, instead of checking
  /// and uploading them in every run. `kept.lookup`, when not null, describes the data exactly
  /// (featureLookup of the image and options that made it): the CUDA engine then builds the rows
  /// on the device from the pixels and rebuilds them from the pixels for each iteration's SSE
  /// instead of reading them. The caller must not change or free the data, the lookup or the
  /// image while they are kept; a matrix whose size, storage or sampled rows changed anyway is
  /// no longer kept by the CUDA engine (its run checks and uploads the data as it is). Runs on
  /// other data are not affected. Called from the thread that
  /// calls run(). The default keeps nothing. Use KeptData rather than calling it directly.
  virtual void keepData(const KeptFeatures& kept) { (void)kept; }
};

/// Keeps `data` (and its lookup, if any) with an engine for the runs of a scope
/// (KMeansEngine::keepData).
class KeptData {
 public:
  /// `maxAbs`: checkedMaxAbs(data) when the caller has checked it, else negative.
  KeptData(KMeansEngine& engine, const Matrix& data, const FeatureLookup* lookup = nullptr,
           double maxAbs = -1.0)
      : engine_(engine) {
    engine_.keepData({&data, lookup, maxAbs});
  }
  KeptData(const KeptData&) = delete;
  KeptData& operator=(const KeptData&) = delete;
  ~KeptData() { engine_.keepData({}); }

 private:
  KMeansEngine& engine_;
};

/// Which engine to use.
enum class Backend { Auto, Cpu, Cuda };
std::string_view backendName(Backend b);
/// Parses "auto", "cpu" or "cuda". Throws InvalidArgument.
Backend parseBackend(std::string_view name);

/// An engine and, when Auto (or Cuda) could not give the GPU, the reason.
struct EngineChoice {
  std::unique_ptr<KMeansEngine> engine;  ///< never null
  Backend backend = Backend::Cpu;        ///< the backend actually chosen
  /// Why not the GPU, e.g. "no NVIDIA driver is installed (cudaGetDeviceCount: ...)".
  std::string note;
};

/// What a run asks of its engine, for makeEngine's choice (0: not known).
struct EngineNeeds {
  int clusters = 0;          ///< K
  std::size_t features = 0;  ///< D
  std::size_t rows = 0;      ///< N
};

/// Returns the CUDA engine for Auto when one is registered, takes `needs` (K, D and N within its
/// limits) and a device answers, the CPU engine otherwise, with the reason recorded in `note`.
/// Auto's GPU engine falls back to the CPU by itself: a run that fails with BackendError (device
/// out of memory, a device fault) is done again on the CPU, and so are that engine's later runs;
/// each such result says so in its backendNote. Backend::Cuda gives the GPU engine as it is.
/// For Backend::Cuda without a usable device it throws BackendError with that reason (K or D
/// beyond its limits are then the engine's error, before any kernel). `threads` is the CPU thread
/// count (0 = all).
EngineChoice makeEngine(Backend backend, int threads = 0, const EngineNeeds& needs = {});

/// The CPU engine. `threads` = 0 uses every hardware thread.
std::unique_ptr<KMeansEngine> makeCpuEngine(int threads = 0);

/// Factory of a GPU engine: returns the engine, or null and sets `whyNot`.
using GpuEngineFactory = std::unique_ptr<KMeansEngine> (*)(std::string& whyNot);
/// Registers the CUDA engine and the largest K, D and N it takes (called by kmseg_cuda's
/// registerCudaEngine()); a null factory removes it.
void registerGpuEngineFactory(GpuEngineFactory factory, int maxClusters, std::size_t maxFeatures,
                              std::size_t maxRows = std::size_t(-1));

/// Number of threads the CPU engine uses for a request of `threads` (0 = hardware threads).
int resolveThreadCount(int threads);

}  // namespace kmseg
