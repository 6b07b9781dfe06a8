// SPDX-License-Identifier: MIT
#include "legend_widget.h"

#include <QHeaderView>
#include <QPainter>
#include <QPixmap>

#include <algorithm>

namespace kmseg::gui {

namespace {

QIcon swatch(const Rgb8& c) {
  QPixmap pm(14, 14);
  pm.fill(QColor(c.r, c.g, c.b));
  QPainter p(&pm);
  p.setPen(QColor(0, 0, 0, 120));
  p.drawRect(0, 0, 13, 13);
  return QIcon(pm);
}

QTableWidgetItem* numberItem(const QString& text, double value) {
  auto* item = new QTableWidgetItem(text);
  item->setData(Qt::UserRole, value);
  item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
  return item;
}

}  // namespace

LegendWidget::LegendWidget(QWidget* parent) : QTableWidget(parent) {
  setColumnCount(3);
  setHorizontalHeaderLabels({tr("Cluster"), tr("Pixels"), tr("Diff %")});
  verticalHeader()->setVisible(false);
  verticalHeader()->setDefaultSectionSize(fontMetrics().height() + 4);
  horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  setEditTriggers(QAbstractItemView::NoEditTriggers);
  setSelectionMode(QAbstractItemView::NoSelection);
  setToolTip(
      tr("Clusters of the fp64 reference: colour, pixel count, and the share of their "
         "pixels the selected mode labels differently"));
}

void LegendWidget::setClusters(const std::vector<Rgb8>& palette,
                               const std::vector<std::int64_t>& sizes,
                               const std::vector<double>& diffPercent) {
  const int rows = int(std::min(palette.size(), sizes.size()));
  setRowCount(rows);
  for (int i = 0; i < rows; ++i) {
    auto* id = new QTableWidgetItem(swatch(palette[std::size_t(i)]), QString::number(i));
    setItem(i, 0, id);
    setItem(i, 1,
            numberItem(QString::number(sizes[std::size_t(i)]), double(sizes[std::size_t(i)])));
    if (std::size_t(i) < diffPercent.size()) {
      const double d = diffPercent[std::size_t(i)];
      setItem(i, 2, numberItem(QString::number(d, 'f', 2), d));
    } else {
      setItem(i, 2, new QTableWidgetItem(QStringLiteral("—")));
    }
  }
}

void LegendWidget::clearClusters() {
  setRowCount(0);
}

}  // namespace kmseg::gui
