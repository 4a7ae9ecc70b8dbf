// Text and number decoding for the pickle machine (pickle.cc): the opcodes' names, the
// protocol-0 text forms (STRING's quoted literal, UNICODE's raw-unicode-escape, INT/LONG
// decimal text) and LONG1/LONG4's two's complement bytes.
#include <string>
#include <vector>

#include "core/pickle_internal.h"

namespace trainscope::pickle::internal {
namespace {

constexpr size_t kMaxLongDecimalBytes = 256;  // longer LONG1/4: hex digits

int PickleHexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

const char* PickleOpName(uint8_t op) {
  struct Entry {
    uint8_t op;
    const char* name;
  };
  static constexpr Entry kOps[] = {
      {'(', "MARK"},
      {'.', "STOP"},
      {'0', "POP"},
      {'1', "POP_MARK"},
      {'2', "DUP"},
      {'F', "FLOAT"},
      {'I', "INT"},
      {'J', "BININT"},
      {'K', "BININT1"},
      {'L', "LONG"},
      {'M', "BININT2"},
      {'N', "NONE"},
      {'P', "PERSID"},
      {'Q', "BINPERSID"},
      {'R', "REDUCE"},
      {'S', "STRING"},
      {'T', "BINSTRING"},
      {'U', "SHORT_BINSTRING"},
      {'V', "UNICODE"},
      {'X', "BINUNICODE"},
      {'a', "APPEND"},
      {'b', "BUILD"},
      {'c', "GLOBAL"},
      {'d', "DICT"},
      {'}', "EMPTY_DICT"},
      {'e', "APPENDS"},
      {'g', "GET"},
      {'h', "BINGET"},
      {'i', "INST"},
      {'j', "LONG_BINGET"},
      {'l', "LIST"},
      {']', "EMPTY_LIST"},
      {'o', "OBJ"},
      {'p', "PUT"},
      {'q', "BINPUT"},
      {'r', "LONG_BINPUT"},
      {'s', "SETITEM"},
      {'t', "TUPLE"},
      {')', "EMPTY_TUPLE"},
      {'u', "SETITEMS"},
      {'G', "BINFLOAT"},
      {'B', "BINBYTES"},
      {'C', "SHORT_BINBYTES"},
      {0x80, "PROTO"},
      {0x81, "NEWOBJ"},
      {0x82, "EXT1"},
      {0x83, "EXT2"},
      {0x84, "EXT4"},
      {0x85, "TUPLE1"},
      {0x86, "TUPLE2"},
      {0x87, "TUPLE3"},
      {0x88, "NEWTRUE"},
      {0x89, "NEWFALSE"},
      {0x8a, "LONG1"},
      {0x8b, "LONG4"},
      {0x8c, "SHORT_BINUNICODE"},
      {0x8d, "BINUNICODE8"},
      {0x8e, "BINBYTES8"},
      {0x8f, "EMPTY_SET"},
      {0x90, "ADDITEMS"},
      {0x91, "FROZENSET"},
      {0x92, "NEWOBJ_EX"},
      {0x93, "STACK_GLOBAL"},
      {0x94, "MEMOIZE"},
      {0x95, "FRAME"},
      {0x96, "BYTEARRAY8"},
      {0x97, "NEXT_BUFFER"},
      {0x98, "READONLY_BUFFER"},
  };
  for (const Entry& e : kOps)
    if (e.op == op) return e.name;
  return nullptr;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// UNICODE's argument (raw-unicode-escape): bytes are code points U+0000-U+00FF, except
// \uXXXX and \UXXXXXXXX after an odd number of backslashes (CPython's decoder).
bool DecodeRawUnicodeEscape(std::string_view s, std::string* out) {
  for (size_t i = 0; i < s.size();) {
    if (s[i] != '\\') {
      AppendUtf8(static_cast<uint8_t>(s[i++]), out);
      continue;
    }
    size_t run = 0;
    while (i < s.size() && s[i] == '\\') {
      ++run;
      ++i;
    }
    const bool escape = (run & 1) && i < s.size() && (s[i] == 'u' || s[i] == 'U');
    for (size_t k = 0; k < run - (escape ? 1 : 0); ++k) out->push_back('\\');
    if (!escape) continue;
    const size_t digits = s[i] == 'u' ? 4 : 8;
    ++i;
    if (s.size() - i < digits) return false;
    uint32_t cp = 0;
    for (size_t k = 0; k < digits; ++k) {
      int d = PickleHexDigit(s[i + k]);
      if (d < 0) return false;
      cp = cp * 16 + d;
    }
    if (cp > 0x10FFFF) return false;
    i += digits;
    AppendUtf8(cp, out);
  }
  return true;
}

// STRING's argument: a quoted Python 2 str literal (codecs.escape_decode).
bool DecodeQuotedString(std::string_view s, std::string* out) {
  if (s.size() < 2 || s.front() != s.back() || (s.front() != '\'' && s.front() != '"'))
    return false;
  s = s.substr(1, s.size() - 2);
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      if (s[i] == '\\') return false;  // a trailing backslash
      out->push_back(s[i]);
      continue;
    }
    char c = s[++i];
    switch (c) {
      case '\\':
      case '\'':
      case '"':
        out->push_back(c);
        break;
      case 'n':
        out->push_back('\n');
        break;
      case 't':
        out->push_back('\t');
        break;
      case 'r':
        out->push_back('\r');
        break;
      case 'a':
        out->push_back('\a');
        break;
      case 'b':
        out->push_back('\b');
        break;
      case 'f':
        out->push_back('\f');
        break;
      case 'v':
        out->push_back('\v');
        break;
      case '\n':
        break;  // a line continuation
      case 'x': {
        if (i + 2 >= s.size()) return false;
        int hi = PickleHexDigit(s[i + 1]), lo = PickleHexDigit(s[i + 2]);
        if (hi < 0 || lo < 0) return false;
        out->push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        break;
      }
      default:
        if (c >= '0' && c <= '7') {
          int v = c - '0';
          for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k)
            v = v * 8 + (s[++i] - '0');
          out->push_back(static_cast<char>(v & 0xFF));
        } else {
          out->push_back('\\');  // unknown escapes stay as written
          out->push_back(c);
        }
    }
  }
  return true;
}

