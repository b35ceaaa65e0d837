/* Kernel descriptor validation: every shape, index and buffer range of the
 * kernel entry points, overflow-safe, checked completely before anything is
 * enqueued. INVALID_ARGUMENT names the entry point and the field; nothing is
 * written. Semantics of each kernel: include/oasiskv/kernels.h and
 * docs/kernels.md.
 * Owns: nothing; pure checks.
 * May touch: descriptors, host arrays, buffers and streams read-only (live
 * checks through hal_live.c). Never calls a backend. */
#include "hal_internal.h"

/* ---- validation helpers ---- */

#define INVALID(...) okv_status_make(OKV_STATUS_INVALID_ARGUMENT, __VA_ARGS__)

/* Returns INVALID_ARGUMENT "<fn>: <name> is NULL" from the calling validator
 * (which names its entry point `fn`) when `ptr` is NULL. */
#define REQUIRE_NONNULL(ptr, name)                                   \
  do {                                                               \
    if ((ptr) == NULL) return INVALID("%s: %s is NULL", fn, (name)); \
  } while (0)

/* a * b with overflow detection. */
static bool mul_u64(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow(a, b, out); }

static okv_status_t check_stream(const okv_hal_stream_t *stream, const char *fn) {
  okv_status_t s = okv_hal_check_live(stream, OKV_HAL_KIND_STREAM, "stream");
  if (s != OKV_OK) return okv_status_annotate(s, "%s", fn);
  if (stream->device == NULL || stream->device->vtable == NULL) return INVALID("%s: stream has no device", fn);
  return OKV_OK;
}

/* The stream of entry point `fn` and its descriptor (not NULL). */
static okv_status_t check_call(const okv_hal_stream_t *stream, const void *desc, const char *fn) {
  OKV_RETURN_IF_ERROR(check_stream(stream, fn));
  REQUIRE_NONNULL(desc, "desc");
  return OKV_OK;
}

/* Checks that `buf` is a buffer of the stream's device and that
 * [offset, offset + bytes) fits in it; offset must be 4-byte aligned (f32/u32 data)
 * when `align4`. */
static okv_status_t check_range(const okv_hal_stream_t *stream, const okv_hal_buffer_t *buf, uint64_t offset,
                                uint64_t bytes, bool align4, const char *fn, const char *name) {
  okv_status_t s = okv_hal_check_live(buf, OKV_HAL_KIND_BUFFER, name);
  if (s != OKV_OK) return okv_status_annotate(s, "%s", fn);
  if (buf->device != stream->device) return INVALID("%s: %s belongs to another device than the stream", fn, name);
  if (align4 && (offset & 3u))
    return INVALID("%s: offset of %s (%llu) is not 4-byte aligned", fn, name, (unsigned long long)offset);
  if (offset > buf->size || bytes > buf->size - offset)
    return INVALID("%s: %s range [%llu, +%llu bytes) exceeds its size %llu", fn, name, (unsigned long long)offset,
                   (unsigned long long)bytes, (unsigned long long)buf->size);
  return OKV_OK;
}

/* Byte ranges [a, a + na) and [b, b + nb) of the same buffer share a byte (both non-empty; no overflow:
 * both were checked inside a buffer). */
static bool overlaps(const okv_hal_buffer_t *ba, uint64_t a, uint64_t na, const okv_hal_buffer_t *bb, uint64_t b,
                     uint64_t nb) {
  return ba == bb && na > 0 && nb > 0 && a < b + nb && b < a + na;
}

/* Number of whole items of `item_bytes` that fit in `buf`. */
static uint64_t items_in(const okv_hal_buffer_t *buf, uint64_t item_bytes) {
  return item_bytes ? buf->size / item_bytes : 0;
}

/* " in whole tiles of 16 blocks" after a count of OKV_DTYPE_C4 summaries, whose buffers hold whole tiles only. */
static const char *tiles_note(okv_dtype_t dtype) { return dtype == OKV_DTYPE_C4 ? ", whole tiles of 16 blocks" : ""; }

/* Summaries a buffer holds: whole tiles of 16 for OKV_DTYPE_C4 (include/oasiskv/kernels.h). */
static uint64_t summaries_in(const okv_hal_buffer_t *buf, okv_dtype_t dtype, uint32_t head_dim) {
  const uint64_t sb = okv_summary_bytes_ex(dtype, head_dim);
  if (dtype == OKV_DTYPE_C4) return items_in(buf, 16u * sb) * 16u;
  return items_in(buf, sb);
}

static okv_status_t check_head_dim(uint32_t head_dim, const char *fn) {
  if (head_dim < 1 || head_dim > 256) return INVALID("%s: head_dim %u not in 1..256", fn, head_dim);
  return OKV_OK;
}

/* INVALID_ARGUMENT "<fn>: <name> <value> is not a dtype" unless `dtype` is one. */
static okv_status_t check_dtype_of(okv_dtype_t dtype, const char *fn, const char *name) {
  if ((unsigned)dtype >= (unsigned)OKV_DTYPE_COUNT) return INVALID("%s: %s %d is not a dtype", fn, name, (int)dtype);
  return OKV_OK;
}

