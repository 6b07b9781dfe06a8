// SPDX-License-Identifier: MIT
#pragma once

// Everything the parameters panel sets, and its persistence in QSettings.

#include <cstdint>

#include "kmseg/engine.h"
#include "kmseg/export.h"
#include "kmseg/features.h"
#include "kmseg/image_io.h"
#include "kmseg/mode.h"
#include "kmseg/workflow.h"

class QSettings;

namespace kmseg::gui {

/// The parameters of a run as the user set them. Defaults are the core library's (the paper's),
/// with the mode of a single run fp16>fp32 as in `kmseg segment`.
struct GuiParams {
  WorkflowParams workflow;     ///< K, rho, working precision, stop rules, threads, init and seed
  Mode mode = Mode::Fp16Fp32;  ///< the mode of "Run"; "Compare all modes" runs all nine
  FeatureOptions features;
  Backend backend = Backend::Auto;
  PaletteKind palette = PaletteKind::Distinct;
  std::uint64_t maxPixels = kDefaultMaxPixels;  ///< images with more pixels are refused
};

/// The defaults "Reset to defaults" restores.
GuiParams defaultParams();

/// Reads the parameters stored under the group "params"; a missing or unreadable value keeps
/// its default.
GuiParams loadParams(QSettings& settings);

/// Stores `params` under the group "params" (names as the CLI spells them).
void saveParams(QSettings& settings, const GuiParams& params);

}  // namespace kmseg::gui
