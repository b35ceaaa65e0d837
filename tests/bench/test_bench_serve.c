/* `oasiskv bench serve` end to end on a tiny shape (a few steps, seconds),
 * checked through its JSON: every mode present with the required keys,
 * values in range, the cap respected, offload's traffic hand-computed; trace
 * replay; `oasiskv eval --trace` (stories260K, oracle drafter: the layer-0
 * draft query of position p is the real query of p + 1); bad options; and
 * `oasiskv info` showing the emulated link; `oasiskv bench runtime`'s capacity check and how it reports
 * `--fetch-ratio auto`.
 * usage: test_bench_serve <path to oasiskv> <shared dir> */
#include <json-c/json.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/common/test_common.h"
#include "tools/kv_trace.h"

static const char *g_cli, *g_shared;
static char g_dir[256];

/* Runs the CLI with `args` (a shell-quoted string), stdout to out_path (or /dev/null), stderr to dir/err.
 * Returns the exit status. */
static int run_cli(const char *args, const char *out_path) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' %s >'%s' 2>'%s/err'", g_cli, args, out_path ? out_path : "/dev/null", g_dir);
  int rc = system(cmd);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void show_stderr(void) {
  char path[300], line[512];
  snprintf(path, sizeof path, "%s/err", g_dir);
  FILE *f = fopen(path, "r");
  while (f && fgets(line, sizeof line, f)) print_message("  | %s", line);
  if (f) fclose(f);
}

/* The first line the last run_cli wrote on stderr, into line[0..n). */
static void first_stderr_line(char *line, int n) {
  char path[300];
  snprintf(path, sizeof path, "%s/err", g_dir);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  assert_non_null(fgets(line, n, f));
  fclose(f);
}

static int stderr_lines(void) {
  char path[300];
  snprintf(path, sizeof path, "%s/err", g_dir);
  FILE *f = fopen(path, "r");
  int n = 0, c;
  while (f && (c = fgetc(f)) != EOF) n += c == '\n';
  if (f) fclose(f);
  return n;
}

/* Each command of bad[0..n) fails with one line on stderr: exit status `rc` (0: any failure short of a
 * crash or a missing program, 1..125). */
static void expect_one_line_errors(const char *const *bad, size_t n, int rc_want) {
  for (size_t i = 0; i < n; i++) {
    int rc = run_cli(bad[i], NULL);
    bool rc_ok = rc_want ? rc == rc_want : rc > 0 && rc < 126;
    if (!rc_ok || stderr_lines() != 1) {
      print_error("'%s': exit %d, %d stderr lines\n", bad[i], rc, stderr_lines());
      show_stderr();
      fail();
    }
  }
}

static double num(json_object *o, const char *key) {
  json_object *v = NULL;
  if (!json_object_object_get_ex(o, key, &v) || v == NULL) {
    print_error("JSON key '%s' missing or null\n", key);
    fail();
  }
  return json_object_get_double(v);
}

static const char *str(json_object *o, const char *key) {
  json_object *v = NULL;
  if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string)) {
    print_error("JSON key '%s' missing or not a string\n", key);
    fail();
  }
  return json_object_get_string(v);
}

/* True when `key` is present with JSON null, or absent. */
static bool null_or_absent(json_object *o, const char *key) {
  json_object *v = NULL;
  return !json_object_object_get_ex(o, key, &v) || v == NULL;
}

static bool flag(json_object *o, const char *key) {
  json_object *v = NULL;
  if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_boolean)) {
    print_error("JSON key '%s' missing or not a boolean\n", key);
    fail();
  }
  return json_object_get_boolean(v);
}

/* The common run: tiny shape (8 query / 2 KV heads, head_dim 64: 4 KiB blocks), 2 layers, 1024-token prompts,
 * K = 16, fetch ratio 0.25 (C = 4), a 0.5 GB/s emulated link. */
/* Runs the CLI with `args`, which write JSON to `json`; checks exit 0 (stderr shown otherwise) and an array of
 * `n` objects, which it returns (json_object_put by the caller). */
static json_object *run_json(const char *args, const char *json, size_t n) {
  int rc = run_cli(args, NULL);
  if (rc != 0) show_stderr();
  assert_int_equal(rc, 0);
  json_object *arr = json_object_from_file(json);
  assert_non_null(arr);
  assert_int_equal(json_object_array_length(arr), n);
  return arr;
}

#define SMOKE_ARGS                                                                                           \
  "bench serve --shape tiny --layers 2 --context 1024 --decode 3 --warmup 1 --device-gib 0.006 --budget 16 " \
  "--fetch-ratio 0.25 --link-gbps 0.5 --link-latency-us 5 --recall-steps 1 --recall-seqs 1 --time-budget 20 "

static void test_serve_all_modes(void **state) {
  (void)state;
  char json[300], args[1024];
  snprintf(json, sizeof json, "%s/serve.json", g_dir);
  snprintf(args, sizeof args, SMOKE_ARGS "--json '%s'", json);
  int rc = run_cli(args, NULL);
  if (rc != 0) show_stderr();
  assert_int_equal(rc, 0);
  json_object *arr = json_object_from_file(json);
  assert_non_null(arr);
  assert_true(json_object_is_type(arr, json_type_array));
  assert_int_equal(json_object_array_length(arr), 5);
  static const char *const modes[5] = {"dense", "offload", "ondemand", "proxy", "oasis"};
  const double H = 2, L = 2, bb = 2.0 * 16 * 64 * 2, C = 4; /* C = ceil(0.25 * 16) */
  double conc[5];
  for (size_t i = 0; i < 5; i++) {
    json_object *o = json_object_array_get_idx(arr, i);
    assert_string_equal(str(o, "mode"), modes[i]);
    assert_string_equal(str(o, "source"), "generator");
    double tps = num(o, "tokens_per_second"), util = num(o, "link_utilization"), stall = num(o, "stall_fraction");
    double recall = num(o, "recall"), bytes = num(o, "bytes_per_step"), steps = num(o, "steps");
    conc[i] = num(o, "concurrent_sequences");
    print_message("%-8s seqs %.0f tok/s %.1f bytes/step %.0f util %.3f stall %.3f recall %.3f\n", modes[i], conc[i],
                  tps, bytes, util, stall, recall);
    assert_true(conc[i] >= 1);
    assert_true(steps >= 1 && steps <= 3);
    assert_true(tps > 0 && isfinite(tps));
    /* tokens/s = sequences x steps / measured time, and time = steps x step_seconds. */
    assert_true(fabs(tps * num(o, "step_seconds") - conc[i]) <= 1e-6 * conc[i]);
    assert_true(util >= 0 && util <= 1.1); /* a paced link cannot carry much more than its budget */
    assert_true(stall >= 0 && stall <= 1);
    assert_true(recall >= 0 && recall <= 1);
    assert_true(bytes >= 0);
    assert_true(fabs(num(o, "link_budget_bytes_per_step") - 0.5e9 * num(o, "step_seconds")) <=
                1e-6 * num(o, "link_budget_bytes_per_step"));
    if (i == 0 || i == 1) assert_true(recall == 1.0); /* dense and offload attend to every block */
    assert_false(flag(o, "concurrency_at_max_seqs")); /* 0.006 GiB holds far fewer than 256 sequences */
    assert_true(null_or_absent(o, "link_halved_at_step"));
    if (i < 3) { /* no cap in dense, offload, ondemand */
      assert_true(null_or_absent(o, "cap_bytes_per_step"));
      assert_true(null_or_absent(o, "fetch_ratio"));
    }
    if (i >= 3) { /* proxy, oasis: the cap, C new blocks per KV head per step, plus one active block refresh */
      double fetch = num(o, "fetch_bytes_per_step"), append = num(o, "append_bytes_per_step");
      assert_true(fabs(num(o, "cap_bytes_per_step") - C * H * L * bb * conc[i]) < 0.5);
      assert_true(fetch <= C * H * L * bb * conc[i]);
      assert_true(append <= 2 * H * L * bb * conc[i]); /* the active block, and at a block boundary the one before */
      assert_true(bytes <= (C + 2) * H * L * bb * conc[i]);
      assert_true(fabs(bytes - fetch - append) < 1.0);
    }
    if (i == 1) { /* offload streams every block of every head each step: prompt 1024 + 1 warm-up token */
      double lo = conc[i] * L * H * 65 * bb, hi = conc[i] * L * H * 65 * bb; /* positions 1025..1027: 65 blocks */
      assert_true(bytes >= lo - 0.5 && bytes <= hi + 0.5);
    }
  }
  /* Equal DEVICE memory: a working set of 17 + 4 slots per head (plus summaries) is smaller than 65 blocks. */
  assert_true(conc[4] > conc[0]);
  assert_true(conc[3] > conc[0]);
  assert_true(conc[2] > conc[0]);
  json_object_put(arr);
}

