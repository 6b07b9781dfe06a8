// SPDX-License-Identifier: MIT
// The kmseg command line, run as a user runs it: exit codes 0/1/2, one clear line on stderr,
// outputs that equal the library's results, and no partial output on failure.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "kmseg/engine.h"
#include "kmseg/experiments.h"
#include "kmseg/export.h"
#include "kmseg/features.h"
#include "kmseg/image_io.h"
#include "kmseg/workflow.h"
#include "test_paths.h"

namespace kmseg {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int code = -1;
  std::string out, err;
};

std::string readAll(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs kmseg with `args` (already shell-quoted where needed), in `cwd` when given.
CliRun kmseg(const std::string& args, const fs::path& cwd = {}) {
  const char* exe = std::getenv("KMSEG_CLI");
  if (!exe) {
    ADD_FAILURE() << "KMSEG_CLI is not set (CTest sets it to the kmseg executable)";
    return {};
  }
  const fs::path dir = test::freshTempDir("cli-capture");
  const std::string cd = cwd.empty() ? "" : "cd '" + cwd.string() + "' && ";
  const std::string cmd = cd + "'" + exe + "' " + args + " >'" + (dir / "out").string() + "' 2>'" +
                          (dir / "err").string() + "'";
  const int status = std::system(cmd.c_str());
  CliRun r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = readAll(dir / "out");
  r.err = readAll(dir / "err");
  return r;
}

std::size_t lines(const std::string& s) {
  std::size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// The significant digits of a number as printed ("0.004123" and "8.123e-06" have four).
std::size_t significantDigits(std::string text) {
  text = text.substr(0, text.find_first_of("eE"));
  std::string digits;
  for (char c : text)
    if (c >= '0' && c <= '9') digits += c;
  const auto first = digits.find_first_not_of('0');
  return first == std::string::npos ? 0 : digits.size() - first;
}

bool emptyDir(const fs::path& d) {
  return !fs::exists(d) || fs::is_empty(d);
}

TEST(Cli, HelpExplainsTheCommands) {
  const CliRun r = kmseg("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* word : {"segment", "compare", "bench", "fp16>fp32", "fallback"})
    EXPECT_NE(r.out.find(word), std::string::npos) << word;
  // The example must survive a copy into a shell, where an unquoted '>' redirects.
  EXPECT_NE(r.out.find("--mode 'fp16>fp32'"), std::string::npos);
  EXPECT_EQ(r.out.find("--mode fp16>"), std::string::npos);
  const CliRun s = kmseg("segment --help");
  EXPECT_EQ(s.code, 0);
  for (const char* opt :
       {"--clusters", "--mode", "--rho", "--working", "--init", "--seed", "--max-iter", "--tol",
        "--color-space", "--normalization", "--spatial-weight", "--backend", "--output-dir",
        "--max-pixels", "--threads"})
    EXPECT_NE(s.out.find(opt), std::string::npos) << opt;
  // What an interrupt does, where the commands that take one are explained.
  for (const CliRun& help : {s, kmseg("compare --help")})
    EXPECT_NE(help.out.find("Ctrl+C stops the runs"), std::string::npos) << help.out;
}

TEST(Cli, SegmentWritesWhatTheLibraryComputes) {
  const fs::path out = test::freshTempDir("cli-segment");
  const CliRun r =
      kmseg("segment samples/coffee.png -k 5 --mode fp16-fp32 --seed 7 --max-iter 40 -q -o '" +
            out.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_NE(r.out.find("fp16>fp32"), std::string::npos);
  for (const char* f :
       {"coffee.fp16-fp32.labels.png", "coffee.fp16-fp32.color.png", "coffee.fp16-fp32.mask.png",
        "coffee.reference.labels.png", "coffee.segment.json", "coffee.segment.csv"})
    EXPECT_TRUE(fs::is_regular_file(out / f)) << f;

  // The same workflow through the library gives the same labels.
  const Image image = loadImage(test::sourcePath("samples/coffee.png"));
  WorkflowParams p;
  p.kmeans.k = 5;
  p.kmeans.maxIterations = 40;
  p.seed = 7;
  const auto w = runWorkflow(*makeCpuEngine(0), makeFeatures(image), {Mode::Fp16Fp32}, p);
  const LabelImage labels = readLabelPng(out / "coffee.fp16-fp32.labels.png");
  EXPECT_EQ(labels.width, 600);
  EXPECT_EQ(labels.height, 400);
  EXPECT_EQ(labels.labels, w.modes[0].result.labels);
  EXPECT_EQ(readLabelPng(out / "coffee.reference.labels.png").labels, w.reference.labels);
  const std::string json = readAll(out / "coffee.segment.json");
  EXPECT_NE(json.find("\"fp16>fp32\""), std::string::npos);
  EXPECT_EQ(lines(readAll(out / "coffee.segment.csv")), 3u);  // header, reference, mode
  // The command's wall time covers its decoding, features and runs.
  const auto t = nlohmann::json::parse(json)["timings"];
  ASSERT_TRUE(t["wall_seconds"].is_number()) << t.dump();
  EXPECT_GE(t["wall_seconds"].get<double>(), t["total_seconds"].get<double>()) << t.dump();
  // The centroids in the photo's units: the library's, through the features' column scales
  // (R, G, B samples, x and y in pixels).
  const auto run = nlohmann::json::parse(json)["runs"][1];
  const Matrix raw =
      kmseg::inRawUnits(w.modes[0].result.centroids, kmseg::makeImageFeatures(image).scales);
  ASSERT_EQ(run["centroids_raw"].size(), 5u);
  for (std::size_t j = 0; j < 5; ++j)
    for (std::size_t q = 0; q < 5; ++q) {
      EXPECT_DOUBLE_EQ(run["centroids_raw"][j][q].get<double>(), raw(j, q)) << j << "," << q;
      EXPECT_GE(raw(j, q), 0.0);
      EXPECT_LE(raw(j, q), q < 3 ? 255.0 : q == 3 ? 599.0 : 399.0);
    }
}

// --repeat-stop ends a run that cycles: uniform fp16 on coffee.png at K = 8 repeats its centres
// every 4 iterations; the table, the JSON and the CSV say so, and the labels are the library's.
TEST(Cli, RepeatStopEndsARunThatCycles) {
  const fs::path out = test::freshTempDir("cli-repeat");
  const CliRun r =
      kmseg("segment samples/coffee.png -k 8 --mode fp16 --repeat-stop --backend cpu -o '" +
            out.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  const Image image = loadImage(test::sourcePath("samples/coffee.png"));
  WorkflowParams p;
  p.kmeans.k = 8;
  p.kmeans.detectRepeats = true;
  const auto w = runWorkflow(*makeCpuEngine(0), makeFeatures(image), {Mode::Fp16}, p);
  const KMeansResult& fp16 = w.modes[0].result;
  ASSERT_EQ(fp16.stop, StopReason::Repeat);
  ASSERT_LT(fp16.iterations, p.kmeans.maxIterations);
  const std::string cycle = std::to_string(fp16.cyclePeriod) + "-cycle";
  char row[64];  // the table's first columns (formatRow)
  std::snprintf(row, sizeof row, "\nfp16       %5d  %-18s", fp16.iterations, cycle.c_str());
  EXPECT_NE(r.out.find(row), std::string::npos) << r.out;
  const auto json = nlohmann::json::parse(readAll(out / "coffee.segment.json"));
  EXPECT_EQ(json["parameters"]["detect_repeats"], true);
  EXPECT_EQ(json["runs"][1]["stop_reason"], cycle);
  EXPECT_EQ(json["runs"][1]["cycle_period"], fp16.cyclePeriod);
  EXPECT_EQ(json["runs"][1]["iterations"], fp16.iterations);
  EXPECT_EQ(json["runs"][0]["cycle_period"], 0);
  EXPECT_NE(readAll(out / "coffee.segment.csv")
                .find("\nfp16," + std::to_string(fp16.iterations) + "," + cycle + ","),
            std::string::npos);
  EXPECT_EQ(readLabelPng(out / "coffee.fp16.labels.png").labels, fp16.labels);
  EXPECT_EQ(r.out.find("note:"), std::string::npos) << r.out;  // no run reached the cap

  // Without the flag the run reaches its cap, and the note under the table names the flag.
  const CliRun capped = kmseg(
      "segment samples/coffee.png -k 8 --mode fp16 --max-iter 50 --backend cpu --no-maps -o '" +
      out.string() + "/capped'");
  ASSERT_EQ(capped.code, 0) << capped.err;
  EXPECT_NE(capped.out.find("iteration cap"), std::string::npos) << capped.out;
  EXPECT_NE(capped.out.find("without converging (--repeat-stop ends a run whose centres repeat)"),
            std::string::npos)
      << capped.out;
}

TEST(Cli, CompareRunsEveryRequestedModeFromTheSameCentres) {
  const fs::path out = test::freshTempDir("cli-compare");
  const CliRun r = kmseg(
      "compare samples/grace_hopper.jpg -k 4 --modes fp64,fp32,fp32-fp64 "
      "--max-iter 30 --no-maps -q -o '" +
      out.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* row : {"reference", "fp64 ", "fp32 ", "fp32>fp64"})
    EXPECT_NE(r.out.find(row), std::string::npos) << row;
  for (const char* col : {"iter", "stop", "time", "SSE", "Diff %", "ARI", "AMI", "fallback"})
    EXPECT_NE(r.out.find(col), std::string::npos) << col;
  // The table is printed a row at a time as the runs complete (the workflow's listener, whose
  // order the core's Workflow test asserts): the photo and engine line and the header first,
  // the rows in run order, any notes, then the files written.
  std::vector<std::string> order;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("note:", 0) != 0) order.push_back(line.substr(0, line.find(' ')));
  const std::vector<std::string> want = {"grace_hopper.jpg:", "mode", "reference", "fp64", "fp32",
                                         "fp32>fp64",         "wrote"};
  EXPECT_EQ(order, want) << r.out;
  EXPECT_TRUE(fs::is_regular_file(out / "grace_hopper.compare.json"));
  EXPECT_FALSE(fs::exists(out / "grace_hopper.fp32.labels.png"));  // --no-maps
  // Each row's time is its run's seconds in the report to four significant digits (a GPU run
  // of a small photo takes milliseconds: three decimals would print 0.004 for 4.1 ms).
  const auto report = nlohmann::json::parse(readAll(out / "grace_hopper.compare.json"));
  ASSERT_EQ(report["runs"].size(), 4u);
  std::istringstream rows(r.out);
  std::size_t run = 0;
  for (std::string line; std::getline(rows, line);) {
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string w; fields >> w;) f.push_back(w);
    if (f.empty() ||
        (f[0] != "reference" && f[0] != "fp64" && f[0] != "fp32" && f[0] != "fp32>fp64"))
      continue;
    ASSERT_GE(f.size(), 9u) << line;
    ASSERT_LT(run, report["runs"].size());
    const double seconds = report["runs"][run++]["seconds"].get<double>();
    const std::string& time = f[f.size() - 6];  // before SSE, Diff %, ARI, AMI, fallback%
    EXPECT_NEAR(std::stod(time), seconds, 5e-4 * seconds) << line;
    EXPECT_GE(significantDigits(time), 4u) << line;
  }
  EXPECT_EQ(run, 4u) << r.out;
}

// Runs on four pixels take microseconds: their times keep four significant digits too
// ("8.123e-06", not "0.000008"), within the column's nine characters.
TEST(Cli, TimesBelowAMillisecondKeepFourSignificantDigits) {
  const fs::path tmp = test::freshTempDir("cli-short-times");
  writeColorPng(tmp / "tiny.png", {0, 1, 1, 0}, 2, 2, makePalette(2));
  const CliRun r = kmseg("compare '" + (tmp / "tiny.png").string() +
                         "' -k 2 --modes fp32,fp64 --backend cpu --no-maps -q -o '" +
                         (tmp / "out").string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto report = nlohmann::json::parse(readAll(tmp / "out" / "tiny.compare.json"));
  ASSERT_EQ(report["runs"].size(), 3u);
  std::istringstream rows(r.out);
  std::size_t run = 0;
  for (std::string line; std::getline(rows, line);) {
    if (line.rfind("reference ", 0) != 0 && line.rfind("fp32 ", 0) != 0 &&
        line.rfind("fp64 ", 0) != 0)
      continue;
    ASSERT_LT(run, 3u) << r.out;
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string w; fields >> w;) f.push_back(w);
    ASSERT_GE(f.size(), 9u) << line;
    const std::string& time = f[f.size() - 6];  // before SSE, Diff %, ARI, AMI, fallback%
    EXPECT_LE(time.size(), 9u) << line;
    const double seconds = report["runs"][run++]["seconds"].get<double>();
    ASSERT_GT(seconds, 0.0);
    EXPECT_NEAR(std::stod(time), seconds, 5e-4 * seconds) << line;
    EXPECT_GE(significantDigits(time), 4u) << line;
  }
  EXPECT_EQ(run, 3u) << r.out;
}

// A table that cannot be written (here to /dev/full) fails the command, with one line that
// says so; the files are written all the same.
TEST(Cli, ATableThatCannotBeWrittenFailsTheCommand) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const char* exe = std::getenv("KMSEG_CLI");
  ASSERT_TRUE(exe);
  const fs::path tmp = test::freshTempDir("cli-stdout-full");
  const auto run = [&](const std::string& args) {
    const std::string cmd =
        "'" + std::string(exe) + "' " + args + " >/dev/full 2>'" + (tmp / "err").string() + "'";
    const int status = std::system(cmd.c_str());
    CliRun r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.err = readAll(tmp / "err");
    return r;
  };
  const CliRun r = run("segment samples/coffee.png -k 2 -m fp32 --max-iter 5 -q -o '" +
                       (tmp / "out").string() + "'");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_EQ(r.err.rfind("kmseg: cannot write the table to standard output: ", 0), 0u) << r.err;
  EXPECT_TRUE(fs::is_regular_file(tmp / "out" / "coffee.segment.json"));
  const CliRun b = run("bench distances --points 10 --dim 4 --modes fp32");
  EXPECT_EQ(b.code, 1) << b.err;
  EXPECT_EQ(b.err.rfind("kmseg: cannot write the table to standard output: ", 0), 0u) << b.err;
  // The help and the version, too.
  for (const char* args : {"--help", "segment --help", "--version"}) {
    const CliRun h = run(args);
    EXPECT_EQ(h.code, 1) << args << ": " << h.err;
    EXPECT_EQ(lines(h.err), 1u) << h.err;
    EXPECT_EQ(h.err.rfind("kmseg: cannot write the ", 0), 0u) << h.err;
  }
}

// The CLI started with `args` (after the executable), its standard output a pipe to read and
// its standard error the file `err`.
struct PipedCli {
  pid_t pid = 0;
  FILE* out = nullptr;  ///< the pipe's read end; fclose() it
};
PipedCli spawnPiped(std::vector<std::string> args, const fs::path& err) {
  const char* exe = std::getenv("KMSEG_CLI");
  EXPECT_TRUE(exe);
  if (!exe) return {};
  args.insert(args.begin(), exe);
  int fds[2];
  if (::pipe(fds) != 0) return {};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  PipedCli cli;
  const int spawned = posix_spawn(&cli.pid, exe, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (spawned != 0) {
    ::close(fds[0]);
    ADD_FAILURE() << "posix_spawn: " << spawned;
    return {};
  }
  cli.out = ::fdopen(fds[0], "r");
  return cli;
}

// Ctrl+C during the runs: they stop within an iteration, the rows printed stay, nothing is
// written, one line says so, exit code 130. The signal is sent once the reference's row is out,
// while the modes after it (uniform fp16 to its cap of 300 iterations) still run.
void interruptStopsTheRunsAndWritesNothing(int signal) {
  const std::string name = "cli-interrupt-" + std::to_string(signal);
  const fs::path out = test::freshTempDir(name) / "out";
  const fs::path err = test::freshTempDir(name + "-err") / "err";
  const PipedCli cli = spawnPiped({"compare", "samples/coffee.png", "-k", "8", "--modes",
                                   "fp16,fp32", "--backend", "cpu", "-o", out.string()},
                                  err);
  const pid_t pid = cli.pid;
  FILE* stream = cli.out;
  ASSERT_TRUE(stream);
  std::vector<std::string> lines;
  char buf[512];
  bool signalled = false;
  while (std::fgets(buf, sizeof buf, stream)) {
    lines.emplace_back(buf);
    if (!signalled && lines.back().rfind("reference ", 0) == 0) {
      ASSERT_EQ(::kill(pid, signal), 0);
      signalled = true;
    }
  }
  std::fclose(stream);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(signalled);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  const std::string e = readAll(err);
  EXPECT_NE(e.find("kmseg: interrupted: no file was written"), std::string::npos) << e;
  // The reference's row was printed; fp16's run stopped before its row (it runs to its cap),
  // and the run after it never started; no "wrote" line.
  for (const std::string& line : lines)
    for (const char* start : {"fp16 ", "fp32 ", "wrote "})
      EXPECT_NE(line.rfind(start, 0), 0u) << line;
  // The output folder was made (checked before the runs) and removed again: it held nothing,
  // not even a temporary file.
  EXPECT_FALSE(fs::exists(out));
  EXPECT_TRUE(fs::is_empty(out.parent_path()));
}

TEST(Cli, AnInterruptStopsTheRunsAndWritesNothing) {
  interruptStopsTheRunsAndWritesNothing(SIGINT);
}

// SIGTERM, and SIGHUP (the terminal closed), stop the runs as Ctrl+C does.
TEST(Cli, TerminateAndHangUpStopTheRunsAsAnInterruptDoes) {
  interruptStopsTheRunsAndWritesNothing(SIGTERM);
  interruptStopsTheRunsAndWritesNothing(SIGHUP);
}

// A reader that goes away (`kmseg compare ... | head -2`): the next row the command prints
// stops the runs, nothing is written, one line says so, and the exit code is that of SIGPIPE
// (141); the output folder it made goes again.
TEST(Cli, AClosedStandardOutputStopsTheRunsAndWritesNothing) {
  const fs::path out = test::freshTempDir("cli-stdout-closed") / "out";
  const fs::path err = test::freshTempDir("cli-stdout-closed-err") / "err";
  const PipedCli cli = spawnPiped({"compare", "samples/coffee.png", "-k", "8", "--modes",
                                   "fp16,fp32,bf16", "--backend", "cpu", "-o", out.string()},
                                  err);
  const pid_t pid = cli.pid;
  FILE* stream = cli.out;
  ASSERT_TRUE(stream);
  // Read up to the reference's row, then go away.
  char buf[512];
  bool sawReference = false;
  while (!sawReference && std::fgets(buf, sizeof buf, stream))
    sawReference = std::string(buf).rfind("reference ", 0) == 0;
  std::fclose(stream);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(sawReference);
  ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 141);
  const std::string e = readAll(err);
  EXPECT_EQ(e, "kmseg: standard output was closed: the runs stopped and no file was written\n");
  EXPECT_FALSE(fs::exists(out));
  EXPECT_TRUE(fs::is_empty(out.parent_path()));
}

// A PNG of `width` x `height` pixels of noise in 256 colours: its maps compress slowly.
void writeNoisePng(const fs::path& path, int width, int height, std::uint32_t seed) {
  std::vector<std::int32_t> noise(std::size_t(width) * height);
  for (auto& v : noise) {
    seed = seed * 1664525u + 1013904223u;
    v = std::int32_t(seed >> 24);
  }
  writeColorPng(path, noise, width, height, makePalette(256));
}

// Starts `args` (the executable first) with its standard output to /dev/null and its standard
// error to `err` (/dev/null when empty); returns its process id, or -1.
pid_t spawnQuietly(std::vector<std::string> args, const fs::path& err) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.empty() ? "/dev/null" : err.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  const int failed = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return failed ? -1 : pid;
}

// Polls `ready` until it holds; false once process `pid` has ended (its status in `status`,
// `ended` set).
bool waitUntil(pid_t pid, const std::function<bool()>& ready, int& status, bool& ended) {
  while (!ready()) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      ended = true;
      return false;
    }
    ::usleep(200);
  }
  return true;
}

