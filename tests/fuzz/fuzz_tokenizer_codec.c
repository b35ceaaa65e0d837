/* libFuzzer harness: tokenizer encode and decode of arbitrary bytes
 * (tools/model/tokenizer.c).
 *
 * Input: byte 0 = flags, then
 *   flags bit 0 clear: a fixed tokenizer: with flags bit 3 set and
 *     $OKV_FUZZ_TOKENIZER naming a llama2.c tokenizer file (e.g. the shared
 *     tok512.bin, read in place), that one; else one built in here
 *     (specials, 256 byte tokens, ASCII, a few multi-byte characters and
 *     English merges, ties and a duplicate);
 *   flags bit 0 set: a tokenizer built from the input: byte 1 = piece count
 *     (mod 48), then per piece a length byte (1 + len % 12), that many bytes
 *     (NUL replaced) and a score byte; the three specials come first and, if
 *     flags bit 2 is set, the 256 byte-fallback tokens (without them, byte
 *     fallback has no token to map to);
 *   flags bit 1: encode with BOS;
 *   then 2 bytes of text length, the text, and the rest as 16-bit token ids
 *   to decode (ids past the vocabulary included).
 * Checks: encode accepts exactly valid UTF-8 without NUL; the ids are in the
 * vocabulary; the count and a truncated retry agree; the ids equal those of
 * the straightforward quadratic algorithm of model.h (texts up to 512 bytes);
 * decoding the ids gives the text back (fixed tokenizer); pieces of arbitrary
 * ids fit exactly-sized buffers. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_common.h"
#include "tools/model/model.h"

/* A vocabulary as the harness knows it (for the reference encoder). */
typedef struct vocab_t {
  uint32_t n;
  uint32_t max_len;
  char **str;
  uint32_t *len;
  float *score;
} vocab_t;

static void vocab_free(vocab_t *v) {
  for (uint32_t i = 0; i < v->n; ++i) free(v->str[i]);
  free(v->str);
  free(v->len);
  free(v->score);
  memset(v, 0, sizeof *v);
}

static void vocab_add(vocab_t *v, const char *s, uint32_t len, float score) {
  v->str = realloc(v->str, (v->n + 1) * sizeof *v->str);
  v->len = realloc(v->len, (v->n + 1) * sizeof *v->len);
  v->score = realloc(v->score, (v->n + 1) * sizeof *v->score);
  OKV_FUZZ_CHECK(v->str && v->len && v->score);
  v->str[v->n] = malloc(len + 1);
  OKV_FUZZ_CHECK(v->str[v->n] != NULL);
  memcpy(v->str[v->n], s, len);
  v->str[v->n][len] = '\0';
  v->len[v->n] = len;
  v->score[v->n] = score;
  if (len > v->max_len) v->max_len = len;
  ++v->n;
}

/* The llama2.c file layout of v. */
static uint8_t *vocab_serialize(const vocab_t *v, size_t *out_n) {
  size_t n = 4;
  for (uint32_t i = 0; i < v->n; ++i) n += 8 + v->len[i];
  uint8_t *d = malloc(n), *p = d;
  OKV_FUZZ_CHECK(d != NULL);
  int32_t ml = (int32_t)(v->max_len ? v->max_len : 1);
  memcpy(p, &ml, 4);
  p += 4;
  for (uint32_t i = 0; i < v->n; ++i) {
    int32_t l = (int32_t)v->len[i];
    memcpy(p, &v->score[i], 4);
    memcpy(p + 4, &l, 4);
    memcpy(p + 8, v->str[i], v->len[i]);
    p += 8 + v->len[i];
  }
  *out_n = n;
  return d;
}

/* Parses a tokenizer file (already accepted by the loader). */
static bool vocab_parse(const uint8_t *d, size_t n, vocab_t *v) {
  memset(v, 0, sizeof *v);
  if (n < 4) return false;
  size_t off = 4;
  while (n - off >= 8) {
    float sc;
    memcpy(&sc, d + off, 4);
    int32_t len = (int32_t)okv_fuzz_le32(d + off + 4);
    if (len < 1 || (size_t)len > n - off - 8) break;
    vocab_add(v, (const char *)d + off + 8, (uint32_t)len, sc);
    off += 8 + (size_t)len;
  }
  return off == n && v->n > 0;
}

static void add_specials(vocab_t *v) {
  vocab_add(v, "<unk>", 5, 0.0f);
  vocab_add(v, "\n<s>\n", 5, 0.0f);
  vocab_add(v, "\n</s>\n", 6, 0.0f);
}

static void add_bytes(vocab_t *v) {
  for (int b = 0; b < 256; ++b) {
    char s[8];
    snprintf(s, sizeof s, "<0x%02X>", b);
    vocab_add(v, s, 6, 0.0f);
  }
}

