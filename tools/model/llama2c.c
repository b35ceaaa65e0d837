/* llama2.c legacy checkpoint loader (dispatching GGUF files to gguf_model.c) and default input paths. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/gguf.h"
#include "model/model_internal.h"

#ifndef OKV_SHARED_DIR
#define OKV_SHARED_DIR "../shared"
#endif

static const char *const k_env_names[] = {"OKV_MODEL", "OKV_TOKENIZER", "OKV_TEXT"};
static const char *const k_rel_files[] = {"models/stories260K.bin", "models/tok512.bin", "data/tinystories_val.txt"};

static bool file_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static okv_status_t copy_path(const char *p, char *out, size_t cap) {
  size_t n = strlen(p);
  if (n + 1 > cap) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "path '%s' is longer than %zu bytes", p, cap);
  memcpy(out, p, n + 1);
  return OKV_OK;
}

okv_status_t okv_model_path_resolve(okv_model_path_kind_t kind, const char *flag, char *out_path, size_t capacity) {
  if ((unsigned)kind > OKV_MODEL_PATH_TEXT || !out_path || capacity == 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_model_path_resolve: bad kind or out_path");
  if (flag) return copy_path(flag, out_path, capacity);
  const char *env = getenv(k_env_names[kind]);
  if (env && *env) return copy_path(env, out_path, capacity);
  char buf[4096];
  snprintf(buf, sizeof buf, "../shared/%s", k_rel_files[kind]);
  if (file_exists(buf)) return copy_path(buf, out_path, capacity);
  char buf2[4096];
  snprintf(buf2, sizeof buf2, "%s/%s", OKV_SHARED_DIR, k_rel_files[kind]);
  if (file_exists(buf2)) return copy_path(buf2, out_path, capacity);
  return okv_status_make(OKV_STATUS_NOT_FOUND, "no %s given: tried $%s, %s and %s",
                         kind == OKV_MODEL_PATH_MODEL       ? "model"
                         : kind == OKV_MODEL_PATH_TOKENIZER ? "tokenizer"
                                                            : "text",
                         k_env_names[kind], buf, buf2);
}

static int32_t read_le_i32(const unsigned char *p) {
  uint32_t u = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
  int32_t v;
  memcpy(&v, &u, sizeof v);
  return v;
}

static okv_status_t check_range(const char *name, const char *field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "checkpoint '%s': header field %s = %lld out of range [%lld, %lld]", name, field,
                           (long long)v, (long long)lo, (long long)hi);
  return OKV_OK;
}

/* acc += a * b; false (acc unchanged) when the result does not fit 64 bits. */
static bool add_product(uint64_t *acc, uint64_t a, uint64_t b) {
  if (a != 0 && b > UINT64_MAX / a) return false;
  uint64_t p = a * b;
  if (p > UINT64_MAX - *acc) return false;
  *acc += p;
  return true;
}

#define OKV_CKPT_HEADER_BYTES 28u

void okv_model_config_from_header(const int32_t h[7], okv_model_config_t *out) {
  okv_model_config_t c;
  memset(&c, 0, sizeof c);
  c.dim = (uint32_t)h[0];
  c.hidden_dim = (uint32_t)h[1];
  c.n_layers = (uint32_t)h[2];
  c.n_q_heads = (uint32_t)h[3];
  c.n_kv_heads = (uint32_t)h[4];
  c.shared_classifier = h[5] > 0;
  c.vocab_size = (uint32_t)(h[5] > 0 ? h[5] : -h[5]);
  c.seq_len = (uint32_t)h[6];
  c.head_dim = c.dim / c.n_q_heads;
  c.rms_eps = OKV_MODEL_RMS_EPS;
  c.rope_theta = 10000.0f;
  c.rope_pos_scale = 1.0f;
  *out = c;
}

okv_status_t okv_model_open_file(const char *what, const char *path, FILE **out_file) {
  *out_file = fopen(path, "rb");
  if (*out_file) return OKV_OK;
  int e = errno;
  return okv_status_make(e == ENOENT ? OKV_STATUS_NOT_FOUND : OKV_STATUS_IO_ERROR, "%s '%s': %s", what, path,
                         strerror(e));
}

/* Validates the 7-field header against the file size: every field in range,
 * the shapes consistent, and header + weights exactly file_bytes, computed
 * overflow-safe. Nothing is allocated before this passes, so a header that
 * declares huge dimensions costs nothing. */
