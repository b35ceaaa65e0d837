/* Selection on the device (okv_runtime_config_t.device_selection) against the host's selection, on a backend
 * (argv[1], default "cpu"):
 *  - the same workload (sequences of different lengths crossing the dense threshold, block boundaries, a
 *    sequence removed and its record reused) run twice, host and device selection: every step's hits,
 *    misses, admissions, deferrals, evictions and moved blocks are equal, and so is every output, bit for
 *    bit; after every step the slot tables agree with the maps (okv_runtime_debug_check_tables) and the
 *    outputs equal the double-precision reference over the reported working set;
 *  - the same with whole steps of failed transfers (the commit undoes the tables' admissions);
 *  - failed selection and commit kernels: absorbed and counted, outputs still exact over what is readable,
 *    the tables rewritten from the maps once the kernels work again; a commit kernel that fails while it
 *    runs is caught as the commit's own failure (not the next wait's on the stream);
 *  - the configurations it refuses (fetch_ratio_auto, remote sequences). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "tests/core/rt_driver.h"

#include "core/runtime_internal.h"
#include "oasiskv/fault.h"
#include "oasiskv/remote.h"

static const char *g_backend = "cpu";

/* Faults armed by the test: every copy while `fail_copies` is set, every kernel launch while `fail_kernels`
 * is set, or the next kernel launched on the engine thread once `fail_next_fg_kernel` is set. */
typedef struct faults_t {
  int fail_copies;
  int fail_kernels;
  int fail_next_fg_kernel; /* the next kernel launched on the engine thread (then disarmed) */
  int fail_fg_reads;       /* every buffer read on the engine thread */
  int fail_fg_writes;      /* token-write kernels (source HOST) and copies launched on the engine thread */
  pthread_t engine;
  uint64_t injected;
} faults_t;

static bool fail_op(void *user, okv_hal_op_t op, okv_tier_t src, okv_tier_t dst) {
  faults_t *f = user;
  (void)src;
  (void)dst;
  bool next = op == OKV_HAL_OP_KERNEL && pthread_equal(pthread_self(), f->engine) &&
              __atomic_exchange_n(&f->fail_next_fg_kernel, 0, __ATOMIC_ACQ_REL);
  bool hit = next || (op == OKV_HAL_OP_COPY && __atomic_load_n(&f->fail_copies, __ATOMIC_ACQUIRE)) ||
             (op == OKV_HAL_OP_BUFFER_READ && pthread_equal(pthread_self(), f->engine) &&
              __atomic_load_n(&f->fail_fg_reads, __ATOMIC_ACQUIRE)) ||
             (((op == OKV_HAL_OP_KERNEL && src == OKV_TIER_HOST) || op == OKV_HAL_OP_COPY) &&
              pthread_equal(pthread_self(), f->engine) && __atomic_load_n(&f->fail_fg_writes, __ATOMIC_ACQUIRE)) ||
             (op == OKV_HAL_OP_KERNEL && __atomic_load_n(&f->fail_kernels, __ATOMIC_ACQUIRE));
  if (hit) __atomic_add_fetch(&f->injected, 1, __ATOMIC_RELAXED);
  return hit;
}

static okv_hal_device_params_t params(void) {
  okv_hal_device_params_t p;
  okv_hal_device_params_init(&p);
  p.capacity_bytes[OKV_TIER_DEVICE] = 64u << 20;
  p.capacity_bytes[OKV_TIER_HOST] = 256u << 20;
  p.n_threads = 1;
  return p;
}

static void config(okv_runtime_config_t *c, okv_mode_t mode, okv_scoring_t scoring, bool device) {
  rt_config(c, 3, 4, 2, 16);
  c->max_seqs = 4;
  c->max_context_tokens = 1024;
  c->budget_blocks = 6;
  c->fetch_ratio = 0.34; /* C = 3 */
  c->mode = mode;
  c->scoring = scoring;
  c->device_selection = device;
}

static void assert_stats_equal(const okv_step_stats_t *a, const okv_step_stats_t *b, uint32_t step) {
  if (a->hits != b->hits || a->misses != b->misses || a->admitted != b->admitted || a->deferred != b->deferred ||
      a->evicted != b->evicted || a->blocks_moved != b->blocks_moved || a->failed_blocks != b->failed_blocks) {
    print_error(
        "step %u: host hits %llu misses %llu admitted %llu deferred %llu evicted %llu moved %llu failed %llu;"
        " device %llu %llu %llu %llu %llu %llu %llu\n",
        step, (unsigned long long)a->hits, (unsigned long long)a->misses, (unsigned long long)a->admitted,
        (unsigned long long)a->deferred, (unsigned long long)a->evicted, (unsigned long long)a->blocks_moved,
        (unsigned long long)a->failed_blocks, (unsigned long long)b->hits, (unsigned long long)b->misses,
        (unsigned long long)b->admitted, (unsigned long long)b->deferred, (unsigned long long)b->evicted,
        (unsigned long long)b->blocks_moved, (unsigned long long)b->failed_blocks);
    fail();
  }
}

