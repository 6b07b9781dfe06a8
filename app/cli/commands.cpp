// SPDX-License-Identifier: MIT
#include "commands.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <future>
#include <iostream>
#include <mutex>
#include <optional>

#include <signal.h>
#include <unistd.h>

#include "kmseg/error.h"
#include "kmseg/pair_distance.h"
#include "kmseg/parallel.h"
#include "kmseg/report.h"

#if defined(KMSEG_HAVE_CUDA)
#include "kmseg/cuda_engine.h"
#endif

namespace kmseg::cli {

std::string secondsText(double seconds) {
  const double s = std::abs(seconds);
  char buf[64];
  // Below a millisecond six decimals would keep three digits or fewer ("0.000008").
  if (s > 0.0 && s < 0.00099995) {
    std::snprintf(buf, sizeof buf, "%.3e", seconds);
    return buf;
  }
  const int decimals = s >= 99.995      ? 1
                       : s >= 9.9995    ? 2
                       : s >= 0.99995   ? 3
                       : s >= 0.099995  ? 4
                       : s >= 0.0099995 ? 5
                                        : 6;
  std::snprintf(buf, sizeof buf, "%.*f", decimals, seconds);
  return buf;
}

std::string BackendNotes::restarted(const std::string& run, const std::string& note) {
  restarted_.push_back(run);
  return "kmseg: " + run + ": " + note;
}

std::string BackendNotes::row(const std::string& run, const std::string& note) {
  const bool repeated = note == last_;
  last_ = note;
  if (note.empty() || repeated ||
      std::find(restarted_.begin(), restarted_.end(), run) != restarted_.end())
    return {};
  return "kmseg: " + run + ": " + note;
}

std::vector<Mode> parseModeList(const std::vector<std::string>& names) {
  std::vector<Mode> modes;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const Mode m = parseMode(names[i]);
    for (std::size_t j = 0; j < modes.size(); ++j)
      if (modes[j] == m)
        throw InvalidArgument("--modes names " + std::string(modeName(m)) + " twice ('" + names[j] +
                              "' and '" + names[i] + "'): name each mode once");
    modes.push_back(m);
  }
  return modes;
}

namespace {

std::string formatRow(const char* mode, const KMeansResult& r, const Comparison* c) {
  char buf[256];
  const std::string stop = stopReasonText(r.stop, r.cyclePeriod);
  const std::string time = secondsText(r.seconds);
  if (c) {
    std::snprintf(buf, sizeof buf, "%-10s %5d  %-18s %9s  %14.6f  %8.4f  %8.6f  %8.6f  %8.3f", mode,
                  r.iterations, stop.c_str(), time.c_str(), r.sse, c->diffPercent, c->ari, c->ami,
                  100.0 * r.fallbackRatio());
  } else {
    std::snprintf(buf, sizeof buf, "%-10s %5d  %-18s %9s  %14.6f  %8s  %8s  %8s  %8.3f", mode,
                  r.iterations, stop.c_str(), time.c_str(), r.sse, "ref", "ref", "ref",
                  100.0 * r.fallbackRatio());
  }
  return buf;
}

void printTableHeader() {
  std::printf("%-10s %5s  %-18s %9s  %14s  %8s  %8s  %8s  %8s\n", "mode", "iter", "stop",
              "time [s]", "SSE", "Diff %", "ARI", "AMI", "fallback%");
}

/// The notes under the table, once every row is printed.
void printTableNotes(const WorkflowResult& w, const std::vector<Mode>& modes, bool repeatStop) {
  bool capped = w.reference.stop == StopReason::MaxIterations;
  for (const auto& m : w.modes) capped = capped || m.result.stop == StopReason::MaxIterations;
  if (capped)
    std::printf("note: a run marked 'iteration cap' stopped at --max-iter without converging%s\n",
                repeatStop ? "" : " (--repeat-stop ends a run whose centres repeat)");
  for (std::size_t i = 0; i < modes.size(); ++i)
    if (const std::int64_t rows = w.modes[i].result.normOverflows; rows > 0)
      std::printf("note: %s: %s\n", std::string(modeName(modes[i])).c_str(),
                  normOverflowNote(modes[i], rows, w.modes[i].result.labels.size()).c_str());
}

// Set by the first SIGINT, SIGTERM or SIGHUP while runCommand runs, or when standard output's
// reader went away during the runs (gStdoutClosed as well).
std::atomic<bool> gInterrupted{false};
std::atomic<bool> gStdoutClosed{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");

// Where runCommand is, for the signal handler: running (the runs check gInterrupted), writing
// the files, or told to stop by a first signal in either.
enum Phase : int { kRunning, kStopping, kWriting, kWritingStopping };
std::atomic<int> gPhase{kRunning};
static_assert(std::atomic<int>::is_always_lock_free, "read from a signal handler");

template <std::size_t N>
void writeToStderr(const char (&message)[N]) {
  const char* text = message;
  std::size_t left = N - 1;
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, text, left);
    if (n <= 0) return;
    text += n;
    left -= std::size_t(n);
  }
}

