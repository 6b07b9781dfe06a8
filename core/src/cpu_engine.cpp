// SPDX-License-Identifier: MIT
// The CPU engine: the executable specification of every precision mode (DESIGN.md section 3).
// Each low-precision operation is evaluated and rounded in its format through Math<T>, with the
// formulas of distance.h and the rules of lloyd_rules.h that the CUDA engine shares.

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "emulated_bounds.h"
#include "kmseg/distance.h"
#include "kmseg/engine.h"
#include "kmseg/error.h"
#include "kmseg/lloyd_rules.h"
#include "kmseg/parallel.h"
#include "precision_types.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define KMSEG_X86_DISPATCH 1
#define KMSEG_TARGET_V3 __attribute__((target("arch=x86-64-v3"), flatten))
#else
#define KMSEG_X86_DISPATCH 0
#define KMSEG_TARGET_V3
#endif
#define KMSEG_FLATTEN __attribute__((flatten))
#define KMSEG_INLINE inline __attribute__((always_inline))

namespace kmseg {

namespace {

// Fixed partitions of the samples, which depend only on N, K and D, never on the thread count, so
// the sums (and everything after them) are the same for any thread count. Tasks of the passes:
// at least kMinBlock samples, at most kMaxBlocks of them.
constexpr std::size_t kMinBlock = 8192;
constexpr std::size_t kMaxBlocks = 64;
// Samples per Kahan sum block, at least, and the most partial entries (sum blocks x K x D).
// Small sum blocks let a converging pass skip the rows of every block whose labels did not
// change (12 MP, K = 8: about 3000 blocks, of which a few dozen change late in a run).
constexpr std::size_t kSumBlock = 4096;
constexpr std::size_t kMaxPartials = std::size_t(1) << 24;

// Four lanes of a working-precision type (GCC vector extension; element-wise IEEE operations).
template <class T>
struct Vec4;
template <>
struct Vec4<double> {
  typedef double type __attribute__((vector_size(32)));
};
template <>
struct Vec4<float> {
  typedef float type __attribute__((vector_size(16)));
};

// 32 bytes of T in lanes (GCC vector extension), with integer lanes of T's width for indices and
// compare masks: firstLeast's and leastExcept's.
template <class T>
struct Lanes {
  static_assert(std::is_floating_point_v<T>);
  using I = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
  static constexpr std::size_t kCount = 32 / sizeof(T);
  typedef T V __attribute__((vector_size(32)));
  typedef I VI __attribute__((vector_size(32)));
  // Lane l of idx takes l (an out parameter: a vector returned by value would change the ABI
  // between the builds with and without AVX, -Wpsabi).
  static void setIndices(VI& idx) {
    for (std::size_t l = 0; l < kCount; ++l) idx[l] = I(l);
  }
};

// The index the sequential scan `best = v[0]; for j: if (closer(v[j], best)) take j` picks: the
// first of the least values, NaN never winning (index 0 when every value is NaN). In vector
// lanes: lane l scans v[l], v[l + L], ... as the sequential scan would, then the lanes' winners
// are merged by closerOrEarlier, lane 0 first; then the tail past the last whole vector follows.
// That is the same index: within a lane the winner is the lane's first least value; across
// lanes closerOrEarlier keeps the least value and, among equal ones, the lowest index; a NaN
// replaces nothing, and lane 0 starts from index 0. The scalar loop, a chain of compares and
// selects one per centre, was the largest share of a full-scan pass (perf, fp32, K = 32).
template <class T>
KMSEG_INLINE int firstLeast(const T* __restrict v, std::size_t k) {
  using L = Lanes<T>;
  using I = typename L::I;
  using V = typename L::V;
  using VI = typename L::VI;
  constexpr std::size_t kLanes = L::kCount;
  int bestJ = 0;
  T best = v[0];
  std::size_t j = 1;
  if (k >= 2 * kLanes) {
    V bv, c;
    std::memcpy(&bv, v, sizeof(V));
    VI idx;
    L::setIndices(idx);
    VI bi = idx;
    for (j = kLanes; j + kLanes <= k; j += kLanes) {
      std::memcpy(&c, v + j, sizeof(V));
      idx += I(kLanes);
      const VI take = (c < bv) | ((bv != bv) & (c == c));
      bv = take ? c : bv;
      bi = take ? idx : bi;
    }
    best = bv[0];
    bestJ = int(bi[0]);
    for (std::size_t l = 1; l < kLanes; ++l) {
      const bool c = closerOrEarlier(bv[l], int(bi[l]), best, bestJ);
      best = c ? bv[l] : best;
      bestJ = c ? int(bi[l]) : bestJ;
    }
  }
  // Every index from here on is above bestJ, so closer() alone decides, as in the sequential
  // scan. Branch free (selects, not jumps): which centre wins is data dependent, and at small K
  // mispredicted branches cost more than the distances.
  for (; j < k; ++j) {
    const bool c = closer(v[j], best);
    best = c ? v[j] : best;
    bestJ = c ? int(j) : bestJ;
  }
  return bestJ;
}

// The least of v[j] over j != a, as `m = +inf; for j != a: m = std::min(m, v[j])` gives it (NaN
// never taken), in vector lanes: the least of a set does not depend on the order. The loop's
// chain of minimums, one per centre, had become the largest share of a bounded pass once
// firstLeast took the argmin into lanes (perf, fp32, K = 32).
template <class T>
KMSEG_INLINE double leastExcept(const T* __restrict v, std::size_t k, int a) {
  using L = Lanes<T>;
  using I = typename L::I;
  using V = typename L::V;
  using VI = typename L::VI;
  constexpr std::size_t kLanes = L::kCount;
  T m = T(INFINITY);
  std::size_t j = 0;
  if (k >= kLanes) {
    V mv = V{} + T(INFINITY), c;
    VI idx;
    L::setIndices(idx);
    const VI skip = VI{} + I(a);
    for (; j + kLanes <= k; j += kLanes) {
      std::memcpy(&c, v + j, sizeof(V));
      const VI take = (c < mv) & (idx != skip);
      mv = take ? c : mv;
      idx += I(kLanes);
    }
    for (std::size_t l = 0; l < kLanes; ++l) m = mv[l] < m ? mv[l] : m;
  }
  for (; j < k; ++j)
    if (int(j) != a && v[j] < m) m = v[j];
  return double(m);
}

// A float at or above / at or below a double: bounds kept in float stay valid bounds. Branch
// free, with no library call (std::nextafter was a measurable share of an iteration): the
// double is moved outward by 2^-22 relative plus 2^-148 absolute before the conversion, whose
// rounding error is at most 2^-24 relative plus 2^-150 absolute (half the subnormal spacing), so
// the float cannot cross v; the double operations' own errors (2^-53 relative) are far inside
// that margin. A lower bound beyond the float range is clamped to the largest float (an upper
// bound may become infinity, which is still an upper bound).
inline float floatAbove(double v) {
  return float(v + (std::fabs(v) * 0x1p-22 + 0x1p-148));
}
inline float floatBelow(double v) {
  return float(
      std::min(v - (std::fabs(v) * 0x1p-22 + 0x1p-148), double(std::numeric_limits<float>::max())));
}

// Pairwise (tree) sum of v[lo..hi) in T, split at the midpoint: a fixed order.
template <class T>
T pairwiseSum(const T* v, std::size_t lo, std::size_t hi, std::size_t stride) {
  if (hi - lo == 1) return v[lo * stride];
  const std::size_t mid = lo + (hi - lo) / 2;
  return pairwiseSum(v, lo, mid, stride) + pairwiseSum(v, mid, hi, stride);
}

/// The repeat rule (lloyd_rules.h) after iteration `it`, whose centres are `c`: the period when
/// they equal the candidate's copy, else 0 (and a new candidate when their hash meets one of the
/// window's).
template <class WT>
int repeatStep(int it, const std::vector<WT>& c, std::vector<std::uint64_t>& hashes,
               std::vector<WT>& copy, RepeatSearch& rs) {
  std::uint64_t h = 0;
  for (std::size_t e = 0; e < c.size(); ++e) h += repeatHashTerm(entryBits(c[e]), e);
  int period = 0;
  if (rs.checksAt(it)) {
    // Bit for bit: memcmp, not ==, which would take -0 for +0.
    if (std::memcmp(c.data(), copy.data(), c.size() * sizeof(WT)) == 0) period = rs.period;
    rs = {};
  }
  if (period == 0 && rs.candidate == 0) {
    for (int s = it - 2; s >= RepeatSearch::firstLookedAt(it); --s)
      if (hashes[std::size_t(s % kRepeatWindow)] == h) {
        rs = {it, it - s};
        copy = c;
        break;
      }
  }
  hashes[std::size_t(it % kRepeatWindow)] = h;
  return period;
}

// Everything one mode needs, in its number types:
//   LowT  precision of the expanded formula (Math<LowT>)
//   HighT precision of the fallback direct formula (void for uniform modes)
//   WT    working precision of the data and the centroid update (float or double)
template <class LowT, class HighT, class WT>
struct Lloyd {
  static constexpr bool kFallback = !std::is_void_v<HighT>;
  using H = std::conditional_t<kFallback, HighT, double>;
  using ML = Math<LowT>;
  using MH = Math<H>;