static okv_status_t check_dtype(okv_dtype_t dtype, const char *fn) { return check_dtype_of(dtype, fn, "kv_dtype"); }

/* A summary dtype that may also be OKV_DTYPE_Q8 or OKV_DTYPE_C4 (the compact summary formats). */
static okv_status_t check_dtype_or_compact(okv_dtype_t dtype, const char *fn, const char *name) {
  if (dtype == OKV_DTYPE_Q8 || dtype == OKV_DTYPE_C4) return OKV_OK;
  return check_dtype_of(dtype, fn, name);
}

/* Checks that [first, first + n) lies within [0, total) without overflow. */
static bool span_ok(uint64_t first, uint64_t n, uint64_t total) { return first <= total && n <= total - first; }

/* The shape fields attention and scoring share. */
static okv_status_t check_shape(uint32_t n_seqs, uint32_t n_kv_heads, uint32_t group_size, uint32_t head_dim,
                                uint32_t n_query_tokens, const char *fn) {
  if (n_seqs < 1) return INVALID("%s: n_seqs is 0", fn);
  if (n_kv_heads < 1) return INVALID("%s: n_kv_heads is 0", fn);
  if (group_size < 1) return INVALID("%s: group_size is 0", fn);
  OKV_RETURN_IF_ERROR(check_head_dim(head_dim, fn));
  if (n_query_tokens < 1 || n_query_tokens > 4) return INVALID("%s: n_query_tokens %u not in 1..4", fn, n_query_tokens);
  return OKV_OK;
}

/* Checks a CSR offsets array of n + 1 entries: [0] == 0, monotone. */
static okv_status_t check_csr(const uint32_t *offsets, uint64_t n, const char *fn, const char *name) {
  if (offsets == NULL) return INVALID("%s: %s is NULL", fn, name);
  if (offsets[0] != 0) return INVALID("%s: %s[0] is %u, must be 0", fn, name, offsets[0]);
  for (uint64_t i = 0; i < n; i++)
    if (offsets[i + 1] < offsets[i])
      return INVALID("%s: %s not monotone at %llu (%u > %u)", fn, name, (unsigned long long)i, offsets[i],
                     offsets[i + 1]);
  return OKV_OK;
}

/* ---- attention ---- */

/* Attention's table mode (okv_attention_desc_t.tables set): the CSR and the mass absent, the table and slot
 * map regions of the highest table row inside their buffers, every sequence's tokens within the tables'
 * blocks. */
static okv_status_t check_attention_tables(const okv_hal_stream_t *stream, const okv_attention_desc_t *d,
                                           uint64_t out_bytes, const char *fn) {
  if (d->ws_offsets != NULL || d->ws_slots != NULL || d->ws_valid != NULL)
    return INVALID("%s: ws_offsets, ws_slots and ws_valid must be NULL with tables (table mode)", fn);
  if (d->block_mass != NULL) return INVALID("%s: block_mass is not available with tables (table mode)", fn);
  uint64_t tb = okv_slot_table_bytes(d->table_slots, d->table_words);
  if (tb == 0)
    return INVALID("%s: table_slots %u or table_words %u not in 1..%u, 1..%u", fn, d->table_slots, d->table_words,
                   OKV_SELECT_MAX_SLOTS, OKV_SELECT_MAX_WORDS);
  if (d->tables_offset & 7u)
    return INVALID("%s: tables_offset %llu is not 8-byte aligned", fn, (unsigned long long)d->tables_offset);
  REQUIRE_NONNULL(d->table_index, "table_index");
  REQUIRE_NONNULL(d->seq_tokens, "seq_tokens");
  REQUIRE_NONNULL(d->slot_map, "slot_map");
  if ((uint64_t)d->n_seqs * d->n_kv_heads * d->table_slots > UINT32_MAX) /* the working sets' entries: u32 */
    return INVALID("%s: n_seqs * n_kv_heads * table_slots exceeds %u entries", fn, UINT32_MAX);
  uint64_t rows = 0, max_tokens = (uint64_t)d->table_words * 64u * OKV_BLOCK_TOKENS;
  for (uint32_t s = 0; s < d->n_seqs; s++) {
    if (d->seq_tokens[s] > max_tokens)
      return INVALID("%s: seq_tokens[%u] = %u exceeds the %llu tokens of table_words %u", fn, s, d->seq_tokens[s],
                     (unsigned long long)max_tokens, d->table_words);
    if ((uint64_t)d->table_index[s] + 1u > rows) rows = (uint64_t)d->table_index[s] + 1u;
  }
  uint64_t n_tables = rows * d->n_kv_heads, table_bytes, map_bytes; /* rows <= 2^32, n_kv_heads < 2^32 */
  if (!mul_u64(n_tables, tb, &table_bytes) || !mul_u64(n_tables, (uint64_t)d->table_slots * 4u, &map_bytes))
    return INVALID("%s: table_index too large", fn);
  OKV_RETURN_IF_ERROR(check_range(stream, d->tables, d->tables_offset, table_bytes, false, fn, "tables"));
  OKV_RETURN_IF_ERROR(check_range(stream, d->slot_map, d->slot_map_offset, map_bytes, true, fn, "slot_map"));
  /* Read while other thread blocks write out (a GPU): no byte in common. */
  if (overlaps(d->tables, d->tables_offset, table_bytes, d->out, d->out_offset, out_bytes) ||
      overlaps(d->slot_map, d->slot_map_offset, map_bytes, d->out, d->out_offset, out_bytes))
    return INVALID("%s: tables or slot_map overlaps out", fn);
  return OKV_OK;
}

