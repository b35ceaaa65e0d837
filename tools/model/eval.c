/* Teacher-forced evaluation of one (mode, drafter, budget) over text windows,
 * batched: one runtime sequence per window. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "model/admission.h"
#include "model/model.h"
#include "model/remote_prefill.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void okv_eval_reference_free(okv_eval_reference_t *r) {
  if (!r) return;
  if (r->offsets) okv_free(&r->allocator, r->offsets);
  if (r->logits) okv_free(&r->allocator, r->logits);
  r->offsets = NULL;
  r->logits = NULL;
}

/* log-sum-exp of logits in double. */
static double logsumexp(const float *x, uint32_t n) {
  double mx = x[0];
  for (uint32_t i = 1; i < n; ++i)
    if (x[i] > mx) mx = x[i];
  double s = 0.0;
  for (uint32_t i = 0; i < n; ++i) s += exp((double)x[i] - mx);
  return mx + log(s);
}

/* The engine's trace hook during okv_eval_run: the batch's window indices
 * (same order as its sequence ids) replace the ids. */
typedef struct eval_trace_t {
  const okv_eval_config_t *config;
  const uint32_t *windows;
} eval_trace_t;

static void eval_trace(void *user, const okv_engine_trace_t *t) {
  const eval_trace_t *et = user;
  okv_engine_trace_t w = *t;
  w.seq_ids = et->windows;
  et->config->trace(et->config->trace_user, &w);
}

okv_status_t okv_eval_run(const okv_model_t *model, okv_hal_device_t *device, const okv_eval_window_t *windows,
                          uint32_t n_windows, const okv_eval_config_t *config, const okv_eval_reference_t *reference,
                          const okv_allocator_t *allocator, okv_eval_reference_t *out_reference,
                          okv_eval_result_t *out_result) {
  return okv_eval_run_prefilled(model, device, windows, n_windows, config, NULL, reference, allocator, out_reference,
                                out_result);
}

