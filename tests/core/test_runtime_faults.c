/* Fault injection (hal/hal_fault.h): failed background transfers never map the
 * block they were bringing, never disturb another mapped block, show in stats
 * and as absorbed pipeline_errors (the step returns OK), attention stays exact over what is validly
 * resident, the blocks are retried later; allocation failures and a small
 * DEVICE tier are errors, never corruption; the HOST tier stays intact. */
#include <pthread.h>
#include <stdatomic.h>

#include "tests/core/rt_driver.h"

#include "tests/core/rt_check.h"
#include "oasiskv/fault.h"

static const char *g_backend = "cpu";

typedef struct faults_t {
  pthread_t main_thread;
  int fail_worker_copies; /* set by the main thread between steps only */
  int n_failed;
  int alloc_countdown; /* fail the allocation when it reaches 0; < 0: never */
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
  rt_config(c, 3, 4, 2, 16);
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

/* The device of the transfer-fault tests: 64 MiB of DEVICE, one kernel thread. */
static okv_hal_device_params_t transfer_params(void) {
  okv_hal_device_params_t p;
  okv_hal_device_params_init(&p);
  p.capacity_bytes[OKV_TIER_DEVICE] = 64u << 20;
  p.n_threads = 1;
  return p;
}

/* Compares every host block of every sequence with what was appended. */
static void check_host_intact(drv_t *d) {
  for (uint32_t i = 0; i < d->n_seqs; i++) rt_check_host_tokens(d->rt, d->ids[i], &d->hist[i]);
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
  okv_hal_device_params_t p = transfer_params();
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
    okv_runtime_debug_drain(d.rt); /* the previous step's last jobs issue before the faults start */
    __atomic_store_n(&f->fail_worker_copies, 1, __ATOMIC_RELEASE);
    drv_step(&d, 2, 3.0f);
    okv_runtime_debug_drain(d.rt); /* step A's last jobs may outlive its step_end: let them issue (and fail) */
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

/* okv_runtime_synchronize changes nothing a step returns: two runtimes with the same inputs, one
 * synchronised after every step, the other left to overlap its last jobs with the next step (drained only
 * where the faults need its transfers issued while they are on). Steps with failed transfers included: the
 * synchronised runtime still absorbs and counts every failure at the layer's next commit. Outputs equal
 * bit for bit, cumulative selection and fault stats equal, and the call is refused during a step. */
static void test_synchronize_changes_nothing(void **state) {
  faults_t *f = *state;
  okv_runtime_config_t c;
  base_config(&c);
  okv_hal_device_params_t p = transfer_params();
  drv_t a, b;
  drv_open(&a, g_backend, &c, &p, 23, 1024);
  drv_open(&b, g_backend, &c, &p, 23, 1024);
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(a.dev, &g_hooks));
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(b.dev, &g_hooks));
  drv_t *both[2] = {&a, &b};
  for (int i = 0; i < 2; i++) {
    drv_add(both[i], 200);
    drv_add(both[i], 120);
  }
  size_t out_bytes = (size_t)c.n_layers * DRV_MAX_SEQS * 4 * c.n_q_heads * c.head_dim * sizeof(float);
  uint64_t failed_steps = 0;
  for (int s = 0; s < 24; s++) {
    bool faulty = s % 4 == 1;
    if (faulty) okv_runtime_debug_drain(b.rt); /* b's previous jobs issue before the faults start */
    __atomic_store_n(&f->fail_worker_copies, faulty, __ATOMIC_RELEASE);
    drv_step(&a, 2, 3.0f);
    OKV_ASSERT_OK(okv_runtime_synchronize(a.rt));
    drv_step(&b, 2, 3.0f);
    if (faulty) okv_runtime_debug_drain(b.rt); /* b's last jobs issue (and fail) while the faults are on */
    __atomic_store_n(&f->fail_worker_copies, 0, __ATOMIC_RELEASE);
    assert_int_equal(a.last_layer_code, b.last_layer_code);
    assert_memory_equal(a.out, b.out, out_bytes);
    assert_true(drv_check(&a, false) < 2e-5);
    failed_steps += faulty;
  }
  okv_step_stats_t ca, cb;
  OKV_ASSERT_OK(okv_runtime_stats(a.rt, UINT32_MAX, &ca));
  OKV_ASSERT_OK(okv_runtime_stats(b.rt, UINT32_MAX, &cb));
  assert_true(failed_steps == 6 && ca.failed_blocks > 0); /* the faults happened, and were counted */
  assert_int_equal(ca.failed_blocks, cb.failed_blocks);
  assert_int_equal(ca.blocks_moved, cb.blocks_moved);
  assert_int_equal(ca.hits, cb.hits);
  assert_int_equal(ca.misses, cb.misses);
  assert_int_equal(ca.pipeline_errors, cb.pipeline_errors);
  /* Refused on NULL and during a step (which then completes normally). */
  okv_status_t st = okv_runtime_synchronize(NULL);
  assert_int_equal(okv_status_code(st), OKV_STATUS_INVALID_ARGUMENT);
  okv_status_free(st);
  OKV_ASSERT_OK(okv_runtime_step_begin(a.rt, a.n_seqs, a.ids, 2));
  st = okv_runtime_synchronize(a.rt);
  assert_int_equal(okv_status_code(st), OKV_STATUS_INVALID_ARGUMENT);
  okv_status_free(st);
  for (uint32_t l = 0; l < c.n_layers; l++)
    OKV_ASSERT_OK(
        okv_runtime_step_layer(a.rt, l, drv_k(&a, l), drv_v(&a, l), drv_q(&a, l), drv_draft(&a, l), drv_out(&a, l)));
  OKV_ASSERT_OK(okv_runtime_step_end(a.rt, NULL));
  OKV_ASSERT_OK(okv_runtime_synchronize(a.rt));
  check_host_intact(&b);
  for (int i = 0; i < 2; i++) {
    OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(both[i]->dev, NULL));
    drv_close(both[i]);
  }
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

