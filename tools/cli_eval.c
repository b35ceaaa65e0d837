/* oasiskv eval: teacher-forced evaluation of a llama2.c model decoding with
 * its KV cache offloaded through the runtime, against a dense run on the same
 * windows; --sweep runs every budget K in {1, 2, 4, 8, 16} and plots it. */
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cli_model.h"
#include "model/tokenizer_gguf.h"
#include "cli_remote.h"
#include "model/remote_prefill.h"
#include "kv_trace.h"

#define CMD "oasiskv eval"

static void usage(FILE *f) {
  fprintf(f,
          "usage: oasiskv eval [options]\n"
          "  --model M          llama2.c checkpoint or GGUF file (llama architecture; default: $OKV_MODEL,\n"
          "                     ../shared/models/stories260K.bin)\n"
          "  --tokenizer T      its tokenizer (default: a GGUF model's own, else $OKV_TOKENIZER,\n"
          "                     ../shared/models/tok512.bin)\n"
          "  --context N        positions the model covers (default: its seq_len / GGUF context_length)\n"
          "  --text F           UTF-8 text (default: $OKV_TEXT, ../shared/data/tinystories_val.txt)\n"
          "  --offset BYTES     where the first window starts (default 0); inside a multi-byte UTF-8\n"
          "                     character, moved forward to the next character boundary\n"
          "  --bytes N          bytes per window (default 2000), the end moved back to a character\n"
          "                     boundary; tokens are cut to the model's seq_len\n"
          "  --windows W        windows, one after the other, run as one batch (default 1)\n"
          "  --mode M           dense|oasis|proxy|ondemand|all (default all; dense always runs as the reference)\n"
          "  --drafter D        oracle|self|ngram, the look-ahead token of mode oasis (default self)\n"
          "  --budget K         working-set blocks per KV head (default 8)\n"
          "  --fetch-ratio R    cap C = ceil(R*K) new blocks per KV head per step, R in (0,1] (default 0.05);\n"
          "                     auto[:MAX]: chosen per step from the measured link, at most MAX (default 0.05)\n"
          "  --scoring S        c4|q8|flat|two-level: how the prediction scores blocks (default: the runtime's, c4;\n"
          "                     docs/kernels.md \"Scoring at long context\")\n"
          "  --groups N         c4|q8: candidates rescored beyond K per KV head; two-level: groups kept\n"
          "                     (default: the runtime's, ceil(K / 4) but at least min(K, 8) for c4|q8, K + it\n"
          "                     at most 512; floor(K / 4), at least 1, for two-level; 1..--budget; with --sweep,\n"
          "                     at most each K)\n"
          "  --selection S      host|device: where oasis and proxy select and commit (default host; device:\n"
          "                     slot tables and kernels, docs/api.md \"Selection on the device\"; not with\n"
          "                     --fetch-ratio auto or --prefill-tokens)\n"
          "  --sweep            K in {1,2,4,8,16} x modes; writes results/sweep.{json,csv,png} unless overridden\n"
          "  --json FILE        JSON array of results ('-' = stdout instead of the table)\n"
          "  --csv FILE         CSV of results ('-' = stdout instead of the table)\n"
          "  --plot FILE.png    NLL increase vs budget, one line per mode (needs gnuplot)\n"
          "  --device D         cpu|cuda|hip (default cpu)\n"
          "  --trace FILE       record the oasis run's per-layer real and draft queries and keys (format:\n"
          "                     tools/kv_trace.h; replay: oasiskv bench serve --trace FILE)\n"
          "  --prefill-tokens P prefill tokens [0, P) of each window densely, admit them into every run as a\n"
          "                     remote sequence (summaries + top-K initial working set, the rest read through\n"
          "                     an in-memory KV source), decode and score positions P.. (default 0: none)\n"
          "  --remote ADDR:PORT with --prefill-tokens: a KV server (oasiskv serve, same model) prefills each\n"
          "                     window; this node admits it sparsely and reads further blocks over UCX\n"
          "  --token-file F     the server's access token (with --remote)\n"
          "  --disaggregated    with --prefill-tokens: start an oasiskv serve on 127.0.0.1 (ephemeral port)\n"
          "                     with this model, use it as --remote, stop it at the end\n");
}

typedef struct progress_t {
  char label[64];
} progress_t;

static void progress_cb(void *user, uint64_t done, uint64_t total) {
  progress_t *p = user;
  if (done != total && done % 16 != 0) return;
  int width = 30, fill = total ? (int)(width * done / total) : width;
  fprintf(stderr, "\r%-28s [", p->label);
  for (int i = 0; i < width; ++i) fputc(i < fill ? '#' : '.', stderr);
  fprintf(stderr, "] %3d%%", total ? (int)(100 * done / total) : 100);
  if (done == total) fprintf(stderr, "\r%*s\r", 72, "");
  fflush(stderr);
}

