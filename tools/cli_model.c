/* Helpers shared by the eval and generate commands (see cli_model.h). */
#include "cli_model.h"
#include "cli.h"

#include "model/gguf.h"
#include "model/tokenizer_gguf.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int okv_cli_opt_value(const char *cmd, int argc, char **argv, int *i, const char *name, const char **out_value) {
  const char *a = argv[*i];
  size_t n = strlen(name);
  if (strncmp(a, name, n) != 0) return 0;
  if (a[n] == '=') {
    *out_value = a + n + 1;
    return 1;
  }
  if (a[n] != '\0') return 0;
  if (*i + 1 >= argc) {
    fprintf(stderr, "%s: option %s needs a value\n", cmd, name);
    return -1;
  }
  *out_value = argv[++*i];
  return 1;
}

bool okv_cli_parse_u64(const char *cmd, const char *flag, const char *s, uint64_t *out) {
  if (okv_cli_decimal_u64(s, out) == OKV_CLI_NUM_OK) return true;
  char shown[96];
  fprintf(stderr, "%s: %s expects a non-negative integer, got '%s'\n", cmd, flag,
          okv_cli_shown(s, shown, sizeof shown));
  return false;
}

bool okv_cli_parse_u32(const char *cmd, const char *flag, const char *s, uint32_t lo, uint32_t hi, uint32_t *out) {
  uint64_t v = 0;
  if (!okv_cli_parse_u64(cmd, flag, s, &v)) return false;
  if (v < lo || v > hi) {
    fprintf(stderr, "%s: %s must be in [%u, %u], got %s\n", cmd, flag, lo, hi, s);
    return false;
  }
  *out = (uint32_t)v;
  return true;
}

bool okv_cli_parse_double(const char *cmd, const char *flag, const char *s, double *out) {
  const okv_cli_num_t r = okv_cli_decimal_f64(s, out);
  char shown[96];
  if (r == OKV_CLI_NUM_OK) return true;
  if (r == OKV_CLI_NUM_OVERFLOW || r == OKV_CLI_NUM_UNDERFLOW)
    fprintf(stderr, "%s: %s: '%s' is out of range (%s)\n", cmd, flag, s,
            r == OKV_CLI_NUM_OVERFLOW ? "overflows" : "underflows");
  else if (r == OKV_CLI_NUM_NOT_FINITE)
    fprintf(stderr, "%s: %s: '%s' is not a finite number\n", cmd, flag, s);
  else
    fprintf(stderr, "%s: %s: '%s' is not a number\n", cmd, flag, okv_cli_shown(s, shown, sizeof shown));
  return false;
}

bool okv_cli_parse_fetch_ratio(const char *cmd, const char *s, double *out) {
  double v;
  if (s != NULL && strncmp(s, "auto", 4) == 0 && (s[4] == '\0' || s[4] == ':')) {
    /* Self-tuning cap: encoded as minus its maximum ratio (okv_cli_runtime_config decodes it). */
    v = OKV_CLI_AUTO_FETCH_RATIO_MAX;
    if (s[4] == ':' && !okv_cli_parse_double(cmd, "--fetch-ratio auto:MAX", s + 5, &v)) return false;
    if (!(v > 0.0 && v <= 1.0)) {
      fprintf(stderr, "%s: --fetch-ratio auto:MAX needs MAX in (0, 1], got %s\n", cmd, s + 5);
      return false;
    }
    *out = -v;
    return true;
  }
  const okv_cli_num_t r = okv_cli_decimal_f64(s, &v);
  if (r == OKV_CLI_NUM_BAD || r == OKV_CLI_NUM_NOT_FINITE) { /* not a number: say both forms it takes */
    char shown[96];
    fprintf(stderr, "%s: --fetch-ratio: '%s' is neither a number in (0, 1] nor auto[:MAX]\n", cmd,
            okv_cli_shown(s, shown, sizeof shown));
    return false;
  }
  if (r != OKV_CLI_NUM_OK && !okv_cli_parse_double(cmd, "--fetch-ratio", s, &v)) return false; /* out of range */
  if (!(v > 0.0 && v <= 1.0)) {
    fprintf(stderr, "%s: --fetch-ratio must be in (0, 1], got %s\n", cmd, s);
    return false;
  }
  *out = v;
  return true;
}

void okv_cli_format_fetch_ratio(double fetch_ratio, char *buf, size_t n) {
  snprintf(buf, n, "%s%g", fetch_ratio < 0 ? "auto:" : "", fabs(fetch_ratio));
}

