// SPDX-License-Identifier: MIT
#include <gtest/gtest.h>
#include <png.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kmseg/error.h"
#include "kmseg/export.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using kmseg::Rgb8;

namespace {

/// A PNG decoded by libpng's simplified API, independently of kmseg's reader.
struct RawPng {
  png_uint_32 width = 0;
  png_uint_32 height = 0;
  int colorType = -1;
  int bitDepth = 0;
  std::vector<png_color> plte;
  std::vector<std::uint8_t> pixels;  ///< after png_set_expand_gray_1_2_4_to_8, no other transform
};

/// Reads IHDR, PLTE and the raw rows of `path`. Throws std::runtime_error.
RawPng readRawPng(const fs::path& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path.string());
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  RawPng out;
  std::vector<png_bytep> rows;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    std::fclose(f);
    throw std::runtime_error("libpng failed on " + path.string());
  }
  png_init_io(png, f);
  png_read_info(png, info);
  out.width = png_get_image_width(png, info);
  out.height = png_get_image_height(png, info);
  out.colorType = png_get_color_type(png, info);
  out.bitDepth = png_get_bit_depth(png, info);
  png_colorp plte = nullptr;
  int count = 0;
  if (png_get_PLTE(png, info, &plte, &count) & PNG_INFO_PLTE) out.plte.assign(plte, plte + count);
  if (out.colorType == PNG_COLOR_TYPE_GRAY && out.bitDepth < 8) png_set_expand_gray_1_2_4_to_8(png);
  png_read_update_info(png, info);
  const std::size_t rowBytes = png_get_rowbytes(png, info);
  out.pixels.resize(rowBytes * out.height);
  rows.resize(out.height);
  for (png_uint_32 y = 0; y < out.height; ++y) rows[y] = out.pixels.data() + y * rowBytes;
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  std::fclose(f);
  return out;
}

/// Names of the entries of `dir`, sorted.
std::set<std::string> entries(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// Labels 0, 1, ..., k-1, 0, 1, ... over a width x height image.
std::vector<std::int32_t> cyclicLabels(int width, int height, int k) {
  std::vector<std::int32_t> labels(std::size_t(width) * height);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = std::int32_t(i % std::size_t(k));
  return labels;
}

void expectRoundTrip(const std::string& name, int width, int height, int k) {
  const fs::path dir = kmseg::test::freshTempDir(name);
  const fs::path file = dir / "labels.png";
  const auto labels = cyclicLabels(width, height, k);
  const auto palette = kmseg::makePalette(k);
  kmseg::writeLabelPng(file, labels, width, height, k, palette);
  const kmseg::LabelImage back = kmseg::readLabelPng(file);
  EXPECT_EQ(back.width, width);
  EXPECT_EQ(back.height, height);
  EXPECT_EQ(back.labels, labels);
  const RawPng raw = readRawPng(file);
  if (k <= 256) {
    EXPECT_EQ(raw.colorType, PNG_COLOR_TYPE_PALETTE);
    EXPECT_EQ(raw.bitDepth, 8);
    EXPECT_EQ(back.palette, palette);
    ASSERT_EQ(raw.plte.size(), std::size_t(k));
    for (int i = 0; i < k; ++i) {
      EXPECT_EQ(raw.plte[i].red, palette[i].r) << "PLTE entry " << i;
      EXPECT_EQ(raw.plte[i].green, palette[i].g) << "PLTE entry " << i;
      EXPECT_EQ(raw.plte[i].blue, palette[i].b) << "PLTE entry " << i;
    }
    // The stored sample is the cluster id itself.
    for (std::size_t i = 0; i < labels.size(); ++i) ASSERT_EQ(raw.pixels[i], labels[i]);
  } else {
    EXPECT_EQ(raw.colorType, PNG_COLOR_TYPE_GRAY);
    EXPECT_EQ(raw.bitDepth, 16);
    EXPECT_TRUE(back.palette.empty());
    for (std::size_t i = 0; i < labels.size(); ++i)
      ASSERT_EQ((raw.pixels[2 * i] << 8) | raw.pixels[2 * i + 1], labels[i]);
  }
  EXPECT_EQ(entries(dir), std::set<std::string>{"labels.png"});
}

}  // namespace

// ---- Palettes ------------------------------------------------------------------------------

