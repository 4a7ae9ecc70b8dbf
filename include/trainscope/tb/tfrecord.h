// TFRecord framing, the container of TensorBoard event files (and of tf.data record files):
// each record is
//   uint64 length (little-endian) | uint32 masked CRC32C of those 8 bytes |
//   length bytes of data          | uint32 masked CRC32C of the data
// where masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 and CRC32C is the Castagnoli
// CRC (iSCSI polynomial, reflected 0x82f63b78). Shared by diagnose's reader of event files and
// the trainer's writer (event_writer.h, FrameTfRecord): one implementation of the framing.
// Thread-safety: the functions are pure; a TfRecordReader is used by one thread.
#ifndef TRAINSCOPE_TB_TFRECORD_H_
#define TRAINSCOPE_TB_TFRECORD_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace trainscope::tb {

// CRC32C of `data`, continuing from `crc` (the CRC of the bytes before; 0 to start).
uint32_t Crc32c(std::string_view data, uint32_t crc = 0);
uint32_t MaskCrc32c(uint32_t crc);

// One record framed as above (for writers and tests).
std::string FrameTfRecord(std::string_view data);

// Reads the records of a whole file held in memory (the caller keeps `file` alive while
// the reader and the records it returned are used).
// Damage is counted, not fatal: a record whose data CRC does not match is skipped (its
// length was checked, so the next record is where it says); a length whose CRC does not
// match loses the framing, so the reader looks for the next offset where a length and its
// CRC agree and goes on from there; a last record cut short (a file still being written)
// ends the reading and is counted as truncated.
class TfRecordReader {
 public:
  explicit TfRecordReader(std::string_view file) : file_(file) {}

  // The next good record's data; false at the end of the file.
  bool Next(std::string_view* data);

  int64_t records() const { return records_; }          // good records returned
  int64_t bad_records() const { return bad_records_; }  // data CRC mismatches + lost framings
  int64_t truncated_bytes() const { return truncated_bytes_; }  // of a last record cut short
  // The first damage: "byte 1234: data CRC mismatch (record 17)", "" when none.
  const std::string& first_bad() const { return first_bad_; }

 private:
  void Bad(size_t offset, const char* why);
  // The offset of the next plausible record header at or after `from` (file size if none).
  size_t Resync(size_t from) const;

  std::string_view file_;
  size_t pos_ = 0;
  int64_t records_ = 0, bad_records_ = 0, truncated_bytes_ = 0;
  std::string first_bad_;
};

}  // namespace trainscope::tb

#endif  // TRAINSCOPE_TB_TFRECORD_H_
