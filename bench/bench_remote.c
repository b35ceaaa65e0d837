/* `oasiskv bench remote`: batched reads of KV blocks from a remote-tier
 * server (include/oasiskv/remote.h) on loopback, against ucx_perftest on the
 * same transport, in one run.
 *
 * A block is 16 tokens of one KV head at head_dim 128 in bf16, K and V:
 * 16 * 128 * 2 * 2 = 8 KiB. An in-process server publishes one request of
 * --region-mib MiB (random bytes); an in-process client reads batches of
 * 1, 16, 64, 256, 1024 blocks (each batch: all gets posted, then waited for),
 * each for --seconds, with two access patterns:
 *   random: blocks at random offsets of the region into distinct local buffers (what decode does);
 *   hot:    every get reads the same block into the same local buffer (ucx_perftest's pattern: the
 *           data stays in cache, so this is the like-for-like comparison).
 * ucx_perftest (a child server and client on 127.0.0.1) then measures ucp_get
 * (-O 64 outstanding), ucp_put_bw and ucp_am_bw at 8 KiB on the same
 * transport; ratio = ours / best of the three (MB/s as ucx_perftest prints
 * them: 2^20 bytes per second). Target: >= 0.8 at batches >= 64.
 *
 * --transport tcp sets UCX_TLS=tcp for both; --transport shm sets
 * UCX_TLS=shm,tcp for ours (UCX 1.13's client-server connection needs a tcp
 * interface on the address; reads then go over shared memory) and UCX_TLS=shm
 * for ucx_perftest, which bootstraps over its own socket. --path defaults per
 * transport to the measured choice (docs/remote.md): push on tcp, get on shm.
 * Note: ucx_perftest's server binds its bootstrap socket on every interface
 * for the seconds its test runs.
 *
 * Admission ratio (prefill/decode disaggregation): for contexts of 16K and
 * 32K tokens of one KV head (head_dim 128, bf16 KV, 4 query heads; random
 * keys), the admission for K = 128 is built (tools/model/admission.h: bf16
 * block summaries + the top-K blocks and the active block), published and
 * opened over the same connection; ratio = full KV bytes / admitted bytes
 * (summaries + initial working set; the ratio does not depend on the number
 * of layers and heads). Target >= 6.5x. */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "oasiskv/remote.h"
#include "cli.h"
#include "model/admission.h"

extern char **environ;

#define BLOCK_BYTES 8192u /* 16 tokens x head_dim 128 x bf16 x (K + V) */
#define MAX_POINTS  16

typedef struct opts_t {
  const char *transport;
  okv_remote_path_t path;
  bool path_set;
  uint32_t region_mib;
  uint32_t batches[MAX_POINTS];
  uint32_t n_batches;
  double seconds;
  uint32_t chunk_kib, inflight_mib; /* PUSH tuning (server config); 0 = the defaults */
  bool perftest;
  bool json;
} opts_t;

typedef struct point_t {
  uint32_t batch;
  double memcpy_mibps; /* the random pattern as plain memcpy from a local copy: the memory's own ceiling */
  double mibps[2];     /* random, hot */
  double us_per_batch[2];
  uint64_t n_batches[2];
} point_t;

#define ADM_K 128u
typedef struct adm_point_t {
  uint32_t tokens;
  uint64_t full_kv_bytes, admitted_bytes, summary_bytes, initial_bytes, blob_bytes, received_bytes;
  double ratio, ratio_f32; /* full / admitted; with f32 summaries on the wire (OKVADM01) */
} adm_point_t;

