/* The append of a decode step: the real token's K/V into the HOST tier
 * (authoritative), its block summary, and the write of the token into the
 * active block's DEVICE slot, with the write-currency bookkeeping (res_tok,
 * stale summaries, repairs) that keeps attention from reading a slot whose last
 * write failed (docs/api.md "Faults"). */
#include "runtime_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Appends the real token of every sequence of the step to layer `layer`:
 * HOST block (authoritative, written first), summary, and the active block's
 * slot: when the slot is current for the block's earlier tokens (res_tok ==
 * the token's position), only the new token is written into it, by a kernel on
 * the compute stream (okv_hal_kv_write_tokens_async: no HOST->DEVICE block copy,
 * so it never queues behind the pipeline's fetches on the link); otherwise (after
 * a failed write) the whole block is copied from the HOST tier. Checks capacity
 * first so that an OUT_OF_MEMORY leaves the layer unchanged.
 * Write currency (docs/api.md "Faults"): a slot becomes readable for a token
 * only when the batch that wrote it completed; a failed batch (after one retry)
 * leaves every slot it covered unreadable and every summary it covered marked
 * stale, and returns the error (the token stays committed in the HOST tier).
 * Heads with such leftovers are repaired by their next append: the active
 * block is copied whole, stale slots of other resident blocks are copied again
 * and stale summaries rebuilt from the HOST tier.
 * With `defer` (no foreground pass between the append and attention), a batch
 * enqueued without error is not waited for here: its slots are marked current
 * and okv_rt_layer_append_finish, after attention, checks it (a failure is then
 * retried there, and attention run again, or unmarked). */
/* Enqueues the batch the entries in rt describe (app_* counts; append_*, reb_*, tw_* and append_pairs) on
 * the compute stream: summary updates and rebuilds, group summaries, token writes, whole-block copies; then
 * records append_event. Counts its bytes in append_bytes. Returns the first enqueue error. */
static okv_status_t append_enqueue(okv_runtime_t *rt, uint32_t layer) {
  const okv_runtime_config_t *c = &rt->cfg;
  uint32_t hd = c->head_dim, n_tw = rt->app_n_tw, n_cp = rt->app_n_cp, n_reb = rt->app_n_reb;
  okv_summary_append_desc_t ad = {.summaries = rt->summaries,
                                  .head_dim = hd,
                                  .kv_dtype = c->kv_dtype,
                                  .n = rt->app_n_app,
                                  .summary_index = rt->append_index,
                                  .keys = rt->app_keys,
                                  .first = rt->append_first,
                                  .summary_dtype = c->summary_dtype};
  okv_status_t st = okv_hal_summary_append_ex_async(rt->compute, &ad);
  if (st == OKV_OK && n_reb > 0) {
    okv_summary_desc_t sd = {.head_dim = hd,
                             .kv_dtype = c->kv_dtype,
                             .kv = rt->host.kv,
                             .summaries = rt->summaries,
                             .n_blocks = n_reb,
                             .block_index = rt->reb_index,
                             .valid = rt->reb_valid,
                             .summary_index = rt->reb_index,
                             .summary_dtype = c->summary_dtype};
    st = okv_hal_summarize_blocks_async(rt->compute, &sd);
  }
  if (st == OKV_OK && rt->groups_kept > 0 && okv_rt_blockwise_units(rt)) {
    /* q8 / c4 summaries: re-encode every appended block from its updated summary, then the rebuilt ones */
    okv_summary_reduce_desc_t rd = {.head_dim = hd,
                                    .src = rt->summaries,
                                    .src_dtype = c->summary_dtype,
                                    .dst = rt->group_summaries,
                                    .dst_dtype = rt->unit_dtype,
                                    .n = rt->app_n_app,
                                    .src_first = rt->append_index,
                                    .src_n = rt->ones,
                                    .dst_index = rt->append_index};
    if (rd.n > 0) st = okv_hal_summary_reduce_async(rt->compute, &rd);
    if (st == OKV_OK) st = okv_rt_groups_rebuild(rt, rt->compute, n_reb, rt->reb_map, rt->reb_block);
  } else if (st == OKV_OK && rt->groups_kept > 0) { /* group summaries: appended keys, then groups of rebuilt blocks */
    ad.summaries = rt->group_summaries;
    ad.summary_index = rt->append_gindex;
    ad.first = rt->append_gfirst;
    st = okv_hal_summary_append_ex_async(rt->compute, &ad);
    if (st == OKV_OK) st = okv_rt_groups_rebuild(rt, rt->compute, n_reb, rt->reb_map, rt->reb_block);
  }
  if (st == OKV_OK && n_tw > 0) {
    okv_kv_write_desc_t wd = {.kv = rt->pool,
                              .head_dim = hd,
                              .kv_dtype = c->kv_dtype,
                              .n = n_tw,
                              .slot_index = rt->tw_slot,
                              .pos = rt->tw_pos,
                              .keys = rt->app_tw_keys,
                              .values = rt->app_tw_values};
    st = okv_hal_kv_write_tokens_async(rt->compute, &wd);
  }
  if (st == OKV_OK && n_cp > 0)
    st = okv_hal_copy_blocks_async(rt->compute, rt->host.kv, rt->pool, rt->block_bytes, n_cp, rt->append_pairs);
  if (st == OKV_OK) st = okv_hal_event_record(rt->append_event, rt->compute);
  /* A token write moves one token's K and V (on a GPU: uploaded with the kernel's arguments). */
  rt->layer_step[layer].append_bytes +=
      (uint64_t)n_cp * rt->block_bytes + (uint64_t)n_tw * 2u * hd * okv_dtype_size(c->kv_dtype);
  return st;
}

