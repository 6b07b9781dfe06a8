// SPDX-License-Identifier: MIT
#include "gui_bench.h"

#include <QSignalSpy>
#include <QTest>

#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <stdexcept>

#include "controller.h"
#include "main_window.h"
#include "params_panel.h"

namespace kmseg::gui {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Processes events until `done()` or the time runs out; throws naming `step` on a timeout.
void waitUntil(const std::function<bool()>& done, int timeoutSeconds, const char* step) {
  if (!QTest::qWaitFor(done, timeoutSeconds * 1000))
    throw std::runtime_error(std::string(step) + " took longer than " +
                             std::to_string(timeoutSeconds) + " s");
}

/// Paints the whole window now, as the screen would show it.
void paint(MainWindow& w) {
  (void)w.grab();
}

}  // namespace

GuiBenchTimes benchCompareAll(MainWindow& w, const QString& path, const GuiParams& params,
                              int repeats, int timeoutSeconds) {
  Controller* c = w.controller();
  GuiBenchTimes t;

  auto t0 = Clock::now();
  w.openFile(path);
  waitUntil([&] { return !c->isLoading(); }, timeoutSeconds, "opening the photo");
  if (!c->image() || c->image()->path != path)
    throw std::runtime_error("could not open " + path.toStdString() + ": " +
                             w.lastError().toStdString());
  paint(w);
  t.openSeconds = since(t0);
  t.width = c->image()->image.width;
  t.height = c->image()->image.height;

  w.paramsPanel()->setParams(params);
  for (int r = 0; r < repeats; ++r) {
    QSignalSpy finished(c, &Controller::runFinished);
    QSignalSpy failed(c, &Controller::runFailed);
    Clock::time_point firstIteration{}, lastIteration{};
    // The connection lives as long as `listener`: this repeat, whether it returns or throws.
    QObject listener;
    QObject::connect(c, &Controller::progressed, &listener, [&](const RunProgress&) {
      lastIteration = Clock::now();
      if (firstIteration == Clock::time_point{}) firstIteration = lastIteration;
    });
    // The window takes each row in, in its own slot of rowsReady, before this one runs.
    Clock::time_point firstRow{}, modeRow{};
    QObject::connect(c, &Controller::rowsReady, &listener, [&] {
      const auto o = c->outcome();
      if (o->readyRows() == 1) firstRow = Clock::now();
      if (o->readyRows() == o->rowOf(params.mode) + 1) modeRow = Clock::now();
    });
    t0 = Clock::now();
    w.compareAll();
    // The window takes the result in (table, charts, the first row's maps) in its own slot of
    // runFinished, before this spy records the signal.
    waitUntil([&] { return (finished.count() > 0 || failed.count() > 0) && !c->isBusy(); },
              timeoutSeconds, "comparing all modes");
    if (finished.count() == 0)
      throw std::runtime_error("comparing all modes failed: " + w.lastError().toStdString());
    paint(w);
    t.resultSeconds.push_back(since(t0));
    if (firstIteration == Clock::time_point{})
      throw std::runtime_error("comparing all modes reported no iteration");
    t.firstIterationSeconds.push_back(std::chrono::duration<double>(firstIteration - t0).count());
    t.lastIterationSeconds.push_back(std::chrono::duration<double>(lastIteration - t0).count());
    if (firstRow == Clock::time_point{} || modeRow == Clock::time_point{})
      throw std::runtime_error("comparing all modes did not report its rows as they completed");
    t.firstRowSeconds.push_back(std::chrono::duration<double>(firstRow - t0).count());
    t.modeRowSeconds.push_back(std::chrono::duration<double>(modeRow - t0).count());

    const auto o = c->outcome();
    t.runSeconds.push_back(o->runSeconds());
    t.featureSeconds.push_back(o->featureSeconds);
    t.rows = o->rowCount();
    t.engine = o->engine;
  }

  for (int row = 0; row < t.rows; ++row) {
    t0 = Clock::now();
    w.selectRow(row);
    paint(w);
    t.rowSeconds.push_back(since(t0));
    if (w.selectedRow() != row)
      throw std::runtime_error("selecting row " + std::to_string(row) + " did not select it");
  }
  return t;
}

std::string toJson(const GuiBenchTimes& t) {
  const nlohmann::json j = {{"width", t.width},
                            {"height", t.height},
                            {"rows", t.rows},
                            {"engine", t.engine},
                            {"open_seconds", t.openSeconds},
                            {"result_seconds", t.resultSeconds},
                            {"first_iteration_seconds", t.firstIterationSeconds},
                            {"last_iteration_seconds", t.lastIterationSeconds},
                            {"first_row_seconds", t.firstRowSeconds},
                            {"mode_row_seconds", t.modeRowSeconds},
                            {"run_seconds", t.runSeconds},
                            {"feature_seconds", t.featureSeconds},
                            {"row_seconds", t.rowSeconds}};
  return j.dump(2) + "\n";
}

}  // namespace kmseg::gui
