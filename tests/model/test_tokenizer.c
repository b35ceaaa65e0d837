/* Tokenizer: known-answer encodings of stories260K's tok512, round trip on
 * TinyStories text, pieces, and bad inputs. argv[1]: the shared directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/common/test_common.h"
#include "tests/model/model_test_util.h"
#include "tests/model/reference.h"

static const char *g_shared;

typedef struct tok_fixture_t {
  okv_allocator_t alloc;
  okv_tokenizer_t *tok;
} tok_fixture_t;

static int setup(void **state) {
  tok_fixture_t *f = calloc(1, sizeof *f);
  f->alloc = okv_test_allocator();
  char path[4096];
  okv_ref_shared_path(g_shared, "models/tok512.bin", path, sizeof path);
  okv_status_t s = okv_tokenizer_load(path, 512, &f->alloc, &f->tok);
  if (s) {
    fprintf(stderr, "%s\n", okv_status_message(s));
    okv_status_free(s);
    free(f);
    return -1;
  }
  *state = f;
  return 0;
}

static int teardown(void **state) {
  tok_fixture_t *f = *state;
  okv_tokenizer_free(f->tok);
  free(f);
  return 0;
}

typedef struct known_t {
  const char *text;
  uint32_t ids[32];
  size_t n;
} known_t;

/* From /work/shared/data/stories260K_known_answers.md. */
static const known_t k_known[] = {
    {"Once upon a time", {1, 403, 407, 261, 378}, 5},
    {"Lily and Tom went to the park.", {1, 317, 269, 274, 287, 263, 377, 267, 265, 282, 295, 433, 426}, 13},
    {"\"Wow, Kitty!\" said Spot.", {1, 313, 448, 327, 432, 410, 462, 362, 422, 443, 436, 336, 301, 427, 309, 426}, 16},
    {"Hello world", {1, 346, 306, 414, 263, 304, 341}, 7},
    {"a", {1, 261}, 2},
    {"The sun is hot. It is 3 o'clock!",
     {1, 291, 262, 379, 410, 293, 270, 309, 426, 359, 413, 410, 293, 410, 472, 334, 439, 429, 421, 414, 340, 443},
     22},
    {"caf\xc3\xa9 \xe2\x9c\x93", {1, 280, 412, 431, 485, 410, 229, 159, 150}, 9},
};

static void test_known_encodings(void **state) {
  tok_fixture_t *f = *state;
  for (size_t k = 0; k < sizeof k_known / sizeof k_known[0]; ++k) {
    uint32_t ids[64];
    size_t n = 0;
    OKV_ASSERT_OK(okv_tokenizer_encode(f->tok, k_known[k].text, strlen(k_known[k].text), true, ids, 64, &n));
    if (n != k_known[k].n) print_error("'%s': %zu tokens, expected %zu\n", k_known[k].text, n, k_known[k].n);
    assert_int_equal(n, k_known[k].n);
    for (size_t i = 0; i < n; ++i) {
      if (ids[i] != k_known[k].ids[i])
        print_error("'%s': token %zu = %u, expected %u\n", k_known[k].text, i, ids[i], k_known[k].ids[i]);
      assert_int_equal(ids[i], k_known[k].ids[i]);
    }
  }
}

static void test_no_bos_and_capacity(void **state) {
  tok_fixture_t *f = *state;
  uint32_t ids[8];
  size_t n = 0;
  OKV_ASSERT_OK(okv_tokenizer_encode(f->tok, "Once upon a time", 16, false, ids, 8, &n));
  assert_int_equal(n, 4);
  assert_int_equal(ids[0], 403);
  assert_int_equal(ids[3], 378);
  /* Capacity 2: the full count is still reported, the first 2 written. */
  uint32_t small[2] = {0, 0};
  OKV_ASSERT_OK(okv_tokenizer_encode(f->tok, "Once upon a time", 16, true, small, 2, &n));
  assert_int_equal(n, 5);
  assert_int_equal(small[0], 1);
  assert_int_equal(small[1], 403);
  /* Empty text: only BOS, no dummy prefix. */
  OKV_ASSERT_OK(okv_tokenizer_encode(f->tok, "", 0, true, ids, 8, &n));
  assert_int_equal(n, 1);
  assert_int_equal(ids[0], OKV_TOKEN_BOS);
}

static void test_round_trip(void **state) {
  tok_fixture_t *f = *state;
  char path[4096];
  okv_ref_shared_path(g_shared, "data/tinystories_val.txt", path, sizeof path);
  FILE *fp = fopen(path, "rb");
  assert_non_null(fp);
  char line[8192];
  int n_lines = 0;
  size_t n_tokens_total = 0, n_bytes_total = 0;
  static uint32_t ids[8192];
  static char back[16384];
  while (n_lines < 300 && fgets(line, sizeof line, fp)) {
    size_t len = strlen(line);
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
    if (len == 0 || line[0] == ' ') continue;
    size_t n = 0;
    OKV_ASSERT_OK(okv_tokenizer_encode(f->tok, line, len, true, ids, 8192, &n));
    assert_true(n <= 8192);
    assert_int_equal(ids[0], OKV_TOKEN_BOS);
    size_t nb = okv_mtest_decode(f->tok, ids, n, back, sizeof back);
    if (nb != len || memcmp(back, line, len) != 0) print_error("round trip failed:\n  %s\n  %s\n", line, back);
    assert_int_equal(nb, len);
    assert_memory_equal(back, line, len);
    n_tokens_total += n - 1;
    n_bytes_total += len;
    ++n_lines;
  }
  fclose(fp);
  assert_true(n_lines >= 100);
  /* BPE with 512 tokens compresses English text: fewer tokens than bytes, more than a quarter. */
  assert_true(n_tokens_total < n_bytes_total);
  assert_true(n_tokens_total * 4 > n_bytes_total);
}