static okv_status_t parse_header(const char *name, const unsigned char *hdr, uint64_t file_bytes,
                                 okv_model_config_t *out_c, uint64_t *out_n_floats) {
  int32_t h[7];
  for (int i = 0; i < 7; ++i) h[i] = read_le_i32(hdr + 4 * i);
  static const char *const names[7] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                                       "n_kv_heads", "vocab_size", "seq_len"};
  static const int64_t lo[7] = {2, 1, 1, 1, 1, -(1 << 20), 1};
  static const int64_t hi[7] = {1 << 16, 1 << 18, 1024, 1024, 1024, 1 << 20, 1 << 20};
  for (int i = 0; i < 7; ++i) OKV_RETURN_IF_ERROR(check_range(name, names[i], h[i], lo[i], hi[i]));
  if (h[5] > -4 && h[5] < 4)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "checkpoint '%s': header field vocab_size = %d out of range (|vocab_size| >= 4)", name,
                           h[5]);
  if (h[0] % h[3] != 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "checkpoint '%s': dim %d is not a multiple of n_heads %d", name,
                           h[0], h[3]);
  if (h[3] % h[4] != 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "checkpoint '%s': n_heads %d is not a multiple of n_kv_heads %d", name, h[3], h[4]);
  okv_model_config_t c;
  okv_model_config_from_header(h, &c);
  if (c.head_dim % 2 != 0 || c.head_dim > 256)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "checkpoint '%s': head_dim %u must be even and <= 256", name,
                           c.head_dim);
  uint64_t D = c.dim, H = c.hidden_dim, L = c.n_layers, V = c.vocab_size;
  uint64_t kvd = (uint64_t)c.n_kv_heads * c.head_dim;
  uint64_t n = 0;
  bool ok = add_product(&n, V, D)                               /* token embedding */
            && add_product(&n, L, D)                            /* rms_att */
            && add_product(&n, L * D, D)                        /* wq */
            && add_product(&n, 2 * L * kvd, D)                  /* wk, wv */
            && add_product(&n, L * D, D)                        /* wo */
            && add_product(&n, L, D)                            /* rms_ffn */
            && add_product(&n, 3 * L * H, D)                    /* w1, w2, w3 */
            && add_product(&n, 1, D)                            /* rms_final */
            && add_product(&n, c.seq_len, c.head_dim)           /* RoPE cos + sin */
            && add_product(&n, c.shared_classifier ? 0 : V, D); /* classifier */
  uint64_t need = 0;
  ok = ok && add_product(&need, n, sizeof(float)) && add_product(&need, 1, OKV_CKPT_HEADER_BYTES);
  if (!ok || need != file_bytes) {
    char need_s[32];
    if (ok)
      snprintf(need_s, sizeof need_s, "%llu", (unsigned long long)need);
    else
      snprintf(need_s, sizeof need_s, "more than 2^64");
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "checkpoint '%s': file has %llu bytes but its header (dim %u, hidden %u, layers %u, heads "
                           "%u/%u, vocab %d, seq_len %u) needs %s bytes",
                           name, (unsigned long long)file_bytes, c.dim, c.hidden_dim, c.n_layers, c.n_q_heads,
                           c.n_kv_heads, h[5], c.seq_len, need_s);
  }
  if (n > SIZE_MAX / sizeof(float))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "checkpoint '%s': %llu weights do not fit this address space",
                           name, (unsigned long long)n);
  *out_c = c;
  *out_n_floats = n;
  return OKV_OK;
}

/* Allocates the model object and its weight storage (n_floats, already
 * matched against the file size). */
static okv_status_t model_alloc(const char *name, const okv_allocator_t *alloc, const okv_model_config_t *c,
                                uint64_t n_floats, okv_model_t **out) {
  okv_model_t *m = okv_calloc(alloc, 1, sizeof *m);
  if (!m) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "checkpoint '%s': out of memory", name);
  m->allocator = *alloc;
  m->config = *c;
  m->storage = okv_malloc(alloc, (size_t)n_floats * sizeof(float));
  if (!m->storage) {
    okv_model_free(m);
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "checkpoint '%s': cannot allocate %llu bytes of weights", name,
                           (unsigned long long)(n_floats * sizeof(float)));
  }
  *out = m;
  return OKV_OK;
}

/* Checks the weights (read into storage) and points the tensors into it. */
static okv_status_t model_finish(const char *name, okv_model_t *m, uint64_t n_floats) {
  const float *w = m->storage;
  for (uint64_t i = 0; i < n_floats; ++i) {
    if (!isfinite(w[i]))
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "checkpoint '%s': weight %llu is not finite", name,
                             (unsigned long long)i);
  }
  const okv_model_config_t *c = &m->config;
  uint64_t D = c->dim, H = c->hidden_dim, L = c->n_layers, V = c->vocab_size;
  uint64_t kvd = (uint64_t)c->n_kv_heads * c->head_dim;
  const uint64_t rope = (uint64_t)c->seq_len * c->head_dim / 2;
  /* The tensors in file order, each with its size in floats. */
  const struct {
    const float **tensor;
    uint64_t n;
  } layout[] = {{&m->token_embedding, V * D}, {&m->rms_att, L * D}, {&m->wq, L * D * D},  {&m->wk, L * kvd * D},
                {&m->wv, L * kvd * D},        {&m->wo, L * D * D},  {&m->rms_ffn, L * D}, {&m->w1, L * H * D},
                {&m->w2, L * D * H},          {&m->w3, L * H * D},  {&m->rms_final, D},   {&m->rope_cos, rope},
                {&m->rope_sin, rope}};
  const float *p = w;
  for (size_t i = 0; i < sizeof layout / sizeof layout[0]; ++i) {
    *layout[i].tensor = p;
    p += layout[i].n;
  }
  m->classifier = c->shared_classifier ? m->token_embedding : p;
  return OKV_OK;
}

