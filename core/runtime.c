/* OasisKV runtime: tiers, head-wise maps, look-ahead selection with capped
 * eviction and the layer-pipelined background prefetch (arXiv 2608.08097).
 * Uses only the public HAL (hal.h, kernels.h); never a vendor header.
 *
 * Slot policy (docs/api.md): in the sparse modes every (sequence, layer, KV
 * head) owns K + 1 + C slots, reserved at seq_add. A transfer always lands in a
 * FREE owned slot; the victim it replaces stays mapped (and readable) until
 * the transfer is committed successfully, so attention never reads a slot that
 * is being written and a failed transfer disturbs nothing. */
#include "core/runtime_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define INVALID(...) okv_status_make(OKV_STATUS_INVALID_ARGUMENT, __VA_ARGS__)
#define HOST_OOM(what) okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "runtime: host allocator failed for %s", what)

/* Wall clock (stalls, attention). */
static double wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Bookkeeping is timed in the calling thread's CPU time, so that time the
 * thread spends preempted (other processes, kernel worker threads) does not
 * count as runtime overhead. */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void xfree(const okv_allocator_t *a, void *p) {
  if (p != NULL) okv_free(a, p);
}

static inline uint32_t ceil_div_u32(uint32_t a, uint32_t b) { return (a + b - 1u) / b; }

/* ------------------------------------------------------------------ modes */

static const char *const k_mode_names[OKV_MODE_COUNT] = {"dense", "oasis", "proxy", "ondemand"};

const char *okv_mode_name(okv_mode_t mode) {
  return (unsigned)mode < OKV_MODE_COUNT ? k_mode_names[mode] : "unknown";
}

okv_status_t okv_mode_parse(const char *name, okv_mode_t *out_mode) {
  if (name == NULL) return INVALID("okv_mode_parse: name is NULL");
  if (out_mode == NULL) return INVALID("okv_mode_parse: out_mode is NULL");
  for (int i = 0; i < OKV_MODE_COUNT; i++)
    if (strcmp(name, k_mode_names[i]) == 0) {
      *out_mode = (okv_mode_t)i;
      return OKV_OK;
    }
  return INVALID("okv_mode_parse: unknown mode '%s' (dense, oasis, proxy, ondemand)", name);
}

/* ------------------------------------------------------------------ config */

#define OKV_DENSE_THRESHOLD_DEFAULT UINT32_MAX /* resolves to budget_blocks */
#define OKV_MAX_CONTEXT_LIMIT (16u * 65536u)

void okv_runtime_config_init(okv_runtime_config_t *config) {
  if (config == NULL) return;
  memset(config, 0, sizeof *config);
  config->kv_dtype = OKV_DTYPE_F32;
  config->block_tokens = OKV_BLOCK_TOKENS;
  config->mode = OKV_MODE_OASIS;
  config->budget_blocks = 128;
  config->fetch_ratio = 0.05;
  config->dense_threshold_blocks = OKV_DENSE_THRESHOLD_DEFAULT;
  config->max_seqs = 64;
  config->max_context_tokens = 131072;
}

okv_status_t okv_runtime_config_validate(const okv_runtime_config_t *c) {
  if (c == NULL) return INVALID("runtime config: config is NULL");
  if (c->n_layers == 0 || c->n_layers > 65536) return INVALID("runtime config: n_layers = %u must be in 1..65536", c->n_layers);
  if (c->n_kv_heads == 0 || c->n_kv_heads > 4096) return INVALID("runtime config: n_kv_heads = %u must be in 1..4096", c->n_kv_heads);
  if (c->n_q_heads == 0 || c->n_q_heads % c->n_kv_heads != 0)
    return INVALID("runtime config: n_q_heads = %u must be a positive multiple of n_kv_heads = %u", c->n_q_heads,
                   c->n_kv_heads);
  if (c->n_q_heads > 65536) return INVALID("runtime config: n_q_heads = %u exceeds 65536", c->n_q_heads);
  if (c->head_dim == 0 || c->head_dim > 256) return INVALID("runtime config: head_dim = %u must be in 1..256", c->head_dim);
  if ((unsigned)c->kv_dtype >= OKV_DTYPE_COUNT) return INVALID("runtime config: kv_dtype = %d is not a dtype", (int)c->kv_dtype);
  if (c->block_tokens != OKV_BLOCK_TOKENS) return INVALID("runtime config: block_tokens = %u must be 16", c->block_tokens);
  if ((unsigned)c->mode >= OKV_MODE_COUNT) return INVALID("runtime config: mode = %d is not a mode", (int)c->mode);
  if (c->budget_blocks == 0 || c->budget_blocks > OKV_TOPK_MAX)
    return INVALID("runtime config: budget_blocks = %u must be in 1..%u", c->budget_blocks, OKV_TOPK_MAX);
  if (!(c->fetch_ratio > 0.0 && c->fetch_ratio <= 1.0))
    return INVALID("runtime config: fetch_ratio = %g must be in (0, 1]", c->fetch_ratio);
  if (c->dense_threshold_blocks != OKV_DENSE_THRESHOLD_DEFAULT && c->dense_threshold_blocks > c->budget_blocks)
    return INVALID("runtime config: dense_threshold_blocks = %u must be <= budget_blocks = %u",
                   c->dense_threshold_blocks, c->budget_blocks);
  if (c->max_seqs == 0 || c->max_seqs > 65536) return INVALID("runtime config: max_seqs = %u must be in 1..65536", c->max_seqs);
  if (c->max_context_tokens == 0 || c->max_context_tokens > OKV_MAX_CONTEXT_LIMIT)
    return INVALID("runtime config: max_context_tokens = %u must be in 1..%u", c->max_context_tokens,
                   OKV_MAX_CONTEXT_LIMIT);
  return OKV_OK;
}

const okv_runtime_config_t *okv_runtime_config(const okv_runtime_t *runtime) {
  return runtime ? &runtime->cfg : NULL;
}

static bool is_sparse_mode(const okv_runtime_t *rt) { return rt->cfg.mode != OKV_MODE_DENSE; }
static bool has_pipeline(const okv_runtime_t *rt) {
  return rt->cfg.mode == OKV_MODE_OASIS || rt->cfg.mode == OKV_MODE_PROXY;
}

/* ------------------------------------------------------------------ stats */

static void stats_add(okv_step_stats_t *d, const okv_step_stats_t *s) {
  d->hits += s->hits;
  d->misses += s->misses;
  d->admitted += s->admitted;
  d->deferred += s->deferred;
  d->evicted += s->evicted;
  d->failed_blocks += s->failed_blocks;
  d->blocks_moved += s->blocks_moved;
  for (int a = 0; a < OKV_TIER_COUNT; a++)
    for (int b = 0; b < OKV_TIER_COUNT; b++) d->bytes_moved[a][b] += s->bytes_moved[a][b];
  d->stall_seconds += s->stall_seconds;
  d->recall_hits += s->recall_hits;
  d->recall_total += s->recall_total;
  d->steps += s->steps;
  d->deferred_steps += s->deferred_steps;
  d->bookkeeping_seconds += s->bookkeeping_seconds;
  d->attention_seconds += s->attention_seconds;
  d->append_bytes += s->append_bytes;
  d->append_seconds += s->append_seconds;
  d->pipeline_errors += s->pipeline_errors;
  d->retried_writes += s->retried_writes;
}

okv_status_t okv_runtime_stats(const okv_runtime_t *runtime, uint32_t layer, okv_step_stats_t *out_stats) {
  if (runtime == NULL) return INVALID("okv_runtime_stats: runtime is NULL");
  if (out_stats == NULL) return INVALID("okv_runtime_stats: out_stats is NULL");
  if (layer == UINT32_MAX) {
    *out_stats = runtime->total_cum;
    return OKV_OK;
  }
  if (layer >= runtime->cfg.n_layers)
    return INVALID("okv_runtime_stats: layer = %u must be < n_layers = %u (or UINT32_MAX)", layer, runtime->cfg.n_layers);
  *out_stats = runtime->layer_cum[layer];
  return OKV_OK;
}

void okv_runtime_stats_reset(okv_runtime_t *runtime) {
  if (runtime == NULL) return;
  memset(&runtime->total_cum, 0, sizeof runtime->total_cum);
  memset(runtime->layer_cum, 0, sizeof(okv_step_stats_t) * runtime->cfg.n_layers);
}

/* ------------------------------------------------------------------ host tier */

static inline uint64_t host_block_of(const okv_runtime_t *rt, const okv_head_t *h, uint32_t block) {
  return (uint64_t)h->extents[block / rt->extent_blocks] * rt->extent_blocks + block % rt->extent_blocks;
}

/* First-fit run of n free extents; falls back to scattered extents. Writes them to out. */
static bool extents_alloc(okv_runtime_t *rt, uint32_t n, uint32_t prefer, uint32_t *out) {
  if (n == 0) return true;
  if (n > rt->n_extents_free) return false;
  if (n == 1 && prefer < rt->n_extents && !rt->extent_used[prefer]) {
    rt->extent_used[prefer] = 1;
    rt->n_extents_free--;
    out[0] = prefer;
    return true;
  }
  uint32_t run = 0;
  for (uint32_t e = 0; e < rt->n_extents; e++) {
    run = rt->extent_used[e] ? 0 : run + 1;
    if (run == n) {
      for (uint32_t i = 0; i < n; i++) {
        out[i] = e + 1 - n + i;
        rt->extent_used[out[i]] = 1;
      }
      rt->n_extents_free -= n;
      return true;
    }
  }
  uint32_t k = 0;
  for (uint32_t e = 0; e < rt->n_extents && k < n; e++)
    if (!rt->extent_used[e]) {
      rt->extent_used[e] = 1;
      out[k++] = e;
    }
  rt->n_extents_free -= n;
  return true;
}

