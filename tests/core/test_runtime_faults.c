/* Fault injection (hal/hal_fault.h): failed background transfers never map the
 * block they were bringing, never disturb another mapped block, show in stats
 * and as absorbed pipeline_errors (the step returns OK), attention stays exact over what is validly
 * resident, the blocks are retried later; allocation failures and a small
 * DEVICE tier are errors, never corruption; the HOST tier stays intact. */
#include <pthread.h>

#include "tests/core/rt_driver.h"

#include "core/runtime_internal.h"
#include "hal/hal_fault.h"

static const char *g_backend = "cpu";

typedef struct faults_t {
  pthread_t main_thread;
  int fail_worker_copies; /* set by the main thread between steps only */
  int n_failed;
  int alloc_countdown;    /* fail the allocation when it reaches 0; < 0: never */
} faults_t;

static faults_t g_faults;

static bool fail_copy(void *user, okv_tier_t src, okv_tier_t dst, size_t n_blocks, uint64_t bytes) {
  faults_t *f = user;
  (void)n_blocks;
  (void)bytes;
  /* Only the background pipeline's transfers (issued from its thread). */
  if (src == OKV_TIER_HOST && dst == OKV_TIER_DEVICE && __atomic_load_n(&f->fail_worker_copies, __ATOMIC_ACQUIRE) &&
      !pthread_equal(pthread_self(), f->main_thread)) {
    __atomic_add_fetch(&f->n_failed, 1, __ATOMIC_RELAXED);
    return true;
  }
  return false;
}

static bool fail_alloc(void *user, okv_tier_t tier, uint64_t bytes) {
  faults_t *f = user;
  (void)tier;
  (void)bytes;
  if (f->alloc_countdown < 0) return false;
  return f->alloc_countdown-- == 0;
}

static okv_hal_fault_hooks_t g_hooks = {&g_faults, fail_alloc, fail_copy, NULL};

static void base_config(okv_runtime_config_t *c) {
  okv_runtime_config_init(c);
  c->n_layers = 3;
  c->n_q_heads = 4;
  c->n_kv_heads = 2;
  c->head_dim = 16;
  c->max_seqs = 4;
  c->max_context_tokens = 1024;
  c->budget_blocks = 4;
  c->fetch_ratio = 0.5; /* C = 2 */
}

static int setup(void **state) {
  memset(&g_faults, 0, sizeof g_faults);
  g_faults.main_thread = pthread_self();
  g_faults.alloc_countdown = -1;
  *state = &g_faults;
  return 0;
}

/* Compares every host block of every sequence with what was appended. */
static void check_host_intact(drv_t *d) {
  const okv_runtime_t *rt = d->rt;
  uint32_t hd = d->cfg.head_dim;
  for (uint32_t i = 0; i < d->n_seqs; i++)
    for (uint32_t l = 0; l < d->cfg.n_layers; l++)
      for (uint32_t h = 0; h < d->cfg.n_kv_heads; h++)
        for (uint32_t t = 0; t < d->hist[i].n_tokens[l]; t++) {
          uint32_t hb = okv_runtime_debug_host_block(rt, d->ids[i], l, h, t / 16);
          assert_true(hb != UINT32_MAX);
          const float *blk = (const float *)(rt->host_kv_ptr + (uint64_t)hb * rt->block_bytes);
          const float *k = d->hist[i].k + rt_hist_off(&d->hist[i], l, t) + h * hd;
          const float *v = d->hist[i].v + rt_hist_off(&d->hist[i], l, t) + h * hd;
          for (uint32_t e = 0; e < hd; e++) {
            assert_true(blk[e * 16 + t % 16] == k[e]);
            assert_true(blk[16 * hd + (t % 16) * hd + e] == v[e]);
          }
        }
}

/* Snapshot of resident lists: [seq][layer][head]. */
typedef struct snap_t {
  uint32_t n[4][3][2];
  uint32_t b[4][3][2][16];
} snap_t;

static void snapshot(drv_t *d, snap_t *s) {
  for (uint32_t i = 0; i < d->n_seqs; i++)
    for (uint32_t l = 0; l < d->cfg.n_layers; l++)
      for (uint32_t h = 0; h < d->cfg.n_kv_heads; h++)
        OKV_ASSERT_OK(okv_runtime_seq_resident(d->rt, d->ids[i], l, h, s->b[i][l][h], 16, &s->n[i][l][h]));
}