TEST(PaletteTest, NamesRoundTrip) {
  for (auto kind : {kmseg::PaletteKind::Distinct, kmseg::PaletteKind::ColorBlindSafe})
    EXPECT_EQ(kmseg::parsePalette(kmseg::paletteName(kind)), kind);
  EXPECT_EQ(kmseg::paletteName(kmseg::PaletteKind::ColorBlindSafe), "cb-safe");
  EXPECT_THROW(kmseg::parsePalette("rainbow"), kmseg::InvalidArgument);
}

TEST(PaletteTest, AllColoursDifferUpTo256) {
  for (auto kind : {kmseg::PaletteKind::Distinct, kmseg::PaletteKind::ColorBlindSafe}) {
    for (int k : {1, 2, 7, 8, 19, 20, 21, 25, 26, 64, 255, 256}) {
      const auto palette = kmseg::makePalette(k, kind);
      ASSERT_EQ(palette.size(), std::size_t(k));
      std::set<std::uint32_t> seen;
      for (const Rgb8& c : palette) seen.insert((c.r << 16) | (c.g << 8) | c.b);
      EXPECT_EQ(seen.size(), std::size_t(k)) << kmseg::paletteName(kind) << " k=" << k;
    }
  }
}

TEST(PaletteTest, LargePalettesStayDistinct) {
  for (auto kind : {kmseg::PaletteKind::Distinct, kmseg::PaletteKind::ColorBlindSafe}) {
    const auto palette = kmseg::makePalette(65536, kind);
    std::set<std::uint32_t> seen;
    for (const Rgb8& c : palette) seen.insert((c.r << 16) | (c.g << 8) | c.b);
    EXPECT_EQ(seen.size(), palette.size()) << kmseg::paletteName(kind);
  }
}

TEST(PaletteTest, DeterministicAndPrefixOfLonger) {
  for (auto kind : {kmseg::PaletteKind::Distinct, kmseg::PaletteKind::ColorBlindSafe}) {
    const auto a = kmseg::makePalette(300, kind);
    EXPECT_EQ(kmseg::makePalette(300, kind), a);
    for (int k : {0, 5, 20, 100}) {
      const auto b = kmseg::makePalette(k, kind);
      EXPECT_TRUE(std::equal(b.begin(), b.end(), a.begin())) << "k=" << k;
    }
  }
}

TEST(PaletteTest, ColorBlindSafeStartsWithOkabeIto) {
  const std::vector<Rgb8> okabeIto = {{0xE6, 0x9F, 0x00}, {0x56, 0xB4, 0xE9}, {0x00, 0x9E, 0x73},
                                      {0xF0, 0xE4, 0x42}, {0x00, 0x72, 0xB2}, {0xD5, 0x5E, 0x00},
                                      {0xCC, 0x79, 0xA7}, {0x00, 0x00, 0x00}};
  EXPECT_EQ(kmseg::makePalette(8, kmseg::PaletteKind::ColorBlindSafe), okabeIto);
}

TEST(PaletteTest, SizeOutOfRangeThrows) {
  EXPECT_THROW(kmseg::makePalette(-1), kmseg::InvalidArgument);
  EXPECT_THROW(kmseg::makePalette(65537), kmseg::InvalidArgument);
  EXPECT_TRUE(kmseg::makePalette(0).empty());
}

// ---- Label, colour and mask PNGs -----------------------------------------------------------

TEST(ExportTest, LabelPngRoundTripK3) {
  expectRoundTrip("export-k3", 7, 5, 3);
}

TEST(ExportTest, LabelPngRoundTripK1SinglePixel) {
  expectRoundTrip("export-k1", 1, 1, 1);
}

TEST(ExportTest, LabelPngRoundTripK256) {
  expectRoundTrip("export-k256", 33, 17, 256);
}

TEST(ExportTest, LabelPngRoundTripK300Is16Bit) {
  expectRoundTrip("export-k300", 40, 20, 300);
}

TEST(ExportTest, LabelPngRoundTripK65536) {
  const fs::path dir = kmseg::test::freshTempDir("export-k65536");
  std::vector<std::int32_t> labels = {0, 65535, 256, 255, 40000, 1};
  kmseg::writeLabelPng(dir / "l.png", labels, 3, 2, 65536, {});
  EXPECT_EQ(kmseg::readLabelPng(dir / "l.png").labels, labels);
}

