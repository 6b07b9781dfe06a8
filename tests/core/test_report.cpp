// SPDX-License-Identifier: MIT
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "kmseg/config.h"
#include "kmseg/error.h"
#include "kmseg/report.h"
#include "test_paths.h"

namespace {

using nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// A reference fp64 run, an fp16>fp32 run compared with it, and the report over both.
struct Fixture {
  kmseg::KMeansResult reference;
  kmseg::KMeansResult mixed;
  kmseg::Comparison comparison;
  kmseg::Report report;

  Fixture() {
    reference.mode = kmseg::Mode::Fp64;
    reference.working = kmseg::Precision::Fp64;
    reference.iterations = 12;
    reference.stop = kmseg::StopReason::Converged;
    reference.sse = 4.5;
    reference.seconds = 0.25;
    reference.backend = "CPU (2 threads)";
    reference.trace = {{1, 100, 0, 300, 0, 0.5, 9.0}, {2, 0, 0, 300, 0, 0.0, 4.5}};

    mixed.mode = kmseg::Mode::Fp16Fp32;
    mixed.working = kmseg::Precision::Fp32;
    mixed.iterations = 300;
    mixed.stop = kmseg::StopReason::MaxIterations;
    mixed.sse = 4.75;
    mixed.fallbacks = 30;
    mixed.evaluations = 120;
    mixed.emptyClusterEvents = 2;
    mixed.seconds = 0.125;
    mixed.deviceSeconds = 0.0625;
    mixed.backend = "GPU, \"H200\"";
    mixed.centroids = kmseg::Matrix(3, 2);
    mixed.centroids.values = {0.5, 0.25, kNaN, 1.0, 0.0, 0.75};
    mixed.trace = {{1, 90, 10, 60, 1, kNaN, -1.0}, {2, 3, 20, 60, 1, 1e-3, 4.75}};

    comparison.mapping = {1, 0, 2};
    comparison.diffPercent = 2.5;
    comparison.differing = 5;
    comparison.clusterDiffPercent = {0.0, 10.0, kNaN};
    comparison.clusterSize = {100, 50, 0};
    comparison.ari = 0.9;
    comparison.ami = kNaN;
    comparison.sseRatio = 4.75 / 4.5;

    report.command = "compare";
    report.image = "photos/a,b \"c\".png";
    report.width = 20;
    report.height = 10;
    report.params.k = 3;
    report.params.mode = kmseg::Mode::Fp16Fp32;
    report.params.rho = 5.0;
    report.params.tolerance = 1e-8;
    report.init = kmseg::Init::KMeansPlusPlus;
    report.seed = 18446744073709551615ull;
    report.backend = "CPU (2 threads)";
    report.backendNote = "no CUDA device";
    report.decodeSeconds = 0.01;
    report.featureSeconds = kNaN;
    report.runs = {{&reference, nullptr, true}, {&mixed, &comparison, false}};
  }
};

/// Splits `text` into CRLF-terminated records (quoted fields here hold no line breaks).
std::vector<std::string> records(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t pos; (pos = text.find("\r\n", start)) != std::string::npos; start = pos + 2)
    out.push_back(text.substr(start, pos - start));
  EXPECT_EQ(start, text.size()) << "text after the last CRLF";
  return out;
}

