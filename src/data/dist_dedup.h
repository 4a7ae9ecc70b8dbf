// Duplicate resolution over the ranks of a distributed scan (data/distributed.cc): exact keys
// and LSH buckets are sent to their owner ranks with all-to-all exchanges, so each rank holds
// only its share's documents and the keys and buckets it owns. Internal to the data module.
//
// Both functions are collectives: every rank of `comm` calls them in the same order with its
// own share. Documents carry global numbers: a rank's document i is first_gid + i, and rank r's
// documents start at starts[r]. `sent` (optional) is increased by the bytes this rank put on
// the wire. Errors: the communicator's; reading the share's spill files; Internal when answers
// do not match the questions (a broken peer).
#ifndef TRAINSCOPE_DATA_DIST_DEDUP_H_
#define TRAINSCOPE_DATA_DIST_DEDUP_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/scan_internal.h"

namespace trainscope::comm {
class Communicator;
}

namespace trainscope::data {

// Exact duplicates: each document's raw and normalised keys go to the key's owner, which
// answers with the key's first document in the whole corpus. raw_first[i] and norm_first[i]
// get that answer for the share's document i (first_gid + i itself when it is the first).
absl::Status DistResolveExact(const ScanShare& share, uint32_t first_gid, comm::Communicator* comm,
                              std::vector<uint32_t>* raw_first, std::vector<uint32_t>* norm_first,
                              uint64_t* sent);

// Near duplicates (opt.near_dup): the band hashes of the documents with index[i] != 0 go to
// the buckets' owners, which fetch the fingerprints of buckets of two or more from their
// holders and verify the pairs with the single scan's rule; rank 0 gathers the buckets,
// replays the single scan's per-band union-find (adding its candidate_pairs and
// verified_pairs to *pairs) and broadcasts the result. Returns, on every rank, (document,
// root) of each document of the corpus whose cluster root is another document, sorted by
// document. Releases the share's band and fingerprint spill files once they are read.
absl::StatusOr<std::vector<std::pair<uint32_t, uint32_t>>> DistResolveNear(
    ScanShare* share, const std::vector<uint8_t>& index, uint32_t first_gid,
    const std::vector<uint64_t>& starts, const ScanOptions& opt, comm::Communicator* comm,
    ScanResult* pairs, uint64_t* sent);

}  // namespace trainscope::data

#endif  // TRAINSCOPE_DATA_DIST_DEDUP_H_
