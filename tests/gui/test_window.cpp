// SPDX-License-Identifier: MIT
// The main window and its controller, driven as a user would, on the offscreen platform. Every
// number the window shows is checked against the core library run directly on the same input.

#include <QAction>
#include <QApplication>
#include <QClipboard>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QGuiApplication>
#include <QLabel>
#include <QLineEdit>
#include <QLineSeries>
#include <QMenu>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollBar>
#include <QSettings>
#include <QSignalSpy>
#include <QSlider>
#include <QTableView>
#include <QTest>
#include <QTimer>
#include <QUrl>
#include <QWheelEvent>
#include <QtCharts/QChart>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/resource.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>

#include "controller.h"
#include "failing_gpu.h"
#include "gui_test_util.h"
#include "image_views.h"
#if defined(KMSEG_HAVE_CUDA)
#include "kmseg/cuda_engine.h"
#endif
#include "kmseg/engine.h"
#include "kmseg/error.h"
#include "kmseg/export.h"
#include "kmseg/features.h"
#include "kmseg/report.h"
#include "legend_widget.h"
#include "main_window.h"
#include "params_panel.h"
#include "result_charts.h"
#include "results_model.h"

namespace {

using namespace kmseg;
using namespace kmseg::gui;
using kmseg::test::waitFor;

QString tempFile(const std::filesystem::path& dir, const std::string& name) {
  return QString::fromStdString((dir / name).string());
}

class GuiWindow : public ::testing::Test {
 protected:
  void SetUp() override {
    QSettings().clear();
    window_ = std::make_unique<MainWindow>();
    window_->resize(1280, 800);
    window_->show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(window_.get()));
  }
  void TearDown() override {
    // Close any dialog still open before the window goes.
    for (auto* box : window_->findChildren<QMessageBox*>()) box->close();
    window_.reset();
    QSettings().clear();
  }

  Controller* controller() const { return window_->controller(); }

  /// Opens `path` and waits for it to be shown.
  void open(const QString& path) {
    window_->openFile(path);
    ASSERT_TRUE(waitFor([&] {
      return !controller()->isLoading() && controller()->image() &&
             controller()->image()->path == path;
    })) << path.toStdString();
  }

  /// Small, fast parameters on the CPU engine.
  static GuiParams fastParams(int k = 4, int maxIterations = 12) {
    GuiParams p = defaultParams();
    p.backend = Backend::Cpu;
    p.workflow.kmeans.k = k;
    p.workflow.kmeans.maxIterations = maxIterations;
    return p;
  }

  /// Runs through the parameters panel and the window's own action; waits for the result.
  void runAndWait(const GuiParams& p, bool allModes) {
    window_->paramsPanel()->setParams(p);
    QSignalSpy finished(controller(), &Controller::runFinished);
    if (allModes)
      window_->compareAll();
    else
      window_->runSelected();
    ASSERT_TRUE(waitFor([&] { return finished.count() == 1 && !controller()->isBusy(); }))
        << window_->lastError().toStdString();
  }

  /// The core library's workflow on the same file, run directly.
  static WorkflowResult expected(const QString& path, const GuiParams& p,
                                 const std::vector<Mode>& modes) {
    const Image img = loadImage(path.toStdString());
    const Matrix features = makeFeatures(img, p.features);
    auto engine = makeCpuEngine(p.workflow.kmeans.threads);
    return runWorkflow(*engine, features, modes, p.workflow);
  }

  QMessageBox* errorBox() const { return window_->findChild<QMessageBox*>("errorBox"); }

  /// Opens `path` and runs fp16>fp32 with `p` (whose mode it sets); returns the outcome.
  std::shared_ptr<const RunOutcome> firstFp16Fp32Run(const QString& path, GuiParams& p) {
    open(path);
    p.mode = Mode::Fp16Fp32;
    runAndWait(p, false);
    return controller()->outcome();
  }

  std::unique_ptr<MainWindow> window_;
};

TEST_F(GuiWindow, OpensAnImageAndShowsItsSizeAndTheBackend) {
  const QString path = kmseg::test::smallPhoto("gui-open");
  open(path);
  EXPECT_TRUE(window_->sizeText().contains(QStringLiteral("60 × 40")))
      << window_->sizeText().toStdString();
  EXPECT_EQ(window_->views()->view(ImageViews::Original)->imageSize(), QSize(60, 40));
  // The backend probe reports the engine Auto gives: the CPU in a build without CUDA.
  ASSERT_TRUE(waitFor([&] {
    return window_->backendText().contains(QStringLiteral("CPU (")) ||
           window_->backendText().contains(QStringLiteral("NVIDIA")) ||
           window_->backendText().contains(QStringLiteral("GPU"));
  }));
  EXPECT_EQ(window_->recentFiles().value(0), QFileInfo(path).absoluteFilePath());
  EXPECT_EQ(QSettings().value("recentFiles").toStringList().value(0),
            QFileInfo(path).absoluteFilePath());
}

// "Stop on a longer cycle" reaches the run: uniform fp16 on coffee.png at K = 8 stops as the
// core library's run with the repeat rule does (a 4-cycle before the cap), and the stop reason
// names the cycle's length, not highlighted as a cap is.
TEST_F(GuiWindow, TheRepeatRuleBoxEndsARunThatCycles) {
  const QString path =
      QString::fromStdString(kmseg::test::sourcePath("samples/coffee.png").string());
  open(path);
  GuiParams p = fastParams(8, 300);
  p.mode = Mode::Fp16;
  p.workflow.kmeans.detectRepeats = true;
  runAndWait(p, false);
  EXPECT_TRUE(window_->paramsPanel()->params().workflow.kmeans.detectRepeats);
  const KMeansResult want = expected(path, p, {Mode::Fp16}).modes[0].result;
  ASSERT_EQ(want.stop, StopReason::Repeat);
  ASSERT_LT(want.iterations, 300);
  const ResultsModel* m = window_->resultsModel();
  ASSERT_EQ(m->rowCount(), 2);
  EXPECT_EQ(m->data(m->index(1, ResultsModel::IterationsColumn), Qt::UserRole).toInt(),
            want.iterations);
  EXPECT_EQ(m->data(m->index(1, ResultsModel::StopColumn)).toString().toStdString(),
            std::to_string(want.cyclePeriod) + "-cycle");
  EXPECT_FALSE(m->data(m->index(1, ResultsModel::StopColumn), Qt::BackgroundRole).isValid());
}

TEST_F(GuiWindow, CompareAllModesFillsTheTableWithTheCoreResults) {
  const QString path = kmseg::test::smallPhoto("gui-compare");
  open(path);
  const GuiParams p = fastParams(4, 6);
  runAndWait(p, true);
  const std::vector<Mode> modes(kAllModes.begin(), kAllModes.end());
  const WorkflowResult want = expected(path, p, modes);

  const ResultsModel* m = window_->resultsModel();
  ASSERT_EQ(m->rowCount(), 10);
  ASSERT_EQ(m->columnCount(), ResultsModel::kColumnCount);
  auto cell = [&](int row, int col, int role = Qt::DisplayRole) {
    return m->data(m->index(row, col), role);
  };
  int capped = 0;
  for (int row = 0; row < 10; ++row) {
    const KMeansResult& r = row == 0 ? want.reference : want.modes[std::size_t(row - 1)].result;
    const Comparison* c = row == 0 ? nullptr : &want.modes[std::size_t(row - 1)].comparison;
    SCOPED_TRACE(row);
    EXPECT_EQ(cell(row, ResultsModel::ModeColumn).toString(),
              row == 0 ? QStringLiteral("fp64 reference")
                       : QString::fromUtf8(modeName(modes[std::size_t(row - 1)]).data()));
    EXPECT_EQ(cell(row, ResultsModel::IterationsColumn, Qt::UserRole).toInt(), r.iterations);
    EXPECT_EQ(cell(row, ResultsModel::SseColumn, Qt::UserRole).toDouble(), r.sse);
    EXPECT_EQ(cell(row, ResultsModel::SseColumn).toString(), QString::number(r.sse, 'f', 4));
    EXPECT_DOUBLE_EQ(cell(row, ResultsModel::FallbackColumn, Qt::UserRole).toDouble(),
                     100.0 * r.fallbackRatio());
    EXPECT_EQ(cell(row, ResultsModel::BackendColumn).toString().toStdString(), r.backend);
    EXPECT_GE(cell(row, ResultsModel::TimeColumn, Qt::UserRole).toDouble(), 0.0);
    if (c) {
      EXPECT_EQ(cell(row, ResultsModel::DiffColumn, Qt::UserRole).toDouble(), c->diffPercent);
      EXPECT_EQ(cell(row, ResultsModel::AriColumn, Qt::UserRole).toDouble(), c->ari);
      EXPECT_EQ(cell(row, ResultsModel::AmiColumn, Qt::UserRole).toDouble(), c->ami);
      EXPECT_EQ(cell(row, ResultsModel::DiffColumn).toString(),
                QString::number(c->diffPercent, 'f', 4));
    } else {
      EXPECT_FALSE(cell(row, ResultsModel::DiffColumn, Qt::UserRole).isValid());
      EXPECT_EQ(cell(row, ResultsModel::DiffColumn).toString(), QStringLiteral("ref"));
    }
    const QString stop = cell(row, ResultsModel::StopColumn).toString();
    if (r.stop == StopReason::MaxIterations) {
      ++capped;
      EXPECT_EQ(stop, QStringLiteral("iteration cap (6) — not converged"));
      EXPECT_TRUE(cell(row, ResultsModel::StopColumn, Qt::BackgroundRole).isValid());
      // The repeat rule is off: the tooltip names the box that would end a run that cycles.
      EXPECT_TRUE(cell(row, ResultsModel::StopColumn, Qt::ToolTipRole)
                      .toString()
                      .contains(QStringLiteral("Stop on a longer cycle")));
    } else {
      EXPECT_FALSE(stop.contains(QStringLiteral("cap")));
      EXPECT_FALSE(cell(row, ResultsModel::StopColumn, Qt::BackgroundRole).isValid());
    }
  }
  // With a cap of 6 iterations some runs must hit it: the highlighted branch was exercised.
  EXPECT_GT(capped, 0);

  // The labels behind the table are the core's.
  const auto outcome = controller()->outcome();
  ASSERT_TRUE(outcome);
  EXPECT_EQ(outcome->reference->labels, want.reference.labels);
  for (std::size_t i = 0; i < modes.size(); ++i)
    EXPECT_EQ(outcome->finished[i]->result.labels, want.modes[i].result.labels) << i;

  // Charts: one point per mode, one convergence curve per distinct run.
  EXPECT_EQ(window_->charts()->timeDiffChart()->series().size(), 9);
  EXPECT_EQ(window_->charts()->convergenceChart()->series().size(), 9);
  // The selected row is the panel's mode (fp16>fp32 by default).
  EXPECT_EQ(window_->selectedRow(), outcome->rowOf(Mode::Fp16Fp32));

  // Ctrl+C in the table copies the whole table as tab-separated text, values at full precision.
  QGuiApplication::clipboard()->clear();
  window_->resultsView()->setFocus();
  QTest::keyClick(window_->resultsView(), Qt::Key_C, Qt::ControlModifier);
  const QStringList lines =
      QGuiApplication::clipboard()->text().split(QLatin1Char('\n'), Qt::SkipEmptyParts);
  ASSERT_EQ(lines.size(), 11) << QGuiApplication::clipboard()->text().toStdString();
  EXPECT_TRUE(lines[0].startsWith(QStringLiteral("Mode\tIterations\tStop reason\tTime [s]\t")))
      << lines[0].toStdString();
  for (int row = 0; row < 10; ++row) {
    SCOPED_TRACE(row);
    const KMeansResult& r = row == 0 ? want.reference : want.modes[std::size_t(row - 1)].result;
    const QStringList f = lines[row + 1].split(QLatin1Char('\t'));
    ASSERT_EQ(f.size(), ResultsModel::kColumnCount);
    EXPECT_EQ(f[ResultsModel::ModeColumn], cell(row, ResultsModel::ModeColumn).toString());
    EXPECT_EQ(f[ResultsModel::IterationsColumn].toInt(), r.iterations);
    EXPECT_EQ(f[ResultsModel::SseColumn].toDouble(), r.sse);  // the same double
    EXPECT_EQ(f[ResultsModel::TimeColumn].toDouble(),
              cell(row, ResultsModel::TimeColumn, Qt::UserRole).toDouble());
    if (row == 0) {
      EXPECT_TRUE(f[ResultsModel::DiffColumn].isEmpty());
    } else {
      EXPECT_EQ(f[ResultsModel::DiffColumn].toDouble(),
                want.modes[std::size_t(row - 1)].comparison.diffPercent);
      EXPECT_EQ(f[ResultsModel::AmiColumn].toDouble(),
                want.modes[std::size_t(row - 1)].comparison.ami);
    }
    EXPECT_EQ(f[ResultsModel::BackendColumn].toStdString(), r.backend);
  }
  EXPECT_TRUE(window_->copyResultsAction()->isEnabled());
}

