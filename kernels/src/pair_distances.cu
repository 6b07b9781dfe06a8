// SPDX-License-Identifier: MIT
// The paper's distance kernel (section 6.1; `kmseg bench distances --backend cuda`): the squared
// distance of every pair (row of P, row of C) as one mode computes it, written as a |P| x |C|
// matrix. Each pair is evaluated with the shared formulas of distance.h, as the CPU engine's
// pairDistances does, so both give the same values bit for bit; the dot products are
// tile_math.cuh's (two pairs per packed instruction in fp16 and bf16).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda_check.cuh"
#include "device_math.cuh"
#include "kmseg/cuda_engine.h"
#include "kmseg/distance.h"
#include "kmseg/error.h"
#include "kmseg/experiments.h"
#include "kmseg/kmeans.h"
#include "kmseg/median.h"
#include "tile_math.cuh"

namespace kmseg {
namespace cuda {
namespace {

using namespace tiles;

template <class LowT, class HighT>
struct DistanceArgs {
  static constexpr bool kFallback = !std::is_void_v<HighT>;
  using H = std::conditional_t<kFallback, HighT, LowT>;
  using OutT = H;  // the mode's distance: H for a mixed mode, the low precision otherwise

  const LowT* pl;  // P in the low precision, row-major |P| x d
  const LowT* cl;  // C in the low precision
  const LowT* pn;  // squaredNorm of each row, in the low precision
  const LowT* cn;
  const H* ph;  // the rows in H, for the direct formula (mixed modes)
  const H* ch;
  OutT* out;  // rows [first, first + rows) x |C|
  unsigned long long* fallbacks;
  // The blocks of the chunk's grid whose falling pairs are many, left to directTileKernel: their
  // count, their indices (in no particular order) and, per block, each thread's falling pairs as
  // bits m kPer + n.
  unsigned* denseCount;
  unsigned* denseList;
  unsigned short* fellMasks;
  long long pRows, cRows;
  int d;
  H factor;  // the reliability test's factor in H
};

/// out[i] = convert<T>(convert<WT>(in[i])): the rows as the mode holds them (one rounding to W,
/// then one to T), as the CPU engine's `rounded`.
template <class T, class WT>
__global__ void roundKernel(const double* in, T* out, long long n) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = convert<T>(convert<WT>(in[i]));
}

template <class T>
__global__ void normKernel(const T* rows, T* norms, long long n, int d) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) norms[i] = squaredNorm<T>(rows + i * d, d);
}

