/* The remote tier's KV server (include/oasiskv/remote.h): listener,
 * connections, published requests and their registered regions, the
 * protocol's server side (HELLO, OPEN, READ, CLOSE) and the PUSH data path.
 *
 * Threads: one progress thread owns the UCX worker, the listener and every
 * endpoint; it holds the server mutex while it progresses and services, and
 * sleeps on the worker's event fd without it. publish / unpublish / stats run
 * on the caller's thread: they register regions with the (thread-shared) UCX
 * context outside the mutex and touch the request table under it. Requests and
 * connections are freed only by the progress thread (or by destroy after the
 * thread has stopped), never inside a UCX callback. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oasiskv/remote.h"
#include "remote_msg.h"
#include "remote_ucx.h"

#define MAX_IOV 64 /* gets coalesced into one DATA message at most */

typedef struct srv_client srv_client_t;

typedef struct srv_request {
  uint64_t id;
  ucp_mem_h memh;
  uint8_t *base; /* the registered region; kv_bytes of it are the request's KV */
  uint64_t kv_bytes;
  void *rkey_buf; /* packed rkey (allow_get), from ucp_rkey_pack */
  size_t rkey_bytes;
  uint8_t *admission;
  uint64_t admission_bytes;
  srv_client_t *owner;        /* the client that opened it; NULL until then */
  srv_client_t *reserved_for; /* a SUBMIT's request: only this client may open it (NULL: anyone) */
  bool published;             /* false once unpublished */
  bool closed;                /* its owner closed it or went away: freed once inflight is 0 */
  uint32_t inflight;          /* sends and queued READ jobs that reference its memory */
} srv_request_t;

/* A SUBMIT waiting for okv_remote_server_submit_done. */
typedef struct srv_job {
  struct srv_job *next;
  uint64_t ticket;
  srv_client_t *client; /* NULL once its client is gone */
} srv_job_t;

/* A READ being served: entries [next, n) are still to send. */
typedef struct read_job {
  struct read_job *next_job;
  srv_request_t *req;
  uint64_t batch_id;
  uint32_t first_index, n, next;
  uint64_t *offsets, *bytes; /* n each */
} read_job_t;

typedef enum { CL_HELLO, CL_READY, CL_CLOSING } cl_state_t;

struct srv_client {
  srv_client_t *next;
  uint32_t id;
  char name[96]; /* "client N (ADDR:PORT)" */
  ucp_ep_h ep;
  cl_state_t state;
  double accepted_s;
  bool failed;       /* the endpoint's error handler ran */
  double close_at_s; /* when closing: force-close the endpoint by then at the latest */
  bool close_posted; /* ucp_ep_close_nbx called */
  void *close_req;   /* its request while in progress */
  bool close_done;
  uint32_t inflight_sends;
  uint64_t inflight_bytes;
  read_job_t *jobs_head, *jobs_tail;
};

/* One send in flight: the frame (and the iov describing it and the payload) live until completion. */
typedef struct send_ctx {
  okv_remote_server_t *server;
  srv_client_t *client;
  srv_request_t *req; /* NULL for control replies */
  uint64_t payload_bytes;
  bool is_push; /* payload_bytes counted in push_bytes (else admission) */
  uint32_t n_iov;
  ucp_dt_iov_t iov[MAX_IOV + 1];
  size_t frame_cap;
  uint8_t frame[]; /* frame_cap bytes */
} send_ctx_t;

struct okv_remote_server_t {
  okv_allocator_t alloc;
  okv_remote_server_config_t cfg;
  char listen_addr[64];
  char token[OKV_REMOTE_TOKEN_MAX_BYTES + 1];
  size_t token_bytes;
  uint16_t port;

  ucp_context_h ctx;
  ucp_worker_h worker;
  int efd;
  ucp_listener_h listener;
  ucp_address_t *address; /* the worker's address (allow_get: sent in HELLO_OK for the GET endpoint) */
  size_t address_bytes;

  pthread_t thread;
  bool thread_started;
  atomic_int stop;
  pthread_mutex_t mu;

  srv_client_t *clients;
  uint32_t n_clients, next_client_id;
  srv_request_t **reqs;
  uint32_t n_reqs, cap_reqs;
  srv_job_t *jobs; /* SUBMITs not answered yet */
  uint64_t next_ticket;
  okv_remote_server_stats_t stats;
};

/* ---- Logging ---- */

