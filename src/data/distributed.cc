// The distributed scan: shares, global numbering, exact and near duplicates resolved over all
// ranks with all-to-all exchanges (dist_dedup.cc), the final stage on rank 0 (see
// distributed.h).
#include "trainscope/data/distributed.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "data/clean_internal.h"
#include "data/dist_dedup.h"
#include "data/dist_exchange.h"
#include "data/dist_state.h"
#include "data/scan_internal.h"
#include "data/spill.h"
#include "nlohmann/json.hpp"
#include "trainscope/comm/comm.h"
#include "trainscope/core/json_text.h"
#include "trainscope/core/status.h"

namespace trainscope::data {
namespace {

constexpr uint32_t kDistNoDoc = ScanResult::kNoDoc;

// Counts '\n' in [begin, end) of a file (pread in 1 MB chunks).
absl::StatusOr<uint64_t> DistCountLines(const InputFile& in, uint64_t begin, uint64_t end) {
  const int fd = ::open(in.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(in.path, ": cannot open"));
  std::string buf(1 << 20, '\0');
  uint64_t lines = 0;
  for (uint64_t off = begin; off < end;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), end - off));
    const ssize_t got = ::pread(fd, buf.data(), want, off);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      ::close(fd);
      return absl::DataLossError(absl::StrCat(in.path, ": read error at byte ", off));
    }
    lines += std::count(buf.data(), buf.data() + got, '\n');
    off += got;
  }
  ::close(fd);
  return lines;
}

// A fingerprint of the input list (paths, sizes, formats), equal on every rank that sees
// the same corpus.
uint64_t DistInputsDigest(const std::vector<InputFile>& inputs) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  for (const auto& in : inputs) {
    mix(in.path.data(), in.path.size());
    mix(&in.size_bytes, sizeof(in.size_bytes));
    const int f = static_cast<int>(in.format), c = static_cast<int>(in.compression);
    mix(&f, sizeof(f));
    mix(&c, sizeof(c));
  }
  return h;
}

// This rank's inputs: its pieces as InputFiles (ranges with their first line numbers).
absl::StatusOr<std::vector<InputFile>> DistShareInputs(
    const std::vector<InputFile>& inputs, const std::vector<std::vector<SharePiece>>& plan,
    comm::Communicator* comm) {
  // Line numbers of ranges: every rank counts the lines of its own ranges; the sums of the
  // earlier ranges of the same input give the first line (one all-reduce).
  std::vector<const SharePiece*> all;
  for (const auto& share : plan) {
    for (const auto& p : share) all.push_back(&p);
  }
  std::vector<int64_t> lines(std::max<size_t>(all.size(), 1), 0);
  size_t idx = 0;
  for (int r = 0; r < static_cast<int>(plan.size()); ++r) {
    for (const auto& p : plan[r]) {
      if (r == comm->rank() && !p.whole) {
        auto n = DistCountLines(inputs[p.input], p.begin, p.end);
        if (!n.ok()) {
          return absl::Status(n.status().code(),
                              absl::StrCat("rank ", comm->rank(), ": ", n.status().message()));
        }
        lines[idx] = static_cast<int64_t>(*n);
      }
      ++idx;
    }
  }
  TS_RETURN_IF_ERROR(comm->AllReduce(lines.data(), lines.size(), comm::DType::kInt64));
  std::vector<InputFile> mine;
  idx = 0;
  for (int r = 0; r < static_cast<int>(plan.size()); ++r) {
    for (const auto& p : plan[r]) {
      if (r == comm->rank()) {
        InputFile f = inputs[p.input];
        if (!p.whole) {
          f.range_begin = p.begin;
          f.range_end = p.end;
          f.first_line = 1;
          for (size_t k = 0; k < idx; ++k) {
            if (all[k]->input == p.input) f.first_line += lines[k];
          }
        }
        mine.push_back(std::move(f));
      }
      ++idx;
    }
  }
  return mine;
}

template <typename T>
void DistAppendVec(const std::vector<T>& v, std::string* s) {
  const uint64_t n = v.size();
  s->append(reinterpret_cast<const char*>(&n), 8);
  if (n != 0) s->append(reinterpret_cast<const char*>(v.data()), n * sizeof(T));
}

