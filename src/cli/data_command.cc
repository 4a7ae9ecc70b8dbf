// `trainscope data scan | clean | pack | compare | stats` (issue 6): the flags of data/verbs.h's
// verbs, and the process settings the executable keeps: the stop signals that remove
// temporary files, where the communicator's notices go, the progress of ranks other than 0.
#include <cstdio>
#include <string>

#include "cli/comm_host.h"
#include "cli/command.h"
#include "cli/exit.h"
#include "cli/temp_file_signals.h"
#include "trainscope/comm/comm.h"
#include "trainscope/core/progress.h"
#include "trainscope/core/status.h"
#include "trainscope/data/verbs.h"

namespace trainscope::cli {
namespace {

// --distributed: this process is one rank of a job started by `trainscope launch`, torchrun,
// srun or mpirun (comm/join.h). Only rank 0 shows progress and prints the report.
void AddDistFlags(CLI::App* cmd, data::DistributedRun* d) {
  cmd->add_option("--resume", d->options.resume_dir,
                  "with --distributed: each rank saves its analysed share under DIR and, "
                  "run again after a failure, loads it instead of reading its inputs");
  cmd->add_flag("--distributed", d->on,
                "run as one rank of `trainscope launch -n N -- trainscope data ...` (or "
                "mpirun): each rank scans its share, duplicates are resolved over all ranks");
  cmd->add_option("--comm-backend", d->backend, "with --distributed: gloo | mpi")
      ->check(CLI::IsMember({"gloo", "mpi"}));
  cmd->add_option("--comm-timeout", d->timeout_s,
                  "with --distributed: seconds a rank waits for the others in one exchange")
      ->check(kPositiveNumber);
  d->comm_host = TerminalCommHost();  // SIGPIPE is ignored since main(): a dead peer, an op error
  d->on_joined = [](const comm::Communicator& c) {
    if (c.rank() != 0) SetProgressSink(nullptr);
  };
}

// Options shared by the verbs that read corpora, most read into `run` (whose defaults they are).
struct CorpusFlags {
  data::CorpusRun run;
  std::string format = "auto";
  bool no_mmap = false;