static void slog(okv_remote_server_t *s, okv_remote_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void slog(okv_remote_server_t *s, okv_remote_log_level_t level, const char *fmt, ...) {
  if (!s->cfg.log_fn) return;
  char line[640];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  s->cfg.log_fn(s->cfg.log_user, level, line);
}

/* ---- Requests ---- */

/* The live request with this id (closed ones, draining their last sends, are invisible: the id can be
 * published again meanwhile). */
static srv_request_t *find_request(okv_remote_server_t *s, uint64_t id) {
  for (uint32_t i = 0; i < s->n_reqs; ++i)
    if (s->reqs[i]->id == id && !s->reqs[i]->closed) return s->reqs[i];
  return NULL;
}

static void free_request_memory(okv_remote_server_t *s, srv_request_t *r) {
  if (r->rkey_buf) ucp_rkey_buffer_release(r->rkey_buf);
  if (r->memh) {
    ucs_status_t st = ucp_mem_unmap(s->ctx, r->memh);
    if (st != UCS_OK)
      slog(s, OKV_REMOTE_LOG_WARN, "request %llu: ucp_mem_unmap: %s", (unsigned long long)r->id, ucs_status_string(st));
  }
  okv_free(&s->alloc, r->admission);
  okv_free(&s->alloc, r);
}

/* Frees every request no one can reach any more (mutex held, progress thread or destroy). */
static void sweep_requests(okv_remote_server_t *s) {
  for (uint32_t i = 0; i < s->n_reqs;) {
    srv_request_t *r = s->reqs[i];
    bool dead = r->closed || (!r->published && r->owner == NULL);
    if (dead && r->inflight == 0) {
      s->reqs[i] = s->reqs[--s->n_reqs];
      free_request_memory(s, r);
    } else {
      ++i;
    }
  }
}

/* ---- Sends ---- */

static void send_done(okv_remote_server_t *s, send_ctx_t *x, ucs_status_t st) {
  srv_client_t *c = x->client;
  c->inflight_sends--;
  if (x->is_push) c->inflight_bytes -= x->payload_bytes;
  if (x->req) x->req->inflight--;
  if (st == UCS_OK) {
    if (x->is_push)
      s->stats.push_bytes += x->payload_bytes;
    else
      s->stats.admission_bytes += x->payload_bytes;
  } else if (c->state != CL_CLOSING && !c->failed) {
    slog(s, OKV_REMOTE_LOG_INFO, "%s: send failed (%s)", c->name, ucs_status_string(st));
    c->failed = true;
  }
  okv_free(&s->alloc, x);
}

static void send_cb(void *request, ucs_status_t status, void *user_data) {
  send_ctx_t *x = user_data;
  send_done(x->server, x, status);
  ucp_request_free(request);
}

/* Sends x->iov[0..n_iov) as one eager active message to c. */
static void post_send(okv_remote_server_t *s, srv_client_t *c, send_ctx_t *x) {
  x->server = s;
  x->client = c;
  c->inflight_sends++;
  if (x->is_push) c->inflight_bytes += x->payload_bytes;
  if (x->req) x->req->inflight++;
  ucp_request_param_t p;
  memset(&p, 0, sizeof p);
  p.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_FLAGS;
  p.cb.send = send_cb;
  p.user_data = x;
  p.datatype = ucp_dt_make_iov();
  p.flags = UCP_AM_SEND_FLAG_EAGER;
  ucs_status_ptr_t r = ucp_am_send_nbx(c->ep, OKV_REMOTE_AM_ID, NULL, 0, x->iov, x->n_iov, &p);
  if (r == NULL)
    send_done(s, x, UCS_OK);
  else if (UCS_PTR_IS_ERR(r))
    send_done(s, x, UCS_PTR_STATUS(r));
}

/* A send context with room for a frame of frame_cap bytes. */
static send_ctx_t *new_ctx(okv_remote_server_t *s, size_t frame_cap) {
  send_ctx_t *x = okv_malloc(&s->alloc, sizeof *x + frame_cap);
  if (x) {
    memset(x, 0, sizeof *x);
    x->frame_cap = frame_cap;
  }
  return x;
}
#define CTRL_FRAME (OKV_REMOTE_HEADER_BYTES + 16u + OKV_REMOTE_ERROR_TEXT_MAX_BYTES)

/* A control reply: just the frame of `n` bytes already in x->frame. */
static void send_frame(okv_remote_server_t *s, srv_client_t *c, send_ctx_t *x, size_t n) {
  x->iov[0].buffer = x->frame;
  x->iov[0].length = n;
  x->n_iov = 1;
  post_send(s, c, x);
}

/* ---- Connections ---- */

static void drop_jobs(srv_client_t *c, okv_remote_server_t *s) {
  while (c->jobs_head) {
    read_job_t *j = c->jobs_head;
    c->jobs_head = j->next_job;
    j->req->inflight--;
    okv_free(&s->alloc, j->offsets);
    okv_free(&s->alloc, j->bytes);
    okv_free(&s->alloc, j);
  }
  c->jobs_tail = NULL;
}

/* Starts closing c: its requests are released (freed once their sends drain) and queued READs dropped;
 * the endpoint is force-closed by service(): at once unless `graceful`; after a refusal (`graceful`) once
 * the peer has closed its side on reading the ERROR (our client does so at once), at the latest after
 * config close_grace_s, so
 * the ERROR is not lost to a force close and a peer that reads nothing cannot hold the server. Nothing c
 * sends meanwhile is read. Mutex held. */
static void begin_close(okv_remote_server_t *s, srv_client_t *c, bool graceful) {
  if (c->state == CL_CLOSING) return;
  c->state = CL_CLOSING;
  s->stats.n_disconnects++;
  for (uint32_t i = 0; i < s->n_reqs; ++i) {
    srv_request_t *r = s->reqs[i];
    if (r->owner == c && !r->closed) {
      r->closed = true;
      r->owner = NULL; /* c is freed before r may be */
      slog(s, OKV_REMOTE_LOG_INFO, "%s: request %llu released (connection closing)", c->name,
           (unsigned long long)r->id);
    }
    if (r->reserved_for == c) { /* a SUBMIT's request its client never opened: freed with the connection */
      r->reserved_for = NULL;
      if (!r->owner && !r->closed) {
        r->closed = true;
        slog(s, OKV_REMOTE_LOG_INFO, "%s: submitted request %llu freed (connection closing)", c->name,
             (unsigned long long)r->id);
      }
    }
  }
  for (srv_job_t *j = s->jobs; j; j = j->next)
    if (j->client == c) j->client = NULL;
  drop_jobs(c, s);
  c->close_at_s = okv_remote_now() + (graceful ? s->cfg.close_grace_s : 0.0);
}

/* Force-closes c's endpoint (cancelling its sends) once due. Mutex held. */
static void close_endpoint(srv_client_t *c, double now) {
  if (c->close_posted || (!c->failed && now < c->close_at_s)) return;
  c->close_posted = true;
  ucp_request_param_t p;
  memset(&p, 0, sizeof p);
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void *r = ucp_ep_close_nbx(c->ep, &p);
  if (r == NULL || UCS_PTR_IS_ERR(r))
    c->close_done = true;
  else
    c->close_req = r;
}

/* Refuses what c sent: logs the reason, sends ERROR(code, reason), closes the connection. */
static void refuse(okv_remote_server_t *s, srv_client_t *c, uint64_t request_id, okv_status_code_t code,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void refuse(okv_remote_server_t *s, srv_client_t *c, uint64_t request_id, okv_status_code_t code,
                   const char *fmt, ...) {
  if (c->state == CL_CLOSING) return;
  char reason[OKV_REMOTE_ERROR_TEXT_MAX_BYTES + 1];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  slog(s, OKV_REMOTE_LOG_WARN, "%s: refused: %s; connection closed", c->name, reason);
  s->stats.n_refused++;
  send_ctx_t *x = new_ctx(s, CTRL_FRAME);
  if (x) {
    size_t n = okv_remote_msg_encode_error(x->frame, x->frame_cap, request_id, code, OKV_REMOTE_ERROR_CLOSING, reason);
    send_frame(s, c, x, n);
  }
  begin_close(s, c, true);
}

/* Answers with ERROR and keeps the connection (an honest mistake, e.g. a request not published). */
static void reply_error(okv_remote_server_t *s, srv_client_t *c, uint64_t request_id, okv_status_code_t code,
                        const char *text) {
  send_ctx_t *x = new_ctx(s, CTRL_FRAME);
  if (!x) {
    c->failed = true;
    return;
  }
  size_t n = okv_remote_msg_encode_error(x->frame, x->frame_cap, request_id, code, 0, text);
  send_frame(s, c, x, n);
}

/* The endpoint's error handler. Its argument is the server; the client is found by its endpoint, so a late
 * call for a connection already freed finds nothing. */
static void err_cb(void *arg, ucp_ep_h ep, ucs_status_t status) {
  okv_remote_server_t *s = arg;
  (void)status; /* logged by the service loop as a disconnect */
  for (srv_client_t *c = s->clients; c; c = c->next)
    if (c->ep == ep && !c->close_posted) c->failed = true; /* also ends a refused client's grace */
}

static void conn_cb(ucp_conn_request_h creq, void *arg) {
  okv_remote_server_t *s = arg;
  char peer[80] = "?";
  ucp_conn_request_attr_t attr;
  memset(&attr, 0, sizeof attr);
  attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
  if (ucp_conn_request_query(creq, &attr) == UCS_OK)
    okv_remote_format_sockaddr(&attr.client_address, peer, sizeof peer);
  if (s->n_clients >= s->cfg.max_clients || atomic_load(&s->stop)) {
    slog(s, OKV_REMOTE_LOG_WARN, "connection from %s rejected: %u clients connected (max_clients)", peer, s->n_clients);
    ucp_listener_reject(s->listener, creq);
    return;
  }
  srv_client_t *c = okv_calloc(&s->alloc, 1, sizeof *c);
  if (!c) {
    ucp_listener_reject(s->listener, creq);
    return;
  }
  c->id = ++s->next_client_id;
  snprintf(c->name, sizeof c->name, "client %u (%s)", c->id, peer);
  c->state = CL_HELLO;
  c->accepted_s = okv_remote_now();
  ucp_ep_params_t ep;
  memset(&ep, 0, sizeof ep);
  ep.field_mask =
      UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.conn_request = creq;
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = err_cb;
  ep.err_handler.arg = s;
  ucs_status_t st = ucp_ep_create(s->worker, &ep, &c->ep);
  if (st != UCS_OK) {
    slog(s, OKV_REMOTE_LOG_WARN, "connection from %s failed: ucp_ep_create: %s", peer, ucs_status_string(st));
    okv_free(&s->alloc, c);
    return;
  }
  c->next = s->clients;
  s->clients = c;
  s->n_clients++;
  slog(s, OKV_REMOTE_LOG_INFO, "%s: connected", c->name);
}

static srv_client_t *find_client(okv_remote_server_t *s, ucp_ep_h ep) {
  for (srv_client_t *c = s->clients; c; c = c->next)
    if (c->ep == ep) return c;
  return NULL;
}

/* ---- Messages ---- */

static void on_hello(okv_remote_server_t *s, srv_client_t *c, const okv_remote_msg_t *m) {
  if (c->state != CL_HELLO) {
    refuse(s, c, 0, OKV_STATUS_INVALID_ARGUMENT, "a second HELLO");
    return;
  }
  if (s->token_bytes > 0 &&
      !okv_remote_token_equal(m->u.hello.token, m->u.hello.token_bytes, (const uint8_t *)s->token, s->token_bytes)) {
    refuse(s, c, 0, OKV_STATUS_INVALID_ARGUMENT,
           m->u.hello.token_bytes == 0 ? "no access token (this server needs one)" : "wrong access token");
    return;
  }
  send_ctx_t *x = new_ctx(s, OKV_REMOTE_HEADER_BYTES + 24u + s->address_bytes);
  if (!x) {
    c->failed = true;
    return;
  }
  size_t n = okv_remote_msg_encode_hello_ok(x->frame, x->frame_cap, s->cfg.allow_get ? OKV_REMOTE_HELLO_OK_GET : 0,
                                            OKV_REMOTE_READ_MAX_ENTRIES, s->cfg.max_inflight_bytes, s->address,
                                            (uint32_t)s->address_bytes);
  c->state = CL_READY;
  send_frame(s, c, x, n);
  slog(s, OKV_REMOTE_LOG_INFO, "%s: token accepted", c->name);
}

static void on_open(okv_remote_server_t *s, srv_client_t *c, const okv_remote_msg_t *m) {
  srv_request_t *r = find_request(s, m->request_id);
  unsigned long long id = (unsigned long long)m->request_id;
  if (r && r->owner == c) {
    refuse(s, c, m->request_id, OKV_STATUS_INVALID_ARGUMENT, "OPEN of request %llu, already open", id);
    return;
  }
  if (r && (r->owner || (r->reserved_for && r->reserved_for != c))) {
    refuse(s, c, m->request_id, OKV_STATUS_INVALID_ARGUMENT, "OPEN of request %llu, which belongs to another client",
           id);
    return;
  }
  if (!r || !r->published) {
    char text[96];
    snprintf(text, sizeof text, "request %llu is not published", id);
    reply_error(s, c, m->request_id, OKV_STATUS_NOT_FOUND, text);
    return;
  }
  send_ctx_t *x = new_ctx(s, OKV_REMOTE_HEADER_BYTES + OKV_REMOTE_OPEN_OK_BODY_FIXED + r->rkey_bytes);
  if (!x) {
    c->failed = true;
    return;
  }
  r->owner = c;
  size_t n = okv_remote_msg_encode_open_ok(x->frame, x->frame_cap, r->id, r->kv_bytes, r->admission_bytes,
                                           (uint64_t)(uintptr_t)r->base, r->rkey_buf, (uint32_t)r->rkey_bytes);
  x->iov[0].buffer = x->frame;
  x->iov[0].length = n;
  x->n_iov = 1;
  if (r->admission_bytes) {
    x->iov[1].buffer = r->admission;
    x->iov[1].length = r->admission_bytes;
    x->n_iov = 2;
  }
  x->req = r;
  x->payload_bytes = r->admission_bytes;
  post_send(s, c, x);
  slog(s, OKV_REMOTE_LOG_INFO, "%s: opened request %llu (%llu KV bytes, %llu admission bytes)", c->name, id,
       (unsigned long long)r->kv_bytes, (unsigned long long)r->admission_bytes);
}

/* The request a request-scoped message names, which must be open by c; else refused (NULL). */
static srv_request_t *owned_request(okv_remote_server_t *s, srv_client_t *c, const okv_remote_msg_t *m) {
  srv_request_t *r = find_request(s, m->request_id);
  const char *what = okv_remote_msg_type_name(m->type);
  unsigned long long id = (unsigned long long)m->request_id;
  if (r && r->owner && r->owner != c) {
    refuse(s, c, m->request_id, OKV_STATUS_INVALID_ARGUMENT, "%s of request %llu, which belongs to another client",
           what, id);
    return NULL;
  }
  if (!r || r->owner != c || r->closed) {
    refuse(s, c, m->request_id, OKV_STATUS_INVALID_ARGUMENT, "%s of request %llu, not open by this client", what, id);
    return NULL;
  }
  return r;
}

static void on_read(okv_remote_server_t *s, srv_client_t *c, const okv_remote_msg_t *m) {
  srv_request_t *r = owned_request(s, c, m);
  if (!r) return;
  uint32_t n = m->u.read.n_entries;
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t off, bytes;
    okv_remote_msg_read_entry(m, i, &off, &bytes);
    if (off >= r->kv_bytes || bytes > r->kv_bytes - off) {
      refuse(s, c, r->id, OKV_STATUS_INVALID_ARGUMENT,
             "READ entry %u [%llu, %llu) outside request %llu's region of %llu bytes", m->u.read.first_index + i,
             (unsigned long long)off, (unsigned long long)(off + bytes), (unsigned long long)r->id,
             (unsigned long long)r->kv_bytes);
      return;
    }
  }
  read_job_t *j = okv_calloc(&s->alloc, 1, sizeof *j);
  uint64_t *offs = okv_malloc(&s->alloc, n * sizeof *offs), *lens = okv_malloc(&s->alloc, n * sizeof *lens);
  if (!j || !offs || !lens) {
    okv_free(&s->alloc, j);
    okv_free(&s->alloc, offs);
    okv_free(&s->alloc, lens);
    refuse(s, c, r->id, OKV_STATUS_OUT_OF_MEMORY, "out of host memory queueing a READ");
    return;
  }
  for (uint32_t i = 0; i < n; ++i) okv_remote_msg_read_entry(m, i, &offs[i], &lens[i]);
  j->req = r;
  j->batch_id = m->seq;
  j->first_index = m->u.read.first_index;
  j->n = n;
  j->offsets = offs;
  j->bytes = lens;
  r->inflight++;
  if (c->jobs_tail)
    c->jobs_tail->next_job = j;
  else
    c->jobs_head = j;
  c->jobs_tail = j;
}

static void on_close(okv_remote_server_t *s, srv_client_t *c, const okv_remote_msg_t *m) {
  srv_request_t *r = owned_request(s, c, m);
  if (!r) return;
  r->closed = true;
  r->owner = NULL;
  send_ctx_t *x = new_ctx(s, OKV_REMOTE_HEADER_BYTES);
  if (!x) {
    c->failed = true;
    return;
  }
  size_t n = okv_remote_msg_encode_empty(x->frame, x->frame_cap, OKV_REMOTE_MSG_CLOSE_OK, r->id);
  send_frame(s, c, x, n);
  slog(s, OKV_REMOTE_LOG_INFO, "%s: closed request %llu", c->name, (unsigned long long)r->id);
}

static void on_submit(okv_remote_server_t *s, srv_client_t *c, const okv_remote_msg_t *m) {
  if (!s->cfg.submit_fn) {
    reply_error(s, c, 0, OKV_STATUS_NOT_FOUND, "this server runs no jobs (SUBMIT)");
    return;
  }
  srv_job_t *j = okv_calloc(&s->alloc, 1, sizeof *j);
  if (!j) {
    reply_error(s, c, 0, OKV_STATUS_OUT_OF_MEMORY, "out of host memory queueing a SUBMIT");
    return;
  }
  j->ticket = ++s->next_ticket;
  j->client = c;
  j->next = s->jobs;
  s->jobs = j;
  slog(s, OKV_REMOTE_LOG_INFO, "%s: job %llu submitted (%u bytes)", c->name, (unsigned long long)j->ticket,
       m->u.submit.payload_bytes);
  s->cfg.submit_fn(s->cfg.submit_user, j->ticket, c->name, m->u.submit.payload, m->u.submit.payload_bytes);
}

static ucs_status_t am_cb(void *arg, const void *header, size_t header_length, void *data, size_t length,
                          const ucp_am_recv_param_t *param) {
  okv_remote_server_t *s = arg;
  (void)header;
  ucp_ep_h ep = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : NULL;
  srv_client_t *c = ep ? find_client(s, ep) : NULL;
  if (!c) {
    slog(s, OKV_REMOTE_LOG_WARN, "a message of %zu bytes without a known sender dropped", length);
    return UCS_OK;
  }
  if (c->state == CL_CLOSING || c->failed) return UCS_OK; /* closing: nothing more is read */
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    refuse(s, c, 0, OKV_STATUS_INVALID_ARGUMENT, "a rendezvous message of %zu bytes (clients send eager messages)",
           length);
    return UCS_OK;
  }
  if (header_length != 0) {
    refuse(s, c, 0, OKV_STATUS_INVALID_ARGUMENT, "an active-message header of %zu bytes (expected none)",
           header_length);
    return UCS_OK;
  }
  if (length > OKV_REMOTE_CLIENT_MSG_MAX_BYTES) {
    refuse(s, c, 0, OKV_STATUS_INVALID_ARGUMENT, "oversized message of %zu bytes (at most %u)", length,
           (unsigned)OKV_REMOTE_CLIENT_MSG_MAX_BYTES);
    return UCS_OK;
  }
  okv_remote_msg_t m;
  okv_status_t st = okv_remote_msg_parse(data, length, &m);
  if (st) {
    refuse(s, c, 0, OKV_STATUS_INVALID_ARGUMENT, "%s", okv_status_message(st));
    okv_status_free(st);
    return UCS_OK;
  }
  if (c->state == CL_HELLO && m.type != OKV_REMOTE_MSG_HELLO) {
    refuse(s, c, 0, OKV_STATUS_INVALID_ARGUMENT, "%s before HELLO", okv_remote_msg_type_name(m.type));
    return UCS_OK;
  }
  switch (m.type) {
    case OKV_REMOTE_MSG_HELLO: on_hello(s, c, &m); break;
    case OKV_REMOTE_MSG_OPEN: on_open(s, c, &m); break;
    case OKV_REMOTE_MSG_READ: on_read(s, c, &m); break;
    case OKV_REMOTE_MSG_CLOSE: on_close(s, c, &m); break;
    case OKV_REMOTE_MSG_SUBMIT: on_submit(s, c, &m); break;
    default:
      refuse(s, c, 0, OKV_STATUS_INVALID_ARGUMENT, "unexpected %s from a client", okv_remote_msg_type_name(m.type));
      break;
  }
  return UCS_OK;
}

