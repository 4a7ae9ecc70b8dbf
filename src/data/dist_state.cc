// Saving and loading a rank's share (--resume), and share totals as JSON.
#include "data/dist_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "data/doc_analysis.h"
#include "data/spill.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/status.h"
#include "trainscope/tokenizer/tokenizer.h"

namespace trainscope::data {
namespace {

constexpr char kShareMagic[8] = {'T', 'S', 'S', 'H', 'A', 'R', 'E', '1'};

std::string SharePath(const std::string& dir, int rank, const std::string& what) {
  return absl::StrCat(dir, "/share.rank", rank, ".", what);
}

template <typename T>
void StatePut(const std::vector<T>& v, std::string* s) {
  const uint64_t n = v.size();
  s->append(reinterpret_cast<const char*>(&n), 8);
  if (n != 0) s->append(reinterpret_cast<const char*>(v.data()), n * sizeof(T));
}

template <typename T>
bool StateGet(const std::string& s, size_t* p, std::vector<T>* v) {
  uint64_t n = 0;
  if (s.size() - *p < 8) return false;
  std::memcpy(&n, s.data() + *p, 8);
  *p += 8;
  if ((s.size() - *p) / sizeof(T) < n) return false;
  v->resize(n);
  if (n != 0) std::memcpy(v->data(), s.data() + *p, n * sizeof(T));
  *p += n * sizeof(T);
  return true;
}

absl::StatusOr<std::string> StateReadFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::string s;
  char buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, got);
  const bool bad = std::ferror(f);
  std::fclose(f);
  if (bad) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return s;
}

// Copies `n` bytes of a spill file to `path` (atomically).
absl::Status StateCopy(const SpillReader& from, uint64_t n, const std::string& path) {
  TS_ASSIGN_OR_RETURN(auto out, OutputFile::Open(path));
  std::string buf;
  for (uint64_t off = 0; off < n;) {
    const size_t m = static_cast<size_t>(std::min<uint64_t>(n - off, 1 << 20));
    buf.resize(m);
    TS_RETURN_IF_ERROR(from.ReadAt(off, buf.data(), m));
    TS_RETURN_IF_ERROR(out->Write(buf));
    off += m;
  }
  return out->Commit();
}

absl::StatusOr<std::unique_ptr<SpillReader>> StateOpen(const std::string& path, uint64_t size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::DataLossError(absl::StrCat(path, ": saved share file missing"));
  const off_t end = ::lseek(fd, 0, SEEK_END);
  if (end < 0 || static_cast<uint64_t>(end) != size) {
    ::close(fd);
    return absl::DataLossError(
        absl::StrCat(path, ": saved share file has ", end, " bytes, expected ", size));
  }
  return std::make_unique<SpillReader>(fd, path);
}

}  // namespace

// Totals of a share as JSON (summed on rank 0 in rank order).
nlohmann::json ShareTotalsToJson(const ScanResult& r) {
  nlohmann::json bad_counts = nlohmann::json::object();
  for (const auto& [k, v] : r.bad.counts()) bad_counts[k] = v;
  return {{"docs", r.docs},
          {"bytes", r.bytes},
          {"chars", r.chars},
          {"words", r.words},
          {"tokens", r.tokens},
          {"input_bytes", r.input_bytes},
          {"exact", r.exact_duplicate_docs},
          {"normalized", r.normalized_duplicate_docs},
          {"without_shingles", r.docs_without_shingles},
          {"flagged", r.flagged_docs},
          {"flag_docs", r.flag_docs},
          {"lang_docs", r.lang_docs},
          {"lang_bytes", r.lang_bytes},
          {"bad_counts", bad_counts},
          {"bad_examples", r.bad.examples()}};
}

void AddShareTotals(const nlohmann::json& j, ScanResult* r) {
  r->docs += j["docs"].get<uint64_t>();
  r->bytes += j["bytes"].get<uint64_t>();
  r->chars += j["chars"].get<uint64_t>();
  r->words += j["words"].get<uint64_t>();
  r->tokens += j["tokens"].get<uint64_t>();
  r->input_bytes += j["input_bytes"].get<uint64_t>();
  r->exact_duplicate_docs += j["exact"].get<uint64_t>();
  r->normalized_duplicate_docs += j["normalized"].get<uint64_t>();
  r->docs_without_shingles += j["without_shingles"].get<uint64_t>();
  r->flagged_docs += j["flagged"].get<uint64_t>();
  for (const auto& [k, v] : j["flag_docs"].items()) r->flag_docs[k] += v.get<uint64_t>();
  for (const auto& [k, v] : j["lang_docs"].items()) r->lang_docs[k] += v.get<uint64_t>();
  for (const auto& [k, v] : j["lang_bytes"].items()) r->lang_bytes[k] += v.get<uint64_t>();
  std::map<std::string, uint64_t> counts;
  for (const auto& [k, v] : j["bad_counts"].items()) counts[k] = v.get<uint64_t>();
  r->bad.Merge(BadRecords::FromParts(counts, j["bad_examples"].get<std::vector<std::string>>()));
}

