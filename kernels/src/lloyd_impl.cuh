// SPDX-License-Identifier: MIT
#pragma once

// The CUDA Lloyd loop, written once for every mode (nvcc only). Template parameters:
//   LowT   device type of the expanded-formula distance (double, float, __half, __nv_bfloat16)
//   HighT  device type of the direct-formula fallback, void for the uniform modes
//   WT     working precision of the data and the centroid update (float or double)
//   LabelT compact label type: uint8_t for K <= 256, uint16_t otherwise
//   DT     compile-time feature count (5, the image case) or 0 for any D in [1, kMaxD]
//
// One iteration is one pass of the graph's loop body:
//   assignKernel  -> labels, changed / fallback / 2-cycle counts, per-block centroid partials
//   reduceKernel  -> per-cluster sums and counts (fixed-order tree over the block partials)
//   checkEmptyKernel -> sets the IF condition when a cluster is empty; otherwise the update:
//                    new centres, shift, stop test, next iteration's low/high centre copies
//   IF { reseedListKernel, reseedPickKernel (empty-cluster re-seeding),
//        assignKernel (sums only), reduceKernel, updateKernel }
//   [sseKernel -> publishKernel]  when the trace wants the SSE
// Without the SSE trace the first three run in an inner WHILE loop, which an empty cluster or the
// stop test leaves, and the IF node follows that loop inside the outer one (Run::buildGraph); for
// small photos, and for the packed passes at any size, one persistent kernel, loopFastKernel,
// takes that inner loop's place (Run::choosePersistent).
// The kernel that completes the iteration (the update, or publishKernel with the SSE trace)
// writes its trace entry to device memory and to pinned mapped host memory, reads the cancel
// flag from mapped memory and sets the WHILE conditions. With KMSEG_CUDA_HOST_LOOP=1
// (cuda_engine.h) the host launches the same kernels in the same order per iteration instead:
// it reads the loop state back after the first part (the chain's assign, reduce and checkEmpty,
// or loopFastKernel) and launches the IF branch only when a cluster is empty, as the IF node
// does, and sseKernel and publishKernel only where the graph would have work for them (the
// chain with the SSE trace, or an iteration whose SSE loopFastKernel left to them); then it
// reads the stop decision back.
// Determinism: the sums use no floating-point atomics (see each kernel's comment); integer counts
// use integer atomics, which are exact in any order.

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "cuda_check.cuh"
#include "device_math.cuh"
#include "kmseg/distance.h"
#include "kmseg/engine.h"
#include "kmseg/error.h"
#include "kmseg/lloyd_rules.h"
#include "kmseg/matrix.h"
#include "kmseg/median.h"
#include "kmseg/mode.h"
#include "kmseg/parallel.h"
#include "launch_shape.h"
#include "lloyd_run.h"
#include "prune_margin.h"
#include "tile_math.cuh"
#include "transfer.cuh"

namespace kmseg::cuda {

inline constexpr int kMaxK = 1024;
inline constexpr int kMaxD = 128;
inline constexpr int kAssignThreads = 256;
inline constexpr int kWarps = kAssignThreads / 32;
inline constexpr int kReduceThreads = 256;
inline constexpr int kOneBlockThreads = 1024;
// Centre entries (K D) up to which update() keeps the shift terms and the low centres in shared
// memory (two doubles and one low value, at most a double, per entry).
inline constexpr int kUpdateStage = 1024;
// Shared memory of the kernels that run update(): its staging arrays.
template <class WT>
inline constexpr std::size_t kUpdateShared = kUpdateStage * 3 * sizeof(double);
// Dynamic shared memory the assignment kernel may use without opting in (48 KiB) less room
// for its static shared variables.
inline constexpr std::size_t kSharedLimit = 47 * 1024;
// The fast assignment pass (assignFastKernel): its compile-time D, the points each thread
// handles per round, the shared memory a block may take so that four blocks share an SM (the
// registers that kFastMinBlocks allows decide how many do; the uniform passes take less), and the
// most points one accumulator slot adds in a running sum before the block's fixed-order fold.
inline constexpr int kFastD = 5;
inline constexpr int kFastPoints = 4;
// A warp's tile of the fast pass: kTileRows image rows of kTileGroups groups of kFastPoints
// consecutive points (lane l: row l / kTileGroups, group l mod kTileGroups).
inline constexpr int kTileGroups = 4;
inline constexpr int kTileRows = 32 / kTileGroups;
// Tile width when the rows are not an image: tiles of kTileRows x 16 rows are then runs of 128
// consecutive rows.
inline constexpr long long kPlainTileW = kTileGroups * kFastPoints;

/// Unsigned 32-bit division by a divisor d >= 1 fixed for a launch, as a multiply-high and two
/// shifts (Granlund and Montgomery's round-up method, as in libdivide's branch-free u32 path):
/// with l = ceil(log2 d) and m = floor(2^32 (2^l - d) / d) + 1, n / d = (t + ((n - t) >> 1)) >>
/// (l - 1) for t = umulhi(n, m), every 32-bit n (d = 1: m = 1, shifts 0).
struct FastDivisor {
  unsigned magic = 1;
  int shift1 = 0, shift2 = 0;
  explicit FastDivisor(unsigned d) {
    int l = 0;
    while ((1ull << l) < d) ++l;
    magic = unsigned((std::uint64_t(1) << 32) * ((std::uint64_t(1) << l) - d) / d + 1);
    shift1 = l > 0 ? 1 : 0;
    shift2 = l > 0 ? l - 1 : 0;
  }
};
__device__ inline unsigned fastDivide(unsigned n, unsigned magic, int shift1, int shift2) {
  const unsigned t = __umulhi(n, magic);
  return (t + ((n - t) >> shift1)) >> shift2;
}
inline constexpr std::size_t kFastSharedTarget = 54 * 1024;
// The uniform passes aim lower where that still holds one slot per warp (K up to 162-175):
// shared memory and the L1 cache share an SM's 256 KB, and these passes ran faster with half the
// slots and the L1 cache room that leaves (four blocks of 4 slots take about 100 KB at K = 32,
// 8 slots about 180 KB; measured at K = 32 only). H200, 12 MP, K = 32, two runs each,
// ms per iteration: fp16 0.0999 / 0.1005 -> 0.0970 / 0.0972, bf16 0.1322 / 0.1329 -> 0.1266 /
// 0.1266, fp32 0.0986 / 0.0988 -> 0.0965 / 0.0968. The mixed passes keep 54 KB: fp16>fp32 was
// 0.1919 / 0.1909 -> 0.1948 / 0.1943 and fp32>fp64 0.1462 / 0.1461 -> 0.1493 / 0.1497 with it.
// With the rows' loads not allocating in L1 (ld.global.nc.L1::no_allocate) the uniform passes
// were far slower at 54 KB (fp16 0.124, bf16 0.179) and less so at 34 (0.106, 0.154): a
// lane's five 16-byte loads share 32-byte sectors, and L1 serves a sector's second request when
// it still holds the line. ncu, one pass at iteration 11, 528 blocks either way: L1 hit rate of
// the global loads 47.0 % -> 50.9 % (fp16) and 47.3 % -> 51.0 % (fp32), sectors read from L2
// 4.51 M -> 4.37 M and 3.43 M -> 3.32 M, the pass 94.3 -> 87.1 us and 87.5 -> 86.0 us.
inline constexpr std::size_t kFastSharedTargetUniform = 34 * 1024;
// With W = fp64 the slots are twice as large: four blocks would leave too few slots, and the
// measured pass (H200, 12 MP, K = 32) was 22 % slower with four blocks of 4 slots than with two
// blocks of 8.
inline constexpr std::size_t kFastSharedTargetFp64 = 110 * 1024;
// The uniform fp64 pass (two blocks) with 4 slots instead of 8, for the L1 cache as above: H200,
// K = 32, ms per iteration: 12 MP 0.1491 / 0.1493 -> 0.1467 / 0.1470, 4 MP 0.0919 -> 0.0927,
// 0.26 MP 0.0339 -> 0.0306.
inline constexpr std::size_t kFastSharedTargetUniformFp64 = 60 * 1024;
// In W = fp32, the most points an accumulator slot of the fast pass may take in one pass, which
// bounds the terms of its running sum (lane sums, warp sums or single points). 512 until the
// uniform passes halved their slots (kFastSharedTargetUniform): at 12 MP that would have taken
// two waves of blocks, slower than the one wave the 4 slots then hold (fp32 0.1001, fp16 0.1016
// ms per iteration against 0.0965 and 0.0970). In a photo most tiles add one warp sum to slot 0,
// far fewer terms than points.
inline constexpr long long kFastSlotRun = 1024;
// The most tile rounds per warp of the fast pass for which the loop runs as one persistent
// kernel (Run::choosePersistent).
inline constexpr long long kPersistentRounds = 2;
// Labels of a tile that the fast pass sums with warp shuffles before the slots take the rest.
inline constexpr int kMaskedLabels = 3;

// A tile label state half for "no single label" (labels are below kMaxK = 1024).
inline constexpr unsigned kNoTileLabel = 0x7fffu;

/// One iteration's record, as the device writes it.
struct TraceEntry {
  long long changed;
  long long fallbacks;
  long long empty;
  double shift;
  double sse;
};

/// Loop state in device memory; reset by the graph's first kernel.
struct DeviceState {
  unsigned long long changed;    // labels that differ from the previous iteration's
  unsigned long long fallbacks;  // fallback evaluations of this iteration
  unsigned long long cycleDiff;  // labels that differ from those two iterations earlier
  long long empty;               // re-seeding events of this iteration
  int reseeding;                 // 1 from checkEmptyKernel to the update: a cluster is empty
  int iteration;                 // completed iterations
  int stop;                      // 1 once the stop test said so
  int reason;                    // StopReason
  int cyclePeriod;               // KMeansResult::cyclePeriod
  int cancelled;                 // 1 when the host's cancel flag ended the loop
  int cancelSeen;                // the host's cancel flag as this iteration's reduceKernel read it
  RepeatSearch repeat;           // the repeat rule's candidate (KMeansParams::detectRepeats)
  // Work that loopFastKernel's update leaves to block 0's wait of the next iteration
  // (finishDeferred): the iteration whose repeat record is due, 0 when none, and whether that
  // record searches the window; the iteration whose progress the host has not been shown yet.
  int repeatDue;
  int repeatSearches;
  int publishDue;
  // loopFastKernel's signals, counted over the run: blocks whose pass of an iteration is done,
  // reducing blocks done, and the iteration whose update is done.
  unsigned long long loopArrived, loopReduced, loopDone;
  // With the SSE trace: blocks past an iteration's SSE pass (or leaving it to the graph), the
  // iteration whose trace entry is published, and 1 when loopFastKernel left an iteration's SSE
  // to the graph's sseKernel and publishKernel (it left the loop for re-seeding).
  unsigned long long loopSse, loopPublished;
  int sseDue;
};

/// Pinned mapped host memory shared with the running graph.
struct Mapped {
  int completed;  // iterations whose trace entry is in `trace` (device writes)
  int cancel;     // host writes 1 to stop the loop at the next iteration's end
};

/// The box of a tile of the fast pass (see warpCandidates): per feature the least and greatest
/// x~_q over the tile's points, and an upper and a lower bound of ||x~||^2 over the box (the
/// lower one for the mixed modes' reliability classes). tileBoxKernel computes every tile's once
/// per run.
template <int DT>
struct alignas(16) Box {
  float lo[DT], hi[DT];
  float norm, normLo;
  /// The greatest |x~_q| over the box.
  __device__ float extent(int q) const { return fmaxf(fabsf(lo[q]), fabsf(hi[q])); }
  /// Every feature's extent: X_q = extent(q), the X of shiftedMargin and normMargin. (Each
  /// centre's bounds take them afresh: computed once per tile and kept across the centres, they
  /// cost the uniform fp16 / bf16 passes 1.6 KB more code, ptxas.)
  __device__ void extents(float (&X)[DT]) const {
#pragma unroll
    for (int q = 0; q < DT; ++q) X[q] = extent(q);
  }
};

template <class LowT, class HighT, class WT, class LabelT>
struct Args {
  static constexpr bool kFallback = !std::is_void_v<HighT>;
  using H = std::conditional_t<kFallback, HighT, double>;

  const LowT* xl;          // N x D low-precision rows (== xw when LowT == WT)
  const WT* xw;            // N x D working-precision rows
  const double* x64;       // N x D original rows for the SSE (== xw when WT == double)
  DeviceLookup lookup;     // or the SSE's rows rebuilt from the image (width 0: not)
  LabelT* labels;          // N labels, updated in place
  LabelT* twoAgo;          // N labels of two iterations earlier, updated in place
  WT* cw;                  // K x D centres in W
  const WT* cInit;         // K x D initial centres in W
  LowT* cl;                // K x D fl_low(c_W)
  LowT* ccl;               // K ||c~||^2 in low precision
  H* ch;                   // K x D centres in H (mixed modes)
  H factor;                // reliability factor rho 2 gamma_{D+2}(u_low), in H
  LowT sureFactor;         // packed pass: factor rounded up with margin, in LowT (see below)
  LowT sureFloor;          // packed pass: smallest normal LowT, the threshold's absolute slack
  LowT fallFactor;         // packed pass: factor rounded down with margin, in LowT
  LowT fallFloor;          // packed pass: -sureFloor
  WT* partialSum;          // (K x D) x B block partials, element-major
  unsigned* partialCount;  // K x B
  WT* scratch;             // B x (2 K D) Kahan accumulators when they do not fit in shared memory
  unsigned* scratchCount;  // B x K
  WT* sums;                // K x D
  long long* counts;       // K
  double* ssePartial;      // B
  DeviceState* state;
  TraceEntry* trace;      // maxIterations entries (device)
  TraceEntry* traceHost;  // maxIterations entries (mapped host memory)
  Mapped* mapped;         // mapped host memory
  long long n;
  long long chunk;  // points per block of the generic assignment pass and of the SSE pass
  // assignFastKernel's tiles (see there): the rows as an image tileW points wide and tileRows
  // high, cut into tiles of kTileRows rows x kTileGroups groups of kFastPoints points; tileCols
  // tiles per band of kTileRows rows, `tiles` in all (< 2^30).
  int tileW, tileRows, tileCols, tiles;
  unsigned tileColsMagic;  // tile / tileCols as umulhi(tile, magic) with two shifts (FastDivisor)
  int tileColsShift1, tileColsShift2;
  int d, k, blocks, maxIterations;
  int sharedAcc;      // 1: per-warp accumulators in shared memory; 0: scratch, warps in turn
  int sharedCentres;  // 1: centres staged in shared memory
  int fastSlotShift;  // assignFastKernel: log2 of the accumulator slots per warp
  // assignFastKernel's centre pruning (see warpCandidates): on/off (KMeansParams::useBounds) and
  // its margins, rounded up to float: err * (bound on ||x~||^2 + ||c~||^2) + 2^-20 bounds how far
  // a pair's value can be from the exact ||x~ - c~||^2 (rounding of the expanded formula and of
  // the bound arithmetic; uniform fp16 / bf16: pruneShift's margin, how far the value less the
  // rounding of the point's norm can be from ||x~ - c~||^2 + B_j, see centreBounds and
  // shiftedMargin); eta *
  // (||x~|| + ||c~||) bounds ||x - x~|| + ||c - c~|| (mixed modes, whose fallback value comes
  // from the W rows); thr * (||x~||^2 + ||c~||^2) bounds the
  // reliability threshold fl_H(factor s) from above.
  int prune;
  float pruneErr, pruneEta, pruneThr;
  ShiftMargin pruneShift;
  // Mixed modes (see centreBounds): errH * (||x~||^2 + ||c~||^2) + 2^-20 bounds the rounding of
  // the direct formula in H and of the bounds in float; rel1 <= rho' / (rho' + 1) and rel2 >=
  // rho' / (rho' - 1) for rho' = rho (1 - 1.05 gamma_{D+1}(u_low) - 2^-16) (1 - 2 u_H); thrLo
  // (||x~||^2 + ||c~||^2) bounds fl_H(factor s) from below.
  float pruneErrH, pruneRel1, pruneRel2, pruneThrLo;
  Box<kFastD>* boxes;  // the fast pass's tile boxes (tiles of them) when it prunes
  // Tiles with one winner (see assignFastKernel), when the fast pass prunes, in every mode, else
  // null: per tile the sum of its points (D values in W, as warpSum8 adds them) and its label
  // state (bits 0-14: the label all its points took in the last assignment, 16-30: in the one
  // before; kNoTileLabel when they did not all take one, or the tile is not whole).
  WT* tileSums;
  unsigned* tileState;
  // Re-seeding's candidate lists (reseedListKernel): list b holds up to reseedList points, the
  // farthest first, at reseedI / reseedD[b reseedList ...], and reseedLen[b] their count, plus
  // kReseedMore when block b had eligible points beyond them; reseedBlocks lists.
  long long* reseedI;
  WT* reseedD;
  int* reseedLen;
  int reseedBlocks, reseedList;
  int traceSse, detectCycles;
  // The repeat rule (KMeansParams::detectRepeats), else null: the hashes of the last
  // kRepeatWindow iterations' centres (slot t % kRepeatWindow: iteration t's) and the copy of the
  // candidate's centres.
  unsigned long long* repeatHashes;
  WT* repeatCopy;
  int hostLoop;  // 1: the host drives the loop (no graph, no conditional nodes to set)
  double tolerance;
  cudaGraphConditionalHandle whileHandle;
  cudaGraphConditionalHandle ifHandle;
  // The inner loop of the graph, which exists without the SSE trace and the persistent loop
  // (Run::buildGraph, hasInnerLoop).
  cudaGraphConditionalHandle innerHandle;
  int persistent;  // 1: loopFastKernel runs the iterations (Run::choosePersistent)
};

/// Whether the graph has the inner loop of `a.innerHandle`.
template <class A>
__host__ __device__ inline bool hasInnerLoop(const A& a) {
  return !a.traceSse && !a.persistent;
}

// ---- small device helpers ---------------------------------------------------------------------

// loopFastKernel's signals between blocks: a release add or store after the block's writes
// (thread 0, past a block barrier), and an acquire wait by thread 0 that the whole block then
// passes (the same pattern as cooperative_groups' grid barrier).
__device__ __forceinline__ unsigned long long loadAcquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void addRelease(unsigned long long* p, unsigned long long v) {
  asm volatile("red.release.gpu.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void storeRelease(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void waitAtLeast(const unsigned long long* p,
                                            unsigned long long target) {
  if (threadIdx.x == 0)
    while (loadAcquire(p) < target) {
    }
  __syncthreads();
}

// The host's cancel flag, read from mapped memory: by publishKernel when it starts, so that the
// read's round trip over the bus overlaps its work, and otherwise by reduceKernel's last block,
// which does nothing else, for the update that follows it (DeviceState::cancelSeen).
template <class A>
__device__ int readCancel(const A& a) {
  return *reinterpret_cast<volatile int*>(&a.mapped->cancel);
}

template <class T>
using CompareT = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Block-wide sums of the pass's three integer counters, each added once per block to the loop
// state (integer atomics: exact in any order). `totals` is a shared array of three that the
// kernel zeroed before an earlier __syncthreads; every thread of the block calls this once.
// Only thread 0 reads the totals, after the barrier, and nobody writes them afterwards, so the
// block has no shared-memory hazard (one call per kernel, unlike a helper with its own
// __shared__ variable called several times in a row).
__device__ inline void addBlockCounts(unsigned changed, unsigned fallbacks, unsigned cycleDiff,
                                      unsigned* totals, DeviceState* state) {
  for (int o = 16; o > 0; o >>= 1) {
    changed += __shfl_down_sync(0xffffffffu, changed, o);
    fallbacks += __shfl_down_sync(0xffffffffu, fallbacks, o);
    cycleDiff += __shfl_down_sync(0xffffffffu, cycleDiff, o);
  }
  if ((threadIdx.x & 31) == 0) {
    if (changed) atomicAdd(&totals[0], changed);
    if (fallbacks) atomicAdd(&totals[1], fallbacks);
    if (cycleDiff) atomicAdd(&totals[2], cycleDiff);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    if (totals[0]) atomicAdd(&state->changed, (unsigned long long)totals[0]);
    if (totals[1]) atomicAdd(&state->fallbacks, (unsigned long long)totals[1]);
    if (totals[2]) atomicAdd(&state->cycleDiff, (unsigned long long)totals[2]);
  }
}

// Sums of up to 8 values over the 32 lanes of a warp (v[q] of every lane, for q < DT), with 9
// shuffles instead of 5 DT: each of the first three butterfly steps halves the values a lane
// carries (the lane keeps one half, its partner the other), the last two sum the single value
// left. Lane l ends with the total of value q = 4 bit4(l) + 2 bit3(l) + bit2(l) (returned in
// `q`, which may be >= DT: padding). The order of the additions is fixed by the lanes.
template <int DT, class T>
__device__ inline T warpSum8(const T (&v)[DT], int lane, int& q) {
  static_assert(DT >= 1 && DT <= 8, "warpSum8 carries at most 8 values");
  T a[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) a[i] = i < DT ? v[i] : T(0);
#pragma unroll
  for (int width = 4, bit = 16; width >= 1; width >>= 1, bit >>= 1) {
    const bool upper = lane & bit;
#pragma unroll
    for (int i = 0; i < width; ++i) {
      const T keep = upper ? a[i + width] : a[i];
      const T send = upper ? a[i] : a[i + width];
      a[i] = keep + __shfl_xor_sync(0xffffffffu, send, bit);
    }
  }
  a[0] = a[0] + __shfl_xor_sync(0xffffffffu, a[0], 2);
  a[0] = a[0] + __shfl_xor_sync(0xffffffffu, a[0], 1);
  q = ((lane >> 4) & 1) * 4 + ((lane >> 3) & 1) * 2 + ((lane >> 2) & 1);
  return a[0];
}

// The sum of v over the 32 lanes of a warp.
__device__ inline unsigned warpSumCount(unsigned v) {
#if __CUDA_ARCH__ >= 800
  return __reduce_add_sync(0xffffffffu, v);
#else
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
#endif
}

// Centre entry e's low copy (returned) and high copy, from its value w in W.
template <class A, class W>
__device__ inline auto storeCentreCopies(const A& a, int e, W w) {
  using LowT = std::remove_cv_t<std::remove_pointer_t<decltype(a.cl)>>;
  using H = std::remove_cv_t<std::remove_pointer_t<decltype(a.ch)>>;
  const LowT l = convert<LowT>(w);
  a.cl[e] = l;
  if (a.ch) a.ch[e] = convert<H>(w);
  return l;
}

// Low and high copies of the centres and the low norms, from cw. Block-strided over K.
template <class A>
__device__ void prepareCentres(const A& a) {
  using LowT = std::remove_cv_t<std::remove_pointer_t<decltype(a.cl)>>;
  for (int j = threadIdx.x; j < a.k; j += blockDim.x) {
    for (int q = 0; q < a.d; ++q) storeCentreCopies(a, j * a.d + q, a.cw[j * a.d + q]);
    a.ccl[j] = squaredNorm<LowT>(a.cl + j * a.d, a.d);
  }
}

// ---- kernels -----------------------------------------------------------------------------------

/// Resets the loop state and starts from the initial centres. One block.
template <class A>
__global__ void resetKernel(A a) {
  if (threadIdx.x == 0) {
    *a.state = DeviceState{};
    a.mapped->completed = 0;
  }
  for (int e = threadIdx.x; e < a.k * a.d; e += blockDim.x) a.cw[e] = a.cInit[e];
  __syncthreads();
  prepareCentres(a);
}

// ---- the tiled assignment (wide rows) -----------------------------------------------------------
//
// For D >= kTiledMinD the generic pass labels each tile of kAssignThreads points cooperatively:
// 64 points at a time against 64 centres at a time, every pair's dot product from tile_math.cuh
// (dotProduct's chain, the rows staged through shared memory), then expandedDistance and, in a
// mixed mode, the reliability test and directDistance from the point's row in W and the centre's
// in H: the pair values of the per-thread scan, bit for bit. Each thread keeps the best of its
// 4 centres per point in index order; the 16 threads of a point then combine theirs by
// (distance under closer(), index), which is the sequential scan's result: the first index
// among the closest, NaN last.

inline constexpr int kTiledMinD = 16;
static_assert(kAssignThreads == tiles::kThreads);

/// Combines the running best (d, j) with another thread's (od, oj), as the sequential scan would
/// over their indices: j < 0 is "none yet".
template <class D>
__device__ inline void combineBest(D& d, int& j, D od, int oj) {
  if (oj < 0) return;
  if (j < 0 || closer(od, d) || (!closer(d, od) && oj < j)) d = od, j = oj;
}

/// Labels of points [tile, tile + kAssignThreads) (below `end`) into best[0 ..), and their
/// fallbacks into `fallbacks` (per thread: the pairs this thread evaluated). Every thread of
/// the block calls it; `stage` holds tiles::kStageBytes<LowT>, `norms` 64 LowT. Ends with a
/// barrier.
template <class A, class LowT, class H>
__device__ void tiledLabels(const A& a, long long tile, long long end, const LowT* cl,
                            const LowT* ccl, const H* ch, unsigned char* stage, LowT* norms,
                            int* best, unsigned& fallbacks) {
  using namespace tiles;
  constexpr bool kFallback = A::kFallback;
  using DistT = std::conditional_t<kFallback, H, CompareT<LowT>>;
  using L = typename Lanes<LowT>::type;
  constexpr int kLanes = Lanes<LowT>::count;
  const int d = a.d, k = a.k;
  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  // Sub-tiles wholly past `end` are skipped (the condition is the same for the whole block).
  for (int sub = 0; sub < kAssignThreads && tile + sub < end; sub += kTile) {
    const long long p0 = tile + sub;
    if (sub > 0) __syncthreads();  // the last sub-tile's norms are read until here
    if (threadIdx.x < kTile && p0 + threadIdx.x < end)
      norms[threadIdx.x] = squaredNorm<LowT>(a.xl + (p0 + threadIdx.x) * d, d);
    DistT bestD[kPer];
    int bestJ[kPer];
#pragma unroll
    for (int m = 0; m < kPer; ++m) bestJ[m] = -1;
    for (int c0 = 0; c0 < k; c0 += kTile) {
      L acc[kPer][kPer / kLanes];
      tileDots<LowT>(acc, stage, a.xl, p0, end, cl, c0, k, d);  // its barriers publish norms
      // The expanded distance of the thread's pair (m, n), centre j.
      auto expanded = [&](int m, int n, int j) {
        const LowT dot = laneOf<L, LowT>(acc[m][n / kLanes], n % kLanes);
        return expandedDistance<LowT>(norms[ty * kPer + m], ccl[j], dot);
      };
      // Takes the thread's pairs of its point m into the point's running best, in index order,
      // each pair's value from value(i, n, j) (point i, centre j = c0 + tx kPer + n).
      // Pairs n with bit n of `skip` set are left out.
      auto consider = [&](int m, auto value, unsigned skip = 0) {
        const long long i = p0 + ty * kPer + m;
#pragma unroll
        for (int n = 0; n < kPer; ++n) {
          const int j = c0 + tx * kPer + n;
          if (i >= end || j >= k || (skip >> n & 1)) continue;
          const DistT dj = value(i, n, j);
          if (bestJ[m] < 0 || closer(dj, bestD[m])) bestD[m] = dj, bestJ[m] = j;
        }
      };
      if constexpr (kFallback) {
        // Which pairs fall back; then the pairs' values, the expanded distance or the direct
        // one. When at least half of the block's threads have a falling pair (bf16 at large D:
        // all of them), the block sweeps the tile's rows in H through shared memory
        // (directSweep: the same chain, bit for bit), kRows points of a thread at a time, and
        // takes the values in index order; otherwise the warp's lanes share out its falling
        // pairs, each reading its two rows.
        unsigned fell = 0;
#pragma unroll
        for (int m = 0; m < kPer; ++m)
#pragma unroll
          for (int n = 0; n < kPer; ++n) {
            const long long i = p0 + ty * kPer + m;
            const int j = c0 + tx * kPer + n;
            if (i < end && j < k && fallsBack<LowT, H>(expanded(m, n, j), a.factor))
              fell |= 1u << (m * kPer + n);
          }
        fallbacks += __popc(fell);
        if (__syncthreads_count(fell != 0) >= kAssignThreads / 2) {
          constexpr int kSliceH = kSliceHOf<LowT, H>;
          static_assert(2 * kSliceH * (kTile + kPad) * sizeof(H) <= kStageBytes<LowT>);
          auto* xs = reinterpret_cast<H(*)[kTile + kPad]>(stage);
          auto* cs = xs + kSliceH;
          // Points h kRows .. of the thread (h a constant, so that the arrays stay in registers).
          auto take = [&](auto h, const H(&direct)[kRows][kPer]) {
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
              const int m = decltype(h)::value * kRows + r;
              consider(m, [&](long long, int n, int j) {
                return fell >> (m * kPer + n) & 1 ? direct[r][n]
                                                  : convert<H>(expanded(m, n, j).distance);
              });
            }
          };
          static_assert(kPer / kRows == 2);
#pragma unroll 1
          for (int h = 0; h < kPer / kRows; ++h) {
            H direct[kRows][kPer];
            directSweep<kSliceH>(direct, xs, cs, a.xw, p0, end, ch, c0, k, d, h);
            if (h == 0)
              take(std::integral_constant<int, 0>{}, direct);
            else
              take(std::integral_constant<int, 1>{}, direct);
          }
        } else {
          // The warp's falling pairs, 32 at a time: lane l takes the l-th of them in (lane,
          // slot) order, so that one pass of directDistance's chain serves up to 32 pairs
          // instead of one (a lane's slots would otherwise each cost the whole warp a chain).
          // The pairs that do not fall go first, in index order (consider); then the owner takes
          // each falling pair's value into its point's best with combineBest, which breaks ties
          // by index: the scan's result, the first index among the closest.
          static_assert(kAssignThreads / 32 * 32 * (sizeof(H) + sizeof(int)) <= kStageBytes<LowT>);
          const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
          H* value = reinterpret_cast<H*>(stage) + warp * 32;
          int* pair =
              reinterpret_cast<int*>(reinterpret_cast<H*>(stage) + kAssignThreads) + warp * 32;
#pragma unroll
          for (int m = 0; m < kPer; ++m)
            consider(
                m, [&](long long, int n, int j) { return convert<H>(expanded(m, n, j).distance); },
                fell >> (m * kPer) & ((1u << kPer) - 1));
          unsigned pending = fell;
          for (;;) {
            const int count = __popc(pending);
            int inclusive = count;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
              const int v = __shfl_up_sync(0xffffffffu, inclusive, o);
              if (lane >= o) inclusive += v;
            }
            const int total = __shfl_sync(0xffffffffu, inclusive, 31);
            if (total == 0) break;
            // This round's slots of the lane: those ranked below 32, in slot order.
            unsigned mine = 0;
            for (int rank = inclusive - count, rest = int(pending); rest != 0 && rank < 32;
                 ++rank) {
              const int slot = __ffs(rest) - 1;
              rest &= rest - 1;
              mine |= 1u << slot;
              pair[rank] = (ty * kPer + slot / kPer) << 6 | (tx * kPer + slot % kPer);
            }
            __syncwarp();
            if (lane < total) {
              const int code = pair[lane];
              const long long i = p0 + (code >> 6);
              const int j = c0 + (code & 63);
              value[lane] = directDistance<H>(a.xw + i * d, ch + std::size_t(j) * d, d);
            }
            __syncwarp();
            int rank = inclusive - count;
#pragma unroll
            for (int m = 0; m < kPer; ++m)
#pragma unroll
              for (int n = 0; n < kPer; ++n)
                if (mine >> (m * kPer + n) & 1)
                  combineBest(bestD[m], bestJ[m], value[rank++], c0 + tx * kPer + n);
            pending &= ~mine;
            __syncwarp();  // the next round writes pair[] and value[] again
          }
          __syncthreads();  // the next tileDots writes the stage again
        }
      } else {
#pragma unroll
        for (int m = 0; m < kPer; ++m)
          consider(m, [&](long long, int n, int j) {
            return convert<DistT>(expanded(m, n, j).distance);
          });
      }
    }
#pragma unroll
    for (int m = 0; m < kPer; ++m) {
      for (int o = kSide / 2; o > 0; o >>= 1) {
        const DistT od = __shfl_xor_sync(0xffffffffu, bestD[m], o);
        const int oj = __shfl_xor_sync(0xffffffffu, bestJ[m], o);
        combineBest(bestD[m], bestJ[m], od, oj);
      }
      if (tx == 0) best[sub + ty * kPer + m] = bestJ[m];
    }
  }
  __syncthreads();
}

