// SPDX-License-Identifier: MIT
// Device discovery, the CUDA engine (input checks and dispatch to the per-precision runs) and
// its registration with core's factory.

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "cuda_check.cuh"
#include "device_math.cuh"
#include "kmseg/cuda_engine.h"
#include "kmseg/engine.h"
#include "kmseg/error.h"
#include "kmseg/median.h"
#include "kmseg/pair_distance.h"
#include "lloyd_run.h"
#include "transfer.cuh"

namespace kmseg {

namespace {

std::string describe(const char* call, cudaError_t e) {
  return std::string(call) + ": " + cudaGetErrorString(e) + " (error " + std::to_string(int(e)) +
         ")";
}

// Checks everything that can be checked before a kernel runs; throws InvalidArgument/DataError.
// Returns the data's largest magnitude, found by the same pass as its finiteness, or *known
// without that pass when the data has passed it already (data the engine keeps).
double checkInputs(const Matrix& data, const Matrix& init, const KMeansParams& params,
                   const double* known = nullptr) {
  if (data.empty()) throw InvalidArgument("the feature matrix is empty");
  validate(params, data.rows);
  if (params.k > kCudaMaxClusters)
    throw InvalidArgument("K = " + std::to_string(params.k) +
                          " exceeds the CUDA engine's limit of " +
                          std::to_string(kCudaMaxClusters) + " clusters");
  if (data.cols > std::size_t(kCudaMaxFeatures))
    throw InvalidArgument("D = " + std::to_string(data.cols) +
                          " features exceed the CUDA engine's limit of " +
                          std::to_string(kCudaMaxFeatures));
  if (data.rows > kCudaMaxRows)
    throw InvalidArgument("N = " + std::to_string(data.rows) +
                          " samples exceed the CUDA engine's limit of 2^31 - 1");
  if (init.rows != std::size_t(params.k) || init.cols != data.cols)
    throw InvalidArgument(
        "initial centres are " + std::to_string(init.rows) + " x " + std::to_string(init.cols) +
        ", expected K x D = " + std::to_string(params.k) + " x " + std::to_string(data.cols));
  const double dataMaxAbs = known ? *known : checkedMaxAbs(data, "the feature matrix");
  checkFinite(init, "the initial centres");
  return dataMaxAbs;
}

/// rows[i] = lookupRow(l, i) for i < n: the engine's fp64 rows of kept data that has a lookup,
/// built on the device instead of copied from the host.
__global__ void lookupRowsKernel(cuda::DeviceLookup l, double* rows, long long n) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  double x[5];
  cuda::lookupRow(l, unsigned(i), x);
#pragma unroll
  for (int q = 0; q < 5; ++q) rows[5 * i + q] = x[q];
}

class CudaEngine final : public KMeansEngine {
 public:
  explicit CudaEngine(CudaDeviceInfo info) : info_(std::move(info)) {}

  std::string description() const override { return info_.name + " (CUDA)"; }

  KMeansResult run(const Matrix& data, const Matrix& initialCentres, const KMeansParams& params,
                   const RunControl& control) override {
    // A kept matrix that changed against keepData's contract (its size, its storage or a
    // sampled row) is no longer kept: its device rows are released and the run takes the data
    // as it is, checked and uploaded as without keepData.
    if (kept_.data == &data && !kept_.matches(data)) kept_ = Kept{};
    const bool kept = kept_.data == &data;
    const double dataMaxAbs =
        checkInputs(data, initialCentres, params, kept && kept_.maxAbs ? &*kept_.maxAbs : nullptr);
    if (kept) kept_.maxAbs = dataMaxAbs;
    KMSEG_CUDA_CHECK(cudaSetDevice(info_.index));
    cuda::RunInputs in{data,       initialCentres,
                       params,     resolveWorking(params.mode, params.working),
                       dataMaxAbs, &staging_};
    if (kept) keepOnDevice(data, in);
    const std::unique_ptr<cuda::LloydRun> lloyd = makeRun(in);
    KMeansResult r = lloyd->run(control);
    r.backend = description();
    r.normOverflows = countNormOverflows(params.mode, in.working, data, dataMaxAbs);
    return r;
  }

  void keepData(const KeptFeatures& k) override {
    kept_ = Kept{k.data, k.data ? k.lookup : nullptr};
    if (k.data) kept_.shape = Shape::of(*k.data);
    if (k.data && k.maxAbs >= 0.0) kept_.maxAbs = k.maxAbs;
  }

