/* The forward pass over the runtime (okv_engine_*) and the evaluation loop on
 * the shared checkpoints: dense logits vs the double-precision reference,
 * the known answers, greedy text, every mode equal to dense when K covers the
 * context, sparse modes close to dense, the MHA model, bad inputs.
 * argv[1]: backend, argv[2]: the shared directory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test_common.h"
#include "tests/model/model_test_util.h"
#include "tests/model/reference.h"

static const char *g_backend;
static const char *g_shared;

typedef struct fixture_t {
  okv_allocator_t alloc;
  okv_hal_device_t *device;
  okv_model_t *model;
  okv_tokenizer_t *tok;
  uint32_t text_tokens[1024];
  uint32_t n_text_tokens;
} fixture_t;

static int open_fixture(void **state, const char *model_rel, const char *tok_rel) {
  fixture_t *f = calloc(1, sizeof *f);
  f->alloc = okv_test_allocator();
  char mp[4096], tp[4096], xp[4096];
  okv_ref_shared_path(g_shared, model_rel, mp, sizeof mp);
  okv_ref_shared_path(g_shared, tok_rel, tp, sizeof tp);
  okv_ref_shared_path(g_shared, "data/tinystories_val.txt", xp, sizeof xp);
  okv_hal_device_params_t p;
  okv_hal_device_params_init(&p);
  p.n_threads = 1;
  okv_status_t s = okv_hal_device_create(g_backend, &p, &f->alloc, &f->device);
  if (!s) s = okv_model_load(mp, &f->alloc, &f->model);
  if (!s) s = okv_tokenizer_load(tp, f->model->config.vocab_size, &f->alloc, &f->tok);
  if (!s) {
    /* The first 2000 bytes of the text, cut to seq_len tokens. */
    FILE *fp = fopen(xp, "rb");
    char buf[2001];
    size_t n = fp ? fread(buf, 1, 2000, fp) : 0;
    if (fp) fclose(fp);
    size_t nt = 0;
    s = okv_tokenizer_encode(f->tok, buf, n, true, f->text_tokens, 1024, &nt);
    f->n_text_tokens = (uint32_t)(nt < f->model->config.seq_len ? nt : f->model->config.seq_len);
  }
  if (s) {
    fprintf(stderr, "fixture: %s\n", okv_status_message(s));
    okv_status_free(s);
    okv_tokenizer_free(f->tok);
    okv_model_free(f->model);
    if (f->device) okv_status_free(okv_hal_device_release(f->device));
    free(f);
    return -1;
  }
  *state = f;
  return 0;
}

static int setup_stories(void **state) { return open_fixture(state, "models/stories260K.bin", "models/tok512.bin"); }
static int setup_aidreams(void **state) {
  return open_fixture(state, "models/aidreams260K.bin", "models/aidreams_tok512.bin");
}

static int teardown(void **state) {
  fixture_t *f = *state;
  okv_tokenizer_free(f->tok);
  okv_model_free(f->model);
  okv_status_free(okv_hal_device_release(f->device));
  free(f);
  return 0;
}

static okv_runtime_t *make_runtime(fixture_t *f, okv_mode_t mode, uint32_t budget, uint32_t max_seqs) {
  const okv_model_config_t *c = &f->model->config;
  okv_runtime_config_t rc;
  okv_model_runtime_config(c, &rc);
  rc.mode = mode;
  rc.budget_blocks = budget;
  rc.dense_threshold_blocks = budget;
  rc.max_seqs = max_seqs;
  rc.max_context_tokens = (c->seq_len + 15) / 16 * 16;
  okv_runtime_t *rt = NULL;
  OKV_ASSERT_OK(okv_runtime_create(f->device, &rc, &f->alloc, &rt));
  return rt;
}

/* A runtime for one sequence, an engine on it and the sequence. */
typedef struct session_t {
  okv_runtime_t *rt;
  okv_engine_t *e;
  uint32_t seq;
} session_t;

static session_t open_session(fixture_t *f, okv_mode_t mode, uint32_t budget, uint32_t max_drafts) {
  session_t s = {make_runtime(f, mode, budget, 1), NULL, 0};
  OKV_ASSERT_OK(okv_engine_create(f->model, s.rt, 1, max_drafts, &f->alloc, &s.e));
  OKV_ASSERT_OK(okv_runtime_seq_add(s.rt, NULL, &s.seq));
  return s;
}

