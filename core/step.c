/* The decode step as the engine drives it: step_begin, step_layer (commit the
 * layer's transfer, append, on-demand fetch / recall, attention over the
 * readable working set, hand-off to the pipeline), step_end and peek_layer.
 * Owns the step state and the attention working-set CSR. */
#include "runtime_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- decode step ---- */

okv_status_t okv_runtime_step_begin(okv_runtime_t *rt, uint32_t n_seqs, const uint32_t *seq_ids,
                                    uint32_t n_query_tokens) {
  if (rt == NULL) return OKV_RT_INVALID("okv_runtime_step_begin: runtime is NULL");
  if (rt->in_step) return OKV_RT_INVALID("okv_runtime_step_begin: a step is in progress (call okv_runtime_step_end)");
  if (n_seqs == 0 || n_seqs > rt->cfg.max_seqs)
    return OKV_RT_INVALID("okv_runtime_step_begin: n_seqs = %u must be in 1..max_seqs = %u", n_seqs, rt->cfg.max_seqs);
  if (seq_ids == NULL) return OKV_RT_INVALID("okv_runtime_step_begin: seq_ids is NULL");
  uint32_t t_min = rt->cfg.mode == OKV_MODE_OASIS ? 2u : 1u;
  if (n_query_tokens < t_min || n_query_tokens > 4)
    return OKV_RT_INVALID("okv_runtime_step_begin: n_query_tokens = %u must be in %u..4 in mode %s", n_query_tokens,
                          t_min, okv_mode_name(rt->cfg.mode));
  for (uint32_t i = 0; i < n_seqs; i++) {
    okv_seq_t *s = okv_rt_seq_find(rt, seq_ids[i]);
    if (s == NULL)
      return okv_status_make(OKV_STATUS_NOT_FOUND, "okv_runtime_step_begin: seq_ids[%u] = %u does not exist", i,
                             seq_ids[i]);
    /* A remote sequence's `lost` is written by the background thread's reads: let the previous step's jobs
     * finish (step_end no longer waits for them), so that a failed read is refused here, at the next step. */
    if (s->remote && has_pipeline(rt)) okv_rt_jobs_drain(rt);
    for (uint32_t j = 0; j < i; j++)
      if (seq_ids[j] == seq_ids[i])
        return OKV_RT_INVALID("okv_runtime_step_begin: seq_ids[%u] = %u is listed twice", i, seq_ids[i]);
    if (s->lost != OKV_OK) /* a read through its KV source failed (docs/api.md "Remote sequences") */
      return okv_status_make(OKV_STATUS_UNAVAILABLE,
                             "okv_runtime_step_begin: seq_ids[%u] = %u lost its KV source '%s' (%s); remove it", i,
                             seq_ids[i], s->source_name, okv_status_message(s->lost));
    if (s->n_tokens[0] >= rt->cfg.max_context_tokens)
      return okv_status_make(OKV_STATUS_OUT_OF_MEMORY,
                             "okv_runtime_step_begin: sequence %u is at max_context_tokens = %u", seq_ids[i],
                             rt->cfg.max_context_tokens);
    rt->step_seq_index[i] = (uint32_t)(s - rt->seqs);
    rt->step_seq_id[i] = seq_ids[i];
  }
  rt->in_step = true;
  rt->step_begin_s = rt->cfg.fetch_ratio_auto ? okv_rt_wall_s() : 0.0;
  rt->step_n_seqs = n_seqs;
  rt->step_T = n_query_tokens;
  rt->next_layer = 0;
  rt->share_layer = okv_rt_share_layer(rt);
  rt->share_measured = false;
  return OKV_OK;
}

/* Builds the attention working sets (CSR over (seq, KV head)) of layer `layer`. */
/* Returns the first sequence (index) whose active block is not fully readable
 * (its last write failed and no append repaired it yet), or UINT32_MAX. */
