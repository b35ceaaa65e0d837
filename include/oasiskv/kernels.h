/* OasisKV kernel entry points of the HAL: sparse paged decode attention, block
 * key summaries, look-ahead block scoring and top-K. Every backend implements
 * them; they are enqueued on a stream like copies.
 *
 * Data layout (docs/kernels.md):
 *  - A block is OKV_BLOCK_TOKENS = 16 tokens of one KV head. A slot is the room
 *    for one block: K stored transposed, Kt[head_dim][16], then V[16][head_dim],
 *    both in the KV dtype; okv_block_bytes() bytes. The HOST tier stores the full
 *    KV in the same block format, so a transfer is a plain block copy.
 *  - Summaries: per block, min[head_dim] then max[head_dim] of its valid keys,
 *    stored in a summary dtype (okv_summary_bytes_ex() bytes): f32 by default
 *    (exact: every key dtype widens to f32), or f16 / bf16 (half the bytes)
 *    narrowed with directed rounding, min toward -infinity and max toward
 *    +infinity, so the scores stay true upper bounds.
 *  - Queries are float32 [n_seqs][T][n_q_heads][head_dim], query head
 *    h_q = kv_head * group_size + g (GQA: group_size query heads per KV head).
 *
 * Host index arrays in the descriptors (ws_*, seg_*, range_*, run_*, excl_*,
 * index_map, src_*, dst_*, and the keys of an append) are copied at enqueue;
 * the caller may free them on return. Buffers are retained until the kernel
 * has run. Every descriptor is validated before anything is enqueued:
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

typedef enum okv_dtype_e {
  OKV_DTYPE_F32 = 0,
  OKV_DTYPE_F16 = 1,
  OKV_DTYPE_BF16 = 2,
  OKV_DTYPE_COUNT, /* KV and summary dtypes are below this */
  /* 8-bit block summary (a summary format, never a KV dtype; docs/kernels.md "8-bit summaries"):
   * per block f32 lo, f32 step, then u8 min codes [head_dim], u8 max codes [head_dim], padded to
   * 8 bytes. Code a stands for lo + step * a; min codes round down and max codes up, so the box
   * [lo + step * amin, lo + step * amax] contains the source summary's box (an upper bound stays
   * one). step < 0 marks a block whose bounds are not finite (it scores +infinity). Only
   * okv_hal_summary_reduce_async's dst_dtype and okv_hal_score_blocks_async's summary_dtype
   * accept it. */
  OKV_DTYPE_Q8 = 4,
  /* 4-bit block centres (a summary format, never a KV dtype; docs/kernels.md "4-bit centres"), in tiles
   * of 16 blocks: block b is lane b % 16 of tile b / 16. A tile holds f32 lo[16], f32 step[16], f32
   * width[16], then the packed codes: P = ceil(head_dim / 2) rounded up to 4 bytes per block, element 2j
   * in the low nibble of byte j and 2j + 1 in its high one, stored 4 bytes at a time with the 16 lanes
   * side by side (bytes 4g..4g+3 of lane l at 192 + 64g + 4l). okv_summary_bytes_ex gives one block's
   * share, 12 + P (76 at head_dim 128); a buffer holds whole tiles only. Code a stands for lo + step * a,
   * rounded to nearest, of the box's centre (min + max) / 2; width is the mean over elements of the
   * half-width (max - min) / 2. A query row x (scaled by 1/sqrt(head_dim)) scores
   * lo * sum(x) + width * sum|x| + step * sigma * dot(codes, round(x / sigma)), sigma = max|x| / 127:
   * an estimate of the min/max bound sum(x * centre) + sum(|x| * half-width), not a bound. step < 0
   * marks a block whose bounds are not finite (it scores +infinity), as does a query row with a non-finite
   * element or whose sum|x| passes f32's range. Only okv_hal_summary_reduce_async's
   * dst_dtype and okv_hal_score_blocks_async's summary_dtype accept it. */
  OKV_DTYPE_C4 = 5
} okv_dtype_t;

/* Element size in bytes (4, 2, 2); 0 for invalid. */
OKV_API size_t okv_dtype_size(okv_dtype_t dtype);
/* "f32", "f16", "bf16", "q8", "c4"; "unknown" for any other value. */
OKV_API const char *okv_dtype_name(okv_dtype_t dtype);
/* Bytes of one slot (K and V of one block of one KV head): 2 * 16 * head_dim * size. */
OKV_API uint64_t okv_block_bytes(okv_dtype_t dtype, uint32_t head_dim);
/* Bytes of one f32 block summary: 2 * head_dim * 4 (= okv_summary_bytes_ex(OKV_DTYPE_F32, head_dim)). */
OKV_API uint64_t okv_summary_bytes(uint32_t head_dim);
/* Bytes of one block summary stored in summary_dtype: 2 * head_dim * okv_dtype_size(summary_dtype)
 * (1,024 for f32 at head_dim 128, 512 for f16 / bf16); OKV_DTYPE_Q8: 8 + 2 * head_dim rounded up to
 * 8 (264 at head_dim 128); OKV_DTYPE_C4: one block's share of a tile of 16, 12 + ceil(head_dim / 2) rounded up to 4
 * (76 at head_dim 128); 0 for an invalid dtype. Pure, thread-safe. */