/* ---- PUSH: queued READs become DATA messages while the client's in-flight bytes allow ---- */

static void pump(okv_remote_server_t *s, srv_client_t *c) {
  while (c->state == CL_READY && !c->failed && c->jobs_head && c->inflight_bytes < s->cfg.max_inflight_bytes) {
    read_job_t *j = c->jobs_head;
    send_ctx_t *x = new_ctx(s, OKV_REMOTE_HEADER_BYTES + OKV_REMOTE_DATA_BODY_FIXED);
    if (!x) {
      c->failed = true;
      return;
    }
    uint32_t first = j->next, k = 0;
    uint64_t bytes = 0;
    while (j->next < j->n && k < MAX_IOV && (k == 0 || bytes + j->bytes[j->next] <= s->cfg.chunk_bytes) &&
           bytes + j->bytes[j->next] <= UINT32_MAX - 64) {
      x->iov[1 + k].buffer = j->req->base + j->offsets[j->next];
      x->iov[1 + k].length = j->bytes[j->next];
      bytes += j->bytes[j->next];
      ++k;
      ++j->next;
    }
    size_t n =
        okv_remote_msg_encode_data(x->frame, x->frame_cap, j->req->id, j->batch_id, j->first_index + first, k, bytes);
    x->iov[0].buffer = x->frame;
    x->iov[0].length = n;
    x->n_iov = 1 + k;
    x->req = j->req;
    x->payload_bytes = bytes;
    x->is_push = true;
    post_send(s, c, x);
    if (j->next == j->n) {
      c->jobs_head = j->next_job;
      if (!c->jobs_head) c->jobs_tail = NULL;
      j->req->inflight--; /* the job's own hold; its sends hold the request now */
      okv_free(&s->alloc, j->offsets);
      okv_free(&s->alloc, j->bytes);
      okv_free(&s->alloc, j);
    }
  }
}

