// TFRecord framing (tfrecord.h). CRC32C is table-driven, eight bytes at a time
// ("slicing-by-8"): Debian bookworm's abseil (20220623) predates absl/crc, and event files
// are small enough that the hardware instruction would not matter.
#include "trainscope/tb/tfrecord.h"

#include <array>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace trainscope::tb {
namespace {

constexpr uint32_t kCrc32cPoly = 0x82f63b78;  // Castagnoli, reflected
constexpr uint32_t kCrcMaskDelta = 0xa282ead8;
constexpr size_t kTfRecordHeaderBytes = 12;  // length + its CRC
constexpr size_t kTfRecordFooterBytes = 4;   // the data's CRC

// table[k][b]: the CRC of byte b followed by k zero bytes.
using Crc32cTables = std::array<std::array<uint32_t, 256>, 8>;

Crc32cTables MakeCrc32cTables() {
  Crc32cTables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1) ? kCrc32cPoly : 0);
    t[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; ++b)
    for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  return t;
}

uint32_t TfRecordLoad32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);  // little-endian hosts only (x86-64, aarch64)
  return v;
}

uint64_t TfRecordLoad64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace

uint32_t Crc32c(std::string_view data, uint32_t crc) {
  static const Crc32cTables t = MakeCrc32cTables();
  const char* p = data.data();
  size_t n = data.size();
  crc = ~crc;
  while (n >= 8) {
    uint64_t w = TfRecordLoad64(p) ^ crc;
    crc = t[7][w & 0xff] ^ t[6][(w >> 8) & 0xff] ^ t[5][(w >> 16) & 0xff] ^ t[4][(w >> 24) & 0xff] ^
          t[3][(w >> 32) & 0xff] ^ t[2][(w >> 40) & 0xff] ^ t[1][(w >> 48) & 0xff] ^ t[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = (crc >> 8) ^ t[0][(crc ^ static_cast<uint8_t>(*p++)) & 0xff];
  return ~crc;
}

uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kCrcMaskDelta; }

std::string FrameTfRecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + kTfRecordHeaderBytes + kTfRecordFooterBytes);
  uint64_t len = data.size();
  char buf[8];
  std::memcpy(buf, &len, 8);
  out.append(buf, 8);
  uint32_t c = MaskCrc32c(Crc32c(std::string_view(buf, 8)));
  std::memcpy(buf, &c, 4);
  out.append(buf, 4);
  out.append(data);
  c = MaskCrc32c(Crc32c(data));
  std::memcpy(buf, &c, 4);
  out.append(buf, 4);
  return out;
}

void TfRecordReader::Bad(size_t offset, const char* why) {
  ++bad_records_;
  if (first_bad_.empty())
    first_bad_ = absl::StrCat("byte ", offset, ": ", why, " (record ", records_ + 1, ")");
}

// The next offset where 8 bytes and the 4 after them read as a length and its CRC (a chance
// match is one in 2^32; Next() then checks the record as usual).
size_t TfRecordReader::Resync(size_t from) const {
  for (size_t p = from; p + kTfRecordHeaderBytes <= file_.size(); ++p) {
    const char* h = file_.data() + p;
    if (MaskCrc32c(Crc32c(std::string_view(h, 8))) == TfRecordLoad32(h + 8)) return p;
  }
  return file_.size();
}

bool TfRecordReader::Next(std::string_view* data) {
  while (pos_ < file_.size()) {
    size_t left = file_.size() - pos_;
    if (left < kTfRecordHeaderBytes) {
      truncated_bytes_ += static_cast<int64_t>(left);
      pos_ = file_.size();
      return false;
    }
    const char* h = file_.data() + pos_;
    if (MaskCrc32c(Crc32c(std::string_view(h, 8))) != TfRecordLoad32(h + 8)) {
      Bad(pos_, "length CRC mismatch, looking for the next record");
      pos_ = Resync(pos_ + 1);
      continue;
    }
    uint64_t len = TfRecordLoad64(h);
    if (len > left - kTfRecordHeaderBytes ||
        left - kTfRecordHeaderBytes - len < kTfRecordFooterBytes) {
      truncated_bytes_ += static_cast<int64_t>(left);
      pos_ = file_.size();
      return false;
    }
    std::string_view d(h + kTfRecordHeaderBytes, static_cast<size_t>(len));
    size_t at = pos_;
    pos_ += kTfRecordHeaderBytes + len + kTfRecordFooterBytes;
    if (MaskCrc32c(Crc32c(d)) != TfRecordLoad32(d.data() + d.size())) {
      Bad(at, "data CRC mismatch");
      continue;
    }
    ++records_;
    *data = d;
    return true;
  }
  return false;
}

}  // namespace trainscope::tb
