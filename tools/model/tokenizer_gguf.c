/* Tokenizers from GGUF metadata (tokenizer_gguf.h): SentencePiece-style
 * ("llama") and byte-level BPE ("gpt2") vocabularies, their pre-tokenizers
 * (PCRE2), encode, pieces. The handle is tokenizer.c's (tokenizer_internal.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "model/tokenizer_internal.h"

/* GGUF token types (tokenizer.ggml.token_type). */
enum {
  TT_UNDEFINED = 0,
  TT_NORMAL = 1,
  TT_UNKNOWN = 2,
  TT_CONTROL = 3,
  TT_USER = 4,
  TT_UNUSED = 5,
  TT_BYTE = 6,
};

/* Limits: more tokens or merges than any vocabulary has; texts whose node
 * indices fit 32 bits. */
#define MAX_TOKENS     ((uint64_t)1 << 24)
#define MAX_MERGES     ((uint64_t)1 << 26)
#define MAX_TEXT_BYTES ((size_t)UINT32_MAX / 4)
#define NIL            UINT32_MAX

/* ---- Small helpers ---- */

/* Up to 60 bytes of s, non-printable bytes as '?', for one-line messages. */
static const char *printable(const char *s, size_t n, char *buf, size_t cap) {
  size_t k = 0;
  for (size_t i = 0; i < n && k + 4 < cap && i < 60; ++i) {
    unsigned char c = (unsigned char)s[i];
    buf[k++] = (c >= 0x20 && c != 0x7f) ? (char)c : '?';
  }
  if (n > 60 && k + 4 < cap) {
    memcpy(buf + k, "...", 3);
    k += 3;
  }
  buf[k] = '\0';
  return buf;
}

/* Length of the UTF-8 character at s (n bytes available): 1-4, or 0 when it
 * is not a valid, shortest-form scalar value or is NUL. */
static size_t utf8_char(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  size_t len;
  uint32_t cp;
  if (c < 0x80) return c ? 1 : 0;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
    cp = c & 0x1Fu;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    cp = c & 0x0Fu;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    cp = c & 0x07u;
  } else {
    return 0;
  }
  if (len > n) return 0;
  for (size_t i = 1; i < len; ++i) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3Fu);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
  return len;
}

static okv_status_t check_text(const char *text, size_t n) {
  if (n > MAX_TEXT_BYTES)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "text of %zu bytes is too long (at most %zu)", n,
                           MAX_TEXT_BYTES);
  const unsigned char *s = (const unsigned char *)text;
  for (size_t i = 0; i < n;) {
    size_t l = utf8_char(s + i, n - i);
    if (!l)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "text is not valid UTF-8 (or has a NUL byte) at byte %zu", i);
    i += l;
  }
  return OKV_OK;
}

/* Lead-byte length of the (already validated) UTF-8 character at s. */
static size_t utf8_lead_len(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, then a final mix */
  for (size_t i = 0; i < n; ++i) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ull;
  return h ^ (h >> 32);
}