// Names of the temporary files of atomic writes (".NAME.tmp-XXXXXX") in `dir`.
std::vector<std::string> temporaryFiles(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (const std::string name = it->path().filename().string();
        name.find(".tmp-") != std::string::npos)
      names.push_back(name);
  return names;
}

// Ctrl+C twice while the files are written: the first says that they are finished first, the
// second ends the process at once (killed by SIGINT), and the temporary file of each write in
// progress goes with it. The second signal is sent while the process is stopped (SIGSTOP) with
// a temporary file in the output directory, so that it meets a write in progress.
TEST(Cli, ASecondInterruptWhileWritingLeavesNoTemporaryFile) {
  const char* exe = std::getenv("KMSEG_CLI");
  ASSERT_TRUE(exe);
  const fs::path tmp = test::freshTempDir("cli-interrupt-writing");
  // Noise, so that the writing takes a while.
  writeNoisePng(tmp / "noise.png", 2000, 1500, 12345);
  const fs::path out = tmp / "out";
  const fs::path err = tmp / "err";
  const pid_t pid =
      spawnQuietly({exe, "compare", (tmp / "noise.png").string(), "-k", "4", "--modes", "fp32,fp64",
                    "--max-iter", "2", "--backend", "cpu", "-q", "-o", out.string()},
                   err);
  ASSERT_GT(pid, 0);

  int status = 0;
  bool ended = false;
  const auto waitFor = [&](const std::function<bool()>& ready) {
    return waitUntil(pid, ready, status, ended);
  };
  ASSERT_TRUE(waitFor([&] { return !temporaryFiles(out).empty(); })) << readAll(err);
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  ASSERT_TRUE(waitFor([&] { return readAll(err).find("finishing") != std::string::npos; }))
      << "no word of the files being finished: " << readAll(err);
  bool sent = false;
  while (!sent && waitFor([&] { return !temporaryFiles(out).empty(); })) {
    ASSERT_EQ(::kill(pid, SIGSTOP), 0);
    int stopped = 0;
    ASSERT_EQ(::waitpid(pid, &stopped, WUNTRACED), pid);
    if (WIFSTOPPED(stopped) && !temporaryFiles(out).empty()) {
      ASSERT_EQ(::kill(pid, SIGINT), 0);
      sent = true;
    }
    if (!WIFSTOPPED(stopped)) {
      status = stopped;
      ended = true;
      break;
    }
    ASSERT_EQ(::kill(pid, SIGCONT), 0);
  }
  ASSERT_TRUE(sent) << "the files were written before a write in progress was met";
  if (!ended) ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit code " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGINT);
  const std::vector<std::string> left = temporaryFiles(out);
  EXPECT_TRUE(left.empty()) << "left behind: " << left.front();
  const std::string e = readAll(err);
  EXPECT_EQ(lines(e), 1u) << e;
  EXPECT_NE(e.find("kmseg: interrupted: finishing the files being written first (Ctrl+C again "
                   "stops at once"),
            std::string::npos)
      << e;
}

