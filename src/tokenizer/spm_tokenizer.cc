// SentencePiece through libts_spm.so, loaded at run time.
//
// Why dlopen: libsentencepiece brings a private protobuf-lite that crashes (in static
// initialisation) a process that also links libtorch's protobuf. RTLD_DEEPBIND makes the
// wrapper and sentencepiece resolve their own symbols first, and RTLD_LOCAL keeps them out
// of the global namespace. AddressSanitizer refuses RTLD_DEEPBIND; sanitizer builds never
// link libtorch (CMakeLists.txt), so there the flag is dropped.
//
// The library is searched for, in order: $TRAINSCOPE_SPM_LIBRARY; <exe dir>/../lib;
// <exe dir>; <exe dir>/../lib/trainscope; the build tree it was compiled in.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tokenizer/spm_c_api.h"
#include "trainscope/core/env_vars.h"
#include "trainscope/core/status.h"
#include "trainscope/core/subprocess.h"
#include "trainscope/tokenizer/tokenizer.h"

#if defined(__SANITIZE_ADDRESS__)
#define TS_SPM_NO_DEEPBIND 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TS_SPM_NO_DEEPBIND 1
#endif
#endif

namespace trainscope::tokenizer {
namespace {

constexpr char kLibName[] = "libts_spm.so";

struct SpmApi {
  ts_spm_load_fn load = nullptr;
  ts_spm_free_fn free_model = nullptr;
  ts_spm_encode_fn encode = nullptr;
  ts_spm_decode_fn decode = nullptr;
  ts_spm_vocab_size_fn vocab_size = nullptr;
  ts_spm_eos_id_fn eos_id = nullptr;
  ts_spm_free_buffer_fn free_buffer = nullptr;
};

std::vector<std::string> Candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv(envvar::kSpmLibrary); env != nullptr && *env != '\0') {
    out.push_back(env);
  }
  std::string exe = SelfExecutablePath();
  if (auto slash = exe.rfind('/'); slash != std::string::npos) {
    const std::string dir = exe.substr(0, slash);
    out.push_back(absl::StrCat(dir, "/../lib/", kLibName));
    out.push_back(absl::StrCat(dir, "/", kLibName));
    out.push_back(absl::StrCat(dir, "/../lib/trainscope/", kLibName));
  }
#ifdef TS_SPM_BUILD_PATH
  out.push_back(TS_SPM_BUILD_PATH);
#endif
  return out;
}

template <typename Fn>
bool Bind(void* handle, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, name));
  return *fn != nullptr;
}

// Loads the library once per process; the handle is never closed.
absl::StatusOr<const SpmApi*> Api() {
  static std::once_flag once;
  static SpmApi api;
  static absl::Status status;
  std::call_once(once, [] {
    int flags = RTLD_NOW | RTLD_LOCAL;
#ifndef TS_SPM_NO_DEEPBIND
    flags |= RTLD_DEEPBIND;
#endif
    std::string tried;
    void* handle = nullptr;
    for (const std::string& path : Candidates()) {
      if (access(path.c_str(), R_OK) != 0) {
        absl::StrAppend(&tried, tried.empty() ? "" : ", ", path, " (absent)");
        continue;
      }
      handle = dlopen(path.c_str(), flags);
      if (handle != nullptr) break;
      const char* err = dlerror();
      absl::StrAppend(&tried, tried.empty() ? "" : ", ", path, " (", err ? err : "?", ")");
    }
    if (handle == nullptr) {
      status = absl::UnavailableError(absl::StrCat("cannot load the SentencePiece wrapper ",
                                                   kLibName, "; tried: ", tried, ". Set ",
                                                   envvar::kSpmLibrary, " to its path"));
      return;
    }
    ts_spm_api_version_fn version = nullptr;
    bool ok =
        Bind(handle, "ts_spm_api_version", &version) && Bind(handle, "ts_spm_load", &api.load) &&
        Bind(handle, "ts_spm_free", &api.free_model) &&
        Bind(handle, "ts_spm_encode", &api.encode) && Bind(handle, "ts_spm_decode", &api.decode) &&
        Bind(handle, "ts_spm_vocab_size", &api.vocab_size) &&
        Bind(handle, "ts_spm_eos_id", &api.eos_id) &&
        Bind(handle, "ts_spm_free_buffer", &api.free_buffer);
    if (!ok || version() != TS_SPM_API_VERSION) {
      status = absl::UnavailableError(
          absl::StrCat(kLibName, " is not a compatible SentencePiece wrapper (API version ",
                       TS_SPM_API_VERSION, " expected)"));
    }
  });
  if (!status.ok()) return status;
  return &api;
}

std::string TakeError(const SpmApi& api, char* error) {
  std::string out = error != nullptr ? error : "unknown error";
  if (error != nullptr) api.free_buffer(error);
  return out;
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(const SpmApi* api, ts_spm_model* model, std::string path)
      : api_(api), model_(model), path_(std::move(path)) {
    vocab_size_ = api_->vocab_size(model_);
    eos_id_ = api_->eos_id(model_);
  }
  ~SentencePieceTokenizer() override { api_->free_model(model_); }

  // SentencePiece only fails on a broken model; the ids stay empty then (checked by the
  // loader, which encodes a probe string).
  void Encode(std::string_view text, std::vector<int32_t>* ids) const override {
    int32_t* out = nullptr;
    size_t n = 0;
    char* error = nullptr;
    if (api_->encode(model_, text.data(), text.size(), &out, &n, &error) != 0) {
      TakeError(*api_, error);
      return;
    }
    ids->insert(ids->end(), out, out + n);
    api_->free_buffer(out);
  }
  size_t Count(std::string_view text) const override {
    int32_t* out = nullptr;
    size_t n = 0;
    char* error = nullptr;
    if (api_->encode(model_, text.data(), text.size(), &out, &n, &error) != 0) {
      TakeError(*api_, error);
      return 0;
    }
    api_->free_buffer(out);
    return n;
  }
  std::string Decode(const std::vector<int32_t>& ids) const override {
    char* text = nullptr;
    size_t len = 0;
    char* error = nullptr;
    // Ids out of range make sentencepiece fail; keep decoding total by dropping them.
    std::vector<int32_t> valid;
    valid.reserve(ids.size());
    for (int32_t id : ids) {
      if (id >= 0 && id < vocab_size_) valid.push_back(id);
    }
    if (api_->decode(model_, valid.data(), valid.size(), &text, &len, &error) != 0) {
      TakeError(*api_, error);
      return "";
    }
    std::string out(text, len);
    api_->free_buffer(text);
    return out;
  }
  int32_t vocab_size() const override { return vocab_size_; }
  int32_t eos_id() const override { return eos_id_; }
  std::string name() const override { return "sentencepiece:" + path_; }

 private:
  const SpmApi* const api_;
  ts_spm_model* const model_;
  const std::string path_;
  int32_t vocab_size_ = 0;
  int32_t eos_id_ = -1;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& model_path) {
  if (access(model_path.c_str(), F_OK) != 0) {
    return absl::NotFoundError(absl::StrCat(model_path, ": tokenizer model not found"));
  }
  if (access(model_path.c_str(), R_OK) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(model_path, ": cannot read tokenizer model"));
  }
  TS_ASSIGN_OR_RETURN(const SpmApi* api, Api());
  char* error = nullptr;
  ts_spm_model* model = api->load(model_path.c_str(), &error);
  if (model == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(model_path, ": not a SentencePiece model (", TakeError(*api, error), ")"));
  }
  return std::unique_ptr<Tokenizer>(new SentencePieceTokenizer(api, model, model_path));
}

}  // namespace trainscope::tokenizer
