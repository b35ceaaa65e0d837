/* CPU kernels: sparse paged decode attention, block summaries, Quest scoring
 * and top-K on raw host pointers (semantics: include/oasiskv/kernels.h, layout
 * and design: docs/kernels.md).
 *
 * Parallelism: OpenMP over (sequence, KV head) units; when there are fewer
 * units than threads, a unit's working set is split into ranges whose partial
 * softmax states are merged with log-sum-exp. Vectorisation: GCC vector
 * extensions over the 16 tokens of a block (keys are stored transposed,
 * Kt[head_dim][16], so a lane is a token and no horizontal sum is needed per
 * token), compiled for AVX-512, AVX2+FMA and the baseline, picked at run time.
 *
 * Memory: no heap allocation; per-thread scratch lives on the stack (at most
 * ~100 KiB per thread), the split-merge scratch on the caller's stack
 * (<= 64 KiB). */
#include "cpu_kernels.h"
#include "okv_select_rule.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include <immintrin.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* OpenMP pragmas that vanish (without -Wunknown-pragmas noise) when the build
 * has no OpenMP. */
#ifdef _OPENMP
#define OKV_OMP(x) _Pragma(#x)
#else
#define OKV_OMP(x)
#endif

/* Floating-point contraction (a * b + c -> fma) is off in ISO C mode; the
 * kernels want FMAs where the target has them. */
#pragma GCC optimize("fp-contract=fast")
/* The vector helpers are always inlined, so the vector-argument ABI note of
 * GCC (-Wpsabi) does not apply. */
#pragma GCC diagnostic ignored "-Wpsabi"

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
typedef uint32_t v16u32 __attribute__((vector_size(64)));
typedef uint16_t v16u16 __attribute__((vector_size(32)));

/* Broadcast. Written as x - 0 (an exact identity, folded away by the
 * compiler), not 0 + x, which is not x for x = -0 and costs a scalar add. */
#define okv_v16f_splat(x) ((float)(x) - (v16f){0})
#define okv_lane_index()  ((v16i){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})

#define OKV_PASS_ROWS            16u    /* query rows (t, g) of one unit processed per pass over its blocks */
#define OKV_SPLIT_SCRATCH_FLOATS 16384u /* 64 KiB of partial states for split working sets */
#define OKV_LOG2E                1.4426950408889634
#ifndef OKV_PF_QUADS
#define OKV_PF_QUADS 1u /* software prefetch distance in quads of blocks */
#endif
#ifndef OKV_PF_LOC
#define OKV_PF_LOC 2 /* software prefetch locality (prefetcht1) */
#endif

typedef struct okv_cpu_attn_ctx_t {
  const okv_attention_desc_t *d;
  const uint8_t *kv_pool;
  size_t slot_bytes;
  uint32_t hdp; /* head_dim rounded up to 16 */
} okv_cpu_attn_ctx_t;

/* ---- per-ISA instantiations ---- */

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c,bmi,bmi2,prefer-vector-width=512")
#define OKV_ISA(name) okv_##name##_avx512
#define OKV_ISA_LEVEL 2
#include "cpu_kernels_isa.h"
#undef OKV_ISA
#undef OKV_ISA_LEVEL
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi,bmi2")
#define OKV_ISA(name) okv_##name##_avx2
#define OKV_ISA_LEVEL 1
#include "cpu_kernels_isa.h"
#undef OKV_ISA
#undef OKV_ISA_LEVEL
#pragma GCC pop_options

#define OKV_ISA(name) okv_##name##_base
#define OKV_ISA_LEVEL 0
#include "cpu_kernels_isa.h"
#undef OKV_ISA
#undef OKV_ISA_LEVEL

/* ---- ISA selection ---- */

static atomic_int cpu_isa_cap = ATOMIC_VAR_INIT(OKV_CPU_ISA_AVX512);

okv_cpu_isa_t okv_cpu_isa_detected(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2"))
    return OKV_CPU_ISA_AVX512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2"))
    return OKV_CPU_ISA_AVX2;
  return OKV_CPU_ISA_BASELINE;
}

okv_cpu_isa_t okv_cpu_isa_limit(okv_cpu_isa_t max_isa) {
  if ((int)max_isa < 0) max_isa = OKV_CPU_ISA_BASELINE;
  if ((int)max_isa > OKV_CPU_ISA_AVX512) max_isa = OKV_CPU_ISA_AVX512;
  atomic_store(&cpu_isa_cap, (int)max_isa);
  return okv_cpu_isa_active();
}

okv_cpu_isa_t okv_cpu_isa_active(void) {
  okv_cpu_isa_t det = okv_cpu_isa_detected();
  int cap = atomic_load(&cpu_isa_cap);
  return (int)det < cap ? det : (okv_cpu_isa_t)cap;
}

const char *okv_cpu_isa_name(okv_cpu_isa_t isa) {
  switch (isa) {
    case OKV_CPU_ISA_BASELINE: return "baseline";
    case OKV_CPU_ISA_AVX2: return "avx2+fma";
    case OKV_CPU_ISA_AVX512: return "avx512";
    default: return "unknown";
  }
}

static int cpu_threads(int n_threads) {
#ifdef _OPENMP
  return n_threads > 0 ? n_threads : omp_get_max_threads();
#else
  (void)n_threads;
  return 1;
#endif
}

#ifndef _OPENMP
#define okv_unused_threads(nt) (void)(nt)
#else
#define okv_unused_threads(nt) ((void)0)
#endif

/* ---- element access (scalar paths) ---- */

static inline float elem(const uint8_t *p, okv_dtype_t dt, size_t i) {
  switch (dt) {
    case OKV_DTYPE_F16: {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      return okv_f16_to_f32(h);
    }
    case OKV_DTYPE_BF16: {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      return okv_bf16_to_f32(h);
    }
    default: {
      float f;
      memcpy(&f, p + 4 * i, 4);
      return f;
    }
  }
}

static inline float round_dtype(float x, okv_dtype_t dt) {
  switch (dt) {
    case OKV_DTYPE_F16: return okv_f16_to_f32(okv_f32_to_f16(x));
    case OKV_DTYPE_BF16: return okv_bf16_to_f32(okv_f32_to_bf16(x));
    default: return x;
  }
}

/* ---- attention ---- */

typedef void (*okv_pass_fn)(const okv_cpu_attn_ctx_t *, uint32_t, uint32_t, uint32_t, uint32_t, const float *, float *,
                            float *, float *);
typedef void (*okv_mass_fn)(const okv_cpu_attn_ctx_t *, uint32_t, uint32_t, uint32_t, const float *, const float *,
                            const float *, float *);

/* Query rows r0..r0+nr of unit (s, h), scaled into the log2 domain. Row r is
 * query token t = r / G, group member g = r % G. */
static void load_rows(const okv_attention_desc_t *d, const float *q, uint32_t s, uint32_t h, uint32_t r0, uint32_t nr,
                      float *qs) {
  const uint32_t G = d->group_size, hd = d->head_dim, nq = d->n_kv_heads * G;
  const float scale = (float)(OKV_LOG2E / sqrt((double)hd));
  for (uint32_t i = 0; i < nr; i++) {
    uint32_t r = r0 + i, t = r / G, g = r % G;
    const float *src = q + (((size_t)s * d->n_query_tokens + t) * nq + (size_t)h * G + g) * hd;
    for (uint32_t k = 0; k < hd; k++) qs[(size_t)i * hd + k] = src[k] * scale;
  }
  /* zero padding rows: the mass pass computes logits of up to 8 rows at once */
  uint32_t pad = ((nr + 7u) & ~7u) - nr;
  memset(qs + (size_t)nr * hd, 0, (size_t)pad * hd * sizeof(float));
}

/* Adds the in-flight tokens visible to each row (scalar; at most 4 tokens). */
static void inflight_rows(const okv_attention_desc_t *d, const float *inflight, uint32_t s, uint32_t h, uint32_t r0,
                          uint32_t nr, uint32_t hdp, const float *qs, float *m, float *l, float *acc) {
  const uint32_t T = d->n_query_tokens, ni = d->n_inflight, hd = d->head_dim, G = d->group_size;
  for (uint32_t i = 0; i < ni; i++) {
    uint32_t owner = T - ni + i;
    const float *k = inflight + (((size_t)s * ni + i) * 2u * d->n_kv_heads + h) * hd;
    const float *v = k + (size_t)d->n_kv_heads * hd;
    for (uint32_t ri = 0; ri < nr; ri++) {
      if ((r0 + ri) / G < owner) continue;
      const float *qr = qs + (size_t)ri * hd;
      /* 16 partial sums (a scalar chain of hd dependent adds was ~5% of a
       * cache-resident launch) */
      v16f sv = okv_v16f_splat(0.0f);
      uint32_t e = 0;
      for (; e + 16u <= hd; e += 16u) {
        v16f x, y;
        memcpy(&x, qr + e, sizeof x);
        memcpy(&y, k + e, sizeof y);
        sv += x * y;
      }
      float logit = 0.0f;
      for (int j = 0; j < 16; j++) logit += sv[j];
      for (; e < hd; e++) logit += qr[e] * k[e];
      float mn = logit > m[ri] ? logit : m[ri];
      float a = exp2f(m[ri] - mn), pe = exp2f(logit - mn);
      float *ar = acc + (size_t)ri * hdp;
      e = 0;
      for (; e + 16u <= hd; e += 16u) {
        v16f x, y;
        memcpy(&x, ar + e, sizeof x);
        memcpy(&y, v + e, sizeof y);
        x = x * a + pe * y;
        memcpy(ar + e, &x, sizeof x);
      }
      for (; e < hd; e++) ar[e] = ar[e] * a + pe * v[e];
      l[ri] = l[ri] * a + pe;
      m[ri] = mn;
    }
  }
}

static void store_rows(const okv_attention_desc_t *d, float *out, uint32_t s, uint32_t h, uint32_t r0, uint32_t nr,
                       uint32_t hdp, const float *l, const float *acc) {
  const uint32_t G = d->group_size, hd = d->head_dim, nq = d->n_kv_heads * G;
  for (uint32_t i = 0; i < nr; i++) {
    uint32_t r = r0 + i, t = r / G, g = r % G;
    float *dst = out + (((size_t)s * d->n_query_tokens + t) * nq + (size_t)h * G + g) * hd;
    if (l[i] > 0.0f) {
      float inv = 1.0f / l[i];
      for (uint32_t k = 0; k < hd; k++) dst[k] = acc[(size_t)i * hdp + k] * inv;
    } else {
      memset(dst, 0, (size_t)hd * sizeof(float));
    }
  }
}

size_t okv_cpu_attention_tables_scratch_bytes(const okv_attention_desc_t *d) {
  size_t U = (size_t)d->n_seqs * d->n_kv_heads, R = d->table_slots;
  return (U + 1u) * 4u + U * R * 4u + U * R;
}

void okv_cpu_attention_tables_ws(const okv_attention_desc_t *d, const void *tables, const uint32_t *slot_map,
                                 void *scratch, okv_attention_desc_t *out) {
  const uint32_t H = d->n_kv_heads, R = d->table_slots;
  const size_t U = (size_t)d->n_seqs * H;
  const uint64_t tb = okv_slot_table_bytes(R, d->table_words);
  uint32_t *off = scratch, *slots = off + U + 1u;
  uint8_t *valid = (uint8_t *)(slots + U * R);
  uint32_t k = 0;
  for (uint32_t s = 0; s < d->n_seqs; s++)
    for (uint32_t h = 0; h < H; h++) {
      off[(size_t)s * H + h] = k;
      const uint64_t i = (uint64_t)d->table_index[s] * H + h;
      const uint32_t *t = (const uint32_t *)(const void *)((const char *)tables + i * tb), *ps = slot_map + i * R;
      for (uint32_t j = 0; j < R; j++) {
        uint32_t slot = 0, n = okv_table_ws_entry(t, R, ps, j, d->seq_tokens[s], d->n_slots, &slot);
        if (n == 0) continue;
        slots[k] = slot;
        valid[k] = (uint8_t)n;
        k++;
      }
    }
  off[U] = k;
  *out = *d;
  out->ws_offsets = off;
  out->ws_slots = slots;
  out->ws_valid = valid;
  out->tables = NULL;
  out->slot_map = NULL;
}

void okv_cpu_attention(const okv_attention_desc_t *d, const void *kv_pool, const float *q, const float *inflight_kv,
                       float *out, float *block_mass, int n_threads) {
  const uint32_t U = d->n_seqs * d->n_kv_heads, T = d->n_query_tokens, R = T * d->group_size;
  const uint32_t hd = d->head_dim, hdp = (hd + 15u) & ~15u;
  okv_cpu_attn_ctx_t cx = {d, (const uint8_t *)kv_pool, (size_t)okv_block_bytes(d->kv_dtype, hd), hdp};
  okv_pass_fn pass = okv_pass_blocks_base;
  okv_mass_fn mass_fn = okv_mass_blocks_base;
  switch (okv_cpu_isa_active()) {
    case OKV_CPU_ISA_AVX512:
      pass = okv_pass_blocks_avx512;
      mass_fn = okv_mass_blocks_avx512;
      break;
    case OKV_CPU_ISA_AVX2:
      pass = okv_pass_blocks_avx2;
      mass_fn = okv_mass_blocks_avx2;
      break;
    default: break;
  }
  const int nt = cpu_threads(n_threads);

  /* Split long working sets when there are too few units for the threads. */
  uint32_t S = 1;
  const size_t per_item = (size_t)R * (hdp + 2u);
  if (nt > 1 && U < 2u * (uint32_t)nt) {
    uint32_t max_nb = 0;
    for (uint32_t u = 0; u < U; u++) {
      uint32_t nb = d->ws_offsets[u + 1] - d->ws_offsets[u];
      max_nb = nb > max_nb ? nb : max_nb;
    }
    S = (2u * (uint32_t)nt + U - 1u) / U;
    if (S > max_nb / 4u) S = max_nb / 4u;
    size_t cap = OKV_SPLIT_SCRATCH_FLOATS / ((size_t)U * per_item);
    if (S > cap) S = (uint32_t)cap;
    if (S < 2) S = 1;
  }
  float scratch[S > 1 ? (size_t)U * S * per_item : 1];

  const long n_items = (long)U * S;
  OKV_OMP(omp parallel num_threads(nt) if (nt > 1)) {
OKV_OMP(omp for schedule(dynamic, 1))
for (long it = 0; it < n_items; it++) {
  uint32_t u = (uint32_t)(it / S), sp = (uint32_t)(it % S);
  uint32_t s = u / d->n_kv_heads, h = u % d->n_kv_heads;
  uint32_t nb = d->ws_offsets[u + 1] - d->ws_offsets[u];
  uint32_t b0 = (uint32_t)((uint64_t)nb * sp / S), b1 = (uint32_t)((uint64_t)nb * (sp + 1) / S);
  _Alignas(64) float qs[OKV_PASS_ROWS * 256];
  _Alignas(64) float acc[OKV_PASS_ROWS * 256];
  float m[OKV_PASS_ROWS], l[OKV_PASS_ROWS];
  if (S == 1 && block_mass != NULL)
    memset(block_mass + (size_t)d->ws_offsets[u] * T, 0, (size_t)nb * T * sizeof(float));
  for (uint32_t r0 = 0; r0 < R; r0 += OKV_PASS_ROWS) {
    uint32_t nr = R - r0 < OKV_PASS_ROWS ? R - r0 : OKV_PASS_ROWS;
    load_rows(d, q, s, h, r0, nr, qs);
    for (uint32_t i = 0; i < nr; i++) m[i] = -INFINITY, l[i] = 0.0f;
    memset(acc, 0, (size_t)nr * hdp * sizeof(float));
    if (b1 > b0) pass(&cx, u, b0, b1, nr, qs, m, l, acc);
    if (sp == 0 && d->n_inflight > 0) inflight_rows(d, inflight_kv, s, h, r0, nr, hdp, qs, m, l, acc);
    if (S == 1) {
      store_rows(d, out, s, h, r0, nr, hdp, l, acc);
      if (block_mass != NULL && nb > 0) mass_fn(&cx, u, r0, nr, qs, m, l, block_mass);
    } else {
      float *st = scratch + (size_t)it * per_item;
      for (uint32_t i = 0; i < nr; i++) {
        float *row = st + (size_t)(r0 + i) * (hdp + 2u);
        row[0] = m[i];
        row[1] = l[i];
        memcpy(row + 2, acc + (size_t)i * hdp, (size_t)hdp * sizeof(float));
      }
    }
  }
}
if (S > 1) {
  /* Log-sum-exp merge of the partial states of each unit. */
OKV_OMP(omp for schedule(dynamic, 1))
for (long ul = 0; ul < (long)U; ul++) {
  uint32_t u = (uint32_t)ul, s = u / d->n_kv_heads, h = u % d->n_kv_heads;
  uint32_t nb = d->ws_offsets[u + 1] - d->ws_offsets[u];
  _Alignas(64) float qs[OKV_PASS_ROWS * 256];
  _Alignas(64) float acc[OKV_PASS_ROWS * 256];
  float m[OKV_PASS_ROWS], l[OKV_PASS_ROWS];
  if (block_mass != NULL) memset(block_mass + (size_t)d->ws_offsets[u] * T, 0, (size_t)nb * T * sizeof(float));
  for (uint32_t r0 = 0; r0 < R; r0 += OKV_PASS_ROWS) {
    uint32_t nr = R - r0 < OKV_PASS_ROWS ? R - r0 : OKV_PASS_ROWS;
    for (uint32_t i = 0; i < nr; i++) {
      float mx = -INFINITY, sum = 0.0f;
      for (uint32_t sp = 0; sp < S; sp++) {
        const float *row = scratch + ((size_t)u * S + sp) * per_item + (size_t)(r0 + i) * (hdp + 2u);
        mx = row[0] > mx ? row[0] : mx;
      }
      float *ar = acc + (size_t)i * hdp;
      memset(ar, 0, (size_t)hdp * sizeof(float));
      for (uint32_t sp = 0; sp < S; sp++) {
        const float *row = scratch + ((size_t)u * S + sp) * per_item + (size_t)(r0 + i) * (hdp + 2u);
        if (!(row[1] > 0.0f)) continue;
        float w = exp2f(row[0] - mx);
        sum += row[1] * w;
        for (uint32_t k = 0; k < hdp; k++) ar[k] += row[2 + k] * w;
      }
      m[i] = mx;
      l[i] = sum;
    }
    store_rows(d, out, s, h, r0, nr, hdp, l, acc);
    if (block_mass != NULL && nb > 0) {
      load_rows(d, q, s, h, r0, nr, qs);
      mass_fn(&cx, u, r0, nr, qs, m, l, block_mass);
    }
  }
}
}
  }
}

