/* GGUF v3 writer for the tests (see gguf_writer.h). */
#include "tests/model/gguf_writer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct buf_t {
  unsigned char *p;
  size_t n, cap;
} buf_t;

static void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) {
    fprintf(stderr, "gguf_writer: out of memory\n");
    abort();
  }
  return q;
}

static void *xcalloc(size_t n, size_t size) {
  void *q = calloc(n ? n : 1, size ? size : 1);
  if (!q) {
    fprintf(stderr, "gguf_writer: out of memory\n");
    abort();
  }
  return q;
}

static void put(buf_t *b, const void *data, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2 + 64;
    b->p = xrealloc(b->p, b->cap);
  }
  if (n) memcpy(b->p + b->n, data, n);
  b->n += n;
}
static void put_u32(buf_t *b, uint32_t v) {
  unsigned char x[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
  put(b, x, 4);
}
static void put_u64(buf_t *b, uint64_t v) {
  put_u32(b, (uint32_t)v);
  put_u32(b, (uint32_t)(v >> 32));
}
static void put_f32(buf_t *b, float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  put_u32(b, u);
}
static void put_str(buf_t *b, const char *s, size_t n) {
  put_u64(b, n);
  put(b, s, n);
}

typedef struct tensor_t {
  char *name;
  uint32_t n_dims, type;
  uint64_t dims[4];
  unsigned char *data;
  size_t n_bytes;
} tensor_t;

struct okv_gw_t {
  buf_t kv;
  size_t kv_ends[64]; /* relative to the KV section */
  size_t n_kv;
  uint32_t alignment;
  tensor_t *tensors;
  size_t n_tensors;
};

okv_gw_t *okv_gw_new(void) {
  okv_gw_t *w = xrealloc(NULL, sizeof *w);
  memset(w, 0, sizeof *w);
  w->alignment = 32;
  return w;
}

void okv_gw_free(okv_gw_t *w) {
  if (!w) return;
  for (size_t i = 0; i < w->n_tensors; ++i) {
    free(w->tensors[i].name);
    free(w->tensors[i].data);
  }
  free(w->tensors);
  free(w->kv.p);
  free(w);
}

static void kv_begin(okv_gw_t *w, const char *key, uint32_t type) {
  put_str(&w->kv, key, strlen(key));
  put_u32(&w->kv, type);
}
static void kv_end(okv_gw_t *w) {
  if (w->n_kv < 64) w->kv_ends[w->n_kv] = w->kv.n;
  w->n_kv++;
}

void okv_gw_kv_str(okv_gw_t *w, const char *key, const char *value) {
  kv_begin(w, key, OKV_GGUF_STRING);
  put_str(&w->kv, value, strlen(value));
  kv_end(w);
}
void okv_gw_kv_u32(okv_gw_t *w, const char *key, uint32_t value) {
  kv_begin(w, key, OKV_GGUF_U32);
  put_u32(&w->kv, value);
  kv_end(w);
  if (!strcmp(key, "general.alignment")) w->alignment = value;
}
void okv_gw_kv_i32(okv_gw_t *w, const char *key, int32_t value) {
  kv_begin(w, key, OKV_GGUF_I32);
  put_u32(&w->kv, (uint32_t)value);
  kv_end(w);
}
void okv_gw_kv_f32(okv_gw_t *w, const char *key, float value) {
  kv_begin(w, key, OKV_GGUF_F32);
  put_f32(&w->kv, value);
  kv_end(w);
}
void okv_gw_kv_bool(okv_gw_t *w, const char *key, bool value) {
  kv_begin(w, key, OKV_GGUF_BOOL);
  unsigned char b = value ? 1 : 0;
  put(&w->kv, &b, 1);
  kv_end(w);
}
void okv_gw_kv_arr_str(okv_gw_t *w, const char *key, const char *const *values, size_t n) {
  kv_begin(w, key, OKV_GGUF_ARRAY);
  put_u32(&w->kv, OKV_GGUF_STRING);
  put_u64(&w->kv, n);
  for (size_t i = 0; i < n; ++i) put_str(&w->kv, values[i], strlen(values[i]));
  kv_end(w);
}
void okv_gw_kv_arr_f32(okv_gw_t *w, const char *key, const float *values, size_t n) {
  kv_begin(w, key, OKV_GGUF_ARRAY);
  put_u32(&w->kv, OKV_GGUF_F32);
  put_u64(&w->kv, n);
  for (size_t i = 0; i < n; ++i) put_f32(&w->kv, values[i]);
  kv_end(w);
}
void okv_gw_kv_arr_i32(okv_gw_t *w, const char *key, const int32_t *values, size_t n) {
  kv_begin(w, key, OKV_GGUF_ARRAY);
  put_u32(&w->kv, OKV_GGUF_I32);
  put_u64(&w->kv, n);
  for (size_t i = 0; i < n; ++i) put_u32(&w->kv, (uint32_t)values[i]);
  kv_end(w);
}

/* ---- conversions ---- */

static void store16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}

