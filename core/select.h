/* Internal: delta selection with capped eviction for one (sequence, layer, KV
 * head). Paper arXiv 2608.08097, "Select": hits = predicted ∩ resident (their
 * last-selected step is refreshed, no traffic); misses = predicted \ resident
 * in predicted (highest score first) order; victims = resident \ predicted,
 * least recently selected first (ties: lower logical block), never the active
 * block; at most `cap_blocks` misses are admitted, each paired with a victim,
 * or with no victim (OKV_NO_BLOCK) while the head holds fewer than
 * `budget_blocks` blocks besides the active block; the rest are deferred.
 *
 * Pure: reads and updates only the map's last-selected steps and its scratch bitmap
 * (it maps/unmaps nothing: the caller commits the plan). Not thread-safe per map. */
#ifndef OASISKV_CORE_SELECT_H
#define OASISKV_CORE_SELECT_H

#include "block_map.h"

typedef struct okv_select_params_t {
  uint32_t budget_blocks; /* K: resident blocks allowed besides the active block */
  uint32_t cap_blocks;    /* C: admissions allowed this step (UINT32_MAX = no cap) */
  uint32_t step;          /* step stamped on hits (and on admitted blocks when committed) */
  uint32_t active_block;  /* never a victim and never predicted; OKV_NO_BLOCK if none */
} okv_select_params_t;

typedef struct okv_select_result_t {
  uint32_t n_hits, n_misses, n_admitted, n_deferred, n_victims;
} okv_select_result_t;

/* Selects for one head. `predicted` [n_predicted] (distinct blocks < n_blocks,
 * none the active block) in descending score order. Writes the admitted misses
 * to out_admitted[i] and their victims (OKV_NO_BLOCK: a free place) to
 * out_victims[i] for i < result.n_admitted; both arrays need
 * min(n_predicted, cap_blocks) entries. `scratch` needs map->n_resident entries (its LRU keys).
 * Errors: INVALID_ARGUMENT (a predicted block out of range or the active block). */
okv_status_t okv_select_head(okv_block_map_t *map, const okv_select_params_t *params, const uint32_t *predicted,
                             uint32_t n_predicted, uint64_t *scratch, uint32_t *out_admitted, uint32_t *out_victims,
                             okv_select_result_t *out_result);

/* Prefetches the arrays okv_select_head reads of `map` (a hint; no effect on results). */
static inline void okv_select_prefetch(const okv_block_map_t *map) {
  uint32_t n = map->n_resident;
  for (uint32_t i = 0; i < n; i += 16) {
    __builtin_prefetch(map->resident + i);
    __builtin_prefetch(map->res_last + i);
  }
  uint32_t w = map->n_blocks / 64u + 1u;
  for (uint32_t i = 0; i < w; i += 8) {
    __builtin_prefetch(map->res_bits + i);
    __builtin_prefetch(map->pred_prev + i);
    __builtin_prefetch(map->pred_bits + i);
  }
}

#endif