static void extents_free(okv_runtime_t *rt, const uint32_t *ext, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    rt->extent_used[ext[i]] = 0;
    rt->n_extents_free++;
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

/* Writes one token's K (transposed) and V into a block in slot layout. */
static void write_token(const okv_runtime_t *rt, uint64_t host_block, uint32_t pos, const float *k, const float *v) {
  uint8_t *base = rt->host_kv_ptr + host_block * rt->block_bytes;
  uint32_t hd = rt->cfg.head_dim;
  okv_dtype_t dt = rt->cfg.kv_dtype;
  for (uint32_t d = 0; d < hd; d++) store_elem(base, dt, (size_t)d * OKV_BLOCK_TOKENS + pos, k[d]);
  for (uint32_t d = 0; d < hd; d++) store_elem(base, dt, (size_t)OKV_BLOCK_TOKENS * hd + (size_t)pos * hd + d, v[d]);
}

/* ------------------------------------------------------------------ sequences */

static okv_seq_t *seq_find(const okv_runtime_t *rt, uint32_t id) {
  for (uint32_t i = 0; i < rt->cfg.max_seqs; i++)
    if (rt->seqs[i].live && rt->seqs[i].id == id) return &rt->seqs[i];
  return NULL;
}

static inline okv_head_t *seq_head(const okv_runtime_t *rt, const okv_seq_t *s, uint32_t layer, uint32_t h) {
  return &s->heads[(size_t)layer * rt->cfg.n_kv_heads + h];
}

static inline uint32_t n_blocks_of(uint32_t n_tokens) { return ceil_div_u32(n_tokens, OKV_BLOCK_TOKENS); }

static inline bool seq_layer_sparse(const okv_runtime_t *rt, const okv_seq_t *s, uint32_t layer) {
  return is_sparse_mode(rt) && n_blocks_of(s->n_tokens[layer]) > rt->cfg.dense_threshold_blocks;
}

/* Returns every slot and extent of the sequence and frees its host arrays. */
static void seq_release(okv_runtime_t *rt, okv_seq_t *s) {
  uint32_t n_heads = rt->cfg.n_layers * rt->cfg.n_kv_heads;
  if (s->heads != NULL) {
    for (uint32_t i = 0; i < n_heads; i++) {
      okv_head_t *h = &s->heads[i];
      if (is_sparse_mode(rt)) {
        for (uint32_t j = 0; j < h->n_owned; j++) rt->free_slots[rt->n_free_slots++] = h->owned[j];
      } else {
        for (uint32_t j = 0; j < h->map.n_resident; j++)
          rt->free_slots[rt->n_free_slots++] = h->map.slot_of[h->map.resident[j]];
      }
      extents_free(rt, h->extents, h->n_extents);
      xfree(&rt->alloc, h->extents);
      xfree(&rt->alloc, h->owned);
      okv_block_map_free(&h->map, &rt->alloc);
    }
    xfree(&rt->alloc, s->heads);
  }
  xfree(&rt->alloc, s->n_tokens);
  s->heads = NULL;
  s->n_tokens = NULL;
  s->live = false;
}

/* ------------------------------------------------------------------ scoring + top-K */

/* Scores every block of the listed (seq, KV head) segments against queries
 * t_begin..t_end-1 already in ctx->q and takes the top-K, excluding each head's
 * active block; results land in ctx->host_topk / host_counts. Segments whose
 * ctx->seqs[s] is NULL are skipped (count 0). Blocks of one head sit in runs of
 * contiguous host extents; one scoring launch per run index. */
static okv_status_t predict_topk(okv_runtime_t *rt, okv_predict_ctx_t *ctx, okv_hal_stream_t *stream,
                                 uint32_t n_seqs, uint32_t layer, uint32_t T, uint32_t t_begin, uint32_t t_end,
                                 double *bk_s) {
  double t0 = now_s();
  uint32_t H = rt->cfg.n_kv_heads, E = rt->extent_blocks;
  uint32_t n_seg = n_seqs * H;
  for (uint32_t u = 0; u < n_seg; u++) ctx->seg_cursor[u] = 0;
  okv_score_desc_t sd = {
      .n_seqs = n_seqs, .n_kv_heads = H, .group_size = rt->group_size, .head_dim = rt->cfg.head_dim,
      .n_query_tokens = T, .t_begin = t_begin, .t_end = t_end, .q = ctx->q, .q_offset = 0,
      .summaries = rt->summaries, .seg_summary_first = ctx->seg_summary_first, .seg_n_blocks = ctx->seg_n,
      .scores = ctx->scores, .seg_score_first = ctx->seg_score_first};
  okv_status_t st = OKV_OK;
  for (;;) {
    bool any = false;
    for (uint32_t s = 0; s < n_seqs; s++) {
      const okv_seq_t *seq = ctx->seqs[s];
      uint32_t nb = seq ? n_blocks_of(seq->n_tokens[layer]) : 0;
      uint32_t need = ceil_div_u32(nb, E);
      for (uint32_t h = 0; h < H; h++) {
        uint32_t u = s * H + h;
        uint32_t c = ctx->seg_cursor[u];
        if (c >= need) {
          ctx->seg_summary_first[u] = 0;
          ctx->seg_n[u] = 0;
          ctx->seg_score_first[u] = 0;
          continue;
        }
        const okv_head_t *hd = seq_head(rt, seq, layer, h);
        uint32_t start = hd->extents[c], run = 1;
        while (c + run < need && hd->extents[c + run] == start + run) run++;
        uint32_t first_block = c * E;
        uint32_t n = run * E;
        if (n > nb - first_block) n = nb - first_block;
        ctx->seg_summary_first[u] = (uint64_t)start * E;
        ctx->seg_n[u] = n;
        ctx->seg_score_first[u] = (uint64_t)u * rt->max_blocks + first_block;
        ctx->seg_cursor[u] = c + run;
        any = true;
      }
    }
    if (!any) break;
    *bk_s += now_s() - t0;
    st = okv_hal_score_blocks_async(stream, &sd);
    t0 = now_s();
    if (st != OKV_OK) return okv_status_annotate(st, "runtime: scoring layer %u", layer);
  }
  uint32_t n_excl = 0;
  for (uint32_t s = 0; s < n_seqs; s++) {
    const okv_seq_t *seq = ctx->seqs[s];
    uint32_t nb = seq ? n_blocks_of(seq->n_tokens[layer]) : 0;
    for (uint32_t h = 0; h < H; h++) {
      uint32_t u = s * H + h;
      ctx->seg_score_first[u] = (uint64_t)u * rt->max_blocks;
      ctx->topk_n[u] = nb;
      ctx->excl_offsets[u] = n_excl;
      if (nb > 0) ctx->excl_blocks[n_excl++] = nb - 1;
    }
  }
  ctx->excl_offsets[n_seg] = n_excl;
  okv_topk_desc_t td = {.n_segments = n_seg, .k = rt->cfg.budget_blocks, .scores = ctx->scores,
                        .seg_score_first = ctx->seg_score_first, .seg_n = ctx->topk_n,
                        .excl_offsets = ctx->excl_offsets, .excl_blocks = ctx->excl_blocks,
                        .out_indices = ctx->topk, .out_offset = 0, .out_counts = ctx->counts, .counts_offset = 0};
  *bk_s += now_s() - t0;
  st = okv_hal_topk_async(stream, &td);
  if (st != OKV_OK) return okv_status_annotate(st, "runtime: top-K layer %u", layer);
  st = okv_hal_stream_synchronize(stream);
  if (st != OKV_OK) return okv_status_annotate(st, "runtime: predict layer %u", layer);
  st = okv_hal_buffer_read(ctx->topk, 0, ctx->host_topk, (uint64_t)n_seg * rt->cfg.budget_blocks * 4u);
  if (st == OKV_OK) st = okv_hal_buffer_read(ctx->counts, 0, ctx->host_counts, (uint64_t)n_seg * 4u);
  return st;
}

/* ------------------------------------------------------------------ background pipeline */

/* Predict + select + issue one batched transfer for one layer job. */
static void job_run(okv_runtime_t *rt, uint32_t layer) {
  okv_layer_job_t *job = &rt->jobs[layer];
  okv_predict_ctx_t *ctx = &rt->wk;
  double bk = 0, t0 = now_s();
  uint32_t H = rt->cfg.n_kv_heads, K = rt->cfg.budget_blocks;
  memset(&job->stats, 0, sizeof job->stats);
  job->n_plan = 0;
  bool any = false;
  for (uint32_t s = 0; s < job->n_seqs; s++) {
    okv_seq_t *seq = &rt->seqs[job->seq_index[s]];
    if (!seq->live || seq->id != job->seq_id[s] || !seq_layer_sparse(rt, seq, layer)) seq = NULL;
    ctx->seqs[s] = seq;
    any |= seq != NULL;
  }
  bk += now_s() - t0;
  if (!any) goto done;
  uint32_t T = job->n_query_tokens;
  okv_status_t st = okv_hal_buffer_write(
      ctx->q, 0, job->q_host, (uint64_t)job->n_seqs * T * rt->cfg.n_q_heads * rt->cfg.head_dim * sizeof(float));
  if (st == OKV_OK) st = predict_topk(rt, ctx, rt->predict, job->n_seqs, layer, T, job->t_begin, job->t_end, &bk);
  if (st != OKV_OK) {
    okv_status_free(okv_hal_stream_synchronize(rt->predict)); /* no pending error left for the next job */
    job->error = st;
    goto done;
  }
  t0 = now_s();
  okv_select_params_t p = {.budget_blocks = K, .cap_blocks = rt->cap_blocks, .step = job->step};
  for (uint32_t s = 0; s < job->n_seqs; s++) {
    okv_seq_t *seq = ctx->seqs[s];
    if (seq == NULL) continue;
    p.active_block = n_blocks_of(seq->n_tokens[layer]) - 1u;
    for (uint32_t h = 0; h < H; h++) {
      uint32_t u = s * H + h;
      okv_head_t *hd = seq_head(rt, seq, layer, h);
      okv_select_result_t r;
      st = okv_select_head(&hd->map, &p, &ctx->host_topk[(size_t)u * K], ctx->host_counts[u], ctx->sel_scratch,
                           ctx->sel_admitted, ctx->sel_victims, &r);
      if (st != OKV_OK) {
        job->error = st;
        break;
      }
      job->stats.hits += r.n_hits;
      job->stats.misses += r.n_misses;
      job->stats.admitted += r.n_admitted;
      job->stats.deferred += r.n_deferred;
      for (uint32_t i = 0; i < r.n_admitted; i++) {
        uint32_t slot;
        if (!okv_block_map_pop_free(&hd->map, &slot)) { /* cannot happen: K + 1 + C owned slots */
          job->stats.deferred++;
          job->stats.admitted--;
          continue;
        }
        okv_plan_entry_t *e = &job->plan[job->n_plan];
        e->seq_index = job->seq_index[s];
        e->seq_id = seq->id;
        e->kv_head = h;
        e->block = ctx->sel_admitted[i];
        e->slot = slot;
        e->victim = ctx->sel_victims[i];
        job->pairs[job->n_plan].src_offset = host_block_of(rt, hd, e->block) * rt->block_bytes;
        job->pairs[job->n_plan].dst_offset = (uint64_t)slot * rt->block_bytes;
        job->n_plan++;
      }
    }
    if (job->error != OKV_OK) break;
  }
  job->stats.deferred_steps = job->stats.deferred > 0;
  bk += now_s() - t0;
  if (job->n_plan > 0) {
    st = okv_hal_copy_blocks_async(rt->copy, rt->host_kv, rt->pool, rt->block_bytes, job->n_plan, job->pairs);
    if (st == OKV_OK) st = okv_hal_event_record(rt->layer_events[layer], rt->copy);
    if (st == OKV_OK) {
      job->event_recorded = true;
      job->event_waited = false;
    } else {
      /* Nothing we can wait for was issued: let the copy stream finish whatever
       * it took, then give the slots back. */
      okv_status_free(okv_hal_stream_synchronize(rt->copy));
      for (uint32_t i = 0; i < job->n_plan; i++) {
        okv_plan_entry_t *e = &job->plan[i];
        okv_block_map_push_free(&seq_head(rt, &rt->seqs[e->seq_index], layer, e->kv_head)->map, e->slot);
      }
      job->n_plan = 0;
      if (job->error == OKV_OK) job->error = okv_status_annotate(st, "runtime: issuing transfer of layer %u", layer);
      else okv_status_free(st);
    }
  }
done:
  job->stats.bookkeeping_seconds = bk;
}

static void *worker_main(void *arg) {
  okv_runtime_t *rt = arg;
  pthread_mutex_lock(&rt->mutex);
  for (;;) {
    while (!rt->stop && rt->q_len == 0) pthread_cond_wait(&rt->work_cv, &rt->mutex);
    if (rt->q_len == 0 && rt->stop) break;
    uint32_t layer = rt->queue[rt->q_head];
    rt->q_head = (rt->q_head + 1u) % rt->cfg.n_layers;
    rt->q_len--;
    pthread_mutex_unlock(&rt->mutex);
    job_run(rt, layer);
    pthread_mutex_lock(&rt->mutex);
    rt->jobs[layer].state = OKV_JOB_DONE;
    pthread_cond_broadcast(&rt->done_cv);
  }
  pthread_mutex_unlock(&rt->mutex);
  return NULL;
}

/* Blocks until layer's job is not queued/running. */
static void job_wait_selected(okv_runtime_t *rt, uint32_t layer) {
  if (!rt->worker_started) return;
  pthread_mutex_lock(&rt->mutex);
  while (rt->jobs[layer].state == OKV_JOB_QUEUED) pthread_cond_wait(&rt->done_cv, &rt->mutex);
  pthread_mutex_unlock(&rt->mutex);
}

static void jobs_drain(okv_runtime_t *rt) {
  for (uint32_t l = 0; l < rt->cfg.n_layers; l++) job_wait_selected(rt, l);
}

void okv_runtime_debug_drain(okv_runtime_t *runtime) {
  if (runtime) jobs_drain(runtime);
}

/* Waits for the layer's transfer event once and caches the result. Returns the wait time. */
static double job_wait_event(okv_runtime_t *rt, uint32_t layer) {
  okv_layer_job_t *job = &rt->jobs[layer];
  if (!job->event_recorded || job->event_waited) return 0.0;
  double t0 = wall_s();
  job->event_status = okv_hal_event_wait(rt->layer_events[layer]);
  job->event_waited = true;
  return wall_s() - t0;
}

/* Layer-local sync: waits for the layer's previous plan and commits it into the
 * maps. A failed transfer maps nothing (its slots go back to the heads' free
 * stacks, victims stay mapped); a failed transfer or prediction is absorbed and
 * counted in pipeline_errors (docs/api.md "Faults"). */
static void layer_commit(okv_runtime_t *rt, uint32_t layer, double *bk_s) {
  if (!has_pipeline(rt)) return;
  okv_layer_job_t *job = &rt->jobs[layer];
  okv_step_stats_t *ls = &rt->layer_step[layer];
  double t0 = wall_s();
  job_wait_selected(rt, layer);
  ls->stall_seconds += wall_s() - t0;
  ls->stall_seconds += job_wait_event(rt, layer);
  t0 = now_s();
  okv_status_t st = job->event_status;
  job->event_status = OKV_OK;
  bool ok = st == OKV_OK;
  if (!ok && job->n_plan > 0) {
    /* The copy stream may still be writing into the planned slots (or hold the
     * error): let it finish before those slots go back to the free stacks. */
    okv_status_free(okv_hal_stream_synchronize(rt->copy));
  }
  for (uint32_t i = 0; i < job->n_plan; i++) {
    const okv_plan_entry_t *e = &job->plan[i];
    okv_seq_t *seq = &rt->seqs[e->seq_index];
    if (!seq->live || seq->id != e->seq_id) continue; /* removed: its slots went back already */
    okv_block_map_t *m = &seq_head(rt, seq, layer, e->kv_head)->map;
    if (ok) {
      if (e->victim != OKV_NO_BLOCK) {
        okv_block_map_push_free(m, okv_block_map_unmap(m, e->victim));
        ls->evicted++;
      }
      okv_block_map_map(m, e->block, e->slot, job->step);
      okv_block_map_set_current(m, e->block, OKV_BLOCK_TOKENS); /* fetched blocks are never the active one */
      ls->blocks_moved++;
      ls->bytes_moved[OKV_TIER_HOST][OKV_TIER_DEVICE] += rt->block_bytes;
    } else {
      okv_block_map_push_free(m, e->slot);
      ls->failed_blocks++;
    }
  }
  job->n_plan = 0;
  job->event_recorded = false;
  job->event_waited = false;
  /* Absorbed (docs/api.md "Faults"): the blocks stay misses and are selected
   * again by later steps; attention runs over what is validly resident. */
  if (st != OKV_OK || job->error != OKV_OK) ls->pipeline_errors++;
  okv_status_free(st);
  okv_status_free(job->error);
  job->error = OKV_OK;
  *bk_s += now_s() - t0;
}

/* ------------------------------------------------------------------ create / destroy */

static okv_status_t alloc_dev(okv_runtime_t *rt, okv_tier_t tier, uint64_t bytes, okv_hal_buffer_t **out, const char *what) {
  if (bytes == 0) bytes = 4;
  okv_status_t st = okv_hal_buffer_alloc(rt->device, tier, bytes, out);
  return st ? okv_status_annotate(st, "runtime: allocating %s (%llu bytes, %s tier)", what, (unsigned long long)bytes,
                                  okv_tier_name(tier))
            : OKV_OK;
}

#define ALLOC_ARR(ptr, count)                                                   \
  do {                                                                          \
    size_t n_alloc_ = (size_t)(count);                                        \
    (ptr) = okv_calloc(&rt->alloc, n_alloc_ > 0 ? n_alloc_ : 1u, sizeof *(ptr)); \
    if ((ptr) == NULL) {                                                        \
      st = HOST_OOM(#ptr);                                                      \
      goto fail;                                                                \
    }                                                                           \
  } while (0)

static okv_status_t predict_ctx_init(okv_runtime_t *rt, okv_predict_ctx_t *c, bool with_select) {
  okv_status_t st = OKV_OK;
  uint64_t n_seg = (uint64_t)rt->cfg.max_seqs * rt->cfg.n_kv_heads;
  uint64_t K = rt->cfg.budget_blocks;
  OKV_RETURN_IF_ERROR(alloc_dev(rt, OKV_TIER_DEVICE,
                                (uint64_t)rt->cfg.max_seqs * 4u * rt->cfg.n_q_heads * rt->cfg.head_dim * 4u, &c->q,
                                "query staging"));
  OKV_RETURN_IF_ERROR(alloc_dev(rt, OKV_TIER_DEVICE, n_seg * rt->max_blocks * 4u, &c->scores, "block scores"));
  OKV_RETURN_IF_ERROR(alloc_dev(rt, OKV_TIER_DEVICE, n_seg * K * 4u, &c->topk, "top-K indices"));
  OKV_RETURN_IF_ERROR(alloc_dev(rt, OKV_TIER_DEVICE, n_seg * 4u, &c->counts, "top-K counts"));
  ALLOC_ARR(c->seg_summary_first, n_seg);
  ALLOC_ARR(c->seg_score_first, n_seg);
  ALLOC_ARR(c->seg_n, n_seg);
  ALLOC_ARR(c->seg_cursor, n_seg);
  ALLOC_ARR(c->topk_n, n_seg);
  ALLOC_ARR(c->excl_offsets, n_seg + 1);
  ALLOC_ARR(c->excl_blocks, n_seg);
  ALLOC_ARR(c->host_topk, n_seg * K);
  ALLOC_ARR(c->host_counts, n_seg);
  ALLOC_ARR(c->seqs, rt->cfg.max_seqs);
  if (with_select) {
    ALLOC_ARR(c->sel_scratch, rt->slots_per_head + 1u);
    ALLOC_ARR(c->sel_admitted, K);
    ALLOC_ARR(c->sel_victims, K);
  }
  return OKV_OK;
fail:
  return st;
}

static void predict_ctx_free(okv_runtime_t *rt, okv_predict_ctx_t *c) {
  okv_hal_buffer_t *bufs[] = {c->q, c->scores, c->topk, c->counts};
  for (size_t i = 0; i < 4; i++)
    if (bufs[i]) okv_status_free(okv_hal_buffer_release(bufs[i]));
  void *arrs[] = {c->seg_summary_first, c->seg_score_first, c->seg_n,        c->seg_cursor,  c->topk_n,
                  c->excl_offsets,      c->excl_blocks,     c->host_topk,    c->host_counts, c->seqs,
                  c->sel_scratch,       c->sel_admitted,    c->sel_victims};
  for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) xfree(&rt->alloc, arrs[i]);
  memset(c, 0, sizeof *c);
}

static uint64_t tier_free(okv_hal_device_t *dev, okv_tier_t tier) {
  uint64_t cap = 0, used = 0;
  okv_status_t st = okv_hal_device_tier_usage(dev, tier, &cap, &used);
  if (st != OKV_OK) {
    okv_status_free(st);
    return 0;
  }
  if (cap == UINT64_MAX || cap == 0) {
    okv_hal_device_info_t info;
    st = okv_hal_device_info(dev, &info);
    if (st == OKV_OK && info.physical_bytes[tier] > 0) cap = info.physical_bytes[tier];
    okv_status_free(st);
  }
  return cap > used ? cap - used : 0;
}

void okv_runtime_destroy(okv_runtime_t *rt) {
  if (rt == NULL) return;
  if (rt->worker_started) {
    pthread_mutex_lock(&rt->mutex);
    rt->stop = true;
    pthread_cond_broadcast(&rt->work_cv);
    pthread_mutex_unlock(&rt->mutex);
    pthread_join(rt->worker, NULL);
  }
  if (rt->jobs) {
    for (uint32_t l = 0; l < rt->cfg.n_layers; l++) {
      okv_layer_job_t *job = &rt->jobs[l];
      job_wait_event(rt, l);
      okv_status_free(job->event_status);
      okv_status_free(job->error);
      xfree(&rt->alloc, job->seq_index);
      xfree(&rt->alloc, job->seq_id);
      xfree(&rt->alloc, job->q_host);
      xfree(&rt->alloc, job->plan);
      xfree(&rt->alloc, job->pairs);
    }
  }
  if (rt->compute) okv_status_free(okv_hal_stream_synchronize(rt->compute));
  if (rt->copy) okv_status_free(okv_hal_stream_synchronize(rt->copy));
  if (rt->predict) okv_status_free(okv_hal_stream_synchronize(rt->predict));
  if (rt->seqs) {
    for (uint32_t i = 0; i < rt->cfg.max_seqs; i++)
      if (rt->seqs[i].live) seq_release(rt, &rt->seqs[i]);
  }
  if (rt->layer_events) {
    for (uint32_t l = 0; l < rt->cfg.n_layers; l++)
      if (rt->layer_events[l]) okv_status_free(okv_hal_event_release(rt->layer_events[l]));
  }
  if (rt->append_event) okv_status_free(okv_hal_event_release(rt->append_event));
  okv_hal_stream_t *streams[] = {rt->compute, rt->predict, rt->copy};
  for (int i = 0; i < 3; i++)
    if (streams[i]) okv_status_free(okv_hal_stream_release(streams[i]));
  predict_ctx_free(rt, &rt->fg);
  predict_ctx_free(rt, &rt->wk);
  okv_hal_buffer_t *bufs[] = {rt->host_kv, rt->summaries, rt->pool, rt->fg_inflight, rt->fg_out};
  for (int i = 0; i < 5; i++)
    if (bufs[i]) okv_status_free(okv_hal_buffer_release(bufs[i]));
  void *arrs[] = {rt->extent_used, rt->free_slots,   rt->ws_offsets,   rt->ws_slots,      rt->ws_valid,
                  rt->append_pairs, rt->append_index, rt->append_first, rt->append_keys,   rt->od_pairs,
                  rt->od_plan,     rt->seqs,         rt->step_seq_index, rt->step_seq_id, rt->layer_step, rt->batch_seqs,
                  rt->layer_cum,   rt->jobs,         rt->queue,        rt->layer_events, rt->wr_map,
                  rt->wr_block,    rt->wr_tokens,    rt->tok_block,    rt->reb_index,   rt->reb_valid,
                  rt->reb_map,     rt->reb_block};
  for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) xfree(&rt->alloc, arrs[i]);
  pthread_mutex_destroy(&rt->mutex);
  pthread_cond_destroy(&rt->work_cv);
  pthread_cond_destroy(&rt->done_cv);
  if (rt->device) okv_status_free(okv_hal_device_release(rt->device));
  okv_allocator_t a = rt->alloc;
  xfree(&a, rt);
}