OKV_API uint64_t okv_summary_bytes_ex(okv_dtype_t summary_dtype, uint32_t head_dim);

/* Conversions used by every backend and the tests (round to nearest even). */
OKV_API uint16_t okv_f32_to_bf16(float x);
OKV_API float okv_bf16_to_f32(uint16_t x);
OKV_API uint16_t okv_f32_to_f16(float x);
OKV_API float okv_f16_to_f32(uint16_t x);
/* Directed narrowing, for summaries: _down gives the largest bf16 / f16 value <= x (toward -infinity),
 * _up the smallest one >= x (toward +infinity); values the dtype holds are kept exactly, -0 stays -0,
 * NaN stays NaN. f16 saturates outside its range: _up of x > 65504 is +infinity and _down of
 * x < -65504 is -infinity (still a bound, but a score built on it is infinite: bf16 has the f32 range).
 * Pure, thread-safe. */
OKV_API uint16_t okv_f32_to_bf16_down(float x);
OKV_API uint16_t okv_f32_to_bf16_up(float x);
OKV_API uint16_t okv_f32_to_f16_down(float x);
OKV_API uint16_t okv_f32_to_f16_up(float x);

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
  /* Table mode (`tables` not NULL): the working sets are read on the device from the slot tables of
   * section 6 (okv_select_desc_t's layout) instead of the CSR, so that the host lists no block per head
   * (docs/architecture.md "Host bookkeeping per KV head"). ws_offsets, ws_slots, ws_valid and block_mass
   * must then be NULL. Unit u = s * n_kv_heads + h reads table i = table_index[s] * n_kv_heads + h at byte
   * tables_offset + i * okv_slot_table_bytes(table_slots, table_words) of `tables`, and the pool slot of
   * each of its entries at byte slot_map_offset + (i * table_slots + j) * 4 of `slot_map`. Entry j is read,
   * in order j = 0 .. table_slots - 1, iff block[j] != OKV_SLOT_FREE, block[j] < nb = ceil(seq_tokens[s] /
   * 16) and its pool slot < n_slots; its valid tokens are seq_tokens[s] - 16 block[j] for the sequence's last
   * block (the active block: the caller made it current for that many tokens) and min(tokens[j], 16) for
   * any other (0: pending or unreadable, skipped). seq_tokens[s] = 0 gives an empty working set.
   * Errors (INVALID_ARGUMENT, nothing enqueued): a CSR field or block_mass set, table_slots / table_words out
   * of range, tables_offset not a multiple of 8 or slot_map_offset of 4, table_index, seq_tokens or
   * slot_map NULL, a seq_tokens entry past the tables' blocks, n_seqs * n_kv_heads * table_slots over
   * 2^32 - 1, a table or slot-map region (rows up to the largest table_index) outside its buffer or
   * overlapping out. */
  okv_hal_buffer_t *tables;    /* slot tables (DEVICE for speed), read */
  uint64_t tables_offset;      /* bytes, a multiple of 8 */
  uint32_t table_slots;        /* R per table, 1..OKV_SELECT_MAX_SLOTS */
  uint32_t table_words;        /* W per table, 1..OKV_SELECT_MAX_WORDS */
  okv_hal_buffer_t *slot_map;  /* u32 [tables][table_slots]: pool slot of each table entry, read */
  uint64_t slot_map_offset;    /* bytes, a multiple of 4 */
  const uint32_t *table_index; /* host [n_seqs]: table row of sequence s (copied at enqueue) */
  const uint32_t *seq_tokens;  /* host [n_seqs]: tokens of sequence s, 0 .. 64 * 16 * table_words (copied) */
} okv_attention_desc_t;

OKV_API okv_status_t okv_hal_attention_async(okv_hal_stream_t *stream, const okv_attention_desc_t *desc);

/* 2. Block key summaries (Quest-style min/max of keys; paper: "per-block key
 * summaries, kept resident").
 * Rebuild: for each listed block, summaries[summary_index] = elementwise
 * min/max over its first `valid` keys read from `kv` (slot layout, any tier the
 * backend can read: HOST or DEVICE), stored in summary_dtype (min rounded
 * toward -infinity, max toward +infinity when narrowed; f32 is exact). */