static void close_session(session_t *s) {
  OKV_ASSERT_OK(okv_runtime_seq_remove(s->rt, s->seq));
  okv_engine_destroy(s->e);
  okv_runtime_destroy(s->rt);
}

/* Dense engine logits vs the double reference over n positions of the text. */
static void check_dense_vs_reference(fixture_t *f, uint32_t n_positions) {
  const okv_model_config_t *c = &f->model->config;
  session_t s = open_session(f, OKV_MODE_DENSE, (c->seq_len + 15) / 16, 0);
  okv_ref_state_t rs;
  assert_int_equal(okv_ref_init(&rs, f->model), 0);
  float *lg = malloc(c->vocab_size * sizeof *lg);
  double *ref = malloc(c->vocab_size * sizeof *ref);
  double max_err = 0.0;
  for (uint32_t p = 0; p < n_positions; ++p) {
    uint32_t tok = f->text_tokens[p];
    OKV_ASSERT_OK(okv_engine_step(s.e, 1, &s.seq, &tok, 0, NULL, lg, NULL));
    okv_ref_forward(&rs, tok, p, ref);
    for (uint32_t v = 0; v < c->vocab_size; ++v) {
      double d = fabs((double)lg[v] - ref[v]);
      if (d > max_err) max_err = d;
    }
  }
  print_message("dense engine vs double reference over %u positions: max |logit error| %.3g\n", n_positions, max_err);
  assert_true(max_err < 1e-4);
  uint32_t len = 0;
  OKV_ASSERT_OK(okv_runtime_seq_length(s.rt, s.seq, &len));
  assert_int_equal(len, n_positions);
  free(lg);
  free(ref);
  okv_ref_free(&rs);
  close_session(&s);
}

static void test_dense_vs_reference(void **state) {
  fixture_t *f = *state;
  assert_true(f->n_text_tokens >= 500);
  check_dense_vs_reference(f, f->n_text_tokens);
}

/* The known answers hold in every mode (5 tokens: one partial block, always resident). */
static void test_known_answers(void **state) {
  fixture_t *f = *state;
  for (int mode = 0; mode < OKV_MODE_COUNT; ++mode) {
    session_t s = open_session(f, (okv_mode_t)mode, 8, 1);
    float lg[512];
    for (uint32_t p = 0; p < 5; ++p) {
      uint32_t draft = p < 4 ? okv_mtest_top5[p + 1].token : 0;
      OKV_ASSERT_OK(
          okv_engine_step(s.e, 1, &s.seq, &okv_mtest_top5[p].token, mode == OKV_MODE_OASIS ? 1 : 0, &draft, lg, NULL));
      for (int r = 0; r < 5; ++r) {
        uint32_t best = okv_logits_argmax(lg, 512);
        assert_int_equal(best, okv_mtest_top5[p].top_ids[r]);
        assert_float_equal(lg[best], okv_mtest_top5[p].top_logits[r], 1e-4);
        lg[best] = -INFINITY;
      }
    }
    close_session(&s);
  }
}

/* Greedy decoding from BOS with the self drafter; returns the token count. */
static uint32_t greedy(fixture_t *f, okv_mode_t mode, uint32_t n_steps, uint32_t *out_tokens) {
  session_t s = open_session(f, mode, 8, 1);
  float lg[512];
  out_tokens[0] = OKV_TOKEN_BOS;
  uint32_t n = 1;
  for (; n < n_steps; ++n) {
    uint32_t tok = out_tokens[n - 1], draft = 0;
    if (mode == OKV_MODE_OASIS) {
      OKV_ASSERT_OK(okv_engine_peek(s.e, 1, &s.seq, &tok, lg));
      draft = okv_logits_argmax(lg, 512);
    }
    OKV_ASSERT_OK(okv_engine_step(s.e, 1, &s.seq, &tok, mode == OKV_MODE_OASIS ? 1 : 0, &draft, lg, NULL));
    out_tokens[n] = okv_logits_argmax(lg, 512);
    if (mode == OKV_MODE_OASIS) assert_int_equal(out_tokens[n], draft); /* peek == step while all is resident */
    if (out_tokens[n] == OKV_TOKEN_BOS) break;
  }
  close_session(&s);
  return n;
}

