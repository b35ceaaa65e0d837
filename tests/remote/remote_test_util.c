/* Helpers of the remote tier's tests (remote_test_util.h). */
#include "tests/remote/remote_test_util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucp/api/ucp.h>

#include "remote/remote_msg.h"
#include "remote/remote_ucx.h"

double okv_rt_now(void) { return okv_remote_now(); }

/* ---- Server log ---- */

#define LOG_LINES 512
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_lines[LOG_LINES][320];
static int log_level[LOG_LINES];
static int log_n;

void okv_rt_log(void *user, okv_remote_log_level_t level, const char *message) {
  (void)user;
  pthread_mutex_lock(&log_mu);
  if (log_n < LOG_LINES) {
    snprintf(log_lines[log_n], sizeof log_lines[0], "%s", message);
    log_level[log_n] = (int)level;
    log_n++;
  }
  pthread_mutex_unlock(&log_mu);
}

void okv_rt_log_clear(void) {
  pthread_mutex_lock(&log_mu);
  log_n = 0;
  pthread_mutex_unlock(&log_mu);
}

bool okv_rt_log_wait(const char *needle, double timeout_s) {
  double deadline = okv_rt_now() + timeout_s;
  for (;;) {
    bool found = false;
    pthread_mutex_lock(&log_mu);
    for (int i = 0; i < log_n && !found; ++i)
      found = log_level[i] == OKV_REMOTE_LOG_WARN && strstr(log_lines[i], needle) != NULL;
    pthread_mutex_unlock(&log_mu);
    if (found) return true;
    if (okv_rt_now() > deadline) return false;
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
}

void okv_rt_log_dump(void) {
  pthread_mutex_lock(&log_mu);
  for (int i = 0; i < log_n; ++i)
    fprintf(stderr, "  server log [%s] %s\n", log_level[i] ? "warn" : "info", log_lines[i]);
  pthread_mutex_unlock(&log_mu);
}

/* ---- Raw client ---- */

struct okv_rt_raw {
  ucp_context_h ctx;
  ucp_worker_h worker;
  ucp_ep_h ep;
  bool closed;
  uint8_t msg[1 << 16];
  size_t msg_n;
  bool has_msg;
};

static void raw_err(void *arg, ucp_ep_h ep, ucs_status_t status) {
  (void)ep;
  (void)status;
  ((okv_rt_raw_t *)arg)->closed = true;
}

static ucs_status_t raw_am(void *arg, const void *header, size_t header_length, void *data, size_t length,
                           const ucp_am_recv_param_t *param) {
  okv_rt_raw_t *r = arg;
  (void)header;
  (void)header_length;
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) && !r->has_msg) {
    r->msg_n = length < sizeof r->msg ? length : sizeof r->msg;
    memcpy(r->msg, data, r->msg_n);
    r->has_msg = true;
  }
  return UCS_OK;
}

okv_rt_raw_t *okv_rt_raw_connect(uint16_t port) {
  okv_rt_raw_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  okv_status_t s = okv_remote_ucx_context(UCP_FEATURE_AM, false, "okv-test-raw", &r->ctx);
  int efd = -1;
  if (!s) s = okv_remote_ucx_worker(r->ctx, UCS_THREAD_MODE_SINGLE, &r->worker, &efd);
  if (s) {
    okv_status_free(s);
    okv_rt_raw_destroy(r);
    return NULL;
  }
  ucp_am_handler_param_t hp;
  memset(&hp, 0, sizeof hp);
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.id = OKV_REMOTE_AM_ID;
  hp.flags = UCP_AM_FLAG_WHOLE_MSG;
  hp.cb = raw_am;
  hp.arg = r;
  struct sockaddr_in sa;
  s = okv_remote_parse_ipv4("127.0.0.1", port, &sa);
  okv_status_free(s);
  ucp_ep_params_t ep;
  memset(&ep, 0, sizeof ep);
  ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  ep.sockaddr.addr = (const struct sockaddr *)&sa;
  ep.sockaddr.addrlen = sizeof sa;
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = raw_err;
  ep.err_handler.arg = r;
  if (ucp_worker_set_am_recv_handler(r->worker, &hp) != UCS_OK || ucp_ep_create(r->worker, &ep, &r->ep) != UCS_OK) {
    r->ep = NULL;
    okv_rt_raw_destroy(r);
    return NULL;
  }
  return r;
}

