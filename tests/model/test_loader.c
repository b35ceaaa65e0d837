/* Checkpoint loader (shapes, bad files), the double-precision reference
 * forward against the known answers, and the n-gram drafter.
 * argv[1]: the shared directory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/common/test_common.h"
#include "tests/model/model_test_util.h"
#include "tests/model/reference.h"

static const char *g_shared;

static void test_load_stories(void **state) {
  (void)state;
  okv_model_t *m = okv_mtest_load_model(g_shared, "models/stories260K.bin");
  const okv_model_config_t *c = &m->config;
  assert_int_equal(c->dim, 64);
  assert_int_equal(c->hidden_dim, 172);
  assert_int_equal(c->n_layers, 5);
  assert_int_equal(c->n_q_heads, 8);
  assert_int_equal(c->n_kv_heads, 4);
  assert_int_equal(c->head_dim, 8);
  assert_int_equal(c->vocab_size, 512);
  assert_int_equal(c->seq_len, 512);
  assert_true(c->shared_classifier);
  assert_ptr_equal(m->classifier, m->token_embedding);
  /* Legacy RoPE tables: position 0 is the identity, position p rotates pair j by p * 10000^(-2j/8). */
  assert_float_equal(m->rope_cos[0], 1.0f, 1e-7);
  assert_float_equal(m->rope_sin[0], 0.0f, 1e-7);
  for (uint32_t p = 1; p < 512; p += 97)
    for (uint32_t j = 0; j < 4; ++j) {
      double ang = p * pow(10000.0, -2.0 * j / 8.0);
      assert_float_equal(m->rope_cos[p * 4 + j], cos(ang), 1e-3);
      assert_float_equal(m->rope_sin[p * 4 + j], sin(ang), 1e-3);
    }
  okv_model_free(m);
}

static void test_load_aidreams(void **state) {
  (void)state;
  okv_model_t *m = okv_mtest_load_model(g_shared, "models/aidreams260K.bin");
  assert_int_equal(m->config.n_layers, 4);
  assert_int_equal(m->config.n_q_heads, 4);
  assert_int_equal(m->config.n_kv_heads, 4);
  assert_int_equal(m->config.seq_len, 128);
  assert_int_equal(m->config.vocab_size, 512);
  okv_model_free(m);
}

static void expect_load_code(const char *path, okv_status_code_t code) {
  okv_allocator_t a = okv_test_allocator();
  okv_model_t *m = (okv_model_t *)(uintptr_t)1;
  OKV_ASSERT_CODE(okv_model_load(path, &a, &m), code);
  assert_null(m);
}

static void test_bad_checkpoints(void **state) {
  (void)state;
  char path[4096];
  okv_ref_shared_path(g_shared, "models/stories260K.bin", path, sizeof path);
  expect_load_code("/nonexistent/model.bin", OKV_STATUS_NOT_FOUND);
  size_t n = 0;
  unsigned char *d = okv_mtest_read_file(path, &n);
  char dir[] = "/tmp/okv-ckpt-XXXXXX";
  char bad[4200];
  okv_mtest_temp_path(dir, "bad.bin", bad, sizeof bad);
  okv_mtest_write_file(bad, d, 10); /* shorter than the header */
  expect_load_code(bad, OKV_STATUS_INVALID_ARGUMENT);
  okv_mtest_write_file(bad, d, n - 100); /* truncated weights */
  expect_load_code(bad, OKV_STATUS_INVALID_ARGUMENT);
  unsigned char *big = calloc(n + 4, 1);
  memcpy(big, d, n);
  okv_mtest_write_file(bad, big, n + 4); /* trailing bytes: size does not match the header */
  expect_load_code(bad, OKV_STATUS_INVALID_ARGUMENT);
  free(big);
  static const int32_t wild[][2] = {{0, 0}, {0, -5}, {2, 0}, {3, 3}, {4, 7}, {6, 0}, {5, 2}, {1, -1}};
  for (size_t i = 0; i < sizeof wild / sizeof wild[0]; ++i) {
    unsigned char *c = malloc(n);
    memcpy(c, d, n);
    memcpy(c + 4 * wild[i][0], &wild[i][1], 4); /* a header field out of range or inconsistent */
    okv_mtest_write_file(bad, c, n);
    expect_load_code(bad, OKV_STATUS_INVALID_ARGUMENT);
    free(c);
  }
  /* A NaN weight. */
  unsigned char *c = malloc(n);
  memcpy(c, d, n);
  float nan_value = NAN;
  memcpy(c + 28 + 4 * 1000, &nan_value, 4);
  okv_mtest_write_file(bad, c, n);
  expect_load_code(bad, OKV_STATUS_INVALID_ARGUMENT);
  free(c);
  unlink(bad);
  rmdir(dir);
  free(d);
}

