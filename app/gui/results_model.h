// SPDX-License-Identifier: MIT
#pragma once

#include <QAbstractTableModel>

#include <memory>

#include "controller.h"

namespace kmseg::gui {

/// The results table: one row per run (row 0 the fp64 reference, then each mode), columns as
/// `kmseg compare` prints them plus the backend. Display text is formatted; Qt::UserRole holds
/// the raw number (invalid where a value does not apply, e.g. the reference's Diff %). A run
/// that hit the iteration cap says so in the stop column and is highlighted. While a run is
/// active, the rows still to come name their mode and say what is happening to them (once it
/// ended, that it was cancelled or did not finish); they cannot be selected.
class ResultsModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column {
    ModeColumn,
    IterationsColumn,
    StopColumn,
    TimeColumn,
    SseColumn,
    DiffColumn,
    AriColumn,
    AmiColumn,
    FallbackColumn,
    BackendColumn
  };
  static constexpr int kColumnCount = BackendColumn + 1;

  /// An empty table.
  explicit ResultsModel(QObject* parent = nullptr);

  /// Shows `outcome` (null clears the table). An outcome that only completes more rows of the
  /// one shown (the same run, grown) updates those rows, so the selection stays; any other
  /// resets the table.
  void setOutcome(std::shared_ptr<const RunOutcome> outcome);
  /// Run `run` (RunProgress::run) of job `job` (RunOutcome::job) is computing: the rows of that
  /// job not yet complete say "running…", "comparing with fp64…" or "waiting". The rows of
  /// another job's outcome are not affected.
  void setActiveRun(int job, int run);
  /// `job` ended before it finished: its rows not complete say "cancelled" when it was
  /// cancelled, "not finished" when it failed.
  void setRunEnded(int job, bool cancelled);
  /// The job setActiveRun() last named; 0 before the first.
  int activeJob() const { return activeJob_; }
  /// The result shown; null when the table is empty.
  std::shared_ptr<const RunOutcome> outcome() const { return outcome_; }

  /// The stop column's text, e.g. "converged" or "iteration cap (300) — not converged".
  static QString stopText(const KMeansResult& result, int maxIterations);
  /// A run's time as the table shows it: three significant digits, in ms below a second ("4.12
  /// ms", "412 ms", "1.31 s", "22.6 s", "103 s"): a GPU run of a small photo takes a few
  /// milliseconds, a CPU run of a large one minutes.
  static QString durationText(double seconds);
  /// The complete rows as tab-separated text for the clipboard (a spreadsheet takes it as
  /// columns): a header line, then one line per complete row with the raw values at full
  /// precision (time in seconds; Diff %, ARI and AMI empty for the reference). Empty when no
  /// row is complete.
  QString tableText() const;

  /// QAbstractTableModel: one row per run, kColumnCount columns.
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  /// The Stop column of a row not yet complete, and its tooltip.
  QString pendingText(int row) const;
  QString pendingToolTip(int row) const;
  /// Rows [readyRows(), rowCount()) of the outcome shown changed their pending text.
  void pendingChanged();

  std::shared_ptr<const RunOutcome> outcome_;
  int activeJob_ = 0;
  int activeRun_ = -1;  ///< of activeJob_; -1 once it ended
  int endedJob_ = 0;    ///< the outcome shown's job, once it ended unfinished
  bool endedCancelled_ = false;
};

}  // namespace kmseg::gui
