/* Safe printing of generated text (tools/cli_text.c): raw byte tokens that are
 * control characters or invalid UTF-8 are not printed, valid UTF-8 is kept
 * byte for byte, also when it arrives one byte token at a time. argv[1]: the
 * shared directory (the tokenizer test is skipped without it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/common/test_common.h"
#include "tools/cli_text.h"
#include "tools/model/model.h"

static const char *g_shared;

/* Filters the pieces in order (n_pieces of them, each a NUL-terminated string
 * unless lens gives its length) and checks the concatenated output. */
static void check_pieces(const char *const *pieces, const size_t *lens, size_t n_pieces, const char *want,
                         size_t want_n) {
  okv_cli_text_filter_t f;
  okv_cli_text_filter_init(&f);
  char got[256];
  size_t w = 0;
  for (size_t i = 0; i < n_pieces; ++i) {
    size_t n = lens ? lens[i] : strlen(pieces[i]);
    char out[64];
    assert_true(n + 4 <= sizeof out);
    size_t k = okv_cli_text_filter(&f, pieces[i], n, out);
    assert_true(k <= n + 4);
    assert_true(w + k <= sizeof got);
    memcpy(got + w, out, k);
    w += k;
  }
  okv_cli_text_filter_finish(&f);
  if (w != want_n || memcmp(got, want, w) != 0) {
    fprintf(stderr, "got %zu bytes:", w);
    for (size_t i = 0; i < w; ++i) fprintf(stderr, " %02x", (unsigned char)got[i]);
    fprintf(stderr, ", want %zu bytes:", want_n);
    for (size_t i = 0; i < want_n; ++i) fprintf(stderr, " %02x", (unsigned char)want[i]);
    fprintf(stderr, "\n");
    fail();
  }
}

static void check1(const char *piece, size_t n, const char *want) {
  const char *p[1] = {piece};
  size_t l[1] = {n};
  check_pieces(p, l, 1, want, strlen(want));
}

/* A byte sequence the filter drops (n bytes) between two letters: only the
 * letters come out. */
static void check_dropped_between(const char *bad, size_t n) {
  char in[16] = "a";
  assert_true(n + 2 <= sizeof in);
  memcpy(in + 1, bad, n);
  in[n + 1] = 'b';
  check1(in, n + 2, "ab");
}

static void test_ascii(void **state) {
  (void)state;
  check1("\0", 1, ""); /* the piece of <0x00> */
  check1("\x07", 1, "");
  check1("\x1b", 1, "");
  check1("\x7f", 1, "");
  check1(" the", 4, " the");
  check1("Once", 4, "Once");
  check1("\n", 1, "\n");
  check1("\t", 1, "\t");
  check1("\r", 1, "\r");
  check_dropped_between("\x07", 1);
  check1("\x1b[31mred", 8, "[31mred");
  check1("", 0, "");
}

static void test_utf8_in_one_piece(void **state) {
  (void)state;
  check1("\xc3\xa9", 2, "\xc3\xa9"); /* é */
  check1("caf\xc3\xa9", 5, "caf\xc3\xa9");
  check1("\xe2\x9c\x93", 3, "\xe2\x9c\x93");         /* ✓ */
  check1("\xf0\x9f\x98\x80", 4, "\xf0\x9f\x98\x80"); /* U+1F600 */
  check1("\xf4\x8f\xbf\xbf", 4, "\xf4\x8f\xbf\xbf"); /* U+10FFFF */
  check1("\xc2\xa0", 2, "\xc2\xa0");                 /* no-break space */
  check1("\xed\x9f\xbf", 3, "\xed\x9f\xbf");         /* U+D7FF, just below the surrogates */
}

static void test_invalid_utf8(void **state) {
  (void)state;
  check1("\x80", 1, ""); /* lone continuation bytes */
  check1("\xa9", 1, "");
  check1("\xbf", 1, "");
  check_dropped_between("\x80", 1);
  check1("\xc3", 1, ""); /* truncated at the end */
  check1(
      "\xc3"
      "a",
      2, "a"); /* truncated by ASCII */
  check1(
      "\xe2\x9c"
      "x",
      3, "x");
  check1("\xc3\xc3\xa9", 3, "\xc3\xa9"); /* a lead byte ends the previous character */
  check1("\xc0\xaf", 2, "");             /* overlong '/' */
  check1("\xe0\x80\xaf", 3, "");         /* overlong */
  check1("\xf0\x80\x80\xaf", 4, "");     /* overlong */
  check1("\xed\xa0\x80", 3, "");         /* surrogate U+D800 */
  check1("\xf4\x90\x80\x80", 4, "");     /* above U+10FFFF */
  check1("\xf5\x80\x80\x80", 4, "");
  check1("\xff", 1, "");
  check1("\xfe", 1, "");
  check1("\xc2\x85", 2, ""); /* C1 control U+0085 */
  check1(
      "\xc2\x9b"
      "1m",
      4, "1m"); /* C1 CSI */
}

