// SPDX-License-Identifier: MIT
#pragma once

// Host-side arithmetic of the assignment passes' launch shapes (plain C++, no CUDA).

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <string_view>

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

/// The fast pass's accumulator slots per warp, as log2 (at most 32 slots): the most whose shared
/// memory bytes(slots) fits `target`. `preferred` (0: none), a smaller target, replaces it where
/// one slot fits it: the uniform passes leave L1 room so (kFastSharedTargetUniform). Where none
/// fits the target, the most that fit `optin` (one block per SM); -1 when not even one does.
template <class Bytes>
int fastSlotShift(const Bytes& bytes, std::size_t target, std::size_t preferred,
                  std::size_t optin) {
  if (preferred > 0 && bytes(1) <= preferred) target = preferred;
  for (int s = 5; s >= 0; --s)
    if (bytes(1 << s) <= target) return s;
  for (int s = 5; s >= 0; --s)
    if (bytes(1 << s) <= optin) return s;
  return -1;
}

/// The tiled generic pass's grid (D >= 16): blocks that each take `chunk` consecutive points.
struct TiledGrid {
  long long blocks;
  long long chunk;  ///< a multiple of the sub-tile
};

/// One wave: at most `resident` blocks (those the device holds at once) and at most `cap` (the
/// partials' memory), the n points' sub-tiles of `tile` points shared as evenly as whole
/// sub-tiles allow. The chunk is the smallest whole number of sub-tiles that so many blocks
/// cover; blocks = ceil(n / chunk), so that no block is empty.
inline TiledGrid tiledGrid(long long n, long long resident, long long cap, int tile) {
  const long long subTiles = (n + tile - 1) / tile;
  const long long most = std::max(1ll, std::min({resident, cap, subTiles}));
  const long long chunk = std::max(1ll, (subTiles + most - 1) / most) * tile;
  return {(n + chunk - 1) / chunk, chunk};
}

/// Whether the Lloyd loop runs as one persistent kernel (loopFastKernel) rather than the graph's
/// chain of kernels, for a fast pass whose blocks can all be resident (Run::choosePersistent).
/// `knob` is KMSEG_CUDA_PERSISTENT: "0" never, "1" always (for comparisons); otherwise the pass
/// must be short (`tiles` at most `maxRounds` rounds of the `blocks` x `warps` warps) or packed
/// (`packed`: the fp16 / bf16 passes, faster in the persistent loop at every size). A device with
/// a run-time limit for kernels (`execTimeout`: one that drives a display) takes the packed
/// passes' rule only for short passes too: the persistent kernel runs every iteration of a run,
/// so a large photo would run one kernel for seconds, where the chain's kernels each take one
/// step of one iteration.
inline bool persistentLoop(std::string_view knob, bool packed, long long tiles, long long blocks,
                           int warps, long long maxRounds, bool execTimeout) {
  if (knob == "0") return false;
  if (knob == "1") return true;
  return tiles <= maxRounds * blocks * warps || (packed && !execTimeout);
}

/// Whether the fast pass takes its variant for grids of few blocks (kFewMinBlocks, more registers,
/// Run::chooseFastShape): where `fewPerSm` blocks per SM of that variant, on `sms` SMs, hold the
/// grid of `blocks` that the other variant would launch, so that the grid and every result stay
/// the same. `knob` is KMSEG_CUDA_FEW: "0" keeps the other variant (for comparisons); any other
/// value leaves the choice to the rule.
inline bool fewBlocksVariant(std::string_view knob, long long blocks, int fewPerSm, int sms) {
  return knob != "0" && fewPerSm > 0 && blocks <= (long long)fewPerSm * sms;
}

}  // namespace kmseg::cuda