TEST_F(GuiWindow, SelectingARowShowsThatModesLabelsMaskAndLegend) {
  const QString path = kmseg::test::smallPhoto("gui-select");
  open(path);
  runAndWait(fastParams(5, 10), true);
  const auto o = controller()->outcome();
  ASSERT_TRUE(o);
  const int row = o->rowOf(Mode::Bf16);
  window_->selectRow(row);
  EXPECT_EQ(window_->selectedRow(), row);
  const Comparison& c = *o->comparison(row);
  const QImage wantLabels = renderLabels(o->result(row).labels, 60, 40, o->palette, c.mapping);
  const QImage wantMask = renderMask(c.mask, 60, 40);
  EXPECT_EQ(window_->views()->view(ImageViews::ModeLabels)->image(), wantLabels);
  EXPECT_EQ(window_->views()->view(ImageViews::Mask)->image(), wantMask);
  EXPECT_EQ(window_->views()->view(ImageViews::Reference)->image(),
            renderLabels(o->reference->labels, 60, 40, o->palette));

  // The legend: one row per reference cluster, with its size and this mode's disagreement.
  LegendWidget* legend = window_->legend();
  ASSERT_EQ(legend->rowCount(), 5);
  // Each row's tooltip is the reference centre in the photo's units (R, G, B samples, pixels).
  const Matrix raw = inRawUnits(o->reference->centroids, o->features->features.scales);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(legend->item(i, 1)->data(Qt::UserRole).toDouble(), double(c.clusterSize[i]));
    EXPECT_EQ(legend->item(i, 2)->data(Qt::UserRole).toDouble(), c.clusterDiffPercent[i]);
    const double v[5] = {raw(i, 0), raw(i, 1), raw(i, 2), raw(i, 3), raw(i, 4)};
    EXPECT_EQ(legend->item(i, 0)->toolTip(), centreText(v, false));
    EXPECT_TRUE(legend->item(i, 0)->toolTip().startsWith(QStringLiteral("Centre: R ")));
    EXPECT_TRUE(legend->item(i, 0)->toolTip().contains(QStringLiteral(" at column ")));
    EXPECT_GE(raw(i, 3), 0.0);
    EXPECT_LE(raw(i, 3), 59.0);
  }

  // Clicking another row in the table switches the views.
  const int other = o->rowOf(Mode::Fp32);
  QTableView* table = window_->resultsView();
  const QRect rect = table->visualRect(window_->resultsModel()->index(other, 0));
  QTest::mouseClick(table->viewport(), Qt::LeftButton, {}, rect.center());
  EXPECT_EQ(window_->selectedRow(), other);
  EXPECT_EQ(
      window_->views()->view(ImageViews::ModeLabels)->image(),
      renderLabels(o->result(other).labels, 60, 40, o->palette, o->comparison(other)->mapping));
  // The reference's maps are rendered once per result, and again for the next result.
  EXPECT_EQ(window_->views()->view(ImageViews::Reference)->image(),
            renderLabels(o->reference->labels, 60, 40, o->palette));
  runAndWait(fastParams(3, 10), true);
  const auto next = controller()->outcome();
  ASSERT_NE(next, o);
  const QImage nextReference = renderLabels(next->reference->labels, 60, 40, next->palette);
  ASSERT_NE(nextReference, renderLabels(o->reference->labels, 60, 40, o->palette));
  EXPECT_EQ(window_->views()->view(ImageViews::Reference)->image(), nextReference);
  window_->selectRow(0);
  EXPECT_EQ(window_->views()->view(ImageViews::Reference)->image(), nextReference);
  EXPECT_EQ(window_->views()->view(ImageViews::ModeLabels)->image(), nextReference);
}

// The features of a run serve the next runs on the same photo with the same feature options:
// the same object, no time spent on them, and the results of features built afresh. Other
// options, or another photo, build their own.
TEST_F(GuiWindow, RunsOnTheSamePhotoAndFeatureOptionsShareTheirFeatures) {
  const QString path = kmseg::test::smallPhoto("gui-features");
  GuiParams p = fastParams(4, 8);
  const auto first = firstFp16Fp32Run(path, p);
  ASSERT_TRUE(first && first->features);
  EXPECT_GT(first->featureSeconds, 0.0);
  EXPECT_EQ(first->features->image, controller()->image());

  p.workflow.kmeans.k = 5;  // not a feature option
  runAndWait(p, false);
  const auto second = controller()->outcome();
  EXPECT_EQ(second->features, first->features);
  EXPECT_EQ(second->featureSeconds, 0.0);
  const WorkflowResult want = expected(path, p, {Mode::Fp16Fp32});
  EXPECT_EQ(second->reference->labels, want.reference.labels);
  EXPECT_EQ(second->finished.at(0)->result.labels, want.modes.at(0).result.labels);
  EXPECT_EQ(second->finished.at(0)->result.fallbacks, want.modes.at(0).result.fallbacks);

  p.features.spatialWeight = 0.5;
  runAndWait(p, false);
  const auto third = controller()->outcome();
  EXPECT_NE(third->features, first->features);
  EXPECT_EQ(third->features->options.spatialWeight, 0.5);
  EXPECT_EQ(third->finished.at(0)->result.labels,
            expected(path, p, {Mode::Fp16Fp32}).modes.at(0).result.labels);

  p.features.colorSpace = ColorSpace::Lab;
  runAndWait(p, false);
  EXPECT_NE(controller()->outcome()->features, third->features);
  EXPECT_FALSE(controller()->outcome()->features->features.lookup);  // Lab has no lookup

  // Another photo (the same pixels, another file) builds its own.
  const QString again = kmseg::test::smallPhoto("gui-features-2");
  open(again);
  runAndWait(p, false);
  EXPECT_NE(controller()->outcome()->features->image, third->features->image);
  EXPECT_GT(controller()->outcome()->featureSeconds, 0.0);
}

// A run takes the fp64 reference of the run before when only the modes' own parameters changed
// (same photo, features and engine): its results are those of a run that computes its own, and
// the status line says where the reference came from. K changed: a new reference.
TEST_F(GuiWindow, ARunTakesTheReferenceOfTheRunBeforeWhenItCan) {
  const QString path = kmseg::test::smallPhoto("gui-reference");
  GuiParams p = fastParams(4, 8);
  const auto first = firstFp16Fp32Run(path, p);
  EXPECT_FALSE(first->referenceGiven);
  auto status = [&] {
    return window_->findChild<QLabel*>(QStringLiteral("progressLabel"))->text().toStdString();
  };
  EXPECT_EQ(status().find("reference of the run before"), std::string::npos) << status();

  p.mode = Mode::Fp32;
  p.workflow.kmeans.rho = 7.0;
  runAndWait(p, false);
  const auto second = controller()->outcome();
  EXPECT_TRUE(second->referenceGiven);
  EXPECT_NE(status().find("reference of the run before"), std::string::npos) << status();
  EXPECT_EQ(second->runSeconds(), second->finished.at(0)->result.seconds);
  const WorkflowResult want = expected(path, p, {Mode::Fp32});
  EXPECT_EQ(second->reference->labels, want.reference.labels);
  EXPECT_EQ(second->finished.at(0)->result.labels, want.modes.at(0).result.labels);
  EXPECT_EQ(second->finished.at(0)->comparison.diffPercent,
            want.modes.at(0).comparison.diffPercent);

  // All modes after it: the same reference again.
  runAndWait(p, true);
  EXPECT_TRUE(controller()->outcome()->referenceGiven);
  EXPECT_EQ(controller()->outcome()->reference->labels, want.reference.labels);

  p.workflow.kmeans.k = 5;
  runAndWait(p, false);
  EXPECT_FALSE(controller()->outcome()->referenceGiven);
  EXPECT_EQ(controller()->outcome()->reference->labels,
            expected(path, p, {Mode::Fp32}).reference.labels);
}

