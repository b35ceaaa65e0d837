/* The remote tier's client (include/oasiskv/remote.h): connection and
 * token exchange, open / close of requests, batched reads over the GET path
 * (ucp_get_nbx with the request's rkey) or the PUSH path (READ messages, DATA
 * replies scattered into the batch's buffers), and failure handling (a lost
 * peer fails every batch in flight and every later call with UNAVAILABLE
 * naming it).
 *
 * Threads: no thread of its own. Every call takes the client mutex and
 * progresses the worker itself; waits release the mutex while they sleep on
 * the worker's event fd, so several threads may wait at once. Control
 * round trips (connect, open, close) are serialized by a second mutex taken
 * before the first. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "oasiskv/remote.h"
#include "remote_msg.h"
#include "remote_ucx.h"

typedef struct cli_request {
  uint64_t id;
  uint64_t kv_bytes;
  uint64_t remote_base;
  ucp_rkey_h rkey; /* GET path only */
  okv_remote_path_t path;
  const uint8_t *mapped; /* GET over shared memory: the region mapped here (ucp_rkey_ptr); gets are memcpy */
  uint8_t *populated;    /* per POPULATE_CHUNK of the mapping: page tables filled already */
} cli_request_t;

/* Page tables of a mapped region are filled a chunk at a time, on the first get that touches the chunk: one
 * madvise(MADV_POPULATE_READ) instead of a page fault per 4 KiB page (measured here: ~0.6 us per page in bulk
 * against ~50 us per fault). */
#define POPULATE_CHUNK (2u << 20)
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

struct okv_remote_batch_t {
  okv_remote_client_t *client;
  okv_remote_batch_t *next, *prev;
  uint64_t id, request_id;
  okv_remote_path_t path;
  uint32_t n;
  okv_remote_get_t *gets;
  uint8_t *got; /* PUSH: gets already delivered (a duplicate DATA is a protocol error) */
  uint32_t n_done;
  uint32_t ops_pending; /* UCX operations of this batch not completed yet (gets, READ sends) */
  bool abandoned;       /* the connection was lost with ops_pending > 0 that UCX never completed (gets on the
                           GET endpoint, which has no peer-failure handling): done for the caller, kept
                           allocated until the client is destroyed in case a callback still comes */
  uint64_t bytes;
  bool failed;
};

/* A control message or READ in flight: its frame lives until the send completes. */
typedef struct cli_send {
  okv_remote_client_t *client;
  okv_remote_batch_t *batch; /* READ sends: the batch they belong to */
  size_t n;
  uint8_t frame[];
} cli_send_t;

struct okv_remote_client_t {
  okv_allocator_t alloc;
  okv_remote_client_config_t cfg;
  char peer[80];
  pthread_mutex_t ctrl_mu; /* one control round trip at a time; taken before mu */
  pthread_mutex_t mu;

  ucp_context_h ctx;
  ucp_worker_h worker;
  int efd;
  ucp_ep_h ep; /* the control endpoint (client-server, peer-failure handling): messages, PUSH data */
  bool ep_closed;
  ucp_ep_h data_ep; /* GET: an endpoint to the server worker's address without peer-failure handling, so
                       shared-memory transports qualify (UCX 1.13 offers peer failure on tcp and cma only);
                       failures are learned through the control endpoint */
  bool data_ep_closed;

  bool lost;        /* the error handler ran or the server broke the protocol: fail everything */
  bool failed;      /* the connection is gone (after lost is handled) */
  char reason[480]; /* why, for UNAVAILABLE messages */
  char server_says[OKV_REMOTE_ERROR_TEXT_MAX_BYTES + 1]; /* the last ERROR text received */
  okv_status_code_t server_code;

  bool server_get;
  uint32_t max_read_entries;

  struct {
    okv_remote_msg_type_t expect; /* 0: no control reply awaited */
    uint64_t request_id;
    bool done;              /* the reply (or an ERROR for it) arrived */
    bool closing;           /* it was an ERROR after which the server closes the connection */
    okv_status_code_t code; /* OK or the ERROR's code */
    uint64_t kv_bytes, admission_bytes, remote_base;
    void *admission;
    uint8_t rkey[OKV_REMOTE_RKEY_MAX_BYTES];
    uint32_t rkey_bytes;
    uint32_t hello_flags, max_read_entries;
    uint8_t *address; /* HELLO_OK's server worker address (allocated) */
    uint32_t address_bytes;
  } ctrl;

  cli_request_t *reqs;
  uint32_t n_reqs, cap_reqs;
  okv_remote_batch_t *batches;
  okv_remote_batch_t *abandoned; /* released batches with abandoned operations (freed at destroy) */
  uint64_t next_batch_id;
  uint32_t sends_inflight;
  double last_progress_s; /* monotonic time of the last progress() */
};

/* Done for the caller: every get landed, or the batch failed and UCX holds none of its operations. */
static bool batch_done(const okv_remote_batch_t *b) {
  return (b->ops_pending == 0 || b->abandoned) && (b->failed || b->n_done == b->n);
}

/* ---- Failure ---- */

/* Marks the connection lost with a reason (first reason wins). Safe inside UCX callbacks. */
static void lose(okv_remote_client_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void lose(okv_remote_client_t *c, const char *fmt, ...) {
  if (c->lost) return;
  c->lost = true;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->reason, sizeof c->reason, fmt, ap);
  va_end(ap);
}

static okv_status_t unavailable(const okv_remote_client_t *c) {
  if (c->server_says[0])
    return okv_status_make(OKV_STATUS_UNAVAILABLE, "remote server %s unavailable: %s (server: %s)", c->peer, c->reason,
                           c->server_says);
  return okv_status_make(OKV_STATUS_UNAVAILABLE, "remote server %s unavailable: %s", c->peer, c->reason);
}

/* After a loss: force-closes the endpoint, which completes every UCX operation in flight with an error,
 * and fails every batch. Mutex held; never inside a UCX callback. */