void okv_gw_quantize(uint32_t type, const float *src, uint64_t n, void *dst) {
  unsigned char *d = dst;
  switch (type) {
    case OKV_GGML_TYPE_F32: memcpy(d, src, n * 4); return;
    case OKV_GGML_TYPE_F16:
      for (uint64_t i = 0; i < n; ++i) store16(d + 2 * i, okv_f32_to_f16(src[i]));
      return;
    case OKV_GGML_TYPE_BF16:
      for (uint64_t i = 0; i < n; ++i) store16(d + 2 * i, okv_f32_to_bf16(src[i]));
      return;
    case OKV_GGML_TYPE_Q8_0:
      for (uint64_t b = 0; b < n / 32; ++b) {
        const float *x = src + 32 * b;
        unsigned char *blk = d + 34 * b;
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(x[j]));
        const float scale = amax / 127.0f, inv = scale != 0.0f ? 1.0f / scale : 0.0f;
        store16(blk, okv_f32_to_f16(scale));
        for (int j = 0; j < 32; ++j) blk[2 + j] = (unsigned char)(int8_t)roundf(x[j] * inv);
      }
      return;
    case OKV_GGML_TYPE_Q4_0:
      for (uint64_t b = 0; b < n / 32; ++b) {
        const float *x = src + 32 * b;
        unsigned char *blk = d + 18 * b;
        float amax = 0.0f, m = 0.0f;
        for (int j = 0; j < 32; ++j)
          if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            m = x[j];
          }
        const float scale = m / -8.0f, inv = scale != 0.0f ? 1.0f / scale : 0.0f;
        store16(blk, okv_f32_to_f16(scale));
        for (int j = 0; j < 16; ++j) {
          int lo = (int)(x[j] * inv + 8.5f), hi = (int)(x[j + 16] * inv + 8.5f);
          lo = lo > 15 ? 15 : lo;
          hi = hi > 15 ? 15 : hi;
          blk[2 + j] = (unsigned char)(lo | (hi << 4));
        }
      }
      return;
    default: fprintf(stderr, "gguf_writer: cannot convert to type %u\n", type); abort();
  }
}

void okv_gw_tensor_raw(okv_gw_t *w, const char *name, uint32_t n_dims, const uint64_t *dims, uint32_t type,
                       const void *data, size_t n_bytes) {
  w->tensors = xrealloc(w->tensors, (w->n_tensors + 1) * sizeof *w->tensors);
  tensor_t *t = &w->tensors[w->n_tensors++];
  memset(t, 0, sizeof *t);
  t->name = xrealloc(NULL, strlen(name) + 1);
  strcpy(t->name, name);
  t->n_dims = n_dims;
  t->type = type;
  for (uint32_t i = 0; i < n_dims && i < 4; ++i) t->dims[i] = dims[i];
  t->data = xrealloc(NULL, n_bytes);
  if (n_bytes) memcpy(t->data, data, n_bytes);
  t->n_bytes = n_bytes;
}

void okv_gw_tensor(okv_gw_t *w, const char *name, uint32_t n_dims, const uint64_t *dims, uint32_t type,
                   const float *src) {
  uint64_t n = 1, bytes = 0;
  for (uint32_t i = 0; i < n_dims; ++i) n *= dims[i];
  okv_status_t s = okv_ggml_type_size(type, n, &bytes);
  if (s) {
    fprintf(stderr, "gguf_writer: %s\n", okv_status_message(s));
    abort();
  }
  void *data = xrealloc(NULL, (size_t)bytes);
  okv_gw_quantize(type, src, n, data);
  okv_gw_tensor_raw(w, name, n_dims, dims, type, data, (size_t)bytes);
  free(data);
}

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

