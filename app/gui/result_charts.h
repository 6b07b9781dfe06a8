// SPDX-License-Identifier: MIT
#pragma once

#include <QTabWidget>

#include <QPointF>

#include <memory>
#include <vector>

#include "controller.h"

class QAbstractAxis;
class QAbstractSeries;
class QChart;
class QChartView;
class QGraphicsSimpleTextItem;

namespace kmseg::gui {

/// Two Qt Charts of a result: time against Diff % per mode (a labelled scatter), and the labels
/// changed per iteration of each run (convergence curves, logarithmic y axis).
class ResultCharts : public QTabWidget {
  Q_OBJECT

 public:
  /// Two empty charts, one per tab.
  explicit ResultCharts(QWidget* parent = nullptr);

  /// Plots the complete rows of `outcome`; null clears both charts.
  void setOutcome(const std::shared_ptr<const RunOutcome>& outcome);

  /// The charts (for the tests).
  QChart* timeDiffChart() const { return timeDiff_; }
  QChart* convergenceChart() const { return convergence_; }

  /// Below this width the convergence chart hides its legend (nine names would leave the curves
  /// no room); hovering a curve names its run at any width.
  static constexpr int kLegendMinWidth = 360;

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  /// A point label of the time/Diff chart, drawn beside its point (not centred above it, as
  /// Qt Charts would, which clips labels at the plot's edges).
  struct Label {
    QPointF value;  ///< the point, in axis units
    QAbstractSeries* series = nullptr;
    QGraphicsSimpleTextItem* item = nullptr;
    QString text;  ///< the whole label; the item shows it elided where the plot is too narrow
  };
  /// Places the point labels and fits the Diff axis's title to the plot's height (called
  /// whenever the plot area changes; the convergence chart's y axis is fitted the same way).
  void placeLabels();

  QChart* timeDiff_ = nullptr;
  QChart* convergence_ = nullptr;
  std::vector<Label> labels_;
  QAbstractAxis* diffAxis_ = nullptr;  ///< the time/Diff chart's y axis
  QString diffTitle_;                  ///< its title, and a short form for low plots
  QString diffTitleShort_;
  QAbstractAxis* changedAxis_ = nullptr;  ///< the convergence chart's y axis
};

}  // namespace kmseg::gui