std::string ShareStateKey(const std::vector<InputFile>& share_inputs, const ScanOptions& opt,
                          int rank, int world) {
  nlohmann::json in = nlohmann::json::array();
  for (const auto& f : share_inputs) {
    in.push_back({f.path, f.size_bytes, static_cast<int>(f.format), static_cast<int>(f.compression),
                  f.range_begin, f.range_end, f.first_line});
  }
  const ReaderOptions& r = opt.reader;
  nlohmann::json k = {{"rank", rank},
                      {"world", world},
                      {"inputs", in},
                      {"tokenizer", opt.tokenizer ? opt.tokenizer->name() : "byte"},
                      {"analysis",
                       {opt.near_dup, opt.noise, opt.language, opt.ngram, opt.bands, opt.rows,
                        opt.minhash_seed, opt.c4_min_sentences, kMinHashVersion}},
                      {"reader", {r.text_field, r.id_field, r.text_blocks, r.max_doc_bytes}},
                      {"ids", !opt.verdicts_path.empty()},
                      {"locations", opt.keep_doc_arrays}};
  return k.dump();
}

absl::Status SaveShareState(const ScanShare& share, const ScanOptions& opt, const std::string& dir,
                            int rank, const std::string& key) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(dir, ": cannot create: ", ec.message()));
  const uint64_t n = share.res.docs;
  const int perms = opt.bands * opt.rows;
  if (opt.near_dup) {
    for (int b = 0; b < opt.bands; ++b) {
      TS_RETURN_IF_ERROR(
          StateCopy(*share.band_files[b], n * 8, SharePath(dir, rank, absl::StrCat("band", b))));
    }
    TS_RETURN_IF_ERROR(StateCopy(*share.sig_file, n * perms * 2, SharePath(dir, rank, "sigs")));
  }
  // The meta file last: its presence says the share is complete.
  const std::string header =
      nlohmann::json{{"key", key}, {"totals", ShareTotalsToJson(share.res)}}.dump();
  std::string s(kShareMagic, sizeof(kShareMagic));
  const uint64_t hl = header.size();
  s.append(reinterpret_cast<const char*>(&hl), 8);
  s += header;
  StatePut(share.raw_hash, &s);
  StatePut(share.norm_hash, &s);
  StatePut(share.tokens, &s);
  StatePut(share.chars, &s);
  StatePut(share.flags, &s);
  StatePut(share.langs, &s);
  StatePut(share.has_signature, &s);
  StatePut(share.file, &s);
  StatePut(share.line, &s);
  std::string ids;
  for (const auto& id : share.ids) {
    const uint32_t len = static_cast<uint32_t>(id.size());
    ids.append(reinterpret_cast<const char*>(&len), 4);
    ids += id;
  }
  const uint64_t il = ids.size();
  s.append(reinterpret_cast<const char*>(&il), 8);
  s += ids;
  TS_ASSIGN_OR_RETURN(auto out, OutputFile::Open(SharePath(dir, rank, "meta")));
  TS_RETURN_IF_ERROR(out->Write(s));
  return out->Commit();
}

absl::StatusOr<std::optional<ScanShare>> LoadShareState(const ScanOptions& opt,
                                                        const std::string& dir, int rank,
                                                        const std::string& key) {
  const std::string meta = SharePath(dir, rank, "meta");
  if (!std::filesystem::exists(meta)) return std::optional<ScanShare>();
  TS_ASSIGN_OR_RETURN(std::string s, StateReadFile(meta));
  auto cut = [&] { return absl::DataLossError(absl::StrCat(meta, ": saved share cut short")); };
  if (s.size() < 16 || std::memcmp(s.data(), kShareMagic, 8) != 0) {
    return absl::DataLossError(absl::StrCat(meta, ": not a saved share (bad magic)"));
  }
  uint64_t hl = 0;
  std::memcpy(&hl, s.data() + 8, 8);
  if (s.size() - 16 < hl) return cut();
  nlohmann::json header;
  if (!ParseJsonText(std::string_view(s).substr(16, hl), kJsonMaxDepth, &header, nullptr) ||
      !header.is_object() || !header.contains("key") || !header["key"].is_string()) {
    return cut();
  }
  if (header["key"].get<std::string>() != key) return std::optional<ScanShare>();  // other job
  ScanShare share;
  if (opt.tokenizer) share.res.tokenizer = opt.tokenizer->name();
  AddShareTotals(header["totals"], &share.res);
  size_t p = 16 + hl;
  if (!StateGet(s, &p, &share.raw_hash) || !StateGet(s, &p, &share.norm_hash) ||
      !StateGet(s, &p, &share.tokens) || !StateGet(s, &p, &share.chars) ||
      !StateGet(s, &p, &share.flags) || !StateGet(s, &p, &share.langs) ||
      !StateGet(s, &p, &share.has_signature) || !StateGet(s, &p, &share.file) ||
      !StateGet(s, &p, &share.line)) {
    return cut();
  }
  uint64_t il = 0;
  if (s.size() - p < 8) return cut();
  std::memcpy(&il, s.data() + p, 8);
  p += 8;
  if (s.size() - p < il) return cut();
  for (const size_t end = p + il; p < end;) {
    uint32_t len = 0;
    if (end - p < 4) return cut();
    std::memcpy(&len, s.data() + p, 4);
    if (end - p - 4 < len) return cut();
    share.ids.emplace_back(s, p + 4, len);
    p += 4 + len;
  }
  const uint64_t n = share.res.docs;
  if (share.raw_hash.size() != n) return cut();
  if (opt.near_dup) {
    const int perms = opt.bands * opt.rows;
    for (int b = 0; b < opt.bands; ++b) {
      TS_ASSIGN_OR_RETURN(auto r, StateOpen(SharePath(dir, rank, absl::StrCat("band", b)), n * 8));
      share.band_files.push_back(std::move(r));
    }
    TS_ASSIGN_OR_RETURN(share.sig_file, StateOpen(SharePath(dir, rank, "sigs"), n * perms * 2));
  }
  return std::optional<ScanShare>(std::move(share));
}

}  // namespace trainscope::data
