/* libFuzzer harness: the llama2.c checkpoint loader (tools/model/llama2c.c).
 * Input: a whole checkpoint file. It is loaded from memory
 * (okv_model_load_memory) and through a path (okv_model_load on an in-memory
 * file); both must agree. On success the harness recomputes the layout from
 * the header on its own and reads the first and last float of every tensor,
 * so a pointer outside the weight storage is an AddressSanitizer report.
 * Then the same header is loaded again with the weights resized to what it
 * declares (up to 256 KiB), so every shape the fuzzer invents reaches the
 * success path, and the loader must accept exactly the valid headers. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_common.h"
#include "tools/model/model_internal.h"

/* The number of floats the header declares, the harness's own way (64-bit
 * math is exact here: the loader bounds every field well below 2^21). */
static uint64_t expected_floats(const okv_model_config_t *c) {
  uint64_t D = c->dim, H = c->hidden_dim, L = c->n_layers, V = c->vocab_size;
  uint64_t kvd = (uint64_t)c->n_kv_heads * c->head_dim, qd = (uint64_t)c->n_q_heads * c->head_dim;
  uint64_t n = V * D;                      /* token embedding */
  n += L * D;                              /* rms_att */
  n += L * qd * D;                         /* wq */
  n += 2 * L * kvd * D;                    /* wk, wv */
  n += L * D * qd;                         /* wo */
  n += L * D;                              /* rms_ffn */
  n += 3 * L * H * D;                      /* w1, w2, w3 */
  n += D;                                  /* rms_final */
  n += (uint64_t)c->seq_len * c->head_dim; /* RoPE cos + sin */
  if (!c->shared_classifier) n += V * D;
  return n;
}

static void check_tensor(const okv_model_t *m, uint64_t n_floats, const float *p, uint64_t count, double *sum) {
  OKV_FUZZ_CHECK(p != NULL);
  OKV_FUZZ_CHECK(count > 0);
  OKV_FUZZ_CHECK(p >= m->storage);
  OKV_FUZZ_CHECK((uint64_t)(p - m->storage) + count <= n_floats);
  OKV_FUZZ_CHECK(isfinite(p[0]) && isfinite(p[count - 1]));
  *sum += (double)p[0] + (double)p[count - 1];
}

static void check_model(const okv_model_t *m, size_t size) {
  const okv_model_config_t *c = &m->config;
  OKV_FUZZ_CHECK(c->dim >= 2 && c->hidden_dim >= 1 && c->n_layers >= 1 && c->seq_len >= 1);
  OKV_FUZZ_CHECK(c->n_q_heads >= 1 && c->n_kv_heads >= 1 && c->n_q_heads % c->n_kv_heads == 0);
  OKV_FUZZ_CHECK(c->head_dim * c->n_q_heads == c->dim);
  OKV_FUZZ_CHECK(c->head_dim % 2 == 0 && c->head_dim <= 256);
  OKV_FUZZ_CHECK(c->vocab_size >= 1);
  uint64_t n = expected_floats(c);
  OKV_FUZZ_CHECK(28 + 4 * n == (uint64_t)size);
  uint64_t D = c->dim, H = c->hidden_dim, L = c->n_layers, V = c->vocab_size;
  uint64_t kvd = (uint64_t)c->n_kv_heads * c->head_dim, qd = (uint64_t)c->n_q_heads * c->head_dim;
  double sum = 0.0;
  check_tensor(m, n, m->token_embedding, V * D, &sum);
  check_tensor(m, n, m->rms_att, L * D, &sum);
  check_tensor(m, n, m->wq, L * qd * D, &sum);
  check_tensor(m, n, m->wk, L * kvd * D, &sum);
  check_tensor(m, n, m->wv, L * kvd * D, &sum);
  check_tensor(m, n, m->wo, L * D * qd, &sum);
  check_tensor(m, n, m->rms_ffn, L * D, &sum);
  check_tensor(m, n, m->w1, L * H * D, &sum);
  check_tensor(m, n, m->w2, L * D * H, &sum);
  check_tensor(m, n, m->w3, L * H * D, &sum);
  check_tensor(m, n, m->rms_final, D, &sum);
  check_tensor(m, n, m->rope_cos, (uint64_t)c->seq_len * c->head_dim / 2, &sum);
  check_tensor(m, n, m->rope_sin, (uint64_t)c->seq_len * c->head_dim / 2, &sum);
  check_tensor(m, n, m->classifier, V * D, &sum);
  OKV_FUZZ_CHECK(c->shared_classifier == (m->classifier == m->token_embedding));
  OKV_FUZZ_CHECK(isfinite(sum));
}

/* The header rules of model.h / llama2c.c, restated: true when the 7 fields
 * describe a model the loader must accept (given a file of the right size). */
static bool header_valid(const int32_t h[7]) {
  static const int64_t lo[7] = {2, 1, 1, 1, 1, -(1 << 20), 1};
  static const int64_t hi[7] = {1 << 16, 1 << 18, 1024, 1024, 1024, 1 << 20, 1 << 20};
  for (int i = 0; i < 7; ++i)
    if (h[i] < lo[i] || h[i] > hi[i]) return false;
  if (h[5] > -4 && h[5] < 4) return false;
  if (h[0] % h[3] != 0 || h[3] % h[4] != 0) return false;
  int32_t head_dim = h[0] / h[3];
  return head_dim % 2 == 0 && head_dim <= 256;
}