/* Host and device selection on one workload; copy faults on the steps where step % copy_fault_every == 1
 * (0: none). Returns the device run's cumulative stats. */
static okv_step_stats_t run_pair(okv_mode_t mode, okv_scoring_t scoring, uint32_t copy_fault_every) {
  okv_hal_device_params_t p = params();
  drv_t *d[2];
  faults_t f[2];
  memset(f, 0, sizeof f);
  okv_hal_fault_hooks_t hooks[2] = {{&f[0], NULL, NULL, fail_op}, {&f[1], NULL, NULL, fail_op}};
  uint32_t T = mode == OKV_MODE_OASIS ? 2u : 1u;
  for (int i = 0; i < 2; i++) {
    okv_runtime_config_t c;
    config(&c, mode, scoring, i == 1);
    d[i] = test_calloc(1, sizeof(drv_t));
    drv_open(d[i], g_backend, &c, &p, 77, 1024);
    OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(d[i]->dev, &hooks[i]));
    d[i]->track_jobs = true;
    drv_add(d[i], 300); /* sparse from the start */
    drv_add(d[i], 91);  /* crosses the dense threshold (K = 6 blocks) during the run */
    drv_add(d[i], 0);   /* empty */
  }
  uint32_t n_steps = 90;
  for (uint32_t s = 0; s < n_steps; s++) {
    if (s == 40)
      for (int i = 0; i < 2; i++) { /* remove the long one; its record is reused by the next add */
        drv_remove(d[i], 0);
        drv_add(d[i], 200);
      }
    bool faulty = copy_fault_every > 0 && s % copy_fault_every == 1;
    for (int i = 0; i < 2; i++) __atomic_store_n(&f[i].fail_copies, faulty ? 1 : 0, __ATOMIC_RELEASE);
    for (int i = 0; i < 2; i++) drv_step(d[i], T, 3.0f);
    for (int i = 0; i < 2; i++) __atomic_store_n(&f[i].fail_copies, 0, __ATOMIC_RELEASE);
    assert_stats_equal(&d[0]->last_jobs, &d[1]->last_jobs, s);
    size_t n_out = (size_t)d[0]->cfg.n_layers * DRV_MAX_SEQS * 4 * d[0]->cfg.n_q_heads * d[0]->cfg.head_dim;
    /* Attention reads the device run's working sets from the tables, in table order, not the maps' order:
     * the same blocks summed in another order, equal to float rounding. */
    double worst = 0;
    for (size_t i = 0; i < n_out; i++) {
      double a = d[0]->out[i], b = d[1]->out[i];
      if (isnan(a) != isnan(b)) worst = INFINITY;
      if (!isnan(a) && !isnan(b) && fabs(a - b) / (1.0 + fabs(a)) > worst) worst = fabs(a - b) / (1.0 + fabs(a));
    }
    if (!(worst <= 4e-6)) {
      print_error("step %u: outputs differ between host and device selection by %g\n", s, worst);
      fail();
    }
    if (getenv("OKV_TEST_VERBOSE")) print_message("step %u: worst %g\n", s, worst);
    OKV_ASSERT_OK(okv_runtime_debug_check_tables(d[1]->rt));
    double e = drv_check(d[1], false);
    if (!(e < 3e-5)) {
      print_error("step %u: |out - reference| = %g\n", s, e);
      fail();
    }
  }
  okv_step_stats_t cum;
  OKV_ASSERT_OK(okv_runtime_stats(d[1]->rt, UINT32_MAX, &cum));
  if (copy_fault_every > 0) assert_true(f[1].injected > 0 && cum.failed_blocks > 0);
  for (int i = 0; i < 2; i++) {
    OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(d[i]->dev, NULL));
    drv_close(d[i]);
    test_free(d[i]);
  }
  return cum;
}

/* A step over the driver's two sequences with the real token and one draft token (T = 2), driven layer by
 * layer by the caller. */
static void begin_two(drv_t *d) {
  uint32_t ids[2] = {d->ids[0], d->ids[1]};
  OKV_ASSERT_OK(okv_runtime_step_begin(d->rt, 2, ids, 2));
  d->T = 2;
  d->step_n = 2;
  d->step_slot[0] = 0;
  d->step_slot[1] = 1;
}

/* Random queries (scale 3), draft K/V and the real token's K/V of layer l for those two sequences. */
static void fill_layer(drv_t *d, uint32_t l, size_t kvn, float **q, float **dr, float **k, float **v) {
  *q = drv_q(d, l), *dr = drv_draft(d, l), *k = drv_k(d, l), *v = drv_v(d, l);
  for (size_t i = 0; i < 2 * drv_q_elems(d); i++) (*q)[i] = 3.0f * okv_test_rng_normal(&d->rng);
  for (size_t i = 0; i < 2 * 2 * kvn; i++) (*dr)[i] = okv_test_rng_normal(&d->rng);
  for (size_t i = 0; i < 2 * kvn; i++) {
    (*k)[i] = okv_test_rng_normal(&d->rng);
    (*v)[i] = okv_test_rng_normal(&d->rng);
  }
}

