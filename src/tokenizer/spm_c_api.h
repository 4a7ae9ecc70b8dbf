// C API of libts_spm.so, the wrapper around libsentencepiece (see CMakeLists.txt for why
// it is a separate shared library loaded with dlopen). Plain C types only, so the loader
// can be compiled without sentencepiece's header. Strings and arrays returned by the
// library are allocated with malloc() and freed with ts_spm_free_buffer().
#ifndef TRAINSCOPE_TOKENIZER_SPM_C_API_H_
#define TRAINSCOPE_TOKENIZER_SPM_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TS_SPM_API_VERSION 1

typedef struct ts_spm_model ts_spm_model;

// Returns TS_SPM_API_VERSION; the loader refuses a library with another version.
typedef int (*ts_spm_api_version_fn)(void);
// Loads a .model file. On failure returns NULL and sets *error (malloc'd message).
typedef ts_spm_model* (*ts_spm_load_fn)(const char* path, char** error);
typedef void (*ts_spm_free_fn)(ts_spm_model* model);
// Encodes text[0..len) to ids; *ids is malloc'd (may be NULL when *n == 0). 0 on success,
// -1 on failure (then *error is set).
typedef int (*ts_spm_encode_fn)(const ts_spm_model* model, const char* text, size_t len,
                                int32_t** ids, size_t* n, char** error);
// Decodes ids to text; *text is malloc'd, *len its length. 0 on success, -1 on failure.
typedef int (*ts_spm_decode_fn)(const ts_spm_model* model, const int32_t* ids, size_t n,
                                char** text, size_t* len, char** error);
typedef int32_t (*ts_spm_vocab_size_fn)(const ts_spm_model* model);
typedef int32_t (*ts_spm_eos_id_fn)(const ts_spm_model* model);
typedef void (*ts_spm_free_buffer_fn)(void* p);

#ifdef __cplusplus
}
#endif

#endif  // TRAINSCOPE_TOKENIZER_SPM_C_API_H_
