/* The selection rule on one KV head's slot table (okv_hal_select_async and
 * okv_hal_slot_commit_async, include/oasiskv/kernels.h section 6), written
 * once for every backend: the CPU backend runs it per head on its stream
 * workers, kernels/okv_kernels.cu runs it with one GPU thread per head (heads
 * are independent; a head's work is O(R + n_predicted) with R = K + 1 + C).
 * Method: arXiv 2608.08097, "Select" (delta selection with capped eviction);
 * the same decisions as core/select.c's host selection.
 *
 * C11 and CUDA/HIP C++: a GPU includer defines OKV_SELECT_RULE_FN (its device
 * function qualifier) first. Pure functions on raw pointers: no allocation,
 * no error (the HAL validated the shapes; a bad entry is skipped). Not
 * installed. */
#ifndef OASISKV_SELECT_RULE_H
#define OASISKV_SELECT_RULE_H

#include <stdint.h>

#include "oasiskv/kernels.h"

#ifndef OKV_SELECT_RULE_FN
#define OKV_SELECT_RULE_FN static inline
#endif

/* True when slot i is older than slot j under capped eviction's order:
 * least recently selected first, ties by lower block. */
OKV_SELECT_RULE_FN int okv_select_rule_older(const uint32_t *blk, const uint32_t *last, uint32_t i, uint32_t j) {
  return last[i] < last[j] || (last[i] == last[j] && blk[i] < blk[j]);
}

/* Moves the `want` oldest slots of v[0..n) to v[0..want), oldest first. One
 * pass keeping a sorted prefix: O(n) comparisons for the small caps used. */
OKV_SELECT_RULE_FN void okv_select_rule_oldest(const uint32_t *blk, const uint32_t *last, uint32_t *v, uint32_t n,
                                               uint32_t want) {
  if (want > n) want = n;
  if (want == 0) return;
  uint32_t m = 0; /* v[0..m) sorted; v[m..j) rejected */
  for (uint32_t j = 0; j < n; j++) {
    uint32_t x = v[j];
    if (m == want) {
      if (!okv_select_rule_older(blk, last, x, v[m - 1])) continue;
      v[j] = v[--m]; /* the youngest kept slot is rejected in x's place */
    }
    uint32_t i = m;
    while (i > 0 && okv_select_rule_older(blk, last, x, v[i - 1])) {
      v[i] = v[i - 1];
      i--;
    }
    v[i] = x;
    m++;
  }
}

/* Selection on one head's table `t` (R slots, W bitmap words): the rule of
 * okv_select_desc_t. pred[0..n_pred): the prediction; plan: [cap] entries of
 * OKV_SELECT_PLAN_U32S u32s; result: OKV_SELECT_RESULT_U32S u32s. */
OKV_SELECT_RULE_FN void okv_select_rule_head(uint32_t *t, uint32_t R, uint32_t W, uint32_t K, uint32_t step,
                                             const uint32_t *pred, uint32_t n_pred, uint32_t active, uint32_t cap,
                                             uint32_t *plan, uint32_t *result) {
  uint32_t *blk = t, *last = t + R, *tok = t + 2u * R, *cand = t + 3u * R;
  uint64_t *res = (uint64_t *)(void *)(t + 4u * R), *pb = res + W;
  const uint64_t nb = (uint64_t)W * 64u;
  /* 1. The predicted set as a bitmap (out-of-range, active and repeated entries ignored); hits and misses. */
  uint32_t hits = 0, misses = 0;
  for (uint32_t i = 0; i < n_pred; i++) {
    uint32_t b = pred[i];
    if (b >= nb || b == active) continue;
    uint64_t m = 1ull << (b & 63u);
    if (pb[b >> 6] & m) continue;
    pb[b >> 6] |= m;
    if (res[b >> 6] & m)
      hits++;
    else
      misses++;
  }
  /* 2. One pass over the slots: free slots, blocks held besides the active one, hits stamped, victim candidates. */
  uint32_t n_cand = 0, n_free = 0, held = 0;
  uint64_t sig = 0; /* over committed slots (okv_slot_table_sig_term) */
  for (uint32_t j = 0; j < R; j++) {
    uint32_t b = blk[j];
    if (b == OKV_SLOT_FREE) {
      n_free++;
      continue;
    }
    if (b < nb && ((res[b >> 6] >> (b & 63u)) & 1u)) sig += okv_slot_table_sig_term(j, b);
    if (b == active) continue;
    held++;
    if (b < nb && ((pb[b >> 6] >> (b & 63u)) & 1u)) {
      last[j] = step;
      continue;
    }
    cand[n_cand++] = j;
  }
  uint32_t room = held < K ? K - held : 0u;
  uint32_t n_adm = misses < cap ? misses : cap;
  if (n_adm > n_free) n_adm = n_free;
  okv_select_rule_oldest(blk, last, cand, n_cand, n_adm > room ? n_adm - room : 0u);
  /* 3. The first misses in predicted order are admitted into the lowest free slots. */
  uint32_t n = 0, victims = 0, next_victim = 0, next_free = 0;
  for (uint32_t i = 0; i < n_pred && n < n_adm; i++) {
    uint32_t b = pred[i];
    if (b >= nb || b == active) continue;
    uint64_t m = 1ull << (b & 63u);
    if (!(pb[b >> 6] & m)) continue; /* a repeat of an entry already taken */
    pb[b >> 6] &= ~m;
    if (res[b >> 6] & m) continue; /* a hit */
    uint32_t victim = OKV_SLOT_FREE, victim_slot = OKV_SLOT_FREE;
    if (room > 0) {
      room--;
    } else if (next_victim < n_cand) {
      victim_slot = cand[next_victim++];
      victim = blk[victim_slot];
      victims++;
    } else {
      break; /* nothing left to evict */
    }
    while (blk[next_free] != OKV_SLOT_FREE) next_free++; /* n < n_adm <= n_free: one exists */
    blk[next_free] = b;
    last[next_free] = step;
    tok[next_free] = 0; /* pending: unreadable until the commit */
    uint32_t *e = plan + (uint64_t)n * OKV_SELECT_PLAN_U32S;
    e[0] = b;
    e[1] = next_free;
    e[2] = victim;
    e[3] = victim_slot;
    n++;
  }
  /* 4. The scratch bitmap back to zero (only predicted words can hold bits). */
  for (uint32_t i = 0; i < n_pred; i++)
    if (pred[i] < nb) pb[pred[i] >> 6] = 0;
  result[0] = n;
  result[1] = hits;
  result[2] = misses;
  result[3] = victims;
  result[4] = (uint32_t)sig;
  result[5] = (uint32_t)(sig >> 32);
}

