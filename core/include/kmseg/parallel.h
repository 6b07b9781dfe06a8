// SPDX-License-Identifier: MIT
#pragma once

// A minimal fork-join loop for the CPU engine and the host-side steps around the engines
// (checks, conversions, label maps). Threads are started per call and joined before
// it returns: no spinning workers between calls, so a loaded machine (or a GUI next to the run)
// does not pay for idle threads. Starting two threads costs tens of microseconds, far below the
// work of one Lloyd pass.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

namespace kmseg {

/// The machine's hardware threads (at least 1): the thread count of the host-side steps.
inline int hardwareThreads() {
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

/// Calls fn(task) for every task in [0, tasks) on up to `threads` threads (the caller's thread
/// included). Tasks are handed out in increasing order; which thread runs a task is unspecified,
/// so fn must write only to the task's own outputs. The first exception is rethrown.
template <class Fn>
void parallelFor(std::int64_t tasks, int threads, Fn&& fn) {
  const int workers = int(std::min<std::int64_t>(std::max(threads, 1), tasks));
  if (workers <= 1) {
    for (std::int64_t t = 0; t < tasks; ++t) fn(t);
    return;
  }
  std::atomic<std::int64_t> next{0};
  std::exception_ptr error;
  std::mutex errorMutex;
  auto work = [&] {
    try {
      for (std::int64_t t = next++; t < tasks; t = next++) fn(t);
    } catch (...) {
      std::lock_guard lock(errorMutex);
      if (!error) error = std::current_exception();
      next = tasks;
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(std::size_t(workers - 1));
  // A thread that cannot be started (the system's thread limit) leaves its share to the others:
  // the tasks are handed out, not assigned, so fewer threads run them all just the same.
  for (int w = 1; w < workers; ++w) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;
    }
  }
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

/// Calls fn(begin, end) for the ranges [c chunk, min(n, (c + 1) chunk)) that cover [0, n), on
/// the machine's threads (one range: on the caller's thread). The first exception is rethrown.
template <class Fn>
void parallelRanges(std::size_t n, std::size_t chunk, Fn&& fn) {
  const std::int64_t ranges = std::int64_t((n + chunk - 1) / chunk);
  parallelFor(ranges, hardwareThreads(), [&](std::int64_t r) {
    const std::size_t begin = std::size_t(r) * chunk;
    fn(begin, std::min(n, begin + chunk));
  });
}

/// Resizes `v` to n value-initialised elements of a trivial type. When that takes a new
/// allocation of many megabytes, its pages are first taken on every core (one write per 4 KiB
/// page of the reserved storage): the zeroing of a fresh allocation otherwise spends most of its
/// time in page faults taken one at a time (a 480 MB matrix on the H200's 16-core host: 0.30 s
/// serially, 0.09-0.13 s so; 48 MB: 65 ms against 21-28 ms; 2026-12-02).
template <class T>
void resizeFresh(std::vector<T>& v, std::size_t n) {
  static_assert(std::is_trivial_v<T>);
  constexpr std::size_t kPage = 4096, kMinBytes = std::size_t(8) << 20;
  if (n > v.capacity() && n * sizeof(T) >= kMinBytes) {
    std::vector<T> fresh;
    fresh.reserve(n);
    // The pages first, then the elements v already has.
    auto* bytes = reinterpret_cast<volatile unsigned char*>(fresh.data());
    const std::size_t total = n * sizeof(T);
    parallelRanges(total, std::size_t(4) << 20, [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; i += kPage) bytes[i] = 0;
    });
    fresh.assign(v.begin(), v.end());
    v.swap(fresh);
  }
  v.resize(n);
}

}  // namespace kmseg
