/* The remote tier in one process (server thread + client), on loopback, over
 * the transport UCX_TLS names (meson registers the suite for tcp and for
 * shared memory): round trips on both read paths checked byte for byte,
 * request lifetime (close, disconnect, unpublish), client-side argument
 * errors, a wrong token, a request of another client, and raw hostile
 * messages (truncated, malformed, oversized, out of order, out of range,
 * rendezvous, with a header, silent) — each refused with its reason logged,
 * that connection closed, and a good client still served afterwards. Jobs
 * (SUBMIT): a request published for a job is reserved for its client, a
 * failed job is an error that keeps the connection, a job's request is freed
 * when its client disconnects before opening it or before the answer.
 * Allocations of the library go through CMocka's allocator (leaks fail). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "remote/remote_msg.h"
#include "tests/common/test_common.h"
#include "tests/remote/remote_peer.h"
#include "tests/remote/remote_test_util.h"

#define REQ_A   11u
#define REQ_B   12u
#define A_BYTES ((1u << 20) + 123u) /* not a multiple of a block: the last byte is readable, one past it is not */
#define B_BYTES (64u << 10)

static okv_allocator_t alloc;

/* AUTO reads one-sided only where UCX maps the server's region here (shared memory), else through the server. */
static okv_remote_path_t auto_path(void) {
  const char *tls = getenv("UCX_TLS");
  return tls && strstr(tls, "shm") ? OKV_REMOTE_PATH_GET : OKV_REMOTE_PATH_PUSH;
}

typedef struct fixture_t {
  okv_remote_server_t *server;
  uint16_t port;
} fixture_t;

static const char adm_a[] = "admission of A: summaries + initial working set";

/* A server (optionally with a token, gets offered) publishing REQ_A and REQ_B with the peer pattern. */
static fixture_t start(const char *token, double hello_timeout_s, double close_grace_s) {
  fixture_t f = {0};
  okv_rt_log_clear();
  okv_remote_server_config_t cfg;
  okv_remote_server_config_init(&cfg);
  cfg.token = token;
  cfg.allow_get = getenv("OKV_T_NOGET") == NULL;
  cfg.log_fn = okv_rt_log;
  if (hello_timeout_s > 0) cfg.hello_timeout_s = hello_timeout_s;
  if (close_grace_s > 0) cfg.close_grace_s = close_grace_s; /* raw clients never hang up themselves */
  OKV_ASSERT_OK(okv_remote_server_create(&cfg, &alloc, &f.server));
  f.port = okv_remote_server_port(f.server);
  assert_true(f.port != 0);
  uint8_t *kv = malloc(A_BYTES);
  assert_non_null(kv);
  okv_peer_fill(REQ_A, 0, kv, A_BYTES);
  OKV_ASSERT_OK(okv_remote_server_publish(f.server, REQ_A, kv, A_BYTES, adm_a, sizeof adm_a));
  okv_peer_fill(REQ_B, 0, kv, B_BYTES);
  OKV_ASSERT_OK(okv_remote_server_publish(f.server, REQ_B, kv, B_BYTES, NULL, 0));
  free(kv);
  return f;
}

static okv_remote_client_t *connect_path(const fixture_t *f, const char *token, okv_remote_path_t path) {
  okv_remote_client_config_t cfg;
  okv_remote_client_config_init(&cfg);
  cfg.path = path;
  okv_remote_client_t *c = NULL;
  OKV_ASSERT_OK(okv_remote_client_connect("127.0.0.1", f->port, token, &cfg, &alloc, &c));
  return c;
}

static void open_ok(okv_remote_client_t *c, uint64_t id, uint64_t want_bytes) {
  uint64_t kv = 0, adm_n = 0;
  void *adm = NULL;
  OKV_ASSERT_OK(okv_remote_client_open(c, id, &kv, &adm, &adm_n));
  assert_true(kv == want_bytes);
  if (id == REQ_A) {
    assert_true(adm_n == sizeof adm_a);
    assert_memory_equal(adm, adm_a, sizeof adm_a);
    okv_free(&alloc, adm);
  } else {
    assert_true(adm_n == 0);
    assert_null(adm);
  }
}

static uint32_t server_requests(okv_remote_server_t *s) {
  okv_remote_server_stats_t st;
  OKV_ASSERT_OK(okv_remote_server_stats(s, &st));
  return st.n_requests;
}

/* Waits (up to 5 s) until the server holds `n` requests. */
static void wait_requests(okv_remote_server_t *s, uint32_t n) {
  double deadline = okv_rt_now() + 5.0;
  while (server_requests(s) != n && okv_rt_now() < deadline) usleep(2000);
  assert_int_equal(server_requests(s), n);
}

/* One batch of n random reads of request `id` (sizes 1..16 KiB, unaligned offsets, the region's last byte
 * included), waited for and checked byte for byte. */
