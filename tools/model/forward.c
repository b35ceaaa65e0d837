/* The forward pass of a llama2.c model whose KV cache lives in the OasisKV
 * runtime (every K/V goes through okv_runtime_step_layer / peek_layer), and
 * the drafters. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"

#define OKV_ENGINE_MAX_DRAFTS 3u

struct okv_engine_t {
  okv_allocator_t allocator;
  const okv_model_t *model;
  okv_runtime_t *runtime;
  uint32_t max_seqs, max_drafts;
  float *x, *xb, *xb2, *q, *k, *v, *att, *hb, *hb2; /* [rows][...] */
  float *k_new, *v_new;                             /* [max_seqs][kv_dim] */
  float *draft_kv;                                  /* [max_seqs][max_drafts or 1][2][kv_dim] */
  uint32_t *positions;                              /* [max_seqs] */
  okv_engine_trace_fn trace;                        /* okv_engine_set_trace; NULL = none */
  void *trace_user;
};

/* out[r][o] = sum_i w[o][i] * in[r][i]; rows r < n_rows. */
static void matmul(float *out, const float *in, const float *w, uint32_t n_rows, uint32_t n_in, uint32_t n_out) {
  long work = (long)n_rows * n_in * n_out;
  (void)work;
#pragma omp parallel for schedule(static) if (work > (1L << 18))
  for (long o = 0; o < (long)n_out; ++o) {
    const float *wr = w + (size_t)o * n_in;
    for (uint32_t r = 0; r < n_rows; ++r) {
      const float *x = in + (size_t)r * n_in;
      float acc = 0.0f;
      for (uint32_t i = 0; i < n_in; ++i) acc += wr[i] * x[i];
      out[(size_t)r * n_out + (size_t)o] = acc;
    }
  }
}

static void rmsnorm(float *out, const float *x, const float *w, uint32_t n, float eps) {
  float ss = 0.0f;
  for (uint32_t i = 0; i < n; ++i) ss += x[i] * x[i];
  ss = 1.0f / sqrtf(ss / (float)n + eps);
  for (uint32_t i = 0; i < n; ++i) out[i] = w[i] * (ss * x[i]);
}

/* Rotates pairs (2j, 2j+1) of each of n_heads heads of `vec` for position pos. */
static void rope(const okv_model_t *m, float *vec, uint32_t n_heads, uint32_t pos) {
  const okv_model_config_t *c = &m->config;
  uint32_t half = c->head_dim / 2;
  for (uint32_t j = 0; j < half; ++j) {
    float fr, fi;
    if (pos < c->seq_len) {
      fr = m->rope_cos[(size_t)pos * half + j];
      fi = m->rope_sin[(size_t)pos * half + j];
    } else { /* only draft tokens past the last position get here */
      double freq = pow((double)c->rope_theta, -2.0 * (double)j / (double)c->head_dim);
      if (m->rope_freq_factors) freq /= (double)m->rope_freq_factors[j];
      const double angle = (double)pos * (double)c->rope_pos_scale * freq;
      fr = (float)cos(angle);
      fi = (float)sin(angle);
    }
    for (uint32_t h = 0; h < n_heads; ++h) {
      float *p = vec + (size_t)h * c->head_dim + 2 * j;
      float a = p[0], b = p[1];
      p[0] = a * fr - b * fi;
      p[1] = a * fi + b * fr;
    }
  }
}

static void free_buf(okv_engine_t *e, void *p) {
  if (p) okv_free(&e->allocator, p);
}

void okv_engine_set_trace(okv_engine_t *e, okv_engine_trace_fn fn, void *user) {
  if (!e) return;
  e->trace = fn;
  e->trace_user = user;
}