/// Assignment and partial sums, one pass over the data (or, with assign = 0, the partial sums of
/// the current labels only). Grid: a.blocks blocks of kAssignThreads; block b owns the
/// contiguous points [b chunk, (b + 1) chunk) and walks them in tiles of kAssignThreads, one
/// point per thread. Shared memory: the centres (when a.sharedCentres) and, when a.sharedAcc,
/// one Kahan accumulator (sum, compensation, count) per warp.
/// Determinism: each warp adds its 32 points to its accumulator in lane order (Kahan in W);
/// at the end the block adds its warps' folded sums (sum - compensation) in warp order and
/// writes them to partialSum[e * blocks + b]. Without shared accumulators the block adds to one
/// accumulator in global scratch in the same point order, the warps splitting the features. The
/// order depends only on N, K, D and, for the tiled pass (one wave of resident blocks), the
/// device's SM count and the pass's blocks per SM.
/// Registers: the tiled pass of the mixed modes asks for two blocks per SM (128 registers); every
/// other variant asks nothing (0 emits no .minnctapersm): any request, even of one block, made
/// ptxas spend more registers on them (measured when the uniform fp16 tiled pass, left at 64
/// registers, ran four blocks per SM and was faster so; since tileDots prefetches the next slice
/// it takes 128). fp64's tiled pass takes 168 (one block per SM); asking two was no faster
/// overall (README, Benchmarks).
template <class LowT, class HighT, class WT, class LabelT, int DT, bool kTiled = false>
__global__ void __launch_bounds__(kAssignThreads, kTiled && !std::is_void_v<HighT> ? 2 : 0)
    assignKernel(Args<LowT, HighT, WT, LabelT> a, int assign) {
  using A = Args<LowT, HighT, WT, LabelT>;
  using H = typename A::H;
  constexpr bool kFallback = A::kFallback;
  constexpr int kDim = DT > 0 ? DT : kMaxD;
  extern __shared__ __align__(16) unsigned char smem[];

  const int d = DT > 0 ? DT : a.d;
  const int k = a.k;
  const int kd = k * d;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int iteration = a.state->iteration + 1;
  if (!assign && a.state->empty == 0) return;
  __shared__ unsigned totals[3];
  if (threadIdx.x < 3) totals[threadIdx.x] = 0;

  // Shared layout: [acc sums kWarps x KD][acc comp kWarps x KD][counts kWarps x K]
  //                [cl KD][ch KD][ccl K]
  unsigned char* p = smem;
  WT* accSum;
  WT* accComp;
  unsigned* accCount;
  if (a.sharedAcc) {
    accSum = reinterpret_cast<WT*>(p) + std::size_t(warp) * kd;
    accComp = reinterpret_cast<WT*>(p) + std::size_t(kWarps) * kd + std::size_t(warp) * kd;
    p += sizeof(WT) * 2 * kWarps * kd;
    accCount = reinterpret_cast<unsigned*>(p) + warp * k;
    p += sizeof(unsigned) * kWarps * k;
    p = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(p) + 15) & ~15ull);
  } else {
    accSum = a.scratch + std::size_t(blockIdx.x) * 2 * kd;
    accComp = accSum + kd;
    accCount = a.scratchCount + std::size_t(blockIdx.x) * k;
  }
  const LowT* cl = a.cl;
  const LowT* ccl = a.ccl;
  const H* ch = a.ch;
  if (assign && a.sharedCentres) {
    H* sch = reinterpret_cast<H*>(p);
    p += sizeof(H) * (kFallback ? kd : 0);
    LowT* scl = reinterpret_cast<LowT*>(p);
    p += sizeof(LowT) * kd;
    LowT* sccl = reinterpret_cast<LowT*>(p);
    for (int e = threadIdx.x; e < kd; e += blockDim.x) {
      scl[e] = a.cl[e];
      if constexpr (kFallback) sch[e] = a.ch[e];
    }
    for (int j = threadIdx.x; j < k; j += blockDim.x) sccl[j] = a.ccl[j];
    cl = scl;
    ccl = sccl;
    if constexpr (kFallback) ch = sch;
  }
  {
    WT* s = a.sharedAcc ? reinterpret_cast<WT*>(smem) : accSum;
    const int total = a.sharedAcc ? 2 * kWarps * kd : 2 * kd;
    for (int e = threadIdx.x; e < total; e += blockDim.x) s[e] = WT(0);
    unsigned* c = a.sharedAcc ? accCount - warp * k : accCount;
    const int totalC = a.sharedAcc ? kWarps * k : k;
    for (int e = threadIdx.x; e < totalC; e += blockDim.x) c[e] = 0;
  }
  __syncthreads();

  const long long begin = blockIdx.x * a.chunk;
  const long long end = min(a.n, begin + a.chunk);
  unsigned changed = 0, fallbacks = 0, cycleDiff = 0;
  // The tiled assignment's stage, the norms of its 64 points and the tile's labels.
  constexpr std::size_t kTiledBytes = kTiled ? tiles::kStageBytes<LowT> : 16;
  __shared__ __align__(16) unsigned char tiledStage[kTiledBytes];
  __shared__ LowT tiledNorms[kTiled ? tiles::kTile : 1];
  __shared__ int tiledBest[kTiled ? kAssignThreads : 1];
  __shared__ int tileLabels[kAssignThreads];  // the tile's labels, for global accumulators
  static_assert(kWarps * 31 >= kMaxD, "the counting thread must have no feature");
  for (long long tile = begin; tile < end; tile += kAssignThreads) {
    const long long i = tile + threadIdx.x;
    int label = -1;
    if constexpr (kTiled)
      if (assign)
        tiledLabels(a, tile, end, cl, ccl, ch, tiledStage, tiledNorms, tiledBest, fallbacks);
    if (i < end) {
      if (assign) {
        int best = 0;
        if constexpr (kTiled) {
          best = tiledBest[threadIdx.x];
        } else {
          LowT x[kDim];
          const LowT* xr = a.xl + i * d;
          for (int q = 0; q < d; ++q) x[q] = xr[q];
          const LowT xx = squaredNorm<LowT>(x, d);
          if constexpr (kFallback) {
            H xh[kDim];
            const WT* wr = a.xw + i * d;
            for (int q = 0; q < d; ++q) xh[q] = convert<H>(wr[q]);
            H bestD{};
            for (int j = 0; j < k; ++j) {
              const LowT dot = dotProduct<LowT>(x, cl + j * d, d);
              bool fell = false;
              const H dj = mixedDistance<LowT, H>(expandedDistance<LowT>(xx, ccl[j], dot), xh,
                                                  ch + j * d, d, a.factor, &fell);
              fallbacks += fell;
              if (j == 0 || closer(dj, bestD)) bestD = dj, best = j;
            }
          } else {
            CompareT<LowT> bestD{};
            for (int j = 0; j < k; ++j) {
              const LowT dot = dotProduct<LowT>(x, cl + j * d, d);
              const CompareT<LowT> dj =
                  convert<CompareT<LowT>>(expandedDistance<LowT>(xx, ccl[j], dot).distance);
              if (j == 0 || closer(dj, bestD)) bestD = dj, best = j;
            }
          }
        }
        label = best;
        const int old = a.labels[i];
        if (iteration == 1) {
          changed += 1;
        } else {
          changed += old != best;
          if (iteration >= 3) cycleDiff += int(a.twoAgo[i]) != best;
          a.twoAgo[i] = LabelT(old);
        }
        a.labels[i] = LabelT(best);
      } else {
        label = a.labels[i];
      }
    }
    // Warp-ordered Kahan accumulation of this tile's points (lane order within each warp).
    auto accumulate = [&]() {
      const long long base = tile + warp * 32;
      for (int l = 0; l < 32; ++l) {
        const int lab = __shfl_sync(0xffffffffu, label, l);
        if (lab < 0) break;
        const WT* xr = a.xw + (base + l) * d;
        WT* s = accSum + lab * d;
        WT* c = accComp + lab * d;
        for (int q = lane; q < d; q += 32) {
          const WT y = xr[q] - c[q];
          const WT t = s[q] + y;
          c[q] = (t - s[q]) - y;
          s[q] = t;
        }
        if (lane == 0) accCount[lab] += 1;
      }
    };
    if (a.sharedAcc) {
      accumulate();
    } else {
      // One accumulator in global scratch: every warp adds all the tile's points in the same
      // order (warp order, then lane order, as above), each to its own features (q = warp mod
      // kWarps, one per lane), so the warps run at once and give the sums of warps taking turns
      // bit for bit. The last thread of the last warp, which no feature needs (D <= 128), counts.
      tileLabels[threadIdx.x] = label;
      __syncthreads();
      const int q = warp + kWarps * lane;
      const bool counts = warp == kWarps - 1 && lane == 31;
      if (q < d || counts) {
        for (int l = 0; l < kAssignThreads; ++l) {
          const int lab = tileLabels[l];
          if (lab < 0) break;
          if (counts) {
            accCount[lab] += 1;
            continue;
          }
          WT* sq = accSum + lab * d + q;
          WT* cq = accComp + lab * d + q;
          const WT sv = *sq;
          const WT y = a.xw[(tile + l) * d + q] - *cq;
          const WT t = sv + y;
          *cq = (t - sv) - y;
          *sq = t;
        }
      }
      __syncthreads();
    }
  }
  __syncthreads();

  // Fold: per element, warps in order (shared accumulators) or the single accumulator.
  for (int e = threadIdx.x; e < kd; e += blockDim.x) {
    WT v;
    if (a.sharedAcc) {
      const WT* s = reinterpret_cast<const WT*>(smem);
      const WT* c = s + std::size_t(kWarps) * kd;
      v = s[e] - c[e];
      for (int w = 1; w < kWarps; ++w) v = v + (s[w * kd + e] - c[w * kd + e]);
    } else {
      v = accSum[e] - accComp[e];
    }
    a.partialSum[std::size_t(e) * a.blocks + blockIdx.x] = v;
  }
  for (int j = threadIdx.x; j < k; j += blockDim.x) {
    unsigned c = 0;
    if (a.sharedAcc) {
      const unsigned* base = accCount - warp * k;
      for (int w = 0; w < kWarps; ++w) c += base[w * k + j];
    } else {
      c = accCount[j];
    }
    a.partialCount[std::size_t(j) * a.blocks + blockIdx.x] = c;
  }
  if (assign) addBlockCounts(changed, fallbacks, cycleDiff, totals, a.state);
}

/// One centre of the fast pass in shared memory: the low-precision row and its squared norm,
/// padded to 16 bytes so that a thread loads it with vector loads.
template <class LowT, int DT>
struct alignas(16) LowCentre {
  LowT c[DT];
  LowT cc;
};
/// One centre of the fast pass for its bounds (centreBounds), computed once per pass instead of
/// once per tile: the row and norm as floats, the norm's rounding and (mixed passes) the norm's
/// square root. See kBoundCentres.
template <int DT>
struct alignas(16) BoundCentre {
  float c[DT];
  float cc;
  float shift;
  float root;
};
/// One centre's row in the fallback precision H, padded likewise.
template <class H, int DT>
struct alignas(16) HighCentre {
  H c[DT];
};

// ---- the packed pass (fp16 and bf16 distances, two points per instruction) -------------------
//
// With LowT = __half or __nv_bfloat16 the fast pass evaluates two of a thread's points against
// one centre at once with half2 / bfloat162 arithmetic: points 2h and 2h + 1 in the low and high
// lanes of one register per feature, the centre's features broadcast to both. Each lane of a
// packed fma rounds exactly as the scalar fma of the shared formulas, so the two lanes hold the
// two points' distances bit for bit. The argmin runs on the packed values too: per lane a running
// minimum and its index, replaced by a strictly smaller value (per-lane masks select value and
// index) as the centres come in increasing order, which is the sequential scan with ties to the
// lowest index. A centre costs the same whether or not its neighbours are candidates (an earlier
// layout, two centres per register, paid for both centres of a pair when either was a candidate:
// a pruned tile scans 2-5 of its 32 centres, so most pairs held only one).
//
// Mixed modes: the reliability test d^ > fl_H(f s) is replaced, for most pairs, by a packed test
// that is sufficient: d^ > fl_low(f' s + m), with f' >= f (1 + 4 u_low) rounded up to LowT and m
// the smallest normal LowT. Since f' s + m is in LowT's normal range, fl_low(f' s + m) >=
// (f' s + m)(1 - u_low) >= f s (1 + 4 u_low)(1 - u_low) > f s (1 + u_H) >= fl_H(f s) for s >= 0
// (and = m > 0 = fl_H(f s) for s = 0). Pairs that pass are reliable and their distance is d^.
// Pairs that do not are marked in a bit set (16 centres and two points per 32-bit word) and
// evaluated afterwards with the exact scalar code (mixedDistance), which decides the fallback, so
// the fallback count is the exact one. Valid when no distance can overflow: the host takes this
// pass only when every feature's magnitude is at most kFastMaxAbs<LowT> (then s, 2 x^T c and
// d^ are finite and d = fma(-2, dot, s) equals s - 2 dot, since 2 dot is exact).

template <class LowT>
inline constexpr bool kPackedLow =
    std::is_same_v<LowT, __half> || std::is_same_v<LowT, __nv_bfloat16>;

/// Whether the fast pass takes the packed path: every fp16 / bf16 mode except bf16 with a
/// fallback. bf16's reliability factor is 8 times fp16's, so a large share of the pairs is not
/// vouched for by the packed test and the exact re-evaluation costs more than packing saves
/// (H200, 12 MP, K = 32: bf16>fp32 1.22 ms per iteration packed, 0.62 ms scalar; measured again
/// with the packed test for falling pairs: 0.455 packed, 0.363 scalar).
template <class LowT, bool kFallback>
inline constexpr bool kPackedPass = std::is_same_v<LowT, __half> ||
                                    (std::is_same_v<LowT, __nv_bfloat16> && !kFallback);

/// Whether the fast pass's bounds are shifted by the point's norm rounding (centreBounds): the
/// uniform fp16 and bf16 passes.
template <class LowT, bool kFallback>
inline constexpr bool kShiftedBounds = !kFallback && kPackedLow<LowT>;

/// Whether a mixed pass bounds d^ with shiftedMargin plus normMargin around ||x~ - c~||^2 + B_j
/// (the fp16 / bf16 mixed passes) instead of the reliability test's error bound E: see
/// centreBounds.
template <class LowT, bool kFallback>
inline constexpr bool kTightMixed = (kFallback && kPackedLow<LowT>);

/// Whether the scan takes the direct formula alone for the centres that may win and whose pairs
/// with the tile's box all fall back (class falls, warpCandidates' third word set), instead of
/// evaluating d^ and its test first: the bf16 mixed passes, whose scalar d^ costs most. H200,
/// 12 MP, K = 32, two runs each against ef31738: bf16>fp32 0.2943 / 0.2939 -> 0.2805 / 0.2801 ms
/// per iteration, bf16>fp64 0.3722 / 0.3723 -> 0.3598 / 0.3601; fp32>fp64 went 0.1610 / 0.1612
/// -> 0.1685 / 0.1681, and in the packed scan (skipping the pair's packed d^) fp16>fp32 0.2140 /
/// 0.2142 -> 0.2161 / 0.2158 and fp16>fp64 0.2398 / 0.2395 -> 0.2515 / 0.2512.
template <class LowT, bool kFallback>
inline constexpr bool kFallsKnown = (kFallback && std::is_same_v<LowT, __nv_bfloat16>);

/// Candidate word sets per warp of the fast pass: the candidates, the centres that may win, and
/// with kFallsKnown the centres of class falls.
template <class LowT, bool kFallback>
inline constexpr int kCandidateSets = kFallsKnown<LowT, kFallback> ? 3 : 2;

/// Whether the fast pass's bounds read BoundCentre: every fp16 / bf16 pass, all of which need the
/// centre's norm rounding (kShiftedBounds, kTightMixed). fp16>fp64 took it first (H200, 12 MP,
/// K = 32: 0.2741 / 0.2743 ms per iteration against 0.2846 / 0.2832 without); fp16>fp32 and the
/// bf16 mixed passes were slower with it while their bounds used E (at d948c72: fp16>fp32
/// 0.2207 / 0.2204 -> 0.2243 / 0.2258 ms; bf16>fp64 0.4337 -> 0.4396), and faster once they
/// needed the norm rounding (against 6e607f1, two runs each: fp16>fp32 0.2150 / 0.2163 ->
/// 0.2142 / 0.2143, bf16>fp32 0.2970 / 0.2983 -> 0.2950 / 0.2951, bf16>fp64 0.3742 / 0.3731 ->
/// 0.3716 / 0.3727).
template <class LowT, class H, bool kFallback>
inline constexpr bool kBoundCentres =
    kShiftedBounds<LowT, kFallback> || kTightMixed<LowT, kFallback>;

/// Whether warpCandidates follows the box test with the pairwise test: where the distances are
/// fp32 or fp64 (fp64, fp32, fp32>fp64), and in the bf16 mixed passes. H200, 12 MP, K = 32, two
/// runs of each build: fp64 0.1717 / 0.1712 -> 0.1668 / 0.1673 ms per iteration, fp32 0.1165 /
/// 0.1166 -> 0.1158 / 0.1158, fp32>fp64 0.1744 / 0.1739 -> 0.1608 / 0.1612; with fp16 / bf16
/// distances uniform fp16 and bf16 were level, bf16>fp32 and bf16>fp64 level or slower (0.3538 /
/// 0.3523 -> 0.3578 / 0.3542), fp16>fp32 and fp16>fp64 slower (0.2215 / 0.2223 -> 0.2328 /
/// 0.2369, 0.2695 / 0.2692 -> 0.2783 / 0.2771): their margins were a far larger share of the gap
/// the test must clear. With the binade margins and kTightMixed (against 0cc0b26): bf16>fp64
/// 0.3578 / 0.3588 -> 0.3476 / 0.3482, bf16>fp32 0.2797 / 0.2791 -> 0.2785 / 0.2784, uniform
/// fp16 0.1161 / 0.1158 -> 0.1165 / 0.1165 and bf16 0.1494 / 0.1493 -> 0.1502 / 0.1497.
template <class LowT, bool kFallback>
inline constexpr bool kPairwiseTest =
    !kPackedLow<LowT> || (kFallback && std::is_same_v<LowT, __nv_bfloat16>);

template <class LowT>
struct Packed {
  using type = LowT;  // not packed: packedAssign is never instantiated for it
};
template <>
struct Packed<__half> {
  using type = __half2;
};
template <>
struct Packed<__nv_bfloat16> {
  using type = __nv_bfloat162;
};

/// Largest feature magnitude for which the fast passes' distances cannot overflow at D = 5:
/// s = ||x||^2 + ||c||^2 <= 10 M^2 stays finite (fp16: 10 * 64^2 = 40960 < 65504).
template <class LowT>
inline constexpr double kFastMaxAbs = std::is_same_v<LowT, __half> ? 64.0 : 1e18;
template <>
inline constexpr double kFastMaxAbs<double> = 1e150;

template <class T2>
__device__ inline unsigned bitsOf(T2 v) {
  unsigned u;
  memcpy(&u, &v, sizeof u);
  return u;
}
template <class T2>
__device__ inline T2 fromBits(unsigned u) {
  T2 v;
  memcpy(&v, &u, sizeof u);
  return v;
}
template <class LowT>
__device__ inline auto broadcast(LowT v) {
  using T2 = typename Packed<LowT>::type;
  return T2{v, v};
}
template <class LowT>
__device__ inline LowT lane(typename Packed<LowT>::type v, int hi) {
  return hi ? v.y : v.x;
}

/// The smallest LowT >= v (up) or the largest LowT <= v (v > 0 and finite), on the host.
template <class LowT>
LowT roundToLow(double v, bool up) {
  LowT r = Math<LowT>::from(v);
  const double got = Math<LowT>::toDouble(r);
  if (up ? got < v : got > v) {
    if constexpr (std::is_same_v<LowT, __half>) {
      __half_raw raw = r;
      raw.x = up ? raw.x + 1 : raw.x - 1;
      r = raw;
    } else {
      __nv_bfloat16_raw raw = r;
      raw.x = up ? raw.x + 1 : raw.x - 1;
      r = raw;
    }
  }
  return r;
}

