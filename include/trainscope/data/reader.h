// Corpus readers: JSONL, plain text (a document per line or per blank-line block), each
// optionally .zst or .gz compressed, and Megatron .bin/.idx token datasets; from files,
// directories (recursive) and globs. Streaming: documents come out in batches of a few MB,
// so memory is bounded by the batch size whatever the corpus size.
//
// Bad records (invalid JSON, missing text field, invalid UTF-8 in JSON, records over
// max_doc_bytes, empty files, truncated or corrupt compressed streams) are counted in
// BadRecords with the file and line of the first examples; the read goes on.
#ifndef TRAINSCOPE_DATA_READER_H_
#define TRAINSCOPE_DATA_READER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace trainscope::tokenizer {
class Tokenizer;
}

namespace trainscope::data {

enum class InputFormat { kAuto, kJsonl, kText, kMegatron };
// "auto", "jsonl", "text", "megatron" (the --format names of the data verbs and the Python
// module). InvalidArgument "format '<name>': expected auto, jsonl, text or megatron" else.
absl::StatusOr<InputFormat> ParseInputFormat(const std::string& name);

// Batch text buffers handed back by the consumer for the reader to fill again, so a long
// scan does not map and fault in a fresh multi-MB buffer per batch. Thread-safe; keeps at
// most `capacity` buffers.
class BufferPool {
 public:
  explicit BufferPool(size_t capacity) : capacity_(capacity) {}
  // An empty string, with capacity when one was returned; never blocks.
  std::string Get() {
    std::lock_guard<std::mutex> l(mu_);
    if (free_.empty()) return std::string();
    std::string s = std::move(free_.back());
    free_.pop_back();
    s.clear();
    return s;
  }
  // A buffer whose contents are unspecified (its old size kept): resizing it to about the
  // same size again writes no bytes, where Get()'s empty string would be zero-filled.
  std::string GetUncleared() {
    std::lock_guard<std::mutex> l(mu_);
    if (free_.empty()) return std::string();
    std::string s = std::move(free_.back());
    free_.pop_back();
    return s;
  }
  void Clear() {  // frees the buffers
    std::lock_guard<std::mutex> l(mu_);
    free_ = {};
  }
  void Put(std::string&& s) {
    std::lock_guard<std::mutex> l(mu_);
    if (free_.size() < capacity_) free_.push_back(std::move(s));
  }

 private:
  const size_t capacity_;
  std::mutex mu_;
  std::vector<std::string> free_;  // guarded by mu_
};

struct ReaderOptions {
  InputFormat format = InputFormat::kAuto;  // kAuto: by file extension
  std::string text_field = "text";          // JSONL field holding the document
  std::string id_field = "id";              // JSONL field holding the id (optional)
  bool text_blocks = false;                 // plain text: blank-line blocks, not lines
  size_t max_doc_bytes = 64u << 20;         // longer records are skipped and counted
  size_t batch_bytes = 4u << 20;            // text per batch handed to workers
  // Decodes Megatron token datasets to text (not owned; byte-level when null).
  const tokenizer::Tokenizer* tokenizer = nullptr;
  // Where batch text buffers come from (not owned; null: fresh allocations).
  BufferPool* text_pool = nullptr;
  // Uncompressed JSONL inputs are handed over as raw blocks of whole lines (DocBatch::raw)
  // for the consumer to split and decode with a JsonlBlockDecoder, and every bad record is
  // carried in DocBatch::bad (in corpus order) rather than added to ReadCorpus's `bad`
  // (which gets only those left after the last batch).
  bool raw_jsonl_blocks = false;
  // Raw blocks of regular files are read in place from a read-only memory mapping (no copy;
  // each block's pages are dropped from the process once its batch is done). A file that
  // is truncated while it is read is then a SIGBUS, as with any mmap reader: corpora are
  // read-only datasets. The library installs no signal handler; an executable that wants
  // a one-line error instead of "Bus error" calls InstallMappedInputSigbusHandler(). A
  // host that cannot afford a SIGBUS (the Python module) sets this false. False: pread()
  // into buffers.
  bool raw_jsonl_mmap = true;
};

// One input after expansion of directories and globs.
struct InputFile {
  std::string path;  // for .bin/.idx datasets: the prefix path + ".idx"
  InputFormat format = InputFormat::kText;
  enum Compression { kNone, kZstd, kGzip } compression = kNone;
  uint64_t size_bytes = 0;  // on disk
  std::string root;         // the directory argument it was found under; "" if named itself
  // A byte range of an uncompressed JSONL file (a distributed scan's share, distributed.h):
  // [range_begin, range_end) starting at a line start, whose first line is `first_line` of
  // the file. range_end 0: the whole file (the other readers always read whole files).
  uint64_t range_begin = 0, range_end = 0;
  uint64_t first_line = 1;
};

// Expands files, directories (recursively, sorted, hidden files skipped) and glob
// patterns into inputs. InvalidArgument / NotFound naming the argument when nothing
// matches or a path is unreadable; InvalidArgument for a character or block device or a
// socket (regular files and pipes are corpora; a Megatron dataset must be regular files,
// which ReadMegatronIndex checks).
absl::StatusOr<std::vector<InputFile>> ExpandInputs(const std::vector<std::string>& args,
                                                    InputFormat format);

// Refuses `outputs` that would replace an input, before anything is read or written
// (core/paths.h): CheckOutputFile for each, then CheckOutputNotInput against every input
// file (both files of a Megatron dataset) and every directory an input was found under.
// InvalidArgument naming the output and the input.
absl::Status CheckOutputsAgainstInputs(const std::vector<std::string>& outputs,
                                       const std::vector<InputFile>& inputs);

// Counts of bad records by kind, with the first few locations.
class BadRecords {
 public:
  static constexpr size_t kMaxExamples = 20;
  void Add(std::string_view kind, std::string_view file, uint64_t line, std::string_view what);
  void Merge(const BadRecords& other);
  // Records counted elsewhere (another rank's counts() and examples()).
  static BadRecords FromParts(std::map<std::string, uint64_t> counts,
                              std::vector<std::string> examples) {
    BadRecords b;
    b.counts_ = std::move(counts);
    b.examples_ = std::move(examples);
    return b;
  }
  uint64_t total() const;
  const std::map<std::string, uint64_t>& counts() const { return counts_; }
  const std::vector<std::string>& examples() const { return examples_; }  // "file:line: kind: what"
  nlohmann::json ToJson() const;

