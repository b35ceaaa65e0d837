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

/* Starts the clone of descriptor `d` (desc_bytes) for `out`, `what` naming
 * it: checks both, allocates the descriptor and array_bytes of host arrays
 * after it, copies *d first. Returns the copy, or NULL with *st set. */
static void *clone_start(const okv_allocator_t *a, const void *d, const void *out, size_t desc_bytes,
                         size_t array_bytes, const char *what, clone_arena_t *ar, okv_status_t *st) {
  if (d == NULL || out == NULL) {
    *st = INVALID("okv_%s_desc_clone: desc or out is NULL", what);
    return NULL;
  }
  const size_t bytes = round8(desc_bytes) + array_bytes;
  ar->base = okv_malloc(a, bytes);
  ar->used = 0;
  if (ar->base == NULL) {
    *st = okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host allocator: %zu bytes for a %s descriptor clone", bytes, what);
    return NULL;
  }
  return arena_copy(ar, d, desc_bytes);
}

okv_status_t okv_attention_desc_clone(const okv_allocator_t *a, const okv_attention_desc_t *d,
                                      okv_attention_desc_t **out) {
  size_t n_units = d ? (size_t)d->n_seqs * d->n_kv_heads : 0;
  size_t n_ws = d && d->ws_offsets ? d->ws_offsets[n_units] : 0;
  clone_arena_t ar;
  okv_status_t st = OKV_OK;
  size_t n_seqs = d && d->tables ? d->n_seqs : 0; /* table mode: the two per-sequence arrays */
  okv_attention_desc_t *c = clone_start(a, d, out, sizeof *d,
                                        (d && d->ws_offsets ? round8((n_units + 1) * 4u) : 0) + round8(n_ws * 4u) +
                                            round8(n_ws) + 2u * round8(n_seqs * 4u),
                                        "attention", &ar, &st);
  if (c == NULL) return st;
  c->ws_offsets = arena_copy(&ar, d->ws_offsets, (n_units + 1) * 4u);
  c->ws_slots = arena_copy(&ar, n_ws ? d->ws_slots : NULL, n_ws * 4u);
  c->ws_valid = arena_copy(&ar, n_ws ? d->ws_valid : NULL, n_ws);
  c->table_index = arena_copy(&ar, n_seqs ? d->table_index : NULL, n_seqs * 4u);
  c->seq_tokens = arena_copy(&ar, n_seqs ? d->seq_tokens : NULL, n_seqs * 4u);
  *out = c;
  return OKV_OK;
}

void okv_attention_desc_free(const okv_allocator_t *a, okv_attention_desc_t *d) { okv_free(a, d); }

okv_status_t okv_summary_desc_clone(const okv_allocator_t *a, const okv_summary_desc_t *d, okv_summary_desc_t **out) {
  size_t n = d ? d->n_blocks : 0;
  clone_arena_t ar;
  okv_status_t st = OKV_OK;
  okv_summary_desc_t *c = clone_start(a, d, out, sizeof *d, 2u * round8(n * 8u) + round8(n), "summary", &ar, &st);
  if (c == NULL) return st;
  c->block_index = arena_copy(&ar, n ? d->block_index : NULL, n * 8u);
  c->summary_index = arena_copy(&ar, n ? d->summary_index : NULL, n * 8u);
  c->valid = arena_copy(&ar, n ? d->valid : NULL, n);
  *out = c;
  return OKV_OK;
}

void okv_summary_desc_free(const okv_allocator_t *a, okv_summary_desc_t *d) { okv_free(a, d); }

