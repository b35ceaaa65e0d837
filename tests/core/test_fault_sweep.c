/* Systematic fault injection (in the manner of SQLite's fault simulation):
 * a scripted workload (three sequences of different lengths, prefill, decode
 * steps with a draft token, a sequence added between steps and one removed in
 * the middle of a step, peek_layer, every mode) runs once fault-free to count
 * the HAL operations it makes per thread class (foreground = the engine
 * thread, background = the runtime's pipeline thread), then once per N failing
 * the N-th operation of a class: once transiently (that call only) and once
 * persistently (every call of the class from N on, until the recovery phase).
 * After each run (docs/api.md "Faults"):
 *  - no crash, no leak (CMocka's allocator; the device's tier usage back to 0);
 *  - every failure surfaced: a non-OK status, or absorbed and counted
 *    (pipeline_errors, failed_blocks, retried_writes);
 *  - every `out` of an OK call equals a double-precision reference over the
 *    blocks the runtime reports readable for the sequence (which must include
 *    the active block, so the real token and the active block's committed
 *    tokens) plus the in-flight draft: no phantom, stale or foreign K/V; every
 *    `out` of a failed call is all NaN;
 *  - the HOST tier holds every committed token exactly;
 *  - once faults stop, every call returns OK, and where the working set is the
 *    same as the fault-free run's (always in dense mode) so is every output.
 * Usage: test_core_fault_sweep BACKEND [--full] [--stride N]; the environment
 * variable OKV_SWEEP_STRIDE sets the default stride (CI); --full sweeps every N. */
#include <pthread.h>
#include <stdio.h>

#include "tests/core/rt_check.h"
#include "oasiskv/fault.h"

static const char *g_backend = "cpu";
static uint32_t g_stride = 1;

enum { CLS_FG = 0, CLS_BG = 1, N_CLS = 2 };

typedef struct sweep_t {
  pthread_t main_thread;
  uint64_t n_ops[N_CLS]; /* operations seen per class (atomic) */
  uint64_t n_kind[OKV_HAL_OP_COUNT];
  int target_class;  /* -1: none */
  uint64_t target_n; /* 1-based */
  int persistent;
  int active;   /* faults armed (phase 1 only) */
  int checking; /* the main thread is checking outputs: its operations are the observer's, not the workload's */
  uint64_t n_injected;
  uint64_t phase1_ops[N_CLS]; /* operations before the recovery phase of the last run */
} sweep_t;

static sweep_t g_sw;

static bool sweep_fail_op(void *user, okv_hal_op_t op, okv_tier_t src, okv_tier_t dst) {
  sweep_t *w = user;
  (void)src;
  (void)dst;
  int cls = pthread_equal(pthread_self(), w->main_thread) ? CLS_FG : CLS_BG;
  if (cls == CLS_FG && __atomic_load_n(&w->checking, __ATOMIC_ACQUIRE)) return false; /* not counted either */
  uint64_t k = __atomic_add_fetch(&w->n_ops[cls], 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&w->n_kind[op], 1, __ATOMIC_RELAXED);
  if (!__atomic_load_n(&w->active, __ATOMIC_ACQUIRE) || cls != w->target_class) return false;
  bool hit = w->persistent ? k >= w->target_n : k == w->target_n;
  if (hit) __atomic_add_fetch(&w->n_injected, 1, __ATOMIC_RELAXED);
  return hit;
}

static okv_hal_fault_hooks_t g_hooks = {&g_sw, NULL, NULL, sweep_fail_op};

/* ---- the workload ---- */

#define W_SEQS       3
#define W_STEPS      8
#define W_RECOVERY   6
#define W_T          2
#define W_MAX_TOKENS 256

typedef struct run_t {
  okv_runtime_config_t cfg;
  okv_hal_device_t *dev;
  okv_runtime_t *rt;
  bool live[W_SEQS];
  uint32_t id[W_SEQS];
  rt_hist_t hist[W_SEQS];
  bool hist_init[W_SEQS];
  /* Outputs of the last step, [seq][layer][T][nq][hd], and whether each is valid. */
  float *last_out;
  bool last_valid[W_SEQS][4];
  /* Facts gathered. */
  uint32_t n_failed_calls; /* non-OK statuses returned */
  uint32_t n_checked_outs; /* OK outputs compared with the reference */
  bool recovery_failed;    /* a call failed after faults stopped */
  uint64_t absorbed;       /* pipeline_errors + failed_blocks + retried_writes at the end */
} run_t;

