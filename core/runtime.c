/* Runtime creation and destruction: sizing of the HOST tier store, the DEVICE
 * slot pool, summaries and staging buffers, the streams and events, the
 * scratch arrays and the background worker thread.
 *
 * Slot policy (docs/api.md): in the sparse modes every (sequence, layer, KV
 * head) owns K + 1 + C slots, reserved at seq_add. A transfer always lands in a
 * FREE owned slot; the victim it replaces stays mapped (and readable) until
 * the transfer is committed successfully, so attention never reads a slot that
 * is being written and a failed transfer disturbs nothing.
 * Uses only the public HAL (hal.h, kernels.h); never a vendor header. */
#include "runtime_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static okv_status_t alloc_dev(okv_runtime_t *rt, okv_tier_t tier, uint64_t bytes, okv_hal_buffer_t **out,
                              const char *what) {
  if (bytes == 0) bytes = 4;
  okv_status_t st = okv_hal_buffer_alloc(rt->device, tier, bytes, out);
  return st ? okv_status_annotate(st, "runtime: allocating %s (%llu bytes, %s tier)", what, (unsigned long long)bytes,
                                  okv_tier_name(tier))
            : OKV_OK;
}

static okv_status_t predict_ctx_init(okv_runtime_t *rt, okv_predict_ctx_t *c, bool with_select) {
  okv_status_t st = OKV_OK;
  uint64_t n_seg = (uint64_t)rt->cfg.max_seqs * rt->cfg.n_kv_heads;
  /* top-K arrays also hold the first pass's groups_kept units per head (two-level, q8) */
  uint64_t K = rt->cfg.budget_blocks > rt->groups_kept ? rt->cfg.budget_blocks : rt->groups_kept;
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
    ALLOC_ARR(c->rd, rt->cfg.n_kv_heads * K); /* remote reads: one sequence's plan entries at most */
    ALLOC_ARR(c->rd_index, rt->cfg.n_kv_heads * K);
    ALLOC_ARR(c->rd_dst, rt->cfg.n_kv_heads * K);
  }
  return OKV_OK;
fail:
  return st;
}

