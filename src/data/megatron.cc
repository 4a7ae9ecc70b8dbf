// Megatron .bin/.idx reading, validation and index writing (layout in megatron.h).
#include "trainscope/data/megatron.h"

#include <sys/stat.h>

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "trainscope/core/os.h"
#include "trainscope/core/paths.h"
#include "trainscope/core/status.h"

namespace trainscope::data {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kHeaderBytes = 34;

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

}  // namespace

size_t MegatronItemSize(uint8_t code) {
  switch (code) {
    case 1:
    case 2:
      return 1;
    case 3:
    case 8:
      return 2;
    case 4:
    case 7:
      return 4;
    case 5:
    case 6:
      return 8;
    default:
      return 0;
  }
}

MegatronDType MegatronOptimalDType(int64_t vocab_size) {
  return vocab_size < 65500 ? MegatronDType::kUint16 : MegatronDType::kInt32;
}

std::string MegatronPrefix(const std::string& path) {
  if (absl::EndsWith(path, ".idx") || absl::EndsWith(path, ".bin")) {
    return path.substr(0, path.size() - 4);
  }
  return path;
}

absl::StatusOr<MegatronIndex> ReadMegatronIndex(const std::string& prefix) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  // Both files are regular: a device (/dev/zero) would be read until memory runs out, a
  // FIFO without a writer would block. stat() only, so neither is opened.
  TS_RETURN_IF_ERROR(
      CheckRegularFile(idx_path, "a Megatron index is read whole and checked against its size"));
  TS_RETURN_IF_ERROR(CheckRegularFile(bin_path, "a Megatron .bin is read with random access"));
  TS_ASSIGN_OR_RETURN(std::string idx, Os::Default()->ReadFile(idx_path));
  auto bad = [&](size_t offset, const std::string& what) {
    return absl::DataLossError(absl::StrCat(idx_path, ": byte ", offset, ": ", what));
  };
  if (idx.size() < kHeaderBytes) return bad(0, "file shorter than the 34-byte header");
  if (std::memcmp(idx.data(), kMagic, 9) != 0) return bad(0, "not a Megatron index (magic)");
  const uint64_t version = Load<uint64_t>(idx.data() + 9);
  if (version != 1) return bad(9, absl::StrCat("unsupported version ", version));
  MegatronIndex index;
  index.dtype_code = static_cast<uint8_t>(idx[17]);
  if (MegatronItemSize(index.dtype_code) == 0) {
    return bad(17, absl::StrCat("unknown dtype code ", int(index.dtype_code)));
  }
  // The declared counts are checked against the file size before anything is allocated:
  // each needs 12 (sequence) or 8 (document index) bytes of the file.
  const uint64_t n = Load<uint64_t>(idx.data() + 18);
  const uint64_t d = Load<uint64_t>(idx.data() + 26);
  const uint64_t body = idx.size() - kHeaderBytes;
  if (n > body / 12) {
    return bad(18, absl::StrCat("sequence count ", n, " needs more than the file's ", idx.size(),
                                " bytes (12 bytes per sequence)"));
  }
  if (d > body / 8) {
    return bad(26, absl::StrCat("document index count ", d, " needs more than the file's ",
                                idx.size(), " bytes (8 bytes per index)"));
  }
  const uint64_t want = kHeaderBytes + 12 * n + 8 * d;
  if (idx.size() != want && idx.size() != want + n) {
    return bad(18, absl::StrCat("file size ", idx.size(), " does not match ", n, " sequences and ",
                                d, " document indices (expected ", want, ")"));
  }
  index.multimodal = idx.size() == want + n && n > 0;
  index.lengths.resize(n);
  index.pointers.resize(n);
  index.doc_idx.resize(d);
  const char* p = idx.data() + kHeaderBytes;
  if (n) std::memcpy(index.lengths.data(), p, 4 * n);
  if (n) std::memcpy(index.pointers.data(), p + 4 * n, 8 * n);
  if (d) std::memcpy(index.doc_idx.data(), p + 12 * n, 8 * d);
  const size_t item = MegatronItemSize(index.dtype_code);
  int64_t expect_ptr = 0;
  for (uint64_t i = 0; i < n; ++i) {
    if (index.lengths[i] < 0) return bad(kHeaderBytes + 4 * i, "negative sequence length");
    if (expect_ptr > (int64_t{1} << 60)) {  // 2^31 tokens * 8 bytes per step: no overflow
      return bad(kHeaderBytes + 4 * i, "sequence lengths add up to more than 2^60 bytes");
    }
    if (index.pointers[i] != expect_ptr) {
      return bad(kHeaderBytes + 4 * n + 8 * i,
                 absl::StrCat("sequence ", i, " pointer ", index.pointers[i],
                              " inconsistent with the lengths (expected ", expect_ptr, ")"));
    }
    expect_ptr += static_cast<int64_t>(index.lengths[i]) * item;
  }
  if (d == 0 || index.doc_idx[0] != 0 || index.doc_idx[d - 1] != static_cast<int64_t>(n)) {
    return bad(kHeaderBytes + 12 * n,
               "document indices must start at 0 and end at the sequence count");
  }
  for (uint64_t j = 1; j < d; ++j) {
    if (index.doc_idx[j] < index.doc_idx[j - 1]) {
      return bad(kHeaderBytes + 12 * n + 8 * j, "document indices decrease");
    }
  }
  struct stat st;
  if (stat(bin_path.c_str(), &st) != 0)
    return absl::NotFoundError(absl::StrCat(bin_path, ": no such file"));
  if (static_cast<int64_t>(st.st_size) != expect_ptr) {
    return absl::DataLossError(
        absl::StrCat(bin_path, ": size ", st.st_size, " bytes, the index describes ", expect_ptr));
  }
  return index;
}

