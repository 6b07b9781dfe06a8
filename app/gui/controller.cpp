// SPDX-License-Identifier: MIT
#include "controller.h"

#include <QFile>
#include <QFutureWatcher>
#include <QPromise>
#include <QtConcurrent/QtConcurrentRun>

#include <algorithm>
#include <chrono>
#include <exception>
#include <filesystem>
#include <memory>
#include <new>

#include "image_convert.h"
#include "kmseg/error.h"
#include "kmseg/features.h"
#include "kmseg/image_io.h"
#include "kmseg/parallel.h"
#include "kmseg/report.h"

#if defined(KMSEG_HAVE_CUDA)
#include "kmseg/cuda_engine.h"
#endif

namespace kmseg::gui {

namespace {

QString qs(std::string_view s) {
  return QString::fromUtf8(s.data(), qsizetype(s.size()));
}

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::filesystem::path toPath(const QString& path) {
  return std::filesystem::path(QFile::encodeName(path).toStdString());
}

/// What the user is told about a failure.
struct UserError {
  QString title;
  QString text;
  QString advice;
};

UserError outOfMemory() {
  return {Controller::tr("Out of memory"),
          Controller::tr("There was not enough memory for this image and these settings."),
          Controller::tr("Close other programs, open a smaller image (or lower the pixel limit), "
                         "or lower K. With the CUDA backend, switch the backend to CPU.")};
}

/// What to do about an image loadImage refused with InvalidArgument other than the pixel limit:
/// the decoder's own limits (pixels a side, bytes decoded) or a 16-bit run-length PSD, which it
/// cannot read. No pixel limit changes either.
QString decoderRefusalAdvice(const QString& path) {
  ImageInfo info;
  try {
    info = probeImage(toPath(path));
  } catch (const std::exception&) {
    return Controller::tr("Open a downscaled copy of the image.");
  }
  if (info.format == "psd" && info.bitDepth == 16)
    return Controller::tr(
        "Save the image uncompressed, or as a 16-bit PNG, and open that. The pixel limit of the "
        "parameters panel does not change what the decoder reads.");
  return Controller::tr(
      "Open a downscaled copy of the image: this is the image decoder's own limit, which the "
      "pixel limit of the parameters panel does not change.");
}

UserError describeLoadError(std::exception_ptr error, const QString& path) {
  const QString title = Controller::tr("Cannot open %1").arg(path);
  try {
    std::rethrow_exception(error);
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  } catch (const kmseg::PixelLimitError& e) {
    return {title, QString::fromUtf8(e.what()),
            Controller::tr("Open a downscaled copy of the image, or raise the pixel limit in the "
                           "parameters panel if this computer has the memory for it.")};
  } catch (const kmseg::InvalidArgument& e) {
    return {title, QString::fromUtf8(e.what()), decoderRefusalAdvice(path)};
  } catch (const std::exception& e) {
    return {title, QString::fromUtf8(e.what()),
            Controller::tr("Check that the file exists, is readable and is a complete JPEG, PNG, "
                           "BMP, GIF, TGA, PSD, HDR, PIC or PNM image.")};
  }
}

UserError describeRunError(std::exception_ptr error) {
  const QString title = Controller::tr("The run failed");
  try {
    std::rethrow_exception(error);
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  } catch (const kmseg::BackendError& e) {
    return {Controller::tr("The compute backend failed"), QString::fromUtf8(e.what()),
            Controller::tr("Switch the backend to CPU in the parameters panel and run again.")};
  } catch (const kmseg::InvalidArgument& e) {
    return {Controller::tr("Invalid parameters"), QString::fromUtf8(e.what()),
            Controller::tr("Change the parameter named above in the parameters panel and run "
                           "again.")};
  } catch (const kmseg::DataError& e) {
    return {Controller::tr("This image cannot be segmented with these settings"),
            QString::fromUtf8(e.what()),
            Controller::tr("Lower K, or change the colour space or the normalisation.")};
  } catch (const std::exception& e) {
    return {title, QString::fromUtf8(e.what()),
            Controller::tr("Try again with the CPU backend; if it fails again, please report "
                           "it with the image and the parameters.")};
  } catch (...) {
    return {title, Controller::tr("An unknown error occurred."),
            Controller::tr("Try again with the CPU backend.")};
  }
}

/// One item of a run's result stream: progress and rows, then one Done or Failed.
struct RunEvent {
  enum class Kind { Progress, Rows, Done, Failed };
  Kind kind = Kind::Progress;
  RunProgress progress;
  std::shared_ptr<const RunOutcome> outcome;  ///< Rows and Done: the outcome so far
  UserError error;
};

/// The worker: features, engine and workflow, entirely on a pool thread. It reads only its
/// arguments (the image is immutable and shared) and reports through `promise`: each row as it
/// is complete, in an outcome of its own that shares the rows before.
void runJob(QPromise<RunEvent>& promise, int id, std::shared_ptr<const LoadedImage> image,
            std::shared_ptr<const PreparedFeatures> prepared,
            std::shared_ptr<const RunOutcome> previous, GuiParams params, std::vector<Mode> modes,
            bool allModes, std::shared_ptr<std::atomic<bool>> cancel) {
  try {
    if (cancel->load()) throw Cancelled();
    auto outcome = std::make_shared<RunOutcome>();
    outcome->job = id;
    outcome->image = image;
    outcome->params = params;
    outcome->modes = modes;
    outcome->allModes = allModes;
    if (!prepared) {
      const auto t0 = std::chrono::steady_clock::now();
      auto made = std::make_shared<PreparedFeatures>();
      made->image = image;
      made->options = params.features;
      made->features = makeImageFeatures(image->image, params.features);
      outcome->featureSeconds = secondsSince(t0);
      prepared = std::move(made);
    }
    outcome->features = prepared;
    const ImageFeatures& features = prepared->features;
    if (cancel->load()) throw Cancelled();

    EngineChoice choice = makeEngine(params.backend, params.workflow.kmeans.threads,
                                     {params.workflow.kmeans.k, features.rows.cols});
    outcome->engine = choice.engine->description();
    outcome->backendNote = choice.note;
    outcome->backend = choice.backend;
    outcome->palette = makePalette(std::min(params.workflow.kmeans.k, 65536), params.palette);
    // The run before computed this run's reference when it took the same features on the same
    // kind of engine with parameters that give the same reference.
    // (Not a reference that Auto's GPU engine left to the CPU: this job's engine is the GPU's.)
    const bool reuse = previous && previous->reference && previous->features == prepared &&
                       previous->backend == choice.backend &&
                       previous->reference->backendNote.empty() &&
                       sameReference(previous->params.workflow, params.workflow);
    outcome->referenceGiven = reuse;
    const int maxIterations = params.workflow.kmeans.maxIterations;
    WorkflowProgress progress = [&](int run, int runCount, Mode mode, const IterationStats& s) {
      RunEvent ev;
      ev.progress.job = id;
      ev.progress.run = run;
      ev.progress.runCount = runCount;
      ev.progress.name = run == 0 ? Controller::tr("fp64 reference") : qs(modeName(mode));
      ev.progress.iteration = s.iteration;
      ev.progress.maxIterations = maxIterations;
      ev.progress.changed = s.changed;
      ev.progress.fallbackPercent =
          s.evaluations > 0 ? 100.0 * double(s.fallbacks) / double(s.evaluations) : 0.0;
      promise.addResult(std::move(ev));
    };
    // Each complete run becomes a row the outcomes share: the reference copied (the workflow's
    // comparisons still read its own), each mode moved out of the workflow's result, which is
    // not kept. The calls never overlap (runWorkflow).
    std::shared_ptr<const RunOutcome> current = outcome;
    auto addRow = [&](auto&& add) {
      auto next = std::make_shared<RunOutcome>(*current);
      add(*next);
      current = next;
      RunEvent ev;
      ev.kind = RunEvent::Kind::Rows;
      ev.outcome = current;
      promise.addResult(std::move(ev));
    };
    WorkflowRunsDone runsDone;
    runsDone.reference = [&](const KMeansResult& r) {
      // Counted here rather than where the legend shows them: a pass over every pixel.
      std::shared_ptr<const std::vector<std::int64_t>> sizes;
      if (reuse) {
        sizes = previous->referenceSizes;
      } else {
        auto counted =
            std::make_shared<std::vector<std::int64_t>>(std::size_t(params.workflow.kmeans.k), 0);
        for (const std::int32_t label : r.labels) ++(*counted)[std::size_t(label)];
        sizes = std::move(counted);
      }
      addRow([&](RunOutcome& o) {
        o.reference = reuse ? previous->reference : std::make_shared<const KMeansResult>(r);
        o.referenceSizes = sizes;
      });
    };
    runsDone.restarted = [&](int run, Mode mode, const std::string& note) {
      RunEvent ev;
      ev.progress.job = id;
      ev.progress.run = run;
      ev.progress.runCount = 1 + int(modes.size());
      ev.progress.name = run == 0 ? Controller::tr("fp64 reference") : qs(modeName(mode));
      ev.progress.maxIterations = maxIterations;
      ev.progress.restartNote = QString::fromStdString(note);
      ev.progress.engine = QString::fromStdString(choice.engine->description());
      promise.addResult(std::move(ev));
    };
    runsDone.mode = [&](std::size_t, ModeOutcome& m) {
      addRow([&](RunOutcome& o) {
        o.finished.push_back(std::make_shared<const ModeOutcome>(std::move(m)));
      });
    };
    runWorkflow(*choice.engine, features.rows, modes, workflowFor(params.workflow, image->image),
                progress, cancel.get(), features.lookup ? &*features.lookup : nullptr,
                reuse ? previous->reference.get() : nullptr, runsDone);
    RunEvent done;
    done.kind = RunEvent::Kind::Done;
    done.outcome = std::move(current);
    promise.addResult(std::move(done));
  } catch (const Cancelled&) {
    // A normal end: the controller reports it from the cancel flag.
  } catch (...) {
    RunEvent failed;
    failed.kind = RunEvent::Kind::Failed;
    failed.error = describeRunError(std::current_exception());
    promise.addResult(std::move(failed));
  }
}

struct LoadEvent {
  std::shared_ptr<const LoadedImage> image;
  UserError error;
};

LoadEvent loadJob(const QString& path, std::uint64_t maxPixels) {
  LoadEvent ev;
  try {
    auto loaded = std::make_shared<LoadedImage>();
    loaded->path = path;
    LoadOptions options;
    options.maxPixels = maxPixels;
    const auto t0 = std::chrono::steady_clock::now();
    loaded->image = loadImage(toPath(path), options);
    loaded->decodeSeconds = secondsSince(t0);
    loaded->display = toQImage(loaded->image);
    if (loaded->display.isNull()) throw std::bad_alloc();
    ev.image = std::move(loaded);
  } catch (...) {
    ev.error = describeLoadError(std::current_exception(), path);
  }
  return ev;
}

struct BackendInfo {
  QString description;
  QString note;
};

BackendInfo probeJob(Backend backend, int threads) {
  try {
    const EngineChoice choice = makeEngine(backend, threads);
    return {QString::fromStdString(choice.engine->description()),
            QString::fromStdString(choice.note)};
  } catch (const std::exception& e) {
    return {Controller::tr("%1 not available").arg(qs(backendName(backend)).toUpper()),
            QString::fromUtf8(e.what())};
  }
}

Report makeReport(const RunOutcome& o) {
  Report r;
  r.command = o.allModes ? "compare" : "segment";
  r.image = QFile::encodeName(o.image->path).toStdString();
  r.width = o.width();
  r.height = o.height();
  r.params = o.params.workflow.kmeans;
  if (!o.modes.empty()) r.params.mode = o.modes.front();
  r.features = o.params.features;
  if (o.features) r.featureScales = o.features->features.scales;
  r.init = o.params.workflow.init;
  r.seed = o.params.workflow.seed;
  r.backend = o.engine;
  r.backendNote = o.backendNote;
  r.decodeSeconds = o.image->decodeSeconds;
  r.featureSeconds = o.featureSeconds;
  // The rows complete: all of them, or those a cancelled or failed run had finished.
  for (int row = 0; row < o.readyRows(); ++row)
    r.runs.push_back({&o.result(row), o.comparison(row), row == 0});
  return r;
}

/// What exportAll() writes for `o`: its complete rows.
OutputFiles exportFiles(const RunOutcome& o, const std::filesystem::path& dir) {
  const std::vector<Mode> done(o.modes.begin(), o.modes.begin() + (o.readyRows() - 1));
  return outputFiles(dir, toPath(o.image->path).stem().string(), o.allModes ? "compare" : "segment",
                     done);
}

UserError exportError(std::exception_ptr error, const QString& dir) {
  try {
    std::rethrow_exception(error);
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  } catch (const kmseg::IoError& e) {
    return {Controller::tr("Cannot export to %1").arg(dir), QString::fromUtf8(e.what()),
            Controller::tr("Choose a folder you can write to, where no folder has the name of a "
                           "file to write, then export again.")};
  } catch (const std::exception& e) {
    return {Controller::tr("Cannot export to %1").arg(dir), QString::fromUtf8(e.what()), QString()};
  }
}

}  // namespace

const KMeansResult& RunOutcome::result(int row) const {
  if (!isReady(row))
    throw InvalidArgument("row " + std::to_string(row) + " of the results is not complete");
  return row == 0 ? *reference : finished[std::size_t(row - 1)]->result;
}

const Comparison* RunOutcome::comparison(int row) const {
  if (!isReady(row))
    throw InvalidArgument("row " + std::to_string(row) + " of the results is not complete");
  return row == 0 ? nullptr : &finished[std::size_t(row - 1)]->comparison;
}

QString RunOutcome::rowName(int row) const {
  return row <= 0 ? Controller::tr("fp64 reference") : qs(modeName(modes.at(std::size_t(row - 1))));
}

int RunOutcome::rowOf(Mode mode) const {
  for (std::size_t i = 0; i < modes.size(); ++i)
    if (modes[i] == mode) return int(i) + 1;
  return -1;
}

double RunOutcome::runSeconds() const {
  double total = reference && !referenceGiven ? reference->seconds : 0.0;
  for (const auto& m : finished)
    if (m->result.mode != Mode::Fp64) total += m->result.seconds;
  return total;
}

struct Controller::Job {
  std::shared_ptr<std::atomic<bool>> cancel;
  QFutureWatcher<RunEvent>* watcher = nullptr;
};

Controller::Controller(QObject* parent) : QObject(parent) {
#if defined(KMSEG_HAVE_CUDA)
  registerCudaEngine();
#endif
  qRegisterMetaType<RunProgress>();
  runPool_.setMaxThreadCount(1);
  ioPool_.setMaxThreadCount(2);
}

Controller::~Controller() {
  cancel();
  runPool_.waitForDone();
  ioPool_.waitForDone();
}

void Controller::openImage(const QString& path, std::uint64_t maxPixels) {
  const int generation = ++loadGeneration_;
  ++loading_;
  auto* watcher = new QFutureWatcher<LoadEvent>(this);
  connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, generation, path] {
    watcher->deleteLater();
    --loading_;
    // A later openImage() supersedes this one.
    if (generation != loadGeneration_) return;
    const LoadEvent ev = watcher->result();
    if (!ev.image) {
      emit errorOccurred(ev.error.title, ev.error.text, ev.error.advice);
      return;
    }
    cancel();
    image_ = ev.image;
    outcome_.reset();
    features_.reset();
    emit imageLoaded(path);
  });
  watcher->setFuture(QtConcurrent::run(&ioPool_, loadJob, path, maxPixels));
}

