/* Selection on the device (cfg.device_selection; docs/api.md "Selection on the device"): the runtime's side of
 * okv_hal_select_async / okv_hal_slot_commit_async (include/oasiskv/kernels.h section 6). Method: arXiv
 * 2608.08097, "Select" (capped eviction per KV head), with the per-head state in slot tables on the device so
 * that the host's work per step is a launch per sequence and the plan's read-back, not a pass over every head.
 *
 * Table j of a head is its owned[j] slot (rt->sel_slot_index maps back). The tables are authoritative: they
 * own residency, last-selected steps and free slots, and the host's per-step work is O(1) per KV head plus
 * O(1) per admission (no map follows a plan):
 *  - admission writes the tables from the maps (okv_rt_dsel_write) and records each table's signature;
 *  - the worker's selection reads its plan back, checks each head's reported signature against the one the
 *    host expects (a table changed behind the runtime's back must not drive a copy) and builds the copy pairs
 *    from the head's owned slots and extents; the commit kernel applies the plan to the tables, the host
 *    only updates the expected signatures, and the maps of every sequence that selected lag (sel_lag);
 *  - a new active block (which may evict) is placed on the tables themselves (okv_rt_dsel_activate: read,
 *    check, place, write back), the maps staying behind but for the new block;
 *  - where the host reads the maps (repairs; recall; attention over a host-built working set; the API's
 *    readers) okv_rt_dsel_sync first rebuilds them from the tables, one sequential pass per head; after it
 *    the host may change the maps and write the tables from them;
 *  - any failed device operation marks the layer dirty: its maps are brought up to date (or cut to the
 *    active block where a table cannot be trusted) and its tables rewritten from them at its next commit;
 *    the worker does not select on it meanwhile.
 * The commit runs on the compute stream (the foreground's) and is not waited for: an event recorded behind it
 * takes its failure (so that no later wait reports it to whoever waits), checked once attention has run and
 * before the layer's next job (okv_rt_dsel_commit_finish); table reads and writes are synchronous. The
 * worker's selection runs on the predict stream behind the prediction's top-K and one wait covers both before
 * its plan is read. Uses only the public HAL. */
#include "runtime_internal.h"

#include <stdlib.h>
#include <string.h>

/* Layer-major, so that a batch whose sequences sit in consecutive records selects with one launch per layer. */
static inline uint64_t table_offset(const okv_runtime_t *rt, uint32_t seq_index, uint32_t layer, uint32_t h) {
  return (((uint64_t)layer * rt->cfg.max_seqs + seq_index) * rt->cfg.n_kv_heads + h) * rt->sel_table_bytes;
}
static inline uint64_t *sig_of(const okv_runtime_t *rt, uint32_t seq_index, uint32_t layer, uint32_t h) {
  return &rt->sel_sig[((uint64_t)layer * rt->cfg.max_seqs + seq_index) * rt->cfg.n_kv_heads + h];
}
static inline uint8_t *lag_of(const okv_runtime_t *rt, uint32_t seq_index, uint32_t layer) {
  return &rt->sel_lag[(uint64_t)layer * rt->cfg.max_seqs + seq_index];
}

/* The end of the run of batch entries from `s` that one launch covers: entries with sel[e] set whose records
 * are consecutive (their tables, predictions and plans are then contiguous). */
static uint32_t run_end(const okv_layer_job_t *job, const uint8_t *sel, uint32_t s) {
  uint32_t e = s + 1u;
  while (e < job->n_seqs && sel[e] && job->seq_index[e] == job->seq_index[e - 1u] + 1u) e++;
  return e;
}

/* Result and plan of batch entry u (= s * H + h) of a layer's job in rt->sel_out: per layer every result, then
 * every plan (u32 words; sel_out_host holds one layer's part at word offsets out_result_word / out_plan_word). */
static inline uint64_t out_result_word(uint32_t u) { return (uint64_t)u * OKV_SELECT_RESULT_U32S; }
static inline uint64_t out_plan_word(const okv_runtime_t *rt, uint32_t u) {
  return (uint64_t)rt->cfg.max_seqs * rt->cfg.n_kv_heads * OKV_SELECT_RESULT_U32S +
         (uint64_t)u * rt->cap_blocks * OKV_SELECT_PLAN_U32S;
}
static inline uint64_t out_layer_bytes(const okv_runtime_t *rt) {
  return out_plan_word(rt, rt->cfg.max_seqs * rt->cfg.n_kv_heads) * 4u; /* past the last entry's plan */
}
static inline uint64_t plan_offset(const okv_runtime_t *rt, uint32_t layer, uint32_t u) {
  return layer * out_layer_bytes(rt) + out_plan_word(rt, u) * 4u;
}
static inline uint64_t result_offset(const okv_runtime_t *rt, uint32_t layer, uint32_t u) {
  return layer * out_layer_bytes(rt) + out_result_word(u) * 4u;
}

/* The slot-map row (pool slots of a table's entries) of the same table. */
static inline uint64_t slot_map_offset(const okv_runtime_t *rt, uint32_t seq_index, uint32_t layer, uint32_t h) {
  return (((uint64_t)layer * rt->cfg.max_seqs + seq_index) * rt->cfg.n_kv_heads + h) * rt->sel_R * 4u;
}

uint64_t okv_rt_dsel_tables_offset(const okv_runtime_t *rt, uint32_t layer) { return table_offset(rt, 0, layer, 0); }
uint64_t okv_rt_dsel_slot_map_offset(const okv_runtime_t *rt, uint32_t layer) {
  return slot_map_offset(rt, 0, layer, 0);
}

static okv_status_t alloc_dev(okv_runtime_t *rt, uint64_t bytes, okv_hal_buffer_t **out, const char *what) {
  okv_status_t st = okv_hal_buffer_alloc(rt->device, OKV_TIER_DEVICE, bytes, out);
  return st ? okv_status_annotate(st, "runtime: allocating %s (%llu bytes, device tier)", what,
                                  (unsigned long long)bytes)
            : OKV_OK;
}