/// Packed assignment of P points (rows w, in W) of one thread: best[p] gets the label, fallbacks
/// the exact fallback count of the valid points. The scan takes the candidates of `cand`
/// (warpCandidates' words); `win` holds the centres that may win (the others are candidates only
/// for their fallbacks). In mixed modes `win` may be null: then no centre may win, and the scan
/// only counts the fallbacks of the centres in `cand` (best[] is left without meaning).
///
/// Mixed modes: besides the packed test that vouches for reliable pairs (see above), a second
/// one vouches for falling ones: d^ < fl_low(f'' s - m) with f'' <= f (1 - 4 u_low) rounded down
/// to LowT and m the smallest normal LowT. If f'' s < m the threshold is <= 0 and d^ < 0 <=
/// fl_H(f s); otherwise fl_low(f'' s - m) <= f'' s - m + max(u_low f'' s, m) <= f'' s (1 + u_low)
/// <= f s (1 - 4 u_low)(1 + u_low) < f s (1 - u_H) <= fl_H(f s). Such a pair falls back without
/// the scalar re-evaluation: it is counted, and its direct distance is computed only when its
/// centre may win. The few pairs that neither test vouches for take the exact scalar formulas.
template <int P, class A, class LC, class HC, class WT, int DT>
__device__ inline void packedAssign(const A& a, const LC* scl, const HC* sch, const unsigned* cand,
                                    const unsigned* win, const WT (&w)[P][DT],
                                    const bool (&valid)[P], int (&best)[P], unsigned& fallbacks) {
  using LowT = std::remove_cv_t<std::remove_pointer_t<decltype(A::cl)>>;
  using T2 = typename Packed<LowT>::type;
  using H = typename A::H;
  constexpr bool kFallback = A::kFallback;
  static_assert(P % 2 == 0, "points go in twos");
  constexpr int P2 = P / 2;
  // Points 2h and 2h + 1 as the low and high lanes: x2[h][q] and their norms xx2[h]; per lane the
  // best value so far (bits of bestBits[h]) and its index (the halves of bestIdx[h]).
  T2 x2[P2][DT];
  T2 xx2[P2];
  unsigned bestBits[P2], bestIdx[P2];
  const T2 zero2 = broadcast<LowT>(Math<LowT>::from(0.0));
#pragma unroll
  for (int h = 0; h < P2; ++h) {
    // squaredNorm's sequence in each lane.
    T2 n = zero2;
#pragma unroll
    for (int q = 0; q < DT; ++q) {
      x2[h][q] = convertPair<T2>(w[2 * h][q], w[2 * h + 1][q]);
      n = __hfma2(x2[h][q], x2[h][q], n);
    }
    xx2[h] = n;
    bestBits[h] = bitsOf(broadcast<LowT>(Math<LowT>::from(__builtin_huge_val())));
    bestIdx[h] = 0xffffffffu;
  }
  const T2 minus2 = broadcast<LowT>(Math<LowT>::from(-2.0));
  const T2 sure2 = broadcast<LowT>(a.sureFactor);
  const T2 floor2 = broadcast<LowT>(a.sureFloor);
  const T2 fall2 = broadcast<LowT>(a.fallFactor);
  const T2 fallFloor2 = broadcast<LowT>(a.fallFloor);
  H slowD[kFallback ? P : 1];
  int slowJ[kFallback ? P : 1];
  if constexpr (kFallback) {
#pragma unroll
    for (int p = 0; p < P; ++p) slowD[p] = H(__builtin_huge_val()), slowJ[p] = 0x7fffffff;
  }
  // Chunks of 16 centres: the mixed modes' bit sets hold centre t0 + b at bit b for point 2h and
  // at bit 16 + b for point 2h + 1.
  for (int t0 = 0; t0 < a.k; t0 += 16) {
    const unsigned chunk = cand[t0 >> 5] >> (t0 & 16) & 0xffffu;
    if (chunk == 0) continue;
    unsigned sure[P2], falls[P2];
#pragma unroll
    for (int h = 0; h < P2; ++h) sure[h] = 0, falls[h] = 0;
    unsigned left = chunk;
    while (left) {
      const int b = __ffs(left) - 1;
      left &= left - 1;
      const int j = t0 + b;
      const LC c = scl[j];
      const unsigned index = unsigned(j) * 0x10001u;
      const unsigned bits = 0x10001u << b;
#pragma unroll
      for (int h = 0; h < P2; ++h) {
        T2 dot = zero2;
#pragma unroll
        for (int q = 0; q < DT; ++q) dot = __hfma2(x2[h][q], broadcast<LowT>(c.c[q]), dot);
        const T2 s = __hadd2_rn(xx2[h], broadcast<LowT>(c.cc));
        const T2 d = __hfma2(minus2, dot, s);
        unsigned take = __hlt2_mask(d, fromBits<T2>(bestBits[h]));
        if constexpr (kFallback) {
          const unsigned reliable = __hgt2_mask(d, __hfma2(sure2, s, floor2));
          sure[h] |= reliable & bits;
          falls[h] |= __hlt2_mask(d, __hfma2(fall2, s, fallFloor2)) & bits;
          take &= reliable;
        }
        bestBits[h] = (bitsOf(d) & take) | (bestBits[h] & ~take);
        bestIdx[h] = (index & take) | (bestIdx[h] & ~take);
      }
    }
    if constexpr (kFallback) {
      const unsigned winners = !win ? 0u : win[t0 >> 5] >> (t0 & 16) & 0xffffu;
      // With H = W the falling pairs whose centre may win go centre by centre, the lane's four
      // points at once (one load of the centre, one loop; the values and the order per point are
      // those of the loop per point below).
      constexpr bool kDirectByCentre = std::is_same_v<H, WT>;
      if constexpr (kDirectByCentre) {
        unsigned direct = 0;
#pragma unroll
        for (int h = 0; h < P2; ++h) direct |= falls[h];
        direct = (direct | direct >> 16) & winners;
        while (direct) {
          const int b = __ffs(direct) - 1;
          direct &= direct - 1;
          const int j = t0 + b;
          const HC hc = sch[j];
#pragma unroll
          for (int p = 0; p < P; ++p) {
            if (!(falls[p >> 1] >> (16 * (p & 1) + b) & 1)) continue;
            const H dj = directDistance<H>(w[p], hc.c, DT);
            if (dj < slowD[p] || (dj == slowD[p] && j < slowJ[p])) slowD[p] = dj, slowJ[p] = j;
          }
        }
      }
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const int h = p >> 1, hi = p & 1;
        const unsigned fell = falls[h] >> (16 * hi) & 0xffffu;
        if (valid[p]) fallbacks += unsigned(__popc(fell));
        H xh[DT];
#pragma unroll
        for (int q = 0; q < DT; ++q) xh[q] = convert<H>(w[p][q]);
        if constexpr (!kDirectByCentre) {
          // Falling pairs whose centre may win: the direct formula.
          unsigned direct = fell & winners;
          while (direct) {
            const int j = t0 + __ffs(direct) - 1;
            direct &= direct - 1;
            const H dj = directDistance<H>(xh, sch[j].c, DT);
            if (dj < slowD[p] || (dj == slowD[p] && j < slowJ[p])) slowD[p] = dj, slowJ[p] = j;
          }
        }
        // The pairs neither packed test vouched for: the exact scalar formulas.
        unsigned rest = chunk & ~((sure[h] | falls[h]) >> (16 * hi));
        if (rest == 0) continue;
        LowT xp[DT];
#pragma unroll
        for (int q = 0; q < DT; ++q) xp[q] = lane<LowT>(x2[h][q], hi);
        const LowT xxp = lane<LowT>(xx2[h], hi);
        while (rest) {
          const int j = t0 + __ffs(rest) - 1;
          rest &= rest - 1;
          const LC& c = scl[j];
          const LowT dot = dotProduct<LowT>(xp, c.c, DT);
          bool fell = false;
          const H dj = mixedDistance<LowT, H>(expandedDistance<LowT>(xxp, c.cc, dot), xh, sch[j].c,
                                              DT, a.factor, &fell);
          fallbacks += unsigned(fell && valid[p]);
          if (dj < slowD[p] || (dj == slowD[p] && j < slowJ[p])) slowD[p] = dj, slowJ[p] = j;
        }
      }
    }
  }
  // Each lane's minimum, and in mixed modes the exactly evaluated pairs' by (distance, index).
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int h = p >> 1, hi = p & 1;
    int bj = int(bestIdx[h] >> (16 * hi) & 0xffffu);
    if constexpr (kFallback) {
      const H bd = convert<H>(lane<LowT>(fromBits<T2>(bestBits[h]), hi));
      if (slowD[p] < bd || (slowD[p] == bd && slowJ[p] < bj)) bj = slowJ[p];
    }
    best[p] = bj;
  }
}

/// The fallbacks of the scalar mixed pass's points against the centres of `cand` only: the
/// reliability test, one point at a time (few registers: it runs inside the pass's round, next
/// to its other state). Same sequence of rounded operations as scalarAssign.
template <int P, class A, class LC, class WT, int DT>
__device__ inline void scalarCount(const A& a, const LC* scl, const unsigned* cand,
                                   const WT (&w)[P][DT], unsigned& fallbacks) {
  using LowT = std::remove_cv_t<std::remove_pointer_t<decltype(A::cl)>>;
  using H = typename A::H;
#pragma unroll
  for (int p = 0; p < P; ++p) {
    LowT xp[DT];
#pragma unroll
    for (int q = 0; q < DT; ++q) xp[q] = convert<LowT>(w[p][q]);
    const LowT xxp = squaredNorm<LowT>(xp, DT);
    for (int wd = 0; wd < (a.k + 31) >> 5; ++wd) {
      unsigned left = cand[wd];
      while (left) {
        const int j = (wd << 5) + __ffs(left) - 1;
        left &= left - 1;
        const LC& c = scl[j];
        const Expanded<LowT> e = expandedDistance<LowT>(xxp, c.cc, dotProduct<LowT>(xp, c.c, DT));
        fallbacks += unsigned(fallsBack<LowT, H>(e, a.factor));
      }
    }
  }
}

/// Scalar assignment of P points for fp32 / fp64 distances (same contract as packedAssign; with
/// kNullWin, win may be null: no centre may win, and the scan only counts fallbacks).
/// Uniform modes: with finite distances (guaranteed by kFastMaxAbs) the sequential scan with
/// closer() is a strict < from +inf, and d = fma(-2, dot, s) equals s - 2 dot.
template <int P, bool kNullWin, class A, class LC, class HC, class WT, int DT>
__device__ inline void scalarAssign(const A& a, const LC* scl, const HC* sch, const unsigned* cand,
                                    const unsigned* win, const unsigned* fallsWord,
                                    const WT (&w)[P][DT], const bool (&valid)[P], int (&best)[P],
                                    unsigned& fallbacks) {
  using LowT = std::remove_cv_t<std::remove_pointer_t<decltype(A::cl)>>;
  using H = typename A::H;
  using M = Math<LowT>;
  constexpr bool kFallback = A::kFallback;
  using DistT = std::conditional_t<kFallback, H, CompareT<LowT>>;
  LowT x[P][DT];
  LowT xx[P];
  H xh[kFallback ? P : 1][DT];
#pragma unroll
  for (int p = 0; p < P; ++p) {
#pragma unroll
    for (int q = 0; q < DT; ++q) {
      x[p][q] = convert<LowT>(w[p][q]);
      if constexpr (kFallback) xh[p][q] = convert<H>(w[p][q]);
    }
    xx[p] = squaredNorm<LowT>(x[p], DT);
  }
  DistT bestD[P];
#pragma unroll
  for (int p = 0; p < P; ++p) bestD[p] = DistT(__builtin_huge_val()), best[p] = 0;
  // The candidate centres (warpCandidates), in increasing index order: word w holds centres
  // 32 w ... 32 w + 31.
  const int words = (a.k + 31) >> 5;
  if constexpr (!kFallback) {
    // Uniform modes: candidates in pairs (j0 < j1, consecutive candidates). The pair's smaller
    // distance m = min(d_j0, d_j1) replaces the best when strictly smaller, and both indices are
    // kept; which of the two won is settled once at the end by recomputing d_j0 (same operations,
    // same bits): it won if it equals the best. That is the sequential scan's result: a strict <
    // across pairs keeps the earlier pair on a tie, and d_j0 == m means d_j0 <= d_j1, where the
    // scan keeps j0. A word's odd last candidate is scanned alone (its own pair j0 = j1). The
    // pair's indices travel as one word, j0 | j1 << 16 (K <= 1024).
    auto distance = [&](int p, const LC& c) {
      const LowT dot = dotProduct<LowT>(x[p], c.c, DT);
      return convert<DistT>(M::fma(M::from(-2.0), dot, M::add(xx[p], c.cc)));
    };
    unsigned pairOf[P];
#pragma unroll
    for (int p = 0; p < P; ++p) pairOf[p] = 0;
    for (int wd = 0; wd < words; ++wd) {
      unsigned left = cand[wd];
      while (left) {
        const int j0 = (wd << 5) + __ffs(left) - 1;
        left &= left - 1;
        if (left == 0) {
          const LC c = scl[j0];
          const unsigned pair = unsigned(j0) * 0x10001u;
#pragma unroll
          for (int p = 0; p < P; ++p) {
            const DistT dj = distance(p, c);
            if (dj < bestD[p]) bestD[p] = dj, pairOf[p] = pair;
          }
          break;
        }
        const int j1 = (wd << 5) + __ffs(left) - 1;
        left &= left - 1;
        const LC c0 = scl[j0], c1 = scl[j1];
        const unsigned pair = unsigned(j0) | unsigned(j1) << 16;
#pragma unroll
        for (int p = 0; p < P; ++p) {
          const DistT m = min(distance(p, c0), distance(p, c1));
          if (m < bestD[p]) bestD[p] = m, pairOf[p] = pair;
        }
      }
    }
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int j0 = int(pairOf[p] & 0xffffu);
      best[p] = distance(p, scl[j0]) == bestD[p] ? j0 : int(pairOf[p] >> 16);
    }
  } else {
    // A centre that cannot win is a candidate for its fallbacks only: the test, no direct
    // formula (mixedDistance's steps otherwise).
    for (int wd = 0; wd < words; ++wd) {
      unsigned left = cand[wd];
      const unsigned winners = kNullWin && !win ? 0u : win[wd];
      // The candidates whose pairs all fall back (class falls): the direct formula alone.
      const unsigned known = kFallsKnown<LowT, kFallback> ? fallsWord[wd] & winners : 0u;
      while (left) {
        const int b = __ffs(left) - 1;
        const int j = (wd << 5) + b;
        left &= left - 1;
        const LC c = scl[j];
        if (known >> b & 1) {
#pragma unroll
          for (int p = 0; p < P; ++p) {
            const DistT dj = directDistance<H>(xh[p], sch[j].c, DT);
            fallbacks += unsigned(valid[p]);
            if (dj < bestD[p]) bestD[p] = dj, best[p] = j;
          }
        } else if (winners >> b & 1) {
#pragma unroll
          for (int p = 0; p < P; ++p) {
            const LowT dot = dotProduct<LowT>(x[p], c.c, DT);
            bool fell = false;
            const DistT dj = mixedDistance<LowT, H>(expandedDistance<LowT>(xx[p], c.cc, dot), xh[p],
                                                    sch[j].c, DT, a.factor, &fell);
            fallbacks += unsigned(fell && valid[p]);
            if (dj < bestD[p]) bestD[p] = dj, best[p] = j;
          }
        } else {
#pragma unroll
          for (int p = 0; p < P; ++p) {
            const LowT dot = dotProduct<LowT>(x[p], c.c, DT);
            const Expanded<LowT> e = expandedDistance<LowT>(xx[p], c.cc, dot);
            fallbacks += unsigned(fallsBack<LowT, H>(e, a.factor) && valid[p]);
          }
        }
      }
    }
  }
}

// ---- centre pruning of the fast pass ------------------------------------------------------------
//
// Each tile's P x 32 points are bounded by a box: per feature the least and the greatest x~_q,
// as floats rounded outwards. The data does not change between iterations, so tileBoxKernel
// computes every tile's box once per run and each round of the pass loads its tile's (48 bytes
// against the rows' 640), before any row: the bounds need no row. For every centre j it bounds
// the exact squared distance from any point of the box to c~_j: L_j <= ||x~ - c~_j||^2 <= U_j,
// and from those the value a pair can take in the scan: low_j <= value <= high_j (centreBounds;
// uniform modes: d^, within M_j = err (||x~||^2 + ||c~||^2) + 2^-20 of the exact value, or for
// fp16 / bf16 d^ less the rounding of the point's own norm, which is the same for every centre;
// mixed modes: d^ or the direct distance from the W rows, with the reliability test's own
// guarantee).
// A centre with low_j > min_i high_i is, for every point of the box, strictly farther than that
// best centre i, so it can neither win nor tie and the scan may skip it. Where the distances are
// fp32 or fp64 (kPairwiseTest), a centre j that passes this test takes a second one against the
// centre s with the least high_s: the exact ||x~ - c~_j||^2 - ||x~ - c~_s||^2 is linear in x~,
// so its least value over the box (pairGap) is exact up to float rounding, and j is strictly
// farther than s when that least value exceeds the two pairs' margins. In a mixed mode it is
// skipped only when its pairs' fallbacks are known without evaluating them: when the reliability
// test provably accepts every pair (L_j - M_j > thr (||x~||^2 + ||c~||^2)), or provably rejects
// every pair (U_j + M_j < thrLo (lower bound of ||x~||^2 + ||c~||^2)); the pass then adds the
// rejected pairs of the tile's points to the fallback count. Otherwise it stays a candidate for
// its fallbacks only: the scan tests its pairs but takes no direct distance and no argmin step
// for it (win[] holds the centres that may win). Labels, fallback counts and sums are
// therefore bit-identical to the full scan (KMeansParams::useBounds = false turns pruning off; a
// GPU test compares the two). The warp's points scan the union of their candidates, in
// increasing index order. The bounds are computed in float; the margins (err's 2^-18 part, errH)
// cover their rounding and that of fp64 centres and rows to float.

// Order-preserving map of (non-NaN) floats to signed integers, for the warp's integer min / max:
// non-negative floats keep their bits, negative ones flip their magnitude bits (-0 maps below +0).
// The map is its own inverse.
__device__ inline int orderedKey(float f) {
  const int i = __float_as_int(f);
  return i ^ ((i >> 31) & 0x7fffffff);
}
__device__ inline float fromOrderedKey(int k) {
  return __int_as_float(k ^ ((k >> 31) & 0x7fffffff));
}
__device__ inline int warpMin(int v) {
#if __CUDA_ARCH__ >= 800
  return __reduce_min_sync(0xffffffffu, v);
#else
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
#endif
}
__device__ inline int warpMax(int v) {
  return ~warpMin(~v);
}

/// x~ = fl_low(w) as a float, rounded down (up = false) or up; exact unless LowT is double.
template <class LowT, class WT>
__device__ inline float lowAsFloat(WT w, bool up) {
  if constexpr (std::is_same_v<LowT, double>)
    return up ? __double2float_ru(double(w)) : __double2float_rd(double(w));
  else
    return convert<float>(convert<LowT>(w));
}

/// The reliability class of a centre's pairs with every point of a box (mixed modes; see
/// centreBounds): unknown, all accepted, or all falling back.
enum PairClass : int { kClassUnknown = 0, kClassReliable = 1, kClassFalls = 2 };

/// Pruning constants of a mixed mode, rounded to float outwards (Args::prune*).
struct MixedBounds {
  float root;     // an upper bound of ||x~|| over the box
  float errH;     // relative margin of the direct formula's value (H rounding, float bounds)
  float rel1;     // rho' / (rho' + 1), rounded down
  float rel2;     // rho' / (rho' - 1), rounded up
  float thrLo;    // a lower bound of fl_H(factor s) / (||x~||^2 + ||c~||^2)
  float normLo;   // a lower bound of ||x~||^2 over the box
  float normErr;  // kTightMixed: a bound of the point's norm rounding over the box (normMargin)
};

/// For centre c (as floats) and its norm cc (see above): low <= the value any point's pair takes
/// <= high, and in a mixed mode the pairs' reliability class. Uniform modes: low = L_j - M_j,
/// high = U_j + M_j (class reliable). Uniform fp16 / bf16 (kShift) bound d^ - A(x) instead, where
/// A(x) = fl(||x~||^2) - ||x~||^2 is the rounding of the point's own norm: it is the same for
/// every centre, so comparing the shifted values of two centres compares their d^. With
/// B_j = fl(||c~_j||^2) - ||c~_j||^2 (`shift`, BoundCentre's: cc minus the exact norm, which
/// float holds up to 2^-22 relative: the products of 11- or 8-bit significands are exact),
/// s = fl(fl(||x~||^2) + cc) and
/// d^ = fl(s - 2 dot^), d^ - A - B - ||x~ - c~||^2 is the sum of the three roundings, within
/// M'_j = shiftedMargin (prune_margin.h: err n + eta U_j + sum binade(grow n) + dot sum_k
/// binade(grow P_k) + 2^-20, n = ||x~||^2 + ||c~||^2, P_k = sum over q < k of X_q |c~_q|, X_q the
/// box's largest |x~_q|), so low = L_j + B_j - M'_j and high = U_j + B_j + M'_j. Each step of the
/// dot product is bounded by the binade of its partial sum (so the first product is weighed by D
/// steps, the last by 1), and s's rounding by the binade of s. A host test checks M'_j against
/// the CPU engine's emulated fp16 and bf16.
/// Mixed modes: a pair's value is d^ (error <= M1 = err n; with kTight, the fp16 / bf16 mixed
/// passes, d^ - ||x~ - c~||^2 - B_j is within M'_j plus normMargin, the point's norm rounding) or,
/// when it falls back, the direct distance (error <= M2, the eta and H-rounding terms); and when
/// d^ passes the test, d^ > fl_H(factor s) >= rho' |d^ - d~| (the test's factor is rho times the
/// error bound's, less the rounding of s), so d~ rho' / (rho' + 1) <= d^ <= d~ rho' / (rho' - 1).
/// The class: reliable when L - M1 > thr n (d^ passes for every point), falls when
/// U + M1 < thrLo nLo (d^ <= fl_H(factor s) for every point). Reliable: the value is d^, in
/// [max(L - M1, rel1 L), min(U + M1, rel2 U)]; falls: the direct distance, in [L - M2, U + M2];
/// unknown: either. For the near centres (whose pairs mostly fall back) this is much tighter
/// than the M1 margin alone.
template <bool kFallback, bool kShift, bool kTight, int DT>
__device__ inline void centreBounds(const Box<DT>& b, const float (&c)[DT], float cc, float shift,
                                    float root, float err, float eta, const ShiftMargin& sm,
                                    float thr, const MixedBounds& mb, float& low, float& high,
                                    int& cls, float& mu) {
  float l = 0.f, u = 0.f;
#pragma unroll
  for (int q = 0; q < DT; ++q) {
    const float s = c[q] - b.lo[q], t = b.hi[q] - c[q];
    const float dl = fmaxf(-fminf(s, t), 0.f), du = fmaxf(s, t);
    l = fmaf(dl, dl, l);
    u = fmaf(du, du, u);
  }
  const float n = b.norm + cc;
  const float m1 = fmaf(err, n, 0x1p-20f);
  if constexpr (kFallback) {
    const float e = eta * (mb.root + root);
    const float fe = fmaf(mb.errH, n, 0x1p-20f);
    const float m2 = fmaf(e, fmaf(2.f, sqrtUp(u), e), fe);
    // d^ lies in [L - m1Lo, U + m1Hi]: with kTight, d^ - ||x~ - c~||^2 - B_j is within
    // shiftedMargin + normMargin (B_j = shift), else within E's bound m1.
    float m1Lo = m1, m1Hi = m1;
    if constexpr (kTight) {
      float X[DT];
      b.extents(X);
      const float m = shiftedMargin(X, c, n, u, sm) + mb.normErr;
      m1Lo = m - shift;
      m1Hi = m + shift;
    }
    cls = l - m1Lo > thr * n
              ? kClassReliable
              : (u + m1Hi < mb.thrLo * (mb.normLo + cc) ? kClassFalls : kClassUnknown);
    // Bounds of the accepted value d^, of the fallback's direct distance, and of either.
    const float lowR = fmaxf(l - m1Lo, mb.rel1 * (l - fe)),
                highR = fminf(u + m1Hi, mb.rel2 * (u + fe));
    const float lowF = l - m2, highF = u + m2;
    low = cls == kClassReliable ? lowR : (cls == kClassFalls ? lowF : fminf(lowR, lowF));
    high = cls == kClassReliable ? highR : (cls == kClassFalls ? highF : fmaxf(highR, highF));
    const float mR = fmaxf(m1Lo, m1Hi);
    mu = cls == kClassReliable ? mR : (cls == kClassFalls ? m2 : fmaxf(mR, m2));
  } else if constexpr (kShift) {
    float X[DT];
    b.extents(X);
    const float m = shiftedMargin(X, c, n, u, sm);
    high = u + shift + m;
    low = l + shift - m;
    cls = kClassReliable;
    mu = m;
  } else {
    high = u + m1;
    low = l - m1;
    cls = kClassReliable;
    mu = m1;
  }
}

/// The box of a warp's points (rows w of every lane; see above). Every lane of the warp calls it
/// and gets the box.
template <class LowT, bool kFallback, int P, class WT, int DT>
__device__ inline Box<DT> warpBox(const WT (&w)[P][DT]) {
  Box<DT> b;
  b.norm = 0.f;
  b.normLo = 0.f;
#pragma unroll
  for (int q = 0; q < DT; ++q) {
    // The lane's extremes in W, then rounded: rounding is monotone, so fl_low(min w) = min x~
    // (one conversion instead of P; conversions from double are slow).
    WT lw = w[0][q], hw = w[0][q];
#pragma unroll
    for (int p = 1; p < P; ++p) {
      lw = min(lw, w[p][q]);
      hw = max(hw, w[p][q]);
    }
    const float lo = lowAsFloat<LowT>(lw, false), hi = lowAsFloat<LowT>(hw, true);
    b.lo[q] = fromOrderedKey(warpMin(orderedKey(lo)));
    b.hi[q] = fromOrderedKey(warpMax(orderedKey(hi)));
    b.norm = fmaf(b.extent(q), b.extent(q), b.norm);
    if constexpr (kFallback) {
      // The least |x~_q| over the box: 0 when the box spans 0.
      const float least = b.lo[q] > 0.f ? b.lo[q] : (b.hi[q] < 0.f ? -b.hi[q] : 0.f);
      b.normLo = fmaf(least, least, b.normLo);
    }
  }
  return b;
}

/// What warpCandidates found for a tile besides its candidate words.
struct TileCandidates {
  int only;        ///< the one centre that may win, or -1 when there are more
  int candidates;  ///< the candidate centres: those that may win and those kept for fallbacks
  /// Mixed modes: the centres whose pairs all fall back (class falls) and that are not
  /// candidates, so that the pass counts their pairs as fallbacks without evaluating them.
  int fallsSkipped;
  int onlyClass;  ///< the class of the one winner's pairs (PairClass)
};