TEST(ExportTest, LabelPngRejectsBadInput) {
  const fs::path dir = kmseg::test::freshTempDir("export-bad-input");
  const fs::path file = dir / "l.png";
  const auto palette = kmseg::makePalette(4);
  const auto labels = cyclicLabels(4, 3, 4);
  using kmseg::InvalidArgument;
  EXPECT_THROW(kmseg::writeLabelPng(file, labels, 4, 4, 4, palette), InvalidArgument);
  EXPECT_THROW(kmseg::writeLabelPng(file, labels, 0, 3, 4, palette), InvalidArgument);
  EXPECT_THROW(kmseg::writeLabelPng(file, {}, 0, 0, 4, palette), InvalidArgument);
  EXPECT_THROW(kmseg::writeLabelPng(file, labels, 4, 3, 3, palette), InvalidArgument);
  EXPECT_THROW(kmseg::writeLabelPng(file, labels, 4, 3, 5, palette), InvalidArgument);
  EXPECT_THROW(kmseg::writeLabelPng(file, labels, 4, 3, 65537, palette), InvalidArgument);
  EXPECT_THROW(kmseg::writeLabelPng(file, labels, 4, 3, 0, palette), InvalidArgument);
  auto negative = labels;
  negative[5] = -1;
  EXPECT_THROW(kmseg::writeLabelPng(file, negative, 4, 3, 4, palette), InvalidArgument);
  EXPECT_THROW(kmseg::writeColorPng(file, negative, 4, 3, palette), InvalidArgument);
  EXPECT_THROW(kmseg::writeColorPng(file, labels, 4, 3, kmseg::makePalette(3)), InvalidArgument);
  EXPECT_THROW(kmseg::writeMaskPng(file, std::vector<std::uint8_t>(11), 4, 3), InvalidArgument);
  try {
    kmseg::writeLabelPng(file, labels, 4, 3, 3, palette);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("outside [0, 3)"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(entries(dir).empty());
}

TEST(ExportTest, ColorPngPixelsArePaletteColours) {
  const fs::path dir = kmseg::test::freshTempDir("export-colour");
  const int width = 9, height = 4, k = 5;
  const auto labels = cyclicLabels(width, height, k);
  const auto palette = kmseg::makePalette(k, kmseg::PaletteKind::ColorBlindSafe);
  kmseg::writeColorPng(dir / "c.png", labels, width, height, palette);
  const RawPng raw = readRawPng(dir / "c.png");
  EXPECT_EQ(raw.colorType, PNG_COLOR_TYPE_RGB);
  EXPECT_EQ(raw.bitDepth, 8);
  ASSERT_EQ(raw.width, png_uint_32(width));
  ASSERT_EQ(raw.height, png_uint_32(height));
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const Rgb8 got{raw.pixels[3 * i], raw.pixels[3 * i + 1], raw.pixels[3 * i + 2]};
    ASSERT_EQ(got, palette[labels[i]]) << "pixel " << i;
  }
  // A colour image is not a label map.
  EXPECT_THROW(kmseg::readLabelPng(dir / "c.png"), kmseg::IoError);
}

TEST(ExportTest, MaskPngIsOneBitWhiteWhereSet) {
  const fs::path dir = kmseg::test::freshTempDir("export-mask");
  const int width = 11, height = 3;  // rows not a multiple of 8 pixels
  std::vector<std::uint8_t> mask(std::size_t(width) * height);
  for (std::size_t i = 0; i < mask.size(); ++i)
    mask[i] = (i % 3 == 0) ? std::uint8_t(i % 7 + 1) : 0;
  kmseg::writeMaskPng(dir / "m.png", mask, width, height);
  const RawPng raw = readRawPng(dir / "m.png");
  EXPECT_EQ(raw.colorType, PNG_COLOR_TYPE_GRAY);
  EXPECT_EQ(raw.bitDepth, 1);
  ASSERT_EQ(raw.pixels.size(), mask.size());
  for (std::size_t i = 0; i < mask.size(); ++i)
    ASSERT_EQ(raw.pixels[i], mask[i] ? 255 : 0) << "pixel " << i;
  EXPECT_THROW(kmseg::readLabelPng(dir / "m.png"), kmseg::IoError);
}

TEST(ExportTest, ReadLabelPngRejectsBadFiles) {
  const fs::path dir = kmseg::test::freshTempDir("export-read-bad");
  EXPECT_THROW(kmseg::readLabelPng(dir / "missing.png"), kmseg::IoError);
  EXPECT_THROW(kmseg::readLabelPng(dir), kmseg::IoError);
  kmseg::writeFileAtomic(dir / "text.png", "this is not a PNG file");
  EXPECT_THROW(kmseg::readLabelPng(dir / "text.png"), kmseg::IoError);
  kmseg::writeFileAtomic(dir / "empty.png", "");
  EXPECT_THROW(kmseg::readLabelPng(dir / "empty.png"), kmseg::IoError);

  const auto labels = cyclicLabels(64, 64, 200);
  kmseg::writeLabelPng(dir / "full.png", labels, 64, 64, 200, kmseg::makePalette(200));
  const std::string bytes = slurp(dir / "full.png");
  kmseg::writeFileAtomic(dir / "truncated.png",
                         std::string_view(bytes).substr(0, bytes.size() / 2));
  try {
    kmseg::readLabelPng(dir / "truncated.png");
    FAIL() << "expected IoError";
  } catch (const kmseg::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated.png"), std::string::npos) << e.what();
  }
}

TEST(ExportTest, LabelPngIntoExistingDirectoryThrows) {
  const fs::path dir = kmseg::test::freshTempDir("export-into-dir");
  fs::create_directory(dir / "out.png");
  EXPECT_THROW(kmseg::writeLabelPng(dir / "out.png", {0, 1}, 2, 1, 2, kmseg::makePalette(2)),
               kmseg::IoError);
  EXPECT_TRUE(fs::is_directory(dir / "out.png"));
  EXPECT_EQ(entries(dir), std::set<std::string>{"out.png"});
}

TEST(ExportTest, LabelPngUnderRegularFileThrows) {
  const fs::path dir = kmseg::test::freshTempDir("export-under-file");
  kmseg::writeFileAtomic(dir / "file.txt", "x");
  try {
    kmseg::writeLabelPng(dir / "file.txt" / "l.png", {0}, 1, 1, 1, kmseg::makePalette(1));
    FAIL() << "expected IoError";
  } catch (const kmseg::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("l.png"), std::string::npos) << e.what();
  }
  EXPECT_EQ(entries(dir), std::set<std::string>{"file.txt"});
}

