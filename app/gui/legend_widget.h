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
  /// beyond the palette are not shown (K is limited only by the label type). `centres`, when
  /// given, is each cluster's row tooltip (its centre in the photo's units, centreText).
  void setClusters(const std::vector<Rgb8>& palette, const std::vector<std::int64_t>& sizes,
                   const std::vector<double>& diffPercent,
                   const std::vector<QString>& centres = {});
  /// Removes every row.
  void clearClusters();
};

/// A cluster centre in the photo's units, for the legend: "Centre: R 200.5, G 120.0, B 80.3 at
/// column 31.5, row 12.0" (Lab: "L* 52.1, a* 10.3, b* -4.0"); a position that the features do
/// not keep (spatial weight 0) is left out. `raw` holds the five values (c0, c1, c2, x, y).
QString centreText(const double (&raw)[5], bool lab);

}  // namespace kmseg::gui
