/* Pure tests of the head-wise block map and delta selection with capped
 * eviction (core/block_map.h, core/select.h): hand-computed cases and
 * properties under a long random workload with a fixed seed. No device. */
#include "tests/common/test_common.h"

#include <stdlib.h>
#include <string.h>

#include "core/block_map.h"
#include "core/select.h"

typedef struct fixture_t {
  okv_allocator_t alloc;
  okv_block_map_t map;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = test_calloc(1, sizeof *f);
  f->alloc = okv_test_allocator();
  *state = f;
  return 0;
}

/* Each test frees its map itself: CMocka checks for leaks before teardown. */
static int teardown(void **state) {
  fixture_t *f = *state;
  test_free(f);
  return 0;
}

/* A head with `n_blocks` blocks, `n_slots` owned slots (0..n_slots-1) all free. */
static void head_init(fixture_t *f, uint32_t n_blocks, uint32_t n_slots) {
  OKV_ASSERT_OK(okv_block_map_init(&f->map, &f->alloc, n_slots));
  OKV_ASSERT_OK(okv_block_map_reserve(&f->map, &f->alloc, n_blocks));
  okv_block_map_set_n_blocks(&f->map, n_blocks);
  for (uint32_t s = n_slots; s > 0; s--) okv_block_map_push_free(&f->map, s - 1u);
}

static void map_block(fixture_t *f, uint32_t b, uint32_t step) {
  uint32_t slot;
  assert_true(okv_block_map_pop_free(&f->map, &slot));
  okv_block_map_map(&f->map, b, slot, step);
}

/* Maps the blocks bm[i][0] into free slots, last selected at step bm[i][1]. */
static void map_blocks(fixture_t *f, const uint32_t (*bm)[2], size_t n) {
  for (size_t i = 0; i < n; i++) map_block(f, bm[i][0], bm[i][1]);
}

static void test_map_basic(void **state) {
  fixture_t *f = *state;
  head_init(f, 10, 4);
  static const uint32_t mapped[3][2] = {{3, 1}, {7, 2}, {0, 2}}; /* (block, step) */
  map_blocks(f, mapped, 3);
  assert_true(okv_block_map_is_resident(&f->map, 3));
  assert_false(okv_block_map_is_resident(&f->map, 4));
  assert_int_equal(f->map.n_resident, 3);
  assert_int_equal(f->map.loc[3].slot, 0);
  assert_int_equal(f->map.loc[7].slot, 1);
  assert_int_equal(f->map.loc[0].slot, 2);
  OKV_ASSERT_OK(okv_block_map_check(&f->map));
  /* LRU: lowest last-selected (block 3, step 1); ties at step 2 -> lower block 0. */
  assert_int_equal(okv_block_map_lru(&f->map, OKV_NO_BLOCK), 3);
  assert_int_equal(okv_block_map_lru(&f->map, 3), 0);
  assert_int_equal(okv_block_map_unmap(&f->map, 3), 0);
  okv_block_map_push_free(&f->map, 0);
  assert_int_equal(f->map.n_resident, 2);
  OKV_ASSERT_OK(okv_block_map_check(&f->map));
  /* Replace: block 5 takes resident 7's place (its position, a new slot, unreadable), 7's slot comes back. */
  okv_block_map_set_current(&f->map, 7, 16);
  uint32_t pos7 = f->map.loc[7].pos, slot5;
  assert_true(okv_block_map_pop_free(&f->map, &slot5));
  assert_int_equal(okv_block_map_replace(&f->map, 7, 5, slot5, 9), 1);
  okv_block_map_push_free(&f->map, 1);
  assert_false(okv_block_map_is_resident(&f->map, 7));
  assert_int_equal(f->map.loc[7].slot, OKV_NO_SLOT);
  assert_true(okv_block_map_is_resident(&f->map, 5));
  assert_int_equal(f->map.loc[5].slot, slot5);
  assert_int_equal(f->map.loc[5].pos, pos7);
  assert_int_equal(f->map.resident[pos7], 5);
  assert_int_equal(f->map.res_last[pos7], 9);
  assert_int_equal(okv_block_map_tokens(&f->map, 5), 0);
  assert_int_equal(f->map.n_resident, 2);
  OKV_ASSERT_OK(okv_block_map_check(&f->map));
  assert_true(okv_block_map_pop_free(&f->map, &slot5) && slot5 == 1); /* and back, into slot 1 again */
  assert_int_equal(okv_block_map_replace(&f->map, 5, 7, 1, 10), 0);
  okv_block_map_push_free(&f->map, 0);
  assert_int_equal(f->map.loc[7].pos, pos7);
  OKV_ASSERT_OK(okv_block_map_check(&f->map));
  /* Growing keeps the mapping. */
  OKV_ASSERT_OK(okv_block_map_reserve(&f->map, &f->alloc, 1000));
  okv_block_map_set_n_blocks(&f->map, 1000);
  assert_int_equal(f->map.loc[7].slot, 1);
  assert_int_equal(f->map.loc[999].slot, OKV_NO_SLOT);
  OKV_ASSERT_OK(okv_block_map_check(&f->map));
  /* A corrupted map is detected: one slot used twice. */
  f->map.loc[7].slot = f->map.loc[0].slot;
  okv_status_t st = okv_block_map_check(&f->map);
  assert_int_equal(okv_status_consume(st), OKV_STATUS_INTERNAL);
  f->map.loc[7].slot = 1;
  okv_block_map_free(&f->map, &f->alloc);
}