static const uint32_t k_prefill[W_SEQS] = {70, 0, 33};
static bool g_auto;   /* the sweep in progress runs the self-tuning cap (its spare slots move at every seq_add) */
static bool g_device; /* the sweep in progress runs device selection (slot tables beside the maps) */

static void w_config(okv_runtime_config_t *c, okv_mode_t mode) {
  rt_config(c, 2, 4, 2, 8);
  c->max_seqs = W_SEQS;
  c->max_context_tokens = W_MAX_TOKENS;
  c->budget_blocks = 4;
  c->fetch_ratio = 0.5; /* C = 2 (with g_auto: at most 2, and at most a head's spares) */
  c->fetch_ratio_auto = g_auto;
  c->device_selection = g_device;
  c->mode = mode;
  c->track_recall = mode == OKV_MODE_PROXY;      /* covers the recall pass */
  c->track_fetch_share = mode == OKV_MODE_OASIS; /* covers attention with block mass and its read-back */
}

/* Deterministic inputs that do not depend on what failed before. */
static void w_fill(uint64_t seed, float *x, size_t n, float scale) {
  okv_test_rng_t r;
  okv_test_rng_seed(&r, seed);
  for (size_t i = 0; i < n; i++) x[i] = scale * okv_test_rng_normal(&r);
}

static size_t w_q_row(const okv_runtime_config_t *c) { return (size_t)W_T * c->n_q_heads * c->head_dim; }

/* Checks the output rows of a batch: OK → reference over readable blocks + in-flight; failed → NaN. */
static void w_check_out(run_t *r, uint32_t layer, uint32_t n, const uint32_t *rows, const float *q, const float *infl,
                        uint32_t n_inflight, const float *out, bool ok, bool record) {
  const okv_runtime_config_t *c = &r->cfg;
  uint32_t H = c->n_kv_heads, G = c->n_q_heads / H, hd = c->head_dim;
  size_t row = w_q_row(c);
  float ref[16];
  uint32_t blocks[64];
  for (uint32_t i = 0; i < n; i++) {
    uint32_t w = rows[i];
    const float *o = out + i * row;
    if (!ok) {
      for (size_t e = 0; e < row; e++) assert_true(isnan(o[e]));
      if (record) r->last_valid[w][layer] = false;
      continue;
    }
    if (!r->live[w]) { /* removed during the step: zeros */
      for (size_t e = 0; e < row; e++) assert_true(o[e] == 0.0f);
      continue;
    }
    const rt_hist_t *h = &r->hist[w];
    uint32_t n_tok = h->n_tokens[layer];
    for (uint32_t kvh = 0; kvh < H; kvh++) {
      uint32_t nb = 0;
      /* With device selection this reads the slot tables back: the check's own operations take no fault. */
      __atomic_store_n(&g_sw.checking, 1, __ATOMIC_RELEASE);
      okv_status_t rs = okv_runtime_seq_resident(r->rt, r->id[w], layer, kvh, blocks, 64, &nb);
      __atomic_store_n(&g_sw.checking, 0, __ATOMIC_RELEASE);
      OKV_ASSERT_OK(rs);
      assert_true(nb <= 64);
      if (n_tok > 0) { /* the active block (real token and its committed neighbours) is always readable */
        bool has_active = false;
        for (uint32_t j = 0; j < nb; j++) has_active |= blocks[j] == (n_tok - 1u) / 16u;
        if (!has_active) {
          print_error("layer %u seq %u head %u: active block %u not readable in an OK output\n", layer, w, kvh,
                      (n_tok - 1u) / 16u);
          fail();
        }
      }
      for (uint32_t t = 0; t < W_T; t++)
        for (uint32_t g = 0; g < G; g++) {
          uint32_t hq = kvh * G + g;
          size_t off = ((size_t)t * c->n_q_heads + hq) * hd;
          rt_ref_attend(h, layer, kvh, q + i * row + off, t, W_T, blocks, nb,
                        infl ? infl + (size_t)i * n_inflight * 2 * H * hd : NULL, n_inflight, ref);
          double e = rt_max_abs_diff(ref, o + off, hd);
          if (!(e < 3e-5)) {
            print_error("layer %u seq %u head %u t %u: |out - reference| = %g\n", layer, w, kvh, t, e);
            fail();
          }
        }
    }
    r->n_checked_outs++;
    if (record) {
      memcpy(r->last_out + ((size_t)w * c->n_layers + layer) * row, o, row * sizeof(float));
      r->last_valid[w][layer] = true;
    }
  }
}

