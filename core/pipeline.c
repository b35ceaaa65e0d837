/* The background pipeline per layer (arXiv 2608.08097, "Background
 * pipeline"): predict (score every block from its summary, top-K), select
 * (capped eviction) and one batched HOST->DEVICE transfer per layer, run by the
 * runtime's worker thread; and the foreground's layer-local sync that commits
 * a layer's transfer into the maps. Owns okv_layer_job_t and the worker.
 * Failures are absorbed (docs/api.md "Faults"). */
#include "runtime_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- scoring + top-K ---- */

/* Scores every unit of the listed (seq, KV head) segments against the queries
 * in sd->q: a unit is `unit_blocks` consecutive blocks (1: blocks, with their
 * summaries; OKV_SCORING_GROUP_BLOCKS: groups, with the group summaries that
 * sd->summaries names). A head's units sit in runs of contiguous HOST extents;
 * one launch per run index, filling sd's segment arrays (ctx->seg_*) each
 * time. Segments whose ctx->seqs[s] is NULL score nothing. Unit i of segment u
 * lands at score u * max_blocks + i. Adds its host time to *bk_s. */
okv_status_t okv_rt_score_units(okv_runtime_t *rt, okv_predict_ctx_t *ctx, okv_hal_stream_t *stream,
                                const okv_score_desc_t *sd, uint32_t n_seqs, uint32_t layer, uint32_t unit_blocks,
                                double *bk_s) {
  double t0 = okv_rt_bk_s();
  uint32_t H = rt->cfg.n_kv_heads, UE = rt->extent_blocks / unit_blocks; /* units per extent */
  for (uint32_t u = 0; u < n_seqs * H; u++) ctx->seg_cursor[u] = 0;
  /* The heads' hot mirrors are cold: one pass of prefetches first, so that the misses overlap. */
  for (uint32_t s = 0; s < n_seqs; s++)
    if (ctx->seqs[s] != NULL)
      okv_rt_prefetch_range(head_hot(rt, (uint32_t)(ctx->seqs[s] - rt->seqs), layer, 0), H * sizeof(okv_head_hot_t));
  for (;;) {
    bool any = false, more = false; /* more: some head has runs left for the next launch */
    for (uint32_t s = 0; s < n_seqs; s++) {
      const okv_seq_t *seq = ctx->seqs[s];
      uint32_t nb = seq ? n_blocks_of(seq->n_tokens[layer]) : 0;
      uint32_t n_units = ceil_div_u32(nb, unit_blocks), need = ceil_div_u32(nb, rt->extent_blocks);
      for (uint32_t h = 0; h < H; h++) {
        uint32_t u = s * H + h, cur = ctx->seg_cursor[u];
        ctx->seg_summary_first[u] = 0;
        ctx->seg_n[u] = 0;
        ctx->seg_score_first[u] = 0;
        if (cur >= need) continue;
        /* The head's hot mirror (okv_head_hot_t: the layer's heads in consecutive lines) gives its leading and
         * trailing runs; a run between them reads its extents. */
        uint32_t start, run = okv_rt_hot_run(head_hot(rt, (uint32_t)(seq - rt->seqs), layer, h), cur, need, &start);
        more |= cur + run < need;
        uint32_t first = cur * UE, n = run * UE;
        if (n > n_units - first) n = n_units - first;
        ctx->seg_summary_first[u] = (uint64_t)start * UE;
        ctx->seg_n[u] = n;
        ctx->seg_score_first[u] = (uint64_t)u * rt->max_blocks + first;
        ctx->seg_cursor[u] = cur + run;
        any = true;
      }
    }
    if (!any) break;
    *bk_s += okv_rt_bk_s() - t0;
    okv_status_t st = okv_hal_score_blocks_async(stream, sd);
    t0 = okv_rt_bk_s();
    if (st != OKV_OK) return st;
    if (!more) break;
  }
  *bk_s += okv_rt_bk_s() - t0;
  return OKV_OK;
}

/* Scores every block of the listed (seq, KV head) segments against queries
 * t_begin..t_end-1 already in ctx->q and takes the top-K, excluding each head's
 * active block; results land in ctx->host_topk / host_counts. Segments whose
 * ctx->seqs[s] is NULL are skipped (count 0). Blocks of one head sit in runs of
 * contiguous host extents; one scoring launch per run index. */
