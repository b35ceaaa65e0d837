/* The attention generator of `oasiskv bench serve` (attn_gen.h). Model, per
 * (layer l, KV head h) with head_dim D, P = 2F positional dimensions and the
 * other D - P "content" dimensions (docs/performance.md):
 *
 *   key   k_t = a_top * m_b * u_{topic(b)} + [b == 0] a_sink * u_sink + a_rec * p(t) + sigma_k * z_t
 *   query q_T = b_top * sum_j w_j(T) u_j + b_sink * u_sink + b_rec * p(T) + sigma_q * xi_T
 *
 * b = t / 16 is the token's block; u_j (j < 24 topics) and u_sink are random
 * unit vectors in the content dimensions; m_b is 1 for a "heavy" block
 * (probability p_heavy) and 0.2..0.8 otherwise; p(t) = [cos(w_f t), sin(w_f t)]
 * / sqrt(F) over F frequencies log-spaced in [0.2, 3] / W, so that
 * p(T) . p(t) = mean_f cos(w_f (T - t)) is ~1 in a recent window of W tokens
 * and small beyond it (a rotary-style recency); w_j(T) = exp(-d(j, phi)^2 /
 * 0.72) weighs the topics near the focus phi = phi_0(seq) + T / tau (circular
 * distance d), so the heavy blocks in focus change one topic every tau tokens;
 * xi_T is a fresh N(0, I) innovation per token. The amplitude products are set
 * in logit units (q . k / sqrt(D)): heavy, recent and sink logits per head.
 * Every random draw is a hash of (seed, layer, head, stream, position, what). */
#include "attn_gen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GEN_TOPICS       24u
#define GEN_SIGMA_K      0.5  /* key noise per dimension */
#define GEN_SIGMA_Q      0.6  /* query innovation per dimension */
#define GEN_FOCUS_WIDTH  0.6  /* topics: w_j = exp(-d^2 / (2 width^2)) */
#define GEN_GROUP_SPREAD 0.35 /* topics between neighbouring query heads of a group */

/* What a hash draw is for (keeps the streams of one (layer, head, pos) apart). */
enum { GEN_KEY = 1, GEN_VALUE, GEN_INNOV, GEN_DRAFT, GEN_BLOCK, GEN_TABLE, GEN_PHASE };

typedef struct gen_head_t {
  float *topic; /* [GEN_TOPICS][D], unit vectors in the content dimensions */
  float *sink;  /* [D] */
  float *omega; /* [F] radians per token */
  double a_top, b_top, a_rec, b_rec, a_sink, b_sink;
  double heavy_logit, recent_logit, sink_logit, p_heavy;
  uint32_t window, tau;
} gen_head_t;

struct okv_attn_gen_t {
  okv_attn_gen_params_t p;
  uint32_t F;        /* positional frequency pairs */
  gen_head_t *heads; /* [n_layers][n_kv_heads] */
  float *storage;
};

/* ---- Counter-based random numbers ---- */

static uint64_t mix64(uint64_t x) { /* splitmix64 finaliser */
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static uint64_t gen_hash(const okv_attn_gen_t *g, uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  uint64_t h = mix64(g->p.seed ^ 0x6A09E667F3BCC909ull);
  h = mix64(h ^ a);
  h = mix64(h ^ (b + 0x3C6EF372FE94F82Bull));
  h = mix64(h ^ (c + 0xA54FF53A5F1D36F1ull));
  return mix64(h ^ (d + 0x510E527FADE682D1ull));
}

/* Approximately N(0, 1): the sum of four 16-bit uniforms, centred and scaled (Irwin-Hall). */
static float normal_from(uint64_t r) {
  double s = (double)(r & 0xFFFF) + (double)((r >> 16) & 0xFFFF) + (double)((r >> 32) & 0xFFFF) + (double)(r >> 48);
  return (float)((s / 65536.0 - 2.0) * 1.7320508075688772);
}

static double uniform_from(uint64_t r) { return (double)(r >> 11) * (1.0 / 9007199254740992.0); }

/* Fills v[0..n) with N(0, 1) draws of the stream seeded by h. */
static void normals(uint64_t h, float *v, uint32_t n) {
  uint64_t s = h | 1u;
  for (uint32_t i = 0; i < n; i++) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    v[i] = normal_from(s * 0x2545F4914F6CDD1Dull);
  }
}

/* ---- Tables ---- */

void okv_attn_gen_params_init(okv_attn_gen_params_t *p) {
  memset(p, 0, sizeof *p);
  p->seed = 1;
  p->draft_rho = 0.7;
}

static void unit_content(const okv_attn_gen_t *g, uint64_t h, float *v) {
  uint32_t D = g->p.head_dim, P = 2 * g->F;
  normals(h, v, D);
  double n2 = 0;
  for (uint32_t i = 0; i < D; i++) {
    if (i < P) v[i] = 0.0f;
    n2 += (double)v[i] * v[i];
  }
  float s = n2 > 0 ? (float)(1.0 / sqrt(n2)) : 0.0f;
  for (uint32_t i = 0; i < D; i++) v[i] *= s;
}

