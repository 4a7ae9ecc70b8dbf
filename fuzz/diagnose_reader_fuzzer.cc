// diagnose's metrics readers (series.h) on arbitrary bytes: the first byte chooses the
// format (trainscope metrics JSONL, metrics JSONL, CSV, trainer_state.json, TensorBoard
// event file, Megatron-LM log), the rest is the file. Kind detection runs too, on a name of
// that format. Any result is fine; a crash, leak, sanitizer report or hang is a finding.
#include <cstdint>
#include <string>
#include <string_view>

#include "trainscope/diagnose/curve.h"
#include "trainscope/diagnose/series.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainscope::diagnose;
  if (size < 1) return 0;
  static const struct {
    FileKind kind;
    const char* name;
  } kFormats[] = {
      {FileKind::kTrainscopeMetrics, "metrics.rank0.jsonl"},
      {FileKind::kJsonl, "metrics.jsonl"},
      {FileKind::kCsv, "metrics.csv"},
      {FileKind::kTrainerState, "trainer_state.json"},
      {FileKind::kTensorBoard, "events.out.tfevents.1.host"},
      {FileKind::kMegatronLog, "train.log"},
  };
  const auto& f = kFormats[data[0] % std::size(kFormats)];
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  (void)DetectKind(f.name, text.substr(0, 4096));
  absl::StatusOr<Series> s = ParseSeries(f.name, f.kind, text);
  if (!s.ok()) return 0;
  // The classifier takes whatever the readers produce (NaN, huge steps, one point).
  (void)ClassifyCurve(*s);
  return 0;
}