template <typename T>
absl::Status DistReadVec(const std::string& s, size_t* p, std::vector<T>* out) {
  uint64_t n = 0;
  if (s.size() - *p < 8) return absl::InternalError("truncated document arrays");
  std::memcpy(&n, s.data() + *p, 8);
  *p += 8;
  if ((s.size() - *p) / sizeof(T) < n) return absl::InternalError("truncated document arrays");
  const size_t old = out->size();
  out->resize(old + n);
  if (n != 0) std::memcpy(out->data() + old, s.data() + *p, n * sizeof(T));
  *p += n * sizeof(T);
  return absl::OkStatus();
}

struct DistScanOutput {
  ScanResult corpus;  // rank 0: the whole corpus's result
  ScanResult share;   // this rank's totals (and, keep_doc_arrays, its share's doc arrays)
  std::vector<InputFile> share_inputs;
  DistributedStats stats;
};

// Every rank must see the same corpus: the ranks' input digests are compared.
absl::Status DistCheckSameCorpus(const std::vector<InputFile>& inputs, comm::Communicator* comm) {
  const int world = comm->world_size();
  std::vector<int64_t> digests(world, 0);
  const int64_t mine = static_cast<int64_t>(DistInputsDigest(inputs));
  TS_RETURN_IF_ERROR(comm->AllGather(&mine, digests.data(), 1, comm::DType::kInt64));
  for (int r = 0; r < world; ++r) {
    if (digests[r] != digests[0]) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", r, " sees other inputs (paths, sizes or formats) than rank 0: ",
                       "every rank must be given the same corpus"));
    }
  }
  return absl::OkStatus();
}

// Local analysis of this rank's share, or its saved results (--resume: *resumed is set when
// they were loaded); a fresh analysis is saved for the next --resume. Errors name the rank.
absl::StatusOr<ScanShare> DistLocalShare(const std::vector<InputFile>& share_inputs,
                                         const ScanOptions& opt, const DistributedOptions& dopt,
                                         int rank, int world, bool* resumed) {
  auto ranked = [&](const absl::Status& st) {
    return absl::Status(st.code(), absl::StrCat("rank ", rank, ": ", st.message()));
  };
  std::string key;
  if (!dopt.resume_dir.empty()) {
    key = ShareStateKey(share_inputs, opt, rank, world);
    auto saved = LoadShareState(opt, dopt.resume_dir, rank, key);
    if (!saved.ok()) return ranked(saved.status());
    if (saved->has_value()) {
      *resumed = true;
      return std::move(**saved);
    }
  }
  absl::StatusOr<ScanShare> local = ScanLocal(share_inputs, opt);
  if (!local.ok()) return ranked(local.status());
  if (!dopt.resume_dir.empty()) {
    if (auto st = SaveShareState(*local, opt, dopt.resume_dir, rank, key); !st.ok()) {
      return ranked(st);
    }
  }
  return local;
}

// Global numbering: rank r's documents follow those of ranks < r. Returns each rank's first
// global document number; the corpus must stay within CheckCorpusDocs's limit.
absl::StatusOr<std::vector<uint64_t>> DistStarts(uint64_t n, comm::Communicator* comm) {
  const int world = comm->world_size();
  std::vector<int64_t> counts(world, 0);
  const int64_t mine = static_cast<int64_t>(n);
  TS_RETURN_IF_ERROR(comm->AllGather(&mine, counts.data(), 1, comm::DType::kInt64));
  std::vector<uint64_t> starts(world, 0);
  uint64_t total = 0;
  for (int r = 0; r < world; ++r) {
    starts[r] = total;
    total += counts[r];
  }
  TS_RETURN_IF_ERROR(CheckCorpusDocs(total));
  return starts;
}

// Exact duplicates over all ranks: for each document of the share, exact_of (kDistNoDoc or
// the first identical document), norm_first (the first document with its normalised key)
// and whether LSH indexes it; the share's duplicate counts are updated and its keys dropped.
absl::Status DistExactDuplicates(ScanShare* share, uint32_t first_gid, const ScanOptions& opt,
                                 comm::Communicator* comm, uint64_t* sent,
                                 std::vector<uint32_t>* exact_of, std::vector<uint32_t>* norm_first,
                                 std::vector<uint8_t>* index) {
  const uint64_t n = share->res.docs;
  std::vector<uint32_t> raw_first;
  TS_RETURN_IF_ERROR(DistResolveExact(*share, first_gid, comm, &raw_first, norm_first, sent));
  share->raw_hash = {};
  share->norm_hash = {};
  exact_of->assign(n, kDistNoDoc);
  index->assign(n, 0);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t g = first_gid + i;
    if (raw_first[i] != g) {
      (*exact_of)[i] = raw_first[i];
      ++share->res.exact_duplicate_docs;
    }
    if ((*norm_first)[i] != g) ++share->res.normalized_duplicate_docs;
    // Indexed for LSH as in the single scan: a signature and no exact or normalised copy
    // earlier. The cluster root of an exact or normalised copy is its normalised key's first
    // document (whose raw key is new too), so norm_first is the root before LSH.
    (*index)[i] =
        opt.near_dup && share->has_signature[i] && raw_first[i] == g && (*norm_first)[i] == g;
  }
  return absl::OkStatus();
}