int Controller::startRun(const GuiParams& params, bool allModes) {
  if (!image_) {
    emit errorOccurred(tr("No image"), tr("There is no image to segment."),
                       tr("Open an image first (File > Open, or drop a file on the window)."));
    return 0;
  }
  const bool wasBusy = isBusy();
  cancel();
  const int id = ++lastJob_;
  auto job = std::make_unique<Job>();
  job->cancel = std::make_shared<std::atomic<bool>>(false);
  job->watcher = new QFutureWatcher<RunEvent>(this);
  connect(job->watcher, &QFutureWatcherBase::resultReadyAt, this,
          [this, id](int index) { onRunResult(id, index); });
  connect(job->watcher, &QFutureWatcherBase::finished, this, [this, id] { onRunEnded(id); });
  std::vector<Mode> modes;
  if (allModes)
    modes.assign(kAllModes.begin(), kAllModes.end());
  else
    modes.push_back(params.mode);
  const int runCount = 1 + int(modes.size());
  QFutureWatcher<RunEvent>* watcher = job->watcher;
  auto cancelFlag = job->cancel;
  jobs_.emplace(id, std::move(job));
  // The last run's features serve again when they are of this image with these options.
  if (features_ && (features_->image != image_ || features_->options != params.features))
    features_.reset();
  // So may its reference (runJob decides, once it knows the engine).
  std::shared_ptr<const RunOutcome> previous =
      features_ && outcome_ && outcome_->features == features_ ? outcome_ : nullptr;
  watcher->setFuture(QtConcurrent::run(&runPool_, runJob, id, image_, features_,
                                       std::move(previous), params, std::move(modes), allModes,
                                       std::move(cancelFlag)));
  emit runStarted(id, runCount);
  if (!wasBusy) emit busyChanged(true);
  return id;
}

