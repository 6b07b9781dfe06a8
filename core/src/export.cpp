// SPDX-License-Identifier: MIT
#include "kmseg/export.h"

#include <fcntl.h>
#include <png.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <system_error>
#include <thread>
#include <unordered_set>

#include "kmseg/error.h"

namespace kmseg {

namespace {

namespace fs = std::filesystem;

// ---- Palettes ------------------------------------------------------------------------------

/// Largest palette makePalette builds: the largest K a 16-bit label map can hold.
constexpr int kMaxPaletteSize = 65536;

constexpr Rgb8 hex(std::uint32_t v) {
  return Rgb8{std::uint8_t(v >> 16), std::uint8_t(v >> 8), std::uint8_t(v)};
}

// Kelly's 22 colours of maximum contrast (Kelly 1965, in his order), without white and black:
// white is the usual background and black the usual boundary colour of an overlay.
constexpr std::array<Rgb8, 20> kKelly = {
    hex(0xF3C300), hex(0x875692), hex(0xF38400), hex(0xA1CAF1), hex(0xBE0032),
    hex(0xC2B280), hex(0x848482), hex(0x008856), hex(0xE68FAC), hex(0x0067A5),
    hex(0xF99379), hex(0x604E97), hex(0xF6A600), hex(0xB3446C), hex(0xDCD300),
    hex(0x882D17), hex(0x8DB600), hex(0x654522), hex(0xE25822), hex(0x2B3D26)};

// Okabe-Ito (black moved last, so that cluster 0 is not drawn black), then Paul Tol's "bright"
// and "muted" qualitative schemes, which are distinct under protanopia, deuteranopia and
// tritanopia within each scheme.
constexpr std::array<Rgb8, 25> kColorBlindSafe = {
    // Okabe-Ito
    hex(0xE69F00), hex(0x56B4E9), hex(0x009E73), hex(0xF0E442), hex(0x0072B2), hex(0xD55E00),
    hex(0xCC79A7), hex(0x000000),
    // Tol bright
    hex(0x4477AA), hex(0xEE6677), hex(0x228833), hex(0xCCBB44), hex(0x66CCEE), hex(0xAA3377),
    hex(0xBBBBBB),
    // Tol muted
    hex(0x332288), hex(0x88CCEE), hex(0x44AA99), hex(0x117733), hex(0x999933), hex(0xDDCC77),
    hex(0xCC6677), hex(0x882255), hex(0xAA4499), hex(0xDDDDDD)};

struct OkLab {
  double l, a, b;
};

double linearToSrgb(double v) {
  return v <= 0.0031308 ? 12.92 * v : 1.055 * std::pow(v, 1.0 / 2.4) - 0.055;
}
double srgbToLinear(double v) {
  return v <= 0.04045 ? v / 12.92 : std::pow((v + 0.055) / 1.055, 2.4);
}

// Björn Ottosson's OKLab <-> linear sRGB matrices.
std::array<double, 3> okLabToLinearSrgb(const OkLab& c) {
  const double l = std::pow(c.l + 0.3963377774 * c.a + 0.2158037573 * c.b, 3.0);
  const double m = std::pow(c.l - 0.1055613458 * c.a - 0.0638541728 * c.b, 3.0);
  const double s = std::pow(c.l - 0.0894841775 * c.a - 1.2914855480 * c.b, 3.0);
  return {4.0767416621 * l - 3.3077115913 * m + 0.2309699292 * s,
          -1.2684380046 * l + 2.6097574011 * m - 0.3413193965 * s,
          -0.0041960863 * l - 0.7034186147 * m + 1.7076373369 * s};
}

OkLab toOkLab(const Rgb8& c) {
  const double r = srgbToLinear(c.r / 255.0), g = srgbToLinear(c.g / 255.0),
               b = srgbToLinear(c.b / 255.0);
  const double l = std::cbrt(0.4122214708 * r + 0.5363092425 * g + 0.0514459771 * b);
  const double m = std::cbrt(0.2119034982 * r + 0.6806995457 * g + 0.1073969560 * b);
  const double s = std::cbrt(0.0883024619 * r + 0.2817188376 * g + 0.6299787005 * b);
  return {0.2104542553 * l + 0.7936177850 * m - 0.0040720468 * s,
          1.9779984951 * l - 2.4285922050 * m + 0.4505937099 * s,
          0.0259040371 * l + 0.7827717662 * m - 0.8086757660 * s};
}

bool inGamut(const std::array<double, 3>& rgb) {
  constexpr double kEps = 1e-9;
  return std::all_of(rgb.begin(), rgb.end(),
                     [](double v) { return v >= -kEps && v <= 1.0 + kEps; });
}

// The sRGB colour of OKLCh (l, c, h), with the chroma reduced (bisection) until it fits the
// gamut, so that hue and lightness are kept.
Rgb8 okLchToRgb8(double l, double c, double h) {
  auto lab = [&](double chroma) { return OkLab{l, chroma * std::cos(h), chroma * std::sin(h)}; };
  if (!inGamut(okLabToLinearSrgb(lab(c)))) {
    double lo = 0.0, hi = c;
    for (int i = 0; i < 30; ++i) {
      const double mid = 0.5 * (lo + hi);
      (inGamut(okLabToLinearSrgb(lab(mid))) ? lo : hi) = mid;
    }
    c = lo;
  }
  const auto rgb = okLabToLinearSrgb(lab(c));
  auto to8 = [](double v) {
    return std::uint8_t(
        std::lround(std::clamp(linearToSrgb(std::clamp(v, 0.0, 1.0)), 0.0, 1.0) * 255.0));
  };
  return {to8(rgb[0]), to8(rgb[1]), to8(rgb[2])};
}

double okDistance(const OkLab& x, const OkLab& y) {
  return std::sqrt((x.l - y.l) * (x.l - y.l) + (x.a - y.a) * (x.a - y.a) +
                   (x.b - y.b) * (x.b - y.b));
}

std::uint32_t packRgb(const Rgb8& c) {
  return (std::uint32_t(c.r) << 16) | (c.g << 8) | c.b;
}

// Candidate n of the generated part of a palette. Hue and lightness follow the R2 sequence (the
// two-dimensional golden-ratio sequence, built on the plastic number), which spreads consecutive
// colours evenly over the hue circle and the lightness range.
Rgb8 generatedColor(std::uint64_t n, PaletteKind kind) {
  constexpr double kPlastic = 1.32471795724474602596;
  constexpr double kA1 = 1.0 / kPlastic, kA2 = 1.0 / (kPlastic * kPlastic);
  constexpr double kTwoPi = 6.28318530717958647692;
  const double u = std::fmod(0.5 + double(n) * kA1, 1.0);
  const double v = std::fmod(0.5 + double(n) * kA2, 1.0);
  if (kind == PaletteKind::Distinct) {
    // Lightness 0.45..0.90 and a strong chroma: vivid, readable over dark and light overlays.
    return okLchToRgb8(0.45 + 0.45 * v, 0.17, u * kTwoPi);
  }
  // Colour-vision deficiencies keep lightness and the blue-yellow axis: use only hues near
  // yellow-orange (about 75 degrees) and blue (about 255 degrees) and spread the colours over
  // lightness, where they stay apart for every common deficiency.
  const bool blue = u >= 0.5;
  const double jitter = (blue ? u - 0.5 : u) * 2.0 - 0.5;  // -0.5 .. 0.5
  const double hue = (blue ? 255.0 : 75.0) + 40.0 * jitter;
  const double chroma = 0.05 + 0.10 * std::fmod(double(n) * 0.6180339887498949, 1.0);
  return okLchToRgb8(0.30 + 0.62 * v, chroma, hue * kTwoPi / 360.0);
}

// ---- Errors ----------------------------------------------------------------------------------

[[noreturn]] void throwIo(const std::string& action, const fs::path& path,
                          const std::string& reason) {
  throw IoError("cannot " + action + " '" + path.string() + "': " + reason);
}

std::string errnoText(int err) {
  return std::system_category().message(err);
}

// ---- Atomic writes ---------------------------------------------------------------------------

// The process umask without changing it (umask(2) can only be read by setting it, which races
// with other threads). Linux reports it in /proc/self/status; elsewhere assume 022.
mode_t currentUmask() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Umask:", 0) == 0) return mode_t(std::strtoul(line.c_str() + 6, nullptr, 8));
  }
  return 022;
}

