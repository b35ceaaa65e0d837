/* `oasiskv info --model FILE`: a model file's shape (layers, query and KV
 * heads, head_dim, FFN width, vocabulary), context length, RoPE theta and
 * scaling, tensor types, tokenizer, and whether eval/generate can load it.
 * GGUF files are described from their metadata (any architecture, any ggml
 * type); llama2.c checkpoints from their header. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "cli.h"
#include "model/gguf.h"
#include "model/model.h"

/* "1.00 GiB", "512.0 MiB", "64 B". */
static void fmt_size(uint64_t bytes, char *out, size_t n) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0)
    snprintf(out, n, "%" PRIu64 " B", bytes);
  else
    snprintf(out, n, v >= 100.0 ? "%.0f %s" : v >= 10.0 ? "%.1f %s" : "%.2f %s", v, units[u]);
}

/* A metadata string as a NUL-terminated copy ("" when absent or not a string),
 * control characters replaced by '?' (file text goes to a terminal). */
static void meta_str(const okv_gguf_t *g, const char *key, char *out, size_t cap) {
  const char *p;
  size_t n;
  out[0] = '\0';
  okv_status_t s = okv_gguf_get_str(g, key, &p, &n);
  if (s) {
    okv_status_free(s);
    return;
  }
  snprintf(out, cap, "%.*s", n > cap - 1 ? (int)(cap - 1) : (int)n, p);
  for (char *c = out; *c; ++c)
    if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
}

/* "<arch>.<key>" as an integer; -1 when absent or not an integer. */
static long long meta_arch_u32(const okv_gguf_t *g, const char *arch, const char *key) {
  char full[160];
  snprintf(full, sizeof full, "%s.%s", arch, key);
  uint32_t v;
  okv_status_t s = okv_gguf_get_u32(g, full, &v);
  if (s) {
    okv_status_free(s);
    return -1;
  }
  return v;
}

/* "<arch>.<key>" as a float; -1 when absent or not a float. */
static double meta_arch_f32(const okv_gguf_t *g, const char *arch, const char *key) {
  char full[160];
  snprintf(full, sizeof full, "%s.%s", arch, key);
  float v;
  okv_status_t s = okv_gguf_get_f32(g, full, &v);
  if (s) {
    okv_status_free(s);
    return -1.0;
  }
  return v;
}

static void add_num_or_null(json_object *o, const char *k, long long v) {
  json_object_object_add(o, k, v >= 0 ? json_object_new_int64(v) : NULL);
}