static void test_utf8_across_pieces(void **state) {
  (void)state;
  /* ✓ as three byte tokens, between words. */
  const char *a[] = {" ok", "\xe2", "\x9c", "\x93", " done"};
  check_pieces(a, NULL, 5, " ok\xe2\x9c\x93 done", 11);
  /* U+1F600 one byte at a time. */
  const char *b[] = {"\xf0", "\x9f", "\x98", "\x80"};
  check_pieces(b, NULL, 4, "\xf0\x9f\x98\x80", 4);
  /* A lead byte token followed by a word: the lead is dropped, the word kept. */
  const char *c[] = {"\xe2", "\x9c", " the"};
  check_pieces(c, NULL, 3, " the", 4);
  /* A NUL byte token inside a character breaks it. */
  const char *d[] = {"\xc3", "\0", "\xa9", "x"};
  const size_t dl[] = {1, 1, 1, 1};
  check_pieces(d, dl, 4, "x", 1);
  /* An incomplete character at the end is not printed, nor carried over. */
  okv_cli_text_filter_t f;
  okv_cli_text_filter_init(&f);
  char out[16];
  assert_int_equal(okv_cli_text_filter(&f, "\xe2\x9c", 2, out), 0);
  okv_cli_text_filter_finish(&f);
  assert_int_equal(okv_cli_text_filter(&f,
                                       "\x93"
                                       "a",
                                       2, out),
                   1);
  assert_int_equal(out[0], 'a');
}

/* The byte tokens of the real tokenizer, decoded as generate decodes them. */
static void test_tokenizer_pieces(void **state) {
  (void)state;
  char path[4096];
  snprintf(path, sizeof path, "%s/models/tok512.bin", g_shared);
  if (access(path, R_OK) != 0) skip();
  okv_allocator_t alloc = okv_test_allocator();
  okv_tokenizer_t *t = NULL;
  OKV_ASSERT_OK(okv_tokenizer_load(path, 512, &alloc, &t));
  okv_cli_text_filter_t f;
  okv_cli_text_filter_init(&f);
  char piece[64], out[sizeof piece + 4];
  size_t nb = 0;
  /* Every control byte token but whitespace prints nothing. */
  for (unsigned b = 0; b < 0x20; ++b) {
    OKV_ASSERT_OK(okv_tokenizer_piece(t, 261, OKV_TOKEN_BYTE_BASE + b, piece, sizeof piece, &nb));
    assert_int_equal(nb, 1);
    assert_int_equal((unsigned char)piece[0], b);
    size_t k = okv_cli_text_filter(&f, piece, nb, out);
    bool space = b == '\t' || b == '\n' || b == '\v' || b == '\f' || b == '\r';
    assert_int_equal(k, space ? 1 : 0);
  }
  OKV_ASSERT_OK(okv_tokenizer_piece(t, 261, OKV_TOKEN_BYTE_BASE + 0x7f, piece, sizeof piece, &nb));
  assert_int_equal(okv_cli_text_filter(&f, piece, nb, out), 0);
  /* "a<0x07>b" and "café ✓" (whose ✓ is three byte tokens) decode to the text
   * without the BEL, every UTF-8 byte kept. */
  const char *texts[] = {
      "a\x07"
      "b",
      "caf\xc3\xa9 \xe2\x9c\x93"};
  const char *want[] = {"ab", "caf\xc3\xa9 \xe2\x9c\x93"};
  for (int x = 0; x < 2; ++x) {
    uint32_t ids[64];
    size_t n = 0;
    OKV_ASSERT_OK(okv_tokenizer_encode(t, texts[x], strlen(texts[x]), true, ids, 64, &n));
    okv_cli_text_filter_init(&f);
    char got[128];
    size_t w = 0;
    for (size_t i = 1; i < n; ++i) {
      OKV_ASSERT_OK(okv_tokenizer_piece(t, ids[i - 1], ids[i], piece, sizeof piece, &nb));
      w += okv_cli_text_filter(&f, piece, nb, got + w);
    }
    okv_cli_text_filter_finish(&f);
    assert_int_equal(w, strlen(want[x]));
    assert_memory_equal(got, want[x], w);
  }
  okv_tokenizer_free(t);
}

int main(int argc, char **argv) {
  g_shared = argc > 1 ? argv[1] : "../shared";
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ascii),
      cmocka_unit_test(test_utf8_in_one_piece),
      cmocka_unit_test(test_invalid_utf8),
      cmocka_unit_test(test_utf8_across_pieces),
      cmocka_unit_test(test_tokenizer_pieces),
  };
  return cmocka_run_group_tests_name("model_cli_text", tests, NULL, NULL);
}
