/* Remote sequences (okv_runtime_seq_add_remote, docs/api.md "Remote
 * sequences") on a backend (argv[1], default "cpu"), with a fake in-memory KV
 * source holding the full prefill KV:
 *  - a remote sequence whose source is complete gives bit-identical outputs
 *    and stats to the same sequence added locally (same initial working set,
 *    so the same selection), in every mode and in f32 and bf16; outputs equal
 *    the double-precision reference over the working set;
 *  - each prefill block is read at most once, only admitted blocks are read,
 *    blocks read per step <= C x KV heads x layers (K x ... in ONDEMAND), calls
 *    list blocks ascending, stats remote_* are exact;
 *  - a source failing at its N-th call, for every N of a workload: every step
 *    returns OK with valid outputs for every sequence, the next step_begin
 *    listing the sequence is UNAVAILABLE naming it and the source, the other
 *    sequences continue bit-exact, removal and re-admission work;
 *  - bad admission fields are refused naming the field, leaving nothing
 *    allocated; okv_runtime_seq_read_kv reads the HOST tier exactly.
 * The source is called on the runtime's background thread (TSan in CI). */
#include <pthread.h>
#include <stdio.h>

#include "tests/core/rt_ref.h"

#include "core/runtime_internal.h"
#include "oasiskv/fault.h"

static const char *g_backend = "cpu";

#define MAXS 4

/* ---- fake KV source ---- */

typedef struct fake_src_t {
  uint8_t *blocks; /* [n_blocks][bb]: ((layer * H + head) * nb + block) */
  uint64_t n_blocks, bb;
  uint32_t *reads; /* reads per block */
  uint32_t calls;
  uint32_t fail_at; /* 1-based call that fails (0: none) */
  bool persistent;  /* every call after fail_at fails too */
  bool order_ok;    /* every call listed distinct blocks, ascending, in range */
  uint64_t blocks_read;
} fake_src_t;

/* A gate on every source's reads (test_step_end_does_not_wait): while armed, a read waits for its release. */
static pthread_mutex_t g_gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_gate_cv = PTHREAD_COND_INITIALIZER;
static bool g_gate_armed, g_gate_waiting;

static void gate_wait(void) {
  pthread_mutex_lock(&g_gate_mu);
  if (g_gate_armed) {
    g_gate_waiting = true;
    pthread_cond_broadcast(&g_gate_cv);
    while (g_gate_armed) pthread_cond_wait(&g_gate_cv, &g_gate_mu);
  }
  pthread_mutex_unlock(&g_gate_mu);
}

static okv_status_t fake_read(void *user, uint32_t n, const uint64_t *index, void *const *dst) {
  fake_src_t *f = user;
  gate_wait();
  f->calls++;
  if (f->fail_at != 0 && (f->calls == f->fail_at || (f->persistent && f->calls > f->fail_at)))
    return okv_status_make(OKV_STATUS_UNAVAILABLE, "kv server 127.0.0.1:9 closed the connection");
  for (uint32_t i = 0; i < n; i++) {
    if (index[i] >= f->n_blocks || (i > 0 && index[i] <= index[i - 1])) {
      f->order_ok = false;
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "fake source: bad block index %llu",
                             (unsigned long long)index[i]);
    }
    memcpy(dst[i], f->blocks + index[i] * f->bb, f->bb);
    f->reads[index[i]]++;
  }
  f->blocks_read += n;
  return OKV_OK;
}

/* ---- admission built from a recorded prefill (what a KV server sends) ---- */

typedef struct adm_t {
  okv_remote_prefill_t p;
  float *summaries;
  uint32_t *offsets, *blocks;
  uint8_t *kv;
  fake_src_t src;
} adm_t;

static void put_elem(uint8_t *base, okv_dtype_t dt, size_t idx, float x) {
  if (dt == OKV_DTYPE_F32) {
    memcpy(base + idx * 4, &x, 4);
  } else {
    uint16_t u = dt == OKV_DTYPE_BF16 ? okv_f32_to_bf16(x) : okv_f32_to_f16(x);
    memcpy(base + idx * 2, &u, 2);
  }
}

/* Admission of the first n tokens recorded in h: every block in slot layout (the source), the summaries and
 * an initial working set of the last `n_init` blocks per head (all of them when n_init >= nb). */
static void adm_build(adm_t *a, const okv_runtime_config_t *c, const rt_hist_t *h, uint32_t n, uint32_t n_init) {
  memset(a, 0, sizeof *a);
  uint32_t L = c->n_layers, H = c->n_kv_heads, hd = c->head_dim, nb = (n + 15) / 16, LH = L * H;
  uint64_t bb = okv_block_bytes(c->kv_dtype, hd);
  if (n_init > nb) n_init = nb;
  a->src.bb = bb;
  a->src.n_blocks = (uint64_t)LH * nb;
  a->src.blocks = test_calloc(a->src.n_blocks, bb);
  a->src.reads = test_calloc(a->src.n_blocks, sizeof(uint32_t));
  a->src.order_ok = true;
  a->summaries = test_calloc((size_t)LH * nb * 2 * hd, sizeof(float));
  a->offsets = test_calloc(LH + 1, sizeof(uint32_t));
  a->blocks = test_calloc((size_t)LH * n_init, sizeof(uint32_t));
  a->kv = test_calloc((size_t)LH * n_init, bb);
  for (uint32_t l = 0; l < L; l++)
    for (uint32_t kvh = 0; kvh < H; kvh++) {
      uint32_t u = l * H + kvh;
      for (uint32_t b = 0; b < nb; b++) {
        uint8_t *blk = a->src.blocks + ((uint64_t)u * nb + b) * bb;
        float *mn = a->summaries + ((size_t)u * nb + b) * 2 * hd, *mx = mn + hd;
        for (uint32_t t = b * 16; t < n && t < b * 16 + 16; t++) {
          const float *k = h->k + rt_hist_off(h, l, t) + (size_t)kvh * hd;
          const float *v = h->v + rt_hist_off(h, l, t) + (size_t)kvh * hd;
          for (uint32_t d = 0; d < hd; d++) {
            put_elem(blk, c->kv_dtype, (size_t)d * 16 + t % 16, k[d]);
            put_elem(blk, c->kv_dtype, (size_t)16 * hd + (size_t)(t % 16) * hd + d, v[d]);
            if (t == b * 16 || k[d] < mn[d]) mn[d] = k[d];
            if (t == b * 16 || k[d] > mx[d]) mx[d] = k[d];
          }
        }
      }
      a->offsets[u + 1] = a->offsets[u] + n_init;
      for (uint32_t j = 0; j < n_init; j++) {
        uint32_t b = nb - n_init + j;
        a->blocks[a->offsets[u] + j] = b;
        memcpy(a->kv + (size_t)(a->offsets[u] + j) * bb, a->src.blocks + ((uint64_t)u * nb + b) * bb, bb);
      }
    }
  a->p.n_tokens = n;
  a->p.summaries = a->summaries;
  a->p.initial_offsets = a->offsets;
  a->p.initial_blocks = a->blocks;
  a->p.initial_kv = a->kv;
  a->p.source.user = &a->src;
  a->p.source.read_blocks = fake_read;
  a->p.source.name = "fake kv server";
}

