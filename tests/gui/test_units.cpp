// SPDX-License-Identifier: MIT
// The GUI's pieces without a window: settings, image conversion and rendering, launch options.

#include <QCoreApplication>
#include <QFileInfo>
#include <QGraphicsSimpleTextItem>
#include <QSettings>
#include <QSignalSpy>
#include <QtCharts/QAbstractAxis>
#include <QtCharts/QChart>
#include <QtCharts/QScatterSeries>
#include <QtCharts/QValueAxis>

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>

#include "close_on_signal.h"
#include "controller.h"
#include "gui_params.h"
#include "image_convert.h"
#include "image_views.h"
#include "kmseg/error.h"
#include "kmseg/export.h"
#include "result_charts.h"
#include "results_model.h"
#include "startup.h"
#include "test_paths.h"

namespace {

using namespace kmseg;
using namespace kmseg::gui;

TEST(GuiParams, SaveAndLoadRoundTrip) {
  QSettings s;
  s.clear();
  GuiParams p = defaultParams();
  p.workflow.kmeans.k = 17;
  p.mode = Mode::Bf16Fp64;
  p.workflow.kmeans.rho = 7.5;
  p.workflow.kmeans.working = Working::Fp64;
  p.workflow.init = Init::KMeansPlusPlus;
  p.workflow.seed = 123456789012345ULL;
  p.workflow.kmeans.maxIterations = 42;
  p.workflow.kmeans.tolerance = 3e-7;
  p.workflow.kmeans.detectCycles = false;
  p.workflow.kmeans.detectRepeats = true;  // the default is false
  p.workflow.kmeans.threads = 1;
  p.features.colorSpace = ColorSpace::Lab;
  p.features.normalization = Normalization::ZScore;
  p.features.spatialWeight = 0.25;
  p.backend = Backend::Cpu;
  p.palette = PaletteKind::ColorBlindSafe;
  p.maxPixels = 1234567;
  saveParams(s, p);
  const GuiParams q = loadParams(s);
  EXPECT_EQ(q.workflow.kmeans.k, 17);
  EXPECT_EQ(q.mode, Mode::Bf16Fp64);
  EXPECT_DOUBLE_EQ(q.workflow.kmeans.rho, 7.5);
  EXPECT_EQ(q.workflow.kmeans.working, Working::Fp64);
  EXPECT_EQ(q.workflow.init, Init::KMeansPlusPlus);
  EXPECT_EQ(q.workflow.seed, 123456789012345ULL);
  EXPECT_EQ(q.workflow.kmeans.maxIterations, 42);
  EXPECT_DOUBLE_EQ(q.workflow.kmeans.tolerance, 3e-7);
  EXPECT_FALSE(q.workflow.kmeans.detectCycles);
  EXPECT_TRUE(q.workflow.kmeans.detectRepeats);
  EXPECT_EQ(q.workflow.kmeans.threads, 1);
  EXPECT_EQ(q.features.colorSpace, ColorSpace::Lab);
  EXPECT_EQ(q.features.normalization, Normalization::ZScore);
  EXPECT_DOUBLE_EQ(q.features.spatialWeight, 0.25);
  EXPECT_EQ(q.backend, Backend::Cpu);
  EXPECT_EQ(q.palette, PaletteKind::ColorBlindSafe);
  EXPECT_EQ(q.maxPixels, 1234567u);
  s.clear();
}

TEST(GuiParams, UnreadableValuesKeepTheirDefaults) {
  QSettings s;
  s.clear();
  s.setValue("params/k", 0);
  s.setValue("params/mode", "fp8");
  s.setValue("params/rho", 1.5);
  s.setValue("params/backend", "opencl");
  s.setValue("params/tolerance", "not a number");
  // Values beyond what a run accepts (the core's limits) keep the defaults too.
  s.setValue("params/threads", kMaxThreads + 1);
  s.setValue("params/spatialWeight", kMaxSpatialWeight * 2);
  const GuiParams q = loadParams(s);
  const GuiParams d = defaultParams();
  EXPECT_EQ(q.workflow.kmeans.k, d.workflow.kmeans.k);
  EXPECT_EQ(q.mode, d.mode);
  EXPECT_DOUBLE_EQ(q.workflow.kmeans.rho, d.workflow.kmeans.rho);
  EXPECT_EQ(q.backend, d.backend);
  EXPECT_DOUBLE_EQ(q.workflow.kmeans.tolerance, d.workflow.kmeans.tolerance);
  EXPECT_EQ(q.workflow.kmeans.threads, d.workflow.kmeans.threads);
  EXPECT_DOUBLE_EQ(q.features.spatialWeight, d.features.spatialWeight);
  s.clear();
}

TEST(ImageConvert, EightBitRoundTrip) {
  Image img;
  img.width = 3;
  img.height = 2;
  img.rgb8 = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 250, 251, 252};
  const QImage q = toQImage(img);
  ASSERT_EQ(q.size(), QSize(3, 2));
  EXPECT_EQ(q.pixel(2, 1), qRgb(250, 251, 252));
  EXPECT_EQ(q.pixel(1, 0), qRgb(4, 5, 6));
  const Image back = toCoreImage(q);
  EXPECT_EQ(back.bitDepth, 8);
  EXPECT_EQ(back.rgb8, img.rgb8);
}