TEST_F(GuiWindow, ZoomAndPanAreLinkedUntilTheLockIsOff) {
  open(kmseg::test::smallPhoto("gui-zoom", 120, 80));
  runAndWait(fastParams(3, 3), false);
  ImageViews* views = window_->views();
  views->actualSize();
  for (int i = 0; i < ImageViews::kViewCount; ++i) EXPECT_DOUBLE_EQ(views->view(i)->zoom(), 1.0);

  // Wheel over the reference view: every view zooms by the same factor.
  ImageView* ref = views->view(ImageViews::Reference);
  const QPointF at = QPointF(ref->viewport()->rect().center());
  QWheelEvent wheel(at, ref->viewport()->mapToGlobal(at), QPoint(), QPoint(0, 120), Qt::NoButton,
                    Qt::NoModifier, Qt::NoScrollPhase, false);
  QApplication::sendEvent(ref->viewport(), &wheel);
  EXPECT_DOUBLE_EQ(ref->zoom(), 1.25);
  for (int i = 0; i < ImageViews::kViewCount; ++i) {
    EXPECT_DOUBLE_EQ(views->view(i)->zoom(), 1.25) << i;
    EXPECT_EQ(views->view(i)->transform(), ref->transform()) << i;
  }

  // Zoom in far enough to pan, then pan one view: the others follow.
  views->zoomBy(8.0);
  ImageView* mask = views->view(ImageViews::Mask);
  mask->horizontalScrollBar()->setValue(mask->horizontalScrollBar()->maximum());
  mask->verticalScrollBar()->setValue(mask->verticalScrollBar()->minimum() + 7);
  for (int i = 0; i < ImageViews::kViewCount; ++i) {
    EXPECT_NEAR(views->view(i)->centre().x(), mask->centre().x(), 1.0) << i;
    EXPECT_NEAR(views->view(i)->centre().y(), mask->centre().y(), 1.0) << i;
  }

  // Keyboard zoom (Ctrl+-) acts on all views.
  window_->activateWindow();
  ASSERT_TRUE(QTest::qWaitForWindowActive(window_.get()));
  const double before = views->view(0)->zoom();
  QTest::keyClick(window_.get(), Qt::Key_Minus, Qt::ControlModifier);
  EXPECT_LT(views->view(0)->zoom(), before);
  EXPECT_DOUBLE_EQ(views->view(3)->zoom(), views->view(0)->zoom());

  // Unlocked: zooming one view leaves the others alone.
  window_->linkAction()->setChecked(false);
  EXPECT_FALSE(views->isLinked());
  const double others = views->view(ImageViews::Original)->zoom();
  QWheelEvent wheel2(at, ref->viewport()->mapToGlobal(at), QPoint(), QPoint(0, 240), Qt::NoButton,
                     Qt::NoModifier, Qt::NoScrollPhase, false);
  QApplication::sendEvent(ref->viewport(), &wheel2);
  EXPECT_NEAR(ref->zoom(), others * 1.5625, 1e-9);
  EXPECT_DOUBLE_EQ(views->view(ImageViews::Original)->zoom(), others);
  EXPECT_DOUBLE_EQ(views->view(ImageViews::Mask)->zoom(), others);

  // Fit: the image fills a view; 100 %: one image pixel per device pixel.
  views->fitToWindow();
  const QRectF shown = ref->mapFromScene(ref->sceneRect()).boundingRect();
  EXPECT_TRUE(qAbs(shown.width() - ref->viewport()->width()) <= 3 ||
              qAbs(shown.height() - ref->viewport()->height()) <= 3);
  EXPECT_LE(shown.width(), ref->viewport()->width() + 1);
  EXPECT_LE(shown.height(), ref->viewport()->height() + 1);
  views->actualSize();
  EXPECT_DOUBLE_EQ(ref->zoom(), 1.0);
  EXPECT_DOUBLE_EQ(ref->sceneRect().width() * ref->pixmapRatio(), 120.0);
}

// Fit keeps to the zoom limits of the wheel and the keys (1/64 to 64): a tiny image is not
// blown up past 64, nor a very wide one shrunk below 1/64, and zooming in after Fit does not
// zoom out.
TEST_F(GuiWindow, FitStaysWithinTheZoomLimits) {
  const auto dir = kmseg::test::freshTempDir("gui-fit-limits");
  QImage tiny(2, 2, QImage::Format_RGB32);
  tiny.fill(qRgb(10, 200, 30));
  const QString tinyPath = tempFile(dir, "tiny.png");
  ASSERT_TRUE(tiny.save(tinyPath));
  QImage wide(40000, 1, QImage::Format_RGB32);
  wide.fill(qRgb(200, 10, 30));
  const QString widePath = tempFile(dir, "wide.png");
  ASSERT_TRUE(wide.save(widePath));

  ImageViews* views = window_->views();
  open(tinyPath);
  // Unclamped, the fit of 2 x 2 pixels in a view of this window would be far above 64.
  ImageView* photo = views->view(ImageViews::Original);
  ASSERT_GT(std::min(photo->viewport()->width(), photo->viewport()->height()) - 1, 2 * 64);
  views->fitToWindow();
  for (int i = 0; i < ImageViews::kViewCount; ++i) EXPECT_DOUBLE_EQ(views->view(i)->zoom(), 64.0);
  views->zoomIn();
  EXPECT_DOUBLE_EQ(photo->zoom(), 64.0);

  open(widePath);
  ASSERT_LT(photo->viewport()->width() - 1, 40000 / 64);
  views->fitToWindow();
  for (int i = 0; i < ImageViews::kViewCount; ++i)
    EXPECT_DOUBLE_EQ(views->view(i)->zoom(), 1.0 / 64.0);
  views->zoomOut();
  EXPECT_DOUBLE_EQ(photo->zoom(), 1.0 / 64.0);
}

TEST_F(GuiWindow, OverlayBoundariesAndHoverShowWhatIsUnderTheCursor) {
  open(kmseg::test::smallPhoto("gui-overlay"));
  runAndWait(fastParams(4, 10), false);
  ImageViews* views = window_->views();
  ImageView* photo = views->view(ImageViews::Original);
  EXPECT_FALSE(photo->overlayShown());
  window_->activateWindow();
  ASSERT_TRUE(QTest::qWaitForWindowActive(window_.get()));
  window_->resultsView()->setFocus();
  QTest::keyClick(window_.get(), Qt::Key_O);
  EXPECT_TRUE(window_->overlayAction()->isChecked());
  EXPECT_TRUE(photo->overlayShown());
  QTest::keyClick(window_.get(), Qt::Key_B);
  EXPECT_TRUE(photo->boundariesShown());
  EXPECT_TRUE(views->view(ImageViews::ModeLabels)->boundariesShown());
  EXPECT_TRUE(views->view(ImageViews::Reference)->boundariesShown());
  QTest::keyClick(window_.get(), Qt::Key_O);
  EXPECT_FALSE(photo->overlayShown());
  window_->opacitySlider()->setValue(80);

  // Hover: the status bar names the pixel and its label in each view.
  views->actualSize();
  const auto o = controller()->outcome();
  ImageView* labels = views->view(ImageViews::ModeLabels);
  // A mouse position a quarter of a pixel into image pixel (10, 20), in logical coordinates
  // (pixelAt adds half a device pixel, at most half an image pixel at zoom >= 1).
  const QPointF pos =
      labels->viewportTransform().map(QPointF(10.25, 20.25) / labels->pixmapRatio());
  EXPECT_EQ(labels->pixelAt(pos), QPoint(10, 20));
  QMouseEvent move(QEvent::MouseMove, pos, labels->viewport()->mapToGlobal(pos), Qt::NoButton,
                   Qt::NoButton, Qt::NoModifier);
  QApplication::sendEvent(labels->viewport(), &move);
  const std::size_t i = 20 * 60 + 10;
  const QString text = window_->pixelText();
  EXPECT_TRUE(text.contains(QStringLiteral("x 10 y 20"))) << text.toStdString();
  EXPECT_TRUE(text.contains(QStringLiteral("fp64: %1").arg(o->reference->labels[i])))
      << text.toStdString();
  EXPECT_TRUE(text.contains(QStringLiteral("fp16>fp32: %1").arg(o->result(1).labels[i])))
      << text.toStdString();
}

// "Compare all modes" shows each run as it completes: the reference first, then each mode in
// turn, the rows to come named and greyed out, the views on the reference until the panel's
// mode is in.
TEST_F(GuiWindow, CompareAllModesShowsEachRowAsItCompletes) {
  const QString path = kmseg::test::smallPhoto("gui-rows");
  open(path);
  const GuiParams p = fastParams(4, 6);
  const ResultsModel* m = window_->resultsModel();
  struct Seen {
    int ready;
    int selected;
    int rowCount;
    bool pendingSelectable;
    QStringList pendingStops;
    bool pendingValuesEmpty;
    int timePoints;
  };
  std::vector<Seen> seen;
  QObject::connect(controller(), &Controller::rowsReady, window_.get(), [&] {
    const auto o = controller()->outcome();
    Seen s{o->readyRows(),
           window_->selectedRow(),
           m->rowCount(),
           false,
           {},
           true,
           int(window_->charts()->timeDiffChart()->series().size())};
    for (int row = o->readyRows(); row < m->rowCount(); ++row) {
      if (m->flags(m->index(row, 0)) & (Qt::ItemIsSelectable | Qt::ItemIsEnabled))
        s.pendingSelectable = true;
      s.pendingStops << m->data(m->index(row, ResultsModel::StopColumn)).toString();
      if (m->data(m->index(row, ResultsModel::SseColumn)).isValid()) s.pendingValuesEmpty = false;
    }
    seen.push_back(s);
  });
  runAndWait(p, true);
  const auto outcome = controller()->outcome();
  ASSERT_TRUE(outcome && outcome->isComplete());
  const int target = outcome->rowOf(p.mode);
  ASSERT_GT(target, 1);
  ASSERT_EQ(seen.size(), 10u);
  for (std::size_t i = 0; i < seen.size(); ++i) {
    SCOPED_TRACE(i);
    const Seen& s = seen[i];
    EXPECT_EQ(s.ready, int(i) + 1);
    EXPECT_EQ(s.rowCount, 10);
    EXPECT_EQ(s.selected, int(i) < target ? 0 : target);
    EXPECT_FALSE(s.pendingSelectable);
    EXPECT_TRUE(s.pendingValuesEmpty);
    EXPECT_EQ(s.pendingStops.size(), 10 - s.ready);
    // Rows before the one running are being compared, those after it wait.
    const QStringList order = {QStringLiteral("comparing with fp64…"), QStringLiteral("running…"),
                               QStringLiteral("waiting")};
    int last = 0;
    for (const QString& stop : s.pendingStops) {
      const int rank = int(order.indexOf(stop));
      EXPECT_GE(rank, last) << stop.toStdString();
      last = std::max(last, rank);
    }
    EXPECT_EQ(s.timePoints, s.ready - 1);  // one point per complete mode
  }
  EXPECT_EQ(window_->selectedRow(), target);
  EXPECT_EQ(m->flags(m->index(9, 0)) & Qt::ItemIsSelectable, Qt::ItemIsSelectable);
}

