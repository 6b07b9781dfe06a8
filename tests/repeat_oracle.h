// SPDX-License-Identifier: MIT
#pragma once

#include <cstring>
#include <vector>

#include "kmseg/engine.h"
#include "kmseg/kmeans.h"

namespace kmseg::test {

/// Where the repeat rule (lloyd_rules.h) must stop a run, worked out without it: runs of
/// `engine` capped at t = 1, 2, ... give the centres after each iteration; the first t whose
/// centres equal, bit for bit, those of an iteration s in [t - kRepeatWindow, t - 2] (the latest
/// such s) is where the rule finds the cycle, and it stops at t + (t - s) with period t - s.
/// `stop` = 0 when no centres recur within `limit` iterations (or a run stops by another rule
/// first).
struct RepeatOracle {
  int stop = 0, period = 0;
};

/// The oracle's answer once the centres after iterations 1 .. t are known (centres[t - 1] the
/// latest): where the rule stops when the latest centres recur, else stop = 0.
inline RepeatOracle recurrence(const std::vector<Matrix>& centres) {
  const int t = int(centres.size());
  const Matrix& b = centres.back();
  for (int s = t - 2; s >= 1 && s >= t - kRepeatWindow; --s) {
    const Matrix& a = centres[std::size_t(s - 1)];
    // The centroids are W values widened to double: equal bits in W, equal doubles.
    if (std::memcmp(a.values.data(), b.values.data(), a.values.size() * sizeof(double)) == 0)
      return {t + (t - s), t - s};
  }
  return {};
}

inline RepeatOracle repeatByPlainRuns(KMeansEngine& engine, const Matrix& data, const Matrix& init,
                                      KMeansParams p, int limit) {
  p.detectRepeats = false;
  std::vector<Matrix> centres;  // centres[t - 1]: after iteration t
  for (int t = 1; t <= limit; ++t) {
    p.maxIterations = t;
    const KMeansResult r = engine.run(data, init, p);
    if (r.stop != StopReason::MaxIterations) return {};
    centres.push_back(r.centroids);
    if (const RepeatOracle o = recurrence(centres); o.stop > 0) return o;
  }
  return {};
}

/// repeatByPlainRuns' answer from chained one-iteration runs, `limit` iterations of work in place
/// of about limit² / 2 (which matters under a slow tool such as racecheck): step t starts from the
/// centres step t - 1 left and gives those after iteration t, since an iteration's centres depend
/// on nothing but the centres it starts from (the assignment, the re-seeding and the update read
/// no other state of the run). The chain goes on to the stop, whose centres it gives (`atStop`),
/// so that the caller can check it against a whole run capped there; that run reaching its cap
/// also shows that no other rule stops the run first, which the chain cannot tell.
struct StepOracle : RepeatOracle {
  Matrix atStop;
};

inline StepOracle repeatBySteps(KMeansEngine& engine, const Matrix& data, const Matrix& init,
                                KMeansParams p, int limit) {
  p.detectRepeats = false;
  p.maxIterations = 1;
  StepOracle o;
  std::vector<Matrix> centres;  // centres[t - 1]: after iteration t
  for (int t = 1; t <= (o.stop > 0 ? o.stop : limit); ++t) {
    centres.push_back(engine.run(data, centres.empty() ? init : centres.back(), p).centroids);
    if (o.stop == 0) static_cast<RepeatOracle&>(o) = recurrence(centres);
    if (o.stop > 0 && t == o.stop) o.atStop = centres.back();
  }
  return o;
}

}  // namespace kmseg::test
