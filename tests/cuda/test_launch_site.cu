// SPDX-License-Identifier: MIT
// A real launch error (a block of more threads than any device allows) and what its message
// names. Compiled by nvcc, since it launches a kernel of its own.
#include <gtest/gtest.h>

#include <string>

#include "cuda_check.cuh"

namespace {

__global__ void emptyKernel(int) {}

TEST(CudaLaunch, AnErrorNamesTheKernelAndTheLineThatLaunchedIt) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    GTEST_SKIP() << "no CUDA device answers";
  }
  const int line = __LINE__ + 2;  // the launch's line
  try {
    KMSEG_LAUNCH(emptyKernel, 1, 4096, 0, cudaStream_t(nullptr), 1);
    FAIL() << "a block of 4096 threads was launched";
  } catch (const kmseg::BackendError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("CUDA error in emptyKernel: "), std::string::npos) << m;
    EXPECT_NE(m.find("test_launch_site.cu:" + std::to_string(line) + ")"), std::string::npos) << m;
    EXPECT_EQ(m.find("cuda_check.cuh"), std::string::npos) << m;
  }
  // The error was not sticky: the next launch runs.
  KMSEG_LAUNCH(emptyKernel, 1, 32, 0, cudaStream_t(nullptr), 1);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
