// SPDX-License-Identifier: MIT
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "kmseg/precision.h"

namespace kmseg {

/// The single list of precision modes. X(Enumerator, "name", low precision, high precision)
/// where `low` is the precision of the expanded-formula distance and `high` the precision of the
/// direct-formula fallback (Precision::None for the uniform modes, which have no fallback).
/// Everything that enumerates modes (parsing, dispatch, explicit instantiations, typed tests)
/// is generated from this list: adding a mode is one line.
#define KMSEG_FOR_EACH_MODE(X)                               \
  X(Fp64, "fp64", Precision::Fp64, Precision::None)          \
  X(Fp32, "fp32", Precision::Fp32, Precision::None)          \
  X(Fp16, "fp16", Precision::Fp16, Precision::None)          \
  X(Bf16, "bf16", Precision::Bf16, Precision::None)          \
  X(Fp16Fp32, "fp16>fp32", Precision::Fp16, Precision::Fp32) \
  X(Fp16Fp64, "fp16>fp64", Precision::Fp16, Precision::Fp64) \
  X(Bf16Fp32, "bf16>fp32", Precision::Bf16, Precision::Fp32) \
  X(Bf16Fp64, "bf16>fp64", Precision::Bf16, Precision::Fp64) \
  X(Fp32Fp64, "fp32>fp64", Precision::Fp32, Precision::Fp64)

/// A precision mode: how assignment distances are computed (DESIGN.md section 3).
enum class Mode {
#define KMSEG_MODE_ENUM(e, name, low, high) e,
  KMSEG_FOR_EACH_MODE(KMSEG_MODE_ENUM)
#undef KMSEG_MODE_ENUM
};

/// Every mode, in the order of the list (the order of tables and reports).
inline constexpr std::array<Mode, 9> kAllModes = {
#define KMSEG_MODE_VALUE(e, name, low, high) Mode::e,
    KMSEG_FOR_EACH_MODE(KMSEG_MODE_VALUE)
#undef KMSEG_MODE_VALUE
};

/// The name a user types for `mode`, e.g. "fp16>fp32".
std::string_view modeName(Mode mode);
/// Parses a mode name (exact, lower case). "fp16-fp32" is accepted for "fp16>fp32" (no
/// character a shell redirects on). Throws InvalidArgument listing the valid names.
Mode parseMode(std::string_view name);
/// The comma-separated list of all mode names, for help texts and error messages.
std::string modeNameList();
/// Precision of the expanded-formula (assignment) distance.
Precision lowPrecision(Mode mode);
/// Precision of the direct-formula fallback; Precision::None for uniform modes.
Precision highPrecision(Mode mode);
/// True for the mixed modes, which run the reliability test and may fall back.
inline bool hasFallback(Mode mode) {
  return highPrecision(mode) != Precision::None;
}

}  // namespace kmseg
