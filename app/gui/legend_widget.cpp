// SPDX-License-Identifier: MIT
#include "legend_widget.h"

#include <QHeaderView>
#include <QPainter>
#include <QPixmap>

#include <algorithm>
#include <cmath>

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

QString centreText(const double (&raw)[5], bool lab) {
  const char* names[3] = {"R", "G", "B"};
  const char* labNames[3] = {"L*", "a*", "b*"};
  QString text = LegendWidget::tr("Centre: ");
  for (int c = 0; c < 3; ++c) {
    if (c > 0) text += QStringLiteral(", ");
    text += QStringLiteral("%1 %2")
                .arg(QLatin1String(lab ? labNames[c] : names[c]))
                .arg(raw[c], 0, 'f', 1);
  }
  if (std::isfinite(raw[3]) && std::isfinite(raw[4]))
    text += LegendWidget::tr(" at column %1, row %2").arg(raw[3], 0, 'f', 1).arg(raw[4], 0, 'f', 1);
  return text;
}

void LegendWidget::setClusters(const std::vector<Rgb8>& palette,
                               const std::vector<std::int64_t>& sizes,
                               const std::vector<double>& diffPercent,
                               const std::vector<QString>& centres) {
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
    if (std::size_t(i) < centres.size())
      for (int col = 0; col < 3; ++col) item(i, col)->setToolTip(centres[std::size_t(i)]);
  }
}

void LegendWidget::clearClusters() {
  setRowCount(0);
}

}  // namespace kmseg::gui
