/* Sequences: admission (prefill load into the HOST tier, summaries, initial
 * working set), removal, length, the readable-block listing and the debug
 * accessors. Owns okv_seq_t lifetimes, the per-head maps' creation and the
 * sequence's HOST extents and DEVICE slots. Touches the pipeline only to
 * drain it before a sequence's slots are reused. */
#include "runtime_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- sequences ---- */

okv_seq_t *okv_rt_seq_find(const okv_runtime_t *rt, uint32_t id) {
  for (uint32_t i = 0; i < rt->cfg.max_seqs; i++)
    if (rt->seqs[i].live && rt->seqs[i].id == id) return &rt->seqs[i];
  return NULL;
}

/* Returns every slot and extent of the sequence and frees its host arrays. */
void okv_rt_seq_release(okv_runtime_t *rt, okv_seq_t *s) {
  uint32_t n_heads = rt->cfg.n_layers * rt->cfg.n_kv_heads;
  if (s->heads != NULL) {
    for (uint32_t i = 0; i < n_heads; i++) {
      okv_head_t *h = &s->heads[i];
      if (is_sparse_mode(rt)) {
        for (uint32_t j = 0; j < h->n_owned; j++) rt->free_slots[rt->n_free_slots++] = h->owned[j];
      } else {
        for (uint32_t j = 0; j < h->map.n_resident; j++)
          rt->free_slots[rt->n_free_slots++] = h->map.loc[h->map.resident[j]].slot;
      }
      okv_host_store_free_extents(&rt->host, h->extents, h->n_extents);
      okv_rt_free(&rt->alloc, h->extents);
      okv_rt_free(&rt->alloc, h->owned);
      okv_rt_free(&rt->alloc, h->present);
      okv_block_map_free(&h->map, &rt->alloc);
    }
    okv_rt_free(&rt->alloc, s->heads_mem);
  }
  okv_rt_free(&rt->alloc, s->n_tokens);
  okv_rt_free(&rt->alloc, s->source_name);
  okv_status_free(s->lost);
  s->heads = NULL;
  s->heads_mem = NULL;
  s->n_tokens = NULL;
  s->source_name = NULL;
  s->lost = OKV_OK;
  __atomic_store_n(&s->lost_flag, 0, __ATOMIC_RELEASE);
  s->remote = false;
  s->live = false;
}

/* ---- the self-tuning cap's spare slots ---- */

/* Slots the heads of live or reserved sequences own above slots_min_per_head that sit in their free stacks
 * now (not targets of a transfer in flight): what okv_rt_spares_reclaim can take back. */
static uint64_t spares_free(const okv_runtime_t *rt) {
  uint64_t n = 0, LH = (uint64_t)rt->cfg.n_layers * rt->cfg.n_kv_heads;
  for (uint32_t i = 0; i < rt->cfg.max_seqs; i++) {
    const okv_seq_t *s = &rt->seqs[i];
    if (s->heads == NULL) continue;
    for (uint64_t j = 0; j < LH; j++) {
      const okv_head_t *h = &s->heads[j];
      uint32_t above = h->n_owned > rt->slots_min_per_head ? h->n_owned - rt->slots_min_per_head : 0;
      n += above < h->map.n_free ? above : h->map.n_free;
    }
  }
  return n;
}

/* Takes free spare slots back from the heads into the pool until it holds `want` slots or none is left.
 * Only slots in a head's free stack move, never one a transfer in flight will write. Engine thread, with
 * the pipeline drained. */
