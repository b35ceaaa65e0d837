/* Scalar double-precision reference of the kernels (see kernel_ref.h). */
#include "tests/kernels/kernel_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double okv_ref_elem(const void *p, okv_dtype_t dtype, uint64_t i) {
  const uint8_t *b = p;
  uint16_t h;
  float f;
  switch (dtype) {
    case OKV_DTYPE_F16: memcpy(&h, b + 2 * i, 2); return (double)okv_f16_to_f32(h);
    case OKV_DTYPE_BF16: memcpy(&h, b + 2 * i, 2); return (double)okv_bf16_to_f32(h);
    default: memcpy(&f, b + 4 * i, 4); return (double)f;
  }
}

void okv_ref_attention(const okv_attention_desc_t *d, const void *kv_pool, const float *q, const float *inflight_kv,
                       double *out, double *mass, double *inflight_mass) {
  const uint32_t S = d->n_seqs, H = d->n_kv_heads, G = d->group_size, D = d->head_dim, T = d->n_query_tokens;
  const uint32_t NQ = H * G, NI = d->n_inflight;
  const uint64_t bb = okv_block_bytes(d->kv_dtype, D);
  const double scale = 1.0 / sqrt((double)D);
  const uint8_t *pool = kv_pool;
  if (mass) memset(mass, 0, sizeof(double) * (size_t)d->ws_offsets[S * H] * T);
  for (uint32_t s = 0; s < S; s++)
    for (uint32_t h = 0; h < H; h++) {
      uint32_t u = s * H + h, w0 = d->ws_offsets[u], w1 = d->ws_offsets[u + 1];
      size_t n_keys = (size_t)(w1 - w0) * OKV_BLOCK_TOKENS + NI;
      double *logit = malloc(sizeof(double) * (n_keys ? n_keys : 1));
      for (uint32_t t = 0; t < T; t++)
        for (uint32_t g = 0; g < G; g++) {
          const float *qr = q + (((size_t)s * T + t) * NQ + h * G + g) * D;
          double *o = out + (((size_t)s * T + t) * NQ + h * G + g) * D;
          double mx = -INFINITY;
          size_t n = 0;
          /* logits: working-set tokens in order, then visible in-flight tokens */
          for (uint32_t w = w0; w < w1; w++) {
            const uint8_t *slot = pool + (size_t)d->ws_slots[w] * bb;
            for (uint32_t j = 0; j < d->ws_valid[w]; j++) {
              double a = 0;
              for (uint32_t e = 0; e < D; e++)
                a += (double)qr[e] * okv_ref_elem(slot, d->kv_dtype, (uint64_t)e * 16 + j);
              logit[n++] = a * scale;
            }
          }
          for (uint32_t i = 0; i < NI; i++) {
            if (t < T - NI + i) continue;
            const float *k = inflight_kv + (((size_t)s * NI + i) * 2 * H + h) * D;
            double a = 0;
            for (uint32_t e = 0; e < D; e++) a += (double)qr[e] * (double)k[e];
            logit[n++] = a * scale;
          }
          for (size_t i = 0; i < n; i++) mx = logit[i] > mx ? logit[i] : mx;
          double sum = 0;
          for (size_t i = 0; i < n; i++) sum += exp(logit[i] - mx);
          for (uint32_t e = 0; e < D; e++) o[e] = 0;
          double p_inflight = 0;
          if (n > 0) {
            size_t c = 0;
            for (uint32_t w = w0; w < w1; w++) {
              const uint8_t *slot = pool + (size_t)d->ws_slots[w] * bb;
              const uint8_t *vp = slot + (size_t)16 * D * okv_dtype_size(d->kv_dtype);
              double bm = 0;
              for (uint32_t j = 0; j < d->ws_valid[w]; j++) {
                double p = exp(logit[c++] - mx) / sum;
                bm += p;
                for (uint32_t e = 0; e < D; e++) o[e] += p * okv_ref_elem(vp, d->kv_dtype, (uint64_t)j * D + e);
              }
              if (mass) mass[(size_t)w * T + t] += bm / G;
            }
            for (uint32_t i = 0; i < NI; i++) {
              if (t < T - NI + i) continue;
              const float *v = inflight_kv + (((size_t)s * NI + i) * 2 * H + H + h) * D;
              double p = exp(logit[c++] - mx) / sum;
              p_inflight += p;
              for (uint32_t e = 0; e < D; e++) o[e] += p * (double)v[e];
            }
          }
          if (inflight_mass) inflight_mass[((size_t)s * T + t) * NQ + h * G + g] = p_inflight;
        }
      free(logit);
    }
}