/* ---- Progress thread ---- */

/* Closes failed, timed-out and finished connections, pumps PUSH data, frees what is unreachable. Returns
 * true when work is in flight (the thread should not sleep long). Mutex held. */
static bool service(okv_remote_server_t *s) {
  bool busy = false;
  double now = okv_remote_now();
  for (srv_client_t **pc = &s->clients; *pc;) {
    srv_client_t *c = *pc;
    if (c->failed && c->state != CL_CLOSING) {
      slog(s, OKV_REMOTE_LOG_INFO, "%s: disconnected", c->name);
      begin_close(s, c, false);
    }
    if (c->state == CL_HELLO && now - c->accepted_s > s->cfg.hello_timeout_s)
      refuse(s, c, 0, OKV_STATUS_INVALID_ARGUMENT, "no HELLO within %.1f s", s->cfg.hello_timeout_s);
    if (c->state == CL_READY) pump(s, c);
    if (c->state == CL_CLOSING) close_endpoint(c, now);
    if (c->state == CL_CLOSING && c->close_req && ucp_request_check_status(c->close_req) != UCS_INPROGRESS) {
      ucp_request_free(c->close_req);
      c->close_req = NULL;
      c->close_done = true;
    }
    if (c->state == CL_CLOSING && c->close_done && c->inflight_sends == 0) {
      *pc = c->next;
      s->n_clients--;
      okv_free(&s->alloc, c);
      continue;
    }
    if (c->inflight_sends || c->jobs_head || c->state == CL_CLOSING) busy = true;
    pc = &c->next;
  }
  sweep_requests(s);
  return busy;
}