okv_status_t okv_model_load_memory(const void *data, size_t n_bytes, const char *name, const okv_allocator_t *allocator,
                                   okv_model_t **out_model) {
  if (out_model) *out_model = NULL;
  if ((!data && n_bytes) || !out_model)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_model_load_memory: NULL data or out_model");
  if (!name) name = "<memory>";
  okv_allocator_t alloc = allocator ? *allocator : okv_allocator_system();
  if (n_bytes >= 4 && memcmp(data, "GGUF", 4) == 0) {
    okv_gguf_t *g = NULL;
    OKV_RETURN_IF_ERROR(okv_gguf_open_memory(data, n_bytes, name, &alloc, &g));
    okv_status_t gs = okv_model_load_gguf(g, NULL, &alloc, out_model);
    okv_gguf_close(g);
    return gs;
  }
  if (n_bytes < OKV_CKPT_HEADER_BYTES)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "checkpoint '%s': truncated header (%zu bytes, needs 28)", name,
                           n_bytes);
  okv_model_config_t c;
  uint64_t n_floats = 0;
  OKV_RETURN_IF_ERROR(parse_header(name, data, n_bytes, &c, &n_floats));
  okv_model_t *m = NULL;
  OKV_RETURN_IF_ERROR(model_alloc(name, &alloc, &c, n_floats, &m));
  memcpy(m->storage, (const unsigned char *)data + OKV_CKPT_HEADER_BYTES, (size_t)n_floats * sizeof(float));
  okv_status_t st = model_finish(name, m, n_floats);
  if (st) {
    okv_model_free(m);
    return st;
  }
  *out_model = m;
  return OKV_OK;
}

okv_status_t okv_model_load(const char *path, const okv_allocator_t *allocator, okv_model_t **out_model) {
  return okv_model_load_ex(path, NULL, allocator, out_model);
}

okv_status_t okv_model_load_ex(const char *path, const okv_model_load_options_t *options,
                               const okv_allocator_t *allocator, okv_model_t **out_model) {
  if (out_model) *out_model = NULL;
  if (!path || !out_model)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_model_load: NULL path or out_model");
  okv_allocator_t alloc = allocator ? *allocator : okv_allocator_system();
  const uint32_t ctx = options ? options->context_length : 0;
  FILE *f = NULL;
  OKV_RETURN_IF_ERROR(okv_model_open_file("checkpoint", path, &f));
  unsigned char magic[4] = {0};
  if (fread(magic, 1, sizeof magic, f) == sizeof magic && memcmp(magic, "GGUF", 4) == 0) {
    fclose(f);
    okv_gguf_t *g = NULL;
    OKV_RETURN_IF_ERROR(okv_gguf_open(path, &alloc, &g));
    okv_status_t gs = okv_model_load_gguf(g, options, &alloc, out_model);
    okv_gguf_close(g);
    return gs;
  }
  rewind(f);
  okv_status_t st = OKV_OK;
  okv_model_t *m = NULL;
  unsigned char hdr[OKV_CKPT_HEADER_BYTES];
  okv_model_config_t c;
  uint64_t n_floats = 0;
  /* The file size first: the header is checked against it before anything
   * the header declares is allocated. */
  long fsize = -1;
  if (fseek(f, 0, SEEK_END) == 0) fsize = ftell(f);
  if (fsize < 0 || fseek(f, 0, SEEK_SET) != 0) {
    st = okv_status_make(OKV_STATUS_IO_ERROR, "checkpoint '%s': cannot determine the file size: %s", path,
                         strerror(errno));
    goto done;
  }
  if ((unsigned long)fsize < sizeof hdr) {
    st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "checkpoint '%s': truncated header (%ld bytes, needs 28)", path,
                         fsize);
    goto done;
  }
  if (fread(hdr, 1, sizeof hdr, f) != sizeof hdr) {
    st = okv_status_make(OKV_STATUS_IO_ERROR, "checkpoint '%s': read failed", path);
    goto done;
  }
  st = parse_header(path, hdr, (uint64_t)fsize, &c, &n_floats);
  if (!st) st = model_alloc(path, &alloc, &c, n_floats, &m);
  if (st) goto done;
  if (fread(m->storage, sizeof(float), (size_t)n_floats, f) != (size_t)n_floats) {
    st = okv_status_make(OKV_STATUS_IO_ERROR, "checkpoint '%s': read failed", path);
    goto done;
  }
  st = model_finish(path, m, n_floats);
  if (!st && ctx > m->config.seq_len)
    st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                         "checkpoint '%s': context length %u is longer than its seq_len %u (its RoPE tables end there)",
                         path, ctx, m->config.seq_len);
  if (!st && ctx) m->config.seq_len = ctx;
done:
  fclose(f);
  if (st) {
    okv_model_free(m);
    return st;
  }
  *out_model = m;
  return OKV_OK;
}

void okv_model_free(okv_model_t *model) {
  if (!model) return;
  okv_allocator_t a = model->allocator;
  if (model->storage) okv_free(&a, model->storage);
  okv_free(&a, model);
}
