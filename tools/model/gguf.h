/* A reader of GGUF files (versions 2 and 3), the llama.cpp ecosystem's model
 * format: a header, typed key/value metadata, a tensor directory and aligned
 * tensor data. Method source: the GGUF specification (ggml docs/gguf.md).
 *
 * The file is mapped read-only (open/fstat/mmap) or taken from memory. Every
 * offset, count, string length and tensor extent is checked against the file
 * size at open; counts that would overflow are refused; nothing larger than
 * the file is allocated. After open, the file's bytes are not re-validated:
 * lookups only follow the offsets indexed at open.
 *
 * Layout (all little-endian): magic "GGUF", u32 version, u64 n_tensors, u64
 * n_kv; n_kv times (string key, u32 type, value); n_tensors times (string
 * name, u32 n_dims, n_dims u64 dims (innermost first), u32 ggml type, u64
 * offset); padding to general.alignment (default 32, a power of two); data.
 * A string is a u64 length and that many bytes (no NUL).
 *
 * Thread safety: a handle is read-only after open and may be shared by
 * threads; okv_gguf_close must not race with other calls on the handle.
 */
#ifndef OASISKV_TOOLS_MODEL_GGUF_H
#define OASISKV_TOOLS_MODEL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "oasiskv/oasiskv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GGUF value types, numbered as in the GGUF specification. */
typedef enum okv_gguf_type_e {
  OKV_GGUF_U8 = 0,
  OKV_GGUF_I8 = 1,
  OKV_GGUF_U16 = 2,
  OKV_GGUF_I16 = 3,
  OKV_GGUF_U32 = 4,
  OKV_GGUF_I32 = 5,
  OKV_GGUF_F32 = 6,
  OKV_GGUF_BOOL = 7,
  OKV_GGUF_STRING = 8,
  OKV_GGUF_ARRAY = 9,
  OKV_GGUF_U64 = 10,
  OKV_GGUF_I64 = 11,
  OKV_GGUF_F64 = 12,
} okv_gguf_type_t;

/* ggml tensor type codes the model loader accepts and okv_ggml_dequantize
 * converts. The reader itself knows the block and byte sizes of all of ggml's
 * types (F32 .. MXFP4, facts from the GGUF specification's type table), so it
 * validates and lists files of any of them; a code outside that table is
 * refused at open, naming the code and the tensor. */
#define OKV_GGML_TYPE_F32  0u
#define OKV_GGML_TYPE_F16  1u
#define OKV_GGML_TYPE_Q4_0 2u /* 18 bytes/block: f16 scale d, 16 bytes of nibbles; x = d * (q - 8) */
#define OKV_GGML_TYPE_Q8_0 8u /* 34 bytes/block: f16 scale d, 32 int8 q; x = d * q */
#define OKV_GGML_TYPE_BF16 30u

typedef struct okv_gguf_t okv_gguf_t;

/* One entry of the tensor directory. name and data point into the file
 * (name is not NUL-terminated). dims[0] is the innermost (contiguous)
 * dimension; unused dims are 1. data is aligned to general.alignment
 * relative to the file start; n_bytes is the size the type and dims imply. */
typedef struct okv_gguf_tensor_t {
  const char *name;
  size_t name_len;
  uint32_t n_dims;  /* 1..4 */
  uint64_t dims[4]; /* elements, innermost first */
  uint32_t type;    /* ggml type code: 0 F32, 1 F16, 2 Q4_0, 8 Q8_0, 30 BF16 (others listed, not loaded) */
  const void *data;
  uint64_t n_bytes;
} okv_gguf_tensor_t;

/* Maps `path` read-only and validates all of it (header, every KV, every
 * tensor info and extent). `a` (NULL = system) allocates the handle (a fixed
 * ~416 bytes, after a first validating pass: a file refused there costs no
 * allocation) and the index (offsets, 8 bytes per KV, tensor and array
 * string, each array at most the file's size).
 * Errors: NOT_FOUND (no such file), IO_ERROR (open/fstat/mmap failed),
 * INVALID_ARGUMENT (not GGUF, an unsupported version, a truncated section, a
 * length/count/offset past the end or overflowing, a bad alignment, an
 * unknown value or tensor type, a tensor past the end or misaligned, a
 * duplicate tensor name: one line naming the file and what is wrong),
 * OUT_OF_MEMORY. The caller closes *out with okv_gguf_close. */
okv_status_t okv_gguf_open(const char *path, const okv_allocator_t *a, okv_gguf_t **out);
/* The same over `n_bytes` of `data` (which must outlive the handle; nothing is
 * copied). `name` names it in messages (NULL: "<memory>").
 * Errors: as okv_gguf_open, less NOT_FOUND/IO_ERROR. */
okv_status_t okv_gguf_open_memory(const void *data, size_t n_bytes, const char *name, const okv_allocator_t *a,
                                  okv_gguf_t **out);
/* Unmaps and frees; NULL is accepted. */
void okv_gguf_close(okv_gguf_t *g);

