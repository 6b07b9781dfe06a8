// SPDX-License-Identifier: MIT
#include "result_charts.h"

#include <QChart>
#include <QChartView>
#include <QCursor>
#include <QFontMetricsF>
#include <QGraphicsLayout>
#include <QGraphicsSimpleTextItem>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QPen>
#include <QResizeEvent>
#include <QScatterSeries>
#include <QToolTip>
#include <QValueAxis>

#include <algorithm>
#include <cmath>
#include <iterator>

namespace kmseg::gui {

namespace {

QChart* makeChart(const QString& title) {
  auto* chart = new QChart;
  chart->setTitle(title);
  chart->setAnimationOptions(QChart::NoAnimation);
  chart->setMargins(QMargins(4, 4, 4, 4));
  chart->layout()->setContentsMargins(0, 0, 0, 0);
  chart->setBackgroundRoundness(0);
  QFont f = chart->titleFont();
  f.setPointSizeF(f.pointSizeF() * 0.9);
  chart->setTitleFont(f);
  return chart;
}

QChartView* makeView(QChart* chart, QWidget* parent) {
  auto* view = new QChartView(chart, parent);
  view->setRenderHint(QPainter::Antialiasing);
  return view;
}

// One colour per mode, the same in both charts (Tableau 10); the reference is drawn in black.
QColor runColour(const RunOutcome& o, int row) {
  static const QColor kColours[] = {QColor(0x1f, 0x77, 0xb4), QColor(0xff, 0x7f, 0x0e),
                                    QColor(0x2c, 0xa0, 0x2c), QColor(0xd6, 0x27, 0x28),
                                    QColor(0x94, 0x67, 0xbd), QColor(0x8c, 0x56, 0x4b),
                                    QColor(0xe3, 0x77, 0xc2), QColor(0x7f, 0x7f, 0x7f),
                                    QColor(0xbc, 0xbd, 0x22), QColor(0x17, 0xbe, 0xcf)};
  if (row <= 0) return Qt::black;
  const Mode mode = o.modes[std::size_t(row - 1)];
  for (std::size_t i = 0; i < kAllModes.size(); ++i)
    if (kAllModes[i] == mode) return kColours[i % std::size(kColours)];
  return Qt::black;
}

// Gives `axis` its long title when the title fits along `room` pixels, else the short one. A
// new title changes the plot area, whose signal calls this again: it then changes nothing.
void fitTitle(QAbstractAxis* axis, const QString& longTitle, const QString& shortTitle,
              double room) {
  if (!axis) return;
  const QString& want = QFontMetricsF(axis->titleFont()).horizontalAdvance(longTitle) <= room
                            ? longTitle
                            : shortTitle;
  if (axis->titleText() != want) axis->setTitleText(want);
}

// A round upper bound for an axis: 1, 2, 2.5 or 5 times a power of ten above `v`.
double niceCeil(double v) {
  if (!(v > 0.0)) return 1.0;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * p >= v) return m * p;
  return 10.0 * p;
}

}  // namespace

ResultCharts::ResultCharts(QWidget* parent) : QTabWidget(parent) {
  timeDiff_ = makeChart(tr("Time against disagreement with fp64"));
  convergence_ = makeChart(tr("Labels changed per iteration"));
  addTab(makeView(timeDiff_, this), tr("Time vs Diff %"));
  addTab(makeView(convergence_, this), tr("Convergence"));
  connect(timeDiff_, &QChart::plotAreaChanged, this, &ResultCharts::placeLabels);
  connect(convergence_, &QChart::plotAreaChanged, this, [this](const QRectF& plot) {
    fitTitle(changedAxis_, tr("labels changed"), tr("changed"), plot.height());
  });
  setOutcome(nullptr);
}