static void build_fixed(vocab_t *v) {
  memset(v, 0, sizeof *v);
  add_specials(v);
  add_bytes(v);
  float sc = -1.0f;
  /* Single characters (no '<': a piece made of "<0x" could merge into a byte token's string). */
  for (int c = 0x20; c < 0x7f; ++c)
    if (c != '<') {
      char s[2] = {(char)c, 0};
      vocab_add(v, s, 1, sc);
      sc -= 0.01f;
    }
  static const char *const multi[] = {"\xc3\xa9", "\xe2\x9c\x93", "\xe2\x82\xac", "\xf0\x9f\x99\x82",
                                      "\xc3\xa9t\xc3\xa9"};
  for (size_t i = 0; i < sizeof multi / sizeof multi[0]; ++i) vocab_add(v, multi[i], (uint32_t)strlen(multi[i]), -0.5f);
  static const char *const merges[] = {
      " t", "he",  " a",  "in",           "th",   "er",    " the", "an",    "nd",    " s",
      "ou", "re",  " w",  "on",           " and", "ed",    "it",   " h",    "is",    "at",
      " b", "en",  " to", " o",           " th",  "ing",   "es",   "or",    " he",   " f",
      " c", "ll",  " wa", " was",         "ar",   " T",    " The", "  ",    "   ",   "    ",
      "e ", "ee",  "eee", "aaaa",         "aa",   " Once", "Once", " upon", " time", "\xc3\xa9\xc3\xa9",
      "..", "...", "!!",  " \xe2\x9c\x93"};
  float ms = 0.0f;
  for (size_t i = 0; i < sizeof merges / sizeof merges[0]; ++i) {
    vocab_add(v, merges[i], (uint32_t)strlen(merges[i]), ms);
    ms -= 0.25f;
  }
  /* Equal scores: ties must go to the first pair. */
  vocab_add(v, "ab", 2, -3.0f);
  vocab_add(v, "bc", 2, -3.0f);
  vocab_add(v, "abc", 3, -2.0f);
  /* A duplicate piece: lookups find the lowest id. */
  vocab_add(v, "he", 2, 5.0f);
}

/* The fixed tokenizers: [0] built in, [1] from $OKV_FUZZ_TOKENIZER (if it
 * names a loadable file). Loaded with the system allocator: they live for the
 * whole process. */
static vocab_t g_fixed[2];
static okv_tokenizer_t *g_fixed_tok[2];

static void init_fixed(void) {
  static bool done = false;
  if (done) return;
  done = true;
  build_fixed(&g_fixed[0]);
  size_t n = 0;
  uint8_t *d = vocab_serialize(&g_fixed[0], &n);
  okv_status_t s = okv_tokenizer_load_memory(d, n, "built-in", g_fixed[0].n, NULL, &g_fixed_tok[0]);
  free(d);
  OKV_FUZZ_CHECK(s == OKV_OK);
  const char *env = getenv("OKV_FUZZ_TOKENIZER");
  if (!env || !*env) return;
  FILE *f = fopen(env, "rb");
  static uint8_t buf[1 << 20];
  n = f ? fread(buf, 1, sizeof buf, f) : 0;
  if (f) fclose(f);
  if (n > 0 && n < sizeof buf && vocab_parse(buf, n, &g_fixed[1]) && g_fixed[1].n >= 259) {
    s = okv_tokenizer_load_memory(buf, n, env, g_fixed[1].n, NULL, &g_fixed_tok[1]);
    if (s == OKV_OK) return;
    okv_status_free(s);
  }
  vocab_free(&g_fixed[1]);
  fprintf(stderr, "okv-fuzz: $OKV_FUZZ_TOKENIZER '%s' is not a usable tokenizer (259+ tokens); not used\n", env);
}

/* Strict UTF-8 without NUL, as model.h specifies. Returns the length of the
 * character at s, 0 if invalid. */
static size_t ref_utf8(const uint8_t *s, size_t n) {
  uint8_t c = s[0];
  if (c == 0) return 0;
  if (c < 0x80) return 1;
  size_t len;
  uint32_t cp;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    cp = c & 0x07;
  } else
    return 0;
  if (n < len) return 0;
  for (size_t i = 1; i < len; ++i) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
  return len;
}

static int64_t ref_lookup(const vocab_t *v, const char *s, size_t n) {
  for (uint32_t i = 0; i < v->n; ++i)
    if (v->len[i] == n && memcmp(v->str[i], s, n) == 0) return i;
  return -1;
}

/* A byte's fallback token, or UNK when the vocabulary has no such id. */
static uint32_t ref_byte_token(const vocab_t *v, uint8_t b) {
  uint32_t id = (uint32_t)b + OKV_TOKEN_BYTE_BASE;
  return id < v->n ? id : OKV_TOKEN_UNK;
}