/* The double reference reproduces the known answers' top-5 logits. */
static void test_reference_known_answers(void **state) {
  (void)state;
  okv_model_t *m = okv_mtest_load_model(g_shared, "models/stories260K.bin");
  okv_ref_state_t rs;
  assert_int_equal(okv_ref_init(&rs, m), 0);
  double logits[512];
  for (uint32_t p = 0; p < 5; ++p) {
    okv_ref_forward(&rs, okv_mtest_top5[p].token, p, logits);
    for (int r = 0; r < 5; ++r) {
      uint32_t best = 0;
      for (uint32_t v = 1; v < 512; ++v)
        if (logits[v] > logits[best]) best = v;
      assert_int_equal(best, okv_mtest_top5[p].top_ids[r]);
      assert_float_equal(logits[best], okv_mtest_top5[p].top_logits[r], 1e-4);
      logits[best] = -INFINITY;
    }
  }
  okv_ref_free(&rs);
  okv_model_free(m);
}

static void test_ngram_drafter(void **state) {
  (void)state;
  /* Trigram match: "5 6 7" occurred before, followed by 8. */
  const uint32_t h1[] = {1, 5, 6, 7, 8, 9, 5, 6, 7};
  assert_int_equal(okv_drafter_ngram_next(h1, 9), 8);
  /* The latest earlier match wins: "5 6 7" followed by 8, later by 4. */
  const uint32_t h2[] = {5, 6, 7, 8, 5, 6, 7, 4, 5, 6, 7};
  assert_int_equal(okv_drafter_ngram_next(h2, 11), 4);
  /* No trigram, a bigram "2 3" followed by 9. */
  const uint32_t h3[] = {2, 3, 9, 1, 2, 3};
  assert_int_equal(okv_drafter_ngram_next(h3, 6), 9);
  /* Only a unigram match: 4 followed by 11. */
  const uint32_t h4[] = {4, 11, 12, 13, 4};
  assert_int_equal(okv_drafter_ngram_next(h4, 5), 11);
  /* No match: repeat the current token. */
  const uint32_t h5[] = {1, 2, 3, 42};
  assert_int_equal(okv_drafter_ngram_next(h5, 4), 42);
  assert_int_equal(okv_drafter_ngram_next(h5, 1), 1);
  /* Overlapping run: "7 7 7" then 7. */
  const uint32_t h6[] = {7, 7, 7, 7};
  assert_int_equal(okv_drafter_ngram_next(h6, 4), 7);
}

static void test_names_and_argmax(void **state) {
  (void)state;
  okv_drafter_t d;
  OKV_ASSERT_OK(okv_drafter_parse("self", &d));
  assert_int_equal(d, OKV_DRAFTER_SELF);
  OKV_ASSERT_OK(okv_drafter_parse("ngram", &d));
  assert_int_equal(d, OKV_DRAFTER_NGRAM);
  OKV_ASSERT_OK(okv_drafter_parse("oracle", &d));
  assert_int_equal(d, OKV_DRAFTER_ORACLE);
  OKV_ASSERT_CODE(okv_drafter_parse("eagle", &d), OKV_STATUS_INVALID_ARGUMENT);
  assert_string_equal(okv_drafter_name(OKV_DRAFTER_NGRAM), "ngram");
  const float lg[] = {0.5f, 3.0f, -1.0f, 3.0f};
  assert_int_equal(okv_logits_argmax(lg, 4), 1);
}

static void test_path_resolve(void **state) {
  (void)state;
  char out[4096];
  OKV_ASSERT_OK(okv_model_path_resolve(OKV_MODEL_PATH_MODEL, "x/y.bin", out, sizeof out));
  assert_string_equal(out, "x/y.bin");
  setenv("OKV_TOKENIZER", "/env/tok.bin", 1);
  OKV_ASSERT_OK(okv_model_path_resolve(OKV_MODEL_PATH_TOKENIZER, NULL, out, sizeof out));
  assert_string_equal(out, "/env/tok.bin");
  unsetenv("OKV_TOKENIZER");
  OKV_ASSERT_CODE(okv_model_path_resolve(OKV_MODEL_PATH_MODEL, "abcdef", out, 4), OKV_STATUS_INVALID_ARGUMENT);
}

int main(int argc, char **argv) {
  g_shared = okv_mtest_shared_dir(argc, argv, 1, "models/stories260K.bin");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_load_stories),    cmocka_unit_test(test_load_aidreams),
      cmocka_unit_test(test_bad_checkpoints), cmocka_unit_test(test_reference_known_answers),
      cmocka_unit_test(test_ngram_drafter),   cmocka_unit_test(test_names_and_argmax),
      cmocka_unit_test(test_path_resolve),
  };
  return cmocka_run_group_tests_name("model_loader", tests, NULL, NULL);
}
