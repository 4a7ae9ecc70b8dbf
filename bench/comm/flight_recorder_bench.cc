// Flight recorder cost (Google Benchmark). Figures in docs/PERFORMANCE.md ("Flight
// recorder"); the ratio that matters is Dispatch with the recorder on / off, measured side
// by side in one run.
//   BM_RecordOp            one op's three records (scheduled, started, completed) on one
//                          shared recorder; ->Threads(2) records from 2 threads at once
//   BM_RecordOpTagged      the same under a ScopedCallerTag set per op (what the trainer does)
//   BM_DispatchAllReduce   Communicator::AllReduce of 1 float on a 1-rank gloo communicator
//                          (the whole Dispatch path with the engine doing almost nothing),
//                          recorder off (arg 0) or on with 2000 entries (arg 1)
// Usage: comm_flight_recorder_bench --benchmark_repetitions=5
//          --benchmark_out=results.json --benchmark_out_format=json
#include <benchmark/benchmark.h>

#include <cstdio>
#include <memory>

#include "trainscope/comm/comm.h"
#include "trainscope/comm/flight_recorder.h"

namespace trainscope::comm {
namespace {

FlightRecorder& SharedRecorder() {
  static FlightRecorder* recorder = [] {
    FlightRecorderOptions o;  // default capacity
    auto r = FlightRecorder::Create(o);
    static std::shared_ptr<FlightRecorder> keep = *r;
    ProcessGroupInfo pg;
    pg.ranks = {0};
    pg.backend = "gloo";
    (void)keep->RegisterProcessGroup(pg);
    return keep.get();
  }();
  return *recorder;
}

void RecordOne(FlightRecorder& fr, int64_t k) {
  FlightOp op;
  op.collective_seq_id = k;
  op.op_id = k;
  op.op = OpType::kAllReduce;
  op.input_numel = op.output_numel = 1024;
  op.enqueue_mono_ns = k;
  int64_t id = fr.RecordScheduled(op);
  fr.RecordStarted(id, k + 1);
  fr.RecordCompleted(id, k + 2, absl::OkStatus());
}

void BM_RecordOp(benchmark::State& state) {
  FlightRecorder& fr = SharedRecorder();
  int64_t k = 0;
  for (auto _ : state) RecordOne(fr, ++k);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RecordOp)->Threads(1)->Threads(2)->UseRealTime();

void BM_RecordOpTagged(benchmark::State& state) {
  FlightRecorder& fr = SharedRecorder();
  int64_t k = 0;
  for (auto _ : state) {
    ScopedCallerTag tag("step 17 backward bucket 3");
    RecordOne(fr, ++k);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RecordOpTagged)->Threads(1)->UseRealTime();

void BM_DispatchAllReduce(benchmark::State& state) {
  CommOptions o;
  o.backend = "gloo";
  o.flight_recorder_entries = state.range(0) != 0 ? 2000 : 0;
  auto comm = Communicator::Create(o);
  if (!comm.ok()) {
    state.SkipWithError(std::string(comm.status().message()).c_str());
    return;
  }
  float x = 1.0f;
  for (auto _ : state) {
    absl::Status st = (*comm)->AllReduce(&x, 1, DType::kFloat32);
    if (!st.ok()) {
      state.SkipWithError(std::string(st.message()).c_str());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(state.range(0) != 0 ? "recorder on" : "recorder off");
}
BENCHMARK(BM_DispatchAllReduce)->Arg(0)->Arg(1);

}  // namespace
}  // namespace trainscope::comm

BENCHMARK_MAIN();
