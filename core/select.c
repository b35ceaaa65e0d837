/* Delta selection with capped eviction (see core/select.h). */
#include "select.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Victim candidates are 64-bit LRU keys, (last-selected step << 32) | logical
 * block: least recently selected first, ties by lower block, is the order of
 * the keys, so ranking a candidate is one compare and its block is the low word. */
static inline uint64_t lru_key(uint32_t last, uint32_t block) { return (uint64_t)last << 32 | block; }

/* Moves the `want` smallest keys of v[0..n) to v[0..want), in ascending order.
 * One pass keeping a sorted prefix: a key not below the largest kept one costs
 * one comparison, so this is O(n) for the small caps C the method uses. */
static void select_lru(uint64_t *v, uint32_t n, uint32_t want) {
  if (want > n) want = n;
  if (want == 0) return;
  uint32_t m = 0; /* v[0..m) sorted, v[m..j) rejected */
  for (uint32_t j = 0; j < n; j++) {
    uint64_t x = v[j];
    if (m == want) {
      if (x >= v[m - 1]) continue;
      v[j] = v[--m]; /* the newest kept candidate is rejected in x's place */
    }
    uint32_t i = m; /* while m < want, j == m: nothing is rejected yet */
    while (i > 0 && x < v[i - 1]) {
      v[i] = v[i - 1];
      i--;
    }
    v[i] = x;
    m++;
  }
}

static inline void clear_pred(okv_block_map_t *map, const uint32_t *predicted, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) map->pred_bits[predicted[i] >> 6] = 0;
}

okv_status_t okv_select_head(okv_block_map_t *map, const okv_select_params_t *params, const uint32_t *predicted,
                             uint32_t n_predicted, uint64_t *scratch, uint32_t *out_admitted, uint32_t *out_victims,
                             okv_select_result_t *out_result) {
  okv_select_result_t r = {0, 0, 0, 0, 0};
  /* The map's arrays in locals: the bitmap stores below cannot then alias them (one load each, not per entry). */
  uint64_t *restrict pred_bits = map->pred_bits;
  const uint64_t *restrict res_bits = map->res_bits;
  const uint32_t n_blocks = map->n_blocks, active = params->active_block;
  /* 1. Predicted set as a bitmap; hits counted from the residency bitmap. */
  uint32_t hits = 0;
  for (uint32_t i = 0; i < n_predicted; i++) {
    uint32_t b = predicted[i];
    if (b >= n_blocks || b == active) {
      clear_pred(map, predicted, i);
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "select: predicted[%u] = %u is out of range (n_blocks %u) or the active block", i, b,
                             n_blocks);
    }
    pred_bits[b >> 6] |= 1ull << (b & 63u);
    hits += (uint32_t)(res_bits[b >> 6] >> (b & 63u)) & 1u;
  }
  r.n_hits = hits;
  r.n_misses = n_predicted - r.n_hits;
  /* 2. Victim candidates: resident, not predicted, not active, as LRU keys. A
   * candidate that the previous selection predicted leaves the prediction now:
   * its exact last-selected step (prev_step) is folded into res_last here, so
   * that every candidate's key is exact; hits need none (the new prediction
   * becomes pred_prev at `step`, step 5). One sequential pass over the
   * resident list, no per-block lookups and no branch on the bits: every entry
   * is written to scratch and only candidates advance the count. */
  const uint32_t *restrict res = map->resident;
  uint32_t *restrict res_last = map->res_last;
  const uint64_t *restrict pred_prev = map->pred_prev;
  const uint32_t n_res = map->n_resident, prev_step = map->has_prev ? map->prev_step : 0u;
  uint32_t n_cand = 0, active_resident = 0;
  for (uint32_t i = 0; i < n_res; i++) {
    uint32_t b = res[i], is_active = b == active;
    uint32_t in_pred = (uint32_t)(pred_bits[b >> 6] >> (b & 63u)) & 1u;
    uint32_t was_pred = (uint32_t)(pred_prev[b >> 6] >> (b & 63u)) & 1u; /* all zero before a first selection */
    uint32_t cand = (in_pred | is_active) ^ 1u, last = res_last[i];
    if (cand & was_pred) last = last > prev_step ? last : prev_step;
    res_last[i] = last;
    active_resident |= is_active;
    scratch[n_cand] = lru_key(last, b);
    n_cand += cand;
  }
  uint32_t held = n_res - active_resident;
  uint32_t room = held < params->budget_blocks ? params->budget_blocks - held : 0;
  /* Victims needed: admissions beyond the free room, at most the cap. */
  uint32_t n_admit_max = r.n_misses < params->cap_blocks ? r.n_misses : params->cap_blocks;
  select_lru(scratch, n_cand, n_admit_max > room ? n_admit_max - room : 0);
  /* 3. In predicted (score) order, the first misses are admitted. */
  uint32_t next_victim = 0;
  for (uint32_t i = 0; i < n_predicted && r.n_admitted < n_admit_max; i++) {
    uint32_t b = predicted[i];
    if ((res_bits[b >> 6] >> (b & 63u)) & 1u) continue;
    uint32_t victim;
    if (room > 0) {
      room--;
      victim = OKV_NO_BLOCK;
    } else if (next_victim < n_cand) {
      victim = (uint32_t)scratch[next_victim++];
      r.n_victims++;
    } else {
      break; /* no place: cannot happen with n_predicted <= budget_blocks */
    }
    out_admitted[r.n_admitted] = b;
    out_victims[r.n_admitted] = victim;
    r.n_admitted++;
  }
  r.n_deferred = r.n_misses - r.n_admitted;
  /* 4. The prediction becomes pred_prev, selected at `step`; the old one is
   * cleared (pred_bits is all zero between calls). */
  uint64_t *old = map->pred_prev;
  map->pred_prev = map->pred_bits;
  map->pred_bits = old;
  if (map->has_prev) memset(old, 0, ((size_t)map->n_blocks / 64u + 1u) * sizeof(uint64_t));
  map->prev_step = params->step;
  map->has_prev = true;
  *out_result = r;
  return OKV_OK;
}
