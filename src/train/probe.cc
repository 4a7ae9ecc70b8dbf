// Batch-size probe: the decisions (candidates, memory prediction, stop rules, recommendation)
// and the report. The child processes that measure each candidate are in probe_run.cc.
#include "trainscope/train/probe.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "trainscope/core/table.h"

namespace trainscope::train {
namespace {

std::vector<int> ProbeDivisors(int n) {
  std::vector<int> small, large;
  for (int d = 1; static_cast<int64_t>(d) * d <= n; ++d) {
    if (n % d != 0) continue;
    small.push_back(d);
    if (d != n / d) large.push_back(n / d);
  }
  small.insert(small.end(), large.rbegin(), large.rend());
  return small;
}

std::string ProbePct(double share) { return FormatDouble(100.0 * share, 1) + "%"; }

// This rank's tokens/s of the real run: `accum` micro-steps of forward + backward at the
// measured pace, then one optimizer step.
double ProjectedTokensPerS(const ProbeMeasurement& m, int micro_batch, int accum, int seq_len) {
  const double fb_ms = std::max(0.0, m.step_ms - m.optimizer_ms);
  const double step_ms = accum * fb_ms + m.optimizer_ms;
  if (step_ms <= 0) return 0;
  return 1000.0 * accum * static_cast<double>(micro_batch) * seq_len / step_ms;
}

bool ProbeRowFits(const ProbeRow& r, double safe_bytes) {
  return r.ran && r.m.ok && r.m.peak_memory_bytes <= safe_bytes;
}

absl::Status ValidateProbeOptions(const ProbeOptions& o) {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  if (o.steps < 2 || o.steps > 1000)
    return bad(absl::StrCat("--probe-steps ", o.steps, ": must be 2..1000"));
  if (o.warmup_steps < 0 || o.warmup_steps >= o.steps) {
    return bad(absl::StrCat("probe warm-up ", o.warmup_steps, " steps: must be 0..steps-1 (",
                            o.steps - 1, ")"));
  }
  if (o.ranks < 1 || o.ranks > 1 << 20)
    return bad(absl::StrCat("--probe-ranks ", o.ranks, ": must be 1..1048576"));
  if (o.global_batch < 0)
    return bad(absl::StrCat("--probe-global-batch ", o.global_batch, ": must be >= 1"));
  if (!(o.safe_fraction > 0 && o.safe_fraction <= 1))
    return bad("probe safe fraction must be in (0, 1]");
  if (!(o.min_gain >= 0 && o.min_gain < 1)) return bad("probe minimum gain must be in [0, 1)");
  if (o.max_accum < 1) return bad("probe accumulation cap must be >= 1");
  if (o.max_candidates < 1) return bad("probe candidate count must be >= 1");
  if (!(o.candidate_timeout_s > 0)) return bad("probe candidate time limit must be > 0");
  return absl::OkStatus();
}

// Picks the recommendation among the rows that fit (report.rows filled, relative set).
void Recommend(ProbeReport* r) {
  const double safe = r->safe_fraction * r->memory_limit_bytes;
  double best = 0;
  for (const ProbeRow& row : r->rows) {
    if (ProbeRowFits(row, safe) && row.accum <= r->max_accum) {
      best = std::max(best, row.projected_tokens_per_s);
    }
  }
  int pick = -1;
  for (size_t i = 0; i < r->rows.size(); ++i) {
    const ProbeRow& row = r->rows[i];
    if (!ProbeRowFits(row, safe) || row.accum > r->max_accum) continue;
    // "Good throughput": within min_gain of the best; among those the largest micro-batch
    // (the fewest accumulation steps).
    if (row.projected_tokens_per_s >= (1 - r->min_gain) * best &&
        (pick < 0 || row.micro_batch > r->rows[pick].micro_batch)) {
      pick = static_cast<int>(i);
    }
  }
  if (pick < 0) {
    // Nothing within the accumulation cap fits: the largest micro-batch that fits, flagged.
    for (size_t i = 0; i < r->rows.size(); ++i) {
      if (ProbeRowFits(r->rows[i], safe) &&
          (pick < 0 || r->rows[i].micro_batch > r->rows[pick].micro_batch)) {
        pick = static_cast<int>(i);
      }
    }
    if (pick >= 0) r->accum_over_cap = true;
  }
  const std::string batch = absl::StrCat("global batch ", r->global_batch, " on ", r->ranks,
                                         r->ranks == 1 ? " rank" : " ranks");
  if (pick < 0) {
    const ProbeRow* first = r->rows.empty() ? nullptr : &r->rows.front();
    r->verdict =
        first == nullptr
            ? "no candidate was run"
            : absl::StrCat("even micro-batch ", first->micro_batch, " does not fit (",
                           first->ran && first->m.ok
                               ? absl::StrCat(ProbePct(first->memory_share), " of the limit, over ",
                                              ProbePct(r->safe_fraction))
                               : first->verdict,
                           "): shorten model.seq_len, shrink the model, or use more memory");
    return;
  }
  ProbeRow& row = r->rows[pick];
  row.verdict = "recommended";
  r->recommended = pick;
  r->micro_batch = row.micro_batch;
  r->accum = row.accum;
  if (r->accum_over_cap) {
    r->verdict = absl::StrCat(
        "micro-batch ", row.micro_batch, " is the largest that fits, but the ", batch,
        " then needs accumulation ", row.accum, " > ", r->max_accum,
        ": past that the per-token cost rises; use more ranks (devices), a larger micro-batch "
        "with less memory per sequence, or a smaller global batch");
    return;
  }
  r->verdict = absl::StrCat("micro-batch ", row.micro_batch, " with accumulation ", row.accum,
                            " for the ", batch, ": peak ", FormatBytes(row.m.peak_memory_bytes),
                            " (", ProbePct(row.memory_share), " of the limit), ",
                            ProbePct(row.relative), " of the best projected throughput");
}

}  // namespace

int NextCandidate(int per_rank_batch, int current) {
  if (current >= per_rank_batch) return 0;
  int next = 0;
  for (int d : ProbeDivisors(per_rank_batch)) {
    if (d > current && static_cast<int64_t>(d) <= 2 * static_cast<int64_t>(current)) next = d;
  }
  if (next != 0) return next;
  for (int d : ProbeDivisors(per_rank_batch)) {
    if (d > current) return d;
  }
  return 0;
}

int FirstCandidate(int per_rank_batch, int max_accum, double safe_limit_bytes,
                   const std::function<double(int)>& estimate_bytes) {
  const std::vector<int> divs = ProbeDivisors(per_rank_batch);
  int c = per_rank_batch;
  for (int d : divs) {
    if (per_rank_batch / d <= max_accum) {
      c = d;
      break;
    }
  }
  if (!estimate_bytes || !(safe_limit_bytes > 0)) return c;
  // A safe guess: the config's memory estimate (an upper bound in practice) under half the
  // safe limit, halving through the divisors.
  while (c > 1 && estimate_bytes(c) > 0.5 * safe_limit_bytes) {
    int lower = 1;
    for (int d : divs) {
      if (d <= c / 2) lower = d;
    }
    c = lower;
  }
  return c;
}

double PredictMemory(const std::vector<ProbeRow>& rows, int next,
                     const std::function<double(int)>& estimate_bytes) {
  std::vector<const ProbeRow*> ok;
  for (const ProbeRow& r : rows) {
    if (r.ran && r.m.ok) ok.push_back(&r);
  }
  if (ok.empty()) return 0;
  const ProbeRow& last = *ok.back();
  const double dx = next - last.micro_batch;
  // The estimate's slope; without one, the conservative guess that everything scales.
  const double est_slope = estimate_bytes && dx != 0
                               ? (estimate_bytes(next) - estimate_bytes(last.micro_batch)) / dx
                               : last.m.peak_memory_bytes / std::max(1, last.micro_batch);
  double slope = est_slope;
  if (ok.size() >= 2) {
    const ProbeRow& prev = *ok[ok.size() - 2];
    const double measured = (last.m.peak_memory_bytes - prev.m.peak_memory_bytes) /
                            (last.micro_batch - prev.micro_batch);
    slope = std::max(measured, 0.5 * est_slope);
  }
  return last.m.peak_memory_bytes + std::max(0.0, slope) * dx;
}

absl::StatusOr<ProbeReport> RunProbe(const TrainConfig& config, const ProbeOptions& o,
                                     int64_t memory_limit_bytes,
                                     const std::string& memory_limit_source,
                                     const std::function<double(int)>& estimate_bytes,
                                     const CandidateRunner& run) {
  if (absl::Status s = ValidateProbeOptions(o); !s.ok()) return s;
  if (memory_limit_bytes <= 0) return absl::InvalidArgumentError("probe: no memory limit");
  const int64_t global = o.global_batch > 0 ? o.global_batch
                                            : static_cast<int64_t>(config.train.micro_batch) *
                                                  config.train.grad_accum * o.ranks;
  if (global % o.ranks != 0) {
    return absl::InvalidArgumentError(absl::StrCat("global batch ", global,
                                                   " is not a multiple of the ", o.ranks,
                                                   " ranks (--probe-global-batch)"));
  }
  if (global / o.ranks > kMaxMicroBatch) {
    return absl::InvalidArgumentError(absl::StrCat("global batch ", global, " / ", o.ranks,
                                                   " ranks is over ", kMaxMicroBatch,
                                                   " sequences per rank"));
  }
  ProbeReport r;
  r.global_batch = static_cast<int>(global);
  r.ranks = o.ranks;
  r.per_rank_batch = static_cast<int>(global / o.ranks);
  r.seq_len = config.model.seq_len;
  r.memory_limit_bytes = memory_limit_bytes;
  r.memory_limit_source = memory_limit_source;
  r.safe_fraction = o.safe_fraction;
  r.steps = o.steps;
  r.warmup_steps = o.warmup_steps;
  r.min_gain = o.min_gain;
  r.max_accum = o.max_accum;
  const double limit = static_cast<double>(memory_limit_bytes);
  const double safe = o.safe_fraction * limit;
  auto progress = [&o](const std::string& line) {
    if (o.on_progress) o.on_progress(line);
  };

  // Grow from the safe guess; each candidate is predicted before it runs (stop before the
  // limit, not at it) and judged after (failure, memory, throughput gain).
  int cand = FirstCandidate(r.per_rank_batch, o.max_accum, safe, estimate_bytes);
  double best_projected = 0;
  int best_micro_batch = 0;
  while (cand > 0) {
    if (static_cast<int>(r.rows.size()) >= o.max_candidates) {
      r.stop_reason = absl::StrCat("stopped after ", o.max_candidates, " candidates");
      break;
    }
    ProbeRow row;
    row.micro_batch = cand;
    row.accum = r.per_rank_batch / cand;
    const bool have_measurement = std::any_of(r.rows.begin(), r.rows.end(),
                                              [](const ProbeRow& x) { return x.ran && x.m.ok; });
    if (have_measurement) {
      row.predicted_memory_bytes = PredictMemory(r.rows, cand, estimate_bytes);
      if (row.predicted_memory_bytes > safe) {
        row.memory_share = row.predicted_memory_bytes / limit;
        row.verdict = absl::StrCat("skipped: predicted ", ProbePct(row.memory_share));
        r.stop_reason = absl::StrCat("micro-batch ", cand, " not run: predicted peak ",
                                     FormatBytes(row.predicted_memory_bytes), " is over ",
                                     ProbePct(o.safe_fraction), " of the limit");
        r.rows.push_back(row);
        break;
      }
    }
    progress(absl::StrCat("probe: micro-batch ", cand, " (accumulation ", row.accum, "): ", o.steps,
                          " steps..."));
    row.ran = true;
    row.m = run(cand);
    if (!row.m.ok) {
      row.verdict = absl::StrCat("failed: ", row.m.failure);
      r.stop_reason = absl::StrCat("micro-batch ", cand, " failed: ", row.m.failure);
      progress(absl::StrCat("probe: micro-batch ", cand, " failed: ", row.m.failure));
      r.rows.push_back(row);
      break;
    }
    row.memory_share = row.m.peak_memory_bytes / limit;
    row.projected_tokens_per_s = ProjectedTokensPerS(row.m, cand, row.accum, r.seq_len);
    progress(absl::StrCat("probe: micro-batch ", cand, ": peak ",
                          FormatBytes(row.m.peak_memory_bytes), " (", ProbePct(row.memory_share),
                          " of the limit), ", FormatCount(std::llround(row.m.tokens_per_s)),
                          " tokens/s"));
    if (row.m.peak_memory_bytes > safe) {
      row.verdict = "over the safe limit";
      r.stop_reason = absl::StrCat("micro-batch ", cand, " used ", ProbePct(row.memory_share),
                                   " of the limit (over ", ProbePct(o.safe_fraction), ")");
      r.rows.push_back(row);
      break;
    }
    row.verdict = "fits";
    r.rows.push_back(row);
    if (best_projected > 0 && row.projected_tokens_per_s < (1 + o.min_gain) * best_projected) {
      r.rows.back().verdict = "fits; no gain";
      const double change = 100.0 * (row.projected_tokens_per_s / best_projected - 1);
      r.stop_reason = absl::StrCat(
          "projected tokens/s at micro-batch ", cand, ": ", change >= 0 ? "+" : "",
          FormatDouble(change, 1), "% against micro-batch ", best_micro_batch,
          " (a larger candidate must gain ", FormatDouble(100.0 * o.min_gain, 0), "%)");
      break;
    }
    if (row.projected_tokens_per_s > best_projected) {
      best_projected = row.projected_tokens_per_s;
      best_micro_batch = cand;
    }
    cand = NextCandidate(r.per_rank_batch, cand);
    if (cand == 0) {
      r.stop_reason =
          absl::StrCat("reached the per-rank batch ", r.per_rank_batch, " (accumulation 1)");
    }
  }
  double best = 0;
  for (const ProbeRow& row : r.rows) best = std::max(best, row.projected_tokens_per_s);
  for (ProbeRow& row : r.rows) row.relative = best > 0 ? row.projected_tokens_per_s / best : 0;
  Recommend(&r);
  return r;
}

nlohmann::json ProbeReportToJson(const ProbeReport& r) {
  nlohmann::json j = {{"format", kProbeFormat},
                      {"version", kProbeVersion},
                      {"global_batch", r.global_batch},
                      {"ranks", r.ranks},
                      {"per_rank_batch", r.per_rank_batch},
                      {"seq_len", r.seq_len},
                      {"steps", r.steps},
                      {"warmup_steps", r.warmup_steps},
                      {"memory_limit_bytes", r.memory_limit_bytes},
                      {"memory_limit_source", r.memory_limit_source},
                      {"safe_fraction", r.safe_fraction},
                      {"min_gain", r.min_gain},
                      {"max_accum", r.max_accum},
                      {"candidates", nlohmann::json::array()},
                      {"stop_reason", r.stop_reason},
                      {"recommended", nullptr},
                      {"verdict", r.verdict}};
  for (const ProbeRow& row : r.rows) {
    nlohmann::json c = {{"micro_batch", row.micro_batch},
                        {"accum", row.accum},
                        {"ran", row.ran},
                        {"ok", row.ran && row.m.ok},
                        {"predicted_memory_bytes", row.predicted_memory_bytes},
                        {"memory_share", row.memory_share},
                        {"verdict", row.verdict}};
    if (row.ran) {
      c["failure"] = row.m.failure;
      c["steps"] = row.m.steps;
      c["peak_memory_bytes"] = row.m.peak_memory_bytes;
      c["memory_source"] = row.m.memory_source;
      c["step_ms"] = row.m.step_ms;
      c["optimizer_ms"] = row.m.optimizer_ms;
      c["tokens_per_s"] = row.m.tokens_per_s;
      c["projected_tokens_per_s"] = row.projected_tokens_per_s;
      c["relative"] = row.relative;
    }
    j["candidates"].push_back(std::move(c));
  }
  if (r.recommended >= 0) {
    j["recommended"] = {
        {"micro_batch", r.micro_batch}, {"accum", r.accum}, {"accum_over_cap", r.accum_over_cap}};
  }
  return j;
}

std::string RenderProbeReport(const ProbeReport& r) {
  Table t({"micro-batch", "accum", "steps", "peak memory", "of limit", "tokens/s",
           "projected tok/s", "relative", "verdict"});
  for (const ProbeRow& row : r.rows) {
    if (!row.ran) {
      t.AddRow({std::to_string(row.micro_batch), std::to_string(row.accum), "0",
                "~" + FormatBytes(row.predicted_memory_bytes), ProbePct(row.memory_share), "-", "-",
                "-", row.verdict});
      continue;
    }
    if (!row.m.ok) {
      t.AddRow({std::to_string(row.micro_batch), std::to_string(row.accum),
                std::to_string(row.m.steps), "-", "-", "-", "-", "-", row.verdict});
      continue;
    }
    t.AddRow({std::to_string(row.micro_batch), std::to_string(row.accum),
              std::to_string(row.m.steps), FormatBytes(row.m.peak_memory_bytes),
              ProbePct(row.memory_share), FormatCount(std::llround(row.m.tokens_per_s)),
              FormatCount(std::llround(row.projected_tokens_per_s)), ProbePct(row.relative),
              row.verdict});
  }
  std::string out = WrapText(
      absl::StrCat("batch-size probe: global batch ", r.global_batch, " (", r.per_rank_batch,
                   " per rank x ", r.ranks, "), seq_len ", r.seq_len, ", ", r.steps,
                   " steps per candidate (", r.warmup_steps, " warm-up); memory limit ",
                   FormatBytes(static_cast<double>(r.memory_limit_bytes)), " (",
                   r.memory_limit_source, "), safe up to ", ProbePct(r.safe_fraction)),
      120);
  // Verdict cells of up to 28 columns keep the table within 120; a failure's whole message
  // follows the table.
  absl::StrAppend(&out, t.Render(28));
  absl::StrAppend(&out, WrapText(absl::StrCat("stopped: ", r.stop_reason), 120));
  for (const ProbeRow& row : r.rows) {
    if (row.ran && !row.m.ok) {
      absl::StrAppend(
          &out, WrapText(absl::StrCat("micro-batch ", row.micro_batch, ": ", row.m.failure), 120));
    }
  }
  absl::StrAppend(&out, WrapText(absl::StrCat("verdict: ", r.verdict), 120));
  return out;
}

}  // namespace trainscope::train
