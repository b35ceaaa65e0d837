// OasisKV GPU kernels: one source for CUDA (nvcc --fatbin) and HIP
// (hipcc --genco), see kernels/okv_gpu_compat.h. Entry points are extern "C"
// so the host backends find them by name with cuModuleGetFunction /
// hipModuleGetFunction; each takes one argument struct (kernels/okv_gpu_args.h).
// Semantics are those documented in include/oasiskv/kernels.h and hal.h.
// Block size (OKV_BLOCK_TOKENS), dtype codes (okv_dtype_t), the top-K limit
// (OKV_TOPK_MAX) and block-copy pairs (okv_block_copy_t) come from those
// public headers through okv_gpu_args.h, exactly as the host sees them.
#include "okv_gpu_compat.h"
#include "okv_gpu_args.h"

// The device side of the layout pins of okv_gpu_args.h (the host checks the
// same table in backends/gpu/gpu_launch.c).
OKV_GPU_ARGS_PIN_LAYOUT()

// The slot-table rules (selection, commit, attention's table mode), shared with the CPU backend.
#define OKV_SELECT_RULE_FN OKV_DEVICE
#include "okv_select_rule.h"

#define OKV_NEG_INF (-__int_as_float(0x7f800000))
#define OKV_POS_INF (__int_as_float(0x7f800000))

/* ---- Element conversion (exact: every f16/bf16 value is representable in f32). ---- */

OKV_DEVICE float okv_f16_bits_to_f32(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  const uint32_t m = h & 0x3ffu;
  if (e == 0) {
    const float v = (float)m * 5.9604644775390625e-8f; /* m * 2^-24, exact */
    return sign ? -v : v;
  }
  if (e == 31) return __uint_as_float(sign | 0x7f800000u | (m << 13));
  return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}

OKV_DEVICE float okv_load_elem(const unsigned char *base, uint64_t i, uint32_t dtype) {
  if (dtype == (uint32_t)OKV_DTYPE_F32) return ((const float *)base)[i];
  const uint32_t bits = ((const uint16_t *)base)[i];
  if (dtype == (uint32_t)OKV_DTYPE_BF16) return __uint_as_float(bits << 16);
  return okv_f16_bits_to_f32(bits);
}

// Directed narrowing of a summary bound to f16 / bf16 bits (dtype), toward
// +infinity when `up`, else toward -infinity, so a narrowed min stays <= and a
// narrowed max >= every key it bounds. Computed by truncating the magnitude
// and stepping one unit away from zero when inexact and the direction asks
// for it (the host library steps from round-to-nearest instead: two
// independent paths that the tests compare). NaN stays NaN, -0 stays -0.
OKV_DEVICE uint32_t okv_narrow_bits(float x, uint32_t dtype, bool up) {
  const uint32_t u = __float_as_uint(x), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return dtype == (uint32_t)OKV_DTYPE_BF16 ? ((u >> 16) | 0x0040u) : (sign | 0x7e00u);
  uint32_t m; /* magnitude truncated toward zero */
  bool inexact;
  if (dtype == (uint32_t)OKV_DTYPE_BF16) {
    m = a >> 16;
    inexact = (a & 0xffffu) != 0;
  } else if (a == 0x7f800000u) {
    m = 0x7c00u;
    inexact = false;
  } else if (a >= 0x47800000u) { /* >= 65536: beyond the largest finite f16 (65504) */
    m = 0x7bffu;
    inexact = true;
  } else if (a >= 0x38800000u) { /* f16 normal: rebias the exponent, drop 13 mantissa bits */
    const uint32_t r = a - 0x38000000u;
    m = r >> 13;
    inexact = (r & 0x1fffu) != 0;
  } else { /* f16 subnormal or zero: m * 2^-24 */
    const uint32_t e = a >> 23;
    if (a == 0) {
      m = 0;
      inexact = false;
    } else if (e <= 94u) { /* below 2^-32 (f32 subnormals included) */
      m = 0;
      inexact = true;
    } else {
      const uint32_t mant = (a & 0x7fffffu) | 0x800000u, shift = 126u - e; /* 14..31 */
      m = mant >> shift;
      inexact = (mant & ((1u << shift) - 1u)) != 0;
    }
  }
  const bool away = inexact && (sign ? !up : up); /* a larger magnitude is the wanted side */
  return sign | (m + (away ? 1u : 0u));
}

// Stores bound x as element i of a summary array of `dtype` (f32: exact).
OKV_DEVICE void okv_store_bound(unsigned char *base, uint64_t i, uint32_t dtype, float x, bool up) {
  if (dtype == (uint32_t)OKV_DTYPE_F32) {
    ((float *)base)[i] = x;
  } else {
    ((uint16_t *)base)[i] = (uint16_t)okv_narrow_bits(x, dtype, up);
  }
}

// Bytes per element of a dtype code.
OKV_DEVICE uint32_t okv_elem_bytes(uint32_t dtype) { return dtype == (uint32_t)OKV_DTYPE_F32 ? 4u : 2u; }