typedef struct okv_summary_desc_t {
  uint32_t head_dim;
  okv_dtype_t kv_dtype;
  okv_hal_buffer_t *kv;        /* blocks in slot layout; block i at byte i * okv_block_bytes() */
  okv_hal_buffer_t *summaries; /* summary_dtype [n][2][head_dim] */
  uint32_t n_blocks;
  const uint64_t *block_index;   /* [n_blocks] block within kv */
  const uint8_t *valid;          /* [n_blocks] valid tokens 1..16 */
  const uint64_t *summary_index; /* [n_blocks] summary within summaries */
  okv_dtype_t summary_dtype;     /* dtype of `summaries`; 0 = OKV_DTYPE_F32 */
} okv_summary_desc_t;

OKV_API okv_status_t okv_hal_summarize_blocks_async(okv_hal_stream_t *stream, const okv_summary_desc_t *desc);

/* Incremental update when one token is appended: for each i, in order,
 *   summaries[summary_index[i]] = first[i] ? (k_i, k_i) : (min(min, k_i), max(max, k_i))
 * with k_i = keys[i] rounded through kv_dtype (round to nearest even, as the
 * KV is stored), then narrowed to summary_dtype with directed rounding (min
 * toward -infinity, max toward +infinity). So an append-built summary equals
 * the rebuild of the stored block, bit for bit, in every summary dtype.
 * A summary index may repeat within one call (entries apply in order). */
typedef struct okv_summary_append_desc_t {
  okv_hal_buffer_t *summaries;   /* summary_dtype [*][2][head_dim] */
  uint32_t head_dim;             /* 1..256 */
  okv_dtype_t kv_dtype;          /* dtype the keys are stored in */
  uint32_t n;                    /* entries; 0 = no-op */
  const uint64_t *summary_index; /* [n] summary within summaries */
  const float *keys;             /* host f32 [n][head_dim] */
  const uint8_t *first;          /* [n] 1 = the block's first token (resets the summary) */
  okv_dtype_t summary_dtype;     /* dtype of `summaries`; 0 = OKV_DTYPE_F32 */
} okv_summary_append_desc_t;

/* Enqueues the append of `desc` on `stream`. Host arrays (summary_index, keys,
 * first) are copied before return; the summaries buffer is retained until the
 * kernel ran. Thread safety: like every enqueue on one stream (callers
 * serialise per stream).
 * Errors: INVALID_ARGUMENT naming the field (stream or desc NULL, head_dim not
 * in 1..256, a dtype out of range, summaries not a live buffer of the stream's
 * device, an array NULL with n > 0, a summary_index outside the buffer in
 * okv_summary_bytes_ex(summary_dtype, head_dim) units); UNAVAILABLE when the
 * backend has no append kernel for a narrowed summary_dtype; OUT_OF_MEMORY
 * for the host copies; the backend's launch error. Nothing is enqueued on
 * error. */
OKV_API okv_status_t okv_hal_summary_append_ex_async(okv_hal_stream_t *stream, const okv_summary_append_desc_t *desc);

/* The f32-summary append of okv_hal_summary_append_ex_async (summary_dtype
 * OKV_DTYPE_F32), kept for existing callers; same errors, naming this entry
 * point. */
OKV_API okv_status_t okv_hal_summary_append_async(okv_hal_stream_t *stream, okv_hal_buffer_t *summaries,
                                                  uint32_t head_dim, okv_dtype_t kv_dtype, uint32_t n,
                                                  const uint64_t *summary_index, const float *keys,
                                                  const uint8_t *first);

/* Group summaries (two-level scoring: a summary over a group of blocks, e.g.
 * 16 blocks = 256 tokens, bounds every key of the group). For each i < n:
 *   dst[dst_index[i]] = (min over j of src[src_first[i] + j].min,
 *                        max over j of src[src_first[i] + j].max),  j < src_n[i]
 * elementwise, read in src_dtype (exact widening) and stored in dst_dtype
 * (min toward -infinity, max toward +infinity when narrowed). src and dst may
 * be the same buffer, but a dst summary of one entry must not be a source of
 * another entry of the same call (entries may run in parallel; the result is
 * then unspecified, never out of bounds). With dst_dtype OKV_DTYPE_Q8 or
 * OKV_DTYPE_C4, dst holds that format (for C4, lane dst_index[i] % 16 of tile
 * dst_index[i] / 16; only that lane's bytes are written) and must be a
 * different buffer from src. */
typedef struct okv_summary_reduce_desc_t {
  uint32_t head_dim;         /* 1..256 */
  okv_hal_buffer_t *src;     /* src_dtype [*][2][head_dim] */
  okv_dtype_t src_dtype;     /* 0 = OKV_DTYPE_F32 */
  okv_hal_buffer_t *dst;     /* dst_dtype [*][2][head_dim] */
  okv_dtype_t dst_dtype;     /* 0 = OKV_DTYPE_F32 */
  uint32_t n;                /* entries; 0 = no-op */
  const uint64_t *src_first; /* [n] first source summary within src */
  const uint32_t *src_n;     /* [n] source summaries, >= 1 */
  const uint64_t *dst_index; /* [n] summary within dst */
} okv_summary_reduce_desc_t;