static void spares_reclaim(okv_runtime_t *rt, uint64_t want) {
  uint64_t LH = (uint64_t)rt->cfg.n_layers * rt->cfg.n_kv_heads;
  for (uint32_t i = 0; i < rt->cfg.max_seqs && rt->n_free_slots < want; i++) {
    okv_seq_t *s = &rt->seqs[i];
    if (s->heads == NULL) continue;
    for (uint64_t j = 0; j < LH && rt->n_free_slots < want; j++) {
      okv_head_t *h = &s->heads[j];
      uint32_t slot;
      while (h->n_owned > rt->slots_min_per_head && rt->n_free_slots < want && okv_block_map_pop_free(&h->map, &slot)) {
        for (uint32_t k = 0; k < h->n_owned; k++)
          if (h->owned[k] == slot) {
            h->owned[k] = h->owned[--h->n_owned];
            okv_rt_head_note_owned(h);
            break;
          }
        rt->free_slots[rt->n_free_slots++] = slot;
      }
    }
  }
}

/* Spreads the pool's free slots over the heads of live and reserved sequences, one per head per round, up to
 * slots_per_head each: a head's spares are its cap (pipeline.c). Engine thread, with the pipeline drained. */
void okv_rt_spares_spread(okv_runtime_t *rt) {
  if (!has_spares(rt)) return;
  uint64_t LH = (uint64_t)rt->cfg.n_layers * rt->cfg.n_kv_heads;
  bool gave = true;
  while (gave && rt->n_free_slots > 0) {
    gave = false;
    for (uint32_t i = 0; i < rt->cfg.max_seqs && rt->n_free_slots > 0; i++) {
      okv_seq_t *s = &rt->seqs[i];
      if (s->heads == NULL) continue;
      for (uint64_t j = 0; j < LH && rt->n_free_slots > 0; j++) {
        okv_head_t *h = &s->heads[j];
        if (h->n_owned >= rt->slots_per_head) continue;
        uint32_t slot = rt->free_slots[--rt->n_free_slots];
        h->owned[h->n_owned++] = slot;
        okv_rt_head_note_owned(h);
        okv_block_map_push_free(&h->map, slot);
        gave = true;
      }
    }
  }
  /* The controller searches C only up to the most spares a head holds (pipeline.c): above it C changes
   * nothing a head admits. */
  uint32_t most = 0, base = rt->cfg.budget_blocks + 1u;
  for (uint32_t i = 0; i < rt->cfg.max_seqs; i++) {
    const okv_seq_t *s = &rt->seqs[i];
    for (uint64_t j = 0; s->heads != NULL && j < LH; j++)
      if (s->heads[j].n_owned > base && s->heads[j].n_owned - base > most) most = s->heads[j].n_owned - base;
  }
  rt->spares_max = most;
  if (rt->cfg.fetch_ratio_auto && most > 0) okv_cap_ctl_clamp(&rt->cap_ctl, most); /* at once, not at step_end */
}

/* ---- sequences: add / remove ---- */

okv_status_t okv_runtime_seq_capacity(const okv_runtime_t *rt, uint32_t n_tokens, uint32_t *out_n_seqs) {
  if (rt == NULL) return OKV_RT_INVALID("okv_runtime_seq_capacity: runtime is NULL");
  if (out_n_seqs == NULL) return OKV_RT_INVALID("okv_runtime_seq_capacity: out_n_seqs is NULL");
  if (n_tokens > rt->cfg.max_context_tokens)
    return OKV_RT_INVALID("okv_runtime_seq_capacity: n_tokens = %u exceeds max_context_tokens = %u", n_tokens,
                          rt->cfg.max_context_tokens);
  uint64_t LH = (uint64_t)rt->cfg.n_layers * rt->cfg.n_kv_heads;
  uint64_t n = 0;
  for (uint32_t i = 0; i < rt->cfg.max_seqs; i++) n += !rt->seqs[i].live;
  uint32_t nb = n_blocks_of(n_tokens);
  uint64_t slots = is_sparse_mode(rt) ? LH * rt->slots_min_per_head : LH * nb;
  /* The spares in the heads' free stacks: the background thread pops them while it selects, so let it finish
   * first (as okv_runtime_seq_add does); then an add made next finds exactly these. */
  if (has_spares(rt) && has_pipeline(rt)) okv_rt_jobs_drain((okv_runtime_t *)rt);
  uint64_t free_slots = rt->n_free_slots + (has_spares(rt) ? spares_free(rt) : 0u);
  if (slots > 0 && free_slots / slots < n) n = free_slots / slots;
  uint64_t ext = LH * ceil_div_u32(nb, rt->extent_blocks);
  if (ext > 0 && rt->host.n_free / ext < n) n = rt->host.n_free / ext;
  *out_n_seqs = (uint32_t)n;
  return OKV_OK;
}