okv_status_t okv_runtime_create(okv_hal_device_t *device, const okv_runtime_config_t *config,
                                const okv_allocator_t *allocator, okv_runtime_t **out_runtime) {
  if (out_runtime == NULL) return INVALID("okv_runtime_create: out_runtime is NULL");
  *out_runtime = NULL;
  if (device == NULL) return INVALID("okv_runtime_create: device is NULL");
  OKV_RETURN_IF_ERROR(okv_runtime_config_validate(config));
  okv_allocator_t a = allocator ? *allocator : okv_allocator_system();
  okv_runtime_t *rt = okv_calloc(&a, 1, sizeof *rt);
  if (rt == NULL) return HOST_OOM("the runtime");
  rt->alloc = a;
  pthread_mutex_init(&rt->mutex, NULL);
  pthread_cond_init(&rt->work_cv, NULL);
  pthread_cond_init(&rt->done_cv, NULL);
  okv_status_t st = okv_hal_device_retain(device);
  if (st != OKV_OK) {
    okv_runtime_destroy(rt);
    return okv_status_annotate(st, "okv_runtime_create: device");
  }
  rt->device = device;
  okv_runtime_config_t *c = &rt->cfg;
  *c = *config;
  if (c->dense_threshold_blocks == OKV_DENSE_THRESHOLD_DEFAULT) c->dense_threshold_blocks = c->budget_blocks;
  rt->group_size = c->n_q_heads / c->n_kv_heads;
  rt->block_bytes = okv_block_bytes(c->kv_dtype, c->head_dim);
  rt->summary_bytes = okv_summary_bytes(c->head_dim);
  rt->max_blocks = n_blocks_of(c->max_context_tokens);
  rt->extent_blocks = rt->max_blocks < OKV_CORE_EXTENT_BLOCKS ? rt->max_blocks : OKV_CORE_EXTENT_BLOCKS;
  rt->cap_blocks = (uint32_t)ceil(c->fetch_ratio * (double)c->budget_blocks - 1e-9);
  if (rt->cap_blocks < 1) rt->cap_blocks = 1;
  if (rt->cap_blocks > c->budget_blocks) rt->cap_blocks = c->budget_blocks;
  rt->slots_per_head = c->budget_blocks + 1u + rt->cap_blocks;
  rt->step = 1;
  uint64_t LH = (uint64_t)c->n_layers * c->n_kv_heads;
  uint64_t n_seg = (uint64_t)c->max_seqs * c->n_kv_heads;
  uint64_t T4 = 4;
  uint64_t ext_bytes = rt->block_bytes * rt->extent_blocks;

  /* HOST tier: full KV in extents. */
  uint64_t need_ext = (uint64_t)c->max_seqs * LH * ceil_div_u32(rt->max_blocks, rt->extent_blocks);
  uint64_t host_bytes;
  if (c->host_capacity_bytes != 0) {
    host_bytes = c->host_capacity_bytes;
  } else {
    host_bytes = need_ext * ext_bytes;
    uint64_t avail = tier_free(device, OKV_TIER_HOST);
    if (avail && host_bytes > avail / 2) host_bytes = avail / 2;
    if (host_bytes > (2ull << 30)) host_bytes = 2ull << 30;
    /* Summaries (1 per host block) must leave room in the DEVICE tier. */
    uint64_t dev_avail = tier_free(device, OKV_TIER_DEVICE);
    uint64_t max_by_summ = dev_avail / 4u / (rt->summary_bytes * rt->extent_blocks) * ext_bytes;
    if (dev_avail && host_bytes > max_by_summ) host_bytes = max_by_summ;
  }
  uint64_t n_ext = host_bytes / ext_bytes;
  if (n_ext > need_ext) n_ext = need_ext;
  if (n_ext > UINT32_MAX / rt->extent_blocks) n_ext = UINT32_MAX / rt->extent_blocks;
  if (n_ext == 0) {
    st = okv_status_make(OKV_STATUS_OUT_OF_MEMORY,
                         "okv_runtime_create: host_capacity_bytes = %llu holds no extent of %llu bytes (host tier)",
                         (unsigned long long)host_bytes, (unsigned long long)ext_bytes);
    goto fail;
  }
  rt->n_extents = (uint32_t)n_ext;
  rt->n_extents_free = rt->n_extents;
  uint64_t n_host_blocks = n_ext * rt->extent_blocks;
  st = alloc_dev(rt, OKV_TIER_HOST, n_host_blocks * rt->block_bytes, &rt->host_kv, "the full KV");
  if (st) goto fail;
  rt->host_kv_ptr = okv_hal_buffer_host_ptr(rt->host_kv);
  if (rt->host_kv_ptr == NULL) {
    st = okv_status_make(OKV_STATUS_UNAVAILABLE, "okv_runtime_create: the host tier buffer has no host pointer");
    goto fail;
  }
  st = alloc_dev(rt, OKV_TIER_DEVICE, n_host_blocks * rt->summary_bytes, &rt->summaries, "block summaries");
  if (st) goto fail;

  /* DEVICE staging. */
  st = alloc_dev(rt, OKV_TIER_DEVICE, c->max_seqs * T4 * 2u * c->n_kv_heads * c->head_dim * 4u, &rt->fg_inflight,
                 "in-flight K/V staging");
  if (st) goto fail;
  st = alloc_dev(rt, OKV_TIER_DEVICE, c->max_seqs * T4 * c->n_q_heads * c->head_dim * 4u, &rt->fg_out,
                 "attention output staging");
  if (st) goto fail;
  rt->fg_predict = true; /* the foreground q staging lives in fg.q */
  if (c->track_recall || c->mode == OKV_MODE_ONDEMAND) {
    st = predict_ctx_init(rt, &rt->fg, c->mode == OKV_MODE_ONDEMAND);
  } else {
    st = alloc_dev(rt, OKV_TIER_DEVICE, c->max_seqs * T4 * c->n_q_heads * c->head_dim * 4u, &rt->fg.q,
                   "query staging");
  }
  if (st) goto fail;
  if (has_pipeline(rt)) {
    st = predict_ctx_init(rt, &rt->wk, true);
    if (st) goto fail;
  }

  /* DEVICE slot pool. */
  uint64_t per_seq_slots = is_sparse_mode(rt) ? LH * rt->slots_per_head : LH * rt->max_blocks;
  uint64_t pool_bytes = c->device_pool_bytes;
  if (pool_bytes == 0) {
    pool_bytes = (uint64_t)c->max_seqs * per_seq_slots * rt->block_bytes;
    uint64_t avail = tier_free(device, OKV_TIER_DEVICE);
    avail = avail / 16u * 15u; /* leave a margin */
    if (avail && pool_bytes > avail) pool_bytes = avail;
  }
  rt->n_slots = pool_bytes / rt->block_bytes;
  if (rt->n_slots > UINT32_MAX - 1u) rt->n_slots = UINT32_MAX - 1u;
  if (rt->n_slots == 0 || (is_sparse_mode(rt) && rt->n_slots < per_seq_slots)) {
    st = okv_status_make(OKV_STATUS_OUT_OF_MEMORY,
                         "okv_runtime_create: device_pool_bytes = %llu holds %llu slots, fewer than one sequence "
                         "needs (%llu) (device tier)",
                         (unsigned long long)pool_bytes, (unsigned long long)rt->n_slots,
                         (unsigned long long)(is_sparse_mode(rt) ? per_seq_slots : 1u));
    goto fail;
  }
  st = alloc_dev(rt, OKV_TIER_DEVICE, rt->n_slots * rt->block_bytes, &rt->pool, "the slot pool");
  if (st) goto fail;

  /* Host bookkeeping. */
  ALLOC_ARR(rt->extent_used, rt->n_extents);
  ALLOC_ARR(rt->free_slots, rt->n_slots);
  for (uint64_t i = 0; i < rt->n_slots; i++) rt->free_slots[i] = (uint32_t)(rt->n_slots - 1u - i);
  rt->n_free_slots = rt->n_slots;
  rt->ws_capacity = n_seg * (is_sparse_mode(rt) ? (uint64_t)rt->slots_per_head : (uint64_t)rt->max_blocks);
  if (rt->ws_capacity > rt->n_slots) rt->ws_capacity = rt->n_slots;
  ALLOC_ARR(rt->ws_offsets, n_seg + 1);
  ALLOC_ARR(rt->ws_slots, rt->ws_capacity);
  ALLOC_ARR(rt->ws_valid, rt->ws_capacity);
  rt->wr_capacity = (uint32_t)(2u * n_seg + 64u); /* n_seg <= 2^28: fits */
  rt->reb_capacity = (uint32_t)(2u * n_seg + 64u);
  ALLOC_ARR(rt->append_pairs, rt->wr_capacity);
  ALLOC_ARR(rt->wr_map, rt->wr_capacity);
  ALLOC_ARR(rt->wr_block, rt->wr_capacity);
  ALLOC_ARR(rt->wr_tokens, rt->wr_capacity);
  ALLOC_ARR(rt->tok_block, n_seg);
  ALLOC_ARR(rt->reb_index, rt->reb_capacity);
  ALLOC_ARR(rt->reb_valid, rt->reb_capacity);
  ALLOC_ARR(rt->reb_map, rt->reb_capacity);
  ALLOC_ARR(rt->reb_block, rt->reb_capacity);
  ALLOC_ARR(rt->append_index, n_seg);
  ALLOC_ARR(rt->append_first, n_seg);
  ALLOC_ARR(rt->append_keys, n_seg * c->head_dim);
  if (c->mode == OKV_MODE_ONDEMAND) {
    ALLOC_ARR(rt->od_pairs, n_seg * c->budget_blocks);
    ALLOC_ARR(rt->od_plan, n_seg * c->budget_blocks);
  }
  ALLOC_ARR(rt->seqs, c->max_seqs);
  ALLOC_ARR(rt->step_seq_index, c->max_seqs);
  ALLOC_ARR(rt->step_seq_id, c->max_seqs);
  ALLOC_ARR(rt->batch_seqs, c->max_seqs);
  ALLOC_ARR(rt->layer_step, c->n_layers);
  ALLOC_ARR(rt->layer_cum, c->n_layers);
  ALLOC_ARR(rt->layer_events, c->n_layers);

  st = okv_hal_stream_create(device, &rt->compute);
  if (st) goto fail;
  st = okv_hal_event_create(device, &rt->append_event);
  if (st) goto fail;
  if (has_pipeline(rt)) {
    st = okv_hal_stream_create(device, &rt->predict);
    if (st) goto fail;
    st = okv_hal_stream_create(device, &rt->copy);
    if (st) goto fail;
    for (uint32_t l = 0; l < c->n_layers; l++) {
      st = okv_hal_event_create(device, &rt->layer_events[l]);
      if (st) goto fail;
    }
    ALLOC_ARR(rt->jobs, c->n_layers);
    ALLOC_ARR(rt->queue, c->n_layers);
    for (uint32_t l = 0; l < c->n_layers; l++) {
      okv_layer_job_t *job = &rt->jobs[l];
      ALLOC_ARR(job->seq_index, c->max_seqs);
      ALLOC_ARR(job->seq_id, c->max_seqs);
      ALLOC_ARR(job->q_host, c->max_seqs * T4 * c->n_q_heads * c->head_dim);
      ALLOC_ARR(job->plan, n_seg * rt->cap_blocks);
      ALLOC_ARR(job->pairs, n_seg * rt->cap_blocks);
    }
    if (pthread_create(&rt->worker, NULL, worker_main, rt) != 0) {
      st = okv_status_make(OKV_STATUS_UNAVAILABLE, "okv_runtime_create: cannot start the background pipeline thread");
      goto fail;
    }
    rt->worker_started = true;
  }
  *out_runtime = rt;
  return OKV_OK;
fail:
  okv_runtime_destroy(rt);
  return st;
}

