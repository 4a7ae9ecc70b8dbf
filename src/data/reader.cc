// Corpus reading: input expansion, line splitting, JSONL decoding, batching.
//
// The reader runs on one thread. By default it decompresses, finds line ends (memchr) and
// decodes JSON (simdjson ondemand, ~GB/s), copying documents back to back into a batch
// buffer so workers get few large allocations. With raw_jsonl_blocks, uncompressed JSONL is
// only cut into blocks of whole lines (in place in a memory mapping, or read into padded
// buffers); the consumer's threads split and decode them (JsonlBlockDecoder), parsing each
// line where it lies.
#include "trainscope/data/reader.h"

#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "data/byte_stream.h"
#include "nlohmann/json.hpp"
#include "simdjson.h"
#include "trainscope/core/os.h"
#include "trainscope/core/paths.h"
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

// ---------------------------------------------------------------- inputs

namespace {

bool IsDir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

absl::Status AddFile(const std::string& path, InputFormat forced, const std::string& root,
                     std::vector<InputFile>* out) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  // Pipes are read as streams (<(zcat ...)); a device would be read without end.
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) || S_ISSOCK(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file (",
                                                   std::string(FileTypeName(st.st_mode)),
                                                   "): corpora are read from files or pipes"));
  }
  InputFile f;
  f.path = path;
  f.root = root;
  f.size_bytes = st.st_size;
  std::string name = path;
  if (absl::EndsWith(name, ".zst") || absl::EndsWith(name, ".zstd")) {
    f.compression = InputFile::kZstd;
    name = name.substr(0, name.rfind('.'));
  } else if (absl::EndsWith(name, ".gz")) {
    f.compression = InputFile::kGzip;
    name = name.substr(0, name.size() - 3);
  }
  if (forced != InputFormat::kAuto) {
    f.format = forced;
  } else if (absl::EndsWith(name, ".jsonl") || absl::EndsWith(name, ".json") ||
             absl::EndsWith(name, ".ndjson")) {
    f.format = InputFormat::kJsonl;
  } else if (absl::EndsWith(name, ".idx") || absl::EndsWith(name, ".bin")) {
    f.format = InputFormat::kMegatron;
  } else {
    f.format = InputFormat::kText;
  }
  if (f.format == InputFormat::kMegatron) {
    // A dataset is one input however it is named (.bin, .idx or the prefix).
    f.path = MegatronPrefix(path) + ".idx";
    struct stat bs;
    if (stat((MegatronPrefix(path) + ".bin").c_str(), &bs) == 0) f.size_bytes = bs.st_size;
    for (const auto& e : *out) {
      if (e.path == f.path) return absl::OkStatus();
    }
  }
  out->push_back(std::move(f));
  return absl::OkStatus();
}

// `root`: the directory argument the walk started from.
absl::Status AddDir(const std::string& dir, InputFormat forced, const std::string& root,
                    std::vector<InputFile>* out) {
  TS_ASSIGN_OR_RETURN(auto names, Os::Default()->ListDir(dir));
  for (const auto& n : names) {
    if (n.empty() || n[0] == '.') continue;
    std::string p = absl::StrCat(dir, "/", n);
    if (IsDir(p)) {
      TS_RETURN_IF_ERROR(AddDir(p, forced, root, out));
    } else {
      TS_RETURN_IF_ERROR(AddFile(p, forced, root, out));
    }
  }
  return absl::OkStatus();
}

// A Megatron dataset named by its prefix (docs/formats.md): no file of that name, but
// PREFIX.idx or PREFIX.bin exists (a missing half is reported when the dataset is read).
bool IsMegatronPrefix(const std::string& a, InputFormat format) {
  if (format != InputFormat::kAuto && format != InputFormat::kMegatron) return false;
  Os* os = Os::Default();
  if (os->FileExists(a)) return false;
  return os->FileExists(a + ".idx") || os->FileExists(a + ".bin");
}

}  // namespace

