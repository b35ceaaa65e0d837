/* Direct tests of the CPU kernels (backends/cpu/cpu_kernels.h) on raw host
 * pointers against the double-precision reference, at every SIMD level the
 * machine supports and with 1 and 2 OpenMP threads. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "tests/kernels/kernel_case.h"

/* Stated tolerances (docs/kernels.md): attention output vs the reference on the
 * dtype-rounded K/V: |err| <= 1e-6 * max|v| * (1 + A), A the logit conditioning
 * sum_i |q_i k_i| / sqrt(d); block mass: 1e-6 * (1 + A) absolute. */
#define ATTN_TOL 1e-6

static int g_verbose = 0;

/* libgomp's fork/join barriers are invisible to ThreadSanitizer (it reports
 * every OpenMP region's shared data as racing), so TSan builds run 1 thread. */
#if defined(__SANITIZE_THREAD__)
#define MAX_THREADS 1
#else
#define MAX_THREADS 2
#endif

static int setup(void **state) {
  (void)state;
  okv_cpu_isa_limit(OKV_CPU_ISA_AVX512);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  okv_cpu_isa_limit(OKV_CPU_ISA_AVX512);
  return 0;
}

/* ---- conversions ---- */

static void test_conversions(void **state) {
  (void)state;
  /* bf16: round to nearest even, NaN stays NaN */
  assert_int_equal(okv_f32_to_bf16(1.0f), 0x3F80);
  float x;
  uint32_t u = 0x3F808000u; /* exactly halfway between 0x3F80 and 0x3F81: ties to even 0x3F80 */
  memcpy(&x, &u, 4);
  assert_int_equal(okv_f32_to_bf16(x), 0x3F80);
  u = 0x3F818000u; /* halfway, odd below: rounds up to 0x3F82 */
  memcpy(&x, &u, 4);
  assert_int_equal(okv_f32_to_bf16(x), 0x3F82);
  assert_true(isnan(okv_bf16_to_f32(okv_f32_to_bf16(NAN))));
  assert_true(okv_bf16_to_f32(okv_f32_to_bf16(INFINITY)) == INFINITY);
  /* f16: known encodings */
  assert_int_equal(okv_f32_to_f16(1.0f), 0x3C00);
  assert_int_equal(okv_f32_to_f16(-2.0f), 0xC000);
  assert_int_equal(okv_f32_to_f16(65504.0f), 0x7BFF);
  assert_int_equal(okv_f32_to_f16(65520.0f), 0x7C00);   /* overflow to inf */
  assert_int_equal(okv_f32_to_f16(0x1p-24f), 0x0001);   /* smallest subnormal */
  assert_int_equal(okv_f32_to_f16(0x1p-25f), 0x0000);   /* tie to even (zero) */
  assert_int_equal(okv_f32_to_f16(0x1.8p-24f), 0x0002); /* tie to even (2) */
  assert_true(okv_f16_to_f32(0x0001) == 0x1p-24f);
  assert_true(okv_f16_to_f32(0x7C00) == INFINITY);
  assert_true(isnan(okv_f16_to_f32(okv_f32_to_f16(NAN))));
  /* every finite f16 survives a round trip, and every bf16 too */
  for (uint32_t h = 0; h < 65536; h++) {
    if ((h & 0x7C00u) == 0x7C00u && (h & 0x3FFu)) continue;
    assert_int_equal(okv_f32_to_f16(okv_f16_to_f32((uint16_t)h)), h);
    if ((h & 0x7F80u) == 0x7F80u && (h & 0x7Fu)) continue;
    assert_int_equal(okv_f32_to_bf16(okv_bf16_to_f32((uint16_t)h)), h);
  }
  assert_int_equal(okv_dtype_size(OKV_DTYPE_F32), 4);
  assert_int_equal(okv_dtype_size(OKV_DTYPE_BF16), 2);
  assert_int_equal(okv_dtype_size(OKV_DTYPE_COUNT), 0);
  assert_int_equal(okv_block_bytes(OKV_DTYPE_BF16, 128), 8192);
  assert_int_equal(okv_summary_bytes(128), 1024);
  assert_string_equal(okv_dtype_name(OKV_DTYPE_F16), "f16");
}

/* ---- attention ---- */

/* Runs the kernel on case c at every ISA level and with 1 and 2 threads and
 * checks it against the reference (the block mass too when with_mass). */
static void check_case(const okv_kcase_params_t *p, uint64_t seed, bool with_mass) {
  okv_kcase_t c;
  okv_kcase_build(&c, p, seed);
  okv_kcase_ref_t ref;
  okv_kcase_ref_make(&c, &ref);
  float *out = test_malloc(sizeof(float) * c.q_floats);
  float *mass = with_mass ? test_malloc(sizeof(float) * ref.n_mass) : NULL;
  okv_cpu_isa_t top = okv_cpu_isa_detected();
  for (int isa = 0; isa <= (int)top; isa++) {
    okv_cpu_isa_limit((okv_cpu_isa_t)isa);
    for (int nt = 1; nt <= MAX_THREADS; nt++) {
      char what[64];
      snprintf(what, sizeof what, "isa %s, %d thread%s", okv_cpu_isa_name((okv_cpu_isa_t)isa), nt, nt > 1 ? "s" : "");
      for (size_t i = 0; i < c.q_floats; i++) out[i] = 12345.0f;
      okv_cpu_attention(&c.desc, c.pool, c.q, c.inflight, out, mass, nt);
      double e = okv_kcase_assert_attention(&c, out, ref.out, ATTN_TOL, what);
      if (g_verbose) printf("  %s: err ratio %.3g\n", what, e);
      if (with_mass) okv_kcase_assert_mass(&c, mass, ref.mass, ATTN_TOL, what);
    }
  }
  okv_cpu_isa_limit(OKV_CPU_ISA_AVX512);
  test_free(out);
  if (mass) test_free(mass);
  okv_kcase_ref_free(&ref);
  okv_kcase_free(&c);
}

/* head_dim x G x T x working-set size, dtypes and in-flight counts cycled. */
static void test_attention_shapes(void **state) {
  (void)state;
  static const uint32_t dims[] = {8, 64, 128}, groups[] = {1, 2, 4, 8}, blocks[] = {0, 1, 7, 129};
  uint64_t seed = 1;
  for (int di = 0; di < 3; di++)
    for (int gi = 0; gi < 4; gi++)
      for (uint32_t T = 1; T <= 2; T++)
        for (int bi = 0; bi < 4; bi++) {
          if (blocks[bi] == 129 && (dims[di] != 64 || groups[gi] > 4)) continue; /* keep the suite fast */
          okv_kcase_params_t p = okv_kcase_params(2, 2, groups[gi], dims[di], T, (uint32_t)(seed % (T + 1)),
                                                  (okv_dtype_t)(seed % 3), blocks[bi]);
          p.vary_blocks = true;
          check_case(&p, seed++, true);
        }
}

/* Odd head_dim (vector tail), many rows per unit (G*T > 16: several passes). */
static void test_attention_odd_shapes(void **state) {
  (void)state;
  okv_kcase_params_t p = okv_kcase_params(1, 3, 5, 40, 4, 3, OKV_DTYPE_F16, 9);
  p.vary_blocks = true;
  check_case(&p, 77, true);
  p = okv_kcase_params(1, 1, 3, 1, 3, 1, OKV_DTYPE_F32, 5);
  check_case(&p, 78, true);
}

/* One unit with a long working set: with 2 threads it is split and merged. */
static void test_attention_split(void **state) {
  (void)state;
  okv_kcase_params_t p = okv_kcase_params(1, 1, 4, 128, 2, 2, OKV_DTYPE_BF16, 200);
  check_case(&p, 99, true);
}

/* Keys of magnitude 1e3: logits ~1e3..1e4, a naive softmax overflows. */
static void test_attention_large_magnitude(void **state) {
  (void)state;
  for (int dt = 0; dt < 3; dt++) {
    okv_kcase_params_t p = okv_kcase_params(1, 2, 4, 64, 2, 0, (okv_dtype_t)dt, 12);
    p.key_scale = 1e3f;
    check_case(&p, 500 + (uint64_t)dt, false);
  }
}

/* The dtype's own rounding error vs exact f32 K/V (stated in docs/kernels.md):
 * bf16 <= 4e-3 * 4, f16 <= 5e-4 * 4 for N(0,1) data at head_dim 64. */
static void test_attention_dtype_rounding(void **state) {
  (void)state;
  static const double tol[3] = {1e-5, 5e-4, 4e-3};
  for (int dt = 1; dt < 3; dt++) {
    okv_kcase_params_t p = okv_kcase_params(1, 2, 4, 64, 1, 0, OKV_DTYPE_F32, 16);
    p.partial_last = false;
    okv_kcase_t exact, rounded;
    okv_kcase_build(&exact, &p, 4242);
    p.dtype = (okv_dtype_t)dt;
    okv_kcase_build(&rounded, &p, 4242);
    double *ref = test_malloc(sizeof(double) * exact.q_floats);
    okv_ref_attention(&exact.desc, exact.pool, exact.q, NULL, ref, NULL, NULL);
    float *out = test_malloc(sizeof(float) * rounded.q_floats);
    okv_cpu_attention(&rounded.desc, rounded.pool, rounded.q, NULL, out, NULL, 1);
    double worst = 0, vmax = 4.0; /* |N(0,1)| samples here stay below ~4.5; a loose scale */
    for (size_t i = 0; i < rounded.q_floats; i++) {
      double e = fabs(out[i] - ref[i]) / vmax;
      worst = e > worst ? e : worst;
    }
    if (g_verbose) printf("  %s vs exact f32: max err / 4 = %.3g\n", okv_dtype_name((okv_dtype_t)dt), worst);
    assert_true(worst <= tol[dt]);
    assert_true(worst > 0.0); /* rounding does change the result */
    test_free(ref);
    test_free(out);
    okv_kcase_free(&exact);
    okv_kcase_free(&rounded);
  }
}

/* Block mass sums to 1 minus the in-flight mass for every (unit, t), averaged over G. */
static void test_attention_mass_sum(void **state) {
  (void)state;
  okv_kcase_params_t p = okv_kcase_params(2, 2, 4, 32, 2, 2, OKV_DTYPE_F32, 10);
  okv_kcase_t c;
  okv_kcase_build(&c, &p, 31337);
  float *out = test_malloc(sizeof(float) * c.q_floats);
  float *mass = test_malloc(sizeof(float) * c.ws_total * 2);
  double *ref = test_malloc(sizeof(double) * c.q_floats);
  double *inflight_mass = test_malloc(sizeof(double) * p.n_seqs * 2 * c.n_q_heads);
  okv_ref_attention(&c.desc, c.pool, c.q, c.inflight, ref, NULL, inflight_mass);
  okv_cpu_attention(&c.desc, c.pool, c.q, c.inflight, out, mass, MAX_THREADS);
  for (uint32_t s = 0; s < p.n_seqs; s++)
    for (uint32_t h = 0; h < p.n_kv_heads; h++)
      for (uint32_t t = 0; t < 2; t++) {
        uint32_t u = s * p.n_kv_heads + h;
        double sum = 0, expect = 1.0;
        for (uint32_t w = c.ws_offsets[u]; w < c.ws_offsets[u + 1]; w++) sum += mass[(size_t)w * 2 + t];
        for (uint32_t g = 0; g < p.group_size; g++)
          expect -= inflight_mass[((size_t)s * 2 + t) * c.n_q_heads + h * p.group_size + g] / p.group_size;
        assert_true(expect < 1.0); /* the in-flight tokens do take some mass */
        assert_true(fabs(sum - expect) < 1e-5);
      }
  test_free(out);
  test_free(mass);
  test_free(ref);
  test_free(inflight_mass);
  okv_kcase_free(&c);
}