  static std::unique_ptr<cuda::LloydRun> makeRun(const cuda::RunInputs& in) {
    switch (lowPrecision(in.params.mode)) {
      case Precision::Fp64:
        return cuda::makeLloydRun<Precision::Fp64>(in);
      case Precision::Fp32:
        return cuda::makeLloydRun<Precision::Fp32>(in);
      case Precision::Fp16:
        return cuda::makeLloydRun<Precision::Fp16>(in);
      case Precision::Bf16:
        return cuda::makeLloydRun<Precision::Bf16>(in);
      case Precision::None:
        break;
    }
    throw InvalidArgument("mode " + std::string(modeName(in.params.mode)) +
                          " has no low precision the CUDA engine can run");
  }

 private:
  /// Calls fn(i) for the rows the checks of kept data look at: 0, step, 2 step, ... (about 4096
  /// spread rows) and the last one.
  template <class Fn>
  static void forSampledRows(std::size_t n, Fn&& fn) {
    const std::size_t step = std::max<std::size_t>(1, n / 4096);
    for (std::size_t i = 0; i < n; i += step) fn(i);
    if (n > 0) fn(n - 1);
  }

  /// What the engine notes of a kept matrix when it is kept: its size, its storage, and its
  /// sampled rows (forSampledRows), by value.
  struct Shape {
    std::size_t rows = 0, cols = 0;
    const double* values = nullptr;
    std::vector<double> sampled;

    static Shape of(const Matrix& m) {
      Shape s{m.rows, m.cols, m.values.data(), {}};
      forSampledRows(m.rows, [&](std::size_t i) {
        const auto row = m.values.begin() + std::ptrdiff_t(i * m.cols);
        s.sampled.insert(s.sampled.end(), row, row + std::ptrdiff_t(m.cols));
      });
      return s;
    }
    // Bit for bit, so that a NaN written over a sampled value is seen too.
    bool describes(const Matrix& m) const {
      if (m.rows != rows || m.cols != cols || m.values.data() != values) return false;
      const double* next = sampled.data();
      bool same = true;
      forSampledRows(rows, [&](std::size_t i) {
        same = same && std::memcmp(&m.values[i * cols], next, cols * sizeof(double)) == 0;
        next += cols;
      });
      return same;
    }
  };

  /// The data of keepData and what the engine keeps of it between runs.
  struct Kept {
    bool matches(const Matrix& m) const { return shape.describes(m); }

    const Matrix* data = nullptr;
    const FeatureLookup* lookup = nullptr;  ///< the data's lookup, if it has one
    Shape shape;                            ///< the data as it was kept
    std::optional<double> maxAbs;           ///< once checked: finite, with this largest magnitude
    cuda::DeviceBuffer<double> rows64;  ///< its rows on the device, once the first run needs them
    cuda::DeviceBuffer<float> rows32;   ///< rounded to fp32, once a run with W = fp32 needs them
    cuda::DeviceBuffer<unsigned char> samples;  ///< the lookup's samples on the device
    cuda::DeviceBuffer<double> tables;          ///< its colour, x and y tables, one after another
    cuda::DeviceLookup device;                  ///< pointers into those two
  };

  // The lookup's bytes on the device: samples, then the tables.
  static std::size_t lookupBytes(const FeatureLookup& l) {
    const std::size_t samples = l.pixelCount() * 3 * (l.samples16 ? 2 : 1);
    return samples + sizeof(double) * (l.colour[0].size() + l.colour[1].size() +
                                       l.colour[2].size() + l.xs.size() + l.ys.size());
  }

  // Throws InvalidArgument unless `l` can describe `data`: its size, and the rows it rebuilds at
  // the first and last pixel and at 4096 spread over the rest, bit for bit. (makeImageFeatures
  // makes both from the same tables; this catches a lookup passed with the wrong matrix.)
  static void checkLookup(const FeatureLookup& l, const Matrix& data) {
    const std::size_t n = data.rows;
    const bool tables = l.width > 0 && l.xs.size() == l.width && l.ys.size() == l.height &&
                        (l.samples8 || l.samples16);
    if (!tables || data.cols != kImageFeatureCount || l.pixelCount() != n)
      throw InvalidArgument("the feature lookup (" + std::to_string(l.width) + " x " +
                            std::to_string(l.height) + " pixels) does not describe the " +
                            std::to_string(n) + " x " + std::to_string(data.cols) +
                            " feature matrix");
    auto checkRow = [&](std::size_t i) {
      for (std::size_t q = 0; q < kImageFeatureCount; ++q) {
        const bool inTable = q >= 3 || l.sample(i, int(q)) < l.colour[q].size();
        const double got = inTable ? l.value(i, q) : std::nan("");
        if (std::memcmp(&got, &data.values[i * data.cols + q], sizeof got) != 0)
          throw InvalidArgument("the feature lookup does not give the feature matrix: row " +
                                std::to_string(i) + ", feature " + std::to_string(q));
      }
    };
    forSampledRows(n, checkRow);
  }