absl::StatusOr<std::vector<InputFile>> ExpandInputs(const std::vector<std::string>& args,
                                                    InputFormat format) {
  std::vector<InputFile> out;
  for (const auto& a : args) {
    if (a.find_first_of("*?[") != std::string::npos && !Os::Default()->FileExists(a)) {
      glob_t g;
      int rc = glob(a.c_str(), 0, nullptr, &g);
      if (rc != 0) {
        globfree(&g);
        return absl::NotFoundError(absl::StrCat(a, ": no file matches this pattern"));
      }
      std::vector<std::string> paths(g.gl_pathv, g.gl_pathv + g.gl_pathc);
      globfree(&g);
      for (const auto& p : paths) {
        TS_RETURN_IF_ERROR(IsDir(p) ? AddDir(p, format, p, &out) : AddFile(p, format, "", &out));
      }
    } else if (IsDir(a)) {
      TS_RETURN_IF_ERROR(AddDir(a, format, a, &out));
    } else if (IsMegatronPrefix(a, format)) {
      TS_RETURN_IF_ERROR(AddFile(a + ".idx", InputFormat::kMegatron, "", &out));
    } else {
      TS_RETURN_IF_ERROR(AddFile(a, format, "", &out));
    }
  }
  if (out.empty()) return absl::InvalidArgumentError("no input files");
  return out;
}

absl::Status CheckOutputsAgainstInputs(const std::vector<std::string>& outputs,
                                       const std::vector<InputFile>& inputs) {
  for (const std::string& o : outputs) TS_RETURN_IF_ERROR(CheckOutputFile(o));
  std::vector<std::string> paths;
  std::set<std::string> roots;
  for (const InputFile& in : inputs) {
    if (in.format == InputFormat::kMegatron) {
      const std::string prefix = MegatronPrefix(in.path);
      paths.push_back(prefix + ".idx");
      paths.push_back(prefix + ".bin");
    } else {
      paths.push_back(in.path);
    }
    if (!in.root.empty()) roots.insert(in.root);
  }
  paths.insert(paths.end(), roots.begin(), roots.end());
  return CheckOutputNotInput(outputs, paths);
}

std::string DocLocation(const std::vector<InputFile>& inputs, const DocRef& doc) {
  const std::string& p = doc.file < inputs.size() ? inputs[doc.file].path : std::string("?");
  return absl::StrCat(p, ":", doc.line);
}

// ---------------------------------------------------------------- reading

namespace {

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

// Number of `c` bytes in [p, p + n).
size_t CountByte(const char* p, size_t n, char c) {
  size_t count = 0, i = 0;
#ifdef __AVX2__
  const __m256i needle = _mm256_set1_epi8(c);
  for (; i + 32 <= n; i += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i));
    count +=
        _mm_popcnt_u32(static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, needle))));
  }
#endif
  for (; i < n; ++i) count += p[i] == c;
  return count;
}

// Reading a mapped page of a file that shrank after it was mapped (or whose disk failed)
// raises SIGBUS. The mappings in use are registered here so that a handler can name the
// file and exit 2 like any other unreadable input, instead of a bare "Bus error". The
// library installs no handler (it leaves the host process's signals alone): the
// executable does, with InstallMappedInputSigbusHandler().
struct MappedInput {
  std::atomic<uintptr_t> begin{0}, end{0};
  const char* path = nullptr;  // owned by the FileMapping, which outlives the entry
};
constexpr int kMaxMapped = 1024;  // mappings alive at once: about the blocks in flight
MappedInput g_mapped[kMaxMapped];
struct sigaction g_previous_sigbus;

void WriteAll(const char* s) {
  for (size_t n = strlen(s); n > 0;) {
    const ssize_t w = write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= w;
  }
}

void OnSigbus(int sig, siginfo_t* info, void* context) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (MappedInput& m : g_mapped) {
    const uintptr_t b = m.begin.load(std::memory_order_acquire);
    if (b != 0 && addr >= b && addr < m.end.load(std::memory_order_acquire)) {
      char offset[24];
      int n = 0;
      for (uintptr_t v = addr - b; n == 0 || v > 0; v /= 10) offset[n++] = '0' + v % 10;
      WriteAll("trainscope: ");
      WriteAll(m.path);
      WriteAll(": cannot read byte ");
      for (; n > 0; --n) (void)!write(STDERR_FILENO, &offset[n - 1], 1);
      WriteAll(
          " of the memory-mapped input: the file shrank while it was read, or the "
          "disk failed (corpora must not change during a scan; --no-mmap reads with "
          "read())\n");
      _exit(2);
    }
  }
  // Not ours: whatever handled SIGBUS before.
  if (g_previous_sigbus.sa_flags & SA_SIGINFO) {
    g_previous_sigbus.sa_sigaction(sig, info, context);
  } else if (g_previous_sigbus.sa_handler != SIG_IGN && g_previous_sigbus.sa_handler != SIG_DFL) {
    g_previous_sigbus.sa_handler(sig);
  } else {
    signal(SIGBUS, SIG_DFL);
    raise(SIGBUS);
  }
}

