// Finding dump folders under a path, reading tensor files (.pt through ckpt's torch.save
// reader, .npy here), and the small name helpers of the module.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compare/internal.h"
#include "trainscope/ckpt/safetensors.h"
#include "trainscope/ckpt/torch_save.h"
#include "trainscope/compare/dump.h"
#include "trainscope/core/paths.h"
#include "trainscope/core/safetensors.h"

namespace trainscope::compare {
namespace {

bool IsDir(const std::string& p) { return IsDirectory(p); }  // core/paths.h
bool IsFile(const std::string& p) { return IsRegularFile(p); }

std::vector<std::string> SubDirs(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == ".." || !IsDir(dir + "/" + n)) continue;
    out.push_back(n);
  }
  closedir(d);
  std::sort(out.begin(), out.end(), NaturalLess);
  return out;
}

std::string Base(const std::string& p) {
  std::string s = p;
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  size_t slash = s.rfind('/');
  return slash == std::string::npos ? s : s.substr(slash + 1);
}

bool LooksLikeStep(const std::string& n) { return n.rfind("step", 0) == 0; }

// A torch.save storage dtype (safetensors spelling) in torch spelling: "torch." and numpy's
// name from the one safetensors dtype table; "" for a dtype numpy has no name for.
std::string TorchDtype(const std::string& st) {
  const safetensors::DType* d = safetensors::FindDType(st);
  return d && d->kind ? absl::StrCat("torch.", d->numpy) : "";
}

// The most elements a strided view is gathered into (1 GiB of doubles).
constexpr uint64_t kMaxGathered = uint64_t{1} << 27;

bool HasZero(const std::vector<uint64_t>& shape) {
  for (uint64_t d : shape) {
    if (d == 0) return true;
  }
  return false;
}

// A strided tensor's elements in row-major order: `span` holds the storage from the first
// element to the last; element (i0, i1, ...) is at sum(i_k * stride[k]).
std::vector<double> Gather(const std::vector<double>& span, const std::vector<uint64_t>& shape,
                           const std::vector<uint64_t>& stride) {
  uint64_t numel = 1;
  for (uint64_t d : shape) numel *= d;
  std::vector<double> out;
  out.reserve(numel);
  if (numel == 0) return out;
  std::vector<uint64_t> index(shape.size(), 0);
  uint64_t at = 0;
  for (uint64_t n = 0; n < numel; ++n) {
    out.push_back(span[at]);
    for (size_t k = shape.size(); k-- > 0;) {  // the next index, last dimension fastest
      if (++index[k] < shape[k]) {
        at += stride[k];
        break;
      }
      at -= (shape[k] - 1) * stride[k];
      index[k] = 0;
    }
  }
  return out;
}

absl::StatusOr<TensorData> ReadPt(const std::string& path) {
  TS_ASSIGN_OR_RETURN(ckpt::TorchSaveTensor chunk, ckpt::LocateTorchSaveTensor(path));
  std::ifstream in(path, std::ios::binary);
  std::string bytes(chunk.bytes, '\0');
  in.seekg(static_cast<std::streamoff>(chunk.offset));
  if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size())))
    return absl::DataLossError(path + ": shorter than its storage");
  TensorData out;
  if (!ckpt::ToDoubles(chunk.dtype, bytes.data(), bytes.size(), &out.values))
    return absl::UnimplementedError(absl::StrCat(path, ": dtype ", chunk.dtype));
  if (!chunk.stride.empty()) {
    // An expanded view (stride 0) may name far more elements than its file holds: a 1.5 KB
    // file of torch.zeros(1).expand(2**31) would gather 16 GB. Such a view is not read.
    uint64_t numel = 1;
    for (uint64_t d : chunk.shape) numel = d == 0 || numel <= kMaxGathered / d ? numel * d : 0;
    if (numel == 0 && !HasZero(chunk.shape)) {
      return absl::ResourceExhaustedError(
          absl::StrCat(path, ": a strided view of more than ", kMaxGathered, " elements over ",
                       out.values.size(), " stored ones (an expanded tensor); not read"));
    }
    out.values = Gather(out.values, chunk.shape, chunk.stride);
  }
  for (uint64_t d : chunk.shape) out.shape.push_back(static_cast<int64_t>(d));
  out.dtype = TorchDtype(chunk.dtype);
  return out;
}