okv_status_t okv_hal_validate_attention(const okv_hal_stream_t *stream, const okv_attention_desc_t *d) {
  static const char fn[] = "okv_hal_attention_async";
  OKV_RETURN_IF_ERROR(check_call(stream, d, fn));
  OKV_RETURN_IF_ERROR(check_shape(d->n_seqs, d->n_kv_heads, d->group_size, d->head_dim, d->n_query_tokens, fn));
  OKV_RETURN_IF_ERROR(check_dtype(d->kv_dtype, fn));
  if (d->n_inflight > d->n_query_tokens)
    return INVALID("%s: n_inflight %u exceeds n_query_tokens %u", fn, d->n_inflight, d->n_query_tokens);

  uint64_t n_units, n_q_heads, row, q_bytes;
  if (!mul_u64(d->n_seqs, d->n_kv_heads, &n_units) || n_units > UINT32_MAX - 1u)
    return INVALID("%s: n_seqs * n_kv_heads too large", fn);
  if (!mul_u64(d->n_kv_heads, d->group_size, &n_q_heads) || n_q_heads > UINT32_MAX)
    return INVALID("%s: n_kv_heads * group_size too large", fn);
  if (!mul_u64(n_q_heads, d->head_dim, &row) || !mul_u64(row, 4u * d->n_query_tokens, &row) ||
      !mul_u64(row, d->n_seqs, &q_bytes))
    return INVALID("%s: q size overflows", fn);

  /* Slot pool. */
  uint64_t slot_bytes = okv_block_bytes(d->kv_dtype, d->head_dim), pool_bytes;
  REQUIRE_NONNULL(d->kv_pool, "kv_pool");
  if (!mul_u64(d->n_slots, slot_bytes, &pool_bytes))
    return INVALID("%s: n_slots %llu * slot bytes overflows", fn, (unsigned long long)d->n_slots);
  OKV_RETURN_IF_ERROR(check_range(stream, d->kv_pool, 0, pool_bytes, false, fn, "kv_pool (n_slots slots)"));

  /* Working sets: from slot tables, or the CSR. */
  uint64_t n_ws = 0;
  if (d->tables != NULL) {
    OKV_RETURN_IF_ERROR(check_range(stream, d->out, d->out_offset, q_bytes, true, fn, "out"));
    OKV_RETURN_IF_ERROR(check_attention_tables(stream, d, q_bytes, fn));
  } else {
    OKV_RETURN_IF_ERROR(check_csr(d->ws_offsets, n_units, fn, "ws_offsets"));
    n_ws = d->ws_offsets[n_units];
  }
  if (n_ws > 0) {
    REQUIRE_NONNULL(d->ws_slots, "ws_slots");
    REQUIRE_NONNULL(d->ws_valid, "ws_valid");
    for (uint64_t i = 0; i < n_ws; i++) {
      if (d->ws_slots[i] >= d->n_slots)
        return INVALID("%s: ws_slots[%llu] = %u is not < n_slots %llu", fn, (unsigned long long)i, d->ws_slots[i],
                       (unsigned long long)d->n_slots);
      if (d->ws_valid[i] < 1 || d->ws_valid[i] > OKV_BLOCK_TOKENS)
        return INVALID("%s: ws_valid[%llu] = %u not in 1..16", fn, (unsigned long long)i, d->ws_valid[i]);
    }
  }

  OKV_RETURN_IF_ERROR(check_range(stream, d->q, d->q_offset, q_bytes, true, fn, "q"));
  OKV_RETURN_IF_ERROR(check_range(stream, d->out, d->out_offset, q_bytes, true, fn, "out"));

  if (d->n_inflight == 0) {
    if (d->inflight_kv != NULL) return INVALID("%s: inflight_kv must be NULL when n_inflight is 0", fn);
  } else {
    uint64_t in_bytes;
    if (!mul_u64((uint64_t)d->n_seqs * d->n_inflight * 2u, (uint64_t)d->n_kv_heads * d->head_dim * 4u, &in_bytes))
      return INVALID("%s: inflight_kv size overflows", fn);
    OKV_RETURN_IF_ERROR(check_range(stream, d->inflight_kv, d->inflight_offset, in_bytes, true, fn, "inflight_kv"));
  }
  if (d->block_mass != NULL) {
    uint64_t mass_bytes = n_ws * d->n_query_tokens * 4u; /* n_ws < 2^32, T <= 4: no overflow */
    OKV_RETURN_IF_ERROR(check_range(stream, d->block_mass, d->mass_offset, mass_bytes, true, fn, "block_mass"));
  }
  return OKV_OK;
}

/* ---- summaries ---- */