okv_status_t okv_eval_run_prefilled(const okv_model_t *model, okv_hal_device_t *device,
                                    const okv_eval_window_t *windows, uint32_t n_windows,
                                    const okv_eval_config_t *config, const okv_eval_prefill_t *prefill,
                                    const okv_eval_reference_t *reference, const okv_allocator_t *allocator,
                                    okv_eval_reference_t *out_reference, okv_eval_result_t *out_result) {
  if (!model || !device || !windows || n_windows == 0 || !config || !out_result)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_eval_run: NULL argument or no windows");
  uint32_t P = prefill ? prefill->prefill_tokens : 0; /* positions [0, P) are prefilled, not scored */
  if (prefill && (prefill->n_windows != n_windows || P == 0 ||
                  (prefill->remote ? !(prefill->remote_timeout_s > 0) : (!prefill->kv || !prefill->q))))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_eval_run: the prefill was made for %u windows, not %u",
                           prefill->n_windows, n_windows);
  const okv_model_config_t *mc = &model->config;
  okv_allocator_t a = allocator ? *allocator : okv_allocator_system();
  uint32_t max_len = 0;
  uint64_t total_positions = 0;
  for (uint32_t w = 0; w < n_windows; ++w) {
    if (!windows[w].tokens || windows[w].n_tokens < 2 || windows[w].n_tokens > mc->seq_len)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_eval_run: window %u has %u tokens (needs 2..seq_len %u)",
                             w, windows[w].n_tokens, mc->seq_len);
    for (uint32_t p = 0; p < windows[w].n_tokens; ++p)
      if (windows[w].tokens[p] >= mc->vocab_size)
        return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_eval_run: window %u token %u out of vocabulary", w, p);
    if (windows[w].n_tokens > max_len) max_len = windows[w].n_tokens;
    if (windows[w].n_tokens < P + 2u)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "okv_eval_run: window %u has %u tokens; a prefill of %u tokens leaves nothing to score", w,
                             windows[w].n_tokens, P);
    total_positions += windows[w].n_tokens - 1 - P;
  }
  if ((unsigned)config->mode >= OKV_MODE_COUNT)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_eval_run: unknown mode %d", (int)config->mode);
  okv_drafter_t drafter = config->mode == OKV_MODE_OASIS ? config->drafter : OKV_DRAFTER_NONE;
  if (config->mode == OKV_MODE_OASIS && (drafter == OKV_DRAFTER_NONE || (unsigned)drafter >= OKV_DRAFTER_COUNT))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "okv_eval_run: mode oasis needs a drafter (oracle, self, ngram)");
  if (reference && (reference->n_windows != n_windows || reference->vocab_size != mc->vocab_size ||
                    reference->offsets[n_windows] != total_positions))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_eval_run: the dense reference was made on other windows");

  okv_runtime_config_t rc;
  okv_model_runtime_config(mc, &rc);
  rc.mode = config->mode;
  uint32_t ctx_blocks = (mc->seq_len + OKV_BLOCK_TOKENS - 1) / OKV_BLOCK_TOKENS;
  /* Dense keeps everything resident: size its working set to the whole context. */
  /* Dense keeps every block resident whatever the budget; the budget only has to be valid (<= OKV_TOPK_MAX). */
  rc.budget_blocks = config->mode != OKV_MODE_DENSE ? config->budget_blocks
                     : ctx_blocks < OKV_TOPK_MAX    ? ctx_blocks
                                                    : OKV_TOPK_MAX;
  rc.dense_threshold_blocks = rc.budget_blocks;
  rc.fetch_ratio_auto = config->fetch_ratio < 0; /* negative: self-tuning cap with that maximum */
  rc.fetch_ratio = config->fetch_ratio < 0 ? -config->fetch_ratio : config->fetch_ratio;
  rc.max_seqs = n_windows;
  rc.max_context_tokens = ctx_blocks * OKV_BLOCK_TOKENS;
  rc.track_recall = config->mode != OKV_MODE_DENSE;
  if (config->scoring_set) rc.scoring = config->scoring;
  if (config->mode != OKV_MODE_DENSE) rc.scoring_groups = config->scoring_groups; /* dense: K is the whole context */
  rc.device_selection = config->device_selection; /* refused with fetch_ratio_auto (INVALID_ARGUMENT) */

  okv_status_t st = OKV_OK;
  okv_runtime_t *rt = NULL;
  okv_engine_t *eng = NULL;
  uint32_t *seq_ids = okv_calloc(&a, n_windows, sizeof *seq_ids);
  okv_prefill_seq_t *admits = okv_calloc(&a, n_windows, sizeof *admits); /* sources: outlive the runtime */
  uint32_t *act_ids = okv_calloc(&a, n_windows, sizeof *act_ids);
  uint32_t *act_win = okv_calloc(&a, n_windows, sizeof *act_win);
  uint32_t *act_tok = okv_calloc(&a, n_windows, sizeof *act_tok);
  uint32_t *act_draft = okv_calloc(&a, n_windows, sizeof *act_draft);
  float *logits = okv_calloc(&a, (size_t)n_windows * mc->vocab_size, sizeof *logits);
  uint32_t n_added = 0;
  okv_eval_reference_t ref_out = {0};
  if (!seq_ids || !admits || !act_ids || !act_win || !act_tok || !act_draft || !logits) {
    st = okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_eval_run: out of memory");
    goto done;
  }
  if (out_reference) {
    ref_out.allocator = a;
    ref_out.n_windows = n_windows;
    ref_out.vocab_size = mc->vocab_size;
    ref_out.offsets = okv_calloc(&a, (size_t)n_windows + 1, sizeof *ref_out.offsets);
    ref_out.logits = okv_malloc(&a, (size_t)total_positions * mc->vocab_size * sizeof(float));
    if (!ref_out.offsets || !ref_out.logits) {
      st = okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_eval_run: out of memory for the dense logits");
      goto done;
    }
    for (uint32_t w = 0; w < n_windows; ++w) ref_out.offsets[w + 1] = ref_out.offsets[w] + windows[w].n_tokens - 1 - P;
  }
  st = okv_runtime_create(device, &rc, &a, &rt);
  if (st) goto done;
  st = okv_engine_create(model, rt, n_windows, drafter != OKV_DRAFTER_NONE ? 1 : 0, &a, &eng);
  if (st) goto done;
  eval_trace_t trace = {config, act_win};
  if (config->trace) okv_engine_set_trace(eng, eval_trace, &trace);
  uint64_t admitted_bytes = 0, full_kv_bytes = 0;
  for (; n_added < n_windows; ++n_added) {
    if (!prefill) {
      st = okv_runtime_seq_add(rt, NULL, &seq_ids[n_added]);
      if (st) goto done;
      continue;
    }
    st = okv_prefill_admit(rt, &rc, prefill, n_added, windows[n_added].tokens, &a, &admits[n_added], &seq_ids[n_added]);
    if (st) goto done;
    admitted_bytes += admits[n_added].admitted_bytes;
    full_kv_bytes += admits[n_added].full_kv_bytes;
  }
  okv_runtime_stats_reset(rt);

  double nll = 0.0, kl = 0.0;
  uint64_t agree = 0, done_positions = 0;
  double t0 = now_s();
  for (uint32_t p = P; p + 1 < max_len; ++p) {
    uint32_t n_act = 0;
    for (uint32_t w = 0; w < n_windows; ++w) {
      if (p + 1 >= windows[w].n_tokens) continue;
      act_ids[n_act] = seq_ids[w];
      act_win[n_act] = w;
      act_tok[n_act] = windows[w].tokens[p];
      if (drafter == OKV_DRAFTER_ORACLE)
        act_draft[n_act] = windows[w].tokens[p + 1];
      else if (drafter == OKV_DRAFTER_NGRAM)
        act_draft[n_act] = okv_drafter_ngram_next(windows[w].tokens, p + 1);
      ++n_act;
    }
    if (drafter == OKV_DRAFTER_SELF) {
      st = okv_engine_peek(eng, n_act, act_ids, act_tok, logits);
      if (st) goto done;
      for (uint32_t i = 0; i < n_act; ++i)
        act_draft[i] = okv_logits_argmax(logits + (size_t)i * mc->vocab_size, mc->vocab_size);
    }
    st = okv_engine_step(eng, n_act, act_ids, act_tok, drafter != OKV_DRAFTER_NONE ? 1 : 0, act_draft, logits, NULL);
    if (st) goto done;
    for (uint32_t i = 0; i < n_act; ++i) {
      uint32_t w = act_win[i];
      const float *lg = logits + (size_t)i * mc->vocab_size;
      double lse = logsumexp(lg, mc->vocab_size);
      nll += lse - (double)lg[windows[w].tokens[p + 1]];
      if (out_reference)
        memcpy(ref_out.logits + ((size_t)ref_out.offsets[w] + p - P) * mc->vocab_size, lg, mc->vocab_size * sizeof *lg);
      if (reference) {
        const float *ld = reference->logits + ((size_t)reference->offsets[w] + p - P) * mc->vocab_size;
        double lse_d = logsumexp(ld, mc->vocab_size), k = 0.0;
        for (uint32_t v = 0; v < mc->vocab_size; ++v) {
          double lpd = (double)ld[v] - lse_d;
          k += exp(lpd) * (lpd - ((double)lg[v] - lse));
        }
        kl += k > 0.0 ? k : 0.0;
        if (okv_logits_argmax(ld, mc->vocab_size) == okv_logits_argmax(lg, mc->vocab_size)) ++agree;
      }
    }
    done_positions += n_act;
    if (config->progress) config->progress(config->progress_user, done_positions, total_positions);
  }
  double elapsed = now_s() - t0;

  okv_eval_result_t r;
  memset(&r, 0, sizeof r);
  r.mode = config->mode;
  r.drafter = drafter;
  r.budget_blocks = config->mode == OKV_MODE_DENSE ? rc.budget_blocks : config->budget_blocks;
  r.fetch_ratio = config->fetch_ratio;
  r.scoring = rc.scoring;
  r.scoring_groups = okv_runtime_config(rt)->scoring_groups;
  r.device_selection = okv_runtime_config(rt)->device_selection;
  r.tokens_evaluated = total_positions;
  r.mean_nll = nll / (double)total_positions;
  r.perplexity = exp(r.mean_nll);
  r.top1_agreement = reference ? (double)agree / (double)total_positions : NAN;
  r.kl_vs_dense = reference ? kl / (double)total_positions : NAN;
  okv_step_stats_t s;
  st = okv_runtime_stats(rt, UINT32_MAX, &s);
  if (st) goto done;
  r.recall = s.recall_total ? (double)s.recall_hits / (double)s.recall_total : NAN;
  r.n_layers = mc->n_layers;
  for (uint32_t l = 0; l < mc->n_layers && l < 64; ++l) {
    okv_step_stats_t sl;
    st = okv_runtime_stats(rt, l, &sl);
    if (st) goto done;
    r.recall_per_layer[l] = sl.recall_total ? (double)sl.recall_hits / (double)sl.recall_total : NAN;
  }
  r.bytes_moved = s.bytes_moved[OKV_TIER_HOST][OKV_TIER_DEVICE];
  r.blocks_moved = s.blocks_moved;
  r.blocks_moved_per_token = (double)s.blocks_moved / (double)total_positions;
  r.deferred_steps = s.deferred_steps;
  r.hits = s.hits;
  r.misses = s.misses;
  r.stall_seconds = s.stall_seconds;
  r.elapsed_s = elapsed;
  r.tokens_per_second = elapsed > 0 ? (double)total_positions / elapsed : 0.0;
  r.prefill_tokens = P;
  r.admitted_bytes = admitted_bytes;
  r.full_kv_bytes = full_kv_bytes;
  r.admission_ratio = admitted_bytes ? (double)full_kv_bytes / (double)admitted_bytes : NAN;
  r.remote_blocks = s.remote_blocks;
  r.remote_bytes = s.remote_bytes;
  r.remote_seconds = s.remote_seconds;
  r.remote_stall_seconds = s.remote_stall_seconds;
  r.remote_gbps = s.remote_seconds > 0 ? (double)s.remote_bytes / s.remote_seconds / 1e9 : NAN;
  *out_result = r;

