/* Remote sequences (prefill/decode disaggregation, arXiv 2608.08097 "PD
 * disaggregation"): admission with summaries and an initial working set
 * (okv_runtime_seq_add_remote), the per-head present bits, the reads through
 * a sequence's KV source that fill a plan's missing HOST blocks before their
 * HOST->DEVICE copy (okv_rt_remote_fill, called by the background pipeline
 * and the on-demand fetch), the foreground's wait on them, and
 * okv_runtime_seq_read_kv. Owns the remote fields of okv_seq_t / okv_head_t;
 * never includes a transport (a KV source is a callback). docs/api.md
 * "Remote sequences". */
#include "runtime_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SOURCE_NAME_MAX 255u

/* ---- present bits ---- */

/* Whether logical `block` of head `h` of `s` is in the HOST tier. */
static inline bool block_present(const okv_seq_t *s, const okv_head_t *h, uint32_t block) {
  return h->present == NULL || block >= s->n_remote_blocks || okv_block_map_bit(h->present, block);
}

/* ---- admission ---- */

/* Validates every field of a remote prefill against the runtime (nothing is touched). */
static okv_status_t check_prefill(const okv_runtime_t *rt, const okv_remote_prefill_t *p) {
  const okv_runtime_config_t *c = &rt->cfg;
  if (p == NULL) return OKV_RT_INVALID("okv_runtime_seq_add_remote: prefill is NULL");
  if (p->n_tokens == 0 || p->n_tokens > c->max_context_tokens)
    return OKV_RT_INVALID("okv_runtime_seq_add_remote: prefill n_tokens = %u must be in 1..max_context_tokens = %u",
                          p->n_tokens, c->max_context_tokens);
  if (p->summaries == NULL) return OKV_RT_INVALID("okv_runtime_seq_add_remote: prefill summaries is NULL");
  if (p->initial_offsets == NULL) return OKV_RT_INVALID("okv_runtime_seq_add_remote: prefill initial_offsets is NULL");
  if (p->initial_blocks == NULL) return OKV_RT_INVALID("okv_runtime_seq_add_remote: prefill initial_blocks is NULL");
  if (p->initial_kv == NULL) return OKV_RT_INVALID("okv_runtime_seq_add_remote: prefill initial_kv is NULL");
  if (p->source.read_blocks == NULL)
    return OKV_RT_INVALID("okv_runtime_seq_add_remote: prefill source.read_blocks is NULL");
  uint32_t H = c->n_kv_heads, hd = c->head_dim, nb = n_blocks_of(p->n_tokens);
  uint32_t LH = c->n_layers * H; /* <= 65536 * 4096 */
  bool whole = !is_sparse_mode(rt) || nb <= c->dense_threshold_blocks;
  if (p->initial_offsets[0] != 0)
    return OKV_RT_INVALID("okv_runtime_seq_add_remote: prefill initial_offsets[0] = %u must be 0",
                          p->initial_offsets[0]);
  for (uint32_t u = 0; u < LH; u++) {
    uint32_t lo = p->initial_offsets[u], hi = p->initial_offsets[u + 1u], l = u / H, h = u % H;
    if (hi < lo)
      return OKV_RT_INVALID(
          "okv_runtime_seq_add_remote: prefill initial_offsets[%u] = %u is below "
          "initial_offsets[%u] = %u (must not decrease)",
          u + 1u, hi, u, lo);
    uint32_t n = hi - lo;
    if (whole && n != nb)
      return OKV_RT_INVALID(
          "okv_runtime_seq_add_remote: prefill initial_blocks of layer %u KV head %u lists %u "
          "blocks; the runtime keeps this sequence whole (mode %s, %u blocks, "
          "dense_threshold_blocks = %u): list all %u",
          l, h, n, okv_mode_name(c->mode), nb, c->dense_threshold_blocks, nb);
    if (!whole && n > c->budget_blocks + 1u)
      return OKV_RT_INVALID(
          "okv_runtime_seq_add_remote: prefill initial_blocks of layer %u KV head %u lists %u "
          "blocks, more than budget_blocks + 1 = %u",
          l, h, n, c->budget_blocks + 1u);
    if (n == 0)
      return OKV_RT_INVALID(
          "okv_runtime_seq_add_remote: prefill initial_blocks of layer %u KV head %u lists no "
          "block (the active block %u must be listed)",
          l, h, nb - 1u);
    for (uint32_t j = lo; j < hi; j++) {
      uint32_t b = p->initial_blocks[j];
      if (b >= nb)
        return OKV_RT_INVALID(
            "okv_runtime_seq_add_remote: prefill initial_blocks[%u] = %u (layer %u KV head %u) "
            "must be < %u prefill blocks",
            j, b, l, h, nb);
      if (j > lo && b <= p->initial_blocks[j - 1u])
        return OKV_RT_INVALID(
            "okv_runtime_seq_add_remote: prefill initial_blocks[%u] = %u (layer %u KV head %u) "
            "does not follow %u in strictly ascending order",
            j, b, l, h, p->initial_blocks[j - 1u]);
    }
    if (p->initial_blocks[hi - 1u] != nb - 1u)
      return OKV_RT_INVALID(
          "okv_runtime_seq_add_remote: prefill initial_blocks of layer %u KV head %u does not "
          "list the active block %u",
          l, h, nb - 1u);
  }
  for (uint64_t i = 0; i < (uint64_t)LH * nb; i++) {
    const float *mn = p->summaries + i * 2u * hd, *mx = mn + hd;
    for (uint32_t d = 0; d < hd; d++) {
      if (!isfinite(mn[d]) || !isfinite(mx[d]))
        return OKV_RT_INVALID(
            "okv_runtime_seq_add_remote: prefill summaries of layer %u KV head %u block %u hold a "
            "non-finite value (dim %u)",
            (uint32_t)(i / nb / H), (uint32_t)(i / nb % H), (uint32_t)(i % nb), d);
      if (mn[d] > mx[d])
        return OKV_RT_INVALID(
            "okv_runtime_seq_add_remote: prefill summaries of layer %u KV head %u block %u: min "
            "%g > max %g (dim %u)",
            (uint32_t)(i / nb / H), (uint32_t)(i / nb % H), (uint32_t)(i % nb), (double)mn[d], (double)mx[d], d);
    }
  }
  return OKV_OK;
}