void *okv_gw_serialize(const okv_gw_t *w, size_t *out_n, okv_gw_layout_t *layout) {
  buf_t b = {0};
  okv_gw_layout_t L;
  memset(&L, 0, sizeof L);
  put(&b, "GGUF", 4);
  put_u32(&b, 3);
  put_u64(&b, w->n_tensors);
  put_u64(&b, w->n_kv);
  L.header_end = b.n;
  put(&b, w->kv.p, w->kv.n);
  L.n_kv = w->n_kv < 64 ? w->n_kv : 64;
  for (size_t i = 0; i < L.n_kv; ++i) L.kv_end[i] = L.header_end + w->kv_ends[i];
  const size_t a = w->alignment ? w->alignment : 32;
  size_t off = 0;
  for (size_t i = 0; i < w->n_tensors; ++i) {
    const tensor_t *t = &w->tensors[i];
    put_str(&b, t->name, strlen(t->name));
    put_u32(&b, t->n_dims);
    for (uint32_t d = 0; d < t->n_dims; ++d) put_u64(&b, t->dims[d]);
    put_u32(&b, t->type);
    put_u64(&b, off);
    off = align_up(off + t->n_bytes, a);
  }
  L.infos_end = b.n;
  static const unsigned char zeros[4096];
  put(&b, zeros, align_up(b.n, a) - b.n);
  L.data_start = b.n;
  L.n_tensors = w->n_tensors < 512 ? w->n_tensors : 512;
  for (size_t i = 0; i < w->n_tensors; ++i) {
    const tensor_t *t = &w->tensors[i];
    if (i < 512) L.tensor_off[i] = b.n;
    put(&b, t->data, t->n_bytes);
    if (i + 1 < w->n_tensors) put(&b, zeros, align_up(b.n - L.data_start, a) - (b.n - L.data_start));
  }
  L.total = b.n;
  if (layout) *layout = L;
  *out_n = b.n;
  return b.p;
}

void okv_gw_write(const okv_gw_t *w, const char *path) {
  size_t n = 0;
  void *p = okv_gw_serialize(w, &n, NULL);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
    fprintf(stderr, "gguf_writer: cannot write %s\n", path);
    abort();
  }
  free(p);
}

/* ---- a llama2.c model as a llama GGUF file ---- */

static int32_t rd_i32(const unsigned char *p) {
  uint32_t u = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
  int32_t v;
  memcpy(&v, &u, 4);
  return v;
}

/* tokenizer.ggml.* from a llama2.c tokenizer file (see gguf_writer.h). */
static void add_tokenizer(okv_gw_t *w, uint32_t vocab, const unsigned char *t, size_t n) {
  char **pieces = xcalloc(vocab, sizeof *pieces);
  float *scores = xcalloc(vocab, sizeof *scores);
  int32_t *types = xcalloc(vocab, sizeof *types);
  size_t pos = 4;
  for (uint32_t i = 0; i < vocab; ++i) {
    if (pos + 8 > n) abort();
    memcpy(&scores[i], t + pos, 4);
    int32_t len = rd_i32(t + pos + 4);
    pos += 8;
    if (len < 0 || pos + (size_t)len > n) abort();
    /* A space is SentencePiece's U+2581 in GGUF vocabularies. */
    char *s = xrealloc(NULL, 3 * (size_t)len + 1);
    size_t k = 0;
    for (int32_t j = 0; j < len; ++j) {
      if (t[pos + j] == ' ') {
        s[k++] = (char)0xE2;
        s[k++] = (char)0x96;
        s[k++] = (char)0x81;
      } else {
        s[k++] = (char)t[pos + j];
      }
    }
    s[k] = '\0';
    pos += (size_t)len;
    types[i] = 1;
    if (i == 0) {
      types[i] = 2;
      strcpy(s, "<unk>");
    } else if (i == 1 || i == 2) {
      types[i] = 3;
      s = xrealloc(s, 8);
      strcpy(s, i == 1 ? "<s>" : "</s>");
    } else if (i < 259 && k == 6 && !strncmp(s, "<0x", 3) && s[5] == '>') {
      types[i] = 6;
    }
    pieces[i] = s;
  }
  okv_gw_kv_str(w, "tokenizer.ggml.model", "llama");
  okv_gw_kv_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)pieces, vocab);
  okv_gw_kv_arr_f32(w, "tokenizer.ggml.scores", scores, vocab);
  okv_gw_kv_arr_i32(w, "tokenizer.ggml.token_type", types, vocab);
  okv_gw_kv_u32(w, "tokenizer.ggml.bos_token_id", 1);
  okv_gw_kv_u32(w, "tokenizer.ggml.eos_token_id", 2);
  okv_gw_kv_u32(w, "tokenizer.ggml.unknown_token_id", 0);
  for (uint32_t i = 0; i < vocab; ++i) free(pieces[i]);
  free(pieces);
  free(scores);
  free(types);
}

