// SPDX-License-Identifier: MIT
#include "kmseg/image_io.h"

#include <libexif/exif-data.h>
#include <stb_image.h>

#include <algorithm>
#include <cassert>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <opencv2/core.hpp>

#include "kmseg/error.h"

namespace kmseg {

namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<unsigned char>;

// stb_image takes the input length and returns the decoded size as int.
constexpr std::uint64_t kDecoderByteLimit = INT_MAX;

std::string quoted(const fs::path& path) {
  return "'" + path.string() + "'";
}

std::string stbReason() {
  const char* reason = stbi_failure_reason();
  // stb reports an unknown PNG chunk of type 0 (a cut-off chunk header) with an empty string.
  if (!reason || !*reason) return "corrupt data";
  // It copies an unknown PNG chunk's four type bytes into the message: bytes that are not
  // printable ASCII are written as \xHH, so that no raw byte of the file reaches the terminal.
  std::string text;
  for (const char* c = reason; *c; ++c) {
    const unsigned char b = static_cast<unsigned char>(*c);
    if (b >= 0x20 && b < 0x7f) {
      text += char(b);
    } else {
      static constexpr char kHex[] = "0123456789ABCDEF";
      text += "\\x";
      text += kHex[b >> 4];
      text += kHex[b & 15];
    }
  }
  return text;
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// Reads the whole file, so that every failure is ours to report (and not a decoder's guess).
Bytes readFile(const fs::path& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (status.type() == fs::file_type::not_found)
    throw IoError("image file " + quoted(path) + " does not exist");
  if (ec) throw IoError("cannot access image file " + quoted(path) + ": " + ec.message());
  if (fs::is_directory(status)) throw IoError(quoted(path) + " is a directory, not an image file");
  if (!fs::is_regular_file(status))
    throw IoError(quoted(path) + " is not a regular file, so it cannot be read as an image");

  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) throw IoError("cannot open image file " + quoted(path) + ": " + std::strerror(errno));
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec) throw IoError("cannot read the size of image file " + quoted(path) + ": " + ec.message());
  if (size == 0) throw IoError("image file " + quoted(path) + " is empty");
  if (size > kDecoderByteLimit)
    throw IoError("image file " + quoted(path) + " is " + std::to_string(size) +
                  " bytes, more than the decoder's limit of " + std::to_string(kDecoderByteLimit) +
                  " bytes");

  Bytes bytes(size);
  if (std::fread(bytes.data(), 1, bytes.size(), file.get()) != bytes.size())
    throw IoError("cannot read image file " + quoted(path) + ": " +
                  (std::ferror(file.get()) ? std::strerror(errno) : "the file shrank while read"));
  return bytes;
}

bool startsWith(const Bytes& d, std::string_view magic) {
  return d.size() >= magic.size() && std::memcmp(d.data(), magic.data(), magic.size()) == 0;
}

// Names the format from its signature, in the order stb_image tries them; TGA has no signature
// and is stb's last guess.
std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string formatName(const Bytes& d) {
  if (startsWith(d, "\xFF\xD8")) return "jpeg";
  if (startsWith(d, "\x89PNG\r\n\x1A\n")) return "png";
  if (startsWith(d, "GIF8")) return "gif";
  if (startsWith(d, "BM")) return "bmp";
  if (startsWith(d, "8BPS")) return "psd";
  if (startsWith(d, "\x53\x80\xF6\x34")) return "pic";
  if (startsWith(d, "P5") || startsWith(d, "P6")) return "pnm";
  if (startsWith(d, "#?RADIANCE") || startsWith(d, "#?RGBE")) return "hdr";
  return "tga";
}

enum class Structure { Complete, Truncated, Unknown };

// Walks a JPEG's marker segments and entropy-coded data up to the end-of-image marker. Only
// "the data ended before EOI" is a verdict; anything malformed is left to the decoder.
Structure jpegStructure(const Bytes& d) {
  const std::size_t n = d.size();
  if (n < 2 || d[0] != 0xFF || d[1] != 0xD8) return Structure::Unknown;
  std::size_t pos = 2;
  for (;;) {
    if (pos >= n) return Structure::Truncated;
    if (d[pos] != 0xFF) return Structure::Unknown;
    while (pos < n && d[pos] == 0xFF) ++pos;  // fill bytes
    if (pos >= n) return Structure::Truncated;
    const unsigned marker = d[pos++];
    if (marker == 0xD9) return Structure::Complete;
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) continue;  // no length field
    if (marker == 0x00) return Structure::Unknown;
    if (pos + 2 > n) return Structure::Truncated;
    const std::size_t length = std::size_t(d[pos]) << 8 | d[pos + 1];
    if (length < 2) return Structure::Unknown;
    if (pos + length > n) return Structure::Truncated;
    pos += length;
    if (marker != 0xDA) continue;
    // Entropy-coded data after start-of-scan: 0xFF is stuffed as FF 00, restart markers
    // (FF D0..D7) belong to the scan; any other FF xx is the next marker.
    for (;;) {
      const void* ff = std::memchr(d.data() + pos, 0xFF, n - pos);
      if (!ff) return Structure::Truncated;
      pos = static_cast<const unsigned char*>(ff) - d.data();
      if (pos + 1 >= n) return Structure::Truncated;
      const unsigned next = d[pos + 1];
      if (next == 0x00 || (next >= 0xD0 && next <= 0xD7)) {
        pos += 2;
      } else if (next == 0xFF) {
        pos += 1;
      } else {
        break;
      }
    }
  }
}

// A fault of a JPEG's Huffman tables that the decoder does not catch, or empty. stb_image (the
// Debian 12 version) builds a table from its 16 code counts without checking that they total at
// most 256, and writes past the table's arrays when they do not. Every DHT segment the decoder
// may meet is checked: the walk follows its reading (a DHT or DQT segment is read table by table
// while any of its declared bytes remain, so a malformed last table reads on past it; every other
// segment is skipped by its length; then any bytes up to the next 0xFF, and in entropy-coded
// data every FF xx but FF 00 and the restart markers is a marker). Where the decoder would stop
// with an error, the walk goes on, so it checks at least the tables the decoder reads. Bytes past
// the end read as 0, as the decoder reads them.
std::string jpegHuffmanFault(const Bytes& d) {
  const std::size_t n = d.size();
  const auto at = [&](std::size_t i) -> unsigned { return i < n ? d[i] : 0u; };
  std::size_t pos = 2;  // after SOI
  for (;;) {
    // The next marker: FF (fill bytes FF) then its code.
    const void* ff = pos < n ? std::memchr(d.data() + pos, 0xFF, n - pos) : nullptr;
    if (!ff) return {};
    pos = std::size_t(static_cast<const unsigned char*>(ff) - d.data()) + 1;
    while (pos < n && d[pos] == 0xFF) ++pos;
    if (pos >= n) return {};
    const unsigned marker = d[pos++];
    if (marker == 0xD9) return {};  // EOI: the decoder stops
    if (marker == 0x00 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) continue;
    const std::size_t start = pos - 2;
    const std::size_t end = pos + (at(pos) << 8 | at(pos + 1));
    if (end < pos + 2) return {};  // a length under 2: the decoder refuses the segment
    if (marker != 0xC4 && marker != 0xDB) {
      pos = end;
      continue;
    }
    std::size_t table = pos + 2;
    while (table < end) {
      const unsigned q = at(table);
      if (q >> 4 > 1 || (q & 15) > 3) return {};  // the decoder refuses the table
      if (marker == 0xDB) {
        table += 1 + 64 * ((q >> 4) + 1);  // 8- or 16-bit quantisation values
        continue;
      }
      std::size_t codes = 0;
      for (std::size_t i = 1; i <= 16; ++i) codes += at(table + i);
      if (codes > 256)
        return "a Huffman table (DHT segment at byte " + std::to_string(start) + ") declares " +
               std::to_string(codes) + " codes, more than the 256 a table holds";
      table += 17 + codes;
    }
    pos = table;
  }
}

// One marker segment of a JPEG before its first scan.
struct JpegSegment {
  unsigned marker = 0;
  std::size_t start = 0;                   ///< offset of its 0xFF
  const unsigned char* payload = nullptr;  ///< after its length field
  std::size_t size = 0;                    ///< payload bytes its length field declares
  std::size_t available = 0;               ///< of those, the bytes the file holds
};