// A row the user selects while a comparison runs stays selected as more rows complete.
TEST_F(GuiWindow, RowsCompletingDoNotMoveTheUsersSelection) {
  open(kmseg::test::smallPhoto("gui-rows-pick"));
  QTableView* table = window_->resultsView();
  bool picked = false;
  QObject::connect(controller(), &Controller::rowsReady, window_.get(), [&] {
    if (picked || controller()->outcome()->readyRows() != 3) return;
    picked = true;
    // As a click does: through the view's selection model, not MainWindow::selectRow.
    table->selectionModel()->setCurrentIndex(
        table->model()->index(2, 0),
        QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  });
  runAndWait(fastParams(4, 6), true);
  EXPECT_TRUE(picked);
  EXPECT_EQ(window_->selectedRow(), 2);
  // The next run starts afresh: the panel's mode is selected at its end.
  picked = true;
  runAndWait(fastParams(4, 7), true);
  EXPECT_EQ(window_->selectedRow(), controller()->outcome()->rowOf(Mode::Fp16Fp32));
}

// A row the user picks in the results on screen as a new comparison starts is selected again in
// the new results once its mode's row is in, though the table is reset in between; a mode the
// new run does not have gives way to the panel's.
TEST_F(GuiWindow, ARowPickedAsARunStartsIsSelectedAgainInItsResults) {
  open(kmseg::test::smallPhoto("gui-rows-repick"));
  runAndWait(fastParams(4, 6), true);
  const auto before = controller()->outcome();
  QTableView* table = window_->resultsView();
  Mode pick = Mode::Bf16;
  std::shared_ptr<const RunOutcome> pickedIn;
  QObject::connect(controller(), &Controller::runStarted, window_.get(), [&] {
    pickedIn = window_->resultsModel()->outcome();
    // As a click does, in the table still showing the results before.
    table->selectionModel()->setCurrentIndex(
        table->model()->index(pickedIn->rowOf(pick), 0),
        QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  });
  runAndWait(fastParams(5, 6), true);  // another K: another reference, the table is reset
  ASSERT_EQ(pickedIn, before);
  const auto o = controller()->outcome();
  ASSERT_NE(o->reference, before->reference);
  const int row = o->rowOf(Mode::Bf16);
  EXPECT_EQ(window_->selectedRow(), row);
  EXPECT_EQ(window_->views()->view(ImageViews::ModeLabels)->image(),
            renderLabels(o->result(row).labels, 60, 40, o->palette, o->comparison(row)->mapping));

  // "Run" of the panel's mode (fp16>fp32) has no bf16 row: its own mode is selected.
  runAndWait(fastParams(4, 6), false);
  EXPECT_EQ(window_->selectedRow(), controller()->outcome()->rowOf(Mode::Fp16Fp32));
}

// Cancelled part way, a comparison keeps the rows it completed; the others say it was
// cancelled, cannot be selected or exported, and the report lists the complete runs only.
TEST_F(GuiWindow, CancelledComparisonKeepsItsCompleteRows) {
  open(kmseg::test::smallPhoto("gui-rows-cancel"));
  QSignalSpy cancelled(controller(), &Controller::runCancelled);
  QSignalSpy finished(controller(), &Controller::runFinished);
  QObject::connect(controller(), &Controller::rowsReady, window_.get(), [&] {
    if (controller()->outcome()->readyRows() == 4) window_->cancelRun();
  });
  window_->paramsPanel()->setParams(fastParams(4, 6));
  window_->compareAll();
  ASSERT_TRUE(waitFor([&] { return cancelled.count() == 1 && !controller()->isBusy(); }));
  EXPECT_EQ(finished.count(), 0);
  const auto o = controller()->outcome();
  ASSERT_TRUE(o);
  // Rows the worker completed after the cancel are not taken.
  EXPECT_EQ(o->readyRows(), 4);
  const ResultsModel* m = window_->resultsModel();
  EXPECT_EQ(m->outcome(), o);
  EXPECT_EQ(m->rowCount(), 10);
  for (int row = 4; row < 10; ++row) {
    EXPECT_EQ(m->data(m->index(row, ResultsModel::StopColumn)).toString().toStdString(),
              "cancelled");
    EXPECT_EQ(m->flags(m->index(row, 0)), Qt::NoItemFlags);
  }
  EXPECT_TRUE(m->data(m->index(3, ResultsModel::SseColumn)).isValid());
  // The views show the reference (the panel's mode had not come); a complete row can be
  // selected, one not complete cannot.
  EXPECT_EQ(window_->selectedRow(), 0);
  window_->selectRow(3);
  EXPECT_EQ(window_->selectedRow(), 3);
  window_->selectRow(6);
  EXPECT_EQ(window_->selectedRow(), 3);

  const auto dir = kmseg::test::freshTempDir("gui-rows-cancel-out");
  const QString json = tempFile(dir, "partial.json");
  ASSERT_TRUE(controller()->exportFile(Controller::ExportKind::ReportJson, json, 3))
      << window_->lastError().toStdString();
  std::ifstream in(json.toStdString());
  const auto report = nlohmann::json::parse(in);
  ASSERT_EQ(report.at("runs").size(), 4u);
  EXPECT_EQ(report.at("runs").at(3).at("mode"), std::string(modeName(o->modes[2])));
  // Exporting all writes the complete rows' files only.
  const QStringList all = controller()->exportAllFiles(QString::fromStdString(dir.string()));
  EXPECT_EQ(all.size(), 2 + 3 * 3 + 2);
  const QString labels = tempFile(dir, "pending.png");
  EXPECT_FALSE(controller()->exportFile(Controller::ExportKind::LabelMap, labels, 6));
  EXPECT_TRUE(window_->lastError().contains(QStringLiteral("has not finished yet")))
      << window_->lastError().toStdString();
  EXPECT_FALSE(QFile::exists(labels));
}

// The rows a cancelled comparison did not complete say so while the next run computes its
// reference (its own rows not in yet); from its first row on, the table shows the new run's own
// state.
TEST_F(GuiWindow, ACancelledRunsRowsSayCancelledDuringTheNextRun) {
  open(kmseg::test::smallPhoto("gui-rows-next"));
  const ResultsModel* m = window_->resultsModel();
  auto pendingStops = [&] {
    QStringList stops;
    for (int row = m->outcome()->readyRows(); row < m->rowCount(); ++row)
      stops << m->data(m->index(row, ResultsModel::StopColumn)).toString();
    return stops;
  };
  QSignalSpy started(controller(), &Controller::runStarted);
  QSignalSpy finished(controller(), &Controller::runFinished);
  std::shared_ptr<const RunOutcome> cancelledRows;
  QObject::connect(controller(), &Controller::rowsReady, window_.get(), [&] {
    if (cancelledRows || controller()->outcome()->readyRows() != 4) return;
    cancelledRows = controller()->outcome();
    // Another comparison (another K: its own reference) cancels this one.
    window_->paramsPanel()->setParams(fastParams(5, 6));
    window_->compareAll();
  });
  std::shared_ptr<const RunOutcome> shownDuringNext;
  QStringList stopsDuringNext;
  QObject::connect(controller(), &Controller::progressed, window_.get(), [&](const RunProgress& p) {
    if (started.count() < 2 || p.job != started.at(1).at(0).toInt() || shownDuringNext) return;
    shownDuringNext = m->outcome();
    stopsDuringNext = pendingStops();
  });
  QStringList stopsAtFirstRow;
  QObject::connect(controller(), &Controller::rowsReady, window_.get(), [&](int job) {
    if (started.count() == 2 && job == started.at(1).at(0).toInt() && stopsAtFirstRow.isEmpty())
      stopsAtFirstRow = pendingStops();
  });
  window_->paramsPanel()->setParams(fastParams(4, 6));
  window_->compareAll();
  ASSERT_TRUE(waitFor([&] { return finished.count() == 1 && !controller()->isBusy(); }));
  ASSERT_EQ(started.count(), 2);
  ASSERT_TRUE(cancelledRows);
  ASSERT_EQ(shownDuringNext, cancelledRows);
  EXPECT_EQ(stopsDuringNext.join(QStringLiteral(", ")).toStdString(),
            QStringList(6, QStringLiteral("cancelled")).join(QStringLiteral(", ")).toStdString());
  ASSERT_EQ(stopsAtFirstRow.size(), 9);
  const QStringList running = {QStringLiteral("comparing with fp64…"), QStringLiteral("running…"),
                               QStringLiteral("waiting")};
  for (const QString& stop : stopsAtFirstRow)
    EXPECT_TRUE(running.contains(stop)) << stop.toStdString();
}

// A run that takes the reference of the run before, in other colours, draws the reference in
// its own colours from its first row on, though the same run was shown in the same row.
TEST_F(GuiWindow, AReusedReferenceIsDrawnInTheNewRunsColours) {
  open(kmseg::test::smallPhoto("gui-rows-palette"));
  GuiParams p = fastParams(5, 10);
  runAndWait(p, false);
  const auto first = controller()->outcome();
  window_->selectRow(0);
  p.palette = PaletteKind::ColorBlindSafe;
  QSignalSpy cancelled(controller(), &Controller::runCancelled);
  QObject::connect(controller(), &Controller::rowsReady, window_.get(),
                   [&] { window_->cancelRun(); });  // after the reference's row
  window_->paramsPanel()->setParams(p);
  window_->runSelected();
  ASSERT_TRUE(waitFor([&] { return cancelled.count() == 1 && !controller()->isBusy(); }));
  const auto o = controller()->outcome();
  ASSERT_NE(o, first);
  ASSERT_EQ(o->readyRows(), 1);
  ASSERT_EQ(o->reference, first->reference);  // taken, not run again
  ASSERT_NE(o->palette, first->palette);
  EXPECT_EQ(window_->selectedRow(), 0);
  const QImage want = renderLabels(o->reference->labels, 60, 40, o->palette);
  ASSERT_NE(want, renderLabels(o->reference->labels, 60, 40, first->palette));
  EXPECT_EQ(window_->views()->view(ImageViews::Reference)->image(), want);
  EXPECT_EQ(window_->views()->view(ImageViews::ModeLabels)->image(), want);
  // The legend keeps the reference's cluster sizes: the run's counts, taken with the reference.
  std::vector<std::int64_t> sizes(5, 0);
  for (const std::int32_t label : o->reference->labels) ++sizes[std::size_t(label)];
  ASSERT_TRUE(o->referenceSizes);
  EXPECT_EQ(*o->referenceSizes, sizes);
  EXPECT_EQ(o->referenceSizes, first->referenceSizes);
  LegendWidget* legend = window_->legend();
  ASSERT_EQ(legend->rowCount(), 5);
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(legend->item(i, 1)->data(Qt::UserRole).toDouble(), double(sizes[std::size_t(i)]));
}

TEST_F(GuiWindow, CancelMidRunKeepsTheResultShown) {
  open(QString::fromStdString(kmseg::test::sourcePath("samples/coffee.png").string()));
  runAndWait(fastParams(8, 2), false);
  const auto before = controller()->outcome();
  ASSERT_TRUE(before);

  QSignalSpy progress(controller(), &Controller::progressed);
  QSignalSpy rows(controller(), &Controller::rowsReady);
  QSignalSpy cancelled(controller(), &Controller::runCancelled);
  QSignalSpy finished(controller(), &Controller::runFinished);
  window_->paramsPanel()->setParams(fastParams(8, 300));
  window_->compareAll();
  ASSERT_TRUE(controller()->isBusy());
  ASSERT_TRUE(waitFor([&] { return progress.count() > 0; }));
  EXPECT_TRUE(window_->progressBar()->isVisible());
  EXPECT_TRUE(window_->paramsPanel()->cancelButton()->isEnabled());
  QTest::mouseClick(window_->paramsPanel()->cancelButton(), Qt::LeftButton);
  ASSERT_TRUE(waitFor([&] { return cancelled.count() == 1 && !controller()->isBusy(); }));
  EXPECT_EQ(finished.count(), 0);
  // Cancelled in its reference's run, the comparison completed no row: the result before stays.
  // (Had the reference finished first, its row would be shown: see the test below.)
  if (rows.count() == 0) {
    EXPECT_EQ(controller()->outcome(), before);
    EXPECT_EQ(window_->resultsModel()->outcome(), before);
    EXPECT_EQ(window_->resultsModel()->rowCount(), 2);
  } else {
    EXPECT_FALSE(controller()->outcome()->isComplete());
  }
  EXPECT_FALSE(window_->progressBar()->isVisible());
  EXPECT_FALSE(errorBox());
}

// Another image clears the results, and with them what acts on them: the export and copy
// actions are off until a run on the new image has a row, and the status bar no longer names a
// pixel's labels.
TEST_F(GuiWindow, OpeningAnotherImageDisablesExportAndCopy) {
  open(kmseg::test::smallPhoto("gui-reopen-first"));
  runAndWait(fastParams(3, 5), false);
  QMenu* exportMenu = nullptr;
  for (QMenu* m : window_->findChildren<QMenu*>())
    if (m->title() == QStringLiteral("&Export")) exportMenu = m;
  ASSERT_TRUE(exportMenu);
  auto enabledActions = [&] {
    QStringList enabled;
    for (QAction* a : exportMenu->actions())
      if (!a->isSeparator() && a->isEnabled()) enabled << a->text();
    if (window_->copyResultsAction()->isEnabled()) enabled << window_->copyResultsAction()->text();
    return enabled;
  };
  EXPECT_EQ(enabledActions().size(), 8);  // seven exports and the copy
  ImageView* labels = window_->views()->view(ImageViews::ModeLabels);
  const QPointF pos = labels->viewportTransform().map(QPointF(5.5, 5.5) / labels->pixmapRatio());
  QMouseEvent move(QEvent::MouseMove, pos, labels->viewport()->mapToGlobal(pos), Qt::NoButton,
                   Qt::NoButton, Qt::NoModifier);
  QApplication::sendEvent(labels->viewport(), &move);
  ASSERT_TRUE(window_->pixelText().contains(QStringLiteral("fp64:")))
      << window_->pixelText().toStdString();

  open(kmseg::test::smallPhoto("gui-reopen-second"));
  EXPECT_FALSE(controller()->outcome());
  EXPECT_EQ(enabledActions().join(QStringLiteral(", ")).toStdString(), "");
  EXPECT_TRUE(window_->pixelText().isEmpty()) << window_->pixelText().toStdString();

  runAndWait(fastParams(3, 5), false);
  EXPECT_EQ(enabledActions().size(), 8);
}

// Opening an image cancels the run on the one before and clears its results: the status line
// then says so, not that results were kept.
TEST_F(GuiWindow, OpeningAnImageDuringARunDoesNotSayResultsWereKept) {
  open(QString::fromStdString(kmseg::test::sourcePath("samples/coffee.png").string()));
  QSignalSpy progress(controller(), &Controller::progressed);
  QSignalSpy cancelled(controller(), &Controller::runCancelled);
  window_->paramsPanel()->setParams(fastParams(8, 300));
  window_->compareAll();
  ASSERT_TRUE(waitFor([&] { return progress.count() > 0; }));
  const QString next = kmseg::test::smallPhoto("gui-reopen-during-run");
  open(next);
  ASSERT_TRUE(waitFor([&] { return cancelled.count() == 1 && !controller()->isBusy(); }));
  QCoreApplication::processEvents();
  const QString status = window_->findChild<QLabel*>(QStringLiteral("progressLabel"))->text();
  EXPECT_FALSE(status.contains(QStringLiteral("kept"))) << status.toStdString();
  EXPECT_TRUE(status.contains(QStringLiteral("cancelled"))) << status.toStdString();
  EXPECT_TRUE(status.contains(next)) << status.toStdString();
  EXPECT_FALSE(controller()->outcome());
  EXPECT_EQ(window_->resultsModel()->rowCount(), 0);
}

TEST_F(GuiWindow, FiftyRapidRunCancelCyclesNeitherCrashNorReplaceTheResult) {
  open(kmseg::test::smallPhoto("gui-cycles", 80, 60));
  const GuiParams p = fastParams(6, 300);
  QSignalSpy cancelled(controller(), &Controller::runCancelled);
  QSignalSpy finished(controller(), &Controller::runFinished);
  QSignalSpy failed(controller(), &Controller::runFailed);
  window_->paramsPanel()->setParams(p);
  for (int i = 0; i < 50; ++i) {
    if (i % 2)
      window_->compareAll();
    else
      window_->runSelected();
    if (i % 5 == 0) QCoreApplication::processEvents();
    window_->cancelRun();
  }
  ASSERT_TRUE(waitFor([&] { return controller()->activeJobs() == 0; }, 60000));
  QCoreApplication::processEvents();
  // A run whose worker had returned when this thread processed events between its start and its
  // cancel (every fifth) finishes; the 40 others were cancelled before this thread could hear of
  // their end. None fails.
  EXPECT_EQ(cancelled.count() + finished.count(), 50);
  EXPECT_GE(cancelled.count(), 40);
  EXPECT_EQ(failed.count(), 0);
  // What a run completed before its cancel took effect (if anything) is what the table shows.
  EXPECT_EQ(window_->resultsModel()->outcome(), controller()->outcome());

  // Starting a run while one is active cancels the old one, unless it had ended when this thread
  // processed events after its start (every seventh): at least 42 cancelled, and the last
  // finishes, its result the one shown.
  QSignalSpy started(controller(), &Controller::runStarted);
  cancelled.clear();
  finished.clear();
  for (int i = 0; i < 50; ++i) {
    window_->runSelected();
    if (i % 7 == 0) QCoreApplication::processEvents();
  }
  ASSERT_TRUE(waitFor([&] { return controller()->activeJobs() == 0; }, 60000));
  QCoreApplication::processEvents();
  ASSERT_EQ(started.count(), 50);
  EXPECT_EQ(cancelled.count() + finished.count(), 50);
  EXPECT_GE(cancelled.count(), 42);
  ASSERT_GE(finished.count(), 1);
  EXPECT_EQ(failed.count(), 0);
  const int last = started.last().at(0).toInt();
  EXPECT_EQ(finished.last().at(0).toInt(), last);
  ASSERT_TRUE(controller()->outcome());
  EXPECT_EQ(controller()->outcome()->job, last);
  EXPECT_EQ(window_->resultsModel()->rowCount(), 2);
}

// "All results to a folder" writes what `kmseg compare` writes, with its names: every run's
// label map, colour map and mask, and the two reports; in the background.
TEST_F(GuiWindow, ExportsAllResultsToAFolderAsTheCommandLineNamesThem) {
  const QString path = kmseg::test::smallPhoto("gui-export-all");
  open(path);
  EXPECT_TRUE(controller()->exportAllFiles(QStringLiteral("/tmp")).isEmpty());  // no result
  runAndWait(fastParams(5, 8), true);
  const auto o = controller()->outcome();
  const auto dir = kmseg::test::freshTempDir("gui-export-all-out") / "new folder";
  const QString qdir = QString::fromStdString(dir.string());
  const QStringList files = controller()->exportAllFiles(qdir);
  // The reference's two maps, three per mode, two reports.
  ASSERT_EQ(files.size(), 2 + 9 * 3 + 2);
  const std::string stem = std::filesystem::path(path.toStdString()).stem().string();
  EXPECT_TRUE(
      files.contains(QString::fromStdString((dir / (stem + ".reference.labels.png")).string())));
  EXPECT_TRUE(
      files.contains(QString::fromStdString((dir / (stem + ".fp16-fp32.mask.png")).string())));
  EXPECT_TRUE(files.contains(QString::fromStdString((dir / (stem + ".compare.json")).string())));

  QSignalSpy exported(controller(), &Controller::exportedAll);
  ASSERT_TRUE(window_->exportAllTo(qdir)) << window_->lastError().toStdString();
  // The files are written in the background: exportAll() has returned before they are, and a
  // second export while the first writes is refused.
  EXPECT_TRUE(controller()->isExportingAll());
  EXPECT_EQ(exported.count(), 0);
  EXPECT_FALSE(controller()->exportAll(qdir));
  for (auto* box : window_->findChildren<QMessageBox*>()) box->close();
  ASSERT_TRUE(waitFor([&] { return exported.count() == 1; })) << window_->lastError().toStdString();
  EXPECT_EQ(exported.at(0).at(1).toInt(), files.size());
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    ++n;
    EXPECT_TRUE(files.contains(QString::fromStdString(entry.path().string()))) << entry.path();
  }
  EXPECT_EQ(n, files.size());  // nothing else, no temporary file left
  for (int row = 0; row < o->rowCount(); ++row) {
    const std::string tag = row == 0 ? "reference" : fileTag(o->modes[std::size_t(row - 1)]);
    const LabelImage back = readLabelPng(dir / (stem + "." + tag + ".labels.png"));
    EXPECT_EQ(back.labels, o->result(row).labels) << tag;
  }
  std::ifstream in(dir / (stem + ".compare.json"));
  const auto report = nlohmann::json::parse(in);
  EXPECT_EQ(report.at("runs").size(), 10u);
}

// Exporting all is refused before any file is written when the folder cannot take the files:
// the folder is a file, or a file's name is taken by a folder.
TEST_F(GuiWindow, ExportAllChecksEveryFileFirst) {
  const QString path = kmseg::test::smallPhoto("gui-export-all-bad");
  open(path);
  runAndWait(fastParams(4, 5), false);
  const auto dir = kmseg::test::freshTempDir("gui-export-all-bad-out");
  const auto notADir = dir / "plain-file";
  std::ofstream(notADir) << "x";
  EXPECT_FALSE(window_->exportAllTo(QString::fromStdString(notADir.string())));
  EXPECT_TRUE(window_->lastError().contains(QStringLiteral("Cannot export to")))
      << window_->lastError().toStdString();
  for (auto* box : window_->findChildren<QMessageBox*>()) box->close();

  const QStringList files = controller()->exportAllFiles(QString::fromStdString(dir.string()));
  ASSERT_EQ(files.size(), 2 + 3 + 2);  // "Run": the reference and one mode
  std::filesystem::create_directory(files.last().toStdString());  // the CSV's name
  EXPECT_FALSE(window_->exportAllTo(QString::fromStdString(dir.string())));
  for (const QString& f : files.mid(0, files.size() - 1))
    EXPECT_FALSE(QFileInfo::exists(f)) << f.toStdString();
  EXPECT_FALSE(controller()->isExportingAll());
}

// A file size limit of one byte for the test's process (its writes fail with EFBIG, and
// SIGXFSZ, which would end the process, is ignored), restored when it goes.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &old_);
    previous_ = std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{bytes, old_.rlim_max};
    ok_ = setrlimit(RLIMIT_FSIZE, &limit) == 0;
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, previous_);
  }
  bool ok() const { return ok_; }

 private:
  rlimit old_{};
  void (*previous_)(int) = SIG_DFL;
  bool ok_ = false;
};

