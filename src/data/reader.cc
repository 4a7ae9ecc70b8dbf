// Corpus reading: line splitting, JSONL decoding, batching.
//
// The reader runs on one thread. By default it decompresses, finds line ends (memchr) and
// decodes JSON (simdjson ondemand, ~GB/s), copying documents back to back into a batch
// buffer so workers get few large allocations. With raw_jsonl_blocks, uncompressed JSONL is
// only cut into blocks of whole lines (in place in a memory mapping, or read into padded
// buffers); the consumer's threads split and decode them (JsonlBlockDecoder), parsing each
// line where it lies.
//
// Input expansion is in reader_inputs.cc, reading JSONL in raw blocks (and the SIGBUS
// handler for mapped inputs) in reader_raw_jsonl.cc.
#include "trainscope/data/reader.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "data/byte_stream.h"
#include "data/reader_internal.h"
#include "nlohmann/json.hpp"
#include "simdjson.h"
#include "trainscope/core/status.h"
#include "trainscope/data/megatron.h"
#include "trainscope/tokenizer/tokenizer.h"

namespace trainscope::data {

// ---------------------------------------------------------------- BadRecords

void BadRecords::Add(std::string_view kind, std::string_view file, uint64_t line,
                     std::string_view what) {
  ++counts_[std::string(kind)];
  if (examples_.size() < kMaxExamples) {
    const std::string f(file), k(kind), w(what);
    examples_.push_back(line > 0 ? absl::StrCat(f, ":", line, ": ", k, ": ", w)
                                 : absl::StrCat(f, ": ", k, ": ", w));
  }
}

void BadRecords::Merge(const BadRecords& other) {
  for (const auto& [k, v] : other.counts_) counts_[k] += v;
  for (const auto& e : other.examples_) {
    if (examples_.size() < kMaxExamples) examples_.push_back(e);
  }
}

uint64_t BadRecords::total() const {
  uint64_t t = 0;
  for (const auto& [k, v] : counts_) t += v;
  return t;
}

nlohmann::json BadRecords::ToJson() const {
  nlohmann::json j;
  j["total"] = total();
  j["by_kind"] = nlohmann::json::object();
  for (const auto& [k, v] : counts_) j["by_kind"][k] = v;
  j["examples"] = examples_;
  return j;
}

// ---------------------------------------------------------------- reading

namespace {

using internal::BatchBuilder;
using internal::ReadRawJsonl;

// Decodes JSONL lines. simdjson needs SIMDJSON_PADDING readable bytes after the input,
// so each line is copied into a padded scratch buffer (a memcpy, cheap next to parsing).
class JsonlDecoder {
 public:
  JsonlDecoder(const ReaderOptions& o) : opts_(o) {}
  // `readable`: bytes readable from line.data() on; with SIMDJSON_PADDING to spare the line
  // is parsed where it lies, otherwise from a padded copy.
  template <typename Out>
  void Line(std::string_view line, const InputFile& in, uint32_t file, uint64_t line_no, Out* out,
            BadRecords* bad, size_t readable = 0) {
    size_t b = 0;
    while (b < line.size() && (line[b] == ' ' || line[b] == '\t' || line[b] == '\r')) ++b;
    if (b == line.size()) return;  // blank line: not a record
    simdjson::padded_string_view view;
    if (readable >= line.size() + simdjson::SIMDJSON_PADDING) {
      view = simdjson::padded_string_view(line.data(), line.size(), readable);
    } else {
      if (scratch_.size() < line.size() + simdjson::SIMDJSON_PADDING) {
        scratch_.resize(line.size() + simdjson::SIMDJSON_PADDING + 4096);
      }
      std::memcpy(scratch_.data(), line.data(), line.size());
      std::memset(scratch_.data() + line.size(), 0, simdjson::SIMDJSON_PADDING);
      view = simdjson::padded_string_view(scratch_.data(), line.size(), scratch_.size());
    }
    simdjson::ondemand::document doc;
    auto err = parser_.iterate(view).get(doc);
    std::string_view text, id;
    bool have_text = false, text_not_string = false;
    id_buf_.clear();
    if (!err) {
      simdjson::ondemand::object obj;
      err = doc.get_object().get(obj);
      if (!err) {
        for (auto field : obj) {
          std::string_view key;
          if ((err = field.unescaped_key().get(key))) break;
          if (key == opts_.text_field) {
            auto value = field.value();
            simdjson::ondemand::json_type type;
            if ((err = value.type().get(type))) break;
            if (type != simdjson::ondemand::json_type::string) {
              text_not_string = true;
              continue;  // ondemand skips unread values
            }
            // Fast path: a string without escapes is used where it lies in the line (its
            // UTF-8 was validated by simdjson's stage 1); otherwise it is unescaped into the
            // parser's string buffer, which later strings of the same line do not overwrite.
            std::string_view raw;
            if ((err = value.raw_json_token().get(raw))) break;
            while (!raw.empty() && raw.back() != '"') raw.remove_suffix(1);  // trailing spaces
            if (raw.size() >= 2 && raw.front() == '"' &&
                std::memchr(raw.data(), '\\', raw.size()) == nullptr) {
              text = raw.substr(1, raw.size() - 2);
            } else if ((err = value.get_string().get(text))) {
              break;
            }
            have_text = true;
          } else if (!opts_.id_field.empty() && key == opts_.id_field) {
            auto value = field.value();
            simdjson::ondemand::json_type type;
            if ((err = value.type().get(type))) break;
            if (type == simdjson::ondemand::json_type::string) {
              if ((err = value.get_string().get(id))) break;
              id_buf_.assign(id);
            } else {
              std::string_view raw;
              if ((err = value.raw_json_token().get(raw))) break;
              id_buf_.assign(raw);
              while (!id_buf_.empty() && (id_buf_.back() == ' ' || id_buf_.back() == '\r')) {
                id_buf_.pop_back();
              }
            }
          }
        }
      }
    }
    if (err) {
      const bool utf8 = err == simdjson::UTF8_ERROR;
      bad->Add(utf8 ? "invalid_utf8" : "invalid_json", in.path, line_no,
               simdjson::error_message(err));
      return;
    }
    if (!have_text) {
      bad->Add(text_not_string ? "text_not_string" : "missing_text_field", in.path, line_no,
               absl::StrCat("no string field \"", opts_.text_field, "\""));
      return;
    }
    out->Add(text, id_buf_, file, line_no);
  }