  const Matrix& data;
  const KMeansParams& params;
  const RunControl& control;
  int threads;
  std::size_t n, d, k;
  std::size_t blocks, blockSize;               // tasks of the passes: count, samples per task
  std::size_t sumBlocks, sumBlockSize, group;  // Kahan sum blocks: count, samples, per task
  bool partialsValid = false;                  // the sum-block partials match `prev` labels

  std::vector<WT> xwStore;         // N x D working-precision data, when W is not the input's fp64
  const WT* xw = nullptr;          // the working-precision data (the input itself when W is fp64)
  std::vector<LowT> xl;            // N x D low-precision copy fl_low(x_W) (empty when LowT == WT)
  std::vector<LowT> xxl;           // ||x~||^2 in low precision, per sample
  std::int64_t normOverflows = 0;  // samples whose xxl is not finite
  std::vector<WT> cw;              // K x D centres in W
  std::vector<LowT> cl;            // K x D fl_low(c_W)
  std::vector<LowT> clT;           // D x K transpose of cl
  std::vector<LowT> ccl;           // ||c~||^2 per centre
  std::vector<H> ch;               // K x D centres in H (fallback)
  std::vector<H> chT;              // D x K transpose of ch (pruned mixed modes)
  H factor{};

  // Distance bounds (Hamerly) for the uniform fp64/fp32 modes: per sample an upper bound on the
  // distance to its centre and a lower bound on the distance to every other centre, both for
  // the exact distance between the low-precision vectors, widened by the rounding error bound of
  // the expanded formula. A sample is skipped only when no other centre's computed distance can
  // come out below (or tie with) its own centre's, so the labels equal the brute-force labels.
  static constexpr bool kBounded = !kFallback && std::is_floating_point_v<LowT>;
  static constexpr double kUp = 1.0 + 1e-12, kDown = 1.0 - 1e-12;  // outward rounding slack
  // Absolute slack of the centre movements and gaps: a square below the normal range of double
  // may round up or to zero, so sqrt(s2) alone bounds no movement of about 1e-154 or less.
  static constexpr double kTiny = 1e-150;
  // The bounds are stored as offsets from running totals of centre movement (drift), so a sample
  // that is skipped costs two reads and no write: upper = upperOff + drift[label],
  // lower = lowerOff - driftMax. All arithmetic on bounds rounds outward.
  bool bounded = false;
  std::vector<float> upperOff, lowerOff;  // per sample
  std::vector<LowT> prevCl;               // previous iteration's cl
  std::vector<double> drift;              // per centre: total movement so far, rounded up
  double driftMax = 0;                    // running total of the largest movement per iteration
  double xxMax = 0;  // largest ||x~||^2 as computed (infinite when one overflowed): every mode
  double errorBound = 0, errorFactor = 0, errorFloor = 0;
  // Hamerly's half-distance test: gapMin[a] <= min over j != a of ||c~_a - c~_j||, so by the
  // triangle inequality ||x~ - c~_j|| >= gapMin[a] - u for every j != a whenever
  // u >= ||x~ - c~_a||: a second lower bound on the other centres' distances that needs no
  // memory per sample and holds even when the centres have just moved a lot.
  std::vector<double> gapMin;
  // Per-centre (Elkan) lower bounds, N x K floats in the same drift-offset form, were tried and
  // measured slower at the benchmark's K = 8, D = 5: every sample that is not skipped must
  // refresh K bounds (a square root each), which costs more than the K distances themselves,
  // and the K bounds add 4 K bytes per sample to read. At this D the single bound pair plus the
  // half-distance test is the better trade.

  // Pruning of the emulated 16-bit modes (fp16, bf16 and the mixed modes over them): per pair,
  // an interval in double that holds the emulated d^ (emulated_bounds.h). A centre whose interval
  // lies above another's cannot win; a pair whose interval lies clear of the reliability test's
  // threshold has a known outcome. Only the other pairs are emulated, so the labels and fallback
  // counts are those of the full scan (assignOne), which runs instead when an iteration's values
  // could leave the format's range.
  static constexpr bool kEmulated = !std::is_floating_point_v<LowT>;
  bool pruned = false;      // useBounds, for an emulated mode
  bool pruneNow = false;    // this iteration: pruned, and every value stays in range
  EmulatedBounds eb;        // margins of this mode
  std::vector<double> cdT;  // D x K: c~ in double
  std::vector<double> cwT;  // D x K: (D - q) |c~_q|
  std::vector<double> ccd;  // ||c~||^2 as computed (ccl), in double

  std::vector<WT> blockSum, blockComp;    // sum blocks x K x D Kahan partials
  std::vector<std::int64_t> blockCountV;  // sum blocks x K
  std::vector<std::int64_t> blockChanged, blockFallbacks, blockTwoAgo;

  static constexpr bool kSharedLow = std::is_same_v<LowT, WT>;
  const LowT* lowRow(std::size_t i) const {
    if constexpr (kSharedLow)
      return xw + i * d;
    else
      return xl.data() + i * d;
  }