static uint64_t hash_u64(uint64_t x) { /* splitmix64's finaliser */
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* ---- Pre-tokenizers ---- */

/* \s as the Unicode White_Space property (the reference's and Oniguruma's),
 * not PCRE2's UCP \s (which lacks U+0085). */
#define WS_LATIN1      "\\t-\\r\\x{20}\\x{85}\\x{A0}"
#define WS_OTHER       "\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define WS             WS_LATIN1 WS_OTHER
#define S              "[" WS "]"
#define NS             "[^" WS "]"
#define CONTRACTIONS   "'s|'t|'re|'ve|'m|'ll|'d"
#define RX_GPT2        CONTRACTIONS "| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|" S "+(?!" NS ")|" S "+"
#define RX_LLAMA3_HEAD "(?i:" CONTRACTIONS ")|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
#define RX_LLAMA3_TAIL "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|" S "*[\\r\\n]+|" S "+(?!" NS ")|" S "+"
/* The cased letters of DeepSeek LLM's published pattern, as code point ranges. */
#define DS_LETTERS                                                                                                     \
  "A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}"     \
  "\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}"       \
  "\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"         \
  "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}" \
  "\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}"  \
  "\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}"  \
  "\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}"  \
  "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}"   \
  "\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}"   \
  "\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}"  \
  "\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}" \
  "\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}"          \
  "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}"
#define DS_PUNCT \
  "\\x{21}-\\x{2F}\\x{3A}-\\x{7E}\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}"
#define DS_CJK "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

#define MAX_RX 6
/* deepseek-llm's "\s+$" is written (?<!\s)\s+$: the same leftmost match (a
 * piece's trailing spaces start after a non-space), without trying every
 * start inside a long run of spaces that ends before the end (quadratic). */

typedef struct pretok_rule_t {
  const char *name;
  const char *aliases[3];
  uint32_t n_rx;
  const char *rx[MAX_RX];
} pretok_rule_t;

static const pretok_rule_t k_rules[] = {
    {"gpt-2", {"default", NULL, NULL}, 1, {RX_GPT2}},
    {"llama-bpe", {"llama3", "llama-v3", NULL}, 1, {RX_LLAMA3_HEAD "\\p{N}{1,3}" RX_LLAMA3_TAIL}},
    {"qwen2", {NULL, NULL, NULL}, 1, {RX_LLAMA3_HEAD "\\p{N}" RX_LLAMA3_TAIL}},
    {"smollm", {NULL, NULL, NULL}, 2, {"\\p{N}", RX_GPT2}},
    {"deepseek-llm",
     {NULL, NULL, NULL},
     6,
     {"[\\r\\n]", S "?[" DS_LETTERS "]+", S "?[" DS_PUNCT "]+", "(?<!" S ")" S "+$", DS_CJK, "\\p{N}+"}},
    {"deepseek-coder", {NULL, NULL, NULL}, 5, {"[\\r\\n]", S "?\\p{L}+", S "?\\p{P}+", DS_CJK, "\\p{N}"}},
};
#define N_RULES (sizeof k_rules / sizeof k_rules[0])

struct okv_pretok_t {
  okv_allocator_t alloc;
  const pretok_rule_t *rule;
  pcre2_general_context *gctx;
  pcre2_match_context *mctx;
  pcre2_code *rx[MAX_RX];
};

/* PCRE2's memory through the caller's allocator (leaks show in tests). */
static void *pcre_malloc(PCRE2_SIZE n, void *self) { return okv_malloc((const okv_allocator_t *)self, n); }
static void pcre_free(void *p, void *self) {
  if (p) okv_free((const okv_allocator_t *)self, p);
}

void okv_pretok_free(okv_pretok_t *p) {
  if (!p) return;
  okv_allocator_t a = p->alloc;
  for (uint32_t i = 0; i < MAX_RX; ++i) pcre2_code_free(p->rx[i]);
  pcre2_match_context_free(p->mctx);
  pcre2_general_context_free(p->gctx);
  okv_free(&a, p);
}

const char *okv_pretok_name(const okv_pretok_t *p) { return p ? p->rule->name : NULL; }

static const pretok_rule_t *find_rule(const char *name, size_t n) {
  for (size_t r = 0; r < N_RULES; ++r) {
    if (strlen(k_rules[r].name) == n && memcmp(k_rules[r].name, name, n) == 0) return &k_rules[r];
    for (int k = 0; k < 3 && k_rules[r].aliases[k]; ++k)
      if (strlen(k_rules[r].aliases[k]) == n && memcmp(k_rules[r].aliases[k], name, n) == 0) return &k_rules[r];
  }
  return NULL;
}

okv_status_t okv_pretok_create(const char *name, size_t name_len, const okv_allocator_t *allocator,
                               okv_pretok_t **out) {
  if (out) *out = NULL;
  if ((!name && name_len) || !out)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_pretok_create: NULL argument");
  const pretok_rule_t *rule = find_rule(name, name_len);
  if (!rule) {
    char buf[80];
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "unknown pre-tokenizer '%s' (known: gpt-2, llama-bpe, qwen2, smollm, deepseek-llm, "
                           "deepseek-coder; default)",
                           printable(name, name_len, buf, sizeof buf));
  }
  okv_allocator_t alloc = allocator ? *allocator : okv_allocator_system();
  okv_pretok_t *p = okv_calloc(&alloc, 1, sizeof *p);
  if (!p) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "pre-tokenizer: out of memory");
  p->alloc = alloc;
  p->rule = rule;
  p->gctx = pcre2_general_context_create(pcre_malloc, pcre_free, &p->alloc);
  p->mctx = p->gctx ? pcre2_match_context_create(p->gctx) : NULL;
  if (!p->mctx) {
    okv_pretok_free(p);
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "pre-tokenizer: out of memory");
  }
  /* One match may scan a whole run of spaces several times: no match limit
   * short of the text's size. */
  pcre2_set_match_limit(p->mctx, UINT32_MAX);
  pcre2_set_depth_limit(p->mctx, UINT32_MAX);
  pcre2_compile_context *cctx = pcre2_compile_context_create(p->gctx);
  if (!cctx) {
    okv_pretok_free(p);
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "pre-tokenizer: out of memory");
  }
  for (uint32_t i = 0; i < rule->n_rx; ++i) {
    int err = 0;
    PCRE2_SIZE at = 0;
    p->rx[i] = pcre2_compile((PCRE2_SPTR)rule->rx[i], PCRE2_ZERO_TERMINATED,
                             PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_NO_UTF_CHECK, &err, &at, cctx);
    if (!p->rx[i]) {
      PCRE2_UCHAR msg[160];
      pcre2_get_error_message(err, msg, sizeof msg);
      pcre2_compile_context_free(cctx);
      okv_status_t st = okv_status_make(OKV_STATUS_INTERNAL, "pre-tokenizer '%s': pattern %u: %s at offset %zu",
                                        rule->name, i, (const char *)msg, (size_t)at);
      okv_pretok_free(p);
      return st;
    }
    /* JIT when the platform has it; the interpreter otherwise (same results). */
    (void)pcre2_jit_compile(p->rx[i], PCRE2_JIT_COMPLETE);
  }
  pcre2_compile_context_free(cctx);
  *out = p;
  return OKV_OK;
}

/* Splits text[0..n) (valid UTF-8) by the rule's patterns in turn. ends and
 * tmp hold at least n entries each; returns the piece count in *out_n, the
 * ends in `ends`. */
static okv_status_t pretok_run(const okv_pretok_t *p, const char *text, size_t n, size_t *ends, size_t *tmp,
                               size_t *out_n) {
  *out_n = 0;
  if (n == 0) return OKV_OK;
  pcre2_match_data *md = pcre2_match_data_create(4, p->gctx);
  if (!md) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "pre-tokenizer: out of memory");
  size_t *cur = ends, *nxt = tmp;
  size_t k = 1;
  cur[0] = n;
  okv_status_t st = OKV_OK;
  for (uint32_t r = 0; r < p->rule->n_rx && !st; ++r) {
    size_t m = 0, ps = 0;
    for (size_t i = 0; i < k && !st; ps = cur[i++]) {
      size_t pe = cur[i], gap = ps, pos = ps;
      while (pos < pe) {
        int rc = pcre2_match(p->rx[r], (PCRE2_SPTR)(text + ps), pe - ps, pos - ps, PCRE2_NO_UTF_CHECK, md, p->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR msg[160];
          pcre2_get_error_message(rc, msg, sizeof msg);
          st = okv_status_make(OKV_STATUS_INTERNAL, "pre-tokenizer '%s': matching at byte %zu failed: %s",
                               p->rule->name, pos, (const char *)msg);
          break;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ps + ov[0], me = ps + ov[1];
        if (ms >= pe) break;
        if (me <= ms) { /* an empty match cuts nothing: search on from the next character */
          pos = ms + utf8_lead_len((unsigned char)text[ms]);
          continue;
        }
        if (ms > gap) nxt[m++] = ms;
        nxt[m++] = me;
        gap = pos = me;
      }
      if (gap < pe) nxt[m++] = pe;
    }
    size_t *sw = cur;
    cur = nxt;
    nxt = sw;
    k = m;
  }
  pcre2_match_data_free(md);
  if (st) return st;
  if (cur != ends) memcpy(ends, cur, k * sizeof *ends);
  *out_n = k;
  return OKV_OK;
}

okv_status_t okv_pretok_split(const okv_pretok_t *p, const char *text, size_t n, size_t *out_ends, size_t capacity,
                              size_t *out_n) {
  if (!p || (!text && n) || (!out_ends && capacity) || !out_n)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_pretok_split: NULL argument");
  OKV_RETURN_IF_ERROR(check_text(text, n));
  size_t *buf = okv_malloc(&p->alloc, 2 * (n ? n : 1) * sizeof *buf);
  if (!buf) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "pre-tokenizer: out of memory for %zu bytes", n);
  size_t k = 0;
  okv_status_t st = pretok_run(p, text, n, buf, buf + n, &k);
  if (!st) {
    if (k && capacity) memcpy(out_ends, buf, (k < capacity ? k : capacity) * sizeof *buf);
    *out_n = k;
  }
  okv_free(&p->alloc, buf);
  return st;
}