  // Puts the kept data's rows on the device unless they are there, and points the run at them:
  // fp64 rows (the SSE and W = fp64 read them), from the host or, when the data has a lookup,
  // rebuilt on the device from its samples; fp32 rows rounded from those on the device. The
  // lookup itself goes too, for the SSE. Only while the copies it adds take at most half the free
  // device memory: otherwise the run uploads the rows it needs and the engine has not kept, as it
  // does without keepData.
  void keepOnDevice(const Matrix& data, cuda::RunInputs& in) {
    const std::size_t nd = data.values.size();
    const bool want32 = in.working == Precision::Fp32;
    const FeatureLookup* lookup = kept_.lookup;
    const bool addLookup = lookup && !kept_.samples.get();
    if (addLookup) checkLookup(*lookup, data);
    const std::size_t add = (kept_.rows64.get() ? 0 : nd * sizeof(double)) +
                            (want32 && !kept_.rows32.get() ? nd * sizeof(float) : 0) +
                            (addLookup ? lookupBytes(*lookup) : 0);
    std::size_t freeB = 0, totalB = 0;
    if (add > 0) KMSEG_CUDA_CHECK(cudaMemGetInfo(&freeB, &totalB));
    if (add > 0 && add <= freeB / 2) {
      cuda::Stream stream;
      if (addLookup) keepLookup(*lookup, stream.get());
      if (!kept_.rows64.get()) {
        cuda::DeviceBuffer<double> rows(nd, "the kept fp64 features");
        if (kept_.device.width) {
          KMSEG_LAUNCH_LINEAR(lookupRowsKernel, data.rows, stream.get(), kept_.device, rows.get(),
                              (long long)data.rows);
          KMSEG_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
        } else {
          cuda::uploadValues(rows.get(), data.values.data(), nd, stream.get(), staging_);
        }
        kept_.rows64 = std::move(rows);
      }
      if (want32 && !kept_.rows32.get()) {
        cuda::DeviceBuffer<float> rows(nd, "the kept fp32 features");
        KMSEG_LAUNCH_LINEAR((cuda::convertKernel<float, double>), nd, stream.get(),
                            kept_.rows64.get(), rows.get(), (long long)nd);
        KMSEG_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
        kept_.rows32 = std::move(rows);
      }
    }
    in.deviceRows64 = kept_.rows64.get();
    in.deviceRows32 = kept_.rows32.get();
    in.lookup = kept_.device;
  }

  // Copies a lookup's samples and tables to the device and sets kept_.device.
  void keepLookup(const FeatureLookup& l, cudaStream_t stream) {
    const std::size_t sampleBytes = l.pixelCount() * 3 * (l.samples16 ? 2 : 1);
    cuda::DeviceBuffer<unsigned char> samples(sampleBytes, "the kept pixel samples");
    cuda::uploadBytes(
        samples.get(),
        l.samples16 ? reinterpret_cast<const unsigned char*>(l.samples16) : l.samples8, sampleBytes,
        stream, staging_);
    std::vector<double> host;
    std::size_t offsets[5];
    const std::vector<double>* parts[5] = {&l.colour[0], &l.colour[1], &l.colour[2], &l.xs, &l.ys};
    for (int t = 0; t < 5; ++t) {
      offsets[t] = host.size();
      host.insert(host.end(), parts[t]->begin(), parts[t]->end());
    }
    cuda::DeviceBuffer<double> tables(host.size(), "the kept feature tables");
    KMSEG_CUDA_CHECK(cudaMemcpy(tables.get(), host.data(), host.size() * sizeof(double),
                                cudaMemcpyHostToDevice));
    cuda::DeviceLookup d;
    if (l.samples16)
      d.samples16 = reinterpret_cast<const unsigned short*>(samples.get());
    else
      d.samples8 = samples.get();
    for (int c = 0; c < 3; ++c) d.colour[c] = tables.get() + offsets[c];
    d.xs = tables.get() + offsets[3];
    d.ys = tables.get() + offsets[4];
    d.width = unsigned(l.width);
    kept_.samples = std::move(samples);
    kept_.tables = std::move(tables);
    kept_.device = d;
  }