void okv_engine_destroy(okv_engine_t *e) {
  if (!e) return;
  float *bufs[] = {e->x, e->xb, e->xb2, e->q, e->k, e->v, e->att, e->hb, e->hb2, e->k_new, e->v_new, e->draft_kv};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i) free_buf(e, bufs[i]);
  free_buf(e, e->positions);
  okv_allocator_t a = e->allocator;
  okv_free(&a, e);
}

void okv_model_runtime_config(const okv_model_config_t *mc, okv_runtime_config_t *out) {
  okv_runtime_config_init(out);
  out->n_layers = mc->n_layers;
  out->n_q_heads = mc->n_q_heads;
  out->n_kv_heads = mc->n_kv_heads;
  out->head_dim = mc->head_dim;
  out->kv_dtype = OKV_DTYPE_F32;
  out->block_tokens = OKV_BLOCK_TOKENS;
}

okv_status_t okv_engine_create(const okv_model_t *model, okv_runtime_t *runtime, uint32_t max_seqs, uint32_t max_drafts,
                               const okv_allocator_t *allocator, okv_engine_t **out_engine) {
  if (!model || !runtime || !out_engine)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_engine_create: NULL model, runtime or out_engine");
  *out_engine = NULL;
  if (max_seqs == 0 || max_drafts > OKV_ENGINE_MAX_DRAFTS)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "okv_engine_create: max_seqs %u must be > 0, max_drafts %u <= %u", max_seqs, max_drafts,
                           OKV_ENGINE_MAX_DRAFTS);
  const okv_model_config_t *c = &model->config;
  const okv_runtime_config_t *rc = okv_runtime_config(runtime);
  if (!rc) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_engine_create: runtime has no config");
  if (rc->n_layers != c->n_layers || rc->n_q_heads != c->n_q_heads || rc->n_kv_heads != c->n_kv_heads ||
      rc->head_dim != c->head_dim)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "okv_engine_create: runtime shape (layers %u, query heads %u, KV heads %u, head_dim %u) "
                           "does not match the model (%u, %u, %u, %u)",
                           rc->n_layers, rc->n_q_heads, rc->n_kv_heads, rc->head_dim, c->n_layers, c->n_q_heads,
                           c->n_kv_heads, c->head_dim);
  okv_allocator_t a = allocator ? *allocator : okv_allocator_system();
  okv_engine_t *e = okv_calloc(&a, 1, sizeof *e);
  if (!e) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_engine_create: out of memory");
  e->allocator = a;
  e->model = model;
  e->runtime = runtime;
  e->max_seqs = max_seqs;
  e->max_drafts = max_drafts;
  size_t rows = (size_t)max_seqs * (1 + max_drafts);
  size_t kvd = (size_t)c->n_kv_heads * c->head_dim;
  size_t wide = c->dim > kvd ? c->dim : kvd;
  e->x = okv_calloc(&a, rows * c->dim, sizeof(float));
  e->xb = okv_calloc(&a, rows * c->dim, sizeof(float));
  e->xb2 = okv_calloc(&a, rows * c->dim, sizeof(float));
  e->q = okv_calloc(&a, rows * wide, sizeof(float));
  e->k = okv_calloc(&a, rows * kvd, sizeof(float));
  e->v = okv_calloc(&a, rows * kvd, sizeof(float));
  e->att = okv_calloc(&a, rows * c->dim, sizeof(float));
  e->hb = okv_calloc(&a, rows * c->hidden_dim, sizeof(float));
  e->hb2 = okv_calloc(&a, rows * c->hidden_dim, sizeof(float));
  e->k_new = okv_calloc(&a, (size_t)max_seqs * kvd, sizeof(float));
  e->v_new = okv_calloc(&a, (size_t)max_seqs * kvd, sizeof(float));
  e->draft_kv = okv_calloc(&a, (size_t)max_seqs * (max_drafts ? max_drafts : 1) * 2 * kvd, sizeof(float));
  e->positions = okv_calloc(&a, max_seqs, sizeof(uint32_t));
  if (!e->x || !e->xb || !e->xb2 || !e->q || !e->k || !e->v || !e->att || !e->hb || !e->hb2 || !e->k_new || !e->v_new ||
      !e->draft_kv || !e->positions) {
    okv_engine_destroy(e);
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_engine_create: out of memory for %zu rows", rows);
  }
  *out_engine = e;
  return OKV_OK;
}