/// Writes the warp's candidate words cand[0, ceil(K / 32)) for its tile's box b (see above),
/// and in win[] the centres among them that may win (the box test, then where kPairwiseTest the
/// pairwise test against the centre with the least upper bound, when more than one centre is
/// left). Every lane of the warp calls it; the words are ready after the call. A centre that can
/// neither win nor tie for any point of the box is
/// left out when, in a mixed mode, its pairs either all pass the reliability test or all fall
/// back (counted, TileCandidates); otherwise it stays a candidate for its fallbacks only.
template <class A, class LC, int DT>
__device__ inline TileCandidates warpCandidates(const A& a, const LC* scl,
                                                const BoundCentre<DT>* sbc, const Box<DT>& b,
                                                unsigned* cand, unsigned* win, unsigned* fallsWord,
                                                int laneId) {
  using LowT = std::remove_cv_t<std::remove_pointer_t<decltype(A::cl)>>;
  constexpr bool kFallback = A::kFallback;
  MixedBounds mb{};
  if constexpr (kFallback)
    mb = {sqrtUp(b.norm), a.pruneErrH, a.pruneRel1, a.pruneRel2, a.pruneThrLo, b.normLo, 0.f};
  constexpr bool kShift = kShiftedBounds<LowT, kFallback>;
  constexpr bool kTight = kTightMixed<LowT, kFallback>;
  if constexpr (kTight) {
    float X[DT];
    b.extents(X);
    mb.normErr = normMargin(X, a.pruneShift);
  }
  // Centre j as floats: its row, its norm in LowT, and (BoundCentre) the shift and root.
  auto centre = [&](int j, float(&c)[DT], float& cc, float& shift, float& root) {
    shift = 0.f;
    root = 0.f;
    if constexpr (kBoundCentres<LowT, typename A::H, kFallback>) {
      const BoundCentre<DT>& bc = sbc[j];
#pragma unroll
      for (int q = 0; q < DT; ++q) c[q] = bc.c[q];
      cc = bc.cc;
      shift = bc.shift;
      root = bc.root;
    } else {
      static_assert(!kShift && !kTight, "these bounds need BoundCentre's shift");
      const LC& lc = scl[j];
#pragma unroll
      for (int q = 0; q < DT; ++q) c[q] = convert<float>(lc.c[q]);
      cc = convert<float>(lc.cc);
      if constexpr (kFallback) root = sqrtUp(cc);
    }
  };
  // low <= value <= high, the class, and the pair margins: the value lies within mu of
  // ||x~ - c~||^2 + beta for every point of the box (beta = shift with kShift, else 0), so
  // toI = mu - beta and toJ = mu + beta (see the pairwise test below).
  auto bounds = [&](int j, float& low, float& high, int& cls, float& toI, float& toJ) {
    float c[DT], cc, shift, root, mu;
    centre(j, c, cc, shift, root);
    centreBounds<kFallback, kShift, kTight>(b, c, cc, shift, root, a.pruneErr, a.pruneEta,
                                            a.pruneShift, a.pruneThr, mb, low, high, cls, mu);
    const float beta = kShift ? shift : 0.f;
    toI = mu - beta;
    toJ = mu + beta;
  };
  // The least upper bound over all centres (non-negative, so the bits order as integers), and
  // a centre that has it (star). The first 32 centres' lower bounds, classes and margins are kept
  // for the tests below (K <= 32: one evaluation each).
  float best = __builtin_huge_valf(), low0 = -__builtin_huge_valf(), toI0 = 0.f, toJ0 = 0.f;
  int cls0 = kClassUnknown, arg = laneId;
  float argToJ = 0.f;
  if (laneId < a.k) {
    bounds(laneId, low0, best, cls0, toI0, toJ0);
    argToJ = toJ0;
  }
  for (int j = laneId + 32; j < a.k; j += 32) {
    float low, high, toI, toJ;
    int cls;
    bounds(j, low, high, cls, toI, toJ);
    if constexpr (kPairwiseTest<LowT, kFallback>) {
      if (high < best) best = high, arg = j, argToJ = toJ;
    } else {
      best = fminf(best, high);
    }
  }
  const float myBest = best;
  best = __int_as_float(warpMin(__float_as_int(best)));
  int star = 0;
  float starToJ = 0.f;
  if constexpr (kPairwiseTest<LowT, kFallback>) {
    const int starLane = __ffs(__ballot_sync(0xffffffffu, myBest == best)) - 1;
    star = __shfl_sync(0xffffffffu, arg, starLane);
    starToJ = __shfl_sync(0xffffffffu, argToJ, starLane);
  }
  // The pairwise test (kPairwiseTest): for every point x of the box, ||x~ - c~_j||^2 -
  // ||x~ - c~_star||^2 >= gap_j (pairGap, linear in x). The values of j and star differ from
  // those exact distances plus their shifts by at most their margins, so centre j is strictly
  // farther than star from every point when gap_j > toI_j + toJ_star: it can neither win nor tie.
  // Often tighter than low_j > best, which bounds the two distances apart.
  auto pairFarther = [&](int j, float toI) {
    float sc[DT], c[DT], cc, shift, root;
    centre(star, sc, cc, shift, root);
    centre(j, c, cc, shift, root);
    return pairGap<DT>(b.lo, b.hi, c, sc) > toI + starToJ;
  };
  TileCandidates r{-1, 0, 0, kClassUnknown};
  int winners = 0;
  for (int j0 = 0; j0 < a.k; j0 += 32) {
    const int j = j0 + laneId;
    float low = low0, high, toI = toI0, toJ;
    int cls = cls0;
    if (j0 > 0) {
      low = -__builtin_huge_valf();
      cls = kClassUnknown;
      if (j < a.k) bounds(j, low, high, cls, toI, toJ);
    }
    bool out = j < a.k && low > best;  // can neither win nor tie
    // The pairwise test, only where the box test leaves more than one centre that may win.
    if constexpr (kPairwiseTest<LowT, kFallback>) {
      const unsigned left = __ballot_sync(0xffffffffu, j < a.k && !out);
      if (__popc(left) > (j0 <= star && star < j0 + 32 ? 1 : 0) && j < a.k && !out && j != star)
        out = pairFarther(j, toI);
    }
    const unsigned word = __ballot_sync(0xffffffffu, j < a.k && !(out && cls != kClassUnknown));
    const unsigned mayWin = __ballot_sync(0xffffffffu, j < a.k && !out);
    if (laneId == 0) cand[j0 >> 5] = word, win[j0 >> 5] = mayWin;
    r.candidates += __popc(word);
    winners += __popc(mayWin);
    if (mayWin) r.only = j0 + __ffs(mayWin) - 1;
    if constexpr (kFallback) {
      const unsigned falls = __ballot_sync(0xffffffffu, j < a.k && cls == kClassFalls);
      if constexpr (kFallsKnown<LowT, kFallback>)
        if (laneId == 0) fallsWord[j0 >> 5] = falls;
      r.fallsSkipped += __popc(falls & ~word);
      const unsigned sure = __ballot_sync(0xffffffffu, j < a.k && cls == kClassReliable);
      if (mayWin) {
        const int bit = __ffs(mayWin) - 1;
        r.onlyClass =
            falls >> bit & 1 ? kClassFalls : (sure >> bit & 1 ? kClassReliable : kClassUnknown);
      }
    } else {
      r.onlyClass = kClassReliable;
    }
  }
  __syncwarp();
  if (winners != 1) r.only = -1;
  return r;
}

/// Candidate words per warp of the fast pass: one bit per centre.
constexpr int fastCandidateWords(int k) {
  return (k + 31) / 32;
}

/// Bytes of the fast pass's dynamic shared memory for `slots` accumulator slots per warp.
template <class LowT, class H, class WT, int DT>
constexpr std::size_t fastSharedBytes(int k, int slots, bool fallback) {
  const std::size_t acc = std::size_t(kWarps) * k * DT * slots * sizeof(WT);
  const std::size_t counts = (std::size_t(k) * sizeof(unsigned) + 15) / 16 * 16;
  const std::size_t centres = k * sizeof(LowCentre<LowT, DT>);
  const std::size_t cand = (std::size_t(kWarps) * (fallback ? kCandidateSets<LowT, true> : 2) *
                                fastCandidateWords(k) * sizeof(unsigned) +
                            15) /
                           16 * 16;
  const bool bound = fallback ? kBoundCentres<LowT, H, true> : kBoundCentres<LowT, H, false>;
  return (acc + 15) / 16 * 16 + counts + cand + centres +
         (fallback ? k * sizeof(HighCentre<H, DT>) : 0) + (bound ? k * sizeof(BoundCentre<DT>) : 0);
}

/// Blocks of the fast pass that must fit on an SM, which caps its registers at 65536 / (256 n):
/// in W = fp32 four for the uniform passes (64 registers; at two the fp32 pass waited on shared
/// and global loads; the packed fp16 and bf16 passes need 63-65 since they pack two points per
/// instruction, and spill nothing at 64), three for the mixed passes but fp16>fp64 (85),
/// two for fp16>fp64 (128; at three, 80 registers and 192 bytes spilled, it was 2 % faster at
/// 12 MP and 6 % slower at 0.26 MP); two for the uniform fp64 pass (128; its shared memory
/// allows two). Without the cap the pruning code (warpCandidates) costs each of them a resident
/// block. The other W = fp64 variants take what they need. With centre pairs packed (before
/// a6752ab) four blocks spilled 76-304 bytes and were slower at most sizes but 12 MP; without
/// spills they are faster than three or level at 0.26, 2, 8, 12 and 16 MP (fp16 at 8 MP 0.0975
/// against 0.0993 ms per iteration, bf16 0.1210 against 0.1258; H200, K = 32). For fp16>fp32
/// four blocks still spill and are slower (64 registers, 196 bytes spilled: 0.2356 against
/// 0.2341 ms per iteration at 12 MP, 0.0344 against 0.0319 at 0.26 MP).
template <class LowT, class HighT, class WT>
inline constexpr int kFastMinBlocks =
    std::is_same_v<WT, double>
        ? (std::is_same_v<LowT, double> ? 2 : 1)
        : (!std::is_void_v<HighT>
               ? (kPackedPass<LowT, true> && std::is_same_v<HighT, double> ? 2 : 3)
               : 4);

/// The fast pass's variant for grids of few blocks: at most kFewMinBlocks blocks per SM, and so
/// up to 65536 / (256 kFewMinBlocks) registers, where the pass's grid needs no more resident
/// blocks than that (Run::chooseFastShape). The grid, and so every result, is the same as with
/// kFastMinBlocks; only the register cap differs, which at 80 registers (three blocks) made the
/// mixed passes spill (bf16>fp64 48 bytes in the pass, fp16>fp32 28 in the persistent loop).
/// Equal to kFastMinBlocks where that is two or fewer: no second variant is compiled then.
template <class LowT, class HighT, class WT>
inline constexpr int kFewMinBlocks = (!std::is_void_v<HighT> && kFastMinBlocks<LowT, HighT, WT> > 2)
                                         ? 2
                                         : kFastMinBlocks<LowT, HighT, WT>;

/// A thread's kFastPoints = 4 consecutive labels as one word (uint8 labels: 32 bits, uint16: 64),
/// label p in bits [p b, (p + 1) b) for b = kLabelBits.
template <class LabelT>
using LabelWord = std::conditional_t<sizeof(LabelT) == 1, unsigned, unsigned long long>;
template <class LabelT>
inline constexpr int kLabelBits = 8 * int(sizeof(LabelT));
template <class LabelT>
__device__ inline int labelOf(LabelWord<LabelT> v, int p) {
  return int((v >> (kLabelBits<LabelT> * p)) & ((LabelWord<LabelT>(1) << kLabelBits<LabelT>)-1));
}

/// The label word of kFastPoints points that all take label j.
template <class LabelT>
__device__ inline LabelWord<LabelT> uniformLabelWord(int j) {
  if constexpr (sizeof(LabelT) == 1)
    return unsigned(j) * 0x01010101u;
  else
    return (unsigned long long)j * 0x0001000100010001ull;
}

/// How many of the kFastPoints labels of two label words differ, per byte (uint8) or per half
/// word (uint16) with SIMD compares.
template <class LabelT>
__device__ inline unsigned differingLabels(LabelWord<LabelT> x, LabelWord<LabelT> y) {
  if constexpr (sizeof(LabelT) == 1)
    return unsigned(__popc(__vcmpne4(x, y))) >> 3;
  else
    return unsigned(__popc(__vcmpne2(unsigned(x >> 32), unsigned(y >> 32))) +
                    __popc(__vcmpne2(unsigned(x), unsigned(y)))) >>
           4;
}

/// Rows w[p][q] = src[p DT + q] for P consecutive rows at a 16-byte aligned address, with
/// 16-byte loads. The loads stream (evict first): a pass reads each row once, and the rows of a
/// photo are far larger than L2, which then keeps what the next pass reads again (labels, tile
/// boxes and states). H200, 12 MP, K = 32, two runs each: fp32 0.1035 / 0.1040 -> 0.0983 /
/// 0.0987 ms per iteration, fp64 0.1618 / 0.1625 -> 0.1488 / 0.1490, fp16 0.1113 / 0.1113 ->
/// 0.1000 / 0.0995, bf16 0.1482 / 0.1478 -> 0.1315 / 0.1314, fp16>fp32 0.1954 / 0.1959 ->
/// 0.1907 / 0.1914.
template <int P, int DT, class WT>
__device__ inline void loadRows(const WT* src, WT (&w)[P][DT]) {
  constexpr int kPer = 16 / int(sizeof(WT));
  static_assert(P * DT % kPer == 0, "whole 16-byte loads");
  const uint4* v = reinterpret_cast<const uint4*>(src);
#pragma unroll
  for (int i = 0; i < P * DT / kPer; ++i) {
    const uint4 u = __ldcs(v + i);
    const unsigned c[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const int f = i * kPer + e;
      if constexpr (sizeof(WT) == 4)
        w[f / DT][f % DT] = __uint_as_float(c[e]);
      else
        w[f / DT][f % DT] = __hiloint2double(int(c[2 * e + 1]), int(c[2 * e]));
    }
  }
}

/// The band (tile / tileCols) of a tile of the fast pass.
template <class A>
__device__ inline int tileBand(const A& a, int t) {
  return int(fastDivide(unsigned(t), a.tileColsMagic, a.tileColsShift1, a.tileColsShift2));
}

/// Lane `lane`'s group in the fast pass's tile at band b, column c (points kFastPoints group ...);
/// false when the tile has no such group (a short row, or rows beyond the image). In 32 bits: the
/// host takes the fast pass only when n + tileW + kFastPoints < 2^32 (chooseFastShape), so that
/// (y + 1) tileW + kFastPoints - 1 < 2^32 for every row y of the image.
template <class A>
__device__ inline bool tileGroup(const A& a, int b, int c, int lane, unsigned& group) {
  constexpr int P = kFastPoints;
  const int y = b * kTileRows + (lane / kTileGroups);
  if (y >= a.tileRows) return false;
  // The mixed passes in 32 bits (H200, 12 MP, K = 32: fp16>fp32 0.2362 -> 0.2313, fp32>fp64
  // 0.1801 -> 0.1746 ms per iteration); in the uniform passes, capped at 64 registers, ptxas then
  // spilled (fp16 and bf16 0 -> 8 bytes) and bf16 took 0.1662 instead of 0.1589, so 64 there.
  using I = std::conditional_t<A::kFallback, unsigned, long long>;
  const I start = I(y) * I(a.tileW);                // the row's first point
  const I g0 = (start + (P - 1)) / P;               // the row's first group
  const I g1 = (start + I(a.tileW) + (P - 1)) / P;  // the next row's
  const I g = g0 + I(c) * kTileGroups + I(lane % kTileGroups);
  group = unsigned(g);
  return g < g1 && g * P < I(a.n);
}

/// The fast pass's tile that holds point i (the inverse of tileGroup).
template <class A>
__device__ inline int tileOfPoint(const A& a, long long i) {
  constexpr int P = kFastPoints;
  const long long g = i / P;
  const long long y = g * P / a.tileW;  // the image row of the group's first point
  const long long g0 = (y * a.tileW + (P - 1)) / P;
  return int((y / kTileRows) * a.tileCols + (g - g0) / kTileGroups);
}

/// The first point of lane `lane`'s group in a whole tile of the fast pass.
template <class A>
__device__ inline long long tileFirst(const A& a, int tile, int lane) {
  const int band = tileBand(a, tile);
  unsigned group = 0;
  tileGroup(a, band, tile - band * a.tileCols, lane, group);
  return (long long)group * kFastPoints;
}

/// Lane `lane`'s rows of a tile of the fast pass: its group, P consecutive points from `first`
/// of which `have` exist (see assignFastKernel). A lane without a group takes the rows of the
/// first lane that has one (have = 0), and so do the missing points of a short group, so that
/// every row in w belongs to the tile (for its box). When all P points exist the rows move with
/// 16-byte loads. Every lane of the warp calls it; false (for all) when the tile has no points
/// (rows beyond the image, narrow images only).
template <int P, class A, class WT, int DT>
__device__ inline bool loadTileRows(const A& a, int tile, int lane, WT (&w)[P][DT],
                                    long long& first, int& have) {
  unsigned group = 0;
  const int band = tileBand(a, tile);
  const bool inTile = tileGroup(a, band, tile - band * a.tileCols, lane, group);
  first = (long long)group * P;
  const unsigned lanesIn = __ballot_sync(0xffffffffu, inTile);
  if (lanesIn == 0) return false;
  const long long stand = (long long)__shfl_sync(0xffffffffu, group, __ffs(lanesIn) - 1) * P;
  have = inTile ? int(min(a.n - first, (long long)P)) : 0;
  if (have == P) {
    loadRows<P>(a.xw + first * DT, w);
  } else {
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const WT* wr = a.xw + (p < have ? first + p : stand) * DT;
#pragma unroll
      for (int q = 0; q < DT; ++q) w[p][q] = wr[q];
    }
  }
  return true;
}

/// A tile's box, with 16-byte loads (lo, hi, norm and normLo as consecutive floats), and whether
/// the tile is whole: all its kTileRows x kTileGroups x kFastPoints points exist (tileBoxKernel
/// stores the norm bound of a tile that is not with its sign bit set).
template <int DT>
__device__ inline Box<DT> loadBox(const Box<DT>* src, bool& whole) {
  constexpr int kFloats = 2 * DT + 2;
  static_assert(sizeof(Box<DT>) == kFloats * 4 && kFloats % 4 == 0, "whole 16-byte loads");
  const float4* v = reinterpret_cast<const float4*>(src);
  float f[kFloats];
#pragma unroll
  for (int i = 0; i < kFloats / 4; ++i) {
    const float4 u = v[i];
    f[4 * i] = u.x, f[4 * i + 1] = u.y, f[4 * i + 2] = u.z, f[4 * i + 3] = u.w;
  }
  Box<DT> b;
#pragma unroll
  for (int q = 0; q < DT; ++q) b.lo[q] = f[q], b.hi[q] = f[DT + q];
  whole = !signbit(f[2 * DT]);
  b.norm = fabsf(f[2 * DT]);
  b.normLo = f[2 * DT + 1];
  return b;
}

/// Every tile's box for the fast pass's pruning (warpBox over the rows that loadTileRows gives),
/// once per run: the data does not change between iterations. A tile without points gets an
/// empty box (never read), and a tile that is not whole a box whose norm bound has its sign bit
/// set (loadBox). With Args::tileState also each tile's sum (read only for whole tiles with one
/// winner) and its label state "none". Grid-stride, one warp per tile.
template <class LowT, class HighT, class WT, class LabelT, int DT>
__global__ void __launch_bounds__(kAssignThreads) tileBoxKernel(Args<LowT, HighT, WT, LabelT> a) {
  using A = Args<LowT, HighT, WT, LabelT>;
  constexpr int P = kFastPoints;
  const int lane = threadIdx.x & 31;
  const int warps = int(gridDim.x) * kWarps;
  for (int tile = int(blockIdx.x) * kWarps + int(threadIdx.x >> 5); tile < a.tiles; tile += warps) {
    WT w[P][DT];
    long long first;
    int have = 0;
    Box<DT> b{};
    const bool any = loadTileRows(a, tile, lane, w, first, have);
    if (any) b = warpBox<LowT, A::kFallback>(w);
    if (!__all_sync(0xffffffffu, have == P)) b.norm = -b.norm;  // not whole (see loadBox)
    if (lane < int(sizeof(Box<DT>) / 4))
      reinterpret_cast<float*>(a.boxes + tile)[lane] = reinterpret_cast<const float*>(&b)[lane];
    if (a.tileSums && any) {
      // The tile's sum as the pass adds a tile of one label: lane sums, then warpSum8.
      WT sum[DT];
#pragma unroll
      for (int q = 0; q < DT; ++q) sum[q] = (w[0][q] + w[1][q]) + (w[2][q] + w[3][q]);
      int q;
      const WT v = warpSum8<DT>(sum, lane, q);
      if ((lane & 3) == 0 && q < DT) a.tileSums[std::size_t(tile) * DT + q] = v;
    }
    if (a.tileState && lane == 0) a.tileState[tile] = kNoTileLabel * 0x10001u;
  }
}