/// The distances of rows [first, first + rows) of P against every row of C. Block (x, y) takes
/// kTile points of the chunk and kTile centres; thread (tx, ty) the kPer x kPer pairs of points
/// ty kPer .. and centres tx kPer ... The features pass through shared memory 32 at a time, and
/// each pair's dot product is dotProduct's chain in feature order (two pairs per instruction in
/// fp16 and bf16); then the pair takes expandedDistance and, in a mixed mode, the reliability
/// test (fallsBack). A pair that falls back takes directDistance from the rows in H, read from
/// global memory pair by pair when few of the block's pairs fall back; when many do, the block
/// leaves them to directTileKernel.
template <class LowT, class HighT>
__global__ void __launch_bounds__(kThreads)
    distanceKernel(DistanceArgs<LowT, HighT> a, long long first, long long rows) {
  using A = DistanceArgs<LowT, HighT>;
  using H = typename A::H;
  using L = typename Lanes<LowT>::type;
  constexpr int kLanes = Lanes<LowT>::count;
  constexpr int kPacks = kPer / kLanes;
  __shared__ __align__(16) unsigned char smem[kStageBytes<LowT>];
  __shared__ unsigned blockFell;

  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  const long long p0 = first + blockIdx.x * (long long)kTile;
  const long long c0 = blockIdx.y * (long long)kTile;
  const long long pEnd = first + rows;
  const int d = a.d;
  if (threadIdx.x == 0) blockFell = 0;

  L acc[kPer][kPacks];
  tileDots<LowT>(acc, smem, a.pl, p0, pEnd, a.cl, c0, a.cRows, d);

  // The expanded distances; in a mixed mode the pairs that fall back are marked instead.
  unsigned fellMask = 0;  // bit m kPer + n: pair (m, n) falls back
  unsigned fell = 0;
#pragma unroll
  for (int m = 0; m < kPer; ++m) {
    const long long i = p0 + ty * kPer + m;
#pragma unroll
    for (int n = 0; n < kPer; ++n) {
      const long long j = c0 + tx * kPer + n;
      if (i >= pEnd || j >= a.cRows) continue;
      const LowT dot = laneOf<L, LowT>(acc[m][n / kLanes], n % kLanes);
      const Expanded<LowT> e = expandedDistance<LowT>(a.pn[i], a.cn[j], dot);
      if constexpr (A::kFallback) {
        if (fallsBack<LowT, H>(e, a.factor)) {
          fellMask |= 1u << (m * kPer + n);
          ++fell;
          continue;
        }
        a.out[(i - first) * a.cRows + j] = convert<H>(e.distance);
      } else {
        a.out[(i - first) * a.cRows + j] = e.distance;
      }
    }
  }
  if constexpr (A::kFallback) {
    if (fell) atomicAdd(&blockFell, fell);
    __syncthreads();
    const unsigned total = blockFell;
    const long long block = blockIdx.y * (long long)gridDim.x + blockIdx.x;
    const bool dense = total * 16 >= unsigned(kTile * kTile);
    if (threadIdx.x == 0) {
      if (total) atomicAdd(a.fallbacks, (unsigned long long)total);
      if (dense) a.denseList[atomicAdd(a.denseCount, 1u)] = unsigned(block);
    }
    if (dense) {
      a.fellMasks[block * kThreads + threadIdx.x] = (unsigned short)fellMask;
      return;
    }
    // Few: each falling pair reads its two rows.
    for (unsigned rest = fellMask; rest; rest &= rest - 1) {
      const int bit = __ffs(int(rest)) - 1;
      const long long i = p0 + ty * kPer + bit / kPer, j = c0 + tx * kPer + bit % kPer;
      a.out[(i - first) * a.cRows + j] = directDistance<H>(a.ph + i * d, a.ch + j * d, d);
    }
  }
}

// One dense tile of directTileKernel (all of its threads call it; it ends with a barrier).
template <int kSliceH, class A, class H>
__device__ void tileDirect(const A& a, H (*xs)[kTile + kPad], H (*cs)[kTile + kPad],
                           unsigned fellMask, long long first, long long p0, long long pEnd,
                           long long c0, int tx, int ty, int d) {
#pragma unroll 1
  for (int h = 0; h < kPer / kRows; ++h) {
    H acc[kRows][kPer];
    directSweep<kSliceH>(acc, xs, cs, a.ph, p0, pEnd, a.ch, c0, a.cRows, d, h);
#pragma unroll
    for (int m = 0; m < kRows; ++m)
#pragma unroll
      for (int n = 0; n < kPer; ++n) {
        const int bit = (h * kRows + m) * kPer + n;
        if (!(fellMask >> bit & 1)) continue;
        const long long i = p0 + ty * kPer + h * kRows + m, j = c0 + tx * kPer + n;
        a.out[(i - first) * a.cRows + j] = acc[m][n];
      }
  }
}

/// The falling pairs of the blocks of distanceKernel's grid that had many (denseList; the same
/// tiles, `gridX` blocks a row of that grid): the tile's rows in H pass through shared memory
/// and every falling pair takes directDistance's chain in feature order (the same values as
/// directDistance), kRows of a thread's points per sweep. A small grid takes turns over the
/// list, so that a chunk without such blocks costs next to nothing.
template <class LowT, class HighT>
__global__ void __launch_bounds__(kThreads)
    directTileKernel(DistanceArgs<LowT, HighT> a, long long first, long long rows, int gridX) {
  using A = DistanceArgs<LowT, HighT>;
  using H = typename A::H;
  using L = typename Lanes<LowT>::type;
  constexpr int kSliceH = kSliceHOf<LowT, H>;
  __shared__ __align__(16) unsigned char smem[kStageBytes<LowT>];
  auto* xs = reinterpret_cast<H(*)[kTile + kPad]>(smem);
  auto* cs = xs + kSliceH;
  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  const long long pEnd = first + rows;
  const int d = a.d;
  const unsigned count = *a.denseCount;
  for (unsigned t = blockIdx.x; t < count; t += gridDim.x) {
    const long long block = a.denseList[t];
    const long long p0 = first + (block % gridX) * kTile;
    const long long c0 = (block / gridX) * kTile;
    tileDirect<kSliceH>(a, xs, cs, a.fellMasks[block * kThreads + threadIdx.x], first, p0, pEnd, c0,
                        tx, ty, d);
  }
}