static int info_gguf(const char *path, bool as_json) {
  okv_gguf_t *g = NULL;
  okv_status_t s = okv_gguf_open(path, NULL, &g);
  if (s) {
    fprintf(stderr, "oasiskv info: %s\n", okv_status_message(s));
    okv_status_free(s);
    return 1;
  }
  char arch[64], name[128], tok_model[64], tok_pre[64], scaling[64], key[160];
  meta_str(g, "general.architecture", arch, sizeof arch);
  meta_str(g, "general.name", name, sizeof name);
  meta_str(g, "tokenizer.ggml.model", tok_model, sizeof tok_model);
  meta_str(g, "tokenizer.ggml.pre", tok_pre, sizeof tok_pre);
  snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
  meta_str(g, key, scaling, sizeof scaling);
  const long long layers = meta_arch_u32(g, arch, "block_count"), dim = meta_arch_u32(g, arch, "embedding_length");
  const long long heads = meta_arch_u32(g, arch, "attention.head_count");
  long long kv_heads = meta_arch_u32(g, arch, "attention.head_count_kv");
  if (kv_heads < 0) kv_heads = heads;
  long long head_dim = meta_arch_u32(g, arch, "attention.key_length");
  if (head_dim < 0 && heads > 0 && dim >= 0) head_dim = dim / heads;
  const long long ffn = meta_arch_u32(g, arch, "feed_forward_length");
  const long long ctx = meta_arch_u32(g, arch, "context_length");
  double theta = meta_arch_f32(g, arch, "rope.freq_base");
  if (theta < 0 && !strcmp(arch, "llama")) theta = 10000.0; /* llama's default when the key is absent */
  const double scale_factor = meta_arch_f32(g, arch, "rope.scaling.factor");
  const long long scale_orig = meta_arch_u32(g, arch, "rope.scaling.original_context_length");
  const double eps = meta_arch_f32(g, arch, "attention.layer_norm_rms_epsilon");
  long long vocab = -1;
  okv_gguf_tensor_t te;
  s = okv_gguf_tensor_find(g, "token_embd.weight", &te);
  if (!s && te.n_dims == 2) vocab = (long long)te.dims[1];
  okv_status_free(s);
  uint64_t n_tokens = 0;
  okv_gguf_type_t et;
  s = okv_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n_tokens, NULL);
  const bool have_tokens = s == OKV_OK;
  okv_status_free(s);
  if (vocab < 0 && have_tokens) vocab = (long long)n_tokens;
  /* Tensor types: count and bytes per ggml type code (all codes the reader knows are < 64). */
  uint64_t type_count[64] = {0}, type_bytes[64] = {0}, n_params = 0;
  const uint64_t n_tensors = okv_gguf_tensor_count(g);
  bool have_rope_freqs = false;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    okv_gguf_tensor_t t;
    if (okv_status_consume(okv_gguf_tensor_at(g, i, &t)) != OKV_STATUS_OK) continue; /* i < count: never */
    if (t.type < 64) {
      type_count[t.type]++;
      type_bytes[t.type] += t.n_bytes;
    }
    uint64_t e = 1;
    for (uint32_t d = 0; d < t.n_dims; ++d) e *= t.dims[d];
    n_params += e;
    if (t.name_len == 17 && !memcmp(t.name, "rope_freqs.weight", 17)) have_rope_freqs = true;
  }
  /* Whether eval/generate can load it, and what it costs. */
  okv_model_config_t mc;
  uint64_t f32_bytes = 0;
  okv_status_t load = okv_model_gguf_config(g, NULL, &mc, &f32_bytes);
  if (as_json) {
    json_object *o = json_object_new_object();
    json_object_object_add(o, "path", json_object_new_string(path));
    json_object_object_add(o, "format", json_object_new_string("gguf"));
    json_object_object_add(o, "gguf_version", json_object_new_int64(okv_gguf_version(g)));
    json_object_object_add(o, "architecture", json_object_new_string(arch));
    json_object_object_add(o, "name", json_object_new_string(name));
    add_num_or_null(o, "layers", layers);
    add_num_or_null(o, "query_heads", heads);
    add_num_or_null(o, "kv_heads", kv_heads);
    add_num_or_null(o, "head_dim", head_dim);
    add_num_or_null(o, "dim", dim);
    add_num_or_null(o, "ffn", ffn);
    add_num_or_null(o, "vocab", vocab);
    add_num_or_null(o, "context_length", ctx);
    json_object_object_add(o, "rope_theta", theta > 0 ? json_object_new_double(theta) : NULL);
    json_object_object_add(o, "rope_scaling", json_object_new_string(scaling[0] ? scaling : "none"));
    json_object_object_add(o, "rope_scaling_factor", scale_factor > 0 ? json_object_new_double(scale_factor) : NULL);
    json_object_object_add(o, "rope_freqs_tensor", json_object_new_boolean(have_rope_freqs));
    json_object_object_add(o, "rms_epsilon", eps > 0 ? json_object_new_double(eps) : NULL);
    json_object_object_add(o, "parameters", json_object_new_int64((int64_t)n_params));
    json_object *jt = json_object_new_object();
    for (uint32_t t = 0; t < 64; ++t) {
      if (!type_count[t]) continue;
      const char *tn = okv_ggml_type_name(t);
      json_object_object_add(jt, tn ? tn : "?", json_object_new_int64((int64_t)type_count[t]));
    }
    json_object_object_add(o, "tensor_types", jt);
    json_object_object_add(o, "tokenizer_model", tok_model[0] ? json_object_new_string(tok_model) : NULL);
    json_object_object_add(o, "tokenizer_pre", tok_pre[0] ? json_object_new_string(tok_pre) : NULL);
    json_object_object_add(o, "tokenizer_tokens", have_tokens ? json_object_new_int64((int64_t)n_tokens) : NULL);
    json_object_object_add(o, "loadable", json_object_new_boolean(load == OKV_OK));
    if (load)
      json_object_object_add(o, "load_error", json_object_new_string(okv_status_message(load)));
    else
      json_object_object_add(o, "f32_bytes", json_object_new_int64((int64_t)f32_bytes));
    printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
  } else {
    char fsz[32], buf[32];
    fmt_size(okv_gguf_file_size(g), fsz, sizeof fsz);
    printf("model %s: GGUF v%u, %s, %llu metadata keys, %llu tensors, %.2fM parameters\n", path, okv_gguf_version(g),
           fsz, (unsigned long long)okv_gguf_kv_count(g), (unsigned long long)n_tensors, (double)n_params / 1e6);
    printf("  architecture %s", arch[0] ? arch : "(none)");
    if (name[0]) printf(" (name '%s')", name);
    printf("\n  shape: layers %lld, query heads %lld, KV heads %lld, head_dim %lld, dim %lld, ffn %lld, vocab %lld\n",
           layers, heads, kv_heads, head_dim, dim, ffn, vocab);
    printf("  context length %lld\n", ctx);
    if (theta > 0)
      printf("  rope: theta %g, scaling %s", theta, scaling[0] ? scaling : "none");
    else
      printf("  rope: none in the metadata");
    if (scale_factor > 0) {
      printf(" (factor %g", scale_factor);
      if (scale_orig >= 0) printf(", original context %lld", scale_orig);
      printf(")");
    }
    printf("%s\n", have_rope_freqs ? ", rope_freqs tensor (Llama 3 frequency factors)" : "");
    if (eps > 0) printf("  rms epsilon %g\n", eps);
    printf("  tensor types:");
    for (uint32_t t = 0; t < 64; ++t) {
      if (!type_count[t]) continue;
      const char *tn = okv_ggml_type_name(t);
      fmt_size(type_bytes[t], buf, sizeof buf);
      printf(" %s %llu (%s)", tn ? tn : "?", (unsigned long long)type_count[t], buf);
    }
    printf("%s\n", n_tensors ? "" : " none (a vocabulary-only file)");
    printf("  tokenizer: %s", tok_model[0] ? tok_model : "(none)");
    if (tok_pre[0]) printf(", pre-tokenizer %s", tok_pre);
    if (have_tokens) printf(", %llu tokens", (unsigned long long)n_tokens);
    printf("\n");
    if (load == OKV_OK) {
      fmt_size(f32_bytes, buf, sizeof buf);
      printf("  loads: yes, %s of f32 weights and RoPE tables after dequantisation\n", buf);
    } else {
      printf("  loads: no: %s\n", okv_status_message(load));
    }
  }
  okv_status_free(load);
  okv_gguf_close(g);
  return 0;
}