static void handle_loss(okv_remote_client_t *c) {
  if (!c->lost || c->failed) return;
  c->failed = true;
  ucp_request_param_t p;
  memset(&p, 0, sizeof p);
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  if (c->data_ep && !c->data_ep_closed) {
    void *r = ucp_ep_close_nbx(c->data_ep, &p);
    c->data_ep_closed = true;
    (void)okv_remote_ucx_wait(c->worker, r, okv_remote_now() + 5.0); /* its status does not matter now */
  }
  if (c->ep && !c->ep_closed) {
    void *r = ucp_ep_close_nbx(c->ep, &p);
    c->ep_closed = true;
    (void)okv_remote_ucx_wait(c->worker, r, okv_remote_now() + 5.0);
  }
  for (okv_remote_batch_t *b = c->batches; b; b = b->next) {
    if (b->n_done < b->n) b->failed = true;
    if (b->ops_pending) b->abandoned = true; /* UCX purges nothing on an endpoint without error handling */
  }
}

/* Progresses the worker until it has nothing to do, then handles a loss. Mutex held. Returns the events. */
static unsigned progress(okv_remote_client_t *c) {
  unsigned total = 0, n;
  while ((n = ucp_worker_progress(c->worker)) != 0) total += n;
  handle_loss(c);
  c->last_progress_s = okv_remote_now();
  return total;
}

/* progress() at most every 0.5 ms: posting a batch that completes at once (reads from a mapped region) does
 * not pay the transports' polling each time, and a lost peer is still noticed within that much activity. */
static void maybe_progress(okv_remote_client_t *c) {
  if (okv_remote_now() - c->last_progress_s >= 0.0005) progress(c);
}

/* One wait step: progress, spin briefly, then sleep on the event fd (mutex released) up to `max_s`. */
static void wait_step(okv_remote_client_t *c, double max_s) {
  if (progress(c)) return;
  for (int i = 0; i < 32; ++i)
    if (progress(c)) return;
  if (c->failed || max_s <= 0) return;
  if (ucp_worker_arm(c->worker) == UCS_ERR_BUSY) return;
  pthread_mutex_unlock(&c->mu);
  okv_remote_ucx_sleep(c->worker, c->efd, max_s < 0.05 ? max_s : 0.05);
  pthread_mutex_lock(&c->mu);
}

static void err_cb(void *arg, ucp_ep_h ep, ucs_status_t status) {
  okv_remote_client_t *c = arg;
  (void)ep;
  lose(c, "connection lost (%s)", ucs_status_string(status));
}

/* ---- Sends ---- */

static void send_finish(okv_remote_client_t *c, cli_send_t *x, ucs_status_t st) {
  c->sends_inflight--;
  if (x->batch) {
    x->batch->ops_pending--;
    if (st != UCS_OK) x->batch->failed = true;
  }
  if (st != UCS_OK) lose(c, "sending a message failed (%s)", ucs_status_string(st));
  okv_free(&c->alloc, x);
}

static void send_cb(void *request, ucs_status_t status, void *user_data) {
  cli_send_t *x = user_data;
  send_finish(x->client, x, status);
  ucp_request_free(request);
}

static cli_send_t *new_send(okv_remote_client_t *c, size_t cap) {
  cli_send_t *x = okv_malloc(&c->alloc, sizeof *x + cap);
  if (x) {
    x->client = c;
    x->batch = NULL;
    x->n = 0;
  }
  return x;
}

/* Sends x->frame[0..x->n) as one eager active message (the server identifies us by the reply endpoint). */
static void post(okv_remote_client_t *c, cli_send_t *x) {
  c->sends_inflight++;
  if (x->batch) x->batch->ops_pending++;
  ucp_request_param_t p;
  memset(&p, 0, sizeof p);
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  p.cb.send = send_cb;
  p.user_data = x;
  p.flags = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
  ucs_status_ptr_t r = ucp_am_send_nbx(c->ep, OKV_REMOTE_AM_ID, NULL, 0, x->frame, x->n, &p);
  if (r == NULL)
    send_finish(c, x, UCS_OK);
  else if (UCS_PTR_IS_ERR(r))
    send_finish(c, x, UCS_PTR_STATUS(r));
}

/* ---- Messages from the server ---- */

static okv_remote_batch_t *find_batch(okv_remote_client_t *c, uint64_t id) {
  for (okv_remote_batch_t *b = c->batches; b; b = b->next)
    if (b->id == id) return b;
  return NULL;
}

static void on_data(okv_remote_client_t *c, const okv_remote_msg_t *m) {
  okv_remote_batch_t *b = find_batch(c, m->seq);
  uint32_t first = m->u.data.first_index, n = m->u.data.n_entries;
  if (!b || b->path != OKV_REMOTE_PATH_PUSH || b->request_id != m->request_id || b->failed) {
    lose(c, "server sent DATA for unknown batch %llu", (unsigned long long)m->seq);
    return;
  }
  if (first >= b->n || n > b->n - first) {
    lose(c, "server sent DATA for gets [%u, %u) of a batch of %u", first, first + n, b->n);
    return;
  }
  uint64_t want = 0;
  for (uint32_t i = first; i < first + n; ++i) {
    if (b->got[i]) {
      lose(c, "server sent get %u of batch %llu twice", i, (unsigned long long)b->id);
      return;
    }
    want += b->gets[i].bytes;
  }
  if (want != m->u.data.payload_bytes) {
    lose(c, "server sent %llu bytes for gets needing %llu", (unsigned long long)m->u.data.payload_bytes,
         (unsigned long long)want);
    return;
  }
  const uint8_t *p = m->u.data.payload;
  for (uint32_t i = first; i < first + n; ++i) {
    memcpy(b->gets[i].local_ptr, p, b->gets[i].bytes);
    p += b->gets[i].bytes;
    b->got[i] = 1;
  }
  b->n_done += n;
}

