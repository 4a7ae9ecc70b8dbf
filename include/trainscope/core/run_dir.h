// The run-directory contract: one naming scheme for the directories doctor, launch and train
// create, and the one place that knows where each part writes inside one.
//
//   runs/<kind>-<UTC YYYYmmdd-HHMMSS>-<pid>/   DefaultRunDir(kind)
//     LOCK                                        the writer lock (run_dir_lock.h)
//     report.json, report.md, fingerprint.json   doctor
//     parts/<part>.stdout|.stderr                 doctor's child processes
//     launch.json, rank<R>/                       launch (per-rank logs)
//     train/metrics.rank<R>.jsonl, config.json, summary.json, weights.rank<R>.json
//     train/tb/rank<R>/events.out.tfevents.*      train's TensorBoard scalars (train.tensorboard)
//     hang/flight_recorder.rank<R>.json, stacks.rank<R>.txt, analysis.json
//     train/config.json, summary.json             train's config and end-of-run summary
//     hang/analysis.json                          launch's hang analysis of the dumps
//     report.html                                 `trainscope report`'s page
//     checkpoints/step-<N>/, anomaly-step-<N>/    train's checkpoints (ckpt format): meta.json,
//                                                 manifest.json, ...
//     data/                                       data scan reports
//     trace/                                      profiler traces
//     compare/                                    compare --json reports (dumps or runs)
//     dump/step<N>/rank<R>/                       train --dump's op dumps (msprobe's layout)
//
// Every writer (doctor, launch, train, hang) takes its paths from here; launch, train and the
// Python writers also take the directory's lock first (run_dir_lock.h).
// Thread-safety: pure functions (DefaultRunDir reads the clock and the pid only).
#ifndef TRAINSCOPE_CORE_RUN_DIR_H_
#define TRAINSCOPE_CORE_RUN_DIR_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace trainscope::run_dir {

// Subfolders of a run directory.
inline constexpr char kTrain[] = "train";
inline constexpr char kHang[] = "hang";
inline constexpr char kCheckpoints[] = "checkpoints";
inline constexpr char kData[] = "data";
inline constexpr char kTrace[] = "trace";
inline constexpr char kCompare[] = "compare";  // `compare --json` reports the report shows
inline constexpr char kDump[] = "dump";        // train --dump's op dumps (train/dump.h)
inline constexpr char kParts[] = "parts";
// Inside kTrain: the TensorBoard event files, one folder per rank (`tensorboard --logdir
// <run>/train/tb` shows each rank as a run).
inline constexpr char kTensorBoard[] = "tb";

// Files at the top of a run directory.
inline constexpr char kDoctorReportJson[] = "report.json";
inline constexpr char kDoctorReportMd[] = "report.md";
inline constexpr char kFingerprint[] = "fingerprint.json";
inline constexpr char kLaunchJson[] = "launch.json";
inline constexpr char kReportHtml[] = "report.html";  // `trainscope report`'s default page
// Inside RankLogDir: a launched rank's output.
inline constexpr char kRankStdoutLog[] = "stdout.log";
inline constexpr char kRankStderrLog[] = "stderr.log";

// Files inside kTrain and kHang.
inline constexpr char kTrainConfigJson[] = "config.json";
inline constexpr char kTrainSummaryJson[] = "summary.json";
inline constexpr char kHangAnalysisJson[] = "analysis.json";

// Inside kCheckpoints: a checkpoint folder is "step-<N>", or "anomaly-step-<N>" for one kept
// at an anomaly; a writer's temporary one adds ".tmp-<pid>" (ckpt/checkpoint.h).
inline constexpr char kCheckpointStepPrefix[] = "step-";
inline constexpr char kAnomalyPrefix[] = "anomaly-";
inline constexpr char kCheckpointTmpInfix[] = ".tmp-";
// Files of one checkpoint folder.
inline constexpr char kCheckpointMeta[] = "meta.json";
inline constexpr char kCheckpointManifest[] = "manifest.json";

// "runs/<kind>-<UTC YYYYmmdd-HHMMSS>-<pid>" for the given time and pid (pure).
std::string RunDirName(const std::string& kind, int64_t unix_s, int pid);
// RunDirName for now and this process.
std::string DefaultRunDir(const std::string& kind);

// run_dir + "/" + part (a subfolder or top-level file above); no doubled "/" when run_dir
// ends with one; part alone when run_dir is empty.
std::string Join(const std::string& run_dir, const std::string& part);

// Per-rank files.
std::string TrainMetricsPath(const std::string& run_dir, int rank);  // train/metrics.rank<R>.jsonl
// Whether a file name is a rank's metrics file name (metrics.rank*.jsonl).
bool IsTrainMetricsName(std::string_view file_name);
std::string TrainWeightsPath(const std::string& run_dir, int rank);  // train/weights.rank<R>.json
std::string TrainTensorBoardDir(const std::string& run_dir, int rank);  // train/tb/rank<R>
std::string HangDumpPath(const std::string& run_dir,
                         int rank);  // hang/flight_recorder.rank<R>.json
std::string HangStacksPath(const std::string& run_dir, int rank);  // hang/stacks.rank<R>.txt
std::string RankLogDir(const std::string& run_dir, int rank);      // rank<R>
// The stems of the per-rank hang files (flight_recorder.rank<R>.json, stacks.rank<R>.txt).
inline constexpr char kHangDumpPrefix[] = "flight_recorder.rank";
inline constexpr char kHangStacksPrefix[] = "stacks.rank";
// Whether a file name is a rank's flight-recorder dump (flight_recorder.rank*.json) or a
// rank's stack dump (stacks.rank*.txt).
bool IsHangDumpName(std::string_view file_name);
bool IsHangStacksName(std::string_view file_name);
// The rank in a per-rank file name ("metrics.rank3.jsonl", "stacks.rank3.txt" -> 3); -1 when
// the name holds no "rank<digits>".
int RankFromFileName(std::string_view file_name);

// Whole-run files.
std::string TrainConfigPath(const std::string& run_dir);   // train/config.json
std::string TrainSummaryPath(const std::string& run_dir);  // train/summary.json
std::string HangAnalysisPath(const std::string& run_dir);  // hang/analysis.json
std::string CheckpointsDir(const std::string& run_dir);    // checkpoints

// Checkpoint folders: CheckpointDirName is "step-<N>" ("anomaly-step-<N>" when anomaly);
// CheckpointStepDir / AnomalyStepDir join it to `dir` (a run directory's checkpoints folder,
// or any folder of checkpoints).
std::string CheckpointDirName(int64_t step, bool anomaly);
std::string CheckpointStepDir(const std::string& dir, int64_t step);
std::string AnomalyStepDir(const std::string& dir, int64_t step);
// Whether a folder name is a finished checkpoint's ("step-<digits>" or "anomaly-step-<digits>",
// no ".tmp-" suffix).
bool IsCheckpointStepName(std::string_view name);

// report: the folder a user may give torch.profiler's tensorboard_trace_handler (the report
// analyses the *.pt.trace.json traces there), and the per-rank files as messages name them,
// "<R>" for the rank ("train/metrics.rank<R>.jsonl", "hang/flight_recorder.rank<R>.json").
inline constexpr char kProfiler[] = "profiler";
std::string TrainMetricsPattern();
std::string HangDumpPattern();

}  // namespace trainscope::run_dir

#endif  // TRAINSCOPE_CORE_RUN_DIR_H_