/* Writes the f32 summaries of one head (nb blocks) at their HOST block indices, one write per contiguous
 * run of extents, in the runtime's summary dtype: narrowed ones (f16, bf16) are rounded as the runtime's own
 * kernels round them, min toward -infinity and max toward +infinity, through `staging` (nb * summary_bytes
 * bytes; unused for f32). */
static okv_status_t write_summaries(okv_runtime_t *rt, const okv_head_t *head, const float *summaries, uint32_t nb,
                                    uint16_t *staging) {
  uint32_t E = rt->extent_blocks, n_ext = ceil_div_u32(nb, E), hd = rt->cfg.head_dim;
  okv_dtype_t dt = rt->cfg.summary_dtype;
  const void *src = summaries;
  if (dt != OKV_DTYPE_F32) {
    for (uint64_t i = 0; i < (uint64_t)nb * hd; i++) {
      uint64_t b = i / hd, d = i % hd, mn = b * 2u * hd + d, mx = mn + hd;
      staging[mn] = dt == OKV_DTYPE_F16 ? okv_f32_to_f16_down(summaries[mn]) : okv_f32_to_bf16_down(summaries[mn]);
      staging[mx] = dt == OKV_DTYPE_F16 ? okv_f32_to_f16_up(summaries[mx]) : okv_f32_to_bf16_up(summaries[mx]);
    }
    src = staging;
  }
  for (uint32_t e = 0; e < n_ext;) {
    uint32_t start = head->extents[e], run = 1;
    while (e + run < n_ext && head->extents[e + run] == start + run) run++;
    uint32_t b0 = e * E, n = run * E;
    if (n > nb - b0) n = nb - b0;
    OKV_RETURN_IF_ERROR(okv_hal_buffer_write(rt->summaries, (uint64_t)start * E * rt->summary_bytes,
                                             (const uint8_t *)src + (uint64_t)b0 * rt->summary_bytes,
                                             (uint64_t)n * rt->summary_bytes));
    e += run;
  }
  return OKV_OK;
}