// Total-order key of a score: larger score -> larger key. NaN counts as
// -infinity and -0 as +0, so equal scores tie and fall back to the index.
OKV_DEVICE uint32_t okv_score_key(float f) {
  if (f != f) f = OKV_NEG_INF;
  if (f == 0.0f) f = 0.0f;
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// 8-bit summaries (OKV_DTYPE_Q8, include/oasiskv/kernels.h): f32 lo, f32 step,
// u8 min codes [D], u8 max codes [D], padded to 8 bytes. Same arithmetic as the
// CPU backend, so both give the same codes and scores.
OKV_DEVICE uint64_t okv_q8_summary_bytes(uint32_t D) { return 8ull + ((2ull * D + 7ull) & ~7ull); }

// lo = min of the mins, step = (max of the maxes - lo) / 255 rounded up until
// lo + 255 * step covers the max; step = 0 when the box is a point, -1 when not finite.
OKV_DEVICE void okv_q8_params(const float *mn, const float *mx, uint32_t D, float *lo_out, float *step_out) {
  float lo = OKV_POS_INF, hi = OKV_NEG_INF;
  for (uint32_t d = 0; d < D; ++d) {
    lo = mn[d] < lo ? mn[d] : lo;
    hi = mx[d] > hi ? mx[d] : hi;
  }
  float step = 0.0f;
  if (!(lo > OKV_NEG_INF && lo < OKV_POS_INF && hi > OKV_NEG_INF && hi < OKV_POS_INF && hi - lo < OKV_POS_INF)) {
    step = -1.0f;
    lo = 0.0f;
  } else if (hi > lo) {
    step = (float)(((double)hi - (double)lo) / 255.0);
    while ((double)lo + 255.0 * (double)step < (double)hi) step = nextafterf(step, OKV_POS_INF);
  }
  *lo_out = lo;
  *step_out = step;
}

// Code of bound v: min codes round down (lo + code * step <= v), max codes up.
OKV_DEVICE unsigned char okv_q8_code(float v, float lo, float step, bool up) {
  if (!(step > 0.0f)) return 0;
  const double x = ((double)v - (double)lo) / (double)step;
  double c = up ? ceil(x) : floor(x);
  if (up) {
    while (c < 255.0 && (double)lo + c * (double)step < (double)v) c += 1.0;
  } else {
    while (c > 0.0 && (double)lo + c * (double)step > (double)v) c -= 1.0;
  }
  return (unsigned char)(c < 0.0 ? 0.0 : c > 255.0 ? 255.0 : c);
}

// 4-bit block centres (OKV_DTYPE_C4, include/oasiskv/kernels.h): tiles of 16 blocks, f32 lo[16], f32 step[16],
// f32 width[16], then per 4 bytes of packed codes (P per block) 16 lanes x 4 bytes. Block b: lane b % 16 of tile
// b / 16. Same encoding arithmetic as the CPU backend, so the same codes.
OKV_DEVICE uint32_t okv_c4_packed_bytes(uint32_t D) { return (((D + 1u) / 2u) + 3u) & ~3u; }
OKV_DEVICE uint64_t okv_c4_tile_bytes(uint32_t D) { return 16ull * (12ull + okv_c4_packed_bytes(D)); }
// Byte j of the packed codes of lane l of a tile.
OKV_DEVICE uint64_t okv_c4_code_at(uint32_t j, uint32_t l) { return 192ull + (j / 4u) * 64ull + l * 4ull + j % 4u; }

/* ---- 1. Batched block gather: one launch for any number of blocks; reads pinned ---- */
// device-mapped host memory or device memory, writes the destination slots.

extern "C" __global__ void __launch_bounds__(OKV_GPU_GATHER_THREADS) okv_gpu_gather_blocks(okv_gpu_gather_args_t a) {
  const okv_block_copy_t *pairs = (const okv_block_copy_t *)a.pairs;
  for (uint64_t i = blockIdx.x; i < a.n_blocks; i += gridDim.x) {
    const unsigned char *src = (const unsigned char *)a.src + pairs[i].src_offset;
    unsigned char *dst = (unsigned char *)a.dst + pairs[i].dst_offset;
    if (a.vec_bytes == 16) {
      const uint64_t n = a.block_bytes / 16;
      for (uint64_t e = threadIdx.x; e < n; e += blockDim.x) ((uint4 *)dst)[e] = ((const uint4 *)src)[e];
    } else if (a.vec_bytes == 8) {
      const uint64_t n = a.block_bytes / 8;
      for (uint64_t e = threadIdx.x; e < n; e += blockDim.x) ((uint2 *)dst)[e] = ((const uint2 *)src)[e];
    } else if (a.vec_bytes == 4) {
      const uint64_t n = a.block_bytes / 4;
      for (uint64_t e = threadIdx.x; e < n; e += blockDim.x) ((uint32_t *)dst)[e] = ((const uint32_t *)src)[e];
    } else {
      for (uint64_t e = threadIdx.x; e < a.block_bytes; e += blockDim.x) dst[e] = src[e];
    }
  }
}

/* ---- 2. Sparse paged decode attention. One thread block per (sequence, KV head, ---- */
// tile of query rows); rows r = t * G + g. Working-set blocks are visited in
// list order with an online softmax (one rescale per block); the in-flight
// tokens form one last tile with a per-row visibility mask.
// Shared memory (dynamic, floats; sized by the host from the same layout in
// okv_gpu_args.h): qs[R*D] acc[R*D] ks[BT*D] vs[BT*D] p[R*BT] m[R] l[R] sc[R].

extern "C" __global__ void __launch_bounds__(OKV_GPU_ATTENTION_THREADS) okv_gpu_attention(okv_gpu_attention_args_t a) {
  OKV_DYNAMIC_SMEM(float, okv_smem_f);
  const uint32_t D = a.head_dim, G = a.group_size, T = a.n_query_tokens;
  const uint32_t Hkv = a.n_kv_heads, Hq = Hkv * G;
  const uint32_t u = blockIdx.x, s = u / Hkv, h = u % Hkv;
  const uint32_t n_rows = T * G, R = a.rows_per_cta;
  const uint32_t r0 = blockIdx.y * R;
  if (r0 >= n_rows) return; /* uniform across the block */
  const uint32_t Rh = min(R, n_rows - r0);
  const uint32_t tid = threadIdx.x, nt = blockDim.x;

  float *qs = okv_smem_f;
  float *acc = qs + (size_t)R * D;
  float *ks = acc + (size_t)R * D;
  float *vs = ks + (size_t)OKV_BLOCK_TOKENS * D;
  float *p = vs + (size_t)OKV_BLOCK_TOKENS * D;
  float *mrow = p + (size_t)R * OKV_BLOCK_TOKENS;
  float *lrow = mrow + R;
  float *scrow = lrow + R;

  const float *q = (const float *)a.q;
  for (uint32_t e = tid; e < Rh * D; e += nt) {
    const uint32_t r = e / D, d = e % D, rr = r0 + r, t = rr / G, g = rr % G;
    qs[e] = q[(((uint64_t)s * T + t) * Hq + h * G + g) * D + d] * a.scale;
    acc[e] = 0.0f;
  }
  for (uint32_t r = tid; r < Rh; r += nt) {
    mrow[r] = OKV_NEG_INF;
    lrow[r] = 0.0f;
  }

  /* The working set: a CSR list, or (table mode) the entries of the head's slot table, read in order and
   * skipped where okv_table_ws_entry reads nothing (uniform across the thread block). */
  const bool table_mode = a.tables != 0;
  const uint32_t *ws_slots = (const uint32_t *)a.ws_slots;
  const uint8_t *ws_valid = (const uint8_t *)a.ws_valid;
  const uint32_t *tab = 0, *tab_slots = 0;
  uint32_t ws_begin = 0, n_blocks = 0, seq_tok = 0;
  if (table_mode) {
    const uint64_t ti = (uint64_t)((const uint32_t *)a.table_index)[s] * Hkv + h;
    tab = (const uint32_t *)(a.tables + ti * a.table_bytes);
    tab_slots = (const uint32_t *)a.slot_map + ti * a.table_slots;
    seq_tok = ((const uint32_t *)a.seq_tokens)[s];
    n_blocks = a.table_slots;
  } else {
    const uint32_t *ws_offsets = (const uint32_t *)a.ws_offsets;
    ws_begin = ws_offsets[u];
    n_blocks = ws_offsets[u + 1] - ws_begin;
  }
  const uint32_t NI = a.n_inflight;
  const uint32_t n_tiles = n_blocks + (NI > 0 ? 1u : 0u);
  const float *inflight = (const float *)a.inflight_kv;
  __syncthreads();

  for (uint32_t tile = 0; tile < n_tiles; ++tile) {
    const bool is_block = tile < n_blocks;
    uint32_t n_tok;
    if (is_block) {
      uint64_t slot;
      if (table_mode) {
        uint32_t ts = 0;
        n_tok = okv_table_ws_entry(tab, a.table_slots, tab_slots, tile, seq_tok, a.n_slots, &ts);
        if (n_tok == 0) continue; /* same value in every thread: no barrier is skipped by some only */
        slot = ts;
      } else {
        slot = ws_slots[ws_begin + tile];
        n_tok = ws_valid[ws_begin + tile];
      }
      const unsigned char *base = (const unsigned char *)a.kv_pool + slot * a.block_bytes;
      /* Kt[d][BT] then V[BT][d]: both copied linearly into ks / vs. */
      for (uint32_t e = tid; e < OKV_BLOCK_TOKENS * D; e += nt) {
        ks[e] = okv_load_elem(base, e, a.kv_dtype);
        vs[e] = okv_load_elem(base, (uint64_t)OKV_BLOCK_TOKENS * D + e, a.kv_dtype);
      }
    } else {
      n_tok = NI;
      for (uint32_t e = tid; e < NI * D; e += nt) {
        const uint32_t i = e / D, d = e % D;
        const uint64_t kbase = ((((uint64_t)s * NI + i) * 2 + 0) * Hkv + h) * D;
        const uint64_t vbase = ((((uint64_t)s * NI + i) * 2 + 1) * Hkv + h) * D;
        ks[d * OKV_BLOCK_TOKENS + i] = inflight[kbase + d];
        vs[i * D + d] = inflight[vbase + d];
      }
    }
    __syncthreads();
    for (uint32_t e = tid; e < Rh * OKV_BLOCK_TOKENS; e += nt) {
      const uint32_t r = e / OKV_BLOCK_TOKENS, j = e % OKV_BLOCK_TOKENS;
      bool visible = j < n_tok;
      if (!is_block && visible) {
        const uint32_t t = (r0 + r) / G;
        visible = t >= T - NI + j; /* in-flight token j belongs to query token T - NI + j */
      }
      float logit = OKV_NEG_INF;
      if (visible) {
        const float *qr = qs + (size_t)r * D;
        float dot = 0.0f;
        for (uint32_t d = 0; d < D; ++d) dot += qr[d] * ks[d * OKV_BLOCK_TOKENS + j];
        logit = dot;
      }
      p[e] = logit;
    }
    __syncthreads();
    for (uint32_t r = tid; r < Rh; r += nt) {
      float *pr = p + (size_t)r * OKV_BLOCK_TOKENS;
      float mx = OKV_NEG_INF;
      for (uint32_t j = 0; j < n_tok; ++j) mx = fmaxf(mx, pr[j]);
      const float m_old = mrow[r];
      const float m_new = fmaxf(m_old, mx);
      if (m_new == OKV_NEG_INF) { /* nothing visible yet */
        scrow[r] = 1.0f;
        for (uint32_t j = 0; j < OKV_BLOCK_TOKENS; ++j) pr[j] = 0.0f;
      } else {
        const float sc = (m_old == OKV_NEG_INF) ? 0.0f : expf(m_old - m_new);
        float sum = 0.0f;
        for (uint32_t j = 0; j < OKV_BLOCK_TOKENS; ++j) {
          const float pj = (j < n_tok && pr[j] != OKV_NEG_INF) ? expf(pr[j] - m_new) : 0.0f;
          pr[j] = pj;
          sum += pj;
        }
        scrow[r] = sc;
        lrow[r] = lrow[r] * sc + sum;
        mrow[r] = m_new;
      }
    }
    __syncthreads();
    for (uint32_t e = tid; e < Rh * D; e += nt) {
      const uint32_t r = e / D, d = e % D;
      const float *pr = p + (size_t)r * OKV_BLOCK_TOKENS;
      float v = acc[e] * scrow[r];
      for (uint32_t j = 0; j < n_tok; ++j) v += pr[j] * vs[j * D + d];
      acc[e] = v;
    }
    __syncthreads();
  }

  float *out = (float *)a.out;
  float *lse = (float *)a.lse;
  for (uint32_t e = tid; e < Rh * D; e += nt) {
    const uint32_t r = e / D, d = e % D, rr = r0 + r, t = rr / G, g = rr % G;
    const float l = lrow[r];
    out[(((uint64_t)s * T + t) * Hq + h * G + g) * D + d] = l > 0.0f ? acc[e] / l : 0.0f;
  }
  if (lse != 0) {
    for (uint32_t r = tid; r < Rh; r += nt) {
      const uint32_t rr = r0 + r, t = rr / G, g = rr % G;
      const float l = lrow[r];
      lse[((uint64_t)s * T + t) * Hq + h * G + g] = l > 0.0f ? mrow[r] + logf(l) : OKV_NEG_INF;
    }
  }
}

// Block mass, after okv_gpu_attention wrote the per-row log-sum-exp: for each
// working-set block i of (s, h) and query token t,
//   mass[i][t] = (1/G) * sum_g sum_{j < valid} exp(logit(t, g, j) - lse(t, g)).
// Logits are recomputed exactly as okv_gpu_attention computes them.
extern "C" __global__ void __launch_bounds__(OKV_GPU_MASS_THREADS) okv_gpu_attention_mass(okv_gpu_attention_args_t a) {
  __shared__ float red[OKV_GPU_MASS_THREADS];
  const uint32_t D = a.head_dim, G = a.group_size, T = a.n_query_tokens;
  const uint32_t Hkv = a.n_kv_heads, Hq = Hkv * G;
  const uint32_t u = blockIdx.x, s = u / Hkv, h = u % Hkv, t = blockIdx.y;
  const uint32_t tid = threadIdx.x, nt = blockDim.x;
  const uint32_t *ws_offsets = (const uint32_t *)a.ws_offsets;
  const uint32_t *ws_slots = (const uint32_t *)a.ws_slots;
  const uint8_t *ws_valid = (const uint8_t *)a.ws_valid;
  const float *q = (const float *)a.q;
  const float *lse = (const float *)a.lse;
  float *mass = (float *)a.block_mass;
  const uint32_t ws_begin = ws_offsets[u], ws_end = ws_offsets[u + 1];
  for (uint32_t i = ws_begin; i < ws_end; ++i) {
    const uint32_t n_tok = ws_valid[i];
    const unsigned char *base = (const unsigned char *)a.kv_pool + (uint64_t)ws_slots[i] * a.block_bytes;
    float local = 0.0f;
    for (uint32_t e = tid; e < G * OKV_BLOCK_TOKENS; e += nt) {
      const uint32_t g = e / OKV_BLOCK_TOKENS, j = e % OKV_BLOCK_TOKENS;
      if (j >= n_tok) continue;
      const uint64_t row = ((uint64_t)s * T + t) * Hq + h * G + g;
      const float *qr = q + row * D;
      float dot = 0.0f;
      for (uint32_t d = 0; d < D; ++d)
        dot += (qr[d] * a.scale) * okv_load_elem(base, (uint64_t)d * OKV_BLOCK_TOKENS + j, a.kv_dtype);
      const float l = lse[row];
      if (l != OKV_NEG_INF) local += expf(dot - l);
    }
    red[tid] = local;
    __syncthreads();
    for (uint32_t w = nt / 2; w > 0; w /= 2) {
      if (tid < w) red[tid] += red[tid + w];
      __syncthreads();
    }
    if (tid == 0) mass[(uint64_t)i * T + t] = red[0] / (float)G;
    __syncthreads();
  }
}

/* ---- 3. Block key summaries (Quest): min/max of the valid keys of each block, ---- */
// stored in the summary dtype (narrowed min toward -inf, max toward +inf).

extern "C" __global__ void __launch_bounds__(OKV_GPU_SUMMARY_THREADS)
    okv_gpu_summarize_blocks(okv_gpu_summary_args_t a) {
  const uint32_t D = a.head_dim, sdt = a.summary_dtype;
  const uint64_t *block_index = (const uint64_t *)a.block_index;
  const uint8_t *valid = (const uint8_t *)a.valid;
  const uint64_t *summary_index = (const uint64_t *)a.summary_index;
  for (uint64_t i = blockIdx.x; i < a.n_blocks; i += gridDim.x) {
    const unsigned char *base = (const unsigned char *)a.kv + block_index[i] * a.block_bytes;
    const uint32_t n_tok = valid[i];
    unsigned char *out = (unsigned char *)a.summaries + summary_index[i] * 2 * D * okv_elem_bytes(sdt);
    for (uint32_t d = threadIdx.x; d < D; d += blockDim.x) {
      float mn = OKV_POS_INF, mx = OKV_NEG_INF;
      for (uint32_t j = 0; j < n_tok; ++j) {
        const float k = okv_load_elem(base, (uint64_t)d * OKV_BLOCK_TOKENS + j, a.kv_dtype);
        mn = k < mn ? k : mn;
        mx = k > mx ? k : mx;
      }
      okv_store_bound(out, d, sdt, mn, false);
      okv_store_bound(out, D + d, sdt, mx, true);
    }
  }
}

// Incremental update for one appended token per entry. Each thread owns fixed
// elements d, so with a grid of one block entries apply strictly in order
// (the host uses that when a summary index repeats within one call). Keys
// arrive rounded through the KV dtype; the stored bounds are values of the
// summary dtype, so min/max with them and then narrowing is exact on their side.
extern "C" __global__ void __launch_bounds__(OKV_GPU_SUMMARY_THREADS) okv_gpu_summary_append(okv_gpu_append_args_t a) {
  const uint32_t D = a.head_dim, sdt = a.summary_dtype;
  const uint64_t *summary_index = (const uint64_t *)a.summary_index;
  const float *keys = (const float *)a.keys;
  const uint8_t *first = (const uint8_t *)a.first;
  for (uint32_t i = blockIdx.x; i < a.n; i += gridDim.x) {
    unsigned char *sm = (unsigned char *)a.summaries + summary_index[i] * 2 * D * okv_elem_bytes(sdt);
    const float *k = keys + (uint64_t)i * D;
    for (uint32_t d = threadIdx.x; d < D; d += blockDim.x) {
      const float kd = k[d];
      float mn = kd, mx = kd;
      if (!first[i]) {
        const float cmn = okv_load_elem(sm, d, sdt), cmx = okv_load_elem(sm, D + d, sdt);
        mn = kd < cmn ? kd : cmn;
        mx = kd > cmx ? kd : cmx;
      }
      okv_store_bound(sm, d, sdt, mn, false);
      okv_store_bound(sm, D + d, sdt, mx, true);
    }
  }
}

// Token writes (okv_hal_kv_write_tokens_async): element e < 2 * D of entry i is
// K[e] (e < D) or V[e - D], already converted to the KV dtype by the host;
// it goes to Kt[e][pos] or V[pos][e - D] of the entry's slot.
extern "C" __global__ void __launch_bounds__(OKV_GPU_SUMMARY_THREADS) okv_gpu_kv_write(okv_gpu_kv_write_args_t a) {
  const uint32_t D = a.head_dim, eb = a.elem_bytes;
  const uint64_t *slot_index = (const uint64_t *)a.slot_index;
  const uint8_t *pos = (const uint8_t *)a.pos;
  for (uint32_t i = blockIdx.x; i < a.n; i += gridDim.x) {
    unsigned char *slot = (unsigned char *)a.kv + slot_index[i] * a.block_bytes;
    const unsigned char *src = (const unsigned char *)a.elems + (uint64_t)i * 2u * D * eb;
    const uint32_t t = pos[i];
    for (uint32_t e = threadIdx.x; e < 2u * D; e += blockDim.x) {
      const uint64_t at = e < D ? (uint64_t)e * OKV_BLOCK_TOKENS + t : (uint64_t)OKV_BLOCK_TOKENS * D + t * D + (e - D);
      if (eb == 4u) {
        ((uint32_t *)slot)[at] = ((const uint32_t *)src)[e];
      } else {
        ((uint16_t *)slot)[at] = ((const uint16_t *)src)[e];
      }
    }
  }
}

// Selection on slot tables (okv_hal_select_async) and its commit
// (okv_hal_slot_commit_async): one thread per KV head runs the rule of
// kernels/okv_select_rule.h, the code the CPU backend runs. A head's work is
// O(R + K) on its own table; heads run in parallel, so the step costs the host
// one launch, whatever the number of heads. (okv_select_rule.h is included at
// the top: attention's table mode reads its tables too.)

extern "C" __global__ void __launch_bounds__(OKV_GPU_SELECT_THREADS) okv_gpu_select(okv_gpu_select_args_t a) {
  const uint32_t *params = (const uint32_t *)a.head_params;
  for (uint32_t h = blockIdx.x * blockDim.x + threadIdx.x; h < a.n_heads; h += gridDim.x * blockDim.x) {
    const uint32_t c = ((const uint32_t *)a.counts)[h];
    okv_select_rule_head((uint32_t *)(a.tables + (uint64_t)h * a.table_bytes), a.n_slots, a.bitmap_words,
                         a.budget_blocks, a.step, (const uint32_t *)a.predicted + (uint64_t)h * a.predicted_stride,
                         c < a.predicted_stride ? c : a.predicted_stride, params[2u * h], params[2u * h + 1u],
                         (uint32_t *)a.plan + (uint64_t)h * a.plan_stride * OKV_SELECT_PLAN_U32S,
                         (uint32_t *)a.result + (uint64_t)h * OKV_SELECT_RESULT_U32S);
  }
}

extern "C" __global__ void __launch_bounds__(OKV_GPU_SELECT_THREADS) okv_gpu_slot_commit(okv_gpu_slot_commit_args_t a) {
  for (uint32_t h = blockIdx.x * blockDim.x + threadIdx.x; h < a.n_heads; h += gridDim.x * blockDim.x) {
    const uint32_t n = ((const uint32_t *)a.result)[(uint64_t)h * OKV_SELECT_RESULT_U32S];
    okv_commit_rule_head((uint32_t *)(a.tables + (uint64_t)h * a.table_bytes), a.n_slots, a.bitmap_words,
                         (const uint32_t *)a.plan + (uint64_t)h * a.plan_stride * OKV_SELECT_PLAN_U32S,
                         n < a.plan_stride ? n : a.plan_stride, ((const uint8_t *)a.landed)[h] != 0);
  }
}

// Group summaries: dst[dst_index[i]] = (min of the mins, max of the maxes) of
// src[src_first[i] .. + src_n[i]); grid-stride over entries, threads over d.
extern "C" __global__ void __launch_bounds__(OKV_GPU_SUMMARY_THREADS) okv_gpu_summary_reduce(okv_gpu_reduce_args_t a) {
  const uint32_t D = a.head_dim;
  const uint64_t *src_first = (const uint64_t *)a.src_first;
  const uint32_t *src_n = (const uint32_t *)a.src_n;
  const uint64_t *dst_index = (const uint64_t *)a.dst_index;
  const uint64_t ssb = 2ull * D * okv_elem_bytes(a.src_dtype), dsb = 2ull * D * okv_elem_bytes(a.dst_dtype);
  const bool c4 = a.dst_dtype == (uint32_t)OKV_DTYPE_C4;
  const bool coded = a.dst_dtype == (uint32_t)OKV_DTYPE_Q8 || c4; /* q8 and c4 encode from the reduced box */
  const uint64_t dstride = a.dst_dtype == (uint32_t)OKV_DTYPE_Q8 ? okv_q8_summary_bytes(D) : dsb;
  __shared__ float s_mn[256], s_mx[256], s_lo, s_step;
  for (uint32_t i = blockIdx.x; i < a.n; i += gridDim.x) {
    const unsigned char *src = (const unsigned char *)a.src + src_first[i] * ssb;
    unsigned char *dst = c4 ? (unsigned char *)a.dst + dst_index[i] / 16u * okv_c4_tile_bytes(D)
                            : (unsigned char *)a.dst + dst_index[i] * dstride;
    for (uint32_t d = threadIdx.x; d < D; d += blockDim.x) {
      float mn = OKV_POS_INF, mx = OKV_NEG_INF;
      for (uint32_t j = 0; j < src_n[i]; ++j) {
        const float x = okv_load_elem(src + j * ssb, d, a.src_dtype),
                    y = okv_load_elem(src + j * ssb, D + d, a.src_dtype);
        mn = x < mn ? x : mn;
        mx = y > mx ? y : mx;
      }
      if (coded) {
        s_mn[d] = mn;
        s_mx[d] = mx;
      } else {
        okv_store_bound(dst, d, a.dst_dtype, mn, false);
        okv_store_bound(dst, D + d, a.dst_dtype, mx, true);
      }
    }
    if (!coded) continue; /* uniform across the block */
    __syncthreads();
    if (c4) { /* uniform across the block */
      const uint32_t l = (uint32_t)(dst_index[i] % 16u), P = okv_c4_packed_bytes(D);
      if (threadIdx.x == 0) {
        double clo = OKV_POS_INF, chi = OKV_NEG_INF, wsum = 0.0;
        bool finite = true;
        for (uint32_t d = 0; d < D; ++d) {
          const double c = 0.5 * (double)s_mn[d] + 0.5 * (double)s_mx[d];
          finite = finite && s_mn[d] > OKV_NEG_INF && s_mn[d] < OKV_POS_INF && s_mx[d] > OKV_NEG_INF &&
                   s_mx[d] < OKV_POS_INF;
          clo = c < clo ? c : clo;
          chi = c > chi ? c : chi;
          wsum += 0.5 * ((double)s_mx[d] - (double)s_mn[d]);
        }
        float lo = 0.0f, step = -1.0f, width = 0.0f;
        if (finite && D > 0) {
          lo = (float)clo;
          width = (float)(wsum / (double)D);
          step = chi > (double)lo ? (float)((chi - (double)lo) / 15.0) : 0.0f;
        }
        s_lo = lo;
        s_step = step;
        ((float *)dst)[l] = lo;
        ((float *)dst)[16 + l] = step;
        ((float *)dst)[32 + l] = width;
      }
      __syncthreads();
      const float lo = s_lo, step = s_step;
      for (uint32_t j = threadIdx.x; j < P; j += blockDim.x) { /* packed byte j: elements 2j, 2j + 1 */
        unsigned char v = 0;
        for (uint32_t k = 0; k < 2; ++k) {
          const uint32_t d = 2u * j + k;
          if (d >= D || !(step > 0.0f)) continue;
          const double c = 0.5 * (double)s_mn[d] + 0.5 * (double)s_mx[d];
          const double x = rint((c - (double)lo) / (double)step);
          v |= (unsigned char)((x < 0.0 ? 0u : x > 15.0 ? 15u : (uint32_t)x) << (4u * k));
        }
        dst[okv_c4_code_at(j, l)] = v;
      }
      __syncthreads(); /* s_mn / s_mx are reused by the next entry */
      continue;
    }
    if (threadIdx.x == 0) okv_q8_params(s_mn, s_mx, D, &s_lo, &s_step);
    __syncthreads();
    const float lo = s_lo, step = s_step;
    if (threadIdx.x == 0) {
      ((float *)dst)[0] = lo;
      ((float *)dst)[1] = step;
    }
    for (uint32_t d = threadIdx.x; d < D; d += blockDim.x) {
      dst[8 + d] = okv_q8_code(s_mn[d], lo, step, false);
      dst[8 + D + d] = okv_q8_code(s_mx[d], lo, step, true);
    }
    __syncthreads(); /* s_mn / s_mx are reused by the next entry */
  }
}

/* ---- 4. Look-ahead block scoring: one warp per block, lanes over head_dim, ---- */
//   score = scale * max_{t, g} sum_d max(q_d * min_d, q_d * max_d),
// summaries read in the summary dtype, f32 sums. grid.x: segments, or ranges
// when n_ranges > 0 (each range names its segment).

OKV_DEVICE float okv_warp_sum(float v) {
  for (int m = OKV_WARP_SIZE / 2; m > 0; m /= 2) v += okv_shfl_xor(v, m, OKV_WARP_SIZE);
  return v;
}

// List mode: the summary of entry i of segment u's candidate list, through the segment's runs (ascending,
// not overlapping; binary search); false for an entry in no run (it scores -infinity).
OKV_DEVICE bool okv_list_summary(const okv_gpu_score_args_t &a, uint32_t u, uint32_t i, uint64_t *out) {
  const uint32_t b = ((const uint32_t *)a.list_blocks)[(uint64_t)u * a.list_stride + i];
  const uint32_t *ro = (const uint32_t *)a.seg_run_offsets;
  const uint32_t *rf = (const uint32_t *)a.run_first_block, *rn = (const uint32_t *)a.run_n_blocks;
  uint32_t lo = ro[u], hi = ro[u + 1];
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2u;
    if (rf[mid] <= b)
      lo = mid + 1u;
    else
      hi = mid;
  }
  if (lo == ro[u]) return false;
  const uint32_t r = lo - 1u;
  if (b - rf[r] >= rn[r]) return false;
  *out = ((const uint64_t *)a.run_summary_first)[r] + (b - rf[r]);
  return true;
}

