// SPDX-License-Identifier: MIT
#pragma once

// The controller of kmseg-gui: owns the loaded image, the background runs and the latest result;
// widgets render what it holds and call it, and the core library computes (STYLE rule 13).

#include <QImage>
#include <QObject>
#include <QString>
#include <QThreadPool>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gui_params.h"
#include "kmseg/export.h"
#include "kmseg/image.h"
#include "kmseg/workflow.h"

namespace kmseg::gui {

/// A decoded image and its display copy. Immutable once loaded; shared with running jobs.
struct LoadedImage {
  QString path;
  kmseg::Image image;  ///< what the features are built from
  QImage display;      ///< the same pixels as a QImage
  double decodeSeconds = 0.0;
};

/// An image's features (makeImageFeatures) and what made them. Built by a run and shared by the
/// runs that follow on the same image with the same feature options; immutable.
struct PreparedFeatures {
  std::shared_ptr<const LoadedImage> image;  ///< holds the samples the lookup points into
  FeatureOptions options;
  ImageFeatures features;
};

/// The result of one run, whole or as far as it has got: the workflow's runs plus what
/// produced them. Row 0 of every table is the fp64 reference, rows 1.. the requested modes in
/// order. While a run is active its outcome grows a row at a time (a new RunOutcome each time,
/// sharing the rows before): rows [0, readyRows()) are complete, the others still to come.
struct RunOutcome {
  int job = 0;  ///< the id startRun() gave the run
  std::shared_ptr<const LoadedImage> image;
  GuiParams params;
  std::vector<Mode> modes;  ///< one mode for "Run", all nine for "Compare all modes"
  bool allModes = false;
  std::string engine;              ///< the engine's description
  std::string backendNote;         ///< why Auto did not give the GPU; empty otherwise
  Backend backend = Backend::Cpu;  ///< the kind of engine that ran
  /// The reference was the run before's (WorkflowResult::referenceGiven), not run again.
  bool referenceGiven = false;
  std::shared_ptr<const KMeansResult> reference;  ///< fp64 with fp64 working precision
  /// The reference's cluster sizes (pixels per label), counted with it on the run's thread.
  std::shared_ptr<const std::vector<std::int64_t>> referenceSizes;
  /// The modes complete so far: finished[i] is modes[i]'s run and comparison.
  std::vector<std::shared_ptr<const ModeOutcome>> finished;
  std::shared_ptr<const PreparedFeatures> features;  ///< the features the runs took
  double featureSeconds = 0.0;  ///< spent building them: 0 when a run before had built them
  std::vector<Rgb8> palette;    ///< makePalette(min(K, 65536), params.palette)

  int width() const { return image ? image->image.width : 0; }
  int height() const { return image ? image->image.height : 0; }
  /// Every row, complete or not: 1 + modes.size().
  int rowCount() const { return 1 + int(modes.size()); }
  /// The rows complete so far: 0 before the reference, rowCount() once every mode is.
  int readyRows() const { return reference ? 1 + int(finished.size()) : 0; }
  bool isReady(int row) const { return row >= 0 && row < readyRows(); }
  /// Every row is complete.
  bool isComplete() const { return readyRows() == rowCount(); }
  /// The run shown in table row `row` (0 = reference); the row must be ready.
  const KMeansResult& result(int row) const;
  /// Its comparison with the reference; null for row 0.
  const Comparison* comparison(int row) const;
  /// "fp64 reference" for row 0, else the mode name.
  QString rowName(int row) const;
  /// The row of `mode`, or -1 when it was not run.
  int rowOf(Mode mode) const;
  /// Seconds of the Lloyd runs complete so far: the reference and every mode, an fp64 mode
  /// once only (it is the reference's run again: runWorkflow reuses it), the reference not at
  /// all when it came from the run before.
  double runSeconds() const;
};

/// Progress of the current run, once per Lloyd iteration.
struct RunProgress {
  int job = 0;       ///< the id startRun() returned
  int run = 0;       ///< 0 = the reference, then 1..runCount-1
  int runCount = 0;  ///< 1 + number of modes
  QString name;      ///< "fp64 reference" or the mode name
  int iteration = 0;
  int maxIterations = 0;
  qint64 changed = 0;            ///< labels changed in this iteration
  double fallbackPercent = 0.0;  ///< fallbacks / distance evaluations in this iteration, in %
  /// Not empty when the run, given up part-way by the engine, starts again on another backend
  /// (Auto's CPU after a GPU failure): why, in words. The iteration fields are then 0, and
  /// `engine` names the backend that takes the run.
  QString restartNote;
  QString engine;
};

/// Coordinates image loading, background runs, results and exports. Lives in, and is called
/// from, the GUI thread; its signals are emitted there. Workers run on its own thread pools and
/// talk back only through QFuture results (queued to this thread by QFutureWatcher).
class Controller : public QObject {
  Q_OBJECT

 public:
  /// What exportFile() writes.
  enum class ExportKind { LabelMap, ColorMap, Mask, ReportJson, ReportCsv };

  /// Registers the CUDA engine when this build has it.
  explicit Controller(QObject* parent = nullptr);
  /// Cancels every job and waits for the workers to return.
  ~Controller() override;

