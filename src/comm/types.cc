// DType / OpType names.
#include <algorithm>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "trainscope/comm/comm.h"

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

// OptionsFromEnvironment lives with the launcher detection in join_env.cc.

}  // namespace trainscope::comm
