// SPDX-License-Identifier: MIT
#pragma once

// Copies between host and device through the engine's pinned staging buffers, and conversions
// of rows on the device (nvcc only).

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cuda_check.cuh"
#include "device_math.cuh"
#include "kmseg/matrix.h"
#include "kmseg/parallel.h"
#include "lloyd_run.h"

namespace kmseg::cuda {

/// out[i] = convert<ToT>(in[i]) for i < n, one rounding: a run's low-precision copy of its rows,
/// and the engine's fp32 copy of kept fp64 rows (rounded to nearest, as convertValues on the
/// host).
template <class ToT, class FromT>
__global__ void convertKernel(const FromT* in, ToT* out, long long n) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = convert<ToT>(in[i]);
}

/// Copies n values of T to dst on the device, chunk by chunk through the staging buffers:
/// fill(b, m, stage) writes values [b, b + m) into the pinned stage while the last chunk is
/// copied. Pinned buffers move several times faster than pageable memory, whose copies the
/// driver stages itself. Returns when the copies are done.
template <class T, class Fill>
void uploadStaged(T* dst, std::size_t n, cudaStream_t s, Staging& staging, Fill fill) {
  if (n == 0) return;
  const auto hold = staging.lock();
  const std::size_t chunk = kHostStageBytes / sizeof(T);
  T* stage[2] = {static_cast<T*>(staging.buffer(0)), static_cast<T*>(staging.buffer(1))};
  Event copied[2];
  for (std::size_t b = 0, i = 0; b < n; b += chunk, ++i) {
    const std::size_t m = std::min(chunk, n - b);
    if (i >= 2) KMSEG_CUDA_CHECK(cudaEventSynchronize(copied[i & 1].get()));
    fill(b, m, stage[i & 1]);
    KMSEG_CUDA_CHECK(
        cudaMemcpyAsync(dst + b, stage[i & 1], m * sizeof(T), cudaMemcpyHostToDevice, s));
    copied[i & 1].record(s);
  }
  KMSEG_CUDA_CHECK(cudaStreamSynchronize(s));
}

/// Copies src[0, n) to dst on the device as T (convertValues: doubles rounded to nearest for
/// float; the host converts on all its threads).
template <class T>
void uploadValues(T* dst, const double* src, std::size_t n, cudaStream_t s, Staging& staging) {
  uploadStaged(dst, n, s, staging,
               [src](std::size_t b, std::size_t m, T* stage) { convertValues(src + b, m, stage); });
}

/// Copies bytes [0, n) of src to dst on the device (the host copies into the stage on all its
/// threads).
inline void uploadBytes(unsigned char* dst, const unsigned char* src, std::size_t n, cudaStream_t s,
                        Staging& staging) {
  uploadStaged(dst, n, s, staging, [src](std::size_t b, std::size_t m, unsigned char* stage) {
    parallelRanges(m, std::size_t(1) << 20, [&](std::size_t begin, std::size_t end) {
      std::copy(src + b + begin, src + b + end, stage + begin);
    });
  });
}

/// Row i (< 2^32) of an image's features, rebuilt from its lookup: FeatureLookup::value on the
/// device, the same doubles.
__device__ inline void lookupRow(const DeviceLookup& l, unsigned i, double (&x)[5]) {
  const unsigned y = i / l.width, col = i - y * l.width;
  unsigned v[3];
  if (l.samples16) {
#pragma unroll
    for (int c = 0; c < 3; ++c) v[c] = __ldg(l.samples16 + 3ull * i + c);
  } else {
#pragma unroll
    for (int c = 0; c < 3; ++c) v[c] = __ldg(l.samples8 + 3ull * i + c);
  }
#pragma unroll
  for (int c = 0; c < 3; ++c) x[c] = __ldg(l.colour[c] + v[c]);
  x[3] = __ldg(l.xs + col);
  x[4] = __ldg(l.ys + y);
}

/// Copies the labels src[0, n) from the device into out[0, n) as int32, chunk by chunk through
/// the staging buffers: the next chunk is on its way while the host widens the last one.
template <class LabelT>
void downloadLabels(std::int32_t* out, const LabelT* src, std::size_t n, cudaStream_t s,
                    Staging& staging) {
  if (n == 0) return;
  const auto hold = staging.lock();
  const std::size_t chunk = kHostStageBytes / sizeof(LabelT);
  LabelT* stage[2] = {static_cast<LabelT*>(staging.buffer(0)),
                      static_cast<LabelT*>(staging.buffer(1))};
  Event copied[2];
  auto request = [&](std::size_t i) {
    const std::size_t b = i * chunk, m = std::min(chunk, n - b);
    KMSEG_CUDA_CHECK(
        cudaMemcpyAsync(stage[i & 1], src + b, m * sizeof(LabelT), cudaMemcpyDeviceToHost, s));
    copied[i & 1].record(s);
  };
  const std::size_t chunks = (n + chunk - 1) / chunk;
  request(0);
  for (std::size_t i = 0; i < chunks; ++i) {
    if (i + 1 < chunks) request(i + 1);
    KMSEG_CUDA_CHECK(cudaEventSynchronize(copied[i & 1].get()));
    const LabelT* in = stage[i & 1];
    std::int32_t* to = out + i * chunk;
    parallelRanges(std::min(chunk, n - i * chunk), std::size_t(1) << 18,
                   [&](std::size_t begin, std::size_t end) {
                     for (std::size_t j = begin; j < end; ++j) to[j] = std::int32_t(in[j]);
                   });
  }
}

}  // namespace kmseg::cuda
