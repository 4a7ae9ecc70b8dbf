// data_scan_bench: the library path of `trainscope data scan` (RunScan) in a binary that
// does not link libtorch, whose start-up (~0.5 s of dynamic linking and operator
// registration) would otherwise be timed too. Same options and the same JSON as the CLI.
//   data_scan_bench [data scan] FILE... [--threads N] [--no-near-dup] [--no-lang]
//                   [--no-noise] [--exact-only]
//                   [--tmp-dir DIR] [--verdicts FILE] [--threshold J]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "trainscope/data/scan.h"

int main(int argc, char** argv) {
  using namespace trainscope::data;
  ScanOptions o;
  o.progress = false;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      o.threads = std::atoi(argv[++i]);
    } else if (a == "--no-near-dup") {
      o.near_dup = false;
    } else if (a == "--no-lang") {
      o.language = false;
    } else if (a == "--no-noise") {
      o.noise = false;
    } else if (a == "--exact-only") {
      o.near_dup = o.noise = o.language = false;
    } else if (a == "--tmp-dir" && i + 1 < argc) {
      o.tmp_dir = argv[++i];
    } else if (a == "--verdicts" && i + 1 < argc) {
      o.verdicts_path = argv[++i];
    } else if (a == "--threshold" && i + 1 < argc) {
      o.threshold = std::atof(argv[++i]);
    } else if (a == "--json" || (i <= 2 && (a == "data" || a == "scan"))) {
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "data_scan_bench: unknown flag %s\n", a.c_str());
      return 2;
    } else {
      files.push_back(a);
    }
  }
  auto inputs = ExpandInputs(files, InputFormat::kAuto);
  if (!inputs.ok()) {
    std::fprintf(stderr, "data_scan_bench: %s\n", std::string(inputs.status().message()).c_str());
    return 2;
  }
  auto r = RunScan(*inputs, o);
  if (!r.ok()) {
    std::fprintf(stderr, "data_scan_bench: %s\n", std::string(r.status().message()).c_str());
    return 2;
  }
  std::printf("%s\n", ScanResultToJson(*r, o).dump(2).c_str());
  return 0;
}
