// SPDX-License-Identifier: MIT
#pragma once

// Host-side arithmetic of the fast assignment pass's launch shape (plain C++, no CUDA).

#include <algorithm>
#include <numeric>

namespace kmseg::cuda {

/// The fast pass's block count, moved down from `blocks` (by at most `warps` blocks) when the
/// blocks would keep their image columns. In round r, block b takes the `warps` consecutive
/// tiles from warps (b + r blocks), which move by warps blocks mod cols tile columns per round
/// (cols tiles per band). When that drift is 0, every block takes the same columns in every
/// round, and the blocks of the photo's detailed columns take all their work and finish last: on
/// the H200 at 14 MP (264 tile columns, 264, 528 or 792 blocks) an iteration took 1.1 to 1.8 times
/// as long as with one block fewer (fp32 0.195 against 0.142 ms, fp64 0.363 against 0.205). The
/// count returned is then the largest one below whose blocks visit cols / gcd(drift, cols) column
/// positions, at least as many as their rounds or as cover a band (cols / warps); else the
/// largest with a drift; else `blocks`. A nonzero drift is left alone (measured only at 0).
inline long long spreadBlocks(long long blocks, long long tiles, long long cols, int warps) {
  auto positions = [&](long long b) {
    const long long drift = warps * b % cols;
    return drift == 0 ? 1 : cols / std::gcd(drift, cols);
  };
  if (blocks <= 1 || cols <= 1 || tiles <= 0 || positions(blocks) > 1) return blocks;
  const long long groups = (tiles + warps - 1) / warps;
  long long moving = blocks;  // the largest count below with a drift
  for (long long b = blocks - 1; b >= std::max(1ll, blocks - warps); --b) {
    if (positions(b) == 1) continue;
    if (moving == blocks) moving = b;
    const long long rounds = (groups + b - 1) / b;
    if (positions(b) >= std::min(rounds, std::max(1ll, cols / warps))) return b;
  }
  return moving;
}

}  // namespace kmseg::cuda