/* Takes a free sequence entry for a context of `n_tokens` prefill tokens: checks the slot pool and the HOST
 * tier first (OUT_OF_MEMORY naming them, with `fn` as the message's prefix), then creates every head's map,
 * hands out its HOST extents (the prefill's) and, in the sparse modes, its K + 1 + C owned slots. The entry
 * is not live yet (okv_rt_seq_publish). On error nothing stays allocated. */
okv_status_t okv_rt_seq_reserve(okv_runtime_t *rt, uint32_t n_tokens, const char *fn, okv_seq_t **out_seq) {
  const okv_runtime_config_t *c = &rt->cfg;
  okv_seq_t *s = NULL;
  /* A queued job may still name a sequence removed during its step (it skips it by id): let the background
   * thread finish before a free record is reused (step_end does not wait for it). */
  if (has_pipeline(rt)) okv_rt_jobs_drain(rt);
  for (uint32_t i = 0; i < c->max_seqs; i++)
    if (!rt->seqs[i].live && rt->seqs[i].heads == NULL) {
      s = &rt->seqs[i];
      break;
    }
  if (s == NULL)
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "%s: max_seqs = %u sequences are alive", fn, c->max_seqs);
  uint32_t L = c->n_layers, H = c->n_kv_heads, E = rt->extent_blocks;
  uint32_t nb = n_blocks_of(n_tokens);
  uint32_t n_ext = ceil_div_u32(nb, E);
  uint64_t LH = (uint64_t)L * H;
  uint64_t slots_needed = is_sparse_mode(rt) ? LH * rt->slots_min_per_head : LH * nb;
  /* The self-tuning cap's spares give way to a new sequence (the pipeline is drained above): every free
   * spare returns to the pool, and the pool's rest is spread again evenly once the sequence has its slots. */
  if (has_spares(rt)) spares_reclaim(rt, UINT64_MAX);
  if (slots_needed > rt->n_free_slots) {
    uint64_t avail = rt->n_free_slots; /* free and free spare slots, before the spares go back to the heads */
    okv_rt_spares_spread(rt);
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY,
                           "%s: the slot pool (device tier) has %llu free slots%s, the sequence needs %llu", fn,
                           (unsigned long long)avail,
                           has_spares(rt) ? " (spare slots included; those of transfers in flight are not free)" : "",
                           (unsigned long long)slots_needed);
  }
  if (LH * n_ext > rt->host.n_free) {
    okv_rt_spares_spread(rt);
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY,
                           "%s: the host tier has %u free extents of %u blocks, the prefill needs %llu", fn,
                           rt->host.n_free, E, (unsigned long long)(LH * n_ext));
  }
  okv_status_t st = OKV_OK;
  memset(s, 0, sizeof *s);
  ALLOC_ARR(s->n_tokens, L);
  s->heads_mem = okv_calloc(&rt->alloc, LH * sizeof(okv_head_t) + 64u, 1); /* aligned below (okv_head_t) */
  if (s->heads_mem == NULL) {
    st = OKV_RT_HOST_OOM("s->heads");
    goto fail;
  }
  s->heads = (okv_head_t *)(((uintptr_t)s->heads_mem + 63u) & ~(uintptr_t)63u);
  uint32_t cap_ext = ceil_div_u32(rt->max_blocks, E);
  for (uint64_t i = 0; i < LH; i++) {
    okv_head_t *h = &s->heads[i];
    /* heads[] is layer-major ([n_layers][n_kv_heads]); the mirrors are [n_layers][max_seqs][n_kv_heads]. */
    h->hot = &rt->head_hot[((i / H) * rt->cfg.max_seqs + (uint64_t)(s - rt->seqs)) * H + i % H];
    memset(h->hot, 0, sizeof *h->hot);
    st = okv_block_map_init(&h->map, &rt->alloc, is_sparse_mode(rt) ? rt->slots_per_head : 0);
    if (st) goto fail;
    st = okv_block_map_reserve(&h->map, &rt->alloc, nb > 0 ? nb : 1);
    if (st) goto fail;
    okv_block_map_set_n_blocks(&h->map, nb);
    ALLOC_ARR(h->extents, cap_ext);
    h->cap_extents = cap_ext;
    h->hot->extents = h->extents;
    okv_host_store_alloc_extents(&rt->host, n_ext, UINT32_MAX, h->extents); /* counted above: cannot fail */
    for (h->n_extents = 0; h->n_extents < n_ext;) {
      h->n_extents++;
      okv_rt_head_note_extent(h);
    }
    if (is_sparse_mode(rt)) {
      ALLOC_ARR(h->owned, rt->slots_per_head);
      for (uint32_t j = 0; j < rt->slots_min_per_head; j++) h->owned[j] = rt->free_slots[--rt->n_free_slots];
      h->n_owned = rt->slots_min_per_head;
      okv_rt_head_note_owned(h);
      for (uint32_t j = 0; rt->dev_sel && j < h->n_owned; j++) rt->sel_slot_index[h->owned[j]] = j;
      /* Pushed in reverse so that pops hand out owned[0], owned[1], ... */
      for (uint32_t j = rt->slots_min_per_head; j > 0; j--) okv_block_map_push_free(&h->map, h->owned[j - 1u]);
    }
  }
  okv_rt_spares_spread(rt); /* this sequence's heads included: the pool's rest becomes spares */
  for (uint32_t l = 0; l < L; l++) s->n_tokens[l] = n_tokens;
  *out_seq = s;
  return OKV_OK;
