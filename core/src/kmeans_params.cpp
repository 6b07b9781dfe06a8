// SPDX-License-Identifier: MIT
#include <cmath>
#include <cstdint>
#include <string>

#include "kmseg/error.h"
#include "kmseg/kmeans.h"
#include "kmseg/precision.h"

namespace kmseg {

std::string_view initName(Init init) {
  return init == Init::KMeansPlusPlus ? "kmeans++" : "random";
}

Init parseInit(std::string_view name) {
  if (name == "random") return Init::RandomPoints;
  if (name == "kmeans++") return Init::KMeansPlusPlus;
  throw InvalidArgument("unknown init '" + std::string(name) + "'; valid: random, kmeans++");
}

std::string_view workingName(Working w) {
  switch (w) {
    case Working::Fp32:
      return "fp32";
    case Working::Fp64:
      return "fp64";
    case Working::Auto:
      break;
  }
  return "auto";
}

Working parseWorking(std::string_view name) {
  if (name == "auto") return Working::Auto;
  if (name == "fp32") return Working::Fp32;
  if (name == "fp64") return Working::Fp64;
  throw InvalidArgument("unknown working precision '" + std::string(name) +
                        "'; valid: auto, fp32, fp64");
}

Precision resolveWorking(Mode mode, Working w) {
  if (mode == Mode::Fp64 || w == Working::Fp64) return Precision::Fp64;
  return Precision::Fp32;
}

std::string_view stopReasonName(StopReason r) {
  switch (r) {
    case StopReason::Converged:
      return "converged";
    case StopReason::Cycle:
      return "2-cycle";
    case StopReason::CentreShift:
      return "centre shift < tol";
    case StopReason::Repeat:
      return "cycle";
    case StopReason::MaxIterations:
      break;
  }
  return "iteration cap";
}

std::string stopReasonText(StopReason r, int cyclePeriod) {
  if (r == StopReason::Repeat) return std::to_string(cyclePeriod) + "-cycle";
  return std::string(stopReasonName(r));
}

void validate(const KMeansParams& p, std::size_t n) {
  if (p.k < 1) throw InvalidArgument("K = " + std::to_string(p.k) + " is invalid: K must be >= 1");
  if (std::size_t(p.k) > n)
    throw InvalidArgument("K = " + std::to_string(p.k) + " exceeds the number of samples (" +
                          std::to_string(n) + ")");
  if (!(p.rho > 2.0) || !std::isfinite(p.rho))
    throw InvalidArgument("rho = " + numberText(p.rho) + " is invalid: rho must be > 2 and finite");
  if (p.maxIterations < 1 || p.maxIterations > kMaxIterations)
    throw InvalidArgument("max iterations = " + std::to_string(p.maxIterations) +
                          " is invalid: it must be from 1 to " + std::to_string(kMaxIterations));
  if (!(p.tolerance >= 0.0) || !std::isfinite(p.tolerance))
    throw InvalidArgument("tolerance = " + numberText(p.tolerance) +
                          " is invalid: it must be a finite number >= 0");
  if (p.threads < 0 || p.threads > kMaxThreads)
    throw InvalidArgument("threads = " + std::to_string(p.threads) +
                          " is invalid: use 0 (all cores) up to " + std::to_string(kMaxThreads));
  if (p.imageWidth < 0 || (p.imageWidth > 0 && n % std::size_t(p.imageWidth) != 0))
    throw InvalidArgument("image width = " + std::to_string(p.imageWidth) +
                          " is invalid: it must be 0 (no image) or divide the number of samples (" +
                          std::to_string(n) + ")");
}

std::size_t maxReliableFeatures(Mode mode) {
  if (!hasFallback(mode)) return SIZE_MAX;
  // The largest D with gammaDefined(D + 2, u_low); u_low is a power of two, so 1 / u_low - 3 is
  // exact.
  return std::size_t(1.0 / unitRoundoff(lowPrecision(mode))) - 3;
}

void checkModeFeatures(Mode mode, std::size_t d) {
  const std::size_t limit = maxReliableFeatures(mode);
  if (d > limit)
    throw InvalidArgument(std::string(modeName(mode)) + " with D = " + std::to_string(d) +
                          " features: its reliability test needs (D + 2) u < 1 for " +
                          std::string(precisionName(lowPrecision(mode))) + ", so D <= " +
                          std::to_string(limit) + " (use fp32>fp64 or a uniform mode)");
}

}  // namespace kmseg