static void w_note(run_t *r, okv_status_t st, bool recovery) {
  if (st == OKV_OK) return;
  r->n_failed_calls++;
  if (recovery) {
    print_error("after faults stopped: %s\n", okv_status_message(st));
    r->recovery_failed = true;
  }
  okv_status_free(st);
}

static void w_add(run_t *r, uint32_t w, bool recovery) {
  const okv_runtime_config_t *c = &r->cfg;
  uint32_t n = k_prefill[w];
  size_t per = (size_t)c->n_kv_heads * c->head_dim;
  float *pk = NULL, *pv = NULL;
  okv_prefill_t pf = {0, NULL, NULL};
  if (n > 0) {
    pk = test_malloc((size_t)c->n_layers * n * per * sizeof(float));
    pv = test_malloc((size_t)c->n_layers * n * per * sizeof(float));
    w_fill(1000 + w, pk, (size_t)c->n_layers * n * per, 1.0f);
    w_fill(2000 + w, pv, (size_t)c->n_layers * n * per, 1.0f);
    pf.n_tokens = n;
    pf.k = pk;
    pf.v = pv;
  }
  okv_status_t st = okv_runtime_seq_add(r->rt, n ? &pf : NULL, &r->id[w]);
  if (st == OKV_OK) {
    r->live[w] = true;
    rt_hist_init(&r->hist[w], c, W_MAX_TOKENS);
    r->hist_init[w] = true;
    for (uint32_t l = 0; l < c->n_layers; l++)
      for (uint32_t t = 0; t < n; t++)
        rt_hist_append(&r->hist[w], l, pk + ((size_t)l * n + t) * per, pv + ((size_t)l * n + t) * per);
  }
  w_note(r, st, recovery);
  if (pk) test_free(pk);
  if (pv) test_free(pv);
}

/* The live sequences: their rows (index into live/id/hist) and runtime ids;
 * returns how many. */
static uint32_t w_live(const run_t *r, uint32_t *rows, uint32_t *ids) {
  uint32_t n = 0;
  for (uint32_t w = 0; w < W_SEQS; w++)
    if (r->live[w]) {
      rows[n] = w;
      ids[n++] = r->id[w];
    }
  return n;
}