// Each document's cluster root: its root before LSH (norm_first), moved to the root LSH
// found for it when there is one (near_roots: (document, root), sorted).
std::vector<uint32_t> DistClusters(const std::vector<uint32_t>& norm_first,
                                   const std::vector<std::pair<uint32_t, uint32_t>>& near_roots) {
  std::vector<uint32_t> cluster(norm_first.size());
  for (size_t i = 0; i < norm_first.size(); ++i) {
    const uint32_t root = norm_first[i];
    auto it =
        std::lower_bound(near_roots.begin(), near_roots.end(), std::make_pair(root, uint32_t{0}));
    cluster[i] = it != near_roots.end() && it->first == root ? it->second : root;
  }
  return cluster;
}

// This rank's share result: its totals and, keep_doc_arrays, its documents' arrays.
ScanResult DistShareResult(const ScanShare& share, const std::vector<uint32_t>& exact_of,
                           const std::vector<uint32_t>& cluster, uint32_t first_gid,
                           const ScanOptions& opt) {
  ScanResult res = share.res;
  if (!opt.keep_doc_arrays) return res;
  const uint64_t n = share.res.docs;
  res.doc_flags = share.flags;
  res.doc_tokens = share.tokens;
  res.doc_chars = share.chars;
  res.doc_exact_of = exact_of;
  res.doc_near_of.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    res.doc_near_of[i] = cluster[i] == first_gid + i ? kDistNoDoc : cluster[i];
  }
  res.doc_file = share.file;
  res.doc_line = share.line;
  return res;
}

// What a rank sends rank 0: the length of its totals' JSON (8 bytes), that JSON, then the
// per-document arrays (exact_of, cluster, flags, tokens, chars, langs, each length-prefixed)
// and the verdict ids (8-byte length, then each id with a 4-byte length).
std::string DistPackShare(const ScanShare& share, const std::vector<uint32_t>& exact_of,
                          const std::vector<uint32_t>& cluster) {
  std::string arrays = ShareTotalsToJson(share.res).dump();
  std::string bin;
  DistAppendVec(exact_of, &bin);
  DistAppendVec(cluster, &bin);
  DistAppendVec(share.flags, &bin);
  DistAppendVec(share.tokens, &bin);
  DistAppendVec(share.chars, &bin);
  DistAppendVec(share.langs, &bin);
  std::string ids;
  for (const auto& id : share.ids) {
    const uint32_t len = static_cast<uint32_t>(id.size());
    ids.append(reinterpret_cast<const char*>(&len), 4);
    ids.append(id);
  }
  const uint64_t ids_len = ids.size();
  bin.append(reinterpret_cast<const char*>(&ids_len), 8);
  bin += ids;
  const uint64_t json_len = arrays.size();
  return std::string(reinterpret_cast<const char*>(&json_len), 8) + arrays + bin;
}