  Lloyd(const Matrix& x, const KMeansParams& p, const RunControl& c, int t)
      : data(x), params(p), control(c), threads(t), n(x.rows), d(x.cols), k(std::size_t(p.k)) {
    // Sum blocks: the units of the Kahan partial sums (at least kSumBlock samples, at most
    // kMaxPartials partial entries in all); tasks: `group` consecutive sum blocks each, at most
    // kMaxBlocks of them. The partition depends only on N, K and D.
    const std::size_t maxSumBlocks = std::max<std::size_t>(1, kMaxPartials / (k * d));
    sumBlockSize = std::max(kSumBlock, (n + maxSumBlocks - 1) / maxSumBlocks);
    sumBlocks = (n + sumBlockSize - 1) / sumBlockSize;
    blocks = std::min({(n + kMinBlock - 1) / kMinBlock, kMaxBlocks, sumBlocks});
    group = (sumBlocks + blocks - 1) / blocks;
    blocks = (sumBlocks + group - 1) / group;
    blockSize = group * sumBlockSize;
    if constexpr (std::is_same_v<WT, double>) {
      xw = x.values.data();  // fp64 working precision: the features are already the data
    } else {
      xwStore.resize(n * d);
      xw = xwStore.data();
    }
    if constexpr (!kSharedLow) xl.resize(n * d);
    xxl.resize(n);
    // Conversions and norms, block by block on all threads (first touch included). The rows
    // whose norm is not finite are countNormOverflows's count, taken from the same norms, as is
    // the largest norm (infinite when one overflowed), which the bounds take.
    std::vector<std::int64_t> blockOverflows(blocks, 0);
    std::vector<double> blockXxMax(blocks, 0.0);
    parallelFor(std::int64_t(blocks), threads, [&](std::int64_t b) {
      const std::size_t lo = std::size_t(b) * blockSize, hi = std::min(n, lo + blockSize);
      if constexpr (!std::is_same_v<WT, double>)
        for (std::size_t e = lo * d; e < hi * d; ++e) xwStore[e] = WT(x.values[e]);
      if constexpr (!kSharedLow)
        for (std::size_t e = lo * d; e < hi * d; ++e) xl[e] = ML::from(double(xw[e]));
      for (std::size_t i = lo; i < hi; ++i) {
        xxl[i] = squaredNorm<LowT>(lowRow(i), int(d));
        const double v = ML::toDouble(xxl[i]);
        blockOverflows[std::size_t(b)] += std::isfinite(v) ? 0 : 1;
        blockXxMax[std::size_t(b)] = std::max(blockXxMax[std::size_t(b)], v);
      }
    });
    for (std::int64_t c : blockOverflows) normOverflows += c;
    for (double v : blockXxMax) xxMax = std::max(xxMax, v);
    if constexpr (kFallback)
      factor = MH::from(reliabilityFactor(params.rho, int(d), lowPrecision(params.mode)));
    blockSum.resize(sumBlocks * k * d);
    blockComp.resize(sumBlocks * k * d);
    blockCountV.resize(sumBlocks * k);
    blockChanged.resize(blocks);
    blockFallbacks.resize(blocks);
    blockTwoAgo.resize(blocks);
    cl.resize(k * d);
    clT.resize(k * d);
    if constexpr (kBounded) {
      // The bound below needs (D + 2) u < 1 (fp32: D below 2^24 - 2); without it, no bounds.
      bounded =
          params.useBounds && gammaDefined(int(d) + 2, unitRoundoff(lowPrecision(params.mode)));
      if (bounded) {
        upperOff.assign(n, INFINITY);
        lowerOff.assign(n, 0.0f);
        prevCl.assign(k * d, ML::from(0.0));
        gapMin.assign(k, -INFINITY);
        drift.assign(k, 0.0);
        // E = 2 gamma_{D+2} (||x||^2 + ||c||^2) bounds the error of the expanded formula; 1.01
        // covers using the computed norms in place of the exact ones.
        errorFactor = 1.01 * 2.0 * gammaN(int(d) + 2, unitRoundoff(lowPrecision(params.mode)));
        errorFloor = double(4 * d + 4) * double(std::numeric_limits<LowT>::denorm_min());
      }
    }
    if constexpr (kEmulated) {
      // EmulatedBounds needs D u_low < 1 (bf16: D <= 255; the mixed modes' own limit is lower,
      // checkModeFeatures); above it the uniform modes scan every centre.
      pruned = params.useBounds && EmulatedBounds::applies(lowPrecision(params.mode), int(d));
      if (pruned) {
        double f = 0, uHigh = 0;
        if constexpr (kFallback) {
          f = MH::toDouble(factor);
          uHigh = unitRoundoff(std::is_same_v<H, float> ? Precision::Fp32 : Precision::Fp64);
        }
        eb = EmulatedBounds::make(lowPrecision(params.mode), int(d), f, uHigh);
        cdT.resize(k * d);
        cwT.resize(k * d);
        if constexpr (kFallback) chT.resize(k * d);
        ccd.resize(k);
      }
    }
    ccl.resize(k);
    ch.resize(k * d);
  }

  void prepareCentres() {
    if (bounded) std::swap(prevCl, cl);
    for (std::size_t j = 0; j < k * d; ++j) {
      if constexpr (kSharedLow)
        cl[j] = cw[j];
      else
        cl[j] = ML::from(double(cw[j]));
      if constexpr (kFallback) ch[j] = MH::from(double(cw[j]));
    }
    for (std::size_t j = 0; j < k; ++j) ccl[j] = squaredNorm<LowT>(cl.data() + j * d, int(d));
    for (std::size_t j = 0; j < k; ++j)
      for (std::size_t q = 0; q < d; ++q) clT[q * k + j] = cl[j * d + q];
    if constexpr (kFallback)
      if (pruned)
        for (std::size_t j = 0; j < k; ++j)
          for (std::size_t q = 0; q < d; ++q) chT[q * k + j] = ch[j * d + q];
    if (pruned) {
      double ccMax = 0;
      bool finite = true;
      for (std::size_t j = 0; j < k; ++j) {
        ccd[j] = ML::toDouble(ccl[j]);
        finite = finite && std::isfinite(ccd[j]);
        ccMax = std::max(ccMax, ccd[j]);
        for (std::size_t q = 0; q < d; ++q) {
          const double c = ML::toDouble(cl[j * d + q]);
          cdT[q * k + j] = c;
          cwT[q * k + j] = double(d - q) * std::fabs(c);
        }
      }
      pruneNow = finite && 4.0 * (xxMax + ccMax) < eb.rangeLimit;
    }
    if (bounded) {
      double deltaMax = 0, ccMax = 0;
      for (std::size_t j = 0; j < k; ++j) {
        double s2 = 0;
        for (std::size_t q = 0; q < d; ++q) {
          const double t = ML::toDouble(cl[j * d + q]) - ML::toDouble(prevCl[j * d + q]);
          s2 += t * t;
        }
        const double delta = std::sqrt(s2) * kUp + kTiny;
        drift[j] = (drift[j] + delta) * kUp;
        deltaMax = std::max(deltaMax, delta);
        ccMax = std::max(ccMax, ML::toDouble(ccl[j]));
      }
      driftMax = (driftMax + deltaMax) * kUp;
      // The gaps in double from the low-precision centres: the sum of squares has a relative
      // error far below 1e-12 for any practical D, and kTiny covers underflow.
      // K = 1: the largest double (finite, so that gapMin - u is never NaN); it keeps the only
      // label, which is right.
      std::fill(gapMin.begin(), gapMin.end(), std::numeric_limits<double>::max());
      for (std::size_t a = 0; a < k; ++a)
        for (std::size_t j = a + 1; j < k; ++j) {
          double s2 = 0;
          for (std::size_t q = 0; q < d; ++q) {
            const double t = ML::toDouble(cl[a * d + q]) - ML::toDouble(cl[j * d + q]);
            s2 += t * t;
          }
          const double g = std::max(0.0, std::sqrt(s2) * kDown - kTiny);
          gapMin[a] = std::min(gapMin[a], g);
          gapMin[j] = std::min(gapMin[j], g);
        }
      // E = 2 gamma_{D+2} (||x||^2 + ||c||^2) <= errorBound for every pair of this iteration.
      // The relative bound holds only for results in the normal range: a rounding to a
      // subnormal errs by up to half the least subnormal whatever the value. The expanded value
      // takes 3 D + 2 roundings (two norms and a dot product of D fmas each, the sum and the
      // difference), weighted 1 (norms, sum, difference) or 2 (the dot product's), so at most
      // (4 D + 2) half units; (4 D + 4) whole units cover that with room.
      errorBound = errorFactor * (xxMax + ccMax) * kUp + errorFloor;
    }
  }

  // Sample i's working-precision row converted to H, as the direct formula takes it: in `stack`
  // when D is at most kMaxStackD, else in `heap`.
  static constexpr int kMaxStackD = 16;
  const H* highRow(std::size_t i, H* stack, std::vector<H>& heap) const {
    H* xh = stack;
    if (d > std::size_t(kMaxStackD)) {
      heap.resize(d);
      xh = heap.data();
    }
    const WT* xwRow = xw + i * d;
    for (std::size_t c = 0; c < d; ++c) xh[c] = MH::from(double(xwRow[c]));
    return xh;
  }

