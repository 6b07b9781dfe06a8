// SPDX-License-Identifier: MIT
#include "kmseg/workflow.h"

#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "kmseg/error.h"
#include "kmseg/init.h"

namespace kmseg {

WorkflowParams workflowFor(const WorkflowParams& params, const Image& image) {
  const auto pixels = std::size_t(image.width) * std::size_t(image.height);
  if (params.kmeans.k > 0 && std::size_t(params.kmeans.k) > pixels)
    throw InvalidArgument("K = " + std::to_string(params.kmeans.k) +
                          " exceeds the number of pixels of the image (" +
                          std::to_string(image.width) + " x " + std::to_string(image.height) +
                          " = " + std::to_string(pixels) + ")");
  WorkflowParams p = params;
  p.kmeans.imageWidth = image.width;
  return p;
}

void validateWorkflow(const WorkflowParams& params, std::size_t n) {
  validate(params.kmeans, n);
  const int k = params.kmeans.k;
  if (k > kMaxComparedClusters)
    throw InvalidArgument("K = " + std::to_string(k) + " exceeds the maximum of " +
                          std::to_string(kMaxComparedClusters) +
                          " clusters for which label maps can be compared with the fp64 reference");
}

bool sameReference(const WorkflowParams& a, const WorkflowParams& b) {
  // Equal once the parameters the reference does not take are made equal: a field added later
  // is compared unless it is listed here.
  WorkflowParams c = b;
  c.kmeans.mode = a.kmeans.mode;
  c.kmeans.rho = a.kmeans.rho;
  c.kmeans.working = a.kmeans.working;
  c.kmeans.threads = a.kmeans.threads;
  return a == c;
}

WorkflowResult runWorkflow(KMeansEngine& engine, const Matrix& features,
                           const std::vector<Mode>& modes, const WorkflowParams& params,
                           const WorkflowProgress& progress, const std::atomic<bool>* cancel,
                           const FeatureLookup* lookup, const KMeansResult* reference,
                           const WorkflowRunsDone& runsDone) {
  if (features.empty()) throw InvalidArgument("the feature matrix is empty");
  validateWorkflow(params, features.rows);
  if (reference && (reference->mode != Mode::Fp64 || reference->labels.size() != features.rows ||
                    reference->centroids.rows != std::size_t(params.kmeans.k) ||
                    reference->centroids.cols != features.cols))
    throw InvalidArgument("the reference given is not an fp64 run of " +
                          std::to_string(params.kmeans.k) + " clusters on these " +
                          std::to_string(features.rows) + " x " + std::to_string(features.cols) +
                          " features");
  // Checked once here; the engine is told so (KeptData) and does not check again.
  const double maxAbs = checkedMaxAbs(features, "the feature matrix");
  WorkflowResult out;
  out.engine = engine.description();
  out.initialIndices = chooseInitialCentres(features, params.kmeans.k, params.init, params.seed);
  const Matrix initial = gatherRows(features, out.initialIndices);
  const int runCount = 1 + int(modes.size());
  if (runsDone.started) runsDone.started();

  auto runOne = [&](int run, Mode mode, Working working) {
    KMeansParams p = params.kmeans;
    p.mode = mode;
    p.working = working;
    RunControl control;
    control.cancel = cancel;
    if (progress)
      control.progress = [&](const IterationStats& s) { progress(run, runCount, mode, s); };
    if (runsDone.restarted)
      control.restarted = [&](const std::string& note) { runsDone.restarted(run, mode, note); };
    return engine.run(features, initial, p, control);
  };

  // Every run takes the same features: the engine may check and upload them once.
  const KeptData kept(engine, features, lookup, maxAbs);
  if (reference) {
    out.reference = *reference;
    out.referenceGiven = true;
  } else {
    out.reference = runOne(0, Mode::Fp64, Working::Fp64);
  }
  const int k = params.kmeans.k;
  // Runs are reported in order as they complete, a mode once its comparison is done too; a
  // comparison may finish on its own thread after the next mode's run has started.
  std::mutex reportMutex;
  std::vector<char> compared(modes.size(), 0);
  std::size_t reported = 0;  // modes reported so far
  bool reportFailed = false;
  auto reportReady = [&] {  // with reportMutex held
    while (!reportFailed && reported < modes.size() && compared[reported]) {
      const std::size_t m = reported++;
      try {
        runsDone.mode(m, out.modes[m]);
      } catch (...) {
        reportFailed = true;
        throw;
      }
    }
  };
  if (runsDone.reference) runsDone.reference(out.reference);
  // Each mode's comparison with the reference runs on a thread of its own while the next mode
  // runs: on the GPU a comparison (contingency table, matching, ARI, AMI, mask) takes about as
  // long on the host as a run of a 12-megapixel photo on the device. out.modes is sized first,
  // so the comparisons' references stay valid; if a run throws, the futures wait for theirs.
  out.modes.resize(modes.size());
  std::vector<std::future<void>> comparisons;
  comparisons.reserve(modes.size());
  for (std::size_t m = 0; m < modes.size(); ++m) {
    const Mode mode = modes[m];
    ModeOutcome& o = out.modes[m];
    if (mode == Mode::Fp64) {
      o.result = out.reference;  // same mode, same working precision, same centres
    } else {
      o.result = runOne(int(m) + 1, mode, params.kmeans.working);
    }
    comparisons.push_back(std::async(std::launch::async, [&, m, k] {
      ModeOutcome& done = out.modes[m];
      done.comparison =
          compareLabelings(out.reference.labels, done.result.labels, k, out.reference.sse,
                           done.result.sse, runsDone.cancelStopsComparisons ? cancel : nullptr);
      if (!runsDone.mode) return;
      const std::lock_guard lock(reportMutex);
      compared[m] = 1;
      reportReady();
    }));
  }
  for (auto& c : comparisons) c.get();
  return out;
}

}  // namespace kmseg