/* ------------------------------------------------------------------ sequences: add / remove */

okv_status_t okv_runtime_seq_capacity(const okv_runtime_t *rt, uint32_t n_tokens, uint32_t *out_n_seqs) {
  if (rt == NULL) return INVALID("okv_runtime_seq_capacity: runtime is NULL");
  if (out_n_seqs == NULL) return INVALID("okv_runtime_seq_capacity: out_n_seqs is NULL");
  if (n_tokens > rt->cfg.max_context_tokens)
    return INVALID("okv_runtime_seq_capacity: n_tokens = %u exceeds max_context_tokens = %u", n_tokens,
                   rt->cfg.max_context_tokens);
  uint64_t LH = (uint64_t)rt->cfg.n_layers * rt->cfg.n_kv_heads;
  uint64_t n = 0;
  for (uint32_t i = 0; i < rt->cfg.max_seqs; i++) n += !rt->seqs[i].live;
  uint32_t nb = n_blocks_of(n_tokens);
  uint64_t slots = is_sparse_mode(rt) ? LH * rt->slots_per_head : LH * nb;
  if (slots > 0 && rt->n_free_slots / slots < n) n = rt->n_free_slots / slots;
  uint64_t ext = LH * ceil_div_u32(nb, rt->extent_blocks);
  if (ext > 0 && rt->n_extents_free / ext < n) n = rt->n_extents_free / ext;
  *out_n_seqs = (uint32_t)n;
  return OKV_OK;
}