// An export of all results whose files cannot be written (here: a file size limit the maps
// exceed) reports the error and removes the folders it made for them, as `kmseg compare` does.
TEST_F(GuiWindow, AFailedExportAllRemovesTheFoldersItMade) {
  const QString path = kmseg::test::smallPhoto("gui-export-all-fails");
  open(path);
  runAndWait(fastParams(4, 5), false);
  const auto parent = kmseg::test::freshTempDir("gui-export-all-fails-out");
  const auto dir = parent / "made" / "for it";
  QSignalSpy errors(controller(), &Controller::errorOccurred);
  QSignalSpy exported(controller(), &Controller::exportedAll);
  {
    FileSizeLimit limit(1);
    ASSERT_TRUE(limit.ok());
    ASSERT_TRUE(window_->exportAllTo(QString::fromStdString(dir.string())))
        << window_->lastError().toStdString();
    ASSERT_TRUE(waitFor([&] { return !controller()->isExportingAll(); }));
  }
  for (auto* box : window_->findChildren<QMessageBox*>()) box->close();
  EXPECT_EQ(exported.count(), 0);
  ASSERT_EQ(errors.count(), 1);
  EXPECT_TRUE(errors.at(0).at(1).toString().contains(QStringLiteral("too large")))
      << errors.at(0).at(1).toString().toStdString();
  EXPECT_FALSE(std::filesystem::exists(parent / "made"));
  EXPECT_TRUE(std::filesystem::is_empty(parent));
}