// Two signals before any file is written (here both arrive at once: SIGINT and SIGTERM, sent
// while the process is stopped): the first stops the runs, the second ends the process at once,
// and the output directories the command made go with it, empty as they are.
TEST(Cli, ASecondSignalBeforeWritingRemovesTheDirectoriesItMade) {
  const char* exe = std::getenv("KMSEG_CLI");
  ASSERT_TRUE(exe);
  const fs::path tmp = test::freshTempDir("cli-interrupt-directories");
  writeNoisePng(tmp / "noise.png", 1000, 800, 54321);
  const fs::path out = tmp / "made" / "for" / "outputs";
  const pid_t pid =
      spawnQuietly({exe, "compare", (tmp / "noise.png").string(), "-k", "16", "--modes",
                    "fp32,fp64", "--backend", "cpu", "-q", "-o", out.string()},
                   fs::path());
  ASSERT_GT(pid, 0);
  int status = 0;
  bool ended = false;
  ASSERT_TRUE(waitUntil(
      pid, [&] { return fs::exists(out); }, status, ended))
      << "ended before its output directory was seen";
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  int stopped = 0;
  ASSERT_EQ(::waitpid(pid, &stopped, WUNTRACED), pid);
  ASSERT_TRUE(WIFSTOPPED(stopped)) << "ended before it could be stopped";
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  ASSERT_EQ(::kill(pid, SIGCONT), 0);
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit code " << WEXITSTATUS(status);
  EXPECT_TRUE(WTERMSIG(status) == SIGINT || WTERMSIG(status) == SIGTERM) << WTERMSIG(status);
  EXPECT_FALSE(fs::exists(tmp / "made")) << "left behind: " << (tmp / "made").string();
}