/* Enqueues the reduction of `desc` on `stream`; host arrays copied before
 * return, buffers retained until it ran. Thread safety: as other enqueues.
 * Errors: INVALID_ARGUMENT naming the field (stream or desc NULL, head_dim,
 * a dtype, src / dst not live buffers of the stream's device, an array NULL
 * with n > 0, src_n[i] == 0, a source range or dst_index outside its buffer,
 * computed without overflow); UNAVAILABLE when the backend lacks the kernel;
 * OUT_OF_MEMORY for the host copies; the backend's launch error. */
OKV_API okv_status_t okv_hal_summary_reduce_async(okv_hal_stream_t *stream, const okv_summary_reduce_desc_t *desc);

/* 3. Look-ahead block scoring (Quest upper bound; paper: "Predict").
 * Segments u = s * n_kv_heads + h. For every block b < seg_n_blocks[u]:
 *   score[u][b] = max over t in [t_begin, t_end), g < G of
 *                 sum_i max(q_i * min_i, q_i * max_i)
 * an upper bound of q . k for every key k of the block (scaled by 1/sqrt(head_dim)
 * like attention logits). Max over heads and tokens: a block any of the group's
 * heads may need is kept, which is what attention over the shared KV head needs.
 * Summaries are read in summary_dtype (widened exactly) and the sum is
 * accumulated in f32.
 * With summary_dtype OKV_DTYPE_Q8 (8-bit summaries, the first pass of q8
 * scoring) the score of a row is computed on codes: x_i = f32(q_i * f32(1/sqrt(head_dim))),
 * sigma = the least f32 >= max_i |x_i| / 127, c_i = ceil(x_i / sigma) in -127..127,
 *   score = lo * sum_i x_i + step * sigma * sum_i c_i * (x_i < 0 ? amin_i : amax_i)
 * (u8 x s8 dot products; the CPU backend uses AVX-512 VNNI when the CPU has it).
 * c_i * sigma >= x_i and the code box contains the summary's box, so this is
 * an upper bound of the Quest bound of the summary it encodes, up to f32
 * rounding of the final sum (about 1e-7 relative); it exceeds it by at most
 * step * (sum_i |x_i| + sigma * sum_i (amin_i + amax_i)). A block whose
 * step < 0 scores +infinity; an all-zero row scores lo * sum_i x_i. A row with a
 * non-finite element scores +infinity on every block.
 * With summary_dtype OKV_DTYPE_C4 (4-bit centres, the first pass of c4 scoring)
 * a row scores the estimate given at OKV_DTYPE_C4 (codes round(x_i / sigma),
 * sigma = f32(max_i |x_i| / 127); not a bound), the block's score is the max
 * over rows, and a row with a non-finite element scores +infinity.
 * Ranges (two-level scoring: score group summaries first, then only the blocks
 * of the best groups): with n_ranges > 0, the per-segment arrays are ignored
 * (may be NULL) and, for each range r, blocks i < range_n_blocks[r] are scored
 * with the queries of segment u = range_seg[r] (same s, h, G, t_begin..t_end
 * as above): summary range_summary_first[r] + i into score element
 * range_score_first[r] + i. Ranges may repeat segments, in any order.
 * Candidate lists (q8's second pass without a host round trip): with
 * list_blocks != NULL (exclusive with n_ranges), segment u scores the blocks
 *   b_i = list_blocks[list_offset / 4 + u * list_stride + i], i < seg_n_blocks[u]
 * read on the device (a DEVICE u32 buffer, e.g. a top-K's out_indices), into
 * score element seg_score_first[u] + i. Block b's summary is found through the
 * segment's runs r in [seg_run_offsets[u], seg_run_offsets[u + 1]) (host CSR,
 * copied at enqueue): run_first_block[r] <= b < run_first_block[r] +
 * run_n_blocks[r] gives summary run_summary_first[r] + (b - run_first_block[r]).
 * A list entry in no run of its segment (UINT32_MAX, say) scores -infinity.
 * seg_summary_first is ignored there (may be NULL). Every run's summaries must
 * lie within `summaries`; a segment's runs are in ascending block order and do
 * not overlap. */
