// The resume choice (trainscope/ckpt/resume.h).
#include "trainscope/ckpt/resume.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "trainscope/ckpt/checkpoint.h"

namespace trainscope::ckpt {

namespace {

std::string NewestGoodAdvice(const std::string& dir, Os* os) {
  auto latest = FindLatestComplete(dir, /*hash=*/true, os);
  if (!latest.ok() || latest->path.empty()) {
    return absl::StrCat("there is no complete checkpoint in ", dir,
                        "; drop --resume to start fresh");
  }
  return absl::StrCat("the newest complete one is ", latest->path, " (--resume ", latest->path,
                      ", or --resume latest)");
}

}  // namespace

absl::StatusOr<ResumePlan> PlanResume(const std::string& spec, const std::string& dir, Os* os) {
  namespace fs = std::filesystem;
  ResumePlan plan;
  if (spec == "latest") {
    if (!os->IsDirectory(dir)) {
      plan.notice = absl::StrCat("resume: no checkpoint folder ", dir, "; starting fresh");
      return plan;
    }
    auto latest = FindLatestComplete(dir, /*hash=*/true, os);
    if (!latest.ok()) return latest.status();
    std::string skipped;
    if (!latest->skipped.empty()) {
      skipped = absl::StrCat(
          " (skipped ", latest->skipped.size(), " newer: ", latest->skipped.front().file, ": ",
          latest->skipped.front().problem, latest->skipped.size() > 1 ? ", ..." : "", ")");
    }
    if (latest->path.empty()) {
      plan.notice =
          absl::StrCat("resume: no complete checkpoint in ", dir, "; starting fresh", skipped);
      return plan;
    }
    plan.path = latest->path;
    plan.step = latest->step;
    plan.notice = absl::StrCat("resume: from ", plan.path, " (step ", plan.step, ")", skipped);
    return plan;
  }
  std::string path = spec;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const std::string parent = fs::path(path).parent_path().string();
  if (!os->FileExists(path)) {
    return absl::NotFoundError(absl::StrCat("--resume ", path, ": no such checkpoint; ",
                                            NewestGoodAdvice(parent.empty() ? dir : parent, os)));
  }
  if (!LooksLikeCheckpoint(path, os)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--resume ", path, ": not a trainscope checkpoint (a step-<N> folder); ",
                     NewestGoodAdvice(os->IsDirectory(path) ? path : dir, os)));
  }
  CheckResult c = CheckCheckpoint(path, /*hash=*/true, {}, os);
  if (!c.ok()) {
    std::string why = c.problems.empty()
                          ? std::string("not complete")
                          : absl::StrCat(c.problems[0].file, ": ", c.problems[0].problem);
    return absl::InvalidArgumentError(
        absl::StrCat("--resume ", path, ": refusing a damaged checkpoint: ", why, "; ",
                     NewestGoodAdvice(parent.empty() ? "." : parent, os)));
  }
  plan.path = path;
  plan.step = c.step;
  plan.notice = absl::StrCat("resume: from ", path, " (step ", c.step, ")");
  return plan;
}

}  // namespace trainscope::ckpt