static void test_equals_host_oasis(void **state) {
  (void)state;
  okv_step_stats_t c = run_pair(OKV_MODE_OASIS, OKV_SCORING_Q8, 0);
  /* The workload exercises what it claims: admissions, evictions by the cap and deferrals. */
  assert_true(c.admitted > 50 && c.evicted > 20 && c.deferred > 0 && c.hits > c.admitted);
  assert_int_equal(c.pipeline_errors, 0);
}

static void test_equals_host_proxy_flat(void **state) {
  (void)state;
  okv_step_stats_t c = run_pair(OKV_MODE_PROXY, OKV_SCORING_FLAT, 0);
  assert_true(c.admitted > 50 && c.evicted > 20);
}

static void test_equals_host_copy_faults(void **state) {
  (void)state;
  okv_step_stats_t c = run_pair(OKV_MODE_OASIS, OKV_SCORING_FLAT, 4);
  assert_true(c.admitted > 20);
}

/* Failed kernels (the selection's and the commit's among them) during some steps: absorbed and counted; every
 * OK output exact over what is readable; afterwards the tables equal the maps and selection admits again. */
static void test_kernel_faults(void **state) {
  (void)state;
  okv_hal_device_params_t p = params();
  faults_t f;
  memset(&f, 0, sizeof f);
  okv_hal_fault_hooks_t hooks = {&f, NULL, NULL, fail_op};
  okv_runtime_config_t c;
  config(&c, OKV_MODE_OASIS, OKV_SCORING_FLAT, true);
  drv_t *d = test_calloc(1, sizeof(drv_t));
  drv_open(d, g_backend, &c, &p, 5, 1024);
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(d->dev, &hooks));
  d->track_jobs = true;
  drv_add(d, 260);
  drv_add(d, 150);
  size_t kvn = drv_kv_elems(d);
  uint64_t errors = 0;
  for (uint32_t s = 0; s < 30; s++) {
    /* Kernels fail from the middle of layer 1 on: the foreground's layers see failed attention (NaN out, an
     * error), the background's selections and commits fail and are absorbed. */
    bool faulty = s >= 10 && s < 14;
    begin_two(d);
    for (uint32_t l = 0; l < c.n_layers; l++) {
      float *q, *dr, *k, *v;
      fill_layer(d, l, kvn, &q, &dr, &k, &v);
      __atomic_store_n(&f.fail_kernels, faulty && l >= 1 ? 1 : 0, __ATOMIC_RELEASE);
      okv_status_t st = okv_runtime_step_layer(d->rt, l, k, v, q, dr, drv_out(d, l));
      okv_status_code_t code = okv_status_code(st);
      okv_status_free(st);
      assert_true(code != OKV_STATUS_INVALID_ARGUMENT);
      for (uint32_t i = 0; i < 2; i++) rt_hist_append(&d->hist[i], l, k + i * kvn, v + i * kvn);
    }
    OKV_ASSERT_OK(okv_runtime_step_end(d->rt, &d->last_stats));
    okv_runtime_debug_drain(d->rt);
    __atomic_store_n(&f.fail_kernels, 0, __ATOMIC_RELEASE);
    rt_stats_since(d->rt, UINT32_MAX, &d->cum_prev, &d->last_jobs);
    errors += d->last_jobs.pipeline_errors;
    if (!faulty) {
      double e = drv_check(d, false);
      if (!(e < 3e-5)) {
        print_error("step %u: |out - reference| = %g\n", s, e);
        fail();
      }
    }
  }
  assert_true(f.injected > 0);
  assert_true(errors > 0);
  OKV_ASSERT_OK(okv_runtime_debug_check_tables(d->rt));
  /* After recovery nothing is dirty and selection admits again. */
  for (uint32_t l = 0; l < c.n_layers; l++) assert_int_equal(d->rt->sel_dirty[l], 0);
  drv_step(d, 2, 3.0f);
  drv_step(d, 2, 3.0f);
  assert_true(d->last_jobs.hits > 0);
  assert_int_equal(d->last_jobs.pipeline_errors, 0);
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(d->dev, NULL));
  drv_close(d);
  test_free(d);
}

/* The commit kernel fails while it runs (the first kernel a step_layer launches with a plan to commit): the
 * failure is its own, not the next wait's on the stream. Absorbed and counted; the tables are rewritten from
 * the maps; every output is exact over what is readable and the tables agree with the maps after every
 * step. (No host run beside it: after a rewrite the tables' LRU dates from the maps' last refresh, so
 * decisions may differ from host selection's.) */