static void adm_free(adm_t *a) {
  test_free(a->src.blocks);
  test_free(a->src.reads);
  test_free(a->summaries);
  test_free(a->offsets);
  test_free(a->blocks);
  test_free(a->kv);
}

/* ---- harness: sequences with their own input streams (independent of batch composition) ---- */

typedef struct seqh_t {
  bool live;
  uint32_t id;
  rt_hist_t hist;
  okv_test_rng_t rng;
  adm_t *adm;          /* remote: its admission and source (owned) */
  float *q, *dr, *out; /* last step, [L][T][nq][hd], [L][T-1][2][H][hd], [L][T][nq][hd] */
} seqh_t;

typedef struct harn_t {
  okv_runtime_config_t cfg;
  okv_allocator_t alloc;
  okv_hal_device_t *dev;
  okv_runtime_t *rt;
  seqh_t s[MAXS];
  uint32_t T, max_tokens;
  float *q, *dr, *k, *v, *out; /* batch scratch of one layer */
  /* After each step: what that step's jobs selected and read, and its commits (rt_stats_since: waits for the
   * background thread), or with untracked the step's own stats (the jobs it collected; no wait). */
  okv_step_stats_t stats, cum_prev;
  bool untracked;
} harn_t;

static size_t q_elems(const harn_t *x) { return (size_t)x->T * x->cfg.n_q_heads * x->cfg.head_dim; }
static size_t dr_elems(const harn_t *x) { return (size_t)(x->T - 1) * 2 * x->cfg.n_kv_heads * x->cfg.head_dim; }
static size_t kv_elems(const harn_t *x) { return (size_t)x->cfg.n_kv_heads * x->cfg.head_dim; }

static void harn_open(harn_t *x, const okv_runtime_config_t *c, uint32_t T) {
  memset(x, 0, sizeof *x);
  x->cfg = *c;
  x->T = T;
  x->max_tokens = c->max_context_tokens;
  x->alloc = okv_test_allocator();
  okv_hal_device_params_t p;
  okv_hal_device_params_init(&p);
  p.capacity_bytes[OKV_TIER_DEVICE] = 64u << 20;
  p.capacity_bytes[OKV_TIER_HOST] = 256u << 20;
  p.n_threads = 1; /* TSan cannot see OpenMP's own synchronisation */
  OKV_ASSERT_OK(okv_hal_device_create(g_backend, &p, &x->alloc, &x->dev));
  OKV_ASSERT_OK(okv_runtime_create(x->dev, c, &x->alloc, &x->rt));
  x->q = test_calloc(MAXS * q_elems(x), sizeof(float));
  x->dr = test_calloc(MAXS * dr_elems(x) + 1, sizeof(float));
  x->k = test_calloc(MAXS * kv_elems(x), sizeof(float));
  x->v = test_calloc(MAXS * kv_elems(x), sizeof(float));
  x->out = test_calloc(MAXS * q_elems(x), sizeof(float));
}

static void seq_drop(harn_t *x, uint32_t i) {
  seqh_t *s = &x->s[i];
  rt_hist_free(&s->hist);
  test_free(s->q);
  test_free(s->dr);
  test_free(s->out);
  if (s->adm) {
    adm_free(s->adm);
    test_free(s->adm);
  }
  memset(s, 0, sizeof *s);
}

static void harn_close(harn_t *x) {
  okv_runtime_destroy(x->rt);
  OKV_ASSERT_OK(okv_hal_device_release(x->dev));
  for (uint32_t i = 0; i < MAXS; i++)
    if (x->s[i].hist.k) seq_drop(x, i);
  test_free(x->q);
  test_free(x->dr);
  test_free(x->k);
  test_free(x->v);
  test_free(x->out);
}

/* Records an n-token prefill for slot i from its own stream (seed). */
static void seq_prefill(harn_t *x, uint32_t i, uint64_t seed, uint32_t n, okv_prefill_t *pf, float **pk, float **pv) {
  seqh_t *s = &x->s[i];
  assert_false(s->live);
  if (s->hist.k) seq_drop(x, i);
  okv_test_rng_seed(&s->rng, seed);
  rt_hist_init(&s->hist, &x->cfg, x->max_tokens);
  size_t L = x->cfg.n_layers;
  s->q = test_calloc(L * q_elems(x), sizeof(float));
  s->dr = test_calloc(L * dr_elems(x) + 1, sizeof(float));
  s->out = test_calloc(L * q_elems(x), sizeof(float));
  rt_make_prefill(&s->hist, &s->rng, n, pf, pk, pv);
}

static void seq_add_local(harn_t *x, uint32_t i, uint64_t seed, uint32_t n) {
  okv_prefill_t pf;
  float *pk, *pv;
  seq_prefill(x, i, seed, n, &pf, &pk, &pv);
  OKV_ASSERT_OK(okv_runtime_seq_add(x->rt, &pf, &x->s[i].id));
  x->s[i].live = true;
  test_free(pk);
  test_free(pv);
}

/* The same prefill as seq_add_local(seed, n), admitted remotely with the last n_init blocks per head. */
static void seq_add_remote(harn_t *x, uint32_t i, uint64_t seed, uint32_t n, uint32_t n_init) {
  okv_prefill_t pf;
  float *pk, *pv;
  seq_prefill(x, i, seed, n, &pf, &pk, &pv);
  test_free(pk);
  test_free(pv);
  seqh_t *s = &x->s[i];
  s->adm = test_calloc(1, sizeof *s->adm);
  adm_build(s->adm, &x->cfg, &s->hist, n, n_init);
  OKV_ASSERT_OK(okv_runtime_seq_add_remote(x->rt, &s->adm->p, &s->id));
  s->live = true;
}