okv_status_t okv_hal_validate_summary(const okv_hal_stream_t *stream, const okv_summary_desc_t *d) {
  static const char fn[] = "okv_hal_summarize_blocks_async";
  OKV_RETURN_IF_ERROR(check_call(stream, d, fn));
  OKV_RETURN_IF_ERROR(check_head_dim(d->head_dim, fn));
  OKV_RETURN_IF_ERROR(check_dtype(d->kv_dtype, fn));
  OKV_RETURN_IF_ERROR(check_dtype_of(d->summary_dtype, fn, "summary_dtype"));
  OKV_RETURN_IF_ERROR(check_range(stream, d->kv, 0, 0, false, fn, "kv"));
  OKV_RETURN_IF_ERROR(check_range(stream, d->summaries, 0, 0, false, fn, "summaries"));
  if (d->n_blocks == 0) return OKV_OK;
  REQUIRE_NONNULL(d->block_index, "block_index");
  REQUIRE_NONNULL(d->valid, "valid");
  REQUIRE_NONNULL(d->summary_index, "summary_index");
  uint64_t n_kv_blocks = items_in(d->kv, okv_block_bytes(d->kv_dtype, d->head_dim));
  uint64_t n_summaries = summaries_in(d->summaries, d->summary_dtype, d->head_dim);
  for (uint32_t i = 0; i < d->n_blocks; i++) {
    if (d->block_index[i] >= n_kv_blocks)
      return INVALID("%s: block_index[%u] = %llu: block outside kv (%llu blocks)", fn, i,
                     (unsigned long long)d->block_index[i], (unsigned long long)n_kv_blocks);
    if (d->valid[i] < 1 || d->valid[i] > OKV_BLOCK_TOKENS)
      return INVALID("%s: valid[%u] = %u not in 1..16", fn, i, d->valid[i]);
    if (d->summary_index[i] >= n_summaries)
      return INVALID("%s: summary_index[%u] = %llu outside summaries (%llu summaries)", fn, i,
                     (unsigned long long)d->summary_index[i], (unsigned long long)n_summaries);
  }
  return OKV_OK;
}

okv_status_t okv_hal_validate_summary_append(const okv_hal_stream_t *stream, const okv_summary_append_desc_t *d,
                                             const char *fn) {
  OKV_RETURN_IF_ERROR(check_call(stream, d, fn));
  OKV_RETURN_IF_ERROR(check_head_dim(d->head_dim, fn));
  OKV_RETURN_IF_ERROR(check_dtype(d->kv_dtype, fn));
  OKV_RETURN_IF_ERROR(check_dtype_of(d->summary_dtype, fn, "summary_dtype"));
  OKV_RETURN_IF_ERROR(check_range(stream, d->summaries, 0, 0, false, fn, "summaries"));
  if (d->n == 0) return OKV_OK;
  REQUIRE_NONNULL(d->summary_index, "summary_index");
  REQUIRE_NONNULL(d->keys, "keys");
  REQUIRE_NONNULL(d->first, "first");
  uint64_t n_summaries = summaries_in(d->summaries, d->summary_dtype, d->head_dim);
  for (uint32_t i = 0; i < d->n; i++)
    if (d->summary_index[i] >= n_summaries)
      return INVALID("%s: summary_index[%u] = %llu outside summaries (%llu summaries)", fn, i,
                     (unsigned long long)d->summary_index[i], (unsigned long long)n_summaries);
  return OKV_OK;
}

okv_status_t okv_hal_validate_kv_write(const okv_hal_stream_t *stream, const okv_kv_write_desc_t *d) {
  static const char fn[] = "okv_hal_kv_write_tokens_async";
  OKV_RETURN_IF_ERROR(check_call(stream, d, fn));
  OKV_RETURN_IF_ERROR(check_head_dim(d->head_dim, fn));
  OKV_RETURN_IF_ERROR(check_dtype(d->kv_dtype, fn));
  OKV_RETURN_IF_ERROR(check_range(stream, d->kv, 0, 0, false, fn, "kv"));
  if (d->n == 0) return OKV_OK;
  REQUIRE_NONNULL(d->slot_index, "slot_index");
  REQUIRE_NONNULL(d->pos, "pos");
  REQUIRE_NONNULL(d->keys, "keys");
  REQUIRE_NONNULL(d->values, "values");
  uint64_t n_slots = items_in(d->kv, okv_block_bytes(d->kv_dtype, d->head_dim));
  for (uint32_t i = 0; i < d->n; i++) {
    if (d->slot_index[i] >= n_slots)
      return INVALID("%s: slot_index[%u] = %llu outside kv (%llu slots)", fn, i, (unsigned long long)d->slot_index[i],
                     (unsigned long long)n_slots);
    if (d->pos[i] >= OKV_BLOCK_TOKENS)
      return INVALID("%s: pos[%u] = %u is not a token position (0..%u)", fn, i, (unsigned)d->pos[i],
                     OKV_BLOCK_TOKENS - 1u);
  }
  return OKV_OK;
}

