/* Helpers shared by `oasiskv eval` and `oasiskv generate`: strict option
 * parsing, the model/tokenizer/device set-up, atomic output files. CLI code:
 * these print errors to stderr. */
#ifndef OASISKV_TOOLS_CLI_MODEL_H
#define OASISKV_TOOLS_CLI_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "oasiskv/oasiskv.h"
#include "model/model.h"

/* Matches "--name VALUE" or "--name=VALUE" at argv[*i]; advances *i past the
 * value and sets *out_value. Returns 1 on a match, 0 if argv[*i] is another
 * option, -1 (after printing "<cmd>: option --name needs a value") when the
 * value is missing. */
int okv_cli_opt_value(const char *cmd, int argc, char **argv, int *i, const char *name, const char **out_value);

/* Options of a command's argv loop, whose locals are argc, argv, the index i,
 * the value v and the match r (see okv_cli_opt_value), in a file that defines
 * CMD as the command's name ("oasiskv eval"): "--name VALUE" is
 * parsed by `parsed` (an expression on v that stores the value and is false,
 * after printing, on a bad one), then the loop continues; a missing or bad
 * value makes the command return 2. OKV_CLI_OPT_STRING stores v as is. */
#define OKV_CLI_OPT_PARSED(name, parsed)                               \
  if ((r = okv_cli_opt_value(CMD, argc, argv, &i, (name), &v)) != 0) { \
    if (r < 0 || !(parsed)) return 2;                                  \
    continue;                                                          \
  }
#define OKV_CLI_OPT_STRING(name, var) OKV_CLI_OPT_PARSED(name, ((var) = v, true))
/* "--name" without a value sets the bool `var`, then the loop continues. */
#define OKV_CLI_OPT_FLAG(name, var) \
  if (!strcmp(argv[i], (name))) {   \
    (var) = true;                   \
    continue;                       \
  }
/* --help or -h: `show` (printing the usage), then the command returns 0. */
#define OKV_CLI_OPT_HELP(show)                                \
  if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { \
    show;                                                     \
    return 0;                                                 \
  }

/* Strict number parsers: the whole string must be a number in [lo, hi].
 * Print "<cmd>: <flag> ..." to stderr and return false on error. */
bool okv_cli_parse_u32(const char *cmd, const char *flag, const char *s, uint32_t lo, uint32_t hi, uint32_t *out);
bool okv_cli_parse_u64(const char *cmd, const char *flag, const char *s, uint64_t *out);
/* A finite double; the error says whether the text is not a number, is out
 * of range (strtod's ERANGE: "overflows" or "underflows") or is inf/nan. */
bool okv_cli_parse_double(const char *cmd, const char *flag, const char *s, double *out);
/* --fetch-ratio: a number in (0, 1], or `auto` / `auto:MAX` (the runtime's
 * self-tuning cap, fetch_ratio_auto, with maximum ratio MAX, default
 * OKV_CLI_AUTO_FETCH_RATIO_MAX), which is returned as -MAX. */
#define OKV_CLI_AUTO_FETCH_RATIO_MAX 0.05
bool okv_cli_parse_fetch_ratio(const char *cmd, const char *s, double *out);
/* A parsed --fetch-ratio as the user would write it, for messages and tables: "0.05", or "auto:0.05" for the
 * self-tuning cap with its maximum (never the internal -MAX). */
void okv_cli_format_fetch_ratio(double fetch_ratio, char *buf, size_t n);
/* --scoring NAME (okv_scoring_parse's names); prints "CMD: ..." and returns false on a bad name. */
bool okv_cli_parse_scoring(const char *cmd, const char *s, okv_scoring_t *out);
/* Sets config->fetch_ratio and fetch_ratio_auto from a parsed --fetch-ratio value. */
void okv_cli_apply_fetch_ratio(double fetch_ratio, okv_runtime_config_t *out);
/* --mode for one mode; "all" is handled by the caller. */
bool okv_cli_parse_mode(const char *cmd, const char *s, okv_mode_t *out);
/* --device: cpu, cuda or hip (whether compiled in is checked at creation). */
bool okv_cli_parse_device(const char *cmd, const char *s);

/* The runtime config of a model (okv_runtime_config_init's defaults
 * otherwise): its shape, f32 K/V in blocks of OKV_BLOCK_TOKENS, `mode` with a
 * working set of `budget` blocks (the whole context for dense, which keeps
 * everything resident) and `fetch_ratio`, room for max_seqs sequences of the
 * model's whole context. */
void okv_cli_runtime_config(const okv_model_config_t *mc, okv_mode_t mode, uint32_t budget, double fetch_ratio,
                            uint32_t max_seqs, okv_runtime_config_t *out);

/* Name of a mode (no dependency on the runtime's table). */
const char *okv_cli_mode_name(okv_mode_t mode);

/* Loaded inputs of a command. */
typedef struct okv_cli_model_t {
  okv_model_t *model;
  okv_tokenizer_t *tokenizer;
  okv_hal_device_t *device;
  char model_path[4096];
  char tokenizer_path[4096];
} okv_cli_model_t;

/* Resolves the paths (flag > env > ../shared > source tree), loads the model
 * (llama2.c checkpoint or GGUF) and its tokenizer and creates the device; prints one error line and returns
 * false on failure (nothing left allocated). */
bool okv_cli_model_open(const char *cmd, const char *model_flag, const char *tokenizer_flag, const char *device_name,
                        okv_cli_model_t *out);
/* The same with a context length (0 = the model's; see
 * okv_model_load_options_t). A GGUF model (first bytes "GGUF") takes its
 * tokenizer from its own metadata unless tokenizer_flag is given; then
 * tokenizer_path is the model's path. */
bool okv_cli_model_open_ex(const char *cmd, const char *model_flag, const char *tokenizer_flag, const char *device_name,
                           uint32_t context_length, okv_cli_model_t *out);
void okv_cli_model_close(okv_cli_model_t *m);

/* Prints "<cmd>: <message>" for a status and frees it. */
void okv_cli_print_status(const char *cmd, okv_status_t s);

/* An output written to a temporary file next to `path` and renamed onto it at
 * commit, so a failed run leaves no partial file. path "-" writes to stdout. */
typedef struct okv_cli_output_t {
  char path[4096];
  char tmp_path[4200];
  FILE *f;
  bool is_stdout;
} okv_cli_output_t;

bool okv_cli_output_open(const char *cmd, const char *path, okv_cli_output_t *out);
/* Creates the temporary name only (for files another program writes). */
bool okv_cli_output_reserve(const char *cmd, const char *path, okv_cli_output_t *out);
/* Closes and renames; false (and the temp file removed) on error. */
bool okv_cli_output_commit(const char *cmd, okv_cli_output_t *o);
/* Closes and removes the temporary file. */
void okv_cli_output_abort(okv_cli_output_t *o);

#endif