/* Empty working set, no in-flight: zeros, mass untouched (no entries). With
 * in-flight tokens only: t=0 sees nothing when T=2, n_inflight=1. */
static void test_attention_empty(void **state) {
  (void)state;
  okv_kcase_params_t p = okv_kcase_params(1, 2, 2, 16, 2, 1, OKV_DTYPE_F32, 0);
  p.partial_last = false;
  okv_kcase_t c;
  okv_kcase_build(&c, &p, 5);
  float *out = test_malloc(sizeof(float) * c.q_floats);
  for (size_t i = 0; i < c.q_floats; i++) out[i] = NAN;
  okv_cpu_attention(&c.desc, c.pool, c.q, c.inflight, out, NULL, MAX_THREADS);
  const uint32_t D = 16, NQ = c.n_q_heads;
  for (uint32_t t = 0; t < 2; t++)
    for (uint32_t hq = 0; hq < NQ; hq++)
      for (uint32_t e = 0; e < D; e++) {
        float o = out[((size_t)t * NQ + hq) * D + e];
        if (t == 0) {
          assert_true(o == 0.0f);
        } else {
          /* only the in-flight token (owned by t = 1) is visible: out = its V */
          uint32_t h = hq / 2;
          float vv = c.inflight[(2u + h) * D + e]; /* [s=0][i=0][V][h][e] */
          assert_float_equal(o, vv, 1e-6);
        }
      }
  test_free(out);
  okv_kcase_free(&c);
}

/* ---- summaries ---- */

static void test_summaries(void **state) {
  (void)state;
  for (int dt = 0; dt < 3; dt++) {
    okv_kcase_t c;
    okv_kcase_build_blocks(&c, 24, (okv_dtype_t)dt, 70, 3.0f, 900 + (uint64_t)dt);
    const uint32_t n = c.ws_total, D = c.p.head_dim;
    uint64_t *bi = test_malloc(sizeof(uint64_t) * n), *si = test_malloc(sizeof(uint64_t) * n);
    for (uint32_t i = 0; i < n; i++) bi[i] = c.ws_slots[i], si[i] = n - 1 - i;
    okv_summary_desc_t sd = {.head_dim = D,
                             .kv_dtype = c.p.dtype,
                             .n_blocks = n,
                             .block_index = bi,
                             .valid = c.ws_valid,
                             .summary_index = si};
    float *summ = test_malloc(sizeof(float) * 2 * D * n), *app = test_malloc(sizeof(float) * 2 * D * n);
    okv_cpu_summarize_blocks(&sd, c.pool, summ, MAX_THREADS);
    okv_kcase_assert_summaries(&c, bi, si, n, summ);
    /* append-built from the same keys (given as f32, unrounded for f32, exactly
     * the stored values otherwise) equals the rebuild */
    float *key = test_malloc(sizeof(float) * D);
    for (uint32_t i = 0; i < n; i++)
      for (uint32_t j = 0; j < c.ws_valid[i]; j++) {
        okv_kcase_key(&c, bi[i], j, key);
        uint8_t first = j == 0;
        okv_cpu_summary_append(app, D, c.p.dtype, 1, &si[i], key, &first);
      }
    assert_memory_equal(app, summ, sizeof(float) * 2 * D * n);
    test_free(key);
    test_free(bi);
    test_free(si);
    test_free(summ);
    test_free(app);
    okv_kcase_free(&c);
  }
  /* append rounds keys through the dtype: bf16 of 1 + 2^-10 is 1 */
  float s[2], k = 1.0f + 0x1p-10f;
  uint64_t idx = 0;
  uint8_t first = 1;
  okv_cpu_summary_append(s, 1, OKV_DTYPE_BF16, 1, &idx, &k, &first);
  assert_true(s[0] == 1.0f && s[1] == 1.0f);
}

/* ---- scoring ---- */

static void test_scoring(void **state) {
  (void)state;
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, 2024);
  static const uint32_t dims[] = {8, 64, 128, 20};
  for (int di = 0; di < 4; di++) {
    const uint32_t S = 2, H = 2, G = (uint32_t)(1 + di), D = dims[di], T = 2, NQ = H * G, nb = 37;
    okv_kcase_params_t p = okv_kcase_params(1, 1, 1, D, 1, 0, OKV_DTYPE_BF16, S * H * nb);
    p.partial_last = false;
    okv_kcase_t c;
    okv_kcase_build(&c, &p, 3000 + (uint64_t)di);
    for (uint32_t w = 0; w < c.ws_total; w++) c.ws_valid[w] = (uint8_t)(1 + okv_test_rng_below(&rng, 16));
    /* summaries of every block, segment u = blocks [u*nb, (u+1)*nb) */
    float *summ = test_malloc(sizeof(float) * 2 * D * c.ws_total);
    for (uint32_t w = 0; w < c.ws_total; w++)
      okv_ref_summary(okv_kcase_slot(&c, c.ws_slots[w]), p.dtype, D, c.ws_valid[w], summ + (size_t)w * 2 * D);
    float *q = test_malloc(sizeof(float) * S * T * NQ * D);
    for (size_t i = 0; i < (size_t)S * T * NQ * D; i++) q[i] = okv_test_rng_normal(&rng);
    uint64_t sfirst[4], scfirst[4];
    uint32_t segn[4];
    for (uint32_t u = 0; u < S * H; u++)
      sfirst[u] = (uint64_t)u * nb, scfirst[u] = 5 + (uint64_t)u * (nb + 3), segn[u] = nb - u;
    size_t n_scores = 5 + (size_t)S * H * (nb + 3);
    float *scores = test_malloc(sizeof(float) * n_scores);
    double *ref = test_malloc(sizeof(double) * n_scores);
    for (uint32_t tb = 0; tb < 2; tb++) {
      okv_score_desc_t sd = okv_kcase_score_desc(S, H, G, D, T, sfirst, segn, scfirst);
      sd.t_begin = tb;
      okv_ref_score(&sd, q, summ, ref);
      okv_cpu_isa_t top = okv_cpu_isa_detected();
      for (int isa = 0; isa <= (int)top; isa++) {
        okv_cpu_isa_limit((okv_cpu_isa_t)isa);
        for (size_t i = 0; i < n_scores; i++) scores[i] = -777.0f;
        okv_cpu_score_blocks(&sd, q, summ, scores, MAX_THREADS);
        for (uint32_t u = 0; u < S * H; u++) {
          assert_true(scores[scfirst[u] + segn[u]] == -777.0f); /* nothing past the segment */
          for (uint32_t b = 0; b < segn[u]; b++) {
            double r = ref[scfirst[u] + b], x = scores[scfirst[u] + b];
            assert_true(fabs(x - r) <= 1e-5 * (1.0 + fabs(r)));
          }
        }
      }
      okv_cpu_isa_limit(OKV_CPU_ISA_AVX512);
      /* property: the bound is >= q.k/sqrt(D) of every valid key of the block,
       * for every used query row (up to float rounding of the bound) */
      for (uint32_t s = 0; s < S; s++)
        for (uint32_t h = 0; h < H; h++) {
          uint32_t u = s * H + h;
          for (uint32_t b = 0; b < segn[u]; b++) {
            uint32_t w = (uint32_t)sfirst[u] + b;
            const uint8_t *slot = okv_kcase_slot(&c, c.ws_slots[w]);
            for (uint32_t t = tb; t < 2; t++)
              for (uint32_t g = 0; g < G; g++)
                for (uint32_t j = 0; j < c.ws_valid[w]; j++) {
                  const float *qr = q + (((size_t)s * T + t) * NQ + h * G + g) * D;
                  double dot = 0, mag = 0;
                  for (uint32_t e = 0; e < D; e++) {
                    double k = okv_ref_elem(slot, p.dtype, (uint64_t)e * 16 + j);
                    dot += qr[e] * k;
                    mag += fabs(qr[e] * k);
                  }
                  dot /= sqrt((double)D);
                  mag /= sqrt((double)D);
                  assert_true(scores[scfirst[u] + b] >= dot - 1e-6 * (1.0 + mag));
                }
          }
        }
    }
    test_free(summ);
    test_free(q);
    test_free(scores);
    test_free(ref);
    okv_kcase_free(&c);
  }
}

/* Many short ranges (the second pass of q8 scoring: one to three blocks per
 * range, segments interleaved, four query rows) at every ISA level: on
 * AVX-512 they are scored four blocks at a time across ranges; every score
 * equals the reference and nothing else is written. */
static void test_scoring_scattered(void **state) {
  (void)state;
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, 5150);
  const uint32_t S = 2, H = 2, G = 4, D = 64, T = 2, NQ = H * G, n_summ = 300, NR = 57;
  float *summ = test_malloc(sizeof(float) * 2 * D * n_summ);
  for (uint32_t b = 0; b < n_summ; b++)
    for (uint32_t e = 0; e < D; e++) {
      float a = okv_test_rng_normal(&rng), c = okv_test_rng_normal(&rng);
      summ[(size_t)b * 2 * D + e] = a < c ? a : c;
      summ[(size_t)b * 2 * D + D + e] = a < c ? c : a;
    }
  float *q = test_malloc(sizeof(float) * S * T * NQ * D);
  for (size_t i = 0; i < (size_t)S * T * NQ * D; i++) q[i] = okv_test_rng_normal(&rng);
  uint32_t rseg[NR], rn[NR];
  uint64_t rsf[NR], rcf[NR], total = 0;
  for (uint32_t r = 0; r < NR; r++) {
    rseg[r] = (r / 5u) % (S * H); /* runs of five ranges per segment, then the next */
    rn[r] = 1 + okv_test_rng_below(&rng, 3);
    rsf[r] = okv_test_rng_below(&rng, n_summ - 3);
    rcf[r] = total + 1; /* a gap before each range */
    total += rn[r] + 1;
  }
  okv_score_desc_t sd = okv_kcase_score_desc(S, H, G, D, T, NULL, NULL, NULL);
  sd.t_begin = 1;
  sd.n_ranges = NR;
  sd.range_seg = rseg;
  sd.range_summary_first = rsf;
  sd.range_n_blocks = rn;
  sd.range_score_first = rcf;
  float *scores = test_malloc(sizeof(float) * (total + 1));
  double *ref = test_malloc(sizeof(double) * (total + 1));
  for (uint64_t i = 0; i <= total; i++) ref[i] = -777.0;
  okv_ref_score(&sd, q, summ, ref);
  okv_cpu_isa_t top = okv_cpu_isa_detected();
  for (int isa = 0; isa <= (int)top; isa++) {
    okv_cpu_isa_limit((okv_cpu_isa_t)isa);
    for (int nt = 1; nt <= MAX_THREADS; nt++) {
      for (uint64_t i = 0; i <= total; i++) scores[i] = -777.0f;
      okv_cpu_score_blocks(&sd, q, summ, scores, nt);
      for (uint64_t i = 0; i <= total; i++) {
        if (ref[i] == -777.0) {
          assert_true(scores[i] == -777.0f);
        } else if (!(fabs(scores[i] - ref[i]) <= 1e-5 * (1.0 + fabs(ref[i])))) {
          print_error("isa %s threads %d score %llu: %.9g want %.9g\n", okv_cpu_isa_name((okv_cpu_isa_t)isa), nt,
                      (unsigned long long)i, scores[i], ref[i]);
          fail();
        }
      }
    }
  }
  okv_cpu_isa_limit(OKV_CPU_ISA_AVX512);
  test_free(summ);
  test_free(q);
  test_free(scores);
  test_free(ref);
}

