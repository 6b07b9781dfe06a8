// SPDX-License-Identifier: MIT
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "kmseg/matrix.h"

namespace kmseg::test {

/// An n x d matrix of uniform values in [0, 1) from a seeded generator (shared by the CPU and
/// GPU suites, so both test the same synthetic data for a seed).
inline Matrix randomData(std::size_t n, std::size_t d, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Matrix m(n, d);
  for (double& v : m.values) v = u(rng);
  return m;
}

/// Gaussian blobs: `count` means drawn uniformly from [lo, hi)^d, then sample i is mean
/// (i / run) mod count plus N(0, sigma^2) noise per feature (shared by the CPU and GPU suites).
/// run > 1 gives runs of consecutive samples from one blob, like the pixels of a photo.
inline Matrix blobs(std::size_t n, std::size_t d, int count, double sigma, std::uint32_t seed,
                    double lo = 0.0, double hi = 1.0, std::size_t run = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::normal_distribution<double> noise(0.0, sigma);
  std::vector<double> means(std::size_t(count) * d);
  for (double& m : means) m = u(rng);
  Matrix x(n, d);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t b = (i / run) % std::size_t(count);
    for (std::size_t q = 0; q < d; ++q) x(i, q) = means[b * d + q] + noise(rng);
  }
  return x;
}

/// Six 2-D centres for runs that must re-seed: three near the origin (one blob of such data
/// lies nearby) and three far from everything, which lose all their samples.
inline Matrix centresThatEmpty() {
  const double c[6][2] = {{0.0, 0.0}, {0.001, 0.0}, {0.0, 0.001}, {5, 5}, {-5, 5}, {5, -5}};
  Matrix init(6, 2);
  for (std::size_t j = 0; j < 6; ++j)
    for (std::size_t q = 0; q < 2; ++q) init(j, q) = c[j][q];
  return init;
}

/// The first iteration's labels by the rules written out plainly (the engines' reference for
/// re-seeding): each sample to its nearest centre of `init` (direct formula in double, ties to
/// the lowest index), then each empty cluster, ascending, re-seeded with the sample farthest
/// from its centre (ties to the lowest index) among samples whose cluster keeps another member.
/// `skips`: the samples passed over on the way because an earlier pick left their cluster with
/// one member (samples of one-member clusters are never candidates).
struct FirstReseed {
  std::vector<std::int32_t> labels;
  std::int64_t events = 0, skips = 0;
};

inline FirstReseed firstReseedByTheRule(const Matrix& data, const Matrix& init) {
  const std::size_t n = data.rows, d = data.cols, k = init.rows;
  FirstReseed r;
  r.labels.assign(n, 0);
  std::vector<double> dist(n);
  std::vector<long long> count(k, 0);
  for (std::size_t i = 0; i < n; ++i) {
    double best = 0;
    for (std::size_t j = 0; j < k; ++j) {
      double s = 0;
      for (std::size_t q = 0; q < d; ++q)
        s += (data(i, q) - init(j, q)) * (data(i, q) - init(j, q));
      if (j == 0 || s < best) best = s, r.labels[i] = std::int32_t(j);
    }
    dist[i] = best;
    ++count[std::size_t(r.labels[i])];
  }
  const std::vector<long long> initial = count;
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return dist[a] > dist[b] || (dist[a] == dist[b] && a < b);
  });
  std::size_t next = 0;
  for (std::size_t j = 0; j < k; ++j) {
    if (count[j] != 0) continue;
    while (next < n) {
      const std::size_t i = order[next++];
      const std::size_t l = std::size_t(r.labels[i]);
      if (count[l] > 1) {
        --count[l];
        r.labels[i] = std::int32_t(j);
        count[j] = 1;
        ++r.events;
        break;
      }
      r.skips += initial[l] > 1;
    }
  }
  return r;
}

}  // namespace kmseg::test