// Rank 0's final stage: the ranks' packed shares (DistPackShare, in rank order; consumed)
// into `res`, then FinishScan over the whole corpus.
absl::Status DistFinish(std::vector<std::string>* gathered, const ScanOptions& opt,
                        bool corpus_arrays, ScanResult* res) {
  ResolvedDocs docs;
  std::string ids;  // length-prefixed, corpus order
  for (auto& s : *gathered) {
    uint64_t json_len = 0;
    std::memcpy(&json_len, s.data(), 8);
    nlohmann::json totals;
    if (!ParseJsonText(std::string_view(s).substr(8, json_len), kJsonMaxDepth, &totals, nullptr)) {
      return absl::DataLossError("a rank's scan totals did not arrive intact");
    }
    AddShareTotals(totals, res);
    size_t p = 8 + json_len;
    TS_RETURN_IF_ERROR(DistReadVec(s, &p, &docs.exact_of));
    TS_RETURN_IF_ERROR(DistReadVec(s, &p, &docs.cluster));
    TS_RETURN_IF_ERROR(DistReadVec(s, &p, &docs.flags));
    TS_RETURN_IF_ERROR(DistReadVec(s, &p, &docs.tokens));
    TS_RETURN_IF_ERROR(DistReadVec(s, &p, &docs.chars));
    TS_RETURN_IF_ERROR(DistReadVec(s, &p, &docs.langs));
    uint64_t ids_len = 0;
    std::memcpy(&ids_len, s.data() + p, 8);
    ids.append(s, p + 8, ids_len);
    s = {};
  }
  size_t id_pos = 0;
  auto next_id = [&](std::string* id) -> absl::Status {
    uint32_t len = 0;
    if (ids.size() - id_pos < 4) return absl::InternalError("missing verdict ids");
    std::memcpy(&len, ids.data() + id_pos, 4);
    id->assign(ids, id_pos + 4, len);
    id_pos += 4 + len;
    return absl::OkStatus();
  };
  ScanOptions fopt = opt;
  fopt.keep_doc_arrays = corpus_arrays;
  return FinishScan(fopt, std::move(docs), next_id, res);
}

// corpus_arrays: rank 0's corpus result gets the doc_* arrays of the whole corpus (but for
// doc_file and doc_line), as RunScan's with keep_doc_arrays.
absl::StatusOr<DistScanOutput> DistScan(const std::vector<InputFile>& inputs,
                                        const ScanOptions& opt, const DistributedOptions& dopt,
                                        comm::Communicator* comm, bool corpus_arrays) {
  const auto t0 = std::chrono::steady_clock::now();
  const int world = comm->world_size(), rank = comm->rank();
  if (!opt.verdicts_path.empty() && rank == 0) {
    TS_RETURN_IF_ERROR(CheckOutputsAgainstInputs({opt.verdicts_path}, inputs));
  }
  TS_RETURN_IF_ERROR(DistCheckSameCorpus(inputs, comm));
  DistScanOutput out;
  DistributedStats& stats = out.stats;
  uint64_t* const sent = &stats.sent_bytes;
  stats.ranks = world;
  TS_ASSIGN_OR_RETURN(auto plan, PlanShares(inputs, world, [&](uint32_t f, uint64_t off) {
                        return NextLineStart(inputs[f], off);
                      }));
  TS_ASSIGN_OR_RETURN(out.share_inputs, DistShareInputs(inputs, plan, comm));
  TS_ASSIGN_OR_RETURN(ScanShare share,
                      DistLocalShare(out.share_inputs, opt, dopt, rank, world, &stats.resumed));
  stats.share_docs = share.res.docs;
  stats.share_input_bytes = share.res.input_bytes;
  TS_ASSIGN_OR_RETURN(const std::vector<uint64_t> starts, DistStarts(share.res.docs, comm));
  const uint32_t first_gid = static_cast<uint32_t>(starts[rank]);

  // --- exact duplicates, then near duplicates: owners verify, rank 0 replays the union-find
  std::vector<uint32_t> exact_of, norm_first;
  std::vector<uint8_t> index;
  TS_RETURN_IF_ERROR(
      DistExactDuplicates(&share, first_gid, opt, comm, sent, &exact_of, &norm_first, &index));
  std::vector<std::pair<uint32_t, uint32_t>> near_roots;  // (document, root), sorted
  ScanResult pairs;                                       // rank 0: pair counts
  if (opt.near_dup) {
    TS_ASSIGN_OR_RETURN(near_roots,
                        DistResolveNear(&share, index, first_gid, starts, opt, comm, &pairs, sent));
  }
  const std::vector<uint32_t> cluster = DistClusters(norm_first, near_roots);
  norm_first = {};
  out.share = DistShareResult(share, exact_of, cluster, first_gid, opt);

  // --- rank 0 gathers the totals and per-document arrays and runs the final stage
  std::string arrays = DistPackShare(share, exact_of, cluster);
  share = {};
  std::vector<std::string> gathered;
  TS_RETURN_IF_ERROR(GatherBytes(comm, arrays, &gathered, sent));
  arrays = {};
  int64_t all_sent = static_cast<int64_t>(stats.sent_bytes);
  TS_RETURN_IF_ERROR(comm->AllReduce(&all_sent, 1, comm::DType::kInt64));
  stats.all_sent_bytes = static_cast<uint64_t>(all_sent);
  if (rank != 0) return out;
  ScanResult& res = out.corpus;
  res.tokenizer = out.share.tokenizer;
  res.candidate_pairs = pairs.candidate_pairs;
  res.verified_pairs = pairs.verified_pairs;
  TS_RETURN_IF_ERROR(DistFinish(&gathered, opt, corpus_arrays, &res));
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

// --merge: output.rank0 .. output.rank<world-1> appended into `output`, then removed.
absl::Status ConcatenateFiles(int world, const std::string& output) {
  TS_ASSIGN_OR_RETURN(auto out, OutputFile::Open(output));
  std::string buf(1 << 20, '\0');
  for (int r = 0; r < world; ++r) {
    const std::string part = RankOutputPath(output, r);
    std::FILE* f = std::fopen(part.c_str(), "rb");
    if (f == nullptr) {
      return absl::NotFoundError(
          absl::StrCat(part, ": cannot open rank ", r,
                       "'s output for --merge (the ranks must share a file "
                       "system; without --merge each rank keeps its own file)"));
    }
    size_t got;
    absl::Status st;
    while (st.ok() && (got = std::fread(buf.data(), 1, buf.size(), f)) > 0) {
      st = out->Write(std::string_view(buf.data(), got));
    }
    const bool read_error = std::ferror(f);
    std::fclose(f);
    TS_RETURN_IF_ERROR(st);
    if (read_error) return absl::DataLossError(absl::StrCat(part, ": read error"));
  }
  TS_RETURN_IF_ERROR(out->Commit());
  for (int r = 0; r < world; ++r) std::remove(RankOutputPath(output, r).c_str());
  return absl::OkStatus();
}

}  // namespace