/* The input's header with the weights resized to what it declares (filled
 * from the input's bytes, finite), when that is at most 256 KiB: arbitrary
 * shapes reach the success path, whose layout check_model verifies, and the
 * loader must accept exactly the headers header_valid accepts. */
static void load_resized(const uint8_t *data, size_t size) {
  if (size < 28) return;
  int32_t h[7];
  for (int i = 0; i < 7; ++i) h[i] = (int32_t)okv_fuzz_le32(data + 4 * i);
  bool valid = header_valid(h);
  okv_model_config_t c;
  memset(&c, 0, sizeof c);
  uint64_t n = 0;
  if (valid) {
    okv_model_config_from_header(h, &c);
    n = expected_floats(&c);
  } else {
    n = (size - 28) / 4; /* any size: it must be refused */
  }
  if (n > (256u << 10) / 4) return;
  size_t bytes = 28 + 4 * (size_t)n;
  uint8_t *file = malloc(bytes);
  OKV_FUZZ_CHECK(file != NULL);
  memcpy(file, data, 28);
  float *w = malloc((n ? n : 1) * sizeof *w);
  OKV_FUZZ_CHECK(w != NULL);
  size_t tail = size - 28;
  for (uint64_t i = 0; i < n; ++i) w[i] = tail ? (float)(int8_t)data[28 + i % tail] / 64.0f : 0.5f;
  memcpy(file + 28, w, 4 * (size_t)n);
  free(w);
  okv_model_t *m = (okv_model_t *)&size;
  okv_status_code_t code =
      okv_fuzz_status(okv_model_load_memory(file, bytes, "fuzz-resized", okv_fuzz_allocator(), &m));
  if (valid) {
    OKV_FUZZ_CHECK(code == OKV_STATUS_OK);
    check_model(m, bytes);
    OKV_FUZZ_CHECK(memcmp(m->storage, file + 28, bytes - 28) == 0);
    okv_model_free(m);
  } else {
    OKV_FUZZ_CHECK(code == OKV_STATUS_INVALID_ARGUMENT && m == NULL);
  }
  free(file);
}

int okv_fuzz_checkpoint(const uint8_t *data, size_t size) {
  const okv_allocator_t *alloc = okv_fuzz_allocator();
  if (size >= 4 && memcmp(data, "GGUF", 4) == 0) {
    /* The loaders hand GGUF files to the GGUF reader (the gguf harness checks it): the status contract only. */
    okv_model_t *g = (okv_model_t *)&size;
    okv_status_code_t gc = okv_fuzz_status(okv_model_load_memory(data, size, "fuzz", alloc, &g));
    OKV_FUZZ_CHECK(gc == OKV_STATUS_OK ? g != NULL : g == NULL);
    OKV_FUZZ_CHECK(gc == OKV_STATUS_OK || gc == OKV_STATUS_INVALID_ARGUMENT || gc == OKV_STATUS_OUT_OF_MEMORY);
    okv_model_free(gc == OKV_STATUS_OK ? g : NULL);
    return 0;
  }
  okv_model_t *m = (okv_model_t *)&size; /* must be reset to NULL on failure */
  okv_status_code_t code = okv_fuzz_status(okv_model_load_memory(data, size, "fuzz", alloc, &m));
  if (code != OKV_STATUS_OK) {
    OKV_FUZZ_CHECK(m == NULL);
    OKV_FUZZ_CHECK(code == OKV_STATUS_INVALID_ARGUMENT);
  } else {
    OKV_FUZZ_CHECK(m != NULL);
    check_model(m, size);
    /* The weights are the file's bytes after the header. */
    OKV_FUZZ_CHECK(memcmp(m->storage, data + 28, size - 28) == 0);
  }

  /* The path loader on the same bytes: same verdict, same weights. */
  char path[64];
  int fd = okv_fuzz_memfile(data, size, path, sizeof path);
  if (fd >= 0) {
    okv_model_t *m2 = (okv_model_t *)&size;
    okv_status_code_t code2 = okv_fuzz_status(okv_model_load(path, alloc, &m2));
    close(fd);
    OKV_FUZZ_CHECK(code2 == code);
    if (code2 == OKV_STATUS_OK) {
      const okv_model_config_t *a = &m->config, *b = &m2->config;
      OKV_FUZZ_CHECK(a->dim == b->dim && a->hidden_dim == b->hidden_dim && a->n_layers == b->n_layers);
      OKV_FUZZ_CHECK(a->n_q_heads == b->n_q_heads && a->n_kv_heads == b->n_kv_heads);
      OKV_FUZZ_CHECK(a->vocab_size == b->vocab_size && a->seq_len == b->seq_len && a->head_dim == b->head_dim);
      OKV_FUZZ_CHECK(a->shared_classifier == b->shared_classifier);
      OKV_FUZZ_CHECK(memcmp(m2->storage, m->storage, size - 28) == 0);
      okv_model_free(m2);
    } else {
      OKV_FUZZ_CHECK(m2 == NULL);
    }
  }
  okv_model_free(code == OKV_STATUS_OK ? m : NULL);
  load_resized(data, size);
  return 0;
}

#ifndef OKV_FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return okv_fuzz_checkpoint(data, size); }
#endif