okv_status_t okv_rt_dsel_init(okv_runtime_t *rt) {
  const okv_runtime_config_t *c = &rt->cfg;
  okv_status_t st = OKV_OK;
  uint64_t n_seg = (uint64_t)c->max_seqs * c->n_kv_heads;
  rt->sel_R = rt->slots_per_head;
  rt->sel_W = ceil_div_u32(rt->max_blocks, 64u);
  rt->sel_table_bytes = okv_slot_table_bytes(rt->sel_R, rt->sel_W);
  if (rt->sel_table_bytes == 0)
    return OKV_RT_INVALID(
        "okv_runtime_create: device_selection: %u slots per KV head or %u bitmap words exceed "
        "the selection kernel's limits (%u, %u)",
        rt->sel_R, rt->sel_W, OKV_SELECT_MAX_SLOTS, OKV_SELECT_MAX_WORDS);
  OKV_RETURN_IF_ERROR(alloc_dev(rt, n_seg * c->n_layers * rt->sel_table_bytes, &rt->sel_tables, "slot tables"));
  OKV_RETURN_IF_ERROR(
      alloc_dev(rt, n_seg * c->n_layers * rt->sel_R * 4u, &rt->sel_slot_map, "slot tables' pool slots"));
  OKV_RETURN_IF_ERROR(alloc_dev(rt, c->n_layers * out_layer_bytes(rt), &rt->sel_out, "selection results and plans"));
  ALLOC_ARR(rt->sel_slot_index, rt->n_slots);
  ALLOC_ARR(rt->sel_tab_host, (uint64_t)c->n_kv_heads * rt->sel_table_bytes / 4u);
  ALLOC_ARR(rt->sel_landed, n_seg);
  ALLOC_ARR(rt->sel_active, n_seg);
  ALLOC_ARR(rt->sel_cap, n_seg);
  ALLOC_ARR(rt->sel_out_host, out_layer_bytes(rt) / 4u);
  ALLOC_ARR(rt->sel_dirty, c->n_layers);
  ALLOC_ARR(rt->sel_lag, (uint64_t)c->n_layers * c->max_seqs);
  ALLOC_ARR(rt->sel_sig, n_seg * c->n_layers);
  ALLOC_ARR(rt->sel_tok_stale, c->n_layers);
  ALLOC_ARR(rt->sel_slot_map_host, (uint64_t)c->n_kv_heads * rt->sel_R);
  ALLOC_ARR(rt->ws_table_index, c->max_seqs);
  ALLOC_ARR(rt->ws_seq_tokens, c->max_seqs);
  ALLOC_ARR(rt->act_done, c->max_seqs);
  ALLOC_ARR(rt->act_slot, n_seg);
  ALLOC_ARR(rt->act_evicted, c->max_seqs);
  ALLOC_ARR(rt->act_sig, c->n_kv_heads);
  st = okv_hal_event_create(rt->device, &rt->commit_event);
  if (st != OKV_OK) {
    rt->commit_event = NULL;
    goto fail;
  }
  for (uint32_t l = 0; l < c->n_layers; l++) {
    ALLOC_ARR(rt->jobs[l].sel_ran, c->max_seqs);
  }
  rt->dev_sel = true;
  return OKV_OK;
fail:
  return st;
}

void okv_rt_dsel_free(okv_runtime_t *rt) {
  if (rt->commit_event) OKV_IGNORE_ERROR(okv_hal_event_release(rt->commit_event)); /* cleanup */
  okv_hal_buffer_t *bufs[] = {rt->sel_tables, rt->sel_out, rt->sel_slot_map};
  for (int i = 0; i < 3; i++)
    if (bufs[i]) OKV_IGNORE_ERROR(okv_hal_buffer_release(bufs[i])); /* cleanup */
  void *arrs[] = {rt->sel_slot_index, rt->sel_tab_host, rt->sel_landed,    rt->sel_active,        rt->sel_cap,
                  rt->sel_out_host,   rt->sel_dirty,    rt->sel_tok_stale, rt->sel_slot_map_host, rt->ws_table_index,
                  rt->ws_seq_tokens,  rt->sel_lag,      rt->sel_sig,       rt->act_done,          rt->act_slot,
                  rt->act_evicted,    rt->act_sig};
  for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) okv_rt_free(&rt->alloc, arrs[i]);
  for (uint32_t l = 0; rt->jobs && l < rt->cfg.n_layers; l++) okv_rt_free(&rt->alloc, rt->jobs[l].sel_ran);
}

/* The table image of one head from its map (t: sel_table_bytes / 4 words, overwritten); returns its signature. */
static uint64_t table_from_map(const okv_runtime_t *rt, const okv_head_t *hd, uint32_t *t) {
  const uint32_t R = rt->sel_R, W = rt->sel_W;
  uint32_t *blk = t, *last = t + R, *tok = t + 2u * R;
  memset(t, 0, rt->sel_table_bytes);
  for (uint32_t j = 0; j < R; j++) blk[j] = OKV_SLOT_FREE;
  uint64_t *res = (uint64_t *)(void *)(t + 4u * R);
  const okv_block_map_t *m = &hd->map;
  uint64_t sig = 0;
  for (uint32_t i = 0; i < m->n_resident; i++) {
    uint32_t b = m->resident[i], j = rt->sel_slot_index[m->res_slot[i]];
    blk[j] = b;
    last[j] = okv_block_map_res_last(m, i);
    tok[j] = (uint8_t)okv_block_map_res_tok(m, i);
    if (b < 64u * W) res[b >> 6] |= 1ull << (b & 63u);
    sig += okv_slot_table_sig_term(j, b);
  }
  return sig;
}

