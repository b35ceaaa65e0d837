/* GGUF tokenizers (tools/model/tokenizer_gguf.c): the reference encodings of
 * the two vocabulary files in ../shared/gguf (46 strings each, encoded and
 * decoded back), the pre-tokenizers' splits on hand-derived cases, small
 * hand-made vocabularies (merge order, ties, byte fallback, user-defined
 * pieces, BOS/EOS, ignore_merges) and refused metadata.
 * argv[1]: the shared directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test_common.h"
#include "tests/model/model_test_util.h"
#include "tests/model/reference.h"
#include "tests/model/gguf_writer.h"
#include "tools/model/tokenizer_gguf.h"

static const char *g_shared;

#define SEP     "\n__ggml_vocab_test__\n"
#define N_CASES 46

/* ---- The reference pairs ---- */

typedef struct ref_case_t {
  char *text;
  size_t text_n;
  uint32_t *ids;
  size_t n_ids;
} ref_case_t;

/* Splits <vocab>.inp at the separator (what follows the last one dropped)
 * and parses <vocab>.out (one line per string, " id id ..."). */
static size_t read_cases(const char *vocab, ref_case_t *cases, size_t max) {
  char rel[256], path[4096];
  snprintf(rel, sizeof rel, "gguf/%s.inp", vocab);
  okv_ref_shared_path(g_shared, rel, path, sizeof path);
  size_t n_inp = 0, n_out = 0;
  char *inp = okv_mtest_read_file(path, &n_inp);
  snprintf(rel, sizeof rel, "gguf/%s.out", vocab);
  okv_ref_shared_path(g_shared, rel, path, sizeof path);
  char *out = okv_mtest_read_file(path, &n_out);
  out[n_out] = '\0';
  size_t k = 0, at = 0, sep = strlen(SEP);
  while (k < max) {
    const char *hit = memmem(inp + at, n_inp - at, SEP, sep);
    if (!hit) break;
    size_t len = (size_t)(hit - (inp + at));
    cases[k].text = malloc(len + 1);
    memcpy(cases[k].text, inp + at, len);
    cases[k].text[len] = '\0';
    cases[k].text_n = len;
    at += len + sep;
    ++k;
  }
  char *line = out;
  for (size_t i = 0; i < k; ++i) {
    char *eol = strchr(line, '\n');
    assert_non_null(eol);
    *eol = '\0';
    cases[i].ids = malloc((strlen(line) / 2 + 1) * sizeof *cases[i].ids);
    cases[i].n_ids = 0;
    for (char *p = line; *p;) {
      while (*p == ' ') ++p;
      if (!*p) break;
      char *end = NULL;
      cases[i].ids[cases[i].n_ids++] = (uint32_t)strtoul(p, &end, 10);
      assert_true(end > p);
      p = end;
    }
    line = eol + 1;
  }
  free(inp);
  free(out);
  return k;
}

static void free_cases(ref_case_t *cases, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    free(cases[i].text);
    free(cases[i].ids);
  }
}

static okv_tokenizer_t *load_shared(const char *rel, const okv_allocator_t *a) {
  char path[4096];
  okv_ref_shared_path(g_shared, rel, path, sizeof path);
  okv_gguf_t *g = NULL;
  OKV_ASSERT_OK(okv_gguf_open(path, a, &g));
  okv_tokenizer_t *t = NULL;
  OKV_ASSERT_OK(okv_tokenizer_load_gguf(g, a, &t));
  okv_gguf_close(g); /* the tokenizer keeps copies */
  return t;
}

/* Encodes and decodes every reference string; returns the encode matches
 * (asserting every decode). */
static size_t run_reference(const char *vocab) {
  okv_allocator_t a = okv_test_allocator();
  char rel[256];
  snprintf(rel, sizeof rel, "gguf/%s", vocab);
  okv_tokenizer_t *t = load_shared(rel, &a);
  ref_case_t cases[64];
  size_t n = read_cases(vocab, cases, 64);
  assert_int_equal(n, N_CASES);
  size_t ok = 0;
  for (size_t i = 0; i < n; ++i) {
    size_t cap = cases[i].text_n + 4, got = 0;
    uint32_t *ids = malloc(cap * sizeof *ids);
    OKV_ASSERT_OK(okv_tokenizer_encode(t, cases[i].text, cases[i].text_n, false, ids, cap, &got));
    bool same = got == cases[i].n_ids && memcmp(ids, cases[i].ids, got * sizeof *ids) == 0;
    if (same) {
      ++ok;
    } else {
      fprintf(stderr, "%s case %zu: %zu ids, expected %zu:", vocab, i, got, cases[i].n_ids);
      for (size_t j = 0; j < got && j < 24; ++j) fprintf(stderr, " %u", ids[j]);
      fprintf(stderr, "\n");
    }
    /* Decoding the expected ids gives the string back. */
    size_t dcap = cases[i].text_n + 1, dn = 0;
    char *back = malloc(dcap);
    OKV_ASSERT_OK(okv_tokenizer_decode(t, cases[i].ids, cases[i].n_ids, back, dcap, &dn));
    assert_int_equal(dn, cases[i].text_n);
    assert_memory_equal(back, cases[i].text, dn);
    free(back);
    free(ids);
  }
  printf("%s: %zu/%zu reference encodings match, %zu/%zu decode back\n", vocab, ok, n, n, n);
  free_cases(cases, n);
  okv_tokenizer_free(t);
  return ok;
}

