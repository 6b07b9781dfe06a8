// SPDX-License-Identifier: MIT
// The paper's experiments: `kmseg bench distances` (section 6.1: the errors and fallbacks of
// each mode's pairwise distances on random, near and mixed point sets) and `kmseg bench blobs`
// (section 6.2.1: every mode on Gaussian blobs, against the fp64 reference).

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench.h"
#include "commands.h"
#include "kmseg/engine.h"
#include "kmseg/error.h"
#include "kmseg/experiments.h"
#include "kmseg/kmeans.h"
#if defined(KMSEG_HAVE_CUDA)
#include "kmseg/cuda_engine.h"
#endif

namespace kmseg::cli {

namespace {

nlohmann::json accuracyJson(const DistanceAccuracy& a) {
  auto number = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
  return {{"pairs", a.pairs},
          {"near_pairs", a.nearPairs},
          {"fallbacks", a.fallbacks},
          {"fallback_ratio", a.fallbackRatio()},
          {"max_rel_error", number(a.maxRelError)},
          {"max_rel_error_near", number(a.maxRelErrorNear)},
          {"max_rel_error_far", number(a.maxRelErrorFar)},
          {"seconds", a.seconds}};
}

}  // namespace

void runDistanceBench(const BenchOptions& o) {
  const std::size_t d = o.dim ? o.dim : 128, n = o.points ? o.points : 1000;
  const std::vector<Mode> modes = benchModes(o);
  // P and the random C: independent N(0, 1) entries. Near: C = P + noise N(0, I). Mixed: the
  // first near-fraction of the rows near, the others those of the random C.
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Matrix p(n, d), random(n, d), near(n, d);
  for (double& v : p.values) v = normal(rng);
  for (double& v : random.values) v = normal(rng);
  for (std::size_t e = 0; e < near.values.size(); ++e)
    near.values[e] = p.values[e] + o.noise * normal(rng);
  const std::size_t nearRows = std::size_t(std::llround(o.nearFraction * double(n)));
  Matrix mixed = random;
  std::copy(near.values.begin(), near.values.begin() + std::ptrdiff_t(nearRows * d),
            mixed.values.begin());

  // Where the pairs are evaluated: the engine choice's rules (a device that answers, unless
  // --backend cpu); the CUDA kernel is then timed on the device, the CPU's emulation by the clock.
#if defined(KMSEG_HAVE_CUDA)
  registerCudaEngine();
#endif
  const EngineChoice choice = makeEngine(parseBackend(o.backend), o.threads, {1, d});
  const bool onDevice = choice.backend == Backend::Cuda;
  auto measure = [&](Mode mode, Precision w, const Matrix& c) {
#if defined(KMSEG_HAVE_CUDA)
    if (onDevice) return cudaMeasureDistances(mode, o.rho, w, p, c, 1e-3, o.threads, o.repeats);
#endif
    return measureDistances(mode, o.rho, w, p, c, 1e-3, o.threads);
  };
  std::printf(
      "distances: P and C of %zu x %zu, N(0, 1) entries, %zu pairs per set; near: C = P + %.0e "
      "N(0, I); mixed: %zu of the %zu rows near; rho = %g; error against the exact distance of "
      "the working-precision rows\n",
      n, d, n * n, o.noise, nearRows, n, o.rho);
  const std::string timeNote =
      onDevice ? "median device time of " + std::to_string(o.repeats) +
                     " evaluation(s) of the distance kernels (norms included)"
               : std::string("wall time of the CPU's emulated arithmetic (not the hardware's)");
  std::printf("evaluated on %s%s%s; ms: %s\n", choice.engine->description().c_str(),
              choice.note.empty() ? "" : ": ", choice.note.c_str(), timeNote.c_str());
  std::printf("%-10s %4s | %-31s | %-31s | %-42s\n", "", "", "random", "near", "mixed");
  std::printf("%-10s %4s | %11s %9s %9s | %11s %9s %9s | %10s %10s %9s %9s\n", "mode", "W",
              "max rel err", "fallback%", "ms", "max rel err", "fallback%", "ms", "near err",
              "far err", "fallback%", "ms");
  nlohmann::json json = {{"suite", "distances"},
                         {"points", n},
                         {"dim", d},
                         {"noise", o.noise},
                         {"near_rows", nearRows},
                         {"rho", o.rho},
                         {"seed", o.seed},
                         {"backend", choice.engine->description()},
                         {"repeats", onDevice ? o.repeats : 1},
                         {"results", nlohmann::json::array()}};
  for (Mode mode : modes) {
    const Precision w = resolveWorking(mode, Working::Auto);
    const DistanceAccuracy r = measure(mode, w, random);
    const DistanceAccuracy a = measure(mode, w, near);
    const DistanceAccuracy m = measure(mode, w, mixed);
    const std::string name(modeName(mode));
    const std::string wName(precisionName(w));
    std::printf("%-10s %4s | %11.2e %9.3f %9.3f | %11.2e %9.3f %9.3f | %10.2e %10.2e %9.3f %9.3f\n",
                name.c_str(), wName.c_str(), r.maxRelError, 100.0 * r.fallbackRatio(),
                1e3 * r.seconds, a.maxRelError, 100.0 * a.fallbackRatio(), 1e3 * a.seconds,
                m.maxRelErrorNear, m.maxRelErrorFar, 100.0 * m.fallbackRatio(), 1e3 * m.seconds);
    json["results"].push_back({{"mode", name},
                               {"working_precision", wName},
                               {"random", accuracyJson(r)},
                               {"near", accuracyJson(a)},
                               {"mixed", accuracyJson(m)}});
  }
  std::printf("near err / far err: pairs whose exact squared distance is below / at least 1e-3\n");
  writeBenchJson(o.json, json);
}

void runBlobBench(const BenchOptions& o) {
  const std::size_t d = o.dim ? o.dim : 10, n = o.points ? o.points : 100000;
  const std::vector<Mode> modes = benchModes(o);
  const Backend backend = parseBackend(o.backend);
#if defined(KMSEG_HAVE_CUDA)
  registerCudaEngine();
#endif
  nlohmann::json json = {{"suite", "blobs"},
                         {"samples", n},
                         {"dim", d},
                         {"rho", o.rho},
                         {"seed", o.seed},
                         {"repeats", o.repeats},
                         {"backend", o.backend},
                         {"runs", nlohmann::json::array()}};
  for (int k : benchClusters(o)) {
    const Matrix x = makeBlobs(n, d, k, 1.0, o.seed);
    WorkflowParams params;
    params.kmeans.k = k;
    params.kmeans.rho = o.rho;
    params.kmeans.threads = o.threads;
    params.seed = o.seed;
    validateWorkflow(params, x.rows);
    EngineChoice choice = makeEngine(backend, o.threads, {k, d});
    std::printf(
        "blobs: %zu samples, D = %zu, K = %d (centres uniform in [-10, 10)^D, sigma 1), "
        "engine %s%s%s; time is the median of %d run(s); ARI, AMI and Diff against the "
        "fp64 reference\n",
        n, d, k, choice.engine->description().c_str(), choice.note.empty() ? "" : ": ",
        choice.note.c_str(), o.repeats);
    // Every repetition runs the whole comparison; the results are deterministic, the times are
    // the medians.
    WorkflowResult w;
    std::vector<std::vector<double>> seconds(modes.size() + 1), device(modes.size() + 1);
    for (int rep = 0; rep < o.repeats; ++rep) {
      w = runWorkflow(*choice.engine, x, modes, params);
      seconds[0].push_back(w.reference.seconds);
      device[0].push_back(w.reference.deviceSeconds);
      for (std::size_t m = 0; m < modes.size(); ++m) {
        seconds[m + 1].push_back(w.modes[m].result.seconds);
        device[m + 1].push_back(w.modes[m].result.deviceSeconds);
      }
    }
    const double reference = medianOf(seconds[0]);
    std::printf("%-10s %5s  %-18s %9s %8s %16s %9s %9s %8s %9s\n", "mode", "iter", "stop",
                "time [s]", "speedup", "SSE", "ARI", "AMI", "Diff %", "fallback%");
    auto row = [&](const std::string& name, const KMeansResult& r, double t, double dev,
                   const Comparison* c) {
      const std::string stop = stopReasonText(r.stop, r.cyclePeriod);
      std::printf("%-10s %5d  %-18s %9.3f %7.2fx %16.6f %9.6f %9.6f %8.4f %9.3f\n", name.c_str(),
                  r.iterations, stop.c_str(), t, t > 0 ? reference / t : 0.0, r.sse,
                  c ? c->ari : 1.0, c ? c->ami : 1.0, c ? c->diffPercent : 0.0,
                  100.0 * r.fallbackRatio());
      json["runs"].push_back({{"k", k},
                              {"mode", name},
                              {"backend", r.backend},
                              {"iterations", r.iterations},
                              {"stop_reason", stop},
                              {"empty_cluster_events", r.emptyClusterEvents},
                              {"seconds", t},
                              // the Lloyd loop's device time (CUDA engine), -1 on the CPU
                              {"device_seconds", dev},
                              {"speedup_vs_fp64", t > 0 ? reference / t : 0.0},
                              {"sse", r.sse},
                              {"ari", c ? c->ari : 1.0},
                              {"ami", c ? c->ami : 1.0},
                              {"diff_percent", c ? c->diffPercent : 0.0},
                              {"fallback_ratio", r.fallbackRatio()}});
    };
    row("reference", w.reference, reference, medianOf(device[0]), nullptr);
    for (std::size_t m = 0; m < modes.size(); ++m)
      row(std::string(modeName(modes[m])), w.modes[m].result, medianOf(seconds[m + 1]),
          medianOf(device[m + 1]), &w.modes[m].comparison);
  }
  writeBenchJson(o.json, json);
}

}  // namespace kmseg::cli