/* A synthetic trace (2 layers, 4 query / 2 KV heads, head_dim 16, 3 windows of 200 positions) replayed at the
 * tiny shape: the prompt is tiled from the windows. */
static void test_serve_trace_replay(void **state) {
  (void)state;
  char tr[300], json[300], args[1024];
  snprintf(tr, sizeof tr, "%s/synth.trace", g_dir);
  snprintf(json, sizeof json, "%s/trace.json", g_dir);
  okv_kv_trace_shape_t sh = {2, 4, 2, 16, true};
  okv_kv_trace_writer_t w;
  OKV_ASSERT_OK(okv_kv_trace_open(tr, &sh, &w));
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, 42);
  float k[32], q[64], qd[64];
  for (uint32_t win = 0; win < 3; win++)
    for (uint32_t p = 0; p < 200; p++)
      for (uint32_t l = 0; l < 2; l++) {
        for (int i = 0; i < 32; i++) k[i] = okv_test_rng_normal(&rng);
        for (int i = 0; i < 64; i++) {
          q[i] = 2.0f * okv_test_rng_normal(&rng);
          qd[i] = q[i] + 0.1f * okv_test_rng_normal(&rng);
        }
        OKV_ASSERT_OK(okv_kv_trace_write(&w, win, p, l, k, q, qd));
      }
  OKV_ASSERT_OK(okv_kv_trace_close(&w));
  snprintf(args, sizeof args,
           "bench serve --shape tiny --context 512 --decode 2 --warmup 1 --device-gib 0.006 --budget 8 "
           "--link-gbps 0.5 --modes oasis,proxy --recall-steps 1 --recall-seqs 1 --trace '%s' --json '%s'",
           tr, json);
  json_object *arr = run_json(args, json, 2);
  for (size_t i = 0; i < 2; i++) {
    json_object *o = json_object_array_get_idx(arr, i);
    assert_string_equal(str(o, "source"), "trace");
    double recall = num(o, "recall");
    assert_true(recall >= 0 && recall <= 1);
    assert_true(num(o, "recall_samples") >= 1);
    assert_true(num(o, "tokens_per_second") > 0);
  }
  json_object_put(arr);
  /* A trace whose windows are shorter than the replayed steps is refused with one line. */
  snprintf(args, sizeof args, "bench serve --shape tiny --context 512 --decode 300 --trace '%s'", tr);
  assert_int_equal(run_cli(args, NULL), 1);
  assert_int_equal(stderr_lines(), 1);
  unlink(tr);
  unlink(json);
}

/* oasiskv eval --trace on stories260K with the oracle drafter: shape, every position, and in layer 0 (a
 * function of the token and its position only) the draft query made at p equals the real query of p + 1. */
static void test_eval_trace(void **state) {
  (void)state;
  char model[512], tok[512], text[512], tr[300], args[2048];
  snprintf(model, sizeof model, "%s/models/stories260K.bin", g_shared);
  snprintf(tok, sizeof tok, "%s/models/tok512.bin", g_shared);
  snprintf(text, sizeof text, "%s/data/tinystories_val.txt", g_shared);
  if (access(model, R_OK) || access(tok, R_OK) || access(text, R_OK)) skip();
  snprintf(tr, sizeof tr, "%s/eval.trace", g_dir);
  snprintf(args, sizeof args,
           "eval --model '%s' --tokenizer '%s' --text '%s' --bytes 400 --windows 2 --mode oasis --drafter oracle "
           "--budget 2 --trace '%s'",
           model, tok, text, tr);
  int rc = run_cli(args, NULL);
  if (rc != 0) show_stderr();
  assert_int_equal(rc, 0);
  okv_kv_trace_t t;
  OKV_ASSERT_OK(okv_kv_trace_load(tr, &t));
  assert_int_equal(t.shape.n_layers, 5);
  assert_int_equal(t.shape.n_q_heads, 8);
  assert_int_equal(t.shape.n_kv_heads, 4);
  assert_int_equal(t.shape.head_dim, 8);
  assert_true(t.shape.has_draft);
  assert_int_equal(t.n_windows, 2);
  for (uint32_t w = 0; w < 2; w++) {
    assert_true(t.n_positions[w] > 50);
    for (uint32_t p = 0; p + 1 < t.n_positions[w]; p++) {
      const float *qd = okv_kv_trace_qd(&t, w, p, 0), *qn = okv_kv_trace_q(&t, w, p + 1, 0);
      for (uint32_t i = 0; i < 64; i++) assert_true(fabsf(qd[i] - qn[i]) <= 1e-5f * (1.0f + fabsf(qn[i])));
    }
    /* Deeper layers see the context: the draft differs from the next real query somewhere. */
    double diff = 0;
    for (uint32_t p = 0; p + 1 < t.n_positions[w]; p++) {
      const float *qd = okv_kv_trace_qd(&t, w, p, 4), *qn = okv_kv_trace_q(&t, w, p + 1, 4);
      for (uint32_t i = 0; i < 64; i++) diff += fabs((double)qd[i] - qn[i]);
    }
    assert_true(diff > 0);
  }
  okv_kv_trace_free(&t);
  /* The trace cut to 63 bytes (inside its 64-byte header): bench serve --trace says the header is truncated
   * (one line, exit 1), not that the magic is wrong. */
  char cut[320], line[1024] = "";
  snprintf(cut, sizeof cut, "%s/cut.trace", g_dir);
  snprintf(args, sizeof args, "head -c 63 '%s' >'%s'", tr, cut);
  assert_int_equal(system(args), 0);
  snprintf(args, sizeof args, "bench serve --shape tiny --context 64 --trace '%s'", cut);
  rc = run_cli(args, NULL);
  assert_true(rc > 0 && rc < 126);
  assert_int_equal(stderr_lines(), 1);
  first_stderr_line(line, sizeof line);
  print_message("%s", line);
  if (!strstr(line, "cut.trace': truncated header (63 of 64 bytes)") || strstr(line, "magic")) {
    print_error("unexpected message: %s", line);
    fail();
  }
  unlink(cut);
  /* --trace needs the oasis run. */
  snprintf(args, sizeof args, "eval --model '%s' --tokenizer '%s' --text '%s' --mode proxy --trace '%s'", model, tok,
           text, tr);
  assert_int_equal(run_cli(args, NULL), 2);
  assert_int_equal(stderr_lines(), 1);
  unlink(tr);
}

