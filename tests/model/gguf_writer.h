/* A GGUF v3 writer for the tests (test code only): metadata of every kind,
 * tensors converted from f32 to F32, F16, BF16, Q8_0 or Q4_0, aligned data,
 * and the byte offsets of every section boundary (for truncation tests).
 * Also a converter of a loaded llama2.c model into a llama-architecture GGUF
 * file with the tensor names and layout llama.cpp's files use.
 *
 * The quantisers are the reference rules of the formats (GGUF
 * specification / ggml's reference quantisers, written here from the
 * definitions): F16 and BF16 round to nearest even (oasiskv/kernels.h's
 * okv_f32_to_f16 / okv_f32_to_bf16); Q8_0 per block of 32
 * d = max|x| / 127, q = round(x / d); Q4_0 per block d = m / -8 where m is the
 * element of largest magnitude (its sign kept), q = min(15, trunc(x / d + 8.5)),
 * element j in the low nibble of byte j and element j + 16 in its high nibble.
 * Allocation failures abort (test code). */
#ifndef OASISKV_TESTS_MODEL_GGUF_WRITER_H
#define OASISKV_TESTS_MODEL_GGUF_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tools/model/gguf.h"
#include "tools/model/model.h"

typedef struct okv_gw_t okv_gw_t;

/* A new empty file (version 3, alignment 32 unless a general.alignment KV
 * sets another: the writer reads it back when it lays out the data). */
okv_gw_t *okv_gw_new(void);
void okv_gw_free(okv_gw_t *w);

void okv_gw_kv_str(okv_gw_t *w, const char *key, const char *value);
void okv_gw_kv_u32(okv_gw_t *w, const char *key, uint32_t value);
void okv_gw_kv_i32(okv_gw_t *w, const char *key, int32_t value);
void okv_gw_kv_f32(okv_gw_t *w, const char *key, float value);
void okv_gw_kv_bool(okv_gw_t *w, const char *key, bool value);
void okv_gw_kv_arr_str(okv_gw_t *w, const char *key, const char *const *values, size_t n);
void okv_gw_kv_arr_f32(okv_gw_t *w, const char *key, const float *values, size_t n);
void okv_gw_kv_arr_i32(okv_gw_t *w, const char *key, const int32_t *values, size_t n);

/* A tensor of n_dims dims (dims[0] innermost) converted from f32 `src`
 * (dims[0] * ... elements) to ggml `type` (F32, F16, BF16, Q8_0, Q4_0). */
void okv_gw_tensor(okv_gw_t *w, const char *name, uint32_t n_dims, const uint64_t *dims, uint32_t type,
                   const float *src);
/* A tensor with raw bytes of any type code (for bad files): n_bytes of data. */
void okv_gw_tensor_raw(okv_gw_t *w, const char *name, uint32_t n_dims, const uint64_t *dims, uint32_t type,
                       const void *data, size_t n_bytes);

/* Section boundaries of the serialised file, in bytes from its start. */
typedef struct okv_gw_layout_t {
  size_t header_end; /* 24 */
  size_t kv_end[64]; /* end of each of the first 64 KVs */
  size_t n_kv;
  size_t infos_end;       /* end of the tensor infos */
  size_t data_start;      /* after the padding */
  size_t tensor_off[512]; /* file offset of each of the first 512 tensors' data */
  size_t n_tensors;
  size_t total;
} okv_gw_layout_t;

/* The whole file in a malloc'd buffer (*out_n bytes; the caller frees) and,
 * when layout is not NULL, its section boundaries. */
void *okv_gw_serialize(const okv_gw_t *w, size_t *out_n, okv_gw_layout_t *layout);
/* Writes the file at path. */
void okv_gw_write(const okv_gw_t *w, const char *path);

/* The f32 -> type conversions (n elements; a block multiple for Q8_0/Q4_0),
 * writing the type's bytes into dst (okv_ggml_type_size bytes). */
void okv_gw_quantize(uint32_t type, const float *src, uint64_t n, void *dst);

/* A llama-architecture GGUF file of `m` (a llama2.c model): metadata
 * llama.* (context_length = m's seq_len, rope.freq_base 10000, rms epsilon
 * 1e-5), tensors token_embd, output_norm, output (only when the classifier is
 * not shared), blk.N.* in llama.cpp's names and [in, out] dims, the matrices
 * (every 2-D tensor) of type `type` and the norms F32. When `tokenizer` is
 * not NULL (a llama2.c tokenizer file's bytes), its pieces and scores become
 * tokenizer.ggml.* (model "llama", token types: ids 0 unknown, 1-2 control,
 * 3-258 byte when the vocabulary has byte fallback, else normal). */
okv_gw_t *okv_gw_from_model(const okv_model_t *m, uint32_t type, const void *tokenizer, size_t tokenizer_bytes);

#endif