/* ---- The vocabulary ---- */

typedef struct merge_slot_t {
  uint64_t key; /* left id << 32 | right id; EMPTY_KEY when free */
  uint32_t rank;
  uint32_t result;
} merge_slot_t;
#define EMPTY_KEY UINT64_MAX

typedef struct gtok_t {
  okv_allocator_t alloc;
  okv_tokenizer_kind_t kind;
  uint32_t n;      /* tokens */
  char *blob;      /* every token's bytes, each followed by a NUL */
  size_t *off;     /* [n] into blob */
  uint32_t *len;   /* [n] */
  float *score;    /* [n] */
  uint8_t *type;   /* [n] */
  uint32_t *slots; /* open-addressing table of ids + 1 by bytes (0 = free) */
  uint32_t mask;   /* slot count - 1 */
  merge_slot_t *merges;
  uint32_t merge_mask;
  uint32_t n_merges;
  uint32_t *user; /* user-defined ids, longest first */
  uint32_t n_user;
  uint32_t bos, eos, unk;
  bool add_bos, add_eos, add_space_prefix, ignore_merges;
  uint32_t byte_tok[256]; /* SPM: byte-fallback token; BPE: the token of the byte's code point; NIL if none */
  uint16_t byte_cp[256];  /* BPE: GPT-2's code point of each byte */
  int16_t cp_byte[324];   /* BPE: the byte of code point cp (< 324), -1 */
  okv_pretok_t *pre;
  uint32_t max_len;
} gtok_t;

static const char *tok_str(const gtok_t *g, uint32_t id) { return g->blob + g->off[id]; }

/* The id whose bytes are s[0..n), or NIL. */
static uint32_t vocab_find(const gtok_t *g, const char *s, size_t n) {
  for (uint64_t i = hash_bytes(s, n) & g->mask;; i = (i + 1) & g->mask) {
    uint32_t v = g->slots[i];
    if (!v) return NIL;
    uint32_t id = v - 1;
    if (g->len[id] == n && memcmp(tok_str(g, id), s, n) == 0) return id;
  }
}

/* Inserts id; an earlier id with the same bytes is replaced (the later wins). */
static void vocab_insert(gtok_t *g, uint32_t id) {
  const char *s = tok_str(g, id);
  size_t n = g->len[id];
  for (uint64_t i = hash_bytes(s, n) & g->mask;; i = (i + 1) & g->mask) {
    uint32_t v = g->slots[i];
    if (!v || (g->len[v - 1] == n && memcmp(tok_str(g, v - 1), s, n) == 0)) {
      g->slots[i] = id + 1;
      return;
    }
  }
}

static const merge_slot_t *merge_find(const gtok_t *g, uint32_t a, uint32_t b) {
  uint64_t key = ((uint64_t)a << 32) | b;
  for (uint64_t i = hash_u64(key) & g->merge_mask;; i = (i + 1) & g->merge_mask) {
    const merge_slot_t *s = &g->merges[i];
    if (s->key == EMPTY_KEY) return NULL;
    if (s->key == key) return s;
  }
}

/* Inserts a merge unless the pair is there already (the first rank wins). */
static void merge_insert(gtok_t *g, uint32_t a, uint32_t b, uint32_t rank, uint32_t result) {
  uint64_t key = ((uint64_t)a << 32) | b;
  for (uint64_t i = hash_u64(key) & g->merge_mask;; i = (i + 1) & g->merge_mask) {
    merge_slot_t *s = &g->merges[i];
    if (s->key == key) return;
    if (s->key == EMPTY_KEY) {
      *s = (merge_slot_t){key, rank, result};
      return;
    }
  }
}

static void gtok_destroy(void *impl) {
  gtok_t *g = impl;
  if (!g) return;
  okv_allocator_t a = g->alloc;
  okv_free(&a, g->blob);
  okv_free(&a, g->off);
  okv_free(&a, g->len);
  okv_free(&a, g->score);
  okv_free(&a, g->type);
  okv_free(&a, g->slots);
  okv_free(&a, g->merges);
  okv_free(&a, g->user);
  okv_pretok_free(g->pre);
  okv_free(&a, g);
}

/* ---- Encoding: merges over a linked list of symbols with an indexed heap ----
 *
 * Symbols (nodes) form a linked list; every node whose pair (node, next)
 * merges sits in a binary heap ordered by the merge's key (SPM: the merged
 * piece's score, highest first; BPE: the merge's rank), then by node index: the pair the
 * reference's priority queue pops (it discards stale pairs; here a merge
 * re-evaluates the two pairs it changes). A merge keeps the left node. */

typedef struct merger_t {
  const gtok_t *g;
  const char *buf; /* SPM: the escaped text the nodes' byte ranges index */
  uint32_t *tok;   /* [nodes] token id (NIL: not a token) */
  uint32_t *off;   /* [nodes] SPM byte range */
  uint32_t *len;
  uint32_t *prev, *next;
  uint32_t *pair; /* [nodes] the token (node, next) merges into, NIL if none */
  uint64_t *heap; /* merge key << 32 | node: one compare orders by key, then node */
  uint32_t *pos;  /* [nodes] place in heap, NIL if absent */
  uint32_t heap_n;
} merger_t;

/* A score as an unsigned key that sorts the highest score first. */
static uint32_t score_key(float score) {
  uint32_t u;
  if (score == 0.0f) score = 0.0f; /* -0 and +0 tie */
  memcpy(&u, &score, 4);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* ascending with the score */
  return ~u;
}

static void heap_set(merger_t *m, uint32_t i, uint64_t e) {
  m->heap[i] = e;
  m->pos[(uint32_t)e] = i;
}

static void sift_up(merger_t *m, uint32_t i) {
  uint64_t e = m->heap[i];
  while (i > 0) {
    uint32_t parent = (i - 1) / 2;
    if (m->heap[parent] <= e) break;
    heap_set(m, i, m->heap[parent]);
    i = parent;
  }
  heap_set(m, i, e);
}

