/* Random kernel test cases shared by the kernel tests: host arrays in the
 * kernels' layouts, built from a seeded RNG, freed through CMocka. */
#ifndef OASISKV_TESTS_KERNEL_CASE_H
#define OASISKV_TESTS_KERNEL_CASE_H

#include "tests/common/test_common.h"
#include "tests/kernels/kernel_ref.h"

typedef struct okv_kcase_params_t {
  uint32_t n_seqs, n_kv_heads, group_size, head_dim, n_query_tokens, n_inflight;
  okv_dtype_t dtype;
  uint32_t n_blocks; /* working-set blocks per unit (unit 0 gets n_blocks, others vary when vary_blocks) */
  bool vary_blocks;  /* units get 0..n_blocks blocks */
  float key_scale;   /* keys ~ N(0, key_scale^2) */
  bool partial_last; /* last block of each unit partially filled */
} okv_kcase_params_t;

typedef struct okv_kcase_t {
  okv_kcase_params_t p;
  okv_attention_desc_t desc; /* buffers NULL; host arrays below */
  uint32_t n_units, n_q_heads, ws_total;
  uint64_t n_slots;
  size_t pool_bytes, q_floats, inflight_floats;
  uint32_t *ws_offsets, *ws_slots;
  uint8_t *ws_valid;
  uint8_t *pool;   /* n_slots slots */
  float *q;        /* [n_seqs][T][n_q_heads][head_dim] */
  float *inflight; /* [n_seqs][n_inflight][2][n_kv_heads][head_dim] or NULL */
} okv_kcase_t;

/* Builds a case (slots in random order, unused slots filled with NaN so a
 * kernel reading them shows up). */
void okv_kcase_build(okv_kcase_t *c, const okv_kcase_params_t *p, uint64_t seed);
void okv_kcase_free(okv_kcase_t *c);

/* Maximum over rows of |out - ref| / tolerance, with the tolerance of each
 * unit tol_rel * max|v| * (1 + A) where A = max over keys and rows of
 * sum_i |q_i k_i| / sqrt(head_dim) (the conditioning of the logits). Also checks
 * that nothing is NaN. Returns the worst ratio (pass: <= 1). */
double okv_kcase_attention_error(const okv_kcase_t *c, const float *out, const double *ref, double tol_rel);

/* A = max over keys and rows of sum_i |q_i k_i| / sqrt(head_dim): the
 * conditioning of the logits (errors of order eps * A are inherent to f32). */
double okv_kcase_conditioning(const okv_kcase_t *c);

/* Writes x rounded to dtype at element i of p. */
void okv_kcase_store(void *p, okv_dtype_t dtype, size_t i, float x);

#endif