// A query row's statistics for the coded (c4, q8) estimates, over the warp: max |x| (NaN if an element is),
// sum x and sum |x| in double, x = q_d * scale.
OKV_DEVICE void okv_row_stats(const float *qr, float scale, uint32_t D, uint32_t lane, float *m_out, double *sx_out,
                              double *l1_out) {
  float m = 0.0f;
  double sx = 0.0, l1 = 0.0;
  for (uint32_t d = lane; d < D; d += OKV_WARP_SIZE) {
    const float x = qr[d] * scale;
    m = fabsf(x) > m || x != x ? fabsf(x) : m; /* NaN stays: the row is not finite */
    sx += (double)x;
    l1 += (double)fabsf(x);
  }
  for (int w = OKV_WARP_SIZE / 2; w > 0; w /= 2) {
    const float o = okv_shfl_xor(m, w, OKV_WARP_SIZE);
    m = o > m || o != o ? o : m;
    sx += okv_shfl_xor(sx, w, OKV_WARP_SIZE);
    l1 += okv_shfl_xor(l1, w, OKV_WARP_SIZE);
  }
  *m_out = m;
  *sx_out = sx;
  *l1_out = l1;
}

#define OKV_ROW_FINITE 0u /* a row's estimate is its formula */
#define OKV_ROW_INF    1u /* +infinity (a non-finite element, or c4's sum |x| past f32) */
#define OKV_ROW_ZERO   2u /* q8: an all-zero row, lo * sum x */

