/* Admission of a prefilled request (tools/model/admission.h) and the eval's
 * --prefill-tokens path: block format, summaries and the top-K initial set
 * on hand-computed cases (ties to the lower block), exact byte counts, the
 * in-memory KV source, and on stories260K: a dense run admitted from a dense
 * prefill gives the plain dense run's logits bit for bit at every decoded
 * position; sparse runs admit exactly summaries + K + 1 blocks per head and
 * read at most the rest. argv[1]: backend, argv[2]: the shared directory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test_common.h"
#include "tests/model/model_test_util.h"
#include "tests/model/reference.h"
#include "tools/model/admission.h"

static const char *g_backend;
static const char *g_shared;

/* Element (token pos, dim d) of a block's K (transposed) and V, f32 blocks. */
static float blk_k(const uint8_t *blk, uint32_t d, uint32_t pos) { return ((const float *)blk)[d * 16 + pos]; }
static float blk_v(const uint8_t *blk, uint32_t hd, uint32_t d, uint32_t pos) {
  return ((const float *)blk)[16 * hd + pos * hd + d];
}

/* One layer, one KV head with two query heads, head_dim 2, 50 tokens (4 blocks: 16, 16, 16, 2).
 * Keys: block 0 (-1, -1); blocks 1 and 2 (3, 0) except token 20: (3, 4); block 3 (5, 5). Values: (t, -t).
 * Queries (1, 0) and (0, -1). Quest bound max over the two query heads of sum_i max(q_i min_i, q_i max_i):
 * block 0: max(-1, 1) = 1; block 1: max(3, 0) = 3; block 2: max(3, 0) = 3 (tie with block 1). */
static void make_case(float *k, float *v) {
  for (uint32_t t = 0; t < 50; t++) {
    float *kr = k + t * 2, *vr = v + t * 2;
    if (t < 16) {
      kr[0] = -1, kr[1] = -1;
    } else if (t < 48) {
      kr[0] = 3, kr[1] = t == 20 ? 4.0f : 0.0f;
    } else {
      kr[0] = 5, kr[1] = 5;
    }
    vr[0] = (float)t, vr[1] = -(float)t;
  }
}