  // Assigns sample i: returns its label and adds to `fallbacks`. DT > 0 fixes D at compile time.
  // The K inner products advance together, one coordinate at a time, over the transposed
  // centres: each pair still sees acc = fma(x_q, c_q, acc) for q = 0..D-1 in order, but the loop
  // over centres vectorises. `scratch` holds 2 K values of LowT and K values of H.
  template <int DT>
  KMSEG_INLINE int assignOne(std::size_t i, std::int64_t& fallbacks, LowT* __restrict dots,
                             H* dist) const {
    const int dd = DT > 0 ? DT : int(d);
    const std::size_t kk = k;
    const LowT* x = lowRow(i);
    const LowT zero = ML::from(0.0);
    for (std::size_t j = 0; j < kk; ++j) dots[j] = ML::fma(x[0], clT[j], zero);
    for (int q = 1; q < dd; ++q) {
      const LowT xq = x[q];
      const LowT* __restrict cq = clT.data() + std::size_t(q) * kk;
      for (std::size_t j = 0; j < kk; ++j) dots[j] = ML::fma(xq, cq[j], dots[j]);
    }
    const LowT xx = xxl[i];
    int bestJ = 0;
    if constexpr (kFallback) {
      H xhStack[kMaxStackD];
      std::vector<H> xhHeap;
      const H* xh = highRow(i, xhStack, xhHeap);
      if constexpr (std::is_floating_point_v<LowT>) {
        // mixedDistance's values in two steps: every pair's expanded value and test side by side
        // (vector lanes; a pair that falls back is marked with a NaN, which no pair that passes
        // can be), then the direct formula for the marked pairs, which are few.
        const H f = factor;
        const LowT* __restrict cc = ccl.data();
        H* __restrict out = dist;
        for (std::size_t j = 0; j < kk; ++j) {
          const Expanded<LowT> e = expandedDistance<LowT>(xx, cc[j], dots[j]);
          const H dHat = convert<H>(e.distance);
          out[j] = reliable<H>(dHat, convert<H>(e.sumNorms), f) ? dHat : H(NAN);
        }
        for (std::size_t j = 0; j < kk; ++j) {
          if (out[j] == out[j]) continue;
          out[j] = directDistance<H>(xh, ch.data() + j * dd, dd);
          ++fallbacks;
        }
      } else {
        for (std::size_t j = 0; j < kk; ++j) {
          bool fell = false;
          dist[j] = mixedDistance<LowT, H>(expandedDistance<LowT>(xx, ccl[j], dots[j]), xh,
                                           ch.data() + j * dd, dd, factor, &fell);
          fallbacks += fell;
        }
      }
      bestJ = firstLeast(dist, kk);
    } else {
      (void)dist;
      for (std::size_t j = 0; j < kk; ++j)
        dots[j] = expandedDistance<LowT>(xx, ccl[j], dots[j]).distance;
      if constexpr (std::is_floating_point_v<LowT>) {
        bestJ = firstLeast(dots, kk);
      } else {
        // Branch free (selects, not jumps): which centre wins is data dependent and mispredicted
        // branches cost more than the distances at small K.
        double best = ML::toDouble(dots[0]);
        for (std::size_t j = 1; j < kk; ++j) {
          const double dj = ML::toDouble(dots[j]);
          const bool c = closer(dj, best);
          best = c ? dj : best;
          bestJ = c ? int(j) : bestJ;
        }
      }
    }
    return bestJ;
  }

  // Assigns sample i in an emulated mode with the bounds of emulated_bounds.h (pruneNow): the
  // same label and fallback count as assignOne. `lo`, `hi` and `cls` hold K doubles,
  // `val` K values of H. Each pair's interval [lo, hi] holds its d^. Uniform modes emulate only the
  // centres whose interval reaches the least upper bound. Mixed modes: a pair whose interval lies
  // below the test's least threshold falls back (counted; its direct distance computed), one above
  // its greatest threshold passes, and only the others are emulated to decide; a passing pair is
  // then emulated only when its interval reaches the least value found. A skipped centre is
  // strictly farther than another, so it neither wins nor ties, and the centres left are
  // compared in index order as in the full scan.
  template <int DT>
  KMSEG_INLINE int assignPruned(std::size_t i, std::int64_t& fallbacks, double* __restrict lo,
                                double* __restrict hi, double* __restrict cls,
                                H* __restrict val) const {
    const int dd = DT > 0 ? DT : int(d);
    const std::size_t kk = k;
    const LowT* x = lowRow(i);
    const double xx = ML::toDouble(xxl[i]);
    // Local copies: the stores below cannot alias them, so the loops over the centres vectorise.
    const EmulatedBounds b = eb;
    const double* __restrict cc = ccd.data();
    const double* __restrict c0 = cdT.data();
    const double* __restrict w0 = cwT.data();
    // From p = x~^T c~ and w = sum_q (D - q) |x~_q c~_q| (over the transposed centres), each
    // pair's interval; a mixed mode also classifies each pair against the test's thresholds
    // (cls: 1 falls back, 2 passes, 0 undecided).
    double minHi = INFINITY;  // the least upper bound
    auto finish = [&](std::size_t j, double p, double w) {
      const double s = xx + cc[j];
      const double delta = s - 2.0 * p;
      const double m = b.margin(s, w, delta);
      const double l = delta - m, h = delta + m;
      lo[j] = l;
      hi[j] = h;
      minHi = std::min(minHi, h);
      if constexpr (kFallback) {
        // Selects, not branches.
        const double falls = h < b.testLo * s - b.testAbs ? 1.0 : 0.0;
        const double passes = l > b.testHi * s + b.testAbs ? 2.0 : 0.0;
        cls[j] = falls + passes;
      }
    };
    if constexpr (DT > 0) {
      double xs[DT], as[DT];
      for (int q = 0; q < DT; ++q) xs[q] = ML::toDouble(x[q]), as[q] = std::fabs(xs[q]);
      // Four centres at a time in vector lanes (element-wise IEEE operations, the same as
      // `finish` computes), then the rest one by one.
      using V = typename Vec4<double>::type;
      constexpr std::size_t kLanes = sizeof(V) / sizeof(double);
      const V one = {1.0, 1.0, 1.0, 1.0}, two = one + one, zero = one - one;
      const V inf = one * INFINITY;
      V hMin = inf;
      std::size_t j0 = 0;
      for (; j0 + kLanes <= kk; j0 += kLanes) {
        V p, w, t, u;
        std::memcpy(&t, c0 + j0, sizeof(V));
        std::memcpy(&u, w0 + j0, sizeof(V));
        p = xs[0] * t;
        w = as[0] * u;
        for (int q = 1; q < DT; ++q) {
          std::memcpy(&t, c0 + std::size_t(q) * kk + j0, sizeof(V));
          std::memcpy(&u, w0 + std::size_t(q) * kk + j0, sizeof(V));
          p += xs[q] * t;
          w += as[q] * u;
        }
        std::memcpy(&t, cc + j0, sizeof(V));
        const V s = xx + t;
        const V delta = s - 2.0 * p;
        const V m = b.a1 * w + b.a2 * s + b.a3 * (delta < 0 ? -delta : delta) + b.a0;
        const V l = delta - m, h = delta + m;
        std::memcpy(lo + j0, &l, sizeof(V));
        std::memcpy(hi + j0, &h, sizeof(V));
        hMin = h < hMin ? h : hMin;
        if constexpr (kFallback) {
          const V c = (h < b.testLo * s - b.testAbs ? one : zero) +
                      (l > b.testHi * s + b.testAbs ? two : zero);
          std::memcpy(cls + j0, &c, sizeof(V));
        }
      }
      for (std::size_t q = 0; q < kLanes; ++q) minHi = std::min(minHi, hMin[q]);
      for (std::size_t j = j0; j < kk; ++j) {
        double p = xs[0] * c0[j], w = as[0] * w0[j];
        for (int q = 1; q < DT; ++q) {
          p += xs[q] * c0[std::size_t(q) * kk + j];
          w += as[q] * w0[std::size_t(q) * kk + j];
        }
        finish(j, p, w);
      }
    } else {
      // lo: p, hi: w, accumulated coordinate by coordinate.
      const double x0 = ML::toDouble(x[0]), a0 = std::fabs(x0);
      for (std::size_t j = 0; j < kk; ++j) {
        lo[j] = x0 * c0[j];
        hi[j] = a0 * w0[j];
      }
      for (int q = 1; q < dd; ++q) {
        const double xq = ML::toDouble(x[q]), aq = std::fabs(xq);
        const double* __restrict cq = c0 + std::size_t(q) * kk;
        const double* __restrict wq = w0 + std::size_t(q) * kk;
        for (std::size_t j = 0; j < kk; ++j) {
          lo[j] += xq * cq[j];
          hi[j] += aq * wq[j];
        }
      }
      for (std::size_t j = 0; j < kk; ++j) finish(j, lo[j], hi[j]);
    }
    auto emulated = [&](std::size_t j) {
      return expandedDistance<LowT>(xxl[i], ccl[j],
                                    dotProduct<LowT>(x, cl.data() + j * std::size_t(dd), dd));
    };
    if constexpr (!kFallback) {
      (void)val;
      (void)cls;
      (void)fallbacks;
      int first = -1, count = 0;
      for (std::size_t j = 0; j < kk; ++j)
        if (lo[j] <= minHi) first = count++ == 0 ? int(j) : first;
      if (count == 1) return first;  // the centre that attains minHi, alone below it
      int bestJ = -1;
      double best = 0;
      for (std::size_t j = std::size_t(first); j < kk; ++j) {
        if (lo[j] > minHi) continue;
        const double dj = ML::toDouble(emulated(j).distance);
        if (bestJ < 0 || closer(dj, best)) best = dj, bestJ = int(j);
      }
      return bestJ;
    } else {
      H xhStack[kMaxStackD];
      std::vector<H> xhHeap;
      const H* xh = highRow(i, xhStack, xhHeap);
      // Every centre's direct distance, the centres side by side over chT: per pair the
      // operations of directDistance (acc = fma(t, t, acc), t = x_q - c_q, from acc = 0), so
      // the same values, in vector lanes where the instruction set has fma.
      {
        const H* __restrict c0h = chT.data();
        for (std::size_t j = 0; j < kk; ++j) {
          const H t = xh[0] - c0h[j];
          val[j] = std::fma(t, t, H(0));
        }
        for (int q = 1; q < dd; ++q) {
          const H xq = xh[q];
          const H* __restrict cq = chT.data() + std::size_t(q) * kk;
          for (std::size_t j = 0; j < kk; ++j) {
            const H t = xq - cq[j];
            val[j] = std::fma(t, t, val[j]);
          }
        }
      }
      // The argmin over the pairs with a value, in index order (ties to the lowest index).
      int bestJ = -1;
      H best{};
      auto take = [&](int j, H v) {
        if (bestJ < 0 || closerOrEarlier(v, j, best, bestJ)) best = v, bestJ = j;
      };
      double leastHi = INFINITY;  // least upper bound of the passing pairs
      for (std::size_t j = 0; j < kk; ++j) {
        if (cls[j] == 1.0) {
          ++fallbacks;
          take(int(j), val[j]);
        } else if (cls[j] == 2.0) {
          leastHi = std::min(leastHi, hi[j]);
        } else {
          const Expanded<LowT> e = emulated(j);
          const bool fell = fallsBack<LowT, H>(e, factor);
          fallbacks += fell;
          take(int(j), fell ? val[j] : convert<H>(e.distance));
        }
      }
      // A passing pair whose interval reaches the least value or upper bound may win; the others
      // stay above it. When one passing pair alone reaches it, it attains leastHi, and every
      // value found lies above that, it wins without its value.
      const double leastValue = bestJ < 0 ? INFINITY : MH::toDouble(best);
      const double least = std::min(leastValue, leastHi);
      int first = -1, count = 0;
      for (std::size_t j = 0; j < kk; ++j)
        if (cls[j] == 2.0 && lo[j] <= least) first = count++ == 0 ? int(j) : first;
      if (count == 1 && leastHi < leastValue) return first;
      for (std::size_t j = 0; j < kk; ++j)
        if (cls[j] == 2.0 && lo[j] <= least) take(int(j), convert<H>(emulated(j).distance));
      return bestJ;
    }
  }