// ---- Temporary files of the writes in progress ----------------------------------------------
//
// A fixed table that a signal handler can read, one slot per temporary file. A writer claims a
// free slot (Free -> Filling) before it creates its file, copies the file's path into it and
// publishes it (Held); all signals are blocked on its thread from the claim to the publication,
// so the file never exists unrecorded while a handler could run there. It gives the slot back
// once its file is renamed or unlinked (Held -> Free, or Removed -> Free after
// removeTempFilesNow took it). removeTempFilesNow first sets gTempFilesStopped, which a writer
// reads after its claim (so a writer either sees it and creates nothing, or holds a slot that
// removeTempFilesNow then sees); it waits out each Filling slot (its writer is on another thread,
// one mkostemp from Held), then takes each Held slot (Held -> Removing), unlinks its path and
// marks it Removed, so no path is read while a writer rewrites it.
enum TempSlotState : int { kSlotFree, kSlotFilling, kSlotHeld, kSlotRemoving, kSlotRemoved };

struct TempSlot {
  std::atomic<int> state{kSlotFree};
  char path[PATH_MAX];
};
static_assert(std::atomic<int>::is_always_lock_free, "read by a signal handler");
static_assert(std::atomic<bool>::is_always_lock_free, "set by a signal handler");

TempSlot gTempSlots[kMaxTrackedTempFiles];
std::atomic<bool> gTempFilesStopped{false};

// Blocks every signal that can be blocked on this thread while it lives.
class SignalsBlocked {
 public:
  SignalsBlocked() {
    sigset_t all;
    sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, &old_);
  }
  ~SignalsBlocked() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  SignalsBlocked(const SignalsBlocked&) = delete;
  SignalsBlocked& operator=(const SignalsBlocked&) = delete;

 private:
  sigset_t old_;
};

// A temporary file made by createTrackedTemp: its descriptor (-1 on failure: `stopped`, or the
// errno in `error`) and its slot of gTempSlots (-1 when every slot was taken or the path does not
// fit).
struct TrackedTemp {
  int fd = -1;
  int slot = -1;
  int error = 0;
  bool stopped = false;  // refused: removeTempFilesNow ran
};

