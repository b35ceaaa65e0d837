/* Replays the fuzz harnesses' saved inputs through the loaders under the
 * normal build (no clang needed): every file in
 * tests/fuzz/regressions/{checkpoint,tokenizer_load,tokenizer_codec,gguf,tokenizer_gguf}/ and in
 * the seed corpora runs through the same harness code libFuzzer runs
 * (tests/fuzz/fuzz_*.c, compiled with OKV_FUZZ_NO_ENTRY), with the CMocka
 * allocator so leaks fail too. Plus the fixed bugs' contracts stated directly:
 * a huge header is refused before allocating, a vocabulary without byte
 * tokens encodes any text, a failed load clears its out pointer, long texts
 * encode in O(n log n).
 * argv[1]: tests/fuzz; argv[2]: the shared directory (optional: the codec
 * inputs that select tok512.bin then use the built-in tokenizer). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/common/test_common.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/model/model_test_util.h"
#include "tools/model/model.h"

static const char *g_fuzz_dir;
static const char *g_shared;
static okv_allocator_t g_alloc;

void okv_fuzz_fail(const char *file, int line, const char *what) {
  print_error("%s:%d: harness check failed: %s\n", file, line, what);
  fail();
}

const okv_allocator_t *okv_fuzz_allocator(void) { return &g_alloc; }

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Runs `fn` on every regular file of <fuzz dir>/<sub>/<harness>/; returns the count. */
static size_t replay_dir(const char *sub, const char *harness, int (*fn)(const uint8_t *, size_t)) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/%s/%s", g_fuzz_dir, sub, harness);
  DIR *d = opendir(dir);
  if (!d) return 0;
  char **names = NULL;
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || strstr(e->d_name, ".md")) continue;
    names = realloc(names, (n + 1) * sizeof *names);
    assert_non_null(names);
    names[n++] = strdup(e->d_name);
  }
  closedir(d);
  if (n) qsort(names, n, sizeof *names, by_name);
  for (size_t i = 0; i < n; ++i) {
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t *buf = malloc(1 << 20);
    assert_non_null(buf);
    size_t len = fread(buf, 1, 1 << 20, f);
    fclose(f);
    /* Exactly sized, like libFuzzer's copy of an input. */
    uint8_t *in = malloc(len ? len : 1);
    assert_non_null(in);
    memcpy(in, buf, len);
    free(buf);
    fn(in, len);
    free(in);
    free(names[i]);
  }
  free(names);
  return n;
}

static void replay(const char *harness, int (*fn)(const uint8_t *, size_t)) {
  g_alloc = okv_test_allocator();
  size_t r = replay_dir("regressions", harness, fn);
  size_t c = replay_dir("corpus", harness, fn);
  printf("%s: %zu regression inputs, %zu seeds replayed\n", harness, r, c);
  assert_true(c > 0); /* the seeds exist: the directory argument is right */
}

static void test_replay_checkpoint(void **state) {
  (void)state;
  replay("checkpoint", okv_fuzz_checkpoint);
}

static void test_replay_tokenizer_load(void **state) {
  (void)state;
  replay("tokenizer_load", okv_fuzz_tokenizer_load);
}

static void test_replay_tokenizer_codec(void **state) {
  (void)state;
  replay("tokenizer_codec", okv_fuzz_tokenizer_codec);
}

static void test_replay_gguf(void **state) {
  (void)state;
  replay("gguf", okv_fuzz_gguf);
}

/* The GGUF tokenizers' harness; its shared-vocabulary inputs use ../shared/gguf's files when present (the
 * built-in vocabularies otherwise). */
static void test_replay_tokenizer_gguf(void **state) {
  (void)state;
  char spm[4096], bpe[4096];
  snprintf(spm, sizeof spm, "%s/gguf/ggml-vocab-llama-spm.gguf", g_shared ? g_shared : "../shared");
  snprintf(bpe, sizeof bpe, "%s/gguf/ggml-vocab-gpt-2.gguf", g_shared ? g_shared : "../shared");
  setenv("OKV_FUZZ_GGUF_SPM", spm, 0);
  setenv("OKV_FUZZ_GGUF_BPE", bpe, 0);
  replay("tokenizer_gguf", okv_fuzz_tokenizer_gguf);
}

