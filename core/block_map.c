/* Head-wise logical-to-logical map (see core/block_map.h). */
#include "block_map.h"

#include <string.h>

okv_status_t okv_block_map_init(okv_block_map_t *map, const okv_allocator_t *a, uint32_t cap_free_slots) {
  memset(map, 0, sizeof *map);
  map->act_slot = OKV_NO_SLOT;
  return okv_block_map_reserve_free(map, a, cap_free_slots);
}

/* The mirror of the active block when `block` (resident at `pos` in `slot`, or not: OKV_NO_SLOT) is it. */
static inline void note_active(okv_block_map_t *map, uint32_t block, uint32_t slot, uint32_t pos, uint8_t tok) {
  if (block + 1u != map->n_blocks) return;
  map->act_slot = slot;
  map->act_pos = pos;
  map->act_tok = slot == OKV_NO_SLOT ? 0u : tok;
}

void okv_block_map_set_n_blocks(okv_block_map_t *map, uint32_t n_blocks) {
  if (map->act_slot != OKV_NO_SLOT) map->res_tok[map->act_pos] = map->act_tok; /* written back (act_tok) */
  map->n_blocks = n_blocks;
  map->act_slot = OKV_NO_SLOT;
  map->act_pos = 0;
  map->act_tok = 0;
  if (n_blocks == 0) return;
  const okv_block_loc_t l = map->loc[n_blocks - 1u];
  note_active(map, n_blocks - 1u, l.slot, l.pos, l.slot == OKV_NO_SLOT ? 0u : map->res_tok[l.pos]);
}

void okv_block_map_free(okv_block_map_t *map, const okv_allocator_t *a) {
  void *arrs[] = {map->loc,      map->res_last,   map->res_bits, map->pred_bits, map->pred_prev,
                  map->resident, map->free_slots, map->res_slot, map->res_tok,   map->summary_stale};
  for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++)
    if (arrs[i] != NULL) okv_free(a, arrs[i]);
  memset(map, 0, sizeof *map);
  map->act_slot = OKV_NO_SLOT;
}

static okv_status_t grow_u32(const okv_allocator_t *a, uint32_t **arr, uint32_t old_n, uint32_t new_n, uint32_t fill) {
  uint32_t *p = okv_realloc(a, *arr, (size_t)new_n * sizeof(uint32_t));
  if (p == NULL)
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "block map: host allocator failed for %u entries", new_n);
  for (uint32_t i = old_n; i < new_n; i++) p[i] = fill;
  *arr = p;
  return OKV_OK;
}

static okv_status_t grow_loc(const okv_allocator_t *a, okv_block_loc_t **arr, uint32_t old_n, uint32_t new_n) {
  okv_block_loc_t *p = okv_realloc(a, *arr, (size_t)new_n * sizeof(okv_block_loc_t));
  if (p == NULL)
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "block map: host allocator failed for %u entries", new_n);
  for (uint32_t i = old_n; i < new_n; i++) p[i] = (okv_block_loc_t){OKV_NO_SLOT, 0};
  *arr = p;
  return OKV_OK;
}

static okv_status_t grow_u64(const okv_allocator_t *a, uint64_t **arr, uint32_t old_n, uint32_t new_n) {
  if (*arr == NULL) old_n = 0;
  uint64_t *p = okv_realloc(a, *arr, (size_t)new_n * sizeof(uint64_t));
  if (p == NULL)
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "block map: host allocator failed for %u words", new_n);
  for (uint32_t i = old_n; i < new_n; i++) p[i] = 0;
  *arr = p;
  return OKV_OK;
}

static okv_status_t grow_u8(const okv_allocator_t *a, uint8_t **arr, uint32_t old_n, uint32_t new_n) {
  uint8_t *p = okv_realloc(a, *arr, (size_t)new_n);
  if (p == NULL)
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "block map: host allocator failed for %u entries", new_n);
  memset(p + old_n, 0, (size_t)(new_n - old_n));
  *arr = p;
  return OKV_OK;
}