static void w_step(run_t *r, uint32_t step, bool recovery) {
  const okv_runtime_config_t *c = &r->cfg;
  uint32_t H = c->n_kv_heads, hd = c->head_dim;
  uint32_t rows[W_SEQS], ids[W_SEQS], n = w_live(r, rows, ids);
  if (n == 0) return;
  okv_status_t st = okv_runtime_step_begin(r->rt, n, ids, W_T);
  if (st != OKV_OK) {
    w_note(r, st, recovery);
    return;
  }
  size_t row = w_q_row(c), kvn = (size_t)H * hd;
  float *q = test_malloc(n * row * sizeof(float)), *out = test_malloc(n * row * sizeof(float));
  float *k = test_malloc(n * kvn * sizeof(float)), *v = test_malloc(n * kvn * sizeof(float));
  float *dr = test_malloc(n * (W_T - 1) * 2 * kvn * sizeof(float));
  for (uint32_t l = 0; l < c->n_layers; l++) {
    for (uint32_t i = 0; i < n; i++) {
      uint64_t seed = ((uint64_t)step * 16 + l) * 8 + rows[i];
      w_fill(seed * 5 + 1, q + i * row, row, 2.0f);
      w_fill(seed * 5 + 2, k + i * kvn, kvn, 1.0f);
      w_fill(seed * 5 + 3, v + i * kvn, kvn, 1.0f);
      w_fill(seed * 5 + 4, dr + i * (W_T - 1) * 2 * kvn, (W_T - 1) * 2 * kvn, 1.0f);
    }
    st = okv_runtime_step_layer(r->rt, l, k, v, q, dr, out);
    okv_status_code_t code = okv_status_code(st);
    bool committed = code != OKV_STATUS_INVALID_ARGUMENT && code != OKV_STATUS_OUT_OF_MEMORY;
    if (committed)
      for (uint32_t i = 0; i < n; i++)
        if (r->live[rows[i]]) rt_hist_append(&r->hist[rows[i]], l, k + i * kvn, v + i * kvn);
    w_check_out(r, l, n, rows, q, dr, W_T - 1, out, st == OKV_OK, true);
    w_note(r, st, recovery);
    if (!committed) break;                   /* the step cannot go on past this layer */
    if (step == 5 && l == 0 && r->live[1]) { /* remove B in the middle of a step */
      w_note(r, okv_runtime_seq_remove(r->rt, r->id[1]), recovery);
      r->live[1] = false;
    }
  }
  okv_step_stats_t stats;
  w_note(r, okv_runtime_step_end(r->rt, &stats), recovery);
  test_free(q);
  test_free(out);
  test_free(k);
  test_free(v);
  test_free(dr);
}

/* peek_layer over every live sequence with T = 1 (its own token in flight). */
static void w_peek(run_t *r, uint32_t step, bool recovery) {
  const okv_runtime_config_t *c = &r->cfg;
  uint32_t rows[W_SEQS], ids[W_SEQS], n = w_live(r, rows, ids);
  if (n == 0) return;
  size_t row = w_q_row(c), kvn = (size_t)c->n_kv_heads * c->head_dim;
  float *q = test_calloc(n * row, sizeof(float)), *out = test_malloc(n * row * sizeof(float));
  float *infl = test_calloc(n * W_T * 2 * kvn, sizeof(float));
  for (uint32_t l = 0; l < c->n_layers; l++) {
    for (uint32_t i = 0; i < n; i++) {
      w_fill(((uint64_t)step * 16 + l) * 97 + rows[i], q + i * row, row, 2.0f);
      w_fill(((uint64_t)step * 16 + l) * 89 + rows[i], infl + i * W_T * 2 * kvn, W_T * 2 * kvn, 1.0f);
    }
    okv_status_t st = okv_runtime_peek_layer(r->rt, n, ids, l, W_T, q, infl, out);
    w_check_out(r, l, n, rows, q, infl, W_T, out, st == OKV_OK, false);
    w_note(r, st, recovery);
  }
  test_free(q);
  test_free(out);
  test_free(infl);
}

/* Every committed token of every live sequence, exactly, in the HOST tier (f32). */
static void w_check_host(run_t *r) {
  for (uint32_t w = 0; w < W_SEQS; w++) {
    if (!r->live[w]) continue;
    uint32_t n_len = 0;
    OKV_ASSERT_OK(okv_runtime_seq_length(r->rt, r->id[w], &n_len));
    assert_int_equal(n_len, r->hist[w].n_tokens[r->cfg.n_layers - 1]);
    rt_check_host_tokens(r->rt, r->id[w], &r->hist[w]);
  }
}

/* Every block summary of every live sequence describes exactly the keys in the
 * HOST tier (min/max over its committed tokens): no failed write left one behind. */
