// Variable-size collectives built from the fixed-size ones: sizes first, then padded
// payloads in int64 elements (every engine moves int64; bytes are rounded up to 8).
#include "data/dist_exchange.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "trainscope/comm/comm.h"

namespace trainscope::data {
namespace {

size_t DistWords(size_t bytes) { return (bytes + 7) / 8; }

}  // namespace

absl::Status AllToAllBytes(comm::Communicator* comm, const std::vector<std::string>& send,
                           std::vector<std::string>* recv, uint64_t* sent, size_t round_bytes) {
  uint64_t ignored = 0;
  if (sent == nullptr) sent = &ignored;
  const int world = comm->world_size();
  if (static_cast<int>(send.size()) != world) {
    return absl::InternalError(
        absl::StrCat("all-to-all of ", send.size(), " parts on ", world, " ranks"));
  }
  recv->assign(world, std::string());
  // Sizes: one int64 per pair.
  std::vector<int64_t> sizes(world), rsizes(world);
  int64_t biggest = 0;
  for (int j = 0; j < world; ++j) {
    sizes[j] = static_cast<int64_t>(send[j].size());
    biggest = std::max(biggest, sizes[j]);
  }
  TS_RETURN_IF_ERROR(comm->AllToAll(sizes.data(), rsizes.data(), 1, comm::DType::kInt64));
  *sent += 8 * (world - 1);
  TS_RETURN_IF_ERROR(comm->AllReduce(&biggest, 1, comm::DType::kInt64, comm::ReduceOp::kMax));
  if (biggest == 0) return absl::OkStatus();
  for (int i = 0; i < world; ++i) (*recv)[i].resize(rsizes[i]);
  // Rounds: by default 256 MB of padded send buffer across all ranks, 1-64 MB per pair.
  if (round_bytes == 0) {
    round_bytes =
        std::clamp<size_t>((size_t{256} << 20) / world, size_t{1} << 20, size_t{64} << 20);
  }
  const size_t words = DistWords(std::min<size_t>(round_bytes, biggest));
  const size_t chunk = words * 8;
  std::vector<int64_t> sbuf(words * world), rbuf(words * world);
  for (size_t done = 0; done < static_cast<size_t>(biggest); done += chunk) {
    for (int j = 0; j < world; ++j) {
      const size_t n = send[j].size() > done ? std::min(chunk, send[j].size() - done) : 0;
      if (n) std::memcpy(&sbuf[j * words], send[j].data() + done, n);
    }
    TS_RETURN_IF_ERROR(comm->AllToAll(sbuf.data(), rbuf.data(), words, comm::DType::kInt64));
    *sent += chunk * (world - 1);
    for (int i = 0; i < world; ++i) {
      const size_t have = static_cast<size_t>(rsizes[i]);
      const size_t n = have > done ? std::min(chunk, have - done) : 0;
      if (n) std::memcpy((*recv)[i].data() + done, &rbuf[i * words], n);
    }
  }
  return absl::OkStatus();
}

absl::Status GatherBytes(comm::Communicator* comm, const std::string& mine,
                         std::vector<std::string>* all, uint64_t* sent) {
  const int world = comm->world_size(), rank = comm->rank();
  all->clear();
  if (rank != 0) {
    int64_t size = static_cast<int64_t>(mine.size());
    TS_RETURN_IF_ERROR(comm->Send(&size, 1, comm::DType::kInt64, 0));
    if (size == 0) return absl::OkStatus();
    std::vector<int64_t> buf(DistWords(mine.size()), 0);
    std::memcpy(buf.data(), mine.data(), mine.size());
    if (sent != nullptr) *sent += 8 + 8 * buf.size();
    return comm->Send(buf.data(), buf.size(), comm::DType::kInt64, 0);
  }
  all->resize(world);
  (*all)[0] = mine;
  for (int r = 1; r < world; ++r) {
    int64_t size = 0;
    TS_RETURN_IF_ERROR(comm->Recv(&size, 1, comm::DType::kInt64, r));
    if (size == 0) continue;
    std::vector<int64_t> buf(DistWords(size));
    TS_RETURN_IF_ERROR(comm->Recv(buf.data(), buf.size(), comm::DType::kInt64, r));
    (*all)[r].assign(reinterpret_cast<const char*>(buf.data()), size);
  }
  return absl::OkStatus();
}

absl::Status BroadcastBytes(comm::Communicator* comm, std::string* bytes, uint64_t* sent) {
  int64_t size = static_cast<int64_t>(bytes->size());
  TS_RETURN_IF_ERROR(comm->Broadcast(&size, 1, comm::DType::kInt64, 0));
  if (size == 0) {
    bytes->clear();
    return absl::OkStatus();
  }
  std::vector<int64_t> buf(DistWords(size), 0);
  if (comm->rank() == 0) {
    std::memcpy(buf.data(), bytes->data(), size);
    // What the root hands out (the engine's tree may forward it through others).
    if (sent != nullptr) *sent += 8 * buf.size() * (comm->world_size() - 1);
  }
  TS_RETURN_IF_ERROR(comm->Broadcast(buf.data(), buf.size(), comm::DType::kInt64, 0));
  bytes->assign(reinterpret_cast<const char*>(buf.data()), size);
  return absl::OkStatus();
}

}  // namespace trainscope::data
