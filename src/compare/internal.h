// Helpers shared by the files of the compare module (not part of its API).
#ifndef TRAINSCOPE_SRC_COMPARE_INTERNAL_H_
#define TRAINSCOPE_SRC_COMPARE_INTERNAL_H_

#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"
#include "trainscope/compare/compare.h"
#include "trainscope/core/status.h"

namespace trainscope::compare {

// "a.b.c" -> {"a", "b", "c"}.
std::vector<std::string> SplitName(std::string_view name);

// Names ordered with their digit runs compared as numbers ("rank2" < "rank10").
bool NaturalLess(const std::string& a, const std::string& b);

// Python's repr() of a float ("0.1", "1e-05", "inf", "nan"), as msprobe's csv prints them.
std::string PyFloat(double v);

// The structural key of an entry for matching when names differ: the name with its call
// index and module path dropped, plus the number of rows ("Functional.linear.forward#3").
std::string StructuralKey(const Entry& e);

// The API or module class of an entry ("linear", "Linear"); its prefix ("Functional",
// "Module", "Distributed").
std::string ApiName(const std::string& entry);
std::string Prefix(const std::string& entry);

// Fills the statistics and tensor metrics of a matched row pair; `mode` decides which.
void CompareRow(Mode mode, const Dump& a, const Dump& b, const Options& options, RowCompare* row,
                PairReport* report);

// A row's columns as msprobe's csv writes them: "N/A" for a None row (and a row's missing
// requires_grad), "[32, 3, 224, 224]", "[]" for a non-tensor value.
std::string DtypeText(const Tensor* t);
// One spelling for a dtype across frameworks: torch.float32, MindSpore's Float32 and
// mindspore.float32, numpy's float32 all give "float32" (lower case, prefix dropped).
std::string NormalizedDtype(std::string d);
std::string ShapeText(const Tensor* t);
std::string ReqGradText(const Tensor* t);

// msprobe's pass / warning / error rules over the rows of one entry (indicator_analysis).
void ApplyResultRules(Mode mode, EntryCompare* entry);

// The first divergence of one pair by data flow (sets report->first, has_divergence).
void FindFirstDivergence(const Options& options, PairReport* report);

}  // namespace trainscope::compare

#endif  // TRAINSCOPE_SRC_COMPARE_INTERNAL_H_
