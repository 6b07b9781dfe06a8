// SPDX-License-Identifier: MIT
// `kmseg bench cpu`: the CPU engine (fp64 and fp32) against OpenCV's cv::kmeans (fp32) on the
// same features, the same threads and the same initial centres, in one run.

#include "bench.h"
#include "commands.h"
#include "number_options.h"

#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <thread>

#include "kmseg/engine.h"
#include "kmseg/error.h"
#include "kmseg/export.h"
#include "kmseg/features.h"
#include "kmseg/image_io.h"
#include "kmseg/init.h"
#if defined(KMSEG_HAVE_CUDA)
#include "kmseg/cuda_engine.h"
#endif

namespace kmseg::cli {

namespace {

/// Largest K of a benchmark run.
constexpr int kMaxBenchClusters = 1024;

// Resizes an 8-bit image to about `megapixels`, keeping its aspect ratio (bilinear).
Image resizeTo(const Image& in, double megapixels) {
  const double scale = std::sqrt(megapixels * 1e6 / double(in.pixelCount()));
  const int w = std::max(1, int(std::lround(in.width * scale)));
  const int h = std::max(1, int(std::lround(in.height * scale)));
  cv::Mat src(in.height, in.width, CV_8UC3, const_cast<std::uint8_t*>(in.rgb8.data()));
  cv::Mat dst;
  cv::resize(src, dst, cv::Size(w, h), 0, 0, cv::INTER_LINEAR);
  Image out;
  out.width = w;
  out.height = h;
  out.rgb8.assign(dst.datastart, dst.dataend);
  return out;
}

struct Row {
  std::string what;
  int k;
  int iterations;
  double seconds;
  double perIteration;
};

#if defined(KMSEG_HAVE_CUDA)
// `kmseg bench gpu`: every mode on the CUDA engine, device time from CUDA events (median of
// --repeats after a warm-up), per iteration over a fixed 20-iteration loop and per full run to
// convergence; bytes and flops per iteration, the ratio to the bandwidth floor (device copy
// bandwidth measured in the same run) and the device memory against the minimal footprint.
void runGpuBench(const BenchOptions& o, const Image& photo, const Matrix& features) {
  const double bandwidth = measureCudaCopyBandwidth();
  const auto devices = cudaDevices();
  std::printf("device: %s, copy bandwidth %.0f GB/s (read + write)\n",
              devices.empty() ? "?" : devices.front().name.c_str(), bandwidth / 1e9);
  nlohmann::json json = {{"suite", o.suite},
                         {"image", o.image.filename().string()},
                         {"width", photo.width},
                         {"height", photo.height},
                         {"device", devices.empty() ? "" : devices.front().name},
                         {"copy_bandwidth_bytes_per_s", bandwidth},
                         {"repeats", o.repeats},
                         {"repeat_stop", o.repeatStop},
                         {"full_scan", o.fullScan},
                         {"runs", nlohmann::json::array()}};
  std::printf("%-10s %5s %9s %9s %7s %9s %9s %6s %-13s %10s %6s %8s\n", "mode", "K", "ms/iter",
              "floor ms", "x floor", "GFLOP/s", "full ms", "iter", "stop", "dev MB", "x min",
              "blocks");
  const std::vector<Mode> modes = benchModes(o);
  for (int k : benchClusters(o)) {
    const Matrix init =
        gatherRows(features, chooseInitialCentres(features, k, Init::RandomPoints, o.seed));
    for (Mode mode : modes) {
      KMeansParams fixed;
      fixed.k = k;
      fixed.mode = mode;
      fixed.traceSse = false;
      fixed.imageWidth = photo.width;
      fixed.maxIterations = 20;
      fixed.tolerance = 0;
      fixed.detectCycles = false;
      fixed.useBounds = !o.fullScan;
      const CudaTiming it = timeCudaRun(features, init, fixed, o.repeats);
      KMeansParams full = fixed;
      full.maxIterations = 300;
      full.tolerance = 1e-8;
      full.detectCycles = true;
      full.detectRepeats = o.repeatStop;
      const CudaTiming run = timeCudaRun(features, init, full, o.repeats);
      const double floorMs = 1e3 * it.bytesPerIteration / bandwidth;
      const double gflops = it.flopsPerIteration / (1e6 * it.msPerIteration);
      const double memRatio = double(it.deviceBytes) / double(it.minimalBytes);
      // The pass's grid, the blocks per SM of its variant ("-": the generic pass), and "p" when
      // one persistent kernel ran the iterations.
      const std::string blocks =
          std::to_string(it.passBlocks) + "/" +
          (it.passBlocksPerSm > 0 ? std::to_string(it.passBlocksPerSm) : std::string("-")) +
          (it.persistentLoop ? " p" : "");
      const std::string stop = stopReasonText(run.stopReason, run.cyclePeriod);
      std::printf("%-10s %5d %9.4f %9.4f %7.2f %9.0f %9.3f %6d %-13s %10.1f %6.2f %8s\n",
                  std::string(modeName(mode)).c_str(), k, it.msPerIteration, floorMs,
                  it.msPerIteration / floorMs, gflops, run.msFullRun, run.iterations, stop.c_str(),
                  double(it.deviceBytes) / 1e6, memRatio, blocks.c_str());
      json["runs"].push_back({{"mode", modeName(mode)},
                              {"k", k},
                              {"ms_per_iteration", it.msPerIteration},
                              {"iterations_timed", it.iterations},
                              {"bytes_per_iteration", it.bytesPerIteration},
                              {"flops_per_iteration", it.flopsPerIteration},
                              {"floor_ms_per_iteration", floorMs},
                              {"ratio_to_floor", it.msPerIteration / floorMs},
                              {"ms_full_run", run.msFullRun},
                              {"iterations_full_run", run.iterations},
                              {"stop_reason_full_run", stop},
                              {"cycle_period_full_run", run.cyclePeriod},
                              {"pass_blocks", it.passBlocks},
                              {"pass_blocks_per_sm", it.passBlocksPerSm},
                              {"pass_slots", it.passSlots},
                              {"persistent_loop", it.persistentLoop},
                              {"device_bytes", it.deviceBytes},
                              {"minimal_bytes", it.minimalBytes},
                              {"device_bytes_over_minimal", memRatio}});
    }
  }
  writeBenchJson(o.json, json);
}
#endif

}  // namespace

void writeBenchJson(const std::filesystem::path& path, const nlohmann::json& json) {
  if (path.empty()) return;
  writeFileAtomic(path, json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

std::vector<int> benchClusters(const BenchOptions& o) {
  if (!o.clusters.empty()) return o.clusters;
  if (o.suite == "blobs") return {100};
  return {8, 32};
}

std::vector<Mode> benchModes(const BenchOptions& o) {
  if (o.modes.empty()) return {kAllModes.begin(), kAllModes.end()};
  return parseModeList(o.modes);
}

void addBenchOptions(CLI::App& cmd, BenchOptions& o) {
  cmd.add_option("SUITE", o.suite,
                 "cpu: the CPU engine (fp64, fp32) against cv::kmeans; gpu: every mode on the CUDA "
                 "engine; distances: each mode's distance errors, fallbacks and time on random and "
                 "near points (paper 6.1); blobs: every mode on Gaussian blobs (paper 6.2.1)")
      ->capture_default_str();
  cmd.add_option("--image", o.image, "Photo to resize for the benchmark")->capture_default_str();
  cmd.add_option("--megapixels", o.megapixels, "Resize the photo to about this many megapixels")
      ->capture_default_str()
      ->transform(realNumber());
  // Integers in plain decimal (wholeNumberIn); the ranges that name a suite's limits are
  // checked by checkBenchOptions.
  constexpr int kIntMin = std::numeric_limits<int>::min(),
                kIntMax = std::numeric_limits<int>::max();
  constexpr auto kSizeMax = std::numeric_limits<std::size_t>::max();
  cmd.add_option("-k,--clusters", o.clusters, "Cluster counts to run (default 8,32; blobs 100)")
      ->delimiter(',')
      ->transform(
          wholeNumberIn(kIntMin, kIntMax, "K is from 1 to " + std::to_string(kMaxBenchClusters)));
  cmd.add_option("--threads", o.threads, "CPU threads for both (0 = all cores)")
      ->transform(wholeNumberIn(kIntMin, kIntMax))
      ->capture_default_str();
  cmd.add_option("--repeats", o.repeats, "Repetitions; the median time is reported")
      ->transform(wholeNumberIn(kIntMin, kIntMax,
                                "the repetitions are from 1 to " + std::to_string(kIntMax)))
      ->capture_default_str();
  cmd.add_option("--seed", o.seed, "Seed of the initial centres")
      ->transform(wholeNumberIn<std::uint64_t>(0, std::numeric_limits<std::uint64_t>::max()))
      ->capture_default_str();
  cmd.add_option("--modes", o.modes,
                 "gpu, distances, blobs: the modes to run, e.g. fp32,fp16>fp32 (all)")
      ->delimiter(',');
  // 0 stands for "the suite's default" inside; typed, it is refused.
  const CLI::Validator atLeastOne(
      [](std::string& value) -> std::string {
        return value.find_first_not_of('0') == std::string::npos
                   ? "must be at least 1 (leave it out for the suite's default)"
                   : std::string();
      },
      ">= 1");
  cmd.add_option("--dim", o.dim, "distances, blobs: features per row (default 128; blobs 10)")
      ->transform(wholeNumberIn<std::size_t>(0, kSizeMax))
      ->check(atLeastOne);
  cmd.add_option("--points", o.points,
                 "distances: rows of P and of C (default 1000); blobs: samples (default 100000)")
      ->transform(wholeNumberIn<std::size_t>(0, kSizeMax))
      ->check(atLeastOne);
  cmd.add_option("--noise", o.noise, "distances: near points are C = P + noise N(0, I)")
      ->capture_default_str()
      ->transform(realNumber());
  cmd.add_option("--near-fraction", o.nearFraction,
                 "distances: share of near points in the mixed set")
      ->capture_default_str()
      ->transform(realNumber());
  cmd.add_option("--rho", o.rho, "distances, blobs: safety factor of the reliability test (> 2)")
      ->capture_default_str()
      ->transform(realNumber());
  cmd.add_option("--backend", o.backend, "distances, blobs: auto, cuda or cpu")
      ->capture_default_str();
  cmd.add_flag("--repeat-stop", o.repeatStop,
               "gpu: the full runs also stop when the centres repeat (segment's --repeat-stop)");
  cmd.add_flag("--full-scan", o.fullScan,
               "cpu, gpu: every point against every centre in every iteration (the engines' "
               "pruning off; same results, for comparing the arithmetic at equal work)");
  cmd.add_option("--json", o.json,
                 "Write the results as JSON to this file (its directory is created if needed; "
                 "checked before the benchmark runs)")
      ->check(CLI::Validator(
          [](std::string& text) {
            return text.empty() ? std::string("the file name is empty: name a file")
                                : std::string();
          },
          std::string()));
}

void checkBenchOptions(const BenchOptions& o) {
  if (o.suite == "gpu") {
#if !defined(KMSEG_HAVE_CUDA)
    throw InvalidArgument("benchmark suite 'gpu' needs a build with the CUDA engine");
#endif
  } else if (o.suite != "cpu" && o.suite != "distances" && o.suite != "blobs") {
    throw InvalidArgument("unknown benchmark suite '" + o.suite +
                          "'; valid: cpu, gpu, distances, blobs");
  }
  // An option the suite does not read would be ignored without a word: `bench cpu --backend
  // cuda` would time the CPU.
  for (const std::string& name : o.given)
    for (const BenchOptionSuites& a : kBenchOptionSuites) {
      if (name != a.option) continue;
      const std::string suites = std::string(" ") + a.suites + " ";
      if (suites.find(" " + o.suite + " ") == std::string::npos) {
        std::string list;
        for (const char* c = a.suites; *c; ++c)
          list += *c == ' ' ? std::string(", ") : std::string(1, *c);
        throw InvalidArgument(name + " does not apply to the " + o.suite +
                              " suite (it applies to: " + list + ")");
      }
    }
  if (!(o.megapixels > 0.0) || o.megapixels > 200.0)
    throw InvalidArgument("--megapixels must be in (0, 200]");
  for (int k : benchClusters(o))
    if (k < 1 || k > kMaxBenchClusters)
      throw InvalidArgument("--clusters: K = " + std::to_string(k) + " is outside [1, " +
                            std::to_string(kMaxBenchClusters) + "]");
  if (o.dim > kMaxBenchDim)
    throw InvalidArgument("--dim " + std::to_string(o.dim) + " is outside [1, " +
                          std::to_string(kMaxBenchDim) + "]");
  if (o.suite == "distances" && o.points > kMaxDistancePoints)
    throw InvalidArgument("--points " + std::to_string(o.points) + " is outside [1, " +
                          std::to_string(kMaxDistancePoints) + "] for the distances suite");
  if (o.suite == "blobs") {
    const std::size_t n = o.points ? o.points : 100000, d = o.dim ? o.dim : 10;
    for (int k : benchClusters(o))
      if (std::size_t(k) > n)
        throw InvalidArgument("--clusters: K = " + std::to_string(k) + " exceeds the " +
                              std::to_string(n) + " samples of the blobs (--points)");
    if (n > kMaxBlobValues / d)
      throw InvalidArgument("--points " + std::to_string(n) + " x --dim " + std::to_string(d) +
                            " exceeds the blobs suite's " + std::to_string(kMaxBlobValues) +
                            " feature values (2 GiB in fp64)");
  }
  // C = P + noise N(0, I) with P in [0, 1): up to 1e300 C stays far from double's overflow.
  if (!(o.noise >= 0.0) || !(o.noise <= kMaxBenchNoise))
    throw InvalidArgument("--noise " + numberText(o.noise) + " is outside [0, 1e300] (larger " +
                          "values overflow C = P + noise N(0, I))");
  if (!(o.nearFraction >= 0.0 && o.nearFraction <= 1.0))
    throw InvalidArgument("--near-fraction must be in [0, 1]");
  if (!(o.rho > 2.0) || !std::isfinite(o.rho))
    throw InvalidArgument("--rho must be > 2 and finite");
  (void)parseBackend(o.backend);
  if (o.repeats < 1) throw InvalidArgument("--repeats must be >= 1");
  (void)parseModeList(o.modes);
  if (o.threads < 0 || o.threads > kMaxThreads)
    throw InvalidArgument("--threads " + std::to_string(o.threads) + " is outside [0, " +
                          std::to_string(kMaxThreads) + "] (0 = all cores)");
}

void runBench(const BenchOptions& o) {
  // Fail on an unwritable --json path before the benchmark, as segment and compare do for -o.
  // Its directory goes again if the benchmark ends without writing the file.
  CreatedDirectories created(o.json.empty() ? std::vector<std::filesystem::path>()
                                            : prepareOutputDirectory(o.json.parent_path()));
  if (!o.json.empty()) checkOutputFile(o.json);
  // The paper's suites need no photo.
  if (o.suite == "distances") {
    runDistanceBench(o);
    return;
  }
  if (o.suite == "blobs") {
    runBlobBench(o);
    return;
  }
  // The default photo is a path in the repository: say so rather than "does not exist".
  if (o.image == BenchOptions{}.image && !std::filesystem::exists(o.image))
    throw InvalidArgument("--image: the default photo '" + o.image.string() +
                          "' is not under the current directory (it is the repository's "
                          "samples/ folder); run from the repository's root or pass --image PATH");
  const int threads = resolveThreadCount(o.threads);
  const Image photo = resizeTo(loadImage(o.image), o.megapixels);
  const Matrix features = makeFeatures(photo);
  std::printf("benchmark: %s resized to %d x %d (%.2f MP), D = %zu, %d threads%s\n",
              o.image.filename().string().c_str(), photo.width, photo.height,
              double(photo.pixelCount()) / 1e6, features.cols, threads,
              o.fullScan ? ", no pruning (--full-scan)" : "");
#if defined(KMSEG_HAVE_CUDA)
  if (o.suite == "gpu") {
    runGpuBench(o, photo, features);
    return;
  }
#endif

  // OpenCV's input: the same features in fp32.
  cv::Mat samples(int(features.rows), int(features.cols), CV_32F);
  for (std::size_t i = 0; i < features.values.size(); ++i)
    samples.ptr<float>()[i] = float(features.values[i]);
  cv::setNumThreads(threads);

  auto engine = makeCpuEngine(threads);
  std::vector<Row> rows;
  nlohmann::json json = {{"suite", o.suite},        {"image", o.image.filename().string()},
                         {"width", photo.width},    {"height", photo.height},
                         {"threads", threads},      {"repeats", o.repeats},
                         {"full_scan", o.fullScan}, {"runs", nlohmann::json::array()}};
  for (int k : benchClusters(o)) {
    const auto idx = chooseInitialCentres(features, k, Init::RandomPoints, o.seed);
    const Matrix init = gatherRows(features, idx);
    // cv::kmeans from the same centres: initial labels = nearest initial centre; it then runs
    // as many iterations as the fp64 engine needed (it may stop earlier when it converges).
    cv::Mat labels(int(features.rows), 1, CV_32S);
    for (std::size_t i = 0; i < features.rows; ++i) {
      double best = INFINITY;
      int bj = 0;
      for (int j = 0; j < k; ++j) {
        double s = 0;
        for (std::size_t q = 0; q < features.cols; ++q) {
          const double t = features(i, q) - init(std::size_t(j), q);
          s += t * t;
        }
        if (s < best) best = s, bj = j;
      }
      labels.at<int>(int(i)) = bj;
    }
    // The three contenders run in turn within each repetition, so a slow phase of the machine
    // hits all of them; each reports its median.
    const Mode modes[] = {Mode::Fp64, Mode::Fp32};
    std::vector<double> times[3];
    int iterations[3] = {0, 0, 0};
    for (int rep = 0; rep < o.repeats; ++rep) {
      for (int m = 0; m < 2; ++m) {
        KMeansParams p;
        p.k = k;
        p.mode = modes[m];
        p.threads = threads;
        p.traceSse = false;
        p.useBounds = !o.fullScan;
        // End to end, as cv::kmeans is timed: conversion to the working precision included.
        const auto t0 = std::chrono::steady_clock::now();
        const KMeansResult r = engine->run(features, init, p);
        times[m].push_back(secondsSince(t0));
        iterations[m] = r.iterations;
      }
      iterations[2] = iterations[0];
      cv::Mat l = labels.clone(), centres;
      const auto t0 = std::chrono::steady_clock::now();
      cv::kmeans(samples, k, l, cv::TermCriteria(cv::TermCriteria::MAX_ITER, iterations[0], 0), 1,
                 cv::KMEANS_USE_INITIAL_LABELS, centres);
      times[2].push_back(secondsSince(t0));
    }
    const char* names[] = {"kmseg cpu fp64", "kmseg cpu fp32", "cv::kmeans fp32"};
    for (int m = 0; m < 3; ++m) {
      const double t = medianOf(times[m]);
      rows.push_back({names[m], k, iterations[m], t, t / iterations[m]});
    }
  }

  std::printf("%-18s %5s %6s %10s %12s %10s\n", "engine", "K", "iter", "time [s]", "per iter [ms]",
              "vs cv");
  for (const Row& r : rows) {
    double cv = 0;
    for (const Row& c : rows)
      if (c.k == r.k && c.what == "cv::kmeans fp32") cv = c.seconds;
    std::printf("%-18s %5d %6d %10.3f %12.2f %9.2fx\n", r.what.c_str(), r.k, r.iterations,
                r.seconds, 1e3 * r.perIteration, cv / r.seconds);
    json["runs"].push_back({{"engine", r.what},
                            {"k", r.k},
                            {"iterations", r.iterations},
                            {"seconds", r.seconds},
                            {"ms_per_iteration", 1e3 * r.perIteration},
                            {"speedup_vs_cv_kmeans", cv / r.seconds}});
  }
  writeBenchJson(o.json, json);
}

}  // namespace kmseg::cli
