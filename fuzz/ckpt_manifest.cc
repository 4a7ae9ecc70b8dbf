// ckpt: one of our checkpoint directories built from the input (SplitTwo: manifest.json,
// then model.safetensors), checked, inspected (safetensors header + tensor statistics),
// printed, and diffed against itself. Also the bare safetensors header parser (the one shared
// reader, core/safetensors.h, with ckpt's wording of its errors; safetensors_fuzzer feeds it
// whole files through `data stats`).
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "trainscope/ckpt/checkpoint.h"
#include "trainscope/ckpt/inspect.h"
#include "trainscope/ckpt/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainscope::ckpt;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  (void)ParseHeader("input", in, in.size() + 8 + (size ? data[0] : 0));
  std::string_view manifest, model;
  trainscope::fuzz::SplitTwo(in, &manifest, &model);
  std::filesystem::create_directories(trainscope::fuzz::WorkDir() + "/step-1");
  trainscope::fuzz::WriteInput("step-1/manifest.json", manifest);
  const std::string model_path = trainscope::fuzz::WriteInput("step-1/model.safetensors", model);
  const std::string dir = trainscope::fuzz::WorkDir() + "/step-1";
  (void)CheckCheckpoint(dir, true);
  auto r = Inspect(dir, InspectOptions{});
  if (r.ok()) {
    (void)ReportToJson(*r, true).dump();
    (void)FormatReportText(*r, true);
  }
  auto f = Inspect(model_path, InspectOptions{});
  if (f.ok()) (void)FormatReportText(*f, true);
  auto d = Diff(model_path, model_path, InspectOptions{});
  if (d.ok()) (void)DiffToJson(*d).dump();
  return 0;
}
