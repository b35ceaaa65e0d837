/* The llama2.c BPE tokenizer: load, encode (dummy prefix, code point lookup,
 * byte fallback, greedy highest-score merges) and decode pieces; and the
 * handle every tokenizer kind shares (tokenizer_internal.h: the GGUF kinds of
 * tokenizer_gguf.c plug in their operations). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"
#include "model/tokenizer_internal.h"

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
  /* Another kind: its operations and state (NULL for a llama2.c file). */
  const okv_tokenizer_ops_t *ops;
  void *impl;
  okv_tokenizer_info_t info;
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
  if (t->ops) t->ops->destroy(t->impl);
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

/* Largest tokenizer file accepted (tok32000.bin is 424 KiB). */
#define OKV_TOKENIZER_MAX_BYTES ((size_t)64 << 20)

/* Parses a whole tokenizer file held in data[0..size). */
static okv_status_t parse_tokenizer(const char *name, const unsigned char *data, size_t size, uint32_t vocab_size,
                                    const okv_allocator_t *allocator, okv_tokenizer_t **out_tokenizer) {
  okv_allocator_t alloc = allocator ? *allocator : okv_allocator_system();
  if (size < 4 || size > OKV_TOKENIZER_MAX_BYTES)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "tokenizer '%s': bad file size %zu bytes (expected 4 to %zu)",
                           name, size, OKV_TOKENIZER_MAX_BYTES);
  int32_t max_len = le32(data);
  if (max_len < 1 || max_len > 4096)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "tokenizer '%s': max_token_length %d out of range [1, 4096]",
                           name, max_len);
  /* First pass: validate and size. Every record takes at least 9 bytes, so
   * the arrays allocated below are bounded by the file size. */
  size_t off = 4, blob_bytes = 0;
  for (uint32_t i = 0; i < vocab_size; ++i) {
    if (size - off < 8)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "tokenizer '%s': ends after %u tokens but the model's vocab_size is %u", name, i,
                             vocab_size);
    int32_t n = le32(data + off + 4);
    if (n < 1 || n > max_len)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "tokenizer '%s': token %u has length %d (max_token_length %d)", name, i, n, max_len);
    if ((size_t)n > size - off - 8)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "tokenizer '%s': ends inside token %u but the model's vocab_size is %u", name, i,
                             vocab_size);
    if (memchr(data + off + 8, 0, (size_t)n))
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "tokenizer '%s': token %u contains a NUL byte", name, i);
    float sc;
    memcpy(&sc, data + off, 4);
    if (!isfinite(sc))
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "tokenizer '%s': token %u has a non-finite score", name, i);
    off += 8 + (size_t)n;
    blob_bytes += (size_t)n + 1;
  }
  if (off != size)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "tokenizer '%s': %zu trailing bytes after %u tokens: it does not match the model's "
                           "vocab_size %u",
                           name, size - off, vocab_size, vocab_size);
  okv_tokenizer_t *t = okv_calloc(&alloc, 1, sizeof *t);
  if (!t) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "tokenizer '%s': out of memory", name);
  t->allocator = alloc;
  t->vocab_size = vocab_size;
  t->max_token_length = (uint32_t)max_len;
  t->info = (okv_tokenizer_info_t){
      OKV_TOKENIZER_LLAMA2C, vocab_size, (uint32_t)max_len, OKV_TOKEN_BOS, OKV_TOKEN_EOS, true, false, NULL};
  t->blob = okv_malloc(&alloc, blob_bytes);
  t->str = okv_calloc(&alloc, vocab_size, sizeof *t->str);
  t->len = okv_calloc(&alloc, vocab_size, sizeof *t->len);
  t->score = okv_calloc(&alloc, vocab_size, sizeof *t->score);
  t->sorted = okv_calloc(&alloc, vocab_size, sizeof *t->sorted);
  if (!t->blob || !t->str || !t->len || !t->score || !t->sorted) {
    okv_tokenizer_free(t);
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "tokenizer '%s': out of memory", name);
  }
  off = 4;
  size_t boff = 0;
  for (uint32_t i = 0; i < vocab_size; ++i) {
    float sc;
    memcpy(&sc, data + off, 4);
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
  *out_tokenizer = t;
  return OKV_OK;
}