static uint32_t build_ws(okv_runtime_t *rt, uint32_t n_seqs, okv_seq_t *const *seqs, uint32_t layer) {
  uint32_t H = rt->cfg.n_kv_heads, k = 0, stale = UINT32_MAX;
  for (uint32_t s = 0; s < n_seqs; s++) {
    const okv_seq_t *seq = seqs[s];
    uint32_t n_tok = seq ? seq->n_tokens[layer] : 0;
    uint32_t nb = n_blocks_of(n_tok);
    for (uint32_t h = 0; h < H; h++) {
      rt->ws_offsets[s * H + h] = k;
      if (seq == NULL) continue;
      const okv_block_map_t *m = &seq_head(rt, seq, layer, h)->map;
      for (uint32_t i = 0; i < m->n_resident; i++) { /* resident[], res_tok[], res_slot[]: read in order */
        uint32_t b = m->resident[i];
        uint32_t valid = b + 1u < nb ? OKV_BLOCK_TOKENS : n_tok - b * OKV_BLOCK_TOKENS;
        if (okv_block_map_res_tok(m, i) < valid) { /* only what a completed write put there */
          if (b + 1u == nb && stale == UINT32_MAX) stale = s;
          valid = okv_block_map_res_tok(m, i);
        }
        if (valid == 0) continue;
        rt->ws_slots[k] = m->res_slot[i];
        rt->ws_valid[k] = (uint8_t)valid;
        k++;
      }
    }
  }
  rt->ws_offsets[n_seqs * H] = k;
  return stale;
}

/* The first sequence (index) whose active block is not fully readable, or UINT32_MAX, from the active block's
 * map entry alone: with device selection the maps lag the tables (their other entries may name blocks the
 * tables evicted since, any number of them), but each head's active block entry is the host's own. */
static uint32_t active_stale(okv_runtime_t *rt, uint32_t n_seqs, okv_seq_t *const *seqs, uint32_t layer) {
  const uint32_t H = rt->cfg.n_kv_heads;
  for (uint32_t s = 0; s < n_seqs; s++) {
    const okv_seq_t *seq = seqs[s];
    uint32_t n_tok = seq ? seq->n_tokens[layer] : 0;
    if (n_tok == 0) continue;
    uint32_t b = n_blocks_of(n_tok) - 1u, valid = n_tok - b * OKV_BLOCK_TOKENS;
    for (uint32_t h = 0; h < H; h++) {
      const okv_block_map_t *m = &seq_head(rt, seq, layer, h)->map;
      if (!okv_block_map_is_resident(m, b) || okv_block_map_tokens(m, b) < valid) return s;
    }
  }
  return UINT32_MAX;
}

/* Attention over the working sets of layer `layer`; with `mass`, also each working-set block's attention
 * probability (rt->fg_mass, read back into rt->mass_host; a failed read leaves mass_ok false). */
/* With device selection and no mass, attention reads the working sets from the slot tables on the device
 * (okv_attention_desc_t.tables) once they are current (okv_rt_dsel_ws_ready), and the host builds no list;
 * a step_layer's append has just made every active block current, so only a peek (`peek`) still checks the
 * maps for an unreadable active block. Otherwise the host builds the CSR from the maps. */