TEST(ImageConvert, SixteenBitRoundTripKeepsEverySample) {
  Image img;
  img.width = 2;
  img.height = 1;
  img.bitDepth = 16;
  img.rgb16 = {0, 1, 65535, 40000, 257, 12345};
  const QImage q = toQImage(img);
  ASSERT_EQ(q.format(), QImage::Format_RGBX64);
  const Image back = toCoreImage(q);
  EXPECT_EQ(back.bitDepth, 16);
  EXPECT_EQ(back.rgb16, img.rgb16);
}

TEST(ImageConvert, LabelsUseThePaletteThroughTheMapping) {
  const std::vector<Rgb8> palette = {{255, 0, 0}, {0, 255, 0}};
  const std::vector<std::int32_t> labels = {0, 1, 1, 0};
  const QImage direct = renderLabels(labels, 2, 2, palette);
  EXPECT_EQ(direct.pixel(0, 0), qRgb(255, 0, 0));
  EXPECT_EQ(direct.pixel(1, 0), qRgb(0, 255, 0));
  const QImage swapped = renderLabels(labels, 2, 2, palette, {1, 0});
  EXPECT_EQ(swapped.pixel(0, 0), qRgb(0, 255, 0));
  EXPECT_EQ(swapped.pixel(1, 0), qRgb(255, 0, 0));
  EXPECT_TRUE(renderLabels(labels, 3, 2, palette).isNull());  // size mismatch
}

TEST(ImageConvert, BoundariesMarkPixelsWithADifferentFourNeighbour) {
  // 4 x 3, left half label 0, right half label 1, and one isolated label 2 pixel at (0, 2).
  const std::vector<std::int32_t> labels = {0, 0, 1, 1,  //
                                            0, 0, 1, 1,  //
                                            2, 0, 1, 1};
  const QImage b = renderBoundaries(labels, 4, 3, qRgb(255, 255, 255));
  auto on = [&](int x, int y) { return qAlpha(b.pixel(x, y)) == 255; };
  for (int y = 0; y < 3; ++y) {
    EXPECT_TRUE(on(1, y)) << y;
    EXPECT_TRUE(on(2, y)) << y;
    EXPECT_FALSE(on(3, y)) << y;
  }
  EXPECT_FALSE(on(0, 0));
  EXPECT_TRUE(on(0, 1));  // its lower neighbour is the label 2 pixel
  EXPECT_TRUE(on(0, 2));
}

TEST(ImageConvert, MaskIsWhiteWhereLabelsDiffer) {
  const QImage m = renderMask({0, 1, 0, 0}, 2, 2);
  EXPECT_EQ(m.pixel(1, 0), qRgb(255, 255, 255));
  EXPECT_NE(m.pixel(0, 0), qRgb(255, 255, 255));
}