TEST_F(GuiWindow, ExportsEveryFileAndTheyReadBack) {
  const QString path = kmseg::test::smallPhoto("gui-export");
  open(path);
  runAndWait(fastParams(6, 10), true);
  const auto o = controller()->outcome();
  const int row = o->rowOf(Mode::Fp16);
  window_->selectRow(row);
  const auto dir = kmseg::test::freshTempDir("gui-export-out");

  const QString labels = tempFile(dir, "small.fp16.labels.png");
  ASSERT_TRUE(window_->exportTo(Controller::ExportKind::LabelMap, labels))
      << window_->lastError().toStdString();
  const LabelImage back = readLabelPng(labels.toStdString());
  EXPECT_EQ(back.width, 60);
  EXPECT_EQ(back.height, 40);
  EXPECT_EQ(back.labels, o->result(row).labels);
  ASSERT_GE(back.palette.size(), 6u);
  EXPECT_EQ(back.palette[0], o->palette[0]);

  const QString color = tempFile(dir, "small.fp16.color.png");
  ASSERT_TRUE(window_->exportTo(Controller::ExportKind::ColorMap, color));
  const QImage colorImg(color);
  ASSERT_EQ(colorImg.size(), QSize(60, 40));
  const Rgb8 c0 = o->palette[std::size_t(o->result(row).labels[0])];
  EXPECT_EQ(colorImg.pixel(0, 0), qRgb(c0.r, c0.g, c0.b));

  const QString mask = tempFile(dir, "small.fp16.mask.png");
  ASSERT_TRUE(window_->exportTo(Controller::ExportKind::Mask, mask));
  const QImage maskImg = QImage(mask).convertToFormat(QImage::Format_Grayscale8);
  ASSERT_EQ(maskImg.size(), QSize(60, 40));
  const auto& m = o->comparison(row)->mask;
  std::int64_t white = 0;
  for (int y = 0; y < 40; ++y)
    for (int x = 0; x < 60; ++x) {
      const bool on = qGray(maskImg.pixel(x, y)) > 127;
      white += on;
      ASSERT_EQ(on, m[std::size_t(y) * 60 + x] != 0) << x << "," << y;
    }
  EXPECT_EQ(white, o->comparison(row)->differing);

  const QString json = tempFile(dir, "small.compare.json");
  ASSERT_TRUE(window_->exportTo(Controller::ExportKind::ReportJson, json));
  std::ifstream in(json.toStdString());
  const auto doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc.at("command"), "compare");
  EXPECT_EQ(doc.at("parameters").at("k"), 6);
  ASSERT_EQ(doc.at("runs").size(), 10u);
  EXPECT_EQ(doc.at("runs")[std::size_t(row)].at("sse").get<double>(), o->result(row).sse);

  const QString csv = tempFile(dir, "small.compare.csv");
  ASSERT_TRUE(window_->exportTo(Controller::ExportKind::ReportCsv, csv));
  QFile csvFile(csv);
  ASSERT_TRUE(csvFile.open(QIODevice::ReadOnly));
  const QList<QByteArray> lines = csvFile.readAll().split('\n');
  EXPECT_EQ(lines.size(), 12);  // header, 10 runs, and the empty piece after the last CRLF
  EXPECT_TRUE(lines[0].startsWith("mode,iterations,stop"));

  const QString view = tempFile(dir, "small.view.png");
  ASSERT_TRUE(window_->exportViewTo(view));
  const QImage viewImg(view);
  EXPECT_EQ(viewImg.size(), window_->views()->grab().size());
  EXPECT_FALSE(errorBox());
}

// An export writes the run that was selected when its dialog opened, under the name the dialog
// suggested for it, though the selection moves while the dialog is open (as rows completing
// move it); the views are saved as they were shown then.
TEST_F(GuiWindow, ExportWritesTheRunSelectedWhenTheDialogOpened) {
  const QString path = kmseg::test::smallPhoto("gui-export-dialog");
  open(path);
  runAndWait(fastParams(6, 10), true);
  const auto o = controller()->outcome();
  int row = 1;
  for (int r = 2; r < o->rowCount(); ++r)
    if (o->comparison(r)->diffPercent > o->comparison(row)->diffPercent) row = r;
  ASSERT_GT(o->comparison(row)->diffPercent, 0.0);  // its labels differ from the reference's
  const auto dir = kmseg::test::freshTempDir("gui-export-dialog-out");
  auto action = [&](const QString& text) {
    for (QAction* a : window_->findChildren<QAction*>())
      if (a->text() == text) return a;
    return static_cast<QAction*>(nullptr);
  };
  // Triggers `a`; while its file dialog is open, selects the reference's row, then saves to
  // `file`. Returns the name the dialog suggested.
  auto exportWith = [&](QAction* a, const QString& file) {
    QString suggested;
    QTimer poll;
    QObject::connect(&poll, &QTimer::timeout, window_.get(), [&] {
      auto* dialog = qobject_cast<QFileDialog*>(QApplication::activeModalWidget());
      if (!dialog) return;
      poll.stop();
      suggested = dialog->selectedFiles().value(0);
      window_->selectRow(0);
      // The file name field, as a user types into it (selectFile() leaves the field alone
      // while it has the focus).
      if (auto* name = dialog->findChild<QLineEdit*>(QStringLiteral("fileNameEdit")))
        name->setText(file);
      static_cast<QDialog*>(dialog)->accept();  // QFileDialog::accept, public in QDialog
    });
    poll.start(10);
    a->trigger();
    return suggested;
  };

  window_->selectRow(row);
  const QString tag = o->rowName(row).replace(QLatin1Char('>'), QLatin1Char('-'));
  QAction* labelsAction = action(QStringLiteral("&Label map (exact ids)…"));
  ASSERT_TRUE(labelsAction);
  const QString labels = tempFile(dir, "labels.png");
  const QString suggested = exportWith(labelsAction, labels);
  EXPECT_TRUE(suggested.endsWith(QStringLiteral("small.%1.labels.png").arg(tag)))
      << suggested.toStdString();
  EXPECT_EQ(window_->selectedRow(), 0);
  ASSERT_TRUE(QFile::exists(labels)) << window_->lastError().toStdString();
  EXPECT_EQ(readLabelPng(labels.toStdString()).labels, o->result(row).labels);

  window_->selectRow(row);
  const QImage shown = window_->views()->grab().toImage().convertToFormat(QImage::Format_RGB32);
  QAction* viewAction = action(QStringLiteral("Current &view as shown…"));
  ASSERT_TRUE(viewAction);
  const QString view = tempFile(dir, "view.png");
  exportWith(viewAction, view);
  EXPECT_EQ(window_->selectedRow(), 0);
  ASSERT_TRUE(QFile::exists(view)) << window_->lastError().toStdString();
  ASSERT_NE(window_->views()->grab().toImage().convertToFormat(QImage::Format_RGB32), shown);
  EXPECT_EQ(QImage(view).convertToFormat(QImage::Format_RGB32), shown);
  EXPECT_FALSE(errorBox());
}

TEST_F(GuiWindow, UnwritableExportPathsGiveAnErrorDialog) {
  open(kmseg::test::smallPhoto("gui-export-bad"));
  runAndWait(fastParams(3, 5), false);
  const QString bad = QStringLiteral("/nonexistent-kmseg-dir/out.png");
  EXPECT_FALSE(window_->exportTo(Controller::ExportKind::LabelMap, bad));
  QMessageBox* box = errorBox();
  ASSERT_TRUE(box);
  EXPECT_TRUE(box->isVisible());
  EXPECT_TRUE(box->text().contains(bad) || box->windowTitle().contains(bad))
      << box->text().toStdString();
  EXPECT_TRUE(box->informativeText().contains(QStringLiteral("write")));
  box->close();
  QCoreApplication::processEvents();

  // A directory where the file should go.
  const auto dir = kmseg::test::freshTempDir("gui-export-dir");
  EXPECT_FALSE(
      window_->exportTo(Controller::ExportKind::ReportJson, QString::fromStdString(dir.string())));
  EXPECT_TRUE(errorBox());
  EXPECT_FALSE(window_->exportViewTo(bad));
  EXPECT_TRUE(window_->lastError().contains(bad));
  // The result is still there.
  EXPECT_TRUE(controller()->outcome());
  EXPECT_EQ(window_->resultsModel()->rowCount(), 2);
}

