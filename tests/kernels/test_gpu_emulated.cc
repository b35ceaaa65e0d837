/* Runs the GPU kernels of kernels/okv_kernels.cu, unchanged, on the CPU
 * emulator (kernels/okv_gpu_emulator.h) and checks them against scalar
 * double-precision references written here (the oracle), with the warp size
 * given at build time (OKV_EMU_WARP = 32 like NVIDIA/RDNA, 64 like CDNA). It
 * verifies indexing, barriers, shared-memory use and the semantics of
 * include/oasiskv/kernels.h on machines without a GPU; it says nothing about
 * speed or the vendor compilers. */
#undef _FORTIFY_SOURCE /* see kernels/okv_gpu_emulator.h */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

extern "C" {
#include <cmocka.h>

#include "tests/kernels/kernel_ref.h"
}

/* Sanitizer builds switch fibers ~20x slower: smaller cases there. */
#ifdef OKV_EMU_SMALL
#define OKV_EMU_BIG(big, small) (small)
#else
#define OKV_EMU_BIG(big, small) (big)
#endif

#define OKV_GPU_EMULATE 1
#include "kernels/okv_kernels.cu"

namespace {

/* Deterministic RNG (xorshift64*). */
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 2654435761u + 88172645463325252ull) {}
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 2685821657736338717ull;
  }
  uint32_t below(uint32_t n) { return (uint32_t)(next() % n); }
  double uniform() { return (double)(next() >> 11) * (1.0 / 9007199254740992.0); }
  float normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-12) u1 = 1e-12;
    return (float)(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
};

uint64_t addr(const void *p) { return (uint64_t)(uintptr_t)p; }

/* ---- Element encodings with independent decoders (the reference values) ---- */