static void test_serve_bad_options(void **state) {
  (void)state;
  static const char *const bad[] = {
      "bench serve --shape nope",
      "bench serve --layers 40",
      "bench serve --contexts 1024,x",
      "bench serve --modes dense,fast",
      "bench serve --device-gib 0",
      "bench serve --link-gbps -1",
      "bench serve --fetch-ratio 1.5",
      "bench serve --no-such-option",
      "bench serve --fetch-ratio auto:2",
      "bench serve --draft-rho 2",
      "bench serve --repeat 0",
      "bench serve --repeat 32",
      "bench serve --interleave 0",
      "bench serve --fetch-ratio 0.25,0.25",
      "bench serve --fetch-ratio auto,auto:0.05",
      "bench serve --interleave",
      "bench serve --trace /nonexistent/none.trace --shape tiny --context 64",
      "bench serve --fetch-ratio 0.05,,0.1", /* empty list entries */
      "bench serve --fetch-ratio 0.05,",
      "bench serve --fetch-ratio ,0.05",
      "bench serve --modes dense,,oasis",
      "bench serve --contexts 1024,",
      "bench remote --batches 1,,2",
      /* links that would make one step last for hours, and outputs or contexts that cannot be honoured */
      "bench serve --link-latency-us 1e12",
      "bench serve --link-gbps 1e-9",
      "bench serve --link-ratio 1e9",
      "bench serve --decode 2 --halve-link-at 3",
      "bench serve --json - --csv -",
      "bench serve --contexts 2048,1024",
      "bench serve --contexts 1024,1024",
      "bench serve --shape tiny --context 64 --link-gbps 0 --halve-link-at 1",
  };
  expect_one_line_errors(bad, sizeof bad / sizeof bad[0], 0);
  /* --fetch-ratio auto:MAX: the runtime's self-tuning cap, within 1..ceil(MAX * K) blocks per KV head. */
  char json[300], args[1024];
  snprintf(json, sizeof json, "%s/auto.json", g_dir);
  snprintf(args, sizeof args, SMOKE_ARGS "--modes oasis --fetch-ratio 0.1,auto:0.25 --json '%s'", json);
  json_object *arr = run_json(args, json, 2);
  json_object *fixed = json_object_array_get_idx(arr, 0), *autor = json_object_array_get_idx(arr, 1);
  assert_true(num(fixed, "fetch_ratio") == 0.1);
  assert_string_equal(str(autor, "fetch_ratio"), "auto");
  assert_true(num(autor, "fetch_ratio_max") == 0.25);
  double c = num(autor, "cap_blocks_mean"), seqs = num(autor, "concurrent_sequences");
  assert_true(c >= 1.0 && c <= 4.0);
  assert_true(num(autor, "fetch_bytes_per_step") <= 4.0 * 2 * 2 * 4096 * seqs);
  assert_true(fabs(num(autor, "cap_bytes_per_step") - 4.0 * 2 * 2 * 4096 * seqs) < 0.5);
  json_object_put(arr);
  unlink(json);
}

/* --repeat 3: one JSON object per (mode, ratio), the median run of three interleaved runs: its tokens/s is the
 * middle of its three recorded runs, and the table prints the runs. */
static void test_serve_repeat(void **state) {
  (void)state;
  char json[300], out[300], args[1024];
  snprintf(json, sizeof json, "%s/repeat.json", g_dir);
  snprintf(out, sizeof out, "%s/repeat.txt", g_dir);
  snprintf(args, sizeof args, SMOKE_ARGS "--modes dense,oasis --fetch-ratio 0.25,auto:0.25 --repeat 3 --json '%s'",
           json);
  int rc = run_cli(args, out);
  if (rc != 0) show_stderr();
  assert_int_equal(rc, 0);
  json_object *arr = json_object_from_file(json);
  assert_non_null(arr);
  assert_int_equal(json_object_array_length(arr), 3); /* dense, oasis 0.25, oasis auto */
  double pr[3];                                       /* auto / 0.25 per round */
  for (size_t k = 0; k < 3; k++) {
    json_object *ra = NULL, *rf = NULL;
    assert_true(json_object_object_get_ex(json_object_array_get_idx(arr, 2), "tokens_per_second_runs", &ra));
    assert_true(json_object_object_get_ex(json_object_array_get_idx(arr, 1), "tokens_per_second_runs", &rf));
    pr[k] = json_object_get_double(json_object_array_get_idx(ra, k)) /
            json_object_get_double(json_object_array_get_idx(rf, k));
  }
  double paired = fmax(fmin(pr[0], pr[1]), fmin(fmax(pr[0], pr[1]), pr[2])); /* median of three */
  double w_lo = INFINITY, w_hi = 0;                                          /* the weights read over all runs */
  for (size_t i = 0; i < 3; i++) {
    json_object *o = json_object_array_get_idx(arr, i), *runs = NULL;
    assert_true(json_object_object_get_ex(o, "tokens_per_second_runs", &runs));
    assert_int_equal(json_object_array_length(runs), 3);
    double t[3];
    for (size_t k = 0; k < 3; k++) t[k] = json_object_get_double(json_object_array_get_idx(runs, k));
    for (size_t k = 0; k < 3; k++) assert_true(t[k] > 0);
    for (size_t a = 0; a < 2; a++) /* sort the three */
      for (size_t b = 0; b + 1 < 3 - a; b++)
        if (t[b] > t[b + 1]) {
          double x = t[b];
          t[b] = t[b + 1];
          t[b + 1] = x;
        }
    double med = t[1];
    assert_true(num(o, "tokens_per_second") == med);
    /* every run's record, in run order: its tokens/s and one step time per measured step */
    json_object *ra = NULL;
    assert_true(json_object_object_get_ex(o, "runs", &ra));
    assert_int_equal(json_object_array_length(ra), 3);
    for (size_t k = 0; k < 3; k++) {
      json_object *rk = json_object_array_get_idx(ra, k), *steps = NULL;
      assert_true(num(rk, "tokens_per_second") == json_object_get_double(json_object_array_get_idx(runs, k)));
      /* the order rotates: round k starts at configuration k, so configuration i runs in place (i - k) mod 3
       * and, over the three rounds, once in every place */
      assert_true(num(rk, "round_position") == (double)((i + 3 - k) % 3));
      double w = num(rk, "weights_seconds_per_step");
      assert_true(w > 0);
      w_lo = fmin(w_lo, w);
      w_hi = fmax(w_hi, w);
      assert_true(json_object_object_get_ex(rk, "step_seconds_each", &steps));
      assert_int_equal(json_object_array_length(steps), 3); /* --decode 3 */
      json_object *caps = NULL;
      assert_int_equal(json_object_object_get_ex(rk, "cap_blocks_each", &caps), i == 2); /* auto only */
    }
  }
  assert_string_equal(str(json_object_array_get_idx(arr, 0), "mode"), "dense");
  assert_string_equal(str(json_object_array_get_idx(arr, 2), "fetch_ratio"), "auto");
  json_object_put(arr);
  FILE *f = fopen(out, "r");
  assert_non_null(f);
  char line[1024];
  int n_runs = 0, n_auto = 0, n_paired = 0, n_noise = 0;
  while (fgets(line, sizeof line, f)) {
    n_runs += strstr(line, "  runs: ") != NULL;
    n_auto += strstr(line, "medians of 3 runs") != NULL;
    const char *nz = strstr(line, "machine noise: the weights read (the same bytes in every run) took ");
    if (nz) { /* its range is that of the 9 runs' weights read, printed to 0.1 ms */
      double lo = 0, hi = 0;
      unsigned nr = 0;
      assert_int_equal(sscanf(nz + strlen("machine noise: the weights read (the same bytes in every run) took "),
                              "%lf-%lf ms per step over the %u runs", &lo, &hi, &nr),
                       3);
      assert_int_equal(nr, 9);
      assert_true(fabs(lo - 1e3 * w_lo) <= 0.051 && fabs(hi - 1e3 * w_hi) <= 0.051);
      n_noise++;
    }
    const char *p = strstr(line, "paired by round (auto:0.25 / 0.25 within each of the 3 rounds, median): ");
    if (p) { /* printed to 0.1% */
      double got = strtod(p + strlen("paired by round (auto:0.25 / 0.25 within each of the 3 rounds, median): "), NULL);
      assert_true(fabs(got - 100.0 * paired) <= 0.051);
      n_paired++;
    }
  }
  fclose(f);
  assert_int_equal(n_runs, 3);
  assert_int_equal(n_auto, 1);
  assert_int_equal(n_paired, 1);
  assert_int_equal(n_noise, 1);
  unlink(json);
  unlink(out);
}

