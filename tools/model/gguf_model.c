/* A llama-architecture GGUF file into okv_model_t (see model.h,
 * okv_model_load_gguf). Every tensor is validated (name, shape, type) and the
 * total size computed overflow-safe before the one f32 allocation; then the
 * tensors are dequantised into it and the RoPE tables computed. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/gguf.h"
#include "model/model.h"

#define MAX_CONTEXT (1u << 20)

/* acc += a * b; false when it does not fit 64 bits. */
static bool add_product(uint64_t *acc, uint64_t a, uint64_t b) {
  if (a != 0 && b > UINT64_MAX / a) return false;
  uint64_t p = a * b;
  if (p > UINT64_MAX - *acc) return false;
  *acc += p;
  return true;
}

/* "<arch>.<key>" metadata as uint32 in [lo, hi]; `def` when absent and def_ok. */
static okv_status_t get_hparam(const okv_gguf_t *g, const char *key, uint32_t lo, uint32_t hi, bool def_ok,
                               uint32_t def, uint32_t *out) {
  char full[128];
  snprintf(full, sizeof full, "llama.%s", key);
  okv_status_t s = okv_gguf_get_u32(g, full, out);
  if (s && okv_status_code(s) == OKV_STATUS_NOT_FOUND) {
    okv_status_free(s);
    if (def_ok) {
      *out = def;
      return OKV_OK;
    }
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': missing hyperparameter %s", okv_gguf_name(g), full);
  }
  if (s) return s;
  if (*out < lo || *out > hi)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': %s = %u out of range [%u, %u]", okv_gguf_name(g),
                           full, *out, lo, hi);
  return OKV_OK;
}

static okv_status_t get_fparam(const okv_gguf_t *g, const char *key, bool def_ok, float def, float *out) {
  char full[128];
  snprintf(full, sizeof full, "llama.%s", key);
  okv_status_t s = okv_gguf_get_f32(g, full, out);
  if (s && okv_status_code(s) == OKV_STATUS_NOT_FOUND && def_ok) {
    okv_status_free(s);
    *out = def;
    return OKV_OK;
  }
  if (s && okv_status_code(s) == OKV_STATUS_NOT_FOUND) {
    okv_status_free(s);
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': missing hyperparameter %s", okv_gguf_name(g), full);
  }
  if (s) return s;
  if (!isfinite(*out) || *out <= 0.0f)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': %s = %g must be a positive finite number",
                           okv_gguf_name(g), full, (double)*out);
  return OKV_OK;
}

/* The expected tensors, in the storage order of okv_model_t. */
enum {
  T_EMBD,
  T_ATTN_NORM,
  T_Q,
  T_K,
  T_V,
  T_O,
  T_FFN_NORM,
  T_GATE,
  T_DOWN,
  T_UP,
  T_OUT_NORM,
  T_OUTPUT,
  T_ROPE_FREQS,
  T_COUNT
};

typedef struct tensor_spec_t {
  const char *name; /* "blk.%u." is prefixed for per-layer tensors */
  bool per_layer;
  bool optional;
  uint64_t ne0, ne1; /* ne1 == 0: one-dimensional */
} tensor_spec_t;

/* Which spec a file tensor name is (per-layer: its layer in *layer), or -1. */
static int classify(const tensor_spec_t *specs, const char *name, size_t len, uint32_t n_layers, uint32_t *layer) {
  char buf[96];
  if (len >= sizeof buf) return -1;
  memcpy(buf, name, len);
  buf[len] = '\0';
  unsigned l = 0;
  int pos = 0;
  const char *rest = buf;
  if (sscanf(buf, "blk.%u.%n", &l, &pos) == 1 && pos > 0) {
    char check[32];
    snprintf(check, sizeof check, "blk.%u.", l);
    if (strncmp(buf, check, strlen(check)) != 0 || l >= n_layers) return -1; /* "blk.01." or out of range */
    rest = buf + pos;
  } else {
    pos = 0;
  }
  for (int i = 0; i < T_COUNT; ++i) {
    if (specs[i].per_layer != (pos > 0)) continue;
    if (strcmp(rest, specs[i].name) == 0) {
      *layer = l;
      return i;
    }
  }
  return -1;
}

