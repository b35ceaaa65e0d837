/* CLI helpers of the remote tier (cli_remote.h). */
#include "cli_remote.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cli_model.h"

bool okv_cli_parse_hostport(const char *cmd, const char *flag, const char *s, bool allow_port0, char addr[64],
                            uint16_t *port) {
  const char *colon = s ? strrchr(s, ':') : NULL;
  if (!colon || colon == s || (size_t)(colon - s) >= 64) {
    fprintf(stderr, "%s: %s '%s': expected ADDR:PORT (numeric IPv4, e.g. 127.0.0.1:7000)\n", cmd, flag, s ? s : "");
    return false;
  }
  char a[64];
  memcpy(a, s, (size_t)(colon - s));
  a[colon - s] = '\0';
  struct in_addr in;
  if (inet_pton(AF_INET, a, &in) != 1) {
    fprintf(stderr, "%s: %s '%s': '%s' is not a numeric IPv4 address\n", cmd, flag, s, a);
    return false;
  }
  uint32_t p = 0;
  if (!okv_cli_parse_u32(cmd, flag, colon + 1, allow_port0 ? 0 : 1, 65535, &p)) return false;
  memcpy(addr, a, sizeof a);
  *port = (uint16_t)p;
  return true;
}

bool okv_cli_read_token(const char *cmd, const char *path, char token[257]) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "%s: --token-file '%s': %s\n", cmd, path, strerror(errno));
    return false;
  }
  char buf[300];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  int read_errno = ferror(f) ? errno : 0;
  fclose(f);
  if (read_errno) { /* e.g. a directory */
    fprintf(stderr, "%s: --token-file '%s': %s\n", cmd, path, strerror(read_errno));
    return false;
  }
  buf[n] = '\0';
  size_t len = strcspn(buf, "\r\n");
  if (len == 0 || len > 256) {
    fprintf(stderr, "%s: --token-file '%s': the token (its first line) must be 1..256 bytes, not %zu\n", cmd, path,
            len);
    return false;
  }
  for (size_t i = 0; i < len; ++i)
    if ((unsigned char)buf[i] < 0x21 || (unsigned char)buf[i] > 0x7e) {
      fprintf(stderr, "%s: --token-file '%s': the token must be printable ASCII without spaces\n", cmd, path);
      return false;
    }
  memcpy(token, buf, len);
  token[len] = '\0';
  return true;
}

static void kill_and_reap(pid_t pid) {
  kill(pid, SIGKILL);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
}