/* ---- 8-bit summaries ---- */

/* OKV_DTYPE_Q8 scoring at every ISA level (the AVX-512 VNNI path, and the
 * scalar path below AVX-512 or without VNNI) and 1-2 threads equals the
 * double-precision definition, and is an upper bound of the exact Quest bound
 * of the f32 summaries it encodes; head_dim 128 (four 64-byte chunks) and 20
 * (one masked chunk), 37 blocks (a partial group of four), 8 rows (two
 * groups of four). The encoder's codes pass the format's checks. */
static void test_scoring_q8(void **state) {
  (void)state;
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, 9090);
  /* 2 x head_dim code bytes: 256 (whole 64-byte chunks), 40 (a partial chunk alone), 96 (both) */
  const uint32_t dims[3] = {128, 20, 48};
  for (int di = 0; di < 3; di++) {
    const uint32_t S = 1, H = 2, G = 4, D = dims[di], T = 2, NQ = H * G, nb = 37, U = S * H, n = U * nb;
    const size_t qb = (size_t)okv_summary_bytes_ex(OKV_DTYPE_Q8, D);
    float *summ = test_malloc(sizeof(float) * 2 * D * n);
    uint8_t *q8 = test_malloc(qb * n);
    for (uint32_t b = 0; b < n; b++) {
      for (uint32_t e = 0; e < D; e++) {
        float a = okv_test_rng_normal(&rng) + 0.5f, c = okv_test_rng_normal(&rng) + 0.5f;
        summ[(size_t)b * 2 * D + e] = a < c ? a : c;
        summ[(size_t)b * 2 * D + D + e] = a < c ? c : a;
      }
      okv_cpu_q8_encode(summ + (size_t)b * 2 * D, summ + (size_t)b * 2 * D + D, D, q8 + b * qb);
      assert_int_equal(okv_ref_q8_check(summ + (size_t)b * 2 * D, summ + (size_t)b * 2 * D + D, D, q8 + b * qb), 0);
    }
    float *q = test_malloc(sizeof(float) * S * T * NQ * D);
    for (size_t i = 0; i < (size_t)S * T * NQ * D; i++) q[i] = okv_test_rng_normal(&rng);
    uint64_t sfirst[2] = {0, nb}, scfirst[2] = {0, nb};
    uint32_t segn[2] = {nb, nb};
    okv_score_desc_t sd = okv_kcase_score_desc(S, H, G, D, T, sfirst, segn, scfirst);
    sd.t_begin = 0;
    double *ref = test_malloc(sizeof(double) * n), *exact = test_malloc(sizeof(double) * n);
    okv_score_desc_t ed = sd;
    okv_ref_score(&ed, q, summ, exact);
    sd.summary_dtype = OKV_DTYPE_Q8;
    okv_ref_score(&sd, q, q8, ref);
    float *scores = test_malloc(sizeof(float) * n), *base = test_malloc(sizeof(float) * n);
    okv_cpu_isa_t top = okv_cpu_isa_detected();
    for (int isa = 0; isa <= (int)top; isa++) {
      okv_cpu_isa_limit((okv_cpu_isa_t)isa);
      for (int nt = 1; nt <= MAX_THREADS; nt++) {
        for (uint32_t i = 0; i < n; i++) scores[i] = -777.0f;
        okv_cpu_score_blocks(&sd, q, q8, scores, nt);
        /* The scalar loop, the AVX2 path and the VNNI path (where the CPU has it) form the same integers and
         * the same bound: equal bit for bit. */
        if (isa == OKV_CPU_ISA_BASELINE && nt == 1) memcpy(base, scores, sizeof(float) * n);
        if (isa != OKV_CPU_ISA_BASELINE) assert_memory_equal(scores, base, sizeof(float) * n);
        for (uint32_t i = 0; i < n; i++) {
          if (!(fabs(scores[i] - ref[i]) <= 1e-5 * (1.0 + fabs(ref[i])))) {
            print_error("D %u isa %s threads %d block %u: %.9g, definition %.9g\n", D,
                        okv_cpu_isa_name((okv_cpu_isa_t)isa), nt, i, scores[i], ref[i]);
            fail();
          }
          assert_true(scores[i] >= exact[i] - 1e-5 * (1.0 + fabs(exact[i])));
        }
      }
    }
    okv_cpu_isa_limit(OKV_CPU_ISA_AVX512);
    test_free(summ);
    test_free(q8);
    test_free(q);
    test_free(ref);
    test_free(exact);
    test_free(scores);
    test_free(base);
  }
}

/* 4-bit centres (OKV_DTYPE_C4): every encoded lane passes the format's checks (q8_ref.c), including a
 * non-finite box (+infinity) and equal centres (step 0); the scores equal the double-precision definition at
 * every ISA level and thread count, and the ISAs' scores are the scalar loop's bit for bit (same integers, same
 * fused f32 arithmetic). head_dim 128 (whole groups), 20 (packed codes padded to 12 bytes), 8 (one group) and
 * 48; 37 blocks per KV head, so the second head starts inside a tile (lane 5) and tiles end part-used; then
 * ranges that start and end inside tiles, with the scores outside them untouched; 6 query rows (a partial
 * quad), an all-zero row and, at head_dim 48, a row with a NaN element (its head's blocks score +infinity). */
/* okv_cpu_c4_query's codes, element by element, against nearbyintf(x / sig) clamped to [-127, 127] with sig =
 * max|x| / 127 (the 16-wide path and the scalar tail must agree with it, ties to even included): rows whose
 * elements sit exactly on halves (k + 0.5 times sig), on the clamp, at -0 and at zero, at head_dim 8 (tail only),
 * 48 and 128 (vector path) and 40 (both). The packed layout is byte (j / 4) * 8 + (e % 2) * 4 + j % 4 for j = e / 2.
 * Also the sums: sum_x and l1_x as f32 of their double sums. */
static void test_c4_query_codes(void **state) {
  (void)state;
  static const uint32_t dims[] = {8, 40, 48, 128};
  for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
    const uint32_t D = dims[di];
    float x[128];
    int8_t codes[128];
    const float sig_want = 2.0f; /* max |x| = 254: sig = 2, so x = 2 (k + 0.5) is a tie */
    for (uint32_t e = 0; e < D; e++) {
      const int k = (int)(e * 37u % 255u) - 127; /* -127..127 */
      switch (e % 5u) {
        case 0: x[e] = 2.0f * ((float)k + 0.5f); break; /* a tie: rounds to the even neighbour */
        case 1: x[e] = 2.0f * (float)k + 0.3f; break;
        case 2: x[e] = e % 2u ? -0.0f : 0.0f; break;
        case 3: x[e] = 2.0f * (float)k - 0.9f; break;
        default: x[e] = -2.0f * ((float)k + 0.5f); break;
      }
    }
    x[0] = 254.0f;      /* the maximum: code 127 */
    x[D - 1] = -253.0f; /* -126.5: a tie, to -126 */
    float sx = 0, l1 = 0;
    const float sig = okv_cpu_c4_query(x, D, codes, &sx, &l1);
    assert_true(sig == sig_want);
    double dsx = 0, dl1 = 0;
    for (uint32_t e = 0; e < D; e++) {
      dsx += (double)x[e];
      dl1 += fabs((double)x[e]);
      float c = nearbyintf(x[e] / sig);
      c = c > 127.0f ? 127.0f : c < -127.0f ? -127.0f : c;
      const uint32_t j = e / 2u;
      const int got = codes[(j / 4u) * 8u + (e % 2u) * 4u + j % 4u];
      if (got != (int)c) print_error("D %u element %u: x %g code %d, want %d\n", D, e, (double)x[e], got, (int)c);
      assert_int_equal(got, (int)c);
    }
    assert_true(codes[(((D - 1u) / 2u) / 4u) * 8u + ((D - 1u) % 2u) * 4u + ((D - 1u) / 2u) % 4u] == -126);
    assert_true(sx == (float)dsx);
    assert_true(l1 == (float)dl1);
  }
}

