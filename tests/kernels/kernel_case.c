/* Random kernel test cases (see kernel_case.h). */
#include "tests/kernels/kernel_case.h"

#include <math.h>
#include <string.h>

void okv_kcase_store(void *p, okv_dtype_t dtype, size_t i, float x) {
  uint8_t *b = p;
  uint16_t h;
  switch (dtype) {
    case OKV_DTYPE_F16:
      h = okv_f32_to_f16(x);
      memcpy(b + 2 * i, &h, 2);
      break;
    case OKV_DTYPE_BF16:
      h = okv_f32_to_bf16(x);
      memcpy(b + 2 * i, &h, 2);
      break;
    default: memcpy(b + 4 * i, &x, 4); break;
  }
}

okv_kcase_params_t okv_kcase_params(uint32_t n_seqs, uint32_t n_kv_heads, uint32_t group_size, uint32_t head_dim,
                                    uint32_t n_query_tokens, uint32_t n_inflight, okv_dtype_t dtype,
                                    uint32_t n_blocks) {
  /* fields in declaration order; vary_blocks false, key_scale 1, partial_last true */
  return (okv_kcase_params_t){n_seqs,   n_kv_heads, group_size, head_dim, n_query_tokens, n_inflight, dtype,
                              n_blocks, false,      1.0f,       true};
}

void okv_kcase_build(okv_kcase_t *c, const okv_kcase_params_t *p, uint64_t seed) {
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, seed);
  memset(c, 0, sizeof *c);
  c->p = *p;
  const uint32_t D = p->head_dim, T = p->n_query_tokens;
  c->n_units = p->n_seqs * p->n_kv_heads;
  c->n_q_heads = p->n_kv_heads * p->group_size;
  c->ws_offsets = test_calloc(c->n_units + 1, sizeof(uint32_t));
  for (uint32_t u = 0; u < c->n_units; u++) {
    uint32_t nb = p->n_blocks;
    if (p->vary_blocks && u > 0) nb = okv_test_rng_below(&rng, p->n_blocks + 1);
    c->ws_offsets[u + 1] = c->ws_offsets[u] + nb;
  }
  c->ws_total = c->ws_offsets[c->n_units];
  const uint64_t n_slots = c->ws_total + 3; /* a few unused slots */
  c->ws_slots = test_calloc(c->ws_total + 1, sizeof(uint32_t));
  c->ws_valid = test_calloc(c->ws_total + 1, 1);
  /* random permutation of slots */
  uint32_t *perm = test_malloc(sizeof(uint32_t) * n_slots);
  for (uint32_t i = 0; i < n_slots; i++) perm[i] = i;
  for (uint32_t i = (uint32_t)n_slots; i > 1; i--) {
    uint32_t j = okv_test_rng_below(&rng, i), t = perm[i - 1];
    perm[i - 1] = perm[j];
    perm[j] = t;
  }
  for (uint32_t u = 0; u < c->n_units; u++)
    for (uint32_t w = c->ws_offsets[u]; w < c->ws_offsets[u + 1]; w++) {
      c->ws_slots[w] = perm[w];
      bool last = w + 1 == c->ws_offsets[u + 1];
      c->ws_valid[w] = (uint8_t)((p->partial_last && last) ? 1 + okv_test_rng_below(&rng, 16) : 16);
    }
  const uint64_t bb = okv_block_bytes(p->dtype, D);
  c->pool_bytes = (size_t)(bb * n_slots);
  c->pool = test_malloc(c->pool_bytes);
  const size_t per_slot = 2u * 16u * D;
  for (uint64_t sl = 0; sl < n_slots; sl++)
    for (size_t i = 0; i < per_slot; i++) {
      /* keys scaled; values ~ N(0,1); unused token columns/rows are NaN */
      float x = okv_test_rng_normal(&rng);
      if (i < 16u * D) x *= p->key_scale;
      okv_kcase_store(c->pool, p->dtype, sl * per_slot + i, x);
    }
  for (uint32_t w = 0; w < c->ws_total; w++) {
    uint8_t *slot = c->pool + (size_t)c->ws_slots[w] * bb;
    for (uint32_t j = c->ws_valid[w]; j < 16; j++) {
      for (uint32_t e = 0; e < D; e++) okv_kcase_store(slot, p->dtype, (size_t)e * 16 + j, NAN);
      for (uint32_t e = 0; e < D; e++) okv_kcase_store(slot, p->dtype, 16u * D + (size_t)j * D + e, NAN);
    }
  }
  for (uint64_t sl = c->ws_total; sl < n_slots; sl++)
    for (size_t i = 0; i < per_slot; i++) okv_kcase_store(c->pool, p->dtype, (size_t)perm[sl] * per_slot + i, NAN);
  test_free(perm);
  c->q_floats = (size_t)p->n_seqs * T * c->n_q_heads * D;
  c->q = test_malloc(sizeof(float) * c->q_floats);
  for (size_t i = 0; i < c->q_floats; i++) c->q[i] = okv_test_rng_normal(&rng);
  c->inflight_floats = (size_t)p->n_seqs * p->n_inflight * 2u * p->n_kv_heads * D;
  if (p->n_inflight) {
    c->inflight = test_malloc(sizeof(float) * c->inflight_floats);
    for (size_t i = 0; i < c->inflight_floats; i++) c->inflight[i] = okv_test_rng_normal(&rng);
  }
  okv_attention_desc_t *d = &c->desc;
  d->n_seqs = p->n_seqs;
  d->n_kv_heads = p->n_kv_heads;
  d->group_size = p->group_size;
  d->head_dim = D;
  d->n_query_tokens = T;
  d->kv_dtype = p->dtype;
  d->n_slots = n_slots;
  d->ws_offsets = c->ws_offsets;
  d->ws_slots = c->ws_slots;
  d->ws_valid = c->ws_valid;
  d->n_inflight = p->n_inflight;
}

