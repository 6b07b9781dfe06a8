// SPDX-License-Identifier: MIT
#include "gui_params.h"

#include <QSettings>
#include <QString>

#include <cmath>
#include <string>

#include "kmseg/error.h"
#include "kmseg/metrics.h"

namespace kmseg::gui {

namespace {

std::string toStd(const QVariant& v) {
  return v.toString().toStdString();
}

// Parses a stored name with the core's parser; keeps `fallback` when it is absent or unknown.
template <class T, class Parse>
T parsed(QSettings& s, const char* key, T fallback, Parse parse) {
  if (!s.contains(key)) return fallback;
  try {
    return parse(toStd(s.value(key)));
  } catch (const kmseg::Error&) {
    return fallback;
  }
}

int boundedInt(QSettings& s, const char* key, int fallback, int lo, int hi) {
  bool ok = false;
  const int v = s.value(key, fallback).toInt(&ok);
  return ok && v >= lo && v <= hi ? v : fallback;
}

double boundedDouble(QSettings& s, const char* key, double fallback, double lo, double hi) {
  bool ok = false;
  const double v = s.value(key, fallback).toDouble(&ok);
  return ok && std::isfinite(v) && v >= lo && v <= hi ? v : fallback;
}

}  // namespace

GuiParams defaultParams() {
  return GuiParams{};
}

GuiParams loadParams(QSettings& s) {
  GuiParams p = defaultParams();
  auto& km = p.workflow.kmeans;
  s.beginGroup("params");
  km.k = boundedInt(s, "k", km.k, 1, kMaxComparedClusters);
  p.mode = parsed(s, "mode", p.mode, [](const std::string& n) { return parseMode(n); });
  // rho must stay above 2 (the reliability test is meaningless below).
  const double rho = boundedDouble(s, "rho", km.rho, 2.0, 1000.0);
  km.rho = rho > 2.0 ? rho : km.rho;
  km.working =
      parsed(s, "working", km.working, [](const std::string& n) { return parseWorking(n); });
  p.workflow.init =
      parsed(s, "init", p.workflow.init, [](const std::string& n) { return parseInit(n); });
  bool ok = false;
  const qulonglong seed = s.value("seed", qulonglong(p.workflow.seed)).toULongLong(&ok);
  if (ok) p.workflow.seed = seed;
  km.maxIterations = boundedInt(s, "maxIterations", km.maxIterations, 1, 1000000);
  km.tolerance = boundedDouble(s, "tolerance", km.tolerance, 0.0, 1.0);
  km.detectCycles = s.value("detectCycles", km.detectCycles).toBool();
  km.detectRepeats = s.value("detectRepeats", km.detectRepeats).toBool();
  km.threads = boundedInt(s, "threads", km.threads, 0, kMaxThreads);
  p.features.colorSpace = parsed(s, "colorSpace", p.features.colorSpace,
                                 [](const std::string& n) { return parseColorSpace(n); });
  p.features.normalization = parsed(s, "normalization", p.features.normalization,
                                    [](const std::string& n) { return parseNormalization(n); });
  p.features.spatialWeight =
      boundedDouble(s, "spatialWeight", p.features.spatialWeight, 0.0, kMaxSpatialWeight);
  p.backend = parsed(s, "backend", p.backend, [](const std::string& n) { return parseBackend(n); });
  p.palette = parsed(s, "palette", p.palette, [](const std::string& n) { return parsePalette(n); });
  const qulonglong maxPixels = s.value("maxPixels", qulonglong(p.maxPixels)).toULongLong(&ok);
  if (ok && maxPixels > 0) p.maxPixels = maxPixels;
  s.endGroup();
  return p;
}

void saveParams(QSettings& s, const GuiParams& p) {
  const auto& km = p.workflow.kmeans;
  auto name = [](std::string_view v) { return QString::fromUtf8(v.data(), qsizetype(v.size())); };
  s.beginGroup("params");
  s.setValue("k", km.k);
  s.setValue("mode", name(modeName(p.mode)));
  s.setValue("rho", km.rho);
  s.setValue("working", name(workingName(km.working)));
  s.setValue("init", name(initName(p.workflow.init)));
  s.setValue("seed", qulonglong(p.workflow.seed));
  s.setValue("maxIterations", km.maxIterations);
  s.setValue("tolerance", km.tolerance);
  s.setValue("detectCycles", km.detectCycles);
  s.setValue("detectRepeats", km.detectRepeats);
  s.setValue("threads", km.threads);
  s.setValue("colorSpace", name(colorSpaceName(p.features.colorSpace)));
  s.setValue("normalization", name(normalizationName(p.features.normalization)));
  s.setValue("spatialWeight", p.features.spatialWeight);
  s.setValue("backend", name(backendName(p.backend)));
  s.setValue("palette", name(paletteName(p.palette)));
  s.setValue("maxPixels", qulonglong(p.maxPixels));
  s.endGroup();
}

}  // namespace kmseg::gui