// ---- Atomic writes -------------------------------------------------------------------------

TEST(ExportTest, AtomicWriteCreatesAndReplaces) {
  const fs::path dir = kmseg::test::freshTempDir("export-atomic");
  const mode_t old = ::umask(022);
  kmseg::writeFileAtomic(dir / "a.txt", "first");
  ::umask(old);
  EXPECT_EQ(slurp(dir / "a.txt"), "first");
  EXPECT_EQ(fs::status(dir / "a.txt").permissions(),
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                fs::perms::others_read);
  kmseg::writeFileAtomic(dir / "a.txt", std::string("second\0binary", 13));
  EXPECT_EQ(slurp(dir / "a.txt"), std::string("second\0binary", 13));
  EXPECT_EQ(entries(dir), std::set<std::string>{"a.txt"});
}

TEST(ExportTest, AtomicWriteFailureInWriterKeepsOldFile) {
  const fs::path dir = kmseg::test::freshTempDir("export-atomic-throw");
  kmseg::writeFileAtomic(dir / "a.txt", "old");
  EXPECT_THROW(kmseg::writeFileAtomic(dir / "a.txt",
                                      [](std::FILE* f) {
                                        std::fputs("partial", f);
                                        throw kmseg::IoError("writer failed");
                                      }),
               kmseg::IoError);
  EXPECT_EQ(slurp(dir / "a.txt"), "old");
  EXPECT_EQ(entries(dir), std::set<std::string>{"a.txt"});
}

