// SPDX-License-Identifier: MIT
#pragma once

// A minimal fork-join loop for the CPU engine. Threads are started per call and joined before
// it returns: no spinning workers between calls, so a loaded machine (or a GUI next to the run)
// does not pay for idle threads. Starting two threads costs tens of microseconds, far below the
// work of one Lloyd pass.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace kmseg {

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
  for (int w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace kmseg