/* --interleave 2: the runtime configurations of the run alive at once, two steps each in turn. Only time may
 * change: every figure that does not depend on timing (concurrency, steps, fetched bytes of a fixed ratio,
 * recall) equals a plain run's; the rows say they were interleaved (offload runs on its own), and the wait for
 * the pipeline after each turn is reported and is part of the step time. */
static void test_serve_interleave(void **state) {
  (void)state;
  char json[2][300], out[300], args[1024];
  snprintf(out, sizeof out, "%s/interleave.txt", g_dir);
  for (int il = 0; il < 2; il++) {
    snprintf(json[il], sizeof json[il], "%s/interleave%d.json", g_dir, il);
    snprintf(args, sizeof args, SMOKE_ARGS "--modes dense,offload,oasis --fetch-ratio 0.25,auto:0.25 %s --json '%s'",
             il ? "--interleave 2" : "", json[il]);
    int rc = run_cli(args, out);
    if (rc != 0) show_stderr();
    assert_int_equal(rc, 0);
  }
  json_object *plain = json_object_from_file(json[0]), *inter = json_object_from_file(json[1]);
  assert_non_null(plain);
  assert_non_null(inter);
  assert_int_equal(json_object_array_length(plain), 4); /* dense, offload, oasis 0.25, oasis auto */
  assert_int_equal(json_object_array_length(inter), 4);
  for (size_t i = 0; i < 4; i++) {
    json_object *p = json_object_array_get_idx(plain, i), *q = json_object_array_get_idx(inter, i);
    const char *mode = str(q, "mode");
    assert_string_equal(mode, str(p, "mode"));
    bool offload = !strcmp(mode, "offload"), autor = i == 3;
    assert_false(flag(p, "interleaved"));
    assert_int_equal(flag(q, "interleaved"), !offload);
    assert_true(num(p, "steps") == 3 && num(q, "steps") == 3);
    assert_true(null_or_absent(p, "sync_seconds_per_step"));
    if (!offload) {
      double sync = num(q, "sync_seconds_per_step");
      assert_true(sync >= 0 && sync < num(q, "step_seconds"));
    }
    assert_true(num(q, "concurrent_sequences") == num(p, "concurrent_sequences"));
    if (!autor) { /* a fixed ratio selects and fetches the same blocks whatever the timing */
      assert_true(num(q, "fetch_bytes_per_step") == num(p, "fetch_bytes_per_step"));
      assert_true(num(q, "recall") == num(p, "recall"));
    }
  }
  json_object_put(plain);
  json_object_put(inter);
  FILE *f = fopen(out, "r");
  assert_non_null(f);
  char line[1024];
  int n_header = 0;
  while (fgets(line, sizeof line, f))
    n_header += strstr(line,
                       "interleaved: every runtime configuration of a round "
                       "alive at once, 2 decode steps of each in turn") != NULL;
  fclose(f);
  assert_int_equal(n_header, 1);
  unlink(json[0]);
  unlink(json[1]);
  /* Without --warmup, interleaved dense warms up as long as oasis (K = 16, C = 4: 16 / 4 + 2 = 6 steps) so
   * that their measured steps fall in the same turns; on its own dense warms up 2 steps. */
  for (int il = 0; il < 2; il++) {
    snprintf(args, sizeof args,
             "bench serve --shape tiny --layers 1 --context 512 --decode 1 --device-gib 0.006 --budget 16 "
             "--fetch-ratio 0.25 --link-gbps 0.5 --modes dense,oasis --recall-steps 0 %s --json '%s'",
             il ? "--interleave 1" : "", json[0]);
    int rc = run_cli(args, out);
    if (rc != 0) show_stderr();
    assert_int_equal(rc, 0);
    json_object *arr = json_object_from_file(json[0]);
    assert_non_null(arr);
    assert_true(num(json_object_array_get_idx(arr, 0), "warmup_steps") == (il ? 6 : 2));
    assert_true(num(json_object_array_get_idx(arr, 1), "warmup_steps") == 6);
    json_object_put(arr);
  }
  unlink(json[0]);
  unlink(out);
}

/* Runs `args` (a dense bench serve run) with --json into dir/fit.json and returns its concurrent_sequences after
 * checking that it ran every measured step (-1 when it failed). */
static int dense_run(const char *args, uint32_t steps) {
  char json[300], cmd[1024];
  snprintf(json, sizeof json, "%s/fit.json", g_dir);
  snprintf(cmd, sizeof cmd, "%s --json '%s'", args, json);
  int rc = run_cli(cmd, NULL);
  if (rc != 0) {
    print_error("'%s': exit %d\n", args, rc);
    show_stderr();
    return -1;
  }
  json_object *arr = json_object_from_file(json);
  assert_non_null(arr);
  json_object *o = json_object_array_get_idx(arr, 0);
  assert_string_equal(str(o, "mode"), "dense");
  assert_true(num(o, "steps") == steps);
  int seqs = (int)num(o, "concurrent_sequences");
  json_object_put(arr);
  unlink(json);
  return seqs;
}