typedef struct okv_score_desc_t {
  uint32_t n_seqs, n_kv_heads, group_size, head_dim;
  uint32_t n_query_tokens; /* T of the q layout */
  uint32_t t_begin, t_end; /* query tokens used, 0 <= t_begin < t_end <= T */
  okv_hal_buffer_t *q;
  uint64_t q_offset;                   /* f32 [n_seqs][T][n_q_heads][head_dim] */
  okv_hal_buffer_t *summaries;         /* summary_dtype [*][2][head_dim] */
  const uint64_t *seg_summary_first;   /* [n_seqs*n_kv_heads] index of block 0's summary; blocks contiguous */
  const uint32_t *seg_n_blocks;        /* [n_seqs*n_kv_heads] */
  okv_hal_buffer_t *scores;            /* f32 */
  const uint64_t *seg_score_first;     /* [n_seqs*n_kv_heads] element index of score[u][0] */
  okv_dtype_t summary_dtype;           /* dtype of `summaries`; 0 = OKV_DTYPE_F32 */
  uint32_t n_ranges;                   /* 0 = score per segment (the seg_* arrays) */
  const uint32_t *range_seg;           /* [n_ranges] segment u < n_seqs*n_kv_heads */
  const uint64_t *range_summary_first; /* [n_ranges] first summary of the range */
  const uint32_t *range_n_blocks;      /* [n_ranges] blocks (summaries) of the range; 0 allowed */
  const uint64_t *range_score_first;   /* [n_ranges] score element of the range's first block */
  okv_hal_buffer_t *list_blocks;       /* optional DEVICE u32 candidate lists, NULL = none */
  uint64_t list_offset;                /* bytes, a multiple of 4 */
  uint32_t list_stride;                /* entries per segment's list, >= every seg_n_blocks[u] */
  const uint32_t *seg_run_offsets;     /* [n_seqs*n_kv_heads + 1] CSR of the runs (list mode) */
  const uint32_t *run_first_block;     /* [runs] first logical block of the run */
  const uint32_t *run_n_blocks;        /* [runs] blocks of the run */
  const uint64_t *run_summary_first;   /* [runs] summary of the run's first block */
} okv_score_desc_t;

/* Enqueues the scoring of `desc` on `stream`; host arrays (seg_*, range_*,
 * seg_run_offsets and run_*) are copied before return, buffers retained until it ran. Thread safety: as
 * other enqueues. Errors: INVALID_ARGUMENT naming the field (shape, t range,
 * summary_dtype, q / summaries / scores not live buffers of the device or q
 * too small, a segment's or range's summaries or scores outside their buffers
 * (summaries counted in okv_summary_bytes_ex(summary_dtype, head_dim) units),
 * range_seg[r] >= n_seqs*n_kv_heads, an array NULL, sizes overflowing; list
 * mode: list_blocks with n_ranges, list_blocks not a live buffer of the device
 * or too small for n_seqs*n_kv_heads*list_stride entries from an aligned
 * list_offset, or overlapping the scores it writes, seg_n_blocks[u] > list_stride, seg_run_offsets not a CSR, a
 * run's summaries outside `summaries`, runs of a segment out of order or
 * overlapping); OUT_OF_MEMORY for the copies; the backend's launch error.
 * Source: the look-ahead scoring of arXiv 2608.08097 ("Predict"); candidate
 * lists are this runtime's (docs/kernels.md "8-bit summaries"). */
OKV_API okv_status_t okv_hal_score_blocks_async(okv_hal_stream_t *stream, const okv_score_desc_t *desc);

/* 4. Top-K per segment: the k highest scores' block indices in descending
 * score order, ties broken by lower block index; blocks listed in the
 * segment's exclude set are skipped. out_indices[u][0..count_u) are valid,
 * count_u = min(k, n_u - excluded_u); the rest is UINT32_MAX.
 * k in 1..512 (OKV_TOPK_MAX), n_u up to 65,536 blocks. NaN scores are treated
 * as -infinity.
 * Index map (top-K over a candidate list): with index_map != NULL, the output
 * for position pos of segment u is index_map[seg_score_first[u] + pos] instead
 * of pos (a block id, say); ranking, tie-breaking (lower pos first) and the
 * exclude set (positions) are unchanged. index_map is a host array addressed
 * like the scores, of at least max over segments with seg_n > 0 of
 * seg_score_first[u] + seg_n[u] entries; that prefix is copied at enqueue.
 * index_map_buffer is the same map read on the device instead (a DEVICE u32
 * buffer from byte index_map_offset, e.g. an earlier top-K's out_indices;
 * exclusive with index_map), so that a second top-K over candidates chosen
 * by a first one needs no host round trip.
 * Ascending (with `ascending`): out_indices[u][0..count_u) hold the same set
 * in ascending position order (the candidate list of a second scoring pass,
 * whose top-K then breaks ties towards the lower block as flat scoring does). */
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
  uint64_t counts_offset;             /* optional u32 [n_segments] */
  const uint32_t *index_map;          /* optional host u32 [max_u seg_score_first[u] + seg_n[u]], NULL = positions */
  okv_hal_buffer_t *index_map_buffer; /* optional DEVICE u32 map addressed like index_map, NULL = none */
  uint64_t index_map_offset;          /* bytes, a multiple of 4 */
  bool ascending;                     /* out_indices in ascending position order instead of by score */
} okv_topk_desc_t;

