/* The inputs of `oasiskv bench serve`: the attention generator
 * (bench/attn_gen.c) and the attention trace format (tools/kv_trace.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/attn_gen.h"
#include "tests/common/test_common.h"
#include "tools/kv_trace.h"

/* ---- Generator ---- */

static okv_attn_gen_t *gen_new(uint32_t L, uint32_t H, uint32_t G, uint32_t D, uint64_t seed, double rho) {
  okv_attn_gen_params_t p;
  okv_attn_gen_params_init(&p);
  p.n_layers = L;
  p.n_kv_heads = H;
  p.group_size = G;
  p.head_dim = D;
  p.seed = seed;
  p.draft_rho = rho;
  okv_attn_gen_t *g = NULL;
  OKV_ASSERT_OK(okv_attn_gen_create(&p, &g));
  return g;
}

static void test_gen_params(void **state) {
  (void)state;
  okv_attn_gen_params_t p;
  okv_attn_gen_params_init(&p);
  assert_true(p.seed == 1 && p.draft_rho == 0.7);
  okv_attn_gen_t *g = NULL;
  OKV_ASSERT_CODE(okv_attn_gen_create(&p, &g), OKV_STATUS_INVALID_ARGUMENT); /* shape 0 */
  p.n_layers = 1;
  p.n_kv_heads = 1;
  p.group_size = 1;
  const uint32_t bad_dims[] = {0, 30, 33, 258};
  for (size_t i = 0; i < 4; i++) {
    p.head_dim = bad_dims[i];
    OKV_ASSERT_CODE(okv_attn_gen_create(&p, &g), OKV_STATUS_INVALID_ARGUMENT);
  }
  p.head_dim = 32;
  p.draft_rho = 1.5;
  OKV_ASSERT_CODE(okv_attn_gen_create(&p, &g), OKV_STATUS_INVALID_ARGUMENT);
  p.draft_rho = NAN;
  OKV_ASSERT_CODE(okv_attn_gen_create(&p, &g), OKV_STATUS_INVALID_ARGUMENT);
  assert_null(g);
  p.draft_rho = 0.0;
  OKV_ASSERT_OK(okv_attn_gen_create(&p, &g));
  okv_attn_gen_destroy(g);
  okv_attn_gen_destroy(NULL);
}

/* Same seed, same values; another seed or noise stream, other values; prompt keys do not depend on the
 * sequence (stream 0 is shared), decoded keys do. */
static void test_gen_deterministic(void **state) {
  (void)state;
  okv_attn_gen_t *a = gen_new(2, 2, 2, 64, 7, 0.7), *b = gen_new(2, 2, 2, 64, 7, 0.7),
                 *c = gen_new(2, 2, 2, 64, 8, 0.7);
  float ka[64], kb[64], kc[64], va[64], vb[64], qa[128], qb[128];
  for (uint32_t pos = 0; pos < 200; pos += 37) {
    okv_attn_gen_kv(a, 1, 1, 0, pos, ka, va);
    okv_attn_gen_kv(b, 1, 1, 0, pos, kb, vb);
    okv_attn_gen_kv(c, 1, 1, 0, pos, kc, NULL);
    assert_memory_equal(ka, kb, sizeof ka);
    assert_memory_equal(va, vb, sizeof va);
    assert_memory_not_equal(ka, kc, sizeof ka);
    okv_attn_gen_kv(a, 1, 1, 1, pos, kb, NULL);
    okv_attn_gen_kv(a, 1, 1, 2, pos, kc, NULL);
    assert_memory_not_equal(kb, kc, sizeof kb);
    okv_attn_gen_query(a, 3, 0, 1, pos, qa);
    okv_attn_gen_query(b, 3, 0, 1, pos, qb);
    assert_memory_equal(qa, qb, sizeof qa);
    okv_attn_gen_query(a, 4, 0, 1, pos, qb); /* another sequence: another focus and innovation */
    assert_memory_not_equal(qa, qb, sizeof qa);
  }
  okv_attn_gen_destroy(a);
  okv_attn_gen_destroy(b);
  okv_attn_gen_destroy(c);
}