/* A host allocator that fails its call number fail_at (1-based; 0: none) and counts calls. */
typedef struct {
  okv_allocator_t inner;
  _Atomic uint32_t calls;
  uint32_t fail_at;
} host_fail_t;

static bool host_fails(host_fail_t *h) { return atomic_fetch_add(&h->calls, 1u) + 1u == h->fail_at; }
static void *hf_malloc(void *self, size_t n) {
  host_fail_t *h = self;
  return host_fails(h) ? NULL : h->inner.malloc_fn(h->inner.self, n);
}
static void *hf_calloc(void *self, size_t c, size_t n) {
  host_fail_t *h = self;
  return host_fails(h) ? NULL : h->inner.calloc_fn(h->inner.self, c, n);
}
static void *hf_realloc(void *self, void *p, size_t n) {
  host_fail_t *h = self;
  return host_fails(h) ? NULL : h->inner.realloc_fn(h->inner.self, p, n);
}
static void hf_free(void *self, void *p) {
  host_fail_t *h = self;
  h->inner.free_fn(h->inner.self, p);
}

/* Every host allocation the runtime's create makes (q8 scoring and device selection in effect), failed in
 * turn: OUT_OF_MEMORY and nothing leaked (CMocka checks). A create that succeeds anyway kept a NULL array for
 * a later step to dereference (the q8 scoring context's candidate offsets were allocated unchecked). */