/* Enqueues the top-K of `desc` on `stream`; host arrays (seg_*, excl_*,
 * index_map) are copied before return, buffers retained until it ran. Thread
 * safety: as other enqueues. Errors: INVALID_ARGUMENT naming the field
 * (n_segments 0, k not in 1..512, a segment over 65,536 blocks or outside the
 * scores, exclude CSR not monotone or an excluded position >= seg_n, outputs
 * outside their buffers, index_map and index_map_buffer both given, or
 * index_map_buffer not a live buffer of the device, shorter than the map
 * from an aligned index_map_offset, or overlapping out_indices / out_counts); OUT_OF_MEMORY for the copies; the
 * backend's launch error. */
OKV_API okv_status_t okv_hal_topk_async(okv_hal_stream_t *stream, const okv_topk_desc_t *desc);

/* 5. Token writes into slots: the new token's K and V written where attention
 * reads them, without moving the rest of the block (a real engine produces a
 * decoded token's K/V on the device; the runtime writes the active block's slot
 * this way instead of copying the whole block from the HOST tier). For each
 * entry i < n, for d < head_dim:
 *   Kt[d][pos[i]] = keys[i][d] and V[pos[i]][d] = values[i][d]
 * of slot slot_index[i] of kv, converted to kv_dtype (round to nearest even,
 * quiet NaN: the values of okv_f32_to_bf16 / okv_f32_to_f16; f32 is exact).
 * So a position so written holds the same bytes as the runtime's HOST-tier copy
 * of the token. Other positions and slots are not touched. When a
 * (slot_index, pos) pair repeats within one call, which entry's values land
 * there is unspecified (entries may run in parallel); never out of bounds. */
typedef struct okv_kv_write_desc_t {
  okv_hal_buffer_t *kv;       /* slots in slot layout, slot i at byte i * okv_block_bytes(kv_dtype, head_dim) */
  uint32_t head_dim;          /* 1..256 */
  okv_dtype_t kv_dtype;       /* dtype of the slots */
  uint32_t n;                 /* entries (tokens); 0 = no-op */
  const uint64_t *slot_index; /* [n] slot within kv */
  const uint8_t *pos;         /* [n] token position within the slot, 0..15 */
  const float *keys;          /* host f32 [n][head_dim] */
  const float *values;        /* host f32 [n][head_dim] */
} okv_kv_write_desc_t;

/* Enqueues the writes of `desc` on `stream`. Host arrays (slot_index, pos,
 * keys, values) are copied (on GPUs converted to kv_dtype and uploaded with
 * the launch's arguments: 2 * head_dim * okv_dtype_size(kv_dtype) bytes per
 * entry) before return; kv is retained until the kernel ran. Not a copy: the
 * cpu backend's emulated link does not pace it. Thread safety: like every
 * enqueue on one stream (callers serialise per stream).
 * Errors: INVALID_ARGUMENT naming the field (stream or desc NULL, head_dim not
 * in 1..256, kv_dtype out of range, kv not a live buffer of the stream's
 * device, an array NULL with n > 0, slot_index[i] outside kv in
 * okv_block_bytes(kv_dtype, head_dim) units, pos[i] > 15); UNAVAILABLE when
 * the backend has no token-write kernel; OUT_OF_MEMORY for the host copies;
 * the backend's launch error. Nothing is enqueued on error; an asynchronous
 * failure (a kernel that did not run) is reported by the stream's next event
 * or synchronize, and the slots' written positions are then unspecified. */
OKV_API okv_status_t okv_hal_kv_write_tokens_async(okv_hal_stream_t *stream, const okv_kv_write_desc_t *desc);

/* 6. Selection on the device (arXiv 2608.08097, "Select" and "Memory"): the
 * head-wise map kept in DEVICE memory as one slot table per KV head, and the
 * delta selection with capped eviction run against it, so that the host does
 * no per-head work (docs/architecture.md "Host bookkeeping per KV head").
 *
 * Slot table of one KV head with R slots and W 64-bit bitmap words (blocks
 * 0 .. 64 W - 1), okv_slot_table_bytes(R, W) bytes, 8-byte aligned, u32 words:
 *   block[R]   logical block held by slot j, OKV_SLOT_FREE for a free slot
 *   last[R]    step block[j] was last selected (the LRU key of capped eviction)
 *   tokens[R]  tokens of block[j] current in the slot, 0 = unreadable (the
 *              write-currency contract of docs/api.md "Faults")
 *   scratch[R] the kernel's own (candidate list); any value between calls
 *   then u64 words (16 R bytes in, so 8-byte aligned):
 *   resident[W] bit b set iff block b is committed in some slot
 *   predicted[W] the kernel's scratch, all zero between calls
 * An empty table: every block[j] = OKV_SLOT_FREE, every other byte 0. The
 * host may write a table (a prefill, a repair) under these rules: a slot
 * whose block is not FREE has that block's resident bit set, no block sits in
 * two slots, predicted is zero. */