  // Bounded assignment of sample i currently labelled `label` (-1 before the first iteration).
  template <int DT>
  KMSEG_INLINE int assignBounded(std::size_t i, int label, LowT* dots) {
    const int dd = DT > 0 ? DT : int(d);
    const double e = errorBound;
    auto provablyKept = [&](double u, double l) {
      return l > 0 && l * l * kDown > (u * u + 2 * e) * kUp;
    };
    // The half-distance bound gapMin[a] - u, rounded down.
    auto gapBound = [&](double g, double u) { return (g - u) - 1e-12 * (g + u); };
    if (label >= 0) {
      const double dl = drift[std::size_t(label)], g = gapMin[std::size_t(label)];
      const double lo = double(lowerOff[i]);
      double u = (double(upperOff[i]) + dl) * kUp + 1e-12 * dl;
      const double lh = (lo - driftMax) - 1e-12 * (std::fabs(lo) + driftMax);
      const double l = std::max(lh, gapBound(g, u));
      if (provablyKept(u, l)) return label;
      // Tighten the upper bound with the own centre's distance.
      const LowT* x = lowRow(i);
      const LowT dot = dotProduct<LowT>(x, cl.data() + std::size_t(label) * dd, dd);
      const double da =
          ML::toDouble(expandedDistance<LowT>(xxl[i], ccl[std::size_t(label)], dot).distance);
      u = std::sqrt(std::max(0.0, da + e)) * kUp;
      if (provablyKept(u, std::max(lh, gapBound(g, u)))) {
        storeUpper(i, u, dl);
        return label;
      }
    }
    std::int64_t unused = 0;
    const int a = assignOne<DT>(i, unused, dots, nullptr);
    // assignOne leaves the K computed distances in dots.
    const double best = ML::toDouble(dots[std::size_t(a)]), second = leastExcept(dots, k, a);
    storeUpper(i, std::sqrt(std::max(0.0, best + e)) * kUp, drift[std::size_t(a)]);
    if (k == 1) {
      lowerOff[i] = INFINITY;
    } else {
      const double l = std::sqrt(std::max(0.0, second - e)) * kDown;
      lowerOff[i] = floatBelow((l + driftMax) - 1e-12 * (l + driftMax));
    }
    return a;
  }

  // Stores the upper bound u of sample i as an offset from its centre's drift dl, rounded up.
  void storeUpper(std::size_t i, double u, double dl) {
    upperOff[i] = floatAbove((u - dl) + 1e-12 * (u + dl));
  }