// Runs `body` in a child process and expects it to return "" there (the child prints what it
// returns otherwise, which the failure shows). removeTempFilesNow refuses every later write of the
// process that calls it, as the signal handler that calls it then ends the process, so the tests
// of it run in a child: a death test, "threadsafe" so that the child is a fresh process.
void expectInChild(const std::function<std::string()>& body) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const std::string failure = body();
        if (!failure.empty()) std::fprintf(stderr, "%s\n", failure.c_str());
        std::_Exit(failure.empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// The entries of `dir` that are temporary files of writes, joined by spaces.
std::string temporaryEntries(const fs::path& dir) {
  std::string found;
  for (const std::string& e : entries(dir))
    if (e.find(".tmp-") != std::string::npos) found += e + " ";
  return found;
}

// What a signal handler does before it ends the process: every write in progress (here two, one
// inside the other) loses its temporary file, the writes fail rather than create their targets,
// and a write that starts afterwards is refused before it creates a file. The ordinary writes
// first are more than there are slots: each gives its slot back.
TEST(ExportTest, RemoveTempFilesNowRemovesTheWritesInProgressAndRefusesLaterOnes) {
  const fs::path dir = kmseg::test::freshTempDir("export-remove-temp");
  kmseg::writeFileAtomic(dir / "kept.txt", "done");
  for (int round = 0; round < kmseg::kMaxTrackedTempFiles + 2; ++round)
    kmseg::writeFileAtomic(dir / "round.txt", std::to_string(round));
  ASSERT_EQ(entries(dir), (std::set<std::string>{"kept.txt", "round.txt"}));
  expectInChild([&]() -> std::string {
    std::set<std::string> during, after;
    try {
      kmseg::writeFileAtomic(dir / "a.txt", [&](std::FILE* outer) {
        std::fputs("partial", outer);
        kmseg::writeFileAtomic(dir / "b.txt", [&](std::FILE*) {
          during = entries(dir);
          kmseg::removeTempFilesNow();
          after = entries(dir);
        });
      });
      return "the writes whose files were removed did not fail";
    } catch (const kmseg::IoError&) {
    }
    if (during.size() != 4)
      return "during the writes: " + std::to_string(during.size()) + " entries";
    if (during.begin()->rfind(".a.txt.tmp-", 0) != 0 ||
        std::next(during.begin())->rfind(".b.txt.tmp-", 0) != 0)
      return "not the two temporary files: " + *during.begin();
    const std::set<std::string> kept{"kept.txt", "round.txt"};
    if (after != kept || entries(dir) != kept) return "the temporary files stayed";
    try {
      kmseg::writeFileAtomic(dir / "c.txt", "c");
      return "a write after removeTempFilesNow was not refused";
    } catch (const kmseg::IoError& e) {
      const std::string what = e.what();
      if (what.find("c.txt") == std::string::npos || what.find("stopping") == std::string::npos)
        return "unclear refusal: " + what;
    }
    if (entries(dir) != kept) return "the refused write left a file";
    return "";
  });
}

// Writers on other threads, starting one write after another, while removeTempFilesNow runs: once
// it returns, no temporary file is left, and none appears afterwards, whichever step of creating
// its file a writer was at (the file exists before its path is recorded). Several children, each
// removing after a different delay.
TEST(ExportTest, RemoveTempFilesNowLeavesNoFileOfAWriteStartingOnAnotherThread) {
  for (int child = 0; child < 6; ++child) {
    const fs::path dir = kmseg::test::freshTempDir("export-remove-race");
    expectInChild([&]() -> std::string {
      std::atomic<bool> stop{false};
      std::atomic<int> written{0};
      std::vector<std::thread> writers;
      for (int t = 0; t < 4; ++t) {
        writers.emplace_back([&, t] {
          while (!stop.load()) {
            try {
              kmseg::writeFileAtomic(dir / ("w" + std::to_string(t) + ".txt"), "x");
              ++written;
            } catch (const kmseg::IoError&) {
            }
          }
        });
      }
      while (written.load() < 8 * (child + 1)) std::this_thread::yield();
      kmseg::removeTempFilesNow();
      const std::string left = temporaryEntries(dir);
      ::usleep(2000);
      const std::string later = temporaryEntries(dir);
      stop.store(true);
      for (std::thread& w : writers) w.join();
      if (!left.empty()) return "left when removeTempFilesNow returned: " + left;
      if (!later.empty()) return "made after removeTempFilesNow returned: " + later;
      if (const std::string end = temporaryEntries(dir); !end.empty()) return "at the end: " + end;
      return "";
    });
  }
}

// A name longer than the file system takes is found by the check, before any file is written,
// and the message names the limit; so is a path longer than PATH_MAX.
TEST(ExportTest, CheckRefusesANameTooLongForTheFileSystem) {
  const fs::path dir = kmseg::test::freshTempDir("export-long-name");
  const long limit = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  ASSERT_GT(limit, 0);
  const std::string name = std::string(std::size_t(limit) - 3, 'n') + ".png";
  try {
    kmseg::checkOutputFile(dir / name);
    ADD_FAILURE() << "no error for a name of " << name.size() << " bytes";
  } catch (const kmseg::IoError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(name), std::string::npos) << what;
    EXPECT_NE(
        what.find(std::to_string(name.size()) + " bytes long, more than the file system takes (" +
                  std::to_string(limit) + " bytes, NAME_MAX)"),
        std::string::npos)
        << what;
  }
  EXPECT_THROW(kmseg::writeFileAtomic(dir / name, "data"), kmseg::IoError);
  // Exactly the limit is fine.
  kmseg::checkOutputFile(dir / name.substr(1));
  fs::path deep = dir;
  while (deep.string().size() <= PATH_MAX) deep /= std::string(200, 'd');
  try {
    kmseg::checkOutputFile(deep / "a.png");
    ADD_FAILURE() << "no error for a path of " << (deep / "a.png").string().size() << " bytes";
  } catch (const kmseg::IoError& e) {
    EXPECT_NE(std::string(e.what()).find(std::strerror(ENAMETOOLONG)), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(entries(dir).empty());
}

TEST(ExportTest, AtomicWriteToDirectoryTargetFails) {
  const fs::path dir = kmseg::test::freshTempDir("export-atomic-dir");
  fs::create_directories(dir / "target" / "inside");
  try {
    kmseg::writeFileAtomic(dir / "target", "data");
    FAIL() << "expected IoError";
  } catch (const kmseg::IoError& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "target").string()), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_directory(dir / "target" / "inside"));
  EXPECT_EQ(entries(dir), std::set<std::string>{"target"});
}