/* ---- summaries ---- */

/* Stores bound x at element i of p in dtype dt: rounded up (toward +inf) when
 * `up`, else down (toward -inf); exact for f32. */
static inline void store_bound(uint8_t *p, okv_dtype_t dt, size_t i, float x, bool up) {
  uint16_t h;
  switch (dt) {
    case OKV_DTYPE_F16: h = up ? okv_f32_to_f16_up(x) : okv_f32_to_f16_down(x); break;
    case OKV_DTYPE_BF16: h = up ? okv_f32_to_bf16_up(x) : okv_f32_to_bf16_down(x); break;
    default: memcpy(p + 4 * i, &x, 4); return;
  }
  memcpy(p + 2 * i, &h, 2);
}

void okv_cpu_summarize_blocks(const okv_summary_desc_t *d, const void *kv, void *summaries, int n_threads) {
  const uint32_t hd = d->head_dim;
  const okv_dtype_t sdt = d->summary_dtype;
  const size_t bb = (size_t)okv_block_bytes(d->kv_dtype, hd), sb = (size_t)okv_summary_bytes_ex(sdt, hd);
  const int nt = cpu_threads(n_threads);
  const long n = (long)d->n_blocks;
  okv_unused_threads(nt);
OKV_OMP(omp parallel for num_threads(nt) schedule(static) if (nt > 1 && n >= 64))
for (long i = 0; i < n; i++) {
  const uint8_t *kt = (const uint8_t *)kv + (size_t)d->block_index[i] * bb;
  uint8_t *sm = (uint8_t *)summaries + (size_t)d->summary_index[i] * sb;
  uint32_t valid = d->valid[i];
  for (uint32_t e = 0; e < hd; e++) {
    float lo = INFINITY, hi = -INFINITY;
    for (uint32_t j = 0; j < valid; j++) {
      float x = elem(kt, d->kv_dtype, (size_t)e * OKV_BLOCK_TOKENS + j);
      lo = x < lo ? x : lo;
      hi = x > hi ? x : hi;
    }
    store_bound(sm, sdt, e, lo, false);
    store_bound(sm, sdt, (size_t)hd + e, hi, true);
  }
}
}

void okv_cpu_summary_append_ex(const okv_summary_append_desc_t *d, void *summaries) {
  const uint32_t hd = d->head_dim;
  const okv_dtype_t sdt = d->summary_dtype;
  const size_t sb = (size_t)okv_summary_bytes_ex(sdt, hd);
  for (uint32_t i = 0; i < d->n; i++) {
    uint8_t *sm = (uint8_t *)summaries + (size_t)d->summary_index[i] * sb;
    const float *k = d->keys + (size_t)i * hd;
    for (uint32_t e = 0; e < hd; e++) {
      float x = round_dtype(k[e], d->kv_dtype), lo = x, hi = x;
      if (!d->first[i]) {
        /* the stored bounds are values of sdt: min/max with them then narrowing is exact on their side */
        float mn = elem(sm, sdt, e), mx = elem(sm, sdt, (size_t)hd + e);
        lo = mn < x ? mn : x;
        hi = mx > x ? mx : x;
      }
      store_bound(sm, sdt, e, lo, false);
      store_bound(sm, sdt, (size_t)hd + e, hi, true);
    }
  }
}

void okv_cpu_summary_append(float *summaries, uint32_t head_dim, okv_dtype_t kv_dtype, uint32_t n,
                            const uint64_t *summary_index, const float *keys, const uint8_t *first) {
  const okv_summary_append_desc_t d = {.head_dim = head_dim,
                                       .kv_dtype = kv_dtype,
                                       .n = n,
                                       .summary_index = summary_index,
                                       .keys = keys,
                                       .first = first,
                                       .summary_dtype = OKV_DTYPE_F32};
  okv_cpu_summary_append_ex(&d, summaries);
}

/* One element of a slot in the KV dtype: the conversions of include/oasiskv/kernels.h (nearest even). */
static inline void put_kv_elem(uint8_t *p, okv_dtype_t dt, size_t i, float x) {
  switch (dt) {
    case OKV_DTYPE_F32: memcpy(p + i * 4u, &x, 4u); break;
    case OKV_DTYPE_F16: {
      uint16_t h = okv_f32_to_f16(x);
      memcpy(p + i * 2u, &h, 2u);
      break;
    }
    default: {
      uint16_t h = okv_f32_to_bf16(x);
      memcpy(p + i * 2u, &h, 2u);
      break;
    }
  }
}

void okv_cpu_kv_write(const okv_kv_write_desc_t *d, void *kv) {
  const uint32_t hd = d->head_dim;
  const uint64_t bb = okv_block_bytes(d->kv_dtype, hd);
  for (uint32_t i = 0; i < d->n; i++) {
    uint8_t *slot = (uint8_t *)kv + d->slot_index[i] * bb;
    const size_t t = d->pos[i];
    const float *k = d->keys + (size_t)i * hd, *v = d->values + (size_t)i * hd;
    for (uint32_t e = 0; e < hd; e++) put_kv_elem(slot, d->kv_dtype, (size_t)e * OKV_BLOCK_TOKENS + t, k[e]);
    for (uint32_t e = 0; e < hd; e++) put_kv_elem(slot, d->kv_dtype, (size_t)OKV_BLOCK_TOKENS * hd + t * hd + e, v[e]);
  }
}

void okv_cpu_summary_reduce(const okv_summary_reduce_desc_t *d, const void *src, void *dst, int n_threads) {
  const uint32_t hd = d->head_dim;
  const okv_dtype_t sdt = d->src_dtype, ddt = d->dst_dtype;
  const size_t ssb = (size_t)okv_summary_bytes_ex(sdt, hd), dsb = (size_t)okv_summary_bytes_ex(ddt, hd);
  const int nt = cpu_threads(n_threads);
  const long n = (long)d->n;
  okv_unused_threads(nt);
OKV_OMP(omp parallel for num_threads(nt) schedule(static) if (nt > 1 && n >= 16))
for (long i = 0; i < n; i++) {
  float lo[256], hi[256];
  for (uint32_t e = 0; e < hd; e++) lo[e] = INFINITY, hi[e] = -INFINITY;
  const uint8_t *sm = (const uint8_t *)src + (size_t)d->src_first[i] * ssb;
  for (uint32_t j = 0; j < d->src_n[i]; j++, sm += ssb)
    for (uint32_t e = 0; e < hd; e++) {
      float mn = elem(sm, sdt, e), mx = elem(sm, sdt, (size_t)hd + e);
      lo[e] = mn < lo[e] ? mn : lo[e];
      hi[e] = mx > hi[e] ? mx : hi[e];
    }
  uint8_t *dm = (uint8_t *)dst + (size_t)d->dst_index[i] * dsb;
  if (ddt == OKV_DTYPE_Q8) {
    okv_cpu_q8_encode(lo, hi, hd, dm);
    continue;
  }
  if (ddt == OKV_DTYPE_C4) {
    okv_cpu_c4_encode(lo, hi, hd, okv_cpu_c4_tile(dst, d->dst_index[i], hd), (uint32_t)(d->dst_index[i] % OKV_C4_TILE));
    continue;
  }
  for (uint32_t e = 0; e < hd; e++) {
    store_bound(dm, ddt, e, lo[e], false);
    store_bound(dm, ddt, (size_t)hd + e, hi[e], true);
  }
}
}

/* ---- 8-bit summaries (OKV_DTYPE_Q8; include/oasiskv/kernels.h) ---- */

void okv_cpu_q8_encode(const float *mn, const float *mx, uint32_t hd, uint8_t *out) {
  float lo = INFINITY, hi = -INFINITY;
  for (uint32_t e = 0; e < hd; e++) {
    lo = mn[e] < lo ? mn[e] : lo;
    hi = mx[e] > hi ? mx[e] : hi;
  }
  float step = 0.0f;
  uint8_t *amin = out + 8, *amax = out + 8 + hd;
  memset(amin, 0, 2u * (size_t)hd);
  if (!isfinite(lo) || !isfinite(hi) || !(hi - lo < INFINITY)) {
    step = -1.0f; /* unbounded: scores +infinity */
    lo = 0.0f;
  } else if (hi > lo) {
    step = (float)(((double)hi - (double)lo) / 255.0);
    while ((double)lo + 255.0 * (double)step < (double)hi) step = nextafterf(step, INFINITY);
    for (uint32_t e = 0; e < hd; e++) {
      double a = floor(((double)mn[e] - (double)lo) / (double)step);
      while (a > 0 && (double)lo + a * (double)step > (double)mn[e]) a -= 1;
      double c = ceil(((double)mx[e] - (double)lo) / (double)step);
      while (c < 255 && (double)lo + c * (double)step < (double)mx[e]) c += 1;
      amin[e] = (uint8_t)(a < 0 ? 0 : a > 255 ? 255 : a);
      amax[e] = (uint8_t)(c < 0 ? 0 : c > 255 ? 255 : c);
    }
  }
  memcpy(out, &lo, 4);
  memcpy(out + 4, &step, 4);
}

float okv_cpu_q8_query(const float *x, uint32_t hd, int8_t *codes, double *sum_x) {
  float m = 0.0f;
  double sx = 0.0;
  for (uint32_t e = 0; e < hd; e++) {
    float a = fabsf(x[e]);
    m = a > m || a != a ? a : m; /* a NaN element makes m NaN, so the row counts as not finite */
    sx += (double)x[e];
  }
  *sum_x = sx;
  memset(codes, 0, 2u * (size_t)hd);
  if (!isfinite(m)) return NAN; /* a non-finite element: the row scores +infinity */
  if (!(m > 0.0f)) return 0.0f; /* all zero: no code */
  float sig = m / 127.0f;
  while (127.0 * (double)sig < (double)m) sig = nextafterf(sig, INFINITY);
  for (uint32_t e = 0; e < hd; e++) {
    float c = ceilf(x[e] / sig);
    if ((double)c * (double)sig < (double)x[e]) c += 1.0f;
    c = c > 127.0f ? 127.0f : c < -127.0f ? -127.0f : c;
    if (x[e] < 0.0f)
      codes[e] = (int8_t)c; /* against the min codes */
    else
      codes[(size_t)hd + e] = (int8_t)c; /* against the max codes */
  }
  return sig;
}

/* ---- 4-bit centres (OKV_DTYPE_C4; include/oasiskv/kernels.h) ---- */

/* Both derived from okv_summary_bytes_ex (a block's share of a tile: its 12 header bytes and its codes). */
uint32_t okv_cpu_c4_packed_bytes(uint32_t hd) { return (uint32_t)okv_summary_bytes_ex(OKV_DTYPE_C4, hd) - 12u; }

size_t okv_cpu_c4_tile_bytes(uint32_t hd) { return (size_t)OKV_C4_TILE * okv_summary_bytes_ex(OKV_DTYPE_C4, hd); }

uint8_t *okv_cpu_c4_tile(void *base, uint64_t block, uint32_t hd) {
  return (uint8_t *)base + (size_t)(block / OKV_C4_TILE) * okv_cpu_c4_tile_bytes(hd);
}

void okv_cpu_c4_encode(const float *mn, const float *mx, uint32_t hd, uint8_t *tile, uint32_t lane) {
  double clo = INFINITY, chi = -INFINITY, wsum = 0.0;
  bool finite = true;
  for (uint32_t e = 0; e < hd; e++) {
    double c = 0.5 * (double)mn[e] + 0.5 * (double)mx[e];
    finite = finite && isfinite(mn[e]) && isfinite(mx[e]);
    clo = c < clo ? c : clo;
    chi = c > chi ? c : chi;
    wsum += 0.5 * ((double)mx[e] - (double)mn[e]);
  }
  const uint32_t P = okv_cpu_c4_packed_bytes(hd);
  uint8_t packed[132];
  memset(packed, 0, P);
  float lo = 0.0f, step = -1.0f, width = 0.0f; /* not finite: step < 0, scores +infinity */
  if (finite && hd > 0) {
    lo = (float)clo;
    width = (float)(wsum / (double)hd);
    step = chi > (double)lo ? (float)((chi - (double)lo) / 15.0) : 0.0f;
    for (uint32_t e = 0; step > 0.0f && e < hd; e++) {
      double c = 0.5 * (double)mn[e] + 0.5 * (double)mx[e];
      double a = nearbyint((c - (double)lo) / (double)step);
      uint8_t v = (uint8_t)(a < 0 ? 0 : a > 15 ? 15 : a);
      packed[e / 2u] |= (uint8_t)(e % 2u ? v << 4 : v);
    }
  }
  memcpy(tile + 4u * lane, &lo, 4);
  memcpy(tile + 4u * (OKV_C4_TILE + lane), &step, 4);
  memcpy(tile + 4u * (2u * OKV_C4_TILE + lane), &width, 4);
  for (uint32_t j = 0; j < P; j += 4) memcpy(tile + OKV_C4_CODES + (size_t)j * OKV_C4_TILE + 4u * lane, packed + j, 4);
}

