// SPDX-License-Identifier: MIT
#pragma once

// The CUDA side of kmseg, as plain C++: no CUDA header is needed to include this.

#include <string>
#include <vector>

namespace kmseg {

/// One CUDA device as the runtime reports it.
struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int computeMajor = 0;
  int computeMinor = 0;
  std::size_t totalMemory = 0;
  int multiprocessors = 0;
};

/// The devices the CUDA runtime sees. Empty when there is no driver or no device; `whyNot` then
/// says which (e.g. "cudaGetDeviceCount: CUDA driver version is insufficient ... (error 35)").
std::vector<CudaDeviceInfo> cudaDevices(std::string* whyNot = nullptr);

/// Registers the CUDA engine factory with core's makeEngine(). Safe to call more than once.
void registerCudaEngine();

}  // namespace kmseg