/* The initial working set okv_runtime_seq_add uses: the last K + 1 blocks when sparse, else all. */
static uint32_t local_init(const okv_runtime_config_t *c, uint32_t n) {
  uint32_t nb = (n + 15) / 16;
  bool sparse = c->mode != OKV_MODE_DENSE && nb > c->budget_blocks; /* dense threshold = K */
  return sparse ? c->budget_blocks + 1 : nb;
}

/* One step over slots which[0..n): inputs drawn from each sequence's own stream. Returns step_begin's
 * code; when OK every layer must return OK (remote failures are absorbed) and the step is recorded. */
static okv_status_code_t harn_step(harn_t *x, uint32_t n, const uint32_t *which, char *msg, size_t msg_cap) {
  uint32_t ids[MAXS];
  for (uint32_t j = 0; j < n; j++) ids[j] = x->s[which[j]].id;
  okv_status_t st = okv_runtime_step_begin(x->rt, n, ids, x->T);
  okv_status_code_t code = okv_status_code(st);
  if (msg) snprintf(msg, msg_cap, "%s", okv_status_message(st));
  okv_status_free(st);
  if (code != OKV_STATUS_OK) return code;
  size_t qn = q_elems(x), dn = dr_elems(x), kn = kv_elems(x);
  for (uint32_t l = 0; l < x->cfg.n_layers; l++) {
    for (uint32_t j = 0; j < n; j++) {
      seqh_t *s = &x->s[which[j]];
      float *q = s->q + l * qn, *dr = s->dr + l * dn;
      for (size_t e = 0; e < qn; e++) q[e] = 2.0f * okv_test_rng_normal(&s->rng);
      for (size_t e = 0; e < dn; e++) dr[e] = okv_test_rng_normal(&s->rng);
      memcpy(x->q + j * qn, q, qn * sizeof(float));
      memcpy(x->dr + j * dn, dr, dn * sizeof(float));
      for (size_t e = 0; e < kn; e++) {
        x->k[j * kn + e] = okv_test_rng_normal(&s->rng);
        x->v[j * kn + e] = okv_test_rng_normal(&s->rng);
      }
    }
    OKV_ASSERT_OK(okv_runtime_step_layer(x->rt, l, x->k, x->v, x->q, x->T > 1 ? x->dr : NULL, x->out));
    for (uint32_t j = 0; j < n; j++) {
      seqh_t *s = &x->s[which[j]];
      memcpy(s->out + l * qn, x->out + j * qn, qn * sizeof(float));
      rt_hist_append(&s->hist, l, x->k + j * kn, x->v + j * kn);
    }
  }
  OKV_ASSERT_OK(okv_runtime_step_end(x->rt, &x->stats));
  if (!x->untracked) rt_stats_since(x->rt, UINT32_MAX, &x->cum_prev, &x->stats);
  return OKV_STATUS_OK;
}

/* Max error of slot i's last outputs against the reference over its readable working set. */
static double harn_check(harn_t *x, uint32_t i) {
  seqh_t *s = &x->s[i];
  uint32_t H = x->cfg.n_kv_heads, G = x->cfg.n_q_heads / H, hd = x->cfg.head_dim, T = x->T;
  uint32_t blocks[256], nb;
  float ref[256];
  double worst = 0;
  for (uint32_t l = 0; l < x->cfg.n_layers; l++)
    for (uint32_t kvh = 0; kvh < H; kvh++) {
      OKV_ASSERT_OK(okv_runtime_seq_resident(x->rt, s->id, l, kvh, blocks, 256, &nb));
      for (uint32_t t = 0; t < T; t++)
        for (uint32_t g = 0; g < G; g++) {
          size_t row = ((size_t)t * x->cfg.n_q_heads + kvh * G + g) * hd;
          rt_ref_attend(&s->hist, l, kvh, s->q + l * q_elems(x) + row, t, T, blocks, nb, s->dr + l * dr_elems(x), T - 1,
                        ref);
          double e = rt_max_abs_diff(ref, s->out + l * q_elems(x) + row, hd);
          if (e > worst) worst = e;
        }
    }
  return worst;
}

/* Every resident block of a remote slot is present in the HOST tier (nothing unread is ever attended). */
static void check_resident_present(harn_t *x, uint32_t i) {
  okv_runtime_debug_drain(x->rt); /* the maps and present bits of the step's last jobs */
  const okv_seq_t *s = okv_rt_seq_find(x->rt, x->s[i].id);
  assert_non_null(s);
  for (uint32_t u = 0; u < x->cfg.n_layers * x->cfg.n_kv_heads; u++) {
    const okv_head_t *h = &s->heads[u];
    for (uint32_t r = 0; r < h->map.n_resident; r++) {
      uint32_t b = h->map.resident[r];
      if (s->remote && b < s->n_remote_blocks) assert_true(okv_block_map_bit(h->present, b));
    }
  }
}

static void base_config(okv_runtime_config_t *c, okv_mode_t mode, okv_dtype_t dt) {
  rt_config(c, 2, 4, 2, 16);
  c->max_seqs = MAXS;
  c->max_context_tokens = 1024;
  c->budget_blocks = 4;
  c->fetch_ratio = 0.5; /* C = 2 */
  c->mode = mode;
  c->kv_dtype = dt;
}

static uint32_t mode_T(okv_mode_t m) { return m == OKV_MODE_OASIS ? 2 : 1; }

/* ---- tests ---- */

/* A complete source: bit-identical to local admission (same initial set => same selection), every mode; KV
 * in f32 and bf16; two-level scoring over bf16 summaries (the remote head's group summaries rebuilt from the
 * admitted block summaries). */