okv_status_t okv_runtime_seq_add_remote(okv_runtime_t *rt, const okv_remote_prefill_t *p, uint32_t *out_seq_id) {
  static const char fn[] = "okv_runtime_seq_add_remote";
  if (rt == NULL) return OKV_RT_INVALID("%s: runtime is NULL", fn);
  if (out_seq_id == NULL) return OKV_RT_INVALID("%s: out_seq_id is NULL", fn);
  if (rt->dev_sel)
    return OKV_RT_INVALID(
        "%s: remote sequences are not supported with device_selection (their reads through a KV "
        "source drop plan entries one by one)",
        fn);
  OKV_RETURN_IF_ERROR(check_prefill(rt, p));
  okv_seq_t *s = NULL;
  OKV_RETURN_IF_ERROR(okv_rt_seq_reserve(rt, p->n_tokens, fn, &s));
  const okv_runtime_config_t *c = &rt->cfg;
  uint32_t LH = c->n_layers * c->n_kv_heads, nb = n_blocks_of(p->n_tokens);
  uint64_t bb = rt->block_bytes;
  okv_status_t st = OKV_OK;
  okv_block_copy_t *pairs = NULL;
  uint16_t *staging = NULL;
  s->remote = true;
  s->n_remote_blocks = nb;
  s->source = p->source;
  const char *name = p->source.name != NULL ? p->source.name : "unnamed source";
  size_t len = strlen(name) < SOURCE_NAME_MAX ? strlen(name) : SOURCE_NAME_MAX;
  ALLOC_ARR(s->source_name, len + 1u);
  memcpy(s->source_name, name, len);
  s->source.name = s->source_name;
  uint64_t n_init = p->initial_offsets[LH];
  ALLOC_ARR(pairs, n_init);
  if (c->summary_dtype != OKV_DTYPE_F32) ALLOC_ARR(staging, (uint64_t)nb * 2u * c->head_dim);
  for (uint32_t u = 0; u < LH; u++) {
    okv_head_t *head = &s->heads[u];
    ALLOC_ARR(head->present, (nb + 63u) / 64u);
    for (uint32_t j = p->initial_offsets[u]; j < p->initial_offsets[u + 1u]; j++) {
      uint32_t b = p->initial_blocks[j];
      memcpy(rt->host.ptr + host_block_of(rt, head, b) * bb, (const uint8_t *)p->initial_kv + (uint64_t)j * bb, bb);
      head->present[b >> 6] |= 1ull << (b & 63u);
      okv_rt_seq_map_initial(rt, head, b, &pairs[j]); /* ascending per head, as okv_runtime_seq_add maps */
    }
    st = write_summaries(rt, head, p->summaries + (uint64_t)u * nb * 2u * c->head_dim, nb, staging);
    /* Two-level scoring: the head's group summaries from its block summaries (written above). */
    if (st == OKV_OK) st = okv_rt_groups_rebuild_head(rt, rt->compute, head);
    if (st != OKV_OK) {
      st = okv_status_annotate(st, "%s: writing the summaries", fn);
      goto fail;
    }
  }
  st = okv_rt_seq_load_initial(rt, s, OKV_OK, pairs, n_init, fn);
  if (st != OKV_OK) goto fail;
  okv_rt_free(&rt->alloc, pairs);
  okv_rt_free(&rt->alloc, staging);
  okv_rt_seq_publish(rt, s, out_seq_id);
  return OKV_OK;
fail:
  OKV_IGNORE_ERROR(okv_hal_stream_synchronize(rt->compute)); /* no pending rebuild or error left behind */
  okv_rt_free(&rt->alloc, pairs);
  okv_rt_free(&rt->alloc, staging);
  okv_rt_seq_release(rt, s);
  return st;
}

/* ---- reads through the source ---- */

static int cmp_read(const void *a, const void *b) {
  uint64_t x = ((const okv_rt_read_t *)a)->index, y = ((const okv_rt_read_t *)b)->index;
  return x < y ? -1 : x > y;
}