/* K = 4, C = 2, active block 9. Resident {1 (step 1), 2 (step 3), 5 (step 2), 6 (step 2), 9 active}.
 * Predicted (score order) {8, 2, 0, 4}: hit 2; misses 8, 0, 4; victims by LRU
 * among {1, 5, 6}: 1 (step 1), then 5 (step 2, lower block than 6). Admit 8->1, 0->5; defer 4. */
/* The active block's mirror (map's first line): slot, position and current tokens of block n_blocks - 1 follow
 * map, unmap (which moves the last resident entry into the hole), replace and set_current; its res_tok[] entry
 * may lag and is written back when the block stops being the active one. Hand-computed states. */
static void test_map_active_mirror(void **state) {
  fixture_t *f = *state;
  head_init(f, 4, 6);
  assert_int_equal(f->map.act_slot, OKV_NO_SLOT); /* block 3 (active) not resident yet */
  map_block(f, 0, 1);                             /* slot 0, entry 0 */
  map_block(f, 3, 1);                             /* slot 1, entry 1: the active block */
  assert_int_equal(f->map.act_slot, 1);
  assert_int_equal(f->map.act_pos, 1);
  assert_int_equal(okv_block_map_active_tokens(&f->map), 0);
  okv_block_map_set_current(&f->map, 3, 5);
  okv_block_map_set_current(&f->map, 0, 16);
  assert_int_equal(okv_block_map_tokens(&f->map, 3), 5); /* read through the mirror */
  assert_int_equal(okv_block_map_res_tok(&f->map, 1), 5);
  assert_int_equal(okv_block_map_tokens(&f->map, 0), 16);
  OKV_ASSERT_OK(okv_block_map_check(&f->map));
  /* Unmapping block 0 moves the active block's entry from 1 into 0, its tokens with it. */
  assert_int_equal(okv_block_map_unmap(&f->map, 0), 0);
  okv_block_map_push_free(&f->map, 0);
  assert_int_equal(f->map.act_pos, 0);
  assert_int_equal(f->map.loc[3].pos, 0);
  assert_int_equal(okv_block_map_tokens(&f->map, 3), 5);
  OKV_ASSERT_OK(okv_block_map_check(&f->map));
  /* A new block 4 becomes the active one: block 3's tokens land in res_tok[] and stay readable. */
  okv_block_map_set_current(&f->map, 3, 16);
  OKV_ASSERT_OK(okv_block_map_reserve(&f->map, &f->alloc, 5));
  okv_block_map_set_n_blocks(&f->map, 5);
  assert_int_equal(f->map.act_slot, OKV_NO_SLOT);
  assert_int_equal(f->map.res_tok[0], 16);
  assert_int_equal(okv_block_map_tokens(&f->map, 3), 16);
  map_block(f, 4, 2);
  assert_int_equal(f->map.act_pos, 1);
  okv_block_map_set_current(&f->map, 4, 1);
  assert_int_equal(okv_block_map_tokens(&f->map, 4), 1);
  assert_int_equal(okv_block_map_tokens(&f->map, 3), 16);
  OKV_ASSERT_OK(okv_block_map_check(&f->map));
  /* Replacing the active block (its entry reused by block 2) clears the mirror; mapping it again sets it. */
  uint32_t slot2;
  assert_true(okv_block_map_pop_free(&f->map, &slot2));
  uint32_t old = okv_block_map_replace(&f->map, 4, 2, slot2, 3);
  okv_block_map_push_free(&f->map, old);
  assert_int_equal(f->map.act_slot, OKV_NO_SLOT);
  assert_int_equal(okv_block_map_tokens(&f->map, 4), 0);
  assert_int_equal(okv_block_map_tokens(&f->map, 2), 0);
  OKV_ASSERT_OK(okv_block_map_check(&f->map));
  map_block(f, 4, 3);
  assert_int_not_equal(f->map.act_slot, OKV_NO_SLOT);
  assert_int_equal(f->map.act_slot, f->map.loc[4].slot);
  OKV_ASSERT_OK(okv_block_map_check(&f->map));
  /* A mirror that disagrees with loc[] is detected. */
  f->map.act_pos ^= 1u;
  assert_int_equal(okv_status_consume(okv_block_map_check(&f->map)), OKV_STATUS_INTERNAL);
  f->map.act_pos ^= 1u;
  okv_block_map_free(&f->map, &f->alloc);
}

