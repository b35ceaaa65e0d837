/* CLI helpers of the remote tier (oasiskv serve; eval and generate --remote / --disaggregated): ADDR:PORT and
 * token files, a child `oasiskv serve` on loopback, and the decode node's connection to its KV server. CLI
 * code: these print one error line to stderr. */
#ifndef OASISKV_TOOLS_CLI_REMOTE_H
#define OASISKV_TOOLS_CLI_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "oasiskv/remote.h"

/* Parses "ADDR:PORT" (numeric IPv4, port 0..65535; port 0 only when allow_port0) into addr (64 bytes). */
bool okv_cli_parse_hostport(const char *cmd, const char *flag, const char *s, bool allow_port0, char addr[64],
                            uint16_t *port);
/* Reads an access token file: its content up to the first newline, 1..256 printable bytes, into token
 * (257 bytes, NUL-terminated). */
bool okv_cli_read_token(const char *cmd, const char *path, char token[257]);

/* A child `oasiskv serve` on 127.0.0.1 with an ephemeral port (eval --disaggregated). */
typedef struct okv_cli_serve_child_t {
  pid_t pid; /* 0: none */
  uint16_t port;
} okv_cli_serve_child_t;

/* Starts this executable as `serve --listen 127.0.0.1:0 --model M --tokenizer T --device D [--context N]`
 * (the child dies with this process: PR_SET_PDEATHSIG), and waits up to timeout_s for it to print the port
 * it listens on. On failure nothing is left running. */
bool okv_cli_serve_start(const char *cmd, const char *model_path, const char *tokenizer_path, const char *device,
                         uint32_t context, double timeout_s, okv_cli_serve_child_t *out);
/* Stops the child (SIGTERM, then SIGKILL after 10 s) and reaps it. Returns false (after printing) when it
 * had already died or did not exit cleanly. A child with pid 0 is accepted. */
bool okv_cli_serve_stop(const char *cmd, okv_cli_serve_child_t *child);

/* Connects to a KV server (UNAVAILABLE etc. printed as one line). token NULL: none. */
bool okv_cli_remote_connect(const char *cmd, const char *addr, uint16_t port, const char *token,
                            okv_remote_client_t **out);

/* How long the decode node waits for its KV server: the child's port, a prefill job's answer, each remote
 * read (seconds). */
#define OKV_CLI_REMOTE_TIMEOUT_S 300.0

/* The decode node's KV server: --remote ADDR:PORT [--token-file F], or --disaggregated (a child serve). */
typedef struct okv_cli_remote_t {
  char addr[64]; /* numeric IPv4; "" when neither option was given */
  uint16_t port;
  bool has_token;
  char token[257];
  bool disaggregated;
  okv_cli_serve_child_t child; /* --disaggregated: the running child (pid 0: none) */
  okv_remote_client_t *client; /* owned once okv_cli_remote_open succeeded */
} okv_cli_remote_t;

/* Checks --remote (remote_s, may be NULL), --token-file (token_path, may be NULL) and --disaggregated
 * together: they exclude each other but for the token file, which goes with --remote only; parses ADDR:PORT
 * and reads the token. *out is zeroed first; with neither option, out->addr stays "" and
 * out->disaggregated false. Returns false after one line on stderr. */
bool okv_cli_remote_options(const char *cmd, const char *remote_s, const char *token_path, bool disaggregated,
                            okv_cli_remote_t *out);
/* Whether okv_cli_remote_options found --remote or --disaggregated. */
bool okv_cli_remote_wanted(const okv_cli_remote_t *r);
/* With --disaggregated, starts the child serve of this model (model_path, tokenizer_path, device, context: 0
 * for the model's own) and points r->addr / r->port at it; then connects r->client (token if given). Waits
 * at most OKV_CLI_REMOTE_TIMEOUT_S for the child. Returns false after one line; whatever it started is left
 * in *r for okv_cli_remote_close. */
bool okv_cli_remote_open(const char *cmd, const char *model_path, const char *tokenizer_path, const char *device,
                         uint32_t context, okv_cli_remote_t *r);
/* Destroys the client, then stops the child (okv_cli_serve_stop). Returns false (after printing) when the
 * child had died or did not exit cleanly. A zeroed or never-opened *r is accepted. */
bool okv_cli_remote_close(const char *cmd, okv_cli_remote_t *r);
/* Writes "KV server ADDR:PORT[ (started by --disaggregated)] (UCX_TLS=...)" into buf (n bytes). */
void okv_cli_remote_describe(const okv_cli_remote_t *r, char *buf, size_t n);

#endif