bool okv_cli_parse_scoring(const char *cmd, const char *s, okv_scoring_t *out) {
  okv_status_t st = okv_scoring_parse(s, out);
  if (st == OKV_OK) return true;
  okv_status_free(st); /* its message names the library call: say it in the option's terms */
  char shown[96];
  fprintf(stderr, "%s: unknown --scoring '%s' (expected c4, q8, flat or two-level, lower case)\n", cmd,
          okv_cli_shown(s, shown, sizeof shown));
  return false;
}

const char *okv_cli_mode_name(okv_mode_t mode) { return okv_mode_name(mode); }

bool okv_cli_parse_mode(const char *cmd, const char *s, okv_mode_t *out) {
  okv_status_t st = okv_mode_parse(s ? s : "", out);
  if (st == OKV_OK) return true;
  okv_status_free(st);
  char shown[96];
  fprintf(stderr, "%s: unknown mode '%s' (expected", cmd, okv_cli_shown(s, shown, sizeof shown));
  for (int i = 0; i < OKV_MODE_COUNT; ++i) fprintf(stderr, "%s %s", i ? "," : "", okv_mode_name((okv_mode_t)i));
  fprintf(stderr, "%s)\n", strcmp(cmd, "oasiskv eval") == 0 ? " or all" : "");
  return false;
}

bool okv_cli_parse_device(const char *cmd, const char *s) {
  size_t n = okv_hal_backend_count();
  for (size_t i = 0; i < n; ++i)
    if (s && !strcmp(s, okv_hal_backend_name(i))) return true;
  char shown[96];
  fprintf(stderr, "%s: unknown device '%s' (backends compiled in:", cmd, okv_cli_shown(s, shown, sizeof shown));
  for (size_t i = 0; i < n; ++i) fprintf(stderr, "%s %s", i ? "," : "", okv_hal_backend_name(i));
  fprintf(stderr, ")\n");
  return false;
}

void okv_cli_apply_fetch_ratio(double fetch_ratio, okv_runtime_config_t *out) {
  out->fetch_ratio_auto = fetch_ratio < 0;
  out->fetch_ratio = fetch_ratio < 0 ? -fetch_ratio : fetch_ratio;
}

void okv_cli_runtime_config(const okv_model_config_t *mc, okv_mode_t mode, uint32_t budget, double fetch_ratio,
                            uint32_t max_seqs, okv_runtime_config_t *out) {
  okv_model_runtime_config(mc, out); /* the model's shape, f32 K/V, 16-token blocks */
  out->mode = mode;
  const uint32_t ctx_blocks = (mc->seq_len + OKV_BLOCK_TOKENS - 1) / OKV_BLOCK_TOKENS;
  /* Dense keeps every block resident whatever the budget; it only has to be valid (<= OKV_TOPK_MAX). */
  out->budget_blocks = mode != OKV_MODE_DENSE ? budget : ctx_blocks < OKV_TOPK_MAX ? ctx_blocks : OKV_TOPK_MAX;
  out->dense_threshold_blocks = out->budget_blocks;
  okv_cli_apply_fetch_ratio(fetch_ratio, out);
  out->max_seqs = max_seqs;
  out->max_context_tokens = ctx_blocks * OKV_BLOCK_TOKENS;
}

void okv_cli_print_status(const char *cmd, okv_status_t s) {
  fprintf(stderr, "%s: %s\n", cmd, okv_status_message(s));
  okv_status_free(s);
}

/* Whether `path` starts with the GGUF magic (false when it cannot be read:
 * the loader then reports why). */
static bool is_gguf_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  char magic[4] = {0};
  bool yes = fread(magic, 1, sizeof magic, f) == sizeof magic && memcmp(magic, "GGUF", 4) == 0;
  fclose(f);
  return yes;
}

/* A GGUF model and, without --tokenizer, its own tokenizer from one mapping. */
static okv_status_t open_gguf(const char *tokenizer_flag, uint32_t context_length, okv_cli_model_t *out) {
  okv_gguf_t *g = NULL;
  OKV_RETURN_IF_ERROR(okv_gguf_open(out->model_path, NULL, &g));
  okv_model_load_options_t o = {.context_length = context_length};
  okv_status_t s = okv_model_load_gguf(g, &o, NULL, &out->model);
  if (!s && !tokenizer_flag) {
    snprintf(out->tokenizer_path, sizeof out->tokenizer_path, "%s", out->model_path);
    s = okv_tokenizer_load_gguf(g, NULL, &out->tokenizer);
    if (!s && okv_tokenizer_vocab_size(out->tokenizer) != out->model->config.vocab_size)
      s = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "gguf '%s': its tokenizer has %u tokens, the model %u",
                          out->model_path, okv_tokenizer_vocab_size(out->tokenizer), out->model->config.vocab_size);
  }
  okv_gguf_close(g);
  return s;
}