okv_status_t okv_tokenizer_load_memory(const void *data, size_t n_bytes, const char *name, uint32_t vocab_size,
                                       const okv_allocator_t *allocator, okv_tokenizer_t **out_tokenizer) {
  if (out_tokenizer) *out_tokenizer = NULL;
  if ((!data && n_bytes) || !out_tokenizer || vocab_size == 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "okv_tokenizer_load_memory: NULL data/out_tokenizer or vocab_size 0");
  return parse_tokenizer(name ? name : "<memory>", data, n_bytes, vocab_size, allocator, out_tokenizer);
}

okv_status_t okv_tokenizer_load(const char *path, uint32_t vocab_size, const okv_allocator_t *allocator,
                                okv_tokenizer_t **out_tokenizer) {
  if (out_tokenizer) *out_tokenizer = NULL;
  if (!path || !out_tokenizer || vocab_size == 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_tokenizer_load: NULL path/out_tokenizer or vocab_size 0");
  okv_allocator_t alloc = allocator ? *allocator : okv_allocator_system();
  FILE *f = NULL;
  OKV_RETURN_IF_ERROR(okv_model_open_file("tokenizer", path, &f));
  okv_status_t st = OKV_OK;
  unsigned char *data = NULL;
  long fsize = -1;
  if (fseek(f, 0, SEEK_END) == 0) fsize = ftell(f);
  /* The size is checked before the buffer is allocated. */
  if (fsize < 4 || (unsigned long)fsize > OKV_TOKENIZER_MAX_BYTES || fseek(f, 0, SEEK_SET) != 0) {
    st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "tokenizer '%s': bad file size %ld bytes (expected 4 to %zu)",
                         path, fsize, OKV_TOKENIZER_MAX_BYTES);
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
  st = parse_tokenizer(path, data, (size_t)fsize, vocab_size, &alloc, out_tokenizer);
done:
  fclose(f);
  if (data) okv_free(&alloc, data);
  return st;
}

/* Length of the UTF-8 sequence at s (n bytes available), or 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  size_t len;
  uint32_t cp;
  if (c < 0x80) return c ? 1 : 0;
  if ((c & 0xE0) == 0xC0) {
    len = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4;
    cp = c & 0x07;
  } else
    return 0;
  if (len > n) return 0;
  for (size_t i = 1; i < len; ++i) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

/* The merge phase of encode in O(n log n): the tokens form a linked list
 * (a merge keeps the left node and unlinks the right one, so list order is
 * node-index order) and the nodes whose pair (node, next) merges into a token
 * sit in an indexed binary heap ordered by that token's score, highest first,
 * ties to the lower node index: exactly the pair the quadratic scan of
 * llama2.c picks (the highest score, the first such pair on ties). After a
 * merge only the pairs of the merged node and of its predecessor change. */
#define OKV_NIL UINT32_MAX

typedef struct merge_state_t {
  const okv_tokenizer_t *t;
  uint32_t *tok;  /* [nodes] token of each node */
  uint32_t *prev; /* [nodes] linked list of the nodes still present */
  uint32_t *next;
  int32_t *pair_id;   /* [nodes] token (node, next) merges into, -1 if none */
  float *pair_score;  /* [nodes] its score */
  uint32_t *heap;     /* nodes with pair_id >= 0 */
  uint32_t *heap_pos; /* [nodes] position in heap, OKV_NIL if absent */
  uint32_t heap_n;
  char *buf; /* 2 * max_token_length bytes */
} merge_state_t;

static bool merge_before(const merge_state_t *m, uint32_t a, uint32_t b) {
  if (m->pair_score[a] != m->pair_score[b]) return m->pair_score[a] > m->pair_score[b];
  return a < b;
}

static void heap_place(merge_state_t *m, uint32_t i, uint32_t node) {
  m->heap[i] = node;
  m->heap_pos[node] = i;
}

static void heap_sift_up(merge_state_t *m, uint32_t i) {
  uint32_t node = m->heap[i];
  while (i > 0) {
    uint32_t parent = (i - 1) / 2;
    if (!merge_before(m, node, m->heap[parent])) break;
    heap_place(m, i, m->heap[parent]);
    i = parent;
  }
  heap_place(m, i, node);
}

static void heap_sift_down(merge_state_t *m, uint32_t i) {
  uint32_t node = m->heap[i];
  for (;;) {
    uint32_t c = 2 * i + 1;
    if (c >= m->heap_n) break;
    if (c + 1 < m->heap_n && merge_before(m, m->heap[c + 1], m->heap[c])) ++c;
    if (!merge_before(m, m->heap[c], node)) break;
    heap_place(m, i, m->heap[c]);
    i = c;
  }
  heap_place(m, i, node);
}

static void heap_remove(merge_state_t *m, uint32_t node) {
  uint32_t i = m->heap_pos[node];
  if (i == OKV_NIL) return;
  m->heap_pos[node] = OKV_NIL;
  uint32_t last = m->heap[--m->heap_n];
  if (i == m->heap_n) return;
  heap_place(m, i, last);
  heap_sift_up(m, i);
  heap_sift_down(m, m->heap_pos[last]);
}

/* Recomputes the pair (node, next[node]) and its place in the heap. */
static void merge_eval(merge_state_t *m, uint32_t node) {
  const okv_tokenizer_t *t = m->t;
  uint32_t r = m->next[node];
  int64_t id = -1;
  if (r != OKV_NIL) {
    uint32_t la = t->len[m->tok[node]], lb = t->len[m->tok[r]];
    if (la + lb <= t->max_token_length) {
      memcpy(m->buf, t->str[m->tok[node]], la);
      memcpy(m->buf + la, t->str[m->tok[r]], lb);
      id = lookup(t, m->buf, la + lb);
    }
  }
  m->pair_id[node] = (int32_t)id;
  m->pair_score[node] = id >= 0 ? t->score[id] : 0.0f;
  if (id < 0) {
    heap_remove(m, node);
  } else if (m->heap_pos[node] == OKV_NIL) {
    uint32_t i = m->heap_n++;
    heap_place(m, i, node);
    heap_sift_up(m, i);
  } else {
    heap_sift_up(m, m->heap_pos[node]);
    heap_sift_down(m, m->heap_pos[node]);
  }
}

/* The byte-fallback token of byte b; UNK when the vocabulary is too small to
 * have byte tokens (ids 3..258). */
static uint32_t byte_token(const okv_tokenizer_t *t, unsigned char b) {
  uint32_t id = (uint32_t)b + OKV_TOKEN_BYTE_BASE;
  return id < t->vocab_size ? id : OKV_TOKEN_UNK;
}

okv_status_t okv_tokenizer_encode(const okv_tokenizer_t *t, const char *text, size_t n_bytes, bool bos,
                                  uint32_t *out_tokens, size_t capacity, size_t *out_n_tokens) {
  if (!t || (!text && n_bytes) || !out_n_tokens || (!out_tokens && capacity))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_tokenizer_encode: NULL argument");
  if (t->ops) return t->ops->encode(t->impl, text, n_bytes, bos, out_tokens, capacity, out_n_tokens);
  /* Node indices are 32-bit: one node per byte plus the dummy prefix. */
  if (n_bytes >= OKV_NIL - 2)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_tokenizer_encode: text of %zu bytes is too long", n_bytes);
  const unsigned char *s = (const unsigned char *)text;
  for (size_t i = 0; i < n_bytes;) {
    size_t l = utf8_len(s + i, n_bytes - i);
    if (!l)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "text is not valid UTF-8 (or has a NUL byte) at byte %zu", i);
    i += l;
  }
  size_t max_nodes = n_bytes + 1;
  const okv_allocator_t *a = &t->allocator;
  merge_state_t m = {0};
  m.t = t;
  m.tok = okv_malloc(a, max_nodes * sizeof *m.tok);
  m.prev = okv_malloc(a, max_nodes * sizeof *m.prev);
  m.next = okv_malloc(a, max_nodes * sizeof *m.next);
  m.pair_id = okv_malloc(a, max_nodes * sizeof *m.pair_id);
  m.pair_score = okv_malloc(a, max_nodes * sizeof *m.pair_score);
  m.heap = okv_malloc(a, max_nodes * sizeof *m.heap);
  m.heap_pos = okv_malloc(a, max_nodes * sizeof *m.heap_pos);
  m.buf = okv_malloc(a, 2 * (size_t)t->max_token_length);
  okv_status_t st = OKV_OK;
  if (!m.tok || !m.prev || !m.next || !m.pair_id || !m.pair_score || !m.heap || !m.heap_pos || !m.buf) {
    st =
        okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_tokenizer_encode: out of memory for %zu bytes of text", n_bytes);
    goto done;
  }
  uint32_t n = 0;
  if (n_bytes > 0) {
    int64_t sp = lookup(t, " ", 1);
    m.tok[n++] = sp >= 0 ? (uint32_t)sp : byte_token(t, ' ');
  }
  for (size_t i = 0; i < n_bytes;) {
    size_t l = utf8_len(s + i, n_bytes - i);
    int64_t id = lookup(t, text + i, (uint32_t)l);
    if (id >= 0) {
      m.tok[n++] = (uint32_t)id;
    } else {
      for (size_t j = 0; j < l; ++j) m.tok[n++] = byte_token(t, s[i + j]);
    }
    i += l;
  }
  for (uint32_t i = 0; i < n; ++i) {
    m.prev[i] = i > 0 ? i - 1 : OKV_NIL;
    m.next[i] = i + 1 < n ? i + 1 : OKV_NIL;
    m.heap_pos[i] = OKV_NIL;
  }
  for (uint32_t i = 0; i < n; ++i) merge_eval(&m, i);
  size_t count = n;
  while (m.heap_n > 0) {
    uint32_t left = m.heap[0], right = m.next[left];
    m.tok[left] = (uint32_t)m.pair_id[left];
    heap_remove(&m, right);
    m.next[left] = m.next[right];
    if (m.next[right] != OKV_NIL) m.prev[m.next[right]] = left;
    --count;
    merge_eval(&m, left);
    if (m.prev[left] != OKV_NIL) merge_eval(&m, m.prev[left]);
  }
  size_t total = count + (bos ? 1 : 0);
  *out_n_tokens = total;
  size_t w = 0;
  if (bos && w < capacity) out_tokens[w++] = OKV_TOKEN_BOS;
  for (uint32_t node = n > 0 ? 0 : OKV_NIL; node != OKV_NIL && w < capacity; node = m.next[node])
    out_tokens[w++] = m.tok[node];
done:
  okv_free(a, m.tok);
  okv_free(a, m.prev);
  okv_free(a, m.next);
  okv_free(a, m.pair_id);
  okv_free(a, m.pair_score);
  okv_free(a, m.heap);
  okv_free(a, m.heap_pos);
  okv_free(a, m.buf);
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
  if (t->ops) return t->ops->piece(t->impl, prev_token, token, out_piece, capacity, out_n_bytes);
  if (token >= t->vocab_size || token <= OKV_TOKEN_EOS) return OKV_OK;
  const char *p = t->str[token];
  size_t n = t->len[token];
  if (n == 6 && p[0] == '<' && p[1] == '0' && p[2] == 'x' && p[5] == '>' && hexval(p[3]) >= 0 && hexval(p[4]) >= 0) {
    if (capacity < 2)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_tokenizer_piece: capacity %zu < 2", capacity);
    out_piece[0] = (char)(hexval(p[3]) * 16 + hexval(p[4]));
    out_piece[1] = '\0';
    *out_n_bytes = 1;
    return OKV_OK;
  }
  if ((prev_token == OKV_TOKEN_BOS || prev_token == OKV_TOKEN_NONE) && n > 0 && p[0] == ' ') {
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

/* ---- The handle shared by every kind ---- */

okv_status_t okv_tokenizer_create_kind(const okv_tokenizer_info_t *info, const okv_tokenizer_ops_t *ops, void *impl,
                                       const okv_allocator_t *allocator, okv_tokenizer_t **out) {
  okv_allocator_t alloc = allocator ? *allocator : okv_allocator_system();
  *out = NULL;
  okv_tokenizer_t *t = okv_calloc(&alloc, 1, sizeof *t);
  if (!t) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "tokenizer: out of memory");
  t->allocator = alloc;
  t->vocab_size = info->vocab_size;
  t->max_token_length = info->max_piece_bytes;
  t->ops = ops;
  t->impl = impl;
  t->info = *info;
  *out = t;
  return OKV_OK;
}

okv_tokenizer_kind_t okv_tokenizer_kind(const okv_tokenizer_t *t) { return t ? t->info.kind : OKV_TOKENIZER_LLAMA2C; }

const char *okv_tokenizer_kind_name(okv_tokenizer_kind_t kind) {
  switch (kind) {
    case OKV_TOKENIZER_LLAMA2C: return "llama2.c";
    case OKV_TOKENIZER_SPM: return "llama (SentencePiece)";
    case OKV_TOKENIZER_BPE: return "gpt2 (byte-level BPE)";
  }
  return "unknown";
}

const char *okv_tokenizer_pre_name(const okv_tokenizer_t *t) { return t ? t->info.pre_name : NULL; }
uint32_t okv_tokenizer_bos_id(const okv_tokenizer_t *t) { return t ? t->info.bos_id : OKV_TOKEN_NONE; }
uint32_t okv_tokenizer_eos_id(const okv_tokenizer_t *t) { return t ? t->info.eos_id : OKV_TOKEN_NONE; }
bool okv_tokenizer_adds_bos(const okv_tokenizer_t *t) { return t && t->info.add_bos; }
bool okv_tokenizer_adds_eos(const okv_tokenizer_t *t) { return t && t->info.add_eos; }
size_t okv_tokenizer_strip_added_eos(const okv_tokenizer_t *t, const uint32_t *ids, size_t n) {
  return t && ids && n > 0 && t->info.add_eos && ids[n - 1] == t->info.eos_id ? n - 1 : n;
}
uint32_t okv_tokenizer_max_piece_bytes(const okv_tokenizer_t *t) { return t ? t->info.max_piece_bytes : 0; }

okv_status_t okv_tokenizer_token_text(const okv_tokenizer_t *t, uint32_t token, const char **out_ptr, size_t *out_len) {
  if (!t || !out_ptr || !out_len)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_tokenizer_token_text: NULL argument");
  if (token >= t->vocab_size)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "token %u is past the vocabulary (%u tokens)", token,
                           t->vocab_size);
  if (t->ops) {
    t->ops->token_text(t->impl, token, out_ptr, out_len);
  } else {
    *out_ptr = t->str[token];
    *out_len = t->len[token];
  }
  return OKV_OK;
}

okv_status_t okv_tokenizer_decode(const okv_tokenizer_t *t, const uint32_t *ids, size_t n, char *out, size_t capacity,
                                  size_t *out_n_bytes) {
  if (!t || (!ids && n) || (!out && capacity) || !out_n_bytes)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_tokenizer_decode: NULL argument");
  /* A decoded piece is never longer than the vocabulary's spelling of it. */
  size_t cap = (size_t)t->info.max_piece_bytes + 1;
  char *buf = okv_malloc(&t->allocator, cap);
  if (!buf) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_tokenizer_decode: out of memory");
  size_t w = 0;
  uint32_t prev = t->ops ? OKV_TOKEN_NONE : OKV_TOKEN_BOS;
  okv_status_t st = OKV_OK;
  for (size_t i = 0; i < n; ++i) {
    size_t nb = 0;
    st = okv_tokenizer_piece(t, prev, ids[i], buf, cap, &nb);
    if (st) break;
    if (w < capacity) memcpy(out + w, buf, nb < capacity - w ? nb : capacity - w);
    w += nb;
    prev = ids[i];
  }
  okv_free(&t->allocator, buf);
  if (st) return st;
  if (w < capacity) out[w] = '\0';
  *out_n_bytes = w;
  return OKV_OK;
}