// c4's code of x = q_d * scale: round(x / sig) clamped to [-127, 127] (sig = max |x| / 127 > 0).
OKV_DEVICE signed char okv_c4_query_code(float x, float sig) {
  float c = rintf(x / sig);
  c = c > 127.0f ? 127.0f : c < -127.0f ? -127.0f : c;
  return (signed char)(int)c;
}

// q8's query scale for max |x| = m > 0 (finite): the least f32 with 127 * sig >= m.
OKV_DEVICE float okv_q8_query_sigma(float m) {
  float sig = m / 127.0f;
  while (127.0 * (double)sig < (double)m) sig = nextafterf(sig, OKV_POS_INF);
  return sig;
}

// q8's code of x: ceil(x / sig), raised until code * sig >= x, clamped to [-127, 127].
OKV_DEVICE signed char okv_q8_query_code(float x, float sig) {
  float c = ceilf(x / sig);
  if ((double)c * (double)sig < (double)x) c += 1.0f;
  c = c > 127.0f ? 127.0f : c < -127.0f ? -127.0f : c;
  return (signed char)(int)c;
}

extern "C" __global__ void __launch_bounds__(OKV_GPU_SCORE_THREADS) okv_gpu_score_blocks(okv_gpu_score_args_t a) {
  const uint32_t D = a.head_dim, G = a.group_size, T = a.n_query_tokens;
  const uint32_t Hkv = a.n_kv_heads, Hq = Hkv * G;
  const uint32_t j = blockIdx.x;
  const bool ranges = a.n_ranges > 0;
  const uint32_t u = ranges ? ((const uint32_t *)a.range_seg)[j] : j, s = u / Hkv, h = u % Hkv;
  const uint32_t n = ((const uint32_t *)(ranges ? a.range_n_blocks : a.seg_n_blocks))[j];
  const bool list = a.list_blocks != 0;
  const uint64_t sum_first = list ? 0 : ((const uint64_t *)(ranges ? a.range_summary_first : a.seg_summary_first))[j];
  const uint64_t score_first = ((const uint64_t *)(ranges ? a.range_score_first : a.seg_score_first))[j];
  const uint32_t sdt = a.summary_dtype;
  const uint32_t b_begin = blockIdx.y * OKV_GPU_SCORE_BLOCKS_PER_CTA;
  if (b_begin >= n) return; /* uniform across the block */
  const uint32_t b_end = min(n, b_begin + OKV_GPU_SCORE_BLOCKS_PER_CTA);
  const uint32_t warp = threadIdx.x / OKV_WARP_SIZE, n_warps = blockDim.x / OKV_WARP_SIZE;
  const uint32_t lane = okv_lane_id();
  const float *q = (const float *)a.q;
  const unsigned char *summ = (const unsigned char *)a.summaries;
  float *scores = (float *)a.scores;
  const uint32_t n_rows = (a.t_end - a.t_begin) * G;
  /* c4 and q8 quantize each query row once per CTA into shared memory (every block of a CTA is scored against
   * the same rows) when the rows fit; otherwise per block. Either way the same values. */
  __shared__ signed char s_code[OKV_GPU_SCORE_ROWS * 256];
  __shared__ float s_sig[OKV_GPU_SCORE_ROWS];
  __shared__ double s_sx[OKV_GPU_SCORE_ROWS], s_l1[OKV_GPU_SCORE_ROWS];
  __shared__ uint32_t s_state[OKV_GPU_SCORE_ROWS]; /* OKV_ROW_*: finite, +infinity, all zero */
  const bool coded = sdt == (uint32_t)OKV_DTYPE_C4 || sdt == (uint32_t)OKV_DTYPE_Q8;
  const bool cached = coded && n_rows <= OKV_GPU_SCORE_ROWS && D <= 256u;
  if (cached) {                                         /* uniform across the block */
    for (uint32_t r = warp; r < n_rows; r += n_warps) { /* uniform per warp */
      const uint32_t t = a.t_begin + r / G, g = r % G;
      const float *qr = q + (((uint64_t)s * T + t) * Hq + h * G + g) * D;
      float m, sig;
      double sx, l1;
      okv_row_stats(qr, a.scale, D, lane, &m, &sx, &l1);
      uint32_t state = OKV_ROW_FINITE;
      if (sdt == (uint32_t)OKV_DTYPE_C4) {
        sig = m / 127.0f;
        if (!(m < OKV_POS_INF) || !((float)l1 < OKV_POS_INF)) state = OKV_ROW_INF;
        for (uint32_t d = lane; d < D; d += OKV_WARP_SIZE)
          s_code[r * D + d] = state == OKV_ROW_FINITE && m > 0.0f ? okv_c4_query_code(qr[d] * a.scale, sig) : 0;
      } else {
        sig = okv_q8_query_sigma(m);
        if (!(m < OKV_POS_INF))
          state = OKV_ROW_INF;
        else if (!(m > 0.0f))
          state = OKV_ROW_ZERO;
        for (uint32_t d = lane; d < D; d += OKV_WARP_SIZE)
          s_code[r * D + d] = state == OKV_ROW_FINITE ? okv_q8_query_code(qr[d] * a.scale, sig) : 0;
      }
      if (lane == 0) {
        s_sig[r] = sig;
        s_sx[r] = sx;
        s_l1[r] = l1;
        s_state[r] = state;
      }
    }
    __syncthreads();
  }
  if (sdt == (uint32_t)OKV_DTYPE_C4) { /* uniform across the block */
    const uint64_t tb = okv_c4_tile_bytes(D);
    for (uint32_t b = b_begin + warp; b < b_end; b += n_warps) { /* uniform per warp */
      uint64_t si = sum_first + b;
      if (list && !okv_list_summary(a, u, b, &si)) {
        if (lane == 0) scores[score_first + b] = OKV_NEG_INF;
        continue;
      }
      const unsigned char *tile = summ + si / 16u * tb;
      const uint32_t l = (uint32_t)(si % 16u);
      const float lo = ((const float *)tile)[l], step = ((const float *)tile)[16 + l];
      const float width = ((const float *)tile)[32 + l];
      float best = OKV_NEG_INF;
      for (uint32_t r = 0; r < n_rows; ++r) {
        float m = 0.0f, sig;
        double sx, l1;
        bool inf;
        int dot = 0;
        if (cached) {
          sig = s_sig[r];
          sx = s_sx[r];
          l1 = s_l1[r];
          inf = s_state[r] == OKV_ROW_INF;
          for (uint32_t d = lane; d < D && !inf; d += OKV_WARP_SIZE) {
            const unsigned char p = tile[okv_c4_code_at(d / 2u, l)];
            dot += (int)s_code[r * D + d] * (int)(d % 2u ? p >> 4 : p & 15u);
          }
        } else {
          const uint32_t t = a.t_begin + r / G, g = r % G;
          const float *qr = q + (((uint64_t)s * T + t) * Hq + h * G + g) * D;
          okv_row_stats(qr, a.scale, D, lane, &m, &sx, &l1);
          sig = m / 127.0f;
          inf = !(m < OKV_POS_INF) || !((float)l1 < OKV_POS_INF);
          for (uint32_t d = lane; d < D && m > 0.0f && !inf; d += OKV_WARP_SIZE) {
            const unsigned char p = tile[okv_c4_code_at(d / 2u, l)];
            dot += (int)okv_c4_query_code(qr[d] * a.scale, sig) * (int)(d % 2u ? p >> 4 : p & 15u);
          }
        }
        for (int w = OKV_WARP_SIZE / 2; w > 0; w /= 2) dot += okv_shfl_xor(dot, w, OKV_WARP_SIZE);
        /* a non-finite element or an L1 norm past f32's range: +infinity (the CPU's f32 estimate would overflow) */
        const float v = step < 0.0f || inf
                            ? OKV_POS_INF
                            : (float)((double)lo * sx + (double)width * l1 + (double)step * (double)sig * (double)dot);
        best = fmaxf(best, v);
      }
      if (lane == 0) scores[score_first + b] = best;
    }
    return;
  }
  if (sdt == (uint32_t)OKV_DTYPE_Q8) { /* uniform across the block */
    const uint64_t qsb = okv_q8_summary_bytes(D);
    for (uint32_t b = b_begin + warp; b < b_end; b += n_warps) { /* uniform per warp */
      uint64_t si = sum_first + b;
      if (list && !okv_list_summary(a, u, b, &si)) {
        if (lane == 0) scores[score_first + b] = OKV_NEG_INF;
        continue;
      }
      const unsigned char *sb = summ + si * qsb;
      const float lo = ((const float *)sb)[0], step = ((const float *)sb)[1];
      float best = OKV_NEG_INF;
      for (uint32_t r = 0; r < n_rows; ++r) {
        float m = 0.0f, sig = 0.0f;
        double sx, l1;
        uint32_t state;
        int dot = 0;
        if (cached) {
          sig = s_sig[r];
          sx = s_sx[r];
          state = s_state[r];
          for (uint32_t d = lane; d < D && state == OKV_ROW_FINITE; d += OKV_WARP_SIZE) {
            const int c = s_code[r * D + d];
            dot += c * (int)(c < 0 ? sb[8 + d] : sb[8 + D + d]); /* c = 0: either code, no term */
          }
        } else {
          const uint32_t t = a.t_begin + r / G, g = r % G;
          const float *qr = q + (((uint64_t)s * T + t) * Hq + h * G + g) * D;
          okv_row_stats(qr, a.scale, D, lane, &m, &sx, &l1);
          state = !(m < OKV_POS_INF) ? OKV_ROW_INF : !(m > 0.0f) ? OKV_ROW_ZERO : OKV_ROW_FINITE;
          if (state == OKV_ROW_FINITE) sig = okv_q8_query_sigma(m);
          for (uint32_t d = lane; d < D && state == OKV_ROW_FINITE; d += OKV_WARP_SIZE) {
            const float x = qr[d] * a.scale;
            dot += okv_q8_query_code(x, sig) * (int)(x < 0.0f ? sb[8 + d] : sb[8 + D + d]);
          }
        }
        for (int w = OKV_WARP_SIZE / 2; w > 0; w /= 2) dot += okv_shfl_xor(dot, w, OKV_WARP_SIZE);
        float v;
        if (step < 0.0f || state == OKV_ROW_INF)
          v = OKV_POS_INF;
        else if (state == OKV_ROW_ZERO)
          v = (float)((double)lo * sx);
        else
          v = (float)((double)lo * sx + (double)step * (double)sig * (double)dot);
        best = fmaxf(best, v);
      }
      if (lane == 0) scores[score_first + b] = best;
    }
    return;
  }
  for (uint32_t b = b_begin + warp; b < b_end; b += n_warps) { /* uniform per warp */
    uint64_t si = sum_first + b;
    if (list && !okv_list_summary(a, u, b, &si)) {
      if (lane == 0) scores[score_first + b] = OKV_NEG_INF;
      continue;
    }
    const unsigned char *sb = summ + si * 2 * D * okv_elem_bytes(sdt);
    float best = OKV_NEG_INF;
    for (uint32_t r = 0; r < n_rows; ++r) {
      const uint32_t t = a.t_begin + r / G, g = r % G;
      const float *qr = q + (((uint64_t)s * T + t) * Hq + h * G + g) * D;
      float part = 0.0f;
      for (uint32_t d = lane; d < D; d += OKV_WARP_SIZE) {
        const float qd = qr[d];
        part += fmaxf(qd * okv_load_elem(sb, d, sdt), qd * okv_load_elem(sb, D + d, sdt));
      }
      best = fmaxf(best, okv_warp_sum(part));
    }
    if (lane == 0) scores[score_first + b] = best * a.scale;
  }
}