absl::Status WriteMegatronIndex(const std::string& prefix, MegatronDType dtype,
                                const std::vector<int32_t>& lengths,
                                const std::vector<int64_t>& doc_idx) {
  std::string out;
  out.reserve(kHeaderBytes + 12 * lengths.size() + 8 * doc_idx.size());
  out.append(kMagic, 9);
  Put<uint64_t>(&out, 1);
  Put<uint8_t>(&out, static_cast<uint8_t>(dtype));
  Put<uint64_t>(&out, lengths.size());
  Put<uint64_t>(&out, doc_idx.size());
  out.append(reinterpret_cast<const char*>(lengths.data()), 4 * lengths.size());
  const size_t item = MegatronItemSize(static_cast<uint8_t>(dtype));
  int64_t ptr = 0;
  for (int32_t len : lengths) {
    Put<int64_t>(&out, ptr);
    ptr += static_cast<int64_t>(len) * item;
  }
  out.append(reinterpret_cast<const char*>(doc_idx.data()), 8 * doc_idx.size());
  // Through a symlink: replace the file it points at and keep the link (core/paths.h).
  TS_ASSIGN_OR_RETURN(std::string target, ResolveOutputPath(prefix + ".idx"));
  return WriteFileAtomic(target, out);
}

absl::Status ReadMegatronSequence(std::FILE* bin, const MegatronIndex& index, size_t i,
                                  std::vector<int64_t>* tokens) {
  const size_t item = MegatronItemSize(index.dtype_code);
  const size_t n = index.lengths[i];
  std::string raw(n * item, '\0');
  if (std::fseek(bin, index.pointers[i], SEEK_SET) != 0 ||
      std::fread(raw.data(), 1, raw.size(), bin) != raw.size()) {
    return absl::DataLossError(
        absl::StrCat("cannot read sequence ", i, " at byte ", index.pointers[i]));
  }
  tokens->resize(n);
  const char* p = raw.data();
  for (size_t k = 0; k < n; ++k, p += item) {
    int64_t v = 0;
    switch (index.dtype_code) {
      case 1:
        v = Load<uint8_t>(p);
        break;
      case 2:
        v = Load<int8_t>(p);
        break;
      case 3:
        v = Load<int16_t>(p);
        break;
      case 4:
        v = Load<int32_t>(p);
        break;
      case 5:
        v = Load<int64_t>(p);
        break;
      case 6:
        v = static_cast<int64_t>(Load<double>(p));
        break;
      case 7:
        v = static_cast<int64_t>(Load<float>(p));
        break;
      case 8:
        v = Load<uint16_t>(p);
        break;
    }
    (*tokens)[k] = v;
  }
  return absl::OkStatus();
}

}  // namespace trainscope::data
