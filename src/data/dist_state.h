// A rank's share of a distributed scan, saved and loaded again (`--resume DIR`), and the share
// totals as JSON (gathered on rank 0). Internal to the data module's distributed scan.
//
// Saved state, under DIR: share.rank<R>.meta (magic "TSSHARE1", a JSON header with the key
// and the totals, then the per-document arrays), share.rank<R>.band<b> and .sigs (the spill
// files' contents). The key names everything the results depend on (inputs with their byte
// ranges, world size, rank, analysis options), so a share is only reused for the same job.
#ifndef TRAINSCOPE_DATA_DIST_STATE_H_
#define TRAINSCOPE_DATA_DIST_STATE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/scan_internal.h"
#include "nlohmann/json.hpp"

namespace trainscope::data {

// Totals of a share (not its arrays) and their sum in rank order.
nlohmann::json ShareTotalsToJson(const ScanResult& r);
void AddShareTotals(const nlohmann::json& j, ScanResult* r);

std::string ShareStateKey(const std::vector<InputFile>& share_inputs, const ScanOptions& opt,
                          int rank, int world);

// Writes the share's state (each file atomically). Errors: writing under `dir` (which is
// created), reading the share's spill files.
absl::Status SaveShareState(const ScanShare& share, const ScanOptions& opt, const std::string& dir,
                            int rank, const std::string& key);

// The saved share of `rank` when its key matches; nullopt when there is none or it is for
// another job (then the share is scanned again). Errors: a state file that cannot be read or
// is cut short (DataLoss naming it).
absl::StatusOr<std::optional<ScanShare>> LoadShareState(const ScanOptions& opt,
                                                        const std::string& dir, int rank,
                                                        const std::string& key);

}  // namespace trainscope::data

#endif  // TRAINSCOPE_DATA_DIST_STATE_H_
