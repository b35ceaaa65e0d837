/* Test support for tests/core: drives a runtime through decode steps with
 * random K/V/queries, keeps every layer's inputs and outputs of the last step,
 * and checks them against the double-precision reference (rt_ref.h). */
#ifndef OASISKV_TESTS_CORE_RT_DRIVER_H
#define OASISKV_TESTS_CORE_RT_DRIVER_H

#include "tests/core/rt_ref.h"

#define DRV_MAX_SEQS   16
#define DRV_MAX_LAYERS 8

typedef struct drv_t {
  okv_runtime_config_t cfg;
  okv_allocator_t alloc;
  okv_hal_device_t *dev;
  okv_runtime_t *rt;
  okv_test_rng_t rng;
  uint32_t n_seqs; /* sequences alive, ids[0..n_seqs) */
  uint32_t ids[DRV_MAX_SEQS];
  rt_hist_t hist[DRV_MAX_SEQS];
  uint32_t max_tokens;
  /* Last step, per layer: [L][n][T][nq][hd] q/out, [L][n][T-1][2][H][hd] draft, [L][n][H][hd] k/v. */
  uint32_t T, step_n;
  uint32_t step_slot[DRV_MAX_SEQS]; /* index into ids/hist of each batch row */
  float *q, *draft, *out, *k_new, *v_new;
  okv_step_stats_t last_stats; /* okv_runtime_step_end's: the jobs it collected, maybe of the step before */
  /* track_jobs: after each step, what that step's jobs selected and its commits moved (rt_stats_since),
   * all layers and per layer. Waits for the background thread each step, so off by default: the other
   * tests let a step's last jobs run into the next step, as an engine does. */
  bool track_jobs;
  okv_step_stats_t last_jobs, last_job[DRV_MAX_LAYERS], cum_prev, cum_layer_prev[DRV_MAX_LAYERS];
  okv_status_code_t last_layer_code; /* first non-OK code of step_layer in the last step */
} drv_t;

static inline size_t drv_q_elems(const drv_t *d) { return (size_t)d->T * d->cfg.n_q_heads * d->cfg.head_dim; }
static inline size_t drv_kv_elems(const drv_t *d) { return (size_t)d->cfg.n_kv_heads * d->cfg.head_dim; }

static inline void drv_open(drv_t *d, const char *backend, const okv_runtime_config_t *cfg,
                            const okv_hal_device_params_t *params, uint64_t seed, uint32_t max_tokens) {
  memset(d, 0, sizeof *d);
  d->cfg = *cfg;
  d->alloc = okv_test_allocator();
  d->max_tokens = max_tokens;
  okv_test_rng_seed(&d->rng, seed);
  OKV_ASSERT_OK(okv_hal_device_create(backend, params, &d->alloc, &d->dev));
  OKV_ASSERT_OK(okv_runtime_create(d->dev, cfg, &d->alloc, &d->rt));
  assert_true(cfg->n_layers <= DRV_MAX_LAYERS);
  size_t L = cfg->n_layers, n = DRV_MAX_SEQS, T = 4;
  d->q = test_calloc(L * n * T * cfg->n_q_heads * cfg->head_dim, sizeof(float));
  d->out = test_calloc(L * n * T * cfg->n_q_heads * cfg->head_dim, sizeof(float));
  d->draft = test_calloc(L * n * T * 2 * cfg->n_kv_heads * cfg->head_dim, sizeof(float));
  d->k_new = test_calloc(L * n * cfg->n_kv_heads * cfg->head_dim, sizeof(float));
  d->v_new = test_calloc(L * n * cfg->n_kv_heads * cfg->head_dim, sizeof(float));
}

static inline void drv_close(drv_t *d) {
  okv_runtime_destroy(d->rt);
  OKV_ASSERT_OK(okv_hal_device_release(d->dev));
  for (uint32_t i = 0; i < d->n_seqs; i++) rt_hist_free(&d->hist[i]);
  test_free(d->q);
  test_free(d->out);
  test_free(d->draft);
  test_free(d->k_new);
  test_free(d->v_new);
}

/* Adds a sequence with an n-token random prefill; returns its index in ids. */
static inline uint32_t drv_add(drv_t *d, uint32_t n_prefill) {
  assert_true(d->n_seqs < DRV_MAX_SEQS);
  uint32_t i = d->n_seqs;
  rt_hist_init(&d->hist[i], &d->cfg, d->max_tokens);
  okv_prefill_t pf = {0, NULL, NULL};
  float *pk = NULL, *pv = NULL;
  if (n_prefill > 0) rt_make_prefill(&d->hist[i], &d->rng, n_prefill, &pf, &pk, &pv);
  OKV_ASSERT_OK(okv_runtime_seq_add(d->rt, n_prefill ? &pf : NULL, &d->ids[i]));
  if (pk) test_free(pk);
  if (pv) test_free(pv);
  d->n_seqs++;
  return i;
}

/* Removes sequence index i (swaps the last one into its place). */
static inline void drv_remove(drv_t *d, uint32_t i) {
  OKV_ASSERT_OK(okv_runtime_seq_remove(d->rt, d->ids[i]));
  rt_hist_free(&d->hist[i]);
  d->n_seqs--;
  if (i != d->n_seqs) {
    d->ids[i] = d->ids[d->n_seqs];
    d->hist[i] = d->hist[d->n_seqs];
  }
}