static void test_build_hand_computed(void **state) {
  (void)state;
  okv_allocator_t al = okv_test_allocator();
  float k[100], v[100], q[4] = {1, 0, 0, -1};
  make_case(k, v);
  okv_kv_shape_t sh = {1, 2, 1, 2, OKV_DTYPE_F32};
  okv_kv_blocks_t kv;
  OKV_ASSERT_OK(okv_kv_blocks_make(&sh, 50, k, v, &al, &kv));
  assert_int_equal(kv.n_blocks, 4);
  assert_int_equal(kv.block_bytes, 256); /* 2 * 16 * 2 * 4 */
  /* Slot layout: K transposed, then V; past the last token zero. */
  const uint8_t *b1 = kv.data + 256, *b3 = kv.data + 3 * 256;
  assert_true(blk_k(b1, 1, 4) == 4.0f && blk_k(b1, 0, 4) == 3.0f);
  assert_true(blk_v(b1, 2, 0, 4) == 20.0f && blk_v(b1, 2, 1, 4) == -20.0f);
  assert_true(blk_k(b3, 0, 1) == 5.0f && blk_k(b3, 0, 2) == 0.0f && blk_v(b3, 2, 0, 2) == 0.0f);
  okv_admission_t a;
  /* K = 1: the tie between blocks 1 and 2 goes to block 1. */
  OKV_ASSERT_OK(okv_admission_build(&kv, q, 1, &al, &a));
  const float want_sum[4][4] = {{-1, -1, -1, -1}, {3, 0, 3, 4}, {3, 0, 3, 0}, {5, 5, 5, 5}};
  for (int b = 0; b < 4; b++)
    for (int i = 0; i < 4; i++) assert_true(a.summaries[b * 4 + i] == want_sum[b][i]);
  assert_int_equal(a.initial_offsets[0], 0);
  assert_int_equal(a.initial_offsets[1], 2);
  assert_int_equal(a.initial_blocks[0], 1);
  assert_int_equal(a.initial_blocks[1], 3);
  assert_memory_equal(a.initial_kv, kv.data + 256, 256);
  assert_memory_equal(a.initial_kv + 256, kv.data + 3 * 256, 256);
  assert_int_equal(a.summary_bytes, 4 * 16);
  assert_int_equal(a.initial_bytes, 2 * 256);
  assert_int_equal(a.admitted_bytes, 4 * 16 + 2 * 256);
  assert_int_equal(a.full_kv_bytes, 4 * 256);
  okv_remote_prefill_t rp;
  okv_kv_blocks_source_t ss;
  okv_admission_prefill(&a, okv_kv_blocks_source(&ss, &kv, "mem"), &rp);
  assert_int_equal(rp.n_tokens, 50);
  assert_ptr_equal(rp.initial_kv, a.initial_kv);
  assert_true(rp.source.read_blocks == okv_kv_blocks_read && rp.source.user == &ss);
  /* The wire format: a round trip gives the same admission; every truncation, an extra byte, a bad magic, a
   * header disagreeing with the size and offsets past the blocks are refused. */
  uint64_t nbytes = okv_admission_pack_size(&a);
  assert_int_equal(nbytes, 40 + 64 + 2 * 4 + 2 * 4 + 2 * 256);
  uint8_t *blob = test_malloc(nbytes + 1);
  OKV_ASSERT_CODE(okv_admission_pack(&a, blob, nbytes - 1), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_OK(okv_admission_pack(&a, blob, nbytes));
  okv_admission_t u;
  OKV_ASSERT_OK(okv_admission_unpack(blob, nbytes, &al, &u));
  assert_memory_equal(u.summaries, a.summaries, 64);
  assert_memory_equal(u.initial_offsets, a.initial_offsets, 2 * 4);
  assert_memory_equal(u.initial_blocks, a.initial_blocks, 2 * 4);
  assert_memory_equal(u.initial_kv, a.initial_kv, 2 * 256);
  assert_true(u.n_tokens == 50 && u.n_blocks == 4 && u.budget_blocks == 1 && u.block_bytes == 256);
  assert_true(u.admitted_bytes == a.admitted_bytes && u.full_kv_bytes == a.full_kv_bytes);
  assert_true(u.shape.n_q_heads == 2 && u.shape.kv_dtype == OKV_DTYPE_F32);
  okv_admission_free(&u);
  for (uint64_t n = 0; n < nbytes; n++)
    OKV_ASSERT_CODE(okv_admission_unpack(blob, n, &al, &u), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_admission_unpack(blob, nbytes + 1, &al, &u), OKV_STATUS_INVALID_ARGUMENT);
  blob[0] ^= 1; /* magic */
  OKV_ASSERT_CODE(okv_admission_unpack(blob, nbytes, &al, &u), OKV_STATUS_INVALID_ARGUMENT);
  blob[0] ^= 1;
  blob[8 + 5 * 4] = 80; /* n_tokens 80: 5 blocks, the size disagrees */
  OKV_ASSERT_CODE(okv_admission_unpack(blob, nbytes, &al, &u), OKV_STATUS_INVALID_ARGUMENT);
  blob[8 + 5 * 4] = 50;
  blob[40 + 64 + 4] = 3; /* initial_offsets[1] = 3 > 2 initial blocks */
  OKV_ASSERT_CODE(okv_admission_unpack(blob, nbytes, &al, &u), OKV_STATUS_INVALID_ARGUMENT);
  blob[40 + 64 + 4] = 2;
  blob[8 + 3 * 4] = 0; /* head_dim 0 */
  OKV_ASSERT_CODE(okv_admission_unpack(blob, nbytes, &al, &u), OKV_STATUS_INVALID_ARGUMENT);
  blob[8 + 3 * 4] = 2;
  OKV_ASSERT_OK(okv_admission_unpack(blob, nbytes, &al, &u)); /* restored */
  okv_admission_free(&u);
  test_free(blob);
  okv_admission_free(&a);
  /* K = 2: blocks 1 and 2, ascending, then the active one. */
  OKV_ASSERT_OK(okv_admission_build(&kv, q, 2, &al, &a));
  assert_int_equal(a.initial_offsets[1], 3);
  assert_int_equal(a.initial_blocks[0], 1);
  assert_int_equal(a.initial_blocks[1], 2);
  assert_int_equal(a.initial_blocks[2], 3);
  okv_admission_free(&a);
  /* Query (-1, 0) alone (second head (0, 0)): block 0 scores 1 > 0 (head 2) > -3: K = 1 takes block 0. */
  float q2[4] = {-1, 0, 0, 0};
  OKV_ASSERT_OK(okv_admission_build(&kv, q2, 1, &al, &a));
  assert_int_equal(a.initial_blocks[0], 0);
  okv_admission_free(&a);
  /* K >= nb - 1: every block. */
  OKV_ASSERT_OK(okv_admission_build(&kv, q, 9, &al, &a));
  assert_int_equal(a.initial_offsets[1], 4);
  assert_int_equal(a.admitted_bytes, a.summary_bytes + a.full_kv_bytes);
  okv_admission_free(&a);
  /* Errors. */
  OKV_ASSERT_CODE(okv_admission_build(&kv, NULL, 1, &al, &a), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_admission_build(&kv, q, 0, &al, &a), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_admission_build(NULL, q, 1, &al, &a), OKV_STATUS_INVALID_ARGUMENT);
  okv_kv_shape_t bad = sh;
  bad.n_q_heads = 3; /* not a multiple of n_kv_heads = 2 */
  bad.n_kv_heads = 2;
  okv_kv_blocks_t kb;
  OKV_ASSERT_CODE(okv_kv_blocks_make(&bad, 50, k, v, &al, &kb), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_kv_blocks_make(&sh, 0, k, v, &al, &kb), OKV_STATUS_INVALID_ARGUMENT);
  /* The in-memory source: copies, counts; an index past the store is refused and not counted. */
  uint8_t buf0[256], buf1[256];
  void *dst[2] = {buf0, buf1};
  uint64_t idx[2] = {0, 3};
  OKV_ASSERT_OK(okv_kv_blocks_read(&ss, 2, idx, dst));
  assert_memory_equal(buf0, kv.data, 256);
  assert_memory_equal(buf1, kv.data + 3 * 256, 256);
  assert_true(ss.calls == 1 && ss.blocks == 2 && ss.bytes == 512);
  idx[1] = 4;
  OKV_ASSERT_CODE(okv_kv_blocks_read(&ss, 2, idx, dst), OKV_STATUS_INVALID_ARGUMENT);
  assert_true(ss.calls == 1 && ss.blocks == 2);
  okv_kv_blocks_free(&kv);
  /* bf16 blocks hold the rounded keys, and the summaries their widened values. */
  sh.kv_dtype = OKV_DTYPE_BF16;
  k[0] = 1.0f + 1.0f / 512.0f; /* not representable in bf16: rounds to 1 */
  OKV_ASSERT_OK(okv_kv_blocks_make(&sh, 50, k, v, &al, &kv));
  assert_int_equal(kv.block_bytes, 128);
  OKV_ASSERT_OK(okv_admission_build(&kv, q, 1, &al, &a));
  assert_true(a.summaries[2] == 1.0f); /* max of dim 0 of block 0: round(1 + 2^-9) = 1 */
  okv_admission_free(&a);
  okv_kv_blocks_free(&kv);
}

typedef struct fixture_t {
  okv_allocator_t alloc;
  okv_hal_device_t *device;
  okv_model_t *model;
  uint32_t tokens[1024];
  uint32_t n_tokens;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  f->alloc = okv_test_allocator();
  char mp[4096], tp[4096], xp[4096];
  okv_ref_shared_path(g_shared, "models/stories260K.bin", mp, sizeof mp);
  okv_ref_shared_path(g_shared, "models/tok512.bin", tp, sizeof tp);
  okv_ref_shared_path(g_shared, "data/tinystories_val.txt", xp, sizeof xp);
  okv_hal_device_params_t p;
  okv_hal_device_params_init(&p);
  p.n_threads = 1;
  okv_tokenizer_t *tok = NULL;
  okv_status_t s = okv_hal_device_create(g_backend, &p, &f->alloc, &f->device);
  if (!s) s = okv_model_load(mp, &f->alloc, &f->model);
  if (!s) s = okv_tokenizer_load(tp, f->model->config.vocab_size, &f->alloc, &tok);
  if (!s) {
    FILE *fp = fopen(xp, "rb");
    char buf[2001];
    size_t n = fp ? fread(buf, 1, 2000, fp) : 0;
    if (fp) fclose(fp);
    size_t nt = 0;
    s = okv_tokenizer_encode(tok, buf, n, true, f->tokens, 1024, &nt);
    f->n_tokens = (uint32_t)nt;
  }
  okv_tokenizer_free(tok);
  if (s) {
    fprintf(stderr, "fixture: %s\n", okv_status_message(s));
    okv_status_free(s);
    return -1;
  }
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  okv_model_free(f->model);
  okv_status_free(okv_hal_device_release(f->device));
  free(f);
  return 0;
}

/* A bf16 KV (head_dim 128, 3 layers x 2 KV heads, 1000 tokens of random keys): the blob carries the
 * summaries in bf16 (half of f32), and the unpacked summaries are bit-identical to the built ones (they are
 * min/max of stored bf16 keys, so narrowing is exact); f16 likewise. */
static void test_wire_summary_dtype(void **state) {
  (void)state;
  okv_allocator_t al = okv_test_allocator();
  const uint32_t L = 3, H = 2, hd = 128, T = 1000, nb = (T + 15) / 16, K = 8;
  size_t n = (size_t)L * T * H * hd;
  float *k = test_malloc(n * sizeof *k), *v = test_malloc(n * sizeof *v), *q = test_malloc((size_t)L * 4 * hd * 4);
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < n; i++) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    k[i] = (float)((int64_t)(rng >> 33) % 20001 - 10000) / 997.0f;
    v[i] = -k[i];
  }
  for (size_t i = 0; i < (size_t)L * 4 * hd; i++) q[i] = (float)((int)(i % 7) - 3) / 3.0f;
  const okv_dtype_t dts[2] = {OKV_DTYPE_BF16, OKV_DTYPE_F16};
  for (int t = 0; t < 2; t++) {
    okv_kv_shape_t sh = {L, 4, H, hd, dts[t]};
    okv_kv_blocks_t kv;
    OKV_ASSERT_OK(okv_kv_blocks_make(&sh, T, k, v, &al, &kv));
    okv_admission_t a, u;
    OKV_ASSERT_OK(okv_admission_build(&kv, q, K, &al, &a));
    uint64_t n_sum = (uint64_t)L * H * nb * 2 * hd, bb = okv_block_bytes(dts[t], hd);
    assert_true(a.summary_bytes == n_sum * 2);
    assert_true(a.initial_bytes == (uint64_t)L * H * (K + 1) * bb);
    assert_true(a.admitted_bytes == a.summary_bytes + a.initial_bytes);
    uint64_t nbytes = okv_admission_pack_size(&a);
    assert_true(nbytes == 40 + n_sum * 2 + ((uint64_t)L * H + 1) * 4 + (uint64_t)L * H * (K + 1) * (4 + bb));
    uint8_t *blob = test_malloc(nbytes);
    OKV_ASSERT_OK(okv_admission_pack(&a, blob, nbytes));
    OKV_ASSERT_OK(okv_admission_unpack(blob, nbytes, &al, &u));
    assert_memory_equal(u.summaries, a.summaries, n_sum * sizeof(float));
    assert_true(u.admitted_bytes == a.admitted_bytes && u.summary_bytes == a.summary_bytes);
    assert_memory_equal(u.initial_kv, a.initial_kv, a.initial_bytes);
    okv_admission_free(&u);
    test_free(blob);
    okv_admission_free(&a);
    okv_kv_blocks_free(&kv);
  }
  test_free(k);
  test_free(v);
  test_free(q);
}