/* The active block of a head's map as the host keeps it (appends advance it without the tables). */
typedef struct active_t {
  uint32_t block, slot, tokens, last;
} active_t;

static active_t active_of(const okv_block_map_t *m) {
  active_t a = {m->n_blocks > 0 ? m->n_blocks - 1u : OKV_NO_BLOCK, OKV_NO_SLOT, 0, 0};
  if (okv_block_map_is_resident(m, a.block)) {
    a.slot = m->loc[a.block].slot;
    a.tokens = okv_block_map_tokens(m, a.block);
    a.last = okv_block_map_last(m, a.block);
  }
  return a;
}

/* Takes every block off the map and empties its free stack. */
static void map_clear(okv_block_map_t *m) {
  while (m->n_resident > 0) (void)okv_block_map_unmap(m, m->resident[m->n_resident - 1u]);
  m->n_free = 0;
  m->has_prev = false;
}

/* The head keeps its active block `a` only; every other owned slot is free. */
static void map_cut(okv_head_t *hd, const active_t *a) {
  okv_block_map_t *m = &hd->map;
  map_clear(m);
  for (uint32_t j = 0; j < hd->n_owned; j++) {
    if (hd->owned[j] != a->slot) {
      okv_block_map_push_free(m, hd->owned[j]);
      continue;
    }
    okv_block_map_map(m, a->block, a->slot, a->last);
    okv_block_map_set_current(m, a->block, a->tokens);
  }
}

/* Head hd's map rebuilt from its table t (the host's image of it; its scratch words are overwritten):
 * committed entries resident with the table's last-selected steps, pending and free entries free (a pending
 * admission's transfer has landed or failed by the time the host reads the maps; its block is not readable
 * either way). Token counts: the host is the record of write currency, so a block the map already held in
 * the same slot keeps the map's count (the table's may predate a repair, or come from the provisional marks
 * of a deferred append batch that failed since), the active block included; a block admitted since the last
 * rebuild takes the commit's.
 * Returns false, with the head cut to its active block, when the table is not the one the host expects:
 * signature `want` differs, a block is out of range or held twice, the active block moved, an entry past the
 * head's owned slots is used. */
static bool map_from_table(const okv_runtime_t *rt, okv_head_t *hd, uint32_t *t, uint64_t want) {
  const uint32_t R = rt->sel_R, W = rt->sel_W;
  const uint32_t *blk = t, *last = t + R, *tok = t + 2u * R;
  uint32_t *host_tok = t + 3u * R; /* the scratch words: the map's count where it held the same block there */
  const uint64_t *res = (const uint64_t *)(const void *)(t + 4u * R);
  okv_block_map_t *m = &hd->map;
  const active_t a = active_of(m);
  for (uint32_t j = 0; j < R; j++) {
    uint32_t b = blk[j];
    bool held = j < hd->n_owned && b < m->n_blocks && m->loc[b].slot == hd->owned[j];
    host_tok[j] = held ? okv_block_map_tokens(m, b) : UINT32_MAX;
  }
  map_clear(m);
  uint64_t sig = 0;
  bool ok = true;
  for (uint32_t j = 0; j < R; j++) {
    uint32_t b = blk[j];
    if (b == OKV_SLOT_FREE) {
      if (j < hd->n_owned) okv_block_map_push_free(m, hd->owned[j]);
      continue;
    }
    bool committed = b < 64u * W && okv_block_map_bit(res, b);
    if (committed) sig += okv_slot_table_sig_term(j, b);
    if (j >= hd->n_owned) {
      ok = false;
      continue;
    }
    uint32_t slot = hd->owned[j];
    if (!committed) {
      okv_block_map_push_free(m, slot);
      continue;
    }
    if (b >= m->n_blocks || m->loc[b].slot != OKV_NO_SLOT || (b == a.block) != (slot == a.slot)) {
      ok = false;
      continue;
    }
    okv_block_map_map(m, b, slot, last[j]);
    uint32_t n = host_tok[j] != UINT32_MAX ? host_tok[j] : (tok[j] < OKV_BLOCK_TOKENS ? tok[j] : OKV_BLOCK_TOKENS);
    okv_block_map_set_current(m, b, b == a.block ? a.tokens : n);
  }
  if (ok && sig == want) return true;
  map_cut(hd, &a);
  return false;
}

okv_status_t okv_rt_dsel_sync_or_fail(okv_runtime_t *rt, okv_seq_t *seq, uint32_t layer, bool cut) {
  const uint32_t H = rt->cfg.n_kv_heads, si = (uint32_t)(seq - rt->seqs);
  uint8_t *lag = lag_of(rt, si, layer);
  if (!*lag) return OKV_OK;
  okv_status_t st = okv_hal_stream_synchronize(rt->compute); /* the layer's commit kernel */
  if (st == OKV_OK)
    st = okv_hal_buffer_read(rt->sel_tables, table_offset(rt, si, layer, 0), rt->sel_tab_host,
                             (uint64_t)H * rt->sel_table_bytes);
  if (st != OKV_OK) {
    OKV_IGNORE_ERROR(okv_hal_stream_synchronize(rt->compute)); /* drained: no pending error */
    if (!cut)
      return okv_status_annotate(st, "runtime: reading the slot tables of sequence %u, layer %u", seq->id,
                                 layer); /* nothing changed: the maps still lag */
    okv_status_free(st);
    for (uint32_t h = 0; h < H; h++) { /* nothing read: the lagging maps' active block is still the host's own */
      okv_head_t *hd = seq_head(rt, seq, layer, h);
      const active_t a = active_of(&hd->map);
      map_cut(hd, &a);
    }
  }
  *lag = 0;
  bool trusted = st == OKV_OK;
  for (uint32_t h = 0; st == OKV_OK && h < H; h++)
    trusted &= map_from_table(rt, seq_head(rt, seq, layer, h),
                              rt->sel_tab_host + (uint64_t)h * rt->sel_table_bytes / 4u, *sig_of(rt, si, layer, h));
  if (!trusted) {
    rt->layer_step[layer].pipeline_errors++;
    rt->sel_dirty[layer] = 1; /* the tables no longer hold what the maps do: rewritten at the next commit */
  }
  return OKV_OK;
}