done:
  for (uint32_t i = 0; i < n_added; ++i) OKV_IGNORE_ERROR(okv_runtime_seq_remove(rt, seq_ids[i]));
  okv_engine_destroy(eng);
  okv_runtime_destroy(rt);
  for (uint32_t i = 0; admits && i < n_windows; ++i) okv_prefill_seq_close(prefill, &admits[i]); /* after the runtime */
  if (seq_ids) okv_free(&a, seq_ids);
  if (act_ids) okv_free(&a, act_ids);
  if (act_win) okv_free(&a, act_win);
  if (act_tok) okv_free(&a, act_tok);
  if (act_draft) okv_free(&a, act_draft);
  if (logits) okv_free(&a, logits);
  if (admits) okv_free(&a, admits);
  if (st || !out_reference) {
    okv_eval_reference_free(&ref_out);
  } else {
    *out_reference = ref_out;
  }
  return st;
}

/* ---- dense prefill for disaggregation (--prefill-tokens) ---- */

/* Captures the real token's queries of every layer while `armed` (the step of token P). */
typedef struct prefill_trace_t {
  float *q; /* [n_windows][n_layers][n_q_heads * head_dim] */
  uint32_t n_layers;
  size_t q_elems; /* n_q_heads * head_dim */
  bool armed;
} prefill_trace_t;