static void test_commit_kernel_fault(void **state) {
  (void)state;
  okv_hal_device_params_t p = params();
  faults_t f;
  memset(&f, 0, sizeof f);
  f.engine = pthread_self();
  okv_hal_fault_hooks_t hooks = {&f, NULL, NULL, fail_op};
  okv_runtime_config_t c;
  config(&c, OKV_MODE_PROXY, OKV_SCORING_FLAT, true);
  drv_t *d = test_calloc(1, sizeof(drv_t));
  drv_open(d, g_backend, &c, &p, 9, 1024);
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(d->dev, &hooks));
  d->track_jobs = true;
  drv_add(d, 160);
  drv_add(d, 300);
  uint64_t errors = 0;
  for (uint32_t s = 0; s < 40; s++) {
    if (s % 3 == 2) __atomic_store_n(&f.fail_next_fg_kernel, 1, __ATOMIC_RELEASE); /* layer 0's commit */
    drv_step(d, 1, 3.0f);
    __atomic_store_n(&f.fail_next_fg_kernel, 0, __ATOMIC_RELEASE);
    errors += d->last_jobs.pipeline_errors;
    double e = drv_check(d, false);
    if (!(e < 3e-5)) {
      print_error("step %u: |out - reference| = %g\n", s, e);
      fail();
    }
    OKV_ASSERT_OK(okv_runtime_debug_check_tables(d->rt));
  }
  assert_true(f.injected >= 10);
  assert_true(errors >= 10); /* counted as the commit's, each time */
  okv_step_stats_t cum;
  OKV_ASSERT_OK(okv_runtime_stats(d->rt, UINT32_MAX, &cum));
  assert_true(cum.admitted > 20);
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(d->dev, NULL));
  drv_close(d);
  test_free(d);
}

/* Tables that disagree with the maps (here: every table of layer 1 overwritten with another head's, as a
 * stray device write would leave them): plans that do not fit the maps are refused entry by entry, counted,
 * and the layer's tables rewritten from the maps; no slot is lost (the maps' invariants hold), and selection
 * admits again afterwards. Attention reads its working sets from the tables, as it reads the slot pool:
 * device memory it trusts, so the step that meets the stray write reads the wrong blocks at that layer;
 * every other step's output is exact over what is readable (the next one included: recovery takes one step). */
static void test_corrupt_tables(void **state) {
  (void)state;
  okv_hal_device_params_t p = params();
  okv_runtime_config_t c;
  config(&c, OKV_MODE_OASIS, OKV_SCORING_FLAT, true);
  drv_t *d = test_calloc(1, sizeof(drv_t));
  drv_open(d, g_backend, &c, &p, 13, 1024);
  d->track_jobs = true;
  drv_add(d, 250);
  drv_add(d, 180);
  okv_runtime_t *rt = d->rt;
  uint64_t tb = rt->sel_table_bytes, per_layer = (uint64_t)c.max_seqs * c.n_kv_heads * tb;
  uint8_t *img = test_malloc(per_layer);
  uint64_t errors = 0;
  for (uint32_t s = 0; s < 24; s++) {
    if (s == 6 || s == 13) { /* table (seq, h) of layer 1 := table (seq, h ^ 1) of layer 1: wrong blocks */
      OKV_ASSERT_OK(okv_hal_buffer_read(rt->sel_tables, per_layer, img, per_layer));
      for (uint64_t t = 0; t + 1 < (uint64_t)c.max_seqs * c.n_kv_heads; t += 2) {
        uint8_t *a = img + t * tb, *b = a + tb;
        for (uint64_t k = 0; k < tb; k++) {
          uint8_t x = a[k];
          a[k] = b[k];
          b[k] = x;
        }
      }
      OKV_ASSERT_OK(okv_hal_buffer_write(rt->sel_tables, per_layer, img, per_layer));
    }
    drv_step(d, 2, 3.0f);
    errors += d->last_jobs.pipeline_errors;
    double e = s == 6 || s == 13 ? 0.0 : drv_check(d, false); /* not those read through the swapped tables */
    if (!(e < 3e-5)) {
      print_error("step %u: |out - reference| = %g\n", s, e);
      fail();
    }
    for (uint32_t i = 0; i < d->n_seqs; i++)
      for (uint32_t l = 0; l < c.n_layers; l++)
        for (uint32_t h = 0; h < c.n_kv_heads; h++)
          OKV_ASSERT_OK(okv_block_map_check(okv_runtime_debug_map(rt, d->ids[i], l, h)));
  }
  assert_true(errors > 0); /* the mismatch was seen, not silently applied */
  OKV_ASSERT_OK(okv_runtime_debug_check_tables(rt));
  drv_step(d, 2, 3.0f);
  drv_step(d, 2, 3.0f);
  assert_true(d->last_jobs.admitted > 0);
  assert_int_equal(d->last_jobs.pipeline_errors, 0);
  test_free(img);
  drv_close(d);
  test_free(d);
}

