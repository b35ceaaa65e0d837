/* Internal: the head-wise logical-to-logical map of one (sequence, layer, KV
 * head) — which logical blocks of the full KV are resident in which DEVICE
 * slots — with the last-selected step of every resident block (the LRU key of
 * capped eviction) and the head's own stack of free slots.
 * Paper arXiv 2608.08097, "Memory": per-KV-head logical-to-logical map.
 *
 * Pure bookkeeping: no device, no locking. Not thread-safe; the runtime gives
 * each (layer) to one thread at a time. Every array is allocated with the
 * allocator passed to the call that grows it. */
#ifndef OASISKV_CORE_BLOCK_MAP_H
#define OASISKV_CORE_BLOCK_MAP_H

#include <stdbool.h>
#include <stdint.h>

#include "oasiskv/allocator.h"
#include "oasiskv/status.h"

#define OKV_NO_SLOT  UINT32_MAX
#define OKV_NO_BLOCK UINT32_MAX

typedef struct okv_block_loc_t {
  uint32_t slot; /* OKV_NO_SLOT: not resident */
  uint32_t pos;  /* index in resident[] */
} okv_block_loc_t;

typedef struct okv_block_map_t {
  /* What every step reads of a head (the append: its active block's entry and write currency) comes first, in
   * the struct's first line, so that a head costs one cold line there. */
  uint32_t n_blocks;   /* logical blocks of the head's context */
  uint32_t cap_blocks; /* capacity of the per-block arrays */
  bool needs_repair;   /* some block of the head has res_tok short of its tokens, or a stale summary */
  /* The active block's (n_blocks - 1) entry, mirrored from loc[] by every function here that changes it or
   * n_blocks (act_slot OKV_NO_SLOT and act_tok 0 when it is not resident). act_tok is the record of its
   * tokens current in its slot: res_tok[act_pos] may lag it, and is written back when the block stops being
   * the active one (okv_block_map_set_n_blocks); okv_block_map_res_tok reads either. The append reads and
   * writes this line only. */
  uint8_t act_tok;   /* the active block's current tokens (res_tok[act_pos] may lag) */
  uint32_t act_slot; /* loc[n_blocks - 1].slot */
  uint32_t act_pos;  /* loc[n_blocks - 1].pos (valid while act_slot is not OKV_NO_SLOT) */
  /* [cap] per block: its slot (OKV_NO_SLOT when not resident) and its index in resident[] (valid while
   * resident), side by side so that mapping or unmapping a block touches one line of this array, not two. */
  okv_block_loc_t *loc;
  /* Slot currency (the COPY_FAILED contract, docs/api.md "Faults"): a slot is read by attention only for the
   * leading tokens a successful write put there. */
  uint8_t *res_tok;       /* [cap] res_tok[i]: tokens of resident[i] current in its slot, 0 = unreadable (the active
                       block's may lag act_tok: read through okv_block_map_res_tok) */
  uint8_t *summary_stale; /* [cap] 1: the block's min/max summary missed a write; rebuild it from the HOST tier */
  /* Resident blocks, unordered, with their last-selected step (the LRU key of
   * capped eviction) side by side: selection scans these two short arrays
   * (K + 1 entries) instead of per-block arrays as long as the context. */
  uint32_t *resident; /* [cap] resident logical blocks */
  uint32_t *res_last; /* [cap] res_last[i]: step resident[i] was last selected */
  uint32_t n_resident;
  uint64_t *res_bits;  /* [cap / 64] residency bitmap */
  uint64_t *pred_bits; /* [cap / 64] scratch of selection (all zero between calls) */
  /* The previous selection's predicted set: a block in it was selected at
   * prev_step, so hits cost no per-block write (select.c folds the step into
   * res_last only for blocks that drop out of the prediction). The effective
   * last-selected step of resident[i] is okv_block_map_res_last(map, i). */
  uint64_t *pred_prev; /* [cap / 64] */
  uint32_t prev_step;
  bool has_prev;
  uint32_t *free_slots; /* stack of the head's free slots */
  uint32_t n_free, cap_free;
  uint32_t *res_slot; /* [cap] res_slot[i]: slot of resident[i] (attention reads it, res_tok and resident in order) */
} okv_block_map_t;

/* Zero-initialises `map` and reserves room for `cap_free_slots` free slots.
 * Errors: OUT_OF_MEMORY (host allocator). */
okv_status_t okv_block_map_init(okv_block_map_t *map, const okv_allocator_t *a, uint32_t cap_free_slots);
/* Frees every array (the map's slots are not returned anywhere). */
void okv_block_map_free(okv_block_map_t *map, const okv_allocator_t *a);
/* Grows the per-block arrays to hold at least `n_blocks` blocks (doubling);
 * does not change map->n_blocks. Errors: OUT_OF_MEMORY (host allocator). */