static double dist2(const float *x, const float *y, uint32_t n) {
  double s = 0;
  for (uint32_t i = 0; i < n; i++) s += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
  return s;
}

/* rho = 1: the draft made at p is the real query of p + 1 (up to rounding); rho = 0.7: the draft is
 * closer to the next real query than the current real query is (what the proxy mode predicts with).
 * Model: E|draft - next|^2 = 2(1 - rho) sigma^2 D, E|cur - next|^2 >= 2 sigma^2 D (+ drift). */
static void test_gen_draft_predicts(void **state) {
  (void)state;
  const uint32_t D = 64, G = 2;
  okv_attn_gen_t *exact = gen_new(2, 4, G, D, 3, 1.0), *g = gen_new(2, 4, G, D, 3, 0.7);
  float qd[128], qn[128], qc[128];
  for (uint32_t h = 0; h < 4; h++) {
    okv_attn_gen_draft_query(exact, 0, 1, h, 1000, qd);
    okv_attn_gen_query(exact, 0, 1, h, 1001, qn);
    for (uint32_t i = 0; i < G * D; i++) assert_true(fabsf(qd[i] - qn[i]) <= 1e-5f * (1.0f + fabsf(qn[i])));
  }
  double d_draft = 0, d_proxy = 0;
  for (uint32_t h = 0; h < 4; h++)
    for (uint32_t pos = 500; pos < 600; pos++) {
      okv_attn_gen_draft_query(g, 2, 0, h, pos, qd);
      okv_attn_gen_query(g, 2, 0, h, pos + 1, qn);
      okv_attn_gen_query(g, 2, 0, h, pos, qc);
      d_draft += dist2(qd, qn, G * D);
      d_proxy += dist2(qc, qn, G * D);
    }
  /* Expected ratio 0.3 (sigma 0.6, D 64: 0.6 * 0.36 * 64 * 2 vs 2 * 0.36 * 64 * 2); allow for sampling. */
  assert_true(d_draft < 0.45 * d_proxy);
  assert_true(d_draft > 0.15 * d_proxy);
  okv_attn_gen_destroy(exact);
  okv_attn_gen_destroy(g);
}

/* Block attention mass of the real query of (seq 0, layer, h) at position n - 1 over tokens 0..n-1. */
static void block_mass(const okv_attn_gen_t *g, uint32_t layer, uint32_t h, uint32_t n, uint32_t G, uint32_t D,
                       double *mass) {
  float *keys = malloc((size_t)n * D * sizeof(float)), q[4 * 128];
  double *lg = malloc(n * sizeof(double));
  for (uint32_t t = 0; t < n; t++) okv_attn_gen_kv(g, layer, h, 0, t, keys + (size_t)t * D, NULL);
  okv_attn_gen_query(g, 0, layer, h, n - 1, q);
  for (uint32_t b = 0; b < (n + 15) / 16; b++) mass[b] = 0;
  for (uint32_t gi = 0; gi < G; gi++) {
    double mx = -INFINITY, z = 0;
    for (uint32_t t = 0; t < n; t++) {
      double s = 0;
      for (uint32_t i = 0; i < D; i++) s += (double)q[gi * D + i] * keys[(size_t)t * D + i];
      lg[t] = s / sqrt((double)D);
      if (lg[t] > mx) mx = lg[t];
    }
    for (uint32_t t = 0; t < n; t++) z += (lg[t] = exp(lg[t] - mx));
    for (uint32_t t = 0; t < n; t++) mass[t / 16] += lg[t] / z / G;
  }
  free(keys);
  free(lg);
}

/* Structure, not noise: in every head the 12.5% heaviest blocks hold most of the mass (uniform
 * attention would give them 12.5%), the last 8 blocks (recent window) outweigh a same-sized run of
 * blocks in the middle, and block 0 (the sink) outweighs the median block. */
