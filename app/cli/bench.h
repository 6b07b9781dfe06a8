// SPDX-License-Identifier: MIT
#pragma once

#include <CLI/CLI.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace kmseg::cli {

/// Options of `kmseg bench`.
struct BenchOptions {
  std::string suite = "cpu";  ///< "cpu": CPU engine against cv::kmeans
  std::filesystem::path image = "samples/european-honey-bee.jpg";
  double megapixels = 12.0;  ///< the photo is resized to about this size
  std::vector<int> clusters{8, 32};
  int threads = 0;
  int repeats = 1;
  std::uint64_t seed = 1;
  std::vector<std::string> modes;  ///< gpu suite: the modes to run (empty: every mode)
  std::filesystem::path json;      ///< write the results here when set
};

void addBenchOptions(CLI::App& cmd, BenchOptions& o);
/// Throws kmseg::InvalidArgument for out-of-range options.
void checkBenchOptions(const BenchOptions& o);
/// Runs the suite, prints a table and writes JSON when asked.
void runBench(const BenchOptions& o);

}  // namespace kmseg::cli