okv_status_t okv_block_map_reserve(okv_block_map_t *map, const okv_allocator_t *a, uint32_t n_blocks);
/* Grows the free-slot stack to hold `cap_free_slots` entries. Errors: OUT_OF_MEMORY. */
okv_status_t okv_block_map_reserve_free(okv_block_map_t *map, const okv_allocator_t *a, uint32_t cap_free_slots);

static inline bool okv_block_map_is_resident(const okv_block_map_t *map, uint32_t block) {
  return block < map->n_blocks && map->loc[block].slot != OKV_NO_SLOT;
}

static inline bool okv_block_map_bit(const uint64_t *bits, uint32_t block) {
  return (bits[block >> 6] >> (block & 63u)) & 1u;
}

/* Step resident[i] was last selected (res_last[i], or the previous
 * selection's step when that selection predicted it). */
static inline uint32_t okv_block_map_res_last(const okv_block_map_t *map, uint32_t i) {
  uint32_t t = map->res_last[i];
  if (map->has_prev && map->prev_step > t && okv_block_map_bit(map->pred_prev, map->resident[i])) t = map->prev_step;
  return t;
}
/* Step resident `block` was last selected. */
static inline uint32_t okv_block_map_last(const okv_block_map_t *map, uint32_t block) {
  return okv_block_map_res_last(map, map->loc[block].pos);
}
/* Marks resident `block` as selected at `step`. */
static inline void okv_block_map_touch(okv_block_map_t *map, uint32_t block, uint32_t step) {
  map->res_last[map->loc[block].pos] = step;
}

/* Maps non-resident `block` (< n_blocks) to `slot`, last selected at `step`.
 * The slot is unreadable (res_tok = 0) until okv_block_map_set_current
 * records a successful write: a slot's previous content is never reachable. */
void okv_block_map_map(okv_block_map_t *map, uint32_t block, uint32_t slot, uint32_t step);
/* Unmaps resident `block`; returns its slot. */
uint32_t okv_block_map_unmap(okv_block_map_t *map, uint32_t block);
/* Resident `victim` leaves and `block` (not resident) takes its place in resident[] (slot `slot`, last
 * selected at `step`, unreadable until a write completes): unmap + map without moving the list's last entry
 * (one loc[] line fewer per eviction, the commit's). Returns the victim's slot. */
uint32_t okv_block_map_replace(okv_block_map_t *map, uint32_t victim, uint32_t block, uint32_t slot, uint32_t step);

/* Records that the first `n_tokens` tokens of resident `block` are current in its slot (the active block's
 * through its mirror: no read of loc[]). */
static inline void okv_block_map_set_current(okv_block_map_t *map, uint32_t block, uint32_t n_tokens) {
  if (block + 1u == map->n_blocks && map->act_slot != OKV_NO_SLOT) {
    map->act_tok = (uint8_t)n_tokens; /* res_tok[act_pos] follows when the block stops being the active one */
    return;
  }
  map->res_tok[map->loc[block].pos] = (uint8_t)n_tokens;
}
/* res_tok[i] of resident entry i < n_resident: the active block's from its mirror. */
static inline uint32_t okv_block_map_res_tok(const okv_block_map_t *map, uint32_t i) {
  return map->act_slot != OKV_NO_SLOT && i == map->act_pos ? map->act_tok : map->res_tok[i];
}
/* Sets n_blocks (the caller reserved that many) and the active block's mirror from the arrays. */
void okv_block_map_set_n_blocks(okv_block_map_t *map, uint32_t n_blocks);
/* Slot of the active block (n_blocks - 1) from the mirror; OKV_NO_SLOT when not resident. */
static inline uint32_t okv_block_map_active_slot(const okv_block_map_t *map) { return map->act_slot; }
/* Tokens of the active block current in its slot, from the mirror (okv_block_map_tokens of n_blocks - 1). */
static inline uint32_t okv_block_map_active_tokens(const okv_block_map_t *map) { return map->act_tok; }
/* Tokens of `block` current in its slot; 0 when not resident or unreadable. */
static inline uint32_t okv_block_map_tokens(const okv_block_map_t *map, uint32_t block) {
  return block < map->n_blocks && map->loc[block].slot != OKV_NO_SLOT ? okv_block_map_res_tok(map, map->loc[block].pos)
                                                                      : 0u;
}

/* Free-slot stack of the head (capacity reserved beforehand). */
void okv_block_map_push_free(okv_block_map_t *map, uint32_t slot);
bool okv_block_map_pop_free(okv_block_map_t *map, uint32_t *out_slot);

/* The least recently selected resident block other than `except` (ties: lower
 * logical block), or OKV_NO_BLOCK when there is none. */
uint32_t okv_block_map_lru(const okv_block_map_t *map, uint32_t except);

/* Checks the invariants: resident[] and loc[] agree, the map is injective
 * (no slot used twice, no slot both mapped and free). For tests.
 * Errors: INTERNAL naming the broken invariant. */
okv_status_t okv_block_map_check(const okv_block_map_t *map);

#endif
