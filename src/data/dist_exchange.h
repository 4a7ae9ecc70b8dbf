// Variable-size exchanges over a comm::Communicator for the distributed scan: all-to-all of
// byte strings (the communicator's AllToAll moves a fixed count per rank), gather to rank 0,
// broadcast from rank 0. Every rank of the communicator must call each function in the same
// order (they are collectives). Errors: the communicator's, naming the op.
#ifndef TRAINSCOPE_DATA_DIST_EXCHANGE_H_
#define TRAINSCOPE_DATA_DIST_EXCHANGE_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "trainscope/core/status.h"

namespace trainscope::comm {
class Communicator;
}

namespace trainscope::data {

// send[j] goes to rank j; recv[i] receives what rank i sent here. Rounds of at most
// `round_bytes` per pair (rounded up to 8), so the padded buffers stay bounded: about
// 2 * world * round_bytes bytes besides the strings themselves.
// `sent` (optional) is increased by the bytes this rank put on the wire (padding included).
absl::Status AllToAllBytes(comm::Communicator* comm, const std::vector<std::string>& send,
                           std::vector<std::string>* recv, uint64_t* sent = nullptr,
                           size_t round_bytes = 0);

// Rank 0 gets every rank's `mine` in rank order in `all` (others: `all` left empty).
absl::Status GatherBytes(comm::Communicator* comm, const std::string& mine,
                         std::vector<std::string>* all, uint64_t* sent = nullptr);

// Rank 0's *bytes replace every other rank's.
absl::Status BroadcastBytes(comm::Communicator* comm, std::string* bytes, uint64_t* sent = nullptr);

// AllToAllBytes for vectors of trivially copyable records.
template <typename T>
absl::Status AllToAllRecords(comm::Communicator* comm, const std::vector<std::vector<T>>& send,
                             std::vector<std::vector<T>>* recv, uint64_t* sent = nullptr) {
  static_assert(std::is_trivially_copyable<T>::value, "records are copied as bytes");
  std::vector<std::string> out(send.size()), in;
  for (size_t j = 0; j < send.size(); ++j) {
    out[j].assign(reinterpret_cast<const char*>(send[j].data()), send[j].size() * sizeof(T));
  }
  TS_RETURN_IF_ERROR(AllToAllBytes(comm, out, &in, sent));
  out = {};
  recv->assign(in.size(), {});
  for (size_t i = 0; i < in.size(); ++i) {
    (*recv)[i].resize(in[i].size() / sizeof(T));
    if (!in[i].empty()) std::memcpy((*recv)[i].data(), in[i].data(), in[i].size());
    in[i] = {};
  }
  return absl::OkStatus();
}

}  // namespace trainscope::data

#endif  // TRAINSCOPE_DATA_DIST_EXCHANGE_H_