static void read_check(okv_remote_client_t *c, uint64_t id, uint64_t kv_bytes, uint32_t n, uint64_t seed) {
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, seed);
  okv_remote_get_t *g = calloc(n, sizeof *g);
  uint8_t *dst = malloc((size_t)n * 16384);
  assert_true(g && dst);
  memset(dst, 0xEE, (size_t)n * 16384);
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t bytes = 1 + okv_test_rng_below(&rng, 16384);
    if (bytes > kv_bytes) bytes = kv_bytes;
    g[i].remote_offset = i == 0 ? kv_bytes - bytes : okv_test_rng_u64(&rng) % (kv_bytes - bytes + 1);
    g[i].bytes = bytes;
    g[i].local_ptr = dst + (size_t)i * 16384;
  }
  okv_remote_batch_t *b = NULL;
  OKV_ASSERT_OK(okv_remote_client_get_batch(c, id, n, g, &b));
  uint64_t total = 0;
  for (uint32_t i = 0; i < n; ++i) total += g[i].bytes;
  assert_true(okv_remote_batch_bytes(b) == total);
  bool done = false;
  OKV_ASSERT_OK(okv_remote_batch_wait(b, 10.0, &done));
  assert_true(done);
  okv_remote_batch_release(b);
  for (uint32_t i = 0; i < n; ++i) {
    if (!okv_peer_check(id, g[i].remote_offset, g[i].local_ptr, g[i].bytes)) {
      print_error("get %u of request %llu (offset %llu, %llu bytes) differs\n", i, (unsigned long long)id,
                  (unsigned long long)g[i].remote_offset, (unsigned long long)g[i].bytes);
      fail();
    }
    /* Nothing written past the get. */
    if (g[i].bytes < 16384) assert_int_equal(((uint8_t *)g[i].local_ptr)[g[i].bytes], 0xEE);
  }
  free(g);
  free(dst);
}

/* ---- Round trips ---- */

static void round_trip(okv_remote_path_t want_path) {
  fixture_t f = start(NULL, 0, 0);
  okv_remote_client_t *c = connect_path(&f, NULL, want_path);
  char peer[32];
  snprintf(peer, sizeof peer, "127.0.0.1:%u", (unsigned)f.port);
  assert_string_equal(okv_remote_client_peer(c), peer);
  open_ok(c, REQ_A, A_BYTES);
  open_ok(c, REQ_B, B_BYTES);
  okv_remote_path_t path = OKV_REMOTE_PATH_AUTO;
  OKV_ASSERT_OK(okv_remote_client_request_path(c, REQ_A, &path));
  assert_int_equal(path, want_path == OKV_REMOTE_PATH_AUTO ? auto_path() : want_path);
  read_check(c, REQ_A, A_BYTES, 1, 1);
  read_check(c, REQ_A, A_BYTES, 300, 2);
  read_check(c, REQ_B, B_BYTES, 64, 3);
  /* A batch larger than one READ message (4096 entries) on the push path, and three batches in flight at once. */
  read_check(c, REQ_B, B_BYTES, 5000, 4);
  {
    okv_remote_get_t g[3][50];
    static uint8_t dst[3][50][1000];
    okv_remote_batch_t *b[3];
    for (int k = 0; k < 3; ++k) {
      for (int i = 0; i < 50; ++i) {
        g[k][i].remote_offset = (uint64_t)(k * 50 + i) * 997;
        g[k][i].bytes = 1000;
        g[k][i].local_ptr = dst[k][i];
      }
      OKV_ASSERT_OK(okv_remote_client_get_batch(c, REQ_A, 50, g[k], &b[k]));
    }
    for (int k = 2; k >= 0; --k) {
      bool done = false;
      OKV_ASSERT_OK(okv_remote_batch_wait(b[k], 10.0, &done));
      assert_true(done);
      OKV_ASSERT_OK(okv_remote_batch_test(b[k], &done));
      assert_true(done);
      okv_remote_batch_release(b[k]);
      for (int i = 0; i < 50; ++i) assert_true(okv_peer_check(REQ_A, g[k][i].remote_offset, dst[k][i], 1000));
    }
  }
  /* Close: the server frees the request (its id cannot be opened again); the other stays readable. */
  okv_remote_server_stats_t st;
  OKV_ASSERT_OK(okv_remote_server_stats(f.server, &st));
  assert_int_equal(st.n_clients, 1);
  assert_int_equal(st.n_open, 2);
  OKV_ASSERT_OK(okv_remote_client_close_request(c, REQ_A));
  wait_requests(f.server, 1);
  uint64_t kv = 0, adm_n = 0;
  void *adm = NULL;
  OKV_ASSERT_CODE(okv_remote_client_open(c, REQ_A, &kv, &adm, &adm_n), OKV_STATUS_NOT_FOUND);
  OKV_ASSERT_CODE(okv_remote_client_close_request(c, REQ_A), OKV_STATUS_NOT_FOUND);
  read_check(c, REQ_B, B_BYTES, 16, 5);
  OKV_ASSERT_OK(okv_remote_server_stats(f.server, &st));
  assert_int_equal(st.n_refused, 0);
  if (path == OKV_REMOTE_PATH_PUSH)
    assert_true(st.push_bytes > 0);
  else
    assert_true(st.push_bytes == 0);
  assert_true(st.admission_bytes == sizeof adm_a);
  okv_remote_client_destroy(c);
  okv_remote_server_destroy(f.server);
}

static void test_round_trip_auto(void **state) {
  (void)state;
  round_trip(OKV_REMOTE_PATH_AUTO);
}
static void test_round_trip_push(void **state) {
  (void)state;
  round_trip(OKV_REMOTE_PATH_PUSH);
}
static void test_round_trip_get(void **state) {
  (void)state;
  round_trip(OKV_REMOTE_PATH_GET);
}

