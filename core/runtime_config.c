/* Runtime configuration, mode names and step statistics.
 * Owns: the mode name table, config defaults and validation, stats
 * accumulation. Touches nothing else of the runtime. */
#include "runtime_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- modes ---- */

static const char *const k_mode_names[OKV_MODE_COUNT] = {"dense", "oasis", "proxy", "ondemand"};

const char *okv_mode_name(okv_mode_t mode) { return (unsigned)mode < OKV_MODE_COUNT ? k_mode_names[mode] : "unknown"; }

okv_status_t okv_mode_parse(const char *name, okv_mode_t *out_mode) {
  if (name == NULL) return OKV_RT_INVALID("okv_mode_parse: name is NULL");
  if (out_mode == NULL) return OKV_RT_INVALID("okv_mode_parse: out_mode is NULL");
  for (int i = 0; i < OKV_MODE_COUNT; i++)
    if (strcmp(name, k_mode_names[i]) == 0) {
      *out_mode = (okv_mode_t)i;
      return OKV_OK;
    }
  return OKV_RT_INVALID("okv_mode_parse: unknown mode '%s' (dense, oasis, proxy, ondemand)", name);
}

/* ---- scoring ---- */

static const char *const k_scoring_names[OKV_SCORING_COUNT] = {"flat", "two-level", "q8", "c4"};

const char *okv_scoring_name(okv_scoring_t scoring) {
  return (unsigned)scoring < OKV_SCORING_COUNT ? k_scoring_names[scoring] : NULL;
}

okv_status_t okv_scoring_parse(const char *name, okv_scoring_t *out_scoring) {
  if (name == NULL || out_scoring == NULL) return OKV_RT_INVALID("okv_scoring_parse: name or out_scoring is NULL");
  for (int i = 0; i < OKV_SCORING_COUNT; i++)
    if (strcmp(name, k_scoring_names[i]) == 0) {
      *out_scoring = (okv_scoring_t)i;
      return OKV_OK;
    }
  return OKV_RT_INVALID("okv_scoring_parse: unknown scoring '%s' (flat, two-level, q8, c4)", name);
}

/* ---- config ---- */

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
  config->summary_dtype = OKV_SUMMARY_DTYPE_AUTO;
  config->scoring =
      OKV_SCORING_C4; /* docs/kernels.md "4-bit centres": flat's recall, a fifth of q8's first-pass bytes */
}

okv_status_t okv_runtime_config_validate(const okv_runtime_config_t *c) {
  if (c == NULL) return OKV_RT_INVALID("runtime config: config is NULL");
  if (c->n_layers == 0 || c->n_layers > 65536)
    return OKV_RT_INVALID("runtime config: n_layers = %u must be in 1..65536", c->n_layers);
  if (c->n_kv_heads == 0 || c->n_kv_heads > 4096)
    return OKV_RT_INVALID("runtime config: n_kv_heads = %u must be in 1..4096", c->n_kv_heads);
  if (c->n_q_heads == 0 || c->n_q_heads % c->n_kv_heads != 0)
    return OKV_RT_INVALID("runtime config: n_q_heads = %u must be a positive multiple of n_kv_heads = %u", c->n_q_heads,
                          c->n_kv_heads);
  if (c->n_q_heads > 65536) return OKV_RT_INVALID("runtime config: n_q_heads = %u exceeds 65536", c->n_q_heads);
  if (c->head_dim == 0 || c->head_dim > 256)
    return OKV_RT_INVALID("runtime config: head_dim = %u must be in 1..256", c->head_dim);
  if ((unsigned)c->kv_dtype >= OKV_DTYPE_COUNT)
    return OKV_RT_INVALID("runtime config: kv_dtype = %d is not a dtype", (int)c->kv_dtype);
  if (c->block_tokens != OKV_BLOCK_TOKENS)
    return OKV_RT_INVALID("runtime config: block_tokens = %u must be 16", c->block_tokens);
  if ((unsigned)c->mode >= OKV_MODE_COUNT)
    return OKV_RT_INVALID("runtime config: mode = %d is not a mode", (int)c->mode);
  if (c->budget_blocks == 0 || c->budget_blocks > OKV_TOPK_MAX)
    return OKV_RT_INVALID("runtime config: budget_blocks = %u must be in 1..%u", c->budget_blocks, OKV_TOPK_MAX);
  if (!(c->fetch_ratio > 0.0 && c->fetch_ratio <= 1.0))
    return OKV_RT_INVALID("runtime config: fetch_ratio = %g must be in (0, 1]", c->fetch_ratio);
  if ((unsigned)c->summary_dtype > OKV_SUMMARY_DTYPE_AUTO)
    return OKV_RT_INVALID("runtime config: summary_dtype = %d is not a dtype", (int)c->summary_dtype);
  if ((unsigned)c->scoring >= OKV_SCORING_COUNT)
    return OKV_RT_INVALID("runtime config: scoring = %d is not a scoring (flat, two-level, q8)", (int)c->scoring);
  if (c->scoring_groups > c->budget_blocks)
    return OKV_RT_INVALID("runtime config: scoring_groups = %u must be <= budget_blocks = %u", c->scoring_groups,
                          c->budget_blocks);
  if (c->dense_threshold_blocks != OKV_DENSE_THRESHOLD_DEFAULT && c->dense_threshold_blocks > c->budget_blocks)
    return OKV_RT_INVALID("runtime config: dense_threshold_blocks = %u must be <= budget_blocks = %u",
                          c->dense_threshold_blocks, c->budget_blocks);
  if (c->device_selection && c->fetch_ratio_auto && (c->mode == OKV_MODE_OASIS || c->mode == OKV_MODE_PROXY))
    return OKV_RT_INVALID(
        "runtime config: device_selection does not support fetch_ratio_auto (its spare slots move "
        "between heads); use a fixed fetch_ratio");
  if (c->max_seqs == 0 || c->max_seqs > 65536)
    return OKV_RT_INVALID("runtime config: max_seqs = %u must be in 1..65536", c->max_seqs);
  if (c->max_context_tokens == 0 || c->max_context_tokens > OKV_MAX_CONTEXT_LIMIT)
    return OKV_RT_INVALID("runtime config: max_context_tokens = %u must be in 1..%u", c->max_context_tokens,
                          OKV_MAX_CONTEXT_LIMIT);
  return OKV_OK;
}