// Calls `visit` for each marker segment of the JPEG `d` after its SOI, following their lengths,
// until `visit` returns true. It stops at the first scan (SOS), the end of the image (EOI), and
// anything it cannot follow (no 0xFF where a marker should start, a cut length field, a length
// under 2); markers without a length (RSTn, TEM) are passed over.
template <class Visit>
void forEachJpegSegment(const Bytes& d, Visit visit) {
  const std::size_t n = d.size();
  std::size_t pos = 2;  // after SOI
  while (pos < n && d[pos] == 0xFF) {
    while (pos < n && d[pos] == 0xFF) ++pos;  // fill bytes
    if (pos >= n) return;
    const unsigned marker = d[pos];
    if (marker == 0xDA || marker == 0xD9 || marker == 0x00) return;
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {
      ++pos;  // no length field
      continue;
    }
    if (pos + 3 > n) return;
    const std::size_t length = std::size_t(d[pos + 1]) << 8 | d[pos + 2];
    if (length < 2) return;
    const std::size_t begin = pos + 3;
    const JpegSegment segment{marker, pos - 1, d.data() + begin, length - 2,
                              std::min(length - 2, n - begin)};
    if (visit(segment)) return;
    pos += 1 + length;
  }
}

// What in the frame header `s` (SOFn) the decoder refuses, in words, or empty.
std::string frameFault(const JpegSegment& s) {
  const unsigned marker = s.marker;
  const std::string where = " (frame header SOF" + std::to_string(marker - 0xC0) + " at byte " +
                            std::to_string(s.start) + ")";
  if (marker > 0xC2) {
    const bool arithmetic = marker >= 0xC9;
    const bool hierarchical = (marker & 7) >= 5;
    const bool lossless = (marker & 3) == 3;
    const std::string coding = std::string(hierarchical ? "hierarchical " : "") +
                               (lossless            ? "lossless"
                                : (marker & 3) == 2 ? "progressive"
                                                    : "sequential") +
                               (arithmetic ? " arithmetic-coded" : " Huffman-coded");
    return "its frame is " + coding + where +
           ", which the decoder does not read: it reads baseline and progressive "
           "Huffman-coded JPEG (SOF0, SOF1, SOF2)";
  }
  if (s.size < 6 || s.available < 6) return {};  // the decoder's to report
  const unsigned precision = s.payload[0];
  const unsigned height = unsigned(s.payload[1]) << 8 | s.payload[2];
  const unsigned width = unsigned(s.payload[3]) << 8 | s.payload[4];
  const unsigned components = s.payload[5];
  if (precision != 8)
    return "its frame has " + std::to_string(precision) + "-bit samples" + where +
           ", which the decoder does not read: it reads 8-bit JPEG only";
  if (height == 0)
    return "its frame header declares height 0" + where +
           ": the height follows in a DNL marker, which the decoder does not read";
  if (width == 0)
    return "its frame header declares width 0" + where + ", which JPEG does not allow";
  if (components != 1 && components != 3 && components != 4)
    return "its frame header declares " + std::to_string(components) + " components" + where +
           ", where the decoder reads 1, 3 or 4";
  return {};
}

// What in a JPEG's first frame header (SOFn) the decoder refuses, in words, or empty: the
// coding processes other than baseline and progressive Huffman (SOF0 to SOF2), samples of other
// than 8 bits, a height of 0 (legal: a DNL marker after the first scan gives it, which the
// decoder does not read), a width of 0 (corrupt) and component counts other than 1, 3 or 4.
// stb_image's reasons for these are lost when its info call goes on to the other readers
// ("unknown image type"). Nothing is found where no frame header comes before the first scan
// (forEachJpegSegment): the decoder's to report.
std::string jpegFrameFault(const Bytes& d) {
  std::string fault;
  forEachJpegSegment(d, [&](const JpegSegment& s) {
    const bool frame = s.marker >= 0xC0 && s.marker <= 0xCF && s.marker != 0xC4 &&
                       s.marker != 0xC8 && s.marker != 0xCC;
    if (frame) fault = frameFault(s);
    return frame;
  });
  return fault;
}

// Walks a PNG's chunks up to a complete IEND chunk (length, type, data and CRC present).
Structure pngStructure(const Bytes& d) {
  const std::uint64_t n = d.size();
  if (!startsWith(d, "\x89PNG\r\n\x1A\n")) return Structure::Unknown;
  std::uint64_t pos = 8;
  for (;;) {
    if (pos + 8 > n) return Structure::Truncated;
    const std::uint64_t length = std::uint64_t(d[pos]) << 24 | std::uint64_t(d[pos + 1]) << 16 |
                                 std::uint64_t(d[pos + 2]) << 8 | d[pos + 3];
    if (length > 0x7FFFFFFF) return Structure::Unknown;  // the PNG limit on a chunk
    if (pos + 12 + length > n) return Structure::Truncated;
    if (std::memcmp(d.data() + pos + 4, "IEND", 4) == 0) return Structure::Complete;
    pos += 12 + length;
  }
}

std::uint32_t le16(const Bytes& d, std::size_t at) {
  return std::uint32_t(d[at]) | std::uint32_t(d[at + 1]) << 8;
}

std::uint32_t le32(const Bytes& d, std::size_t at) {
  return le16(d, at) | le16(d, at + 2) << 16;
}

std::uint32_t be16(const Bytes& d, std::size_t at) {
  return std::uint32_t(d[at]) << 8 | d[at + 1];
}

std::uint32_t be32(const Bytes& d, std::size_t at) {
  return std::uint32_t(d[at]) << 24 | std::uint32_t(d[at + 1]) << 16 |
         std::uint32_t(d[at + 2]) << 8 | d[at + 3];
}

std::string pixelSize(const ImageInfo& info) {
  return std::to_string(info.width) + " x " + std::to_string(info.height) + " pixels";
}

std::string needs(std::uint64_t bytes) {
  return ", which need " + std::to_string(bytes) + " bytes";
}

// An uncompressed BMP: rows of ceil(width * bpp / 8) bytes padded to 4, from the offset in the
// file header. stb_image refuses RLE and the other compressions, so nothing else gets here. The
// last row's padding is not required, as the decoder does not read it.
std::string bmpTruncation(const Bytes& d, const ImageInfo& info) {
  if (d.size() < 18) return "its BMP header ends after " + std::to_string(d.size()) + " bytes";
  const std::uint64_t headerEnd = 14 + std::uint64_t(le32(d, 14));
  if (d.size() < headerEnd) return "its BMP header needs " + std::to_string(headerEnd) + " bytes";
  const unsigned bpp = le16(d, headerEnd == 26 ? 24 : 28);
  if (bpp != 1 && bpp != 4 && bpp != 8 && bpp != 16 && bpp != 24 && bpp != 32) return {};
  const std::uint64_t rowBytes = (std::uint64_t(info.width) * bpp + 7) / 8;
  const std::uint64_t stride = (rowBytes + 3) / 4 * 4;
  const std::uint64_t start = std::max<std::uint64_t>(le32(d, 10), headerEnd);
  const std::uint64_t need =
      info.height > 0 ? start + stride * std::uint64_t(info.height - 1) + rowBytes : start;
  if (d.size() >= need) return {};
  return "its BMP header declares " + pixelSize(info) + " at " + std::to_string(bpp) +
         " bits from byte " + std::to_string(start) + needs(need);
}