fail:
  okv_rt_seq_release(rt, s); /* returns owned slots and the extents */
  return st;
}

/* Maps logical `block` of a head being admitted (step 0) to a slot — one of its owned slots in the sparse
 * modes, one from the pool in OKV_MODE_DENSE (counted by okv_rt_seq_reserve) — and writes the block's
 * HOST->DEVICE copy pair. The slot is unreadable until okv_rt_seq_load_initial. */
void okv_rt_seq_map_initial(okv_runtime_t *rt, okv_head_t *head, uint32_t block, okv_block_copy_t *out_pair) {
  uint32_t slot;
  if (is_sparse_mode(rt)) {
    okv_block_map_pop_free(&head->map, &slot);
  } else {
    slot = rt->free_slots[--rt->n_free_slots];
  }
  okv_block_map_map(&head->map, block, slot, 0);
  out_pair->src_offset = host_block_of(rt, head, block) * rt->block_bytes;
  out_pair->dst_offset = (uint64_t)slot * rt->block_bytes;
}

/* After `st` (what the caller enqueued on the compute stream before, e.g. the summaries): enqueues the
 * initial working set's copy, waits for the stream and marks every mapped block current (readable). Errors:
 * the first failure, annotated "<fn>: loading the prefill"; then nothing is readable. */