okv_status_t okv_score_desc_clone(const okv_allocator_t *a, const okv_score_desc_t *d, okv_score_desc_t **out) {
  /* Range mode copies the range arrays only (the segment arrays are ignored and may be NULL). */
  const bool ranges = d && d->n_ranges > 0, list = d && d->list_blocks != NULL;
  size_t n = d && !ranges ? (size_t)d->n_seqs * d->n_kv_heads : 0, nr = ranges ? d->n_ranges : 0;
  size_t n_runs = list ? d->seg_run_offsets[n] : 0, n_csr = list ? n + 1u : 0;
  clone_arena_t ar;
  okv_status_t st = OKV_OK;
  okv_score_desc_t *c = clone_start(a, d, out, sizeof *d,
                                    2u * round8(n * 8u) + round8(n * 4u) + 2u * round8(nr * 8u) + 2u * round8(nr * 4u) +
                                        round8(n_csr * 4u) + 2u * round8(n_runs * 4u) + round8(n_runs * 8u),
                                    "score", &ar, &st);
  if (c == NULL) return st;
  /* List mode: the runs; seg_summary_first is ignored (may be NULL). */
  c->seg_run_offsets = arena_copy(&ar, list ? d->seg_run_offsets : NULL, n_csr * 4u);
  c->run_first_block = arena_copy(&ar, n_runs ? d->run_first_block : NULL, n_runs * 4u);
  c->run_n_blocks = arena_copy(&ar, n_runs ? d->run_n_blocks : NULL, n_runs * 4u);
  c->run_summary_first = arena_copy(&ar, n_runs ? d->run_summary_first : NULL, n_runs * 8u);
  c->seg_summary_first = arena_copy(&ar, n && !list ? d->seg_summary_first : NULL, n * 8u);
  c->seg_score_first = arena_copy(&ar, n ? d->seg_score_first : NULL, n * 8u);
  c->seg_n_blocks = arena_copy(&ar, n ? d->seg_n_blocks : NULL, n * 4u);
  c->range_summary_first = arena_copy(&ar, nr ? d->range_summary_first : NULL, nr * 8u);
  c->range_score_first = arena_copy(&ar, nr ? d->range_score_first : NULL, nr * 8u);
  c->range_seg = arena_copy(&ar, nr ? d->range_seg : NULL, nr * 4u);
  c->range_n_blocks = arena_copy(&ar, nr ? d->range_n_blocks : NULL, nr * 4u);
  *out = c;
  return OKV_OK;
}

void okv_score_desc_free(const okv_allocator_t *a, okv_score_desc_t *d) { okv_free(a, d); }

uint64_t okv_topk_index_map_len(const okv_topk_desc_t *d) {
  uint64_t len = 0;
  if (d == NULL || d->index_map == NULL) return 0;
  for (uint32_t u = 0; u < d->n_segments; u++)
    if (d->seg_n[u] > 0 && d->seg_score_first[u] + d->seg_n[u] > len) len = d->seg_score_first[u] + d->seg_n[u];
  return len;
}

okv_status_t okv_topk_desc_clone(const okv_allocator_t *a, const okv_topk_desc_t *d, okv_topk_desc_t **out) {
  size_t n = d ? d->n_segments : 0;
  size_t n_excl = d && d->excl_offsets ? d->excl_offsets[n] : 0;
  size_t n_map = (size_t)okv_topk_index_map_len(d);
  clone_arena_t ar;
  okv_status_t st = OKV_OK;
  okv_topk_desc_t *c =
      clone_start(a, d, out, sizeof *d,
                  round8(n * 8u) + round8(n * 4u) + round8((n + 1) * 4u) + round8(n_excl * 4u) + round8(n_map * 4u),
                  "topk", &ar, &st);
  if (c == NULL) return st;
  c->seg_score_first = arena_copy(&ar, d->seg_score_first, n * 8u);
  c->seg_n = arena_copy(&ar, d->seg_n, n * 4u);
  c->excl_offsets = arena_copy(&ar, d->excl_offsets, (n + 1) * 4u);
  c->excl_blocks = arena_copy(&ar, (d->excl_offsets && n_excl) ? d->excl_blocks : NULL, n_excl * 4u);
  /* a map that no segment reads (every seg_n 0) is dropped: nothing to copy */
  c->index_map = arena_copy(&ar, n_map ? d->index_map : NULL, n_map * 4u);
  *out = c;
  return OKV_OK;
}

void okv_topk_desc_free(const okv_allocator_t *a, okv_topk_desc_t *d) { okv_free(a, d); }