  CudaDeviceInfo info_;
  cuda::Staging staging_;  ///< the runs' pinned copy buffers, pinned once for all of them
  Kept kept_;
};

// The factory core's makeEngine() calls: the CUDA engine on the first device, or null and why.
// Creates the device's context here (cudaFree(0)), not in the first run: the CLI builds the
// engine on a thread of its own while it decodes the image (about 0.13 s on the H200's host).
std::unique_ptr<KMeansEngine> cudaFactory(std::string& whyNot) {
  const auto devices = cudaDevices(&whyNot);
  if (devices.empty()) return nullptr;
  const cudaError_t e = cudaSetDevice(devices.front().index);
  const cudaError_t f = e == cudaSuccess ? cudaFree(nullptr) : e;
  if (f != cudaSuccess) {
    (void)cudaGetLastError();
    whyNot = "the CUDA device cannot be used: " +
             describe(e != cudaSuccess ? "cudaSetDevice" : "cudaFree", f);
    return nullptr;
  }
  // A sanitizer knob: compute-sanitizer's instrumented kernels need more stack than the driver
  // reserves for the kernels of a graph (memcheck then reported out-of-bounds reads and an
  // illegal address in the generic pass of the fp64-fallback modes, the graph loop only; with
  // KMSEG_CUDA_STACK_BYTES=4096, 0 errors). Not for normal runs: the reservation is this many
  // bytes for every thread the device can hold.
  if (const char* v = std::getenv("KMSEG_CUDA_STACK_BYTES")) {
    char* end = nullptr;
    const unsigned long long bytes = std::strtoull(v, &end, 10);
    const cudaError_t s = end != v && *end == '\0' && bytes > 0 && bytes <= (1ull << 20)
                              ? cudaDeviceSetLimit(cudaLimitStackSize, std::size_t(bytes))
                              : cudaErrorInvalidValue;
    if (s != cudaSuccess) {
      (void)cudaGetLastError();
      whyNot = std::string("KMSEG_CUDA_STACK_BYTES='") + v +
               "' is not a stack size the device takes (1 to 1048576 bytes): " +
               describe("cudaDeviceSetLimit", s);
      return nullptr;
    }
  }
  return std::make_unique<CudaEngine>(devices.front());
}

// Counts for checkCudaSqrtUp over the float bit patterns 1 ... 0x7f7fffff (grid-stride; the last
// step stays far below 2^32): s = sqrtUp(v) is below sqrt(v) exactly when s^2 < v, which double
// evaluates exactly (a product of two 24-bit significands); too loose for a normal v when
// s > sqrt(v) (1 + 2^-19) in double.
__global__ void sqrtUpKernel(unsigned long long* counts) {
  unsigned long long checked = 0, below = 0, loose = 0;
  for (unsigned bits = 1 + blockIdx.x * blockDim.x + threadIdx.x; bits <= 0x7f7fffffu;
       bits += gridDim.x * blockDim.x) {
    const float v = __uint_as_float(bits);
    const double s = sqrtUp(v);
    ++checked;
    below += s * s < double(v);
    loose += bits >= 0x00800000u && s > sqrt(double(v)) * (1.0 + 0x1p-19);
  }
  atomicAdd(&counts[0], checked);
  atomicAdd(&counts[1], below);
  atomicAdd(&counts[2], loose);
}

}  // namespace

std::string cudaUnavailableReason(int error, int driverVersion, int runtimeVersion) {
  auto version = [](int v) {
    return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  };
  const std::string call = describe("cudaGetDeviceCount", cudaError_t(error));
  if (error == cudaErrorInsufficientDriver && driverVersion == 0)
    return "no NVIDIA driver is installed (" + call + ")";
  if (error == cudaErrorInsufficientDriver && driverVersion < runtimeVersion)
    return "the NVIDIA driver supports CUDA up to " + version(driverVersion) +
           ", this build needs CUDA " + version(runtimeVersion) +
           ": update the driver to use the GPU (" + call + ")";
  if (error == cudaErrorNoDevice) return "the NVIDIA driver sees no device (" + call + ")";
  return "no CUDA device: " + call;
}