// A TGA's data starts after the 18-byte header, the image ID and (for colour-mapped images) the
// colour map; stb_image also skips the colour map's "first entry index" bytes before the map,
// and so does this. Uncompressed data is width * height pixels of ceil(bits / 8) bytes; run-length
// data is walked packet by packet until it covers every pixel.
std::string tgaTruncation(const Bytes& d, const ImageInfo& info) {
  const std::uint64_t n = d.size();
  if (n < 18) return "its TGA header needs 18 bytes";
  const bool indexed = d[1] != 0;
  const bool rle = d[2] >= 8;
  const unsigned bits = d[16];
  const std::uint64_t pixelBytes = indexed ? (bits == 8 ? 1 : 2) : (bits + 7) / 8;
  if (pixelBytes == 0) return {};  // stb_image refuses such a header
  const std::uint64_t mapBytes = indexed ? le16(d, 3) + le16(d, 5) * ((d[7] + 7) / 8) : 0;
  const std::uint64_t start = 18 + d[0] + mapBytes;
  const std::uint64_t total = std::uint64_t(info.width) * std::uint64_t(info.height);
  if (!rle) {
    const std::uint64_t need = start + total * pixelBytes;
    if (n >= need) return {};
    return "its TGA header declares " + pixelSize(info) + " at " + std::to_string(bits) +
           " bits from byte " + std::to_string(start) + needs(need);
  }
  std::uint64_t pos = start;
  std::uint64_t done = 0;
  while (done < total) {
    if (pos >= n) break;
    const unsigned packet = d[pos++];
    const std::uint64_t count = std::min<std::uint64_t>((packet & 0x7F) + 1, total - done);
    const std::uint64_t bytes = (packet & 0x80 ? 1 : count) * pixelBytes;
    if (pos + bytes > n) {
      if (!(packet & 0x80)) done += (n - pos) / pixelBytes;
      break;
    }
    pos += bytes;
    done += count;
  }
  if (done >= total) return {};
  return "its TGA run-length data ends after " + std::to_string(done) + " of " + pixelSize(info);
}

// Binary PGM (P5) and PPM (P6): the header is parsed as stb_image parses it (whitespace and
// comments between the fields, one byte after the maximum value), then come width * height *
// channels samples of 1 byte, or 2 (big-endian) when the maximum value is over 255. stb_image
// does not read the text formats P1-P3.
struct PnmLayout {
  bool complete = false;  ///< the header's last byte is in the file and ends the maximum value
  std::size_t dataOffset = 0;
  std::uint64_t fields[3] = {0, 0, 0};  ///< width, height, maximum value (at most 2^30)
  int channels = 1;
};

PnmLayout pnmLayout(const Bytes& d) {
  const std::size_t n = d.size();
  PnmLayout layout;
  layout.channels = d.size() >= 2 && d[1] == '6' ? 3 : 1;
  std::size_t pos = 2;
  bool pastEnd = false;
  const auto next = [&]() -> char {
    if (pos < n) return char(d[pos++]);
    pastEnd = true;
    return 0;
  };
  const auto isSpace = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
  };
  const auto isDigit = [](char c) { return c >= '0' && c <= '9'; };
  char c = next();
  const auto skipSpace = [&]() {
    for (;;) {
      while (pos < n && isSpace(c)) c = next();
      if (pos >= n || c != '#') break;
      while (pos < n && c != '\n' && c != '\r') c = next();
    }
  };
  for (std::uint64_t& value : layout.fields) {
    skipSpace();
    while (pos < n && isDigit(c)) {
      value = std::min<std::uint64_t>(value * 10 + std::uint64_t(c - '0'), 1u << 30);
      c = next();
    }
  }
  layout.complete = !pastEnd && isSpace(c);
  layout.dataOffset = pos;
  return layout;
}

std::string pnmTruncation(const Bytes& d, const ImageInfo& info) {
  const PnmLayout layout = pnmLayout(d);
  const std::string name = layout.channels == 3 ? "PPM" : "PGM";
  if (!layout.complete) return "its " + name + " header is incomplete";
  const std::uint64_t channels = std::uint64_t(layout.channels);
  const std::uint64_t sampleBytes = layout.fields[2] > 255 ? 2 : 1;
  const std::uint64_t need = layout.dataOffset + std::uint64_t(info.width) *
                                                     std::uint64_t(info.height) * channels *
                                                     sampleBytes;
  if (d.size() >= need) return {};
  return "its " + name + " header declares " + pixelSize(info) + " of " +
         (channels == 3 ? "3 samples" : "1 sample") + " at " + std::to_string(8 * sampleBytes) +
         " bits" + needs(need);
}

// A GIF's blocks up to the end of its first image's data (the block of length 0 after the LZW
// data), which is all the decoder reads. LZW has no useful lower bound on its length, so the
// sub-block lengths are the only sign of a cut.
// The GIF's colour table size from a flags byte (logical screen or image descriptor).
std::uint64_t gifColourTable(unsigned flags) {
  return flags & 0x80 ? 3 * (2u << (flags & 7)) : 0;
}

// Skips GIF data sub-blocks from `pos` up to their terminator; false when the data ends first.
bool gifSkipSubBlocks(const Bytes& d, std::uint64_t& pos) {
  for (;;) {
    if (pos >= d.size()) return false;
    const unsigned length = d[pos++];
    if (length == 0) return true;
    pos += length;
  }
}

// Walks a GIF's blocks to its first image descriptor. `pos` is then just after the descriptor's
// ',' tag.
enum class GifWalk { Image, Ended, Other };
GifWalk gifFirstImage(const Bytes& d, std::uint64_t& pos) {
  const std::uint64_t n = d.size();
  if (n < 13) return GifWalk::Ended;
  pos = 13 + gifColourTable(d[10]);
  for (;;) {
    if (pos >= n) return GifWalk::Ended;
    const unsigned tag = d[pos++];
    if (tag == 0x2C) return GifWalk::Image;
    if (tag != 0x21) return GifWalk::Other;  // a trailer or an unknown block
    ++pos;                                   // an extension: its label, then sub-blocks
    if (!gifSkipSubBlocks(d, pos)) return GifWalk::Ended;
  }
}

std::string gifTruncation(const Bytes& d) {
  std::uint64_t pos = 0;
  switch (gifFirstImage(d, pos)) {
    case GifWalk::Ended:
      return "the GIF data ends before its first image";
    case GifWalk::Other:
      return {};  // the decoder's to report
    case GifWalk::Image:
      break;
  }
  const std::string inside = "the GIF data ends inside its first image";
  // Image descriptor (9 bytes), local colour table, LZW code size, then the data sub-blocks.
  if (pos + 9 > d.size()) return inside;
  pos += 9 + gifColourTable(d[pos + 8]) + 1;
  return gifSkipSubBlocks(d, pos) ? std::string() : inside;
}

// A complete GIF (see gifTruncation) whose first image's LZW data ends (at its end code or at
// the end of its sub-blocks) before it has given every pixel of the image: stb_image leaves the
// rest black without an error. Counts the pixels as its decoder (stbi__process_gif_raster)
// produces them, from the length of each table entry's string, without decoding them. Empty
// when the data gives every pixel, or is malformed in a way the decoder reports itself (no
// clear code first, an invalid code).
std::string gifShortfall(const Bytes& d) {
  std::uint64_t pos = 0;
  if (gifFirstImage(d, pos) != GifWalk::Image || pos + 10 > d.size()) return {};
  const std::uint64_t width = std::uint64_t(d[pos + 4]) | std::uint64_t(d[pos + 5]) << 8;
  const std::uint64_t height = std::uint64_t(d[pos + 6]) | std::uint64_t(d[pos + 7]) << 8;
  pos += 9 + gifColourTable(d[pos + 8]);
  if (pos >= d.size() || d[pos] > 11) return {};
  const unsigned minSize = d[pos++];
  const unsigned clear = 1u << minSize;
  const std::uint64_t need = width * height;
  std::vector<std::uint64_t> length(4096, 1);  // of each code's string; 1 for the roots
  unsigned size = minSize + 1, next = clear + 2;
  int previous = -1;
  bool first = true;
  std::uint64_t got = 0;
  std::uint32_t bits = 0;
  unsigned held = 0;
  const auto shortfall = [&] {
    return got >= need ? std::string()
                       : "its first image's compressed data ends after " + std::to_string(got) +
                             " of its " + std::to_string(width) + " x " + std::to_string(height) +
                             " = " + std::to_string(need) + " pixels";
  };
  while (got < need) {
    if (pos >= d.size()) return {};
    const unsigned blockLength = d[pos++];
    if (blockLength == 0) return shortfall();  // the data ends without an end code
    for (unsigned i = 0; i < blockLength && got < need; ++i) {
      if (pos >= d.size()) return {};
      bits |= std::uint32_t(d[pos++]) << held;
      for (held += 8; held >= size && got < need;) {
        const unsigned code = bits & ((1u << size) - 1);
        bits >>= size;
        held -= size;
        if (code == clear) {
          size = minSize + 1, next = clear + 2, previous = -1, first = false;
          continue;
        }
        if (code == clear + 1) return shortfall();
        if (first || code > next || (code == next && previous < 0)) return {};
        if (previous >= 0 && next < 4096) length[next++] = length[unsigned(previous)] + 1;
        got += length[code];
        previous = int(code);
        if (next == (1u << size) && size < 12) ++size;
      }
    }
  }
  return {};
}