bool SplittableInput(const InputFile& in) {
  return in.format == InputFormat::kJsonl && in.compression == InputFile::kNone &&
         in.size_bytes > 0;
}

absl::StatusOr<std::vector<std::vector<SharePiece>>> PlanShares(
    const std::vector<InputFile>& inputs, int world,
    const std::function<absl::StatusOr<uint64_t>(uint32_t, uint64_t)>& next_line_start) {
  std::vector<std::vector<SharePiece>> plan(std::max(world, 1));
  uint64_t total = 0;
  for (const auto& in : inputs) total += in.size_bytes;
  // Share r starts at byte cut(r) of the concatenated inputs.
  auto cut = [&](int r) -> uint64_t {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(total) * r) / plan.size());
  };
  auto share_of = [&](uint64_t pos) {  // the share whose byte range holds `pos`
    int r = static_cast<int>(plan.size()) - 1;
    while (r > 0 && cut(r) > pos) --r;
    return r;
  };
  uint64_t base = 0;  // offset of input f in the concatenation
  for (uint32_t f = 0; f < inputs.size(); ++f) {
    const InputFile& in = inputs[f];
    const uint64_t size = in.size_bytes;
    if (!SplittableInput(in)) {
      plan[share_of(base)].push_back({f, 0, size, true});
      base += size;
      continue;
    }
    // Cuts inside this input, moved to line starts; pieces between them.
    uint64_t begin = 0;
    int owner = share_of(base);
    for (int r = owner + 1; r < static_cast<int>(plan.size()); ++r) {
      const uint64_t c = cut(r);
      if (c >= base + size) break;
      TS_ASSIGN_OR_RETURN(uint64_t at, next_line_start(f, c - base));
      at = std::min(at, size);
      if (at > begin) {
        plan[owner].push_back({f, begin, at, begin == 0 && at == size});
        begin = at;
      }
      owner = r;
    }
    if (begin < size) plan[owner].push_back({f, begin, size, begin == 0});
    base += size;
  }
  return plan;
}

absl::StatusOr<uint64_t> NextLineStart(const InputFile& in, uint64_t offset) {
  if (offset == 0) return 0;
  const int fd = ::open(in.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(in.path, ": cannot open"));
  // The line that holds byte offset - 1 ends at the first '\n' from there.
  std::string buf(1 << 16, '\0');
  uint64_t pos = offset - 1;
  while (pos < in.size_bytes) {
    const ssize_t got = ::pread(fd, buf.data(), buf.size(), pos);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      ::close(fd);
      return absl::DataLossError(absl::StrCat(in.path, ": read error at byte ", pos));
    }
    if (got == 0) break;
    const void* nl = std::memchr(buf.data(), '\n', got);
    if (nl != nullptr) {
      ::close(fd);
      return pos + (static_cast<const char*>(nl) - buf.data()) + 1;
    }
    pos += got;
  }
  ::close(fd);
  return in.size_bytes;
}