void okv_rt_dsel_sync(okv_runtime_t *rt, okv_seq_t *seq, uint32_t layer) {
  OKV_IGNORE_ERROR(okv_rt_dsel_sync_or_fail(rt, seq, layer, true)); /* cut: OK always */
}

/* Table image t of head hd after placing `block` (see okv_rt_dsel_activate); sig: the expected signature, updated.
 * Returns the table entry the block took, or UINT32_MAX (the image is then scratch, *sig unchanged) when the
 * table is not the expected one or has no free entry. */
static uint32_t activate_head(const okv_runtime_t *rt, const okv_head_t *hd, uint32_t *t, uint64_t *sig, uint32_t block,
                              bool sparse, uint32_t step, uint32_t *evicted) {
  const uint32_t R = rt->sel_R, W = rt->sel_W, K = rt->cfg.budget_blocks;
  const uint32_t n = hd->n_owned < R ? hd->n_owned : R;
  uint32_t *blk = t, *last = t + R, *tok = t + 2u * R;
  uint64_t *res = (uint64_t *)(void *)(t + 4u * R);
  const okv_block_map_t *m = &hd->map;
  if (block >= 64u * W) return UINT32_MAX;
  /* The expected table: its signature, no committed entry past the owned slots or at the new block. */
  uint64_t have = 0;
  uint32_t held = 0, prev = UINT32_MAX;
  for (uint32_t j = 0; j < R; j++) {
    uint32_t b = blk[j];
    if (b == OKV_SLOT_FREE || b >= 64u * W || !okv_block_map_bit(res, b)) continue;
    if (j >= n || b >= block) return UINT32_MAX;
    have += okv_slot_table_sig_term(j, b);
    held++;
    if (b + 1u == block) prev = j;
  }
  if (have != *sig) return UINT32_MAX;
  /* The previous active block: the host's write count (appends keep the map's entry current). */
  uint32_t prev_tok = 0;
  if (prev != UINT32_MAX) {
    if (!okv_block_map_is_resident(m, block - 1u) || m->loc[block - 1u].slot != okv_rt_owned_slot(hd, prev))
      return UINT32_MAX;
    prev_tok = okv_block_map_tokens(m, block - 1u);
  }
  uint32_t victims[OKV_SELECT_MAX_SLOTS], n_victims = 0;
  if (prev != UINT32_MAX) last[prev] = step; /* touched: lasts below see it, as the map path's LRU does */
  while (sparse && held - n_victims > K) {
    uint32_t best = UINT32_MAX;
    for (uint32_t j = 0; j < n; j++) {
      uint32_t b = blk[j];
      if (b == OKV_SLOT_FREE || !okv_block_map_bit(res, b)) continue;
      if (best == UINT32_MAX || last[j] < last[best] || (last[j] == last[best] && b < blk[best])) best = j;
    }
    if (best == UINT32_MAX) break;
    victims[n_victims++] = best;
    res[blk[best] >> 6] &= ~(1ull << (blk[best] & 63u)); /* out of the scan (the image is scratch if this fails) */
  }
  uint32_t take = UINT32_MAX;
  if (n_victims > 0) {
    take = victims[n_victims - 1u];
  } else {
    for (uint32_t j = n; j-- > 0 && take == UINT32_MAX;)
      if (blk[j] == OKV_SLOT_FREE || !okv_block_map_bit(res, blk[j])) take = j;
  }
  if (take == UINT32_MAX) return UINT32_MAX; /* nothing evicted: the image is as read but for prev's last */
  if (prev != UINT32_MAX) tok[prev] = prev_tok;
  for (uint32_t v = 0; v < n_victims; v++) {
    uint32_t j = victims[v];
    *sig -= okv_slot_table_sig_term(j, blk[j]);
    blk[j] = OKV_SLOT_FREE;
    last[j] = 0;
    tok[j] = 0;
  }
  blk[take] = block;
  last[take] = step;
  tok[take] = 0;
  res[block >> 6] |= 1ull << (block & 63u);
  *sig += okv_slot_table_sig_term(take, block);
  *evicted += n_victims;
  return take;
}

bool okv_rt_dsel_activate(okv_runtime_t *rt, okv_seq_t *seq, uint32_t layer, uint32_t block, bool sparse, uint32_t i) {
  const uint32_t H = rt->cfg.n_kv_heads, si = (uint32_t)(seq - rt->seqs);
  const uint64_t words = rt->sel_table_bytes / 4u;
  if (rt->sel_dirty[layer]) return false;
  okv_status_t st = okv_hal_stream_synchronize(rt->compute); /* the layer's commit kernel */
  if (st == OKV_OK)
    st = okv_hal_buffer_read(rt->sel_tables, table_offset(rt, si, layer, 0), rt->sel_tab_host,
                             (uint64_t)H * rt->sel_table_bytes);
  if (st != OKV_OK) { /* absorbed: the map path reads again (and cuts what it cannot read) */
    okv_status_free(st);
    OKV_IGNORE_ERROR(okv_hal_stream_synchronize(rt->compute)); /* drained: no pending error */
    rt->layer_step[layer].pipeline_errors++;
    return false;
  }
  uint64_t *sig = rt->act_sig;
  uint32_t evicted = 0;
  for (uint32_t h = 0; h < H; h++) {
    sig[h] = *sig_of(rt, si, layer, h);
    uint32_t j = activate_head(rt, seq_head(rt, seq, layer, h), rt->sel_tab_host + h * words, &sig[h], block, sparse,
                               rt->step, &evicted);
    if (j == UINT32_MAX) { /* nothing written: counted, and the map path rebuilds (checks) or rewrites the tables */
      rt->layer_step[layer].pipeline_errors++;
      return false;
    }
    rt->act_slot[(uint64_t)i * H + h] = okv_rt_owned_slot(seq_head(rt, seq, layer, h), j);
  }
  st = okv_hal_buffer_write(rt->sel_tables, table_offset(rt, si, layer, 0), rt->sel_tab_host,
                            (uint64_t)H * rt->sel_table_bytes);
  if (st != OKV_OK) {
    /* Absorbed: the map path takes over. Lagging maps are rebuilt from what the tables hold now (the write may
     * have landed in part: a table the expected signature does not describe is cut), current ones stay, and
     * the tables are written from the maps after the append. */
    okv_status_free(st);
    OKV_IGNORE_ERROR(okv_hal_stream_synchronize(rt->compute)); /* drained: no pending error */
    rt->layer_step[layer].pipeline_errors++;
    return false;
  }
  for (uint32_t h = 0; h < H; h++) *sig_of(rt, si, layer, h) = sig[h];
  *lag_of(rt, si, layer) = 1; /* the maps hold the new active block only */
  rt->act_evicted[i] = evicted;
  return true;
}