okv_status_t okv_summary_append_desc_clone(const okv_allocator_t *a, const okv_summary_append_desc_t *d,
                                           okv_summary_append_desc_t **out) {
  size_t n = d ? d->n : 0, n_keys = d ? (size_t)d->n * d->head_dim : 0;
  clone_arena_t ar;
  okv_status_t st = OKV_OK;
  okv_summary_append_desc_t *c =
      clone_start(a, d, out, sizeof *d, round8(n * 8u) + round8(n_keys * 4u) + round8(n), "summary_append", &ar, &st);
  if (c == NULL) return st;
  c->summary_index = arena_copy(&ar, n ? d->summary_index : NULL, n * 8u);
  c->keys = arena_copy(&ar, n ? d->keys : NULL, n_keys * 4u);
  c->first = arena_copy(&ar, n ? d->first : NULL, n);
  *out = c;
  return OKV_OK;
}

void okv_summary_append_desc_free(const okv_allocator_t *a, okv_summary_append_desc_t *d) { okv_free(a, d); }

okv_status_t okv_kv_write_desc_clone(const okv_allocator_t *a, const okv_kv_write_desc_t *d,
                                     okv_kv_write_desc_t **out) {
  size_t n = d ? d->n : 0, n_el = d ? (size_t)d->n * d->head_dim : 0;
  clone_arena_t ar;
  okv_status_t st = OKV_OK;
  okv_kv_write_desc_t *c =
      clone_start(a, d, out, sizeof *d, round8(n * 8u) + round8(n) + 2u * round8(n_el * 4u), "kv_write", &ar, &st);
  if (c == NULL) return st;
  c->slot_index = arena_copy(&ar, n ? d->slot_index : NULL, n * 8u);
  c->pos = arena_copy(&ar, n ? d->pos : NULL, n);
  c->keys = arena_copy(&ar, n ? d->keys : NULL, n_el * 4u);
  c->values = arena_copy(&ar, n ? d->values : NULL, n_el * 4u);
  *out = c;
  return OKV_OK;
}

void okv_kv_write_desc_free(const okv_allocator_t *a, okv_kv_write_desc_t *d) { okv_free(a, d); }

okv_status_t okv_summary_reduce_desc_clone(const okv_allocator_t *a, const okv_summary_reduce_desc_t *d,
                                           okv_summary_reduce_desc_t **out) {
  size_t n = d ? d->n : 0;
  clone_arena_t ar;
  okv_status_t st = OKV_OK;
  okv_summary_reduce_desc_t *c =
      clone_start(a, d, out, sizeof *d, 2u * round8(n * 8u) + round8(n * 4u), "summary_reduce", &ar, &st);
  if (c == NULL) return st;
  c->src_first = arena_copy(&ar, n ? d->src_first : NULL, n * 8u);
  c->dst_index = arena_copy(&ar, n ? d->dst_index : NULL, n * 8u);
  c->src_n = arena_copy(&ar, n ? d->src_n : NULL, n * 4u);
  *out = c;
  return OKV_OK;
}

void okv_summary_reduce_desc_free(const okv_allocator_t *a, okv_summary_reduce_desc_t *d) { okv_free(a, d); }

okv_status_t okv_select_desc_clone(const okv_allocator_t *a, const okv_select_desc_t *d, okv_select_desc_t **out) {
  size_t n = d ? d->n_heads : 0;
  clone_arena_t ar;
  okv_status_t st = OKV_OK;
  okv_select_desc_t *c = clone_start(a, d, out, sizeof *d, 2u * round8(n * 4u), "select", &ar, &st);
  if (c == NULL) return st;
  c->active_block = arena_copy(&ar, d->active_block, n * 4u);
  c->cap = arena_copy(&ar, d->cap, n * 4u);
  *out = c;
  return OKV_OK;
}

void okv_select_desc_free(const okv_allocator_t *a, okv_select_desc_t *d) { okv_free(a, d); }

okv_status_t okv_slot_commit_desc_clone(const okv_allocator_t *a, const okv_slot_commit_desc_t *d,
                                        okv_slot_commit_desc_t **out) {
  size_t n = d ? d->n_heads : 0;
  clone_arena_t ar;
  okv_status_t st = OKV_OK;
  okv_slot_commit_desc_t *c = clone_start(a, d, out, sizeof *d, round8(n), "slot_commit", &ar, &st);
  if (c == NULL) return st;
  c->landed = arena_copy(&ar, d->landed, n);
  *out = c;
  return OKV_OK;
}

void okv_slot_commit_desc_free(const okv_allocator_t *a, okv_slot_commit_desc_t *d) { okv_free(a, d); }
