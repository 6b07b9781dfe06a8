// SPDX-License-Identifier: MIT
#pragma once

#include <QTableWidget>

#include <cstdint>
#include <vector>

#include "kmseg/export.h"

namespace kmseg::gui {

/// The colour legend: one row per reference cluster with its colour, its pixel count and the
/// share of its pixels the selected mode labels differently (after alignment).
class LegendWidget : public QTableWidget {
  Q_OBJECT

 public:
  /// An empty legend.
  explicit LegendWidget(QWidget* parent = nullptr);

  /// Fills the legend; `diffPercent` may be empty (the reference itself is selected). Rows
  /// beyond the palette are not shown (K is limited only by the label type).
  void setClusters(const std::vector<Rgb8>& palette, const std::vector<std::int64_t>& sizes,
                   const std::vector<double>& diffPercent);
  /// Removes every row.
  void clearClusters();
};

}  // namespace kmseg::gui