// One pixel unlike the 25 599 others: under z-score normalisation its colour columns reach
// sqrt(25 599) = 160 each, a squared norm of 3 x 25 599 = 76 797, beyond fp16's 65504. The
// table says which modes met it and what they did; the report counts it per run.
TEST(Cli, CompareNotesPixelsBeyondAModesRange) {
  const fs::path tmp = test::freshTempDir("cli-overflow");
  std::vector<std::int32_t> labels(160 * 160, 0);
  labels[160 * 80 + 80] = 1;
  writeColorPng(tmp / "dot.png", labels, 160, 160, makePalette(2));
  const CliRun r = kmseg("compare '" + (tmp / "dot.png").string() +
                         "' -k 2 --normalization zscore --modes fp16,fp16-fp32,fp32 --backend cpu "
                         "--no-maps -q -o '" +
                         (tmp / "out").string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("note: fp16: 1 of 25600 pixels has a squared norm beyond fp16's"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("note: fp16>fp32: 1 of 25600"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("note: fp32:"), std::string::npos) << r.out;
  const std::string json = readAll(tmp / "out" / "dot.compare.json");
  EXPECT_NE(json.find("\"norm_overflows\": 1"), std::string::npos);
  EXPECT_NE(json.find("\"norm_overflows\": 0"), std::string::npos);  // the reference and fp32
}

struct BadCase {
  std::string name;
  std::string args;
  int code;
  std::string message;
  std::string limit = {};  ///< a second part of the message, e.g. the limit (when not empty)
};

void PrintTo(const BadCase& c, std::ostream* os) {
  *os << c.name << ": kmseg " << c.args;
}

class CliBadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(CliBadInput, OneClearLineAndNoOutput) {
  const BadCase& c = GetParam();
  const fs::path tmp = test::freshTempDir("cli-bad-" + c.name);
  std::ofstream(tmp / "empty.png").close();
  std::ofstream(tmp / "text.png") << "this is not an image\n";
  const std::string coffee = readAll(test::sourcePath("samples/coffee.png"));
  std::ofstream(tmp / "truncated.png", std::ios::binary) << coffee.substr(0, coffee.size() / 2);
  const std::string jpeg = readAll(test::sourcePath("samples/grace_hopper.jpg"));
  std::ofstream(tmp / "truncated.jpg", std::ios::binary) << jpeg.substr(0, jpeg.size() / 2);
  std::ofstream(tmp / "file.txt") << "x";
  // Two colours only: with --spatial-weight 0 there are two distinct feature rows.
  std::vector<std::int32_t> two(64);
  for (std::size_t i = 0; i < two.size(); ++i) two[i] = std::int32_t(i % 2);
  writeColorPng(tmp / "two.png", two, 8, 8, makePalette(2));

  std::string args = c.args;
  for (std::string::size_type at; (at = args.find("$T")) != std::string::npos;)
    args.replace(at, 2, tmp.string());
  const fs::path out = tmp / "out" / "sub";
  // segment and compare write into a fresh directory, unless the case names its own.
  const bool writes = args.rfind("segment", 0) == 0 || args.rfind("compare", 0) == 0;
  if (writes && args.find(" -o ") == std::string::npos) args += " -q -o '" + out.string() + "'";
  const CliRun r = kmseg(args);
  EXPECT_EQ(r.code, c.code) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_EQ(r.err.rfind("kmseg: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(c.limit), std::string::npos) << r.err;
  EXPECT_TRUE(emptyDir(out)) << "partial output in " << out;
  // Nor the directories made for the outputs.
  EXPECT_FALSE(fs::exists(tmp / "out")) << "left behind: " << tmp / "out";
  // Nothing on stdout either: no table header before the error (the table starts once the
  // initial centres are chosen, so too few distinct rows print none either).
  EXPECT_EQ(r.out, "") << r.out;
}

// A predictable write failure (here a directory where the report goes) is found before the first
// file of the set is written, and before any computation.
TEST(Cli, OutputSetIsCheckedBeforeAnyFileIsWritten) {
  const fs::path tmp = test::freshTempDir("cli-partial");
  std::vector<std::int32_t> labels(100);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = std::int32_t(i % 3);
  writeColorPng(tmp / "small.png", labels, 10, 10, makePalette(3));
  const fs::path out = tmp / "o";
  fs::create_directories(out / "small.segment.json");
  const CliRun r =
      kmseg("segment '" + (tmp / "small.png").string() + "' -k 3 -q -o '" + out.string() + "'");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("small.segment.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("it is an existing directory"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << "ran before failing:\n" << r.out;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(out)) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"small.segment.json"}) << "partial output in " << out;
}

// An output file that is a link to a file where no file can be created next to it (procfs here):
// found by the check of the set, before any computation, not after seven maps are written.
TEST(Cli, OutputLinkIsCheckedBeforeAnyFileIsWritten) {
  const fs::path tmp = test::freshTempDir("cli-partial-link");
  std::vector<std::int32_t> labels(100);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = std::int32_t(i % 3);
  writeColorPng(tmp / "small.png", labels, 10, 10, makePalette(3));
  const fs::path out = tmp / "o";
  fs::create_directories(out);
  fs::create_symlink("/proc/version", out / "small.fp32.mask.png");
  const CliRun r = kmseg("compare '" + (tmp / "small.png").string() +
                         "' -k 3 -q --modes fp16,fp32 -o '" + out.string() + "'");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("small.fp32.mask.png': it is a link to '/proc/version'"), std::string::npos)
      << r.err;
  EXPECT_TRUE(r.out.empty()) << "ran before failing:\n" << r.out;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(out)) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"small.fp32.mask.png"}) << "partial output in " << out;
}

// An output name longer than the file system takes (the photo's 236-byte stem and
// ".reference.labels.png") is found before the image is read, not after every run.
TEST(Cli, OutputNameTooLongIsFoundBeforeAnyRun) {
  const fs::path tmp = test::freshTempDir("cli-long-name");
  const std::string stem(236, 's');
  fs::copy_file(test::sourcePath("samples/coffee.png"), tmp / (stem + ".png"));
  const fs::path out = tmp / "out";
  const CliRun r = kmseg("compare '" + (tmp / (stem + ".png")).string() +
                         "' -k 2 --modes fp32 -q -o '" + out.string() + "'");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find(stem + ".reference.labels.png': its file name is 257 bytes long"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("NAME_MAX"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << "ran before failing:\n" << r.out;
  EXPECT_FALSE(fs::exists(out));
}

// Integer options are decimal as typed: CLI11 alone would read 010 as octal 8 and 0x10 as 16.
TEST(Cli, IntegerOptionsAreReadAsDecimal) {
  const fs::path out = test::freshTempDir("cli-decimal");
  const CliRun r = kmseg(
      "segment samples/coffee.png -k 010 --max-iter 007 --seed 010 --threads "
      "+01 -m fp32 --no-maps -q -o '" +
      out.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto p = nlohmann::json::parse(readAll(out / "coffee.segment.json"))["parameters"];
  EXPECT_EQ(p["k"], 10) << p.dump();
  EXPECT_EQ(p["max_iterations"], 7) << p.dump();
  EXPECT_EQ(p["seed"], 10) << p.dump();
  EXPECT_EQ(p["threads"], 1) << p.dump();
}

// An unwritable --json path fails before the benchmark runs, not after it.
TEST(Cli, BenchChecksItsJsonPathFirst) {
  const fs::path tmp = test::freshTempDir("cli-bench-json");
  std::ofstream(tmp / "file.txt") << "x";
  const CliRun r = kmseg("bench cpu --megapixels 0.01 -k 2 --repeats 1 --json '" +
                         (tmp / "file.txt" / "x.json").string() + "'");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("file.txt"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << "ran before failing:\n" << r.out;
  // The paper's suites check it too, before their first table line.
  const CliRun d = kmseg("bench distances --points 10 --dim 4 --json '" +
                         (tmp / "file.txt" / "x.json").string() + "'");
  EXPECT_EQ(d.code, 1) << d.err;
  EXPECT_TRUE(d.out.empty()) << "ran before failing:\n" << d.out;
}

// The paper's experiments from the command line: the distance table (uniform fp16 loses the
// near pairs, fp16>fp32 keeps them) and the blob comparison, each with its JSON.
TEST(Cli, BenchDistancesReproducesTheNearPointsFinding) {
  const fs::path tmp = test::freshTempDir("cli-bench-distances");
  const CliRun r =
      kmseg("bench distances --points 30 --dim 32 --modes fp16,fp16-fp32,bf16-fp64 --json '" +
            (tmp / "d.json").string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* word : {"random", "near", "mixed", "fp16 ", "fp16>fp32", "bf16>fp64"})
    EXPECT_NE(r.out.find(word), std::string::npos) << word << "\n" << r.out;
  const auto json = nlohmann::json::parse(readAll(tmp / "d.json"));
  ASSERT_EQ(json["results"].size(), 3u);
  EXPECT_EQ(json["results"][0]["mode"], "fp16");
  EXPECT_EQ(json["results"][0]["near"]["pairs"], 900);
  EXPECT_GE(json["results"][0]["near"]["max_rel_error_near"].get<double>(), 0.5);
  EXPECT_LT(json["results"][1]["near"]["max_rel_error_near"].get<double>(), 1e-5);
  EXPECT_GT(json["results"][1]["near"]["fallbacks"].get<int>(), 0);
  EXPECT_EQ(json["results"][2]["random"]["fallback_ratio"].get<double>(), 1.0);  // as the paper
  // Each set's evaluation is timed, on the engine the table names.
  EXPECT_NE(r.out.find("evaluated on "), std::string::npos) << r.out;
  EXPECT_FALSE(json["backend"].get<std::string>().empty());
  for (const auto& result : json["results"])
    for (const char* set : {"random", "near", "mixed"})
      EXPECT_GT(result[set]["seconds"].get<double>(), 0.0) << result["mode"] << " " << set;
  // --backend cpu always evaluates on the CPU, and says that its time is the emulation's.
  const CliRun cpu = kmseg("bench distances --points 8 --dim 3 --modes fp32 --backend cpu");
  ASSERT_EQ(cpu.code, 0) << cpu.err;
  EXPECT_NE(cpu.out.find("evaluated on CPU"), std::string::npos) << cpu.out;
  EXPECT_NE(cpu.out.find("emulated arithmetic"), std::string::npos) << cpu.out;
}

TEST(Cli, BenchBlobsComparesEveryModeWithTheReference) {
  const fs::path tmp = test::freshTempDir("cli-bench-blobs");
  const CliRun r =
      kmseg("bench blobs --points 3000 --dim 4 -k 6 --modes fp32,fp16-fp32 --backend cpu --json '" +
            (tmp / "b.json").string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("speedup"), std::string::npos) << r.out;
  const auto json = nlohmann::json::parse(readAll(tmp / "b.json"));
  ASSERT_EQ(json["runs"].size(), 3u);  // the reference and two modes
  EXPECT_EQ(json["runs"][0]["mode"], "reference");
  EXPECT_EQ(json["runs"][0]["speedup_vs_fp64"], 1.0);
  EXPECT_EQ(json["runs"][0]["device_seconds"], -1.0);  // --backend cpu: no device time
  EXPECT_EQ(json["runs"][2]["mode"], "fp16>fp32");
  EXPECT_GT(json["runs"][2]["fallback_ratio"].get<double>(), 0.0);
  // The same blobs through the library: the reference's SSE and iterations.
  WorkflowParams p;
  p.kmeans.k = 6;
  const auto w = runWorkflow(*makeCpuEngine(0), makeBlobs(3000, 4, 6, 1.0, 1), {Mode::Fp32}, p);
  EXPECT_EQ(json["runs"][0]["iterations"], w.reference.iterations);
  EXPECT_EQ(json["runs"][0]["empty_cluster_events"], w.reference.emptyClusterEvents);
  EXPECT_EQ(json["runs"][1]["empty_cluster_events"], w.modes[0].result.emptyClusterEvents);
  EXPECT_DOUBLE_EQ(json["runs"][0]["sse"].get<double>(), w.reference.sse);
  EXPECT_DOUBLE_EQ(json["runs"][1]["ari"].get<double>(), w.modes[0].comparison.ari);
  // Blobs whose runs re-seed empty clusters: the events reach the report.
  const CliRun e = kmseg(
      "bench blobs --points 5000 --dim 64 -k 200 --modes fp64 --backend cpu "
      "--json '" +
      (tmp / "e.json").string() + "'");
  ASSERT_EQ(e.code, 0) << e.err;
  const auto ej = nlohmann::json::parse(readAll(tmp / "e.json"));
  WorkflowParams pe;
  pe.kmeans.k = 200;
  const auto we =
      runWorkflow(*makeCpuEngine(0), makeBlobs(5000, 64, 200, 1.0, 1), {Mode::Fp64}, pe);
  EXPECT_GT(we.reference.emptyClusterEvents, 0);
  EXPECT_EQ(ej["runs"][0]["empty_cluster_events"], we.reference.emptyClusterEvents);
}

// A photo whose name is not UTF-8: the bench's JSON names it with U+FFFD for the bad byte, as
// the reports of segment and compare do, instead of failing once the benchmark has run.
TEST(Cli, BenchJsonTakesAPhotoNameThatIsNotUtf8) {
  const fs::path tmp = test::freshTempDir("cli-bench-utf8");
  const fs::path photo = tmp / "bad\xffname.png";
  fs::copy_file(test::sourcePath("samples/coffee.png"), photo);
  const CliRun r =
      kmseg("bench cpu --image '" + photo.string() +
            "' --megapixels 0.01 -k 2 --repeats 1 --json '" + (tmp / "b.json").string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  const auto json = nlohmann::json::parse(readAll(tmp / "b.json"));
  EXPECT_EQ(json["image"], "bad\xef\xbf\xbdname.png") << json.dump();
  EXPECT_EQ(json["runs"].size(), 3u) << json.dump();  // fp64, fp32 and cv::kmeans at K = 2
}

// --full-scan turns the engines' pruning off: the same runs (iterations), every pair evaluated;
// the JSON and the first line say so.
TEST(Cli, BenchFullScanGivesTheSameRuns) {
  const fs::path tmp = test::freshTempDir("cli-bench-full-scan");
  const std::string common = "bench cpu --megapixels 0.02 -k 3 --repeats 1 --json '";
  const CliRun pruned = kmseg(common + (tmp / "p.json").string() + "'");
  const CliRun full = kmseg(common + (tmp / "f.json").string() + "' --full-scan");
  ASSERT_EQ(pruned.code, 0) << pruned.err;
  ASSERT_EQ(full.code, 0) << full.err;
  EXPECT_EQ(pruned.out.find("no pruning"), std::string::npos) << pruned.out;
  EXPECT_NE(full.out.find("no pruning (--full-scan)"), std::string::npos) << full.out;
  const auto p = nlohmann::json::parse(readAll(tmp / "p.json"));
  const auto f = nlohmann::json::parse(readAll(tmp / "f.json"));
  EXPECT_EQ(p["full_scan"], false);
  EXPECT_EQ(f["full_scan"], true);
  ASSERT_EQ(p["runs"].size(), 3u) << p.dump();
  ASSERT_EQ(f["runs"].size(), 3u) << f.dump();
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(f["runs"][i]["engine"], p["runs"][i]["engine"]);
    EXPECT_EQ(f["runs"][i]["iterations"], p["runs"][i]["iterations"]) << f["runs"][i]["engine"];
    EXPECT_GT(f["runs"][i]["iterations"].get<int>(), 1) << f["runs"][i]["engine"];
  }
}

// The bench's default photo is a repository path: outside the repository's root the error says
// so and names --image, instead of only "does not exist".
TEST(Cli, BenchOutsideTheRepositoryNamesItsDefaultPhoto) {
  const fs::path tmp = test::freshTempDir("cli-bench-default");
  const CliRun r = kmseg("bench cpu --megapixels 0.01 -k 2 --repeats 1", tmp);
  EXPECT_EQ(r.code, 1) << r.err;  // as for a missing IMAGE of segment
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("samples/european-honey-bee.jpg"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--image PATH"), std::string::npos) << r.err;
  // The paper's suites need no photo and run anywhere.
  const CliRun d = kmseg("bench distances --points 10 --dim 4 --modes fp32", tmp);
  EXPECT_EQ(d.code, 0) << d.err;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CliBadInput,
    ::testing::Values(
        BadCase{"missing", "segment $T/nope.jpg", 1, "nope.jpg"},
        BadCase{"directory", "segment $T", 1, "directory"},
        BadCase{"empty", "segment $T/empty.png", 1, "empty"},
        BadCase{"text", "segment $T/text.png", 1, "text.png"},
        BadCase{"truncpng", "segment $T/truncated.png", 1, "truncated"},
        BadCase{"truncjpg", "segment $T/truncated.jpg", 1, "truncated"},
        BadCase{"pixels", "segment samples/coffee.png --max-pixels 1000", 1, "1000"},
        BadCase{"kzero", "segment samples/coffee.png -k 0", 2, "K = 0"},
        BadCase{"kpixels", "segment $T/two.png -k 65", 1,
                "K = 65 exceeds the number of pixels of the image", "(8 x 8 = 64)"},
        BadCase{"kdistinct", "segment $T/two.png -k 3 --spatial-weight 0", 1,
                "distinct feature rows (2)"},
        BadCase{"mode", "segment samples/coffee.png --mode fp8", 2, "unknown precision mode"},
        BadCase{"khex", "segment samples/coffee.png -k 0x10", 2, "--clusters",
                "'0x10' is not a whole number: K is from 1 to 8192"},
        BadCase{"kbig", "segment samples/coffee.png -k 99999999999", 2,
                "--clusters: '99999999999' is out of range: K is from 1 to 8192"},
        BadCase{"knegbig", "segment samples/coffee.png -k -99999999999", 2,
                "'-99999999999' is out of range: K is from 1 to 8192"},
        BadCase{"maxiterbig", "segment samples/coffee.png --max-iter 3000000000", 2,
                "--max-iter: '3000000000' is out of range",
                "the iteration cap is from 1 to 1000000"},
        BadCase{"maxiterlimit", "segment samples/coffee.png --max-iter 1000001", 2,
                "max iterations = 1000001 is invalid: it must be from 1 to 1000000"},
        BadCase{"seedsigns", "segment samples/coffee.png --seed +-1", 2, "--seed",
                "'+-1' is not a whole number in [0, 18446744073709551615]"},
        BadCase{"benchkbig", "bench blobs --points 50 --dim 2 -k 5000000000", 2,
                "'5000000000' is out of range: K is from 1 to 1024"},
        BadCase{"benchthreadsbig", "bench distances --threads 99999999999", 2, "--threads",
                "'99999999999' is out of range [-2147483648, 2147483647]"},
        BadCase{"maxiterfraction", "segment samples/coffee.png --max-iter 2.5", 2, "--max-iter",
                "'2.5' is not a whole number"},
        BadCase{"duplicatemodes", "compare samples/coffee.png --modes 'fp32,fp16-fp32,fp16>fp32'",
                2, "--modes names fp16>fp32 twice", "('fp16-fp32' and 'fp16>fp32')"},
        BadCase{"benchduplicatemodes", "bench distances --points 4 --dim 2 --modes fp32,fp32", 2,
                "--modes names fp32 twice"},
        BadCase{"benchseedneg", "bench distances --points 4 --dim 2 --seed -1", 2, "--seed",
                "[0, 18446744073709551615]"},
        BadCase{"benchpointsneg", "bench distances --points -4", 2, "--points",
                "'-4' is out of range [0, 18446744073709551615]"},
        BadCase{"blobsk", "bench blobs --points 50 -k 2,100 --dim 2 --modes fp32", 2,
                "K = 100 exceeds the 50 samples of the blobs"},
        BadCase{"rho", "segment samples/coffee.png --rho 2", 2, "rho = 2 is invalid",
                "rho must be > 2"},
        BadCase{"maxiter", "segment samples/coffee.png --max-iter 0", 2, "max iterations"},
        BadCase{"tol", "segment samples/coffee.png --tol -1", 2, "tolerance = -1 is invalid"},
        BadCase{"backend", "segment samples/coffee.png --backend gpu", 2, "unknown backend"},
        BadCase{"option", "segment samples/coffee.png --frobnicate", 2, "frobnicate"},
        BadCase{"unwritable", "segment samples/coffee.png -q -o $T/file.txt/sub", 1, "file.txt"},
        BadCase{"outisfile", "segment samples/coffee.png -q -o $T/file.txt", 1, "file.txt"},
        BadCase{"outempty", "segment samples/coffee.png -q -o ''", 2, "-o/--output-dir is empty"},
        BadCase{"kmax", "segment samples/coffee.png -k 9000 --max-iter 1 -m fp32", 2, "K = 9000",
                "maximum of 8192"},
        BadCase{"weighthuge", "segment samples/coffee.png --spatial-weight 1e100", 2,
                "--spatial-weight", "[0, 32]"},
        BadCase{"weight33", "segment samples/coffee.png --spatial-weight 33", 2, "--spatial-weight",
                "[0, 32]"},
        BadCase{"seedneg", "segment samples/coffee.png --seed -1", 2, "--seed",
                "[0, 18446744073709551615]"},
        BadCase{"seedbig", "segment samples/coffee.png --seed 99999999999999999999999", 2, "--seed",
                "'99999999999999999999999' is out of range [0, 18446744073709551615]"},
        BadCase{"pixelsneg", "segment samples/coffee.png --max-pixels -1", 2, "--max-pixels",
                "[1, 18446744073709551615]"},
        BadCase{"rhoinf", "segment samples/coffee.png --rho inf", 2, "rho = inf",
                "rho must be > 2 and finite"},
        BadCase{"rhohuge", "segment samples/coffee.png --rho 1e400", 2, "--rho",
                "'1e400' is too large for a double"},
        BadCase{"toltiny", "segment samples/coffee.png --tol 1e-400", 2, "--tol",
                "'1e-400' is too small for a double (at least about 4.9e-324 in size; write 0 "
                "for zero)"},
        BadCase{"weighthugeneg", "segment samples/coffee.png --spatial-weight -1e999", 2,
                "--spatial-weight", "'-1e999' is too large for a double"},
        // A float option's value is a decimal number as typed: CLI11 alone reads '' as 0 and
        // takes hexadecimal.
        BadCase{"tolempty", "segment samples/coffee.png --tol ''", 2, "--tol",
                "'' is not a decimal number"},
        BadCase{"weightempty", "segment samples/coffee.png --spatial-weight ''", 2,
                "--spatial-weight", "'' is not a decimal number"},
        BadCase{"rhohex", "segment samples/coffee.png --rho 0x10", 2, "--rho",
                "'0x10' is not a decimal number"},
        BadCase{"rhospace", "segment samples/coffee.png --rho '5 '", 2, "--rho",
                "'5 ' is not a decimal number"},
        BadCase{"noiseempty", "bench distances --points 4 --dim 2 --noise ''", 2, "--noise",
                "'' is not a decimal number"},
        BadCase{"noisehuge", "bench distances --points 4 --dim 2 --noise 1e308", 2,
                "--noise 1e+308 is outside [0, 1e300]", "overflow C"},
        BadCase{"benchjsonempty", "bench distances --points 4 --dim 2 --json ''", 2, "--json",
                "the file name is empty"},
        BadCase{"threads", "segment samples/coffee.png --threads 100000", 2, "--threads",
                "'100000' is out of range [0, 1024]"},
        BadCase{"command", "frobnicate", 2, "unknown command 'frobnicate'",
                "segment, compare, bench"},
        BadCase{"leadingoption", "--frobnicate", 2, "unknown option '--frobnicate'",
                "segment, compare, bench"},
        BadCase{"extras", "segment samples/coffee.png a b c", 2,
                "segment: unexpected arguments: a b c", "kmseg segment --help"},
        BadCase{"suite", "bench frobnicate", 2, "unknown benchmark suite 'frobnicate'",
                "cpu, gpu, distances, blobs"},
        BadCase{"benchrho", "bench distances --rho 2", 2, "--rho must be > 2"},
        // An option that the suite does not read is refused, not ignored.
        BadCase{"benchbackendcpu", "bench cpu --backend cuda", 2,
                "--backend does not apply to the cpu suite", "(it applies to: distances, blobs)"},
        BadCase{"benchrepeatcpu", "bench cpu --repeat-stop", 2,
                "--repeat-stop does not apply to the cpu suite", "(it applies to: gpu)"},
        BadCase{"benchfullscanblobs", "bench blobs --points 50 --dim 2 --full-scan", 2,
                "--full-scan does not apply to the blobs suite", "(it applies to: cpu, gpu)"},
        BadCase{"benchnoiseblobs", "bench blobs --points 50 --dim 2 --noise 5", 2,
                "--noise does not apply to the blobs suite", "(it applies to: distances)"},
        BadCase{"benchkdistances", "bench distances --points 4 --dim 2 -k 5", 2,
                "--clusters does not apply to the distances suite"},
        BadCase{"nearfraction", "bench distances --near-fraction 1.5", 2, "--near-fraction",
                "[0, 1]"},
        BadCase{"benchdim", "bench blobs --dim 129", 2, "--dim 129", "[1, 128]"},
        BadCase{"benchbackend", "bench blobs --backend gpu", 2, "unknown backend"},
        BadCase{"blobvalues", "bench blobs --points 100000000 --dim 128", 2,
                "--points 100000000 x --dim 128", "268435456 feature values"},
        BadCase{"distancepoints", "bench distances --points 70000", 2, "--points 70000",
                "[1, 65536]"},
        BadCase{"dimzero", "bench distances --dim 0", 2, "--dim", "must be at least 1"},
        BadCase{"comparemode", "compare samples/coffee.png -m fp32", 2, "compare takes --modes"},
        // CLI11's own wording ("IMAGE is required", "At Most 1 required but received 2") is
        // replaced by what went wrong.
        BadCase{"dashimage", "segment -dash.png", 2, "segment: unknown option '-dash.png'",
                "a file name that starts with '-' goes after '--' (kmseg segment [options] -- "
                "-dash.png)"},
        BadCase{"repeatedtol", "segment samples/coffee.png --tol 1 --tol 2", 2,
                "segment: --tol is given 2 times: give it once", "kmseg segment --help"},
        BadCase{"repeatedk", "compare samples/coffee.png -k 3 -k 4 -k 5", 2,
                "compare: -k/--clusters is given 3 times: give it once"},
        BadCase{"benchrepeated", "bench blobs --dim 2 --dim 3", 2,
                "bench: --dim is given 2 times: give it once"}),
    [](const auto& info) { return info.param.name; });

// Which runs Auto's GPU engine did not do is said once each, as it comes: the run the GPU gave
// up part-way as it starts again (not again with its row), then each different note with its
// row. The command's runs cannot fail on a GPU here (there is none), so the rule is tested on
// its own; the engine's and the workflow's parts are tested in the core.
TEST(CliBackendNotes, EachNoteOnceAsItComes) {
  kmseg::cli::BackendNotes notes;
  EXPECT_EQ(notes.restarted("reference", "the GPU run failed (X); it runs again on the CPU"),
            "kmseg: reference: the GPU run failed (X); it runs again on the CPU");
  EXPECT_EQ(notes.row("reference", "the GPU run failed (X); it ran on the CPU instead"), "");
  EXPECT_EQ(notes.row("fp32", "on the CPU: an earlier GPU run failed (X)"),
            "kmseg: fp32: on the CPU: an earlier GPU run failed (X)");
  EXPECT_EQ(notes.row("fp16", "on the CPU: an earlier GPU run failed (X)"), "");
  EXPECT_EQ(notes.row("bf16", ""), "");
  EXPECT_EQ(notes.row("fp64", "on the CPU: K = 2000 is beyond the GPU engine's 1024"),
            "kmseg: fp64: on the CPU: K = 2000 is beyond the GPU engine's 1024");

  // Without a restart, the first row's note is said with its row.
  kmseg::cli::BackendNotes fresh;
  EXPECT_EQ(fresh.row("reference", "the GPU run failed (Y); it ran on the CPU instead"),
            "kmseg: reference: the GPU run failed (Y); it ran on the CPU instead");
}

}  // namespace
}  // namespace kmseg