/* Builds, publishes (request id) and opens the admission of `tokens` tokens; fills *out. */
static okv_status_t measure_admission(okv_remote_server_t *server, okv_remote_client_t *client, uint64_t id,
                                      uint32_t tokens, adm_point_t *out) {
  const uint32_t hd = 128, nq = 4;
  okv_kv_shape_t sh = {1, nq, 1, hd, OKV_DTYPE_BF16};
  size_t n = (size_t)tokens * hd;
  float *k = malloc(n * sizeof *k), *v = malloc(n * sizeof *v), *q = malloc((size_t)nq * hd * sizeof *q);
  okv_kv_blocks_t kv;
  memset(&kv, 0, sizeof kv);
  okv_admission_t a;
  memset(&a, 0, sizeof a);
  void *blob = NULL, *got = NULL;
  okv_status_t s = OKV_OK;
  if (!k || !v || !q) s = okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "admission of %u tokens", tokens);
  uint64_t rng = 0x5EEDull + tokens;
  for (size_t i = 0; !s && i < n; ++i) {
    k[i] = (float)((int64_t)(okv_cli_rng_next(&rng) % 2001) - 1000) / 500.0f;
    v[i] = (float)((int64_t)(okv_cli_rng_next(&rng) % 2001) - 1000) / 500.0f;
  }
  for (size_t i = 0; !s && i < (size_t)nq * hd; ++i)
    q[i] = (float)((int64_t)(okv_cli_rng_next(&rng) % 2001) - 1000) / 1000.0f;
  if (!s) s = okv_kv_blocks_make(&sh, tokens, k, v, NULL, &kv);
  if (!s) s = okv_admission_build(&kv, q, ADM_K, NULL, &a);
  uint64_t nb = 0;
  if (!s) {
    nb = okv_admission_pack_size(&a);
    blob = malloc(nb);
    s = blob ? okv_admission_pack(&a, blob, nb) : okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "admission blob");
  }
  if (!s) s = okv_remote_server_publish(server, id, kv.data, a.full_kv_bytes, blob, nb);
  uint64_t kv_bytes = 0, got_bytes = 0;
  if (!s) s = okv_remote_client_open(client, id, &kv_bytes, &got, &got_bytes);
  if (!s) {
    if (got_bytes != nb || memcmp(got, blob, nb) != 0)
      s = okv_status_make(OKV_STATUS_INTERNAL, "the admission received differs from the one published");
    OKV_IGNORE_ERROR(okv_remote_client_close_request(client, id));
  }
  if (!s) {
    out->tokens = tokens;
    out->full_kv_bytes = a.full_kv_bytes;
    out->admitted_bytes = a.admitted_bytes;
    out->summary_bytes = a.summary_bytes;
    out->initial_bytes = a.initial_bytes;
    out->blob_bytes = nb;
    out->received_bytes = got_bytes;
    out->ratio = (double)a.full_kv_bytes / (double)a.admitted_bytes;
    out->ratio_f32 = (double)a.full_kv_bytes / (double)(2 * a.summary_bytes + a.initial_bytes);
  }
  free(got);
  free(blob);
  okv_admission_free(&a);
  okv_kv_blocks_free(&kv);
  free(k);
  free(v);
  free(q);
  return s;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: oasiskv bench remote [--transport tcp|shm] [--path auto|get|push] [--region-mib N]\n"
          "                            [--batches N,N,...] [--seconds S] [--chunk-kib N] [--inflight-mib N]\n"
          "                            [--no-perftest] [--json]\n"
          "  Batched 8 KiB block reads (16 tokens, head_dim 128, bf16 K+V) from an in-process server on\n"
          "  127.0.0.1, against ucx_perftest's best of ucp_get / ucp_put_bw / ucp_am_bw at 8 KiB on the same\n"
          "  transport. Defaults: tcp, path push on tcp and get on shm, a 64 MiB region, batches\n"
          "  1,16,64,256,1024, 0.5 s per point and access pattern. --chunk-kib / --inflight-mib tune the\n"
          "  push path (server config chunk_bytes, max_inflight_bytes; defaults 256 KiB, 16 MiB).\n"
          "  Then the admission ratio (full KV / admitted bytes) at 16K and 32K contexts, K = 128, bf16 KV.\n");
}