/* The maps lag the tables (docs/api.md "Selection on the device"): a reader rebuilds them first.
 *  - okv_runtime_seq_resident whose table read fails returns the read's error and changes nothing; the next
 *    call reads the tables and lists exactly their committed, readable blocks;
 *  - a read that fails inside a step (the rebuild before a new active block) leaves each of the sequence's
 *    heads of that layer with its active block only (then the new one), counted as a pipeline error; the
 *    layer's tables are rewritten at its next commit, every later output is exact over what is readable, and
 *    selection fills the working set again. */
static void test_lagging_maps(void **state) {
  (void)state;
  okv_hal_device_params_t p = params();
  faults_t f;
  memset(&f, 0, sizeof f);
  f.engine = pthread_self();
  okv_hal_fault_hooks_t hooks = {&f, NULL, NULL, fail_op};
  okv_runtime_config_t c;
  config(&c, OKV_MODE_OASIS, OKV_SCORING_FLAT, true);
  drv_t *d = test_calloc(1, sizeof(drv_t));
  drv_open(d, g_backend, &c, &p, 17, 1024);
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(d->dev, &hooks));
  d->track_jobs = true;
  drv_add(d, 250); /* 250 tokens: the step that appends token 256 starts block 16 */
  drv_add(d, 180);
  okv_runtime_t *rt = d->rt;
  for (uint32_t s = 0; s < 5; s++) drv_step(d, 2, 3.0f);
  uint32_t blocks[64], nb = 0, nb2 = 0;
  __atomic_store_n(&f.fail_fg_reads, 1, __ATOMIC_RELEASE);
  okv_status_t st = okv_runtime_seq_resident(rt, d->ids[0], 1, 0, blocks, 64, &nb);
  __atomic_store_n(&f.fail_fg_reads, 0, __ATOMIC_RELEASE);
  assert_int_equal(okv_status_code(st), OKV_STATUS_COPY_FAILED);
  okv_status_free(st);
  assert_int_equal(rt->sel_dirty[1], 0);
  assert_int_equal(rt->sel_lag[1 * c.max_seqs + 0], 1); /* still behind: nothing changed */
  OKV_ASSERT_OK(okv_runtime_seq_resident(rt, d->ids[0], 1, 0, blocks, 64, &nb));
  /* Exactly the table's committed blocks with readable tokens. */
  uint64_t tb = rt->sel_table_bytes;
  uint32_t *t = test_malloc(tb);
  OKV_ASSERT_OK(okv_hal_buffer_read(rt->sel_tables, (uint64_t)(1 * c.max_seqs + 0) * c.n_kv_heads * tb, t, tb));
  const uint32_t R = rt->sel_R, active = (250u + 5u - 1u) / 16u;
  const uint64_t *bits = (const uint64_t *)(const void *)(t + 4u * R);
  uint32_t want = 0;
  for (uint32_t j = 0; j < R; j++) {
    uint32_t b = t[j];
    if (b == OKV_SLOT_FREE || !((bits[b >> 6] >> (b & 63u)) & 1u) || (b != active && t[2u * R + j] == 0)) continue;
    bool listed = false;
    for (uint32_t i = 0; i < nb; i++) listed |= blocks[i] == b;
    assert_true(listed);
    want++;
  }
  assert_int_equal(nb, want);
  assert_true(nb > 1);
  test_free(t);
  OKV_ASSERT_OK(okv_runtime_debug_check_tables(rt));
  /* Token 256 of sequence 0 starts block 16 at the step after the next: every engine-thread read of that step
   * fails, the rebuild before the new active block among them. */
  drv_step(d, 2, 3.0f);
  __atomic_store_n(&f.fail_fg_reads, 1, __ATOMIC_RELEASE);
  drv_step(d, 2, 3.0f);
  __atomic_store_n(&f.fail_fg_reads, 0, __ATOMIC_RELEASE);
  assert_int_equal(d->last_layer_code, OKV_STATUS_COPY_FAILED); /* attention's output reads failed too */
  assert_true(d->last_stats.pipeline_errors > 0);
  /* Every layer's rebuild failed before the new block: the then active block 15 only, and the new one. */
  for (uint32_t l = 0; l < c.n_layers; l++) {
    OKV_ASSERT_OK(okv_runtime_seq_resident(rt, d->ids[0], l, 0, blocks, 64, &nb));
    assert_int_equal(nb, 2);
    assert_int_equal(blocks[0], 15);
    assert_int_equal(blocks[1], 16);
    assert_int_equal(rt->sel_dirty[l], 1);
  }
  OKV_ASSERT_OK(okv_runtime_seq_resident(rt, d->ids[1], 1, 0, blocks, 64, &nb2));
  assert_true(nb2 >= 1);
  for (uint32_t s = 0; s < 12; s++) {
    drv_step(d, 2, 3.0f);
    double e = drv_check(d, false);
    if (!(e < 3e-5)) {
      print_error("step %u after the failed rebuild: |out - reference| = %g\n", s, e);
      fail();
    }
    assert_int_equal(d->last_layer_code, OKV_STATUS_OK);
  }
  OKV_ASSERT_OK(okv_runtime_debug_check_tables(rt));
  for (uint32_t l = 0; l < c.n_layers; l++) assert_int_equal(rt->sel_dirty[l], 0);
  OKV_ASSERT_OK(okv_runtime_seq_resident(rt, d->ids[0], 1, 0, blocks, 64, &nb));
  assert_true(nb > 1); /* selection admitted again */
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(d->dev, NULL));
  drv_close(d);
  test_free(d);
}