static void on_control(okv_remote_client_t *c, const okv_remote_msg_t *m) {
  if (m->type == OKV_REMOTE_MSG_ERROR) {
    snprintf(c->server_says, sizeof c->server_says, "%.*s", (int)m->u.error.text_bytes, m->u.error.text);
    c->server_code = m->u.error.code;
    bool closing = (m->u.error.flags & OKV_REMOTE_ERROR_CLOSING) != 0;
    if (c->ctrl.expect && !c->ctrl.done && (m->request_id == 0 || m->request_id == c->ctrl.request_id)) {
      c->ctrl.code = m->u.error.code;
      c->ctrl.closing = closing;
      c->ctrl.done = true;
    }
    if (closing) lose(c, "refused by the server, which closed the connection");
    return;
  }
  /* SUBMIT_OK names the request the job published (any nonzero id); other replies echo the request id. */
  bool id_ok = m->type == OKV_REMOTE_MSG_SUBMIT_OK || m->request_id == c->ctrl.request_id;
  if (!c->ctrl.expect || c->ctrl.done || m->type != c->ctrl.expect || !id_ok) {
    lose(c, "server sent an unexpected %s", okv_remote_msg_type_name(m->type));
    return;
  }
  if (m->type == OKV_REMOTE_MSG_HELLO_OK) {
    c->ctrl.hello_flags = m->u.hello_ok.flags;
    c->ctrl.max_read_entries = m->u.hello_ok.max_read_entries;
    if (m->u.hello_ok.address_bytes) {
      c->ctrl.address = okv_malloc(&c->alloc, m->u.hello_ok.address_bytes);
      if (!c->ctrl.address) {
        c->ctrl.code = OKV_STATUS_OUT_OF_MEMORY;
        c->ctrl.done = true;
        return;
      }
      memcpy(c->ctrl.address, m->u.hello_ok.address, m->u.hello_ok.address_bytes);
      c->ctrl.address_bytes = m->u.hello_ok.address_bytes;
    }
  } else if (m->type == OKV_REMOTE_MSG_SUBMIT_OK) {
    c->ctrl.request_id = m->request_id;
  } else if (m->type == OKV_REMOTE_MSG_OPEN_OK) {
    uint64_t adm = m->u.open_ok.admission_bytes;
    if (adm > c->cfg.max_admission_bytes) {
      lose(c, "server sent an admission blob of %llu bytes (max_admission_bytes %llu)", (unsigned long long)adm,
           (unsigned long long)c->cfg.max_admission_bytes);
      return;
    }
    if (adm) {
      c->ctrl.admission = okv_malloc(&c->alloc, adm);
      if (!c->ctrl.admission) {
        c->ctrl.code = OKV_STATUS_OUT_OF_MEMORY;
        c->ctrl.done = true;
        return;
      }
      memcpy(c->ctrl.admission, m->u.open_ok.admission, adm);
    }
    c->ctrl.kv_bytes = m->u.open_ok.kv_bytes;
    c->ctrl.admission_bytes = adm;
    c->ctrl.remote_base = m->u.open_ok.remote_base;
    c->ctrl.rkey_bytes = m->u.open_ok.rkey_bytes;
    if (m->u.open_ok.rkey_bytes) memcpy(c->ctrl.rkey, m->u.open_ok.rkey, m->u.open_ok.rkey_bytes);
  }
  c->ctrl.code = OKV_STATUS_OK;
  c->ctrl.done = true;
}

static ucs_status_t am_cb(void *arg, const void *header, size_t header_length, void *data, size_t length,
                          const ucp_am_recv_param_t *param) {
  okv_remote_client_t *c = arg;
  (void)header;
  if (c->failed) return UCS_OK;
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) || header_length != 0) {
    lose(c, "server sent a message this protocol does not use (rendezvous or header)");
    return UCS_OK;
  }
  okv_remote_msg_t m;
  okv_status_t st = okv_remote_msg_parse(data, length, &m);
  if (st) {
    lose(c, "server sent a %s", okv_status_message(st));
    okv_status_free(st);
    return UCS_OK;
  }
  if (c->lost && m.type != OKV_REMOTE_MSG_ERROR) return UCS_OK; /* an ERROR still tells why */
  if (m.type == OKV_REMOTE_MSG_DATA)
    on_data(c, &m);
  else if (m.type == OKV_REMOTE_MSG_HELLO_OK || m.type == OKV_REMOTE_MSG_OPEN_OK || m.type == OKV_REMOTE_MSG_CLOSE_OK ||
           m.type == OKV_REMOTE_MSG_SUBMIT_OK || m.type == OKV_REMOTE_MSG_ERROR)
    on_control(c, &m);
  else
    lose(c, "server sent a %s, which only clients send", okv_remote_msg_type_name(m.type));
  return UCS_OK;
}

/* ---- Control round trips ---- */

/* Sends x (ownership passes) and waits for the reply of type `expect` for request_id, or an ERROR for it.
 * ctrl_mu and mu held. Returns OK once a reply came (c->ctrl.code: OK or the ERROR's code; see ctrl_error),
 * else UNAVAILABLE (connection lost, or no reply within timeout_s: the connection is then given up). */
static okv_status_t roundtrip(okv_remote_client_t *c, cli_send_t *x, okv_remote_msg_type_t expect, uint64_t request_id,
                              double timeout_s) {
  memset(&c->ctrl, 0, sizeof c->ctrl);
  c->ctrl.expect = expect;
  c->ctrl.request_id = request_id;
  post(c, x);
  double deadline = okv_remote_now() + timeout_s;
  while (!c->ctrl.done && !c->failed) {
    double left = deadline - okv_remote_now();
    if (left <= 0) {
      lose(c, "no %s within %.1f s", okv_remote_msg_type_name(expect), timeout_s);
      handle_loss(c);
      break;
    }
    wait_step(c, left);
  }
  c->ctrl.expect = 0;
  if (!c->ctrl.done) {
    okv_free(&c->alloc, c->ctrl.admission);
    c->ctrl.admission = NULL;
    return unavailable(c);
  }
  return OKV_OK;
}

/* The status for a control reply that was an ERROR (or a local failure while taking the reply): a refusal
 * that closed the connection is UNAVAILABLE with the server's reason; otherwise the server's code. */
static okv_status_t ctrl_error(const okv_remote_client_t *c, const char *what) {
  if (c->ctrl.closing)
    return okv_status_make(OKV_STATUS_UNAVAILABLE, "remote server %s refused %s and closed the connection: %s", c->peer,
                           what, c->server_says);
  return okv_status_make(c->ctrl.code, "remote server %s: %s: %s", c->peer, what,
                         c->ctrl.code == OKV_STATUS_OUT_OF_MEMORY ? "out of host memory" : c->server_says);
}

/* ---- Public API: paths and config ---- */

const char *okv_remote_path_name(okv_remote_path_t path) {
  switch (path) {
    case OKV_REMOTE_PATH_AUTO: return "auto";
    case OKV_REMOTE_PATH_GET: return "get";
    case OKV_REMOTE_PATH_PUSH: return "push";
    default: return "unknown";
  }
}