// A read-only mapping of a whole file, unmapped with its last block.
struct FileMapping {
  const char* data = nullptr;
  size_t size = 0;
  std::string path;
  int slot = -1;  // in g_mapped, or -1 when all slots are taken
  FileMapping(const char* d, size_t n, const std::string& p) : data(d), size(n), path(p) {
    static std::mutex mu;
    std::lock_guard<std::mutex> l(mu);
    for (int i = 0; i < kMaxMapped; ++i) {
      if (g_mapped[i].begin.load() == 0) {
        g_mapped[i].path = path.c_str();
        g_mapped[i].end.store(reinterpret_cast<uintptr_t>(d) + n, std::memory_order_release);
        g_mapped[i].begin.store(reinterpret_cast<uintptr_t>(d), std::memory_order_release);
        slot = i;
        break;
      }
    }
  }
  ~FileMapping() {
    if (slot >= 0) g_mapped[slot].begin.store(0, std::memory_order_release);
    munmap(const_cast<char*>(data), size);
  }
};

// One block of a mapping: when its batch is done the block's pages leave this process
// (MADV_DONTNEED on a read-only file mapping drops page-table entries, not the page cache),
// so the resident set stays at the blocks in flight however big the file.
void DropPages(const FileMapping& map, const char* begin, size_t size) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t b = reinterpret_cast<uintptr_t>(begin) & ~(page - 1);
  const uintptr_t e = std::min(reinterpret_cast<uintptr_t>(begin) + size + page - 1,
                               reinterpret_cast<uintptr_t>(map.data) + map.size) &
                      ~(page - 1);
  if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

struct MappedBlock {
  std::shared_ptr<FileMapping> map;
  const char* begin;
  size_t size;
  ~MappedBlock() { DropPages(*map, begin, size); }
};

// Reads an uncompressed regular JSONL file in raw blocks of whole lines, in place from a
// memory mapping. Returns false (having read nothing) when the file cannot be mapped.
bool ReadMappedJsonl(int fd, uint64_t size, const InputFile& in, uint32_t file,
                     const ReaderOptions& opts, BatchBuilder* out, BadRecords* bad) {
  if (size == 0 || size > std::numeric_limits<size_t>::max()) return false;
  void* addr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (addr == MAP_FAILED) return false;
  auto map = std::make_shared<FileMapping>(static_cast<const char*>(addr), size, in.path);
  madvise(addr, size, MADV_SEQUENTIAL);
  const size_t block = std::max<size_t>(opts.batch_bytes, 1 << 16);
  const char* const data = map->data;
  uint64_t off = in.range_begin, line_no = in.first_line;
  if (in.range_end != 0) size = std::min<uint64_t>(size, in.range_end);
  while (off < size) {
    size_t end = std::min<uint64_t>(block, size - off);
    if (off + end < size) {
      const char* nl = static_cast<const char*>(memrchr(data + off, '\n', end));
      if (nl != nullptr) {
        end = nl - (data + off) + 1;
      } else {
        // A line longer than the block: it is the block, unless it is over the limit. Its
        // end is searched a block at a time, each searched block's pages dropped at once,
        // so a 100 MB line costs no 100 MB of resident pages.
        const char* e = nullptr;
        for (uint64_t pos = off + end; pos < size && e == nullptr;) {
          const size_t w = static_cast<size_t>(std::min<uint64_t>(block, size - pos));
          e = static_cast<const char*>(std::memchr(data + pos, '\n', w));
          DropPages(*map, data + pos, w);
          pos += w;
        }
        const uint64_t n = (e ? e : data + size) - (data + off);  // without '\n'
        if (n > opts.max_doc_bytes) {
          bad->Add("oversized_record", in.path, line_no,
                   absl::StrCat(n, " bytes > --max-doc-bytes ", opts.max_doc_bytes));
          out->AddInputBytes(std::min<uint64_t>(n + 1, size - off));
          DropPages(*map, data + off, end);
          off = std::min<uint64_t>(off + n + 1, size);
          ++line_no;
          continue;
        }
        end = static_cast<size_t>(std::min<uint64_t>(n + 1, size - off));
      }
    }
    DocBatch b;
    b.raw = true;
    b.raw_file = file;
    b.raw_first_line = line_no;
    b.raw_len = end;
    b.raw_data = data + off;
    b.raw_readable = size - off;
    b.raw_pages = std::make_shared<MappedBlock>(MappedBlock{map, data + off, end});
    b.input_bytes = end;
    line_no += CountByte(data + off, end, '\n');
    off += end;
    if (!out->EmitRaw(std::move(b))) break;
  }
  return true;
}