okv_status_t okv_block_map_reserve(okv_block_map_t *map, const okv_allocator_t *a, uint32_t n_blocks) {
  if (n_blocks <= map->cap_blocks) return OKV_OK;
  uint32_t cap = map->cap_blocks ? map->cap_blocks : 16u;
  while (cap < n_blocks) cap = cap > UINT32_MAX / 2 ? n_blocks : cap * 2u;
  /* Each array is grown separately; a failure leaves the larger arrays in
   * place with cap_blocks unchanged, which is still consistent. */
  OKV_RETURN_IF_ERROR(grow_loc(a, &map->loc, map->cap_blocks, cap));
  OKV_RETURN_IF_ERROR(grow_u32(a, &map->res_last, map->cap_blocks, cap, 0));
  OKV_RETURN_IF_ERROR(grow_u64(a, &map->res_bits, map->cap_blocks / 64u + 1u, cap / 64u + 1u));
  OKV_RETURN_IF_ERROR(grow_u64(a, &map->pred_bits, map->cap_blocks / 64u + 1u, cap / 64u + 1u));
  OKV_RETURN_IF_ERROR(grow_u64(a, &map->pred_prev, map->cap_blocks / 64u + 1u, cap / 64u + 1u));
  OKV_RETURN_IF_ERROR(grow_u32(a, &map->resident, map->cap_blocks, cap, 0));
  OKV_RETURN_IF_ERROR(grow_u32(a, &map->res_slot, map->cap_blocks, cap, 0));
  OKV_RETURN_IF_ERROR(grow_u8(a, &map->res_tok, map->cap_blocks, cap));
  OKV_RETURN_IF_ERROR(grow_u8(a, &map->summary_stale, map->cap_blocks, cap));
  map->cap_blocks = cap;
  return OKV_OK;
}

okv_status_t okv_block_map_reserve_free(okv_block_map_t *map, const okv_allocator_t *a, uint32_t cap_free_slots) {
  if (cap_free_slots <= map->cap_free) return OKV_OK;
  OKV_RETURN_IF_ERROR(grow_u32(a, &map->free_slots, map->cap_free, cap_free_slots, OKV_NO_SLOT));
  map->cap_free = cap_free_slots;
  return OKV_OK;
}

void okv_block_map_map(okv_block_map_t *map, uint32_t block, uint32_t slot, uint32_t step) {
  map->loc[block].slot = slot;
  map->loc[block].pos = map->n_resident;
  map->res_last[map->n_resident] = step;
  map->res_slot[map->n_resident] = slot;
  map->res_tok[map->n_resident] = 0; /* unreadable until a write completes */
  note_active(map, block, slot, map->n_resident, 0);
  map->resident[map->n_resident++] = block;
  map->res_bits[block >> 6] |= 1ull << (block & 63u);
}

uint32_t okv_block_map_unmap(okv_block_map_t *map, uint32_t block) {
  uint32_t slot = map->loc[block].slot;
  uint32_t pos = map->loc[block].pos;
  uint32_t n = --map->n_resident;
  uint32_t last = map->resident[n];
  map->resident[pos] = last;
  map->res_last[pos] = map->res_last[n];
  map->res_slot[pos] = map->res_slot[n];
  map->res_tok[pos] = (uint8_t)okv_block_map_res_tok(map, n); /* the active block's from its mirror */
  map->loc[last].pos = pos;
  map->loc[block].slot = OKV_NO_SLOT;
  map->res_bits[block >> 6] &= ~(1ull << (block & 63u));
  if (last + 1u == map->n_blocks && last != block) map->act_pos = pos; /* the active block moved in resident[] */
  note_active(map, block, OKV_NO_SLOT, 0, 0);
  return slot;
}

uint32_t okv_block_map_replace(okv_block_map_t *map, uint32_t victim, uint32_t block, uint32_t slot, uint32_t step) {
  uint32_t old = map->loc[victim].slot, pos = map->loc[victim].pos;
  map->loc[victim].slot = OKV_NO_SLOT;
  map->res_bits[victim >> 6] &= ~(1ull << (victim & 63u));
  map->loc[block].slot = slot;
  map->loc[block].pos = pos;
  map->resident[pos] = block;
  map->res_last[pos] = step;
  map->res_slot[pos] = slot;
  map->res_tok[pos] = 0; /* unreadable until a write completes */
  map->res_bits[block >> 6] |= 1ull << (block & 63u);
  note_active(map, victim, OKV_NO_SLOT, 0, 0);
  note_active(map, block, slot, pos, 0);
  return old;
}

