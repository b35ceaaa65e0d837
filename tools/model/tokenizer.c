/* The llama2.c BPE tokenizer: load, encode (dummy prefix, code point lookup,
 * byte fallback, greedy highest-score merges) and decode pieces. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

typedef struct sorted_entry_t {
  const char *str;
  uint32_t len;
  uint32_t id;
} sorted_entry_t;

struct okv_tokenizer_t {
  okv_allocator_t allocator;
  uint32_t vocab_size;
  uint32_t max_token_length;
  char *blob;             /* every token's bytes, each NUL-terminated */
  const char **str;       /* [vocab] */
  uint32_t *len;          /* [vocab] */
  float *score;           /* [vocab] */
  sorted_entry_t *sorted; /* [vocab] by (bytes, id) */
};

static int entry_cmp(const void *a, const void *b) {
  const sorted_entry_t *x = a, *y = b;
  uint32_t n = x->len < y->len ? x->len : y->len;
  int c = memcmp(x->str, y->str, n);
  if (c) return c;
  if (x->len != y->len) return x->len < y->len ? -1 : 1;
  return x->id < y->id ? -1 : (x->id > y->id);
}

/* Lowest id whose bytes equal s[0..n), or -1. */
static int64_t lookup(const okv_tokenizer_t *t, const char *s, uint32_t n) {
  size_t lo = 0, hi = t->vocab_size;
  sorted_entry_t key = {s, n, 0};
  while (lo < hi) { /* first entry >= (s, id 0) */
    size_t mid = lo + (hi - lo) / 2;
    if (entry_cmp(&t->sorted[mid], &key) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < t->vocab_size && t->sorted[lo].len == n && memcmp(t->sorted[lo].str, s, n) == 0) return t->sorted[lo].id;
  return -1;
}

void okv_tokenizer_free(okv_tokenizer_t *t) {
  if (!t) return;
  okv_allocator_t a = t->allocator;
  if (t->blob) okv_free(&a, t->blob);
  if (t->str) okv_free(&a, (void *)t->str);
  if (t->len) okv_free(&a, t->len);
  if (t->score) okv_free(&a, t->score);
  if (t->sorted) okv_free(&a, t->sorted);
  okv_free(&a, t);
}

uint32_t okv_tokenizer_vocab_size(const okv_tokenizer_t *t) { return t ? t->vocab_size : 0; }

static int32_t le32(const unsigned char *p) {
  uint32_t u = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
  int32_t v;
  memcpy(&v, &u, 4);
  return v;
}

okv_status_t okv_tokenizer_load(const char *path, uint32_t vocab_size, const okv_allocator_t *allocator,
                                okv_tokenizer_t **out_tokenizer) {
  if (!path || !out_tokenizer || vocab_size == 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_tokenizer_load: NULL path/out_tokenizer or vocab_size 0");
  *out_tokenizer = NULL;
  okv_allocator_t alloc = allocator ? *allocator : okv_allocator_system();
  FILE *f = fopen(path, "rb");
  if (!f) {
    int e = errno;
    return okv_status_make(e == ENOENT ? OKV_STATUS_NOT_FOUND : OKV_STATUS_IO_ERROR, "tokenizer '%s': %s", path,
                           strerror(e));
  }
  okv_status_t st = OKV_OK;
  unsigned char *data = NULL;
  okv_tokenizer_t *t = NULL;
  long fsize = -1;
  if (fseek(f, 0, SEEK_END) == 0) fsize = ftell(f);
  if (fsize < 4 || fsize > (64L << 20) || fseek(f, 0, SEEK_SET) != 0) {
    st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "tokenizer '%s': bad file size %ld bytes", path, fsize);
    goto done;
  }
  data = okv_malloc(&alloc, (size_t)fsize);
  if (!data) {
    st = okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "tokenizer '%s': cannot allocate %ld bytes", path, fsize);
    goto done;
  }
  if (fread(data, 1, (size_t)fsize, f) != (size_t)fsize) {
    st = okv_status_make(OKV_STATUS_IO_ERROR, "tokenizer '%s': read failed", path);
    goto done;
  }
  int32_t max_len = le32(data);
  if (max_len < 1 || max_len > 4096) {
    st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "tokenizer '%s': max_token_length %d out of range [1, 4096]",
                         path, max_len);
    goto done;
  }
  /* First pass: validate and size. */
  size_t off = 4, blob_bytes = 0;
  for (uint32_t i = 0; i < vocab_size; ++i) {
    if (off + 8 > (size_t)fsize) {
      st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "tokenizer '%s': ends after %u tokens but the model's vocab_size is %u", path, i, vocab_size);
      goto done;
    }
    int32_t n = le32(data + off + 4);
    if (n < 1 || n > max_len) {
      st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "tokenizer '%s': token %u has length %d (max_token_length %d)",
                           path, i, n, max_len);
      goto done;
    }
    if (off + 8 + (size_t)n > (size_t)fsize) {
      st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "tokenizer '%s': ends inside token %u but the model's vocab_size is %u", path, i, vocab_size);
      goto done;
    }
    if (memchr(data + off + 8, 0, (size_t)n)) {
      st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "tokenizer '%s': token %u contains a NUL byte", path, i);
      goto done;
    }
    off += 8 + (size_t)n;
    blob_bytes += (size_t)n + 1;
  }
  if (off != (size_t)fsize) {
    st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                         "tokenizer '%s': %ld trailing bytes after %u tokens: it does not match the model's vocab_size %u",
                         path, fsize - (long)off, vocab_size, vocab_size);
    goto done;
  }
  t = okv_calloc(&alloc, 1, sizeof *t);
  if (!t) {
    st = okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "tokenizer '%s': out of memory", path);
    goto done;
  }
  t->allocator = alloc;
  t->vocab_size = vocab_size;
  t->max_token_length = (uint32_t)max_len;
  t->blob = okv_malloc(&alloc, blob_bytes);
  t->str = okv_calloc(&alloc, vocab_size, sizeof *t->str);
  t->len = okv_calloc(&alloc, vocab_size, sizeof *t->len);
  t->score = okv_calloc(&alloc, vocab_size, sizeof *t->score);
  t->sorted = okv_calloc(&alloc, vocab_size, sizeof *t->sorted);
  if (!t->blob || !t->str || !t->len || !t->score || !t->sorted) {
    st = okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "tokenizer '%s': out of memory", path);
    goto done;
  }
  off = 4;
  size_t boff = 0;
  for (uint32_t i = 0; i < vocab_size; ++i) {
    float sc;
    memcpy(&sc, data + off, 4);
    if (!isfinite(sc)) {
      st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "tokenizer '%s': token %u has a non-finite score", path, i);
      goto done;
    }
    uint32_t n = (uint32_t)le32(data + off + 4);
    memcpy(t->blob + boff, data + off + 8, n);
    t->blob[boff + n] = '\0';
    t->str[i] = t->blob + boff;
    t->len[i] = n;
    t->score[i] = sc;
    t->sorted[i] = (sorted_entry_t){t->str[i], n, i};
    boff += n + 1;
    off += 8 + n;
  }
  qsort(t->sorted, vocab_size, sizeof *t->sorted, entry_cmp);