static void w_check_summaries(run_t *r) {
  const okv_runtime_t *rt = r->rt;
  uint32_t hd = r->cfg.head_dim;
  float *sum = test_malloc(2 * hd * sizeof(float));
  for (uint32_t w = 0; w < W_SEQS; w++) {
    if (!r->live[w]) continue;
    for (uint32_t l = 0; l < r->cfg.n_layers; l++)
      for (uint32_t h = 0; h < r->cfg.n_kv_heads; h++) {
        uint32_t n_tok = r->hist[w].n_tokens[l];
        for (uint32_t b = 0; b * 16 < n_tok; b++) {
          uint32_t hb = okv_runtime_debug_host_block(rt, r->id[w], l, h, b);
          OKV_ASSERT_OK(
              okv_hal_buffer_read(rt->summaries, (uint64_t)hb * 2 * hd * sizeof(float), sum, 2 * hd * sizeof(float)));
          for (uint32_t e = 0; e < hd; e++) {
            float lo = INFINITY, hi = -INFINITY;
            for (uint32_t t = b * 16; t < n_tok && t < b * 16 + 16; t++) {
              float x = r->hist[w].k[rt_hist_off(&r->hist[w], l, t) + h * hd + e];
              lo = x < lo ? x : lo;
              hi = x > hi ? x : hi;
            }
            if (sum[e] != lo || sum[hd + e] != hi) {
              print_error("seq %u layer %u head %u block %u dim %u: summary [%g, %g], keys [%g, %g]\n", w, l, h, b, e,
                          sum[e], sum[hd + e], lo, hi);
              fail();
            }
          }
        }
      }
  }
  test_free(sum);
}

/* One whole workload. Faults armed by the caller through g_sw (phase 1 only). */
static void w_run(run_t *r, okv_mode_t mode) {
  memset(r, 0, sizeof *r);
  w_config(&r->cfg, mode);
  okv_allocator_t a = okv_test_allocator();
  okv_hal_device_params_t p;
  okv_hal_device_params_init(&p);
  p.n_threads = 1;
  OKV_ASSERT_OK(okv_hal_device_create(g_backend, &p, &a, &r->dev));
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(r->dev, &g_hooks));
  r->last_out = test_calloc((size_t)W_SEQS * r->cfg.n_layers * w_q_row(&r->cfg), sizeof(float));
  okv_status_t st = okv_runtime_create(r->dev, &r->cfg, &a, &r->rt);
  if (st == OKV_OK) {
    w_add(r, 0, false);
    w_add(r, 1, false);
    for (uint32_t s = 0; s < W_STEPS; s++) {
      if (s == 3) w_add(r, 2, false);
      w_step(r, s, false);
      if (mode == OKV_MODE_OASIS && s == 6) w_peek(r, s, false);
    }
    /* Recovery: no fault from here on. The last step's jobs may outlive its step_end: phase 1 ends with them. */
    okv_runtime_debug_drain(r->rt);
    __atomic_store_n(&g_sw.active, 0, __ATOMIC_RELEASE);
    for (int c = 0; c < N_CLS; c++) g_sw.phase1_ops[c] = __atomic_load_n(&g_sw.n_ops[c], __ATOMIC_ACQUIRE);
    for (uint32_t s = W_STEPS; s < W_STEPS + W_RECOVERY; s++) w_step(r, s, true);
    if (mode == OKV_MODE_OASIS) w_peek(r, W_STEPS + W_RECOVERY, true);
    w_check_host(r);
    w_check_summaries(r);
    for (uint32_t l = 0; l < r->cfg.n_layers; l++) /* the maps stay consistent */
      for (uint32_t w = 0; w < W_SEQS; w++)
        if (r->live[w])
          for (uint32_t h = 0; h < r->cfg.n_kv_heads; h++)
            OKV_ASSERT_OK(okv_block_map_check(okv_runtime_debug_map(r->rt, r->id[w], l, h)));
    OKV_ASSERT_OK(okv_runtime_debug_check_tables(r->rt)); /* device selection: the tables equal the maps again */
    okv_step_stats_t cum;
    OKV_ASSERT_OK(okv_runtime_stats(r->rt, UINT32_MAX, &cum));
    r->absorbed = cum.pipeline_errors + cum.failed_blocks + cum.retried_writes;
    okv_runtime_destroy(r->rt);
  } else {
    w_note(r, st, false);
    assert_null(r->rt);
  }
  __atomic_store_n(&g_sw.active, 0, __ATOMIC_RELEASE);
  for (int t = 0; t < OKV_TIER_COUNT; t++) { /* nothing left allocated on the device */
    uint64_t cap, used;
    OKV_ASSERT_OK(okv_hal_device_tier_usage(r->dev, (okv_tier_t)t, &cap, &used));
    assert_int_equal(used, 0);
  }
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(r->dev, NULL));
  OKV_ASSERT_OK(okv_hal_device_release(r->dev));
}

