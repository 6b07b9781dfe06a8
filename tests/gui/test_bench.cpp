// SPDX-License-Identifier: MIT
// kmseg_gui_bench's timing (gui_bench.h) on a small photo with the CPU engine: every phase is
// timed, the phases nest as they should, and a photo that cannot be opened is an error.

#include <QSettings>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <stdexcept>

#include "gui_bench.h"
#include "gui_test_util.h"
#include "main_window.h"

namespace {

using namespace kmseg;
using namespace kmseg::gui;

GuiParams smallParams() {
  GuiParams p = defaultParams();
  p.backend = Backend::Cpu;
  p.workflow.kmeans.k = 4;
  p.workflow.kmeans.maxIterations = 10;
  return p;
}

TEST(GuiBench, TimesEveryPhaseOfACompareAndEveryRow) {
  const QString path = kmseg::test::smallPhoto("gui-bench", 48, 30);
  ASSERT_FALSE(path.isEmpty());
  MainWindow window(MainWindow::Options{false});
  window.resize(1000, 700);
  window.show();
  const GuiBenchTimes t = benchCompareAll(window, path, smallParams(), 2);

  EXPECT_EQ(t.width, 48);
  EXPECT_EQ(t.height, 30);
  EXPECT_EQ(t.rows, 10);  // the reference and the nine modes
  EXPECT_NE(t.engine.find("CPU"), std::string::npos) << t.engine;
  EXPECT_GT(t.openSeconds, 0.0);
  ASSERT_EQ(t.resultSeconds.size(), 2u);
  ASSERT_EQ(t.runSeconds.size(), 2u);
  ASSERT_EQ(t.featureSeconds.size(), 2u);
  ASSERT_EQ(t.firstIterationSeconds.size(), 2u);
  ASSERT_EQ(t.lastIterationSeconds.size(), 2u);
  ASSERT_EQ(t.firstRowSeconds.size(), 2u);
  ASSERT_EQ(t.modeRowSeconds.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_GT(t.runSeconds[r], 0.0);
    // The runs and the features are parts of the worker's time, which the click-to-painted
    // time contains.
    EXPECT_LT(t.runSeconds[r] + t.featureSeconds[r], t.resultSeconds[r]);
    EXPECT_GT(t.firstIterationSeconds[r], t.featureSeconds[r]);
    EXPECT_LT(t.firstIterationSeconds[r], t.lastIterationSeconds[r]);
    EXPECT_LT(t.lastIterationSeconds[r], t.resultSeconds[r]);
    // The reference's row is shown after its first iteration, or, when it is the first
    // comparison's (the second repeat has the same parameters), before any iteration; the
    // panel mode's (fp16>fp32, the fifth) after it and before the end.
    if (r == 0)
      EXPECT_GT(t.firstRowSeconds[r], t.firstIterationSeconds[r]);
    else
      EXPECT_LT(t.firstRowSeconds[r], t.firstIterationSeconds[r]);
    EXPECT_LT(t.firstRowSeconds[r], t.modeRowSeconds[r]);
    EXPECT_LT(t.modeRowSeconds[r], t.resultSeconds[r]);
  }
  // The second comparison takes the first one's features (same photo, same options).
  EXPECT_GT(t.featureSeconds[0], 0.0);
  EXPECT_EQ(t.featureSeconds[1], 0.0);
  ASSERT_EQ(t.rowSeconds.size(), 10u);
  for (double s : t.rowSeconds) EXPECT_GT(s, 0.0);
  EXPECT_EQ(window.selectedRow(), 9);

  const auto j = nlohmann::json::parse(toJson(t));
  EXPECT_EQ(j.at("rows"), 10);
  EXPECT_EQ(j.at("result_seconds").size(), 2u);
  EXPECT_DOUBLE_EQ(j.at("run_seconds")[1].get<double>(), t.runSeconds[1]);
  EXPECT_EQ(j.at("row_seconds").size(), 10u);
  EXPECT_DOUBLE_EQ(j.at("mode_row_seconds")[0].get<double>(), t.modeRowSeconds[0]);
}

TEST(GuiBench, APhotoThatCannotBeOpenedIsAnErrorNamingIt) {
  const auto dir = kmseg::test::freshTempDir("gui-bench-bad");
  const QString path = QString::fromStdString((dir / "missing.png").string());
  MainWindow window(MainWindow::Options{false});
  window.show();
  try {
    benchCompareAll(window, path, smallParams(), 1, 60);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.png"), std::string::npos) << e.what();
  }
}

}  // namespace