static void test_select_hand_case(void **state) {
  fixture_t *f = *state;
  head_init(f, 10, 7);
  static const uint32_t mapped[5][2] = {{1, 1}, {2, 3}, {5, 2}, {6, 2}, {9, 4}}; /* (block, step) */
  map_blocks(f, mapped, 5);
  uint32_t pred[] = {8, 2, 0, 4};
  uint64_t scratch[8];
  uint32_t adm[4], vic[4];
  okv_select_params_t p = {.budget_blocks = 4, .cap_blocks = 2, .step = 5, .active_block = 9};
  okv_select_result_t r;
  OKV_ASSERT_OK(okv_select_head(&f->map, &p, pred, 4, scratch, adm, vic, &r));
  assert_int_equal(r.n_hits, 1);
  assert_int_equal(r.n_misses, 3);
  assert_int_equal(r.n_admitted, 2);
  assert_int_equal(r.n_deferred, 1);
  assert_int_equal(adm[0], 8);
  assert_int_equal(vic[0], 1);
  assert_int_equal(adm[1], 0);
  assert_int_equal(vic[1], 5);
  assert_int_equal(okv_block_map_last(&f->map, 2), 5); /* hit refreshed */
  assert_int_equal(okv_block_map_last(&f->map, 6), 2); /* not predicted: unchanged */
  /* Selection maps nothing. */
  assert_int_equal(f->map.n_resident, 5);
  assert_false(okv_block_map_is_resident(&f->map, 8));
  okv_block_map_free(&f->map, &f->alloc);
}

/* With room (fewer than K non-active blocks) misses take free places first. */
static void test_select_room_then_victims(void **state) {
  fixture_t *f = *state;
  head_init(f, 20, 8);
  map_block(f, 19, 1); /* active */
  map_block(f, 3, 1);
  map_block(f, 4, 1);
  uint32_t pred[] = {10, 11, 12, 13};
  uint64_t scratch[8];
  uint32_t adm[4], vic[4];
  okv_select_params_t p = {.budget_blocks = 3, .cap_blocks = UINT32_MAX, .step = 2, .active_block = 19};
  okv_select_result_t r;
  OKV_ASSERT_OK(okv_select_head(&f->map, &p, pred, 3, scratch, adm, vic, &r));
  /* held 2 < K = 3: one free place, then victims 3 and 4 (step 1, lower first). */
  assert_int_equal(r.n_admitted, 3);
  assert_int_equal(vic[0], OKV_NO_BLOCK);
  assert_int_equal(vic[1], 3);
  assert_int_equal(vic[2], 4);
  assert_int_equal(r.n_deferred, 0);
  /* Invalid: the active block predicted. */
  uint32_t bad[] = {19};
  okv_status_t st = okv_select_head(&f->map, &p, bad, 1, scratch, adm, vic, &r);
  assert_int_equal(okv_status_consume(st), OKV_STATUS_INVALID_ARGUMENT);
  uint32_t bad2[] = {20};
  st = okv_select_head(&f->map, &p, bad2, 1, scratch, adm, vic, &r);
  assert_int_equal(okv_status_consume(st), OKV_STATUS_INVALID_ARGUMENT);
  okv_block_map_free(&f->map, &f->alloc);
}

