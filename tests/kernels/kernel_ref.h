/* Scalar double-precision reference of the OasisKV kernels (the oracle of the
 * kernel tests). Written for clarity, not speed: direct softmax over all
 * logits, sort-based top-K. Semantics: include/oasiskv/kernels.h.
 * Inputs are host arrays laid out exactly as the kernels' buffers. */
#ifndef OASISKV_TESTS_KERNEL_REF_H
#define OASISKV_TESTS_KERNEL_REF_H

#include <stdbool.h>
#include <stdint.h>

#include "oasiskv/kernels.h"

/* Element i of a dtype array (exact widening to double). */
double okv_ref_elem(const void *p, okv_dtype_t dtype, uint64_t i);

/* Attention of `d` (buffers ignored; host arrays given) into
 * out [n_seqs][T][n_q_heads][head_dim] (double), and, when mass != NULL, the
 * block mass [ws_total][T] averaged over the G query heads. Rows that see no
 * key are zero. If inflight_mass != NULL it receives [n_seqs][T][n_q_heads]
 * the probability of the in-flight tokens of each row. */
void okv_ref_attention(const okv_attention_desc_t *d, const void *kv_pool, const float *q, const float *inflight_kv,
                       double *out, double *mass, double *inflight_mass);

/* Summaries (min/max of the first valid keys) of one block into
 * out [2][head_dim]. */
void okv_ref_summary(const void *slot, okv_dtype_t dtype, uint32_t head_dim, uint32_t valid, float *out);

/* Quest bound of every block of every segment (or, with d->n_ranges > 0, of
 * every range): scores indexed like the kernel's score buffer (element
 * seg_score_first[u] + b, or range_score_first[r] + i); other entries
 * untouched. Summaries in d->summary_dtype. */
void okv_ref_score(const okv_score_desc_t *d, const float *q, const void *summaries, double *scores);

/* OKV_DTYPE_Q8: the score of one query row q[D] (unscaled, f32) on the 8-bit
 * summary q8, from the definition in include/oasiskv/kernels.h, in double. */
double okv_ref_q8_row(const uint8_t *q8, const float *q, uint32_t D);

/* OKV_DTYPE_Q8: 0 if q8 encodes the box [mn, mx] (D floats each) as
 * documented: lo exact, lo + 255 step covers the max within a few ulps of the
 * least step, every min code the largest whose value is <= the min, every max
 * code the smallest whose value is >= the max (step < 0 for a non-finite
 * box, 0 for a point); otherwise the number of the first failed check. */
int okv_ref_q8_check(const float *mn, const float *mx, uint32_t D, const uint8_t *q8);
/* OKV_DTYPE_C4 (include/oasiskv/kernels.h): bytes of one tile of 16 blocks. */
uint64_t okv_ref_c4_tile_bytes(uint32_t D);
/* OKV_DTYPE_C4 estimate of lane `lane` of `tile` for a KV head's nr query rows (unscaled, f32, D each), from
 * the definition, in double: the max over rows of lo * sum(x) + width * sum|x| + step * sigma * sum(code *
 * centre code), with x = f32(q * f32(1/sqrt(D))), sigma = f32(max|x| / 127) and codes round(f32(x / sigma))
 * clamped to [-127, 127]; +infinity for step < 0 or a non-finite row. */
double okv_ref_c4_score(const uint8_t *tile, uint32_t lane, const float *const *rows, uint32_t nr, uint32_t D);
/* Checks lane `lane` of `tile` against the box [mn, mx]: 0 when it is the format's encoding (lo the least
 * centre, step the centres' span / 15, every code the nearest to its centre, width the mean half-width; step
 * < 0 for a non-finite box, 0 for equal centres with all codes 0), else the number of the failed check. */
int okv_ref_c4_check(const float *mn, const float *mx, uint32_t D, const uint8_t *tile, uint32_t lane);

/* Sort-based top-K: out_indices [n_segments][k] (UINT32_MAX padding),
 * out_counts [n_segments]; positions mapped through d->index_map when set. */
void okv_ref_topk(const okv_topk_desc_t *d, const float *scores, uint32_t *out_indices, uint32_t *out_counts);

/* Directed narrowing oracle, by search in the sorted table of every value of
 * `dtype` (f16 or bf16; f32 returns x): the largest value <= x (up false) or
 * the smallest value >= x (up true), as a float. NaN returns NaN. */
float okv_ref_narrow(float x, okv_dtype_t dtype, bool up);

/* Group summary reference: dst [2][head_dim] floats = elementwise min of the
 * mins / max of the maxes of n summaries of src_dtype starting at src, each
 * narrowed to dst_dtype by okv_ref_narrow. */
void okv_ref_summary_reduce(const void *src, okv_dtype_t src_dtype, uint32_t n, uint32_t head_dim,
                            okv_dtype_t dst_dtype, float *dst);

#endif