okv_status_t okv_runtime_seq_add(okv_runtime_t *rt, const okv_prefill_t *prefill, uint32_t *out_seq_id) {
  if (rt == NULL) return INVALID("okv_runtime_seq_add: runtime is NULL");
  if (out_seq_id == NULL) return INVALID("okv_runtime_seq_add: out_seq_id is NULL");
  const okv_runtime_config_t *c = &rt->cfg;
  uint32_t n_tokens = prefill ? prefill->n_tokens : 0;
  if (n_tokens > c->max_context_tokens)
    return INVALID("okv_runtime_seq_add: prefill n_tokens = %u exceeds max_context_tokens = %u", n_tokens,
                   c->max_context_tokens);
  if (n_tokens > 0 && (prefill->k == NULL || prefill->v == NULL))
    return INVALID("okv_runtime_seq_add: prefill k or v is NULL with n_tokens = %u", n_tokens);
  okv_seq_t *s = NULL;
  for (uint32_t i = 0; i < c->max_seqs; i++)
    if (!rt->seqs[i].live && rt->seqs[i].heads == NULL) {
      s = &rt->seqs[i];
      break;
    }
  if (s == NULL)
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_runtime_seq_add: max_seqs = %u sequences are alive",
                           c->max_seqs);
  uint32_t L = c->n_layers, H = c->n_kv_heads, E = rt->extent_blocks;
  uint32_t nb = n_blocks_of(n_tokens);
  uint32_t n_ext = ceil_div_u32(nb, E);
  uint64_t LH = (uint64_t)L * H;
  uint64_t slots_needed = is_sparse_mode(rt) ? LH * rt->slots_per_head : LH * nb;
  if (slots_needed > rt->n_free_slots)
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY,
                           "okv_runtime_seq_add: the slot pool (device tier) has %llu free slots, the sequence needs "
                           "%llu",
                           (unsigned long long)rt->n_free_slots, (unsigned long long)slots_needed);
  if (LH * n_ext > rt->n_extents_free)
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY,
                           "okv_runtime_seq_add: the host tier has %u free extents of %u blocks, the prefill needs "
                           "%llu",
                           rt->n_extents_free, E, (unsigned long long)(LH * n_ext));
  okv_status_t st = OKV_OK;
  memset(s, 0, sizeof *s);
  uint64_t *blk_index = NULL, *sum_index = NULL;
  uint8_t *valid = NULL;
  okv_block_copy_t *pairs = NULL;
  ALLOC_ARR(s->n_tokens, L);
  ALLOC_ARR(s->heads, LH);
  uint32_t cap_ext = ceil_div_u32(rt->max_blocks, E);
  uint32_t init_first = 0; /* first logical block of the initial working set */
  bool sparse_now = is_sparse_mode(rt) && nb > c->dense_threshold_blocks;
  if (sparse_now && nb > c->budget_blocks + 1u) init_first = nb - c->budget_blocks - 1u;
  for (uint64_t i = 0; i < LH; i++) {
    okv_head_t *h = &s->heads[i];
    st = okv_block_map_init(&h->map, &rt->alloc, is_sparse_mode(rt) ? rt->slots_per_head : 0);
    if (st) goto fail;
    st = okv_block_map_reserve(&h->map, &rt->alloc, nb > 0 ? nb : 1);
    if (st) goto fail;
    h->map.n_blocks = nb;
    ALLOC_ARR(h->extents, cap_ext);
    h->cap_extents = cap_ext;
    extents_alloc(rt, n_ext, UINT32_MAX, h->extents); /* counted above: cannot fail */
    h->n_extents = n_ext;
    if (is_sparse_mode(rt)) {
      ALLOC_ARR(h->owned, rt->slots_per_head);
      for (uint32_t j = 0; j < rt->slots_per_head; j++) h->owned[j] = rt->free_slots[--rt->n_free_slots];
      h->n_owned = rt->slots_per_head;
      /* Pushed in reverse so that pops hand out owned[0], owned[1], ... */
      for (uint32_t j = rt->slots_per_head; j > 0; j--) okv_block_map_push_free(&h->map, h->owned[j - 1u]);
    }
  }
  for (uint32_t l = 0; l < L; l++) s->n_tokens[l] = n_tokens;
  if (nb > 0) {
    uint64_t n_blk = LH * nb;
    uint64_t n_init = LH * (nb - init_first);
    ALLOC_ARR(blk_index, n_blk);
    ALLOC_ARR(sum_index, n_blk);
    ALLOC_ARR(valid, n_blk);
    ALLOC_ARR(pairs, n_init);
    /* Write the host blocks: prefill layout [L][n_tokens][H][head_dim]. */
    uint32_t hd = c->head_dim;
    int64_t n_heads_total = (int64_t)LH;
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if ((uint64_t)n_tokens * LH * hd > (1u << 22))
#endif
    for (int64_t i = 0; i < n_heads_total; i++) {
      uint32_t l = (uint32_t)(i / H), h = (uint32_t)(i % H);
      okv_head_t *head = &s->heads[i];
      for (uint32_t t = 0; t < n_tokens; t++) {
        size_t off = (((size_t)l * n_tokens + t) * H + h) * hd;
        write_token(rt, host_block_of(rt, head, t / OKV_BLOCK_TOKENS), t % OKV_BLOCK_TOKENS, prefill->k + off,
                    prefill->v + off);
      }
    }
    uint64_t k = 0, p = 0;
    for (uint64_t i = 0; i < LH; i++) {
      okv_head_t *head = &s->heads[i];
      for (uint32_t b = 0; b < nb; b++) {
        uint64_t hb = host_block_of(rt, head, b);
        blk_index[k] = hb;
        sum_index[k] = hb;
        valid[k] = (uint8_t)(b + 1u < nb ? OKV_BLOCK_TOKENS : n_tokens - b * OKV_BLOCK_TOKENS);
        k++;
        if (b >= init_first) {
          uint32_t slot;
          if (is_sparse_mode(rt)) {
            okv_block_map_pop_free(&head->map, &slot);
          } else {
            slot = rt->free_slots[--rt->n_free_slots];
          }
          okv_block_map_map(&head->map, b, slot, 0);
          pairs[p].src_offset = hb * rt->block_bytes;
          pairs[p].dst_offset = (uint64_t)slot * rt->block_bytes;
          p++;
        }
      }
    }
    /* Summaries in chunks (the kernel takes a uint32 count). */
    for (uint64_t off = 0; off < n_blk && st == OKV_OK; off += (1u << 30)) {
      uint64_t n = n_blk - off < (1u << 30) ? n_blk - off : (1u << 30);
      okv_summary_desc_t sd = {.head_dim = hd, .kv_dtype = c->kv_dtype, .kv = rt->host_kv,
                               .summaries = rt->summaries, .n_blocks = (uint32_t)n, .block_index = blk_index + off,
                               .valid = valid + off, .summary_index = sum_index + off};
      st = okv_hal_summarize_blocks_async(rt->compute, &sd);
    }
    if (st == OKV_OK) st = okv_hal_copy_blocks_async(rt->compute, rt->host_kv, rt->pool, rt->block_bytes, p, pairs);
    okv_status_t st2 = okv_hal_stream_synchronize(rt->compute);
    if (st == OKV_OK) st = st2;
    else okv_status_free(st2);
    if (st != OKV_OK) {
      st = okv_status_annotate(st, "okv_runtime_seq_add: loading the prefill");
      goto fail;
    }
    /* The initial working set is now current in its slots (readable). */
    for (uint64_t i = 0; i < LH; i++) {
      okv_block_map_t *m = &s->heads[i].map;
      for (uint32_t j = 0; j < m->n_resident; j++) {
        uint32_t b = m->resident[j];
        okv_block_map_set_current(m, b, b + 1u < nb ? OKV_BLOCK_TOKENS : n_tokens - b * OKV_BLOCK_TOKENS);
      }
    }
  }
  xfree(&rt->alloc, blk_index);
  xfree(&rt->alloc, sum_index);
  xfree(&rt->alloc, valid);
  xfree(&rt->alloc, pairs);
  s->id = rt->next_id++;
  s->live = true;
  *out_seq_id = s->id;
  return OKV_OK;
fail:
  xfree(&rt->alloc, blk_index);
  xfree(&rt->alloc, sum_index);
  xfree(&rt->alloc, valid);
  xfree(&rt->alloc, pairs);
  seq_release(rt, s); /* returns owned (sparse) or mapped (dense) slots and the extents */
  return st;
}

okv_status_t okv_runtime_seq_remove(okv_runtime_t *rt, uint32_t seq_id) {
  if (rt == NULL) return INVALID("okv_runtime_seq_remove: runtime is NULL");
  okv_seq_t *s = seq_find(rt, seq_id);
  if (s == NULL) return okv_status_make(OKV_STATUS_NOT_FOUND, "okv_runtime_seq_remove: no sequence %u", seq_id);
  if (has_pipeline(rt)) {
    /* Drain: no job may read the sequence's maps, and the copy stream must have
     * passed every pending transfer into its slots, before they are reused. */
    jobs_drain(rt);
    for (uint32_t l = 0; l < rt->cfg.n_layers; l++) {
      okv_layer_job_t *job = &rt->jobs[l];
      bool uses = false;
      for (uint32_t i = 0; i < job->n_plan && !uses; i++)
        uses = job->plan[i].seq_id == seq_id && &rt->seqs[job->plan[i].seq_index] == s;
      if (uses) job_wait_event(rt, l);
    }
  }
  seq_release(rt, s);
  return OKV_OK;
}

okv_status_t okv_runtime_seq_length(const okv_runtime_t *rt, uint32_t seq_id, uint32_t *out_n_tokens) {
  if (rt == NULL) return INVALID("okv_runtime_seq_length: runtime is NULL");
  if (out_n_tokens == NULL) return INVALID("okv_runtime_seq_length: out_n_tokens is NULL");
  const okv_seq_t *s = seq_find(rt, seq_id);
  if (s == NULL) return okv_status_make(OKV_STATUS_NOT_FOUND, "okv_runtime_seq_length: no sequence %u", seq_id);
  *out_n_tokens = s->n_tokens[rt->cfg.n_layers - 1u];
  return OKV_OK;
}