  // One task of the pass: the sum blocks [b G, (b + 1) G) in order. Per sum block: the
  // assignment of its samples (label write, changed, 2-cycle and fallback counts), then its Kahan
  // partial sums, unless no label of the block changed: its partials (same samples, same labels,
  // same order) are then those of the last pass, kept from it, and its rows are not read again.
  // With `assign`, labels are read from `prev` (the last iteration's) and written to `out`, which
  // holds those of the iteration before: comparing on the way counts the 2-cycle difference
  // without another pass. Without `assign`, `out` holds the labels to sum (every block is summed).
  template <int DT>
  KMSEG_INLINE void blockBody(std::size_t b, const std::int32_t* prev, std::int32_t* out,
                              bool assign) {
    std::int64_t changed = 0, fallbacks = 0, twoAgo = 0;
    std::vector<LowT> dots(assign ? k : 0);
    std::vector<H> dist(assign && kFallback ? k : 0);
    std::vector<double> bounds(assign && pruneNow ? 3 * k : 0);
    const std::size_t dd = DT > 0 ? std::size_t(DT) : d;
    const std::size_t sEnd = std::min(sumBlocks, (b + 1) * group);
    for (std::size_t sb = b * group; sb < sEnd; ++sb) {
      const std::size_t lo = sb * sumBlockSize, hi = std::min(n, lo + sumBlockSize);
      bool dirty = !assign || !partialsValid;
      if (assign) {
        for (std::size_t i = lo; i < hi; ++i) {
          const int label = prev[i];
          int nl;
          if constexpr (kBounded) {
            nl = bounded ? assignBounded<DT>(i, label, dots.data())
                         : assignOne<DT>(i, fallbacks, dots.data(), dist.data());
          } else if constexpr (kEmulated) {
            nl = pruneNow ? assignPruned<DT>(i, fallbacks, bounds.data(), bounds.data() + k,
                                             bounds.data() + 2 * k, dist.data())
                          : assignOne<DT>(i, fallbacks, dots.data(), dist.data());
          } else {
            nl = assignOne<DT>(i, fallbacks, dots.data(), dist.data());
          }
          changed += nl != label;
          dirty |= nl != label;
          twoAgo += nl != out[i];
          out[i] = nl;
        }
      }
      if (!dirty) continue;
      WT* sum = blockSum.data() + sb * k * d;
      WT* comp = blockComp.data() + sb * k * d;
      std::int64_t* cnt = blockCountV.data() + sb * k;
      std::fill(sum, sum + k * d, WT(0));
      std::fill(comp, comp + k * d, WT(0));
      std::fill(cnt, cnt + k, 0);
      for (std::size_t i = lo; i < hi; ++i) {
        // Kahan summation in W: a fixed order within the sum block (D known at compile time for
        // the image case, so the D lanes vectorise).
        const std::size_t label = std::size_t(out[i]);
        const WT* __restrict xr = xw + i * dd;
        WT* __restrict s = sum + label * dd;
        WT* __restrict c = comp + label * dd;
        std::size_t q = 0;
        if constexpr (DT >= 4) {
          // Four lanes at once (element-wise IEEE operations: the same results as the scalar
          // loop, whatever the instruction set).
          using V = typename Vec4<WT>::type;
          V xv, sv, cv;
          std::memcpy(&xv, xr, sizeof(V));
          std::memcpy(&sv, s, sizeof(V));
          std::memcpy(&cv, c, sizeof(V));
          const V y = xv - cv;
          const V t = sv + y;
          cv = (t - sv) - y;
          std::memcpy(c, &cv, sizeof(V));
          std::memcpy(s, &t, sizeof(V));
          q = 4;
        }
        for (; q < dd; ++q) {
          const WT y = xr[q] - c[q];
          const WT t = s[q] + y;
          c[q] = (t - s[q]) - y;
          s[q] = t;
        }
        ++cnt[label];
      }
    }
    blockChanged[b] = changed;
    blockFallbacks[b] = fallbacks;
    blockTwoAgo[b] = twoAgo;
  }

  template <int DT>
  KMSEG_FLATTEN void blockGeneric(std::size_t b, const std::int32_t* prev, std::int32_t* out,
                                  bool assign) {
    blockBody<DT>(b, prev, out, assign);
  }
#if KMSEG_X86_DISPATCH
  template <int DT>
  KMSEG_TARGET_V3 void blockV3(std::size_t b, const std::int32_t* prev, std::int32_t* out,
                               bool assign) {
    blockBody<DT>(b, prev, out, assign);
  }
#endif

  void pass(const std::int32_t* prev, std::int32_t* out, bool assign, bool useV3) {
    const bool d5 = d == 5;
    parallelFor(std::int64_t(blocks), threads, [&](std::int64_t bi) {
      const auto b = std::size_t(bi);
#if KMSEG_X86_DISPATCH
      if (useV3) {
        d5 ? blockV3<5>(b, prev, out, assign) : blockV3<0>(b, prev, out, assign);
        return;
      }
#endif
      (void)useV3;
      d5 ? blockGeneric<5>(b, prev, out, assign) : blockGeneric<0>(b, prev, out, assign);
    });
    partialsValid = true;
  }

  // Sum-block partials -> per-cluster counts and sums (pairwise over the sum blocks, fixed
  // order).
  void reduce(std::vector<std::int64_t>& counts, std::vector<WT>& sums) const {
    counts.assign(k, 0);
    sums.assign(k * d, WT(0));
    for (std::size_t b = 0; b < sumBlocks; ++b)
      for (std::size_t j = 0; j < k; ++j) counts[j] += blockCountV[b * k + j];
    std::vector<WT> folded(sumBlocks);
    for (std::size_t e = 0; e < k * d; ++e) {
      for (std::size_t b = 0; b < sumBlocks; ++b)
        folded[b] = blockSum[b * k * d + e] - blockComp[b * k * d + e];
      sums[e] = pairwiseSum(folded.data(), 0, sumBlocks, 1);
    }
  }

  // Direct distance in W between sample i and centre j of `centres`.
  WT distanceW(std::size_t i, const WT* centres, std::size_t j) const {
    return directDistance<WT>(xw + i * d, centres + j * d, int(d));
  }

  // Re-seeds each empty cluster (ascending) with the sample farthest from the centre it was
  // assigned to, among samples whose cluster keeps at least one other member (ties to the lowest
  // index: fartherCandidate).
  //
  // A sample's distance does not change while clusters are re-seeded (its label and centre
  // stay), and a sample that is not eligible stays so (counts only fall, and a re-seeded sample
  // is alone in its cluster), so the picks are the first eligible samples of one fixed order,
  // eligibility checked as they come. Each task keeps its first `keep` eligible samples in that
  // order; the merged lists give the order as long as no list runs out while its task had more,
  // and after that each cluster is re-seeded by scanning every sample, the rule itself.
  std::int64_t reseedEmpty(std::int32_t* labels, std::vector<std::int64_t>& counts,
                           const std::vector<WT>& assignedCentres) {
    const auto empty = std::size_t(std::count(counts.begin(), counts.end(), 0));
    if (empty == 0) return 0;
    struct Candidate {
      WT d;
      std::int64_t i;
    };
    auto before = [](const Candidate& a, const Candidate& b) {
      return fartherCandidate(a.d, a.i, b.d, b.i);
    };
    const std::size_t keep = empty + 64;
    std::vector<std::vector<Candidate>> lists(blocks);
    std::vector<char> more(blocks, 0);
    parallelFor(std::int64_t(blocks), threads, [&](std::int64_t b) {
      const std::size_t lo = std::size_t(b) * blockSize, hi = std::min(n, lo + blockSize);
      // A heap of the task's first `keep` eligible samples, the last of them on top.
      std::vector<Candidate>& list = lists[std::size_t(b)];
      for (std::size_t i = lo; i < hi; ++i) {
        if (counts[std::size_t(labels[i])] <= 1) continue;
        const Candidate c{distanceW(i, assignedCentres.data(), std::size_t(labels[i])),
                          std::int64_t(i)};
        if (list.size() < keep) {
          list.push_back(c);
          std::push_heap(list.begin(), list.end(), before);
          continue;
        }
        more[std::size_t(b)] = 1;
        if (!before(c, list.front())) continue;
        std::pop_heap(list.begin(), list.end(), before);
        list.back() = c;
        std::push_heap(list.begin(), list.end(), before);
      }
      std::sort(list.begin(), list.end(), before);
    });
    // The lists' heads, the first in order on top.
    using Head = std::pair<Candidate, std::size_t>;  // candidate, its list
    auto after = [&](const Head& x, const Head& y) { return before(y.first, x.first); };
    std::vector<Head> heads;
    for (std::size_t b = 0; b < blocks; ++b)
      if (!lists[b].empty()) heads.push_back({lists[b].front(), b});
    std::make_heap(heads.begin(), heads.end(), after);
    std::vector<std::size_t> next(blocks, 1);
    bool merged = true;  // the lists still give the order
    std::int64_t events = 0;
    for (std::size_t j = 0; j < k; ++j) {
      if (counts[j] != 0) continue;
      std::int64_t p = -1;
      while (merged && !heads.empty()) {
        std::pop_heap(heads.begin(), heads.end(), after);
        const auto [c, b] = heads.back();
        heads.pop_back();
        if (next[b] < lists[b].size()) {
          heads.push_back({lists[b][next[b]++], b});
          std::push_heap(heads.begin(), heads.end(), after);
        } else if (more[b]) {
          merged = false;  // list b's other samples may come before the next head
        }
        if (counts[std::size_t(labels[c.i])] > 1) {
          p = c.i;
          break;
        }
      }
      if (p < 0 && !merged) p = farthestByScan(labels, counts, assignedCentres);
      if (p < 0) break;  // cannot happen for K <= N; keep the cluster empty rather than loop
      --counts[std::size_t(labels[p])];
      labels[p] = std::int32_t(j);
      if (bounded) {
        upperOff[std::size_t(p)] = INFINITY;
        lowerOff[std::size_t(p)] = -INFINITY;
      }
      counts[j] = 1;
      ++events;
    }
    return events;
  }