/* Reference victim order: resident, not predicted, not active, by (last_selected, block). */
static const okv_block_map_t *g_cmp_map;
static int cmp_lru(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  uint32_t lx = okv_block_map_last(g_cmp_map, x), ly = okv_block_map_last(g_cmp_map, y);
  if (lx != ly) return lx < ly ? -1 : 1;
  return x < y ? -1 : x > y;
}

/* Long random workload: a growing context, random predictions (some reused
 * from the last ones so there are hits), selection + commit each step.
 * Returns a hash of every decision for the determinism check. */
static uint64_t run_random_workload(fixture_t *f, uint64_t seed, uint32_t K, uint32_t C, uint32_t n_steps) {
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, seed);
  uint32_t max_blocks = 64 + n_steps / 4 + 2;
  head_init(f, 1, K + 1 + C);
  uint32_t n_blocks = 1;
  map_block(f, 0, 0); /* active block 0 */
  uint32_t *pred = test_malloc(sizeof(uint32_t) * K);
  uint64_t *scratch = test_malloc(sizeof(uint64_t) * (K + 2 + C));
  uint32_t *adm = test_malloc(sizeof(uint32_t) * K), *vic = test_malloc(sizeof(uint32_t) * K);
  uint32_t *expect = test_malloc(sizeof(uint32_t) * (K + 2 + C));
  uint8_t *seen = test_malloc(max_blocks);
  uint8_t *was_resident = test_malloc(max_blocks);
  uint64_t hash = 1469598103934665603ull;
  uint64_t total_deferred = 0, total_hits = 0;
  for (uint32_t step = 1; step <= n_steps; step++) {
    /* Append: every 4th step starts a new active block; the old one stays resident,
     * the LRU non-active block leaves if more than K remain (what the runtime does). */
    if (step % 4 == 0 && n_blocks < max_blocks) {
      OKV_ASSERT_OK(okv_block_map_reserve(&f->map, &f->alloc, n_blocks + 1));
      okv_block_map_set_n_blocks(&f->map, ++n_blocks);
      okv_block_map_touch(&f->map, n_blocks - 2, step);
      while (f->map.n_resident > K) {
        uint32_t v = okv_block_map_lru(&f->map, n_blocks - 1);
        okv_block_map_push_free(&f->map, okv_block_map_unmap(&f->map, v));
      }
      map_block(f, n_blocks - 1, step);
    }
    uint32_t active = n_blocks - 1;
    /* Predict: up to K distinct non-active blocks. */
    uint32_t want = n_blocks - 1 < K ? n_blocks - 1 : K;
    uint32_t n_pred = want ? okv_test_rng_below(&rng, want + 1) : 0;
    memset(seen, 0, max_blocks);
    uint32_t np = 0;
    while (np < n_pred) {
      uint32_t b;
      if (okv_test_rng_below(&rng, 2) == 0 && f->map.n_resident > 1)
        b = f->map.resident[okv_test_rng_below(&rng, f->map.n_resident)];
      else
        b = okv_test_rng_below(&rng, n_blocks);
      if (b == active || seen[b]) continue;
      seen[b] = 1;
      pred[np++] = b;
    }
    for (uint32_t b = 0; b < n_blocks; b++) was_resident[b] = okv_block_map_is_resident(&f->map, b);
    /* Expected victim order, before selection refreshes the hits. */
    uint32_t n_exp = 0;
    for (uint32_t i = 0; i < f->map.n_resident; i++) {
      uint32_t b = f->map.resident[i];
      if (b != active && !seen[b]) expect[n_exp++] = b;
    }
    g_cmp_map = &f->map;
    qsort(expect, n_exp, sizeof(uint32_t), cmp_lru);
    uint32_t held_before = f->map.n_resident - 1;
    okv_select_params_t p = {.budget_blocks = K, .cap_blocks = C, .step = step, .active_block = active};
    okv_select_result_t r;
    OKV_ASSERT_OK(okv_select_head(&f->map, &p, pred, np, scratch, adm, vic, &r));
    /* The cap is never exceeded. */
    assert_true(r.n_admitted <= C);
    assert_int_equal(r.n_hits + r.n_misses, np);
    assert_int_equal(r.n_admitted + r.n_deferred, r.n_misses);
    /* Hits never cause traffic: every admitted block was not resident. */
    uint32_t n_vic = 0;
    for (uint32_t i = 0; i < r.n_admitted; i++) {
      assert_false(was_resident[adm[i]]);
      assert_true(seen[adm[i]]);
      if (vic[i] != OKV_NO_BLOCK) {
        /* Victims are exactly the least-recently-selected non-predicted blocks, in order. */
        assert_true(n_vic < n_exp);
        assert_int_equal(vic[i], expect[n_vic]);
        n_vic++;
      } else {
        /* A free place only while the head holds fewer than K blocks. */
        assert_true(held_before + (i - n_vic) < K);
      }
    }
    /* Admitted misses come in predicted (score) order. */
    uint32_t pi = 0;
    for (uint32_t i = 0; i < r.n_admitted; i++) {
      while (pi < np && pred[pi] != adm[i]) pi++;
      assert_true(pi < np);
    }
    /* Cap deferral happens only when there are more misses than C. */
    assert_true(r.n_deferred == 0 || r.n_admitted == C);
    /* Commit (success). */
    for (uint32_t i = 0; i < r.n_admitted; i++) {
      if (vic[i] != OKV_NO_BLOCK) okv_block_map_push_free(&f->map, okv_block_map_unmap(&f->map, vic[i]));
      uint32_t slot;
      assert_true(okv_block_map_pop_free(&f->map, &slot));
      okv_block_map_map(&f->map, adm[i], slot, step);
    }
    /* No head holds more than K + 1 blocks; the active block is resident; bijection. */
    assert_true(f->map.n_resident <= K + 1);
    assert_true(okv_block_map_is_resident(&f->map, active));
    assert_int_equal(f->map.n_resident + f->map.n_free, K + 1 + C);
    OKV_ASSERT_OK(okv_block_map_check(&f->map));
    total_deferred += r.n_deferred;
    total_hits += r.n_hits;
    hash = (hash ^ r.n_hits) * 1099511628211ull;
    for (uint32_t i = 0; i < r.n_admitted; i++) hash = (hash ^ ((uint64_t)adm[i] << 32 | vic[i])) * 1099511628211ull;
  }
  /* The workload exercised the interesting paths. */
  assert_true(total_deferred > 0);
  assert_true(total_hits > 0);
  test_free(pred);
  test_free(scratch);
  test_free(adm);
  test_free(vic);
  test_free(expect);
  test_free(seen);
  test_free(was_resident);
  return hash;
}

static void test_select_properties_random(void **state) {
  fixture_t *f = *state;
  uint64_t h1 = run_random_workload(f, 12345, 16, 3, 4000);
  okv_block_map_free(&f->map, &f->alloc);
  uint64_t h2 = run_random_workload(f, 12345, 16, 3, 4000);
  assert_true(h1 == h2); /* two identical runs give identical results */
  okv_block_map_free(&f->map, &f->alloc);
  uint64_t h3 = run_random_workload(f, 999, 8, 1, 3000);
  assert_true(h3 != h1);
  okv_block_map_free(&f->map, &f->alloc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_map_basic, setup, teardown),
      cmocka_unit_test_setup_teardown(test_map_active_mirror, setup, teardown),
      cmocka_unit_test_setup_teardown(test_select_hand_case, setup, teardown),
      cmocka_unit_test_setup_teardown(test_select_room_then_victims, setup, teardown),
      cmocka_unit_test_setup_teardown(test_select_properties_random, setup, teardown),
  };
  return cmocka_run_group_tests_name("core_select", tests, NULL, NULL);
}
