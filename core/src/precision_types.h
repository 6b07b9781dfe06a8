// SPDX-License-Identifier: MIT
#pragma once

// Host number type of each precision, for the CPU engine's dispatch over KMSEG_FOR_EACH_MODE.

#include "kmseg/arith.h"
#include "kmseg/precision.h"

namespace kmseg {

template <Precision P>
struct TypeOf {
  using type = NumberType<P, EmuHalf, EmuBf16>;
};

}  // namespace kmseg