static okv_status_t check_shape(const okv_gguf_t *g, const okv_gguf_tensor_t *t, const tensor_spec_t *sp) {
  char qn[96];
  okv_gguf_quote(t->name, t->name_len, qn, sizeof qn);
  const bool ok = sp->ne1 == 0 ? (t->n_dims == 1 && t->dims[0] == sp->ne0)
                               : (t->n_dims == 2 && t->dims[0] == sp->ne0 && t->dims[1] == sp->ne1);
  if (!ok)
    return okv_status_make(
        OKV_STATUS_INVALID_ARGUMENT,
        "gguf '%s': tensor '%s' has shape [%llu, %llu, %llu, %llu] (%u dims), expected [%llu%s%.0llu]",
        okv_gguf_name(g), qn, (unsigned long long)t->dims[0], (unsigned long long)t->dims[1],
        (unsigned long long)t->dims[2], (unsigned long long)t->dims[3], t->n_dims, (unsigned long long)sp->ne0,
        sp->ne1 ? ", " : "", (unsigned long long)sp->ne1);
  switch (t->type) {
    case OKV_GGML_TYPE_F32:
    case OKV_GGML_TYPE_F16:
    case OKV_GGML_TYPE_BF16:
    case OKV_GGML_TYPE_Q8_0:
    case OKV_GGML_TYPE_Q4_0: return OKV_OK;
    default: {
      const char *tn = okv_ggml_type_name(t->type);
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "gguf '%s': tensor '%s' has type %s, which is not supported (F32, F16, BF16, Q8_0, Q4_0 "
                             "are)",
                             okv_gguf_name(g), qn, tn ? tn : "unknown");
    }
  }
}