/// One mode's distances on the device: the rows uploaded and rounded once, then evaluated chunk
/// by chunk of P's rows into one output buffer.
class DeviceDistances {
 public:
  virtual ~DeviceDistances() = default;
  /// Enqueues the norms of both sets' low copies (the first step of every evaluation).
  virtual void norms() = 0;
  /// Enqueues the distances of rows [first, first + rows), at most chunkRows() of them.
  virtual void evaluate(std::size_t first, std::size_t rows) = 0;
  /// Waits for the stream and widens the last evaluated chunk's `rows` rows into `out`.
  virtual void fetch(std::size_t rows, double* out) = 0;
  virtual void resetFallbacks() = 0;
  virtual std::int64_t fallbacks() = 0;
  virtual cudaStream_t stream() const = 0;
  virtual std::size_t chunkRows() const = 0;
};

template <class LowT, class HighT, class WT>
class DistancesFor final : public DeviceDistances {
  using A = DistanceArgs<LowT, HighT>;
  using H = typename A::H;
  using OutT = typename A::OutT;

 public:
  DistancesFor(Mode mode, double rho, const Matrix& p, const Matrix& c, int multiprocessors)
      : multiprocessors_(multiprocessors),
        chunk_(std::min(p.rows, distanceChunkRows(c.rows, kCudaDistanceChunkPairs))),
        pl_(p.values.size(), "the low-precision copy of P"),
        cl_(c.values.size(), "the low-precision copy of C"),
        pn_(p.rows, "the norms of P"),
        cn_(c.rows, "the norms of C"),
        out_(chunk_ * c.rows, "the distance matrix (one chunk of rows)"),
        counter_(1, "the fallback count"),
        dense_(A::kFallback ? 1 + gridBlocks(chunk_, c.rows) : 0, "the dense-fallback list"),
        masks_(A::kFallback ? gridBlocks(chunk_, c.rows) * kThreads : 0, "the fallback masks"),
        host_(chunk_ * c.rows) {
    const int d = int(p.cols);
    {
      DeviceBuffer<double> pd(p.values.size(), "P"), cd(c.values.size(), "C");
      upload(pd, p);
      upload(cd, c);
      round(pd, pl_);
      round(cd, cl_);
      if constexpr (A::kFallback) {
        ph_ = DeviceBuffer<H>(p.values.size(), "P in the fallback precision");
        ch_ = DeviceBuffer<H>(c.values.size(), "C in the fallback precision");
        round(pd, ph_);
        round(cd, ch_);
      }
      KMSEG_CUDA_CHECK(cudaStreamSynchronize(s_.get()));
    }
    a_.pl = pl_.get();
    a_.cl = cl_.get();
    a_.pn = pn_.get();
    a_.cn = cn_.get();
    a_.ph = ph_.get();
    a_.ch = ch_.get();
    a_.out = out_.get();
    a_.fallbacks = counter_.get();
    a_.denseCount = dense_.get();
    a_.denseList = dense_.get() + (A::kFallback ? 1 : 0);
    a_.fellMasks = masks_.get();
    a_.pRows = (long long)p.rows;
    a_.cRows = (long long)c.rows;
    a_.d = d;
    if constexpr (A::kFallback)
      a_.factor = Math<H>::from(reliabilityFactor(rho, d, lowPrecision(mode)));
  }