static void test_remote_equals_local(void **state) {
  (void)state;
  for (int dt = 0; dt < 3; dt++)
    for (int mode = 0; mode < OKV_MODE_COUNT; mode++) {
      okv_runtime_config_t c;
      base_config(&c, (okv_mode_t)mode, dt == 1 ? OKV_DTYPE_BF16 : OKV_DTYPE_F32);
      if (dt == 2) {
        c.summary_dtype = OKV_DTYPE_BF16;
        c.scoring = OKV_SCORING_TWO_LEVEL;
        c.scoring_groups = 1; /* of 2 groups of 16 blocks */
      }
      if (mode == OKV_MODE_DENSE) c.budget_blocks = 64; /* dense: every block resident */
      harn_t a, b;
      harn_open(&a, &c, mode_T((okv_mode_t)mode));
      harn_open(&b, &c, mode_T((okv_mode_t)mode));
      /* Slot 0: 300 tokens (19 blocks, sparse), slot 1: local in both, slot 2: 40 tokens (kept whole). */
      seq_add_local(&a, 0, 11, 300);
      seq_add_remote(&b, 0, 11, 300, local_init(&c, 300));
      seq_add_local(&a, 1, 12, 90);
      seq_add_local(&b, 1, 12, 90);
      seq_add_local(&a, 2, 13, 40);
      seq_add_remote(&b, 2, 13, 40, local_init(&c, 40));
      const uint32_t which[3] = {0, 1, 2};
      uint64_t remote_blocks = 0;
      double tol = dt == 1 ? 2e-3 : 5e-5, worst = 0;
      for (uint32_t step = 0; step < 40; step++) {
        assert_int_equal(harn_step(&a, 3, which, NULL, 0), OKV_STATUS_OK);
        assert_int_equal(harn_step(&b, 3, which, NULL, 0), OKV_STATUS_OK);
        for (uint32_t i = 0; i < 3; i++) {
          assert_memory_equal(a.s[i].out, b.s[i].out, c.n_layers * q_elems(&a) * sizeof(float));
          double e = harn_check(&b, i);
          if (e > worst) worst = e;
        }
        check_resident_present(&b, 0);
        assert_int_equal(a.stats.hits, b.stats.hits);
        assert_int_equal(a.stats.misses, b.stats.misses);
        assert_int_equal(a.stats.admitted, b.stats.admitted);
        assert_int_equal(a.stats.blocks_moved, b.stats.blocks_moved);
        assert_int_equal(a.stats.remote_blocks, 0);
        assert_int_equal(b.stats.failed_blocks, 0);
        assert_int_equal(b.stats.pipeline_errors, 0);
        assert_true(b.stats.remote_blocks <= b.stats.admitted); /* only admitted blocks are read */
        assert_int_equal(b.stats.remote_bytes, b.stats.remote_blocks * okv_block_bytes(c.kv_dtype, c.head_dim));
        assert_int_equal(b.stats.bytes_moved[OKV_TIER_REMOTE][OKV_TIER_HOST], b.stats.remote_bytes);
        remote_blocks += b.stats.remote_blocks;
      }
      if (worst > tol) print_error("mode %s dtype %d: max error %g\n", okv_mode_name((okv_mode_t)mode), dt, worst);
      assert_true(worst <= tol);
      /* Reads happened exactly where the sequence was sparse, each block at most once. */
      const fake_src_t *src = &b.s[0].adm->src;
      assert_true(src->order_ok);
      if (mode == OKV_MODE_DENSE) {
        assert_int_equal(remote_blocks, 0);
      } else {
        assert_true(remote_blocks > 0);
      }
      assert_int_equal(src->blocks_read + b.s[2].adm->src.blocks_read, remote_blocks);
      assert_int_equal(b.s[2].adm->src.calls, 0); /* kept whole: everything admitted */
      for (uint64_t j = 0; j < src->n_blocks; j++) assert_true(src->reads[j] <= 1);
      okv_step_stats_t cum;
      OKV_ASSERT_OK(okv_runtime_stats(b.rt, UINT32_MAX, &cum));
      assert_int_equal(cum.remote_blocks, remote_blocks);
      assert_true(cum.remote_seconds >= 0 && cum.remote_stall_seconds >= 0);
      if (remote_blocks > 0) assert_true(cum.remote_seconds > 0);
      harn_close(&a);
      harn_close(&b);
    }
}

/* Narrowed summaries (f16, bf16): the admission's f32 summaries are stored exactly as the runtime's own
 * summaries of the same blocks (min rounded down, max up), bit for bit. */
static void test_remote_narrow_summaries(void **state) {
  (void)state;
  okv_dtype_t dts[2] = {OKV_DTYPE_BF16, OKV_DTYPE_F16};
  for (int i = 0; i < 2; i++) {
    okv_runtime_config_t c;
    base_config(&c, OKV_MODE_OASIS, OKV_DTYPE_F32);
    c.summary_dtype = dts[i];
    harn_t x;
    harn_open(&x, &c, 2);
    okv_prefill_t pf;
    float *pk, *pv;
    seq_prefill(&x, 0, 61, 150, &pf, &pk, &pv);
    okv_status_t st = okv_runtime_seq_add(x.rt, &pf, &x.s[0].id);
    test_free(pk);
    test_free(pv);
    if (okv_status_code(st) == OKV_STATUS_UNAVAILABLE) { /* the backend has no narrowed summary kernel */
      print_message("narrowed summaries (%s) skipped: %s\n", okv_dtype_name(dts[i]), okv_status_message(st));
      okv_status_free(st);
      harn_close(&x);
      continue;
    }
    OKV_ASSERT_OK(st);
    x.s[0].live = true;
    adm_t a;
    adm_build(&a, &c, &x.s[0].hist, 150, 3);
    uint32_t rid;
    OKV_ASSERT_OK(okv_runtime_seq_add_remote(x.rt, &a.p, &rid));
    uint64_t sb = okv_summary_bytes_ex(dts[i], c.head_dim);
    assert_int_equal(sb, 2 * c.head_dim * 2);
    uint8_t *s0 = test_malloc(sb), *s1 = test_malloc(sb);
    bool narrowed = false; /* some value was not representable: the rounding direction was exercised */
    for (uint32_t l = 0; l < c.n_layers; l++)
      for (uint32_t h = 0; h < c.n_kv_heads; h++)
        for (uint32_t b = 0; b < 10; b++) {
          uint32_t h0 = okv_runtime_debug_host_block(x.rt, x.s[0].id, l, h, b);
          uint32_t h1 = okv_runtime_debug_host_block(x.rt, rid, l, h, b);
          OKV_ASSERT_OK(okv_hal_buffer_read(x.rt->summaries, (uint64_t)h0 * sb, s0, sb));
          OKV_ASSERT_OK(okv_hal_buffer_read(x.rt->summaries, (uint64_t)h1 * sb, s1, sb));
          assert_memory_equal(s0, s1, sb);
          const float *mn = a.summaries + (((size_t)l * c.n_kv_heads + h) * 10 + b) * 2 * c.head_dim;
          uint16_t u;
          memcpy(&u, s0, 2);
          float w = dts[i] == OKV_DTYPE_BF16 ? okv_bf16_to_f32(u) : okv_f16_to_f32(u);
          assert_true(w <= mn[0]);
          narrowed |= w < mn[0];
        }
    assert_true(narrowed);
    test_free(s0);
    test_free(s1);
    adm_free(&a);
    harn_close(&x);
  }
}

/* A small initial set (the active block only): the cap bounds reads per step; at most once per block; the
 * HOST tier holds exactly what was read; read_kv refuses blocks not fetched yet. */