void okv_rt_dsel_sig_commit(okv_runtime_t *rt, uint32_t layer, const okv_layer_job_t *job, uint32_t s) {
  const uint32_t H = rt->cfg.n_kv_heads;
  uint64_t *sig = sig_of(rt, job->seq_index[s], layer, 0);
  for (uint32_t h = 0; h < H; h++) sig[h] += job->sig_delta[s * H + h]; /* the signature is a sum of terms */
}

okv_status_t okv_rt_dsel_write(okv_runtime_t *rt, const okv_seq_t *seq, uint32_t l0, uint32_t l1) {
  const uint32_t H = rt->cfg.n_kv_heads;
  uint32_t si = (uint32_t)(seq - rt->seqs);
  /* A commit enqueued for a sequence removed since may still be pending on this record's tables. */
  okv_status_t st = okv_hal_stream_synchronize(rt->compute);
  const uint32_t R = rt->sel_R;
  for (uint32_t l = l0; st == OKV_OK && l < l1; l++) {
    *lag_of(rt, si, l) = 0; /* the maps are current: the tables follow them */
    for (uint32_t h = 0; h < H; h++) {
      const okv_head_t *hd = seq_head(rt, seq, l, h);
      *sig_of(rt, si, l, h) = table_from_map(rt, hd, rt->sel_tab_host + (uint64_t)h * rt->sel_table_bytes / 4u);
      uint32_t *row = rt->sel_slot_map_host + (uint64_t)h * R; /* table j <-> owned[j]; none: out of range */
      for (uint32_t j = 0; j < R; j++) row[j] = j < hd->n_owned ? hd->owned[j] : UINT32_MAX;
    }
    st = okv_hal_buffer_write(rt->sel_tables, table_offset(rt, si, l, 0), rt->sel_tab_host,
                              (uint64_t)H * rt->sel_table_bytes);
    if (st == OKV_OK)
      st = okv_hal_buffer_write(rt->sel_slot_map, slot_map_offset(rt, si, l, 0), rt->sel_slot_map_host,
                                (uint64_t)H * R * 4u);
  }
  return st;
}