static void w_free(run_t *r) {
  for (uint32_t w = 0; w < W_SEQS; w++)
    if (r->hist_init[w]) rt_hist_free(&r->hist[w]);
  test_free(r->last_out);
}

/* Same working set and same history as the fault-free run: same output. */
static uint32_t w_compare(const run_t *ref, const run_t *r, bool *any_diverged) {
  uint32_t n_same = 0;
  size_t row = w_q_row(&r->cfg);
  for (uint32_t w = 0; w < W_SEQS; w++)
    for (uint32_t l = 0; l < r->cfg.n_layers; l++) {
      if (!ref->last_valid[w][l] || !r->last_valid[w][l]) continue;
      if (ref->hist[w].n_tokens[l] != r->hist[w].n_tokens[l]) continue;
      const float *a = ref->last_out + ((size_t)w * r->cfg.n_layers + l) * row;
      const float *b = r->last_out + ((size_t)w * r->cfg.n_layers + l) * row;
      if (rt_max_abs_diff(a, b, row) < 3e-5)
        n_same++;
      else
        *any_diverged = true;
    }
  return n_same;
}

static void sweep_mode(okv_mode_t mode) {
  memset(&g_sw, 0, sizeof g_sw);
  g_sw.main_thread = pthread_self();
  g_sw.target_class = -1;
  /* Counting run (fault-free reference). Phase-1 operations are those before recovery. */
  run_t *ref = test_calloc(1, sizeof *ref);
  __atomic_store_n(&g_sw.active, 1, __ATOMIC_RELEASE);
  w_run(ref, mode);
  assert_int_equal(ref->n_failed_calls, 0);
  assert_true(ref->n_checked_outs > 0);
  /* N sweeps the operations before the recovery phase (where faults are armed). */
  uint64_t total_ops[N_CLS] = {g_sw.phase1_ops[CLS_FG], g_sw.phase1_ops[CLS_BG]};
  uint64_t kinds[OKV_HAL_OP_COUNT];
  memcpy(kinds, g_sw.n_kind, sizeof kinds);
  uint64_t runs = 0, surfaced = 0, converged = 0, outs = 0, failed_calls = 0;
  for (int cls = 0; cls < N_CLS; cls++)
    for (int persistent = 0; persistent < 2; persistent++)
      for (uint64_t nth = 1; nth <= total_ops[cls]; nth += g_stride) {
        memset(g_sw.n_ops, 0, sizeof g_sw.n_ops);
        g_sw.target_class = cls;
        g_sw.target_n = nth;
        g_sw.persistent = persistent;
        g_sw.n_injected = 0;
        __atomic_store_n(&g_sw.active, 1, __ATOMIC_RELEASE);
        run_t *r = test_calloc(1, sizeof *r);
        w_run(r, mode);
        runs++;
        outs += r->n_checked_outs;
        failed_calls += r->n_failed_calls;
        if (r->recovery_failed) {
          print_error("mode %s, %s fault at %s op %llu: a call failed after faults stopped\n", okv_mode_name(mode),
                      persistent ? "persistent" : "transient", cls ? "background" : "foreground",
                      (unsigned long long)nth);
          fail();
        }
        if (g_sw.n_injected > 0) {
          /* Surfaced: a failed call, or absorbed and counted in the stats. */
          if (r->n_failed_calls == 0 && r->absorbed == 0) {
            print_error("mode %s, %s fault at %s op %llu: injected but neither returned nor counted\n",
                        okv_mode_name(mode), persistent ? "persistent" : "transient", cls ? "background" : "foreground",
                        (unsigned long long)nth);
            fail();
          }
          surfaced++;
        }
        bool diverged = false;
        uint32_t same = w_compare(ref, r, &diverged);
        converged += same > 0 && !diverged;
        if (mode == OKV_MODE_DENSE && diverged) {
          print_error("dense: a fault at %s op %llu changed a later output\n", cls ? "background" : "foreground",
                      (unsigned long long)nth);
          fail();
        }
        w_free(r);
        test_free(r);
      }
  print_message(
      "[ SWEEP    ] mode %-8s ops: %llu foreground + %llu background (alloc %llu, write %llu, read %llu, "
      "stream %llu, sync %llu, event %llu, record %llu, wait %llu, copy %llu, kernel %llu); "
      "%llu runs (stride %u), %llu with a fault injected and surfaced, %llu outputs checked, %llu failed "
      "calls, %llu runs matched the fault-free run at the end\n",
      g_auto     ? "oasis/auto"
      : g_device ? "oasis/dev"
                 : okv_mode_name(mode),
      (unsigned long long)total_ops[0], (unsigned long long)total_ops[1],
      (unsigned long long)kinds[OKV_HAL_OP_BUFFER_ALLOC], (unsigned long long)kinds[OKV_HAL_OP_BUFFER_WRITE],
      (unsigned long long)kinds[OKV_HAL_OP_BUFFER_READ], (unsigned long long)kinds[OKV_HAL_OP_STREAM_CREATE],
      (unsigned long long)kinds[OKV_HAL_OP_STREAM_SYNC], (unsigned long long)kinds[OKV_HAL_OP_EVENT_CREATE],
      (unsigned long long)kinds[OKV_HAL_OP_EVENT_RECORD], (unsigned long long)kinds[OKV_HAL_OP_EVENT_WAIT],
      (unsigned long long)kinds[OKV_HAL_OP_COPY], (unsigned long long)kinds[OKV_HAL_OP_KERNEL],
      (unsigned long long)runs, g_stride, (unsigned long long)surfaced, (unsigned long long)outs,
      (unsigned long long)failed_calls, (unsigned long long)converged);
  w_free(ref);
  test_free(ref);
}