static void test_remote_cap_and_once(void **state) {
  (void)state;
  okv_mode_t modes[3] = {OKV_MODE_OASIS, OKV_MODE_PROXY, OKV_MODE_ONDEMAND};
  for (int mi = 0; mi < 3; mi++) {
    okv_runtime_config_t c;
    base_config(&c, modes[mi], OKV_DTYPE_F32);
    harn_t x;
    harn_open(&x, &c, mode_T(modes[mi]));
    seq_add_remote(&x, 0, 21, 300, 1); /* 19 blocks, only the active one admitted */
    seq_add_remote(&x, 1, 22, 170, 3);
    uint32_t nb = 19, hd = c.head_dim, H = c.n_kv_heads;
    float *k = test_calloc(16 * H * hd, sizeof(float)), *v = test_calloc(16 * H * hd, sizeof(float));
    const rt_hist_t *hh = &x.s[0].hist;
    /* Before any read: the admitted active block is readable, block 0 is not. */
    OKV_ASSERT_OK(okv_runtime_seq_read_kv(x.rt, x.s[0].id, 1, 18 * 16, 300 - 18 * 16, k, v));
    assert_memory_equal(k, hh->k + rt_hist_off(hh, 1, 18 * 16), (size_t)(300 - 18 * 16) * H * hd * sizeof(float));
    okv_status_t st0 = okv_runtime_seq_read_kv(x.rt, x.s[0].id, 0, 10, 8, k, v);
    assert_int_equal(okv_status_code(st0), OKV_STATUS_NOT_FOUND);
    assert_non_null(strstr(okv_status_message(st0), "fake kv server"));
    okv_status_free(st0);
    const uint32_t which[2] = {0, 1};
    uint32_t heads = c.n_layers * c.n_kv_heads, C = x.rt->cap_blocks;
    uint32_t per = modes[mi] == OKV_MODE_ONDEMAND ? c.budget_blocks : C;
    uint64_t total = 0;
    for (uint32_t step = 0; step < 30; step++) {
      assert_int_equal(harn_step(&x, 2, which, NULL, 0), OKV_STATUS_OK);
      assert_true(x.stats.remote_blocks <= (uint64_t)per * heads * 2);
      assert_true(x.stats.remote_blocks <= x.stats.admitted);
      total += x.stats.remote_blocks;
      for (uint32_t i = 0; i < 2; i++) {
        assert_true(harn_check(&x, i) < 5e-5);
        check_resident_present(&x, i);
      }
    }
    assert_true(total > 0);
    for (uint32_t i = 0; i < 2; i++) {
      const fake_src_t *src = &x.s[i].adm->src;
      assert_true(src->order_ok);
      for (uint64_t j = 0; j < src->n_blocks; j++) assert_true(src->reads[j] <= 1);
    }
    assert_int_equal(x.s[0].adm->src.blocks_read + x.s[1].adm->src.blocks_read, total);
    /* read_kv: present blocks equal the prefill, a block never read is NOT_FOUND. */
    const fake_src_t *src = &x.s[0].adm->src;
    bool saw_read = false;
    for (uint32_t b = 0; b + 1 < nb; b++) {
      bool all = true;
      for (uint32_t h = 0; h < H; h++) all &= src->reads[(uint64_t)(0 * H + h) * nb + b] == 1;
      okv_status_t st = okv_runtime_seq_read_kv(x.rt, x.s[0].id, 0, b * 16, 16, k, v);
      if (!all) {
        bool any_missing = false;
        for (uint32_t h = 0; h < H; h++) any_missing |= src->reads[(uint64_t)h * nb + b] == 0;
        if (any_missing) assert_int_equal(okv_status_code(st), OKV_STATUS_NOT_FOUND);
        okv_status_free(st);
        continue;
      }
      OKV_ASSERT_OK(st);
      saw_read = true;
      for (uint32_t t = 0; t < 16; t++)
        assert_memory_equal(k + (size_t)t * H * hd, hh->k + rt_hist_off(hh, 0, b * 16 + t), H * hd * sizeof(float));
    }
    assert_true(saw_read);
    test_free(k);
    test_free(v);
    harn_close(&x);
  }
}

/* One run of the failure workload: slot 0 remote with a source failing at call fail_at (0: never; persistent
 * when `persistent`), slot 1 local, slot 2 remote with a good source. Records slots 1 and 2's outputs of
 * every step into rec[step] (compared across runs). Returns slot 0's source calls. */
