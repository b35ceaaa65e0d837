/* Admission of a prefilled request by a decode node (arXiv 2608.08097, "PD
 * disaggregation"): what a prefill node (a KV server) keeps and what it sends.
 *
 *  - okv_kv_blocks_t: a request's full prefill KV in the runtime's block
 *    format (slot layout: K transposed [head_dim][16], then V [16][head_dim],
 *    in the KV dtype), block ((layer * n_kv_heads + kv_head) * n_blocks + b):
 *    the store a KV source serves (okv_kv_source_t in oasiskv.h);
 *  - okv_admission_t: the admission — the min/max key summaries of every
 *    block and the initial working set, per (layer, KV head) the top-K blocks
 *    for the first decode query (the query of token n_tokens, scored with the
 *    runtime's Quest bound) plus the active (last) block — which
 *    okv_admission_prefill turns into an okv_remote_prefill_t for
 *    okv_runtime_seq_add_remote;
 *  - an in-memory KV source over an okv_kv_blocks_t (local disaggregation,
 *    tests).
 * `oasiskv eval --prefill-tokens` and the KV server use these same functions,
 * so both admit byte for byte the same thing.
 *
 * Thread safety: every function is reentrant; objects are not shared-safe
 * for writing. Every object is created with an allocator (NULL = system) and
 * freed through it. */
#ifndef OASISKV_TOOLS_MODEL_ADMISSION_H
#define OASISKV_TOOLS_MODEL_ADMISSION_H

#include <stdbool.h>
#include <stdint.h>

#include "oasiskv/oasiskv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The shape of the KV a request holds (the decode runtime's must match). */
typedef struct okv_kv_shape_t {
  uint32_t n_layers, n_q_heads, n_kv_heads, head_dim; /* n_q_heads a multiple of n_kv_heads; head_dim 1..256 */
  okv_dtype_t kv_dtype;
} okv_kv_shape_t;

/* A request's full prefill KV in block format. */
typedef struct okv_kv_blocks_t {
  okv_kv_shape_t shape;
  uint32_t n_tokens;    /* prefill tokens */
  uint32_t n_blocks;    /* per KV head: ceil(n_tokens / 16) */
  uint64_t block_bytes; /* okv_block_bytes(kv_dtype, head_dim) */
  uint8_t *data;        /* [n_layers][n_kv_heads][n_blocks][block_bytes]; bytes past the last valid token are 0 */
  okv_allocator_t allocator;
} okv_kv_blocks_t;

/* Converts f32 K and V, each [n_layers][n_tokens][n_kv_heads][head_dim] (okv_prefill_t's layout), into
 * block format in shape->kv_dtype (round to nearest even, as the runtime stores tokens). *out owns its data
 * (okv_kv_blocks_free). Errors: INVALID_ARGUMENT (NULL pointers, n_tokens 0, a shape field out of range,
 * naming it), OUT_OF_MEMORY. */
okv_status_t okv_kv_blocks_make(const okv_kv_shape_t *shape, uint32_t n_tokens, const float *k, const float *v,
                                const okv_allocator_t *allocator, okv_kv_blocks_t *out);
/* Frees what okv_kv_blocks_make allocated; a zeroed struct is accepted. */
void okv_kv_blocks_free(okv_kv_blocks_t *blocks);

/* An admission (the fields of okv_remote_prefill_t, owned). L = n_layers, H = n_kv_heads, nb = n_blocks. */
typedef struct okv_admission_t {
  okv_kv_shape_t shape;
  uint32_t n_tokens, n_blocks;
  uint32_t budget_blocks; /* K it was built for */
  uint64_t block_bytes;
  float *summaries;          /* f32 [L][H][nb][2][head_dim]: min then max of each block's stored keys */
  uint32_t *initial_offsets; /* [L*H + 1] CSR over u = layer * H + kv_head */
  uint32_t *initial_blocks;  /* ascending per head, the active block nb - 1 last */
  uint8_t *initial_kv;       /* [initial_offsets[L*H]][block_bytes], the listed blocks in CSR order */
  uint64_t summary_bytes;    /* on the wire: L * H * nb * 2 * head_dim * okv_dtype_size(kv_dtype) */
  uint64_t initial_bytes;    /* initial_offsets[L*H] * block_bytes */
  uint64_t admitted_bytes;   /* what crosses at admission: summary_bytes + initial_bytes, exactly */
  uint64_t full_kv_bytes;    /* what a full transfer moves: L * H * nb * block_bytes */
  okv_allocator_t allocator;
} okv_admission_t;