// Creates the temporary file named by the mkostemp `pattern` (its XXXXXX replaced in place) and
// records it in a slot of gTempSlots. Refused (`stopped`) once removeTempFilesNow ran.
TrackedTemp createTrackedTemp(std::vector<char>& pattern) {
  const SignalsBlocked blocked;
  TrackedTemp t;
  if (pattern.size() <= PATH_MAX) {  // the size counts the terminating NUL
    for (int i = 0; i < kMaxTrackedTempFiles && t.slot < 0; ++i) {
      int expected = kSlotFree;
      if (gTempSlots[i].state.compare_exchange_strong(expected, kSlotFilling)) t.slot = i;
    }
  }
  if (gTempFilesStopped.load()) {
    if (t.slot >= 0) gTempSlots[t.slot].state.store(kSlotFree);
    return {.stopped = true};
  }
  t.fd = ::mkostemp(pattern.data(), O_CLOEXEC);
  t.error = t.fd < 0 ? errno : 0;
  if (t.slot >= 0) {
    if (t.fd < 0) {
      gTempSlots[t.slot].state.store(kSlotFree);
      t.slot = -1;
    } else {
      std::memcpy(gTempSlots[t.slot].path, pattern.data(), pattern.size());
      gTempSlots[t.slot].state.store(kSlotHeld);
    }
  }
  return t;
}

// Gives `slot` back once its file is renamed or removed; -1 is no slot.
void untrackTempFile(int slot) {
  if (slot < 0) return;
  std::atomic<int>& state = gTempSlots[slot].state;
  for (;;) {
    int expected = kSlotHeld;
    if (state.compare_exchange_strong(expected, kSlotFree)) return;
    expected = kSlotRemoved;
    if (state.compare_exchange_strong(expected, kSlotFree)) return;
    // Removing: removeTempFilesNow is unlinking the path on another thread (on this thread it
    // would have finished before this code went on).
    std::this_thread::yield();
  }
}

// ---- Directories made for outputs ------------------------------------------------------------
//
// A second table of the same kind for removeCreatedDirectoriesNow: prepareOutputDirectory records
// each directory before it creates it (Free -> Filling -> Held), so that none exists unrecorded,
// and CreatedDirectories gives the slots back (Held or Removed -> Free) when it goes.
// removeCreatedDirectoriesNow takes each Held slot (Held -> Removing), removes its directory if
// empty and marks it Removed (or Held again). Recorded and given back by one thread at a time.
// The table grows by chunks of kDirChunkSlots when every slot is taken (a path of many new
// directories, or many commands' directories at once): a chunk is linked in (a release store)
// only once made, and never freed, so the handler, which walks the chain with acquire loads,
// never meets a chunk half made or gone.
constexpr int kDirChunkSlots = 16;
struct DirChunk {
  TempSlot slots[kDirChunkSlots];
  std::atomic<DirChunk*> next{nullptr};
};
static_assert(std::atomic<DirChunk*>::is_always_lock_free, "read by a signal handler");
DirChunk gDirChunks;

// A free slot of the table, taken (Free -> Filling); a new chunk when every slot is taken.
TempSlot& takeDirSlot() {
  for (DirChunk* chunk = &gDirChunks;; chunk = chunk->next.load(std::memory_order_acquire)) {
    for (TempSlot& slot : chunk->slots) {
      int expected = kSlotFree;
      if (slot.state.compare_exchange_strong(expected, kSlotFilling)) return slot;
    }
    if (!chunk->next.load(std::memory_order_acquire))
      chunk->next.store(new DirChunk, std::memory_order_release);
  }
}

// The slot that records `path` (Held, Removing or Removed), or null.
TempSlot* findDirSlot(const std::string& path) noexcept {
  for (DirChunk* chunk = &gDirChunks; chunk; chunk = chunk->next.load(std::memory_order_acquire))
    for (TempSlot& slot : chunk->slots) {
      const int state = slot.state.load();
      if (state != kSlotFree && state != kSlotFilling && path == slot.path) return &slot;
    }
  return nullptr;
}

void trackDirectories(const std::vector<fs::path>& dirs) {
  for (const fs::path& dir : dirs) {
    const std::string path = dir.string();
    if (path.size() >= PATH_MAX) continue;
    TempSlot& slot = takeDirSlot();
    std::memcpy(slot.path, path.c_str(), path.size() + 1);
    slot.state.store(kSlotHeld);
  }
}

void untrackDirectories(const std::vector<fs::path>& dirs) noexcept {
  for (const fs::path& dir : dirs) {
    TempSlot* slot = findDirSlot(dir.string());
    if (!slot) continue;
    // Held or Removed -> Free; Removing: removeCreatedDirectoriesNow is at it on another thread.
    int state = slot->state.load();
    while (!slot->state.compare_exchange_strong(state, kSlotFree) && state != kSlotFree) {
      if (state == kSlotRemoving) {
        std::this_thread::yield();
        state = kSlotHeld;
      }
    }
  }
}