okv_status_t okv_remote_path_parse(const char *name, okv_remote_path_t *out_path) {
  if (!name || !out_path) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_path_parse: NULL");
  for (int p = 0; p < OKV_REMOTE_PATH_COUNT; ++p) {
    if (!strcmp(name, okv_remote_path_name((okv_remote_path_t)p))) {
      *out_path = (okv_remote_path_t)p;
      return OKV_OK;
    }
  }
  return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "unknown remote path '%.32s' (auto, get, push)", name);
}

void okv_remote_client_config_init(okv_remote_client_config_t *config) {
  if (!config) return;
  memset(config, 0, sizeof *config);
  config->path = OKV_REMOTE_PATH_AUTO;
  config->connect_timeout_s = 10.0;
  config->reply_timeout_s = 30.0;
  config->max_admission_bytes = OKV_REMOTE_ADMISSION_MAX_BYTES;
}

/* ---- Public API: connection ---- */

static void free_batch(okv_remote_client_t *c, okv_remote_batch_t *b);

/* Frees everything; the endpoints are closed already. Batches are freed after the worker: its destruction
 * may still complete their operations. */
static void free_client(okv_remote_client_t *c) {
  for (uint32_t i = 0; i < c->n_reqs; ++i) {
    if (c->reqs[i].rkey) ucp_rkey_destroy(c->reqs[i].rkey);
    okv_free(&c->alloc, c->reqs[i].populated);
  }
  okv_free(&c->alloc, c->reqs);
  if (c->worker) ucp_worker_destroy(c->worker);
  if (c->ctx) ucp_cleanup(c->ctx);
  okv_remote_batch_t *lists[2] = {c->batches, c->abandoned};
  for (int k = 0; k < 2; ++k) {
    while (lists[k]) {
      okv_remote_batch_t *b = lists[k];
      lists[k] = b->next;
      free_batch(c, b);
    }
  }
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->ctrl_mu);
  okv_allocator_t a = c->alloc;
  okv_free(&a, c);
}

/* Closes the endpoints: gracefully (flush) when the connection is alive, each bounded by `timeout_s` (a
 * flush that never finishes, the peer having stopped reading, is reclaimed by the worker's destruction). */
static void close_ep(okv_remote_client_t *c, double timeout_s) {
  ucp_request_param_t p;
  memset(&p, 0, sizeof p);
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = c->lost ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  if (c->data_ep && !c->data_ep_closed) {
    /* Always forced: a flushed close of this endpoint (no peer-failure handling) crashed UCX 1.13's tcp
     * transport in the server now and then (tests/remote, about one run in three); its reads are finished
     * before this is called, so nothing is lost. */
    ucp_request_param_t pd = p;
    pd.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void *r = ucp_ep_close_nbx(c->data_ep, &pd);
    c->data_ep_closed = true;
    (void)okv_remote_ucx_wait(c->worker, r, okv_remote_now() + timeout_s);
  }
  if (c->ep && !c->ep_closed) {
    void *r = ucp_ep_close_nbx(c->ep, &p);
    c->ep_closed = true;
    (void)okv_remote_ucx_wait(c->worker, r, okv_remote_now() + timeout_s);
  }
}

/* GET: connects the data endpoint to the server worker's address from HELLO_OK. Mutex held. */
static okv_status_t connect_data_ep(okv_remote_client_t *c) {
  ucp_ep_params_t ep;
  memset(&ep, 0, sizeof ep);
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.address = (const ucp_address_t *)c->ctrl.address;
  ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
  ucs_status_t us = ucp_ep_create(c->worker, &ep, &c->data_ep);
  if (us != UCS_OK) {
    c->data_ep = NULL;
    return okv_remote_ucx_status(us, "connecting the one-sided get endpoint");
  }
  /* Finish the wire-up now (a flush completes once the endpoint is connected). */
  ucp_request_param_t p;
  memset(&p, 0, sizeof p);
  us = okv_remote_ucx_wait(c->worker, ucp_ep_flush_nbx(c->data_ep, &p), okv_remote_now() + c->cfg.connect_timeout_s);
  if (us != UCS_OK) {
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    (void)okv_remote_ucx_wait(c->worker, ucp_ep_close_nbx(c->data_ep, &p), okv_remote_now() + 5.0); /* unusable */
    c->data_ep = NULL;
    return okv_remote_ucx_status(us, "connecting the one-sided get endpoint (flush)");
  }
  return OKV_OK;
}

