/* A straightforward double-precision forward pass of a llama2.c model, with
 * its own dense KV cache: the oracle the engine (fp32, KV through the
 * runtime) is compared against. Test code only. */
#ifndef OASISKV_TESTS_MODEL_REFERENCE_H
#define OASISKV_TESTS_MODEL_REFERENCE_H

#include "tools/model/model.h"

typedef struct okv_ref_state_t {
  const okv_model_t *model;
  double *key_cache;   /* [n_layers][seq_len][kv_dim] */
  double *value_cache; /* [n_layers][seq_len][kv_dim] */
} okv_ref_state_t;

/* Allocates with the C library (tests only); returns 0 on success. */
int okv_ref_init(okv_ref_state_t *s, const okv_model_t *model);
void okv_ref_free(okv_ref_state_t *s);
/* Runs token at position pos (0..seq_len-1; positions fed in order) and writes
 * logits[vocab] in double. */
void okv_ref_forward(okv_ref_state_t *s, uint32_t token, uint32_t pos, double *logits);

/* Path of a file in the shared dir given as argv (set by meson); exits 77 when absent. */
const char *okv_ref_shared_path(const char *shared_dir, const char *rel, char *buf, size_t cap);

#endif