okv_status_t okv_runtime_seq_resident(const okv_runtime_t *rt, uint32_t seq_id, uint32_t layer, uint32_t kv_head,
                                      uint32_t *out_blocks, uint32_t capacity, uint32_t *out_count) {
  if (rt == NULL) return INVALID("okv_runtime_seq_resident: runtime is NULL");
  if (out_count == NULL) return INVALID("okv_runtime_seq_resident: out_count is NULL");
  if (out_blocks == NULL && capacity > 0) return INVALID("okv_runtime_seq_resident: out_blocks is NULL");
  if (layer >= rt->cfg.n_layers)
    return INVALID("okv_runtime_seq_resident: layer = %u must be < n_layers = %u", layer, rt->cfg.n_layers);
  if (kv_head >= rt->cfg.n_kv_heads)
    return INVALID("okv_runtime_seq_resident: kv_head = %u must be < n_kv_heads = %u", kv_head, rt->cfg.n_kv_heads);
  const okv_seq_t *s = seq_find(rt, seq_id);
  if (s == NULL) return okv_status_make(OKV_STATUS_NOT_FOUND, "okv_runtime_seq_resident: no sequence %u", seq_id);
  /* The worker may be selecting this layer: wait until it is done (read-only otherwise). */
  job_wait_selected((okv_runtime_t *)rt, layer);
  const okv_block_map_t *m = &seq_head(rt, s, layer, kv_head)->map;
  uint32_t n = 0;
  for (uint32_t b = 0; b < m->n_blocks; b++)
    if (m->slot_of[b] != OKV_NO_SLOT && m->slot_tokens[b] > 0) { /* readable blocks only */
      if (n < capacity) out_blocks[n] = b;
      n++;
    }
  *out_count = n;
  return OKV_OK;
}

const okv_block_map_t *okv_runtime_debug_map(const okv_runtime_t *rt, uint32_t seq_id, uint32_t layer,
                                             uint32_t kv_head) {
  const okv_seq_t *s = rt ? seq_find(rt, seq_id) : NULL;
  if (s == NULL || layer >= rt->cfg.n_layers || kv_head >= rt->cfg.n_kv_heads) return NULL;
  return &seq_head(rt, s, layer, kv_head)->map;
}

uint32_t okv_runtime_debug_host_block(const okv_runtime_t *rt, uint32_t seq_id, uint32_t layer, uint32_t kv_head,
                                      uint32_t block) {
  const okv_seq_t *s = rt ? seq_find(rt, seq_id) : NULL;
  if (s == NULL || layer >= rt->cfg.n_layers || kv_head >= rt->cfg.n_kv_heads) return UINT32_MAX;
  const okv_head_t *h = seq_head(rt, s, layer, kv_head);
  if (block >= h->map.n_blocks) return UINT32_MAX;
  return (uint32_t)host_block_of(rt, h, block);
}

uint64_t okv_runtime_debug_free_slots(const okv_runtime_t *rt) { return rt ? rt->n_free_slots : 0; }

/* ------------------------------------------------------------------ decode step */

okv_status_t okv_runtime_step_begin(okv_runtime_t *rt, uint32_t n_seqs, const uint32_t *seq_ids,
                                    uint32_t n_query_tokens) {
  if (rt == NULL) return INVALID("okv_runtime_step_begin: runtime is NULL");
  if (rt->in_step) return INVALID("okv_runtime_step_begin: a step is in progress (call okv_runtime_step_end)");
  if (n_seqs == 0 || n_seqs > rt->cfg.max_seqs)
    return INVALID("okv_runtime_step_begin: n_seqs = %u must be in 1..max_seqs = %u", n_seqs, rt->cfg.max_seqs);
  if (seq_ids == NULL) return INVALID("okv_runtime_step_begin: seq_ids is NULL");
  uint32_t t_min = rt->cfg.mode == OKV_MODE_OASIS ? 2u : 1u;
  if (n_query_tokens < t_min || n_query_tokens > 4)
    return INVALID("okv_runtime_step_begin: n_query_tokens = %u must be in %u..4 in mode %s", n_query_tokens, t_min,
                   okv_mode_name(rt->cfg.mode));
  for (uint32_t i = 0; i < n_seqs; i++) {
    okv_seq_t *s = seq_find(rt, seq_ids[i]);
    if (s == NULL) return okv_status_make(OKV_STATUS_NOT_FOUND, "okv_runtime_step_begin: seq_ids[%u] = %u does not exist", i, seq_ids[i]);
    for (uint32_t j = 0; j < i; j++)
      if (seq_ids[j] == seq_ids[i]) return INVALID("okv_runtime_step_begin: seq_ids[%u] = %u is listed twice", i, seq_ids[i]);
    if (s->n_tokens[0] >= rt->cfg.max_context_tokens)
      return okv_status_make(OKV_STATUS_OUT_OF_MEMORY,
                             "okv_runtime_step_begin: sequence %u is at max_context_tokens = %u", seq_ids[i],
                             rt->cfg.max_context_tokens);
    rt->step_seq_index[i] = (uint32_t)(s - rt->seqs);
    rt->step_seq_id[i] = seq_ids[i];
  }
  rt->in_step = true;
  rt->step_n_seqs = n_seqs;
  rt->step_T = n_query_tokens;
  rt->next_layer = 0;
  return OKV_OK;
}

static okv_seq_t *step_seq(const okv_runtime_t *rt, uint32_t i) {
  okv_seq_t *s = &rt->seqs[rt->step_seq_index[i]];
  return s->live && s->id == rt->step_seq_id[i] ? s : NULL;
}

/* Appends the real token of every sequence of the step to layer `layer`:
 * HOST block (authoritative, written first), summary, and a whole-block
 * refresh of the active block's slot from the HOST tier. Checks capacity
 * first so that an OUT_OF_MEMORY leaves the layer unchanged.
 * Write currency (docs/api.md "Faults"): a slot becomes readable only when the
 * refresh batch that wrote it completed; a failed batch (after one retry)
 * leaves every slot it covered unreadable and every summary it covered marked
 * stale, and returns the error (the token stays committed in the HOST tier).
 * Heads with such leftovers are repaired by their next append: stale slots of
 * resident blocks are copied again and stale summaries rebuilt from the HOST tier. */
static okv_status_t layer_append(okv_runtime_t *rt, uint32_t layer, const float *k_new, const float *v_new,
                                 double *bk_s, bool *out_committed) {
  *out_committed = false;
  double t0 = now_s();
  const okv_runtime_config_t *c = &rt->cfg;
  uint32_t H = c->n_kv_heads, hd = c->head_dim, E = rt->extent_blocks;
  uint32_t need_ext = 0, need_slots = 0;
  for (uint32_t i = 0; i < rt->step_n_seqs; i++) {
    okv_seq_t *s = step_seq(rt, i);
    if (s == NULL) continue;
    uint32_t pos = s->n_tokens[layer];
    if (pos >= c->max_context_tokens)
      return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "runtime: sequence %u is at max_context_tokens = %u", s->id,
                             c->max_context_tokens);
    if (pos % OKV_BLOCK_TOKENS == 0) {
      uint32_t b = pos / OKV_BLOCK_TOKENS;
      if (b % E == 0) need_ext += H;
      if (!is_sparse_mode(rt)) need_slots += H;
    }
  }
  if (need_ext > rt->n_extents_free)
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "runtime: the host tier is full (%u free extents, %u needed)",
                           rt->n_extents_free, need_ext);
  if (need_slots > rt->n_free_slots)
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY,
                           "runtime: the slot pool (device tier) is full (%llu free slots, %u needed)",
                           (unsigned long long)rt->n_free_slots, need_slots);
  /* Grow the per-block arrays first (host allocator failures leave nothing changed). */
  for (uint32_t i = 0; i < rt->step_n_seqs; i++) {
    okv_seq_t *s = step_seq(rt, i);
    if (s == NULL) continue;
    uint32_t nb = s->n_tokens[layer] / OKV_BLOCK_TOKENS + 1u;
    for (uint32_t h = 0; h < H; h++)
      OKV_RETURN_IF_ERROR(okv_block_map_reserve(&seq_head(rt, s, layer, h)->map, &rt->alloc, nb));
  }
  uint32_t n = 0;     /* (sequence, KV head) entries == active-block refresh pairs */
  uint32_t n_cp = 0;  /* copy pairs: the n refreshes, then repairs */
  uint32_t n_app = 0; /* incremental summary updates */
  uint32_t n_reb = 0; /* summaries rebuilt from the HOST tier */
  uint32_t cap_cp = rt->wr_capacity, cap_reb = rt->reb_capacity;
  okv_step_stats_t *ls = &rt->layer_step[layer];
  for (uint32_t i = 0; i < rt->step_n_seqs; i++) {
    okv_seq_t *s = step_seq(rt, i);
    if (s == NULL) continue;
    uint32_t pos = s->n_tokens[layer];
    uint32_t b = pos / OKV_BLOCK_TOKENS, off = pos % OKV_BLOCK_TOKENS;
    bool sparse_after = is_sparse_mode(rt) && b + 1u > c->dense_threshold_blocks;
    for (uint32_t h = 0; h < H; h++) {
      okv_head_t *head = seq_head(rt, s, layer, h);
      okv_block_map_t *m = &head->map;
      if (off == 0) {
        if (b % E == 0) {
          uint32_t prefer = head->n_extents ? head->extents[head->n_extents - 1u] + 1u : UINT32_MAX;
          extents_alloc(rt, 1, prefer, &head->extents[head->n_extents]);
          head->n_extents++;
        }
        m->n_blocks = b + 1u;
        uint32_t slot;
        if (!is_sparse_mode(rt)) {
          slot = rt->free_slots[--rt->n_free_slots];
        } else {
          if (b > 0 && okv_block_map_is_resident(m, b - 1u)) m->last_selected[b - 1u] = rt->step;
          if (sparse_after) {
            /* The previous active block became a normal block: keep at most K of those. */
            uint32_t held = m->n_resident;
            while (held > c->budget_blocks) {
              uint32_t v = okv_block_map_lru(m, b);
              okv_block_map_push_free(m, okv_block_map_unmap(m, v));
              ls->evicted++;
              held--;
            }
          }
          okv_block_map_pop_free(m, &slot); /* >= C free after the commit */
        }
        okv_block_map_map(m, b, slot, rt->step); /* unreadable until the refresh below completes */
        m->summary_stale[b] = 0;                 /* the append below starts the summary afresh */
      }
      uint64_t hb = host_block_of(rt, head, b);
      rt->append_pairs[n_cp].src_offset = hb * rt->block_bytes;
      rt->append_pairs[n_cp].dst_offset = (uint64_t)m->slot_of[b] * rt->block_bytes;
      rt->wr_map[n_cp] = m;
      rt->wr_block[n_cp] = b;
      rt->wr_tokens[n_cp] = (uint8_t)(off + 1u);
      n_cp++;
      rt->tok_block[n] = hb;
      n++;
      if (m->summary_stale[b]) { /* a failed update left it behind: rebuild (the token is in HOST by then) */
        rt->reb_index[n_reb] = hb;
        rt->reb_valid[n_reb] = (uint8_t)(off + 1u);
        rt->reb_map[n_reb] = m;
        rt->reb_block[n_reb] = b;
        n_reb++;
      } else {
        rt->append_index[n_app] = hb;
        rt->append_first[n_app] = off == 0;
        memcpy(rt->append_keys + (size_t)n_app * hd, k_new + ((size_t)i * H + h) * hd, hd * sizeof(float));
        n_app++;
      }
      if (m->needs_repair) {
        /* Leftovers of an earlier failed batch (rare: only after faults). */
        m->needs_repair = false;
        for (uint32_t j = 0; j < b; j++) {
          if (m->summary_stale[j]) {
            if (n_reb < cap_reb) {
              rt->reb_index[n_reb] = host_block_of(rt, head, j);
              rt->reb_valid[n_reb] = OKV_BLOCK_TOKENS;
              rt->reb_map[n_reb] = m;
              rt->reb_block[n_reb] = j;
              n_reb++;
            } else {
              m->needs_repair = true;
            }
          }
          if (m->slot_of[j] != OKV_NO_SLOT && m->slot_tokens[j] < OKV_BLOCK_TOKENS) {
            if (n_cp < cap_cp) {
              rt->append_pairs[n_cp].src_offset = host_block_of(rt, head, j) * rt->block_bytes;
              rt->append_pairs[n_cp].dst_offset = (uint64_t)m->slot_of[j] * rt->block_bytes;
              rt->wr_map[n_cp] = m;
              rt->wr_block[n_cp] = j;
              rt->wr_tokens[n_cp] = OKV_BLOCK_TOKENS;
              n_cp++;
            } else {
              m->needs_repair = true;
            }
          }
        }
      }
    }
    s->n_tokens[layer] = pos + 1u;
  }
  *out_committed = true;
  *bk_s += now_s() - t0;
  if (n == 0) return OKV_OK;
  /* Write the tokens into their HOST blocks (same order as the entries above). */
  t0 = now_s();
  for (uint32_t i = 0, e = 0; i < rt->step_n_seqs; i++) {
    const okv_seq_t *s = step_seq(rt, i);
    if (s == NULL) continue;
    uint32_t off = (s->n_tokens[layer] - 1u) % OKV_BLOCK_TOKENS;
    for (uint32_t h = 0; h < H; h++, e++)
      write_token(rt, rt->tok_block[e], off, k_new + ((size_t)i * H + h) * hd, v_new + ((size_t)i * H + h) * hd);
  }
  ls->append_seconds += now_s() - t0;
  /* Summaries, then the slot refreshes, on the compute stream; one event.
   * Every operation is idempotent (min/max with the same key, whole-block
   * copies from the HOST tier), so a failed batch is retried once whole. */
  okv_status_t st = OKV_OK;
  for (int attempt = 0; attempt < 2; attempt++) {
    st = okv_hal_summary_append_async(rt->compute, rt->summaries, hd, c->kv_dtype, n_app, rt->append_index,
                                      rt->append_keys, rt->append_first);
    if (st == OKV_OK && n_reb > 0) {
      okv_summary_desc_t sd = {.head_dim = hd, .kv_dtype = c->kv_dtype, .kv = rt->host_kv,
                               .summaries = rt->summaries, .n_blocks = n_reb, .block_index = rt->reb_index,
                               .valid = rt->reb_valid, .summary_index = rt->reb_index};
      st = okv_hal_summarize_blocks_async(rt->compute, &sd);
    }
    if (st == OKV_OK)
      st = okv_hal_copy_blocks_async(rt->compute, rt->host_kv, rt->pool, rt->block_bytes, n_cp, rt->append_pairs);
    if (st == OKV_OK) st = okv_hal_event_record(rt->append_event, rt->compute);
    if (st == OKV_OK) st = okv_hal_event_wait(rt->append_event);
    ls->append_bytes += (uint64_t)n_cp * rt->block_bytes;
    if (st == OKV_OK) {
      if (attempt == 1) ls->retried_writes++;
      break;
    }
    /* Leave no pending error on the stream for the next operation. */
    okv_status_free(okv_hal_stream_synchronize(rt->compute));
    if (attempt == 0) okv_status_free(st);
  }
  t0 = now_s();
  if (st == OKV_OK) {
    for (uint32_t k = 0; k < n_cp; k++) okv_block_map_set_current(rt->wr_map[k], rt->wr_block[k], rt->wr_tokens[k]);
    for (uint32_t k = 0; k < n_reb; k++) rt->reb_map[k]->summary_stale[rt->reb_block[k]] = 0;
  } else {
    for (uint32_t k = 0; k < n_cp; k++) {
      okv_block_map_t *m = rt->wr_map[k];
      okv_block_map_set_current(m, rt->wr_block[k], 0); /* whatever the failed copy left is not read */
      m->needs_repair = true;
      if (k < n) m->summary_stale[rt->wr_block[k]] = 1; /* its update may be missing: rebuild next time */
    }
    for (uint32_t k = 0; k < n_reb; k++) rt->reb_map[k]->needs_repair = true;
  }
  *bk_s += now_s() - t0;
  return st ? okv_status_annotate(st, "runtime: refreshing the active blocks of layer %u (the token is committed to the "
                                      "host tier; attention did not run, out is not valid)",
                                  layer)
            : OKV_OK;
}