/// The assignment pass for a compile-time D (the image case), same contract as assignKernel.
/// Tiles: the rows are taken as an image a.tileW points wide in row-major order (the photo's
/// width, KMeansParams::imageWidth; else kPlainTileW, which makes a tile a run of 128 consecutive
/// rows). A group is kFastPoints consecutive points starting at a multiple of kFastPoints; it
/// belongs to the image row of its first point. A tile is kTileRows rows by kTileGroups
/// consecutive groups of each row (tile column c of a row: its groups 4c ... 4c + 3), so every
/// group is in exactly one tile; lane l of the tile's warp takes group l mod 4 of row l / 4. A
/// tile is compact (16 x 8 pixels of a photo against a 128-pixel run: fewer distinct labels,
/// a smaller box in warpCandidates), and each centre loaded from shared memory serves
/// kFastPoints points, a thread's rows and labels move in 16-byte loads and single words.
/// Grid: a.blocks = B blocks of kAssignThreads; in round r, warp v of block b takes tile
/// kWarps (b + r B) + v. The blocks take turns over the whole image, so they get about the same
/// work however the detail of the photo is spread (contiguous ranges of tiles left SMs idle while
/// the blocks of detailed regions finished: at 12 MP an SM was busy 84 % of the pass). Only
/// the working-precision rows are read: the low-precision x~ is convert<LowT>(x_W) in registers,
/// the same single rounding as convertKernel's copy. Every per-pair distance is the shared formula
/// of distance.h, evaluated per element: scalar for fp64 / fp32 distances (scalarAssign), two
/// points per packed instruction for fp16 / bf16 (packedAssign, see kPackedPass). The host takes
/// this pass only when no distance can overflow (kFastMaxAbs); the generic assignKernel covers the
/// rest. Shared memory: per warp S = 2^a.fastSlotShift accumulator slots of K x D sums in W, the
/// cluster counts, per warp the candidate words (warpCandidates), and the centres (LowCentre,
/// HighCentre in mixed modes, BoundCentre where kBoundCentres).
/// Tiles with one winner (with pruning): a round first bounds the centres with the tile's box
/// (tileBoxKernel) and reads the tile's label state (Args::tileState). When the box leaves one
/// centre j that may win, and the tile is whole, every point takes j (the box proves it) and no
/// distance decides a label. Its sums are the tile's sum, precomputed by tileBoxKernel exactly as
/// the one-label case below computes it: the round adds that sum to slot 0 and 128 to j's count.
/// Its labels become j, with their changed and 2-cycle counts; when j was already the label of
/// all its points in the last two assignments (the state), nothing changes and no label is read:
/// the tile is settled. In a mixed mode the fallbacks of the centres whose class is known (every
/// pair accepted, or every pair rejected) are counted in bulk; the others stay candidates for
/// their fallbacks only, and their pairs (with j's, when its class is unknown) take the
/// reliability test alone, which reads the rows. Results are bit for bit those of the full pass.
/// Sums: per round, a lane whose points share one label sums them pairwise (its lane sum). When
/// all the tile's 128 points share one label, warpSum8 sums the lane sums over the lanes and one
/// lane per feature adds its total into slot 0. Otherwise each of the tile's first kMaskedLabels
/// labels is summed the same way (every lane's points of that label pairwise, its others as
/// zeros), and the points of any further label go one lane sum or one point at a time into slot
/// l mod S of lane l, the 32 / S lanes of a slot taking turns in lane order (phases).
/// Determinism: a slot's sum adds in a fixed order (round, then masked label in order of first
/// appearance, then phase, then p); the lane sums' and warpSum8's orders are fixed; integer counts
/// use shared atomics (exact). The fold adds, per element, the slots of each warp in slot order,
/// then the warps in warp order, and writes partialSum[e blocks + b]. Everything depends only on N,
/// K, D, the tile width, the labels and the launch shape.
///
/// The pass is a device function: assignFastKernel runs it once, loopFastKernel once per
/// iteration of its persistent loop.
template <class LowT, class HighT, class WT, class LabelT, int DT>
__device__ __forceinline__ void assignFastPass(const Args<LowT, HighT, WT, LabelT>& a, int assign) {
  static_assert(DT > 0, "the fast pass needs a compile-time D");
  using A = Args<LowT, HighT, WT, LabelT>;
  using H = typename A::H;
  using LC = LowCentre<LowT, DT>;
  using HC = HighCentre<H, DT>;
  constexpr bool kFallback = A::kFallback;
  constexpr bool kPacked = kPackedPass<LowT, kFallback>;
  // Old labels loaded with the rows are held through the assignment (two label words now; one
  // register per label when this was measured: bf16>fp32 went from 68 to 90 registers, three
  // resident blocks to two). The scalar mixed pass (bf16 and fp32>fp64 fallbacks) has none to
  // spare, so it loads them after the assignment, all before any store.
  constexpr bool kEarlyLabels = kPacked || !kFallback;
  // The fp16 / bf16 mixed passes test a one-winner tile's fallbacks with the scan itself (see
  // the round). H200, 12 MP, K = 32, two runs of each build: fp16>fp32 0.2208 / 0.2194 ->
  // 0.2175 / 0.2173 ms per iteration, fp16>fp64 0.2682 / 0.2682 -> 0.2532 / 0.2538, bf16>fp32
  // 0.3510 / 0.3511 -> 0.3351 / 0.3354, bf16>fp64 0.4347 / 0.4360 -> 0.4181 / 0.4184 (the pass
  // holds one copy of the scan: fp16>fp32's code 57.5 -> 54.3 KB); fp32>fp64 0.1601 / 0.1614 ->
  // 0.1665 / 0.1670, so it keeps its own count (scalarCount).
  constexpr bool kOneScan = kFallback && kPackedLow<LowT>;
  constexpr int P = kFastPoints;
  static_assert(P == 4, "label words and lane sums take four points");
  extern __shared__ __align__(16) unsigned char smem[];

  if (!assign && a.state->empty == 0) return;
  const int k = a.k;
  const int kd = k * DT;
  const int slotShift = a.fastSlotShift;
  const int slots = 1 << slotShift;
  const int phases = 32 >> slotShift;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int iteration = a.state->iteration + 1;

  WT* acc = reinterpret_cast<WT*>(smem);
  const std::size_t accElems = std::size_t(kWarps) * kd * slots;
  unsigned char* p8 = smem + (accElems * sizeof(WT) + 15) / 16 * 16;
  unsigned* count = reinterpret_cast<unsigned*>(p8);
  p8 += (std::size_t(k) * sizeof(unsigned) + 15) / 16 * 16;
  const int candWords = fastCandidateWords(k);
  constexpr int kSets = kCandidateSets<LowT, kFallback>;
  unsigned* cand = reinterpret_cast<unsigned*>(p8) + warp * kSets * candWords;
  unsigned* win = cand + candWords;
  unsigned* falls = win + candWords;  // kFallsKnown: the centres whose class is falls
  p8 += (std::size_t(kWarps) * kSets * candWords * sizeof(unsigned) + 15) / 16 * 16;
  LC* scl = reinterpret_cast<LC*>(p8);
  HC* sch = reinterpret_cast<HC*>(p8 + k * sizeof(LC));
  // The centres for the bounds (kBoundCentres), after the centres in H of the mixed passes.
  constexpr bool kShift = kShiftedBounds<LowT, kFallback>;
  constexpr bool kBound = kBoundCentres<LowT, H, kFallback>;
  BoundCentre<DT>* sbc =
      reinterpret_cast<BoundCentre<DT>*>(p8 + k * (sizeof(LC) + (kFallback ? sizeof(HC) : 0)));

  // The warp's tiles: tile = kWarps (b + r B) + warp in round r for block b of B, in band
  // tile / tileCols (rows kTileRows band ...) and column tile mod tileCols. Nothing is fetched
  // into L2 ahead of its round: asking L2 for the next round's box, label state, rows and labels
  // (unless the state predicted a settled tile) made every mode slower (H200, 12 MP, K = 32,
  // two runs each: fp32 0.1045 against 0.1160 ms per iteration, fp16>fp32 0.1965 against 0.2132).
  const int tStride = a.blocks * kWarps;
  for (std::size_t e = threadIdx.x; e < accElems; e += blockDim.x) acc[e] = WT(0);
  for (int j = threadIdx.x; j < k; j += blockDim.x) count[j] = 0;
  __shared__ unsigned totals[3];
  if (threadIdx.x < 3) totals[threadIdx.x] = 0;
  if (assign) {
    for (int j = threadIdx.x; j < k; j += blockDim.x) {
      LC c;
      for (int q = 0; q < DT; ++q) c.c[q] = a.cl[j * DT + q];
      c.cc = a.ccl[j];
      scl[j] = c;
      if constexpr (kBound) {
        BoundCentre<DT> bc;
        float exact = 0.f;  // ||c~||^2 up to float rounding
#pragma unroll
        for (int q = 0; q < DT; ++q) {
          bc.c[q] = convert<float>(c.c[q]);
          exact = fmaf(bc.c[q], bc.c[q], exact);
        }
        bc.cc = convert<float>(c.cc);
        bc.shift = kShift || kTightMixed<LowT, kFallback> ? bc.cc - exact : 0.f;
        bc.root = kFallback ? sqrtUp(bc.cc) : 0.f;
        sbc[j] = bc;
      }
    }
    if constexpr (kFallback) {
      for (int j = threadIdx.x; j < k; j += blockDim.x) {
        HC h;
        for (int q = 0; q < DT; ++q) h.c[q] = a.ch[j * DT + q];
        sch[j] = h;
      }
    }
  }
  __syncthreads();

  if (assign && !a.prune) {
    // Every centre is a candidate (the full scan).
    for (int c = lane; c < candWords; c += 32) {
      cand[c] = win[c] = c < k >> 5 ? ~0u : (1u << (k & 31)) - 1;
      if constexpr (kSets > 2) falls[c] = 0;
    }
    __syncwarp();
  }
  WT* warpAcc = acc + std::size_t(warp) * kd * slots;
  WT* myAcc = warpAcc + (lane & (slots - 1));
  const int myPhase = lane >> slotShift;
  unsigned changed = 0, fallbacks = 0, cycleDiff = 0;
  for (int tile = int(blockIdx.x) * kWarps + warp; tile < a.tiles; tile += tStride) {
    // The candidates first: they need only the tile's box, and a tile with one winner needs
    // little more.
    //
    // One winner: the box proves that centre `only` wins for every point, so no distance decides
    // a label. In a mixed mode the fallbacks of the classes known are counted in bulk, and the
    // remaining candidates' pairs (and the winner's, when its class is not known) take the
    // reliability test only, which reads the rows. When `only` was also the label of every point
    // in the last two assignments (the label state), nothing changes and the labels are not
    // read: the tile is settled. Otherwise the labels become `only`, with their changed and
    // 2-cycle counts. The sums take the tile's precomputed sum, computed as the one-label case
    // below computes it. Results are bit for bit those of the full scan.
    // Adds the tile's precomputed sum to cluster l (tileBoxKernel adds the tile's rows as the
    // one-label case below does, so the bits are the same).
    auto addTileSum = [&](int l) {
      if ((lane & 3) == 0 && lane < 4 * DT) {
        WT* t = warpAcc + (std::size_t(l) * DT + (lane >> 2)) * slots;
        *t = *t + a.tileSums[std::size_t(tile) * DT + (lane >> 2)];
      }
    };
    auto oneWinner = [&](int only, unsigned state) {
      if (state != unsigned(only) * 0x10001u) {
        const long long first = tileFirst(a, tile, lane);
        const LabelWord<LabelT> newWord = uniformLabelWord<LabelT>(only);
        if (iteration == 1) {
          changed += P;
        } else {
          const LabelWord<LabelT> oldWord =
              *reinterpret_cast<const LabelWord<LabelT>*>(a.labels + first);
          changed += differingLabels<LabelT>(oldWord, newWord);
          if (iteration >= 3)
            cycleDiff += differingLabels<LabelT>(
                *reinterpret_cast<const LabelWord<LabelT>*>(a.twoAgo + first), newWord);
          *reinterpret_cast<LabelWord<LabelT>*>(a.twoAgo + first) = oldWord;
        }
        *reinterpret_cast<LabelWord<LabelT>*>(a.labels + first) = newWord;
      }
      const unsigned next = unsigned(only) | (state & kNoTileLabel) << 16;
      if (lane == 0 && next != state) a.tileState[tile] = next;
      addTileSum(only);
      if (lane == 0) atomicAdd(&count[only], 32u * P);
      __syncwarp();
    };
    int fallsSkipped = 0;  // mixed modes: centres left out whose pairs all fall back
    int only = -1;         // mixed modes: the one winner whose tile reads its rows (kOneScan: any)
    unsigned onlyState = 0;
    bool onlyNoRows = false;  // kOneScan: the one winner's tile needs no rows
    if (assign && a.prune) {
      // The tile's label state (Args::tileState).
      const unsigned state = a.tileState[tile];
      bool wholeTile;
      const Box<DT> box = loadBox(a.boxes + tile, wholeTile);
      const TileCandidates tc = warpCandidates(a, scl, sbc, box, cand, win, falls, lane);
      if (tc.only >= 0 && wholeTile) {
        const bool readRows = kFallback && (tc.candidates > 1 || tc.onlyClass == kClassUnknown);
        if constexpr (kFallback)
          fallbacks += unsigned(P * (tc.fallsSkipped + (tc.onlyClass == kClassFalls ? 1 : 0)));
        if (!readRows) {
          if constexpr (kOneScan) {
            // To the one call of oneWinner below, past the rows and the scan.
            onlyNoRows = true;
          } else {
            oneWinner(tc.only, state);
            continue;
          }
        }
        // The candidates to test: all but the winner when its class is known.
        if (lane == 0 && tc.onlyClass != kClassUnknown && (!kOneScan || readRows))
          cand[tc.only >> 5] &= ~(1u << (tc.only & 31));
        __syncwarp();
        only = tc.only;
        onlyState = state;
      } else {
        fallsSkipped = tc.fallsSkipped;
      }
    }
    WT w[P][DT];
    long long first;
    int have;
    if constexpr (kOneScan) {
      // A one winner's tile that skips its rows is whole.
      first = 0;
      have = P;
    }
    if (!onlyNoRows && !loadTileRows(a, tile, lane, w, first, have)) continue;
    // A tile with one winner whose rows are read for the reliability test: in the fp16 / bf16
    // mixed passes (kOneScan) it takes the scan below with no centre that may win, one copy of
    // the scan in the pass instead of two (its label is ignored, its fallbacks are the same);
    // fp32>fp64 counts them here.
    if constexpr (kFallback && !kOneScan) {
      if (only >= 0) {
        scalarCount<P>(a, scl, cand, w, fallbacks);
        oneWinner(only, onlyState);
        continue;
      }
    }
    const bool whole = have == P;
    if constexpr (kFallback) fallbacks += unsigned(have * fallsSkipped);
    int label[P];
    bool valid[P];
#pragma unroll
    for (int p = 0; p < P; ++p) valid[p] = p < have;
    // The labels this round replaces (and those of two iterations earlier), one word each.
    LabelWord<LabelT> oldWord = 0, twoAgoWord = 0;
    auto loadOld = [&]() {
      if (!assign || iteration < 2) return;
      if (whole) {
        oldWord = *reinterpret_cast<const LabelWord<LabelT>*>(a.labels + first);
        if (iteration >= 3)
          twoAgoWord = *reinterpret_cast<const LabelWord<LabelT>*>(a.twoAgo + first);
      } else {
#pragma unroll
        for (int p = 0; p < P; ++p) {
          if (!valid[p]) continue;
          oldWord |= LabelWord<LabelT>(a.labels[first + p]) << (kLabelBits<LabelT> * p);
          if (iteration >= 3)
            twoAgoWord |= LabelWord<LabelT>(a.twoAgo[first + p]) << (kLabelBits<LabelT> * p);
        }
      }
    };
    // Loaded with the rows, so that no label store waits for its load after the assignment.
    if constexpr (kEarlyLabels) {
      if (!kOneScan || only < 0) loadOld();
    }
    if (assign) {
      int best[P];
      // kOneScan: a one winner's tile scans with no centre that may win (null), or not at all.
      const unsigned* mayWin = kOneScan && only >= 0 ? nullptr : win;
      if (!onlyNoRows) {
        if constexpr (kPacked)
          packedAssign<P>(a, scl, sch, cand, mayWin, w, valid, best, fallbacks);
        else
          scalarAssign<P, kOneScan>(a, scl, sch, cand, mayWin, falls, w, valid, best, fallbacks);
      }
      if constexpr (kOneScan) {
        if (only >= 0) {
          oneWinner(only, onlyState);
          continue;
        }
      }
      // All loads before any store.
      if constexpr (!kEarlyLabels) loadOld();
      LabelWord<LabelT> newWord = 0;
#pragma unroll
      for (int p = 0; p < P; ++p) {
        label[p] = best[p];
        newWord |= LabelWord<LabelT>(best[p]) << (kLabelBits<LabelT> * p);
      }
      if (iteration >= 2 && whole) {
        changed += differingLabels<LabelT>(oldWord, newWord);
        if (iteration >= 3) cycleDiff += differingLabels<LabelT>(twoAgoWord, newWord);
      } else {
#pragma unroll
        for (int p = 0; p < P; ++p) {
          if (!valid[p]) continue;
          if (iteration == 1) {
            changed += 1;
          } else {
            changed += labelOf<LabelT>(oldWord, p) != best[p];
            if (iteration >= 3) cycleDiff += labelOf<LabelT>(twoAgoWord, p) != best[p];
          }
        }
      }
      if (whole) {
        *reinterpret_cast<LabelWord<LabelT>*>(a.labels + first) = newWord;
        if (iteration >= 2) *reinterpret_cast<LabelWord<LabelT>*>(a.twoAgo + first) = oldWord;
      } else {
#pragma unroll
        for (int p = 0; p < P; ++p) {
          if (!valid[p]) continue;
          a.labels[first + p] = LabelT(best[p]);
          if (iteration >= 2) a.twoAgo[first + p] = LabelT(labelOf<LabelT>(oldWord, p));
        }
      }
    } else if (whole) {
      const LabelWord<LabelT> v = *reinterpret_cast<const LabelWord<LabelT>*>(a.labels + first);
#pragma unroll
      for (int p = 0; p < P; ++p) label[p] = labelOf<LabelT>(v, p);
    } else {
#pragma unroll
      for (int p = 0; p < P; ++p) label[p] = valid[p] ? int(a.labels[first + p]) : 0;
    }
    // Sums. A lane whose P points share one label adds them first, pairwise ("lane sum"). When
    // every lane's does and all share one label (most tiles of a photo), warpSum8 sums the lane
    // sums and five lanes add the totals to slot 0. Otherwise, for each of the tile's first
    // kMaskedLabels labels (in order of first appearance, lane then p), every lane sums its
    // points of that label pairwise (its other points as zeros), warpSum8 sums those and five
    // lanes add the totals to slot 0; the points of any further labels go to the slots, the lanes
    // of one slot taking turns in lane order (lanes of one phase own distinct slots), each adding
    // its lane sum or its points one by one.
    bool laneOne = valid[P - 1];
#pragma unroll
    for (int p = 1; p < P; ++p) laneOne = laneOne && label[p] == label[0];
    const int l0 = __shfl_sync(0xffffffffu, label[0], 0);
    const bool warpOne = __all_sync(0xffffffffu, laneOne && label[0] == l0);
    // The tile's new label state: one label only when all its 128 points exist (laneOne). (The
    // state is read again rather than kept: the uniform fp32 pass has no register to spare.)
    if (assign && a.tileState && lane == 0) {
      const unsigned state = a.tileState[tile];
      const unsigned next = (warpOne ? unsigned(l0) : kNoTileLabel) | (state & kNoTileLabel) << 16;
      if (next != state) a.tileState[tile] = next;
    }
    WT sum[DT];
#pragma unroll
    for (int q = 0; q < DT; ++q) sum[q] = (w[0][q] + w[1][q]) + (w[2][q] + w[3][q]);
    if (warpOne) {
      if (!kFallback && a.tileSums) {
        // Not in the mixed passes: bf16>fp32 and bf16>fp64 took 2-3 % longer with it at 12 MP
        // (H200).
        addTileSum(l0);
      } else {
        int q;
        const WT v = warpSum8<DT>(sum, lane, q);
        if ((lane & 3) == 0 && q < DT) {
          WT* t = warpAcc + (std::size_t(l0) * DT + q) * slots;
          *t = *t + v;
        }
      }
      if (lane == 0) atomicAdd(&count[l0], 32u * P);
    } else {
      unsigned pending = 0;  // bit p: point p is valid and not yet summed
#pragma unroll
      for (int p = 0; p < P; ++p) pending |= unsigned(valid[p]) << p;
      for (int pass = 0; pass < kMaskedLabels; ++pass) {
        const unsigned lanes = __ballot_sync(0xffffffffu, pending != 0);
        if (lanes == 0) break;
        int mine = label[P - 1];  // the label of the lane's first pending point
#pragma unroll
        for (int p = P - 2; p >= 0; --p)
          if (pending >> p & 1) mine = label[p];
        const int l = __shfl_sync(0xffffffffu, mine, __ffs(lanes) - 1);
        unsigned take = 0;
#pragma unroll
        for (int p = 0; p < P; ++p) take |= unsigned((pending >> p & 1) && label[p] == l) << p;
        pending &= ~take;
        WT part[DT];
#pragma unroll
        for (int q = 0; q < DT; ++q)
          part[q] = ((take & 1 ? w[0][q] : WT(0)) + (take & 2 ? w[1][q] : WT(0))) +
                    ((take & 4 ? w[2][q] : WT(0)) + (take & 8 ? w[3][q] : WT(0)));
        int q;
        const WT v = warpSum8<DT>(part, lane, q);
        if ((lane & 3) == 0 && q < DT) {
          WT* t = warpAcc + (std::size_t(l) * DT + q) * slots;
          *t = *t + v;
        }
        const unsigned n = warpSumCount(unsigned(__popc(take)));
        if (lane == 0) atomicAdd(&count[l], n);
      }
      if (__any_sync(0xffffffffu, pending != 0)) {
        // A lane sum is whole or untouched: the passes take all points of a label.
        const bool laneRest = laneOne && pending != 0;
        for (int ph = 0; ph < phases; ++ph) {
          __syncwarp();
          if (ph == myPhase) {
            if (laneRest) {
              WT* t = myAcc + std::size_t(label[0]) * DT * slots;
#pragma unroll
              for (int q = 0; q < DT; ++q) t[q * slots] = t[q * slots] + sum[q];
            } else {
#pragma unroll
              for (int p = 0; p < P; ++p) {
                if (!(pending >> p & 1)) continue;
                WT* t = myAcc + std::size_t(label[p]) * DT * slots;
#pragma unroll
                for (int q = 0; q < DT; ++q) t[q * slots] = t[q * slots] + w[p][q];
              }
            }
          }
        }
        if (laneRest) {
          atomicAdd(&count[label[0]], unsigned(P));
        } else {
#pragma unroll
          for (int p = 0; p < P; ++p)
            if (pending >> p & 1) atomicAdd(&count[label[p]], 1u);
        }
      }
    }
    __syncwarp();
  }
  __syncthreads();

  // Fold: per element, each warp's slots in slot order, then the warps in warp order.
  for (int e = threadIdx.x; e < kd; e += blockDim.x) {
    const int j = e / DT, q = e - j * DT;
    WT v = WT(0);
    for (int wp = 0; wp < kWarps; ++wp) {
      const WT* s = acc + std::size_t(wp) * kd * slots + std::size_t(j * DT + q) * slots;
      WT ws = s[0];
      for (int t = 1; t < slots; ++t) ws = ws + s[t];
      v = wp == 0 ? ws : v + ws;
    }
    a.partialSum[std::size_t(e) * a.blocks + blockIdx.x] = v;
  }
  for (int j = threadIdx.x; j < k; j += blockDim.x)
    a.partialCount[std::size_t(j) * a.blocks + blockIdx.x] = count[j];
  if (assign) addBlockCounts(changed, fallbacks, cycleDiff, totals, a.state);
}

/// The fast pass, once (see assignFastPass). MinBlocks: kFastMinBlocks, or kFewMinBlocks for the
/// small grids that Run::chooseFastShape gives that variant.
template <class LowT, class HighT, class WT, class LabelT, int DT,
          int MinBlocks = kFastMinBlocks<LowT, HighT, WT>>
__global__ void __launch_bounds__(kAssignThreads, MinBlocks)
    assignFastKernel(Args<LowT, HighT, WT, LabelT> a, int assign) {
  assignFastPass<LowT, HighT, WT, LabelT, DT>(a, assign);
}

/// reduceKernel's work for element e (< K D + K), by one whole warp (see there).
template <class A>
__device__ __forceinline__ void reduceElement(const A& a, int e) {
  using WT = std::remove_cv_t<std::remove_pointer_t<decltype(a.sums)>>;
  const int kd = a.k * a.d;
  const int lane = threadIdx.x & 31;
  constexpr int kSerial = kReduceThreads / 32;
  if (e < kd) {
    const WT* src = a.partialSum + std::size_t(e) * a.blocks;
    WT v[kSerial];
#pragma unroll
    for (int i = 0; i < kSerial; ++i) v[i] = WT(0);
    // Round r (0, 256, ...) adds partials r + l + 32 i; its loads go out before its adds.
    for (int r = 0; r < a.blocks; r += kReduceThreads) {
      WT x[kSerial];
#pragma unroll
      for (int i = 0; i < kSerial; ++i) {
        const int b = r + lane + 32 * i;
        x[i] = b < a.blocks ? src[b] : WT(0);
      }
      // A padded zero leaves the sum as it was: it never is -0 (it starts at +0).
#pragma unroll
      for (int i = 0; i < kSerial; ++i) v[i] = v[i] + x[i];
    }
#pragma unroll
    for (int h = kSerial / 2; h > 0; h >>= 1)
#pragma unroll
      for (int i = 0; i < h; ++i) v[i] = v[i] + v[i + h];
#pragma unroll
    for (int h = 16; h > 0; h >>= 1) {
      const WT o = __shfl_down_sync(0xffffffffu, v[0], h);
      if (lane < h) v[0] = v[0] + o;
    }
    if (lane == 0) a.sums[e] = v[0];
  } else {
    const int j = e - kd;
    unsigned long long v = 0;
    const unsigned* src = a.partialCount + std::size_t(j) * a.blocks;
    for (int b = lane; b < a.blocks; b += 32) v += src[b];
    for (int h = 16; h > 0; h >>= 1) v += __shfl_down_sync(0xffffffffu, v, h);
    if (lane == 0) a.counts[j] = (long long)v;
  }
}

/// Sums the block partials, one element per warp: warp w of the grid takes sums[w] for w < K D,
/// else counts[w - K D]. Determinism: a fixed order that depends only on the number of partials:
/// 256 serial sums (sum t of partials t, t + 256, ...) added in a binary tree (sum t takes
/// sum t + 128 for t < 128, then t + 64 for t < 64, ..., t + 1 for t = 0); lane l holds the serial
/// sums t = l + 32 i, so the tree's first three levels stay in the lane and the last five are
/// shuffles.
///
/// The grid's last block only reads the host's cancel flag into DeviceState::cancelSeen for the
/// update. The update read it itself until then, and its block waited for the round trip over
/// the bus (H200, K = 32, three alternating runs of each build, ms per iteration: fp32 0.0263 /
/// 0.0260 / 0.0260 -> 0.0258 / 0.0253 / 0.0253 at 0.26 MP, 0.0960 / 0.0964 / 0.0954 -> 0.0949 /
/// 0.0949 / 0.0951 at 12 MP; fp64 0.0303 / 0.0305 / 0.0302 -> 0.0296 / 0.0295 / 0.0294 at 0.26
/// MP, level at 12 MP). The reduction's own duration did not change (ncu: 3.1-3.2 us at 0.26 MP
/// either way).
template <class A>
__global__ void __launch_bounds__(kReduceThreads) reduceKernel(A a, int always) {
  if (blockIdx.x == gridDim.x - 1) {
    if (threadIdx.x == 0) a.state->cancelSeen = readCancel(a);
    return;
  }
  if (!always && a.state->empty == 0) return;
  const int e = int(blockIdx.x) * (kReduceThreads / 32) + int(threadIdx.x >> 5);
  if (e >= a.k * a.d + a.k) return;  // whole warps
  reduceElement(a, e);
}

template <class A>
__device__ void update(const A& a, unsigned char* smem, bool defer = false);
template <class A>
__device__ void finishDeferred(const A& a);
template <class A>
__device__ void ssePass(const A& a, double* buf);
template <class A>
__device__ void publishSse(const A& a, double* buf);

// ---- re-seeding -----------------------------------------------------------------------------
//
// Empty clusters are re-seeded in ascending order, each with the farthest eligible point: the
// point farthest (direct formula in W) from the centre it was assigned to, ties to the lowest
// index (lloyd_rules.h: fartherCandidate), among points whose cluster keeps another member. A
// point's distance does not change while clusters are re-seeded (its label and centre stay), and
// a point that is not eligible stays so (counts only fall, and a re-seeded point is alone in its
// cluster), so the re-seeded points are the first eligible ones of one fixed order, eligibility
// checked as they come. reseedListKernel orders the points by blocks: each block keeps its
// farthest ones in order; reseedPickKernel merges the blocks' lists, checks eligibility as it
// goes, and falls back to scanning every point (one block, per cluster) only when a list runs out
// while its block had more points: both give the sequential scan's choices.

inline constexpr int kReseedThreads = 256;
inline constexpr int kReseedKeep = 4;  // points each thread keeps, in order
inline constexpr int kReseedSortSize = kReseedThreads * kReseedKeep;
inline constexpr int kReseedList = 32;               // default list length per block
inline constexpr int kReseedMore = 1 << 16;          // reseedLen flag: the block had more points
inline constexpr long long kReseedLast = 1ll << 62;  // sort key flag, see reseedListKernel

/// Whether candidate (da, ia) comes before (db, ib) in re-seeding order; an index < 0 is no
/// candidate and comes last. Indices may carry kReseedLast.
template <class WT>
__device__ inline bool reseedBefore(WT da, long long ia, WT db, long long ib) {
  if (ia < 0) return false;
  if (ib < 0) return true;
  return fartherCandidate(da, ia & ~kReseedLast, db, ib & ~kReseedLast);
}

/// Sets the IF condition when a cluster is empty; otherwise runs the update. One block, with
/// `buf` holding kUpdateShared<WT> bytes; returns whether a cluster is empty (in every thread).
template <class A>
__device__ __forceinline__ int checkEmpty(const A& a, unsigned char* buf, bool defer = false) {
  int empty = 0;
  for (int j = threadIdx.x; j < a.k; j += blockDim.x) empty |= a.counts[j] == 0;
  empty = __syncthreads_or(empty);
  if (threadIdx.x == 0) {
    a.state->reseeding = empty;
    if (!a.hostLoop && !defer) {
      cudaGraphSetConditional(a.ifHandle, empty ? 1u : 0u);
      // An empty cluster leaves the inner loop for the re-seeding branch.
      if (hasInnerLoop(a) && empty) cudaGraphSetConditional(a.innerHandle, 0u);
    }
  }
  if (!empty) update(a, buf, defer);
  return empty;
}

/// checkEmpty() after reduceKernel (one launch less per iteration than a separate update).
template <class A>
__global__ void __launch_bounds__(kOneBlockThreads) checkEmptyKernel(A a) {
  using WT = std::remove_cv_t<std::remove_pointer_t<decltype(a.cw)>>;
  __shared__ __align__(16) unsigned char buf[kUpdateShared<WT>];
  checkEmpty(a, buf);
}

