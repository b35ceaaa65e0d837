/* Test support for tests/core: a recorder of every K/V a test appends and a
 * double-precision attention reference over chosen blocks. Header-only. */
#ifndef OASISKV_TESTS_CORE_RT_REF_H
#define OASISKV_TESTS_CORE_RT_REF_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test_common.h"

/* A runtime config with okv_runtime_config_init's defaults and the model
 * shape (the fields init leaves 0). */
static inline void rt_config(okv_runtime_config_t *c, uint32_t n_layers, uint32_t n_q_heads, uint32_t n_kv_heads,
                             uint32_t head_dim) {
  okv_runtime_config_init(c);
  c->n_layers = n_layers;
  c->n_q_heads = n_q_heads;
  c->n_kv_heads = n_kv_heads;
  c->head_dim = head_dim;
}

/* *a -= *b for every field (the counts of the stats between two cumulative readings). */
static inline void rt_stats_sub(okv_step_stats_t *a, const okv_step_stats_t *b) {
  a->hits -= b->hits, a->misses -= b->misses, a->admitted -= b->admitted, a->deferred -= b->deferred;
  a->evicted -= b->evicted, a->failed_blocks -= b->failed_blocks, a->blocks_moved -= b->blocks_moved;
  for (int i = 0; i < OKV_TIER_COUNT; i++)
    for (int j = 0; j < OKV_TIER_COUNT; j++) a->bytes_moved[i][j] -= b->bytes_moved[i][j];
  a->stall_seconds -= b->stall_seconds, a->recall_hits -= b->recall_hits, a->recall_total -= b->recall_total;
  a->steps -= b->steps, a->deferred_steps -= b->deferred_steps;
  a->bookkeeping_seconds -= b->bookkeeping_seconds, a->attention_seconds -= b->attention_seconds;
  a->predict_seconds -= b->predict_seconds, a->append_bytes -= b->append_bytes;
  a->append_seconds -= b->append_seconds, a->pipeline_errors -= b->pipeline_errors;
  a->retried_writes -= b->retried_writes, a->remote_blocks -= b->remote_blocks, a->remote_bytes -= b->remote_bytes;
  a->remote_seconds -= b->remote_seconds, a->remote_stall_seconds -= b->remote_stall_seconds;
  a->topk_agreement_hits -= b->topk_agreement_hits, a->topk_agreement_total -= b->topk_agreement_total;
  a->fetched_share -= b->fetched_share, a->fetched_share_blocks -= b->fetched_share_blocks;
}

/* What happened since *prev (layer: one layer, UINT32_MAX: all), from okv_runtime_stats, which waits for the
 * background thread and counts every job issued so far: called after okv_runtime_step_end, the selections
 * of exactly the jobs that step issued (one per layer) and the commits it made, whichever step collected
 * them (docs/api.md "Stats"). Updates *prev. */
static inline void rt_stats_since(const okv_runtime_t *rt, uint32_t layer, okv_step_stats_t *prev,
                                  okv_step_stats_t *out) {
  okv_step_stats_t now;
  OKV_ASSERT_OK(okv_runtime_stats(rt, layer, &now));
  *out = now;
  rt_stats_sub(out, prev);
  *prev = now;
}

typedef struct rt_hist_t {
  uint32_t n_layers, n_kv_heads, head_dim, max_tokens;
  okv_dtype_t dtype;
  uint32_t *n_tokens; /* [n_layers] */
  float *k, *v;       /* [n_layers][max_tokens][n_kv_heads][head_dim], rounded through dtype */
} rt_hist_t;

static inline float rt_round(okv_dtype_t dt, float x) {
  if (dt == OKV_DTYPE_BF16) return okv_bf16_to_f32(okv_f32_to_bf16(x));
  if (dt == OKV_DTYPE_F16) return okv_f16_to_f32(okv_f32_to_f16(x));
  return x;
}

static inline void rt_hist_init(rt_hist_t *h, const okv_runtime_config_t *c, uint32_t max_tokens) {
  h->n_layers = c->n_layers;
  h->n_kv_heads = c->n_kv_heads;
  h->head_dim = c->head_dim;
  h->max_tokens = max_tokens;
  h->dtype = c->kv_dtype;
  h->n_tokens = test_calloc(c->n_layers, sizeof(uint32_t));
  size_t n = (size_t)c->n_layers * max_tokens * c->n_kv_heads * c->head_dim;
  h->k = test_calloc(n, sizeof(float));
  h->v = test_calloc(n, sizeof(float));
}

static inline void rt_hist_free(rt_hist_t *h) {
  test_free(h->n_tokens);
  test_free(h->k);
  test_free(h->v);
}