 private:
  const ReaderOptions& opts_;
  simdjson::ondemand::parser parser_;
  std::vector<char> scratch_;
  std::string id_buf_;
};

}  // namespace

struct JsonlBlockDecoder::Impl {
  explicit Impl(const ReaderOptions& o) : opts(o), dec(opts) {}
  ReaderOptions opts;
  JsonlDecoder dec;
};

JsonlBlockDecoder::JsonlBlockDecoder(const ReaderOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}
JsonlBlockDecoder::~JsonlBlockDecoder() = default;

void JsonlBlockDecoder::ForEachDoc(
    const InputFile& in, DocBatch* batch,
    absl::FunctionRef<void(std::string_view, std::string_view, uint64_t)> on_doc) {
  Impl& m = *impl_;
  struct Sink {
    absl::FunctionRef<void(std::string_view, std::string_view, uint64_t)> fn;
    void Add(std::string_view text, std::string_view id, uint32_t, uint64_t line) {
      fn(text, id, line);
    }
  } sink{on_doc};
  const char* base = batch->raw_data ? batch->raw_data : batch->text.data();
  const size_t len = batch->raw_len;
  const size_t cap = batch->raw_data ? batch->raw_readable : batch->text.size();
  uint64_t line_no = batch->raw_first_line;
  size_t pos = 0;
  while (pos < len) {
    const char* nl = static_cast<const char*>(std::memchr(base + pos, '\n', len - pos));
    const size_t n = nl ? static_cast<size_t>(nl - (base + pos)) : len - pos;
    if (n > m.opts.max_doc_bytes) {
      batch->bad.Add("oversized_record", in.path, line_no,
                     absl::StrCat(n, " bytes > --max-doc-bytes ", m.opts.max_doc_bytes));
    } else {
      std::string_view line(base + pos, n);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      m.dec.Line(line, in, batch->raw_file, line_no, &sink, &batch->bad, cap - pos);
    }
    ++line_no;
    pos += n + 1;
  }
  batch->raw = false;
}

namespace {

// Raw blocks need a regular file (its size, pread, mmap); pipes and other streams, such
// as `<(zcat ...)` or /dev/stdin, are read as a stream by the line reader.
bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

absl::Status ForEachLine(const InputFile& in, size_t max_doc_bytes, BadRecords* bad,
                         const std::function<void(std::string_view, uint64_t)>& on_line,
                         const std::function<void(uint64_t)>& on_input_bytes) {
  TS_ASSIGN_OR_RETURN(auto stream, OpenInputStream(in));
  constexpr size_t kChunk = 1 << 20;
  std::string buf;  // [0, have) holds unprocessed bytes
  buf.resize(kChunk * 2);
  size_t have = 0;
  uint64_t line_no = in.first_line, total = 0, last_consumed = 0;
  bool skipping = false;  // inside an oversized line
  uint64_t skipped_bytes = 0;
  for (;;) {
    if (buf.size() - have < kChunk) buf.resize(have + kChunk);
    auto got = stream->Read(buf.data() + have, kChunk);
    if (on_input_bytes) on_input_bytes(stream->consumed() - last_consumed);
    last_consumed = stream->consumed();
    if (!got.ok()) {
      bad->Add(absl::StrContains(got.status().message(), "truncated") ? "truncated_stream"
                                                                      : "corrupt_stream",
               in.path, line_no, std::string(got.status().message()));
      if (have > 0 && !skipping) {
        bad->Add("partial_record", in.path, line_no, "record cut by the end of the stream");
      }
      return absl::OkStatus();
    }
    total += *got;
    const size_t end = have + *got;
    const bool eof = *got == 0;
    size_t pos = 0;
    while (pos < end) {
      const char* nl = static_cast<const char*>(std::memchr(buf.data() + pos, '\n', end - pos));
      if (nl == nullptr) break;
      const size_t len = nl - (buf.data() + pos);
      if (skipping) {
        skipping = false;
        bad->Add("oversized_record", in.path, line_no,
                 absl::StrCat(skipped_bytes + len, " bytes > --max-doc-bytes ", max_doc_bytes));
      } else if (len > max_doc_bytes) {
        bad->Add("oversized_record", in.path, line_no,
                 absl::StrCat(len, " bytes > --max-doc-bytes ", max_doc_bytes));
      } else {
        std::string_view line(buf.data() + pos, len);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        on_line(line, line_no);
      }
      ++line_no;
      pos += len + 1;
    }
    // Keep the incomplete tail, or drop it when it is already too long.
    size_t tail = end - pos;
    if (skipping || tail > max_doc_bytes) {
      if (!skipping) skipped_bytes = 0;
      skipping = true;
      skipped_bytes += tail;
      tail = 0;
    } else if (pos > 0) {
      std::memmove(buf.data(), buf.data() + pos, tail);
    }
    have = tail;
    if (eof) {
      if (skipping) {
        bad->Add("oversized_record", in.path, line_no,
                 absl::StrCat(skipped_bytes, " bytes > --max-doc-bytes ", max_doc_bytes));
      } else if (have > 0) {
        std::string_view line(buf.data(), have);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        on_line(line, line_no);
      }
      break;
    }
  }
  if (total == 0) bad->Add("empty_file", in.path, 0, "no data");
  return absl::OkStatus();
}

absl::Status ReadWholeInput(const InputFile& in, std::string* out,
                            const std::function<void(uint64_t)>& on_input_bytes) {
  out->clear();
  TS_ASSIGN_OR_RETURN(auto stream, OpenByteStream(in.path, in.compression));
  constexpr size_t kChunk = 1 << 20;
  uint64_t last_consumed = 0;
  for (;;) {
    const size_t have = out->size();
    out->resize(have + kChunk);
    auto got = stream->Read(out->data() + have, kChunk);
    if (on_input_bytes) on_input_bytes(stream->consumed() - last_consumed);
    last_consumed = stream->consumed();
    if (!got.ok()) {
      out->resize(have);
      return absl::DataLossError(absl::StrCat(in.path, ": ", got.status().message()));
    }
    out->resize(have + *got);
    if (*got == 0) return absl::OkStatus();
  }
}

namespace {

absl::Status ReadMegatron(const InputFile& in, uint32_t file, const ReaderOptions& opts,
                          BatchBuilder* out) {
  const std::string prefix = MegatronPrefix(in.path);
  TS_ASSIGN_OR_RETURN(MegatronIndex index, ReadMegatronIndex(prefix));
  std::FILE* bin = std::fopen((prefix + ".bin").c_str(), "rb");
  if (bin == nullptr) return absl::NotFoundError(absl::StrCat(prefix, ".bin: cannot open"));
  std::unique_ptr<tokenizer::Tokenizer> byte_tok;
  const tokenizer::Tokenizer* tok = opts.tokenizer;
  if (tok == nullptr) {
    byte_tok = tokenizer::NewByteTokenizer();
    tok = byte_tok.get();
  }
  std::vector<int64_t> seq;
  std::vector<int32_t> ids;
  absl::Status status;
  const size_t item = MegatronItemSize(index.dtype_code);
  for (size_t d = 0; d < index.num_documents() && status.ok(); ++d) {
    ids.clear();
    for (int64_t s = index.doc_idx[d]; s < index.doc_idx[d + 1]; ++s) {
      status = ReadMegatronSequence(bin, index, s, &seq);
      if (!status.ok()) break;
      for (int64_t t : seq) ids.push_back(static_cast<int32_t>(t));
      out->AddInputBytes(seq.size() * item);
    }
    const int64_t n = static_cast<int64_t>(ids.size());
    out->Add(tok->Decode(ids), "", file, d + 1, n);
    if (!out->MaybeFlush(false)) break;
  }
  std::fclose(bin);
  return status;
}

}  // namespace

absl::Status ReadCorpus(const std::vector<InputFile>& inputs, const ReaderOptions& options,
                        const std::function<bool(DocBatch&&)>& sink, BadRecords* bad) {
  BadRecords pending;  // raw_jsonl_blocks: bad records go out with the next batch
  BadRecords* const rbad = options.raw_jsonl_blocks ? &pending : bad;
  BatchBuilder out(options, sink, options.raw_jsonl_blocks ? &pending : nullptr);
  JsonlDecoder jsonl(options);
  std::string block;
  const std::function<void(uint64_t)> on_bytes = [&](uint64_t n) { out.AddInputBytes(n); };
  for (uint32_t f = 0; f < inputs.size(); ++f) {
    const InputFile& in = inputs[f];
    if (in.format == InputFormat::kMegatron) {
      TS_RETURN_IF_ERROR(ReadMegatron(in, f, options, &out));
    } else if (in.format == InputFormat::kJsonl && options.raw_jsonl_blocks &&
               in.compression == InputFile::kNone && IsRegularFile(in.path)) {
      TS_RETURN_IF_ERROR(ReadRawJsonl(in, f, options, &out, rbad));
    } else if (in.format == InputFormat::kJsonl) {
      TS_RETURN_IF_ERROR(ForEachLine(
          in, options.max_doc_bytes, rbad,
          [&](std::string_view l, uint64_t n) {
            jsonl.Line(l, in, f, n, &out, rbad);
            out.MaybeFlush(false);
          },
          on_bytes));
    } else if (!options.text_blocks) {
      TS_RETURN_IF_ERROR(ForEachLine(
          in, options.max_doc_bytes, rbad,
          [&](std::string_view l, uint64_t n) {
            if (!l.empty()) out.Add(l, "", f, n);
            out.MaybeFlush(false);
          },
          on_bytes));
    } else {
      // Blank-line separated blocks; a block keeps its inner newlines.
      uint64_t start = 0;
      block.clear();
      auto flush_block = [&] {
        if (!block.empty()) {
          if (block.size() > options.max_doc_bytes) {
            rbad->Add("oversized_record", in.path, start, "block over --max-doc-bytes");
          } else {
            out.Add(block, "", f, start);
          }
        }
        block.clear();
      };
      TS_RETURN_IF_ERROR(ForEachLine(
          in, options.max_doc_bytes, rbad,
          [&](std::string_view l, uint64_t n) {
            if (l.find_first_not_of(" \t\r") == std::string_view::npos) {
              flush_block();
              out.MaybeFlush(false);
              return;
            }
            if (block.empty()) start = n;
            if (!block.empty()) block.push_back('\n');
            if (block.size() <= options.max_doc_bytes) block.append(l);
          },
          on_bytes));
      flush_block();
    }
    if (!out.MaybeFlush(false)) {
      bad->Merge(pending);
      return absl::OkStatus();
    }
  }
  out.MaybeFlush(true);
  bad->Merge(pending);  // those after the last batch
  return absl::OkStatus();
}

}  // namespace trainscope::data
