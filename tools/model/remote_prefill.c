/* Prefill jobs, the prefill node's work per job and the decode node's KV source over the remote tier
 * (remote_prefill.h). */
#include "model/remote_prefill.h"

#include <stdio.h>
#include <string.h>

static const char k_job_magic[8] = {'O', 'K', 'V', 'P', 'R', 'E', '0', '2'};

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* FNV-1a, 64-bit (offset basis 14695981039346656037, prime 1099511628211), fed little-endian words. */
static uint64_t fnv_u32(uint64_t h, uint32_t v) {
  for (int i = 0; i < 4; ++i) h = (h ^ ((v >> (8 * i)) & 0xFFu)) * 1099511628211ull;
  return h;
}
static uint64_t fnv_floats(uint64_t h, const float *x, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t v;
    memcpy(&v, &x[i], sizeof v);
    h = fnv_u32(h, v);
  }
  return h;
}

uint64_t okv_prefill_model_fingerprint(const okv_model_t *m) {
  if (!m) return 0;
  const okv_model_config_t *c = &m->config;
  uint64_t h = 14695981039346656037ull;
  /* seq_len is left out: it bounds the positions, it does not change what the model computes at them. */
  const uint32_t shape[] = {c->dim,        c->hidden_dim, c->n_layers, c->n_q_heads,
                            c->n_kv_heads, c->vocab_size, c->head_dim, m->rope_freq_factors ? 1u : 0u};
  for (size_t i = 0; i < sizeof shape / sizeof shape[0]; ++i) h = fnv_u32(h, shape[i]);
  const float scalars[] = {c->rms_eps, c->rope_theta, c->rope_pos_scale};
  h = fnv_floats(h, scalars, 3);
  uint64_t L = c->n_layers, D = c->dim, F = c->hidden_dim, qd = (uint64_t)c->n_q_heads * c->head_dim,
           kd = (uint64_t)c->n_kv_heads * c->head_dim;
  h = fnv_floats(h, m->token_embedding, (uint64_t)c->vocab_size * D);
  h = fnv_floats(h, m->rms_att, L * D);
  h = fnv_floats(h, m->wq, L * qd * D);
  h = fnv_floats(h, m->wk, L * kd * D);
  h = fnv_floats(h, m->wv, L * kd * D);
  h = fnv_floats(h, m->wo, L * D * qd);
  h = fnv_floats(h, m->rms_ffn, L * D);
  h = fnv_floats(h, m->w1, L * F * D);
  h = fnv_floats(h, m->w2, L * D * F);
  h = fnv_floats(h, m->w3, L * F * D);
  h = fnv_floats(h, m->rms_final, D);
  h = fnv_floats(h, m->classifier, (uint64_t)c->vocab_size * D); /* shared with the embedding or not */
  if (m->rope_freq_factors) h = fnv_floats(h, m->rope_freq_factors, c->head_dim / 2u);
  return h;
}

uint64_t okv_prefill_job_size(uint32_t prefill_tokens) {
  return OKV_PREFILL_JOB_HEADER_BYTES + 4u * ((uint64_t)prefill_tokens + 2u);
}

okv_status_t okv_prefill_job_pack(const uint32_t *tokens, uint32_t prefill_tokens, uint32_t budget_blocks,
                                  uint64_t model_fingerprint, void *buf, uint64_t capacity) {
  uint64_t n = okv_prefill_job_size(prefill_tokens);
  if (!tokens || !buf || prefill_tokens == 0 || budget_blocks == 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_prefill_job_pack: NULL, 0 prefill tokens or budget 0");
  if (n > OKV_PREFILL_JOB_MAX_BYTES || capacity < n)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "okv_prefill_job_pack: a job of %u prefill tokens takes %llu bytes (capacity %llu, at "
                           "most %u)",
                           prefill_tokens, (unsigned long long)n, (unsigned long long)capacity,
                           OKV_PREFILL_JOB_MAX_BYTES);
  uint8_t *p = buf;
  memcpy(p, k_job_magic, 8);
  put32(p + 8, budget_blocks);
  put32(p + 12, prefill_tokens);
  put32(p + 16, prefill_tokens + 2u);
  put32(p + 20, (uint32_t)model_fingerprint);
  put32(p + 24, (uint32_t)(model_fingerprint >> 32));
  for (uint32_t i = 0; i < prefill_tokens + 2u; ++i) put32(p + OKV_PREFILL_JOB_HEADER_BYTES + 4u * i, tokens[i]);
  return OKV_OK;
}