/* One step of every sequence with T = 2 whose layers may fail with any code but INVALID_ARGUMENT (drv_step
 * accepts COPY_FAILED only; a failed kernel reports INTERNAL); the first failure in last_layer_code. */
static void step_any(drv_t *d) {
  const uint32_t T = 2, n = d->n_seqs;
  uint32_t ids[DRV_MAX_SEQS];
  d->T = T;
  d->step_n = n;
  d->last_layer_code = OKV_STATUS_OK;
  for (uint32_t i = 0; i < n; i++) {
    d->step_slot[i] = i;
    ids[i] = d->ids[i];
  }
  OKV_ASSERT_OK(okv_runtime_step_begin(d->rt, n, ids, T));
  size_t kvn = drv_kv_elems(d);
  for (uint32_t l = 0; l < d->cfg.n_layers; l++) {
    float *q, *dr, *k, *v;
    fill_layer(d, l, kvn, &q, &dr, &k, &v);
    okv_status_t st = okv_runtime_step_layer(d->rt, l, k, v, q, dr, drv_out(d, l));
    okv_status_code_t code = okv_status_code(st);
    okv_status_free(st);
    assert_true(code != OKV_STATUS_INVALID_ARGUMENT);
    if (code != OKV_STATUS_OK && d->last_layer_code == OKV_STATUS_OK) d->last_layer_code = code;
    for (uint32_t i = 0; i < n; i++) rt_hist_append(&d->hist[i], l, k + i * kvn, v + i * kvn);
  }
  OKV_ASSERT_OK(okv_runtime_step_end(d->rt, &d->last_stats));
}

/* Write currency survives a rebuild (found by a review of the lagging maps): the host is the record of which
 * slots a completed write made readable, the tables only of what the commits admitted. Step 5 fails the
 * token writes, so block 15 of sequence 0 misses its last token; at step 6 block 16 starts and block 15's
 * repair copy fails too, after attention ran with the deferred batch's marks provisional (which the tables
 * took). With `share` (track_fetch_share: attention at the share layer reads the maps' list, so the tables
 * keep their older count) step 6 runs clean instead and the repair lands. Either way a rebuild must keep
 * the map's count: afterwards no head holds block 15 short of its tokens without a repair pending, and
 * every output is exact over what is readable, as with host selection. */
static void run_repair_case(bool share, bool device) {
  okv_hal_device_params_t p = params();
  faults_t f;
  memset(&f, 0, sizeof f);
  f.engine = pthread_self();
  okv_hal_fault_hooks_t hooks = {&f, NULL, NULL, fail_op};
  okv_runtime_config_t c;
  config(&c, OKV_MODE_OASIS, OKV_SCORING_FLAT, device);
  c.track_fetch_share = share;
  drv_t *d = test_calloc(1, sizeof(drv_t));
  drv_open(d, g_backend, &c, &p, 17, 1024);
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(d->dev, &hooks));
  drv_add(d, 250); /* step 5 appends token 255 (block 15's last), step 6 token 256 (block 16's first) */
  drv_add(d, 180);
  for (uint32_t s = 0; s < 5; s++) drv_step(d, 2, 3.0f);
  __atomic_store_n(&f.fail_fg_writes, 1, __ATOMIC_RELEASE);
  step_any(d);
  if (share) __atomic_store_n(&f.fail_fg_writes, 0, __ATOMIC_RELEASE);
  assert_int_not_equal(d->last_layer_code, OKV_STATUS_OK);
  step_any(d);
  __atomic_store_n(&f.fail_fg_writes, 0, __ATOMIC_RELEASE);
  assert_true(f.injected > 0);
  for (uint32_t s = 0; s < 4; s++) {
    drv_step(d, 2, 3.0f);
    assert_int_equal(d->last_layer_code, OKV_STATUS_OK);
    double e = drv_check(d, false);
    if (!(e < 3e-5)) {
      print_error("share %d device %d, step %u after the repair: |out - reference| = %g\n", share, device, s, e);
      fail();
    }
    for (uint32_t l = 0; l < c.n_layers; l++)
      for (uint32_t h = 0; h < c.n_kv_heads; h++) {
        const okv_block_map_t *m = okv_runtime_debug_map(d->rt, d->ids[0], l, h);
        if (okv_block_map_is_resident(m, 15) && okv_block_map_tokens(m, 15) < 16 && !m->needs_repair) {
          print_error("share %d device %d, layer %u head %u: block 15 short of its tokens, no repair pending\n", share,
                      device, l, h);
          fail();
        }
      }
  }
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(d->dev, NULL));
  drv_close(d);
  test_free(d);
}