/// The graph's conditions as loopFastKernel leaves them, set once as it returns: the update
/// (publish) and checkEmpty leave them to it, as only the last values count. The IF branch
/// re-seeds when a cluster is empty; the loop goes on unless the run stopped or was cancelled
/// (with the SSE trace publishSse sets that one itself). After a re-seeding no update ran, and
/// the while condition is 1, as it has been all along (the graph would have ended otherwise).
template <class A>
__device__ void setLoopConditions(const A& a) {
  const DeviceState& s = *a.state;
  cudaGraphSetConditional(a.ifHandle, s.reseeding ? 1u : 0u);
  if (!a.traceSse)
    cudaGraphSetConditional(a.whileHandle, s.reseeding || !(s.stop || s.cancelled) ? 1u : 0u);
}

/// The assignment loop as one persistent kernel (Run::persistent_), for photos small enough that
/// the fast pass's blocks are all resident at once. Per iteration: every block runs the fast pass
/// and signals (DeviceState::loopArrived); the first `reducers` blocks wait for every block's
/// signal, reduce (warp w of them takes elements w, w + 8 reducers, ... with reduceElement's
/// order) and signal (loopReduced); block 0, which has read the host's cancel flag meanwhile,
/// waits for them, runs checkEmpty() (the update, unless a cluster is empty) and signals the
/// iteration done (loopDone); every block waits for that. The update leaves two steps that no
/// block needs before the next update to block 0's warp 0 in the next iteration, after its pass
/// (finishDeferred): the repeat rule's record and the progress shown to the host. With the SSE
/// trace every block then runs the SSE pass and signals (loopSse), and block 0 adds the partials
/// and publishes the trace entry (loopPublished), as sseKernel and publishKernel do. So it runs the
/// chain assignFastKernel, reduceKernel, checkEmptyKernel in the same order on the same data, bit
/// for bit, without the graph's launches between them. It leaves the loop when the update (or with
/// the SSE trace, the publishing) stopped it (stop test or cancel), when a cluster is empty (the
/// graph's IF branch re-seeds, the graph's sseKernel and publishKernel complete that iteration
/// when the SSE is traced, and the outer loop launches it again), or after one iteration with the
/// host loop. The signals are counters
/// over the run (every iteration's assignment runs here once, so iteration it is the it-th), and
/// only the blocks that need a signal wait for it: grid barriers (cooperative_groups) in their
/// place, every block waiting three times per iteration, took 0.3-0.9 us more per iteration
/// (H200, 0.26 MP, K = 32, two alternating runs each: fp32 0.0223 / 0.0221 against 0.0227 /
/// 0.0228 ms, fp16 0.0220 / 0.0221 against 0.0229 / 0.0228, fp64 0.0252 / 0.0246 against 0.0259
/// / 0.0256; fp16>fp32 level). It is launched cooperatively: all its blocks are resident, so no
/// wait is for a block that cannot run. Shared memory: the pass's, and at least
/// kUpdateShared<WT> bytes for the update and kOneBlockThreads doubles for the SSE's sum.
/// MinBlocks as for assignFastKernel.
template <class LowT, class HighT, class WT, class LabelT, int DT,
          int MinBlocks = kFastMinBlocks<LowT, HighT, WT>>
__global__ void __launch_bounds__(kAssignThreads, MinBlocks)
    loopFastKernel(Args<LowT, HighT, WT, LabelT> a) {
  extern __shared__ __align__(16) unsigned char loopSmem[];
  for (;;) {
    const unsigned long long it = (unsigned long long)(a.state->iteration + 1);
    assignFastPass<LowT, HighT, WT, LabelT, DT>(a, 1);
    __syncthreads();  // the block's partials are written
    if (threadIdx.x == 0) addRelease(&a.state->loopArrived, 1ull);
    const int elements = a.k * a.d + a.k;
    const int reducers = min(int(gridDim.x), (elements + kWarps - 1) / kWarps);
    // The update's cancel flag (with the SSE trace publishSse reads its own); its trip overlaps.
    int cancel = 0;
    if (!a.traceSse && blockIdx.x == 0 && threadIdx.x == 0) cancel = readCancel(a);
    // What the last update left for later, while the other blocks finish their pass: off the
    // chain from the last block's signal to the next pass.
    if (blockIdx.x == 0 && threadIdx.x < 32) finishDeferred(a);
    if (int(blockIdx.x) < reducers) {
      waitAtLeast(&a.state->loopArrived, it * gridDim.x);
      for (int e = int(blockIdx.x) * kWarps + int(threadIdx.x >> 5); e < elements;
           e += reducers * kWarps)
        reduceElement(a, e);
      __syncthreads();
      if (threadIdx.x == 0) addRelease(&a.state->loopReduced, 1ull);
    }
    if (blockIdx.x == 0) {
      if (threadIdx.x == 0) a.state->cancelSeen = cancel;
      waitAtLeast(&a.state->loopReduced, it * (unsigned long long)reducers);
      checkEmpty(a, loopSmem, true);
      __syncthreads();  // the update's writes are done
      if (threadIdx.x == 0) storeRelease(&a.state->loopDone, it);
    }
    waitAtLeast(&a.state->loopDone, it);
    // Block 0 wrote these before its signal, and writes them again only after this block's
    // next pass.
    const DeviceState& st = *a.state;
    if (a.traceSse) {
      // Every block signals once per iteration, also when it leaves the SSE to the graph's
      // kernels after the re-seeding: iteration it's SSE partials are in at it B signals.
      double* buf = reinterpret_cast<double*>(loopSmem);
      if (!st.reseeding) ssePass(a, buf);
      if (threadIdx.x == 0) addRelease(&a.state->loopSse, 1ull);
      if (st.reseeding) {
        if (blockIdx.x == 0 && threadIdx.x == 0) a.state->sseDue = 1;
      } else {
        // Block 0 adds the partials and publishes, as publishKernel would.
        if (blockIdx.x == 0) {
          waitAtLeast(&a.state->loopSse, it * gridDim.x);
          publishSse(a, buf);
          __syncthreads();
          if (threadIdx.x == 0) storeRelease(&a.state->loopPublished, it);
        }
        waitAtLeast(&a.state->loopPublished, it);
      }
    }
    if (a.hostLoop || st.stop || st.cancelled || st.reseeding) {
      // Nothing is left for a later kernel: the graph's, the next launch's and the host's
      // readers find the state as the chain's update leaves it.
      if (blockIdx.x == 0 && threadIdx.x < 32) finishDeferred(a);
      if (blockIdx.x == 0 && threadIdx.x == 0 && !a.hostLoop) setLoopConditions(a);
      break;
    }
  }
}

/// Block b's list of re-seeding candidates. Each thread keeps its kReseedKeep farthest eligible
/// points (grid-stride), in order; the block sorts the kReseedSortSize kept points (bitonic, in
/// shared memory) and writes the first ones up to the list length. A thread that saw more points
/// than it kept marks its last kept one (kReseedLast): the block's order is sure up to the first
/// marked point (any point it left out comes after it), and the list ends there.
template <class A>
__global__ void __launch_bounds__(kReseedThreads) reseedListKernel(A a) {
  using WT = std::remove_cv_t<std::remove_pointer_t<decltype(a.cw)>>;
  if (!a.state->reseeding) return;
  __shared__ WT sd[kReseedSortSize];
  __shared__ long long si[kReseedSortSize];
  __shared__ int cut, valid;
  if (threadIdx.x == 0) cut = kReseedSortSize, valid = 0;
  WT d[kReseedKeep];
  long long id[kReseedKeep];
#pragma unroll
  for (int t = 0; t < kReseedKeep; ++t) d[t] = WT(0), id[t] = -1;
  bool more = false;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += stride) {
    const int li = a.labels[i];
    if (a.counts[li] <= 1) continue;
    WT cd = directDistance<WT>(a.xw + i * a.d, a.cw + std::size_t(li) * a.d, a.d);
    long long ci = i;
#pragma unroll
    for (int t = 0; t < kReseedKeep; ++t) {
      if (ci >= 0 && (id[t] < 0 || fartherCandidate(cd, ci, d[t], id[t]))) {
        const WT td = d[t];
        const long long ti = id[t];
        d[t] = cd, id[t] = ci;
        cd = td, ci = ti;
      }
    }
    more |= ci >= 0;  // a point dropped off the end
  }
  int kept = 0;
#pragma unroll
  for (int t = 0; t < kReseedKeep; ++t) {
    sd[threadIdx.x * kReseedKeep + t] = d[t];
    si[threadIdx.x * kReseedKeep + t] = id[t] | (t == kReseedKeep - 1 && more ? kReseedLast : 0);
    kept += id[t] >= 0;
  }
  __syncthreads();
  if (kept) atomicAdd(&valid, kept);
  for (int size = 2; size <= kReseedSortSize; size <<= 1) {
    for (int half = size >> 1; half > 0; half >>= 1) {
      for (int p = threadIdx.x; p < kReseedSortSize; p += blockDim.x) {
        const int q = p ^ half;
        if (q <= p) continue;
        const bool swap = (p & size) == 0 ? reseedBefore(sd[q], si[q], sd[p], si[p])
                                          : reseedBefore(sd[p], si[p], sd[q], si[q]);
        if (swap) {
          const WT td = sd[p];
          const long long ti = si[p];
          sd[p] = sd[q], si[p] = si[q];
          sd[q] = td, si[q] = ti;
        }
      }
      __syncthreads();
    }
  }
  for (int p = threadIdx.x; p < kReseedSortSize; p += blockDim.x)
    if (si[p] >= 0 && (si[p] & kReseedLast)) atomicMin(&cut, p);
  __syncthreads();
  const int sure = cut < kReseedSortSize ? cut + 1 : valid;
  const int len = min(sure, a.reseedList);
  const std::size_t base = std::size_t(blockIdx.x) * a.reseedList;
  for (int p = threadIdx.x; p < len; p += blockDim.x) {
    a.reseedD[base + p] = sd[p];
    a.reseedI[base + p] = si[p] & ~kReseedLast;
  }
  if (threadIdx.x == 0)
    a.reseedLen[blockIdx.x] = len | (cut < kReseedSortSize || sure > len ? kReseedMore : 0);
}

/// The farthest eligible point by a scan of every point (one block; the argmax is a total order,
/// so the choice does not depend on the reduction order), or -1 when there is none. Block-uniform.
template <class A, class WT>
__device__ long long farthestByScan(const A& a, WT* bestD, long long* bestI) {
  WT bd = WT(-1);
  long long bi = -1;
  for (long long i = threadIdx.x; i < a.n; i += blockDim.x) {
    const int li = a.labels[i];
    if (a.counts[li] <= 1) continue;
    const WT di = directDistance<WT>(a.xw + i * a.d, a.cw + std::size_t(li) * a.d, a.d);
    if (bi < 0 || fartherCandidate(di, i, bd, bi)) bd = di, bi = i;
  }
  bestD[threadIdx.x] = bd;
  bestI[threadIdx.x] = bi;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const long long oi = bestI[threadIdx.x + s];
      if (oi >= 0 &&
          (bestI[threadIdx.x] < 0 ||
           fartherCandidate(bestD[threadIdx.x + s], oi, bestD[threadIdx.x], bestI[threadIdx.x]))) {
        bestD[threadIdx.x] = bestD[threadIdx.x + s];
        bestI[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  const long long pick = bestI[0];
  __syncthreads();
  return pick;
}

/// Re-seeds the empty clusters from reseedListKernel's lists (see above), and records the
/// events. Thread b < reseedBlocks holds list b's head. One block.
template <class A>
__global__ void __launch_bounds__(kOneBlockThreads) reseedPickKernel(A a) {
  using WT = std::remove_cv_t<std::remove_pointer_t<decltype(a.cw)>>;
  using LabelT = std::remove_cv_t<std::remove_pointer_t<decltype(a.labels)>>;
  static_assert(kOneBlockThreads == 32 * 32);
  if (!a.state->reseeding) return;
  __shared__ WT bestD[kOneBlockThreads];
  __shared__ long long bestI[kOneBlockThreads];
  __shared__ long long chosen;
  __shared__ int chosenList;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int len = 0, head = 0;
  bool more = false;
  WT hd = WT(0);
  long long hi = -1;
  const std::size_t base = std::size_t(threadIdx.x) * a.reseedList;
  if (threadIdx.x < a.reseedBlocks) {
    const int v = a.reseedLen[threadIdx.x];
    len = v & (kReseedMore - 1);
    more = (v & kReseedMore) != 0;
    if (len > 0) hd = a.reseedD[base], hi = a.reseedI[base];
  }
  bool merged = true;  // the lists still give the order; else scan
  long long events = 0;
  for (int j = 0; j < a.k; ++j) {
    if (a.counts[j] != 0) continue;  // uniform: counts change only between barriers
    long long pick = -1;
    while (merged) {
      if (__syncthreads_or(head == len && more)) {
        merged = false;
        break;
      }
      // The first head in order: per warp, then over the warps.
      WT bd = hd;
      long long bi = hi;
      int bl = threadIdx.x;
      for (int h = 16; h > 0; h >>= 1) {
        const WT od = __shfl_down_sync(0xffffffffu, bd, h);
        const long long oi = __shfl_down_sync(0xffffffffu, bi, h);
        const int ol = __shfl_down_sync(0xffffffffu, bl, h);
        if (reseedBefore(od, oi, bd, bi)) bd = od, bi = oi, bl = ol;
      }
      if (lane == 0) bestD[warp] = bd, bestI[warp] = bi, bestI[32 + warp] = bl;
      __syncthreads();
      if (warp == 0) {
        bd = bestD[lane], bi = bestI[lane], bl = int(bestI[32 + lane]);
        for (int h = 16; h > 0; h >>= 1) {
          const WT od = __shfl_down_sync(0xffffffffu, bd, h);
          const long long oi = __shfl_down_sync(0xffffffffu, bi, h);
          const int ol = __shfl_down_sync(0xffffffffu, bl, h);
          if (reseedBefore(od, oi, bd, bi)) bd = od, bi = oi, bl = ol;
        }
        if (lane == 0) chosen = bi, chosenList = bl;
      }
      __syncthreads();
      const long long c = chosen;
      if (c < 0) break;  // no eligible point (cannot happen for K <= N)
      if (threadIdx.x == chosenList) {
        ++head;
        hi = -1;
        if (head < len) hd = a.reseedD[base + head], hi = a.reseedI[base + head];
      }
      if (a.counts[a.labels[c]] > 1) {
        pick = c;
        break;
      }
    }
    if (!merged) pick = farthestByScan(a, bestD, bestI);
    if (pick < 0) break;
    __syncthreads();  // every thread has read the counts and labels the pick changes
    if (threadIdx.x == 0) {
      --a.counts[a.labels[pick]];
      a.labels[pick] = LabelT(j);
      // The picked point's tile no longer has one label: the state must follow the label
      // arrays, or a tile with one winner could take its labels as unchanged.
      if (a.tileState) a.tileState[tileOfPoint(a, pick)] = kNoTileLabel * 0x10001u;
      a.counts[j] = 1;
    }
    ++events;
    __syncthreads();
  }
  if (threadIdx.x == 0) a.state->empty = events;
}

// Writes the trace entry `e` of iteration `it` to mapped memory and then the progress, which the
// host polls. The system-scope fence between them waits for the entry's trip over the bus (about
// 0.7 us). Thread 0 only.
template <class A>
__device__ void showProgress(const A& a, int it, const TraceEntry& e) {
  a.traceHost[it - 1] = e;
  __threadfence_system();
  *reinterpret_cast<volatile int*>(&a.mapped->completed) = it;
}

// Shows the host the trace entry `e` of iteration `it` (already in a.trace), or with `defer`
// leaves that to finishDeferred, and sets the loop condition from the stop test and `cancel` (the
// update's DeviceState::cancelSeen, publishKernel's own readCancel). Thread 0 only.
template <class A>
__device__ void publish(const A& a, int it, int cancel, const TraceEntry& e, bool defer = false) {
  if (defer)
    a.state->publishDue = it;
  else
    showProgress(a, it, e);
  if (cancel && !a.state->stop) a.state->cancelled = 1;
  if (!a.hostLoop && !defer) {
    const unsigned go = (a.state->stop || cancel) ? 0u : 1u;
    cudaGraphSetConditional(a.whileHandle, go);
    // Also after the re-seeding branch, for the inner loop's next entry.
    if (hasInnerLoop(a)) cudaGraphSetConditional(a.innerHandle, go);
  }
}

/// Thread l < kShiftLanes: adds the terms of entries l, l + kShiftLanes, ... below n (of one
/// stage, whose first entry is a multiple of kShiftLanes) to its lane's sums, in index order.
__device__ inline void addShiftLanes(const double* moved, const double* size, int n, double& m,
                                     double& z) {
  for (int e = int(threadIdx.x); e < n; e += kShiftLanes) {
    m += moved[e];
    z += size[e];
  }
}

/// The lanes' pairwise sum (relativeCentreShift's order), called by threads [0, kShiftLanes)
/// only, each with its lane's sums; `lanes` holds 2 kShiftLanes doubles, which no other thread
/// uses meanwhile (the levels above a warp sync on named barrier 1). Thread 0 gets the shift.
__device__ inline double shiftOfLanes(double m, double z, double* lanes) {
  static_assert(kShiftLanes % 32 == 0 && kShiftLanes <= kOneBlockThreads);
  double* lm = lanes;
  double* lz = lanes + kShiftLanes;
  const int l = int(threadIdx.x);
  lm[l] = m;
  lz[l] = z;
  for (int h = kShiftLanes / 2; h >= 32; h >>= 1) {
    asm volatile("bar.sync 1, %0;" ::"n"(kShiftLanes) : "memory");
    if (l < h) {
      m = lm[l] + lm[l + h];
      z = lz[l] + lz[l + h];
      lm[l] = m;
      lz[l] = z;
    }
  }
  if (l >= 32) return 0.0;
  for (int h = 16; h > 0; h >>= 1) {
    const double om = __shfl_down_sync(0xffffffffu, m, h);
    const double oz = __shfl_down_sync(0xffffffffu, z, h);
    if (l < h) m = m + om, z = z + oz;
  }
  return centreShiftOfSums(m, z);
}

/// The repeat rule (lloyd_rules.h) once update() has written iteration `it`'s centres to a.cw
/// (the block's threads past a barrier since), by warp 0 alone, with no shared memory and no
/// block barrier (a block-wide version, its warps' hashes summed through shared memory, made
/// racecheck report hazards between those writes and the reads past the barrier that separated
/// them, after the update's named barrier of its first 256 threads). In two steps: repeatCheck
/// decides this iteration's stop, repeatRecord records the hash and searches the window, which
/// only later iterations need (loopFastKernel runs it in the next iteration, finishDeferred).
struct RepeatCheck {
  int period;     // the candidate's period when the centres equal its copy, else 0
  bool searches;  // whether repeatRecord searches the window for this iteration's hash
};

/// Whether iteration `it` checks the candidate and its centres equal the candidate's copy: the
/// same in every lane.
template <class A>
__device__ RepeatCheck repeatCheck(const A& a, int it) {
  const int lane = int(threadIdx.x & 31);
  const int kd = a.k * a.d;
  const RepeatSearch rs = a.state->repeat;
  const bool check = rs.checksAt(it);
  bool same = true;
  if (check)
    for (int e = lane; e < kd; e += 32)
      same = same && entryBits(a.cw[e]) == entryBits(a.repeatCopy[e]);
  same = __all_sync(0xffffffffu, same);
  const int period = check && same ? rs.period : 0;
  return {period, period == 0 && (rs.candidate == 0 || check)};
}

/// Iteration `it`'s hash of the centres (still in a.cw) into the window; with `searches`, the
/// latest earlier iteration of the same hash becomes the candidate (its centres copied), and the
/// candidate checked at `it` is dropped. The state as repeatCheck found it (nothing else writes
/// it between the two).
template <class A>
__device__ void repeatRecord(const A& a, int it, bool searches) {
  const int lane = int(threadIdx.x & 31);
  const int kd = a.k * a.d;
  const bool check = a.state->repeat.checksAt(it);
  unsigned long long h = 0;  // the terms' sum wraps: any order gives the same hash
  for (int e = lane; e < kd; e += 32) h += repeatHashTerm(entryBits(a.cw[e]), std::uint64_t(e));
  for (int o = 16; o > 0; o >>= 1) h += __shfl_xor_sync(0xffffffffu, h, o);
  int found = 0;
  if (searches) {
    // Each lane's first match is its latest; the warp takes the latest of the lanes'.
    for (int t = it - 2 - lane; t >= RepeatSearch::firstLookedAt(it); t -= 32)
      if (a.repeatHashes[t % kRepeatWindow] == h) {
        found = t;
        break;
      }
    for (int o = 16; o > 0; o >>= 1) found = max(found, __shfl_xor_sync(0xffffffffu, found, o));
    if (found > 0)
      for (int e = lane; e < kd; e += 32) a.repeatCopy[e] = a.cw[e];
  }
  __syncwarp();  // every lane has read the slot lane 0 writes, and the candidate
  if (lane == 0) {
    a.repeatHashes[it % kRepeatWindow] = h;
    if (check) a.state->repeat = RepeatSearch{};
    if (found > 0) a.state->repeat = RepeatSearch{it, it - found};
  }
}

/// What update() left for later: the repeat record and the progress shown to the host. Warp 0
/// of the update's block, its lanes together; before the next update reads the repeat state.
template <class A>
__device__ void finishDeferred(const A& a) {
  DeviceState& s = *a.state;
  __syncwarp();  // thread 0's writes of the state are seen by every lane
  const int due = s.repeatDue;
  if (due) repeatRecord(a, due, s.repeatSearches != 0);
  __syncwarp();  // every lane has read the state before lane 0 clears it
  if (threadIdx.x == 0) {
    s.repeatDue = 0;
    if (const int shown = s.publishDue) {
      s.publishDue = 0;
      showProgress(a, shown, a.trace[shown - 1]);
    }
  }
  __syncwarp();
}

/// New centres (sum / count in W, an empty cluster keeps its centre), the centre shift, the stop
/// test, the trace entry, and the low/high centre copies for the next iteration. One block;
/// `smem` holds kUpdateShared<WT> bytes.
///
/// The update sits between two passes on every iteration, so it is written for latency: thread 0
/// loads the loop state first; with K D <= kUpdateStage each thread computes its entries' new
/// value, copies and shift terms at once (centreShiftTerms, kept in shared memory), then the
/// first kShiftLanes threads add the terms in relativeCentreShift's lanes and the lanes by its
/// tree, and thread 0 writes the trace entry, while the other warps compute the low norms from a
/// shared copy of the low centres. Larger K D goes through the same steps a stage of
/// kUpdateStage entries at a time.
template <class A>
__device__ void update(const A& a, unsigned char* smem, bool defer) {
  using WT = std::remove_cv_t<std::remove_pointer_t<decltype(a.cw)>>;
  using LowT = std::remove_cv_t<std::remove_pointer_t<decltype(a.cl)>>;
  const int kd = a.k * a.d;
  DeviceState& s = *a.state;
  int it = 0, cancel = 0;
  TraceEntry t{};
  bool sameAsTwoAgo = false;
  if (threadIdx.x == 0) {
    it = s.iteration + 1;
    cancel = a.traceSse ? 0 : s.cancelSeen;
    t.changed = (long long)s.changed;
    t.fallbacks = (long long)s.fallbacks;
    t.empty = s.empty;
    t.sse = -1.0;
    sameAsTwoAgo = it >= 3 && s.cycleDiff == 0;
  }
  if (kd <= kUpdateStage) {
    double* moved = reinterpret_cast<double*>(smem);
    double* size = moved + kUpdateStage;
    LowT* low = reinterpret_cast<LowT*>(size + kUpdateStage);
    for (int e = threadIdx.x; e < kd; e += blockDim.x) {
      const WT old = a.cw[e];
      const WT v = updatedCentre(a.sums[e], a.counts[e / a.d], old);
      a.cw[e] = v;
      const ShiftTerms st = centreShiftTerms(old, v);
      moved[e] = st.moved;
      size[e] = st.size;
      low[e] = storeCentreCopies(a, e, v);
    }
    __syncthreads();
    if (threadIdx.x < kShiftLanes) {
      // A lane's terms are read by its thread only, so the lanes' sums may overwrite them.
      double m = 0.0, z = 0.0;
      addShiftLanes(moved, size, kd, m, z);
      const double shift = shiftOfLanes(m, z, moved);
      if (threadIdx.x == 0) t.shift = shift;
    } else {
      for (int j = threadIdx.x - kShiftLanes; j < a.k; j += blockDim.x - kShiftLanes)
        a.ccl[j] = squaredNorm<LowT>(low + j * a.d, a.d);
    }
    // A block of kShiftLanes threads (loopFastKernel's) has none to spare: the norms follow.
    if (blockDim.x <= kShiftLanes)
      for (int j = threadIdx.x; j < a.k; j += blockDim.x)
        a.ccl[j] = squaredNorm<LowT>(low + j * a.d, a.d);
  } else {
    // The same in stages of kUpdateStage entries: the block computes a stage's values, copies
    // and terms, the first kShiftLanes threads add the terms to their lanes (from shared memory,
    // not a dependent global load per entry: at K D = 64 000, 2.6 ms against the pass's 2.3),
    // then the lanes' tree and the norms.
    static_assert(kUpdateStage % kShiftLanes == 0);
    double* moved = reinterpret_cast<double*>(smem);
    double* size = moved + kUpdateStage;
    double m = 0.0, z = 0.0;
    for (int base = 0; base < kd; base += kUpdateStage) {
      const int n = min(kUpdateStage, kd - base);
      for (int e = threadIdx.x; e < n; e += blockDim.x) {
        const int g = base + e;
        const WT old = a.cw[g];
        const WT v = updatedCentre(a.sums[g], a.counts[g / a.d], old);
        a.cw[g] = v;
        const ShiftTerms st = centreShiftTerms(old, v);
        moved[e] = st.moved;
        size[e] = st.size;
        storeCentreCopies(a, g, v);
      }
      __syncthreads();
      if (threadIdx.x < kShiftLanes) addShiftLanes(moved, size, n, m, z);
      __syncthreads();
    }
    if (threadIdx.x < kShiftLanes) {
      const double shift = shiftOfLanes(m, z, moved);
      if (threadIdx.x == 0) t.shift = shift;
    }
    for (int j = threadIdx.x; j < a.k; j += blockDim.x)
      a.ccl[j] = squaredNorm<LowT>(a.cl + j * a.d, a.d);
  }
  // Warp 0's iteration: thread 0 alone writes the state, after the barriers above.
  const RepeatCheck repeat =
      a.repeatHashes && threadIdx.x < 32 ? repeatCheck(a, s.iteration + 1) : RepeatCheck{0, false};
  const int repeatPeriod = repeat.period;
  if (threadIdx.x == 0) {
    if (a.repeatHashes) s.repeatDue = it, s.repeatSearches = repeat.searches;
    a.trace[it - 1] = t;
    StopReason reason{};
    const bool stop = shouldStop({it, a.maxIterations, t.changed, t.empty, sameAsTwoAgo,
                                  a.detectCycles != 0, t.shift, a.tolerance, repeatPeriod},
                                 &reason);
    s.stop = stop;
    s.reason = int(reason);
    s.cyclePeriod = reason == StopReason::Cycle    ? 2
                    : reason == StopReason::Repeat ? repeatPeriod
                                                   : 0;
    s.iteration = it;
    s.changed = s.fallbacks = s.cycleDiff = 0;
    s.empty = 0;
    s.reseeding = 0;
    if (!a.traceSse) publish(a, it, cancel, t, defer);
  }
  // The chain's update leaves nothing for later (loopFastKernel's finishes before it returns).
  if (!defer && threadIdx.x < 32) finishDeferred(a);
}

/// update() as a kernel, for the iterations with an empty cluster (it returns at once when
/// checkEmptyKernel ran the update). One block.
template <class A>
__global__ void __launch_bounds__(kOneBlockThreads) updateKernel(A a) {
  using WT = std::remove_cv_t<std::remove_pointer_t<decltype(a.sums)>>;
  if (!a.state->reseeding) return;
  __shared__ __align__(16) unsigned char buf[kUpdateShared<WT>];
  update(a, buf);
}

/// Rows from which sseKernel reads a point's row with a whole warp (its lanes take the features
/// q = lane + 32 r) instead of one thread: a thread's own wide row is a load per feature, each
/// from another row than its neighbours' (about 0.1 ms per iteration at N = 100 000, D = 128).
inline constexpr int kSseWarpRowsMinD = 32;

/// Per-block fp64 SSE of the current labels against the current centres, on the original rows.
/// Determinism: each thread adds its terms in order (below kSseWarpRowsMinD its points, stride
/// blockDim, feature by feature; from there on its features of the warp's points, stride
/// kWarps), then a fixed tree.
/// `buf` holds kAssignThreads doubles; the block has kAssignThreads threads.
template <class A>
__device__ void ssePass(const A& a, double* buf) {
  const long long begin = blockIdx.x * a.chunk;
  const long long end = min(a.n, begin + a.chunk);
  const int d = a.d;
  double s = 0.0;
  // Point i's features q0, q0 + step, ... into s.
  auto addRow = [&](long long i, int q0, int step) {
    const double* x = a.x64 + i * d;
    const auto* c = a.cw + std::size_t(a.labels[i]) * d;
#pragma unroll 4
    for (int q = q0; q < d; q += step) {
      const double t = x[q] - double(c[q]);
      s = s + t * t;
    }
  };
  if (a.lookup.width) {
    // The same rows, rebuilt from 3 or 6 bytes of samples instead of read as 40 (d == 5); the
    // same terms in the same order.
    for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) {
      double x[5];
      lookupRow(a.lookup, unsigned(i), x);
      const auto* c = a.cw + std::size_t(a.labels[i]) * 5;
#pragma unroll
      for (int q = 0; q < 5; ++q) {
        const double t = x[q] - double(c[q]);
        s = s + t * t;
      }
    }
  } else if (d >= kSseWarpRowsMinD) {
    const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
    for (long long i = begin + warp; i < end; i += kWarps) addRow(i, lane, 32);
  } else {
    for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) addRow(i, 0, 1);
  }
  buf[threadIdx.x] = s;
  __syncthreads();
  for (int h = kAssignThreads / 2; h > 0; h >>= 1) {
    if (threadIdx.x < h) buf[threadIdx.x] = buf[threadIdx.x] + buf[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) a.ssePartial[blockIdx.x] = buf[0];
}

/// ssePass() as a kernel. With the persistent loop it works only for the iteration whose SSE
/// loopFastKernel left to the graph (DeviceState::sseDue).
template <class A>
__global__ void __launch_bounds__(kAssignThreads) sseKernel(A a) {
  __shared__ double buf[kAssignThreads];
  if (a.persistent && !a.state->sseDue) return;
  ssePass(a, buf);
}

/// Adds the SSE partials, completes the trace entry and publishes it. One block of any size that
/// divides kOneBlockThreads, `buf` holding kOneBlockThreads doubles. Determinism: the order is
/// that of kOneBlockThreads threads whatever the block's size: serial sums v (of partials v, v +
/// kOneBlockThreads, ...) for v < kOneBlockThreads, then a binary tree over them.
template <class A>
__device__ void publishSse(const A& a, double* buf) {
  const int cancel = threadIdx.x == 0 ? readCancel(a) : 0;
  for (int v = threadIdx.x; v < kOneBlockThreads; v += blockDim.x) {
    double s = 0.0;
    for (int b = v; b < a.blocks; b += kOneBlockThreads) s = s + a.ssePartial[b];
    buf[v] = s;
  }
  __syncthreads();
  for (int h = kOneBlockThreads / 2; h > 0; h >>= 1) {
    for (int v = threadIdx.x; v < h; v += blockDim.x) buf[v] = buf[v] + buf[v + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const int it = a.state->iteration;
    TraceEntry e = a.trace[it - 1];
    e.sse = buf[0];
    a.trace[it - 1] = e;
    publish(a, it, cancel, e);
  }
}

/// publishSse() as a kernel (see sseKernel for the persistent loop).
template <class A>
__global__ void __launch_bounds__(kOneBlockThreads) publishKernel(A a) {
  __shared__ double buf[kOneBlockThreads];
  if (a.persistent && !a.state->sseDue) return;
  publishSse(a, buf);
  if (threadIdx.x == 0) a.state->sseDue = 0;
}

// ---- host side ---------------------------------------------------------------------------------

// Ends a stream capture that an exception interrupted, so that the stream (and the frees that
// follow) work again.
class CaptureGuard {
 public:
  explicit CaptureGuard(cudaStream_t s) : s_(s) {}
  CaptureGuard(const CaptureGuard&) = delete;
  CaptureGuard& operator=(const CaptureGuard&) = delete;
  ~CaptureGuard() {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s_, &status) == cudaSuccess &&
        status != cudaStreamCaptureStatusNone) {
      cudaGraph_t g = nullptr;
      (void)cudaStreamEndCapture(s_, &g);
    }
    (void)cudaGetLastError();
  }

 private:
  cudaStream_t s_;
};