static void test_reference_llama_spm(void **state) {
  (void)state;
  assert_int_equal(run_reference("ggml-vocab-llama-spm.gguf"), N_CASES);
}

static void test_reference_gpt2(void **state) {
  (void)state;
  assert_int_equal(run_reference("ggml-vocab-gpt-2.gguf"), N_CASES);
}

/* BOS/EOS, kinds, pieces of the real vocabularies. */
static void test_shared_specials(void **state) {
  (void)state;
  okv_allocator_t a = okv_test_allocator();
  okv_tokenizer_t *spm = load_shared("gguf/ggml-vocab-llama-spm.gguf", &a);
  okv_tokenizer_t *bpe = load_shared("gguf/ggml-vocab-gpt-2.gguf", &a);
  assert_int_equal(okv_tokenizer_kind(spm), OKV_TOKENIZER_SPM);
  assert_int_equal(okv_tokenizer_kind(bpe), OKV_TOKENIZER_BPE);
  assert_int_equal(okv_tokenizer_vocab_size(spm), 32000);
  assert_int_equal(okv_tokenizer_vocab_size(bpe), 50257);
  assert_null(okv_tokenizer_pre_name(spm));
  assert_string_equal(okv_tokenizer_pre_name(bpe), "gpt-2");
  /* Llama 2: BOS 1 added, EOS 2 not (add_bos_token true, add_eos_token false). */
  assert_int_equal(okv_tokenizer_bos_id(spm), 1);
  assert_int_equal(okv_tokenizer_eos_id(spm), 2);
  assert_true(okv_tokenizer_adds_bos(spm));
  assert_false(okv_tokenizer_adds_eos(spm));
  uint32_t ids[8];
  size_t n = 0;
  OKV_ASSERT_OK(okv_tokenizer_encode(spm, "Hello world", 11, true, ids, 8, &n));
  assert_int_equal(n, 3);
  assert_int_equal(ids[0], 1);
  assert_int_equal(ids[1], 15043);
  assert_int_equal(ids[2], 3186);
  OKV_ASSERT_OK(okv_tokenizer_encode(spm, "", 0, true, ids, 8, &n)); /* the empty text: BOS alone */
  assert_int_equal(n, 1);
  OKV_ASSERT_OK(okv_tokenizer_encode(spm, "", 0, false, ids, 8, &n));
  assert_int_equal(n, 0);
  /* GPT-2: <|endoftext|> (50256) is BOS and EOS, the file has no add_bos_token: nothing added. */
  assert_int_equal(okv_tokenizer_bos_id(bpe), 50256);
  assert_false(okv_tokenizer_adds_bos(bpe));
  OKV_ASSERT_OK(okv_tokenizer_encode(bpe, "Hello world", 11, true, ids, 8, &n));
  assert_int_equal(n, 2);
  assert_int_equal(ids[0], 15496);
  assert_int_equal(ids[1], 995);
  /* The control piece's text is not parsed. */
  OKV_ASSERT_OK(okv_tokenizer_encode(bpe, "<|endoftext|>", 13, false, ids, 8, &n));
  assert_true(n > 1);
  for (size_t i = 0; i < n && i < 8; ++i) assert_int_not_equal(ids[i], 50256);
  /* A count past the capacity: the full count, the prefix written. */
  OKV_ASSERT_OK(okv_tokenizer_encode(spm, "Hello world", 11, true, ids, 2, &n));
  assert_int_equal(n, 3);
  assert_int_equal(ids[1], 15043);
  /* Vocabulary spellings and pieces. */
  const char *p;
  size_t pl;
  OKV_ASSERT_OK(okv_tokenizer_token_text(spm, 15043, &p, &pl));
  assert_int_equal(pl, 8);
  assert_memory_equal(p, "\xe2\x96\x81Hello", 8);
  OKV_ASSERT_OK(okv_tokenizer_token_text(bpe, 18435, &p, &pl));
  assert_memory_equal(p, "\xc4\xa0Hello", 7);
  OKV_ASSERT_CODE(okv_tokenizer_token_text(bpe, 50257, &p, &pl), OKV_STATUS_INVALID_ARGUMENT);
  char piece[64];
  size_t nb = 0;
  OKV_ASSERT_OK(okv_tokenizer_piece(spm, OKV_TOKEN_NONE, 15043, piece, sizeof piece, &nb)); /* start: no space */
  assert_string_equal(piece, "Hello");
  OKV_ASSERT_OK(okv_tokenizer_piece(spm, 1, 15043, piece, sizeof piece, &nb)); /* after BOS: no space */
  assert_string_equal(piece, "Hello");
  OKV_ASSERT_OK(okv_tokenizer_piece(spm, 15043, 15043, piece, sizeof piece, &nb));
  assert_string_equal(piece, " Hello");
  OKV_ASSERT_OK(okv_tokenizer_piece(spm, 15043, 13, piece, sizeof piece, &nb)); /* <0x0A> */
  assert_int_equal(nb, 1);
  assert_int_equal(piece[0], '\n');
  OKV_ASSERT_OK(okv_tokenizer_piece(spm, 15043, 1, piece, sizeof piece, &nb)); /* BOS: nothing */
  assert_int_equal(nb, 0);
  OKV_ASSERT_CODE(okv_tokenizer_piece(spm, 15043, 15043, piece, 4, &nb), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_OK(okv_tokenizer_piece(bpe, OKV_TOKEN_NONE, 18435, piece, sizeof piece, &nb)); /* BPE keeps its space */
  assert_string_equal(piece, " Hello");
  OKV_ASSERT_OK(okv_tokenizer_piece(bpe, 0, 198, piece, sizeof piece, &nb)); /* "Ċ" */
  assert_string_equal(piece, "\n");
  OKV_ASSERT_OK(okv_tokenizer_piece(bpe, 0, 50256, piece, sizeof piece, &nb));
  assert_int_equal(nb, 0);
  /* Decode with a short buffer: the full count, a truncated prefix. */
  uint32_t hw[2] = {15496, 995};
  char small[4];
  OKV_ASSERT_OK(okv_tokenizer_decode(bpe, hw, 2, small, sizeof small, &nb));
  assert_int_equal(nb, 11);
  assert_memory_equal(small, "Hell", 4);
  okv_tokenizer_free(spm);
  okv_tokenizer_free(bpe);
}

/* ---- Pre-tokenizers: splits derived by hand from each rule list ---- */

typedef struct split_case_t {
  const char *pre;
  const char *text;
  const char *pieces[24]; /* NULL-terminated */
} split_case_t;

static const split_case_t k_splits[] = {
    /* GPT-2: case-sensitive contractions ("'S" is punctuation then a letter), digit runs whole with their
     * space, whitespace before a word keeps one space for the word (\s+(?!\S) backs off one). */
    {"gpt-2",
     "Hello world's 1234567 it'S\n\n  x  \tend",
     {"Hello", " world", "'s", " 1234567", " it", "'", "S", "\n\n ", " x", "  ", "\t", "end", NULL}},
    {"gpt-2",
     "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c"
     "abc 123",
     {"\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c"
      "abc",
      " 123", NULL}},
    {"gpt-2", "a\r\n\r\n b  \n", {"a", "\r\n\r\n", " b", "  \n", NULL}},
    {"gpt-2", "x1234567y (ok)!!\n", {"x", "1234567", "y", " (", "ok", ")!!", "\n", NULL}},
    {"default", "it's", {"it", "'s", NULL}},
    /* Llama 3: contractions in any case, digits in runs of 1-3, a space before digits stands alone, a
     * non-letter before letters joins them ("\tend"), newlines gathered ("\n\n"), punctuation takes the
     * newlines after it. */
    {"llama-bpe",
     "Hello world's 1234567 it'S\n\n  x  \tend",
     {"Hello", " world", "'s", " ", "123", "456", "7", " it", "'S", "\n\n", " ", " x", "  ", "\tend", NULL}},
    {"llama-bpe",
     "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c"
     "abc 123",
     {"\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c"
      "abc",
      " ", "123", NULL}},
    {"llama-bpe", "a\r\n\r\n b  \n", {"a", "\r\n\r\n", " b", "  \n", NULL}},
    {"llama-bpe", "x1234567y (ok)!!\n", {"x", "123", "456", "7", "y", " (", "ok", ")!!\n", NULL}},
    {"llama3", "I'LL", {"I", "'LL", NULL}},
    /* Qwen2: as Llama 3 with single digits. */
    {"qwen2",
     "Hello world's 1234567 it'S\n\n  x  \tend",
     {"Hello", " world", "'s", " ", "1", "2", "3", "4", "5", "6", "7", " it", "'S", "\n\n", " ", " x", "  ", "\tend",
      NULL}},
    {"qwen2", "x1234567y (ok)!!\n", {"x", "1", "2", "3", "4", "5", "6", "7", "y", " (", "ok", ")!!\n", NULL}},
    /* SmolLM: every digit alone first, then GPT-2's pattern inside the rest. */
    {"smollm", "Hello world's 1234567 it'S\n\n  x  \tend", {"Hello", " world", "'s", " ",  "1",   "2", "3",
                                                            "4",     "5",      "6",  "7",  " it", "'", "S",
                                                            "\n\n ", " x",     "  ", "\t", "end", NULL}},
    {"smollm", "x1234567y (ok)!!\n", {"x", "1", "2", "3", "4", "5", "6", "7", "y", " (", "ok", ")!!", "\n", NULL}},
    /* DeepSeek Coder: \r and \n alone, letters with one leading space, punctuation, CJK runs, single digits. */
    {"deepseek-coder",
     "Hello world's 1234567 it'S\n\n  x  \tend",
     {"Hello", " world", "'", "s", " ",  "1",  "2", "3",  "4",  "5",     "6",
      "7",     " it",    "'", "S", "\n", "\n", " ", " x", "  ", "\tend", NULL}},
    {"deepseek-coder",
     "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c"
     "abc 123",
     {"\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c", "abc", " ", "1", "2", "3", NULL}},
    {"deepseek-coder", "a\r\n\r\n b  \n", {"a", "\r", "\n", "\r", "\n", " b", "  ", "\n", NULL}},
    /* DeepSeek LLM: the cased-letter class (é, Cyrillic in it; Arabic not), then the ASCII punctuation
     * class re-splits ASCII letters off a piece (" caf" + "é"), trailing spaces of a piece alone, CJK
     * (U+3001-3002 fall in U+0800-4E00), digit runs. */
    {"deepseek-llm",
     "Hello, \xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c! caf\xc3\xa9 42x\n  \xd0\x96\xd0\xb6 \xd8\xa8\xd8\xa7  ",
     {"Hello", ",", " ", "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c", "!", " caf", "\xc3\xa9", " ", "42", "x",
      "\n", " ", " \xd0\x96\xd0\xb6", " \xd8\xa8\xd8\xa7", "  ", NULL}},
    {"deepseek-llm", "it's 2024.\r\n", {"it", "'", "s", " ", "2024", ".", "\r", "\n", NULL}},
    {"deepseek-llm",
     "\xc3\xa9\xc3\xa9 \xe3\x80\x81\xe3\x80\x82ok",
     {"\xc3\xa9\xc3\xa9", " ", "\xe3\x80\x81\xe3\x80\x82", "ok", NULL}},
    /* White_Space: U+0085 (NEL) and U+3000 are spaces for every rule (PCRE2's own \s lacks U+0085, which
     * would make "\x85\x85" one punctuation piece). */
    {"gpt-2",
     "a\xc2\x85\xc2\x85"
     "b\xe3\x80\x80",
     {"a", "\xc2\x85", "\xc2\x85", "b", "\xe3\x80\x80", NULL}},
    {"gpt-2", "", {NULL}},
};

static void test_pretok_splits(void **state) {
  (void)state;
  okv_allocator_t a = okv_test_allocator();
  for (size_t c = 0; c < sizeof k_splits / sizeof k_splits[0]; ++c) {
    const split_case_t *sc = &k_splits[c];
    okv_pretok_t *p = NULL;
    OKV_ASSERT_OK(okv_pretok_create(sc->pre, strlen(sc->pre), &a, &p));
    size_t n = strlen(sc->text), ends[64], k = 0;
    OKV_ASSERT_OK(okv_pretok_split(p, sc->text, n, ends, 64, &k));
    size_t want = 0;
    while (sc->pieces[want]) ++want;
    bool same = k == want;
    for (size_t i = 0, at = 0; same && i < k; at = ends[i++])
      same = ends[i] - at == strlen(sc->pieces[i]) && memcmp(sc->text + at, sc->pieces[i], ends[i] - at) == 0;
    if (!same) {
      fprintf(stderr, "%s case %zu: got", sc->pre, c);
      for (size_t i = 0, at = 0; i < k; at = ends[i++]) fprintf(stderr, " [%.*s]", (int)(ends[i] - at), sc->text + at);
      fprintf(stderr, "\n");
    }
    assert_true(same);
    /* Capacity: the count without writing. */
    size_t k2 = 0;
    OKV_ASSERT_OK(okv_pretok_split(p, sc->text, n, NULL, 0, &k2));
    assert_int_equal(k2, k);
    okv_pretok_free(p);
  }
  okv_pretok_t *p = NULL;
  okv_status_t s = okv_pretok_create("gpt-4o", 6, &a, &p);
  assert_int_equal(okv_status_code(s), OKV_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(okv_status_message(s), "'gpt-4o'"));
  okv_status_free(s);
  assert_null(p);
  OKV_ASSERT_OK(okv_pretok_create("qwen2", 5, &a, &p));
  size_t ends[4], k;
  OKV_ASSERT_CODE(okv_pretok_split(p, "a\xff", 2, ends, 4, &k), OKV_STATUS_INVALID_ARGUMENT);
  okv_pretok_free(p);
}

/* A long run of spaces and one of letters: linear work, one piece each. */
static void test_pretok_long_runs(void **state) {
  (void)state;
  okv_allocator_t a = okv_test_allocator();
  size_t n = 1 << 20;
  char *text = malloc(n);
  memset(text, ' ', n / 2);
  memset(text + n / 2, 'a', n / 2);
  const char *names[] = {"gpt-2", "llama-bpe", "qwen2", "smollm", "deepseek-llm", "deepseek-coder"};
  for (size_t i = 0; i < 6; ++i) {
    okv_pretok_t *p = NULL;
    OKV_ASSERT_OK(okv_pretok_create(names[i], strlen(names[i]), &a, &p));
    size_t ends[4], k = 0;
    OKV_ASSERT_OK(okv_pretok_split(p, text, n, ends, 4, &k));
    /* Spaces but the last, then " aaa..." (deepseek: the whole run of spaces, the letters with one space). */
    assert_int_equal(k, 2);
    assert_int_equal(ends[0], n / 2 - 1);
    okv_pretok_free(p);
  }
  /* Spaces then a digit: deepseek-llm's trailing-space rule must not retry inside the run. */
  text[n - 1] = '1';
  memset(text, ' ', n - 1);
  okv_pretok_t *p = NULL;
  OKV_ASSERT_OK(okv_pretok_create("deepseek-llm", 12, &a, &p));
  size_t ends[4], k = 0;
  OKV_ASSERT_OK(okv_pretok_split(p, text, n, ends, 4, &k));
  assert_int_equal(k, 2);
  assert_int_equal(ends[0], n - 1);
  okv_pretok_free(p);
  free(text);
}

/* ---- Hand-made vocabularies ---- */

/* GPT-2's code point of byte b (the published byte map). */
static uint32_t gpt2_cp(uint32_t b) {
  bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  if (self) return b;
  uint32_t k = 0;
  for (uint32_t c = 0; c < b; ++c) k += !((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
  return 256 + k;
}

enum {
  BAD_NONE = 0,
  BAD_SCORES_COUNT,
  BAD_TYPES_COUNT,
  BAD_TYPE_VALUE,
  BAD_MODEL,
  BAD_NO_MODEL,
  BAD_NO_TOKENS,
  BAD_BOS_ID,
  BAD_PRE,
  BAD_MERGE_ABSENT,
  BAD_MERGE_NO_SPACE,
  BAD_MERGE_RESULT,
  BAD_NO_MERGES,
  BAD_TOKENS_TYPE,
  OPT_ADD_EOS,
  OPT_LLAMA_BPE,
  OPT_NO_TYPES,
  OPT_ADD_BOS,
};

/* SPM: <unk> <s> </s>, 256 byte pieces (ids 3..258), then the pieces below. */
#define SPM_SP "\xe2\x96\x81"
static const char *const k_spm_pieces[] = {SPM_SP, "a", "b", "c", SPM_SP "a", "ab", "bc", SPM_SP "ab", "<ud>", "aa"};
static const float k_spm_scores[] = {-1.0f, -2.0f, -2.0f, -2.0f, -1.5f, -0.5f, -0.25f, -3.0f, 0.0f, -1.0f};
enum { SPM_SPACE = 259, SPM_A, SPM_B, SPM_C, SPM_SA, SPM_AB, SPM_BC, SPM_SAB, SPM_UD, SPM_AA, SPM_N };

static uint8_t *build_spm(int variant, size_t *out_n) {
  const char *tok[SPM_N];
  char bytes[256][7];
  float sc[SPM_N];
  int32_t ty[SPM_N + 1] = {0}; /* one more for the count mismatch */
  tok[0] = "<unk>";
  tok[1] = "<s>";
  tok[2] = "</s>";
  ty[0] = 2;
  ty[1] = ty[2] = 3;
  sc[0] = sc[1] = sc[2] = 0.0f;
  for (int b = 0; b < 256; ++b) {
    snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
    tok[3 + b] = bytes[b];
    ty[3 + b] = 6;
    sc[3 + b] = 0.0f;
  }
  for (int i = 0; i < SPM_N - SPM_SPACE; ++i) {
    tok[SPM_SPACE + i] = k_spm_pieces[i];
    sc[SPM_SPACE + i] = k_spm_scores[i];
    ty[SPM_SPACE + i] = SPM_SPACE + i == SPM_UD ? 4 : 1;
  }
  if (variant == BAD_TYPE_VALUE) ty[SPM_A] = 9;
  okv_gw_t *w = okv_gw_new();
  okv_gw_kv_str(w, "general.architecture", "llama");
  if (variant == BAD_MODEL) okv_gw_kv_str(w, "tokenizer.ggml.model", "bert");
  if (variant != BAD_MODEL && variant != BAD_NO_MODEL) okv_gw_kv_str(w, "tokenizer.ggml.model", "llama");
  if (variant == BAD_TOKENS_TYPE) {
    okv_gw_kv_arr_i32(w, "tokenizer.ggml.tokens", ty, SPM_N);
  } else if (variant != BAD_NO_TOKENS) {
    okv_gw_kv_arr_str(w, "tokenizer.ggml.tokens", tok, SPM_N);
  }
  okv_gw_kv_arr_f32(w, "tokenizer.ggml.scores", sc, variant == BAD_SCORES_COUNT ? SPM_N - 1 : SPM_N);
  if (variant != OPT_NO_TYPES)
    okv_gw_kv_arr_i32(w, "tokenizer.ggml.token_type", ty, variant == BAD_TYPES_COUNT ? SPM_N + 1 : SPM_N);
  okv_gw_kv_u32(w, "tokenizer.ggml.bos_token_id", variant == BAD_BOS_ID ? SPM_N : 1);
  if (variant == OPT_ADD_EOS) okv_gw_kv_bool(w, "tokenizer.ggml.add_eos_token", true);
  uint8_t *d = okv_gw_serialize(w, out_n, NULL);
  okv_gw_free(w);
  return d;
}

/* BPE: the 256 byte tokens (id = byte), then the tokens below; merges "Ġ t", "h e", "Ġt he", "x y". */
static const char *const k_bpe_tokens[] = {"\xc4\xa0t", "he", "\xc4\xa0the", "xyz", "<|eos|>", "<ud>", "xy"};
enum { BPE_GT = 256, BPE_HE, BPE_GTHE, BPE_XYZ, BPE_EOS, BPE_UD, BPE_XY, BPE_N };

static uint8_t *build_bpe(int variant, size_t *out_n) {
  const char *tok[BPE_N];
  char bytes[256][3];
  int32_t ty[BPE_N];
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t cp = gpt2_cp(b);
    if (cp < 0x80) {
      bytes[b][0] = (char)cp;
      bytes[b][1] = '\0';
    } else {
      bytes[b][0] = (char)(0xC0 | (cp >> 6));
      bytes[b][1] = (char)(0x80 | (cp & 0x3F));
      bytes[b][2] = '\0';
    }
    tok[b] = bytes[b];
    ty[b] = 1;
  }
  for (int i = 0; i < BPE_N - BPE_GT; ++i) {
    tok[BPE_GT + i] = k_bpe_tokens[i];
    ty[BPE_GT + i] = 1;
  }
  ty[BPE_EOS] = 3;
  ty[BPE_UD] = 4;
  const char *merges[] = {"\xc4\xa0 t", "h e", "\xc4\xa0t he", "x y", "h e"};
  size_t n_merges = 5; /* a duplicate pair last: the first rank stays */
  if (variant == BAD_MERGE_ABSENT) merges[3] = "x zz";
  if (variant == BAD_MERGE_NO_SPACE) merges[3] = "xy";
  if (variant == BAD_MERGE_RESULT) merges[3] = "y x";
  okv_gw_t *w = okv_gw_new();
  okv_gw_kv_str(w, "tokenizer.ggml.model", "gpt2");
  okv_gw_kv_str(w, "tokenizer.ggml.pre",
                variant == BAD_PRE         ? "tekken-9"
                : variant == OPT_LLAMA_BPE ? "llama-bpe"
                                           : "gpt-2");
  okv_gw_kv_arr_str(w, "tokenizer.ggml.tokens", tok, BPE_N);
  okv_gw_kv_arr_i32(w, "tokenizer.ggml.token_type", ty, BPE_N);
  if (variant != BAD_NO_MERGES) okv_gw_kv_arr_str(w, "tokenizer.ggml.merges", merges, n_merges);
  okv_gw_kv_u32(w, "tokenizer.ggml.bos_token_id", BPE_EOS);
  okv_gw_kv_u32(w, "tokenizer.ggml.eos_token_id", BPE_EOS);
  if (variant == OPT_ADD_BOS) okv_gw_kv_bool(w, "tokenizer.ggml.add_bos_token", true);
  if (variant == OPT_ADD_EOS) okv_gw_kv_bool(w, "tokenizer.ggml.add_eos_token", true);
  uint8_t *d = okv_gw_serialize(w, out_n, NULL);
  okv_gw_free(w);
  return d;
}

/* Builds and loads a vocabulary variant; returns the status code (the tokenizer in *out on OK). */
static okv_status_code_t load_built(uint8_t *(*build)(int, size_t *), int variant, okv_tokenizer_t **out,
                                    const char *expect_in_message) {
  okv_allocator_t a = okv_test_allocator();
  size_t n = 0;
  uint8_t *d = build(variant, &n);
  okv_gguf_t *g = NULL;
  OKV_ASSERT_OK(okv_gguf_open_memory(d, n, "hand.gguf", &a, &g));
  okv_tokenizer_t *t = (okv_tokenizer_t *)&n; /* must be cleared on failure */
  okv_status_t s = okv_tokenizer_load_gguf(g, &a, &t);
  okv_status_code_t c = okv_status_code(s);
  if (s) {
    assert_null(t);
    const char *msg = okv_status_message(s);
    assert_null(strchr(msg, '\n')); /* one line */
    assert_non_null(strstr(msg, "hand.gguf"));
    if (expect_in_message && !strstr(msg, expect_in_message)) {
      fprintf(stderr, "message '%s' does not name '%s'\n", msg, expect_in_message);
      fail();
    }
    okv_status_free(s);
  }
  okv_gguf_close(g);
  free(d);
  if (out) {
    *out = c == OKV_STATUS_OK ? t : NULL;
  } else if (c == OKV_STATUS_OK) {
    okv_tokenizer_free(t);
  }
  return c;
}

static void expect_ids(okv_tokenizer_t *t, const char *text, bool bos, const uint32_t *want, size_t n_want) {
  uint32_t ids[64];
  size_t n = 0;
  OKV_ASSERT_OK(okv_tokenizer_encode(t, text, strlen(text), bos, ids, 64, &n));
  if (n != n_want || memcmp(ids, want, n * sizeof *ids) != 0) {
    fprintf(stderr, "'%s': got", text);
    for (size_t i = 0; i < n && i < 64; ++i) fprintf(stderr, " %u", ids[i]);
    fprintf(stderr, "\n");
    fail();
  }
}

static void expect_round_trip(okv_tokenizer_t *t, const char *text) {
  uint32_t ids[64];
  size_t n = 0, nb = 0;
  OKV_ASSERT_OK(okv_tokenizer_encode(t, text, strlen(text), true, ids, 64, &n));
  char back[256];
  OKV_ASSERT_OK(okv_tokenizer_decode(t, ids, n, back, sizeof back, &nb));
  assert_int_equal(nb, strlen(text));
  assert_memory_equal(back, text, nb);
}

static void test_hand_spm(void **state) {
  (void)state;
  okv_tokenizer_t *t = NULL;
  assert_int_equal(load_built(build_spm, BAD_NONE, &t, NULL), OKV_STATUS_OK);
  /* "▁abc": bc (-0.25) merges before ab (-0.5); then ▁a (-1.5); "abc" is no piece. */
  expect_ids(t, "abc", false, (const uint32_t[]){SPM_SA, SPM_BC}, 2);
  /* "▁ab": ab (-0.5) first, then ▁ab (-3, the only pair left). */
  expect_ids(t, "ab", false, (const uint32_t[]){SPM_SAB}, 1);
  /* "▁aaa": the two "aa" pairs tie (-1): the leftmost merges; ▁aa and aaa are no pieces. */
  expect_ids(t, "aaa", false, (const uint32_t[]){SPM_SPACE, SPM_AA, SPM_A}, 3);
  /* A user-defined piece is matched whole; the stretch after it gets its own dummy prefix. */
  expect_ids(t, "a<ud>b", false, (const uint32_t[]){SPM_SA, SPM_UD, SPM_SPACE, SPM_B}, 4);
  /* Byte fallback: é (C3 A9) is no piece: <0xC3> <0xA9>. BOS first by default. */
  expect_ids(t, "\xc3\xa9", true, (const uint32_t[]){1, SPM_SPACE, 3 + 0xC3, 3 + 0xA9}, 4);
  /* Spaces are pieces of their own when nothing merges: "a  b" -> ▁a ▁ ▁ b. */
  expect_ids(t, "a  b", false, (const uint32_t[]){SPM_SA, SPM_SPACE, SPM_SPACE, SPM_B}, 4);
  expect_round_trip(t, "a<ud>b");
  expect_round_trip(t, " \xc3\xa9 abc  aaa\n");
  okv_tokenizer_free(t);
  /* add_eos_token: EOS last when the caller asks for the specials. */
  assert_int_equal(load_built(build_spm, OPT_ADD_EOS, &t, NULL), OKV_STATUS_OK);
  expect_ids(t, "ab", true, (const uint32_t[]){1, SPM_SAB, 2}, 3);
  expect_ids(t, "ab", false, (const uint32_t[]){SPM_SAB}, 1);
  okv_tokenizer_free(t);
  /* Without token types the <0xNN> pieces are still byte pieces. */
  assert_int_equal(load_built(build_spm, OPT_NO_TYPES, &t, NULL), OKV_STATUS_OK);
  char piece[8];
  size_t nb = 0;
  OKV_ASSERT_OK(okv_tokenizer_piece(t, SPM_A, 3 + 0x41, piece, sizeof piece, &nb));
  assert_int_equal(nb, 1);
  assert_int_equal(piece[0], 'A');
  okv_tokenizer_free(t);
}

static void test_hand_bpe(void **state) {
  (void)state;
  okv_tokenizer_t *t = NULL;
  assert_int_equal(load_built(build_bpe, BAD_NONE, &t, NULL), OKV_STATUS_OK);
  /* " the" -> Ġ t h e -> Ġt (rank 0) he (1) -> Ġthe (2); "xyz" has no merge path to "xyz": xy z. */
  expect_ids(t, "xyz the", false, (const uint32_t[]){BPE_XY, 'z', BPE_GTHE}, 3);
  /* Merges stay inside pre-tokenized pieces: "t" and "he" of different words never merge. */
  expect_ids(t, "t he", false, (const uint32_t[]){'t', ' ', BPE_HE}, 3);
  /* User-defined pieces whole; control text is ordinary text; no BOS (add_bos_token absent). */
  expect_ids(t, "a<ud>b", true, (const uint32_t[]){'a', BPE_UD, 'b'}, 3);
  expect_ids(t, "<|eos|>", true, (const uint32_t[]){'<', '|', 'e', 'o', 's', '|', '>'}, 7);
  /* Bytes of the other kind: "\n" is Ċ (U+010A), token 10; é is two byte tokens. */
  expect_ids(t, "\n\xc3\xa9", false, (const uint32_t[]){10, 0xC3, 0xA9}, 3);
  expect_round_trip(t, "xyz the\n\t\xc3\xa9 a<ud>b  \xe2\x9c\x93");
  okv_tokenizer_free(t);
  /* llama-bpe: a piece that is a whole token is taken as is (ignore_merges); BOS added by default. */
  assert_int_equal(load_built(build_bpe, OPT_LLAMA_BPE, &t, NULL), OKV_STATUS_OK);
  assert_string_equal(okv_tokenizer_pre_name(t), "llama-bpe");
  assert_true(okv_tokenizer_adds_bos(t));
  expect_ids(t, "xyz the", true, (const uint32_t[]){BPE_EOS, BPE_XYZ, BPE_GTHE}, 3);
  okv_tokenizer_free(t);
  assert_int_equal(load_built(build_bpe, OPT_ADD_BOS, &t, NULL), OKV_STATUS_OK);
  expect_ids(t, "he", true, (const uint32_t[]){BPE_EOS, BPE_HE}, 2);
  expect_ids(t, "he", false, (const uint32_t[]){BPE_HE}, 1);
  okv_tokenizer_free(t);
  assert_int_equal(load_built(build_bpe, OPT_ADD_EOS, &t, NULL), OKV_STATUS_OK);
  expect_ids(t, "he", true, (const uint32_t[]){BPE_HE, BPE_EOS}, 2);
  okv_tokenizer_free(t);
}

static void test_bad_metadata(void **state) {
  (void)state;
  size_t n;
  assert_int_equal(load_built(build_spm, BAD_SCORES_COUNT, NULL, "tokenizer.ggml.scores"), OKV_STATUS_INVALID_ARGUMENT);
  assert_int_equal(load_built(build_spm, BAD_TYPES_COUNT, NULL, "tokenizer.ggml.token_type"),
                   OKV_STATUS_INVALID_ARGUMENT);
  assert_int_equal(load_built(build_spm, BAD_TYPE_VALUE, NULL, "is 9"), OKV_STATUS_INVALID_ARGUMENT);
  assert_int_equal(load_built(build_spm, BAD_MODEL, NULL, "'bert'"), OKV_STATUS_INVALID_ARGUMENT);
  assert_int_equal(load_built(build_spm, BAD_NO_MODEL, NULL, "tokenizer.ggml.model"), OKV_STATUS_INVALID_ARGUMENT);
  assert_int_equal(load_built(build_spm, BAD_NO_TOKENS, NULL, "tokenizer.ggml.tokens"), OKV_STATUS_INVALID_ARGUMENT);
  assert_int_equal(load_built(build_spm, BAD_TOKENS_TYPE, NULL, "tokenizer.ggml.tokens"), OKV_STATUS_INVALID_ARGUMENT);
  assert_int_equal(load_built(build_spm, BAD_BOS_ID, NULL, "bos_token_id 269"), OKV_STATUS_INVALID_ARGUMENT);
  assert_int_equal(load_built(build_bpe, BAD_PRE, NULL, "'tekken-9'"), OKV_STATUS_INVALID_ARGUMENT);
  assert_int_equal(load_built(build_bpe, BAD_MERGE_ABSENT, NULL, "merge 3 'x zz'"), OKV_STATUS_INVALID_ARGUMENT);
  assert_int_equal(load_built(build_bpe, BAD_MERGE_NO_SPACE, NULL, "merge 3 'xy'"), OKV_STATUS_INVALID_ARGUMENT);
  assert_int_equal(load_built(build_bpe, BAD_MERGE_RESULT, NULL, "a merged piece"), OKV_STATUS_INVALID_ARGUMENT);
  assert_int_equal(load_built(build_bpe, BAD_NO_MERGES, NULL, "tokenizer.ggml.merges"), OKV_STATUS_INVALID_ARGUMENT);
  /* A file of another kind entirely: stories260K's tokenizer loads (SPM, 512 pieces). */
  okv_allocator_t a = okv_test_allocator();
  okv_tokenizer_t *t = load_shared("gguf/stories260K.gguf", &a);
  assert_int_equal(okv_tokenizer_kind(t), OKV_TOKENIZER_SPM);
  assert_int_equal(okv_tokenizer_vocab_size(t), 512);
  okv_tokenizer_free(t);
  /* Bad text. */
  okv_tokenizer_t *b = NULL;
  assert_int_equal(load_built(build_bpe, BAD_NONE, &b, NULL), OKV_STATUS_OK);
  uint32_t ids[8];
  OKV_ASSERT_CODE(okv_tokenizer_encode(b, "a\xc3", 2, false, ids, 8, &n), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_tokenizer_encode(b, "a\0b", 3, false, ids, 8, &n), OKV_STATUS_INVALID_ARGUMENT);
  okv_tokenizer_free(b);
}

/* The accessors and decode on a llama2.c tokenizer (the same handle). */
static void test_llama2c_handle(void **state) {
  (void)state;
  okv_allocator_t a = okv_test_allocator();
  char path[4096];
  okv_ref_shared_path(g_shared, "models/tok512.bin", path, sizeof path);
  okv_tokenizer_t *t = NULL;
  OKV_ASSERT_OK(okv_tokenizer_load(path, 512, &a, &t));
  assert_int_equal(okv_tokenizer_kind(t), OKV_TOKENIZER_LLAMA2C);
  assert_string_equal(okv_tokenizer_kind_name(okv_tokenizer_kind(t)), "llama2.c");
  assert_int_equal(okv_tokenizer_bos_id(t), OKV_TOKEN_BOS);
  assert_int_equal(okv_tokenizer_eos_id(t), OKV_TOKEN_EOS);
  assert_true(okv_tokenizer_adds_bos(t));
  assert_null(okv_tokenizer_pre_name(t));
  /* "Hello world" with BOS: 1 346 306 414 263 304 341 (the known answers); without, the same less BOS. */
  uint32_t ids[16];
  size_t n = 0, nb = 0;
  OKV_ASSERT_OK(okv_tokenizer_encode(t, "Hello world", 11, false, ids, 16, &n));
  assert_int_equal(n, 6);
  assert_int_equal(ids[0], 346);
  char back[32];
  OKV_ASSERT_OK(okv_tokenizer_decode(t, ids, n, back, sizeof back, &nb));
  assert_int_equal(nb, 11);
  assert_string_equal(back, "Hello world");
  const char *p;
  size_t pl;
  OKV_ASSERT_OK(okv_tokenizer_token_text(t, 346, &p, &pl));
  assert_true(pl >= 1 && p[0] == ' '); /* llama2.c pieces carry a real space */
  char piece[16];
  OKV_ASSERT_OK(okv_tokenizer_piece(t, OKV_TOKEN_NONE, 346, piece, sizeof piece, &nb)); /* start: no space */
  assert_true(nb == pl - 1 && memcmp(piece, p + 1, nb) == 0);
  okv_tokenizer_free(t);
}

int main(int argc, char **argv) {
  g_shared = okv_mtest_shared_dir(argc, argv, 1, "gguf/ggml-vocab-llama-spm.gguf");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference_llama_spm),
      cmocka_unit_test(test_reference_gpt2),
      cmocka_unit_test(test_shared_specials),
      cmocka_unit_test(test_pretok_splits),
      cmocka_unit_test(test_pretok_long_runs),
      cmocka_unit_test(test_hand_spm),
      cmocka_unit_test(test_hand_bpe),
      cmocka_unit_test(test_bad_metadata),
      cmocka_unit_test(test_llama2c_handle),
  };
  return cmocka_run_group_tests_name("model_tokenizer_gguf", tests, NULL, NULL);
}
