/* libFuzzer harness: the GGUF tokenizers' encode and decode
 * (tools/model/tokenizer_gguf.c) and the BPE pre-tokenizers.
 *
 * Input: byte 0 = flags, then the rest.
 *   flags bits 0-2: the vocabulary: 0-5 a built-in byte-level BPE vocabulary
 *     (256 byte tokens, English merges, a user-defined "<ud>", a control
 *     "<|eos|>") with pre-tokenizer gpt-2, llama-bpe, qwen2, smollm,
 *     deepseek-llm, deepseek-coder; 6 a built-in SentencePiece-style one
 *     (specials, 256 byte pieces, scored pieces, "<ud>"); 7 the shared file
 *     $OKV_FUZZ_GGUF_SPM (flags bit 3 clear) or $OKV_FUZZ_GGUF_BPE (set),
 *     e.g. ../shared/gguf/ggml-vocab-*.gguf read in place (the built-in of
 *     the same kind when unset);
 *   flags bit 4: encode with the specials (bos = true);
 *   flags bit 5: a vocabulary built from the input instead: byte 1 = kind
 *     (even: SPM, odd: BPE with pre-tokenizer byte/2 % 6), byte 2 = extra
 *     pieces (mod 32), per piece a length byte (len % 9, 0 allowed), the
 *     bytes (NUL read as 0x01), and a type byte (% 8: 7 is out of range); BPE: then a
 *     count byte (% 8) and that many byte pairs naming merges of two tokens
 *     by index (mod the count); the loader may refuse it (one-line
 *     INVALID_ARGUMENT), else it is fuzzed like the fixed ones without the
 *     round-trip check;
 *   the rest of the input is the text.
 * Checks: encode accepts exactly valid UTF-8 without NUL; the ids are in the
 * vocabulary; BOS first / EOS last exactly as the vocabulary asks; the count
 * and a retry with half the room agree; decode(encode(x)) == x for the fixed
 * vocabularies when no BOS/EOS came out of the text, the text has no U+2581
 * for SentencePiece (it decodes as a space) and (for the shared
 * files, the text has no '<': it could merge into "<0x41>" or "<s>"); the pre-tokenizer's pieces are
 * non-empty and tile the text. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_common.h"
#include "tests/model/gguf_writer.h"
#include "tools/model/tokenizer_gguf.h"

static const char *const k_pre[6] = {"gpt-2", "llama-bpe", "qwen2", "smollm", "deepseek-llm", "deepseek-coder"};

/* GGUF token types. */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_BYTE = 6 };

