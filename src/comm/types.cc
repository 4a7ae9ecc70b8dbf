// DType / OpType names and the environment conventions (torchrun, mpirun).
#include <algorithm>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "trainscope/comm/comm.h"
#include "trainscope/core/env_vars.h"

namespace trainscope::comm {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kBFloat16:
    case DType::kFloat16:
      return 2;
    case DType::kInt64:
      return 8;
  }
  return 1;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat16:
      return "float16";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
  }
  return "?";
}

absl::StatusOr<DType> ParseDType(const std::string& name) {
  std::string n = absl::AsciiStrToLower(name);
  if (n == "float32" || n == "fp32" || n == "float") return DType::kFloat32;
  if (n == "bfloat16" || n == "bf16") return DType::kBFloat16;
  if (n == "float16" || n == "fp16" || n == "half") return DType::kFloat16;
  if (n == "int32" || n == "int") return DType::kInt32;
  if (n == "int64" || n == "long") return DType::kInt64;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype '", name, "' (expected float32, bfloat16, float16, int32 or int64)"));
}

const char* OpName(OpType op) {
  switch (op) {
    case OpType::kAllReduce:
      return "all_reduce";
    case OpType::kAllGather:
      return "all_gather";
    case OpType::kReduceScatter:
      return "reduce_scatter";
    case OpType::kBroadcast:
      return "broadcast";
    case OpType::kAllToAll:
      return "all_to_all";
    case OpType::kBarrier:
      return "barrier";
    case OpType::kSend:
      return "send";
    case OpType::kRecv:
      return "recv";
  }
  return "?";
}

absl::StatusOr<OpType> ParseOp(const std::string& name) {
  std::string n = absl::AsciiStrToLower(name);
  n.erase(std::remove(n.begin(), n.end(), '_'), n.end());
  if (n == "allreduce") return OpType::kAllReduce;
  if (n == "allgather") return OpType::kAllGather;
  if (n == "reducescatter") return OpType::kReduceScatter;
  if (n == "broadcast" || n == "bcast") return OpType::kBroadcast;
  if (n == "alltoall") return OpType::kAllToAll;
  if (n == "barrier") return OpType::kBarrier;
  if (n == "send") return OpType::kSend;
  if (n == "recv") return OpType::kRecv;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown op '", name,
                   "' (expected all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, "
                   "barrier, send or recv)"));
}

namespace {

// Reads an integer variable; absent leaves *out alone.
absl::Status ReadInt(const char* name, int* out, bool* present = nullptr) {
  const char* v = std::getenv(name);
  if (present != nullptr) *present = v != nullptr && *v != '\0';
  if (v == nullptr || *v == '\0') return absl::OkStatus();
  int parsed;
  if (!absl::SimpleAtoi(v, &parsed)) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, "='", v, "' is not an integer"));
  }
  *out = parsed;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CommOptions> OptionsFromEnvironment(CommOptions defaults) {
  CommOptions o = std::move(defaults);
  bool have_rank = false;
  absl::Status st = ReadInt(envvar::kRank, &o.rank, &have_rank);
  if (!st.ok()) return st;
  if (have_rank) {
    for (auto [name, field] : {std::pair{envvar::kWorldSize, &o.world_size},
                               std::pair{envvar::kLocalRank, &o.local_rank},
                               std::pair{envvar::kLocalWorldSize, &o.local_world_size}}) {
      st = ReadInt(name, field);
      if (!st.ok()) return st;
    }
  } else {
    bool have_ompi = false;
    st = ReadInt(envvar::kOmpiRank, &o.rank, &have_ompi);
    if (!st.ok()) return st;
    if (have_ompi) {
      for (auto [name, field] : {std::pair{envvar::kOmpiSize, &o.world_size},
                                 std::pair{envvar::kOmpiLocalRank, &o.local_rank},
                                 std::pair{envvar::kOmpiLocalSize, &o.local_world_size}}) {
        st = ReadInt(name, field);
        if (!st.ok()) return st;
      }
    }
  }
  if (const char* a = std::getenv(envvar::kMasterAddr); a != nullptr && *a != '\0') {
    o.master_addr = a;
  }
  st = ReadInt(envvar::kMasterPort, &o.master_port);
  if (!st.ok()) return st;
  // PyTorch opens one gloo device per listed interface; trainscope uses the first.
  if (const char* i = std::getenv(envvar::kGlooSocketIfname);
      i != nullptr && *i != '\0' && o.iface.empty()) {
    std::string first(i);
    o.iface = first.substr(0, first.find(','));
  }
  if (const char* t = std::getenv(envvar::kCommTimeoutS); t != nullptr && *t != '\0') {
    double s;
    if (!absl::SimpleAtod(t, &s) || !(s > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("environment variable ", envvar::kCommTimeoutS,
                                                     "='", t, "' is not a positive number"));
    }
    o.timeout = std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  }
  if (o.world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("WORLD_SIZE=", o.world_size, " must be >= 1"));
  }
  if (o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("RANK=", o.rank, " is out of range for WORLD_SIZE=", o.world_size));
  }
  if (o.master_port < 0 || o.master_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("MASTER_PORT=", o.master_port, " is not a TCP port"));
  }
  return o;
}

}  // namespace trainscope::comm