  void norms() override {
    KMSEG_LAUNCH_LINEAR(normKernel<LowT>, std::size_t(a_.pRows), s_.get(), a_.pl, pn_.get(),
                        a_.pRows, a_.d);
    KMSEG_LAUNCH_LINEAR(normKernel<LowT>, std::size_t(a_.cRows), s_.get(), a_.cl, cn_.get(),
                        a_.cRows, a_.d);
  }

  void evaluate(std::size_t first, std::size_t rows) override {
    const dim3 grid(unsigned((rows + kTile - 1) / kTile),
                    unsigned((std::size_t(a_.cRows) + kTile - 1) / kTile));
    if constexpr (A::kFallback)
      KMSEG_CUDA_CHECK(cudaMemsetAsync(a_.denseCount, 0, sizeof(unsigned), s_.get()));
    distanceKernel<LowT, HighT>
        <<<grid, kThreads, 0, s_.get()>>>(a_, (long long)first, (long long)rows);
    checkLaunch(KMSEG_LAUNCH_SITE(distanceKernel), s_.get());
    if constexpr (A::kFallback) {
      const unsigned turns = std::min(grid.x * grid.y, unsigned(4 * multiprocessors_));
      directTileKernel<LowT, HighT>
          <<<turns, kThreads, 0, s_.get()>>>(a_, (long long)first, (long long)rows, int(grid.x));
      checkLaunch(KMSEG_LAUNCH_SITE(directTileKernel), s_.get());
    }
  }

  void fetch(std::size_t rows, double* out) override {
    const std::size_t n = rows * std::size_t(a_.cRows);
    KMSEG_CUDA_CHECK(cudaMemcpyAsync(host_.data(), out_.get(), n * sizeof(OutT),
                                     cudaMemcpyDeviceToHost, s_.get()));
    KMSEG_CUDA_CHECK(cudaStreamSynchronize(s_.get()));
    for (std::size_t e = 0; e < n; ++e) out[e] = double(Math<OutT>::toDouble(host_[e]));
  }

  void resetFallbacks() override {
    KMSEG_CUDA_CHECK(cudaMemsetAsync(counter_.get(), 0, sizeof(unsigned long long), s_.get()));
  }

  std::int64_t fallbacks() override {
    unsigned long long n = 0;
    KMSEG_CUDA_CHECK(
        cudaMemcpyAsync(&n, counter_.get(), sizeof n, cudaMemcpyDeviceToHost, s_.get()));
    KMSEG_CUDA_CHECK(cudaStreamSynchronize(s_.get()));
    return std::int64_t(n);
  }

  cudaStream_t stream() const override { return s_.get(); }
  std::size_t chunkRows() const override { return chunk_; }

 private:
  void upload(DeviceBuffer<double>& to, const Matrix& m) {
    KMSEG_CUDA_CHECK(cudaMemcpyAsync(to.get(), m.values.data(), m.values.size() * sizeof(double),
                                     cudaMemcpyHostToDevice, s_.get()));
  }
  template <class T>
  void round(const DeviceBuffer<double>& from, DeviceBuffer<T>& to) {
    KMSEG_LAUNCH_LINEAR((roundKernel<T, WT>), from.size(), s_.get(), from.get(), to.get(),
                        (long long)from.size());
  }

  static std::size_t gridBlocks(std::size_t rows, std::size_t cRows) {
    return ((rows + kTile - 1) / kTile) * ((cRows + kTile - 1) / kTile);
  }

  Stream s_;
  int multiprocessors_;
  std::size_t chunk_;
  DeviceBuffer<LowT> pl_, cl_, pn_, cn_;
  DeviceBuffer<H> ph_, ch_;
  DeviceBuffer<OutT> out_;
  DeviceBuffer<unsigned long long> counter_;
  DeviceBuffer<unsigned> dense_;
  DeviceBuffer<unsigned short> masks_;
  std::vector<OutT> host_;
  A a_{};
};