void ResultCharts::setOutcome(const std::shared_ptr<const RunOutcome>& outcome) {
  for (const Label& label : labels_) delete label.item;
  labels_.clear();
  diffAxis_ = changedAxis_ = nullptr;  // deleted below with the other axes
  for (QChart* chart : {timeDiff_, convergence_}) {
    chart->removeAllSeries();
    for (QAbstractAxis* axis : chart->axes()) {
      chart->removeAxis(axis);
      delete axis;
    }
  }

  // Time against Diff %: one single-point series per mode, in the mode's colour. Diff % spans
  // orders of magnitude, so it is on a log axis; a Diff of exactly 0 is drawn on the axis floor
  // and its label says "(0)". Points that would overlap share one label.
  timeDiff_->legend()->setVisible(false);
  struct Point {
    int row;
    double time;
    double diff;
  };
  std::vector<Point> points;
  QFont labelFont = timeDiff_->font();
  labelFont.setPointSizeF(labelFont.pointSizeF() * 0.9);
  double maxTime = 0.0, maxDiff = 0.0, minPositive = 0.0;
  if (outcome) {
    for (int row = 1; row < outcome->readyRows(); ++row) {
      const Point p{row, outcome->result(row).seconds, outcome->comparison(row)->diffPercent};
      points.push_back(p);
      maxTime = std::max(maxTime, p.time);
      maxDiff = std::max(maxDiff, p.diff);
      if (p.diff > 0.0 && (minPositive == 0.0 || p.diff < minPositive)) minPositive = p.diff;
    }
  }
  // Milliseconds when every run took less than a second (a GPU's runs), as the table shows them.
  const bool ms = !points.empty() && maxTime < 1.0;
  if (ms) {
    for (Point& p : points) p.time *= 1e3;
    maxTime *= 1e3;
  }
  auto* timeAxis = new QValueAxis;
  timeAxis->setTitleText(ms ? tr("time [ms]") : tr("time [s]"));
  timeAxis->setLabelFormat("%g");
  timeAxis->setRange(0.0, niceCeil(maxTime * 1.15));
  timeAxis->setTickCount(6);
  const bool logScale = maxDiff > 0.0;
  double bottom = 0.0, top = 1.0;
  QAbstractAxis* diffAxis = nullptr;
  if (logScale) {
    // Zeros are drawn at `bottom`, a decade below the smallest non-zero Diff; the axis starts a
    // little lower so that their markers are not cut by the plot's edge.
    bottom = std::pow(10.0, std::floor(std::log10(minPositive)) - 1.0);
    top = std::pow(10.0, std::ceil(std::log10(maxDiff * 1.5)));
    auto* axis = new QLogValueAxis;
    axis->setBase(10.0);
    axis->setRange(bottom / 2.0, top);
    axis->setLabelFormat("%g");
    diffTitle_ = tr("Diff % (log; 0 at the bottom)");
    diffTitleShort_ = tr("Diff % (log)");
    diffAxis = axis;
  } else {
    auto* axis = new QValueAxis;
    axis->setRange(0.0, 1.0);
    axis->setLabelFormat("%g");
    diffTitle_ = diffTitleShort_ = tr("Diff %");
    diffAxis = axis;
  }
  diffAxis->setTitleText(diffTitle_);
  diffAxis_ = diffAxis;
  timeDiff_->addAxis(timeAxis, Qt::AlignBottom);
  timeDiff_->addAxis(diffAxis, Qt::AlignLeft);

  // Position as a fraction of each axis, to find points whose labels would collide.
  const double timeTop = timeAxis->max() > 0.0 ? timeAxis->max() : 1.0;
  auto plotted = [&](double d) { return logScale ? std::max(d, bottom) : d; };
  auto fx = [&](const Point& p) { return p.time / timeTop; };
  auto fy = [&](const Point& p) {
    return logScale ? std::log10(plotted(p.diff) / bottom) / std::log10(top / bottom)
                    : p.diff / top;
  };
  // Single-linkage groups: a point joins every group it is close to (labels run to the side
  // of a point, so "close" is wider in x than in y).
  auto close = [&](const Point& a, const Point& b) {
    return std::abs(fx(a) - fx(b)) < 0.2 && std::abs(fy(a) - fy(b)) < 0.07;
  };
  std::vector<std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < points.size(); ++i) {
    std::vector<std::size_t> merged{i};
    for (auto g = groups.begin(); g != groups.end();) {
      if (std::any_of(g->begin(), g->end(),
                      [&](std::size_t j) { return close(points[i], points[j]); })) {
        merged.insert(merged.end(), g->begin(), g->end());
        g = groups.erase(g);
      } else {
        ++g;
      }
    }
    groups.push_back(std::move(merged));
  }
  for (const Point& p : points) {
    auto* s = new QScatterSeries;
    s->setName(outcome->rowName(p.row));
    s->setMarkerSize(10.0);
    s->setColor(runColour(*outcome, p.row));
    s->setBorderColor(runColour(*outcome, p.row).darker(130));
    s->append(p.time, plotted(p.diff));
    timeDiff_->addSeries(s);
    s->attachAxis(timeAxis);
    s->attachAxis(diffAxis);
  }
  for (auto& members : groups) {
    std::sort(members.begin(), members.end(),
              [&](std::size_t a, std::size_t b) { return points[a].row < points[b].row; });
    QStringList names;
    for (std::size_t i : members) names << outcome->rowName(points[i].row);
    // At most three names per label.
    QString text = names.mid(0, 3).join(QStringLiteral(", "));
    if (names.size() > 3) text += tr(" +%1").arg(names.size() - 3);
    if (points[members.front()].diff == 0.0) text += QStringLiteral(" (0)");
    // The label sits beside the group's rightmost point.
    const auto right = *std::max_element(members.begin(), members.end(), [&](auto a, auto b) {
      return points[a].time < points[b].time;
    });
    auto* item = new QGraphicsSimpleTextItem(text, timeDiff_);
    item->setFont(labelFont);
    item->setBrush(QColor(40, 40, 40));
    item->setZValue(10.0);
    labels_.push_back({QPointF(points[right].time, plotted(points[right].diff)),
                       timeDiff_->series().at(int(right)), item, text});
  }
  placeLabels();

  // Convergence: changed labels per iteration, log scale (iterations with no change are not
  // drawable on it and are left out). The fp64 mode reuses the reference run, so it is drawn once.
  auto* iterAxis = new QValueAxis;
  iterAxis->setTitleText(tr("iteration"));
  iterAxis->setLabelFormat("%d");
  auto* changedAxis = new QLogValueAxis;
  changedAxis->setTitleText(tr("labels changed"));
  changedAxis->setBase(10.0);
  changedAxis->setLabelFormat("%g");
  convergence_->addAxis(iterAxis, Qt::AlignBottom);
  convergence_->addAxis(changedAxis, Qt::AlignLeft);
  changedAxis_ = changedAxis;
  convergence_->legend()->setAlignment(Qt::AlignRight);
  int maxIter = 1;
  double maxChanged = 10.0;
  if (outcome) {
    const bool fp64Row = outcome->rowOf(Mode::Fp64) > 0;
    for (int row = fp64Row ? 1 : 0; row < outcome->readyRows(); ++row) {
      const KMeansResult& r = outcome->result(row);
      auto* s = new QLineSeries;
      s->setName(outcome->rowName(row));
      QPen pen(runColour(*outcome, row));
      pen.setWidthF(1.5);
      s->setPen(pen);
      for (const IterationStats& st : r.trace) {
        if (st.changed <= 0) continue;
        s->append(st.iteration, double(st.changed));
        maxChanged = std::max(maxChanged, double(st.changed));
      }
      maxIter = std::max(maxIter, r.iterations);
      const QString name = outcome->rowName(row);
      connect(s, &QLineSeries::hovered, this, [name](const QPointF&, bool state) {
        if (state) QToolTip::showText(QCursor::pos(), name);
      });
      convergence_->addSeries(s);
      s->attachAxis(iterAxis);
      s->attachAxis(changedAxis);
    }
  }
  iterAxis->setRange(0, maxIter);
  changedAxis->setRange(1.0, std::pow(10.0, std::ceil(std::log10(maxChanged))));
}