/* A server without allow_get: AUTO reads through the server, GET is refused at connect. */
static void test_no_get_offered(void **state) {
  (void)state;
  okv_remote_server_config_t cfg;
  okv_remote_server_config_init(&cfg);
  okv_remote_server_t *s = NULL;
  OKV_ASSERT_OK(okv_remote_server_create(&cfg, &alloc, &s));
  uint8_t kv[4096];
  okv_peer_fill(7, 0, kv, sizeof kv);
  OKV_ASSERT_OK(okv_remote_server_publish(s, 7, kv, sizeof kv, NULL, 0));
  okv_remote_client_t *c = NULL;
  okv_remote_client_config_t cc;
  okv_remote_client_config_init(&cc);
  cc.path = OKV_REMOTE_PATH_GET;
  OKV_ASSERT_CODE(okv_remote_client_connect("127.0.0.1", okv_remote_server_port(s), NULL, &cc, &alloc, &c),
                  OKV_STATUS_INVALID_ARGUMENT);
  assert_null(c);
  cc.path = OKV_REMOTE_PATH_AUTO;
  OKV_ASSERT_OK(okv_remote_client_connect("127.0.0.1", okv_remote_server_port(s), NULL, &cc, &alloc, &c));
  uint64_t n = 0, an = 0;
  void *adm = NULL;
  OKV_ASSERT_OK(okv_remote_client_open(c, 7, &n, &adm, &an));
  okv_remote_path_t p;
  OKV_ASSERT_OK(okv_remote_client_request_path(c, 7, &p));
  assert_int_equal(p, OKV_REMOTE_PATH_PUSH);
  read_check(c, 7, sizeof kv, 40, 9);
  okv_remote_client_destroy(c);
  okv_remote_server_destroy(s);
}

/* ---- Client-side errors (the connection stays usable) ---- */