// The temporary file of an atomic write: created next to its target, removed on destruction
// unless released after the rename. While it exists, a slot of gTempSlots holds its path (when
// one was free).
class TempFile {
 public:
  // `target` is the file to replace, `shown` the path named in errors (the one the user gave).
  TempFile(const fs::path& target, const fs::path& shown) : target_(target), shown_(shown) {
    const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
    // Keep the temporary name within NAME_MAX even for a long target name.
    std::string name = target.filename().string().substr(0, 200);
    std::string pattern = (dir / ("." + name + ".tmp-XXXXXX")).string();
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    const TrackedTemp created = createTrackedTemp(buffer);
    if (created.stopped)
      throwIo("write", shown_, "the process is stopping and its temporary files were removed");
    if (created.fd < 0) throwIo("write", shown_, errnoText(created.error));
    const int fd = created.fd;
    path_ = buffer.data();
    slot_ = created.slot;
    // mkstemp creates the file 0600; give the output the permissions a plain open would.
    ::fchmod(fd, 0666 & ~currentUmask());
    file_ = ::fdopen(fd, "wb");
    if (!file_) {
      const int err = errno;
      ::close(fd);
      ::unlink(path_.c_str());
      untrackTempFile(slot_);
      throwIo("write", shown_, errnoText(err));
    }
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (file_) std::fclose(file_);
    if (!path_.empty()) ::unlink(path_.c_str());
    untrackTempFile(slot_);
  }

  std::FILE* file() const { return file_; }

  // Flushes, syncs and closes the file, then renames it over the target.
  void commit() {
    int err = 0;
    if (std::ferror(file_)) err = EIO;  // an earlier write failed; its errno is gone
    if (!err && std::fflush(file_) != 0) err = errno;
    if (!err && ::fsync(::fileno(file_)) != 0) err = errno;
    const int closed = std::fclose(file_);
    file_ = nullptr;
    if (!err && closed != 0) err = errno;
    if (err) throwIo("write", shown_, errnoText(err));
    if (::rename(path_.c_str(), target_.c_str()) != 0) {
      const int renameErr = errno;
      throwIo("write", shown_, errnoText(renameErr));
    }
    path_.clear();
    untrackTempFile(slot_);
    slot_ = -1;
    // Make the rename itself durable; a failure here leaves a complete file, so it is ignored.
    const fs::path dir = target_.has_parent_path() ? target_.parent_path() : fs::path(".");
    const int dirFd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirFd >= 0) {
      ::fsync(dirFd);
      ::close(dirFd);
    }
  }

 private:
  fs::path target_;
  fs::path shown_;
  std::string path_;
  int slot_ = -1;  // in gTempSlots
  std::FILE* file_ = nullptr;
};

// ---- libpng ----------------------------------------------------------------------------------
//
// libpng reports errors by longjmp. Every function below that calls setjmp holds only trivially
// destructible locals and modifies none of them after setjmp, so the jump skips no destructor
// and reads no clobbered value; the png/info structures belong to RAII handles one frame up.

struct PngError {
  char message[256] = "unknown libpng error";
};

void onPngError(png_structp png, png_const_charp message) {
  if (auto* e = static_cast<PngError*>(png_get_error_ptr(png)))
    std::snprintf(e->message, sizeof e->message, "%s", message);
  png_longjmp(png, 1);
}

void onPngWarning(png_structp, png_const_charp) {}

class PngWriter {
 public:
  explicit PngWriter(PngError* error)
      : png_(png_create_write_struct(PNG_LIBPNG_VER_STRING, error, onPngError, onPngWarning)) {
    if (png_) info_ = png_create_info_struct(png_);
  }
  PngWriter(const PngWriter&) = delete;
  PngWriter& operator=(const PngWriter&) = delete;
  ~PngWriter() {
    if (png_) png_destroy_write_struct(&png_, info_ ? &info_ : nullptr);
  }
  bool ok() const { return png_ && info_; }
  png_structp png() const { return png_; }
  png_infop info() const { return info_; }

 private:
  png_structp png_ = nullptr;
  png_infop info_ = nullptr;
};

class PngReader {
 public:
  explicit PngReader(PngError* error)
      : png_(png_create_read_struct(PNG_LIBPNG_VER_STRING, error, onPngError, onPngWarning)) {
    if (png_) info_ = png_create_info_struct(png_);
  }
  PngReader(const PngReader&) = delete;
  PngReader& operator=(const PngReader&) = delete;
  ~PngReader() {
    if (png_) png_destroy_read_struct(&png_, info_ ? &info_ : nullptr, nullptr);
  }
  bool ok() const { return png_ && info_; }
  png_structp png() const { return png_; }
  png_infop info() const { return info_; }

 private:
  png_structp png_ = nullptr;
  png_infop info_ = nullptr;
};

struct PngSpec {
  png_uint_32 width = 0;
  png_uint_32 height = 0;
  int bitDepth = 8;
  int colorType = PNG_COLOR_TYPE_RGB;
  const png_color* palette = nullptr;
  int paletteSize = 0;
  png_bytepp rows = nullptr;
};

bool writePngRaw(png_structp png, png_infop info, std::FILE* file, const PngSpec* spec) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_init_io(png, file);
  png_set_IHDR(png, info, spec->width, spec->height, spec->bitDepth, spec->colorType,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  // Label maps, colour maps and masks are regions of few values: one filter (each row less the
  // row above) instead of libpng's per-row trial of all five, and for the one-channel maps
  // run-length matching instead of zlib's full search. On the 12-megapixel bee at K = 32 a label
  // map took 40 ms instead of 180 ms and came out 12 % smaller; a colour map (zlib level 3) took
  // 140 ms instead of 560 ms and came out 25 % larger (2026-12-02).
  png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_UP);
  if (spec->colorType == PNG_COLOR_TYPE_RGB)
    png_set_compression_level(png, 3);
  else
    png_set_compression_strategy(png, Z_RLE);
  if (spec->palette) png_set_PLTE(png, info, spec->palette, spec->paletteSize);
  png_write_info(png, info);
  png_write_image(png, spec->rows);
  png_write_end(png, info);
  return true;
}