okv_status_t okv_prefill_job_parse(const void *buf, uint64_t n, const okv_allocator_t *allocator,
                                   okv_prefill_job_t *out) {
  if (!out) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "prefill job: out is NULL");
  memset(out, 0, sizeof *out);
  if (!buf) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "prefill job: NULL buffer");
  const uint8_t *p = buf;
  if (n < OKV_PREFILL_JOB_HEADER_BYTES || memcmp(p, k_job_magic, 8) != 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "prefill job: %llu bytes without the OKVPRE02 header",
                           (unsigned long long)n);
  uint32_t k = get32(p + 8), pt = get32(p + 12), nt = get32(p + 16);
  if (k == 0) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "prefill job: budget_blocks 0");
  if (pt == 0 || pt > UINT32_MAX - 2u || nt != pt + 2u)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "prefill job: %u tokens for a prefill of %u (expected prefill + 2, prefill >= 1)", nt, pt);
  if (n != okv_prefill_job_size(pt))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "prefill job of %llu bytes, %u tokens need %llu",
                           (unsigned long long)n, nt, (unsigned long long)okv_prefill_job_size(pt));
  okv_allocator_t a = allocator ? *allocator : okv_allocator_system();
  uint32_t *t = okv_malloc(&a, (size_t)nt * sizeof *t);
  if (!t) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "prefill job: %u tokens", nt);
  for (uint32_t i = 0; i < nt; ++i) t[i] = get32(p + OKV_PREFILL_JOB_HEADER_BYTES + 4u * i);
  out->budget_blocks = k;
  out->prefill_tokens = pt;
  out->n_tokens = nt;
  out->model_fingerprint = (uint64_t)get32(p + 20) | ((uint64_t)get32(p + 24) << 32);
  out->tokens = t;
  out->allocator = a;
  return OKV_OK;
}

void okv_prefill_job_free(okv_prefill_job_t *job) {
  if (!job) return;
  if (job->tokens) okv_free(&job->allocator, job->tokens);
  memset(job, 0, sizeof *job);
}

okv_status_t okv_prefill_job_run(const okv_model_t *model, okv_hal_device_t *device, const okv_prefill_job_t *job,
                                 const okv_allocator_t *allocator, okv_kv_blocks_t *out_kv, void **out_blob,
                                 uint64_t *out_blob_bytes) {
  if (!model || !device || !job || !job->tokens || !out_kv || !out_blob || !out_blob_bytes)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_prefill_job_run: NULL argument");
  memset(out_kv, 0, sizeof *out_kv);
  *out_blob = NULL;
  *out_blob_bytes = 0;
  okv_allocator_t a = allocator ? *allocator : okv_allocator_system();
  okv_eval_window_t win = {job->tokens, job->n_tokens};
  okv_eval_prefill_t pre;
  OKV_RETURN_IF_ERROR(okv_eval_prefill(model, device, &win, 1, job->prefill_tokens, &a, &pre));
  okv_admission_t adm;
  okv_status_t st = okv_admission_build(&pre.kv[0], pre.q, job->budget_blocks, &a, &adm);
  if (st) {
    okv_eval_prefill_free(&pre);
    return st;
  }
  uint64_t n = okv_admission_pack_size(&adm);
  void *blob = n ? okv_malloc(&a, n) : NULL;
  st = blob ? okv_admission_pack(&adm, blob, n)
            : okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_prefill_job_run: admission blob of %llu bytes",
                              (unsigned long long)n);
  okv_admission_free(&adm);
  if (st) {
    if (blob) okv_free(&a, blob);
    okv_eval_prefill_free(&pre);
    return st;
  }
  *out_kv = pre.kv[0]; /* the window's blocks move out of the prefill */
  memset(&pre.kv[0], 0, sizeof pre.kv[0]);
  okv_eval_prefill_free(&pre);
  *out_blob = blob;
  *out_blob_bytes = n;
  return OKV_OK;
}

