// SPDX-License-Identifier: MIT
#include "params_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QDoubleValidator>
#include <QFormLayout>
#include <QGridLayout>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

#include <cmath>
#include <functional>
#include <limits>
#include <utility>

#include "kmseg/metrics.h"

namespace kmseg::gui {

namespace {

QString qs(std::string_view s) {
  return QString::fromUtf8(s.data(), qsizetype(s.size()));
}

void selectData(QComboBox* box, const QString& value) {
  const int i = box->findData(value);
  if (i >= 0) box->setCurrentIndex(i);
}

std::string dataOf(const QComboBox* box) {
  return box->currentData().toString().toStdString();
}

QString toleranceText(double tolerance) {
  return QLocale::c().toString(tolerance, 'g', 6);
}

}  // namespace

/// The tolerance field's validator: numbers in [0, 1], C locale, scientific notation allowed.
/// Text it does not accept is replaced by `last()` when editing ends (Return, or the focus
/// leaving the field), as a spin box goes back to its last valid value.
class ToleranceValidator : public QDoubleValidator {
 public:
  ToleranceValidator(std::function<QString()> last, QObject* parent)
      : QDoubleValidator(0.0, 1.0, 30, parent), last_(std::move(last)) {
    setNotation(QDoubleValidator::ScientificNotation);
    setLocale(QLocale::c());
  }
  void fixup(QString& input) const override { input = last_(); }
  bool accepts(QString text) const {
    int pos = 0;
    return validate(text, pos) == QValidator::Acceptable;
  }

 private:
  std::function<QString()> last_;
};

/// The seed field's validator: a decimal number of 1 to 20 digits that fits in 64 bits (every
/// seed `kmseg --seed` takes). Empty text may still become one; anything else is refused as it
/// is typed. Text that is not a seed when editing ends is replaced by `last()`.
class SeedValidator : public QValidator {
 public:
  SeedValidator(std::function<QString()> last, QObject* parent)
      : QValidator(parent), last_(std::move(last)) {}
  State validate(QString& input, int&) const override {
    if (input.isEmpty()) return Intermediate;
    if (input.size() > 20) return Invalid;
    for (const QChar c : input)
      if (c < u'0' || c > u'9') return Invalid;
    bool ok = false;
    input.toULongLong(&ok);
    return ok ? Acceptable : Invalid;
  }
  void fixup(QString& input) const override { input = last_(); }
  bool accepts(QString text) const {
    int pos = 0;
    return validate(text, pos) == Acceptable;
  }

