/* Admission of a prefilled request (tools/model/admission.h): the block
 * format of a request's KV, its summaries, the top-K initial working set for
 * the first decode query, and an in-memory KV source. */
#include "model/admission.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define INVALID(...) okv_status_make(OKV_STATUS_INVALID_ARGUMENT, __VA_ARGS__)

static okv_status_t check_shape(const okv_kv_shape_t *s, const char *fn) {
  if (s->n_layers == 0) return INVALID("%s: shape n_layers is 0", fn);
  if (s->n_kv_heads == 0) return INVALID("%s: shape n_kv_heads is 0", fn);
  if (s->n_q_heads == 0 || s->n_q_heads % s->n_kv_heads != 0)
    return INVALID("%s: shape n_q_heads = %u must be a positive multiple of n_kv_heads = %u", fn, s->n_q_heads,
                   s->n_kv_heads);
  if (s->head_dim == 0 || s->head_dim > 256)
    return INVALID("%s: shape head_dim = %u must be in 1..256", fn, s->head_dim);
  if ((unsigned)s->kv_dtype >= OKV_DTYPE_COUNT)
    return INVALID("%s: shape kv_dtype = %d is not a dtype", fn, (int)s->kv_dtype);
  return OKV_OK;
}

/* ---- block format ---- */

static void put_elem(uint8_t *base, okv_dtype_t dt, size_t idx, float x) {
  if (dt == OKV_DTYPE_F32) {
    memcpy(base + idx * 4u, &x, 4u);
  } else {
    uint16_t u = dt == OKV_DTYPE_F16 ? okv_f32_to_f16(x) : okv_f32_to_bf16(x);
    memcpy(base + idx * 2u, &u, 2u);
  }
}

static float get_elem(const uint8_t *base, okv_dtype_t dt, size_t idx) {
  if (dt == OKV_DTYPE_F32) {
    float x;
    memcpy(&x, base + idx * 4u, 4u);
    return x;
  }
  uint16_t u;
  memcpy(&u, base + idx * 2u, 2u);
  return dt == OKV_DTYPE_F16 ? okv_f16_to_f32(u) : okv_bf16_to_f32(u);
}

okv_status_t okv_kv_blocks_make(const okv_kv_shape_t *shape, uint32_t n_tokens, const float *k, const float *v,
                                const okv_allocator_t *allocator, okv_kv_blocks_t *out) {
  static const char fn[] = "okv_kv_blocks_make";
  if (out == NULL) return INVALID("%s: out is NULL", fn);
  memset(out, 0, sizeof *out);
  if (shape == NULL || k == NULL || v == NULL) return INVALID("%s: shape, k or v is NULL", fn);
  OKV_RETURN_IF_ERROR(check_shape(shape, fn));
  if (n_tokens == 0) return INVALID("%s: n_tokens is 0", fn);
  okv_allocator_t a = allocator ? *allocator : okv_allocator_system();
  uint32_t L = shape->n_layers, H = shape->n_kv_heads, hd = shape->head_dim;
  uint32_t nb = (n_tokens + OKV_BLOCK_TOKENS - 1u) / OKV_BLOCK_TOKENS;
  uint64_t bb = okv_block_bytes(shape->kv_dtype, hd);
  uint8_t *data = okv_calloc(&a, (size_t)L * H * nb, bb);
  if (data == NULL)
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "%s: %llu bytes of KV blocks", fn,
                           (unsigned long long)((uint64_t)L * H * nb * bb));
  for (uint32_t l = 0; l < L; l++)
    for (uint32_t t = 0; t < n_tokens; t++)
      for (uint32_t h = 0; h < H; h++) {
        uint8_t *blk = data + (((uint64_t)l * H + h) * nb + t / OKV_BLOCK_TOKENS) * bb;
        const float *kr = k + (((size_t)l * n_tokens + t) * H + h) * hd;
        const float *vr = v + (((size_t)l * n_tokens + t) * H + h) * hd;
        uint32_t pos = t % OKV_BLOCK_TOKENS;
        for (uint32_t d = 0; d < hd; d++) {
          put_elem(blk, shape->kv_dtype, (size_t)d * OKV_BLOCK_TOKENS + pos, kr[d]);
          put_elem(blk, shape->kv_dtype, (size_t)OKV_BLOCK_TOKENS * hd + (size_t)pos * hd + d, vr[d]);
        }
      }
  out->shape = *shape;
  out->n_tokens = n_tokens;
  out->n_blocks = nb;
  out->block_bytes = bb;
  out->data = data;
  out->allocator = a;
  return OKV_OK;
}