static void test_client_errors(void **state) {
  (void)state;
  fixture_t f = start(NULL, 0, 0);
  okv_remote_client_t *c = connect_path(&f, NULL, OKV_REMOTE_PATH_PUSH);
  open_ok(c, REQ_A, A_BYTES);
  uint8_t buf[64];
  okv_remote_get_t g = {A_BYTES, 1, buf};
  okv_remote_batch_t *b = (okv_remote_batch_t *)&g; /* must be cleared on error */
  OKV_ASSERT_CODE(okv_remote_client_get_batch(c, REQ_A, 1, &g, &b), OKV_STATUS_INVALID_ARGUMENT);
  assert_null(b);
  g.remote_offset = A_BYTES - 10;
  g.bytes = 11; /* one byte past the region */
  okv_status_t s = okv_remote_client_get_batch(c, REQ_A, 1, &g, &b);
  assert_int_equal(okv_status_code(s), OKV_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(okv_status_message(s), "outside request 11's region"));
  okv_status_free(s);
  g.remote_offset = UINT64_MAX - 3; /* offset + bytes overflows */
  g.bytes = 8;
  OKV_ASSERT_CODE(okv_remote_client_get_batch(c, REQ_A, 1, &g, &b), OKV_STATUS_INVALID_ARGUMENT);
  g.remote_offset = 0;
  g.bytes = 0;
  OKV_ASSERT_CODE(okv_remote_client_get_batch(c, REQ_A, 1, &g, &b), OKV_STATUS_INVALID_ARGUMENT);
  g.bytes = 8;
  g.local_ptr = NULL;
  OKV_ASSERT_CODE(okv_remote_client_get_batch(c, REQ_A, 1, &g, &b), OKV_STATUS_INVALID_ARGUMENT);
  g.local_ptr = buf;
  OKV_ASSERT_CODE(okv_remote_client_get_batch(c, REQ_A, 0, &g, &b), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_remote_client_get_batch(c, REQ_B, 1, &g, &b), OKV_STATUS_NOT_FOUND); /* not opened */
  uint64_t kv = 0, an = 0;
  void *adm = NULL;
  OKV_ASSERT_CODE(okv_remote_client_open(c, 999, &kv, &adm, &an), OKV_STATUS_NOT_FOUND);          /* not published */
  OKV_ASSERT_CODE(okv_remote_client_open(c, REQ_A, &kv, &adm, &an), OKV_STATUS_INVALID_ARGUMENT); /* again */
  OKV_ASSERT_CODE(okv_remote_client_open(c, 0, &kv, &adm, &an), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_remote_client_close_request(c, REQ_B), OKV_STATUS_NOT_FOUND);
  OKV_ASSERT_OK(okv_remote_client_get_batch(c, REQ_A, 1, &g, &b));
  bool done = true;
  OKV_ASSERT_CODE(okv_remote_batch_wait(b, -1.0, &done), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_OK(okv_remote_batch_wait(b, 10.0, &done));
  assert_true(done);
  okv_remote_batch_release(b);
  assert_true(okv_peer_check(REQ_A, 0, buf, 8));
  /* Nothing above reached the server as a refusal: the connection is the same one. */
  read_check(c, REQ_A, A_BYTES, 32, 6);
  okv_remote_server_stats_t st;
  OKV_ASSERT_OK(okv_remote_server_stats(f.server, &st));
  assert_int_equal(st.n_refused, 0);
  assert_int_equal(st.n_clients, 1);
  okv_remote_client_destroy(c);
  okv_remote_server_destroy(f.server);
}

/* ---- Token and ownership ---- */

static void test_wrong_token(void **state) {
  (void)state;
  fixture_t f = start("correct-horse-battery", 0, 0);
  okv_remote_client_t *c = NULL;
  okv_status_t s = okv_remote_client_connect("127.0.0.1", f.port, "correct-horse-batterz", NULL, &alloc, &c);
  assert_int_equal(okv_status_code(s), OKV_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(okv_status_message(s), "wrong access token"));
  okv_status_free(s);
  assert_null(c);
  assert_true(okv_rt_log_wait("refused: wrong access token", 5.0));
  s = okv_remote_client_connect("127.0.0.1", f.port, NULL, NULL, &alloc, &c);
  assert_int_equal(okv_status_code(s), OKV_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(okv_status_message(s), "no access token"));
  okv_status_free(s);
  OKV_ASSERT_CODE(okv_remote_client_connect("127.0.0.1", f.port, "correct-horse-battery-staple", NULL, &alloc, &c),
                  OKV_STATUS_INVALID_ARGUMENT);
  /* The right token is served. */
  c = connect_path(&f, "correct-horse-battery", OKV_REMOTE_PATH_AUTO);
  open_ok(c, REQ_A, A_BYTES);
  read_check(c, REQ_A, A_BYTES, 20, 7);
  okv_remote_server_stats_t st;
  OKV_ASSERT_OK(okv_remote_server_stats(f.server, &st));
  assert_int_equal(st.n_refused, 3);
  okv_remote_client_destroy(c);
  okv_remote_server_destroy(f.server);
}

static void test_request_of_another_client(void **state) {
  (void)state;
  fixture_t f = start(NULL, 0, 0);
  okv_remote_client_t *a = connect_path(&f, NULL, OKV_REMOTE_PATH_AUTO);
  okv_remote_client_t *b = connect_path(&f, NULL, OKV_REMOTE_PATH_AUTO);
  open_ok(a, REQ_A, A_BYTES);
  uint64_t kv = 0, an = 0;
  void *adm = NULL;
  okv_status_t s = okv_remote_client_open(b, REQ_A, &kv, &adm, &an);
  assert_int_equal(okv_status_code(s), OKV_STATUS_UNAVAILABLE);
  assert_non_null(strstr(okv_status_message(s), "belongs to another client"));
  okv_status_free(s);
  assert_true(okv_rt_log_wait("OPEN of request 11, which belongs to another client; connection closed", 5.0));
  /* b's connection is closed: its next calls fail fast with UNAVAILABLE naming the peer. */
  double t0 = okv_rt_now();
  okv_status_t s2 = OKV_OK;
  while (okv_rt_now() - t0 < 5.0) {
    s2 = okv_remote_client_open(b, REQ_B, &kv, &adm, &an);
    if (okv_status_code(s2) == OKV_STATUS_UNAVAILABLE) break;
    if (s2 == OKV_OK) {
      okv_free(&alloc, adm);
      fail_msg("the refused client could still open a request");
    }
    okv_status_free(s2);
    s2 = OKV_OK;
    usleep(10000);
  }
  assert_int_equal(okv_status_code(s2), OKV_STATUS_UNAVAILABLE);
  char want[64];
  snprintf(want, sizeof want, "127.0.0.1:%u", (unsigned)f.port);
  assert_non_null(strstr(okv_status_message(s2), want));
  okv_status_free(s2);
  okv_remote_get_t g = {0, 8, &kv};
  okv_remote_batch_t *bt = NULL;
  OKV_ASSERT_CODE(okv_remote_client_get_batch(b, REQ_B, 1, &g, &bt), OKV_STATUS_UNAVAILABLE);
  okv_remote_client_destroy(b);
  /* a still reads its request. */
  read_check(a, REQ_A, A_BYTES, 50, 8);
  okv_remote_client_destroy(a);
  okv_remote_server_destroy(f.server);
}

/* ---- Jobs (SUBMIT) ---- */

/* The application side of jobs: submit_fn queues tickets; a thread answers them by payload:
 * "ok:N" publishes request N (its peer pattern, B_BYTES) and answers OK; "fail" answers INVALID_ARGUMENT;
 * "late:N" waits until `release` is set, then publishes N and answers (its client is gone by then). */
typedef struct jobs_t {
  pthread_mutex_t mu;
  uint64_t tickets[16];
  char payloads[16][32];
  uint32_t n, next;
  bool stop, release;
  okv_remote_server_t *server;
  okv_status_code_t late_code; /* what submit_done returned for the late job */
  bool late_done;
} jobs_t;

static void jobs_submit(void *user, uint64_t ticket, const char *client, const void *payload, uint32_t n) {
  jobs_t *j = user;
  assert_non_null(strstr(client, "client "));
  pthread_mutex_lock(&j->mu);
  if (j->n < 16) {
    j->tickets[j->n] = ticket;
    snprintf(j->payloads[j->n], sizeof j->payloads[0], "%.*s", (int)(n < 31 ? n : 31), (const char *)payload);
    j->n++;
  }
  pthread_mutex_unlock(&j->mu);
}

static void *jobs_thread(void *arg) {
  jobs_t *j = arg;
  uint8_t *kv = malloc(B_BYTES);
  for (;;) {
    pthread_mutex_lock(&j->mu);
    bool stop = j->stop, release = j->release;
    bool have = j->next < j->n && (strncmp(j->payloads[j->next], "late:", 5) != 0 || release);
    uint64_t ticket = have ? j->tickets[j->next] : 0;
    char payload[32];
    if (have) snprintf(payload, sizeof payload, "%s", j->payloads[j->next++]);
    pthread_mutex_unlock(&j->mu);
    if (stop) break;
    if (!have) {
      usleep(1000);
      continue;
    }
    if (!strcmp(payload, "fail")) {
      OKV_ASSERT_OK(okv_remote_server_submit_done(j->server, ticket, 0, OKV_STATUS_INVALID_ARGUMENT, "bad job"));
      continue;
    }
    uint64_t id = strtoull(strchr(payload, ':') + 1, NULL, 10);
    okv_peer_fill(id, 0, kv, B_BYTES); /* the peer pattern of request id */
    OKV_ASSERT_OK(okv_remote_server_publish(j->server, id, kv, B_BYTES, "adm", 3));
    okv_status_t st = okv_remote_server_submit_done(j->server, ticket, id, OKV_STATUS_OK, NULL);
    if (!strncmp(payload, "late:", 5)) {
      pthread_mutex_lock(&j->mu);
      j->late_code = okv_status_code(st);
      j->late_done = true;
      pthread_mutex_unlock(&j->mu);
      okv_status_free(st);
    } else {
      OKV_ASSERT_OK(st);
    }
  }
  free(kv);
  return NULL;
}

static void test_jobs(void **state) {
  (void)state;
  /* A server without jobs answers SUBMIT with NOT_FOUND and keeps the connection. */
  fixture_t f = start(NULL, 0, 0);
  okv_remote_client_t *c = connect_path(&f, NULL, OKV_REMOTE_PATH_AUTO);
  uint64_t id = 99;
  okv_status_t s = okv_remote_client_submit(c, "ok:5", 4, 10.0, &id);
  assert_int_equal(okv_status_code(s), OKV_STATUS_NOT_FOUND);
  assert_non_null(strstr(okv_status_message(s), "runs no jobs"));
  okv_status_free(s);
  assert_true(id == 0);
  open_ok(c, REQ_B, B_BYTES);
  OKV_ASSERT_CODE(okv_remote_client_submit(c, NULL, 4, 10.0, &id), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_remote_client_submit(c, "x", 0, 10.0, &id), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_remote_client_submit(c, "x", 1, 0.0, &id), OKV_STATUS_INVALID_ARGUMENT);
  okv_remote_client_destroy(c);
  okv_remote_server_destroy(f.server);

  jobs_t j;
  memset(&j, 0, sizeof j);
  pthread_mutex_init(&j.mu, NULL);
  okv_rt_log_clear();
  okv_remote_server_config_t cfg;
  okv_remote_server_config_init(&cfg);
  cfg.allow_get = getenv("OKV_T_NOGET") == NULL;
  cfg.log_fn = okv_rt_log;
  cfg.submit_fn = jobs_submit;
  cfg.submit_user = &j;
  OKV_ASSERT_OK(okv_remote_server_create(&cfg, &alloc, &j.server));
  f.server = j.server;
  f.port = okv_remote_server_port(j.server);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, jobs_thread, &j), 0);
  OKV_ASSERT_CODE(okv_remote_server_submit_done(j.server, 12345, 0, OKV_STATUS_INVALID_ARGUMENT, "x"),
                  OKV_STATUS_NOT_FOUND);

  /* A job's request is its client's: another client's OPEN of it is refused; the owner reads it. */
  okv_remote_client_t *a = connect_path(&f, NULL, OKV_REMOTE_PATH_AUTO);
  okv_remote_client_t *b = connect_path(&f, NULL, OKV_REMOTE_PATH_AUTO);
  OKV_ASSERT_OK(okv_remote_client_submit(a, "ok:21", 5, 10.0, &id));
  assert_true(id == 21);
  assert_int_equal(server_requests(j.server), 1);
  uint64_t kv = 0, an = 0;
  void *adm = NULL;
  s = okv_remote_client_open(b, 21, &kv, &adm, &an);
  assert_int_equal(okv_status_code(s), OKV_STATUS_UNAVAILABLE);
  assert_non_null(strstr(okv_status_message(s), "belongs to another client"));
  okv_status_free(s);
  okv_remote_client_destroy(b);
  OKV_ASSERT_OK(okv_remote_client_open(a, 21, &kv, &adm, &an));
  assert_true(kv == B_BYTES && an == 3);
  assert_memory_equal(adm, "adm", 3);
  okv_free(&alloc, adm);
  read_check(a, 21, B_BYTES, 40, 3);
  OKV_ASSERT_OK(okv_remote_client_close_request(a, 21));
  wait_requests(j.server, 0);

  /* A failed job: the server's code and message; the connection stays. */
  s = okv_remote_client_submit(a, "fail", 4, 10.0, &id);
  assert_int_equal(okv_status_code(s), OKV_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(okv_status_message(s), "bad job"));
  okv_status_free(s);
  OKV_ASSERT_OK(okv_remote_client_submit(a, "ok:22", 5, 10.0, &id));
  assert_true(id == 22);
  /* Its client disconnects before opening it: the request is freed. */
  assert_int_equal(server_requests(j.server), 1);
  okv_remote_client_destroy(a);
  wait_requests(j.server, 0);

  /* The client gives up before the answer: the late answer finds it gone and frees the request. */
  okv_remote_client_t *c2 = connect_path(&f, NULL, OKV_REMOTE_PATH_AUTO);
  s = okv_remote_client_submit(c2, "late:23", 7, 0.3, &id);
  assert_int_equal(okv_status_code(s), OKV_STATUS_UNAVAILABLE);
  okv_status_free(s);
  okv_remote_client_destroy(c2);
  pthread_mutex_lock(&j.mu);
  j.release = true;
  pthread_mutex_unlock(&j.mu);
  double deadline = okv_rt_now() + 5.0;
  bool late_done = false;
  while (!late_done && okv_rt_now() < deadline) {
    usleep(2000);
    pthread_mutex_lock(&j.mu);
    late_done = j.late_done;
    pthread_mutex_unlock(&j.mu);
  }
  assert_true(late_done);
  assert_int_equal(j.late_code, OKV_STATUS_NOT_FOUND);
  wait_requests(j.server, 0);

  pthread_mutex_lock(&j.mu);
  j.stop = true;
  pthread_mutex_unlock(&j.mu);
  pthread_join(th, NULL);
  okv_remote_server_destroy(j.server);
  pthread_mutex_destroy(&j.mu);
}

