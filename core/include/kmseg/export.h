// SPDX-License-Identifier: MIT
#pragma once

#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kmseg {

/// An 8-bit sRGB colour.
struct Rgb8 {
  std::uint8_t r = 0, g = 0, b = 0;
  friend bool operator==(const Rgb8&, const Rgb8&) = default;
};

/// Palettes for label maps.
enum class PaletteKind {
  Distinct,       ///< maximally distinct hues (default)
  ColorBlindSafe  ///< Okabe-Ito first, then colours safe under common colour-vision deficiencies
};
/// "distinct" or "cb-safe", the name parsePalette accepts.
std::string_view paletteName(PaletteKind p);
/// Parses "distinct" or "cb-safe". Throws InvalidArgument.
PaletteKind parsePalette(std::string_view name);
/// `k` colours (0 <= k <= 65536, else InvalidArgument), all different; deterministic; the first
/// colours are the most distinct, and a palette is a prefix of every longer one of its kind.
std::vector<Rgb8> makePalette(int k, PaletteKind kind = PaletteKind::Distinct);

/// A label map read back from a PNG file.
struct LabelImage {
  int width = 0;
  int height = 0;
  std::vector<std::int32_t> labels;
  std::vector<Rgb8> palette;  ///< empty for 16-bit grey label maps
};

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, flushed, then
/// renamed over `path`. On any failure the temporary file is removed, `path` is untouched, and
/// IoError names the path and the reason. An existing directory or non-regular file at `path` is
/// refused; through a symbolic link the linked file is replaced and the link kept.
void writeFileAtomic(const std::filesystem::path& path, std::string_view bytes);
/// As above, with the content produced by `write` into the open temporary file.
void writeFileAtomic(const std::filesystem::path& path,
                     const std::function<void(std::FILE*)>& write);

/// Removes the temporary files of the atomic writes in progress (writeFileAtomic) on any thread,
/// for a signal handler that then ends the process: async-signal-safe (only unlink() and
/// lock-free atomics). A write whose file it removed fails with IoError if it goes on, and every
/// write that starts after it is refused with IoError before it creates a file, so no temporary
/// file appears between this call and the end of the process. A write that is creating its file
/// on another thread as it runs is waited for (a few system calls) and its file removed. Up to
/// kMaxTrackedTempFiles writes at once are tracked; a write beyond them, or one whose
/// temporary path is longer than PATH_MAX, keeps its file.
void removeTempFilesNow() noexcept;
/// The number of atomic writes in progress at once whose temporary files removeTempFilesNow
/// can remove.
inline constexpr int kMaxTrackedTempFiles = 128;

/// Throws IoError naming `path` when writeFileAtomic would refuse it before writing: an existing
/// directory or non-regular file there (through a symbolic link, at the file it names), a name
/// longer than its file system takes (the message names the limit), any other error in looking
/// the path up except its absence, or a link to a file in a directory where no file can be
/// created. Leaves nothing behind (for a
/// link it creates and removes a probe file beside the link's file), so a set of outputs can be
/// checked before its first file is written.
void checkOutputFile(const std::filesystem::path& path);

/// Creates `dir` (and parents) if needed; an empty path means the current directory. Throws
/// IoError when it is an existing non-directory, cannot be created, or is not writable (checked
/// by creating and removing a probe file, since access() says yes to root). Returns the
/// directories it created, outermost first, so that a command that fails later can remove them
/// (removeEmptyDirectories). It records each for removeCreatedDirectoriesNow before it creates
/// it; the records last until a CreatedDirectories made from the list goes (make one at once).
/// Any number are recorded at once (a path longer than PATH_MAX is not).
std::vector<std::filesystem::path> prepareOutputDirectory(const std::filesystem::path& dir);

/// Removes the directories prepareOutputDirectory recorded that are empty (innermost first), for
/// a signal handler that then ends the process, after removeTempFilesNow: async-signal-safe
/// (rmdir() and lock-free atomics). A directory that holds a file stays.
void removeCreatedDirectoriesNow() noexcept;