// Raw blocks need a regular file (its size, pread, mmap); pipes and other streams, such
// as `<(zcat ...)` or /dev/stdin, are read as a stream by the line reader.
bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Reads an uncompressed JSONL file in raw blocks of whole lines (see raw_jsonl_blocks).
absl::Status ReadRawJsonl(const InputFile& in, uint32_t file, const ReaderOptions& opts,
                          BatchBuilder* out, BadRecords* bad) {
  const int fd = ::open(in.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(in.path, ": cannot open"));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::NotFoundError(absl::StrCat(in.path, ": cannot stat"));
  }
  uint64_t size = st.st_size;
  if (opts.raw_jsonl_mmap && S_ISREG(st.st_mode) &&
      ReadMappedJsonl(fd, size, in, file, opts, out, bad)) {
    ::close(fd);
    return absl::OkStatus();
  }
  const size_t block = std::max<size_t>(opts.batch_bytes, 1 << 16);
  const size_t pad = simdjson::SIMDJSON_PADDING;
  auto read_at = [&](char* dst, size_t n, uint64_t off) -> absl::StatusOr<size_t> {
    size_t got = 0;
    while (got < n) {
      ssize_t r = ::pread(fd, dst + got, n - got, off + got);
      if (r < 0) {
        if (errno == EINTR) continue;
        return absl::DataLossError(absl::StrCat(in.path, ": read error"));
      }
      if (r == 0) break;
      got += r;
    }
    return got;
  };
  absl::Status status;
  uint64_t off = in.range_begin, line_no = in.first_line;
  if (in.range_end != 0) size = std::min<uint64_t>(size, in.range_end);
  std::string scan;
  while (off < size) {
    DocBatch b;
    // A recycled buffer keeps its size, so the resize below writes nothing: the read
    // fills it. (Zero-filling 4 MB per block cost as much as hashing it.)
    if (opts.text_pool != nullptr) b.text = opts.text_pool->GetUncleared();
    const size_t want = static_cast<size_t>(std::min<uint64_t>(block, size - off));
    b.text.resize(want + pad);
    auto got = read_at(b.text.data(), want, off);
    if (!got.ok()) {
      status = got.status();
      break;
    }
    size_t end = *got;
    if (end == 0) break;  // file shrank
    if (off + end < size) {
      const char* nl = static_cast<const char*>(memrchr(b.text.data(), '\n', end));
      if (nl != nullptr) {
        end = nl - b.text.data() + 1;
      } else {
        // A line longer than the block: find its end.
        uint64_t e = off + end;
        bool found = false;
        scan.resize(1 << 20);
        while (e < size && !found) {
          auto g = read_at(scan.data(), scan.size(), e);
          if (!g.ok() || *g == 0) break;
          const char* p = static_cast<const char*>(std::memchr(scan.data(), '\n', *g));
          if (p != nullptr) {
            e += p - scan.data();
            found = true;
          } else {
            e += *g;
          }
        }
        const uint64_t n = e - off;  // line length without '\n'
        if (n > opts.max_doc_bytes) {
          bad->Add("oversized_record", in.path, line_no,
                   absl::StrCat(n, " bytes > --max-doc-bytes ", opts.max_doc_bytes));
          out->AddInputBytes(std::min<uint64_t>(n + 1, size - off));
          off = std::min<uint64_t>(e + 1, size);
          ++line_no;
          continue;
        }
        end = static_cast<size_t>(std::min<uint64_t>(n + 1, size - off));
        b.text.resize(end + pad);
        auto g = read_at(b.text.data(), end, off);
        if (!g.ok()) {
          status = g.status();
          break;
        }
        end = *g;
      }
    }
    std::memset(b.text.data() + end, 0, pad);
    b.text.resize(end + pad);
    b.raw = true;
    b.raw_file = file;
    b.raw_first_line = line_no;
    b.raw_len = end;
    b.input_bytes = end;
    line_no += CountByte(b.text.data(), end, '\n');
    off += end;
    if (!out->EmitRaw(std::move(b))) break;
  }
  ::close(fd);
  if (status.ok() && size == 0) bad->Add("empty_file", in.path, 0, "no data");
  return status;
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

void InstallMappedInputSigbusHandler() {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction sa = {};
    sa.sa_sigaction = OnSigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &g_previous_sigbus);
  });
}

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