/* ---- 5. Top-K per segment: radix select of the k-th largest score key (4 passes of ---- */
// 8-bit digits over the candidates), then collect every key above it plus the
// lowest-index ties, then a bitonic sort of <= 512 composite keys
// (score key << 32 | ~index) in descending order (k <= OKV_TOPK_MAX).

// Its static shared memory (hist, sel, warp_tot, 4 scalars) must fit in what
// the host leaves out of the dynamic budget.
static_assert(256u * 4u + OKV_TOPK_MAX * 8u + (OKV_GPU_TOPK_THREADS / 32u) * 4u + 4u * 4u <=
                  OKV_GPU_TOPK_STATIC_SMEM_BYTES,
              "okv_gpu_topk's static shared memory exceeds OKV_GPU_TOPK_STATIC_SMEM_BYTES");

OKV_DEVICE bool okv_bit_test(const uint32_t *bm, uint32_t b) { return (bm[b >> 5] >> (b & 31u)) & 1u; }

// Bitonic sort of sel[0..len) (len a power of two) in descending order, by every thread of the block.
OKV_DEVICE void okv_bitonic_desc(unsigned long long *sel, uint32_t len, uint32_t tid, uint32_t nt) {
  for (uint32_t size = 2; size <= len; size <<= 1) {
    for (uint32_t stride = size >> 1; stride > 0; stride >>= 1) {
      for (uint32_t i = tid; i < len; i += nt) {
        const uint32_t j = i ^ stride;
        if (j > i) {
          const unsigned long long x = sel[i], y = sel[j];
          const bool desc = (i & size) == 0;
          if (desc ? (x < y) : (x > y)) {
            sel[i] = y;
            sel[j] = x;
          }
        }
      }
      __syncthreads();
    }
  }
}