void okv_kv_blocks_free(okv_kv_blocks_t *b) {
  if (b == NULL) return;
  if (b->data != NULL) okv_free(&b->allocator, b->data);
  memset(b, 0, sizeof *b);
}

/* ---- admission ---- */

void okv_admission_free(okv_admission_t *a) {
  if (a == NULL) return;
  void *arrs[] = {a->summaries, a->initial_offsets, a->initial_blocks, a->initial_kv};
  for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++)
    if (arrs[i] != NULL) okv_free(&a->allocator, arrs[i]);
  memset(a, 0, sizeof *a);
}

/* Min and max of the first `valid` keys of a stored block into s[0..hd) and s[hd..2hd). */
static void block_summary(const uint8_t *blk, okv_dtype_t dt, uint32_t hd, uint32_t valid, float *s) {
  for (uint32_t d = 0; d < hd; d++) {
    float mn = get_elem(blk, dt, (size_t)d * OKV_BLOCK_TOKENS), mx = mn;
    for (uint32_t t = 1; t < valid; t++) {
      float x = get_elem(blk, dt, (size_t)d * OKV_BLOCK_TOKENS + t);
      mn = x < mn ? x : mn;
      mx = x > mx ? x : mx;
    }
    s[d] = mn;
    s[hd + d] = mx;
  }
}

/* Whether block a (score sa) ranks before block b (score sb): higher score, then lower block. */
static bool ranks_before(double sa, uint32_t a, double sb, uint32_t b) { return sa > sb || (sa == sb && a < b); }