static void predict_ctx_free(okv_runtime_t *rt, okv_predict_ctx_t *c) {
  okv_hal_buffer_t *bufs[] = {c->q, c->scores, c->topk, c->counts};
  for (size_t i = 0; i < 4; i++)
    if (bufs[i]) OKV_IGNORE_ERROR(okv_hal_buffer_release(bufs[i]));
  void *arrs[] = {c->seg_summary_first, c->seg_score_first, c->seg_n,      c->seg_cursor,  c->topk_n,
                  c->excl_offsets,      c->excl_blocks,     c->host_topk,  c->host_counts, c->seqs,
                  c->sel_scratch,       c->sel_admitted,    c->sel_victims};
  for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) okv_rt_free(&rt->alloc, arrs[i]);
  okv_rt_free(&rt->alloc, c->rd);
  okv_rt_free(&rt->alloc, c->rd_index);
  okv_rt_free(&rt->alloc, c->rd_dst);
  okv_rt_free(&rt->alloc, c->agree_topk);
  okv_rt_free(&rt->alloc, c->agree_counts);
  okv_rt_free(&rt->alloc, c->agree_bits);
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
  /* Destruction returns nothing: a failed wait or release here has no one to report to. */
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
      okv_rt_job_wait_event(rt, l);
      okv_status_free(job->event_status);
      okv_status_free(job->error);
      okv_rt_free(&rt->alloc, job->seq_index);
      okv_rt_free(&rt->alloc, job->seq_id);
      okv_rt_free(&rt->alloc, job->q_host);
      okv_rt_free(&rt->alloc, job->plan);
      okv_rt_free(&rt->alloc, job->pairs);
      okv_rt_free(&rt->alloc, job->seq_moved);
      okv_rt_free(&rt->alloc, job->seq_evicted);
      okv_rt_free(&rt->alloc, job->sig_delta);
    }
  }
  if (rt->compute) OKV_IGNORE_ERROR(okv_hal_stream_synchronize(rt->compute));
  if (rt->copy) OKV_IGNORE_ERROR(okv_hal_stream_synchronize(rt->copy));
  if (rt->predict) OKV_IGNORE_ERROR(okv_hal_stream_synchronize(rt->predict));
  if (rt->seqs) {
    for (uint32_t i = 0; i < rt->cfg.max_seqs; i++)
      if (rt->seqs[i].live) okv_rt_seq_release(rt, &rt->seqs[i]);
  }
  okv_rt_dsel_free(rt);
  if (rt->layer_events) {
    for (uint32_t l = 0; l < rt->cfg.n_layers; l++) {
      if (rt->layer_events[l]) OKV_IGNORE_ERROR(okv_hal_event_release(rt->layer_events[l])); /* cleanup */
      if (rt->copy_start_events && rt->copy_start_events[l])
        OKV_IGNORE_ERROR(okv_hal_event_release(rt->copy_start_events[l])); /* cleanup */
    }
  }
  if (rt->append_event) OKV_IGNORE_ERROR(okv_hal_event_release(rt->append_event));
  okv_hal_stream_t *streams[] = {rt->compute, rt->predict, rt->copy};
  for (int i = 0; i < 3; i++)
    if (streams[i]) OKV_IGNORE_ERROR(okv_hal_stream_release(streams[i]));
  okv_rt_scoring_ctx_free(rt, &rt->fg);
  okv_rt_scoring_ctx_free(rt, &rt->wk);
  predict_ctx_free(rt, &rt->fg);
  predict_ctx_free(rt, &rt->wk);
  okv_rt_free(&rt->alloc, rt->append_gindex);
  okv_rt_free(&rt->alloc, rt->append_gfirst);
  okv_rt_free(&rt->alloc, rt->ones);
  okv_host_store_free(&rt->host, &rt->alloc);
  okv_hal_buffer_t *bufs[] = {rt->summaries, rt->group_summaries, rt->pool, rt->fg_inflight, rt->fg_out, rt->fg_mass};
  for (int i = 0; i < 6; i++)
    if (bufs[i]) OKV_IGNORE_ERROR(okv_hal_buffer_release(bufs[i]));
  okv_rt_free(&rt->alloc, rt->head_hot);
  void *arrs[] = {rt->free_slots,        rt->ws_offsets,   rt->ws_slots,       rt->ws_valid,    rt->append_pairs,
                  rt->append_index,      rt->append_first, rt->append_keys,    rt->append_src,  rt->od_pairs,
                  rt->od_plan,           rt->seqs,         rt->step_seq_index, rt->step_seq_id, rt->layer_step,
                  rt->batch_seqs,        rt->layer_cum,    rt->jobs,           rt->queue,       rt->layer_events,
                  rt->copy_start_events, rt->last_use_s,   rt->wr_map,         rt->wr_block,    rt->wr_tokens,
                  rt->tok_block,         rt->reb_index,    rt->reb_valid,      rt->reb_map,     rt->reb_block,
                  rt->tw_slot,           rt->tw_pos,       rt->tw_keys,        rt->tw_values,   rt->tw_map,
                  rt->tw_block,          rt->mass_host,    rt->mass_seq_pos,   rt->tw_src};
  for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) okv_rt_free(&rt->alloc, arrs[i]);
  pthread_mutex_destroy(&rt->mutex);
  pthread_cond_destroy(&rt->work_cv);
  pthread_cond_destroy(&rt->done_cv);
  if (rt->device) OKV_IGNORE_ERROR(okv_hal_device_release(rt->device));
  okv_allocator_t a = rt->alloc;
  okv_rt_free(&a, rt);
}