void Controller::cancel() {
  for (auto& [id, job] : jobs_) {
    job->cancel->store(true);
    // Cancelling the future drops results the worker still reports and skips a queued worker.
    job->watcher->future().cancel();
  }
}

void Controller::onRunResult(int id, int index) {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || id != lastJob_ || it->second->cancel->load()) return;
  const RunEvent ev = it->second->watcher->resultAt(index);
  if (ev.kind == RunEvent::Kind::Progress) {
    // A run that starts again elsewhere: the status line names the backend that takes it now.
    if (!ev.progress.restartNote.isEmpty())
      emit backendChanged(ev.progress.engine, ev.progress.restartNote);
    emit progressed(ev.progress);
  } else if (ev.kind == RunEvent::Kind::Rows) {
    outcome_ = ev.outcome;
    features_ = outcome_->features;
    const int row = outcome_->readyRows() - 1;
    const KMeansResult& newest = outcome_->result(row);
    if (!newest.backendNote.empty() && (row == 0 || outcome_->result(row - 1).backendNote.empty()))
      // Auto's GPU engine did not do this run (it failed, or the run was beyond its limits): the
      // status line says why from the first such row on.
      emit backendChanged(QString::fromStdString(newest.backend),
                          QString::fromStdString(newest.backendNote));
    else if (row == 0)  // the job's first row: the engine is known
      emit backendChanged(QString::fromStdString(outcome_->engine),
                          QString::fromStdString(outcome_->backendNote));
    emit rowsReady(id);
  }
}