/* ---- Lifetime ---- */

static void test_disconnect_frees(void **state) {
  (void)state;
  fixture_t f = start(NULL, 0, 0);
  okv_remote_client_t *c = connect_path(&f, NULL, OKV_REMOTE_PATH_AUTO);
  open_ok(c, REQ_A, A_BYTES);
  assert_int_equal(server_requests(f.server), 2);
  okv_remote_client_destroy(c); /* REQ_A was bound to c: freed with its connection */
  wait_requests(f.server, 1);
  okv_remote_server_stats_t st;
  double deadline = okv_rt_now() + 5.0;
  do {
    OKV_ASSERT_OK(okv_remote_server_stats(f.server, &st));
  } while (st.n_clients != 0 && okv_rt_now() < deadline && usleep(2000) == 0);
  assert_int_equal(st.n_clients, 0);
  c = connect_path(&f, NULL, OKV_REMOTE_PATH_AUTO);
  uint64_t kv = 0, an = 0;
  void *adm = NULL;
  OKV_ASSERT_CODE(okv_remote_client_open(c, REQ_A, &kv, &adm, &an), OKV_STATUS_NOT_FOUND);
  open_ok(c, REQ_B, B_BYTES);
  okv_remote_client_destroy(c);
  okv_remote_server_destroy(f.server); /* REQ_B, held by nobody now, freed here */
}

