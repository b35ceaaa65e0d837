/* libFuzzer harness: the CLI's option parsing (tools/cli_model.c helpers and
 * the whole command lines of `oasiskv generate` and `oasiskv eval`).
 *
 * Input: byte 0 selects the target (mod 4), the rest is split at NUL bytes
 * into at most 24 arguments, each in its own exactly-sized allocation:
 *   0: every number/name parser of cli_model.h on every argument, with the
 *      contract each documents checked on success;
 *   1: okv_cli_generate(argc, argv); 2: okv_cli_eval(argc, argv): the whole
 *      option loop and validation. The model, tokenizer and text are forced
 *      (through $OKV_MODEL, $OKV_TOKENIZER, $OKV_TEXT) to a path that does not
 *      exist, and inputs naming --model, --tokenizer, --text, --token-file or --sweep are
 *      skipped, so a command stops at loading its inputs: no model runs, no
 *      file is read or written; the exit code must be 0, 1 or 2;
 *   3: okv_cli_opt_value over the arguments for several option names.
 * The parsers print their errors to stderr: run with -close_fd_mask=3.
 *
 * The parsers must take "the whole string is a number" to the letter: digits
 * only for the integer parsers, no leading blanks for the number parsers (the
 * fuzzer found " -1" accepted as 2^64 - 1; fixed in tools/cli_model.c).
 * OKV_FUZZ_CLI_STRICT=0 turns that check off. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_common.h"
#include "tools/cli.h"
#include "tools/cli_model.h"

#define MAX_ARGS 24

static bool g_strict;

static void init_once(void) {
  static bool done = false;
  if (done) return;
  done = true;
  setenv("OKV_MODEL", "/nonexistent/okv-fuzz/model.bin", 1);
  setenv("OKV_TOKENIZER", "/nonexistent/okv-fuzz/tokenizer.bin", 1);
  setenv("OKV_TEXT", "/nonexistent/okv-fuzz/text.txt", 1);
  const char *s = getenv("OKV_FUZZ_CLI_STRICT");
  g_strict = !(s && !strcmp(s, "0"));
}

static bool all_digits(const char *s) {
  if (!*s) return false;
  for (; *s; ++s)
    if (*s < '0' || *s > '9') return false;
  return true;
}

static void check_parsers(const char *a) {
  uint64_t u64 = 0;
  if (okv_cli_parse_u64("fuzz", "--n", a, &u64)) {
    if (g_strict) OKV_FUZZ_CHECK(all_digits(a));
    /* A digits-only string has the value it spells. */
    if (all_digits(a) && strlen(a) < 20) {
      uint64_t v = 0;
      for (const char *p = a; *p; ++p) v = v * 10 + (uint64_t)(*p - '0');
      OKV_FUZZ_CHECK(v == u64);
    }
  }
  static const uint32_t ranges[][2] = {{1, 1u << 24}, {1, OKV_TOPK_MAX}, {1, 1024}, {0, UINT32_MAX}, {7, 7}};
  for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; ++r) {
    uint32_t u32 = 0xdeadbeefu;
    if (okv_cli_parse_u32("fuzz", "--n", a, ranges[r][0], ranges[r][1], &u32)) {
      OKV_FUZZ_CHECK(u32 >= ranges[r][0] && u32 <= ranges[r][1]);
      uint64_t v = 0;
      OKV_FUZZ_CHECK(okv_cli_parse_u64("fuzz", "--n", a, &v) && v == u32);
    } else {
      OKV_FUZZ_CHECK(u32 == 0xdeadbeefu); /* untouched on error */
    }
  }
  double d = 0.0;
  if (okv_cli_parse_double("fuzz", "--x", a, &d)) {
    OKV_FUZZ_CHECK(isfinite(d));
    if (g_strict)
      OKV_FUZZ_CHECK(a[0] != ' ' && a[0] != '\t' && a[0] != '\n' && a[0] != '\v' && a[0] != '\f' && a[0] != '\r');
  }
  double fr = -1.0;
  if (okv_cli_parse_fetch_ratio("fuzz", a, &fr)) /* a ratio in (0, 1], or auto[:MAX] as -MAX */
    OKV_FUZZ_CHECK((fr > 0.0 && fr <= 1.0) || (strncmp(a, "auto", 4) == 0 && fr >= -1.0 && fr < 0.0));
  okv_mode_t mode = OKV_MODE_COUNT;
  if (okv_cli_parse_mode("fuzz", a, &mode)) {
    OKV_FUZZ_CHECK((unsigned)mode < OKV_MODE_COUNT);
    OKV_FUZZ_CHECK(!strcmp(okv_cli_mode_name(mode), a));
  }
  if (okv_cli_parse_device("fuzz", a)) OKV_FUZZ_CHECK(!strcmp(a, "cpu") || !strcmp(a, "cuda") || !strcmp(a, "hip"));
  okv_drafter_t dr = OKV_DRAFTER_COUNT;
  okv_status_code_t c = okv_fuzz_status_quoting(okv_drafter_parse(a, &dr), a);
  if (c == OKV_STATUS_OK) {
    OKV_FUZZ_CHECK((unsigned)dr < OKV_DRAFTER_COUNT);
    OKV_FUZZ_CHECK(!strcmp(okv_drafter_name(dr), a));
  } else {
    OKV_FUZZ_CHECK(c == OKV_STATUS_INVALID_ARGUMENT);
  }
}