static void test_greedy_text(void **state) {
  fixture_t *f = *state;
  /* 100 tokens stay under K = 8 blocks (128 tokens): every mode is still dense, peek equals step. */
  uint32_t a[128], b[128];
  uint32_t na = greedy(f, OKV_MODE_OASIS, 100, a);
  uint32_t nb = greedy(f, OKV_MODE_OASIS, 100, b);
  assert_int_equal(na, nb);
  assert_memory_equal(a, b, na * sizeof *a);
  uint32_t nd = greedy(f, OKV_MODE_DENSE, 100, b);
  assert_int_equal(na, nd);
  assert_memory_equal(a, b, na * sizeof *a);
  char text[4096];
  okv_mtest_decode(f->tok, a, na, text, sizeof text);
  print_message("greedy: %.80s...\n", text);
  const char *expect = "Once upon a time, there was a little girl named Lily.";
  assert_true(strncmp(text, expect, strlen(expect)) == 0);
}

/* Two windows of different lengths (the batch shrinks when the short one
 * ends), their dense result at K = budget and its logits, the reference of
 * the other runs, which take ec with mode and drafter set. */
typedef struct eval_case_t {
  okv_eval_window_t w[2];
  okv_eval_config_t ec;
  okv_eval_reference_t ref;
  okv_eval_result_t dense;
} eval_case_t;

static void eval_dense(fixture_t *f, uint32_t budget, eval_case_t *x) {
  x->w[0].tokens = f->text_tokens;
  x->w[0].n_tokens = 320; /* 20 blocks: K = 8 is sparse, K = 32 covers it */
  x->w[1].tokens = f->text_tokens + 200;
  x->w[1].n_tokens = 150;
  x->ec = (okv_eval_config_t){
      .mode = OKV_MODE_DENSE, .drafter = OKV_DRAFTER_NONE, .budget_blocks = budget, .fetch_ratio = 0.05};
  OKV_ASSERT_OK(okv_eval_run(f->model, f->device, x->w, 2, &x->ec, NULL, &f->alloc, &x->ref, &x->dense));
}

/* The same windows and budget in another mode, scored against the dense reference. */
static void eval_vs_dense(fixture_t *f, eval_case_t *x, okv_mode_t mode, okv_drafter_t drafter, okv_eval_result_t *r) {
  x->ec.mode = mode;
  x->ec.drafter = drafter;
  OKV_ASSERT_OK(okv_eval_run(f->model, f->device, x->w, 2, &x->ec, &x->ref, &f->alloc, NULL, r));
}

/* With K covering the whole context every mode is dense: the same NLL, bit for bit. */
static void test_large_budget_equals_dense(void **state) {
  fixture_t *f = *state;
  eval_case_t x;
  eval_dense(f, 32, &x);
  okv_eval_result_t r;
  assert_int_equal(x.dense.tokens_evaluated, x.w[0].n_tokens - 1 + x.w[1].n_tokens - 1);
  assert_true(x.dense.mean_nll > 0.5 && x.dense.mean_nll < 3.0);
  static const struct {
    okv_mode_t mode;
    okv_drafter_t drafter;
  } runs[] = {{OKV_MODE_OASIS, OKV_DRAFTER_ORACLE},
              {OKV_MODE_OASIS, OKV_DRAFTER_SELF},
              {OKV_MODE_OASIS, OKV_DRAFTER_NGRAM},
              {OKV_MODE_PROXY, OKV_DRAFTER_NONE},
              {OKV_MODE_ONDEMAND, OKV_DRAFTER_NONE}};
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; ++i) {
    eval_vs_dense(f, &x, runs[i].mode, runs[i].drafter, &r);
    if (r.mean_nll != x.dense.mean_nll)
      print_error("mode %d drafter %d: NLL %.17g vs dense %.17g\n", runs[i].mode, runs[i].drafter, r.mean_nll,
                  x.dense.mean_nll);
    assert_true(r.mean_nll == x.dense.mean_nll);
    assert_true(r.top1_agreement == 1.0);
    assert_true(r.kl_vs_dense == 0.0);
    assert_int_equal(r.blocks_moved, 0);
  }
  okv_eval_reference_free(&x.ref);
}

