/* CLI helpers of the remote tier (oasiskv serve, eval --remote / --disaggregated): ADDR:PORT and token
 * files, and a child `oasiskv serve` on loopback. CLI code: these print one error line to stderr. */
#ifndef OASISKV_TOOLS_CLI_REMOTE_H
#define OASISKV_TOOLS_CLI_REMOTE_H

#include <stdbool.h>
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

#endif