// NPY 1.0-3.0: magic, version, header length, a Python dict literal with 'descr',
// 'fortran_order' and 'shape', then the C-order data.
absl::StatusOr<TensorData> ReadNpy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(path + ": cannot open");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
  };
  if (text.size() < 10 || text.compare(0, 6, "\x93NUMPY") != 0) return bad("not a .npy file");
  const int major = static_cast<unsigned char>(text[6]);
  size_t hlen = 0, at = 0;
  if (major == 1) {
    hlen = static_cast<unsigned char>(text[8]) | static_cast<unsigned char>(text[9]) << 8;
    at = 10;
  } else {
    if (text.size() < 12) return bad("header cut short");
    for (int i = 3; i >= 0; --i) hlen = hlen << 8 | static_cast<unsigned char>(text[8 + i]);
    at = 12;
  }
  if (hlen > text.size() - at) return bad("header cut short");
  const std::string header = text.substr(at, hlen);
  auto field = [&](const char* key) -> std::string {
    size_t k = header.find(absl::StrCat("'", key, "'"));
    if (k == std::string::npos) return "";
    size_t v = header.find(':', k);
    if (v == std::string::npos) return "";
    size_t e = header.find(*key == 's' ? ')' : ',', v);
    return e == std::string::npos ? "" : header.substr(v + 1, e - v - 1 + (*key == 's'));
  };
  std::string descr = field("descr");
  descr.erase(
      std::remove_if(descr.begin(), descr.end(), [](char c) { return c == '\'' || c == ' '; }),
      descr.end());
  if (field("fortran_order").find("True") != std::string::npos)
    return absl::UnimplementedError(path + ": a Fortran-order array");
  // numpy descr codes in safetensors spelling; numpy's names come from the dtype table.
  static const std::pair<const char*, const char*> kDescr[] = {
      {"<f8", "F64"}, {"<f4", "F32"}, {"<f2", "F16"}, {"<i8", "I64"}, {"<i4", "I32"},
      {"<i2", "I16"}, {"|i1", "I8"},  {"|u1", "U8"},  {"|b1", "BOOL"}};
  const safetensors::DType* dt = nullptr;
  for (const auto& [code, name] : kDescr)
    if (descr == code) dt = safetensors::FindDType(name);
  if (!dt) return absl::UnimplementedError(absl::StrCat(path, ": dtype '", descr, "'"));
  TensorData out;
  out.dtype = dt->numpy;
  std::string shape = field("shape");
  uint64_t numel = 1;
  for (absl::string_view part : absl::StrSplit(shape, absl::ByAnyChar("(), "), absl::SkipEmpty())) {
    int64_t d = 0;
    auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), d);
    if (ec != std::errc() || d < 0 || (d > 0 && numel > (uint64_t{1} << 40) / d))
      return bad("bad shape in the header");
    out.shape.push_back(d);
    numel *= static_cast<uint64_t>(d);
  }
  const uint64_t need = numel * (dt->bits / 8);
  if (need > text.size() - at - hlen) return bad("data shorter than its shape");
  ckpt::ToDoubles(dt->name, text.data() + at + hlen, need, &out.values);
  return out;
}

}  // namespace

std::vector<std::string> SplitName(std::string_view name) {
  return absl::StrSplit(absl::string_view(name.data(), name.size()), '.');
}

bool NaturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (isdigit(static_cast<unsigned char>(a[i])) && isdigit(static_cast<unsigned char>(b[j]))) {
      size_t ie = i, je = j;
      while (ie < a.size() && isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && isdigit(static_cast<unsigned char>(b[je]))) ++je;
      std::string_view x(a.data() + i, ie - i), y(b.data() + j, je - j);
      while (x.size() > 1 && x[0] == '0') x.remove_prefix(1);
      while (y.size() > 1 && y[0] == '0') y.remove_prefix(1);
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      i = ie, j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i, ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

// repr(float): the shortest digits that round-trip, fixed notation for decimal exponents
// -4..15, else d.ddde+XX.
std::string PyFloat(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string s(buf, r.ptr);
  const bool neg = s[0] == '-';
  if (neg) s.erase(0, 1);
  const size_t e = s.find('e');
  const int exp = std::stoi(s.substr(e + 1));
  std::string digits = s.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  } else if (exp < 0) {
    out = "0." + std::string(-exp - 1, '0') + digits;
  } else if (static_cast<int>(digits.size()) <= exp + 1) {
    out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
  }
  return neg ? "-" + out : out;
}

std::string Prefix(const std::string& entry) { return SplitName(entry)[0]; }

std::string ApiName(const std::string& entry) {
  std::vector<std::string> p = SplitName(entry);
  if (p[0] == "Module") {
    // Module.<path>.<Class>.<forward|backward|parameters_grad>.<index>
    return p.size() >= 4 ? p[p.size() - 3] : entry;
  }
  // <Prefix>.<api>.<index>.<direction>: the api may contain dots (Tensor.__add__ does not).
  if (p.size() < 4) return entry;
  std::string api = p[1];
  for (size_t i = 2; i + 2 < p.size(); ++i) api += "." + p[i];
  return api;
}

std::string StructuralKey(const Entry& e) {
  std::vector<std::string> p = SplitName(e.name);
  std::string direction;
  for (const std::string& part : p) {
    if (part == "forward" || part == "backward" || part == "parameters_grad") direction = part;
  }
  return absl::StrCat(Prefix(e.name), ".", ApiName(e.name), ".", direction, "#", e.rows.size());
}

absl::StatusOr<std::vector<DumpLocation>> FindDumps(const std::string& path) {
  std::string p = path;
  if (IsFile(p)) {
    const size_t slash = p.rfind('/');
    p = slash == std::string::npos ? "." : p.substr(0, slash);
  }
  if (!IsDir(p)) return absl::NotFoundError(path + ": no such file or directory");
  std::vector<DumpLocation> out;
  auto add = [&](const std::string& dir, const std::string& step, const std::string& rank) {
    out.push_back({dir, step, rank});
  };
  if (IsFile(p + "/dump.json")) {
    // A rank folder: its parent names the step when it looks like one.
    std::string parent = p + "/..";
    std::string step_name;
    char real[4096];
    if (realpath(parent.c_str(), real)) step_name = Base(real);
    add(p, LooksLikeStep(step_name) ? step_name : "", Base(p));
    return out;
  }
  for (const std::string& c : SubDirs(p)) {
    const std::string dir = p + "/" + c;
    if (IsFile(dir + "/dump.json")) {
      add(dir, LooksLikeStep(Base(p)) ? Base(p) : "", c);
      continue;
    }
    for (const std::string& r : SubDirs(dir)) {
      if (IsFile(dir + "/" + r + "/dump.json")) add(dir + "/" + r, c, r);
    }
  }
  if (out.empty()) return absl::NotFoundError(path + ": no dump.json in it or two levels below");
  return out;
}

absl::StatusOr<TensorData> ReadTensorFile(const std::string& path) {
  if (path.size() >= 4 && path.compare(path.size() - 4, 4, ".npy") == 0) return ReadNpy(path);
  return ReadPt(path);
}

}  // namespace trainscope::compare