// Where a PSD's 2-byte compression field lies: after the 26-byte header and three sections,
// each led by its 4-byte length; none when the file ends before the field.
std::optional<std::uint64_t> psdCompressionAt(const Bytes& d) {
  const std::uint64_t n = d.size();
  std::uint64_t pos = 26;
  for (int section = 0; section < 3; ++section) {
    if (pos + 4 > n) return std::nullopt;
    pos += 4 + std::uint64_t(be32(d, pos));
  }
  if (pos + 2 > n) return std::nullopt;
  return pos;
}

// A PSD's compression (0 raw, 1 run-length); none when the file ends before it.
std::optional<unsigned> psdCompression(const Bytes& d) {
  const std::optional<std::uint64_t> at = psdCompressionAt(d);
  if (!at) return std::nullopt;
  return unsigned(d[*at]) << 8 | d[*at + 1];
}

// A PSD as stb_image reads it: the 26-byte header, three sections each led by its 4-byte length
// (colour mode data, image resources, layers and masks), the 2-byte compression, then the
// first min(channels, 4) channel planes: raw, width * height samples of depth / 8 bytes each;
// or run-length, after a table of 2 bytes per row and channel, PackBits packets until each plane
// has width * height bytes. stb_image reads zeros past the end, so a cut file decodes to a
// partly black image.
std::string psdTruncation(const Bytes& d, const ImageInfo& info) {
  const std::uint64_t n = d.size();
  if (n < 26) return "its PSD header needs 26 bytes";
  const std::uint64_t channels = std::uint64_t(d[12]) << 8 | d[13];
  const std::uint64_t depth = std::uint64_t(d[22]) << 8 | d[23];
  const std::uint64_t pixels = std::uint64_t(info.width) * std::uint64_t(info.height);
  const std::uint64_t planes = std::min<std::uint64_t>(channels, 4);
  const std::optional<std::uint64_t> at = psdCompressionAt(d);
  if (!at) return "its PSD sections end before the image data";
  std::uint64_t pos = *at;
  const unsigned compression = unsigned(d[pos]) << 8 | d[pos + 1];
  pos += 2;
  if (compression > 1) return {};  // the decoder's to report
  if (compression == 0) {
    const std::uint64_t need = pos + planes * pixels * (depth / 8);
    if (n >= need) return {};
    return "its PSD header declares " + pixelSize(info) + " in " + std::to_string(planes) +
           " raw channels of " + std::to_string(depth) + " bits from byte " + std::to_string(pos) +
           needs(need);
  }
  pos += std::uint64_t(info.height) * channels * 2;
  for (std::uint64_t plane = 0; plane < planes; ++plane) {
    std::uint64_t done = 0;
    const auto ends = [&] {
      return "its PSD run-length data ends in channel " + std::to_string(plane + 1) + " of " +
             std::to_string(planes) + ", after " + std::to_string(done) + " of " + pixelSize(info);
    };
    while (done < pixels) {
      if (pos >= n) return ends();
      const unsigned len = d[pos++];
      if (len == 128) continue;
      const std::uint64_t count = len < 128 ? len + 1 : 257 - len;
      if (count > pixels - done) return {};  // corrupt: the decoder's to report
      const std::uint64_t bytes = len < 128 ? count : 1;
      if (pos + bytes > n) return ends();
      pos += bytes;
      done += count;
    }
  }
  return {};
}

// A Radiance HDR as stb_image reads it: text lines up to an empty one, the "-Y h +X w" line,
// then the scanlines. Widths below 8 or from 32768 are flat, 4 bytes a pixel; others are
// run-length scanlines (2, 2, width as 2 bytes, then each of the 4 components as packets) unless
// a scanline does not start that way, when the decoder reads the whole image flat from there.
// stb_image reads zeros past the end, and a zero-length packet does not advance its scanline:
// a cut run-length file made it loop forever.
std::string hdrTruncation(const Bytes& d, const ImageInfo& info) {
  const std::uint64_t n = d.size();
  std::uint64_t pos = 0;
  const auto line = [&]() {  // the next line's length (without its '\n'); pos moves past it
    const std::uint64_t start = pos;
    while (pos < n && d[pos] != '\n') ++pos;
    const std::uint64_t length = pos - start;
    if (pos < n) ++pos;
    return length;
  };
  line();  // the identifier
  while (pos < n && line() != 0) {
  }
  line();  // -Y h +X w
  if (pos >= n) return "its HDR data ends in the header";
  const std::uint64_t width = std::uint64_t(info.width), height = std::uint64_t(info.height);
  const auto flat = [&](std::uint64_t from) -> std::string {
    const std::uint64_t need = from + width * height * 4;
    if (n >= need) return {};
    return "its HDR header declares " + pixelSize(info) + " of 4 bytes from byte " +
           std::to_string(from) + needs(need);
  };
  if (width < 8 || width >= 32768) return flat(pos);
  for (std::uint64_t row = 0; row < height; ++row) {
    const auto ends = [&] {
      return "its HDR run-length data ends in scanline " + std::to_string(row + 1) + " of " +
             std::to_string(height);
    };
    if (pos + 4 > n) return ends();
    if (d[pos] != 2 || d[pos + 1] != 2 || (d[pos + 2] & 0x80)) return flat(pos);
    if ((std::uint64_t(d[pos + 2]) << 8 | d[pos + 3]) != width) return {};  // the decoder's
    pos += 4;
    for (int component = 0; component < 4; ++component) {
      for (std::uint64_t done = 0; done < width;) {
        if (pos >= n) return ends();
        std::uint64_t count = d[pos++];
        const bool run = count > 128;
        if (run) count -= 128;
        if (count > width - done) return {};  // corrupt: the decoder's to report
        const std::uint64_t bytes = run ? 1 : count;
        if (pos + bytes > n) return ends();
        pos += bytes;
        done += count;
      }
    }
  }
  return {};
}

// Why the file is truncated (the detail of "image file X is truncated: ..."), or empty when its
// structure is complete or not checked here. stb_image reads past the end of its input as zero
// bytes or leaves the rest of the pixel buffer unwritten, so a cut BMP, TGA or PNM decodes
// without an error to black or to leftover memory, and a cut GIF's LZW data stops at the first
// missing block with the rest of the frame left as background. Each check needs only the header
// and, for run-length TGA and GIF, the packet or block lengths: it runs before any pixel memory
// is allocated, so a small file cannot make the decoder allocate what its header declares.
std::string truncation(const Bytes& d, const ImageInfo& info) {
  if (info.format == "jpeg")
    return jpegStructure(d) == Structure::Truncated
               ? "the JPEG data ends before its end-of-image marker"
               : "";
  if (info.format == "png")
    return pngStructure(d) == Structure::Truncated ? "the PNG data ends before its IEND chunk" : "";
  if (info.format == "bmp") return bmpTruncation(d, info);
  if (info.format == "tga") return tgaTruncation(d, info);
  if (info.format == "pnm") return pnmTruncation(d, info);
  if (info.format == "gif") return gifTruncation(d);
  if (info.format == "psd") return psdTruncation(d, info);
  if (info.format == "hdr") return hdrTruncation(d, info);
  return {};
}

// What a PNG's IHDR chunk says, read without stb_image.
struct PngHeader {
  std::uint32_t width = 0;
  std::uint32_t height = 0;
  int channels = 0;  ///< as stb_image reports them: a palette counts 3, or 4 with a tRNS chunk
  int bitDepth = 8;
  int storedChannels = 0;  ///< what stb_image's size check counts: 4 for a palette
};

// Whether `d` starts with the PNG signature and an IHDR chunk (whatever its values).
bool hasPngIhdr(const Bytes& d) {
  return startsWith(d, "\x89PNG\r\n\x1A\n") && d.size() >= 33 && be32(d, 8) == 13 &&
         std::memcmp(d.data() + 12, "IHDR", 4) == 0;
}