  // The farthest eligible sample (see reseedEmpty) by scanning every sample, or -1 for none.
  std::int64_t farthestByScan(const std::int32_t* labels, const std::vector<std::int64_t>& counts,
                              const std::vector<WT>& assignedCentres) const {
    std::vector<WT> bestD(blocks, WT(-1));
    std::vector<std::int64_t> bestI(blocks, -1);
    parallelFor(std::int64_t(blocks), threads, [&](std::int64_t b) {
      const std::size_t lo = std::size_t(b) * blockSize, hi = std::min(n, lo + blockSize);
      WT bd = WT(-1);
      std::int64_t bi = -1;
      for (std::size_t i = lo; i < hi; ++i) {
        if (counts[std::size_t(labels[i])] <= 1) continue;
        const WT di = distanceW(i, assignedCentres.data(), std::size_t(labels[i]));
        if (bi < 0 || fartherCandidate(di, std::int64_t(i), bd, bi)) {
          bd = di;
          bi = std::int64_t(i);
        }
      }
      bestD[std::size_t(b)] = bd;
      bestI[std::size_t(b)] = bi;
    });
    std::int64_t p = -1;
    WT pd = WT(-1);
    for (std::size_t b = 0; b < blocks; ++b)
      if (bestI[b] >= 0 && (p < 0 || fartherCandidate(bestD[b], bestI[b], pd, p))) {
        p = bestI[b];
        pd = bestD[b];
      }
    return p;
  }

  double sseOf(const std::int32_t* labels, const std::vector<WT>& centres) const {
    std::vector<double> partial(blocks, 0.0);
    parallelFor(std::int64_t(blocks), threads, [&](std::int64_t b) {
      const std::size_t lo = std::size_t(b) * blockSize, hi = std::min(n, lo + blockSize);
      double s = 0.0;
      for (std::size_t i = lo; i < hi; ++i) {
        const double* x = data.row(i);
        const WT* c = centres.data() + std::size_t(labels[i]) * d;
        for (std::size_t q = 0; q < d; ++q) {
          const double t = x[q] - double(c[q]);
          s += t * t;
        }
      }
      partial[std::size_t(b)] = s;
    });
    return pairwiseSum(partial.data(), 0, blocks, 1);
  }

  KMeansResult run(const Matrix& initial, bool useV3) {
    KMeansResult r;
    r.mode = params.mode;
    r.working = std::is_same_v<WT, double> ? Precision::Fp64 : Precision::Fp32;
    r.normOverflows = normOverflows;
    cw.resize(k * d);
    for (std::size_t j = 0; j < k * d; ++j) cw[j] = WT(initial.values[j]);

    // labels: this iteration's; older: the previous iteration's, then (after the swap at the
    // top of the loop) the one before. Two buffers, no copies.
    std::vector<std::int32_t> labels(n, -1), older(n, -1);
    std::vector<std::int64_t> counts;
    std::vector<WT> sums, newC(k * d);
    // The repeat rule: the hashes of the last kRepeatWindow iterations' centres, and the copy of
    // the candidate's.
    std::vector<std::uint64_t> repeatHashes(params.detectRepeats ? kRepeatWindow : 0);
    std::vector<WT> repeatCopy;
    RepeatSearch repeat;
    const auto t0 = std::chrono::steady_clock::now();
    for (int it = 1;; ++it) {
      if (control.cancelled()) throw Cancelled();
      prepareCentres();
      std::swap(labels, older);  // older = last iteration's labels; labels = the one before
      pass(older.data(), labels.data(), true, useV3);
      IterationStats st;
      st.iteration = it;
      st.evaluations = std::int64_t(n) * std::int64_t(k);
      std::int64_t twoAgo = 0;
      for (std::size_t b = 0; b < blocks; ++b) {
        st.changed += blockChanged[b];
        st.fallbacks += blockFallbacks[b];
        twoAgo += blockTwoAgo[b];
      }
      reduce(counts, sums);
      if (std::find(counts.begin(), counts.end(), 0) != counts.end()) {
        st.emptyClusters = reseedEmpty(labels.data(), counts, cw);
        if (st.emptyClusters > 0) {
          pass(nullptr, labels.data(), false, useV3);
          reduce(counts, sums);
        }
      }
      for (std::size_t j = 0; j < k; ++j)
        for (std::size_t q = 0; q < d; ++q)
          newC[j * d + q] = updatedCentre(sums[j * d + q], counts[j], cw[j * d + q]);
      st.centreShift = relativeCentreShift(cw.data(), newC.data(), int(k * d));
      std::swap(cw, newC);
      if (params.traceSse) st.sse = sseOf(labels.data(), cw);
      const bool sameAsTwoAgo = it >= 3 && twoAgo == 0;
      r.fallbacks += st.fallbacks;
      r.evaluations += st.evaluations;
      r.emptyClusterEvents += st.emptyClusters;
      r.trace.push_back(st);
      if (control.progress) control.progress(st);
      const int repeatPeriod =
          params.detectRepeats ? repeatStep(it, cw, repeatHashes, repeatCopy, repeat) : 0;
      StopReason reason{};
      if (shouldStop({it, params.maxIterations, st.changed, st.emptyClusters, sameAsTwoAgo,
                      params.detectCycles, st.centreShift, params.tolerance, repeatPeriod},
                     &reason)) {
        r.iterations = it;
        r.stop = reason;
        r.cyclePeriod = reason == StopReason::Cycle    ? 2
                        : reason == StopReason::Repeat ? repeatPeriod
                                                       : 0;
        break;
      }
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.labels = std::move(labels);
    r.centroids = Matrix(k, d);
    for (std::size_t j = 0; j < k * d; ++j) r.centroids.values[j] = double(cw[j]);
    r.sse = params.traceSse && !r.trace.empty() ? r.trace.back().sse : sseOf(r.labels.data(), cw);
    return r;
  }
};

bool cpuSupportsV3() {
#if KMSEG_X86_DISPATCH
  if (const char* isa = std::getenv("KMSEG_CPU_ISA"); isa && std::string(isa) == "generic")
    return false;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("bmi2");
#else
  return false;
#endif
}

template <class LowT, class HighT>
KMeansResult runMode(const Matrix& data, const Matrix& init, const KMeansParams& p,
                     const RunControl& c, int threads, Precision working) {
  const bool v3 = cpuSupportsV3();
  if (working == Precision::Fp64) {
    Lloyd<LowT, HighT, double> lloyd(data, p, c, threads);
    return lloyd.run(init, v3);
  }
  Lloyd<LowT, HighT, float> lloyd(data, p, c, threads);
  return lloyd.run(init, v3);
}

class CpuEngine final : public KMeansEngine {
 public:
  explicit CpuEngine(int threads) : threads_(resolveThreadCount(threads)) {}

  std::string description() const override {
    return "CPU (" + std::to_string(threads_) + (threads_ == 1 ? " thread)" : " threads)");
  }