float okv_cpu_c4_query(const float *x, uint32_t hd, int8_t *codes, float *sum_x, float *l1_x) {
  float m = 0.0f;
  double sx = 0.0, l1 = 0.0;
  /* max |x| sixteen at a time (a maximum does not depend on the order), a NaN element flagged: the row is then
   * not finite. The sums stay sequential in double (no branch in the loop). */
  v16f vm = {0};
  v16i nan = {0};
  uint32_t e1 = 0;
  for (; e1 + 16u <= hd; e1 += 16u) {
    v16f v;
    memcpy(&v, x + e1, sizeof v);
    const v16f a = (v16f)((v16i)v & ((v16i){0} + 0x7FFFFFFF));
    nan |= a != a;
    const v16i gt = a > vm;
    vm = (v16f)(((v16i)a & gt) | ((v16i)vm & ~gt));
  }
  for (uint32_t k = 0; k < 16u; k++) m = vm[k] > m ? vm[k] : m;
  for (uint32_t k = 0; k < 16u; k++) m = nan[k] ? NAN : m;
  for (uint32_t e = e1; e < hd; e++) {
    const float a = fabsf(x[e]);
    m = a > m || a != a ? a : m; /* a NaN element makes m NaN, so the row counts as not finite */
  }
  for (uint32_t e = 0; e < hd; e++) {
    sx += (double)x[e];
    l1 += (double)fabsf(x[e]);
  }
  *sum_x = (float)sx;
  *l1_x = (float)l1;
  memset(codes, 0, 2u * (size_t)okv_cpu_c4_packed_bytes(hd));
  /* A non-finite element, or sums past f32's range (elements near 3e38): the row scores +infinity, as it does
   * on the GPU, instead of an f32 estimate that overflows (inf - inf: NaN, never predicted). */
  if (!isfinite(m) || !isfinite(*l1_x)) return NAN;
  if (!(m > 0.0f)) return 0.0f; /* all zero: no code */
  const float sig = m / 127.0f;
  uint32_t e0 = 0;
  for (; e0 + 16u <= hd; e0 += 16u) { /* sixteen at a time, the same codes as the scalar rule below */
    v16f v;
    memcpy(&v, x + e0, sizeof v);
    v /= okv_v16f_splat(sig);
    /* |v| <= 127 (times 1 + 2^-23): adding and removing 1.5 * 2^23 rounds to nearest, ties to even, exactly as
     * nearbyintf in the default rounding mode, without a library call per element */
    v = (v + okv_v16f_splat(12582912.0f)) - okv_v16f_splat(12582912.0f);
    const v16f hi = okv_v16f_splat(127.0f), lo = okv_v16f_splat(-127.0f);
    v = (v16f)(((v16i)v & (v <= hi)) | ((v16i)hi & ~(v <= hi))); /* min(v, 127) */
    v = (v16f)(((v16i)v & (v >= lo)) | ((v16i)lo & ~(v >= lo))); /* max(v, -127) */
    const v16i c = __builtin_convertvector(v, v16i);
    for (uint32_t k = 0; k < 16u; k++) {
      const uint32_t e = e0 + k, j = e / 2u;
      codes[(j / 4u) * 8u + (e % 2u) * 4u + j % 4u] = (int8_t)c[k];
    }
  }
  for (uint32_t e = e0; e < hd; e++) {
    float c = nearbyintf(x[e] / sig);
    c = c > 127.0f ? 127.0f : c < -127.0f ? -127.0f : c;
    const uint32_t j = e / 2u; /* packed byte j: 4-byte group j / 4, byte j % 4 */
    codes[(j / 4u) * 8u + (e % 2u) * 4u + j % 4u] = (int8_t)c;
  }
  return sig;
}

/* ---- scoring ---- */

#define OKV_SCORE_CHUNK 256u /* blocks per work item */

typedef void (*okv_score_fn)(const uint8_t *, int, uint32_t, uint32_t, uint32_t, uint32_t, const float *, const float *,
                             float *);

/* Job j of a scoring call: a segment (seg_* arrays) or, with n_ranges > 0, a
 * range: its segment u, first summary, block count and first score element. */
typedef struct score_job_t {
  uint32_t u, n;
  uint64_t summary_first, score_first;
} score_job_t;

static inline score_job_t score_job(const okv_score_desc_t *d, uint32_t j) {
  if (d->n_ranges > 0)
    return (score_job_t){d->range_seg[j], d->range_n_blocks[j], d->range_summary_first[j], d->range_score_first[j]};
  return (score_job_t){j, d->seg_n_blocks[j], d->seg_summary_first[j], d->seg_score_first[j]};
}

/* Query rows r0..r0+nr of segment (s, h), split into positive and negative
 * parts scaled by 1/sqrt(head_dim), rows of hdp floats zero padded. */
static void score_load_rows(const okv_score_desc_t *d, const float *q, uint32_t s, uint32_t h, uint32_t r0, uint32_t nr,
                            uint32_t hdp, float scale, float *qp, float *qn) {
  const uint32_t G = d->group_size, hd = d->head_dim, nq = d->n_kv_heads * G;
  for (uint32_t i = 0; i < nr; i++) {
    uint32_t r = r0 + i, t = d->t_begin + r / G, g = r % G;
    const float *src = q + (((size_t)s * d->n_query_tokens + t) * nq + (size_t)h * G + g) * hd;
    float *p = qp + (size_t)i * hdp, *m = qn + (size_t)i * hdp;
    uint32_t e = 0;
    for (; e + 16u <= hd; e += 16u) { /* sixteen at a time: the same values as the scalar rule below */
      v16f x;
      memcpy(&x, src + e, sizeof x);
      x *= okv_v16f_splat(scale);
      const v16i xi = (v16i)x;
      const v16f zero = {0};
      const v16f pos = (v16f)(xi & (x > zero)), neg = (v16f)(xi & (x < zero)); /* +0 where not, NaN too */
      memcpy(p + e, &pos, sizeof pos);
      memcpy(m + e, &neg, sizeof neg);
    }
    for (; e < hdp; e++) {
      float x = e < hd ? src[e] * scale : 0.0f;
      p[e] = x > 0.0f ? x : 0.0f;
      m[e] = x < 0.0f ? x : 0.0f;
    }
  }
}

/* The most blocks of any job of a scoring call (sizes its work items). */
static uint32_t score_max_blocks(const okv_score_desc_t *d, uint32_t n_jobs) {
  uint32_t max_nb = 0;
  for (uint32_t j = 0; j < n_jobs; j++) {
    uint32_t nb = score_job(d, j).n;
    max_nb = nb > max_nb ? nb : max_nb;
  }
  return max_nb;
}

/* The bound of one row on one block, in the arithmetic of the vector path:
 * f32 lo * f32(sum_x) + (step * sigma) * f32(dot), fused. */
static inline float q8_bound(const uint8_t *sm, float sig, double sum_x, int32_t dot) {
  float lo, step;
  memcpy(&lo, sm, 4);
  memcpy(&step, sm + 4, 4);
  if (step < 0.0f || sig != sig) return INFINITY;
  return fmaf(step * sig, (float)dot, lo * (float)sum_x);
}

static int32_t q8_dot_base(const uint8_t *codes, const int8_t *q, uint32_t n) {
  int32_t acc = 0;
  for (uint32_t i = 0; i < n; i++) acc += (int32_t)codes[i] * (int32_t)q[i];
  return acc;
}

/* OKV_DTYPE_Q8 scores of nb blocks (summaries sb bytes apart, codes at +8)
 * for up to four query rows (codes 2*hd bytes each, qstride apart; rows past
 * nr hold zero codes), with AVX-512 VNNI: four blocks x four rows of u8 x s8
 * dot products at a time, the 16 sums reduced together with a transpose tree
 * (lane l of the result holds accumulator bitrev4(l) = block * 4 + row), the
 * bounds lo * sum_x + step * sigma * dot formed in f32 on those lanes and the
 * max over rows taken per block. best[b] = max(best[b], score) unless first.
 * Returns the blocks done (nb rounded down to 4). */
#ifndef OKV_Q8_PF_BLOCKS
#define OKV_Q8_PF_BLOCKS 32u /* software prefetch distance in blocks */
#endif
#define OKV_Q8_FOLD(a, b, lo_, hi_) (__builtin_shufflevector(a, b, lo_) + __builtin_shufflevector(a, b, hi_))
#define OKV_Q8_L8                   0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define OKV_Q8_H8                   8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define OKV_Q8_L4                   0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define OKV_Q8_H4                   4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define OKV_Q8_L2                   0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define OKV_Q8_H2                   2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define OKV_Q8_L1                   0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define OKV_Q8_H1                   1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vnni"))) static uint32_t q8_score_vnni(
    const uint8_t *summ, size_t sb, uint32_t nb, const int8_t *q, size_t qstride, uint32_t n, uint32_t nr,
    const float *sig, const double *sx, float *best, bool first) {
  /* lane l -> accumulator v = bitrev4(l): block v >> 2, row v & 3 */
  const __m512i k_of = _mm512_setr_epi32(0, 2, 1, 3, 0, 2, 1, 3, 0, 2, 1, 3, 0, 2, 1, 3);
  const __m512i r_of = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 3, 3, 3, 3);
  float sgv[4] = {0, 0, 0, 0}, sxv[4] = {0, 0, 0, 0};
  __mmask16 row_ok = 0, row_inf = 0;
  for (uint32_t r = 0; r < 4 && r < nr; r++) {
    sgv[r] = sig[r];
    sxv[r] = (float)sx[r];
  }
  for (int l = 0; l < 16; l++) {
    static const int rr[16] = {0, 0, 0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 3, 3, 3, 3};
    if ((uint32_t)rr[l] < nr) {
      row_ok |= (__mmask16)(1u << l);
      if (sig[rr[l]] != sig[rr[l]]) row_inf |= (__mmask16)(1u << l);
    }
  }
  const __m512 SG = _mm512_permutexvar_ps(r_of, _mm512_castps128_ps512(_mm_loadu_ps(sgv)));
  const __m512 SX = _mm512_permutexvar_ps(r_of, _mm512_castps128_ps512(_mm_loadu_ps(sxv)));
  const __m512 NEG = _mm512_set1_ps(-INFINITY), POS = _mm512_set1_ps(INFINITY);
  const uint32_t nb4 = nb & ~3u;
  for (uint32_t b = 0; b < nb4; b += 4) {
    const uint8_t *c0 = summ + (size_t)b * sb;
    if (b + OKV_Q8_PF_BLOCKS + 4u <= nb) /* software prefetch: the hardware streams too few lines ahead */
      for (size_t o = 0; o < 4u * sb; o += 64) _mm_prefetch((const char *)c0 + OKV_Q8_PF_BLOCKS * sb + o, _MM_HINT_T0);
    __m512i acc[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_si512();
    /* Whole 64-byte chunks with plain loads (the query rows as memory operands), then a masked last chunk:
     * one path through the loop keeps the accumulators in registers (alternative paths made the compiler
     * copy all sixteen every chunk and spill two). */
    uint32_t c = 0;
    for (; c + 64u <= n; c += 64u) {
      __m512i bv[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; k++) bv[k] = _mm512_loadu_si512(c0 + (size_t)k * sb + 8 + c);
#pragma GCC unroll 4
      for (int r = 0; r < 4; r++) {
        const __m512i qv = _mm512_loadu_si512(q + (size_t)r * qstride + c);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) __asm__("vpdpbusd %2, %1, %0" : "+v"(acc[k * 4 + r]) : "v"(bv[k]), "v"(qv));
      }
    }
    if (c < n) {
      const __mmask64 m = ((__mmask64)1 << (n - c)) - 1;
      __m512i bv[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; k++) bv[k] = _mm512_maskz_loadu_epi8(m, c0 + (size_t)k * sb + 8 + c);
#pragma GCC unroll 4
      for (int r = 0; r < 4; r++) {
        const __m512i qv = _mm512_maskz_loadu_epi8(m, q + (size_t)r * qstride + c);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) acc[k * 4 + r] = _mm512_dpbusd_epi32(acc[k * 4 + r], bv[k], qv);
      }
    }
    v16i r1[8], r2[4], r3[2];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) r1[i] = OKV_Q8_FOLD((v16i)acc[2 * i], (v16i)acc[2 * i + 1], OKV_Q8_L8, OKV_Q8_H8);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) r2[i] = OKV_Q8_FOLD(r1[2 * i], r1[2 * i + 1], OKV_Q8_L4, OKV_Q8_H4);
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) r3[i] = OKV_Q8_FOLD(r2[2 * i], r2[2 * i + 1], OKV_Q8_L2, OKV_Q8_H2);
    v16i sums = OKV_Q8_FOLD(r3[0], r3[1], OKV_Q8_L1, OKV_Q8_H1);
    float lo4[4], st4[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
      memcpy(&lo4[k], c0 + (size_t)k * sb, 4);
      memcpy(&st4[k], c0 + (size_t)k * sb + 4, 4);
    }
    const __m512 LO = _mm512_permutexvar_ps(k_of, _mm512_castps128_ps512(_mm_loadu_ps(lo4)));
    const __m512 ST = _mm512_permutexvar_ps(k_of, _mm512_castps128_ps512(_mm_loadu_ps(st4)));
    __m512 U = _mm512_fmadd_ps(_mm512_mul_ps(ST, SG), _mm512_cvtepi32_ps((__m512i)sums), _mm512_mul_ps(LO, SX));
    __mmask16 inf = row_inf | _mm512_cmp_ps_mask(ST, _mm512_setzero_ps(), _CMP_LT_OQ);
    U = _mm512_mask_blend_ps(inf, U, POS);
    U = _mm512_mask_blend_ps(row_ok, NEG, U);
    float u[16];
    _mm512_storeu_ps(u, U);
    /* lanes of block k: l with k_of[l] == k; rows in lanes {k-th of each group of four, bit-reversed} */
    static const int lanes[4][4] = {{0, 8, 4, 12}, {2, 10, 6, 14}, {1, 9, 5, 13}, {3, 11, 7, 15}};
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
      float m0 = u[lanes[k][0]] > u[lanes[k][1]] ? u[lanes[k][0]] : u[lanes[k][1]];
      float m1 = u[lanes[k][2]] > u[lanes[k][3]] ? u[lanes[k][2]] : u[lanes[k][3]];
      float v = m0 > m1 ? m0 : m1;
      best[b + (uint32_t)k] = (first || v > best[b + (uint32_t)k]) ? v : best[b + (uint32_t)k];
    }
  }
  return nb4;
}
#undef OKV_Q8_FOLD
#undef OKV_Q8_L8
#undef OKV_Q8_H8
#undef OKV_Q8_L4
#undef OKV_Q8_H4
#undef OKV_Q8_L2
#undef OKV_Q8_H2
#undef OKV_Q8_L1
#undef OKV_Q8_H1

/* The same scores with AVX2 (no VNNI): one block at a time, up to four rows; codes widened to 16 bits
 * (u8 -> i16, s8 -> i16) and multiplied pairwise into 32-bit sums (vpmaddwd: at most 2 * 255 * 127 per
 * pair, so exact, where vpmaddubsw would saturate at 16 bits). The integer dot products equal the scalar
 * loop's, and the bound is q8_bound on them, so the scores are the scalar path's bit for bit.
 * Returns nb. */
