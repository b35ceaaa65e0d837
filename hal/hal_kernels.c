/* Kernel entry points of the HAL: dtype helpers, conversions, descriptor
 * validation (every shape, index and buffer range, overflow-safe) and dispatch
 * through the device vtable; deep clones of descriptors for backends that run
 * kernels later on a worker thread.
 *
 * Validation is complete before anything is enqueued: INVALID_ARGUMENT names
 * the field, and nothing is written. Semantics of each kernel:
 * include/oasiskv/kernels.h and docs/kernels.md. */
#include <math.h>
#include <string.h>

#include <stdio.h>

#include "hal/hal_fault.h"
#include "hal/hal_impl.h"

/* ---- dtype helpers ---- */

size_t okv_dtype_size(okv_dtype_t dtype) {
  switch (dtype) {
    case OKV_DTYPE_F32: return 4;
    case OKV_DTYPE_F16: return 2;
    case OKV_DTYPE_BF16: return 2;
    default: return 0;
  }
}

const char *okv_dtype_name(okv_dtype_t dtype) {
  switch (dtype) {
    case OKV_DTYPE_F32: return "f32";
    case OKV_DTYPE_F16: return "f16";
    case OKV_DTYPE_BF16: return "bf16";
    default: return "unknown";
  }
}

uint64_t okv_block_bytes(okv_dtype_t dtype, uint32_t head_dim) {
  return 2ull * OKV_BLOCK_TOKENS * (uint64_t)head_dim * (uint64_t)okv_dtype_size(dtype);
}

uint64_t okv_summary_bytes(uint32_t head_dim) { return 2ull * (uint64_t)head_dim * 4ull; }

/* ---- conversions (round to nearest even) ---- */

static uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static float bits_f32(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

uint16_t okv_f32_to_bf16(float x) {
  uint32_t u = f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float okv_bf16_to_f32(uint16_t x) { return bits_f32((uint32_t)x << 16); }

uint16_t okv_f32_to_f16(float x) {
  uint32_t u = f32_bits(x);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu)); /* NaN stays NaN */
  if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* rounds to >= 65520: infinity */
  if (a < 0x38800000u) {
    /* f16 subnormal or zero: value = m * 2^-24, m = round(a_value * 2^24). */
    if (a < 0x33000000u) return sign; /* < 2^-25: rounds to zero (2^-25 ties to even 0) */
    uint32_t e = a >> 23;             /* biased exponent, 102..112 */
    uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
    uint32_t shift = 126u - e;        /* 14..24: mant * 2^(e-150) * 2^24 = mant >> (126 - e) */
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
  }
  /* Normal: rebias exponent 127 -> 15 and round 23 -> 10 mantissa bits. */
  uint32_t r = a - 0x38000000u; /* exponent - 112 */
  r += 0xFFFu + ((r >> 13) & 1u);
  return (uint16_t)(sign | (r >> 13));
}

