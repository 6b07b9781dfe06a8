// SPDX-License-Identifier: MIT
#include "kmseg/mode.h"

#include "kmseg/error.h"

namespace kmseg {

namespace {
struct ModeInfo {
  Mode mode;
  std::string_view name;
  Precision low;
  Precision high;
};
constexpr ModeInfo kModeInfo[] = {
#define KMSEG_MODE_INFO(e, name, low, high) {Mode::e, name, low, high},
    KMSEG_FOR_EACH_MODE(KMSEG_MODE_INFO)
#undef KMSEG_MODE_INFO
};
const ModeInfo& info(Mode m) {
  return kModeInfo[static_cast<int>(m)];
}
}  // namespace

std::string_view modeName(Mode mode) {
  return info(mode).name;
}
Precision lowPrecision(Mode mode) {
  return info(mode).low;
}
Precision highPrecision(Mode mode) {
  return info(mode).high;
}

std::string modeNameList() {
  std::string list;
  for (const auto& m : kModeInfo) {
    if (!list.empty()) list += ", ";
    list += m.name;
  }
  return list;
}

Mode parseMode(std::string_view name) {
  for (const auto& m : kModeInfo)
    if (m.name == name) return m.mode;
  // "fp16-fp32" for "fp16>fp32": the same mode without a character that shells redirect on.
  for (const auto& m : kModeInfo) {
    std::string alias(m.name);
    for (char& c : alias)
      if (c == '>') c = '-';
    if (alias == name && alias != m.name) return m.mode;
  }
  throw InvalidArgument("unknown precision mode '" + std::string(name) +
                        "'; valid modes are: " + modeNameList());
}

}  // namespace kmseg
