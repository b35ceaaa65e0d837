/* Argument structs of the GPU kernels in kernels/okv_kernels.cu, shared by the
 * kernel source (CUDA or HIP C++) and the host backends (C11). Each kernel takes
 * one struct by value, so the host passes a single pointer in the launch's
 * argument array. Device addresses are uint64_t (CUdeviceptr / hipDeviceptr_t
 * values, or the device-mapped address of pinned host memory); 0 = absent.
 * Plain fixed-width fields only, so C and C++ lay the structs out identically.
 * Not installed. */
#ifndef OASISKV_GPU_ARGS_H
#define OASISKV_GPU_ARGS_H

#include <stdint.h>

/* Threads per block of each kernel: the host launch and the kernel agree. */
#define OKV_GPU_GATHER_THREADS 256u
#define OKV_GPU_ATTENTION_THREADS 128u
#define OKV_GPU_MASS_THREADS 128u
#define OKV_GPU_SUMMARY_THREADS 128u
#define OKV_GPU_SCORE_THREADS 128u
#define OKV_GPU_TOPK_THREADS 512u
/* Blocks scored per thread block by okv_gpu_score_blocks (grid.y chunks). */
#define OKV_GPU_SCORE_BLOCKS_PER_CTA 64u
/* Largest query-row tile of one attention thread block. */
#define OKV_GPU_ATTENTION_MAX_ROWS 32u

/* okv_gpu_gather_blocks: dst[pairs[i].dst_offset ..+block_bytes) =
 * src[pairs[i].src_offset ..+block_bytes) for i < n_blocks. */
typedef struct okv_gpu_gather_args_t {
  uint64_t src, dst;       /* base device addresses */
  uint64_t pairs;          /* okv_block_copy_t[n_blocks] (two u64 per pair) in device memory */
  uint64_t n_blocks;
  uint64_t block_bytes;
  uint32_t vec_bytes;      /* 16, 8, 4 or 1: every offset and block_bytes is a multiple */
  uint32_t pad_;
} okv_gpu_gather_args_t;

/* okv_gpu_attention and okv_gpu_attention_mass (include/oasiskv/kernels.h #1).
 * Grid of okv_gpu_attention: (n_seqs*n_kv_heads, ceil(T*G / rows_per_cta)).
 * Grid of okv_gpu_attention_mass: (n_seqs*n_kv_heads, T). */
typedef struct okv_gpu_attention_args_t {
  uint64_t kv_pool;        /* slot 0 */
  uint64_t block_bytes;    /* okv_block_bytes(kv_dtype, head_dim) */
  uint64_t ws_offsets;     /* u32 [n_seqs*n_kv_heads + 1] */
  uint64_t ws_slots;       /* u32 [ws_offsets[last]] */
  uint64_t ws_valid;       /* u8  [ws_offsets[last]] */
  uint64_t q;              /* f32 [n_seqs][T][n_q_heads][head_dim] */
  uint64_t inflight_kv;    /* f32 [n_seqs][n_inflight][2][n_kv_heads][head_dim] or 0 */
  uint64_t out;            /* f32 like q */
  uint64_t lse;            /* f32 [n_seqs][T][n_q_heads] scratch: log-sum-exp per row, or 0 */
  uint64_t block_mass;     /* f32 [ws_offsets[last]][T] or 0 */
  uint32_t n_seqs, n_kv_heads, group_size, head_dim;
  uint32_t n_query_tokens, kv_dtype, n_inflight, rows_per_cta;
  float scale;             /* 1 / sqrt(head_dim) */
  uint32_t pad_;
} okv_gpu_attention_args_t;

/* okv_gpu_summarize_blocks: grid n_blocks. */
typedef struct okv_gpu_summary_args_t {
  uint64_t kv;             /* block 0 of the source, slot layout */
  uint64_t block_bytes;
  uint64_t summaries;      /* f32 [*][2][head_dim] */
  uint64_t block_index;    /* u64 [n_blocks] */
  uint64_t valid;          /* u8  [n_blocks] */
  uint64_t summary_index;  /* u64 [n_blocks] */
  uint32_t n_blocks, head_dim, kv_dtype, pad_;
} okv_gpu_summary_args_t;

/* okv_gpu_summary_append: grid-stride over entries i < n (grid 1 = strictly in order). */
typedef struct okv_gpu_append_args_t {
  uint64_t summaries;      /* f32 [*][2][head_dim] */
  uint64_t summary_index;  /* u64 [n] */
  uint64_t keys;           /* f32 [n][head_dim], already rounded through the KV dtype */
  uint64_t first;          /* u8 [n] */
  uint32_t n, head_dim;
} okv_gpu_append_args_t;

/* okv_gpu_score_blocks: grid (n_seqs*n_kv_heads, ceil(max_n / OKV_GPU_SCORE_BLOCKS_PER_CTA)). */
typedef struct okv_gpu_score_args_t {
  uint64_t q;                 /* f32 [n_seqs][T][n_q_heads][head_dim] */
  uint64_t summaries;         /* f32 [*][2][head_dim] */
  uint64_t scores;            /* f32 */
  uint64_t seg_summary_first; /* u64 [n_seqs*n_kv_heads] */
  uint64_t seg_n_blocks;      /* u32 [n_seqs*n_kv_heads] */
  uint64_t seg_score_first;   /* u64 [n_seqs*n_kv_heads] */
  uint32_t n_seqs, n_kv_heads, group_size, head_dim;
  uint32_t n_query_tokens, t_begin, t_end;
  float scale;
} okv_gpu_score_args_t;

/* okv_gpu_topk: grid n_segments; dynamic shared memory = 4 * ceil(max_n / 32) bytes. */
typedef struct okv_gpu_topk_args_t {
  uint64_t scores;            /* f32 */
  uint64_t seg_score_first;   /* u64 [n_segments] */
  uint64_t seg_n;             /* u32 [n_segments] */
  uint64_t excl_offsets;      /* u32 [n_segments + 1] or 0 */
  uint64_t excl_blocks;       /* u32 */
  uint64_t out_indices;       /* u32 [n_segments][k] */
  uint64_t out_counts;        /* u32 [n_segments] or 0 */
  uint32_t n_segments, k;
} okv_gpu_topk_args_t;

#endif /* OASISKV_GPU_ARGS_H */