void okv_block_map_push_free(okv_block_map_t *map, uint32_t slot) {
  if (map->n_free < map->cap_free) map->free_slots[map->n_free++] = slot; /* full: a caller's bug, not a write past */
}

bool okv_block_map_pop_free(okv_block_map_t *map, uint32_t *out_slot) {
  if (map->n_free == 0) return false;
  *out_slot = map->free_slots[--map->n_free];
  return true;
}

uint32_t okv_block_map_lru(const okv_block_map_t *map, uint32_t except) {
  uint32_t best = OKV_NO_BLOCK, best_last = 0;
  for (uint32_t i = 0; i < map->n_resident; i++) {
    uint32_t b = map->resident[i], t = okv_block_map_res_last(map, i);
    if (b == except) continue;
    if (best == OKV_NO_BLOCK || t < best_last || (t == best_last && b < best)) {
      best = b;
      best_last = t;
    }
  }
  return best;
}

okv_status_t okv_block_map_check(const okv_block_map_t *map) {
  uint32_t n_mapped = 0;
  for (uint32_t b = 0; b < map->n_blocks; b++) {
    if (map->loc[b].slot == OKV_NO_SLOT) continue;
    n_mapped++;
    if (map->loc[b].pos >= map->n_resident || map->resident[map->loc[b].pos] != b ||
        map->res_slot[map->loc[b].pos] != map->loc[b].slot)
      return okv_status_make(OKV_STATUS_INTERNAL, "block map: block %u is mapped but not listed as resident", b);
  }
  if (map->n_blocks > 0) { /* the active block's mirror */
    const okv_block_loc_t l = map->loc[map->n_blocks - 1u];
    bool res = l.slot != OKV_NO_SLOT;
    if (map->act_slot != l.slot || (res && map->act_pos != l.pos) || (!res && map->act_tok != 0))
      return okv_status_make(OKV_STATUS_INTERNAL, "block map: the active block's mirror disagrees with block %u",
                             map->n_blocks - 1u);
  } else if (map->act_slot != OKV_NO_SLOT) {
    return okv_status_make(OKV_STATUS_INTERNAL, "block map: an active block's mirror with no block");
  }
  for (uint32_t b = map->n_blocks; b < map->cap_blocks; b++)
    if (map->loc[b].slot != OKV_NO_SLOT)
      return okv_status_make(OKV_STATUS_INTERNAL, "block map: block %u beyond n_blocks = %u is mapped", b,
                             map->n_blocks);
  for (uint32_t b = 0; b < map->n_blocks; b++)
    if (okv_block_map_bit(map->res_bits, b) != (map->loc[b].slot != OKV_NO_SLOT))
      return okv_status_make(OKV_STATUS_INTERNAL, "block map: residency bit of block %u disagrees with its slot", b);
  if (n_mapped != map->n_resident)
    return okv_status_make(OKV_STATUS_INTERNAL, "block map: %u blocks mapped but %u listed resident", n_mapped,
                           map->n_resident);
  /* Injective onto slots: mapped slots and free slots are pairwise distinct. */
  uint32_t n = map->n_resident + map->n_free;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t si = i < map->n_resident ? map->loc[map->resident[i]].slot : map->free_slots[i - map->n_resident];
    if (si == OKV_NO_SLOT) return okv_status_make(OKV_STATUS_INTERNAL, "block map: free-slot stack holds no slot");
    for (uint32_t j = i + 1; j < n; j++) {
      uint32_t sj = j < map->n_resident ? map->loc[map->resident[j]].slot : map->free_slots[j - map->n_resident];
      if (si == sj) return okv_status_make(OKV_STATUS_INTERNAL, "block map: slot %u used twice", si);
    }
  }
  return OKV_OK;
}