static bool parse_u32(const char *s, uint32_t *out) {
  char *end;
  if (*s < '0' || *s > '9') return false;
  unsigned long v = strtoul(s, &end, 10);
  if (*end != '\0' || v > UINT32_MAX) return false;
  *out = (uint32_t)v;
  return true;
}

static int parse_args(int argc, char **argv, opts_t *o) {
  memset(o, 0, sizeof *o);
  o->transport = "tcp";
  o->region_mib = 64;
  o->seconds = 0.5;
  o->perftest = true;
  static const uint32_t def[] = {1, 16, 64, 256, 1024};
  memcpy(o->batches, def, sizeof def);
  o->n_batches = 5;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--json")) {
      o->json = true;
      continue;
    }
    if (!strcmp(a, "--no-perftest")) {
      o->perftest = false;
      continue;
    }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 1;
    }
    bool valued = !strcmp(a, "--transport") || !strcmp(a, "--path") || !strcmp(a, "--region-mib") ||
                  !strcmp(a, "--batches") || !strcmp(a, "--seconds") || !strcmp(a, "--chunk-kib") ||
                  !strcmp(a, "--inflight-mib");
    if (!valued) {
      fprintf(stderr, "oasiskv bench remote: unknown option %s\n", a);
      return 2;
    }
    if (!v) {
      fprintf(stderr, "oasiskv bench remote: %s needs a value\n", a);
      return 2;
    }
    ++i;
    bool ok = true;
    if (!strcmp(a, "--transport")) {
      ok = !strcmp(v, "tcp") || !strcmp(v, "shm");
      o->transport = v;
    } else if (!strcmp(a, "--path")) {
      okv_status_t s = okv_remote_path_parse(v, &o->path);
      ok = s == OKV_OK;
      okv_status_free(s);
      o->path_set = true;
    } else if (!strcmp(a, "--chunk-kib")) {
      ok = parse_u32(v, &o->chunk_kib) && o->chunk_kib >= 1 && o->chunk_kib <= 1048576;
    } else if (!strcmp(a, "--inflight-mib")) {
      ok = parse_u32(v, &o->inflight_mib) && o->inflight_mib >= 1 && o->inflight_mib <= 65536;
    } else if (!strcmp(a, "--region-mib")) {
      ok = parse_u32(v, &o->region_mib) && o->region_mib >= 1 && o->region_mib <= 16384;
    } else if (!strcmp(a, "--seconds")) {
      char *end;
      o->seconds = strtod(v, &end);
      ok = *end == '\0' && isfinite(o->seconds) && o->seconds > 0 && o->seconds <= 60;
    } else {
      o->n_batches = 0;
      char buf[256];
      snprintf(buf, sizeof buf, "%s", v);
      ok = !okv_cli_list_has_empty(v);
      for (char *save = NULL, *t = strtok_r(buf, ",", &save); ok && t; t = strtok_r(NULL, ",", &save)) {
        ok = o->n_batches < MAX_POINTS && parse_u32(t, &o->batches[o->n_batches]) && o->batches[o->n_batches] >= 1 &&
             o->batches[o->n_batches] <= 65536;
        o->n_batches++;
      }
      ok = ok && o->n_batches > 0;
    }
    if (!ok) {
      fprintf(stderr, "oasiskv bench remote: bad value '%s' for %s\n", v, a);
      return 2;
    }
  }
  if (!o->path_set) o->path = !strcmp(o->transport, "shm") ? OKV_REMOTE_PATH_GET : OKV_REMOTE_PATH_PUSH;
  if ((uint64_t)o->region_mib * 1024 * 1024 < BLOCK_BYTES) o->region_mib = 1;
  return 0;
}

/* ---- Our reads ---- */

static int fail_status(const char *what, okv_status_t s) {
  fprintf(stderr, "oasiskv bench remote: %s: %s\n", what, okv_status_message(s));
  okv_status_free(s);
  return 1;
}