static void test_sweep(void **state) {
  g_auto = false;
  sweep_mode(*(const okv_mode_t *)*state);
}

/* OASIS with the self-tuning cap: seq_add takes spare slots back and spreads them again, also on its failure
 * paths, and a head's cap follows its spares. */
static void test_sweep_auto(void **state) {
  g_auto = true;
  sweep_mode(*(const okv_mode_t *)*state);
  g_auto = false;
}

/* OASIS with device selection: the selection and commit kernels, the plan's read-back, the tables written at
 * admission and after new active blocks, and their rewrite after a failure, each failed in turn. */
static void test_sweep_device(void **state) {
  g_device = true;
  sweep_mode(*(const okv_mode_t *)*state);
  g_device = false;
}

static const okv_mode_t k_modes[] = {OKV_MODE_DENSE, OKV_MODE_OASIS, OKV_MODE_PROXY, OKV_MODE_ONDEMAND};

int main(int argc, char **argv) {
  g_backend = okv_test_backend_or_skip(argc, argv);
  const char *env = getenv("OKV_SWEEP_STRIDE");
  if (env && atoi(env) > 0) g_stride = (uint32_t)atoi(env);
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--full") == 0) g_stride = 1;
    if (strcmp(argv[i], "--stride") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0) g_stride = (uint32_t)atoi(argv[++i]);
  }
  const struct CMUnitTest tests[] = {
      {"sweep_dense", test_sweep, NULL, NULL, (void *)&k_modes[0]},
      {"sweep_oasis", test_sweep, NULL, NULL, (void *)&k_modes[1]},
      {"sweep_proxy", test_sweep, NULL, NULL, (void *)&k_modes[2]},
      {"sweep_ondemand", test_sweep, NULL, NULL, (void *)&k_modes[3]},
      {"sweep_oasis_auto", test_sweep_auto, NULL, NULL, (void *)&k_modes[1]},
      {"sweep_oasis_device", test_sweep_device, NULL, NULL, (void *)&k_modes[1]},
  };
  return cmocka_run_group_tests_name("core_fault_sweep", tests, NULL, NULL);
}