okv_gw_t *okv_gw_from_model(const okv_model_t *m, uint32_t type, const void *tokenizer, size_t tokenizer_bytes) {
  const okv_model_config_t *c = &m->config;
  okv_gw_t *w = okv_gw_new();
  okv_gw_kv_str(w, "general.architecture", "llama");
  okv_gw_kv_str(w, "general.name", "okv-test");
  okv_gw_kv_u32(w, "llama.context_length", c->seq_len);
  okv_gw_kv_u32(w, "llama.embedding_length", c->dim);
  okv_gw_kv_u32(w, "llama.feed_forward_length", c->hidden_dim);
  okv_gw_kv_u32(w, "llama.block_count", c->n_layers);
  okv_gw_kv_u32(w, "llama.attention.head_count", c->n_q_heads);
  okv_gw_kv_u32(w, "llama.attention.head_count_kv", c->n_kv_heads);
  okv_gw_kv_u32(w, "llama.rope.dimension_count", c->head_dim);
  okv_gw_kv_f32(w, "llama.rope.freq_base", 10000.0f);
  okv_gw_kv_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
  if (tokenizer) add_tokenizer(w, c->vocab_size, tokenizer, tokenizer_bytes);
  const uint64_t D = c->dim, H = c->hidden_dim, V = c->vocab_size, kvd = (uint64_t)c->n_kv_heads * c->head_dim;
  uint64_t dims[2];
  dims[0] = D;
  dims[1] = V;
  okv_gw_tensor(w, "token_embd.weight", 2, dims, type, m->token_embedding);
  okv_gw_tensor(w, "output_norm.weight", 1, dims, OKV_GGML_TYPE_F32, m->rms_final);
  if (!c->shared_classifier) okv_gw_tensor(w, "output.weight", 2, dims, type, m->classifier);
  for (uint32_t l = 0; l < c->n_layers; ++l) {
    char name[64];
    const struct {
      const char *suffix;
      const float *base;
      uint64_t in, out;
    } mats[] = {{"attn_q", m->wq, D, D},      {"attn_k", m->wk, D, kvd}, {"attn_v", m->wv, D, kvd},
                {"attn_output", m->wo, D, D}, {"ffn_gate", m->w1, D, H}, {"ffn_down", m->w2, H, D},
                {"ffn_up", m->w3, D, H}};
    snprintf(name, sizeof name, "blk.%u.attn_norm.weight", l);
    dims[0] = D;
    okv_gw_tensor(w, name, 1, dims, OKV_GGML_TYPE_F32, m->rms_att + l * D);
    snprintf(name, sizeof name, "blk.%u.ffn_norm.weight", l);
    okv_gw_tensor(w, name, 1, dims, OKV_GGML_TYPE_F32, m->rms_ffn + l * D);
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; ++i) {
      snprintf(name, sizeof name, "blk.%u.%s.weight", l, mats[i].suffix);
      dims[0] = mats[i].in;
      dims[1] = mats[i].out;
      okv_gw_tensor(w, name, 2, dims, type, mats[i].base + (uint64_t)l * mats[i].in * mats[i].out);
    }
  }
  return w;
}