static void test_gen_structure(void **state) {
  (void)state;
  const uint32_t D = 64, G = 2, H = 8, n = 4096, nb = n / 16;
  okv_attn_gen_t *g = gen_new(1, H, G, D, 11, 0.7);
  double *mass = malloc(nb * sizeof(double)), *sorted = malloc(nb * sizeof(double));
  for (uint32_t h = 0; h < H; h++) {
    block_mass(g, 0, h, n, G, D, mass);
    double total = 0, recent = 0, middle = 0;
    for (uint32_t b = 0; b < nb; b++) total += mass[b];
    assert_true(fabs(total - 1.0) < 1e-9);
    for (uint32_t b = nb - 8; b < nb; b++) recent += mass[b];
    for (uint32_t b = nb / 2; b < nb / 2 + 8; b++) middle += mass[b];
    memcpy(sorted, mass, nb * sizeof(double));
    for (uint32_t i = 0; i < nb; i++) /* insertion sort, descending */
      for (uint32_t j = i; j > 0 && sorted[j] > sorted[j - 1]; j--) {
        double t = sorted[j];
        sorted[j] = sorted[j - 1];
        sorted[j - 1] = t;
      }
    double top = 0;
    for (uint32_t i = 0; i < nb / 8; i++) top += sorted[i];
    char desc[128];
    okv_attn_gen_describe(g, 0, h, desc, sizeof desc);
    print_message("head %u (%s): top-1/8 mass %.3f, recent %.3f, middle %.3f, sink %.4f, median %.5f\n", h, desc, top,
                  recent, middle, mass[0], sorted[nb / 2]);
    assert_true(top > 0.5);
    assert_true(recent > 2.0 * middle);
    assert_true(mass[0] > 4.0 * sorted[nb / 2]);
  }
  free(mass);
  free(sorted);
  okv_attn_gen_destroy(g);
}

/* ---- Trace format ---- */

static char g_dir[256];

