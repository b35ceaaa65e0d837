/* Argument structs of the GPU kernels in kernels/okv_kernels.cu, shared by the
 * kernel source (CUDA or HIP C++) and the host backends (C11). Each kernel takes
 * one struct by value, so the host passes a single pointer in the launch's
 * argument array. Device addresses are uint64_t (CUdeviceptr / hipDeviceptr_t
 * values, or the device-mapped address of pinned host memory); 0 = absent.
 * Plain fixed-width fields only, so C and C++ lay the structs out identically;
 * OKV_GPU_ARGS_LAYOUT below pins that layout on both sides.
 *
 * The constants host and kernels share come from here or from the public
 * headers this one includes, never from a copy: the block size
 * (OKV_BLOCK_TOKENS), the dtype codes (okv_dtype_t), the top-K limit
 * (OKV_TOPK_MAX) and a block-copy pair (okv_block_copy_t) are those of
 * include/oasiskv/kernels.h and hal.h. Not installed. */
#ifndef OASISKV_GPU_ARGS_H
#define OASISKV_GPU_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "oasiskv/kernels.h"

/* Threads per block of each kernel: the host launch and the kernel agree. */
#define OKV_GPU_GATHER_THREADS    256u
#define OKV_GPU_ATTENTION_THREADS 128u
#define OKV_GPU_MASS_THREADS      128u
#define OKV_GPU_SUMMARY_THREADS   128u
#define OKV_GPU_SCORE_THREADS     128u
#define OKV_GPU_TOPK_THREADS      512u
#define OKV_GPU_SELECT_THREADS    64u /* one thread per KV head (kernels/okv_select_rule.h) */
/* Blocks scored per thread block by okv_gpu_score_blocks (grid.y chunks). */
#define OKV_GPU_SCORE_BLOCKS_PER_CTA 64u
#define OKV_GPU_SCORE_ROWS           16u /* c4 / q8 query rows quantized once per CTA (more: per block) */
/* Largest query-row tile of one attention thread block. */
#define OKV_GPU_ATTENTION_MAX_ROWS 32u

/* Dynamic shared memory of okv_gpu_attention, in floats, for a tile of R query
 * rows at head dimension D: TILE(D) + R * ROW(D), carved by the kernel as
 * qs[R*D] acc[R*D] ks[BT*D] vs[BT*D] p[R*BT] m[R] l[R] sc[R] with
 * BT = OKV_BLOCK_TOKENS. */
#define OKV_GPU_ATTENTION_SMEM_TILE_FLOATS(D) (2ull * OKV_BLOCK_TOKENS * (uint64_t)(D))
#define OKV_GPU_ATTENTION_SMEM_ROW_FLOATS(D)  (2ull * (uint64_t)(D) + OKV_BLOCK_TOKENS + 3u)

/* Static shared memory of okv_gpu_topk (histogram, selection, warp totals,
 * scalars), with slack; the host leaves it out of the dynamic budget. */
#define OKV_GPU_TOPK_STATIC_SMEM_BYTES 6144u

/* okv_gpu_gather_blocks: dst[pairs[i].dst_offset ..+block_bytes) =
 * src[pairs[i].src_offset ..+block_bytes) for i < n_blocks. */
typedef struct okv_gpu_gather_args_t {
  uint64_t src, dst; /* base device addresses */
  uint64_t pairs;    /* okv_block_copy_t[n_blocks] in device memory */
  uint64_t n_blocks;
  uint64_t block_bytes;
  uint32_t vec_bytes; /* 16, 8, 4 or 1: every offset and block_bytes is a multiple */
  uint32_t pad_;
} okv_gpu_gather_args_t;

/* okv_gpu_attention and okv_gpu_attention_mass (include/oasiskv/kernels.h #1).
 * Grid of okv_gpu_attention: (n_seqs*n_kv_heads, ceil(T*G / rows_per_cta)).
 * Grid of okv_gpu_attention_mass: (n_seqs*n_kv_heads, T). */