/* dense admits only the sequences whose KV fits in DEVICE at the end of the run: every step appends a token,
 * and a step that starts a block needs a slot per (layer, KV head) of every sequence. 2048-token prompts fill
 * 128 blocks exactly, so the first decode step starts block 129 (at 0.0068 GiB a search at the prompt's length
 * admitted a sequence too many and the step failed). Its concurrency does not depend on the fetch ratios
 * (their warm-ups are proxy's and oasis's). */
static void test_serve_dense_fit(void **state) {
  (void)state;
#define DENSE_ARGS "bench serve --shape tiny --layers 1 --decode 2 --modes dense --recall-steps 0 "
  assert_true(dense_run(DENSE_ARGS "--context 2048 --warmup 1 --device-gib 0.0068", 2) >= 1);
  assert_true(dense_run(DENSE_ARGS "--context 2048 --device-gib 0.05", 2) >= 1);
  int a = dense_run(DENSE_ARGS "--context 2000 --device-gib 0.02 --fetch-ratio 0.25", 2);
  int b = dense_run(DENSE_ARGS "--context 2000 --device-gib 0.02 --fetch-ratio 0.01,0.02", 2);
  assert_true(a >= 1);
  assert_int_equal(a, b);
  /* A run that fails (not one sequence fits) exits 1 and leaves none of its output files. */
  char json[300], csv[300], args[1024];
  snprintf(json, sizeof json, "%s/failed.json", g_dir);
  snprintf(csv, sizeof csv, "%s/failed.csv", g_dir);
  snprintf(args, sizeof args, DENSE_ARGS "--context 2048 --device-gib 0.0001 --json '%s' --csv '%s'", json, csv);
  assert_int_equal(run_cli(args, NULL), 1);
  assert_int_equal(access(json, F_OK), -1);
  assert_int_equal(access(csv, F_OK), -1);
  { /* and says so on its last stderr line */
    char path[300], line[512], last[512] = "";
    snprintf(path, sizeof path, "%s/err", g_dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    while (fgets(line, sizeof line, f)) snprintf(last, sizeof last, "%s", line);
    fclose(f);
    assert_non_null(strstr(last,
                           "a configuration could not run (its row says why): no --json, --csv or --plot "
                           "written"));
  }
#undef DENSE_ARGS
}

/* `oasiskv bench runtime` refuses, before allocating, a run whose HOST tier (sequences x layers x context),
 * DEVICE tier or prefill exceeds --host-gib, a --layers out of 1..128, --groups above --budget and device
 * selection with the self-tuning cap: exit 2, one line naming the numbers. (--layers 1000 used to allocate
 * until the machine ran out of memory; --host-gib was ignored once --layers was given.) A run within the
 * bound still runs. */
static void test_runtime_capacity(void **state) {
  (void)state;
  static const char *const bad[] = {
      "bench runtime --seqs 1 --context 1024 --layers 20 --host-gib 0.01 --steps 1 --warmup 0",
      "bench runtime --seqs 2 --context 2048 --layers 1000 --steps 1",
      "bench runtime --seqs 1000 --context 16 --layers 10 --steps 1",
      "bench runtime --seqs 200 --context 131072 --steps 1",
      "bench runtime --layers 0",
      /* What the runtime's config would refuse, in the options' terms (they exited 1 naming config fields). */
      "bench runtime --groups 384",
      "bench runtime --fetch-ratio auto --selection device",
      "bench runtime --steps 0",
      "bench runtime --steps 99999999999",
      "bench runtime --summary-dtype f8",
      "bench runtime --selection gpu",
      "bench runtime --scoring flat --groups 8",    /* accepted before, and reported in the JSON though unused */
      "bench runtime --noise 1e308",                /* accepted before: queries of inf, attention about 80x slower */
      "bench runtime --host-gib 4096 --seqs 560",   /* 5 TiB: the OS killed it after minutes of loading */
      "bench runtime --noise 0x10",                 /* hexadecimal: accepted before as 16 */
      "bench runtime --scoring Q8",                 /* named okv_scoring_parse, a library call, before */
      "bench runtime --scoring flat --groups 1000", /* named the budget bound before the flat refusal */
      "bench runtime --budget 0",
      /* exit 1 with the HAL's NOT_FOUND line before; underflow, taken as 0 before */
      "bench runtime --backend nonsense",
      "bench runtime --noise 1e-400",
      /* a control character in a value is shown escaped: it split the one-line error before */
      "bench runtime --seqs \"$(printf '1\\n2')\"",
      "bench runtime --scoring \"$(printf 'q\\t8')\"",
      "bench runtime --fetch-ratio \"$(printf '0.1\\nx')\"",
  };
  expect_one_line_errors(bad, sizeof bad / sizeof bad[0], 2);
  /* A bad value's line states the range or the choices (it said "an integer >= 1" for 99999999999). */
  static const char *const said[][2] = {
      {"bench runtime --steps 99999999999", "an integer >= 1"},
      {"bench runtime --summary-dtype f8", "auto, f32, bf16 or f16"},
      {"bench runtime --selection gpu", "host or device"},
      {"bench runtime --scoring flat --groups 8", "q8, c4 and two-level"},
      {"bench runtime --host-gib 4096 --seqs 560", "more than this machine's"},
      {"bench runtime --noise 0x10", "bad value '0x10' for --noise"},
      {"bench runtime --scoring Q8", "expected c4, q8, flat or two-level"},
      {"bench runtime --scoring flat --groups 1000", "q8, c4 and two-level"},
      {"bench runtime --budget 0", "(an integer in [1, 512])"},
      {"bench runtime --layers 0", "(an integer in [1, 128])"},
      {"bench runtime --backend nonsense", "unknown device 'nonsense' (backends compiled in: cpu"},
      {"bench runtime --steps 99999999999", "--steps + --warmup at most 524279"},
      {"bench runtime --seqs \"$(printf '1\\n2')\"", "bad value '1\\n2' for --seqs"},
      {"bench runtime --scoring \"$(printf 'q\\t8')\"", "unknown --scoring 'q\\t8'"}};
  for (size_t i = 0; i < sizeof said / sizeof said[0]; i++) {
    char err[512] = "";
    assert_int_equal(run_cli(said[i][0], NULL), 2);
    first_stderr_line(err, sizeof err);
    assert_non_null(strstr(err, said[i][1]));
  }
  /* A result that cannot be written is not a success: exit 1, one line. */
  assert_int_equal(run_cli("bench runtime --seqs 1 --context 4096 --layers 1 --steps 1 --warmup 1", "/dev/full"), 1);
  assert_int_equal(stderr_lines(), 1);
  char line[512] = "";
  assert_int_equal(run_cli(bad[0], NULL), 2);
  first_stderr_line(line, sizeof line);
  assert_non_null(strstr(line, "1 seqs x 20 layers x 1024 tokens need 0.16 GiB of HOST tier"));
  assert_non_null(strstr(line, "--host-gib 0.01"));
  int rc = run_cli("bench runtime --seqs 1 --context 1024 --layers 2 --host-gib 0.1 --steps 1 --warmup 0", NULL);
  if (rc != 0) show_stderr();
  assert_int_equal(rc, 0);
  /* A context that fits in the working set runs, and says that no selection runs (it said nothing). */
  first_stderr_line(line, sizeof line);
  assert_non_null(strstr(line, "no selection runs"));
  /* Two-level scoring that keeps fewer blocks than K says so (it kept 32 of K = 128 without a word). */
  rc = run_cli("bench runtime --scoring two-level --groups 2 --seqs 1 --context 8192 --layers 1 --steps 1 --warmup 1",
               NULL);
  if (rc != 0) show_stderr();
  assert_int_equal(rc, 0);
  first_stderr_line(line, sizeof line);
  assert_non_null(strstr(line, "32 blocks, fewer than K = 128"));
  /* --warmup 0 says that its first measured step moves nothing (bytes/step 0 without a word before); a context
   * of K + 1 blocks is said to fit (the note stopped at K blocks, and such a run had no misses either). */
  rc = run_cli("bench runtime --seqs 1 --context 4096 --layers 1 --steps 1 --warmup 0", NULL);
  if (rc != 0) show_stderr();
  assert_int_equal(rc, 0);
  first_stderr_line(line, sizeof line);
  assert_non_null(strstr(line, "with --warmup 0 the first measured step moves no block"));
  rc = run_cli("bench runtime --seqs 1 --budget 8 --context 140 --layers 1 --steps 2 --warmup 1", NULL);
  if (rc != 0) show_stderr();
  assert_int_equal(rc, 0);
  first_stderr_line(line, sizeof line);
  /* at K + 1 blocks selection does run (it said "no selection runs" there too) */
  assert_non_null(strstr(line, "no block is ever missed (prediction and selection run, fetch nothing)"));
  assert_null(strstr(line, "no selection runs"));
  /* With every block resident there is no top-K to recall: recall is null, not 0 (the worst value). */
  char jpath[300];
  snprintf(jpath, sizeof jpath, "%s/recall.json", g_dir);
  rc = run_cli("bench runtime --seqs 1 --context 100 --layers 1 --steps 2 --recall --json", jpath);
  if (rc != 0) show_stderr();
  assert_int_equal(rc, 0);
  json_object *rj = json_object_from_file(jpath), *rv = NULL;
  assert_non_null(rj);
  assert_true(json_object_object_get_ex(rj, "recall", &rv));
  assert_null(rv);
  json_object_put(rj);
  /* A context clamped to the runtime's limit and then refused: one line, naming the clamp (it printed two). */
  assert_int_equal(run_cli("bench runtime --context 2000000 --steps 1", NULL), 2);
  assert_int_equal(stderr_lines(), 1);
  first_stderr_line(line, sizeof line);
  assert_non_null(strstr(line, "--context clamped"));
}

/* `bench runtime --fetch-ratio auto:0.5` says so: JSON fetch_ratio "auto", fetch_ratio_max 0.5, cap_max_blocks 64
 * (= ceil(0.5 x 128)) and cap_blocks the C the runtime used (its controller starts at 0.05's C = 7 and moves by
 * at most half per 3-step window: far below 64); the header "C = auto (at most 64, ...)". It used to report
 * cap_blocks 64 and "C = 64", as if the run had been a fixed 0.5. A fixed ratio states its number. */
static void test_runtime_fetch_ratio(void **state) {
  (void)state;
  char out[300], line[1024] = "";
  snprintf(out, sizeof out, "%s/runtime.json", g_dir);
#define RT_ARGS "bench runtime --seqs 2 --layers 2 --context 4096 --steps 4 "
  int rc = run_cli(RT_ARGS "--fetch-ratio auto:0.5 --json", out);
  if (rc != 0) show_stderr();
  assert_int_equal(rc, 0);
  json_object *o = json_object_from_file(out);
  assert_non_null(o);
  assert_string_equal(str(o, "fetch_ratio"), "auto");
  assert_true(num(o, "fetch_ratio_max") == 0.5);
  assert_true(num(o, "cap_max_blocks") == 64);
  double c = num(o, "cap_blocks");
  print_message("auto:0.5: cap_blocks %.2f of at most %.0f\n", c, num(o, "cap_max_blocks"));
  assert_true(c >= 1 && c < 64);
  assert_true(num(o, "bytes_per_step") <= num(o, "cap_bytes_per_step"));
  /* c4 by default: K / 4 = 32 candidates rescored beyond K (K + 32 = 160 < the 258 blocks of 4,118 tokens); the
   * JSON said the option's value, 0, before. */
  assert_string_equal(str(o, "scoring"), "c4");
  assert_true(num(o, "scoring_groups") == 32);
  assert_true(num(o, "noise") == 0.5); /* the default --noise, so that the JSON alone can repeat the run */
  /* Per layer, the table's bookkeeping and attention columns (the JSON had only their ratio): they sum to the
   * run's per-step totals, and each layer's ratio is theirs. */
  json_object *layers = NULL;
  assert_true(json_object_object_get_ex(o, "layers", &layers));
  assert_int_equal(json_object_array_length(layers), 2);
  double bk_sum = 0, att_sum = 0;
  for (size_t l = 0; l < 2; l++) {
    json_object *jl = json_object_array_get_idx(layers, l);
    double bk = num(jl, "bookkeeping_seconds_per_step"), att = num(jl, "attention_seconds_per_step");
    assert_true(bk > 0 && att > 0);
    assert_true(fabs(num(jl, "overhead_fraction") - bk / att) <= 1e-9 * (bk / att));
    bk_sum += bk;
    att_sum += att;
  }
  assert_true(fabs(bk_sum - num(o, "bookkeeping_seconds_per_step")) <= 1e-9 * bk_sum);
  assert_true(fabs(att_sum - num(o, "attention_seconds_per_step")) <= 1e-9 * att_sum);
  json_object_put(o);
  assert_int_equal(run_cli(RT_ARGS "--fetch-ratio auto:0.5", out), 0);
  FILE *f = fopen(out, "r");
  assert_non_null(f);
  assert_non_null(fgets(line, sizeof line, f));
  fclose(f);
  if (!strstr(line, ", C = auto (at most 64, ")) {
    print_error("header: %s", line);
    fail();
  }
  /* A fixed ratio: its number, cap_blocks = cap_max_blocks = ceil(0.05 x 128) = 7. */
  assert_int_equal(run_cli(RT_ARGS "--json", out), 0);
  o = json_object_from_file(out);
  assert_non_null(o);
  json_object *v = NULL;
  assert_true(json_object_object_get_ex(o, "fetch_ratio", &v) && json_object_is_type(v, json_type_double));
  assert_true(num(o, "fetch_ratio") == 0.05);
  assert_false(json_object_object_get_ex(o, "fetch_ratio_max", &v));
  assert_true(num(o, "cap_blocks") == 7 && num(o, "cap_max_blocks") == 7);
  json_object_put(o);
  assert_int_equal(run_cli(RT_ARGS, out), 0);
  f = fopen(out, "r");
  assert_non_null(f);
  assert_non_null(fgets(line, sizeof line, f));
  fclose(f);
  assert_non_null(strstr(line, ", C = 7, "));
  unlink(out);
#undef RT_ARGS
}

/* `bench serve --device cuda` (or hip) where that backend cannot open a device fails at once with the
 * backend's own reason (as eval and bench runtime do), exit 1, one line, no output file; it used to measure
 * a bandwidth of 0 and report that not one sequence fits. Skipped where the backend works. */
static void test_serve_unavailable_device(void **state) {
  (void)state;
  int tried = 0;
  for (size_t i = 0; i < okv_hal_backend_count(); i++) { /* the GPU backends compiled in */
    const char *name = okv_hal_backend_name(i);
    if (!strcmp(name, "cpu")) continue;
    okv_hal_device_t *dev = NULL;
    okv_status_t st = okv_hal_device_create(name, NULL, NULL, &dev);
    if (st == OKV_OK) {
      OKV_IGNORE_ERROR(okv_hal_device_release(dev));
      continue;
    }
    char why[512], json[300], args[1024], line[1024] = "";
    snprintf(why, sizeof why, "%s", okv_status_message(st));
    okv_status_free(st);
    snprintf(json, sizeof json, "%s/gpu.json", g_dir);
    snprintf(args, sizeof args, "bench serve --device %s --shape tiny --layers 1 --context 256 --json '%s'", name,
             json);
    assert_int_equal(run_cli(args, NULL), 1);
    assert_int_equal(stderr_lines(), 1);
    first_stderr_line(line, sizeof line);
    print_message("%s", line);
    assert_non_null(strstr(line, why));
    assert_int_equal(access(json, F_OK), -1);
    tried++;
  }
  if (!tried) skip();
}

/* Field `name` of CSV line `row` (header `head`) into out, "" when absent. No quoted commas before it. */
static void csv_field(const char *head, const char *row, const char *name, char *out, size_t n) {
  char h[1024], r[1024];
  snprintf(h, sizeof h, "%s", head);
  snprintf(r, sizeof r, "%s", row);
  h[strcspn(h, "\n")] = r[strcspn(r, "\n")] = '\0';
  int col = -1, k = 0;
  for (char *sv = NULL, *t = strtok_r(h, ",", &sv); t; t = strtok_r(NULL, ",", &sv), k++)
    if (!strcmp(t, name)) col = k;
  out[0] = '\0';
  k = 0;
  for (char *p = r, *c; col >= 0 && p; p = c ? c + 1 : NULL, k++) {
    c = strchr(p, ',');
    if (k == col) {
      snprintf(out, n, "%.*s", (int)(c ? (size_t)(c - p) : strlen(p)), p);
      return;
    }
  }
}

/* --csv: every row carries its fetch ratio ("auto" for auto) and auto's maximum, so the rows of a ratio sweep
 * can be told apart. */
static void test_serve_csv(void **state) {
  (void)state;
  char csv[300], args[1024];
  snprintf(csv, sizeof csv, "%s/serve.csv", g_dir);
  snprintf(args, sizeof args,
           "bench serve --shape tiny --layers 2 --context 1024 --decode 2 --warmup 1 --device-gib 0.006 "
           "--budget 16 --link-gbps 0.5 --modes dense,oasis --fetch-ratio 0.25,auto,auto:0.1 --recall-steps 0 "
           "--csv '%s'",
           csv);
  int rc = run_cli(args, NULL);
  if (rc != 0) show_stderr();
  assert_int_equal(rc, 0);
  FILE *f = fopen(csv, "r");
  assert_non_null(f);
  char head[1024], row[4][1024];
  assert_non_null(fgets(head, sizeof head, f));
  for (int i = 0; i < 4; i++) assert_non_null(fgets(row[i], sizeof row[i], f));
  assert_null(fgets(head + 512, 512, f)); /* dense and three oasis rows, nothing more */
  fclose(f);
  static const char *const want[4][3] = {
      {"dense", "-", "-"}, {"oasis", "0.25", "-"}, {"oasis", "auto", "0.05"}, {"oasis", "auto", "0.1"}};
  for (int i = 0; i < 4; i++) {
    char mode[32], ratio[32], max[32];
    csv_field(head, row[i], "mode", mode, sizeof mode);
    csv_field(head, row[i], "fetch_ratio", ratio, sizeof ratio);
    csv_field(head, row[i], "fetch_ratio_max", max, sizeof max);
    print_message("%s %s %s\n", mode, ratio, max);
    assert_string_equal(mode, want[i][0]);
    assert_string_equal(ratio, want[i][1]);
    assert_string_equal(max, want[i][2]);
    char recall[32];
    csv_field(head, row[i], "recall", recall, sizeof recall);
    assert_string_equal(recall, "-"); /* --recall-steps 0: no recall sampled, "-" (not nan), dense's too */
  }
  unlink(csv);
  /* The table: no nan, and its summary line states the target without any tracker reference. */
  char out[300], line[1024];
  snprintf(out, sizeof out, "%s/table.txt", g_dir);
  *strstr(args, " --csv") = '\0';
  assert_int_equal(run_cli(args, out), 0);
  f = fopen(out, "r");
  assert_non_null(f);
  int n_target = 0;
  while (fgets(line, sizeof line, f)) {
    assert_null(strstr(line, "nan"));
    assert_null(strstr(line, "issue "));
    n_target += strstr(line, "target >= 2.5x") != NULL;
  }
  fclose(f);
  assert_int_equal(n_target, 1);
  unlink(out);
}

/* `bench runtime` and `bench kernels`: --help on stdout (exit 0); a bad --fetch-ratio or --budget is one line
 * and exit 2 (it was two lines; --budget 0 reached the runtime's config check, exit 1). */
static void test_bench_help_and_values(void **state) {
  (void)state;
  char out[300];
  snprintf(out, sizeof out, "%s/help.txt", g_dir);
  static const char *const help[] = {"bench runtime --help", "bench kernels --help", "bench serve --help"};
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(run_cli(help[i], out), 0);
    assert_int_equal(stderr_lines(), 0);
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    char line[256];
    assert_non_null(fgets(line, sizeof line, f));
    assert_non_null(strstr(line, "usage: oasiskv bench"));
    fclose(f);
  }
  unlink(out);
  static const char *const bad[] = {
      "bench runtime --fetch-ratio 0", "bench runtime --fetch-ratio 2", "bench runtime --budget 0",
      "bench runtime --budget 513",    "bench runtime --scoring nope",  "bench runtime --frobnicate",
      "bench kernels --frobnicate",
  };
  expect_one_line_errors(bad, sizeof bad / sizeof bad[0], 2);
}

