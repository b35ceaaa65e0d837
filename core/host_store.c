/* The HOST-tier store (core/host_store.h): the buffer, its extent table and
 * token writes. Owns nothing else; touches only the HAL buffer API. */
#include "host_store.h"

#include <string.h>

okv_status_t okv_host_store_init(okv_host_store_t *store, okv_hal_device_t *device, const okv_allocator_t *a,
                                 uint32_t n_extents, uint32_t extent_blocks, okv_dtype_t dtype, uint32_t head_dim) {
  memset(store, 0, sizeof *store);
  store->block_bytes = okv_block_bytes(dtype, head_dim);
  store->extent_blocks = extent_blocks;
  store->dtype = dtype;
  store->head_dim = head_dim;
  uint64_t bytes = (uint64_t)n_extents * extent_blocks * store->block_bytes;
  okv_status_t st = okv_hal_buffer_alloc(device, OKV_TIER_HOST, bytes, &store->kv);
  if (st != OKV_OK)
    return okv_status_annotate(st, "runtime: allocating the full KV (%llu bytes, host tier)",
                               (unsigned long long)bytes);
  store->ptr = okv_hal_buffer_host_ptr(store->kv);
  if (store->ptr == NULL) {
    okv_host_store_free(store, a);
    return okv_status_make(OKV_STATUS_UNAVAILABLE, "okv_runtime_create: the host tier buffer has no host pointer");
  }
  store->used = okv_calloc(a, n_extents, 1);
  if (store->used == NULL) {
    okv_host_store_free(store, a);
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "runtime: host allocator failed for the extent table");
  }
  store->n_extents = store->n_free = n_extents;
  return OKV_OK;
}

void okv_host_store_free(okv_host_store_t *store, const okv_allocator_t *a) {
  if (store->kv != NULL) OKV_IGNORE_ERROR(okv_hal_buffer_release(store->kv));
  if (store->used != NULL) okv_free(a, store->used);
  memset(store, 0, sizeof *store);
}

bool okv_host_store_alloc_extents(okv_host_store_t *store, uint32_t n, uint32_t prefer, uint32_t *out) {
  if (n == 0) return true;
  if (n > store->n_free) return false;
  if (n == 1 && prefer < store->n_extents && !store->used[prefer]) {
    store->used[prefer] = 1;
    store->n_free--;
    out[0] = prefer;
    return true;
  }
  uint32_t run = 0;
  for (uint32_t e = 0; e < store->n_extents; e++) { /* first-fit contiguous run */
    run = store->used[e] ? 0 : run + 1;
    if (run == n) {
      for (uint32_t i = 0; i < n; i++) {
        out[i] = e + 1 - n + i;
        store->used[out[i]] = 1;
      }
      store->n_free -= n;
      return true;
    }
  }
  uint32_t k = 0; /* scattered */
  for (uint32_t e = 0; e < store->n_extents && k < n; e++)
    if (!store->used[e]) {
      store->used[e] = 1;
      out[k++] = e;
    }
  store->n_free -= n;
  return true;
}

void okv_host_store_free_extents(okv_host_store_t *store, const uint32_t *extents, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    store->used[extents[i]] = 0;
    store->n_free++;
  }
}

/* Same rounding as okv_f32_to_bf16 (nearest even, quiet NaN), inlined for bulk prefill loads. */
static inline uint16_t f32_to_bf16_inline(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline void store_elem(void *base, okv_dtype_t dt, size_t idx, float x) {
  switch (dt) {
    case OKV_DTYPE_F32: ((float *)base)[idx] = x; break;
    case OKV_DTYPE_F16: ((uint16_t *)base)[idx] = okv_f32_to_f16(x); break;
    default: ((uint16_t *)base)[idx] = f32_to_bf16_inline(x); break;
  }
}

/* f32_to_bf16_inline without a branch (the same values), so that runs of 16 compile to vector code. */
static inline uint16_t f32_to_bf16_select(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16, quiet = (u >> 16) | 0x0040u;
  return (uint16_t)((u & 0x7FFFFFFFu) > 0x7F800000u ? quiet : rounded);
}

/* Stores src[0..n) at elements first..first+n of base, converted to dt (store_elem's values). */
static inline void store_row(void *base, okv_dtype_t dt, size_t first, const float *src, uint32_t n) {
  switch (dt) {
    case OKV_DTYPE_F32: memcpy((float *)base + first, src, (size_t)n * sizeof(float)); break;
    case OKV_DTYPE_F16: {
      uint16_t *o = (uint16_t *)base + first;
      for (uint32_t i = 0; i < n; i++) o[i] = okv_f32_to_f16(src[i]);
      break;
    }
    default: {
      uint16_t *o = (uint16_t *)base + first;
      uint32_t i = 0;
      for (; i + OKV_BLOCK_TOKENS <= n; i += OKV_BLOCK_TOKENS) /* fixed-length runs: vectorised at -O2 */
        for (uint32_t j = 0; j < OKV_BLOCK_TOKENS; j++) o[i + j] = f32_to_bf16_select(src[i + j]);
      for (; i < n; i++) o[i] = f32_to_bf16_select(src[i]);
      break;
    }
  }
}

void okv_host_store_write_block(const okv_host_store_t *store, uint64_t host_block, uint32_t n_tok, const float *k,
                                const float *v, size_t stride) {
  enum { CHUNK = 64 }; /* head_dim elements transposed at a time (a 4 KiB f32 tile) */
  uint8_t *base = store->ptr + host_block * store->block_bytes;
  uint32_t hd = store->head_dim;
  okv_dtype_t dt = store->dtype;
  float tile[CHUNK * OKV_BLOCK_TOKENS];
  for (uint32_t d0 = 0; d0 < hd; d0 += CHUNK) {
    uint32_t dn = hd - d0 < CHUNK ? hd - d0 : CHUNK;
    /* Read each token's row contiguously; tile[j][t] = K of token t, element d0 + j (rows of Kt). */
    for (uint32_t t = 0; t < n_tok; t++) {
      const float *row = k + (size_t)t * stride + d0;
      for (uint32_t j = 0; j < dn; j++) tile[j * OKV_BLOCK_TOKENS + t] = row[j];
    }
    if (n_tok == OKV_BLOCK_TOKENS) { /* full block: these Kt rows are contiguous in the block */
      store_row(base, dt, (size_t)d0 * OKV_BLOCK_TOKENS, tile, dn * OKV_BLOCK_TOKENS);
    } else {
      for (uint32_t j = 0; j < dn; j++)
        store_row(base, dt, (size_t)(d0 + j) * OKV_BLOCK_TOKENS, tile + j * OKV_BLOCK_TOKENS, n_tok);
    }
  }
  for (uint32_t t = 0; t < n_tok; t++)
    store_row(base, dt, (size_t)OKV_BLOCK_TOKENS * hd + (size_t)t * hd, v + (size_t)t * stride, hd);
}

void okv_host_store_write_token(const okv_host_store_t *store, uint64_t host_block, uint32_t pos, const float *k,
                                const float *v) {
  uint8_t *base = store->ptr + host_block * store->block_bytes;
  uint32_t hd = store->head_dim;
  okv_dtype_t dt = store->dtype;
  for (uint32_t d = 0; d < hd; d++) store_elem(base, dt, (size_t)d * OKV_BLOCK_TOKENS + pos, k[d]);
  for (uint32_t d = 0; d < hd; d++) store_elem(base, dt, (size_t)OKV_BLOCK_TOKENS * hd + (size_t)pos * hd + d, v[d]);
}