static void test_scoring_c4(void **state) {
  (void)state;
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, 4040);
  const uint32_t dims[4] = {128, 20, 8, 48};
  assert_int_equal(okv_summary_bytes_ex(OKV_DTYPE_C4, 128), 76);
  assert_int_equal(okv_summary_bytes_ex(OKV_DTYPE_C4, 20), 24);
  assert_int_equal(okv_summary_bytes_ex(OKV_DTYPE_C4, 3), 16);
  for (int di = 0; di < 4; di++) {
    const uint32_t S = 1, H = 2, G = 3, D = dims[di], T = 2, NQ = H * G, nb = 37, U = S * H, n = U * nb;
    const size_t tb = okv_cpu_c4_tile_bytes(D), n_tiles = (n + 15u) / 16u;
    assert_int_equal(tb, 16u * okv_summary_bytes_ex(OKV_DTYPE_C4, D));
    float *summ = test_malloc(sizeof(float) * 2 * D * n);
    uint8_t *c4 = test_malloc(tb * n_tiles);
    memset(c4, 0xA5, tb * n_tiles); /* encoding writes its own lane only: the garbage elsewhere must not matter */
    for (uint32_t b = 0; b < n; b++) {
      for (uint32_t e = 0; e < D; e++) {
        float a = okv_test_rng_normal(&rng) + 0.5f, c = okv_test_rng_normal(&rng) + 0.5f;
        if (b == 6 || b == nb + 6) a = c = 0.25f; /* equal centres: step 0, width 0 */
        if (b == 11 && e == 1) c = -INFINITY;     /* not finite: +infinity */
        summ[(size_t)b * 2 * D + e] = a < c ? a : c;
        summ[(size_t)b * 2 * D + D + e] = a < c ? c : a;
      }
      okv_cpu_c4_encode(summ + (size_t)b * 2 * D, summ + (size_t)b * 2 * D + D, D, okv_cpu_c4_tile(c4, b, D), b % 16u);
    }
    for (uint32_t b = 0; b < n; b++) {
      int why = okv_ref_c4_check(summ + (size_t)b * 2 * D, summ + (size_t)b * 2 * D + D, D, okv_cpu_c4_tile(c4, b, D),
                                 b % 16u);
      if (why != 0) print_error("D %u block %u fails check %d\n", D, b, why);
      assert_int_equal(why, 0);
    }
    float *q = test_malloc(sizeof(float) * S * T * NQ * D);
    for (size_t i = 0; i < (size_t)S * T * NQ * D; i++) q[i] = okv_test_rng_normal(&rng);
    for (uint32_t e = 0; e < D; e++) q[(size_t)(T - 1) * NQ * D + 4 * D + e] = 0.0f; /* an all-zero row */
    if (di == 3) q[(size_t)(T - 1) * NQ * D + 5 * D + 3] = NAN; /* a NaN element: head 1's blocks score +inf */
    if (di == 2) /* elements near f32's largest (3e38 / sqrt(8) each, alternating signs): |x| sums past f32's range,
                    so head 1's blocks score +inf (an f32 estimate would read inf - inf) */
      for (uint32_t e = 0; e < D; e++) q[(size_t)(T - 1) * NQ * D + 5 * D + e] = e % 2u ? -3e38f : 3e38f;
    uint64_t sfirst[2] = {0, nb}, scfirst[2] = {0, nb};
    uint32_t segn[2] = {nb, nb};
    okv_score_desc_t sd = okv_kcase_score_desc(S, H, G, D, T, sfirst, segn, scfirst);
    sd.t_begin = 0;
    sd.summary_dtype = OKV_DTYPE_C4;
    double *ref = test_malloc(sizeof(double) * n);
    float *scores = test_malloc(sizeof(float) * n), *base = test_malloc(sizeof(float) * n);
    uint32_t rseg[3] = {1, 0, 0}, rn[3] = {9, 2, 20};
    uint64_t rsf[3] = {nb + 3, 1, 13}, rcf[3] = {nb + 3, 1, 13};
    for (int pass = 0; pass < 2; pass++) {
      if (pass == 1) { /* ranges starting at lanes 8, 1 and 13 */
        sd.n_ranges = 3;
        sd.range_seg = rseg;
        sd.range_summary_first = rsf;
        sd.range_n_blocks = rn;
        sd.range_score_first = rcf;
      }
      for (uint32_t i = 0; i < n; i++) ref[i] = -777.0;
      okv_ref_score(&sd, q, c4, ref);
      assert_true(pass == 1 || (isinf(ref[11]) && ref[11] > 0));
      okv_cpu_isa_t top = okv_cpu_isa_detected();
      for (int isa = 0; isa <= (int)top; isa++) {
        okv_cpu_isa_limit((okv_cpu_isa_t)isa);
        for (int nt = 1; nt <= MAX_THREADS; nt++) {
          for (uint32_t i = 0; i < n; i++) scores[i] = -777.0f;
          okv_cpu_score_blocks(&sd, q, c4, scores, nt);
          if (isa == OKV_CPU_ISA_BASELINE && nt == 1) memcpy(base, scores, sizeof(float) * n);
          if (isa != OKV_CPU_ISA_BASELINE) assert_memory_equal(scores, base, sizeof(float) * n);
          for (uint32_t i = 0; i < n; i++) {
            if (ref[i] == -777.0) {
              assert_true(scores[i] == -777.0f); /* not a scored block: untouched */
              continue;
            }
            if (di >= 2 && i >= nb) assert_true(isinf(scores[i]) && scores[i] > 0);
            if (!(scores[i] == ref[i] || fabs(scores[i] - ref[i]) <= 2e-5 * (1.0 + fabs(ref[i])))) {
              print_error("D %u pass %d isa %s threads %d block %u: %.9g, definition %.9g\n", D, pass,
                          okv_cpu_isa_name((okv_cpu_isa_t)isa), nt, i, scores[i], ref[i]);
              fail();
            }
          }
        }
      }
      okv_cpu_isa_limit(OKV_CPU_ISA_AVX512);
    }
    test_free(summ);
    test_free(c4);
    test_free(q);
    test_free(ref);
    test_free(scores);
    test_free(base);
  }
}

/* ---- narrowed summaries (bf16 / f16) ---- */

/* Element i of a summary array of dtype dt, widened. */
static float summ_elem(const void *p, okv_dtype_t dt, size_t i) { return (float)okv_ref_elem(p, dt, i); }

/* Directed narrowing against the table-search oracle: edge values, every
 * 16-bit pattern (exact: kept), and random floats of many magnitudes. */
static void test_directed_rounding(void **state) {
  (void)state;
  typedef uint16_t (*narrow_fn)(float);
  static const narrow_fn down[2] = {okv_f32_to_f16_down, okv_f32_to_bf16_down};
  static const narrow_fn up[2] = {okv_f32_to_f16_up, okv_f32_to_bf16_up};
  static const okv_dtype_t dts[2] = {OKV_DTYPE_F16, OKV_DTYPE_BF16};
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, 616);
  const float edges[] = {0.0f,     -0.0f,      1.0f,     -1.0f,     1.0f + 0x1p-20f, -1.0f - 0x1p-20f, 65504.0f,
                         65505.0f, 65520.0f,   70000.0f, -70000.0f, 0x1p-24f,        0x1p-25f,         -0x1p-25f,
                         0x1p-30f, -0x1p-140f, 3e38f,    -3e38f,    INFINITY,        -INFINITY,        0x1.0101p-14f};
  for (int k = 0; k < 2; k++) {
    const okv_dtype_t dt = dts[k];
    float (*from)(uint16_t) = dt == OKV_DTYPE_BF16 ? okv_bf16_to_f32 : okv_f16_to_f32;
    for (uint32_t n = 0; n < sizeof edges / sizeof edges[0] + 200000u; n++) {
      float x;
      if (n < sizeof edges / sizeof edges[0]) {
        x = edges[n];
      } else {
        uint32_t u = (uint32_t)okv_test_rng_u64(&rng);
        if (n % 2) u = (u & 0x80FFFFFFu) | ((100u + okv_test_rng_below(&rng, 50)) << 23); /* around f16's range */
        memcpy(&x, &u, 4);
        if (x != x) continue;
      }
      float d = from(down[k](x)), u = from(up[k](x));
      float want_d = okv_ref_narrow(x, dt, false), want_u = okv_ref_narrow(x, dt, true);
      if (!(d == want_d && u == want_u && signbit(d) == signbit(want_d) && signbit(u) == signbit(want_u))) {
        print_error("%s narrowing of %a: down %a (want %a), up %a (want %a)\n", okv_dtype_name(dt), (double)x,
                    (double)d, (double)want_d, (double)u, (double)want_u);
        fail();
      }
      assert_true(d <= x && u >= x);
    }
    /* values of the dtype are kept, bit for bit */
    for (uint32_t h = 0; h < 65536; h++) {
      float x = from((uint16_t)h);
      if (x != x) {
        assert_true(isnan(from(down[k](x))) && isnan(from(up[k](x))));
        continue;
      }
      assert_int_equal(down[k](x), h);
      assert_int_equal(up[k](x), h);
    }
  }
  assert_int_equal(okv_summary_bytes_ex(OKV_DTYPE_BF16, 128), 512);
  assert_int_equal(okv_summary_bytes_ex(OKV_DTYPE_F16, 100), 400);
  assert_int_equal(okv_summary_bytes_ex(OKV_DTYPE_F32, 128), okv_summary_bytes(128));
  assert_int_equal(okv_summary_bytes_ex(OKV_DTYPE_COUNT, 128), 0);
}

/* Rebuilt summaries in f16 / bf16 are the directed narrowing of the f32 ones
 * (min down, max up), for every KV dtype; append-built ones equal them bit
 * for bit. */
static void test_summaries_narrow(void **state) {
  (void)state;
  for (int sdt = 1; sdt < 3; sdt++)
    for (int kdt = 0; kdt < 3; kdt++) {
      okv_kcase_t c;
      okv_kcase_build_blocks(&c, 40, (okv_dtype_t)kdt, 30, 3.0f, 1200 + (uint64_t)(sdt * 3 + kdt));
      const uint32_t n = c.ws_total, D = c.p.head_dim;
      const size_t sb = (size_t)okv_summary_bytes_ex((okv_dtype_t)sdt, D);
      uint64_t *bi = test_malloc(8 * n), *si = test_malloc(8 * n);
      for (uint32_t i = 0; i < n; i++) bi[i] = c.ws_slots[i], si[i] = (i * 7u) % n;
      okv_summary_desc_t sd = {.head_dim = D,
                               .kv_dtype = c.p.dtype,
                               .n_blocks = n,
                               .block_index = bi,
                               .valid = c.ws_valid,
                               .summary_index = si,
                               .summary_dtype = (okv_dtype_t)sdt};
      uint8_t *summ = test_malloc(sb * n), *app = test_malloc(sb * n);
      okv_cpu_summarize_blocks(&sd, c.pool, summ, MAX_THREADS);
      float *ref = test_malloc(sizeof(float) * 2 * D);
      uint32_t narrowed = 0;
      for (uint32_t i = 0; i < n; i++) {
        okv_ref_summary(okv_kcase_slot(&c, bi[i]), c.p.dtype, D, c.ws_valid[i], ref);
        for (uint32_t e = 0; e < 2 * D; e++) {
          float got = summ_elem(summ + si[i] * sb, (okv_dtype_t)sdt, e);
          float want = okv_ref_narrow(ref[e], (okv_dtype_t)sdt, e >= D);
          assert_true(got == want);
          narrowed += got != ref[e];
          assert_true(e < D ? got <= ref[e] : got >= ref[e]);
        }
      }
      /* the case does exercise rounding (bf16 keys of this magnitude are f16 values: nothing to round) */
      if (kdt != sdt && !(kdt == OKV_DTYPE_BF16 && sdt == OKV_DTYPE_F16)) assert_true(narrowed > 0);
      float *key = test_malloc(sizeof(float) * D);
      for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < c.ws_valid[i]; j++) {
          okv_kcase_key(&c, bi[i], j, key);
          uint8_t first = j == 0;
          okv_summary_append_desc_t ad = {.head_dim = D,
                                          .kv_dtype = c.p.dtype,
                                          .n = 1,
                                          .summary_index = &si[i],
                                          .keys = key,
                                          .first = &first,
                                          .summary_dtype = (okv_dtype_t)sdt};
          okv_cpu_summary_append_ex(&ad, app);
        }
      assert_memory_equal(app, summ, sb * n);
      test_free(key);
      test_free(ref);
      test_free(bi);
      test_free(si);
      test_free(summ);
      test_free(app);
      okv_kcase_free(&c);
    }
}

/* Scoring on narrowed summaries: equals the reference on the same narrowed
 * summaries at every ISA level; bounds q.k of every key of every block (the
 * Quest property survives the narrowing); and is within the dtype's relative
 * step of the f32 score, never below it. */