static void test_unpublish(void **state) {
  (void)state;
  fixture_t f = start(NULL, 0, 0);
  OKV_ASSERT_OK(okv_remote_server_unpublish(f.server, REQ_B)); /* nobody holds it: freed */
  wait_requests(f.server, 1);
  OKV_ASSERT_CODE(okv_remote_server_unpublish(f.server, REQ_B), OKV_STATUS_NOT_FOUND);
  okv_remote_client_t *c = connect_path(&f, NULL, OKV_REMOTE_PATH_PUSH);
  open_ok(c, REQ_A, A_BYTES);
  OKV_ASSERT_OK(okv_remote_server_unpublish(f.server, REQ_A)); /* held: stays readable until closed */
  OKV_ASSERT_CODE(okv_remote_server_unpublish(f.server, REQ_A), OKV_STATUS_NOT_FOUND);
  read_check(c, REQ_A, A_BYTES, 40, 10);
  assert_int_equal(server_requests(f.server), 1);
  OKV_ASSERT_OK(okv_remote_client_close_request(c, REQ_A));
  wait_requests(f.server, 0);
  /* Publishing the same id again is a new request. */
  uint8_t kv[100];
  okv_peer_fill(REQ_A, 0, kv, sizeof kv);
  OKV_ASSERT_OK(okv_remote_server_publish(f.server, REQ_A, kv, sizeof kv, NULL, 0));
  OKV_ASSERT_CODE(okv_remote_server_publish(f.server, REQ_A, kv, sizeof kv, NULL, 0), OKV_STATUS_INVALID_ARGUMENT);
  uint64_t n = 0, an = 0;
  void *adm = NULL;
  OKV_ASSERT_OK(okv_remote_client_open(c, REQ_A, &n, &adm, &an));
  assert_true(n == sizeof kv);
  read_check(c, REQ_A, sizeof kv, 10, 11);
  okv_remote_client_destroy(c);
  okv_remote_server_destroy(f.server);
}

