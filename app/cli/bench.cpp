// SPDX-License-Identifier: MIT
// `kmseg bench cpu`: the CPU engine (fp64 and fp32) against OpenCV's cv::kmeans (fp32) on the
// same features, the same threads and the same initial centres, in one run.

#include "bench.h"

#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "kmseg/engine.h"
#include "kmseg/error.h"
#include "kmseg/export.h"
#include "kmseg/features.h"
#include "kmseg/image_io.h"
#include "kmseg/init.h"

namespace kmseg::cli {

namespace {

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

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

}  // namespace

void addBenchOptions(CLI::App& cmd, BenchOptions& o) {
  cmd.add_option("SUITE", o.suite, "cpu: the CPU engine (fp64, fp32) against cv::kmeans")
      ->capture_default_str();
  cmd.add_option("--image", o.image, "Photo to resize for the benchmark")->capture_default_str();
  cmd.add_option("--megapixels", o.megapixels, "Resize the photo to about this many megapixels")
      ->capture_default_str();
  cmd.add_option("-k,--clusters", o.clusters, "Cluster counts to run")->delimiter(',');
  cmd.add_option("--threads", o.threads, "CPU threads for both (0 = all cores)")
      ->capture_default_str();
  cmd.add_option("--repeats", o.repeats, "Repetitions; the median time is reported")
      ->capture_default_str();
  cmd.add_option("--seed", o.seed, "Seed of the initial centres")->capture_default_str();
  cmd.add_option("--json", o.json, "Write the results as JSON to this file");
}

void checkBenchOptions(const BenchOptions& o) {
  if (o.suite != "cpu")
    throw InvalidArgument("unknown benchmark suite '" + o.suite + "'; valid: cpu");
  if (!(o.megapixels > 0.0) || o.megapixels > 200.0)
    throw InvalidArgument("--megapixels must be in (0, 200]");
  if (o.clusters.empty()) throw InvalidArgument("--clusters needs at least one K");
  for (int k : o.clusters)
    if (k < 1 || k > 1024)
      throw InvalidArgument("--clusters: K = " + std::to_string(k) + " is outside [1, 1024]");
  if (o.repeats < 1) throw InvalidArgument("--repeats must be >= 1");
  if (o.threads < 0) throw InvalidArgument("--threads must be >= 0");
}

void runBench(const BenchOptions& o) {
  const int threads = resolveThreadCount(o.threads);
  const Image photo = resizeTo(loadImage(o.image), o.megapixels);
  const Matrix features = makeFeatures(photo);
  std::printf("benchmark: %s resized to %d x %d (%.2f MP), D = %zu, %d threads\n",
              o.image.filename().string().c_str(), photo.width, photo.height,
              double(photo.pixelCount()) / 1e6, features.cols, threads);

  // OpenCV's input: the same features in fp32.
  cv::Mat samples(int(features.rows), int(features.cols), CV_32F);
  for (std::size_t i = 0; i < features.values.size(); ++i)
    samples.ptr<float>()[i] = float(features.values[i]);
  cv::setNumThreads(threads);

  auto engine = makeCpuEngine(threads);
  std::vector<Row> rows;
  nlohmann::json json = {{"suite", o.suite},
                         {"image", o.image.filename().string()},
                         {"width", photo.width},
                         {"height", photo.height},
                         {"threads", threads},
                         {"repeats", o.repeats},
                         {"runs", nlohmann::json::array()}};
  for (int k : o.clusters) {
    const auto idx = chooseInitialCentres(features, k, Init::RandomPoints, o.seed);
    const Matrix init = gatherRows(features, idx);
    int fp64Iterations = 0;
    for (Mode mode : {Mode::Fp64, Mode::Fp32}) {
      KMeansParams p;
      p.k = k;
      p.mode = mode;
      p.threads = threads;
      p.traceSse = false;
      std::vector<double> times;
      KMeansResult r;
      for (int rep = 0; rep < o.repeats; ++rep) {
        r = engine->run(features, init, p);
        times.push_back(r.seconds);
      }
      std::sort(times.begin(), times.end());
      const double t = times[times.size() / 2];
      if (mode == Mode::Fp64) fp64Iterations = r.iterations;
      rows.push_back(
          {"kmseg cpu " + std::string(modeName(mode)), k, r.iterations, t, t / r.iterations});
    }
    // cv::kmeans from the same centres: initial labels = nearest initial centre, then the same
    // number of iterations as the fp64 engine needed (it may stop earlier when it converges).
    cv::Mat labels(int(features.rows), 1, CV_32S);
    {
      const std::size_t d = features.cols;
      for (std::size_t i = 0; i < features.rows; ++i) {
        double best = INFINITY;
        int bj = 0;
        for (int j = 0; j < k; ++j) {
          double s = 0;
          for (std::size_t q = 0; q < d; ++q) {
            const double t = features(i, q) - init(std::size_t(j), q);
            s += t * t;
          }
          if (s < best) best = s, bj = j;
        }
        labels.at<int>(int(i)) = bj;
      }
    }
    std::vector<double> times;
    for (int rep = 0; rep < o.repeats; ++rep) {
      cv::Mat l = labels.clone(), centres;
      const auto t0 = std::chrono::steady_clock::now();
      cv::kmeans(samples, k, l, cv::TermCriteria(cv::TermCriteria::MAX_ITER, fp64Iterations, 0), 1,
                 cv::KMEANS_USE_INITIAL_LABELS, centres);
      times.push_back(secondsSince(t0));
    }
    std::sort(times.begin(), times.end());
    const double t = times[times.size() / 2];
    rows.push_back({"cv::kmeans fp32", k, fp64Iterations, t, t / fp64Iterations});
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
  if (!o.json.empty()) writeFileAtomic(o.json, json.dump(2) + "\n");
}

}  // namespace kmseg::cli