void Controller::onRunEnded(int id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  const std::unique_ptr<Job> job = std::move(it->second);
  jobs_.erase(it);
  const QFuture<RunEvent> future = job->watcher->future();
  job->watcher->deleteLater();

  // cancel() runs on this thread, so a run cancelled before this point never replaces the
  // result, even when its worker had already returned one. The rows it completed before it
  // was cancelled stay (onRunResult took them).
  bool cancelled = job->cancel->load() || future.isCanceled() || future.resultCount() == 0;
  if (!cancelled) {
    const RunEvent last = future.resultAt(future.resultCount() - 1);
    if (last.kind == RunEvent::Kind::Done) {
      outcome_ = last.outcome;
      features_ = outcome_->features;
      emit runFinished(id);
    } else if (last.kind == RunEvent::Kind::Failed) {
      emit errorOccurred(last.error.title, last.error.text, last.error.advice);
      emit runFailed(id);
    } else {
      cancelled = true;
    }
  }
  if (cancelled) emit runCancelled(id);
  if (!isBusy()) emit busyChanged(false);
}

void Controller::probeBackend(Backend backend, int threads) {
  const int generation = ++probeGeneration_;
  auto* watcher = new QFutureWatcher<BackendInfo>(this);
  connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, generation] {
    watcher->deleteLater();
    if (generation != probeGeneration_) return;
    const BackendInfo info = watcher->result();
    emit backendChanged(info.description, info.note);
  });
  watcher->setFuture(QtConcurrent::run(&ioPool_, probeJob, backend, threads));
}