static void test_scoring_narrow(void **state) {
  (void)state;
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, 2025);
  static const uint32_t dims[] = {64, 128, 20};
  for (int di = 0; di < 3; di++)
    for (int sdt = 1; sdt < 3; sdt++) {
      const uint32_t S = 2, H = 2, G = 4, D = dims[di], T = 2, NQ = H * G, nb = 41, U = S * H;
      okv_kcase_params_t p = okv_kcase_params(1, 1, 1, D, 1, 0, (okv_dtype_t)(di % 3), U * nb);
      p.partial_last = false;
      p.key_scale = di == 2 ? 100.0f : 1.0f;
      okv_kcase_t c;
      okv_kcase_build(&c, &p, 5000 + (uint64_t)(di * 3 + sdt));
      for (uint32_t w = 0; w < c.ws_total; w++) c.ws_valid[w] = (uint8_t)(1 + okv_test_rng_below(&rng, 16));
      const size_t sb32 = (size_t)okv_summary_bytes_ex(OKV_DTYPE_F32, D), sbn = (size_t)okv_summary_bytes_ex(sdt, D);
      uint64_t *bi = test_malloc(8 * c.ws_total), *si = test_malloc(8 * c.ws_total);
      for (uint32_t w = 0; w < c.ws_total; w++) bi[w] = c.ws_slots[w], si[w] = w;
      okv_summary_desc_t sd = {.head_dim = D,
                               .kv_dtype = p.dtype,
                               .n_blocks = c.ws_total,
                               .block_index = bi,
                               .valid = c.ws_valid,
                               .summary_index = si};
      uint8_t *s32 = test_malloc(sb32 * c.ws_total), *sn = test_malloc(sbn * c.ws_total);
      okv_cpu_summarize_blocks(&sd, c.pool, s32, 1);
      sd.summary_dtype = (okv_dtype_t)sdt;
      okv_cpu_summarize_blocks(&sd, c.pool, sn, 1);
      float *q = test_malloc(sizeof(float) * S * T * NQ * D);
      for (size_t i = 0; i < (size_t)S * T * NQ * D; i++) q[i] = okv_test_rng_normal(&rng);
      uint64_t sfirst[4], scfirst[4];
      uint32_t segn[4];
      for (uint32_t u = 0; u < U; u++) sfirst[u] = (uint64_t)u * nb, scfirst[u] = (uint64_t)u * nb, segn[u] = nb;
      okv_score_desc_t scd = okv_kcase_score_desc(S, H, G, D, T, sfirst, segn, scfirst);
      float *f32s = test_malloc(sizeof(float) * U * nb), *ns = test_malloc(sizeof(float) * U * nb);
      double *ref = test_malloc(sizeof(double) * U * nb);
      okv_cpu_score_blocks(&scd, q, s32, f32s, 1);
      scd.summary_dtype = (okv_dtype_t)sdt;
      okv_ref_score(&scd, q, sn, ref);
      okv_cpu_isa_t top = okv_cpu_isa_detected();
      for (int isa = 0; isa <= (int)top; isa++) {
        okv_cpu_isa_limit((okv_cpu_isa_t)isa);
        for (int nt = 1; nt <= MAX_THREADS; nt++) {
          for (uint32_t i = 0; i < U * nb; i++) ns[i] = -777.0f;
          okv_cpu_score_blocks(&scd, q, sn, ns, nt);
          for (uint32_t i = 0; i < U * nb; i++) assert_true(fabs(ns[i] - ref[i]) <= 1e-5 * (1.0 + fabs(ref[i])));
        }
      }
      okv_cpu_isa_limit(OKV_CPU_ISA_AVX512);
      const double step = sdt == OKV_DTYPE_BF16 ? 0x1p-7 : 0x1p-10; /* relative size of one unit in the last place */
      double loose = 0, f32_sum = 0;
      for (uint32_t u = 0; u < U; u++) {
        const uint32_t s = u / H, h = u % H;
        for (uint32_t b = 0; b < nb; b++) {
          const uint32_t w = u * nb + b;
          const uint8_t *slot = okv_kcase_slot(&c, c.ws_slots[w]);
          double m_b = 0, best_dot = -INFINITY, best_mag = 0;
          for (uint32_t t = 0; t < T; t++)
            for (uint32_t g = 0; g < G; g++) {
              const float *qr = q + (((size_t)s * T + t) * NQ + h * G + g) * D;
              double m = 0;
              for (uint32_t e = 0; e < D; e++) {
                double a = fabs(summ_elem(sn + w * sbn, sdt, e)), z = fabs(summ_elem(sn + w * sbn, sdt, D + e));
                m += fabs(qr[e]) * (a > z ? a : z);
              }
              m_b = m > m_b ? m : m_b;
              for (uint32_t j = 0; j < c.ws_valid[w]; j++) {
                double dot = 0, mag = 0;
                for (uint32_t e = 0; e < D; e++) {
                  double k = okv_ref_elem(slot, p.dtype, (uint64_t)e * 16 + j);
                  dot += qr[e] * k;
                  mag += fabs(qr[e] * k);
                }
                if (dot > best_dot) best_dot = dot, best_mag = mag;
              }
            }
          m_b /= sqrt((double)D);
          best_dot /= sqrt((double)D);
          best_mag /= sqrt((double)D);
          /* the bound: >= the exact max of q.k over the block's keys and the used rows */
          assert_true(ns[w] >= best_dot - 1e-6 * (1.0 + best_mag));
          /* never below the f32 bound, at most one step per element above it */
          const double tol = 1e-5 * (1.0 + fabs(f32s[w]));
          assert_true(ns[w] >= f32s[w] - tol);
          assert_true(ns[w] - f32s[w] <= step * m_b + tol);
          /* keys stored in the summary dtype: their min/max are values of it, nothing is rounded, and the
           * scores are the f32 ones bit for bit */
          if (p.dtype == (okv_dtype_t)sdt) assert_true(ns[w] == f32s[w]);
          loose += ns[w] - f32s[w];
          f32_sum += fabs(f32s[w]);
        }
      }
      if (g_verbose)
        printf("  %s summaries, head_dim %u: mean score increase %.3g of mean |f32 score|\n",
               okv_dtype_name((okv_dtype_t)sdt), D, loose / f32_sum);
      test_free(bi);
      test_free(si);
      test_free(s32);
      test_free(sn);
      test_free(q);
      test_free(f32s);
      test_free(ns);
      test_free(ref);
      okv_kcase_free(&c);
    }
}

/* Ranges: the same blocks scored through a range list (out of order, a
 * segment twice, an empty range, ranges not aligned to 4 blocks) give the
 * flat kernel's scores and the reference's, and nothing else is written. */
static void test_scoring_ranges(void **state) {
  (void)state;
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, 31);
  for (int sdt = 0; sdt < 3; sdt += 2) { /* f32 and bf16 summaries */
    const uint32_t S = 2, H = 2, G = 2, D = 64, T = 2, NQ = H * G, nb = 300, U = S * H;
    const size_t sb = (size_t)okv_summary_bytes_ex((okv_dtype_t)sdt, D);
    uint8_t *summ = test_malloc(sb * U * nb);
    for (uint32_t b = 0; b < U * nb; b++)
      for (uint32_t e = 0; e < D; e++) {
        float a = okv_test_rng_normal(&rng), z = okv_test_rng_normal(&rng);
        okv_kcase_store(summ + b * sb, (okv_dtype_t)sdt, e, a < z ? a : z);
        okv_kcase_store(summ + b * sb, (okv_dtype_t)sdt, D + e, a < z ? z : a);
      }
    float *q = test_malloc(sizeof(float) * S * T * NQ * D);
    for (size_t i = 0; i < (size_t)S * T * NQ * D; i++) q[i] = okv_test_rng_normal(&rng);
    uint64_t sfirst[4], scfirst[4];
    uint32_t segn[4];
    for (uint32_t u = 0; u < U; u++) sfirst[u] = scfirst[u] = (uint64_t)u * nb, segn[u] = nb;
    okv_score_desc_t flat = okv_kcase_score_desc(S, H, G, D, T, sfirst, segn, scfirst);
    flat.summary_dtype = (okv_dtype_t)sdt;
    flat.t_begin = 1;
    float *fs = test_malloc(sizeof(float) * U * nb);
    okv_cpu_score_blocks(&flat, q, summ, fs, 1);
    /* ranges r: (segment, first block within it, blocks, output offset) */
    const uint32_t rseg[7] = {3, 0, 2, 0, 1, 3, 2}, rb0[7] = {5, 17, 0, 290, 20, 200, 0};
    const uint32_t rn[7] = {33, 16, 0, 10, 270, 1, 16}; /* 270: more than one 256-block chunk */
    uint64_t rsf[7], rcf[7];
    uint32_t out = 3;
    for (int r = 0; r < 7; r++) rsf[r] = (uint64_t)rseg[r] * nb + rb0[r], rcf[r] = out, out += rn[r] + 2;
    okv_score_desc_t rd = flat;
    rd.seg_summary_first = NULL; /* ignored in range mode */
    rd.seg_n_blocks = NULL;
    rd.seg_score_first = NULL;
    rd.n_ranges = 7;
    rd.range_seg = rseg;
    rd.range_summary_first = rsf;
    rd.range_n_blocks = rn;
    rd.range_score_first = rcf;
    float *rs = test_malloc(sizeof(float) * out);
    double *ref = test_malloc(sizeof(double) * out);
    okv_ref_score(&rd, q, summ, ref);
    okv_cpu_isa_t top = okv_cpu_isa_detected();
    for (int isa = 0; isa <= (int)top; isa++) {
      okv_cpu_isa_limit((okv_cpu_isa_t)isa);
      for (int nt = 1; nt <= MAX_THREADS; nt++) {
        for (uint32_t i = 0; i < out; i++) rs[i] = -777.0f;
        okv_cpu_score_blocks(&rd, q, summ, rs, nt);
        okv_cpu_score_blocks(&flat, q, summ, fs, nt);
        uint32_t written = 0;
        for (int r = 0; r < 7; r++) {
          for (uint32_t i = 0; i < rn[r]; i++) {
            float x = rs[rcf[r] + i], y = fs[rseg[r] * nb + rb0[r] + i];
            double z = ref[rcf[r] + i];
            if (!(fabs(x - y) <= 1e-6 * (1.0 + fabs(y)))) {
              print_error("range %d block %u: %.9g vs flat %.9g (ref %.9g)\n", r, i, x, y, z);
              fail();
            }
            assert_true(fabs(x - z) <= 1e-5 * (1.0 + fabs(z)));
          }
          written += rn[r];
          assert_true(rs[rcf[r] + rn[r]] == -777.0f && rs[rcf[r] + rn[r] + 1] == -777.0f);
        }
        uint32_t untouched = 0;
        for (uint32_t i = 0; i < out; i++) untouched += rs[i] == -777.0f;
        assert_int_equal(untouched, out - written);
      }
    }
    okv_cpu_isa_limit(OKV_CPU_ISA_AVX512);
    test_free(summ);
    test_free(q);
    test_free(fs);
    test_free(rs);
    test_free(ref);
  }
}