// Async-signal-safe: atomics, write() and abandonOutputsAndRaise.
extern "C" void onInterrupt(int signal) {
  const int saved = errno;
  int phase = kRunning;
  if (gPhase.compare_exchange_strong(phase, kStopping)) {
    gInterrupted.store(true);
  } else if (phase == kWriting && gPhase.compare_exchange_strong(phase, kWritingStopping)) {
    gInterrupted.store(true);
    writeToStderr(
        "kmseg: interrupted: finishing the files being written first (Ctrl+C again stops at "
        "once and removes them)\n");
  } else {
    // A second signal: the process ends at once, without the outputs in progress.
    abandonOutputsAndRaise(signal);
  }
  errno = saved;
}

/// Catches SIGINT, SIGTERM and SIGHUP (the terminal closed) while it lives (StopSignalHandlers),
/// and restores the handlers it found. The first signal sets gInterrupted (and, while the files
/// are written, says that they are finished first); a second one removes the temporary files in
/// progress and the empty output directories, and ends the process with the signal's default
/// action, so a process busy where no run checks the flag still ends.
class InterruptGuard {
 public:
  InterruptGuard() {
    gInterrupted.store(false);
    gPhase.store(kRunning);
    handlers_.emplace(onInterrupt);
    // A write to a pipe whose reader has gone fails with EPIPE instead of killing the process,
    // which would leave the output directories it made (flushTable then stops the runs).
    gStdoutClosed.store(false);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, &oldPipe_);
  }
  ~InterruptGuard() { sigaction(SIGPIPE, &oldPipe_, nullptr); }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  /// Marks the start of the writing phase, unless a signal came first: then false.
  bool startWriting() {
    int phase = kRunning;
    return gPhase.compare_exchange_strong(phase, kWriting);
  }

 private:
  std::optional<StopSignalHandlers> handlers_;
  struct sigaction oldPipe_ {};
};

/// Flushes the table. When its reader has gone (EPIPE), the runs stop as on a first interrupt,
/// and gStdoutClosed says why. Another failure (a full disk) lets the command go on: main()
/// reports it once the files are written.
void flushTable() {
  errno = 0;
  if (std::fflush(stdout) == 0 || errno != EPIPE) return;
  gStdoutClosed.store(true);
  int phase = kRunning;
  if (gPhase.compare_exchange_strong(phase, kStopping)) gInterrupted.store(true);
}

/// The Cancelled that a stop of the runs throws: StdoutClosed when standard output closed.
[[noreturn]] void throwStopped() {
  if (gStdoutClosed.load()) throw StdoutClosed();
  throw Cancelled();
}

}  // namespace