static void *progress_thread(void *arg) {
  okv_remote_server_t *s = arg;
  unsigned idle_spins = 0;
  pthread_mutex_lock(&s->mu);
  while (!atomic_load(&s->stop)) {
    unsigned n = 0;
    for (int i = 0; i < 64 && (n = ucp_worker_progress(s->worker)) != 0; ++i) {
    }
    bool busy = service(s);
    if (n != 0) {
      idle_spins = 0;
      continue;
    }
    pthread_mutex_unlock(&s->mu);
    if (busy && ++idle_spins < 64) {
      sched_yield(); /* sends in flight: keep progressing for a while before sleeping */
    } else {
      idle_spins = 0;
      okv_remote_ucx_sleep(s->worker, s->efd, busy ? 0.001 : 0.1);
    }
    pthread_mutex_lock(&s->mu);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* ---- Public API ---- */

void okv_remote_server_config_init(okv_remote_server_config_t *config) {
  if (!config) return;
  memset(config, 0, sizeof *config);
  config->listen_addr = "127.0.0.1";
  config->max_clients = 64;
  config->hello_timeout_s = 10.0;
  config->close_grace_s = 1.0;
  config->chunk_bytes = 256 * 1024;
  config->max_inflight_bytes = 16ull << 20;
}

static okv_status_t validate_config(const okv_remote_server_config_t *c, struct sockaddr_in *sa) {
  OKV_RETURN_IF_ERROR_CTX(okv_remote_parse_ipv4(c->listen_addr, c->port, sa), "server config listen_addr");
  size_t tb = c->token ? strlen(c->token) : 0;
  if (c->token && (tb == 0 || tb > OKV_REMOTE_TOKEN_MAX_BYTES))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "server config token: %zu bytes (1..256)", tb);
  bool loop = okv_remote_is_loopback(sa);
  const char *a = (c->listen_addr && c->listen_addr[0]) ? c->listen_addr : "127.0.0.1";
  if (!loop && tb == 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "server config: listening on non-loopback address %.64s needs an access token", a);
  if (!loop && c->allow_get)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "server config allow_get: one-sided gets are offered on loopback only, not on %.64s", a);
  if (c->max_clients == 0 || c->max_clients > 4096)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "server config max_clients %u (1..4096)", c->max_clients);
  if (!(c->hello_timeout_s > 0 && c->hello_timeout_s <= 3600))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "server config hello_timeout_s (0, 3600]");
  if (!(c->close_grace_s >= 0 && c->close_grace_s <= 60))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "server config close_grace_s [0, 60]");
  if (c->chunk_bytes < 1 || c->chunk_bytes > (1ull << 30))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "server config chunk_bytes %llu (1..2^30)",
                           (unsigned long long)c->chunk_bytes);
  if (c->max_inflight_bytes < 1)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "server config max_inflight_bytes 0");
  return OKV_OK;
}

