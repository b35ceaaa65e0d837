/* libFuzzer harness: the GGUF reader (tools/model/gguf.c) and the llama
 * loader on top of it (tools/model/gguf_model.c). Input: a whole GGUF file.
 * It is opened from memory through a counting allocator (no single
 * allocation may exceed the file's size, but for the fixed-size handle) and,
 * when it opens, every metadata entry is read back through the typed getters
 * (each string array element too, up to 4096 per array), every tensor's
 * extent is checked against the input and its first and last block
 * dequantised (a read outside the input is an AddressSanitizer report), and
 * each tensor is found again by name. Then the model loader runs on it (with
 * a small context so the RoPE tables stay small), and okv_gguf_open through a
 * path must give the same verdict as the memory open. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_common.h"
#include "tools/model/gguf.h"
#include "tools/model/model.h"

/* The handle itself (a fixed size) may exceed a tiny file. */
#define FUZZ_GGUF_HANDLE_SLACK 1024u

/* Reads a byte so that AddressSanitizer sees the access. */
static volatile unsigned char g_sink;
static void touch(const char *p, size_t n) {
  if (n) g_sink = (unsigned char)(p[0] ^ p[n - 1]);
}

typedef struct fuzz_count_t {
  const okv_allocator_t *inner;
  size_t max_single;
} fuzz_count_t;

static void *fc_malloc(void *self, size_t n) {
  fuzz_count_t *c = self;
  if (n > c->max_single) c->max_single = n;
  return okv_malloc(c->inner, n);
}
static void *fc_calloc(void *self, size_t k, size_t n) {
  fuzz_count_t *c = self;
  if (k * n > c->max_single) c->max_single = k * n;
  return okv_calloc(c->inner, k, n);
}
static void *fc_realloc(void *self, void *p, size_t n) {
  fuzz_count_t *c = self;
  if (n > c->max_single) c->max_single = n;
  return okv_realloc(c->inner, p, n);
}
static void fc_free(void *self, void *p) { okv_free(((fuzz_count_t *)self)->inner, p); }

static void read_metadata(const okv_gguf_t *g) {
  const uint64_t n_kv = okv_gguf_kv_count(g);
  for (uint64_t i = 0; i < n_kv; ++i) {
    const char *k = NULL;
    size_t kl = 0;
    okv_gguf_type_t t, et;
    uint64_t n = 0;
    OKV_FUZZ_CHECK(okv_fuzz_status(okv_gguf_kv_at(g, i, &k, &kl, &t, &et, &n)) == OKV_STATUS_OK);
    OKV_FUZZ_CHECK((unsigned)t <= OKV_GGUF_F64);
    char key[256];
    if (kl >= sizeof key || memchr(k, '\0', kl)) continue; /* not reachable by a C-string key */
    memcpy(key, k, kl);
    key[kl] = '\0';
    uint32_t u;
    float f;
    bool b;
    const char *s;
    size_t sl;
    const void *data;
    okv_status_code_t cu = okv_fuzz_status(okv_gguf_get_u32(g, key, &u));
    okv_status_code_t cf = okv_fuzz_status(okv_gguf_get_f32(g, key, &f));
    okv_status_code_t cb = okv_fuzz_status(okv_gguf_get_bool(g, key, &b));
    okv_status_code_t cs = okv_fuzz_status(okv_gguf_get_str(g, key, &s, &sl));
    okv_status_code_t ca = okv_fuzz_status(okv_gguf_get_arr(g, key, &et, &n, &data));
    /* Exactly the getter of the stored type answers (u32 also refuses out-of-range integers). */
    OKV_FUZZ_CHECK((cf == OKV_STATUS_OK) == (t == OKV_GGUF_F32 || t == OKV_GGUF_F64));
    OKV_FUZZ_CHECK((cb == OKV_STATUS_OK) == (t == OKV_GGUF_BOOL));
    OKV_FUZZ_CHECK((cs == OKV_STATUS_OK) == (t == OKV_GGUF_STRING));
    OKV_FUZZ_CHECK((ca == OKV_STATUS_OK) == (t == OKV_GGUF_ARRAY));
    OKV_FUZZ_CHECK(cu != OKV_STATUS_NOT_FOUND);
    if (cs == OKV_STATUS_OK) touch(s, sl);
    if (ca == OKV_STATUS_OK && et == OKV_GGUF_STRING) {
      for (uint64_t j = 0; j < n && j < 4096; ++j) {
        OKV_FUZZ_CHECK(okv_fuzz_status(okv_gguf_get_arr_str(g, key, j, &s, &sl)) == OKV_STATUS_OK);
        touch(s, sl);
      }
      OKV_FUZZ_CHECK(okv_fuzz_status(okv_gguf_get_arr_str(g, key, n, &s, &sl)) == OKV_STATUS_INVALID_ARGUMENT);
    }
  }
}