template <class LowT, class HighT, class WT, class LabelT>
class Run final : public LloydRun {
  using A = Args<LowT, HighT, WT, LabelT>;
  using H = typename A::H;
  static constexpr bool kFallback = A::kFallback;
  static constexpr bool kSharedLow = std::is_same_v<LowT, WT>;
  // The fast pass's blocks per SM in its variant for small grids (few_), and whether that is a
  // second variant.
  static constexpr int kFew = kFewMinBlocks<LowT, HighT, WT>;
  static constexpr bool kHasFew = kFew != kFastMinBlocks<LowT, HighT, WT>;

 public:
  explicit Run(const RunInputs& in) : in_(in) {
    if (!in.staging) ownStaging_ = std::make_unique<Staging>();
    staging_ = in.staging ? in.staging : ownStaging_.get();
    const Matrix& x = in.data;
    const KMeansParams& p = in.params;
    n_ = x.rows;
    d_ = int(x.cols);
    k_ = p.k;
    maxIt_ = p.maxIterations;
    const std::size_t nd = n_ * std::size_t(d_), kd = std::size_t(k_) * d_;

    KMSEG_CUDA_CHECK(cudaGetDevice(&device_));
    int sms = 0;
    KMSEG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_));

    std::size_t perBlock = 0;
    // The fast passes assume finite distances (kFastMaxAbs); centres are means of points and
    // re-seeded centres are points, so the data and the initial centres bound them all.
    double maxAbs = in.dataMaxAbs;
    for (double v : in.initialCentres.values) maxAbs = std::max(maxAbs, std::fabs(v));
    if (d_ == kFastD && maxAbs <= kFastMaxAbs<LowT>) {
      chooseFastShape(sms);
      choosePersistent(sms);
    }
    if (fast_) {
      perBlock = kd * sizeof(WT) + std::size_t(k_) * sizeof(unsigned);
    } else {
      // Accumulators: per warp in shared memory when they fit, else one per block in global
      // scratch; centres in shared memory when they fit beside them.
      const std::size_t accBytes =
          kWarps * (2 * kd * sizeof(WT) + std::size_t(k_) * sizeof(unsigned));
      const std::size_t centreBytes =
          kd * sizeof(LowT) + std::size_t(k_) * sizeof(LowT) + (kFallback ? kd * sizeof(H) : 0);
      // Wide rows take the tiled assignment, whose stages are static shared memory: the dynamic
      // part gets what they leave.
      tiled_ = d_ >= kTiledMinD;
      std::size_t limit = kSharedLimit;
      if (tiled_) {
        cudaFuncAttributes attr{};
        KMSEG_CUDA_CHECK(
            cudaFuncGetAttributes(&attr, assignKernel<LowT, HighT, WT, LabelT, 0, true>));
        limit = attr.sharedSizeBytes < kSharedLimit ? kSharedLimit - attr.sharedSizeBytes : 0;
      }
      sharedAcc_ = accBytes + 16 <= limit;
      const std::size_t base = sharedAcc_ ? accBytes + 16 : 0;
      sharedCentres_ = base + centreBytes <= limit;
      shared_ = base + (sharedCentres_ ? centreBytes : 0);

      // Blocks of the assignment pass: enough to fill the device, few enough that the partials
      // (and the global accumulators) stay small.
      perBlock = kd * sizeof(WT) * (sharedAcc_ ? 1 : 3) + std::size_t(k_) * sizeof(unsigned) * 2;
      const std::size_t memCap = std::max<std::size_t>(1, (std::size_t(256) << 20) / perBlock);
      if (tiled_) {
        // One wave of resident blocks, each with an equal share of the 64-point sub-tiles: the
        // pass is bound by latency, not by bandwidth, and a second, partial wave (391 blocks of
        // 256 points on 264 slots at N = 100 000) leaves a third of the device idle.
        int perSm = 0;
        KMSEG_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &perSm, assignKernel<LowT, HighT, WT, LabelT, 0, true>, kAssignThreads, shared_));
        const TiledGrid grid = tiledGrid((long long)n_, (long long)std::max(1, perSm) * sms,
                                         (long long)memCap, tiles::kTile);
        chunk_ = std::size_t(grid.chunk);
      } else {
        const std::size_t tiles = (n_ + kAssignThreads - 1) / kAssignThreads;
        const std::size_t blocks = std::min({tiles, std::size_t(sms) * 8, memCap});
        chunk_ = (n_ + blocks - 1) / blocks;
        chunk_ = (chunk_ + 31) / 32 * 32;
      }
    }
    if (!fast_) blocks_ = int((n_ + chunk_ - 1) / chunk_);

    const bool needX64 = p.traceSse && !std::is_same_v<WT, double> && !in.lookup.width;
    const WT* keptW = nullptr;
    if constexpr (std::is_same_v<WT, double>)
      keptW = in.deviceRows64;
    else
      keptW = in.deviceRows32;
    const double* kept64 = needX64 ? in.deviceRows64 : nullptr;
    const bool needLow = !kSharedLow && !fast_;
    // The fast pass's per-tile data when it prunes: box, sum and label state.
    const bool needTiles = fast_ && p.useBounds;
    const std::size_t tileBytes =
        needTiles ? sizeof(Box<kFastD>) + kFastD * sizeof(WT) + sizeof(unsigned) : 0;
    std::size_t need = (keptW ? 0 : nd * sizeof(WT)) + (needLow ? nd * sizeof(LowT) : 0) +
                       std::size_t(tiles_) * tileBytes +
                       (needX64 && !kept64 ? nd * sizeof(double) : 0) + 2 * n_ * sizeof(LabelT) +
                       std::size_t(blocks_) * perBlock;
    std::size_t freeB = 0, totalB = 0;
    KMSEG_CUDA_CHECK(cudaMemGetInfo(&freeB, &totalB));
    if (need > freeB)
      throw BackendError("the data does not fit on the GPU: " + std::to_string(n_) + " x " +
                         std::to_string(d_) + " features need about " + std::to_string(need) +
                         " bytes, " + std::to_string(freeB) + " of " + std::to_string(totalB) +
                         " bytes are free");

    // Data: W rows from the host (or those the engine keeps), the low copy converted on the
    // device.
    const WT* xw = keptW;
    if (!xw) {
      xw_ = track(DeviceBuffer<WT>(nd, "the working-precision features"));
      uploadValues(xw_.get(), x.values.data(), nd, stream_.get(), *staging_);
      xw = xw_.get();
    }
    if (needLow) {
      xl_ = track(DeviceBuffer<LowT>(nd, "the low-precision features"));
      KMSEG_LAUNCH_LINEAR((convertKernel<LowT, WT>), nd, stream_.get(), xw, xl_.get(),
                          (long long)nd);
    }
    const double* x64 = kept64;
    if (needX64 && !x64) {
      x64_ = track(DeviceBuffer<double>(nd, "the fp64 features for the SSE"));
      uploadValues(x64_.get(), x.values.data(), nd, stream_.get(), *staging_);
      x64 = x64_.get();
    }
    if (needTiles) {
      boxes_ = track(DeviceBuffer<Box<kFastD>>(std::size_t(tiles_), "the tile boxes"));
      tileSums_ = track(DeviceBuffer<WT>(std::size_t(tiles_) * kFastD, "the tile sums"));
      tileState_ = track(DeviceBuffer<unsigned>(std::size_t(tiles_), "the tile label states"));
    }
    labels_ = track(DeviceBuffer<LabelT>(n_, "the labels"));
    twoAgo_ = track(DeviceBuffer<LabelT>(n_, "the labels of two iterations earlier"));
    KMSEG_CUDA_CHECK(cudaMemsetAsync(labels_.get(), 0, n_ * sizeof(LabelT), stream_.get()));
    KMSEG_CUDA_CHECK(cudaMemsetAsync(twoAgo_.get(), 0, n_ * sizeof(LabelT), stream_.get()));
    cw_ = track(DeviceBuffer<WT>(kd, "the centres"));
    cInit_ = track(DeviceBuffer<WT>(kd, "the initial centres"));
    std::vector<WT> hc(kd);
    for (std::size_t i = 0; i < kd; ++i) hc[i] = WT(in.initialCentres.values[i]);
    KMSEG_CUDA_CHECK(cudaMemcpyAsync(cInit_.get(), hc.data(), kd * sizeof(WT),
                                     cudaMemcpyHostToDevice, stream_.get()));
    cl_ = track(DeviceBuffer<LowT>(kd, "the low-precision centres"));
    ccl_ = track(DeviceBuffer<LowT>(k_, "the centre norms"));
    if constexpr (kFallback) ch_ = track(DeviceBuffer<H>(kd, "the high-precision centres"));
    partialSum_ = track(DeviceBuffer<WT>(kd * blocks_, "the centroid partial sums"));
    partialCount_ = track(DeviceBuffer<unsigned>(std::size_t(k_) * blocks_, "the partial counts"));
    if (!sharedAcc_) {
      scratch_ = track(DeviceBuffer<WT>(2 * kd * blocks_, "the centroid accumulators"));
      scratchCount_ =
          track(DeviceBuffer<unsigned>(std::size_t(k_) * blocks_, "the accumulator counts"));
    }
    {
      // Re-seeding's candidate lists: a block per 8 points a thread, at most two per SM and one
      // per thread of reseedPickKernel, 32 candidates each (KMSEG_CUDA_RESEED_LIST sets the
      // length, for tests). They live in the centroid partials when those are large enough: the
      // partials are free from their reduction to the IF branch's pass, which rewrites them.
      const long long per = (long long)kReseedThreads * 8;
      const long long rb = std::max(1ll, std::min<long long>(((long long)n_ + per - 1) / per,
                                                             std::min(2 * sms, kOneBlockThreads)));
      int list = kReseedList;
      if (const char* e = std::getenv("KMSEG_CUDA_RESEED_LIST"); e && std::atoi(e) > 0)
        list = std::min(std::atoi(e), kReseedSortSize);
      const std::size_t entries = std::size_t(rb) * list;
      const std::size_t bytes =
          entries * (sizeof(long long) + sizeof(WT)) + std::size_t(rb) * sizeof(int);
      unsigned char* mem = reinterpret_cast<unsigned char*>(partialSum_.get());
      if (partialSum_.bytes() < bytes) {
        reseedLists_ = track(DeviceBuffer<unsigned char>(bytes, "the re-seeding lists"));
        mem = reseedLists_.get();
      }
      args_.reseedI = reinterpret_cast<long long*>(mem);
      args_.reseedD = reinterpret_cast<WT*>(mem + entries * sizeof(long long));
      args_.reseedLen = reinterpret_cast<int*>(mem + entries * (sizeof(long long) + sizeof(WT)));
      args_.reseedBlocks = int(rb);
      args_.reseedList = list;
    }
    sums_ = track(DeviceBuffer<WT>(kd, "the centroid sums"));
    counts_ = track(DeviceBuffer<long long>(k_, "the cluster counts"));
    ssePartial_ = track(DeviceBuffer<double>(blocks_, "the SSE partials"));
    state_ = track(DeviceBuffer<DeviceState>(1, "the loop state"));
    trace_ = track(DeviceBuffer<TraceEntry>(maxIt_, "the trace"));
    if (p.detectRepeats) {
      repeatHashes_ = track(DeviceBuffer<unsigned long long>(kRepeatWindow, "the centre hashes"));
      repeatCopy_ = track(DeviceBuffer<WT>(kd, "the repeat rule's centres"));
    }
    traceHost_ = MappedBuffer<TraceEntry>(maxIt_, "the progress trace");
    mapped_ = MappedBuffer<Mapped>(1, "the progress flags");
    mapped_.host()->completed = 0;
    mapped_.host()->cancel = 0;

    args_.xl = kSharedLow ? reinterpret_cast<const LowT*>(xw) : xl_.get();
    args_.fastSlotShift = fastSlotShift_;
    args_.xw = xw;
    args_.x64 = std::is_same_v<WT, double> ? reinterpret_cast<const double*>(xw) : x64;
    args_.lookup = in.lookup;
    args_.labels = labels_.get();
    args_.twoAgo = twoAgo_.get();
    args_.cw = cw_.get();
    args_.cInit = cInit_.get();
    args_.cl = cl_.get();
    args_.ccl = ccl_.get();
    args_.ch = kFallback ? ch_.get() : nullptr;
    args_.factor = H(reliabilityFactor(p.rho, d_, lowPrecision(p.mode)));
    {
      // The fast pass's pruning margins (Args::prune): rounded up to float, with room for the
      // rounding of the computed norms ||c~||^2 (gamma_D relative, below 5 % for bf16) and of
      // the bound arithmetic in float (the 2^-18 part).
      const double u = unitRoundoff(lowPrecision(p.mode));
      auto up = [](double v) { return std::nextafter(float(v), __builtin_huge_valf()); };
      args_.prune = p.useBounds;
      args_.boxes = boxes_.get();
      args_.tileSums = tileSums_.get();
      args_.tileState = tileState_.get();
      if constexpr (!kFallback && kPackedLow<LowT>) {
        // Uniform fp16 / bf16: the margin of the values shifted by the point's norm rounding
        // (centreBounds, shiftedMargin).
        args_.pruneShift = shiftMarginCoefficients(d_, u);
        args_.pruneErr = 0.f;
        args_.pruneEta = 0.f;
      } else {
        args_.pruneErr = up(1.05 * 2.0 * gammaN(d_ + 2, u) + 0x1p-18);
        args_.pruneEta = kFallback ? up(1.05 * u) : 0.f;
        // The mixed fp16 / bf16 passes' margin of d^ (kTightMixed).
        args_.pruneShift =
            kTightMixed<LowT, kFallback> ? shiftMarginCoefficients(d_, u) : ShiftMargin{};
      }
      args_.pruneThr =
          kFallback ? up(double(args_.factor) * (1.0 + 8.0 * u) * (1.0 + 0x1p-16)) : 0.f;
      if constexpr (kFallback) {
        auto down = [](double v) { return std::nextafter(float(v), -__builtin_huge_valf()); };
        const double uH = std::is_same_v<H, float> ? 0x1p-24 : 0x1p-53;
        args_.pruneErrH = up(2.1 * (2.0 * gammaN(d_ + 2, uH) + 0x1p-18));
        const double rho = p.rho * (1.0 - 1.05 * gammaN(d_ + 1, u) - 0x1p-16) * (1.0 - 2.0 * uH);
        args_.pruneRel1 = down(rho / (rho + 1.0));
        args_.pruneRel2 = up(rho / (rho - 1.0));
        args_.pruneThrLo =
            down(double(args_.factor) * (1.0 - gammaN(d_ + 1, u)) * (1.0 - uH) * (1.0 - 0x1p-16));
      }
    }
    if constexpr (kPackedLow<LowT>) {
      // The packed test's factor f' >= f (1 + 4 u_low), rounded up to LowT (see packedAssign).
      const double u = unitRoundoff(lowPrecision(p.mode));
      const double target = double(args_.factor) * (1.0 + 4.0 * u + 0x1p-40);
      args_.sureFactor = roundToLow<LowT>(target, true);
      args_.sureFloor = Math<LowT>::from(std::is_same_v<LowT, __half> ? 0x1p-14 : 0x1p-126);
      // And f'' <= f (1 - 4 u_low), rounded down: the test that vouches for falling pairs.
      args_.fallFactor = roundToLow<LowT>(double(args_.factor) * (1.0 - 4.0 * u - 0x1p-40), false);
      args_.fallFloor = Math<LowT>::from(-Math<LowT>::toDouble(args_.sureFloor));
    }
    args_.partialSum = partialSum_.get();
    args_.partialCount = partialCount_.get();
    args_.scratch = scratch_.get();
    args_.scratchCount = scratchCount_.get();
    args_.sums = sums_.get();
    args_.counts = counts_.get();
    args_.ssePartial = ssePartial_.get();
    args_.state = state_.get();
    args_.trace = trace_.get();
    args_.traceHost = traceHost_.device();
    args_.mapped = mapped_.device();
    args_.n = (long long)n_;
    args_.chunk = (long long)chunk_;
    args_.tileW = tileW_;
    args_.tileRows = tileRows_;
    args_.tiles = tiles_;
    args_.tileCols = tileCols_;
    {
      const FastDivisor div(unsigned(std::max(1, tileCols_)));
      args_.tileColsMagic = div.magic;
      args_.tileColsShift1 = div.shift1;
      args_.tileColsShift2 = div.shift2;
    }
    args_.d = d_;
    args_.k = k_;
    args_.blocks = blocks_;
    args_.maxIterations = maxIt_;
    args_.sharedAcc = sharedAcc_;
    args_.sharedCentres = sharedCentres_;
    args_.traceSse = p.traceSse;
    args_.detectCycles = p.detectCycles;
    args_.repeatHashes = p.detectRepeats ? repeatHashes_.get() : nullptr;
    args_.repeatCopy = p.detectRepeats ? repeatCopy_.get() : nullptr;
    args_.tolerance = p.tolerance;
    const char* hostLoop = std::getenv("KMSEG_CUDA_HOST_LOOP");
    hostLoop_ = hostLoop && *hostLoop && std::string(hostLoop) != "0";
    args_.hostLoop = hostLoop_;
    args_.persistent = persistent_;
    // The graph is captured while the uploads and clearing of the new buffers still run (the
    // capture is host work; its launch follows them on this stream). Waiting for them before the
    // capture did not change memcheck's reports in the graph loop (README, GPU).
    if (!hostLoop_) buildGraph();
    KMSEG_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  }

  KMeansResult run(const RunControl& control) override {
    if (control.cancelled()) throw Cancelled();
    const auto t0 = std::chrono::steady_clock::now();
    volatile Mapped* m = mapped_.host();
    m->cancel = 0;
    m->completed = 0;
    int reported = 0;
    std::vector<IterationStats> trace;
    // A cancel request (possibly made by the progress callback) goes to the device at once.
    auto report = [&](int upTo, const TraceEntry* src) {
      for (; reported < upTo; ++reported) {
        trace.push_back(toStats(src[reported], reported + 1));
        if (control.progress) control.progress(trace.back());
        if (control.cancelled()) m->cancel = 1;
      }
    };
    start_.record(stream_.get());
    launchLoop([&] {
      report(std::min(int(m->completed), maxIt_), traceHost_.host());
      if (control.cancelled()) m->cancel = 1;
    });
    stop_.record(stream_.get());
    // The result's labels take their pages on another thread while the device runs (48 MB at
    // 12 megapixels, about 20-30 ms on the H200's host); this thread keeps polling,
    // so that a cancel request still reaches the device within an iteration.
    auto labels = std::async(std::launch::async, [n = n_] {
      std::vector<std::int32_t> v;
      resizeFresh(v, n);
      return v;
    });
    for (;;) {
      const cudaError_t q = cudaEventQuery(stop_.get());
      if (q != cudaSuccess && q != cudaErrorNotReady) {
        // A fault of any kernel of the loop surfaces here: name the loop and its sizes.
        const std::string step = "the Lloyd loop on the device (N = " + std::to_string(n_) +
                                 ", D = " + std::to_string(d_) + ", K = " + std::to_string(k_) +
                                 ", mode " + std::string(modeName(in_.params.mode)) + ", " +
                                 std::to_string(reported) + " iterations done)";
        cuda::check(q, step.c_str(), __FILE__, __LINE__);
      }
      const int done = std::min(int(m->completed), maxIt_);
      std::atomic_thread_fence(std::memory_order_acquire);
      report(done, traceHost_.host());
      if (q == cudaSuccess) break;
      if (control.cancelled()) m->cancel = 1;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    DeviceState s{};
    KMSEG_CUDA_CHECK(cudaMemcpy(&s, state_.get(), sizeof s, cudaMemcpyDeviceToHost));
    std::vector<TraceEntry> t(std::size_t(s.iteration));
    if (s.iteration > 0)
      KMSEG_CUDA_CHECK(cudaMemcpy(t.data(), trace_.get(), t.size() * sizeof(TraceEntry),
                                  cudaMemcpyDeviceToHost));
    report(s.iteration, t.data());
    if (s.cancelled) throw Cancelled();

    KMeansResult r;
    r.mode = in_.params.mode;
    r.working = in_.working;
    r.deviceSeconds = 1e-3 * stop_.since(start_);
    r.labels = labels.get();
    downloadLabels(r.labels.data(), labels_.get(), n_, stream_.get(), *staging_);
    const std::size_t kd = std::size_t(k_) * d_;
    std::vector<WT> hc(kd);
    KMSEG_CUDA_CHECK(cudaMemcpy(hc.data(), cw_.get(), kd * sizeof(WT), cudaMemcpyDeviceToHost));
    r.centroids = Matrix(std::size_t(k_), std::size_t(d_));
    for (std::size_t i = 0; i < kd; ++i) r.centroids.values[i] = double(hc[i]);
    r.iterations = s.iteration;
    r.stop = StopReason(s.reason);
    r.cyclePeriod = s.cyclePeriod;
    r.trace = std::vector<IterationStats>(trace.begin(), trace.begin() + s.iteration);
    for (const IterationStats& st : r.trace) {
      r.fallbacks += st.fallbacks;
      r.evaluations += st.evaluations;
      r.emptyClusterEvents += st.emptyClusters;
    }
    r.sse = in_.params.traceSse && !r.trace.empty() ? r.trace.back().sse
                                                    : computeSse(in_.data, r.labels, r.centroids);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }

  RunTiming time(int repeats) override {
    RunTiming t;
    std::vector<double> ms;
    for (int rep = -1; rep < repeats; ++rep) {
      mapped_.host()->cancel = 0;
      start_.record(stream_.get());
      launchLoop([] {});
      stop_.record(stream_.get());
      KMSEG_CUDA_CHECK(cudaEventSynchronize(stop_.get()));
      if (rep >= 0) ms.push_back(stop_.since(start_));
    }
    t.msFullRun = medianOf(ms);
    DeviceState s{};
    KMSEG_CUDA_CHECK(cudaMemcpy(&s, state_.get(), sizeof s, cudaMemcpyDeviceToHost));
    t.iterations = s.iteration;
    t.stopReason = StopReason(s.reason);
    t.cyclePeriod = s.cyclePeriod;
    const double nd = double(n_) * d_;
    // The fast pass reads only the working-precision rows (x~ is rounded in registers); the
    // generic pass reads the low-precision copy too. Labels and the labels of two iterations
    // earlier are each read and written once.
    t.bytesPerIteration = nd * (kSharedLow || fast_ ? 0 : sizeof(LowT)) + nd * sizeof(WT) +
                          4.0 * double(n_) * sizeof(LabelT);
    // Per pair: D FMAs (2 flops each) for the dot product, add and subtract-twice for the
    // distance; the fallbacks add 3 D per evaluation that falls back (not counted here).
    t.flopsPerIteration = double(n_) * k_ * (2.0 * d_ + 3.0);
    t.passBlocks = blocks_;
    t.passBlocksPerSm = fast_ ? perSm_ : 0;
    t.passSlots = fast_ ? 1 << fastSlotShift_ : 0;
    t.persistentLoop = persistent_;
    t.deviceBytes = allocated_;
    t.minimalBytes = std::size_t(nd) * sizeof(WT) +
                     (kSharedLow ? 0 : std::size_t(nd) * sizeof(LowT)) + n_ * sizeof(LabelT);
    return t;
  }

 private:
  template <class T>
  DeviceBuffer<T> track(DeviceBuffer<T> b) {
    allocated_ += b.bytes();
    return b;
  }

  IterationStats toStats(const TraceEntry& e, int it) const {
    IterationStats s;
    s.iteration = it;
    s.changed = e.changed;
    s.fallbacks = e.fallbacks;
    s.evaluations = std::int64_t(n_) * k_;
    s.emptyClusters = e.empty;
    s.centreShift = e.shift;
    s.sse = e.sse;
    return s;
  }

  // One whole run on stream_: the graph, or with the host loop the same kernels in the same
  // order, one iteration at a time, reading the loop state back after each (the WHILE
  // condition is stop || cancelled, as publish() sets it). Within an iteration the host reads
  // the state after the first part too, and launches the IF branch only when it re-seeds, and
  // the SSE and publishing kernels only when they have work: the kernels it leaves out would
  // return at once (each checks DeviceState::reseeding or sseDue), so the result is the same,
  // with fewer launches (one per persistent iteration) for tools such as racecheck, whose time
  // grows with them. `afterIteration` runs on this thread after each host-loop iteration.
  template <class F>
  void launchLoop(F&& afterIteration) {
    cudaStream_t s = stream_.get();
    if (!hostLoop_) {
      graph_.launch(s);
      return;
    }
    KMSEG_LAUNCH(resetKernel<A>, 1, kOneBlockThreads, 0, s, args_);
    launchBoxes(s);
    for (int it = 0; it < maxIt_; ++it) {
      launchAssignReseed(s);
      DeviceState st = readState(s);
      const bool reseed = st.reseeding != 0;
      const bool sse = in_.params.traceSse && (!persistent_ || st.sseDue);
      if (reseed) launchSumsAgain(s);
      if (sse) launchUpdate(s);
      if (reseed || sse) st = readState(s);
      afterIteration();
      if (st.stop || st.cancelled) break;
    }
  }

  // The loop state, once the work queued on `s` is done (host loop).
  DeviceState readState(cudaStream_t s) {
    DeviceState st{};
    KMSEG_CUDA_CHECK(cudaMemcpyAsync(&st, state_.get(), sizeof st, cudaMemcpyDeviceToHost, s));
    KMSEG_CUDA_CHECK(cudaStreamSynchronize(s));
    return st;
  }

  // The fast pass's kernels, of the variant chooseFastShape took (few_).
  auto fastKernel() const {
    return few_ ? &assignFastKernel<LowT, HighT, WT, LabelT, kFastD, kFew>
                : &assignFastKernel<LowT, HighT, WT, LabelT, kFastD>;
  }
  auto loopKernel() const {
    return few_ ? &loopFastKernel<LowT, HighT, WT, LabelT, kFastD, kFew>
                : &loopFastKernel<LowT, HighT, WT, LabelT, kFastD>;
  }

  // The fast pass's tile boxes (once per run, before the loop), when it prunes.
  void launchBoxes(cudaStream_t s) {
    if constexpr (kFastD > 0) {
      if (!boxes_.get()) return;
      auto kernel = tileBoxKernel<LowT, HighT, WT, LabelT, kFastD>;
      KMSEG_LAUNCH(kernel, unsigned(boxBlocks_), kAssignThreads, 0, s, args_);
    }
  }

  // Loop body part 1: assignment, reduction, and the update unless a cluster is empty.
  void launchAssignReseed(cudaStream_t s) {
    if constexpr (kFastD > 0) {
      if (persistent_) {
        auto kernel = loopKernel();
        KMSEG_LAUNCH_COOPERATIVE(kernel, unsigned(blocks_), kAssignThreads, loopShared_, s, args_);
        return;
      }
    }
    launchAssign(s, 1);
    KMSEG_LAUNCH(reduceKernel<A>, reduceBlocks(), kReduceThreads, 0, s, args_, 1);
    KMSEG_LAUNCH(checkEmptyKernel<A>, 1, kOneBlockThreads, 0, s, args_);
  }

  // The IF branch: re-seeding, the partial sums of the re-seeded labels, their reduction and
  // the update. Each kernel returns at once when no cluster was empty (or, for the sums, when
  // nothing was re-seeded); the host loop launches the branch only when one was.
  void launchSumsAgain(cudaStream_t s) {
    KMSEG_LAUNCH(reseedListKernel<A>, unsigned(args_.reseedBlocks), kReseedThreads, 0, s, args_);
    KMSEG_LAUNCH(reseedPickKernel<A>, 1, kOneBlockThreads, 0, s, args_);
    launchAssign(s, 0);
    KMSEG_LAUNCH(reduceKernel<A>, reduceBlocks(), kReduceThreads, 0, s, args_, 0);
    KMSEG_LAUNCH(updateKernel<A>, 1, kOneBlockThreads, 0, s, args_);
  }

  // Loop body part 2 (the update ran in checkEmptyKernel or in the IF branch): with the SSE trace,
  // the SSE, the trace entry and progress.
  void launchUpdate(cudaStream_t s) {
    if (in_.params.traceSse) {
      KMSEG_LAUNCH(sseKernel<A>, unsigned(blocks_), kAssignThreads, 0, s, args_);
      KMSEG_LAUNCH(publishKernel<A>, 1, kOneBlockThreads, 0, s, args_);
    }
  }

  // reduceKernel's grid: one warp per element (K D sums, K counts), and the block that reads
  // the cancel flag.
  unsigned reduceBlocks() const {
    constexpr int kPerBlock = kReduceThreads / 32;
    return unsigned((k_ * d_ + k_ + kPerBlock - 1) / kPerBlock) + 1;
  }

  void launchAssign(cudaStream_t s, int assign) {
    if (d_ == kFastD)
      launchAssignFor<kFastD>(s, assign);
    else
      launchAssignFor<0>(s, assign);
  }

  template <int DT>
  void launchAssignFor(cudaStream_t s, int assign) {
    if constexpr (DT == kFastD) {
      if (fast_) {
        auto kernel = fastKernel();
        KMSEG_LAUNCH(kernel, unsigned(blocks_), kAssignThreads, shared_, s, args_, assign);
        return;
      }
    }
    if constexpr (DT == 0) {
      if (tiled_) {
        auto kernel = assignKernel<LowT, HighT, WT, LabelT, 0, true>;
        KMSEG_LAUNCH(kernel, unsigned(blocks_), kAssignThreads, shared_, s, args_, assign);
        return;
      }
    }
    auto kernel = assignKernel<LowT, HighT, WT, LabelT, DT>;
    KMSEG_LAUNCH(kernel, unsigned(blocks_), kAssignThreads, shared_, s, args_, assign);
  }

  // The persistent loop (loopFastKernel) in place of the loop's chain of kernels, when the fast
  // pass's blocks can all be resident at once, and either the pass is short (at most
  // kPersistentRounds tile rounds per warp) or it is a packed pass (kPackedPass: uniform fp16
  // and bf16, fp16>fp32, fp16>fp64). On small photos the graph's launches between the kernels are
  // a large share of an iteration, and every mode gains. On larger ones the persistent pass of
  // the scalar passes runs slower than the chain's, by more than the launches cost, while the
  // packed passes keep their gain; why the scalar passes slow down was not established (in
  // fp32, ptxas spills 52 bytes in the persistent kernel and none in the pass alone, but a
  // version without most of those spills was only 1.6 % faster at 12 MP). H200, K = 32, the bee
  // photo, ms per iteration, the mean of two alternating runs of each, persistent / chain
  // (2026-12-04, build of 76b5bf6):
  //   MP   fp32            fp64            fp16            bf16            fp16>fp32
  //    1   0.0312/0.0336   0.0404/0.0446   0.0288/0.0327   0.0317/0.0359   0.0404/0.0449
  //    4   0.0615/0.0573   0.0896/0.0905   0.0564/0.0580   0.0639/0.0647   0.0849/0.0883
  //   12   0.1001/0.0940   0.1460/0.1446   0.0933/0.0955   0.1220/0.1255   0.1910/0.1893
  //   16   0.1214/0.1133   0.1735/0.1723   0.1154/0.1176   0.1640/0.1694   0.2003/0.2030
  // (fp16>fp64 0.2017 / 0.2095 at 12 MP; fp32>fp64 0.1562 / 0.1468, bf16>fp32 0.2734 / 0.2656.)
  // KMSEG_CUDA_PERSISTENT=0 keeps the chain, =1 takes the persistent loop wherever its blocks are
  // resident (for comparisons); unset or any other value, this rule (persistentLoop, which also
  // keeps large photos on the chain on a device with a run-time limit for kernels).
  void choosePersistent(int sms) {
    if constexpr (kFastD > 0) {
      if (!fast_) return;
      const char* env = std::getenv("KMSEG_CUDA_PERSISTENT");
      int timeout = 0;
      KMSEG_CUDA_CHECK(cudaDeviceGetAttribute(&timeout, cudaDevAttrKernelExecTimeout, device_));
      if (!persistentLoop(env ? env : "", kPackedPass<LowT, kFallback>, tiles_, blocks_, kWarps,
                          kPersistentRounds, timeout != 0))
        return;
      int cooperative = 0;
      KMSEG_CUDA_CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device_));
      if (!cooperative) return;
      auto kernel = loopKernel();
      const std::size_t shared =
          std::max({shared_, kUpdateShared<WT>, kOneBlockThreads * sizeof(double)});
      KMSEG_CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared)));
      int perSm = 0;
      KMSEG_CUDA_CHECK(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, kAssignThreads, shared));
      if ((long long)perSm * sms < blocks_) return;
      persistent_ = true;
      loopShared_ = shared;
    }
  }

  // The fast pass's shape: the most accumulator slots per warp whose shared memory lets four
  // blocks share an SM (KMSEG_CUDA_FAST_SHARED_KB overrides the target, for tuning) (else one
  // block, up to the opt-in limit; else the generic pass), and one wave of resident blocks (the
  // fewest block ends, each a wait for the block's slowest warp: H200, 12 MP, K = 32, fp32 0.176
  // ms per iteration with one wave of 528 blocks, 0.183 with two, 0.189 with four; fp64 0.274
  // with one wave of 264, 0.293 with three), or in W = fp32 whole waves enough that no slot takes
  // more than about kFastSlotRun points.
  void chooseFastShape(int sms) {
    // In tiles: the image's width, else runs of consecutive rows (see assignFastKernel), counted
    // in 32 bits (else the generic pass).
    const long long n = (long long)n_;
    const long long width =
        in_.params.imageWidth >= kPlainTileW ? in_.params.imageWidth : kPlainTileW;
    const long long rows = (n + width - 1) / width;
    const long long cols = (width + kTileGroups * kFastPoints - 1) / (kTileGroups * kFastPoints);
    const long long tiles = (rows + kTileRows - 1) / kTileRows * cols;
    if (width >= (1ll << 31) || tiles + kWarps >= (1ll << 30) ||
        n + width + kFastPoints >= (1ll << 32))
      return;
    int optin = 0;
    KMSEG_CUDA_CHECK(
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_));
    auto bytes = [&](int slots) {
      return fastSharedBytes<LowT, H, WT, kFastD>(k_, slots, kFallback);
    };
    std::size_t target = sizeof(WT) == 8 ? kFastSharedTargetFp64 : kFastSharedTarget;
    // The uniform passes' smaller target, where it holds one slot per warp (fastSlotShift): above
    // K = 162-175 (fp16 / bf16, fp64, fp32) it would not.
    std::size_t uniform = 0;
    if constexpr (sizeof(WT) == 8 && !kFallback && std::is_same_v<LowT, double>)
      uniform = kFastSharedTargetUniformFp64;
    else if constexpr (sizeof(WT) == 4 && !kFallback)
      uniform = kFastSharedTargetUniform;
    // The tuning knob sets the one target, in place of both.
    if (const char* kb = std::getenv("KMSEG_CUDA_FAST_SHARED_KB"); kb && std::atoi(kb) > 0) {
      target = std::size_t(std::atoi(kb)) * 1024;
      uniform = 0;
    }
    const int shift = fastSlotShift(bytes, target, uniform, std::size_t(optin));
    if (shift < 0) return;
    fast_ = true;
    fastSlotShift_ = shift;
    shared_ = bytes(1 << shift);
    auto kernel = assignFastKernel<LowT, HighT, WT, LabelT, kFastD>;
    KMSEG_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared_)));
    int perSm = 0;
    KMSEG_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, kAssignThreads, shared_));
    perSm_ = std::max(1, perSm);
    const long long resident = (long long)perSm_ * sms;
    long long blocks = resident;
    if (sizeof(WT) == 4) {
      const long long runChunk = kFastSlotRun * kWarps * (1ll << shift);
      blocks =
          std::max(blocks, ((n + runChunk - 1) / runChunk + resident - 1) / resident * resident);
    }
    const char* env = std::getenv("KMSEG_CUDA_BLOCKS");  // tuning only
    const long long forced = env ? std::atoll(env) : 0;
    if (forced > 0) blocks = forced;
    // At least one full round (a tile per warp) per block: below that, a block's fixed costs
    // (zeroing and folding its accumulators) outweigh its share of the work (H200, 0.26 MP,
    // K = 32: 34.6 us per iteration with 512 blocks of half a round, 28.9 with 264).
    blocks = std::min(blocks, std::max(1ll, (tiles + kWarps - 1) / kWarps));
    // Unless forced, off counts whose blocks keep to a few image columns (spreadBlocks).
    if (forced <= 0) blocks = spreadBlocks(blocks, tiles, cols, kWarps);
    // The variant with more registers (kFewMinBlocks) where its resident blocks hold this grid
    // (fewBlocksVariant). The grid stays as it is.
    if constexpr (kHasFew) {
      const char* few = std::getenv("KMSEG_CUDA_FEW");
      auto fewKernel = assignFastKernel<LowT, HighT, WT, LabelT, kFastD, kFew>;
      KMSEG_CUDA_CHECK(cudaFuncSetAttribute(fewKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            int(shared_)));
      int fewPerSm = 0;
      KMSEG_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fewPerSm, fewKernel,
                                                                     kAssignThreads, shared_));
      if (fewBlocksVariant(few ? few : "", blocks, fewPerSm, sms)) {
        few_ = true;
        perSm_ = fewPerSm;
      }
    }
    tileW_ = int(width);
    tileRows_ = int(rows);
    tileCols_ = int(cols);
    tiles_ = int(tiles);
    blocks_ = int(blocks);
    boxBlocks_ = int(std::min((tiles + kWarps - 1) / kWarps, 16ll * sms));
    // The SSE pass splits the points evenly over the same blocks.
    chunk_ = std::size_t((n + blocks_ - 1) / blocks_);
  }

  // Graph: reset -> WHILE { WHILE { assign, reduce, check }, IF { reseed, sums, reduce, update } }
  // or, with the SSE trace, reset -> WHILE { assign, reduce, check, IF { reseed, sums, reduce,
  // update }, sse, publish }. The inner loop runs until the stop test or an empty cluster, so an
  // iteration that re-seeds nothing does not pass an IF node. H200, K = 32, two runs each, ms
  // per iteration: fp32 0.0241 / 0.0240 -> 0.0230 / 0.0229 at 0.01 MP, 0.0256 / 0.0256 ->
  // 0.0245 / 0.0248 at 0.26 MP, 0.0957 / 0.0949 -> 0.0943 / 0.0941 at 12 MP.
  void buildGraph() {
    cudaGraph_t g = graph_.get();
    cudaStream_t s = stream_.get();
    CaptureGuard guard(s);
    KMSEG_CUDA_CHECK(
        cudaGraphConditionalHandleCreate(&args_.whileHandle, g, 1, cudaGraphCondAssignDefault));
    cudaGraphNodeParams wp{};
    wp.type = cudaGraphNodeTypeConditional;
    wp.conditional.handle = args_.whileHandle;
    wp.conditional.type = cudaGraphCondTypeWhile;
    wp.conditional.size = 1;
    // Reset node first, then the loop after it.
    KMSEG_CUDA_CHECK(
        cudaStreamBeginCaptureToGraph(s, g, nullptr, nullptr, 0, cudaStreamCaptureModeThreadLocal));
    KMSEG_LAUNCH(resetKernel<A>, 1, kOneBlockThreads, 0, s, args_);
    launchBoxes(s);
    cudaGraph_t captured = nullptr;
    KMSEG_CUDA_CHECK(cudaStreamEndCapture(s, &captured));
    std::size_t count = 0;
    KMSEG_CUDA_CHECK(cudaGraphGetNodes(g, nullptr, &count));
    std::vector<cudaGraphNode_t> nodes(count);
    KMSEG_CUDA_CHECK(cudaGraphGetNodes(g, nodes.data(), &count));
    cudaGraphNode_t whileNode = nullptr;
    KMSEG_CUDA_CHECK(cudaGraphAddNode(&whileNode, g, nodes.data(), nullptr, count, &wp));
    cudaGraph_t body = wp.conditional.phGraph_out[0];

    KMSEG_CUDA_CHECK(cudaGraphConditionalHandleCreate(&args_.ifHandle, body, 0, 0));
    // The inner loop (its handle set before any kernel of the loop is captured with args_).
    cudaGraph_t part1 = body;
    cudaGraphNode_t innerNode = nullptr;
    if (hasInnerLoop(args_)) {
      KMSEG_CUDA_CHECK(cudaGraphConditionalHandleCreate(&args_.innerHandle, body, 1,
                                                        cudaGraphCondAssignDefault));
      cudaGraphNodeParams np{};
      np.type = cudaGraphNodeTypeConditional;
      np.conditional.handle = args_.innerHandle;
      np.conditional.type = cudaGraphCondTypeWhile;
      np.conditional.size = 1;
      KMSEG_CUDA_CHECK(cudaGraphAddNode(&innerNode, body, nullptr, nullptr, 0, &np));
      part1 = np.conditional.phGraph_out[0];
    }
    // Body part 1: assignment, reduction, re-seeding.
    KMSEG_CUDA_CHECK(cudaStreamBeginCaptureToGraph(s, part1, nullptr, nullptr, 0,
                                                   cudaStreamCaptureModeThreadLocal));
    launchAssignReseed(s);
    KMSEG_CUDA_CHECK(cudaStreamEndCapture(s, &captured));
    // The IF node after the inner loop, or after the last node of part 1.
    cudaGraphNode_t last = innerNode;
    if (!last) {
      KMSEG_CUDA_CHECK(cudaGraphGetNodes(body, nullptr, &count));
      nodes.resize(count);
      KMSEG_CUDA_CHECK(cudaGraphGetNodes(body, nodes.data(), &count));
      last = lastNode(body, nodes);
    }
    cudaGraphNodeParams ip{};
    ip.type = cudaGraphNodeTypeConditional;
    ip.conditional.handle = args_.ifHandle;
    ip.conditional.type = cudaGraphCondTypeIf;
    ip.conditional.size = 1;
    cudaGraphNode_t ifNode = nullptr;
    KMSEG_CUDA_CHECK(cudaGraphAddNode(&ifNode, body, &last, nullptr, 1, &ip));
    KMSEG_CUDA_CHECK(cudaStreamBeginCaptureToGraph(s, ip.conditional.phGraph_out[0], nullptr,
                                                   nullptr, 0, cudaStreamCaptureModeThreadLocal));
    launchSumsAgain(s);
    KMSEG_CUDA_CHECK(cudaStreamEndCapture(s, &captured));
    // Body part 2 after the IF node.
    if (in_.params.traceSse) {
      KMSEG_CUDA_CHECK(cudaStreamBeginCaptureToGraph(s, body, &ifNode, nullptr, 1,
                                                     cudaStreamCaptureModeThreadLocal));
      launchUpdate(s);
      KMSEG_CUDA_CHECK(cudaStreamEndCapture(s, &captured));
    }
    graph_.instantiate();
  }

  // The node of a chain that no other node depends on.
  static cudaGraphNode_t lastNode(cudaGraph_t g, const std::vector<cudaGraphNode_t>& nodes) {
    for (cudaGraphNode_t node : nodes) {
      std::size_t out = 0;
      KMSEG_CUDA_CHECK(cudaGraphNodeGetDependentNodes(node, nullptr, nullptr, &out));
      if (out == 0) return node;
    }
    (void)g;
    throw BackendError("CUDA graph: the loop body has no last node");
  }

  const RunInputs& in_;
  std::size_t n_ = 0;
  int d_ = 0, k_ = 0, maxIt_ = 0, device_ = 0;
  std::unique_ptr<Staging> ownStaging_;  ///< when the inputs bring none
  Staging* staging_ = nullptr;
  bool sharedAcc_ = false, sharedCentres_ = false, fast_ = false, hostLoop_ = false;
  bool tiled_ = false;          // the generic pass labels by tiles (D >= kTiledMinD)
  bool persistent_ = false;     // loopFastKernel runs the inner loop (choosePersistent)
  bool few_ = false;            // the fast pass's kFewMinBlocks variant (chooseFastShape)
  std::size_t loopShared_ = 0;  // its dynamic shared memory
  int perSm_ = 0;               // the fast pass's resident blocks per SM
  int fastSlotShift_ = 0;
  std::size_t shared_ = 0, chunk_ = 0;
  int blocks_ = 0;
  int tileW_ = 0, tileRows_ = 0, tileCols_ = 0, tiles_ = 0;  // the fast pass's tiles
  int boxBlocks_ = 0;                                        // tileBoxKernel's grid
  std::size_t allocated_ = 0;
  Stream stream_;
  Event start_, stop_;
  Graph graph_;
  DeviceBuffer<WT> xw_;
  DeviceBuffer<LowT> xl_;
  DeviceBuffer<double> x64_;
  DeviceBuffer<LabelT> labels_, twoAgo_;
  DeviceBuffer<Box<kFastD>> boxes_;
  DeviceBuffer<WT> tileSums_;
  DeviceBuffer<unsigned> tileState_;
  DeviceBuffer<WT> cw_, cInit_;
  DeviceBuffer<LowT> cl_, ccl_;
  DeviceBuffer<H> ch_;
  DeviceBuffer<WT> partialSum_;
  DeviceBuffer<unsigned> partialCount_;
  DeviceBuffer<WT> scratch_;
  DeviceBuffer<unsigned> scratchCount_;
  DeviceBuffer<unsigned char> reseedLists_;  // when the partials cannot hold them
  DeviceBuffer<WT> sums_;
  DeviceBuffer<long long> counts_;
  DeviceBuffer<double> ssePartial_;
  DeviceBuffer<DeviceState> state_;
  DeviceBuffer<TraceEntry> trace_;
  DeviceBuffer<unsigned long long> repeatHashes_;
  DeviceBuffer<WT> repeatCopy_;
  MappedBuffer<TraceEntry> traceHost_;
  MappedBuffer<Mapped> mapped_;
  A args_{};
};