  KMeansResult run(const Matrix& data, const Matrix& initialCentres, const KMeansParams& params,
                   const RunControl& control) override {
    if (data.empty()) throw InvalidArgument("the feature matrix is empty");
    validate(params, data.rows);
    checkModeFeatures(params.mode, data.cols);
    if (initialCentres.rows != std::size_t(params.k) || initialCentres.cols != data.cols)
      throw InvalidArgument("initial centres are " + std::to_string(initialCentres.rows) + " x " +
                            std::to_string(initialCentres.cols) + ", expected K x D = " +
                            std::to_string(params.k) + " x " + std::to_string(data.cols));
    checkFinite(data, "the feature matrix");
    checkFinite(initialCentres, "the initial centres");
    const int threads = params.threads > 0 ? params.threads : threads_;
    const Precision w = resolveWorking(params.mode, params.working);
    KMeansResult r;
    switch (params.mode) {
#define KMSEG_CPU_CASE(e, name, low, high)                                                    \
  case Mode::e:                                                                               \
    r = runMode<TypeOf<low>::type, TypeOf<high>::type>(data, initialCentres, params, control, \
                                                       threads, w);                           \
    break;
      KMSEG_FOR_EACH_MODE(KMSEG_CPU_CASE)
#undef KMSEG_CPU_CASE
    }
    r.backend = "CPU (" + std::to_string(threads) + (threads == 1 ? " thread)" : " threads)");
    return r;
  }

 private:
  int threads_;
};

std::mutex& registryMutex() {
  static std::mutex m;
  return m;
}
// The registered GPU engine and the largest K and D it takes.
struct GpuRegistration {
  GpuEngineFactory factory = nullptr;
  int maxClusters = 0;
  std::size_t maxFeatures = 0;
  std::size_t maxRows = 0;
};
GpuRegistration& gpuRegistration() {
  static GpuRegistration r;
  return r;
}

// Why the GPU engine of `reg` cannot take a run of K = `k`, D = `d` and N = `n` (0: not known),
// or empty when it can.
std::string beyondGpuLimits(const GpuRegistration& reg, int k, std::size_t d, std::size_t n) {
  if (k > reg.maxClusters)
    return "K = " + std::to_string(k) + " is above the CUDA engine's maximum of " +
           std::to_string(reg.maxClusters);
  if (d > reg.maxFeatures)
    return "D = " + std::to_string(d) + " features is above the CUDA engine's maximum of " +
           std::to_string(reg.maxFeatures);
  if (n > reg.maxRows)
    return "N = " + std::to_string(n) + " samples is above the CUDA engine's maximum of " +
           std::to_string(reg.maxRows);
  return {};
}

// What Auto gives when it gives the GPU: the GPU engine, with the CPU in reserve.
// - A run beyond the GPU engine's limits (K, D or N, when the caller could not say them before)
//   runs on the CPU.
// - A run that fails with BackendError (device out of memory, a device fault) is done again on
//   the CPU, and so is every later run of this engine: a device fault leaves the GPU engine
//   unusable, and data that did not fit would not fit again. The GPU engine is released at the
//   switch, with whatever device memory it kept.
// Each such result says why in its backendNote; a run done again is announced when it starts
// again (RunControl::restarted).
class AutoEngine final : public KMeansEngine {
 public:
  AutoEngine(std::unique_ptr<KMeansEngine> gpu, const GpuRegistration& limits, int threads)
      : gpu_(std::move(gpu)), limits_(limits), threads_(threads) {}

  std::string description() const override {
    return gpu_ ? gpu_->description() : cpu_->description();
  }

  KMeansResult run(const Matrix& data, const Matrix& initialCentres, const KMeansParams& params,
                   const RunControl& control) override {
    std::string note = failure_;
    std::string failed;  // why this run's GPU attempt failed, when it did
    if (gpu_) {
      const std::string beyond = beyondGpuLimits(limits_, params.k, data.cols, data.rows);
      if (beyond.empty()) {
        try {
          return gpu_->run(data, initialCentres, params, control);
        } catch (const BackendError& e) {
          // Anything else (bad input, a cancel, host memory) is the caller's to see as it is.
          failure_ = std::string("on the CPU: an earlier GPU run failed (") + e.what() + ")";
          failed = std::string("the GPU run failed (") + e.what() + ")";
          note = failed + "; it ran on the CPU instead";
          gpu_.reset();  // its destructor releases the device memory and reports no error
        }
      } else {
        note = "on the CPU: " + beyond;
      }
    }
    if (!cpu_) {
      cpu_ = makeCpuEngine(threads_);
      cpu_->keepData(kept_);
    }
    if (!failed.empty() && control.restarted)
      control.restarted(failed + "; it runs again on the CPU, from iteration 1");
    KMeansResult r = cpu_->run(data, initialCentres, params, control);
    r.backendNote = note;
    return r;
  }

  void keepData(const KeptFeatures& kept) override {
    kept_ = kept;
    if (gpu_) gpu_->keepData(kept);
    if (cpu_) cpu_->keepData(kept);
  }

 private:
  std::unique_ptr<KMeansEngine> gpu_;  ///< null once a run failed on it
  std::unique_ptr<KMeansEngine> cpu_;  ///< made when a run first needs it
  GpuRegistration limits_;
  int threads_;
  KeptFeatures kept_;
  std::string failure_;  ///< the note of runs after the GPU failed
};

}  // namespace

int resolveThreadCount(int threads) {
  if (threads > 0) return threads;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? int(hw) : 1;
}

std::unique_ptr<KMeansEngine> makeCpuEngine(int threads) {
  return std::make_unique<CpuEngine>(threads);
}

void registerGpuEngineFactory(GpuEngineFactory factory, int maxClusters, std::size_t maxFeatures,
                              std::size_t maxRows) {
  std::lock_guard lock(registryMutex());
  gpuRegistration() = {factory, maxClusters, maxFeatures, maxRows};
}

std::string_view backendName(Backend b) {
  switch (b) {
    case Backend::Cpu:
      return "cpu";
    case Backend::Cuda:
      return "cuda";
    case Backend::Auto:
      break;
  }
  return "auto";
}

Backend parseBackend(std::string_view name) {
  if (name == "auto") return Backend::Auto;
  if (name == "cpu") return Backend::Cpu;
  if (name == "cuda") return Backend::Cuda;
  throw InvalidArgument("unknown backend '" + std::string(name) + "'; valid: auto, cpu, cuda");
}

EngineChoice makeEngine(Backend backend, int threads, const EngineNeeds& needs) {
  EngineChoice choice;
  if (backend != Backend::Cpu) {
    GpuRegistration gpuReg;
    {
      std::lock_guard lock(registryMutex());
      gpuReg = gpuRegistration();
    }
    // An explicit cuda backend leaves K, D or N beyond the limits to the engine's own error.
    std::string why = !gpuReg.factory ? "this build has no CUDA engine"
                      : backend == Backend::Auto
                          ? beyondGpuLimits(gpuReg, needs.clusters, needs.features, needs.rows)
                          : std::string();
    if (why.empty()) {
      if (auto gpu = gpuReg.factory(why)) {
        if (backend == Backend::Auto)
          choice.engine = std::make_unique<AutoEngine>(std::move(gpu), gpuReg, threads);
        else
          choice.engine = std::move(gpu);
        choice.backend = Backend::Cuda;
        return choice;
      }
    }
    if (backend == Backend::Cuda) throw BackendError("the CUDA backend is not available: " + why);
    choice.note = "using the CPU: " + why;
  }
  choice.engine = makeCpuEngine(threads);
  choice.backend = Backend::Cpu;
  return choice;
}

double computeSse(const Matrix& x, const std::vector<std::int32_t>& labels, const Matrix& centres) {
  if (labels.size() != x.rows || centres.cols != x.cols)
    throw InvalidArgument("computeSse: labels, data and centres do not match in size");
  double total = 0.0;
  for (std::size_t i = 0; i < x.rows; ++i) {
    const auto l = labels[i];
    if (l < 0 || std::size_t(l) >= centres.rows)
      throw InvalidArgument("computeSse: label " + std::to_string(l) + " is out of range");
    for (std::size_t q = 0; q < x.cols; ++q) {
      const double t = x(i, q) - centres(std::size_t(l), q);
      total += t * t;
    }
  }
  return total;
}

}  // namespace kmseg