TEST_F(GuiWindow, BadFilesGiveAnErrorDialogAndKeepWhatIsShown) {
  const QString good = kmseg::test::smallPhoto("gui-bad");
  open(good);
  runAndWait(fastParams(3, 5), false);
  const auto before = controller()->outcome();

  const auto dir = kmseg::test::freshTempDir("gui-bad-files");
  const QString text = tempFile(dir, "notes.png");
  {
    QFile f(text);
    ASSERT_TRUE(f.open(QIODevice::WriteOnly));
    f.write("this is not an image\n");
  }
  QSignalSpy errors(controller(), &Controller::errorOccurred);
  window_->openFile(text);
  ASSERT_TRUE(waitFor([&] { return errors.count() == 1; }));
  QMessageBox* box = errorBox();
  ASSERT_TRUE(box);
  EXPECT_TRUE(box->isVisible());
  EXPECT_TRUE(box->windowTitle().contains(text)) << box->windowTitle().toStdString();
  EXPECT_FALSE(box->informativeText().isEmpty());
  EXPECT_EQ(controller()->image()->path, good);
  EXPECT_EQ(controller()->outcome(), before);
  EXPECT_EQ(window_->resultsModel()->rowCount(), 2);
  EXPECT_EQ(window_->views()->view(ImageViews::Original)->imageSize(), QSize(60, 40));

  // A missing file, and an image over the pixel limit (checked from the header).
  window_->openFile(tempFile(dir, "missing.jpg"));
  ASSERT_TRUE(waitFor([&] { return errors.count() == 2; }));
  GuiParams p = window_->paramsPanel()->params();
  p.maxPixels = 10000;  // the panel's smallest limit, 0.01 MP; coffee.png has 0.24 MP
  window_->paramsPanel()->setParams(p);
  window_->openFile(QString::fromStdString(kmseg::test::sourcePath("samples/coffee.png").string()));
  ASSERT_TRUE(waitFor([&] { return errors.count() == 3; }));
  EXPECT_TRUE(errorBox()->informativeText().contains(QStringLiteral("pixel limit")))
      << errorBox()->informativeText().toStdString();
  EXPECT_TRUE(errorBox()->text().contains(QStringLiteral("10000")))
      << errorBox()->text().toStdString();
  EXPECT_EQ(controller()->image()->path, good);
  EXPECT_EQ(controller()->outcome(), before);
}

// Only the pixel limit's refusal advises raising it: the decoder's own limits (2^24 pixels a
// side) and a 16-bit run-length PSD, which it cannot read, are refused whatever the limit.
TEST_F(GuiWindow, OnlyThePixelLimitsRefusalSaysToRaiseIt) {
  const auto dir = kmseg::test::freshTempDir("gui-decoder-limits");
  auto write = [&](const std::string& name, const std::vector<char>& bytes) {
    const QString path = tempFile(dir, name);
    std::ofstream(path.toStdString(), std::ios::binary)
        .write(bytes.data(), std::streamsize(bytes.size()));
    return path;
  };
  auto putBe = [](std::vector<char>& bytes, std::uint32_t v, int count) {
    for (int k = count - 1; k >= 0; --k) bytes.push_back(char((v >> (8 * k)) & 0xFF));
  };
  // A PNG of 2^24 + 1 x 1 pixels (its header; the decoder's side limit is checked first).
  std::vector<char> png = {'\x89', 'P', 'N', 'G', '\r', '\n', '\x1A', '\n',
                           0,      0,   0,   13,  'I',  'H',  'D',    'R'};
  putBe(png, (1u << 24) + 1, 4);
  putBe(png, 1, 4);
  for (char c : {char(8), char(0), char(0), char(0), char(0), char(0), char(0), char(0), char(0)})
    png.push_back(c);  // 8-bit grey, then the CRC, which the decoder does not check
  const QString wide = write("wide.png", png);
  // A 16-bit RGB PSD of 5 x 3 pixels whose compression field says run-length.
  std::vector<char> psd = {'8', 'B', 'P', 'S', 0, 1, 0, 0, 0, 0, 0, 0, 0, 3};
  putBe(psd, 3, 4);
  putBe(psd, 5, 4);
  putBe(psd, 16, 2);
  putBe(psd, 3, 2);
  for (int section = 0; section < 3; ++section) putBe(psd, 0, 4);
  putBe(psd, 1, 2);
  for (int sample = 0; sample < 5 * 3 * 3; ++sample) putBe(psd, std::uint32_t(sample * 1000), 2);
  const QString psd16 = write("rle16.psd", psd);

  GuiParams p = window_->paramsPanel()->params();
  p.maxPixels = 100'000'000;  // far above both images' pixel counts
  window_->paramsPanel()->setParams(p);
  QSignalSpy errors(controller(), &Controller::errorOccurred);
  int expectedErrors = 0;
  for (const QString& path : {wide, psd16}) {
    SCOPED_TRACE(path.toStdString());
    window_->openFile(path);
    ASSERT_TRUE(waitFor([&] { return errors.count() == expectedErrors + 1; }));
    ++expectedErrors;
    ASSERT_TRUE(errorBox());
    const QString advice = errorBox()->informativeText();
    EXPECT_FALSE(advice.isEmpty());
    EXPECT_FALSE(advice.contains(QStringLiteral("raise the pixel limit"))) << advice.toStdString();
    errorBox()->close();
  }
  EXPECT_TRUE(errors.at(1).at(2).toString().contains(QStringLiteral("16-bit PNG")))
      << errors.at(1).at(2).toString().toStdString();

  // Over the pixel limit itself (coffee.png has 0.24 MP), the advice is to raise it.
  p.maxPixels = 10000;
  window_->paramsPanel()->setParams(p);
  window_->openFile(QString::fromStdString(kmseg::test::sourcePath("samples/coffee.png").string()));
  ASSERT_TRUE(waitFor([&] { return errors.count() == 3; }));
  EXPECT_TRUE(errorBox()->informativeText().contains(QStringLiteral("raise the pixel limit")))
      << errorBox()->informativeText().toStdString();
  EXPECT_FALSE(controller()->image());
}

TEST_F(GuiWindow, AnUnavailableBackendSaysToSwitchToTheCpu) {
  try {
    makeEngine(Backend::Cuda);
    GTEST_SKIP() << "a CUDA device answers here, so the CUDA backend does not fail";
  } catch (const BackendError&) {
  }
  open(kmseg::test::smallPhoto("gui-backend"));
  runAndWait(fastParams(3, 5), false);
  const auto before = controller()->outcome();
  GuiParams p = fastParams(3, 5);
  p.backend = Backend::Cuda;
  window_->paramsPanel()->setParams(p);
  QSignalSpy failed(controller(), &Controller::runFailed);
  window_->runSelected();
  ASSERT_TRUE(waitFor([&] { return failed.count() == 1 && !controller()->isBusy(); }));
  QMessageBox* box = errorBox();
  ASSERT_TRUE(box);
  EXPECT_TRUE(box->isVisible());
  EXPECT_TRUE(box->informativeText().contains(QStringLiteral("CPU")));
  EXPECT_EQ(controller()->outcome(), before);
}

// With the Auto backend, a GPU run that fails is done on the CPU: the comparison completes with
// the CPU engine's results, the status line and each row say why, and no error is shown.
TEST_F(GuiWindow, AutoFinishesOnTheCpuWhenTheGpuFails) {
  // Every run of the stand-in GPU fails as a device out of memory would.
  const kmseg::test::FailingGpuRegistration reg(
      [] { throw BackendError("CUDA: cannot allocate 4096 bytes for the labels: out of memory"); },
      std::size_t(-1),
      [] {
#if defined(KMSEG_HAVE_CUDA)
        registerCudaEngine();
#else
        registerGpuEngineFactory(nullptr, 0, 0);
#endif
      });
  const QString path = kmseg::test::smallPhoto("gui-gpu-fails");
  open(path);
  GuiParams p = fastParams(3, 6);
  p.backend = Backend::Auto;
  // The GPU fails after two iterations of the reference: the status line says so as the run
  // starts again on the CPU, and its progress starts again at iteration 1.
  kmseg::test::failingGpuState().iterationsBeforeFailure = 2;
  QStringList heard;
  const auto* progressLabel = window_->findChild<QLabel*>(QStringLiteral("progressLabel"));
  ASSERT_TRUE(progressLabel);
  const QMetaObject::Connection onBackend =
      QObject::connect(controller(), &Controller::backendChanged,
                       [&](const QString& description, const QString& note) {
                         heard << description + " | " + note;
                       });
  const QMetaObject::Connection onProgress =
      QObject::connect(controller(), &Controller::progressed, [&](const RunProgress& rp) {
        if (rp.run != 0) return;
        heard << (rp.restartNote.isEmpty() ? QStringLiteral("iteration %1").arg(rp.iteration)
                                           : QStringLiteral("status: ") + progressLabel->text());
      });
  QSignalSpy failed(controller(), &Controller::runFailed);
  runAndWait(p, true);
  QObject::disconnect(onBackend);
  QObject::disconnect(onProgress);
  const QString restart = QStringLiteral(
      "the GPU run failed (CUDA: cannot allocate 4096 bytes for the labels: out of memory); it "
      "runs again on the CPU, from iteration 1");
  const qsizetype at = heard.indexOf(QStringLiteral("iteration 2"));
  ASSERT_GE(at, 1) << heard.join(QStringLiteral("\n")).toStdString();
  ASSERT_GE(heard.size(), at + 4) << heard.join(QStringLiteral("\n")).toStdString();
  EXPECT_EQ(heard[at - 1], QStringLiteral("iteration 1"));
  EXPECT_TRUE(heard[at + 1].startsWith(QStringLiteral("CPU (")) &&
              heard[at + 1].endsWith(QStringLiteral(" | ") + restart))
      << heard[at + 1].toStdString();
  EXPECT_TRUE(
      heard[at + 2].startsWith(QStringLiteral("status: [1/10] fp64 reference · starts "
                                              "again on CPU (")))
      << heard[at + 2].toStdString();
  EXPECT_EQ(heard[at + 3], QStringLiteral("iteration 1"));
  EXPECT_EQ(failed.count(), 0);
  EXPECT_FALSE(errorBox());
  const auto outcome = controller()->outcome();
  ASSERT_TRUE(outcome && outcome->isComplete());
  EXPECT_EQ(outcome->engine, "stand-in GPU");
  // One GPU run failed; the others went to the CPU without trying the GPU again.
  EXPECT_EQ(kmseg::test::failingGpuState().runs, 1);
  EXPECT_TRUE(window_->backendText().contains(QStringLiteral("CPU (")))
      << window_->backendText().toStdString();
  EXPECT_TRUE(window_->backendToolTip().contains(
      QStringLiteral("the GPU run failed (CUDA: cannot allocate 4096 bytes for the labels: out "
                     "of memory); it ran on the CPU instead")))
      << window_->backendToolTip().toStdString();
  const std::vector<Mode> modes(kAllModes.begin(), kAllModes.end());
  const WorkflowResult want = expected(path, p, modes);
  EXPECT_EQ(outcome->result(0).labels, want.reference.labels);
  for (std::size_t m = 0; m < modes.size(); ++m) {
    const KMeansResult& r = outcome->result(int(m) + 1);
    EXPECT_EQ(r.labels, want.modes[m].result.labels) << modeName(modes[m]);
    EXPECT_EQ(r.backend.rfind("CPU (", 0), 0u) << r.backend;
  }
  const ResultsModel* model = window_->resultsModel();
  const QString tip =
      model->data(model->index(2, ResultsModel::SseColumn), Qt::ToolTipRole).toString();
  EXPECT_TRUE(tip.contains(QStringLiteral("on the CPU: an earlier GPU run failed")))
      << tip.toStdString();
}