// A map drawn into the memory of one no longer used (the memory is kept for the next map of its
// size) overwrites every pixel of it, on any thread.
TEST(ImageConvert, MapsInRecycledMemoryOverwriteEveryPixel) {
  constexpr int w = 37, h = 23;  // a size no other test draws
  std::vector<std::int32_t> stripes(w * h), one(w * h, 3);
  for (int i = 0; i < w * h; ++i) stripes[std::size_t(i)] = (i % w) % 2;
  const std::vector<Rgb8> palette = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {9, 8, 7}};
  const uchar* first = nullptr;
  {
    const QImage all = renderBoundaries(stripes, w, h, qRgb(255, 255, 255));
    ASSERT_FALSE(all.isNull());
    first = all.constBits();
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) ASSERT_EQ(qAlpha(all.pixel(x, y)), 255) << x << "," << y;
  }
  {
    const QImage none = renderBoundaries(one, w, h, qRgb(255, 255, 255));
    EXPECT_EQ(none.constBits(), first);  // the same memory, taken again
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) ASSERT_EQ(none.pixel(x, y), 0u) << x << "," << y;
  }
  {
    const QImage labels = renderLabels(one, w, h, palette);
    EXPECT_EQ(labels.constBits(), first);
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) ASSERT_EQ(labels.pixel(x, y), qRgb(9, 8, 7)) << x << "," << y;
  }
  // Maps made and dropped on several threads at once, each checked whole.
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const std::int32_t label = (t + i) % 4;
        const QImage m = renderLabels(std::vector<std::int32_t>(w * h, label), w, h, palette);
        const Rgb8 c = palette[std::size_t(label)];
        for (int y = 0; y < h; ++y)
          for (int x = 0; x < w; ++x) wrong += m.pixel(x, y) != qRgb(c.r, c.g, c.b);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(ImageConvert, SaveImageAtomicReportsAnUnwritablePath) {
  QImage img(4, 4, QImage::Format_RGB32);
  img.fill(Qt::red);
  const auto dir = kmseg::test::freshTempDir("gui-save");
  const QString good = QString::fromStdString((dir / "ok.png").string());
  QString error;
  ASSERT_TRUE(saveImageAtomic(img, good, &error)) << error.toStdString();
  EXPECT_EQ(QImage(good).pixel(1, 1), qRgb(255, 0, 0));
  const QString bad = QString::fromStdString((dir / "missing" / "x.png").string());
  EXPECT_FALSE(saveImageAtomic(img, bad, &error));
  EXPECT_TRUE(error.contains(bad)) << error.toStdString();
  EXPECT_FALSE(QFileInfo::exists(bad));
}

TEST(ResultsModel, StopTextSaysPlainlyWhenTheCapWasHit) {
  KMeansResult r;
  r.stop = StopReason::MaxIterations;
  EXPECT_EQ(ResultsModel::stopText(r, 300), QStringLiteral("iteration cap (300) — not converged"));
  r.stop = StopReason::Converged;
  EXPECT_EQ(ResultsModel::stopText(r, 300), QStringLiteral("converged"));
  r.stop = StopReason::Repeat;  // the repeat rule names the cycle's length
  r.cyclePeriod = 11;
  EXPECT_EQ(ResultsModel::stopText(r, 300), QStringLiteral("11-cycle"));
}