__attribute__((target("avx2"))) static uint32_t q8_score_avx2(const uint8_t *summ, size_t sb, uint32_t nb,
                                                              const int8_t *q, size_t qstride, uint32_t n, uint32_t nr,
                                                              const float *sig, const double *sx, float *best,
                                                              bool first) {
  const uint32_t rows = nr < 4u ? nr : 4u, n16 = n & ~15u;
  for (uint32_t b = 0; b < nb; b++) {
    const uint8_t *sm = summ + (size_t)b * sb, *codes = sm + 8;
    if (b + OKV_Q8_PF_BLOCKS < nb) /* software prefetch, as in the VNNI path */
      for (size_t o = 0; o < sb; o += 64) _mm_prefetch((const char *)sm + OKV_Q8_PF_BLOCKS * sb + o, _MM_HINT_T0);
    __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    for (uint32_t c = 0; c < n16; c += 16) {
      const __m256i bv = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(codes + c)));
      for (uint32_t r = 0; r < rows; r++) {
        const __m256i qv = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(q + (size_t)r * qstride + c)));
        acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(bv, qv));
      }
    }
    float v = -INFINITY;
    for (uint32_t r = 0; r < rows; r++) {
      __m128i t = _mm_add_epi32(_mm256_castsi256_si128(acc[r]), _mm256_extracti128_si256(acc[r], 1));
      t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
      t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
      int32_t dot = _mm_cvtsi128_si32(t) + q8_dot_base(codes + n16, q + (size_t)r * qstride + n16, n - n16);
      float u = q8_bound(sm, sig[r], sx[r], dot);
      v = u > v ? u : v;
    }
    best[b] = (first || v > best[b]) ? v : best[b];
  }
  return nb;
}

static bool q8_have_vnni(void) {
#if defined(__x86_64__) || defined(__i386__)
  return okv_cpu_isa_active() == OKV_CPU_ISA_AVX512 && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

/* OKV_DTYPE_C4 estimates (include/oasiskv/kernels.h). A row x (scaled) has 8-bit codes xc (sigma = max |x| /
 * 127); its estimate on a lane is fma(step * sigma, f32(dot(code, xc)), fma(width, f32(sum|x|), lo * f32(sum x))),
 * +infinity where step < 0 or the row is not finite; a block's score is the max over the head's rows. The dot
 * products are integers and every path forms the f32 parts with the same fused operations, so the ISAs' scores
 * are the scalar loop's bit for bit. */

/* Integer dot product of lane l's codes (P packed bytes) with one row's codes (okv_cpu_c4_query's layout). */
static int32_t c4_dot_base(const uint8_t *tile, uint32_t l, const int32_t *xc32, uint32_t P) {
  const int8_t *xc = (const int8_t *)xc32;
  int32_t acc = 0;
  for (uint32_t j = 0; j < P; j++) {
    const uint8_t v = tile[OKV_C4_CODES + (size_t)(j / 4u) * 4u * OKV_C4_TILE + 4u * l + j % 4u];
    acc += (int32_t)(v & 15u) * xc[(j / 4u) * 8u + j % 4u] + (int32_t)(v >> 4) * xc[(j / 4u) * 8u + 4u + j % 4u];
  }
  return acc;
}

/* The query side of a tile's estimates: nr rows, row r's codes at xc + r * stride (int32 units, 4 codes each;
 * rows up to the next multiple of 4 exist and hold zero codes), its sigma (NaN: not finite) and sums. */
typedef struct c4_rows_t {
  const int32_t *xc;
  size_t stride;
  uint32_t nr;
  const float *sig, *sx, *l1;
} c4_rows_t;

/* The f32 estimate of one row on one lane from its integer dot product. */
static inline float c4_row_estimate(const uint8_t *tile, uint32_t l, const c4_rows_t *q, uint32_t r, int32_t dot) {
  float lo, step, width;
  memcpy(&lo, tile + 4u * l, 4);
  memcpy(&step, tile + 4u * (OKV_C4_TILE + l), 4);
  memcpy(&width, tile + 4u * (2u * OKV_C4_TILE + l), 4);
  if (step < 0.0f || q->sig[r] != q->sig[r]) return INFINITY;
  return fmaf(step * q->sig[r], (float)dot, fmaf(width, q->l1[r], lo * q->sx[r]));
}

static void c4_tile_base(const uint8_t *tile, uint32_t P, const c4_rows_t *q, float *best) {
  for (uint32_t l = 0; l < OKV_C4_TILE; l++) {
    float v = -INFINITY;
    for (uint32_t r = 0; r < q->nr; r++) {
      float u = c4_row_estimate(tile, l, q, r, c4_dot_base(tile, l, q->xc + (size_t)r * q->stride, P));
      v = u > v ? u : v;
    }
    best[l] = v;
  }
}

static void c4_tiles_base(const uint8_t *tiles, uint32_t n_tiles, size_t tb, uint32_t P, const c4_rows_t *q,
                          float *out) {
  for (uint32_t t = 0; t < n_tiles; t++) c4_tile_base(tiles + (size_t)t * tb, P, q, out + (size_t)t * OKV_C4_TILE);
}

/* AVX-512 VNNI. The tile puts a block's 4 code bytes in each 32-bit lane, so every vpdpbusd multiplies 16
 * blocks' nibbles by one group of 4 codes of a row (an embedded-broadcast memory operand) and sums into the
 * blocks' own lanes: no horizontal reduction. Four rows at a time, low and high nibbles in separate
 * accumulators (eight independent chains). */
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vnni"), always_inline)) static inline void c4_tile_vnni(
    const uint8_t *tile, uint32_t P, const c4_rows_t *q, float *best) {
  const __m512i NIB = _mm512_set1_epi8(15);
  const __m512 LO = _mm512_loadu_ps(tile), ST = _mm512_loadu_ps(tile + 4u * OKV_C4_TILE);
  const __m512 W = _mm512_loadu_ps(tile + 8u * OKV_C4_TILE), POS = _mm512_set1_ps(INFINITY);
  const __mmask16 st_neg = _mm512_cmp_ps_mask(ST, _mm512_setzero_ps(), _CMP_LT_OQ);
  const uint8_t *codes = tile + OKV_C4_CODES;
  __m512 B = _mm512_set1_ps(-INFINITY);
  for (uint32_t r0 = 0; r0 < q->nr; r0 += 4) {
    const int32_t *x0 = q->xc + (size_t)r0 * q->stride, *x1 = x0 + q->stride, *x2 = x1 + q->stride,
                  *x3 = x2 + q->stride;
    __m512i e0 = _mm512_setzero_si512(), e1 = _mm512_setzero_si512(), e2 = _mm512_setzero_si512(),
            e3 = _mm512_setzero_si512(), o0 = _mm512_setzero_si512(), o1 = _mm512_setzero_si512(),
            o2 = _mm512_setzero_si512(), o3 = _mm512_setzero_si512();
    for (uint32_t g = 0; g < P / 4u; g++) {
      const __m512i v = _mm512_loadu_si512(codes + (size_t)g * 64u);
      const __m512i lo = _mm512_and_si512(v, NIB), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), NIB);
      __asm__("vpdpbusd %2, %1, %0" : "+v"(e0) : "v"(lo), "v"(_mm512_set1_epi32(x0[2u * g])));
      __asm__("vpdpbusd %2, %1, %0" : "+v"(o0) : "v"(hi), "v"(_mm512_set1_epi32(x0[2u * g + 1u])));
      __asm__("vpdpbusd %2, %1, %0" : "+v"(e1) : "v"(lo), "v"(_mm512_set1_epi32(x1[2u * g])));
      __asm__("vpdpbusd %2, %1, %0" : "+v"(o1) : "v"(hi), "v"(_mm512_set1_epi32(x1[2u * g + 1u])));
      __asm__("vpdpbusd %2, %1, %0" : "+v"(e2) : "v"(lo), "v"(_mm512_set1_epi32(x2[2u * g])));
      __asm__("vpdpbusd %2, %1, %0" : "+v"(o2) : "v"(hi), "v"(_mm512_set1_epi32(x2[2u * g + 1u])));
      __asm__("vpdpbusd %2, %1, %0" : "+v"(e3) : "v"(lo), "v"(_mm512_set1_epi32(x3[2u * g])));
      __asm__("vpdpbusd %2, %1, %0" : "+v"(o3) : "v"(hi), "v"(_mm512_set1_epi32(x3[2u * g + 1u])));
    }
    const __m512i dots[4] = {_mm512_add_epi32(e0, o0), _mm512_add_epi32(e1, o1), _mm512_add_epi32(e2, o2),
                             _mm512_add_epi32(e3, o3)};
    for (uint32_t i = 0; i < 4 && r0 + i < q->nr; i++) {
      const uint32_t r = r0 + i;
      const __m512 U0 =
          _mm512_fmadd_ps(_mm512_mul_ps(ST, _mm512_set1_ps(q->sig[r])), _mm512_cvtepi32_ps(dots[i]),
                          _mm512_fmadd_ps(W, _mm512_set1_ps(q->l1[r]), _mm512_mul_ps(LO, _mm512_set1_ps(q->sx[r]))));
      const __m512 U = q->sig[r] != q->sig[r] ? POS : _mm512_mask_blend_ps(st_neg, U0, POS);
      B = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(U, B, _CMP_GT_OQ), B, U); /* u > v ? u : v */
    }
  }
  _mm512_storeu_ps(best, B);
}

/* n_tiles consecutive tiles (tb bytes apart) into out[16 * n_tiles], prefetching two tiles ahead (the hardware
 * streams too few lines ahead). */
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vnni"))) static void c4_tiles_vnni(
    const uint8_t *tiles, uint32_t n_tiles, size_t tb, uint32_t P, const c4_rows_t *q, float *out) {
  for (uint32_t t = 0; t < n_tiles; t++) {
    const uint8_t *tile = tiles + (size_t)t * tb;
    if (t + 2u < n_tiles)
      for (size_t o = 0; o < tb; o += 64) _mm_prefetch((const char *)tile + 2u * tb + o, _MM_HINT_T0);
    c4_tile_vnni(tile, P, q, out + (size_t)t * OKV_C4_TILE);
  }
}

/* AVX2 + FMA, eight lanes at a time: nibbles (0..15) times s8 codes summed in pairs with vpmaddubsw (at most
 * 2 * 15 * 127 per pair, twice that for both nibbles, so no 16-bit saturation), then into 32 bits (vpmaddwd with
 * ones); the f32 parts with the same fused operations. Same scores bit for bit. */
__attribute__((target("avx2,fma"), always_inline)) static inline void c4_tile_avx2(const uint8_t *tile, uint32_t P,
                                                                                   const c4_rows_t *q, float *best) {
  const __m256i NIB = _mm256_set1_epi8(15), ONES = _mm256_set1_epi16(1);
  for (uint32_t half = 0; half < 2; half++) {
    const float *hd = (const float *)(const void *)tile + 8u * half;
    const __m256 LO = _mm256_loadu_ps(hd), ST = _mm256_loadu_ps(hd + OKV_C4_TILE);
    const __m256 W = _mm256_loadu_ps(hd + 2u * OKV_C4_TILE), POS = _mm256_set1_ps(INFINITY);
    const __m256 st_neg = _mm256_cmp_ps(ST, _mm256_setzero_ps(), _CMP_LT_OQ);
    __m256 B = _mm256_set1_ps(-INFINITY);
    for (uint32_t r = 0; r < q->nr; r++) {
      const int32_t *xr = q->xc + (size_t)r * q->stride;
      __m256i acc = _mm256_setzero_si256();
      for (uint32_t g = 0; g < P / 4u; g++) {
        const __m256i v =
            _mm256_loadu_si256((const __m256i *)(tile + OKV_C4_CODES + (size_t)g * 4u * OKV_C4_TILE + 32u * half));
        const __m256i lo = _mm256_and_si256(v, NIB), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), NIB);
        const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_set1_epi32(xr[2u * g])),
                                           _mm256_maddubs_epi16(hi, _mm256_set1_epi32(xr[2u * g + 1u])));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, ONES));
      }
      __m256 U =
          _mm256_fmadd_ps(_mm256_mul_ps(ST, _mm256_set1_ps(q->sig[r])), _mm256_cvtepi32_ps(acc),
                          _mm256_fmadd_ps(W, _mm256_set1_ps(q->l1[r]), _mm256_mul_ps(LO, _mm256_set1_ps(q->sx[r]))));
      U = q->sig[r] != q->sig[r] ? POS : _mm256_blendv_ps(U, POS, st_neg);
      B = _mm256_blendv_ps(B, U, _mm256_cmp_ps(U, B, _CMP_GT_OQ));
    }
    _mm256_storeu_ps(best + 8u * half, B);
  }
}

__attribute__((target("avx2,fma"))) static void c4_tiles_avx2(const uint8_t *tiles, uint32_t n_tiles, size_t tb,
                                                              uint32_t P, const c4_rows_t *q, float *out) {
  for (uint32_t t = 0; t < n_tiles; t++) {
    const uint8_t *tile = tiles + (size_t)t * tb;
    if (t + 2u < n_tiles)
      for (size_t o = 0; o < tb; o += 64) _mm_prefetch((const char *)tile + 2u * tb + o, _MM_HINT_T0);
    c4_tile_avx2(tile, P, q, out + (size_t)t * OKV_C4_TILE);
  }
}

#define OKV_Q8_ROWS 64u /* query rows quantized per pass */

/* Scoring with OKV_DTYPE_Q8 summaries (same jobs and chunks as the other dtypes). */
static void score_q8(const okv_score_desc_t *d, const float *q, const void *summaries, float *scores, int nt) {
  const uint32_t G = d->group_size, hd = d->head_dim, nq = d->n_kv_heads * G;
  const uint32_t rows = (d->t_end - d->t_begin) * G;
  const uint32_t n_jobs = d->n_ranges > 0 ? d->n_ranges : d->n_seqs * d->n_kv_heads;
  const size_t sb = (size_t)okv_summary_bytes_ex(OKV_DTYPE_Q8, hd), qs = 2u * (size_t)hd;
  const float scale = (float)(1.0 / sqrt((double)hd));
  const bool vnni = q8_have_vnni(), avx2 = !vnni && okv_cpu_isa_active() >= OKV_CPU_ISA_AVX2;
  const uint32_t max_nb = score_max_blocks(d, n_jobs);
  const long n_chunks = (long)((max_nb + OKV_SCORE_CHUNK - 1u) / OKV_SCORE_CHUNK);
  const long n_items = (long)n_jobs * n_chunks;
  okv_unused_threads(nt);
  OKV_OMP(omp parallel num_threads(nt) if (nt > 1 && n_items > 1)) {
    _Alignas(64) int8_t qc[(OKV_Q8_ROWS + 3u) * 512];
    float sig[OKV_Q8_ROWS], x[256];
    double sx[OKV_Q8_ROWS];
    uint32_t loaded_u = UINT32_MAX;
OKV_OMP(omp for schedule(dynamic, 1))
for (long it = 0; it < n_items; it++) {
  const score_job_t job = score_job(d, (uint32_t)(it / n_chunks));
  uint32_t b0 = (uint32_t)(it % n_chunks) * OKV_SCORE_CHUNK;
  if (b0 >= job.n) continue;
  uint32_t b1 = job.n - b0 > OKV_SCORE_CHUNK ? b0 + OKV_SCORE_CHUNK : job.n;
  uint32_t s = job.u / d->n_kv_heads, h = job.u % d->n_kv_heads;
  const uint8_t *summ = (const uint8_t *)summaries + (size_t)(job.summary_first + b0) * sb;
  float *dst = scores + job.score_first + b0;
  for (uint32_t r0 = 0; r0 < rows; r0 += OKV_Q8_ROWS) {
    uint32_t nr = rows - r0 < OKV_Q8_ROWS ? rows - r0 : OKV_Q8_ROWS;
    if (rows > OKV_Q8_ROWS || job.u != loaded_u) {
      for (uint32_t i = 0; i < nr; i++) {
        uint32_t r = r0 + i, t = d->t_begin + r / G, g = r % G;
        const float *src = q + (((size_t)s * d->n_query_tokens + t) * nq + (size_t)h * G + g) * hd;
        for (uint32_t e = 0; e < hd; e++) x[e] = src[e] * scale;
        sig[i] = okv_cpu_q8_query(x, hd, qc + (size_t)i * qs, &sx[i]);
      }
      memset(qc + (size_t)nr * qs, 0, 3u * qs); /* rows nr..nr+2: zero codes for the 4-row tiles */
      loaded_u = rows > OKV_Q8_ROWS ? UINT32_MAX : job.u;
    }
    const uint32_t nb = b1 - b0;
    for (uint32_t i = 0; i < nr; i += 4) { /* four rows at a time; rows past nr are zero codes, ignored */
      const bool first = r0 == 0 && i == 0;
      uint32_t done = 0;
      if (vnni)
        done = q8_score_vnni(summ, sb, nb, qc + (size_t)i * qs, qs, (uint32_t)qs, nr - i, sig + i, sx + i, dst, first);
      else if (avx2)
        done = q8_score_avx2(summ, sb, nb, qc + (size_t)i * qs, qs, (uint32_t)qs, nr - i, sig + i, sx + i, dst, first);
      for (uint32_t b = done; b < nb; b++) {
        const uint8_t *sm = summ + (size_t)b * sb;
        float v = -INFINITY;
        for (uint32_t r = i; r < nr && r < i + 4; r++) {
          float u = q8_bound(sm, sig[r], sx[r], q8_dot_base(sm + 8, qc + (size_t)r * qs, (uint32_t)qs));
          v = u > v ? u : v;
        }
        dst[b] = (first || v > dst[b]) ? v : dst[b];
      }
    }
  }
}
  }
}