/* GPT-2's code point of byte b, UTF-8 encoded into out (returns the length). */
static size_t gpt2_byte(uint32_t b, char out[3]) {
  uint32_t cp = b, k = 0;
  bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  if (!self) {
    for (uint32_t c = 0; c < b; ++c) k += !((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
    cp = 256 + k;
  }
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  out[0] = (char)(0xC0 | (cp >> 6));
  out[1] = (char)(0x80 | (cp & 0x3F));
  return 2;
}

/* A vocabulary under construction. */
typedef struct vb_t {
  char **tok;
  size_t *len;
  float *score;
  int32_t *type;
  size_t n;
  char **merge;
  size_t n_merges;
} vb_t;

static void vb_add(vb_t *v, const char *s, size_t n, float score, int32_t type) {
  v->tok = realloc(v->tok, (v->n + 1) * sizeof *v->tok);
  v->len = realloc(v->len, (v->n + 1) * sizeof *v->len);
  v->score = realloc(v->score, (v->n + 1) * sizeof *v->score);
  v->type = realloc(v->type, (v->n + 1) * sizeof *v->type);
  OKV_FUZZ_CHECK(v->tok && v->len && v->score && v->type);
  v->tok[v->n] = malloc(n + 1);
  OKV_FUZZ_CHECK(v->tok[v->n] != NULL);
  memcpy(v->tok[v->n], s, n);
  v->tok[v->n][n] = '\0';
  v->len[v->n] = n;
  v->score[v->n] = score;
  v->type[v->n] = type;
  ++v->n;
}

static void vb_merge(vb_t *v, const char *a, size_t la, const char *b, size_t lb) {
  v->merge = realloc(v->merge, (v->n_merges + 1) * sizeof *v->merge);
  OKV_FUZZ_CHECK(v->merge != NULL);
  char *m = malloc(la + lb + 2);
  OKV_FUZZ_CHECK(m != NULL);
  memcpy(m, a, la);
  m[la] = ' ';
  memcpy(m + la + 1, b, lb);
  m[la + 1 + lb] = '\0';
  v->merge[v->n_merges++] = m;
}

static void vb_free(vb_t *v) {
  for (size_t i = 0; i < v->n; ++i) free(v->tok[i]);
  for (size_t i = 0; i < v->n_merges; ++i) free(v->merge[i]);
  free(v->tok);
  free(v->len);
  free(v->score);
  free(v->type);
  free(v->merge);
  memset(v, 0, sizeof *v);
}

/* The GGUF file of v (merges and pre only for BPE). */
static uint8_t *vb_file(const vb_t *v, bool bpe, const char *pre, size_t *out_n) {
  okv_gw_t *w = okv_gw_new();
  okv_gw_kv_str(w, "tokenizer.ggml.model", bpe ? "gpt2" : "llama");
  okv_gw_kv_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tok, v->n);
  okv_gw_kv_arr_f32(w, "tokenizer.ggml.scores", v->score, v->n);
  okv_gw_kv_arr_i32(w, "tokenizer.ggml.token_type", v->type, v->n);
  if (bpe) {
    okv_gw_kv_str(w, "tokenizer.ggml.pre", pre);
    okv_gw_kv_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merge, v->n_merges);
    okv_gw_kv_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->n - 1);
    okv_gw_kv_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->n - 1);
    okv_gw_kv_bool(w, "tokenizer.ggml.add_eos_token", true);
  }
  uint8_t *d = okv_gw_serialize(w, out_n, NULL);
  okv_gw_free(w);
  return d;
}

/* Built-in BPE: bytes, merges of common English, then "<ud>" (user) and "<|eos|>" (control, last). */
static void build_bpe(vb_t *v) {
  memset(v, 0, sizeof *v);
  for (uint32_t b = 0; b < 256; ++b) {
    char u[3];
    vb_add(v, u, gpt2_byte(b, u), 0.0f, TT_NORMAL);
  }
  static const char *const pairs[][2] = {
      {"\xc4\xa0", "t"},
      {"h", "e"},
      {"\xc4\xa0", "a"},
      {"i", "n"},
      {"\xc4\xa0t", "he"},
      {"e", "r"},
      {"o", "n"},
      {"\xc4\xa0", "s"},
      {"r", "e"},
      {"\xc4\xa0", "w"},
      {"a", "n"},
      {"in", "g"},
      {"\xc4\xa0", "\xc4\xa0"},
      {"\xc4\x8a", "\xc4\x8a"},
      {"1", "2"},
      {"12", "3"},
      {"\xc4\xa0", "1"},
      {"o", "u"},
  };
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; ++i) {
    size_t la = strlen(pairs[i][0]), lb = strlen(pairs[i][1]);
    char m[16];
    memcpy(m, pairs[i][0], la);
    memcpy(m + la, pairs[i][1], lb);
    vb_add(v, m, la + lb, 0.0f, TT_NORMAL);
    vb_merge(v, pairs[i][0], la, pairs[i][1], lb);
  }
  vb_add(v, "<ud>", 4, 0.0f, TT_USER);
  vb_add(v, "<|eos|>", 7, 0.0f, TT_CONTROL);
}

