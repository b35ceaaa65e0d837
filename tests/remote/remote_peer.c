/* A small stand-alone server or client of the remote tier for the tests that
 * need two processes (server killed with kill -9, two network namespaces).
 *
 *   remote_peer serve  [--addr A] [--port P] [--token T] [--allow-get] [--requests N] [--bytes B]
 *       publishes requests 1..N of B bytes each (the pattern of peer_byte), admission blob "admission-<id>",
 *       prints "PORT <port>" on stdout, serves until stdin reaches EOF or a signal ends it.
 *   remote_peer client --addr A --port P [--token T] [--path auto|get|push] [--request R] [--gets G]
 *       opens request R, reads G random 8 KiB blocks in one batch, checks every byte and the admission blob,
 *       prints "OK <bytes> <path>" and exits 0; otherwise prints the error and exits 1.
 * The byte pattern (remote_peer.h) is shared with the tests that read from a child server. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "oasiskv/remote.h"
#include "tests/remote/remote_peer.h"

static const char *opt(int argc, char **argv, const char *name, const char *def) {
  for (int i = 2; i + 1 < argc; ++i)
    if (!strcmp(argv[i], name)) return argv[i + 1];
  return def;
}

static int flag(int argc, char **argv, const char *name) {
  for (int i = 2; i < argc; ++i)
    if (!strcmp(argv[i], name)) return 1;
  return 0;
}

static int fail(const char *what, okv_status_t s) {
  fprintf(stderr, "remote_peer: %s: %s: %s\n", what, okv_status_code_name(okv_status_code(s)), okv_status_message(s));
  okv_status_free(s);
  return 1;
}

static void log_line(void *user, okv_remote_log_level_t level, const char *message) {
  (void)user;
  fprintf(stderr, "remote_peer server [%s] %s\n", level == OKV_REMOTE_LOG_WARN ? "warn" : "info", message);
}

static int serve(int argc, char **argv) {
  okv_remote_server_config_t cfg;
  okv_remote_server_config_init(&cfg);
  cfg.listen_addr = opt(argc, argv, "--addr", "127.0.0.1");
  cfg.port = (uint16_t)atoi(opt(argc, argv, "--port", "0"));
  cfg.token = opt(argc, argv, "--token", NULL);
  cfg.allow_get = flag(argc, argv, "--allow-get");
  if (flag(argc, argv, "--verbose")) cfg.log_fn = log_line;
  uint32_t n_req = (uint32_t)atoi(opt(argc, argv, "--requests", "2"));
  uint64_t bytes = strtoull(opt(argc, argv, "--bytes", "4194304"), NULL, 10);
  okv_remote_server_t *server = NULL;
  okv_status_t s = okv_remote_server_create(&cfg, NULL, &server);
  if (s) return fail("server", s);
  uint8_t *kv = malloc(bytes);
  if (!kv) return 1;
  for (uint32_t r = 1; r <= n_req; ++r) {
    okv_peer_fill(r, 0, kv, bytes);
    char adm[64];
    int an = snprintf(adm, sizeof adm, "admission-%u", r);
    s = okv_remote_server_publish(server, r, kv, bytes, adm, (uint64_t)an);
    if (s) return fail("publish", s);
  }
  free(kv);
  printf("PORT %u\n", (unsigned)okv_remote_server_port(server));
  fflush(stdout);
  char buf[64];
  while (read(0, buf, sizeof buf) > 0) {
  }
  okv_remote_server_destroy(server);
  return 0;
}

static int client(int argc, char **argv) {
  const char *addr = opt(argc, argv, "--addr", "127.0.0.1");
  uint16_t port = (uint16_t)atoi(opt(argc, argv, "--port", "0"));
  uint64_t req = strtoull(opt(argc, argv, "--request", "1"), NULL, 10);
  uint32_t n = (uint32_t)atoi(opt(argc, argv, "--gets", "256"));
  okv_remote_client_config_t cfg;
  okv_remote_client_config_init(&cfg);
  okv_status_t s = okv_remote_path_parse(opt(argc, argv, "--path", "auto"), &cfg.path);
  if (s) return fail("--path", s);
  okv_remote_client_t *c = NULL;
  s = okv_remote_client_connect(addr, port, opt(argc, argv, "--token", NULL), &cfg, NULL, &c);
  if (s) return fail("connect", s);
  uint64_t kv_bytes = 0, adm_bytes = 0;
  void *adm = NULL;
  s = okv_remote_client_open(c, req, &kv_bytes, &adm, &adm_bytes);
  if (s) return fail("open", s);
  char want[64];
  int wn = snprintf(want, sizeof want, "admission-%llu", (unsigned long long)req);
  if (adm_bytes != (uint64_t)wn || memcmp(adm, want, (size_t)wn) != 0) {
    fprintf(stderr, "remote_peer: admission blob differs\n");
    return 1;
  }
  free(adm);
  uint64_t n_blocks = kv_bytes / OKV_PEER_BLOCK_BYTES;
  uint8_t *dst = malloc((size_t)n * OKV_PEER_BLOCK_BYTES);
  okv_remote_get_t *gets = calloc(n, sizeof *gets);
  if (!dst || !gets || n_blocks == 0) return 1;
  uint64_t rng = 0x9E3779B97F4A7C15ull ^ req;
  for (uint32_t i = 0; i < n; ++i) {
    gets[i].remote_offset = (okv_peer_rng(&rng) % n_blocks) * OKV_PEER_BLOCK_BYTES;
    gets[i].bytes = OKV_PEER_BLOCK_BYTES;
    gets[i].local_ptr = dst + (size_t)i * OKV_PEER_BLOCK_BYTES;
  }
  okv_remote_batch_t *b = NULL;
  s = okv_remote_client_get_batch(c, req, n, gets, &b);
  if (s) return fail("get_batch", s);
  bool done = false;
  s = okv_remote_batch_wait(b, 20.0, &done);
  if (s) return fail("wait", s);
  if (!done) {
    fprintf(stderr, "remote_peer: batch not done within 20 s\n");
    return 1;
  }
  okv_remote_batch_release(b);
  for (uint32_t i = 0; i < n; ++i) {
    if (!okv_peer_check(req, gets[i].remote_offset, gets[i].local_ptr, gets[i].bytes)) {
      fprintf(stderr, "remote_peer: get %u (offset %llu) differs\n", i, (unsigned long long)gets[i].remote_offset);
      return 1;
    }
  }
  okv_remote_path_t path = OKV_REMOTE_PATH_AUTO;
  s = okv_remote_client_request_path(c, req, &path);
  if (s) return fail("request_path", s);
  s = okv_remote_client_close_request(c, req);
  if (s) return fail("close_request", s);
  okv_remote_client_destroy(c);
  printf("OK %llu %s\n", (unsigned long long)n * OKV_PEER_BLOCK_BYTES, okv_remote_path_name(path));
  free(dst);
  free(gets);
  return 0;
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc >= 2 && !strcmp(argv[1], "serve")) return serve(argc, argv);
  if (argc >= 2 && !strcmp(argv[1], "client")) return client(argc, argv);
  fprintf(stderr, "usage: remote_peer serve|client [options] (see the file's comment)\n");
  return 2;
}