// What is wrong with the IHDR of a file that starts with the PNG signature and an IHDR chunk:
// the values the PNG specification does not allow, in words ("" when the file is no such PNG,
// or its IHDR is valid).
std::string pngHeaderFault(const Bytes& d) {
  if (!hasPngIhdr(d)) return {};
  const std::uint32_t width = be32(d, 16), height = be32(d, 20);
  const unsigned depth = d[24], colour = d[25];
  if (width == 0 || height == 0)
    return "its PNG header declares " + std::to_string(width) + " x " + std::to_string(height) +
           " pixels";
  if (width > 0x7FFFFFFF || height > 0x7FFFFFFF)
    return "its PNG header declares " + std::to_string(width) + " x " + std::to_string(height) +
           " pixels, more than PNG allows (2^31 - 1 a side)";
  if (colour != 0 && colour != 2 && colour != 3 && colour != 4 && colour != 6)
    return "its PNG header has colour type " + std::to_string(colour) +
           ", which PNG does not define (0, 2, 3, 4 or 6)";
  const bool depthAllowed =
      colour == 0   ? depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16
      : colour == 3 ? depth == 1 || depth == 2 || depth == 4 || depth == 8
                    : depth == 8 || depth == 16;
  if (!depthAllowed)
    return "its PNG header has bit depth " + std::to_string(depth) + " with colour type " +
           std::to_string(colour) + ", which PNG does not allow";
  if (d[26] != 0 || d[27] != 0 || d[28] > 1)
    return "its PNG header has compression method " + std::to_string(d[26]) + ", filter method " +
           std::to_string(d[27]) + " and interlace method " + std::to_string(d[28]) +
           ", where PNG defines 0, 0 and 0 or 1";
  return {};
}

// A JPEG of four components that no Adobe APP14 marker names CMYK (colour transform 0) or YCCK
// (2), in words, else empty. stb_image decodes such a file without an error as YCbCr, its
// fourth component ignored: wrong colours, where other readers take it as CMYK (the usual
// convention without the marker). The segments are followed up to the first scan
// (forEachJpegSegment).
std::string jpegColourFault(const Bytes& d) {
  int components = 0, transform = -1;
  forEachJpegSegment(d, [&](const JpegSegment& s) {
    const bool whole = s.available == s.size;
    if ((s.marker == 0xC0 || s.marker == 0xC1 || s.marker == 0xC2) && s.size >= 6 && whole)
      components = s.payload[5];
    // As stb_image reads it: "Adobe", then from the sixth byte on version (1 byte as it reads
    // it), two flag words and the transform, in a segment of at least 12 bytes of payload.
    if (s.marker == 0xEE && s.size >= 12 && whole && std::memcmp(s.payload, "Adobe\0", 6) == 0)
      transform = s.payload[11];
    return !whole;  // the walk ends at a segment the file cuts
  });
  if (components != 4 || transform == 0 || transform == 2) return {};
  return transform < 0 ? "its 4 colour components carry no Adobe marker that names them CMYK or "
                         "YCCK, and the decoder would read them as YCbCr (wrong colours)"
                       : "its Adobe marker gives colour transform " + std::to_string(transform) +
                             " for 4 components, where the decoder reads 0 (CMYK) and 2 (YCCK)";
}

// Calls `visit(pos, type, length)` for each chunk after the IHDR of a PNG that starts with one
// (hasPngIhdr), in order: its offset, its four type bytes and the data length its length field
// declares (the data need not be in the file), until `visit` returns true or no chunk header
// is left.
template <class Visit>
void forEachPngChunk(const Bytes& d, Visit visit) {
  for (std::uint64_t pos = 33; pos + 8 <= d.size(); pos += 12 + std::uint64_t(be32(d, pos)))
    if (visit(std::size_t(pos), d.data() + pos + 4, std::size_t(be32(d, pos)))) return;
}

// A palette PNG (colour type 3) without a PLTE chunk before its image data, in words, else
// empty. The chunks are followed by their lengths up to the first IDAT.
std::string pngPaletteFault(const Bytes& d) {
  if (!hasPngIhdr(d) || d[25] != 3) return {};
  std::string fault;
  forEachPngChunk(d, [&](std::size_t pos, const unsigned char* type, std::size_t) {
    if (std::memcmp(type, "IDAT", 4) == 0)
      fault =
          "its PNG header declares a palette image (colour type 3), but no PLTE chunk comes "
          "before its image data (IDAT at byte " +
          std::to_string(pos) + ")";
    return std::memcmp(type, "PLTE", 4) == 0 || !fault.empty();
  });
  return fault;
}

// What a file of a format the decoder reads declares that the decoder does not read of it, in
// words, or empty: a BMP compressed other than with bit fields (run-length, JPEG, PNG), a PSD
// that is no RGB image of 8 or 16-bit channels (or a large-document PSB), and the PNM types
// other than binary PGM and PPM (plain text P1 to P3, binary PBM P4, PAM P7). stb_image's info
// call reports each as "unknown image type", the last of its readers' failures.
std::string unsupportedVariant(const Bytes& d) {
  if (startsWith(d, "BM") && d.size() >= 34 && le32(d, 14) >= 40) {
    const std::uint32_t compression = le32(d, 30);
    static const char* const kNames[] = {"", "RLE8", "RLE4", "", "JPEG", "PNG"};
    if (compression == 1 || compression == 2 || compression >= 4)
      return "its BMP data is compressed as " +
             (compression <= 5 ? std::string(kNames[compression])
                               : "type " + std::to_string(compression)) +
             ", which the decoder does not read (it reads uncompressed and bit-field BMP)";
  }
  if (startsWith(d, "8BPS") && d.size() >= 26) {
    if (be16(d, 4) == 2)
      return "it is a large-document PSB file, which the decoder does not read (it reads PSD)";
    const unsigned depth = be16(d, 22), mode = be16(d, 24);
    if (depth != 8 && depth != 16)
      return "its PSD header declares " + std::to_string(depth) +
             "-bit channels, which the decoder does not read (it reads 8 and 16 bits)";
    static const char* const kModes[] = {"bitmap", "greyscale", "indexed",      "RGB",     "CMYK",
                                         "",       "",          "multichannel", "duotone", "Lab"};
    if (mode != 3) {
      const std::string name = mode <= 9 && *kModes[mode] ? kModes[mode] : "unknown";
      return "its PSD colour mode is " + name + " (" + std::to_string(mode) +
             "), which the decoder does not read (it reads RGB PSD)";
    }
  }
  if (d.size() >= 3 && d[0] == 'P' && std::isspace(d[2])) {
    static const char* const kTypes[] = {"",
                                         "P1 (plain-text PBM)",
                                         "P2 (plain-text PGM)",
                                         "P3 (plain-text PPM)",
                                         "P4 (binary PBM)",
                                         "",
                                         "",
                                         "P7 (PAM)"};
    const int type = d[1] - '0';
    if (type >= 1 && type <= 7 && *kTypes[type])
      return std::string("it is a PNM file of type ") + kTypes[type] +
             ", which the decoder does not read (it reads binary PGM, P5, and PPM, P6)";
  }
  return {};
}

// What a file without any other format's signature, read as a TGA (the format without one),
// declares that the decoder refuses, or empty: a width or height of 0 in a header that is
// otherwise a TGA's as stb_image reads it (colour-map type 0 or 1, an image type it reads with
// that map). stb_image's TGA reader refuses it without a reason.
std::string tgaHeaderFault(const Bytes& d) {
  if (d.size() < 18) return {};
  const unsigned mapType = d[1], type = d[2];
  if (mapType > 1) return {};
  if (mapType == 1 ? type != 1 && type != 9 : type != 2 && type != 3 && type != 10 && type != 11)
    return {};
  const std::uint32_t width = le16(d, 12), height = le16(d, 14);
  if (width > 0 && height > 0) return {};
  return "read as a TGA (the file has no other format's signature), its header declares " +
         std::to_string(width) + " x " + std::to_string(height) + " pixels";
}

// The IHDR of a PNG that starts with a valid one (the first chunk, with the values the PNG
// specification allows: pngHeaderFault finds nothing), else nothing.
std::optional<PngHeader> pngHeader(const Bytes& d) {
  if (!hasPngIhdr(d) || !pngHeaderFault(d).empty()) return std::nullopt;
  PngHeader h;
  h.width = be32(d, 16);
  h.height = be32(d, 20);
  const unsigned depth = d[24], colour = d[25];
  h.bitDepth = depth == 16 ? 16 : 8;
  h.channels = (colour & 2 ? 3 : 1) + (colour & 4 ? 1 : 0);
  h.storedChannels = h.channels;
  if (colour == 3) {
    h.channels = 3;
    h.storedChannels = 4;
    forEachPngChunk(d, [&](std::size_t, const unsigned char* type, std::size_t) {
      if (std::memcmp(type, "tRNS", 4) == 0) h.channels = 4;
      return std::memcmp(type, "IDAT", 4) == 0;
    });
  }
  return h;
}

