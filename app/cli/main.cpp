// SPDX-License-Identifier: MIT
// kmseg: k-means image segmentation at a chosen floating-point precision, from the command line.
// Exit codes: 0 success, 1 runtime error, 2 usage error, 130 interrupted (segment, compare); one
// line on stderr for each.

#include <CLI/CLI.hpp>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "bench.h"
#include "commands.h"
#include "kmseg/config.h"
#include "kmseg/error.h"
#include "kmseg/features.h"
#include "kmseg/metrics.h"
#include "kmseg/workflow.h"
#include "number_options.h"

namespace {

using kmseg::cli::Options;
using kmseg::cli::realNumber;
using kmseg::cli::wholeNumberIn;

// Option values as typed; converted and checked after parsing so that every bad value gets the
// library's message (which names the value and the valid range).
struct RawOptions {
  std::string mode = "fp16>fp32";
  std::vector<std::string> modes;
  std::string working = "auto";
  std::string init = "random";
  std::string colorSpace = "rgb";
  std::string normalization = "minmax";
  std::string backend = "auto";
  std::string palette = "distinct";
  bool noCycleStop = false;
  bool noMaps = false;
  bool quiet = false;
};

void addCommonOptions(CLI::App& cmd, Options& o, RawOptions& raw) {
  cmd.add_option("IMAGE", o.image,
                 "Photo to segment (JPEG, PNG, BMP, TGA, PSD, GIF, HDR, PIC, PNM)")
      ->required();
  auto& p = o.workflow.kmeans;
  // K and the iteration cap take any int here: the library's checks name their limits.
  constexpr int kIntMin = std::numeric_limits<int>::min(),
                kIntMax = std::numeric_limits<int>::max();
  cmd.add_option("-k,--clusters", p.k, "Number of clusters K (1 to 8192)")
      ->transform(wholeNumberIn(kIntMin, kIntMax,
                                "K is from 1 to " + std::to_string(kmseg::kMaxComparedClusters)))
      ->capture_default_str();
  cmd.add_option("--rho", p.rho, "Safety factor of the reliability test of mixed modes (> 2)")
      ->capture_default_str()
      ->transform(realNumber());
  cmd.add_option("--working", raw.working,
                 "Working precision of data and centroid update: auto (fp64 for mode fp64, "
                 "fp32 otherwise), fp32, fp64")
      ->capture_default_str();
  cmd.add_option("--init", raw.init, "Initial centres: random (K distinct pixels) or kmeans++")
      ->capture_default_str();
  cmd.add_option("--seed", o.workflow.seed, "Seed of the initial centres")
      ->transform(wholeNumberIn<std::uint64_t>(0, std::numeric_limits<std::uint64_t>::max()))
      ->capture_default_str();
  cmd.add_option("--max-iter", p.maxIterations,
                 "Iteration cap t_max (1 to " + std::to_string(kmseg::kMaxIterations) + ")")
      ->transform(
          wholeNumberIn(kIntMin, kIntMax,
                        "the iteration cap is from 1 to " + std::to_string(kmseg::kMaxIterations)))
      ->capture_default_str();
  cmd.add_option("--tol", p.tolerance, "Stop when the relative centre shift is below this (>= 0)")
      ->capture_default_str()
      ->transform(realNumber());
  cmd.add_flag(
      "--no-cycle-stop", raw.noCycleStop,
      "Do not stop when labels repeat those of two iterations earlier (the paper's rules)");
  cmd.add_flag("--repeat-stop", p.detectRepeats,
               "Also stop when the centres repeat those of 2 to " +
                   std::to_string(kmseg::kRepeatWindow) +
                   " iterations earlier: a cycle of any such length, found exactly once it has "
                   "run twice (the stop column then says 'N-cycle')");
  cmd.add_option("--color-space", raw.colorSpace, "Colour features: rgb or lab")
      ->capture_default_str();
  cmd.add_option("--normalization", raw.normalization, "Per-column normalisation: minmax or zscore")
      ->capture_default_str();
  cmd.add_option("--spatial-weight", o.features.spatialWeight,
                 "Weight of the x,y columns after normalisation (0 to 32; 0 ignores position)")
      ->transform(realNumber())
      ->capture_default_str();
  cmd.add_option("--backend", raw.backend,
                 "Engine: auto (the GPU, or the CPU if none answers or a GPU run fails), cuda, cpu")
      ->capture_default_str();
  cmd.add_option("--threads", p.threads, "CPU threads (0 = all cores, at most 1024)")
      ->transform(wholeNumberIn(0, kmseg::kMaxThreads))
      ->capture_default_str();
  cmd.add_option("-o,--output-dir", o.outputDir, "Directory for label maps and reports")
      ->capture_default_str();
  cmd.add_option("--max-pixels", o.load.maxPixels,
                 "Refuse images with more pixels than this (checked from the file header)")
      ->transform(wholeNumberIn<std::uint64_t>(1, std::numeric_limits<std::uint64_t>::max()))
      ->capture_default_str();
  cmd.add_option("--palette", raw.palette, "Label colours: distinct or cb-safe (colour-blind safe)")
      ->capture_default_str();
  cmd.add_flag("--no-maps", raw.noMaps, "Write only the reports, no PNG label maps");
  cmd.add_flag("-q,--quiet", raw.quiet, "No progress on stderr");
}

// Converts the typed strings; throws kmseg::InvalidArgument (a usage error).
void finish(Options& o, const RawOptions& raw, bool compare) {
  if (compare) {
    if (raw.modes.empty()) {
      o.modes.assign(kmseg::kAllModes.begin(), kmseg::kAllModes.end());
    } else {
      o.modes = kmseg::cli::parseModeList(raw.modes);
    }
  } else {
    o.modes = {kmseg::parseMode(raw.mode)};
  }
  o.workflow.kmeans.working = kmseg::parseWorking(raw.working);
  o.workflow.init = kmseg::parseInit(raw.init);
  o.workflow.kmeans.detectCycles = !raw.noCycleStop;
  o.features.colorSpace = kmseg::parseColorSpace(raw.colorSpace);
  o.features.normalization = kmseg::parseNormalization(raw.normalization);
  o.backend = kmseg::parseBackend(raw.backend);
  o.palette = kmseg::parsePalette(raw.palette);
  o.saveMaps = !raw.noMaps;
  o.quiet = raw.quiet;
  // Ranges that do not depend on the image (K > pixels is checked once the image is known).
  kmseg::validateWorkflow(o.workflow, std::size_t(-1));
  kmseg::checkSpatialWeight(o.features.spatialWeight, "--spatial-weight");
  if (o.load.maxPixels == 0) throw kmseg::InvalidArgument("--max-pixels must be >= 1");
  if (o.outputDir.empty())
    throw kmseg::InvalidArgument(
        "-o/--output-dir is empty: name a directory (. for the current one)");
}

// The usage error for a command line that names no known command: what its first argument is,
// and the valid commands.
std::string noCommand(int argc, char** argv, CLI::App& app) {
  std::string valid;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    valid += (valid.empty() ? "" : ", ") + sub->get_name();
  // The program itself takes only --help and --version, so the first argument is the one it
  // does not know: an option, or a word that is no command.
  std::string what = "a command is required";
  if (argc >= 2) {
    const std::string first = argv[1];
    what = !first.empty() && first[0] == '-' ? "unknown option '" + first + "' before the command"
                                             : "unknown command '" + first + "'";
  }
  return what + "; valid commands: " + valid + " (see 'kmseg --help')";
}

// An option's names as the help lists them: "-k/--clusters".
std::string optionNames(const CLI::Option& option) {
  std::string names;
  for (const std::string& s : option.get_snames()) names += (names.empty() ? "-" : "/-") + s;
  for (const std::string& l : option.get_lnames()) names += (names.empty() ? "--" : "/--") + l;
  return names.empty() ? option.get_name() : names;
}

// The usage error for what CLI11 reports in its own words, in the command's words, or empty
// (then CLI11's message stands):
// - an option that takes one value, given more than once (CLI11: "At Most 1 required but
//   received 2"): which one, and how often;
// - a required argument reported missing while the command line holds an argument that looks
//   like an option but is none (CLI11: "IMAGE is required" for `segment -photo.png`): that
//   argument, as an unknown option, and how to pass a file whose name starts with '-'.
std::string commandUsageError(const CLI::ParseError& e, CLI::App& command) {
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e))
    for (const CLI::Option* option : command.get_options())
      if (option->get_items_expected_max() == 1 && option->get_type_size_max() > 0 &&
          option->count() > 1)
        return command.get_name() + ": " + optionNames(*option) + " is given " +
               std::to_string(option->count()) + " times: give it once (see 'kmseg " +
               command.get_name() + " --help')";
  if (dynamic_cast<const CLI::RequiredError*>(&e))
    for (const std::string& arg : command.remaining(true))
      if (arg.size() > 1 && arg[0] == '-')
        return command.get_name() + ": unknown option '" + arg +
               "'; a file name that starts with '-' goes after '--' (kmseg " + command.get_name() +
               " [options] -- " + arg + ")";
  return {};
}