/* The file name given at open (or "<memory>"). Borrowed. */
const char *okv_gguf_name(const okv_gguf_t *g);
/* The format version (2 or 3), the file size in bytes and the data alignment. */
uint32_t okv_gguf_version(const okv_gguf_t *g);
uint64_t okv_gguf_file_size(const okv_gguf_t *g);
uint32_t okv_gguf_alignment(const okv_gguf_t *g);

/* Metadata by key (bytes compared; the last of duplicate keys is refused at
 * open). Each getter: NOT_FOUND when the key is absent; INVALID_ARGUMENT
 * (naming the key and both types) when the stored type does not fit. */
/* Any integer type whose value fits uint32 (INVALID_ARGUMENT when negative or
 * too large, naming the value). */
okv_status_t okv_gguf_get_u32(const okv_gguf_t *g, const char *key, uint32_t *out);
/* F32, or F64 converted to float. */
okv_status_t okv_gguf_get_f32(const okv_gguf_t *g, const char *key, float *out);
/* BOOL (any nonzero byte is true). */
okv_status_t okv_gguf_get_bool(const okv_gguf_t *g, const char *key, bool *out);
/* STRING: *out_ptr points into the file (not NUL-terminated), *out_len bytes. */
okv_status_t okv_gguf_get_str(const okv_gguf_t *g, const char *key, const char **out_ptr, size_t *out_len);
/* ARRAY: element type and count. For numeric/bool elements *out_data points to
 * n little-endian packed values in the file (possibly unaligned: memcpy them);
 * for STRING elements use okv_gguf_get_arr_str (*out_data is then the first
 * string's length field). Arrays of arrays are refused at open. */
okv_status_t okv_gguf_get_arr(const okv_gguf_t *g, const char *key, okv_gguf_type_t *out_elem, uint64_t *out_n,
                              const void **out_data);
/* The i-th string of a STRING array, O(1) (offsets indexed at open).
 * Errors: NOT_FOUND (no key), INVALID_ARGUMENT (not a string array, i out of
 * range). */
okv_status_t okv_gguf_get_arr_str(const okv_gguf_t *g, const char *key, uint64_t i, const char **out_ptr,
                                  size_t *out_len);

/* Number of metadata entries; the i-th key (borrowed, into the file) and its
 * type (for an array also its element type and count, else 0). Used by
 * `oasiskv info`. Errors: INVALID_ARGUMENT (i out of range). */
uint64_t okv_gguf_kv_count(const okv_gguf_t *g);
okv_status_t okv_gguf_kv_at(const okv_gguf_t *g, uint64_t i, const char **out_key, size_t *out_key_len,
                            okv_gguf_type_t *out_type, okv_gguf_type_t *out_elem, uint64_t *out_n);

/* The tensor directory in file order. */
uint64_t okv_gguf_tensor_count(const okv_gguf_t *g);
/* Errors: INVALID_ARGUMENT (i out of range). */
okv_status_t okv_gguf_tensor_at(const okv_gguf_t *g, uint64_t i, okv_gguf_tensor_t *out);
/* By exact name. Errors: NOT_FOUND. */
okv_status_t okv_gguf_tensor_find(const okv_gguf_t *g, const char *name, okv_gguf_tensor_t *out);

/* A printable form of n bytes of file text for a one-line message: printable
 * ASCII as is, every other byte as \xNN, cut to fit `cap` (at least 16) with
 * "..." at the end when cut; always NUL-terminated. Returns out. */
const char *okv_gguf_quote(const char *s, size_t n, char *out, size_t cap);

/* ggml's name of a type code ("F32", "Q4_K", ...), or NULL for a code this
 * reader does not know. */
const char *okv_ggml_type_name(uint32_t type);
/* Bytes of `n_elems` elements of `type` (a multiple of the type's block size:
 * 32 for Q4_0/Q8_0, 256 for the K types) into *out_bytes. Errors:
 * INVALID_ARGUMENT (unknown type, n_elems not a multiple of the block size,
 * overflow of 64 bits). */
okv_status_t okv_ggml_type_size(uint32_t type, uint64_t n_elems, uint64_t *out_bytes);
/* Dequantises `n` elements of `type` (F32, F16, BF16, Q8_0 or Q4_0) from
 * `src` (the layout above, possibly unaligned) into f32 `dst` [n], as ggml's
 * reference dequantisers do (Q4_0: the low nibbles of a block's 16 bytes are
 * elements 0..15, the high nibbles 16..31). n must be a multiple of the
 * type's block size. Halves and bfloat16 convert with oasiskv/kernels.h's
 * okv_f16_to_f32 / okv_bf16_to_f32 (exact). Thread-safe. Errors:
 * INVALID_ARGUMENT (another type, named; n not a block multiple). */
okv_status_t okv_ggml_dequantize(uint32_t type, const void *src, uint64_t n, float *dst);

#ifdef __cplusplus
}
#endif
#endif
