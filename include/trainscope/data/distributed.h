// `data scan --distributed` and `data clean --distributed`: the scan of scan.h over the
// ranks of a comm::Communicator (gloo or MPI, started by `trainscope launch` or mpirun),
// with the single-process scan's results.
//
// How (docs/formats.md "Distributed data scan"):
//  1. PlanShares splits the inputs into one contiguous share per rank, in corpus order:
//     uncompressed JSONL files by byte ranges on line boundaries, other inputs (.gz, .zst,
//     plain text, Megatron) whole. Every rank reads and analyses only its share; line
//     numbers stay those of the whole file (each rank counts the lines of its ranges).
//  2. Documents are numbered globally (rank order = corpus order). Exact-duplicate keys go
//     to their owner rank (hash mod N) with an all-to-all; owners answer with the first
//     document of each key.
//  3. LSH band hashes of the documents that stay after exact deduplication go to the owner
//     of (band, hash); owners fetch the MinHash fingerprints of documents in buckets of two
//     or more, verify the pairs the single-process scan would try, and send those buckets
//     to rank 0, which replays the keep-first union-find in the single scan's order (bands
//     in order, buckets by hash), so clusters, candidate and verified pair counts match.
//  4. Rank 0 gathers the per-document lengths, flags, languages and cluster roots and runs
//     the single scan's final stage (batch ratios, padding, exact percentiles, verdicts).
// Memory per rank: ~40 bytes per document of its share (band hashes and fingerprints are
// spilled under tmp_dir, as in the single scan), one band's records at a time (~50 bytes per
// document of a share while exchanged); rank 0 also holds 22 bytes per document of the whole
// corpus for the exact statistics, and the buckets of two or more documents.
#ifndef TRAINSCOPE_DATA_DISTRIBUTED_H_
#define TRAINSCOPE_DATA_DISTRIBUTED_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainscope/data/clean.h"
#include "trainscope/data/scan.h"

namespace trainscope::comm {
class Communicator;
}

namespace trainscope::data {

// A part of one input: [begin, end) of its bytes, from line `first_line` on (0: not known
// yet, counted by the rank that reads it). Whole input: begin 0, end = size_bytes.
struct SharePiece {
  uint32_t input = 0;
  uint64_t begin = 0, end = 0;
  bool whole = true;
};

// True for inputs PlanShares may cut: uncompressed JSONL regular files.
bool SplittableInput(const InputFile& in);

// Splits `inputs` into `world` contiguous shares of about equal bytes (share r holds the
// bytes from r/world to (r+1)/world of the concatenated inputs). A cut inside a splittable
// input moves to the start of the next line (`next_line_start(input, offset)`: the offset
// after the first '\n' at or after `offset`, or the input's size); an input that cannot be
// cut belongs to the share where it starts. Shares may be empty. Errors: next_line_start's.
absl::StatusOr<std::vector<std::vector<SharePiece>>> PlanShares(
    const std::vector<InputFile>& inputs, int world,
    const std::function<absl::StatusOr<uint64_t>(uint32_t, uint64_t)>& next_line_start);

// next_line_start over the real files (pread). NotFound / DataLoss naming the file.
absl::StatusOr<uint64_t> NextLineStart(const InputFile& in, uint64_t offset);

struct DistributedOptions {
  // --resume: each rank saves its analysed share under this directory
  // (share.rank<R>.*, dist_state.h) and, when a saved share of the same job (same inputs and
  // byte ranges, world size, rank and analysis options) is there, loads it instead of reading
  // its inputs again. "" = off.
  std::string resume_dir;
};

// What a distributed scan moved between ranks (bench/data, docs/PERFORMANCE.md).
struct DistributedStats {
  int ranks = 1;
  uint64_t share_docs = 0, share_input_bytes = 0;  // this rank's share
  uint64_t sent_bytes = 0;      // this rank: bytes it sent in exchanges (padding included)
  uint64_t all_sent_bytes = 0;  // every rank's sent_bytes added up
  bool resumed = false;         // this rank's share was loaded from resume_dir
};

// Runs the scan of `inputs` on every rank of `comm` (all ranks call it with the same inputs
// and options; world size 1 is a plain scan through the same path). Rank 0 gets the
// corpus's ScanResult, equal to RunScan's except wall_s, and writes verdicts_path; other
// ranks get their share's totals only and write nothing. With keep_doc_arrays every rank
// gets the doc_* arrays of its own share (doc_exact_of / doc_near_of hold global document
// numbers; doc_file indexes `*share_inputs`). `share_inputs` (optional) receives this
// rank's inputs (ranges as InputFile::range_*). Blocks in collectives up to the
// communicator's timeout each. `stats` (optional) receives the exchange volume. Errors: RunScan's
// (an input missing on this rank names the rank and the file), the communicator's (Unavailable /
// DeadlineExceeded naming the op).
absl::StatusOr<ScanResult> RunDistributedScan(const std::vector<InputFile>& inputs,
                                              const ScanOptions& options, comm::Communicator* comm,
                                              std::vector<InputFile>* share_inputs = nullptr,
                                              DistributedStats* stats = nullptr,
                                              const DistributedOptions& dopt = {});

// `data clean --distributed`: the distributed scan, then every rank copies the kept
// documents of its share to RankOutputPath(output, rank) (or, with `merge`, rank 0 appends
// the ranks' outputs in order into `output` and removes them). Rank 0's report covers the
// whole corpus. Errors: RunClean's and RunDistributedScan's.
absl::StatusOr<CleanReport> RunDistributedClean(const std::vector<InputFile>& inputs,
                                                const CleanOptions& options, bool merge,
                                                comm::Communicator* comm,
                                                const DistributedOptions& dopt = {});

// "out.jsonl.zst", rank 3 -> "out.rank3.jsonl.zst": the rank before the format's extension
// (and a .zst/.zstd/.gz after it).
std::string RankOutputPath(const std::string& output, int rank);

}  // namespace trainscope::data

#endif  // TRAINSCOPE_DATA_DISTRIBUTED_H_