/* oasiskv info shows the emulated link it was asked for. */
static void test_info_link(void **state) {
  (void)state;
  char out[300];
  snprintf(out, sizeof out, "%s/info.json", g_dir);
  assert_int_equal(run_cli("info --json --link-gbps 1.5 --link-latency-us 20", out), 0);
  json_object *root = json_object_from_file(out), *backends = NULL;
  assert_non_null(root);
  assert_true(json_object_object_get_ex(root, "backends", &backends));
  json_object *cpu = json_object_array_get_idx(backends, 0), *devs = NULL, *link = NULL;
  assert_string_equal(str(cpu, "name"), "cpu");
  assert_true(json_object_object_get_ex(cpu, "devices", &devs));
  assert_true(json_object_object_get_ex(json_object_array_get_idx(devs, 0), "link", &link));
  assert_true(num(link, "bytes_per_second") == 1.5e9);
  assert_true(fabs(num(link, "latency_seconds") - 20e-6) < 1e-12);
  json_object_put(root);
  assert_int_equal(run_cli("info --json", out), 0); /* no link asked: none shown */
  root = json_object_from_file(out);
  json_object_object_get_ex(root, "backends", &backends);
  json_object_object_get_ex(json_object_array_get_idx(backends, 0), "devices", &devs);
  assert_false(json_object_object_get_ex(json_object_array_get_idx(devs, 0), "link", &link));
  json_object_put(root);
  assert_int_equal(run_cli("info --link-gbps nan", NULL), 2);
  unlink(out);
}