// The clipboard text has a header and the complete rows only, raw values at full precision;
// the reference's comparison cells are empty; no complete row, no text.
TEST(ResultsModel, TableTextHoldsTheCompleteRowsAtFullPrecision) {
  ResultsModel model;
  EXPECT_TRUE(model.tableText().isEmpty());
  auto outcome = std::make_shared<RunOutcome>();
  outcome->modes = {Mode::Fp32, Mode::Fp16};
  KMeansResult reference;
  reference.mode = Mode::Fp64;
  reference.stop = StopReason::Converged;
  reference.iterations = 12;
  reference.seconds = 0.1 + 0.2;  // not exactly 0.3
  reference.sse = 1.0 / 3.0;
  reference.backend = "CPU (2 threads)";
  outcome->reference = std::make_shared<const KMeansResult>(reference);
  ModeOutcome o;
  o.result = reference;
  o.result.mode = Mode::Fp32;
  o.comparison.diffPercent = 2.0 / 3.0;
  o.comparison.ari = 0.5;
  o.comparison.ami = 0.25;
  outcome->finished.push_back(std::make_shared<const ModeOutcome>(o));  // fp16 still to come
  model.setOutcome(outcome);
  const QStringList lines = model.tableText().split(QLatin1Char('\n'));
  ASSERT_EQ(lines.size(), 4);  // header, two rows, and the final newline's empty rest
  EXPECT_EQ(lines[0], QStringLiteral("Mode\tIterations\tStop reason\tTime [s]\tSSE\tDiff %\tARI\t"
                                     "AMI\tFallback %\tBackend"));
  EXPECT_EQ(lines[1], QStringLiteral("fp64 reference\t12\tconverged\t0.30000000000000004\t"
                                     "0.33333333333333331\t\t\t\t0\tCPU (2 threads)"));
  EXPECT_EQ(lines[2], QStringLiteral("fp32\t12\tconverged\t0.30000000000000004\t"
                                     "0.33333333333333331\t0.66666666666666663\t0.5\t0.25\t0\t"
                                     "CPU (2 threads)"));
  EXPECT_TRUE(lines[3].isEmpty());
  EXPECT_EQ(lines[1].split(QLatin1Char('\t'))[3].toDouble(), 0.1 + 0.2);
}

// Times keep three significant digits from a GPU run of a small photo (milliseconds) to a CPU
// run of a large one (minutes), and never round up into the next unit's "1000".
TEST(ResultsModel, DurationTextKeepsThreeDigitsInMillisecondsOrSeconds) {
  EXPECT_EQ(ResultsModel::durationText(0.0), QStringLiteral("0.000 ms"));
  EXPECT_EQ(ResultsModel::durationText(0.000412), QStringLiteral("0.412 ms"));
  EXPECT_EQ(ResultsModel::durationText(0.004123), QStringLiteral("4.12 ms"));
  EXPECT_EQ(ResultsModel::durationText(0.0412), QStringLiteral("41.2 ms"));
  EXPECT_EQ(ResultsModel::durationText(0.41249), QStringLiteral("412 ms"));
  EXPECT_EQ(ResultsModel::durationText(0.9996), QStringLiteral("1.00 s"));
  EXPECT_EQ(ResultsModel::durationText(0.00999999), QStringLiteral("10.0 ms"));
  EXPECT_EQ(ResultsModel::durationText(1.313), QStringLiteral("1.31 s"));
  EXPECT_EQ(ResultsModel::durationText(22.629), QStringLiteral("22.6 s"));
  EXPECT_EQ(ResultsModel::durationText(102.85), QStringLiteral("103 s"));
  EXPECT_EQ(ResultsModel::durationText(-1.0), QStringLiteral("—"));
}

// The time and backend cells say in their tooltips what the table may shorten: the exact time
// and the whole backend name.
TEST(ResultsModel, TimeAndBackendTooltipsGiveTheWholeValue) {
  auto outcome = std::make_shared<RunOutcome>();
  outcome->modes = {Mode::Fp32};
  KMeansResult reference;
  reference.mode = Mode::Fp64;
  reference.stop = StopReason::Converged;
  reference.seconds = 0.0041234;
  reference.backend = "NVIDIA H200 (CUDA)";
  outcome->reference = std::make_shared<const KMeansResult>(reference);
  ModeOutcome o;
  o.result = reference;
  o.result.mode = Mode::Fp32;
  outcome->finished.push_back(std::make_shared<const ModeOutcome>(o));
  ResultsModel model;
  model.setOutcome(outcome);
  auto cell = [&](int column, int role) { return model.data(model.index(1, column), role); };
  EXPECT_EQ(cell(ResultsModel::TimeColumn, Qt::DisplayRole).toString(), QStringLiteral("4.12 ms"));
  EXPECT_DOUBLE_EQ(cell(ResultsModel::TimeColumn, Qt::UserRole).toDouble(), 0.0041234);
  EXPECT_EQ(cell(ResultsModel::TimeColumn, Qt::ToolTipRole).toString(),
            QStringLiteral("0.0041234 s of Lloyd iterations"));
  EXPECT_EQ(cell(ResultsModel::BackendColumn, Qt::ToolTipRole).toString(),
            QStringLiteral("NVIDIA H200 (CUDA)"));
  EXPECT_FALSE(cell(ResultsModel::SseColumn, Qt::ToolTipRole).isValid());
  // The reference's row says what it is in every column, after the column's own tip.
  const QString refTip =
      model.data(model.index(0, ResultsModel::BackendColumn), Qt::ToolTipRole).toString();
  EXPECT_EQ(refTip, QStringLiteral("NVIDIA H200 (CUDA)\nThe fp64 reference every mode is "
                                   "compared with."));
}

