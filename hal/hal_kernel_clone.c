/* Deep copies of kernel descriptors (hal/hal_impl.h), for backends that run
 * kernels later on a worker thread: the descriptor and its host arrays in one
 * allocation, so _free is a single okv_free. Buffers are not retained.
 * Owns: the clones it allocates (freed by the matching _free).
 * May touch: the source descriptor and its host arrays (read), the given
 * allocator. Nothing else of the HAL. */
#include <string.h>

#include "hal_impl.h"

#define INVALID(...) okv_status_make(OKV_STATUS_INVALID_ARGUMENT, __VA_ARGS__)

/* ---- descriptor clones ----
 * One allocation per clone: the descriptor struct followed by its host arrays
 * (8-byte aligned), so _free is a single okv_free. */

typedef struct clone_arena_t {
  char *base;
  size_t used;
} clone_arena_t;

static size_t round8(size_t n) { return (n + 7u) & ~(size_t)7u; }

static void *arena_copy(clone_arena_t *ar, const void *src, size_t bytes) {
  if (src == NULL) return NULL;
  void *dst = ar->base + ar->used;
  if (bytes) memcpy(dst, src, bytes);
  ar->used += round8(bytes);
  return dst;
}

static okv_status_t arena_alloc(const okv_allocator_t *a, size_t bytes, const char *what, clone_arena_t *out) {
  out->base = okv_malloc(a, bytes);
  out->used = 0;
  if (out->base == NULL)
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host allocator: %zu bytes for a %s descriptor clone", bytes,
                           what);
  return OKV_OK;
}

okv_status_t okv_attention_desc_clone(const okv_allocator_t *a, const okv_attention_desc_t *d,
                                      okv_attention_desc_t **out) {
  if (d == NULL || out == NULL) return INVALID("okv_attention_desc_clone: desc or out is NULL");
  size_t n_units = (size_t)d->n_seqs * d->n_kv_heads;
  size_t n_ws = d->ws_offsets ? d->ws_offsets[n_units] : 0;
  size_t bytes = round8(sizeof *d) + round8((n_units + 1) * 4u) + round8(n_ws * 4u) + round8(n_ws);
  clone_arena_t ar;
  OKV_RETURN_IF_ERROR(arena_alloc(a, bytes, "attention", &ar));
  okv_attention_desc_t *c = arena_copy(&ar, d, sizeof *d);
  c->ws_offsets = arena_copy(&ar, d->ws_offsets, (n_units + 1) * 4u);
  c->ws_slots = arena_copy(&ar, n_ws ? d->ws_slots : NULL, n_ws * 4u);
  c->ws_valid = arena_copy(&ar, n_ws ? d->ws_valid : NULL, n_ws);
  *out = c;
  return OKV_OK;
}

void okv_attention_desc_free(const okv_allocator_t *a, okv_attention_desc_t *d) { okv_free(a, d); }

okv_status_t okv_summary_desc_clone(const okv_allocator_t *a, const okv_summary_desc_t *d, okv_summary_desc_t **out) {
  if (d == NULL || out == NULL) return INVALID("okv_summary_desc_clone: desc or out is NULL");
  size_t n = d->n_blocks;
  size_t bytes = round8(sizeof *d) + 2u * round8(n * 8u) + round8(n);
  clone_arena_t ar;
  OKV_RETURN_IF_ERROR(arena_alloc(a, bytes, "summary", &ar));
  okv_summary_desc_t *c = arena_copy(&ar, d, sizeof *d);
  c->block_index = arena_copy(&ar, n ? d->block_index : NULL, n * 8u);
  c->summary_index = arena_copy(&ar, n ? d->summary_index : NULL, n * 8u);
  c->valid = arena_copy(&ar, n ? d->valid : NULL, n);
  *out = c;
  return OKV_OK;
}

void okv_summary_desc_free(const okv_allocator_t *a, okv_summary_desc_t *d) { okv_free(a, d); }

okv_status_t okv_score_desc_clone(const okv_allocator_t *a, const okv_score_desc_t *d, okv_score_desc_t **out) {
  if (d == NULL || out == NULL) return INVALID("okv_score_desc_clone: desc or out is NULL");
  size_t n = (size_t)d->n_seqs * d->n_kv_heads;
  size_t bytes = round8(sizeof *d) + 2u * round8(n * 8u) + round8(n * 4u);
  clone_arena_t ar;
  OKV_RETURN_IF_ERROR(arena_alloc(a, bytes, "score", &ar));
  okv_score_desc_t *c = arena_copy(&ar, d, sizeof *d);
  c->seg_summary_first = arena_copy(&ar, d->seg_summary_first, n * 8u);
  c->seg_score_first = arena_copy(&ar, d->seg_score_first, n * 8u);
  c->seg_n_blocks = arena_copy(&ar, d->seg_n_blocks, n * 4u);
  *out = c;
  return OKV_OK;
}

void okv_score_desc_free(const okv_allocator_t *a, okv_score_desc_t *d) { okv_free(a, d); }

okv_status_t okv_topk_desc_clone(const okv_allocator_t *a, const okv_topk_desc_t *d, okv_topk_desc_t **out) {
  if (d == NULL || out == NULL) return INVALID("okv_topk_desc_clone: desc or out is NULL");
  size_t n = d->n_segments;
  size_t n_excl = d->excl_offsets ? d->excl_offsets[n] : 0;
  size_t bytes = round8(sizeof *d) + round8(n * 8u) + round8(n * 4u) + round8((n + 1) * 4u) + round8(n_excl * 4u);
  clone_arena_t ar;
  OKV_RETURN_IF_ERROR(arena_alloc(a, bytes, "topk", &ar));
  okv_topk_desc_t *c = arena_copy(&ar, d, sizeof *d);
  c->seg_score_first = arena_copy(&ar, d->seg_score_first, n * 8u);
  c->seg_n = arena_copy(&ar, d->seg_n, n * 4u);
  c->excl_offsets = arena_copy(&ar, d->excl_offsets, (n + 1) * 4u);
  c->excl_blocks = arena_copy(&ar, (d->excl_offsets && n_excl) ? d->excl_blocks : NULL, n_excl * 4u);
  *out = c;
  return OKV_OK;
}

void okv_topk_desc_free(const okv_allocator_t *a, okv_topk_desc_t *d) { okv_free(a, d); }
