/* Prefill jobs (tools/model/remote_prefill.h), the payload a decode node submits to oasiskv serve: a round
 * trip keeps every field; every truncation, an extra byte, a bad magic, a token count that disagrees with
 * the prefill, a prefill of 0 tokens and a budget of 0 are refused with one line; packing refuses a job
 * over the transport's 65536-byte limit. The remote KV source refuses a block past the request's region
 * before anything is sent. No model, no UCX connection (suite unit). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test_common.h"
#include "tools/model/remote_prefill.h"
#include "model_test_util.h"

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

static void expect_invalid(const void *buf, uint64_t n) {
  okv_allocator_t al = okv_test_allocator();
  okv_prefill_job_t job;
  okv_status_t s = okv_prefill_job_parse(buf, n, &al, &job);
  assert_int_equal(okv_status_code(s), OKV_STATUS_INVALID_ARGUMENT);
  assert_null(strchr(okv_status_message(s), '\n'));
  okv_status_free(s);
  assert_null(job.tokens);
}

static const char *g_shared;

static void test_job_round_trip(void **state) {
  (void)state;
  okv_allocator_t al = okv_test_allocator();
  uint32_t tokens[12];
  for (uint32_t i = 0; i < 12; ++i) tokens[i] = 1000u * i + 7u;
  const uint32_t P = 10, K = 8;
  const uint64_t FP = 0x0123456789ABCDEFull; /* both halves distinct: the byte order is checked */
  uint64_t n = okv_prefill_job_size(P);
  assert_true(n == 28 + 4 * 12);
  uint8_t buf[128];
  OKV_ASSERT_CODE(okv_prefill_job_pack(tokens, P, K, FP, buf, n - 1), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_prefill_job_pack(tokens, 0, K, FP, buf, n), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_prefill_job_pack(tokens, P, 0, FP, buf, n), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_OK(okv_prefill_job_pack(tokens, P, K, FP, buf, n));
  assert_memory_equal(buf, "OKVPRE02", 8);
  okv_prefill_job_t job;
  OKV_ASSERT_OK(okv_prefill_job_parse(buf, n, &al, &job));
  assert_int_equal(job.budget_blocks, K);
  assert_int_equal(job.prefill_tokens, P);
  assert_int_equal(job.n_tokens, P + 2);
  assert_true(job.model_fingerprint == FP);
  assert_memory_equal(job.tokens, tokens, sizeof tokens);
  okv_prefill_job_free(&job);
  okv_prefill_job_free(&job); /* a freed (zeroed) job is accepted */
  for (uint64_t k = 0; k < n; ++k) expect_invalid(buf, k);
  buf[n] = 0;
  expect_invalid(buf, n + 1);
  uint8_t bad[128];
  memcpy(bad, buf, n);
  bad[3] ^= 1;
  expect_invalid(bad, n); /* magic */
  memcpy(bad, buf, n);
  put32(bad + 8, 0);
  expect_invalid(bad, n); /* K 0 */
  memcpy(bad, buf, n);
  put32(bad + 16, P + 3);
  expect_invalid(bad, n); /* tokens != P + 2 */
  memcpy(bad, buf, n);
  put32(bad + 12, 0);
  put32(bad + 16, 2);
  expect_invalid(bad, 28 + 8); /* P 0 */
  memcpy(bad, buf, n);
  put32(bad + 12, UINT32_MAX);
  put32(bad + 16, 1);
  expect_invalid(bad, n); /* P + 2 overflows */
  /* The transport's SUBMIT limit: P = 16375 fits (65536 bytes), 16376 does not. */
  assert_true(okv_prefill_job_size(16375) == OKV_PREFILL_JOB_MAX_BYTES);
  uint32_t *big = test_calloc(16380, sizeof *big);
  uint8_t *bb = test_malloc(OKV_PREFILL_JOB_MAX_BYTES + 4);
  OKV_ASSERT_OK(okv_prefill_job_pack(big, 16375, K, FP, bb, OKV_PREFILL_JOB_MAX_BYTES + 4));
  OKV_ASSERT_CODE(okv_prefill_job_pack(big, 16376, K, FP, bb, OKV_PREFILL_JOB_MAX_BYTES + 4),
                  OKV_STATUS_INVALID_ARGUMENT);
  test_free(bb);
  test_free(big);
}

static void test_remote_source_bounds(void **state) {
  (void)state;
  okv_remote_kv_source_t st;
  okv_kv_source_t src = okv_remote_kv_source(&st, NULL, 5, 8192, 10, 1.0, "kv server test");
  assert_ptr_equal(src.user, &st);
  assert_true(src.read_blocks == okv_remote_kv_read);
  assert_string_equal(src.name, "kv server test");
  uint64_t idx[2] = {3, 10}; /* 10 is past the 10 blocks of the region */
  uint8_t d0[1], d1[1];
  void *dst[2] = {d0, d1};
  okv_status_t s = okv_remote_kv_read(&st, 2, idx, dst);
  assert_int_equal(okv_status_code(s), OKV_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(okv_status_message(s), "block 10 past the request's 10"));
  okv_status_free(s);
  OKV_ASSERT_CODE(okv_remote_kv_read(&st, 1, NULL, dst), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_OK(okv_remote_kv_read(&st, 0, NULL, NULL)); /* nothing to read */
  assert_true(st.calls == 0 && st.blocks == 0 && st.bytes == 0);
}

/* The model fingerprint a job carries: deterministic, moved by one weight's last bit, and the same for
 * stories260K as a llama2.c checkpoint and as GGUF (the same weights; other RoPE tables and seq_len). */
static void test_model_fingerprint(void **state) {
  (void)state;
  okv_model_t *m = okv_mtest_load_model(g_shared, "models/stories260K.bin");
  uint64_t fp = okv_prefill_model_fingerprint(m);
  assert_true(fp != 0 && fp == okv_prefill_model_fingerprint(m));
  float *w = m->storage + 1000; /* inside the token embedding */
  float keep = *w;
  *w = nextafterf(keep, INFINITY);
  assert_true(okv_prefill_model_fingerprint(m) != fp);
  *w = keep;
  assert_true(okv_prefill_model_fingerprint(m) == fp);
  okv_model_t *g = okv_mtest_load_model(g_shared, "gguf/stories260K.gguf");
  assert_true(okv_prefill_model_fingerprint(g) == fp);
  okv_model_t *other = okv_mtest_load_model(g_shared, "models/aidreams260K.bin");
  assert_true(okv_prefill_model_fingerprint(other) != fp);
  okv_model_free(other);
  okv_model_free(g);
  okv_model_free(m);
}

int main(int argc, char **argv) {
  g_shared = okv_mtest_shared_dir(argc, argv, 1, NULL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_job_round_trip),
      cmocka_unit_test(test_remote_source_bounds),
      cmocka_unit_test(test_model_fingerprint),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