// A run that Auto's GPU engine left to the CPU names its backend and, in every column's tooltip,
// why; the other rows do not.
TEST(ResultsModel, ARunMovedToTheCpuSaysWhyInItsTooltip) {
  auto outcome = std::make_shared<RunOutcome>();
  outcome->modes = {Mode::Fp32};
  KMeansResult reference;
  reference.mode = Mode::Fp64;
  reference.stop = StopReason::Converged;
  reference.backend = "NVIDIA H200 (CUDA)";
  outcome->reference = std::make_shared<const KMeansResult>(reference);
  ModeOutcome o;
  o.result = reference;
  o.result.mode = Mode::Fp32;
  o.result.backend = "CPU (2 threads)";
  o.result.backendNote = "the GPU run failed (CUDA: out of memory); it ran on the CPU instead";
  outcome->finished.push_back(std::make_shared<const ModeOutcome>(o));
  ResultsModel model;
  model.setOutcome(outcome);
  auto cell = [&](int row, int column, int role) {
    return model.data(model.index(row, column), role).toString();
  };
  EXPECT_EQ(cell(1, ResultsModel::BackendColumn, Qt::DisplayRole),
            QStringLiteral("CPU (2 threads)"));
  EXPECT_EQ(cell(1, ResultsModel::BackendColumn, Qt::ToolTipRole),
            QStringLiteral("CPU (2 threads)\nthe GPU run failed (CUDA: out of memory); it ran on "
                           "the CPU instead."));
  EXPECT_EQ(cell(1, ResultsModel::SseColumn, Qt::ToolTipRole),
            QStringLiteral("the GPU run failed (CUDA: out of memory); it ran on the CPU instead."));
  EXPECT_FALSE(cell(0, ResultsModel::SseColumn, Qt::ToolTipRole).contains(QStringLiteral("GPU")));
}

// The run time the window reports counts the reference once: an fp64 mode is its run again.
TEST(RunOutcome, RunSecondsCountTheReusedReferenceOnce) {
  RunOutcome outcome;
  outcome.modes = {Mode::Fp32, Mode::Fp64, Mode::Fp16};
  KMeansResult reference;
  reference.seconds = 4.0;
  outcome.reference = std::make_shared<const KMeansResult>(reference);
  for (Mode mode : outcome.modes) {
    ModeOutcome o;
    o.result.mode = mode;
    o.result.seconds = mode == Mode::Fp64 ? 4.0 : mode == Mode::Fp32 ? 0.5 : 0.25;
    outcome.finished.push_back(std::make_shared<const ModeOutcome>(o));
  }
  EXPECT_DOUBLE_EQ(outcome.runSeconds(), 4.75);
  // Part way: the rows complete so far.
  outcome.finished.resize(1);
  EXPECT_DOUBLE_EQ(outcome.runSeconds(), 4.5);
  EXPECT_EQ(outcome.readyRows(), 2);
  EXPECT_FALSE(outcome.isComplete());
  EXPECT_THROW(outcome.result(2), InvalidArgument);
  // A reference from the run before is not counted.
  outcome.referenceGiven = true;
  EXPECT_DOUBLE_EQ(outcome.runSeconds(), 0.5);
  outcome.modes = {Mode::Fp32};
  EXPECT_TRUE(outcome.isComplete());
}