/* Closes every connection (bounded), destroys the worker, then frees connections and requests: a close UCX
 * never finished is reclaimed by ucp_worker_destroy, whose callbacks may still reach them. */
static void teardown(okv_remote_server_t *s) {
  if (s->worker) {
    pthread_mutex_lock(&s->mu);
    if (s->listener) ucp_listener_destroy(s->listener);
    s->listener = NULL;
    for (srv_client_t *c = s->clients; c; c = c->next) begin_close(s, c, false);
    double deadline = okv_remote_now() + 5.0;
    while (s->clients && okv_remote_now() < deadline) {
      ucp_worker_progress(s->worker);
      service(s);
    }
    for (srv_client_t *c = s->clients; c; c = c->next) {
      if (c->close_req) ucp_request_free(c->close_req);
      c->close_req = NULL;
      drop_jobs(c, s);
    }
    if (s->address) ucp_worker_release_address(s->worker, s->address);
    ucp_worker_destroy(s->worker);
    s->worker = NULL;
    while (s->clients) {
      srv_client_t *c = s->clients;
      s->clients = c->next;
      okv_free(&s->alloc, c);
    }
    pthread_mutex_unlock(&s->mu);
  }
  while (s->jobs) {
    srv_job_t *j = s->jobs;
    s->jobs = j->next;
    okv_free(&s->alloc, j);
  }
  for (uint32_t i = 0; i < s->n_reqs; ++i) free_request_memory(s, s->reqs[i]);
  okv_free(&s->alloc, s->reqs);
  if (s->ctx) ucp_cleanup(s->ctx);
  pthread_mutex_destroy(&s->mu);
  okv_allocator_t a = s->alloc;
  okv_free(&a, s);
}

