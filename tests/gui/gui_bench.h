// SPDX-License-Identifier: MIT
#pragma once

// Times kmseg-gui's "Compare all modes" as a user meets it: the real window on Qt's offscreen
// platform, from the click to the result painted, and each table row shown after it.

#include <QString>

#include <string>
#include <vector>

#include "gui_params.h"

namespace kmseg::gui {

class MainWindow;

/// Wall-clock seconds of each phase, measured on the GUI thread.
struct GuiBenchTimes {
  int width = 0, height = 0;
  int rows = 0;              ///< table rows of the result: the reference and each mode
  std::string engine;        ///< the engine that ran, as the result names it
  double openSeconds = 0.0;  ///< openFile() until the photo is shown and painted
  /// Per repeat: compareAll() until the result is painted: features, engine, every run and
  /// comparison (on a worker thread), then the table, charts and the selected row's maps.
  std::vector<double> resultSeconds;
  /// Per repeat: compareAll() until the window heard of the reference's first iteration
  /// (features, engine, the upload of the features, one iteration), and of the last mode's
  /// last iteration.
  std::vector<double> firstIterationSeconds, lastIterationSeconds;
  /// Per repeat: compareAll() until the window had taken in (table, charts, maps of the row it
  /// shows) the reference's row, the first row to complete, and the row of the panel's mode,
  /// the one it shows at the end.
  std::vector<double> firstRowSeconds, modeRowSeconds;
  /// Per repeat: the Lloyd runs' own seconds (RunOutcome::runSeconds).
  std::vector<double> runSeconds;
  /// Per repeat: building the feature rows, as the worker measured it.
  std::vector<double> featureSeconds;
  /// Last repeat: selecting table row i (after row i - 1; row 0 after the row the result
  /// showed first) until it is painted.
  std::vector<double> rowSeconds;
};

/// Opens `path` in `window` (shown, not yet holding a photo), then `repeats` times compares all
/// modes with `params` and selects every row in turn. Throws std::runtime_error naming the step
/// when the photo cannot be opened, a run fails, or a step takes longer than `timeoutSeconds`.
GuiBenchTimes benchCompareAll(MainWindow& window, const QString& path, const GuiParams& params,
                              int repeats, int timeoutSeconds = 600);

/// The times as JSON (seconds; each per-repeat list in repeat order).
std::string toJson(const GuiBenchTimes& t);

}  // namespace kmseg::gui