bool okv_cli_serve_start(const char *cmd, const char *model_path, const char *tokenizer_path, const char *device,
                         uint32_t context, double timeout_s, okv_cli_serve_child_t *out) {
  out->pid = 0;
  out->port = 0;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    fprintf(stderr, "%s: --disaggregated: pipe: %s\n", cmd, strerror(errno));
    return false;
  }
  char ctx[16];
  snprintf(ctx, sizeof ctx, "%u", context);
  const char *argv[16];
  int k = 0;
  argv[k++] = "oasiskv";
  argv[k++] = "serve";
  argv[k++] = "--listen";
  argv[k++] = "127.0.0.1:0";
  argv[k++] = "--model";
  argv[k++] = model_path;
  argv[k++] = "--tokenizer";
  argv[k++] = tokenizer_path;
  argv[k++] = "--device";
  argv[k++] = device;
  if (context) {
    argv[k++] = "--context";
    argv[k++] = ctx;
  }
  argv[k] = NULL;
  pid_t parent = getpid();
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "%s: --disaggregated: fork: %s\n", cmd, strerror(errno));
    close(fds[0]);
    close(fds[1]);
    return false;
  }
  if (pid == 0) { /* child: stdout is the pipe; it is killed when its parent dies, whatever it is doing */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(fds[1], 1);
    execv("/proc/self/exe", (char *const *)argv);
    fprintf(stderr, "%s: --disaggregated: cannot run oasiskv serve: %s\n", cmd, strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  /* Read the child's first line: "oasiskv serve: listening on 127.0.0.1:PORT". */
  char line[256];
  size_t n = 0;
  double deadline = okv_cli_now_s() + timeout_s;
  bool ok = false;
  while (n < sizeof line - 1) {
    double left = deadline - okv_cli_now_s();
    if (left <= 0) break;
    struct pollfd pfd = {fds[0], POLLIN, 0};
    int pr = poll(&pfd, 1, (int)(left * 1000) + 1);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) break;
    ssize_t r = read(fds[0], line + n, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (line[n] == '\n') {
      ok = true;
      break;
    }
    ++n;
  }
  line[n] = '\0';
  close(fds[0]);
  const char *p = strstr(line, "listening on 127.0.0.1:");
  unsigned port = 0;
  if (ok && p && sscanf(p + strlen("listening on 127.0.0.1:"), "%u", &port) == 1 && port > 0 && port < 65536) {
    out->pid = pid;
    out->port = (uint16_t)port;
    return true;
  }
  int status = 0;
  pid_t w = waitpid(pid, &status, WNOHANG);
  if (w == pid)
    fprintf(stderr, "%s: --disaggregated: oasiskv serve exited (status %d) before listening\n", cmd,
            WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  else {
    fprintf(stderr, "%s: --disaggregated: oasiskv serve did not report its port within %.0f s\n", cmd, timeout_s);
    kill_and_reap(pid);
  }
  return false;
}

bool okv_cli_serve_stop(const char *cmd, okv_cli_serve_child_t *child) {
  if (!child || child->pid == 0) return true;
  pid_t pid = child->pid;
  child->pid = 0;
  int status = 0;
  pid_t w = waitpid(pid, &status, WNOHANG);
  if (w == pid) {
    fprintf(stderr, "%s: the KV server (oasiskv serve, pid %d) had exited (%s %d)\n", cmd, (int)pid,
            WIFEXITED(status) ? "status" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    return false;
  }
  kill(pid, SIGTERM);
  double deadline = okv_cli_now_s() + 10.0;
  for (;;) {
    w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (okv_cli_now_s() > deadline) {
      fprintf(stderr, "%s: the KV server (pid %d) did not stop within 10 s of SIGTERM; killed\n", cmd, (int)pid);
      kill_and_reap(pid);
      return false;
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "%s: the KV server (pid %d) exited uncleanly (%s %d)\n", cmd, (int)pid,
            WIFEXITED(status) ? "status" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    return false;
  }
  return true;
}

bool okv_cli_remote_connect(const char *cmd, const char *addr, uint16_t port, const char *token,
                            okv_remote_client_t **out) {
  okv_remote_client_config_t cfg;
  okv_remote_client_config_init(&cfg);
  okv_status_t s = okv_remote_client_connect(addr, port, token, &cfg, NULL, out);
  if (s) {
    okv_cli_print_status(cmd, s);
    return false;
  }
  return true;
}

bool okv_cli_remote_options(const char *cmd, const char *remote_s, const char *token_path, bool disaggregated,
                            okv_cli_remote_t *out) {
  memset(out, 0, sizeof *out);
  if (remote_s && disaggregated) {
    fprintf(stderr, "%s: --remote and --disaggregated exclude each other\n", cmd);
    return false;
  }
  if (token_path && !remote_s) {
    fprintf(stderr, "%s: --token-file goes with --remote\n", cmd);
    return false;
  }
  if (remote_s && !okv_cli_parse_hostport(cmd, "--remote", remote_s, false, out->addr, &out->port)) return false;
  if (token_path && !okv_cli_read_token(cmd, token_path, out->token)) return false;
  out->has_token = token_path != NULL;
  out->disaggregated = disaggregated;
  return true;
}

bool okv_cli_remote_wanted(const okv_cli_remote_t *r) { return r->addr[0] != '\0' || r->disaggregated; }

bool okv_cli_remote_open(const char *cmd, const char *model_path, const char *tokenizer_path, const char *device,
                         uint32_t context, okv_cli_remote_t *r) {
  if (r->disaggregated) { /* our own KV server on loopback, same model, context and device */
    if (!okv_cli_serve_start(cmd, model_path, tokenizer_path, device, context, OKV_CLI_REMOTE_TIMEOUT_S, &r->child))
      return false;
    snprintf(r->addr, sizeof r->addr, "127.0.0.1");
    r->port = r->child.port;
  }
  return okv_cli_remote_connect(cmd, r->addr, r->port, r->has_token ? r->token : NULL, &r->client);
}

bool okv_cli_remote_close(const char *cmd, okv_cli_remote_t *r) {
  okv_remote_client_destroy(r->client);
  r->client = NULL;
  return okv_cli_serve_stop(cmd, &r->child);
}

void okv_cli_remote_describe(const okv_cli_remote_t *r, char *buf, size_t n) {
  const char *tls = getenv("UCX_TLS");
  snprintf(buf, n, "KV server %s:%u%s (UCX_TLS=%s)", r->addr, (unsigned)r->port,
           r->disaggregated ? " (started by --disaggregated)" : "", tls ? tls : "default");
}