okv_status_t okv_rt_dsel_select(okv_runtime_t *rt, uint32_t layer, okv_layer_job_t *job, okv_predict_ctx_t *ctx,
                                double *t_ready, double *wait_s) {
  const uint32_t H = rt->cfg.n_kv_heads, K = rt->cfg.budget_blocks, C = rt->cap_blocks;
  okv_status_t st = OKV_OK;
  memset(job->sel_ran, 0, job->n_seqs);
  if (rt->sel_dirty[layer]) {
    st = okv_status_make(OKV_STATUS_UNAVAILABLE,
                         "runtime: the slot tables of layer %u await their rewrite after a failure; no selection",
                         layer);
    goto out;
  }
  for (uint32_t s = 0; s < job->n_seqs; s++) {
    const okv_seq_t *seq = ctx->seqs[s];
    job->sel_ran[s] = seq != NULL;
    for (uint32_t h = 0; seq != NULL && h < H; h++) {
      rt->sel_active[s * H + h] = n_blocks_of(seq->n_tokens[layer]) - 1u;
      rt->sel_cap[s * H + h] = job->cap < C ? job->cap : C;
    }
  }
  for (uint32_t s = 0, e; s < job->n_seqs; s = e) {
    if (!job->sel_ran[s]) {
      e = s + 1u;
      continue;
    }
    e = run_end(job, job->sel_ran, s);
    uint32_t u0 = s * H;
    okv_select_desc_t d = {.n_heads = (e - s) * H,
                           .n_slots = rt->sel_R,
                           .bitmap_words = rt->sel_W,
                           .budget_blocks = K,
                           .step = job->step,
                           .table = rt->sel_tables,
                           .table_offset = table_offset(rt, job->seq_index[s], layer, 0),
                           .predicted = ctx->topk,
                           .predicted_offset = (uint64_t)u0 * K * 4u,
                           .predicted_stride = K,
                           .predicted_counts = ctx->counts,
                           .counts_offset = (uint64_t)u0 * 4u,
                           .active_block = &rt->sel_active[u0],
                           .cap = &rt->sel_cap[u0],
                           .plan_stride = C,
                           .plan = rt->sel_out,
                           .plan_offset = plan_offset(rt, layer, u0),
                           .result = rt->sel_out,
                           .result_offset = result_offset(rt, layer, u0)};
    st = okv_hal_select_async(rt->predict, &d);
    if (st != OKV_OK) goto out;
  }
  /* One wait and one read for the layer: the results and plans of the whole batch (entries u = s * H + h; the
   * layer's every result, then the batch's plans). */
  uint32_t n_seg = job->n_seqs * H;
  const double w0 = okv_rt_bk_s();
  st = okv_hal_stream_synchronize(rt->predict);
  *t_ready = okv_rt_wall_s();
  *wait_s = okv_rt_bk_s() - w0;
  if (st == OKV_OK)
    st = okv_hal_buffer_read(rt->sel_out, result_offset(rt, layer, 0), rt->sel_out_host,
                             plan_offset(rt, layer, n_seg) - result_offset(rt, layer, 0));
  if (st != OKV_OK) goto out;
  /* Every head checked before any entry is issued: its table is the one the host expects (the signature the
   * selection found), and every entry names one of the head's own slots and a block of its context (the copy
   * engine writes where the plan says). One pass per head checks it and takes its entries (copy pairs, plan
   * entries where read, its signature change once they land); a head that fails drops the layer's whole plan
   * before anything is issued. Per head this reads its hot mirror and signature (consecutive lines for the
   * layer's batch, okv_head_hot_t), not the head's cold struct; both cold, prefetched first. */
  for (uint32_t s = 0; s < job->n_seqs; s++)
    if (ctx->seqs[s] != NULL) {
      okv_rt_prefetch_range(head_hot(rt, job->seq_index[s], layer, 0), H * sizeof(okv_head_hot_t));
      okv_rt_prefetch_range(sig_of(rt, job->seq_index[s], layer, 0), H * sizeof(uint64_t));
      __builtin_prefetch(ctx->seqs[s]); /* its heads pointer (seq_head) */
    }
  uint64_t hits = 0, misses = 0, admitted = 0;
  /* job->plan's entries are read only by the fetched-share measurement (fg_mass; the commit, the failure paths
   * and a sequence's removal use the counts per sequence): without it only the copy pairs are written. */
  const bool entries = rt->fg_mass != NULL;
  /* Locals for what the loop writes through (so that no store to pairs[] makes it reload them). */
  okv_block_copy_t *const pairs = job->pairs;
  const uint64_t bb = rt->block_bytes;
  uint32_t n_plan = job->n_plan;
  for (uint32_t s = 0; s < job->n_seqs && st == OKV_OK; s++) {
    const okv_seq_t *seq = ctx->seqs[s];
    job->seq_moved[s] = job->seq_evicted[s] = 0;
    if (seq == NULL) continue;
    /* Every head's map.n_blocks, from sel_active (n_tokens is unchanged while the layer's job runs: the engine
     * appends to the layer only after collecting it); seq->n_tokens would be a miss on a line the engine
     * writes. */
    const uint32_t nb = rt->sel_active[s * H] + 1u;
    const uint32_t n_plan0 = n_plan, si = job->seq_index[s];
    uint32_t evicted = 0;
    for (uint32_t h = 0; h < H && st == OKV_OK; h++) {
      uint32_t u = s * H + h;
      const uint32_t *r = &rt->sel_out_host[out_result_word(u)];
      const okv_head_hot_t *k = head_hot(rt, si, layer, h);
      const okv_head_t *hd = seq_head(rt, seq, layer, h); /* read only for irregular owned slots */
      const uint32_t n_owned = k->n_owned, n_adm = r[0];
      bool fits = n_adm <= C && ((uint64_t)r[5] << 32 | r[4]) == *sig_of(rt, si, layer, h);
      const uint32_t *p = &rt->sel_out_host[out_plan_word(rt, u)];
      uint64_t delta = 0;
      for (uint32_t i = 0; fits && i < n_adm; i++, p += OKV_SELECT_PLAN_U32S) {
        const uint32_t block = p[0], tslot = p[1], victim = p[2], vslot = p[3];
        fits = tslot < n_owned && block < nb && (victim == OKV_SLOT_FREE || vslot < n_owned);
        if (!fits) break;
        const uint32_t slot = okv_rt_owned_slot_hot(k, hd, tslot);
        if (entries) {
          okv_plan_entry_t *e = &job->plan[n_plan];
          e->seq_index = si;
          e->seq_id = seq->id;
          e->kv_head = h;
          e->block = block;
          e->slot = slot;
          e->victim = victim == OKV_SLOT_FREE ? OKV_NO_BLOCK : victim;
          e->table_slot = tslot;
          e->table_victim_slot = vslot;
        }
        delta += okv_slot_table_sig_term(tslot, block);
        if (victim != OKV_SLOT_FREE) {
          delta -= okv_slot_table_sig_term(vslot, victim);
          evicted++;
        }
        pairs[n_plan].src_offset = host_block_hot(rt, k, block) * bb;
        pairs[n_plan].dst_offset = (uint64_t)slot * bb;
        n_plan++;
      }
      if (!fits) {
        st = okv_status_make(OKV_STATUS_INTERNAL,
                             "runtime: the slot table of sequence %u, KV head %u is not the one the runtime wrote "
                             "(signature or plan out of range); the layer's plan is dropped and its tables rewritten",
                             seq->id, h);
        break;
      }
      job->sig_delta[u] = delta;
      hits += r[1];
      misses += r[2];
      admitted += n_adm;
    }
    job->seq_moved[s] = n_plan - n_plan0;
    job->seq_evicted[s] = evicted;
  }
  job->n_plan = n_plan;
  if (st == OKV_OK) {
    job->stats.hits += hits;
    job->stats.misses += misses;
    job->stats.admitted += admitted;
    job->stats.deferred += misses - admitted;
  }
out:
  if (st != OKV_OK) {
    OKV_IGNORE_ERROR(okv_hal_stream_synchronize(rt->predict)); /* no pending error left for the next job */
    /* A selection may have run without its plan read: the maps never saw it, the tables did. */
    rt->sel_dirty[layer] = 1;
    memset(job->sel_ran, 0, job->n_seqs);
    job->n_plan = 0;
    return okv_status_annotate(st, "runtime: selection of layer %u on the device", layer);
  }
  return OKV_OK;
}