okv_status_t okv_remote_server_create(const okv_remote_server_config_t *config, const okv_allocator_t *allocator,
                                      okv_remote_server_t **out_server) {
  if (!out_server) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_server_create: out_server NULL");
  *out_server = NULL;
  if (!config) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_server_create: config NULL");
  struct sockaddr_in sa;
  OKV_RETURN_IF_ERROR(validate_config(config, &sa));
  okv_allocator_t a = allocator ? *allocator : okv_allocator_system();
  okv_remote_server_t *s = okv_calloc(&a, 1, sizeof *s);
  if (!s) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_remote_server_create: host allocator");
  s->alloc = a;
  s->cfg = *config;
  snprintf(s->listen_addr, sizeof s->listen_addr, "%s",
           (config->listen_addr && config->listen_addr[0]) ? config->listen_addr : "127.0.0.1");
  s->cfg.listen_addr = s->listen_addr;
  if (config->token) {
    s->token_bytes = strlen(config->token);
    memcpy(s->token, config->token, s->token_bytes);
  }
  s->cfg.token = NULL;
  s->efd = -1;
  pthread_mutex_init(&s->mu, NULL);

  uint64_t features = UCP_FEATURE_AM | (config->allow_get ? UCP_FEATURE_RMA : 0);
  okv_status_t st = okv_remote_ucx_context(features, true, "okv-server", &s->ctx);
  if (!st) st = okv_remote_ucx_worker(s->ctx, UCS_THREAD_MODE_SERIALIZED, &s->worker, &s->efd);
  if (!st) {
    ucp_am_handler_param_t hp;
    memset(&hp, 0, sizeof hp);
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = OKV_REMOTE_AM_ID;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    hp.cb = am_cb;
    hp.arg = s;
    st = okv_remote_ucx_status(ucp_worker_set_am_recv_handler(s->worker, &hp), "setting the server's message handler");
  }
  if (!st && config->allow_get) {
    st = okv_remote_ucx_status(ucp_worker_get_address(s->worker, &s->address, &s->address_bytes),
                               "getting the server worker's address");
    if (!st && s->address_bytes > OKV_REMOTE_ADDRESS_MAX_BYTES)
      st = okv_status_make(OKV_STATUS_INTERNAL, "the server worker's UCX address has %zu bytes (at most %u)",
                           s->address_bytes, OKV_REMOTE_ADDRESS_MAX_BYTES);
  }
  if (!st) {
    ucp_listener_params_t lp;
    memset(&lp, 0, sizeof lp);
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = (const struct sockaddr *)&sa;
    lp.sockaddr.addrlen = sizeof sa;
    lp.conn_handler.cb = conn_cb;
    lp.conn_handler.arg = s;
    ucs_status_t us = ucp_listener_create(s->worker, &lp, &s->listener);
    if (us != UCS_OK) {
      s->listener = NULL;
      st = okv_status_make(OKV_STATUS_UNAVAILABLE, "cannot listen on %s:%u: %s", s->listen_addr, (unsigned)config->port,
                           us == UCS_ERR_BUSY ? "the address is already in use" : ucs_status_string(us));
    }
  }
  if (!st) {
    ucp_listener_attr_t la;
    memset(&la, 0, sizeof la);
    la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    ucs_status_t us = ucp_listener_query(s->listener, &la);
    if (us != UCS_OK)
      st = okv_remote_ucx_status(us, "querying the listener's address");
    else
      s->port = ntohs(((const struct sockaddr_in *)&la.sockaddr)->sin_port);
  }
  if (!st) {
    if (pthread_create(&s->thread, NULL, progress_thread, s) != 0)
      st = okv_status_make(OKV_STATUS_UNAVAILABLE, "cannot start the server's progress thread: %s", strerror(errno));
    else
      s->thread_started = true;
  }
  if (st) {
    teardown(s);
    return st;
  }
  slog(s, OKV_REMOTE_LOG_INFO, "listening on %s:%u (%s, one-sided gets %s)", s->listen_addr, (unsigned)s->port,
       s->token_bytes ? "token required" : "no token", config->allow_get ? "offered" : "off");
  *out_server = s;
  return OKV_OK;
}

uint16_t okv_remote_server_port(const okv_remote_server_t *server) { return server ? server->port : 0; }

okv_status_t okv_remote_server_publish(okv_remote_server_t *s, uint64_t request_id, const void *kv, uint64_t kv_bytes,
                                       const void *admission, uint64_t admission_bytes) {
  if (!s || !kv || (admission_bytes && !admission))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_server_publish: NULL pointer");
  if (request_id == 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_server_publish: request id 0 is reserved");
  if (kv_bytes == 0) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_server_publish: kv_bytes 0");
  if (admission_bytes > OKV_REMOTE_ADMISSION_MAX_BYTES)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "okv_remote_server_publish: admission of %llu bytes (at most 2 GiB)",
                           (unsigned long long)admission_bytes);
  pthread_mutex_lock(&s->mu);
  bool dup = find_request(s, request_id) != NULL;
  pthread_mutex_unlock(&s->mu);
  if (dup)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_server_publish: request %llu already published",
                           (unsigned long long)request_id);

  srv_request_t *r = okv_calloc(&s->alloc, 1, sizeof *r);
  if (!r) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_remote_server_publish: host allocator");
  r->id = request_id;
  r->kv_bytes = kv_bytes;
  r->published = true;
  r->admission_bytes = admission_bytes;
  if (admission_bytes) {
    r->admission = okv_malloc(&s->alloc, admission_bytes);
    if (!r->admission) {
      okv_free(&s->alloc, r);
      return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_remote_server_publish: %llu admission bytes",
                             (unsigned long long)admission_bytes);
    }
    memcpy(r->admission, admission, admission_bytes);
  }
  /* The region: allocated by UCX (shared-memory capable where a transport can map it), one per request. */
  ucp_mem_map_params_t mp;
  memset(&mp, 0, sizeof mp);
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  mp.address = NULL;
  mp.length = kv_bytes;
  mp.flags = UCP_MEM_MAP_ALLOCATE;

  ucs_status_t us = ucp_mem_map(s->ctx, &mp, &r->memh);
  okv_status_t st = OKV_OK;
  if (us != UCS_OK) {
    r->memh = NULL;
    st = okv_remote_ucx_status(us, "registering the request's region (ucp_mem_map)");
  } else {
    ucp_mem_attr_t ma;
    memset(&ma, 0, sizeof ma);
    ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    us = ucp_mem_query(r->memh, &ma);
    if (us != UCS_OK || ma.length < kv_bytes)
      st = okv_status_make(OKV_STATUS_INTERNAL, "ucp_mem_query of the request's region failed");
    else
      r->base = ma.address;
  }
  if (!st) memcpy(r->base, kv, kv_bytes);
  if (!st && s->cfg.allow_get) {
    us = ucp_rkey_pack(s->ctx, r->memh, &r->rkey_buf, &r->rkey_bytes);
    if (us != UCS_OK) {
      r->rkey_buf = NULL;
      st = okv_remote_ucx_status(us, "packing the request's rkey");
    } else if (r->rkey_bytes > OKV_REMOTE_RKEY_MAX_BYTES) {
      st = okv_status_make(OKV_STATUS_INTERNAL, "packed rkey of %zu bytes (at most 4096)", r->rkey_bytes);
    }
  }
  if (!st) {
    pthread_mutex_lock(&s->mu);
    if (find_request(s, request_id)) {
      st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_server_publish: request %llu already published",
                           (unsigned long long)request_id);
    } else if (s->n_reqs == s->cap_reqs) {
      uint32_t cap = s->cap_reqs ? 2 * s->cap_reqs : 16;
      srv_request_t **nr = okv_realloc(&s->alloc, s->reqs, cap * sizeof *nr);
      if (!nr) {
        st = okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_remote_server_publish: request table");
      } else {
        s->reqs = nr;
        s->cap_reqs = cap;
      }
    }
    if (!st) s->reqs[s->n_reqs++] = r;
    pthread_mutex_unlock(&s->mu);
  }
  if (st) {
    free_request_memory(s, r);
    return okv_status_annotate(st, "publishing request %llu", (unsigned long long)request_id);
  }
  return OKV_OK;
}