static void read_tensors(const okv_gguf_t *g, const uint8_t *data, size_t size) {
  const uint64_t n_t = okv_gguf_tensor_count(g);
  float buf[256];
  for (uint64_t i = 0; i < n_t; ++i) {
    okv_gguf_tensor_t t;
    OKV_FUZZ_CHECK(okv_fuzz_status(okv_gguf_tensor_at(g, i, &t)) == OKV_STATUS_OK);
    OKV_FUZZ_CHECK(t.n_dims <= 4);
    const uint8_t *p = t.data;
    OKV_FUZZ_CHECK(p >= data && p <= data + size && t.n_bytes <= (uint64_t)(data + size - p));
    OKV_FUZZ_CHECK((uint64_t)(p - data) % okv_gguf_alignment(g) == 0);
    uint64_t n = 1;
    for (uint32_t d = 0; d < 4; ++d) n *= t.dims[d];
    uint64_t bytes = 0;
    OKV_FUZZ_CHECK(okv_fuzz_status(okv_ggml_type_size(t.type, n, &bytes)) == OKV_STATUS_OK && bytes == t.n_bytes);
    if (n && (t.type == OKV_GGML_TYPE_F32 || t.type == OKV_GGML_TYPE_F16 || t.type == OKV_GGML_TYPE_BF16 ||
              t.type == OKV_GGML_TYPE_Q8_0 || t.type == OKV_GGML_TYPE_Q4_0)) {
      const uint64_t blk = (t.type == OKV_GGML_TYPE_Q8_0 || t.type == OKV_GGML_TYPE_Q4_0) ? 32 : 1;
      const uint64_t blk_bytes = t.n_bytes / (n / blk);
      OKV_FUZZ_CHECK(okv_fuzz_status(okv_ggml_dequantize(t.type, p, blk, buf)) == OKV_STATUS_OK);
      OKV_FUZZ_CHECK(okv_fuzz_status(okv_ggml_dequantize(t.type, p + t.n_bytes - blk_bytes, blk, buf)) ==
                     OKV_STATUS_OK);
    }
    char name[256];
    if (t.name_len < sizeof name && !memchr(t.name, '\0', t.name_len)) {
      memcpy(name, t.name, t.name_len);
      name[t.name_len] = '\0';
      okv_gguf_tensor_t t2;
      OKV_FUZZ_CHECK(okv_fuzz_status(okv_gguf_tensor_find(g, name, &t2)) == OKV_STATUS_OK);
      OKV_FUZZ_CHECK(t2.data == t.data && t2.n_bytes == t.n_bytes && t2.type == t.type);
    }
  }
}