static okv_status_t run_attention(okv_runtime_t *rt, uint32_t n_seqs, okv_seq_t *const *seqs, uint32_t layer,
                                  uint32_t T, const float *q, uint32_t n_inflight, const float *inflight, float *out,
                                  bool mass, bool *mass_ok, bool peek, double *bk_s, double *att_s) {
  const okv_runtime_config_t *c = &rt->cfg;
  double t0 = okv_rt_bk_s();
  bool tables = rt->dev_sel && !mass && okv_rt_dsel_ws_ready(rt, layer);
  for (uint32_t s = 0; rt->dev_sel && !tables && s < n_seqs; s++) /* the list below reads the maps */
    if (seqs[s] != NULL) okv_rt_dsel_sync(rt, seqs[s], layer);
  uint32_t stale =
      tables ? (peek ? active_stale(rt, n_seqs, seqs, layer) : UINT32_MAX) : build_ws(rt, n_seqs, seqs, layer);
  for (uint32_t s = 0; tables && s < n_seqs; s++) {
    rt->ws_table_index[s] = seqs[s] ? (uint32_t)(seqs[s] - rt->seqs) : 0u;
    rt->ws_seq_tokens[s] = seqs[s] ? seqs[s]->n_tokens[layer] : 0u; /* 0: an empty working set */
  }
  double dt = okv_rt_bk_s() - t0;
  rt->layer_step[layer].working_set_seconds += dt; /* in the layer's bookkeeping_seconds through *bk_s */
  *bk_s += dt;
  if (stale != UINT32_MAX) /* peek after a failed refresh: the committed tokens of the active block are not readable */
    return okv_status_make(OKV_STATUS_COPY_FAILED,
                           "runtime: layer %u: the active block of sequence %u is not readable after a failed write "
                           "(the next okv_runtime_step_layer repairs it); attention did not run, out is not valid",
                           layer, seqs[stale]->id);
  uint64_t q_bytes = (uint64_t)n_seqs * T * c->n_q_heads * c->head_dim * sizeof(float);
  OKV_RETURN_IF_ERROR(okv_hal_buffer_write(rt->fg.q, 0, q, q_bytes));
  if (n_inflight > 0)
    OKV_RETURN_IF_ERROR(okv_hal_buffer_write(rt->fg_inflight, 0, inflight,
                                             (uint64_t)n_seqs * n_inflight * 2u * c->n_kv_heads * c->head_dim * 4u));
  okv_attention_desc_t d = {.n_seqs = n_seqs,
                            .n_kv_heads = c->n_kv_heads,
                            .group_size = rt->group_size,
                            .head_dim = c->head_dim,
                            .n_query_tokens = T,
                            .kv_dtype = c->kv_dtype,
                            .kv_pool = rt->pool,
                            .n_slots = rt->n_slots,
                            .ws_offsets = rt->ws_offsets,
                            .ws_slots = rt->ws_slots,
                            .ws_valid = rt->ws_valid,
                            .q = rt->fg.q,
                            .q_offset = 0,
                            .n_inflight = n_inflight,
                            .inflight_kv = n_inflight ? rt->fg_inflight : NULL,
                            .inflight_offset = 0,
                            .out = rt->fg_out,
                            .out_offset = 0,
                            .block_mass = mass ? rt->fg_mass : NULL,
                            .mass_offset = 0};
  if (tables) {
    d.ws_offsets = NULL;
    d.ws_slots = NULL;
    d.ws_valid = NULL;
    d.tables = rt->sel_tables;
    d.tables_offset = okv_rt_dsel_tables_offset(rt, layer);
    d.table_slots = rt->sel_R;
    d.table_words = rt->sel_W;
    d.slot_map = rt->sel_slot_map;
    d.slot_map_offset = okv_rt_dsel_slot_map_offset(rt, layer);
    d.table_index = rt->ws_table_index;
    d.seq_tokens = rt->ws_seq_tokens;
  }
  t0 = okv_rt_wall_s();
  okv_status_t st = okv_hal_attention_async(rt->compute, &d);
  if (st == OKV_OK) st = okv_hal_stream_synchronize(rt->compute);
  *att_s += okv_rt_wall_s() - t0;
  if (st != OKV_OK) return okv_status_annotate(st, "runtime: attention of layer %u", layer);
  OKV_RETURN_IF_ERROR(okv_hal_buffer_read(rt->fg_out, 0, out, q_bytes));
  if (mass && mass_ok != NULL) { /* a measurement: a failed read only loses it */
    okv_status_t ms = okv_hal_buffer_read(rt->fg_mass, 0, rt->mass_host,
                                          (uint64_t)rt->ws_offsets[n_seqs * c->n_kv_heads] * T * sizeof(float));
    *mass_ok = ms == OKV_OK;
    okv_status_free(ms);
  }
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
    if (seq && (!seq_layer_sparse(rt, seq, layer) || okv_seq_is_lost(seq))) seq = NULL;
    ctx->seqs[s] = seq;
    any |= seq != NULL;
  }
  if (!any) return;
  okv_status_t st = okv_hal_buffer_write(ctx->q, 0, q, (uint64_t)n_seqs * T * c->n_q_heads * c->head_dim * 4u);
  if (st == OKV_OK) st = okv_rt_predict_topk(rt, ctx, rt->compute, n_seqs, layer, T, 0, 1, bk_s);
  if (st != OKV_OK) {
    OKV_IGNORE_ERROR(okv_hal_stream_synchronize(rt->compute)); /* no pending error left for attention */
    okv_status_free(st);
    ls->pipeline_errors++;
    return;
  }
  /* With two-level scoring, recall counts the exact (flat-scored) top-K of the real query, and the agreement
   * counts how much of it the two-level top-K finds; an on-demand fetch still uses the two-level top-K. */
  const uint32_t *sel_topk = ctx->host_topk, *sel_counts = ctx->host_counts;
  bool agree = c->track_recall && ctx->agree_topk != NULL;
  if (agree) {
    size_t n_seg = (size_t)n_seqs * H;
    memcpy(ctx->agree_topk, ctx->host_topk, n_seg * K * sizeof(uint32_t));
    memcpy(ctx->agree_counts, ctx->host_counts, n_seg * sizeof(uint32_t));
    sel_topk = ctx->agree_topk;
    sel_counts = ctx->agree_counts;
    st = okv_rt_predict_topk_flat(rt, ctx, rt->compute, n_seqs, layer, T, 0, 1, bk_s);
    if (st != OKV_OK) {
      OKV_IGNORE_ERROR(okv_hal_stream_synchronize(rt->compute)); /* no pending error left for attention */
      okv_status_free(st);
      ls->pipeline_errors++;
      return;
    }
  }
  double t0 = okv_rt_bk_s();
  for (uint32_t s = 0; rt->dev_sel && s < n_seqs; s++) /* recall reads the maps */
    if (ctx->seqs[s] != NULL) okv_rt_dsel_sync(rt, ctx->seqs[s], layer);
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
        for (uint32_t i = 0; i < ctx->host_counts[u]; i++)
          ls->recall_hits += okv_block_map_is_resident(&hd->map, pred[i]);
        ls->recall_total += ctx->host_counts[u];
      }
      if (agree) {
        uint64_t *bits = ctx->agree_bits;
        for (uint32_t i = 0; i < ctx->host_counts[u]; i++) bits[pred[i] >> 6] |= 1ull << (pred[i] & 63u);
        const uint32_t *two = &sel_topk[(size_t)u * K];
        for (uint32_t i = 0; i < sel_counts[u]; i++) ls->topk_agreement_hits += okv_block_map_bit(bits, two[i]);
        ls->topk_agreement_total += ctx->host_counts[u];
        for (uint32_t i = 0; i < ctx->host_counts[u]; i++) bits[pred[i] >> 6] = 0;
        pred = two; /* the on-demand fetch below uses the two-level top-K */
      }
      if (!ondemand) continue;
      okv_select_params_t p = {.budget_blocks = K,
                               .cap_blocks = UINT32_MAX,
                               .step = rt->step,
                               .active_block = n_blocks_of(seq->n_tokens[layer]) - 1u};
      okv_select_result_t r;
      st =
          okv_select_head(&hd->map, &p, pred, sel_counts[u], ctx->sel_scratch, ctx->sel_admitted, ctx->sel_victims, &r);
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
  *bk_s += okv_rt_bk_s() - t0;
  /* Remote sequences: read missing HOST blocks through their source first; the foreground waits for it all. */
  double r0 = ls->remote_seconds, rt0 = 0, rt1 = 0;
  n_plan = okv_rt_remote_fill(rt, layer, ctx, rt->od_plan, rt->od_pairs, n_plan, ls, &rt0, &rt1);
  ls->remote_stall_seconds += ls->remote_seconds - r0;
  if (n_plan == 0) return;
  t0 = okv_rt_wall_s();
  st = okv_hal_copy_blocks_async(rt->compute, rt->host.kv, rt->pool, rt->block_bytes, n_plan, rt->od_pairs);
  okv_status_t st2 = okv_hal_stream_synchronize(rt->compute);
  if (st == OKV_OK)
    st = st2;
  else
    okv_status_free(st2);
  if (st != OKV_OK) OKV_IGNORE_ERROR(okv_hal_stream_synchronize(rt->compute)); /* drained, no pending error */
  ls->stall_seconds += okv_rt_wall_s() - t0;
  double t1 = okv_rt_bk_s();
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
  *bk_s += okv_rt_bk_s() - t1;
}