okv_status_t okv_rt_seq_load_initial(okv_runtime_t *rt, okv_seq_t *s, okv_status_t st, const okv_block_copy_t *pairs,
                                     uint64_t n_pairs, const char *fn) {
  if (st == OKV_OK) st = okv_hal_copy_blocks_async(rt->compute, rt->host.kv, rt->pool, rt->block_bytes, n_pairs, pairs);
  okv_status_t st2 = okv_hal_stream_synchronize(rt->compute);
  if (st == OKV_OK)
    st = st2;
  else
    okv_status_free(st2);
  if (st != OKV_OK) return okv_status_annotate(st, "%s: loading the prefill", fn);
  /* The initial working set is now current in its slots (readable). */
  uint64_t LH = (uint64_t)rt->cfg.n_layers * rt->cfg.n_kv_heads;
  uint32_t n_tokens = s->n_tokens[0], nb = n_blocks_of(n_tokens);
  for (uint64_t i = 0; i < LH; i++) {
    okv_block_map_t *m = &s->heads[i].map;
    for (uint32_t j = 0; j < m->n_resident; j++) {
      uint32_t b = m->resident[j];
      okv_block_map_set_current(m, b, b + 1u < nb ? OKV_BLOCK_TOKENS : n_tokens - b * OKV_BLOCK_TOKENS);
    }
  }
  return OKV_OK;
}

/* Makes a reserved and loaded sequence live under a new id. */
void okv_rt_seq_publish(okv_runtime_t *rt, okv_seq_t *s, uint32_t *out_seq_id) {
  s->id = rt->next_id++;
  s->live = true;
  *out_seq_id = s->id;
}

okv_status_t okv_runtime_seq_add(okv_runtime_t *rt, const okv_prefill_t *prefill, uint32_t *out_seq_id) {
  if (rt == NULL) return OKV_RT_INVALID("okv_runtime_seq_add: runtime is NULL");
  if (out_seq_id == NULL) return OKV_RT_INVALID("okv_runtime_seq_add: out_seq_id is NULL");
  const okv_runtime_config_t *c = &rt->cfg;
  uint32_t n_tokens = prefill ? prefill->n_tokens : 0;
  if (n_tokens > c->max_context_tokens)
    return OKV_RT_INVALID("okv_runtime_seq_add: prefill n_tokens = %u exceeds max_context_tokens = %u", n_tokens,
                          c->max_context_tokens);
  if (n_tokens > 0 && (prefill->k == NULL || prefill->v == NULL))
    return OKV_RT_INVALID("okv_runtime_seq_add: prefill k or v is NULL with n_tokens = %u", n_tokens);
  okv_seq_t *s = NULL;
  OKV_RETURN_IF_ERROR(okv_rt_seq_reserve(rt, n_tokens, "okv_runtime_seq_add", &s));
  uint32_t H = c->n_kv_heads;
  uint64_t LH = (uint64_t)c->n_layers * H;
  uint32_t nb = n_blocks_of(n_tokens);
  okv_status_t st = OKV_OK;
  uint64_t *blk_index = NULL, *sum_index = NULL;
  uint8_t *valid = NULL;
  okv_block_copy_t *pairs = NULL;
  uint32_t init_first = 0; /* first logical block of the initial working set */
  bool sparse_now = is_sparse_mode(rt) && nb > c->dense_threshold_blocks;
  if (sparse_now && nb > c->budget_blocks + 1u) init_first = nb - c->budget_blocks - 1u;
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
      for (uint32_t b = 0; b < nb; b++) { /* a block at a time: its tokens' rows are H * hd floats apart */
        uint32_t t0 = b * OKV_BLOCK_TOKENS, n_tok = n_tokens - t0 < OKV_BLOCK_TOKENS ? n_tokens - t0 : OKV_BLOCK_TOKENS;
        size_t off = (((size_t)l * n_tokens + t0) * H + h) * hd;
        okv_host_store_write_block(&rt->host, host_block_of(rt, head, b), n_tok, prefill->k + off, prefill->v + off,
                                   (size_t)H * hd);
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
        if (b >= init_first) okv_rt_seq_map_initial(rt, head, b, &pairs[p++]);
      }
    }
    /* Summaries in chunks (the kernel takes a uint32 count). */
    for (uint64_t off = 0; off < n_blk && st == OKV_OK; off += (1u << 30)) {
      uint64_t n = n_blk - off < (1u << 30) ? n_blk - off : (1u << 30);
      okv_summary_desc_t sd = {.head_dim = hd,
                               .kv_dtype = c->kv_dtype,
                               .kv = rt->host.kv,
                               .summaries = rt->summaries,
                               .n_blocks = (uint32_t)n,
                               .block_index = blk_index + off,
                               .valid = valid + off,
                               .summary_index = sum_index + off,
                               .summary_dtype = c->summary_dtype};
      st = okv_hal_summarize_blocks_async(rt->compute, &sd);
    }
    for (uint64_t i = 0; i < LH && st == OKV_OK; i++) st = okv_rt_groups_rebuild_head(rt, rt->compute, &s->heads[i]);
    st = okv_rt_seq_load_initial(rt, s, st, pairs, p, "okv_runtime_seq_add");
    if (st != OKV_OK) goto fail;
  }
  okv_rt_free(&rt->alloc, blk_index);
  okv_rt_free(&rt->alloc, sum_index);
  okv_rt_free(&rt->alloc, valid);
  okv_rt_free(&rt->alloc, pairs);
  pairs = NULL;
  blk_index = sum_index = NULL;
  valid = NULL;
  if (rt->dev_sel) { /* the slot tables start as the maps (device_select.c) */
    st = okv_rt_dsel_write(rt, s, 0, c->n_layers);
    if (st != OKV_OK) {
      st = okv_status_annotate(st, "okv_runtime_seq_add: writing the slot tables");
      goto fail;
    }
  }
  okv_rt_seq_publish(rt, s, out_seq_id);
  return OKV_OK;