static void prefill_trace(void *user, const okv_engine_trace_t *t) {
  prefill_trace_t *pt = user;
  if (!pt->armed) return;
  for (uint32_t i = 0; i < t->n_seqs; ++i) /* batch row i is window i */
    memcpy(pt->q + ((size_t)i * pt->n_layers + t->layer) * pt->q_elems,
           t->q + (size_t)i * t->n_query_tokens * pt->q_elems, pt->q_elems * sizeof(float));
}

void okv_eval_prefill_free(okv_eval_prefill_t *p) {
  if (!p) return;
  if (p->kv) {
    for (uint32_t w = 0; w < p->n_windows; ++w) okv_kv_blocks_free(&p->kv[w]);
    okv_free(&p->allocator, p->kv);
  }
  if (p->q) okv_free(&p->allocator, p->q);
  memset(p, 0, sizeof *p);
}

okv_status_t okv_eval_prefill(const okv_model_t *model, okv_hal_device_t *device, const okv_eval_window_t *windows,
                              uint32_t n_windows, uint32_t prefill_tokens, const okv_allocator_t *allocator,
                              okv_eval_prefill_t *out) {
  if (!out) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_eval_prefill: out is NULL");
  memset(out, 0, sizeof *out);
  if (!model || !device || !windows || n_windows == 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_eval_prefill: NULL argument or no windows");
  const okv_model_config_t *mc = &model->config;
  uint32_t P = prefill_tokens;
  if (P == 0) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_eval_prefill: prefill_tokens is 0");
  for (uint32_t w = 0; w < n_windows; ++w) {
    if (!windows[w].tokens || windows[w].n_tokens < P + 2u || windows[w].n_tokens > mc->seq_len)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "okv_eval_prefill: window %u has %u tokens; a prefill of %u tokens needs %u..seq_len %u",
                             w, windows[w].n_tokens, P, P + 2u, mc->seq_len);
    for (uint32_t p = 0; p <= P; ++p)
      if (windows[w].tokens[p] >= mc->vocab_size)
        return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_eval_prefill: window %u token %u out of vocabulary", w,
                               p);
  }
  okv_allocator_t a = allocator ? *allocator : okv_allocator_system();
  okv_runtime_config_t rc;
  okv_model_runtime_config(mc, &rc);
  uint32_t ctx_blocks = (P + 1u + OKV_BLOCK_TOKENS - 1u) / OKV_BLOCK_TOKENS; /* tokens 0..P */
  rc.mode = OKV_MODE_DENSE;
  rc.budget_blocks = ctx_blocks < OKV_TOPK_MAX ? ctx_blocks : OKV_TOPK_MAX;
  rc.dense_threshold_blocks = rc.budget_blocks;
  rc.max_seqs = n_windows;
  rc.max_context_tokens = ctx_blocks * OKV_BLOCK_TOKENS;
  size_t qn = (size_t)mc->n_q_heads * mc->head_dim, kvn = (size_t)P * mc->n_kv_heads * mc->head_dim;
  okv_status_t st = OKV_OK;
  okv_runtime_t *rt = NULL;
  okv_engine_t *eng = NULL;
  uint32_t n_added = 0;
  uint32_t *ids = okv_calloc(&a, n_windows, sizeof *ids), *tok = okv_calloc(&a, n_windows, sizeof *tok);
  float *logits = okv_calloc(&a, (size_t)n_windows * mc->vocab_size, sizeof *logits);
  float *k = okv_calloc(&a, (size_t)mc->n_layers * kvn, sizeof *k),
        *v = okv_calloc(&a, (size_t)mc->n_layers * kvn, sizeof *v);
  out->allocator = a;
  out->n_windows = n_windows;
  out->prefill_tokens = P;
  out->kv = okv_calloc(&a, n_windows, sizeof *out->kv);
  out->q = okv_calloc(&a, (size_t)n_windows * mc->n_layers * qn, sizeof *out->q);
  if (!ids || !tok || !logits || !k || !v || !out->kv || !out->q) {
    st = okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_eval_prefill: out of memory");
    goto done;
  }
  st = okv_runtime_create(device, &rc, &a, &rt);
  if (st) goto done;
  st = okv_engine_create(model, rt, n_windows, 0, &a, &eng);
  if (st) goto done;
  prefill_trace_t pt = {out->q, mc->n_layers, qn, false};
  okv_engine_set_trace(eng, prefill_trace, &pt);
  for (; n_added < n_windows; ++n_added) {
    st = okv_runtime_seq_add(rt, NULL, &ids[n_added]);
    if (st) goto done;
  }
  for (uint32_t p = 0; p <= P; ++p) { /* token P's step only yields its queries */
    for (uint32_t w = 0; w < n_windows; ++w) tok[w] = windows[w].tokens[p];
    pt.armed = p == P;
    st = okv_engine_step(eng, n_windows, ids, tok, 0, NULL, logits, NULL);
    if (st) goto done;
  }
  okv_kv_shape_t shape = {mc->n_layers, mc->n_q_heads, mc->n_kv_heads, mc->head_dim, rc.kv_dtype};
  for (uint32_t w = 0; w < n_windows; ++w) {
    for (uint32_t l = 0; l < mc->n_layers; ++l) {
      st = okv_runtime_seq_read_kv(rt, ids[w], l, 0, P, k + l * kvn, v + l * kvn);
      if (st) goto done;
    }
    st = okv_kv_blocks_make(&shape, P, k, v, &a, &out->kv[w]);
    if (st) goto done;
  }
done:
  for (uint32_t i = 0; i < n_added; ++i) OKV_IGNORE_ERROR(okv_runtime_seq_remove(rt, ids[i])); /* cleanup */
  okv_engine_destroy(eng);
  okv_runtime_destroy(rt);
  if (ids) okv_free(&a, ids);
  if (tok) okv_free(&a, tok);
  if (logits) okv_free(&a, logits);
  if (k) okv_free(&a, k);
  if (v) okv_free(&a, v);
  if (st) okv_eval_prefill_free(out);
  return st;
}