float okv_f16_to_f32(uint16_t x) {
  uint32_t sign = (uint32_t)(x & 0x8000u) << 16;
  uint32_t e = (x >> 10) & 0x1Fu;
  uint32_t m = x & 0x3FFu;
  if (e == 0x1Fu) return bits_f32(sign | 0x7F800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return bits_f32(sign);
    float v = (float)m * 0x1.0p-24f;
    return sign ? -v : v;
  }
  return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* ---- validation helpers ---- */

#define INVALID(...) okv_status_make(OKV_STATUS_INVALID_ARGUMENT, __VA_ARGS__)

/* a * b with overflow detection. */
static bool mul_u64(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow(a, b, out); }

static okv_status_t check_stream(const okv_hal_stream_t *stream, const char *fn) {
  okv_status_t s = okv_hal_check_live(stream, OKV_HAL_KIND_STREAM, "stream");
  if (s != OKV_OK) return okv_status_annotate(s, "%s", fn);
  if (stream->device == NULL || stream->device->vtable == NULL)
    return INVALID("%s: stream has no device", fn);
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
  if (align4 && (offset & 3u)) return INVALID("%s: offset of %s (%llu) is not 4-byte aligned", fn, name,
                                               (unsigned long long)offset);
  if (offset > buf->size || bytes > buf->size - offset)
    return INVALID("%s: %s range [%llu, +%llu bytes) exceeds its size %llu", fn, name, (unsigned long long)offset,
                   (unsigned long long)bytes, (unsigned long long)buf->size);
  return OKV_OK;
}

/* Number of whole items of `item_bytes` that fit in `buf`. */
static uint64_t items_in(const okv_hal_buffer_t *buf, uint64_t item_bytes) {
  return item_bytes ? buf->size / item_bytes : 0;
}

static okv_status_t check_head_dim(uint32_t head_dim, const char *fn) {
  if (head_dim < 1 || head_dim > 256) return INVALID("%s: head_dim %u not in 1..256", fn, head_dim);
  return OKV_OK;
}

static okv_status_t check_dtype(okv_dtype_t dtype, const char *fn) {
  if ((unsigned)dtype >= (unsigned)OKV_DTYPE_COUNT) return INVALID("%s: kv_dtype %d is not a dtype", fn, (int)dtype);
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

/* An injected kernel failure: asynchronous, like a real launch failure. */
static okv_status_t kernel_fault(okv_hal_stream_t *stream, const char *what) {
  char msg[96];
  snprintf(msg, sizeof msg, "injected kernel failure: %s did not run", what);
  return stream->device->vtable->enqueue_failure(stream, OKV_STATUS_INTERNAL, msg);
}

static okv_status_t unimplemented(const okv_hal_stream_t *stream, const char *what) {
  return okv_status_make(OKV_STATUS_UNAVAILABLE, "backend '%s' does not implement %s", stream->device->info.backend,
                         what);
}

/* ---- attention ---- */

static okv_status_t validate_attention(const okv_hal_stream_t *stream, const okv_attention_desc_t *d) {
  static const char fn[] = "okv_hal_attention_async";
  OKV_RETURN_IF_ERROR(check_stream(stream, fn));
  if (d == NULL) return INVALID("%s: desc is NULL", fn);
  if (d->n_seqs < 1) return INVALID("%s: n_seqs is 0", fn);
  if (d->n_kv_heads < 1) return INVALID("%s: n_kv_heads is 0", fn);
  if (d->group_size < 1) return INVALID("%s: group_size is 0", fn);
  OKV_RETURN_IF_ERROR(check_head_dim(d->head_dim, fn));
  if (d->n_query_tokens < 1 || d->n_query_tokens > 4)
    return INVALID("%s: n_query_tokens %u not in 1..4", fn, d->n_query_tokens);
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
  if (d->kv_pool == NULL) return INVALID("%s: kv_pool is NULL", fn);
  if (!mul_u64(d->n_slots, slot_bytes, &pool_bytes))
    return INVALID("%s: n_slots %llu * slot bytes overflows", fn, (unsigned long long)d->n_slots);
  OKV_RETURN_IF_ERROR(check_range(stream, d->kv_pool, 0, pool_bytes, false, fn, "kv_pool (n_slots slots)"));

  /* Working sets. */
  OKV_RETURN_IF_ERROR(check_csr(d->ws_offsets, n_units, fn, "ws_offsets"));
  uint64_t n_ws = d->ws_offsets[n_units];
  if (n_ws > 0) {
    if (d->ws_slots == NULL) return INVALID("%s: ws_slots is NULL", fn);
    if (d->ws_valid == NULL) return INVALID("%s: ws_valid is NULL", fn);
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

okv_status_t okv_hal_attention_async(okv_hal_stream_t *stream, const okv_attention_desc_t *desc) {
  OKV_RETURN_IF_ERROR(validate_attention(stream, desc));
  if (stream->device->vtable->attention == NULL) return unimplemented(stream, "attention");
  if (okv_hal_fault_op(stream->device, OKV_HAL_OP_KERNEL, OKV_TIER_COUNT, OKV_TIER_COUNT))
    return kernel_fault(stream, "attention");
  return stream->device->vtable->attention(stream, desc);
}

/* ---- summaries ---- */

static okv_status_t validate_summary(const okv_hal_stream_t *stream, const okv_summary_desc_t *d) {
  static const char fn[] = "okv_hal_summarize_blocks_async";
  OKV_RETURN_IF_ERROR(check_stream(stream, fn));
  if (d == NULL) return INVALID("%s: desc is NULL", fn);
  OKV_RETURN_IF_ERROR(check_head_dim(d->head_dim, fn));
  OKV_RETURN_IF_ERROR(check_dtype(d->kv_dtype, fn));
  OKV_RETURN_IF_ERROR(check_range(stream, d->kv, 0, 0, false, fn, "kv"));
  OKV_RETURN_IF_ERROR(check_range(stream, d->summaries, 0, 0, false, fn, "summaries"));
  if (d->n_blocks == 0) return OKV_OK;
  if (d->block_index == NULL) return INVALID("%s: block_index is NULL", fn);
  if (d->valid == NULL) return INVALID("%s: valid is NULL", fn);
  if (d->summary_index == NULL) return INVALID("%s: summary_index is NULL", fn);
  uint64_t n_kv_blocks = items_in(d->kv, okv_block_bytes(d->kv_dtype, d->head_dim));
  uint64_t n_summaries = items_in(d->summaries, okv_summary_bytes(d->head_dim));
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

okv_status_t okv_hal_summarize_blocks_async(okv_hal_stream_t *stream, const okv_summary_desc_t *desc) {
  OKV_RETURN_IF_ERROR(validate_summary(stream, desc));
  if (desc->n_blocks == 0) return OKV_OK;
  if (stream->device->vtable->summarize_blocks == NULL) return unimplemented(stream, "summarize_blocks");
  if (okv_hal_fault_op(stream->device, OKV_HAL_OP_KERNEL, OKV_TIER_COUNT, OKV_TIER_COUNT))
    return kernel_fault(stream, "summarize_blocks");
  return stream->device->vtable->summarize_blocks(stream, desc);
}

okv_status_t okv_hal_summary_append_async(okv_hal_stream_t *stream, okv_hal_buffer_t *summaries, uint32_t head_dim,
                                          okv_dtype_t kv_dtype, uint32_t n, const uint64_t *summary_index,
                                          const float *keys, const uint8_t *first) {
  static const char fn[] = "okv_hal_summary_append_async";
  OKV_RETURN_IF_ERROR(check_stream(stream, fn));
  OKV_RETURN_IF_ERROR(check_head_dim(head_dim, fn));
  OKV_RETURN_IF_ERROR(check_dtype(kv_dtype, fn));
  OKV_RETURN_IF_ERROR(check_range(stream, summaries, 0, 0, false, fn, "summaries"));
  if (n == 0) return OKV_OK;
  if (summary_index == NULL) return INVALID("%s: summary_index is NULL", fn);
  if (keys == NULL) return INVALID("%s: keys is NULL", fn);
  if (first == NULL) return INVALID("%s: first is NULL", fn);
  uint64_t n_summaries = items_in(summaries, okv_summary_bytes(head_dim));
  for (uint32_t i = 0; i < n; i++)
    if (summary_index[i] >= n_summaries)
      return INVALID("%s: summary_index[%u] = %llu outside summaries (%llu summaries)", fn, i,
                     (unsigned long long)summary_index[i], (unsigned long long)n_summaries);
  if (stream->device->vtable->summary_append == NULL) return unimplemented(stream, "summary_append");
  if (okv_hal_fault_op(stream->device, OKV_HAL_OP_KERNEL, OKV_TIER_COUNT, OKV_TIER_COUNT))
    return kernel_fault(stream, "summary_append");
  return stream->device->vtable->summary_append(stream, summaries, head_dim, kv_dtype, n, summary_index, keys,
                                                first);
}

/* ---- scoring ---- */

static okv_status_t validate_score(const okv_hal_stream_t *stream, const okv_score_desc_t *d) {
  static const char fn[] = "okv_hal_score_blocks_async";
  OKV_RETURN_IF_ERROR(check_stream(stream, fn));
  if (d == NULL) return INVALID("%s: desc is NULL", fn);
  if (d->n_seqs < 1) return INVALID("%s: n_seqs is 0", fn);
  if (d->n_kv_heads < 1) return INVALID("%s: n_kv_heads is 0", fn);
  if (d->group_size < 1) return INVALID("%s: group_size is 0", fn);
  OKV_RETURN_IF_ERROR(check_head_dim(d->head_dim, fn));
  if (d->n_query_tokens < 1 || d->n_query_tokens > 4)
    return INVALID("%s: n_query_tokens %u not in 1..4", fn, d->n_query_tokens);
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
  OKV_RETURN_IF_ERROR(check_range(stream, d->q, d->q_offset, q_bytes, true, fn, "q"));
  OKV_RETURN_IF_ERROR(check_range(stream, d->summaries, 0, 0, false, fn, "summaries"));
  OKV_RETURN_IF_ERROR(check_range(stream, d->scores, 0, 0, false, fn, "scores"));
  if (d->seg_summary_first == NULL) return INVALID("%s: seg_summary_first is NULL", fn);
  if (d->seg_n_blocks == NULL) return INVALID("%s: seg_n_blocks is NULL", fn);
  if (d->seg_score_first == NULL) return INVALID("%s: seg_score_first is NULL", fn);
  uint64_t n_summaries = items_in(d->summaries, okv_summary_bytes(d->head_dim));
  uint64_t n_scores = items_in(d->scores, 4u);
  for (uint64_t u = 0; u < n_units; u++) {
    uint64_t nb = d->seg_n_blocks[u];
    if (nb == 0) continue;
    if (d->seg_summary_first[u] > n_summaries || nb > n_summaries - d->seg_summary_first[u])
      return INVALID("%s: segment %llu: summaries [%llu, +%llu) outside summaries (%llu)", fn,
                     (unsigned long long)u, (unsigned long long)d->seg_summary_first[u], (unsigned long long)nb,
                     (unsigned long long)n_summaries);
    if (d->seg_score_first[u] > n_scores || nb > n_scores - d->seg_score_first[u])
      return INVALID("%s: segment %llu: scores [%llu, +%llu) outside scores (%llu floats)", fn,
                     (unsigned long long)u, (unsigned long long)d->seg_score_first[u], (unsigned long long)nb,
                     (unsigned long long)n_scores);
  }
  return OKV_OK;
}

okv_status_t okv_hal_score_blocks_async(okv_hal_stream_t *stream, const okv_score_desc_t *desc) {
  OKV_RETURN_IF_ERROR(validate_score(stream, desc));
  if (stream->device->vtable->score_blocks == NULL) return unimplemented(stream, "score_blocks");
  if (okv_hal_fault_op(stream->device, OKV_HAL_OP_KERNEL, OKV_TIER_COUNT, OKV_TIER_COUNT))
    return kernel_fault(stream, "score_blocks");
  return stream->device->vtable->score_blocks(stream, desc);
}

/* ---- top-K ---- */

static okv_status_t validate_topk(const okv_hal_stream_t *stream, const okv_topk_desc_t *d) {
  static const char fn[] = "okv_hal_topk_async";
  OKV_RETURN_IF_ERROR(check_stream(stream, fn));
  if (d == NULL) return INVALID("%s: desc is NULL", fn);
  if (d->n_segments < 1) return INVALID("%s: n_segments is 0", fn);
  if (d->k < 1 || d->k > OKV_TOPK_MAX) return INVALID("%s: k %u not in 1..%u", fn, d->k, OKV_TOPK_MAX);
  OKV_RETURN_IF_ERROR(check_range(stream, d->scores, 0, 0, false, fn, "scores"));
  if (d->seg_score_first == NULL) return INVALID("%s: seg_score_first is NULL", fn);
  if (d->seg_n == NULL) return INVALID("%s: seg_n is NULL", fn);
  uint64_t n_scores = items_in(d->scores, 4u);
  for (uint32_t u = 0; u < d->n_segments; u++) {
    uint64_t n = d->seg_n[u];
    if (n > 65536u) return INVALID("%s: seg_n[%u] = %llu exceeds 65536 blocks", fn, u, (unsigned long long)n);
    if (n == 0) continue;
    if (d->seg_score_first[u] > n_scores || n > n_scores - d->seg_score_first[u])
      return INVALID("%s: segment %u: scores [%llu, +%llu) outside scores (%llu floats)", fn, u,
                     (unsigned long long)d->seg_score_first[u], (unsigned long long)n,
                     (unsigned long long)n_scores);
  }
  if (d->excl_offsets != NULL) {
    OKV_RETURN_IF_ERROR(check_csr(d->excl_offsets, d->n_segments, fn, "excl_offsets"));
    if (d->excl_offsets[d->n_segments] > 0 && d->excl_blocks == NULL) return INVALID("%s: excl_blocks is NULL", fn);
    for (uint32_t u = 0; u < d->n_segments; u++)
      for (uint32_t i = d->excl_offsets[u]; i < d->excl_offsets[u + 1]; i++)
        if (d->excl_blocks[i] >= d->seg_n[u])
          return INVALID("%s: excl_blocks[%u] = %u is not < seg_n[%u] = %u", fn, i, d->excl_blocks[i], u,
                         d->seg_n[u]);
  }
  uint64_t out_bytes = (uint64_t)d->n_segments * d->k * 4u; /* < 2^32 * 2^9 * 4: no overflow */
  OKV_RETURN_IF_ERROR(check_range(stream, d->out_indices, d->out_offset, out_bytes, true, fn, "out_indices"));
  if (d->out_counts != NULL)
    OKV_RETURN_IF_ERROR(check_range(stream, d->out_counts, d->counts_offset, (uint64_t)d->n_segments * 4u, true, fn,
                                    "out_counts"));
  return OKV_OK;
}

okv_status_t okv_hal_topk_async(okv_hal_stream_t *stream, const okv_topk_desc_t *desc) {
  OKV_RETURN_IF_ERROR(validate_topk(stream, desc));
  if (stream->device->vtable->topk == NULL) return unimplemented(stream, "topk");
  if (okv_hal_fault_op(stream->device, OKV_HAL_OP_KERNEL, OKV_TIER_COUNT, OKV_TIER_COUNT))
    return kernel_fault(stream, "topk");
  return stream->device->vtable->topk(stream, desc);
}

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
