/* OasisKV kernel entry points of the HAL: sparse paged decode attention, block
 * key summaries, look-ahead block scoring and top-K. Every backend implements
 * them; they are enqueued on a stream like copies.
 *
 * Data layout (docs/kernels.md):
 *  - A block is OKV_BLOCK_TOKENS = 16 tokens of one KV head. A slot is the room
 *    for one block: K stored transposed, Kt[head_dim][16], then V[16][head_dim],
 *    both in the KV dtype; okv_block_bytes() bytes. The HOST tier stores the full
 *    KV in the same block format, so a transfer is a plain block copy.
 *  - Summaries: per block, float32 min[head_dim] then max[head_dim] of its
 *    valid keys (okv_summary_bytes() bytes), always float32 so the bound stays
 *    a true upper bound (no rounding of min up / max down).
 *  - Queries are float32 [n_seqs][T][n_q_heads][head_dim], query head
 *    h_q = kv_head * group_size + g (GQA: group_size query heads per KV head).
 *
 * Host index arrays in the descriptors (ws_*, seg_*, excl_*) are copied at
 * enqueue; the caller may free them on return. Buffers are retained until the
 * kernel has run. Every descriptor is validated before anything is enqueued:
 * INVALID_ARGUMENT names the field, and nothing is written.
 */
#ifndef OASISKV_KERNELS_H
#define OASISKV_KERNELS_H

#include "oasiskv/api.h"

#include "oasiskv/hal.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OKV_BLOCK_TOKENS 16u

typedef enum okv_dtype_e { OKV_DTYPE_F32 = 0, OKV_DTYPE_F16 = 1, OKV_DTYPE_BF16 = 2, OKV_DTYPE_COUNT } okv_dtype_t;

/* Element size in bytes (4, 2, 2); 0 for invalid. */
OKV_API size_t okv_dtype_size(okv_dtype_t dtype);
/* "f32", "f16", "bf16". */
OKV_API const char *okv_dtype_name(okv_dtype_t dtype);
/* Bytes of one slot (K and V of one block of one KV head): 2 * 16 * head_dim * size. */
OKV_API uint64_t okv_block_bytes(okv_dtype_t dtype, uint32_t head_dim);
/* Bytes of one block summary: 2 * head_dim * 4. */
OKV_API uint64_t okv_summary_bytes(uint32_t head_dim);

/* Conversions used by every backend and the tests (round to nearest even). */
OKV_API uint16_t okv_f32_to_bf16(float x);
OKV_API float okv_bf16_to_f32(uint16_t x);
OKV_API uint16_t okv_f32_to_f16(float x);
OKV_API float okv_f16_to_f32(uint16_t x);

/* 1. Sparse paged decode attention (paper: attention over the head-wise mapped
 * working set).
 * For each sequence s, KV head h, query token t < T and group member g:
 *   out[s][t][h*G+g] = softmax_j(q . k_j / sqrt(head_dim)) . v_j
 * over j = the valid tokens of the blocks in working set (s, h) (slots in any
 * order) plus the in-flight tokens visible to t. In-flight token i (of
 * n_inflight <= T) belongs to query token T - n_inflight + i and is visible to
 * query tokens >= its owner (the draft token sees the real token and itself;
 * the real token does not see the draft).
 * Empty working set and no visible in-flight token: the output row is zeros
 * (and no mass is written).
 * Numerically stable: online softmax with one rescale per block; long lists are
 * split and merged with log-sum-exp. */
typedef struct okv_attention_desc_t {
  uint32_t n_seqs, n_kv_heads, group_size, head_dim;
  uint32_t n_query_tokens; /* T in 1..4 */
  okv_dtype_t kv_dtype;
  okv_hal_buffer_t *kv_pool; /* slot pool, slot i at byte i * okv_block_bytes() */
  uint64_t n_slots;          /* slots in kv_pool */
  /* Working sets, CSR over u = s * n_kv_heads + h. */
  const uint32_t *ws_offsets; /* [n_seqs*n_kv_heads + 1], ws_offsets[0] == 0 */
  const uint32_t *ws_slots;   /* [ws_offsets[last]] slot index < n_slots */
  const uint8_t *ws_valid;    /* [ws_offsets[last]] valid tokens in 1..16 */
  okv_hal_buffer_t *q;
  uint64_t q_offset;   /* f32 [n_seqs][T][n_q_heads][head_dim] */
  uint32_t n_inflight; /* 0..T */
  okv_hal_buffer_t *inflight_kv;
  uint64_t inflight_offset; /* f32 [n_seqs][n_inflight][2][n_kv_heads][head_dim]
                                                              (K then V); NULL iff n_inflight == 0 */
  okv_hal_buffer_t *out;
  uint64_t out_offset; /* f32 [n_seqs][T][n_q_heads][head_dim] */
  okv_hal_buffer_t *block_mass;
  uint64_t mass_offset; /* optional (NULL): f32 [ws_offsets[last]][T]:
                                                          attention probability of each working-set
                                                          block, averaged over the G query heads */
} okv_attention_desc_t;