// The exit code after the help or the version went to standard output: `code` (0), or 1 with
// a line on stderr when it could not be written (a full disk, a closed stdout).
int printedOrFailed(int code, const char* what) {
  errno = 0;
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return code;
  const int e = errno;
  std::fprintf(stderr, "kmseg: cannot write the %s to standard output%s%s\n", what, e ? ": " : "",
               e ? std::strerror(e) : "");
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "kmseg segments a photo with k-means on the GPU (or CPU) at a floating-point precision you\n"
      "choose, and measures what that precision costs against an fp64 reference.\n\n"
      "Each pixel becomes a feature row (R,G,B,x,y), normalised per column. Precision modes:\n"
      "  fp64 fp32 fp16 bf16                 distances entirely in that precision\n"
      "  fp16>fp32 fp16>fp64 bf16>fp32 bf16>fp64 fp32>fp64\n"
      "                                      cheap low-precision distances, with a fallback to\n"
      "                                      the higher precision where cancellation is "
      "possible\n\n"
      "Examples:\n"
      "  kmseg segment photo.jpg -k 8 --mode 'fp16>fp32'   one mode next to the fp64 reference\n"
      "                                                    (quote '>', or write fp16-fp32)\n"
      "  kmseg compare photo.jpg -k 32                     all nine modes, one table\n"
      "  kmseg bench cpu                                   CPU engine against OpenCV's kmeans",
      "kmseg"};
  app.set_version_flag("--version", std::string("kmseg ") + kmseg::kVersion);
  app.require_subcommand(1);

  Options segOpts, cmpOpts;
  RawOptions segRaw, cmpRaw;
  auto* segment = app.add_subcommand(
      "segment",
      "Segment IMAGE in one precision mode and compare it with the fp64 reference; "
      "writes label map, colour map, disagreement mask and report");
  addCommonOptions(*segment, segOpts, segRaw);
  segment->add_option("-m,--mode", segRaw.mode, "Precision mode (see above)")
      ->capture_default_str();

  auto* compare = app.add_subcommand(
      "compare",
      "Run every precision mode from the same initial centres, print the table "
      "(iterations, stop, time, SSE, Diff %, ARI, AMI, fallback %) and write the report");
  addCommonOptions(*compare, cmpOpts, cmpRaw);
  for (auto* command : {segment, compare})
    command->footer(
        "The table prints a row as each run completes. Ctrl+C stops the runs within one "
        "iteration and writes no file (exit code 130).");
  compare->add_option("--modes", cmpRaw.modes, "Modes to run (default: all nine)")->delimiter(',');
  // Not a compare option: caught only to point at --modes (hidden from the help).
  compare->add_option("-m,--mode", cmpRaw.mode)->group("");

  kmseg::cli::BenchOptions benchOpts;
  auto* bench = app.add_subcommand("bench", "Benchmarks (see 'kmseg bench --help')");
  kmseg::cli::addBenchOptions(*bench, benchOpts);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return printedOrFailed(app.exit(e), "help");
  } catch (const CLI::CallForAllHelp& e) {
    return printedOrFailed(app.exit(e), "help");
  } catch (const CLI::CallForVersion& e) {
    return printedOrFailed(app.exit(e), "version");
  } catch (const CLI::ExtrasError& e) {
    // CLI11 lists the extras last to first; name them in the order they were typed.
    std::string extras;
    for (const std::string& arg : app.remaining(true)) extras += (extras.empty() ? "" : " ") + arg;
    // Extras of the command itself are named with it; those before it, with the program.
    const bool ofCommand = app.remaining(false).empty() && !app.get_subcommands().empty();
    const std::string where = ofCommand ? app.get_subcommands().front()->get_name() : "";
    if (extras.empty())
      std::fprintf(stderr, "kmseg: %s (see 'kmseg --help')\n", e.what());
    else
      std::fprintf(stderr, "kmseg: %s%sunexpected argument%s: %s (see 'kmseg %s%s--help')\n",
                   where.c_str(), ofCommand ? ": " : "",
                   extras.find(' ') == std::string::npos ? "" : "s", extras.c_str(), where.c_str(),
                   ofCommand ? " " : "");
    return 2;
  } catch (const CLI::ParseError& e) {
    if (app.get_subcommands().empty()) {
      std::fprintf(stderr, "kmseg: %s\n", noCommand(argc, argv, app).c_str());
    } else if (const std::string own = commandUsageError(e, *app.get_subcommands().front());
               !own.empty()) {
      std::fprintf(stderr, "kmseg: %s\n", own.c_str());
    } else {
      std::fprintf(stderr, "kmseg: %s (see 'kmseg --help')\n", e.what());
    }
    return 2;
  }
  if (compare->parsed() && compare->count("--mode") > 0) {
    std::fprintf(stderr,
                 "kmseg: compare takes --modes (a comma-separated list, e.g. --modes fp32,fp16), "
                 "not -m/--mode\n");
    return 2;
  }

  const bool isSegment = segment->parsed();
  const bool isCompare = compare->parsed();
  Options& opts = isSegment ? segOpts : cmpOpts;
  try {
    if (isSegment || isCompare)
      finish(opts, isSegment ? segRaw : cmpRaw, isCompare);
    else {
      for (const kmseg::cli::BenchOptionSuites& a : kmseg::cli::kBenchOptionSuites)
        if (bench->count(a.option) > 0) benchOpts.given.push_back(a.option);
      kmseg::cli::checkBenchOptions(benchOpts);
    }
  } catch (const kmseg::Error& e) {
    std::fprintf(stderr, "kmseg: %s\n", e.what());
    return 2;
  }
  try {
    if (isSegment || isCompare)
      kmseg::cli::runCommand(isSegment ? "segment" : "compare", opts);
    else
      kmseg::cli::runBench(benchOpts);
  } catch (const kmseg::cli::StdoutClosed&) {
    std::fprintf(stderr,
                 "kmseg: standard output was closed: the runs stopped and no file was written\n");
    return 128 + SIGPIPE;  // as shells report a process ended by SIGPIPE
  } catch (const kmseg::Cancelled&) {
    std::fflush(stdout);
    std::fprintf(stderr,
                 "kmseg: interrupted: no file was written (the table has the runs that had "
                 "completed)\n");
    return 130;  // 128 + SIGINT, as shells report a process ended by Ctrl+C
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "kmseg: %s\n", e.what());
    return 1;
  }
  // The table is what the command prints: a write of it that failed (a full disk) fails the
  // command.
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  if (!flushed || std::ferror(stdout)) {
    std::fprintf(stderr, "kmseg: cannot write the table to standard output: %s\n",
                 err ? std::strerror(err) : "a write failed");
    return 1;
  }
  return 0;
}