/* One thread's state for c4 scoring: the query rows' codes (of the segment `loaded_u`), sums and the
 * estimates of a chunk's tiles. (OKV_Q8_ROWS + 3) rows of up to 256 code bytes, read back 4 at a time as int32
 * (their declared type); a chunk's tiles: OKV_SCORE_CHUNK blocks from any lane span at most
 * OKV_SCORE_CHUNK / 16 + 1 tiles. */
typedef struct c4_thread_t {
  _Alignas(64) int32_t xc[(OKV_Q8_ROWS + 3u) * 64u];
  float sig[OKV_Q8_ROWS], sx[OKV_Q8_ROWS], l1[OKV_Q8_ROWS], x[256], best[OKV_SCORE_CHUNK + OKV_C4_TILE];
  c4_rows_t qr;
  uint32_t loaded_u;
} c4_thread_t;

static void c4_thread_init(c4_thread_t *t, const okv_score_desc_t *d) {
  t->qr = (c4_rows_t){
      .xc = t->xc, .stride = okv_cpu_c4_packed_bytes(d->head_dim) / 2u, .sig = t->sig, .sx = t->sx, .l1 = t->l1};
  t->loaded_u = UINT32_MAX;
}

/* Blocks [b0, b1) of one job (a segment or a range) scored with c4 summaries into `scores`: the rows' codes
 * (unless thread t holds them), then the tiles that the blocks touch, each scored whole, and the blocks' lanes
 * merged into their scores. */
static void c4_score_chunk(const okv_score_desc_t *d, const float *q, const void *summaries, float *scores,
                           score_job_t job, uint32_t b0, uint32_t b1, c4_thread_t *t) {
  const uint32_t G = d->group_size, hd = d->head_dim, nq = d->n_kv_heads * G;
  const uint32_t rows = (d->t_end - d->t_begin) * G;
  const uint32_t P = okv_cpu_c4_packed_bytes(hd);
  const size_t tb = okv_cpu_c4_tile_bytes(hd), stride = P / 2u; /* int32 per row of codes */
  const float scale = (float)(1.0 / sqrt((double)hd));
  const bool vnni = q8_have_vnni(), avx2 = !vnni && okv_cpu_isa_active() >= OKV_CPU_ISA_AVX2;
  const uint32_t s = job.u / d->n_kv_heads, h = job.u % d->n_kv_heads;
  const uint64_t a0 = job.summary_first + b0, a1 = job.summary_first + b1; /* summaries [a0, a1) */
  for (uint32_t r0 = 0; r0 < rows; r0 += OKV_Q8_ROWS) {
    uint32_t nr = rows - r0 < OKV_Q8_ROWS ? rows - r0 : OKV_Q8_ROWS;
    if (rows > OKV_Q8_ROWS || job.u != t->loaded_u) {
      for (uint32_t i = 0; i < nr; i++) {
        const uint32_t r = r0 + i, tk = d->t_begin + r / G, g = r % G;
        const float *src = q + (((size_t)s * d->n_query_tokens + tk) * nq + (size_t)h * G + g) * hd;
        for (uint32_t e = 0; e < hd; e++) t->x[e] = src[e] * scale;
        t->sig[i] = okv_cpu_c4_query(t->x, hd, (int8_t *)(t->xc + (size_t)i * stride), &t->sx[i], &t->l1[i]);
      }
      memset(t->xc + (size_t)nr * stride, 0, 3u * stride * sizeof(int32_t)); /* rows nr..nr+2: zero codes */
      t->qr.nr = nr;
      t->loaded_u = rows > OKV_Q8_ROWS ? UINT32_MAX : job.u;
    }
    /* the tiles [t0, t0 + n_t) that hold summaries [a0, a1), scored into best[], then merged */
    const uint64_t t0 = a0 / OKV_C4_TILE, n_t = (a1 + OKV_C4_TILE - 1u) / OKV_C4_TILE - t0;
    const uint8_t *tiles = (const uint8_t *)summaries + (size_t)t0 * tb;
    if (vnni)
      c4_tiles_vnni(tiles, (uint32_t)n_t, tb, P, &t->qr, t->best);
    else if (avx2)
      c4_tiles_avx2(tiles, (uint32_t)n_t, tb, P, &t->qr, t->best);
    else
      c4_tiles_base(tiles, (uint32_t)n_t, tb, P, &t->qr, t->best);
    const float *src = t->best + (a0 - t0 * OKV_C4_TILE);
    float *dst = scores + job.score_first + b0;
    if (r0 == 0)
      memcpy(dst, src, (size_t)(b1 - b0) * sizeof(float));
    else
      for (uint32_t b = 0; b < b1 - b0; b++) dst[b] = src[b] > dst[b] ? src[b] : dst[b];
  }
}

/* Scoring with OKV_DTYPE_C4 summaries (same jobs and chunks as the other dtypes). */
static void score_c4(const okv_score_desc_t *d, const float *q, const void *summaries, float *scores, int nt) {
  const uint32_t n_jobs = d->n_ranges > 0 ? d->n_ranges : d->n_seqs * d->n_kv_heads;
  const uint32_t max_nb = score_max_blocks(d, n_jobs);
  const long n_chunks = (long)((max_nb + OKV_SCORE_CHUNK - 1u) / OKV_SCORE_CHUNK);
  const long n_items = (long)n_jobs * n_chunks;
  okv_unused_threads(nt);
  OKV_OMP(omp parallel num_threads(nt) if (nt > 1 && n_items > 1)) {
    c4_thread_t t;
    c4_thread_init(&t, d);
OKV_OMP(omp for schedule(dynamic, 1))
for (long it = 0; it < n_items; it++) {
  const score_job_t job = score_job(d, (uint32_t)(it / n_chunks));
  uint32_t b0 = (uint32_t)(it % n_chunks) * OKV_SCORE_CHUNK;
  if (b0 >= job.n) continue;
  uint32_t b1 = job.n - b0 > OKV_SCORE_CHUNK ? b0 + OKV_SCORE_CHUNK : job.n;
  c4_score_chunk(d, q, summaries, scores, job, b0, b1, &t);
}
  }
}

size_t okv_cpu_score_list_scratch_bytes(const okv_score_desc_t *d) {
  uint64_t n = 0, U = (uint64_t)d->n_seqs * d->n_kv_heads;
  for (uint64_t u = 0; u < U; u++) n += d->seg_n_blocks[u];
  return (size_t)(n ? n : 1u) * (2u * sizeof(uint64_t) + 2u * sizeof(uint32_t));
}

/* The run of segment u holding block b (runs ascending, not overlapping), or UINT32_MAX; `hint` is the run
 * the previous block of the list was in (lists are usually ascending, so it or the next one is it). */
static uint32_t list_run_of(const okv_score_desc_t *d, uint32_t u, uint32_t b, uint32_t hint) {
  uint32_t lo = d->seg_run_offsets[u], hi = d->seg_run_offsets[u + 1];
  for (uint32_t r = hint; r < hi && r - hint < 2u; r++)
    if (r >= lo && b >= d->run_first_block[r] && b - d->run_first_block[r] < d->run_n_blocks[r]) return r;
  while (lo < hi) { /* the last run starting at or before b */
    uint32_t mid = lo + (hi - lo) / 2u;
    if (d->run_first_block[mid] <= b)
      lo = mid + 1u;
    else
      hi = mid;
  }
  if (lo == d->seg_run_offsets[u]) return UINT32_MAX;
  uint32_t r = lo - 1u;
  return b - d->run_first_block[r] < d->run_n_blocks[r] ? r : UINT32_MAX;
}

void okv_cpu_score_list_ranges(const okv_score_desc_t *d, const uint32_t *list, float *scores, void *scratch,
                               okv_score_desc_t *out) {
  const uint32_t U = d->n_seqs * d->n_kv_heads;
  size_t cap = okv_cpu_score_list_scratch_bytes(d) / (2u * sizeof(uint64_t) + 2u * sizeof(uint32_t));
  uint64_t *r_sfirst = scratch, *r_cfirst = r_sfirst + cap;
  uint32_t *r_seg = (uint32_t *)(r_cfirst + cap), *r_n = r_seg + cap;
  uint32_t nr = 0;
  for (uint32_t u = 0; u < U; u++) {
    const uint32_t *l = list + (size_t)u * d->list_stride;
    uint32_t run = d->seg_run_offsets[u];
    bool open = false; /* the last range is this segment's and may grow */
    for (uint32_t i = 0; i < d->seg_n_blocks[u]; i++) {
      uint32_t b = l[i], r = list_run_of(d, u, b, run);
      if (r == UINT32_MAX) {
        scores[d->seg_score_first[u] + i] = -INFINITY;
        open = false;
        continue;
      }
      run = r;
      uint64_t sf = d->run_summary_first[r] + (b - d->run_first_block[r]);
      if (open && r_sfirst[nr - 1] + r_n[nr - 1] == sf && r_cfirst[nr - 1] + r_n[nr - 1] == d->seg_score_first[u] + i) {
        r_n[nr - 1]++;
        continue;
      }
      r_seg[nr] = u;
      r_sfirst[nr] = sf;
      r_cfirst[nr] = d->seg_score_first[u] + i;
      r_n[nr] = 1;
      nr++;
      open = true;
    }
  }
  *out = *d;
  out->list_blocks = NULL;
  out->n_ranges = nr;
  out->range_seg = r_seg;
  out->range_summary_first = r_sfirst;
  out->range_n_blocks = r_n;
  out->range_score_first = r_cfirst;
}

/* The min/max bound scorer of the active ISA level. */
static okv_score_fn score_range_fn(void) {
  switch (okv_cpu_isa_active()) {
    case OKV_CPU_ISA_AVX512: return okv_score_range_avx512;
    case OKV_CPU_ISA_AVX2: return okv_score_range_avx2;
    default: return okv_score_range_base;
  }
}

#define OKV_LIST_PF_BLOCKS 8u /* listed blocks ahead whose summaries list scoring prefetches */

/* One thread's state for list scoring: a segment's query rows (okv_cpu_score_blocks's split) and the summary
 * index of each listed block of a chunk. */
typedef struct list_thread_t {
  _Alignas(64) float qp[OKV_PASS_ROWS * 256];
  _Alignas(64) float qn[OKV_PASS_ROWS * 256];
  float tmp[OKV_SCORE_CHUNK];
  uint64_t sidx[OKV_SCORE_CHUNK];
} list_thread_t;

/* Scoring's list mode for segment u, summaries f32, f16 or bf16 (list: the lists, u's at u * list_stride):
 * each listed block's summary found through u's runs (-infinity for one in none), then, OKV_SCORE_CHUNK listed
 * blocks at a time, four query rows on AVX-512 four blocks at a time wherever they lie (the remainder of a
 * chunk one by one), otherwise runs of contiguous summaries over passes of OKV_PASS_ROWS rows. Every call
 * scores a segment the same way, whichever thread and whatever else it runs beside. */
static void score_list_segment(const okv_score_desc_t *d, const float *q, const void *summaries, const uint32_t *list,
                               float *scores, uint32_t u, list_thread_t *w) {
  const uint32_t G = d->group_size, hd = d->head_dim, hdp = (hd + 15u) & ~15u;
  const uint32_t rows = (d->t_end - d->t_begin) * G, n = d->seg_n_blocks[u];
  const uint32_t s = u / d->n_kv_heads, h = u % d->n_kv_heads;
  const int sdt = (int)d->summary_dtype;
  const size_t sb = (size_t)okv_summary_bytes_ex(d->summary_dtype, hd);
  const float scale = (float)(1.0 / sqrt((double)hd));
  const okv_score_fn fn = score_range_fn();
  const bool gather = rows == 4 && hd % 16u == 0 && fn == okv_score_range_avx512;
  const uint32_t *l = list + (size_t)u * d->list_stride;
  const uint8_t *base = summaries;
  float *dst = scores + d->seg_score_first[u];
  bool loaded = false; /* the rows of u are in w (all of them: rows <= OKV_PASS_ROWS) */
  uint32_t hint = d->seg_run_offsets[u];
  for (uint32_t c0 = 0; c0 < n; c0 += OKV_SCORE_CHUNK) {
    const uint32_t cn = n - c0 < OKV_SCORE_CHUNK ? n - c0 : OKV_SCORE_CHUNK;
    for (uint32_t i = 0; i < cn; i++) {
      const uint32_t b = l[c0 + i], r = list_run_of(d, u, b, hint);
      if (r == UINT32_MAX) {
        w->sidx[i] = UINT64_MAX;
        dst[c0 + i] = -INFINITY;
        continue;
      }
      hint = r;
      w->sidx[i] = d->run_summary_first[r] + (b - d->run_first_block[r]);
    }
    if (gather) {
      if (!loaded) score_load_rows(d, q, s, h, 0, rows, hdp, scale, w->qp, w->qn);
      loaded = true;
      const uint8_t *qs[4];
      float *qd[4];
      uint32_t nq = 0;
      for (uint32_t i = 0; i < cn; i++) {
        if (i + OKV_LIST_PF_BLOCKS < cn && w->sidx[i + OKV_LIST_PF_BLOCKS] != UINT64_MAX) {
          const char *p = (const char *)base + (size_t)w->sidx[i + OKV_LIST_PF_BLOCKS] * sb;
          for (size_t o = 0; o < sb; o += 64) __builtin_prefetch(p + o);
        }
        if (w->sidx[i] == UINT64_MAX) continue;
        qs[nq] = base + (size_t)w->sidx[i] * sb;
        qd[nq] = dst + c0 + i;
        if (++nq == 4) {
          okv_score_gather4_avx512(qs, sdt, hd, hdp, w->qp, w->qn, qd, true);
          nq = 0;
        }
      }
      for (uint32_t k = 0; k < nq; k++) fn(qs[k], sdt, hd, hdp, 1, rows, w->qp, w->qn, qd[k]);
      continue;
    }
    for (uint32_t i = 0; i < cn;) {
      if (w->sidx[i] == UINT64_MAX) {
        i++;
        continue;
      }
      uint32_t j = i + 1u; /* [i, j): contiguous summaries */
      while (j < cn && w->sidx[j] != UINT64_MAX && w->sidx[j] == w->sidx[j - 1u] + 1u) j++;
      for (uint32_t r0 = 0; r0 < rows; r0 += OKV_PASS_ROWS) {
        const uint32_t nr = rows - r0 < OKV_PASS_ROWS ? rows - r0 : OKV_PASS_ROWS;
        if (rows > OKV_PASS_ROWS || !loaded) score_load_rows(d, q, s, h, r0, nr, hdp, scale, w->qp, w->qn);
        loaded = rows <= OKV_PASS_ROWS;
        float *o = r0 == 0 ? dst + c0 + i : w->tmp;
        fn(base + (size_t)w->sidx[i] * sb, sdt, hd, hdp, j - i, nr, w->qp, w->qn, o);
        if (r0 > 0)
          for (uint32_t b = 0; b < j - i; b++)
            dst[c0 + i + b] = w->tmp[b] > dst[c0 + i + b] ? w->tmp[b] : dst[c0 + i + b];
      }
      i = j;
    }
  }
}