static void test_eval_prefilled(void **state) {
  fixture_t *f = *state;
  const okv_model_config_t *mc = &f->model->config;
  assert_true(f->n_tokens >= 470);
  const uint32_t P = 100, K = 4;
  okv_eval_window_t w[2] = {{f->tokens, 320}, {f->tokens + 300, 150}};
  okv_eval_config_t ec;
  memset(&ec, 0, sizeof ec);
  ec.mode = OKV_MODE_DENSE;
  ec.budget_blocks = K;
  ec.fetch_ratio = 0.25; /* C = 1 */
  okv_eval_reference_t plain, pref;
  okv_eval_result_t rp, rd, r;
  OKV_ASSERT_OK(okv_eval_run(f->model, f->device, w, 2, &ec, NULL, &f->alloc, &plain, &rp));
  okv_eval_prefill_t pre;
  OKV_ASSERT_OK(okv_eval_prefill(f->model, f->device, w, 2, P, &f->alloc, &pre));
  OKV_ASSERT_OK(okv_eval_run_prefilled(f->model, f->device, w, 2, &ec, &pre, NULL, &f->alloc, &pref, &rd));
  /* Dense admitted from a dense prefill = the plain dense run, bit for bit, at every decoded position. */
  assert_int_equal(rd.tokens_evaluated, (320 - 1 - P) + (150 - 1 - P));
  assert_int_equal(rd.prefill_tokens, P);
  for (uint32_t i = 0; i < 2; i++)
    for (uint32_t p = P; p + 1 < w[i].n_tokens; p++)
      assert_memory_equal(pref.logits + ((size_t)pref.offsets[i] + p - P) * mc->vocab_size,
                          plain.logits + ((size_t)plain.offsets[i] + p) * mc->vocab_size,
                          mc->vocab_size * sizeof(float));
  uint64_t LH = (uint64_t)mc->n_layers * mc->n_kv_heads, nb = (P + 15) / 16;
  uint64_t bb = okv_block_bytes(OKV_DTYPE_F32, mc->head_dim), sb = 2u * mc->head_dim * 4u;
  assert_int_equal(rd.full_kv_bytes, 2 * LH * nb * bb);
  assert_int_equal(rd.admitted_bytes, rd.full_kv_bytes + 2 * LH * nb * sb); /* dense: every block */
  assert_int_equal(rd.remote_bytes, 0);
  /* Sparse modes: exactly summaries + K + 1 blocks per head admitted; reads at most the rest, in blocks. */
  okv_mode_t modes[3] = {OKV_MODE_OASIS, OKV_MODE_PROXY, OKV_MODE_ONDEMAND};
  for (int m = 0; m < 3; m++) {
    ec.mode = modes[m];
    ec.drafter = modes[m] == OKV_MODE_OASIS ? OKV_DRAFTER_ORACLE : OKV_DRAFTER_NONE;
    OKV_ASSERT_OK(okv_eval_run_prefilled(f->model, f->device, w, 2, &ec, &pre, &pref, &f->alloc, NULL, &r));
    assert_int_equal(r.tokens_evaluated, rd.tokens_evaluated);
    assert_int_equal(r.admitted_bytes, 2 * LH * (nb * sb + (K + 1) * bb));
    assert_int_equal(r.full_kv_bytes, rd.full_kv_bytes);
    assert_true(fabs(r.admission_ratio - (double)r.full_kv_bytes / (double)r.admitted_bytes) < 1e-12);
    assert_true(r.remote_bytes > 0);
    assert_true(r.remote_bytes <= 2 * LH * (nb - K - 1) * bb); /* each block at most once */
    assert_int_equal(r.remote_bytes % bb, 0);
    assert_int_equal(r.remote_bytes, r.remote_blocks * bb);
    assert_true(isfinite(r.mean_nll) && r.top1_agreement > 0.8 && r.kl_vs_dense >= 0);
  }
  /* A window too short for the prefill. */
  okv_eval_prefill_t bad;
  okv_eval_window_t shortw = {f->tokens, P + 1};
  OKV_ASSERT_CODE(okv_eval_prefill(f->model, f->device, &shortw, 1, P, &f->alloc, &bad), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_eval_run_prefilled(f->model, f->device, &shortw, 1, &ec, &pre, NULL, &f->alloc, NULL, &r),
                  OKV_STATUS_INVALID_ARGUMENT);
  okv_eval_prefill_free(&pre);
  okv_eval_reference_free(&plain);
  okv_eval_reference_free(&pref);
}

int main(int argc, char **argv) {
  g_backend = okv_test_backend_or_skip(argc, argv);
  g_shared = okv_mtest_shared_dir(argc, argv, 2, "models/stories260K.bin");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_build_hand_computed),
      cmocka_unit_test(test_wire_summary_dtype),
      cmocka_unit_test_setup_teardown(test_eval_prefilled, setup, teardown),
  };
  return cmocka_run_group_tests_name("model_admission", tests, NULL, NULL);
}