TEST(ExportTest, AtomicWriteRefusesSpecialFiles) {
  // Renaming over a FIFO (or a device such as /dev/null) would replace the node itself.
  const fs::path dir = kmseg::test::freshTempDir("export-atomic-fifo");
  ASSERT_EQ(::mkfifo((dir / "pipe").c_str(), 0600), 0);
  EXPECT_THROW(kmseg::writeFileAtomic(dir / "pipe", "data"), kmseg::IoError);
  EXPECT_TRUE(fs::is_fifo(dir / "pipe"));
  EXPECT_EQ(entries(dir), std::set<std::string>{"pipe"});
}

TEST(ExportTest, AtomicWriteThroughSymlinkKeepsLink) {
  const fs::path dir = kmseg::test::freshTempDir("export-atomic-link");
  fs::create_directory(dir / "real");
  kmseg::writeFileAtomic(dir / "real" / "a.txt", "old");
  fs::create_symlink("real/a.txt", dir / "link.txt");
  kmseg::writeFileAtomic(dir / "link.txt", "new");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir / "link.txt")));
  EXPECT_EQ(slurp(dir / "real" / "a.txt"), "new");
  EXPECT_EQ(entries(dir / "real"), std::set<std::string>{"a.txt"});
}

TEST(ExportTest, CheckSeesALinkToAFileWhereNoFileCanBeCreated) {
  // A link to a file on procfs (or in a read-only directory): the file could be written in
  // place, but not replaced through a temporary file beside it, so the check of a set of outputs
  // must fail before the first file of the set is written, and name both paths.
  const fs::path dir = kmseg::test::freshTempDir("export-check-link");
  fs::create_symlink("/proc/version", dir / "proc.png");
  try {
    kmseg::checkOutputFile(dir / "proc.png");
    ADD_FAILURE() << "no error for a link to /proc/version";
  } catch (const kmseg::IoError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find((dir / "proc.png").string() + "': it is a link to '/proc/version'"),
              std::string::npos)
        << what;
  }
  EXPECT_THROW(kmseg::writeFileAtomic(dir / "proc.png", "data"), kmseg::IoError);
  // A link into a writable directory passes and leaves no probe behind.
  fs::create_directory(dir / "real");
  fs::create_symlink("real/a.png", dir / "ok.png");
  kmseg::checkOutputFile(dir / "ok.png");
  EXPECT_TRUE(entries(dir / "real").empty());
  EXPECT_EQ(entries(dir), (std::set<std::string>{"ok.png", "proc.png", "real"}));
}