fail:
  okv_rt_free(&rt->alloc, blk_index);
  okv_rt_free(&rt->alloc, sum_index);
  okv_rt_free(&rt->alloc, valid);
  okv_rt_free(&rt->alloc, pairs);
  okv_rt_seq_release(rt, s); /* returns owned (sparse) or mapped (dense) slots and the extents */
  okv_rt_spares_spread(rt);
  return st;
}

okv_status_t okv_runtime_seq_remove(okv_runtime_t *rt, uint32_t seq_id) {
  if (rt == NULL) return OKV_RT_INVALID("okv_runtime_seq_remove: runtime is NULL");
  okv_seq_t *s = okv_rt_seq_find(rt, seq_id);
  if (s == NULL) return okv_status_make(OKV_STATUS_NOT_FOUND, "okv_runtime_seq_remove: no sequence %u", seq_id);
  if (has_pipeline(rt)) {
    /* Drain: no job may read the sequence's maps, and the copy stream must have
     * passed every pending transfer into its slots, before they are reused. */
    okv_rt_jobs_drain(rt);
    for (uint32_t l = 0; l < rt->cfg.n_layers; l++) {
      okv_layer_job_t *job = &rt->jobs[l];
      bool uses = false;
      for (uint32_t i = 0; i < job->n_plan && !uses && !rt->dev_sel; i++)
        uses = job->plan[i].seq_id == seq_id && &rt->seqs[job->plan[i].seq_index] == s;
      for (uint32_t i = 0; i < job->n_seqs && job->n_plan > 0 && !uses && rt->dev_sel; i++) /* device selection */
        uses = job->seq_moved[i] > 0 && job->seq_id[i] == seq_id && &rt->seqs[job->seq_index[i]] == s;
      if (uses) okv_rt_job_wait_event(rt, l);
    }
  }
  okv_rt_seq_release(rt, s);
  okv_rt_spares_spread(rt); /* its slots become the other heads' spares (the pipeline is drained above) */
  return OKV_OK;
}

okv_status_t okv_runtime_seq_length(const okv_runtime_t *rt, uint32_t seq_id, uint32_t *out_n_tokens) {
  if (rt == NULL) return OKV_RT_INVALID("okv_runtime_seq_length: runtime is NULL");
  if (out_n_tokens == NULL) return OKV_RT_INVALID("okv_runtime_seq_length: out_n_tokens is NULL");
  const okv_seq_t *s = okv_rt_seq_find(rt, seq_id);
  if (s == NULL) return okv_status_make(OKV_STATUS_NOT_FOUND, "okv_runtime_seq_length: no sequence %u", seq_id);
  *out_n_tokens = s->n_tokens[rt->cfg.n_layers - 1u];
  return OKV_OK;
}