bool okv_cpu_score_list_direct(const okv_score_desc_t *d) {
  return d->n_ranges == 0 &&
         (d->summary_dtype == OKV_DTYPE_F32 || d->summary_dtype == OKV_DTYPE_F16 || d->summary_dtype == OKV_DTYPE_BF16);
}

void okv_cpu_score_list(const okv_score_desc_t *d, const float *q, const void *summaries, const uint32_t *list,
                        float *scores, int n_threads) {
  const int nt = cpu_threads(n_threads);
  const long U = (long)d->n_seqs * d->n_kv_heads;
  okv_unused_threads(nt);
  OKV_OMP(omp parallel num_threads(nt) if (nt > 1 && U > 1)) {
    list_thread_t w;
OKV_OMP(omp for schedule(dynamic, 1))
for (long u = 0; u < U; u++) score_list_segment(d, q, summaries, list, scores, (uint32_t)u, &w);
  }
}

#define OKV_GATHER_PF_RANGES 6u /* ranges ahead whose summaries the gathered scoring prefetches */

void okv_cpu_score_blocks(const okv_score_desc_t *d, const float *q, const void *summaries, float *scores,
                          int n_threads) {
  const uint32_t G = d->group_size, hd = d->head_dim, hdp = (hd + 15u) & ~15u;
  const uint32_t rows = (d->t_end - d->t_begin) * G;
  const uint32_t n_jobs = d->n_ranges > 0 ? d->n_ranges : d->n_seqs * d->n_kv_heads;
  const int sdt = (int)d->summary_dtype;
  const size_t sb = (size_t)okv_summary_bytes_ex(d->summary_dtype, hd);
  const float scale = (float)(1.0 / sqrt((double)hd));
  if (d->summary_dtype == OKV_DTYPE_Q8) {
    score_q8(d, q, summaries, scores, cpu_threads(n_threads));
    return;
  }
  if (d->summary_dtype == OKV_DTYPE_C4) {
    score_c4(d, q, summaries, scores, cpu_threads(n_threads));
    return;
  }
  const okv_score_fn fn = score_range_fn();
  const uint32_t max_nb = score_max_blocks(d, n_jobs);
  const long n_chunks = (long)((max_nb + OKV_SCORE_CHUNK - 1u) / OKV_SCORE_CHUNK);
  /* Short ranges (the candidates of a second pass) are scored several per work item. */
  const uint32_t per_item = n_chunks == 1 && d->n_ranges > 0 ? OKV_SCORE_CHUNK / (max_nb ? max_nb : 1u) : 1u;
  /* Short ranges of four query rows on AVX-512: quads gathered across ranges (score_gather4). */
  const bool gather = per_item > 1 && rows == 4 && hd % 16u == 0 && fn == okv_score_range_avx512;
  const long n_items = (long)((n_jobs + per_item - 1u) / per_item) * n_chunks;
  const int nt = cpu_threads(n_threads);
  okv_unused_threads(nt);
  OKV_OMP(omp parallel num_threads(nt) if (nt > 1 && n_items > 1)) {
    _Alignas(64) float qp[OKV_PASS_ROWS * 256];
    _Alignas(64) float qn[OKV_PASS_ROWS * 256];
    float tmp[OKV_SCORE_CHUNK];
    /* the query rows of the last segment, kept while a thread scores several
     * items of one segment in a single pass (rows <= OKV_PASS_ROWS) */
    uint32_t loaded_u = UINT32_MAX;
OKV_OMP(omp for schedule(dynamic, 1))
for (long it = 0; it < n_items; it++) {
  const uint32_t j0 = (uint32_t)(it / n_chunks) * per_item;
  const uint32_t j1 = n_jobs - j0 > per_item ? j0 + per_item : n_jobs;
  if (gather) { /* scattered single blocks: four at a time across ranges of one segment */
    const uint8_t *qs[4];
    float *qd[4];
    uint32_t nq = 0, qu = UINT32_MAX;
    for (uint32_t j = j0; j <= j1; j++) {
      score_job_t job = j < j1 ? score_job(d, j) : (score_job_t){UINT32_MAX, 0, 0, 0};
      if (nq > 0 && (job.u != qu || j == j1)) { /* another segment or the end: the partial quad one by one */
        for (uint32_t k = 0; k < nq; k++) fn(qs[k], sdt, hd, hdp, 1, rows, qp, qn, qd[k]);
        nq = 0;
      }
      if (j == j1) break;
      if (j + OKV_GATHER_PF_RANGES < j1) { /* the summaries of a range a few ahead: scattered lines, fetched early */
        const score_job_t ahead = score_job(d, j + OKV_GATHER_PF_RANGES);
        const char *p = (const char *)summaries + (size_t)ahead.summary_first * sb;
        const size_t bytes = (size_t)(ahead.n < 4u ? ahead.n : 4u) * sb;
        for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o);
      }
      if (job.u != loaded_u) {
        score_load_rows(d, q, job.u / d->n_kv_heads, job.u % d->n_kv_heads, 0, rows, hdp, scale, qp, qn);
        loaded_u = job.u;
      }
      qu = job.u;
      for (uint32_t b = 0; b < job.n; b++) {
        qs[nq] = (const uint8_t *)summaries + (size_t)(job.summary_first + b) * sb;
        qd[nq] = scores + job.score_first + b;
        if (++nq == 4) {
          okv_score_gather4_avx512(qs, sdt, hd, hdp, qp, qn, qd, true);
          nq = 0;
        }
      }
    }
    continue;
  }
  for (uint32_t j = j0; j < j1; j++) {
    const score_job_t job = score_job(d, j);
    uint32_t b0 = (uint32_t)(it % n_chunks) * OKV_SCORE_CHUNK;
    if (b0 >= job.n) continue;
    uint32_t b1 = job.n - b0 > OKV_SCORE_CHUNK ? b0 + OKV_SCORE_CHUNK : job.n;
    uint32_t s = job.u / d->n_kv_heads, h = job.u % d->n_kv_heads;
    const uint8_t *summ = (const uint8_t *)summaries + (size_t)(job.summary_first + b0) * sb;
    float *dst = scores + job.score_first + b0;
    for (uint32_t r0 = 0; r0 < rows; r0 += OKV_PASS_ROWS) {
      uint32_t nr = rows - r0 < OKV_PASS_ROWS ? rows - r0 : OKV_PASS_ROWS;
      if (rows > OKV_PASS_ROWS || job.u != loaded_u) {
        score_load_rows(d, q, s, h, r0, nr, hdp, scale, qp, qn);
        loaded_u = rows > OKV_PASS_ROWS ? UINT32_MAX : job.u;
      }
      if (r0 == 0) {
        fn(summ, sdt, hd, hdp, b1 - b0, nr, qp, qn, dst);
      } else {
        fn(summ, sdt, hd, hdp, b1 - b0, nr, qp, qn, tmp);
        for (uint32_t b = 0; b < b1 - b0; b++) dst[b] = tmp[b] > dst[b] ? tmp[b] : dst[b];
      }
    }
  }
}
  }
}

/* ---- top-K ---- */

/* Total-order key: higher score first, then lower block index; NaN = -inf, -0 = +0. */
static inline uint64_t topk_key(float x, uint32_t idx) {
  if (x != x) x = -INFINITY;
  if (x == 0.0f) x = 0.0f;
  uint32_t b;
  memcpy(&b, &x, 4);
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return ((uint64_t)b << 32) | (uint64_t)(~idx);
}

/* The score of a key (topk_key's inverse on the upper 32 bits; -infinity for a NaN's key). */
static inline float topk_key_score(uint64_t key) {
  uint32_t b = (uint32_t)(key >> 32);
  b = (b & 0x80000000u) ? (b & 0x7FFFFFFFu) : ~b;
  float x;
  memcpy(&x, &b, 4);
  return x;
}

/* Min-heap sift-down of h[i] in h[0..n). */
static inline void heap_down(uint64_t *h, uint32_t n, uint32_t i) {
  uint64_t x = h[i];
  for (;;) {
    uint32_t c = 2u * i + 1u;
    if (c >= n) break;
    if (c + 1u < n && h[c + 1u] < h[c]) c++;
    if (h[c] >= x) break;
    h[i] = h[c];
    i = c;
  }
  h[i] = x;
}

/* Sampled threshold for long segments: the scores at or above the `rank`-th best of every
 * OKV_TOPK_SAMPLE_STRIDE-th score are about rank x stride, ~2k; when at least k of them exist, they hold the
 * whole top-k (every score of the top-k is >= the k-th best >= the threshold), so the radix sort runs over
 * them alone. Otherwise (ties, exclusions, unlucky samples, more than OKV_TOPK_CAND_MAX) a segment of at most
 * OKV_TOPK_CAND_MAX blocks is radix sorted whole, and a longer one goes through a k-entry min-heap. */
#define OKV_TOPK_SAMPLE_STRIDE 8u
#define OKV_TOPK_CAND_MAX      (4u * OKV_TOPK_MAX)
#define OKV_TOPK_PARALLEL_MIN  16384u /* scores in all below which a top-K runs on one thread */

/* The order key of a score alone: topk_key's upper 32 bits (higher score, higher key). */
static inline uint32_t topk_key32(float x) {
  x = x != x ? -INFINITY : x + 0.0f; /* NaN = -inf; -0 + 0 = +0 */
  uint32_t b;
  memcpy(&b, &x, 4);
  return b ^ ((uint32_t)((int32_t)b >> 31) | 0x80000000u); /* negative: all bits flipped; else the sign set */
}

/* The least and the greatest of a[0..m) (m >= 1). */
static void u32_range_base(const uint32_t *a, uint32_t m, uint32_t *lo, uint32_t *hi) {
  uint32_t l = a[0], h = a[0];
  for (uint32_t i = 1; i < m; i++) {
    l = a[i] < l ? a[i] : l;
    h = a[i] > h ? a[i] : h;
  }
  *lo = l;
  *hi = h;
}

/* Keeps the entries i of key[0..m) / pos[0..m) with key[i] >= floor, in order; returns how many. */
static uint32_t u32_keep_at_least_base(uint32_t *key, uint32_t *pos, uint32_t m, uint32_t floor) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < m; i++) {
    key[n] = key[i];
    pos[n] = pos[i];
    n += key[i] >= floor;
  }
  return n;
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx512f"))) static void u32_range_avx512(const uint32_t *a, uint32_t m, uint32_t *lo,
                                                                uint32_t *hi) {
  __m512i l = _mm512_set1_epi32((int)a[0]), h = l;
  uint32_t i = 0;
  for (; i + 16u <= m; i += 16u) {
    const __m512i v = _mm512_loadu_si512(a + i);
    l = _mm512_min_epu32(l, v);
    h = _mm512_max_epu32(h, v);
  }
  uint32_t tl = _mm512_reduce_min_epu32(l), th = _mm512_reduce_max_epu32(h);
  for (; i < m; i++) {
    tl = a[i] < tl ? a[i] : tl;
    th = a[i] > th ? a[i] : th;
  }
  *lo = tl;
  *hi = th;
}

__attribute__((target("avx512f"))) static uint32_t u32_keep_at_least_avx512(uint32_t *key, uint32_t *pos, uint32_t m,
                                                                            uint32_t floor) {
  const __m512i F = _mm512_set1_epi32((int)floor);
  uint32_t n = 0, i = 0;
  for (; i + 16u <= m; i += 16u) { /* n <= i: a whole-vector store at n ends within the vector just read */
    const __m512i k = _mm512_loadu_si512(key + i), p = _mm512_loadu_si512(pos + i);
    const __mmask16 keep = _mm512_cmpge_epu32_mask(k, F);
    _mm512_storeu_si512(key + n, _mm512_maskz_compress_epi32(keep, k));
    _mm512_storeu_si512(pos + n, _mm512_maskz_compress_epi32(keep, p));
    n += (uint32_t)__builtin_popcount(keep);
  }
  for (; i < m; i++) {
    key[n] = key[i];
    pos[n] = pos[i];
    n += key[i] >= floor;
  }
  return n;
}
#endif

static void u32_range(const uint32_t *a, uint32_t m, uint32_t *lo, uint32_t *hi) {
#if defined(__x86_64__) || defined(__i386__)
  if (okv_cpu_isa_active() >= OKV_CPU_ISA_AVX512) {
    u32_range_avx512(a, m, lo, hi);
    return;
  }
#endif
  u32_range_base(a, m, lo, hi);
}

static uint32_t u32_keep_at_least(uint32_t *key, uint32_t *pos, uint32_t m, uint32_t floor) {
#if defined(__x86_64__) || defined(__i386__)
  if (okv_cpu_isa_active() >= OKV_CPU_ISA_AVX512) return u32_keep_at_least_avx512(key, pos, m, floor);
#endif
  return u32_keep_at_least_base(key, pos, m, floor);
}

/* One most-significant-digit radix round over a[0..m), keys that share every bit above `top`: the 8-bit digit
 * (bits *sh..top, *sh = max(top - 7, 0); *mask its values) that holds the k-th largest key (1 <= *k <= m).
 * Returns it; *k becomes the k-th key's rank among that digit's keys, *in_digit their count. */
static uint32_t topk_kth_digit(const uint32_t *a, uint32_t m, int top, uint32_t *k, int *sh, uint32_t *mask,
                               uint32_t *in_digit) {
  uint32_t hist[256];
  *sh = top >= 7 ? top - 7 : 0;
  *mask = (2u << (top - *sh)) - 1u;
  memset(hist, 0, (size_t)(*mask + 1u) * sizeof hist[0]);
  for (uint32_t i = 0; i < m; i++) hist[(a[i] >> *sh) & *mask]++;
  uint32_t dg = *mask;
  for (; hist[dg] < *k; dg--) *k -= hist[dg]; /* the digits above dg hold fewer than k keys */
  *in_digit = hist[dg];
  return dg;
}

/* The k-th largest (1-based, 1 <= k <= m) of the keys a[0..m): topk_kth_digit's rounds from the highest bit in
 * which the keys differ, each keeping only the digit that holds the k-th. At most four rounds, each one pass
 * over the keys still in play; no compare depends on the order of the input (a heap fed scores that rise with
 * position would take a sift-down per score). a and tmp (m entries each) are overwritten. */
