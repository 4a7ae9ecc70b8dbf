// The element-wise reductions the backends need for the two 16-bit float formats, computed
// in float with the conversions of trainscope/core/half.h. Header-only so that backends and
// the self-test share one definition.
#ifndef TRAINSCOPE_SRC_COMM_HALF_H_
#define TRAINSCOPE_SRC_COMM_HALF_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "trainscope/comm/comm.h"
#include "trainscope/core/half.h"

namespace trainscope::comm {

using ::trainscope::BFloat16ToFloat;
using ::trainscope::FloatToBFloat16;
using ::trainscope::FloatToHalf;
using ::trainscope::HalfToFloat;

// c[i] = a[i] (op) b[i] over n 16-bit floats, computed in float and rounded once, which is
// what the engines do for half types. Op is a functor on floats.
template <float (*ToF)(uint16_t), uint16_t (*FromF)(float), typename Op>
void Reduce16(void* c, const void* a, const void* b, size_t n, Op op) {
  auto* pc = static_cast<uint16_t*>(c);
  const auto* pa = static_cast<const uint16_t*>(a);
  const auto* pb = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) pc[i] = FromF(op(ToF(pa[i]), ToF(pb[i])));
}

// Element i of a buffer of `dtype`, as a double (exact for the small integers the self-test
// and the tests use), and its inverse.
inline double GetElement(const void* p, DType dtype, size_t i) {
  switch (dtype) {
    case DType::kFloat32:
      return static_cast<const float*>(p)[i];
    case DType::kBFloat16:
      return BFloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case DType::kFloat16:
      return HalfToFloat(static_cast<const uint16_t*>(p)[i]);
    case DType::kInt32:
      return static_cast<const int32_t*>(p)[i];
    case DType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(p)[i]);
  }
  return 0;
}

inline void SetElement(void* p, DType dtype, size_t i, double v) {
  switch (dtype) {
    case DType::kFloat32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DType::kBFloat16:
      static_cast<uint16_t*>(p)[i] = FloatToBFloat16(static_cast<float>(v));
      break;
    case DType::kFloat16:
      static_cast<uint16_t*>(p)[i] = FloatToHalf(static_cast<float>(v));
      break;
    case DType::kInt32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case DType::kInt64:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      break;
  }
}

}  // namespace trainscope::comm

#endif  // TRAINSCOPE_SRC_COMM_HALF_H_
