// The `trainscope data` verbs end to end (verbs.h).
#include "trainscope/data/verbs.h"

#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "trainscope/comm/comm.h"
#include "trainscope/comm/join.h"
#include "trainscope/core/paths.h"
#include "trainscope/core/table.h"
#include "trainscope/data/feature_stats.h"
#include "trainscope/tokenizer/tokenizer.h"

namespace trainscope::data {
namespace {

// The tokenizer a verb was given: "" or "byte" is the byte-level one; a model file must be
// a regular file.
absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> LoadVerbTokenizer(const std::string& spec) {
  if (!spec.empty() && spec != "byte") {
    if (auto st = CheckRegularFile(spec, "a SentencePiece model is read whole"); !st.ok()) {
      return st;
    }
  }
  return tokenizer::LoadTokenizer(spec);
}

// An input error of one rank names the rank and its host (an input missing on one node).
absl::Status OnThisRank(const DistributedRun& d, const absl::Status& st) {
  if (!d.on || st.ok()) return st;
  auto o = comm::OptionsFromEnvironment();  // the rank, whichever launcher started us
  char host[256] = "?";
  ::gethostname(host, sizeof(host) - 1);
  return absl::Status(
      st.code(), absl::StrCat("rank ", o.ok() ? o->rank : 0, " on ", host, ": ", st.message()));
}

// This process as one rank of the job (launch, torchrun, srun, mpirun); null when not
// distributed.
absl::StatusOr<std::unique_ptr<comm::Communicator>> JoinVerbWorld(const DistributedRun& d) {
  if (!d.on) return nullptr;
  comm::JoinRequest req;
  req.defaults.backend = d.backend;
  req.defaults.timeout = std::chrono::milliseconds(static_cast<int64_t>(d.timeout_s * 1000));
  req.defaults.host = d.comm_host;
  req.before_connect = [&d](const comm::JoinOptions&) {
    if (d.before_connect) d.before_connect();
    return absl::OkStatus();
  };
  auto world = comm::JoinFromEnvironment(req);
  if (!world.ok()) return world.status();
  if (d.on_joined) d.on_joined(*world->comm);
  return std::move(world->comm);
}

std::string StrictError(const CorpusRun& run, const BadRecords& bad) {
  if (!run.strict || bad.total() == 0) return "";
  return absl::StrCat(bad.total(), " bad record(s); first: ",
                      bad.examples().empty() ? "?" : bad.examples().front().c_str());
}

template <class Report, class ToJson, class ToText>
std::string Render(bool json, const Report& r, ToJson to_json, ToText to_text) {
  return json ? to_json(r).dump(2) + "\n" : to_text(r);
}

}  // namespace

absl::StatusOr<VerbResult> RunScanVerb(const CorpusRun& run, ScanOptions o) {
  o.reader = run.reader;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (!run.tokenizer.empty()) {
    auto t = LoadVerbTokenizer(run.tokenizer);
    if (!t.ok()) return t.status();
    tok = *std::move(t);
    o.tokenizer = tok.get();
  }
  auto inputs = ExpandInputs(run.inputs, o.reader.format);
  if (!inputs.ok()) return OnThisRank(run.distributed, inputs.status());
  auto world = JoinVerbWorld(run.distributed);
  if (!world.ok()) return world.status();
  DistributedStats dstats;
  auto res = *world ? RunDistributedScan(*inputs, o, world->get(), nullptr, &dstats,
                                         run.distributed.options)
                    : RunScan(*inputs, o);
  if (!res.ok()) return res.status();
  VerbResult v;
  if (*world && (*world)->rank() != 0) return v;  // rank 0 reports
  nlohmann::json dj;
  if (*world) {
    dj = {{"ranks", dstats.ranks},
          {"backend", (*world)->backend_name()},
          {"exchange_bytes", dstats.all_sent_bytes},
          {"rank0_share_resumed", dstats.resumed},
          {"exchange_bytes_per_doc",
           res->docs ? static_cast<double>(dstats.all_sent_bytes) / res->docs : 0.0}};
  }
  if (run.json) {
    nlohmann::json j = ScanResultToJson(*res, o);
    if (*world) j["distributed"] = dj;
    v.output = j.dump(2) + "\n";
  } else {
    v.output = ScanResultToText(*res, o);
    if (*world) {
      absl::StrAppend(&v.output, "distributed: ", dstats.ranks, " ranks (",
                      (*world)->backend_name(), "), ", dstats.all_sent_bytes, " bytes exchanged, ",
                      FormatDouble(dj["exchange_bytes_per_doc"].get<double>(), 1),
                      " per document\n");
    }
  }
  v.strict_error = StrictError(run, res->bad);
  v.problems = o.fail && !ScanProblems(*res, o).empty();
  return v;
}

absl::StatusOr<VerbResult> RunCleanVerb(const CorpusRun& run, CleanOptions o) {
  o.scan.reader = run.reader;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (!run.tokenizer.empty()) {
    auto t = LoadVerbTokenizer(run.tokenizer);
    if (!t.ok()) return t.status();
    tok = *std::move(t);
    o.scan.tokenizer = tok.get();
  }
  auto inputs = ExpandInputs(run.inputs, o.scan.reader.format);
  if (!inputs.ok()) return OnThisRank(run.distributed, inputs.status());
  if (run.strict) o.strict = true;
  auto world = JoinVerbWorld(run.distributed);
  if (!world.ok()) return world.status();
  auto rep = *world ? RunDistributedClean(*inputs, o, run.distributed.merge, world->get(),
                                          run.distributed.options)
                    : RunClean(*inputs, o);
  if (!rep.ok()) return rep.status();
  VerbResult v;
  if (*world && (*world)->rank() != 0) return v;  // rank 0 reports
  v.output = Render(run.json, *rep, CleanReportToJson, CleanReportToText);
  v.strict_error = StrictError(run, rep->bad);
  return v;
}

absl::StatusOr<VerbResult> RunPackVerb(const CorpusRun& run, PackOptions o) {
  o.reader = run.reader;
  auto tok = LoadVerbTokenizer(run.tokenizer);
  if (!tok.ok()) return tok.status();
  o.tokenizer = tok->get();
  auto inputs = ExpandInputs(run.inputs, o.reader.format);
  if (!inputs.ok()) return inputs.status();
  auto rep = RunPack(*inputs, o);
  if (!rep.ok()) return rep.status();
  VerbResult v;
  v.output = Render(run.json, *rep, PackReportToJson, PackReportToText);
  v.strict_error = StrictError(run, rep->bad);
  return v;
}

absl::StatusOr<VerbResult> RunCompareVerb(const std::string& reference,
                                          const std::string& candidate, const CorpusRun& run,
                                          CompareOptions o) {
  o.reader = run.reader;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (!run.tokenizer.empty() && run.tokenizer != "byte") {
    auto t = LoadVerbTokenizer(run.tokenizer);
    if (!t.ok()) return t.status();
    tok = *std::move(t);
    o.tokenizer = tok.get();
  }
  auto rep = CompareCorpora({reference}, {candidate}, o);
  if (!rep.ok()) return rep.status();
  VerbResult v;
  v.output = Render(run.json, *rep, CompareReportToJson, CompareReportToText);
  v.problems = !rep->covers;
  return v;
}

absl::StatusOr<VerbResult> RunStatsVerb(const std::string& path, bool json) {
  // A directory, device or FIFO: one line, exit 2 (the formats need the file's size).
  if (auto st = CheckRegularFile(
          path, "statistics are read from a regular .npy, .safetensors or .csv file");
      !st.ok()) {
    return st;
  }
  auto rep = FeatureStatsOfFile(path);
  if (!rep.ok()) return rep.status();
  VerbResult v;
  v.output = Render(json, *rep, FeatureReportToJson, FeatureReportToText);
  v.problems = NonFiniteCount(*rep) > 0;  // NaN or Inf; the other findings are advice
  return v;
}

}  // namespace trainscope::data