okv_status_t okv_remote_client_connect(const char *addr, uint16_t port, const char *token,
                                       const okv_remote_client_config_t *config, const okv_allocator_t *allocator,
                                       okv_remote_client_t **out_client) {
  if (!out_client) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_client_connect: out_client NULL");
  *out_client = NULL;
  okv_remote_client_config_t cfg;
  if (config)
    cfg = *config;
  else
    okv_remote_client_config_init(&cfg);
  if (cfg.path >= OKV_REMOTE_PATH_COUNT)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "client config path %d unknown", (int)cfg.path);
  if (!(cfg.connect_timeout_s > 0 && cfg.connect_timeout_s <= 3600) ||
      !(cfg.reply_timeout_s > 0 && cfg.reply_timeout_s <= 3600))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "client config timeouts must be in (0, 3600] s");
  if (!addr || !addr[0]) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_client_connect: no address");
  if (port == 0) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_client_connect: port 0");
  size_t tb = token ? strlen(token) : 0;
  if (tb > OKV_REMOTE_TOKEN_MAX_BYTES)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_client_connect: token of %zu bytes (at most 256)",
                           tb);
  struct sockaddr_in sa;
  OKV_RETURN_IF_ERROR(okv_remote_parse_ipv4(addr, port, &sa));

  okv_allocator_t a = allocator ? *allocator : okv_allocator_system();
  okv_remote_client_t *c = okv_calloc(&a, 1, sizeof *c);
  if (!c) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_remote_client_connect: host allocator");
  c->alloc = a;
  c->cfg = cfg;
  c->efd = -1;
  c->next_batch_id = 1;
  snprintf(c->peer, sizeof c->peer, "%s:%u", addr, (unsigned)port);
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->ctrl_mu, NULL);

  uint64_t features = UCP_FEATURE_AM | (cfg.path == OKV_REMOTE_PATH_PUSH ? 0 : UCP_FEATURE_RMA);
  okv_status_t st = okv_remote_ucx_context(features, false, "okv-client", &c->ctx);
  if (!st) st = okv_remote_ucx_worker(c->ctx, UCS_THREAD_MODE_SERIALIZED, &c->worker, &c->efd);
  if (!st) {
    ucp_am_handler_param_t hp;
    memset(&hp, 0, sizeof hp);
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = OKV_REMOTE_AM_ID;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    hp.cb = am_cb;
    hp.arg = c;
    st = okv_remote_ucx_status(ucp_worker_set_am_recv_handler(c->worker, &hp), "setting the client's message handler");
  }
  if (!st) {
    ucp_ep_params_t ep;
    memset(&ep, 0, sizeof ep);
    ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep.sockaddr.addr = (const struct sockaddr *)&sa;
    ep.sockaddr.addrlen = sizeof sa;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = err_cb;
    ep.err_handler.arg = c;
    ucs_status_t us = ucp_ep_create(c->worker, &ep, &c->ep);
    if (us != UCS_OK) {
      c->ep = NULL;
      st = okv_status_make(OKV_STATUS_UNAVAILABLE, "remote server %s unavailable: connecting: %s", c->peer,
                           ucs_status_string(us));
    }
  }
  if (!st) {
    cli_send_t *x = new_send(c, OKV_REMOTE_HEADER_BYTES + 8 + OKV_REMOTE_TOKEN_MAX_BYTES);
    if (!x) {
      st = okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_remote_client_connect: host allocator");
    } else {
      x->n =
          okv_remote_msg_encode_hello(x->frame, OKV_REMOTE_HEADER_BYTES + 8 + OKV_REMOTE_TOKEN_MAX_BYTES, token,
                                      (uint32_t)tb, cfg.path == OKV_REMOTE_PATH_PUSH ? 0 : OKV_REMOTE_HELLO_WANTS_GET);
      pthread_mutex_lock(&c->ctrl_mu);
      pthread_mutex_lock(&c->mu);
      st = roundtrip(c, x, OKV_REMOTE_MSG_HELLO_OK, 0, cfg.connect_timeout_s);
      if (!st && c->ctrl.code != OKV_STATUS_OK) {
        st = okv_status_make(c->ctrl.code, "remote server %s refused the connection: %s", c->peer, c->server_says);
        lose(c, "refused by the server");
      }
      if (!st) {
        c->server_get = (c->ctrl.hello_flags & OKV_REMOTE_HELLO_OK_GET) != 0;
        c->max_read_entries = c->ctrl.max_read_entries;
        if (cfg.path == OKV_REMOTE_PATH_GET && !c->server_get) {
          st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                               "remote server %s does not offer one-sided gets (client config path 'get')", c->peer);
        } else if (c->server_get && cfg.path != OKV_REMOTE_PATH_PUSH) {
          st = connect_data_ep(c);
          if (st && cfg.path == OKV_REMOTE_PATH_AUTO) {
            okv_status_free(st); /* AUTO: reads go through the server instead */
            st = OKV_OK;
            c->server_get = false;
          }
        }
      }
      okv_free(&c->alloc, c->ctrl.address);
      c->ctrl.address = NULL;
      pthread_mutex_unlock(&c->mu);
      pthread_mutex_unlock(&c->ctrl_mu);
    }
  }
  if (st) {
    if (c->worker) {
      pthread_mutex_lock(&c->mu);
      handle_loss(c);
      close_ep(c, 2.0);
      pthread_mutex_unlock(&c->mu);
    }
    free_client(c);
    const char *tls = getenv("UCX_TLS");
    if (okv_status_code(st) == OKV_STATUS_UNAVAILABLE && tls && !strstr(tls, "tcp")) {
      okv_status_t hinted = okv_status_make(OKV_STATUS_UNAVAILABLE,
                                            "%s (UCX 1.13 connects client and server through a tcp interface: "
                                            "UCX_TLS=%.64s has none; add it, e.g. UCX_TLS=shm,tcp)",
                                            okv_status_message(st), tls);
      okv_status_free(st);
      st = hinted;
    }
    return st;
  }
  *out_client = c;
  return OKV_OK;
}

const char *okv_remote_client_peer(const okv_remote_client_t *client) { return client ? client->peer : ""; }

void okv_remote_client_destroy(okv_remote_client_t *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  /* Batches still in flight: wait (bounded), then give the connection up so nothing writes into them. */
  double deadline = okv_remote_now() + c->cfg.reply_timeout_s;
  for (;;) {
    bool pending = c->sends_inflight > 0;
    for (okv_remote_batch_t *b = c->batches; b; b = b->next)
      if (!batch_done(b)) pending = true;
    if (!pending || c->failed) break;
    if (okv_remote_now() > deadline) {
      lose(c, "destroyed with reads in flight");
      handle_loss(c);
      break;
    }
    wait_step(c, deadline - okv_remote_now());
  }
  for (uint32_t i = 0; i < c->n_reqs; ++i) {
    if (c->reqs[i].rkey) ucp_rkey_destroy(c->reqs[i].rkey);
    c->reqs[i].rkey = NULL;
    c->reqs[i].mapped = NULL;
  }
  close_ep(c, 5.0);
  pthread_mutex_unlock(&c->mu);
  free_client(c);
}

/* ---- Public API: requests ---- */

/* GET: where UCX maps the remote region into this process (shared-memory transports), reads are memcpy from
 * that mapping; otherwise ucp_get_nbx. */
static void map_region(okv_remote_client_t *c, cli_request_t *r) {
  void *ptr = NULL;
  if (ucp_rkey_ptr(r->rkey, r->remote_base, &ptr) != UCS_OK || !ptr) return;
  uint64_t n_chunks = (r->kv_bytes + POPULATE_CHUNK - 1) / POPULATE_CHUNK;
  r->populated = okv_calloc(&c->alloc, n_chunks, 1);
  if (r->populated) r->mapped = ptr; /* without the table: ucp_get_nbx as elsewhere */
}