/* Built-in SPM: <unk> <s> </s>, byte pieces, scored pieces, "<ud>". */
static void build_spm(vb_t *v) {
  memset(v, 0, sizeof *v);
  vb_add(v, "<unk>", 5, 0.0f, TT_UNKNOWN);
  vb_add(v, "<s>", 3, 0.0f, TT_CONTROL);
  vb_add(v, "</s>", 4, 0.0f, TT_CONTROL);
  for (int b = 0; b < 256; ++b) {
    char s[8];
    snprintf(s, sizeof s, "<0x%02X>", b);
    vb_add(v, s, 6, 0.0f, TT_BYTE);
  }
  static const char *const pieces[] = {"\xe2\x96\x81",
                                       "e",
                                       "t",
                                       "a",
                                       "h",
                                       "\xe2\x96\x81t",
                                       "he",
                                       "\xe2\x96\x81the",
                                       "in",
                                       "\xe2\x96\x81\xe2\x96\x81",
                                       "aa",
                                       "aaa",
                                       "\xc3\xa9",
                                       "1",
                                       "11",
                                       "\xe2\x96\x81"
                                       "a"};
  float sc = -1.0f;
  for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; ++i) {
    vb_add(v, pieces[i], strlen(pieces[i]), sc, TT_NORMAL);
    sc -= (i % 3 == 0) ? 0.0f : 0.5f; /* some ties */
  }
  vb_add(v, "<ud>", 4, 0.0f, TT_USER);
}

static okv_tokenizer_t *load_file_bytes(const uint8_t *d, size_t n, const okv_allocator_t *a,
                                        okv_status_code_t *out_code) {
  okv_gguf_t *g = NULL;
  okv_status_code_t c = okv_fuzz_status(okv_gguf_open_memory(d, n, "fuzz", a, &g));
  OKV_FUZZ_CHECK(c == OKV_STATUS_OK); /* a well-formed file */
  okv_tokenizer_t *t = NULL;
  okv_status_t s = okv_tokenizer_load_gguf(g, a, &t);
  *out_code = okv_status_code(s);
  if (s) {
    OKV_FUZZ_CHECK(t == NULL);
    OKV_FUZZ_CHECK(strchr(okv_status_message(s), '\n') == NULL);
    okv_status_free(s);
  }
  okv_gguf_close(g);
  return t;
}

/* Fixed tokenizers, loaded once with the system allocator: [0..5] BPE, [6] SPM, [7] shared SPM, [8] shared BPE. */
static okv_tokenizer_t *g_fixed[9];

static void init_fixed(void) {
  static bool done = false;
  if (done) return;
  done = true;
  for (int k = 0; k < 7; ++k) {
    vb_t v;
    if (k < 6)
      build_bpe(&v);
    else
      build_spm(&v);
    size_t n = 0;
    uint8_t *d = vb_file(&v, k < 6, k < 6 ? k_pre[k] : NULL, &n);
    okv_status_code_t c;
    g_fixed[k] = load_file_bytes(d, n, NULL, &c);
    OKV_FUZZ_CHECK(c == OKV_STATUS_OK);
    free(d);
    vb_free(&v);
  }
  const char *env[2] = {getenv("OKV_FUZZ_GGUF_SPM"), getenv("OKV_FUZZ_GGUF_BPE")};
  for (int k = 0; k < 2; ++k) {
    if (!env[k] || !*env[k]) continue;
    okv_gguf_t *g = NULL;
    okv_status_t s = okv_gguf_open(env[k], NULL, &g);
    if (!s) s = okv_tokenizer_load_gguf(g, NULL, &g_fixed[7 + k]);
    okv_gguf_close(g);
    if (s) {
      fprintf(stderr, "okv-fuzz: '%s' is not a usable GGUF vocabulary: %s\n", env[k], okv_status_message(s));
      okv_status_free(s);
    }
  }
}