static uint32_t topk_key_select(uint32_t *a, uint32_t m, uint32_t k, uint32_t *tmp) {
  uint32_t lo, hi;
  u32_range(a, m, &lo, &hi);
  if (lo == hi) return lo;
  uint32_t *src = a, *dst = tmp;
  int top = 31 - __builtin_clz(lo ^ hi); /* the keys share every bit above `top` */
  for (;;) {
    int sh;
    uint32_t mask, in_digit;
    const uint32_t dg = topk_kth_digit(src, m, top, &k, &sh, &mask, &in_digit);
    uint32_t n = 0;
    for (uint32_t i = 0; i < m; i++) { /* branch-free: the digits are as often in as out */
      dst[n] = src[i];
      n += ((src[i] >> sh) & mask) == dg;
    }
    if (sh == 0 || n == 1u) return dst[k - 1u]; /* sh == 0: all equal; n == 1: k == 1 */
    uint32_t *t = src;
    src = dst;
    dst = t;
    m = n;
    top = sh - 1;
  }
}

/* The `rank`-th best (1-based) of every stride-th score of sc[0..n) (NaN = -inf), or -inf; rank <= OKV_TOPK_MAX.
 * The samples' total-order keys go through the same min-heap as the top-K itself. */
static float topk_sample_threshold(const float *sc, uint32_t n, uint32_t rank) {
  uint64_t h[OKV_TOPK_MAX];
  uint32_t cnt = 0, b = 0;
  for (; b < n && cnt < rank; b += OKV_TOPK_SAMPLE_STRIDE) h[cnt++] = topk_key(sc[b], b);
  if (cnt < rank) return -INFINITY;
  for (uint32_t i = cnt / 2u; i-- > 0;) heap_down(h, cnt, i);
  /* A score below the heap minimum's (or a NaN) has a smaller key: skipped on one float compare. */
  float tf = topk_key_score(h[0]);
  for (; b < n; b += OKV_TOPK_SAMPLE_STRIDE) {
    if (!(sc[b] >= tf)) continue;
    uint64_t key = topk_key(sc[b], b);
    if (key > h[0]) {
      h[0] = key;
      heap_down(h, cnt, 0);
      tf = topk_key_score(h[0]);
    }
  }
  return topk_key_score(h[0]);
}

/* The candidates of a sampled threshold t0: positions i of sc[0..n) with sc[i] >= t0 (never a NaN) and not
 * in the exclude bitmap `excl` (NULL: none), in ascending order, their order keys in ck and positions in cp
 * (OKV_TOPK_CAND_MAX entries at most). Returns how many it found, stopping at OKV_TOPK_CAND_MAX + 1 (too many
 * for the radix sort). This is the scalar form, from position i0 with m0 candidates already listed (the
 * tail of the 16-wide forms below, which topk_collect picks by ISA). */
static uint32_t topk_collect_from(const float *sc, uint32_t i0, uint32_t n, float t0, const uint64_t *excl,
                                  uint32_t *ck, uint32_t *cp, uint32_t m0) {
  uint32_t m = m0;
  for (uint32_t i = i0; i < n && m <= OKV_TOPK_CAND_MAX; i++) {
    if (!(sc[i] >= t0) || (excl != NULL && (excl[i >> 6] >> (i & 63u) & 1u))) continue;
    if (m < OKV_TOPK_CAND_MAX) {
      ck[m] = topk_key32(sc[i]);
      cp[m] = i;
    }
    m++;
  }
  return m;
}

/* The set bits of a 16-score comparison mask at position i, listed (topk_collect_from's rule). */
static inline bool topk_list_bits(const float *sc, uint32_t i, uint32_t bits, const uint64_t *excl, uint32_t *ck,
                                  uint32_t *cp, uint32_t *m) {
  if (excl != NULL) bits &= ~(uint32_t)(excl[i >> 6] >> (i & 63u)) & 0xFFFFu; /* i % 16 == 0: one word */
  for (; bits != 0; bits &= bits - 1u) {
    const uint32_t j = i + (uint32_t)__builtin_ctz(bits);
    if (*m < OKV_TOPK_CAND_MAX) {
      ck[*m] = topk_key32(sc[j]);
      cp[*m] = j;
    }
    if (++*m > OKV_TOPK_CAND_MAX) return false;
  }
  return true;
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx512f"))) static uint32_t topk_collect_avx512(const float *sc, uint32_t n, float t0,
                                                                       const uint64_t *excl, uint32_t *ck,
                                                                       uint32_t *cp) {
  const __m512 T = _mm512_set1_ps(t0);
  uint32_t m = 0, i = 0;
  for (; i + 16u <= n; i += 16u) {
    const uint32_t bits = (uint32_t)_mm512_cmp_ps_mask(_mm512_loadu_ps(sc + i), T, _CMP_GE_OQ);
    if (bits != 0 && !topk_list_bits(sc, i, bits, excl, ck, cp, &m)) return m;
  }
  return topk_collect_from(sc, i, n, t0, excl, ck, cp, m);
}

__attribute__((target("avx2"))) static uint32_t topk_collect_avx2(const float *sc, uint32_t n, float t0,
                                                                  const uint64_t *excl, uint32_t *ck, uint32_t *cp) {
  const __m256 T = _mm256_set1_ps(t0);
  uint32_t m = 0, i = 0;
  for (; i + 16u <= n; i += 16u) {
    const uint32_t lo = (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(sc + i), T, _CMP_GE_OQ));
    const uint32_t hi = (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(sc + i + 8), T, _CMP_GE_OQ));
    const uint32_t bits = lo | hi << 8;
    if (bits != 0 && !topk_list_bits(sc, i, bits, excl, ck, cp, &m)) return m;
  }
  return topk_collect_from(sc, i, n, t0, excl, ck, cp, m);
}
#endif

static uint32_t topk_collect(const float *sc, uint32_t n, float t0, const uint64_t *excl, uint32_t *ck, uint32_t *cp) {
#if defined(__x86_64__) || defined(__i386__)
  switch (okv_cpu_isa_active()) {
    case OKV_CPU_ISA_AVX512: return topk_collect_avx512(sc, n, t0, excl, ck, cp);
    case OKV_CPU_ISA_AVX2: return topk_collect_avx2(sc, n, t0, excl, ck, cp);
    default: break;
  }
#endif
  return topk_collect_from(sc, 0, n, t0, excl, ck, cp, 0);
}

/* Sorts m candidates (order keys `key`, positions `pos`, listed in ascending position order) by descending
 * key, stably, so that equal keys stay in ascending position order: the top-K's total order. An LSD radix
 * sort on four 8-bit digits that skips a digit all candidates share (the sign and high exponent bits of
 * scores of one magnitude). tk / tp: scratch of m entries. Result in key / pos. */
static void topk_radix_sort(uint32_t *key, uint32_t *pos, uint32_t *tk, uint32_t *tp, uint32_t m) {
  if (m < 2u) return;
  uint32_t hist[4][256];
  memset(hist, 0, sizeof hist);
  for (uint32_t i = 0; i < m; i++) {
    const uint32_t x = ~key[i]; /* ascending on ~key: descending on key */
    hist[0][x & 255u]++;
    hist[1][(x >> 8) & 255u]++;
    hist[2][(x >> 16) & 255u]++;
    hist[3][x >> 24]++;
  }
  for (uint32_t dg = 0; dg < 4; dg++) {
    uint32_t *h = hist[dg], shift = 8u * dg, sum = 0;
    if (h[(~key[0] >> shift) & 255u] == m) continue; /* one bucket: this digit orders nothing */
    for (uint32_t b = 0; b < 256; b++) {
      uint32_t c = h[b];
      h[b] = sum;
      sum += c;
    }
    for (uint32_t i = 0; i < m; i++) {
      uint32_t o = h[(~key[i] >> shift) & 255u]++;
      tk[o] = key[i];
      tp[o] = pos[i];
    }
    memcpy(key, tk, (size_t)m * sizeof *key);
    memcpy(pos, tp, (size_t)m * sizeof *pos);
  }
}

/* A segment's ascending top-K taken while its scores are produced, each chunk while it is in L1 (a separate
 * top-K reads them back from further out, twice: samples, then candidates). The scores arrive in position
 * order; a buffer of cap entries holds the order keys and positions of those that may still be in the top-K,
 * in position order. Until it first fills, every score enters; each time it fills, it is pruned to the keys
 * that can still be among the top k (topk_stream_prune), and from then on only a key above the bar that leaves
 * enters (a key equal to the k-th comes later, so it loses the tie). The end selects the k-th key exactly.
 * The result is topk_segment's with `ascending`, bit for bit. */
#define OKV_TOPK_STREAM_CAP (4u * OKV_TOPK_MAX + 32u)
typedef struct topk_stream_t {
  uint32_t key[OKV_TOPK_STREAM_CAP + 16u], pos[OKV_TOPK_STREAM_CAP + 16u]; /* 16 spare: whole-vector stores */
  uint32_t tk[OKV_TOPK_STREAM_CAP], tp[OKV_TOPK_STREAM_CAP];               /* the selection's scratch */
  uint64_t excl[65536u / 64u + 1u];                                        /* one spare word: 16-bit reads */
  uint32_t k, cap, n, kt;
  bool open, has_excl;
} topk_stream_t;

/* Starts segment u of td (td->k <= OKV_TOPK_MAX, seg_n <= 65,536). */
static void topk_stream_begin(topk_stream_t *t, const okv_topk_desc_t *td, uint32_t u) {
  t->k = td->k;
  t->cap = 4u * td->k + 32u; /* room for 16 more after a prune (<= cap / 2) or a compaction (k) */
  t->n = 0;
  t->kt = 0;
  t->open = true;
  t->has_excl = td->excl_offsets != NULL && td->excl_offsets[u + 1] > td->excl_offsets[u];
  if (t->has_excl) {
    memset(t->excl, 0, ((size_t)td->seg_n[u] + 63u) / 64u * sizeof(uint64_t) + sizeof(uint64_t));
    for (uint32_t i = td->excl_offsets[u]; i < td->excl_offsets[u + 1]; i++)
      t->excl[td->excl_blocks[i] >> 6] |= 1ull << (td->excl_blocks[i] & 63u);
  }
}

/* Keeps the top k of the n > k buffered keys, in position order; later keys must beat the k-th. */
static void topk_stream_compact(topk_stream_t *t) {
  memcpy(t->tk, t->key, (size_t)t->n * sizeof t->tk[0]);
  const uint32_t kth = topk_key_select(t->tk, t->n, t->k, t->tp);
  uint32_t above = 0, m = 0;
  for (uint32_t i = 0; i < t->n; i++) above += t->key[i] > kth;
  uint32_t need = t->k - above; /* of the keys equal to the k-th, the first (lowest positions) */
  for (uint32_t i = 0; i < t->n; i++) {
    const uint32_t x = t->key[i];
    const bool keep = x > kth || (x == kth && need > 0);
    need -= x == kth && need > 0;
    t->key[m] = x;
    t->pos[m] = t->pos[i];
    m += keep;
  }
  t->n = m;
  t->kt = kth;
  t->open = false;
}

/* Makes room in a full buffer (n > k) at a third of the exact compaction's cost: one radix round finds the
 * 8-bit digit (of the highest bits in which the keys differ) that holds the k-th key, and the keys of that
 * digit and above stay, at least k of them; later keys must reach the digit's least key. A key below it has k
 * keys above it already, so it can never be in the top-K. When that frees less than half the buffer (keys
 * bunched in one digit), the exact compaction. */
static void topk_stream_prune(topk_stream_t *t) {
  uint32_t lo, hi;
  u32_range(t->key, t->n, &lo, &hi);
  if (lo != hi) {
    const int top = 31 - __builtin_clz(lo ^ hi);
    int sh;
    uint32_t rank = t->k, mask, in_digit;
    const uint32_t dg = topk_kth_digit(t->key, t->n, top, &rank, &sh, &mask, &in_digit);
    const uint32_t kept = t->k - rank + in_digit; /* the digits above dg, and dg's */
    const uint64_t floor = ((uint64_t)hi >> (top + 1) << (top + 1)) | ((uint64_t)dg << sh); /* the digit's least */
    if (floor > 0 && kept <= t->cap / 2u) {
      t->n = u32_keep_at_least(t->key, t->pos, t->n, (uint32_t)floor);
      t->kt = (uint32_t)floor - 1u;
      t->open = false;
      return;
    }
  }
  topk_stream_compact(t);
}

/* Bits p..p+15 of the exclude bitmap. */
static inline uint32_t topk_stream_excl16(const topk_stream_t *t, uint32_t p) {
  const uint32_t w = p >> 6, sh = p & 63u;
  uint64_t v = t->excl[w] >> sh;
  if (sh > 48u) v |= t->excl[w + 1u] << (64u - sh);
  return (uint32_t)v & 0xFFFFu;
}

/* Scores sc[0..cnt) at positions p0.. (the positions after the last ones fed), one at a time. */
static void topk_stream_add_base(topk_stream_t *t, const float *sc, uint32_t p0, uint32_t cnt) {
  for (uint32_t i = 0; i < cnt; i++) {
    const uint32_t p = p0 + i, x = topk_key32(sc[i]);
    if ((!t->open && x <= t->kt) || (t->has_excl && (t->excl[p >> 6] >> (p & 63u) & 1u))) continue;
    if (t->n >= t->cap) {
      topk_stream_prune(t);
      if (x <= t->kt) continue;
    }
    t->key[t->n] = x;
    t->pos[t->n] = p;
    t->n++;
  }
}

#if defined(__x86_64__) || defined(__i386__)
/* The same, 16 at a time: the order keys computed as topk_key32 does, the entering ones compressed into the
 * buffer. */
__attribute__((target("avx512f"))) static void topk_stream_add_avx512(topk_stream_t *t, const float *sc, uint32_t p0,
                                                                      uint32_t cnt) {
  const __m512i SIGN = _mm512_set1_epi32((int)0x80000000u),
                IOTA = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  uint32_t i = 0;
  for (; i + 16u <= cnt; i += 16u) {
    __m512 x = _mm512_add_ps(_mm512_loadu_ps(sc + i), _mm512_setzero_ps()); /* -0 + 0 = +0 */
    x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x, _mm512_set1_ps(-INFINITY));
    const __m512i b = _mm512_castps_si512(x);
    const __m512i key = _mm512_xor_si512(b, _mm512_or_si512(_mm512_srai_epi32(b, 31), SIGN));
    const uint32_t ex = t->has_excl ? topk_stream_excl16(t, p0 + i) : 0u;
    __mmask16 m = (__mmask16)(t->open ? 0xFFFFu : _mm512_cmpgt_epu32_mask(key, _mm512_set1_epi32((int)t->kt)));
    m &= (__mmask16)~ex;
    if (m == 0) continue;
    if (t->n + 16u > t->cap) {
      topk_stream_prune(t);
      m &= _mm512_cmpgt_epu32_mask(key, _mm512_set1_epi32((int)t->kt));
    }
    _mm512_storeu_si512(t->key + t->n, _mm512_maskz_compress_epi32(m, key));
    _mm512_storeu_si512(t->pos + t->n,
                        _mm512_maskz_compress_epi32(m, _mm512_add_epi32(_mm512_set1_epi32((int)(p0 + i)), IOTA)));
    t->n += (uint32_t)__builtin_popcount(m);
  }
  topk_stream_add_base(t, sc + i, p0 + i, cnt - i);
}
#endif

static void topk_stream_add(topk_stream_t *t, const float *sc, uint32_t p0, uint32_t cnt) {
#if defined(__x86_64__) || defined(__i386__)
  if (okv_cpu_isa_active() >= OKV_CPU_ISA_AVX512) {
    topk_stream_add_avx512(t, sc, p0, cnt);
    return;
  }
#endif
  topk_stream_add_base(t, sc, p0, cnt);
}

/* Segment u's top-K into out_indices[u * k ..] in ascending position order, through td's index map if any
 * (UINT32_MAX after the last), and its count. */