/* Fills the page tables of the chunks [offset, offset + bytes) touches. */
static void populate(cli_request_t *r, uint64_t offset, uint64_t bytes) {
  for (uint64_t k = offset / POPULATE_CHUNK; k <= (offset + bytes - 1) / POPULATE_CHUNK; ++k) {
    if (r->populated[k]) continue;
    r->populated[k] = 1;
    uintptr_t lo = (uintptr_t)(r->mapped + k * POPULATE_CHUNK) & ~(uintptr_t)4095;
    uint64_t end = (k + 1) * POPULATE_CHUNK < r->kv_bytes ? (k + 1) * POPULATE_CHUNK : r->kv_bytes;
    uintptr_t hi = (uintptr_t)(r->mapped + end);
    (void)madvise((void *)lo, hi - lo, MADV_POPULATE_READ); /* a failure (old kernel) leaves page faults */
  }
}

static cli_request_t *find_req(okv_remote_client_t *c, uint64_t id) {
  for (uint32_t i = 0; i < c->n_reqs; ++i)
    if (c->reqs[i].id == id) return &c->reqs[i];
  return NULL;
}

okv_status_t okv_remote_client_open(okv_remote_client_t *c, uint64_t request_id, uint64_t *out_kv_bytes,
                                    void **out_admission, uint64_t *out_admission_bytes) {
  if (!c || !out_kv_bytes || !out_admission || !out_admission_bytes)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_client_open: NULL pointer");
  *out_admission = NULL;
  *out_kv_bytes = *out_admission_bytes = 0;
  if (request_id == 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_client_open: request id 0 is reserved");
  pthread_mutex_lock(&c->ctrl_mu);
  pthread_mutex_lock(&c->mu);
  okv_status_t st = OKV_OK;
  progress(c);
  if (c->failed) {
    st = unavailable(c);
  } else if (find_req(c, request_id)) {
    st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "request %llu is already open on this client",
                         (unsigned long long)request_id);
  } else if (c->n_reqs == c->cap_reqs) {
    uint32_t cap = c->cap_reqs ? 2 * c->cap_reqs : 8;
    cli_request_t *nr = okv_realloc(&c->alloc, c->reqs, cap * sizeof *nr);
    if (!nr) {
      st = okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_remote_client_open: host allocator");
    } else {
      c->reqs = nr;
      c->cap_reqs = cap;
    }
  }
  cli_send_t *x = NULL;
  if (!st) {
    x = new_send(c, OKV_REMOTE_HEADER_BYTES);
    if (!x) st = okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_remote_client_open: host allocator");
  }
  if (!st) {
    x->n = okv_remote_msg_encode_empty(x->frame, OKV_REMOTE_HEADER_BYTES, OKV_REMOTE_MSG_OPEN, request_id);
    st = roundtrip(c, x, OKV_REMOTE_MSG_OPEN_OK, request_id, c->cfg.reply_timeout_s);
  }
  if (!st && c->ctrl.code != OKV_STATUS_OK) {
    char what[64];
    snprintf(what, sizeof what, "opening request %llu", (unsigned long long)request_id);
    st = ctrl_error(c, what);
    okv_free(&c->alloc, c->ctrl.admission);
    c->ctrl.admission = NULL;
  }
  if (!st) {
    cli_request_t r = {.id = request_id, .kv_bytes = c->ctrl.kv_bytes, .remote_base = c->ctrl.remote_base};
    bool want_get = c->data_ep && c->ctrl.rkey_bytes > 0;
    r.path = want_get ? OKV_REMOTE_PATH_GET : OKV_REMOTE_PATH_PUSH;
    if (want_get) {
      ucs_status_t us = ucp_ep_rkey_unpack(c->data_ep, c->ctrl.rkey, &r.rkey);
      if (us == UCS_OK) map_region(c, &r);
      if (us == UCS_OK && !r.mapped && c->cfg.path == OKV_REMOTE_PATH_AUTO) {
        /* AUTO takes one-sided gets only where the region is mapped here (shared memory): over tcp a get is
         * emulated with messages anyway and PUSH measured faster (docs/remote.md). */
        ucp_rkey_destroy(r.rkey);
        r.rkey = NULL;
        r.path = OKV_REMOTE_PATH_PUSH;
      }
      if (us != UCS_OK) {
        r.rkey = NULL;
        if (c->cfg.path == OKV_REMOTE_PATH_GET) {
          st = okv_remote_ucx_status(us, "unpacking the request's rkey");
        } else {
          r.path = OKV_REMOTE_PATH_PUSH; /* AUTO: reads go through the server instead */
        }
      }
    } else if (c->cfg.path == OKV_REMOTE_PATH_GET) {
      st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "remote server %s sent no rkey for request %llu", c->peer,
                           (unsigned long long)request_id);
    }
    if (!st) {
      c->reqs[c->n_reqs++] = r;
      *out_kv_bytes = r.kv_bytes;
      *out_admission = c->ctrl.admission;
      *out_admission_bytes = c->ctrl.admission_bytes;
    } else {
      okv_free(&c->alloc, c->ctrl.admission);
    }
    c->ctrl.admission = NULL;
  }
  pthread_mutex_unlock(&c->mu);
  pthread_mutex_unlock(&c->ctrl_mu);
  return st;
}

okv_status_t okv_remote_client_submit(okv_remote_client_t *c, const void *payload, uint32_t payload_bytes,
                                      double timeout_s, uint64_t *out_request_id) {
  if (!c || !payload || !out_request_id)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_client_submit: NULL pointer");
  *out_request_id = 0;
  if (payload_bytes == 0 || payload_bytes > OKV_REMOTE_SUBMIT_MAX_BYTES)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_client_submit: payload of %u bytes (1..65536)",
                           payload_bytes);
  if (!(timeout_s > 0))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_client_submit: timeout_s must be > 0");
  pthread_mutex_lock(&c->ctrl_mu);
  pthread_mutex_lock(&c->mu);
  okv_status_t st = OKV_OK;
  progress(c);
  cli_send_t *x = NULL;
  if (c->failed) {
    st = unavailable(c);
  } else {
    x = new_send(c, OKV_REMOTE_HEADER_BYTES + (size_t)payload_bytes);
    if (!x) st = okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_remote_client_submit: host allocator");
  }
  if (!st) {
    x->n =
        okv_remote_msg_encode_submit(x->frame, OKV_REMOTE_HEADER_BYTES + (size_t)payload_bytes, payload, payload_bytes);
    st = roundtrip(c, x, OKV_REMOTE_MSG_SUBMIT_OK, 0, timeout_s);
  }
  if (!st && c->ctrl.code != OKV_STATUS_OK) st = ctrl_error(c, "the job");
  if (!st) *out_request_id = c->ctrl.request_id;
  pthread_mutex_unlock(&c->mu);
  pthread_mutex_unlock(&c->ctrl_mu);
  return st;
}

