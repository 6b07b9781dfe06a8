// SPDX-License-Identifier: MIT
#pragma once

// Error checking, launch wrappers and RAII holders for CUDA state (nvcc only).

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>
#include <mutex>
#include <string>
#include <utility>

#include "kmseg/error.h"

namespace kmseg::cuda {

/// Throws BackendError "<what>: <message> (error N)" when `e` is not cudaSuccess.
inline void check(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error so later calls start clean
  throw BackendError(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e) +
                     " (error " + std::to_string(int(e)) + ", " + file + ":" +
                     std::to_string(line) + ")");
}

}  // namespace kmseg::cuda

/// Checks a CUDA runtime call; throws kmseg::BackendError naming the call on failure.
#define KMSEG_CUDA_CHECK(call) ::kmseg::cuda::check((call), #call, __FILE__, __LINE__)

namespace kmseg::cuda {

/// Where a kernel is launched from, for its error message.
struct LaunchSite {
  const char* kernel;
  const char* file;
  int line;
};

/// Checks the launch just made at `site`; with KMSEG_CUDA_SYNC_DEBUG also waits for it and
/// checks the run.
inline void checkLaunch(const LaunchSite& site, cudaStream_t stream) {
  check(cudaGetLastError(), site.kernel, site.file, site.line);
#if defined(KMSEG_CUDA_SYNC_DEBUG)
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &status), site.kernel, site.file, site.line);
  if (status == cudaStreamCaptureStatusNone)
    check(cudaStreamSynchronize(stream), site.kernel, site.file, site.line);
#else
  (void)stream;
#endif
}

/// Launches `kernel` on `blocks` x `threads` with `shared` bytes of dynamic shared memory and
/// checks the launch. Does nothing for zero blocks.
template <class... KernelArgs, class... Args>
void launch(const LaunchSite& site, void (*kernel)(KernelArgs...), unsigned blocks,
            unsigned threads, std::size_t shared, cudaStream_t stream, Args&&... args) {
  if (blocks == 0) return;
  kernel<<<blocks, threads, shared, stream>>>(std::forward<Args>(args)...);
  checkLaunch(site, stream);
}

/// Launches `kernel` as launch() does, cooperatively: every block resident at once (so that
/// blocks may wait for each other), or the launch fails, with the error named after `site`.
template <class... KernelArgs, class... Args>
void launchCooperative(const LaunchSite& site, void (*kernel)(KernelArgs...), unsigned blocks,
                       unsigned threads, std::size_t shared, cudaStream_t stream, Args&&... args) {
  if (blocks == 0) return;
  cudaLaunchAttribute cooperative{};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  check(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), site.kernel, site.file,
        site.line);
  checkLaunch(site, stream);
}

/// Launches `kernel` with one thread per element of [0, n) in blocks of `threads`; returns
/// early for n = 0.
template <class... KernelArgs, class... Args>
void launchLinear(const LaunchSite& site, void (*kernel)(KernelArgs...), std::size_t n,
                  cudaStream_t stream, Args&&... args) {
  constexpr unsigned kThreads = 256;
  if (n == 0) return;
  launch(site, kernel, unsigned((n + kThreads - 1) / kThreads), kThreads, 0, stream,
         std::forward<Args>(args)...);
}

/// The launches name the kernel and the line that launches it (not this header's).
#define KMSEG_LAUNCH_SITE(kernel) (::kmseg::cuda::LaunchSite{#kernel, __FILE__, __LINE__})
#define KMSEG_LAUNCH(kernel, blocks, threads, shared, stream, ...)                          \
  ::kmseg::cuda::launch(KMSEG_LAUNCH_SITE(kernel), kernel, blocks, threads, shared, stream, \
                        __VA_ARGS__)
#define KMSEG_LAUNCH_COOPERATIVE(kernel, blocks, threads, shared, stream, ...)                 \
  ::kmseg::cuda::launchCooperative(KMSEG_LAUNCH_SITE(kernel), kernel, blocks, threads, shared, \
                                   stream, __VA_ARGS__)
#define KMSEG_LAUNCH_LINEAR(kernel, n, stream, ...) \
  ::kmseg::cuda::launchLinear(KMSEG_LAUNCH_SITE(kernel), kernel, n, stream, __VA_ARGS__)

/// A move-only device allocation of `size()` elements of T.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  /// Allocates n elements; `what` names the step for the error message.
  DeviceBuffer(std::size_t n, const char* what) : size_(n) {
    if (n == 0) return;
    const cudaError_t e = cudaMalloc(&ptr_, n * sizeof(T));
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      std::size_t freeB = 0, totalB = 0;
      (void)cudaMemGetInfo(&freeB, &totalB);
      throw BackendError(std::string("CUDA: cannot allocate ") + std::to_string(n * sizeof(T)) +
                         " bytes for " + what + " (" + std::to_string(n) + " elements; " +
                         std::to_string(freeB) + " of " + std::to_string(totalB) +
                         " bytes free): " + cudaGetErrorString(e));
    }
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  T* get() const { return ptr_; }
  std::size_t size() const { return size_; }
  std::size_t bytes() const { return size_ * sizeof(T); }

 private:
  void release() noexcept {
    if (ptr_ && cudaFree(ptr_) != cudaSuccess)
      std::fprintf(stderr, "kmseg: cudaFree failed in ~DeviceBuffer\n");
    ptr_ = nullptr;
  }
  T* ptr_ = nullptr;
  std::size_t size_ = 0;
};