okv_status_t okv_remote_server_unpublish(okv_remote_server_t *s, uint64_t request_id) {
  if (!s) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_server_unpublish: server NULL");
  pthread_mutex_lock(&s->mu);
  srv_request_t *r = find_request(s, request_id);
  okv_status_t st = OKV_OK;
  if (!r || !r->published)
    st = okv_status_make(OKV_STATUS_NOT_FOUND, "okv_remote_server_unpublish: request %llu is not published",
                         (unsigned long long)request_id);
  else
    r->published = false;
  pthread_mutex_unlock(&s->mu);
  if (!st) ucp_worker_signal(s->worker); /* the progress thread frees it when no client holds it */
  return st;
}

okv_status_t okv_remote_server_submit_done(okv_remote_server_t *s, uint64_t ticket, uint64_t request_id,
                                           okv_status_code_t status, const char *message) {
  if (!s || ticket == 0 || (unsigned)status >= OKV_STATUS_CODE_COUNT)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "okv_remote_server_submit_done: NULL server, ticket 0 or "
                           "an unknown status code");
  pthread_mutex_lock(&s->mu);
  okv_status_t st = OKV_OK;
  srv_job_t **pj = &s->jobs;
  while (*pj && (*pj)->ticket != ticket) pj = &(*pj)->next;
  srv_job_t *j = *pj;
  srv_request_t *r = status == OKV_STATUS_OK ? find_request(s, request_id) : NULL;
  if (!j) {
    st = okv_status_make(OKV_STATUS_NOT_FOUND, "okv_remote_server_submit_done: no job %llu pending",
                         (unsigned long long)ticket);
  } else if (status == OKV_STATUS_OK && (!r || !r->published || r->owner || r->reserved_for)) {
    st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                         "okv_remote_server_submit_done: request %llu is not published, or already taken",
                         (unsigned long long)request_id);
  } else {
    *pj = j->next;
    srv_client_t *c = j->client;
    okv_free(&s->alloc, j);
    if (!c || c->state != CL_READY || c->failed) {
      if (r) r->closed = true; /* nobody will open it */
      st = okv_status_make(OKV_STATUS_NOT_FOUND, "okv_remote_server_submit_done: job %llu's client is gone",
                           (unsigned long long)ticket);
    } else if (status != OKV_STATUS_OK) {
      reply_error(s, c, 0, status, message ? message : "job failed");
      slog(s, OKV_REMOTE_LOG_WARN, "%s: job %llu failed: %s", c->name, (unsigned long long)ticket,
           message ? message : "job failed");
    } else {
      send_ctx_t *x = new_ctx(s, OKV_REMOTE_HEADER_BYTES);
      if (!x) {
        c->failed = true;
        r->closed = true;
      } else {
        r->reserved_for = c;
        size_t n = okv_remote_msg_encode_empty(x->frame, x->frame_cap, OKV_REMOTE_MSG_SUBMIT_OK, request_id);
        send_frame(s, c, x, n);
        slog(s, OKV_REMOTE_LOG_INFO, "%s: job %llu done: request %llu", c->name, (unsigned long long)ticket,
             (unsigned long long)request_id);
      }
    }
  }
  pthread_mutex_unlock(&s->mu);
  ucp_worker_signal(s->worker);
  return st;
}

okv_status_t okv_remote_server_stats(okv_remote_server_t *s, okv_remote_server_stats_t *out_stats) {
  if (!s || !out_stats) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_server_stats: NULL");
  pthread_mutex_lock(&s->mu);
  *out_stats = s->stats;
  out_stats->n_clients = s->n_clients;
  out_stats->n_requests = s->n_reqs;
  out_stats->n_open = 0;
  for (uint32_t i = 0; i < s->n_reqs; ++i) out_stats->n_open += s->reqs[i]->owner && !s->reqs[i]->closed;
  pthread_mutex_unlock(&s->mu);
  return OKV_OK;
}

void okv_remote_server_destroy(okv_remote_server_t *s) {
  if (!s) return;
  if (s->thread_started) {
    atomic_store(&s->stop, 1);
    ucp_worker_signal(s->worker);
    pthread_join(s->thread, NULL);
  }
  teardown(s);
}