okv_status_t okv_remote_client_request_path(okv_remote_client_t *c, uint64_t request_id, okv_remote_path_t *out_path) {
  if (!c || !out_path) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_client_request_path: NULL");
  pthread_mutex_lock(&c->mu);
  cli_request_t *r = find_req(c, request_id);
  if (r) *out_path = r->path;
  pthread_mutex_unlock(&c->mu);
  if (!r)
    return okv_status_make(OKV_STATUS_NOT_FOUND, "request %llu is not open on this client",
                           (unsigned long long)request_id);
  return OKV_OK;
}

okv_status_t okv_remote_client_close_request(okv_remote_client_t *c, uint64_t request_id) {
  if (!c) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_client_close_request: client NULL");
  pthread_mutex_lock(&c->ctrl_mu);
  pthread_mutex_lock(&c->mu);
  okv_status_t st = OKV_OK;
  cli_request_t *r = find_req(c, request_id);
  if (!r) {
    st = okv_status_make(OKV_STATUS_NOT_FOUND, "request %llu is not open on this client",
                         (unsigned long long)request_id);
  } else {
    /* This request's batches finish first (the server frees the region). */
    double deadline = okv_remote_now() + c->cfg.reply_timeout_s;
    for (;;) {
      bool pending = false;
      for (okv_remote_batch_t *b = c->batches; b; b = b->next)
        if (b->request_id == request_id && !batch_done(b)) pending = true;
      if (!pending || c->failed) break;
      if (okv_remote_now() > deadline) {
        lose(c, "reads of request %llu did not finish within %.1f s", (unsigned long long)request_id,
             c->cfg.reply_timeout_s);
        handle_loss(c);
        break;
      }
      wait_step(c, deadline - okv_remote_now());
    }
    if (!c->failed) {
      cli_send_t *x = new_send(c, OKV_REMOTE_HEADER_BYTES);
      if (!x) {
        st = okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_remote_client_close_request: host allocator");
      } else {
        x->n = okv_remote_msg_encode_empty(x->frame, OKV_REMOTE_HEADER_BYTES, OKV_REMOTE_MSG_CLOSE, request_id);
        st = roundtrip(c, x, OKV_REMOTE_MSG_CLOSE_OK, request_id, c->cfg.reply_timeout_s);
        if (!st && c->ctrl.code != OKV_STATUS_OK) {
          char what[64];
          snprintf(what, sizeof what, "closing request %llu", (unsigned long long)request_id);
          st = ctrl_error(c, what);
        }
      }
    } else {
      st = unavailable(c);
    }
    r = find_req(c, request_id); /* forgotten locally in every case */
    if (r) {
      if (r->rkey) ucp_rkey_destroy(r->rkey);
      okv_free(&c->alloc, r->populated);
      *r = c->reqs[--c->n_reqs];
    }
  }
  pthread_mutex_unlock(&c->mu);
  pthread_mutex_unlock(&c->ctrl_mu);
  return st;
}

/* ---- Public API: batches ---- */

static void get_cb(void *request, ucs_status_t status, void *user_data) {
  okv_remote_batch_t *b = user_data;
  b->ops_pending--;
  if (status == UCS_OK) {
    b->n_done++;
  } else {
    b->failed = true;
    lose(b->client, "a remote get failed (%s)", ucs_status_string(status));
  }
  ucp_request_free(request);
}

static void unlink_batch(okv_remote_client_t *c, okv_remote_batch_t *b) {
  if (b->prev)
    b->prev->next = b->next;
  else
    c->batches = b->next;
  if (b->next) b->next->prev = b->prev;
}

static void free_batch(okv_remote_client_t *c, okv_remote_batch_t *b) {
  okv_free(&c->alloc, b->gets);
  okv_free(&c->alloc, b->got);
  okv_free(&c->alloc, b);
}

/* Posts the batch's gets (GET) or READ messages (PUSH). Mutex held. */
static void post_batch(okv_remote_client_t *c, okv_remote_batch_t *b, cli_request_t *r) {
  if (b->path == OKV_REMOTE_PATH_GET && r->mapped) {
    for (uint32_t i = 0; i < b->n; ++i) {
      const okv_remote_get_t *g = &b->gets[i];
      populate(r, g->remote_offset, g->bytes);
      memcpy(g->local_ptr, r->mapped + g->remote_offset, g->bytes);
    }
    b->n_done = b->n;
    return;
  }
  if (b->path == OKV_REMOTE_PATH_GET) {
    ucp_request_param_t p;
    memset(&p, 0, sizeof p);
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = get_cb;
    p.user_data = b;
    for (uint32_t i = 0; i < b->n && !c->lost; ++i) {
      const okv_remote_get_t *g = &b->gets[i];
      ucs_status_ptr_t q =
          ucp_get_nbx(c->data_ep, g->local_ptr, g->bytes, r->remote_base + g->remote_offset, r->rkey, &p);
      if (q == NULL) {
        b->n_done++;
      } else if (UCS_PTR_IS_ERR(q)) {
        b->failed = true;
        lose(c, "posting a remote get failed (%s)", ucs_status_string(UCS_PTR_STATUS(q)));
      } else {
        b->ops_pending++;
      }
    }
    return;
  }
  uint32_t per = c->max_read_entries ? c->max_read_entries : OKV_REMOTE_READ_MAX_ENTRIES;
  uint32_t most = b->n < per ? b->n : per;
  uint64_t *offs = okv_malloc(&c->alloc, most * sizeof *offs), *lens = okv_malloc(&c->alloc, most * sizeof *lens);
  for (uint32_t first = 0; first < b->n && !c->lost; first += per) {
    uint32_t k = b->n - first < per ? b->n - first : per;
    size_t cap = OKV_REMOTE_HEADER_BYTES + 8u + 16u * (size_t)k;
    cli_send_t *x = offs && lens ? new_send(c, cap) : NULL;
    if (!x) {
      b->failed = true;
      lose(c, "out of host memory posting READ messages");
      break;
    }
    for (uint32_t i = 0; i < k; ++i) {
      offs[i] = b->gets[first + i].remote_offset;
      lens[i] = b->gets[first + i].bytes;
    }
    x->n = okv_remote_msg_encode_read(x->frame, cap, b->request_id, b->id, first, k, offs, lens);
    x->batch = b;
    post(c, x);
  }
  okv_free(&c->alloc, offs);
  okv_free(&c->alloc, lens);
}