okv_status_t okv_hal_validate_summary_reduce(const okv_hal_stream_t *stream, const okv_summary_reduce_desc_t *d) {
  static const char fn[] = "okv_hal_summary_reduce_async";
  OKV_RETURN_IF_ERROR(check_call(stream, d, fn));
  OKV_RETURN_IF_ERROR(check_head_dim(d->head_dim, fn));
  OKV_RETURN_IF_ERROR(check_dtype_of(d->src_dtype, fn, "src_dtype"));
  OKV_RETURN_IF_ERROR(check_dtype_or_compact(d->dst_dtype, fn, "dst_dtype"));
  OKV_RETURN_IF_ERROR(check_range(stream, d->src, 0, 0, false, fn, "src"));
  OKV_RETURN_IF_ERROR(check_range(stream, d->dst, 0, 0, false, fn, "dst"));
  if (d->n == 0) return OKV_OK;
  REQUIRE_NONNULL(d->src_first, "src_first");
  REQUIRE_NONNULL(d->src_n, "src_n");
  REQUIRE_NONNULL(d->dst_index, "dst_index");
  uint64_t n_src = summaries_in(d->src, d->src_dtype, d->head_dim);
  uint64_t n_dst = summaries_in(d->dst, d->dst_dtype, d->head_dim);
  for (uint32_t i = 0; i < d->n; i++) {
    if (d->src_n[i] == 0) return INVALID("%s: src_n[%u] is 0 (a summary needs at least one source)", fn, i);
    if (!span_ok(d->src_first[i], d->src_n[i], n_src))
      return INVALID("%s: entry %u: source summaries [%llu, +%u) outside src (%llu summaries%s)", fn, i,
                     (unsigned long long)d->src_first[i], d->src_n[i], (unsigned long long)n_src,
                     tiles_note(d->src_dtype));
    if (d->dst_index[i] >= n_dst)
      return INVALID("%s: dst_index[%u] = %llu outside dst (%llu summaries%s)", fn, i,
                     (unsigned long long)d->dst_index[i], (unsigned long long)n_dst, tiles_note(d->dst_dtype));
  }
  return OKV_OK;
}

/* ---- scoring ---- */

