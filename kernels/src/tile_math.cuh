// SPDX-License-Identifier: MIT
#pragma once

// Register-tiled dot products for the kernels that evaluate blocks of pairs (nvcc only): the
// paper's distance kernel (pair_distances.cu) and the Lloyd pass's tiled assignment for wide
// rows (lloyd_impl.cuh). A block of 16 x 16 threads takes 64 points x 64 centres, each thread
// 4 x 4 pairs; the features pass through shared memory 32 at a time, and each pair's dot product
// is dotProduct's chain (distance.h) in feature order: acc = fma(x_q, c_q, acc) from +0. fp16
// and bf16 run two pairs per packed instruction (__hfma2 rounds each lane as __hfma does), so
// every lane holds dotProduct's value bit for bit.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <type_traits>

#include "device_math.cuh"

namespace kmseg::cuda::tiles {

constexpr int kSide = 16;   // threads per side of the block: 16 x 16
constexpr int kSlice = 32;  // features per shared-memory stage of the low-precision rows
constexpr int kPad = 4;     // row padding of the stages: 8- or 16-byte rows, fewer bank conflicts
constexpr int kThreads = kSide * kSide;

// Points and centres per thread (kPer x kPer pairs) and per block (kTile). 4 x 4 keeps the
// registers low enough for many resident blocks, which hide the stages' loads: in an earlier
// build of this kernel on the H200, at the paper's size, 8 x 8 pairs per thread (103 registers
// for fp32, two blocks per SM) took 0.69 ms in fp32 against 0.44, and 8 x 8 for fp16 0.43
// against 0.35.
constexpr int kPer = 4;
constexpr int kTile = kSide * kPer;
// The lanes of one packed instruction: two pairs for the 16-bit types, one otherwise.
template <class T>
struct Lanes {
  using type = T;
  static constexpr int count = 1;
};
template <>
struct Lanes<__half> {
  using type = __half2;
  static constexpr int count = 2;
};
template <>
struct Lanes<__nv_bfloat16> {
  using type = __nv_bfloat162;
  static constexpr int count = 2;
};

// One step of dotProduct's chain, acc = fma(x, c, acc), in every lane.
template <class T>
__device__ inline T fmaLanes(T x, T c, T acc) {
  return Math<T>::fma(x, c, acc);
}
__device__ inline __half2 fmaLanes(__half2 x, __half2 c, __half2 acc) {
  return __hfma2(x, c, acc);
}
__device__ inline __nv_bfloat162 fmaLanes(__nv_bfloat162 x, __nv_bfloat162 c, __nv_bfloat162 acc) {
  return __hfma2(x, c, acc);
}

template <class T>
__device__ inline typename Lanes<T>::type splat(T v) {
  if constexpr (Lanes<T>::count == 1)
    return v;
  else
    return {v, v};
}
template <class L, class T>
__device__ inline T laneOf(L v, int lane) {
  if constexpr (std::is_same_v<L, T>)
    return v;
  else
    return lane ? v.y : v.x;
}

// v[0 .. n) = src[0 .. n) from shared memory in 16-byte loads, or 8-byte ones for 8 bytes (src
// aligned to that size).
template <int n, class T>
__device__ inline void loadRow(const T* src, T (&v)[n]) {
  using V = std::conditional_t<n * sizeof(T) % 16 == 0, uint4, uint2>;
  static_assert(n * sizeof(T) % sizeof(V) == 0);
  const V* s = reinterpret_cast<const V*>(src);
  V* o = reinterpret_cast<V*>(v);
#pragma unroll
  for (int k = 0; k < int(n * sizeof(T) / sizeof(V)); ++k) o[k] = s[k];
}

// A stage's values per thread: element e = threadIdx.x + k kThreads of the kTile x kStageSlice
// stage is row e / kStageSlice, feature e % kStageSlice (consecutive threads, consecutive
// features of a row: coalesced loads).
template <int kStageSlice>
inline constexpr int kStagePerThread = kTile* kStageSlice / kThreads;

// The thread's values of rows [r0, r0 + kTile) x features [q0, q0 + width) of `rows`
// (row-major, d features, `end` rows) into registers, zeros outside.
template <int kStageSlice, class T>
__device__ inline void loadStage(T (&v)[kStagePerThread<kStageSlice>], const T* rows, long long r0,
                                 long long end, int d, int q0, int width) {
  static_assert(kThreads % kStageSlice == 0);
  constexpr int kRowStep = kThreads / kStageSlice;  // rows between a thread's values
  const T zero = Math<T>::from(0.0);
  const int q = int(threadIdx.x) % kStageSlice;
  const long long r = r0 + int(threadIdx.x) / kStageSlice;
  const T* p = rows + r * d + q0 + q;
  const long long step = (long long)kRowStep * d;
  const bool inSlice = q < width;
#pragma unroll
  for (int k = 0; k < kStagePerThread<kStageSlice>; ++k)
    v[k] = inSlice && r + k * kRowStep < end ? p[k * step] : zero;
}

// The thread's values (loadStage) into stage[q][r]. A stage of packed S holds each value in both
// lanes; a stage of another S holds each value converted to S (convert, as directDistance
// converts).
template <int kStageSlice, class S, class T>
__device__ inline void storeStage(S (*stage)[kTile + kPad],
                                  const T (&v)[kStagePerThread<kStageSlice>]) {
#pragma unroll
  for (int k = 0; k < kStagePerThread<kStageSlice>; ++k) {
    const int e = int(threadIdx.x) + k * kThreads;
    const int r = e / kStageSlice, q = e % kStageSlice;
    if constexpr (std::is_same_v<S, T>)
      stage[q][r] = v[k];
    else if constexpr (std::is_same_v<S, typename Lanes<T>::type>)
      stage[q][r] = splat(v[k]);
    else
      stage[q][r] = convert<S>(v[k]);
  }
}

// Rows [r0, r0 + kTile) x features [q0, q0 + width) of `rows` into stage[q][r], zeros outside
// (loadStage, then storeStage).
template <int kStageSlice, class S, class T>
__device__ inline void fillStage(S (*stage)[kTile + kPad], const T* rows, long long r0,
                                 long long end, int d, int q0, int width) {
  T v[kStagePerThread<kStageSlice>];
  loadStage<kStageSlice>(v, rows, r0, end, d, q0, width);
  storeStage<kStageSlice>(stage, v);
}

/// Bytes of shared memory tileDots needs for LowT.
template <class LowT>
inline constexpr std::size_t kStageBytes = std::size_t(kSlice) * (kTile + kPad) *
                                           (sizeof(typename Lanes<LowT>::type) + sizeof(LowT));

/// The dot products of points [x0, x0 + 64) of `xRows` (row-major, d features, rows below `xEnd`)
/// with centres [c0, c0 + 64) of `cRows` (rows below `cEnd`): acc[m][t] holds thread (tx, ty)'s
/// points ty 4 + m against centres tx 4 + t kLanes (+1 in the high lane). Every thread of the
/// block calls it; `smem` holds kStageBytes<LowT> (16-byte aligned). Ends with a barrier.
template <class LowT>
__device__ inline void tileDots(typename Lanes<LowT>::type (&acc)[kPer][kPer / Lanes<LowT>::count],
                                unsigned char* smem, const LowT* xRows, long long x0,
                                long long xEnd, const LowT* cRows, long long c0, long long cEnd,
                                int d) {
  using L = typename Lanes<LowT>::type;
  constexpr int kPacks = kPer / Lanes<LowT>::count;
  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
#pragma unroll
  for (int m = 0; m < kPer; ++m)
#pragma unroll
    for (int t = 0; t < kPacks; ++t) acc[m][t] = splat(Math<LowT>::from(0.0));
  // The points' stage holds each value in both lanes of a packed type (no splat per step).
  auto* xs = reinterpret_cast<L(*)[kTile + kPad]>(smem);
  auto* cs = reinterpret_cast<LowT(*)[kTile + kPad]>(xs + kSlice);
  // The next slice's values are loaded into registers while the block works on this one, so
  // that its global loads wait behind the slice's fmas instead of before them.
  LowT xv[kStagePerThread<kSlice>], cv[kStagePerThread<kSlice>];
  loadStage<kSlice>(xv, xRows, x0, xEnd, d, 0, min(kSlice, d));
  loadStage<kSlice>(cv, cRows, c0, cEnd, d, 0, min(kSlice, d));
  for (int q0 = 0; q0 < d; q0 += kSlice) {
    const int width = min(kSlice, d - q0);
    storeStage<kSlice>(xs, xv);
    storeStage<kSlice>(cs, cv);
    __syncthreads();
    if (q0 + kSlice < d) {
      const int next = min(kSlice, d - q0 - kSlice);
      loadStage<kSlice>(xv, xRows, x0, xEnd, d, q0 + kSlice, next);
      loadStage<kSlice>(cv, cRows, c0, cEnd, d, q0 + kSlice, next);
    }
    // Only the slice's features: a padded zero would add fma(0, 0, acc), which can turn -0
    // into +0.
#pragma unroll 4
    for (int q = 0; q < width; ++q) {
      L x[kPer], c[kPacks];  // c: centres 2t and 2t + 1 in the lanes of a packed type
      loadRow(&xs[q][ty * kPer], x);
      loadRow(reinterpret_cast<const L*>(&cs[q][tx * kPer]), c);
#pragma unroll
      for (int m = 0; m < kPer; ++m)
#pragma unroll
        for (int t = 0; t < kPacks; ++t) acc[m][t] = fmaLanes(x[m], c[t], acc[m][t]);
    }
    __syncthreads();
  }
}

// Points of a thread per sweep of directSweep: two, fewer registers.
constexpr int kRows = 2;
// Features per stage of the direct formula's rows in H: the same bytes as a low stage.
template <class LowT, class H>
inline constexpr int kSliceHOf = int(kSlice * sizeof(LowT) / sizeof(H)) > 0
                                     ? int(kSlice * sizeof(LowT) / sizeof(H))
                                     : 1;

/// Direct distances of thread (tx, ty)'s points x0 + ty kPer + h kR + m (m < kR) of
/// `xRows` against its centres c0 + tx kPer + n (n < kPer) of `cRows` (row-major, d features,
/// rows below xEnd / cEnd), into acc[m][n]: directDistance's chain in H, t = x_q - c_q,
/// acc = fma(t, t, acc) in feature order from +0, each x_q converted to H as directDistance
/// converts it, so every value is directDistance's bit for bit. The rows pass through `xs` and
/// `cs`, stages of kSliceH features. Every thread of the block calls it; ends with a barrier.
template <int kSliceH, int kR, class H, class XT>
__device__ inline void directSweep(H (&acc)[kR][kPer], H (*xs)[kTile + kPad], H (*cs)[kTile + kPad],
                                   const XT* xRows, long long x0, long long xEnd, const H* cRows,
                                   long long c0, long long cEnd, int d, int h) {
  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
#pragma unroll
  for (int m = 0; m < kR; ++m)
#pragma unroll
    for (int n = 0; n < kPer; ++n) acc[m][n] = Math<H>::from(0.0);
  for (int q0 = 0; q0 < d; q0 += kSliceH) {
    const int width = min(kSliceH, d - q0);
    fillStage<kSliceH>(xs, xRows, x0, xEnd, d, q0, width);
    fillStage<kSliceH>(cs, cRows, c0, cEnd, d, q0, width);
    __syncthreads();
    for (int q = 0; q < width; ++q) {
      H x[kR], c[kPer];
      loadRow(&xs[q][ty * kPer + h * kR], x);
      loadRow(&cs[q][tx * kPer], c);
#pragma unroll
      for (int m = 0; m < kR; ++m)
#pragma unroll
        for (int n = 0; n < kPer; ++n) {
          const H t = Math<H>::sub(x[m], c[n]);  // directDistance's step
          acc[m][n] = Math<H>::fma(t, t, acc[m][n]);
        }
    }
    __syncthreads();
  }
}

}  // namespace kmseg::cuda::tiles