  /// Decodes `path` in the background (pixel limit `maxPixels`). On success the image replaces
  /// the current one, active runs are cancelled, the result is cleared and imageLoaded() is
  /// emitted; on failure errorOccurred() is emitted and everything shown is kept.
  void openImage(const QString& path, std::uint64_t maxPixels = kDefaultMaxPixels);
  /// True while an image is being decoded.
  bool isLoading() const { return loading_ > 0; }

  /// Starts a run on the current image: the fp64 reference and `params.mode`, or all nine modes
  /// when `allModes`. A run still active is cancelled (its result is discarded). Returns the
  /// job id, or 0 (with errorOccurred()) when no image is loaded.
  int startRun(const GuiParams& params, bool allModes);
  /// Asks every active run to stop; each takes effect within one iteration and ends with
  /// runCancelled(). The current result is kept: for a run cancelled part way, the rows it had
  /// completed.
  void cancel();
  /// True while any run is active (including cancelled runs that have not returned yet).
  bool isBusy() const { return !jobs_.empty(); }
  /// Runs not yet returned.
  int activeJobs() const { return int(jobs_.size()); }

  /// Finds the engine `backend` gives, in the background; emits backendChanged().
  void probeBackend(Backend backend, int threads);

  /// The current image; null before the first successful openImage().
  std::shared_ptr<const LoadedImage> image() const { return image_; }
  /// The latest run with a row complete: whole when it finished, the rows complete so far while
  /// it is active (or when it was cancelled or failed part way); null before the first row of
  /// the first run and after a new image is loaded.
  std::shared_ptr<const RunOutcome> outcome() const { return outcome_; }

  /// Writes `kind` for table row `row` of the current result to `path` through the core's
  /// atomic writers. Returns false and emits errorOccurred() on failure.
  bool exportFile(ExportKind kind, const QString& path, int row);
  /// The same for row `row` of `outcome`, a result outcome() gave (it may have been replaced
  /// since, as while an export dialog is open); null: there is no result.
  bool exportFile(ExportKind kind, const QString& path,
                  const std::shared_ptr<const RunOutcome>& outcome, int row);
  /// The files exportAll(`dir`) writes for the current result, as `kmseg compare` (or `kmseg
  /// segment`) names them after the photo: every complete run's label map, colour map and
  /// disagreement mask, then the JSON and CSV report. Empty when there is no result.
  QStringList exportAllFiles(const QString& dir) const;
  /// Writes exportAllFiles(`dir`) in the background, each file atomically, replacing files of
  /// those names; creates `dir` when needed. Returns false, with errorOccurred(), when there is
  /// no result, an export is still going, or `dir` or a file in it cannot be written (checked
  /// before the first file is written). Ends with exportedAll() or errorOccurred().
  bool exportAll(const QString& dir);
  /// True while exportAll() writes.
  bool isExportingAll() const { return exportingAll_; }

 signals:
  /// image() now holds `path`.
  void imageLoaded(const QString& path);
  /// A run started: the reference plus runCount - 1 modes.
  void runStarted(int job, int runCount);
  /// One Lloyd iteration of the newest run.
  void progressed(const kmseg::gui::RunProgress& progress);
  /// outcome() now holds `job`'s outcome with one more row complete (the reference, then each
  /// mode in turn). For a job that finishes, the last one comes just before runFinished().
  void rowsReady(int job);
  /// outcome() now holds the whole result of `job`.
  void runFinished(int job);
  /// `job` ended before it finished (cancelled, or superseded by a newer run); outcome() keeps
  /// the rows it had completed, if any.
  void runCancelled(int job);
  /// `job` failed; errorOccurred() said why. outcome() keeps the rows it had completed, if any.
  void runFailed(int job);
  /// isBusy() changed.
  void busyChanged(bool busy);
  /// The engine a run uses (or would use): its description and why Auto fell back, if it did.
  void backendChanged(const QString& description, const QString& note);
  /// exportAll() wrote `files` files into `dir`.
  void exportedAll(const QString& dir, int files);
  /// Something failed: what happened and what the user can do about it.
  void errorOccurred(const QString& title, const QString& text, const QString& advice);

 private:
  struct Job;
  void onRunResult(int id, int index);
  void onRunEnded(int id);

  QThreadPool runPool_;  ///< one run computes at a time; a new one queues behind a cancelled one
  QThreadPool ioPool_;   ///< decoding and backend probes
  std::map<int, std::unique_ptr<Job>> jobs_;
  int lastJob_ = 0;
  int loadGeneration_ = 0;
  int probeGeneration_ = 0;
  int loading_ = 0;
  bool exportingAll_ = false;
  std::shared_ptr<const LoadedImage> image_;
  std::shared_ptr<const RunOutcome> outcome_;
  /// The features of the last run with a row complete, for the next run on image_ with the same
  /// options (building them takes about 0.1 s at 12 megapixels).
  std::shared_ptr<const PreparedFeatures> features_;
};

}  // namespace kmseg::gui

Q_DECLARE_METATYPE(kmseg::gui::RunProgress)
