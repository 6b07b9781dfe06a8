// SPDX-License-Identifier: MIT
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json_fwd.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "kmseg/median.h"
#include "kmseg/mode.h"

namespace kmseg::cli {

/// Options of `kmseg bench`.
struct BenchOptions {
  std::string suite = "cpu";  ///< "cpu": CPU engine against cv::kmeans
  std::filesystem::path image = "samples/european-honey-bee.jpg";
  double megapixels = 12.0;   ///< the photo is resized to about this size
  std::vector<int> clusters;  ///< empty: the suite's default (8 and 32; blobs 100)
  int threads = 0;
  int repeats = 1;
  std::uint64_t seed = 1;
  std::vector<std::string> modes;  ///< gpu suite: the modes to run (empty: every mode)
  std::filesystem::path json;      ///< write the results here when set
  // The paper's experiments (suites distances and blobs).
  std::size_t dim = 0;           ///< features per row (0: 128 for distances, 10 for blobs)
  std::size_t points = 0;        ///< rows of P and of C (0: 1000), or blob samples (0: 100000)
  double noise = 1e-6;           ///< near points: C = P + noise N(0, I)
  double nearFraction = 0.1;     ///< distances: share of near points in the mixed set
  double rho = 5.0;              ///< reliability safety factor of the mixed modes
  std::string backend = "auto";  ///< distances, blobs: the engine
  bool repeatStop = false;       ///< gpu: full runs also stop on repeating centres
  bool fullScan = false;         ///< cpu, gpu: the engines' pruning off (KMeansParams::useBounds)
  /// The options of kBenchOptionSuites given on the command line (checkBenchOptions refuses
  /// those that do not apply to the suite).
  std::vector<std::string> given;
};

/// Options that apply to some suites only, with those suites (space-separated). The others
/// (--threads, --repeats, --seed, --json) apply to every suite.
struct BenchOptionSuites {
  const char* option;
  const char* suites;
};
inline constexpr BenchOptionSuites kBenchOptionSuites[] = {
    {"--image", "cpu gpu"},          {"--megapixels", "cpu gpu"},
    {"--clusters", "cpu gpu blobs"}, {"--modes", "gpu distances blobs"},
    {"--dim", "distances blobs"},    {"--points", "distances blobs"},
    {"--noise", "distances"},        {"--near-fraction", "distances"},
    {"--rho", "distances blobs"},    {"--backend", "distances blobs"},
    {"--repeat-stop", "gpu"},        {"--full-scan", "cpu gpu"}};

/// Writes `json` to `path` (atomically, indented) unless `path` is empty. Invalid UTF-8 in its
/// strings (the bytes of a file name) becomes U+FFFD, as in the reports of segment and compare.
void writeBenchJson(const std::filesystem::path& path, const nlohmann::json& json);

/// The cluster counts a suite runs: --clusters, or its default.
std::vector<int> benchClusters(const BenchOptions& o);
/// The modes a suite runs: --modes, or all nine.
std::vector<Mode> benchModes(const BenchOptions& o);

/// Limits of the paper's suites: --dim up to the CUDA engine's D; distances --points up to
/// 2^16 (2^32 pairs per set); blobs up to 2^28 feature values (2 GiB in fp64).
inline constexpr std::size_t kMaxBenchDim = 128;
/// --noise of the distances suite: C = P + noise N(0, I) stays finite (normal deviates stay far
/// below 1e8) and far from overflow.
inline constexpr double kMaxBenchNoise = 1e300;
inline constexpr std::size_t kMaxDistancePoints = std::size_t(1) << 16;
inline constexpr std::size_t kMaxBlobValues = std::size_t(1) << 28;

void addBenchOptions(CLI::App& cmd, BenchOptions& o);
/// Throws kmseg::InvalidArgument for out-of-range options.
void checkBenchOptions(const BenchOptions& o);
/// Runs the suite, prints a table and writes JSON when asked.
void runBench(const BenchOptions& o);
/// `kmseg bench distances` (bench_paper.cpp), called by runBench after its checks.
void runDistanceBench(const BenchOptions& o);
/// `kmseg bench blobs` (bench_paper.cpp), called by runBench after its checks.
void runBlobBench(const BenchOptions& o);

}  // namespace kmseg::cli