/* Slot currency after the batch: ok marks every written slot current for its tokens and every rebuilt
 * summary fresh; otherwise every slot the batch covered is unreadable and every summary it covered stale,
 * both repaired by the head's next append (docs/api.md "Faults"). */
static void append_mark(okv_runtime_t *rt, uint32_t layer, bool ok) {
  uint32_t n_tw = rt->app_n_tw, n_cp = rt->app_n_cp, n_reb = rt->app_n_reb;
  /* Device selection: the tables carry every block's token count but the active one's (attention takes
   * that from the sequence's length); a failure or a repair copy changes others'. */
  if (rt->dev_sel && (!ok || n_cp > 0)) rt->sel_tok_stale[layer] = 1;
  if (ok) {
    for (uint32_t k = 0; k < n_tw; k++) okv_block_map_set_current(rt->tw_map[k], rt->tw_block[k], rt->tw_pos[k] + 1u);
    for (uint32_t k = 0; k < n_cp; k++) okv_block_map_set_current(rt->wr_map[k], rt->wr_block[k], rt->wr_tokens[k]);
    for (uint32_t k = 0; k < n_reb; k++) rt->reb_map[k]->summary_stale[rt->reb_block[k]] = 0;
    return;
  }
  for (uint32_t k = 0; k < n_tw; k++) { /* the active block: copied whole by the head's next append */
    okv_block_map_t *m = rt->tw_map[k];
    okv_block_map_set_current(m, rt->tw_block[k], 0);
    m->needs_repair = true;
    m->summary_stale[rt->tw_block[k]] = 1;
  }
  for (uint32_t k = 0; k < n_cp; k++) {
    okv_block_map_t *m = rt->wr_map[k];
    okv_block_map_set_current(m, rt->wr_block[k], 0); /* whatever the failed copy left is not read */
    m->needs_repair = true;
    /* Pairs of a head are its active block then its repairs, so index alone does not tell which summary
     * update the batch carried: mark every block it covered stale (a rebuild from the HOST tier is
     * always right, repaired blocks being full). */
    m->summary_stale[rt->wr_block[k]] = 1;
  }
  for (uint32_t k = 0; k < n_reb; k++) { /* stale still (again, after a mark made before attention) */
    rt->reb_map[k]->summary_stale[rt->reb_block[k]] = 1;
    rt->reb_map[k]->needs_repair = true;
  }
}

static okv_status_t append_error(okv_status_t st, uint32_t layer) {
  return okv_status_annotate(st,
                             "runtime: writing the active blocks of layer %u (the token is committed to the host "
                             "tier; out is not valid)",
                             layer);
}