okv_status_t okv_runtime_seq_resident(const okv_runtime_t *rt, uint32_t seq_id, uint32_t layer, uint32_t kv_head,
                                      uint32_t *out_blocks, uint32_t capacity, uint32_t *out_count) {
  if (rt == NULL) return OKV_RT_INVALID("okv_runtime_seq_resident: runtime is NULL");
  if (out_count == NULL) return OKV_RT_INVALID("okv_runtime_seq_resident: out_count is NULL");
  if (out_blocks == NULL && capacity > 0) return OKV_RT_INVALID("okv_runtime_seq_resident: out_blocks is NULL");
  if (layer >= rt->cfg.n_layers)
    return OKV_RT_INVALID("okv_runtime_seq_resident: layer = %u must be < n_layers = %u", layer, rt->cfg.n_layers);
  if (kv_head >= rt->cfg.n_kv_heads)
    return OKV_RT_INVALID("okv_runtime_seq_resident: kv_head = %u must be < n_kv_heads = %u", kv_head,
                          rt->cfg.n_kv_heads);
  const okv_seq_t *s = okv_rt_seq_find(rt, seq_id);
  if (s == NULL) return okv_status_make(OKV_STATUS_NOT_FOUND, "okv_runtime_seq_resident: no sequence %u", seq_id);
  /* The worker may be selecting this layer: wait until it is done (read-only otherwise). */
  okv_rt_job_wait_selected((okv_runtime_t *)rt, layer);
  if (rt->dev_sel) /* the maps lag the tables: rebuilt from them first */
    OKV_RETURN_IF_ERROR(okv_rt_dsel_sync_or_fail((okv_runtime_t *)rt, (okv_seq_t *)s, layer, false));
  const okv_block_map_t *m = &seq_head(rt, s, layer, kv_head)->map;
  uint32_t n = 0;
  for (uint32_t b = 0; b < m->n_blocks; b++)
    if (okv_block_map_tokens(m, b) > 0) { /* readable blocks only */
      if (n < capacity) out_blocks[n] = b;
      n++;
    }
  *out_count = n;
  return OKV_OK;
}

const okv_block_map_t *okv_runtime_debug_map(const okv_runtime_t *rt, uint32_t seq_id, uint32_t layer,
                                             uint32_t kv_head) {
  if (rt && has_pipeline(rt)) okv_rt_jobs_drain((okv_runtime_t *)rt); /* the worker may be selecting the layer */
  const okv_seq_t *s = rt ? okv_rt_seq_find(rt, seq_id) : NULL;
  if (s == NULL || layer >= rt->cfg.n_layers || kv_head >= rt->cfg.n_kv_heads) return NULL;
  if (rt->dev_sel) okv_rt_dsel_sync((okv_runtime_t *)rt, (okv_seq_t *)s, layer); /* the maps lag the tables */
  return &seq_head(rt, s, layer, kv_head)->map;
}

uint32_t okv_runtime_debug_host_block(const okv_runtime_t *rt, uint32_t seq_id, uint32_t layer, uint32_t kv_head,
                                      uint32_t block) {
  const okv_seq_t *s = rt ? okv_rt_seq_find(rt, seq_id) : NULL;
  if (s == NULL || layer >= rt->cfg.n_layers || kv_head >= rt->cfg.n_kv_heads) return UINT32_MAX;
  const okv_head_t *h = seq_head(rt, s, layer, kv_head);
  if (block >= h->map.n_blocks) return UINT32_MAX;
  return (uint32_t)host_block_of(rt, h, block);
}

uint64_t okv_runtime_debug_free_slots(const okv_runtime_t *rt) { return rt ? rt->n_free_slots : 0; }
