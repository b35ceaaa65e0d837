/* The background pipeline under load (run under TSan in build-core-tsan):
 * many sequences and layers, sequences added and removed between steps while
 * their transfers are in flight, and removed mid-step (between layers). Outputs
 * are checked against the double-precision reference over the working set. */
#include "tests/core/rt_driver.h"

#include "core/runtime_internal.h"

static const char *g_backend = "cpu";

typedef struct fixture_t {
  drv_t d;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = test_calloc(1, sizeof *f);
  okv_runtime_config_t c;
  rt_config(&c, 6, 4, 2, 8);
  c.max_seqs = 10;
  c.max_context_tokens = 768;
  c.budget_blocks = 4;
  c.fetch_ratio = 0.5; /* C = 2 */
  c.dense_threshold_blocks = 2;
  okv_hal_device_params_t p;
  okv_hal_device_params_init(&p);
  p.capacity_bytes[OKV_TIER_DEVICE] = 64u << 20;
  p.n_threads = 1;
  drv_open(&f->d, g_backend, &c, &p, 42, 768);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  drv_close(&f->d);
  test_free(f);
  return 0;
}

static void test_many_seqs_add_remove(void **state) {
  fixture_t *f = *state;
  drv_t *d = &f->d;
  uint64_t free0 = okv_runtime_debug_free_slots(d->rt);
  for (uint32_t i = 0; i < 8; i++) drv_add(d, 20 + 37 * i);
  uint32_t removed = 0, added = 0;
  for (uint32_t step = 0; step < 40; step++) {
    drv_step(d, 2, 2.0f);
    if (step % 4 == 0) {
      double e = drv_check(d, false);
      if (e > 1e-4) print_error("step %u: max error %g\n", step, e);
      assert_true(e <= 1e-4);
    }
    /* Remove right after a step: the plans it issued are still in flight. */
    if (step % 5 == 2) {
      drv_remove(d, step % d->n_seqs);
      removed++;
    }
    if (step % 5 == 4 && d->n_seqs < 9) {
      drv_add(d, 30 + step);
      added++;
    }
  }
  okv_step_stats_t cum;
  OKV_ASSERT_OK(okv_runtime_stats(d->rt, UINT32_MAX, &cum));
  assert_true(cum.admitted > 0);
  assert_true(cum.blocks_moved > 0);
  assert_true(removed > 0 && added > 0);
  while (d->n_seqs > 0) drv_remove(d, 0);
  /* Every slot came back. */
  assert_int_equal(okv_runtime_debug_free_slots(d->rt), free0);
}

/* A sequence removed between layers of a step: its rows come out zero, the
 * others stay exact, and later steps run without it. */
static void test_remove_mid_step(void **state) {
  fixture_t *f = *state;
  drv_t *d = &f->d;
  for (uint32_t i = 0; i < 4; i++) drv_add(d, 100 + 10 * i);
  for (int s = 0; s < 3; s++) drv_step(d, 2, 2.0f);
  uint32_t T = 2, H = 2, hd = 8, nq = 4, n = d->n_seqs;
  uint32_t victim_id = d->ids[1];
  OKV_ASSERT_OK(okv_runtime_step_begin(d->rt, n, d->ids, T));
  size_t kvn = (size_t)H * hd;
  float *q = test_malloc(n * T * nq * hd * 4), *dr = test_malloc(n * (T - 1) * 2 * kvn * 4);
  float *k = test_malloc(n * kvn * 4), *v = test_malloc(n * kvn * 4), *out = test_malloc(n * T * nq * hd * 4);
  for (uint32_t l = 0; l < d->cfg.n_layers; l++) {
    for (size_t i = 0; i < n * T * nq * hd; i++) q[i] = okv_test_rng_normal(&d->rng);
    for (size_t i = 0; i < n * (T - 1) * 2 * kvn; i++) dr[i] = okv_test_rng_normal(&d->rng);
    for (size_t i = 0; i < n * kvn; i++) {
      k[i] = okv_test_rng_normal(&d->rng);
      v[i] = okv_test_rng_normal(&d->rng);
    }
    if (l == 3) OKV_ASSERT_OK(okv_runtime_seq_remove(d->rt, victim_id));
    OKV_ASSERT_OK(okv_runtime_step_layer(d->rt, l, k, v, q, dr, out));
    for (uint32_t i = 0; i < n; i++) {
      if (i == 1 && l >= 3) {
        for (size_t j = 0; j < (size_t)T * nq * hd; j++) assert_true(out[i * T * nq * hd + j] == 0.0f);
        continue;
      }
      rt_hist_append(&d->hist[i], l, k + i * kvn, v + i * kvn);
      if (i == 1) continue;
      for (uint32_t kvh = 0; kvh < H; kvh++) {
        uint32_t blocks[64], nb;
        OKV_ASSERT_OK(okv_runtime_seq_resident(d->rt, d->ids[i], l, kvh, blocks, 64, &nb));
        for (uint32_t t = 0; t < T; t++)
          for (uint32_t g = 0; g < 2; g++) {
            float ref[8];
            uint32_t hq = kvh * 2 + g;
            rt_ref_attend(&d->hist[i], l, kvh, q + ((i * T + t) * nq + hq) * hd, t, T, blocks, nb,
                          dr + (size_t)i * (T - 1) * 2 * kvn, T - 1, ref);
            assert_true(rt_max_abs_diff(ref, out + ((i * T + t) * nq + hq) * hd, hd) < 1e-4);
          }
      }
    }
  }
  OKV_ASSERT_OK(okv_runtime_step_end(d->rt, NULL));
  test_free(q);
  test_free(dr);
  test_free(k);
  test_free(v);
  test_free(out);
  /* Forget the removed sequence in the driver (already removed in the runtime). */
  rt_hist_free(&d->hist[1]);
  d->n_seqs--;
  d->ids[1] = d->ids[d->n_seqs];
  d->hist[1] = d->hist[d->n_seqs];
  uint32_t len;
  OKV_ASSERT_CODE(okv_runtime_seq_length(d->rt, victim_id, &len), OKV_STATUS_NOT_FOUND);
  for (int s = 0; s < 6; s++) {
    drv_step(d, 2, 2.0f);
    assert_true(drv_check(d, false) < 1e-4);
  }
  /* CMocka checks for leaks before teardown: free what the test allocated. */
  while (d->n_seqs > 0) drv_remove(d, 0);
}

int main(int argc, char **argv) {
  g_backend = okv_test_backend_or_skip(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_many_seqs_add_remove, setup, teardown),
      cmocka_unit_test_setup_teardown(test_remove_mid_step, setup, teardown),
  };
  return cmocka_run_group_tests_name("core_runtime_threads", tests, NULL, NULL);
}