/* Group summaries: a hand case (f32 -> bf16 with rounding in both
 * directions), then random groups in every dtype pair against the reference,
 * with the group property: the group bounds each member's summary, so its
 * score bounds every member block's score. */
static void test_summary_reduce(void **state) {
  (void)state;
  {
    /* three f32 summaries of head_dim 2: min/max per element */
    const float src[3][4] = {{1.0f, -2.0f, 3.0f, 0.5f},
                             {0.25f, 1.0f + 0x1p-10f, 0.5f, 1.0f + 0x1p-10f},
                             {-1.0f - 0x1p-10f, -3.0f, 2.0f, -1.0f}};
    uint64_t first[2] = {0, 1}, dst_index[2] = {1, 0};
    uint32_t n[2] = {3, 1};
    okv_summary_reduce_desc_t d = {.head_dim = 2,
                                   .src_dtype = OKV_DTYPE_F32,
                                   .dst_dtype = OKV_DTYPE_BF16,
                                   .n = 2,
                                   .src_first = first,
                                   .src_n = n,
                                   .dst_index = dst_index};
    uint16_t dst[2][4];
    memset(dst, 0xEE, sizeof dst);
    okv_cpu_summary_reduce(&d, src, dst, 1);
    /* entry 0 -> dst 1: min(1, 0.25, -1-2^-10) = -1-2^-10 -> down to -1-2^-7; min(-2, 1+2^-10, -3) = -3;
     * max(3, 0.5, 2) = 3; max(0.5, 1+2^-10, -1) = 1+2^-10 -> up to 1+2^-7 */
    assert_true(okv_bf16_to_f32(dst[1][0]) == -1.0f - 0x1p-7f);
    assert_true(okv_bf16_to_f32(dst[1][1]) == -3.0f);
    assert_true(okv_bf16_to_f32(dst[1][2]) == 3.0f);
    assert_true(okv_bf16_to_f32(dst[1][3]) == 1.0f + 0x1p-7f);
    /* entry 1 -> dst 0: summary 1 alone: 0.25, 1+2^-10 -> down 1, 0.5, 1+2^-10 -> up 1+2^-7 */
    assert_true(okv_bf16_to_f32(dst[0][0]) == 0.25f);
    assert_true(okv_bf16_to_f32(dst[0][1]) == 1.0f);
    assert_true(okv_bf16_to_f32(dst[0][2]) == 0.5f);
    assert_true(okv_bf16_to_f32(dst[0][3]) == 1.0f + 0x1p-7f);
  }
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, 4242);
  const uint32_t D = 48, n_src = 200, n_groups = 12;
  for (int sdt = 0; sdt < 3; sdt++)
    for (int ddt = 0; ddt < 3; ddt++) {
      const size_t ssb = (size_t)okv_summary_bytes_ex((okv_dtype_t)sdt, D);
      const size_t dsb = (size_t)okv_summary_bytes_ex((okv_dtype_t)ddt, D);
      uint8_t *src = test_malloc(ssb * n_src), *dst = test_malloc(dsb * (n_groups + 1));
      for (uint32_t b = 0; b < n_src; b++)
        for (uint32_t e = 0; e < D; e++) {
          float a = okv_test_rng_normal(&rng) * 10.0f, z = okv_test_rng_normal(&rng) * 10.0f;
          okv_kcase_store(src + b * ssb, (okv_dtype_t)sdt, e, a < z ? a : z);
          okv_kcase_store(src + b * ssb, (okv_dtype_t)sdt, D + e, a < z ? z : a);
        }
      uint64_t first[12], di[12];
      uint32_t n[12];
      for (uint32_t i = 0; i < n_groups; i++) {
        n[i] = 1 + okv_test_rng_below(&rng, 16);
        first[i] = okv_test_rng_below(&rng, n_src - n[i] + 1);
        di[i] = (i * 5u + 3u) % n_groups;
      }
      okv_summary_reduce_desc_t d = {.head_dim = D,
                                     .src_dtype = (okv_dtype_t)sdt,
                                     .dst_dtype = (okv_dtype_t)ddt,
                                     .n = n_groups,
                                     .src_first = first,
                                     .src_n = n,
                                     .dst_index = di};
      memset(dst, 0x7F, dsb * (n_groups + 1));
      okv_cpu_summary_reduce(&d, src, dst, MAX_THREADS);
      float *ref = test_malloc(sizeof(float) * 2 * D);
      for (uint32_t i = 0; i < n_groups; i++) {
        okv_ref_summary_reduce(src + first[i] * ssb, (okv_dtype_t)sdt, n[i], D, (okv_dtype_t)ddt, ref);
        const uint8_t *g = dst + di[i] * dsb;
        for (uint32_t e = 0; e < 2 * D; e++) {
          float x = summ_elem(g, (okv_dtype_t)ddt, e);
          assert_true(x == ref[e]);
          for (uint32_t j = 0; j < n[i]; j++) {
            float m = summ_elem(src + (first[i] + j) * ssb, (okv_dtype_t)sdt, e);
            assert_true(e < D ? x <= m : x >= m);
          }
        }
      }
      for (uint32_t e = 0; e < dsb; e++) assert_int_equal(dst[n_groups * dsb + e], 0x7F); /* past the last: untouched */
      /* scores: group score >= every member block's score (same query) */
      float q[2 * 48];
      for (uint32_t e = 0; e < 2 * D; e++) q[e] = okv_test_rng_normal(&rng);
      uint64_t zero = 0, gfirst = 0;
      uint32_t nsrc = n_src, ngrp = n_groups;
      float *bs = test_malloc(sizeof(float) * n_src), *gs = test_malloc(sizeof(float) * n_groups);
      okv_score_desc_t sd = okv_kcase_score_desc(1, 1, 2, D, 1, &zero, &nsrc, &zero);
      sd.summary_dtype = (okv_dtype_t)sdt;
      okv_cpu_score_blocks(&sd, q, src, bs, 1);
      sd = okv_kcase_score_desc(1, 1, 2, D, 1, &gfirst, &ngrp, &gfirst);
      sd.summary_dtype = (okv_dtype_t)ddt;
      okv_cpu_score_blocks(&sd, q, dst, gs, 1);
      for (uint32_t i = 0; i < n_groups; i++)
        for (uint32_t j = 0; j < n[i]; j++)
          assert_true(gs[di[i]] >= bs[first[i] + j] - 1e-5f * (1.0f + fabsf(bs[first[i] + j])));
      test_free(bs);
      test_free(gs);
      test_free(ref);
      test_free(src);
      test_free(dst);
    }
}

/* ---- top-K ---- */

#define OKV_TOPK_SAMPLE_STRIDE_TEST 8u /* cpu_kernels.c's OKV_TOPK_SAMPLE_STRIDE */

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

static void check_topk(const okv_topk_desc_t *d, const float *scores) {
  size_t n_out = (size_t)d->n_segments * d->k;
  uint32_t *out = test_malloc(sizeof(uint32_t) * n_out), *ref = test_malloc(sizeof(uint32_t) * n_out);
  uint32_t *cnt = test_malloc(sizeof(uint32_t) * d->n_segments), *rcnt = test_malloc(sizeof(uint32_t) * d->n_segments);
  okv_ref_topk(d, scores, ref, rcnt);
  for (int isa = 0; isa <= (int)okv_cpu_isa_detected(); isa++) { /* the candidate scan has a path per ISA */
    okv_cpu_isa_limit((okv_cpu_isa_t)isa);
    for (int nt = 1; nt <= MAX_THREADS; nt++) {
      memset(out, 0xAB, sizeof(uint32_t) * n_out);
      okv_cpu_topk(d, scores, out, cnt, nt);
      assert_memory_equal(out, ref, sizeof(uint32_t) * n_out);
      assert_memory_equal(cnt, rcnt, sizeof(uint32_t) * d->n_segments);
    }
  }
  okv_cpu_isa_limit(OKV_CPU_ISA_AVX512);
  /* ascending: the same set, in ascending position order, then mapped (the reference's positions sorted) */
  okv_topk_desc_t da = *d;
  da.index_map = NULL;
  okv_ref_topk(&da, scores, ref, rcnt);
  for (uint32_t u = 0; u < d->n_segments; u++) {
    uint32_t *r = ref + (size_t)u * d->k;
    qsort(r, rcnt[u], sizeof *r, cmp_u32);
    if (d->index_map != NULL)
      for (uint32_t i = 0; i < rcnt[u]; i++) r[i] = d->index_map[d->seg_score_first[u] + r[i]];
  }
  da.index_map = d->index_map;
  da.ascending = true;
  for (int nt = 1; nt <= MAX_THREADS; nt++) {
    memset(out, 0xAB, sizeof(uint32_t) * n_out);
    okv_cpu_topk(&da, scores, out, cnt, nt);
    assert_memory_equal(out, ref, sizeof(uint32_t) * n_out);
    assert_memory_equal(cnt, rcnt, sizeof(uint32_t) * d->n_segments);
  }
  test_free(out);
  test_free(ref);
  test_free(cnt);
  test_free(rcnt);
}