/// What a signal handler does on a second signal, to end the process at once: removes the
/// temporary files of the writes in progress and then the empty directories made for outputs
/// (removeTempFilesNow, removeCreatedDirectoriesNow), restores `signal`'s default action and
/// raises it. The signal is blocked in its handler, so the process ends by it when the handler
/// returns. Async-signal-safe (unlink(), rmdir(), sigaction(), raise(), lock-free atomics).
void abandonOutputsAndRaise(int signal) noexcept;

/// Restores `signal`'s default action and raises it: the process ends by the signal (at once, or
/// when a handler that blocks it returns). Async-signal-safe (sigaction(), raise()).
void raiseWithDefaultAction(int signal) noexcept;

/// Installs `handler` for the signals that ask a process to stop, SIGINT, SIGTERM and SIGHUP, while
/// it lives, and then restores the handlers it found. Each signal's handler blocks the others, so a
/// first and a second never interleave; SA_RESTART, so that a read or write a signal meets goes on
/// rather than failing with EINTR (decoding a photo would then report it truncated).
class StopSignalHandlers {
 public:
  explicit StopSignalHandlers(void (*handler)(int));
  ~StopSignalHandlers();
  StopSignalHandlers(const StopSignalHandlers&) = delete;
  StopSignalHandlers& operator=(const StopSignalHandlers&) = delete;

 private:
  struct sigaction old_[3];
};

/// Removes each of `dirs` that is (by then) an empty directory, innermost first: what
/// prepareOutputDirectory created for outputs that were never written. Never throws.
void removeEmptyDirectories(const std::vector<std::filesystem::path>& dirs) noexcept;

/// The directories prepareOutputDirectory created for a command's outputs: removed again when
/// empty (removeEmptyDirectories) on destruction, unless kept once the outputs are written. Its
/// destruction also ends their records for removeCreatedDirectoriesNow.
class CreatedDirectories {
 public:
  explicit CreatedDirectories(std::vector<std::filesystem::path> dirs) : dirs_(std::move(dirs)) {}
  CreatedDirectories(const CreatedDirectories&) = delete;
  CreatedDirectories& operator=(const CreatedDirectories&) = delete;
  ~CreatedDirectories();
  void keep() { kept_ = true; }

 private:
  std::vector<std::filesystem::path> dirs_;
  bool kept_ = false;
};

/// Label map with exact cluster ids: an 8-bit palette PNG coloured with `palette` when k <= 256
/// (opens in colour in any viewer, pixel value = cluster id, PLTE = the first k colours), a
/// 16-bit greyscale PNG otherwise (pixel value = cluster id; `palette` is not used). Throws
/// InvalidArgument for a size mismatch, a label outside [0, k), k outside [1, 65536] or a palette
/// shorter than k (k <= 256), IoError when the file cannot be written.
void writeLabelPng(const std::filesystem::path& path, const std::vector<std::int32_t>& labels,
                   int width, int height, int k, const std::vector<Rgb8>& palette);
/// Label map rendered in colour, 8-bit RGB PNG.
void writeColorPng(const std::filesystem::path& path, const std::vector<std::int32_t>& labels,
                   int width, int height, const std::vector<Rgb8>& palette);
/// Disagreement mask: 1-bit greyscale PNG, white (1) where mask != 0, black (0) elsewhere.
void writeMaskPng(const std::filesystem::path& path, const std::vector<std::uint8_t>& mask,
                  int width, int height);
/// Reads a label map written by writeLabelPng: an indexed PNG (any bit depth; label = palette
/// index) or a 16-bit greyscale PNG (label = sample). Throws IoError naming the path for a
/// missing, truncated or non-PNG file, any other PNG type, or more than 2^30 pixels.
LabelImage readLabelPng(const std::filesystem::path& path);

}  // namespace kmseg