/* Text windows: byte ranges snapped to UTF-8 code point boundaries. */
/* --selection host|device; prints its own error line. */
static bool parse_selection(const char *v, bool *out_device) {
  if (strcmp(v, "host") != 0 && strcmp(v, "device") != 0) {
    fprintf(stderr, "%s: --selection must be host or device, got '%s'\n", CMD, v);
    return false;
  }
  *out_device = strcmp(v, "device") == 0;
  return true;
}

static bool load_text(const char *path, char **out_text, size_t *out_n) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, CMD ": text '%s': %s\n", path, strerror(errno));
    return false;
  }
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n + 65536 + 1 > cap) {
      cap = cap ? cap * 2 : 1 << 20;
      char *nb = realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        fprintf(stderr, CMD ": text '%s': out of memory\n", path);
        return false;
      }
      buf = nb;
    }
    size_t r = fread(buf + n, 1, 65536, f);
    n += r;
    if (r < 65536) break;
  }
  bool err = ferror(f);
  fclose(f);
  if (err) {
    free(buf);
    fprintf(stderr, CMD ": text '%s': read failed\n", path);
    return false;
  }
  if (n == 0) {
    free(buf);
    fprintf(stderr, CMD ": text '%s' is empty\n", path);
    return false;
  }
  buf[n] = '\0';
  *out_text = buf;
  *out_n = n;
  return true;
}

static size_t snap_utf8(const char *t, size_t n, size_t i) {
  while (i < n && ((unsigned char)t[i] & 0xC0) == 0x80) ++i;
  return i;
}

static void json_add_num(json_object *o, const char *k, double v) {
  json_object_object_add(o, k, isfinite(v) ? json_object_new_double(v) : NULL);
}

static json_object *result_json(const okv_eval_result_t *r) {
  json_object *o = json_object_new_object();
  json_object_object_add(o, "mode", json_object_new_string(okv_cli_mode_name(r->mode)));
  json_object_object_add(o, "drafter", json_object_new_string(okv_drafter_name(r->drafter)));
  json_object_object_add(o, "budget_blocks", json_object_new_int64(r->budget_blocks));
  json_add_num(o, "fetch_ratio", fabs(r->fetch_ratio)); /* with auto: the maximum */
  json_object_object_add(o, "fetch_ratio_auto", json_object_new_boolean(r->fetch_ratio < 0));
  json_object_object_add(o, "selection", json_object_new_string(r->device_selection ? "device" : "host"));
  json_object_object_add(o, "scoring", json_object_new_string(okv_scoring_name(r->scoring)));
  json_object_object_add(o, "scoring_groups", json_object_new_int64(r->scoring_groups));
  json_object_object_add(o, "tokens_evaluated", json_object_new_int64((int64_t)r->tokens_evaluated));
  json_add_num(o, "mean_nll", r->mean_nll);
  json_add_num(o, "perplexity", r->perplexity);
  json_add_num(o, "top1_agreement", r->top1_agreement);
  json_add_num(o, "kl_vs_dense", r->kl_vs_dense);
  json_add_num(o, "recall", r->recall);
  json_object *pl = json_object_new_array();
  for (uint32_t l = 0; l < r->n_layers && l < 64; ++l)
    json_object_array_add(pl, isfinite(r->recall_per_layer[l]) ? json_object_new_double(r->recall_per_layer[l]) : NULL);
  json_object_object_add(o, "recall_per_layer", pl);
  json_object_object_add(o, "bytes_moved", json_object_new_int64((int64_t)r->bytes_moved));
  json_add_num(o, "blocks_moved_per_token", r->blocks_moved_per_token);
  json_object_object_add(o, "deferred_steps", json_object_new_int64((int64_t)r->deferred_steps));
  json_add_num(o, "stall_seconds", r->stall_seconds);
  json_add_num(o, "tokens_per_second", r->tokens_per_second);
  if (r->prefill_tokens > 0) { /* --prefill-tokens: admission (exact bytes) and reads through the KV source */
    json_object_object_add(o, "prefill_tokens", json_object_new_int64(r->prefill_tokens));
    json_object_object_add(o, "admitted_bytes", json_object_new_int64((int64_t)r->admitted_bytes));
    json_object_object_add(o, "full_kv_bytes", json_object_new_int64((int64_t)r->full_kv_bytes));
    json_add_num(o, "admission_ratio", r->admission_ratio);
    json_object_object_add(o, "remote_bytes", json_object_new_int64((int64_t)r->remote_bytes));
    json_add_num(o, "remote_stall_seconds", r->remote_stall_seconds);
    json_add_num(o, "remote_gbps", r->remote_gbps);
  }
  return o;
}

static void fmt_num(char *b, size_t n, const char *fmt, double v) {
  if (isfinite(v))
    snprintf(b, n, fmt, v);
  else
    snprintf(b, n, "-");
}

/* The fetch ratio of r as the table and the CSV show it: "0.05", or "auto:0.05" for the self-tuning cap (with its
 * maximum). */
static void fmt_ratio(char *b, size_t n, double fetch_ratio) { okv_cli_format_fetch_ratio(fetch_ratio, b, n); }