constexpr std::uint64_t kStbMaxSide = 1 << 24;
constexpr std::uint64_t kStbPngMaxBytes = 1 << 30;

// stb_image's PNG reader refuses a header with more than 2^24 pixels a side or more than 2^30
// bytes of samples counted as stored (one byte a channel, four channels for a palette).
bool stbRefuses(const PngHeader& h) {
  return h.width > kStbMaxSide || h.height > kStbMaxSide ||
         std::uint64_t(h.width) * h.height * h.storedChannels > kStbPngMaxBytes;
}

// The payload of a JPEG's first Exif APP1 segment (from its "Exif\0\0" header on), found by
// following the marker segments up to the first scan (forEachJpegSegment): anything may precede it
// (a comment, the quantisation tables), where libexif's own search of a whole file stops at the
// first segment that is no APPn. Empty when there is none.
std::pair<const unsigned char*, std::size_t> jpegExifPayload(const Bytes& d) {
  std::pair<const unsigned char*, std::size_t> exif{nullptr, 0};
  forEachJpegSegment(d, [&](const JpegSegment& s) {
    if (s.available < s.size) return true;  // the walk ends at a segment the file cuts
    if (s.marker != 0xE1 || s.size < 6 || std::memcmp(s.payload, "Exif\0\0", 6) != 0) return false;
    exif = {s.payload, s.size};
    return true;
  });
  return exif;
}

int exifOrientation(const Bytes& d) {
  const auto [payload, size] = jpegExifPayload(d);
  if (!payload) return 1;
  std::unique_ptr<ExifData, decltype(&exif_data_unref)> exif(exif_data_new(), &exif_data_unref);
  if (!exif) return 1;
  // Read what the file holds; do not let libexif add or "fix" entries.
  exif_data_unset_option(exif.get(), EXIF_DATA_OPTION_FOLLOW_SPECIFICATION);
  exif_data_load_data(exif.get(), payload, static_cast<unsigned int>(size));
  ExifEntry* entry = exif_content_get_entry(exif->ifd[EXIF_IFD_0], EXIF_TAG_ORIENTATION);
  if (!entry || entry->format != EXIF_FORMAT_SHORT || entry->components < 1 || !entry->data ||
      entry->size < 2)
    return 1;
  const int value = exif_get_short(entry->data, exif_data_get_byte_order(exif.get()));
  return value >= 1 && value <= 8 ? value : 1;
}

ImageInfo readInfo(const Bytes& d, const fs::path& path) {
  const int length = static_cast<int>(d.size());
  ImageInfo info;
  // Before stb_image's header reader, which reads a JPEG's tables up to the frame header, and a
  // PNM's numbers into an int without a bound.
  if (startsWith(d, "\xFF\xD8"))
    if (const std::string fault = jpegHuffmanFault(d); !fault.empty())
      throw IoError("cannot decode image file " + quoted(path) + ": corrupt JPEG: " + fault);
  if (startsWith(d, "P5") || startsWith(d, "P6")) {
    const PnmLayout pnm = pnmLayout(d);
    const char* names[] = {"width", "height", "maximum value"};
    const std::uint64_t limits[] = {kStbMaxSide, kStbMaxSide, 65535};
    for (int i = 0; i < 3; ++i)
      if (pnm.fields[i] > limits[i])
        throw IoError(
            "cannot decode image file " + quoted(path) + ": its " +
            (pnm.channels == 3 ? "PPM" : "PGM") + " header's " + names[i] + " " +
            (pnm.fields[i] >= (1u << 30) ? "is over 2^30" : "is " + std::to_string(pnm.fields[i])) +
            ", more than the decoder's limit of " + std::to_string(limits[i]));
    if (pnm.complete && pnm.fields[2] == 0)
      throw IoError("cannot decode image file " + quoted(path) + ": its " +
                    (pnm.channels == 3 ? "PPM" : "PGM") +
                    " header's maximum value is 0, where PNM allows 1 to 65535 (the file is "
                    "corrupt)");
  }
  if (!stbi_info_from_memory(d.data(), length, &info.width, &info.height, &info.channels)) {
    // stb_image tries every reader in turn and reports the last one's failure, so a PNG whose
    // size its PNG reader refused arrives here as "unknown image type". Its header is read
    // here instead, so that loadImage can check it against the pixel limit and then report the
    // decoder's limits.
    if (const std::optional<PngHeader> png = pngHeader(d); png && stbRefuses(*png)) {
      info.width = static_cast<int>(png->width);
      info.height = static_cast<int>(png->height);
      info.channels = png->channels;
      info.bitDepth = png->bitDepth;
      info.format = "png";
      return info;
    }
    std::string corrupt = pngHeaderFault(d);
    if (corrupt.empty()) corrupt = pngPaletteFault(d);
    if (corrupt.empty() && formatName(d) == "tga") corrupt = tgaHeaderFault(d);
    if (!corrupt.empty())
      throw IoError("cannot decode image file " + quoted(path) + ": " + corrupt +
                    " (the file is corrupt)");
    if (startsWith(d, "\xFF\xD8"))
      if (const std::string fault = jpegFrameFault(d); !fault.empty())
        throw IoError("cannot decode image file " + quoted(path) + ": " + fault);
    if (const std::string variant = unsupportedVariant(d); !variant.empty())
      throw IoError("cannot decode image file " + quoted(path) + ": " + variant);
    throw IoError("cannot decode image file " + quoted(path) +
                  ": not an image in a supported format (stb_image: " + stbReason() +
                  "); supported are JPEG, PNG, BMP, GIF, TGA, PSD, HDR, PIC and PNM");
  }
  info.bitDepth = stbi_is_16_bit_from_memory(d.data(), length) ? 16 : 8;
  info.format = formatName(d);
  // stb_image's 16-bit test does not read a PSD's depth (2 bytes at offset 22): 16-bit PSDs
  // would decode to 8 bits.
  if (info.format == "psd" && d.size() >= 24 && (unsigned(d[22]) << 8 | d[23]) == 16)
    info.bitDepth = 16;
  // stb_image's info call passes on a top-down BMP's negative height; its decoder does not.
  if (info.format == "bmp" && info.height < 0)
    info.height = info.height == INT_MIN ? INT_MAX : -info.height;

  if (info.format == "jpeg") {
    if (const std::string fault = jpegColourFault(d); !fault.empty())
      throw IoError("cannot decode image file " + quoted(path) + ": " + fault);
    info.orientation = exifOrientation(d);
  }
  // stb_image skips a colour map's "first entry index" as if it counted bytes before the map,
  // and then takes the pixels' indices as positions in the map rather than entry numbers: every
  // colour would be wrong, without an error.
  if (info.format == "tga" && d.size() >= 18 && d[1] == 1 && le16(d, 3) != 0)
    throw IoError("cannot decode image file " + quoted(path) +
                  ": its TGA colour map starts at entry " + std::to_string(le16(d, 3)) +
                  ", which the decoder does not read (it reads colour maps that start at entry "
                  "0)");
  return info;
}

struct StbFree {
  void operator()(void* p) const { stbi_image_free(p); }
};

template <typename T>
std::vector<T> decode(const Bytes& d, const ImageInfo& info, const fs::path& path) {
  const int length = static_cast<int>(d.size());
  int w = 0, h = 0, channels = 0;
  std::unique_ptr<T, StbFree> pixels;
  // The flip flag is process-wide in stb_image; pin it for this thread so that another user of
  // the library in the same process cannot turn our images upside down.
  stbi_set_flip_vertically_on_load_thread(0);
  if constexpr (sizeof(T) == 2)
    pixels.reset(stbi_load_16_from_memory(d.data(), length, &w, &h, &channels, 3));
  else
    pixels.reset(stbi_load_from_memory(d.data(), length, &w, &h, &channels, 3));
  if (!pixels) {
    const std::string reason = stbReason();
    // The readers' size limits that loadImage does not check (those of PNG, PNM and every side
    // are checked there): most readers decode into 4 bytes a pixel, HDR into 3 floats.
    if (reason == "too large")
      throw InvalidArgument(
          "image file " + quoted(path) + " is " + std::to_string(info.width) + " x " +
          std::to_string(info.height) + " pixels, more than the decoder takes for a " +
          upper(info.format) + " file: stb_image decodes it into at most " +
          std::to_string(kDecoderByteLimit) + " bytes, at up to 4 bytes a pixel (12 for HDR)");
    throw IoError("cannot decode image file " + quoted(path) + ": " + reason +
                  " (the file is corrupt or truncated)");
  }
  if (w != info.width || h != info.height)
    throw IoError("image file " + quoted(path) + " decoded to " + std::to_string(w) + " x " +
                  std::to_string(h) + " pixels, but its header says " + std::to_string(info.width) +
                  " x " + std::to_string(info.height));
  const std::size_t count = std::size_t(w) * std::size_t(h) * 3;
  return std::vector<T>(pixels.get(), pixels.get() + count);
}