 private:
  std::map<std::string, uint64_t> counts_;
  std::vector<std::string> examples_;
};

// A document inside a batch: views into the batch's buffers.
struct DocRef {
  uint32_t text_off = 0, text_len = 0;
  uint32_t id_off = 0, id_len = 0;  // id_len == 0: no id field, use file:line
  uint32_t file = 0;                // index into the input list
  uint64_t line = 0;                // 1-based line (document index for Megatron)
  int64_t tokens = -1;              // token count when known from the input (Megatron)
};

struct DocBatch {
  uint64_t seq = 0;  // 0, 1, 2, ... in corpus order
  std::string text;  // texts, back to back
  std::string ids;
  std::vector<DocRef> docs;
  uint64_t input_bytes = 0;  // bytes of input consumed for this batch (progress)
  // With ReaderOptions::raw_jsonl_blocks: bad records found before this batch's documents.
  BadRecords bad;
  // A raw block: text[0, raw_len) holds whole lines of input `raw_file` from line
  // `raw_first_line` on, followed by simdjson padding; docs is empty until decoded.
  bool raw = false;
  uint32_t raw_file = 0;
  uint64_t raw_first_line = 0;
  size_t raw_len = 0;
  // A raw block read in place from a memory-mapped file: its bytes are raw_data[0, raw_len)
  // (text holds no block), raw_readable bytes are readable from raw_data on, and
  // raw_pages keeps the mapping alive (dropping the block's pages when released).
  const char* raw_data = nullptr;
  size_t raw_readable = 0;
  std::shared_ptr<const void> raw_pages;
  std::string_view Text(const DocRef& d) const { return {text.data() + d.text_off, d.text_len}; }
  std::string_view Id(const DocRef& d) const { return {ids.data() + d.id_off, d.id_len}; }
};

// Reads every input in order and hands batches to `sink` (on the calling thread). Stops
// early when `sink` returns false. Per-record problems go to `bad`; only an unreadable
// input is an error (NotFound / PermissionDenied / DataLoss naming the file).
// For executables (main()), never called by the library: installs a SIGBUS handler that
// turns a fault on a mapped input (raw_jsonl_mmap; the file shrank while it was read, or
// its disk failed) into "trainscope: <path>: cannot read byte <N> of the memory-mapped
// input: ..." on stderr and _exit(2). Faults elsewhere go to the previous handler, or
// kill the process as before. Idempotent; thread-safe.
void InstallMappedInputSigbusHandler();

absl::Status ReadCorpus(const std::vector<InputFile>& inputs, const ReaderOptions& options,
                        const std::function<bool(DocBatch&&)>& sink, BadRecords* bad);

// Decodes raw blocks (DocBatch::raw): splits lines and parses them in place. One per thread.
class JsonlBlockDecoder {
 public:
  explicit JsonlBlockDecoder(const ReaderOptions& options);
  ~JsonlBlockDecoder();
  // Hands each document of the block to `on_doc(text, id, line)` as it is decoded: the
  // views are valid during the call only (an unescaped text lives in the parser's
  // buffer), and nothing is copied. Bad records (with exact line numbers) go to
  // batch->bad; batch->docs stays empty.
  void ForEachDoc(const InputFile& in, DocBatch* batch,
                  absl::FunctionRef<void(std::string_view, std::string_view, uint64_t)> on_doc);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Calls `on_line(line, line_no)` for every line of a line-oriented input (decompressed;
// "\r\n" endings trimmed; the last line may lack "\n"); of an input with a byte range, only
// the lines of that range, numbered from its first_line. Lines over max_doc_bytes are
// skipped without being buffered and counted in `bad`, as are truncated or corrupt
// compressed streams and empty files. `on_input_bytes` (optional) gets input progress.
absl::Status ForEachLine(const InputFile& in, size_t max_doc_bytes, BadRecords* bad,
                         const std::function<void(std::string_view, uint64_t)>& on_line,
                         const std::function<void(uint64_t)>& on_input_bytes = nullptr);

// Reads the whole decompressed content of one input into `out` (replacing it), for readers
// that take a file as a single document (the trainer's plain-text corpora). `on_input_bytes`
// (optional) gets input progress. Errors: NotFound / PermissionDenied naming the file when
// it cannot be opened; DataLoss naming the file when a compressed stream is truncated or
// corrupt (`out` then holds the bytes decoded before the damage). No size limit: the
// caller owns the memory of a whole input.
absl::Status ReadWholeInput(const InputFile& in, std::string* out,
                            const std::function<void(uint64_t)>& on_input_bytes = nullptr);

// The location of a document as users see it: "<file>:<line>".
std::string DocLocation(const std::vector<InputFile>& inputs, const DocRef& doc);

}  // namespace trainscope::data

#endif  // TRAINSCOPE_DATA_READER_H_