typedef struct okv_gpu_attention_args_t {
  uint64_t kv_pool;     /* slot 0 */
  uint64_t block_bytes; /* okv_block_bytes(kv_dtype, head_dim) */
  uint64_t ws_offsets;  /* u32 [n_seqs*n_kv_heads + 1] */
  uint64_t ws_slots;    /* u32 [ws_offsets[last]] */
  uint64_t ws_valid;    /* u8  [ws_offsets[last]] */
  uint64_t q;           /* f32 [n_seqs][T][n_q_heads][head_dim] */
  uint64_t inflight_kv; /* f32 [n_seqs][n_inflight][2][n_kv_heads][head_dim] or 0 */
  uint64_t out;         /* f32 like q */
  uint64_t lse;         /* f32 [n_seqs][T][n_q_heads] scratch: log-sum-exp per row, or 0 */
  uint64_t block_mass;  /* f32 [ws_offsets[last]][T] or 0 */
  uint32_t n_seqs, n_kv_heads, group_size, head_dim;
  uint32_t n_query_tokens, kv_dtype, n_inflight, rows_per_cta;
  float scale;          /* 1 / sqrt(head_dim) */
  uint32_t table_slots; /* table mode (tables != 0): R per table; the ws_* fields are then 0 */
  uint64_t tables;      /* slot tables of table row 0 (okv_slot_table_bytes(R, W) each), or 0 */
  uint64_t slot_map;    /* u32 [tables][R]: pool slot of each entry */
  uint64_t table_index; /* u32 [n_seqs]: table row of sequence s */
  uint64_t seq_tokens;  /* u32 [n_seqs]: tokens of sequence s */
  uint64_t table_bytes; /* okv_slot_table_bytes(R, W) */
  uint64_t n_slots;     /* slots in kv_pool */
} okv_gpu_attention_args_t;

/* okv_gpu_summarize_blocks: grid n_blocks. */
typedef struct okv_gpu_summary_args_t {
  uint64_t kv; /* block 0 of the source, slot layout */
  uint64_t block_bytes;
  uint64_t summaries;     /* summary_dtype [*][2][head_dim] */
  uint64_t block_index;   /* u64 [n_blocks] */
  uint64_t valid;         /* u8  [n_blocks] */
  uint64_t summary_index; /* u64 [n_blocks] */
  uint32_t n_blocks, head_dim, kv_dtype, summary_dtype;
} okv_gpu_summary_args_t;

/* okv_gpu_summary_append: grid-stride over entries i < n (grid 1 = strictly in order). */
typedef struct okv_gpu_append_args_t {
  uint64_t summaries;     /* summary_dtype [*][2][head_dim] */
  uint64_t summary_index; /* u64 [n] */
  uint64_t keys;          /* f32 [n][head_dim], already rounded through the KV dtype */
  uint64_t first;         /* u8 [n] */
  uint32_t n, head_dim;
  uint32_t summary_dtype, pad_;
} okv_gpu_append_args_t;

/* okv_gpu_kv_write: grid-stride over entries i < n, threads over the 2 * head_dim elements (K then V). */
typedef struct okv_gpu_kv_write_args_t {
  uint64_t kv;          /* slot 0, slot layout */
  uint64_t block_bytes; /* okv_block_bytes(kv_dtype, head_dim) */
  uint64_t slot_index;  /* u64 [n] */
  uint64_t pos;         /* u8 [n], 0..15 */
  uint64_t elems;       /* [n][2][head_dim] K then V, already in the KV dtype (elem_bytes each) */
  uint32_t n, head_dim;
  uint32_t elem_bytes, pad_; /* 4 (f32) or 2 (f16, bf16) */
} okv_gpu_kv_write_args_t;

/* okv_gpu_select / okv_gpu_slot_commit: grid-stride over heads, one thread per head. */
typedef struct okv_gpu_select_args_t {
  uint64_t tables;      /* head 0's slot table */
  uint64_t table_bytes; /* okv_slot_table_bytes(n_slots, bitmap_words) */
  uint64_t predicted;   /* u32 [n_heads][predicted_stride] */
  uint64_t counts;      /* u32 [n_heads] */
  uint64_t head_params; /* u32 [n_heads][2]: active block, cap (uploaded) */
  uint64_t plan;        /* u32 [n_heads][plan_stride][OKV_SELECT_PLAN_U32S] */
  uint64_t result;      /* u32 [n_heads][OKV_SELECT_RESULT_U32S] */
  uint32_t n_heads, n_slots, bitmap_words, budget_blocks;
  uint32_t step, predicted_stride, plan_stride, pad_;
} okv_gpu_select_args_t;

