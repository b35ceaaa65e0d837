/* UCX setup and the small helpers shared by remote_server.c and
 * remote_client.c (see remote_ucx.h). Owns the UCX-to-okv status conversion. */
#include "remote_ucx.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucs/config/global_opts.h>

/* ---- Status conversion ---- */

okv_status_code_t okv_remote_ucx_code(ucs_status_t st) {
  switch (st) {
    case UCS_OK: return OKV_STATUS_OK;
    case UCS_ERR_NO_MEMORY: return OKV_STATUS_OUT_OF_MEMORY;
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR: return OKV_STATUS_INVALID_ARGUMENT;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_CANCELED:
    case UCS_ERR_REJECTED:
    case UCS_ERR_BUSY:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_NO_DEVICE:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_ALREADY_EXISTS:
    case UCS_ERR_SOME_CONNECTS_FAILED:
    case UCS_ERR_OUT_OF_RANGE: return OKV_STATUS_UNAVAILABLE;
    default: return OKV_STATUS_INTERNAL;
  }
}

okv_status_t okv_remote_ucx_status(ucs_status_t st, const char *what) {
  if (st == UCS_OK) return OKV_OK;
  return okv_status_make(okv_remote_ucx_code(st), "%s: %s", what, ucs_status_string(st));
}

/* ---- Context and worker ---- */

/* UCX prints its own errors (on stdout unless UCX_LOG_FILE says otherwise); this library reports every
 * failure as a status instead, so unless the user chose a level, only UCX's fatal messages are printed.
 * Once, before this process's first UCX context (so before any UCX thread of ours reads the level). */
static pthread_once_t g_log_once = PTHREAD_ONCE_INIT;
static void quiet_ucx_log(void) {
  if (getenv("UCX_LOG_LEVEL") == NULL) (void)ucs_global_opts_set_value("LOG_LEVEL", "fatal");
}

okv_status_t okv_remote_ucx_context(uint64_t features, bool mt_shared, const char *name, ucp_context_h *out_ctx) {
  *out_ctx = NULL;
  pthread_once(&g_log_once, quiet_ucx_log);
  ucp_config_t *config = NULL;
  ucs_status_t st = ucp_config_read(NULL, NULL, &config);
  if (st != UCS_OK) return okv_remote_ucx_status(st, "reading the UCX configuration (UCX_* variables)");
  ucp_params_t params;
  memset(&params, 0, sizeof params);
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME;
  params.features = features | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = mt_shared ? 1 : 0;
  params.name = name;
  st = ucp_init(&params, config, out_ctx);
  ucp_config_release(config);
  if (st != UCS_OK) {
    *out_ctx = NULL;
    return okv_remote_ucx_status(st, "starting UCX (ucp_init)");
  }
  return OKV_OK;
}

okv_status_t okv_remote_ucx_worker(ucp_context_h ctx, ucs_thread_mode_t mode, ucp_worker_h *out_worker, int *out_efd) {
  *out_worker = NULL;
  *out_efd = -1;
  ucp_worker_params_t wp;
  memset(&wp, 0, sizeof wp);
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_EVENTS;
  wp.thread_mode = mode;
  wp.events = UCP_WAKEUP_RMA | UCP_WAKEUP_TX | UCP_WAKEUP_RX; /* RX covers active messages */
  ucs_status_t st = ucp_worker_create(ctx, &wp, out_worker);
  if (st != UCS_OK) {
    *out_worker = NULL;
    return okv_remote_ucx_status(st, "creating a UCX worker");
  }
  st = ucp_worker_get_efd(*out_worker, out_efd);
  if (st != UCS_OK) {
    ucp_worker_destroy(*out_worker);
    *out_worker = NULL;
    return okv_remote_ucx_status(st, "getting the UCX worker's event fd");
  }
  return OKV_OK;
}

void okv_remote_ucx_sleep(ucp_worker_h worker, int efd, double timeout_s) {
  if (ucp_worker_arm(worker) == UCS_ERR_BUSY) return;
  int ms = timeout_s <= 0 ? 0 : (timeout_s > 1.0 ? 1000 : (int)ceil(timeout_s * 1e3));
  struct pollfd pfd = {.fd = efd, .events = POLLIN};
  (void)poll(&pfd, 1, ms); /* EINTR or a timeout: the caller progresses and looks again */
}

ucs_status_t okv_remote_ucx_wait(ucp_worker_h worker, void *request, double deadline_s) {
  if (request == NULL) return UCS_OK;
  if (UCS_PTR_IS_ERR(request)) return UCS_PTR_STATUS(request);
  ucs_status_t st;
  while ((st = ucp_request_check_status(request)) == UCS_INPROGRESS) {
    if (okv_remote_now() > deadline_s) return UCS_ERR_TIMED_OUT;
    if (ucp_worker_progress(worker) == 0) {
      struct timespec ts = {0, 100000}; /* 0.1 ms: bounded polling without the event fd */
      nanosleep(&ts, NULL);
    }
  }
  ucp_request_free(request);
  return st;
}

/* ---- Addresses ---- */

okv_status_t okv_remote_parse_ipv4(const char *addr, uint16_t port, struct sockaddr_in *out) {
  memset(out, 0, sizeof *out);
  if (!addr || !addr[0]) addr = "127.0.0.1";
  out->sin_family = AF_INET;
  out->sin_port = htons(port);
  if (inet_pton(AF_INET, addr, &out->sin_addr) != 1)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "address '%.64s' is not a numeric IPv4 address", addr);
  return OKV_OK;
}

bool okv_remote_is_loopback(const struct sockaddr_in *sa) { return (ntohl(sa->sin_addr.s_addr) >> 24) == 127; }

void okv_remote_format_sockaddr(const struct sockaddr_storage *ss, char *buf, size_t cap) {
  char host[INET6_ADDRSTRLEN] = "?";
  unsigned port = 0;
  if (ss->ss_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (ss->ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  } else {
    snprintf(buf, cap, "?");
    return;
  }
  snprintf(buf, cap, "%s:%u", host, port);
}

/* ---- Token, clock ---- */

bool okv_remote_token_equal(const uint8_t *a, size_t na, const uint8_t *b, size_t nb) {
  size_t n = na > nb ? na : nb;
  volatile uint8_t diff = (uint8_t)(na != nb);
  for (size_t i = 0; i < n; ++i) {
    uint8_t x = i < na ? a[i] : 0, y = i < nb ? b[i] : 0;
    diff |= (uint8_t)(x ^ y);
  }
  return diff == 0;
}

double okv_remote_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