// Little-endian two's complement bytes (LONG1/LONG4) -> decimal text, or "0x..." hex for
// very long ones (decimal conversion is quadratic). Magnitude arithmetic on base-1e9 limbs.
std::string LongBytesToText(std::string_view b) {
  const bool negative = !b.empty() && (static_cast<uint8_t>(b.back()) & 0x80);
  std::vector<uint8_t> mag(b.begin(), b.end());  // little-endian magnitude
  if (negative) {                                // two's complement negate
    bool carry = true;
    for (uint8_t& x : mag) {
      x = static_cast<uint8_t>(~x);
      if (carry) carry = ++x == 0;
    }
  }
  while (!mag.empty() && mag.back() == 0) mag.pop_back();
  if (mag.empty()) return "0";
  std::string out = negative ? "-" : "";
  if (mag.size() > kMaxLongDecimalBytes) {
    static const char kHex[] = "0123456789abcdef";
    out += "0x";
    for (size_t i = mag.size(); i-- > 0;) {
      out.push_back(kHex[mag[i] >> 4]);
      out.push_back(kHex[mag[i] & 15]);
    }
    return out;
  }
  std::vector<uint32_t> limbs;  // base 1e9, little-endian
  for (size_t i = mag.size(); i-- > 0;) {
    uint64_t carry = mag[i];
    for (uint32_t& l : limbs) {
      uint64_t v = uint64_t{l} * 256 + carry;
      l = static_cast<uint32_t>(v % 1000000000);
      carry = v / 1000000000;
    }
    while (carry) {
      limbs.push_back(static_cast<uint32_t>(carry % 1000000000));
      carry /= 1000000000;
    }
  }
  out += std::to_string(limbs.back());
  for (size_t i = limbs.size() - 1; i-- > 0;) {
    std::string part = std::to_string(limbs[i]);
    out += std::string(9 - part.size(), '0') + part;
  }
  return out;
}

// "-123" (INT / LONG text) -> int64 when it fits; else the canonical digits.
bool ParseDecimal(std::string_view s, int64_t* small, std::string* big) {
  big->clear();
  size_t i = 0;
  bool neg = false;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) neg = s[i++] == '-';
  if (i == s.size()) return false;
  for (size_t k = i; k < s.size(); ++k)
    if (s[k] < '0' || s[k] > '9') return false;
  while (i + 1 < s.size() && s[i] == '0') ++i;
  std::string_view digits = s.substr(i);
  if (digits.size() <= 18) {
    int64_t v = 0;
    for (char c : digits) v = v * 10 + (c - '0');
    *small = neg ? -v : v;
    return true;
  }
  *big = std::string(neg && digits != "0" ? "-" : "") + std::string(digits);
  // int64's own edges come back as integers.
  if (*big == "-9223372036854775808") {
    *small = INT64_MIN;
    big->clear();
  } else if (digits.size() == 19 && digits <= "9223372036854775807") {
    int64_t v = 0;
    for (char c : digits) v = v * 10 + (c - '0');
    *small = neg ? -v : v;
    big->clear();
  }
  return true;
}

}  // namespace trainscope::pickle::internal