static okv_status_t check_batch(okv_engine_t *e, uint32_t n_seqs, const uint32_t *seq_ids, const uint32_t *tokens,
                                uint32_t n_drafts, const uint32_t *draft_tokens) {
  const okv_model_config_t *c = &e->model->config;
  if (!seq_ids || !tokens || n_seqs == 0 || n_seqs > e->max_seqs)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "engine step: n_seqs %u must be in 1..%u (seq_ids, tokens non-NULL)", n_seqs, e->max_seqs);
  if (n_drafts > e->max_drafts || (n_drafts && !draft_tokens))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "engine step: n_drafts %u exceeds the engine's max_drafts %u",
                           n_drafts, e->max_drafts);
  for (uint32_t i = 0; i < n_seqs; ++i) {
    if (tokens[i] >= c->vocab_size)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "engine step: token %u >= vocab_size %u", tokens[i],
                             c->vocab_size);
    for (uint32_t j = 0; j < n_drafts; ++j)
      if (draft_tokens[(size_t)i * n_drafts + j] >= c->vocab_size)
        return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "engine step: draft token %u >= vocab_size %u",
                               draft_tokens[(size_t)i * n_drafts + j], c->vocab_size);
    uint32_t len = 0;
    OKV_RETURN_IF_ERROR(okv_runtime_seq_length(e->runtime, seq_ids[i], &len));
    if (len >= c->seq_len)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "engine step: sequence %u is at position %u, the model's seq_len is %u", seq_ids[i], len,
                             c->seq_len);
    e->positions[i] = len;
  }
  return OKV_OK;
}

/* Embeds rows: row i*T + t gets token (t == 0 ? tokens[i] : draft_tokens[i*(T-1) + t-1]). */
static void embed(okv_engine_t *e, uint32_t n_seqs, uint32_t T, const uint32_t *tokens, const uint32_t *draft_tokens) {
  uint32_t D = e->model->config.dim;
  for (uint32_t i = 0; i < n_seqs; ++i)
    for (uint32_t t = 0; t < T; ++t) {
      uint32_t tok = t == 0 ? tokens[i] : draft_tokens[(size_t)i * (T - 1) + t - 1];
      memcpy(e->x + ((size_t)i * T + t) * D, e->model->token_embedding + (size_t)tok * D, D * sizeof(float));
    }
}

/* Layer l up to attention: xb = norm(x), q/k/v with RoPE. */
static void layer_qkv(okv_engine_t *e, uint32_t l, uint32_t n_seqs, uint32_t T) {
  const okv_model_t *m = e->model;
  const okv_model_config_t *c = &m->config;
  uint32_t D = c->dim, kvd = c->n_kv_heads * c->head_dim, rows = n_seqs * T;
  for (uint32_t r = 0; r < rows; ++r)
    rmsnorm(e->xb + (size_t)r * D, e->x + (size_t)r * D, m->rms_att + (size_t)l * D, D, c->rms_eps);
  matmul(e->q, e->xb, m->wq + (size_t)l * D * D, rows, D, D);
  matmul(e->k, e->xb, m->wk + (size_t)l * kvd * D, rows, D, kvd);
  matmul(e->v, e->xb, m->wv + (size_t)l * kvd * D, rows, D, kvd);
  for (uint32_t i = 0; i < n_seqs; ++i)
    for (uint32_t t = 0; t < T; ++t) {
      size_t r = (size_t)i * T + t;
      rope(m, e->q + r * D, c->n_q_heads, e->positions[i] + t);
      rope(m, e->k + r * kvd, c->n_kv_heads, e->positions[i] + t);
    }
}

