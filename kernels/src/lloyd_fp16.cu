// SPDX-License-Identifier: MIT
// The CUDA Lloyd run for the modes whose assignment distances are in fp16 (one translation unit
// per precision family keeps the build parallel).

#include "lloyd_impl.cuh"

namespace kmseg::cuda {
template std::unique_ptr<LloydRun> makeLloydRun<Precision::Fp16>(const RunInputs& in);
}  // namespace kmseg::cuda