okv_status_t okv_rt_predict_topk(okv_runtime_t *rt, okv_predict_ctx_t *ctx, okv_hal_stream_t *stream, uint32_t n_seqs,
                                 uint32_t layer, uint32_t T, uint32_t t_begin, uint32_t t_end, double *bk_s) {
  if (rt->groups_kept > 0) return okv_rt_predict_two_level(rt, ctx, stream, n_seqs, layer, T, t_begin, t_end, bk_s);
  return okv_rt_predict_topk_flat(rt, ctx, stream, n_seqs, layer, T, t_begin, t_end, bk_s);
}

okv_status_t okv_rt_predict_topk_flat(okv_runtime_t *rt, okv_predict_ctx_t *ctx, okv_hal_stream_t *stream,
                                      uint32_t n_seqs, uint32_t layer, uint32_t T, uint32_t t_begin, uint32_t t_end,
                                      double *bk_s) {
  double t0 = okv_rt_bk_s();
  uint32_t H = rt->cfg.n_kv_heads;
  uint32_t n_seg = n_seqs * H;
  okv_score_desc_t sd = okv_rt_pass_desc(rt, ctx, n_seqs, T, t_begin, t_end, rt->summaries, rt->cfg.summary_dtype);
  *bk_s += okv_rt_bk_s() - t0;
  okv_status_t st = okv_rt_score_units(rt, ctx, stream, &sd, n_seqs, layer, 1, bk_s);
  if (st != OKV_OK) return okv_status_annotate(st, "runtime: scoring layer %u", layer);
  t0 = okv_rt_bk_s();
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
  okv_topk_desc_t td = {.n_segments = n_seg,
                        .k = rt->cfg.budget_blocks,
                        .scores = ctx->scores,
                        .seg_score_first = ctx->seg_score_first,
                        .seg_n = ctx->topk_n,
                        .excl_offsets = ctx->excl_offsets,
                        .excl_blocks = ctx->excl_blocks,
                        .out_indices = ctx->topk,
                        .out_offset = 0,
                        .out_counts = ctx->counts,
                        .counts_offset = 0};
  *bk_s += okv_rt_bk_s() - t0;
  return okv_rt_final_topk(ctx, stream, &td, layer);
}

/* ---- background pipeline ---- */

#define OKV_SELECT_PREFETCH_AHEAD 4u /* heads */