static void sift_down(merger_t *m, uint32_t i) {
  uint64_t e = m->heap[i];
  for (;;) {
    uint32_t c = 2 * i + 1;
    if (c >= m->heap_n) break;
    if (c + 1 < m->heap_n && m->heap[c + 1] < m->heap[c]) ++c;
    if (m->heap[c] >= e) break;
    heap_set(m, i, m->heap[c]);
    i = c;
  }
  heap_set(m, i, e);
}

static void heap_drop(merger_t *m, uint32_t node) {
  uint32_t i = m->pos[node];
  if (i == NIL) return;
  m->pos[node] = NIL;
  uint64_t last = m->heap[--m->heap_n];
  if (i == m->heap_n) return;
  heap_set(m, i, last);
  sift_up(m, i);
  sift_down(m, m->pos[(uint32_t)last]);
}

/* The pair (node, next[node]): sets pair[node], returns its key (valid when
 * pair[node] != NIL). */
static uint32_t pair_find(merger_t *m, uint32_t node) {
  const gtok_t *g = m->g;
  uint32_t r = m->next[node], id = NIL, key = 0;
  if (r != NIL) {
    if (g->kind == OKV_TOKENIZER_SPM) {
      id = vocab_find(g, m->buf + m->off[node], (size_t)m->len[node] + m->len[r]);
      if (id != NIL) key = score_key(g->score[id]);
    } else if (m->tok[node] != NIL && m->tok[r] != NIL) {
      const merge_slot_t *s = merge_find(g, m->tok[node], m->tok[r]);
      if (s) {
        id = s->result;
        key = s->rank;
      }
    }
  }
  m->pair[node] = id;
  return key;
}

/* Recomputes the pair (node, next[node]) and its place in the heap. */
static void pair_eval(merger_t *m, uint32_t node) {
  uint64_t e = ((uint64_t)pair_find(m, node) << 32) | node;
  if (m->pair[node] == NIL) {
    heap_drop(m, node);
  } else if (m->pos[node] == NIL) {
    uint32_t i = m->heap_n++;
    heap_set(m, i, e);
    sift_up(m, i);
  } else {
    uint32_t i = m->pos[node];
    heap_set(m, i, e);
    sift_up(m, i);
    sift_down(m, m->pos[node]);
  }
}

/* Merges until no pair merges; nodes 0..n-1 must be set up (tok, off, len). */
static void merge_all(merger_t *m, uint32_t n) {
  m->heap_n = 0;
  for (uint32_t i = 0; i < n; ++i) {
    m->prev[i] = i > 0 ? i - 1 : NIL;
    m->next[i] = i + 1 < n ? i + 1 : NIL;
    m->pos[i] = NIL;
  }
  /* The initial pairs, heapified bottom-up (linear). */
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t key = pair_find(m, i);
    if (m->pair[i] != NIL) heap_set(m, m->heap_n++, ((uint64_t)key << 32) | i);
  }
  for (uint32_t i = m->heap_n / 2; i-- > 0;) sift_down(m, i);
  while (m->heap_n > 0) {
    uint32_t left = (uint32_t)m->heap[0], right = m->next[left];
    m->tok[left] = m->pair[left];
    m->len[left] += m->len[right];
    heap_drop(m, right);
    m->next[left] = m->next[right];
    if (m->next[right] != NIL) m->prev[m->next[right]] = left;
    pair_eval(m, left);
    if (m->prev[left] != NIL) pair_eval(m, m->prev[left]);
  }
}

static void merger_free(merger_t *m, const okv_allocator_t *a) {
  okv_free(a, m->tok);
  okv_free(a, m->off);
  okv_free(a, m->len);
  okv_free(a, m->prev);
  okv_free(a, m->next);
  okv_free(a, m->pair);
  okv_free(a, m->heap);
  okv_free(a, m->pos);
}

static bool merger_alloc(merger_t *m, const gtok_t *g, size_t nodes) {
  const okv_allocator_t *a = &g->alloc;
  memset(m, 0, sizeof *m);
  m->g = g;
  if (!nodes) nodes = 1;
  m->tok = okv_malloc(a, nodes * sizeof *m->tok);
  m->off = okv_malloc(a, nodes * sizeof *m->off);
  m->len = okv_malloc(a, nodes * sizeof *m->len);
  m->prev = okv_malloc(a, nodes * sizeof *m->prev);
  m->next = okv_malloc(a, nodes * sizeof *m->next);
  m->pair = okv_malloc(a, nodes * sizeof *m->pair);
  m->heap = okv_malloc(a, nodes * sizeof *m->heap);
  m->pos = okv_malloc(a, nodes * sizeof *m->pos);
  return m->tok && m->off && m->len && m->prev && m->next && m->pair && m->heap && m->pos;
}

/* Ids written so far; counts past capacity too. */
typedef struct sink_t {
  uint32_t *out;
  size_t cap, n;
} sink_t;

static void emit(sink_t *s, uint32_t id) {
  if (s->n < s->cap) s->out[s->n] = id;
  ++s->n;
}

/* The text split at user-defined pieces: raw stretches (tok NIL) and pieces. */
typedef struct frag_t {
  size_t start, len;
  uint32_t tok;
} frag_t;

/* Splits text[0..n) at every user-defined piece, the longest pieces first
 * (each splits the raw stretches the longer ones left, leftmost occurrence
 * first). *out is allocated (2n + 1 entries at most); *out_n fragments. */
static okv_status_t partition(const gtok_t *g, const char *text, size_t n, frag_t **out, size_t *out_n) {
  size_t cap = 2 * n + 1;
  frag_t *cur = okv_malloc(&g->alloc, cap * sizeof *cur), *nxt = okv_malloc(&g->alloc, cap * sizeof *nxt);
  if (!cur || !nxt) {
    okv_free(&g->alloc, cur);
    okv_free(&g->alloc, nxt);
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "tokenizer: out of memory for %zu bytes of text", n);
  }
  size_t k = 0;
  if (n) cur[k++] = (frag_t){0, n, NIL};
  for (uint32_t u = 0; u < g->n_user; ++u) {
    uint32_t id = g->user[u];
    const char *ps = tok_str(g, id);
    size_t pl = g->len[id], m = 0;
    for (size_t i = 0; i < k; ++i) {
      frag_t f = cur[i];
      if (f.tok != NIL || f.len < pl) {
        nxt[m++] = f;
        continue;
      }
      size_t at = f.start, end = f.start + f.len;
      for (;;) {
        const char *hit = end - at >= pl ? memmem(text + at, end - at, ps, pl) : NULL;
        if (!hit) break;
        size_t h = (size_t)(hit - text);
        if (h > at) nxt[m++] = (frag_t){at, h - at, NIL};
        nxt[m++] = (frag_t){h, pl, id};
        at = h + pl;
      }
      if (at < end) nxt[m++] = (frag_t){at, end - at, NIL};
    }
    frag_t *sw = cur;
    cur = nxt;
    nxt = sw;
    k = m;
  }
  okv_free(&g->alloc, nxt);
  *out = cur;
  *out_n = k;
  return OKV_OK;
}