okv_status_t okv_rt_layer_append(okv_runtime_t *rt, uint32_t layer, const float *k_new, const float *v_new, bool defer,
                                 double t_start, double *bk_s, bool *out_committed) {
  *out_committed = false;
  rt->app_pending = false;
  double t0 = t_start > 0 ? t_start : okv_rt_bk_s();
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
  if (need_ext > rt->host.n_free)
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "runtime: the host tier is full (%u free extents, %u needed)",
                           rt->host.n_free, need_ext);
  if (need_slots > rt->n_free_slots)
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY,
                           "runtime: the slot pool (device tier) is full (%llu free slots, %u needed)",
                           (unsigned long long)rt->n_free_slots, need_slots);
  /* The heads' state is cold (the step streamed KV and scores through the caches since the last append):
   * request it in one pass of prefetches before the loops below read it (each head's first line, the map's
   * leading fields with the active block's slot and tokens, and the layer's hot mirrors, whose trailing run
   * gives the active block's HOST block), so that the misses overlap. A head that needs a repair reads more. */
  for (uint32_t i = 0; i < rt->step_n_seqs; i++) {
    const okv_seq_t *s = step_seq(rt, i);
    if (s == NULL) continue;
    okv_rt_prefetch_range(head_hot(rt, rt->step_seq_index[i], layer, 0), H * sizeof(okv_head_hot_t));
    for (uint32_t h = 0; h < H; h++) {
      const okv_head_t *head = seq_head(rt, s, layer, h);
      __builtin_prefetch(head); /* the leading fields the loops read: one line (okv_head_t) */
    }
  }
  /* Grow the per-block arrays first (host allocator failures leave nothing changed). */
  for (uint32_t i = 0; i < rt->step_n_seqs; i++) {
    okv_seq_t *s = step_seq(rt, i);
    if (s == NULL) continue;
    uint32_t nb = s->n_tokens[layer] / OKV_BLOCK_TOKENS + 1u;
    for (uint32_t h = 0; h < H; h++)
      OKV_RETURN_IF_ERROR(okv_block_map_reserve(&seq_head(rt, s, layer, h)->map, &rt->alloc, nb));
  }
  uint32_t n = 0;            /* (sequence, KV head) entries; each adds its token write or block copy, then repairs */
  uint32_t n_cp = 0;         /* copy pairs: whole-block refreshes of active blocks, and repairs */
  uint32_t n_tw = 0;         /* token writes into active blocks' slots */
  uint32_t n_app = 0;        /* incremental summary updates */
  uint32_t n_reb = 0;        /* summaries rebuilt from the HOST tier */
  bool keys_in_place = true; /* the updates' keys are k_new's first n_app rows, in order */
  bool tw_in_place = true;   /* the token writes' rows are k_new's / v_new's first n_tw rows, in order */
  uint32_t cap_cp = rt->wr_capacity, cap_reb = rt->reb_capacity;
  okv_step_stats_t *ls = &rt->layer_step[layer];
  /* Device selection: the maps lag the tables (device_select.c). A new active block may evict and takes a
   * free slot: placed on the tables themselves (okv_rt_dsel_activate), the maps staying behind. A repair reads
   * every block's slot, and a placement the tables refuse takes the map path: those sequences' maps are rebuilt
   * from the tables first. Otherwise the append touches only the active block, whose map entry is the host's
   * own. */
  for (uint32_t i = 0; rt->dev_sel && i < rt->step_n_seqs; i++) {
    okv_seq_t *s = step_seq(rt, i);
    rt->act_done[i] = 0;
    if (s == NULL) continue;
    uint32_t pos = s->n_tokens[layer];
    bool repair = false;
    for (uint32_t h = 0; h < H && !repair; h++) repair = seq_head(rt, s, layer, h)->map.needs_repair;
    if (pos % OKV_BLOCK_TOKENS == 0 && !repair && is_sparse_mode(rt)) {
      uint32_t b = pos / OKV_BLOCK_TOKENS;
      if (okv_rt_dsel_activate(rt, s, layer, b, b + 1u > c->dense_threshold_blocks, i)) {
        rt->act_done[i] = 1;
        ls->evicted += rt->act_evicted[i];
        continue;
      }
    }
    if (pos % OKV_BLOCK_TOKENS == 0 || repair) okv_rt_dsel_sync(rt, s, layer);
  }
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
          okv_host_store_alloc_extents(&rt->host, 1, prefer, &head->extents[head->n_extents]);
          head->n_extents++;
          okv_rt_head_note_extent(head);
        }
        okv_block_map_set_n_blocks(m, b + 1u);
        uint32_t slot;
        if (!is_sparse_mode(rt)) {
          slot = rt->free_slots[--rt->n_free_slots];
        } else if (rt->dev_sel && rt->act_done[i]) { /* placed on the tables (evictions counted above) */
          slot = rt->act_slot[(size_t)i * H + h];
        } else {
          if (b > 0 && okv_block_map_is_resident(m, b - 1u)) okv_block_map_touch(m, b - 1u, rt->step);
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
        okv_block_map_map(m, b, slot, rt->step); /* unreadable until the write below completes */
        m->summary_stale[b] = 0;                 /* the append below starts the summary afresh */
      }
      uint64_t hb = host_block_hot(rt, head_hot(rt, rt->step_seq_index[i], layer, h), b);
      /* b is the active block (n_blocks - 1): its slot and tokens from the map's mirror (its first line). */
      const bool act = b + 1u == m->n_blocks;
      if ((act ? okv_block_map_active_tokens(m) : okv_block_map_tokens(m, b)) == off) {
        /* the slot holds tokens 0..off-1: write the new one only */
        rt->tw_slot[n_tw] = act ? okv_block_map_active_slot(m) : m->loc[b].slot;
        rt->tw_pos[n_tw] = (uint8_t)off;
        /* The token's K / V are k_new's / v_new's row i * H + h; gathered below only when some are skipped. */
        tw_in_place &= n_tw == i * H + h;
        rt->tw_src[n_tw] = i * H + h;
        rt->tw_map[n_tw] = m;
        rt->tw_block[n_tw] = b;
        n_tw++;
      } else { /* an earlier write failed: copy the whole block (written to HOST below first) */
        rt->append_pairs[n_cp].src_offset = hb * rt->block_bytes;
        rt->append_pairs[n_cp].dst_offset = (uint64_t)m->loc[b].slot * rt->block_bytes;
        rt->wr_map[n_cp] = m;
        rt->wr_block[n_cp] = b;
        rt->wr_tokens[n_cp] = (uint8_t)(off + 1u);
        n_cp++;
      }
      rt->tok_block[n] = hb;
      n++;
      /* A failed update left the summary behind: rebuild it (the token is in HOST by then). A stale summary is
       * only ever marked with needs_repair (append_mark), which is cleared only below, after this read:
       * without it the summary is current and summary_stale[] is not read. */
      if (m->needs_repair && m->summary_stale[b]) {
        rt->reb_index[n_reb] = hb;
        rt->reb_valid[n_reb] = (uint8_t)(off + 1u);
        rt->reb_map[n_reb] = m;
        rt->reb_block[n_reb] = b;
        n_reb++;
      } else {
        rt->append_index[n_app] = hb;
        rt->append_first[n_app] = off == 0;
        if (rt->groups_kept > 0 && !okv_rt_blockwise_units(rt)) { /* the group's summary takes the same key */
          rt->append_gindex[n_app] = hb / OKV_SCORING_GROUP_BLOCKS;
          rt->append_gfirst[n_app] = off == 0 && b % OKV_SCORING_GROUP_BLOCKS == 0;
        }
        /* The key is k_new's row i * H + h; rows are gathered below only when some are skipped. */
        keys_in_place &= n_app == i * H + h;
        rt->append_src[n_app] = i * H + h;
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
          if (m->loc[j].slot != OKV_NO_SLOT && okv_block_map_tokens(m, j) < OKV_BLOCK_TOKENS) {
            if (n_cp < cap_cp) {
              rt->append_pairs[n_cp].src_offset = host_block_of(rt, head, j) * rt->block_bytes;
              rt->append_pairs[n_cp].dst_offset = (uint64_t)m->loc[j].slot * rt->block_bytes;
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
  if (rt->dev_sel && !rt->sel_dirty[layer]) /* new active blocks: the tables follow the maps (before the batch below) */
    for (uint32_t i = 0; i < rt->step_n_seqs; i++) {
      const okv_seq_t *s = step_seq(rt, i);
      if (s == NULL || (s->n_tokens[layer] - 1u) % OKV_BLOCK_TOKENS != 0 || rt->act_done[i]) continue;
      okv_status_t ws = okv_rt_dsel_write(rt, s, layer, layer + 1u);
      if (ws != OKV_OK) {
        ls->pipeline_errors++;
        rt->sel_dirty[layer] = 1;
        okv_status_free(ws);
        break;
      }
    }
  rt->app_tw_keys = k_new;
  rt->app_tw_values = v_new;
  if (!tw_in_place) {
    for (uint32_t k = 0; k < n_tw; k++) {
      memcpy(rt->tw_keys + (size_t)k * hd, k_new + (size_t)rt->tw_src[k] * hd, hd * sizeof(float));
      memcpy(rt->tw_values + (size_t)k * hd, v_new + (size_t)rt->tw_src[k] * hd, hd * sizeof(float));
    }
    rt->app_tw_keys = rt->tw_keys;
    rt->app_tw_values = rt->tw_values;
  }
  const float *keys = k_new;
  if (!keys_in_place) {
    for (uint32_t k = 0; k < n_app; k++)
      memcpy(rt->append_keys + (size_t)k * hd, k_new + (size_t)rt->append_src[k] * hd, hd * sizeof(float));
    keys = rt->append_keys;
  }
  rt->app_n_tw = n_tw;
  rt->app_n_cp = n_cp;
  rt->app_n_app = n_app;
  rt->app_n_reb = n_reb;
  rt->app_keys = keys;
  /* Deferred, the marks are made here, in this interval (one interval fewer, two clock reads, each a system
   * call): nothing reads them before attention, and if the batch cannot be enqueued below the path that
   * retries it marks every entry again with its outcome (append_mark sets each entry's state whole). */
  if (defer && n > 0) append_mark(rt, layer, true);
  const double t1 = okv_rt_bk_s(); /* the end of the bookkeeping, the start of the HOST writes */
  *bk_s += t1 - t0;
  if (n == 0) return OKV_OK;
  /* Write the tokens into their HOST blocks (same order as the entries above). */
  t0 = t1;
  for (uint32_t i = 0, e = 0; i < rt->step_n_seqs; i++) {
    const okv_seq_t *s = step_seq(rt, i);
    if (s == NULL) continue;
    uint32_t off = (s->n_tokens[layer] - 1u) % OKV_BLOCK_TOKENS;
    for (uint32_t h = 0; h < H; h++, e++)
      okv_host_store_write_token(&rt->host, rt->tok_block[e], off, k_new + ((size_t)i * H + h) * hd,
                                 v_new + ((size_t)i * H + h) * hd);
  }
  ls->append_seconds += okv_rt_bk_s() - t0;
  /* Summaries, then the token writes and block copies into slots, on the compute stream; one event.
   * Every operation is idempotent (min/max with the same key, the same token
   * written again, whole-block copies from the HOST tier), so a failed batch is
   * retried once whole. */
  okv_status_t st = append_enqueue(rt, layer);
  if (defer && st == OKV_OK) {
    /* Attention follows on the same stream, so it reads the slots after these writes: marked current above;
     * okv_rt_layer_append_finish checks the batch once attention completed. */
    rt->app_pending = true;
    return OKV_OK;
  }
  if (st == OKV_OK) st = okv_hal_event_wait(rt->append_event);
  if (st != OKV_OK) {
    /* Leave no pending error on the stream for the next operation, then retry once. */
    OKV_IGNORE_ERROR(okv_hal_stream_synchronize(rt->compute));
    okv_status_free(st);
    st = append_enqueue(rt, layer);
    if (st == OKV_OK) st = okv_hal_event_wait(rt->append_event);
    if (st == OKV_OK) ls->retried_writes++;
    if (st != OKV_OK) OKV_IGNORE_ERROR(okv_hal_stream_synchronize(rt->compute));
  }
  t0 = okv_rt_bk_s();
  append_mark(rt, layer, st == OKV_OK);
  *bk_s += okv_rt_bk_s() - t0;
  return st ? append_error(st, layer) : OKV_OK;
}

okv_status_t okv_rt_layer_append_finish(okv_runtime_t *rt, uint32_t layer, double *bk_s, bool *out_redo) {
  *out_redo = false;
  if (!rt->app_pending) return OKV_OK;
  rt->app_pending = false;
  okv_status_t st = okv_hal_event_wait(rt->append_event);
  if (st == OKV_OK) return OKV_OK;
  /* The batch failed: what attention read of its slots is not valid. Retry it once, synchronously. */
  OKV_IGNORE_ERROR(okv_hal_stream_synchronize(rt->compute));
  okv_status_free(st);
  st = append_enqueue(rt, layer);
  if (st == OKV_OK) st = okv_hal_event_wait(rt->append_event);
  if (st == OKV_OK) {
    rt->layer_step[layer].retried_writes++;
    *out_redo = true; /* the marks made before attention hold now */
    return OKV_OK;
  }
  OKV_IGNORE_ERROR(okv_hal_stream_synchronize(rt->compute));
  double t0 = okv_rt_bk_s();
  append_mark(rt, layer, false);
  *bk_s += okv_rt_bk_s() - t0;
  return append_error(st, layer);
}