/* Builds the attention working sets (CSR over (seq, KV head)) of layer `layer`. */
static void build_ws(okv_runtime_t *rt, uint32_t n_seqs, okv_seq_t *const *seqs, uint32_t layer) {
  uint32_t H = rt->cfg.n_kv_heads, k = 0;
  for (uint32_t s = 0; s < n_seqs; s++) {
    const okv_seq_t *seq = seqs[s];
    uint32_t n_tok = seq ? seq->n_tokens[layer] : 0;
    uint32_t nb = n_blocks_of(n_tok);
    for (uint32_t h = 0; h < H; h++) {
      rt->ws_offsets[s * H + h] = k;
      if (seq == NULL) continue;
      const okv_block_map_t *m = &seq_head(rt, seq, layer, h)->map;
      for (uint32_t i = 0; i < m->n_resident; i++) {
        uint32_t b = m->resident[i];
        uint32_t valid = b + 1u < nb ? OKV_BLOCK_TOKENS : n_tok - b * OKV_BLOCK_TOKENS;
        if (m->slot_tokens[b] < valid) valid = m->slot_tokens[b]; /* only what a completed write put there */
        if (valid == 0) continue;
        rt->ws_slots[k] = m->slot_of[b];
        rt->ws_valid[k] = (uint8_t)valid;
        k++;
      }
    }
  }
  rt->ws_offsets[n_seqs * H] = k;
}

static okv_status_t run_attention(okv_runtime_t *rt, uint32_t n_seqs, okv_seq_t *const *seqs, uint32_t layer,
                                  uint32_t T, const float *q, uint32_t n_inflight, const float *inflight,
                                  float *out, double *bk_s, double *att_s) {
  const okv_runtime_config_t *c = &rt->cfg;
  double t0 = now_s();
  build_ws(rt, n_seqs, seqs, layer);
  *bk_s += now_s() - t0;
  uint64_t q_bytes = (uint64_t)n_seqs * T * c->n_q_heads * c->head_dim * sizeof(float);
  OKV_RETURN_IF_ERROR(okv_hal_buffer_write(rt->fg.q, 0, q, q_bytes));
  if (n_inflight > 0)
    OKV_RETURN_IF_ERROR(okv_hal_buffer_write(rt->fg_inflight, 0, inflight,
                                             (uint64_t)n_seqs * n_inflight * 2u * c->n_kv_heads * c->head_dim * 4u));
  okv_attention_desc_t d = {.n_seqs = n_seqs, .n_kv_heads = c->n_kv_heads, .group_size = rt->group_size,
                            .head_dim = c->head_dim, .n_query_tokens = T, .kv_dtype = c->kv_dtype,
                            .kv_pool = rt->pool, .n_slots = rt->n_slots, .ws_offsets = rt->ws_offsets,
                            .ws_slots = rt->ws_slots, .ws_valid = rt->ws_valid, .q = rt->fg.q, .q_offset = 0,
                            .n_inflight = n_inflight, .inflight_kv = n_inflight ? rt->fg_inflight : NULL,
                            .inflight_offset = 0, .out = rt->fg_out, .out_offset = 0, .block_mass = NULL};
  t0 = wall_s();
  okv_status_t st = okv_hal_attention_async(rt->compute, &d);
  if (st == OKV_OK) st = okv_hal_stream_synchronize(rt->compute);
  *att_s += wall_s() - t0;
  if (st != OKV_OK) return okv_status_annotate(st, "runtime: attention of layer %u", layer);
  OKV_RETURN_IF_ERROR(okv_hal_buffer_read(rt->fg_out, 0, out, q_bytes));
  size_t row = (size_t)T * c->n_q_heads * c->head_dim;
  for (uint32_t s = 0; s < n_seqs; s++)
    if (seqs[s] == NULL) memset(out + s * row, 0, row * sizeof(float));
  return OKV_OK;
}

/* Recall (track_recall): the real query's top-K, resident in time or not. In
 * ONDEMAND mode the same pass drives the synchronous fetch of every miss.
 * Failures are absorbed (docs/api.md "Faults"): a failed prediction fetches
 * nothing, a failed fetch maps nothing; both count in pipeline_errors. */
