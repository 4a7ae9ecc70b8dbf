// ckpt_bench: checkpoint write throughput vs `dd ... conv=fsync` of the same byte count to
// the same directory, alternating runs, best of N each (these machines are shared).
//   ckpt_bench [--dir D] [--mib M] [--runs R]   -> JSON on stdout
//   ckpt_bench --fixture DIR                    -> writes the golden fixture checkpoints
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "trainscope/ckpt/checkpoint.h"

namespace fs = std::filesystem;
using trainscope::ckpt::CheckpointData;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Two deterministic checkpoints (steps 10 and 20) for tests/golden/ckpt.
int WriteFixture(const std::string& dir) {
  std::vector<float> w(12), m(12);
  for (int i = 0; i < 12; ++i) w[i] = 0.25f * (i - 6), m[i] = 0.01f * i;
  std::vector<int64_t> pos{128};
  for (int64_t step : {10, 20}) {
    if (step == 20) w[3] = 1.5f;
    CheckpointData d;
    d.step = step;
    d.world_size = 2;
    d.config_hash = "0123456789abcdef";
    d.model = {{"h.0.weight", "F32", {3, 4}, w.data(), 48}, {"pos", "I64", {1}, pos.data(), 8}};
    d.optimizer = {{"h.0.weight.exp_avg", "F32", {3, 4}, m.data(), 48}};
    for (int r = 0; r < 2; ++r) {
      d.json_files[absl::StrCat("rank", r, ".json")] = {
          {"rank", r}, {"rng_seed", 1234 + r}, {"data_position", step * 8 + r}};
    }
    auto p = trainscope::ckpt::WriteCheckpoint(dir, d);
    if (!p.ok()) {
      std::cerr << p.status() << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp/ckpt_bench", fixture;
  long mib = 512;
  int runs = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--dir") dir = argv[i + 1];
    if (a == "--mib") mib = std::atol(argv[i + 1]);
    if (a == "--runs") runs = std::atoi(argv[i + 1]);
    if (a == "--fixture") fixture = argv[i + 1];
  }
  if (!fixture.empty()) return WriteFixture(fixture);
  const uint64_t bytes = static_cast<uint64_t>(mib) << 20;
  // 8 F32 tensors of random-looking values (the disk must not see runs of zeros we could
  // skip; dd writes zeros, which no local filesystem here compresses).
  const int kTensors = 8;
  const uint64_t per = bytes / kTensors / 4;
  std::vector<std::vector<float>> t(kTensors, std::vector<float>(per));
  uint32_t x = 1;
  for (auto& v : t) {
    for (float& f : v) f = static_cast<float>((x = x * 1664525u + 1013904223u) >> 8);
  }
  CheckpointData d;
  for (int i = 0; i < kTensors; ++i) {
    d.model.push_back({absl::StrCat("layer.", i, ".weight"), "F32", {per}, t[i].data(), per * 4});
  }
  fs::create_directories(dir);
  double best_ckpt = 1e30, best_dd = 1e30;
  for (int r = 0; r < runs; ++r) {
    fs::remove_all(dir + "/ck");
    d.step = r;
    double t0 = Now();
    auto p = trainscope::ckpt::WriteCheckpoint(dir + "/ck", d);
    double t1 = Now();
    if (!p.ok()) {
      std::cerr << p.status() << "\n";
      return 1;
    }
    best_ckpt = std::min(best_ckpt, t1 - t0);
    const std::string cmd = absl::StrCat(
        "dd if=/dev/zero of=", dir, "/dd.bin bs=4M count=", bytes >> 22, " conv=fsync status=none");
    t0 = Now();
    if (std::system(cmd.c_str()) != 0) return 1;
    t1 = Now();
    best_dd = std::min(best_dd, t1 - t0);
    fs::remove(dir + "/dd.bin");
  }
  fs::remove_all(dir + "/ck");
  nlohmann::json out = {{"bench", "ckpt_write"},
                        {"argv", std::vector<std::string>(argv, argv + argc)},
                        {"bytes", bytes},
                        {"runs", runs},
                        {"ckpt_gbps", bytes / best_ckpt / 1e9},
                        {"dd_gbps", bytes / best_dd / 1e9},
                        {"ratio_ckpt_over_dd", best_dd / best_ckpt}};
  std::cout << out.dump(2) << "\n";
  return 0;
}
