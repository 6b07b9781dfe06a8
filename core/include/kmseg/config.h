// SPDX-License-Identifier: MIT
#pragma once

/// Marks a function callable from host and device code. Under nvcc it expands to
/// `__host__ __device__`; every other compiler sees plain C++.
#if defined(__CUDACC__)
#define KMSEG_HOST_DEVICE __host__ __device__
#else
#define KMSEG_HOST_DEVICE
#endif

namespace kmseg {
/// The project's version, "major.minor.patch".
inline constexpr const char* kVersion = "0.1.0";
}  // namespace kmseg