typedef struct okv_gpu_slot_commit_args_t {
  uint64_t tables, table_bytes, plan, result; /* as okv_gpu_select_args_t's */
  uint64_t landed;                            /* u8 [n_heads] (uploaded) */
  uint32_t n_heads, n_slots, bitmap_words, plan_stride;
} okv_gpu_slot_commit_args_t;

/* okv_gpu_summary_reduce: grid-stride over entries i < n, threads over head_dim. */
typedef struct okv_gpu_reduce_args_t {
  uint64_t src;       /* src_dtype [*][2][head_dim] */
  uint64_t dst;       /* dst_dtype [*][2][head_dim] */
  uint64_t src_first; /* u64 [n] */
  uint64_t src_n;     /* u32 [n], each >= 1 */
  uint64_t dst_index; /* u64 [n] */
  uint32_t n, head_dim, src_dtype, dst_dtype;
} okv_gpu_reduce_args_t;

/* okv_gpu_score_blocks: grid (n_seqs*n_kv_heads, or n_ranges when > 0,
 * ceil(max_n / OKV_GPU_SCORE_BLOCKS_PER_CTA)). */
typedef struct okv_gpu_score_args_t {
  uint64_t q;                 /* f32 [n_seqs][T][n_q_heads][head_dim] */
  uint64_t summaries;         /* summary_dtype [*][2][head_dim] */
  uint64_t scores;            /* f32 */
  uint64_t seg_summary_first; /* u64 [n_seqs*n_kv_heads] */
  uint64_t seg_n_blocks;      /* u32 [n_seqs*n_kv_heads] */
  uint64_t seg_score_first;   /* u64 [n_seqs*n_kv_heads] */
  uint32_t n_seqs, n_kv_heads, group_size, head_dim;
  uint32_t n_query_tokens, t_begin, t_end;
  float scale;
  uint64_t range_seg;           /* u32 [n_ranges] or 0 */
  uint64_t range_summary_first; /* u64 [n_ranges] */
  uint64_t range_n_blocks;      /* u32 [n_ranges] */
  uint64_t range_score_first;   /* u64 [n_ranges] */
  uint32_t n_ranges, summary_dtype;
  uint64_t list_blocks;       /* u32 [segments][list_stride] candidate lists (list mode), or 0 */
  uint64_t seg_run_offsets;   /* u32 [segments + 1] CSR of the runs (list mode) */
  uint64_t run_first_block;   /* u32 [runs] */
  uint64_t run_n_blocks;      /* u32 [runs] */
  uint64_t run_summary_first; /* u64 [runs] */
  uint32_t list_stride, pad0;
} okv_gpu_score_args_t;

/* okv_gpu_topk: grid n_segments; dynamic shared memory = 4 * ceil(max_n / 32) bytes. */
typedef struct okv_gpu_topk_args_t {
  uint64_t scores;          /* f32 */
  uint64_t seg_score_first; /* u64 [n_segments] */
  uint64_t seg_n;           /* u32 [n_segments] */
  uint64_t excl_offsets;    /* u32 [n_segments + 1] or 0 */
  uint64_t excl_blocks;     /* u32 */
  uint64_t out_indices;     /* u32 [n_segments][k] */
  uint64_t out_counts;      /* u32 [n_segments] or 0 */
  uint32_t n_segments, k;
  uint64_t index_map; /* u32 addressed like the scores, or 0 (positions) */
  uint32_t ascending; /* 1: indices in ascending position order */
  uint32_t pad0;
} okv_gpu_topk_args_t;