// A mode that met pixels beyond its precision's range is marked and says so in its tooltip;
// the reference and a mode without them are not.
TEST(ResultsModel, MarksAModeWithPixelsBeyondItsRange) {
  auto outcome = std::make_shared<RunOutcome>();
  outcome->modes = {Mode::Fp16, Mode::Fp32};
  KMeansResult reference;
  reference.mode = Mode::Fp64;
  reference.stop = StopReason::Converged;
  outcome->reference = std::make_shared<const KMeansResult>(reference);
  for (Mode mode : outcome->modes) {
    ModeOutcome o;
    o.result.mode = mode;
    o.result.stop = StopReason::Converged;
    o.result.labels.assign(100, 0);
    o.result.normOverflows = mode == Mode::Fp16 ? 7 : 0;
    outcome->finished.push_back(std::make_shared<const ModeOutcome>(o));
  }
  ResultsModel model;
  model.setOutcome(outcome);
  auto cell = [&](int row, int role) {
    return model.data(model.index(row, ResultsModel::ModeColumn), role);
  };
  const QString tip = cell(1, Qt::ToolTipRole).toString();
  EXPECT_TRUE(tip.contains(QStringLiteral("7 of 100 pixels have a squared norm beyond fp16's")))
      << tip.toStdString();
  EXPECT_TRUE(cell(1, Qt::BackgroundRole).isValid());
  EXPECT_FALSE(cell(2, Qt::BackgroundRole).isValid());
  EXPECT_FALSE(cell(2, Qt::ToolTipRole).toString().contains(QStringLiteral("norm")));
  EXPECT_FALSE(cell(0, Qt::BackgroundRole).isValid());
}

// Point labels of the time/Diff chart stay inside the plot at any size (whole when they fit,
// elided on the roomier side, hidden when no side has room), the Diff axis takes its short
// title when the plot is too low for the long one, and the convergence chart drops its legend
// when narrow.
TEST(ResultCharts, LabelsAndAxisTitleFitTheChartsSize) {
  auto outcome = std::make_shared<RunOutcome>();
  outcome->modes.assign(kAllModes.begin(), kAllModes.end());
  outcome->reference = std::make_shared<const KMeansResult>();
  for (std::size_t m = 0; m < outcome->modes.size(); ++m) {
    ModeOutcome o;
    o.result.mode = outcome->modes[m];
    o.result.seconds = 1.0 + double(m);
    o.comparison.diffPercent = std::pow(10.0, double(m) - 4.0);  // 1e-4 % ... 1e4 %
    outcome->finished.push_back(std::make_shared<const ModeOutcome>(o));
  }
  ResultCharts charts;
  charts.setOutcome(outcome);
  QChart* chart = charts.timeDiffChart();
  auto labelItems = [&] {
    std::vector<QGraphicsSimpleTextItem*> items;
    for (QGraphicsItem* child : chart->childItems())
      if (auto* t = dynamic_cast<QGraphicsSimpleTextItem*>(child); t && t->zValue() == 10.0)
        items.push_back(t);
    return items;
  };
  auto diffTitle = [&] { return chart->axes(Qt::Vertical).front()->titleText(); };
  charts.show();
  for (const QSize size : {QSize(200, 200), QSize(900, 700)}) {
    SCOPED_TRACE(size.width());
    charts.resize(size);
    QCoreApplication::processEvents();
    const QRectF plot = chart->plotArea();
    const auto items = labelItems();
    ASSERT_EQ(items.size(), 9u);  // nine points far apart: one label each
    int whole = 0;
    for (QGraphicsSimpleTextItem* item : items) {
      if (!item->isVisible()) continue;
      const QRectF box = item->mapRectToParent(item->boundingRect());
      EXPECT_GE(box.left(), plot.left() - 0.5) << item->text().toStdString();
      EXPECT_LE(box.right(), plot.right() + 0.5) << item->text().toStdString();
      whole += item->text().contains(QChar(0x2026)) ? 0 : 1;  // no ellipsis
    }
    // The convergence chart's legend leaves a narrow chart to its curves; its y axis title fits.
    charts.setCurrentIndex(1);  // a hidden tab's chart is laid out when shown
    QCoreApplication::processEvents();
    QChart* convergence = charts.convergenceChart();
    EXPECT_EQ(convergence->legend()->isVisible(), size.width() >= ResultCharts::kLegendMinWidth);
    EXPECT_EQ(convergence->axes(Qt::Vertical).front()->titleText(),
              size.width() == 900 ? QStringLiteral("labels changed") : QStringLiteral("changed"));
    charts.setCurrentIndex(0);
    if (size.width() == 900) {
      EXPECT_EQ(whole, 9);
      EXPECT_EQ(diffTitle(), QStringLiteral("Diff % (log; 0 at the bottom)"));
    } else {
      EXPECT_LT(whole, 9);
      EXPECT_EQ(diffTitle(), QStringLiteral("Diff % (log)"));
    }
  }
}