template <class LowT, class HighT, class WT>
std::unique_ptr<LloydRun> makeRunFor(const RunInputs& in) {
  if (in.params.k <= 256) return std::make_unique<Run<LowT, HighT, WT, std::uint8_t>>(in);
  return std::make_unique<Run<LowT, HighT, WT, std::uint16_t>>(in);
}

template <Precision Family>
std::unique_ptr<LloydRun> makeLloydRun(const RunInputs& in) {
  switch (in.params.mode) {
#define KMSEG_CUDA_CASE(e, name, low, high)                                          \
  case Mode::e:                                                                      \
    if constexpr (low == Family) {                                                   \
      using L = typename DeviceType<low>::type;                                      \
      using Hi = typename DeviceType<high>::type;                                    \
      if (in.working == Precision::Fp64) return makeRunFor<L, Hi, double>(in);       \
      if constexpr (!std::is_same_v<L, double>) return makeRunFor<L, Hi, float>(in); \
    }                                                                                \
    break;
    KMSEG_FOR_EACH_MODE(KMSEG_CUDA_CASE)
#undef KMSEG_CUDA_CASE
  }
  throw BackendError("CUDA engine: mode " + std::string(modeName(in.params.mode)) +
                     " is not built for this precision family");
}

}  // namespace kmseg::cuda