/* Hyperparameters into *c (seq_len = the file's context or the override). */
static okv_status_t read_config(const okv_gguf_t *g, uint32_t ctx_override, okv_model_config_t *c) {
  const char *name = okv_gguf_name(g);
  const char *arch;
  size_t arch_len;
  okv_status_t s = okv_gguf_get_str(g, "general.architecture", &arch, &arch_len);
  if (s && okv_status_code(s) == OKV_STATUS_NOT_FOUND) {
    okv_status_free(s);
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': no general.architecture (not a model file)", name);
  }
  if (s) return s;
  char q[96];
  if (arch_len != 5 || memcmp(arch, "llama", 5) != 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "gguf '%s': architecture '%s' is not supported (only 'llama' is)", name,
                           okv_gguf_quote(arch, arch_len, q, sizeof q));
  memset(c, 0, sizeof *c);
  OKV_RETURN_IF_ERROR(get_hparam(g, "block_count", 1, 1024, false, 0, &c->n_layers));
  OKV_RETURN_IF_ERROR(get_hparam(g, "embedding_length", 2, 1u << 16, false, 0, &c->dim));
  OKV_RETURN_IF_ERROR(get_hparam(g, "feed_forward_length", 1, 1u << 18, false, 0, &c->hidden_dim));
  OKV_RETURN_IF_ERROR(get_hparam(g, "attention.head_count", 1, 1024, false, 0, &c->n_q_heads));
  OKV_RETURN_IF_ERROR(get_hparam(g, "attention.head_count_kv", 1, 1024, true, c->n_q_heads, &c->n_kv_heads));
  if (c->dim % c->n_q_heads != 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "gguf '%s': embedding_length %u is not a multiple of "
                           "head_count %u",
                           name, c->dim, c->n_q_heads);
  if (c->n_q_heads % c->n_kv_heads != 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "gguf '%s': head_count %u is not a multiple of head_count_kv %u", name, c->n_q_heads,
                           c->n_kv_heads);
  c->head_dim = c->dim / c->n_q_heads;
  if (c->head_dim % 2 != 0 || c->head_dim > 256)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': head_dim %u must be even and <= 256", name,
                           c->head_dim);
  uint32_t v;
  OKV_RETURN_IF_ERROR(get_hparam(g, "rope.dimension_count", 0, UINT32_MAX, true, c->head_dim, &v));
  if (v != c->head_dim)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "gguf '%s': llama.rope.dimension_count %u differs from head_dim %u (partial RoPE is not "
                           "supported)",
                           name, v, c->head_dim);
  OKV_RETURN_IF_ERROR(get_hparam(g, "attention.key_length", 0, UINT32_MAX, true, c->head_dim, &v));
  uint32_t vl;
  OKV_RETURN_IF_ERROR(get_hparam(g, "attention.value_length", 0, UINT32_MAX, true, c->head_dim, &vl));
  if (v != c->head_dim || vl != c->head_dim)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "gguf '%s': attention key/value length %u/%u differ from embedding_length/head_count = %u",
                           name, v, vl, c->head_dim);
  OKV_RETURN_IF_ERROR(get_hparam(g, "context_length", 1, MAX_CONTEXT, false, 0, &c->seq_len));
  if (ctx_override) c->seq_len = ctx_override;
  OKV_RETURN_IF_ERROR(get_fparam(g, "attention.layer_norm_rms_epsilon", false, 0.0f, &c->rms_eps));
  OKV_RETURN_IF_ERROR(get_fparam(g, "rope.freq_base", true, 10000.0f, &c->rope_theta));
  /* RoPE scaling: none, or linear (positions divided by the factor). */
  c->rope_pos_scale = 1.0f;
  const char *st;
  size_t st_len = 0;
  s = okv_gguf_get_str(g, "llama.rope.scaling.type", &st, &st_len);
  if (s && okv_status_code(s) != OKV_STATUS_NOT_FOUND) return s;
  bool linear = false;
  if (!s) {
    if (st_len == 6 && memcmp(st, "linear", 6) == 0)
      linear = true;
    else if (!(st_len == 4 && memcmp(st, "none", 4) == 0))
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "gguf '%s': llama.rope.scaling.type '%s' is not supported (none and linear are)", name,
                             okv_gguf_quote(st, st_len, q, sizeof q));
  }
  okv_status_free(s);
  float factor = 1.0f;
  if (linear) {
    OKV_RETURN_IF_ERROR(get_fparam(g, "rope.scaling.factor", true, 1.0f, &factor));
  } else {
    /* The older key: linear scaling without a type. */
    OKV_RETURN_IF_ERROR(get_fparam(g, "rope.scale_linear", true, 1.0f, &factor));
  }
  c->rope_pos_scale = 1.0f / factor;
  return OKV_OK;
}

static void make_specs(const okv_model_config_t *c, tensor_spec_t specs[T_COUNT]) {
  const uint64_t D = c->dim, H = c->hidden_dim, V = c->vocab_size, hd = c->head_dim;
  const uint64_t kvd = (uint64_t)c->n_kv_heads * hd;
  const tensor_spec_t s[T_COUNT] = {
      [T_EMBD] = {"token_embd.weight", false, false, D, V},
      [T_ATTN_NORM] = {"attn_norm.weight", true, false, D, 0},
      [T_Q] = {"attn_q.weight", true, false, D, D},
      [T_K] = {"attn_k.weight", true, false, D, kvd},
      [T_V] = {"attn_v.weight", true, false, D, kvd},
      [T_O] = {"attn_output.weight", true, false, D, D},
      [T_FFN_NORM] = {"ffn_norm.weight", true, false, D, 0},
      [T_GATE] = {"ffn_gate.weight", true, false, D, H},
      [T_DOWN] = {"ffn_down.weight", true, false, H, D},
      [T_UP] = {"ffn_up.weight", true, false, D, H},
      [T_OUT_NORM] = {"output_norm.weight", false, false, D, 0},
      [T_OUTPUT] = {"output.weight", false, true, D, V},
      [T_ROPE_FREQS] = {"rope_freqs.weight", false, true, hd / 2, 0},
  };
  memcpy(specs, s, sizeof s);
}