static inline float *drv_q(drv_t *d, uint32_t l) {
  return d->q + (size_t)l * DRV_MAX_SEQS * 4 * d->cfg.n_q_heads * d->cfg.head_dim;
}
static inline float *drv_out(drv_t *d, uint32_t l) {
  return d->out + (size_t)l * DRV_MAX_SEQS * 4 * d->cfg.n_q_heads * d->cfg.head_dim;
}
static inline float *drv_draft(drv_t *d, uint32_t l) {
  return d->draft + (size_t)l * DRV_MAX_SEQS * 4 * 2 * drv_kv_elems(d);
}
static inline float *drv_k(drv_t *d, uint32_t l) { return d->k_new + (size_t)l * DRV_MAX_SEQS * drv_kv_elems(d); }
static inline float *drv_v(drv_t *d, uint32_t l) { return d->v_new + (size_t)l * DRV_MAX_SEQS * drv_kv_elems(d); }

/* Runs one step over all sequences (or the first n_batch) with T query tokens.
 * q_scale sharpens attention. Records history. Returns nothing; the first
 * non-OK layer code is kept in last_layer_code (COPY_FAILED allowed). */
static inline void drv_step_n(drv_t *d, uint32_t n_batch, uint32_t T, float q_scale) {
  d->T = T;
  d->step_n = n_batch;
  d->last_layer_code = OKV_STATUS_OK;
  uint32_t ids[DRV_MAX_SEQS];
  for (uint32_t i = 0; i < n_batch; i++) {
    d->step_slot[i] = i;
    ids[i] = d->ids[i];
  }
  OKV_ASSERT_OK(okv_runtime_step_begin(d->rt, n_batch, ids, T));
  size_t kvn = drv_kv_elems(d);
  for (uint32_t l = 0; l < d->cfg.n_layers; l++) {
    float *q = drv_q(d, l), *dr = drv_draft(d, l), *k = drv_k(d, l), *v = drv_v(d, l);
    for (size_t i = 0; i < n_batch * drv_q_elems(d); i++) q[i] = q_scale * okv_test_rng_normal(&d->rng);
    for (size_t i = 0; i < n_batch * (T - 1) * 2 * kvn; i++) dr[i] = okv_test_rng_normal(&d->rng);
    for (size_t i = 0; i < n_batch * kvn; i++) {
      k[i] = okv_test_rng_normal(&d->rng);
      v[i] = okv_test_rng_normal(&d->rng);
    }
    okv_status_t st = okv_runtime_step_layer(d->rt, l, k, v, q, T > 1 ? dr : NULL, drv_out(d, l));
    okv_status_code_t code = okv_status_code(st);
    if (code != OKV_STATUS_OK && code != OKV_STATUS_COPY_FAILED) {
      print_error("step_layer %u: %s\n", l, okv_status_message(st));
      okv_status_free(st);
      fail();
    }
    okv_status_free(st);
    if (code != OKV_STATUS_OK && d->last_layer_code == OKV_STATUS_OK) d->last_layer_code = code;
    for (uint32_t i = 0; i < n_batch; i++) rt_hist_append(&d->hist[i], l, k + i * kvn, v + i * kvn);
  }
  OKV_ASSERT_OK(okv_runtime_step_end(d->rt, &d->last_stats));
  if (d->track_jobs) {
    rt_stats_since(d->rt, UINT32_MAX, &d->cum_prev, &d->last_jobs);
    for (uint32_t l = 0; l < d->cfg.n_layers; l++) rt_stats_since(d->rt, l, &d->cum_layer_prev[l], &d->last_job[l]);
  }
}

static inline void drv_step(drv_t *d, uint32_t T, float q_scale) { drv_step_n(d, d->n_seqs, T, q_scale); }

/* Checks the last step's outputs against the reference: over every block when
 * full, otherwise over the blocks okv_runtime_seq_resident reports. Returns the max error. */
static inline double drv_check(drv_t *d, bool full) {
  uint32_t H = d->cfg.n_kv_heads, G = d->cfg.n_q_heads / H, hd = d->cfg.head_dim, T = d->T;
  uint32_t blocks[4096];
  float *ref = test_malloc(hd * sizeof(float));
  double worst = 0;
  for (uint32_t l = 0; l < d->cfg.n_layers; l++) {
    for (uint32_t i = 0; i < d->step_n; i++) {
      const rt_hist_t *h = &d->hist[d->step_slot[i]];
      for (uint32_t kvh = 0; kvh < H; kvh++) {
        uint32_t nb = 0;
        if (!full) {
          OKV_ASSERT_OK(okv_runtime_seq_resident(d->rt, d->ids[i], l, kvh, blocks, 4096, &nb));
          assert_true(nb <= 4096);
        }
        for (uint32_t t = 0; t < T; t++)
          for (uint32_t g = 0; g < G; g++) {
            uint32_t hq = kvh * G + g;
            const float *q = drv_q(d, l) + (((size_t)i * T + t) * d->cfg.n_q_heads + hq) * hd;
            const float *o = drv_out(d, l) + (((size_t)i * T + t) * d->cfg.n_q_heads + hq) * hd;
            rt_ref_attend(h, l, kvh, q, t, T, full ? NULL : blocks, nb,
                          drv_draft(d, l) + (size_t)i * (T - 1) * 2 * H * hd, T - 1, ref);
            double e = rt_max_abs_diff(ref, o, hd);
            if (e > worst) worst = e;
          }
      }
    }
  }
  test_free(ref);
  return worst;
}

#endif