/* ---- SentencePiece-style ---- */

/* One raw stretch: optional dummy-prefix space, spaces as U+2581, merges,
 * byte fallback. esc holds 3 * (n + 1) bytes. */
static okv_status_t spm_stretch(const gtok_t *g, merger_t *m, char *esc, const char *s, size_t n, bool prefix,
                                sink_t *out) {
  size_t e = 0;
  if (prefix) {
    memcpy(esc, "\xe2\x96\x81", 3);
    e = 3;
  }
  for (size_t i = 0; i < n; ++i) {
    if (s[i] == ' ') {
      memcpy(esc + e, "\xe2\x96\x81", 3);
      e += 3;
    } else {
      esc[e++] = s[i];
    }
  }
  m->buf = esc;
  uint32_t k = 0;
  for (size_t i = 0; i < e; i += utf8_lead_len((unsigned char)esc[i])) {
    m->off[k] = (uint32_t)i;
    m->len[k] = (uint32_t)utf8_lead_len((unsigned char)esc[i]);
    m->tok[k] = NIL;
    ++k;
  }
  merge_all(m, k);
  for (uint32_t node = k ? 0 : NIL; node != NIL; node = m->next[node]) {
    uint32_t id = m->tok[node] != NIL ? m->tok[node] : vocab_find(g, esc + m->off[node], m->len[node]);
    if (id != NIL) {
      emit(out, id);
      continue;
    }
    for (uint32_t j = 0; j < m->len[node]; ++j) {
      unsigned char b = (unsigned char)esc[m->off[node] + j];
      uint32_t bt = g->byte_tok[b];
      if (bt == NIL)
        return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                               "tokenizer: byte 0x%02X has no token (no <0x%02X> piece, no unknown token)", b, b);
      emit(out, bt);
    }
  }
  return OKV_OK;
}

/* ---- Byte-level BPE ---- */

/* One pre-tokenized piece. mapped holds 2 * n bytes. */
static okv_status_t bpe_piece(const gtok_t *g, merger_t *m, char *mapped, const unsigned char *s, size_t n,
                              sink_t *out) {
  if (g->ignore_merges) {
    size_t e = 0;
    for (size_t i = 0; i < n; ++i) {
      uint16_t cp = g->byte_cp[s[i]];
      if (cp < 0x80) {
        mapped[e++] = (char)cp;
      } else {
        mapped[e++] = (char)(0xC0 | (cp >> 6));
        mapped[e++] = (char)(0x80 | (cp & 0x3F));
      }
    }
    uint32_t id = vocab_find(g, mapped, e);
    if (id != NIL) {
      emit(out, id);
      return OKV_OK;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    m->tok[i] = g->byte_tok[s[i]];
    m->len[i] = 1;
  }
  merge_all(m, (uint32_t)n);
  for (uint32_t node = n ? 0 : NIL; node != NIL; node = m->next[node]) {
    if (m->tok[node] != NIL) {
      emit(out, m->tok[node]);
    } else if (g->unk != NIL) {
      emit(out, g->unk);
    } else {
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "tokenizer: byte 0x%02X has no token (and no unknown token)",
                             (unsigned)s[node]);
    }
  }
  return OKV_OK;
}

static okv_status_t gtok_encode(const void *impl, const char *text, size_t n, bool bos, uint32_t *out_tokens,
                                size_t capacity, size_t *out_n_tokens) {
  const gtok_t *g = impl;
  OKV_RETURN_IF_ERROR(check_text(text, n));
  const okv_allocator_t *a = &g->alloc;
  sink_t out = {out_tokens, capacity, 0};
  if (bos && g->add_bos && g->bos != NIL) emit(&out, g->bos);
  frag_t *frags = NULL;
  size_t n_frags = 0;
  OKV_RETURN_IF_ERROR(partition(g, text, n, &frags, &n_frags));
  merger_t m;
  bool spm = g->kind == OKV_TOKENIZER_SPM;
  /* SPM: one node per byte of the escaped text (a space becomes 3 bytes but
   * one node); BPE: one per byte of a piece. */
  char *scratch = okv_malloc(a, spm ? 3 * (n + 1) : 2 * n + 1);
  size_t *ends = spm ? NULL : okv_malloc(a, 2 * (n ? n : 1) * sizeof *ends);
  okv_status_t st = OKV_OK;
  if (!merger_alloc(&m, g, n + 1) || !scratch || (!spm && !ends)) {
    st = okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "tokenizer: out of memory for %zu bytes of text", n);
    goto done;
  }
  bool after_special = true;
  for (size_t f = 0; f < n_frags && !st; ++f) {
    const frag_t *fr = &frags[f];
    if (fr->tok != NIL) {
      emit(&out, fr->tok);
      after_special = true;
      continue;
    }
    if (spm) {
      st = spm_stretch(g, &m, scratch, text + fr->start, fr->len, g->add_space_prefix && after_special, &out);
    } else {
      size_t k = 0;
      st = pretok_run(g->pre, text + fr->start, fr->len, ends, ends + n, &k);
      for (size_t i = 0, ps = 0; i < k && !st; ps = ends[i++])
        st = bpe_piece(g, &m, scratch, (const unsigned char *)text + fr->start + ps, ends[i] - ps, &out);
    }
    after_special = false;
  }
  if (!st && bos && g->add_eos && g->eos != NIL) emit(&out, g->eos);
  if (!st) *out_n_tokens = out.n;
done:
  merger_free(&m, a);
  okv_free(a, scratch);
  okv_free(a, ends);
  okv_free(a, frags);
  return st;
}