/* Rewrites the layer's tables of every live sequence from the maps; clears the dirty mark when all landed. */
static okv_status_t rewrite_layer(okv_runtime_t *rt, uint32_t layer) {
  for (uint32_t i = 0; i < rt->cfg.max_seqs; i++) {
    okv_seq_t *s = &rt->seqs[i];
    if (!s->live) continue;
    okv_rt_dsel_sync(rt, s, layer); /* the maps first take what the tables committed (or what can be trusted) */
    OKV_RETURN_IF_ERROR(okv_rt_dsel_write(rt, s, layer, layer + 1u));
  }
  rt->sel_dirty[layer] = 0;
  return OKV_OK;
}

bool okv_rt_dsel_commit_finish(okv_runtime_t *rt) {
  if (!rt->commit_pending) return false;
  rt->commit_pending = false;
  const uint32_t layer = rt->commit_layer;
  okv_step_stats_t *ls = &rt->layer_step[layer];
  okv_status_t st = okv_hal_event_wait(rt->commit_event); /* done already once attention ran: no sleep */
  if (st == OKV_OK) return false;
  /* The commit failed (the event took its error: no other wait saw it). Absorbed: the maps are rebuilt from
   * what the tables can be trusted for (the plan's heads are cut to their active block: their signatures
   * count the plan) and the tables rewritten from them. */
  ls->pipeline_errors++;
  okv_status_free(st);
  rt->sel_dirty[layer] = 1;
  st = rewrite_layer(rt, layer);
  if (st != OKV_OK) { /* stays dirty: the next commit tries again */
    ls->pipeline_errors++;
    okv_status_free(st);
    OKV_IGNORE_ERROR(okv_hal_stream_synchronize(rt->compute));
  }
  return true;
}

void okv_rt_dsel_commit(okv_runtime_t *rt, uint32_t layer, okv_layer_job_t *job, bool landed) {
  const uint32_t H = rt->cfg.n_kv_heads;
  okv_step_stats_t *ls = &rt->layer_step[layer];
  okv_status_t st = OKV_OK;
  bool launched = false;
  (void)okv_rt_dsel_commit_finish(rt); /* one not checked yet (a step_layer that stopped early) */
  if (!rt->sel_dirty[layer]) {
    memset(rt->sel_landed, landed ? 1 : 0, (size_t)job->n_seqs * H);
    for (uint32_t s = 0; s < job->n_seqs; s++) { /* a removed sequence's tables are rewritten when reused */
      const okv_seq_t *seq = &rt->seqs[job->seq_index[s]];
      if (!seq->live || seq->id != job->seq_id[s]) job->sel_ran[s] = 0;
      if (job->sel_ran[s]) *lag_of(rt, job->seq_index[s], layer) = 1; /* hits stamped, plan applied: maps behind */
    }
    for (uint32_t s = 0, e; s < job->n_seqs && st == OKV_OK; s = e) {
      if (!job->sel_ran[s]) {
        e = s + 1u;
        continue;
      }
      e = run_end(job, job->sel_ran, s);
      okv_slot_commit_desc_t d = {.n_heads = (e - s) * H,
                                  .n_slots = rt->sel_R,
                                  .bitmap_words = rt->sel_W,
                                  .table = rt->sel_tables,
                                  .table_offset = table_offset(rt, job->seq_index[s], layer, 0),
                                  .plan_stride = rt->cap_blocks,
                                  .plan = rt->sel_out,
                                  .plan_offset = plan_offset(rt, layer, s * H),
                                  .result = rt->sel_out,
                                  .result_offset = result_offset(rt, layer, s * H),
                                  .landed = rt->sel_landed};
      st = okv_hal_slot_commit_async(rt->compute, &d);
      launched |= st == OKV_OK;
    }
    /* Not waited for: an event recorded behind the kernels takes their failure (an event captures the
     * stream's error, so no later wait on the stream sees it), and okv_rt_dsel_commit_finish checks it once
     * attention has run, which then runs again if the tables had to be repaired. Until then the tables are
     * read before or after the commit; either state is consistent (before it, the admitted entries are
     * pending and not read, the victims intact), and a new active block's placement that finds signatures
     * counting a plan the tables lack takes the map path. */
    if (st == OKV_OK && launched) {
      st = okv_hal_event_record(rt->commit_event, rt->compute);
      if (st == OKV_OK) {
        rt->commit_pending = true;
        rt->commit_layer = layer;
      }
    }
    if (st != OKV_OK) { /* an enqueue failed: drained, the tables rewritten from the maps below */
      ls->pipeline_errors++;
      okv_status_free(st);
      OKV_IGNORE_ERROR(okv_hal_stream_synchronize(rt->compute)); /* drained: no pending error */
      rt->sel_dirty[layer] = 1;
    }
  }
  memset(job->sel_ran, 0, rt->cfg.max_seqs);
  if (rt->sel_dirty[layer]) {
    st = rewrite_layer(rt, layer);
    if (st != OKV_OK) { /* stays dirty: the next commit tries again */
      ls->pipeline_errors++;
      okv_status_free(st);
      OKV_IGNORE_ERROR(okv_hal_stream_synchronize(rt->compute));
    }
  }
}