static void print_csv(FILE *f, const okv_eval_result_t *rs, size_t n) {
  fprintf(f,
          "mode,drafter,budget_blocks,fetch_ratio,fetch_ratio_auto,scoring,tokens_evaluated,mean_nll,perplexity,"
          "top1_agreement,kl_vs_dense,recall,bytes_moved,blocks_moved_per_token,deferred_steps,stall_seconds,"
          "tokens_per_second,recall_per_layer\n");
  for (size_t i = 0; i < n; ++i) {
    const okv_eval_result_t *r = &rs[i];
    char top1[32], kl[32], rec[32];
    fmt_num(top1, sizeof top1, "%.6f", r->top1_agreement);
    fmt_num(kl, sizeof kl, "%.6g", r->kl_vs_dense);
    fmt_num(rec, sizeof rec, "%.6f", r->recall);
    fprintf(f, "%s,%s,%u,%g,%s,%s,%llu,%.6f,%.6f,%s,%s,%s,%llu,%.4f,%llu,%.6f,%.1f,", okv_cli_mode_name(r->mode),
            okv_drafter_name(r->drafter), r->budget_blocks, fabs(r->fetch_ratio), r->fetch_ratio < 0 ? "true" : "false",
            okv_scoring_name(r->scoring), (unsigned long long)r->tokens_evaluated, r->mean_nll, r->perplexity, top1, kl,
            rec, (unsigned long long)r->bytes_moved, r->blocks_moved_per_token, (unsigned long long)r->deferred_steps,
            r->stall_seconds, r->tokens_per_second);
    for (uint32_t l = 0; l < r->n_layers && l < 64; ++l) {
      char b[32];
      fmt_num(b, sizeof b, "%.4f", r->recall_per_layer[l]);
      fprintf(f, "%s%s", l ? ";" : "", b);
    }
    fputc('\n', f);
  }
}

static void print_table(FILE *f, const okv_eval_result_t *rs, size_t n, double dense_nll) {
  fprintf(f, "%-9s %-7s %4s %9s %-9s %7s %9s %8s %9s %7s %10s %7s %8s %9s %8s %9s %9s  %s\n", "mode", "drafter", "K",
          "ratio", "scoring", "tokens", "mean_nll", "d_nll%", "ppl", "top1", "kl", "recall", "blk/tok", "MB_moved",
          "deferred", "stall_s", "tok/s", "recall/layer");
  for (size_t i = 0; i < n; ++i) {
    const okv_eval_result_t *r = &rs[i];
    char top1[32], kl[32], rec[32], dn[32], ratio[32];
    fmt_ratio(ratio, sizeof ratio, r->fetch_ratio);
    fmt_num(top1, sizeof top1, "%.4f", r->top1_agreement);
    fmt_num(kl, sizeof kl, "%.3e", r->kl_vs_dense);
    fmt_num(rec, sizeof rec, "%.4f", r->recall);
    fmt_num(dn, sizeof dn, "%+.3f", 100.0 * (r->mean_nll - dense_nll) / dense_nll);
    fprintf(f, "%-9s %-7s %4u %9s %-9s %7llu %9.5f %8s %9.4f %7s %10s %7s %8.3f %9.3f %8llu %9.4f %9.0f  ",
            okv_cli_mode_name(r->mode), okv_drafter_name(r->drafter), r->budget_blocks, ratio,
            okv_scoring_name(r->scoring), (unsigned long long)r->tokens_evaluated, r->mean_nll, dn, r->perplexity, top1,
            kl, rec, r->blocks_moved_per_token, (double)r->bytes_moved / 1e6, (unsigned long long)r->deferred_steps,
            r->stall_seconds, r->tokens_per_second);
    if (r->mode == OKV_MODE_DENSE) fputc('-', f);
    for (uint32_t l = 0; r->mode != OKV_MODE_DENSE && l < r->n_layers && l < 64; ++l) {
      char b[32];
      fmt_num(b, sizeof b, "%.2f", r->recall_per_layer[l]);
      fprintf(f, "%s%s", l ? "/" : "", b);
    }
    fputc('\n', f);
  }
}

/* --prefill-tokens: what each run admitted and read through the KV source. */
static void print_admission(FILE *f, const okv_eval_result_t *rs, size_t n) {
  fprintf(f, "prefill %u tokens per window, admitted as a remote sequence:\n", rs[0].prefill_tokens);
  fprintf(f, "%-9s %4s %12s %12s %9s %12s %14s %10s\n", "mode", "K", "admitted_B", "full_kv_B", "ratio", "remote_B",
          "remote_stall_s", "remote_GB/s");
  for (size_t i = 0; i < n; ++i) {
    const okv_eval_result_t *r = &rs[i];
    char gbps[32];
    fmt_num(gbps, sizeof gbps, "%.3f", r->remote_gbps);
    fprintf(f, "%-9s %4u %12llu %12llu %9.3f %12llu %14.6f %10s\n", okv_cli_mode_name(r->mode), r->budget_blocks,
            (unsigned long long)r->admitted_bytes, (unsigned long long)r->full_kv_bytes, r->admission_ratio,
            (unsigned long long)r->remote_bytes, r->remote_stall_seconds, gbps);
  }
}