/* The quadratic algorithm of model.h; returns the count (without BOS). */
static size_t ref_encode(const vocab_t *v, const uint8_t *text, size_t n, uint32_t *tok) {
  size_t k = 0;
  if (n == 0) return 0;
  int64_t sp = ref_lookup(v, " ", 1);
  tok[k++] = sp >= 0 ? (uint32_t)sp : ref_byte_token(v, ' ');
  for (size_t i = 0; i < n;) {
    size_t l = ref_utf8(text + i, n - i);
    int64_t id = ref_lookup(v, (const char *)text + i, l);
    if (id >= 0) {
      tok[k++] = (uint32_t)id;
    } else {
      for (size_t j = 0; j < l; ++j) tok[k++] = ref_byte_token(v, text[i + j]);
    }
    i += l;
  }
  char *buf = malloc(2 * (size_t)v->max_len + 1);
  OKV_FUZZ_CHECK(buf != NULL);
  for (;;) {
    int64_t best = -1, best_id = -1;
    float best_score = 0.0f;
    for (size_t i = 0; i + 1 < k; ++i) {
      uint32_t la = v->len[tok[i]], lb = v->len[tok[i + 1]];
      memcpy(buf, v->str[tok[i]], la);
      memcpy(buf + la, v->str[tok[i + 1]], lb);
      int64_t id = ref_lookup(v, buf, la + lb);
      if (id >= 0 && (best < 0 || v->score[id] > best_score)) {
        best = (int64_t)i;
        best_id = id;
        best_score = v->score[id];
      }
    }
    if (best < 0) break;
    tok[best] = (uint32_t)best_id;
    memmove(tok + best + 1, tok + best + 2, (k - (size_t)best - 2) * sizeof *tok);
    --k;
  }
  free(buf);
  return k;
}

/* Decodes `token` after `prev` into a buffer of exactly `cap` bytes; appends
 * the bytes to out (if not NULL) and returns their count, or SIZE_MAX on a
 * (checked) capacity error. */
static size_t piece_into(const okv_tokenizer_t *t, uint32_t prev, uint32_t token, size_t cap, uint8_t *out) {
  char *buf = malloc(cap);
  OKV_FUZZ_CHECK(buf != NULL);
  size_t nb = (size_t)-1;
  okv_status_code_t c = okv_fuzz_status(okv_tokenizer_piece(t, prev, token, buf, cap, &nb));
  size_t r = SIZE_MAX;
  if (c == OKV_STATUS_OK) {
    OKV_FUZZ_CHECK(nb < cap && buf[nb] == '\0');
    if (token >= okv_tokenizer_vocab_size(t) || token <= OKV_TOKEN_EOS) OKV_FUZZ_CHECK(nb == 0);
    if (out) memcpy(out, buf, nb);
    r = nb;
  } else {
    OKV_FUZZ_CHECK(c == OKV_STATUS_INVALID_ARGUMENT);
  }
  free(buf);
  return r;
}