/// Pinned host memory, by default mapped into the device's address space (cudaHostAllocMapped);
/// with flags cudaHostAllocDefault it is only page-locked (staging for asynchronous copies) and
/// device() is null.
template <class T>
class MappedBuffer {
 public:
  MappedBuffer() = default;
  MappedBuffer(std::size_t n, const char* what, unsigned flags = cudaHostAllocMapped) : size_(n) {
    const cudaError_t e = cudaHostAlloc(reinterpret_cast<void**>(&host_), n * sizeof(T), flags);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw BackendError(std::string("CUDA: cannot allocate ") + std::to_string(n * sizeof(T)) +
                         " bytes of pinned host memory for " + what + ": " + cudaGetErrorString(e));
    }
    if (flags & cudaHostAllocMapped) {
      const cudaError_t p = cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_), host_, 0);
      if (p != cudaSuccess) {
        // The destructor does not run for a constructor that throws.
        (void)cudaFreeHost(std::exchange(host_, nullptr));
        KMSEG_CUDA_CHECK(p);
      }
    }
  }
  MappedBuffer(const MappedBuffer&) = delete;
  MappedBuffer& operator=(const MappedBuffer&) = delete;
  MappedBuffer(MappedBuffer&& o) noexcept
      : host_(std::exchange(o.host_, nullptr)),
        device_(std::exchange(o.device_, nullptr)),
        size_(std::exchange(o.size_, 0)) {}
  MappedBuffer& operator=(MappedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      host_ = std::exchange(o.host_, nullptr);
      device_ = std::exchange(o.device_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~MappedBuffer() { release(); }
  T* host() const { return host_; }
  T* device() const { return device_; }

 private:
  void release() noexcept {
    if (host_ && cudaFreeHost(host_) != cudaSuccess)
      std::fprintf(stderr, "kmseg: cudaFreeHost failed in ~MappedBuffer\n");
    host_ = nullptr;
  }
  T* host_ = nullptr;
  T* device_ = nullptr;
  std::size_t size_ = 0;
};

/// Bytes of each of the two pinned buffers through which a run's rows go to the device and its
/// labels come back: the host fills or drains one while the other is being copied.
inline constexpr std::size_t kHostStageBytes = std::size_t(16) << 20;

/// The two staging buffers, pinned on first use and kept by their owner (the engine, for all its
/// runs: pinned afresh for each copy they cost about 15 ms a copy of a 12-megapixel run, H200
/// host, 2026-12-02). Users hold lock() while they use them.
class Staging {
 public:
  std::unique_lock<std::mutex> lock() { return std::unique_lock<std::mutex>(mutex_); }
  /// Buffer i (0 or 1) of kHostStageBytes bytes, page-aligned; the caller holds lock().
  void* buffer(int i) {
    if (!buffers_[i].host())
      buffers_[i] =
          MappedBuffer<unsigned char>(kHostStageBytes, "the staging buffers", cudaHostAllocDefault);
    return buffers_[i].host();
  }

 private:
  std::mutex mutex_;
  MappedBuffer<unsigned char> buffers_[2];
};

/// A non-blocking stream, destroyed with its owner.
class Stream {
 public:
  Stream() { KMSEG_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (s_ && cudaStreamDestroy(s_) != cudaSuccess)
      std::fprintf(stderr, "kmseg: cudaStreamDestroy failed\n");
  }
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

/// A timing event.
class Event {
 public:
  Event() { KMSEG_CUDA_CHECK(cudaEventCreate(&e_)); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() {
    if (e_ && cudaEventDestroy(e_) != cudaSuccess)
      std::fprintf(stderr, "kmseg: cudaEventDestroy failed\n");
  }
  cudaEvent_t get() const { return e_; }
  void record(cudaStream_t s) { KMSEG_CUDA_CHECK(cudaEventRecord(e_, s)); }
  /// Milliseconds from `start` to this event (both recorded and complete).
  float since(const Event& start) const {
    float ms = 0;
    KMSEG_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e_, e_));
    return ms;
  }

 private:
  cudaEvent_t e_ = nullptr;
};

/// An executable graph and the graph it was built from.
class Graph {
 public:
  Graph() { KMSEG_CUDA_CHECK(cudaGraphCreate(&g_, 0)); }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() {
    if (exec_ && cudaGraphExecDestroy(exec_) != cudaSuccess)
      std::fprintf(stderr, "kmseg: cudaGraphExecDestroy failed\n");
    if (g_ && cudaGraphDestroy(g_) != cudaSuccess)
      std::fprintf(stderr, "kmseg: cudaGraphDestroy failed\n");
  }
  cudaGraph_t get() const { return g_; }
  void instantiate() { KMSEG_CUDA_CHECK(cudaGraphInstantiate(&exec_, g_, 0)); }
  void launch(cudaStream_t s) { KMSEG_CUDA_CHECK(cudaGraphLaunch(exec_, s)); }

 private:
  cudaGraph_t g_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace kmseg::cuda