/* Before a plan's HOST->DEVICE copy (layer `layer`; plan entries grouped by sequence, pairs[i] the copy of
 * plan[i]): for each remote sequence of the plan, reads every planned block not yet present through its
 * source — one read_blocks call with all of them, ascending — into the sequence's own HOST blocks and marks
 * them present. A failed read drops those entries (their slots go back to the head's free stack; counted in
 * failed_blocks and pipeline_errors; the victims stay mapped, the blocks stay misses) and marks the sequence
 * lost with the status. Compacts plan and pairs and returns the entries left. Adds remote_blocks,
 * remote_bytes, bytes_moved[REMOTE][HOST] and remote_seconds to `stats`; widens [*out_t0, *out_t1] (wall
 * time, 0 = none yet) to cover the reads. Runs on the thread that owns the layer's maps. */
uint32_t okv_rt_remote_fill(okv_runtime_t *rt, uint32_t layer, okv_predict_ctx_t *ctx, okv_plan_entry_t *plan,
                            okv_block_copy_t *pairs, uint32_t n_plan, okv_step_stats_t *stats, double *out_t0,
                            double *out_t1) {
  uint32_t H = rt->cfg.n_kv_heads;
  uint64_t bb = rt->block_bytes;
  uint32_t kept = 0;
  for (uint32_t i = 0; i < n_plan;) {
    uint32_t j = i;
    while (j < n_plan && plan[j].seq_index == plan[i].seq_index && plan[j].seq_id == plan[i].seq_id) j++;
    okv_seq_t *s = &rt->seqs[plan[i].seq_index]; /* live: the plan was built from it just now */
    uint32_t n = 0;
    if (s->remote) {
      for (uint32_t k = i; k < j; k++) {
        const okv_head_t *head = seq_head(rt, s, layer, plan[k].kv_head);
        if (block_present(s, head, plan[k].block)) continue;
        ctx->rd[n].index = ((uint64_t)layer * H + plan[k].kv_head) * s->n_remote_blocks + plan[k].block;
        ctx->rd[n].entry = k;
        n++;
      }
    }
    if (n > 0) {
      qsort(ctx->rd, n, sizeof *ctx->rd, cmp_read);
      for (uint32_t k = 0; k < n; k++) {
        const okv_plan_entry_t *e = &plan[ctx->rd[k].entry];
        ctx->rd_index[k] = ctx->rd[k].index;
        ctx->rd_dst[k] = rt->host.ptr + host_block_of(rt, seq_head(rt, s, layer, e->kv_head), e->block) * bb;
      }
      double t0 = okv_rt_wall_s();
      okv_status_t st = s->source.read_blocks(s->source.user, n, ctx->rd_index, ctx->rd_dst);
      double t1 = okv_rt_wall_s();
      stats->remote_seconds += t1 - t0;
      if (*out_t0 <= 0) *out_t0 = t0;
      *out_t1 = t1;
      if (st == OKV_OK) {
        for (uint32_t k = 0; k < n; k++) {
          const okv_plan_entry_t *e = &plan[ctx->rd[k].entry];
          okv_head_t *head = seq_head(rt, s, layer, e->kv_head);
          head->present[e->block >> 6] |= 1ull << (e->block & 63u);
        }
        stats->remote_blocks += n;
        stats->remote_bytes += (uint64_t)n * bb;
        stats->bytes_moved[OKV_TIER_REMOTE][OKV_TIER_HOST] += (uint64_t)n * bb;
      } else {
        for (uint32_t k = 0; k < n; k++) {
          okv_plan_entry_t *e = &plan[ctx->rd[k].entry];
          okv_block_map_push_free(&seq_head(rt, s, layer, e->kv_head)->map, e->slot);
          e->block = OKV_NO_BLOCK; /* dropped */
        }
        stats->failed_blocks += n;
        stats->pipeline_errors++;
        if (s->lost == OKV_OK) {
          s->lost = okv_status_annotate(st, "reading %u prefill blocks of layer %u through KV source '%s'", n, layer,
                                        s->source_name);
          __atomic_store_n(&s->lost_flag, 1, __ATOMIC_RELEASE);
        } else {
          okv_status_free(st);
        }
      }
    }
    for (uint32_t k = i; k < j; k++) {
      if (plan[k].block == OKV_NO_BLOCK) continue;
      plan[kept] = plan[k];
      pairs[kept] = pairs[k];
      kept++;
    }
    i = j;
  }
  return kept;
}