okv_status_t okv_admission_build(const okv_kv_blocks_t *kv, const float *q, uint32_t budget_blocks,
                                 const okv_allocator_t *allocator, okv_admission_t *out) {
  static const char fn[] = "okv_admission_build";
  if (out == NULL) return INVALID("%s: out is NULL", fn);
  memset(out, 0, sizeof *out);
  if (kv == NULL || kv->data == NULL || kv->n_blocks == 0) return INVALID("%s: kv is NULL or empty", fn);
  if (q == NULL) return INVALID("%s: q is NULL", fn);
  if (budget_blocks == 0) return INVALID("%s: budget_blocks is 0", fn);
  OKV_RETURN_IF_ERROR(check_shape(&kv->shape, fn));
  okv_allocator_t a = allocator ? *allocator : okv_allocator_system();
  const okv_kv_shape_t *sh = &kv->shape;
  uint32_t L = sh->n_layers, H = sh->n_kv_heads, hd = sh->head_dim, G = sh->n_q_heads / H, nb = kv->n_blocks;
  uint32_t LH = L * H, n_other = nb - 1u, K = budget_blocks < n_other ? budget_blocks : n_other;
  uint64_t bb = kv->block_bytes;
  out->allocator = a;
  out->summaries = okv_calloc(&a, (size_t)LH * nb * 2u * hd, sizeof(float));
  out->initial_offsets = okv_calloc(&a, (size_t)LH + 1u, sizeof(uint32_t));
  out->initial_blocks = okv_calloc(&a, (size_t)LH * (K + 1u), sizeof(uint32_t));
  out->initial_kv = okv_calloc(&a, (size_t)LH * (K + 1u), bb);
  double *score = okv_calloc(&a, nb, sizeof(double));
  uint32_t *best = okv_calloc(&a, (size_t)K + 1u, sizeof(uint32_t));
  if (!out->summaries || !out->initial_offsets || !out->initial_blocks || !out->initial_kv || !score || !best) {
    if (score) okv_free(&a, score);
    if (best) okv_free(&a, best);
    okv_admission_free(out);
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "%s: host allocator failed", fn);
  }
  for (uint32_t u = 0; u < LH; u++) {
    uint32_t l = u / H, h = u % H;
    const uint8_t *head = kv->data + (uint64_t)u * nb * bb;
    float *sum = out->summaries + (size_t)u * nb * 2u * hd;
    for (uint32_t b = 0; b < nb; b++) {
      uint32_t valid = b + 1u < nb ? OKV_BLOCK_TOKENS : kv->n_tokens - b * OKV_BLOCK_TOKENS;
      block_summary(head + (uint64_t)b * bb, sh->kv_dtype, hd, valid, sum + (size_t)b * 2u * hd);
    }
    /* Quest bound of every non-active block for the group's queries; keep the K best (insertion into a
     * sorted list of at most K). */
    uint32_t n_best = 0;
    for (uint32_t b = 0; b < n_other; b++) {
      const float *mn = sum + (size_t)b * 2u * hd, *mx = mn + hd;
      double s = -INFINITY;
      for (uint32_t g = 0; g < G; g++) {
        const float *qr = q + ((size_t)l * sh->n_q_heads + (size_t)h * G + g) * hd;
        double acc = 0;
        for (uint32_t d = 0; d < hd; d++) {
          double x = (double)qr[d] * mn[d], y = (double)qr[d] * mx[d];
          acc += x > y ? x : y;
        }
        s = acc > s ? acc : s;
      }
      score[b] = s;
      if (K == 0) continue;
      if (n_best == K && !ranks_before(s, b, score[best[K - 1u]], best[K - 1u])) continue;
      uint32_t i = n_best < K ? n_best++ : K - 1u;
      while (i > 0 && ranks_before(s, b, score[best[i - 1u]], best[i - 1u])) {
        best[i] = best[i - 1u];
        i--;
      }
      best[i] = b;
    }
    /* Ascending, then the active block. */
    for (uint32_t i = 1; i < n_best; i++)
      for (uint32_t j = i; j > 0 && best[j - 1u] > best[j]; j--) {
        uint32_t t = best[j];
        best[j] = best[j - 1u];
        best[j - 1u] = t;
      }
    best[n_best++] = nb - 1u;
    uint32_t o = out->initial_offsets[u];
    for (uint32_t i = 0; i < n_best; i++) {
      out->initial_blocks[o + i] = best[i];
      memcpy(out->initial_kv + (uint64_t)(o + i) * bb, head + (uint64_t)best[i] * bb, bb);
    }
    out->initial_offsets[u + 1u] = o + n_best;
  }
  okv_free(&a, score);
  okv_free(&a, best);
  out->shape = *sh;
  out->n_tokens = kv->n_tokens;
  out->n_blocks = nb;
  out->budget_blocks = budget_blocks;
  out->block_bytes = bb;
  out->summary_bytes = (uint64_t)LH * nb * 2u * hd * okv_dtype_size(sh->kv_dtype); /* on the wire: KV dtype */
  out->initial_bytes = (uint64_t)out->initial_offsets[LH] * bb;
  out->admitted_bytes = out->summary_bytes + out->initial_bytes;
  out->full_kv_bytes = (uint64_t)LH * nb * bb;
  return OKV_OK;
}

void okv_admission_prefill(const okv_admission_t *a, okv_kv_source_t source, okv_remote_prefill_t *out) {
  memset(out, 0, sizeof *out);
  out->n_tokens = a->n_tokens;
  out->summaries = a->summaries;
  out->initial_offsets = a->initial_offsets;
  out->initial_blocks = a->initial_blocks;
  out->initial_kv = a->initial_kv;
  out->source = source;
}