struct PngHeader {
  png_uint_32 width = 0;
  png_uint_32 height = 0;
  int bitDepth = 0;
  int colorType = 0;
};

bool readPngHeaderRaw(png_structp png, png_infop info, std::FILE* file, PngHeader* header) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_init_io(png, file);
  png_set_sig_bytes(png, 8);
  png_read_info(png, info);
  int interlace = 0, compression = 0, filter = 0;
  png_get_IHDR(png, info, &header->width, &header->height, &header->bitDepth, &header->colorType,
               &interlace, &compression, &filter);
  return true;
}

bool readPngRowsRaw(png_structp png, png_infop info, png_bytepp rows, png_size_t rowBytes,
                    bool* rowBytesMatch) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_packing(png);  // palette depths 1, 2, 4 -> one byte per pixel
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  *rowBytesMatch = png_get_rowbytes(png, info) == rowBytes;
  if (!*rowBytesMatch) return true;
  png_read_image(png, rows);
  png_read_end(png, nullptr);
  return true;
}

// Encodes `pixels` (rows of rowBytes each, top row first) as a PNG and writes it atomically.
void writePng(const fs::path& path, PngSpec spec, std::vector<std::uint8_t>& pixels,
              std::size_t rowBytes) {
  std::vector<png_bytep> rows(spec.height);
  for (png_uint_32 y = 0; y < spec.height; ++y) rows[y] = pixels.data() + std::size_t(y) * rowBytes;
  spec.rows = rows.data();
  writeFileAtomic(path, [&](std::FILE* file) {
    PngError error;
    PngWriter writer(&error);
    if (!writer.ok()) throwIo("write", path, "libpng could not allocate its state");
    if (!writePngRaw(writer.png(), writer.info(), file, &spec))
      throwIo("write", path, std::string("libpng: ") + error.message);
  });
}

// ---- Validation ------------------------------------------------------------------------------

std::size_t checkedPixels(const char* what, int width, int height, std::size_t size) {
  if (width <= 0 || height <= 0)
    throw InvalidArgument(std::string(what) + ": image size " + std::to_string(width) + "x" +
                          std::to_string(height) + " must be at least 1x1");
  // PNG stores each dimension in 31 bits; int already keeps below that.
  const std::size_t n = std::size_t(width) * std::size_t(height);
  if (size != n)
    throw InvalidArgument(std::string(what) + ": " + std::to_string(size) + " values given for a " +
                          std::to_string(width) + "x" + std::to_string(height) + " image (" +
                          std::to_string(n) + " pixels)");
  return n;
}

void checkLabels(const char* what, const std::vector<std::int32_t>& labels, std::int64_t limit,
                 const char* limitName) {
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= limit)
      throw InvalidArgument(std::string(what) + ": label " + std::to_string(labels[i]) +
                            " at pixel " + std::to_string(i) + " is outside [0, " +
                            std::to_string(limit) + ") (" + limitName + ")");
  }
}

/// Largest label map readLabelPng accepts, in pixels (4 GiB of labels).
constexpr std::uint64_t kMaxReadPixels = std::uint64_t(1) << 30;

}  // namespace

// ---- Palettes ----------------------------------------------------------------------------------

std::string_view paletteName(PaletteKind p) {
  return p == PaletteKind::ColorBlindSafe ? "cb-safe" : "distinct";
}

PaletteKind parsePalette(std::string_view name) {
  if (name == "distinct") return PaletteKind::Distinct;
  if (name == "cb-safe") return PaletteKind::ColorBlindSafe;
  throw InvalidArgument("unknown palette '" + std::string(name) + "'; valid: distinct, cb-safe");
}

std::vector<Rgb8> makePalette(int k, PaletteKind kind) {
  if (k < 0 || k > kMaxPaletteSize)
    throw InvalidArgument("palette size " + std::to_string(k) + " is outside [0, " +
                          std::to_string(kMaxPaletteSize) + "]");
  std::vector<Rgb8> palette;
  palette.reserve(std::size_t(k));
  std::unordered_set<std::uint32_t> used;
  std::vector<OkLab> lab;  // of the first colours, for the spacing test
  auto add = [&](const Rgb8& c) {
    palette.push_back(c);
    used.insert(packRgb(c));
    if (palette.size() <= 512) lab.push_back(toOkLab(c));
  };
  if (kind == PaletteKind::Distinct) {
    for (const Rgb8& c : kKelly) add(c);
  } else {
    for (const Rgb8& c : kColorBlindSafe) add(c);
  }
  if (palette.size() > std::size_t(k)) palette.resize(std::size_t(k));

  // Generated colours: the next candidates of a low-discrepancy sequence that are not too close
  // (OKLab distance) to any of the first 512 colours; the spacing demand relaxes when no
  // candidate meets it, and an exact repeat is never accepted, so all colours differ. The
  // generation does not depend on k: a palette is a prefix of every longer one.
  std::uint64_t n = 0;
  while (palette.size() < std::size_t(k)) {
    double minSpacing = kind == PaletteKind::Distinct ? 0.08 : 0.06;
    for (int attempt = 0;; ++attempt, ++n) {
      if (attempt > 0 && attempt % 32 == 0) minSpacing *= 0.7;
      const Rgb8 c = generatedColor(n, kind);
      if (used.count(packRgb(c))) continue;
      if (palette.size() < 512) {
        const OkLab x = toOkLab(c);
        const bool spaced = std::all_of(
            lab.begin(), lab.end(), [&](const OkLab& y) { return okDistance(x, y) >= minSpacing; });
        if (!spaced) continue;
      }
      add(c);
      ++n;
      break;
    }
  }
  return palette;
}