static void topk_stream_end(topk_stream_t *t, const okv_topk_desc_t *td, uint32_t u, uint32_t *out_indices,
                            uint32_t *out_counts) {
  if (t->n > t->k) topk_stream_compact(t);
  uint32_t *dst = out_indices + (size_t)u * t->k;
  const uint32_t *map = td->index_map != NULL ? td->index_map + td->seg_score_first[u] : NULL;
  if (map != NULL)
    for (uint32_t i = 0; i < t->n; i++) dst[i] = map[t->pos[i]];
  else
    memcpy(dst, t->pos, (size_t)t->n * sizeof *dst);
  for (uint32_t i = t->n; i < t->k; i++) dst[i] = UINT32_MAX;
  if (out_counts != NULL) out_counts[u] = t->n;
}

static void topk_segment(const okv_topk_desc_t *d, const float *scores, uint32_t u, uint32_t *out_indices,
                         uint32_t *out_counts);

void okv_cpu_topk(const okv_topk_desc_t *d, const float *scores, uint32_t *out_indices, uint32_t *out_counts,
                  int n_threads) {
  const int nt = cpu_threads(n_threads);
  const long n_seg = (long)d->n_segments;
  /* A top-K over few scores in all (a second pass's candidates: K + margin per head) takes a few microseconds on
   * one thread, less than waking a second one costs. */
  uint64_t n_all = 0;
  for (long u = 0; u < n_seg && n_all < OKV_TOPK_PARALLEL_MIN; u++) n_all += d->seg_n[u];
  const bool par = nt > 1 && n_seg > 1 && n_all >= OKV_TOPK_PARALLEL_MIN;
  okv_unused_threads(nt);
  (void)par;
OKV_OMP(omp parallel for num_threads(nt) schedule(dynamic, 1) if (par))
for (long ul = 0; ul < n_seg; ul++) topk_segment(d, scores, (uint32_t)ul, out_indices, out_counts);
}

/* An ascending top-K of one segment through the streaming form (topk_stream_t: one pass over the scores). */
static void topk_segment_stream(const okv_topk_desc_t *d, const float *scores, uint32_t u, uint32_t *out_indices,
                                uint32_t *out_counts) {
  topk_stream_t t;
  topk_stream_begin(&t, d, u);
  topk_stream_add(&t, scores + d->seg_score_first[u], 0, d->seg_n[u]);
  topk_stream_end(&t, d, u, out_indices, out_counts);
}

/* Segment u of a top-K (okv_cpu_topk's contract for that segment alone). */
static void topk_segment(const okv_topk_desc_t *d, const float *scores, uint32_t u, uint32_t *out_indices,
                         uint32_t *out_counts) {
  if (d->k == 0) { /* nothing to keep (the HAL refuses k = 0; a direct call gets an empty result) */
    if (out_counts != NULL) out_counts[u] = 0;
    return;
  }
  if (d->ascending) { /* the set alone, in position order: streamed */
    topk_segment_stream(d, scores, u, out_indices, out_counts);
    return;
  }
  const uint32_t k = d->k, n = d->seg_n[u];
  const float *sc = scores + d->seg_score_first[u];
  uint64_t excl[65536u / 64u];
  uint64_t heap[OKV_TOPK_MAX];
  heap[0] = 0;
  bool has_excl = d->excl_offsets != NULL && d->excl_offsets[u + 1] > d->excl_offsets[u];
  if (has_excl) {
    memset(excl, 0, ((size_t)n + 63u) / 64u * sizeof(uint64_t));
    for (uint32_t i = d->excl_offsets[u]; i < d->excl_offsets[u + 1]; i++)
      excl[d->excl_blocks[i] >> 6] |= 1ull << (d->excl_blocks[i] & 63u);
  }
  uint32_t cnt = 0, b = 0;
  /* Candidates for the radix sort: order keys and positions, in ascending position order. */
  uint32_t ck[OKV_TOPK_CAND_MAX], cp[OKV_TOPK_CAND_MAX], tk[OKV_TOPK_CAND_MAX], tp[OKV_TOPK_CAND_MAX];
  uint32_t m = 0;
  bool radix = false;
  /* Long segments: the candidates at or above a sampled threshold, when they are enough (see above). */
  if (n >= 16u * k && n / OKV_TOPK_SAMPLE_STRIDE >= 4u * k) {
    const uint32_t rank = 2u * k / OKV_TOPK_SAMPLE_STRIDE + 1u;
    const float t0 = topk_sample_threshold(sc, n, rank);
    if (t0 > -INFINITY) {
      m = topk_collect(sc, n, t0, has_excl ? excl : NULL, ck, cp);
      radix = m >= k && m <= OKV_TOPK_CAND_MAX;
    }
  }
  /* Segments of at most OKV_TOPK_CAND_MAX blocks: every block not excluded is a candidate. */
  if (!radix && n <= OKV_TOPK_CAND_MAX) {
    m = 0;
    for (uint32_t i = 0; i < n; i++) {
      if (has_excl && (excl[i >> 6] >> (i & 63u) & 1u)) continue;
      ck[m] = topk_key32(sc[i]);
      cp[m] = i;
      m++;
    }
    radix = true;
  }
  if (radix) { /* sorted: the first k are the top-K in descending order */
    topk_radix_sort(ck, cp, tk, tp, m);
    for (; cnt < k && cnt < m; cnt++) heap[cnt] = ((uint64_t)ck[cnt] << 32) | (uint64_t)(~cp[cnt]);
    b = n; /* the plain scan below has nothing left */
  }
  /* Otherwise a min-heap: fill it with the first k blocks, then keep the k best. */
  for (; b < n && cnt < k; b++) {
    if (has_excl && (excl[b >> 6] >> (b & 63u) & 1u)) continue;
    heap[cnt++] = topk_key(sc[b], b);
  }
  if (!radix)
    for (uint32_t i = cnt / 2u; i-- > 0;) heap_down(heap, cnt, i);
  if (cnt == k && !radix) {
    uint64_t thr = heap[0];
    float tf = topk_key_score(thr);
    for (; b < n; b++) {
      /* Sixteen scores below the threshold's score at a time are skipped (a later block with an equal
       * score loses the tie, so only >= can enter); NaN compares false, as its -infinity key would. */
      if ((b & 15u) == 0 && n - b >= 16u) {
        int any = 0;
        for (uint32_t i = 0; i < 16u; i++) any |= sc[b + i] >= tf;
        if (!any) {
          b += 15u;
          continue;
        }
      }
      uint64_t key = topk_key(sc[b], b);
      if (key <= thr) continue;
      if (has_excl && (excl[b >> 6] >> (b & 63u) & 1u)) continue;
      heap[0] = key;
      heap_down(heap, cnt, 0);
      thr = heap[0];
      tf = topk_key_score(thr);
    }
  }
  if (!radix) /* heap sort: popping the minimum to the end leaves descending order */
    for (uint32_t r = cnt; r > 1; r--) {
      uint64_t top = heap[0];
      heap[0] = heap[r - 1u];
      heap[r - 1u] = top;
      heap_down(heap, r - 1u, 0);
    }
  uint32_t *dst = out_indices + (size_t)u * k;
  const uint32_t *map = d->index_map != NULL ? d->index_map + d->seg_score_first[u] : NULL;
  for (uint32_t i = 0; i < cnt; i++) dst[i] = map ? map[~(uint32_t)heap[i]] : ~(uint32_t)heap[i];
  for (uint32_t i = cnt; i < k; i++) dst[i] = UINT32_MAX;
  if (out_counts != NULL) out_counts[u] = cnt;
}

/* ---- fused c4 scoring + top-K ---- */

bool okv_cpu_score_topk_fusable(const okv_score_desc_t *sd, const okv_topk_desc_t *td, int n_threads) {
  const uint32_t U = sd->n_seqs * sd->n_kv_heads;
  const uint32_t nt = (uint32_t)cpu_threads(n_threads);
  if (sd->summary_dtype != OKV_DTYPE_C4 || sd->n_ranges == 0 || sd->list_blocks != NULL) return false;
  if (td->n_segments != U || td->index_map != NULL || U < 2u * nt) return false;
  for (uint32_t r = 0; r < sd->n_ranges; r++) {
    const uint32_t u = sd->range_seg[r];
    if (u >= U || (r > 0 && u < sd->range_seg[r - 1])) return false;
    const uint64_t f = sd->range_score_first[r], tf = td->seg_score_first[u];
    if (f < tf || f - tf + sd->range_n_blocks[r] > td->seg_n[u]) return false;
  }
  return true;
}

/* The first range of segment u or later (range_seg non-decreasing). */
static uint32_t ranges_lower_bound(const okv_score_desc_t *d, uint32_t u) {
  uint32_t lo = 0, hi = d->n_ranges;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2u;
    if (d->range_seg[mid] < u)
      lo = mid + 1u;
    else
      hi = mid;
  }
  return lo;
}

/* Whether segment u's ranges score its top-K span [0, seg_n) whole, in position order, once: then its top-K
 * can be taken as the scores arrive. */
static bool topk_stream_covers(const okv_score_desc_t *sd, const okv_topk_desc_t *td, uint32_t u, uint32_t r0) {
  uint64_t next = td->seg_score_first[u];
  for (uint32_t r = r0; r < sd->n_ranges && sd->range_seg[r] == u; r++) {
    if (sd->range_score_first[r] != next) return false;
    next += sd->range_n_blocks[r];
  }
  return next - td->seg_score_first[u] == td->seg_n[u];
}

bool okv_cpu_predict_fusable(const okv_cpu_predict_t *p, int n_threads) {
  const okv_score_desc_t *sd = p->sd, *sd2 = p->sd2;
  const okv_topk_desc_t *td = p->td, *td2 = p->td2;
  if (!okv_cpu_score_topk_fusable(sd, td, n_threads) || !td->ascending || td->k == 0) return false;
  const uint32_t U = sd->n_seqs * sd->n_kv_heads;
  if (!okv_cpu_score_list_direct(sd2) || sd2->n_seqs * sd2->n_kv_heads != U || sd2->list_stride != td->k) return false;
  if (td2->n_segments != U || td2->k == 0 || td2->k > OKV_TOPK_MAX) return false;
  for (uint32_t u = 0; u < U; u++) {
    if (sd2->seg_n_blocks[u] > td->k || td2->seg_score_first[u] != sd2->seg_score_first[u] ||
        td2->seg_n[u] > sd2->seg_n_blocks[u])
      return false;
    /* the index map read for u (td's output at td2's positions) lies in u's own candidates */
    if (td2->seg_score_first[u] < (uint64_t)u * td->k ||
        td2->seg_score_first[u] + td2->seg_n[u] > (uint64_t)(u + 1u) * td->k)
      return false;
    if (u > 0 && sd2->seg_score_first[u - 1] + sd2->seg_n_blocks[u - 1] > sd2->seg_score_first[u]) return false;
  }
  return true;
}

/* Per segment u: its first pass and top-K (streamed as the scores arrive when its ranges cover the span), then
 * (p->sd2 set) its exact pass and final top-K. */
void okv_cpu_predict(const okv_cpu_predict_t *p, int n_threads) {
  const okv_score_desc_t *sd = p->sd;
  const okv_topk_desc_t *td = p->td;
  const int nt = cpu_threads(n_threads);
  const long U = (long)sd->n_seqs * sd->n_kv_heads;
  const bool stream = td->ascending && td->k >= 1u && td->k <= OKV_TOPK_MAX;
  okv_topk_desc_t td2;
  if (p->sd2 != NULL) {
    td2 = *p->td2;
    td2.index_map = p->cand; /* the candidates: position i of segment u maps to block cand[u * k + i] */
  }
  okv_unused_threads(nt);
  OKV_OMP(omp parallel num_threads(nt) if (nt > 1 && U > 1)) {
    c4_thread_t t;
    c4_thread_init(&t, sd);
    topk_stream_t ts;
    list_thread_t lw;
OKV_OMP(omp for schedule(dynamic, 1))
for (long ul = 0; ul < U; ul++) {
  const uint32_t u = (uint32_t)ul, r0 = ranges_lower_bound(sd, u);
  const bool st = stream && td->seg_n[u] <= 65536u && topk_stream_covers(sd, td, u, r0);
  if (st) topk_stream_begin(&ts, td, u);
  for (uint32_t r = r0; r < sd->n_ranges && sd->range_seg[r] == u; r++) {
    const score_job_t job = score_job(sd, r);
    for (uint32_t b0 = 0; b0 < job.n; b0 += OKV_SCORE_CHUNK) {
      const uint32_t b1 = job.n - b0 > OKV_SCORE_CHUNK ? b0 + OKV_SCORE_CHUNK : job.n;
      c4_score_chunk(sd, p->q, p->summaries, p->scores, job, b0, b1, &t);
      if (st)
        topk_stream_add(&ts, p->scores + job.score_first + b0,
                        (uint32_t)(job.score_first - td->seg_score_first[u]) + b0, b1 - b0);
    }
  }
  if (st)
    topk_stream_end(&ts, td, u, p->cand, p->cand_counts);
  else
    topk_segment(td, p->scores, u, p->cand, p->cand_counts);
  if (p->sd2 != NULL) {
    score_list_segment(p->sd2, p->q2, p->summaries2, p->cand, p->scores2, u, &lw);
    topk_segment(&td2, p->scores2, u, p->out, p->out_counts);
  }
}
  }
}

void okv_cpu_score_topk(const okv_score_desc_t *sd, const float *q, const void *summaries, float *scores,
                        const okv_topk_desc_t *td, uint32_t *out_indices, uint32_t *out_counts, int n_threads) {
  const okv_cpu_predict_t p = {.sd = sd,
                               .q = q,
                               .summaries = summaries,
                               .scores = scores,
                               .td = td,
                               .cand = out_indices,
                               .cand_counts = out_counts};
  okv_cpu_predict(&p, n_threads);
}

/* ---- selection on slot tables (kernels/okv_select_rule.h) ---- */

void okv_cpu_select(const okv_select_desc_t *d, void *tables, const uint32_t *predicted, const uint32_t *counts,
                    uint32_t *plan, uint32_t *result, int n_threads) {
  const int nt = cpu_threads(n_threads);
  const long n_heads = (long)d->n_heads;
  const uint64_t tb = okv_slot_table_bytes(d->n_slots, d->bitmap_words);
  okv_unused_threads(nt);
OKV_OMP(omp parallel for num_threads(nt) schedule(static) if (nt > 1 && n_heads >= 64))
for (long hl = 0; hl < n_heads; hl++) {
  uint32_t h = (uint32_t)hl;
  uint32_t n_pred = counts[h] < d->predicted_stride ? counts[h] : d->predicted_stride;
  okv_select_rule_head((uint32_t *)(void *)((char *)tables + h * tb), d->n_slots, d->bitmap_words, d->budget_blocks,
                       d->step, predicted + (uint64_t)h * d->predicted_stride, n_pred, d->active_block[h], d->cap[h],
                       plan + (uint64_t)h * d->plan_stride * OKV_SELECT_PLAN_U32S,
                       result + (uint64_t)h * OKV_SELECT_RESULT_U32S);
}
}

void okv_cpu_slot_commit(const okv_slot_commit_desc_t *d, void *tables, const uint32_t *plan, const uint32_t *result) {
  const uint64_t tb = okv_slot_table_bytes(d->n_slots, d->bitmap_words);
  for (uint32_t h = 0; h < d->n_heads; h++) {
    uint32_t n = result[(uint64_t)h * OKV_SELECT_RESULT_U32S];
    okv_commit_rule_head((uint32_t *)(void *)((char *)tables + h * tb), d->n_slots, d->bitmap_words,
                         plan + (uint64_t)h * d->plan_stride * OKV_SELECT_PLAN_U32S,
                         n < d->plan_stride ? n : d->plan_stride, d->landed[h] != 0);
  }
}