/* ---- Decoding ---- */

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/* The byte a "<0xNN>" piece stands for, or -1. */
static int byte_piece(const char *p, size_t n) {
  if (n != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>') return -1;
  int hi = hexval(p[3]), lo = hexval(p[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static okv_status_t gtok_piece(const void *impl, uint32_t prev, uint32_t token, char *out, size_t cap, size_t *out_n) {
  const gtok_t *g = impl;
  if (token >= g->n || token == g->bos || token == g->eos) return OKV_OK;
  uint8_t type = g->type[token];
  if (type == TT_CONTROL || type == TT_UNKNOWN || type == TT_UNUSED) return OKV_OK;
  const char *p = tok_str(g, token);
  size_t n = g->len[token], w = 0;
  char one = 0;
  const char *src = p;
  size_t src_n = n;
  if (type == TT_BYTE && byte_piece(p, n) >= 0) { /* SPM byte fallback */
    one = (char)byte_piece(p, n);
    src = &one;
    src_n = 1;
  } else if (type != TT_USER && g->kind == OKV_TOKENIZER_BPE) {
    /* GPT-2 code points back to bytes (a code point outside the map stays as it is). */
    if (cap < n + 1)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "okv_tokenizer_piece: token %u needs up to %zu bytes, capacity %zu", token, n + 1, cap);
    for (size_t i = 0; i < n;) {
      size_t l = utf8_char((const unsigned char *)p + i, n - i);
      if (l == 0) l = 1;
      uint32_t cp = 0;
      if (l == 1) {
        cp = (unsigned char)p[i];
      } else if (l == 2) {
        cp = ((uint32_t)(p[i] & 0x1F) << 6) | (uint32_t)(p[i + 1] & 0x3F);
      } else {
        cp = 0xFFFFFFFFu;
      }
      if (cp < 324 && g->cp_byte[cp] >= 0) {
        out[w++] = (char)g->cp_byte[cp];
      } else {
        memcpy(out + w, p + i, l);
        w += l;
      }
      i += l;
    }
    out[w] = '\0';
    *out_n = w;
    return OKV_OK;
  } else if (type != TT_USER) { /* SPM: U+2581 is a space; the dummy prefix goes at the start */
    if (cap < n + 1)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "okv_tokenizer_piece: token %u needs up to %zu bytes, capacity %zu", token, n + 1, cap);
    /* The first piece of a text, or after a special piece (where encode put a dummy prefix). */
    bool first = prev == OKV_TOKEN_NONE || prev == g->bos ||
                 (prev < g->n && (g->type[prev] == TT_USER || g->type[prev] == TT_CONTROL));
    size_t i = 0;
    if (first && g->add_space_prefix && n >= 3 && memcmp(p, "\xe2\x96\x81", 3) == 0) i = 3;
    for (; i < n; ++i) {
      if (i + 3 <= n && memcmp(p + i, "\xe2\x96\x81", 3) == 0) {
        out[w++] = ' ';
        i += 2;
      } else {
        out[w++] = p[i];
      }
    }
    out[w] = '\0';
    *out_n = w;
    return OKV_OK;
  }
  if (cap < src_n + 1)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_tokenizer_piece: token %u needs %zu bytes, capacity %zu",
                           token, src_n + 1, cap);
  memcpy(out, src, src_n);
  out[src_n] = '\0';
  *out_n = src_n;
  return OKV_OK;
}

static void gtok_token_text(const void *impl, uint32_t token, const char **out, size_t *out_len) {
  const gtok_t *g = impl;
  *out = tok_str(g, token);
  *out_len = g->len[token];
}

static const okv_tokenizer_ops_t k_gtok_ops = {gtok_encode, gtok_piece, gtok_token_text, gtok_destroy};

/* ---- Loading ---- */

#define KEY(k) "tokenizer.ggml." k

/* Reads an optional id key: *out = dflt when absent; NIL (4294967295) means none. */
static okv_status_t read_id(const okv_gguf_t *f, const char *key, uint32_t n, uint32_t dflt, uint32_t *out) {
  uint32_t v = 0;
  okv_status_t s = okv_gguf_get_u32(f, key, &v);
  if (okv_status_code(s) == OKV_STATUS_NOT_FOUND) {
    okv_status_free(s);
    *out = dflt < n ? dflt : NIL;
    return OKV_OK;
  }
  OKV_RETURN_IF_ERROR(s);
  if (v != NIL && v >= n)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "%s %u is past the vocabulary (%u tokens)", key, v, n);
  *out = v;
  return OKV_OK;
}

static okv_status_t read_bool(const okv_gguf_t *f, const char *key, bool dflt, bool *out) {
  okv_status_t s = okv_gguf_get_bool(f, key, out);
  if (okv_status_code(s) == OKV_STATUS_NOT_FOUND) {
    okv_status_free(s);
    *out = dflt;
    return OKV_OK;
  }
  return s;
}

/* An optional per-token array: OKV_OK with *out_n = UINT64_MAX when absent. */
static okv_status_t read_arr(const okv_gguf_t *f, const char *key, okv_gguf_type_t *elem, uint64_t *out_n,
                             const void **data) {
  okv_status_t s = okv_gguf_get_arr(f, key, elem, out_n, data);
  if (okv_status_code(s) == OKV_STATUS_NOT_FOUND) {
    okv_status_free(s);
    *out_n = UINT64_MAX;
    return OKV_OK;
  }
  return s;
}

/* Element i of an integer array of type `elem`, or false for a non-integer type. */
static bool int_elem(okv_gguf_type_t elem, const void *data, uint64_t i, int64_t *out) {
  const unsigned char *p = data;
  switch (elem) {
    case OKV_GGUF_U8: *out = p[i]; return true;
    case OKV_GGUF_I8: *out = (int8_t)p[i]; return true;
    case OKV_GGUF_U16:
    case OKV_GGUF_I16: {
      uint16_t v;
      memcpy(&v, p + 2 * i, 2);
      *out = elem == OKV_GGUF_U16 ? (int64_t)v : (int64_t)(int16_t)v;
      return true;
    }
    case OKV_GGUF_U32:
    case OKV_GGUF_I32: {
      uint32_t v;
      memcpy(&v, p + 4 * i, 4);
      *out = elem == OKV_GGUF_U32 ? (int64_t)v : (int64_t)(int32_t)v;
      return true;
    }
    default: return false;
  }
}

/* Sorts the user-defined ids (few) by length, longest first, then by id
 * (insertion sort: stable, ids were added in order). */
static void sort_user(gtok_t *g) {
  for (uint32_t i = 1; i < g->n_user; ++i) {
    uint32_t id = g->user[i], j = i;
    while (j > 0 && g->len[g->user[j - 1]] < g->len[id]) {
      g->user[j] = g->user[j - 1];
      --j;
    }
    g->user[j] = id;
  }
}