/* An allocator that counts and records the largest request. */
static size_t g_largest, g_count;
static void *count_malloc(void *self, size_t n) {
  (void)self;
  ++g_count;
  if (n > g_largest) g_largest = n;
  return test_malloc(n);
}
static void *count_calloc(void *self, size_t c, size_t n) {
  (void)self;
  ++g_count;
  if (c * n > g_largest) g_largest = c * n;
  return test_calloc(c, n);
}
static void count_free(void *self, void *p) {
  (void)self;
  test_free(p);
}

static void put_i32(unsigned char *p, int32_t v) { memcpy(p, &v, 4); }

/* Headers that declare gigabytes with a small file: INVALID_ARGUMENT, one
 * line naming both sizes, nothing allocated through the model's allocator. */
static void test_huge_header_refused_before_allocating(void **state) {
  (void)state;
  okv_allocator_t a = {NULL, count_malloc, count_calloc, NULL, count_free};
  static const int32_t headers[][7] = {
      {65536, 262144, 1024, 1024, 1024, 1 << 20, 1 << 20}, /* the largest in range: ~2^48 floats */
      {65536, 262144, 1024, 256, 1, -(1 << 20), 1 << 20},  /* unshared classifier */
      {4096, 11008, 32, 32, 32, 32000, 4096},              /* a 7B model's shape */
      {8, 12, 1, 2, 1, 16, 4},                             /* tiny but the file is short */
  };
  unsigned char file[28 + 64];
  memset(file, 0, sizeof file);
  char dir[] = "/tmp/okv-fuzz-replay-XXXXXX";
  char path[4200];
  okv_mtest_temp_path(dir, "huge.bin", path, sizeof path);
  for (size_t i = 0; i < sizeof headers / sizeof headers[0]; ++i) {
    for (int k = 0; k < 7; ++k) put_i32(file + 4 * k, headers[i][k]);
    for (int via_file = 0; via_file < 2; ++via_file) {
      g_largest = g_count = 0;
      okv_model_t *m = (okv_model_t *)(uintptr_t)1;
      okv_status_t s;
      if (via_file) {
        okv_mtest_write_file(path, file, sizeof file);
        s = okv_model_load(path, &a, &m);
      } else {
        s = okv_model_load_memory(file, sizeof file, "huge", &a, &m);
      }
      assert_int_equal(okv_status_code(s), OKV_STATUS_INVALID_ARGUMENT);
      const char *msg = okv_status_message(s);
      assert_null(strchr(msg, '\n'));
      assert_non_null(strstr(msg, "92 bytes"));
      assert_non_null(strstr(msg, "needs"));
      okv_status_free(s);
      assert_null(m);
      assert_int_equal(g_count, 0);
    }
  }
  unlink(path);
  rmdir(dir);
}

/* A tokenizer of 3 + a few tokens (no byte-fallback ids 3..258): bytes
 * outside the vocabulary become UNK instead of ids past the tables. */
static void test_small_vocab_encode(void **state) {
  (void)state;
  okv_allocator_t a = okv_test_allocator();
  static const char *const pieces[] = {"<unk>", "<s>", "</s>", "a", "b", "ab"};
  unsigned char file[256];
  put_i32(file, 5); /* max_token_length: "<unk>" */
  size_t n = 4;
  for (size_t i = 0; i < 6; ++i) {
    float sc = (float)i;
    int32_t l = (int32_t)strlen(pieces[i]);
    memcpy(file + n, &sc, 4);
    put_i32(file + n + 4, l);
    memcpy(file + n + 8, pieces[i], (size_t)l);
    n += 8 + (size_t)l;
  }
  okv_tokenizer_t *t = NULL;
  OKV_ASSERT_OK(okv_tokenizer_load_memory(file, n, "small", 6, &a, &t));
  uint32_t ids[16];
  size_t k = 0;
  /* " " (dummy prefix) and "\xc3\xa9" have no token: UNK each byte. */
  OKV_ASSERT_OK(okv_tokenizer_encode(t, "ab\xc3\xa9", 4, true, ids, 16, &k));
  assert_int_equal(k, 5);
  const uint32_t want[] = {OKV_TOKEN_BOS, OKV_TOKEN_UNK, 5, OKV_TOKEN_UNK, OKV_TOKEN_UNK};
  for (size_t i = 0; i < k; ++i) assert_int_equal(ids[i], want[i]);
  okv_tokenizer_free(t);
}