okv_status_t okv_remote_kv_read(void *user, uint32_t n, const uint64_t *block_index, void *const *dst) {
  okv_remote_kv_source_t *s = user;
  if (!s || (n > 0 && (!block_index || !dst)))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "remote KV source: NULL arguments");
  if (n == 0) return OKV_OK;
  okv_allocator_t a = okv_allocator_system();
  okv_remote_get_t *gets = okv_malloc(&a, (size_t)n * sizeof *gets);
  if (!gets) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "remote KV source: %u gets", n);
  for (uint32_t i = 0; i < n; ++i) {
    if (block_index[i] >= s->n_blocks) {
      okv_free(&a, gets);
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "remote KV source: block %llu past the request's %llu",
                             (unsigned long long)block_index[i], (unsigned long long)s->n_blocks);
    }
    gets[i].remote_offset = block_index[i] * s->block_bytes;
    gets[i].bytes = s->block_bytes;
    gets[i].local_ptr = dst[i];
  }
  okv_remote_batch_t *b = NULL;
  okv_status_t st = okv_remote_client_get_batch(s->client, s->request_id, n, gets, &b);
  okv_free(&a, gets);
  if (st) return st;
  bool done = false;
  st = okv_remote_batch_wait(b, s->timeout_s, &done);
  if (!st && !done)
    st = okv_status_make(OKV_STATUS_UNAVAILABLE, "remote server %s: a read of %u blocks not done within %.1f s",
                         okv_remote_client_peer(s->client), n, s->timeout_s);
  okv_remote_batch_release(b);
  if (st) return st;
  s->calls++;
  s->blocks += n;
  s->bytes += (uint64_t)n * s->block_bytes;
  return OKV_OK;
}

okv_kv_source_t okv_remote_kv_source(okv_remote_kv_source_t *state, okv_remote_client_t *client, uint64_t request_id,
                                     uint64_t block_bytes, uint64_t n_blocks, double timeout_s, const char *name) {
  memset(state, 0, sizeof *state);
  state->client = client;
  state->request_id = request_id;
  state->block_bytes = block_bytes;
  state->n_blocks = n_blocks;
  state->timeout_s = timeout_s;
  okv_kv_source_t src = {state, okv_remote_kv_read, name};
  return src;
}

/* ---- admission of a prefilled sequence by the decode node (eval --prefill-tokens, generate --prefill) ---- */

/* Local: window w's admission built for K = rc->budget_blocks as a KV server would build it (every block when
 * K covers the context), packed into its wire format and unpacked on the decode side, then
 * okv_runtime_seq_add_remote with an in-memory KV source (seq->local) over the prefill's blocks. */
static okv_status_t admit_local(okv_runtime_t *rt, const okv_runtime_config_t *rc, const okv_eval_prefill_t *prefill,
                                uint32_t w, const okv_allocator_t *a, okv_prefill_seq_t *seq, uint32_t *out_id) {
  const okv_kv_blocks_t *kv = &prefill->kv[w];
  const okv_kv_shape_t *sh = &kv->shape;
  okv_admission_t built, got;
  OKV_RETURN_IF_ERROR(okv_admission_build(kv, prefill->q + (size_t)w * sh->n_layers * sh->n_q_heads * sh->head_dim,
                                          rc->budget_blocks, a, &built));
  uint64_t n = okv_admission_pack_size(&built);
  void *blob = n ? okv_malloc(a, n) : NULL;
  okv_status_t st = blob ? okv_admission_pack(&built, blob, n)
                         : okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_prefill_admit: the admission blob");
  okv_admission_free(&built);
  if (st == OKV_OK) st = okv_admission_unpack(blob, n, a, &got);
  if (blob) okv_free(a, blob);
  if (st) return st;
  okv_remote_prefill_t rp;
  okv_admission_prefill(&got, okv_kv_blocks_source(&seq->local, kv, "in-memory prefill"), &rp);
  st = okv_runtime_seq_add_remote(rt, &rp, out_id);
  seq->admitted_bytes = got.admitted_bytes;
  seq->full_kv_bytes = got.full_kv_bytes;
  okv_admission_free(&got);
  return st;
}

/* Remote: submits the prefill job of tokens [0, P + 2) for K = rc->budget_blocks to prefill->remote, opens the
 * request (seq->request_id: set once open, so the caller closes it), checks the admission against the decode
 * runtime's shape and adds the sequence with a remote KV source (seq->remote) over the request. */
