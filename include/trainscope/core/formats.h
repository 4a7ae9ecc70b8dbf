// One list of the on-disk and --json document formats trainscope writes: the "format" name
// each carries and the version a reader of this build understands. Readers compare against
// these constants instead of spelling the strings again; docs/formats.md describes each.
// Adding a format: add its constant and a row to kFormats (formats_test checks the list has
// no duplicates and that every name starts with "trainscope.").
#ifndef TRAINSCOPE_CORE_FORMATS_H_
#define TRAINSCOPE_CORE_FORMATS_H_

#include <string_view>

namespace trainscope::formats {

// Format names.
inline constexpr char kCheckpoint[] = "trainscope.checkpoint";
inline constexpr char kCheckpointManifest[] = "trainscope.checkpoint.manifest";
inline constexpr char kCheckpointRank[] = "trainscope.checkpoint.rank";
inline constexpr char kCkptDiff[] = "trainscope.ckpt.diff";
inline constexpr char kCkptReport[] = "trainscope.ckpt.report";
inline constexpr char kCompare[] = "trainscope.compare";
inline constexpr char kDataClean[] = "trainscope.data.clean";
inline constexpr char kDataCompare[] = "trainscope.data.compare";
inline constexpr char kDataPack[] = "trainscope.data.pack";
inline constexpr char kDataScan[] = "trainscope.data.scan";
inline constexpr char kDataStats[] = "trainscope.data.stats";
inline constexpr char kDiagnose[] = "trainscope.diagnose";
inline constexpr char kDiagnoseRules[] = "trainscope.diagnose.rules";
inline constexpr char kDoctor[] = "trainscope.doctor";
inline constexpr char kEnvCheck[] = "trainscope.env.check";
inline constexpr char kEnvCompatMatrix[] = "trainscope.env.compat_matrix";
inline constexpr char kEnvDiff[] = "trainscope.env.diff";
inline constexpr char kEnvFingerprint[] = "trainscope.env.fingerprint";
inline constexpr char kFinding[] = "trainscope.finding";
inline constexpr char kFlightRecorder[] = "trainscope.flight_recorder";
inline constexpr char kHangAnalysis[] = "trainscope.hang.analysis";
inline constexpr char kLaunch[] = "trainscope.launch";
inline constexpr char kPlan[] = "trainscope.plan";
inline constexpr char kPythonState[] = "trainscope.python_state";
inline constexpr char kReport[] = "trainscope.report";
inline constexpr char kReportData[] = "trainscope.report.data";
inline constexpr char kSelftestComm[] = "trainscope.selftest.comm";
inline constexpr char kSelftestCommSweep[] = "trainscope.selftest.comm_sweep";
inline constexpr char kSelftestDevice[] = "trainscope.selftest.device";
inline constexpr char kSelftestTrain[] = "trainscope.selftest.train";
inline constexpr char kTopo[] = "trainscope.topo";
inline constexpr char kTraceAnalysis[] = "trainscope.trace.analysis";
inline constexpr char kTraceExport[] = "trainscope.trace.export";
inline constexpr char kTrainConfig[] = "trainscope.train_config";
inline constexpr char kTrainMetrics[] = "trainscope.train_metrics";
inline constexpr char kTrainProbe[] = "trainscope.train_probe";
inline constexpr char kTrainResult[] = "trainscope.train_result";
inline constexpr char kTrainSummary[] = "trainscope.train_summary";
inline constexpr char kTrainSweep[] = "trainscope.train_sweep";
inline constexpr char kTrainWeights[] = "trainscope.train_weights";

struct Format {
  const char* name;
  int version;       // the version this build writes and reads
  const char* what;  // one line for listings
};

// Every format, sorted by name.
inline constexpr Format kFormats[] = {
    {kCheckpoint, 1, "checkpoint meta.json (ckpt)"},
    {kCheckpointManifest, 1, "checkpoint manifest.json: files and hashes (ckpt)"},
    {kCheckpointRank, 1, "a rank's state in a trainer checkpoint (rank<R>.json)"},
    {kCkptDiff, 1, "ckpt diff --json: two checkpoints, tensor by tensor"},
    {kCkptReport, 1, "ckpt verify|inspect --json: each checkpoint's state, the newest good one"},
    {kCompare, 1, "compare --json report: two msprobe dumps, op by op"},
    {kDataClean, 1, "data clean --json report"},
    {kDataCompare, 1, "data compare --json report"},
    {kDataPack, 1, "data pack --json report"},
    {kDataScan, 1, "data scan --json report"},
    {kDataStats, 1, "data stats --json report"},
    {kDiagnose, 1, "diagnose --json report: ranked findings and loss-curve classes"},
    {kDiagnoseRules, 1, "diagnose rule file (data/diagnose/rules.json)"},
    {kDoctor, 1, "doctor report.json"},
    {kEnvCheck, 1, "env check --json: findings"},
    {kEnvCompatMatrix, 1, "compatibility matrix (data/compat_matrix.json)"},
    {kEnvDiff, 1, "env diff --json"},
    {kEnvFingerprint, 1, "env fingerprint"},
    {kFinding, 1, "one finding (core/finding.h), inside other documents"},
    {kFlightRecorder, 1, "flight recorder dump (hang/flight_recorder.rank<R>.json)"},
    {kHangAnalysis, 1, "hang analyze --json report (hang/analysis.json)"},
    {kLaunch, 1, "launch.json of a launched job"},
    {kPlan, 1, "plan --json: parallel strategies"},
    {kPythonState, 1, "trainscope.checkpoint.save's meta.json \"state\" (Python)"},
    {kReport, 1, "report summary of a written page (report.html)"},
    {kReportData, 1, "the data a report page embeds"},
    {kSelftestComm, 1, "selftest comm --json"},
    {kSelftestCommSweep, 1, "selftest comm --sweep-env --json"},
    {kSelftestDevice, 1, "selftest device --json"},
    {kSelftestTrain, 1, "selftest train --json"},
    {kTopo, 1, "topo --json: link matrix and placement"},
    {kTraceAnalysis, 1, "trace analyze --json"},
    {kTraceExport, 1, "trace analyze --export Chrome trace"},
    {kTrainConfig, 1, "train config (train/config.json)"},
    {kTrainMetrics, 1, "train metrics JSONL (train/metrics.rank<R>.jsonl)"},
    {kTrainProbe, 1, "train --probe-batch --json"},
    {kTrainResult, 1, "train --json: the finished run (train/summary.json's figures and more)"},
    {kTrainSummary, 1, "train summary (train/summary.json)"},
    {kTrainSweep, 1, "train --sweep-workers --json"},
    {kTrainWeights, 1, "train weights checksum (train/weights.rank<R>.json)"},
};

// The row of a format name; nullptr when unknown.
inline const Format* FindFormat(std::string_view name) {
  for (const Format& f : kFormats) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

}  // namespace trainscope::formats

#endif  // TRAINSCOPE_CORE_FORMATS_H_
