// How close `trainscope env fingerprint` gets to its floor. Measured side by side in one run,
// median of --reps runs each:
//   parallel    Fingerprint() as the CLI runs it (child programs in threads)
//   sequential  the same probes one after another
//   floor       the slowest single probe alone: asking /usr/bin/python3 for torch versions
// Figures: parallel / floor (1.0 = the fingerprint costs no more than its slowest probe) and
// sequential / parallel (what the threads buy). Prints one JSON object.
//   env_fingerprint_bench [--reps 5] [--python-timeout-ms 2000]
// (the CLI's default limit is 2000 ms; a larger one measures an uncut torch import).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "env/probes.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/os.h"
#include "trainscope/env/fingerprint.h"

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double TimeMs(F&& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  int python_timeout_ms = 2000;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--python-timeout-ms") && i + 1 < argc) {
      python_timeout_ms = std::max(100, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: env_fingerprint_bench [--reps N] [--python-timeout-ms MS]\n");
      return 2;
    }
  }
  using trainscope::Os;
  namespace env = trainscope::env;
  env::FingerprintOptions par;
  par.python_timeout = std::chrono::milliseconds(python_timeout_ms);
  env::FingerprintOptions seq = par;
  seq.parallel = false;
  std::vector<double> tp, ts, tf;
  nlohmann::json last;
  for (int r = 0; r < reps; ++r) {
    tp.push_back(TimeMs([&] { last = *env::Fingerprint(Os::Default(), par); }));
    ts.push_back(TimeMs([&] { (void)env::Fingerprint(Os::Default(), seq); }));
    tf.push_back(TimeMs(
        [&] { (void)env::ProbePython(Os::Default(), "/usr/bin/python3", par.python_timeout); }));
  }
  nlohmann::json out;
  std::vector<std::string> args(argv, argv + argc);
  out["argv"] = args;
  out["trainscope_version"] = TS_VERSION;
  out["reps"] = reps;
  out["python_timeout_ms"] = python_timeout_ms;
  out["python_probe_cut_off"] = last["frameworks"].empty()
                                    ? false
                                    : last["frameworks"][0]
                                              .value("torch_nccl", "")
                                              .rfind("error: importing torch took longer", 0) == 0;
  out["torch"] =
      last["frameworks"].empty() ? nlohmann::json("absent") : last["frameworks"][0]["torch"];
  out["parallel_ms"] = Median(tp);
  out["sequential_ms"] = Median(ts);
  out["floor_python_probe_ms"] = Median(tf);
  out["parallel_over_floor"] = Median(tp) / Median(tf);
  out["sequential_over_parallel"] = Median(ts) / Median(tp);
  out["under_3s"] = Median(tp) < 3000.0;
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