static okv_status_t admit_remote(okv_runtime_t *rt, const okv_runtime_config_t *rc, const okv_eval_prefill_t *prefill,
                                 const uint32_t *tokens, const okv_allocator_t *a, okv_prefill_seq_t *seq,
                                 uint32_t *out_id) {
  okv_remote_client_t *client = prefill->remote;
  uint32_t P = prefill->prefill_tokens;
  uint64_t jn = okv_prefill_job_size(P);
  void *job = okv_malloc(a, jn);
  if (!job)
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_prefill_admit: a prefill job of %llu bytes",
                           (unsigned long long)jn);
  okv_status_t st = okv_prefill_job_pack(tokens, P, rc->budget_blocks, prefill->model_fingerprint, job, jn);
  uint64_t id = 0;
  if (!st) st = okv_remote_client_submit(client, job, (uint32_t)jn, prefill->remote_timeout_s, &id);
  okv_free(a, job);
  if (st) return st;
  uint64_t kv_bytes = 0, blob_bytes = 0;
  void *blob = NULL;
  OKV_RETURN_IF_ERROR(okv_remote_client_open(client, id, &kv_bytes, &blob, &blob_bytes));
  seq->request_id = id;
  okv_admission_t got;
  st = okv_admission_unpack(blob, blob_bytes, a, &got);
  okv_allocator_t sys = okv_allocator_system(); /* the client allocates blobs with the system allocator */
  if (blob) okv_free(&sys, blob);
  if (st)
    return okv_status_annotate(st, "remote server %s: request %llu's admission", okv_remote_client_peer(client),
                               (unsigned long long)id);
  const okv_kv_shape_t *sh = &got.shape;
  if (sh->n_layers != rc->n_layers || sh->n_q_heads != rc->n_q_heads || sh->n_kv_heads != rc->n_kv_heads ||
      sh->head_dim != rc->head_dim || sh->kv_dtype != rc->kv_dtype || got.n_tokens != P ||
      got.full_kv_bytes != kv_bytes) {
    st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                         "remote server %s: request %llu holds %u tokens of KV shape %u layers x %u/%u heads x %u "
                         "(%llu bytes); this model decodes %u tokens of %u x %u/%u x %u",
                         okv_remote_client_peer(client), (unsigned long long)id, got.n_tokens, sh->n_layers,
                         sh->n_q_heads, sh->n_kv_heads, sh->head_dim, (unsigned long long)kv_bytes, P, rc->n_layers,
                         rc->n_q_heads, rc->n_kv_heads, rc->head_dim);
    okv_admission_free(&got);
    return st;
  }
  char name[128];
  snprintf(name, sizeof name, "kv server %s", okv_remote_client_peer(client));
  okv_remote_prefill_t rp;
  okv_admission_prefill(&got,
                        okv_remote_kv_source(&seq->remote, client, id, got.block_bytes, kv_bytes / got.block_bytes,
                                             prefill->remote_timeout_s, name),
                        &rp);
  st = okv_runtime_seq_add_remote(rt, &rp, out_id);
  seq->admitted_bytes = got.admitted_bytes;
  seq->full_kv_bytes = got.full_kv_bytes;
  okv_admission_free(&got);
  return st;
}

okv_status_t okv_prefill_admit(okv_runtime_t *rt, const okv_runtime_config_t *rc, const okv_eval_prefill_t *prefill,
                               uint32_t w, const uint32_t *tokens, const okv_allocator_t *allocator,
                               okv_prefill_seq_t *seq, uint32_t *out_id) {
  if (!rt || !rc || !prefill || !seq || !out_id || w >= prefill->n_windows || prefill->prefill_tokens == 0 ||
      (prefill->remote ? !tokens || !(prefill->remote_timeout_s > 0) : !prefill->kv || !prefill->q))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "okv_prefill_admit: NULL argument, window %u of %u or an incomplete prefill", w,
                           prefill ? prefill->n_windows : 0);
  okv_allocator_t a = allocator ? *allocator : okv_allocator_system();
  return prefill->remote ? admit_remote(rt, rc, prefill, tokens, &a, seq, out_id)
                         : admit_local(rt, rc, prefill, w, &a, seq, out_id);
}

void okv_prefill_seq_close(const okv_eval_prefill_t *prefill, okv_prefill_seq_t *seq) {
  if (!prefill || !seq || !prefill->remote || seq->request_id == 0) return;
  OKV_IGNORE_ERROR(okv_remote_client_close_request(prefill->remote, seq->request_id));
  seq->request_id = 0;
}