void okv_kcase_build_blocks(okv_kcase_t *c, uint32_t head_dim, okv_dtype_t dtype, uint32_t n_blocks, float key_scale,
                            uint64_t seed) {
  okv_kcase_params_t p = okv_kcase_params(1, 1, 1, head_dim, 1, 0, dtype, n_blocks);
  p.key_scale = key_scale;
  okv_kcase_build(c, &p, seed);
}

void okv_kcase_free(okv_kcase_t *c) {
  test_free(c->ws_offsets);
  test_free(c->ws_slots);
  test_free(c->ws_valid);
  test_free(c->pool);
  test_free(c->q);
  if (c->inflight) test_free(c->inflight);
  memset(c, 0, sizeof *c);
}

okv_score_desc_t okv_kcase_score_desc(uint32_t n_seqs, uint32_t n_kv_heads, uint32_t group_size, uint32_t head_dim,
                                      uint32_t n_query_tokens, const uint64_t *seg_summary_first,
                                      const uint32_t *seg_n_blocks, const uint64_t *seg_score_first) {
  return (okv_score_desc_t){.n_seqs = n_seqs,
                            .n_kv_heads = n_kv_heads,
                            .group_size = group_size,
                            .head_dim = head_dim,
                            .n_query_tokens = n_query_tokens,
                            .t_end = n_query_tokens,
                            .seg_summary_first = seg_summary_first,
                            .seg_n_blocks = seg_n_blocks,
                            .seg_score_first = seg_score_first};
}

okv_topk_desc_t okv_kcase_topk_desc(uint32_t n_segments, uint32_t k, const uint64_t *seg_score_first,
                                    const uint32_t *seg_n, const uint32_t *excl_offsets, const uint32_t *excl_blocks) {
  return (okv_topk_desc_t){.n_segments = n_segments,
                           .k = k,
                           .seg_score_first = seg_score_first,
                           .seg_n = seg_n,
                           .excl_offsets = excl_offsets,
                           .excl_blocks = excl_blocks};
}

const uint8_t *okv_kcase_slot(const okv_kcase_t *c, uint64_t slot) {
  return c->pool + slot * okv_block_bytes(c->p.dtype, c->p.head_dim);
}

void okv_kcase_key(const okv_kcase_t *c, uint64_t slot, uint32_t j, float *key) {
  for (uint32_t e = 0; e < c->p.head_dim; e++)
    key[e] = (float)okv_ref_elem(okv_kcase_slot(c, slot), c->p.dtype, (uint64_t)e * 16 + j);
}

void okv_kcase_ref_make(const okv_kcase_t *c, okv_kcase_ref_t *r) {
  r->n_mass = (size_t)c->ws_total * c->p.n_query_tokens + 1;
  r->out = test_malloc(sizeof(double) * c->q_floats);
  r->mass = test_malloc(sizeof(double) * r->n_mass);
  okv_ref_attention(&c->desc, c->pool, c->q, c->inflight, r->out, r->mass, NULL);
}

void okv_kcase_ref_free(okv_kcase_ref_t *r) {
  test_free(r->out);
  test_free(r->mass);
  memset(r, 0, sizeof *r);
}

/* The conditioning of unit (s, h): max over its keys and query rows of
 * sum_i |q_i k_i| / sqrt(head_dim). */
static double unit_conditioning(const okv_kcase_t *c, uint32_t s, uint32_t h) {
  const okv_kcase_params_t *p = &c->p;
  const uint32_t D = p->head_dim, T = p->n_query_tokens, G = p->group_size, u = s * p->n_kv_heads + h;
  double amax = 0;
  for (uint32_t w = c->ws_offsets[u]; w < c->ws_offsets[u + 1]; w++) {
    const uint8_t *slot = okv_kcase_slot(c, c->ws_slots[w]);
    for (uint32_t j = 0; j < c->ws_valid[w]; j++)
      for (uint32_t t = 0; t < T; t++)
        for (uint32_t g = 0; g < G; g++) {
          const float *qr = c->q + (((size_t)s * T + t) * c->n_q_heads + h * G + g) * D;
          double a = 0;
          for (uint32_t e = 0; e < D; e++)
            a += fabs((double)qr[e] * okv_ref_elem(slot, p->dtype, (uint64_t)e * 16 + j));
          a /= sqrt((double)D);
          amax = a > amax ? a : amax;
        }
  }
  return amax;
}

