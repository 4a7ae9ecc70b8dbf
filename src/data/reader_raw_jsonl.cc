// JSONL in raw blocks of whole lines (ReaderOptions::raw_jsonl_blocks): the reader only
// cuts an uncompressed file into blocks, in place in a memory mapping (its pages dropped as
// each block's batch is done) or read into padded buffers with pread; the consumer's
// threads split and decode them (JsonlBlockDecoder). Also the SIGBUS handler that names a
// mapped file which shrank while it was read.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "data/reader_internal.h"
#include "simdjson.h"
#include "trainscope/data/reader.h"

namespace trainscope::data {
namespace {

using internal::BatchBuilder;

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

}  // namespace

namespace internal {

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

}  // namespace internal

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

}  // namespace trainscope::data