// Where a palette PNG's one PLTE chunk lies, and its colours.
struct PngPalette {
  std::size_t chunk = 0;           ///< offset of the PLTE chunk (its length field)
  std::size_t length = 0;          ///< its data's length in bytes
  std::vector<unsigned char> rgb;  ///< 3 bytes per entry
};

// The palette of a complete PNG (pngStructure) with a valid header of colour type 3, or nothing
// for any other PNG, or one whose PLTE chunk stb_image itself refuses (no PLTE, a length that is
// no multiple of 3 or over 256 entries: its reasons stand). Throws IoError naming the file for
// what PNG forbids and stb_image would not notice once decodePalettePng gives it 256 entries:
// more than one PLTE chunk, a PLTE chunk after the image data, a tRNS chunk with more entries
// than the palette.
std::optional<PngPalette> pngPalette(const Bytes& d, const fs::path& path) {
  if (!hasPngIhdr(d) || !pngHeaderFault(d).empty() || d[25] != 3) return std::nullopt;
  const auto corrupt = [&](const std::string& what) {
    return IoError("cannot decode image file " + quoted(path) + ": " + what +
                   " (the file is corrupt)");
  };
  std::optional<PngPalette> palette;
  bool data = false, refused = false;
  forEachPngChunk(d, [&](std::size_t pos, const unsigned char* type, std::size_t length) {
    if (std::memcmp(type, "IEND", 4) == 0 || pos + 12 > d.size() || length > d.size() - pos - 12)
      return true;
    if (std::memcmp(type, "IDAT", 4) == 0) data = true;
    if (std::memcmp(type, "PLTE", 4) == 0) {
      if (palette)
        throw corrupt("it has a second PLTE chunk (at byte " + std::to_string(pos) +
                      "), where PNG allows one");
      if (data)
        throw corrupt("its PLTE chunk (at byte " + std::to_string(pos) +
                      ") comes after its image data, where PNG puts it before");
      refused = length == 0 || length % 3 != 0 || length > 768;
      if (refused) return true;
      palette = PngPalette{
          pos,
          length,
          {d.begin() + std::ptrdiff_t(pos + 8), d.begin() + std::ptrdiff_t(pos + 8 + length)}};
    }
    if (std::memcmp(type, "tRNS", 4) == 0 && palette && length > palette->length / 3)
      throw corrupt("its tRNS chunk (at byte " + std::to_string(pos) + ") has " +
                    std::to_string(length) + " entries, more than its palette's " +
                    std::to_string(palette->length / 3));
    return false;
  });
  if (refused) return std::nullopt;
  return palette;
}

// A palette PNG's pixels. stb_image expands each index through a 256-entry array of which it
// sets only the PLTE chunk's entries, so an index past the palette (which PNG forbids) would
// take whatever that array held, a different colour from one run to the next, without an error.
// So the file is decoded with its PLTE chunk replaced by 256 entries (i, i, i), which gives each
// pixel's index; each index is checked against the file's palette (an index past it is refused,
// with the pixel) and mapped through it here.
std::vector<std::uint8_t> decodePalettePng(const Bytes& d, const PngPalette& palette,
                                           const ImageInfo& info, const fs::path& path) {
  Bytes identity(d.begin(), d.begin() + std::ptrdiff_t(palette.chunk));
  for (const unsigned char b : {0, 0, 3, 0}) identity.push_back(b);  // 768 bytes
  identity.insert(identity.end(), {'P', 'L', 'T', 'E'});
  for (int i = 0; i < 256; ++i)
    for (int c = 0; c < 3; ++c) identity.push_back(static_cast<unsigned char>(i));
  identity.insert(identity.end(), 4, 0);  // CRC: stb_image does not check it
  identity.insert(identity.end(), d.begin() + std::ptrdiff_t(palette.chunk + 12 + palette.length),
                  d.end());
  std::vector<std::uint8_t> rgb = decode<std::uint8_t>(identity, info, path);
  const std::size_t entries = palette.length / 3;
  for (std::size_t i = 0; i < rgb.size(); i += 3) {
    const std::size_t index = rgb[i];
    if (index >= entries) {
      const std::size_t pixel = i / 3, width = std::size_t(info.width);
      throw IoError("cannot decode image file " + quoted(path) + ": its pixel (" +
                    std::to_string(pixel % width) + ", " + std::to_string(pixel / width) +
                    ") has palette index " + std::to_string(index) + ", past its palette of " +
                    std::to_string(entries) + " entries (the file is corrupt)");
    }
    for (std::size_t c = 0; c < 3; ++c) rgb[i + c] = palette.rgb[3 * index + c];
  }
  return rgb;
}

// A 16-bit PGM or PPM (complete: see pnmTruncation) as RGB samples. Read here, not by stb_image:
// its PNM loader (the Debian 12 version) copies the big-endian samples unswapped, and converts
// a PGM's single channel with its 8-bit routine.
std::vector<std::uint16_t> decodePnm16(const Bytes& d, const ImageInfo& info) {
  const PnmLayout layout = pnmLayout(d);
  const std::size_t n = std::size_t(info.width) * std::size_t(info.height);
  const std::size_t step = std::size_t(layout.channels);
  std::vector<std::uint16_t> rgb(n * 3);
  const unsigned char* src = d.data() + layout.dataOffset;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t c = 0; c < 3; ++c) {
      const unsigned char* s = src + 2 * (i * step + (step == 3 ? c : 0));
      rgb[i * 3 + c] = std::uint16_t(s[0] << 8 | s[1]);
    }
  return rgb;
}

// Keeps the first three channels (red, green, blue) of a PSD of more than three, in place, in
// the bytes stb_image is then given. With a fourth channel, stb_image "un-mattes" the colours from
// white by that alpha (c' = 255 - (255 - c) / a, as if the composite were matted against white)
// and converts values below 0 to a byte, which is undefined and in practice wraps: a composite
// stored with straight colours (as ImageMagick writes it) decodes to wrong colours. kmseg takes
// the colours as stored and drops the alpha, as in every other format. The channel count becomes
// 3 and, for run-length data, the row-length table loses the entries of the channels after the
// third (they come last in it, as their planes do). Bytes it cannot follow are left as they are,
// for the decoder to refuse.
void keepPsdColourChannels(Bytes& d) {
  if (d.size() < 26 || be16(d, 12) <= 3) return;
  const std::size_t channels = be16(d, 12), height = be32(d, 14);
  std::size_t pos = 26;
  for (int section = 0; section < 3; ++section) {
    if (pos + 4 > d.size()) return;
    pos += 4 + std::size_t(be32(d, pos));
  }
  if (pos + 2 > d.size()) return;
  if (be16(d, pos) == 1) {
    const std::size_t table = pos + 2;
    if (table + height * channels * 2 > d.size()) return;
    d.erase(d.begin() + std::ptrdiff_t(table + height * 3 * 2),
            d.begin() + std::ptrdiff_t(table + height * channels * 2));
  }
  d[12] = 0;
  d[13] = 3;
}

// Reverses the order of the pixels in every row.
void mirrorRows(Image& image) {
  const std::size_t width = std::size_t(image.width);
  auto mirror = [&](auto& samples) {
    for (std::size_t row = 0; row < std::size_t(image.height); ++row) {
      auto* p = samples.data() + row * width * 3;
      for (std::size_t x = 0; x < width / 2; ++x)
        for (std::size_t c = 0; c < 3; ++c) std::swap(p[3 * x + c], p[3 * (width - 1 - x) + c]);
    }
  };
  if (image.bitDepth == 16)
    mirror(image.rgb16);
  else
    mirror(image.rgb8);
}