static void test_host_alloc_failures(void **state) {
  (void)state;
  okv_runtime_config_t c;
  base_config(&c);
  c.scoring = OKV_SCORING_Q8;
  c.device_selection = true;
  okv_hal_device_t *dev;
  okv_allocator_t sys = okv_test_allocator();
  OKV_ASSERT_OK(okv_hal_device_create(g_backend, NULL, &sys, &dev));
  host_fail_t h = {.inner = sys, .fail_at = 0};
  okv_allocator_t a = {
      .self = &h, .malloc_fn = hf_malloc, .calloc_fn = hf_calloc, .realloc_fn = hf_realloc, .free_fn = hf_free};
  okv_runtime_t *rt = NULL;
  OKV_ASSERT_OK(okv_runtime_create(dev, &c, &a, &rt)); /* counts the calls of a create that succeeds */
  assert_true(okv_runtime_config(rt)->scoring_groups > 0);
  okv_runtime_destroy(rt);
  const uint32_t n_calls = atomic_load(&h.calls);
  assert_true(n_calls >= 20);
  for (uint32_t k = 1; k <= n_calls; k++) {
    atomic_store(&h.calls, 0u);
    h.fail_at = k;
    rt = NULL;
    okv_status_t st = okv_runtime_create(dev, &c, &a, &rt);
    if (st == OKV_OK) { /* a create that ignored a failed allocation (and kept a NULL array) */
      print_error("call %u failed and create succeeded\n", k);
      okv_runtime_destroy(rt);
      fail();
    }
    if (okv_status_code(st) != OKV_STATUS_OUT_OF_MEMORY) print_error("call %u: %s\n", k, okv_status_message(st));
    assert_int_equal(okv_status_code(st), OKV_STATUS_OUT_OF_MEMORY);
    okv_status_free(st);
    assert_null(rt);
  }
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

/* ---- Issue regressions: the foreground write of the active block ----
 * Every HOST->DEVICE operation fails (both tries of the write too): copies,
 * buffer writes and the token-write kernel (okv_hal_kv_write_tokens_async, a
 * KERNEL op from HOST into DEVICE). The layer must report the failure and its
 * `out` must hold no phantom, stale or foreign value (all NaN); once faults
 * stop, outputs are exact again. */

static int g_fail_h2d; /* set by the main thread between calls */

static bool fail_h2d_op(void *user, okv_hal_op_t op, okv_tier_t src, okv_tier_t dst) {
  (void)user;
  return (op == OKV_HAL_OP_COPY || op == OKV_HAL_OP_BUFFER_WRITE || op == OKV_HAL_OP_KERNEL) && src == OKV_TIER_HOST &&
         dst == OKV_TIER_DEVICE && __atomic_load_n(&g_fail_h2d, __ATOMIC_ACQUIRE);
}

static okv_hal_fault_hooks_t g_h2d_hooks = {NULL, NULL, NULL, fail_h2d_op};

static void one_head_config(okv_runtime_config_t *c, okv_mode_t mode) {
  rt_config(c, 1, 1, 1, 4);
  c->budget_blocks = 4;
  c->mode = mode;
  c->max_seqs = 2;
  c->max_context_tokens = 256;
}

/* A runtime of config c on its own device (test allocator) whose HOST ->
 * DEVICE transfers fail while g_fail_h2d is set. */
typedef struct h2d_rt_t {
  okv_allocator_t alloc;
  okv_hal_device_t *dev;
  okv_runtime_t *rt;
} h2d_rt_t;

static okv_runtime_t *h2d_open(h2d_rt_t *h, const okv_runtime_config_t *c) {
  h->alloc = okv_test_allocator();
  OKV_ASSERT_OK(okv_hal_device_create(g_backend, NULL, &h->alloc, &h->dev));
  OKV_ASSERT_OK(okv_runtime_create(h->dev, c, &h->alloc, &h->rt));
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(h->dev, &g_h2d_hooks));
  return h->rt;
}

static void h2d_close(h2d_rt_t *h) {
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(h->dev, NULL));
  okv_runtime_destroy(h->rt);
  OKV_ASSERT_OK(okv_hal_device_release(h->dev));
}

static uint32_t mode_T(okv_mode_t mode) { return mode == OKV_MODE_OASIS ? 2u : 1u; }

/* One decode step of one sequence; returns the layer's status code; out [T][4]. */
static okv_status_code_t one_step(okv_runtime_t *rt, uint32_t id, uint32_t T, const float *k, const float *v,
                                  const float *q, const float *draft, float *out) {
  OKV_ASSERT_OK(okv_runtime_step_begin(rt, 1, &id, T));
  okv_status_code_t code = okv_status_consume(okv_runtime_step_layer(rt, 0, k, v, q, T > 1 ? draft : NULL, out));
  OKV_ASSERT_OK(okv_runtime_step_end(rt, NULL));
  return code;
}

/* Input 1: failures at positions 20 (middle of block 1), 21 and 32 (first token of block 2). At 20 and 32 the
 * slot was current, so the step writes the token only, and that kernel fails first (INTERNAL); at 21 the slot
 * is unreadable since 20, so the step copies the whole block from the HOST tier instead, and that copy fails
 * (COPY_FAILED). The exact outputs at 22.. show that the whole-block copy restored every token. */