static void test_config_errors(void **state) {
  (void)state;
  okv_remote_server_config_t cfg;
  okv_remote_server_t *s = (okv_remote_server_t *)&cfg;
  okv_remote_server_config_init(&cfg);
  cfg.listen_addr = "localhost"; /* not numeric */
  OKV_ASSERT_CODE(okv_remote_server_create(&cfg, &alloc, &s), OKV_STATUS_INVALID_ARGUMENT);
  assert_null(s);
  cfg.listen_addr = "0.0.0.0"; /* every interface, no token */
  okv_status_t st = okv_remote_server_create(&cfg, &alloc, &s);
  assert_int_equal(okv_status_code(st), OKV_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(okv_status_message(st), "needs an access token"));
  okv_status_free(st);
  cfg.listen_addr = "10.211.0.1";
  cfg.token = "t0ken";
  cfg.allow_get = true; /* one-sided gets: loopback only */
  OKV_ASSERT_CODE(okv_remote_server_create(&cfg, &alloc, &s), OKV_STATUS_INVALID_ARGUMENT);
  okv_remote_server_config_init(&cfg);
  char longtok[300];
  memset(longtok, 'k', sizeof longtok - 1);
  longtok[sizeof longtok - 1] = 0;
  cfg.token = longtok;
  OKV_ASSERT_CODE(okv_remote_server_create(&cfg, &alloc, &s), OKV_STATUS_INVALID_ARGUMENT);
  cfg.token = "";
  OKV_ASSERT_CODE(okv_remote_server_create(&cfg, &alloc, &s), OKV_STATUS_INVALID_ARGUMENT);
  okv_remote_server_config_init(&cfg);
  cfg.max_clients = 0;
  OKV_ASSERT_CODE(okv_remote_server_create(&cfg, &alloc, &s), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_remote_server_create(NULL, &alloc, &s), OKV_STATUS_INVALID_ARGUMENT);
  /* Publish arguments. */
  okv_remote_server_config_init(&cfg);
  OKV_ASSERT_OK(okv_remote_server_create(&cfg, &alloc, &s));
  uint8_t kv[16] = {0};
  OKV_ASSERT_CODE(okv_remote_server_publish(s, 0, kv, 16, NULL, 0), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_remote_server_publish(s, 1, kv, 0, NULL, 0), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_remote_server_publish(s, 1, NULL, 16, NULL, 0), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_remote_server_publish(s, 1, kv, 16, NULL, 5), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_remote_server_unpublish(s, 1), OKV_STATUS_NOT_FOUND);
  /* A second server on the same port cannot listen. */
  okv_remote_server_config_t cfg2;
  okv_remote_server_config_init(&cfg2);
  cfg2.port = okv_remote_server_port(s);
  okv_remote_server_t *s2 = NULL;
  st = okv_remote_server_create(&cfg2, &alloc, &s2);
  assert_int_equal(okv_status_code(st), OKV_STATUS_UNAVAILABLE);
  okv_status_free(st);
  assert_null(s2);
  okv_remote_server_destroy(s);
  /* Client arguments; nothing listening on port 1 (privileged, never ours; a port just released could be
   * taken by a test running beside this one): UNAVAILABLE naming it, quickly. */
  const uint16_t port = 1;
  okv_remote_client_t *c = NULL;
  OKV_ASSERT_CODE(okv_remote_client_connect("127.0.0.1", 0, NULL, NULL, &alloc, &c), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_remote_client_connect("::1", port, NULL, NULL, &alloc, &c), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_remote_client_connect("127.0.0.1", port, longtok, NULL, &alloc, &c), OKV_STATUS_INVALID_ARGUMENT);
  double t0 = okv_rt_now();
  st = okv_remote_client_connect("127.0.0.1", port, NULL, NULL, &alloc, &c);
  assert_int_equal(okv_status_code(st), OKV_STATUS_UNAVAILABLE);
  char want[64];
  snprintf(want, sizeof want, "127.0.0.1:%u", (unsigned)port);
  assert_non_null(strstr(okv_status_message(st), want));
  okv_status_free(st);
  assert_true(okv_rt_now() - t0 < 5.0);
  assert_null(c);
  okv_remote_path_t p;
  OKV_ASSERT_OK(okv_remote_path_parse("push", &p));
  assert_int_equal(p, OKV_REMOTE_PATH_PUSH);
  OKV_ASSERT_CODE(okv_remote_path_parse("rdma", &p), OKV_STATUS_INVALID_ARGUMENT);
  assert_string_equal(okv_remote_path_name(OKV_REMOTE_PATH_GET), "get");
}

/* ---- Raw hostile messages ---- */

/* Publishes REQ_B again unless it is published (a refused client that had opened it released it). */
static void ensure_b(fixture_t *f) {
  uint8_t *kv = malloc(B_BYTES);
  assert_non_null(kv);
  okv_peer_fill(REQ_B, 0, kv, B_BYTES);
  okv_status_t s = okv_remote_server_publish(f->server, REQ_B, kv, B_BYTES, NULL, 0);
  free(kv);
  if (s && okv_status_code(s) != OKV_STATUS_INVALID_ARGUMENT) fail_msg("publish: %s", okv_status_message(s));
  okv_status_free(s);
}

/* After a raw connection misbehaved: the server logs `reason`, closes that connection, and serves a good
 * client (a fresh connection reading REQ_B). */
static void expect_refused(fixture_t *f, okv_rt_raw_t *raw, const char *reason) {
  if (!okv_rt_log_wait(reason, 5.0)) {
    okv_rt_log_dump();
    fail_msg("the server did not log '%s'", reason);
  }
  assert_true(okv_rt_raw_wait_closed(raw, 5.0));
  okv_rt_raw_destroy(raw);
  ensure_b(f);
  okv_remote_client_t *c = connect_path(f, NULL, OKV_REMOTE_PATH_AUTO);
  open_ok(c, REQ_B, B_BYTES);
  read_check(c, REQ_B, B_BYTES, 8, 12);
  OKV_ASSERT_OK(okv_remote_client_close_request(c, REQ_B));
  okv_remote_client_destroy(c);
  ensure_b(f);
}