const okv_runtime_config_t *okv_runtime_config(const okv_runtime_t *runtime) { return runtime ? &runtime->cfg : NULL; }

/* ---- stats ---- */

void okv_rt_stats_add(okv_step_stats_t *d, const okv_step_stats_t *s) {
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
  d->topk_agreement_hits += s->topk_agreement_hits;
  d->topk_agreement_total += s->topk_agreement_total;
  d->steps += s->steps;
  d->deferred_steps += s->deferred_steps;
  d->bookkeeping_seconds += s->bookkeeping_seconds;
  d->attention_seconds += s->attention_seconds;
  d->predict_seconds += s->predict_seconds;
  d->append_bytes += s->append_bytes;
  d->append_seconds += s->append_seconds;
  d->pipeline_errors += s->pipeline_errors;
  d->retried_writes += s->retried_writes;
  d->remote_blocks += s->remote_blocks;
  d->remote_bytes += s->remote_bytes;
  d->remote_seconds += s->remote_seconds;
  d->remote_stall_seconds += s->remote_stall_seconds;
  d->fetched_share += s->fetched_share;
  d->fetched_share_blocks += s->fetched_share_blocks;
  d->select_seconds += s->select_seconds;
  d->commit_seconds += s->commit_seconds;
  d->working_set_seconds += s->working_set_seconds;
  d->predict_setup_seconds += s->predict_setup_seconds;
  d->append_bookkeeping_seconds += s->append_bookkeeping_seconds;
  d->handoff_seconds += s->handoff_seconds;
}

/* Adds the stats of finished jobs no step has collected yet (layer UINT32_MAX: every layer's), counted as
 * okv_rt_job_collect will count them: deferred_steps per job for a layer, per selecting step for the total
 * (like every count of a step in progress, one already counted by it is not in the cumulative stats yet). */
static void add_uncollected(const okv_runtime_t *rt, uint32_t layer, okv_step_stats_t *out) {
  if (!has_pipeline(rt) || rt->jobs == NULL) return;
  uint32_t L = rt->cfg.n_layers;
  for (uint32_t l = 0; l < L; l++) {
    const okv_layer_job_t *job = &rt->jobs[l];
    if ((layer != UINT32_MAX && l != layer) || !job->stats_pending) continue;
    okv_step_stats_t js = job->stats;
    if (layer == UINT32_MAX) { /* a new selecting step, not counted yet nor by an earlier pending job */
      bool first = job->stats.deferred > 0 && job->step > rt->deferred_step_mark;
      for (uint32_t m = 0; m < l && first; m++) {
        const okv_layer_job_t *o = &rt->jobs[m];
        if (o->stats_pending && o->stats.deferred > 0 && o->step == job->step) first = false;
      }
      js.deferred_steps = first;
    }
    okv_rt_stats_add(out, &js);
  }
}

okv_status_t okv_runtime_stats(const okv_runtime_t *runtime, uint32_t layer, okv_step_stats_t *out_stats) {
  if (runtime == NULL) return OKV_RT_INVALID("okv_runtime_stats: runtime is NULL");
  if (out_stats == NULL) return OKV_RT_INVALID("okv_runtime_stats: out_stats is NULL");
  if (layer != UINT32_MAX && layer >= runtime->cfg.n_layers)
    return OKV_RT_INVALID("okv_runtime_stats: layer = %u must be < n_layers = %u (or UINT32_MAX)", layer,
                          runtime->cfg.n_layers);
  /* Every job issued so far counts: wait for the background thread, then add the jobs that no step has
   * collected yet (they stay pending: the step that collects them adds them to the cumulative stats). */
  okv_rt_jobs_drain((okv_runtime_t *)runtime);
  *out_stats = layer == UINT32_MAX ? runtime->total_cum : runtime->layer_cum[layer];
  add_uncollected(runtime, layer, out_stats);
  return OKV_OK;
}

void okv_runtime_stats_reset(okv_runtime_t *runtime) {
  if (runtime == NULL) return;
  /* Jobs issued before the reset do not count after it: the background thread finishes them (the drain
   * orders its writes before these), and the stats no step has collected yet are dropped. */
  if (has_pipeline(runtime) && runtime->jobs != NULL && !runtime->in_step) {
    okv_rt_jobs_drain(runtime);
    for (uint32_t l = 0; l < runtime->cfg.n_layers; l++) {
      okv_layer_job_t *job = &runtime->jobs[l];
      if (job->stats_pending && job->stats.deferred > 0 && job->step > runtime->deferred_step_mark)
        runtime->deferred_step_mark = job->step; /* its step is not counted again by a later job */
      job->stats_pending = false;
    }
  }
  memset(&runtime->total_cum, 0, sizeof runtime->total_cum);
  memset(runtime->layer_cum, 0, sizeof(okv_step_stats_t) * runtime->cfg.n_layers);
}