static void test_failed_transfers(void **state) {
  faults_t *f = *state;
  okv_runtime_config_t c;
  base_config(&c);
  okv_hal_device_params_t p;
  okv_hal_device_params_init(&p);
  p.capacity_bytes[OKV_TIER_DEVICE] = 64u << 20;
  p.n_threads = 1;
  drv_t d;
  drv_open(&d, g_backend, &c, &p, 11, 1024);
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(d.dev, &g_hooks));
  drv_add(&d, 200);
  drv_add(&d, 120);
  for (int s = 0; s < 4; s++) drv_step(&d, 2, 3.0f);
  uint64_t failed_total = 0, failed_status_steps = 0;
  snap_t *before = test_calloc(1, sizeof *before), *after = test_calloc(1, sizeof *after);
  for (int round = 0; round < 6; round++) {
    /* Step A issues transfers that fail; step B commits them (and must map nothing new). */
    __atomic_store_n(&f->fail_worker_copies, 1, __ATOMIC_RELEASE);
    drv_step(&d, 2, 3.0f);
    __atomic_store_n(&f->fail_worker_copies, 0, __ATOMIC_RELEASE);
    snapshot(&d, before);
    drv_step(&d, 2, 3.0f);
    snapshot(&d, after);
    assert_int_equal(d.last_layer_code, OKV_STATUS_OK); /* absorbed: out stays valid */
    if (d.last_stats.pipeline_errors > 0) failed_status_steps++;
    failed_total += d.last_stats.failed_blocks;
    /* Attention ran exactly over what is validly resident. */
    double e = drv_check(&d, false);
    assert_true(e < 2e-5);
    /* No block became resident through a failed transfer (new active blocks aside). */
    for (uint32_t i = 0; i < d.n_seqs; i++)
      for (uint32_t l = 0; l < c.n_layers; l++)
        for (uint32_t h = 0; h < c.n_kv_heads; h++) {
          uint32_t nb = (d.hist[i].n_tokens[l] + 15) / 16;
          for (uint32_t j = 0; j < after->n[i][l][h]; j++) {
            uint32_t b = after->b[i][l][h][j];
            if (b + 2 >= nb) continue;
            bool was = false;
            for (uint32_t k = 0; k < before->n[i][l][h]; k++) was |= before->b[i][l][h][k] == b;
            assert_true(was);
          }
          const okv_block_map_t *m = okv_runtime_debug_map(d.rt, d.ids[i], l, h);
          OKV_ASSERT_OK(okv_block_map_check(m));
          assert_true(m->n_resident + m->n_free >= c.budget_blocks + 1);
        }
    assert_int_equal(d.last_stats.blocks_moved, 0);
    /* Recovery: without faults the deferred/failed blocks are fetched again. */
    for (int s = 0; s < 3; s++) {
      drv_step(&d, 2, 3.0f);
      assert_int_equal(d.last_layer_code, OKV_STATUS_OK);
      assert_true(drv_check(&d, false) < 2e-5);
    }
  }
  assert_true(__atomic_load_n(&f->n_failed, __ATOMIC_ACQUIRE) > 0);
  assert_true(failed_total > 0);
  assert_true(failed_status_steps > 0);
  okv_step_stats_t cum;
  OKV_ASSERT_OK(okv_runtime_stats(d.rt, UINT32_MAX, &cum));
  assert_int_equal(cum.failed_blocks, failed_total);
  assert_true(cum.blocks_moved > 0);
  check_host_intact(&d);
  test_free(before);
  test_free(after);
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(d.dev, NULL));
  drv_close(&d);
}

/* Every allocation create makes, failed in turn: a clean error, nothing leaked
 * (CMocka checks), and the device's tier usage back to zero. */
static void test_alloc_failures(void **state) {
  faults_t *f = *state;
  okv_runtime_config_t c;
  base_config(&c);
  okv_allocator_t a = okv_test_allocator();
  okv_hal_device_t *dev;
  OKV_ASSERT_OK(okv_hal_device_create(g_backend, NULL, &a, &dev));
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(dev, &g_hooks));
  int n_failures = 0;
  for (int k = 0; k < 64; k++) {
    f->alloc_countdown = k;
    okv_runtime_t *rt = NULL;
    okv_status_t st = okv_runtime_create(dev, &c, &a, &rt);
    f->alloc_countdown = -1;
    if (st == OKV_OK) {
      okv_runtime_destroy(rt);
      break;
    }
    assert_int_equal(okv_status_code(st), OKV_STATUS_OUT_OF_MEMORY);
    okv_status_free(st);
    assert_null(rt);
    n_failures++;
    for (int t = 0; t < OKV_TIER_COUNT; t++) {
      uint64_t cap, used;
      OKV_ASSERT_OK(okv_hal_device_tier_usage(dev, (okv_tier_t)t, &cap, &used));
      assert_int_equal(used, 0);
    }
  }
  assert_true(n_failures >= 5);
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(dev, NULL));
  OKV_ASSERT_OK(okv_hal_device_release(dev));
}

/* A DEVICE tier too small for the slot pool: OUT_OF_MEMORY naming the tier. */
static void test_small_device_tier(void **state) {
  (void)state;
  okv_runtime_config_t c;
  base_config(&c);
  c.device_pool_bytes = 16u << 20;
  okv_allocator_t a = okv_test_allocator();
  okv_hal_device_params_t p;
  okv_hal_device_params_init(&p);
  p.capacity_bytes[OKV_TIER_DEVICE] = 1u << 20;
  okv_hal_device_t *dev;
  OKV_ASSERT_OK(okv_hal_device_create(g_backend, &p, &a, &dev));
  okv_runtime_t *rt = NULL;
  okv_status_t st = okv_runtime_create(dev, &c, &a, &rt);
  assert_int_equal(okv_status_code(st), OKV_STATUS_OUT_OF_MEMORY);
  assert_non_null(strstr(okv_status_message(st), "device"));
  okv_status_free(st);
  /* With the default pool size it fits what is left. */
  c.device_pool_bytes = 0;
  OKV_ASSERT_OK(okv_runtime_create(dev, &c, &a, &rt));
  uint32_t room;
  OKV_ASSERT_OK(okv_runtime_seq_capacity(rt, 100, &room));
  assert_true(room >= 1);
  okv_runtime_destroy(rt);
  OKV_ASSERT_OK(okv_hal_device_release(dev));
}

int main(int argc, char **argv) {
  g_backend = okv_test_backend_or_skip(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_failed_transfers, setup),
      cmocka_unit_test_setup(test_alloc_failures, setup),
      cmocka_unit_test_setup(test_small_device_tier, setup),
  };
  return cmocka_run_group_tests_name("core_runtime_faults", tests, NULL, NULL);
}