static void test_pieces(void **state) {
  tok_fixture_t *f = *state;
  char p[16];
  size_t nb = 0;
  /* Byte-fallback token of 0xE2 (the first byte of a check mark). */
  OKV_ASSERT_OK(okv_tokenizer_piece(f->tok, 410, 0xE2 + OKV_TOKEN_BYTE_BASE, p, sizeof p, &nb));
  assert_int_equal(nb, 1);
  assert_int_equal((unsigned char)p[0], 0xE2);
  /* " Once"-like piece after BOS loses its dummy space, elsewhere keeps it. */
  OKV_ASSERT_OK(okv_tokenizer_piece(f->tok, OKV_TOKEN_BOS, 403, p, sizeof p, &nb));
  assert_string_equal(p, "Once");
  OKV_ASSERT_OK(okv_tokenizer_piece(f->tok, 261, 403, p, sizeof p, &nb));
  assert_string_equal(p, " Once");
  /* Special and out-of-range ids decode to nothing. */
  OKV_ASSERT_OK(okv_tokenizer_piece(f->tok, 0, OKV_TOKEN_BOS, p, sizeof p, &nb));
  assert_int_equal(nb, 0);
  OKV_ASSERT_OK(okv_tokenizer_piece(f->tok, 0, 9999, p, sizeof p, &nb));
  assert_int_equal(nb, 0);
  /* Too small a buffer is an error, not an overflow. */
  OKV_ASSERT_CODE(okv_tokenizer_piece(f->tok, 261, 403, p, 3, &nb), OKV_STATUS_INVALID_ARGUMENT);
}

static void test_bad_text(void **state) {
  tok_fixture_t *f = *state;
  uint32_t ids[16];
  size_t n;
  OKV_ASSERT_CODE(okv_tokenizer_encode(f->tok, "ab\xff", 3, true, ids, 16, &n), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_tokenizer_encode(f->tok, "\xc3", 1, true, ids, 16, &n), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_tokenizer_encode(f->tok, "\xc0\xaf", 2, true, ids, 16, &n), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_tokenizer_encode(f->tok, "a\0b", 3, true, ids, 16, &n), OKV_STATUS_INVALID_ARGUMENT);
}

static void test_bad_files(void **state) {
  (void)state;
  okv_allocator_t a = okv_test_allocator();
  okv_tokenizer_t *t = NULL;
  char path[4096];
  okv_ref_shared_path(g_shared, "models/tok512.bin", path, sizeof path);
  /* Wrong vocabulary size either way. */
  OKV_ASSERT_CODE(okv_tokenizer_load(path, 511, &a, &t), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_tokenizer_load(path, 513, &a, &t), OKV_STATUS_INVALID_ARGUMENT);
  assert_null(t);
  OKV_ASSERT_CODE(okv_tokenizer_load("/nonexistent/tok.bin", 512, &a, &t), OKV_STATUS_NOT_FOUND);
  size_t n = 0;
  unsigned char *d = okv_mtest_read_file(path, &n);
  char tmpl[] = "/tmp/okv-tok-XXXXXX";
  char bad[4200];
  okv_mtest_temp_path(tmpl, "bad.bin", bad, sizeof bad);
  okv_mtest_write_file(bad, d, n - 7); /* truncated inside the last token */
  OKV_ASSERT_CODE(okv_tokenizer_load(bad, 512, &a, &t), OKV_STATUS_INVALID_ARGUMENT);
  okv_mtest_write_file(bad, d, 2); /* not even a header */
  OKV_ASSERT_CODE(okv_tokenizer_load(bad, 512, &a, &t), OKV_STATUS_INVALID_ARGUMENT);
  /* A token length beyond max_token_length. */
  int32_t big = 100000;
  memcpy(d + 4 + 4, &big, 4);
  okv_mtest_write_file(bad, d, n);
  OKV_ASSERT_CODE(okv_tokenizer_load(bad, 512, &a, &t), OKV_STATUS_INVALID_ARGUMENT);
  assert_null(t);
  unlink(bad);
  rmdir(tmpl);
  free(d);
}

int main(int argc, char **argv) {
  g_shared = okv_mtest_shared_dir(argc, argv, 1, "models/tok512.bin");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_known_encodings, setup, teardown),
      cmocka_unit_test_setup_teardown(test_no_bos_and_capacity, setup, teardown),
      cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pieces, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_text, setup, teardown),
      cmocka_unit_test(test_bad_files),
  };
  return cmocka_run_group_tests_name("model_tokenizer", tests, NULL, NULL);
}