static void test_topk(void **state) {
  (void)state;
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, 77);
  /* hand case: ties by lower index, NaN as -inf, -0 == +0, exclude set, k > n */
  {
    const float sc[] = {1.0f, 3.0f, NAN, 3.0f, -INFINITY, 0.0f, -0.0f, 2.0f};
    uint64_t first = 0;
    uint32_t n = 8, eo[2] = {0, 1}, eb[1] = {7};
    okv_topk_desc_t d = okv_kcase_topk_desc(1, 10, &first, &n, eo, eb);
    uint32_t out[10], cnt;
    okv_cpu_topk(&d, sc, out, &cnt, 1);
    const uint32_t expect[10] = {1, 3, 0, 5, 6, 2, 4, UINT32_MAX, UINT32_MAX, UINT32_MAX};
    assert_int_equal(cnt, 7);
    assert_memory_equal(out, expect, sizeof expect);
    check_topk(&d, sc);
  }
  /* index map: the same ranking, output mapped; ties by lower position, the exclude set by position */
  {
    const float sc[] = {9.0f, 9.0f, 1.0f, 3.0f, 3.0f, NAN, 2.0f, 3.0f, 0.5f};
    const uint32_t map[] = {7, 7, 500, 40, 30, 600, 20, 10, 700};
    uint64_t first[2] = {2, 0};
    uint32_t n[2] = {7, 2}, eo[3] = {0, 1, 1}, eb[1] = {2}; /* segment 0 excludes position 2 (score 3, map 30) */
    okv_topk_desc_t d = okv_kcase_topk_desc(2, 4, first, n, eo, eb);
    d.index_map = map;
    uint32_t out[8], cnt[2];
    okv_cpu_topk(&d, sc, out, cnt, 1);
    /* segment 0: positions 0..6 = scores {1, 3, 3x, NaN, 2, 3, 0.5} -> 1 (3), 5 (3), 4 (2), 0 (1) */
    const uint32_t expect[8] = {40, 10, 20, 500, 7, 7, UINT32_MAX, UINT32_MAX};
    assert_memory_equal(out, expect, sizeof expect);
    assert_int_equal(cnt[0], 4);
    assert_int_equal(cnt[1], 2);
    check_topk(&d, sc);
  }
  /* random: many segments, heavy ties (scores from a small set), exclude sets; 2048 and 2049 blocks on either
   * side of the longest segment sorted whole (cpu_kernels.c's OKV_TOPK_CAND_MAX) */
  const uint32_t n_seg = 8;
  uint32_t segn[8] = {0, 1, 100, 1000, 2048, 2049, 5000, 65536};
  uint64_t first[8];
  size_t total = 0;
  for (uint32_t u = 0; u < n_seg; u++) first[u] = total, total += segn[u] + 2;
  float *sc = test_malloc(sizeof(float) * total);
  for (size_t i = 0; i < total; i++) {
    uint32_t r = okv_test_rng_below(&rng, 100);
    sc[i] = r < 2 ? NAN : (float)okv_test_rng_below(&rng, 50) * 0.25f - 3.0f;
  }
  uint32_t eo[9] = {0};
  uint32_t *eb = test_malloc(sizeof(uint32_t) * 4000);
  uint32_t ne = 0;
  for (uint32_t u = 0; u < n_seg; u++) {
    uint32_t m = segn[u] ? okv_test_rng_below(&rng, segn[u] < 500 ? segn[u] : 500) : 0;
    for (uint32_t i = 0; i < m; i++) eb[ne++] = okv_test_rng_below(&rng, segn[u]); /* duplicates allowed */
    eo[u + 1] = ne;
  }
  static const uint32_t ks[] = {1, 7, 128, 512};
  for (int ki = 0; ki < 4; ki++) {
    okv_topk_desc_t d = okv_kcase_topk_desc(n_seg, ks[ki], first, segn, eo, eb);
    check_topk(&d, sc);
    d.excl_offsets = NULL;
    check_topk(&d, sc);
  }
  /* with an index map (a permutation of the score elements) */
  uint32_t *map = test_malloc(sizeof(uint32_t) * total);
  for (size_t i = 0; i < total; i++) map[i] = (uint32_t)(total - 1 - i) * 3u + 1u;
  okv_topk_desc_t dm = okv_kcase_topk_desc(n_seg, 128, first, segn, eo, eb);
  dm.index_map = map;
  check_topk(&dm, sc);
  test_free(map);
  test_free(sc);
  test_free(eb);
  /* random shapes (a property: equal to the reference for every case): segments short (sorted whole) and long
   * (the sampled threshold's candidates, or the heap when they are too many), k up to OKV_TOPK_MAX, scores
   * continuous, from a few values (ties), all equal, or with NaN and +-infinity, random exclude sets */
  for (int it = 0; it < 24; it++) {
    const uint32_t rn = 1u + okv_test_rng_below(&rng, 3u);
    uint32_t rsegn[3], reo[4] = {0}, reb[3 * 300], rne = 0;
    uint64_t rfirst[3];
    size_t rtotal = 0;
    for (uint32_t u = 0; u < rn; u++) {
      rsegn[u] =
          okv_test_rng_below(&rng, 2u) ? okv_test_rng_below(&rng, 3000u) : 8192u + okv_test_rng_below(&rng, 12000u);
      rfirst[u] = rtotal;
      rtotal += rsegn[u];
      uint32_t ne = rsegn[u] ? okv_test_rng_below(&rng, 300u) : 0u;
      for (uint32_t i = 0; i < ne; i++) reb[rne++] = okv_test_rng_below(&rng, rsegn[u]);
      reo[u + 1] = rne;
    }
    float *rs = test_malloc(sizeof(float) * (rtotal ? rtotal : 1u));
    const uint32_t kind = okv_test_rng_below(&rng, 4u);
    for (size_t i = 0; i < rtotal; i++) {
      float x = (float)okv_test_rng_below(&rng, 1u << 24) * 0x1p-20f - 8.0f;
      if (kind == 1) x = (float)okv_test_rng_below(&rng, 5u) - 2.0f;
      if (kind == 2) x = -0.0f;
      if (kind == 3) {
        uint32_t r = okv_test_rng_below(&rng, 16u);
        x = r == 0 ? NAN : r == 1 ? INFINITY : r == 2 ? -INFINITY : x;
      }
      rs[i] = x;
    }
    const uint32_t rk = 1u + okv_test_rng_below(&rng, OKV_TOPK_MAX);
    okv_topk_desc_t d = okv_kcase_topk_desc(rn, rk, rfirst, rsegn, reo, reb);
    check_topk(&d, rs);
    d.excl_offsets = NULL;
    check_topk(&d, rs);
    test_free(rs);
  }
  /* long segments (the sampled-threshold path): distinct scores in random, ascending and descending order, a
   * segment of one repeated score, and a segment with a NaN in every sample position */
  {
    const uint32_t nl = 8192, ns = 5;
    float *ls = test_malloc(sizeof(float) * nl * ns);
    for (uint32_t i = 0; i < nl; i++) {
      ls[i] = (float)okv_test_rng_below(&rng, 1u << 30) * 1e-6f - 500.0f;
      ls[nl + i] = (float)i * 0.5f - 100.0f;
      ls[2 * nl + i] = 100.0f - (float)i * 0.5f;
      ls[3 * nl + i] = 1.5f;
      ls[4 * nl + i] = i % OKV_TOPK_SAMPLE_STRIDE_TEST == 0 ? NAN : (float)okv_test_rng_below(&rng, 1000);
    }
    uint64_t lf[5];
    uint32_t ln[5], leo[6] = {0}, leb[64], nle = 0;
    for (uint32_t u = 0; u < ns; u++) {
      lf[u] = (uint64_t)u * nl;
      ln[u] = nl;
      for (uint32_t i = 0; i < 8; i++) leb[nle++] = u == 0 ? okv_test_rng_below(&rng, nl) : nl - 1u - i * 3u;
      leo[u + 1] = nle;
    }
    static const uint32_t lks[] = {1, 64, 128, 256, 512};
    for (int ki = 0; ki < 5; ki++) {
      okv_topk_desc_t d = okv_kcase_topk_desc(ns, lks[ki], lf, ln, leo, leb);
      check_topk(&d, ls);
      d.excl_offsets = NULL;
      check_topk(&d, ls);
    }
    test_free(ls);
  }
}

/* The fused c4 scoring + top-K (okv_cpu_score_topk, what the CPU stream runs for a queued pair) against the two
 * calls one after the other: the same scores and the same top-K, indices and counts, bit for bit, at every ISA
 * level and thread count. Six segments (2 sequences x 3 KV heads) of 0 to 1,100 blocks, each split into up to
 * three ranges whose summaries lie apart (as a head's runs of extents do), an exclude set per segment (its last
 * block, as the runtime's active block), k = 40 ascending; head_dim 128 and 48, and two cases of tied scores
 * (summaries of three patterns; all alike, k = 7) for the streamed top-K's tie rule. Then the whole prediction
 * (okv_cpu_predict: the pair, the exact pass over the candidates with bf16 summaries, the final top-K through
 * them) against its four calls, and what must not fuse. */