static void fg_predict_and_fetch(okv_runtime_t *rt, uint32_t layer, const float *q, double *bk_s) {
  const okv_runtime_config_t *c = &rt->cfg;
  okv_predict_ctx_t *ctx = &rt->fg;
  okv_step_stats_t *ls = &rt->layer_step[layer];
  uint32_t n_seqs = rt->step_n_seqs, T = rt->step_T, H = c->n_kv_heads, K = c->budget_blocks;
  bool any = false;
  for (uint32_t s = 0; s < n_seqs; s++) {
    okv_seq_t *seq = step_seq(rt, s);
    if (seq && !seq_layer_sparse(rt, seq, layer)) seq = NULL;
    ctx->seqs[s] = seq;
    any |= seq != NULL;
  }
  if (!any) return;
  okv_status_t st = okv_hal_buffer_write(ctx->q, 0, q, (uint64_t)n_seqs * T * c->n_q_heads * c->head_dim * 4u);
  if (st == OKV_OK) st = predict_topk(rt, ctx, rt->compute, n_seqs, layer, T, 0, 1, bk_s);
  if (st != OKV_OK) {
    okv_status_free(okv_hal_stream_synchronize(rt->compute)); /* no pending error left for attention */
    okv_status_free(st);
    ls->pipeline_errors++;
    return;
  }
  double t0 = now_s();
  bool ondemand = c->mode == OKV_MODE_ONDEMAND;
  uint32_t n_plan = 0;
  for (uint32_t s = 0; s < n_seqs; s++) {
    okv_seq_t *seq = ctx->seqs[s];
    if (seq == NULL) continue;
    for (uint32_t h = 0; h < H; h++) {
      uint32_t u = s * H + h;
      const uint32_t *pred = &ctx->host_topk[(size_t)u * K];
      okv_head_t *hd = seq_head(rt, seq, layer, h);
      if (c->track_recall) {
        for (uint32_t i = 0; i < ctx->host_counts[u]; i++) ls->recall_hits += okv_block_map_is_resident(&hd->map, pred[i]);
        ls->recall_total += ctx->host_counts[u];
      }
      if (!ondemand) continue;
      okv_select_params_t p = {.budget_blocks = K, .cap_blocks = UINT32_MAX, .step = rt->step,
                               .active_block = n_blocks_of(seq->n_tokens[layer]) - 1u};
      okv_select_result_t r;
      st = okv_select_head(&hd->map, &p, pred, ctx->host_counts[u], ctx->sel_scratch, ctx->sel_admitted,
                           ctx->sel_victims, &r);
      if (st != OKV_OK) { /* cannot happen with the runtime's own parameters */
        okv_status_free(st);
        ls->pipeline_errors++;
        continue;
      }
      ls->hits += r.n_hits;
      ls->misses += r.n_misses;
      ls->admitted += r.n_admitted;
      /* Synchronous: nothing reads the pool meanwhile, so victims leave now and their slots are reused. */
      for (uint32_t i = 0; i < r.n_admitted; i++) {
        if (ctx->sel_victims[i] != OKV_NO_BLOCK) {
          okv_block_map_push_free(&hd->map, okv_block_map_unmap(&hd->map, ctx->sel_victims[i]));
          ls->evicted++;
        }
        uint32_t slot;
        okv_block_map_pop_free(&hd->map, &slot);
        okv_plan_entry_t *e = &rt->od_plan[n_plan];
        e->seq_index = (uint32_t)(seq - rt->seqs);
        e->seq_id = seq->id;
        e->kv_head = h;
        e->block = ctx->sel_admitted[i];
        e->slot = slot;
        e->victim = OKV_NO_BLOCK;
        rt->od_pairs[n_plan].src_offset = host_block_of(rt, hd, e->block) * rt->block_bytes;
        rt->od_pairs[n_plan].dst_offset = (uint64_t)slot * rt->block_bytes;
        n_plan++;
      }
    }
  }
  *bk_s += now_s() - t0;
  if (n_plan == 0) return;
  t0 = wall_s();
  st = okv_hal_copy_blocks_async(rt->compute, rt->host_kv, rt->pool, rt->block_bytes, n_plan, rt->od_pairs);
  okv_status_t st2 = okv_hal_stream_synchronize(rt->compute);
  if (st == OKV_OK) st = st2;
  else okv_status_free(st2);
  if (st != OKV_OK) okv_status_free(okv_hal_stream_synchronize(rt->compute)); /* drained, no pending error */
  ls->stall_seconds += wall_s() - t0;
  double t1 = now_s();
  for (uint32_t i = 0; i < n_plan; i++) {
    okv_plan_entry_t *e = &rt->od_plan[i];
    okv_block_map_t *m = &seq_head(rt, &rt->seqs[e->seq_index], layer, e->kv_head)->map;
    if (st == OKV_OK) {
      okv_block_map_map(m, e->block, e->slot, rt->step);
      okv_block_map_set_current(m, e->block, OKV_BLOCK_TOKENS); /* never the active block */
      ls->blocks_moved++;
      ls->bytes_moved[OKV_TIER_HOST][OKV_TIER_DEVICE] += rt->block_bytes;
    } else {
      okv_block_map_push_free(m, e->slot);
      ls->failed_blocks++;
    }
  }
  if (st != OKV_OK) ls->pipeline_errors++;
  okv_status_free(st);
  *bk_s += now_s() - t1;
}

static void job_submit(okv_runtime_t *rt, uint32_t layer, const float *q) {
  okv_layer_job_t *job = &rt->jobs[layer];
  const okv_runtime_config_t *c = &rt->cfg;
  uint32_t T = rt->step_T;
  job->step = rt->step;
  job->n_seqs = rt->step_n_seqs;
  memcpy(job->seq_index, rt->step_seq_index, rt->step_n_seqs * sizeof(uint32_t));
  memcpy(job->seq_id, rt->step_seq_id, rt->step_n_seqs * sizeof(uint32_t));
  job->n_query_tokens = T;
  job->t_begin = c->mode == OKV_MODE_OASIS ? 1u : 0u;
  job->t_end = c->mode == OKV_MODE_OASIS ? T : 1u;
  memcpy(job->q_host, q, (size_t)rt->step_n_seqs * T * c->n_q_heads * c->head_dim * sizeof(float));
  job->stats_pending = true;
  pthread_mutex_lock(&rt->mutex);
  job->state = OKV_JOB_QUEUED;
  rt->queue[(rt->q_head + rt->q_len) % c->n_layers] = layer;
  rt->q_len++;
  pthread_cond_signal(&rt->work_cv);
  pthread_mutex_unlock(&rt->mutex);
}

/* A failed step_layer / peek_layer marks its output invalid: every element a
 * quiet NaN, so that no stale or foreign value can be mistaken for attention. */
static void fill_invalid(const okv_runtime_t *rt, uint32_t n_seqs, uint32_t T, float *out) {
  if (out == NULL) return;
  size_t n = (size_t)n_seqs * T * rt->cfg.n_q_heads * rt->cfg.head_dim;
  for (size_t i = 0; i < n; i++) out[i] = NAN;
}

okv_status_t okv_runtime_step_layer(okv_runtime_t *rt, uint32_t layer, const float *k_new, const float *v_new,
                                    const float *q, const float *draft_kv, float *out) {
  if (rt == NULL) return INVALID("okv_runtime_step_layer: runtime is NULL");
  if (!rt->in_step) return INVALID("okv_runtime_step_layer: no step in progress (call okv_runtime_step_begin)");
  okv_status_t st = OKV_OK;
  if (layer != rt->next_layer)
    st = INVALID("okv_runtime_step_layer: layer = %u, expected layer %u (layers run in order)", layer, rt->next_layer);
  else if (k_new == NULL || v_new == NULL)
    st = INVALID("okv_runtime_step_layer: k_new or v_new is NULL");
  else if (q == NULL)
    st = INVALID("okv_runtime_step_layer: q is NULL");
  else if (out == NULL)
    st = INVALID("okv_runtime_step_layer: out is NULL");
  else if (rt->step_T > 1 && draft_kv == NULL)
    st = INVALID("okv_runtime_step_layer: draft_kv is NULL with n_query_tokens = %u", rt->step_T);
  if (st != OKV_OK) {
    fill_invalid(rt, rt->step_n_seqs, rt->step_T, out);
    return st;
  }
  double bk = 0, att = 0;
  okv_step_stats_t *ls = &rt->layer_step[layer];
  /* 1. Layer-local sync and commit of the previous step's transfer (before the
   * append so that the new active block finds >= C free slots). Failures are absorbed. */
  layer_commit(rt, layer, &bk);
  /* 2. Append (commit) the real token. OUT_OF_MEMORY / INVALID_ARGUMENT: nothing committed. */
  bool committed = false;
  okv_status_t append_st = layer_append(rt, layer, k_new, v_new, &bk, &committed);
  if (!committed) {
    ls->bookkeeping_seconds += bk;
    fill_invalid(rt, rt->step_n_seqs, rt->step_T, out);
    return append_st;
  }
  rt->next_layer = layer + 1u;
  if (append_st == OKV_OK) {
    /* 3. Recall / on-demand fetch with the real query (failures absorbed). */
    if (rt->cfg.track_recall || rt->cfg.mode == OKV_MODE_ONDEMAND) fg_predict_and_fetch(rt, layer, q, &bk);
    /* 4. Attention over the working set; draft tokens are in flight. */
    okv_seq_t **seqs = rt->batch_seqs;
    for (uint32_t s = 0; s < rt->step_n_seqs; s++) seqs[s] = step_seq(rt, s);
    st = run_attention(rt, rt->step_n_seqs, seqs, layer, rt->step_T, q, rt->step_T - 1u, draft_kv, out, &bk, &att);
    ls->attention_seconds += att;
  }
  /* 5. Hand the layer to the background pipeline (the token is committed either way). */
  if (has_pipeline(rt)) {
    double t0 = now_s();
    job_submit(rt, layer, q);
    bk += now_s() - t0;
  }
  ls->bookkeeping_seconds += bk;
  if (append_st != OKV_OK) {
    okv_status_free(st);
    st = append_st;
  }
  if (st != OKV_OK) fill_invalid(rt, rt->step_n_seqs, rt->step_T, out);
  return st;
}

okv_status_t okv_runtime_step_end(okv_runtime_t *rt, okv_step_stats_t *out_stats) {
  if (rt == NULL) return INVALID("okv_runtime_step_end: runtime is NULL");
  if (!rt->in_step) return INVALID("okv_runtime_step_end: no step in progress");
  okv_status_t st = OKV_OK;
  if (rt->next_layer != rt->cfg.n_layers)
    st = INVALID("okv_runtime_step_end: only %u of %u layers ran this step", rt->next_layer, rt->cfg.n_layers);
  okv_step_stats_t step;
  memset(&step, 0, sizeof step);
  double stall = 0;
  for (uint32_t l = 0; l < rt->cfg.n_layers; l++) {
    okv_step_stats_t *ls = &rt->layer_step[l];
    if (has_pipeline(rt)) {
      double t0 = wall_s();
      job_wait_selected(rt, l);
      stall += wall_s() - t0;
      okv_layer_job_t *job = &rt->jobs[l];
      if (job->stats_pending) {
        okv_step_stats_t js = job->stats;
        js.deferred_steps = 0;
        stats_add(ls, &js);
        job->stats_pending = false;
      }
    }
    ls->steps = 1;
    ls->deferred_steps = ls->deferred > 0;
    stats_add(&step, ls);
    stats_add(&rt->layer_cum[l], ls);
    memset(ls, 0, sizeof *ls);
  }
  (void)stall;
  step.steps = 1;
  step.deferred_steps = step.deferred > 0;
  stats_add(&rt->total_cum, &step);
  if (out_stats) *out_stats = step;
  rt->in_step = false;
  rt->step++;
  return st;
}

okv_status_t okv_runtime_peek_layer(okv_runtime_t *rt, uint32_t n_seqs, const uint32_t *seq_ids, uint32_t layer,
                                    uint32_t n_query_tokens, const float *q, const float *inflight_kv, float *out) {
  if (rt == NULL) return INVALID("okv_runtime_peek_layer: runtime is NULL");
  if (n_seqs == 0 || n_seqs > rt->cfg.max_seqs)
    return INVALID("okv_runtime_peek_layer: n_seqs = %u must be in 1..max_seqs = %u", n_seqs, rt->cfg.max_seqs);
  if (seq_ids == NULL || q == NULL || out == NULL || inflight_kv == NULL)
    return INVALID("okv_runtime_peek_layer: seq_ids, q, inflight_kv and out must not be NULL");
  if (layer >= rt->cfg.n_layers)
    return INVALID("okv_runtime_peek_layer: layer = %u must be < n_layers = %u", layer, rt->cfg.n_layers);
  if (n_query_tokens < 1 || n_query_tokens > 4)
    return INVALID("okv_runtime_peek_layer: n_query_tokens = %u must be in 1..4", n_query_tokens);
  okv_seq_t **seqs = rt->batch_seqs;
  okv_status_t st = OKV_OK;
  for (uint32_t i = 0; i < n_seqs && st == OKV_OK; i++) {
    seqs[i] = seq_find(rt, seq_ids[i]);
    if (seqs[i] == NULL)
      st = okv_status_make(OKV_STATUS_NOT_FOUND, "okv_runtime_peek_layer: seq_ids[%u] = %u does not exist", i, seq_ids[i]);
  }
  double bk = 0, att = 0;
  /* Do not read a slot that a pending transfer writes: commit it first (failures absorbed). */
  if (st == OKV_OK) layer_commit(rt, layer, &bk);
  if (st == OKV_OK)
    st = run_attention(rt, n_seqs, seqs, layer, n_query_tokens, q, n_query_tokens, inflight_kv, out, &bk, &att);
  rt->layer_step[layer].bookkeeping_seconds += bk;
  if (st != OKV_OK) fill_invalid(rt, n_seqs, n_query_tokens, out);
  return st;
}