#define FAIL_STEPS 14
static uint32_t fail_run(okv_mode_t mode, uint32_t fail_at, bool persistent, float *rec) {
  okv_runtime_config_t c;
  base_config(&c, mode, OKV_DTYPE_F32);
  /* PROXY: the foreground's recall pass runs while the worker's reads may mark the sequence lost (TSan). */
  c.track_recall = mode == OKV_MODE_PROXY;
  harn_t x;
  harn_open(&x, &c, mode_T(mode));
  x.untracked = true; /* a step's last jobs run into the next step_begin, which must still see a lost read */
  seq_add_remote(&x, 0, 31, 260, 2);
  seq_add_local(&x, 1, 32, 150);
  seq_add_remote(&x, 2, 33, 200, 1);
  x.s[0].adm->src.fail_at = fail_at;
  x.s[0].adm->src.persistent = persistent;
  size_t row = c.n_layers * q_elems(&x);
  bool lost = false, readded = false, saw_failed = false;
  uint32_t lost_step = 0;
  for (uint32_t step = 0; step < FAIL_STEPS; step++) {
    uint32_t which[3] = {1, 2, 0}, n = lost ? 2 : 3;
    if (readded) n = 3;
    char msg[512];
    okv_status_code_t code = harn_step(&x, n, which, msg, sizeof msg);
    if (code == OKV_STATUS_UNAVAILABLE) {
      /* The step after the failed read: refused, naming the sequence and the source. */
      assert_false(lost);
      char id[32];
      snprintf(id, sizeof id, "= %u", x.s[0].id);
      assert_non_null(strstr(msg, "fake kv server"));
      assert_non_null(strstr(msg, id));
      assert_non_null(strstr(msg, "127.0.0.1:9"));
      lost = true;
      lost_step = step;
      OKV_ASSERT_OK(okv_runtime_seq_remove(x.rt, x.s[0].id));
      x.s[0].live = false;
      n = 2;
      code = harn_step(&x, n, which, NULL, 0);
    }
    assert_int_equal(code, OKV_STATUS_OK);
    for (uint32_t j = 0; j < n; j++) {
      assert_true(harn_check(&x, which[j]) < 5e-5);       /* valid outputs for everyone */
      if (step % 2) check_resident_present(&x, which[j]); /* (waits for the worker) */
    }
    if (x.stats.failed_blocks > 0) {
      assert_true(x.stats.pipeline_errors > 0);
      saw_failed = true;
    }
    for (uint32_t j = 0; j < 2; j++) memcpy(rec + ((size_t)step * 2 + j) * row, x.s[which[j]].out, row * sizeof(float));
    /* Re-admission after the loss: a fresh remote sequence with a good source. */
    if (lost && !readded && step + 2 < FAIL_STEPS) {
      seq_add_remote(&x, 0, 34, 230, 2);
      readded = true;
    }
  }
  /* A failed read's job may land in no step's stats yet (its step was the last, or the next was refused): the
   * cumulative stats count every job. */
  okv_step_stats_t cum;
  OKV_ASSERT_OK(okv_runtime_stats(x.rt, UINT32_MAX, &cum));
  if (cum.failed_blocks > 0) {
    assert_true(cum.pipeline_errors > 0);
    saw_failed = true;
  }
  uint32_t calls = x.s[0].adm->src.calls;
  if (fail_at > 0) { /* the failure was seen, refused at the next step, and the sequence re-admitted */
    assert_true(saw_failed);
    if (!lost) {
      uint32_t w[1] = {0};
      assert_int_equal(harn_step(&x, 1, w, NULL, 0), OKV_STATUS_UNAVAILABLE);
    } else if (lost_step + 3 < FAIL_STEPS) {
      assert_true(readded);
      assert_int_equal(x.s[0].adm->src.fail_at, 0);
      assert_true(calls > 0); /* the re-admitted sequence reads again */
    }
  } else {
    assert_false(saw_failed || lost);
  }
  for (uint32_t i = 0; i < 3; i++)
    if (x.s[i].adm) {
      assert_true(x.s[i].adm->src.order_ok);
      for (uint64_t j = 0; j < x.s[i].adm->src.n_blocks; j++) assert_true(x.s[i].adm->src.reads[j] <= 1);
    }
  harn_close(&x);
  return calls;
}

static void test_remote_failure_sweep(void **state) {
  (void)state;
  okv_mode_t modes[3] = {OKV_MODE_OASIS, OKV_MODE_PROXY, OKV_MODE_ONDEMAND};
  for (int mi = 0; mi < 3; mi++) {
    okv_runtime_config_t c;
    base_config(&c, modes[mi], OKV_DTYPE_F32);
    size_t row = (size_t)c.n_layers * mode_T(modes[mi]) * c.n_q_heads * c.head_dim;
    float *ctl = test_calloc((size_t)FAIL_STEPS * 2 * row, sizeof(float));
    float *got = test_calloc((size_t)FAIL_STEPS * 2 * row, sizeof(float));
    uint32_t n_calls = fail_run(modes[mi], 0, false, ctl);
    assert_true(n_calls >= 3);
    for (uint32_t n = 1; n <= n_calls; n++)
      for (int persistent = 0; persistent < 2; persistent++) {
        fail_run(modes[mi], n, persistent, got);
        /* The other sequences continue bit-exact (their outputs do not depend on the lost one). */
        assert_memory_equal(ctl, got, (size_t)FAIL_STEPS * 2 * row * sizeof(float));
      }
    test_free(ctl);
    test_free(got);
  }
}

/* Bad admissions: INVALID_ARGUMENT naming the field; nothing allocated. */
static void expect_invalid(okv_runtime_t *rt, const okv_remote_prefill_t *p, const char *what) {
  uint64_t free0 = okv_runtime_debug_free_slots(rt);
  uint32_t id = 0;
  okv_status_t st = okv_runtime_seq_add_remote(rt, p, &id);
  if (okv_status_code(st) != OKV_STATUS_INVALID_ARGUMENT || strstr(okv_status_message(st), what) == NULL) {
    print_error("expected INVALID_ARGUMENT naming '%s', got %s\n", what, okv_status_message(st));
    okv_status_free(st);
    fail();
  }
  okv_status_free(st);
  assert_int_equal(okv_runtime_debug_free_slots(rt), free0);
}

static void test_remote_bad_fields(void **state) {
  (void)state;
  okv_runtime_config_t c;
  base_config(&c, OKV_MODE_OASIS, OKV_DTYPE_F32);
  harn_t x;
  harn_open(&x, &c, 2);
  okv_prefill_t pf;
  float *pk, *pv;
  seq_prefill(&x, 0, 41, 100, &pf, &pk, &pv); /* 7 blocks */
  test_free(pk);
  test_free(pv);
  adm_t a;
  adm_build(&a, &c, &x.s[0].hist, 100, 5);
  okv_remote_prefill_t b;
  uint32_t id;
  OKV_ASSERT_CODE(okv_runtime_seq_add_remote(NULL, &a.p, &id), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_runtime_seq_add_remote(x.rt, &a.p, NULL), OKV_STATUS_INVALID_ARGUMENT);
  expect_invalid(x.rt, NULL, "prefill is NULL");
  OKV_EXPECT_MUTATION(b, a.p, b.n_tokens = 0, expect_invalid(x.rt, &b, "n_tokens"));
  OKV_EXPECT_MUTATION(b, a.p, b.n_tokens = 5000, expect_invalid(x.rt, &b, "n_tokens"));
  OKV_EXPECT_MUTATION(b, a.p, b.summaries = NULL, expect_invalid(x.rt, &b, "summaries"));
  OKV_EXPECT_MUTATION(b, a.p, b.initial_offsets = NULL, expect_invalid(x.rt, &b, "initial_offsets"));
  OKV_EXPECT_MUTATION(b, a.p, b.initial_blocks = NULL, expect_invalid(x.rt, &b, "initial_blocks"));
  OKV_EXPECT_MUTATION(b, a.p, b.initial_kv = NULL, expect_invalid(x.rt, &b, "initial_kv"));
  OKV_EXPECT_MUTATION(b, a.p, b.source.read_blocks = NULL, expect_invalid(x.rt, &b, "source.read_blocks"));
  /* Offsets: not starting at 0, decreasing, more than K + 1 blocks. */
  a.offsets[0] = 1;
  expect_invalid(x.rt, &a.p, "initial_offsets[0]");
  a.offsets[0] = 0;
  uint32_t o2 = a.offsets[2];
  a.offsets[2] = a.offsets[1] - 1;
  expect_invalid(x.rt, &a.p, "must not decrease");
  a.offsets[2] = o2;
  /* n_tokens = 100 with a list built for 7 blocks but claiming 6 (too many for K + 1 = 5 once short). */
  uint32_t *blk = a.blocks;
  uint32_t saved = blk[1];
  blk[1] = blk[0]; /* not ascending */
  expect_invalid(x.rt, &a.p, "strictly ascending");
  blk[1] = saved;
  for (uint32_t j = 0; j < 5; j++) blk[j]--; /* 1..5: the active block 6 is not listed */
  expect_invalid(x.rt, &a.p, "active block");
  for (uint32_t j = 0; j < 5; j++) blk[j]++;
  saved = blk[4];
  blk[4] = 9; /* out of range */
  expect_invalid(x.rt, &a.p, "must be < 7");
  blk[4] = saved;
  OKV_EXPECT_MUTATION(b, a.p, b.n_tokens = 80, expect_invalid(x.rt, &b, "must be < 5")); /* 5 blocks */
  /* Summaries: non-finite, min > max. */
  float s0 = a.summaries[3];
  a.summaries[3] = NAN;
  expect_invalid(x.rt, &a.p, "non-finite");
  a.summaries[3] = a.summaries[c.head_dim + 3] + 1.0f;
  expect_invalid(x.rt, &a.p, "min");
  a.summaries[3] = s0;
  adm_free(&a);
  /* More than K + 1 = 5 blocks listed; and a sequence kept whole must list every block. */
  adm_build(&a, &c, &x.s[0].hist, 100, 6);
  expect_invalid(x.rt, &a.p, "budget_blocks + 1");
  adm_free(&a);
  adm_build(&a, &c, &x.s[0].hist, 60, 3); /* 4 blocks <= K: kept whole */
  expect_invalid(x.rt, &a.p, "list all 4");
  adm_free(&a);
  /* The good one is accepted, and works. */
  adm_build(&a, &c, &x.s[0].hist, 100, 5);
  OKV_ASSERT_OK(okv_runtime_seq_add_remote(x.rt, &a.p, &id));
  uint32_t len;
  OKV_ASSERT_OK(okv_runtime_seq_length(x.rt, id, &len));
  assert_int_equal(len, 100);
  OKV_ASSERT_OK(okv_runtime_seq_remove(x.rt, id));
  adm_free(&a);
  harn_close(&x);
}