/* ---- in-memory source ---- */

okv_status_t okv_kv_blocks_read(void *user, uint32_t n, const uint64_t *block_index, void *const *dst) {
  okv_kv_blocks_source_t *s = user;
  if (s == NULL || s->kv == NULL) return INVALID("okv_kv_blocks_read: no store");
  if (n > 0 && (block_index == NULL || dst == NULL)) return INVALID("okv_kv_blocks_read: NULL arrays with n = %u", n);
  const okv_kv_blocks_t *kv = s->kv;
  uint64_t total = (uint64_t)kv->shape.n_layers * kv->shape.n_kv_heads * kv->n_blocks;
  for (uint32_t i = 0; i < n; i++)
    if (block_index[i] >= total)
      return INVALID("okv_kv_blocks_read: block_index[%u] = %llu is past the store's %llu blocks", i,
                     (unsigned long long)block_index[i], (unsigned long long)total);
  for (uint32_t i = 0; i < n; i++) memcpy(dst[i], kv->data + block_index[i] * kv->block_bytes, kv->block_bytes);
  s->calls++;
  s->blocks += n;
  s->bytes += (uint64_t)n * kv->block_bytes;
  return OKV_OK;
}

okv_kv_source_t okv_kv_blocks_source(okv_kv_blocks_source_t *state, const okv_kv_blocks_t *kv, const char *name) {
  memset(state, 0, sizeof *state);
  state->kv = kv;
  okv_kv_source_t src = {state, okv_kv_blocks_read, name};
  return src;
}

/* ---- wire format ---- */

#define ADM_MAGIC      "OKVADM02"
#define ADM_HEADER     (8u + 8u * 4u)
#define ADM_MAX_BLOCKS (1u << 20)       /* blocks per KV head: 16M tokens */
#define ADM_MAX_HEADS  (65536u * 4096u) /* L * H */
#define ADM_MAX_BYTES  (1ull << 40)

