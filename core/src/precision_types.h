// SPDX-License-Identifier: MIT
#pragma once

// Host number type of each precision, for the CPU engine's dispatch over KMSEG_FOR_EACH_MODE.

#include "kmseg/arith.h"
#include "kmseg/precision.h"

namespace kmseg {

template <Precision P>
struct TypeOf {
  using type = void;  // Precision::None: a uniform mode has no fallback type
};
template <>
struct TypeOf<Precision::Fp64> {
  using type = double;
};
template <>
struct TypeOf<Precision::Fp32> {
  using type = float;
};
template <>
struct TypeOf<Precision::Fp16> {
  using type = EmuHalf;
};
template <>
struct TypeOf<Precision::Bf16> {
  using type = EmuBf16;
};

}  // namespace kmseg