// A PNM's samples run from 0 to its maximum value (PNM's definition), not to the full 8 or 16
// bits that stb_image and decodePnm16 leave them on: stretched here (rounded to nearest), so that
// a 12-bit PGM shows as bright as its 16-bit PNG and its Lab features are the same. A sample over
// the maximum (malformed) counts as the maximum.
void stretchPnmSamples(Image& image, std::uint64_t maxValue) {
  const std::uint64_t full = image.bitDepth == 16 ? 65535 : 255;
  if (maxValue == 0 || maxValue == full) return;
  auto stretch = [&](auto& samples) {
    for (auto& v : samples) {
      const std::uint64_t x = std::min<std::uint64_t>(v, maxValue);
      v = static_cast<std::remove_reference_t<decltype(v)>>((x * full + maxValue / 2) / maxValue);
    }
  };
  if (image.bitDepth == 16)
    stretch(image.rgb16);
  else
    stretch(image.rgb8);
}

}  // namespace

ImageInfo probeImage(const fs::path& path) {
  return readInfo(readFile(path), path);
}

Image loadImage(const fs::path& path, const LoadOptions& options) {
  Bytes bytes = readFile(path);
  const ImageInfo info = readInfo(bytes, path);

  const std::string size = std::to_string(info.width) + " x " + std::to_string(info.height);
  // A header of no pixels, or a negative width (which stb_image passes on from a BMP), would
  // reach the pixel limit or K's check as a size: a cut file (whose header stb_image reads as
  // zeros) or a corrupt one.
  if (info.width < 1 || info.height < 1) {
    if (const std::string cut =
            info.width < 0 || info.height < 0 ? std::string() : truncation(bytes, info);
        !cut.empty())
      throw IoError("image file " + quoted(path) + " is truncated: " + cut + "; the file has " +
                    std::to_string(bytes.size()) + " bytes");
    throw IoError("cannot decode image file " + quoted(path) + ": its " + upper(info.format) +
                  " header declares " + size + " pixels (the file is corrupt)");
  }
  const std::uint64_t pixels = std::uint64_t(info.width) * std::uint64_t(info.height);
  if (pixels > options.maxPixels)
    throw PixelLimitError("image file " + quoted(path) + " is " + size + " = " +
                          std::to_string(pixels) + " pixels, more than the limit of " +
                          std::to_string(options.maxPixels) + " pixels");
  const std::uint64_t decodedBytes = pixels * 3 * (info.bitDepth == 16 ? 2 : 1);
  if (decodedBytes > kDecoderByteLimit)
    throw InvalidArgument("image file " + quoted(path) + " is " + size + " pixels at " +
                          std::to_string(info.bitDepth) + " bits, " + std::to_string(decodedBytes) +
                          " bytes of RGB samples, more than the decoder's limit of " +
                          std::to_string(kDecoderByteLimit) + " bytes");

  if (std::uint64_t(info.width) > kStbMaxSide || std::uint64_t(info.height) > kStbMaxSide)
    throw InvalidArgument("image file " + quoted(path) + " is " + size +
                          " pixels, more than the decoder takes: stb_image reads images of at "
                          "most " +
                          std::to_string(kStbMaxSide) + " pixels a side");
  // stb_image unpacks a run-length PSD one byte a sample whatever its depth: a 16-bit one would
  // decode to wrong colours without an error.
  if (info.format == "psd" && info.bitDepth == 16 && psdCompression(bytes) == 1u)
    throw InvalidArgument("image file " + quoted(path) +
                          " is a 16-bit PSD with run-length compression, which the decoder does "
                          "not read correctly: save it uncompressed, or as a 16-bit PNG");

  // Only a PNG can get here with a header that stb_image refuses (see readInfo).
  if (const std::optional<PngHeader> png = pngHeader(bytes); png && stbRefuses(*png))
    throw InvalidArgument("image file " + quoted(path) + " is " + size +
                          " pixels, more than the decoder takes: stb_image reads PNGs of at most " +
                          std::to_string(kStbMaxSide) + " pixels a side and " +
                          std::to_string(kStbPngMaxBytes) + " bytes of stored samples");

  // stb_image refuses some truncated JPEGs and PNGs itself but decodes most other cut files
  // without an error (see truncation()); checking the structure here gives every format the
  // same clear message and does not depend on the stb version.
  if (const std::string cut = truncation(bytes, info); !cut.empty())
    throw IoError("image file " + quoted(path) + " is truncated: " + cut + "; the file has " +
                  std::to_string(bytes.size()) + " bytes");

  if (info.format == "gif")
    if (const std::string shortfall = gifShortfall(bytes); !shortfall.empty())
      throw IoError("cannot decode image file " + quoted(path) + ": " + shortfall +
                    " (the file is corrupt)");

  if (info.format == "psd") keepPsdColourChannels(bytes);
  Image image;
  image.width = info.width;
  image.height = info.height;
  image.bitDepth = info.bitDepth;
  if (info.bitDepth == 16 && info.format == "pnm")
    image.rgb16 = decodePnm16(bytes, info);
  else if (info.bitDepth == 16)
    image.rgb16 = decode<std::uint16_t>(bytes, info, path);
  else if (const std::optional<PngPalette> palette = pngPalette(bytes, path))
    image.rgb8 = decodePalettePng(bytes, *palette, info, path);
  else
    image.rgb8 = decode<std::uint8_t>(bytes, info, path);
  if (info.format == "pnm") stretchPnmSamples(image, pnmLayout(bytes).fields[2]);
  // A TGA stored right to left (image descriptor bit 4): stb_image reads its rows left to right.
  if (info.format == "tga" && (bytes[17] & 0x10)) mirrorRows(image);
  if (options.applyExifOrientation) applyOrientation(image, info.orientation);
  return image;
}

void applyOrientation(Image& image, int orientation) {
  if (orientation < 1 || orientation > 8)
    throw InvalidArgument("EXIF orientation " + std::to_string(orientation) +
                          " is not one of 1..8");
  const bool is16 = image.bitDepth == 16;
  const std::size_t samples = image.pixelCount() * 3;
  if (image.width < 0 || image.height < 0 ||
      (is16 ? image.rgb16.size() : image.rgb8.size()) != samples)
    throw InvalidArgument("cannot orient a " + std::to_string(image.width) + " x " +
                          std::to_string(image.height) + " image whose pixel buffer holds " +
                          std::to_string(is16 ? image.rgb16.size() : image.rgb8.size()) +
                          " samples instead of " + std::to_string(samples));
  if (orientation == 1 || samples == 0) return;

  const int type = is16 ? CV_16UC3 : CV_8UC3;
  void* srcData = is16 ? static_cast<void*>(image.rgb16.data()) : image.rgb8.data();
  const cv::Mat src(image.height, image.width, type, srcData);
  const bool swap = orientation >= 5;
  const int outWidth = swap ? image.height : image.width;
  const int outHeight = swap ? image.width : image.height;
  std::vector<std::uint8_t> out8;
  std::vector<std::uint16_t> out16;
  if (is16)
    out16.resize(samples);
  else
    out8.resize(samples);
  void* dstData = is16 ? static_cast<void*>(out16.data()) : out8.data();
  cv::Mat dst(outHeight, outWidth, type, dstData);
  cv::Mat tmp;
  switch (orientation) {
    case 2:
      cv::flip(src, dst, 1);
      break;
    case 3:
      cv::rotate(src, dst, cv::ROTATE_180);
      break;
    case 4:
      cv::flip(src, dst, 0);
      break;
    case 5:
      cv::transpose(src, dst);
      break;
    case 6:
      cv::rotate(src, dst, cv::ROTATE_90_CLOCKWISE);
      break;
    case 7:
      cv::rotate(src, tmp, cv::ROTATE_90_COUNTERCLOCKWISE);
      cv::flip(tmp, dst, 1);
      break;
    case 8:
      cv::rotate(src, dst, cv::ROTATE_90_COUNTERCLOCKWISE);
      break;
  }
  // OpenCV writes into an output of the right size and type without reallocating it.
  assert(dst.data == dstData);
  image.width = outWidth;
  image.height = outHeight;
  if (is16)
    image.rgb16 = std::move(out16);
  else
    image.rgb8 = std::move(out8);
}

}  // namespace kmseg