okv_status_t okv_attn_gen_create(const okv_attn_gen_params_t *p, okv_attn_gen_t **out) {
  if (!p || !out) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "attn_gen: NULL params or out");
  *out = NULL;
  if (p->n_layers == 0 || p->n_kv_heads == 0 || p->group_size == 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "attn_gen: n_layers, n_kv_heads and group_size must be > 0");
  if (p->head_dim < 32 || p->head_dim > 256 || p->head_dim % 2)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "attn_gen: head_dim %u must be even and in 32..256",
                           p->head_dim);
  if (!(p->draft_rho >= 0.0 && p->draft_rho <= 1.0))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "attn_gen: draft_rho %g must be in [0, 1]", p->draft_rho);
  okv_attn_gen_t *g = calloc(1, sizeof *g);
  if (!g) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "attn_gen: out of host memory");
  g->p = *p;
  uint32_t D = p->head_dim;
  g->F = D / 8 < 16 ? D / 8 : 16;
  size_t n_heads = (size_t)p->n_layers * p->n_kv_heads;
  size_t per_head = (size_t)(GEN_TOPICS + 1) * D + g->F;
  g->heads = calloc(n_heads, sizeof *g->heads);
  g->storage = malloc(n_heads * per_head * sizeof(float));
  if (!g->heads || !g->storage) {
    okv_attn_gen_destroy(g);
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "attn_gen: out of host memory for %zu heads", n_heads);
  }
  static const uint32_t windows[] = {128, 256, 512, 1024};
  static const uint32_t taus[] = {64, 128, 256, 512};
  static const double heavy[] = {5.0, 7.0, 9.0}, recent[] = {3.0, 5.0, 7.0}, sink[] = {3.0, 5.0};
  const double sq = sqrt((double)D);
  for (uint32_t l = 0; l < p->n_layers; l++)
    for (uint32_t h = 0; h < p->n_kv_heads; h++) {
      gen_head_t *hd = &g->heads[(size_t)l * p->n_kv_heads + h];
      float *base = g->storage + ((size_t)l * p->n_kv_heads + h) * per_head;
      hd->topic = base;
      hd->sink = base + (size_t)GEN_TOPICS * D;
      hd->omega = hd->sink + D;
      for (uint32_t j = 0; j < GEN_TOPICS; j++) unit_content(g, gen_hash(g, GEN_TABLE, l, h, j), hd->topic + j * D);
      unit_content(g, gen_hash(g, GEN_TABLE, l, h, 1000), hd->sink);
      uint64_t r = gen_hash(g, GEN_TABLE, l, h, 2000);
      hd->window = windows[r % 4];
      hd->tau = taus[(r >> 8) % 4];
      hd->heavy_logit = heavy[(r >> 16) % 3];
      hd->recent_logit = recent[(r >> 24) % 3];
      hd->sink_logit = sink[(r >> 32) % 2];
      hd->p_heavy = ((r >> 40) & 1) ? 1.0 / 16.0 : 1.0 / 32.0;
      /* Amplitudes split evenly between key and query: a * b / sqrt(D) = the logit. */
      hd->a_top = hd->b_top = sqrt(hd->heavy_logit * sq);
      hd->a_rec = hd->b_rec = sqrt(hd->recent_logit * sq);
      hd->a_sink = hd->b_sink = sqrt(hd->sink_logit * sq);
      for (uint32_t f = 0; f < g->F; f++) {
        double x = g->F > 1 ? (double)f / (double)(g->F - 1) : 0.0;
        hd->omega[f] = (float)(0.2 * pow(15.0, x) / (double)hd->window);
      }
    }
  *out = g;
  return OKV_OK;
}

void okv_attn_gen_destroy(okv_attn_gen_t *g) {
  if (!g) return;
  free(g->heads);
  free(g->storage);
  free(g);
}

static const gen_head_t *head_of(const okv_attn_gen_t *g, uint32_t layer, uint32_t kv_head) {
  return &g->heads[(size_t)layer * g->p.n_kv_heads + kv_head];
}

/* Adds amp * p(pos) to v's positional dimensions. */
static void add_position(const okv_attn_gen_t *g, const gen_head_t *hd, uint32_t pos, double amp, float *v) {
  double s = amp / sqrt((double)g->F);
  for (uint32_t f = 0; f < g->F; f++) {
    double a = (double)hd->omega[f] * (double)pos;
    v[2 * f] += (float)(s * cos(a));
    v[2 * f + 1] += (float)(s * sin(a));
  }
}

/* ---- Keys and values ---- */