done:
  fclose(f);
  if (data) okv_free(&alloc, data);
  if (st) {
    okv_tokenizer_free(t);
    return st;
  }
  *out_tokenizer = t;
  return OKV_OK;
}

/* Length of the UTF-8 sequence at s (n bytes available), or 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  size_t len;
  uint32_t cp;
  if (c < 0x80) return c ? 1 : 0;
  if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
  else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
  else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
  else return 0;
  if (len > n) return 0;
  for (size_t i = 1; i < len; ++i) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

okv_status_t okv_tokenizer_encode(const okv_tokenizer_t *t, const char *text, size_t n_bytes, bool bos,
                                  uint32_t *out_tokens, size_t capacity, size_t *out_n_tokens) {
  if (!t || (!text && n_bytes) || !out_n_tokens || (!out_tokens && capacity))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_tokenizer_encode: NULL argument");
  const unsigned char *s = (const unsigned char *)text;
  for (size_t i = 0; i < n_bytes;) {
    size_t l = utf8_len(s + i, n_bytes - i);
    if (!l)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "text is not valid UTF-8 (or has a NUL byte) at byte %zu", i);
    i += l;
  }
  size_t max_tokens = n_bytes + 2;
  const okv_allocator_t *a = &t->allocator;
  uint32_t *tok = okv_malloc(a, max_tokens * sizeof *tok);
  int64_t *pair_id = okv_malloc(a, max_tokens * sizeof *pair_id);
  float *pair_score = okv_malloc(a, max_tokens * sizeof *pair_score);
  char *buf = okv_malloc(a, 2 * (size_t)t->max_token_length + 8);
  okv_status_t st = OKV_OK;
  if (!tok || !pair_id || !pair_score || !buf) {
    st = okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_tokenizer_encode: out of memory for %zu bytes of text", n_bytes);
    goto done;
  }
  size_t n = 0;
  if (n_bytes > 0) {
    int64_t sp = lookup(t, " ", 1);
    tok[n++] = sp >= 0 ? (uint32_t)sp : ' ' + OKV_TOKEN_BYTE_BASE;
  }
  for (size_t i = 0; i < n_bytes;) {
    size_t l = utf8_len(s + i, n_bytes - i);
    int64_t id = lookup(t, text + i, (uint32_t)l);
    if (id >= 0) {
      tok[n++] = (uint32_t)id;
    } else {
      for (size_t j = 0; j < l; ++j) tok[n++] = (uint32_t)s[i + j] + OKV_TOKEN_BYTE_BASE;
    }
    i += l;
  }
  /* Pair table: pair i = (tok[i], tok[i+1]). */