/* Layer l after attention (e->att): x += wo att; x += w2(silu(w1 xb) * w3 xb). */
static void layer_out(okv_engine_t *e, uint32_t l, uint32_t rows) {
  const okv_model_t *m = e->model;
  const okv_model_config_t *c = &m->config;
  uint32_t D = c->dim, H = c->hidden_dim;
  matmul(e->xb2, e->att, m->wo + (size_t)l * D * D, rows, D, D);
  for (size_t i = 0; i < (size_t)rows * D; ++i) e->x[i] += e->xb2[i];
  for (uint32_t r = 0; r < rows; ++r)
    rmsnorm(e->xb + (size_t)r * D, e->x + (size_t)r * D, m->rms_ffn + (size_t)l * D, D, c->rms_eps);
  matmul(e->hb, e->xb, m->w1 + (size_t)l * H * D, rows, D, H);
  matmul(e->hb2, e->xb, m->w3 + (size_t)l * H * D, rows, D, H);
  for (size_t i = 0; i < (size_t)rows * H; ++i) {
    float a = e->hb[i];
    e->hb[i] = a / (1.0f + expf(-a)) * e->hb2[i];
  }
  matmul(e->xb2, e->hb, m->w2 + (size_t)l * D * H, rows, H, D);
  for (size_t i = 0; i < (size_t)rows * D; ++i) e->x[i] += e->xb2[i];
}

/* Logits of row i*T (the real token) of each sequence. */
static void classify(okv_engine_t *e, uint32_t n_seqs, uint32_t T, float *out_logits) {
  const okv_model_t *m = e->model;
  uint32_t D = m->config.dim;
  for (uint32_t i = 0; i < n_seqs; ++i)
    rmsnorm(e->xb + (size_t)i * D, e->x + (size_t)i * T * D, m->rms_final, D, m->config.rms_eps);
  matmul(out_logits, e->xb, m->classifier, n_seqs, D, m->config.vocab_size);
}

okv_status_t okv_engine_step(okv_engine_t *e, uint32_t n_seqs, const uint32_t *seq_ids, const uint32_t *tokens,
                             uint32_t n_drafts, const uint32_t *draft_tokens, float *out_logits,
                             okv_step_stats_t *out_step_stats) {
  if (!e || !out_logits)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_engine_step: NULL engine or out_logits");
  OKV_RETURN_IF_ERROR(check_batch(e, n_seqs, seq_ids, tokens, n_drafts, draft_tokens));
  const okv_model_config_t *c = &e->model->config;
  if (okv_runtime_config(e->runtime)->mode == OKV_MODE_OASIS && n_drafts == 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "okv_engine_step: mode oasis needs a draft token (n_drafts >= 1)");
  uint32_t T = 1 + n_drafts, rows = n_seqs * T, kvd = c->n_kv_heads * c->head_dim;
  embed(e, n_seqs, T, tokens, draft_tokens);
  OKV_RETURN_IF_ERROR(okv_runtime_step_begin(e->runtime, n_seqs, seq_ids, T));
  for (uint32_t l = 0; l < c->n_layers; ++l) {
    layer_qkv(e, l, n_seqs, T);
    for (uint32_t i = 0; i < n_seqs; ++i) {
      size_t r0 = (size_t)i * T;
      memcpy(e->k_new + (size_t)i * kvd, e->k + r0 * kvd, kvd * sizeof(float));
      memcpy(e->v_new + (size_t)i * kvd, e->v + r0 * kvd, kvd * sizeof(float));
      for (uint32_t t = 1; t < T; ++t) {
        float *d = e->draft_kv + (((size_t)i * n_drafts + (t - 1)) * 2) * kvd;
        memcpy(d, e->k + (r0 + t) * kvd, kvd * sizeof(float));
        memcpy(d + kvd, e->v + (r0 + t) * kvd, kvd * sizeof(float));
      }
    }
    if (e->trace) {
      const okv_engine_trace_t tr = {l, n_seqs, T, seq_ids, e->positions, e->q, e->k_new};
      e->trace(e->trace_user, &tr);
    }
    okv_status_t s =
        okv_runtime_step_layer(e->runtime, l, e->k_new, e->v_new, e->q, n_drafts ? e->draft_kv : NULL, e->att);
    if (s) {
      /* Not OK means the layer's attention output is not valid (docs/api.md "Faults"): later
       * layers would compute, and commit, K/V from it. Stop the step here. */
      OKV_IGNORE_ERROR(okv_runtime_step_end(e->runtime, NULL));
      return okv_status_annotate(s, "layer %u", l);
    }
    layer_out(e, l, rows);
  }
  OKV_RETURN_IF_ERROR(okv_runtime_step_end(e->runtime, out_step_stats));
  classify(e, n_seqs, T, out_logits);
  return OKV_OK;
}