okv_status_t okv_remote_client_get_batch(okv_remote_client_t *c, uint64_t request_id, uint32_t n_gets,
                                         const okv_remote_get_t *gets, okv_remote_batch_t **out_batch) {
  if (!out_batch) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_client_get_batch: out_batch NULL");
  *out_batch = NULL;
  if (!c || !gets) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_client_get_batch: NULL pointer");
  if (n_gets == 0 || n_gets > (1u << 31))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_client_get_batch: %u gets (1..2^31)", n_gets);
  pthread_mutex_lock(&c->mu);
  okv_status_t st = OKV_OK;
  maybe_progress(c);
  cli_request_t *r = NULL;
  if (c->failed) {
    st = unavailable(c);
  } else if (!(r = find_req(c, request_id))) {
    st = okv_status_make(OKV_STATUS_NOT_FOUND, "request %llu is not open on this client",
                         (unsigned long long)request_id);
  }
  uint64_t total = 0;
  for (uint32_t i = 0; !st && i < n_gets; ++i) {
    const okv_remote_get_t *g = &gets[i];
    if (!g->local_ptr || g->bytes == 0 || g->bytes > OKV_REMOTE_GET_MAX_BYTES)
      st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "get %u: %s", i,
                           g->local_ptr ? "bytes must be in 1..2^30" : "local_ptr NULL");
    else if (g->remote_offset >= r->kv_bytes || g->bytes > r->kv_bytes - g->remote_offset)
      st = okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "get %u: bytes [%llu, %llu) outside request %llu's region of %llu bytes", i,
                           (unsigned long long)g->remote_offset, (unsigned long long)g->remote_offset + g->bytes,
                           (unsigned long long)request_id, (unsigned long long)r->kv_bytes);
    else
      total += g->bytes;
  }
  okv_remote_batch_t *b = NULL;
  if (!st) {
    b = okv_calloc(&c->alloc, 1, sizeof *b);
    if (b) b->gets = okv_malloc(&c->alloc, (size_t)n_gets * sizeof *gets);
    if (b && r->path == OKV_REMOTE_PATH_PUSH) b->got = okv_calloc(&c->alloc, n_gets, 1);
    if (!b || !b->gets || (r->path == OKV_REMOTE_PATH_PUSH && !b->got)) {
      if (b) free_batch(c, b);
      b = NULL;
      st = okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "okv_remote_client_get_batch: %u gets", n_gets);
    }
  }
  if (!st) {
    memcpy(b->gets, gets, (size_t)n_gets * sizeof *gets);
    b->client = c;
    b->id = c->next_batch_id++;
    b->request_id = request_id;
    b->path = r->path;
    b->n = n_gets;
    b->bytes = total;
    b->next = c->batches;
    if (c->batches) c->batches->prev = b;
    c->batches = b;
    post_batch(c, b, r);
    if (c->lost) {
      handle_loss(c); /* completes (or abandons) what was posted */
      st = unavailable(c);
      unlink_batch(c, b);
      if (b->abandoned && b->ops_pending) {
        b->next = c->abandoned;
        c->abandoned = b;
      } else {
        free_batch(c, b);
      }
      b = NULL;
    }
  }
  pthread_mutex_unlock(&c->mu);
  *out_batch = b;
  return st;
}

/* Mutex held: OK, or UNAVAILABLE when the batch failed (done). */
static okv_status_t batch_status(okv_remote_batch_t *b, bool *out_done) {
  *out_done = batch_done(b);
  if (*out_done && (b->failed || b->n_done != b->n)) return unavailable(b->client);
  return OKV_OK;
}

okv_status_t okv_remote_batch_test(okv_remote_batch_t *b, bool *out_done) {
  if (!b || !out_done) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_batch_test: NULL");
  okv_remote_client_t *c = b->client;
  pthread_mutex_lock(&c->mu);
  if (!batch_done(b)) progress(c);
  okv_status_t st = batch_status(b, out_done);
  pthread_mutex_unlock(&c->mu);
  return st;
}

okv_status_t okv_remote_batch_wait(okv_remote_batch_t *b, double timeout_s, bool *out_done) {
  if (!b || !out_done) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_batch_wait: NULL");
  *out_done = false;
  if (!(timeout_s >= 0) || isinf(timeout_s))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_remote_batch_wait: timeout_s must be finite and >= 0");
  okv_remote_client_t *c = b->client;
  double deadline = okv_remote_now() + timeout_s;
  pthread_mutex_lock(&c->mu);
  if (!batch_done(b)) progress(c);
  while (!batch_done(b)) {
    double left = deadline - okv_remote_now();
    if (left <= 0) break;
    wait_step(c, left);
  }
  okv_status_t st = batch_status(b, out_done);
  pthread_mutex_unlock(&c->mu);
  return st;
}

uint64_t okv_remote_batch_bytes(const okv_remote_batch_t *b) { return b ? b->bytes : 0; }

void okv_remote_batch_release(okv_remote_batch_t *b) {
  if (!b) return;
  okv_remote_client_t *c = b->client;
  pthread_mutex_lock(&c->mu);
  double deadline = okv_remote_now() + c->cfg.reply_timeout_s;
  while (!batch_done(b)) {
    if (okv_remote_now() > deadline) {
      lose(c, "a released batch did not finish within %.1f s", c->cfg.reply_timeout_s);
      handle_loss(c); /* cancels its operations: nothing writes into its buffers after this */
      break;
    }
    wait_step(c, deadline - okv_remote_now());
  }
  unlink_batch(c, b);
  if (b->abandoned && b->ops_pending) {
    b->next = c->abandoned; /* a late callback must find it: freed with the client */
    c->abandoned = b;
  } else {
    free_batch(c, b);
  }
  pthread_mutex_unlock(&c->mu);
}
