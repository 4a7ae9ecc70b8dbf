// libts_spm.so: the only translation unit that includes sentencepiece's header (it declares
// its own absl::string_view, so no abseil header may appear here). Exposes the C API of
// spm_c_api.h; every entry point catches exceptions so none crosses the C boundary.
#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/spm_c_api.h"

#define TS_SPM_EXPORT extern "C" __attribute__((visibility("default")))

struct ts_spm_model {
  sentencepiece::SentencePieceProcessor processor;
};

namespace {

char* CopyString(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p == nullptr) return nullptr;
  std::memcpy(p, s.data(), s.size());
  p[s.size()] = '\0';
  return p;
}

void SetError(char** error, const std::string& message) {
  if (error != nullptr) *error = CopyString(message);
}

}  // namespace

TS_SPM_EXPORT int ts_spm_api_version(void) { return TS_SPM_API_VERSION; }

TS_SPM_EXPORT ts_spm_model* ts_spm_load(const char* path, char** error) {
  try {
    auto model = std::make_unique<ts_spm_model>();
    const auto status = model->processor.Load(path);
    if (!status.ok()) {
      SetError(error, status.ToString());
      return nullptr;
    }
    return model.release();
  } catch (const std::exception& e) {
    SetError(error, e.what());
    return nullptr;
  }
}

TS_SPM_EXPORT void ts_spm_free(ts_spm_model* model) { delete model; }

TS_SPM_EXPORT int ts_spm_encode(const ts_spm_model* model, const char* text, size_t len,
                                int32_t** ids, size_t* n, char** error) {
  *ids = nullptr;
  *n = 0;
  try {
    std::vector<int> out;
    const auto status = model->processor.Encode(std::string(text, len), &out);
    if (!status.ok()) {
      SetError(error, status.ToString());
      return -1;
    }
    if (out.empty()) return 0;
    *ids = static_cast<int32_t*>(std::malloc(out.size() * sizeof(int32_t)));
    if (*ids == nullptr) {
      SetError(error, "out of memory");
      return -1;
    }
    for (size_t i = 0; i < out.size(); ++i) (*ids)[i] = out[i];
    *n = out.size();
    return 0;
  } catch (const std::exception& e) {
    SetError(error, e.what());
    return -1;
  }
}

TS_SPM_EXPORT int ts_spm_decode(const ts_spm_model* model, const int32_t* ids, size_t n,
                                char** text, size_t* len, char** error) {
  *text = nullptr;
  *len = 0;
  try {
    std::vector<int> in(ids, ids + n);
    std::string out;
    const auto status = model->processor.Decode(in, &out);
    if (!status.ok()) {
      SetError(error, status.ToString());
      return -1;
    }
    *text = CopyString(out);
    *len = out.size();
    return 0;
  } catch (const std::exception& e) {
    SetError(error, e.what());
    return -1;
  }
}

TS_SPM_EXPORT int32_t ts_spm_vocab_size(const ts_spm_model* model) {
  return model->processor.GetPieceSize();
}

TS_SPM_EXPORT int32_t ts_spm_eos_id(const ts_spm_model* model) { return model->processor.eos_id(); }

TS_SPM_EXPORT void ts_spm_free_buffer(void* p) { std::free(p); }
