// SPDX-License-Identifier: MIT
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kmseg/engine.h"
#include "kmseg/error.h"
#include "kmseg/export.h"
#include "kmseg/features.h"
#include "kmseg/image_io.h"
#include "kmseg/workflow.h"

namespace kmseg::cli {

/// Everything `kmseg segment` and `kmseg compare` take from the command line.
struct Options {
  std::filesystem::path image;
  std::filesystem::path outputDir = "kmseg-out";
  std::vector<Mode> modes;
  WorkflowParams workflow;
  FeatureOptions features;
  LoadOptions load;
  Backend backend = Backend::Auto;
  PaletteKind palette = PaletteKind::Distinct;
  bool saveMaps = true;  ///< write label, colour and mask PNGs per mode
  bool quiet = false;    ///< no progress line on stderr
};

/// Runs the workflow for `command` ("segment" or "compare"), prints the table on stdout a row
/// at a time as the runs complete, and writes the outputs. Throws kmseg::Error on failure. An
/// interrupt (SIGINT, as Ctrl+C sends, or SIGTERM) stops the runs within one iteration and
/// throws Cancelled before any output is written; once the files are being written, it says on
/// stderr that they are finished first. A second one removes the temporary files of the writes
/// in progress and ends the process with the signal's default action.
/// When standard output is a pipe whose reader has gone (`kmseg compare ... | head -3`), the
/// runs stop the same way and StdoutClosed is thrown instead, before any output is written.
void runCommand(const std::string& command, const Options& options);

/// The lines on stderr that say which runs of a command Auto's GPU engine did not do, each
/// once, as it comes: a run the GPU gave up part-way as it starts again on the CPU (the progress
/// line then starts again at iteration 1); any other note with the run's row, unless it repeats
/// the row before's (the runs after a GPU failure all say "an earlier GPU run failed") or the
/// run said it as it started again.
class BackendNotes {
 public:
  /// The line for run `run` ("reference" or a mode's name) starting again on another backend.
  std::string restarted(const std::string& run, const std::string& note);
  /// The line for run `run`'s row with its result's backendNote `note`, or empty for none.
  std::string row(const std::string& run, const std::string& note);

 private:
  std::string last_;                    ///< the note of the row before
  std::vector<std::string> restarted_;  ///< runs that said so as they started again
};

/// Standard output's reader went away during the runs (EPIPE): they stopped, nothing was written.
class StdoutClosed : public Cancelled {};

/// A run's seconds as the table prints them, in at most nine characters: four significant
/// digits or more, from a run of a few pixels ("8.123e-06") or a GPU run of a small photo
/// ("0.004123") to a CPU run of a large one ("123.5").
std::string secondsText(double seconds);

/// The modes of a --modes list, in the order given. Throws InvalidArgument for an unknown name
/// and for a mode named twice (also as fp16>fp32 and fp16-fp32): its runs would write the same
/// files.
std::vector<Mode> parseModeList(const std::vector<std::string>& names);

/// Wall-clock seconds since `t0` (steady clock).
inline double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace kmseg::cli
