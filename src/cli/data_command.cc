// `trainscope data scan | clean | pack | stats`: corpus health, cleaning, packing to
// fixed-length Megatron datasets, numeric feature statistics (issue 6).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/command.h"
#include "nlohmann/json.hpp"
#include "trainscope/comm/comm.h"
#include "trainscope/comm/join.h"
#include "trainscope/core/exit.h"
#include "trainscope/core/paths.h"
#include "trainscope/core/progress.h"
#include "trainscope/core/table.h"
#include "trainscope/data/clean.h"
#include "trainscope/data/compare.h"
#include "trainscope/data/distributed.h"
#include "trainscope/data/feature_stats.h"
#include "trainscope/data/pack.h"
#include "trainscope/data/scan.h"
#include "trainscope/tokenizer/tokenizer.h"

namespace trainscope::cli {
namespace {

using data::InputFormat;

// Options shared by the verbs that read corpora.
struct CorpusFlags {
  std::vector<std::string> inputs;
  std::string format = "auto";
  std::string text_field = "text";
  std::string id_field = "id";
  bool blocks = false;
  size_t max_doc_bytes = 64u << 20;
  std::string tokenizer;
  bool strict = false;
  bool json = false;
  bool no_mmap = false;

  void Add(CLI::App* cmd) {
    cmd->add_option("inputs", inputs,
                    "files, directories or globs (.jsonl, .txt, .zst, .gz, .bin/.idx)")
        ->required();
    cmd->add_option("--format", format, "auto | jsonl | text | megatron")
        ->check(CLI::IsMember({"auto", "jsonl", "text", "megatron"}));
    cmd->add_option("--text-field", text_field, "JSONL field with the document text");
    cmd->add_option("--id-field", id_field, "JSONL field with the document id (optional)");
    cmd->add_flag("--blocks", blocks,
                  "plain text: one document per blank-line block, not per line");
    cmd->add_option("--max-doc-bytes", max_doc_bytes, "longer records are skipped and counted");
    cmd->add_option("--tokenizer", tokenizer,
                    "SentencePiece .model or HuggingFace tokenizer.json (default: byte-level)");
    cmd->add_flag("--strict", strict, "bad records are an error (exit 2)");
    cmd->add_flag("--json", json, "machine-readable output");
    cmd->add_flag("--no-mmap", no_mmap,
                  "read uncompressed JSONL with read() instead of a memory mapping (for files "
                  "that may change during the run)");
  }
  data::ReaderOptions Reader() const {
    data::ReaderOptions r;
    r.format = format == "jsonl"      ? InputFormat::kJsonl
               : format == "text"     ? InputFormat::kText
               : format == "megatron" ? InputFormat::kMegatron
                                      : InputFormat::kAuto;
    r.text_field = text_field;
    r.id_field = id_field;
    r.text_blocks = blocks;
    r.max_doc_bytes = max_doc_bytes;
    r.raw_jsonl_mmap = !no_mmap;
    return r;
  }
};

// --strict: the first bad record becomes the error.
int StrictCheck(const char* verb, const CorpusFlags& f, const data::BadRecords& bad) {
  if (!f.strict || bad.total() == 0) return kExitOk;
  std::fprintf(stderr, "trainscope data %s: error: %llu bad record(s); first: %s\n", verb,
               static_cast<unsigned long long>(bad.total()),
               bad.examples().empty() ? "?" : bad.examples().front().c_str());
  return kExitUsage;
}

void Print(const std::string& s) { std::fwrite(s.data(), 1, s.size(), stdout); }

// SIGINT, SIGTERM or SIGHUP during scan, clean or pack: remove the temporary directory and
// the output's temporary file (the library registers them, core/paths.h), say so in one
// line, then die of the signal with its default action (exit status 128 + signal in a
// shell, as without a handler). Nothing else is left to finish: the output is only ever
// renamed into place at the very end. A signal that was ignored when we started (nohup)
// stays ignored.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
char g_stop_message[3][160];

void OnStopSignal(int sig) {
  RemoveRegisteredTempPaths();
  for (int i = 0; i < 3; ++i) {
    if (kStopSignals[i] != sig) continue;
    ssize_t ignored = ::write(STDERR_FILENO, g_stop_message[i], std::strlen(g_stop_message[i]));
    (void)ignored;
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);  // blocked until this handler returns, then fatal
}

void RemoveTempFilesOnStopSignals(const char* verb) {
  const char* names[3] = {"SIGINT", "SIGTERM", "SIGHUP"};
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  for (int s : kStopSignals) sigaddset(&sa.sa_mask, s);  // one handler at a time
  for (int i = 0; i < 3; ++i) {
    std::snprintf(g_stop_message[i], sizeof(g_stop_message[i]),
                  "\ntrainscope data %s: stopped by %s; temporary files removed, no output "
                  "written\n",
                  verb, names[i]);
    struct sigaction old = {};
    if (::sigaction(kStopSignals[i], nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    ::sigaction(kStopSignals[i], &sa, nullptr);
  }
}

// --tokenizer: "" or "byte", else a SentencePiece model or a tokenizer.json that must be a regular
// file (a directory or /dev/zero is one line and exit 2, not a read until memory runs out).
absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> LoadTokenizerFile(const std::string& spec) {
  if (!spec.empty() && spec != "byte") {
    if (auto st = CheckRegularFile(spec, "a SentencePiece model is read whole"); !st.ok()) {
      return st;
    }
  }
  return tokenizer::LoadTokenizer(spec);
}

// --distributed: this process is one rank of a job started by `trainscope launch`, torchrun,
// srun or mpirun (comm/join.h). Only rank 0 shows progress and prints the report.
struct DistFlags {
  bool on = false;
  std::string backend = "gloo";
  double timeout_s = 3600;  // ranks wait in collectives while the slowest finishes its share
  bool merge = false;
  data::DistributedOptions options;

  void Add(CLI::App* cmd) {
    cmd->add_option("--resume", options.resume_dir,
                    "with --distributed: each rank saves its analysed share under DIR and, "
                    "run again after a failure, loads it instead of reading its inputs");
    cmd->add_flag("--distributed", on,
                  "run as one rank of `trainscope launch -n N -- trainscope data ...` (or "
                  "mpirun): each rank scans its share, duplicates are resolved over all ranks");
    cmd->add_option("--comm-backend", backend, "with --distributed: gloo | mpi")
        ->check(CLI::IsMember({"gloo", "mpi"}));
    cmd->add_option("--comm-timeout", timeout_s,
                    "with --distributed: seconds a rank waits for the others in one exchange")
        ->check(kPositiveNumber);
  }
  // An input error of one rank names the rank and its host (an input missing on one node).
  absl::Status Where(const absl::Status& st) const {
    if (!on || st.ok()) return st;
    auto o = comm::OptionsFromEnvironment();  // the rank, whichever launcher started us
    char host[256] = "?";
    ::gethostname(host, sizeof(host) - 1);
    return absl::Status(
        st.code(), absl::StrCat("rank ", o.ok() ? o->rank : 0, " on ", host, ": ", st.message()));
  }
  absl::StatusOr<std::unique_ptr<comm::Communicator>> Join() const {
    comm::CommOptions defaults;
    defaults.backend = backend;
    defaults.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    auto jo = comm::JoinOptionsFromEnvironment(defaults);  // launch, torchrun, srun, mpirun
    if (!jo.ok()) return jo.status();
    ::signal(SIGPIPE, SIG_IGN);  // a rank that died is an op error naming it, not SIGPIPE
    auto c = comm::JoinWorld(*jo);
    if (!c.ok()) {
      return absl::Status(c.status().code(), absl::StrCat("rank ", jo->comm.rank, ": joining the ",
                                                          jo->comm.world_size, "-rank job failed: ",
                                                          c.status().message()));
    }
    if ((*c)->rank() != 0) SetProgressSink(nullptr);
    return c;
  }
};

void RegisterScan(CLI::App* cmd, CommandContext& ctx) {
  auto* f = KeepAlive<CorpusFlags>();  // lives as long as the CLI tree (process)
  auto* o = KeepAlive<data::ScanOptions>();
  auto* no_near = KeepAlive<bool>(false);
  auto* no_lang = KeepAlive<bool>(false);
  auto* no_noise = KeepAlive<bool>(false);
  auto* exact_only = KeepAlive<bool>(false);
  auto* dist = KeepAlive<DistFlags>();
  o->threads = data::DefaultScanThreads();
  CLI::App* scan = cmd->add_subcommand(
      "scan", "counts, lengths, exact and near duplicates, noise, languages, padding waste");
  f->Add(scan);
  dist->Add(scan);
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
  scan->callback([&ctx, f, o, no_near, no_lang, no_noise, exact_only, fail_on, dist] {
    if (auto st = data::ParseFailOn(*fail_on, o); !st.ok()) {
      ctx.exit_code = ReportAndExitCode("data scan", st);
      return;
    }
    RemoveTempFilesOnStopSignals("scan");
    o->near_dup = !*no_near && !*exact_only;
    o->language = !*no_lang && !*exact_only;
    o->noise = !*no_noise && !*exact_only;
    o->reader = f->Reader();
    std::unique_ptr<tokenizer::Tokenizer> tok;
    if (!f->tokenizer.empty()) {
      auto t = LoadTokenizerFile(f->tokenizer);
      if (!t.ok()) {
        ctx.exit_code = ReportAndExitCode("data scan", t.status());
        return;
      }
      tok = std::move(*t);
      o->tokenizer = tok.get();
    }
    auto inputs = data::ExpandInputs(f->inputs, o->reader.format);
    if (!inputs.ok()) {
      ctx.exit_code = ReportAndExitCode("data scan", dist->Where(inputs.status()));
      return;
    }
    std::unique_ptr<comm::Communicator> world;
    if (dist->on) {
      auto c = dist->Join();
      if (!c.ok()) {
        ctx.exit_code = ReportAndExitCode("data scan", c.status());
        return;
      }
      world = std::move(*c);
    }
    data::DistributedStats dstats;
    auto res =
        world ? data::RunDistributedScan(*inputs, *o, world.get(), nullptr, &dstats, dist->options)
              : data::RunScan(*inputs, *o);
    if (!res.ok()) {
      ctx.exit_code = ReportAndExitCode("data scan", res.status());
      return;
    }
    if (world && world->rank() != 0) return;  // rank 0 reports
    nlohmann::json dj;
    if (world) {
      dj = {{"ranks", dstats.ranks},
            {"backend", world->backend_name()},
            {"exchange_bytes", dstats.all_sent_bytes},
            {"rank0_share_resumed", dstats.resumed},
            {"exchange_bytes_per_doc",
             res->docs ? static_cast<double>(dstats.all_sent_bytes) / res->docs : 0.0}};
    }
    if (f->json) {
      nlohmann::json j = data::ScanResultToJson(*res, *o);
      if (world) j["distributed"] = dj;
      Print(j.dump(2) + "\n");
    } else {
      Print(data::ScanResultToText(*res, *o));
      if (world) {
        Print(absl::StrCat("distributed: ", dstats.ranks, " ranks (", world->backend_name(), "), ",
                           dstats.all_sent_bytes, " bytes exchanged, ",
                           FormatDouble(dj["exchange_bytes_per_doc"].get<double>(), 1),
                           " per document\n"));
      }
    }
    ctx.exit_code = StrictCheck("scan", *f, res->bad);
    if (ctx.exit_code == kExitOk && o->fail && !data::ScanProblems(*res, *o).empty()) {
      ctx.exit_code = kExitProblems;
    }
  });
}

void RegisterClean(CLI::App* cmd, CommandContext& ctx) {
  auto* f = KeepAlive<CorpusFlags>();
  auto* o = KeepAlive<data::CleanOptions>();
  auto* rules = KeepAlive<std::string>(data::kDefaultCleanRules);
  auto* no_dedup = KeepAlive<bool>(false);
  auto* dist = KeepAlive<DistFlags>();
  o->scan.threads = data::DefaultScanThreads();
  CLI::App* clean = cmd->add_subcommand(
      "clean", "drop duplicates (keep the first) and documents that fail the chosen rules");
  f->Add(clean);
  dist->Add(clean);
  clean->add_flag("--merge", dist->merge,
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
  clean->callback([&ctx, f, o, rules, no_dedup, dist] {
    RemoveTempFilesOnStopSignals("clean");
    o->scan.reader = f->Reader();
    auto mask = data::ParseRules(*rules);
    if (!mask.ok()) {
      ctx.exit_code = ReportAndExitCode("data clean", mask.status());
      return;
    }
    o->drop_flags = *mask;
    o->dedup = !*no_dedup;
    std::unique_ptr<tokenizer::Tokenizer> tok;
    if (!f->tokenizer.empty()) {
      auto t = LoadTokenizerFile(f->tokenizer);
      if (!t.ok()) {
        ctx.exit_code = ReportAndExitCode("data clean", t.status());
        return;
      }
      tok = std::move(*t);
      o->scan.tokenizer = tok.get();
    }
    auto inputs = data::ExpandInputs(f->inputs, o->scan.reader.format);
    if (!inputs.ok()) {
      ctx.exit_code = ReportAndExitCode("data clean", dist->Where(inputs.status()));
      return;
    }
    if (f->strict) o->strict = true;
    std::unique_ptr<comm::Communicator> world;
    if (dist->on) {
      auto c = dist->Join();
      if (!c.ok()) {
        ctx.exit_code = ReportAndExitCode("data clean", c.status());
        return;
      }
      world = std::move(*c);
    }
    auto rep = world
                   ? data::RunDistributedClean(*inputs, *o, dist->merge, world.get(), dist->options)
                   : data::RunClean(*inputs, *o);
    if (!rep.ok()) {
      ctx.exit_code = ReportAndExitCode("data clean", rep.status());
      return;
    }
    if (world && world->rank() != 0) return;  // rank 0 reports
    Print(f->json ? data::CleanReportToJson(*rep).dump(2) + "\n" : data::CleanReportToText(*rep));
    ctx.exit_code = StrictCheck("clean", *f, rep->bad);
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
    RemoveTempFilesOnStopSignals("pack");
    o->reader = f->Reader();
    o->mode = *mode == "concat" ? data::PackOptions::kConcat : data::PackOptions::kBestFit;
    auto t = LoadTokenizerFile(f->tokenizer);
    if (!t.ok()) {
      ctx.exit_code = ReportAndExitCode("data pack", t.status());
      return;
    }
    o->tokenizer = t->get();
    auto inputs = data::ExpandInputs(f->inputs, o->reader.format);
    if (!inputs.ok()) {
      ctx.exit_code = ReportAndExitCode("data pack", inputs.status());
      return;
    }
    auto rep = data::RunPack(*inputs, *o);
    if (!rep.ok()) {
      ctx.exit_code = ReportAndExitCode("data pack", rep.status());
      return;
    }
    Print(f->json ? data::PackReportToJson(*rep).dump(2) + "\n" : data::PackReportToText(*rep));
    ctx.exit_code = StrictCheck("pack", *f, rep->bad);
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
  cmp->add_option("--text-field", f->text_field, "JSONL field with the document text");
  cmp->add_flag("--blocks", f->blocks, "plain text: one document per blank-line block");
  cmp->add_option("--tokenizer", f->tokenizer,
                  "SentencePiece .model or HuggingFace tokenizer.json: adds token-id coverage");
  cmp->add_option("--least-covered", o->least_covered, "REFERENCE documents listed (default 10)")
      ->check(kNonNegativeNumber);
  cmp->add_flag("--json", f->json, "machine-readable output");
  cmp->callback([&ctx, ref, cand, f, o] {
    o->reader = f->Reader();
    std::unique_ptr<tokenizer::Tokenizer> tok;
    if (!f->tokenizer.empty() && f->tokenizer != "byte") {
      auto t = LoadTokenizerFile(f->tokenizer);
      if (!t.ok()) {
        ctx.exit_code = ReportAndExitCode("data compare", t.status());
        return;
      }
      tok = std::move(*t);
      o->tokenizer = tok.get();
    }
    auto rep = data::CompareCorpora({*ref}, {*cand}, *o);
    if (!rep.ok()) {
      ctx.exit_code = ReportAndExitCode("data compare", rep.status());
      return;
    }
    Print(f->json ? data::CompareReportToJson(*rep).dump(2) + "\n"
                  : data::CompareReportToText(*rep));
    ctx.exit_code = rep->covers ? kExitOk : kExitProblems;
  });
}

void RegisterStats(CLI::App* cmd, CommandContext& ctx) {
  auto* path = KeepAlive<std::string>();
  auto* json = KeepAlive<bool>(false);
  CLI::App* stats =
      cmd->add_subcommand("stats", "numeric feature statistics of .npy, .safetensors or CSV");
  stats->add_option("file", *path, ".npy, .safetensors or .csv")->required();
  stats->add_flag("--json", *json, "machine-readable output");
  stats->callback([&ctx, path, json] {
    // A directory, device or FIFO: one line, exit 2 (the formats need the file's size).
    if (auto st = CheckRegularFile(
            *path, "statistics are read from a regular .npy, .safetensors or .csv file");
        !st.ok()) {
      ctx.exit_code = ReportAndExitCode("data stats", st);
      return;
    }
    auto rep = data::FeatureStatsOfFile(*path);
    if (!rep.ok()) {
      ctx.exit_code = ReportAndExitCode("data stats", rep.status());
      return;
    }
    Print(*json ? data::FeatureReportToJson(*rep).dump(2) + "\n" : data::FeatureReportToText(*rep));
    // NaN or Inf values are a problem (exit 1); the other findings are advice.
    ctx.exit_code = data::NonFiniteCount(*rep) > 0 ? kExitProblems : kExitOk;
  });
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