/* ---- read_kv ---- */

static inline float load_elem(const uint8_t *base, okv_dtype_t dt, size_t idx) {
  switch (dt) {
    case OKV_DTYPE_F32: {
      float x;
      memcpy(&x, base + idx * 4u, 4u);
      return x;
    }
    case OKV_DTYPE_F16: {
      uint16_t x;
      memcpy(&x, base + idx * 2u, 2u);
      return okv_f16_to_f32(x);
    }
    default: {
      uint16_t x;
      memcpy(&x, base + idx * 2u, 2u);
      return okv_bf16_to_f32(x);
    }
  }
}

okv_status_t okv_runtime_seq_read_kv(const okv_runtime_t *rt, uint32_t seq_id, uint32_t layer, uint32_t first_token,
                                     uint32_t n_tokens, float *k_out, float *v_out) {
  if (rt == NULL) return OKV_RT_INVALID("okv_runtime_seq_read_kv: runtime is NULL");
  const okv_runtime_config_t *c = &rt->cfg;
  if (layer >= c->n_layers)
    return OKV_RT_INVALID("okv_runtime_seq_read_kv: layer = %u must be < n_layers = %u", layer, c->n_layers);
  const okv_seq_t *s = okv_rt_seq_find(rt, seq_id);
  if (s == NULL) return okv_status_make(OKV_STATUS_NOT_FOUND, "okv_runtime_seq_read_kv: no sequence %u", seq_id);
  uint32_t have = s->n_tokens[layer];
  if (first_token > have || n_tokens > have - first_token)
    return OKV_RT_INVALID("okv_runtime_seq_read_kv: tokens [%u, %llu) of layer %u: sequence %u holds %u", first_token,
                          (unsigned long long)first_token + n_tokens, layer, seq_id, have);
  if (n_tokens == 0) return OKV_OK;
  if (k_out == NULL || v_out == NULL) return OKV_RT_INVALID("okv_runtime_seq_read_kv: k_out or v_out is NULL");
  /* The worker writes remote blocks and present bits: let it finish its queued jobs. */
  okv_rt_jobs_drain((okv_runtime_t *)rt);
  uint32_t H = c->n_kv_heads, hd = c->head_dim;
  uint32_t b0 = first_token / OKV_BLOCK_TOKENS, b1 = (first_token + n_tokens - 1u) / OKV_BLOCK_TOKENS;
  for (uint32_t h = 0; h < H && s->remote; h++) {
    const okv_head_t *head = seq_head(rt, s, layer, h);
    for (uint32_t b = b0; b <= b1; b++)
      if (!block_present(s, head, b))
        return okv_status_make(OKV_STATUS_NOT_FOUND,
                               "okv_runtime_seq_read_kv: sequence %u layer %u KV head %u: prefill block %u (tokens "
                               "%u..%u) is not fetched from KV source '%s' yet",
                               seq_id, layer, h, b, b * OKV_BLOCK_TOKENS, b * OKV_BLOCK_TOKENS + 15u, s->source_name);
  }
  for (uint32_t h = 0; h < H; h++) {
    const okv_head_t *head = seq_head(rt, s, layer, h);
    for (uint32_t t = first_token; t < first_token + n_tokens; t++) {
      const uint8_t *base = rt->host.ptr + host_block_of(rt, head, t / OKV_BLOCK_TOKENS) * rt->block_bytes;
      uint32_t pos = t % OKV_BLOCK_TOKENS;
      float *ko = k_out + ((size_t)(t - first_token) * H + h) * hd,
            *vo = v_out + ((size_t)(t - first_token) * H + h) * hd;
      for (uint32_t d = 0; d < hd; d++) {
        ko[d] = load_elem(base, c->kv_dtype, (size_t)d * OKV_BLOCK_TOKENS + pos);
        vo[d] = load_elem(base, c->kv_dtype, (size_t)OKV_BLOCK_TOKENS * hd + (size_t)pos * hd + d);
      }
    }
  }
  return OKV_OK;
}