/* Predict + select + issue one batched transfer for one layer job. */
static void job_run(okv_runtime_t *rt, uint32_t layer) {
  okv_layer_job_t *job = &rt->jobs[layer];
  okv_predict_ctx_t *ctx = &rt->wk;
  double bk = 0, t0 = okv_rt_bk_s();
  uint32_t H = rt->cfg.n_kv_heads, K = rt->cfg.budget_blocks;
  memset(&job->stats, 0, sizeof job->stats);
  job->n_plan = 0;
  job->remote_t0 = job->remote_t1 = 0;
  bool any = false;
  for (uint32_t s = 0; s < job->n_seqs; s++) {
    okv_seq_t *seq = &rt->seqs[job->seq_index[s]];
    if (!seq->live || seq->id != job->seq_id[s] || !seq_layer_sparse(rt, seq, layer) || okv_seq_is_lost(seq))
      seq = NULL;
    ctx->seqs[s] = seq;
    any |= seq != NULL;
  }
  bk += okv_rt_bk_s() - t0;
  if (!any) goto done;
  uint32_t T = job->n_query_tokens;
  okv_status_t st = okv_hal_buffer_write(
      ctx->q, 0, job->q_host, (uint64_t)job->n_seqs * T * rt->cfg.n_q_heads * rt->cfg.head_dim * sizeof(float));
  double tp = 0;
  if (st == OKV_OK) { /* the query copy above is a transfer, not bookkeeping */
    tp = okv_rt_wall_s();
    st = okv_rt_predict_topk(rt, ctx, rt->predict, job->n_seqs, layer, T, job->t_begin, job->t_end, &bk);
    job->stats.predict_seconds = okv_rt_wall_s() - tp;
  }
  if (st != OKV_OK) {
    OKV_IGNORE_ERROR(okv_hal_stream_synchronize(rt->predict)); /* no pending error left for the next job */
    job->error = st;
    goto done;
  }
  t0 = okv_rt_bk_s();
  double wait_s = 0; /* the selection's one wait on the predict stream: a wait on kernels, not bookkeeping */
  job->sel_undo = false;
  if (rt->dev_sel) { /* the same rule on the device's slot tables (device_select.c) */
    /* The top-K was not waited for: the prediction ends when the selection's wait returns (one wait for both;
     * its time includes the selection kernel's). */
    double t_ready = 0;
    st = okv_rt_dsel_select(rt, layer, job, ctx, &t_ready, &wait_s);
    if (t_ready > 0) job->stats.predict_seconds = t_ready - tp;
    if (st != OKV_OK) job->error = st;
  }
  okv_select_params_t p = {.budget_blocks = K, .cap_blocks = job->cap, .step = job->step};
  for (uint32_t s = 0; s < job->n_seqs && !rt->dev_sel; s++) {
    okv_seq_t *seq = ctx->seqs[s];
    if (seq == NULL) continue;
    p.active_block = n_blocks_of(seq->n_tokens[layer]) - 1u;
    for (uint32_t h = 0; h < H; h++) {
      uint32_t u = s * H + h;
      okv_head_t *hd = seq_head(rt, seq, layer, h);
      /* The maps are cold (each step streams the KV and the scores through the caches): prefetch
       * OKV_SELECT_PREFETCH_AHEAD heads ahead, so that their misses overlap this head's work. */
      for (uint32_t k = u == 0 ? 1u : OKV_SELECT_PREFETCH_AHEAD; k <= OKV_SELECT_PREFETCH_AHEAD; k++) {
        uint32_t ua = u + k;
        if (ua / H < job->n_seqs && ctx->seqs[ua / H] != NULL)
          okv_select_prefetch(&seq_head(rt, ctx->seqs[ua / H], layer, ua % H)->map);
      }
      /* A head admits at most its spares (owned slots beyond K + 1): all of C for a fixed ratio; with the
       * self-tuning cap, what the pool could spread to it (seq.c). */
      uint32_t spares = hd->n_owned > K + 1u ? hd->n_owned - K - 1u : 0u;
      p.cap_blocks = job->cap < spares ? job->cap : spares;
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
  job->stats.select_seconds = okv_rt_bk_s() - t0 - wait_s;
  bk += job->stats.select_seconds;
  /* Remote sequences: blocks not in the HOST tier yet are read through their source first (remote_seq.c). */
  if (!rt->dev_sel) /* device selection takes no remote sequence (okv_runtime_seq_add_remote) */
    job->n_plan = okv_rt_remote_fill(rt, layer, ctx, job->plan, job->pairs, job->n_plan, &job->stats, &job->remote_t0,
                                     &job->remote_t1);
  /* The prediction's launches are not batched (the scoring then runs while this thread lists the next
   * launches): batched, the selection's bookkeeping measured no lower in alternating runs (its launches got
   * cheaper, its one wait dearer). */
  if (job->n_plan > 0) {
    st = OKV_OK;
    job->start_recorded = false;
    bool batch = okv_status_consume(okv_hal_stream_batch_begin(rt->copy)) == OKV_STATUS_OK; /* the copy, its events */
    if (rt->cfg.fetch_ratio_auto) { /* the batch's duration measures the link */
      st = okv_hal_event_record(rt->copy_start_events[layer], rt->copy);
      job->start_recorded = st == OKV_OK;
    }
    if (st == OKV_OK)
      st = okv_hal_copy_blocks_async(rt->copy, rt->host.kv, rt->pool, rt->block_bytes, job->n_plan, job->pairs);
    if (st == OKV_OK) st = okv_hal_event_record(rt->layer_events[layer], rt->copy);
    if (batch) OKV_IGNORE_ERROR(okv_hal_stream_batch_end(rt->copy));
    if (st == OKV_OK) {
      job->event_recorded = true;
      job->event_waited = false;
    } else {
      /* Nothing we can wait for was issued: let the copy stream finish whatever
       * it took, then give the slots back. */
      OKV_IGNORE_ERROR(okv_hal_stream_synchronize(rt->copy));
      for (uint32_t i = 0; i < job->n_plan && !rt->dev_sel; i++) { /* device selection: the maps kept them */
        okv_plan_entry_t *e = &job->plan[i];
        okv_block_map_push_free(&seq_head(rt, &rt->seqs[e->seq_index], layer, e->kv_head)->map, e->slot);
      }
      job->n_plan = 0;
      job->sel_undo = true; /* device selection: the commit undoes the tables' admissions */
      if (job->error == OKV_OK)
        job->error = okv_status_annotate(st, "runtime: issuing transfer of layer %u", layer);
      else
        okv_status_free(st);
    }
  }
done:
  /* bk is the job's start, the prediction's set-up and the selection (0 when it did not run): the set-up is the
   * rest. */
  job->stats.predict_setup_seconds = bk - job->stats.select_seconds;
  job->stats.bookkeeping_seconds = bk;
}

void *okv_rt_worker_main(void *arg) {
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
void okv_rt_job_wait_selected(okv_runtime_t *rt, uint32_t layer) {
  if (!rt->worker_started) return;
  pthread_mutex_lock(&rt->mutex);
  while (rt->jobs[layer].state == OKV_JOB_QUEUED) pthread_cond_wait(&rt->done_cv, &rt->mutex);
  pthread_mutex_unlock(&rt->mutex);
}

void okv_rt_jobs_drain(okv_runtime_t *rt) {
  if (!rt->worker_started) return;
  pthread_mutex_lock(&rt->mutex); /* one lock for every layer: the worker runs the queue in order */
  for (uint32_t l = 0; l < rt->cfg.n_layers; l++)
    while (rt->jobs[l].state == OKV_JOB_QUEUED) pthread_cond_wait(&rt->done_cv, &rt->mutex);
  pthread_mutex_unlock(&rt->mutex);
}

/* Adds a finished job's selection stats to *dst once (docs/api.md "Stats": a job's stats land in the step
 * that collects them). The caller has seen the job not QUEUED under rt->mutex (that orders the worker's
 * writes before these reads). The job's deferred_steps (1 when it deferred) counts for its layer; for the
 * whole runtime a selecting step counts once, in rt->step_deferred_steps, when the first of its jobs that
 * deferred is collected (jobs are collected in step order). */
void okv_rt_job_collect(okv_runtime_t *rt, uint32_t layer, okv_step_stats_t *dst) {
  okv_layer_job_t *job = &rt->jobs[layer];
  if (!job->stats_pending) return;
  okv_rt_stats_add(dst, &job->stats);
  if (job->stats.deferred > 0 && job->step > rt->deferred_step_mark) {
    rt->deferred_step_mark = job->step;
    rt->step_deferred_steps++;
  }
  job->stats_pending = false;
}

/* Collects the stats of every job the worker has finished, without waiting for the others (step_end). */
void okv_rt_jobs_collect_done(okv_runtime_t *rt) {
  if (!rt->worker_started) return;
  pthread_mutex_lock(&rt->mutex);
  for (uint32_t l = 0; l < rt->cfg.n_layers; l++)
    if (rt->jobs[l].stats_pending && rt->jobs[l].state != OKV_JOB_QUEUED) okv_rt_job_collect(rt, l, &rt->layer_step[l]);
  pthread_mutex_unlock(&rt->mutex);
}

okv_status_t okv_runtime_synchronize(okv_runtime_t *rt) {
  if (rt == NULL) return OKV_RT_INVALID("okv_runtime_synchronize: runtime is NULL");
  if (rt->in_step) return OKV_RT_INVALID("okv_runtime_synchronize: a step is in progress (call it between steps)");
  if (!has_pipeline(rt)) return OKV_OK;
  okv_rt_jobs_drain(rt);
  /* Each layer's transfer event, waited once and its status cached for the layer's next commit (which then
   * does not wait again and absorbs a failure as it would have). */
  for (uint32_t l = 0; l < rt->cfg.n_layers; l++) (void)okv_rt_job_wait_event(rt, l);
  /* The time until the next step is a pause, not a serving interval: the self-tuning cap does not measure
   * it (the next use of each layer starts a new interval). */
  for (uint32_t l = 0; rt->last_use_s && l < rt->cfg.n_layers; l++) rt->last_use_s[l] = 0;
  return OKV_OK;
}

void okv_runtime_debug_drain(okv_runtime_t *runtime) {
  if (runtime) okv_rt_jobs_drain(runtime);
}

/* Waits for the layer's transfer event once and caches the result. Returns the wait time. */
double okv_rt_job_wait_event(okv_runtime_t *rt, uint32_t layer) {
  okv_layer_job_t *job = &rt->jobs[layer];
  if (!job->event_recorded || job->event_waited) return 0.0;
  double t0 = okv_rt_wall_s();
  job->event_status = okv_hal_event_wait(rt->layer_events[layer]);
  job->event_waited = true;
  return okv_rt_wall_s() - t0;
}

/* ---- self-tuning cap (cfg.fetch_ratio_auto; docs/api.md "Fetch ratio") ---- */

#define CAP_EWMA_WEIGHT 0.3 /* weight of a new measurement in the running estimates */
#define CAP_LINK_SHARE  0.8 /* share of a step the background transfers may fill */

/* One link measurement: `bytes` moved between the layer's copy-start event and
 * its transfer event (both done). A failed elapsed query just skips the sample. */
static void link_sample(okv_runtime_t *rt, uint32_t layer, uint64_t bytes) {
  double secs = 0;
  okv_status_t st = okv_hal_event_elapsed(rt->copy_start_events[layer], rt->layer_events[layer], &secs);
  if (st != OKV_OK) {
    okv_status_free(st);
    return;
  }
  if (secs <= 0) return;
  double bps = (double)bytes / secs;
  rt->link_bps = rt->link_bps > 0 ? (1.0 - CAP_EWMA_WEIGHT) * rt->link_bps + CAP_EWMA_WEIGHT * bps : bps;
}

void okv_rt_note_layer_use(okv_runtime_t *rt, uint32_t layer) {
  if (!rt->cfg.fetch_ratio_auto) return;
  double now = okv_rt_wall_s();
  double prev = rt->last_use_s[layer];
  rt->last_use_s[layer] = now;
  if (prev <= 0 || now <= prev) return;
  double dt = now - prev;
  rt->layer_interval_s =
      rt->layer_interval_s > 0 ? (1.0 - CAP_EWMA_WEIGHT) * rt->layer_interval_s + CAP_EWMA_WEIGHT * dt : dt;
}

/* The link ceiling for a job of `n_seqs` sequences: the configured cap, or with
 * fetch_ratio_auto the largest C whose transfers, for every layer, fit in
 * CAP_LINK_SHARE of the time between a layer's uses at the measured bandwidth:
 *   C = floor(share * link_bps * interval / (n_layers * n_seqs * n_kv_heads * block_bytes)),
 * clamped to 1..ceil(fetch_ratio * K). Until both are measured: the paper's
 * 0.05 * K (at most the maximum). */
uint32_t okv_rt_cap_ceiling(const okv_runtime_t *rt, uint32_t n_seqs) {
  uint32_t cmax = rt->cap_blocks;
  if (!rt->cfg.fetch_ratio_auto) return cmax;
  if (rt->link_bps <= 0 || rt->layer_interval_s <= 0) {
    uint32_t c0 = (uint32_t)ceil(0.05 * (double)rt->cfg.budget_blocks - 1e-9);
    return c0 < 1 ? 1 : c0 > cmax ? cmax : c0;
  }
  double heads = (double)n_seqs * rt->cfg.n_kv_heads * rt->cfg.n_layers;
  double c = CAP_LINK_SHARE * rt->link_bps * rt->layer_interval_s / (heads * (double)rt->block_bytes);
  if (!(c >= 1.0)) return 1; /* NaN-safe */
  return c >= (double)cmax ? cmax : (uint32_t)c;
}

/* The ceiling the self-tuning cap searches under: the link ceiling, at most the most spares a head holds (a
 * head admits at most its spares, so a larger C would change nothing). */
static uint32_t spares_ceiling(const okv_runtime_t *rt, uint32_t link_ceiling) {
  return rt->spares_max > 0 && rt->spares_max < link_ceiling ? rt->spares_max : link_ceiling;
}

/* C for a job of `n_seqs` sequences: the configured cap, or with
 * fetch_ratio_auto the controller's C (cap_ctl.h), never above its ceiling. */
uint32_t okv_rt_choose_cap(const okv_runtime_t *rt, uint32_t n_seqs) {
  uint32_t ceiling = okv_rt_cap_ceiling(rt, n_seqs);
  if (!rt->cfg.fetch_ratio_auto) return ceiling;
  ceiling = spares_ceiling(rt, ceiling);
  return rt->cap_ctl.c < ceiling ? rt->cap_ctl.c : ceiling;
}

/* End of a step (fetch_ratio_auto): feeds the controller the step's cost per
 * decoded token (wall time from step_begin / sequences), the blocks the cap
 * deferred, the link and its ceiling (spares_ceiling); its C applies to the
 * next step's jobs. */
void okv_rt_cap_step_end(okv_runtime_t *rt, const okv_step_stats_t *step) {
  if (!rt->cfg.fetch_ratio_auto || rt->step_n_seqs == 0) return;
  uint32_t link_ceiling = okv_rt_cap_ceiling(rt, rt->step_n_seqs);
  okv_cap_obs_t obs = {.ceiling = spares_ceiling(rt, link_ceiling),
                       .token_seconds = (okv_rt_wall_s() - rt->step_begin_s) / rt->step_n_seqs,
                       .deferred = step->deferred,
                       .link_bytes_per_s = rt->link_bps,
                       .fetch_share = step->fetched_share,
                       .fetch_share_blocks = step->fetched_share_blocks,
                       .fetch_share_measured = rt->share_measured};
  rt->cap_ceiling_last = link_ceiling;
  okv_cap_ctl_update(&rt->cap_ctl, &obs);
}

okv_status_t okv_runtime_cap_state(const okv_runtime_t *rt, okv_cap_state_t *out) {
  if (rt == NULL || out == NULL) return OKV_RT_INVALID("okv_runtime_cap_state: runtime or out_state is NULL");
  memset(out, 0, sizeof *out);
  if (!has_pipeline(rt)) return OKV_OK; /* DENSE and ONDEMAND fetch without a cap: nothing to report */
  out->cap_max_blocks = rt->cap_blocks;
  out->link_bytes_per_second = rt->link_bps;
  out->layer_interval_seconds = rt->layer_interval_s;
  double sum = 0;
  for (uint32_t l = 0; l < rt->cfg.n_layers; l++) sum += rt->jobs ? rt->jobs[l].cap : rt->cap_blocks;
  out->cap_blocks = sum / rt->cfg.n_layers;
  if (rt->cfg.fetch_ratio_auto) {
    out->cap_ceiling_blocks = rt->cap_ceiling_last;
    out->cap_target_blocks = rt->cap_ctl.c;
    out->marginal_share = rt->cap_ctl.marginal_share;
  }
  /* The heads' spares (owned slots beyond K + 1), averaged over the live sequences' heads: a head's C per
   * step is at most its spares (C_max for a fixed ratio). */
  uint64_t n = 0, sp = 0, LH = (uint64_t)rt->cfg.n_layers * rt->cfg.n_kv_heads;
  for (uint32_t i = 0; is_sparse_mode(rt) && i < rt->cfg.max_seqs; i++) {
    const okv_seq_t *s = &rt->seqs[i];
    if (!s->live) continue;
    for (uint64_t j = 0; j < LH; j++, n++) sp += s->heads[j].n_owned - rt->cfg.budget_blocks - 1u;
  }
  out->spare_blocks = n ? (double)sp / (double)n : 0.0;
  return OKV_OK;
}

uint32_t okv_rt_share_layer(const okv_runtime_t *rt) {
  if (!has_pipeline(rt) || rt->fg_mass == NULL || rt->cfg.n_layers == 0) return UINT32_MAX;
  if (rt->cfg.fetch_ratio_auto && okv_cap_ctl_wants_share(&rt->cap_ctl))
    return rt->cap_ctl.probes % rt->cfg.n_layers; /* one layer for the whole probe: its arms compare alike */
  if (rt->cfg.track_fetch_share) return (rt->step - 1u) % rt->cfg.n_layers; /* the first step (1) measures layer 0 */
  return UINT32_MAX;
}

/* Layer-local sync: waits for the layer's previous plan and commits it into the
 * maps. A failed transfer maps nothing (its slots go back to the heads' free
 * stacks, victims stay mapped); a failed transfer or prediction is absorbed and
 * counted in pipeline_errors (docs/api.md "Faults"). */
double okv_rt_layer_commit(okv_runtime_t *rt, uint32_t layer, double *bk_s) {
  if (!has_pipeline(rt)) return 0;
  okv_layer_job_t *job = &rt->jobs[layer];
  okv_step_stats_t *ls = &rt->layer_step[layer];
  double w0 = okv_rt_wall_s();
  okv_rt_job_wait_selected(rt, layer);
  double w1 = okv_rt_wall_s(), remote = 0;
  if (job->remote_t1 > 0) { /* the part of the wait during which the job read through a KV source */
    double lo = job->remote_t0 > w0 ? job->remote_t0 : w0, hi = job->remote_t1 < w1 ? job->remote_t1 : w1;
    if (hi > lo) remote = hi - lo;
    job->remote_t0 = job->remote_t1 = 0;
  }
  ls->remote_stall_seconds += remote;
  ls->stall_seconds += (w1 - w0) - remote;
  ls->stall_seconds += okv_rt_job_wait_event(rt, layer);
  /* The job's selection stats land in the step that collects them: this one, unless step_end found it done. */
  okv_rt_job_collect(rt, layer, ls);
  double t0 = okv_rt_bk_s();
  okv_status_t st = job->event_status;
  job->event_status = OKV_OK;
  bool ok = st == OKV_OK;
  if (!ok && job->n_plan > 0) {
    /* The copy stream may still be writing into the planned slots (or hold the
     * error): let it finish before those slots go back to the free stacks. The
     * worker first: a synchronize reports (and clears) any failure on the stream,
     * so it must not run while another layer's batch has failed but its event is
     * not recorded yet, or that event would report success for blocks that never
     * landed. Once the worker is idle every batch's event is enqueued before this
     * wait and takes its own batch's failure. */
    okv_rt_jobs_drain(rt);
    OKV_IGNORE_ERROR(okv_hal_stream_synchronize(rt->copy));
  }
  if (rt->dev_sel) { /* the tables are authoritative: the commit kernel applies the plan (device_select.c) */
    bool sig = !rt->sel_dirty[layer]; /* else the tables are rewritten below, their signatures with them */
    uint64_t moved = 0;
    for (uint32_t s = 0; s < job->n_seqs && job->n_plan > 0; s++) { /* per sequence: job->seq_moved */
      const okv_seq_t *seq = &rt->seqs[job->seq_index[s]];
      /* A removed sequence's tables are rewritten when its record is reused. */
      if (job->seq_moved[s] == 0 || !seq->live || seq->id != job->seq_id[s]) continue;
      if (!ok) {
        ls->failed_blocks += job->seq_moved[s];
        continue;
      }
      if (sig) okv_rt_dsel_sig_commit(rt, layer, job, s);
      ls->evicted += job->seq_evicted[s];
      moved += job->seq_moved[s];
    }
    ls->blocks_moved += moved;
    ls->bytes_moved[OKV_TIER_HOST][OKV_TIER_DEVICE] += moved * rt->block_bytes;
  }
  /* The maps are cold: request the heads' structs, then each entry's block and victim lines, before the
   * loop below, so that the misses overlap (two passes of prefetches; see docs/architecture.md). */
  for (uint32_t pass = 0; pass < 2 && !rt->dev_sel; pass++)
    for (uint32_t i = 0; i < job->n_plan; i++) {
      const okv_plan_entry_t *e = &job->plan[i];
      const okv_seq_t *seq = &rt->seqs[e->seq_index];
      if (!seq->live || seq->id != e->seq_id) continue; /* removed: its maps are gone */
      const okv_head_t *hd = seq_head(rt, seq, layer, e->kv_head);
      if (pass == 0) {
        __builtin_prefetch(hd);
        continue;
      }
      const okv_block_map_t *m = &hd->map;
      if (e->block < m->cap_blocks) __builtin_prefetch(&m->loc[e->block]);
      if (e->victim < m->cap_blocks) __builtin_prefetch(&m->loc[e->victim]);
      __builtin_prefetch(&m->resident[m->n_resident]);
    }
  for (uint32_t i = 0; i < job->n_plan && !rt->dev_sel; i++) {
    const okv_plan_entry_t *e = &job->plan[i];
    okv_seq_t *seq = &rt->seqs[e->seq_index];
    if (!seq->live || seq->id != e->seq_id) continue; /* removed: its slots went back already */
    okv_block_map_t *m = &seq_head(rt, seq, layer, e->kv_head)->map;
    if (ok) {
      if (e->victim != OKV_NO_BLOCK) { /* the block takes the victim's place in the resident list */
        okv_block_map_push_free(m, okv_block_map_replace(m, e->victim, e->block, e->slot, job->step));
        ls->evicted++;
      } else {
        okv_block_map_map(m, e->block, e->slot, job->step);
      }
      okv_block_map_set_current(m, e->block, OKV_BLOCK_TOKENS); /* fetched blocks are never the active one */
      ls->blocks_moved++;
      ls->bytes_moved[OKV_TIER_HOST][OKV_TIER_DEVICE] += rt->block_bytes;
    } else {
      okv_block_map_push_free(m, e->slot);
      ls->failed_blocks++;
    }
  }
  if (rt->dev_sel) okv_rt_dsel_commit(rt, layer, job, ok && !job->sel_undo);
  job->sel_undo = false;
  if (ok && job->start_recorded && job->n_plan > 0) link_sample(rt, layer, (uint64_t)job->n_plan * rt->block_bytes);
  job->start_recorded = false;
  /* The entries stay in plan[] until the layer's next job runs. A commit with no new job to take (the layer's
   * step_layer after a peek_layer committed it) keeps what the earlier commit mapped. */
  if (job->uncommitted) {
    job->n_fresh = ok ? job->n_plan : 0;
    job->fresh_ok = ok && job->error == OKV_OK;
  }
  job->uncommitted = false;
  job->n_plan = 0;
  job->event_recorded = false;
  job->event_waited = false;
  /* Absorbed (docs/api.md "Faults"): the blocks stay misses and are selected
   * again by later steps; attention runs over what is validly resident. */
  if (st != OKV_OK || job->error != OKV_OK) ls->pipeline_errors++;
  okv_status_free(st);
  okv_status_free(job->error);
  job->error = OKV_OK;
  const double t1 = okv_rt_bk_s();
  ls->commit_seconds += t1 - t0;
  *bk_s += t1 - t0;
  return t1;
}

void okv_rt_job_stage_queries(okv_runtime_t *rt, uint32_t layer, const float *q) {
  const okv_runtime_config_t *c = &rt->cfg;
  memcpy(rt->jobs[layer].q_host, q, (size_t)rt->step_n_seqs * rt->step_T * c->n_q_heads * c->head_dim * sizeof(float));
}

void okv_rt_job_submit(okv_runtime_t *rt, uint32_t layer) {
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
  job->cap = okv_rt_choose_cap(rt, rt->step_n_seqs);
  job->stats_pending = true;
  job->uncommitted = true;
  pthread_mutex_lock(&rt->mutex);
  job->state = OKV_JOB_QUEUED;
  rt->queue[(rt->q_head + rt->q_len) % c->n_layers] = layer;
  rt->q_len++;
  bool idle = rt->q_len == 1; /* the worker sleeps on work_cv only with an empty queue */
  pthread_mutex_unlock(&rt->mutex);
  /* Signalled after the unlock, so that the woken worker does not at once block on the mutex the engine
   * thread still holds (two extra context switches on a loaded host); only when it may be asleep. */
  if (idle) pthread_cond_signal(&rt->work_cv);
}