/// RFC 4180 field splitter for one record.
std::vector<std::string> fields(const std::string& record) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (std::size_t i = 0; i < record.size(); ++i) {
    const char c = record[i];
    if (quoted) {
      if (c == '"' && i + 1 < record.size() && record[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        out.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

}  // namespace

TEST(ReportTest, CompareListsEveryModeAndSegmentNamesItsMode) {
  Fixture f;
  kmseg::KMeansResult plain = f.mixed;
  plain.mode = kmseg::Mode::Fp32;
  f.report.runs.push_back({&plain, &f.comparison, false});
  json p = json::parse(kmseg::reportJson(f.report))["parameters"];
  EXPECT_EQ(p["modes"], json::array({"fp16>fp32", "fp32"}));
  EXPECT_FALSE(p.contains("mode")) << "one mode of several would mislead: " << p["mode"];

  f.report.command = "segment";
  f.report.runs.pop_back();
  p = json::parse(kmseg::reportJson(f.report))["parameters"];
  EXPECT_EQ(p["mode"], "fp16>fp32");
  EXPECT_EQ(p["modes"], json::array({"fp16>fp32"}));
}

// A run that Auto's GPU engine left to the CPU says why, in its own entry.
TEST(ReportTest, JsonNamesARunsBackendNote) {
  Fixture f;
  kmseg::KMeansResult moved = f.mixed;
  moved.backend = "CPU (2 threads)";
  moved.backendNote = "the GPU run failed (CUDA: out of memory); it ran on the CPU instead";
  f.report.runs.back().result = &moved;
  const json runs = json::parse(kmseg::reportJson(f.report))["runs"];
  EXPECT_TRUE(runs[0]["backend_note"].is_null());
  EXPECT_EQ(runs[1]["backend"], "CPU (2 threads)");
  EXPECT_EQ(runs[1]["backend_note"], moved.backendNote);
}

// With one column scale per centroid column, each run also gives its centroids in the photo's
// raw units (ColumnScale::raw: NaN, so null, where a column was weighted 0); the report names
// those units. Without scales, centroids_raw is null.
TEST(ReportTest, JsonGivesCentroidsInRawUnits) {
  Fixture f;
  json doc = json::parse(kmseg::reportJson(f.report));
  EXPECT_TRUE(doc["runs"][1]["centroids_raw"].is_null());
  EXPECT_EQ(doc["parameters"]["features"]["raw_columns"],
            json::array({"R", "G", "B", "x (column)", "y (row)"}));
  // mixed's centroids are 3 x 2: (0.5, 0.25), (NaN, 1), (0, 0.75).
  f.report.featureScales = {{10.0, 200.0, 1.0}, {0.0, 99.0, 0.0}};
  doc = json::parse(kmseg::reportJson(f.report));
  const json raw = doc["runs"][1]["centroids_raw"];
  ASSERT_EQ(raw.size(), 3u);
  EXPECT_EQ(raw[0][0], 110.0);
  EXPECT_EQ(raw[2][0], 10.0);
  EXPECT_TRUE(raw[1][0].is_null());                                   // a NaN centroid stays NaN
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(raw[i][1].is_null()) << i;  // weight 0
  f.report.features.colorSpace = kmseg::ColorSpace::Lab;
  doc = json::parse(kmseg::reportJson(f.report));
  EXPECT_EQ(doc["parameters"]["features"]["raw_columns"][0], "L*");
}

TEST(ReportTest, JsonParsesBackWithExpectedValues) {
  Fixture f;
  const json doc = json::parse(kmseg::reportJson(f.report));
  EXPECT_EQ(doc["command"], "compare");
  EXPECT_EQ(doc["image"]["file"], f.report.image);
  EXPECT_EQ(doc["image"]["pixels"], 200);
  const json& p = doc["parameters"];
  EXPECT_EQ(p["k"], 3);
  EXPECT_EQ(p["modes"], json::array({"fp16>fp32"}));
  EXPECT_EQ(p["rho"], 5.0);
  EXPECT_EQ(p["tolerance"], 1e-8);
  EXPECT_EQ(p["working"], "auto");
  EXPECT_EQ(p["init"], "kmeans++");
  EXPECT_EQ(p["seed"].get<std::uint64_t>(), 18446744073709551615ull);
  EXPECT_EQ(p["features"]["color_space"],
            std::string(kmseg::colorSpaceName(kmseg::ColorSpace::Rgb)));
  EXPECT_EQ(p["features"]["normalization"],
            std::string(kmseg::normalizationName(kmseg::Normalization::MinMax)));
  EXPECT_EQ(doc["backend"]["note"], "no CUDA device");

  ASSERT_EQ(doc["runs"].size(), 2u);
  const json& ref = doc["runs"][0];
  EXPECT_EQ(ref["mode"], "fp64");
  EXPECT_TRUE(ref["reference"].get<bool>());
  EXPECT_EQ(ref["working_precision"], "fp64");
  EXPECT_EQ(ref["stop_reason"], "converged");
  EXPECT_TRUE(ref["comparison"].is_null());
  EXPECT_TRUE(ref["device_seconds"].is_null());  // -1: not measured
  EXPECT_EQ(ref["trace"].size(), 2u);
  EXPECT_EQ(ref["trace"][1]["sse"], 4.5);

  const json& run = doc["runs"][1];
  EXPECT_EQ(run["mode"], "fp16>fp32");
  EXPECT_FALSE(run["reference"].get<bool>());
  EXPECT_EQ(run["low_precision"], "fp16");
  EXPECT_EQ(run["high_precision"], "fp32");
  EXPECT_EQ(run["working_precision"], "fp32");
  EXPECT_EQ(run["iterations"], 300);
  EXPECT_EQ(run["stop_reason"],
            std::string(kmseg::stopReasonName(kmseg::StopReason::MaxIterations)));
  EXPECT_EQ(run["seconds"], 0.125);
  EXPECT_EQ(run["device_seconds"], 0.0625);
  EXPECT_EQ(run["sse"], 4.75);
  EXPECT_EQ(run["fallbacks"], 30);
  EXPECT_EQ(run["evaluations"], 120);
  EXPECT_EQ(run["fallback_ratio"], 0.25);
  EXPECT_EQ(run["empty_cluster_events"], 2);
  EXPECT_EQ(run["backend"], "GPU, \"H200\"");
  EXPECT_TRUE(run["backend_note"].is_null());
  ASSERT_EQ(run["centroids"].size(), 3u);
  EXPECT_EQ(run["centroids"][2], json({0.0, 0.75}));
  EXPECT_TRUE(run["centroids"][1][0].is_null());
  EXPECT_TRUE(ref["centroids"].empty());
  const json& c = run["comparison"];
  EXPECT_EQ(c["diff_percent"], 2.5);
  EXPECT_EQ(c["differing"], 5);
  EXPECT_EQ(c["ari"], 0.9);
  EXPECT_EQ(c["sse_ratio"], 4.75 / 4.5);
  EXPECT_EQ(c["mapping"], json({1, 0, 2}));
  ASSERT_EQ(c["clusters"].size(), 3u);
  EXPECT_EQ(c["clusters"][1]["size"], 50);
  EXPECT_EQ(c["clusters"][1]["diff_percent"], 10.0);
  ASSERT_EQ(run["trace"].size(), 2u);
  EXPECT_EQ(run["trace"][0]["fallbacks"], 10);
  EXPECT_EQ(run["trace"][1]["evaluations"], 60);
  EXPECT_EQ(run["trace"][1]["changed"], 3);
  EXPECT_EQ(run["trace"][1]["centre_shift"], 1e-3);

  EXPECT_EQ(doc["timings"]["decode_seconds"], 0.01);
  EXPECT_EQ(doc["timings"]["run_seconds"], 0.375);
  EXPECT_EQ(doc["versions"]["kmseg"], kmseg::kVersion);
  EXPECT_FALSE(doc["versions"]["libpng"].get<std::string>().empty());
  EXPECT_FALSE(doc["versions"]["nlohmann_json"].get<std::string>().empty());
  EXPECT_FALSE(doc["versions"]["compiler"].get<std::string>().empty());
}

TEST(ReportTest, RunSecondsCountTheReusedReferenceOnce) {
  Fixture f;
  // compare --modes fp64,fp16>fp32: the fp64 mode is the reference's result again.
  const kmseg::KMeansResult fp64 = f.reference;
  f.report.runs = {{&f.reference, nullptr, true},
                   {&fp64, &f.comparison, false},
                   {&f.mixed, &f.comparison, false}};
  json doc = json::parse(kmseg::reportJson(f.report));
  EXPECT_EQ(doc["timings"]["run_seconds"], 0.375);  // 0.25 + 0.125, not 0.625
  ASSERT_EQ(doc["runs"].size(), 3u);
  EXPECT_EQ(doc["runs"][1]["seconds"], 0.25);  // the row itself keeps its time
  // Without a reference row an fp64 run is a run of its own.
  f.report.runs = {{&fp64, &f.comparison, false}, {&f.mixed, &f.comparison, false}};
  doc = json::parse(kmseg::reportJson(f.report));
  EXPECT_EQ(doc["timings"]["run_seconds"], 0.375);
}

TEST(ReportTest, JsonWritesNullForNaNAndUnmeasured) {
  Fixture f;
  const std::string text = kmseg::reportJson(f.report);
  EXPECT_EQ(text.find("NaN"), std::string::npos);
  EXPECT_EQ(text.find("nan"), std::string::npos);
  const json doc = json::parse(text);
  const json& run = doc["runs"][1];
  EXPECT_TRUE(run["comparison"]["ami"].is_null());
  EXPECT_TRUE(run["comparison"]["clusters"][2]["diff_percent"].is_null());
  EXPECT_TRUE(run["trace"][0]["centre_shift"].is_null());
  EXPECT_TRUE(run["trace"][0]["sse"].is_null());  // -1: not traced
  EXPECT_TRUE(doc["timings"]["feature_seconds"].is_null());
  EXPECT_TRUE(doc["timings"]["total_seconds"].is_null());
  EXPECT_TRUE(doc["timings"]["wall_seconds"].is_null());  // not measured
  f.report.wallSeconds = 2.5;
  EXPECT_EQ(json::parse(kmseg::reportJson(f.report))["timings"]["wall_seconds"], 2.5);
  f.mixed.sse = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(json::parse(kmseg::reportJson(f.report))["runs"][1]["sse"].is_null());
}

TEST(ReportTest, JsonToleratesInvalidUtf8InNames) {
  Fixture f;
  f.report.image = "bad\xff\xfe.png";
  EXPECT_NO_THROW(json::parse(kmseg::reportJson(f.report)));
}

TEST(ReportTest, CsvHasHeaderAndOneRowPerMode) {
  Fixture f;
  const auto rows = records(kmseg::reportCsv(f.report));
  ASSERT_EQ(rows.size(), 3u);
  const std::vector<std::string> header = {
      "mode",         "iterations", "stop", "seconds",          "sse",
      "diff_percent", "ari",        "ami",  "fallback_percent", "empty_cluster_events",
      "backend",      "reference"};
  EXPECT_EQ(fields(rows[0]), header);

  const auto ref = fields(rows[1]);
  ASSERT_EQ(ref.size(), header.size());
  EXPECT_EQ(ref[0], "fp64");
  EXPECT_EQ(ref[1], "12");
  EXPECT_EQ(ref[2], "converged");
  EXPECT_EQ(ref[5], "");  // the reference has no comparison
  EXPECT_EQ(ref[8], "0");
  EXPECT_EQ(ref[11], "true");  // the fp64 reference row is marked as such

  const auto run = fields(rows[2]);
  ASSERT_EQ(run.size(), header.size());
  EXPECT_EQ(run[0], "fp16>fp32");
  EXPECT_EQ(run[1], "300");
  EXPECT_EQ(std::stod(run[3]), 0.125);
  EXPECT_EQ(std::stod(run[4]), 4.75);
  EXPECT_EQ(std::stod(run[5]), 2.5);
  EXPECT_EQ(std::stod(run[6]), 0.9);
  EXPECT_EQ(run[7], "");  // NaN AMI -> empty field
  EXPECT_EQ(std::stod(run[8]), 25.0);
  EXPECT_EQ(run[9], "2");
  EXPECT_EQ(run[10], "GPU, \"H200\"");
  EXPECT_EQ(run[11], "false");
  // The raw record quotes the field and doubles its quotes.
  EXPECT_NE(rows[2].find(",\"GPU, \"\"H200\"\"\""), std::string::npos) << rows[2];
}

TEST(ReportTest, CsvQuotesLineBreaks) {
  Fixture f;
  f.mixed.backend = "line1\nline2";
  const std::string csv = kmseg::reportCsv(f.report);
  EXPECT_NE(csv.find(",\"line1\nline2\",false\r\n"), std::string::npos) << csv;
}

TEST(ReportTest, EmptyReportAndMissingResult) {
  kmseg::Report report;
  EXPECT_EQ(records(kmseg::reportCsv(report)).size(), 1u);
  EXPECT_TRUE(json::parse(kmseg::reportJson(report))["runs"].empty());
  report.runs.push_back({});
  EXPECT_THROW(kmseg::reportJson(report), kmseg::InvalidArgument);
  EXPECT_THROW(kmseg::reportCsv(report), kmseg::InvalidArgument);
}

namespace {

// The files of a comparison are named as the command line names them, and writeMaps writes
// each run's maps so that they read back.
TEST(OutputFiles, NamesEveryRunsMapsAndTheReports) {
  EXPECT_EQ(kmseg::fileTag(kmseg::Mode::Fp16Fp32), "fp16-fp32");
  EXPECT_EQ(kmseg::fileTag(kmseg::Mode::Bf16), "bf16");
  const std::filesystem::path dir = "out";
  const kmseg::OutputFiles f =
      kmseg::outputFiles(dir, "bee", "compare", {kmseg::Mode::Fp32, kmseg::Mode::Fp32Fp64});
  ASSERT_EQ(f.maps.size(), 3u);
  EXPECT_EQ(f.maps[0].labels, dir / "bee.reference.labels.png");
  EXPECT_EQ(f.maps[0].color, dir / "bee.reference.color.png");
  EXPECT_TRUE(f.maps[0].mask.empty());
  EXPECT_EQ(f.maps[2].mask, dir / "bee.fp32-fp64.mask.png");
  EXPECT_EQ(f.json, dir / "bee.compare.json");
  EXPECT_EQ(f.csv, dir / "bee.compare.csv");
  const auto all = f.all();
  ASSERT_EQ(all.size(), 2u + 3u + 3u + 2u);
  EXPECT_EQ(all.front(), f.maps[0].labels);
  EXPECT_EQ(all[2], dir / "bee.fp32.labels.png");
  EXPECT_EQ(all.back(), f.csv);
  EXPECT_EQ(f.all(false), (std::vector<std::filesystem::path>{f.json, f.csv}));
  EXPECT_EQ(kmseg::outputFiles(dir, "bee", "segment", {}).json, dir / "bee.segment.json");
}

TEST(OutputFiles, WriteMapsWritesEveryRunsMaps) {
  Fixture fx;
  fx.reference.labels.resize(200);
  fx.mixed.labels.resize(200);
  fx.comparison.mask.resize(200);
  for (std::size_t i = 0; i < 200; ++i) {
    fx.reference.labels[i] = std::int32_t(i % 3);
    fx.mixed.labels[i] = std::int32_t((i / 7) % 3);
    fx.comparison.mask[i] = std::uint8_t(i % 5 == 0);
  }
  const auto dir = kmseg::test::freshTempDir("output-files");
  const kmseg::OutputFiles f = kmseg::outputFiles(dir, "a", "compare", {kmseg::Mode::Fp16Fp32});
  const auto palette = kmseg::makePalette(3);
  kmseg::writeMaps(f, fx.report, palette, 4);
  EXPECT_EQ(kmseg::readLabelPng(f.maps[0].labels).labels, fx.reference.labels);
  EXPECT_EQ(kmseg::readLabelPng(f.maps[1].labels).labels, fx.mixed.labels);
  for (const auto& p : {f.maps[0].color, f.maps[1].color, f.maps[1].mask})
    EXPECT_GT(std::filesystem::file_size(p), 0u) << p;
  EXPECT_FALSE(std::filesystem::exists(dir / "a.reference.mask.png"));

  // One set of maps per run, or nothing is written.
  const kmseg::OutputFiles fewer = kmseg::outputFiles(dir / "fewer", "a", "compare", {});
  EXPECT_THROW(kmseg::writeMaps(fewer, fx.report, palette, 4), kmseg::InvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(dir / "fewer"));
  // A folder that is not there: the writer's error names the file.
  const kmseg::OutputFiles missing =
      kmseg::outputFiles(dir / "missing", "a", "compare", {kmseg::Mode::Fp16Fp32});
  try {
    kmseg::writeMaps(missing, fx.report, palette, 4);
    FAIL() << "no error";
  } catch (const kmseg::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
  }
}

}  // namespace