/* Every live sequence's hot mirrors (okv_head_hot_t) against its heads. */
static okv_status_t check_head_hot(const okv_runtime_t *rt) {
  const uint32_t H = rt->cfg.n_kv_heads;
  for (uint32_t i = 0; i < rt->cfg.max_seqs; i++) {
    const okv_seq_t *s = &rt->seqs[i];
    for (uint32_t l = 0; s->live && l < rt->cfg.n_layers; l++)
      for (uint32_t h = 0; h < H; h++) {
        const okv_head_t *hd = seq_head(rt, s, l, h);
        const okv_head_hot_t *k = head_hot(rt, i, l, h);
        uint32_t tail = hd->n_extents > 0 ? hd->n_extents - 1u : 0u; /* the trailing run, recomputed */
        while (tail > 0 && hd->extents[tail - 1u] + 1u == hd->extents[tail]) tail--;
        if (hd->hot != k || k->extents != hd->extents || k->tail_cur != tail ||
            k->tail_ext != (hd->n_extents ? hd->extents[tail] : 0u) || k->ext_run != hd->ext_run ||
            k->ext0 != (hd->n_extents ? hd->extents[0] : 0u) || k->n_owned != hd->n_owned ||
            k->owned_step != hd->owned_step || k->owned_base != hd->owned_base)
          return okv_status_make(OKV_STATUS_INTERNAL,
                                 "debug: the hot mirror of sequence %u, layer %u, KV head %u differs from the head",
                                 s->id, l, h);
      }
  }
  return OKV_OK;
}

okv_status_t okv_runtime_debug_check_tables(okv_runtime_t *rt) {
  if (rt == NULL) return OKV_OK;
  if (is_sparse_mode(rt)) OKV_RETURN_IF_ERROR(check_head_hot(rt));
  if (!rt->dev_sel) return OKV_OK;
  okv_rt_jobs_drain(rt);
  OKV_RETURN_IF_ERROR(okv_hal_stream_synchronize(rt->compute));
  const uint32_t H = rt->cfg.n_kv_heads, R = rt->sel_R, W = rt->sel_W;
  for (uint32_t i = 0; i < rt->cfg.max_seqs; i++) {
    okv_seq_t *s = &rt->seqs[i];
    if (!s->live) continue;
    for (uint32_t l = 0; l < rt->cfg.n_layers; l++) {
      if (rt->sel_dirty[l] || rt->jobs[l].sel_undo) continue; /* mended by the layer's next commit */
      okv_rt_dsel_sync(rt, s, l);
      if (rt->sel_dirty[l])
        return okv_status_make(OKV_STATUS_INTERNAL, "seq %u layer %u: a table failed its check", s->id, l);
      OKV_RETURN_IF_ERROR(okv_hal_buffer_read(rt->sel_tables, table_offset(rt, i, l, 0), rt->sel_tab_host,
                                              (uint64_t)H * rt->sel_table_bytes));
      for (uint32_t h = 0; h < H; h++) {
        const uint32_t *t = rt->sel_tab_host + (uint64_t)h * rt->sel_table_bytes / 4u;
        const uint64_t *res = (const uint64_t *)(const void *)(t + 4u * R);
        const okv_head_t *hd = seq_head(rt, s, l, h);
        const okv_block_map_t *m = &hd->map;
        uint32_t held = 0, n_bits = 0;
        for (uint32_t j = 0; j < R; j++) {
          uint32_t b = t[j];
          bool own_free = false;
          for (uint32_t f = 0; f < m->n_free; f++) own_free |= m->free_slots[f] == hd->owned[j];
          if (b == OKV_SLOT_FREE) {
            if (!own_free)
              return okv_status_make(OKV_STATUS_INTERNAL,
                                     "seq %u layer %u head %u: table slot %u free, map's slot busy", s->id, l, h, j);
            continue;
          }
          if (!okv_block_map_bit(res, b)) { /* a pending admission: its slot free in the map, its block absent */
            if (!own_free || (b < m->n_blocks && m->loc[b].slot != OKV_NO_SLOT))
              return okv_status_make(OKV_STATUS_INTERNAL,
                                     "seq %u layer %u head %u: table slot %u pending block %u, the map disagrees",
                                     s->id, l, h, j, b);
            continue;
          }
          held++;
          if (b >= m->n_blocks || m->loc[b].slot != hd->owned[j])
            return okv_status_make(OKV_STATUS_INTERNAL,
                                   "seq %u layer %u head %u: table slot %u holds block %u, the map does not", s->id, l,
                                   h, j, b);
        }
        for (uint32_t w = 0; w < W; w++) n_bits += (uint32_t)__builtin_popcountll(res[w]);
        for (uint32_t k = 0; k < m->n_resident; k++)
          if (!okv_block_map_bit(res, m->resident[k]))
            return okv_status_make(OKV_STATUS_INTERNAL, "seq %u layer %u head %u: block %u resident, bit clear", s->id,
                                   l, h, m->resident[k]);
        if (held != m->n_resident || n_bits != m->n_resident)
          return okv_status_make(OKV_STATUS_INTERNAL,
                                 "seq %u layer %u head %u: table holds %u blocks (%u bits), map %u", s->id, l, h, held,
                                 n_bits, m->n_resident);
      }
    }
  }
  return OKV_OK;
}

bool okv_rt_dsel_ws_ready(okv_runtime_t *rt, uint32_t layer) {
  if (rt->sel_dirty[layer]) return false;
  if (!rt->sel_tok_stale[layer]) return true;
  okv_status_t st = OKV_OK;
  for (uint32_t i = 0; i < rt->cfg.max_seqs && st == OKV_OK; i++) {
    okv_seq_t *s = &rt->seqs[i];
    if (!s->live) continue;
    okv_rt_dsel_sync(rt, s, layer); /* the rewrite keeps what the tables committed and their last-selected steps */
    st = okv_rt_dsel_write(rt, s, layer, layer + 1u);
  }
  if (st != OKV_OK) { /* rewritten from the maps at the layer's next commit; attention reads the maps' list */
    rt->layer_step[layer].pipeline_errors++;
    okv_status_free(st);
    OKV_IGNORE_ERROR(okv_hal_stream_synchronize(rt->compute)); /* drained: no pending error */
    rt->sel_dirty[layer] = 1;
    return false;
  }
  rt->sel_tok_stale[layer] = 0;
  return !rt->sel_dirty[layer]; /* a table the sync could not trust: the maps' list until the next commit */
}
