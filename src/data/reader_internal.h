// What the corpus reader's files share (reader.cc: lines, JSONL decoding, batching and
// ReadCorpus; reader_raw_jsonl.cc: JSONL in raw blocks of whole lines, read in place from a
// memory mapping or with pread). Private to the data module.
#ifndef TRAINSCOPE_DATA_READER_INTERNAL_H_
#define TRAINSCOPE_DATA_READER_INTERNAL_H_

#include <cstdint>
#include <functional>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "trainscope/data/reader.h"

namespace trainscope::data::internal {

// Builds the batches ReadCorpus hands to its sink, documents copied back to back into one
// text buffer per batch; raw blocks go out in sequence between them. Not thread-safe (the
// reader's thread only); `o`, `sink` and `pending` must outlive it.
class BatchBuilder {
 public:
  BatchBuilder(const ReaderOptions& o, const std::function<bool(DocBatch&&)>& sink,
               BadRecords* pending = nullptr)
      : opts_(o), sink_(sink), pending_(pending) {}
  // Hands over a raw block (after the batch being built). False when the sink wants no more.
  bool EmitRaw(DocBatch&& raw) {
    if (!MaybeFlush(true)) return false;
    raw.seq = seq_++;
    if (pending_ != nullptr) std::swap(raw.bad, *pending_);
    if (!sink_(std::move(raw))) stopped_ = true;
    return !stopped_;
  }
  void Add(std::string_view text, std::string_view id, uint32_t file, uint64_t line,
           int64_t tokens = -1) {
    DocRef d;
    d.text_off = static_cast<uint32_t>(cur_.text.size());
    d.text_len = static_cast<uint32_t>(text.size());
    d.id_off = static_cast<uint32_t>(cur_.ids.size());
    d.id_len = static_cast<uint32_t>(id.size());
    d.file = file;
    d.line = line;
    d.tokens = tokens;
    cur_.text.append(text);
    cur_.ids.append(id);
    cur_.docs.push_back(d);
  }
  void AddInputBytes(uint64_t n) { cur_.input_bytes += n; }
  // Hands the batch over when it is full (or `force`). False when the sink wants no more.
  bool MaybeFlush(bool force) {
    if (stopped_) return false;
    if (cur_.docs.empty() && cur_.input_bytes == 0) return true;
    if (!force && cur_.text.size() < opts_.batch_bytes) return true;
    cur_.seq = seq_++;
    if (pending_ != nullptr) std::swap(cur_.bad, *pending_);
    DocBatch b = std::move(cur_);
    cur_ = DocBatch();
    if (opts_.text_pool != nullptr) cur_.text = opts_.text_pool->Get();
    cur_.text.reserve(opts_.batch_bytes + (opts_.batch_bytes >> 2));
    if (!sink_(std::move(b))) stopped_ = true;
    return !stopped_;
  }

 private:
  const ReaderOptions& opts_;
  const std::function<bool(DocBatch&&)>& sink_;
  BadRecords* pending_;
  DocBatch cur_;
  uint64_t seq_ = 0;
  bool stopped_ = false;
};

// Reads an uncompressed JSONL file in raw blocks of whole lines (see raw_jsonl_blocks):
// from a memory mapping when options.raw_jsonl_mmap allows and the file maps, otherwise
// with pread into padded buffers. A line longer than a block and over max_doc_bytes is
// skipped and counted in `bad` (shorter ones are JsonlBlockDecoder's to count), as is an
// empty file.
// Errors: NotFound (cannot open or stat), DataLoss (a read error).
absl::Status ReadRawJsonl(const InputFile& in, uint32_t file, const ReaderOptions& opts,
                          BatchBuilder* out, BadRecords* bad);

}  // namespace trainscope::data::internal

#endif  // TRAINSCOPE_DATA_READER_INTERNAL_H_