static void test_write_currency_rebuild(void **state) {
  (void)state;
  for (int device = 0; device < 2; device++) {
    run_repair_case(false, device != 0);
    run_repair_case(true, device != 0);
  }
}

/* A failed transfer is committed as failed whatever the threads' timing (found by a review, and not specific to
 * device selection): a layer's commit that found its own transfer failed synchronized the copy stream while
 * the background thread had issued another layer's batch, which failed, without recording that batch's event
 * yet; the synchronize took the failure, the event then reported success, and the layer's next commit mapped
 * blocks that never landed, which attention read as current. Forced through the fault hooks: every background
 * copy of step 5 fails (so each layer's commit at step 6 takes the failed-transfer path), and at step 6, after
 * layer 0, the background thread's next copy fails and its event record waits until the engine thread enters
 * a synchronize (at most 0.5 s) and 100 ms more. Every output of every step must equal the double-precision
 * reference over what is readable; with host and with device selection. */
typedef struct race_t {
  int phase, copy_failed, in_record, engine_in_sync;
  pthread_t engine;
} race_t;

static bool race_op(void *user, okv_hal_op_t op, okv_tier_t src, okv_tier_t dst) {
  race_t *r = user;
  (void)src;
  (void)dst;
  bool engine = pthread_equal(pthread_self(), r->engine);
  int phase = __atomic_load_n(&r->phase, __ATOMIC_ACQUIRE);
  if (phase == 1) return !engine && op == OKV_HAL_OP_COPY;
  if (phase != 2) return false;
  if (!engine && op == OKV_HAL_OP_COPY) return !__atomic_exchange_n(&r->copy_failed, 1, __ATOMIC_ACQ_REL);
  if (!engine && op == OKV_HAL_OP_EVENT_RECORD && __atomic_load_n(&r->copy_failed, __ATOMIC_ACQUIRE) &&
      !__atomic_exchange_n(&r->in_record, 1, __ATOMIC_ACQ_REL)) {
    for (int i = 0; i < 500 && !__atomic_load_n(&r->engine_in_sync, __ATOMIC_ACQUIRE); i++) usleep(1000);
    usleep(100000); /* the engine's synchronize runs meanwhile */
    return false;
  }
  if (engine && op == OKV_HAL_OP_STREAM_SYNC && !__atomic_load_n(&r->engine_in_sync, __ATOMIC_ACQUIRE)) {
    for (int i = 0; i < 500 && !__atomic_load_n(&r->in_record, __ATOMIC_ACQUIRE); i++) usleep(1000);
    __atomic_store_n(&r->engine_in_sync, 1, __ATOMIC_RELEASE);
  }
  return false;
}

static void test_failed_transfer_race(void **state) {
  (void)state;
  for (int device = 0; device < 2; device++) {
    okv_hal_device_params_t p = params();
    race_t r;
    memset(&r, 0, sizeof r);
    r.engine = pthread_self();
    okv_hal_fault_hooks_t hooks = {&r, NULL, NULL, race_op};
    okv_runtime_config_t c;
    config(&c, OKV_MODE_OASIS, OKV_SCORING_FLAT, device == 1);
    drv_t *d = test_calloc(1, sizeof(drv_t));
    drv_open(d, g_backend, &c, &p, 21, 1024);
    OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(d->dev, &hooks));
    drv_add(d, 260);
    drv_add(d, 150);
    size_t kvn = drv_kv_elems(d);
    for (uint32_t s = 0; s < 12; s++) {
      if (s <= 6) __atomic_store_n(&r.phase, s == 5 ? 1 : 0, __ATOMIC_RELEASE); /* 2 from step 6, layer 1 on */
      begin_two(d);
      for (uint32_t l = 0; l < c.n_layers; l++) {
        float *q, *dr, *k, *v;
        fill_layer(d, l, kvn, &q, &dr, &k, &v);
        OKV_ASSERT_OK(okv_runtime_step_layer(d->rt, l, k, v, q, dr, drv_out(d, l)));
        for (uint32_t i = 0; i < 2; i++) rt_hist_append(&d->hist[i], l, k + i * kvn, v + i * kvn);
        if (s == 6 && l == 0) __atomic_store_n(&r.phase, 2, __ATOMIC_RELEASE);
      }
      OKV_ASSERT_OK(okv_runtime_step_end(d->rt, &d->last_stats));
      double e = drv_check(d, false);
      if (!(e < 3e-5)) {
        print_error("%s selection, step %u: |out - reference| = %g\n", device ? "device" : "host", s, e);
        fail();
      }
    }
    assert_int_equal(r.copy_failed, 1); /* the race was set up (each hook acts once, whatever the timing) */
    assert_int_equal(r.in_record, 1);
    OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(d->dev, NULL));
    drv_close(d);
    test_free(d);
  }
}

