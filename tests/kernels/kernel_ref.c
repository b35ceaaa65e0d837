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

/* The scoring jobs of d: segments, or ranges. */
static void ref_score_job(const okv_score_desc_t *d, uint32_t j, uint32_t *u, uint64_t *sf, uint32_t *n, uint64_t *cf) {
  if (d->n_ranges > 0) {
    *u = d->range_seg[j], *sf = d->range_summary_first[j], *n = d->range_n_blocks[j], *cf = d->range_score_first[j];
  } else {
    *u = j, *sf = d->seg_summary_first[j], *n = d->seg_n_blocks[j], *cf = d->seg_score_first[j];
  }
}

void okv_ref_score(const okv_score_desc_t *d, const float *q, const void *summaries, double *scores) {
  const uint32_t H = d->n_kv_heads, G = d->group_size, D = d->head_dim, T = d->n_query_tokens;
  const uint32_t n_jobs = d->n_ranges > 0 ? d->n_ranges : d->n_seqs * H;
  for (uint32_t j = 0; j < n_jobs; j++) {
    uint32_t u, nb;
    uint64_t sf, cf;
    ref_score_job(d, j, &u, &sf, &nb, &cf);
    const uint32_t s = u / H, h = u % H;
    if (d->summary_dtype == OKV_DTYPE_C4) {
      const uint64_t tb = okv_ref_c4_tile_bytes(D);
      const float *rows[1024];
      uint32_t nr = 0;
      for (uint32_t t = d->t_begin; t < d->t_end; t++)
        for (uint32_t g = 0; g < G && nr < 1024u; g++) rows[nr++] = q + (((size_t)s * T + t) * H * G + h * G + g) * D;
      for (uint32_t b = 0; b < nb; b++)
        scores[cf + b] =
            okv_ref_c4_score((const uint8_t *)summaries + (sf + b) / 16u * tb, (uint32_t)((sf + b) % 16u), rows, nr, D);
      continue;
    }
    if (d->summary_dtype == OKV_DTYPE_Q8) {
      const uint64_t qsb = okv_summary_bytes_ex(OKV_DTYPE_Q8, D);
      for (uint32_t b = 0; b < nb; b++) {
        double best = -INFINITY;
        for (uint32_t t = d->t_begin; t < d->t_end; t++)
          for (uint32_t g = 0; g < G; g++) {
            const float *qr = q + (((size_t)s * T + t) * H * G + h * G + g) * D;
            double v = okv_ref_q8_row((const uint8_t *)summaries + (sf + b) * qsb, qr, D);
            best = v > best ? v : best;
          }
        scores[cf + b] = best;
      }
      continue;
    }
    for (uint32_t b = 0; b < nb; b++) {
      const uint64_t e0 = (sf + b) * 2 * D; /* element index of the block's min */
      double best = -INFINITY;
      for (uint32_t t = d->t_begin; t < d->t_end; t++)
        for (uint32_t g = 0; g < G; g++) {
          const float *qr = q + (((size_t)s * T + t) * H * G + h * G + g) * D;
          double a = 0;
          for (uint32_t e = 0; e < D; e++) {
            double mn = okv_ref_elem(summaries, d->summary_dtype, e0 + e);
            double mx = okv_ref_elem(summaries, d->summary_dtype, e0 + D + e);
            double x = (double)qr[e] * mn, y = (double)qr[e] * mx;
            a += x > y ? x : y;
          }
          best = a > best ? a : best;
        }
      scores[cf + b] = best / sqrt((double)D);
    }
  }
}

/* Sorted values of every non-NaN 16-bit pattern of a dtype (+-0 collapse to
 * one entry each, -0 first), built once. */
typedef struct ref_table_t {
  float v[65536];
  uint32_t n;
} ref_table_t;

static int ref_float_cmp(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  if (x != y) return x < y ? -1 : 1;
  return (signbit(y) != 0) - (signbit(x) != 0); /* -0 before +0 */
}

static const ref_table_t *ref_table(okv_dtype_t dtype) {
  static ref_table_t tables[2];
  static bool built[2];
  const int i = dtype == OKV_DTYPE_BF16;
  ref_table_t *t = &tables[i];
  if (!built[i]) {
    t->n = 0;
    for (uint32_t h = 0; h < 65536; h++) {
      float x = i ? okv_bf16_to_f32((uint16_t)h) : okv_f16_to_f32((uint16_t)h);
      if (x == x) t->v[t->n++] = x;
    }
    qsort(t->v, t->n, sizeof(float), ref_float_cmp);
    built[i] = true;
  }
  return t;
}

float okv_ref_narrow(float x, okv_dtype_t dtype, bool up) {
  if (dtype == OKV_DTYPE_F32 || x != x) return x;
  const ref_table_t *t = ref_table(dtype);
  if (x == 0.0f) return x; /* +-0 are values of both dtypes */
  /* first index with v >= x (binary search) */
  uint32_t lo = 0, hi = t->n;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (t->v[mid] < x)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < t->n && t->v[lo] == x) return x; /* exact */
  /* t->v[lo - 1] < x < t->v[lo]; both exist because the table holds -inf and +inf */
  return up ? t->v[lo] : t->v[lo - 1];
}

void okv_ref_summary_reduce(const void *src, okv_dtype_t src_dtype, uint32_t n, uint32_t head_dim,
                            okv_dtype_t dst_dtype, float *dst) {
  for (uint32_t e = 0; e < head_dim; e++) {
    double lo = INFINITY, hi = -INFINITY;
    for (uint32_t j = 0; j < n; j++) {
      double mn = okv_ref_elem(src, src_dtype, (uint64_t)j * 2 * head_dim + e);
      double mx = okv_ref_elem(src, src_dtype, (uint64_t)j * 2 * head_dim + head_dim + e);
      lo = mn < lo ? mn : lo;
      hi = mx > hi ? mx : hi;
    }
    dst[e] = okv_ref_narrow((float)lo, dst_dtype, false); /* (float): exact, the values are floats */
    dst[head_dim + e] = okv_ref_narrow((float)hi, dst_dtype, true);
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
    const uint32_t *map = d->index_map ? d->index_map + d->seg_score_first[u] : NULL;
    for (uint32_t i = 0; i < d->k; i++)
      out_indices[(size_t)u * d->k + i] = i >= count ? UINT32_MAX : map ? map[items[i].index] : items[i].index;
    if (out_counts) out_counts[u] = count;
    free(items);
  }
}
