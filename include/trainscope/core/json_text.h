// Checks on JSON text made before it is parsed. nlohmann::json builds one node per nesting
// level, so a few MB of "[[[[" from a hostile file would cost GBs (and deep recursion) in the
// parser: readers refuse such text first. Pure functions, thread-safe.
#ifndef TRAINSCOPE_CORE_JSON_TEXT_H_
#define TRAINSCOPE_CORE_JSON_TEXT_H_

#include <cstddef>
#include <string_view>

namespace trainscope {

// Offset of the first '[' or '{' nested deeper than `max_depth` (brackets inside strings do
// not count), or std::string_view::npos when there is none.
size_t JsonNestingTooDeep(std::string_view text, int max_depth);

}  // namespace trainscope

#endif  // TRAINSCOPE_CORE_JSON_TEXT_H_
