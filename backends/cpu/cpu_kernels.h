/* CPU kernel implementations on raw pointers (OpenMP across (sequence, KV head),
 * vectorised inner loops). Called by the CPU backend's stream workers after
 * hal/ validated the descriptor, and directly by tests/benchmarks.
 * Pointers are already resolved: base + offset of each buffer. */
#ifndef OASISKV_CPU_KERNELS_H
#define OASISKV_CPU_KERNELS_H

#include "oasiskv/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kv_pool: slot base; q/inflight/out/mass at their offsets (inflight, mass may be NULL).
 * n_threads: OpenMP threads (0 = runtime default). */
void okv_cpu_attention(const okv_attention_desc_t *d, const void *kv_pool, const float *q,
                       const float *inflight_kv, float *out, float *block_mass, int n_threads);
void okv_cpu_summarize_blocks(const okv_summary_desc_t *d, const void *kv, float *summaries, int n_threads);
void okv_cpu_summary_append(float *summaries, uint32_t head_dim, okv_dtype_t kv_dtype, uint32_t n,
                            const uint64_t *summary_index, const float *keys, const uint8_t *first);
void okv_cpu_score_blocks(const okv_score_desc_t *d, const float *q, const float *summaries, float *scores,
                          int n_threads);
void okv_cpu_topk(const okv_topk_desc_t *d, const float *scores, uint32_t *out_indices, uint32_t *out_counts,
                  int n_threads);

#ifdef __cplusplus
}
#endif
#endif