// ---- Atomic writes ---------------------------------------------------------------------------

void writeFileAtomic(const fs::path& path, std::string_view bytes) {
  writeFileAtomic(path, [&](std::FILE* file) {
    errno = 0;
    if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), file) != bytes.size()) {
      const int err = errno ? errno : EIO;
      throwIo("write", path, errnoText(err));
    }
  });
}

namespace {

// Throws IoError naming `shown` when the file name of `target` is longer than its directory's
// file system takes (pathconf's _PC_NAME_MAX; NAME_MAX when the directory cannot be asked).
void checkNameLength(const fs::path& target, const fs::path& shown) {
  const std::string name = target.filename().string();
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  errno = 0;
  long limit = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  if (limit < 0 && errno != 0) limit = NAME_MAX;
  if (limit >= 0 && name.size() > std::size_t(limit))
    throwIo("write", shown,
            "its file name is " + std::to_string(name.size()) +
                " bytes long, more than the file system takes (" + std::to_string(limit) +
                " bytes, NAME_MAX)");
}

// The file that writing `path` replaces: through a symbolic link, the file it names (rename
// would replace the link itself), also when that file does not exist yet (a dangling link: the
// file is created where the link points, as a shell's redirection would). Throws IoError when
// that is a directory or not a regular file.
fs::path writeTarget(const fs::path& path) {
  if (path.empty()) throw InvalidArgument("output path is empty");
  std::error_code ec;
  fs::path target = path;
  // Link by link, at most 40 (the kernel's limit, ELOOP beyond it): weakly_canonical resolves
  // the links to files that exist, and leaves a dangling link as it is.
  for (int hops = 0; hops < 40 && fs::is_symlink(fs::symlink_status(target, ec)); ++hops) {
    const fs::path link = fs::read_symlink(target, ec);
    if (ec) break;
    target = link.is_absolute() ? link : target.parent_path() / link;
  }
  if (target != path) target = fs::weakly_canonical(target, ec);
  if (ec) target = path;
  checkNameLength(target, path);
  // Renaming over a device, FIFO or socket would replace the node, not write to it.
  const fs::file_status st = fs::status(target, ec);
  // A path that cannot be looked up (too long, a directory that cannot be searched, ...) cannot
  // be written either; only its absence is expected.
  if (ec && st.type() != fs::file_type::not_found) throwIo("write", path, ec.message());
  if (fs::is_directory(st)) throwIo("write", path, "it is an existing directory");
  if (fs::exists(st) && !fs::is_regular_file(st))
    throwIo("write", path, "it exists and is not a regular file");
  return target;
}

// Creates and removes a file in `dir`: the one test of whether a file can be made there that
// access() cannot get wrong (it says yes to root everywhere except on read-only mounts).
// Returns 0 or the errno of the failure.
int probeDirectory(const fs::path& dir) {
  std::string pattern = (dir / ".kmseg-probe-XXXXXX").string();
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  // Tracked as the writes' temporary files are, so that removeTempFilesNow takes it too (and the
  // directory it is in can then go).
  const TrackedTemp t = createTrackedTemp(buffer);
  if (t.stopped) return ECANCELED;  // the process is ending
  if (t.fd < 0) return t.error;
  ::close(t.fd);
  ::unlink(buffer.data());
  untrackTempFile(t.slot);
  return 0;
}

}  // namespace

void checkOutputFile(const fs::path& path) {
  const fs::path target = writeTarget(path);
  // A link's file is replaced by a temporary file made next to the file it points to, in a
  // directory the output directory's check has not seen.
  if (target != path) {
    const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
    if (const int err = probeDirectory(dir))
      throwIo("write", path,
              "it is a link to '" + target.string() + "', and no file can be created in '" +
                  dir.string() + "' (" + errnoText(err) + ")");
  }
}

void removeTempFilesNow() noexcept {
  gTempFilesStopped.store(true);
  for (TempSlot& slot : gTempSlots) {
    int expected = kSlotHeld;
    while (!slot.state.compare_exchange_strong(expected, kSlotRemoving)) {
      // Filling: a writer on another thread (signals are blocked on its own while it fills) is
      // creating its file; it is one mkostemp from Held or Free.
      if (expected != kSlotFilling) break;
      expected = kSlotHeld;
    }
    if (expected != kSlotHeld) continue;
    ::unlink(slot.path);
    slot.state.store(kSlotRemoved);
  }
}

void writeFileAtomic(const fs::path& path, const std::function<void(std::FILE*)>& write) {
  const fs::path target = writeTarget(path);
  TempFile temp(target, path);
  write(temp.file());
  temp.commit();
}

void removeCreatedDirectoriesNow() noexcept {
  // Passes until one removes nothing: a directory that holds another recorded one goes in the
  // pass after it. Within a chunk the later slots first (a directory is recorded after its
  // parent, so most go in the first pass).
  for (bool removed = true; removed;) {
    removed = false;
    for (DirChunk* chunk = &gDirChunks; chunk;
         chunk = chunk->next.load(std::memory_order_acquire)) {
      for (int i = kDirChunkSlots - 1; i >= 0; --i) {
        TempSlot& slot = chunk->slots[i];
        int expected = kSlotHeld;
        if (!slot.state.compare_exchange_strong(expected, kSlotRemoving)) continue;
        const bool gone = ::rmdir(slot.path) == 0;
        slot.state.store(gone ? kSlotRemoved : kSlotHeld);
        removed = removed || gone;
      }
    }
  }
}

