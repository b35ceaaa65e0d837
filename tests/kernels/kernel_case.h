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
  size_t pool_bytes, q_floats, inflight_floats;
  uint32_t *ws_offsets, *ws_slots;
  uint8_t *ws_valid;
  uint8_t *pool;   /* desc.n_slots slots */
  float *q;        /* [n_seqs][T][n_q_heads][head_dim] */
  float *inflight; /* [n_seqs][n_inflight][2][n_kv_heads][head_dim] or NULL */
} okv_kcase_t;

/* The usual parameters: n_seqs x n_kv_heads units of n_blocks blocks each,
 * keys ~ N(0, 1), every unit the same size and its last block partially
 * filled (a test sets vary_blocks, key_scale or partial_last after). */
okv_kcase_params_t okv_kcase_params(uint32_t n_seqs, uint32_t n_kv_heads, uint32_t group_size, uint32_t head_dim,
                                    uint32_t n_query_tokens, uint32_t n_inflight, okv_dtype_t dtype, uint32_t n_blocks);

/* Builds a case (slots in random order, unused slots filled with NaN so a
 * kernel reading them shows up). */
void okv_kcase_build(okv_kcase_t *c, const okv_kcase_params_t *p, uint64_t seed);
void okv_kcase_free(okv_kcase_t *c);

/* The blocks of a summaries test: a case of one unit of n_blocks blocks of
 * dtype (no queries to speak of), keys ~ N(0, key_scale^2), last block partial. */
void okv_kcase_build_blocks(okv_kcase_t *c, uint32_t head_dim, okv_dtype_t dtype, uint32_t n_blocks, float key_scale,
                            uint64_t seed);

/* Slot `slot` of the case's pool (okv_block_bytes() bytes). */
const uint8_t *okv_kcase_slot(const okv_kcase_t *c, uint64_t slot);

/* Key of token j of slot `slot`, as the kernels read it (dtype-rounded), into
 * key [head_dim]. */
void okv_kcase_key(const okv_kcase_t *c, uint64_t slot, uint32_t j, float *key);

/* The reference of a case (okv_ref_attention): out [q_floats] and the block
 * mass [n_mass = ws_total * T + 1]; test_malloc'd. */
typedef struct okv_kcase_ref_t {
  double *out, *mass;
  size_t n_mass;
} okv_kcase_ref_t;
void okv_kcase_ref_make(const okv_kcase_t *c, okv_kcase_ref_t *r);
void okv_kcase_ref_free(okv_kcase_ref_t *r);

/* Maximum over rows of |out - ref| / tolerance, with the tolerance of each
 * unit tol_rel * max|v| * (1 + A) where A = max over keys and rows of
 * sum_i |q_i k_i| / sqrt(head_dim) (the conditioning of the logits). Also checks
 * that nothing is NaN. Returns the worst ratio (pass: <= 1). */
double okv_kcase_attention_error(const okv_kcase_t *c, const float *out, const double *ref, double tol_rel);

/* A = max over keys and rows of sum_i |q_i k_i| / sqrt(head_dim): the
 * conditioning of the logits (errors of order eps * A are inherent to f32). */
double okv_kcase_conditioning(const okv_kcase_t *c);

/* Asserts okv_kcase_attention_error(c, out, ref, tol_rel) <= 1, printing the
 * case and `what` (the run) otherwise; returns the ratio. */
double okv_kcase_assert_attention(const okv_kcase_t *c, const float *out, const double *ref, double tol_rel,
                                  const char *what);

/* Asserts |mass - ref_mass| <= tol_rel * (1 + A) for every block mass entry
 * (A: okv_kcase_conditioning), printing the entry and `what` otherwise. */
void okv_kcase_assert_mass(const okv_kcase_t *c, const float *mass, const double *ref_mass, double tol_rel,
                           const char *what);

/* Asserts that summary si[i] of `got` (f32 [*][2][head_dim]) is the reference
 * summary of slot bi[i], for the n blocks i (valid tokens: ws_valid[i]). */
void okv_kcase_assert_summaries(const okv_kcase_t *c, const uint64_t *bi, const uint64_t *si, uint32_t n,
                                const float *got);

/* Scoring and top-K descriptors with their host arrays; the buffers (and
 * offsets) are left NULL (0) for the caller to set. Scoring uses every query
 * token (t_begin 0, t_end n_query_tokens). */
okv_score_desc_t okv_kcase_score_desc(uint32_t n_seqs, uint32_t n_kv_heads, uint32_t group_size, uint32_t head_dim,
                                      uint32_t n_query_tokens, const uint64_t *seg_summary_first,
                                      const uint32_t *seg_n_blocks, const uint64_t *seg_score_first);
okv_topk_desc_t okv_kcase_topk_desc(uint32_t n_segments, uint32_t k, const uint64_t *seg_score_first,
                                    const uint32_t *seg_n, const uint32_t *excl_offsets, const uint32_t *excl_blocks);

/* Writes x rounded to dtype at element i of p. */
void okv_kcase_store(void *p, okv_dtype_t dtype, size_t i, float x);

#endif