double okv_kcase_attention_error(const okv_kcase_t *c, const float *out, const double *ref, double tol_rel) {
  const okv_kcase_params_t *p = &c->p;
  const uint32_t D = p->head_dim, T = p->n_query_tokens, G = p->group_size, H = p->n_kv_heads;
  const size_t es = okv_dtype_size(p->dtype);
  double worst = 0;
  for (uint32_t s = 0; s < p->n_seqs; s++)
    for (uint32_t h = 0; h < H; h++) {
      uint32_t u = s * H + h;
      double vmax = 0, amax = unit_conditioning(c, s, h);
      for (uint32_t w = c->ws_offsets[u]; w < c->ws_offsets[u + 1]; w++) {
        const uint8_t *slot = okv_kcase_slot(c, c->ws_slots[w]);
        for (uint32_t j = 0; j < c->ws_valid[w]; j++)
          for (uint32_t e = 0; e < D; e++) {
            double v = fabs(okv_ref_elem(slot + 16u * D * es, p->dtype, (uint64_t)j * D + e));
            vmax = v > vmax ? v : vmax;
          }
      }
      for (uint32_t i = 0; i < p->n_inflight; i++)
        for (uint32_t e = 0; e < 2u * D; e++) {
          /* in-flight keys/values: bound generously by their magnitude */
          const float *kv = c->inflight + (((size_t)s * p->n_inflight + i) * 2 * H + h) * D;
          double v = fabs(e < D ? kv[e] : kv[(size_t)H * D + e - D]);
          vmax = v > vmax ? v : vmax;
        }
      if (p->n_inflight) amax += 4.0 * sqrt((double)D);
      double tol = tol_rel * (vmax > 0 ? vmax : 1.0) * (1.0 + amax);
      for (uint32_t t = 0; t < T; t++)
        for (uint32_t g = 0; g < G; g++) {
          size_t base = (((size_t)s * T + t) * c->n_q_heads + h * G + g) * D;
          for (uint32_t e = 0; e < D; e++) {
            double o = out[base + e];
            if (isnan(o)) return INFINITY;
            double r = fabs(o - ref[base + e]) / tol;
            worst = r > worst ? r : worst;
          }
        }
    }
  return worst;
}

double okv_kcase_conditioning(const okv_kcase_t *c) {
  double amax = 0;
  for (uint32_t s = 0; s < c->p.n_seqs; s++)
    for (uint32_t h = 0; h < c->p.n_kv_heads; h++) {
      double a = unit_conditioning(c, s, h);
      amax = a > amax ? a : amax;
    }
  return amax;
}

double okv_kcase_assert_attention(const okv_kcase_t *c, const float *out, const double *ref, double tol_rel,
                                  const char *what) {
  const okv_kcase_params_t *p = &c->p;
  double e = okv_kcase_attention_error(c, out, ref, tol_rel);
  if (!(e <= 1.0))
    print_error("case D=%u G=%u T=%u inflight=%u blocks=%u dtype=%s (%s): error ratio %.3g\n", p->head_dim,
                p->group_size, p->n_query_tokens, p->n_inflight, p->n_blocks, okv_dtype_name(p->dtype), what, e);
  assert_true(e <= 1.0);
  return e;
}

void okv_kcase_assert_mass(const okv_kcase_t *c, const float *mass, const double *ref_mass, double tol_rel,
                           const char *what) {
  const double mtol = tol_rel * (1.0 + okv_kcase_conditioning(c));
  for (size_t i = 0; i < (size_t)c->ws_total * c->p.n_query_tokens; i++) {
    if (!(fabs(mass[i] - ref_mass[i]) <= mtol))
      print_error("mass[%zu] = %.9g, reference %.9g (key scale %g, %s, %s)\n", i, mass[i], ref_mass[i], c->p.key_scale,
                  okv_dtype_name(c->p.dtype), what);
    assert_true(fabs(mass[i] - ref_mass[i]) <= mtol);
  }
}

void okv_kcase_assert_summaries(const okv_kcase_t *c, const uint64_t *bi, const uint64_t *si, uint32_t n,
                                const float *got) {
  const uint32_t D = c->p.head_dim;
  float *ref = test_malloc(sizeof(float) * 2 * D);
  for (uint32_t i = 0; i < n; i++) {
    okv_ref_summary(okv_kcase_slot(c, bi[i]), c->p.dtype, D, c->ws_valid[i], ref);
    assert_memory_equal(ref, got + si[i] * 2 * D, sizeof(float) * 2 * D);
  }
  test_free(ref);
}