void okv_attn_gen_kv(const okv_attn_gen_t *g, uint32_t layer, uint32_t kv_head, uint64_t stream, uint32_t pos, float *k,
                     float *v) {
  uint32_t D = g->p.head_dim;
  const gen_head_t *hd = head_of(g, layer, kv_head);
  if (k) {
    uint32_t b = pos / 16u;
    uint64_t rb = gen_hash(g, GEN_BLOCK, layer, kv_head, b);
    uint32_t topic = (uint32_t)(rb % GEN_TOPICS);
    double m = uniform_from(mix64(rb)) < hd->p_heavy ? 1.0 : 0.2 + 0.6 * uniform_from(mix64(rb ^ 0x55));
    normals(gen_hash(g, GEN_KEY, ((uint64_t)layer << 32) | kv_head, stream, pos), k, D);
    const float *u = hd->topic + (size_t)topic * D;
    float at = (float)(hd->a_top * m), as = (float)hd->a_sink;
    for (uint32_t i = 0; i < D; i++) {
      k[i] = (float)GEN_SIGMA_K * k[i] + at * u[i];
      if (b == 0) k[i] += as * hd->sink[i];
    }
    add_position(g, hd, pos, hd->a_rec, k);
  }
  if (v) normals(gen_hash(g, GEN_VALUE, ((uint64_t)layer << 32) | kv_head, stream, pos), v, D);
}

/* ---- Queries ---- */

/* The smooth part of query head g at position pos (no innovation) into q[D]. */
static void query_smooth(const okv_attn_gen_t *g, uint32_t seq, uint32_t layer, uint32_t kv_head, uint32_t gi,
                         uint32_t pos, float *q) {
  uint32_t D = g->p.head_dim;
  const gen_head_t *hd = head_of(g, layer, kv_head);
  double phi0 = uniform_from(gen_hash(g, GEN_PHASE, layer, kv_head, seq)) * GEN_TOPICS;
  double phi = phi0 + (double)pos / (double)hd->tau + GEN_GROUP_SPREAD * ((double)gi - 0.5 * (g->p.group_size - 1));
  memset(q, 0, D * sizeof *q);
  for (uint32_t j = 0; j < GEN_TOPICS; j++) {
    double d = fmod(fabs((double)j - phi), (double)GEN_TOPICS);
    if (d > GEN_TOPICS / 2.0) d = GEN_TOPICS - d;
    double w = exp(-d * d / (2.0 * GEN_FOCUS_WIDTH * GEN_FOCUS_WIDTH));
    if (w < 1e-4) continue;
    float a = (float)(hd->b_top * w);
    const float *u = hd->topic + (size_t)j * D;
    for (uint32_t i = 0; i < D; i++) q[i] += a * u[i];
  }
  for (uint32_t i = 0; i < D; i++) q[i] += (float)hd->b_sink * hd->sink[i];
  add_position(g, hd, pos, hd->b_rec, q);
}

/* The innovation of query head gi at position pos, N(0, I) [D]. */
static void innovation(const okv_attn_gen_t *g, uint32_t what, uint32_t seq, uint32_t layer, uint32_t kv_head,
                       uint32_t gi, uint32_t pos, float *xi) {
  normals(gen_hash(g, what, ((uint64_t)layer << 32) | kv_head, ((uint64_t)seq << 8) | gi, pos), xi, g->p.head_dim);
}

void okv_attn_gen_query(const okv_attn_gen_t *g, uint32_t seq, uint32_t layer, uint32_t kv_head, uint32_t pos,
                        float *q) {
  uint32_t D = g->p.head_dim;
  float xi[256];
  for (uint32_t gi = 0; gi < g->p.group_size; gi++) {
    float *qg = q + (size_t)gi * D;
    query_smooth(g, seq, layer, kv_head, gi, pos, qg);
    innovation(g, GEN_INNOV, seq, layer, kv_head, gi, pos, xi);
    for (uint32_t i = 0; i < D; i++) qg[i] += (float)GEN_SIGMA_Q * xi[i];
  }
}

void okv_attn_gen_draft_query(const okv_attn_gen_t *g, uint32_t seq, uint32_t layer, uint32_t kv_head, uint32_t pos,
                              float *q) {
  uint32_t D = g->p.head_dim;
  float xi[256], xd[256];
  double rho = g->p.draft_rho, rest = sqrt(1.0 - rho * rho);
  for (uint32_t gi = 0; gi < g->p.group_size; gi++) {
    float *qg = q + (size_t)gi * D;
    query_smooth(g, seq, layer, kv_head, gi, pos + 1u, qg);
    innovation(g, GEN_INNOV, seq, layer, kv_head, gi, pos + 1u, xi);
    innovation(g, GEN_DRAFT, seq, layer, kv_head, gi, pos, xd);
    for (uint32_t i = 0; i < D; i++) qg[i] += (float)(GEN_SIGMA_Q * (rho * xi[i] + rest * xd[i]));
  }
}

void okv_attn_gen_describe(const okv_attn_gen_t *g, uint32_t layer, uint32_t kv_head, char *buf, unsigned n) {
  const gen_head_t *hd = head_of(g, layer, kv_head);
  snprintf(buf, n, "W=%u tau=%u heavy=%.1f recent=%.1f sink=%.1f p_heavy=1/%.0f", hd->window, hd->tau, hd->heavy_logit,
           hd->recent_logit, hd->sink_logit, 1.0 / hd->p_heavy);
}
