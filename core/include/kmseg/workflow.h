// SPDX-License-Identifier: MIT
#pragma once

// The one workflow both front ends follow (DESIGN.md section 1): the fp64 reference once, then
// each requested mode from the same initial centres, each compared with the reference.

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kmseg/engine.h"
#include "kmseg/image.h"
#include "kmseg/kmeans.h"
#include "kmseg/metrics.h"

namespace kmseg {

/// Parameters shared by every run of one comparison.
struct WorkflowParams {
  KMeansParams kmeans;  ///< kmeans.mode is ignored: the modes are listed separately
  Init init = Init::RandomPoints;
  std::uint64_t seed = 1;

  friend bool operator==(const WorkflowParams&, const WorkflowParams&) = default;
};

/// `params` for a workflow on the features of `image` (makeFeatures): the engines learn the
/// image's width (KMeansParams::imageWidth). Throws InvalidArgument, naming the image's size,
/// when K exceeds its pixel count (the other parameters are checked by runWorkflow).
WorkflowParams workflowFor(const WorkflowParams& params, const Image& image);

/// One mode's run and its comparison with the reference.
struct ModeOutcome {
  KMeansResult result;
  Comparison comparison;
};

/// The reference, every mode's outcome, and the initial centres they all started from.
struct WorkflowResult {
  std::vector<std::int64_t> initialIndices;  ///< rows of the feature matrix
  KMeansResult reference;                    ///< fp64 with fp64 working precision
  std::vector<ModeOutcome> modes;            ///< in the order requested
  std::string engine;                        ///< engine description
  /// The reference was the one given to runWorkflow, not run again.
  bool referenceGiven = false;
};

/// Progress of a workflow: which run (0 = the reference, then 1..modes), the mode, and that
/// run's iteration statistics. Called on the thread that runs the workflow.
using WorkflowProgress =
    std::function<void(int run, int runCount, Mode mode, const IterationStats& stats)>;

/// What a front end hears of a workflow's runs as each completes, in the order of the runs, so
/// that it can show each one before the workflow ends. Either may be empty.
struct WorkflowRunsDone {
  /// Once the inputs are checked and the initial centres chosen, before the first run: what can
  /// be refused without running (K above the distinct rows, say) has been by then.
  std::function<void()> started;
  /// The reference's run (or the one given). It must stay as it is: the modes' comparisons
  /// read it.
  std::function<void(const KMeansResult& reference)> reference;
  /// Mode modes[m], once its run and its comparison with the reference are both done. The
  /// callee may move the outcome away (runWorkflow does not read it again); the
  /// WorkflowResult returned then holds what the callee left.
  std::function<void(std::size_t m, ModeOutcome& outcome)> mode;
  /// Run `run` (0 = the reference, then 1..modes) in `mode` was given up part-way by the engine
  /// and starts again on another backend (RunControl::restarted), with why: its progress starts
  /// again at iteration 1. Called on the thread that runs the workflow.
  std::function<void(int run, Mode mode, const std::string& note)> restarted;
  /// What a cancel does to the comparisons in progress. false: they finish, so that every run
  /// completed before the cancel is reported (at large K the matching and the AMI take
  /// seconds). true: they stop too (compareLabelings' cancel), and a run whose comparison had
  /// not finished is not reported.
  bool cancelStopsComparisons = false;
};

/// Throws InvalidArgument naming the parameter and its limit when `params` cannot run as a
/// workflow on `n` samples: what validate() rejects, and K above kMaxComparedClusters (the
/// comparison with the reference could not be made). Pass n = SIZE_MAX to check only the limits
/// that do not depend on the data, before loading it.
void validateWorkflow(const WorkflowParams& params, std::size_t n);

/// Whether workflows with parameters `a` and `b`, on the same features and the same kind of
/// engine, run the same fp64 reference: every parameter is equal but those only the modes use
/// (mode, rho, working precision) and the CPU thread count, which changes no result.
bool sameReference(const WorkflowParams& a, const WorkflowParams& b);

/// Runs the fp64 reference and then each of `modes` on `engine`, all from the same initial
/// centres (chosen once with params.init and params.seed), and compares each with the
/// reference. A requested fp64 mode with fp64 working precision reuses the reference run.
/// Checks `params` with validateWorkflow before any run. Throws what the engine throws;
/// Cancelled when `cancel` becomes true. `lookup`, when not null, is featureLookup of the image
/// and options that made `features`; the engine may use it (KMeansEngine::keepData).
/// `reference`, when not null, is the reference of an earlier workflow on these features and
/// the same kind of engine whose parameters give the same reference (sameReference): it is
/// taken instead of running the reference again (WorkflowResult::referenceGiven). Throws
/// InvalidArgument when it is not an fp64 result with a label per row and K centres.
/// `runsDone` hears of each run as it completes. Its calls never overlap, but a mode's may
/// come from the thread that compared it with the reference rather than the one that runs the
/// workflow. A run cancelled or failed, and every run after it, is not reported.
WorkflowResult runWorkflow(KMeansEngine& engine, const Matrix& features,
                           const std::vector<Mode>& modes, const WorkflowParams& params,
                           const WorkflowProgress& progress = {},
                           const std::atomic<bool>* cancel = nullptr,
                           const FeatureLookup* lookup = nullptr,
                           const KMeansResult* reference = nullptr,
                           const WorkflowRunsDone& runsDone = {});

}  // namespace kmseg
