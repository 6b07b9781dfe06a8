// SPDX-License-Identifier: MIT
#include "kmseg/report.h"

#include <png.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <string_view>

#if __has_include(<opencv2/core/version.hpp>)
#include <opencv2/core/version.hpp>
#endif

#include "kmseg/config.h"
#include "kmseg/error.h"
#include "kmseg/parallel.h"

namespace kmseg {

namespace {

// Keys keep the order written here (parameters first, versions last), for people reading it.
using json = nlohmann::ordered_json;

// JSON has no NaN or infinity: a non-finite value is written as null.
json number(double v) {
  return std::isfinite(v) ? json(v) : json(nullptr);
}

// Engines report "not measured" as a negative value; that is null too.
json measured(double v) {
  return v >= 0.0 ? number(v) : json(nullptr);
}

void checkRuns(const Report& report) {
  for (std::size_t i = 0; i < report.runs.size(); ++i) {
    if (!report.runs[i].result)
      throw InvalidArgument("report: run " + std::to_string(i) + " has no result");
  }
}

json traceJson(const std::vector<IterationStats>& trace) {
  json rows = json::array();
  for (const IterationStats& s : trace) {
    rows.push_back(
        {{"iteration", s.iteration},
         {"changed", s.changed},
         {"fallbacks", s.fallbacks},
         {"evaluations", s.evaluations},
         {"fallback_ratio",
          s.evaluations > 0 ? number(double(s.fallbacks) / double(s.evaluations)) : json(0.0)},
         {"empty_clusters", s.emptyClusters},
         {"centre_shift", number(s.centreShift)},
         {"sse", measured(s.sse)}});
  }
  return rows;
}

json comparisonJson(const Comparison& c) {
  json clusters = json::array();
  const std::size_t n = std::max(c.clusterDiffPercent.size(), c.clusterSize.size());
  for (std::size_t i = 0; i < n; ++i) {
    clusters.push_back(
        {{"cluster", i},
         {"size", i < c.clusterSize.size() ? json(c.clusterSize[i]) : json(nullptr)},
         {"diff_percent",
          i < c.clusterDiffPercent.size() ? number(c.clusterDiffPercent[i]) : json(nullptr)}});
  }
  return {{"diff_percent", number(c.diffPercent)},
          {"differing", c.differing},
          {"ari", number(c.ari)},
          {"ami", number(c.ami)},
          {"sse_ratio", number(c.sseRatio)},
          {"mapping", c.mapping},
          {"clusters", clusters}};
}

// K x D centres in feature units; an inconsistent matrix is written as null, not read past.
json centroidsJson(const Matrix& m) {
  if (m.values.size() != m.rows * m.cols) return nullptr;
  json rows = json::array();
  for (std::size_t i = 0; i < m.rows; ++i) {
    json row = json::array();
    for (std::size_t j = 0; j < m.cols; ++j) row.push_back(number(m(i, j)));
    rows.push_back(std::move(row));
  }
  return rows;
}

// The centroids in the photo's raw units (see ColumnScale), or null without one scale per column.
json rawCentroidsJson(const Matrix& m, const std::vector<ColumnScale>& scales) {
  if (m.values.size() != m.rows * m.cols || scales.size() != m.cols) return nullptr;
  return centroidsJson(inRawUnits(m, scales));
}

json runJson(const ModeReport& run, const std::vector<ColumnScale>& scales) {
  const KMeansResult& r = *run.result;
  return {{"mode", modeName(r.mode)},
          {"reference", run.isReference},
          {"low_precision", precisionName(lowPrecision(r.mode))},
          {"high_precision", precisionName(highPrecision(r.mode))},
          {"working_precision", precisionName(r.working)},
          {"iterations", r.iterations},
          {"stop_reason", stopReasonText(r.stop, r.cyclePeriod)},
          {"cycle_period", r.cyclePeriod},
          {"seconds", number(r.seconds)},
          {"device_seconds", measured(r.deviceSeconds)},
          {"sse", number(r.sse)},
          {"fallbacks", r.fallbacks},
          {"evaluations", r.evaluations},
          {"fallback_ratio", number(r.fallbackRatio())},
          {"empty_cluster_events", r.emptyClusterEvents},
          {"norm_overflows", r.normOverflows},
          {"backend", r.backend},
          {"backend_note", r.backendNote.empty() ? json(nullptr) : json(r.backendNote)},
          {"centroids", centroidsJson(r.centroids)},
          {"centroids_raw", rawCentroidsJson(r.centroids, scales)},
          {"comparison", run.comparison ? comparisonJson(*run.comparison) : json(nullptr)},
          {"trace", traceJson(r.trace)}};
}

json versionsJson() {
  json v = {
    {"kmseg", kVersion},
    {"libpng", PNG_LIBPNG_VER_STRING},
    {"nlohmann_json", std::to_string(NLOHMANN_JSON_VERSION_MAJOR) + "." +
                          std::to_string(NLOHMANN_JSON_VERSION_MINOR) + "." +
                          std::to_string(NLOHMANN_JSON_VERSION_PATCH)},
#if defined(__clang__)
    {"compiler", "clang " __VERSION__},
#elif defined(__GNUC__)
    {"compiler", "gcc " __VERSION__},
#else
    {"compiler", "unknown"},
#endif
    {"cplusplus", __cplusplus}
  };
#ifdef CV_VERSION
  v["opencv"] = CV_VERSION;
#endif
  return v;
}

// ---- CSV -------------------------------------------------------------------------------------

// RFC 4180: a field holding a comma, a double quote, CR or LF is enclosed in double quotes, and
// each double quote inside it is doubled.
std::string csvField(std::string_view s) {
  if (s.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(s);
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

// The shortest text that reads back as the same double; empty for NaN and infinity.
std::string csvNumber(double v) {
  if (!std::isfinite(v)) return "";
  char buffer[32];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);
  return ec == std::errc() ? std::string(buffer, end) : std::string();
}

}  // namespace

std::string reportJson(const Report& report) {
  checkRuns(report);
  const KMeansParams& p = report.params;
  json runs = json::array();
  json modes = json::array();  // the modes run next to the reference, in order
  double runSeconds = 0.0;
  // An fp64 mode next to the reference is the reference's run again (runWorkflow reuses it):
  // its time is counted once.
  const bool hasReference = std::any_of(report.runs.begin(), report.runs.end(),
                                        [](const ModeReport& r) { return r.isReference; });
  for (const ModeReport& run : report.runs) {
    runs.push_back(runJson(run, report.featureScales));
    if (!run.isReference) modes.push_back(modeName(run.result->mode));
    const bool reused = hasReference && !run.isReference && run.result->mode == Mode::Fp64;
    if (!reused && std::isfinite(run.result->seconds)) runSeconds += run.result->seconds;
  }
  json doc = {
      {"command", report.command},
      {"image",
       {{"file", report.image},
        {"width", report.width},
        {"height", report.height},
        {"pixels", std::int64_t(report.width) * std::int64_t(report.height)}}},
      {"parameters",
       {{"k", p.k},
        {"modes", modes},
        {"rho", number(p.rho)},
        {"working", workingName(p.working)},
        {"max_iterations", p.maxIterations},
        {"tolerance", number(p.tolerance)},
        {"detect_cycles", p.detectCycles},
        {"detect_repeats", p.detectRepeats},
        {"trace_sse", p.traceSse},
        {"threads", p.threads},
        {"init", initName(report.init)},
        {"seed", report.seed},
        {"features",
         {{"color_space", colorSpaceName(report.features.colorSpace)},
          {"normalization", normalizationName(report.features.normalization)},
          {"spatial_weight", number(report.features.spatialWeight)},
          // The raw units of centroids_raw's columns.
          {"raw_columns", report.features.colorSpace == ColorSpace::Lab
                              ? json::array({"L*", "a*", "b*", "x (column)", "y (row)"})
                              : json::array({"R", "G", "B", "x (column)", "y (row)"})}}}}},
      {"backend",
       {{"engine", report.backend},
        {"note", report.backendNote.empty() ? json(nullptr) : json(report.backendNote)}}},
      {"timings",
       {{"decode_seconds", number(report.decodeSeconds)},
        {"feature_seconds", number(report.featureSeconds)},
        {"run_seconds", number(runSeconds)},
        {"total_seconds", number(report.decodeSeconds + report.featureSeconds + runSeconds)},
        {"wall_seconds", number(report.wallSeconds)}}},
      {"runs", runs},
      {"versions", versionsJson()}};
  // A segment report runs one mode and names it; a compare report runs several (listed above).
  if (report.command != "compare") doc["parameters"]["mode"] = modeName(p.mode);
  // Strings from the user (file names) need not be UTF-8: replace invalid bytes, never throw.
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string reportCsv(const Report& report) {
  checkRuns(report);
  // RFC 4180 ends every record, the header included, with CRLF.
  constexpr std::string_view kEol = "\r\n";
  std::string out =
      "mode,iterations,stop,seconds,sse,diff_percent,ari,ami,fallback_percent,"
      "empty_cluster_events,backend,reference";
  out += kEol;
  for (const ModeReport& run : report.runs) {
    const KMeansResult& r = *run.result;
    const Comparison* c = run.comparison;
    const std::string fields[] = {csvField(modeName(r.mode)),
                                  std::to_string(r.iterations),
                                  csvField(stopReasonText(r.stop, r.cyclePeriod)),
                                  csvNumber(r.seconds),
                                  csvNumber(r.sse),
                                  c ? csvNumber(c->diffPercent) : std::string(),
                                  c ? csvNumber(c->ari) : std::string(),
                                  c ? csvNumber(c->ami) : std::string(),
                                  csvNumber(100.0 * r.fallbackRatio()),
                                  std::to_string(r.emptyClusterEvents),
                                  csvField(r.backend),
                                  run.isReference ? "true" : "false"};
    bool first = true;
    for (const std::string& f : fields) {
      if (!first) out += ',';
      out += f;
      first = false;
    }
    out += kEol;
  }
  return out;
}

std::string fileTag(Mode mode) {
  std::string s(modeName(mode));
  for (char& c : s)
    if (c == '>') c = '-';
  return s;
}

std::vector<std::filesystem::path> OutputFiles::all(bool withMaps) const {
  std::vector<std::filesystem::path> paths;
  if (withMaps) {
    for (const Maps& m : maps) {
      paths.push_back(m.labels);
      paths.push_back(m.color);
      if (!m.mask.empty()) paths.push_back(m.mask);
    }
  }
  paths.push_back(json);
  paths.push_back(csv);
  return paths;
}

OutputFiles outputFiles(const std::filesystem::path& dir, const std::string& stem,
                        const std::string& command, const std::vector<Mode>& modes) {
  OutputFiles f;
  auto maps = [&](const std::string& tag, bool mask) {
    const std::string base = (dir / (stem + "." + tag)).string();
    return OutputFiles::Maps{
        base + ".labels.png", base + ".color.png",
        mask ? std::filesystem::path(base + ".mask.png") : std::filesystem::path()};
  };
  f.maps.push_back(maps("reference", false));
  for (Mode mode : modes) f.maps.push_back(maps(fileTag(mode), true));
  f.json = dir / (stem + "." + command + ".json");
  f.csv = dir / (stem + "." + command + ".csv");
  return f;
}

void writeMaps(const OutputFiles& files, const Report& report, const std::vector<Rgb8>& palette,
               int threads) {
  if (files.maps.size() != report.runs.size())
    throw InvalidArgument("the output files name maps for " + std::to_string(files.maps.size()) +
                          " runs, the report has " + std::to_string(report.runs.size()));
  const int w = report.width, h = report.height, k = report.params.k;
  // One task per file.
  std::vector<std::function<void()>> writes;
  for (std::size_t r = 0; r < report.runs.size(); ++r) {
    const OutputFiles::Maps* f = &files.maps[r];
    const ModeReport& run = report.runs[r];
    if (!run.result) throw InvalidArgument("run " + std::to_string(r) + " has no result");
    const std::vector<std::int32_t>* labels = &run.result->labels;
    writes.emplace_back([&, f, labels] { writeLabelPng(f->labels, *labels, w, h, k, palette); });
    writes.emplace_back([&, f, labels] { writeColorPng(f->color, *labels, w, h, palette); });
    if (run.comparison && !f->mask.empty()) {
      const std::vector<std::uint8_t>* mask = &run.comparison->mask;
      writes.emplace_back([&, f, mask] { writeMaskPng(f->mask, *mask, w, h); });
    }
  }
  parallelFor(std::int64_t(writes.size()), threads,
              [&](std::int64_t t) { writes[std::size_t(t)](); });
}

}  // namespace kmseg