void okv_ref_summary(const void *slot, okv_dtype_t dtype, uint32_t head_dim, uint32_t valid, float *out) {
  for (uint32_t e = 0; e < head_dim; e++) {
    double lo = INFINITY, hi = -INFINITY;
    for (uint32_t j = 0; j < valid; j++) {
      double x = okv_ref_elem(slot, dtype, (uint64_t)e * 16 + j);
      lo = x < lo ? x : lo;
      hi = x > hi ? x : hi;
    }
    out[e] = (float)lo; /* exact: x is a float */
    out[head_dim + e] = (float)hi;
  }
}

void okv_ref_score(const okv_score_desc_t *d, const float *q, const float *summaries, double *scores) {
  const uint32_t H = d->n_kv_heads, G = d->group_size, D = d->head_dim, T = d->n_query_tokens;
  for (uint32_t s = 0; s < d->n_seqs; s++)
    for (uint32_t h = 0; h < H; h++) {
      uint32_t u = s * H + h;
      for (uint32_t b = 0; b < d->seg_n_blocks[u]; b++) {
        const float *mn = summaries + (size_t)(d->seg_summary_first[u] + b) * 2 * D, *mx = mn + D;
        double best = -INFINITY;
        for (uint32_t t = d->t_begin; t < d->t_end; t++)
          for (uint32_t g = 0; g < G; g++) {
            const float *qr = q + (((size_t)s * T + t) * H * G + h * G + g) * D;
            double a = 0;
            for (uint32_t e = 0; e < D; e++) {
              double x = (double)qr[e] * mn[e], y = (double)qr[e] * mx[e];
              a += x > y ? x : y;
            }
            best = a > best ? a : best;
          }
        scores[d->seg_score_first[u] + b] = best / sqrt((double)D);
      }
    }
}

typedef struct ref_item_t {
  double score;
  uint32_t index;
} ref_item_t;

static int ref_item_cmp(const void *a, const void *b) {
  const ref_item_t *x = a, *y = b;
  if (x->score != y->score) return x->score > y->score ? -1 : 1;
  return x->index < y->index ? -1 : (x->index > y->index);
}

void okv_ref_topk(const okv_topk_desc_t *d, const float *scores, uint32_t *out_indices, uint32_t *out_counts) {
  for (uint32_t u = 0; u < d->n_segments; u++) {
    uint32_t n = d->seg_n[u], m = 0;
    ref_item_t *items = malloc(sizeof(ref_item_t) * (n ? n : 1));
    for (uint32_t b = 0; b < n; b++) {
      int excluded = 0;
      if (d->excl_offsets)
        for (uint32_t i = d->excl_offsets[u]; i < d->excl_offsets[u + 1]; i++) excluded |= d->excl_blocks[i] == b;
      if (excluded) continue;
      float x = scores[d->seg_score_first[u] + b];
      items[m].score = isnan(x) ? -INFINITY : (double)x;
      items[m].index = b;
      m++;
    }
    qsort(items, m, sizeof *items, ref_item_cmp);
    uint32_t count = m < d->k ? m : d->k;
    for (uint32_t i = 0; i < d->k; i++) out_indices[(size_t)u * d->k + i] = i < count ? items[i].index : UINT32_MAX;
    if (out_counts) out_counts[u] = count;
    free(items);
  }
}