QStringList Controller::exportAllFiles(const QString& dir) const {
  QStringList paths;
  if (!outcome_ || outcome_->readyRows() == 0) return paths;
  for (const auto& p : exportFiles(*outcome_, toPath(dir)).all())
    paths << QFile::decodeName(QByteArray::fromStdString(p.string()));
  return paths;
}

bool Controller::exportAll(const QString& dir) {
  try {
    if (exportingAll_)
      throw InvalidArgument("an export is still being written: wait for it to finish");
    if (!outcome_ || outcome_->readyRows() == 0)
      throw InvalidArgument("there is no result to export yet: run a segmentation first");
    const std::filesystem::path d = toPath(dir);
    // A folder made here goes again if a file name is refused, or if the export ends before it
    // wrote into the folder (an error, or a second stop signal: it stays recorded until then).
    auto made = std::make_unique<CreatedDirectories>(prepareOutputDirectory(d));
    OutputFiles files = exportFiles(*outcome_, d);
    const auto paths = files.all();
    for (const auto& p : paths) checkOutputFile(p);
    exportingAll_ = true;
    std::shared_ptr<const RunOutcome> o = outcome_;
    auto* watcher = new QFutureWatcher<std::exception_ptr>(this);
    const int count = int(paths.size());
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, dir, count] {
      watcher->deleteLater();
      exportingAll_ = false;
      if (const std::exception_ptr error = watcher->result()) {
        const UserError e = exportError(error, dir);
        emit errorOccurred(e.title, e.text, e.advice);
      } else {
        emit exportedAll(dir, count);
      }
    });
    watcher->setFuture(QtConcurrent::run(
        &ioPool_, [o, made = std::move(made), files = std::move(files)]() mutable {
          try {
            const Report report = makeReport(*o);
            writeMaps(files, report, o->palette, hardwareThreads());
            writeFileAtomic(files.json, reportJson(report));
            writeFileAtomic(files.csv, reportCsv(report));
            // The folders' records end here, before the export's end is reported and another
            // can make folders (they are made and given back by one thread at a time).
            made->keep();
            made.reset();
            return std::exception_ptr();
          } catch (...) {
            made.reset();  // the folders go if nothing was written into them
            return std::current_exception();
          }
        }));
    return true;
  } catch (...) {
    const UserError e = exportError(std::current_exception(), dir);
    emit errorOccurred(e.title, e.text, e.advice);
    return false;
  }
}