// A dangling link: the file is created where it points (as a shell's `>` would), and the link
// stays; where no file can be created there, the check fails first, naming both paths.
TEST(ExportTest, AtomicWriteThroughADanglingLinkCreatesTheFileItNames) {
  const fs::path dir = kmseg::test::freshTempDir("export-dangling-link");
  fs::create_directory(dir / "real");
  fs::create_symlink("real/new.txt", dir / "link.txt");
  kmseg::checkOutputFile(dir / "link.txt");
  kmseg::writeFileAtomic(dir / "link.txt", "made");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir / "link.txt")));
  EXPECT_EQ(slurp(dir / "real" / "new.txt"), "made");
  fs::create_symlink("/nonexistent-kmseg-dir/sub/x.csv", dir / "nowhere.csv");
  try {
    kmseg::checkOutputFile(dir / "nowhere.csv");
    ADD_FAILURE() << "no error for a link into a missing directory";
  } catch (const kmseg::IoError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("it is a link to '/nonexistent-kmseg-dir/sub/x.csv'"), std::string::npos)
        << what;
    EXPECT_NE(what.find("no file can be created in '/nonexistent-kmseg-dir/sub'"),
              std::string::npos)
        << what;
  }
  EXPECT_THROW(kmseg::writeFileAtomic(dir / "nowhere.csv", "data"), kmseg::IoError);
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir / "nowhere.csv")));
}

TEST(ExportTest, AtomicWriteUnderFileOrMissingDirFails) {
  const fs::path dir = kmseg::test::freshTempDir("export-atomic-nodir");
  kmseg::writeFileAtomic(dir / "file.txt", "x");
  try {
    kmseg::writeFileAtomic(dir / "file.txt" / "out.json", "data");
    FAIL() << "expected IoError";
  } catch (const kmseg::IoError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("out.json"), std::string::npos) << what;
    EXPECT_NE(what.find("Not a directory"), std::string::npos) << what;
  }
  EXPECT_THROW(kmseg::writeFileAtomic(dir / "missing" / "out.json", "data"), kmseg::IoError);
  EXPECT_THROW(kmseg::writeFileAtomic("", "data"), kmseg::InvalidArgument);
  EXPECT_EQ(entries(dir), std::set<std::string>{"file.txt"});
  EXPECT_EQ(slurp(dir / "file.txt"), "x");
}

TEST(ExportTest, AtomicWriteOnProcFails) {
  // Root may write anywhere on a writable mount, but procfs refuses to create files.
  EXPECT_THROW(kmseg::writeFileAtomic("/proc/kmseg-test.txt", "data"), kmseg::IoError);
  EXPECT_FALSE(fs::exists("/proc/kmseg-test.txt"));
}

// ---- Output directories --------------------------------------------------------------------

TEST(ExportTest, PrepareOutputDirectoryCreatesNested) {
  const fs::path dir = kmseg::test::freshTempDir("export-prepare");
  const std::vector<fs::path> created = kmseg::prepareOutputDirectory(dir / "a" / "b" / "c");
  EXPECT_TRUE(fs::is_directory(dir / "a" / "b" / "c"));
  EXPECT_TRUE(entries(dir / "a" / "b" / "c").empty());  // the probe file is gone
  EXPECT_EQ(created, (std::vector<fs::path>{dir / "a", dir / "a" / "b", dir / "a" / "b" / "c"}));
  // Existing is fine, and creates nothing; "d/" names d.
  EXPECT_TRUE(kmseg::prepareOutputDirectory(dir / "a" / "b" / "c").empty());
  EXPECT_EQ(kmseg::prepareOutputDirectory(dir / "a" / "d/"),
            std::vector<fs::path>{dir / "a" / "d"});

  // Removing them again takes the empty ones only, innermost first: a file keeps its directory
  // and the ones above it.
  std::ofstream(dir / "a" / "d" / "kept.txt") << "x";
  kmseg::removeEmptyDirectories(created);
  EXPECT_FALSE(fs::exists(dir / "a" / "b"));
  EXPECT_TRUE(fs::exists(dir / "a" / "d" / "kept.txt"));
  EXPECT_EQ(entries(dir / "a"), std::set<std::string>{"d"});
  {
    kmseg::CreatedDirectories undo(kmseg::prepareOutputDirectory(dir / "e" / "f"));
    EXPECT_TRUE(fs::is_directory(dir / "e" / "f"));
  }
  EXPECT_FALSE(fs::exists(dir / "e"));
  {
    kmseg::CreatedDirectories kept(kmseg::prepareOutputDirectory(dir / "g"));
    kept.keep();
  }
  EXPECT_TRUE(fs::is_directory(dir / "g"));
  // A path through "..": every directory create_directories makes is recorded, the one the
  // ".." leaves too, and removed again.
  {
    const std::vector<fs::path> made = kmseg::prepareOutputDirectory(dir / "h" / ".." / "i" / "j");
    EXPECT_EQ(made, (std::vector<fs::path>{dir / "h", dir / "i", dir / "i" / "j"}));
    EXPECT_TRUE(fs::is_directory(dir / "h"));
    kmseg::removeEmptyDirectories(made);
  }
  EXPECT_FALSE(fs::exists(dir / "h"));
  EXPECT_FALSE(fs::exists(dir / "i"));
}

