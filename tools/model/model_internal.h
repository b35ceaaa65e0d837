/* Shared by the model's loaders (llama2c.c, tokenizer.c) and the checkpoint
 * fuzz harness; not part of model.h's interface. */
#ifndef OASISKV_TOOLS_MODEL_MODEL_INTERNAL_H
#define OASISKV_TOOLS_MODEL_MODEL_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "model/model.h"

/* The config a llama2.c header's 7 fields (dim, hidden_dim, n_layers,
 * n_heads, n_kv_heads, vocab_size, seq_len) declare, with head_dim = dim /
 * n_heads and a negative vocab_size meaning an unshared classifier. Checks
 * nothing: n_heads must be > 0, the rest is the caller's to validate. */
void okv_model_config_from_header(const int32_t header[7], okv_model_config_t *out);

/* fopen(path, "rb"). Errors: NOT_FOUND (no such file), IO_ERROR (any other
 * failure), both as "<what> '<path>': <strerror>". */
okv_status_t okv_model_open_file(const char *what, const char *path, FILE **out_file);

#endif