 private:
  std::function<QString()> last_;
};

ParamsPanel::ParamsPanel(QWidget* parent) : QWidget(parent) {
  auto* form = new QFormLayout;
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  form->setVerticalSpacing(4);

  k_ = new QSpinBox(this);
  k_->setRange(1, kMaxComparedClusters);
  k_->setToolTip(tr("Number of clusters K (at most the number of distinct pixels)"));
  form->addRow(tr("&K"), k_);

  mode_ = new QComboBox(this);
  for (Mode m : kAllModes) mode_->addItem(qs(modeName(m)), qs(modeName(m)));
  mode_->setToolTip(
      tr("Precision mode of Run: fp64 fp32 fp16 bf16 compute every distance in that precision; "
         "a>b computes in a and falls back to b where the reliability test fails"));
  form->addRow(tr("&Mode"), mode_);

  rho_ = new QDoubleSpinBox(this);
  rho_->setRange(2.01, 1000.0);
  rho_->setDecimals(2);
  rho_->setSingleStep(0.5);
  rho_->setToolTip(tr("Safety factor ρ of the reliability test of the mixed modes (> 2)"));
  form->addRow(tr("&ρ (rho)"), rho_);

  working_ = new QComboBox(this);
  working_->addItem(tr("auto"), QStringLiteral("auto"));
  working_->addItem(QStringLiteral("fp32"), QStringLiteral("fp32"));
  working_->addItem(QStringLiteral("fp64"), QStringLiteral("fp64"));
  working_->setToolTip(
      tr("Working precision of the data and the centroid update; auto is fp64 "
         "for mode fp64 and fp32 otherwise"));
  form->addRow(tr("&Working"), working_);

  init_ = new QComboBox(this);
  init_->addItem(tr("random points"), QStringLiteral("random"));
  init_->addItem(tr("k-means++"), QStringLiteral("kmeans++"));
  init_->setToolTip(tr("Initial centres; every mode of a comparison starts from the same ones"));
  form->addRow(tr("&Init"), init_);

  seed_ = new QLineEdit(this);
  seedValidator_ =
      new SeedValidator([this] { return QString::number(qulonglong(lastSeed_)); }, seed_);
  seed_->setValidator(seedValidator_);
  seed_->setToolTip(tr("Seed of the initial centres (0 to 18446744073709551615)"));
  form->addRow(tr("&Seed"), seed_);

  maxIterations_ = new QSpinBox(this);
  maxIterations_->setRange(1, kMaxIterations);
  maxIterations_->setToolTip(tr("Iteration cap t_max"));
  form->addRow(tr("Max &iterations"), maxIterations_);

  tolerance_ = new QLineEdit(this);
  toleranceValidator_ =
      new ToleranceValidator([this] { return toleranceText(lastTolerance_); }, tolerance_);
  tolerance_->setValidator(toleranceValidator_);
  tolerance_->setToolTip(tr("Stop when the relative centre shift is below this (τ, from 0 to 1)"));
  form->addRow(tr("&Tolerance"), tolerance_);

  cycles_ = new QCheckBox(tr("Stop on a 2-cycle of labels"), this);
  cycles_->setToolTip(tr("Off reproduces the paper's stop rules exactly"));
  form->addRow(cycles_);

  repeats_ = new QCheckBox(tr("Stop on a longer cycle"), this);
  repeats_->setToolTip(
      tr("Also stop when the centres repeat those of 2 to %1 iterations earlier: the run would "
         "repeat them until the iteration cap. Found exactly once the cycle has run twice; the "
         "stop reason says its length (\"4-cycle\"). Off: the paper's stop rules")
          .arg(kRepeatWindow));
  form->addRow(repeats_);

  colorSpace_ = new QComboBox(this);
  colorSpace_->addItem(QStringLiteral("RGB"), QStringLiteral("rgb"));
  colorSpace_->addItem(QStringLiteral("CIE Lab"), QStringLiteral("lab"));
  form->addRow(tr("&Colour space"), colorSpace_);

  normalization_ = new QComboBox(this);
  normalization_->addItem(tr("min–max"), QStringLiteral("minmax"));
  normalization_->addItem(tr("z-score"), QStringLiteral("zscore"));
  form->addRow(tr("&Normalization"), normalization_);

  spatialWeight_ = new QDoubleSpinBox(this);
  spatialWeight_->setRange(0.0, kMaxSpatialWeight);
  spatialWeight_->setDecimals(3);
  spatialWeight_->setSingleStep(0.1);
  spatialWeight_->setToolTip(
      tr("Weight of the x, y columns after normalisation (0 ignores "
         "position)"));
  form->addRow(tr("Spatial &weight"), spatialWeight_);

  backend_ = new QComboBox(this);
  backend_->addItem(tr("Auto"), QStringLiteral("auto"));
  backend_->addItem(tr("CUDA"), QStringLiteral("cuda"));
  backend_->addItem(tr("CPU"), QStringLiteral("cpu"));
  backend_->setToolTip(
      tr("Auto uses the GPU when one answers, else the CPU; a run that fails on the GPU is "
         "done again on the CPU"));
  form->addRow(tr("&Backend"), backend_);

  threads_ = new QSpinBox(this);
  threads_->setRange(0, kMaxThreads);
  threads_->setSpecialValueText(tr("all cores"));
  threads_->setToolTip(tr("CPU threads (0 = all cores)"));
  form->addRow(tr("CPU t&hreads"), threads_);

  palette_ = new QComboBox(this);
  palette_->addItem(tr("distinct"), QStringLiteral("distinct"));
  palette_->addItem(tr("colour-blind safe"), QStringLiteral("cb-safe"));
  form->addRow(tr("&Palette"), palette_);

  maxMegapixels_ = new QDoubleSpinBox(this);
  maxMegapixels_->setRange(0.01, 10000.0);
  maxMegapixels_->setDecimals(2);
  maxMegapixels_->setSuffix(tr(" MP"));
  maxMegapixels_->setToolTip(tr("Images with more pixels are refused (checked from the header)"));
  form->addRow(tr("Pixel &limit"), maxMegapixels_);

  run_ = new QPushButton(tr("Run"), this);
  run_->setToolTip(tr("The fp64 reference and the selected mode (F5)"));
  compare_ = new QPushButton(tr("Compare all modes"), this);
  compare_->setToolTip(tr("The fp64 reference and all nine modes from the same centres (F6)"));
  cancel_ = new QPushButton(tr("Cancel"), this);
  cancel_->setToolTip(tr("Stop the run within one iteration (Esc)"));
  cancel_->setEnabled(false);
  reset_ = new QPushButton(tr("Reset to defaults"), this);
  auto* buttons = new QGridLayout;
  buttons->addWidget(run_, 0, 0);
  buttons->addWidget(cancel_, 0, 1);
  buttons->addWidget(compare_, 1, 0, 1, 2);
  buttons->addWidget(reset_, 2, 0, 1, 2);

  auto* layout = new QVBoxLayout(this);
  layout->addLayout(form);
  layout->addLayout(buttons);
  layout->addStretch(1);

  // Narrow combo boxes: the panel should not take width from the views.
  for (QComboBox* box : findChildren<QComboBox*>()) {
    box->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    box->setMinimumContentsLength(9);
  }

  setParams(defaultParams());

  auto changed = [this] { emit paramsChanged(); };
  for (QComboBox* box : {mode_, working_, init_, colorSpace_, normalization_, palette_})
    connect(box, &QComboBox::currentIndexChanged, this, changed);
  for (QSpinBox* box : {k_, maxIterations_}) connect(box, &QSpinBox::valueChanged, this, changed);
  for (QDoubleSpinBox* box : {rho_, spatialWeight_, maxMegapixels_})
    connect(box, &QDoubleSpinBox::valueChanged, this, changed);
  // As with the tolerance: only a seed the validator accepts is used; an emptied field keeps the
  // last one (and fixup() puts it back when editing ends).
  connect(seed_, &QLineEdit::textChanged, this, [this, changed] {
    if (seedValidator_->accepts(seed_->text())) lastSeed_ = seed_->text().toULongLong();
    changed();
  });
  // Only text the validator accepts becomes the tolerance; while the field holds any other, the
  // last accepted value stays (and fixup() puts it back when editing ends).
  connect(tolerance_, &QLineEdit::textChanged, this, [this, changed] {
    bool ok = false;
    const double v = QLocale::c().toDouble(tolerance_->text(), &ok);
    if (ok && toleranceValidator_->accepts(tolerance_->text())) lastTolerance_ = v;
    changed();
  });
  connect(cycles_, &QCheckBox::toggled, this, changed);
  connect(repeats_, &QCheckBox::toggled, this, changed);
  connect(backend_, &QComboBox::currentIndexChanged, this, [this, changed] {
    changed();
    emit backendChanged();
  });
  connect(threads_, &QSpinBox::valueChanged, this, [this, changed] {
    changed();
    emit backendChanged();
  });
  connect(reset_, &QPushButton::clicked, this, &ParamsPanel::resetRequested);
}

GuiParams ParamsPanel::params() const {
  GuiParams p = defaultParams();
  auto& km = p.workflow.kmeans;
  km.k = k_->value();
  p.mode = parseMode(dataOf(mode_));
  km.rho = rho_->value();
  km.working = parseWorking(dataOf(working_));
  p.workflow.init = parseInit(dataOf(init_));
  p.workflow.seed = lastSeed_;
  km.maxIterations = maxIterations_->value();
  km.tolerance = lastTolerance_;
  km.detectCycles = cycles_->isChecked();
  km.detectRepeats = repeats_->isChecked();
  km.threads = threads_->value();
  p.features.colorSpace = parseColorSpace(dataOf(colorSpace_));
  p.features.normalization = parseNormalization(dataOf(normalization_));
  p.features.spatialWeight = spatialWeight_->value();
  p.backend = parseBackend(dataOf(backend_));
  p.palette = parsePalette(dataOf(palette_));
  p.maxPixels = std::uint64_t(std::llround(maxMegapixels_->value() * 1e6));
  return p;
}

void ParamsPanel::setParams(const GuiParams& p) {
  const auto& km = p.workflow.kmeans;
  k_->setValue(km.k);
  selectData(mode_, qs(modeName(p.mode)));
  rho_->setValue(km.rho);
  selectData(working_, qs(workingName(km.working)));
  selectData(init_, qs(initName(p.workflow.init)));
  lastSeed_ = p.workflow.seed;
  seed_->setText(QString::number(qulonglong(p.workflow.seed)));
  maxIterations_->setValue(km.maxIterations);
  // A tolerance the field would not accept (beyond [0, 1], not finite) gives the default.
  const bool tolerable = toleranceValidator_->accepts(toleranceText(km.tolerance));
  lastTolerance_ = tolerable ? km.tolerance : defaultParams().workflow.kmeans.tolerance;
  tolerance_->setText(toleranceText(lastTolerance_));
  cycles_->setChecked(km.detectCycles);
  repeats_->setChecked(km.detectRepeats);
  selectData(colorSpace_, qs(colorSpaceName(p.features.colorSpace)));
  selectData(normalization_, qs(normalizationName(p.features.normalization)));
  spatialWeight_->setValue(p.features.spatialWeight);
  selectData(backend_, qs(backendName(p.backend)));
  threads_->setValue(km.threads);
  selectData(palette_, qs(paletteName(p.palette)));
  maxMegapixels_->setValue(double(p.maxPixels) / 1e6);
}

}  // namespace kmseg::gui