static bool matchable_user(const gtok_t *g, uint32_t id) {
  if (g->type[id] != TT_USER || g->len[id] == 0) return false;
  const unsigned char *p = (const unsigned char *)tok_str(g, id);
  for (size_t i = 0, n = g->len[id]; i < n;) {
    size_t l = utf8_char(p + i, n - i);
    if (!l) return false;
    i += l;
  }
  return true;
}

static okv_status_t load(const okv_gguf_t *f, gtok_t *g) {
  char pb[80];
  const char *model = NULL;
  size_t model_n = 0;
  okv_status_t s = okv_gguf_get_str(f, KEY("model"), &model, &model_n);
  if (okv_status_code(s) == OKV_STATUS_NOT_FOUND) {
    okv_status_free(s);
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "it has no " KEY("model") " (no vocabulary)");
  }
  OKV_RETURN_IF_ERROR(s);
  if (model_n == 5 && memcmp(model, "llama", 5) == 0) {
    g->kind = OKV_TOKENIZER_SPM;
  } else if (model_n == 4 && memcmp(model, "gpt2", 4) == 0) {
    g->kind = OKV_TOKENIZER_BPE;
  } else {
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, KEY("model") " '%s' is not supported (supported: llama, gpt2)",
                           printable(model, model_n, pb, sizeof pb));
  }
  bool spm = g->kind == OKV_TOKENIZER_SPM;

  /* Tokens. */
  okv_gguf_type_t elem;
  uint64_t n = 0;
  const void *data = NULL;
  s = okv_gguf_get_arr(f, KEY("tokens"), &elem, &n, &data);
  if (okv_status_code(s) == OKV_STATUS_NOT_FOUND) {
    okv_status_free(s);
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "it has no " KEY("tokens"));
  }
  OKV_RETURN_IF_ERROR(s);
  if (elem != OKV_GGUF_STRING)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, KEY("tokens") " is an array of type %d, not of strings",
                           (int)elem);
  if (n == 0 || n > MAX_TOKENS)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, KEY("tokens") " holds %llu tokens (expected 1 to %llu)",
                           (unsigned long long)n, (unsigned long long)MAX_TOKENS);
  g->n = (uint32_t)n;
  size_t blob = 0;
  for (uint32_t i = 0; i < g->n; ++i) {
    const char *p;
    size_t l;
    OKV_RETURN_IF_ERROR(okv_gguf_get_arr_str(f, KEY("tokens"), i, &p, &l));
    if (l > (1u << 20))
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, KEY("tokens") " token %u is %zu bytes long (at most 1 MiB)",
                             i, l);
    blob += l + 1;
    if (l > g->max_len) g->max_len = (uint32_t)l;
  }
  const okv_allocator_t *a = &g->alloc;
  uint32_t slots = 1;
  while (slots < 2 * g->n) slots <<= 1;
  g->mask = slots - 1;
  g->blob = okv_malloc(a, blob);
  g->off = okv_malloc(a, g->n * sizeof *g->off);
  g->len = okv_malloc(a, g->n * sizeof *g->len);
  g->score = okv_calloc(a, g->n, sizeof *g->score);
  g->type = okv_malloc(a, g->n);
  g->slots = okv_calloc(a, slots, sizeof *g->slots);
  if (!g->blob || !g->off || !g->len || !g->score || !g->type || !g->slots)
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "out of memory for %u tokens", g->n);
  size_t bo = 0;
  for (uint32_t i = 0; i < g->n; ++i) {
    const char *p;
    size_t l;
    OKV_RETURN_IF_ERROR(okv_gguf_get_arr_str(f, KEY("tokens"), i, &p, &l));
    if (l) memcpy(g->blob + bo, p, l);
    g->blob[bo + l] = '\0';
    g->off[i] = bo;
    g->len[i] = (uint32_t)l;
    bo += l + 1;
    vocab_insert(g, i);
  }

  /* Scores. */
  OKV_RETURN_IF_ERROR(read_arr(f, KEY("scores"), &elem, &n, &data));
  if (n != UINT64_MAX) {
    if (elem != OKV_GGUF_F32)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, KEY("scores") " is an array of type %d, not of f32",
                             (int)elem);
    if (n != g->n)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, KEY("scores") " holds %llu scores for %u tokens",
                             (unsigned long long)n, g->n);
    memcpy(g->score, data, (size_t)g->n * sizeof(float));
    for (uint32_t i = 0; i < g->n; ++i)
      if (isnan(g->score[i])) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, KEY("scores") " score %u is NaN", i);
  }

  /* Token types. */
  OKV_RETURN_IF_ERROR(read_arr(f, KEY("token_type"), &elem, &n, &data));
  if (n != UINT64_MAX) {
    if (n != g->n)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, KEY("token_type") " holds %llu types for %u tokens",
                             (unsigned long long)n, g->n);
    for (uint32_t i = 0; i < g->n; ++i) {
      int64_t v = 0;
      if (!int_elem(elem, data, i, &v))
        return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                               KEY("token_type") " is an array of type %d, not of integers", (int)elem);
      if (v < 0 || v > TT_BYTE)
        return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, KEY("token_type") " of token %u is %lld (expected 0 to 6)",
                               i, (long long)v);
      g->type[i] = (uint8_t)v;
    }
  } else {
    for (uint32_t i = 0; i < g->n; ++i)
      g->type[i] = spm && byte_piece(tok_str(g, i), g->len[i]) >= 0 ? TT_BYTE : TT_NORMAL;
  }

  /* Special ids and flags. */
  OKV_RETURN_IF_ERROR(read_id(f, KEY("bos_token_id"), g->n, spm ? 1 : NIL, &g->bos));
  OKV_RETURN_IF_ERROR(read_id(f, KEY("eos_token_id"), g->n, spm ? 2 : NIL, &g->eos));
  OKV_RETURN_IF_ERROR(read_id(f, KEY("unknown_token_id"), g->n, spm ? 0 : NIL, &g->unk));

  const char *pre = "default";
  size_t pre_n = 7;
  if (!spm) {
    s = okv_gguf_get_str(f, KEY("pre"), &pre, &pre_n);
    if (okv_status_code(s) == OKV_STATUS_NOT_FOUND) {
      okv_status_free(s);
      pre = "default";
      pre_n = 7;
    } else {
      OKV_RETURN_IF_ERROR(s);
    }
    s = okv_pretok_create(pre, pre_n, a, &g->pre);
    if (okv_status_code(s) == OKV_STATUS_INVALID_ARGUMENT) return okv_status_annotate(s, KEY("pre"));
    OKV_RETURN_IF_ERROR(s);
    g->ignore_merges = strcmp(okv_pretok_name(g->pre), "llama-bpe") == 0;
  }
  OKV_RETURN_IF_ERROR(read_bool(f, KEY("add_bos_token"), spm || g->ignore_merges, &g->add_bos));
  OKV_RETURN_IF_ERROR(read_bool(f, KEY("add_eos_token"), false, &g->add_eos));
  OKV_RETURN_IF_ERROR(read_bool(f, KEY("add_space_prefix"), true, &g->add_space_prefix));
  if (!spm) g->add_space_prefix = false;

  /* User-defined pieces, matched whole in texts: those a valid text can
   * hold (non-empty valid UTF-8, so a match never cuts a character). */
  uint32_t n_user = 0;
  for (uint32_t i = 0; i < g->n; ++i) n_user += matchable_user(g, i);
  if (n_user) {
    g->user = okv_malloc(a, n_user * sizeof *g->user);
    if (!g->user) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "out of memory");
    for (uint32_t i = 0; i < g->n; ++i)
      if (matchable_user(g, i)) g->user[g->n_user++] = i;
    sort_user(g);
  }

  if (spm) {
    /* Byte fallback: "<0xNN>", else the one-byte piece, else the unknown token. */
    for (int b = 0; b < 256; ++b) {
      char hex[7];
      snprintf(hex, sizeof hex, "<0x%02X>", b);
      uint32_t id = vocab_find(g, hex, 6);
      if (id == NIL) {
        char c = (char)b;
        id = b ? vocab_find(g, &c, 1) : NIL;
      }
      g->byte_tok[b] = id != NIL ? id : g->unk;
    }
    return OKV_OK;
  }

  /* GPT-2's byte <-> code point map. */
  for (int c = 0; c < 324; ++c) g->cp_byte[c] = -1;
  uint16_t extra = 256;
  for (int b = 0; b < 256; ++b) {
    bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    g->byte_cp[b] = self ? (uint16_t)b : extra++;
    g->cp_byte[g->byte_cp[b]] = (int16_t)b;
    char u[2];
    size_t ul = 1;
    if (g->byte_cp[b] < 0x80) {
      u[0] = (char)g->byte_cp[b];
    } else {
      u[0] = (char)(0xC0 | (g->byte_cp[b] >> 6));
      u[1] = (char)(0x80 | (g->byte_cp[b] & 0x3F));
      ul = 2;
    }
    g->byte_tok[b] = vocab_find(g, u, ul);
  }

  /* Merges. */
  s = okv_gguf_get_arr(f, KEY("merges"), &elem, &n, &data);
  if (okv_status_code(s) == OKV_STATUS_NOT_FOUND) {
    okv_status_free(s);
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "it has no " KEY("merges") " (required for gpt2)");
  }
  OKV_RETURN_IF_ERROR(s);
  if (elem != OKV_GGUF_STRING)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, KEY("merges") " is an array of type %d, not of strings",
                           (int)elem);
  if (n > MAX_MERGES)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, KEY("merges") " holds %llu merges (at most %llu)",
                           (unsigned long long)n, (unsigned long long)MAX_MERGES);
  g->n_merges = (uint32_t)n;
  uint32_t mslots = 1;
  while (mslots < 2 * g->n_merges + 2) mslots <<= 1;
  g->merge_mask = mslots - 1;
  g->merges = okv_malloc(a, (size_t)mslots * sizeof *g->merges);
  char *cat = okv_malloc(a, 2 * (size_t)g->max_len + 1);
  if (!g->merges || !cat) {
    okv_free(a, cat);
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "out of memory for %u merges", g->n_merges);
  }
  for (uint32_t i = 0; i < mslots; ++i) g->merges[i].key = EMPTY_KEY;
  s = OKV_OK;
  for (uint32_t i = 0; i < g->n_merges && !s; ++i) {
    const char *p;
    size_t l;
    s = okv_gguf_get_arr_str(f, KEY("merges"), i, &p, &l);
    if (s) break;
    const char *sp = l > 1 ? memchr(p + 1, ' ', l - 1) : NULL;
    size_t la = sp ? (size_t)(sp - p) : 0, lb = sp ? l - la - 1 : 0;
    uint32_t ia = sp ? vocab_find(g, p, la) : NIL, ib = sp && lb ? vocab_find(g, sp + 1, lb) : NIL, ir = NIL;
    if (ia != NIL && ib != NIL) {
      memcpy(cat, p, la);
      memcpy(cat + la, sp + 1, lb);
      ir = vocab_find(g, cat, la + lb);
    }
    if (!sp || lb == 0)
      s = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, KEY("merges") " merge %u '%s' is not two pieces and a space", i,
                          printable(p, l, pb, sizeof pb));
    else if (ia == NIL || ib == NIL || ir == NIL)
      s = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, KEY("merges") " merge %u '%s' names %s that is not a token", i,
                          printable(p, l, pb, sizeof pb),
                          ia == NIL   ? "a left piece"
                          : ib == NIL ? "a right piece"
                                      : "a merged piece");
    else
      merge_insert(g, ia, ib, i, ir);
  }
  okv_free(a, cat);
  return s;
}

okv_status_t okv_tokenizer_load_gguf(const okv_gguf_t *f, const okv_allocator_t *allocator, okv_tokenizer_t **out) {
  if (out) *out = NULL;
  if (!f || !out) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_tokenizer_load_gguf: NULL argument");
  okv_allocator_t alloc = allocator ? *allocator : okv_allocator_system();
  const char *fname = okv_gguf_name(f);
  gtok_t *g = okv_calloc(&alloc, 1, sizeof *g);
  if (!g) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "tokenizer of '%s': out of memory", fname);
  g->alloc = alloc;
  okv_status_t s = load(f, g);
  if (s) {
    gtok_destroy(g);
    return okv_status_annotate(s, "tokenizer of '%s'", fname);
  }
  okv_tokenizer_info_t info = {g->kind, g->n,       g->max_len, g->bos,
                               g->eos,  g->add_bos, g->add_eos, g->pre ? okv_pretok_name(g->pre) : NULL};
  s = okv_tokenizer_create_kind(&info, &k_gtok_ops, g, &alloc, out);
  if (s) gtok_destroy(g);
  return s;
}
