// Comparing two ranks' entries for the same collective, after fr_trace's Op.match rules
// (reference: ../shared/reference/pytorch_nvidia.md §2.3): the op type must agree; input
// sizes must agree except for all_to_all (any variant) and scatter, output sizes except for
// all_to_all and gather; all_reduce writes what it reads; all_gather's output is its input times
// the group size, reduce_scatter the reverse; dtypes must agree (empty lists, as a non-root rank's
// gather output, say nothing); then the state.
#include <cctype>
#include <string>

#include "hang/analysis_internal.h"

namespace trainscope::hang::internal {

const char* MatchStateName(MatchState s) {
  switch (s) {
    case MatchState::kFullyMatched:
      return "FULLY_MATCHED";
    case MatchState::kTypeMismatch:
      return "COLLECTIVE_TYPE_MISMATCH";
    case MatchState::kSizeMismatch:
      return "SIZE_OR_SYNTAX_MISMATCH";
    case MatchState::kDtypeMismatch:
      return "COLLECTIVE_DTYPE_MISMATCH";
    case MatchState::kStateMismatch:
      return "COLLECTIVE_STATE_MISMATCH";
    case MatchState::kUndecided:
      return "UNDECIDED";
  }
  return "?";
}

std::string OpFamily(const std::string& op) {
  std::string s;  // lower case, no underscores: "_all_gather_base" -> "allgatherbase"
  for (char c : op)
    if (c != '_') s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  struct Rule {
    const char* needle;
    const char* family;
  };
  // Longest names first: "reducescatter" before "reduce", "allgather" before "gather".
  static const Rule kRules[] = {{"reducescatter", "reduce_scatter"},
                                {"allgather", "all_gather"},
                                {"alltoall", "all_to_all"},
                                {"allreduce", "all_reduce"},
                                {"broadcast", "broadcast"},
                                {"barrier", "barrier"},
                                {"gather", "gather"},
                                {"scatter", "scatter"},
                                {"reduce", "reduce"},
                                {"send", "send"},
                                {"recv", "recv"}};
  for (const Rule& r : kRules)
    if (s.find(r.needle) != std::string::npos) return r.family;
  return "";
}

bool IsCoalescedMarker(const Entry& e) {
  std::string lower;
  for (char c : e.op) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.size() < 9 || lower.compare(lower.size() - 9, 9, "coalesced") != 0) return false;
  for (const auto& s : e.input_sizes)
    if (!s.empty()) return false;
  for (const auto& s : e.output_sizes)
    if (!s.empty()) return false;
  return true;
}

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > (int64_t{1} << 62) / d)) return -1;  // nonsense: never equal
    n *= d;
  }
  return n;
}

std::string ShapesText(const std::vector<std::vector<int64_t>>& shapes) {
  std::string out = "[";
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (i) out += ", ";
    out += "[";
    for (size_t j = 0; j < shapes[i].size(); ++j) {
      if (j) out += ", ";
      out += std::to_string(shapes[i][j]);
    }
    out += "]";
  }
  return out + "]";
}

std::string DtypesText(const std::vector<std::string>& dtypes) {
  std::string out = "[";
  for (size_t i = 0; i < dtypes.size(); ++i) out += (i ? ", " : "") + dtypes[i];
  return out + "]";
}

std::string NormalizeCaller(const std::string& caller) {
  std::string out;
  size_t i = 0;
  while (i < caller.size()) {
    bool step = i + 4 <= caller.size() &&
                std::tolower(static_cast<unsigned char>(caller[i])) == 's' &&
                std::tolower(static_cast<unsigned char>(caller[i + 1])) == 't' &&
                std::tolower(static_cast<unsigned char>(caller[i + 2])) == 'e' &&
                std::tolower(static_cast<unsigned char>(caller[i + 3])) == 'p';
    if (!step) {
      out += caller[i++];
      continue;
    }
    out.append(caller, i, 4);
    i += 4;
    while (i < caller.size() && (caller[i] == ' ' || caller[i] == '_' || caller[i] == '=' ||
                                 caller[i] == ':' || caller[i] == '-'))
      out += caller[i++];
    if (i < caller.size() && std::isdigit(static_cast<unsigned char>(caller[i]))) {
      while (i < caller.size() && std::isdigit(static_cast<unsigned char>(caller[i]))) ++i;
      out += '#';
    }
  }
  return out;
}