template <class LowT, class HighT>
std::unique_ptr<DeviceDistances> makeFor(Mode mode, double rho, Precision working, const Matrix& p,
                                         const Matrix& c, int multiprocessors) {
  if (working == Precision::Fp64)
    return std::make_unique<DistancesFor<LowT, HighT, double>>(mode, rho, p, c, multiprocessors);
  return std::make_unique<DistancesFor<LowT, HighT, float>>(mode, rho, p, c, multiprocessors);
}

std::unique_ptr<DeviceDistances> makeDeviceDistances(Mode mode, double rho, Precision working,
                                                     const Matrix& p, const Matrix& c) {
  checkDistanceInputs(rho, p, c);
  checkModeFeatures(mode, p.cols);
  if (c.rows > kCudaMaxDistanceCentres)
    throw InvalidArgument("cudaPairDistances: C has " + std::to_string(c.rows) +
                          " rows; the distance kernel takes at most " +
                          std::to_string(kCudaMaxDistanceCentres) +
                          " (65535 blocks of 64 centres)");
  std::string why;
  const auto devices = cudaDevices(&why);
  if (devices.empty()) throw BackendError("the CUDA backend is not available: " + why);
  KMSEG_CUDA_CHECK(cudaSetDevice(devices.front().index));
  switch (mode) {
#define KMSEG_DISTANCES_CASE(e, name, low, high)                                     \
  case Mode::e:                                                                      \
    return makeFor<typename DeviceType<low>::type, typename DeviceType<high>::type>( \
        mode, rho, working, p, c, devices.front().multiprocessors);
    KMSEG_FOR_EACH_MODE(KMSEG_DISTANCES_CASE)
#undef KMSEG_DISTANCES_CASE
  }
  throw InvalidArgument("cudaPairDistances: unknown mode");
}

}  // namespace
}  // namespace cuda

std::vector<double> cudaPairDistances(Mode mode, double rho, Precision working, const Matrix& p,
                                      const Matrix& c, std::int64_t* fallbacks) {
  const auto dev = cuda::makeDeviceDistances(mode, rho, working, p, c);
  std::vector<double> values(p.rows * c.rows);
  dev->resetFallbacks();
  dev->norms();
  for (std::size_t first = 0; first < p.rows; first += dev->chunkRows()) {
    const std::size_t rows = std::min(dev->chunkRows(), p.rows - first);
    dev->evaluate(first, rows);
    dev->fetch(rows, values.data() + first * c.rows);
  }
  if (fallbacks) *fallbacks = dev->fallbacks();
  return values;
}

DistanceAccuracy cudaMeasureDistances(Mode mode, double rho, Precision working, const Matrix& p,
                                      const Matrix& c, double nearLimit, int threads, int repeats) {
  if (repeats < 1) throw InvalidArgument("repeats must be >= 1");
  const auto dev = cuda::makeDeviceDistances(mode, rho, working, p, c);
  const std::size_t chunk = dev->chunkRows();
  std::vector<double> values(chunk * c.rows);
  DistanceAccuracy total;
  // The measured evaluation, chunk by chunk, is also the warm-up of the timed ones.
  dev->resetFallbacks();
  dev->norms();
  for (std::size_t first = 0; first < p.rows; first += chunk) {
    const std::size_t rows = std::min(chunk, p.rows - first);
    dev->evaluate(first, rows);
    dev->fetch(rows, values.data());
    addDistanceErrors(total, working, p, c, first, rows, values.data(), nearLimit, threads);
  }
  total.fallbacks = dev->fallbacks();
  // The timed evaluations: the norms and every chunk's kernel, back to back on the device.
  cuda::Event t0, t1;
  std::vector<float> ms;
  for (int rep = 0; rep < repeats; ++rep) {
    t0.record(dev->stream());
    dev->norms();
    for (std::size_t first = 0; first < p.rows; first += chunk)
      dev->evaluate(first, std::min(chunk, p.rows - first));
    t1.record(dev->stream());
    KMSEG_CUDA_CHECK(cudaEventSynchronize(t1.get()));
    ms.push_back(t1.since(t0));
  }
  total.seconds = 1e-3 * double(medianOf(ms));
  return total;
}

}  // namespace kmseg