extern "C" __global__ void __launch_bounds__(OKV_GPU_TOPK_THREADS) okv_gpu_topk(okv_gpu_topk_args_t a) {
  OKV_DYNAMIC_SMEM(uint32_t, okv_smem_u); /* exclusion bitmap, ceil(max_n / 32) words */
  __shared__ uint32_t hist[256];
  __shared__ unsigned long long sel[OKV_TOPK_MAX];
  __shared__ uint32_t warp_tot[OKV_GPU_TOPK_THREADS / 32];
  __shared__ uint32_t s_count, s_digit, s_rem, s_sel;

  const uint32_t u = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
  const uint32_t n = ((const uint32_t *)a.seg_n)[u];
  const float *sc = (const float *)a.scores + ((const uint64_t *)a.seg_score_first)[u];
  uint32_t *bm = okv_smem_u;
  const uint32_t n_words = (n + 31u) / 32u;

  for (uint32_t w = tid; w < n_words; w += nt) bm[w] = 0u;
  if (tid == 0) {
    s_count = 0u;
    s_sel = 0u;
  }
  __syncthreads();
  if (a.excl_offsets != 0) {
    const uint32_t *eo = (const uint32_t *)a.excl_offsets;
    const uint32_t *eb = (const uint32_t *)a.excl_blocks;
    for (uint32_t e = eo[u] + tid; e < eo[u + 1]; e += nt) {
      const uint32_t b = eb[e];
      if (b < n) atomicOr(&bm[b >> 5], 1u << (b & 31u));
    }
  }
  __syncthreads();
  uint32_t local = 0;
  for (uint32_t b = tid; b < n; b += nt) local += okv_bit_test(bm, b) ? 0u : 1u;
  atomicAdd(&s_count, local);
  __syncthreads();
  const uint32_t n_cand = s_count;
  const uint32_t kk = min(a.k, n_cand);

  uint32_t *out_idx = (uint32_t *)a.out_indices + (uint64_t)u * a.k;
  if (a.out_counts != 0 && tid == 0) ((uint32_t *)a.out_counts)[u] = kk;
  if (kk == 0) {
    for (uint32_t i = tid; i < a.k; i += nt) out_idx[i] = 0xffffffffu;
    return; /* uniform */
  }

  /* Radix select: after the 4 passes, prefix is the key of the kk-th largest
   * candidate and rem the number of candidates equal to it that are taken. */
  uint32_t prefix = 0u, mask = 0u, rem = kk;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (uint32_t i = tid; i < 256u; i += nt) hist[i] = 0u;
    __syncthreads();
    for (uint32_t b = tid; b < n; b += nt) {
      if (okv_bit_test(bm, b)) continue;
      const uint32_t key = okv_score_key(sc[b]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      uint32_t cum = 0u;
      for (int dgt = 255; dgt >= 0; --dgt) {
        if (cum + hist[dgt] >= rem) {
          s_digit = (uint32_t)dgt;
          s_rem = rem - cum;
          break;
        }
        cum += hist[dgt];
      }
    }
    __syncthreads();
    prefix |= s_digit << shift;
    mask |= 255u << shift;
    rem = s_rem;
    __syncthreads();
  }
  const uint32_t thr = prefix, need_eq = rem;

  /* Collect: every candidate above thr, and the need_eq lowest-index ties. */
  const uint32_t lane = tid % OKV_WARP_SIZE, warp = tid / OKV_WARP_SIZE, n_warps = nt / OKV_WARP_SIZE;
  uint32_t eq_base = 0u;
  for (uint32_t base = 0; base < n; base += nt) {
    const uint32_t b = base + tid;
    bool gt = false, eq = false;
    unsigned long long comp = 0ull;
    if (b < n && !okv_bit_test(bm, b)) {
      const uint32_t key = okv_score_key(sc[b]);
      gt = key > thr;
      eq = key == thr;
      comp = ((unsigned long long)key << 32) | (unsigned long long)(0xffffffffu - b);
    }
    const uint64_t ballot = okv_ballot(eq);
    const uint32_t rank_in_warp = (uint32_t)okv_popc64(ballot & okv_lanemask_lt());
    if (lane == 0) warp_tot[warp] = (uint32_t)okv_popc64(ballot);
    __syncthreads();
    uint32_t rank = eq_base + rank_in_warp, total = 0u;
    for (uint32_t w = 0; w < n_warps; ++w) {
      if (w < warp) rank += warp_tot[w];
      total += warp_tot[w];
    }
    if (gt || (eq && rank < need_eq)) sel[atomicAdd(&s_sel, 1u)] = comp;
    eq_base += total;
    __syncthreads();
  }

  /* Bitonic sort, descending, over the next power of two >= kk. */
  uint32_t len = 1u;
  while (len < kk) len <<= 1;
  for (uint32_t i = kk + tid; i < len; i += nt) sel[i] = 0ull; /* below every real key */
  __syncthreads();
  okv_bitonic_desc(sel, len, tid, nt);
  // Ascending: the same set by position (the composite keys' low words, ~index), sorted again descending.
  if (a.ascending) {
    for (uint32_t i = tid; i < len; i += nt) sel[i] = i < kk ? (sel[i] & 0xffffffffull) : 0ull;
    __syncthreads();
    okv_bitonic_desc(sel, len, tid, nt);
  }
  // positions, or with an index map its entries (the map is addressed like the scores)
  const uint32_t *map = a.index_map != 0 ? (const uint32_t *)a.index_map + ((const uint64_t *)a.seg_score_first)[u] : 0;
  for (uint32_t i = tid; i < a.k; i += nt) {
    const uint32_t pos = 0xffffffffu - (uint32_t)(sel[i] & 0xffffffffull);
    out_idx[i] = i < kk ? (map != 0 ? map[pos] : pos) : 0xffffffffu;
  }
}
