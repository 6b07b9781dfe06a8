// SPDX-License-Identifier: MIT
// The host-side passes over whole feature matrices (checks, extremes, conversions): on inputs of
// many ranges, so that the work is spread over threads, against the plain serial loop.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "kmseg/error.h"
#include "kmseg/matrix.h"
#include "kmseg/parallel.h"

namespace kmseg {
namespace {

// About 2.4 million values: nine or ten of the helpers' ranges.
Matrix bigMatrix(unsigned seed) {
  Matrix m(480'001, 5);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 3.0);
  for (double& v : m.values) v = normal(rng);
  return m;
}

std::string messageOf(const Matrix& m) {
  try {
    checkFinite(m, "the test matrix");
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

TEST(MatrixPasses, ParallelRangesCoverEveryIndexOnce) {
  for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(999), std::size_t(1'000'001)}) {
    std::vector<std::atomic<int>> hits(n);
    parallelRanges(n, 4096, [&](std::size_t begin, std::size_t end) {
      ASSERT_LE(begin, end);
      ASSERT_LE(end, n);
      for (std::size_t i = begin; i < end; ++i) ++hits[i];
    });
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << "index " << i << " of " << n;
  }
}

// Where the system refuses new threads, parallelFor runs every task on the threads it has. A
// child process takes a limit of one process for its user and gives up root (as root the limit
// does not hold), so that starting a thread really fails there; the child's exit code reports.
TEST(MatrixPasses, ParallelForRunsEveryTaskWhenNoThreadCanStart) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer's runtime does not take a refused thread quietly";
#else
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const rlimit one{1, 1};
    if (::setrlimit(RLIMIT_NPROC, &one) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0)
      ::_exit(77);
    try {
      std::thread probe([] {});
      probe.join();
      ::_exit(78);  // a thread started: the limit does not hold here
    } catch (const std::system_error&) {
    }
    std::vector<int> hits(1000, 0);
    try {
      parallelFor(1000, 8, [&](std::int64_t t) { ++hits[std::size_t(t)]; });
    } catch (...) {
      ::_exit(2);
    }
    for (int h : hits)
      if (h != 1) ::_exit(3);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child ended by signal " << WTERMSIG(status);
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot give up root to nobody here";
  if (WEXITSTATUS(status) == 78) GTEST_SKIP() << "the process limit does not stop threads here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: parallelFor threw; 3: a task ran other than once";
#endif
}

TEST(MatrixPasses, ResizeFreshValueInitialisesAndKeepsWhatWasThere) {
  // Large enough (12 MB) to take its pages on every core first.
  std::vector<std::int32_t> v = {7, -3, 11};
  resizeFresh(v, 3'000'001);
  ASSERT_EQ(v.size(), 3'000'001u);
  EXPECT_EQ(v[0], 7);
  EXPECT_EQ(v[1], -3);
  EXPECT_EQ(v[2], 11);
  std::size_t nonZero = 0;
  for (std::size_t i = 3; i < v.size(); ++i) nonZero += v[i] != 0;
  EXPECT_EQ(nonZero, 0u);
  resizeFresh(v, 5);  // shrinking keeps the first values
  EXPECT_EQ(v, (std::vector<std::int32_t>{7, -3, 11, 0, 0}));
  const Matrix m(2'000'000, 5);  // 80 MB of zeros
  ASSERT_EQ(m.values.size(), 10'000'000u);
  EXPECT_EQ(m.rows, 2'000'000u);
  EXPECT_EQ(m.cols, 5u);
  std::size_t nonZeroValues = 0;
  for (double x : m.values) nonZeroValues += x != 0.0;
  EXPECT_EQ(nonZeroValues, 0u);
}

TEST(MatrixPasses, CheckFiniteNamesTheFirstNonFiniteValue) {
  Matrix m = bigMatrix(1);
  EXPECT_NO_THROW(checkFinite(m, "the test matrix"));
  EXPECT_NO_THROW(checkFinite(Matrix(), "an empty matrix"));
  // Far into the matrix (in the seventh range), then an earlier one in another range.
  m(400'123, 3) = std::numeric_limits<double>::infinity();
  EXPECT_EQ(messageOf(m),
            "the test matrix holds a non-finite value (inf) at row 400123, column 3; NaN and "
            "infinity are not allowed");
  m(60'000, 4) = NAN;
  EXPECT_NE(messageOf(m).find("at row 60000, column 4"), std::string::npos) << messageOf(m);
  // The largest finite values are finite.
  Matrix edge(2, 2);
  edge.values = {std::numeric_limits<double>::max(), -std::numeric_limits<double>::max(),
                 std::numeric_limits<double>::denorm_min(), -0.0};
  EXPECT_NO_THROW(checkFinite(edge, "the edge values"));
  edge(1, 1) = -std::numeric_limits<double>::infinity();
  EXPECT_NE(messageOf(edge).find("(-inf) at row 1, column 1"), std::string::npos);
}

TEST(MatrixPasses, MaxAbsValueIsTheSerialMaximum) {
  Matrix m = bigMatrix(2);
  double serial = 0.0;
  for (double v : m.values) serial = std::max(serial, std::fabs(v));
  EXPECT_EQ(maxAbsValue(m.values.data(), m.values.size()), serial);
  EXPECT_EQ(checkedMaxAbs(m, "the test matrix"), serial);
  EXPECT_EQ(checkedMaxAbs(Matrix(), "an empty matrix"), 0.0);
  m.values[2'000'003] = -1e9;
  EXPECT_EQ(maxAbsValue(m.values.data(), m.values.size()), 1e9);
  EXPECT_EQ(maxAbsValue(m.values.data(), 0), 0.0);
  EXPECT_EQ(maxAbsValue(m.values.data(), 3),
            std::max({std::fabs(m.values[0]), std::fabs(m.values[1]), std::fabs(m.values[2])}));
  m.values[1'500'000] = NAN;
  EXPECT_TRUE(std::isnan(maxAbsValue(m.values.data(), m.values.size())));
}

TEST(MatrixPasses, ConvertValuesRoundsEachValueAsACast) {
  const Matrix m = bigMatrix(3);
  const std::size_t n = m.values.size();
  std::vector<float> f(n, -1.f);
  convertValues(m.values.data(), n, f.data());
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(f[i], float(m.values[i])) << "value " << i;
  std::vector<double> d(n + 1, -1.0);
  convertValues(m.values.data(), n, d.data());
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(d[i], m.values[i]) << "value " << i;
  EXPECT_EQ(d[n], -1.0) << "nothing past n is written";
}

}  // namespace
}  // namespace kmseg