std::vector<CudaDeviceInfo> cudaDevices(std::string* whyNot) {
  std::vector<CudaDeviceInfo> out;
  int count = 0;
  // Error 35 (insufficient driver): no driver, or one too old; error 100 (no device) a driver
  // without a device (or CUDA_VISIBLE_DEVICES empty). Each means: no GPU, use the CPU.
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error state for later calls
    if (whyNot) {
      int driver = 0;
      if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
      *whyNot = cudaUnavailableReason(int(e), driver, CUDART_VERSION);
      if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
          visible && e == cudaErrorNoDevice)
        *whyNot += std::string("; CUDA_VISIBLE_DEVICES is '") + visible + "'";
    }
    return out;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    out.push_back({i, p.name, p.major, p.minor, p.totalGlobalMem, p.multiProcessorCount});
  }
  if (out.empty() && whyNot) *whyNot = "no CUDA device: the runtime lists none";
  return out;
}

void registerCudaEngine() {
  registerGpuEngineFactory(&cudaFactory, kCudaMaxClusters, std::size_t(kCudaMaxFeatures),
                           kCudaMaxRows);
}

std::unique_ptr<KMeansEngine> makeCudaEngine() {
  std::string why;
  auto engine = cudaFactory(why);
  if (!engine) throw BackendError("the CUDA backend is not available: " + why);
  return engine;
}

CudaTiming timeCudaRun(const Matrix& data, const Matrix& initialCentres, const KMeansParams& params,
                       int repeats) {
  const double dataMaxAbs = checkInputs(data, initialCentres, params);
  if (repeats < 1) throw InvalidArgument("repeats must be >= 1");
  std::string why;
  const auto devices = cudaDevices(&why);
  if (devices.empty()) throw BackendError("the CUDA backend is not available: " + why);
  KMSEG_CUDA_CHECK(cudaSetDevice(devices.front().index));
  const cuda::RunInputs in{data, initialCentres, params,
                           resolveWorking(params.mode, params.working), dataMaxAbs};
  const cuda::RunTiming t = CudaEngine::makeRun(in)->time(repeats);
  CudaTiming out;
  out.msFullRun = t.msFullRun;
  out.iterations = t.iterations;
  out.stopReason = t.stopReason;
  out.cyclePeriod = t.cyclePeriod;
  out.msPerIteration = t.iterations > 0 ? t.msFullRun / t.iterations : 0.0;
  out.bytesPerIteration = t.bytesPerIteration;
  out.flopsPerIteration = t.flopsPerIteration;
  out.passBlocks = t.passBlocks;
  out.passBlocksPerSm = t.passBlocksPerSm;
  out.passSlots = t.passSlots;
  out.persistentLoop = t.persistentLoop;
  out.deviceBytes = t.deviceBytes;
  out.minimalBytes = t.minimalBytes;
  return out;
}

double measureCudaCopyBandwidth(std::size_t bytes) {
  std::string why;
  const auto devices = cudaDevices(&why);
  if (devices.empty()) throw BackendError("the CUDA backend is not available: " + why);
  KMSEG_CUDA_CHECK(cudaSetDevice(devices.front().index));
  cuda::DeviceBuffer<unsigned char> a(bytes, "the bandwidth source"),
      b(bytes, "the bandwidth target");
  cuda::Stream s;
  cuda::Event t0, t1;
  KMSEG_CUDA_CHECK(cudaMemsetAsync(a.get(), 1, bytes, s.get()));
  std::vector<float> ms;
  for (int rep = -2; rep < 10; ++rep) {
    t0.record(s.get());
    KMSEG_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, s.get()));
    t1.record(s.get());
    KMSEG_CUDA_CHECK(cudaEventSynchronize(t1.get()));
    if (rep >= 0) ms.push_back(t1.since(t0));
  }
  return 2.0 * double(bytes) / (1e-3 * medianOf(ms));
}

CudaSqrtUpCheck checkCudaSqrtUp() {
  std::string why;
  const auto devices = cudaDevices(&why);
  if (devices.empty()) throw BackendError("the CUDA backend is not available: " + why);
  KMSEG_CUDA_CHECK(cudaSetDevice(devices.front().index));
  cuda::DeviceBuffer<unsigned long long> counts(3, "the sqrtUp check's counts");
  KMSEG_CUDA_CHECK(cudaMemset(counts.get(), 0, 3 * sizeof(unsigned long long)));
  sqrtUpKernel<<<1024, 256>>>(counts.get());
  KMSEG_CUDA_CHECK(cudaGetLastError());
  unsigned long long host[3] = {0, 0, 0};
  KMSEG_CUDA_CHECK(cudaMemcpy(host, counts.get(), sizeof host, cudaMemcpyDeviceToHost));
  return {(long long)host[0], (long long)host[1], (long long)host[2]};
}

}  // namespace kmseg