static void refresh_failure_no_phantom(okv_mode_t mode, okv_runtime_config_t c) {
  drv_t d;
  drv_open(&d, g_backend, &c, NULL, 77 + (uint64_t)mode, 256);
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(d.dev, &g_h2d_hooks));
  drv_add(&d, 0);
  uint32_t T = mode_T(mode);
  uint32_t n_failed = 0;
  for (uint32_t pos = 0; pos < 40; pos++) {
    bool faulty = pos == 20 || pos == 21 || pos == 32;
    __atomic_store_n(&g_fail_h2d, faulty, __ATOMIC_RELEASE);
    d.T = T;
    d.step_n = 1;
    d.step_slot[0] = 0;
    float *q = drv_q(&d, 0), *dr = drv_draft(&d, 0), *k = drv_k(&d, 0), *v = drv_v(&d, 0), *o = drv_out(&d, 0);
    for (uint32_t i = 0; i < T * 4; i++) q[i] = 2.0f * okv_test_rng_normal(&d.rng);
    for (uint32_t i = 0; i < 8; i++) dr[i] = okv_test_rng_normal(&d.rng);
    for (uint32_t i = 0; i < 4; i++) {
      k[i] = okv_test_rng_normal(&d.rng);
      v[i] = okv_test_rng_normal(&d.rng);
    }
    okv_status_code_t code = one_step(d.rt, d.ids[0], T, k, v, q, dr, o);
    rt_hist_append(&d.hist[0], 0, k, v); /* committed either way */
    __atomic_store_n(&g_fail_h2d, 0, __ATOMIC_RELEASE);
    if (faulty) {
      assert_int_equal(code, pos == 21 ? OKV_STATUS_COPY_FAILED : OKV_STATUS_INTERNAL);
      for (uint32_t i = 0; i < T * 4; i++) assert_true(isnan(o[i]));
      n_failed++;
    } else {
      /* Everything fits in K: the output is exact over every committed token. */
      assert_int_equal(code, OKV_STATUS_OK);
      assert_true(drv_check(&d, true) < 2e-5);
    }
  }
  assert_int_equal(n_failed, 3);
  check_host_intact(&d);
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(d.dev, NULL));
  drv_close(&d);
}