bool Controller::exportFile(ExportKind kind, const QString& path, int row) {
  return exportFile(kind, path, outcome_, row);
}

bool Controller::exportFile(ExportKind kind, const QString& path,
                            const std::shared_ptr<const RunOutcome>& outcome, int row) {
  try {
    if (!outcome)
      throw InvalidArgument("there is no result to export yet: run a segmentation first");
    const RunOutcome& o = *outcome;
    if (row < 0 || row >= o.rowCount())
      throw InvalidArgument("row " + std::to_string(row) + " is not in the results table");
    if (!o.isReady(row))
      throw InvalidArgument("the run of row " + std::to_string(row) + " (" +
                            o.rowName(row).toStdString() +
                            ") has not finished yet: wait for it, or select a finished row");
    const KMeansResult& r = o.result(row);
    const std::filesystem::path p = toPath(path);
    const int k = o.params.workflow.kmeans.k;
    switch (kind) {
      case ExportKind::LabelMap:
        writeLabelPng(p, r.labels, o.width(), o.height(), k, o.palette);
        break;
      case ExportKind::ColorMap:
        writeColorPng(p, r.labels, o.width(), o.height(), o.palette);
        break;
      case ExportKind::Mask: {
        const Comparison* c = o.comparison(row);
        if (!c)
          throw InvalidArgument(
              "the fp64 reference has no disagreement mask: select a mode's row first");
        writeMaskPng(p, c->mask, o.width(), o.height());
        break;
      }
      case ExportKind::ReportJson:
        writeFileAtomic(p, reportJson(makeReport(o)));
        break;
      case ExportKind::ReportCsv:
        writeFileAtomic(p, reportCsv(makeReport(o)));
        break;
    }
    return true;
  } catch (const std::bad_alloc&) {
    const UserError e = outOfMemory();
    emit errorOccurred(e.title, e.text, e.advice);
  } catch (const kmseg::IoError& e) {
    emit errorOccurred(tr("Cannot export %1").arg(path), QString::fromUtf8(e.what()),
                       tr("Choose a folder you can write to and a file name that is not a folder, "
                          "then export again."));
  } catch (const std::exception& e) {
    emit errorOccurred(tr("Cannot export %1").arg(path), QString::fromUtf8(e.what()), QString());
  }
  return false;
}

}  // namespace kmseg::gui