/* ---- Layout pins ----
 * Host (C11) and kernels (CUDA / HIP C++, and the CPU emulator) compile these
 * structs separately and must agree byte for byte. The expected size and
 * field offsets are written once, here; backends/gpu/gpu_launch.c and
 * kernels/okv_kernels.cu both expand the table as static assertions
 * (OKV_GPU_ARGS_PIN_LAYOUT below), so a field added, moved or retyped on one
 * side, or a compiler laying a struct out differently, fails the build
 * instead of corrupting a launch.
 * OKV_GPU_ARGS_LAYOUT(SIZE, FIELD): SIZE(type, bytes), FIELD(type, field, offset). */
#define OKV_GPU_ARGS_LAYOUT(SIZE, FIELD)               \
  SIZE(okv_block_copy_t, 16)                           \
  FIELD(okv_block_copy_t, src_offset, 0)               \
  FIELD(okv_block_copy_t, dst_offset, 8)               \
  SIZE(okv_gpu_gather_args_t, 48)                      \
  FIELD(okv_gpu_gather_args_t, src, 0)                 \
  FIELD(okv_gpu_gather_args_t, dst, 8)                 \
  FIELD(okv_gpu_gather_args_t, pairs, 16)              \
  FIELD(okv_gpu_gather_args_t, n_blocks, 24)           \
  FIELD(okv_gpu_gather_args_t, block_bytes, 32)        \
  FIELD(okv_gpu_gather_args_t, vec_bytes, 40)          \
  SIZE(okv_gpu_attention_args_t, 168)                  \
  FIELD(okv_gpu_attention_args_t, kv_pool, 0)          \
  FIELD(okv_gpu_attention_args_t, block_bytes, 8)      \
  FIELD(okv_gpu_attention_args_t, ws_offsets, 16)      \
  FIELD(okv_gpu_attention_args_t, ws_slots, 24)        \
  FIELD(okv_gpu_attention_args_t, ws_valid, 32)        \
  FIELD(okv_gpu_attention_args_t, q, 40)               \
  FIELD(okv_gpu_attention_args_t, inflight_kv, 48)     \
  FIELD(okv_gpu_attention_args_t, out, 56)             \
  FIELD(okv_gpu_attention_args_t, lse, 64)             \
  FIELD(okv_gpu_attention_args_t, block_mass, 72)      \
  FIELD(okv_gpu_attention_args_t, n_seqs, 80)          \
  FIELD(okv_gpu_attention_args_t, n_kv_heads, 84)      \
  FIELD(okv_gpu_attention_args_t, group_size, 88)      \
  FIELD(okv_gpu_attention_args_t, head_dim, 92)        \
  FIELD(okv_gpu_attention_args_t, n_query_tokens, 96)  \
  FIELD(okv_gpu_attention_args_t, kv_dtype, 100)       \
  FIELD(okv_gpu_attention_args_t, n_inflight, 104)     \
  FIELD(okv_gpu_attention_args_t, rows_per_cta, 108)   \
  FIELD(okv_gpu_attention_args_t, scale, 112)          \
  FIELD(okv_gpu_attention_args_t, table_slots, 116)    \
  FIELD(okv_gpu_attention_args_t, tables, 120)         \
  FIELD(okv_gpu_attention_args_t, slot_map, 128)       \
  FIELD(okv_gpu_attention_args_t, table_index, 136)    \
  FIELD(okv_gpu_attention_args_t, seq_tokens, 144)     \
  FIELD(okv_gpu_attention_args_t, table_bytes, 152)    \
  FIELD(okv_gpu_attention_args_t, n_slots, 160)        \
  SIZE(okv_gpu_summary_args_t, 64)                     \
  FIELD(okv_gpu_summary_args_t, kv, 0)                 \
  FIELD(okv_gpu_summary_args_t, block_bytes, 8)        \
  FIELD(okv_gpu_summary_args_t, summaries, 16)         \
  FIELD(okv_gpu_summary_args_t, block_index, 24)       \
  FIELD(okv_gpu_summary_args_t, valid, 32)             \
  FIELD(okv_gpu_summary_args_t, summary_index, 40)     \
  FIELD(okv_gpu_summary_args_t, n_blocks, 48)          \
  FIELD(okv_gpu_summary_args_t, head_dim, 52)          \
  FIELD(okv_gpu_summary_args_t, kv_dtype, 56)          \
  FIELD(okv_gpu_summary_args_t, summary_dtype, 60)     \
  SIZE(okv_gpu_append_args_t, 48)                      \
  FIELD(okv_gpu_append_args_t, summaries, 0)           \
  FIELD(okv_gpu_append_args_t, summary_index, 8)       \
  FIELD(okv_gpu_append_args_t, keys, 16)               \
  FIELD(okv_gpu_append_args_t, first, 24)              \
  FIELD(okv_gpu_append_args_t, n, 32)                  \
  FIELD(okv_gpu_append_args_t, head_dim, 36)           \
  FIELD(okv_gpu_append_args_t, summary_dtype, 40)      \
  SIZE(okv_gpu_kv_write_args_t, 56)                    \
  FIELD(okv_gpu_kv_write_args_t, kv, 0)                \
  FIELD(okv_gpu_kv_write_args_t, block_bytes, 8)       \
  FIELD(okv_gpu_kv_write_args_t, slot_index, 16)       \
  FIELD(okv_gpu_kv_write_args_t, pos, 24)              \
  FIELD(okv_gpu_kv_write_args_t, elems, 32)            \
  FIELD(okv_gpu_kv_write_args_t, n, 40)                \
  FIELD(okv_gpu_kv_write_args_t, head_dim, 44)         \
  FIELD(okv_gpu_kv_write_args_t, elem_bytes, 48)       \
  SIZE(okv_gpu_reduce_args_t, 56)                      \
  FIELD(okv_gpu_reduce_args_t, src, 0)                 \
  FIELD(okv_gpu_reduce_args_t, dst, 8)                 \
  FIELD(okv_gpu_reduce_args_t, src_first, 16)          \
  FIELD(okv_gpu_reduce_args_t, src_n, 24)              \
  FIELD(okv_gpu_reduce_args_t, dst_index, 32)          \
  FIELD(okv_gpu_reduce_args_t, n, 40)                  \
  FIELD(okv_gpu_reduce_args_t, head_dim, 44)           \
  FIELD(okv_gpu_reduce_args_t, src_dtype, 48)          \
  FIELD(okv_gpu_reduce_args_t, dst_dtype, 52)          \
  SIZE(okv_gpu_score_args_t, 168)                      \
  FIELD(okv_gpu_score_args_t, q, 0)                    \
  FIELD(okv_gpu_score_args_t, summaries, 8)            \
  FIELD(okv_gpu_score_args_t, scores, 16)              \
  FIELD(okv_gpu_score_args_t, seg_summary_first, 24)   \
  FIELD(okv_gpu_score_args_t, seg_n_blocks, 32)        \
  FIELD(okv_gpu_score_args_t, seg_score_first, 40)     \
  FIELD(okv_gpu_score_args_t, n_seqs, 48)              \
  FIELD(okv_gpu_score_args_t, n_kv_heads, 52)          \
  FIELD(okv_gpu_score_args_t, group_size, 56)          \
  FIELD(okv_gpu_score_args_t, head_dim, 60)            \
  FIELD(okv_gpu_score_args_t, n_query_tokens, 64)      \
  FIELD(okv_gpu_score_args_t, t_begin, 68)             \
  FIELD(okv_gpu_score_args_t, t_end, 72)               \
  FIELD(okv_gpu_score_args_t, scale, 76)               \
  FIELD(okv_gpu_score_args_t, range_seg, 80)           \
  FIELD(okv_gpu_score_args_t, range_summary_first, 88) \
  FIELD(okv_gpu_score_args_t, range_n_blocks, 96)      \
  FIELD(okv_gpu_score_args_t, range_score_first, 104)  \
  FIELD(okv_gpu_score_args_t, n_ranges, 112)           \
  FIELD(okv_gpu_score_args_t, summary_dtype, 116)      \
  FIELD(okv_gpu_score_args_t, list_blocks, 120)        \
  FIELD(okv_gpu_score_args_t, seg_run_offsets, 128)    \
  FIELD(okv_gpu_score_args_t, run_first_block, 136)    \
  FIELD(okv_gpu_score_args_t, run_n_blocks, 144)       \
  FIELD(okv_gpu_score_args_t, run_summary_first, 152)  \
  FIELD(okv_gpu_score_args_t, list_stride, 160)        \
  SIZE(okv_gpu_topk_args_t, 80)                        \
  FIELD(okv_gpu_topk_args_t, scores, 0)                \
  FIELD(okv_gpu_topk_args_t, seg_score_first, 8)       \
  FIELD(okv_gpu_topk_args_t, seg_n, 16)                \
  FIELD(okv_gpu_topk_args_t, excl_offsets, 24)         \
  FIELD(okv_gpu_topk_args_t, excl_blocks, 32)          \
  FIELD(okv_gpu_topk_args_t, out_indices, 40)          \
  FIELD(okv_gpu_topk_args_t, out_counts, 48)           \
  FIELD(okv_gpu_topk_args_t, n_segments, 56)           \
  FIELD(okv_gpu_topk_args_t, k, 60)                    \
  FIELD(okv_gpu_topk_args_t, index_map, 64)            \
  FIELD(okv_gpu_topk_args_t, ascending, 72)            \
  SIZE(okv_gpu_select_args_t, 88)                      \
  FIELD(okv_gpu_select_args_t, tables, 0)              \
  FIELD(okv_gpu_select_args_t, table_bytes, 8)         \
  FIELD(okv_gpu_select_args_t, predicted, 16)          \
  FIELD(okv_gpu_select_args_t, counts, 24)             \
  FIELD(okv_gpu_select_args_t, head_params, 32)        \
  FIELD(okv_gpu_select_args_t, plan, 40)               \
  FIELD(okv_gpu_select_args_t, result, 48)             \
  FIELD(okv_gpu_select_args_t, n_heads, 56)            \
  FIELD(okv_gpu_select_args_t, n_slots, 60)            \
  FIELD(okv_gpu_select_args_t, bitmap_words, 64)       \
  FIELD(okv_gpu_select_args_t, budget_blocks, 68)      \
  FIELD(okv_gpu_select_args_t, step, 72)               \
  FIELD(okv_gpu_select_args_t, predicted_stride, 76)   \
  FIELD(okv_gpu_select_args_t, plan_stride, 80)        \
  SIZE(okv_gpu_slot_commit_args_t, 56)                 \
  FIELD(okv_gpu_slot_commit_args_t, tables, 0)         \
  FIELD(okv_gpu_slot_commit_args_t, table_bytes, 8)    \
  FIELD(okv_gpu_slot_commit_args_t, plan, 16)          \
  FIELD(okv_gpu_slot_commit_args_t, result, 24)        \
  FIELD(okv_gpu_slot_commit_args_t, landed, 32)        \
  FIELD(okv_gpu_slot_commit_args_t, n_heads, 40)       \
  FIELD(okv_gpu_slot_commit_args_t, n_slots, 44)       \
  FIELD(okv_gpu_slot_commit_args_t, bitmap_words, 48)  \
  FIELD(okv_gpu_slot_commit_args_t, plan_stride, 52)

/* The table as static assertions (C11 _Static_assert on the host, C++
 * static_assert in the kernels and the emulator); expanded once per side. */
#ifdef __cplusplus
#define OKV_GPU_STATIC_ASSERT static_assert
#else
#define OKV_GPU_STATIC_ASSERT _Static_assert
#endif
#define OKV_GPU_PIN_SIZE(type, bytes) \
  OKV_GPU_STATIC_ASSERT(sizeof(type) == (bytes), "size of " #type " differs from kernels/okv_gpu_args.h");
#define OKV_GPU_PIN_FIELD(type, field, offset)             \
  OKV_GPU_STATIC_ASSERT(offsetof(type, field) == (offset), \
                        "offset of " #type "." #field " differs from kernels/okv_gpu_args.h");
#define OKV_GPU_ARGS_PIN_LAYOUT() OKV_GPU_ARGS_LAYOUT(OKV_GPU_PIN_SIZE, OKV_GPU_PIN_FIELD)

#endif /* OASISKV_GPU_ARGS_H */