/* Admission under HAL faults (SQLite-style): the N-th HAL operation of okv_runtime_seq_add_remote fails, for
 * every N; the call returns the error and leaves nothing allocated (slots, HOST tier, the sequence entry),
 * and a later admission without faults works and decodes exactly. */
typedef struct op_fault_t {
  int countdown; /* fail when it reaches 0; < 0: count only */
  int seen;
} op_fault_t;

static bool fail_nth_op(void *user, okv_hal_op_t op, okv_tier_t src, okv_tier_t dst) {
  op_fault_t *f = user;
  (void)op;
  (void)src;
  (void)dst;
  f->seen++;
  return f->countdown >= 0 && f->countdown-- == 0;
}

static void test_remote_add_faults(void **state) {
  (void)state;
  okv_runtime_config_t c;
  base_config(&c, OKV_MODE_OASIS, OKV_DTYPE_F32);
  harn_t x;
  harn_open(&x, &c, 2);
  okv_prefill_t pf;
  float *pk, *pv;
  seq_prefill(&x, 0, 71, 180, &pf, &pk, &pv);
  test_free(pk);
  test_free(pv);
  adm_t a;
  adm_build(&a, &c, &x.s[0].hist, 180, 4);
  op_fault_t f = {-1, 0};
  okv_hal_fault_hooks_t hooks = {&f, NULL, NULL, fail_nth_op};
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(x.dev, &hooks));
  uint32_t id;
  OKV_ASSERT_OK(okv_runtime_seq_add_remote(x.rt, &a.p, &id)); /* count the admission's operations */
  OKV_ASSERT_OK(okv_runtime_seq_remove(x.rt, id));
  int n_ops = f.seen;
  assert_true(n_ops >= 3); /* summaries, the copy, the synchronize at least */
  uint64_t free0 = okv_runtime_debug_free_slots(x.rt), cap = 0, host0 = 0, host1 = 0;
  OKV_ASSERT_OK(okv_hal_device_tier_usage(x.dev, OKV_TIER_HOST, &cap, &host0));
  for (int n = 0; n < n_ops; n++) {
    f.countdown = n;
    f.seen = 0;
    okv_status_t st = okv_runtime_seq_add_remote(x.rt, &a.p, &id);
    okv_status_code_t code = okv_status_code(st);
    okv_status_free(st);
    assert_true(code != OKV_STATUS_OK && code != OKV_STATUS_INVALID_ARGUMENT);
    assert_int_equal(okv_runtime_debug_free_slots(x.rt), free0);
    OKV_ASSERT_OK(okv_hal_device_tier_usage(x.dev, OKV_TIER_HOST, &cap, &host1));
    assert_int_equal(host1, host0);
  }
  OKV_ASSERT_OK(okv_hal_device_set_fault_hooks(x.dev, NULL));
  x.s[0].adm = test_calloc(1, sizeof *x.s[0].adm); /* the harness owns the admission and its source now */
  *x.s[0].adm = a;
  x.s[0].adm->p.source.user = &x.s[0].adm->src; /* the source at its final address */
  OKV_ASSERT_OK(okv_runtime_seq_add_remote(x.rt, &x.s[0].adm->p, &x.s[0].id));
  x.s[0].live = true;
  const uint32_t which[1] = {0};
  for (int s = 0; s < 8; s++) {
    assert_int_equal(harn_step(&x, 1, which, NULL, 0), OKV_STATUS_OK);
    assert_true(harn_check(&x, 0) < 5e-5);
  }
  assert_true(x.s[0].adm->src.blocks_read > 0);
  harn_close(&x);
}

