// SPDX-License-Identifier: MIT
// Device discovery and registration of the CUDA engine with core's factory.

#include <cuda_runtime.h>

#include <string>

#include "kmseg/cuda_engine.h"
#include "kmseg/engine.h"

namespace kmseg {

namespace {

std::string describe(const char* call, cudaError_t e) {
  return std::string(call) + ": " + cudaGetErrorString(e) + " (error " + std::to_string(int(e)) +
         ")";
}

// The factory core's makeEngine() calls. The Lloyd kernels are not part of this build yet, so
// even with a device it declines and says so; makeEngine(Auto) then uses the CPU engine.
std::unique_ptr<KMeansEngine> makeCudaEngine(std::string& whyNot) {
  const auto devices = cudaDevices(&whyNot);
  if (devices.empty()) return nullptr;
  whyNot = "found " + devices.front().name + ", but this build has no CUDA Lloyd kernels yet";
  return nullptr;
}

}  // namespace

std::vector<CudaDeviceInfo> cudaDevices(std::string* whyNot) {
  std::vector<CudaDeviceInfo> out;
  int count = 0;
  // Error 35 (insufficient driver) means no driver; error 100 (no device) a driver without a
  // device. Both mean: no GPU, use the CPU.
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error state for later calls
    if (whyNot) *whyNot = "no CUDA device: " + describe("cudaGetDeviceCount", e);
    return out;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    out.push_back({i, p.name, p.major, p.minor, p.totalGlobalMem, p.multiProcessorCount});
  }
  if (out.empty() && whyNot) *whyNot = "no CUDA device: the runtime lists none";
  return out;
}

void registerCudaEngine() { registerGpuEngineFactory(&makeCudaEngine); }

}  // namespace kmseg