/* A single auto ratio with dense beside it: the auto fields belong to oasis only; --halve-link-at is reported and
 * the link budget is the mean link over the measured steps (0.5, then 0.25 GB/s from step 2 of 3). */
static void test_serve_auto_fields_and_halving(void **state) {
  (void)state;
  char json[300], args[1024];
  snprintf(json, sizeof json, "%s/halve.json", g_dir);
  snprintf(args, sizeof args,
           SMOKE_ARGS "--modes dense,oasis --fetch-ratio auto --halve-link-at 2 --time-budget 600 --json '%s'", json);
  json_object *arr = run_json(args, json, 2);
  json_object *dense = json_object_array_get_idx(arr, 0), *oasis = json_object_array_get_idx(arr, 1);
  assert_string_equal(str(dense, "mode"), "dense");
  assert_true(null_or_absent(dense, "fetch_ratio"));
  assert_true(null_or_absent(dense, "fetch_ratio_max"));
  assert_true(null_or_absent(dense, "cap_blocks_each"));
  assert_true(null_or_absent(dense, "cap_bytes_per_step"));
  assert_string_equal(str(oasis, "fetch_ratio"), "auto");
  assert_true(num(oasis, "fetch_ratio_max") == 0.05);
  json_object *ms = NULL; /* auto: the latest probe's marginal share, null before one measured it */
  assert_true(json_object_object_get_ex(oasis, "marginal_share", &ms));
  assert_true(ms == NULL || isfinite(json_object_get_double(ms)));
  assert_true(null_or_absent(dense, "marginal_share"));
  for (int i = 0; i < 2; i++) {
    json_object *o = json_object_array_get_idx(arr, i);
    assert_true(num(o, "steps") == 3);
    assert_true(num(o, "link_halved_at_step") == 2);
    assert_true(num(o, "link_bytes_per_second") == 0.5e9);
    double mean_link = (0.5e9 + 0.25e9 + 0.25e9) / 3;
    assert_true(fabs(num(o, "link_budget_bytes_per_step") - mean_link * num(o, "step_seconds")) <=
                1e-6 * num(o, "link_budget_bytes_per_step"));
  }
  json_object_put(arr);
  unlink(json);
}