okv_status_t okv_runtime_create(okv_hal_device_t *device, const okv_runtime_config_t *config,
                                const okv_allocator_t *allocator, okv_runtime_t **out_runtime) {
  if (out_runtime == NULL) return OKV_RT_INVALID("okv_runtime_create: out_runtime is NULL");
  *out_runtime = NULL;
  if (device == NULL) return OKV_RT_INVALID("okv_runtime_create: device is NULL");
  OKV_RETURN_IF_ERROR(okv_runtime_config_validate(config));
  okv_allocator_t a = allocator ? *allocator : okv_allocator_system();
  okv_runtime_t *rt = okv_calloc(&a, 1, sizeof *rt);
  if (rt == NULL) return OKV_RT_HOST_OOM("the runtime");
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
  if (c->summary_dtype == OKV_SUMMARY_DTYPE_AUTO) c->summary_dtype = c->kv_dtype;
  if (c->mode != OKV_MODE_OASIS && c->mode != OKV_MODE_PROXY) c->device_selection = false; /* ignored there */
  rt->group_size = c->n_q_heads / c->n_kv_heads;
  rt->block_bytes = okv_block_bytes(c->kv_dtype, c->head_dim);
  rt->summary_bytes = okv_summary_bytes_ex(c->summary_dtype, c->head_dim);
  rt->max_blocks = n_blocks_of(c->max_context_tokens);
  rt->extent_blocks = rt->max_blocks < OKV_CORE_EXTENT_BLOCKS ? rt->max_blocks : OKV_CORE_EXTENT_BLOCKS;
  rt->cap_blocks = (uint32_t)ceil(c->fetch_ratio * (double)c->budget_blocks - 1e-9);
  if (rt->cap_blocks < 1) rt->cap_blocks = 1;
  if (rt->cap_blocks > c->budget_blocks) rt->cap_blocks = c->budget_blocks;
  rt->slots_per_head = c->budget_blocks + 1u + rt->cap_blocks;
  rt->slots_min_per_head = c->fetch_ratio_auto ? c->budget_blocks + 2u : rt->slots_per_head;
  okv_cap_ctl_init(&rt->cap_ctl, okv_rt_cap_ceiling(rt, 1)); /* nothing measured: the paper's 0.05 * K */
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
  uint64_t n_host_blocks = n_ext * rt->extent_blocks;
  st = okv_host_store_init(&rt->host, device, &rt->alloc, (uint32_t)n_ext, rt->extent_blocks, c->kv_dtype, c->head_dim);
  if (st) goto fail;
  st = alloc_dev(rt, OKV_TIER_DEVICE, n_host_blocks * rt->summary_bytes, &rt->summaries, "block summaries");
  if (st) goto fail;
  st = okv_rt_scoring_init(rt, n_host_blocks);
  if (st) goto fail;

  /* DEVICE staging. */
  st = alloc_dev(rt, OKV_TIER_DEVICE, c->max_seqs * T4 * 2u * c->n_kv_heads * c->head_dim * 4u, &rt->fg_inflight,
                 "in-flight K/V staging");
  if (st) goto fail;
  st = alloc_dev(rt, OKV_TIER_DEVICE, c->max_seqs * T4 * c->n_q_heads * c->head_dim * 4u, &rt->fg_out,
                 "attention output staging");
  if (st) goto fail;
  if (has_pipeline(rt) && (c->fetch_ratio_auto || c->track_fetch_share)) {
    /* Fetched-share measurement: attention's per-block mass of a layer, for the most working-set blocks a
     * layer can have (before the slot pool, whose default size takes what is left). */
    uint64_t n_mass = n_seg * rt->slots_per_head * T4;
    st = alloc_dev(rt, OKV_TIER_DEVICE, n_mass * sizeof(float), &rt->fg_mass, "attention mass of the working sets");
    if (st) goto fail;
    ALLOC_ARR(rt->mass_host, n_mass);
    ALLOC_ARR(rt->mass_seq_pos, c->max_seqs);
    for (uint32_t i = 0; i < c->max_seqs; i++) rt->mass_seq_pos[i] = UINT32_MAX;
  }
  rt->fg_predict = true; /* the foreground q staging lives in fg.q */
  if (c->track_recall || c->mode == OKV_MODE_ONDEMAND) {
    st = predict_ctx_init(rt, &rt->fg, c->mode == OKV_MODE_ONDEMAND);
    if (st == OKV_OK) st = okv_rt_scoring_ctx_init(rt, &rt->fg);
    if (st == OKV_OK && c->track_recall && rt->groups_kept > 0) { /* recall against flat scoring */
      uint64_t n_seg = (uint64_t)c->max_seqs * c->n_kv_heads;
      rt->fg.agree_topk = okv_malloc(&rt->alloc, n_seg * c->budget_blocks * sizeof(uint32_t));
      rt->fg.agree_counts = okv_malloc(&rt->alloc, n_seg * sizeof(uint32_t));
      rt->fg.agree_bits = okv_calloc(&rt->alloc, rt->max_blocks / 64u + 1u, sizeof(uint64_t));
      if (!rt->fg.agree_topk || !rt->fg.agree_counts || !rt->fg.agree_bits)
        st = OKV_RT_HOST_OOM("recall against flat scoring");
    }
  } else {
    st = alloc_dev(rt, OKV_TIER_DEVICE, c->max_seqs * T4 * c->n_q_heads * c->head_dim * 4u, &rt->fg.q, "query staging");
  }
  if (st) goto fail;
  if (has_pipeline(rt)) {
    st = predict_ctx_init(rt, &rt->wk, true);
    if (st == OKV_OK) st = okv_rt_scoring_ctx_init(rt, &rt->wk);
    if (st) goto fail;
  }

  /* DEVICE slot pool. */
  uint64_t per_seq_slots = is_sparse_mode(rt) ? LH * rt->slots_per_head : LH * rt->max_blocks;
  uint64_t pool_bytes = c->device_pool_bytes; /* by default: every sequence with all its spares */
  if (pool_bytes == 0) {
    pool_bytes = (uint64_t)c->max_seqs * per_seq_slots * rt->block_bytes;
    uint64_t avail = tier_free(device, OKV_TIER_DEVICE);
    avail = avail / 16u * 15u; /* leave a margin */
    if (avail && pool_bytes > avail) pool_bytes = avail;
  }
  rt->n_slots = pool_bytes / rt->block_bytes;
  if (rt->n_slots > UINT32_MAX - 1u) rt->n_slots = UINT32_MAX - 1u;
  if (is_sparse_mode(rt)) per_seq_slots = LH * rt->slots_min_per_head; /* what one sequence needs */
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
  ALLOC_ARR(rt->free_slots, rt->n_slots);
  for (uint64_t i = 0; i < rt->n_slots; i++) rt->free_slots[i] = (uint32_t)(rt->n_slots - 1u - i);
  rt->n_free_slots = rt->n_slots;
  rt->ws_capacity = n_seg * (is_sparse_mode(rt) ? (uint64_t)rt->slots_per_head : (uint64_t)rt->max_blocks);
  if (rt->ws_capacity > rt->n_slots) rt->ws_capacity = rt->n_slots;
  ALLOC_ARR(rt->head_hot, n_seg * c->n_layers);
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
  ALLOC_ARR(rt->tw_slot, n_seg);
  ALLOC_ARR(rt->tw_pos, n_seg);
  ALLOC_ARR(rt->tw_keys, n_seg * c->head_dim);
  ALLOC_ARR(rt->tw_values, n_seg * c->head_dim);
  ALLOC_ARR(rt->tw_map, n_seg);
  ALLOC_ARR(rt->tw_block, n_seg);
  ALLOC_ARR(rt->tw_src, n_seg);
  ALLOC_ARR(rt->reb_index, rt->reb_capacity);
  ALLOC_ARR(rt->reb_valid, rt->reb_capacity);
  ALLOC_ARR(rt->reb_map, rt->reb_capacity);
  ALLOC_ARR(rt->reb_block, rt->reb_capacity);
  ALLOC_ARR(rt->append_index, n_seg);
  ALLOC_ARR(rt->append_first, n_seg);
  ALLOC_ARR(rt->append_keys, n_seg * c->head_dim);
  ALLOC_ARR(rt->append_src, n_seg);
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
  ALLOC_ARR(rt->copy_start_events, c->n_layers);
  ALLOC_ARR(rt->last_use_s, c->n_layers);

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
      if (c->fetch_ratio_auto) {
        st = okv_hal_event_create(device, &rt->copy_start_events[l]);
        if (st) goto fail;
      }
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
      ALLOC_ARR(job->seq_moved, c->max_seqs);
      ALLOC_ARR(job->seq_evicted, c->max_seqs);
      ALLOC_ARR(job->sig_delta, n_seg);
    }
    if (c->device_selection) {
      st = okv_rt_dsel_init(rt);
      if (st) goto fail;
      rt->wk.topk_on_device = true;
    }
    if (pthread_create(&rt->worker, NULL, okv_rt_worker_main, rt) != 0) {
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