// What a signal handler removes besides the temporary files: the directories made for outputs
// that are still empty, innermost first, while a CreatedDirectories holds them; a directory with
// a file stays, and so do the directories of a CreatedDirectories that has gone. In a child, so
// that no directory recorded by another test is taken.
TEST(ExportTest, RemoveCreatedDirectoriesNowTakesTheEmptyOnesStillHeld) {
  expectInChild([]() -> std::string {
    const fs::path dir = kmseg::test::freshTempDir("export-remove-dirs");
    {
      kmseg::CreatedDirectories kept(kmseg::prepareOutputDirectory(dir / "kept"));
      kept.keep();
    }
    kmseg::CreatedDirectories held(kmseg::prepareOutputDirectory(dir / "a" / "b" / "c"));
    kmseg::CreatedDirectories full(kmseg::prepareOutputDirectory(dir / "d" / "e"));
    kmseg::writeFileAtomic(dir / "d" / "e" / "x.txt", "x");
    if (!fs::is_directory(dir / "a" / "b" / "c")) return "a/b/c was not made";
    kmseg::removeCreatedDirectoriesNow();
    if (fs::exists(dir / "a")) return "a (or below it) was left";
    if (!fs::exists(dir / "d" / "e" / "x.txt")) return "the file was removed";
    if (!fs::is_directory(dir / "kept")) return "the kept directory was removed";
    if (entries(dir) != std::set<std::string>{"d", "kept"}) return "other entries were left";
    return "";
  });
}

// The records have no fixed limit: a path of 40 new directories (more than a chunk of the
// table holds) is removed whole, innermost first; records given back are taken again, and a kept
// path of 40 stays while a held one beside it goes.
TEST(ExportTest, RemoveCreatedDirectoriesNowTakesAnyNumberOfDirectories) {
  expectInChild([]() -> std::string {
    const fs::path dir = kmseg::test::freshTempDir("export-remove-many-dirs");
    auto deep = [&](const std::string& top) {
      fs::path p = dir / top;
      for (int i = 1; i < 40; ++i) p /= "d" + std::to_string(i);
      return p;
    };
    {
      std::vector<fs::path> made = kmseg::prepareOutputDirectory(deep("kept"));
      if (made.size() != 40) return "the kept path made " + std::to_string(made.size());
      kmseg::CreatedDirectories kept(std::move(made));
      kept.keep();
    }
    std::vector<fs::path> made = kmseg::prepareOutputDirectory(deep("held"));
    if (made.size() != 40) return "the held path made " + std::to_string(made.size());
    kmseg::CreatedDirectories held(std::move(made));
    if (!fs::is_directory(deep("held"))) return "the held path was not made";
    kmseg::removeCreatedDirectoriesNow();
    if (fs::exists(dir / "held")) return "held (or below it) was left";
    if (!fs::is_directory(deep("kept"))) return "the kept path was removed";
    return "";
  });
}

TEST(ExportTest, PrepareOutputDirectoryRejectsFileAndUnwritable) {
  const fs::path dir = kmseg::test::freshTempDir("export-prepare-bad");
  kmseg::writeFileAtomic(dir / "file.txt", "x");
  try {
    kmseg::prepareOutputDirectory(dir / "file.txt");
    FAIL() << "expected IoError";
  } catch (const kmseg::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("not a directory"), std::string::npos) << e.what();
  }
  // Beneath a regular file nothing can be created, not even by root.
  EXPECT_THROW(kmseg::prepareOutputDirectory(dir / "file.txt" / "sub"), kmseg::IoError);
  // procfs: mkdir fails for a new name, and an existing directory takes no new files.
  EXPECT_THROW(kmseg::prepareOutputDirectory("/proc/kmseg-test-dir"), kmseg::IoError);
  EXPECT_THROW(kmseg::prepareOutputDirectory("/proc/self"), kmseg::IoError);
  EXPECT_EQ(entries(dir), std::set<std::string>{"file.txt"});
}
