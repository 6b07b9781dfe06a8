// SPDX-License-Identifier: MIT
#pragma once

#include <QWidget>

#include <cstdint>

#include "gui_params.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLineEdit;
class QPushButton;
class QSpinBox;

namespace kmseg::gui {

class SeedValidator;
class ToleranceValidator;

/// The parameters side panel: one editor per run parameter, plus the Run, Compare all modes,
/// Cancel and Reset to defaults buttons. It only edits values; the window decides what to do.
class ParamsPanel : public QWidget {
  Q_OBJECT

 public:
  /// The editors, showing defaultParams().
  explicit ParamsPanel(QWidget* parent = nullptr);

  /// The values as edited. The tolerance is the last value its field accepted (a number in
  /// [0, 1]): text the field does not accept is never used, and is replaced by that value when
  /// editing ends.
  GuiParams params() const;
  /// Shows `params` in the editors; a tolerance the field does not accept shows the default.
  void setParams(const GuiParams& params);

  /// The buttons and some editors (for the window and the tests).
  QPushButton* runButton() const { return run_; }
  QPushButton* compareButton() const { return compare_; }
  QPushButton* cancelButton() const { return cancel_; }
  QPushButton* resetButton() const { return reset_; }
  QComboBox* modeBox() const { return mode_; }
  QComboBox* backendBox() const { return backend_; }
  QSpinBox* kBox() const { return k_; }
  QSpinBox* maxIterationsBox() const { return maxIterations_; }
  QLineEdit* seedEdit() const { return seed_; }
  QLineEdit* toleranceEdit() const { return tolerance_; }

 signals:
  /// Any value changed.
  void paramsChanged();
  /// The backend or the thread count changed.
  void backendChanged();
  void resetRequested();

 private:
  QSpinBox* k_ = nullptr;
  QComboBox* mode_ = nullptr;
  QDoubleSpinBox* rho_ = nullptr;
  QComboBox* working_ = nullptr;
  QComboBox* init_ = nullptr;
  QLineEdit* seed_ = nullptr;
  QSpinBox* maxIterations_ = nullptr;
  QLineEdit* tolerance_ = nullptr;
  QCheckBox* cycles_ = nullptr;
  QCheckBox* repeats_ = nullptr;
  QComboBox* colorSpace_ = nullptr;
  QComboBox* normalization_ = nullptr;
  QDoubleSpinBox* spatialWeight_ = nullptr;
  QComboBox* backend_ = nullptr;
  QSpinBox* threads_ = nullptr;
  QComboBox* palette_ = nullptr;
  QDoubleSpinBox* maxMegapixels_ = nullptr;
  QPushButton* run_ = nullptr;
  QPushButton* compare_ = nullptr;
  QPushButton* cancel_ = nullptr;
  QPushButton* reset_ = nullptr;
  SeedValidator* seedValidator_ = nullptr;
  std::uint64_t lastSeed_ = 0;  ///< the seed field's last accepted value
  ToleranceValidator* toleranceValidator_ = nullptr;
  double lastTolerance_ = 1e-8;  ///< the tolerance field's last accepted value
};

}  // namespace kmseg::gui