#define OKV_SLOT_FREE          UINT32_MAX
#define OKV_SELECT_MAX_SLOTS   4096u
#define OKV_SELECT_MAX_WORDS   65536u /* 4,194,304 blocks (64M tokens) per head */
#define OKV_SELECT_RESULT_U32S 6u     /* n_admitted, n_hits, n_misses, n_victims, signature (lo, hi) */
#define OKV_SELECT_PLAN_U32S   4u     /* block, slot, victim, victim_slot */

#if defined(__CUDACC__) || defined(__HIPCC__)
#define OKV_HOST_DEVICE __host__ __device__
#else
#define OKV_HOST_DEVICE
#endif

/* Signature of a slot table: the sum modulo 2^64 of okv_slot_table_sig_term(j, block[j]) over its committed
 * slots (block[j] not OKV_SLOT_FREE and block[j]'s resident bit set; pending admissions do not count). The
 * selection reports the signature of the table it read, so that a caller that keeps its own (from the tables
 * it wrote and the plans it committed: + term(slot, block), - term(victim_slot, victim) per landed entry)
 * finds a table that changed behind its back before a plan drives a copy. A term mixes (j, block) with the
 * SplitMix64 finalizer (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", 2014), so that
 * moved, swapped or rewritten entries change the sum with probability about 1 - 2^-64. Pure; any thread. */