/* Whether text[0..n) is valid UTF-8 without NUL (independently of the library). */
static bool valid_utf8(const uint8_t *s, size_t n) {
  for (size_t i = 0; i < n;) {
    uint8_t c = s[i];
    size_t len;
    uint32_t cp;
    if (c == 0) return false;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (n - i < len) return false;
    for (size_t j = 1; j < len; ++j) {
      if ((s[i + j] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (s[i + j] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += len;
  }
  return true;
}

/* The vocabulary built from the input (flags bit 5); NULL when refused. */
static okv_tokenizer_t *from_input(const uint8_t *data, size_t size, size_t *off, const okv_allocator_t *a) {
  if (size - *off < 2) return NULL;
  uint8_t kind = data[(*off)++];
  uint32_t extra = data[(*off)++] % 32u;
  bool bpe = kind & 1;
  vb_t v;
  if (bpe)
    build_bpe(&v);
  else
    build_spm(&v);
  for (uint32_t i = 0; i < extra && *off < size; ++i) {
    size_t len = data[(*off)++] % 9u;
    if (size - *off < len + 1) break;
    char piece[8];
    for (size_t j = 0; j < len; ++j) piece[j] = data[*off + j] ? (char)data[*off + j] : 1; /* strings without NUL */
    vb_add(&v, piece, len, (float)(int8_t)data[*off + len] / 8.0f, (int32_t)(data[*off + len] % 8));
    *off += len + 1;
  }
  /* Merges of pairs of existing tokens by index (their concatenation may be absent: refused). */
  uint32_t n_merges = bpe && *off < size ? data[(*off)++] % 8u : 0;
  for (uint32_t i = 0; i < n_merges && size - *off >= 2; ++i) {
    size_t x = data[*off] % v.n, y = data[*off + 1] % v.n;
    vb_merge(&v, v.tok[x], v.len[x], v.tok[y], v.len[y]);
    *off += 2;
  }
  size_t n = 0;
  uint8_t *d = vb_file(&v, bpe, k_pre[(kind / 2) % 6], &n);
  okv_status_code_t c;
  okv_tokenizer_t *t = load_file_bytes(d, n, a, &c);
  OKV_FUZZ_CHECK(c == OKV_STATUS_OK || c == OKV_STATUS_INVALID_ARGUMENT);
  free(d);
  vb_free(&v);
  return t;
}

int okv_fuzz_tokenizer_gguf(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const okv_allocator_t *alloc = okv_fuzz_allocator();
  uint8_t flags = data[0];
  size_t off = 1;
  okv_tokenizer_t *own = NULL, *t;
  bool roundtrip = true;
  if (flags & 32) {
    own = from_input(data, size, &off, alloc);
    if (!own) return 0;
    t = own;
    roundtrip = false;
  } else {
    init_fixed();
    int which = flags & 7;
    if (which == 7) which = (flags & 8) ? (g_fixed[8] ? 8 : 0) : (g_fixed[7] ? 7 : 6);
    t = g_fixed[which];
    /* A shared vocabulary may merge text such as "<0x41>" or "<s>" into a byte or control piece. */
    roundtrip = which < 7 || !memchr(data + off, '<', size - off);
  }
  bool bos = (flags & 16) != 0;
  size_t text_n = size - off;
  uint8_t *text = malloc(text_n ? text_n : 1); /* its own allocation: a read past the end is reported */
  OKV_FUZZ_CHECK(text != NULL);
  memcpy(text, data + off, text_n);
  bool valid = valid_utf8(text, text_n);
  uint32_t vocab = okv_tokenizer_vocab_size(t);

  /* The pre-tokenizer's pieces tile the text. */
  const char *pre = okv_tokenizer_pre_name(t);
  if (pre) {
    okv_pretok_t *p = NULL;
    OKV_FUZZ_CHECK(okv_fuzz_status(okv_pretok_create(pre, strlen(pre), alloc, &p)) == OKV_STATUS_OK);
    size_t *ends = malloc((text_n + 1) * sizeof *ends), k = 0;
    OKV_FUZZ_CHECK(ends != NULL);
    okv_status_code_t c = okv_fuzz_status(okv_pretok_split(p, (const char *)text, text_n, ends, text_n + 1, &k));
    OKV_FUZZ_CHECK(valid ? c == OKV_STATUS_OK : c == OKV_STATUS_INVALID_ARGUMENT);
    if (valid) {
      OKV_FUZZ_CHECK(k <= text_n && (k > 0) == (text_n > 0));
      for (size_t i = 0; i < k; ++i) OKV_FUZZ_CHECK(ends[i] > (i ? ends[i - 1] : 0));
      OKV_FUZZ_CHECK(k == 0 || ends[k - 1] == text_n);
    }
    free(ends);
    okv_pretok_free(p);
  }

  size_t cap = 2 * text_n + 4, n = SIZE_MAX;
  uint32_t *ids = malloc(cap * sizeof *ids);
  OKV_FUZZ_CHECK(ids != NULL);
  okv_status_code_t c = okv_fuzz_status(okv_tokenizer_encode(t, (const char *)text, text_n, bos, ids, cap, &n));
  if (!valid) {
    OKV_FUZZ_CHECK(c == OKV_STATUS_INVALID_ARGUMENT);
  } else if (c == OKV_STATUS_INVALID_ARGUMENT && !roundtrip) {
    /* A vocabulary from the input may lack a byte's token and an unknown token: refused text. */
  } else {
    OKV_FUZZ_CHECK(c == OKV_STATUS_OK);
    OKV_FUZZ_CHECK(n <= cap);
    for (size_t i = 0; i < n; ++i) OKV_FUZZ_CHECK(ids[i] < vocab);
    bool add_bos = bos && okv_tokenizer_adds_bos(t) && okv_tokenizer_bos_id(t) != OKV_TOKEN_NONE;
    bool add_eos = bos && okv_tokenizer_adds_eos(t) && okv_tokenizer_eos_id(t) != OKV_TOKEN_NONE;
    if (add_bos) OKV_FUZZ_CHECK(n >= 1 && ids[0] == okv_tokenizer_bos_id(t));
    if (add_eos) OKV_FUZZ_CHECK(n >= 1 && ids[n - 1] == okv_tokenizer_eos_id(t));
    OKV_FUZZ_CHECK(n >= (size_t)add_bos + (size_t)add_eos + (text_n > 0 ? 1 : 0));

    /* A retry with room for half: same count, same prefix. */
    size_t half = n / 2, n2 = SIZE_MAX;
    uint32_t *ids2 = malloc((half ? half : 1) * sizeof *ids2);
    OKV_FUZZ_CHECK(ids2 != NULL);
    c = okv_fuzz_status(okv_tokenizer_encode(t, (const char *)text, text_n, bos, half ? ids2 : NULL, half, &n2));
    OKV_FUZZ_CHECK(c == OKV_STATUS_OK && n2 == n);
    OKV_FUZZ_CHECK(half == 0 || memcmp(ids, ids2, half * sizeof *ids) == 0);
    free(ids2);

    /* decode(encode(x)) == x unless a control piece came out of the merges (between BOS and EOS). */
    bool control = false;
    for (size_t i = add_bos; i + add_eos < n; ++i) {
      const char *p;
      size_t pl;
      OKV_FUZZ_CHECK(okv_fuzz_status(okv_tokenizer_token_text(t, ids[i], &p, &pl)) == OKV_STATUS_OK);
      control |= ids[i] == okv_tokenizer_bos_id(t) || ids[i] == okv_tokenizer_eos_id(t);
    }
    size_t dcap = text_n + 1, dn = SIZE_MAX;
    char *back = malloc(dcap);
    OKV_FUZZ_CHECK(back != NULL);
    c = okv_fuzz_status(okv_tokenizer_decode(t, ids, n, back, dcap, &dn));
    OKV_FUZZ_CHECK(c == OKV_STATUS_OK);
    /* SentencePiece writes a space as U+2581: one in the text comes back as a space. */
    bool spm_marker = okv_tokenizer_kind(t) == OKV_TOKENIZER_SPM && memmem(text, text_n, "\xe2\x96\x81", 3);
    if (roundtrip && !control && !spm_marker) {
      OKV_FUZZ_CHECK(dn == text_n);
      OKV_FUZZ_CHECK(memcmp(back, text, text_n) == 0);
    }
    /* Every piece fits the documented bound. */
    for (size_t i = 0; i < n && i < 64; ++i) {
      size_t pcap = (size_t)okv_tokenizer_max_piece_bytes(t) + 1, nb = SIZE_MAX;
      char *piece = malloc(pcap);
      OKV_FUZZ_CHECK(piece != NULL);
      c = okv_fuzz_status(okv_tokenizer_piece(t, i ? ids[i - 1] : OKV_TOKEN_NONE, ids[i], piece, pcap, &nb));
      OKV_FUZZ_CHECK(c == OKV_STATUS_OK && nb < pcap && piece[nb] == '\0');
      free(piece);
    }
    free(back);
  }
  free(ids);
  free(text);
  okv_tokenizer_free(own);
  return 0;
}

#ifndef OKV_FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return okv_fuzz_tokenizer_gguf(data, size); }
#endif