namespace {

bool SameSet(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  for (const auto& x : a) {
    bool found = false;
    for (const auto& y : b) found = found || x == y;
    if (!found) return false;
  }
  for (const auto& y : b) {
    bool found = false;
    for (const auto& x : a) found = found || x == y;
    if (!found) return false;
  }
  return true;
}

// The op names whose output is input x group size (fr_trace's list plus
// "_all_gather_base", its spelling in PyTorch's dumps) and the reverse; uneven variants
// (all_gather_v, *_single) are not checked, as fr_trace does not.
bool GatherRule(const std::string& op) {
  return op == "all_gather" || op == "all_gather_base" || op == "_all_gather_base" ||
         op == "all_gather_into_tensor_coalesced";
}
bool ScatterRule(const std::string& op) {
  return op == "reduce_scatter" || op == "_reduce_scatter_base" ||
         op == "reduce_scatter_tensor_coalesced";
}

// The size rules that hold for one entry alone (all_reduce in == out, all_gather out =
// in x group, reduce_scatter in = out x group).
bool SelfConsistent(const Entry& e, const std::string& family, int group_size, std::string* why) {
  if (family == "all_reduce" && e.input_sizes != e.output_sizes) {
    *why = "all_reduce input sizes " + ShapesText(e.input_sizes) + " != output sizes " +
           ShapesText(e.output_sizes);
    return false;
  }
  if (e.input_sizes.empty() || e.output_sizes.empty()) return true;
  int64_t in = Numel(e.input_sizes[0]), out = Numel(e.output_sizes[0]);
  using Wide = __int128;  // numel up to 2^62 times a group size must not overflow
  if (GatherRule(e.op) && Wide{out} != Wide{in} * group_size) {
    *why = "all_gather output " + ShapesText(e.output_sizes) + " is not input " +
           ShapesText(e.input_sizes) + " x group size " + std::to_string(group_size);
    return false;
  }
  if (ScatterRule(e.op) && Wide{in} != Wide{out} * group_size) {
    *why = "reduce_scatter input " + ShapesText(e.input_sizes) + " is not output " +
           ShapesText(e.output_sizes) + " x group size " + std::to_string(group_size);
    return false;
  }
  return true;
}

bool FirstNonEmpty(const std::vector<std::vector<int64_t>>& s) {
  return !s.empty() && !s[0].empty();
}

// fr_trace's dtype rule: an op's own input and output dtypes agree (not for scatter,
// gather, broadcast), and both ranks' input (not scatter, broadcast) and output (not
// gather) dtypes agree; lists of tensors with no shape say nothing.
bool DtypesDiffer(const Entry& a, const Entry& b, const std::string& family) {
  bool rooted = family == "scatter" || family == "gather" || family == "broadcast";
  if (!rooted && FirstNonEmpty(a.input_sizes) && FirstNonEmpty(a.output_sizes) &&
      !a.output_dtypes.empty() && !SameSet(a.input_dtypes, a.output_dtypes))
    return true;
  if (family != "scatter" && family != "broadcast" && FirstNonEmpty(a.input_sizes) &&
      FirstNonEmpty(b.input_sizes) && !SameSet(a.input_dtypes, b.input_dtypes))
    return true;
  if (family != "gather" && FirstNonEmpty(a.output_sizes) && FirstNonEmpty(b.output_sizes) &&
      !a.output_dtypes.empty() && !b.output_dtypes.empty() &&
      !SameSet(a.output_dtypes, b.output_dtypes))
    return true;
  return false;
}

// Names fr_trace compares by type alone (the closing entries of coalesced groups).
bool TypeOnly(const std::string& op) {
  return op == "coalesced" || op == "ALLGATHER_coalesced" || op == "REDUCE_SCATTER_coalesced";
}

}  // namespace

MatchState MatchOps(const Entry& a, const Entry& b, int group_size, std::string* why) {
  std::string scratch;
  if (why == nullptr) why = &scratch;
  if (a.op != b.op) {
    *why = a.op + " vs " + b.op;
    return MatchState::kTypeMismatch;
  }
  if (TypeOnly(a.op) || (IsCoalescedMarker(a) && IsCoalescedMarker(b)))
    return MatchState::kFullyMatched;
  const std::string family = OpFamily(a.op);
  // fr_trace leaves the exact name "all_to_all" undecided; every variant (all_to_all_single,
  // alltoall_base, all_to_all_v) splits per rank as it likes, so sizes prove nothing for any.
  const bool all_to_all = family == "all_to_all";
  if (!all_to_all) {
    if (family != "scatter" && a.input_sizes != b.input_sizes) {
      *why = "input sizes " + ShapesText(a.input_sizes) + " vs " + ShapesText(b.input_sizes);
      return MatchState::kSizeMismatch;
    }
    if (family != "gather" && a.output_sizes != b.output_sizes) {
      *why = "output sizes " + ShapesText(a.output_sizes) + " vs " + ShapesText(b.output_sizes);
      return MatchState::kSizeMismatch;
    }
    if (!SelfConsistent(a, family, group_size, why) || !SelfConsistent(b, family, group_size, why))
      return MatchState::kSizeMismatch;
  }
  if (DtypesDiffer(a, b, family)) {
    *why = "dtypes " + DtypesText(a.input_dtypes) + "->" + DtypesText(a.output_dtypes) + " vs " +
           DtypesText(b.input_dtypes) + "->" + DtypesText(b.output_dtypes);
    return MatchState::kDtypeMismatch;
  }
  if (a.state != b.state) {
    *why = "state " + a.state + " vs " + b.state;
    return MatchState::kStateMismatch;
  }
  return a.op == "all_to_all" ? MatchState::kUndecided : MatchState::kFullyMatched;
}

}  // namespace trainscope::hang::internal
