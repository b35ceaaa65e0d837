/* Double-precision reference forward pass (see reference.h). */
#include "tests/model/reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

int okv_ref_init(okv_ref_state_t *s, const okv_model_t *m) {
  const okv_model_config_t *c = &m->config;
  size_t n = (size_t)c->n_layers * c->seq_len * c->n_kv_heads * c->head_dim;
  s->model = m;
  s->key_cache = calloc(n, sizeof(double));
  s->value_cache = calloc(n, sizeof(double));
  return s->key_cache && s->value_cache ? 0 : -1;
}

void okv_ref_free(okv_ref_state_t *s) {
  free(s->key_cache);
  free(s->value_cache);
  s->key_cache = s->value_cache = NULL;
}

static void ref_rmsnorm(double *out, const double *x, const float *w, uint32_t n) {
  double ss = 0.0;
  for (uint32_t i = 0; i < n; ++i) ss += x[i] * x[i];
  ss = 1.0 / sqrt(ss / n + 1e-5);
  for (uint32_t i = 0; i < n; ++i) out[i] = (double)w[i] * x[i] * ss;
}

static void ref_matvec(double *out, const double *x, const float *w, uint32_t n_in, uint32_t n_out) {
  for (uint32_t o = 0; o < n_out; ++o) {
    double acc = 0.0;
    for (uint32_t i = 0; i < n_in; ++i) acc += (double)w[(size_t)o * n_in + i] * x[i];
    out[o] = acc;
  }
}

static void ref_rope(const okv_model_t *m, double *v, uint32_t n_heads, uint32_t pos) {
  uint32_t hd = m->config.head_dim, half = hd / 2;
  for (uint32_t h = 0; h < n_heads; ++h)
    for (uint32_t j = 0; j < half; ++j) {
      double fr = m->rope_cos[(size_t)pos * half + j], fi = m->rope_sin[(size_t)pos * half + j];
      double *p = v + (size_t)h * hd + 2 * j;
      double a = p[0], b = p[1];
      p[0] = a * fr - b * fi;
      p[1] = a * fi + b * fr;
    }
}

void okv_ref_forward(okv_ref_state_t *s, uint32_t token, uint32_t pos, double *logits) {
  const okv_model_t *m = s->model;
  const okv_model_config_t *c = &m->config;
  uint32_t D = c->dim, H = c->hidden_dim, hd = c->head_dim, kvd = c->n_kv_heads * hd;
  uint32_t G = c->n_q_heads / c->n_kv_heads;
  double *x = calloc(D, sizeof(double)), *xb = calloc(D, sizeof(double)), *q = calloc(D, sizeof(double));
  double *att = calloc(D, sizeof(double)), *tmp = calloc(D, sizeof(double));
  double *h1 = calloc(H, sizeof(double)), *h3 = calloc(H, sizeof(double));
  double *sc = calloc(c->seq_len, sizeof(double));
  for (uint32_t i = 0; i < D; ++i) x[i] = m->token_embedding[(size_t)token * D + i];
  for (uint32_t l = 0; l < c->n_layers; ++l) {
    double *kc = s->key_cache + ((size_t)l * c->seq_len) * kvd;
    double *vc = s->value_cache + ((size_t)l * c->seq_len) * kvd;
    ref_rmsnorm(xb, x, m->rms_att + (size_t)l * D, D);
    ref_matvec(q, xb, m->wq + (size_t)l * D * D, D, D);
    ref_matvec(kc + (size_t)pos * kvd, xb, m->wk + (size_t)l * kvd * D, D, kvd);
    ref_matvec(vc + (size_t)pos * kvd, xb, m->wv + (size_t)l * kvd * D, D, kvd);
    ref_rope(m, q, c->n_q_heads, pos);
    ref_rope(m, kc + (size_t)pos * kvd, c->n_kv_heads, pos);
    for (uint32_t h = 0; h < c->n_q_heads; ++h) {
      uint32_t kh = h / G;
      double mx = -INFINITY;
      for (uint32_t t = 0; t <= pos; ++t) {
        double d = 0.0;
        for (uint32_t i = 0; i < hd; ++i) d += q[h * hd + i] * kc[(size_t)t * kvd + kh * hd + i];
        sc[t] = d / sqrt((double)hd);
        if (sc[t] > mx) mx = sc[t];
      }
      double z = 0.0;
      for (uint32_t t = 0; t <= pos; ++t) z += (sc[t] = exp(sc[t] - mx));
      for (uint32_t i = 0; i < hd; ++i) {
        double acc = 0.0;
        for (uint32_t t = 0; t <= pos; ++t) acc += sc[t] * vc[(size_t)t * kvd + kh * hd + i];
        att[h * hd + i] = acc / z;
      }
    }
    ref_matvec(tmp, att, m->wo + (size_t)l * D * D, D, D);
    for (uint32_t i = 0; i < D; ++i) x[i] += tmp[i];
    ref_rmsnorm(xb, x, m->rms_ffn + (size_t)l * D, D);
    ref_matvec(h1, xb, m->w1 + (size_t)l * H * D, D, H);
    ref_matvec(h3, xb, m->w3 + (size_t)l * H * D, D, H);
    for (uint32_t i = 0; i < H; ++i) h1[i] = h1[i] / (1.0 + exp(-h1[i])) * h3[i];
    ref_matvec(tmp, h1, m->w2 + (size_t)l * D * H, H, D);
    for (uint32_t i = 0; i < D; ++i) x[i] += tmp[i];
  }
  ref_rmsnorm(xb, x, m->rms_final, D);
  ref_matvec(logits, xb, m->classifier, D, c->vocab_size);
  free(x);
  free(xb);
  free(q);
  free(att);
  free(tmp);
  free(h1);
  free(h3);
  free(sc);
}

const char *okv_ref_shared_path(const char *shared_dir, const char *rel, char *buf, size_t cap) {
  snprintf(buf, cap, "%s/%s", shared_dir, rel);
  struct stat st;
  if (stat(buf, &st) != 0) {
    fprintf(stderr, "SKIP: %s not found\n", buf);
    exit(77);
  }
  return buf;
}