OKV_API okv_status_t okv_hal_attention_async(okv_hal_stream_t *stream, const okv_attention_desc_t *desc);

/* 2. Block key summaries (Quest-style min/max of keys; paper: "per-block key
 * summaries, kept resident").
 * Rebuild: for each listed block, summaries[summary_index] = elementwise
 * min/max over its first `valid` keys read from `kv` (slot layout, any tier the
 * backend can read: HOST or DEVICE). */
typedef struct okv_summary_desc_t {
  uint32_t head_dim;
  okv_dtype_t kv_dtype;
  okv_hal_buffer_t *kv;        /* blocks in slot layout; block i at byte i * okv_block_bytes() */
  okv_hal_buffer_t *summaries; /* f32 [n][2][head_dim] */
  uint32_t n_blocks;
  const uint64_t *block_index;   /* [n_blocks] block within kv */
  const uint8_t *valid;          /* [n_blocks] valid tokens 1..16 */
  const uint64_t *summary_index; /* [n_blocks] summary within summaries */
} okv_summary_desc_t;

OKV_API okv_status_t okv_hal_summarize_blocks_async(okv_hal_stream_t *stream, const okv_summary_desc_t *desc);

/* Incremental update when one token is appended: for each i,
 * summaries[summary_index[i]] = first[i] ? (k_i, k_i) : (min(min,k_i), max(max,k_i)).
 * `keys` is host f32 [n][head_dim], copied at enqueue (keys are rounded through
 * kv_dtype first so the summary bounds the stored key exactly). */
OKV_API okv_status_t okv_hal_summary_append_async(okv_hal_stream_t *stream, okv_hal_buffer_t *summaries,
                                                  uint32_t head_dim, okv_dtype_t kv_dtype, uint32_t n,
                                                  const uint64_t *summary_index, const float *keys,
                                                  const uint8_t *first);

/* 3. Look-ahead block scoring (Quest upper bound; paper: "Predict").
 * Segments u = s * n_kv_heads + h. For every block b < seg_n_blocks[u]:
 *   score[u][b] = max over t in [t_begin, t_end), g < G of
 *                 sum_i max(q_i * min_i, q_i * max_i)
 * an upper bound of q . k for every key k of the block (scaled by 1/sqrt(head_dim)
 * like attention logits). Max over heads and tokens: a block any of the group's
 * heads may need is kept, which is what attention over the shared KV head needs. */
typedef struct okv_score_desc_t {
  uint32_t n_seqs, n_kv_heads, group_size, head_dim;
  uint32_t n_query_tokens; /* T of the q layout */
  uint32_t t_begin, t_end; /* query tokens used, 0 <= t_begin < t_end <= T */
  okv_hal_buffer_t *q;
  uint64_t q_offset;                 /* f32 [n_seqs][T][n_q_heads][head_dim] */
  okv_hal_buffer_t *summaries;       /* f32 [*][2][head_dim] */
  const uint64_t *seg_summary_first; /* [n_seqs*n_kv_heads] index of block 0's summary; blocks contiguous */
  const uint32_t *seg_n_blocks;      /* [n_seqs*n_kv_heads] */
  okv_hal_buffer_t *scores;          /* f32 */
  const uint64_t *seg_score_first;   /* [n_seqs*n_kv_heads] element index of score[u][0] */
} okv_score_desc_t;

OKV_API okv_status_t okv_hal_score_blocks_async(okv_hal_stream_t *stream, const okv_score_desc_t *desc);

/* 4. Top-K per segment: the k highest scores' block indices in descending
 * score order, ties broken by lower block index; blocks listed in the
 * segment's exclude set are skipped. out_indices[u][0..count_u) are valid,
 * count_u = min(k, n_u - excluded_u); the rest is UINT32_MAX.
 * k in 1..512 (OKV_TOPK_MAX), n_u up to 65,536 blocks. NaN scores are treated
 * as -infinity. */
#define OKV_TOPK_MAX 512u
typedef struct okv_topk_desc_t {
  uint32_t n_segments;
  uint32_t k;
  okv_hal_buffer_t *scores;        /* f32 */
  const uint64_t *seg_score_first; /* [n_segments] */
  const uint32_t *seg_n;           /* [n_segments] blocks */
  const uint32_t *excl_offsets;    /* optional [n_segments + 1] CSR, NULL = none */
  const uint32_t *excl_blocks;     /* [excl_offsets[last]] */
  okv_hal_buffer_t *out_indices;
  uint64_t out_offset; /* u32 [n_segments][k] */
  okv_hal_buffer_t *out_counts;
  uint64_t counts_offset; /* optional u32 [n_segments] */
} okv_topk_desc_t;

OKV_API okv_status_t okv_hal_topk_async(okv_hal_stream_t *stream, const okv_topk_desc_t *desc);

#ifdef __cplusplus
}
#endif
#endif /* OASISKV_KERNELS_H */