/* read_kv of local sequences equals what was appended (f32, bf16 rounded); range errors. */
static void test_read_kv(void **state) {
  (void)state;
  for (int dt = 0; dt < 2; dt++) {
    okv_runtime_config_t c;
    base_config(&c, OKV_MODE_OASIS, dt ? OKV_DTYPE_BF16 : OKV_DTYPE_F32);
    harn_t x;
    harn_open(&x, &c, 2);
    seq_add_local(&x, 0, 51, 70);
    const uint32_t which[1] = {0};
    for (int s = 0; s < 5; s++) assert_int_equal(harn_step(&x, 1, which, NULL, 0), OKV_STATUS_OK);
    uint32_t H = c.n_kv_heads, hd = c.head_dim, n = 75;
    float *k = test_calloc((size_t)n * H * hd, sizeof(float)), *v = test_calloc((size_t)n * H * hd, sizeof(float));
    const rt_hist_t *h = &x.s[0].hist;
    for (uint32_t l = 0; l < c.n_layers; l++) {
      OKV_ASSERT_OK(okv_runtime_seq_read_kv(x.rt, x.s[0].id, l, 0, n, k, v));
      assert_memory_equal(k, h->k + rt_hist_off(h, l, 0), (size_t)n * H * hd * sizeof(float));
      assert_memory_equal(v, h->v + rt_hist_off(h, l, 0), (size_t)n * H * hd * sizeof(float));
      OKV_ASSERT_OK(okv_runtime_seq_read_kv(x.rt, x.s[0].id, l, 17, 3, k, v));
      assert_memory_equal(k, h->k + rt_hist_off(h, l, 17), (size_t)3 * H * hd * sizeof(float));
    }
    OKV_ASSERT_CODE(okv_runtime_seq_read_kv(x.rt, x.s[0].id, 0, 70, 6, k, v), OKV_STATUS_INVALID_ARGUMENT);
    OKV_ASSERT_CODE(okv_runtime_seq_read_kv(x.rt, x.s[0].id, 0, UINT32_MAX, 2, k, v), OKV_STATUS_INVALID_ARGUMENT);
    OKV_ASSERT_CODE(okv_runtime_seq_read_kv(x.rt, x.s[0].id, 2, 0, 1, k, v), OKV_STATUS_INVALID_ARGUMENT);
    OKV_ASSERT_CODE(okv_runtime_seq_read_kv(x.rt, x.s[0].id, 0, 0, 1, NULL, v), OKV_STATUS_INVALID_ARGUMENT);
    OKV_ASSERT_CODE(okv_runtime_seq_read_kv(x.rt, 999, 0, 0, 1, k, v), OKV_STATUS_NOT_FOUND);
    OKV_ASSERT_CODE(okv_runtime_seq_read_kv(NULL, 0, 0, 0, 1, k, v), OKV_STATUS_INVALID_ARGUMENT);
    OKV_ASSERT_OK(okv_runtime_seq_read_kv(x.rt, x.s[0].id, 0, 75, 0, NULL, NULL));
    test_free(k);
    test_free(v);
    harn_close(&x);
  }
}

/* okv_runtime_step_end does not wait for the background pipeline (docs/api.md "Stats"): with the worker held
 * inside a read through a KV source (layer 0's job of the step), the step's remaining layers run and the
 * step ends (waiting would never return); the held job's counts are in no step yet, okv_runtime_stats waits
 * for it and counts it, and the next step collects it at layer 0's commit: counted once. */
static void test_step_end_does_not_wait(void **state) {
  (void)state;
  okv_runtime_config_t c;
  base_config(&c, OKV_MODE_OASIS, OKV_DTYPE_F32);
  harn_t x;
  harn_open(&x, &c, mode_T(OKV_MODE_OASIS));
  x.untracked = true;
  seq_add_remote(&x, 0, 41, 300, 1); /* 19 blocks, only the active one admitted: the first jobs read */
  const uint32_t which[1] = {0};
  const fake_src_t *src = &x.s[0].adm->src;
  pthread_mutex_lock(&g_gate_mu);
  g_gate_armed = true;
  g_gate_waiting = false;
  pthread_mutex_unlock(&g_gate_mu);
  assert_int_equal(harn_step(&x, 1, which, NULL, 0), OKV_STATUS_OK); /* returned with a job held in its read */
  pthread_mutex_lock(&g_gate_mu);
  while (!g_gate_waiting) pthread_cond_wait(&g_gate_cv, &g_gate_mu); /* layer 0's job reaches its read */
  g_gate_armed = false;
  pthread_cond_broadcast(&g_gate_cv);
  pthread_mutex_unlock(&g_gate_mu);
  /* Both jobs of the step (layer 0's held, layer 1's queued behind it) were collected by no step yet. */
  assert_int_equal(x.stats.remote_blocks, 0);
  assert_int_equal(x.stats.admitted, 0);
  assert_int_equal(x.stats.hits + x.stats.misses, 0);
  uint64_t steps_remote = 0, steps_admitted = 0;
  okv_step_stats_t cum;
  OKV_ASSERT_OK(okv_runtime_stats(x.rt, UINT32_MAX, &cum)); /* waits: every job of the step counts */
  assert_true(cum.remote_blocks > 0);
  assert_int_equal(cum.remote_blocks, src->blocks_read);
  assert_true(cum.admitted > 0);
  assert_int_equal(x.rt->total_cum.admitted, 0); /* ... without being collected */
  for (uint32_t step = 0; step < 4; step++) {
    assert_int_equal(harn_step(&x, 1, which, NULL, 0), OKV_STATUS_OK);
    assert_true(harn_check(&x, 0) < 5e-5);
    steps_remote += x.stats.remote_blocks;
    steps_admitted += x.stats.admitted;
  }
  OKV_ASSERT_OK(okv_runtime_stats(x.rt, UINT32_MAX, &cum));
  assert_int_equal(cum.remote_blocks, src->blocks_read); /* every read counted, once */
  uint64_t pending_remote = 0, pending_admitted = 0;
  for (uint32_t l = 0; l < c.n_layers; l++)
    if (x.rt->jobs[l].stats_pending) {
      pending_remote += x.rt->jobs[l].stats.remote_blocks;
      pending_admitted += x.rt->jobs[l].stats.admitted;
    }
  assert_int_equal(steps_remote + pending_remote, cum.remote_blocks); /* the steps + the uncollected = every job */
  assert_int_equal(steps_admitted + pending_admitted, cum.admitted);
  assert_int_equal(x.rt->total_cum.admitted, steps_admitted);
  harn_close(&x);
}

int main(int argc, char **argv) {
  g_backend = okv_test_backend_or_skip(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_remote_equals_local),
      cmocka_unit_test(test_remote_narrow_summaries),
      cmocka_unit_test(test_remote_cap_and_once),
      cmocka_unit_test(test_remote_failure_sweep),
      cmocka_unit_test(test_remote_bad_fields),
      cmocka_unit_test(test_remote_add_faults),
      cmocka_unit_test(test_read_kv),
      cmocka_unit_test(test_step_end_does_not_wait),
  };
  return cmocka_run_group_tests_name("core_runtime_remote", tests, NULL, NULL);
}