static void check_opt_value(int argc, char **argv) {
  static const char *const names[] = {"--steps", "--model", "--m", "--fetch-ratio", "-"};
  for (size_t k = 0; k < sizeof names / sizeof names[0]; ++k) {
    size_t nl = strlen(names[k]);
    for (int i = 0; i < argc; ++i) {
      int at = i;
      const char *v = NULL;
      int r = okv_cli_opt_value("fuzz", argc, argv, &i, names[k], &v);
      OKV_FUZZ_CHECK(r >= -1 && r <= 1);
      OKV_FUZZ_CHECK(i < argc);
      if (r == 1) {
        OKV_FUZZ_CHECK(v != NULL);
        OKV_FUZZ_CHECK(strncmp(argv[at], names[k], nl) == 0);
        if (i == at) {
          OKV_FUZZ_CHECK(argv[at][nl] == '=' && v == argv[at] + nl + 1);
        } else {
          OKV_FUZZ_CHECK(i == at + 1 && argv[at][nl] == '\0' && v == argv[i]);
        }
      } else {
        OKV_FUZZ_CHECK(i == at);
        if (r == -1) OKV_FUZZ_CHECK(at == argc - 1 && !strcmp(argv[at], names[k]));
      }
    }
  }
}

/* Arguments that would make a command read a file the fuzzer names (or
 * create results/): the model, tokenizer and text stay on the forced
 * nonexistent paths. */
static bool names_an_input(const char *a) {
  static const char *const opts[] = {"--model", "--tokenizer", "--text", "--token-file"};
  if (!strcmp(a, "--sweep")) return true;
  for (size_t k = 0; k < sizeof opts / sizeof opts[0]; ++k) {
    size_t n = strlen(opts[k]);
    if (!strncmp(a, opts[k], n) && (a[n] == '\0' || a[n] == '=')) return true;
  }
  return false;
}

int okv_fuzz_cli_options(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  init_once();
  int target = data[0] % 4;
  char *args[MAX_ARGS + 2];
  int argc = 0;
  args[argc++] = target == 2 ? "eval" : "generate";
  size_t off = 1;
  while (off < size && argc <= MAX_ARGS) {
    const uint8_t *end = memchr(data + off, 0, size - off);
    size_t len = end ? (size_t)(end - (data + off)) : size - off;
    char *a = malloc(len + 1);
    OKV_FUZZ_CHECK(a != NULL);
    memcpy(a, data + off, len);
    a[len] = '\0';
    args[argc++] = a;
    off += len + 1;
  }
  args[argc] = NULL;

  if (target == 0) {
    for (int i = 1; i < argc; ++i) check_parsers(args[i]);
  } else if (target == 3) {
    check_opt_value(argc, args);
  } else {
    bool skip = false;
    for (int i = 1; i < argc; ++i) skip = skip || names_an_input(args[i]);
    if (!skip) {
      int rc = target == 1 ? okv_cli_generate(argc, args) : okv_cli_eval(argc, args);
      OKV_FUZZ_CHECK(rc == 0 || rc == 1 || rc == 2);
    }
  }
  for (int i = 1; i < argc; ++i) free(args[i]);
  return 0;
}

#ifndef OKV_FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return okv_fuzz_cli_options(data, size); }
#endif