/* Commit of one head's plan (okv_slot_commit_desc_t): n_plan entries; landed:
 * the head's transfer ran. An entry whose slot no longer holds its block
 * (undone already) changes nothing, nor does an undo of an entry already
 * committed (its block's resident bit is set): a plan is committed once,
 * whatever later calls say. */
OKV_SELECT_RULE_FN void okv_commit_rule_head(uint32_t *t, uint32_t R, uint32_t W, const uint32_t *plan, uint32_t n_plan,
                                             int landed) {
  uint32_t *blk = t, *last = t + R, *tok = t + 2u * R;
  uint64_t *res = (uint64_t *)(void *)(t + 4u * R);
  const uint64_t nb = (uint64_t)W * 64u;
  for (uint32_t e = 0; e < n_plan; e++) {
    const uint32_t *p = plan + (uint64_t)e * OKV_SELECT_PLAN_U32S;
    uint32_t b = p[0], s = p[1], v = p[2], vs = p[3];
    if (s >= R || b >= nb || blk[s] != b) continue;
    const int committed = (int)((res[b >> 6] >> (b & 63u)) & 1u);
    if (!landed) {
      if (committed) continue;
      blk[s] = OKV_SLOT_FREE;
      last[s] = 0;
      tok[s] = 0;
      continue;
    }
    res[b >> 6] |= 1ull << (b & 63u);
    tok[s] = OKV_BLOCK_TOKENS;
    if (vs < R && v < nb && blk[vs] == v) {
      blk[vs] = OKV_SLOT_FREE;
      last[vs] = 0;
      tok[vs] = 0;
      res[v >> 6] &= ~(1ull << (v & 63u));
    }
  }
}

/* Attention's table mode (okv_attention_desc_t.tables): entry j of one head's table `t` (R slots) with the
 * pool slots `pool_slot` of its entries, for a sequence of seq_tokens tokens and a pool of n_slots slots.
 * Returns the tokens attention reads of the block in entry j (0: none) and sets *slot to its pool slot:
 * a free entry, a block past the sequence's end or a pool slot out of range reads nothing; the sequence's
 * last block (the active one) reads every token the sequence has in it, any other block
 * min(tokens[j], 16) (0 for a pending admission or an unreadable slot). */
OKV_SELECT_RULE_FN uint32_t okv_table_ws_entry(const uint32_t *t, uint32_t R, const uint32_t *pool_slot, uint32_t j,
                                               uint32_t seq_tokens, uint64_t n_slots, uint32_t *slot) {
  const uint32_t b = t[j], nb = (uint32_t)(((uint64_t)seq_tokens + OKV_BLOCK_TOKENS - 1u) / OKV_BLOCK_TOKENS);
  if (b == OKV_SLOT_FREE || b >= nb || pool_slot[j] >= n_slots) return 0;
  uint32_t n = b + 1u == nb ? seq_tokens - b * OKV_BLOCK_TOKENS : t[2u * R + j];
  *slot = pool_slot[j];
  return n < OKV_BLOCK_TOKENS ? n : OKV_BLOCK_TOKENS;
}

#endif
