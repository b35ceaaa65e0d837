/* Subcommands of the oasiskv CLI. Each returns the process exit code. */
#ifndef OASISKV_TOOLS_CLI_H
#define OASISKV_TOOLS_CLI_H

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int okv_cli_info(int argc, char **argv); /* tools/cli_info.c */
/* `oasiskv info --model FILE [--json]`: a model file's description (tools/cli_info_model.c). */
int okv_cli_info_model(const char *path, bool as_json);
int okv_cli_bench_kernels(int argc, char **argv); /* bench/bench_kernels.c */
int okv_cli_bench_runtime(int argc, char **argv); /* bench/bench_runtime.c */
int okv_cli_bench_remote(int argc, char **argv);  /* bench/bench_remote.c */
int okv_cli_bench_serve(int argc, char **argv);   /* bench/bench_serve.c */
int okv_cli_eval(int argc, char **argv);          /* tools/cli_eval.c */
int okv_cli_generate(int argc, char **argv);      /* tools/cli_generate.c */
int okv_cli_tokenize(int argc, char **argv);      /* tools/cli_tokenize.c */
int okv_cli_serve(int argc, char **argv);         /* tools/cli_serve.c */

/* Helpers the subcommands share. */

/* Seconds on the monotonic clock. */
static inline double okv_cli_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* xorshift64* step of the state *s (which must not be 0). */
static inline uint64_t okv_cli_rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

/* Whether the comma-separated list s has an empty entry: s empty, a leading or trailing comma, or two in a row
 * ("0.05,", "a,,b"). List parsers reject these (strtok would skip the empty entries silently). */
static inline bool okv_cli_list_has_empty(const char *s) {
  if (s == NULL || *s == '\0' || *s == ',') return true;
  for (; *s; s++)
    if (*s == ',' && (s[1] == ',' || s[1] == '\0')) return true;
  return false;
}

/* How reading a decimal number went (okv_cli_decimal_u64, okv_cli_decimal_f64); each command words its own
 * error line from it. */
typedef enum okv_cli_num_e {
  OKV_CLI_NUM_OK = 0,
  OKV_CLI_NUM_BAD,        /* not a decimal number of the kind asked for */
  OKV_CLI_NUM_OVERFLOW,   /* too large for the type */
  OKV_CLI_NUM_UNDERFLOW,  /* f64: nonzero but below the smallest normal magnitude (not taken as 0) */
  OKV_CLI_NUM_NOT_FINITE, /* f64: "inf", "nan" and their spellings */
} okv_cli_num_t;

/* s as a non-negative decimal integer: digits only, no sign, no blanks (strtoull would take " -1" and wrap
 * it), no hexadecimal. *out is written only on OKV_CLI_NUM_OK. */
static inline okv_cli_num_t okv_cli_decimal_u64(const char *s, uint64_t *out) {
  if (s == NULL || *s < '0' || *s > '9') return OKV_CLI_NUM_BAD;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (*end != '\0') return OKV_CLI_NUM_BAD;
  if (errno == ERANGE) return OKV_CLI_NUM_OVERFLOW;
  *out = (uint64_t)v;
  return OKV_CLI_NUM_OK;
}

/* s as a finite decimal number: strtod's decimal forms only (no hexadecimal such as "0x10", no leading
 * blanks); "inf" and "nan" read as OKV_CLI_NUM_NOT_FINITE. *out is written only on OKV_CLI_NUM_OK. */
static inline okv_cli_num_t okv_cli_decimal_f64(const char *s, double *out) {
  if (s == NULL || *s == '\0' || s[strspn(s, "0123456789.eE+-infatyINFATY")] != '\0' || strpbrk(s, "xX") != NULL)
    return OKV_CLI_NUM_BAD;
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (*end != '\0') return OKV_CLI_NUM_BAD;
  if (errno == ERANGE) return fabs(v) > 1.0 ? OKV_CLI_NUM_OVERFLOW : OKV_CLI_NUM_UNDERFLOW;
  if (!isfinite(v)) return OKV_CLI_NUM_NOT_FINITE;
  *out = v;
  return OKV_CLI_NUM_OK;
}

/* A command-line value as an error line shows it: control characters escaped (\n, \t, \xNN), so that a bad
 * value never splits the one-line message, and cut to fit `n` bytes with "..." (n >= 8). Returns buf. */
static inline const char *okv_cli_shown(const char *s, char *buf, size_t n) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  for (; s != NULL && *s != '\0'; s++) {
    unsigned char c = (unsigned char)*s;
    char e[5] = {(char)c, 0, 0, 0, 0};
    if (c == '\n' || c == '\t' || c == '\r') {
      e[0] = '\\';
      e[1] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
    } else if (c < 0x20 || c == 0x7f) {
      e[0] = '\\';
      e[1] = 'x';
      e[2] = hex[c >> 4];
      e[3] = hex[c & 15];
    }
    size_t k = strlen(e);
    if (o + k + 4 > n) { /* room for "..." and the terminator */
      memcpy(buf + o, "...", 3);
      o += 3;
      break;
    }
    memcpy(buf + o, e, k);
    o += k;
  }
  buf[o] = '\0';
  return buf;
}

#endif
