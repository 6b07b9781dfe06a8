// SPDX-License-Identifier: MIT
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

namespace kmseg {

/// Counts n_ij of samples with label i in `a` and label j in `b`; row-major rows() x cols().
struct Contingency {
  int rowsA = 0;
  int colsB = 0;
  std::vector<std::int64_t> counts;
  std::int64_t operator()(int i, int j) const { return counts[std::size_t(i) * colsB + j]; }
};

/// Builds the contingency table of two labelings of the same samples. Labels must lie in
/// [0, ka) and [0, kb); throws InvalidArgument on a size mismatch or an out-of-range label.
Contingency contingency(const std::vector<std::int32_t>& a, int ka,
                        const std::vector<std::int32_t>& b, int kb);

/// Optimal one-to-one assignment maximising the total weight of an n x n matrix (row-major),
/// Hungarian algorithm, O(n^3). Returns assignment[row] = column. Throws Cancelled when `cancel`
/// is set (checked once per row: at n = 8192, tens of milliseconds apart).
std::vector<int> maxWeightAssignment(const std::vector<std::int64_t>& weights, int n,
                                     const std::atomic<bool>* cancel = nullptr);

/// Mutual information (natural logarithm) of the two labelings behind `c`, as scikit-learn's
/// mutual_info_score: empty clusters are ignored, and it is 0 when either labeling has a single
/// non-empty cluster. Throws InvalidArgument when `c` is malformed.
double mutualInformation(const Contingency& c);
/// Expected mutual information of two labelings drawn at random with the cluster sizes of `c`
/// (hypergeometric model), as scikit-learn's expected_mutual_information; 0 when either labeling
/// has a single non-empty cluster. Each hypergeometric sum is walked outwards from its mode by
/// the exact term ratio and stops where the terms become negligible (relative 1e-20). Throws
/// Cancelled when `cancel` is set.
double expectedMutualInformation(const Contingency& c, const std::atomic<bool>* cancel = nullptr);

/// Adjusted Rand index of the two labelings behind `c`.
double adjustedRandIndex(const Contingency& c);
/// Adjusted mutual information with arithmetic-mean normalisation (scikit-learn's default).
/// Degenerate cases as scikit-learn: 1 when neither labeling splits the data (or it is empty), 0
/// when exactly one does. The expected mutual information is summed over its non-negligible
/// terms only (see expectedMutualInformation), so that it stays fast at tens of megapixels.
/// Throws Cancelled when `cancel` is set.
double adjustedMutualInformation(const Contingency& c, const std::atomic<bool>* cancel = nullptr);

/// A candidate labeling compared with the fp64 reference labeling of the same pixels.
struct Comparison {
  /// mapping[candidate label] = reference label, the optimal one-to-one alignment.
  std::vector<int> mapping;
  double diffPercent = 0.0;  ///< % of samples whose aligned label differs from the reference
  std::int64_t differing = 0;
  /// Per reference cluster: % of its samples whose aligned candidate label differs.
  std::vector<double> clusterDiffPercent;
  std::vector<std::int64_t> clusterSize;  ///< samples per reference cluster
  double ari = 0.0;
  double ami = 0.0;
  double sseRatio = 1.0;  ///< candidate SSE / reference SSE (1 when both are 0)
  /// One byte per sample: 1 where the aligned label differs from the reference, else 0.
  std::vector<std::uint8_t> mask;
};

/// Largest K that compareLabelings accepts: its K x K contingency table is limited to 2^26 cells
/// (512 MiB of counts).
inline constexpr int kMaxComparedClusters = 8192;

/// Compares `candidate` with `reference` (both with labels in [0, k)). Throws InvalidArgument for
/// k above kMaxComparedClusters, and Cancelled when `cancel` is set during the matching or the
/// AMI (the steps that grow with K: at K = 8192 they take seconds).
Comparison compareLabelings(const std::vector<std::int32_t>& reference,
                            const std::vector<std::int32_t>& candidate, int k, double referenceSse,
                            double candidateSse, const std::atomic<bool>* cancel = nullptr);

}  // namespace kmseg