/* Everything but the weights: the config (shared_classifier set from the
 * presence of output.weight), whether rope_freqs is present, and the f32
 * count of the storage. Allocates nothing. */
static okv_status_t validate(const okv_gguf_t *g, uint32_t ctx, okv_model_config_t *out_c, bool *out_have_freqs,
                             uint64_t *out_n_floats) {
  const char *name = okv_gguf_name(g);
  if (ctx > MAX_CONTEXT)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': context length %u out of range [1, %u]", name, ctx,
                           MAX_CONTEXT);
  okv_model_config_t c;
  OKV_RETURN_IF_ERROR(read_config(g, ctx, &c));

  /* The vocabulary: the embedding's rows. */
  okv_gguf_tensor_t te;
  okv_status_t s = okv_gguf_tensor_find(g, "token_embd.weight", &te);
  if (s) {
    okv_status_free(s);
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': no tensor token_embd.weight", name);
  }
  if (te.n_dims != 2 || te.dims[1] < 1 || te.dims[1] > (1u << 20))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "gguf '%s': token_embd.weight has %u dims and %llu rows (expected 2 dims, 1..2^20 rows)",
                           name, te.n_dims, (unsigned long long)te.dims[1]);
  c.vocab_size = (uint32_t)te.dims[1];
  okv_gguf_type_t et;
  uint64_t n_tokens;
  s = okv_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n_tokens, NULL);
  if (!s && n_tokens != c.vocab_size)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "gguf '%s': the vocabulary has %llu tokens but token_embd.weight has %u rows", name,
                           (unsigned long long)n_tokens, c.vocab_size);
  if (s && okv_status_code(s) != OKV_STATUS_NOT_FOUND) return s;
  okv_status_free(s);
  uint32_t vs;
  OKV_RETURN_IF_ERROR(get_hparam(g, "vocab_size", 0, UINT32_MAX, true, c.vocab_size, &vs));
  if (vs != c.vocab_size)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "gguf '%s': llama.vocab_size %u disagrees with token_embd.weight's %u rows", name, vs,
                           c.vocab_size);

  const uint64_t D = c.dim, H = c.hidden_dim, L = c.n_layers, V = c.vocab_size, hd = c.head_dim;
  const uint64_t kvd = (uint64_t)c.n_kv_heads * hd;
  tensor_spec_t specs[T_COUNT];
  make_specs(&c, specs);
  /* Every tensor of the file must be one we use; check names, shapes, types. */
  bool have_output = false, have_freqs = false;
  uint64_t n_found = 0;
  for (uint64_t i = 0; i < okv_gguf_tensor_count(g); ++i) {
    okv_gguf_tensor_t t;
    OKV_RETURN_IF_ERROR(okv_gguf_tensor_at(g, i, &t));
    uint32_t layer = 0;
    int k = classify(specs, t.name, t.name_len, c.n_layers, &layer);
    char qn[96];
    if (k < 0)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "gguf '%s': unexpected tensor '%s' for a %u-layer llama model", name,
                             okv_gguf_quote(t.name, t.name_len, qn, sizeof qn), c.n_layers);
    OKV_RETURN_IF_ERROR(check_shape(g, &t, &specs[k]));
    if (k == T_OUTPUT) have_output = true;
    if (k == T_ROPE_FREQS) have_freqs = true;
    ++n_found;
  }
  /* Names are unique (checked at open), so all required ones are present iff the count matches. */
  const uint64_t n_required = 2 + 9 * L; /* token_embd, output_norm, 9 per layer */
  if (n_found != n_required + have_output + have_freqs) {
    for (int k = 0; k < T_COUNT; ++k) {
      if (specs[k].optional) continue;
      for (uint32_t l = 0; l < (specs[k].per_layer ? c.n_layers : 1); ++l) {
        char tn[96];
        if (specs[k].per_layer)
          snprintf(tn, sizeof tn, "blk.%u.%s", l, specs[k].name);
        else
          snprintf(tn, sizeof tn, "%s", specs[k].name);
        okv_gguf_tensor_t t;
        s = okv_gguf_tensor_find(g, tn, &t);
        if (s) {
          okv_status_free(s);
          return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': missing tensor %s", name, tn);
        }
      }
    }
    return okv_status_make(OKV_STATUS_INTERNAL, "gguf '%s': tensor count mismatch", name);
  }

  /* Storage: weights in okv_model_t order, RoPE tables, classifier, freq factors. */
  c.shared_classifier = !have_output;
  uint64_t n = 0;
  const uint64_t rope_n = (uint64_t)c.seq_len * (hd / 2);
  bool ok = add_product(&n, V, D) && add_product(&n, L, D) && add_product(&n, L * D, D) &&
            add_product(&n, 2 * L * kvd, D) && add_product(&n, L * D, D) && add_product(&n, L, D) &&
            add_product(&n, 3 * L * H, D) && add_product(&n, 1, D) && add_product(&n, 2, rope_n) &&
            add_product(&n, have_output ? V : 0, D) && add_product(&n, have_freqs ? 1 : 0, hd / 2);
  if (!ok || n > SIZE_MAX / sizeof(float))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': the model does not fit this address space", name);
  *out_c = c;
  *out_have_freqs = have_freqs;
  *out_n_floats = n;
  return OKV_OK;
}