/* A llama2.c checkpoint: its header config, loaded the way eval loads it. */
static int info_checkpoint(const char *path, bool as_json) {
  okv_model_t *m = NULL;
  okv_status_t s = okv_model_load(path, NULL, &m);
  if (s) {
    fprintf(stderr, "oasiskv info: %s\n", okv_status_message(s));
    okv_status_free(s);
    return 1;
  }
  const okv_model_config_t *c = &m->config;
  if (as_json) {
    json_object *o = json_object_new_object();
    json_object_object_add(o, "path", json_object_new_string(path));
    json_object_object_add(o, "format", json_object_new_string("llama2.c"));
    json_object_object_add(o, "layers", json_object_new_int64(c->n_layers));
    json_object_object_add(o, "query_heads", json_object_new_int64(c->n_q_heads));
    json_object_object_add(o, "kv_heads", json_object_new_int64(c->n_kv_heads));
    json_object_object_add(o, "head_dim", json_object_new_int64(c->head_dim));
    json_object_object_add(o, "dim", json_object_new_int64(c->dim));
    json_object_object_add(o, "ffn", json_object_new_int64(c->hidden_dim));
    json_object_object_add(o, "vocab", json_object_new_int64(c->vocab_size));
    json_object_object_add(o, "context_length", json_object_new_int64(c->seq_len));
    json_object_object_add(o, "rope_theta", json_object_new_double(c->rope_theta));
    json_object_object_add(o, "shared_classifier", json_object_new_boolean(c->shared_classifier));
    json_object_object_add(o, "loadable", json_object_new_boolean(1));
    printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
  } else {
    printf("model %s: llama2.c checkpoint\n", path);
    printf("  shape: layers %u, query heads %u, KV heads %u, head_dim %u, dim %u, ffn %u, vocab %u\n", c->n_layers,
           c->n_q_heads, c->n_kv_heads, c->head_dim, c->dim, c->hidden_dim, c->vocab_size);
    printf("  context length %u (seq_len)\n", c->seq_len);
    printf("  rope: theta %g (tables stored in the file), scaling none\n", (double)c->rope_theta);
    printf("  rms epsilon %g\n", (double)c->rms_eps);
    printf("  tensor types: F32 (classifier %s)\n", c->shared_classifier ? "shared with the embedding" : "separate");
    printf("  tokenizer: a separate llama2.c tokenizer file (--tokenizer)\n");
    printf("  loads: yes\n");
  }
  okv_model_free(m);
  return 0;
}

int okv_cli_info_model(const char *path, bool as_json) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "oasiskv info: model '%s': %s\n", path, strerror(errno));
    return 1;
  }
  char magic[4] = {0};
  const bool gguf = fread(magic, 1, sizeof magic, f) == sizeof magic && !memcmp(magic, "GGUF", 4);
  fclose(f);
  return gguf ? info_gguf(path, as_json) : info_checkpoint(path, as_json);
}