static bool find_in_path(const char *prog) {
  const char *path = getenv("PATH");
  if (!path) return false;
  char buf[4096];
  while (*path) {
    const char *c = strchr(path, ':');
    size_t n = c ? (size_t)(c - path) : strlen(path);
    snprintf(buf, sizeof buf, "%.*s/%s", (int)n, n ? path : ".", prog);
    if (access(buf, X_OK) == 0) return true;
    if (!c) break;
    path = c + 1;
  }
  return false;
}

/* Draws NLL increase vs budget (one line per non-dense mode) into out_png. */
static bool plot_png(const char *png_path, const okv_eval_result_t *rs, size_t n, double dense_nll,
                     const char *model_name) {
  if (strchr(png_path, '\'') || strchr(png_path, '\n')) {
    fprintf(stderr, CMD ": --plot path must not contain quotes or newlines\n");
    return false;
  }
  FILE *g = popen("gnuplot 2>&1", "w");
  if (!g) {
    fprintf(stderr, CMD ": cannot start gnuplot: %s\n", strerror(errno));
    return false;
  }
  fprintf(g,
          "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size 900,600 } "
          "else { set terminal png size 900,600 }\n"
          "set output '%s'\n"
          "set logscale x 2\nset grid\nset key top right\n"
          "set xlabel 'budget K (blocks of 16 tokens per KV head)'\n"
          "set ylabel 'mean NLL increase vs dense (%%)'\n"
          "set title 'OasisKV eval: %s, dense NLL %.4f'\n",
          png_path, model_name, dense_nll);
  okv_mode_t modes[OKV_MODE_COUNT];
  okv_drafter_t drafters[OKV_MODE_COUNT];
  size_t n_lines = 0;
  for (size_t i = 0; i < n; ++i) {
    if (rs[i].mode == OKV_MODE_DENSE) continue;
    bool seen = false;
    for (size_t j = 0; j < n_lines; ++j) seen |= modes[j] == rs[i].mode;
    if (!seen && n_lines < OKV_MODE_COUNT) {
      modes[n_lines] = rs[i].mode;
      drafters[n_lines++] = rs[i].drafter;
    }
  }
  fprintf(g, "plot 0 with lines lc rgb 'gray' title 'dense'");
  for (size_t j = 0; j < n_lines; ++j)
    fprintf(g, ", '-' using 1:2 with linespoints lw 2 title '%s%s%s'", okv_cli_mode_name(modes[j]),
            drafters[j] != OKV_DRAFTER_NONE ? "+" : "",
            drafters[j] != OKV_DRAFTER_NONE ? okv_drafter_name(drafters[j]) : "");
  fputc('\n', g);
  for (size_t j = 0; j < n_lines; ++j) {
    for (size_t i = 0; i < n; ++i)
      if (rs[i].mode == modes[j])
        fprintf(g, "%u %.8f\n", rs[i].budget_blocks, 100.0 * (rs[i].mean_nll - dense_nll) / dense_nll);
    fprintf(g, "e\n");
  }
  fprintf(g, "set output\n");
  int rc = pclose(g);
  struct stat st;
  if (rc != 0 || stat(png_path, &st) != 0 || st.st_size == 0) {
    fprintf(stderr, CMD ": gnuplot failed to draw '%s' (exit status %d)\n", png_path, rc);
    return false;
  }
  return true;
}

/* --trace: the writer and the first error of the engine's trace hook (which cannot return one). */
typedef struct trace_ctx_t {
  okv_kv_trace_writer_t w;
  bool open;
  okv_status_t error;
} trace_ctx_t;

static void trace_record(void *user, const okv_engine_trace_t *t) {
  trace_ctx_t *c = user;
  if (c->error || !c->open) return;
  const okv_kv_trace_shape_t *sh = &c->w.shape;
  size_t nk = (size_t)sh->n_kv_heads * sh->head_dim, nq = (size_t)sh->n_q_heads * sh->head_dim;
  for (uint32_t i = 0; i < t->n_seqs && !c->error; ++i) {
    const float *q = t->q + (size_t)i * t->n_query_tokens * nq;
    c->error = okv_kv_trace_write(&c->w, t->seq_ids[i], t->positions[i], t->layer, t->k + (size_t)i * nk, q,
                                  t->n_query_tokens > 1 ? q + nq : NULL);
  }
}

/* --groups N: an integer >= 1 (its bound, --budget, is checked once every option is read). */
static bool parse_groups(const char *v, uint64_t *out) {
  if (!okv_cli_parse_u64(CMD, "--groups", v, out)) return false;
  if (*out > 0) return true;
  fprintf(stderr, CMD ": --groups must be at least 1 (and at most --budget), got %s\n", v);
  return false;
}