/* A peek reads the working sets from the tables and checks only each head's active block on the maps: the maps
 * lag the tables and, since new active blocks are placed on the tables themselves, may still list any number
 * of blocks the tables evicted since (a peek that listed them wrote past the working-set arrays; found in
 * review). Four sequences over seven block boundaries with no reader in between (readers rebuild the maps),
 * then a peek of every layer: exact over what the tables hold, and nothing committed. */
static void test_peek_lagging_maps(void **state) {
  (void)state;
  okv_hal_device_params_t p = params();
  okv_runtime_config_t c;
  config(&c, OKV_MODE_OASIS, OKV_SCORING_FLAT, true);
  drv_t *d = test_calloc(1, sizeof(drv_t));
  drv_open(d, g_backend, &c, &p, 21, 1024);
  for (uint32_t i = 0; i < 4; i++) drv_add(d, 150 + 5 * i);
  for (uint32_t s = 0; s < 112; s++) drv_step(d, 2, 3.0f);
  const uint32_t H = c.n_kv_heads, G = c.n_q_heads / H, hd = c.head_dim, nq = c.n_q_heads;
  float *q = test_malloc(4 * nq * hd * sizeof(float)), *infl = test_malloc(4 * 2 * H * hd * sizeof(float));
  float *out = test_malloc(4 * nq * hd * sizeof(float)), ref[16];
  assert_true(hd <= 16);
  double worst = 0;
  for (uint32_t l = 0; l < c.n_layers; l++) {
    for (size_t i = 0; i < 4 * nq * hd; i++) q[i] = 3.0f * okv_test_rng_normal(&d->rng);
    for (size_t i = 0; i < 4 * 2 * H * hd; i++) infl[i] = okv_test_rng_normal(&d->rng);
    OKV_ASSERT_OK(okv_runtime_peek_layer(d->rt, 4, d->ids, l, 1, q, infl, out));
    for (uint32_t i = 0; i < 4; i++)
      for (uint32_t kvh = 0; kvh < H; kvh++) {
        uint32_t blocks[64], nb = 0;
        OKV_ASSERT_OK(okv_runtime_seq_resident(d->rt, d->ids[i], l, kvh, blocks, 64, &nb));
        assert_true(nb >= 1 && nb <= c.budget_blocks + 1u);
        for (uint32_t g = 0; g < G; g++) {
          uint32_t hq = kvh * G + g;
          rt_ref_attend(&d->hist[i], l, kvh, q + ((size_t)i * nq + hq) * hd, 0, 1, blocks, nb,
                        infl + (size_t)i * 2 * H * hd, 1, ref);
          double e = rt_max_abs_diff(ref, out + ((size_t)i * nq + hq) * hd, hd);
          if (e > worst) worst = e;
        }
      }
  }
  assert_true(worst < 3e-5);
  drv_step(d, 2, 3.0f); /* and the steps go on */
  assert_true(drv_check(d, false) < 3e-5);
  test_free(q);
  test_free(infl);
  test_free(out);
  drv_close(d);
  test_free(d);
}

static void test_refusals(void **state) {
  (void)state;
  okv_runtime_config_t c;
  config(&c, OKV_MODE_OASIS, OKV_SCORING_FLAT, true);
  c.fetch_ratio_auto = true;
  okv_status_t st = okv_runtime_config_validate(&c);
  assert_int_equal(okv_status_code(st), OKV_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(okv_status_message(st), "device_selection"));
  okv_status_free(st);
  /* Ignored (valid) where there is no pipeline. */
  c.mode = OKV_MODE_ONDEMAND;
  OKV_ASSERT_OK(okv_runtime_config_validate(&c));
  /* Remote sequences are refused with a one-line reason, nothing allocated. */
  config(&c, OKV_MODE_OASIS, OKV_SCORING_FLAT, true);
  okv_hal_device_params_t p = params();
  drv_t *d = test_calloc(1, sizeof(drv_t));
  drv_open(d, g_backend, &c, &p, 1, 1024);
  okv_remote_prefill_t rp;
  memset(&rp, 0, sizeof rp);
  rp.n_tokens = 32;
  uint32_t id = 0;
  st = okv_runtime_seq_add_remote(d->rt, &rp, &id);
  assert_int_equal(okv_status_code(st), OKV_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(okv_status_message(st), "device_selection"));
  okv_status_free(st);
  drv_close(d);
  test_free(d);
}

int main(int argc, char **argv) {
  g_backend = okv_test_backend_or_skip(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_equals_host_oasis),
      cmocka_unit_test(test_equals_host_proxy_flat),
      cmocka_unit_test(test_equals_host_copy_faults),
      cmocka_unit_test(test_kernel_faults),
      cmocka_unit_test(test_commit_kernel_fault),
      cmocka_unit_test(test_corrupt_tables),
      cmocka_unit_test(test_lagging_maps),
      cmocka_unit_test(test_write_currency_rebuild),
      cmocka_unit_test(test_failed_transfer_race),
      cmocka_unit_test(test_peek_lagging_maps),
      cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests_name("core_device_select", tests, NULL, NULL);
}
