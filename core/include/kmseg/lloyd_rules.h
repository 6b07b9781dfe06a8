// SPDX-License-Identifier: MIT
#pragma once

// The rules of the Lloyd loop, shared by every engine (STYLE.md rule 2): tie-breaking, the
// empty-cluster candidate order, the centre-shift measure and the stop test. Only the reduction
// order of sums may differ between engines.

#include <cstdint>
#include <cstring>

#include "kmseg/config.h"

namespace kmseg {

/// Why a Lloyd loop stopped.
enum class StopReason {
  Converged,     ///< no label changed
  Cycle,         ///< labels equal those of two iterations earlier (a 2-cycle)
  CentreShift,   ///< relative centre shift below the tolerance
  Repeat,        ///< the centres equal those of 2 to kRepeatWindow iterations earlier
  MaxIterations  ///< the iteration cap was reached
};

/// Argmin step: centres are scanned in ascending index order and a centre replaces the best so
/// far only when strictly closer, so ties go to the lowest index. A NaN best so far is replaced
/// by any number; a NaN candidate never wins.
template <class D>
KMSEG_HOST_DEVICE inline bool closer(D candidate, D best) {
  return candidate < best || (best != best && candidate == candidate);
}

/// The same argmin for centres met in any order: centre `index` replaces the best so far (centre
/// `bestIndex`) when closer, or equally close and of a lower index.
template <class D>
KMSEG_HOST_DEVICE inline bool closerOrEarlier(D candidate, int index, D best, int bestIndex) {
  return closer(candidate, best) || (candidate == best && index < bestIndex);
}

/// Empty-cluster re-seeding picks the point farthest from the centre it was assigned to
/// (direct formula in the working precision); ties go to the lowest point index.
template <class D>
KMSEG_HOST_DEVICE inline bool fartherCandidate(D d, std::int64_t index, D bestD,
                                               std::int64_t bestIndex) {
  return d > bestD || (d == bestD && index < bestIndex);
}

/// One entry of a centre after the update: the cluster's sum in W over its exact count, rounded
/// to W, or the old value when the cluster is empty (re-seeding has already run; an empty
/// cluster keeps its centre).
template <class W>
KMSEG_HOST_DEVICE inline W updatedCentre(W sum, long long count, W old) {
  // The quotient is taken in double, where every count below 2^53 is exact, and rounded to W.
  // For W = fp32 and counts up to 2^24 that is fp32's own division sum / float(count): a
  // quotient of two p-bit numbers rounded first to q >= 2 p + 2 bits and then to p bits is the
  // correctly rounded one (53 >= 50). A larger count would round in fp32 before the division
  // (2^24 + 1 becomes 2^24) and add that error to the mean's.
  return count > 0 ? W(double(sum) / double(count)) : old;
}

/// The two terms one centre entry adds to relativeCentreShift's sums, (new - old)^2 and new^2,
/// in double. Each is rounded on its own, so an engine may compute them in parallel.
struct ShiftTerms {
  double moved;  ///< (new - old)^2
  double size;   ///< new^2
};

template <class W>
KMSEG_HOST_DEVICE inline ShiftTerms centreShiftTerms(W oldC, W newC) {
  const double a = double(newC), b = double(oldC);
  return {(a - b) * (a - b), a * a};
}

/// relativeCentreShift from the sums of its terms over all entries.
KMSEG_HOST_DEVICE inline double centreShiftOfSums(double moved, double size) {
  if (moved == 0.0) return 0.0;
  if (size == 0.0) return __builtin_huge_val();
  return __builtin_sqrt(moved / size);
}

/// Lanes of relativeCentreShift's sums. Entry i's terms go to lane i % kShiftLanes; each lane
/// adds its terms in index order (from +0); then the lanes are added pairwise, lane l taking
/// lane l + h for h = kShiftLanes / 2, ..., 2, 1. An engine can so add a lane per thread and
/// the lanes by a tree, with these bits (on the H200 the CUDA update, when one thread added
/// K D = 12 800 entries one after another, took 0.11 ms per iteration, ncu).
inline constexpr int kShiftLanes = 256;

/// ||C_new - C_old||_F / ||C_new||_F over `n` entries: the terms (centreShiftTerms) added in
/// double in kShiftLanes lanes. 0 when nothing moved; infinity when the new centres are all zero
/// but something moved.
template <class W>
inline double relativeCentreShift(const W* oldC, const W* newC, int n) {
  double moved[kShiftLanes] = {}, size[kShiftLanes] = {};
  for (int i = 0; i < n; ++i) {
    const ShiftTerms t = centreShiftTerms(oldC[i], newC[i]);
    moved[i % kShiftLanes] += t.moved;
    size[i % kShiftLanes] += t.size;
  }
  for (int h = kShiftLanes / 2; h > 0; h /= 2)
    for (int l = 0; l < h; ++l) {
      moved[l] += moved[l + h];
      size[l] += size[l + h];
    }
  return centreShiftOfSums(moved[0], size[0]);
}

/// The repeat rule (KMeansParams::detectRepeats). The centres after an iteration are the whole
/// state of the loop: the next labels, re-seeding and centres follow from them alone. So when the
/// centres after iteration t equal, bit for bit, those after iteration s < t, the run repeats
/// iterations s + 1 ... t for ever, and no other rule but the cap would end it (a period of 1 is
/// convergence in the next iteration, which the other rules see). An engine keeps a hash of the
/// centres of each of the last kRepeatWindow iterations. When iteration t's hash equals that of
/// an iteration s in [t - kRepeatWindow, t - 2] (the latest such s), it copies its centres and
/// compares them with those of iteration t + (t - s): equal, the run stops there with period
/// t - s; unequal (two hashes met by chance), the search goes on. A cycle of period p that
/// starts after iteration m is so found at iteration m + 2 p.
inline constexpr int kRepeatWindow = 1024;

/// The bits of a centre entry, zero-extended.
KMSEG_HOST_DEVICE inline std::uint64_t entryBits(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}
KMSEG_HOST_DEVICE inline std::uint64_t entryBits(double v) {
  std::uint64_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

/// Entry `index`'s term of the centres' hash: its bits and index through splitmix64's mixer. The
/// hash is the sum of the terms modulo 2^64, so an engine may add them in any order.
KMSEG_HOST_DEVICE inline std::uint64_t repeatHashTerm(std::uint64_t bits, std::uint64_t index) {
  std::uint64_t z = bits + (index + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// The repeat rule's state between iterations, besides the hashes (slot t % kRepeatWindow holds
/// iteration t's) and the copy of the candidate's centres.
struct RepeatSearch {
  int candidate = 0;  ///< iteration whose centres were copied, 0 when none
  int period = 0;     ///< the candidate's period: its centres are compared at candidate + period

  /// Whether iteration `it` compares its centres with the copy.
  KMSEG_HOST_DEVICE bool checksAt(int it) const {
    return candidate > 0 && it == candidate + period;
  }
  /// The earliest iteration whose hash iteration `it` looks at (the latest is it - 2).
  KMSEG_HOST_DEVICE static int firstLookedAt(int it) {
    return it - kRepeatWindow > 1 ? it - kRepeatWindow : 1;
  }
};

/// What the stop test looks at after iteration `iteration` (1-based): assignment, re-seeding of
/// empty clusters, then the centroid update.
struct StopInputs {
  int iteration;
  int maxIterations;
  std::int64_t changed;        ///< labels that differ from the previous iteration's
  std::int64_t emptyClusters;  ///< re-seeding events in this iteration
  bool sameAsTwoAgo;           ///< labels equal those of iteration - 2 (only when iteration >= 3)
  bool detectCycles;
  double centreShift;
  double tolerance;
  int repeatPeriod = 0;  ///< the repeat rule's period when it found one this iteration, else 0
};

/// The stop test, in order: converged (no change and no re-seeding), 2-cycle (if enabled),
/// centre shift < tolerance, repeat (when the rule found one), iteration cap. Returns false while
/// the loop should go on.
KMSEG_HOST_DEVICE inline bool shouldStop(const StopInputs& s, StopReason* reason) {
  if (s.changed == 0 && s.emptyClusters == 0) {
    *reason = StopReason::Converged;
    return true;
  }
  if (s.detectCycles && s.sameAsTwoAgo && s.emptyClusters == 0) {
    *reason = StopReason::Cycle;
    return true;
  }
  if (s.centreShift < s.tolerance) {
    *reason = StopReason::CentreShift;
    return true;
  }
  if (s.repeatPeriod >= 2) {
    *reason = StopReason::Repeat;
    return true;
  }
  if (s.iteration >= s.maxIterations) {
    *reason = StopReason::MaxIterations;
    return true;
  }
  return false;
}

}  // namespace kmseg
