/* Delta selection with capped eviction (see core/select.h). */
#include "select.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Victim candidates are positions i into map->resident[] / map->res_last[]
 * (both contiguous, K + 1 long), so ranking them reads no per-block array. */
static inline bool lru_before(const okv_block_map_t *map, uint32_t i, uint32_t j) {
  uint32_t ti = map->res_last[i], tj = map->res_last[j];
  return ti < tj || (ti == tj && map->resident[i] < map->resident[j]);
}

/* Moves the `want` least recently selected candidates of v[0..n) (ties: lower
 * block first) to v[0..want), in that order. One pass keeping a sorted
 * prefix: a candidate that is not older than the newest kept one costs one
 * comparison, so this is O(n) for the small caps C the method uses. */
static void select_lru(const okv_block_map_t *map, uint32_t *v, uint32_t n, uint32_t want) {
  if (want > n) want = n;
  if (want == 0) return;
  uint32_t m = 0; /* v[0..m) sorted, v[m..j) rejected */
  for (uint32_t j = 0; j < n; j++) {
    uint32_t x = v[j];
    if (m == want) {
      if (!lru_before(map, x, v[m - 1])) continue;
      v[j] = v[--m]; /* the newest kept candidate is rejected in x's place */
    }
    uint32_t i = m; /* while m < want, j == m: nothing is rejected yet */
    while (i > 0 && lru_before(map, x, v[i - 1])) {
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
                             uint32_t n_predicted, uint32_t *scratch, uint32_t *out_admitted, uint32_t *out_victims,
                             okv_select_result_t *out_result) {
  okv_select_result_t r = {0, 0, 0, 0, 0};
  /* 1. Predicted set as a bitmap; hits counted from the residency bitmap. */
  for (uint32_t i = 0; i < n_predicted; i++) {
    uint32_t b = predicted[i];
    if (b >= map->n_blocks || b == params->active_block) {
      clear_pred(map, predicted, i);
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "select: predicted[%u] = %u is out of range (n_blocks %u) or the active block", i, b,
                             map->n_blocks);
    }
    map->pred_bits[b >> 6] |= 1ull << (b & 63u);
    r.n_hits += okv_block_map_bit(map->res_bits, b);
  }
  r.n_misses = n_predicted - r.n_hits;
  /* 2. Victim candidates: resident, not predicted, not active (positions, LRU
   * order). A candidate that the previous selection predicted leaves the
   * prediction now: its exact last-selected step (prev_step) is folded into
   * res_last here, so that every candidate's key is exact; hits need none (the
   * new prediction becomes pred_prev at `step`, step 5). One sequential pass
   * over the resident list, no per-block lookups. */
  uint32_t n_cand = 0;
  bool active_resident = false;
  const uint32_t *res = map->resident;
  for (uint32_t i = 0; i < map->n_resident; i++) {
    uint32_t b = res[i];
    if (b == params->active_block) {
      active_resident = true;
      continue;
    }
    if (okv_block_map_bit(map->pred_bits, b)) continue;
    if (map->has_prev && okv_block_map_bit(map->pred_prev, b) && map->res_last[i] < map->prev_step)
      map->res_last[i] = map->prev_step;
    scratch[n_cand++] = i;
  }
  uint32_t held = map->n_resident - (active_resident ? 1u : 0u);
  uint32_t room = held < params->budget_blocks ? params->budget_blocks - held : 0;
  /* Victims needed: admissions beyond the free room, at most the cap. */
  uint32_t n_admit_max = r.n_misses < params->cap_blocks ? r.n_misses : params->cap_blocks;
  select_lru(map, scratch, n_cand, n_admit_max > room ? n_admit_max - room : 0);
  /* 3. In predicted (score) order, the first misses are admitted. */
  uint32_t next_victim = 0;
  for (uint32_t i = 0; i < n_predicted && r.n_admitted < n_admit_max; i++) {
    uint32_t b = predicted[i];
    if (okv_block_map_bit(map->res_bits, b)) continue;
    uint32_t victim;
    if (room > 0) {
      room--;
      victim = OKV_NO_BLOCK;
    } else if (next_victim < n_cand) {
      victim = map->resident[scratch[next_victim++]];
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