static void put32(uint8_t *p, uint32_t x) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(x >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Sizes of the four arrays of an admission (in bytes; summaries of es bytes per element); false on overflow
 * past ADM_MAX_BYTES. */
static bool adm_sizes(uint32_t LH, uint32_t nb, uint32_t hd, uint64_t es, uint64_t n_initial, uint64_t bb,
                      uint64_t *out_total) {
  uint64_t sum = (uint64_t)LH * nb * 2u * hd * es; /* < 2^32 * 2^20 * 2^9 * 4: fits */
  if (sum > ADM_MAX_BYTES || n_initial > ADM_MAX_BYTES / (bb + 4u)) return false;
  uint64_t total = ADM_HEADER + sum + ((uint64_t)LH + 1u) * 4u + n_initial * 4u + n_initial * bb;
  if (total > ADM_MAX_BYTES) return false;
  *out_total = total;
  return true;
}

uint64_t okv_admission_pack_size(const okv_admission_t *a) {
  if (a == NULL || a->summaries == NULL || a->initial_offsets == NULL) return 0;
  uint32_t LH = a->shape.n_layers * a->shape.n_kv_heads;
  uint64_t total = 0;
  return adm_sizes(LH, a->n_blocks, a->shape.head_dim, okv_dtype_size(a->shape.kv_dtype), a->initial_offsets[LH],
                   a->block_bytes, &total)
             ? total
             : 0;
}

okv_status_t okv_admission_pack(const okv_admission_t *a, void *buf, uint64_t capacity) {
  uint64_t need = okv_admission_pack_size(a);
  if (need == 0 || buf == NULL) return INVALID("okv_admission_pack: no admission or no buffer");
  if (capacity < need)
    return INVALID("okv_admission_pack: the blob needs %llu bytes, the buffer holds %llu", (unsigned long long)need,
                   (unsigned long long)capacity);
  uint8_t *p = buf;
  uint32_t LH = a->shape.n_layers * a->shape.n_kv_heads, n_init = a->initial_offsets[LH];
  memcpy(p, ADM_MAGIC, 8);
  uint32_t hdr[8] = {a->shape.n_layers,           a->shape.n_q_heads, a->shape.n_kv_heads, a->shape.head_dim,
                     (uint32_t)a->shape.kv_dtype, a->n_tokens,        a->budget_blocks,    n_init};
  for (int i = 0; i < 8; i++) put32(p + 8 + 4 * i, hdr[i]);
  p += ADM_HEADER;
  uint64_t n_sum = (uint64_t)LH * a->n_blocks * 2u * a->shape.head_dim;
  /* Summaries in the KV dtype: they are min/max of stored keys, so narrowing the widened values back is
   * exact (the decode side widens them to the same f32 bits). */
  okv_dtype_t dt = a->shape.kv_dtype;
  for (uint64_t i = 0; i < n_sum; i++) {
    if (dt == OKV_DTYPE_F32) {
      uint32_t u;
      memcpy(&u, &a->summaries[i], 4);
      put32(p + 4 * i, u);
    } else {
      uint16_t u = dt == OKV_DTYPE_F16 ? okv_f32_to_f16(a->summaries[i]) : okv_f32_to_bf16(a->summaries[i]);
      p[2 * i] = (uint8_t)u;
      p[2 * i + 1] = (uint8_t)(u >> 8);
    }
  }
  p += okv_dtype_size(dt) * n_sum;
  for (uint32_t i = 0; i <= LH; i++) put32(p + 4 * (uint64_t)i, a->initial_offsets[i]);
  p += 4 * ((uint64_t)LH + 1u);
  for (uint32_t i = 0; i < n_init; i++) put32(p + 4 * (uint64_t)i, a->initial_blocks[i]);
  p += 4 * (uint64_t)n_init;
  memcpy(p, a->initial_kv, (size_t)n_init * a->block_bytes); /* KV bytes as stored (little-endian hosts) */
  return OKV_OK;
}

okv_status_t okv_admission_unpack(const void *blob, uint64_t n_bytes, const okv_allocator_t *allocator,
                                  okv_admission_t *out) {
  static const char fn[] = "okv_admission_unpack";
  if (out == NULL) return INVALID("%s: out is NULL", fn);
  memset(out, 0, sizeof *out);
  if (blob == NULL) return INVALID("%s: blob is NULL", fn);
  const uint8_t *p = blob;
  if (n_bytes < ADM_HEADER)
    return INVALID("%s: %llu bytes, shorter than the %u-byte header", fn, (unsigned long long)n_bytes, ADM_HEADER);
  if (memcmp(p, ADM_MAGIC, 8) != 0) return INVALID("%s: not an admission (bad magic)", fn);
  uint32_t h[8];
  for (int i = 0; i < 8; i++) h[i] = get32(p + 8 + 4 * i);
  okv_kv_shape_t sh = {h[0], h[1], h[2], h[3], (okv_dtype_t)h[4]};
  if (h[4] >= OKV_DTYPE_COUNT) return INVALID("%s: kv_dtype %u is not a dtype", fn, h[4]);
  OKV_RETURN_IF_ERROR(check_shape(&sh, fn));
  if (sh.n_layers > 65536 || sh.n_kv_heads > 4096)
    return INVALID("%s: %u layers x %u KV heads is too many", fn, sh.n_layers, sh.n_kv_heads);
  uint32_t n_tokens = h[5], budget = h[6], n_init = h[7];
  if (n_tokens == 0 || n_tokens > ADM_MAX_BLOCKS * OKV_BLOCK_TOKENS)
    return INVALID("%s: n_tokens = %u must be in 1..%u", fn, n_tokens, ADM_MAX_BLOCKS * OKV_BLOCK_TOKENS);
  if (budget == 0) return INVALID("%s: budget_blocks is 0", fn);
  uint32_t LH = sh.n_layers * sh.n_kv_heads, nb = (n_tokens + OKV_BLOCK_TOKENS - 1u) / OKV_BLOCK_TOKENS;
  uint64_t bb = okv_block_bytes(sh.kv_dtype, sh.head_dim), total = 0, es = okv_dtype_size(sh.kv_dtype);
  if (!adm_sizes(LH, nb, sh.head_dim, es, n_init, bb, &total) || total != n_bytes)
    return INVALID("%s: %llu bytes, the header's shape and %u initial blocks need %llu", fn,
                   (unsigned long long)n_bytes, n_init, (unsigned long long)total);
  const uint8_t *sum = p + ADM_HEADER;
  uint64_t n_sum = (uint64_t)LH * nb * 2u * sh.head_dim;
  const uint8_t *offs = sum + es * n_sum, *blks = offs + 4 * ((uint64_t)LH + 1u), *kvb = blks + 4 * (uint64_t)n_init;
  uint32_t per_head_max = budget < nb - 1u ? budget + 1u : nb;
  if (get32(offs) != 0) return INVALID("%s: initial_offsets[0] = %u must be 0", fn, get32(offs));
  for (uint32_t u = 0; u < LH; u++) {
    uint32_t lo = get32(offs + 4 * (uint64_t)u), hi = get32(offs + 4 * ((uint64_t)u + 1u));
    if (hi < lo || hi - lo > per_head_max || hi > n_init)
      return INVALID("%s: initial_offsets[%u..%u] = %u..%u: out of order, past %u blocks or over %u per head", fn, u,
                     u + 1u, lo, hi, n_init, per_head_max);
  }
  if (get32(offs + 4 * (uint64_t)LH) != n_init)
    return INVALID("%s: initial_offsets ends at %u, the header says %u initial blocks", fn,
                   get32(offs + 4 * (uint64_t)LH), n_init);
  okv_allocator_t a = allocator ? *allocator : okv_allocator_system();
  out->allocator = a;
  out->summaries = okv_malloc(&a, n_sum ? n_sum * 4u : 4u);
  out->initial_offsets = okv_malloc(&a, ((size_t)LH + 1u) * 4u);
  out->initial_blocks = okv_malloc(&a, n_init ? (size_t)n_init * 4u : 4u);
  out->initial_kv = okv_malloc(&a, n_init ? (size_t)n_init * bb : 4u);
  if (!out->summaries || !out->initial_offsets || !out->initial_blocks || !out->initial_kv) {
    okv_admission_free(out);
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "%s: %llu bytes", fn, (unsigned long long)n_bytes);
  }
  for (uint64_t i = 0; i < n_sum; i++) {
    if (es == 4) {
      uint32_t u = get32(sum + 4 * i);
      memcpy(&out->summaries[i], &u, 4);
    } else {
      uint16_t u = (uint16_t)(sum[2 * i] | (sum[2 * i + 1] << 8));
      out->summaries[i] = sh.kv_dtype == OKV_DTYPE_F16 ? okv_f16_to_f32(u) : okv_bf16_to_f32(u);
    }
  }
  for (uint32_t i = 0; i <= LH; i++) out->initial_offsets[i] = get32(offs + 4 * (uint64_t)i);
  for (uint32_t i = 0; i < n_init; i++) out->initial_blocks[i] = get32(blks + 4 * (uint64_t)i);
  memcpy(out->initial_kv, kvb, (size_t)n_init * bb);
  out->shape = sh;
  out->n_tokens = n_tokens;
  out->n_blocks = nb;
  out->budget_blocks = budget;
  out->block_bytes = bb;
  out->summary_bytes = es * n_sum;
  out->initial_bytes = (uint64_t)n_init * bb;
  out->admitted_bytes = out->summary_bytes + out->initial_bytes;
  out->full_kv_bytes = (uint64_t)LH * nb * bb;
  return OKV_OK;
}