static void test_raw_hostile(void **state) {
  (void)state;
  fixture_t f = start(NULL, 0.5, 0.2);
  static uint8_t m[OKV_REMOTE_CLIENT_MSG_MAX_BYTES + 4096];
  okv_rt_raw_t *raw;
  size_t n;

  /* Truncated: a HELLO cut inside its header. */
  raw = okv_rt_raw_connect(f.port);
  assert_non_null(raw);
  n = okv_remote_msg_encode_hello(m, sizeof m, "x", 1, 0);
  assert_true(okv_rt_raw_send(raw, NULL, 0, m, 20, false));
  expect_refused(&f, raw, "shorter than the 32-byte header; connection closed");

  /* Truncated inside the body: the header declares more than came. */
  raw = okv_rt_raw_connect(f.port);
  assert_true(okv_rt_raw_send(raw, NULL, 0, m, n - 1, false));
  expect_refused(&f, raw, "its header declares");

  /* Garbage. */
  raw = okv_rt_raw_connect(f.port);
  for (size_t i = 0; i < 100; ++i) m[i] = (uint8_t)(i * 37 + 5);
  assert_true(okv_rt_raw_send(raw, NULL, 0, m, 100, false));
  expect_refused(&f, raw, "bad magic");

  /* Oversized: more than the largest READ. */
  raw = okv_rt_raw_connect(f.port);
  n = okv_remote_msg_encode_hello(m, sizeof m, "x", 1, 0);
  assert_true(okv_rt_raw_send(raw, NULL, 0, m, OKV_REMOTE_CLIENT_MSG_MAX_BYTES + 1, false));
  expect_refused(&f, raw, "oversized message");

  /* OPEN before HELLO. */
  raw = okv_rt_raw_connect(f.port);
  n = okv_remote_msg_encode_empty(m, sizeof m, OKV_REMOTE_MSG_OPEN, REQ_A);
  assert_true(okv_rt_raw_send(raw, NULL, 0, m, n, false));
  expect_refused(&f, raw, "OPEN before HELLO");

  /* A second HELLO. */
  raw = okv_rt_raw_connect(f.port);
  assert_true(okv_rt_raw_hello(raw, NULL));
  n = okv_remote_msg_encode_hello(m, sizeof m, NULL, 0, 0);
  assert_true(okv_rt_raw_send(raw, NULL, 0, m, n, false));
  expect_refused(&f, raw, "a second HELLO");

  /* A server-to-client type from a client. */
  raw = okv_rt_raw_connect(f.port);
  assert_true(okv_rt_raw_hello(raw, NULL));
  n = okv_remote_msg_encode_data(m, sizeof m, REQ_A, 1, 0, 1, 8);
  memset(m + n, 0, 8);
  assert_true(okv_rt_raw_send(raw, NULL, 0, m, n + 8, false));
  expect_refused(&f, raw, "unexpected DATA from a client");

  /* READ outside the region of a request it opened. */
  raw = okv_rt_raw_connect(f.port);
  assert_true(okv_rt_raw_hello(raw, NULL));
  assert_true(okv_rt_raw_open(raw, REQ_B));
  {
    uint64_t off[2] = {0, B_BYTES - 8}, len[2] = {8, 9};
    n = okv_remote_msg_encode_read(m, sizeof m, REQ_B, 1, 0, 2, off, len);
  }
  assert_true(okv_rt_raw_send(raw, NULL, 0, m, n, false));
  expect_refused(&f, raw, "READ entry 1 [65528, 65537) outside request 12's region of 65536 bytes");
  wait_requests(f.server, 2); /* the hostile client's REQ_B was released with its connection (and published anew) */

  /* READ of a request another client holds, and of one nobody opened. */
  okv_remote_client_t *owner = connect_path(&f, NULL, OKV_REMOTE_PATH_AUTO);
  open_ok(owner, REQ_A, A_BYTES);
  raw = okv_rt_raw_connect(f.port);
  assert_true(okv_rt_raw_hello(raw, NULL));
  {
    uint64_t off = 0, len = 8;
    n = okv_remote_msg_encode_read(m, sizeof m, REQ_A, 1, 0, 1, &off, &len);
  }
  assert_true(okv_rt_raw_send(raw, NULL, 0, m, n, false));
  expect_refused(&f, raw, "READ of request 11, which belongs to another client");
  raw = okv_rt_raw_connect(f.port);
  assert_true(okv_rt_raw_hello(raw, NULL));
  {
    uint64_t off = 0, len = 8;
    n = okv_remote_msg_encode_read(m, sizeof m, REQ_B, 1, 0, 1, &off, &len);
  }
  assert_true(okv_rt_raw_send(raw, NULL, 0, m, n, false));
  expect_refused(&f, raw, "READ of request 12, not open by this client");
  read_check(owner, REQ_A, A_BYTES, 16, 13); /* the owner was never disturbed */

  /* Rendezvous, and an active-message header. */
  raw = okv_rt_raw_connect(f.port);
  n = okv_remote_msg_encode_hello(m, sizeof m, NULL, 0, 0);
  assert_true(okv_rt_raw_send(raw, NULL, 0, m, n, true));
  expect_refused(&f, raw, "a rendezvous message");
  raw = okv_rt_raw_connect(f.port);
  assert_true(okv_rt_raw_send(raw, m, 8, m, n, false));
  expect_refused(&f, raw, "an active-message header of 8 bytes");

  /* Silent: no HELLO within the server's hello_timeout_s (0.5 s here). */
  raw = okv_rt_raw_connect(f.port);
  uint8_t junk[8];
  (void)okv_rt_raw_recv(raw, junk, sizeof junk, 0.05); /* let the connection establish */
  expect_refused(&f, raw, "no HELLO within 0.5 s");

  okv_remote_server_stats_t st;
  OKV_ASSERT_OK(okv_remote_server_stats(f.server, &st));
  assert_int_equal(st.n_refused, 13);
  okv_remote_client_destroy(owner);
  okv_remote_server_destroy(f.server);
}

int main(void) {
  alloc = okv_test_allocator();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip_auto),
      cmocka_unit_test(test_round_trip_push),
      cmocka_unit_test(test_round_trip_get),
      cmocka_unit_test(test_no_get_offered),
      cmocka_unit_test(test_client_errors),
      cmocka_unit_test(test_wrong_token),
      cmocka_unit_test(test_request_of_another_client),
      cmocka_unit_test(test_disconnect_frees),
      cmocka_unit_test(test_unpublish),
      cmocka_unit_test(test_config_errors),
      cmocka_unit_test(test_raw_hostile),
      cmocka_unit_test(test_jobs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
