/* Internal: the HOST-tier store, the authoritative copy of every committed
 * token's K/V (paper arXiv 2608.08097, "Memory": full KV in host DRAM).
 *
 * One HOST-tier buffer in slot layout (block i at byte i * block_bytes: K
 * transposed [head_dim][16], then V [16][head_dim], in the KV dtype), handed out
 * in extents of `extent_blocks` blocks so that one head's blocks — and their
 * summaries, summary index == host block index — stay in few contiguous runs.
 * Writes are plain host stores: they cannot fail. A remote peer's store (the
 * REMOTE tier) is to offer the same operations.
 *
 * Not thread-safe: the runtime's engine thread owns it; the background thread
 * only reads block contents through copies. */
#ifndef OASISKV_CORE_HOST_STORE_H
#define OASISKV_CORE_HOST_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "oasiskv/allocator.h"
#include "oasiskv/hal.h"
#include "oasiskv/kernels.h"
#include "oasiskv/status.h"

typedef struct okv_host_store_t {
  okv_hal_buffer_t *kv;   /* HOST tier: n_extents * extent_blocks blocks */
  uint8_t *ptr;           /* host pointer of kv */
  uint64_t block_bytes;   /* okv_block_bytes(dtype, head_dim) */
  uint32_t extent_blocks; /* blocks per extent */
  uint32_t n_extents, n_free;
  uint8_t *used; /* [n_extents] 1 = handed out */
  okv_dtype_t dtype;
  uint32_t head_dim;
} okv_host_store_t;

/* Allocates the HOST-tier buffer of n_extents * extent_blocks blocks and the
 * extent table. Errors: OUT_OF_MEMORY (host tier or host allocator, named),
 * UNAVAILABLE (the buffer has no host pointer). On error nothing stays allocated. */
okv_status_t okv_host_store_init(okv_host_store_t *store, okv_hal_device_t *device, const okv_allocator_t *a,
                                 uint32_t n_extents, uint32_t extent_blocks, okv_dtype_t dtype, uint32_t head_dim);
/* Frees what init allocated; a zeroed store is accepted. */
void okv_host_store_free(okv_host_store_t *store, const okv_allocator_t *a);

/* Hands out n extents (a contiguous run when one exists; n == 1 takes `prefer`
 * when free), writing their indices to out[n]. Returns false (nothing taken)
 * when fewer than n are free. */
bool okv_host_store_alloc_extents(okv_host_store_t *store, uint32_t n, uint32_t prefer, uint32_t *out);
/* Returns n extents. */
void okv_host_store_free_extents(okv_host_store_t *store, const uint32_t *extents, uint32_t n);

/* Host block index of logical block `block` of a head whose extents are `extents`. */
static inline uint64_t okv_host_store_block(const okv_host_store_t *store, const uint32_t *extents, uint32_t block) {
  return (uint64_t)extents[block / store->extent_blocks] * store->extent_blocks + block % store->extent_blocks;
}

/* Writes one token (k, v: f32 [head_dim]) at position pos (0..15) of host block
 * `host_block`, converted to the store's dtype (round to nearest even). */
void okv_host_store_write_token(const okv_host_store_t *store, uint64_t host_block, uint32_t pos, const float *k,
                                const float *v);

/* Writes the first n_tok (1..16) tokens of host block `host_block` at once: token t's
 * K and V are the f32 rows k + t * stride and v + t * stride ([head_dim] each; stride
 * in floats), converted like okv_host_store_write_token, so the block holds the same
 * bytes as n_tok token writes at positions 0..n_tok-1. Positions n_tok..15 are not
 * touched. K is transposed through a small f32 tile (rows read contiguously) and
 * written a row of Kt (16 tokens, 32 bytes in f16 / bf16) at a time, a full block's
 * rows as one contiguous run. */
void okv_host_store_write_block(const okv_host_store_t *store, uint64_t host_block, uint32_t n_tok, const float *k,
                                const float *v, size_t stride);

#endif
