// Environment fingerprints (`env check`, `env diff`): load through the schema, then run the
// compatibility checks and a diff against the same and an empty fingerprint, as the verbs do.
#include <cstdint>
#include <string>
#include <string_view>

#include "trainscope/core/fake_os.h"
#include "trainscope/env/check.h"
#include "trainscope/env/diff.h"
#include "trainscope/env/fingerprint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainscope;
  FakeOs os;
  os.AddFile("/fp.json", std::string(reinterpret_cast<const char*>(data), size));
  auto fp = env::LoadFingerprint(&os, "/fp.json");
  if (!fp.ok()) return 0;
  env::CheckResult check = env::Check(*fp, env::DefaultMatrix());
  (void)env::CheckResultToJson(check).dump();
  (void)env::RenderCheck(check);
  env::DiffResult diff = env::Diff(*fp, nlohmann::json::object());
  (void)env::DiffToJson(diff, "a", "b").dump();
  (void)env::RenderDiff(diff, "a", "b");
  (void)env::Diff(*fp, *fp);
  return 0;
}