void abandonOutputsAndRaise(int signal) noexcept {
  removeTempFilesNow();
  removeCreatedDirectoriesNow();
  raiseWithDefaultAction(signal);
}

void raiseWithDefaultAction(int signal) noexcept {
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  ::sigaction(signal, &action, nullptr);
  ::raise(signal);
}

namespace {
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
}  // namespace

StopSignalHandlers::StopSignalHandlers(void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  for (const int s : kStopSignals) sigaddset(&action.sa_mask, s);
  action.sa_flags = SA_RESTART;
  for (int i = 0; i < 3; ++i) ::sigaction(kStopSignals[i], &action, &old_[i]);
}

StopSignalHandlers::~StopSignalHandlers() {
  for (int i = 0; i < 3; ++i) ::sigaction(kStopSignals[i], &old_[i], nullptr);
}

CreatedDirectories::~CreatedDirectories() {
  if (!kept_) removeEmptyDirectories(dirs_);
  untrackDirectories(dirs_);
}

std::vector<fs::path> prepareOutputDirectory(const fs::path& dir) {
  const fs::path d = dir.empty() ? fs::path(".") : dir;
  std::error_code ec;
  const fs::file_status st = fs::status(d, ec);
  if (fs::exists(st) && !fs::is_directory(st))
    throwIo("use output directory", d, "it exists and is not a directory");
  std::vector<fs::path> created;
  // On failure the directories go again, and their records with them; on success the records
  // pass to the caller's CreatedDirectories.
  const auto undo = [&] {
    removeEmptyDirectories(created);
    untrackDirectories(created);
  };
  if (!fs::exists(st)) {
    // The missing directories, outermost first, as create_directories makes them: one per
    // prefix of the path as given, so that "a/../b" records a as well as b (each in its
    // normal form; "." and ".." steps and a trailing "/" name no new directory).
    fs::path prefix;
    for (const fs::path& part : d) {
      prefix /= part;
      if (part.empty() || part == "." || part == ".." || part == part.root_path()) continue;
      if (!fs::exists(fs::symlink_status(prefix, ec))) {
        const fs::path normal = prefix.lexically_normal();
        if (std::find(created.begin(), created.end(), normal) == created.end())
          created.push_back(normal);
      }
    }
    trackDirectories(created);
    fs::create_directories(d, ec);
    if (ec) {
      undo();
      throwIo("create output directory", d, ec.message());
    }
  }
  const int err = ::access(d.c_str(), W_OK | X_OK) != 0 ? errno : probeDirectory(d);
  if (err != 0) {
    undo();
    throwIo("write to output directory", d, errnoText(err));
  }
  return created;
}

void removeEmptyDirectories(const std::vector<fs::path>& dirs) noexcept {
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    std::error_code ec;
    if (fs::is_directory(fs::symlink_status(*it, ec)) && fs::is_empty(*it, ec) && !ec)
      fs::remove(*it, ec);
  }
}

// ---- PNG label maps ----------------------------------------------------------------------------

void writeLabelPng(const fs::path& path, const std::vector<std::int32_t>& labels, int width,
                   int height, int k, const std::vector<Rgb8>& palette) {
  const std::string what = "label map '" + path.string() + "'";
  const std::size_t n = checkedPixels(what.c_str(), width, height, labels.size());
  if (k < 1 || k > 65536)
    throw InvalidArgument(what + ": K = " + std::to_string(k) +
                          " is outside [1, 65536], the range of a 16-bit label map");
  checkLabels(what.c_str(), labels, k, "K");

  PngSpec spec;
  spec.width = png_uint_32(width);
  spec.height = png_uint_32(height);
  std::vector<std::uint8_t> pixels;
  std::vector<png_color> plte;
  std::size_t rowBytes = 0;
  if (k <= 256) {
    if (palette.size() < std::size_t(k))
      throw InvalidArgument(what + ": the palette has " + std::to_string(palette.size()) +
                            " colours, fewer than K = " + std::to_string(k));
    plte.resize(std::size_t(k));
    for (int i = 0; i < k; ++i) plte[i] = {palette[i].r, palette[i].g, palette[i].b};
    spec.colorType = PNG_COLOR_TYPE_PALETTE;
    spec.bitDepth = 8;
    spec.palette = plte.data();
    spec.paletteSize = k;
    rowBytes = std::size_t(width);
    pixels.resize(n);
    for (std::size_t i = 0; i < n; ++i) pixels[i] = std::uint8_t(labels[i]);
  } else {
    // 16-bit samples are big-endian in PNG.
    spec.colorType = PNG_COLOR_TYPE_GRAY;
    spec.bitDepth = 16;
    rowBytes = std::size_t(width) * 2;
    pixels.resize(n * 2);
    for (std::size_t i = 0; i < n; ++i) {
      pixels[2 * i] = std::uint8_t(std::uint32_t(labels[i]) >> 8);
      pixels[2 * i + 1] = std::uint8_t(labels[i]);
    }
  }
  writePng(path, spec, pixels, rowBytes);
}