/* Builds the admission of `kv` for a decode runtime with budget K = budget_blocks:
 *  - summaries: per block the elementwise min and max of its valid keys as stored (kv_dtype widened to f32),
 *    the runtime's own summaries bit for bit;
 *  - initial working set per (layer l, KV head h): the active block nb - 1 and, among the other blocks, the
 *    K with the highest Quest bound for the first decode query,
 *      score(b) = max over the group's query heads g of sum_i max(q_i * min_i, q_i * max_i)
 *    (accumulated in double; ties to the lower block; every block when nb - 1 <= K), listed ascending.
 *    q: f32 [n_layers][n_q_heads][head_dim], the query of token n_tokens at each layer (RoPE applied), as
 *    the runtime gets it (query head kv_head * G + g, G = n_q_heads / n_kv_heads).
 * A decode runtime that keeps the sequence whole (mode dense, or nb <= dense_threshold_blocks) needs every
 * block listed: build with budget_blocks >= nb - 1 for it. *out owns its arrays (okv_admission_free).
 * Errors: INVALID_ARGUMENT (NULL kv, q or out, kv without data, budget_blocks 0), OUT_OF_MEMORY. */
okv_status_t okv_admission_build(const okv_kv_blocks_t *kv, const float *q, uint32_t budget_blocks,
                                 const okv_allocator_t *allocator, okv_admission_t *out);
/* Frees what okv_admission_build allocated; a zeroed struct is accepted. */
void okv_admission_free(okv_admission_t *admission);

/* Fills *out to admit `admission` with okv_runtime_seq_add_remote and `source` (pointers borrowed from
 * admission: keep it alive for the call). */
void okv_admission_prefill(const okv_admission_t *admission, okv_kv_source_t source, okv_remote_prefill_t *out);

/* The admission as bytes (what a KV server sends; the transport's admission blob). Little-endian:
 *   "OKVADM02", then u32 n_layers, n_q_heads, n_kv_heads, head_dim, kv_dtype, n_tokens, budget_blocks,
 *   n_initial (= initial_offsets[L*H]); summaries [L*H*nb*2*head_dim] in kv_dtype (bf16/f16/f32: the
 *   summaries are min/max of stored keys, so this is exact and the unpacked f32 values are bit-identical to
 *   the built ones; half the bytes of f32 for a bf16 KV); u32 initial_offsets [L*H + 1];
 *   u32 initial_blocks [n_initial]; initial_kv [n_initial * block_bytes].
 * okv_admission_pack_size: the blob's size (0 for an admission without arrays). okv_admission_pack writes
 * it into buf (capacity bytes). Errors: INVALID_ARGUMENT (NULL, capacity too small: nothing written). */
uint64_t okv_admission_pack_size(const okv_admission_t *admission);
okv_status_t okv_admission_pack(const okv_admission_t *admission, void *buf, uint64_t capacity);
/* Parses a blob of exactly n_bytes (untrusted input: every size is checked, overflow-safe, before anything
 * is read or allocated) into *out (owned; okv_admission_free): the magic, the shape (okv_kv_shape_t
 * ranges), n_tokens >= 1, the total size, initial_offsets starting at 0, non-decreasing and ending at
 * n_initial, at most budget_blocks + 1 or every block per head. The content (block order and range, the
 * active block, finite summaries with min <= max) is checked again by okv_runtime_seq_add_remote.
 * Errors: INVALID_ARGUMENT (one line naming what is wrong), OUT_OF_MEMORY. */
okv_status_t okv_admission_unpack(const void *blob, uint64_t n_bytes, const okv_allocator_t *allocator,
                                  okv_admission_t *out);

/* An in-memory KV source over `kv` (borrowed; must outlive every sequence using it). Counts what it serves.
 * Thread safety: read by one runtime thread at a time (the KV source contract); read the counters after the
 * runtime's jobs drained (between steps). */
typedef struct okv_kv_blocks_source_t {
  const okv_kv_blocks_t *kv;
  uint64_t calls, blocks, bytes;
} okv_kv_blocks_source_t;

/* read_blocks of the in-memory source: copies blocks block_index[i] of state->kv (user: an
 * okv_kv_blocks_source_t) to dst[i]. Errors: INVALID_ARGUMENT (a block index past the store, naming it; NULL
 * arrays with n > 0): nothing is counted then. */
okv_status_t okv_kv_blocks_read(void *user, uint32_t n, const uint64_t *block_index, void *const *dst);
/* A source of `state` (initialised here over kv) named `name` (borrowed; copied by the runtime). */
okv_kv_source_t okv_kv_blocks_source(okv_kv_blocks_source_t *state, const okv_kv_blocks_t *kv, const char *name);

#ifdef __cplusplus
}
#endif
#endif