void ResultCharts::resizeEvent(QResizeEvent* event) {
  QTabWidget::resizeEvent(event);
  convergence_->legend()->setVisible(width() >= kLegendMinWidth);
}

void ResultCharts::placeLabels() {
  const QRectF plot = timeDiff_->plotArea();
  // The long title of the Diff axis runs along the plot's height; below that it would be cut.
  fitTitle(diffAxis_, diffTitle_, diffTitleShort_, plot.height());
  constexpr double kGap = 8.0;        // between a point and its label
  constexpr double kMinWidth = 24.0;  // narrower than this a label says nothing: hidden
  for (const Label& label : labels_) {
    const QPointF at = timeDiff_->mapToPosition(label.value, label.series);
    const QFontMetricsF metrics(label.item->font());
    // Right of the point, or left of it where the plot ends; where neither side holds the whole
    // label (a narrow plot), the wider side holds it elided.
    const double right = plot.right() - (at.x() + kGap);
    const double left = (at.x() - kGap) - plot.left();
    const double width = metrics.horizontalAdvance(label.text);
    QString text = label.text;
    bool onRight = width <= right || (width > left && right >= left);
    const double room = onRight ? right : left;
    if (width > room) text = metrics.elidedText(label.text, Qt::ElideRight, room);
    label.item->setText(text);
    label.item->setVisible(room >= kMinWidth || width <= room);
    const QRectF box = label.item->boundingRect();
    const double x = onRight ? at.x() + kGap : at.x() - kGap - box.width();
    const double y = std::clamp(at.y() - box.height() / 2.0, plot.top(),
                                std::max(plot.top(), plot.bottom() - box.height()));
    label.item->setPos(x, y);
  }
}

}  // namespace kmseg::gui
