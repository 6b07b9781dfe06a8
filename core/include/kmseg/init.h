// SPDX-License-Identifier: MIT
#pragma once

#include <cstdint>
#include <vector>

#include "kmseg/kmeans.h"
#include "kmseg/matrix.h"

namespace kmseg {

/// Chooses K initial centres among the rows of `data` and returns their row indices.
/// RandomPoints: K rows with pairwise distinct values, drawn uniformly without replacement
/// (visiting a seeded random permutation, so it ends even when there are fewer distinct rows).
/// KMeansPlusPlus: D^2 seeding in fp64, skipping rows equal to a chosen one.
/// The random stream is SplitMix64 from `seed`, mapped to ranges without bias, so the choice
/// is the same on every platform and for every thread count.
/// Throws InvalidArgument when k < 1 or k > rows, DataError when `data` has fewer than k
/// distinct rows (the message gives the count found).
std::vector<std::int64_t> chooseInitialCentres(const Matrix& data, int k, Init init,
                                               std::uint64_t seed);

/// The rows of `data` at `indices`, as a K x D matrix.
Matrix gatherRows(const Matrix& data, const std::vector<std::int64_t>& indices);

}  // namespace kmseg