okv_status_t okv_hal_validate_score(const okv_hal_stream_t *stream, const okv_score_desc_t *d) {
  static const char fn[] = "okv_hal_score_blocks_async";
  OKV_RETURN_IF_ERROR(check_call(stream, d, fn));
  OKV_RETURN_IF_ERROR(check_shape(d->n_seqs, d->n_kv_heads, d->group_size, d->head_dim, d->n_query_tokens, fn));
  if (!(d->t_begin < d->t_end && d->t_end <= d->n_query_tokens))
    return INVALID("%s: [t_begin %u, t_end %u) is not a non-empty range within n_query_tokens %u", fn, d->t_begin,
                   d->t_end, d->n_query_tokens);
  uint64_t n_units, n_q_heads, q_bytes;
  if (!mul_u64(d->n_seqs, d->n_kv_heads, &n_units) || n_units > UINT32_MAX)
    return INVALID("%s: n_seqs * n_kv_heads too large", fn);
  if (!mul_u64(d->n_kv_heads, d->group_size, &n_q_heads) || n_q_heads > UINT32_MAX ||
      !mul_u64(n_q_heads, (uint64_t)d->head_dim * 4u * d->n_query_tokens, &q_bytes) ||
      !mul_u64(q_bytes, d->n_seqs, &q_bytes))
    return INVALID("%s: q size overflows", fn);
  OKV_RETURN_IF_ERROR(check_dtype_or_compact(d->summary_dtype, fn, "summary_dtype"));
  OKV_RETURN_IF_ERROR(check_range(stream, d->q, d->q_offset, q_bytes, true, fn, "q"));
  OKV_RETURN_IF_ERROR(check_range(stream, d->summaries, 0, 0, false, fn, "summaries"));
  OKV_RETURN_IF_ERROR(check_range(stream, d->scores, 0, 0, false, fn, "scores"));
  uint64_t n_summaries = summaries_in(d->summaries, d->summary_dtype, d->head_dim);
  uint64_t n_scores = items_in(d->scores, 4u);
  if (d->list_blocks != NULL) {
    if (d->n_ranges > 0) return INVALID("%s: list_blocks and n_ranges %u both given", fn, d->n_ranges);
    uint64_t list_bytes;
    if (!mul_u64(n_units, d->list_stride, &list_bytes) || !mul_u64(list_bytes, 4u, &list_bytes))
      return INVALID("%s: list size overflows", fn);
    OKV_RETURN_IF_ERROR(check_range(stream, d->list_blocks, d->list_offset, list_bytes, true, fn, "list_blocks"));
    REQUIRE_NONNULL(d->seg_n_blocks, "seg_n_blocks");
    REQUIRE_NONNULL(d->seg_score_first, "seg_score_first");
    OKV_RETURN_IF_ERROR(check_csr(d->seg_run_offsets, n_units, fn, "seg_run_offsets"));
    uint32_t n_runs = d->seg_run_offsets[n_units];
    if (n_runs > 0) {
      REQUIRE_NONNULL(d->run_first_block, "run_first_block");
      REQUIRE_NONNULL(d->run_n_blocks, "run_n_blocks");
      REQUIRE_NONNULL(d->run_summary_first, "run_summary_first");
    }
    for (uint64_t u = 0; u < n_units; u++) {
      uint64_t nb = d->seg_n_blocks[u];
      if (nb > d->list_stride)
        return INVALID("%s: seg_n_blocks[%llu] = %llu exceeds list_stride %u", fn, (unsigned long long)u,
                       (unsigned long long)nb, d->list_stride);
      if (nb > 0 && !span_ok(d->seg_score_first[u], nb, n_scores))
        return INVALID("%s: segment %llu: scores [%llu, +%llu) outside scores (%llu floats)", fn, (unsigned long long)u,
                       (unsigned long long)d->seg_score_first[u], (unsigned long long)nb, (unsigned long long)n_scores);
      /* The lists are read while scores are written: they must not share a byte. */
      if (nb > 0 &&
          overlaps(d->list_blocks, d->list_offset, list_bytes, d->scores, d->seg_score_first[u] * 4u, nb * 4u))
        return INVALID("%s: segment %llu: scores [%llu, +%llu) overlap list_blocks", fn, (unsigned long long)u,
                       (unsigned long long)d->seg_score_first[u], (unsigned long long)nb);
      for (uint32_t r = d->seg_run_offsets[u]; r < d->seg_run_offsets[u + 1]; r++) {
        if (!span_ok(d->run_summary_first[r], d->run_n_blocks[r], n_summaries))
          return INVALID("%s: run %u: summaries [%llu, +%u) outside summaries (%llu%s)", fn, r,
                         (unsigned long long)d->run_summary_first[r], d->run_n_blocks[r],
                         (unsigned long long)n_summaries, tiles_note(d->summary_dtype));
        if ((uint64_t)d->run_first_block[r] + d->run_n_blocks[r] > UINT32_MAX)
          return INVALID("%s: run %u: blocks [%u, +%u) overflow", fn, r, d->run_first_block[r], d->run_n_blocks[r]);
        if (r > d->seg_run_offsets[u] && d->run_first_block[r] < d->run_first_block[r - 1] + d->run_n_blocks[r - 1])
          return INVALID(
              "%s: run %u of segment %llu starts at block %u, before the end of run %u (runs ascending, "
              "not overlapping)",
              fn, r, (unsigned long long)u, d->run_first_block[r], r - 1);
      }
    }
    return OKV_OK;
  }
  if (d->n_ranges > 0) {
    REQUIRE_NONNULL(d->range_seg, "range_seg");
    REQUIRE_NONNULL(d->range_summary_first, "range_summary_first");
    REQUIRE_NONNULL(d->range_n_blocks, "range_n_blocks");
    REQUIRE_NONNULL(d->range_score_first, "range_score_first");
    for (uint32_t r = 0; r < d->n_ranges; r++) {
      if (d->range_seg[r] >= n_units)
        return INVALID("%s: range_seg[%u] = %u is not < n_seqs * n_kv_heads = %llu", fn, r, d->range_seg[r],
                       (unsigned long long)n_units);
      uint64_t nb = d->range_n_blocks[r];
      if (nb == 0) continue;
      if (!span_ok(d->range_summary_first[r], nb, n_summaries))
        return INVALID("%s: range %u: summaries [%llu, +%llu) outside summaries (%llu%s)", fn, r,
                       (unsigned long long)d->range_summary_first[r], (unsigned long long)nb,
                       (unsigned long long)n_summaries, tiles_note(d->summary_dtype));
      if (!span_ok(d->range_score_first[r], nb, n_scores))
        return INVALID("%s: range %u: scores [%llu, +%llu) outside scores (%llu floats)", fn, r,
                       (unsigned long long)d->range_score_first[r], (unsigned long long)nb,
                       (unsigned long long)n_scores);
    }
    return OKV_OK;
  }
  REQUIRE_NONNULL(d->seg_summary_first, "seg_summary_first");
  REQUIRE_NONNULL(d->seg_n_blocks, "seg_n_blocks");
  REQUIRE_NONNULL(d->seg_score_first, "seg_score_first");
  for (uint64_t u = 0; u < n_units; u++) {
    uint64_t nb = d->seg_n_blocks[u];
    if (nb == 0) continue;
    if (d->seg_summary_first[u] > n_summaries || nb > n_summaries - d->seg_summary_first[u])
      return INVALID("%s: segment %llu: summaries [%llu, +%llu) outside summaries (%llu%s)", fn, (unsigned long long)u,
                     (unsigned long long)d->seg_summary_first[u], (unsigned long long)nb,
                     (unsigned long long)n_summaries, tiles_note(d->summary_dtype));
    if (d->seg_score_first[u] > n_scores || nb > n_scores - d->seg_score_first[u])
      return INVALID("%s: segment %llu: scores [%llu, +%llu) outside scores (%llu floats)", fn, (unsigned long long)u,
                     (unsigned long long)d->seg_score_first[u], (unsigned long long)nb, (unsigned long long)n_scores);
  }
  return OKV_OK;
}

/* ---- top-K ---- */