bool okv_cli_model_open(const char *cmd, const char *model_flag, const char *tokenizer_flag, const char *device_name,
                        okv_cli_model_t *out) {
  return okv_cli_model_open_ex(cmd, model_flag, tokenizer_flag, device_name, 0, out);
}

bool okv_cli_model_open_ex(const char *cmd, const char *model_flag, const char *tokenizer_flag, const char *device_name,
                           uint32_t context_length, okv_cli_model_t *out) {
  memset(out, 0, sizeof *out);
  okv_status_t s = okv_model_path_resolve(OKV_MODEL_PATH_MODEL, model_flag, out->model_path, sizeof out->model_path);
  const bool gguf = !s && is_gguf_file(out->model_path);
  if (!s && gguf) s = open_gguf(tokenizer_flag, context_length, out);
  if (!s && (!gguf || tokenizer_flag))
    s = okv_model_path_resolve(OKV_MODEL_PATH_TOKENIZER, tokenizer_flag, out->tokenizer_path,
                               sizeof out->tokenizer_path);
  if (!s && !gguf) {
    okv_model_load_options_t o = {.context_length = context_length};
    s = okv_model_load_ex(out->model_path, &o, NULL, &out->model);
  }
  if (!s && !out->tokenizer && is_gguf_file(out->tokenizer_path)) {
    /* --tokenizer FILE.gguf (or OKV_TOKENIZER): the vocabulary of a GGUF file, tensors or not. */
    okv_gguf_t *g = NULL;
    s = okv_gguf_open(out->tokenizer_path, NULL, &g);
    if (!s) s = okv_tokenizer_load_gguf(g, NULL, &out->tokenizer);
    okv_gguf_close(g);
    if (!s && okv_tokenizer_vocab_size(out->tokenizer) != out->model->config.vocab_size)
      s = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "tokenizer '%s' has %u tokens, the model %u",
                          out->tokenizer_path, okv_tokenizer_vocab_size(out->tokenizer), out->model->config.vocab_size);
  }
  if (!s && !out->tokenizer)
    s = okv_tokenizer_load(out->tokenizer_path, out->model->config.vocab_size, NULL, &out->tokenizer);
  if (!s) {
    okv_hal_device_params_t p;
    okv_hal_device_params_init(&p);
    /* A model this small gives each kernel microseconds of work: a thread team
     * costs more than it saves (and its spinning threads compete with the
     * engine and pipeline threads), so the CPU kernels run on one thread. */
    if (out->model->config.dim <= 512) p.n_threads = 1;
    s = okv_hal_device_create(device_name, &p, NULL, &out->device);
    if (s) s = okv_status_annotate(s, "device '%s'", device_name);
  }
  if (s) {
    okv_cli_print_status(cmd, s);
    okv_cli_model_close(out);
    return false;
  }
  return true;
}

void okv_cli_model_close(okv_cli_model_t *m) {
  if (m->device) OKV_IGNORE_ERROR(okv_hal_device_release(m->device));
  okv_tokenizer_free(m->tokenizer);
  okv_model_free(m->model);
  m->device = NULL;
  m->tokenizer = NULL;
  m->model = NULL;
}

/* Temporary output names still to be committed or aborted, removed by a signal that ends the process
 * (Ctrl-C, kill), so an interrupted run leaves no stray `.tmp.` file next to its outputs. The handler only
 * calls unlink(2) and raise(3), both async-signal-safe. A name is listed before its file exists: mkstemp(3)
 * fills in the listed template itself, and the file exists only once the name is complete, so a signal at any
 * point either finds no file yet or unlinks the right one. */
#define OUTPUT_PENDING_MAX 8
static char g_pending_path[OUTPUT_PENDING_MAX][sizeof(((okv_cli_output_t *)0)->tmp_path)];
static volatile sig_atomic_t g_pending[OUTPUT_PENDING_MAX];
static const int k_cleanup_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

static void on_fatal_signal(int sig) {
  for (int i = 0; i < OUTPUT_PENDING_MAX; i++)
    if (g_pending[i]) unlink(g_pending_path[i]);
  signal(sig, SIG_DFL);
  raise(sig);
}

