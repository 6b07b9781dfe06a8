// SPDX-License-Identifier: MIT
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "kmseg/export.h"
#include "kmseg/features.h"
#include "kmseg/kmeans.h"
#include "kmseg/metrics.h"

namespace kmseg {

/// One mode's run and its comparison with the fp64 reference (no comparison for the
/// reference itself).
struct ModeReport {
  const KMeansResult* result = nullptr;
  const Comparison* comparison = nullptr;  ///< null for the reference run
  bool isReference = false;
};

/// Everything a report records about one image and its runs.
struct Report {
  std::string command;  ///< "segment" or "compare"
  std::string image;    ///< file name as given by the user
  int width = 0;
  int height = 0;
  KMeansParams params;  ///< shared parameters (params.mode is the segment mode)
  FeatureOptions features;
  /// How the feature columns relate to the photo's raw values (ImageFeatures::scales): with one
  /// per centroid column, each run also gives its centroids in raw units ("centroids_raw").
  std::vector<ColumnScale> featureScales;
  Init init = Init::RandomPoints;
  std::uint64_t seed = 0;
  std::string backend;      ///< engine description, e.g. "CPU (2 threads)"
  std::string backendNote;  ///< why Auto chose this backend, empty when it was asked for
  double decodeSeconds = 0.0;
  double featureSeconds = 0.0;
  /// Wall time of the whole command up to its report (decoding, features, every run and
  /// comparison, the maps); NaN when not measured.
  double wallSeconds = std::numeric_limits<double>::quiet_NaN();
  std::vector<ModeReport> runs;
};

/// The report as JSON (parameters, per-mode results with per-iteration traces, timings (whose
/// run_seconds counts an fp64 mode next to the reference once: runWorkflow reuses the reference),
/// versions of kmseg and its libraries). parameters.modes lists the mode of every run other than
/// the reference, in order; a report whose command is not "compare" also names params.mode as
/// parameters.mode. Keys are snake_case; NaN, infinity and unmeasured
/// values (negative device seconds or trace SSE) are written as null. Throws InvalidArgument
/// when a run has no result.
std::string reportJson(const Report& report);
/// One CSV line per mode: mode, iterations, stop, seconds, sse, diff %, ari, ami, fallback %,
/// empty-cluster events, backend, reference (true for the fp64 reference run), after a header
/// line. Fields are quoted where needed and records end in CRLF (RFC 4180); NaN and the
/// reference's comparison fields are empty.
std::string reportCsv(const Report& report);

/// A mode's name made safe for file names: "fp16>fp32" -> "fp16-fp32".
std::string fileTag(Mode mode);

/// The files of a comparison in one folder, named after the photo's file name without its
/// extension (STEM), as `kmseg compare` and `kmseg segment` write them.
struct OutputFiles {
  /// One run's maps: STEM.TAG.labels.png (exact ids), .color.png and .mask.png (the disagreement
  /// mask; empty for the reference). TAG is "reference" or the mode's fileTag.
  struct Maps {
    std::filesystem::path labels, color, mask;
  };
  std::vector<Maps> maps;           ///< the reference, then each mode in order
  std::filesystem::path json, csv;  ///< STEM.COMMAND.json and .csv

  /// Every path: the maps (when `withMaps`) in run order, then the two reports.
  std::vector<std::filesystem::path> all(bool withMaps = true) const;
};

/// The files in `dir` of the reference and `modes` of a `command` ("compare" or "segment") on
/// the photo whose stem is `stem`.
OutputFiles outputFiles(const std::filesystem::path& dir, const std::string& stem,
                        const std::string& command, const std::vector<Mode>& modes);

/// Writes the maps of `report`'s runs (report.width x report.height pixels, K =
/// report.params.k) to `files.maps`: label map, colour map and, for a mode, its disagreement
/// mask. Each file is written atomically; the files go side by side on up to `threads`
/// threads. Throws InvalidArgument when `files` does not name one set of maps per run, and
/// what the writers throw (the first error; files already written stay).
void writeMaps(const OutputFiles& files, const Report& report, const std::vector<Rgb8>& palette,
               int threads);

}  // namespace kmseg