okv_status_t okv_engine_peek(okv_engine_t *e, uint32_t n_seqs, const uint32_t *seq_ids, const uint32_t *tokens,
                             float *out_logits) {
  if (!e || !out_logits)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_engine_peek: NULL engine or out_logits");
  OKV_RETURN_IF_ERROR(check_batch(e, n_seqs, seq_ids, tokens, 0, NULL));
  const okv_model_config_t *c = &e->model->config;
  uint32_t kvd = c->n_kv_heads * c->head_dim;
  embed(e, n_seqs, 1, tokens, NULL);
  for (uint32_t l = 0; l < c->n_layers; ++l) {
    layer_qkv(e, l, n_seqs, 1);
    for (uint32_t i = 0; i < n_seqs; ++i) {
      float *d = e->draft_kv + (size_t)i * 2 * kvd; /* [n_seqs][1][2][kv_dim] */
      memcpy(d, e->k + (size_t)i * kvd, kvd * sizeof(float));
      memcpy(d + kvd, e->v + (size_t)i * kvd, kvd * sizeof(float));
    }
    okv_status_t s = okv_runtime_peek_layer(e->runtime, n_seqs, seq_ids, l, 1, e->q, e->draft_kv, e->att);
    if (s) return okv_status_annotate(s, "peek layer %u", l);
    layer_out(e, l, n_seqs);
  }
  classify(e, n_seqs, 1, out_logits);
  return OKV_OK;
}

/* ---- Drafters ---- */

static const char *const k_drafter_names[OKV_DRAFTER_COUNT] = {"none", "oracle", "self", "ngram"};

const char *okv_drafter_name(okv_drafter_t d) {
  return (unsigned)d < OKV_DRAFTER_COUNT ? k_drafter_names[d] : "unknown";
}

okv_status_t okv_drafter_parse(const char *name, okv_drafter_t *out_drafter) {
  if (!name || !out_drafter) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_drafter_parse: NULL argument");
  for (int i = 1; i < OKV_DRAFTER_COUNT; ++i)
    if (!strcmp(name, k_drafter_names[i])) {
      *out_drafter = (okv_drafter_t)i;
      return OKV_OK;
    }
  return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "unknown drafter '%s' (expected oracle, self or ngram)", name);
}

uint32_t okv_drafter_ngram_next(const uint32_t *h, size_t n) {
  if (!h || n == 0) return OKV_TOKEN_BOS;
  for (size_t len = 3; len >= 1; --len) {
    if (n < len + 1) continue;
    /* Match ending at e (exclusive) with e < n, latest first: h[e-len..e) == h[n-len..n). */
    for (size_t e = n - 1; e >= len; --e) {
      if (memcmp(h + e - len, h + n - len, len * sizeof *h) == 0) return h[e];
    }
  }
  return h[n - 1];
}

uint32_t okv_logits_argmax(const float *logits, uint32_t n) {
  uint32_t best = 0;
  for (uint32_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}