#define OKV_PAIR_EVAL(i)                                                                    \
  do {                                                                                      \
    uint32_t la = t->len[tok[i]], lb = t->len[tok[(i) + 1]];                                \
    memcpy(buf, t->str[tok[i]], la);                                                        \
    memcpy(buf + la, t->str[tok[(i) + 1]], lb);                                             \
    pair_id[i] = (la + lb <= t->max_token_length) ? lookup(t, buf, la + lb) : -1;           \
    pair_score[i] = pair_id[i] >= 0 ? t->score[pair_id[i]] : 0.0f;                          \
  } while (0)
  for (size_t i = 0; i + 1 < n; ++i) OKV_PAIR_EVAL(i);
  for (;;) {
    int64_t best = -1;
    float best_score = 0.0f;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (pair_id[i] >= 0 && (best < 0 || pair_score[i] > best_score)) {
        best = (int64_t)i;
        best_score = pair_score[i];
      }
    }
    if (best < 0) break;
    size_t b = (size_t)best;
    tok[b] = (uint32_t)pair_id[b];
    memmove(tok + b + 1, tok + b + 2, (n - b - 2) * sizeof *tok);
    memmove(pair_id + b + 1, pair_id + b + 2, (n - b - 2) * sizeof *pair_id);
    memmove(pair_score + b + 1, pair_score + b + 2, (n - b - 2) * sizeof *pair_score);
    --n;
    if (b > 0) OKV_PAIR_EVAL(b - 1);
    if (b + 1 < n) OKV_PAIR_EVAL(b);
  }
#undef OKV_PAIR_EVAL
  size_t total = n + (bos ? 1 : 0);
  *out_n_tokens = total;
  size_t w = 0;
  if (bos && w < capacity) out_tokens[w++] = OKV_TOKEN_BOS;
  for (size_t i = 0; i < n && w < capacity; ++i) out_tokens[w++] = tok[i];
done:
  if (tok) okv_free(a, tok);
  if (pair_id) okv_free(a, pair_id);
  if (pair_score) okv_free(a, pair_score);
  if (buf) okv_free(a, buf);
  return st;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

okv_status_t okv_tokenizer_piece(const okv_tokenizer_t *t, uint32_t prev_token, uint32_t token, char *out_piece,
                                 size_t capacity, size_t *out_n_bytes) {
  if (!t || !out_piece || !out_n_bytes || capacity == 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_tokenizer_piece: NULL argument or capacity 0");
  out_piece[0] = '\0';
  *out_n_bytes = 0;
  if (token >= t->vocab_size || token <= OKV_TOKEN_EOS) return OKV_OK;
  const char *p = t->str[token];
  size_t n = t->len[token];
  if (n == 6 && p[0] == '<' && p[1] == '0' && p[2] == 'x' && p[5] == '>' && hexval(p[3]) >= 0 && hexval(p[4]) >= 0) {
    if (capacity < 2) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_tokenizer_piece: capacity %zu < 2", capacity);
    out_piece[0] = (char)(hexval(p[3]) * 16 + hexval(p[4]));
    out_piece[1] = '\0';
    *out_n_bytes = 1;
    return OKV_OK;
  }
  if (prev_token == OKV_TOKEN_BOS && n > 0 && p[0] == ' ') {
    ++p;
    --n;
  }
  if (n + 1 > capacity)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_tokenizer_piece: token %u needs %zu bytes, capacity %zu",
                           token, n + 1, capacity);
  memcpy(out_piece, p, n);
  out_piece[n] = '\0';
  *out_n_bytes = n;
  return OKV_OK;
}