static void check_model(const okv_model_t *m) {
  const okv_model_config_t *c = &m->config;
  OKV_FUZZ_CHECK(c->n_q_heads * c->head_dim == c->dim && c->n_q_heads % c->n_kv_heads == 0);
  OKV_FUZZ_CHECK(c->head_dim % 2 == 0 && c->seq_len == 16 && c->vocab_size >= 1);
  OKV_FUZZ_CHECK(isfinite(c->rms_eps) && c->rms_eps > 0 && c->rope_theta > 0 && c->rope_pos_scale > 0);
  const size_t D = c->dim, L = c->n_layers, H = c->hidden_dim, V = c->vocab_size;
  const size_t kvd = (size_t)c->n_kv_heads * c->head_dim;
  double sum = (double)m->token_embedding[V * D - 1] + m->classifier[V * D - 1] + m->rms_final[D - 1] +
               m->wq[L * D * D - 1] + m->wk[L * kvd * D - 1] + m->wv[L * kvd * D - 1] + m->wo[L * D * D - 1] +
               m->w1[L * H * D - 1] + m->w2[L * D * H - 1] + m->w3[L * H * D - 1] + m->rms_att[L * D - 1] +
               m->rms_ffn[L * D - 1] + m->rope_cos[16 * c->head_dim / 2 - 1] + m->rope_sin[0];
  if (m->rope_freq_factors) sum += m->rope_freq_factors[c->head_dim / 2 - 1];
  OKV_FUZZ_CHECK(isfinite(sum));
}

int okv_fuzz_gguf(const uint8_t *data, size_t size) {
  fuzz_count_t fc = {okv_fuzz_allocator(), 0};
  okv_allocator_t counting = {&fc, fc_malloc, fc_calloc, fc_realloc, fc_free};
  okv_gguf_t *g = (okv_gguf_t *)&size; /* must be reset to NULL on failure */
  okv_status_code_t code = okv_fuzz_status(okv_gguf_open_memory(data, size, "fuzz", &counting, &g));
  uint64_t n_kv = 0, n_tensors = 0;
  OKV_FUZZ_CHECK(fc.max_single <= size + FUZZ_GGUF_HANDLE_SLACK);
  if (code != OKV_STATUS_OK) {
    OKV_FUZZ_CHECK(g == NULL && code == OKV_STATUS_INVALID_ARGUMENT);
  } else {
    OKV_FUZZ_CHECK(okv_gguf_version(g) == 2 || okv_gguf_version(g) == 3);
    OKV_FUZZ_CHECK(okv_gguf_file_size(g) == size);
    n_kv = okv_gguf_kv_count(g);
    n_tensors = okv_gguf_tensor_count(g);
    read_metadata(g);
    read_tensors(g, data, size);
    okv_model_config_t cfg;
    okv_model_load_options_t opt = {.context_length = 16};
    okv_status_code_t cc = okv_fuzz_status(okv_model_gguf_config(g, &opt, &cfg, NULL));
    okv_model_t *m = (okv_model_t *)&size;
    okv_status_code_t cm = okv_fuzz_status(okv_model_load_gguf(g, &opt, okv_fuzz_allocator(), &m));
    /* The checks without weights agree with the load, but for non-finite weights. */
    OKV_FUZZ_CHECK(cc == OKV_STATUS_OK || cm == cc);
    if (cm == OKV_STATUS_OK) {
      check_model(m);
      okv_model_free(m);
    } else {
      OKV_FUZZ_CHECK(m == NULL && (cm == OKV_STATUS_INVALID_ARGUMENT || cm == OKV_STATUS_OUT_OF_MEMORY));
    }
    okv_gguf_close(g);
  }
  /* The path open (mmap) on the same bytes: the same verdict. */
  char path[64];
  int fd = okv_fuzz_memfile(data, size, path, sizeof path);
  if (fd >= 0) {
    okv_gguf_t *g2 = (okv_gguf_t *)&size;
    okv_status_code_t code2 = okv_fuzz_status(okv_gguf_open(path, okv_fuzz_allocator(), &g2));
    close(fd);
    OKV_FUZZ_CHECK(code2 == code);
    if (code2 == OKV_STATUS_OK) {
      OKV_FUZZ_CHECK(okv_gguf_tensor_count(g2) == n_tensors && okv_gguf_kv_count(g2) == n_kv);
      okv_gguf_close(g2);
    } else {
      OKV_FUZZ_CHECK(g2 == NULL);
    }
  }
  return 0;
}

#ifndef OKV_FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return okv_fuzz_gguf(data, size); }
#endif