// The time axis is in milliseconds when every run took less than a second (a GPU's runs), with
// the points where the table's times put them; in seconds otherwise.
TEST(ResultCharts, TimeAxisTakesMillisecondsBelowASecond) {
  for (const double slowest : {0.0125, 3.5}) {
    SCOPED_TRACE(slowest);
    auto outcome = std::make_shared<RunOutcome>();
    outcome->modes = {Mode::Fp32, Mode::Fp16};
    outcome->reference = std::make_shared<const KMeansResult>();
    for (Mode mode : outcome->modes) {
      ModeOutcome o;
      o.result.mode = mode;
      o.result.seconds = mode == Mode::Fp16 ? slowest : 0.004;
      o.comparison.diffPercent = mode == Mode::Fp16 ? 0.2 : 0.0;
      outcome->finished.push_back(std::make_shared<const ModeOutcome>(o));
    }
    ResultCharts charts;
    charts.setOutcome(outcome);
    QChart* chart = charts.timeDiffChart();
    const bool ms = slowest < 1.0;
    const auto* axis = qobject_cast<QValueAxis*>(chart->axes(Qt::Horizontal).front());
    ASSERT_NE(axis, nullptr);
    EXPECT_EQ(axis->titleText(), ms ? QStringLiteral("time [ms]") : QStringLiteral("time [s]"));
    const double scale = ms ? 1e3 : 1.0;
    EXPECT_GE(axis->max(), slowest * scale);
    EXPECT_LT(axis->max(), 2.0 * slowest * scale);
    ASSERT_EQ(chart->series().size(), 2);
    const auto* fp16 = qobject_cast<QScatterSeries*>(chart->series().at(1));
    ASSERT_NE(fp16, nullptr);
    ASSERT_EQ(fp16->count(), 1);
    EXPECT_DOUBLE_EQ(fp16->at(0).x(), slowest * scale);
  }
}

TEST(LaunchOptions, ParsesImageScreenshotAndSize) {
  const LaunchOptions o = parseLaunchOptions(
      {"kmseg-gui", "--screenshot", "out.png", "--size", "800x600", "photo.jpg"});
  EXPECT_TRUE(o.error.isEmpty()) << o.error.toStdString();
  EXPECT_EQ(o.image, QStringLiteral("photo.jpg"));
  EXPECT_EQ(o.screenshot, QStringLiteral("out.png"));
  EXPECT_EQ(o.windowSize, QSize(800, 600));
}

TEST(LaunchOptions, RejectsBadArguments) {
  EXPECT_FALSE(parseLaunchOptions({"kmseg-gui", "--size", "big", "a.png"}).error.isEmpty());
  // Sizes outside the window's range name the size and the range.
  for (const char* size : {"10x10", "799x500", "800x499", "7681x800", "1280x4321", "99999x99999"}) {
    const QString error = parseLaunchOptions({"kmseg-gui", "--size", size, "a.png"}).error;
    EXPECT_TRUE(error.contains(QString::fromLatin1(size))) << size << ": " << error.toStdString();
    EXPECT_TRUE(error.contains(QStringLiteral("800x500 ... 7680x4320"))) << error.toStdString();
  }
  for (const char* size : {"800x500", "7680x4320"})
    EXPECT_TRUE(parseLaunchOptions({"kmseg-gui", "--size", size, "a.png"}).error.isEmpty()) << size;
  EXPECT_FALSE(parseLaunchOptions({"kmseg-gui", "--bogus"}).error.isEmpty());
  EXPECT_FALSE(parseLaunchOptions({"kmseg-gui", "a.png", "b.png"}).error.isEmpty());
  EXPECT_TRUE(parseLaunchOptions({"kmseg-gui"}).error.isEmpty());
}