TEST_F(GuiWindow, DroppingAFileOpensIt) {
  const QString path = kmseg::test::smallPhoto("gui-drop");
  auto* mime = new QMimeData;
  mime->setUrls({QUrl::fromLocalFile(path)});
  const QPoint at = window_->rect().center();
  QDragEnterEvent enter(at, Qt::CopyAction, mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(window_.get(), &enter);
  EXPECT_TRUE(enter.isAccepted());
  QDropEvent drop(QPointF(at), Qt::CopyAction, mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(window_.get(), &drop);
  ASSERT_TRUE(
      waitFor([&] { return controller()->image() && controller()->image()->path == path; }));
  delete mime;
}

// The tolerance field takes only what its validator accepts (0 to 1): a value typed beyond that
// is neither used nor saved, and Return or leaving the field puts back the last accepted value,
// as the spin boxes do.
// The seed field takes every seed `kmseg --seed` takes (0 to 2^64 - 1, 20 digits at most) and
// refuses the rest as it is typed; an emptied field keeps the last seed, which Return puts back.
TEST_F(GuiWindow, TheSeedFieldTakesEverySixtyFourBitSeed) {
  ParamsPanel* panel = window_->paramsPanel();
  QLineEdit* field = panel->seedEdit();
  field->selectAll();
  QTest::keyClicks(field, QStringLiteral("18446744073709551615"));
  EXPECT_EQ(field->text().toStdString(), "18446744073709551615");
  EXPECT_EQ(panel->params().workflow.seed, 18446744073709551615ull);

  // One more would not fit: the last digit is refused, so are a 21st digit and letters.
  field->selectAll();
  QTest::keyClicks(field, QStringLiteral("18446744073709551616"));
  EXPECT_EQ(field->text().toStdString(), "1844674407370955161");
  QTest::keyClicks(field, QStringLiteral("0x"));
  EXPECT_EQ(field->text().toStdString(), "18446744073709551610");
  EXPECT_EQ(panel->params().workflow.seed, 18446744073709551610ull);

  // Emptied, the field leaves the last seed in use, and Return puts it back.
  field->selectAll();
  QTest::keyClick(field, Qt::Key_Backspace);
  EXPECT_TRUE(field->text().isEmpty());
  EXPECT_EQ(panel->params().workflow.seed, 18446744073709551610ull);
  QTest::keyClick(field, Qt::Key_Return);
  EXPECT_EQ(field->text().toStdString(), "18446744073709551610");

  // The seed is saved and comes back in the next session's panel.
  window_->close();
  QSettings settings;
  EXPECT_EQ(loadParams(settings).workflow.seed, 18446744073709551610ull);
}

TEST_F(GuiWindow, TheToleranceFieldUsesAndSavesOnlyAcceptedValues) {
  ParamsPanel* panel = window_->paramsPanel();
  QLineEdit* field = panel->toleranceEdit();
  const double defaultTolerance = defaultParams().workflow.kmeans.tolerance;
  ASSERT_EQ(panel->params().workflow.kmeans.tolerance, defaultTolerance);
  auto type = [&](const QString& text) {
    field->selectAll();
    QTest::keyClicks(field, text);
    ASSERT_EQ(field->text().toStdString(), text.toStdString());  // the validator lets it be typed
  };

  type(QStringLiteral("2.5"));
  EXPECT_FALSE(field->hasAcceptableInput());
  EXPECT_EQ(panel->params().workflow.kmeans.tolerance, defaultTolerance);
  QTest::keyClick(field, Qt::Key_Return);
  EXPECT_EQ(field->text().toStdString(),
            QLocale::c().toString(defaultTolerance, 'g', 6).toStdString());
  EXPECT_EQ(panel->params().workflow.kmeans.tolerance, defaultTolerance);

  type(QStringLiteral("5e-7"));
  EXPECT_EQ(panel->params().workflow.kmeans.tolerance, 5e-7);

  // Leaving the field with a value beyond 1 puts back 5e-7.
  window_->activateWindow();
  ASSERT_TRUE(QTest::qWaitForWindowActive(window_.get()));
  field->setFocus();
  ASSERT_TRUE(waitFor([&] { return field->hasFocus(); }, 5000));
  type(QStringLiteral("2"));
  EXPECT_EQ(panel->params().workflow.kmeans.tolerance, 5e-7);
  window_->resultsView()->setFocus();
  ASSERT_TRUE(waitFor([&] { return !field->hasFocus(); }, 5000));
  EXPECT_EQ(field->text().toStdString(), "5e-07");

  // What is saved is the accepted value, whatever the field shows.
  type(QStringLiteral("3"));
  window_->close();
  EXPECT_EQ(QSettings().value("params/tolerance").toDouble(), 5e-7);

  // Parameters with a tolerance the field would not accept show and use the default.
  GuiParams p = defaultParams();
  p.workflow.kmeans.tolerance = 4.0;
  panel->setParams(p);
  EXPECT_EQ(panel->params().workflow.kmeans.tolerance, defaultTolerance);
  EXPECT_TRUE(field->hasAcceptableInput());
}

// Dropping several files opens the first, and the status line says that only the first was.
TEST_F(GuiWindow, DroppingSeveralFilesOpensTheFirstAndSaysSo) {
  const QString first = kmseg::test::smallPhoto("gui-drop-first");
  const QString second = kmseg::test::smallPhoto("gui-drop-second");
  QMimeData mime;
  mime.setUrls({QUrl::fromLocalFile(first), QUrl::fromLocalFile(second)});
  const QPoint at = window_->rect().center();
  QDragEnterEvent enter(at, Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(window_.get(), &enter);
  EXPECT_TRUE(enter.isAccepted());
  QDropEvent drop(QPointF(at), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(window_.get(), &drop);
  ASSERT_TRUE(waitFor([&] {
    return !controller()->isLoading() && controller()->image() &&
           controller()->image()->path == first;
  }));
  const QString status = window_->findChild<QLabel*>(QStringLiteral("progressLabel"))->text();
  EXPECT_TRUE(status.contains(QStringLiteral("only the first of the 2 dropped files")))
      << status.toStdString();
  EXPECT_EQ(window_->recentFiles(), QStringList{QFileInfo(first).absoluteFilePath()});

  // One file dropped: no such note.
  mime.setUrls({QUrl::fromLocalFile(second)});
  QDragEnterEvent enterOne(at, Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(window_.get(), &enterOne);
  QDropEvent one(QPointF(at), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(window_.get(), &one);
  ASSERT_TRUE(
      waitFor([&] { return !controller()->isLoading() && controller()->image()->path == second; }));
  EXPECT_FALSE(window_->findChild<QLabel*>(QStringLiteral("progressLabel"))
                   ->text()
                   .contains(QStringLiteral("dropped")));
}

// The recent files read from the settings are as many as the menu keeps (8), without empty
// entries or duplicates, newest first.
TEST_F(GuiWindow, RecentFilesFromTheSettingsAreCappedAndClean) {
  QStringList stored;
  for (int i = 0; i < 12; ++i) stored << QStringLiteral("/photos/%1.png").arg(i);
  stored.insert(1, QString());
  stored.insert(3, QStringLiteral("/photos/0.png"));
  stored.insert(4, QStringLiteral("  "));
  QSettings().setValue("recentFiles", stored);
  window_ = std::make_unique<MainWindow>();
  QStringList want;
  for (int i = 0; i < 8; ++i) want << QStringLiteral("/photos/%1.png").arg(i);
  EXPECT_EQ(window_->recentFiles().join(QLatin1Char('\n')).toStdString(),
            want.join(QLatin1Char('\n')).toStdString());
  QMenu* menu = nullptr;
  for (QMenu* m : window_->findChildren<QMenu*>())
    if (m->title() == QStringLiteral("Open &Recent")) menu = m;
  ASSERT_TRUE(menu);
  QStringList entries;
  for (QAction* a : menu->actions())
    if (!a->isSeparator()) entries << a->text();
  EXPECT_EQ(entries.size(), 8 + 1);  // the files and "Clear the list"
  EXPECT_FALSE(entries.contains(QString()));
}

TEST_F(GuiWindow, ParametersPersistAndResetToDefaults) {
  GuiParams p = fastParams(11, 77);
  p.mode = Mode::Bf16Fp32;
  window_->paramsPanel()->setParams(p);
  open(kmseg::test::smallPhoto("gui-persist"));
  runAndWait(p, false);  // a run stores the parameters
  window_.reset();
  window_ = std::make_unique<MainWindow>();
  const GuiParams q = window_->paramsPanel()->params();
  EXPECT_EQ(q.workflow.kmeans.k, 11);
  EXPECT_EQ(q.workflow.kmeans.maxIterations, 77);
  EXPECT_EQ(q.mode, Mode::Bf16Fp32);
  EXPECT_EQ(q.backend, Backend::Cpu);
  EXPECT_EQ(window_->recentFiles().size(), 1);
  window_->show();
  QPushButton* reset = window_->paramsPanel()->resetButton();
  QTest::mouseClick(reset, Qt::LeftButton);
  const GuiParams d = window_->paramsPanel()->params();
  EXPECT_EQ(d.workflow.kmeans.k, defaultParams().workflow.kmeans.k);
  EXPECT_EQ(d.mode, defaultParams().mode);
  EXPECT_EQ(d.backend, defaultParams().backend);
}

}  // namespace