/* The fetched-share measurement (okv_step_stats_t.fetched_share): for each block the layer's commit just
 * mapped, its working-set entry (found by slot within its head's range of the CSR) and the real token's
 * attention probability of it (mass row t = 0), times the head's working-set blocks. */
static void fetched_share(okv_runtime_t *rt, uint32_t layer, okv_step_stats_t *ls, double *bk_s) {
  double t0 = okv_rt_bk_s();
  const okv_layer_job_t *job = &rt->jobs[layer];
  uint32_t H = rt->cfg.n_kv_heads, T = rt->step_T;
  for (uint32_t s = 0; s < rt->step_n_seqs; s++) rt->mass_seq_pos[rt->step_seq_index[s]] = s;
  double share = 0;
  uint64_t n = 0;
  for (uint32_t i = 0; i < job->n_fresh; i++) {
    const okv_plan_entry_t *e = &job->plan[i];
    const okv_seq_t *seq = &rt->seqs[e->seq_index];
    uint32_t s = rt->mass_seq_pos[e->seq_index];
    if (s == UINT32_MAX || !seq->live || seq->id != e->seq_id) continue; /* not in this batch, or removed */
    uint32_t u = s * H + e->kv_head, k0 = rt->ws_offsets[u], k1 = rt->ws_offsets[u + 1];
    for (uint32_t k = k1; k-- > k0;) /* mapped last: near the end of the head's range */
      if (rt->ws_slots[k] == e->slot) {
        share += (double)rt->mass_host[(size_t)k * T] * (double)(k1 - k0);
        n++;
        break;
      }
  }
  for (uint32_t s = 0; s < rt->step_n_seqs; s++) rt->mass_seq_pos[rt->step_seq_index[s]] = UINT32_MAX;
  ls->fetched_share += share;
  ls->fetched_share_blocks += n;
  *bk_s += okv_rt_bk_s() - t0;
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
  if (rt == NULL) return OKV_RT_INVALID("okv_runtime_step_layer: runtime is NULL");
  if (!rt->in_step) return OKV_RT_INVALID("okv_runtime_step_layer: no step in progress (call okv_runtime_step_begin)");
  okv_status_t st = OKV_OK;
  if (layer != rt->next_layer)
    st = OKV_RT_INVALID("okv_runtime_step_layer: layer = %u, expected layer %u (layers run in order)", layer,
                        rt->next_layer);
  else if (k_new == NULL || v_new == NULL)
    st = OKV_RT_INVALID("okv_runtime_step_layer: k_new or v_new is NULL");
  else if (q == NULL)
    st = OKV_RT_INVALID("okv_runtime_step_layer: q is NULL");
  else if (out == NULL)
    st = OKV_RT_INVALID("okv_runtime_step_layer: out is NULL");
  else if (rt->step_T > 1 && draft_kv == NULL)
    st = OKV_RT_INVALID("okv_runtime_step_layer: draft_kv is NULL with n_query_tokens = %u", rt->step_T);
  if (st != OKV_OK) {
    fill_invalid(rt, rt->step_n_seqs, rt->step_T, out);
    return st;
  }
  double bk = 0, att = 0;
  okv_step_stats_t *ls = &rt->layer_step[layer];
  okv_rt_note_layer_use(rt, layer);
  /* The commit, the append's batch and attention start the compute stream once (docs/api.md "Batched
   * submission"); every wait on the stream in between starts it anyway. */
  bool batch = okv_status_consume(okv_hal_stream_batch_begin(rt->compute)) == OKV_STATUS_OK;
  /* 1. Layer-local sync and commit of the previous step's transfer (before the
   * append so that the new active block finds >= C free slots). Failures are absorbed. */
  const double t_commit = okv_rt_layer_commit(rt, layer, &bk);
  /* 2. Append (commit) the real token. OUT_OF_MEMORY / INVALID_ARGUMENT: nothing committed. */
  bool committed = false;
  /* The append batch and attention share the compute stream, so the wait for the batch can follow attention
   * (one synchronisation per layer instead of two) unless a foreground pass runs in between. */
  bool defer = !rt->cfg.track_recall && rt->cfg.mode != OKV_MODE_ONDEMAND;
  const double bk_before_append = bk;
  okv_status_t append_st = okv_rt_layer_append(rt, layer, k_new, v_new, defer, t_commit, &bk, &committed);
  ls->append_bookkeeping_seconds += bk - bk_before_append;
  if (!committed) {
    if (batch) OKV_IGNORE_ERROR(okv_hal_stream_batch_end(rt->compute));
    if (rt->dev_sel) (void)okv_rt_dsel_commit_finish(rt);
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
    bool mass = layer == rt->share_layer && rt->jobs[layer].n_fresh > 0, mass_ok = false;
    st = run_attention(rt, rt->step_n_seqs, seqs, layer, rt->step_T, q, rt->step_T - 1u, draft_kv, out, mass, &mass_ok,
                       false, &bk, &att);
    bool redo = false;
    const double bk_before_finish = bk;
    okv_status_t fin = okv_rt_layer_append_finish(rt, layer, &bk, &redo);
    ls->append_bookkeeping_seconds += bk - bk_before_finish;
    /* A commit that failed is repaired now, after attention read the tables: read again. */
    if (rt->dev_sel && okv_rt_dsel_commit_finish(rt)) redo = true;
    if (fin != OKV_OK) { /* the batch failed twice: attention's output is not valid */
      okv_status_free(st);
      st = OKV_OK;
      append_st = fin;
      mass_ok = false;
    } else if (redo) { /* retried after attention read the slots: read them again */
      okv_status_free(st);
      st = run_attention(rt, rt->step_n_seqs, seqs, layer, rt->step_T, q, rt->step_T - 1u, draft_kv, out, mass,
                         &mass_ok, false, &bk, &att);
    }
    ls->attention_seconds += att;
    if (st == OKV_OK && layer == rt->share_layer) {
      if (mass_ok) {
        fetched_share(rt, layer, ls, &bk);
        rt->share_measured = true;
      } else if (mass) {
        ls->pipeline_errors++; /* the mass read-back failed: absorbed, no measurement this step */
      } else {
        rt->share_measured = rt->jobs[layer].fresh_ok; /* a clean commit that fetched nothing */
      }
    }
  }
  if (batch) OKV_IGNORE_ERROR(okv_hal_stream_batch_end(rt->compute));
  /* 5. Hand the layer to the background pipeline (the token is committed either way). */
  if (has_pipeline(rt)) {
    okv_rt_job_stage_queries(rt, layer, q); /* a transfer (device-side on a GPU), not bookkeeping */
    double t0 = okv_rt_bk_s();
    if (rt->dev_sel) (void)okv_rt_dsel_commit_finish(rt); /* checked above unless the append failed */
    okv_rt_job_submit(rt, layer);
    const double dt = okv_rt_bk_s() - t0;
    ls->handoff_seconds += dt;
    bk += dt;
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
  if (rt == NULL) return OKV_RT_INVALID("okv_runtime_step_end: runtime is NULL");
  if (!rt->in_step) return OKV_RT_INVALID("okv_runtime_step_end: no step in progress");
  okv_status_t st = OKV_OK;
  if (rt->next_layer != rt->cfg.n_layers)
    st = OKV_RT_INVALID("okv_runtime_step_end: only %u of %u layers ran this step", rt->next_layer, rt->cfg.n_layers);
  okv_step_stats_t step;
  memset(&step, 0, sizeof step);
  /* No wait for the background thread: a job's selection stats land in the step that collects them
   * (docs/api.md "Stats"), here if it is done, else at its layer's next commit. */
  if (has_pipeline(rt)) okv_rt_jobs_collect_done(rt);
  bool pipeline = has_pipeline(rt);
  for (uint32_t l = 0; l < rt->cfg.n_layers; l++) {
    okv_step_stats_t *ls = &rt->layer_step[l];
    ls->steps = 1;
    if (!pipeline) ls->deferred_steps = ls->deferred > 0; /* else: the collected jobs that deferred */
    okv_rt_stats_add(&step, ls);
    okv_rt_stats_add(&rt->layer_cum[l], ls);
    memset(ls, 0, sizeof *ls);
  }
  step.steps = 1;
  step.deferred_steps = pipeline ? rt->step_deferred_steps : step.deferred > 0;
  rt->step_deferred_steps = 0;
  okv_rt_stats_add(&rt->total_cum, &step);
  if (out_stats) *out_stats = step;
  if (st == OKV_OK && has_pipeline(rt)) okv_rt_cap_step_end(rt, &step);
  rt->in_step = false;
  rt->step++;
  return st;
}

okv_status_t okv_runtime_peek_layer(okv_runtime_t *rt, uint32_t n_seqs, const uint32_t *seq_ids, uint32_t layer,
                                    uint32_t n_query_tokens, const float *q, const float *inflight_kv, float *out) {
  if (rt == NULL) return OKV_RT_INVALID("okv_runtime_peek_layer: runtime is NULL");
  if (n_seqs == 0 || n_seqs > rt->cfg.max_seqs)
    return OKV_RT_INVALID("okv_runtime_peek_layer: n_seqs = %u must be in 1..max_seqs = %u", n_seqs, rt->cfg.max_seqs);
  if (seq_ids == NULL || q == NULL || out == NULL || inflight_kv == NULL)
    return OKV_RT_INVALID("okv_runtime_peek_layer: seq_ids, q, inflight_kv and out must not be NULL");
  if (layer >= rt->cfg.n_layers)
    return OKV_RT_INVALID("okv_runtime_peek_layer: layer = %u must be < n_layers = %u", layer, rt->cfg.n_layers);
  if (n_query_tokens < 1 || n_query_tokens > 4)
    return OKV_RT_INVALID("okv_runtime_peek_layer: n_query_tokens = %u must be in 1..4", n_query_tokens);
  okv_seq_t **seqs = rt->batch_seqs;
  okv_status_t st = OKV_OK;
  for (uint32_t i = 0; i < n_seqs && st == OKV_OK; i++) {
    seqs[i] = okv_rt_seq_find(rt, seq_ids[i]);
    if (seqs[i] == NULL)
      st = okv_status_make(OKV_STATUS_NOT_FOUND, "okv_runtime_peek_layer: seq_ids[%u] = %u does not exist", i,
                           seq_ids[i]);
  }
  double bk = 0, att = 0;
  /* Do not read a slot that a pending transfer writes: commit it first (failures absorbed). */
  if (st == OKV_OK) okv_rt_layer_commit(rt, layer, &bk);
  if (st == OKV_OK)
    st = run_attention(rt, n_seqs, seqs, layer, n_query_tokens, q, n_query_tokens, inflight_kv, out, false, NULL, true,
                       &bk, &att);
  if (rt->dev_sel && okv_rt_dsel_commit_finish(rt) && st == OKV_OK) /* repaired after attention read: again */
    st = run_attention(rt, n_seqs, seqs, layer, n_query_tokens, q, n_query_tokens, inflight_kv, out, false, NULL, true,
                       &bk, &att);
  rt->layer_step[layer].bookkeeping_seconds += bk;
  if (st != OKV_OK) fill_invalid(rt, n_seqs, n_query_tokens, out);
  return st;
}