int okv_cli_eval(int argc, char **argv) {
  const char *model_flag = NULL, *tok_flag = NULL, *text_flag = NULL, *json_path = NULL, *csv_path = NULL,
             *plot_path = NULL, *device = "cpu", *mode_s = "all", *drafter_s = "self";
  uint64_t offset = 0;
  uint32_t bytes = 2000, n_windows = 1, budget = 8, context = 0, prefill_tokens = 0;
  uint64_t groups = 0; /* not given */
  double fetch_ratio = 0.05;
  okv_scoring_t scoring = OKV_SCORING_COUNT; /* not given */
  bool device_selection = false;
  bool sweep = false;
  const char *trace_path = NULL, *remote_s = NULL, *token_path = NULL;
  bool disaggregated = false;
  for (int i = 1; i < argc; ++i) {
    const char *v = NULL;
    int r;
    OKV_CLI_OPT_HELP(usage(stdout))
    OKV_CLI_OPT_FLAG("--sweep", sweep)
    OKV_CLI_OPT_FLAG("--disaggregated", disaggregated)
    OKV_CLI_OPT_STRING("--remote", remote_s)
    OKV_CLI_OPT_STRING("--token-file", token_path)
    OKV_CLI_OPT_STRING("--model", model_flag)
    OKV_CLI_OPT_STRING("--tokenizer", tok_flag)
    OKV_CLI_OPT_STRING("--text", text_flag)
    OKV_CLI_OPT_STRING("--json", json_path)
    OKV_CLI_OPT_STRING("--csv", csv_path)
    OKV_CLI_OPT_STRING("--plot", plot_path)
    OKV_CLI_OPT_STRING("--device", device)
    OKV_CLI_OPT_STRING("--mode", mode_s)
    OKV_CLI_OPT_STRING("--drafter", drafter_s)
    OKV_CLI_OPT_STRING("--trace", trace_path)
    OKV_CLI_OPT_PARSED("--offset", okv_cli_parse_u64(CMD, "--offset", v, &offset))
    OKV_CLI_OPT_PARSED("--bytes", okv_cli_parse_u32(CMD, "--bytes", v, 1, 1u << 24, &bytes))
    OKV_CLI_OPT_PARSED("--context", okv_cli_parse_u32(CMD, "--context", v, 1, 1u << 20, &context))
    OKV_CLI_OPT_PARSED("--windows", okv_cli_parse_u32(CMD, "--windows", v, 1, 1024, &n_windows))
    OKV_CLI_OPT_PARSED("--budget", okv_cli_parse_u32(CMD, "--budget", v, 1, OKV_TOPK_MAX, &budget))
    OKV_CLI_OPT_PARSED("--fetch-ratio", okv_cli_parse_fetch_ratio(CMD, v, &fetch_ratio))
    OKV_CLI_OPT_PARSED("--scoring", okv_cli_parse_scoring(CMD, v, &scoring))
    OKV_CLI_OPT_PARSED("--groups", parse_groups(v, &groups))
    OKV_CLI_OPT_PARSED("--selection", parse_selection(v, &device_selection))
    OKV_CLI_OPT_PARSED("--prefill-tokens", okv_cli_parse_u32(CMD, "--prefill-tokens", v, 1, 1u << 20, &prefill_tokens))
    fprintf(stderr, CMD ": unknown option '%s' (see --help)\n", argv[i]);
    return 2;
  }
  /* Validate everything before loading anything. */
  bool all_modes = !strcmp(mode_s, "all");
  okv_mode_t one_mode = OKV_MODE_DENSE;
  if (!all_modes && !okv_cli_parse_mode(CMD, mode_s, &one_mode)) return 2;
  okv_drafter_t drafter;
  okv_status_t s = okv_drafter_parse(drafter_s, &drafter);
  if (s) {
    okv_cli_print_status(CMD, s);
    return 2;
  }
  if (!okv_cli_parse_device(CMD, device)) return 2;
  okv_cli_remote_t remote;
  if ((remote_s || disaggregated) && prefill_tokens == 0) {
    fprintf(stderr, CMD ": --remote and --disaggregated need --prefill-tokens P\n");
    return 2;
  }
  if (!okv_cli_remote_options(CMD, remote_s, token_path, disaggregated, &remote)) return 2;
  /* Every mode scores each position's next token: a window needs 2 positions, P + 2 with --prefill-tokens P
   * (P prefilled, then at least one decoded position and the token it predicts). */
  const uint32_t min_context = prefill_tokens + 2u;
  if (context != 0 && context < min_context) {
    char mode_desc[64];
    snprintf(mode_desc, sizeof mode_desc, all_modes ? "every mode" : "mode %s", okv_cli_mode_name(one_mode));
    if (prefill_tokens > 0)
      fprintf(stderr, CMD ": --context %u is too short: --prefill-tokens %u needs at least %u positions\n", context,
              prefill_tokens, min_context);
    else
      fprintf(stderr,
              CMD
              ": --context %u is too short: %s scores each position's next token, which needs at least %u "
              "positions\n",
              context, mode_desc, min_context);
    return 2;
  }
  if (groups > 0 && scoring == OKV_SCORING_FLAT) { /* said first: no value of --groups would do */
    fprintf(stderr, CMD ": --groups applies to --scoring q8, c4 and two-level (flat scores every block)\n");
    return 2;
  }
  if (groups > budget && !sweep) {
    fprintf(stderr, CMD ": --groups %llu is above --budget %u (at most K: candidates beyond K, or groups kept)\n",
            (unsigned long long)groups, budget);
    return 2;
  }
  if (device_selection && fetch_ratio < 0) {
    fprintf(stderr, CMD
            ": --selection device does not support --fetch-ratio auto (its spare slots move between "
            "heads); give a fixed ratio\n");
    return 2;
  }
  if (device_selection && prefill_tokens > 0) {
    fprintf(stderr, CMD
            ": --selection device does not support --prefill-tokens (prefilled windows are admitted as "
            "remote sequences)\n");
    return 2;
  }
  if (trace_path && !all_modes && one_mode != OKV_MODE_OASIS) {
    fprintf(stderr, CMD ": --trace records the oasis run (its draft queries): use --mode oasis or all\n");
    return 2;
  }
  if ((plot_path || sweep) && !find_in_path("gnuplot")) {
    fprintf(stderr, CMD ": --plot needs gnuplot, which is not installed (Debian: apt-get install gnuplot-nox)\n");
    return 1;
  }
  if (sweep) {
    if (!json_path || !csv_path || !plot_path) {
      if (mkdir("results", 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, CMD ": cannot create results/: %s\n", strerror(errno));
        return 1;
      }
    }
    if (!json_path) json_path = "results/sweep.json";
    if (!csv_path) csv_path = "results/sweep.csv";
    if (!plot_path) plot_path = "results/sweep.png";
  }
  if (plot_path && !strcmp(plot_path, "-")) {
    fprintf(stderr, CMD ": --plot needs a file name\n");
    return 2;
  }
  char text_path[4096];
  s = okv_model_path_resolve(OKV_MODEL_PATH_TEXT, text_flag, text_path, sizeof text_path);
  if (s) {
    okv_cli_print_status(CMD, s);
    return 1;
  }
  char *text = NULL;
  size_t text_n = 0;
  if (!load_text(text_path, &text, &text_n)) return 1;

  okv_cli_model_t cm;
  if (!okv_cli_model_open_ex(CMD, model_flag, tok_flag, device, context, &cm)) {
    free(text);
    return 1;
  }
  const okv_model_config_t *mc = &cm.model->config;
  int rc = 1;
  okv_eval_window_t *windows = calloc(n_windows, sizeof *windows);
  uint32_t *tokbuf = calloc((size_t)n_windows * mc->seq_len, sizeof *tokbuf);
  uint32_t *enc = calloc((size_t)bytes + 2, sizeof *enc);
  okv_eval_result_t *results = calloc(1 + 5 * OKV_MODE_COUNT, sizeof *results);
  size_t n_results = 0;
  okv_eval_reference_t dense_ref = {0};
  okv_eval_prefill_t prefill = {0};
  okv_cli_output_t out_json = {0}, out_csv = {0}, out_png = {0};
  bool have_json = false, have_csv = false, have_png = false;
  trace_ctx_t tctx = {0};
  if (!windows || !tokbuf || !enc || !results) {
    fprintf(stderr, CMD ": out of memory\n");
    goto done;
  }
  /* Windows. */
  if (offset >= text_n) {
    fprintf(stderr, CMD ": --offset %llu is past the end of '%s' (%zu bytes)\n", (unsigned long long)offset, text_path,
            text_n);
    goto done;
  }
  size_t pos = snap_utf8(text, text_n, (size_t)offset);
  for (uint32_t w = 0; w < n_windows; ++w) {
    if (pos >= text_n) {
      fprintf(stderr, CMD ": '%s' has room for only %u windows of %u bytes from offset %llu\n", text_path, w, bytes,
              (unsigned long long)offset);
      goto done;
    }
    size_t end = pos + bytes < text_n ? pos + bytes : text_n;
    while (end > pos && end < text_n && ((unsigned char)text[end] & 0xC0) == 0x80) --end;
    size_t nt = 0;
    s = okv_tokenizer_encode(cm.tokenizer, text + pos, end - pos, true, enc, (size_t)bytes + 2, &nt);
    if (s) {
      s = okv_status_annotate(s, "text '%s' (window %u at byte %zu)", text_path, w, pos);
      okv_cli_print_status(CMD, s);
      goto done;
    }
    /* A window is cut out of running text: no end of text in it, even where the vocabulary appends EOS. */
    nt = okv_tokenizer_strip_added_eos(cm.tokenizer, enc, nt);
    if (nt > mc->seq_len) nt = mc->seq_len;
    if (nt < 2) {
      fprintf(stderr, CMD ": window %u of '%s' encodes to fewer than 2 tokens\n", w, text_path);
      goto done;
    }
    if (prefill_tokens > 0 && nt < (size_t)prefill_tokens + 2) {
      fprintf(stderr,
              CMD ": window %u has %zu tokens (--bytes %u, seq_len %u); --prefill-tokens %u needs at least %u\n", w, nt,
              bytes, mc->seq_len, prefill_tokens, prefill_tokens + 2);
      goto done;
    }
    memcpy(tokbuf + (size_t)w * mc->seq_len, enc, nt * sizeof *enc);
    windows[w].tokens = tokbuf + (size_t)w * mc->seq_len;
    windows[w].n_tokens = (uint32_t)nt;
    pos = end;
  }
  /* Outputs: opened (as temp files) before the runs so a bad path fails early. */
  if (json_path && !(have_json = okv_cli_output_open(CMD, json_path, &out_json))) goto done;
  if (csv_path && !(have_csv = okv_cli_output_open(CMD, csv_path, &out_csv))) goto done;
  if (plot_path && !(have_png = okv_cli_output_reserve(CMD, plot_path, &out_png))) goto done;
  if (trace_path) {
    okv_kv_trace_shape_t tsh = {mc->n_layers, mc->n_q_heads, mc->n_kv_heads, mc->head_dim, true};
    s = okv_kv_trace_open(trace_path, &tsh, &tctx.w);
    if (s) {
      okv_cli_print_status(CMD, okv_status_annotate(s, "--trace"));
      goto done;
    }
    tctx.open = true;
  }

  /* Runs: dense first (the reference), then each mode x budget. */
  okv_mode_t modes[OKV_MODE_COUNT];
  size_t n_modes = 0;
  if (all_modes) {
    modes[n_modes++] = OKV_MODE_OASIS;
    modes[n_modes++] = OKV_MODE_PROXY;
    modes[n_modes++] = OKV_MODE_ONDEMAND;
  } else if (one_mode != OKV_MODE_DENSE) {
    modes[n_modes++] = one_mode;
  }
  static const uint32_t k_sweep[] = {1, 2, 4, 8, 16};
  size_t n_budgets = sweep ? 5 : 1;
  bool tty = isatty(2);
  progress_t prog;
  okv_eval_config_t ec = {OKV_MODE_DENSE,
                          OKV_DRAFTER_NONE,
                          budget,
                          fetch_ratio,
                          tty ? progress_cb : NULL,
                          &prog,
                          NULL,
                          NULL,
                          scoring != OKV_SCORING_COUNT,
                          scoring != OKV_SCORING_COUNT ? scoring : OKV_SCORING_FLAT,
                          0, /* scoring_groups: set per run below */
                          device_selection};
  if (okv_cli_remote_wanted(&remote)) { /* the KV server prefills each window per run */
    if (!okv_cli_remote_open(CMD, cm.model_path, cm.tokenizer_path, device, context, &remote)) goto done;
    prefill.n_windows = n_windows;
    prefill.prefill_tokens = prefill_tokens;
    prefill.remote = remote.client;
    prefill.remote_timeout_s = OKV_CLI_REMOTE_TIMEOUT_S;
    prefill.model_fingerprint = okv_prefill_model_fingerprint(cm.model);
  } else if (prefill_tokens > 0) { /* once, shared by every run: the prefill node's dense pass */
    s = okv_eval_prefill(cm.model, cm.device, windows, n_windows, prefill_tokens, NULL, &prefill);
    if (s) {
      okv_cli_print_status(CMD, okv_status_annotate(s, "--prefill-tokens %u", prefill_tokens));
      goto done;
    }
  }
  const okv_eval_prefill_t *pre = prefill_tokens > 0 ? &prefill : NULL;
  snprintf(prog.label, sizeof prog.label, "dense");
  s = okv_eval_run_prefilled(cm.model, cm.device, windows, n_windows, &ec, pre, NULL, NULL, &dense_ref,
                             &results[n_results]);
  if (s) {
    okv_cli_print_status(CMD, okv_status_annotate(s, "mode dense"));
    goto done;
  }
  results[n_results].top1_agreement = 1.0;
  results[n_results].kl_vs_dense = 0.0;
  ++n_results;
  for (size_t m = 0; m < n_modes; ++m)
    for (size_t b = 0; b < n_budgets; ++b) {
      ec.mode = modes[m];
      ec.drafter = modes[m] == OKV_MODE_OASIS ? drafter : OKV_DRAFTER_NONE;
      ec.budget_blocks = sweep ? k_sweep[b] : budget;
      ec.scoring_groups = groups < ec.budget_blocks ? (uint32_t)groups : ec.budget_blocks; /* --sweep: at most K */
      ec.trace = tctx.open && modes[m] == OKV_MODE_OASIS && b == 0 ? trace_record : NULL;  /* one oasis run */
      ec.trace_user = &tctx;
      snprintf(prog.label, sizeof prog.label, "%s%s%s K=%u", okv_cli_mode_name(ec.mode), ec.drafter ? "+" : "",
               ec.drafter ? okv_drafter_name(ec.drafter) : "", ec.budget_blocks);
      s = okv_eval_run_prefilled(cm.model, cm.device, windows, n_windows, &ec, pre, &dense_ref, NULL, NULL,
                                 &results[n_results]);
      if (s) {
        okv_cli_print_status(CMD,
                             okv_status_annotate(s, "mode %s, K %u", okv_cli_mode_name(ec.mode), ec.budget_blocks));
        goto done;
      }
      const okv_eval_result_t *rr = &results[n_results];
      if (rr->mode != OKV_MODE_DENSE && rr->scoring != OKV_SCORING_FLAT && rr->scoring_groups == 0)
        fprintf(stderr,
                CMD
                ": note: mode %s, K %u: --scoring %s scored every block exactly, as flat does: K + the margin "
                "(or the groups kept) covered a KV head's whole context, or K = %u left no margin "
                "(scoring_groups reads 0)\n",
                okv_cli_mode_name(rr->mode), rr->budget_blocks, okv_scoring_name(rr->scoring), OKV_TOPK_MAX);
      if (rr->scoring == OKV_SCORING_TWO_LEVEL && rr->scoring_groups > 0 &&
          (uint64_t)rr->scoring_groups * OKV_SCORING_GROUP_BLOCKS < rr->budget_blocks)
        fprintf(stderr,
                CMD
                ": note: mode %s, K %u: two-level scoring kept %u groups of %u blocks per KV head, %u blocks, "
                "fewer than K: each prediction held at most that many (--groups %u or more keeps K)\n",
                okv_cli_mode_name(rr->mode), rr->budget_blocks, rr->scoring_groups, OKV_SCORING_GROUP_BLOCKS,
                rr->scoring_groups * OKV_SCORING_GROUP_BLOCKS,
                (rr->budget_blocks + OKV_SCORING_GROUP_BLOCKS - 1u) / OKV_SCORING_GROUP_BLOCKS);
      ++n_results;
    }
  if (tctx.open) {
    s = tctx.error ? tctx.error : okv_kv_trace_close(&tctx.w);
    tctx.error = OKV_OK;
    tctx.open = false;
    if (s) {
      okv_cli_print_status(CMD, okv_status_annotate(s, "--trace '%s'", trace_path));
      remove(trace_path);
      goto done;
    }
    fprintf(stderr, CMD ": wrote the trace %s (%llu records)\n", trace_path, (unsigned long long)tctx.w.n_records);
  }
  double dense_nll = results[0].mean_nll;
  bool to_stdout = (json_path && !strcmp(json_path, "-")) || (csv_path && !strcmp(csv_path, "-"));
  if (!to_stdout) {
    printf(
        "model %s (dim %u, layers %u, query/KV heads %u/%u, seq_len %u), %u window(s) of %u bytes from byte %llu of "
        "%s, device %s\n",
        cm.model_path, mc->dim, mc->n_layers, mc->n_q_heads, mc->n_kv_heads, mc->seq_len, n_windows, bytes,
        (unsigned long long)offset, text_path, device);
    print_table(stdout, results, n_results, dense_nll);
    if (prefill_tokens > 0) {
      if (okv_cli_remote_wanted(&remote)) {
        char where[160];
        okv_cli_remote_describe(&remote, where, sizeof where);
        printf("%s\n", where);
      }
      print_admission(stdout, results, n_results);
    }
    fflush(stdout);
  }
  if (have_json) {
    json_c_set_serialization_double_format("%.10g", JSON_C_OPTION_GLOBAL);
    json_object *arr = json_object_new_array();
    for (size_t i = 0; i < n_results; ++i) json_object_array_add(arr, result_json(&results[i]));
    fprintf(out_json.f, "%s\n",
            json_object_to_json_string_ext(arr, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(arr);
  }
  if (have_csv) print_csv(out_csv.f, results, n_results);
  if (have_png) {
    const char *base = strrchr(cm.model_path, '/');
    if (!plot_png(out_png.tmp_path, results, n_results, dense_nll, base ? base + 1 : cm.model_path)) goto done;
  }
  /* Commit every output only now. */
  if (have_json) {
    have_json = false;
    if (!okv_cli_output_commit(CMD, &out_json)) goto done;
  }
  if (have_csv) {
    have_csv = false;
    if (!okv_cli_output_commit(CMD, &out_csv)) goto done;
  }
  if (have_png) {
    have_png = false;
    if (!okv_cli_output_commit(CMD, &out_png)) goto done;
  }
  if (sweep && !to_stdout) fprintf(stderr, CMD ": wrote %s, %s, %s\n", json_path, csv_path, plot_path);
  rc = 0;
done:
  if (tctx.open) { /* a failed run: no partial trace is left */
    OKV_IGNORE_ERROR(okv_kv_trace_close(&tctx.w));
    remove(trace_path);
  }
  okv_status_free(tctx.error);
  if (have_json) okv_cli_output_abort(&out_json);
  if (have_csv) okv_cli_output_abort(&out_csv);
  if (have_png) okv_cli_output_abort(&out_png);
  okv_eval_reference_free(&dense_ref);
  okv_eval_prefill_free(&prefill);
  if (!okv_cli_remote_close(CMD, &remote) && rc == 0) rc = 1;
  free(results);
  free(enc);
  free(tokbuf);
  free(windows);
  okv_cli_model_close(&cm);
  free(text);
  return rc;
}