/* Runs batches of `batch` gets for `seconds` (at least 3 batches); hot = same block, same buffer. */
static int measure(okv_remote_client_t *c, uint64_t n_blocks, uint32_t batch, bool hot, double seconds, uint8_t *dst,
                   okv_remote_get_t *gets, uint64_t *rng, point_t *pt, int k) {
  double t0 = 0;
  uint64_t done = 0;
  for (int iter = -1;; ++iter) { /* iteration -1 warms up */
    if (iter == 0) t0 = okv_cli_now_s();
    for (uint32_t i = 0; i < batch; ++i) {
      gets[i].remote_offset = hot ? 0 : (okv_cli_rng_next(rng) % n_blocks) * BLOCK_BYTES;
      gets[i].bytes = BLOCK_BYTES;
      gets[i].local_ptr = hot ? dst : dst + (size_t)i * BLOCK_BYTES;
    }
    okv_remote_batch_t *b = NULL;
    okv_status_t s = okv_remote_client_get_batch(c, 1, batch, gets, &b);
    if (s) return fail_status("posting a batch", s);
    bool fin = false;
    s = okv_remote_batch_wait(b, 30.0, &fin);
    okv_remote_batch_release(b);
    if (s) return fail_status("waiting for a batch", s);
    if (!fin) {
      fprintf(stderr, "oasiskv bench remote: a batch of %u gets did not finish within 30 s\n", batch);
      return 1;
    }
    if (iter >= 0) ++done;
    double el = okv_cli_now_s() - t0;
    if (iter >= 2 && el >= seconds) {
      pt->mibps[k] = (double)done * batch * BLOCK_BYTES / el / (1024.0 * 1024.0);
      pt->us_per_batch[k] = el / (double)done * 1e6;
      pt->n_batches[k] = done;
      return 0;
    }
  }
}

/* The random pattern as local memcpy (no UCX): what this machine's memory gives for it. */
static double measure_memcpy(const uint8_t *kv, uint64_t n_blocks, uint32_t batch, double seconds, uint8_t *dst,
                             uint64_t *rng) {
  double t0 = okv_cli_now_s(), el = 0;
  uint64_t done = 0;
  do {
    for (uint32_t i = 0; i < batch; ++i)
      memcpy(dst + (size_t)i * BLOCK_BYTES, kv + (okv_cli_rng_next(rng) % n_blocks) * BLOCK_BYTES, BLOCK_BYTES);
    done += batch;
    el = okv_cli_now_s() - t0;
  } while (el < seconds);
  return (double)done * BLOCK_BYTES / el / (1024.0 * 1024.0);
}

/* ---- ucx_perftest ---- */

static uint16_t free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  uint16_t port = 0;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

/* Waits for pid up to deadline (monotonic), then kills it. Returns its exit status or -1. */
static int reap(pid_t pid, double deadline) {
  int st = 0;
  for (;;) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (r < 0) return -1;
    if (okv_cli_now_s() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    usleep(10000);
  }
}