/* A sparse budget: oasis with the oracle drafter stays close to dense, moves blocks, recalls most. */
static void test_sparse_close_to_dense(void **state) {
  fixture_t *f = *state;
  eval_case_t x;
  eval_dense(f, 8, &x);
  okv_eval_result_t r;
  eval_vs_dense(f, &x, OKV_MODE_OASIS, OKV_DRAFTER_ORACLE, &r);
  print_message("oasis+oracle K=8: NLL %.5f vs dense %.5f, recall %.4f, top1 %.4f, blocks/token %.3f\n", r.mean_nll,
                x.dense.mean_nll, r.recall, r.top1_agreement, r.blocks_moved_per_token);
  assert_true(r.mean_nll != x.dense.mean_nll); /* it is really sparse */
  assert_true(fabs(r.mean_nll - x.dense.mean_nll) < 0.02 * x.dense.mean_nll);
  assert_true(r.recall > 0.8 && r.recall <= 1.0);
  assert_true(r.top1_agreement > 0.9 && r.top1_agreement <= 1.0);
  assert_true(r.kl_vs_dense > 0.0 && r.kl_vs_dense < 0.05);
  assert_true(r.blocks_moved > 0);
  assert_int_equal(r.bytes_moved, r.blocks_moved * okv_block_bytes(OKV_DTYPE_F32, f->model->config.head_dim));
  for (uint32_t l = 0; l < f->model->config.n_layers; ++l)
    assert_true(r.recall_per_layer[l] > 0.5 && r.recall_per_layer[l] <= 1.0);
  okv_eval_reference_free(&x.ref);
}

/* Selection on the device (okv_runtime_config_t.device_selection) makes the host's decisions on a real model:
 * oasis (self drafter) and proxy at K = 8 give the host selection's recall and moved blocks exactly, and its NLL to
 * float rounding. */
static void test_device_selection_same_nll(void **state) {
  fixture_t *f = *state;
  eval_case_t x;
  eval_dense(f, 8, &x);
  static const okv_mode_t modes[] = {OKV_MODE_OASIS, OKV_MODE_PROXY};
  for (size_t i = 0; i < 2; i++) {
    okv_drafter_t dr = modes[i] == OKV_MODE_OASIS ? OKV_DRAFTER_SELF : OKV_DRAFTER_NONE;
    okv_eval_result_t host, dev;
    x.ec.device_selection = false;
    eval_vs_dense(f, &x, modes[i], dr, &host);
    x.ec.device_selection = true;
    eval_vs_dense(f, &x, modes[i], dr, &dev);
    x.ec.device_selection = false;
    print_message("%s K=8: NLL host %.17g device %.17g, blocks moved %llu / %llu\n", okv_mode_name(modes[i]),
                  host.mean_nll, dev.mean_nll, (unsigned long long)host.blocks_moved,
                  (unsigned long long)dev.blocks_moved);
    assert_true(host.mean_nll != x.dense.mean_nll); /* really sparse */
    assert_true(host.blocks_moved > 0);
    /* The same blocks every step; attention sums a head's blocks in table order on the device and in the
     * maps' order on the host, so the NLL agrees to float rounding, not bit for bit. */
    assert_true(fabs(dev.mean_nll - host.mean_nll) <= 1e-6 * fabs(host.mean_nll));
    assert_true(dev.recall == host.recall);
    assert_int_equal(dev.blocks_moved, host.blocks_moved);
  }
  okv_eval_reference_free(&x.ref);
}