/* Input 2: a released slot never hands sequence A's values to sequence B. */
static void released_slot_not_reused_unwritten(okv_mode_t mode, okv_runtime_config_t c) {
  c.budget_blocks = 2;
  c.max_seqs = 1;
  c.fetch_ratio = 0.5;
  h2d_rt_t h;
  okv_runtime_t *rt = h2d_open(&h, &c);
  uint32_t T = mode_T(mode);
  float ka[4] = {1, 1, 1, 1}, va[4] = {111, 111, 111, 111}, q[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  float draft[8] = {0}, out[8];
  uint32_t a_id, b_id;
  OKV_ASSERT_OK(okv_runtime_seq_add(rt, NULL, &a_id));
  uint32_t n_a = mode == OKV_MODE_OASIS || mode == OKV_MODE_PROXY ? 60u : 20u;
  for (uint32_t t = 0; t < n_a; t++) assert_int_equal(one_step(rt, a_id, T, ka, va, q, draft, out), OKV_STATUS_OK);
  assert_true(fabsf(out[0] - 111.0f) < 1e-3f);
  OKV_ASSERT_OK(okv_runtime_seq_remove(rt, a_id));
  OKV_ASSERT_OK(okv_runtime_seq_add(rt, NULL, &b_id));
  float kb[4] = {0.5f, 0.5f, 0.5f, 0.5f}, vb[4] = {-7, -7, -7, -7};
  __atomic_store_n(&g_fail_h2d, 1, __ATOMIC_RELEASE);
  okv_status_code_t code = one_step(rt, b_id, T, kb, vb, q, draft, out);
  __atomic_store_n(&g_fail_h2d, 0, __ATOMIC_RELEASE);
  assert_int_equal(code, OKV_STATUS_INTERNAL); /* B's first token: the token write into a fresh slot failed */
  for (uint32_t i = 0; i < T * 4; i++) assert_true(isnan(out[i])); /* never A's 111 */
  /* B's slot is unreadable, not listed resident, until a write succeeds. */
  uint32_t blocks[4], nb = 9;
  OKV_ASSERT_OK(okv_runtime_seq_resident(rt, b_id, 0, 0, blocks, 4, &nb));
  assert_int_equal(nb, 0);
  /* Faults stop: the next step sees B's two tokens only (both V = -7). */
  assert_int_equal(one_step(rt, b_id, T, kb, vb, q, draft, out), OKV_STATUS_OK);
  for (uint32_t i = 0; i < 4; i++) assert_true(fabsf(out[i] + 7.0f) < 1e-4f);
  h2d_close(&h);
}

/* A peek right after a failed refresh must not pass off attention without the
 * active block's committed tokens as valid: it fails (NaN) until an append
 * repairs the slot. */
static void peek_after_failed_refresh(okv_mode_t mode, okv_runtime_config_t c) {
  h2d_rt_t h;
  okv_runtime_t *rt = h2d_open(&h, &c);
  uint32_t T = mode_T(mode), id;
  float k[4] = {1, 0, 0, 0}, v[4] = {3, 3, 3, 3}, q[8] = {1, 0, 0, 0, 1, 0, 0, 0}, draft[8] = {0}, out[8];
  float infl[8] = {1, 0, 0, 0, 3, 3, 3, 3};
  OKV_ASSERT_OK(okv_runtime_seq_add(rt, NULL, &id));
  for (int t = 0; t < 5; t++) assert_int_equal(one_step(rt, id, T, k, v, q, draft, out), OKV_STATUS_OK);
  __atomic_store_n(&g_fail_h2d, 1, __ATOMIC_RELEASE);
  assert_int_equal(one_step(rt, id, T, k, v, q, draft, out), OKV_STATUS_INTERNAL); /* the token write failed */
  __atomic_store_n(&g_fail_h2d, 0, __ATOMIC_RELEASE);
  okv_status_t st = okv_runtime_peek_layer(rt, 1, &id, 0, 1, q, infl, out);
  assert_int_equal(okv_status_code(st), OKV_STATUS_COPY_FAILED);
  assert_non_null(strstr(okv_status_message(st), "not readable"));
  okv_status_free(st);
  for (int i = 0; i < 4; i++) assert_true(isnan(out[i]));
  /* The next step repairs the slot: every V is 3, so is the output. */
  assert_int_equal(one_step(rt, id, T, k, v, q, draft, out), OKV_STATUS_OK);
  for (int i = 0; i < 4; i++) assert_true(fabsf(out[i] - 3.0f) < 1e-5f);
  OKV_ASSERT_OK(okv_runtime_peek_layer(rt, 1, &id, 0, 1, q, infl, out));
  for (int i = 0; i < 4; i++) assert_true(fabsf(out[i] - 3.0f) < 1e-5f);
  h2d_close(&h);
}

/* Runs body for every mode, on one_head_config of that mode. */
static void run_per_mode(void (*body)(okv_mode_t mode, okv_runtime_config_t c)) {
  for (int mode = 0; mode < OKV_MODE_COUNT; mode++) {
    okv_runtime_config_t c;
    one_head_config(&c, (okv_mode_t)mode);
    body((okv_mode_t)mode, c);
  }
}

static void test_refresh_failure_no_phantom(void **state) {
  (void)state;
  run_per_mode(refresh_failure_no_phantom);
}
static void test_released_slot_not_reused_unwritten(void **state) {
  (void)state;
  run_per_mode(released_slot_not_reused_unwritten);
}
static void test_peek_after_failed_refresh(void **state) {
  (void)state;
  run_per_mode(peek_after_failed_refresh);
}

int main(int argc, char **argv) {
  g_backend = okv_test_backend_or_skip(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_failed_transfers, setup),
      cmocka_unit_test_setup(test_alloc_failures, setup),
      cmocka_unit_test(test_host_alloc_failures),
      cmocka_unit_test_setup(test_synchronize_changes_nothing, setup),
      cmocka_unit_test_setup(test_small_device_tier, setup),
      cmocka_unit_test(test_refresh_failure_no_phantom),
      cmocka_unit_test(test_released_slot_not_reused_unwritten),
      cmocka_unit_test(test_peek_after_failed_refresh),
  };
  return cmocka_run_group_tests_name("core_runtime_faults", tests, NULL, NULL);
}
