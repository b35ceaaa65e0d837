/* How okv_tokenizer_t dispatches to its kinds: tokenizer.c owns the handle
 * and implements the llama2.c kind itself; another kind (tokenizer_gguf.c)
 * hands it a table of operations and its state. Not part of model.h's or
 * tokenizer_gguf.h's interface. */
#ifndef OASISKV_TOOLS_MODEL_TOKENIZER_INTERNAL_H
#define OASISKV_TOOLS_MODEL_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/tokenizer_gguf.h"

/* The operations of a kind, on its state `impl`; the arguments were checked
 * by the public wrappers (non-NULL where required), the semantics are
 * model.h's and tokenizer_gguf.h's. */
typedef struct okv_tokenizer_ops_t {
  okv_status_t (*encode)(const void *impl, const char *text, size_t n_bytes, bool bos, uint32_t *out_tokens,
                         size_t capacity, size_t *out_n_tokens);
  okv_status_t (*piece)(const void *impl, uint32_t prev_token, uint32_t token, char *out_piece, size_t capacity,
                        size_t *out_n_bytes);
  /* token < vocabulary size. */
  void (*token_text)(const void *impl, uint32_t token, const char **out_ptr, size_t *out_len);
  void (*destroy)(void *impl);
} okv_tokenizer_ops_t;

/* What the handle answers without asking the kind. */
typedef struct okv_tokenizer_info_t {
  okv_tokenizer_kind_t kind;
  uint32_t vocab_size;
  uint32_t max_piece_bytes;
  uint32_t bos_id, eos_id; /* OKV_TOKEN_NONE when none */
  bool add_bos, add_eos;
  const char *pre_name; /* static; NULL but for BPE */
} okv_tokenizer_info_t;

/* Wraps `impl` in a handle allocated with `a` (NULL = system). On success the
 * handle owns impl (okv_tokenizer_free calls ops->destroy); on failure
 * (OUT_OF_MEMORY) the caller still owns it. */
okv_status_t okv_tokenizer_create_kind(const okv_tokenizer_info_t *info, const okv_tokenizer_ops_t *ops, void *impl,
                                       const okv_allocator_t *a, okv_tokenizer_t **out);

#endif