void writeColorPng(const fs::path& path, const std::vector<std::int32_t>& labels, int width,
                   int height, const std::vector<Rgb8>& palette) {
  const std::string what = "colour map '" + path.string() + "'";
  const std::size_t n = checkedPixels(what.c_str(), width, height, labels.size());
  if (palette.empty()) throw InvalidArgument(what + ": the palette is empty");
  checkLabels(what.c_str(), labels, std::int64_t(palette.size()), "the palette size");
  PngSpec spec;
  spec.width = png_uint_32(width);
  spec.height = png_uint_32(height);
  spec.colorType = PNG_COLOR_TYPE_RGB;
  spec.bitDepth = 8;
  std::vector<std::uint8_t> pixels(n * 3);
  for (std::size_t i = 0; i < n; ++i) {
    const Rgb8& c = palette[std::size_t(labels[i])];
    pixels[3 * i] = c.r;
    pixels[3 * i + 1] = c.g;
    pixels[3 * i + 2] = c.b;
  }
  writePng(path, spec, pixels, std::size_t(width) * 3);
}

void writeMaskPng(const fs::path& path, const std::vector<std::uint8_t>& mask, int width,
                  int height) {
  const std::string what = "mask '" + path.string() + "'";
  checkedPixels(what.c_str(), width, height, mask.size());
  PngSpec spec;
  spec.width = png_uint_32(width);
  spec.height = png_uint_32(height);
  spec.colorType = PNG_COLOR_TYPE_GRAY;
  spec.bitDepth = 1;
  // 1-bit rows: eight pixels per byte, leftmost pixel in the most significant bit.
  const std::size_t rowBytes = (std::size_t(width) + 7) / 8;
  std::vector<std::uint8_t> pixels(rowBytes * std::size_t(height), 0);
  for (std::size_t y = 0; y < std::size_t(height); ++y) {
    std::uint8_t* row = pixels.data() + y * rowBytes;
    const std::uint8_t* in = mask.data() + y * std::size_t(width);
    for (std::size_t x = 0; x < std::size_t(width); ++x)
      if (in[x]) row[x / 8] |= std::uint8_t(0x80u >> (x % 8));
  }
  writePng(path, spec, pixels, rowBytes);
}

LabelImage readLabelPng(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throwIo("read label map", path, "it is a directory");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  if (!file) {
    const int err = errno;
    throwIo("read label map", path, errnoText(err));
  }
  png_byte signature[8] = {};
  const std::size_t got = std::fread(signature, 1, sizeof signature, file.get());
  if (got != sizeof signature || png_sig_cmp(signature, 0, sizeof signature) != 0) {
    if (std::ferror(file.get())) {
      const int err = errno;
      throwIo("read label map", path, errnoText(err));
    }
    throwIo("read label map", path, "not a PNG file");
  }

  PngError error;
  PngReader reader(&error);
  if (!reader.ok()) throwIo("read label map", path, "libpng could not allocate its state");
  PngHeader header;
  if (!readPngHeaderRaw(reader.png(), reader.info(), file.get(), &header))
    throwIo("read label map", path, std::string("libpng: ") + error.message);

  const bool isPalette = header.colorType == PNG_COLOR_TYPE_PALETTE;
  const bool isGrey16 = header.colorType == PNG_COLOR_TYPE_GRAY && header.bitDepth == 16;
  if (!isPalette && !isGrey16)
    throwIo("read label map", path,
            "unsupported PNG type (colour type " + std::to_string(header.colorType) +
                ", bit depth " + std::to_string(header.bitDepth) +
                "); a label map is an indexed PNG or a 16-bit greyscale PNG");
  const std::uint64_t pixelCount = std::uint64_t(header.width) * header.height;
  if (pixelCount > kMaxReadPixels)
    throwIo("read label map", path,
            std::to_string(header.width) + "x" + std::to_string(header.height) +
                " pixels exceed the limit of " + std::to_string(kMaxReadPixels) + " pixels");

  LabelImage image;
  image.width = int(header.width);
  image.height = int(header.height);
  if (isPalette) {
    png_colorp plte = nullptr;
    int count = 0;
    if (png_get_PLTE(reader.png(), reader.info(), &plte, &count) & PNG_INFO_PLTE) {
      image.palette.reserve(std::size_t(count));
      for (int i = 0; i < count; ++i)
        image.palette.push_back({plte[i].red, plte[i].green, plte[i].blue});
    }
  }

  const std::size_t rowBytes = std::size_t(header.width) * (isGrey16 ? 2 : 1);
  std::vector<std::uint8_t> pixels(rowBytes * header.height);
  std::vector<png_bytep> rows(header.height);
  for (png_uint_32 y = 0; y < header.height; ++y) rows[y] = pixels.data() + y * rowBytes;
  bool rowBytesMatch = false;
  if (!readPngRowsRaw(reader.png(), reader.info(), rows.data(), rowBytes, &rowBytesMatch))
    throwIo("read label map", path, std::string("libpng: ") + error.message);
  if (!rowBytesMatch) throwIo("read label map", path, "unexpected row layout");

  image.labels.resize(std::size_t(pixelCount));
  if (isGrey16) {
    for (std::size_t i = 0; i < image.labels.size(); ++i)
      image.labels[i] = std::int32_t((pixels[2 * i] << 8) | pixels[2 * i + 1]);
  } else {
    for (std::size_t i = 0; i < image.labels.size(); ++i) image.labels[i] = pixels[i];
  }
  return image;
}

}  // namespace kmseg