absl::StatusOr<ScanResult> RunDistributedScan(const std::vector<InputFile>& inputs,
                                              const ScanOptions& options, comm::Communicator* comm,
                                              std::vector<InputFile>* share_inputs,
                                              DistributedStats* stats,
                                              const DistributedOptions& dopt) {
  ScanOptions opt = options;
  TS_ASSIGN_OR_RETURN(DistScanOutput out,
                      DistScan(inputs, opt, dopt, comm, /*corpus_arrays=*/false));
  if (share_inputs != nullptr) *share_inputs = out.share_inputs;
  if (stats != nullptr) *stats = out.stats;
  if (comm->rank() != 0) return std::move(out.share);
  ScanResult& r = out.corpus;
  r.doc_flags = std::move(out.share.doc_flags);
  r.doc_tokens = std::move(out.share.doc_tokens);
  r.doc_chars = std::move(out.share.doc_chars);
  r.doc_exact_of = std::move(out.share.doc_exact_of);
  r.doc_near_of = std::move(out.share.doc_near_of);
  r.doc_file = std::move(out.share.doc_file);
  r.doc_line = std::move(out.share.doc_line);
  return std::move(r);
}

absl::StatusOr<CleanReport> RunDistributedClean(const std::vector<InputFile>& inputs,
                                                const CleanOptions& options, bool merge,
                                                comm::Communicator* comm,
                                                const DistributedOptions& dopt) {
  const int rank = comm->rank();
  TS_RETURN_IF_ERROR(CheckCleanInputs(inputs, options));
  const std::string mine = RankOutputPath(options.output, rank);
  TS_RETURN_IF_ERROR(CheckOutputsAgainstInputs({mine}, inputs));
  const ScanOptions so = CleanScanOptions(options);
  TS_ASSIGN_OR_RETURN(DistScanOutput scan,
                      DistScan(inputs, so, dopt, comm, /*corpus_arrays=*/true));
  // --strict is decided on the whole corpus's bad records: rank 0 tells the others.
  std::string strict_error;
  if (rank == 0 && options.strict && scan.corpus.bad.total() > 0) {
    strict_error = absl::StrCat("--strict: ", scan.corpus.bad.total(),
                                " bad record(s); first: ", scan.corpus.bad.examples().front());
  }
  TS_RETURN_IF_ERROR(BroadcastBytes(comm, &strict_error));
  if (!strict_error.empty()) return absl::InvalidArgumentError(strict_error);
  // Each rank decides and copies its own share: the decision of a document depends only on
  // its doc arrays, which hold global document numbers.
  std::vector<uint8_t> keep;
  DecideClean(scan.share, options, &keep);
  TS_RETURN_IF_ERROR(CopyKeptDocuments(scan.share_inputs, scan.share, keep, so.reader, mine));
  TS_RETURN_IF_ERROR(comm->Barrier());
  CleanReport rep;
  if (rank == 0) {
    std::vector<uint8_t> all_keep;
    rep = DecideClean(scan.corpus, options, &all_keep);
    rep.output = mine;
  }
  if (!merge) return rep;
  // --merge: rank 0 appends the ranks' files in rank order (a shared file system; zstd
  // frames and gzip members concatenate into one valid stream) and removes them.
  absl::Status st;
  if (rank == 0) {
    st = ConcatenateFiles(comm->world_size(), options.output);
    rep.output = options.output;
  }
  std::string err(st.ok() ? "" : std::string(st.message()));
  TS_RETURN_IF_ERROR(BroadcastBytes(comm, &err));
  if (!err.empty()) return absl::Status(st.ok() ? absl::StatusCode::kNotFound : st.code(), err);
  return rep;
}

std::string RankOutputPath(const std::string& output, int rank) {
  // The rank goes before the format's extension and a compression one after it.
  const size_t slash = output.rfind('/');
  const size_t name = slash == std::string::npos ? 0 : slash + 1;
  size_t end = output.size();
  auto strip = [&](std::string_view ext) {
    if (end - name > ext.size() && output.compare(end - ext.size(), ext.size(), ext) == 0) {
      end -= ext.size();
      return true;
    }
    return false;
  };
  strip(".zst") || strip(".zstd") || strip(".gz");
  const size_t dot = output.rfind('.', end == 0 ? 0 : end - 1);
  if (dot != std::string::npos && dot > name) end = dot;
  return absl::StrCat(output.substr(0, end), ".rank", rank, output.substr(end));
}

}  // namespace trainscope::data