/* Lists `tmpl` (a mkstemp template) and creates its file in place; returns the open descriptor with the
 * final name in tmpl, or -1 (errno set; nothing listed). */
static int pending_create(char *tmpl) {
  static bool installed;
  if (!installed) {
    installed = true;
    for (size_t i = 0; i < sizeof k_cleanup_signals / sizeof k_cleanup_signals[0]; i++) {
      struct sigaction old;
      if (sigaction(k_cleanup_signals[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL) continue; /* keep others' */
      struct sigaction sa;
      memset(&sa, 0, sizeof sa);
      sa.sa_handler = on_fatal_signal;
      sigemptyset(&sa.sa_mask);
      sigaction(k_cleanup_signals[i], &sa, NULL);
    }
  }
  for (int i = 0; i < OUTPUT_PENDING_MAX; i++) {
    if (g_pending[i]) continue;
    snprintf(g_pending_path[i], sizeof g_pending_path[i], "%s", tmpl);
    g_pending[i] = 1; /* listed before the file exists */
    int fd = mkstemp(g_pending_path[i]);
    if (fd < 0) {
      int e = errno;
      g_pending[i] = 0;
      errno = e;
      return -1;
    }
    strcpy(tmpl, g_pending_path[i]);
    return fd;
  }
  return mkstemp(tmpl); /* more outputs than slots: created unlisted */
}

static void pending_remove(const char *tmp_path) {
  for (int i = 0; i < OUTPUT_PENDING_MAX; i++)
    if (g_pending[i] && !strcmp(g_pending_path[i], tmp_path)) g_pending[i] = 0;
}

bool okv_cli_output_reserve(const char *cmd, const char *path, okv_cli_output_t *o) {
  memset(o, 0, sizeof *o);
  if (strlen(path) >= sizeof o->path) {
    fprintf(stderr, "%s: output path too long: %s\n", cmd, path);
    return false;
  }
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
    /* Written through a temporary file and renamed: that would replace a device or FIFO. */
    fprintf(stderr, "%s: output '%s' exists and is not a regular file\n", cmd, path);
    return false;
  }
  strcpy(o->path, path);
  snprintf(o->tmp_path, sizeof o->tmp_path, "%s.tmp.XXXXXX", path);
  int fd = pending_create(o->tmp_path);
  if (fd < 0) {
    fprintf(stderr, "%s: cannot create '%s': %s\n", cmd, o->tmp_path, strerror(errno));
    o->tmp_path[0] = '\0';
    return false;
  }
  (void)fchmod(fd, 0644);
  close(fd);
  return true;
}

bool okv_cli_output_open(const char *cmd, const char *path, okv_cli_output_t *o) {
  if (!strcmp(path, "-")) {
    memset(o, 0, sizeof *o);
    strcpy(o->path, "-");
    o->is_stdout = true;
    o->f = stdout;
    return true;
  }
  if (!okv_cli_output_reserve(cmd, path, o)) return false;
  o->f = fopen(o->tmp_path, "w");
  if (!o->f) {
    fprintf(stderr, "%s: cannot write '%s': %s\n", cmd, o->tmp_path, strerror(errno));
    unlink(o->tmp_path);
    pending_remove(o->tmp_path);
    return false;
  }
  return true;
}

bool okv_cli_output_commit(const char *cmd, okv_cli_output_t *o) {
  if (o->is_stdout) {
    fflush(stdout);
    return true;
  }
  if (o->f) {
    int bad = ferror(o->f);
    if (fclose(o->f) != 0) bad = 1;
    o->f = NULL;
    if (bad) {
      fprintf(stderr, "%s: writing '%s' failed\n", cmd, o->path);
      unlink(o->tmp_path);
      pending_remove(o->tmp_path);
      return false;
    }
  }
  pending_remove(o->tmp_path); /* from here the name is renamed or removed */
  if (rename(o->tmp_path, o->path) != 0) {
    fprintf(stderr, "%s: cannot rename '%s' to '%s': %s\n", cmd, o->tmp_path, o->path, strerror(errno));
    unlink(o->tmp_path);
    return false;
  }
  o->tmp_path[0] = '\0';
  return true;
}

void okv_cli_output_abort(okv_cli_output_t *o) {
  if (o->is_stdout) return;
  if (o->f) fclose(o->f);
  o->f = NULL;
  if (o->tmp_path[0]) {
    unlink(o->tmp_path);
    pending_remove(o->tmp_path);
  }
  o->tmp_path[0] = '\0';
}