static inline OKV_HOST_DEVICE uint64_t okv_slot_table_sig_term(uint32_t slot, uint32_t block) {
  uint64_t z = ((uint64_t)slot << 32 | block) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Bytes of one slot table (layout above); 0 when R or W is 0 or over the limits. */
static inline uint64_t okv_slot_table_bytes(uint32_t n_slots, uint32_t bitmap_words) {
  if (n_slots == 0 || n_slots > OKV_SELECT_MAX_SLOTS || bitmap_words == 0 || bitmap_words > OKV_SELECT_MAX_WORDS)
    return 0;
  return (uint64_t)n_slots * 16u + (uint64_t)bitmap_words * 16u;
}

/* Selection of one step for n_heads KV heads, head h using the table at byte
 * table_offset + h * okv_slot_table_bytes(n_slots, bitmap_words) of `table`:
 *  1. The prediction: predicted[h][0 .. n_h), n_h = min(predicted_counts[h],
 *     predicted_stride), in descending score order (a top-K's out_indices and
 *     out_counts). Entries >= 64 W, equal to active_block[h] or repeated are
 *     ignored (a kernel cannot refuse its input). Hits (predicted and
 *     resident) get last = step; misses are the rest, in predicted order.
 *  2. Victims: resident slots whose block is not predicted and not
 *     active_block[h], least recently selected first (ties: lower block).
 *  3. Admissions: at most min(misses, cap[h], free slots). While the head
 *     holds fewer than budget_blocks blocks besides the active block, an
 *     admission takes free room (victim OKV_SLOT_FREE); the others each evict
 *     one victim, so admissions also stop when room and victims run out. The
 *     first misses are admitted, each into the lowest free slot: block[slot] =
 *     the block, last = step, tokens = 0 (pending). Victims keep their slots
 *     until the commit, so a table needs R >= budget_blocks + 1 + cap slots
 *     for every admission to find a free one.
 *  Plan entry e < n_adm of head h at plan[h][e] (OKV_SELECT_PLAN_U32S u32s):
 *  {block, slot, victim, victim_slot} (victim and victim_slot OKV_SLOT_FREE
 *  for free room); the victims stay resident until the commit. Result of head h
 *  at result[h] (OKV_SELECT_RESULT_U32S u32s): {n_adm, hits, misses, victims,
 *  sig_lo, sig_hi} with misses counting every valid predicted block not
 *  resident (admitted or deferred), victims the admissions that evict (n_adm
 *  minus those taking free room) and sig the table's signature as the
 *  selection found it (okv_slot_table_sig_term; before its admissions, which
 *  are pending and do not count).
 * The same rule as the host's selection, so a step selects the same blocks and
 * victims either way (test_select_against_host in tests/kernels/test_kernels_hal.c
 * compares them step by step). */
typedef struct okv_select_desc_t {
  uint32_t n_heads;                   /* 1.. */
  uint32_t n_slots;                   /* R per head, 1..OKV_SELECT_MAX_SLOTS */
  uint32_t bitmap_words;              /* W per head, 1..OKV_SELECT_MAX_WORDS */
  uint32_t budget_blocks;             /* K: blocks held besides the active block before admissions evict */
  uint32_t step;                      /* stamped on hits and admissions */
  okv_hal_buffer_t *table;            /* slot tables (DEVICE for speed), read and written */
  uint64_t table_offset;              /* bytes, a multiple of 8 */
  okv_hal_buffer_t *predicted;        /* DEVICE u32 [n_heads][predicted_stride] */
  uint64_t predicted_offset;          /* bytes, a multiple of 4 */
  uint32_t predicted_stride;          /* entries per head, 1..OKV_TOPK_MAX */
  okv_hal_buffer_t *predicted_counts; /* DEVICE u32 [n_heads] */
  uint64_t counts_offset;             /* bytes, a multiple of 4 */
  const uint32_t *active_block;       /* host [n_heads]: never a victim, never admitted; OKV_SLOT_FREE = none */
  const uint32_t *cap;                /* host [n_heads]: admissions allowed this step (C) */
  uint32_t plan_stride;               /* plan entries per head, 1..OKV_SELECT_MAX_SLOTS, >= every cap[h] */
  okv_hal_buffer_t *plan;             /* DEVICE u32 [n_heads][plan_stride][OKV_SELECT_PLAN_U32S], written */
  uint64_t plan_offset;               /* bytes, a multiple of 4 */
  okv_hal_buffer_t *result;           /* DEVICE u32 [n_heads][OKV_SELECT_RESULT_U32S], written */
  uint64_t result_offset;             /* bytes, a multiple of 4 */
} okv_select_desc_t;

/* Enqueues the selection of `desc` on `stream`; host arrays (active_block,
 * cap) are copied before return, buffers retained until it ran. Thread
 * safety: as other enqueues; one selection or commit per table at a time
 * (stream order). Run okv_hal_slot_commit_async on the plan before the next
 * selection of the same tables. Errors: INVALID_ARGUMENT naming the field
 * (stream or desc NULL, n_heads 0, n_slots / bitmap_words / predicted_stride /
 * plan_stride out of range, a cap[h] over plan_stride, a host array NULL, a
 * buffer not a live buffer of the stream's device (any tier: DEVICE is where
 * it is fast), an offset not aligned, a region outside its buffer, the plan
 * or result overlapping the tables, each other or the prediction and its
 * counts, the tables overlapping the prediction); UNAVAILABLE
 * when the backend has no selection kernel; OUT_OF_MEMORY for the host
 * copies; the backend's launch error. */
OKV_API okv_status_t okv_hal_select_async(okv_hal_stream_t *stream, const okv_select_desc_t *desc);

/* Commit of a selection's plan once its transfers ran (the layer-local sync),
 * head h using the same table, plan and result as the selection: with
 * landed[h] != 0 every admitted block becomes resident (tokens =
 * OKV_BLOCK_TOKENS, its resident bit set) and every victim leaves (its slot
 * freed, last and tokens 0, its bit cleared); with landed[h] == 0 (the
 * transfer failed) the admissions are undone (their slots freed) and the
 * victims stay. Entries are read from result[h][0] (n_adm, at most
 * plan_stride). A plan is committed once: an entry whose slot no longer
 * holds its block (undone already), an undo of an entry already committed
 * (its block's resident bit set), a slot >= n_slots or a block >= 64 W change
 * nothing, and a victim is freed only while its slot still holds it. */
typedef struct okv_slot_commit_desc_t {
  uint32_t n_heads, n_slots, bitmap_words; /* as the selection's (ranges as there) */
  okv_hal_buffer_t *table;                 /* the selection's slot tables, read and written */
  uint64_t table_offset;                   /* bytes, a multiple of 8 */
  uint32_t plan_stride;                    /* as the selection's */
  okv_hal_buffer_t *plan;                  /* u32 [n_heads][plan_stride][OKV_SELECT_PLAN_U32S], read */
  uint64_t plan_offset;                    /* bytes, a multiple of 4 */
  okv_hal_buffer_t *result;                /* u32 [n_heads][OKV_SELECT_RESULT_U32S], read (n_adm) */
  uint64_t result_offset;                  /* bytes, a multiple of 4 */
  const uint8_t *landed;                   /* host [n_heads]: 1 = the head's transfer ran, 0 = it failed */
} okv_slot_commit_desc_t;

/* Enqueues the commit of `desc` on `stream`; `landed` is copied before
 * return, buffers retained until it ran. Thread safety and errors: as
 * okv_hal_select_async's (its fields; landed NULL; the plan or result
 * overlapping the tables). */
OKV_API okv_status_t okv_hal_slot_commit_async(okv_hal_stream_t *stream, const okv_slot_commit_desc_t *desc);

#ifdef __cplusplus
}
#endif
#endif /* OASISKV_KERNELS_H */
