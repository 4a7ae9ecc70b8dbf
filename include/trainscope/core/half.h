// The one conversion between float and the two 16-bit float formats (IEEE fp16, bfloat16),
// with round-to-nearest-even; NaN stays NaN, overflow beyond 65504 rounds to infinity, and
// subnormals are exact. Header-only, pure functions: the comm backends, the safetensors and
// npy readers and the dump comparison share it.
#ifndef TRAINSCOPE_CORE_HALF_H_
#define TRAINSCOPE_CORE_HALF_H_

#include <cmath>
#include <cstdint>
#include <cstring>

namespace trainscope {

inline float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal half: normalise into a float
      int e = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --e;
      }
      bits = sign | (static_cast<uint32_t>(e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u);
  if (absx >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity
  if (absx < 0x38800000u) {                        // below 2^-14: subnormal or zero
    float a;
    std::memcpy(&a, &absx, 4);
    // a * 2^24 is exact (power of two) and < 1024; nearbyint rounds to nearest even.
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  uint32_t mant = absx & 0x7fffffu;
  uint32_t h = (((absx >> 23) - 112) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent
  return sign | static_cast<uint16_t>(h);
}

inline float BFloat16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t FloatToBFloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace trainscope

#endif  // TRAINSCOPE_CORE_HALF_H_