okv_status_t okv_hal_validate_topk(const okv_hal_stream_t *stream, const okv_topk_desc_t *d) {
  static const char fn[] = "okv_hal_topk_async";
  OKV_RETURN_IF_ERROR(check_call(stream, d, fn));
  if (d->n_segments < 1) return INVALID("%s: n_segments is 0", fn);
  if (d->k < 1 || d->k > OKV_TOPK_MAX) return INVALID("%s: k %u not in 1..%u", fn, d->k, OKV_TOPK_MAX);
  OKV_RETURN_IF_ERROR(check_range(stream, d->scores, 0, 0, false, fn, "scores"));
  REQUIRE_NONNULL(d->seg_score_first, "seg_score_first");
  REQUIRE_NONNULL(d->seg_n, "seg_n");
  uint64_t n_scores = items_in(d->scores, 4u);
  for (uint32_t u = 0; u < d->n_segments; u++) {
    uint64_t n = d->seg_n[u];
    if (n > 65536u) return INVALID("%s: seg_n[%u] = %llu exceeds 65536 blocks", fn, u, (unsigned long long)n);
    if (n == 0) continue;
    if (d->seg_score_first[u] > n_scores || n > n_scores - d->seg_score_first[u])
      return INVALID("%s: segment %u: scores [%llu, +%llu) outside scores (%llu floats)", fn, u,
                     (unsigned long long)d->seg_score_first[u], (unsigned long long)n, (unsigned long long)n_scores);
  }
  if (d->excl_offsets != NULL) {
    OKV_RETURN_IF_ERROR(check_csr(d->excl_offsets, d->n_segments, fn, "excl_offsets"));
    if (d->excl_offsets[d->n_segments] > 0 && d->excl_blocks == NULL) return INVALID("%s: excl_blocks is NULL", fn);
    for (uint32_t u = 0; u < d->n_segments; u++)
      for (uint32_t i = d->excl_offsets[u]; i < d->excl_offsets[u + 1]; i++)
        if (d->excl_blocks[i] >= d->seg_n[u])
          return INVALID("%s: excl_blocks[%u] = %u is not < seg_n[%u] = %u", fn, i, d->excl_blocks[i], u, d->seg_n[u]);
  }
  if (d->index_map_buffer != NULL) {
    if (d->index_map != NULL) return INVALID("%s: index_map and index_map_buffer both given", fn);
    uint64_t len = 0;
    for (uint32_t u = 0; u < d->n_segments; u++)
      if (d->seg_n[u] > 0 && d->seg_score_first[u] + d->seg_n[u] > len) len = d->seg_score_first[u] + d->seg_n[u];
    OKV_RETURN_IF_ERROR(
        check_range(stream, d->index_map_buffer, d->index_map_offset, len * 4u, true, fn, "index_map_buffer"));
  }
  uint64_t out_bytes = (uint64_t)d->n_segments * d->k * 4u; /* < 2^32 * 2^9 * 4: no overflow */
  OKV_RETURN_IF_ERROR(check_range(stream, d->out_indices, d->out_offset, out_bytes, true, fn, "out_indices"));
  if (d->out_counts != NULL)
    OKV_RETURN_IF_ERROR(
        check_range(stream, d->out_counts, d->counts_offset, (uint64_t)d->n_segments * 4u, true, fn, "out_counts"));
  if (d->index_map_buffer != NULL) { /* the map is read while the outputs are written: no shared byte */
    uint64_t map_bytes = 0;
    for (uint32_t u = 0; u < d->n_segments; u++)
      if (d->seg_n[u] > 0 && (d->seg_score_first[u] + d->seg_n[u]) * 4u > map_bytes)
        map_bytes = (d->seg_score_first[u] + d->seg_n[u]) * 4u;
    if (overlaps(d->index_map_buffer, d->index_map_offset, map_bytes, d->out_indices, d->out_offset, out_bytes) ||
        (d->out_counts != NULL && overlaps(d->index_map_buffer, d->index_map_offset, map_bytes, d->out_counts,
                                           d->counts_offset, (uint64_t)d->n_segments * 4u)))
      return INVALID("%s: index_map_buffer overlaps out_indices or out_counts", fn);
  }
  return OKV_OK;
}

/* ---- selection on slot tables ---- */

/* The slot tables, plan and result that a selection and its commit share (fields of either descriptor). */
typedef struct select_shape_t {
  uint32_t n_heads, n_slots, bitmap_words, plan_stride;
  const okv_hal_buffer_t *table, *plan, *result;
  uint64_t table_offset, plan_offset, result_offset;
  uint64_t table_bytes, plan_bytes, result_bytes; /* set by check_select_shape */
} select_shape_t;

/* The shape of either descriptor (okv_select_desc_t, okv_slot_commit_desc_t: the same field names). */
#define SELECT_SHAPE(d)                                                                                  \
  {                                                                                                      \
    (d)->n_heads, (d)->n_slots, (d)->bitmap_words, (d)->plan_stride, (d)->table, (d)->plan, (d)->result, \
        (d)->table_offset, (d)->plan_offset, (d)->result_offset, 0, 0, 0                                 \
  }

