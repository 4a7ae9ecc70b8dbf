// libtorch's Unpickler with a type resolver that invents an empty class for every qualified
// name it meets and an object loader that keeps the pickled state in that object's single
// slot: unknown Python classes become plain records. Exceptions from libtorch are caught
// here and become a Status.
#include "ckpt/dcp_torch.h"

#include <torch/csrc/jit/api/compilation_unit.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace trainscope::ckpt {
namespace {

using c10::IValue;

std::string ClassName(const IValue& v) {
  if (!v.isObject()) return "";
  auto t = v.toObjectRef().type();
  return t->name() ? t->name()->qualifiedName() : "";
}

// The pickled state of a record: BUILD's state, or REDUCE's argument tuple.
IValue State(const IValue& v) { return v.isObject() ? v.toObjectRef().getSlot(0) : IValue(); }

// torch.Size: REDUCE(torch.Size, (tuple,)).
bool ToShape(const IValue& v, std::vector<uint64_t>* out) {
  IValue s = v;
  if (ClassName(v) == "torch.Size") {
    s = State(v);
    if (s.isTuple() && s.toTupleRef().elements().size() == 1) s = s.toTupleRef().elements()[0];
  }
  if (s.isTuple()) {
    for (const IValue& d : s.toTupleRef().elements()) {
      if (!d.isInt() || d.toInt() < 0) return false;
      out->push_back(static_cast<uint64_t>(d.toInt()));
    }
    return true;
  }
  if (s.isList()) {
    for (const IValue& d : s.toListRef()) {
      if (!d.isInt() || d.toInt() < 0) return false;
      out->push_back(static_cast<uint64_t>(d.toInt()));
    }
    return true;
  }
  return false;
}

IValue Field(const IValue& record, const char* name) {
  IValue s = State(record);
  if (!s.isGenericDict()) return IValue();
  for (const auto& kv : s.toGenericDict()) {
    if (kv.key().isString() && kv.key().toStringRef() == name) return kv.value();
  }
  return IValue();
}

// dtype: libtorch resolves GLOBAL torch.<dtype> to a ScalarType (an int); a record named
// torch.<dtype> when it does not.
std::string DTypeName(const IValue& v) {
  if (v.isInt()) {
    std::string n = c10::toString(static_cast<c10::ScalarType>(v.toInt()));
    static const std::map<std::string, std::string> kNames = {{"Float", "float32"},
                                                              {"Double", "float64"},
                                                              {"Half", "float16"},
                                                              {"BFloat16", "bfloat16"},
                                                              {"Long", "int64"},
                                                              {"Int", "int32"},
                                                              {"Short", "int16"},
                                                              {"Char", "int8"},
                                                              {"Byte", "uint8"},
                                                              {"Bool", "bool"},
                                                              {"ComplexFloat", "complex64"},
                                                              {"ComplexDouble", "complex128"}};
    auto it = kNames.find(n);
    return it == kNames.end() ? n : it->second;
  }
  std::string c = ClassName(v);
  return c.rfind("torch.", 0) == 0 ? c.substr(6) : (c.empty() ? "unknown" : c);
}

absl::StatusOr<std::vector<DcpTensor>> Walk(const std::string& path, const IValue& root) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
  };
  IValue sdm = Field(root, "state_dict_metadata");
  if (!sdm.isGenericDict()) return bad("no state_dict_metadata dict (not a DCP .metadata?)");
  std::vector<DcpTensor> out;
  for (const auto& kv : sdm.toGenericDict()) {
    if (!kv.key().isString()) return bad("a state_dict_metadata key is not a string");
    DcpTensor t;
    t.name = kv.key().toStringRef();
    const std::string cls = ClassName(kv.value());
    if (cls.size() >= 20 && cls.substr(cls.size() - 20) == "BytesStorageMetadata") {
      t.dtype = "bytes";
      out.push_back(std::move(t));
      continue;
    }
    if (!ToShape(Field(kv.value(), "size"), &t.shape)) {
      return bad(absl::StrCat("tensor \"", t.name, "\": no size"));
    }
    IValue props = State(Field(kv.value(), "properties"));
    if (props.isTuple() && !props.toTupleRef().elements().empty()) {
      t.dtype = DTypeName(props.toTupleRef().elements()[0]);
    } else {
      t.dtype = DTypeName(Field(Field(kv.value(), "properties"), "dtype"));
    }
    IValue chunks = Field(kv.value(), "chunks");
    t.chunks = chunks.isList() ? static_cast<int>(chunks.toListRef().size()) : 0;
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

DcpMetadataLoader TorchDcpMetadataLoader() {
  return [](const std::string& path) -> absl::StatusOr<std::vector<DcpTensor>> {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string bytes = ss.str();
    auto cu = std::make_shared<torch::jit::CompilationUnit>();
    std::map<std::string, c10::ClassTypePtr> classes;
    size_t at = 0;
    auto reader = [&](char* buf, size_t n) {
      n = std::min(n, bytes.size() - at);
      std::memcpy(buf, bytes.data() + at, n);
      at += n;
      return n;
    };
    auto resolver = [&](const c10::QualifiedName& qn) {
      auto& cls = classes[qn.qualifiedName()];
      if (!cls) {
        cls = c10::ClassType::create(qn, cu);
        cls->addAttribute("state", c10::AnyType::get());
      }
      return c10::StrongTypePtr(cu, cls);
    };
    auto loader = [](const c10::StrongTypePtr& type, IValue state) {
      auto obj = c10::ivalue::Object::create(type, 1);
      obj->setSlot(0, std::move(state));
      return obj;
    };
    try {
      torch::jit::Unpickler u(reader, resolver, loader, nullptr, c10::nullopt);
      IValue root = u.parse_ivalue();
      return Walk(path, root);
    } catch (const std::exception& e) {
      std::string what = e.what();
      size_t nl = what.find('\n');
      if (nl != std::string::npos) what.resize(nl);  // c10::Error appends a backtrace
      return absl::InvalidArgumentError(absl::StrCat(path, ": libtorch's unpickler: ", what));
    }
  };
}

}  // namespace trainscope::ckpt