/* A bf16 value near x: the upper half of its f32 bits (truncation). */
uint16_t bf16_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return (uint16_t)(u >> 16);
}
double bf16_value(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/* An f16 value near x (|x| < 8), built from sign, exponent and mantissa. */
uint16_t f16_bits(float x) {
  uint16_t sign = x < 0 ? 0x8000 : 0;
  double a = std::fabs((double)x);
  if (a < std::ldexp(1.0, -14)) { /* subnormal: m * 2^-24 */
    int m = (int)std::lround(a * std::ldexp(1.0, 24));
    return (uint16_t)(sign | (m > 1023 ? 1023 : m));
  }
  int e;
  double fr = std::frexp(a, &e); /* a = fr * 2^e, fr in [0.5, 1) */
  int m = (int)std::floor((fr * 2.0 - 1.0) * 1024.0);
  return (uint16_t)(sign | ((e - 1 + 15) << 10) | m);
}
double f16_value(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const double v = e == 0 ? std::ldexp((double)m, -24) : std::ldexp(1024.0 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

/* A pool of elements in one dtype, and their exact values. */
struct Elems {
  uint32_t dtype;
  std::vector<unsigned char> bytes;
  std::vector<double> value;
  Elems(uint32_t dt, size_t n) : dtype(dt), bytes(n * (dt == 0 ? 4 : 2)), value(n) {}
  void set(size_t i, float x) {
    if (dtype == 0) {
      memcpy(&bytes[i * 4], &x, 4);
      value[i] = x;
    } else {
      uint16_t b = dtype == 2 ? bf16_bits(x) : f16_bits(x);
      memcpy(&bytes[i * 2], &b, 2);
      value[i] = dtype == 2 ? bf16_value(b) : f16_value(b);
    }
  }
};

/* The oracle keeps its own block size; it must be the kernels' one. */
const uint32_t BT = 16;
static_assert(BT == OKV_BLOCK_TOKENS, "the reference and the kernels disagree on tokens per block");

/* ---- 1. Gather ---- */

void test_gather(void **state) {
  (void)state;
  Rng r(1);
  for (uint32_t block_bytes : {64u, 40u, 13u}) {
    const uint32_t n_src = 12, n_dst = 10, n = 7;
    std::vector<unsigned char> src(n_src * block_bytes + 8), dst(n_dst * block_bytes + 8, 0);
    for (auto &b : src) b = (unsigned char)r.below(256);
    std::vector<uint64_t> pairs;
    std::vector<uint32_t> perm(n_dst);
    for (uint32_t i = 0; i < n_dst; ++i) perm[i] = i;
    for (uint32_t i = 0; i < n; ++i) {
      std::swap(perm[i], perm[i + r.below(n_dst - i)]);
      pairs.push_back((uint64_t)r.below(n_src) * block_bytes);
      pairs.push_back((uint64_t)perm[i] * block_bytes);
    }
    okv_gpu_gather_args_t a = {};
    a.src = addr(src.data());
    a.dst = addr(dst.data());
    a.pairs = addr(pairs.data());
    a.n_blocks = n;
    a.block_bytes = block_bytes;
    a.vec_bytes = block_bytes % 16 == 0 ? 16 : block_bytes % 8 == 0 ? 8 : block_bytes % 4 == 0 ? 4 : 1;
    /* grid smaller than n: the grid-stride loop must cover every block */
    assert_true(okv_emu::launch(okv_gpu_gather_blocks, {3, 1, 1}, 64, 0, a));
    std::vector<unsigned char> want(n_dst * block_bytes + 8, 0);
    for (uint32_t i = 0; i < n; ++i) memcpy(&want[pairs[2 * i + 1]], &src[pairs[2 * i]], block_bytes);
    assert_memory_equal(dst.data(), want.data(), want.size());
  }
}

/* ---- 2. Attention ---- */

struct AttnCase {
  uint32_t n_seqs, n_kv, G, D, T, NI, dtype, rows_per_cta;
  bool mass;
  bool tables; /* table mode: the same working sets read from slot tables (mass must be false) */
};

void run_attention(const AttnCase &c, uint64_t seed) {
  Rng r(seed);
  const uint32_t U = c.n_seqs * c.n_kv, Hq = c.n_kv * c.G, D = c.D;
  const uint32_t n_slots = 20;
  const size_t slot_elems = 2 * BT * D;
  Elems pool(c.dtype, n_slots * slot_elems);
  for (size_t i = 0; i < pool.value.size(); ++i) pool.set(i, r.normal());
  std::vector<uint32_t> ws_off(U + 1, 0), ws_slots;
  std::vector<uint8_t> ws_valid;
  for (uint32_t u = 0; u < U; ++u) {
    const uint32_t nb = (u % 3 == 1) ? 0 : 1 + r.below(5); /* some working sets empty */
    for (uint32_t b = 0; b < nb; ++b) {
      ws_slots.push_back(r.below(n_slots));
      ws_valid.push_back((uint8_t)(b == 0 ? 16 : 1 + r.below(16)));
    }
    ws_off[u + 1] = (uint32_t)ws_slots.size();
  }
  std::vector<float> q((size_t)c.n_seqs * c.T * Hq * D), infl((size_t)c.n_seqs * c.NI * 2 * c.n_kv * D);
  for (auto &x : q) x = 2.0f * r.normal();
  for (auto &x : infl) x = r.normal();
  std::vector<float> out(q.size(), -7.0f), lse((size_t)c.n_seqs * c.T * Hq, 0.0f);
  std::vector<float> mass(ws_slots.size() * c.T + 1, -5.0f);

  okv_gpu_attention_args_t a = {};
  a.kv_pool = addr(pool.bytes.data());
  a.block_bytes = slot_elems * (c.dtype == 0 ? 4 : 2);
  a.ws_offsets = addr(ws_off.data());
  a.ws_slots = addr(ws_slots.data());
  a.ws_valid = addr(ws_valid.data());
  /* Table mode: unit u's blocks at shuffled entries of table row (n_seqs - 1 - s) * n_kv + h, block 2i + 1
   * with its token count, except the first one, which is the sequence's last (active) block with count 0 in
   * the table (the sequence's 16 nb tokens give it 16); plus a free, a pending (count 0), a past-the-end and
   * an out-of-range-slot entry, all but the last on slot 0 (which some working set may use: a wrong read
   * shows in the values). */
  const uint32_t TR = 12, TW = 1, NB = 40;
  const uint64_t tbytes = okv_slot_table_bytes(TR, TW);
  std::vector<uint32_t> tab((size_t)U * tbytes / 4, 0), tmap((size_t)U * TR, 0), trow(c.n_seqs), ttok(c.n_seqs);
  if (c.tables) {
    for (uint32_t s = 0; s < c.n_seqs; ++s) {
      trow[s] = c.n_seqs - 1 - s;
      ttok[s] = 16 * NB;
    }
    for (uint32_t s = 0; s < c.n_seqs; ++s)
      for (uint32_t h = 0; h < c.n_kv; ++h) {
        const uint32_t u = s * c.n_kv + h, row = trow[s] * c.n_kv + h;
        uint32_t *t = &tab[(size_t)row * tbytes / 4], *m = &tmap[(size_t)row * TR];
        std::vector<uint32_t> pos(TR);
        for (uint32_t j = 0; j < TR; ++j) pos[j] = j;
        for (uint32_t j = TR; j > 1; --j) std::swap(pos[j - 1], pos[r.below(j)]);
        for (uint32_t j = 0; j < TR; ++j) t[j] = OKV_SLOT_FREE;
        uint32_t e = 0;
        for (uint32_t i = ws_off[u]; i < ws_off[u + 1]; ++i, ++e) {
          const bool active = i == ws_off[u]; /* its valid count is 16 (the case makes the first one full) */
          t[pos[e]] = active ? NB - 1 : 2 * (i - ws_off[u]) + 1;
          t[2 * TR + pos[e]] = active ? 0 : ws_valid[i];
          m[pos[e]] = ws_slots[i];
        }
        t[pos[e]] = 2, t[2 * TR + pos[e]] = 0, m[pos[e++]] = 0;        /* pending */
        t[pos[e]] = NB + 1, t[2 * TR + pos[e]] = 16, m[pos[e++]] = 0;  /* past the end */
        t[pos[e]] = 4, t[2 * TR + pos[e]] = 16, m[pos[e++]] = n_slots; /* slot out of range */
        assert_true(e <= TR);
      }
    a.ws_offsets = a.ws_slots = a.ws_valid = 0;
    a.table_slots = TR;
    a.tables = addr(tab.data());
    a.slot_map = addr(tmap.data());
    a.table_index = addr(trow.data());
    a.seq_tokens = addr(ttok.data());
    a.table_bytes = tbytes;
  }
  a.n_slots = n_slots;
  a.q = addr(q.data());
  a.inflight_kv = c.NI ? addr(infl.data()) : 0;
  a.out = addr(out.data());
  a.lse = c.mass ? addr(lse.data()) : 0;
  a.block_mass = c.mass ? addr(mass.data()) : 0;
  a.n_seqs = c.n_seqs;
  a.n_kv_heads = c.n_kv;
  a.group_size = c.G;
  a.head_dim = D;
  a.n_query_tokens = c.T;
  a.kv_dtype = c.dtype;
  a.n_inflight = c.NI;
  a.rows_per_cta = c.rows_per_cta;
  a.scale = 1.0f / std::sqrt((float)D);
  const uint32_t R = c.rows_per_cta, n_rows = c.T * c.G, chunks = (n_rows + R - 1) / R;
  const size_t smem = 4 * (2 * (size_t)R * D + 32 * (size_t)D + 19 * (size_t)R);
  assert_true(okv_emu::launch(okv_gpu_attention, {U, chunks, 1}, OKV_GPU_ATTENTION_THREADS, smem, a));
  if (c.mass) assert_true(okv_emu::launch(okv_gpu_attention_mass, {U, c.T, 1}, OKV_GPU_MASS_THREADS, 0, a));

  /* Reference: plain softmax in double over the visible keys. */
  const double scale = 1.0 / std::sqrt((double)D);
  for (uint32_t s = 0; s < c.n_seqs; ++s)
    for (uint32_t h = 0; h < c.n_kv; ++h) {
      const uint32_t u = s * c.n_kv + h;
      for (uint32_t t = 0; t < c.T; ++t) {
        std::vector<double> mass_t(ws_off[u + 1] - ws_off[u], 0.0);
        for (uint32_t g = 0; g < c.G; ++g) {
          const float *qr = &q[(((size_t)s * c.T + t) * Hq + h * c.G + g) * D];
          std::vector<double> logit, vrow_index;
          std::vector<std::vector<double>> vals;
          std::vector<int> owner; /* working-set block index or -1 */
          for (uint32_t i = ws_off[u]; i < ws_off[u + 1]; ++i) {
            const size_t base = (size_t)ws_slots[i] * slot_elems;
            for (uint32_t j = 0; j < ws_valid[i]; ++j) {
              double dot = 0;
              std::vector<double> v(D);
              for (uint32_t d = 0; d < D; ++d) {
                dot += (double)qr[d] * pool.value[base + d * BT + j];
                v[d] = pool.value[base + BT * D + j * D + d];
              }
              logit.push_back(dot * scale);
              vals.push_back(v);
              owner.push_back((int)(i - ws_off[u]));
            }
          }
          for (uint32_t i = 0; i < c.NI; ++i) {
            if (t < c.T - c.NI + i) continue; /* not visible to this query token */
            double dot = 0;
            std::vector<double> v(D);
            for (uint32_t d = 0; d < D; ++d) {
              dot += (double)qr[d] * infl[((((size_t)s * c.NI + i) * 2 + 0) * c.n_kv + h) * D + d];
              v[d] = infl[((((size_t)s * c.NI + i) * 2 + 1) * c.n_kv + h) * D + d];
            }
            logit.push_back(dot * scale);
            vals.push_back(v);
            owner.push_back(-1);
          }
          const float *o = &out[(((size_t)s * c.T + t) * Hq + h * c.G + g) * D];
          if (logit.empty()) {
            for (uint32_t d = 0; d < D; ++d) assert_true(o[d] == 0.0f);
            continue;
          }
          const double mx = *std::max_element(logit.begin(), logit.end());
          double den = 0;
          for (double l : logit) den += std::exp(l - mx);
          for (uint32_t d = 0; d < D; ++d) {
            double num = 0;
            for (size_t k = 0; k < logit.size(); ++k) num += std::exp(logit[k] - mx) * vals[k][d];
            const double want = num / den;
            if (!(std::fabs(o[d] - want) <= 2e-4 + 2e-4 * std::fabs(want))) { /* NaN fails */
              fprintf(stderr, "attention s=%u h=%u t=%u g=%u d=%u: got %.7f want %.7f\n", s, h, t, g, d, o[d], want);
              fail();
            }
          }
          for (size_t k = 0; k < logit.size(); ++k)
            if (owner[k] >= 0) mass_t[owner[k]] += std::exp(logit[k] - mx) / den / c.G;
        }
        if (c.mass)
          for (uint32_t i = ws_off[u]; i < ws_off[u + 1]; ++i) {
            const double want = mass_t[i - ws_off[u]], got = mass[(size_t)i * c.T + t];
            if (!(std::fabs(got - want) <= 2e-5 + 1e-4 * want)) {
              fprintf(stderr, "mass u=%u block %u t=%u: got %.7f want %.7f\n", u, i, t, got, want);
              fail();
            }
          }
      }
    }
  if (c.mass) assert_true(mass.back() == -5.0f); /* nothing written past the last block */
}

void test_attention_f32_multi_chunk(void **state) {
  (void)state;
  run_attention({2, 3, 3, 40, 2, 2, 0, 4, true, false}, 11); /* 6 rows in 2 tiles, draft + real in flight */
}
void test_attention_bf16(void **state) {
  (void)state;
  run_attention({1, 4, 2, 64, 1, 1, 2, 32, true, false}, 12);
}
void test_attention_f16_no_inflight(void **state) {
  (void)state;
  run_attention({2, 2, 4, 33, 2, 0, 1, 3, false, false}, 13); /* empty working sets give zero rows */
}
void test_attention_tables(void **state) {
  (void)state;
  run_attention({2, 3, 2, 40, 2, 1, 2, 4, false, true}, 15); /* bf16, 4 rows in 1 tile */
  run_attention({3, 2, 4, 16, 1, 0, 0, 2, false, true}, 16); /* f32, 4 rows in 2 tiles, nothing in flight */
}
void test_attention_inflight_subset(void **state) {
  (void)state;
  run_attention({1, 2, 2, 16, 3, 1, 0, 2, true, false}, 14); /* only the last query token owns one in-flight token */
}

/* ---- 3. Summaries ---- */

void test_summaries(void **state) {
  (void)state;
  Rng r(3);
  for (uint32_t dtype = 0; dtype < 3; ++dtype) {
    const uint32_t D = 24, n_kv_blocks = 9, n = 6, n_summ = 8;
    const size_t slot_elems = 2 * BT * D;
    Elems kv(dtype, n_kv_blocks * slot_elems);
    for (size_t i = 0; i < kv.value.size(); ++i) kv.set(i, r.normal());
    std::vector<uint64_t> bidx(n), sidx(n);
    std::vector<uint8_t> valid(n);
    for (uint32_t i = 0; i < n; ++i) {
      bidx[i] = r.below(n_kv_blocks);
      sidx[i] = (i * 5 + 1) % n_summ; /* distinct */
      valid[i] = (uint8_t)(1 + r.below(16));
    }
    std::vector<float> summ((size_t)n_summ * 2 * D, 123.0f);
    okv_gpu_summary_args_t a = {};
    a.kv = addr(kv.bytes.data());
    a.block_bytes = slot_elems * (dtype == 0 ? 4 : 2);
    a.summaries = addr(summ.data());
    a.block_index = addr(bidx.data());
    a.valid = addr(valid.data());
    a.summary_index = addr(sidx.data());
    a.n_blocks = n;
    a.head_dim = D;
    a.kv_dtype = dtype;
    assert_true(okv_emu::launch(okv_gpu_summarize_blocks, {n, 1, 1}, OKV_GPU_SUMMARY_THREADS, 0, a));
    for (uint32_t i = 0; i < n; ++i)
      for (uint32_t d = 0; d < D; ++d) {
        double mn = INFINITY, mx = -INFINITY;
        for (uint32_t j = 0; j < valid[i]; ++j) {
          const double k = kv.value[bidx[i] * slot_elems + d * BT + j];
          mn = std::min(mn, k);
          mx = std::max(mx, k);
        }
        assert_true(summ[sidx[i] * 2 * D + d] == (float)mn);
        assert_true(summ[sidx[i] * 2 * D + D + d] == (float)mx);
      }
    /* Untouched summary slots keep their contents. */
    for (uint32_t sI = 0; sI < n_summ; ++sI) {
      if (std::find(sidx.begin(), sidx.end(), (uint64_t)sI) != sidx.end()) continue;
      for (uint32_t e = 0; e < 2 * D; ++e) assert_true(summ[sI * 2 * D + e] == 123.0f);
    }
  }
}

void test_summary_append(void **state) {
  (void)state;
  Rng r(4);
  const uint32_t D = 20, n_summ = 5;
  for (int in_order = 0; in_order < 2; ++in_order) {
    /* With repeats (in order, grid 1) and without (one block per entry). */
    const uint32_t n = in_order ? 9 : 5;
    std::vector<uint64_t> sidx(n);
    std::vector<uint8_t> first(n);
    std::vector<float> keys((size_t)n * D);
    for (uint32_t i = 0; i < n; ++i) {
      sidx[i] = in_order ? r.below(3) : i;
      first[i] = (uint8_t)(i == 2 || r.below(4) == 0);
    }
    for (auto &k : keys) k = r.normal();
    std::vector<float> summ((size_t)n_summ * 2 * D);
    for (uint32_t sI = 0; sI < n_summ; ++sI)
      for (uint32_t d = 0; d < D; ++d) {
        summ[sI * 2 * D + d] = -0.5f;
        summ[sI * 2 * D + D + d] = 0.5f;
      }
    std::vector<float> want = summ;
    for (uint32_t i = 0; i < n; ++i)
      for (uint32_t d = 0; d < D; ++d) {
        float *mn = &want[sidx[i] * 2 * D + d], *mx = mn + D;
        const float k = keys[(size_t)i * D + d];
        if (first[i]) {
          *mn = k;
          *mx = k;
        } else {
          *mn = std::min(*mn, k);
          *mx = std::max(*mx, k);
        }
      }
    okv_gpu_append_args_t a = {};
    a.summaries = addr(summ.data());
    a.summary_index = addr(sidx.data());
    a.keys = addr(keys.data());
    a.first = addr(first.data());
    a.n = n;
    a.head_dim = D;
    assert_true(okv_emu::launch(okv_gpu_summary_append, {in_order ? 1u : n, 1, 1}, OKV_GPU_SUMMARY_THREADS, 0, a));
    assert_memory_equal(summ.data(), want.data(), want.size() * sizeof(float));
  }
}

/* Token writes: each entry's K and V elements (already in the KV dtype) land at Kt[d][pos] and V[pos][d] of
 * its slot; everything else keeps its bytes. 2-byte (bf16 / f16) and 4-byte (f32) elements, grid < n. */
void test_kv_write(void **state) {
  (void)state;
  Rng r(12);
  const uint32_t D = 20, n_slots = 4, n = 3;
  for (uint32_t eb = 2; eb <= 4; eb += 2) {
    const size_t slot_el = 2u * OKV_BLOCK_TOKENS * D, bb = slot_el * eb;
    std::vector<unsigned char> kv(n_slots * bb), elems((size_t)n * 2 * D * eb);
    for (auto &b : kv) b = (unsigned char)r.below(256);
    for (auto &b : elems) b = (unsigned char)r.below(256);
    const uint64_t sidx[n] = {2, 0, 2};
    const uint8_t pos[n] = {5, 15, 6};
    std::vector<unsigned char> want = kv;
    for (uint32_t i = 0; i < n; ++i)
      for (uint32_t e = 0; e < 2 * D; ++e) {
        const size_t at = e < D ? (size_t)e * OKV_BLOCK_TOKENS + pos[i] : OKV_BLOCK_TOKENS * D + pos[i] * D + (e - D);
        memcpy(&want[sidx[i] * bb + at * eb], &elems[((size_t)i * 2 * D + e) * eb], eb);
      }
    okv_gpu_kv_write_args_t a = {};
    a.kv = addr(kv.data());
    a.block_bytes = bb;
    a.slot_index = addr(sidx);
    a.pos = addr(pos);
    a.elems = addr(elems.data());
    a.n = n;
    a.head_dim = D;
    a.elem_bytes = eb;
    assert_true(okv_emu::launch(okv_gpu_kv_write, {2, 1, 1}, OKV_GPU_SUMMARY_THREADS, 0, a));
    assert_memory_equal(kv.data(), want.data(), want.size());
  }
}

/* ---- 4. Scores ---- */

void test_scores(void **state) {
  (void)state;
  Rng r(5);
  const uint32_t n_seqs = 2, n_kv = 2, G = OKV_EMU_BIG(3, 2), D = 70, T = 2, U = n_seqs * n_kv, Hq = n_kv * G;
  const uint32_t n0 = OKV_EMU_BIG(130, 67); /* two or three thread blocks of OKV_GPU_SCORE_BLOCKS_PER_CTA */
  const uint32_t seg_n[U] = {n0, 0, 1, OKV_EMU_BIG(64u, 9u)};
  std::vector<uint64_t> sfirst(U), cfirst(U);
  uint64_t total = 0;
  for (uint32_t u = 0; u < U; ++u) {
    sfirst[u] = total + 2; /* gaps between segments */
    cfirst[u] = total + 1;
    total += seg_n[u] + 2;
  }
  std::vector<float> summ((total + 2) * 2 * D), q((size_t)n_seqs * T * Hq * D);
  for (size_t b = 0; b < total + 2; ++b)
    for (uint32_t d = 0; d < D; ++d) {
      const float x = r.normal(), y = r.normal();
      summ[b * 2 * D + d] = std::min(x, y);
      summ[b * 2 * D + D + d] = std::max(x, y);
    }
  for (auto &x : q) x = r.normal();
  for (uint32_t tb = 0; tb < T; ++tb) {
    std::vector<float> scores(total + 2, 42.0f);
    okv_gpu_score_args_t a = {};
    a.q = addr(q.data());
    a.summaries = addr(summ.data());
    a.scores = addr(scores.data());
    a.seg_summary_first = addr(sfirst.data());
    a.seg_n_blocks = addr(seg_n);
    a.seg_score_first = addr(cfirst.data());
    a.n_seqs = n_seqs;
    a.n_kv_heads = n_kv;
    a.group_size = G;
    a.head_dim = D;
    a.n_query_tokens = T;
    a.t_begin = tb;
    a.t_end = T;
    a.scale = 1.0f / std::sqrt((float)D);
    const uint32_t gy = (n0 + OKV_GPU_SCORE_BLOCKS_PER_CTA - 1) / OKV_GPU_SCORE_BLOCKS_PER_CTA;
    assert_true(okv_emu::launch(okv_gpu_score_blocks, {U, gy, 1}, OKV_GPU_SCORE_THREADS, 0, a));
    std::vector<float> want(total + 2, 42.0f);
    for (uint32_t u = 0; u < U; ++u) {
      const uint32_t s = u / n_kv, h = u % n_kv;
      for (uint32_t b = 0; b < seg_n[u]; ++b) {
        double best = -INFINITY;
        for (uint32_t t = tb; t < T; ++t)
          for (uint32_t g = 0; g < G; ++g) {
            const float *qr = &q[(((size_t)s * T + t) * Hq + h * G + g) * D];
            const float *mn = &summ[(sfirst[u] + b) * 2 * D];
            double sum = 0;
            for (uint32_t d = 0; d < D; ++d) sum += std::max((double)qr[d] * mn[d], (double)qr[d] * mn[D + d]);
            best = std::max(best, sum);
          }
        want[cfirst[u] + b] = (float)(best / std::sqrt((double)D));
      }
    }
    for (size_t i = 0; i < want.size(); ++i) {
      if (!(std::fabs(scores[i] - want[i]) <= 1e-4 + 1e-5 * std::fabs(want[i]))) {
        fprintf(stderr, "score[%zu]: got %.7f want %.7f\n", i, scores[i], want[i]);
        fail();
      }
    }
  }
}

/* ---- 4b. Narrowed summaries (f16 / bf16), ranges, group summaries ---- */

/* Exact value of a 16-bit pattern of dtype (1 f16, 2 bf16), inf and NaN included. */
double half_value(uint32_t dtype, uint16_t h) {
  if (dtype == 2) return bf16_value(h);
  const int e = (h >> 10) & 31, m = h & 1023;
  if (e == 31) return m ? NAN : ((h & 0x8000) ? -INFINITY : INFINITY);
  return f16_value(h);
}

/* The oracle of directed narrowing: search in the sorted values of the dtype. */
struct NarrowOracle {
  std::vector<double> v[3];
  NarrowOracle() {
    for (uint32_t dt = 1; dt < 3; ++dt) {
      for (uint32_t h = 0; h < 65536; ++h) {
        const double x = half_value(dt, (uint16_t)h);
        if (!std::isnan(x)) v[dt].push_back(x);
      }
      std::sort(v[dt].begin(), v[dt].end());
    }
  }
  /* largest value <= x (up false) or smallest >= x (up true) */
  double narrow(double x, uint32_t dt, bool up) const {
    if (dt == 0 || std::isnan(x)) return x;
    const std::vector<double> &t = v[dt];
    auto it = std::lower_bound(t.begin(), t.end(), x);
    if (it != t.end() && *it == x) return x;
    return up ? *it : *(it - 1);
  }
};
const NarrowOracle &oracle() {
  static NarrowOracle o;
  return o;
}

/* Element i of a summary array of dtype dt (exact). */
double summ_value(const std::vector<unsigned char> &b, uint32_t dt, size_t i) {
  if (dt == 0) {
    float f;
    memcpy(&f, &b[i * 4], 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, &b[i * 2], 2);
  return half_value(dt, h);
}

void test_narrow_bits(void **state) {
  (void)state;
  Rng r(21);
  const float edges[] = {0.0f,      -0.0f,         1.0f,          65504.0f, 65505.0f, 65536.0f,
                         -70000.0f, 5.9604645e-8f, 2.9802322e-8f, -1e-30f,  1e-45f,   3.4e38f,
                         -3.4e38f,  INFINITY,      -INFINITY,     1.00001f, -1.00001f};
  for (uint32_t dt = 1; dt < 3; ++dt)
    for (uint32_t n = 0; n < 200000; ++n) {
      float x;
      if (n < sizeof edges / sizeof edges[0]) {
        x = edges[n];
      } else {
        uint32_t u = (uint32_t)r.next();
        if (n % 2) u = (u & 0x80ffffffu) | ((100u + r.below(50)) << 23);
        memcpy(&x, &u, 4);
        if (x != x) continue;
      }
      for (int up = 0; up < 2; ++up) {
        const double got = half_value(dt, (uint16_t)okv_narrow_bits(x, dt, up != 0));
        const double want = oracle().narrow(x, dt, up != 0);
        if (!(got == want && std::signbit(got) == std::signbit(want))) {
          fprintf(stderr, "dtype %u narrowing %s of %a: got %a want %a\n", dt, up ? "up" : "down", (double)x, got,
                  want);
          fail();
        }
      }
    }
}

void test_summaries_narrow(void **state) {
  (void)state;
  Rng r(22);
  for (uint32_t sdt = 1; sdt < 3; ++sdt)
    for (uint32_t kdt = 0; kdt < 3; ++kdt) {
      const uint32_t D = 24, n_kv_blocks = 7, n = 5, n_summ = 6, es = sdt == 0 ? 4 : 2;
      const size_t slot_elems = 2 * BT * D;
      Elems kv(kdt, n_kv_blocks * slot_elems);
      for (size_t i = 0; i < kv.value.size(); ++i) kv.set(i, 3.0f * r.normal());
      std::vector<uint64_t> bidx(n), sidx(n);
      std::vector<uint8_t> valid(n);
      for (uint32_t i = 0; i < n; ++i) {
        bidx[i] = r.below(n_kv_blocks);
        sidx[i] = (i * 5 + 1) % n_summ;
        valid[i] = (uint8_t)(1 + r.below(16));
      }
      std::vector<unsigned char> summ((size_t)n_summ * 2 * D * es, 0x33);
      okv_gpu_summary_args_t a = {};
      a.kv = addr(kv.bytes.data());
      a.block_bytes = slot_elems * (kdt == 0 ? 4 : 2);
      a.summaries = addr(summ.data());
      a.block_index = addr(bidx.data());
      a.valid = addr(valid.data());
      a.summary_index = addr(sidx.data());
      a.n_blocks = n;
      a.head_dim = D;
      a.kv_dtype = kdt;
      a.summary_dtype = sdt;
      assert_true(okv_emu::launch(okv_gpu_summarize_blocks, {n, 1, 1}, OKV_GPU_SUMMARY_THREADS, 0, a));
      for (uint32_t i = 0; i < n; ++i)
        for (uint32_t d = 0; d < D; ++d) {
          double mn = INFINITY, mx = -INFINITY;
          for (uint32_t j = 0; j < valid[i]; ++j) {
            const double k = kv.value[bidx[i] * slot_elems + d * BT + j];
            mn = std::min(mn, k);
            mx = std::max(mx, k);
          }
          assert_true(summ_value(summ, sdt, sidx[i] * 2 * D + d) == oracle().narrow(mn, sdt, false));
          assert_true(summ_value(summ, sdt, sidx[i] * 2 * D + D + d) == oracle().narrow(mx, sdt, true));
        }
    }
}

void test_summary_append_narrow(void **state) {
  (void)state;
  Rng r(23);
  const uint32_t D = 20, n_summ = 4;
  for (uint32_t sdt = 1; sdt < 3; ++sdt) {
    const uint32_t n = 11; /* repeats: applied in order with a grid of 1 */
    std::vector<uint64_t> sidx(n);
    std::vector<uint8_t> first(n);
    std::vector<float> keys((size_t)n * D);
    for (uint32_t i = 0; i < n; ++i) {
      sidx[i] = r.below(3);
      first[i] = (uint8_t)(i < 3 ? 1 : r.below(5) == 0);
    }
    for (auto &k : keys) k = r.normal();
    std::vector<unsigned char> summ((size_t)n_summ * 2 * D * 2, 0x11);
    std::vector<double> want(n_summ * 2 * D, 0.0);
    for (size_t i = 0; i < want.size(); ++i) want[i] = summ_value(summ, sdt, i);
    for (uint32_t i = 0; i < n; ++i)
      for (uint32_t d = 0; d < D; ++d) {
        double *mn = &want[sidx[i] * 2 * D + d], *mx = mn + D;
        const double k = keys[(size_t)i * D + d];
        *mn = oracle().narrow(first[i] ? k : std::min(*mn, k), sdt, false);
        *mx = oracle().narrow(first[i] ? k : std::max(*mx, k), sdt, true);
      }
    okv_gpu_append_args_t a = {};
    a.summaries = addr(summ.data());
    a.summary_index = addr(sidx.data());
    a.keys = addr(keys.data());
    a.first = addr(first.data());
    a.n = n;
    a.head_dim = D;
    a.summary_dtype = sdt;
    assert_true(okv_emu::launch(okv_gpu_summary_append, {1, 1, 1}, OKV_GPU_SUMMARY_THREADS, 0, a));
    for (size_t i = 0; i < want.size(); ++i) assert_true(summ_value(summ, sdt, i) == want[i]);
  }
}

void test_summary_reduce(void **state) {
  (void)state;
  Rng r(24);
  const uint32_t D = 36, n_src = 40, n = 5, n_dst = 6;
  for (uint32_t sdt = 0; sdt < 3; ++sdt)
    for (uint32_t ddt = 0; ddt < 3; ++ddt) {
      Elems src(sdt, (size_t)n_src * 2 * D);
      for (uint32_t b = 0; b < n_src; ++b)
        for (uint32_t d = 0; d < D; ++d) {
          const float x = 4.0f * r.normal(), y = 4.0f * r.normal();
          src.set((size_t)b * 2 * D + d, std::min(x, y));
          src.set((size_t)b * 2 * D + D + d, std::max(x, y));
        }
      std::vector<uint64_t> first(n), di(n);
      std::vector<uint32_t> cnt(n);
      for (uint32_t i = 0; i < n; ++i) {
        cnt[i] = 1 + r.below(16);
        first[i] = r.below(n_src - cnt[i] + 1);
        di[i] = (i * 5 + 1) % n_dst; /* distinct */
      }
      std::vector<unsigned char> dst((size_t)n_dst * 2 * D * (ddt == 0 ? 4 : 2), 0x44);
      const std::vector<unsigned char> before = dst;
      okv_gpu_reduce_args_t a = {};
      a.src = addr(src.bytes.data());
      a.dst = addr(dst.data());
      a.src_first = addr(first.data());
      a.src_n = addr(cnt.data());
      a.dst_index = addr(di.data());
      a.n = n;
      a.head_dim = D;
      a.src_dtype = sdt;
      a.dst_dtype = ddt;
      assert_true(okv_emu::launch(okv_gpu_summary_reduce, {3, 1, 1}, OKV_GPU_SUMMARY_THREADS, 0, a)); /* grid < n */
      std::vector<bool> hit(n_dst, false);
      for (uint32_t i = 0; i < n; ++i) {
        hit[di[i]] = true;
        for (uint32_t d = 0; d < D; ++d) {
          double mn = INFINITY, mx = -INFINITY;
          for (uint32_t j = 0; j < cnt[i]; ++j) {
            mn = std::min(mn, src.value[(first[i] + j) * 2 * D + d]);
            mx = std::max(mx, src.value[(first[i] + j) * 2 * D + D + d]);
          }
          const double got_mn = summ_value(dst, ddt, di[i] * 2 * D + d),
                       got_mx = summ_value(dst, ddt, di[i] * 2 * D + D + d);
          if (!(got_mn == oracle().narrow(mn, ddt, false) && got_mx == oracle().narrow(mx, ddt, true))) {
            fprintf(stderr, "reduce %u -> %u entry %u d %u: min %a (want %a of %a), max %a (want %a of %a)\n", sdt, ddt,
                    i, d, got_mn, oracle().narrow(mn, ddt, false), mn, got_mx, oracle().narrow(mx, ddt, true), mx);
            fail();
          }
        }
      }
      for (uint32_t k = 0; k < n_dst; ++k) /* others untouched */
        if (!hit[k]) {
          const size_t sb = (size_t)2 * D * (ddt == 0 ? 4 : 2);
          assert_memory_equal(&dst[k * sb], &before[k * sb], sb);
        }
    }
}

/* n random min/max summaries of head_dim D in dtype sdt (min <= max per element). */
Elems random_summaries(Rng &r, uint32_t sdt, uint32_t n, uint32_t D) {
  Elems summ(sdt, (size_t)n * 2 * D);
  for (uint32_t b = 0; b < n; ++b)
    for (uint32_t d = 0; d < D; ++d) {
      const float x = r.normal(), y = r.normal();
      summ.set((size_t)b * 2 * D + d, std::min(x, y));
      summ.set((size_t)b * 2 * D + D + d, std::max(x, y));
    }
  return summ;
}

/* The double-precision bound of KV head h's query rows (all T tokens of sequence 0) on summary `si`. */
float ref_bound(const std::vector<float> &q, const Elems &summ, uint32_t Hq, uint32_t G, uint32_t T, uint32_t D,
                uint32_t h, uint64_t si) {
  double best = -INFINITY;
  for (uint32_t t = 0; t < T; ++t)
    for (uint32_t g = 0; g < G; ++g) {
      const float *qr = &q[((size_t)t * Hq + h * G + g) * D];
      const size_t e0 = si * 2 * D;
      double sum = 0;
      for (uint32_t d = 0; d < D; ++d)
        sum += std::max((double)qr[d] * summ.value[e0 + d], (double)qr[d] * summ.value[e0 + D + d]);
      best = std::max(best, sum);
    }
  return (float)(best / std::sqrt((double)D));
}

/* Scores on bf16 summaries through a range list (a segment twice, an empty
 * range, a range of more than one thread block of blocks). */
void test_scores_ranges_bf16(void **state) {
  (void)state;
  Rng r(25);
  const uint32_t n_seqs = 1, n_kv = 3, G = 2, D = 40, T = 2, Hq = n_kv * G, n_summ = OKV_EMU_BIG(200, 100);
  const uint32_t sdt = 2;
  const Elems summ = random_summaries(r, sdt, n_summ, D);
  std::vector<float> q((size_t)n_seqs * T * Hq * D);
  for (auto &x : q) x = r.normal();
  const uint32_t nr = 4;
  const uint32_t rseg[nr] = {2, 0, 2, 1}, rn[nr] = {5, OKV_EMU_BIG(130u, 70u), 0, 16};
  const uint64_t rsf[nr] = {3, 20, 0, n_summ - 16};
  std::vector<uint64_t> rcf(nr);
  uint64_t total = 1;
  for (uint32_t k = 0; k < nr; ++k) rcf[k] = total, total += rn[k] + 1;
  std::vector<float> scores(total + 1, 42.0f);
  okv_gpu_score_args_t a = {};
  a.q = addr(q.data());
  a.summaries = addr(summ.bytes.data());
  a.scores = addr(scores.data());
  a.n_seqs = n_seqs;
  a.n_kv_heads = n_kv;
  a.group_size = G;
  a.head_dim = D;
  a.n_query_tokens = T;
  a.t_begin = 0;
  a.t_end = T;
  a.scale = 1.0f / std::sqrt((float)D);
  a.range_seg = addr(rseg);
  a.range_summary_first = addr(rsf);
  a.range_n_blocks = addr(rn);
  a.range_score_first = addr(rcf.data());
  a.n_ranges = nr;
  a.summary_dtype = sdt;
  const uint32_t gy = (rn[1] + OKV_GPU_SCORE_BLOCKS_PER_CTA - 1) / OKV_GPU_SCORE_BLOCKS_PER_CTA;
  assert_true(okv_emu::launch(okv_gpu_score_blocks, {nr, gy, 1}, OKV_GPU_SCORE_THREADS, 0, a));
  std::vector<float> want(total + 1, 42.0f);
  for (uint32_t k = 0; k < nr; ++k)
    for (uint32_t b = 0; b < rn[k]; ++b) want[rcf[k] + b] = ref_bound(q, summ, Hq, G, T, D, rseg[k], rsf[k] + b);
  for (size_t i = 0; i < want.size(); ++i)
    if (!(std::fabs(scores[i] - want[i]) <= 1e-4 + 1e-5 * std::fabs(want[i]))) {
      fprintf(stderr, "range score[%zu]: got %.7f want %.7f\n", i, scores[i], want[i]);
      fail();
    }
}

/* Scores through candidate lists (list mode): each listed block's summary found through its segment's runs
 * (two runs, one of them out of block order in summary space), entries in no run (past the runs, in a gap,
 * UINT32_MAX) scoring -infinity, an empty list, and a list longer than one thread block of blocks. */
void test_scores_list_bf16(void **state) {
  (void)state;
  Rng r(26);
  const uint32_t n_kv = 3, G = 2, D = 40, T = 2, Hq = n_kv * G, n_summ = 300, stride = OKV_EMU_BIG(140u, 72u);
  const uint32_t sdt = 2;
  const Elems summ = random_summaries(r, sdt, n_summ, D);
  std::vector<float> q((size_t)T * Hq * D);
  for (auto &x : q) x = r.normal();
  /* segment 0: blocks [0, 64) at summaries 200.., blocks [70, 150) at 10..; segment 1: no runs; segment 2:
   * blocks [0, 90) at 100.. */
  const uint32_t ro[4] = {0, 2, 2, 3}, rf[3] = {0, 70, 0}, rn[3] = {64, 80, 90};
  const uint64_t rs[3] = {200, 10, 100};
  const uint32_t seg_n[3] = {stride, 0, 7};
  std::vector<uint32_t> list((size_t)3 * stride, 0xffffffffu);
  for (uint32_t i = 0; i < stride; ++i) list[i] = (i * 37u) % 160u; /* covers both runs, the gap and the tail */
  const uint32_t l2[7] = {0, 89, 90, 0xffffffffu, 45, 46, 47};
  for (uint32_t i = 0; i < 7; ++i) list[2 * stride + i] = l2[i];
  const uint64_t sfirst[3] = {1, 1 + stride, 1 + stride};
  std::vector<float> scores(2 + stride + 7, 42.0f);
  okv_gpu_score_args_t a = {};
  a.q = addr(q.data());
  a.summaries = addr(summ.bytes.data());
  a.scores = addr(scores.data());
  a.seg_summary_first = addr(sfirst); /* ignored in list mode */
  a.seg_n_blocks = addr(seg_n);
  a.seg_score_first = addr(sfirst);
  a.n_seqs = 1;
  a.n_kv_heads = n_kv;
  a.group_size = G;
  a.head_dim = D;
  a.n_query_tokens = T;
  a.t_begin = 0;
  a.t_end = T;
  a.scale = 1.0f / std::sqrt((float)D);
  a.summary_dtype = sdt;
  a.list_blocks = addr(list.data());
  a.list_stride = stride;
  a.seg_run_offsets = addr(ro);
  a.run_first_block = addr(rf);
  a.run_n_blocks = addr(rn);
  a.run_summary_first = addr(rs);
  const uint32_t gy = (stride + OKV_GPU_SCORE_BLOCKS_PER_CTA - 1) / OKV_GPU_SCORE_BLOCKS_PER_CTA;
  assert_true(okv_emu::launch(okv_gpu_score_blocks, {n_kv, gy, 1}, OKV_GPU_SCORE_THREADS, 0, a));
  std::vector<float> want(scores.size(), 42.0f);
  uint32_t n_inf = 0;
  for (uint32_t u = 0; u < 3; ++u)
    for (uint32_t i = 0; i < seg_n[u]; ++i) {
      const uint32_t b = list[(size_t)u * stride + i];
      float w = -INFINITY;
      for (uint32_t k = ro[u]; k < ro[u + 1]; ++k)
        if (b >= rf[k] && b - rf[k] < rn[k]) w = ref_bound(q, summ, Hq, G, T, D, u, rs[k] + (b - rf[k]));
      n_inf += w == -INFINITY;
      want[sfirst[u] + i] = w;
    }
  assert_true(n_inf >= 4); /* the gap, the tail, past segment 2's run and UINT32_MAX all occur */
  for (size_t i = 0; i < want.size(); ++i)
    if (!(scores[i] == want[i] || std::fabs(scores[i] - want[i]) <= 1e-4 + 1e-5 * std::fabs(want[i]))) {
      fprintf(stderr, "list score[%zu]: got %.7f want %.7f\n", i, scores[i], want[i]);
      fail();
    }
}

/* 8-bit summaries (OKV_DTYPE_Q8): the reduce kernel's codes pass the
 * format's checks (kernel_ref.c), and the scoring kernel's scores equal the
 * double-precision definition, for a head_dim that leaves lanes idle. */
void test_q8(void **state) {
  (void)state;
  Rng r(26);
  const uint32_t n_kv = 2, G = 3, D = 40, Hq = n_kv * G, nb = 19, n = n_kv * nb;
  Elems src(2, (size_t)n * 2 * D);
  for (uint32_t b = 0; b < n; ++b)
    for (uint32_t d = 0; d < D; ++d) {
      const float x = 2.0f * r.normal(), y = 2.0f * r.normal();
      src.set((size_t)b * 2 * D + d, b == 4 ? 0.5f : std::min(x, y));
      src.set((size_t)b * 2 * D + D + d, b == 4 ? 0.5f : std::max(x, y));
    }
  const size_t qb = 8 + 2 * D;
  std::vector<unsigned char> q8(qb * n, 0x44);
  std::vector<uint64_t> first(n);
  std::vector<uint32_t> ones(n, 1);
  for (uint32_t i = 0; i < n; ++i) first[i] = i;
  okv_gpu_reduce_args_t ra = {};
  ra.src = addr(src.bytes.data());
  ra.dst = addr(q8.data());
  ra.src_first = addr(first.data());
  ra.src_n = addr(ones.data());
  ra.dst_index = addr(first.data());
  ra.n = n;
  ra.head_dim = D;
  ra.src_dtype = 2;
  ra.dst_dtype = OKV_DTYPE_Q8;
  assert_true(okv_emu::launch(okv_gpu_summary_reduce, {5, 1, 1}, OKV_GPU_SUMMARY_THREADS, 0, ra));
  std::vector<float> mn(D), mx(D);
  for (uint32_t b = 0; b < n; ++b) {
    for (uint32_t d = 0; d < D; ++d) {
      mn[d] = (float)src.value[(size_t)b * 2 * D + d];
      mx[d] = (float)src.value[(size_t)b * 2 * D + D + d];
    }
    const int why = okv_ref_q8_check(mn.data(), mx.data(), D, &q8[b * qb]);
    if (why != 0) fprintf(stderr, "8-bit summary %u fails check %d\n", b, why);
    assert_int_equal(why, 0);
  }
  /* 6 query rows (quantized once per CTA) and 18 (more than OKV_GPU_SCORE_ROWS: per block) */
  for (const uint32_t T : {2u, 6u}) {
    std::vector<float> q((size_t)T * Hq * D);
    for (auto &x : q) x = r.normal();
    for (uint32_t d = 0; d < D; ++d) q[(size_t)(1 * G + 1) * D + d] = 0.0f; /* head 1, t = 0, g = 1: a zero row */
    std::vector<uint64_t> sf = {0, nb}, cf = {0, nb};
    std::vector<uint32_t> sn = {nb, nb};
    std::vector<float> scores(n, 42.0f);
    okv_gpu_score_args_t a = {};
    a.q = addr(q.data());
    a.summaries = addr(q8.data());
    a.scores = addr(scores.data());
    a.seg_summary_first = addr(sf.data());
    a.seg_n_blocks = addr(sn.data());
    a.seg_score_first = addr(cf.data());
    a.n_seqs = 1;
    a.n_kv_heads = n_kv;
    a.group_size = G;
    a.head_dim = D;
    a.n_query_tokens = T;
    a.t_begin = 0;
    a.t_end = T;
    a.scale = (float)(1.0 / std::sqrt((double)D));
    a.summary_dtype = OKV_DTYPE_Q8;
    const uint32_t gy = (nb + OKV_GPU_SCORE_BLOCKS_PER_CTA - 1) / OKV_GPU_SCORE_BLOCKS_PER_CTA;
    assert_true(okv_emu::launch(okv_gpu_score_blocks, {n_kv, gy, 1}, OKV_GPU_SCORE_THREADS, 0, a));
    for (uint32_t h = 0; h < n_kv; ++h)
      for (uint32_t b = 0; b < nb; ++b) {
        double best = -INFINITY;
        for (uint32_t t = 0; t < T; ++t)
          for (uint32_t g = 0; g < G; ++g)
            best = std::max(best, okv_ref_q8_row(&q8[(h * nb + b) * qb], &q[((size_t)t * Hq + h * G + g) * D], D));
        const float got = scores[h * nb + b];
        if (!(std::fabs(got - best) <= 1e-5 * (1.0 + std::fabs(best)))) {
          fprintf(stderr, "8-bit score head %u block %u: got %.9g want %.9g\n", h, b, got, best);
          fail();
        }
      }
  }
}

/* 4-bit centres (OKV_DTYPE_C4): the reduce kernel's lanes pass the format's checks (q8_ref.c), written into
 * tiles in reverse order and over garbage; the scoring kernel's estimates equal the double-precision definition
 * per segment (the second starting inside a tile), +infinity for a head with a NaN query element. head_dim 40
 * leaves lanes idle and packs 20 code bytes. */
void test_c4(void **state) {
  (void)state;
  Rng r(27);
  const uint32_t n_kv = 3, G = 3, D = 40, Hq = n_kv * G, nb = 19, n = n_kv * nb;
  Elems src(2, (size_t)n * 2 * D);
  for (uint32_t b = 0; b < n; ++b)
    for (uint32_t d = 0; d < D; ++d) {
      const float x = 2.0f * r.normal(), y = 2.0f * r.normal();
      src.set((size_t)b * 2 * D + d, b == 4 ? 0.5f : std::min(x, y));
      src.set((size_t)b * 2 * D + D + d, b == 4 ? 0.5f : std::max(x, y));
    }
  const size_t tb = okv_ref_c4_tile_bytes(D), n_tiles = (n + 15) / 16;
  std::vector<unsigned char> c4(tb * n_tiles, 0x5A);
  std::vector<uint64_t> idx(n);
  std::vector<uint32_t> ones(n, 1);
  for (uint32_t i = 0; i < n; ++i) idx[i] = n - 1 - i;
  okv_gpu_reduce_args_t ra = {};
  ra.src = addr(src.bytes.data());
  ra.dst = addr(c4.data());
  ra.src_first = addr(idx.data());
  ra.src_n = addr(ones.data());
  ra.dst_index = addr(idx.data());
  ra.n = n;
  ra.head_dim = D;
  ra.src_dtype = 2;
  ra.dst_dtype = OKV_DTYPE_C4;
  assert_true(okv_emu::launch(okv_gpu_summary_reduce, {5, 1, 1}, OKV_GPU_SUMMARY_THREADS, 0, ra));
  std::vector<float> mn(D), mx(D);
  for (uint32_t b = 0; b < n; ++b) {
    for (uint32_t d = 0; d < D; ++d) {
      mn[d] = (float)src.value[(size_t)b * 2 * D + d];
      mx[d] = (float)src.value[(size_t)b * 2 * D + D + d];
    }
    const int why = okv_ref_c4_check(mn.data(), mx.data(), D, &c4[b / 16 * tb], b % 16);
    if (why != 0) fprintf(stderr, "4-bit summary %u fails check %d\n", b, why);
    assert_int_equal(why, 0);
  }
  /* 6 query rows (quantized once per CTA) and 18 (more than OKV_GPU_SCORE_ROWS: per block) */
  for (const uint32_t T : {2u, 6u}) {
    std::vector<float> q((size_t)T * Hq * D);
    for (auto &x : q) x = r.normal();
    q[((size_t)(T - 1) * Hq + 1 * G + 2) * D + 3] = NAN; /* a NaN element: head 1's blocks score +inf */
    /* head 2: elements near f32's largest, alternating signs, so that the |x| sum passes f32's range: +inf too */
    for (uint32_t d = 0; d < D; ++d) q[((size_t)(T - 1) * Hq + 2 * G + 1) * D + d] = d % 2 ? -3e38f : 3e38f;
    std::vector<uint64_t> sf = {0, nb, 2 * nb}, cf = {0, nb, 2 * nb};
    std::vector<uint32_t> sn = {nb, nb, nb};
    std::vector<float> scores(n, 42.0f);
    okv_gpu_score_args_t a = {};
    a.q = addr(q.data());
    a.summaries = addr(c4.data());
    a.scores = addr(scores.data());
    a.seg_summary_first = addr(sf.data());
    a.seg_n_blocks = addr(sn.data());
    a.seg_score_first = addr(cf.data());
    a.n_seqs = 1;
    a.n_kv_heads = n_kv;
    a.group_size = G;
    a.head_dim = D;
    a.n_query_tokens = T;
    a.t_begin = 0;
    a.t_end = T;
    a.scale = (float)(1.0 / std::sqrt((double)D));
    a.summary_dtype = OKV_DTYPE_C4;
    const uint32_t gy = (nb + OKV_GPU_SCORE_BLOCKS_PER_CTA - 1) / OKV_GPU_SCORE_BLOCKS_PER_CTA;
    assert_true(okv_emu::launch(okv_gpu_score_blocks, {n_kv, gy, 1}, OKV_GPU_SCORE_THREADS, 0, a));
    for (uint32_t h = 0; h < n_kv; ++h) {
      std::vector<const float *> rows;
      for (uint32_t t = 0; t < T; ++t)
        for (uint32_t g = 0; g < G; ++g) rows.push_back(&q[((size_t)t * Hq + h * G + g) * D]);
      for (uint32_t b = 0; b < nb; ++b) {
        const uint32_t blk = h * nb + b;
        const double want = okv_ref_c4_score(&c4[blk / 16 * tb], blk % 16, rows.data(), (uint32_t)rows.size(), D);
        const float got = scores[blk];
        if (h >= 1) assert_true(std::isinf(want) && want > 0);
        if (!(got == want || std::fabs(got - want) <= 1e-5 * (1.0 + std::fabs(want)))) {
          fprintf(stderr, "4-bit estimate head %u block %u: got %.9g want %.9g\n", h, b, got, want);
          fail();
        }
      }
    }
  }
}

/* ---- 5. Top-K ---- */

void check_topk(const std::vector<std::vector<float>> &segs, const std::vector<std::vector<uint32_t>> &excl, uint32_t k,
                bool with_excl, bool with_map = false, bool ascending = false) {
  const uint32_t U = (uint32_t)segs.size();
  std::vector<float> scores;
  std::vector<uint64_t> first(U);
  std::vector<uint32_t> seg_n(U), eoff(U + 1, 0), eblocks;
  uint32_t max_n = 0;
  for (uint32_t u = 0; u < U; ++u) {
    scores.push_back(99.0f); /* a gap the kernel must not read */
    first[u] = scores.size();
    scores.insert(scores.end(), segs[u].begin(), segs[u].end());
    seg_n[u] = (uint32_t)segs[u].size();
    max_n = std::max(max_n, seg_n[u]);
    if (with_excl) eblocks.insert(eblocks.end(), excl[u].begin(), excl[u].end());
    eoff[u + 1] = (uint32_t)eblocks.size();
  }
  std::vector<uint32_t> out((size_t)U * k, 77u), counts(U, 77u), map(scores.size());
  for (size_t i = 0; i < map.size(); ++i) map[i] = (uint32_t)(i * 2654435761u) ^ 0x5bd1e995u; /* arbitrary ids */
  okv_gpu_topk_args_t a = {};
  a.scores = addr(scores.data());
  a.seg_score_first = addr(first.data());
  a.seg_n = addr(seg_n.data());
  a.excl_offsets = with_excl ? addr(eoff.data()) : 0;
  a.excl_blocks = with_excl ? addr(eblocks.data()) : 0;
  a.out_indices = addr(out.data());
  a.out_counts = addr(counts.data());
  a.n_segments = U;
  a.k = k;
  a.index_map = with_map ? addr(map.data()) : 0;
  a.ascending = ascending ? 1u : 0u;
  assert_true(okv_emu::launch(okv_gpu_topk, {U, 1, 1}, OKV_GPU_TOPK_THREADS, 4 * ((max_n + 31) / 32), a));
  for (uint32_t u = 0; u < U; ++u) {
    std::vector<bool> excluded(seg_n[u], false);
    if (with_excl)
      for (uint32_t b : excl[u])
        if (b < seg_n[u]) excluded[b] = true;
    std::vector<uint32_t> cand;
    for (uint32_t b = 0; b < seg_n[u]; ++b)
      if (!excluded[b]) cand.push_back(b);
    auto val = [&](uint32_t b) {
      const float f = segs[u][b];
      return std::isnan(f) ? -INFINITY : (double)f; /* NaN counts as -infinity; -0 == +0 */
    };
    std::stable_sort(cand.begin(), cand.end(), [&](uint32_t x, uint32_t y) { return val(x) > val(y); });
    const uint32_t cnt = std::min<uint32_t>(k, (uint32_t)cand.size());
    if (ascending) std::sort(cand.begin(), cand.begin() + cnt); /* the same set, by position */
    assert_int_equal(counts[u], cnt);
    for (uint32_t i = 0; i < k; ++i) {
      const uint32_t want = i < cnt ? (with_map ? map[first[u] + cand[i]] : cand[i]) : 0xffffffffu;
      if (out[(size_t)u * k + i] != want) {
        fprintf(stderr, "topk seg %u (n=%u k=%u) rank %u: got %u want %u\n", u, seg_n[u], k, i, out[(size_t)u * k + i],
                want);
        fail();
      }
    }
  }
}

void test_topk(void **state) {
  (void)state;
  Rng r(6);
  std::vector<std::vector<float>> segs;
  std::vector<std::vector<uint32_t>> excl;
  /* up to the documented maximum n */
  const std::vector<uint32_t> sizes =
      OKV_EMU_BIG((std::vector<uint32_t>{0, 1, 5, 37, 700, 1500, 65536}), (std::vector<uint32_t>{0, 1, 5, 37, 700}));
  for (uint32_t n : sizes) {
    std::vector<float> s(n);
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t kind = r.below(20);
      if (kind == 0)
        s[i] = std::numeric_limits<float>::quiet_NaN();
      else if (kind == 1)
        s[i] = -INFINITY;
      else if (kind == 2)
        s[i] = (r.below(2) ? -0.0f : 0.0f);
      else
        s[i] = (float)(int)(r.below(40)) * 0.25f - 5.0f; /* many ties */
    }
    segs.push_back(s);
    std::vector<uint32_t> e;
    for (uint32_t i = 0; i < n / 7; ++i) e.push_back(r.below(n + 3)); /* repeats and out-of-range */
    excl.push_back(e);
  }
  for (uint32_t k : OKV_EMU_BIG((std::vector<uint32_t>{1u, 7u, 64u, 512u}), (std::vector<uint32_t>{7u, 512u}))) {
    check_topk(segs, excl, k, false);
    check_topk(segs, excl, k, true);
    check_topk(segs, excl, k, true, true);
    check_topk(segs, excl, k, true, false, true);
    check_topk(segs, excl, k, true, true, true);
  }
}

void test_topk_all_excluded(void **state) {
  (void)state;
  std::vector<std::vector<float>> segs = {{1.0f, 2.0f, 3.0f}, {0.5f, 0.25f}};
  std::vector<std::vector<uint32_t>> excl = {{0, 1, 2}, {1}};
  check_topk(segs, excl, 4, true);
}

/* ---- 6. Selection on slot tables ----
 * The rule itself is checked against the host selection by the HAL suite
 * (test_select_against_host); here the kernels' indexing: per-head table,
 * prediction, parameter and plan strides, the count clamp and the grid-stride
 * loop over more heads than threads. Each step, every head's table, plan and
 * result equal those of the rule run directly on a copy. */
void test_select_kernels(void **state) {
  (void)state;
  const uint32_t H = OKV_EMU_BIG(150u, 70u), K = 8, C = 2, R = K + 1 + C, W = 2, P = K, NB = 100;
  const uint64_t tb = okv_slot_table_bytes(R, W);
  std::vector<uint64_t> tables(H * tb / 8), ref;
  for (uint32_t h = 0; h < H; ++h) {
    uint32_t *t = (uint32_t *)(tables.data() + h * tb / 8);
    for (uint32_t j = 0; j < R; ++j) t[j] = OKV_SLOT_FREE;
    t[0] = NB - 1; /* the active block */
    ((uint64_t *)(t + 4 * R))[(NB - 1) / 64] |= 1ull << ((NB - 1) % 64);
  }
  ref = tables;
  std::vector<uint32_t> pred(H * P), counts(H), params(2 * H), plan(H * C * OKV_SELECT_PLAN_U32S, 7u),
      result(H * OKV_SELECT_RESULT_U32S, 7u), ref_plan = plan, ref_result = result;
  std::vector<uint8_t> landed(H);
  Rng rng(5);
  uint64_t admitted = 0;
  for (uint32_t step = 1; step <= 12; ++step) {
    for (uint32_t h = 0; h < H; ++h) {
      for (uint32_t i = 0; i < P; ++i) pred[h * P + i] = rng.below(NB + 8); /* repeats, the active block, past W */
      counts[h] = rng.below(P + 3);                                         /* some over the stride */
      params[2 * h] = NB - 1;
      params[2 * h + 1] = rng.below(C + 1);
      landed[h] = rng.below(4) != 0;
    }
    okv_gpu_select_args_t a = {};
    a.tables = addr(tables.data());
    a.table_bytes = tb;
    a.predicted = addr(pred.data());
    a.counts = addr(counts.data());
    a.head_params = addr(params.data());
    a.plan = addr(plan.data());
    a.result = addr(result.data());
    a.n_heads = H;
    a.n_slots = R;
    a.bitmap_words = W;
    a.budget_blocks = K;
    a.step = step;
    a.predicted_stride = P;
    a.plan_stride = C;
    assert_true(okv_emu::launch(okv_gpu_select, {1, 1, 1}, OKV_GPU_SELECT_THREADS, 0, a)); /* grid < heads */
    okv_gpu_slot_commit_args_t c = {};
    c.tables = a.tables;
    c.table_bytes = tb;
    c.plan = a.plan;
    c.result = a.result;
    c.landed = addr(landed.data());
    c.n_heads = H;
    c.n_slots = R;
    c.bitmap_words = W;
    c.plan_stride = C;
    for (uint32_t h = 0; h < H; ++h) {
      uint32_t *t = (uint32_t *)(ref.data() + h * tb / 8);
      okv_select_rule_head(t, R, W, K, step, &pred[h * P], std::min(counts[h], P), NB - 1, params[2 * h + 1],
                           &ref_plan[h * C * OKV_SELECT_PLAN_U32S], &ref_result[h * OKV_SELECT_RESULT_U32S]);
      admitted += ref_result[h * OKV_SELECT_RESULT_U32S];
    }
    assert_memory_equal(result.data(), ref_result.data(), result.size() * 4);
    assert_memory_equal(plan.data(), ref_plan.data(), plan.size() * 4);
    assert_memory_equal(tables.data(), ref.data(), tables.size() * 8);
    assert_true(okv_emu::launch(okv_gpu_slot_commit, {2, 1, 1}, OKV_GPU_SELECT_THREADS, 0, c));
    for (uint32_t h = 0; h < H; ++h)
      okv_commit_rule_head((uint32_t *)(ref.data() + h * tb / 8), R, W, &ref_plan[h * C * OKV_SELECT_PLAN_U32S],
                           std::min(ref_result[h * OKV_SELECT_RESULT_U32S], C), landed[h]);
    assert_memory_equal(tables.data(), ref.data(), tables.size() * 8);
  }
  assert_true(admitted > H); /* the steps admitted blocks (and so evicted some, with K = 8 over 12 steps) */
}

}  // namespace

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gather),
      cmocka_unit_test(test_attention_f32_multi_chunk),
      cmocka_unit_test(test_attention_bf16),
      cmocka_unit_test(test_attention_f16_no_inflight),
      cmocka_unit_test(test_attention_inflight_subset),
      cmocka_unit_test(test_attention_tables),
      cmocka_unit_test(test_summaries),
      cmocka_unit_test(test_summary_append),
      cmocka_unit_test(test_kv_write),
      cmocka_unit_test(test_scores),
      cmocka_unit_test(test_narrow_bits),
      cmocka_unit_test(test_summaries_narrow),
      cmocka_unit_test(test_summary_append_narrow),
      cmocka_unit_test(test_summary_reduce),
      cmocka_unit_test(test_scores_ranges_bf16),
      cmocka_unit_test(test_scores_list_bf16),
      cmocka_unit_test(test_q8),
      cmocka_unit_test(test_c4),
      cmocka_unit_test(test_topk),
      cmocka_unit_test(test_topk_all_excluded),
      cmocka_unit_test(test_select_kernels),
  };
  printf("GPU kernels on the CPU emulator, warp size %d\n", OKV_EMU_WARP);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