static inline size_t rt_hist_off(const rt_hist_t *h, uint32_t l, uint32_t t) {
  return (((size_t)l * h->max_tokens + t) * h->n_kv_heads) * h->head_dim;
}

/* Appends one token of layer l: k, v f32 [n_kv_heads][head_dim]. */
static inline void rt_hist_append(rt_hist_t *h, uint32_t l, const float *k, const float *v) {
  uint32_t t = h->n_tokens[l]++;
  assert_true(t < h->max_tokens);
  size_t n = (size_t)h->n_kv_heads * h->head_dim;
  for (size_t i = 0; i < n; i++) {
    h->k[rt_hist_off(h, l, t) + i] = rt_round(h->dtype, k[i]);
    h->v[rt_hist_off(h, l, t) + i] = rt_round(h->dtype, v[i]);
  }
}

/* Fills a prefill of n tokens with N(0,1) values and records it. Caller frees pk/pv. */
static inline void rt_make_prefill(rt_hist_t *h, okv_test_rng_t *rng, uint32_t n, okv_prefill_t *pf, float **pk,
                                   float **pv) {
  size_t per = (size_t)h->n_kv_heads * h->head_dim;
  size_t total = (size_t)h->n_layers * n * per;
  *pk = test_malloc(total * sizeof(float) + 4);
  *pv = test_malloc(total * sizeof(float) + 4);
  for (size_t i = 0; i < total; i++) {
    (*pk)[i] = okv_test_rng_normal(rng);
    (*pv)[i] = okv_test_rng_normal(rng);
  }
  for (uint32_t l = 0; l < h->n_layers; l++)
    for (uint32_t t = 0; t < n; t++)
      rt_hist_append(h, l, *pk + ((size_t)l * n + t) * per, *pv + ((size_t)l * n + t) * per);
  pf->n_tokens = n;
  pf->k = *pk;
  pf->v = *pv;
}

/* Reference: attention of one query row (query token t of T, KV head kvh) over
 * the tokens of the listed blocks of layer l (blocks == NULL: all tokens) plus
 * in-flight tokens [n_inflight][2][n_kv_heads][head_dim] (token i owned by
 * query token T - n_inflight + i). Writes out[head_dim]. */
static inline void rt_ref_attend(const rt_hist_t *h, uint32_t l, uint32_t kvh, const float *q, uint32_t t, uint32_t T,
                                 const uint32_t *blocks, uint32_t n_blocks, const float *inflight, uint32_t n_inflight,
                                 float *out) {
  uint32_t hd = h->head_dim, H = h->n_kv_heads;
  uint32_t n_tok = h->n_tokens[l];
  double scale = 1.0 / sqrt((double)hd);
  double m = -INFINITY, denom = 0.0;
  double *acc = calloc(hd, sizeof(double));
  uint32_t nb_all = (n_tok + 15) / 16;
  uint32_t nb = blocks ? n_blocks : nb_all;
  for (uint32_t j = 0; j < nb + n_inflight; j++) {
    uint32_t t0, t1;
    const float *kk = NULL, *vv = NULL;
    if (j < nb) {
      uint32_t b = blocks ? blocks[j] : j;
      t0 = b * 16;
      t1 = t0 + 16 < n_tok ? t0 + 16 : n_tok;
    } else {
      uint32_t i = j - nb;
      if (t < T - n_inflight + i) continue;
      kk = inflight + ((size_t)i * 2 * H + kvh) * hd;
      vv = inflight + ((size_t)i * 2 * H + H + kvh) * hd;
      t0 = 0;
      t1 = 1;
    }
    for (uint32_t tt = t0; tt < t1; tt++) {
      const float *kr = kk ? kk : h->k + rt_hist_off(h, l, tt) + (size_t)kvh * hd;
      const float *vr = vv ? vv : h->v + rt_hist_off(h, l, tt) + (size_t)kvh * hd;
      double s = 0;
      for (uint32_t d = 0; d < hd; d++) s += (double)q[d] * kr[d];
      s *= scale;
      if (s > m) {
        double r = exp(m - s);
        denom *= r;
        for (uint32_t d = 0; d < hd; d++) acc[d] *= r;
        m = s;
      }
      double p = exp(s - m);
      denom += p;
      for (uint32_t d = 0; d < hd; d++) acc[d] += p * vr[d];
    }
  }
  for (uint32_t d = 0; d < hd; d++) out[d] = denom > 0 ? (float)(acc[d] / denom) : 0.0f;
  free(acc);
}

/* Max |a - b| over n. */
static inline double rt_max_abs_diff(const float *a, const float *b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (d > m || d != d) m = d != d ? INFINITY : d;
  }
  return m;
}

#endif
