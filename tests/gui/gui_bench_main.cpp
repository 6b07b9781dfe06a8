// SPDX-License-Identifier: MIT
// kmseg_gui_bench: times "Compare all modes" in the real window on Qt's offscreen platform
// (gui_bench.h), for the benchmark tables of the README.
//
//   kmseg_gui_bench PHOTO [-k 32] [--backend auto|cuda|cpu] [--max-iterations 300]
//                   [--repeats 3] [--json FILE]

#include <QApplication>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "gui_bench.h"
#include "kmseg/export.h"
#include "kmseg/mode.h"
#include "main_window.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string list(const std::vector<double>& v) {
  std::string s;
  for (double x : v) s += (s.empty() ? "" : " / ") + std::to_string(x).substr(0, 5);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli("Times kmseg-gui's \"Compare all modes\" on Qt's offscreen platform");
  std::filesystem::path photo, json;
  int k = 32, repeats = 3, maxIterations = 300;
  std::string backend = "auto";
  cli.add_option("PHOTO", photo, "The photo to open")->required()->check(CLI::ExistingFile);
  cli.add_option("-k,--clusters", k, "K")->capture_default_str()->check(CLI::Range(1, 1024));
  cli.add_option("--backend", backend, "auto, cuda or cpu")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  cli.add_option("--max-iterations", maxIterations,
                 "t_max of every run (fewer make the runs short, not the display)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cli.add_option("--repeats", repeats, "Comparisons to time")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  cli.add_option("--json", json, "Write the times as JSON to this file");
  CLI11_PARSE(cli, argc, argv);

  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  try {
    kmseg::gui::MainWindow window(kmseg::gui::MainWindow::Options{false});
    window.resize(1600, 1000);
    window.show();
    kmseg::gui::GuiParams params = kmseg::gui::defaultParams();
    params.workflow.kmeans.k = k;
    params.workflow.kmeans.maxIterations = maxIterations;
    params.backend = kmseg::parseBackend(backend);
    const auto t = kmseg::gui::benchCompareAll(window, QString::fromStdString(photo.string()),
                                               params, repeats);
    std::printf("%s: %d x %d, K = %d, %d rows on %s\n", photo.filename().string().c_str(), t.width,
                t.height, k, t.rows, t.engine.c_str());
    std::printf("open and show the photo: %.3f s\n", t.openSeconds);
    std::printf("compare all modes, click to result painted (s): %s (median %.3f)\n",
                list(t.resultSeconds).c_str(), median(t.resultSeconds));
    std::printf("  of which features %s, Lloyd runs %s\n", list(t.featureSeconds).c_str(),
                list(t.runSeconds).c_str());
    std::printf("  first iteration heard at %s, last at %s\n",
                list(t.firstIterationSeconds).c_str(), list(t.lastIterationSeconds).c_str());
    std::printf("  reference's row shown at %s, the panel mode's (%s) at %s\n",
                list(t.firstRowSeconds).c_str(), std::string(kmseg::modeName(params.mode)).c_str(),
                list(t.modeRowSeconds).c_str());
    std::printf("each row selected and painted (s): %s\n", list(t.rowSeconds).c_str());
    if (!json.empty()) kmseg::writeFileAtomic(json, kmseg::gui::toJson(t));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kmseg_gui_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