  void Add(CLI::App* cmd, bool distributed = false) {
    data::ReaderOptions& r = run.reader;
    cmd->add_option("inputs", run.inputs,
                    "files, directories or globs (.jsonl, .txt, .zst, .gz, .bin/.idx)")
        ->required();
    cmd->add_option("--format", format, "auto | jsonl | text | megatron")
        ->check(CLI::IsMember({"auto", "jsonl", "text", "megatron"}));
    cmd->add_option("--text-field", r.text_field, "JSONL field with the document text");
    cmd->add_option("--id-field", r.id_field, "JSONL field with the document id (optional)");
    cmd->add_flag("--blocks", r.text_blocks,
                  "plain text: one document per blank-line block, not per line");
    cmd->add_option("--max-doc-bytes", r.max_doc_bytes, "longer records are skipped and counted");
    cmd->add_option("--tokenizer", run.tokenizer,
                    "SentencePiece .model or HuggingFace tokenizer.json (default: byte-level)");
    cmd->add_flag("--strict", run.strict, "bad records are an error (exit 2)");
    cmd->add_flag("--json", run.json, "machine-readable output");
    cmd->add_flag("--no-mmap", no_mmap,
                  "read uncompressed JSONL with read() instead of a memory mapping (for files "
                  "that may change during the run)");
    if (distributed) AddDistFlags(cmd, &run.distributed);
  }
  data::CorpusRun Run() const {
    data::CorpusRun r = run;
    r.reader.format = data::ParseInputFormat(format).value_or(data::InputFormat::kAuto);
    r.reader.raw_jsonl_mmap = !no_mmap;
    return r;
  }
};

// Prints a verb's report, returns its exit code (cli/exit.h; strict_error: 2, after the report).
int Finish(const char* verb, const absl::StatusOr<data::VerbResult>& r) {
  if (!r.ok()) return ReportAndExitCode(std::string("data ") + verb, r.status());
  std::fwrite(r->output.data(), 1, r->output.size(), stdout);
  if (r->strict_error.empty()) return r->problems ? kExitProblems : kExitOk;
  std::fprintf(stderr, "trainscope data %s: error: %s\n", verb, r->strict_error.c_str());
  return kExitUsage;
}

void RegisterScan(CLI::App* cmd, CommandContext& ctx) {
  auto* f = KeepAlive<CorpusFlags>();  // lives as long as the CLI tree (process)
  auto* o = KeepAlive<data::ScanOptions>();
  auto* no_near = KeepAlive<bool>(false);
  auto* no_lang = KeepAlive<bool>(false);
  auto* no_noise = KeepAlive<bool>(false);
  auto* exact_only = KeepAlive<bool>(false);
  o->threads = data::DefaultScanThreads();
  CLI::App* scan = cmd->add_subcommand(
      "scan", "counts, lengths, exact and near duplicates, noise, languages, padding waste");
  f->Add(scan, /*distributed=*/true);
  scan->add_option("--seq-len", o->seq_len, "sequence length for padding waste")
      ->check(kPositiveNumber);
  scan->add_option("--batch-size", o->batch_size, "documents per training batch")
      ->check(kPositiveNumber);
  scan->add_option("--threshold", o->threshold, "Jaccard threshold of near duplicates")
      ->check(CLI::Range(0.01, 1.0));
  scan->add_option("--verdicts", o->verdicts_path,
                   "write one JSONL verdict line per document (refused when it is an input or "
                   "inside an input directory; a symlink is written through to its target)");
  scan->add_option("--threads", o->threads, "worker threads")->check(CLI::Range(1, 256));
  scan->add_option("--ngram", o->ngram, "words per MinHash shingle")->check(CLI::Range(1, 64));
  scan->add_option("--bands", o->bands, "LSH bands")->check(CLI::Range(1, 512));
  scan->add_option("--rows", o->rows, "MinHash values per band")->check(CLI::Range(1, 64));
  scan->add_option("--seed", o->minhash_seed, "MinHash permutation seed");
  scan->add_option("--shuffle-seed", o->shuffle_seed, "seed of the shuffled batch order");
  scan->add_option("--c4-min-sentences", o->c4_min_sentences,
                   "C4 minimum sentences (3 TFDS, 5 datatrove)");
  scan->add_option("--tmp-dir", o->tmp_dir, "directory for spill files (default $TMPDIR or /tmp)");
  scan->add_flag("--no-near-dup", *no_near, "skip MinHash near-duplicate detection");
  scan->add_flag("--no-lang", *no_lang, "skip language identification");
  scan->add_flag("--no-noise", *no_noise,
                 "skip the noise rules (Gopher, C4, FineWeb, mojibake, control chars, truncation)");
  auto* fail_on = KeepAlive<std::string>("duplicates=0.05,noise=0.2");
  scan->add_option("--fail-on", *fail_on,
                   "exit 1 when a share exceeds its threshold: duplicates=S,noise=S, or none "
                   "(docs/metrics.md)");
  scan->add_flag("--exact-only", *exact_only,
                 "exact duplicates and all statistics only: same as --no-near-dup --no-noise "
                 "--no-lang (the fast scan; noise flags and languages are not reported)");
  scan->callback([&ctx, f, o, no_near, no_lang, no_noise, exact_only, fail_on] {
    ctx.exit_code = Finish("scan", [&]() -> absl::StatusOr<data::VerbResult> {
      TS_RETURN_IF_ERROR(data::ParseFailOn(*fail_on, o));
      RemoveTempFilesOnStopSignals("data scan");
      o->near_dup = !*no_near && !*exact_only;
      o->language = !*no_lang && !*exact_only;
      o->noise = !*no_noise && !*exact_only;
      return data::RunScanVerb(f->Run(), *o);
    }());
  });
}

void RegisterClean(CLI::App* cmd, CommandContext& ctx) {
  auto* f = KeepAlive<CorpusFlags>();
  auto* o = KeepAlive<data::CleanOptions>();
  auto* rules = KeepAlive<std::string>(data::kDefaultCleanRules);
  auto* no_dedup = KeepAlive<bool>(false);
  o->scan.threads = data::DefaultScanThreads();
  CLI::App* clean = cmd->add_subcommand(
      "clean", "drop duplicates (keep the first) and documents that fail the chosen rules");
  f->Add(clean, /*distributed=*/true);
  clean->add_flag("--merge", f->run.distributed.merge,
                  "with --distributed: rank 0 joins the ranks' outputs (OUT.rank<R>.ext) into "
                  "OUT (the ranks must share a file system)");
  clean
      ->add_option("-o,--output", o->output,
                   "cleaned corpus (.jsonl/.txt; .zst or .gz to compress). Refused (exit 2) "
                   "when it is one of the inputs (same file, any spelling or link) or lies "
                   "inside an input directory; a symlink is written through: its target is "
                   "replaced, the link stays")
      ->required();
  clean->add_option(
      "--rules", *rules,
      "comma list of flag groups or flags that drop a document: gopher, gopher_quality, "
      "gopher_repetition, c4, fineweb (each also drops empty documents), encoding, junk "
      "(junk_repeated_char, junk_html, junk_lorem_ipsum), truncated, mixed_language, empty, all, "
      "none");
  clean->add_option("--threshold", o->scan.threshold, "Jaccard threshold of near duplicates")
      ->check(CLI::Range(0.01, 1.0));
  clean->add_option("--threads", o->scan.threads, "worker threads")->check(CLI::Range(1, 256));
  clean->add_option("--tmp-dir", o->scan.tmp_dir, "directory for spill files");
  clean->add_flag("--no-dedup", *no_dedup, "keep duplicates");
  clean->callback([&ctx, f, o, rules, no_dedup] {
    ctx.exit_code = Finish("clean", [&]() -> absl::StatusOr<data::VerbResult> {
      RemoveTempFilesOnStopSignals("data clean");
      TS_ASSIGN_OR_RETURN(o->drop_flags, data::ParseRules(*rules));
      o->dedup = !*no_dedup;
      return data::RunCleanVerb(f->Run(), *o);
    }());
  });
}

void RegisterPack(CLI::App* cmd, CommandContext& ctx) {
  auto* f = KeepAlive<CorpusFlags>();
  auto* o = KeepAlive<data::PackOptions>();
  auto* mode = KeepAlive<std::string>("best-fit");
  CLI::App* pack = cmd->add_subcommand(
      "pack", "tokenize into fixed-length sequences as a Megatron .bin/.idx dataset");
  f->Add(pack);
  pack->add_option("-o,--output", o->output_prefix,
                   "output prefix (writes PREFIX.bin and PREFIX.idx; refused when either is an "
                   "input or inside an input directory; symlinks are written through)")
      ->required();
  pack->add_option("--seq-len", o->seq_len, "tokens per sequence")->check(kPositiveNumber);
  pack->add_option("--mode", *mode, "concat (concatenate and chunk) or best-fit")
      ->check(CLI::IsMember({"concat", "best-fit"}));
  pack->add_option("--pad-id", o->pad_id, "padding token id (default: the end-of-document id)");
  pack->callback([&ctx, f, o, mode] {
    RemoveTempFilesOnStopSignals("data pack");
    o->mode = *mode == "concat" ? data::PackOptions::kConcat : data::PackOptions::kBestFit;
    ctx.exit_code = Finish("pack", data::RunPackVerb(f->Run(), *o));
  });
}

void RegisterCompare(CLI::App* cmd, CommandContext& ctx) {
  auto* ref = KeepAlive<std::string>();
  auto* cand = KeepAlive<std::string>();
  auto* f = KeepAlive<CorpusFlags>();
  auto* o = KeepAlive<data::CompareOptions>();
  CLI::App* cmp = cmd->add_subcommand(
      "compare",
      "how well CANDIDATE (a calibration or eval set, a cleaned corpus) covers REFERENCE (real "
      "traffic, the raw corpus): vocabulary and n-gram coverage, length and token-count "
      "distances, language mix, feature PSI, least-covered documents; exit 1 when it does not "
      "(docs/metrics.md \"Corpus coverage\")");
  cmp->add_option("reference", *ref, "REFERENCE corpus: file, directory or glob")->required();
  cmp->add_option("candidate", *cand, "CANDIDATE corpus: file, directory or glob")->required();
  cmp->add_option("--format", f->format, "auto | jsonl | text | megatron")
      ->check(CLI::IsMember({"auto", "jsonl", "text", "megatron"}));
  cmp->add_option("--text-field", f->run.reader.text_field, "JSONL field with the document text");
  cmp->add_flag("--blocks", f->run.reader.text_blocks,
                "plain text: one document per blank-line block");
  cmp->add_option("--tokenizer", f->run.tokenizer,
                  "SentencePiece .model or HuggingFace tokenizer.json: adds token-id coverage");
  cmp->add_option("--least-covered", o->least_covered, "REFERENCE documents listed (default 10)")
      ->check(kNonNegativeNumber);
  cmp->add_flag("--json", f->run.json, "machine-readable output");
  cmp->callback([&ctx, ref, cand, f, o] {
    ctx.exit_code = Finish("compare", data::RunCompareVerb(*ref, *cand, f->Run(), *o));
  });
}

void RegisterStats(CLI::App* cmd, CommandContext& ctx) {
  auto* path = KeepAlive<std::string>();
  auto* json = KeepAlive<bool>(false);
  CLI::App* stats =
      cmd->add_subcommand("stats", "numeric feature statistics of .npy, .safetensors or CSV");
  stats->add_option("file", *path, ".npy, .safetensors or .csv")->required();
  stats->add_flag("--json", *json, "machine-readable output");
  stats->callback(
      [&ctx, path, json] { ctx.exit_code = Finish("stats", data::RunStatsVerb(*path, *json)); });
}

}  // namespace

void RegisterDataCommand(CLI::App& parent, CommandContext& ctx) {
  CLI::App* cmd = parent.add_subcommand(
      "data", "corpus health, deduplication, cleaning, packing, feature statistics");
  cmd->require_subcommand(1);
  RegisterScan(cmd, ctx);
  RegisterClean(cmd, ctx);
  RegisterPack(cmd, ctx);
  RegisterCompare(cmd, ctx);
  RegisterStats(cmd, ctx);
}

}  // namespace trainscope::cli