/* A failed load leaves NULL in the out pointer, whatever the reason. */
static void test_failed_load_clears_out(void **state) {
  (void)state;
  okv_allocator_t a = okv_test_allocator();
  unsigned char file[16] = {1, 0, 0, 0};
  okv_tokenizer_t *t = (okv_tokenizer_t *)(uintptr_t)1;
  OKV_ASSERT_CODE(okv_tokenizer_load_memory(file, sizeof file, "x", 0, &a, &t), OKV_STATUS_INVALID_ARGUMENT);
  assert_null(t);
  t = (okv_tokenizer_t *)(uintptr_t)1;
  OKV_ASSERT_CODE(okv_tokenizer_load("/nonexistent/tok.bin", 0, &a, &t), OKV_STATUS_INVALID_ARGUMENT);
  assert_null(t);
  okv_model_t *m = (okv_model_t *)(uintptr_t)1;
  OKV_ASSERT_CODE(okv_model_load_memory(NULL, 5, "x", &a, &m), OKV_STATUS_INVALID_ARGUMENT);
  assert_null(m);
}

/* 2 MiB of text: the quadratic merge loop took minutes here (67 s for
 * 256 KB); O(n log n) takes well under a second. Round trip checked. */
static void test_long_text_encodes_fast(void **state) {
  (void)state;
  okv_allocator_t a = okv_test_allocator();
  char path[4096];
  snprintf(path, sizeof path, "%s/models/tok512.bin", g_shared);
  FILE *f = fopen(path, "rb");
  if (!f) {
    printf("no %s: skipped\n", path);
    skip();
  }
  fclose(f);
  okv_tokenizer_t *t = NULL;
  OKV_ASSERT_OK(okv_tokenizer_load(path, 512, &a, &t));
  static const char *const words[] = {"Once",
                                      "upon",
                                      "a",
                                      "time,",
                                      "there",
                                      "was",
                                      "little",
                                      "girl",
                                      "named",
                                      "Lily.",
                                      "She",
                                      "loved",
                                      "to",
                                      "play",
                                      "outside",
                                      "in",
                                      "the",
                                      "sunshine.",
                                      "\xc3\xa9t\xc3\xa9",
                                      "\xe2\x9c\x93",
                                      "zzzq",
                                      "Tom",
                                      "said,",
                                      "\"Wow!\""};
  const size_t want = (size_t)2 << 20;
  char *text = malloc(want + 32);
  assert_non_null(text);
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, 7);
  size_t n = 0;
  while (n < want) {
    const char *w = words[okv_test_rng_below(&rng, sizeof words / sizeof words[0])];
    size_t l = strlen(w);
    memcpy(text + n, w, l);
    n += l;
    text[n++] = okv_test_rng_below(&rng, 10) == 0 ? '\n' : ' ';
  }
  uint32_t *ids = malloc((n + 2) * sizeof *ids);
  assert_non_null(ids);
  size_t k = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  OKV_ASSERT_OK(okv_tokenizer_encode(t, text, n, true, ids, n + 2, &k));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  printf("encoded %zu bytes into %zu tokens in %.3f s\n", n, k, secs);
  assert_true(k > 1 && k < n);
  /* Round trip. */
  char *back = malloc(n + 64);
  assert_non_null(back);
  assert_int_equal(okv_mtest_decode(t, ids, k, back, n + 64), n);
  assert_memory_equal(back, text, n);
  free(back);
  free(ids);
  free(text);
  okv_tokenizer_free(t);
}

int main(int argc, char **argv) {
  g_fuzz_dir = argc > 1 ? argv[1] : "tests/fuzz";
  g_shared = argc > 2 ? argv[2] : "../shared";
  char tok[4096];
  snprintf(tok, sizeof tok, "%s/models/tok512.bin", g_shared);
  FILE *f = fopen(tok, "rb");
  if (f) {
    fclose(f);
    setenv("OKV_FUZZ_TOKENIZER", tok, 1); /* as scripts/fuzz.sh runs the codec harness */
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_replay_checkpoint),      cmocka_unit_test(test_replay_tokenizer_load),
      cmocka_unit_test(test_replay_tokenizer_codec), cmocka_unit_test(test_huge_header_refused_before_allocating),
      cmocka_unit_test(test_small_vocab_encode),     cmocka_unit_test(test_failed_load_clears_out),
      cmocka_unit_test(test_long_text_encodes_fast), cmocka_unit_test(test_replay_gguf),
      cmocka_unit_test(test_replay_tokenizer_gguf),
  };
  return cmocka_run_group_tests_name("model_fuzz_replay", tests, NULL, NULL);
}
