// SPDX-License-Identifier: MIT
#include "results_model.h"

#include <QBrush>
#include <QColor>
#include <QStringList>

#include <cmath>

#include "kmseg/pair_distance.h"

namespace kmseg::gui {

ResultsModel::ResultsModel(QObject* parent) : QAbstractTableModel(parent) {}

namespace {

/// `later` is `earlier` with more rows complete: the same photo, modes and parameters, and the
/// rows of `earlier` unchanged (the same shared rows; a new run that took the same reference
/// counts too, its rows being the same).
bool grows(const RunOutcome& earlier, const RunOutcome& later) {
  if (earlier.image != later.image || earlier.modes != later.modes ||
      earlier.params.workflow != later.params.workflow || earlier.engine != later.engine ||
      earlier.readyRows() > later.readyRows())
    return false;
  if (earlier.reference && earlier.reference != later.reference) return false;
  for (std::size_t i = 0; i < earlier.finished.size(); ++i)
    if (earlier.finished[i] != later.finished[i]) return false;
  return true;
}

}  // namespace

void ResultsModel::setOutcome(std::shared_ptr<const RunOutcome> outcome) {
  if (outcome_ && outcome && grows(*outcome_, *outcome)) {
    const int from = outcome_->readyRows();
    // Another job's rows (a run that took the reference of the one before) may say otherwise.
    const int to = outcome_->job == outcome->job ? outcome->readyRows() : outcome->rowCount();
    outcome_ = std::move(outcome);
    if (to > from) emit dataChanged(index(from, 0), index(to - 1, kColumnCount - 1));
    return;
  }
  beginResetModel();
  outcome_ = std::move(outcome);
  endResetModel();
}

void ResultsModel::setActiveRun(int job, int run) {
  if (job == activeJob_ && run == activeRun_) return;
  const bool shown = outcome_ && (outcome_->job == job || outcome_->job == activeJob_);
  activeJob_ = job;
  activeRun_ = run;
  if (shown) pendingChanged();
}

void ResultsModel::setRunEnded(int job, bool cancelled) {
  if (job == activeJob_) activeRun_ = -1;
  if (!outcome_ || outcome_->job != job) return;
  endedJob_ = job;
  endedCancelled_ = cancelled;
  pendingChanged();
}

void ResultsModel::pendingChanged() {
  if (!outcome_ || outcome_->isComplete()) return;
  emit dataChanged(index(outcome_->readyRows(), 0),
                   index(outcome_->rowCount() - 1, kColumnCount - 1));
}

QString ResultsModel::pendingText(int row) const {
  if (outcome_->job == activeJob_ && activeRun_ >= 0) {
    if (row == activeRun_) return tr("running…");
    if (row < activeRun_) return tr("comparing with fp64…");
    return tr("waiting");
  }
  // The rows of a run that is not going on: cancelled (also by a newer run), or failed.
  if (outcome_->job == endedJob_ && endedCancelled_) return tr("cancelled");
  return tr("not finished");
}

QString ResultsModel::pendingToolTip(int row) const {
  const QString name = outcome_->rowName(row);
  if (outcome_->job == activeJob_ && activeRun_ >= 0)
    return tr("%1 has not finished yet; its row fills in when it has.").arg(name);
  if (outcome_->job == endedJob_ && endedCancelled_)
    return tr("The run was cancelled before %1 had finished.").arg(name);
  return tr("%1 did not finish: the run ended before it.").arg(name);
}

Qt::ItemFlags ResultsModel::flags(const QModelIndex& index) const {
  if (!outcome_ || !index.isValid() || !outcome_->isReady(index.row())) return Qt::NoItemFlags;
  return QAbstractTableModel::flags(index);
}

QString ResultsModel::stopText(const KMeansResult& result, int maxIterations) {
  if (result.stop == StopReason::MaxIterations)
    return tr("iteration cap (%1) — not converged").arg(maxIterations);
  return QString::fromStdString(stopReasonText(result.stop, result.cyclePeriod));
}

QString ResultsModel::durationText(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0.0) return QStringLiteral("—");
  // 0.9995 s and more would round to "1000 ms".
  if (seconds < 0.9995) {
    const double ms = seconds * 1e3;
    const int decimals = ms < 0.9995 ? 3 : ms < 9.995 ? 2 : ms < 99.95 ? 1 : 0;
    return tr("%1 ms").arg(ms, 0, 'f', decimals);
  }
  const int decimals = seconds < 9.995 ? 2 : seconds < 99.95 ? 1 : 0;
  return tr("%1 s").arg(seconds, 0, 'f', decimals);
}

QString ResultsModel::tableText() const {
  if (!outcome_ || outcome_->readyRows() == 0) return {};
  // Seventeen significant digits give back the double; %g drops trailing zeros.
  auto number = [](const QVariant& v) {
    return v.isValid() ? QString::number(v.toDouble(), 'g', 17) : QString();
  };
  QStringList lines;
  lines << QStringList{tr("Mode"),       tr("Iterations"), tr("Stop reason"), tr("Time [s]"),
                       tr("SSE"),        tr("Diff %"),     tr("ARI"),         tr("AMI"),
                       tr("Fallback %"), tr("Backend")}
               .join(QLatin1Char('\t'));
  for (int row = 0; row < outcome_->readyRows(); ++row) {
    auto raw = [&](int column) { return data(index(row, column), Qt::UserRole); };
    QStringList cells;
    cells << raw(ModeColumn).toString() << raw(IterationsColumn).toString()
          << data(index(row, StopColumn), Qt::DisplayRole).toString() << number(raw(TimeColumn))
          << number(raw(SseColumn)) << number(raw(DiffColumn)) << number(raw(AriColumn))
          << number(raw(AmiColumn)) << number(raw(FallbackColumn)) << raw(BackendColumn).toString();
    lines << cells.join(QLatin1Char('\t'));
  }
  return lines.join(QLatin1Char('\n')) + QLatin1Char('\n');
}

int ResultsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !outcome_ ? 0 : outcome_->rowCount();
}

int ResultsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant ResultsModel::data(const QModelIndex& index, int role) const {
  if (!outcome_ || !index.isValid() || index.row() >= outcome_->rowCount()) return {};
  const int row = index.row();
  if (!outcome_->isReady(row)) {
    const bool text = role == Qt::DisplayRole || role == Qt::UserRole;
    if (index.column() == ModeColumn && text) return outcome_->rowName(row);
    if (index.column() == StopColumn && role == Qt::DisplayRole) return pendingText(row);
    if (role == Qt::TextAlignmentRole) return QVariant::fromValue(Qt::AlignVCenter | Qt::AlignLeft);
    if (role == Qt::ToolTipRole) return pendingToolTip(row);
    return {};
  }
  const KMeansResult& r = outcome_->result(row);
  const Comparison* c = outcome_->comparison(row);
  const int maxIterations = outcome_->params.workflow.kmeans.maxIterations;
  const bool capped = r.stop == StopReason::MaxIterations;
  const bool overflowed = r.normOverflows > 0;

  if (role == Qt::UserRole) {
    switch (index.column()) {
      case ModeColumn:
        return outcome_->rowName(row);
      case IterationsColumn:
        return r.iterations;
      case StopColumn:
        return int(r.stop);
      case TimeColumn:
        return r.seconds;
      case SseColumn:
        return r.sse;
      case DiffColumn:
        return c ? QVariant(c->diffPercent) : QVariant();
      case AriColumn:
        return c ? QVariant(c->ari) : QVariant();
      case AmiColumn:
        return c ? QVariant(c->ami) : QVariant();
      case FallbackColumn:
        return 100.0 * r.fallbackRatio();
      case BackendColumn:
        return QString::fromStdString(r.backend);
    }
    return {};
  }
  if (role == Qt::DisplayRole) {
    const QString ref = tr("ref");
    switch (index.column()) {
      case ModeColumn:
        return outcome_->rowName(row);
      case IterationsColumn:
        return QString::number(r.iterations);
      case StopColumn:
        return stopText(r, maxIterations);
      case TimeColumn:
        return durationText(r.seconds);
      case SseColumn:
        return QString::number(r.sse, 'f', 4);
      case DiffColumn:
        return c ? QString::number(c->diffPercent, 'f', 4) : ref;
      case AriColumn:
        return c ? QString::number(c->ari, 'f', 5) : ref;
      case AmiColumn:
        return c ? QString::number(c->ami, 'f', 5) : ref;
      case FallbackColumn:
        return QString::number(100.0 * r.fallbackRatio(), 'f', 3);
      case BackendColumn:
        return QString::fromStdString(r.backend);
    }
    return {};
  }
  if (role == Qt::TextAlignmentRole) {
    const bool text = index.column() == ModeColumn || index.column() == StopColumn ||
                      index.column() == BackendColumn;
    return QVariant::fromValue(Qt::AlignVCenter | (text ? Qt::AlignLeft : Qt::AlignRight));
  }
  if (role == Qt::BackgroundRole && (capped || overflowed)) return QBrush(QColor(255, 214, 153));
  if (role == Qt::ForegroundRole && (capped || overflowed)) return QBrush(QColor(110, 50, 0));
  if (role == Qt::ToolTipRole) {
    QStringList tips;
    // The column's own first: the exact time, and the whole backend (the table may cut it).
    if (index.column() == TimeColumn)
      tips << tr("%1 s of Lloyd iterations").arg(r.seconds, 0, 'g', 6);
    if (index.column() == BackendColumn) tips << QString::fromStdString(r.backend);
    if (capped)
      tips << tr("%1 stopped at the iteration cap of %2 without converging: its labels were "
                 "still changing (%3 in the last iteration).")
                  .arg(outcome_->rowName(row))
                  .arg(maxIterations)
                  .arg(r.trace.empty() ? 0 : r.trace.back().changed);
    if (capped && !outcome_->params.workflow.kmeans.detectRepeats)
      tips << tr(
          "\"Stop on a longer cycle\" ends a run whose centres repeat those of an earlier "
          "iteration.");
    if (overflowed)
      tips << QString::fromStdString(normOverflowNote(r.mode, r.normOverflows, r.labels.size())) +
                  QStringLiteral(".");
    if (!r.backendNote.empty()) tips << QString::fromStdString(r.backendNote) + QStringLiteral(".");
    if (row == 0) tips << tr("The fp64 reference every mode is compared with.");
    if (!tips.isEmpty()) return tips.join(QStringLiteral("\n"));
  }
  return {};
}

QVariant ResultsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (role != Qt::DisplayRole || orientation != Qt::Horizontal) return {};
  switch (section) {
    case ModeColumn:
      return tr("Mode");
    case IterationsColumn:
      return tr("Iter.");
    case StopColumn:
      return tr("Stop reason");
    case TimeColumn:
      return tr("Time");
    case SseColumn:
      return tr("SSE");
    case DiffColumn:
      return tr("Diff %");
    case AriColumn:
      return tr("ARI");
    case AmiColumn:
      return tr("AMI");
    case FallbackColumn:
      return tr("Fallback %");
    case BackendColumn:
      return tr("Backend");
  }
  return {};
}

}  // namespace kmseg::gui