int okv_fuzz_tokenizer_codec(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const okv_allocator_t *alloc = okv_fuzz_allocator();
  uint8_t flags = data[0];
  size_t off = 1;
  vocab_t own = {0};
  const vocab_t *v;
  okv_tokenizer_t *t = NULL;
  bool roundtrip;
  if (flags & 1) {
    if (off >= size) return 0;
    uint32_t n_pieces = data[off++] % 48u;
    add_specials(&own);
    if (flags & 4) add_bytes(&own);
    for (uint32_t i = 0; i < n_pieces && off < size; ++i) {
      uint32_t len = 1u + data[off++] % 12u;
      if (size - off < (size_t)len + 1) break;
      char s[16];
      for (uint32_t j = 0; j < len; ++j) s[j] = data[off + j] ? (char)data[off + j] : 1;
      vocab_add(&own, s, len, (float)(int8_t)data[off + len] / 4.0f);
      off += len + 1;
    }
    size_t fn = 0;
    uint8_t *file = vocab_serialize(&own, &fn);
    okv_status_t s = okv_tokenizer_load_memory(file, fn, "fuzz", own.n, alloc, &t);
    free(file);
    OKV_FUZZ_CHECK(s == OKV_OK); /* a well-formed file */
    v = &own;
    roundtrip = false;
  } else {
    init_fixed();
    int which = (flags & 8) && g_fixed_tok[1] ? 1 : 0;
    v = &g_fixed[which];
    t = g_fixed_tok[which];
    /* Both have byte fallback for every byte and " ": decode(encode(x)) == x. */
    roundtrip = true;
  }
  bool bos = (flags & 2) != 0;

  size_t text_n = 0;
  if (size - off >= 2) {
    text_n = okv_fuzz_le16(data + off);
    off += 2;
  }
  if (text_n > size - off) text_n = size - off;
  /* The text in its own allocation so a read past its end is reported. */
  uint8_t *text = malloc(text_n ? text_n : 1);
  OKV_FUZZ_CHECK(text != NULL);
  memcpy(text, data + off, text_n);
  off += text_n;

  bool valid = true;
  for (size_t i = 0; i < text_n;) {
    size_t l = ref_utf8(text + i, text_n - i);
    if (!l) {
      valid = false;
      break;
    }
    i += l;
  }

  size_t cap = text_n + 2;
  uint32_t *ids = malloc(cap * sizeof *ids);
  OKV_FUZZ_CHECK(ids != NULL);
  size_t n = SIZE_MAX;
  okv_status_code_t c = okv_fuzz_status(okv_tokenizer_encode(t, (const char *)text, text_n, bos, ids, cap, &n));
  if (!valid) {
    OKV_FUZZ_CHECK(c == OKV_STATUS_INVALID_ARGUMENT);
  } else {
    OKV_FUZZ_CHECK(c == OKV_STATUS_OK);
    OKV_FUZZ_CHECK(n <= text_n + 1 + (bos ? 1 : 0));
    OKV_FUZZ_CHECK(n >= (size_t)(text_n ? 1 : 0) + (size_t)(bos ? 1 : 0));
    if (bos) OKV_FUZZ_CHECK(ids[0] == OKV_TOKEN_BOS);
    for (size_t i = bos ? 1 : 0; i < n; ++i) OKV_FUZZ_CHECK(ids[i] < v->n);

    /* A retry with room for half: same count, same prefix. */
    size_t half = n / 2, n2 = SIZE_MAX;
    uint32_t *ids2 = malloc((half ? half : 1) * sizeof *ids2);
    OKV_FUZZ_CHECK(ids2 != NULL);
    c = okv_fuzz_status(okv_tokenizer_encode(t, (const char *)text, text_n, bos, half ? ids2 : NULL, half, &n2));
    OKV_FUZZ_CHECK(c == OKV_STATUS_OK && n2 == n);
    OKV_FUZZ_CHECK(half == 0 || memcmp(ids, ids2, half * sizeof *ids) == 0);
    free(ids2);

    /* The reference algorithm. */
    if (text_n <= 512) {
      uint32_t *ref = malloc((text_n + 2) * sizeof *ref);
      OKV_FUZZ_CHECK(ref != NULL);
      size_t rn = ref_encode(v, text, text_n, ref);
      size_t skip = bos ? 1 : 0;
      OKV_FUZZ_CHECK(rn + skip == n);
      OKV_FUZZ_CHECK(memcmp(ref, ids + skip, rn * sizeof *ref) == 0);
      free(ref);
    }

    /* Decoding gives the text back: after BOS the dummy space is dropped;
     * without BOS it stays in front. */
    if (roundtrip) {
      uint8_t *back = malloc(text_n + 2 + (size_t)v->max_len * 2);
      OKV_FUZZ_CHECK(back != NULL);
      size_t w = 0;
      uint32_t prev = bos ? OKV_TOKEN_BOS : OKV_TOKEN_EOS;
      for (size_t i = bos ? 1 : 0; i < n; ++i) {
        OKV_FUZZ_CHECK(w <= text_n + 1);
        size_t nb = piece_into(t, prev, ids[i], (size_t)v->max_len + 1, back + w);
        OKV_FUZZ_CHECK(nb != SIZE_MAX);
        w += nb;
        prev = ids[i];
      }
      if (bos || text_n == 0) {
        OKV_FUZZ_CHECK(w == text_n && memcmp(back, text, text_n) == 0);
      } else {
        OKV_FUZZ_CHECK(w == text_n + 1 && back[0] == ' ' && memcmp(back + 1, text, text_n) == 0);
      }
      free(back);
    }
  }
  free(ids);
  free(text);

  /* Arbitrary ids: into small and large exact-size buffers. */
  uint32_t prev = data[0];
  for (size_t k = 0; size - off >= 2 && k < 256; ++k, off += 2) {
    uint32_t raw = okv_fuzz_le16(data + off);
    /* Mostly ids in (or just past) the vocabulary; bit 15 keeps the raw value. */
    uint32_t id = (raw & 0x8000) ? raw : (raw & 0xFFF) % (v->n + 4);
    size_t small = 1 + ((raw >> 12) & 7);
    piece_into(t, prev, id, small, NULL);
    size_t nb = piece_into(t, prev, id, (size_t)v->max_len + 1, NULL);
    OKV_FUZZ_CHECK(nb != SIZE_MAX);
    prev = id;
  }

  if (flags & 1) {
    okv_tokenizer_free(t);
    vocab_free(&own);
  }
  return 0;
}

#ifndef OKV_FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return okv_fuzz_tokenizer_codec(data, size); }
#endif