/* --fetch-share: oasis at a fixed ratio reports the mean attention share of its fetched blocks (a share is
 * a probability times the head's working-set blocks: within 0..K + 1 + C); without the option a fixed
 * ratio measures none (null), and dense never has one. */
static void test_serve_fetch_share(void **state) {
  (void)state;
  char json[300], args[1024];
  snprintf(json, sizeof json, "%s/share.json", g_dir);
  for (int with = 0; with < 2; with++) {
    snprintf(args, sizeof args, SMOKE_ARGS "--modes dense,oasis %s--json '%s'", with ? "--fetch-share " : "", json);
    json_object *arr = run_json(args, json, 2);
    json_object *dense = json_object_array_get_idx(arr, 0), *oasis = json_object_array_get_idx(arr, 1);
    assert_true(null_or_absent(dense, "fetched_share"));
    if (with) {
      double sh = num(oasis, "fetched_share");
      assert_true(sh > 0 && sh <= 16 + 1 + 4);
    } else {
      assert_true(null_or_absent(oasis, "fetched_share"));
    }
    json_object_put(arr);
  }
  unlink(json);
}

/* True when g_dir holds a file whose name contains `part`. */
static bool dir_has(const char *part) {
  DIR *d = opendir(g_dir);
  bool found = false;
  for (struct dirent *e; d && (e = readdir(d)) != NULL;) found |= strstr(e->d_name, part) != NULL;
  if (d) closedir(d);
  return found;
}

/* Interrupted (SIGINT) and killed (SIGTERM) runs leave no temporary output files beside --json/--csv, and die
 * by the signal (the handler removes the files, then re-raises it). */
static void test_serve_interrupt_leaves_no_temp(void **state) {
  (void)state;
  static const int sigs[] = {SIGINT, SIGTERM};
  for (int k = 0; k < 2; k++) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "exec '%s' " SMOKE_ARGS
             "--decode 40 --time-budget 600 --json '%s/sig.json' --csv '%s/sig.csv' "
             ">/dev/null 2>&1",
             g_cli, g_dir, g_dir);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      signal(SIGINT, SIG_DFL); /* as from a terminal: not ignored as in a background job */
      signal(SIGTERM, SIG_DFL);
      execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
      _exit(127);
    }
    /* Wait (at most 20 s) until the run has created its temporary outputs, then signal it. */
    bool seen = false;
    for (int i = 0; i < 400 && !(seen = dir_has("sig.json.tmp.")); i++) usleep(50000);
    kill(pid, sigs[k]);
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    print_message("signal %d: %s %d\n", sigs[k], WIFSIGNALED(ws) ? "killed by" : "exit",
                  WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws));
    assert_true(seen);
    assert_true(WIFSIGNALED(ws) && WTERMSIG(ws) == sigs[k]);
    assert_false(dir_has(".tmp."));
    assert_false(dir_has("sig.json")); /* nor a partial output */
    assert_false(dir_has("sig.csv"));
  }
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: test_bench_serve <oasiskv> <shared dir>\n");
    return 2;
  }
  g_cli = argv[1];
  g_shared = argv[2];
  snprintf(g_dir, sizeof g_dir, "/tmp/okv-bench-serve-XXXXXX");
  if (!mkdtemp(g_dir)) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_serve_all_modes),
      cmocka_unit_test(test_serve_trace_replay),
      cmocka_unit_test(test_eval_trace),
      cmocka_unit_test(test_serve_bad_options),
      cmocka_unit_test(test_info_link),
      cmocka_unit_test(test_serve_repeat),
      cmocka_unit_test(test_serve_interleave),
      cmocka_unit_test(test_serve_dense_fit),
      cmocka_unit_test(test_runtime_capacity),
      cmocka_unit_test(test_runtime_fetch_ratio), /* --fetch-ratio auto: JSON and header */
      cmocka_unit_test(test_serve_unavailable_device),
      cmocka_unit_test(test_serve_csv),
      cmocka_unit_test(test_bench_help_and_values),
      cmocka_unit_test(test_serve_auto_fields_and_halving),
      cmocka_unit_test(test_serve_fetch_share),
      cmocka_unit_test(test_serve_interrupt_leaves_no_temp),
  };
  int rc = cmocka_run_group_tests_name("bench_serve", tests, NULL, NULL);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) rc = rc ? rc : 1;
  return rc;
}