static void raw_progress(okv_rt_raw_t *r) {
  if (!ucp_worker_progress(r->worker)) {
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
}

bool okv_rt_raw_send(okv_rt_raw_t *r, const void *header, size_t header_bytes, const void *data, size_t n, bool rndv) {
  ucp_request_param_t p;
  memset(&p, 0, sizeof p);
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_REPLY | (rndv ? UCP_AM_SEND_FLAG_RNDV : UCP_AM_SEND_FLAG_EAGER);
  void *q = ucp_am_send_nbx(r->ep, OKV_REMOTE_AM_ID, header, header_bytes, data, n, &p);
  /* A rendezvous send completes only when the server takes or drops the data: bounded wait. */
  ucs_status_t st = okv_remote_ucx_wait(r->worker, q, okv_rt_now() + 5.0);
  return st == UCS_OK || (rndv && st == UCS_ERR_TIMED_OUT);
}

size_t okv_rt_raw_recv(okv_rt_raw_t *r, void *buf, size_t cap, double timeout_s) {
  double deadline = okv_rt_now() + timeout_s;
  while (!r->has_msg && !r->closed && okv_rt_now() < deadline) raw_progress(r);
  if (!r->has_msg) return 0;
  size_t n = r->msg_n < cap ? r->msg_n : cap;
  memcpy(buf, r->msg, n);
  r->has_msg = false;
  return n;
}

bool okv_rt_raw_wait_closed(okv_rt_raw_t *r, double timeout_s) {
  double deadline = okv_rt_now() + timeout_s;
  while (!r->closed && okv_rt_now() < deadline) raw_progress(r);
  return r->closed;
}

bool okv_rt_raw_hello(okv_rt_raw_t *r, const char *token) {
  uint8_t f[OKV_REMOTE_HEADER_BYTES + 8 + OKV_REMOTE_TOKEN_MAX_BYTES];
  size_t n = okv_remote_msg_encode_hello(f, sizeof f, token, token ? (uint32_t)strlen(token) : 0, 0);
  if (!okv_rt_raw_send(r, NULL, 0, f, n, false)) return false;
  uint8_t reply[256];
  size_t m = okv_rt_raw_recv(r, reply, sizeof reply, 5.0);
  okv_remote_msg_t msg;
  okv_status_t s = okv_remote_msg_parse(reply, m, &msg);
  bool ok = !s && msg.type == OKV_REMOTE_MSG_HELLO_OK;
  okv_status_free(s);
  return ok;
}

bool okv_rt_raw_open(okv_rt_raw_t *r, uint64_t request_id) {
  uint8_t f[OKV_REMOTE_HEADER_BYTES];
  size_t n = okv_remote_msg_encode_empty(f, sizeof f, OKV_REMOTE_MSG_OPEN, request_id);
  if (!okv_rt_raw_send(r, NULL, 0, f, n, false)) return false;
  static uint8_t reply[1 << 16];
  size_t m = okv_rt_raw_recv(r, reply, sizeof reply, 5.0);
  okv_remote_msg_t msg;
  okv_status_t s = okv_remote_msg_parse(reply, m, &msg);
  bool ok = !s && msg.type == OKV_REMOTE_MSG_OPEN_OK;
  okv_status_free(s);
  return ok;
}

void okv_rt_raw_destroy(okv_rt_raw_t *r) {
  if (!r) return;
  if (r->ep) {
    ucp_request_param_t p;
    memset(&p, 0, sizeof p);
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    (void)okv_remote_ucx_wait(r->worker, ucp_ep_close_nbx(r->ep, &p), okv_rt_now() + 5.0);
  }
  if (r->worker) ucp_worker_destroy(r->worker);
  if (r->ctx) ucp_cleanup(r->ctx);
  free(r);
}