static void test_bad_inputs(void **state) {
  fixture_t *f = *state;
  const okv_model_config_t *c = &f->model->config;
  session_t s = open_session(f, OKV_MODE_OASIS, 8, 1);
  okv_engine_t *e = NULL;
  OKV_ASSERT_CODE(okv_engine_create(f->model, s.rt, 0, 1, &f->alloc, &e), OKV_STATUS_INVALID_ARGUMENT);
  float *lg = malloc(c->vocab_size * sizeof *lg);
  uint32_t bad = c->vocab_size, good = 1, draft = 5;
  OKV_ASSERT_CODE(okv_engine_step(s.e, 1, &s.seq, &bad, 1, &draft, lg, NULL), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_engine_step(s.e, 1, &s.seq, &good, 1, &bad, lg, NULL), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_engine_step(s.e, 1, &s.seq, &good, 0, NULL, lg, NULL), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_engine_step(s.e, 2, &s.seq, &good, 1, &draft, lg, NULL), OKV_STATUS_INVALID_ARGUMENT);
  uint32_t missing = s.seq + 1000;
  assert_int_not_equal(okv_status_consume(okv_engine_step(s.e, 1, &missing, &good, 1, &draft, lg, NULL)),
                       OKV_STATUS_OK);
  uint32_t len = 1;
  OKV_ASSERT_OK(okv_runtime_seq_length(s.rt, s.seq, &len));
  assert_int_equal(len, 0); /* nothing was committed */
  OKV_ASSERT_OK(okv_engine_step(s.e, 1, &s.seq, &good, 1, &draft, lg, NULL));
  close_session(&s);
  /* A runtime of another shape. */
  okv_runtime_config_t rc;
  okv_model_runtime_config(c, &rc);
  rc.head_dim = c->head_dim * 2;
  rc.budget_blocks = 8;
  rc.max_seqs = 1;
  rc.max_context_tokens = 512;
  okv_runtime_t *rt = NULL;
  OKV_ASSERT_OK(okv_runtime_create(f->device, &rc, &f->alloc, &rt));
  e = (okv_engine_t *)(uintptr_t)1;
  OKV_ASSERT_CODE(okv_engine_create(f->model, rt, 1, 1, &f->alloc, &e), OKV_STATUS_INVALID_ARGUMENT);
  assert_null(e);
  okv_runtime_destroy(rt);
  /* Eval config errors. */
  okv_eval_window_t w = {f->text_tokens, 1};
  okv_eval_config_t ec = {OKV_MODE_DENSE, OKV_DRAFTER_NONE, 8, 0.05, NULL, NULL, NULL, NULL,
                          false,          OKV_SCORING_FLAT, 0, false};
  okv_eval_result_t r;
  OKV_ASSERT_CODE(okv_eval_run(f->model, f->device, &w, 1, &ec, NULL, &f->alloc, NULL, &r),
                  OKV_STATUS_INVALID_ARGUMENT);
  w.n_tokens = 10;
  ec.mode = OKV_MODE_OASIS;
  OKV_ASSERT_CODE(okv_eval_run(f->model, f->device, &w, 1, &ec, NULL, &f->alloc, NULL, &r),
                  OKV_STATUS_INVALID_ARGUMENT);
  free(lg);
}

/* The MHA model (4 query = 4 KV heads, seq_len 128): dense matches the
 * reference; a sparse run goes to the last position (its draft lies past the
 * RoPE table) and one more step is refused. */
static void test_aidreams(void **state) {
  fixture_t *f = *state;
  const okv_model_config_t *c = &f->model->config;
  assert_int_equal(c->n_q_heads, c->n_kv_heads);
  assert_int_equal(f->n_text_tokens, 128);
  check_dense_vs_reference(f, 128);
  session_t s = open_session(f, OKV_MODE_OASIS, 2, 1);
  float lg[512];
  okv_step_stats_t st;
  uint64_t moved = 0;
  for (uint32_t p = 0; p < 128; ++p) {
    uint32_t tok = f->text_tokens[p], draft = okv_drafter_ngram_next(f->text_tokens, p + 1);
    OKV_ASSERT_OK(okv_engine_step(s.e, 1, &s.seq, &tok, 1, &draft, lg, &st));
    moved += st.blocks_moved;
    for (uint32_t v = 0; v < 512; ++v) assert_true(isfinite(lg[v]));
  }
  assert_true(moved > 0);
  uint32_t tok = 1, draft = 1;
  OKV_ASSERT_CODE(okv_engine_step(s.e, 1, &s.seq, &tok, 1, &draft, lg, NULL), OKV_STATUS_INVALID_ARGUMENT);
  close_session(&s);
}

int main(int argc, char **argv) {
  g_backend = okv_test_backend_or_skip(argc, argv);
  g_shared = okv_mtest_shared_dir(argc, argv, 2, "models/stories260K.bin");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_dense_vs_reference, setup_stories, teardown),
      cmocka_unit_test_setup_teardown(test_known_answers, setup_stories, teardown),
      cmocka_unit_test_setup_teardown(test_greedy_text, setup_stories, teardown),
      cmocka_unit_test_setup_teardown(test_large_budget_equals_dense, setup_stories, teardown),
      cmocka_unit_test_setup_teardown(test_sparse_close_to_dense, setup_stories, teardown),
      cmocka_unit_test_setup_teardown(test_device_selection_same_nll, setup_stories, teardown),
      cmocka_unit_test_setup_teardown(test_bad_inputs, setup_stories, teardown),
      cmocka_unit_test_setup_teardown(test_aidreams, setup_aidreams, teardown),
  };
  return cmocka_run_group_tests_name("model_engine", tests, NULL, NULL);
}