/* Spawns argv with stdout to *out_fd (when not NULL, else /dev/null) and stderr to /dev/null. */
static pid_t spawn(char *const argv[], int *out_fd) {
  int p[2] = {-1, -1};
  if (out_fd && pipe(p) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (out_fd) {
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_addclose(&fa, p[0]);
    posix_spawn_file_actions_addclose(&fa, p[1]);
  } else {
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  }
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  if (posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  if (out_fd) {
    close(p[1]);
    if (pid < 0)
      close(p[0]);
    else
      *out_fd = p[0];
  }
  return pid;
}

/* One ucx_perftest run: `test` at 8 KiB, n iterations (extra args appended). Returns MB/s (overall, as it
 * prints), or a negative value when it could not run. */
static double perftest_once(const char *test, uint32_t n, const char *extra) {
  uint16_t port = free_port();
  if (!port) return -1;
  char portstr[16], nstr[16], wstr[16];
  snprintf(portstr, sizeof portstr, "%u", (unsigned)port);
  snprintf(nstr, sizeof nstr, "%u", n);
  snprintf(wstr, sizeof wstr, "%u", n / 10 + 1);
  char *srv_argv[] = {"ucx_perftest", "-p", portstr, NULL};
  pid_t srv = spawn(srv_argv, NULL);
  if (srv < 0) return -1;
  double val = -1;
  for (int attempt = 0; attempt < 50 && val < 0; ++attempt) {
    usleep(attempt == 0 ? 150000 : 100000); /* the server's bootstrap socket comes up */
    char *cli_argv[16] = {"ucx_perftest", "127.0.0.1", "-p", portstr, "-t", (char *)test, "-s",
                          "8192",         "-n",        nstr, "-w",    wstr, "-v",         NULL};
    if (extra) {
      cli_argv[13] = "-O";
      cli_argv[14] = (char *)extra;
      cli_argv[15] = NULL;
    }
    int fd = -1;
    pid_t cli = spawn(cli_argv, &fd);
    if (cli < 0) break;
    char out[16384];
    size_t len = 0;
    double deadline = okv_cli_now_s() + 20.0;
    for (;;) {
      struct pollfd pfd = {.fd = fd, .events = POLLIN};
      int left_ms = (int)((deadline - okv_cli_now_s()) * 1e3);
      if (left_ms <= 0 || poll(&pfd, 1, left_ms) <= 0) break;
      ssize_t r = read(fd, out + len, sizeof out - 1 - len);
      if (r <= 0) break;
      len += (size_t)r;
      if (len == sizeof out - 1) len = 0; /* keep the tail only */
    }
    out[len] = 0;
    close(fd);
    int rc = reap(cli, okv_cli_now_s() + 2.0);
    if (getenv("OKV_BENCH_REMOTE_DEBUG"))
      fprintf(stderr, "ucx_perftest %s attempt %d: exit %d, output tail: %s\n", test, attempt, rc,
              len > 300 ? out + len - 300 : out);
    if (rc != 0) continue; /* most often: the server was not listening yet */
    /* The last line without "[thread": iterations, lat50, lat avg, lat overall, bw avg, bw overall, ... */
    char *line = NULL;
    for (char *save = NULL, *t = strtok_r(out, "\n", &save); t; t = strtok_r(NULL, "\n", &save)) {
      while (*t == ' ') ++t;
      if (t[0] >= '0' && t[0] <= '9') line = t;
    }
    double f[8];
    if (line &&
        sscanf(line, "%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf", &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7]) == 8)
      val = f[5];
    break;
  }
  reap(srv, okv_cli_now_s() + 3.0);
  return val;
}

/* Calibrates the iteration count to about `seconds`, then measures. */
static double perftest(const char *test, const char *extra, double seconds) {
  uint32_t n = 2000;
  double bw = perftest_once(test, n, extra);
  if (bw <= 0) return bw;
  double want = bw * 1024.0 * 1024.0 * seconds / BLOCK_BYTES;
  if (want > 4e6) want = 4e6;
  if (want < 500) want = 500;
  return perftest_once(test, (uint32_t)want, extra);
}

/* ---- Main ---- */

int okv_cli_bench_remote(int argc, char **argv) {
  opts_t o;
  int rc = parse_args(argc, argv, &o);
  if (rc) return rc == 1 ? 0 : rc;
  bool shm = !strcmp(o.transport, "shm");
  setenv("UCX_TLS", shm ? "shm,tcp" : "tcp", 1);

  uint64_t region = (uint64_t)o.region_mib << 20, n_blocks = region / BLOCK_BYTES;
  uint8_t *kv = malloc(region);
  uint32_t most = 0;
  for (uint32_t i = 0; i < o.n_batches; ++i) most = o.batches[i] > most ? o.batches[i] : most;
  uint8_t *dst = malloc((size_t)most * BLOCK_BYTES);
  okv_remote_get_t *gets = calloc(most, sizeof *gets);
  if (!kv || !dst || !gets) {
    fprintf(stderr, "oasiskv bench remote: out of host memory for a %u MiB region\n", o.region_mib);
    return 1;
  }
  uint64_t rng = 0x243F6A8885A308D3ull;
  for (uint64_t i = 0; i + 8 <= region; i += 8) {
    uint64_t x = okv_cli_rng_next(&rng);
    memcpy(kv + i, &x, 8);
  }

  okv_remote_server_config_t scfg;
  okv_remote_server_config_init(&scfg);
  scfg.allow_get = o.path != OKV_REMOTE_PATH_PUSH;
  if (o.chunk_kib) scfg.chunk_bytes = (uint64_t)o.chunk_kib << 10;
  if (o.inflight_mib) scfg.max_inflight_bytes = (uint64_t)o.inflight_mib << 20;
  okv_remote_server_t *server = NULL;
  okv_status_t s = okv_remote_server_create(&scfg, NULL, &server);
  if (s) return fail_status("starting the server", s);
  uint8_t adm[4096];
  memset(adm, 0x5a, sizeof adm);
  s = okv_remote_server_publish(server, 1, kv, region, adm, sizeof adm);
  if (s) {
    okv_remote_server_destroy(server);
    return fail_status("publishing", s);
  }
  okv_remote_client_config_t ccfg;
  okv_remote_client_config_init(&ccfg);
  ccfg.path = o.path;
  okv_remote_client_t *client = NULL;
  s = okv_remote_client_connect("127.0.0.1", okv_remote_server_port(server), NULL, &ccfg, NULL, &client);
  if (s) {
    okv_remote_server_destroy(server);
    return fail_status("connecting", s);
  }
  uint64_t kv_bytes = 0, adm_bytes = 0;
  void *adm_copy = NULL;
  s = okv_remote_client_open(client, 1, &kv_bytes, &adm_copy, &adm_bytes);
  okv_remote_path_t used = OKV_REMOTE_PATH_AUTO;
  if (!s) s = okv_remote_client_request_path(client, 1, &used);
  int exit_code = 0;
  point_t pts[MAX_POINTS];
  memset(pts, 0, sizeof pts);
  adm_point_t adm_pts[2];
  memset(adm_pts, 0, sizeof adm_pts);
  adm_point_t *adm_out = adm_pts;
  bool verified = false;
  if (s) {
    exit_code = fail_status("opening the request", s);
  } else {
    verified = adm_bytes == sizeof adm && memcmp(adm_copy, adm, sizeof adm) == 0;
    free(adm_copy);
    /* One checked batch first: every byte read equals the region's. */
    uint32_t n = most;
    for (uint32_t i = 0; i < n; ++i) {
      gets[i].remote_offset = (okv_cli_rng_next(&rng) % n_blocks) * BLOCK_BYTES;
      gets[i].bytes = BLOCK_BYTES;
      gets[i].local_ptr = dst + (size_t)i * BLOCK_BYTES;
    }
    okv_remote_batch_t *b = NULL;
    bool fin = false;
    s = okv_remote_client_get_batch(client, 1, n, gets, &b);
    if (!s) s = okv_remote_batch_wait(b, 30.0, &fin);
    okv_remote_batch_release(b);
    if (s) {
      exit_code = fail_status("the checked batch", s);
    } else {
      for (uint32_t i = 0; i < n && fin; ++i)
        verified = verified && !memcmp(dst + (size_t)i * BLOCK_BYTES, kv + gets[i].remote_offset, BLOCK_BYTES);
      if (!fin || !verified) {
        fprintf(stderr, "oasiskv bench remote: the bytes read differ from the server's\n");
        exit_code = 1;
      }
    }
    for (int i = 0; i < 2 && !exit_code; ++i) {
      okv_status_t as = measure_admission(server, client, 100 + (uint64_t)i, i == 0 ? 16384u : 32768u, &adm_out[i]);
      if (as) exit_code = fail_status("the admission ratio", as);
    }
    for (uint32_t p = 0; p < o.n_batches && !exit_code; ++p) {
      pts[p].batch = o.batches[p];
      pts[p].memcpy_mibps = measure_memcpy(kv, n_blocks, o.batches[p], o.seconds / 2, dst, &rng);
      for (int k = 0; k < 2 && !exit_code; ++k)
        exit_code = measure(client, n_blocks, o.batches[p], k == 1, o.seconds, dst, gets, &rng, &pts[p], k);
    }
  }
  okv_remote_server_stats_t sst;
  memset(&sst, 0, sizeof sst);
  OKV_IGNORE_ERROR(okv_remote_server_stats(server, &sst)); /* informational */
  okv_remote_client_destroy(client);
  okv_remote_server_destroy(server);
  free(kv);
  free(dst);
  free(gets);
  if (exit_code) return exit_code;

  /* ucx_perftest on the same transport (its own bootstrap socket: shared memory needs no tcp). */
  double pt_get = -1, pt_put = -1, pt_am = -1, best = -1;
  if (o.perftest) {
    setenv("UCX_TLS", shm ? "shm" : "tcp", 1);
    pt_get = perftest("ucp_get", "64", o.seconds);
    pt_put = perftest("ucp_put_bw", NULL, o.seconds);
    pt_am = perftest("ucp_am_bw", NULL, o.seconds);
    best = fmax(pt_get, fmax(pt_put, pt_am));
  }

  if (o.json) {
    json_object *j = json_object_new_object();
    json_object_object_add(j, "transport", json_object_new_string(o.transport));
    json_object_object_add(j, "ucx_tls_ours", json_object_new_string(shm ? "shm,tcp" : "tcp"));
    json_object_object_add(j, "path", json_object_new_string(okv_remote_path_name(used)));
    json_object_object_add(j, "block_bytes", json_object_new_int64(BLOCK_BYTES));
    json_object_object_add(j, "region_bytes", json_object_new_int64((int64_t)region));
    json_object_object_add(j, "verified", json_object_new_boolean(verified));
    json_object_object_add(j, "server_push_bytes", json_object_new_int64((int64_t)sst.push_bytes));
    json_object *pj = json_object_new_object();
    json_object_object_add(pj, "ucp_get_O64", json_object_new_double(pt_get));
    json_object_object_add(pj, "ucp_put_bw", json_object_new_double(pt_put));
    json_object_object_add(pj, "ucp_am_bw", json_object_new_double(pt_am));
    json_object_object_add(pj, "best", json_object_new_double(best));
    json_object_object_add(pj, "units", json_object_new_string("MB/s as ucx_perftest prints (2^20 B/s); -1: not run"));
    json_object_object_add(j, "ucx_perftest", pj);
    json_object *rows = json_object_new_array();
    for (uint32_t p = 0; p < o.n_batches; ++p) {
      json_object *r = json_object_new_object();
      json_object_object_add(r, "batch_blocks", json_object_new_int64(pts[p].batch));
      json_object_object_add(r, "local_memcpy_random_mib_per_s", json_object_new_double(pts[p].memcpy_mibps));
      static const char *const names[2] = {"random", "hot"};
      for (int k = 0; k < 2; ++k) {
        json_object *a = json_object_new_object();
        json_object_object_add(a, "mib_per_s", json_object_new_double(pts[p].mibps[k]));
        json_object_object_add(a, "us_per_batch", json_object_new_double(pts[p].us_per_batch[k]));
        json_object_object_add(a, "batches", json_object_new_int64((int64_t)pts[p].n_batches[k]));
        json_object_object_add(a, "ratio", json_object_new_double(best > 0 ? pts[p].mibps[k] / best : -1));
        json_object_object_add(r, names[k], a);
      }
      json_object_array_add(rows, r);
    }
    json_object_object_add(j, "points", rows);
    json_object *ar = json_object_new_array();
    for (int i = 0; i < 2; ++i) {
      json_object *r = json_object_new_object();
      json_object_object_add(r, "context_tokens", json_object_new_int64(adm_pts[i].tokens));
      json_object_object_add(r, "budget_blocks", json_object_new_int64(ADM_K));
      json_object_object_add(r, "full_kv_bytes", json_object_new_int64((int64_t)adm_pts[i].full_kv_bytes));
      json_object_object_add(r, "admitted_bytes", json_object_new_int64((int64_t)adm_pts[i].admitted_bytes));
      json_object_object_add(r, "summary_bytes", json_object_new_int64((int64_t)adm_pts[i].summary_bytes));
      json_object_object_add(r, "initial_bytes", json_object_new_int64((int64_t)adm_pts[i].initial_bytes));
      json_object_object_add(r, "blob_bytes_received", json_object_new_int64((int64_t)adm_pts[i].received_bytes));
      json_object_object_add(r, "admission_ratio", json_object_new_double(adm_pts[i].ratio));
      json_object_object_add(r, "admission_ratio_f32_summaries", json_object_new_double(adm_pts[i].ratio_f32));
      json_object_array_add(ar, r);
    }
    json_object_object_add(j, "admission", ar);
    printf("%s\n", json_object_to_json_string_ext(j, JSON_C_TO_STRING_PRETTY));
    json_object_put(j);
    return 0;
  }
  printf("remote tier: %s, path %s, %u MiB region, 8 KiB blocks (16 tokens x head_dim 128 x bf16 K+V), data %s\n",
         o.transport, okv_remote_path_name(used), o.region_mib, verified ? "verified" : "NOT verified");
  if (best > 0)
    printf("ucx_perftest 8 KiB (MB/s): ucp_get -O 64 %.1f, ucp_put_bw %.1f, ucp_am_bw %.1f -> best %.1f\n", pt_get,
           pt_put, pt_am, best);
  else if (o.perftest)
    printf("ucx_perftest: could not run (is ucx-utils installed?); no ratio\n");
  printf("ratio = ours / ucx_perftest best; memcpy = the random pattern copied locally (this machine's memory)\n");
  printf("%8s  %12s %10s %7s %12s  %12s %10s %7s\n", "batch", "random MB/s", "us/batch", "ratio", "memcpy MB/s",
         "hot MB/s", "us/batch", "ratio");
  for (uint32_t p = 0; p < o.n_batches; ++p) {
    printf("%8u  %12.1f %10.1f %7.3f %12.1f  %12.1f %10.1f %7.3f\n", pts[p].batch, pts[p].mibps[0],
           pts[p].us_per_batch[0], best > 0 ? pts[p].mibps[0] / best : NAN, pts[p].memcpy_mibps, pts[p].mibps[1],
           pts[p].us_per_batch[1], best > 0 ? pts[p].mibps[1] / best : NAN);
  }
  printf("admission at K = %u (bf16 KV, head_dim 128; per KV head; target >= 6.5x):\n", ADM_K);
  printf("%8s %12s %12s %12s %12s %12s %8s %14s\n", "context", "full_kv_B", "admitted_B", "summary_B", "initial_B",
         "received_B", "ratio", "ratio_f32_sum");
  for (int i = 0; i < 2; ++i)
    printf("%8u %12llu %12llu %12llu %12llu %12llu %7.2fx %13.2fx\n", adm_pts[i].tokens,
           (unsigned long long)adm_pts[i].full_kv_bytes, (unsigned long long)adm_pts[i].admitted_bytes,
           (unsigned long long)adm_pts[i].summary_bytes, (unsigned long long)adm_pts[i].initial_bytes,
           (unsigned long long)adm_pts[i].received_bytes, adm_pts[i].ratio, adm_pts[i].ratio_f32);
  return 0;
}