okv_status_t okv_model_gguf_config(const okv_gguf_t *g, const okv_model_load_options_t *options,
                                   okv_model_config_t *out_config, uint64_t *out_f32_bytes) {
  if (!g || !out_config)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_model_gguf_config: NULL g or out_config");
  bool have_freqs;
  uint64_t n;
  OKV_RETURN_IF_ERROR(validate(g, options ? options->context_length : 0, out_config, &have_freqs, &n));
  if (out_f32_bytes) *out_f32_bytes = n * sizeof(float);
  return OKV_OK;
}

okv_status_t okv_model_load_gguf(const okv_gguf_t *g, const okv_model_load_options_t *options,
                                 const okv_allocator_t *allocator, okv_model_t **out_model) {
  if (out_model) *out_model = NULL;
  if (!g || !out_model) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_model_load_gguf: NULL g or out_model");
  const char *name = okv_gguf_name(g);
  okv_allocator_t alloc = allocator ? *allocator : okv_allocator_system();
  okv_model_config_t c;
  bool have_freqs;
  uint64_t n;
  OKV_RETURN_IF_ERROR(validate(g, options ? options->context_length : 0, &c, &have_freqs, &n));
  const bool have_output = !c.shared_classifier;
  const uint64_t D = c.dim, H = c.hidden_dim, L = c.n_layers, V = c.vocab_size, hd = c.head_dim;
  const uint64_t kvd = (uint64_t)c.n_kv_heads * hd;
  const uint64_t rope_n = (uint64_t)c.seq_len * (hd / 2);
  tensor_spec_t specs[T_COUNT];
  make_specs(&c, specs);
  okv_status_t s = OKV_OK;
  okv_model_t *m = okv_calloc(&alloc, 1, sizeof *m);
  if (!m) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "gguf '%s': out of memory", name);
  m->allocator = alloc;
  m->config = c;
  m->storage = okv_malloc(&alloc, (size_t)n * sizeof(float));
  if (!m->storage) {
    okv_model_free(m);
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "gguf '%s': cannot allocate %llu bytes of f32 weights", name,
                           (unsigned long long)n * sizeof(float));
  }
  float *p = m->storage;
  float *dst[T_COUNT] = {0};
  const uint64_t per_layer[T_COUNT] = {
      [T_EMBD] = V * D, [T_ATTN_NORM] = D,  [T_Q] = D * D,           [T_K] = kvd * D,  [T_V] = kvd * D,
      [T_O] = D * D,    [T_FFN_NORM] = D,   [T_GATE] = H * D,        [T_DOWN] = D * H, [T_UP] = H * D,
      [T_OUT_NORM] = D, [T_OUTPUT] = V * D, [T_ROPE_FREQS] = hd / 2,
  };
  for (int k = T_EMBD; k <= T_OUT_NORM; ++k) {
    dst[k] = p;
    p += per_layer[k] * (specs[k].per_layer ? L : 1);
  }
  float *rope_cos = p, *rope_sin = p + rope_n;
  p += 2 * rope_n;
  if (have_output) {
    dst[T_OUTPUT] = p;
    p += V * D;
  }
  if (have_freqs) dst[T_ROPE_FREQS] = p;
  for (uint64_t i = 0; i < okv_gguf_tensor_count(g) && !s; ++i) {
    okv_gguf_tensor_t t;
    OKV_IGNORE_ERROR(okv_gguf_tensor_at(g, i, &t)); /* i < count */
    uint32_t layer = 0;
    int k = classify(specs, t.name, t.name_len, c.n_layers, &layer);
    float *d = dst[k] + (uint64_t)layer * per_layer[k];
    s = okv_ggml_dequantize(t.type, t.data, per_layer[k], d);
    for (uint64_t j = 0; j < per_layer[k] && !s; ++j)
      if (!isfinite(d[j])) {
        char qn[96];
        s = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': tensor '%s' element %llu is not finite", name,
                            okv_gguf_quote(t.name, t.name_len, qn, sizeof qn), (unsigned long long)j);
      }
  }
  if (!s && have_freqs)
    for (uint64_t j = 0; j < hd / 2 && !s; ++j)
      if (!(dst[T_ROPE_FREQS][j] > 0.0f))
        s = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': rope_freqs.weight[%llu] = %g is not positive",
                            name, (unsigned long long)j, (double)dst[T_ROPE_FREQS][j]);
  if (s) {
    okv_model_free(m);
    return s;
  }
  /* RoPE tables, f32 as llama2.c's exporter and Hugging Face compute them:
   * inv_freq_j = 1 / theta^(f32(2j) / f32(head_dim)), angle = f32(pos) * inv_freq_j. */
  const uint32_t half = c.head_dim / 2;
  float inv_freq[128];
  for (uint32_t j = 0; j < half; ++j) {
    const float e = (float)(2 * j) / (float)c.head_dim;
    inv_freq[j] = (float)(1.0 / pow((double)c.rope_theta, (double)e));
    if (have_freqs) inv_freq[j] /= dst[T_ROPE_FREQS][j];
  }
  for (uint64_t pos = 0; pos < c.seq_len && !s; ++pos)
    for (uint32_t j = 0; j < half && !s; ++j) {
      const float angle = ((float)pos * c.rope_pos_scale) * inv_freq[j];
      if (!isfinite(angle)) /* a tiny scaling factor or frequency factor */
        s = okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                            "gguf '%s': the RoPE angle of position %llu, pair %u is not finite (rope.freq_base %g, "
                            "position scale %g, frequency factor %g)",
                            name, (unsigned long long)pos, j, (double)c.rope_theta, (double)c.rope_pos_scale,
                            have_freqs ? (double)dst[T_ROPE_FREQS][j] : 1.0);
      rope_cos[pos * half + j] = (float)cos((double)angle);
      rope_sin[pos * half + j] = (float)sin((double)angle);
    }
  if (s) {
    okv_model_free(m);
    return s;
  }
  m->token_embedding = dst[T_EMBD];
  m->rms_att = dst[T_ATTN_NORM];
  m->wq = dst[T_Q];
  m->wk = dst[T_K];
  m->wv = dst[T_V];
  m->wo = dst[T_O];
  m->rms_ffn = dst[T_FFN_NORM];
  m->w1 = dst[T_GATE];
  m->w2 = dst[T_DOWN];
  m->w3 = dst[T_UP];
  m->rms_final = dst[T_OUT_NORM];
  m->rope_cos = rope_cos;
  m->rope_sin = rope_sin;
  m->classifier = have_output ? dst[T_OUTPUT] : dst[T_EMBD];
  m->rope_freq_factors = have_freqs ? dst[T_ROPE_FREQS] : NULL;
  *out_model = m;
  return OKV_OK;
}