static void trace_path(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", g_dir, name); }

/* k[i] = 1000 w + 10 p + l + i / 100, q = -k-ish, qd = q + 0.5: every value identifies its record. */
static float val(uint32_t w, uint32_t p, uint32_t l, uint32_t i, float off) {
  return 1000.0f * (float)w + 10.0f * (float)p + (float)l + (float)i / 100.0f + off;
}

static void write_trace(const char *path, bool draft, uint32_t n_windows, const uint32_t *n_pos, bool skip_one) {
  okv_kv_trace_shape_t sh = {2, 4, 2, 3, draft};
  okv_kv_trace_writer_t w;
  OKV_ASSERT_OK(okv_kv_trace_open(path, &sh, &w));
  float k[6], q[12], qd[12];
  /* Records in an order unlike the index: layers outermost, windows last-first. */
  for (uint32_t l = 0; l < 2; l++)
    for (uint32_t wi = n_windows; wi-- > 0;)
      for (uint32_t p = 0; p < n_pos[wi]; p++) {
        if (skip_one && wi == 0 && p == 1 && l == 1) continue;
        for (uint32_t i = 0; i < 6; i++) k[i] = val(wi, p, l, i, 0.0f);
        for (uint32_t i = 0; i < 12; i++) {
          q[i] = -val(wi, p, l, i, 0.0f);
          qd[i] = q[i] + 0.5f;
        }
        OKV_ASSERT_OK(okv_kv_trace_write(&w, wi, p, l, k, q, draft ? qd : NULL));
      }
  OKV_ASSERT_OK(okv_kv_trace_close(&w));
}

static void test_trace_round_trip(void **state) {
  (void)state;
  char path[300];
  trace_path(path, sizeof path, "a.trace");
  const uint32_t n_pos[3] = {5, 2, 7};
  write_trace(path, true, 3, n_pos, false);
  okv_kv_trace_t t;
  OKV_ASSERT_OK(okv_kv_trace_load(path, &t));
  assert_int_equal(t.shape.n_layers, 2);
  assert_int_equal(t.shape.n_q_heads, 4);
  assert_int_equal(t.shape.n_kv_heads, 2);
  assert_int_equal(t.shape.head_dim, 3);
  assert_true(t.shape.has_draft);
  assert_int_equal(t.n_windows, 3);
  for (uint32_t w = 0; w < 3; w++) {
    assert_int_equal(t.n_positions[w], n_pos[w]);
    for (uint32_t p = 0; p < n_pos[w]; p++)
      for (uint32_t l = 0; l < 2; l++) {
        const float *k = okv_kv_trace_k(&t, w, p, l), *q = okv_kv_trace_q(&t, w, p, l),
                    *qd = okv_kv_trace_qd(&t, w, p, l);
        assert_non_null(k);
        for (uint32_t i = 0; i < 6; i++) assert_true(k[i] == val(w, p, l, i, 0.0f));
        for (uint32_t i = 0; i < 12; i++) {
          assert_true(q[i] == -val(w, p, l, i, 0.0f));
          assert_true(qd[i] == q[i] + 0.5f);
        }
      }
  }
  assert_null(okv_kv_trace_k(&t, 3, 0, 0));
  assert_null(okv_kv_trace_k(&t, 1, 2, 0));
  assert_null(okv_kv_trace_q(&t, 0, 0, 2));
  okv_kv_trace_free(&t);
  okv_kv_trace_free(&t); /* a freed (zeroed) trace is accepted */

  write_trace(path, false, 3, n_pos, false); /* without drafts: no qd */
  OKV_ASSERT_OK(okv_kv_trace_load(path, &t));
  assert_false(t.shape.has_draft);
  assert_null(okv_kv_trace_qd(&t, 0, 0, 0));
  assert_true(okv_kv_trace_q(&t, 2, 6, 1)[0] == -val(2, 6, 1, 0, 0.0f));
  okv_kv_trace_free(&t);
  unlink(path);
}

static void expect_load_error(const char *path, okv_status_code_t code, const char *needle) {
  okv_kv_trace_t t;
  memset(&t, 0x5a, sizeof t);
  okv_status_t s = okv_kv_trace_load(path, &t);
  assert_int_equal(okv_status_code(s), code);
  if (needle && !strstr(okv_status_message(s), needle)) {
    print_error("message '%s' lacks '%s'\n", okv_status_message(s), needle);
    fail();
  }
  okv_status_free(s);
  assert_null(t.k); /* nothing left allocated */
  assert_int_equal(t.n_windows, 0);
}

static void test_trace_bad_files(void **state) {
  (void)state;
  char path[300], bad[300];
  trace_path(path, sizeof path, "b.trace");
  trace_path(bad, sizeof bad, "bad.trace");
  const uint32_t n_pos[2] = {3, 4};
  expect_load_error(bad, OKV_STATUS_NOT_FOUND, NULL);
  write_trace(path, true, 2, n_pos, true); /* one record missing */
  expect_load_error(path, OKV_STATUS_INVALID_ARGUMENT, "need");
  write_trace(path, true, 2, n_pos, false);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  unsigned char buf[8192];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  assert_true(n > OKV_KV_TRACE_HEADER && n < sizeof buf);
  /* Truncated by one byte: not a whole number of records. */
  f = fopen(bad, "wb");
  fwrite(buf, 1, n - 1, f);
  fclose(f);
  expect_load_error(bad, OKV_STATUS_INVALID_ARGUMENT, "multiple");
  /* Cut inside the 64-byte header, the magic intact: a truncated header, not "not a trace file" (which it
   * used to say); a short file of other bytes, or an empty one, is not a trace file. */
  const size_t cuts[] = {63, 24, 8, 5, 1};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    char needle[64];
    snprintf(needle, sizeof needle, "truncated header (%zu of 64 bytes)", cuts[i]);
    f = fopen(bad, "wb");
    fwrite(buf, 1, cuts[i], f);
    fclose(f);
    expect_load_error(bad, OKV_STATUS_INVALID_ARGUMENT, needle);
  }
  f = fopen(bad, "wb");
  fwrite("OKVTRAC!", 1, 8, f);
  fclose(f);
  expect_load_error(bad, OKV_STATUS_INVALID_ARGUMENT, "not a trace file (magic at byte 0)");
  f = fopen(bad, "wb");
  fwrite("OKX", 1, 3, f);
  fclose(f);
  expect_load_error(bad, OKV_STATUS_INVALID_ARGUMENT, "not a trace file (magic at byte 0)");
  f = fopen(bad, "wb");
  fclose(f);
  expect_load_error(bad, OKV_STATUS_INVALID_ARGUMENT, "empty file");
  /* Bad magic, bad version, bad shape. */
  unsigned char c[8192];
  const struct {
    size_t off;
    unsigned char v;
    const char *needle;
  } edits[] = {{0, 'X', "magic"}, {8, 9, "version"}, {12, 0, "range"}, {16, 3, "multiple"}};
  for (size_t e = 0; e < sizeof edits / sizeof edits[0]; e++) {
    memcpy(c, buf, n);
    c[edits[e].off] = edits[e].v;
    f = fopen(bad, "wb");
    fwrite(c, 1, n, f);
    fclose(f);
    expect_load_error(bad, OKV_STATUS_INVALID_ARGUMENT, edits[e].needle);
  }
  /* A record repeated in place of another; a NaN value. */
  size_t rec = 16 + 4 * (6 + 12 + 12);
  memcpy(c, buf, n);
  memcpy(c + OKV_KV_TRACE_HEADER + rec, c + OKV_KV_TRACE_HEADER, rec);
  f = fopen(bad, "wb");
  fwrite(c, 1, n, f);
  fclose(f);
  expect_load_error(bad, OKV_STATUS_INVALID_ARGUMENT, "twice");
  memcpy(c, buf, n);
  float nan = NAN;
  memcpy(c + OKV_KV_TRACE_HEADER + 16 + 4, &nan, 4);
  f = fopen(bad, "wb");
  fwrite(c, 1, n, f);
  fclose(f);
  expect_load_error(bad, OKV_STATUS_INVALID_ARGUMENT, "non-finite");
  /* Header only: no records. */
  f = fopen(bad, "wb");
  fwrite(buf, 1, OKV_KV_TRACE_HEADER, f);
  fclose(f);
  expect_load_error(bad, OKV_STATUS_INVALID_ARGUMENT, "no records");
  /* Writer argument checks. */
  okv_kv_trace_writer_t w;
  okv_kv_trace_shape_t sh = {2, 3, 2, 4, true}; /* 3 query heads over 2 KV heads */
  OKV_ASSERT_CODE(okv_kv_trace_open(bad, &sh, &w), OKV_STATUS_INVALID_ARGUMENT);
  sh.n_q_heads = 4;
  OKV_ASSERT_CODE(okv_kv_trace_open("/nonexistent-dir/x.trace", &sh, &w), OKV_STATUS_IO_ERROR);
  OKV_ASSERT_OK(okv_kv_trace_open(bad, &sh, &w));
  float v[16] = {0};
  OKV_ASSERT_CODE(okv_kv_trace_write(&w, 0, 0, 2, v, v, v), OKV_STATUS_INVALID_ARGUMENT);    /* layer 2 of 2 */
  OKV_ASSERT_CODE(okv_kv_trace_write(&w, 0, 0, 0, v, v, NULL), OKV_STATUS_INVALID_ARGUMENT); /* draft missing */
  OKV_ASSERT_OK(okv_kv_trace_close(&w));
  unlink(bad);
  unlink(path);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/okv-bench-inputs-XXXXXX");
  if (!mkdtemp(g_dir)) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gen_params),         cmocka_unit_test(test_gen_deterministic),
      cmocka_unit_test(test_gen_draft_predicts), cmocka_unit_test(test_gen_structure),
      cmocka_unit_test(test_trace_round_trip),   cmocka_unit_test(test_trace_bad_files),
  };
  int rc = cmocka_run_group_tests_name("bench_inputs", tests, NULL, NULL);
  rmdir(g_dir);
  return rc;
}