void runCommand(const std::string& command, const Options& o) {
  InterruptGuard interrupts;
  // Fail on an unusable output directory, or on any output path that cannot be written (e.g. an
  // existing directory of that name), before spending time on the image and before the first
  // file of the set is written.
  // The directories made for the outputs go again if the command ends before it wrote into them
  // (an unreadable image, an error in a run, an interrupt); one that holds a file stays.
  CreatedDirectories created(prepareOutputDirectory(o.outputDir));
  const OutputFiles files = outputFiles(o.outputDir, o.image.stem().string(), command, o.modes);
  for (const auto& path : files.all(o.saveMaps)) checkOutputFile(path);

  // The engine starts while the image is decoded and its features are built: for CUDA that is
  // the driver and the device's context, 0.2-0.4 s on the H200's host. (If decoding throws, the
  // future's destructor waits for it and drops its result.)
  const auto start = std::chrono::steady_clock::now();
  auto engine = std::async(std::launch::async, [&] {
#if defined(KMSEG_HAVE_CUDA)
    registerCudaEngine();
#endif
    return makeEngine(o.backend, o.workflow.kmeans.threads,
                      {o.workflow.kmeans.k, kImageFeatureCount});
  });
  auto t0 = std::chrono::steady_clock::now();
  const Image image = loadImage(o.image, o.load);
  const double decodeSeconds = secondsSince(t0);
  // K against the photo's size, before the table starts.
  const WorkflowParams workflow = workflowFor(o.workflow, image);
  t0 = std::chrono::steady_clock::now();
  const ImageFeatures features = makeImageFeatures(image, o.features);
  const double featureSeconds = secondsSince(t0);
  EngineChoice choice = engine.get();
  if (!choice.note.empty() && !o.quiet) std::fprintf(stderr, "kmseg: %s\n", choice.note.c_str());

  // The table starts once the workflow has chosen its initial centres, so that what it refuses
  // before any run (K above the distinct pixels) leaves standard output empty.
  auto printHeader = [&] {
    std::printf("%s: %d x %d pixels, K = %d, backend %s\n", o.image.filename().string().c_str(),
                image.width, image.height, o.workflow.kmeans.k,
                choice.engine->description().c_str());
    printTableHeader();
    flushTable();
  };

  // A live progress line on a terminal, at most ten updates a second; nothing when redirected.
  // It and the table's rows, printed as each run completes (runWorkflow may report a row from
  // another thread), take turns on the terminal.
  std::mutex terminal;
  WorkflowProgress progress;
  const bool live = !o.quiet && ::isatty(STDERR_FILENO);
  auto lastDraw = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  if (live) {
    progress = [&](int run, int runCount, Mode mode, const IterationStats& s) {
      const std::lock_guard lock(terminal);
      const auto now = std::chrono::steady_clock::now();
      if (now - lastDraw < std::chrono::milliseconds(100)) return;
      lastDraw = now;
      const std::string name = run == 0 ? "reference" : std::string(modeName(mode));
      std::fprintf(stderr, "\r[%d/%d] %-10s iteration %4d  changed %10lld  fallback %6.2f%%   ",
                   run + 1, runCount, name.c_str(), s.iteration, (long long)s.changed,
                   s.evaluations ? 100.0 * double(s.fallbacks) / double(s.evaluations) : 0.0);
      std::fflush(stderr);
    };
  }
  const auto clearProgress = [&] {
    if (live) std::fprintf(stderr, "\r%100s\r", "");
  };
  WorkflowRunsDone printRows;
  printRows.started = printHeader;
  // A run that Auto's GPU engine could not do says so once (BackendNotes).
  BackendNotes notes;
  printRows.restarted = [&](int run, Mode mode, const std::string& note) {
    const std::lock_guard lock(terminal);
    clearProgress();
    const std::string line =
        notes.restarted(run == 0 ? "reference" : std::string(modeName(mode)), note);
    if (!o.quiet) std::fprintf(stderr, "%s\n", line.c_str());
    lastDraw = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  };
  auto printRow = [&](const std::string& name, const KMeansResult& r, const Comparison* c) {
    const std::lock_guard lock(terminal);
    clearProgress();
    if (const std::string line = notes.row(name, r.backendNote); !line.empty() && !o.quiet)
      std::fprintf(stderr, "%s\n", line.c_str());
    std::printf("%s\n", formatRow(name.c_str(), r, c).c_str());
    flushTable();
    lastDraw = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  };
  printRows.reference = [&](const KMeansResult& r) { printRow("reference", r, nullptr); };
  // Ctrl+C writes nothing, so the comparisons in progress need not finish: at K = 8192 they
  // would hold the command for tens of seconds.
  printRows.cancelStopsComparisons = true;
  printRows.mode = [&](std::size_t m, ModeOutcome& mo) {
    printRow(std::string(modeName(o.modes[m])), mo.result, &mo.comparison);
  };
  const WorkflowResult w = [&] {
    try {
      return runWorkflow(*choice.engine, features.rows, o.modes, workflow, progress, &gInterrupted,
                         features.lookup ? &*features.lookup : nullptr, nullptr, printRows);
    } catch (const Cancelled&) {
      clearProgress();  // the interrupt's line then starts a line of its own
      throwStopped();
    } catch (...) {
      clearProgress();  // the error's line then starts a line of its own
      throw;
    }
  }();
  clearProgress();
  printTableNotes(w, o.modes, o.workflow.kmeans.detectRepeats);
  flushTable();
  // An interrupt (or a closed standard output) after the last run's last check: still nothing
  // written. From here on a first interrupt lets the files be finished.
  if (!interrupts.startWriting()) throwStopped();

  // Outputs: label map (exact ids), colour map and disagreement mask per run, then reports.
  const auto palette = makePalette(std::min(o.workflow.kmeans.k, 65536), o.palette);
  Report report;
  report.command = command;
  report.image = o.image.string();
  report.width = image.width;
  report.height = image.height;
  report.params = o.workflow.kmeans;
  if (!o.modes.empty()) report.params.mode = o.modes.front();
  report.features = o.features;
  report.featureScales = features.scales;
  report.init = o.workflow.init;
  report.seed = o.workflow.seed;
  report.backend = w.engine;
  report.backendNote = choice.note;
  report.decodeSeconds = decodeSeconds;
  report.featureSeconds = featureSeconds;
  report.runs.push_back({&w.reference, nullptr, true});
  for (const auto& m : w.modes) report.runs.push_back({&m.result, &m.comparison, false});
  // The maps on every core, then the reports, whose wall time includes the maps.
  if (o.saveMaps) writeMaps(files, report, palette, hardwareThreads());
  report.wallSeconds = secondsSince(start);
  writeFileAtomic(files.json, reportJson(report));
  writeFileAtomic(files.csv, reportCsv(report));
  std::printf("wrote %zu files to %s (report: %s)\n", files.all(o.saveMaps).size(),
              o.outputDir.string().c_str(), files.json.filename().string().c_str());
  created.keep();
}

}  // namespace kmseg::cli
