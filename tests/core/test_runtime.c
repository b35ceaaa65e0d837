/* End-to-end tests of the runtime on a backend (argv[1], default "cpu"):
 * config validation, argument errors, every mode equal to dense attention when
 * K covers the context, outputs equal to a double-precision reference over the
 * reported working set when K < context, runtime-level properties under a long
 * random workload (cap, K + 1 bound, bijection, active block resident,
 * determinism), stats, capacity and OUT_OF_MEMORY behaviour, peek. */
#include <time.h>

#include "tests/core/rt_driver.h"

#include "core/runtime_internal.h"

static const char *g_backend = "cpu";

static void base_config(okv_runtime_config_t *c) {
  rt_config(c, 2, 4, 2, 16);
  c->max_seqs = 4;
  c->max_context_tokens = 1024;
}

/* base_config with a working set of K = budget_blocks blocks and a cap of
 * C = ceil(fetch_ratio * K) new blocks per step. */
static void budget_config(okv_runtime_config_t *c, uint32_t budget_blocks, double fetch_ratio) {
  base_config(c);
  c->budget_blocks = budget_blocks;
  c->fetch_ratio = fetch_ratio;
}

static okv_hal_device_params_t small_params(void) {
  okv_hal_device_params_t p;
  okv_hal_device_params_init(&p);
  p.capacity_bytes[OKV_TIER_DEVICE] = 64u << 20;
  p.capacity_bytes[OKV_TIER_HOST] = 256u << 20;
  p.n_threads = 1; /* one kernel thread: TSan cannot see OpenMP's own synchronisation */
  return p;
}

static void expect_invalid(const okv_runtime_config_t *c, const char *field) {
  okv_status_t st = okv_runtime_config_validate(c);
  if (okv_status_code(st) != OKV_STATUS_INVALID_ARGUMENT || strstr(okv_status_message(st), field) == NULL) {
    print_error("expected INVALID_ARGUMENT naming %s, got %s\n", field, okv_status_message(st));
    okv_status_free(st);
    fail();
  }
  okv_status_free(st);
}

static void test_config_validate(void **state) {
  (void)state;
  okv_runtime_config_t c;
  base_config(&c);
  OKV_ASSERT_OK(okv_runtime_config_validate(&c));
  assert_int_equal(c.budget_blocks, 128);
  assert_true(c.fetch_ratio == 0.05);
  assert_int_equal(c.mode, OKV_MODE_OASIS);
  okv_runtime_config_t b;
  /* b = c with b.field = value must be INVALID_ARGUMENT naming the field. */
#define EXPECT_INVALID_FIELD(field, value) OKV_EXPECT_MUTATION(b, c, b.field = (value), expect_invalid(&b, #field))
  EXPECT_INVALID_FIELD(n_layers, 0);
  EXPECT_INVALID_FIELD(n_q_heads, 3);
  EXPECT_INVALID_FIELD(n_kv_heads, 0);
  EXPECT_INVALID_FIELD(head_dim, 0);
  EXPECT_INVALID_FIELD(head_dim, 257);
  EXPECT_INVALID_FIELD(block_tokens, 32);
  EXPECT_INVALID_FIELD(budget_blocks, 0);
  EXPECT_INVALID_FIELD(budget_blocks, 513);
  EXPECT_INVALID_FIELD(fetch_ratio, 0.0);
  EXPECT_INVALID_FIELD(fetch_ratio, 1.5);
  EXPECT_INVALID_FIELD(fetch_ratio, NAN);
  EXPECT_INVALID_FIELD(mode, OKV_MODE_COUNT);
  EXPECT_INVALID_FIELD(kv_dtype, OKV_DTYPE_COUNT);
  EXPECT_INVALID_FIELD(max_seqs, 0);
  EXPECT_INVALID_FIELD(max_context_tokens, 0);
#undef EXPECT_INVALID_FIELD
  /* A threshold above the budget. */
  OKV_EXPECT_MUTATION(b, c, (b.budget_blocks = 8, b.dense_threshold_blocks = 9),
                      expect_invalid(&b, "dense_threshold_blocks"));
  /* The default threshold follows budget_blocks. */
  b = c;
  b.budget_blocks = 8;
  OKV_ASSERT_OK(okv_runtime_config_validate(&b));
  okv_mode_t m;
  OKV_ASSERT_OK(okv_mode_parse("proxy", &m));
  assert_int_equal(m, OKV_MODE_PROXY);
  assert_string_equal(okv_mode_name(OKV_MODE_ONDEMAND), "ondemand");
  OKV_ASSERT_CODE(okv_mode_parse("sparse", &m), OKV_STATUS_INVALID_ARGUMENT);
}

/* okv_runtime_config() reads scoring_groups as the value in effect (hand-derived from the rules in the header):
 * with K = 4 and max_context_tokens 1024 (64 blocks), q8's default margin is K = 4 (K + 4 = 8 candidates < 64),
 * two-level's default is K / 4 = 1 group; flat scoring, DENSE, and q8 or two-level where the candidates or the
 * kept groups cover every block (max_context_tokens 64: 4 blocks) read 0, a requested value passes through. */
static void test_scoring_groups_in_effect(void **state) {
  (void)state;
  static const struct {
    okv_scoring_t scoring;
    okv_mode_t mode;
    uint32_t asked, max_tokens, want;
  } cases[] = {
      {OKV_SCORING_Q8, OKV_MODE_OASIS, 0, 1024, 4},
      {OKV_SCORING_Q8, OKV_MODE_OASIS, 2, 1024, 2},
      {OKV_SCORING_C4, OKV_MODE_OASIS, 0, 1024, 4},
      {OKV_SCORING_C4, OKV_MODE_OASIS, 0, 64, 0},
      {OKV_SCORING_FLAT, OKV_MODE_OASIS, 3, 1024, 0},
      {OKV_SCORING_TWO_LEVEL, OKV_MODE_OASIS, 0, 1024, 1},
      {OKV_SCORING_TWO_LEVEL, OKV_MODE_OASIS, 2, 1024, 2},
      {OKV_SCORING_TWO_LEVEL, OKV_MODE_OASIS, 4, 1024, 0},
      {OKV_SCORING_Q8, OKV_MODE_OASIS, 0, 64, 0},
      {OKV_SCORING_Q8, OKV_MODE_DENSE, 2, 1024, 0},
      /* 1000 tokens: 63 blocks, one extent of 63 that groups of 16 would straddle */
      {OKV_SCORING_TWO_LEVEL, OKV_MODE_OASIS, 1, 1000, 0},
  };
  okv_hal_device_params_t p = small_params();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    okv_runtime_config_t c;
    budget_config(&c, 4, 0.25);
    c.scoring = cases[i].scoring;
    c.mode = cases[i].mode;
    c.scoring_groups = cases[i].asked;
    c.max_context_tokens = cases[i].max_tokens;
    drv_t d;
    drv_open(&d, g_backend, &c, &p, 1, cases[i].max_tokens);
    const uint32_t got = okv_runtime_config(d.rt)->scoring_groups;
    if (got != cases[i].want) print_error("case %zu: scoring_groups in effect %u, want %u\n", i, got, cases[i].want);
    assert_int_equal(got, cases[i].want);
    drv_close(&d);
  }
  /* The default margin of q8 and c4 against K, hand-computed from max(ceil(K / 4), min(K, 8)), with 4096
   * tokens (256 blocks) so that no K here falls back to flat: K / 4 from K = 33 up, 8 from K = 8 to 32, K
   * below 8. */
  static const uint32_t ks[][2] = {{2, 2}, {7, 7}, {8, 8}, {16, 8}, {32, 8}, {33, 9}, {64, 16}, {100, 25}};
  for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
    for (int q8 = 0; q8 < 2; q8++) {
      okv_runtime_config_t c;
      budget_config(&c, ks[i][0], 0.05);
      c.scoring = q8 ? OKV_SCORING_Q8 : OKV_SCORING_C4;
      c.max_context_tokens = 4096;
      drv_t d;
      drv_open(&d, g_backend, &c, &p, 1, 4096);
      const uint32_t got = okv_runtime_config(d.rt)->scoring_groups;
      if (got != ks[i][1])
        print_error("K = %u, %s: default margin %u, want %u\n", ks[i][0], q8 ? "q8" : "c4", got, ks[i][1]);
      assert_int_equal(got, ks[i][1]);
      drv_close(&d);
    }
}