static void test_score_topk_fused(void **state) {
  (void)state;
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, 909);
  static const uint32_t dims[4] = {128, 48, 128, 128}, ks[4] = {40, 40, 40, 7}, patterns[4] = {0, 0, 3, 1};
  for (int vi = 0; vi < 4; vi++) {
    const uint32_t S = 2, H = 3, G = 4, D = dims[vi], T = 1, U = S * H, k = ks[vi];
    const uint32_t segn[6] = {1100, 37, 0, 300, 41, 777};
    uint32_t rseg[18], rn[18], nr = 0, excl_off[7] = {0}, excl[6], ne = 0, run_off[7] = {0}, run_first[18];
    uint64_t rsf[18], rcf[18], tfirst[6], n_summ = 0, n_sc = 0;
    for (uint32_t u = 0; u < U; u++) {
      tfirst[u] = n_sc;
      for (uint32_t b = 0; b < segn[u];) { /* ranges of 1..600 blocks, 5 spare summaries between them */
        const uint32_t len = 1u + okv_test_rng_below(&rng, 600u), n = len < segn[u] - b ? len : segn[u] - b;
        rseg[nr] = u;
        rn[nr] = n;
        rsf[nr] = n_summ + 5u;
        rcf[nr] = n_sc + b;
        run_first[nr] = b;
        n_summ += 5u + n;
        nr++;
        b += n;
      }
      run_off[u + 1] = nr;
      if (segn[u] > 0) excl[ne++] = segn[u] - 1u;
      excl_off[u + 1] = ne;
      n_sc += segn[u];
    }
    const size_t tb = okv_cpu_c4_tile_bytes(D), n_tiles = (n_summ + 15u) / 16u;
    uint8_t *c4 = test_malloc(tb * n_tiles);
    uint16_t *bf = test_malloc(sizeof(uint16_t) * 2u * D * n_tiles * 16u); /* exact summaries: [min[D], max[D]] */
    float *mn = test_malloc(sizeof(float) * D * 3u), *mx = test_malloc(sizeof(float) * D * 3u);
    for (uint32_t pi = 0; pi < 3; pi++) /* the tied cases' patterns */
      for (uint32_t e = 0; e < D; e++) {
        const float x = okv_test_rng_normal(&rng), y = okv_test_rng_normal(&rng);
        mn[pi * D + e] = x < y ? x : y;
        mx[pi * D + e] = x < y ? y : x;
      }
    for (uint64_t b = 0; b < n_tiles * 16u; b++) {
      const uint32_t pi = patterns[vi] > 0 ? (uint32_t)(b % patterns[vi]) : 0u;
      if (patterns[vi] == 0)
        for (uint32_t e = 0; e < D; e++) {
          const float x = okv_test_rng_normal(&rng), y = okv_test_rng_normal(&rng);
          mn[e] = x < y ? x : y;
          mx[e] = x < y ? y : x;
        }
      okv_cpu_c4_encode(mn + pi * D, mx + pi * D, D, okv_cpu_c4_tile(c4, b, D), (uint32_t)(b % 16u));
      for (uint32_t e = 0; e < D; e++) {
        bf[b * 2u * D + e] = okv_f32_to_bf16(mn[pi * D + e]);
        bf[b * 2u * D + D + e] = okv_f32_to_bf16(mx[pi * D + e]);
      }
    }
    float *q = test_malloc(sizeof(float) * S * T * H * G * D);
    for (size_t i = 0; i < (size_t)S * T * H * G * D; i++) q[i] = okv_test_rng_normal(&rng);
    okv_score_desc_t sd = okv_kcase_score_desc(S, H, G, D, T, NULL, NULL, NULL);
    sd.summary_dtype = OKV_DTYPE_C4;
    sd.n_ranges = nr;
    sd.range_seg = rseg;
    sd.range_summary_first = rsf;
    sd.range_n_blocks = rn;
    sd.range_score_first = rcf;
    okv_topk_desc_t td = okv_kcase_topk_desc(U, k, tfirst, segn, excl_off, excl);
    td.ascending = true;
    float *sc_ref = test_malloc(sizeof(float) * (n_sc + 1u)), *sc = test_malloc(sizeof(float) * (n_sc + 1u));
    uint32_t *idx_ref = test_malloc(sizeof(uint32_t) * U * k), *idx = test_malloc(sizeof(uint32_t) * U * k);
    uint32_t cnt_ref[6], cnt[6];
    /* the exact pass over the candidates (lists: idx, u's at u * k) and the final top-K of k2 through them */
    const uint32_t k2 = k > 4u ? k - 4u : k;
    uint32_t n2[6];
    uint64_t first2[6];
    for (uint32_t u = 0; u < U; u++) {
      n2[u] = segn[u] > 1u ? (segn[u] - 1u < k ? segn[u] - 1u : k) : 0u;
      first2[u] = (uint64_t)u * k;
    }
    okv_score_desc_t sd2 = okv_kcase_score_desc(S, H, G, D, T, NULL, n2, first2);
    sd2.summary_dtype = OKV_DTYPE_BF16;
    sd2.list_stride = k;
    sd2.seg_run_offsets = run_off;
    sd2.run_first_block = run_first;
    sd2.run_n_blocks = rn;
    sd2.run_summary_first = rsf;
    okv_topk_desc_t td2 = okv_kcase_topk_desc(U, k2, first2, n2, NULL, NULL);
    float *sc2_ref = test_malloc(sizeof(float) * U * k), *sc2 = test_malloc(sizeof(float) * U * k);
    float *sc2_rg = test_malloc(sizeof(float) * U * k);
    uint32_t *out_ref = test_malloc(sizeof(uint32_t) * U * k2), *out = test_malloc(sizeof(uint32_t) * U * k2);
    uint32_t cnt2_ref[6], cnt2[6];
    assert_true(okv_cpu_score_list_direct(&sd2));
    for (int isa = 0; isa <= (int)okv_cpu_isa_detected(); isa++) {
      okv_cpu_isa_limit((okv_cpu_isa_t)isa);
      okv_cpu_score_blocks(&sd, q, c4, sc_ref, 1);
      okv_cpu_topk(&td, sc_ref, idx_ref, cnt_ref, 1);
      memset(sc2_ref, 0xCD, sizeof(float) * U * k);
      okv_cpu_score_list(&sd2, q, bf, idx_ref, sc2_ref, 1);
      td2.index_map = idx_ref;
      okv_cpu_topk(&td2, sc2_ref, out_ref, cnt2_ref, 1);
      /* the direct list scoring against the one through ranges (okv_cpu_score_list_ranges), within rounding */
      void *scratch = test_malloc(okv_cpu_score_list_scratch_bytes(&sd2));
      okv_score_desc_t rd;
      okv_cpu_score_list_ranges(&sd2, idx_ref, sc2_rg, scratch, &rd);
      if (rd.n_ranges > 0) okv_cpu_score_blocks(&rd, q, bf, sc2_rg, 1);
      for (uint32_t u = 0; u < U; u++)
        for (uint32_t i = 0; i < n2[u]; i++) {
          const float a = sc2_ref[first2[u] + i], b2 = sc2_rg[first2[u] + i];
          assert_true(fabsf(a - b2) <= 1e-5f * (1.0f + fabsf(b2)));
        }
      test_free(scratch);
      okv_cpu_predict_t p = {.sd = &sd,
                             .q = q,
                             .summaries = c4,
                             .scores = sc,
                             .td = &td,
                             .cand = idx,
                             .cand_counts = cnt,
                             .sd2 = &sd2,
                             .q2 = q,
                             .summaries2 = bf,
                             .scores2 = sc2,
                             .td2 = &td2,
                             .out = out,
                             .out_counts = cnt2};
      for (int nt = 1; nt <= MAX_THREADS; nt++) {
        assert_true(okv_cpu_score_topk_fusable(&sd, &td, nt));
        memset(sc, 0xAB, sizeof(float) * n_sc);
        memset(idx, 0xAB, sizeof(uint32_t) * U * k);
        okv_cpu_score_topk(&sd, q, c4, sc, &td, idx, cnt, nt);
        assert_memory_equal(sc, sc_ref, sizeof(float) * n_sc);
        assert_memory_equal(idx, idx_ref, sizeof(uint32_t) * U * k);
        assert_memory_equal(cnt, cnt_ref, sizeof cnt);
        /* the whole prediction */
        td2.index_map = idx;
        assert_true(okv_cpu_predict_fusable(&p, nt));
        memset(sc, 0xAB, sizeof(float) * n_sc);
        memset(idx, 0xAB, sizeof(uint32_t) * U * k);
        memset(sc2, 0xCD, sizeof(float) * U * k);
        memset(out, 0xAB, sizeof(uint32_t) * U * k2);
        okv_cpu_predict(&p, nt);
        assert_memory_equal(sc, sc_ref, sizeof(float) * n_sc);
        assert_memory_equal(idx, idx_ref, sizeof(uint32_t) * U * k);
        assert_memory_equal(cnt, cnt_ref, sizeof cnt);
        assert_memory_equal(sc2, sc2_ref, sizeof(float) * U * k);
        assert_memory_equal(out, out_ref, sizeof(uint32_t) * U * k2);
        assert_memory_equal(cnt2, cnt2_ref, sizeof cnt2);
      }
    }
    okv_cpu_isa_limit(OKV_CPU_ISA_AVX512);
    assert_int_equal(cnt_ref[0], k);
    assert_int_equal(cnt_ref[2], 0);
    assert_int_equal(cnt2_ref[0], k2);
    if (patterns[vi] == 1) /* all tied: the lowest positions win, the excluded last block skipped */
      for (uint32_t i = 0; i < k; i++) assert_int_equal(idx_ref[i], i);
    /* not fused: ranges out of segment order, a range past its segment's top-K span, an index map, too few
     * segments for the threads, another summary dtype, a list */
    okv_score_desc_t bad = sd;
    uint32_t rseg2[18];
    memcpy(rseg2, rseg, sizeof rseg2);
    rseg2[0] = 5;
    bad.range_seg = rseg2;
    assert_false(okv_cpu_score_topk_fusable(&bad, &td, 1));
    uint32_t rn2[18];
    memcpy(rn2, rn, sizeof rn2);
    for (uint32_t r = 0; r < nr; r++) /* segment 0's last range, one block longer: past its 1,100 */
      if (rseg[r] == 0 && rcf[r] + rn[r] == segn[0]) rn2[r]++;
    bad = sd;
    bad.range_n_blocks = rn2;
    assert_false(okv_cpu_score_topk_fusable(&bad, &td, 1));
    okv_topk_desc_t tm = td;
    tm.index_map = idx;
    assert_false(okv_cpu_score_topk_fusable(&sd, &tm, 1));
    bad = sd; /* one segment (the first's ranges alone): fewer than two per thread, at any thread count */
    bad.n_seqs = 1;
    bad.n_kv_heads = 1;
    bad.n_ranges = 0;
    while (bad.n_ranges < nr && rseg[bad.n_ranges] == 0) bad.n_ranges++;
    tm = td;
    tm.n_segments = 1;
    assert_true(bad.n_ranges > 0);
    assert_false(okv_cpu_score_topk_fusable(&bad, &tm, 1));
    bad = sd;
    bad.summary_dtype = OKV_DTYPE_F32;
    assert_false(okv_cpu_score_topk_fusable(&bad, &td, 1));
    /* the whole prediction, not fused: a descending first top-K, lists of another stride, 8-bit exact
     * summaries, overlapping second-pass spans, a final top-K reading past a segment's candidates */
    okv_cpu_predict_t p = {.sd = &sd, .td = &td, .sd2 = &sd2, .td2 = &td2};
    assert_true(okv_cpu_predict_fusable(&p, 1));
    tm = td;
    tm.ascending = false;
    p.td = &tm;
    assert_false(okv_cpu_predict_fusable(&p, 1));
    p.td = &td;
    okv_score_desc_t bad2 = sd2;
    bad2.list_stride = k + 1u;
    p.sd2 = &bad2;
    assert_false(okv_cpu_predict_fusable(&p, 1));
    bad2 = sd2;
    bad2.summary_dtype = OKV_DTYPE_Q8;
    assert_false(okv_cpu_predict_fusable(&p, 1));
    uint64_t first3[6];
    memcpy(first3, first2, sizeof first3);
    first3[1] = first2[0] + 1u; /* segment 1's scores over segment 0's */
    bad2 = sd2;
    bad2.seg_score_first = first3;
    okv_topk_desc_t tb2 = td2;
    tb2.seg_score_first = first3;
    p.sd2 = &bad2;
    p.td2 = &tb2;
    assert_false(okv_cpu_predict_fusable(&p, 1));
    memcpy(first3, first2, sizeof first3);
    first3[5] = first2[5] + 1u; /* segment 5's last score (and index map entry) past its candidates */
    bad2.seg_score_first = first3;
    tb2.seg_score_first = first3;
    assert_false(okv_cpu_predict_fusable(&p, 1));
    uint32_t n3[6];
    memcpy(n3, n2, sizeof n3);
    n3[0] = k + 1u; /* more than segment 0's exact pass scores */
    tb2 = td2;
    tb2.seg_n = n3;
    p.sd2 = &sd2;
    p.td2 = &tb2;
    assert_false(okv_cpu_predict_fusable(&p, 1));
    test_free(c4);
    test_free(bf);
    test_free(mn);
    test_free(mx);
    test_free(q);
    test_free(sc_ref);
    test_free(sc);
    test_free(idx_ref);
    test_free(idx);
    test_free(sc2_ref);
    test_free(sc2);
    test_free(sc2_rg);
    test_free(out_ref);
    test_free(out);
  }
}

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  g_verbose = getenv("OKV_TEST_VERBOSE") != NULL;
  printf("# CPU ISA detected: %s\n", okv_cpu_isa_name(okv_cpu_isa_detected()));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conversions),
      cmocka_unit_test(test_attention_shapes),
      cmocka_unit_test(test_attention_odd_shapes),
      cmocka_unit_test(test_attention_split),
      cmocka_unit_test(test_attention_large_magnitude),
      cmocka_unit_test(test_attention_dtype_rounding),
      cmocka_unit_test(test_attention_mass_sum),
      cmocka_unit_test(test_attention_empty),
      cmocka_unit_test(test_summaries),
      cmocka_unit_test(test_scoring),
      cmocka_unit_test(test_directed_rounding),
      cmocka_unit_test(test_summaries_narrow),
      cmocka_unit_test(test_scoring_narrow),
      cmocka_unit_test(test_scoring_ranges),
      cmocka_unit_test(test_scoring_q8),
      cmocka_unit_test(test_c4_query_codes),
      cmocka_unit_test(test_scoring_c4),
      cmocka_unit_test(test_score_topk_fused),
      cmocka_unit_test(test_scoring_scattered),
      cmocka_unit_test(test_summary_reduce),
      cmocka_unit_test(test_topk),
  };
  return cmocka_run_group_tests_name("cpu_kernels", tests, setup, teardown);
}