// The four views share the width equally, whatever their titles: a long mode title must not
// widen its column (at 800 x 500 the original and reference views were squeezed).
TEST(ImageViewsLayout, ViewsShareTheWidthWhateverTheTitle) {
  ImageViews views;
  views.resize(420, 300);
  views.show();
  QImage image(60, 40, QImage::Format_RGB32);
  image.fill(Qt::gray);
  views.setOriginal(image);
  views.setResult(QStringLiteral("fp16>fp32 labels (colours matched to fp64), a long title"), image,
                  image, image, {}, {});
  QCoreApplication::processEvents();
  const int w0 = views.view(ImageViews::Original)->width();
  const int w1 = views.view(ImageViews::ModeLabels)->width();
  EXPECT_GT(w0, 150);
  EXPECT_LE(std::abs(w0 - w1), 1) << w0 << " against " << w1;
  EXPECT_EQ(views.view(ImageViews::Reference)->width(), w0);
  EXPECT_EQ(views.view(ImageViews::Mask)->width(), w1);
}

// The first SIGTERM reaches the event loop (and leaves the process running); the handlers found
// are restored afterwards.
TEST(CloseOnSignal, TheFirstSignalReachesTheEventLoop) {
  struct sigaction before {};
  sigaction(SIGTERM, nullptr, &before);
  {
    CloseOnSignal closer;
    QSignalSpy spy(&closer, &CloseOnSignal::closeRequested);
    EXPECT_EQ(closer.caught(), 0);
    ASSERT_EQ(raise(SIGTERM), 0);
    EXPECT_EQ(closer.caught(), SIGTERM);
    ASSERT_TRUE(spy.wait(10000));
    ASSERT_EQ(spy.count(), 1);
    EXPECT_EQ(spy.at(0).at(0).toInt(), SIGTERM);
    EXPECT_STREQ(closeSignalName(SIGTERM), "SIGTERM");
    // Nothing was caught by this one: its process goes on.
  }
  struct sigaction after {};
  sigaction(SIGTERM, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
  CloseOnSignal again;  // one at a time, and a second may follow the first
  EXPECT_EQ(again.caught(), 0);
  again.endByCaughtSignal();  // returns: nothing caught
}

// A second signal, while a file is being written, removes its temporary file and ends the
// process by that signal (in a child process: it ends).
TEST(CloseOnSignalDeathTest, ASecondSignalRemovesTheFilesBeingWrittenAndEnds) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The child runs this test again from its start, in a fresh process with a scratch directory of
  // its own: it writes into the parent's, named in the environment it inherits.
  constexpr const char* kDirVariable = "KMSEG_TEST_SECOND_SIGNAL_DIR";
  setenv(kDirVariable, test::freshTempDir("gui-second-signal").c_str(), 0);
  const std::filesystem::path dir = std::getenv(kDirVariable);
  EXPECT_EXIT(
      {
        CloseOnSignal closer;
        writeFileAtomic(dir / "labels.png", [&](std::FILE* f) {
          std::fputs("the first bytes", f);
          std::fflush(f);
          raise(SIGINT);  // the first: asks the event loop to close
          if (closer.caught() != SIGINT) std::_Exit(3);
          raise(SIGINT);  // the second: ends the process here
          std::_Exit(4);
        });
        std::_Exit(5);
      },
      ::testing::KilledBySignal(SIGINT), "");
  unsetenv(kDirVariable);
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    left.push_back(e.path().filename().string());
  EXPECT_TRUE(left.empty()) << "left behind: " << left.front();
}

}  // namespace