static void test_argument_errors(void **state) {
  (void)state;
  okv_runtime_config_t c;
  base_config(&c);
  c.budget_blocks = 4;
  okv_hal_device_params_t p = small_params();
  drv_t d;
  drv_open(&d, g_backend, &c, &p, 1, 256);
  assert_int_equal(okv_runtime_config(d.rt)->dense_threshold_blocks, 4);
  okv_runtime_t *rt = NULL;
  OKV_ASSERT_CODE(okv_runtime_create(NULL, &c, &d.alloc, &rt), OKV_STATUS_INVALID_ARGUMENT);
  okv_runtime_config_t bad = c;
  bad.head_dim = 0;
  OKV_ASSERT_CODE(okv_runtime_create(d.dev, &bad, &d.alloc, &rt), OKV_STATUS_INVALID_ARGUMENT);
  assert_null(rt);
  drv_add(&d, 40);
  uint32_t n;
  OKV_ASSERT_OK(okv_runtime_seq_length(d.rt, d.ids[0], &n));
  assert_int_equal(n, 40);
  OKV_ASSERT_CODE(okv_runtime_seq_length(d.rt, 999, &n), OKV_STATUS_NOT_FOUND);
  OKV_ASSERT_CODE(okv_runtime_seq_remove(d.rt, 999), OKV_STATUS_NOT_FOUND);
  uint32_t blocks[8];
  OKV_ASSERT_CODE(okv_runtime_seq_resident(d.rt, d.ids[0], 2, 0, blocks, 8, &n), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_runtime_seq_resident(d.rt, d.ids[0], 0, 2, blocks, 8, &n), OKV_STATUS_INVALID_ARGUMENT);
  /* OASIS needs a draft token. */
  OKV_ASSERT_CODE(okv_runtime_step_begin(d.rt, 1, d.ids, 1), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_runtime_step_begin(d.rt, 1, d.ids, 5), OKV_STATUS_INVALID_ARGUMENT);
  uint32_t two[2] = {d.ids[0], d.ids[0]};
  OKV_ASSERT_CODE(okv_runtime_step_begin(d.rt, 2, two, 2), OKV_STATUS_INVALID_ARGUMENT);
  uint32_t missing = 77;
  OKV_ASSERT_CODE(okv_runtime_step_begin(d.rt, 1, &missing, 2), OKV_STATUS_NOT_FOUND);
  float buf[4 * 4 * 16] = {0};
  OKV_ASSERT_CODE(okv_runtime_step_layer(d.rt, 0, buf, buf, buf, buf, buf), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_OK(okv_runtime_step_begin(d.rt, 1, d.ids, 2));
  OKV_ASSERT_CODE(okv_runtime_step_begin(d.rt, 1, d.ids, 2), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_runtime_step_layer(d.rt, 1, buf, buf, buf, buf, buf), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_runtime_step_layer(d.rt, 0, buf, buf, buf, NULL, buf), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_runtime_step_layer(d.rt, 0, NULL, buf, buf, buf, buf), OKV_STATUS_INVALID_ARGUMENT);
  /* Ending early is an error (the step still ends). */
  okv_step_stats_t s;
  OKV_ASSERT_CODE(okv_runtime_step_end(d.rt, &s), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_runtime_step_end(d.rt, &s), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_runtime_stats(d.rt, 5, &s), OKV_STATUS_INVALID_ARGUMENT);
  okv_prefill_t pf = {2000, buf, buf};
  uint32_t id;
  OKV_ASSERT_CODE(okv_runtime_seq_add(d.rt, &pf, &id), OKV_STATUS_INVALID_ARGUMENT);
  pf.n_tokens = 3;
  pf.k = NULL;
  OKV_ASSERT_CODE(okv_runtime_seq_add(d.rt, &pf, &id), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_runtime_peek_layer(d.rt, 1, d.ids, 5, 1, buf, buf, buf), OKV_STATUS_INVALID_ARGUMENT);
  drv_close(&d);
}

/* K covers the context: every mode equals dense attention. */
static void test_modes_equal_dense(void **state) {
  (void)state;
  okv_hal_device_params_t p = small_params();
  for (int dt = 0; dt < 2; dt++) {
    for (int mode = 0; mode < OKV_MODE_COUNT; mode++) {
      okv_runtime_config_t c;
      base_config(&c);
      c.kv_dtype = dt == 0 ? OKV_DTYPE_F32 : OKV_DTYPE_BF16;
      c.mode = (okv_mode_t)mode;
      c.budget_blocks = 16;         /* 256 tokens >= context */
      c.dense_threshold_blocks = 0; /* sparse bookkeeping from the start */
      c.track_recall = true;
      drv_t d;
      drv_open(&d, g_backend, &c, &p, 100 + (uint64_t)mode, 256);
      drv_add(&d, 37);
      drv_add(&d, 0);
      drv_add(&d, 64);
      uint32_t T = mode == OKV_MODE_OASIS ? 2 : (mode == OKV_MODE_PROXY ? 3 : 1);
      double worst = 0;
      for (int step = 0; step < 40; step++) {
        drv_step(&d, T, 1.0f);
        double e = drv_check(&d, true);
        if (e > worst) worst = e;
        assert_int_equal(d.last_stats.failed_blocks, 0);
      }
      double tol = dt == 0 ? 2e-5 : 2e-3;
      if (worst > tol) print_error("mode %s dtype %d: max error %g\n", okv_mode_name((okv_mode_t)mode), dt, worst);
      assert_true(worst <= tol);
      okv_step_stats_t cum;
      OKV_ASSERT_OK(okv_runtime_stats(d.rt, UINT32_MAX, &cum));
      assert_int_equal(cum.steps, 40);
      assert_int_equal(cum.failed_blocks, 0);
      if (mode != OKV_MODE_DENSE) {
        /* Everything fits: every true top-K block is resident in time. */
        assert_true(cum.recall_total > 0);
        assert_int_equal(cum.recall_hits, cum.recall_total);
        assert_int_equal(cum.admitted, 0);
        assert_int_equal(cum.evicted, 0);
      }
      assert_true(cum.append_bytes > 0);
      drv_close(&d);
    }
  }
}

/* Checks runtime invariants of every (seq, layer, head) after a step and the
 * per-step cap against the previous resident lists. prev: [seq][layer][head][K+2] lists. */
typedef struct prev_t {
  uint32_t n[DRV_MAX_SEQS][4][4];
  uint32_t nb[DRV_MAX_SEQS][4][4];
  uint32_t b[DRV_MAX_SEQS][4][4][64];
} prev_t;

static uint64_t check_invariants(drv_t *d, prev_t *prev, bool have_prev, uint32_t cap) {
  uint32_t K = d->cfg.budget_blocks, C = d->rt->cap_blocks;
  uint64_t hash = 0;
  for (uint32_t i = 0; i < d->n_seqs; i++)
    for (uint32_t l = 0; l < d->cfg.n_layers; l++)
      for (uint32_t h = 0; h < d->cfg.n_kv_heads; h++) {
        uint32_t blocks[64], n;
        OKV_ASSERT_OK(okv_runtime_seq_resident(d->rt, d->ids[i], l, h, blocks, 64, &n));
        uint32_t nt = d->hist[i].n_tokens[l];
        uint32_t nb = (nt + 15) / 16;
        /* No head holds more than K + 1 blocks; the active block is resident. */
        assert_true(n <= K + 1);
        assert_true(n > 0);
        assert_int_equal(blocks[n - 1], nb - 1);
        for (uint32_t j = 1; j < n; j++) assert_true(blocks[j - 1] < blocks[j]);
        /* The map is a bijection onto live slots. */
        const okv_block_map_t *m = okv_runtime_debug_map(d->rt, d->ids[i], l, h);
        assert_non_null(m);
        OKV_ASSERT_OK(okv_block_map_check(m));
        /* Owned slots: mapped + free + at most C in flight. */
        assert_true(m->n_resident + m->n_free <= K + 1 + C);
        assert_true(m->n_resident + m->n_free >= K + 1);
        /* Cap: blocks newly resident since the previous step (not new blocks) <= C. */
        if (have_prev) {
          uint32_t fresh = 0;
          for (uint32_t j = 0; j < n; j++) {
            if (blocks[j] + 1 >= prev->nb[i][l][h]) continue; /* the previous or new active block */
            bool was = false;
            for (uint32_t k = 0; k < prev->n[i][l][h]; k++) was |= prev->b[i][l][h][k] == blocks[j];
            fresh += !was;
          }
          assert_true(fresh <= cap);
        }
        prev->n[i][l][h] = n;
        prev->nb[i][l][h] = nb;
        memcpy(prev->b[i][l][h], blocks, n * sizeof(uint32_t));
        for (uint32_t j = 0; j < n; j++) hash = hash * 1000003u + blocks[j];
      }
  return hash;
}

/* K < context: outputs equal the reference over the reported working set;
 * invariants hold every step; a long random workload; stats are consistent. */
/* Scoring of run_sparse's runtimes (test_two_level_* set it). */
static okv_scoring_t g_scoring = OKV_SCORING_FLAT;
static uint32_t g_scoring_groups = 0;
static okv_dtype_t g_summary_dtype = OKV_DTYPE_F32;
static uint64_t g_agree_hits, g_agree_total; /* top-K agreement of two-level with flat, summed by run_sparse */

/* Element e of a summary stored in the runtime's summary dtype (f32, bf16 or f16), widened. */
static double summary_elem(const okv_runtime_t *rt, const uint8_t *summ, uint32_t e) {
  if (rt->cfg.summary_dtype == OKV_DTYPE_F32) {
    float f;
    memcpy(&f, summ + e * 4, 4);
    return f;
  }
  uint16_t u;
  memcpy(&u, summ + e * 2, 2);
  return rt->cfg.summary_dtype == OKV_DTYPE_BF16 ? okv_bf16_to_f32(u) : okv_f16_to_f32(u);
}

/* Two-level scoring: every group summary equals the elementwise min/max of
 * its blocks' summaries (read back from the DEVICE tier), exactly. */
/* q8 scoring: every block's 8-bit summary encodes the box of its summary
 * (read back from the DEVICE tier): lo is the least min, and the code box
 * contains [min, max] in every element. */
static void check_q8_summaries(drv_t *d) {
  okv_runtime_t *rt = d->rt;
  uint32_t hd = rt->cfg.head_dim;
  uint64_t qb = okv_summary_bytes_ex(OKV_DTYPE_Q8, hd);
  uint8_t *blk = test_malloc(rt->summary_bytes), *q8 = test_malloc(qb);
  for (uint32_t i = 0; i < d->n_seqs; i++) {
    const okv_seq_t *s = okv_rt_seq_find(rt, d->ids[i]);
    assert_non_null(s);
    for (uint32_t l = 0; l < rt->cfg.n_layers; l++)
      for (uint32_t h = 0; h < rt->cfg.n_kv_heads; h++) {
        const okv_head_t *head = seq_head(rt, s, l, h);
        for (uint32_t b = 0; b < head->map.n_blocks; b++) {
          uint64_t hb = okv_host_store_block(&rt->host, head->extents, b);
          OKV_ASSERT_OK(okv_hal_buffer_read(rt->summaries, hb * rt->summary_bytes, blk, rt->summary_bytes));
          OKV_ASSERT_OK(okv_hal_buffer_read(rt->group_summaries, hb * qb, q8, qb));
          float lo, step;
          memcpy(&lo, q8, 4);
          memcpy(&step, q8 + 4, 4);
          double want_lo = INFINITY;
          for (uint32_t e = 0; e < 2 * hd; e++) {
            double x = summary_elem(rt, blk, e);
            if (e < hd) want_lo = fmin(want_lo, x);
            double code = (double)lo + (double)q8[8 + e] * (double)step; /* min codes, then max codes */
            bool ok = step >= 0 && (e < hd ? code <= x : code >= x);
            if (!ok)
              print_error("8-bit summary: seq %u layer %u head %u block %u elem %u: %g does not bound %g\n", i, l, h, b,
                          e, code, x);
            assert_true(ok);
          }
          assert_true((double)lo == want_lo);
        }
      }
  }
  test_free(blk);
  test_free(q8);
}

/* c4 scoring: every block's lane of 4-bit centres (read back from the DEVICE tier, tiles of 16 host blocks)
 * encodes its summary: each element's code within half a step of the box's centre (min + max) / 2, lo the
 * least centre, width the mean half-width. */
static void check_c4_summaries(drv_t *d) {
  okv_runtime_t *rt = d->rt;
  const uint32_t hd = rt->cfg.head_dim;
  const uint64_t tb = 16u * okv_summary_bytes_ex(OKV_DTYPE_C4, hd);
  uint8_t *blk = test_malloc(rt->summary_bytes), *tile = test_malloc(tb);
  for (uint32_t i = 0; i < d->n_seqs; i++) {
    const okv_seq_t *s = okv_rt_seq_find(rt, d->ids[i]);
    assert_non_null(s);
    for (uint32_t l = 0; l < rt->cfg.n_layers; l++)
      for (uint32_t h = 0; h < rt->cfg.n_kv_heads; h++) {
        const okv_head_t *head = seq_head(rt, s, l, h);
        for (uint32_t b = 0; b < head->map.n_blocks; b++) {
          uint64_t hb = okv_host_store_block(&rt->host, head->extents, b);
          const uint32_t lane = (uint32_t)(hb % 16u);
          OKV_ASSERT_OK(okv_hal_buffer_read(rt->summaries, hb * rt->summary_bytes, blk, rt->summary_bytes));
          OKV_ASSERT_OK(okv_hal_buffer_read(rt->group_summaries, hb / 16u * tb, tile, tb));
          float lo, step, width;
          memcpy(&lo, tile + 4u * lane, 4);
          memcpy(&step, tile + 64u + 4u * lane, 4);
          memcpy(&width, tile + 128u + 4u * lane, 4);
          double x[2 * 256], clo = INFINITY, w = 0;
          for (uint32_t e = 0; e < 2 * hd; e++) x[e] = summary_elem(rt, blk, e);
          for (uint32_t e = 0; e < hd; e++) {
            clo = fmin(clo, 0.5 * x[e] + 0.5 * x[hd + e]);
            w += 0.5 * (x[hd + e] - x[e]) / hd;
          }
          assert_true(step >= 0 && (double)lo == (double)(float)clo);
          assert_true(fabs((double)width - w) <= 1e-6 * fabs(w) + 1e-30);
          for (uint32_t e = 0; e < hd; e++) {
            const uint32_t j = e / 2u;
            const uint8_t v = tile[192u + (j / 4u) * 64u + lane * 4u + j % 4u];
            const double code = e % 2u ? v >> 4 : v & 15u, c = 0.5 * x[e] + 0.5 * x[hd + e];
            const double err = fabs((double)lo + code * (double)step - c);
            if (!(err <= 0.5 * (double)step * (1 + 1e-6) + 1e-6 * fabs(c)))
              print_error("4-bit summary: seq %u layer %u head %u block %u elem %u: code %g, centre %g, step %g\n", i,
                          l, h, b, e, code, c, (double)step);
            assert_true(err <= 0.5 * (double)step * (1 + 1e-6) + 1e-6 * fabs(c));
          }
        }
      }
  }
  test_free(blk);
  test_free(tile);
}

static void check_group_summaries(drv_t *d) {
  okv_runtime_t *rt = d->rt;
  if (rt->group_summaries == NULL) return;
  if (rt->unit_dtype == OKV_DTYPE_Q8) {
    check_q8_summaries(d);
    return;
  }
  if (rt->unit_dtype == OKV_DTYPE_C4) {
    check_c4_summaries(d);
    return;
  }
  uint32_t hd = rt->cfg.head_dim;
  uint8_t *blk = test_malloc(rt->summary_bytes), *grp = test_malloc(rt->summary_bytes);
  for (uint32_t i = 0; i < d->n_seqs; i++) {
    const okv_seq_t *s = okv_rt_seq_find(rt, d->ids[i]);
    assert_non_null(s);
    for (uint32_t l = 0; l < rt->cfg.n_layers; l++)
      for (uint32_t h = 0; h < rt->cfg.n_kv_heads; h++) {
        const okv_head_t *head = seq_head(rt, s, l, h);
        uint32_t nb = head->map.n_blocks;
        for (uint32_t b0 = 0; b0 < nb; b0 += OKV_SCORING_GROUP_BLOCKS) {
          uint64_t hb0 = okv_host_store_block(&rt->host, head->extents, b0);
          OKV_ASSERT_OK(okv_hal_buffer_read(rt->group_summaries, hb0 / OKV_SCORING_GROUP_BLOCKS * rt->summary_bytes,
                                            grp, rt->summary_bytes));
          for (uint32_t e = 0; e < 2 * hd; e++) {
            double want = e < hd ? INFINITY : -INFINITY;
            for (uint32_t b = b0; b < nb && b < b0 + OKV_SCORING_GROUP_BLOCKS; b++) {
              OKV_ASSERT_OK(okv_hal_buffer_read(rt->summaries,
                                                okv_host_store_block(&rt->host, head->extents, b) * rt->summary_bytes,
                                                blk, rt->summary_bytes));
              double x = summary_elem(rt, blk, e);
              want = e < hd ? fmin(want, x) : fmax(want, x);
            }
            double got = summary_elem(rt, grp, e);
            if (got != want)
              print_error("group summary: seq %u layer %u head %u group %u elem %u: %g != %g\n", i, l, h,
                          b0 / OKV_SCORING_GROUP_BLOCKS, e, got, want);
            assert_true(got == want);
          }
        }
      }
  }
  test_free(blk);
  test_free(grp);
}

static uint64_t run_sparse(okv_mode_t mode, uint64_t seed, uint32_t n_steps, bool check_outputs) {
  okv_runtime_config_t c;
  budget_config(&c, 4, 0.25); /* C = 1 */
  c.scoring = g_scoring;
  c.scoring_groups = g_scoring_groups;
  c.summary_dtype = g_summary_dtype;
  c.mode = mode;
  c.max_context_tokens = 1024;
  c.track_recall = true;
  okv_hal_device_params_t p = small_params();
  drv_t d;
  drv_open(&d, g_backend, &c, &p, seed, 1024);
  drv_add(&d, 150);
  drv_add(&d, 20);
  drv_add(&d, 90);
  uint32_t C = d.rt->cap_blocks;
  assert_int_equal(C, 1);
  prev_t *prev = test_calloc(1, sizeof *prev);
  uint64_t hash = check_invariants(&d, prev, false, C);
  d.track_jobs = true;
  uint64_t sum_admitted = 0, sum_moved = 0, sum_deferred = 0, step_admitted = 0, step_moved = 0;
  uint32_t T = mode == OKV_MODE_OASIS ? 2 : 1;
  for (uint32_t step = 0; step < n_steps; step++) {
    drv_step(&d, T, 2.0f);
    assert_int_equal(d.last_layer_code, OKV_STATUS_OK);
    if (check_outputs && (step % 3 == 0 || step + 1 == n_steps)) {
      double e = drv_check(&d, false);
      if (e > 2e-5) print_error("mode %s step %u: max error %g\n", okv_mode_name(mode), step, e);
      assert_true(e <= 2e-5);
    }
    hash = hash * 31u + check_invariants(&d, prev, mode != OKV_MODE_ONDEMAND, mode == OKV_MODE_ONDEMAND ? 99 : C);
    if (step % 10 == 0 || step + 1 == n_steps) check_group_summaries(&d);
    /* The step's own stats hold the jobs it collected: per layer its own job when done by step_end, and the
     * previous step's when step_end did not find that one done (docs/api.md "Stats"). */
    const okv_step_stats_t *e = &d.last_stats;
    uint64_t heads = (uint64_t)d.n_seqs * c.n_layers * c.n_kv_heads;
    if (mode != OKV_MODE_ONDEMAND) assert_true(e->admitted <= 2u * C * heads);
    assert_int_equal(e->steps, 1);
    assert_true(e->deferred_steps <= 2u && (e->deferred_steps == 0 || e->deferred > 0)); /* selecting steps */
    assert_true(e->admitted + e->deferred == e->misses);
    step_admitted += e->admitted;
    step_moved += e->blocks_moved;
    /* What this step's jobs selected (one job per layer, whichever step collects it): the cap holds per job. */
    const okv_step_stats_t *s = &d.last_jobs;
    uint64_t job_admitted = 0;
    for (uint32_t l = 0; l < c.n_layers; l++) {
      const okv_step_stats_t *j = &d.last_job[l];
      if (mode != OKV_MODE_ONDEMAND) assert_true(j->admitted <= (uint64_t)C * d.n_seqs * c.n_kv_heads);
      assert_true(j->admitted + j->deferred == j->misses);
      job_admitted += j->admitted;
    }
    assert_int_equal(job_admitted, s->admitted);
    if (mode != OKV_MODE_ONDEMAND) assert_true(s->admitted <= C * heads);
    assert_true(s->blocks_moved * okv_block_bytes(c.kv_dtype, c.head_dim) ==
                s->bytes_moved[OKV_TIER_HOST][OKV_TIER_DEVICE]);
    assert_int_equal(s->bytes_moved[OKV_TIER_DEVICE][OKV_TIER_HOST], 0);
    assert_true(s->recall_hits <= s->recall_total);
    assert_true(s->topk_agreement_hits <= s->topk_agreement_total);
    /* With two-level scoring the recall pass counts flat's top-K, and the agreement counts the same blocks. */
    assert_true(s->topk_agreement_total == (g_scoring != OKV_SCORING_FLAT ? s->recall_total : 0u));
    g_agree_hits += s->topk_agreement_hits;
    g_agree_total += s->topk_agreement_total;
    assert_true(s->admitted + s->deferred == s->misses);
    assert_int_equal(s->steps, 1);
    assert_int_equal(s->deferred_steps, s->deferred > 0); /* the step's jobs: one selecting step */
    sum_admitted += s->admitted;
    sum_moved += s->blocks_moved;
    sum_deferred += s->deferred;
    hash = hash * 31u + s->hits * 7u + s->admitted;
    for (size_t j = 0; j < (size_t)c.n_layers * DRV_MAX_SEQS * 4 * c.n_q_heads * c.head_dim; j += 7) {
      uint32_t bits;
      memcpy(&bits, &d.out[j], 4);
      hash = hash * 1099511628211ull + bits;
    }
  }
  okv_step_stats_t cum, l0, l1;
  OKV_ASSERT_OK(okv_runtime_stats(d.rt, UINT32_MAX, &cum));
  OKV_ASSERT_OK(okv_runtime_stats(d.rt, 0, &l0));
  OKV_ASSERT_OK(okv_runtime_stats(d.rt, 1, &l1));
  /* Every job issued is counted once: the cumulative stats (which wait for the background thread) are the
   * sum of the jobs; the steps' own stats sum to the same less the jobs no step has collected yet (at most
   * one per layer, of the last step). */
  assert_int_equal(cum.admitted, sum_admitted);
  assert_int_equal(cum.blocks_moved, sum_moved);
  assert_int_equal(cum.admitted, l0.admitted + l1.admitted);
  assert_int_equal(step_moved, sum_moved); /* commits land in the step that commits */
  assert_true(step_admitted <= sum_admitted);
  assert_true(step_admitted + (uint64_t)C * d.n_seqs * c.n_layers * c.n_kv_heads >= sum_admitted);
  uint64_t pending = 0;
  for (uint32_t l = 0; l < c.n_layers; l++)
    if (d.rt->jobs && d.rt->jobs[l].stats_pending) pending += d.rt->jobs[l].stats.admitted;
  assert_int_equal(step_admitted + pending, sum_admitted);
  assert_int_equal(d.rt->total_cum.admitted, step_admitted);
  assert_int_equal(cum.steps, n_steps);
  assert_int_equal(l0.steps, n_steps);
  assert_true(cum.admitted > 0);
  assert_true(cum.hits > 0);
  assert_true(cum.recall_total > 0);
  if (mode != OKV_MODE_ONDEMAND) {
    assert_true(sum_deferred > 0); /* the cap bit */
    assert_true(cum.deferred_steps > 0);
    /* Every admitted block is moved at the next step's commit (one plan may be pending). */
    assert_true(cum.blocks_moved <= cum.admitted);
    assert_true(cum.blocks_moved + C * d.n_seqs * c.n_layers * c.n_kv_heads >= cum.admitted);
  } else {
    assert_int_equal(cum.blocks_moved, cum.admitted);
    assert_int_equal(cum.deferred, 0);
    assert_int_equal(cum.recall_total, cum.hits + cum.misses);
  }
  assert_true(cum.bookkeeping_seconds > 0);
  assert_true(cum.attention_seconds > 0);
  /* The phases are parts of bookkeeping_seconds; every mode builds working sets, the pipelined ones select and
   * commit in the background pipeline (ONDEMAND selects in the foreground, outside these two). */
  assert_true(cum.working_set_seconds > 0);
  assert_true(cum.append_bookkeeping_seconds > 0); /* every mode appends */
  assert_true(cum.select_seconds + cum.commit_seconds + cum.working_set_seconds + cum.predict_setup_seconds +
                  cum.append_bookkeeping_seconds + cum.handoff_seconds <=
              cum.bookkeeping_seconds * (1 + 1e-9));
  if (mode != OKV_MODE_ONDEMAND) {
    assert_true(cum.select_seconds > 0 && cum.commit_seconds > 0);
    assert_true(cum.predict_setup_seconds > 0 && cum.handoff_seconds > 0);
    /* Without the recall pass every interval is one of the six parts (test_bookkeeping_parts); here the recall
     * pass (track_recall) is the rest. */
  } else {
    assert_true(cum.select_seconds == 0 && cum.commit_seconds == 0);
    assert_true(cum.predict_setup_seconds == 0 && cum.handoff_seconds == 0); /* no background pipeline */
  }
  okv_runtime_stats_reset(d.rt);
  OKV_ASSERT_OK(okv_runtime_stats(d.rt, UINT32_MAX, &cum));
  assert_int_equal(cum.steps, 0);
  test_free(prev);
  drv_close(&d);
  return hash;
}

static void test_sparse_oasis(void **state) {
  (void)state;
  uint64_t h1 = run_sparse(OKV_MODE_OASIS, 7, 120, true);
  uint64_t h2 = run_sparse(OKV_MODE_OASIS, 7, 120, false);
  assert_true(h1 == h2); /* two identical runs give identical results */
}

static void test_sparse_proxy(void **state) {
  (void)state;
  run_sparse(OKV_MODE_PROXY, 8, 80, true);
}

static void test_sparse_ondemand(void **state) {
  (void)state;
  run_sparse(OKV_MODE_ONDEMAND, 9, 60, true);
}

/* Two-level scoring: while every head has at most scoring_groups groups, the
 * selection (and so every output) equals flat scoring's; with fewer groups
 * kept, outputs still equal the reference over the reported working set, the
 * invariants hold and the group summaries stay exact (check_group_summaries),
 * in f32 and bf16 summaries; the recall pass and ondemand use it too. */
static void test_two_level(void **state) {
  (void)state;
  g_scoring = OKV_SCORING_FLAT;
  uint64_t flat = run_sparse(OKV_MODE_OASIS, 7, 80, false); /* <= 230 tokens: <= 15 blocks */
  g_scoring = OKV_SCORING_TWO_LEVEL;
  g_scoring_groups = 1; /* one group of 16 blocks: all of them here */
  g_agree_hits = g_agree_total = 0;
  uint64_t two = run_sparse(OKV_MODE_OASIS, 7, 80, false);
  assert_true(flat == two);
  /* Same top-K as flat while every head has at most one group: full agreement. */
  assert_true(g_agree_total > 0);
  assert_true(g_agree_hits == g_agree_total);
  g_agree_hits = g_agree_total = 0;
  run_sparse(OKV_MODE_OASIS, 7, 200, true); /* up to 350 tokens: 22 blocks, 2 groups, 1 kept */
  /* Past 16 blocks one group's blocks are ranked: some of flat's top-K is missed, most is found. */
  assert_true(g_agree_hits < g_agree_total);
  assert_true(g_agree_hits * 2u > g_agree_total);
  run_sparse(OKV_MODE_ONDEMAND, 9, 150, true);
  g_summary_dtype = OKV_DTYPE_BF16;
  run_sparse(OKV_MODE_PROXY, 8, 200, true);
  g_summary_dtype = OKV_DTYPE_F32;
  g_scoring = OKV_SCORING_FLAT;
  g_scoring_groups = 0;
}

/* q8 scoring (K = 4, K + 4 candidates rescored): outputs equal the reference
 * over the reported working set, the invariants hold, every 8-bit summary
 * bounds its block's summary after appends and rebuilds (check_q8_summaries),
 * and the top-K agrees with flat's on nearly every block: the 8-bit score
 * only orders the candidates, the exact summaries decide. Past K + 4 blocks
 * per head (up to 22 here), so the first pass does prune. */
static void test_q8_scoring(void **state) {
  (void)state;
  g_scoring = OKV_SCORING_Q8;
  g_scoring_groups = 0;
  g_agree_hits = g_agree_total = 0;
  run_sparse(OKV_MODE_OASIS, 7, 200, true);
  assert_true(g_agree_total > 0);
  assert_true(g_agree_hits * 100u >= g_agree_total * 95u);
  g_summary_dtype = OKV_DTYPE_BF16;
  run_sparse(OKV_MODE_PROXY, 8, 120, true);
  run_sparse(OKV_MODE_ONDEMAND, 9, 100, true);
  g_summary_dtype = OKV_DTYPE_F32;
  g_scoring = OKV_SCORING_FLAT;
}

/* c4 scoring (K = 4, K + 4 candidates rescored on the exact summaries): outputs equal the reference over the
 * reported working set, the invariants hold, every block's 4-bit centre encodes its summary after appends and
 * rebuilds (check_c4_summaries), and the top-K agrees with flat's on most blocks: the estimate only picks the
 * candidates. Past K + 4 blocks per head (up to 22 here), so the first pass does prune. */
static void test_c4_scoring(void **state) {
  (void)state;
  g_scoring = OKV_SCORING_C4;
  g_scoring_groups = 0;
  g_agree_hits = g_agree_total = 0;
  run_sparse(OKV_MODE_OASIS, 7, 200, true);
  print_message("c4 top-K agreement with flat: %llu of %llu\n", (unsigned long long)g_agree_hits,
                (unsigned long long)g_agree_total);
  assert_true(g_agree_total > 0);
  assert_true(g_agree_hits * 100u >= g_agree_total * 95u);
  g_summary_dtype = OKV_DTYPE_BF16;
  run_sparse(OKV_MODE_PROXY, 8, 120, true);
  run_sparse(OKV_MODE_ONDEMAND, 9, 100, true);
  g_summary_dtype = OKV_DTYPE_F32;
  g_scoring = OKV_SCORING_FLAT;
}

/* okv_runtime_synchronize makes the time until the next step a pause: a 0.5 s sleep after it does not enter
 * the self-tuning cap's layer interval (weight 0.3 of a new sample would have added >= 0.15 s). */
static void test_auto_cap_pause_after_synchronize(void **state) {
  (void)state;
  okv_runtime_config_t c;
  budget_config(&c, 8, 0.5);
  c.fetch_ratio_auto = true;
  c.mode = OKV_MODE_OASIS;
  okv_hal_device_params_t p = small_params();
  drv_t d;
  drv_open(&d, g_backend, &c, &p, 13, 1024);
  drv_add(&d, 300);
  drv_add(&d, 200);
  for (uint32_t step = 0; step < 6; step++) drv_step(&d, 2, 2.0f);
  okv_cap_state_t before, after;
  OKV_ASSERT_OK(okv_runtime_cap_state(d.rt, &before));
  assert_true(before.layer_interval_seconds > 0);
  OKV_ASSERT_OK(okv_runtime_synchronize(d.rt));
  struct timespec ts = {0, 500000000};
  nanosleep(&ts, NULL);
  drv_step(&d, 2, 2.0f); /* the first uses after the pause start new intervals */
  OKV_ASSERT_OK(okv_runtime_cap_state(d.rt, &after));
  assert_true(after.layer_interval_seconds == before.layer_interval_seconds);
  drv_step(&d, 2, 2.0f); /* and the next step measures again */
  OKV_ASSERT_OK(okv_runtime_cap_state(d.rt, &after));
  assert_true(after.layer_interval_seconds != before.layer_interval_seconds);
  assert_true(after.layer_interval_seconds < before.layer_interval_seconds + 0.1);
  assert_true(drv_check(&d, false) < 2e-5);
  drv_close(&d);
}

/* The fetched-share measurement (track_fetch_share) on a hand-computed case: zero queries make attention
 * uniform over the tokens the real token sees, so a fetched (full) block draws 16 / N of it, N the head's
 * readable tokens, and its share is that times the head's working-set blocks. Every KV head predicts the
 * same (all scores tie), so all heads hold the same blocks. The measured layer is step mod n_layers; its
 * blocks counted are the ones its commit fetched in the step. */
static void test_fetched_share(void **state) {
  (void)state;
  float pq[4 * 16], pkv[2 * 2 * 16], pout[4 * 16]; /* peek_layer: T = 1, 4 query / 2 KV heads x 16 */
  memset(pq, 0, sizeof pq);
  memset(pkv, 0, sizeof pkv);
  for (int track = 0; track < 3; track++) { /* 0: off, 1: on, 2: on, every layer peeked before each step */
    okv_runtime_config_t c;
    budget_config(&c, 8, 0.25); /* C = 2 */
    c.mode = OKV_MODE_OASIS;
    c.track_fetch_share = track >= 1;
    okv_hal_device_params_t p = small_params();
    drv_t d;
    drv_open(&d, g_backend, &c, &p, 17, 1024);
    d.track_jobs = true;
    drv_add(&d, 300);
    uint32_t measured_steps = 0;
    assert_int_equal(c.n_q_heads * c.head_dim, 4 * 16);
    assert_int_equal(c.n_kv_heads * c.head_dim, 2 * 16);
    for (uint32_t step = 0; step < 12; step++) {
      /* A peek commits the layer's transfer before the step; the step's commit then has nothing new to take
       * and must keep what the peek mapped (the self drafter peeks before every step). */
      for (uint32_t l = 0; track == 2 && l < c.n_layers; l++)
        OKV_ASSERT_OK(okv_runtime_peek_layer(d.rt, 1, d.ids, l, 1, pq, pkv, pout));
      drv_step(&d, 2, 0.0f);
      uint32_t l = step % c.n_layers, n_tok = 300 + step + 1, nb = (n_tok + 15) / 16;
      const okv_step_stats_t *st = &d.last_stats;
      if (!track) {
        assert_int_equal(st->fetched_share_blocks, 0);
        assert_true(st->fetched_share == 0.0);
        continue;
      }
      assert_int_equal(st->fetched_share_blocks, d.last_job[l].blocks_moved);
      assert_int_equal(d.last_job[l].fetched_share_blocks, st->fetched_share_blocks); /* on layer l only */
      assert_int_equal(d.last_job[1 - l].fetched_share_blocks, 0);
      if (st->fetched_share_blocks == 0) continue;
      measured_steps++;
      uint32_t blocks[64], n_res = 0, n_res0 = UINT32_MAX;
      uint32_t n_vis = 0;
      for (uint32_t h = 0; h < c.n_kv_heads; h++) {
        OKV_ASSERT_OK(okv_runtime_seq_resident(d.rt, d.ids[0], l, h, blocks, 64, &n_res));
        if (n_res0 == UINT32_MAX) n_res0 = n_res;
        assert_int_equal(n_res, n_res0); /* every head alike */
        uint32_t v = 0;
        for (uint32_t i = 0; i < n_res; i++) v += blocks[i] + 1 < nb ? 16u : n_tok - blocks[i] * 16u;
        if (h == 0) n_vis = v;
        assert_int_equal(v, n_vis);
      }
      double want = (double)st->fetched_share_blocks * 16.0 * n_res0 / n_vis;
      assert_true(fabs(st->fetched_share - want) <= 1e-4 * want);
    }
    if (track) assert_true(measured_steps >= 2);
    drv_close(&d);
  }
}

/* Self-tuning cap (fetch_ratio_auto): the formula on hand-computed cases, and a
 * run in which every step's admissions stay within the maximum C while the
 * link and the layer interval get measured. */
static void test_auto_cap(void **state) {
  (void)state;
  okv_runtime_config_t c;
  budget_config(&c, 8, 0.5); /* C_max = 4 */
  c.fetch_ratio_auto = true;
  c.mode = OKV_MODE_OASIS;
  okv_hal_device_params_t p = small_params();
  drv_t d;
  drv_open(&d, g_backend, &c, &p, 11, 1024);
  d.track_jobs = true; /* the cap per job (last_job) */
  okv_runtime_t *rt = d.rt;
  assert_int_equal(rt->cap_blocks, 4);
  /* Nothing measured: the paper's 0.05 * K = 0.4 -> 1. */
  assert_int_equal(okv_rt_cap_ceiling(rt, 2), 1);
  /* 2 layers x 2 KV heads x 3 seqs = 12 heads; block_bytes = 2 * 16 * 16 * 4 = 2048.
   * 0.8 * 1e6 B/s * 0.0768 s / (12 * 2048) = 2.5 -> 2. */
  uint64_t bb = okv_block_bytes(c.kv_dtype, c.head_dim);
  assert_int_equal(bb, 2048);
  rt->link_bps = 1e6;
  rt->layer_interval_s = 0.0768;
  assert_int_equal(okv_rt_cap_ceiling(rt, 3), 2);
  rt->link_bps = 0.5e6; /* half the link: 1.25 -> 1 */
  assert_int_equal(okv_rt_cap_ceiling(rt, 3), 1);
  rt->link_bps = 0.1e6; /* below one block per head: never below 1 */
  assert_int_equal(okv_rt_cap_ceiling(rt, 3), 1);
  rt->link_bps = 1e9; /* never above the maximum */
  assert_int_equal(okv_rt_cap_ceiling(rt, 3), 4);
  rt->link_bps = NAN;
  assert_int_equal(okv_rt_cap_ceiling(rt, 3), 1);
  rt->link_bps = 0;
  rt->layer_interval_s = 0;
  drv_add(&d, 300);
  drv_add(&d, 200);
  okv_cap_state_t cs;
  for (uint32_t step = 0; step < 30; step++) {
    drv_step(&d, 2, 2.0f);
    assert_int_equal(d.last_layer_code, OKV_STATUS_OK);
    uint64_t heads = (uint64_t)d.n_seqs * c.n_layers * c.n_kv_heads;
    assert_true(d.last_stats.admitted <= 2u * 4u * heads); /* the step's own job and maybe the previous one's */
    for (uint32_t l = 0; l < c.n_layers; l++)              /* the cap per job */
      assert_true(d.last_job[l].admitted <= 4u * d.n_seqs * c.n_kv_heads);
    OKV_ASSERT_OK(okv_runtime_cap_state(rt, &cs));
    assert_true(cs.cap_blocks >= 1.0 && cs.cap_blocks <= 4.0);
    assert_int_equal(cs.cap_max_blocks, 4);
    /* The controller's C stays within 1..ceiling, the ceiling within 1..C_max (core/cap_ctl.h). */
    assert_true(cs.cap_ceiling_blocks >= 1 && cs.cap_ceiling_blocks <= 4);
    assert_true(cs.cap_target_blocks >= 1 && cs.cap_target_blocks <= cs.cap_ceiling_blocks);
    assert_true(okv_rt_choose_cap(rt, 2) <= okv_rt_cap_ceiling(rt, 2));
  }
  assert_true(cs.layer_interval_seconds > 0);
  assert_true(cs.link_bytes_per_second > 0); /* transfers happened and were timed */
  okv_status_t st = okv_runtime_cap_state(rt, NULL);
  assert_int_equal(okv_status_code(st), OKV_STATUS_INVALID_ARGUMENT);
  okv_status_free(st);
  drv_close(&d);
  /* Modes without a cap report none, auto or not (they used to report C_max and a target of 1). */
  const okv_mode_t uncapped[] = {OKV_MODE_DENSE, OKV_MODE_ONDEMAND};
  for (size_t i = 0; i < 2; i++) {
    okv_runtime_config_t u = c;
    u.mode = uncapped[i];
    drv_open(&d, g_backend, &u, &p, 9, 1024);
    drv_add(&d, 300);
    for (uint32_t step = 0; step < 3; step++) drv_step(&d, 1, 2.0f);
    memset(&cs, 0xff, sizeof cs);
    OKV_ASSERT_OK(okv_runtime_cap_state(d.rt, &cs));
    assert_true(cs.cap_blocks == 0 && cs.cap_max_blocks == 0 && cs.cap_ceiling_blocks == 0 &&
                cs.cap_target_blocks == 0 && cs.spare_blocks == 0 && cs.link_bytes_per_second == 0 &&
                cs.layer_interval_seconds == 0 && cs.marginal_share == 0);
    drv_close(&d);
  }
}

/* Checks the slot accounting of a runtime whose heads own between `lo` and `hi` slots: every head's map is
 * consistent, owned slots are distinct across heads and the pool, and owned + pool = every slot. Returns the
 * heads' spares (owned beyond K + 1) of layer l, summed. */
static uint64_t check_slots(const drv_t *d, uint32_t lo, uint32_t hi, uint32_t layer, uint64_t *out_spares) {
  const okv_runtime_t *rt = d->rt;
  uint8_t *seen = calloc(rt->n_slots, 1);
  assert_non_null(seen);
  uint64_t owned = 0, LH = (uint64_t)rt->cfg.n_layers * rt->cfg.n_kv_heads;
  *out_spares = 0;
  for (uint32_t i = 0; i < rt->cfg.max_seqs; i++) {
    const okv_seq_t *s = &rt->seqs[i];
    if (!s->live) continue;
    for (uint64_t j = 0; j < LH; j++) {
      const okv_head_t *h = &s->heads[j];
      OKV_ASSERT_OK(okv_block_map_check(&h->map));
      assert_true(h->n_owned >= lo && h->n_owned <= hi);
      if (j / rt->cfg.n_kv_heads == layer) *out_spares += h->n_owned - rt->cfg.budget_blocks - 1u;
      for (uint32_t k = 0; k < h->n_owned; k++) {
        assert_true(h->owned[k] < rt->n_slots);
        assert_int_equal(seen[h->owned[k]], 0);
        seen[h->owned[k]] = 1;
      }
      owned += h->n_owned;
    }
  }
  for (uint64_t k = 0; k < rt->n_free_slots; k++) {
    assert_int_equal(seen[rt->free_slots[k]], 0);
    seen[rt->free_slots[k]] = 1;
  }
  free(seen);
  assert_int_equal(owned + rt->n_free_slots, rt->n_slots);
  return owned;
}

/* The self-tuning cap reserves K + 2 slots per head (C = 1) and spreads the rest of the pool as spares, up to
 * K + 1 + C_max: it admits as many sequences as a cap of 1 would, where reserving C_max for every head would
 * admit fewer. A head admits at most its spares per step; a new sequence takes spares back; a removed one's
 * slots become spares. Attention stays exact throughout. */
/* okv_runtime_stats_reset between steps drops the jobs issued before it: after a warm-up step, a reset and
 * one step, the stats count exactly one job per layer (every head predicts K blocks: hits + misses =
 * sequences x layers x KV heads x K) and the warm-up's jobs no longer land in the measured step. */
static void test_stats_reset_drops_earlier_jobs(void **state) {
  (void)state;
  okv_runtime_config_t c;
  budget_config(&c, 8, 0.25);
  c.mode = OKV_MODE_OASIS;
  okv_hal_device_params_t p = small_params();
  drv_t d;
  drv_open(&d, g_backend, &c, &p, 23, 1024);
  drv_add(&d, 300); /* 19 blocks: more than K + 1 */
  drv_add(&d, 260);
  for (uint32_t warm = 0; warm < 2; warm++) drv_step(&d, 2, 2.0f);
  okv_runtime_stats_reset(d.rt);
  drv_step(&d, 2, 2.0f);
  okv_step_stats_t cum;
  OKV_ASSERT_OK(okv_runtime_stats(d.rt, UINT32_MAX, &cum));
  assert_int_equal(cum.steps, 1);
  assert_int_equal(cum.hits + cum.misses, 2ull * c.n_layers * c.n_kv_heads * 8u);
  drv_close(&d);
}

/* Without the recall pass and the fetched-share measurement, every bookkeeping interval is one of the six
 * parts okv_step_stats_t names (select, commit, working set, prediction set-up, append, hand-off): their sum is
 * bookkeeping_seconds (to rounding), with host and with device selection, and each part is measured. */
static void test_bookkeeping_parts(void **state) {
  (void)state;
  for (int dev = 0; dev < 2; dev++) {
    okv_runtime_config_t c;
    budget_config(&c, 8, 0.25);
    c.mode = OKV_MODE_OASIS;
    c.device_selection = dev == 1;
    c.track_recall = false;
    c.track_fetch_share = false;
    okv_hal_device_params_t p = small_params();
    drv_t d;
    drv_open(&d, g_backend, &c, &p, 31, 1024);
    drv_add(&d, 300);
    drv_add(&d, 260);
    for (uint32_t step = 0; step < 24; step++) drv_step(&d, 2, 2.0f);
    OKV_ASSERT_OK(okv_runtime_synchronize(d.rt));
    okv_step_stats_t cum;
    OKV_ASSERT_OK(okv_runtime_stats(d.rt, UINT32_MAX, &cum));
    const double parts = cum.select_seconds + cum.commit_seconds + cum.working_set_seconds + cum.predict_setup_seconds +
                         cum.append_bookkeeping_seconds + cum.handoff_seconds;
    print_message(
        "%s selection: bookkeeping %.1f us, parts %.1f us (select %.1f, commit %.1f, working set %.1f, "
        "prediction set-up %.1f, append %.1f, hand-off %.1f)\n",
        dev ? "device" : "host", cum.bookkeeping_seconds * 1e6, parts * 1e6, cum.select_seconds * 1e6,
        cum.commit_seconds * 1e6, cum.working_set_seconds * 1e6, cum.predict_setup_seconds * 1e6,
        cum.append_bookkeeping_seconds * 1e6, cum.handoff_seconds * 1e6);
    assert_true(cum.bookkeeping_seconds > 0);
    assert_true(fabs(parts - cum.bookkeeping_seconds) <= 1e-9 * cum.bookkeeping_seconds);
    assert_true(cum.select_seconds > 0 && cum.commit_seconds > 0 && cum.working_set_seconds > 0);
    assert_true(cum.predict_setup_seconds > 0 && cum.append_bookkeeping_seconds > 0 && cum.handoff_seconds > 0);
    drv_close(&d);
  }
}

static void test_auto_cap_spares(void **state) {
  (void)state;
  okv_runtime_config_t c;
  budget_config(&c, 8, 0.5); /* K = 8, C_max = 4: heads own 10 .. 13 slots */
  c.mode = OKV_MODE_OASIS;
  uint64_t bb = okv_block_bytes(c.kv_dtype, c.head_dim), LH = (uint64_t)c.n_layers * c.n_kv_heads;
  c.device_pool_bytes = (3 * LH * 10 + 5) * bb; /* 125 slots: 3 sequences at K + 2, 2 at K + 1 + 4 */
  okv_hal_device_params_t p = small_params();
  drv_t d;
  uint32_t room;
  drv_open(&d, g_backend, &c, &p, 17, 1024); /* the fixed ratio 0.5 for comparison */
  OKV_ASSERT_OK(okv_runtime_seq_capacity(d.rt, 300, &room));
  assert_int_equal(room, 2);
  drv_add(&d, 300);
  okv_cap_state_t cs0;
  OKV_ASSERT_OK(okv_runtime_cap_state(d.rt, &cs0));
  assert_true(cs0.spare_blocks == 4.0); /* a fixed ratio: C_max spares per head */
  drv_close(&d);
  c.fetch_ratio_auto = true;
  drv_open(&d, g_backend, &c, &p, 17, 1024);
  d.track_jobs = true;
  assert_int_equal(d.rt->n_slots, 125);
  OKV_ASSERT_OK(okv_runtime_seq_capacity(d.rt, 300, &room));
  assert_int_equal(room, 3);
  uint64_t spares = 0;
  drv_add(&d, 300); /* alone: every head gets all its spares */
  assert_int_equal(check_slots(&d, 13, 13, 0, &spares), 4 * 13);
  assert_int_equal(spares, 2 * 4);
  drv_add(&d, 250);
  drv_add(&d, 200); /* needs spares back: 125 - 2 x 52 = 21 free < 40; the 5 left are spread evenly */
  assert_int_equal(check_slots(&d, 10, 11, 0, &spares), 125);
  /* 6 heads of layer 0 with 1 spare; the 5 extra go to the first 5 heads in (sequence, layer, KV head) order,
   * 3 of them in layer 0. */
  assert_int_equal(spares, 6 + 3);
  okv_cap_state_t cs;
  OKV_ASSERT_OK(okv_runtime_cap_state(d.rt, &cs));
  assert_true(fabs(cs.spare_blocks - 17.0 / 12.0) < 1e-12); /* 12 heads: 12 + 5 spares */
  assert_int_equal(okv_runtime_debug_free_slots(d.rt), 0);
  OKV_ASSERT_OK(okv_runtime_seq_capacity(d.rt, 300, &room));
  assert_int_equal(room, 0);
  for (uint32_t step = 0; step < 24; step++) {
    uint64_t sp[2];
    check_slots(&d, 10, 13, 0, &sp[0]);
    check_slots(&d, 10, 13, 1, &sp[1]);
    drv_step(&d, 2, 2.0f);
    assert_int_equal(d.last_layer_code, OKV_STATUS_OK);
    for (uint32_t l = 0; l < c.n_layers; l++) assert_true(d.last_job[l].admitted <= sp[l]); /* the spares cap */
    if (step == 11) {
      drv_remove(&d, 1); /* its slots become the others' spares: every head is full again */
      assert_int_equal(check_slots(&d, 13, 13, 0, &spares), 8 * 13);
      assert_int_equal(okv_runtime_debug_free_slots(d.rt), 125 - 8 * 13);
      OKV_ASSERT_OK(okv_runtime_debug_check_tables(d.rt)); /* the heads' hot mirrors follow the spread */
      OKV_ASSERT_OK(okv_runtime_seq_capacity(d.rt, 300, &room));
      assert_true(room <= 1);
    }
    if (step == 17) {
      OKV_ASSERT_OK(okv_runtime_seq_capacity(d.rt, 300, &room));
      if (room == 1) drv_add(&d, 280); /* takes free spares back (those in flight stay) */
      check_slots(&d, 10, 13, 0, &spares);
      OKV_ASSERT_OK(okv_runtime_debug_check_tables(d.rt)); /* and the reclaim */
    }
  }
  assert_true(drv_check(&d, false) < 2e-5);
  drv_close(&d);
}

/* The self-tuning cap searches C only up to the most spares a head holds: with one spare per head (a pool of
 * K + 2 slots per head) the search, which starts at 0.05 x K = 2, is clamped to 1 when the sequence is added
 * and every job admits with C = 1, whatever the link would carry. */
static void test_auto_cap_spares_ceiling(void **state) {
  (void)state;
  okv_runtime_config_t c;
  budget_config(&c, 40, 0.25); /* K = 40, C_max = 10 */
  c.mode = OKV_MODE_OASIS;
  c.fetch_ratio_auto = true;
  uint64_t bb = okv_block_bytes(c.kv_dtype, c.head_dim), LH = (uint64_t)c.n_layers * c.n_kv_heads;
  c.device_pool_bytes = LH * (40 + 2) * bb;
  okv_hal_device_params_t p = small_params();
  drv_t d;
  drv_open(&d, g_backend, &c, &p, 29, 1024);
  drv_add(&d, 900); /* 57 blocks > K */
  assert_int_equal(d.rt->spares_max, 1);
  okv_cap_state_t cs;
  OKV_ASSERT_OK(okv_runtime_cap_state(d.rt, &cs));
  assert_int_equal(cs.cap_target_blocks, 1); /* 0.05 x K = 2, clamped to the 1 spare at the add */
  for (uint32_t step = 0; step < 8; step++) {
    drv_step(&d, 2, 2.0f);
    assert_int_equal(d.last_layer_code, OKV_STATUS_OK);
    OKV_ASSERT_OK(okv_runtime_cap_state(d.rt, &cs));
    assert_int_equal(cs.cap_target_blocks, 1);
    if (step > 0) assert_true(cs.cap_blocks == 1.0); /* jobs submitted after the first step's end */
    assert_true(cs.spare_blocks == 1.0);
  }
  assert_true(drv_check(&d, false) < 2e-5);
  drv_remove(&d, 0);
  assert_int_equal(d.rt->spares_max, 0); /* no head left */
  drv_close(&d);
  /* A new sequence that takes the spares back clamps the search at once, before the next step: alone, a
   * sequence holds C_max = 10 spares per head and the search is at 0.05 x K = 2; with a second one in a pool of
   * two sequences at K + 2, every head keeps 1 spare, and the target is 1 right after the add. */
  c.device_pool_bytes = 2 * LH * (40 + 2) * bb;
  drv_open(&d, g_backend, &c, &p, 29, 1024);
  drv_add(&d, 900);
  assert_int_equal(d.rt->spares_max, 10);
  OKV_ASSERT_OK(okv_runtime_cap_state(d.rt, &cs));
  assert_int_equal(cs.cap_target_blocks, 2);
  drv_add(&d, 700);
  assert_int_equal(d.rt->spares_max, 1);
  OKV_ASSERT_OK(okv_runtime_cap_state(d.rt, &cs));
  assert_int_equal(cs.cap_target_blocks, 1);
  drv_step(&d, 2, 2.0f);
  assert_int_equal(d.last_layer_code, OKV_STATUS_OK);
  OKV_ASSERT_OK(okv_runtime_cap_state(d.rt, &cs));
  assert_true(cs.cap_blocks == 1.0); /* every job of the first step after the add */
  drv_close(&d);
}

/* An add (no prefill) refused with OUT_OF_MEMORY whose message names `what`, leaving the slot pool as it was. */
static void expect_add_refused(drv_t *d, const char *what) {
  uint64_t pool = okv_runtime_debug_free_slots(d->rt);
  uint32_t id;
  okv_status_t st = okv_runtime_seq_add(d->rt, NULL, &id);
  assert_int_equal(okv_status_code(st), OKV_STATUS_OUT_OF_MEMORY);
  assert_non_null(strstr(okv_status_message(st), what));
  okv_status_free(st);
  assert_int_equal(okv_runtime_debug_free_slots(d->rt), pool);
}

/* With the self-tuning cap, okv_runtime_seq_capacity right after a step (the background thread may still be
 * selecting, taking spares from the heads' free stacks) waits for the pipeline: it gives the same answer as
 * once the pipeline is idle and never races with it (TSan runs this test); an add it said fits succeeds, one
 * it said does not fails with OUT_OF_MEMORY naming the device tier and changes nothing. The pool: two
 * sequences with every spare (13 slots per head) and 4 per head + 2 more, so a third sequence (10 per head)
 * fits only when nearly every spare is free. */
static void test_auto_capacity_after_step(void **state) {
  (void)state;
  okv_runtime_config_t c;
  budget_config(&c, 8, 0.5); /* K = 8, C_max = 4: heads own 10 .. 13 slots */
  c.mode = OKV_MODE_OASIS;
  c.fetch_ratio_auto = true;
  uint64_t bb = okv_block_bytes(c.kv_dtype, c.head_dim), LH = (uint64_t)c.n_layers * c.n_kv_heads;
  c.device_pool_bytes = (2 * LH * 13 + 4 * LH + 2) * bb;
  okv_hal_device_params_t p = small_params();
  drv_t d;
  drv_open(&d, g_backend, &c, &p, 31, 1024);
  drv_add(&d, 300);
  drv_add(&d, 260);
  uint32_t fits = 0;
  for (uint32_t step = 0; step < 16; step++) {
    drv_step(&d, 2, 2.0f);
    assert_int_equal(d.last_layer_code, OKV_STATUS_OK);
    uint32_t a = 0, b = 0;
    OKV_ASSERT_OK(okv_runtime_seq_capacity(d.rt, 200, &a)); /* right after step_end */
    okv_step_stats_t cum;
    OKV_ASSERT_OK(okv_runtime_stats(d.rt, UINT32_MAX, &cum)); /* waits for the pipeline */
    OKV_ASSERT_OK(okv_runtime_seq_capacity(d.rt, 200, &b));
    assert_int_equal(a, b);
    assert_true(a <= 1);
    if (d.n_seqs == 3) continue;
    if (a == 1) {
      drv_add(&d, 200); /* asserts success */
      fits++;
    } else {
      expect_add_refused(&d, "device tier");
    }
  }
  assert_true(fits >= 1); /* the add that capacity allowed was made and succeeded (refusals may not occur) */
  assert_true(drv_check(&d, false) < 2e-5);
  drv_close(&d);
}

/* Slot reservation at seq_add: OUT_OF_MEMORY leaves nothing allocated; capacity reports it. */
static void test_capacity_and_oom(void **state) {
  (void)state;
  okv_runtime_config_t c;
  budget_config(&c, 4, 0.25);
  uint64_t bb = okv_block_bytes(c.kv_dtype, c.head_dim);
  uint64_t per_seq = (uint64_t)c.n_layers * c.n_kv_heads * (4 + 1 + 1);
  c.device_pool_bytes = 2 * per_seq * bb + bb; /* two sequences and one spare slot */
  okv_hal_device_params_t p = small_params();
  drv_t d;
  drv_open(&d, g_backend, &c, &p, 3, 256);
  uint32_t room;
  OKV_ASSERT_OK(okv_runtime_seq_capacity(d.rt, 100, &room));
  assert_int_equal(room, 2);
  drv_add(&d, 100);
  drv_add(&d, 10);
  OKV_ASSERT_OK(okv_runtime_seq_capacity(d.rt, 100, &room));
  assert_int_equal(room, 0);
  uint64_t free_before = okv_runtime_debug_free_slots(d.rt);
  assert_int_equal(free_before, 1);
  uint64_t cap = 0, used_before = 0, used_after = 0;
  OKV_ASSERT_OK(okv_hal_device_tier_usage(d.dev, OKV_TIER_HOST, &cap, &used_before));
  expect_add_refused(&d, "device");
  OKV_ASSERT_OK(okv_hal_device_tier_usage(d.dev, OKV_TIER_HOST, &cap, &used_after));
  assert_int_equal(used_after, used_before);
  /* Still usable, and removing one frees room for one more. */
  drv_step(&d, 2, 1.0f);
  assert_true(drv_check(&d, false) < 2e-5);
  drv_remove(&d, 0);
  OKV_ASSERT_OK(okv_runtime_seq_capacity(d.rt, 100, &room));
  assert_int_equal(room, 1);
  drv_add(&d, 50);
  drv_step(&d, 2, 1.0f);
  assert_true(drv_check(&d, false) < 2e-5);
  drv_close(&d);
}

/* DENSE mode: slots on append; pool exhaustion is OUT_OF_MEMORY naming the
 * device tier and leaves the layer unchanged; the host KV stays intact. */
static void test_dense_pool_exhaustion(void **state) {
  (void)state;
  okv_runtime_config_t c;
  base_config(&c);
  c.mode = OKV_MODE_DENSE;
  c.n_layers = 1;
  uint64_t bb = okv_block_bytes(c.kv_dtype, c.head_dim);
  c.device_pool_bytes = 6 * bb; /* 3 blocks per head */
  okv_hal_device_params_t p = small_params();
  drv_t d;
  drv_open(&d, g_backend, &c, &p, 4, 256);
  drv_add(&d, 40); /* 3 blocks per head: pool full */
  float k[2 * 16], v[2 * 16], q[4 * 16], out[4 * 16];
  for (int i = 0; i < 32; i++) k[i] = v[i] = 0.5f;
  for (int i = 0; i < 64; i++) q[i] = 0.1f;
  /* Tokens 40..47 fit in block 2. */
  for (int t = 0; t < 8; t++) {
    OKV_ASSERT_OK(okv_runtime_step_begin(d.rt, 1, d.ids, 1));
    OKV_ASSERT_OK(okv_runtime_step_layer(d.rt, 0, k, v, q, NULL, out));
    OKV_ASSERT_OK(okv_runtime_step_end(d.rt, NULL));
    rt_hist_append(&d.hist[0], 0, k, v);
  }
  OKV_ASSERT_OK(okv_runtime_step_begin(d.rt, 1, d.ids, 1));
  okv_status_t st = okv_runtime_step_layer(d.rt, 0, k, v, q, NULL, out);
  assert_int_equal(okv_status_code(st), OKV_STATUS_OUT_OF_MEMORY);
  assert_non_null(strstr(okv_status_message(st), "device"));
  okv_status_free(st);
  okv_status_free(okv_runtime_step_end(d.rt, NULL));
  uint32_t n;
  OKV_ASSERT_OK(okv_runtime_seq_length(d.rt, d.ids[0], &n));
  assert_int_equal(n, 48);
  /* Host KV intact: compare every host block with what was appended. */
  const okv_runtime_t *rt = d.rt;
  for (uint32_t h = 0; h < 2; h++)
    for (uint32_t t = 0; t < 48; t++) {
      uint32_t hb = okv_runtime_debug_host_block(rt, d.ids[0], 0, h, t / 16);
      assert_true(hb != UINT32_MAX);
      const float *blk = (const float *)(rt->host.ptr + (uint64_t)hb * bb);
      for (uint32_t e = 0; e < 16; e++) {
        assert_true(blk[e * 16 + t % 16] == d.hist[0].k[rt_hist_off(&d.hist[0], 0, t) + h * 16 + e]);
        assert_true(blk[256 + (t % 16) * 16 + e] == d.hist[0].v[rt_hist_off(&d.hist[0], 0, t) + h * 16 + e]);
      }
    }
  drv_close(&d);
}

/* peek: read-only attention over the resident set with every token in flight. */
static void test_peek(void **state) {
  (void)state;
  okv_runtime_config_t c;
  budget_config(&c, 3, 0.5);
  okv_hal_device_params_t p = small_params();
  drv_t d;
  drv_open(&d, g_backend, &c, &p, 5, 512);
  drv_add(&d, 120);
  drv_add(&d, 70);
  for (int s = 0; s < 5; s++) drv_step(&d, 2, 2.0f);
  uint32_t T = 2, H = 2, hd = 16, nq = 4;
  float q[2 * 2 * 4 * 16], infl[2 * 2 * 2 * 2 * 16], out[2 * 2 * 4 * 16], ref[16];
  for (size_t i = 0; i < sizeof q / 4; i++) q[i] = okv_test_rng_normal(&d.rng);
  for (size_t i = 0; i < sizeof infl / 4; i++) infl[i] = okv_test_rng_normal(&d.rng);
  uint32_t len0;
  OKV_ASSERT_OK(okv_runtime_seq_length(d.rt, d.ids[0], &len0));
  OKV_ASSERT_OK(okv_runtime_peek_layer(d.rt, 2, d.ids, 1, T, q, infl, out));
  uint32_t len1;
  OKV_ASSERT_OK(okv_runtime_seq_length(d.rt, d.ids[0], &len1));
  assert_int_equal(len0, len1); /* nothing committed */
  double worst = 0;
  for (uint32_t i = 0; i < 2; i++)
    for (uint32_t kvh = 0; kvh < H; kvh++) {
      uint32_t blocks[64], nb;
      OKV_ASSERT_OK(okv_runtime_seq_resident(d.rt, d.ids[i], 1, kvh, blocks, 64, &nb));
      for (uint32_t t = 0; t < T; t++)
        for (uint32_t g = 0; g < 2; g++) {
          uint32_t hq = kvh * 2 + g;
          rt_ref_attend(&d.hist[i], 1, kvh, q + ((i * T + t) * nq + hq) * hd, t, T, blocks, nb,
                        infl + (size_t)i * T * 2 * H * hd, T, ref);
          double e = rt_max_abs_diff(ref, out + ((i * T + t) * nq + hq) * hd, hd);
          if (e > worst) worst = e;
        }
    }
  assert_true(worst < 2e-5);
  /* Steps continue normally after a peek committed layer 1's transfer early. */
  drv_step(&d, 2, 2.0f);
  assert_true(drv_check(&d, false) < 2e-5);
  drv_close(&d);
}

int main(int argc, char **argv) {
  g_backend = okv_test_backend_or_skip(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config_validate),
      cmocka_unit_test(test_argument_errors),
      cmocka_unit_test(test_scoring_groups_in_effect),
      cmocka_unit_test(test_modes_equal_dense),
      cmocka_unit_test(test_sparse_oasis),
      cmocka_unit_test(test_sparse_proxy),
      cmocka_unit_test(test_sparse_ondemand),
      cmocka_unit_test(test_capacity_and_oom),
      cmocka_unit_test(test_dense_pool_exhaustion),
      cmocka_unit_test(test_peek),
      cmocka_unit_test(test_auto_cap),
      cmocka_unit_test(test_auto_cap_pause_after_synchronize),
      cmocka_unit_test(test_fetched_share),
      cmocka_unit_test(test_stats_reset_drops_earlier_jobs),
      cmocka_unit_test(test_bookkeeping_parts),
      cmocka_unit_test(test_auto_cap_spares),
      cmocka_unit_test(test_auto_cap_spares_ceiling),
      cmocka_unit_test(test_auto_capacity_after_step),
      cmocka_unit_test(test_two_level),
      cmocka_unit_test(test_q8_scoring),
      cmocka_unit_test(test_c4_scoring),
  };
  return cmocka_run_group_tests_name("core_runtime", tests, NULL, NULL);
}