static okv_status_t check_select_shape(const okv_hal_stream_t *stream, select_shape_t *s, const char *fn) {
  if (s->n_heads < 1) return INVALID("%s: n_heads is 0", fn);
  if (s->n_slots < 1 || s->n_slots > OKV_SELECT_MAX_SLOTS)
    return INVALID("%s: n_slots %u not in 1..%u", fn, s->n_slots, OKV_SELECT_MAX_SLOTS);
  if (s->bitmap_words < 1 || s->bitmap_words > OKV_SELECT_MAX_WORDS)
    return INVALID("%s: bitmap_words %u not in 1..%u", fn, s->bitmap_words, OKV_SELECT_MAX_WORDS);
  if (s->plan_stride < 1 || s->plan_stride > OKV_SELECT_MAX_SLOTS)
    return INVALID("%s: plan_stride %u not in 1..%u", fn, s->plan_stride, OKV_SELECT_MAX_SLOTS);
  uint64_t tb = okv_slot_table_bytes(s->n_slots, s->bitmap_words), tables, plan_bytes;
  if (!mul_u64(tb, s->n_heads, &tables))
    return INVALID("%s: %u slot tables of %llu bytes overflow", fn, s->n_heads, (unsigned long long)tb);
  if (s->table_offset & 7u)
    return INVALID("%s: table_offset %llu is not 8-byte aligned", fn, (unsigned long long)s->table_offset);
  OKV_RETURN_IF_ERROR(check_range(stream, s->table, s->table_offset, tables, true, fn, "table"));
  plan_bytes = (uint64_t)s->n_heads * s->plan_stride * OKV_SELECT_PLAN_U32S * 4u; /* < 2^32 * 2^12 * 16 */
  uint64_t result_bytes = (uint64_t)s->n_heads * OKV_SELECT_RESULT_U32S * 4u;
  OKV_RETURN_IF_ERROR(check_range(stream, s->plan, s->plan_offset, plan_bytes, true, fn, "plan"));
  OKV_RETURN_IF_ERROR(check_range(stream, s->result, s->result_offset, result_bytes, true, fn, "result"));
  if (overlaps(s->table, s->table_offset, tables, s->plan, s->plan_offset, plan_bytes) ||
      overlaps(s->table, s->table_offset, tables, s->result, s->result_offset, result_bytes) ||
      overlaps(s->plan, s->plan_offset, plan_bytes, s->result, s->result_offset, result_bytes))
    return INVALID("%s: table, plan and result overlap", fn);
  s->table_bytes = tables;
  s->plan_bytes = plan_bytes;
  s->result_bytes = result_bytes;
  return OKV_OK;
}

okv_status_t okv_hal_validate_select(const okv_hal_stream_t *stream, const okv_select_desc_t *d) {
  static const char fn[] = "okv_hal_select_async";
  OKV_RETURN_IF_ERROR(check_call(stream, d, fn));
  select_shape_t s = SELECT_SHAPE(d);
  OKV_RETURN_IF_ERROR(check_select_shape(stream, &s, fn));
  if (d->predicted_stride < 1 || d->predicted_stride > OKV_TOPK_MAX)
    return INVALID("%s: predicted_stride %u not in 1..%u", fn, d->predicted_stride, OKV_TOPK_MAX);
  uint64_t pred_bytes = (uint64_t)d->n_heads * d->predicted_stride * 4u, counts_bytes = (uint64_t)d->n_heads * 4u;
  OKV_RETURN_IF_ERROR(check_range(stream, d->predicted, d->predicted_offset, pred_bytes, true, fn, "predicted"));
  OKV_RETURN_IF_ERROR(
      check_range(stream, d->predicted_counts, d->counts_offset, counts_bytes, true, fn, "predicted_counts"));
  if (overlaps(d->table, d->table_offset, s.table_bytes, d->predicted, d->predicted_offset, pred_bytes) ||
      overlaps(d->table, d->table_offset, s.table_bytes, d->predicted_counts, d->counts_offset, counts_bytes))
    return INVALID("%s: table overlaps predicted or predicted_counts", fn);
  if (overlaps(d->plan, d->plan_offset, s.plan_bytes, d->predicted, d->predicted_offset, pred_bytes) ||
      overlaps(d->plan, d->plan_offset, s.plan_bytes, d->predicted_counts, d->counts_offset, counts_bytes) ||
      overlaps(d->result, d->result_offset, s.result_bytes, d->predicted, d->predicted_offset, pred_bytes) ||
      overlaps(d->result, d->result_offset, s.result_bytes, d->predicted_counts, d->counts_offset, counts_bytes))
    return INVALID("%s: plan or result overlaps predicted or predicted_counts (heads run in parallel)", fn);
  REQUIRE_NONNULL(d->active_block, "active_block");
  REQUIRE_NONNULL(d->cap, "cap");
  for (uint32_t h = 0; h < d->n_heads; h++)
    if (d->cap[h] > d->plan_stride)
      return INVALID("%s: cap[%u] = %u exceeds plan_stride %u", fn, h, d->cap[h], d->plan_stride);
  return OKV_OK;
}

okv_status_t okv_hal_validate_slot_commit(const okv_hal_stream_t *stream, const okv_slot_commit_desc_t *d) {
  static const char fn[] = "okv_hal_slot_commit_async";
  OKV_RETURN_IF_ERROR(check_call(stream, d, fn));
  select_shape_t s = SELECT_SHAPE(d);
  OKV_RETURN_IF_ERROR(check_select_shape(stream, &s, fn));
  REQUIRE_NONNULL(d->landed, "landed");
  return OKV_OK;
}
